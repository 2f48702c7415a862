//! BatchToSpace-2 and SpaceToBatch-2: the spec's examples with full values, round trips, GPU vs
//! the reshape/transpose/crop references bit for bit for every dtype, and every error.

mod common;
use common::*;
use proptest::prelude::*;
use wgpu_ops::{reference, BatchToSpace, DType, Error, HostTensor, SpaceToBatch};

#[test]
fn spec_example_2d() {
    // data [10, 2], block_shape [1, 5], crops_begin [0, 2], crops_end [0, 0] -> [2, 8].
    let x = upload(&iota(&[10, 2]));
    let y = BatchToSpace::new([1, 5], [0, 2], [0, 0]).run(&x).unwrap();
    assert_eq!(y.shape(), &[2, 8]);
    // Row b, column j of the uncropped [2, 10]: j = d * 5 + r reads data[r * 2 + b, d].
    assert_eq!(
        values(&y),
        [8, 12, 16, 1, 5, 9, 13, 17, 10, 14, 18, 3, 7, 11, 15, 19]
    );
}

#[test]
fn spec_example_5d() {
    // data [48, 3, 3, 1, 3], block_shape [1, 2, 4, 3, 1], crops_begin [0, 0, 1, 0, 0],
    // crops_end [0, 0, 1, 0, 0] -> [2, 6, 10, 3, 3].
    let shape = [48, 3, 3, 1, 3];
    let x = upload(&iota(&shape));
    let y = BatchToSpace::new([1, 2, 4, 3, 1], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0])
        .run(&x)
        .unwrap();
    assert_eq!(y.shape(), &[2, 6, 10, 3, 3]);
    // Every value, from the output shape's description: uncropped position x_k = o_k + crop_k
    // sits in block offset x_k % B_k of input element x_k / B_k; the block offsets, in mixed
    // radix (2, 4, 3, 1), pick the batch group of size 48 / 24 = 2.
    let mut want = Vec::new();
    for b in 0..2 {
        for o1 in 0..6 {
            for o2 in 0..10 {
                for o3 in 0..3 {
                    for o4 in 0..3 {
                        let (x1, x2, x3, x4) = (o1, o2 + 1, o3, o4);
                        let group = ((x1 % 2) * 4 + x2 % 4) * 3 + x3 % 3;
                        let n = group * 2 + b;
                        want.push((((n * 3 + x1 / 2) * 3 + x2 / 4) * 3 + x3 / 3 + x4) as i64);
                    }
                }
            }
        }
    }
    assert_eq!(values(&y), want);
    let host = iota(&shape);
    assert_eq!(
        y.to_host_blocking().unwrap(),
        reference::batch_to_space(
            &host,
            &BatchToSpace::new([1, 2, 4, 3, 1], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0])
        )
        .unwrap()
    );
}

#[test]
fn space_to_batch_pads_with_zeros() {
    // [1, 3] padded by 1 on each side to 5... must divide: block 5 -> [5, 1].
    let x = upload(&HostTensor::from_vec(vec![1, 3], &[7i32, 8, 9]).unwrap());
    let y = SpaceToBatch::new([1, 5], [0, 1], [0, 1]).run(&x).unwrap();
    assert_eq!(y.shape(), &[5, 1]);
    assert_eq!(
        y.to_host_blocking().unwrap().to_vec::<i32>().unwrap(),
        [0, 7, 8, 9, 0]
    );
    // An empty input axis padded into existence is all zeros.
    let e = upload(&HostTensor::from_vec(vec![2, 0], &[] as &[u8]).unwrap());
    let y = SpaceToBatch::new([1, 2], [0, 1], [0, 3]).run(&e).unwrap();
    assert_eq!(y.shape(), &[4, 2]);
    assert_eq!(y.to_host_blocking().unwrap().data, [0u8; 8]);
}

#[test]
fn decision_12_crops_may_remove_a_whole_axis() {
    // "Crops that remove a whole axis (crops_begin[i] + crops_end[i] == D_i * B_i) give an
    // empty axis; more than that is an error."
    let x = upload(&iota(&[4, 3]));
    let y = BatchToSpace::new([1, 2], [0, 4], [0, 2]).run(&x).unwrap();
    assert_eq!(y.shape(), &[2, 0]);
    assert_eq!(values(&y), Vec::<i64>::new());
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) -> (String, String, String) {
    match r {
        Err(Error::InvalidInput { op, input, message }) => (op.to_string(), input, message),
        other => panic!("expected an InvalidInput error, got {other:?}"),
    }
}

#[test]
fn every_rule_has_an_error() {
    let b2s = |b: &[i64], c0: &[i64], c1: &[i64], shape: &[usize]| {
        invalid(BatchToSpace::new(b, c0, c1).plan(shape))
    };
    let s2b = |b: &[i64], p0: &[i64], p1: &[i64], shape: &[usize]| {
        invalid(SpaceToBatch::new(b, p0, p1).plan(shape))
    };
    let has = |(op, input, msg): (String, String, String),
               want_op: &str,
               want_input: &str,
               text: &str| {
        assert_eq!(
            (op.as_str(), input.as_str()),
            (want_op, want_input),
            "{msg}"
        );
        assert!(msg.contains(text), "{msg}");
    };
    // Lengths different from the rank.
    has(
        b2s(&[1, 2, 1], &[0, 0], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "block_shape",
        "block_shape has 3 values but data has rank 2",
    );
    has(
        b2s(&[1, 2], &[0], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "crops_begin",
        "crops_begin has 1 values",
    );
    has(
        s2b(&[1, 2], &[0, 0], &[0, 0, 0], &[4, 2]),
        "SpaceToBatch",
        "pads_end",
        "pads_end has 3 values",
    );
    // A block value below 1.
    has(
        b2s(&[1, 0], &[0, 0], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "block_shape",
        "block_shape[1] is 0; block values must be at least 1",
    );
    has(
        s2b(&[1, -2], &[0, 0], &[0, 0], &[4, 2]),
        "SpaceToBatch",
        "block_shape",
        "at least 1",
    );
    // Negative crops or pads.
    has(
        b2s(&[1, 2], &[0, -1], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "crops_begin",
        "crops_begin[1] is -1; it must be non-negative",
    );
    has(
        s2b(&[1, 2], &[0, 0], &[0, -3], &[4, 2]),
        "SpaceToBatch",
        "pads_end",
        "pads_end[1] is -3",
    );
    // Decision 11: "block_shape[0] must be 1 and crops_begin[0], crops_end[0] (pads_begin[0],
    // pads_end[0] for SpaceToBatch) must be 0 ... Anything else is an error".
    has(
        b2s(&[2, 1], &[0, 0], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "block_shape",
        "block_shape[0] is 2",
    );
    has(
        b2s(&[1, 1], &[1, 0], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "crops_begin",
        "crops_begin[0] is 1; it must be 0 on the batch axis",
    );
    has(
        b2s(&[1, 1], &[0, 0], &[1, 0], &[4, 2]),
        "BatchToSpace",
        "crops_end",
        "crops_end[0] is 1",
    );
    has(
        s2b(&[2, 1], &[0, 0], &[0, 0], &[4, 2]),
        "SpaceToBatch",
        "block_shape",
        "block_shape[0] is 2",
    );
    has(
        s2b(&[1, 1], &[1, 0], &[0, 0], &[4, 2]),
        "SpaceToBatch",
        "pads_begin",
        "pads_begin[0] is 1",
    );
    // Decision 12: a batch not divisible by the product of block_shape.
    has(
        b2s(&[1, 3], &[0, 0], &[0, 0], &[4, 2]),
        "BatchToSpace",
        "block_shape",
        "batch 4 is not divisible",
    );
    // Decision 12: crops larger than D_i * B_i.
    has(b2s(&[1, 2], &[0, 3], &[0, 2], &[4, 2]), "BatchToSpace", "crops_begin", "crops_begin[1] + crops_end[1] = 5 exceeds data dimension 1 (2) times block_shape[1] (2) = 4");
    // Decision 12: "each padded spatial size must divide by its block".
    has(
        s2b(&[1, 2], &[0, 1], &[0, 1], &[4, 3]),
        "SpaceToBatch",
        "block_shape",
        "padded to 5 (3 + 1 + 1) is not divisible by block_shape[1] = 2",
    );
    // Rank below 2 and beyond 16.
    has(
        b2s(&[1], &[0], &[0], &[4]),
        "BatchToSpace",
        "data",
        "rank 1",
    );
    has(
        s2b(&[1; 17], &[0; 17], &[0; 17], &[1; 17]),
        "SpaceToBatch",
        "data",
        "rank 17",
    );
}

#[derive(Debug, Clone)]
struct Case {
    dtype: DType,
    batch: usize,
    spatial: Vec<usize>,
    block: Vec<i64>,
    pads: Vec<(i64, i64)>,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..=5,
        prop::sample::select(DType::ALL.to_vec()),
        any::<u64>(),
    )
        .prop_flat_map(|(spatial_rank, dtype, seed)| {
            (
                1usize..4,
                prop::collection::vec(0usize..4, spatial_rank),
                prop::collection::vec(1i64..4, spatial_rank),
                prop::collection::vec((0i64..3, 0i64..3), spatial_rank),
            )
                .prop_map(move |(batch, spatial, block, pads)| Case {
                    dtype,
                    batch,
                    spatial,
                    block,
                    pads,
                    seed,
                })
        })
}

impl Case {
    /// SpaceToBatch with pads adjusted up so each padded size divides by its block.
    fn space_to_batch(&self) -> (HostTensor, SpaceToBatch) {
        let mut shape = vec![self.batch];
        shape.extend(&self.spatial);
        let mut begin = vec![0];
        let mut end = vec![0];
        for (k, &(b, e)) in self.pads.iter().enumerate() {
            let padded = self.spatial[k] as i64 + b + e;
            let fix = (self.block[k] - padded % self.block[k]) % self.block[k];
            begin.push(b);
            end.push(e + fix);
        }
        let mut block = vec![1];
        block.extend(&self.block);
        (
            random_tensor(self.seed, self.dtype, &shape),
            SpaceToBatch::new(block, begin, end),
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn gpu_matches_references_and_round_trips(case in case()) {
        let (data, s2b) = case.space_to_batch();
        let x = upload(&data);
        let spaced = s2b.run(&x).unwrap();
        let got = spaced.to_host_blocking().unwrap();
        prop_assert_eq!(&got, &reference::space_to_batch(&data, &s2b).unwrap());

        // Back with crops = pads gives the input back.
        let b2s = BatchToSpace::new(s2b.block_shape.clone(), s2b.pads_begin.clone(), s2b.pads_end.clone());
        let back = b2s.run(&spaced).unwrap().to_host_blocking().unwrap();
        prop_assert_eq!(&back, &data);

        // BatchToSpace of arbitrary data and crops against its own reference.
        let mut crops_end = b2s.crops_end.clone();
        crops_end.iter_mut().zip(&case.pads).skip(1).for_each(|(c, p)| *c = (*c).min(p.0));
        let b2s = BatchToSpace { crops_end, ..b2s };
        let other = random_tensor(case.seed ^ 1, case.dtype, &got.shape);
        let want = reference::batch_to_space(&other, &b2s).unwrap();
        prop_assert_eq!(b2s.run(&upload(&other)).unwrap().to_host_blocking().unwrap(), want);
    }
}

/// A context that binds at most 128 bytes per buffer, so small tensors take the windowed path.
fn small_binding_ctx() -> &'static wgpu_ops::Context {
    static CTX: std::sync::OnceLock<wgpu_ops::Context> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            max_binding_size: Some(128),
            webgpu_limits: common::ADAPTER_LIMITS,
            ..Default::default()
        })
        .unwrap()
    })
}

/// Bytes per outer index of the axes after the last blocked, cropped or padded one: the
/// windowed path needs whole words there for 1- and 2-byte elements. `None`: no such axis.
fn untouched_tail_bytes(
    dtype: DType,
    shape: &[usize],
    block: &[i64],
    begin: &[i64],
    end: &[i64],
) -> Option<usize> {
    let mut first = shape.len();
    while first > 1 && block[first - 1] == 1 && begin[first - 1] == 0 && end[first - 1] == 0 {
        first -= 1;
    }
    (first < shape.len()).then(|| dtype.size() * shape[first..].iter().product::<usize>())
}

fn check_windowed(
    got: Result<wgpu_ops::Tensor, Error>,
    want: &HostTensor,
    input: &HostTensor,
    tail_bytes: Option<usize>,
) -> Result<(), TestCaseError> {
    match got {
        Ok(t) => prop_assert_eq!(&t.to_host_blocking().unwrap(), want),
        Err(Error::LimitExceeded { limit, what, .. }) => {
            // Only sub-word data without whole words after the last blocked axis, and only
            // when a buffer is over the limit.
            prop_assert!(
                input.dtype.size() < 4 && tail_bytes.is_none_or(|t| t % 4 != 0),
                "{}",
                what
            );
            prop_assert!(input.data.len().max(want.data.len()) > 128);
            prop_assert_eq!(limit, "max_storage_buffer_binding_size");
        }
        Err(e) => prop_assert!(false, "{}", e),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn tensors_beyond_the_binding_limit_run_in_windows(case in case()) {
        let ctx = small_binding_ctx();
        let (data, s2b) = case.space_to_batch();
        let x = wgpu_ops::Tensor::from_host(ctx, &data).unwrap();
        let want = reference::space_to_batch(&data, &s2b).unwrap();
        let tail = untouched_tail_bytes(data.dtype, &data.shape, &s2b.block_shape, &s2b.pads_begin, &s2b.pads_end);
        check_windowed(s2b.run(&x), &want, &data, tail)?;

        let mut crops_end = s2b.pads_end.clone();
        crops_end.iter_mut().zip(&case.pads).skip(1).for_each(|(c, p)| *c = (*c).min(p.0));
        let b2s = BatchToSpace::new(s2b.block_shape.clone(), s2b.pads_begin.clone(), crops_end);
        let other = random_tensor(case.seed ^ 1, case.dtype, &want.shape);
        let want = reference::batch_to_space(&other, &b2s).unwrap();
        let tail = untouched_tail_bytes(other.dtype, &other.shape, &b2s.block_shape, &b2s.crops_begin, &b2s.crops_end);
        let y = wgpu_ops::Tensor::from_host(ctx, &other).unwrap();
        check_windowed(b2s.run(&y), &want, &other, tail)?;
    }
}

#[test]
fn rows_of_whole_vectors_move_as_vectors() {
    // Trailing axes of 4, 8 and 16 words (f32 C=4, u8 C=32 viewed as words, f64 C=8), and of 6
    // words (not a multiple of 4, the scalar run path), with padding and crops; every row run
    // is then one 16-byte access.
    for (dtype, shape) in [
        (DType::F32, [4, 3, 5, 4]),
        (DType::U8, [4, 3, 3, 32]),
        (DType::F64, [4, 3, 5, 8]),
        (DType::I16, [4, 3, 3, 12]),
    ] {
        let data = random_tensor(11, dtype, &shape);
        let b2s = BatchToSpace::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 1, 0]);
        let got = b2s.run(&upload(&data)).unwrap().to_host_blocking().unwrap();
        assert_eq!(
            got,
            reference::batch_to_space(&data, &b2s).unwrap(),
            "{dtype}"
        );
        let s2b = SpaceToBatch::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 1, 0]);
        let got = s2b.run(&upload(&data)).unwrap().to_host_blocking().unwrap();
        assert_eq!(
            got,
            reference::space_to_batch(&data, &s2b).unwrap(),
            "{dtype}"
        );
    }
}

#[test]
fn vector_runs_unrolled_move_the_same_bytes() {
    // With `gather_unroll` 2 or 4 (GPU kernels), each invocation moves that many 16-byte runs a
    // workgroup's width apart: hundreds of runs with a ragged last workgroup, with crops and
    // padding, and SpaceToBatch without padding (the scatter), against the references.
    for unroll in [2, 4] {
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(false),
            gather_unroll: Some(unroll),
            ..Default::default()
        })
        .unwrap();
        for (dtype, shape) in [
            (DType::F32, [4, 10, 18, 4]),
            (DType::U8, [4, 10, 10, 16]),
            (DType::F64, [4, 6, 8, 8]),
        ] {
            let data = random_tensor(unroll as u64, dtype, &shape);
            let x = wgpu_ops::Tensor::from_host(&ctx, &data).unwrap();
            for (begin, end) in [([0i64; 4], [0i64; 4]), ([0, 1, 1, 0], [0, 1, 1, 0])] {
                let b2s = BatchToSpace::new([1, 2, 2, 1], begin, end);
                let got = b2s.run(&x).unwrap().to_host_blocking().unwrap();
                let want = reference::batch_to_space(&data, &b2s).unwrap();
                assert_eq!(got, want, "unroll {unroll} {dtype} {b2s:?}");
                let s2b = SpaceToBatch::new([1, 2, 2, 1], begin, end);
                let got = s2b.run(&x).unwrap().to_host_blocking().unwrap();
                let want = reference::space_to_batch(&data, &s2b).unwrap();
                assert_eq!(got, want, "unroll {unroll} {dtype} {s2b:?}");
            }
        }
    }
}

#[test]
fn space_to_batch_without_padding_scatters() {
    // No padding: each input element is written where BatchToSpace would read it (contiguous
    // reads). Every dtype (1- and 2-byte ones gather, unless their trailing axes are whole
    // words); NHWC with rows of 4 words (16-byte runs), of 3 words (runs element by element),
    // the innermost axis blocked too (no runs), rank 2 and rank 6; each against the reference
    // and undone by BatchToSpace.
    let cases: [(&[usize], &[i64]); 5] = [
        (&[2, 4, 6, 4], &[1, 2, 2, 1]),
        (&[3, 6, 4, 3], &[1, 3, 2, 1]),
        (&[2, 4, 6], &[1, 2, 3]),
        (&[1, 8], &[1, 4]),
        (&[2, 2, 4, 2, 6, 2], &[1, 2, 1, 2, 3, 1]),
    ];
    for dtype in DType::ALL {
        for (k, &(shape, block)) in cases.iter().enumerate() {
            let data = random_tensor(20 + k as u64, dtype, shape);
            let zeros = vec![0i64; shape.len()];
            let s2b = SpaceToBatch::new(block.to_vec(), zeros.clone(), zeros.clone());
            let spaced = s2b.run(&upload(&data)).unwrap();
            let got = spaced.to_host_blocking().unwrap();
            let want = reference::space_to_batch(&data, &s2b).unwrap();
            assert_eq!(got, want, "{dtype} {shape:?} {block:?}");
            let b2s = BatchToSpace::new(block.to_vec(), zeros.clone(), zeros);
            let back = b2s.run(&spaced).unwrap().to_host_blocking().unwrap();
            assert_eq!(back, data, "{dtype} {shape:?} {block:?} back");
        }
    }
}

#[test]
fn nhwc_images_beyond_the_binding_limit() {
    let ctx = small_binding_ctx();
    // u8 RGBA (whole words per pixel), f32 and f64 NHWC with 2x2 blocks and padding, far
    // beyond 128 bytes: many windows per block offset.
    for (dtype, channels) in [
        (DType::U8, 4),
        (DType::F32, 3),
        (DType::F64, 1),
        (DType::I16, 2),
    ] {
        let data = random_tensor(7, dtype, &[2, 9, 11, channels]);
        let s2b = SpaceToBatch::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 1, 0]);
        let x = wgpu_ops::Tensor::from_host(ctx, &data).unwrap();
        let mut rec = ctx.recorder();
        let spaced = rec.space_to_batch(&x, &s2b).unwrap();
        let b2s = BatchToSpace::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 1, 0]);
        let back = rec.batch_to_space(&spaced, &b2s).unwrap();
        assert!(
            rec.dispatches() > 8,
            "{dtype}: {} dispatches",
            rec.dispatches()
        );
        pollster::block_on(rec.finish()).unwrap();
        assert_eq!(
            spaced.to_host_blocking().unwrap(),
            reference::space_to_batch(&data, &s2b).unwrap(),
            "{dtype}"
        );
        assert_eq!(back.to_host_blocking().unwrap(), data, "{dtype}");
    }
    // u8 RGB: 3 bytes per pixel are not whole words; the error says which limit.
    let data = random_tensor(7, DType::U8, &[1, 8, 8, 3]);
    let x = wgpu_ops::Tensor::from_host(ctx, &data).unwrap();
    match SpaceToBatch::new([1, 2, 2, 1], [0; 4], [0; 4]).run(&x) {
        Err(Error::LimitExceeded { op, limit, .. }) => {
            assert_eq!(op, "SpaceToBatch");
            assert_eq!(limit, "max_storage_buffer_binding_size");
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}
