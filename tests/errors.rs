//! Every rule of the spec-decisions file and every malformed input gets an error that names
//! the op, the input and the rule; nothing panics. wgpu validation errors come back as errors.

mod common;
use common::*;
use wgpu_ops::{Context, ContextOptions, Error, HostTensor, Slice, StridedSlice};

fn invalid(result: Result<wgpu_ops::Tensor, Error>) -> (String, String, String) {
    match result {
        Err(Error::InvalidInput { op, input, message }) => {
            let shown = Error::InvalidInput {
                op,
                input: input.clone(),
                message: message.clone(),
            }
            .to_string();
            assert!(shown.starts_with(&format!("{op}: ")), "{shown}");
            (op.to_string(), input, message)
        }
        other => panic!("expected an InvalidInput error, got {other:?}"),
    }
}

fn ss(op: StridedSlice, shape: &[usize]) -> (String, String, String) {
    invalid(op.run(&upload(&iota(shape))))
}

fn sl(op: Slice, shape: &[usize]) -> (String, String, String) {
    invalid(op.run(&upload(&iota(shape))))
}

#[test]
fn strided_slice_rules() {
    // Decision 7: "A zero stride ... [is an error]."
    let (op, input, msg) = ss(
        StridedSlice::new([0, 0, 0], [1, 1, 1]).stride([1, 1, 0]),
        &[2, 2, 2],
    );
    assert_eq!(
        (op.as_str(), input.as_str(), msg.as_str()),
        (
            "StridedSlice",
            "stride",
            "stride[2] is 0; strides must be non-zero"
        )
    );
    // Decision 7: "Two or more ellipsis bits are an error wherever they are, also past the
    // length of `begin`."
    let (_, input, msg) = ss(
        StridedSlice::new([0, 0], [1, 1]).ellipsis_mask([1, 1]),
        &[2, 2],
    );
    assert_eq!(input, "ellipsis_mask");
    assert!(msg.contains("at most one ellipsis"), "{msg}");
    // The same with a one-element begin: the second bit lies past it and still counts.
    let (_, input, msg) = ss(StridedSlice::new([0], [1]).ellipsis_mask([1, 1]), &[2, 2]);
    assert_eq!(input, "ellipsis_mask");
    assert!(msg.contains("positions [0, 1]"), "{msg}");
    let (_, input, _) = ss(
        StridedSlice::new([0], [1]).ellipsis_mask([0, 1, 0, 1]),
        &[2, 2],
    );
    assert_eq!(input, "ellipsis_mask");
    // Decision 7: "`begin`, `end` and `stride` of different lengths ... are errors"
    let (_, input, msg) = ss(StridedSlice::new([0, 0], [1]), &[2, 2]);
    assert_eq!(input, "end");
    assert!(msg.contains("same length"), "{msg}");
    let (_, input, _) = ss(StridedSlice::new([0], [1]).stride([1, 1]), &[2, 2]);
    assert_eq!(input, "stride");
    // Decision 7: "more indexing positions than the input has axes (new axes and the ellipsis
    // not counted; numpy's \"too many indices\") are errors"
    let (_, input, msg) = ss(StridedSlice::new([0, 0, 0], [1, 1, 1]), &[2, 2]);
    assert_eq!(input, "begin");
    assert!(msg.contains("too many indices"), "{msg}");
    // ... while new axes and the ellipsis do not count.
    StridedSlice::new([0, 0, 0, 0], [1, 1, 1, 1])
        .new_axis_mask([1, 0, 1])
        .ellipsis_mask([0, 0, 0, 1])
        .run(&upload(&iota(&[2, 2])))
        .unwrap();
    // Decision 4: "A shrink index outside `[-dim, dim - 1]` is an error and is not clamped".
    let (_, input, msg) = ss(StridedSlice::new([7], [8]).shrink_axis_mask([1]), &[5]);
    assert_eq!(input, "begin");
    assert_eq!(msg, "begin[0] is 7 with shrink_axis_mask[0] set, outside [-5, 4] for input dimension 0 of size 5");
    let (_, _, msg) = ss(
        StridedSlice::new([0, -3], [0, 0]).shrink_axis_mask([0, 1]),
        &[2, 2],
    );
    assert!(msg.contains("outside [-2, 1]"), "{msg}");
    // Masks hold 0 and 1 only.
    let (_, input, msg) = ss(StridedSlice::new([0], [1]).begin_mask([0, 2]), &[3]);
    assert_eq!(
        (input.as_str(), msg.as_str()),
        (
            "begin_mask",
            "begin_mask[1] is 2; mask values must be 0 or 1"
        )
    );
    // Ranks beyond 16.
    let (_, input, msg) = ss(StridedSlice::new([0], [1]), &[1; 17]);
    assert_eq!(input, "data");
    assert!(msg.contains("rank 17"), "{msg}");
}

#[test]
fn slice_rules() {
    // Decision 10: "A zero step, a repeated axis, an axis outside `[-rank, rank - 1]`, and
    // start, stop, step and axes of different lengths are errors."
    let (op, input, msg) = sl(Slice::new([0], [1], [0]), &[3]);
    assert_eq!(
        (op.as_str(), input.as_str(), msg.as_str()),
        ("Slice", "step", "step[0] is 0; steps must be non-zero")
    );
    let (_, input, msg) = sl(Slice::new([0, 0], [1, 1], [1, 1]).axes([1, -1]), &[3, 3]);
    assert_eq!(
        (input.as_str(), msg.as_str()),
        (
            "axes",
            "axes[1] is -1, which repeats axes[0] (axis 1); axes must be unique"
        )
    );
    let (_, input, msg) = sl(Slice::new([0], [1], [1]).axes([2]), &[3, 3]);
    assert_eq!(
        (input.as_str(), msg.as_str()),
        ("axes", "axes[0] is 2, outside [-2, 1] for data of rank 2")
    );
    let (_, input, _) = sl(Slice::new([0], [1], [1]).axes([-3]), &[3, 3]);
    assert_eq!(input, "axes");
    let (_, input, _) = sl(Slice::new([0], [1, 2], [1]), &[3, 3]);
    assert_eq!(input, "stop");
    let (_, input, _) = sl(Slice::new([0], [1], [1, 1]), &[3, 3]);
    assert_eq!(input, "step");
    let (_, input, _) = sl(Slice::new([0], [1], [1]).axes([0, 1]), &[3, 3]);
    assert_eq!(input, "axes");
    let (_, input, msg) = sl(Slice::new([0, 0, 0], [1, 1, 1], [1, 1, 1]), &[3, 3]);
    assert_eq!(input, "start");
    assert!(msg.contains("rank 2"), "{msg}");
    // Slice-8: "data - tensor ... of ... rank greater or equal to 1".
    let (_, input, _) = sl(
        Slice::new(Vec::<i64>::new(), Vec::<i64>::new(), Vec::<i64>::new()),
        &[],
    );
    assert_eq!(input, "data");
}

#[test]
fn index_inputs_must_be_1d_integers() {
    let floats = HostTensor::from_vec(vec![2], &[0.0f32, 1.0]).unwrap();
    let e = floats.to_indices("StridedSlice", "begin").unwrap_err();
    assert_eq!(
        e.to_string(),
        "StridedSlice: begin must have an integer dtype but is f32"
    );
    let matrix = HostTensor::from_vec(vec![1, 2], &[0i64, 1]).unwrap();
    let e = matrix.to_indices("Slice", "axes").unwrap_err();
    assert_eq!(
        e.to_string(),
        "Slice: axes must be 1-D but has shape [1, 2]"
    );
}

#[test]
fn host_tensor_lengths_are_checked() {
    let e = HostTensor::from_bytes(wgpu_ops::DType::I32, vec![2, 2], vec![0; 15]).unwrap_err();
    assert!(e.to_string().contains("15 bytes"), "{e}");
    let t = HostTensor::from_vec(vec![2], &[1i32, 2]).unwrap();
    assert!(t.to_vec::<f32>().is_err());
}

#[test]
fn tensors_of_another_context_are_refused() {
    // wgpu-core would panic on a buffer of another device; the op refuses it first.
    let other = Context::new_blocking(ContextOptions::default()).unwrap();
    let x = upload(&iota(&[4]));
    let (op, input, msg) =
        invalid(other.run(|rec| rec.strided_slice(&x, &StridedSlice::new([1], [3]))));
    assert_eq!((op.as_str(), input.as_str()), ("StridedSlice", "data"));
    assert!(msg.contains("another Context"), "{msg}");
}

#[test]
fn unknown_adapter_is_an_error() {
    let e = Context::new_blocking(ContextOptions {
        adapter_name: Some("no such adapter 1234".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("no such adapter 1234"), "{e}");
}

#[test]
fn workgroup_sizes_outside_the_device_limits_are_errors() {
    for bad in [0, 96, 1 << 16] {
        let e = Context::new_blocking(ContextOptions {
            workgroup_size: Some(bad),
            ..Default::default()
        })
        .unwrap_err();
        let (op, input, msg) = invalid(Err(e));
        assert_eq!((op.as_str(), input.as_str()), ("Context", "workgroup_size"));
        assert!(
            msg.contains(&format!("workgroup_size {bad} must be a power of two")),
            "{msg}"
        );
    }
}

/// A context asked for WebGPU's default limits gets them from the device, or the adapter's
/// where it offers less: 256-byte offsets, 8 storage buffers per kernel, 256 MiB buffers.
#[test]
fn contexts_on_webgpu_limits_get_them() {
    for on in [true, false] {
        let ctx = Context::new_blocking(ContextOptions {
            webgpu_limits: Some(on),
            ..Default::default()
        })
        .unwrap();
        let adapter = ctx.adapter().limits();
        let want = match on {
            true => wgpu::Limits::default().or_worse_values_from(&adapter),
            false => adapter.clone(),
        };
        assert_eq!(ctx.device().limits(), want, "webgpu_limits {on}");
        assert_eq!(ctx.limits(), &want, "webgpu_limits {on}");
        if on {
            assert!(want.min_storage_buffer_offset_alignment >= 256);
            assert!(want.max_storage_buffers_per_shader_stage <= 8);
            assert!(want.max_buffer_size <= 256 << 20);
            assert!(ctx.max_buffer_size() <= 256 << 20);
        }
    }
    // The suite's third pass sets WGPU_OPS_WEBGPU_LIMITS=1: its contexts are on those limits.
    if std::env::var("WGPU_OPS_WEBGPU_LIMITS").as_deref() == Ok("1") {
        let ctx = Context::new_blocking(ContextOptions::default()).unwrap();
        assert_eq!(ctx.limits().min_storage_buffer_offset_alignment, 256);
        assert_eq!(
            common::ctx().limits().min_uniform_buffer_offset_alignment,
            256
        );
    }
}

/// Kernels that hold a parameter slot per axis (Pad, the scatters) refuse data of more axes
/// than they hold, and OneHot a depth whose positions no binding holds: errors naming the op,
/// not an index out of bounds.
#[test]
fn per_axis_kernels_refuse_what_their_parameters_cannot_hold() {
    use wgpu_ops::kernels::{pad::PadMode, scatter::ScatterReduction};
    use wgpu_ops::Out;
    let shape = vec![1usize; wgpu_ops::ops::MAX_RANK + 1];
    let x = upload(&iota(&shape));
    let mut rec = ctx().recorder();
    let mut pads = vec![0i64; 2 * shape.len()];
    pads[0] = 1;
    let (op, _, message) = invalid(rec.pad_to(&x, &pads, PadMode::Edge, None, None, Out::NEW));
    assert_eq!(op, "Pad");
    assert!(message.contains("ranks up to 16"), "{message}");
    let zeros = upload(&HostTensor::from_vec(shape.clone(), &[0i64]).unwrap());
    let (op, _, message) =
        invalid(rec.scatter_elements_to(&x, &zeros, &x, 0, ScatterReduction::Add, Out::NEW));
    assert_eq!(op, "ScatterElements");
    assert!(message.contains("ranks up to 16"), "{message}");
    let indices = upload(&HostTensor::from_vec(vec![2], &[0i64, 1]).unwrap());
    let value = upload(&HostTensor::from_vec(vec![], &[1i64]).unwrap());
    let (op, input, _) = invalid(rec.one_hot_to(&indices, 1 << 40, &value, &value, -1, Out::NEW));
    assert_eq!((op.as_str(), input.as_str()), ("OneHot", "depth"));
}
