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
            webgpu_limits: common::ADAPTER_LIMITS,
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
            webgpu_limits: common::ADAPTER_LIMITS,
            ..Default::default()
        })
        .unwrap()
    })
}

/// Whether a case ran on the GPU or was refused by both the plan and the reference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ran {
    OnGpu,
    RefusedByBoth,
}

/// Runs `cases` random cases through `check` and prints how many reached the GPU; fails when
/// fewer than `min_share` of them did (a strategy drifting into error cases would otherwise
/// leave the GPU path barely tested while every case "passes").
fn run_counted<S: Strategy>(
    name: &str,
    strategy: S,
    cases: u32,
    min_share: f64,
    check: impl Fn(S::Value) -> Result<Ran, TestCaseError>,
) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (on_gpu, refused) = (AtomicU64::new(0), AtomicU64::new(0));
    let config = ProptestConfig {
        cases,
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&strategy, |case| {
        match check(case)? {
            Ran::OnGpu => on_gpu.fetch_add(1, Ordering::Relaxed),
            Ran::RefusedByBoth => refused.fetch_add(1, Ordering::Relaxed),
        };
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let (g, r) = (on_gpu.into_inner(), refused.into_inner());
    println!(
        "{name}: {} cases, {g} on the GPU, {r} refused by both the plan and the reference",
        g + r
    );
    assert!(
        g as f64 >= min_share * (g + r) as f64,
        "{name}: only {g} of {} cases reached the GPU (at least {:.0}% expected)",
        g + r,
        min_share * 100.0
    );
}

fn compare(
    op_name: &str,
    data: &HostTensor,
    planned: Result<Vec<usize>, Error>,
    expected: Result<HostTensor, reference::RefError>,
    run: impl FnOnce(&Tensor) -> Result<Tensor, Error>,
) -> Result<Ran, TestCaseError> {
    match (planned, expected) {
        (Err(e), Err(_)) => {
            prop_assert!(
                matches!(&e, Error::InvalidInput { op, .. } if *op == op_name),
                "{e:?}"
            );
            Ok(Ran::RefusedByBoth)
        }
        (Ok(shape), Ok(expected)) => {
            prop_assert_eq!(&shape, &expected.shape);
            let got = run(&upload(data)).unwrap().to_host_blocking().unwrap();
            prop_assert_eq!(got, expected);
            Ok(Ran::OnGpu)
        }
        (p, e) => {
            prop_assert!(false, "plan {:?} but reference {:?}", p, e.map(|t| t.shape));
            unreachable!()
        }
    }
}

/// A case on another context (chunked or multi-buffer): the GPU result when both the plan and
/// the reference accept it.
fn compare_on(ctx: &wgpu_ops::Context, case: &SsCase) -> Result<Ran, TestCaseError> {
    let data = random_tensor(case.seed, case.dtype, &case.shape);
    match (
        case.op.plan(&case.shape),
        reference::strided_slice(&data, &case.op),
    ) {
        (Ok(plan), Ok(expected)) => {
            let x = Tensor::from_host(ctx, &data).unwrap();
            let got = ctx
                .run(|rec| rec.strided_slice(&x, &case.op))
                .unwrap()
                .to_host_blocking()
                .unwrap();
            prop_assert_eq!(&got.shape, &plan.output_shape);
            prop_assert_eq!(got, expected);
            Ok(Ran::OnGpu)
        }
        (Err(_), Err(_)) => Ok(Ran::RefusedByBoth),
        (p, e) => {
            prop_assert!(
                false,
                "plan {:?} but reference {:?}",
                p.map(|p| p.output_shape),
                e.map(|t| t.shape)
            );
            unreachable!()
        }
    }
}

// Each property runs 5000 cases. The rest of the cases are index lists the spec refuses, which
// the plan and the reference must refuse alike. Measured on lavapipe: about 60% of the
// StridedSlice cases and 86% of the Slice cases reach the GPU; the floors leave a margin.
const CASES: u32 = 5000;
const STRIDED_SLICE_GPU_SHARE: f64 = 0.5;
const SLICE_GPU_SHARE: f64 = 0.75;

#[test]
fn strided_slice_gpu_matches_reference() {
    run_counted(
        "StridedSlice",
        ss_case(),
        CASES,
        STRIDED_SLICE_GPU_SHARE,
        |case| {
            let data = random_tensor(case.seed, case.dtype, &case.shape);
            let planned = case.op.plan(&case.shape).map(|p| p.output_shape);
            let expected = reference::strided_slice(&data, &case.op);
            compare("StridedSlice", &data, planned, expected, |x| case.op.run(x))
        },
    );
}

#[test]
fn strided_slice_in_chunks_matches_reference() {
    run_counted(
        "StridedSlice in chunks",
        ss_case(),
        CASES,
        STRIDED_SLICE_GPU_SHARE,
        |case| compare_on(chunking_ctx(), &case),
    );
}

#[test]
fn slice_gpu_matches_reference() {
    run_counted("Slice", slice_case(), CASES, SLICE_GPU_SHARE, |case| {
        let data = random_tensor(case.seed, case.dtype, &case.shape);
        let planned = case.op.plan(&case.shape).map(|p| p.output_shape);
        let expected = reference::slice(&data, &case.op);
        compare("Slice", &data, planned, expected, |x| case.op.run(x))
    });
}

#[test]
fn strided_slice_in_several_buffers_matches_reference() {
    run_counted(
        "StridedSlice in several buffers",
        ss_case(),
        CASES,
        STRIDED_SLICE_GPU_SHARE,
        |case| compare_on(multi_buffer_ctx(), &case),
    );
}
