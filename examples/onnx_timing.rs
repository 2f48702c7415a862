//! Runs an ONNX model on the GPU several times and reports the time per run (after a first run
//! that builds the pipelines), then writes the outputs as `.npy` files for comparison.
//!
//! `cargo run --release --example onnx_timing -- MODEL.onnx OUT_DIR RUNS NAME=FILE.npy...`
//! (`scripts/linear_attention_vs_onnxruntime.py` drives it against onnxruntime.)

use std::time::Instant;

use wgpu_ops::{npy, onnx::Model, Context, ContextOptions, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, out, runs, inputs @ ..] = args.as_slice() else {
        eprintln!("usage: onnx_timing MODEL.onnx OUT_DIR RUNS NAME=FILE.npy...");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let ctx = Context::new_blocking(ContextOptions::default())?;
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
    let mut outputs = session.run_blocking(values.clone())?;
    let first = first.elapsed();
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        outputs = session.run_blocking(values.clone())?;
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
    std::fs::create_dir_all(out).expect("OUT_DIR can be made");
    for (name, t) in &outputs {
        npy::write(&std::path::Path::new(out).join(format!("{name}.npy")), t)?;
    }
    Ok(())
}
