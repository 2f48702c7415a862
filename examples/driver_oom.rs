//! A GPU running out of memory during a run: the driver's refusal is an error, and the context
//! stays usable once memory is freed.
//!
//! `cargo run --release --example driver_oom` allocates 4 GiB tensors until the driver refuses
//! one (`Error::OutOfMemory`), then runs a small graph whose input upload cannot fit (an error,
//! not a crash), frees the tensors and runs the same graph again, checking its result. No
//! memory limit of the crate's own is set: the refusal is the driver's. It needs a GPU: a CPU
//! adapter's memory is the host's, which it would exhaust instead, so it stops there (exit 2).

use wgpu_ops::graph::{Graph, Node};
use wgpu_ops::{Context, ContextOptions, DType, Error, HostTensor, Session, Tensor};

fn main() {
    let ctx = Context::new_blocking(ContextOptions {
        max_memory: Some(u64::MAX),
        ..Default::default()
    })
    .expect("an adapter");
    let info = ctx.adapter_info();
    println!("adapter: {} ({:?})", info.name, info.backend);
    if ctx.cpu_kernels() {
        eprintln!("a CPU adapter: its memory is the host's; run this on a GPU");
        std::process::exit(2);
    }
    const GIB4: usize = 1 << 30; // f32 elements
    let mut held = Vec::new();
    let refusal = loop {
        match Tensor::uninit(&ctx, DType::F32, &[GIB4]) {
            Ok(t) => held.push(t),
            Err(e) => break e,
        }
        assert!(held.len() < 256, "no refusal after 1 TiB");
    };
    println!("held {} GiB, then: {refusal}", held.len() * 4);
    assert!(
        matches!(refusal, Error::OutOfMemory { .. }),
        "expected an out-of-memory error, got {refusal:?}"
    );

    let n = 1usize << 28; // 1 GiB of f32
    let graph = Graph::new()
        .input("x", DType::F32, &[Some(n)])
        .node(Node::new("Add", "add").inputs(["x", "x"]).outputs(["y"]))
        .output("y");
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let input = vec![("x".to_string(), HostTensor::from_vec(vec![n], &x).unwrap())];
    let session = Session::new(&ctx, graph).expect("the graph plans");
    // The GPU is full: the run fails cleanly (the upload or the output is refused), however
    // much of the driver's memory the last refusal left.
    match session.run_blocking(input.clone()) {
        Err(e) => println!("run while the GPU is full: {e}"),
        Ok(_) => println!("run while the GPU is full: it fitted in the memory left"),
    }
    drop(held);
    let out = session
        .run_blocking(input)
        .expect("the context runs again once memory is freed");
    let y = out[0].1.to_vec::<f32>().unwrap();
    assert!(y.iter().zip(&x).all(|(y, x)| *y == 2.0 * x), "wrong sums");
    println!("after freeing: the same run gives the right {n} sums; the context is usable");
}
