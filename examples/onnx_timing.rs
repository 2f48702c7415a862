//! Runs an ONNX model on the GPU several times and reports the time per run (after a first run
//! that builds the pipelines), then writes the outputs as `.npy` files for comparison.
//!
//! `cargo run --release --example onnx_timing -- MODEL.onnx OUT_DIR RUNS [--node-by-node]
//! [--copied-elements] [--iterated-scans] [--profile] NAME=FILE.npy...`
//! (`scripts/linear_attention_vs_onnxruntime.py` drives it against onnxruntime). Prints the
//! dispatches and copies of a run, and how many Scans ran as a recurrence's own kernel;
//! `--node-by-node` also times the model with element-wise chains not fused,
//! `--copied-elements` with every Scan element copied in and out instead of bound in place,
//! `--iterated-scans` with every Scan iterating its body (each in a second context), for the
//! comparison. Also times runs on inputs already on the GPU with the outputs left there
//! (`Session::run_tensors`): the total and the host's part. `--profile` then times each
//! dispatch of one such run on the GPU (`Context::start_profile`) and prints the time by
//! kernel.
//! `WGPU_OPS_CPU_KERNELS=0|1` chooses the kernel set as in the tests.

use std::time::Instant;

use wgpu_ops::{npy, onnx::Model, Context, ContextOptions, HostTensor, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, out, runs, inputs @ ..] = args.as_slice() else {
        eprintln!("usage: onnx_timing MODEL.onnx OUT_DIR RUNS [--node-by-node] [--copied-elements] [--iterated-scans] [--profile] NAME=FILE.npy...");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let flags: Vec<&str> = inputs
        .iter()
        .map(String::as_str)
        .take_while(|a| a.starts_with("--"))
        .collect();
    let inputs = &inputs[flags.len()..];
    const FLAGS: [&str; 4] = [
        "--node-by-node",
        "--copied-elements",
        "--iterated-scans",
        "--profile",
    ];
    if let Some(unknown) = flags.iter().find(|f| !FLAGS.contains(f)) {
        eprintln!(
            "error: onnx_timing: unknown flag '{}' (known: {})",
            unknown.escape_debug(),
            FLAGS.join(" ")
        );
        std::process::exit(2);
    }
    let node_by_node = flags.contains(&"--node-by-node");
    let copied_elements = flags.contains(&"--copied-elements");
    let iterated_scans = flags.contains(&"--iterated-scans");
    let profile = flags.contains(&"--profile");
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
    let before = ctx.stats();
    let mut outputs = session.run_blocking(values.clone())?;
    let after = ctx.stats();
    let (dispatches, copy_commands, recurrences) = (
        after.dispatches - before.dispatches,
        after.copies - before.copies,
        after.scans_as_recurrences - before.scans_as_recurrences,
    );
    let first = first.elapsed();
    // Later runs: values computed from constants alone are the first run's (see `Session`).
    let later_before = ctx.stats();
    let replayed_before = session.replayed_runs();
    let mut times = Vec::with_capacity(runs);
    // `run` takes its inputs by value: the copies are made before the clock starts, as a
    // caller that owns its inputs would hand them over (onnxruntime's timing copies nothing).
    let mut copies: Vec<_> = (0..runs).map(|_| values.clone()).collect();
    while let Some(inputs) = copies.pop() {
        let t = Instant::now();
        outputs = session.run_blocking(inputs)?;
        times.push(t.elapsed().as_secs_f64());
    }
    let later = ctx.stats();
    let replayed = session.replayed_runs() - replayed_before;
    let per_run = |n: u64| n as f64 / runs.max(1) as f64;
    let buffers = per_run(later.buffers_created - later_before.buffers_created);
    let later_dispatches = per_run(later.dispatches - later_before.dispatches);
    let later_copies = per_run(later.copies - later_before.copies);
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "adapter: {} ({:?})\nfirst run (pipelines built): {:.1} ms\nmedian of {runs} runs: {:.3} ms (runs replayed: {replayed}, inputs uploaded first: {})",
        info.name,
        info.backend,
        first.as_secs_f64() * 1e3,
        median * 1e3,
        session.uploads_inputs_first()
    );
    println!(
        "first run: {dispatches} dispatches, {copy_commands} copies\ndispatches per run: \
         {later_dispatches:.1}, copies per run: {later_copies:.1}, buffers created per later run: \
         {buffers:.1}\nScans run as a recurrence's kernel: {recurrences}"
    );
    // The same runs on inputs already on the GPU, outputs left there (`run_tensors`): the
    // model's own time without the transfers, and the host's part of it (until the last
    // submission returns); onnxruntime's inputs and outputs are in host memory already.
    let resident: Vec<_> = values
        .iter()
        .map(|(n, v)| Ok((n.clone(), wgpu_ops::Tensor::from_host(&ctx, v)?)))
        .collect::<Result<_>>()?;
    // Planned and recorded: what the replayed runs below must compute.
    let planned_outputs: Vec<HostTensor> = session
        .run_tensors_blocking(resident.clone())?
        .iter()
        .map(|(_, t)| t.to_host_blocking())
        .collect::<Result<_>>()?;
    // The median run's total and host seconds (until the last submission returns). Each
    // run's outputs are dropped before the next, which then takes their buffers.
    let median_resident_run = || -> Result<(f64, f64)> {
        let mut times: Vec<(f64, f64)> = (0..runs.max(1))
            .map(|_| {
                let t = Instant::now();
                let outputs = session.run_tensors_blocking(resident.clone())?;
                let host = t.elapsed().as_secs_f64();
                ctx.device()
                    .poll(wgpu::PollType::wait_indefinitely())
                    .expect("the run finishes");
                drop(outputs);
                Ok((t.elapsed().as_secs_f64(), host))
            })
            .collect::<Result<_>>()?;
        times.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(times[times.len() / 2])
    };
    let resident_before = ctx.stats().buffers_created;
    let (total, host) = median_resident_run()?;
    let resident_buffers =
        (ctx.stats().buffers_created - resident_before) as f64 / runs.max(1) as f64;
    println!(
        "tensors on the GPU: median {:.3} ms per run, host {:.3} ms (until the last submission returns), buffers created per run {resident_buffers:.1}, runs replayed {}",
        total * 1e3,
        host * 1e3,
        session.replayed_runs()
    );
    // A replayed run computes what the planned one did, bit for bit.
    let replayed_before = session.replayed_runs();
    let last = session.run_tensors_blocking(resident.clone())?;
    let replayed = session.replayed_runs() > replayed_before;
    if !replayed {
        // Planned anew (a random draw, say): nothing to hold it to.
        eprintln!("note: the runs with the tensors on the GPU were not replayed");
    }
    for ((name, got), want) in last.iter().zip(&planned_outputs).filter(|_| replayed) {
        if got.to_host_blocking()? != *want {
            eprintln!("error: output '{name}' of a replayed run differs from the planned run's");
            std::process::exit(1);
        }
    }
    drop(last);
    if profile {
        // One replayed run with every dispatch timed on the GPU, by kernel.
        match ctx.start_profile(2048) {
            Ok(()) => {
                let outputs = session.run_tensors_blocking(resident.clone())?;
                let profile = ctx.take_profile_blocking()?;
                drop(outputs);
                println!(
                    "profile of one run (each dispatch in a compute pass of its own):\n{}",
                    profile.table(100)
                );
            }
            Err(e) => eprintln!("note: no profile: {e}"),
        }
    }
    // The same with every run planned and recorded (no replay), in the same process.
    session.set_replay(false);
    let (total, host) = median_resident_run()?;
    println!(
        "tensors on the GPU, every run planned (no replay): median {:.3} ms per run, host {:.3} ms",
        total * 1e3,
        host * 1e3
    );
    let variants = [
        (
            node_by_node,
            "node by node (element-wise chains not fused)",
            ContextOptions {
                fuse_elementwise: Some(false),
                ..options.clone()
            },
        ),
        (
            copied_elements,
            "Scan elements copied (not bound in place)",
            ContextOptions {
                scan_in_place: Some(false),
                ..options.clone()
            },
        ),
        (
            iterated_scans,
            "Scans iterated (no recurrence kernel)",
            ContextOptions {
                scan_recurrences: Some(false),
                ..options.clone()
            },
        ),
    ];
    for (_, what, options) in variants.into_iter().filter(|v| v.0) {
        let other = Context::new_blocking(options)?;
        let session = Model::load(model)?.session(&other)?;
        session.run_blocking(values.clone())?;
        let mut times = Vec::with_capacity(runs);
        let mut counts = (0, 0);
        for _ in 0..runs.max(1) {
            let inputs = values.clone();
            let before = other.stats();
            let t = Instant::now();
            session.run_blocking(inputs)?;
            times.push(t.elapsed().as_secs_f64());
            let after = other.stats();
            counts = (
                after.dispatches - before.dispatches,
                after.copies - before.copies,
            );
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{what}: median {:.1} ms, dispatches per run: {}, copies per run: {}",
            times[times.len() / 2] * 1e3,
            counts.0,
            counts.1
        );
    }
    std::fs::create_dir_all(out).expect("OUT_DIR can be made");
    for (name, t) in &outputs {
        npy::write(&std::path::Path::new(out).join(format!("{name}.npy")), t)?;
    }
    Ok(())
}
