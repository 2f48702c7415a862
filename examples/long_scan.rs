//! Long and nested Scans: time, dispatches and the process's peak memory.
//!
//! `cargo run --release --example long_scan -- [ITERATIONS] [--nested LEVELS] [--check]`
//!
//! The body is a running sum of rows of 4 f32 (`Add`, `Identity`: one dispatch and one copy per
//! iteration besides the scan-input read). With `--nested L`, the graph is L Scans nested inside
//! each other, each over ITERATIONS steps, so the innermost body runs ITERATIONS^L times.
//! `--check` compares the result with the CPU interpreter (only for small runs). Peak memory is
//! the process's high-water mark (`VmHWM` of /proc/self/status, Linux) after the run, printed
//! with the mark before the run for comparison.

use std::time::Instant;

use wgpu_ops::graph::{Attr, Graph, Node, ValueInfo};
use wgpu_ops::{Context, ContextOptions, DType, HostTensor, Session};

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// A Scan over `x` ([n, ..., 4]) carrying a [4] running sum; `inner` (if any) is a body graph
/// run on each element instead of the plain `Add`.
fn level(depth: usize) -> Graph {
    let elem_shape: Vec<Option<usize>> =
        std::iter::repeat_n(None, depth).chain([Some(4)]).collect();
    let mut body =
        Graph::new()
            .input("sum", DType::F32, &[Some(4)])
            .input("row", DType::F32, &elem_shape);
    if depth == 0 {
        body = body
            .node(
                Node::new("Add", "add")
                    .inputs(["sum", "row"])
                    .outputs(["next"]),
            )
            .node(
                Node::new("Identity", "emit")
                    .inputs(["next"])
                    .outputs(["out"]),
            );
    } else {
        // The element is itself a sequence: scan it with the level below, from this sum.
        body = body
            .node(
                Node::new("Scan", format!("scan{depth}"))
                    .inputs(["sum", "row"])
                    .outputs(["next", "inner_out"])
                    .attr("body", Attr::Graph(Box::new(level(depth - 1))))
                    .attr("num_scan_inputs", Attr::Int(1)),
            )
            .node(
                Node::new("Identity", "emit")
                    .inputs(["next"])
                    .outputs(["out"]),
            );
    }
    body.outputs = vec![
        ValueInfo::named("next"),
        ValueInfo {
            name: "out".into(),
            dtype: Some(DType::F32),
            shape: Some(vec![Some(4)]),
            kind: Default::default(),
        },
    ];
    body
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut iterations = 200_000usize;
    let mut levels = 1usize;
    let mut check = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--nested" => levels = it.next().ok_or("--nested LEVELS")?.parse()?,
            "--check" => check = true,
            n => iterations = n.parse()?,
        }
    }
    let ctx = Context::new_blocking(ContextOptions::default())?;
    println!("adapter: {}", ctx.adapter_info().name);
    let mut shape = vec![iterations; levels];
    shape.push(4);
    let numel: usize = shape.iter().product();
    let x = HostTensor::from_vec(
        shape.clone(),
        &(0..numel).map(|i| (i % 7) as f32).collect::<Vec<_>>(),
    )?;
    let zero = HostTensor::from_vec(vec![4], &[0f32; 4])?;
    let built = Instant::now();
    let graph = Graph::new()
        .input(
            "x",
            DType::F32,
            &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
        )
        .constant("zero", zero)
        .node(
            Node::new("Scan", "scan")
                .inputs(["zero", "x"])
                .outputs(["total", "rows"])
                .attr("body", Attr::Graph(Box::new(level(levels - 1))))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("total");
    eprintln!("built: {:.3} s", built.elapsed().as_secs_f64());
    let planned = Instant::now();
    let session = Session::new(&ctx, graph.clone())?;
    eprintln!("session: {:.3} s", planned.elapsed().as_secs_f64());
    let before_mib = peak_rss_mib();
    let stats = ctx.stats();
    let start = Instant::now();
    let out = session.run_blocking(vec![("x".into(), x.clone())])?;
    let seconds = start.elapsed().as_secs_f64();
    let after = ctx.stats();
    let runs = (iterations as f64).powi(levels as i32);
    println!(
        "{levels} level(s) of {iterations} iterations: {runs:.0} body runs in {seconds:.2} s \
         ({:.1} µs per body run), {} dispatches, {} submissions, {} buffers created",
        seconds * 1e6 / runs,
        after.dispatches - stats.dispatches,
        after.submissions - stats.submissions,
        after.buffers_created - stats.buffers_created,
    );
    if let (Some(b), Some(a)) = (before_mib, peak_rss_mib()) {
        println!("peak memory: {a:.0} MiB (before the run: {b:.0} MiB)");
    }
    let total = out[0].1.to_vec::<f32>()?;
    let want: f32 = (0..numel / 4).map(|i| ((i * 4) % 7) as f32).sum();
    println!("total[0] = {} (expected {want})", total[0]);
    if check {
        let cpu =
            wgpu_ops::reference::graph::run_graph(&graph, &[("x".into(), x)], &Default::default())?;
        assert_eq!(cpu[0], out[0].1, "GPU and CPU interpreter differ");
        println!("check: identical to the CPU interpreter");
    }
    Ok(())
}
