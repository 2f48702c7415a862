//! Runs slices on a tensor larger than the adapter's real `max_buffer_size` (so it is held in
//! two GPU buffers) and checks every byte against the CPU, then sums its columns as rows of 7
//! (a reduction whose chunks step across the buffer end). The tests do the same on artificial
//! limits of a few hundred bytes; this shows it at the device's own limit.
//!
//! `cargo run --release --example beyond_max_buffer [-- EXTRA_MIB]` (default 64 MiB beyond the
//! limit). Needs about five times the tensor's size in memory on a software adapter (host
//! data, input and output tensors, a download's staging buffers and result); it does not try
//! when the limit is above 4 GiB.

use std::time::Instant;

use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::{Context, DType, HostTensor, Session, Slice, StridedSlice, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let extra_mib: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64);
    let ctx = Context::new_blocking(Default::default())?;
    let max = ctx.max_buffer_size();
    println!("adapter: {}", ctx.adapter_info().name);
    println!("max_buffer_size: {max} bytes");
    if max > 4 << 30 {
        println!("the limit is above 4 GiB: not tried here");
        return Ok(());
    }
    // A whole number of rows of 7 (28 bytes, which no buffer holds a whole number of) for
    // the column sums below.
    let n = ((max + (extra_mib << 20)) / 4) as usize / 7 * 7;
    let host = HostTensor::from_bytes(
        DType::U32,
        vec![n],
        (0..n as u32)
            .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
            .collect(),
    )?;
    let start = Instant::now();
    let x = Tensor::from_host(&ctx, &host)?;
    println!(
        "uploaded {} bytes into {} buffers in {:.1} s",
        n * 4,
        x.buffers().len(),
        start.elapsed().as_secs_f64()
    );
    assert!(x.buffers().len() > 1, "the tensor fits one buffer");
    let mid = (max / 4) as i64;
    let reversed = StridedSlice::new([0], [0])
        .stride([-1])
        .begin_mask([1])
        .end_mask([1]);
    let across = Slice::new([mid - 1000], [mid + 1000], [1]);
    let strided = Slice::new([1], [i64::MAX], [3]);
    // Output element i reads input element source(i); checked word by word, since a CPU
    // reference copy of this size would not fit in memory next to the GPU's.
    type Run<'a> = Box<dyn Fn() -> wgpu_ops::Result<Tensor> + 'a>;
    type Source = Box<dyn Fn(usize) -> usize>;
    let cases: [(&str, Run, Source); 3] = [
        (
            "x[::-1]",
            Box::new(|| reversed.run(&x)),
            Box::new(move |i| n - 1 - i),
        ),
        (
            "x[mid-1000:mid+1000] (one copy across the buffer end)",
            Box::new(|| across.run(&x)),
            Box::new(move |i| mid as usize - 1000 + i),
        ),
        (
            "x[1::3]",
            Box::new(|| strided.run(&x)),
            Box::new(|i| 1 + 3 * i),
        ),
    ];
    for (name, run, source) in cases {
        let start = Instant::now();
        let got = run()?.to_host_blocking()?;
        let secs = start.elapsed().as_secs_f64();
        let data = &host.data;
        let wrong = got
            .data
            .chunks_exact(4)
            .enumerate()
            .find(|(i, word)| **word != data[source(*i) * 4..source(*i) * 4 + 4]);
        if let Some((i, _)) = wrong {
            return Err(format!("{name}: element {i} differs from the input's").into());
        }
        println!(
            "{name}: {} bytes identical ({secs:.1} s with the download)",
            got.data.len()
        );
    }
    // Sums over the first axis of x as [n / 7, 7]: each column's chunks step across the
    // buffer end, so they are read from a copy laid out in whole chunks. u32 sums wrap, so
    // the host's sums are exact.
    let rows = n / 7;
    let graph = Graph::new()
        .input("x", DType::U32, &[Some(rows), Some(7)])
        .node(
            Node::new("ReduceSum", "column_sums")
                .inputs(["x"])
                .outputs(["y"])
                .attr("axes", Attr::Ints(vec![0])),
        )
        .output("y");
    let session = Session::new(&ctx, graph)?;
    let start = Instant::now();
    let outputs = session.run_tensors_blocking(vec![("x".into(), x.reshaped(&[rows, 7])?)])?;
    let got = outputs[0].1.to_host_blocking()?.to_vec::<u32>()?;
    let secs = start.elapsed().as_secs_f64();
    let mut want = [0u32; 7];
    for (i, word) in host.data.chunks_exact(4).enumerate() {
        let v = u32::from_le_bytes(word.try_into().expect("a word"));
        want[i % 7] = want[i % 7].wrapping_add(v);
    }
    if got != want {
        return Err(format!("column sums {got:?} differ from the host's {want:?}").into());
    }
    println!(
        "ReduceSum over axis 0 of [{rows}, 7]: the host's sums ({secs:.1} s with the download)"
    );
    Ok(())
}
