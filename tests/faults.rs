//! Concurrency and device faults: threads sharing one context, several contexts in one
//! process, tensors of another device, and a destroyed device. Every misuse and fault is an
//! error; nothing panics or hangs.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::{
    reference, Context, ContextOptions, DType, Error, HostTensor, Session, Slice, StridedSlice,
    Tensor,
};

fn new_context() -> Context {
    Context::new_blocking(ContextOptions::default()).expect("a GPU adapter (lavapipe) is needed")
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// One thread's work: slices, element-wise ops, MatMul and a Scan graph on `ctx`, each
/// checked against the CPU.
fn mixed_work(ctx: &Context, seed: u64) {
    let h = random_tensor(seed, DType::U16, &[7, 9, 5]);
    let x = Tensor::from_host(ctx, &h).unwrap();
    let op = StridedSlice::new([6, 0, 1], [0, 9, 5])
        .stride([-2, 3, 1])
        .end_mask([1]);
    let got = ctx
        .run(|rec| rec.strided_slice(&x, &op))
        .unwrap()
        .to_host_blocking()
        .unwrap();
    assert_eq!(got, reference::strided_slice(&h, &op).unwrap(), "{seed}");

    let a: Vec<f32> = (0..12).map(|i| (i as f32 + seed as f32) * 0.5).collect();
    let b: Vec<f32> = (0..12).map(|i| 1.0 - i as f32 * 0.25).collect();
    let ta = Tensor::from_host(ctx, &HostTensor::from_vec(vec![3, 4], &a).unwrap()).unwrap();
    let tb = Tensor::from_host(ctx, &HostTensor::from_vec(vec![4, 3], &b).unwrap()).unwrap();
    let (sum, product) = ctx
        .run(|rec| {
            let s = rec.elementwise("Add", &ta, Some(&tb.reshaped(&[3, 4])?))?;
            let p = rec.matmul(&ta, &tb)?;
            Ok((s, p))
        })
        .unwrap();
    let sum = f32s(&sum.to_host_blocking().unwrap());
    for i in 0..12 {
        assert_eq!(sum[i], a[i] + b[i]);
    }
    let product = f32s(&product.to_host_blocking().unwrap());
    for i in 0..3 {
        for j in 0..3 {
            let want: f32 = (0..4).map(|k| a[i * 4 + k] * b[k * 3 + j]).sum();
            assert!((product[i * 3 + j] - want).abs() <= 1e-4 * want.abs().max(1.0));
        }
    }

    let body = Graph::new()
        .input("s", DType::F32, &[Some(4)])
        .input("r", DType::F32, &[Some(4)])
        .node(Node::new("Add", "add").inputs(["s", "r"]).outputs(["n"]))
        .output("n");
    let g = Graph::new()
        .input("s0", DType::F32, &[Some(4)])
        .input("x", DType::F32, &[Some(50), Some(4)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "x"])
                .outputs(["total"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("total");
    let xs = random_tensor(seed + 1, DType::I32, &[50, 4]);
    let xs = HostTensor::from_vec(
        vec![50, 4],
        &xs.to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|v| (v % 100) as f32)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let s0 = HostTensor::from_vec(vec![4], &[seed as f32; 4]).unwrap();
    let inputs = vec![("s0".to_string(), s0), ("x".to_string(), xs)];
    let got = Session::new(ctx, g.clone())
        .unwrap()
        .run_blocking(inputs.clone())
        .unwrap();
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    assert_eq!(got[0].1, want[0], "{seed}");
}

#[test]
fn eight_threads_share_one_context() {
    let ctx = new_context();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let ctx = &ctx;
            s.spawn(move || {
                for round in 0..4 {
                    mixed_work(ctx, t * 10 + round);
                }
            });
        }
    });
}

#[test]
fn eight_threads_stream_large_transfers_through_one_context() {
    // Uploads from 1 MiB and all downloads share the context's few staging buffers: eight
    // threads moving 1 to 9 MiB each (one to three staging buffers) at once, bit for bit.
    let ctx = new_context();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let ctx = &ctx;
            s.spawn(move || {
                for round in 0..3u64 {
                    let n = ((1 + (t + round) % 9) << 20) as usize + t as usize;
                    let h = HostTensor {
                        dtype: DType::U8,
                        shape: vec![n],
                        data: bytes(t * 10 + round, n),
                    };
                    let x = Tensor::from_host(ctx, &h).unwrap();
                    assert!(
                        x.to_host_blocking().unwrap() == h,
                        "thread {t} round {round}"
                    );
                }
            });
        }
    });
}

#[test]
fn several_contexts_in_one_process() {
    let contexts: Vec<Context> = (0..3).map(|_| new_context()).collect();
    std::thread::scope(|s| {
        for (i, ctx) in contexts.iter().enumerate() {
            s.spawn(move || mixed_work(ctx, 100 + i as u64));
        }
    });
    // A tensor of one context given to an op recorded on another is refused, never passed to
    // wgpu (which panics on a buffer of another device).
    let (a, b) = (&contexts[0], &contexts[1]);
    let h = HostTensor::from_vec(vec![2, 2], &[1f32, 2.0, 3.0, 4.0]).unwrap();
    let on_a = Tensor::from_host(a, &h).unwrap();
    let on_b = Tensor::from_host(b, &h).unwrap();
    let cases: Vec<(&str, Result<Tensor, Error>)> = vec![
        ("MatMul", a.run(|rec| rec.matmul(&on_a, &on_b))),
        (
            "Add",
            a.run(|rec| rec.elementwise("Add", &on_a, Some(&on_b))),
        ),
        (
            "Concat",
            a.run(|rec| rec.concat(&[on_a.clone(), on_b.clone()], 0)),
        ),
        ("Transpose", a.run(|rec| rec.transpose(&on_b, None))),
        (
            "Slice",
            a.run(|rec| rec.slice(&on_b, &Slice::new([0], [1], [1]))),
        ),
        (
            "copy",
            a.run(|rec| rec.copy_bytes(&on_b, 0, &on_a, 0, 8).map(|()| on_a.clone())),
        ),
    ];
    for (op, result) in cases {
        match result {
            Err(Error::InvalidInput { op: o, message, .. }) => {
                assert_eq!(o, op);
                assert!(message.contains("another Context"), "{message}");
            }
            other => panic!("{op}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn a_destroyed_device_gives_errors_not_panics_or_hangs() {
    let ctx = new_context();
    let h = random_tensor(3, DType::F32, &[8, 8]);
    let x = Tensor::from_host(&ctx, &h).unwrap();
    // Large transfers go through staging buffers the context keeps: some made before.
    let big = HostTensor {
        dtype: DType::U8,
        shape: vec![9 << 20],
        data: bytes(4, 9 << 20),
    };
    let y = Tensor::from_host(&ctx, &big).unwrap();
    assert!(y.to_host_blocking().unwrap() == big);
    ctx.device().destroy();
    assert!(y.to_host_blocking().is_err());
    assert!(Tensor::from_host(&ctx, &big)
        .and_then(|t| t.to_host_blocking())
        .is_err());
    let op = StridedSlice::new([7], [0]).stride([-1]).end_mask([1]);
    // Each call returns (an error, or for calls that only queue work, a value whose later use
    // errs); none panics, and the test finishing shows none hangs.
    let recorded = ctx.run(|rec| rec.strided_slice(&x, &op));
    let downloaded = recorded.and_then(|t| t.to_host_blocking());
    assert!(downloaded.is_err(), "{downloaded:?}");
    assert!(x.to_host_blocking().is_err());
    assert!(Tensor::from_host(&ctx, &h)
        .and_then(|t| t.to_host_blocking())
        .is_err());
    let g = Graph::new()
        .input("x", DType::F32, &[Some(8), Some(8)])
        .node(Node::new("Relu", "r").inputs(["x"]).outputs(["y"]))
        .output("y");
    let run = Session::new(&ctx, g).and_then(|s| s.run_blocking(vec![("x".into(), h.clone())]));
    assert!(run.is_err(), "{run:?}");
    // Another context in the same process is unaffected.
    mixed_work(&new_context(), 7);
}

#[test]
fn tensors_beyond_the_memory_limit_are_refused_before_allocation() {
    let ctx = Context::new_blocking(ContextOptions {
        max_memory: Some(1 << 20),
        ..Default::default()
    })
    .unwrap();
    let before = ctx.memory_in_use();
    let a = Tensor::uninit(&ctx, DType::U8, &[600 << 10]).unwrap();
    assert_eq!(ctx.memory_in_use() - before, 600 << 10);
    // A second tensor of the same size would pass 1 MiB: refused, nothing allocated.
    let buffers = ctx.stats().buffers_created;
    match Tensor::uninit(&ctx, DType::U8, &[600 << 10]) {
        Err(Error::LimitExceeded { limit, max, .. }) => {
            assert!(limit.contains("ContextOptions::max_memory"), "{limit}");
            assert_eq!(max, 1 << 20);
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    assert_eq!(ctx.stats().buffers_created, buffers);
    // An op whose output would not fit is refused the same way, and the context stays usable.
    let h = HostTensor::from_vec(vec![2, 2], &[1u32, 2, 3, 4]).unwrap();
    let x = Tensor::from_host(&ctx, &h).unwrap();
    let huge = wgpu_ops::SpaceToBatch::new([1, 2], [0, 1 << 20], [0, 0]);
    assert!(matches!(huge.run(&x), Err(Error::LimitExceeded { .. })));
    drop(a);
    assert_eq!(ctx.memory_in_use() - before, 16); // x alone
    let t = ctx.run(|rec| rec.transpose(&x, None)).unwrap();
    assert_eq!(
        t.to_host_blocking().unwrap().to_vec::<u32>().unwrap(),
        [1, 3, 2, 4]
    );
}
