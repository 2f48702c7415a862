//! Every example of the StridedSlice-1 and Slice-8 texts (the OpenVINO specification texts) as a GPU test with
//! shapes and values written out, with docs/spec-decisions.md applied and quoted where it overrides
//! the text. Data is `iota` (element i holds i), so the expected values are input indices.

mod common;
use common::*;
use wgpu_ops::{HostTensor, Slice, StridedSlice, Tensor};

/// Values of `iota(shape)` at the cartesian product of per-axis input indices, C order.
fn iota_select(shape: &[usize], ids: &[Vec<usize>]) -> Vec<i64> {
    let mut out = vec![0i64];
    for (k, axis_ids) in ids.iter().enumerate() {
        let stride: usize = shape[k + 1..].iter().product();
        out = out
            .iter()
            .flat_map(|&base| axis_ids.iter().map(move |&i| base + (i * stride) as i64))
            .collect();
    }
    out
}

fn check(y: &Tensor, shape: &[usize], expected: &[i64]) {
    assert_eq!(y.shape(), shape);
    assert_eq!(values(y), expected);
}

// --- StridedSlice-1 -------------------------------------------------------------------------

#[test]
fn ss_basic_example_with_decision_3b() {
    // array[0:4, 1:4, 0:4:2, 1:4:2, 3:0:-1, 3:0:-2] on a 6D [4,4,4,4,4,4] array.
    // Decision 3b (docs/spec-decisions.md): "`3:0:-1` on four elements takes three, ids
    // `[3, 2, 1]`, as numpy does; the first example's `[3, 2, 1, 0]` (and the 4 in its output
    // shape) is wrong."
    let shape = [4; 6];
    let x = upload(&iota(&shape));
    let y = StridedSlice::new([0, 1, 0, 1, 3, 3], [4, 4, 4, 4, 0, 0])
        .stride([1, 1, 2, 2, -1, -2])
        .run(&x)
        .unwrap();
    let ids = [
        vec![0, 1, 2, 3],
        vec![1, 2, 3],
        vec![0, 2],
        vec![1, 3],
        vec![3, 2, 1],
        vec![3, 1],
    ];
    check(&y, &[4, 3, 2, 2, 3, 2], &iota_select(&shape, &ids));
}

#[test]
fn ss_clamping_example_with_decision_3() {
    // Decision 3: "The clamping example is empty. `begin [1234, 2]`, `end [1234, 4321]`,
    // `stride [1, -1]` on a `[2, 2]` input gives shape `[0, 0]` ... The prose's `[1, 1]` does
    // not follow from its own rules."
    let x = upload(&iota(&[2, 2]));
    let y = StridedSlice::new([1234, 2], [1234, 4321])
        .stride([1, -1])
        .run(&x)
        .unwrap();
    check(&y, &[0, 0], &[]);
}

#[test]
fn ss_negative_end_example() {
    // array[0:2, 0:2, 0:-1] on [2, 3, 4]: ids [0, 1], [0, 1], [0, 1, 2].
    let x = upload(&iota(&[2, 3, 4]));
    let y = StridedSlice::new([0, 0, 0], [2, 2, -1])
        .stride([1, 1, 1])
        .run(&x)
        .unwrap();
    check(
        &y,
        &[2, 2, 3],
        &iota_select(&[2, 3, 4], &[vec![0, 1], vec![0, 1], vec![0, 1, 2]]),
    );
}

#[test]
fn ss_begin_end_mask_example_with_decision_2() {
    // array[1:, :, ::-1] on [2, 3, 4]. Decision 2: "An end-mask bit with a negative stride
    // runs down to index 0 inclusive ... has shape `[1, 3, 4]` and takes ids `[3, 2, 1, 0]`".
    let x = upload(&iota(&[2, 3, 4]));
    let y = StridedSlice::new([1, 1, 123], [0, 0, 2])
        .stride([1, 1, -1])
        .begin_mask([0, 1, 1])
        .end_mask([1, 1, 1])
        .new_axis_mask([0, 0, 0, 0, 0])
        .shrink_axis_mask([0, 0])
        .ellipsis_mask([0])
        .run(&x)
        .unwrap();
    check(
        &y,
        &[1, 3, 4],
        &[15, 14, 13, 12, 19, 18, 17, 16, 23, 22, 21, 20],
    );
}

#[test]
fn ss_new_axis_example() {
    // array[np.newaxis, 0:2, np.newaxis, 0:4] on [2, 4]; new-axis positions ignore their values.
    let x = upload(&iota(&[2, 4]));
    let y = StridedSlice::new([1234, 0, -1, 0], [1234, 2, 9876, 4])
        .stride([132, 1, 241, 1])
        .begin_mask([0, 0, 0, 0])
        .end_mask([0, 0, 0, 0])
        .new_axis_mask([1, 0, 1, 0])
        .shrink_axis_mask([0, 0, 0, 0])
        .ellipsis_mask([0, 0, 0, 0])
        .run(&x)
        .unwrap();
    check(&y, &[1, 2, 1, 4], &[0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn ss_shrink_axis_example() {
    // array[0:1, 0, 0:384, 0:640, 0:8] on [1, 2, 384, 640, 8]: the second axis is removed and
    // its element 0 kept, i.e. the first half of the input.
    let shape = [1, 2, 384, 640, 8];
    let x = Tensor::from_host(
        ctx(),
        &HostTensor::from_vec(
            shape.to_vec(),
            &(0..2 * 384 * 640 * 8).collect::<Vec<i32>>(),
        )
        .unwrap(),
    )
    .unwrap();
    let y = StridedSlice::new([0, 0, 0, 0, 0], [1, 0, 384, 640, 8])
        .stride([1, 1, 1, 1, 1])
        .shrink_axis_mask([0, 1, 0, 0, 0])
        .run(&x)
        .unwrap();
    assert_eq!(y.shape(), &[1, 384, 640, 8]);
    let got = y.to_host_blocking().unwrap().to_vec::<i32>().unwrap();
    assert_eq!(got, (0..384 * 640 * 8).collect::<Vec<i32>>());
}

fn ellipsis_example() -> StridedSlice {
    // array[0:4, ..., 0:5]
    StridedSlice::new([0, 0, 0], [4, 0, 5])
        .stride([1, -1, 1])
        .begin_mask([0, 0, 0])
        .end_mask([0, 0, 0])
        .new_axis_mask([0, 0, 0])
        .shrink_axis_mask([0, 0, 0])
        .ellipsis_mask([0, 1, 0])
}

fn ellipsis_new_axis_example() -> StridedSlice {
    // array[2:, ..., np.newaxis, :5] (the text's "[..., :10]" contradicts its own end value 5
    // and its output comment "begin = 0, end = 5"; the values given are used).
    StridedSlice::new([2, 1, 10, 10], [123, 1, 10, 5])
        .stride([1, -1, 1, 1])
        .begin_mask([0, 0, 1, 1])
        .end_mask([1, 1, 0, 0])
        .new_axis_mask([0, 0, 1])
        .shrink_axis_mask([0])
        .ellipsis_mask([0, 1])
}

#[test]
fn ss_ellipsis_examples_plan_only() {
    // Decision 9: "The two ellipsis examples of the text describe tensors of over 10^12
    // elements. We check their output shapes through the host-side plan, which needs neither a
    // GPU nor the data." The input lists 12 dims of 10.
    let shape = [10usize; 12];
    let plan = ellipsis_example().plan(&shape).unwrap();
    let mut expected = vec![4];
    expected.extend([10; 10]);
    expected.push(5);
    assert_eq!(plan.output_shape, expected);

    // The ellipsis covers 12 - (4 - 1 - 1) = 10 input dims (the text's formula; its listing
    // shows 8 because it speaks of a 10D input while listing 12 dims).
    let plan = ellipsis_new_axis_example().plan(&shape).unwrap();
    let mut expected = vec![8];
    expected.extend([10; 10]);
    expected.extend([1, 5]);
    assert_eq!(plan.output_shape, expected);
}

#[test]
fn ss_ellipsis_examples_on_a_small_rank_12_tensor() {
    let shape = [9, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 7];
    let x = upload(&iota(&shape));
    let whole = |d: usize| (0..d).collect::<Vec<_>>();
    let mut ids: Vec<Vec<usize>> = vec![(0..4).collect()];
    ids.extend(shape[1..11].iter().map(|&d| whole(d)));
    ids.push((0..5).collect());
    let y = ellipsis_example().run(&x).unwrap();
    let mut out_shape = vec![4];
    out_shape.extend(&shape[1..11]);
    out_shape.push(5);
    check(&y, &out_shape, &iota_select(&shape, &ids));

    let y = ellipsis_new_axis_example().run(&x).unwrap();
    ids[0] = (2..9).collect();
    let mut out_shape = vec![7];
    out_shape.extend(&shape[1..11]);
    out_shape.extend([1, 5]);
    check(&y, &out_shape, &iota_select(&shape, &ids));
}

// --- decisions that have no example in the text ---------------------------------------------

#[test]
fn decision_0_reverse_begin_still_negative_clamps_to_zero() {
    // "Example on [a0, a1, a2, a3]: begin -17, end -100, stride -1 gives [a0]; begin -5,
    // end -6, stride -1 gives [a0]; Slice-8 start -5, stop INT64_MIN, step -1 gives [a0]."
    let x = upload(&iota(&[4]));
    let y = StridedSlice::new([-17], [-100])
        .stride([-1])
        .run(&x)
        .unwrap();
    check(&y, &[1], &[0]);
    let y = StridedSlice::new([-5], [-6]).stride([-1]).run(&x).unwrap();
    check(&y, &[1], &[0]);
    let y = Slice::new([-5], [i64::MIN], [-1]).run(&x).unwrap();
    check(&y, &[1], &[0]);
}

#[test]
fn decision_1_begin_equal_end_is_empty() {
    // "begin[i] == end[i] without a shrink bit gives an empty dimension (size 0), as a[2:2]".
    let x = upload(&iota(&[5, 3]));
    let y = StridedSlice::new([2], [2]).run(&x).unwrap();
    check(&y, &[0, 3], &[]);
}

#[test]
fn decision_4_shrink_keeps_begin_and_ignores_end_and_stride() {
    // "A shrink bit keeps the single element at begin[i] (after negative adjustment) and
    // ignores end[i] and stride[i]."
    let x = upload(&iota(&[5, 2]));
    let y = StridedSlice::new([-2], [0])
        .stride([-3])
        .shrink_axis_mask([1])
        .run(&x)
        .unwrap();
    check(&y, &[2], &[6, 7]);
}

#[test]
fn decision_5_masks_of_their_own_lengths() {
    // "a shorter mask is padded with zeros, a longer one is truncated to the length of begin".
    let x = upload(&iota(&[3, 4]));
    let y = StridedSlice::new([1, 1], [2, 3])
        .begin_mask([1])
        .end_mask([0, 1, 1, 1, 1, 1])
        .new_axis_mask([0, 0, 1])
        .run(&x)
        .unwrap();
    // x[:2, 1:]
    check(&y, &[2, 3], &[1, 2, 3, 5, 6, 7]);
}

#[test]
fn decision_6_precedence() {
    // "an ellipsis bit wins over new_axis and shrink bits there; a new_axis bit wins over a
    // shrink bit there. A shrink bit ignores begin_mask and end_mask at its position".
    let x = upload(&iota(&[3, 4]));
    let y = StridedSlice::new([0, 1], [0, 0])
        .ellipsis_mask([1])
        .new_axis_mask([1, 1])
        .shrink_axis_mask([1, 0])
        .run(&x)
        .unwrap();
    // x[..., np.newaxis]
    check(&y, &[3, 4, 1], &(0..12).collect::<Vec<_>>());
    let y = StridedSlice::new([2], [0])
        .begin_mask([1])
        .end_mask([1])
        .shrink_axis_mask([1])
        .run(&x)
        .unwrap();
    check(&y, &[4], &[8, 9, 10, 11]);
}

#[test]
fn decision_8_trailing_dims_whole_and_empty_begin_is_identity() {
    let x = upload(&iota(&[2, 3]));
    let y = StridedSlice::new([1], [2]).run(&x).unwrap();
    check(&y, &[1, 3], &[3, 4, 5]);
    let y = StridedSlice::new(Vec::<i64>::new(), Vec::<i64>::new())
        .run(&x)
        .unwrap();
    check(&y, &[2, 3], &[0, 1, 2, 3, 4, 5]);
}

#[test]
fn rank_0_input() {
    let x = upload(&iota(&[]));
    let y = StridedSlice::new(Vec::<i64>::new(), Vec::<i64>::new())
        .run(&x)
        .unwrap();
    check(&y, &[], &[0]);
    let y = StridedSlice::new([0], [0])
        .new_axis_mask([1])
        .run(&x)
        .unwrap();
    check(&y, &[1], &[0]);
}

// --- Slice-8 --------------------------------------------------------------------------------

fn slice10(start: i64, stop: i64, step: i64, axes: bool) -> Vec<i64> {
    let x = upload(&iota(&[10]));
    let mut op = Slice::new([start], [stop], [step]);
    if axes {
        op = op.axes([0]);
    }
    let y = op.run(&x).unwrap();
    assert_eq!(y.shape().len(), 1);
    values(&y)
}

#[test]
fn slice_examples_1_to_9() {
    assert_eq!(slice10(1, 8, 1, true), [1, 2, 3, 4, 5, 6, 7]); // 1: basic
    assert_eq!(slice10(1, 8, 1, false), [1, 2, 3, 4, 5, 6, 7]); // 2: axes default
    assert_eq!(slice10(1, 8, 2, true), [1, 3, 5, 7]); // 3: step 2
    assert_eq!(slice10(-100, 100, 1, true), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]); // 4
    assert_eq!(slice10(9, -11, -1, true), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]); // 5
    assert_eq!(slice10(9, 0, -1, true), [9, 8, 7, 6, 5, 4, 3, 2, 1]); // 6
    assert_eq!(slice10(9, -10, -1, true), [9, 8, 7, 6, 5, 4, 3, 2, 1]); // 7
    assert_eq!(slice10(9, -11, -2, true), [9, 7, 5, 3, 1]); // 8
    assert_eq!(slice10(100, -100, -1, true), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]); // 9
}

#[test]
fn slice_example_10_2d_all_axes() {
    let x = upload(&iota(&[2, 5]));
    let y = Slice::new([0, 1], [2, 4], [1, 2])
        .axes([0, 1])
        .run(&x)
        .unwrap();
    check(&y, &[2, 2], &[1, 3, 6, 8]);
}

#[test]
fn slice_examples_11_and_12_3d() {
    // The text leaves the data shape open; [6, 12, 7] makes both slices non-trivial.
    let shape = [6, 12, 7];
    let x = upload(&iota(&shape));
    let y = Slice::new([0, 0, 0], [4, 10, 5], [1, 1, 1])
        .axes([0, 1, 2])
        .run(&x)
        .unwrap();
    let ids = [(0..4).collect(), (0..10).collect(), (0..5).collect()];
    check(&y, &[4, 10, 5], &iota_select(&shape, &ids));
    let y = Slice::new([0, 0], [4, 10], [1, 1])
        .axes([0, 1])
        .run(&x)
        .unwrap();
    let ids = [(0..4).collect(), (0..10).collect(), (0..7).collect()];
    check(&y, &[4, 10, 7], &iota_select(&shape, &ids));
}

#[test]
fn decision_10_sentinels_and_negative_axes() {
    // "Python slicing rules throughout, including INT64_MAX/INT64_MIN (and INT32_MAX for int32
    // index inputs) as 'to the end' sentinels."
    let x = upload(&iota(&[2, 5]));
    let y = Slice::new([1], [i64::MAX], [1]).axes([-1]).run(&x).unwrap();
    check(&y, &[2, 4], &[1, 2, 3, 4, 6, 7, 8, 9]);
    let y = Slice::new([-1], [i64::MIN], [-2])
        .axes([1])
        .run(&x)
        .unwrap();
    check(&y, &[2, 3], &[4, 2, 0, 9, 7, 5]);
    let y = Slice::new([1i32], [i32::MAX], [1i32])
        .axes([1i32])
        .run(&x)
        .unwrap();
    check(&y, &[2, 4], &[1, 2, 3, 4, 6, 7, 8, 9]);
    let y = Slice::new([4i32], [i32::MIN], [-1i32])
        .axes([1i32])
        .run(&x)
        .unwrap();
    check(&y, &[2, 5], &[4, 3, 2, 1, 0, 9, 8, 7, 6, 5]);
    // Index inputs of any integer type read from a host tensor, e.g. u8 and i16.
    let start = HostTensor::from_vec(vec![1], &[3u8])
        .unwrap()
        .to_indices("Slice", "start")
        .unwrap();
    let stop = HostTensor::from_vec(vec![1], &[-5i16])
        .unwrap()
        .to_indices("Slice", "stop")
        .unwrap();
    let y = Slice {
        start,
        stop,
        step: vec![-1],
        axes: Some(vec![1]),
    }
    .run(&x)
    .unwrap();
    check(&y, &[2, 3], &[3, 2, 1, 8, 7, 6]);
}
