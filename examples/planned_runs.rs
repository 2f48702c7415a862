//! Host and total time of a session's planned runs: every run planned and recorded
//! (`Session::set_replay(false)`), the tensors on the GPU, one line per measure. With
//! `--replayed` the runs replay the first one's commands instead (same shapes).
//!
//! `cargo run --release --example planned_runs -- [--replayed] MODEL.onnx RUNS NAME=FILE.npy...`
//! (`bench/planned_runs_lavapipe.txt` ran two builds of it in turn). 'host' is the time until
//! `run_tensors` returns, 'total' until the GPU has finished the run.

use wgpu_ops::{npy, onnx::Model, Context, ContextOptions, Result};

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let replayed = args.first().is_some_and(|a| a == "--replayed");
    if replayed {
        args.remove(0);
    }
    let [model, runs, inputs @ ..] = args.as_slice() else {
        eprintln!("usage: planned_runs [--replayed] MODEL.onnx RUNS NAME=FILE.npy...");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let runs = runs.max(1);
    let ctx = Context::new_blocking(ContextOptions::default())?;
    let resident: Vec<_> = inputs
        .iter()
        .map(|a| {
            let (name, file) = a.split_once('=').expect("NAME=FILE.npy");
            let value = npy::read(std::path::Path::new(file))?;
            Ok((name.to_string(), wgpu_ops::Tensor::from_host(&ctx, &value)?))
        })
        .collect::<Result<_>>()?;
    let session = Model::load(model)?.session(&ctx)?;
    // The first run builds the pipelines and keeps the values computed from constants.
    session.run_tensors_blocking(resident.clone())?;
    session.set_replay(replayed);
    let (mut host, mut total) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let start = std::time::Instant::now();
        let outputs = session.run_tensors_blocking(resident.clone())?;
        host.push(start.elapsed().as_secs_f64() * 1e6);
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("the run finishes");
        drop(outputs);
        total.push(start.elapsed().as_secs_f64() * 1e6);
    }
    host.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    println!(
        "adapter: {}\ntotal us: median {:.0} host us: median {:.0} p10 {:.0} min {:.0}",
        ctx.adapter_info().name,
        total[runs / 2],
        host[runs / 2],
        host[runs / 10],
        host[0]
    );
    Ok(())
}
