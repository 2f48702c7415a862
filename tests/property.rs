//! Thousands of random slices: GPU vs the CPU reference, bit for bit, for every dtype; plan
//! errors must coincide with the reference's refusals.

mod common;
use common::*;
use proptest::prelude::*;
use wgpu_ops::{reference, DType, Error, HostTensor, IntoIndices, Slice, StridedSlice, Tensor};

fn index_value(int32: bool) -> BoxedStrategy<i64> {
    if int32 {
        prop_oneof![
            6 => -7i32..8,
            1 => -100i32..100,
            1 => Just(i32::MAX),
            1 => Just(i32::MIN),
        ]
        .prop_map(|v| vec![v].into_indices()[0])
        .boxed()
    } else {
        prop_oneof![
            6 => -7i64..8,
            1 => -100i64..100,
            1 => Just(i64::MAX),
            1 => Just(i64::MIN),
        ]
        .boxed()
    }
}

fn step_value(int32: bool) -> BoxedStrategy<i64> {
    prop_oneof![
        60 => (1i64..4).prop_flat_map(|s| prop_oneof![Just(s), Just(-s)]),
        // Rare, so that most cases reach the GPU; one zero anywhere is an error.
        1 => Just(0i64),
        4 => if int32 { Just(i64::from(i32::MIN) + 1).boxed() } else { Just(i64::MAX).boxed() },
    ]
    .boxed()
}

fn mask(max_len: usize, one_in: u32) -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop::bool::weighted(1.0 / one_in as f64).prop_map(i64::from),
        0..max_len,
    )
}

/// Dims 0..5, zero rarely (one zero empties the whole tensor).
fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1 => Just(0usize), 12 => 1usize..5], ranks)
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

#[derive(Debug, Clone)]
struct SsCase {
    dtype: DType,
    shape: Vec<usize>,
    op: StridedSlice,
    seed: u64,
}

fn ss_case() -> impl Strategy<Value = SsCase> {
    (shape(0..=8), any::<bool>(), dtype(), any::<u64>())
        .prop_flat_map(|(shape, int32, dtype, seed)| {
            (
                Just(shape.clone()),
                0..=shape.len() + 2,
                Just(int32),
                Just(dtype),
                Just(seed),
            )
        })
        .prop_flat_map(|(shape, m, int32, dtype, seed)| {
            (
                prop::collection::vec(index_value(int32), m),
                prop::collection::vec(index_value(int32), m),
                prop::option::weighted(0.9, prop::collection::vec(step_value(int32), m)),
                [
                    mask(m + 3, 3),
                    mask(m + 3, 3),
                    mask(m + 3, 6),
                    mask(m + 3, 5),
                    mask(m + 3, 8),
                ],
            )
                .prop_map(move |(begin, end, stride, [bm, em, nm, sm, el])| SsCase {
                    dtype,
                    shape: shape.clone(),
                    op: StridedSlice {
                        begin,
                        end,
                        stride,
                        begin_mask: bm,
                        end_mask: em,
                        new_axis_mask: nm,
                        shrink_axis_mask: sm,
                        ellipsis_mask: el,
                    },
                    seed,
                })
        })
}

#[derive(Debug, Clone)]
struct SliceCase {
    dtype: DType,
    shape: Vec<usize>,
    op: Slice,
    seed: u64,
}

fn slice_case() -> impl Strategy<Value = SliceCase> {
    (shape(1..=8), any::<bool>(), dtype(), any::<u64>())
        .prop_flat_map(|(shape, int32, dtype, seed)| {
            let r = shape.len() as i64;
            prop_oneof![12 => 0..=shape.len(), 1 => Just(shape.len() + 1)].prop_flat_map(move |n| {
                let shape = shape.clone();
                (
                    prop::collection::vec(index_value(int32), n),
                    prop::collection::vec(index_value(int32), n),
                    prop::collection::vec(step_value(int32), n),
                    prop::option::weighted(
                        0.7,
                        prop_oneof![
                            9 => Just((0..r).collect::<Vec<_>>()).prop_shuffle().prop_map(move |a| a),
                            1 => prop::collection::vec(-r - 1..=r, r as usize),
                        ]
                        .prop_flat_map(move |axes| {
                            // Take n of them, some negative.
                            let axes = axes.into_iter().take(n).collect::<Vec<_>>();
                            prop::collection::vec(any::<bool>(), axes.len()).prop_map(move |neg| {
                                axes.iter()
                                    .zip(&neg)
                                    .map(|(&a, &ng)| if ng && (0..r).contains(&a) { a - r } else { a })
                                    .collect::<Vec<i64>>()
                            })
                        }),
                    ),
                )
                    .prop_map(move |(start, stop, step, axes)| SliceCase {
                        dtype,
                        shape: shape.clone(),
                        op: Slice { start, stop, step, axes },
                        seed,
                    })
            })
        })
}

/// A context that binds at most 64 bytes at once, so most cases take the chunked path.
fn chunking_ctx() -> &'static wgpu_ops::Context {
    static CTX: std::sync::OnceLock<wgpu_ops::Context> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            max_binding_size: Some(64),
            ..Default::default()
        })
        .unwrap()
    })
}

/// A context whose buffers hold at most 256 bytes, bound in windows of at most 160: most
/// tensors here are held in several buffers.
fn multi_buffer_ctx() -> &'static wgpu_ops::Context {
    static CTX: std::sync::OnceLock<wgpu_ops::Context> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            max_buffer_size: Some(256),
            max_binding_size: Some(160),
            ..Default::default()
        })
        .unwrap()
    })
}

fn compare(
    op_name: &str,
    data: &HostTensor,
    planned: Result<Vec<usize>, Error>,
    expected: Result<HostTensor, String>,
    run: impl FnOnce(&Tensor) -> Result<Tensor, Error>,
) -> Result<(), TestCaseError> {
    match (planned, expected) {
        (Err(e), Err(_)) => {
            prop_assert!(
                matches!(&e, Error::InvalidInput { op, .. } if *op == op_name),
                "{e:?}"
            );
        }
        (Ok(shape), Ok(expected)) => {
            prop_assert_eq!(&shape, &expected.shape);
            let got = run(&upload(data)).unwrap().to_host_blocking().unwrap();
            prop_assert_eq!(got, expected);
        }
        (p, e) => prop_assert!(false, "plan {:?} but reference {:?}", p, e.map(|t| t.shape)),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn strided_slice_gpu_matches_reference(case in ss_case()) {
        let data = random_tensor(case.seed, case.dtype, &case.shape);
        let planned = case.op.plan(&case.shape).map(|p| p.output_shape);
        let expected = reference::strided_slice(&data, &case.op);
        compare("StridedSlice", &data, planned, expected, |x| case.op.run(x))?;
    }

    #[test]
    fn strided_slice_in_chunks_matches_reference(case in ss_case()) {
        let data = random_tensor(case.seed, case.dtype, &case.shape);
        if let (Ok(plan), Ok(expected)) = (case.op.plan(&case.shape), reference::strided_slice(&data, &case.op)) {
            let ctx = chunking_ctx();
            let x = Tensor::from_host(ctx, &data).unwrap();
            let got = ctx.run(|rec| rec.strided_slice(&x, &case.op)).unwrap().to_host_blocking().unwrap();
            prop_assert_eq!(&got.shape, &plan.output_shape);
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn slice_gpu_matches_reference(case in slice_case()) {
        let data = random_tensor(case.seed, case.dtype, &case.shape);
        let planned = case.op.plan(&case.shape).map(|p| p.output_shape);
        let expected = reference::slice(&data, &case.op);
        compare("Slice", &data, planned, expected, |x| case.op.run(x))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn strided_slice_in_several_buffers_matches_reference(case in ss_case()) {
        let data = random_tensor(case.seed, case.dtype, &case.shape);
        if let (Ok(plan), Ok(expected)) = (case.op.plan(&case.shape), reference::strided_slice(&data, &case.op)) {
            let ctx = multi_buffer_ctx();
            let x = Tensor::from_host(ctx, &data).unwrap();
            let got = ctx.run(|rec| rec.strided_slice(&x, &case.op)).unwrap().to_host_blocking().unwrap();
            prop_assert_eq!(&got.shape, &plan.output_shape);
            prop_assert_eq!(got, expected);
        }
    }
}
