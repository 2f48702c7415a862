//! Runs slices on a tensor larger than the adapter's real `max_buffer_size` (so it is held in
//! two GPU buffers) and checks every byte against the CPU. The tests do the same on artificial
//! limits of a few hundred bytes; this shows it at the device's own limit.
//!
//! `cargo run --release --example beyond_max_buffer [-- EXTRA_MIB]` (default 64 MiB beyond the
//! limit). Needs about five times the tensor's size in memory on a software adapter (host
//! data, input and output tensors, a download's staging buffers and result); it does not try
//! when the limit is above 4 GiB.

use std::time::Instant;

use wgpu_ops::{Context, HostTensor, Slice, StridedSlice, Tensor};

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
    let n = ((max + (extra_mib << 20)) / 4) as usize;
    let host = HostTensor::from_bytes(
        wgpu_ops::DType::U32,
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
    Ok(())
}
