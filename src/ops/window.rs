//! ONNX Conv, ConvTranspose and the pools (MaxPool, AveragePool, LpPool and the Global
//! pools). Conv gathers the windows of its padded input into one tensor (a strided gather: no
//! kernel of its own) and multiplies them by the weights (a MatMul, bias as the product's
//! epilogue). ConvTranspose is the Conv of its input spread out by the strides (zeros between
//! the elements) with the kernel flipped. A pool reduces its windows where they lie: they are a
//! strided walk over the padded input (`ReduceWalk`), read by the reduction kernel directly.
//!
//! Conv's window tensor holds every input element once per window that reads it (kernel size
//! over stride squared times the input, for 2-D): memory traded for reusing the MatMul
//! kernels, bounded: beyond [`window_budget`] the windows are gathered and multiplied in bands
//! of images and output rows ([`WindowBands`]), each band's result copied into place. A pool
//! needs no such tensor: beyond one binding its reduction runs in windows of output rows.
//! `window_plan` is plain data and shared with the CPU interpreter.

use crate::kernels::block_remap::{CopyDim, CopyPiece};
use crate::kernels::gather::{GatherDim, GatherPlan};
use crate::kernels::operands::gcd;
use crate::kernels::pad::PadMode;
use crate::kernels::program::Values;
use crate::kernels::reduce::ReduceWalk;
use crate::ops::elementwise::{Arg, Program};
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

/// The window attributes shared by Conv, ConvTranspose and the pools, as the node gives them
/// (`None`: absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct WindowAttrs<'a> {
    /// The window's spatial shape (Conv: the weights' when absent).
    pub kernel_shape: Option<&'a [i64]>,
    /// Steps between windows per spatial axis (1).
    pub strides: Option<&'a [i64]>,
    /// Steps between a window's elements per spatial axis (1).
    pub dilations: Option<&'a [i64]>,
    /// Padding at the start of each spatial axis, then at the end of each (0).
    pub pads: Option<&'a [i64]>,
    /// `NOTSET` (or empty), `SAME_UPPER`, `SAME_LOWER` or `VALID`.
    pub auto_pad: &'a str,
    /// The pools' output lengths round up (a last window may start in the end padding).
    pub ceil_mode: bool,
}

/// Where the windows of a sliding-window op lie, per spatial axis (plain data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// The window's length per spatial axis.
    pub kernel: Vec<usize>,
    /// Steps between windows.
    pub strides: Vec<usize>,
    /// Steps between a window's elements.
    pub dilations: Vec<usize>,
    /// The op's padding (explicit, or from `auto_pad`): AveragePool's `count_include_pad`
    /// counts it.
    pub pads_begin: Vec<usize>,
    /// The op's padding at the end of each axis.
    pub pads_end: Vec<usize>,
    /// Padding past `pads_end` that the last window of `ceil_mode` reaches (counted nowhere).
    pub extra_end: Vec<usize>,
    /// The output's length per spatial axis.
    pub output: Vec<usize>,
}

impl WindowPlan {
    /// The kernel's extent along axis `j` with its dilation.
    pub fn extent(&self, j: usize) -> usize {
        (self.kernel[j] - 1) * self.dilations[j] + 1
    }

    fn padded(&self, spatial: &[usize]) -> Vec<usize> {
        (0..spatial.len())
            .map(|j| self.pads_begin[j] + spatial[j] + self.pads_end[j] + self.extra_end[j])
            .collect()
    }
}

/// `values` (one per spatial axis, each at least `min`) or `default` for each axis.
fn per_axis(
    op: &'static str,
    name: &'static str,
    values: Option<&[i64]>,
    axes: usize,
    min: i64,
    default: usize,
) -> Result<Vec<usize>> {
    let Some(v) = values else {
        return Ok(vec![default; axes]);
    };
    if v.len() != axes {
        return Err(Error::invalid(
            op,
            name,
            format!(
                "{name} has {} values but the input has {axes} spatial axes",
                v.len()
            ),
        ));
    }
    v.iter()
        .map(|&x| {
            if x > i32::MAX as i64 {
                Err(Error::invalid(
                    op,
                    name,
                    format!("{name} {v:?} holds {x}; each must be below 2^31"),
                ))
            } else if x < min {
                Err(Error::invalid(
                    op,
                    name,
                    format!("{name} {v:?} holds {x}; each must be at least {min}"),
                ))
            } else {
                usize::try_from(x).map_err(|_| Error::invalid(op, name, "value too large"))
            }
        })
        .collect()
}

/// Plans the windows of `kernel` (its length per spatial axis) over `spatial`, the input's
/// spatial axes, as ONNX Conv and the pools define them (onnxruntime's rules where the spec
/// is silent): `auto_pad` SAME gives `ceil(input / stride)` outputs with the padding split
/// evenly, the odd one at the end for SAME_UPPER; `ceil_mode` rounds the count of windows up
/// but drops a last window that would start in the end padding.
pub fn window_plan(
    op: &'static str,
    spatial: &[usize],
    kernel: &[usize],
    attrs: &WindowAttrs,
) -> Result<WindowPlan> {
    let k = spatial.len();
    if kernel.len() != k {
        return Err(Error::invalid(
            op,
            "kernel_shape",
            format!(
                "kernel_shape {kernel:?} has {} axes but the input has {k} spatial axes",
                kernel.len()
            ),
        ));
    }
    if let Some(j) = kernel.iter().position(|&n| n == 0) {
        return Err(Error::invalid(
            op,
            "kernel_shape",
            format!("kernel_shape {kernel:?} is 0 along spatial axis {j}"),
        ));
    }
    let strides = per_axis(op, "strides", attrs.strides, k, 1, 1)?;
    let dilations = per_axis(op, "dilations", attrs.dilations, k, 1, 1)?;
    let mut plan = WindowPlan {
        kernel: kernel.to_vec(),
        strides,
        dilations,
        pads_begin: vec![0; k],
        pads_end: vec![0; k],
        extra_end: vec![0; k],
        output: vec![0; k],
    };
    let auto_pad = match attrs.auto_pad {
        "" => "NOTSET",
        other => other,
    };
    match auto_pad {
        "NOTSET" => {
            if let Some(p) = attrs.pads {
                if p.len() != 2 * k {
                    return Err(Error::invalid(
                        op,
                        "pads",
                        format!(
                            "pads has {} values; it needs 2 per spatial axis ({})",
                            p.len(),
                            2 * k
                        ),
                    ));
                }
                let all = per_axis(op, "pads", Some(p), 2 * k, 0, 0)?;
                plan.pads_begin = all[..k].to_vec();
                plan.pads_end = all[k..].to_vec();
            }
        }
        "VALID" => {}
        "SAME_UPPER" | "SAME_LOWER" => {
            for (j, &len) in spatial.iter().enumerate() {
                let out = len.div_ceil(plan.strides[j]);
                let total =
                    ((out.max(1) - 1) * plan.strides[j] + plan.extent(j)).saturating_sub(len);
                let (small, large) = (total / 2, total - total / 2);
                (plan.pads_begin[j], plan.pads_end[j]) = if auto_pad == "SAME_UPPER" {
                    (small, large)
                } else {
                    (large, small)
                };
            }
        }
        other => {
            return Err(Error::invalid(
                op,
                "auto_pad",
                format!(
                    "auto_pad is '{}'; it is NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                    other.escape_debug()
                ),
            ))
        }
    }
    for (j, &len) in spatial.iter().enumerate() {
        let (s, e) = (plan.strides[j], plan.extent(j));
        // `SAME` gives ceil(len / stride) windows: none over an empty axis, where the
        // padding would otherwise make one.
        if len == 0 && auto_pad.starts_with("SAME") {
            continue;
        }
        let span = plan.pads_begin[j] + len + plan.pads_end[j];
        // The pools take an axis shorter than the kernel's extent: the spec's formula gives
        // no window (or, with `ceil_mode`, one that starts in the input), as the reference
        // and onnxruntime's AveragePool and LpPool give. onnxruntime refuses such a Conv.
        if span < e && op != "Conv" {
            let short = (e - span) as u64;
            let starts_inside = len + plan.pads_begin[j] > 0;
            let out =
                if attrs.ceil_mode && auto_pad == "NOTSET" && short < s as u64 && starts_inside {
                    1
                } else {
                    0
                };
            plan.output[j] = out;
            plan.extra_end[j] = if out == 1 { e - span } else { 0 };
            continue;
        }
        if span < e {
            return Err(Error::invalid(
                op,
                "X",
                format!(
                    "spatial axis {j} holds {span} elements with its padding, fewer than the kernel's extent {e} (kernel {} with dilation {})",
                    plan.kernel[j], plan.dilations[j]
                ),
            ));
        }
        let mut out = (span - e) / s + 1;
        if attrs.ceil_mode && auto_pad == "NOTSET" {
            out = (span - e).div_ceil(s) + 1;
            if (out - 1) * s >= len + plan.pads_begin[j] {
                out -= 1;
            }
        }
        plan.output[j] = out;
        plan.extra_end[j] = ((out - 1) * s + e).saturating_sub(span);
    }
    check_sizes(op, &plan.output, &plan.kernel)?;
    Ok(plan)
}

/// Output and window element counts must be countable (the tensors they size are checked
/// against the device when allocated).
fn check_sizes(op: &'static str, output: &[usize], kernel: &[usize]) -> Result<()> {
    for (name, lens) in [("output", output), ("kernel", kernel)] {
        if crate::host::checked_numel(lens).is_none_or(|n| n > isize::MAX as usize) {
            return Err(Error::invalid(
                op,
                "X",
                format!("the {name}'s spatial shape {lens:?} holds too many elements"),
            ));
        }
    }
    Ok(())
}

/// The input spatial index (without padding) that window `o`'s element `t` reads along axis
/// `j`, or `None` where it reads padding.
pub fn window_source(
    plan: &WindowPlan,
    spatial: &[usize],
    j: usize,
    o: usize,
    t: usize,
) -> Option<usize> {
    let p = o * plan.strides[j] + t * plan.dilations[j];
    p.checked_sub(plan.pads_begin[j])
        .filter(|&i| i < spatial[j])
}

/// AveragePool's divisor per output position ([output...]): the window's elements in the
/// input, plus those in the op's padding when `include_pad` (never those only `ceil_mode`
/// reaches), as onnxruntime counts them.
pub fn average_counts(plan: &WindowPlan, spatial: &[usize], include_pad: bool) -> Vec<usize> {
    let per_axis: Vec<Vec<usize>> = (0..spatial.len())
        .map(|j| {
            (0..plan.output[j])
                .map(|o| {
                    (0..plan.kernel[j])
                        .filter(|&t| {
                            let p = o * plan.strides[j] + t * plan.dilations[j];
                            if include_pad {
                                p < plan.pads_begin[j] + spatial[j] + plan.pads_end[j]
                            } else {
                                window_source(plan, spatial, j, o, t).is_some()
                            }
                        })
                        .count()
                })
                .collect()
        })
        .collect();
    let mut counts = vec![1usize];
    for axis in &per_axis {
        counts = counts
            .iter()
            .flat_map(|&c| axis.iter().map(move |&n| c * n))
            .collect();
    }
    counts
}

/// ConvTranspose's geometry per spatial axis: the output length and the padding (negative:
/// the output reaches past the scattered input) at each end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransposePlan {
    /// The kernel's length per spatial axis.
    pub kernel: Vec<usize>,
    /// Steps between the input's positions in the output.
    pub strides: Vec<usize>,
    /// Steps between the kernel's elements.
    pub dilations: Vec<usize>,
    /// Padding at the start of each axis (negative: the output starts before the input's
    /// first scattered position).
    pub pads_begin: Vec<i64>,
    /// The output's length per spatial axis.
    pub output: Vec<usize>,
}

/// The attributes ConvTranspose adds to the window ones.
#[derive(Clone, Copy, Debug, Default)]
pub struct TransposeAttrs<'a> {
    /// Kernel shape, strides, dilations, pads and `auto_pad`.
    pub window: WindowAttrs<'a>,
    /// Elements added at the end of each spatial axis of the output (0).
    pub output_padding: Option<&'a [i64]>,
    /// Spatial lengths (or the whole shape, of which the spatial ones are used).
    pub output_shape: Option<&'a [i64]>,
}

/// Plans ConvTranspose: output `stride * (input - 1) + output_padding + extent - pads`; with
/// `output_shape` (or `auto_pad` SAME, which asks for `input * stride`) the padding is what
/// that length needs, split evenly with the odd one at the start, or at the end for
/// SAME_UPPER (the ONNX reference's split; negative totals make the output longer).
pub fn transpose_plan(
    spatial: &[usize],
    kernel: &[usize],
    attrs: &TransposeAttrs,
) -> Result<TransposePlan> {
    const OP: &str = "ConvTranspose";
    let k = spatial.len();
    let w = &attrs.window;
    check_kernel_shape(OP, w.kernel_shape, kernel)?;
    let strides = per_axis(OP, "strides", w.strides, k, 1, 1)?;
    let dilations = per_axis(OP, "dilations", w.dilations, k, 1, 1)?;
    let output_padding = per_axis(OP, "output_padding", attrs.output_padding, k, 0, 0)?;
    let auto_pad = match w.auto_pad {
        "" => "NOTSET",
        other => other,
    };
    if !matches!(auto_pad, "NOTSET" | "SAME_UPPER" | "SAME_LOWER" | "VALID") {
        return Err(Error::invalid(
            OP,
            "auto_pad",
            format!(
                "auto_pad is '{}'; it is NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                auto_pad.escape_debug()
            ),
        ));
    }
    let wanted: Option<Vec<i64>> = match attrs.output_shape {
        Some(s) if s.len() == k => Some(s.to_vec()),
        Some(s) if s.len() == k + 2 => Some(s[2..].to_vec()),
        Some(s) => {
            return Err(Error::invalid(
                OP,
                "output_shape",
                format!("output_shape {s:?} has neither {k} nor {} values", k + 2),
            ))
        }
        None if auto_pad.starts_with("SAME") => {
            Some((0..k).map(|j| (spatial[j] * strides[j]) as i64).collect())
        }
        None => None,
    };
    let explicit = match (wanted.is_some(), w.pads) {
        (false, Some(p)) if auto_pad == "NOTSET" => {
            if p.len() != 2 * k {
                return Err(Error::invalid(
                    OP,
                    "pads",
                    format!(
                        "pads has {} values; it needs 2 per spatial axis ({})",
                        p.len(),
                        2 * k
                    ),
                ));
            }
            per_axis(OP, "pads", Some(p), 2 * k, 0, 0)?
        }
        _ => vec![0; 2 * k],
    };
    let mut plan = TransposePlan {
        kernel: kernel.to_vec(),
        strides,
        dilations,
        pads_begin: vec![0; k],
        output: vec![0; k],
    };
    // An empty spatial axis adds nothing: the output is the bias over the length the
    // formula gives (stride * -1 + the kernel's extent ...), as onnxruntime computes it.
    for j in 0..k {
        let extent = ((kernel[j] - 1) * plan.dilations[j] + 1) as i64;
        let natural =
            plan.strides[j] as i64 * (spatial[j] as i64 - 1) + output_padding[j] as i64 + extent;
        let (begin, out) = match &wanted {
            Some(shape) => {
                let total = natural - shape[j];
                let half = total.div_euclid(2);
                let begin = if auto_pad == "SAME_UPPER" {
                    half
                } else {
                    total - half
                };
                (begin, shape[j])
            }
            None => {
                let (b, e) = (explicit[j] as i64, explicit[k + j] as i64);
                (b, natural - b - e)
            }
        };
        if out < 1 {
            return Err(Error::invalid(
                OP,
                "pads",
                format!(
                    "pads {:?} and output_shape {:?} leave the output's spatial axis {j} with {out} elements",
                    w.pads.unwrap_or_default(),
                    attrs.output_shape.unwrap_or_default()
                ),
            ));
        }
        plan.pads_begin[j] = begin;
        plan.output[j] = out as usize;
    }
    check_sizes(OP, &plan.output, &plan.kernel)?;
    Ok(plan)
}

/// An error of making `what` for `op`, named for `op` (a tensor's allocation names no op).
fn for_op(op: &'static str, what: &str, e: Error) -> Error {
    match e {
        Error::InvalidInput { message, .. } => Error::InvalidInput {
            op,
            input: "X".into(),
            message: format!("{what}: {message}"),
        },
        Error::LimitExceeded {
            what: inner,
            limit,
            needed,
            max,
            ..
        } => Error::LimitExceeded {
            op,
            what: format!("{what} ({inner})"),
            limit,
            needed,
            max,
        },
        other => other,
    }
}

/// The most bytes the windows of a Conv (its im2col columns) or a pool take at once before
/// they are gathered and reduced in bands: 64 MiB (large enough to keep a GPU busy), at most one binding
/// (a larger B would be multiplied in slices of its rows, each copied out) and an eighth of
/// the context's memory limit.
pub fn window_budget(ctx: &crate::Context) -> u64 {
    (64u64 << 20)
        .min(ctx.binding_limit())
        .min(ctx.max_memory() / 8)
}

/// Bands of a Conv's output: `images` images at a time, and within each `rows` positions
/// of the first output axis at a time (all of them when whole images fit the budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowBands {
    /// Images in all.
    pub n: usize,
    /// Images per band.
    pub images: usize,
    /// Positions along the first output axis.
    pub h: usize,
    /// Positions of that axis per band.
    pub rows: usize,
}

impl WindowBands {
    /// Bands of at most `budget` bytes of windows (at least one output row each) for `n`
    /// images of `image_bytes` of windows each, with `m` output channels, output positions
    /// `output` and elements of `elem` bytes; `None` where all fit at once, or where 1- and
    /// 2-byte elements would leave a band's runs in the output not whole 32-bit words (the
    /// copies move words).
    pub fn choose(
        n: usize,
        m: usize,
        output: &[usize],
        image_bytes: u64,
        elem: usize,
        budget: u64,
    ) -> Option<WindowBands> {
        let h = *output.first()?;
        let rest: usize = output[1..].iter().product();
        if image_bytes.checked_mul(n as u64)? <= budget || h == 0 || image_bytes == 0 {
            return None;
        }
        // Elements per 32-bit word, and the step a count of things `size` elements long
        // must be a multiple of for them to fill whole words.
        let per_word = (4 / elem.clamp(1, 4)).max(1);
        let step = |size: usize| per_word / gcd(size as u64, per_word as u64) as usize;
        if image_bytes <= budget {
            let images = ((budget / image_bytes) as usize).clamp(1, n);
            let images = images - images % step(m * h * rest);
            return (images > 0).then_some(WindowBands {
                n,
                images,
                h,
                rows: h,
            });
        }
        if !(h * rest).is_multiple_of(per_word) {
            return None;
        }
        let row_bytes = image_bytes / h as u64;
        let rows = ((budget / row_bytes.max(1)) as usize).clamp(1, h);
        let step = step(rest);
        Some(WindowBands {
            n,
            images: 1,
            h,
            rows: (rows - rows % step).max(step),
        })
    }

    /// Each band as (first image, images, first row, rows).
    pub fn iter(self) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let starts = (0..self.n).step_by(self.images);
        starts.flat_map(move |n0| {
            let nb = self.images.min(self.n - n0);
            (0..self.h)
                .step_by(self.rows)
                .map(move |r0| (n0, nb, r0, self.rows.min(self.h - r0)))
        })
    }
}

/// Conv's bias as a MatMul epilogue: the product plus the one operand.
fn bias_program(rec: &Recorder, op: &'static str, dtype: DType) -> Result<Program> {
    // On u32 pairs where the MatMul it ends computes on them (f64 without SHADER_F64).
    let emulate64 =
        crate::kernels::words::emulates_64_bit(rec.context().features(), &[dtype], dtype);
    let mut program = Program::new(vec![dtype], emulate64);
    let bias = program.add_operand(dtype);
    program
        .push("Add", vec![Arg::Operand(0), bias], dtype)
        .ok_or_else(|| Error::invalid(op, "B", format!("B cannot be added to {dtype}")))?;
    Ok(program)
}

/// The gather axes (steps in elements of the padded input, shape `padded`) and the shape of
/// the windows under `plan`: [N, C, kernel..., output...] when `kernel_first`, else
/// [N, C, output..., kernel...].
fn window_dims(
    plan: &WindowPlan,
    padded: &[usize],
    kernel_first: bool,
) -> (Vec<GatherDim>, Vec<usize>) {
    let k = padded.len() - 2;
    let st = strides_of(padded);
    let kernel_dims = (0..k).map(|j| GatherDim {
        len: plan.kernel[j] as u64,
        step: st[2 + j] * plan.dilations[j] as i64,
    });
    let output_dims = (0..k).map(|j| GatherDim {
        len: plan.output[j] as u64,
        step: st[2 + j] * plan.strides[j] as i64,
    });
    let mut dims = vec![
        GatherDim {
            len: padded[0] as u64,
            step: st[0],
        },
        GatherDim {
            len: padded[1] as u64,
            step: st[1],
        },
    ];
    let mut shape = padded[..2].to_vec();
    if kernel_first {
        dims.extend(kernel_dims.chain(output_dims));
        shape.extend(plan.kernel.iter().chain(&plan.output));
    } else {
        dims.extend(output_dims.chain(kernel_dims));
        shape.extend(plan.output.iter().chain(&plan.kernel));
    }
    (dims, shape)
}

/// C-order strides of `shape`, in elements.
fn strides_of(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1] as i64;
    }
    s
}

/// MaxPool's padding: below every element of `dtype`.
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::I8 => i8::MIN as f64,
        DType::U8 => 0.0,
        _ => f64::NEG_INFINITY,
    }
}

fn check_float(op: &'static str, name: &str, dtype: DType, ints: bool) -> Result<()> {
    let ok = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
        || (ints && matches!(dtype, DType::I8 | DType::U8));
    if ok {
        return Ok(());
    }
    let takes = if ints {
        "f32, f16, bf16, f64, i8 or u8"
    } else {
        "f32, f16, bf16 or f64"
    };
    Err(Error::invalid(
        op,
        name,
        format!("{name} is {dtype}; {op} takes {takes}"),
    ))
}

/// `x`'s rank must hold a batch, channel and at least one spatial axis.
fn check_spatial(op: &'static str, name: &str, x: &Tensor) -> Result<()> {
    if x.rank() < 3 {
        return Err(Error::invalid(
            op,
            name,
            format!(
                "{name} has shape {:?}; {op} takes [N, C, spatial...] with at least one spatial axis",
                x.shape()
            ),
        ));
    }
    // The window tensor holds two axes per spatial axis.
    if 2 + 2 * (x.rank() - 2) > super::MAX_RANK {
        return Err(Error::invalid(
            op,
            name,
            format!(
                "{name} has {} spatial axes; at most {} are supported",
                x.rank() - 2,
                (super::MAX_RANK - 2) / 2
            ),
        ));
    }
    Ok(())
}

impl Recorder {
    /// `x` padded by the plan's spatial padding with `value`; `x` itself where there is none.
    fn pad_spatial(
        &mut self,
        x: &Tensor,
        begin: &[i64],
        end: &[i64],
        value: f64,
    ) -> Result<Tensor> {
        if begin.iter().chain(end).all(|&p| p == 0) {
            return Ok(x.clone());
        }
        let mut pads = vec![0i64; 2 * x.rank()];
        let k = begin.len();
        pads[2..2 + k].copy_from_slice(begin);
        pads[x.rank() + 2..].copy_from_slice(end);
        let value =
            crate::reference::cast_host(&HostTensor::from_vec(vec![], &[value])?, x.dtype())?;
        self.pad_to(x, &pads, PadMode::Constant, Some(&value), None, Out::NEW)
    }

    /// `x` padded by `plan`'s padding (and the end `ceil_mode` reaches) with `value`.
    fn padded_for(
        &mut self,
        op: &'static str,
        x: &Tensor,
        plan: &WindowPlan,
        value: f64,
    ) -> Result<Tensor> {
        let begin: Vec<i64> = plan.pads_begin.iter().map(|&p| p as i64).collect();
        let end: Vec<i64> = (0..plan.output.len())
            .map(|j| (plan.pads_end[j] + plan.extra_end[j]) as i64)
            .collect();
        self.pad_spatial(x, &begin, &end, value)
            .map_err(|e| for_op(op, "the padded input", e))
    }

    /// Conv's columns: the windows of `x` ([N, C, spatial...]) under `plan`, zero padded, as
    /// [N, C, kernel..., output...].
    fn windows(&mut self, op: &'static str, x: &Tensor, plan: &WindowPlan) -> Result<Tensor> {
        let spatial = &x.shape()[2..];
        let padded = self.padded_for(op, x, plan, 0.0)?;
        debug_assert_eq!(&padded.shape()[2..], plan.padded(spatial).as_slice());
        let (dims, shape) = window_dims(plan, padded.shape(), true);
        let gather = GatherPlan::from_dims(0, &dims);
        // Each element once, in order (a 1x1 kernel with unit strides and no padding): the
        // input itself.
        if gather.is_contiguous() && gather.base == 0 && gather.count == padded.numel() as u64 {
            return padded.reshaped(&shape);
        }
        let out = self
            .alloc(x.dtype(), &shape)
            .map_err(|e| for_op(op, "the windows", e))?;
        self.gather_into(op, &padded, &gather, &out)?;
        self.release_unless_shared(padded, x);
        Ok(out)
    }

    /// Releases `t` unless it is a view of `input` (a windows tensor that is the input itself).
    fn release_unless_shared(&mut self, t: Tensor, input: &Tensor) {
        if !t.shares_buffer(input) {
            self.release(t);
        }
    }

    /// Conv of `x` under `plan`: the windows times the weights as one MatMul per group, the
    /// bias its epilogue. Where the windows would take more than
    /// [`window_budget`] bytes, they are gathered and multiplied in bands (images, then
    /// rows of the first output axis), each band's product copied into its place in the
    /// output, so memory stays bounded for large images, batches and kernels.
    #[allow(clippy::too_many_arguments)]
    fn conv_windows(
        &mut self,
        op: &'static str,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        plan: &WindowPlan,
        group: usize,
        out: Out,
    ) -> Result<Tensor> {
        let (n, c, m) = (x.shape()[0], x.shape()[1], w.shape()[0]);
        let dtype = x.dtype();
        let kernel: usize = plan.kernel.iter().product();
        let outputs: usize = plan.output.iter().product();
        let mut shape = vec![n, m];
        shape.extend(&plan.output);
        if shape.contains(&0) {
            return out.tensor(self, dtype, &shape);
        }
        let program = match b {
            None => None,
            Some(_) => Some(bias_program(self, op, dtype)?),
        };
        let depth = c / group * kernel;
        let w_g = w.reshaped(&[group, m / group, depth])?;
        let b_g = b.map(|b| b.reshaped(&[group, m / group, 1])).transpose()?;
        let image_bytes = (c * kernel * outputs) as u64 * dtype.size() as u64;
        let bands = WindowBands::choose(
            n,
            m,
            &plan.output,
            image_bytes,
            dtype.size(),
            window_budget(self.context()),
        );
        let Some(bands) = bands else {
            let cols = self.windows(op, x, plan)?;
            let cols_g = cols.reshaped(&[n, group, depth, outputs])?;
            let y = self.conv_product(&w_g, &cols_g, program.as_ref(), b_g.as_ref())?;
            self.release_unless_shared(cols, x);
            return out.view(self, y.reshaped(&shape)?);
        };
        let y = out.tensor(self, dtype, &shape)?;
        let rest = outputs / plan.output[0];
        self.in_bands(op, x, plan, bands, &y, |rec, cols, (_, nb, _, rows)| {
            let cols_g = cols.reshaped(&[nb, group, depth, rows * rest])?;
            rec.conv_product(&w_g, &cols_g, program.as_ref(), b_g.as_ref())
        })?;
        Ok(y)
    }

    /// Conv's columns of `x` under `plan` gathered band by band (see [`WindowBands`]), each
    /// band's ([nb, C, kernel..., rows, rest...]) turned by `reduce` into its part of `y` ([N,
    /// M, output...]: nb x M x rows x rest elements), which is copied into place.
    fn in_bands(
        &mut self,
        op: &'static str,
        x: &Tensor,
        plan: &WindowPlan,
        bands: WindowBands,
        y: &Tensor,
        mut reduce: impl FnMut(&mut Recorder, &Tensor, (usize, usize, usize, usize)) -> Result<Tensor>,
    ) -> Result<()> {
        let k = plan.output.len();
        let (dtype, c, m) = (x.dtype(), x.shape()[1], y.shape()[1]);
        let padded = self.padded_for(op, x, plan, 0.0)?;
        let (dims, _) = window_dims(plan, padded.shape(), true);
        let row_axis = 2 + k;
        let st = strides_of(padded.shape());
        let (h, rest) = (bands.h, plan.output[1..].iter().product::<usize>());
        // 1- and 2-byte elements move as words (`WindowBands::choose` keeps every run whole
        // words).
        let (unit, per_unit) = match dtype.size() {
            s @ (1 | 2) => (4u64, 4 / s as u64),
            s => (s as u64, 1u64),
        };
        for band in bands.iter() {
            let (n0, nb, r0, rows) = band;
            let mut band_dims = dims.clone();
            band_dims[0].len = nb as u64;
            band_dims[row_axis].len = rows as u64;
            let base = n0 as i64 * st[0] + (r0 * plan.strides[0]) as i64 * st[2];
            let gather = GatherPlan::from_dims(base as u64, &band_dims);
            let mut output = plan.output.clone();
            output[0] = rows;
            let mut shape = vec![nb, c];
            shape.extend(plan.kernel.iter().chain(&output));
            let windows = self
                .alloc(dtype, &shape)
                .map_err(|e| for_op(op, "the windows", e))?;
            self.gather_into(op, &padded, &gather, &windows)?;
            let part = reduce(self, &windows, band)?;
            self.release(windows);
            let run = (rows * rest) as u64;
            let dims = if rows == h {
                // Whole images: one run. Only the last band may end inside a word (1- and
                // 2-byte elements), at the end of the output, where the word's rest is padding.
                vec![CopyDim {
                    len: ((nb * m) as u64 * run).div_ceil(per_unit),
                    src: 1,
                    dst: 1,
                }]
            } else {
                vec![
                    CopyDim {
                        len: (nb * m) as u64,
                        src: run / per_unit,
                        dst: (h * rest) as u64 / per_unit,
                    },
                    CopyDim {
                        len: run / per_unit,
                        src: 1,
                        dst: 1,
                    },
                ]
            };
            let piece = CopyPiece {
                src_base: 0,
                dst_base: ((n0 * m * h + r0) * rest) as u64 / per_unit,
                dims,
            };
            self.copy_piece(op, unit, part.storage(), y.storage(), &piece)?;
            self.release(part);
        }
        self.release_unless_shared(padded, x);
        Ok(())
    }

    /// `w_g` [G, M/G, depth] times `cols_g` [N, G, depth, outputs], plus the bias `b_g`
    /// [G, M/G, 1] under `program` where there is one.
    fn conv_product(
        &mut self,
        w_g: &Tensor,
        cols_g: &Tensor,
        program: Option<&Program>,
        b_g: Option<&Tensor>,
    ) -> Result<Tensor> {
        match (program, b_g) {
            (Some(program), Some(b_g)) => {
                self.matmul_program_to(w_g, cols_g, program, &[b_g], Out::NEW)
            }
            _ => self.matmul_to(w_g, cols_g, Out::NEW),
        }
    }

    /// Records ONNX Conv: `x` `[N, C, spatial...]` convolved with `w` `[M, C / group,
    /// kernel...]`, plus `b` `[M]`, into `[N, M, output...]`. Floats (f32, f16, bf16, f64).
    pub fn conv_to(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        attrs: &WindowAttrs,
        group: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Conv";
        let group = self.conv_inputs(OP, x, w, b, group, false)?;
        let kernel = &w.shape()[2..];
        check_kernel_shape(OP, attrs.kernel_shape, kernel)?;
        let plan = window_plan(OP, &x.shape()[2..], kernel, attrs)?;
        self.conv_windows(OP, x, w, b, &plan, group, out)
    }

    /// Records ONNX ConvTranspose: `x` `[N, C, spatial...]` with `w` `[C, M / group, kernel...]`,
    /// plus `b` `[M]`, into `[N, M, output...]`: each input element adds its product with the
    /// kernel to the output at its position times the stride. Computed as the Conv of `x`
    /// with zeros between its elements (stride - 1 of them), padded by the kernel's extent
    /// less one less the pads, with the kernel flipped and its two channel axes swapped.
    pub fn conv_transpose_to(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        attrs: &TransposeAttrs,
        group: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "ConvTranspose";
        let group = self.conv_inputs(OP, x, w, b, group, true)?;
        let spatial = x.shape()[2..].to_vec();
        let kernel = w.shape()[2..].to_vec();
        let tp = transpose_plan(&spatial, &kernel, attrs)?;
        let k = spatial.len();
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let m = w.shape()[1] * group;
        // Zeros between the elements: [N, C, D1, 1, D2, 1, ...] padded at the end of each unit
        // axis by stride - 1, seen as [N, C, D1 * s1, ...] (stride - 1 zeros at the end too,
        // which the padding below counts).
        let spread = if tp.strides.iter().all(|&s| s == 1) {
            x.clone()
        } else {
            let mut split = vec![n, c];
            for &d in &spatial {
                split.extend([d, 1]);
            }
            let mut pads = vec![0i64; 2 * split.len()];
            for j in 0..k {
                pads[split.len() + 3 + 2 * j] = tp.strides[j] as i64 - 1;
            }
            let zero =
                crate::reference::cast_host(&HostTensor::from_vec(vec![], &[0.0f64])?, x.dtype())?;
            let p = self
                .pad_to(
                    &x.reshaped(&split)?,
                    &pads,
                    PadMode::Constant,
                    Some(&zero),
                    None,
                    Out::NEW,
                )
                .map_err(|e| for_op(OP, "the input spread by the strides", e))?;
            let mut shape = vec![n, c];
            shape.extend((0..k).map(|j| spatial[j] * tp.strides[j]));
            p.reshaped(&shape)?
        };
        // The padding a stride-1 Conv needs for `output` windows of the kernel's extent;
        // negative values crop.
        let begin: Vec<i64> = (0..k)
            .map(|j| ((tp.kernel[j] - 1) * tp.dilations[j]) as i64 - tp.pads_begin[j])
            .collect();
        let end: Vec<i64> = (0..k)
            .map(|j| {
                let extent = ((tp.kernel[j] - 1) * tp.dilations[j] + 1) as i64;
                let have = (spatial[j] * tp.strides[j]) as i64 + begin[j];
                tp.output[j] as i64 + extent - 1 - have
            })
            .collect();
        let padded = self
            .pad_spatial(&spread, &begin, &end, 0.0)
            .map_err(|e| for_op(OP, "the padded input", e))?;
        if !spread.shares_buffer(x) && !spread.shares_buffer(&padded) {
            self.release(spread);
        }
        // W [C, M/g, k...] read as [M, C/g, k...] with every spatial axis reversed: one gather.
        let wst = strides_of(w.shape());
        let (cg, mg) = (c / group, m / group);
        let kernel_len: usize = kernel.iter().product();
        let mut dims = vec![
            GatherDim {
                len: group as u64,
                step: (cg * mg * kernel_len) as i64,
            },
            GatherDim {
                len: mg as u64,
                step: wst[1],
            },
            GatherDim {
                len: cg as u64,
                step: wst[0],
            },
        ];
        let mut base = 0i64;
        for j in 0..k {
            dims.push(GatherDim {
                len: kernel[j] as u64,
                step: -wst[2 + j],
            });
            base += (kernel[j] as i64 - 1) * wst[2 + j];
        }
        let mut wt_shape = vec![m, cg];
        wt_shape.extend(&kernel);
        let wt = self.alloc(w.dtype(), &wt_shape)?;
        self.gather_into(OP, w, &GatherPlan::from_dims(base as u64, &dims), &wt)?;
        let plan = WindowPlan {
            kernel: kernel.clone(),
            strides: vec![1; k],
            dilations: tp.dilations.clone(),
            pads_begin: vec![0; k],
            pads_end: vec![0; k],
            extra_end: vec![0; k],
            output: tp.output.clone(),
        };
        let y = self.conv_windows(OP, &padded, &wt, b, &plan, group, out);
        self.release_unless_shared(padded, x);
        self.release(wt);
        y
    }

    /// Records ONNX MaxPool: the largest element of each window of `x`; with `indices`, also
    /// each one's position in `x` (i64, flattened; column-major within each image when
    /// `storage_order` is 1), the first where several are largest. Windows are padded with
    /// -inf (integers: their lowest value), so padding never wins; NaN propagates as in
    /// ReduceMax (the ONNX reference's maximum; onnxruntime's CPU kernels disagree among
    /// themselves on NaN and -inf).
    pub fn max_pool_to(
        &mut self,
        x: &Tensor,
        attrs: &WindowAttrs,
        storage_order: i64,
        outs: (Out, Option<Out>),
    ) -> Result<(Tensor, Option<Tensor>)> {
        const OP: &str = "MaxPool";
        let (plan, shape) = self.pool_inputs(OP, x, attrs, true)?;
        if !matches!(storage_order, 0 | 1) {
            return Err(Error::invalid(
                OP,
                "storage_order",
                format!(
                    "storage_order is {storage_order}; it is 0 (row-major) or 1 (column-major)"
                ),
            ));
        }
        if x.numel() == 0 || shape.contains(&0) {
            let y = outs.0.tensor(self, x.dtype(), &shape)?;
            let i = match outs.1 {
                Some(o) => Some(o.tensor(self, DType::I64, &shape)?),
                None => None,
            };
            return Ok((y, i));
        }
        let (padded, walk) = self.pool_walk(OP, x, &plan, lowest(x.dtype()))?;
        let data = Values::Tensor(&padded);
        let y = self.reduce_walked("ReduceMax", data, &walk, &shape, outs.0)?;
        let indices = match outs.1 {
            Some(out) => {
                let position = self.reduce_walked("ArgMax", data, &walk, &shape, Out::NEW)?;
                Some(self.max_pool_indices(x, &plan, position, storage_order, &shape, out)?)
            }
            None => None,
        };
        self.release_unless_shared(padded, x);
        Ok((y, indices))
    }

    /// MaxPool's indices: `position`, each maximum's place in its window ([N, C, output...],
    /// i64), mapped to the input's flattened index through a table of each window's input
    /// positions (`output positions x window` entries, shared by every image and channel).
    fn max_pool_indices(
        &mut self,
        x: &Tensor,
        plan: &WindowPlan,
        position: Tensor,
        storage_order: i64,
        shape: &[usize],
        out: Out,
    ) -> Result<Tensor> {
        let spatial = &x.shape()[2..];
        let k = spatial.len();
        let (n, c) = (x.shape()[0], x.shape()[1]);
        // Flattened spatial index of each (output position, window element); -1 in padding.
        let order: Vec<usize> = if storage_order == 1 {
            (0..k).rev().collect()
        } else {
            (0..k).collect()
        };
        let mut place = vec![0i64; k];
        let mut weight = 1i64;
        for &j in order.iter().rev() {
            place[j] = weight;
            weight *= spatial[j] as i64;
        }
        let outputs: usize = plan.output.iter().product();
        let window: usize = plan.kernel.iter().product();
        let mut table = Vec::with_capacity(outputs * window);
        for o_flat in 0..outputs {
            let o = unflatten(o_flat, &plan.output);
            for t_flat in 0..window {
                let t = unflatten(t_flat, &plan.kernel);
                let mut index = 0i64;
                for j in 0..k {
                    match window_source(plan, spatial, j, o[j], t[j]) {
                        Some(i) => index += i as i64 * place[j],
                        None => {
                            index = -1;
                            break;
                        }
                    }
                }
                table.push(index);
            }
        }
        let table = self.upload(&HostTensor::from_vec(vec![outputs * window], &table)?)?;
        // Each output position's first entry in the table.
        let firsts: Vec<i64> = (0..outputs).map(|o| (o * window) as i64).collect();
        let firsts = self.upload(&HostTensor::from_vec(plan.output.clone(), &firsts)?)?;
        let entry = self.elementwise("Add", &position, Some(&firsts))?;
        let within = self.gather_to(&table, &entry, 0, Out::NEW)?;
        let image: i64 = spatial.iter().map(|&d| d as i64).product();
        let bases: Vec<i64> = (0..(n * c) as i64).map(|i| i * image).collect();
        let mut base_shape = vec![n, c];
        base_shape.extend(std::iter::repeat_n(1, k));
        let base = self.upload(&HostTensor::from_vec(base_shape, &bases)?)?;
        let flat = self.elementwise("Add", &within, Some(&base))?;
        for t in [table, firsts, position, entry, within, base] {
            self.release(t);
        }
        out.view(self, flat.reshaped(shape)?)
    }

    /// A pool's windows as a reduction's walk over `x` padded for `plan` with `value` (the
    /// padded input and the walk): the windows are reduced where they lie, with no tensor of
    /// their own (beyond one binding, in windows of output rows).
    fn pool_walk(
        &mut self,
        op: &'static str,
        x: &Tensor,
        plan: &WindowPlan,
        value: f64,
    ) -> Result<(Tensor, ReduceWalk)> {
        let padded = self.padded_for(op, x, plan, value)?;
        let (dims, _) = window_dims(plan, padded.shape(), false);
        let mut axes = dims.iter().map(|d| (d.len as usize, d.step as usize));
        let keep = axes.by_ref().take(2 + plan.output.len()).collect();
        let walk = ReduceWalk {
            keep,
            reduce: axes.collect(),
        };
        Ok((padded, walk))
    }

    /// A pool's checks of X (`ints`: i8 and u8 too), and its plan and output shape.
    fn pool_inputs(
        &mut self,
        op: &'static str,
        x: &Tensor,
        attrs: &WindowAttrs,
        ints: bool,
    ) -> Result<(WindowPlan, Vec<usize>)> {
        self.check_inputs(op, &[("X", x)])?;
        check_spatial(op, "X", x)?;
        check_float(op, "X", x.dtype(), ints)?;
        pool_plan(op, x, attrs)
    }

    /// Records ONNX AveragePool: each window's mean, over the elements in `x` (and those in
    /// the padding when `count_include_pad`; never those only `ceil_mode` reaches).
    pub fn average_pool_to(
        &mut self,
        x: &Tensor,
        attrs: &WindowAttrs,
        count_include_pad: bool,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "AveragePool";
        let (plan, shape) = self.pool_inputs(OP, x, attrs, false)?;
        if x.numel() == 0 || shape.contains(&0) {
            return out.tensor(self, x.dtype(), &shape);
        }
        let spatial = &x.shape()[2..];
        let counts = average_counts(&plan, spatial, count_include_pad);
        let window: usize = plan.kernel.iter().product();
        let dtype = x.dtype();
        let (padded, walk) = self.pool_walk(OP, x, &plan, 0.0)?;
        let data = Values::Tensor(&padded);
        let y = if counts.iter().all(|&n| n == window) {
            self.reduce_walked("ReduceMean", data, &walk, &shape, out)?
        } else {
            let sum = self.reduce_walked("ReduceSum", data, &walk, &shape, Out::NEW)?;
            let divisors: Vec<f64> = counts.iter().map(|&n| n as f64).collect();
            let d = self.host_values(dtype, &plan.output, &divisors)?;
            let y = self.elementwise_to("Div", &sum, Some(&d), out)?;
            self.release(sum);
            self.release(d);
            y
        };
        self.release_unless_shared(padded, x);
        Ok(y)
    }

    /// Records ONNX LpPool: each window's `(sum |x|^p)^(1/p)`, padding counting as zeros.
    pub fn lp_pool_to(
        &mut self,
        x: &Tensor,
        attrs: &WindowAttrs,
        p: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "LpPool";
        let (plan, shape) = self.pool_inputs(OP, x, attrs, false)?;
        if x.numel() == 0 || shape.contains(&0) {
            return out.tensor(self, x.dtype(), &shape);
        }
        let (padded, walk) = self.pool_walk(OP, x, &plan, 0.0)?;
        let y = self.lp_norm_walked(OP, &padded, &walk, &shape, p, out)?;
        self.release_unless_shared(padded, x);
        Ok(y)
    }

    /// `(sum |x|^p)^(1/p)` over the elements `walk` reads of `x`, into `shape`: ReduceL1 or
    /// ReduceL2 where `p` is 1 or 2, else `|x|^p` once per element of `x` (a pool's padded
    /// input: not once per window), summed, and its root.
    fn lp_norm_walked(
        &mut self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        shape: &[usize],
        p: i64,
        out: Out,
    ) -> Result<Tensor> {
        match p {
            1 => self.reduce_walked("ReduceL1", Values::Tensor(x), walk, shape, out),
            2 => self.reduce_walked("ReduceL2", Values::Tensor(x), walk, shape, out),
            p if p >= 1 => {
                let (power, root) = (
                    self.host_values(x.dtype(), &[], &[p as f64])?,
                    self.host_values(x.dtype(), &[], &[1.0 / p as f64])?,
                );
                let abs = self.elementwise("Abs", x, None)?;
                let pow = self.elementwise("Pow", &abs, Some(&power))?;
                let sum =
                    self.reduce_walked("ReduceSum", Values::Tensor(&pow), walk, shape, Out::NEW)?;
                let y = self.elementwise_to("Pow", &sum, Some(&root), out)?;
                for t in [power, root, abs, pow, sum] {
                    self.release(t);
                }
                Ok(y)
            }
            p => Err(Error::invalid(
                op,
                "p",
                format!("p is {p}; it must be at least 1"),
            )),
        }
    }

    /// `(sum |x|^p)^(1/p)` over `axes` (sorted, in range) of `x`.
    fn lp_norm(
        &mut self,
        op: &'static str,
        x: &Tensor,
        axes: &[usize],
        keepdims: bool,
        p: i64,
    ) -> Result<Tensor> {
        let walk = ReduceWalk::over_axes(x.shape(), axes);
        let shape = super::reduce::reduced_shape(x.shape(), axes, keepdims);
        self.lp_norm_walked(op, x, &walk, &shape, p, Out::NEW)
    }

    /// Records ONNX GlobalAveragePool, GlobalMaxPool or GlobalLpPool (`op`): each image's
    /// spatial axes reduced to one element ([N, C, 1, ...]).
    pub fn global_pool_to(&mut self, op: &str, x: &Tensor, p: i64, out: Out) -> Result<Tensor> {
        let (op, reduction): (&'static str, Option<&str>) = match op {
            "GlobalAveragePool" => ("GlobalAveragePool", Some("ReduceMean")),
            "GlobalMaxPool" => ("GlobalMaxPool", Some("ReduceMax")),
            "GlobalLpPool" => ("GlobalLpPool", None),
            other => return Err(Error::Graph(format!("unknown global pool '{other}'"))),
        };
        self.check_inputs(op, &[("X", x)])?;
        check_spatial(op, "X", x)?;
        check_float(op, "X", x.dtype(), op == "GlobalMaxPool")?;
        let axes: Vec<usize> = (2..x.rank()).collect();
        let mut shape = x.shape().to_vec();
        shape[2..].fill(1);
        if x.shape()[2..].contains(&0) {
            return Err(Error::invalid(
                op,
                "X",
                format!(
                    "X has shape {:?}; its spatial axes must not be empty",
                    x.shape()
                ),
            ));
        }
        let y = match reduction {
            Some(r) => {
                let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
                self.reduce_to(r, x, Some(&axes), true, false, Out::NEW)?
            }
            None => self.lp_norm(op, x, &axes, true, p)?,
        };
        out.view(self, y.reshaped(&shape)?)
    }
}

impl Recorder {
    /// Records ONNX LRN: `Y = X / (bias + alpha / size * square_sum) ^ beta`, the sum of the
    /// squares over the `size` channels around each (`floor((size - 1) / 2)` before,
    /// `ceil((size - 1) / 2)` after, those past the ends absent). The squares' AveragePool
    /// over the channel axis with the padding counted (`alpha * mean` is `alpha / size *
    /// sum`), then one element-wise chain.
    pub fn lrn_to(
        &mut self,
        x: &Tensor,
        size: i64,
        alpha: f64,
        beta: f64,
        bias: f64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "LRN";
        self.check_inputs(OP, &[("X", x)])?;
        check_float(OP, "X", x.dtype(), false)?;
        if x.rank() < 2 {
            return Err(Error::invalid(
                OP,
                "X",
                format!("X has shape {:?}; LRN takes [N, C, ...]", x.shape()),
            ));
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| (1..=i32::MAX as usize).contains(&s))
            .ok_or_else(|| {
                Error::invalid(OP, "size", format!("size is {size}; it must be at least 1"))
            })?;
        if x.numel() == 0 {
            return out.tensor(self, x.dtype(), x.shape());
        }
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let spatial: usize = x.shape()[2..].iter().product();
        let squares = self.elementwise("Mul", x, Some(x))?;
        let (before, after) = ((size - 1) / 2, size / 2);
        let pads = [before as i64, 0, after as i64, 0];
        let kernel = [size as i64, 1];
        let attrs = WindowAttrs {
            kernel_shape: Some(&kernel),
            pads: Some(&pads),
            ..Default::default()
        };
        let mean = self
            .average_pool_to(
                &squares.reshaped(&[n, 1, c, spatial])?,
                &attrs,
                true,
                Out::NEW,
            )
            .map_err(|e| for_op(OP, "the squares' mean", e))?;
        self.release(squares);
        let dtype = x.dtype();
        let alpha_t = self.host_values(dtype, &[], &[alpha])?;
        let bias_t = self.host_values(dtype, &[], &[bias])?;
        let beta_t = self.host_values(dtype, &[], &[beta])?;
        let scaled = self.elementwise("Mul", &mean.reshaped(x.shape())?, Some(&alpha_t))?;
        let shifted = self.elementwise("Add", &scaled, Some(&bias_t))?;
        let divisor = self.elementwise("Pow", &shifted, Some(&beta_t))?;
        let y = self.elementwise_to("Div", x, Some(&divisor), out);
        for t in [mean, alpha_t, bias_t, beta_t, scaled, shifted, divisor] {
            self.release(t);
        }
        y
    }
}

/// A pool's plan and output shape; `kernel_shape` is required.
fn pool_plan(
    op: &'static str,
    x: &Tensor,
    attrs: &WindowAttrs,
) -> Result<(WindowPlan, Vec<usize>)> {
    let kernel: Vec<usize> = match attrs.kernel_shape {
        None => {
            return Err(Error::invalid(
                op,
                "kernel_shape",
                "the attribute 'kernel_shape' is required",
            ))
        }
        Some(ks) => per_axis(op, "kernel_shape", Some(ks), x.rank() - 2, 1, 1)?,
    };
    let plan = window_plan(op, &x.shape()[2..], &kernel, attrs)?;
    let mut shape = x.shape()[..2].to_vec();
    shape.extend(&plan.output);
    Ok((plan, shape))
}

/// A `kernel_shape` attribute, where given, must be W's spatial shape.
fn check_kernel_shape(op: &'static str, given: Option<&[i64]>, kernel: &[usize]) -> Result<()> {
    match given {
        Some(ks)
            if !ks.iter().map(|&v| v as usize).eq(kernel.iter().copied())
                || ks.iter().any(|&v| v < 0) =>
        {
            Err(Error::invalid(
                op,
                "kernel_shape",
                format!("kernel_shape {ks:?} differs from W's spatial shape {kernel:?}"),
            ))
        }
        _ => Ok(()),
    }
}

impl Recorder {
    /// Conv's and ConvTranspose's checks of X, W and B; returns the group count.
    fn conv_inputs(
        &mut self,
        op: &'static str,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        group: i64,
        transposed: bool,
    ) -> Result<usize> {
        let mut named = vec![("X", x), ("W", w)];
        named.extend(b.map(|b| ("B", b)));
        self.check_inputs(op, &named)?;
        check_spatial(op, "X", x)?;
        // i32 too: the exact integer convolutions of ConvInteger and QLinearConv (sums wrap).
        if x.dtype() != DType::I32 {
            check_float(op, "X", x.dtype(), false).map_err(|_| {
                Error::invalid(
                    op,
                    "X",
                    format!("X is {}; {op} takes f32, f16, bf16, f64 or i32", x.dtype()),
                )
            })?;
        }
        check_group(op, x, w, b, group, transposed)
    }
}

/// Conv's and ConvTranspose's channel rules; returns the group count.
fn check_group(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    group: i64,
    transposed: bool,
) -> Result<usize> {
    for (name, t) in [("W", Some(w)), ("B", b)] {
        if let Some(t) = t {
            if t.dtype() != x.dtype() {
                return Err(Error::invalid(
                    op,
                    name,
                    format!("{name} is {} but X is {}", t.dtype(), x.dtype()),
                ));
            }
        }
    }
    if w.rank() != x.rank() {
        return Err(Error::invalid(
            op,
            "W",
            format!(
                "W has shape {:?}; it needs X's rank {} ([{}, {}, kernel...])",
                w.shape(),
                x.rank(),
                if transposed { "C" } else { "M" },
                if transposed { "M / group" } else { "C / group" },
            ),
        ));
    }
    let c = x.shape()[1];
    let g = usize::try_from(group)
        .ok()
        .filter(|&g| g >= 1 && c.is_multiple_of(g))
        .ok_or_else(|| {
            Error::invalid(
                op,
                "group",
                format!("group is {group}; it must be at least 1 and divide X's {c} channels"),
            )
        })?;
    let (m, fine) = if transposed {
        (w.shape()[1] * g, w.shape()[0] == c)
    } else {
        let m = w.shape()[0];
        (m, w.shape()[1] * g == c && m.is_multiple_of(g))
    };
    if !fine {
        let want = if transposed {
            format!("[{c}, M / {g}, kernel...]")
        } else {
            format!(
                "[M, {} (X's {c} channels / group {g}), kernel...] with M a multiple of {g}",
                c / g
            )
        };
        return Err(Error::invalid(
            op,
            "W",
            format!("W has shape {:?}; it must be {want}", w.shape()),
        ));
    }
    if w.shape()[2..].contains(&0) {
        return Err(Error::invalid(
            op,
            "W",
            format!("W has shape {:?}; its kernel must not be empty", w.shape()),
        ));
    }
    if let Some(b) = b {
        if b.shape() != [m] {
            return Err(Error::invalid(
                op,
                "B",
                format!(
                    "B has shape {:?}; it must be [{m}] (one per output channel)",
                    b.shape()
                ),
            ));
        }
    }
    Ok(g)
}

/// The C-order coordinates of flat index `i` in `shape`.
pub fn unflatten(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        c[k] = i % shape[k];
        i /= shape[k];
    }
    c
}

#[cfg(test)]
mod tests {
    use super::WindowBands;

    /// Every (image, row) once, in order, each band within the budget (one row at least).
    fn check_cover(b: WindowBands, image_bytes: u64, budget: u64) {
        let mut seen = Vec::new();
        for (n0, nb, r0, rows) in b.iter() {
            assert!(nb >= 1 && rows >= 1, "{b:?}");
            let bytes = image_bytes / b.h as u64 * (nb * rows) as u64;
            assert!(bytes <= budget || (nb == 1 && rows <= 2), "{b:?}: {bytes}");
            for i in n0..n0 + nb {
                for r in r0..r0 + rows {
                    seen.push((i, r));
                }
            }
        }
        seen.sort();
        let all: Vec<_> = (0..b.n)
            .flat_map(|i| (0..b.h).map(move |r| (i, r)))
            .collect();
        assert_eq!(seen, all, "{b:?}");
    }

    #[test]
    fn bands_cover_every_image_and_row_once_within_the_budget() {
        // Fits at once: no bands.
        assert_eq!(WindowBands::choose(2, 4, &[8, 8], 100, 4, 200), None);
        // Whole images, three at a time, the last band short.
        let b = WindowBands::choose(7, 4, &[8, 8], 100, 4, 300).unwrap();
        assert_eq!((b.images, b.rows), (3, 8));
        check_cover(b, 100, 300);
        // Rows of one image: 800 bytes over 8 rows, 300 bytes a band: 3 rows.
        let b = WindowBands::choose(2, 4, &[8, 5], 800, 4, 300).unwrap();
        assert_eq!((b.images, b.rows), (1, 3));
        check_cover(b, 800, 300);
        // A row beyond the budget still makes a band of one row.
        let b = WindowBands::choose(1, 4, &[6], 600, 4, 50).unwrap();
        assert_eq!(b.rows, 1);
        check_cover(b, 600, 600);
    }

    #[test]
    fn two_byte_bands_keep_their_runs_whole_words() {
        // Odd rows of 13: bands of an even number of rows.
        let b = WindowBands::choose(1, 4, &[80, 13], 8000, 2, 300).unwrap();
        assert_eq!(b.rows, 2);
        let b = WindowBands::choose(1, 4, &[80, 13], 8000, 2, 700).unwrap();
        assert_eq!(b.rows % 2, 0);
        check_cover(b, 8000, 700);
        // An odd number of odd rows per channel: no word-aligned bands of rows; an odd image
        // slab: images two at a time, or none.
        assert_eq!(WindowBands::choose(1, 4, &[7, 7], 8000, 2, 700), None);
        assert_eq!(WindowBands::choose(4, 3, &[7, 7], 100, 2, 150), None);
        let b = WindowBands::choose(5, 3, &[7, 7], 100, 2, 350).unwrap();
        assert_eq!((b.images, b.rows), (2, 7));
        check_cover(b, 100, 350);
        // 1-byte elements: rows of 6 fill whole words two at a time, images of 7 x 6 an even
        // number at a time (5 fit).
        let b = WindowBands::choose(1, 2, &[8, 6], 8000, 1, 3000).unwrap();
        assert_eq!(b.rows, 2);
        check_cover(b, 8000, 3000);
        let b = WindowBands::choose(9, 1, &[7, 6], 100, 1, 500).unwrap();
        assert_eq!(b.images, 4);
        check_cover(b, 100, 500);
        // With 4-byte elements the same shapes band freely.
        assert_eq!(
            WindowBands::choose(1, 4, &[7, 7], 8000, 4, 700).map(|b| b.rows),
            Some(1)
        );
    }
}
