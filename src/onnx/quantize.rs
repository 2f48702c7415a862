//! ONNX `QuantizeLinear`, `DequantizeLinear` and `DynamicQuantizeLinear` loaded as the ops
//! they are defined by, on the 8-, 16-, 4- and 2-bit integer types and the 8-, 6- and
//! 4-bit floats: the scale and zero point broadcast per tensor, per axis or per block, the
//! arithmetic in f32 (or `precision`), and quantized values rounded half to even and
//! saturated by the cast to the quantized type.

use super::expansion::{int_attr, node_error, Builder};
use super::recurrent::Expansion;
use super::{dtype_of, proto::tensor_proto::DataType, type_name_i32};
use crate::graph::{Attr, Node};
use crate::{Error, Result};

/// The nodes that compute a quantization node, with the constants they read; `None` for
/// other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    let op = node.op.as_str();
    if matches!(op, "MatMulInteger" | "QLinearMatMul") {
        return integer_product(node).map(Some);
    }
    if matches!(op, "ConvInteger" | "QLinearConv") {
        return integer_conv(node).map(Some);
    }
    if !matches!(
        op,
        "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear"
    ) {
        return Ok(None);
    }
    let bad = |msg: String| node_error(node, msg);
    let int = |name: &str, default: i64| Ok::<_, Error>(int_attr(node, name)?.unwrap_or(default));
    let dtype_attr = |name: &str| -> Result<Option<&'static str>> {
        match int(name, 0)? {
            0 => Ok(None),
            code => {
                let code = i32::try_from(code).unwrap_or(-1);
                dtype_of(DataType::try_from(code).unwrap_or(DataType::Undefined))
                    .map(|d| Some(d.name()))
                    .ok_or_else(|| bad(format!("{name} {} is not supported", type_name_i32(code))))
            }
        }
    };
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let output = |k: usize| node.outputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(x), Some(y)) = (input(0), output(0)) else {
        return Err(bad("needs an input and an output".into()));
    };
    let mut b = Builder::new(node, &y);
    if op != "DynamicQuantizeLinear" {
        b.check_inputs(node, op, &[]);
    }
    let f32_of = |b: &mut Builder, out: &str, v: &str| {
        b.op("Cast", out, &[v], &[("to", Attr::String("f32".into()))])
    };
    if op == "DynamicQuantizeLinear" {
        // u8 over [min(x, 0), max(x, 0)]: scale = range / 255, zero point = round(-min / scale).
        let keep = [("keepdims", Attr::Int(0))];
        let zero = b.f32_scalar("zero", 0.0)?;
        let lo = b.op("ReduceMin", "x_min", &[&x], &keep);
        let lo = b.op("Min", "lo", &[&lo, &zero], &[]);
        let hi = b.op("ReduceMax", "x_max", &[&x], &keep);
        let hi = b.op("Max", "hi", &[&hi, &zero], &[]);
        let range = b.op("Sub", "range", &[&hi, &lo], &[]);
        let levels = b.f32_scalar("levels", 255.0)?;
        // No range (x empty or all zeros): a scale of 1, as onnxruntime, not 0, which would
        // divide by zero here and in whatever quantizes with it next.
        let flat = b.op("Equal", "flat", &[&range, &zero], &[]);
        let range = b.op("Where", "range_or_levels", &[&flat, &levels, &range], &[]);
        let scale = b.op("Div", "scale", &[&range, &levels], &[]);
        let neg_lo = b.op("Sub", "neg_lo", &[&zero, &lo], &[]);
        let zp = b.op("Div", "zp_f", &[&neg_lo, &scale], &[]);
        let zp = b.op("Round", "zp_round", &[&zp], &[]);
        let to_u8 = [("to", Attr::String("u8".into()))];
        let zp = match output(2) {
            Some(out) => b.op_to("Cast", &out, &[&zp], &to_u8),
            None => b.op("Cast", "zp", &[&zp], &to_u8),
        };
        if let Some(out) = output(1) {
            b.op_to("Identity", &out, &[&scale], &[]);
        }
        let q = b.op("Div", "q", &[&x, &scale], &[]);
        let q = b.op("Round", "q_round", &[&q], &[]);
        let zp_f = f32_of(&mut b, "zp_back", &zp);
        let q = b.op("Add", "q_shifted", &[&q, &zp_f], &[]);
        b.op_to("Cast", &y, &[&q], &to_u8);
        return Ok(Some(b.finish()));
    }
    let Some(scale) = input(1) else {
        return Err(bad("needs its scale".into()));
    };
    let zp = input(2);
    let axis = int("axis", 1)?;
    let block = int("block_size", 0)?;
    if block < 0 {
        return Err(bad(format!("block_size {block} is negative")));
    }
    // The scale (and zero point) broadcast to x: per block, each value repeated block_size
    // times along axis; else one per tensor or per index along axis (a scalar or a vector
    // reshaped to [-1, 1, ..., 1] with a 1 for each axis after `axis`).
    let axis_v = b.i64s("axis", &[axis])?;
    let spread = |b: &mut Builder, v: &str, what: &str| -> Result<String> {
        if block > 0 {
            let x_shape = b.dims(&format!("{what}_x_shape"), &x, 0, None);
            let len = b.op("Gather", &format!("{what}_len"), &[&x_shape, &axis_v], &[]);
            let axis0 = b.i64s(&format!("{what}_axis0"), &[0])?;
            let len = b.op("Squeeze", &format!("{what}_len0"), &[&len, &axis0], &[]);
            let start = b.i64s(&format!("{what}_start"), &[0])?;
            let start = b.op("Squeeze", &format!("{what}_start0"), &[&start, &axis0], &[]);
            let step = b.i64s(&format!("{what}_step"), &[1])?;
            let step = b.op("Squeeze", &format!("{what}_step0"), &[&step, &axis0], &[]);
            let index = b.op(
                "Range",
                &format!("{what}_index"),
                &[&start, &len, &step],
                &[],
            );
            let size = b.i64s(&format!("{what}_block"), &[block])?;
            let index = b.op("Div", &format!("{what}_block_index"), &[&index, &size], &[]);
            Ok(b.op(
                "Gather",
                &format!("{what}_spread"),
                &[v, &index],
                &[("axis", Attr::Int(axis))],
            ))
        } else if axis == -1 {
            Ok(v.to_string())
        } else {
            let tail = b.dims(&format!("{what}_tail"), &x, axis + 1, None);
            let zero = b.i64s(&format!("{what}_zero"), &[0])?;
            let one = b.i64s(&format!("{what}_one"), &[1])?;
            let nothing = b.op("Mul", &format!("{what}_tail0"), &[&tail, &zero], &[]);
            let ones = b.op("Add", &format!("{what}_ones"), &[&nothing, &one], &[]);
            let rest = b.i64s(&format!("{what}_rest"), &[-1])?;
            let shape = b.op(
                "Concat",
                &format!("{what}_shape"),
                &[&rest, &ones],
                &[("axis", Attr::Int(0))],
            );
            Ok(b.op("Reshape", &format!("{what}_spread"), &[v, &shape], &[]))
        }
    };
    let scale_b = spread(&mut b, &scale, "scale")?;
    let zp_b = match &zp {
        Some(z) => Some(spread(&mut b, z, "zp")?),
        None => None,
    };
    if op == "DequantizeLinear" {
        // (x - zero point) * scale in f32, then the output type (the scale's by default).
        let xf = f32_of(&mut b, "x_f", &x);
        let shifted = match &zp_b {
            Some(z) => {
                let zf = f32_of(&mut b, "zp_f", z);
                b.op("Sub", "shifted", &[&xf, &zf], &[])
            }
            None => xf,
        };
        let sf = f32_of(&mut b, "scale_f", &scale_b);
        let v = b.op("Mul", "value", &[&shifted, &sf], &[]);
        match dtype_attr("output_dtype")? {
            Some(d) => b.op_to("Cast", &y, &[&v], &[("to", Attr::String(d.into()))]),
            None => b.op_to("CastLike", &y, &[&v, &scale], &[]),
        };
        return Ok(Some(b.finish()));
    }
    // x / scale in f32 (or `precision`). To an integer type: rounded half to even, the zero
    // point added, and clamped to the type by the cast (`quantize`). To a float type (8- or
    // 4-bit): the zero point added and cast, rounded to nearest-even there and saturated as
    // `saturate` says. The type is the zero point's (known at load when it is an initializer
    // or an input, and then given as output_dtype; one computed in the graph is taken as an
    // integer type) or output_dtype (u8 without either).
    let precision = dtype_attr("precision")?.unwrap_or("f32");
    let to = |d: &str| [("to", Attr::String(d.into()))];
    let target = match (dtype_attr("output_dtype")?, &zp) {
        (Some(d), _) => Some(d),
        (None, Some(_)) => None,
        (None, None) => Some("u8"),
    };
    let to_float = target
        .and_then(crate::DType::from_name)
        .is_some_and(|d| crate::kernels::words::quantized_range(d).is_none());
    let xq = b.op("Cast", "x_p", &[&x], &to(precision));
    let sq = b.op("Cast", "scale_p", &[&scale_b], &to(precision));
    let mut q = b.op("Div", "q", &[&xq, &sq], &[]);
    if !to_float {
        q = b.op("Round", "q_round", &[&q], &[]);
    }
    if let Some(z) = &zp_b {
        let zq = b.op("Cast", "zp_p", &[z], &to(precision));
        q = b.op("Add", "q_shifted", &[&q, &zq], &[]);
    }
    let mode = [
        ("quantize", Attr::Int(1)),
        ("saturate", Attr::Int(int("saturate", 1)?)),
    ];
    match target {
        Some(d) => b.op_to(
            "Cast",
            &y,
            &[&q],
            &[to(d)[0].clone(), mode[0].clone(), mode[1].clone()],
        ),
        None => b.op_to(
            "CastLike",
            &y,
            &[&q, zp.as_deref().unwrap_or_default()],
            &mode,
        ),
    };
    Ok(Some(b.finish()))
}

/// MatMulInteger and QLinearMatMul as the ONNX reference defines them: the operands widened
/// to i32 less their zero points (numpy broadcasting), one exact i32 MatMul; QLinearMatMul
/// then scales the sums by `a_scale * b_scale / y_scale` (computed in the scales' type, as
/// the reference does), rounds half to even in f32, adds `y_zero_point` and saturates by the
/// cast to `y_zero_point`'s type (`a`'s without one).
fn integer_product(node: &Node) -> Result<Expansion> {
    let bad = |msg: &str| node_error(node, msg);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output"));
    };
    let quantized = node.op == "QLinearMatMul";
    // Operand and zero-point inputs: MatMulInteger (A, B, a_zp, b_zp); QLinearMatMul (a,
    // a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
    let (a, a_zp, b_in, b_zp) = match quantized {
        true => (input(0), input(2), input(3), input(5)),
        false => (input(0), input(2), input(1), input(3)),
    };
    let (Some(a), Some(b_in)) = (a, b_in) else {
        return Err(bad("needs both operands"));
    };
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, &node.op, &[]);
    let to_i32 = [("to", Attr::String("i32".into()))];
    let widened = |b: &mut Builder, v: &str, zp: Option<String>, what: &str| {
        let w = b.op("Cast", &format!("{what}_i32"), &[v], &to_i32);
        match zp {
            Some(zp) => {
                let zp = b.op("Cast", &format!("{what}_zp_i32"), &[&zp], &to_i32);
                b.op("Sub", &format!("{what}_centred"), &[&w, &zp], &[])
            }
            None => w,
        }
    };
    let a32 = widened(&mut b, &a, a_zp, "a");
    let b32 = widened(&mut b, &b_in, b_zp, "b");
    if !quantized {
        b.op_to("MatMul", &y, &[&a32, &b32], &[]);
        return Ok(b.finish());
    }
    let (Some(a_scale), Some(b_scale), Some(y_scale)) = (input(1), input(4), input(6)) else {
        return Err(bad("needs a_scale, b_scale and y_scale"));
    };
    let sums = b.op("MatMul", "sums", &[&a32, &b32], &[]);
    let to_f32 = [("to", Attr::String("f32".into()))];
    let sums = b.op("Cast", "sums_f32", &[&sums], &to_f32);
    requantize(
        &mut b,
        &sums,
        &a_scale,
        &b_scale,
        &y_scale,
        input(7),
        &a,
        &y,
    );
    Ok(b.finish())
}

/// ConvInteger and QLinearConv as the ONNX reference defines them: the input and the kernel
/// widened to i32 less their zero points (the kernel's per output channel where it has one
/// per channel), one exact i32 Conv with the node's geometry attributes (the input padded
/// with zeros after the shift); QLinearConv adds its i32 bias, scales the sums by
/// `x_scale * w_scale / y_scale` (w_scale per output channel or one) in f32, rounds half to
/// even, adds `y_zero_point` and saturates by the cast to `y_zero_point`'s type (x's without
/// one).
fn integer_conv(node: &Node) -> Result<Expansion> {
    let bad = |msg: &str| node_error(node, msg);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output"));
    };
    let quantized = node.op == "QLinearConv";
    // ConvInteger (x, w, x_zp, w_zp); QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp,
    // y_scale, y_zp, B).
    let (x, x_zp, w, w_zp) = match quantized {
        true => (input(0), input(2), input(3), input(5)),
        false => (input(0), input(2), input(1), input(3)),
    };
    let (Some(x), Some(w)) = (x, w) else {
        return Err(bad("needs its input and kernel"));
    };
    let geometry: Vec<(&str, Attr)> = crate::graph::registry::CONV_ATTRS
        .iter()
        .filter_map(|&k| node.attrs.get(k).map(|v| (k, v.clone())))
        .collect();
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, &node.op, &[]);
    let to_i32 = [("to", Attr::String("i32".into()))];
    // A per-channel vector as [M, 1, ..., 1] of the kernel's rank (a scalar stays one).
    let per_channel = b.leading_axis_shape("per_channel", &w, 0)?;
    let x32 = b.op("Cast", "x_i32", &[&x], &to_i32);
    let x32 = match x_zp {
        Some(zp) => {
            let zp = b.op("Cast", "x_zp_i32", &[&zp], &to_i32);
            b.op("Sub", "x_centred", &[&x32, &zp], &[])
        }
        None => x32,
    };
    let w32 = b.op("Cast", "w_i32", &[&w], &to_i32);
    let w32 = match w_zp {
        Some(zp) => {
            let zp = b.op("Cast", "w_zp_i32", &[&zp], &to_i32);
            let zp = b.op("Reshape", "w_zp_channels", &[&zp, &per_channel], &[]);
            b.op("Sub", "w_centred", &[&w32, &zp], &[])
        }
        None => w32,
    };
    if !quantized {
        b.op_to("Conv", &y, &[&x32, &w32], &geometry);
        return Ok(b.finish());
    }
    let (Some(x_scale), Some(w_scale), Some(y_scale)) = (input(1), input(4), input(6)) else {
        return Err(bad("needs x_scale, w_scale and y_scale"));
    };
    let sums = match input(8) {
        Some(bias) => {
            let bias = b.op("Cast", "bias_i32", &[&bias], &to_i32);
            b.op("Conv", "sums", &[&x32, &w32, &bias], &geometry)
        }
        None => b.op("Conv", "sums", &[&x32, &w32], &geometry),
    };
    let to_f32 = [("to", Attr::String("f32".into()))];
    let sums = b.op("Cast", "sums_f32", &[&sums], &to_f32);
    // The scale per output channel: [M, 1, ..., 1] of the kernel's rank less one lines up
    // with [N, M, spatial...].
    let tail = b.leading_axis_shape("channel_tail", &w, 1)?;
    let w_scale = b.op("Reshape", "w_scale_channels", &[&w_scale, &tail], &[]);
    requantize(
        &mut b,
        &sums,
        &x_scale,
        &w_scale,
        &y_scale,
        input(7),
        &x,
        &y,
    );
    Ok(b.finish())
}

/// The QLinear ops' output from their f32 sums: times `s1 * s2 / y_scale` (computed in the
/// scales' type, as the reference does, then widened to f32), rounded half to even, plus the
/// zero point `zp` (rounding before adding the integer saves f32 a second rounding; onnxruntime
/// does the same), cast to `zp`'s type (`like`'s without one), a cast that saturates.
#[allow(clippy::too_many_arguments)]
fn requantize(
    b: &mut Builder,
    sums: &str,
    s1: &str,
    s2: &str,
    y_scale: &str,
    zp: Option<String>,
    like: &str,
    y: &str,
) {
    let to_f32 = [("to", Attr::String("f32".into()))];
    let scale = b.op("Mul", "scale_product", &[s1, s2], &[]);
    let scale = b.op("Div", "scale", &[&scale, y_scale], &[]);
    let scale = b.op("Cast", "scale_f32", &[&scale], &to_f32);
    let scaled = b.op("Mul", "scaled", &[sums, &scale], &[]);
    let mut q = b.op("Round", "rounded", &[&scaled], &[]);
    let like = match zp {
        Some(zp) => {
            let zp_f = b.op("Cast", "y_zp_f32", &[&zp], &to_f32);
            q = b.op("Add", "shifted", &[&q, &zp_f], &[]);
            zp
        }
        None => like.to_string(),
    };
    b.op_to("CastLike", y, &[&q, &like], &[]);
}
