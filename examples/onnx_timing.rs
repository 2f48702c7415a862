//! Runs an ONNX model on the GPU several times and reports the time per run (after a first run
//! that builds the pipelines), then writes the outputs as `.npy` files for comparison.
//!
//! `cargo run --release --example onnx_timing -- MODEL.onnx OUT_DIR RUNS [--node-by-node]
//! NAME=FILE.npy...` (`scripts/linear_attention_vs_onnxruntime.py` drives it against
//! onnxruntime). Prints the dispatches of a run; `--node-by-node` also times the model with
//! element-wise chains not fused (a second context), for the comparison.
//! `WGPU_OPS_CPU_KERNELS=0|1` chooses the kernel set as in the tests.

use std::time::Instant;

use wgpu_ops::{npy, onnx::Model, Context, ContextOptions, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, out, runs, inputs @ ..] = args.as_slice() else {
        eprintln!("usage: onnx_timing MODEL.onnx OUT_DIR RUNS [--node-by-node] NAME=FILE.npy...");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let (node_by_node, inputs) = match inputs {
        [flag, rest @ ..] if flag == "--node-by-node" => (true, rest),
        _ => (false, inputs),
    };
    // WGPU_OPS_CPU_KERNELS=0 takes the GPUs' kernels on a CPU adapter, as the tests do (for
    // the dispatch counts of GPUs on lavapipe).
    let options = ContextOptions {
        cpu_kernels: std::env::var("WGPU_OPS_CPU_KERNELS").ok().map(|v| v != "0"),
        ..Default::default()
    };
    let ctx = Context::new_blocking(options.clone())?;
    let info = ctx.adapter_info();
    let values: Vec<_> = inputs
        .iter()
        .map(|a| {
            let (name, file) = a.split_once('=').expect("NAME=FILE.npy");
            Ok((name.to_string(), npy::read(std::path::Path::new(file))?))
        })
        .collect::<Result<_>>()?;
    let session = Model::load(model)?.session(&ctx)?;
    let first = Instant::now();
    let before = ctx.stats().dispatches;
    let mut outputs = session.run_blocking(values.clone())?;
    let dispatches = ctx.stats().dispatches - before;
    let first = first.elapsed();
    let mut times = Vec::with_capacity(runs);
    // `run` takes its inputs by value: the copies are made before the clock starts, as a
    // caller that owns its inputs would hand them over (onnxruntime's timing copies nothing).
    let mut copies: Vec<_> = (0..runs).map(|_| values.clone()).collect();
    while let Some(inputs) = copies.pop() {
        let t = Instant::now();
        outputs = session.run_blocking(inputs)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "adapter: {} ({:?})\nfirst run (pipelines built): {:.1} ms\nmedian of {runs} runs: {:.1} ms",
        info.name,
        info.backend,
        first.as_secs_f64() * 1e3,
        median * 1e3
    );
    println!("dispatches per run: {dispatches}");
    if node_by_node {
        let plain = Context::new_blocking(ContextOptions {
            fuse_elementwise: Some(false),
            ..options
        })?;
        let session = Model::load(model)?.session(&plain)?;
        session.run_blocking(values.clone())?;
        let before = plain.stats().dispatches;
        let t = Instant::now();
        session.run_blocking(values.clone())?;
        println!(
            "node by node (element-wise chains not fused): {:.1} ms, dispatches per run: {}",
            t.elapsed().as_secs_f64() * 1e3,
            plain.stats().dispatches - before
        );
    }
    std::fs::create_dir_all(out).expect("OUT_DIR can be made");
    for (name, t) in &outputs {
        npy::write(&std::path::Path::new(out).join(format!("{name}.npy")), t)?;
    }
    Ok(())
}
