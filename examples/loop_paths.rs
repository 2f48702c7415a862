//! The two ways an ONNX Loop runs, timed in one process on the same adapter: the same
//! recurrence (h = tanh(h + X[i]) over the rows of X, each h a scan output) written as a body
//! that gathers row i (the iteration number stays on the GPU: the Loop runs as a Scan, its
//! body planned once and replayed) and as a body that slices row i (the Slice is planned from
//! the iteration number: the Loop is unrolled, its body planned once per iteration). Both
//! results are compared. Prints time per iteration (median of 5 runs after a warm-up) and
//! the ratio.
//!
//! `cargo run --release --example loop_paths -- [ITERATIONS] [WIDTH]`

use std::time::Instant;

use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::{Context, DType, HostTensor, Session};

fn scalar<T: wgpu_ops::Element>(v: T) -> HostTensor {
    HostTensor::from_vec(vec![], &[v]).unwrap()
}

/// The Loop over `m` rows of `X` [m, width]; `slice`: row i by a Slice (else by a Gather).
fn graph(m: usize, width: usize, slice: bool) -> Graph {
    let mut body = Graph::new()
        .input("i", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .input("h", DType::F32, &[Some(width)])
        .node(
            Node::new("Identity", "keep")
                .inputs(["cond"])
                .outputs(["cond_out"]),
        );
    body = if slice {
        body.constant("zero", HostTensor::from_vec(vec![1], &[0i64]).unwrap())
            .constant("one", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
            .node(
                Node::new("Unsqueeze", "start")
                    .inputs(["i", "zero"])
                    .outputs(["start"]),
            )
            .node(
                Node::new("Add", "end")
                    .inputs(["start", "one"])
                    .outputs(["end"]),
            )
            .node(
                Node::new("OnnxSlice", "slice")
                    .inputs(["X", "start", "end"])
                    .outputs(["rows"]),
            )
            .node(
                Node::new("Squeeze", "row")
                    .inputs(["rows", "zero"])
                    .outputs(["row"]),
            )
    } else {
        body.node(
            Node::new("Gather", "row")
                .inputs(["X", "i"])
                .outputs(["row"]),
        )
    };
    body = body
        .node(
            Node::new("Add", "sum")
                .inputs(["h", "row"])
                .outputs(["sum"]),
        )
        .node(
            Node::new("Tanh", "h_out")
                .inputs(["sum"])
                .outputs(["h_out"]),
        )
        .node(
            Node::new("Identity", "hs")
                .inputs(["h_out"])
                .outputs(["hs"]),
        )
        .output("cond_out")
        .output("h_out")
        .output("hs");
    Graph::new()
        .input("X", DType::F32, &[Some(m), Some(width)])
        .input("h0", DType::F32, &[Some(width)])
        .constant("m", scalar(m as i64))
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "h0"])
                .outputs(["h", "hs"])
                .attr("body", Attr::Graph(Box::new(body))),
        )
        .output("h")
        .output("hs")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let m: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let width: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let ctx = Context::new_blocking(Default::default()).expect("an adapter");
    let info = ctx.adapter_info();
    println!(
        "adapter: {} ({:?}, {}); {m} iterations of h = tanh(h + X[i]), width {width}",
        info.name, info.backend, info.driver_info
    );
    let x: Vec<f32> = (0..m * width)
        .map(|k| ((k * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let x = HostTensor::from_vec(vec![m, width], &x).unwrap();
    let h0 = HostTensor::from_vec(vec![width], &vec![0.1f32; width]).unwrap();
    let mut results = Vec::new();
    for (label, slice) in [
        ("as a Scan (Gather at i)", false),
        ("unrolled (Slice at i)", true),
    ] {
        let session = Session::new(&ctx, graph(m, width, slice)).unwrap();
        let inputs = vec![("X".to_string(), x.clone()), ("h0".to_string(), h0.clone())];
        let mut out = session.run_blocking(inputs.clone()).unwrap();
        let mut times = Vec::new();
        for _ in 0..5 {
            let start = Instant::now();
            out = session.run_blocking(inputs.clone()).unwrap();
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let per = times[2] / m as f64 * 1e6;
        println!(
            "{label:<26} {per:>9.1} us per iteration ({:.3} s per run)",
            times[2]
        );
        results.push((per, out));
    }
    let (scan, unrolled) = (&results[0].1, &results[1].1);
    for ((name, a), (_, b)) in scan.iter().zip(unrolled) {
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-5, "{name}: the two runs differ by {worst}");
    }
    println!(
        "unrolled / Scan: {:.1}x per iteration; outputs agree within 1e-5",
        results[1].0 / results[0].0
    );
}
