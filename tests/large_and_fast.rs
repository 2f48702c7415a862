//! The dispatch-free paths (identity slices are views; contiguous slices are one buffer copy)
//! and the chunked path for tensors larger than the binding limit, on a small artificial limit.

mod common;
use common::*;
use wgpu_ops::{reference, Context, ContextOptions, DType, Error, Slice, StridedSlice};

#[test]
fn identity_slices_are_views() {
    // A context of its own: other tests create buffers concurrently on the shared one.
    let ctx = Context::new_blocking(ContextOptions::default()).unwrap();
    let x = wgpu_ops::Tensor::from_host(&ctx, &random_tensor(1, DType::F16, &[3, 5, 7])).unwrap();
    let before = ctx.stats().buffers_created;
    let mut rec = ctx.recorder();
    let ops = [
        StridedSlice::new([0], [i64::MAX]),
        StridedSlice::new(Vec::<i64>::new(), Vec::<i64>::new()),
        StridedSlice::new([0, 0], [0, 0])
            .new_axis_mask([1])
            .end_mask([0, 1]),
    ];
    for op in &ops {
        let y = rec.strided_slice(&x, op).unwrap();
        assert!(y.shares_buffer(&x), "{op:?}");
    }
    let y = rec
        .slice(&x, &Slice::new([-100, 0], [100, 5], [1, 1]).axes([2, 1]))
        .unwrap();
    assert!(y.shares_buffer(&x));
    assert_eq!(rec.dispatches(), 0);
    pollster::block_on(rec.finish()).unwrap();
    assert_eq!(ctx.stats().buffers_created, before);
}

#[test]
fn contiguous_slices_are_copies() {
    // x[2:5] of rows of 7 f32, and of i8 at a word-aligned offset: a buffer copy on CPU
    // adapters (no dispatch), one dispatch of the copy kernel on GPUs.
    for (dtype, shape, start) in [
        (DType::F32, [6, 7], 2),
        (DType::I8, [8, 4], 3),
        (DType::U64, [5, 3], 1),
    ] {
        let h = random_tensor(2, dtype, &shape);
        let op = Slice::new([start], [start + 3], [1]);
        let mut rec = ctx().recorder();
        let y = rec.slice(&upload(&h), &op).unwrap();
        let copy_kernel = !ctx().cpu_kernels();
        assert_eq!(rec.dispatches(), u64::from(copy_kernel), "{dtype}");
        pollster::block_on(rec.finish()).unwrap();
        assert_eq!(
            y.to_host_blocking().unwrap(),
            reference::slice(&h, &op).unwrap()
        );
    }
}

fn small_binding_context() -> Context {
    Context::new_blocking(ContextOptions {
        max_binding_size: Some(256),
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn tensors_beyond_the_binding_limit_run_in_chunks() {
    let ctx = small_binding_context();
    assert_eq!(ctx.binding_limit(), 256);
    let mut checked = 0;
    for dtype in DType::ALL {
        let shape = [9, 10, 13];
        let h = random_tensor(7, dtype, &shape);
        let x = wgpu_ops::Tensor::from_host(&ctx, &h).unwrap();
        for op in [
            StridedSlice::new([0, 0, 0], [9, 10, 13])
                .stride([1, 1, -1])
                .begin_mask([0, 0, 1])
                .end_mask([0, 0, 1]),
            StridedSlice::new([8, 1, 0], [0, 9, 13])
                .stride([-1, 2, 2])
                .end_mask([1]),
            StridedSlice::new([1, 0], [8, 10])
                .stride([3, -1])
                .begin_mask([0, 1])
                .end_mask([0, 1]),
            StridedSlice::new([0, 0, 5], [9, 10, 6]).shrink_axis_mask([0, 0, 1]),
        ] {
            let want = reference::strided_slice(&h, &op).unwrap();
            let got = ctx
                .run(|rec| rec.strided_slice(&x, &op))
                .unwrap()
                .to_host_blocking()
                .unwrap();
            assert_eq!(got, want, "{dtype} {op:?}");
            checked += 1;
        }
        let t = ctx
            .run(|rec| rec.transpose(&x, Some(&[1, 2, 0])))
            .unwrap()
            .to_host_blocking()
            .unwrap();
        assert_eq!(t.shape, [10, 13, 9]);
    }
    assert_eq!(checked, 4 * DType::ALL.len());
    // Transposes of each dtype against the graph reference.
    let h = random_tensor(3, DType::U16, &[40, 3]);
    let x = wgpu_ops::Tensor::from_host(&ctx, &h).unwrap();
    let got = ctx
        .run(|rec| rec.transpose(&x, None))
        .unwrap()
        .to_host_blocking()
        .unwrap();
    let (a, b) = (h.to_vec::<u16>().unwrap(), got.to_vec::<u16>().unwrap());
    for i in 0..40 {
        for j in 0..3 {
            assert_eq!(b[j * 40 + i], a[i * 3 + j]);
        }
    }
}

#[test]
fn rows_beyond_the_limit_split_further() {
    // Reversing rows of 200 f32 (800 bytes) with a 256-byte limit: each row is split too.
    let ctx = small_binding_context();
    for dtype in [DType::F32, DType::U8, DType::F16, DType::I64] {
        let h = random_tensor(1, dtype, &[2, 200]);
        let x = wgpu_ops::Tensor::from_host(&ctx, &h).unwrap();
        let op = StridedSlice::new([0, 0], [0, 0])
            .stride([1, -1])
            .begin_mask([1, 1])
            .end_mask([1, 1]);
        let got = ctx
            .run(|rec| rec.strided_slice(&x, &op))
            .unwrap()
            .to_host_blocking()
            .unwrap();
        assert_eq!(got, reference::strided_slice(&h, &op).unwrap(), "{dtype}");
    }
}

#[test]
fn a_limit_below_one_aligned_window_is_a_clear_error() {
    let ctx = Context::new_blocking(ContextOptions {
        max_binding_size: Some(16),
        ..Default::default()
    })
    .unwrap();
    let x = wgpu_ops::Tensor::from_host(&ctx, &random_tensor(1, DType::F32, &[2, 20])).unwrap();
    let op = StridedSlice::new([0, 0], [0, 0])
        .stride([1, -1])
        .begin_mask([1, 1])
        .end_mask([1, 1]);
    match ctx.run(|rec| rec.strided_slice(&x, &op)) {
        Err(e @ Error::LimitExceeded { .. }) => {
            let Error::LimitExceeded { op, limit, max, .. } = &e else {
                unreachable!()
            };
            assert_eq!(
                (*op, *limit, *max),
                ("StridedSlice", "max_storage_buffer_binding_size", 16)
            );
            assert!(
                e.to_string()
                    .starts_with("StridedSlice: one element of 4 bytes"),
                "{e}"
            );
        }
        other => panic!("expected a limit error, got {other:?}"),
    }
}
