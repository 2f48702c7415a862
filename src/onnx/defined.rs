//! ONNX ops loaded as the ops that compute them: `MeanVarianceNormalization` (its function
//! body, step for step) and `MaxUnpool` (each value written at its index in a zero tensor of
//! the output's shape).

use super::expansion::{int_attr, node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::{HostTensor, Result};

/// The nodes that compute `node`; `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    match node.op.as_str() {
        "MeanVarianceNormalization" => mean_variance_normalization(node).map(Some),
        "MaxUnpool" => max_unpool(node).map(Some),
        "TensorScatter" => tensor_scatter(node).map(Some),
        _ => Ok(None),
    }
}

fn ints(node: &Node, name: &str) -> Result<Option<Vec<i64>>> {
    match node.attrs.get(name) {
        None => Ok(None),
        Some(Attr::Ints(v)) => Ok(Some(v.clone())),
        Some(_) => Err(node_error(node, format!("{name} must be integers"))),
    }
}

/// `(X - mean) / (sqrt(mean(X^2) - mean^2) + 1e-9)` over `axes` ([0, 2, 3] by default), as
/// the function body computes it.
fn mean_variance_normalization(node: &Node) -> Result<Expansion> {
    let (Some(x), Some(y)) = (node.inputs.first(), node.outputs.first()) else {
        return Err(node_error(node, "needs an input and an output"));
    };
    let axes = ints(node, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let mut b = Builder::new(node, y);
    let axes = b.i64s("axes", &axes)?;
    let keep = [("keepdims", Attr::Int(1))];
    let two = b.f32_scalar("two", 2.0)?;
    let two = b.op("CastLike", "two_t", &[&two, x], &[]);
    let mean = b.op("ReduceMean", "mean", &[x, &axes], &keep);
    let mean_sq = b.op("Pow", "mean_squared", &[&mean, &two], &[]);
    let sq = b.op("Pow", "squares", &[x, &two], &[]);
    let sq_mean = b.op("ReduceMean", "mean_of_squares", &[&sq, &axes], &keep);
    let var = b.op("Sub", "variance", &[&sq_mean, &mean_sq], &[]);
    let std = b.op("Sqrt", "std", &[&var], &[]);
    let centered = b.op("Sub", "centered", &[x, &mean], &[]);
    let eps = b.f32_scalar("epsilon", 1e-9)?;
    let eps = b.op("CastLike", "epsilon_t", &[&eps, x], &[]);
    let denom = b.op("Add", "std_eps", &[&std, &eps], &[]);
    b.op_to("Div", y, &[&centered, &denom], &[]);
    Ok(b.finish())
}

/// Each value of X scattered to its index in a zero tensor of the inferred shape (each spatial
/// extent `stride (in - 1) + kernel - pads`; MaxPool's indices count over the whole tensor),
/// padded with zeros after each axis to `output_shape` when it is given.
fn max_unpool(node: &Node) -> Result<Expansion> {
    let bad = |msg: String| node_error(node, msg);
    let (Some(x), Some(i), Some(y)) = (
        node.inputs.first(),
        node.inputs.get(1),
        node.outputs.first(),
    ) else {
        return Err(bad("needs X, I and an output".into()));
    };
    let kernel = ints(node, "kernel_shape")?.ok_or_else(|| bad("needs kernel_shape".into()))?;
    let k = kernel.len();
    let strides = ints(node, "strides")?.unwrap_or_else(|| vec![1; k]);
    let pads = ints(node, "pads")?.unwrap_or_else(|| vec![0; 2 * k]);
    if strides.len() != k || pads.len() != 2 * k || kernel.iter().chain(&strides).any(|&v| v < 1) {
        return Err(bad(format!(
            "needs positive kernel_shape and strides of one length ({k}) and twice as many pads"
        )));
    }
    let mut b = Builder::new(node, y);
    // [N, C] then stride (in - 1) + kernel - pads per spatial axis (on the host: shapes).
    let lead = b.dims("lead", x, 0, Some(2));
    let spatial = b.dims("spatial", x, 2, None);
    let one = b.i64s("one", &[1])?;
    let strides = b.i64s("strides", &strides)?;
    let extra: Vec<i64> = (0..k).map(|d| kernel[d] - pads[d] - pads[k + d]).collect();
    let extra = b.i64s("kernel_less_pads", &extra)?;
    let less = b.op("Sub", "in_less_one", &[&spatial, &one], &[]);
    let scaled = b.op("Mul", "strided", &[&less, &strides], &[]);
    let out = b.op("Add", "out_spatial", &[&scaled, &extra], &[]);
    let inferred = b.op(
        "Concat",
        "inferred_shape",
        &[&lead, &out],
        &[("axis", Attr::Int(0))],
    );
    let flat = b.i64s("flat", &[-1])?;
    let count = b.op(
        "ReduceProd",
        "count",
        &[&inferred],
        &[("keepdims", Attr::Int(1))],
    );
    let zeros = b.op(
        "ConstantOfShape",
        "zeros",
        &[&count],
        &[(
            "value",
            Attr::Tensor(HostTensor::from_vec(vec![1], &[0f32])?),
        )],
    );
    let zeros = b.op("CastLike", "zeros_t", &[&zeros, x], &[]);
    let values = b.op("Reshape", "values", &[x, &flat], &[]);
    let indices = b.op("Reshape", "indices", &[i, &flat], &[]);
    let scattered = b.op(
        "ScatterElements",
        "scattered",
        &[&zeros, &indices, &values],
        &[("axis", Attr::Int(0))],
    );
    match node.inputs.get(2).filter(|s| !s.is_empty()) {
        None => {
            b.op_to("Reshape", y, &[&scattered, &inferred], &[]);
        }
        Some(shape) => {
            // The unpooled tensor in the corner of the given shape (zeros after it), as the
            // ONNX reference places it.
            let unpooled = b.op("Reshape", "unpooled", &[&scattered, &inferred], &[]);
            let after = b.op("Sub", "pads_after", &[shape, &inferred], &[]);
            let zero = b.i64s("zero", &[0])?;
            let before = b.op("Mul", "pads_before", &[&after, &zero], &[]);
            let pads = b.op(
                "Concat",
                "pads",
                &[&before, &after],
                &[("axis", Attr::Int(0))],
            );
            b.op_to("Pad", y, &[&unpooled, &pads], &[]);
        }
    }
    Ok(b.finish())
}

/// TensorScatter-24 (a KV cache update) as one ScatterElements: each update element's index
/// along `axis` is its position there plus its batch item's write index (0 without
/// `write_indices`), modulo the cache's length in `circular` mode.
fn tensor_scatter(node: &Node) -> Result<Expansion> {
    let bad = |msg: &str| node_error(node, msg);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(past), Some(update)) = (input(0), input(1)) else {
        return Err(bad("needs past_cache and update"));
    };
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output"));
    };
    let axis = int_attr(node, "axis")?.unwrap_or(-2);
    if axis == 0 {
        return Err(bad(
            "axis is 0, the batch axis; the sequence axis must be another",
        ));
    }
    let circular = match node.attrs.get("mode") {
        None => false,
        Some(Attr::String(m)) if m == "linear" => false,
        Some(Attr::String(m)) if m == "circular" => true,
        Some(Attr::String(m)) => {
            return Err(bad(&format!(
                "mode is '{}', not linear or circular",
                m.escape_debug()
            )))
        }
        Some(_) => return Err(bad("mode must be a string")),
    };
    let mut b = Builder::new(node, &y);
    let axis_attr = [("axis", Attr::Int(axis))];
    // Each update element's position along the axis: a running count of ones, less one.
    let shape = b.op("Shape", "update_shape", &[&update], &[]);
    let one = b.i64s("one", &[1])?;
    let ones = b.op("Expand", "ones", &[&one, &shape], &[]);
    let axis_v = b.i64s("axis", &[axis])?;
    let count = b.op("CumSum", "count", &[&ones, &axis_v], &[]);
    let mut index = b.op("Sub", "position", &[&count, &one], &[]);
    if let Some(w) = input(2) {
        // The write indices as [B, 1, ..., 1], broadcast over the update.
        let rank = b.op("Shape", "rank", &[&shape], &[]);
        let rest = b.op("Sub", "rest", &[&rank, &one], &[]);
        let ones = b.op(
            "ConstantOfShape",
            "unit_dims",
            &[&rest],
            &[(
                "value",
                Attr::Tensor(HostTensor::from_vec(vec![1], &[1i64])?),
            )],
        );
        let minus = b.i64s("minus_one", &[-1])?;
        let wshape = b.op(
            "Concat",
            "write_shape",
            &[&minus, &ones],
            &[("axis", Attr::Int(0))],
        );
        let w = b.op("Reshape", "write_indices", &[&w, &wshape], &[]);
        index = b.op("Add", "index", &[&index, &w], &[]);
    }
    if circular {
        let end = if axis == -1 { None } else { Some(axis + 1) };
        let len = b.dims("cache_length", &past, axis, end);
        index = b.op("Mod", "index_circular", &[&index, &len], &[]);
    }
    b.op_to("ScatterElements", &y, &[&past, &index, &update], &axis_attr);
    Ok(b.finish())
}
