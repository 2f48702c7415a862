//! A lost GPU device (a driver reset or hang, a browser's GPU process gone; here the device
//! destroyed) makes everything asked of the context afterwards fail with `Error::DeviceLost`,
//! one line that says so: WebGPU itself reports nothing from calls on a lost device (they do
//! nothing), so without this a run would return results that were never computed.

mod common;

use wgpu_ops::graph::{Graph, Node, Session};
use wgpu_ops::{Context, ContextOptions, DType, Error, HostTensor, Tensor};

fn assert_lost<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) {
    match result {
        Err(e @ Error::DeviceLost { .. }) => {
            let line = e.to_string();
            assert_eq!(line.lines().count(), 1, "{what}: {line}");
            assert!(
                line.contains("the GPU device was lost") && line.contains("make a new Context"),
                "{what}: {line}"
            );
        }
        other => panic!("{what}: {other:?}"),
    }
}

fn context() -> Context {
    Context::new_blocking(ContextOptions {
        cpu_kernels: common::cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap()
}

fn relu_graph() -> Graph {
    Graph::new()
        .input("x", DType::F32, &[Some(4)])
        .node(Node::new("Relu", "r").inputs(["x"]).outputs(["y"]))
        .output("y")
}

fn values() -> HostTensor {
    HostTensor::from_vec(vec![4], &[-1.0f32, 2.0, -3.0, 4.0]).unwrap()
}

/// The device lost between runs (noticed when wgpu next polls it, as a driver's loss is):
/// uploads, downloads, recordings and session runs all fail, and `Context::lost` says why.
#[test]
fn everything_after_a_loss_is_refused() {
    let ctx = context();
    let x = Tensor::from_host(&ctx, &values()).unwrap();
    let session = Session::new(&ctx, relu_graph()).unwrap();
    let before = session.run_blocking(vec![("x".into(), values())]).unwrap();
    assert_eq!(before[0].1.to_vec::<f32>().unwrap(), [0.0, 2.0, 0.0, 4.0]);
    assert_eq!(ctx.lost(), None);

    ctx.device().destroy();
    let _ = ctx.device().poll(wgpu::PollType::Poll);
    let reason = ctx.lost().expect("the loss is known");
    assert!(!reason.is_empty());

    assert_lost(x.to_host_blocking(), "download");
    assert_lost(Tensor::from_host(&ctx, &values()), "upload");
    assert_lost(
        ctx.run(|rec| rec.elementwise("Relu", &x, None)),
        "a recording",
    );
    assert_lost(
        session.run_blocking(vec![("x".into(), values())]),
        "a session's run on host values",
    );
    assert_lost(
        session.run_tensors_blocking(vec![("x".into(), x.clone())]),
        "a session's run on GPU tensors",
    );
}

/// The device lost while a run is recorded: its submission says so, and its results are
/// never handed out as if computed.
#[test]
fn a_loss_during_a_recording_fails_its_submission() {
    let ctx = context();
    let x = Tensor::from_host(&ctx, &values()).unwrap();
    let result = ctx.run(|rec| {
        let y = rec.elementwise("Relu", &x, None)?;
        ctx.device().destroy();
        rec.elementwise("Relu", &y, None)
    });
    assert_lost(result, "the run");
    assert!(ctx.lost().is_some());
}

/// The device lost in the middle of a long Scan (from another thread, as a driver reset comes):
/// the loop stops at its next submission with the loss instead of encoding its remaining
/// iterations into a dead device.
#[test]
fn a_loss_in_the_middle_of_a_long_scan_stops_it() {
    let ctx = context();
    let graph = wgpu_ops::graph::json::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/graphs/cumsum.json"
    )))
    .unwrap();
    let session = Session::new(&ctx, graph).unwrap();
    // A million steps: about 250 submissions of commands on lavapipe, half a minute.
    let steps = 1_000_000;
    let x = Tensor::from_host(
        &ctx,
        &HostTensor::from_vec(vec![steps, 4], &vec![1.0f32; steps * 4]).unwrap(),
    )
    .unwrap();
    let before = ctx.stats().submissions;
    let device = ctx.device().clone();
    let submissions = ctx.clone();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let run_done = done.clone();
    let destroyer = std::thread::spawn(move || {
        // After the loop's first submissions (or, should the run end first, then: the test
        // fails instead of waiting forever).
        while submissions.stats().submissions < before + 3
            && !run_done.load(std::sync::atomic::Ordering::Acquire)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        device.destroy();
    });
    let result = session.run_tensors_blocking(vec![("x".into(), x)]);
    done.store(true, std::sync::atomic::Ordering::Release);
    destroyer.join().unwrap();
    assert_lost(result, "the long Scan");
    let submitted = ctx.stats().submissions - before;
    assert!(submitted < 20, "{submitted} submissions");
}
