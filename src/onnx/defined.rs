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
        "RoiAlign" => roi_align(node).map(Some),
        "DeformConv" => deform_conv(node).map(Some),
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
    b.check_inputs(node, &node.op, &[]);
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
    b.check_inputs(node, &node.op, &[]);
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
    // Each index a position of the unpooled tensor: the ScatterElements below would count a
    // negative one from the end (onnxruntime refuses it).
    let bounds = b.positions_below("position_bounds", &count)?;
    b.check_values(
        ("MaxUnpool", "I"),
        "I's element {i} is {v}; it must be in 0..{b2}, a position of the unpooled tensor",
        i,
        &bounds,
        None,
    );
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
/// `write_indices`), modulo the cache's length in `circular` mode. The index is [B, 1, ...,
/// len, 1, ...], repeated over the update by ScatterElements' `unique_indices` (ours).
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
    b.check_inputs(node, &node.op, &[]);
    // Each update element's position along the axis: 0..len there (a constant while
    // planning), as [len, 1, ...] for the axes after it, broadcast over the update at the end.
    let end = if axis == -1 { None } else { Some(axis + 1) };
    let len = b.dims("written_length", &update, axis, end);
    let zero = b.i64s("zero", &[0])?;
    let zero_s = b.op("Squeeze", "zero_s", &[&zero, &zero], &[]);
    let len_s = b.op("Squeeze", "written_length_s", &[&len, &zero], &[]);
    let one = b.i64s("one", &[1])?;
    let one_s = b.op("Squeeze", "one_s", &[&one, &zero], &[]);
    let positions = b.op("Range", "positions", &[&zero_s, &len_s, &one_s], &[]);
    let mut index = match end {
        None => positions,
        Some(after) => {
            let trailing = b.dims("trailing_dims", &update, after, None);
            let count = b.op("Shape", "trailing_count", &[&trailing], &[]);
            let ones = b.op(
                "ConstantOfShape",
                "trailing_ones",
                &[&count],
                &[(
                    "value",
                    Attr::Tensor(HostTensor::from_vec(vec![1], &[1i64])?),
                )],
            );
            let minus = b.i64s("minus_one", &[-1])?;
            let shape = b.op(
                "Concat",
                "positions_shape",
                &[&minus, &ones],
                &[("axis", Attr::Int(0))],
            );
            b.op("Reshape", "positions_along", &[&positions, &shape], &[])
        }
    };
    if let Some(w) = input(2) {
        // Each write within the cache: ScatterElements would count a negative index from the
        // end, and report one past it as its own.
        let max = b.dims("write_limit", &past, axis, end);
        let last = match circular {
            true => b.i64s("last_write", &[i64::MAX])?,
            false => b.op("Sub", "last_write", &[&max, &len], &[]),
        };
        let bounds = b.op(
            "Concat",
            "write_bounds",
            &[&zero, &last, &len, &max],
            &[("axis", Attr::Int(0))],
        );
        let mode = if circular { "circular" } else { "linear" };
        b.check_values(
            ("TensorScatter", "write_indices"),
            &format!("write_indices[{{i}}] is {{v}}; in {mode} mode an update of {{b2}} must be written at 0..={{b1}} of the cache's {{b3}}"),
            &w,
            &bounds,
            None,
        );
        // The write indices as [B, 1, ..., 1], broadcast over the update.
        let wshape = b.leading_axis_shape("write_shape", &update, 0)?;
        let w = b.op("Reshape", "write_indices", &[&w, &wshape], &[]);
        index = b.op("Add", "index", &[&index, &w], &[]);
    } else {
        // Zeros of shape [1, ..., 1] give the positions the update's rank (while planning).
        let shape = b.op("Shape", "update_shape", &[&update], &[]);
        let rank = b.op("Shape", "update_rank", &[&shape], &[]);
        let constant = |v: i64| {
            let t = HostTensor::from_vec(vec![1], &[v]).map(Attr::Tensor);
            t.map(|t| [("value", t)])
        };
        let ones = b.op("ConstantOfShape", "unit_shape", &[&rank], &constant(1)?);
        let zeros = b.op("ConstantOfShape", "no_write", &[&ones], &constant(0)?);
        index = b.op("Add", "index", &[&index, &zeros], &[]);
    }
    if circular {
        let len = b.dims("cache_length", &past, axis, end);
        index = b.op("Mod", "index_circular", &[&index, &len], &[]);
    }
    // The index repeats over the batch's other axes and the axes after the sequence's; the
    // writes land on distinct elements, so the updates run at once where the GPU allows.
    let attrs = [("axis", Attr::Int(axis)), ("unique_indices", Attr::Int(1))];
    b.op_to("ScatterElements", &y, &[&past, &index, &update], &attrs);
    Ok(b.finish())
}

/// RoiAlign-16 as the ops that compute it. Per ROI and output cell, `sampling_ratio`^2 points
/// on a regular grid inside the cell; each point's four neighbours are gathered from the ROI's
/// image with their bilinear weights (points outside [-1, size] weigh 0; others clamp to the
/// image as the ONNX reference does), then averaged (AveragePool over each cell's points) or,
/// in `max` mode, the largest weighted neighbour over the cell (MaxPool), as the reference and
/// onnxruntime do. Adaptive sampling (`sampling_ratio` 0, the default) gives each ROI
/// ceil(cell size) points per cell along each axis: every ROI is laid on the grid of the
/// largest (its size is read back where the ROIs are computed on the GPU), the points beyond
/// its own grid masked out, and each cell summed and divided by its ROI's point count (or its
/// unmasked points' maximum taken). Coordinates and sums in f32; the output in X's type.
/// `x` ([N, C, H, W]) as it is, or, where H or W is 0, padded with a row or column of zeros
/// along that axis: every sample of an empty image is then 0, as onnxruntime gives it. The
/// condition comes from X's shape, so it is folded while planning and only its branch is
/// recorded (the image is not copied when it is not empty).
fn zero_pixel_for_empty_image(b: &mut Builder, x: &str) -> Result<String> {
    let hw = b.dims("image_hw", x, 2, Some(4));
    let none = b.i64s("image_no_hw", &[0, 0])?;
    let empty = b.op("Equal", "image_hw_empty", &[&hw, &none], &[]);
    let grow = b.op(
        "Cast",
        "image_hw_pad",
        &[&empty],
        &[("to", Attr::String("i64".into()))],
    );
    let any = b.op(
        "ReduceMax",
        "image_empty_i64",
        &[&grow],
        &[("keepdims", Attr::Int(0))],
    );
    let any = b.op(
        "Cast",
        "image_empty",
        &[&any],
        &[("to", Attr::String("bool".into()))],
    );
    let before = b.i64s("image_pads_before", &[0, 0, 0, 0, 0, 0])?;
    let pads = b.op(
        "Concat",
        "image_pads",
        &[&before, &grow],
        &[("axis", Attr::Int(0))],
    );
    let out = b.name("image");
    let padded = b.name("image_padded");
    let kept = b.name("image_kept");
    let then = crate::graph::Graph::new()
        .node(
            Node::new("Pad", padded.as_str())
                .inputs([x, pads.as_str()])
                .outputs([padded.as_str()]),
        )
        .output(padded.as_str());
    let other = crate::graph::Graph::new()
        .node(
            Node::new("Identity", kept.as_str())
                .inputs([x])
                .outputs([kept.as_str()]),
        )
        .output(kept.as_str());
    b.op_to(
        "If",
        &out,
        &[&any],
        &[
            ("then_branch", Attr::Graph(Box::new(then))),
            ("else_branch", Attr::Graph(Box::new(other))),
        ],
    );
    Ok(out)
}

fn roi_align(node: &Node) -> Result<Expansion> {
    let bad = |msg: &str| node_error(node, msg);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(x), Some(rois), Some(batch)) = (input(0), input(1), input(2)) else {
        return Err(bad("needs X, rois and batch_indices"));
    };
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output"));
    };
    let string = |name: &str, default: &str| -> Result<String> {
        match node.attrs.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(&format!("{name} must be a string"))),
        }
    };
    let mode = string("mode", "avg")?;
    if mode != "avg" && mode != "max" {
        return Err(bad(&format!(
            "mode is '{}', not avg or max",
            mode.escape_debug()
        )));
    }
    let half_pixel = match string("coordinate_transformation_mode", "half_pixel")?.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(bad(&format!(
                "coordinate_transformation_mode is '{}', not half_pixel or output_half_pixel",
                other.escape_debug()
            )))
        }
    };
    let positive = |name: &str, default: i64| -> Result<i64> {
        let v = int_attr(node, name)?.unwrap_or(default);
        if v < 1 {
            return Err(bad(&format!("{name} is {v}; it must be at least 1")));
        }
        Ok(v)
    };
    let (oh, ow) = (positive("output_height", 1)?, positive("output_width", 1)?);
    let ratio = int_attr(node, "sampling_ratio")?.unwrap_or(0);
    if ratio < 0 {
        return Err(bad(&format!(
            "sampling_ratio is {ratio}; it must be 0 (adaptive) or more"
        )));
    }
    let adaptive = ratio == 0;
    let scale = match node.attrs.get("spatial_scale") {
        None => 1.0,
        Some(Attr::Float(s)) => *s as f32,
        Some(_) => return Err(bad("spatial_scale must be a float")),
    };
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, &node.op, &[]);
    let x = zero_pixel_for_empty_image(&mut b, &x)?;
    let f32_to = [("to", Attr::String("f32".into()))];
    let i64_to = [("to", Attr::String("i64".into()))];
    let axis = |a: i64| [("axis", Attr::Int(a))];
    // The ROIs' corners in the image's pixels: [R, 1] each.
    let r = b.op("Cast", "rois_f32", &[&rois], &f32_to);
    let s = b.f32_scalar("spatial_scale", scale)?;
    let r = b.op("Mul", "rois_scaled", &[&r, &s], &[]);
    let r = if half_pixel {
        let half = b.f32_scalar("half", 0.5)?;
        b.op("Sub", "rois_shifted", &[&r, &half], &[])
    } else {
        r
    };
    let corner = |b: &mut Builder, k: i64, what: &str| -> Result<String> {
        let at = b.i64s(&format!("{what}_at"), &[k])?;
        Ok(b.op("Gather", what, &[&r, &at], &axis(1)))
    };
    let (x0, y0) = (corner(&mut b, 0, "x_start")?, corner(&mut b, 1, "y_start")?);
    let (x1, y1) = (corner(&mut b, 2, "x_end")?, corner(&mut b, 3, "y_end")?);
    let one = b.f32_scalar("one", 1.0)?;
    let zero = b.f32_scalar("zero", 0.0)?;
    let minus_one = b.f32_scalar("minus_one", -1.0)?;
    let shape = b.op("Shape", "x_shape", &[&x], &[]);
    // Per axis: the sample coordinates [R, cells * ratio], the low and high neighbours, the
    // weights of the low and high ones, and whether each coordinate is inside [-1, size].
    let mut axes = Vec::new();
    // Adaptive sampling: per axis, each ROI's points per cell [R, 1] (f32), the grid's
    // (a scalar, i64), and which of the grid's points are the ROI's [R, n] (f32).
    let mut grids = Vec::new();
    let axis_0 = b.i64s("axis_0", &[0])?;
    for (start, end, cells, dim, what) in [(&y0, &y1, oh, 2, "y"), (&x0, &x1, ow, 3, "x")] {
        let len = b.op("Sub", &format!("{what}_extent"), &[end, start], &[]);
        let len = if half_pixel {
            len
        } else {
            b.op("Max", &format!("{what}_extent_1"), &[&len, &one], &[])
        };
        let at = if adaptive {
            // Point k of the grid: cell k / G, sub-point k % G, at
            // start + cell * bin + (sub + 0.5) * bin / g for a ROI of g points per cell.
            let cells_f = b.f32_scalar(&format!("{what}_cells"), cells as f32)?;
            let bin = b.op("Div", &format!("{what}_bin"), &[&len, &cells_f], &[]);
            let own = b.op("Ceil", &format!("{what}_own_grid"), &[&bin], &[]);
            let most = b.op(
                "ReduceMax",
                &format!("{what}_most"),
                &[&own],
                &[("keepdims", Attr::Int(0))],
            );
            let grid = b.op("Max", &format!("{what}_grid"), &[&most, &one], &[]);
            let limit = b.op("Mul", &format!("{what}_limit"), &[&grid, &cells_f], &[]);
            let ks = b.op("Range", &format!("{what}_ks"), &[&zero, &limit, &one], &[]);
            let ks = b.op("Unsqueeze", &format!("{what}_ks_row"), &[&ks, &axis_0], &[]);
            let q = b.op("Div", &format!("{what}_k_over"), &[&ks, &grid], &[]);
            let cell = b.op("Floor", &format!("{what}_cell"), &[&q], &[]);
            let whole = b.op("Mul", &format!("{what}_cell_start"), &[&cell, &grid], &[]);
            let sub = b.op("Sub", &format!("{what}_sub"), &[&ks, &whole], &[]);
            let mine = b.op("Less", &format!("{what}_mine"), &[&sub, &own], &[]);
            let mine = b.op("Cast", &format!("{what}_mine_f"), &[&mine], &f32_to);
            let half = b.f32_scalar(&format!("{what}_half"), 0.5)?;
            let sub = b.op("Add", &format!("{what}_sub_mid"), &[&sub, &half], &[]);
            let sub = b.op("Mul", &format!("{what}_sub_len"), &[&sub, &bin], &[]);
            let own_1 = b.op("Max", &format!("{what}_own_1"), &[&own, &one], &[]);
            let sub = b.op("Div", &format!("{what}_sub_at"), &[&sub, &own_1], &[]);
            let corner = b.op("Mul", &format!("{what}_corner"), &[&cell, &bin], &[]);
            let at = b.op("Add", &format!("{what}_cell_at"), &[start, &corner], &[]);
            let grid_i = b.op("Cast", &format!("{what}_grid_i"), &[&grid], &i64_to);
            grids.push((own, grid_i, mine));
            b.op("Add", &format!("{what}_points"), &[&at, &sub], &[])
        } else {
            let n = cells * ratio;
            let step = b.f32_scalar(&format!("{what}_cells_ratio"), n as f32)?;
            let step = b.op("Div", &format!("{what}_step"), &[&len, &step], &[]);
            let ks: Vec<f32> = (0..n).map(|k| k as f32 + 0.5).collect();
            let ks = b.constant(
                &format!("{what}_offsets"),
                HostTensor::from_vec(vec![1, n as usize], &ks)?,
            );
            let at = b.op("Mul", &format!("{what}_offset"), &[&ks, &step], &[]);
            b.op("Add", &format!("{what}_points"), &[start, &at], &[])
        };
        let d = b.i64s(&format!("{what}_dim"), &[dim])?;
        let size = b.op("Gather", &format!("{what}_size_i"), &[&shape, &d], &axis(0));
        let size = b.op("Cast", &format!("{what}_size"), &[&size], &f32_to);
        let last = b.op("Sub", &format!("{what}_last"), &[&size, &one], &[]);
        let below = b.op("Less", &format!("{what}_below"), &[&at, &minus_one], &[]);
        let above = b.op("Greater", &format!("{what}_above"), &[&at, &size], &[]);
        let out = b.op("Or", &format!("{what}_out"), &[&below, &above], &[]);
        let inside = b.op("Not", &format!("{what}_inside"), &[&out], &[]);
        let inside = b.op("Cast", &format!("{what}_inside_f"), &[&inside], &f32_to);
        let c = b.op("Max", &format!("{what}_clamped"), &[&at, &zero], &[]);
        let low = b.op("Floor", &format!("{what}_floor"), &[&c], &[]);
        let edge = b.op(
            "GreaterOrEqual",
            &format!("{what}_edge"),
            &[&low, &last],
            &[],
        );
        let low = b.op(
            "Where",
            &format!("{what}_low_f"),
            &[&edge, &last, &low],
            &[],
        );
        let next = b.op("Add", &format!("{what}_next"), &[&low, &one], &[]);
        let high = b.op(
            "Where",
            &format!("{what}_high_f"),
            &[&edge, &last, &next],
            &[],
        );
        let frac = b.op("Sub", &format!("{what}_frac_raw"), &[&c, &low], &[]);
        let lw = b.op(
            "Where",
            &format!("{what}_frac"),
            &[&edge, &zero, &frac],
            &[],
        );
        let hw = b.op("Sub", &format!("{what}_rest"), &[&one, &lw], &[]);
        let low = b.op("Cast", &format!("{what}_low"), &[&low], &i64_to);
        let high = b.op("Cast", &format!("{what}_high"), &[&high], &i64_to);
        axes.push((low, high, lw, hw, inside, size));
    }
    // [R, K, 1] (rows) against [R, 1, J] (columns).
    let two = b.i64s("axis_2", &[2])?;
    let one_axis = b.i64s("axis_1", &[1])?;
    let rows = |b: &mut Builder, v: &str| b.op("Unsqueeze", &format!("{v}_rows"), &[v, &two], &[]);
    let cols =
        |b: &mut Builder, v: &str| b.op("Unsqueeze", &format!("{v}_cols"), &[v, &one_axis], &[]);
    let (yl, yh, ly, hy, yin, _) = &axes[0];
    let (xl, xh, lx, hx, xin, _) = &axes[1];
    let (yl, yh, ly, hy, yin) = (
        rows(&mut b, yl),
        rows(&mut b, yh),
        rows(&mut b, ly),
        rows(&mut b, hy),
        rows(&mut b, yin),
    );
    let (xl, xh, lx, hx, xin) = (
        cols(&mut b, xl),
        cols(&mut b, xh),
        cols(&mut b, lx),
        cols(&mut b, hx),
        cols(&mut b, xin),
    );
    let width = b.dims("width", &x, 3, Some(4));
    let valid = b.op("Mul", "valid", &[&yin, &xin], &[]);
    // The points of each ROI's own grid ([R, K, J], adaptive sampling).
    let own_points = if adaptive {
        let (ym, xm) = (rows(&mut b, &grids[0].2), cols(&mut b, &grids[1].2));
        Some(b.op("Mul", "own_points", &[&ym, &xm], &[]))
    } else {
        None
    };
    let valid = match &own_points {
        Some(own) => b.op("Mul", "valid_own", &[&valid, own], &[]),
        None => valid,
    };
    // X's images of the ROIs, flattened: [R, C, H * W].
    let images = b.op("Gather", "images", &[&x, &batch], &axis(0));
    // Shapes spelled out, not by -1, which no ROI (R = 0) would leave undetermined.
    let area = b.dims_product("image_area", &x, 2, Some(4));
    let lead = b.dims("images_lead", &images, 0, Some(2));
    let flat_shape = b.op("Concat", "flat_shape", &[&lead, &area], &axis(0));
    let flat = b.op("Reshape", "images_flat", &[&images, &flat_shape], &[]);
    let flat = b.op("Cast", "images_f32", &[&flat], &f32_to);
    let channels = b.dims("channels", &x, 1, Some(2));
    let rois_n = b.dims("rois_n", &rois, 0, Some(1));
    // [R, 1, points] and its expansion to every channel.
    let row_shape = {
        let points = b.dims_product("point_count", &valid, 1, Some(3));
        b.op(
            "Concat",
            "row_shape",
            &[&rois_n, &one_axis, &points],
            &axis(0),
        )
    };
    let index_shape = b.op(
        "Concat",
        "index_shape",
        &[&one_axis, &channels, &one_axis],
        &axis(0),
    );
    let mut terms = Vec::new();
    for (k, (yy, xx, wy, wx)) in [
        (&yl, &xl, &hy, &hx),
        (&yl, &xh, &hy, &lx),
        (&yh, &xl, &ly, &hx),
        (&yh, &xh, &ly, &lx),
    ]
    .into_iter()
    .enumerate()
    {
        let row = b.op("Mul", &format!("pos{k}_row"), &[yy, &width], &[]);
        let pos = b.op("Add", &format!("pos{k}"), &[&row, xx], &[]);
        let pos = b.op("Reshape", &format!("pos{k}_flat"), &[&pos, &row_shape], &[]);
        let pos = b.op(
            "Expand",
            &format!("pos{k}_channels"),
            &[&pos, &index_shape],
            &[],
        );
        let v = b.op("GatherElements", &format!("v{k}"), &[&flat, &pos], &axis(2));
        let w = b.op("Mul", &format!("w{k}_raw"), &[wy, wx], &[]);
        let w = b.op("Mul", &format!("w{k}"), &[&w, &valid], &[]);
        let w = b.op("Reshape", &format!("w{k}_flat"), &[&w, &row_shape], &[]);
        terms.push(b.op("Mul", &format!("t{k}"), &[&v, &w], &[]));
    }
    let combine = if mode == "avg" { "Sum" } else { "Max" };
    let t = b.op(
        combine,
        "combined",
        &[&terms[0], &terms[1], &terms[2], &terms[3]],
        &[],
    );
    if adaptive {
        let (own_y, grid_y, _) = &grids[0];
        let (own_x, grid_x, _) = &grids[1];
        // [R, C, oh, G_y, ow, G_x]: each cell's points on two axes.
        let oh_i = b.i64s("oh", &[oh])?;
        let ow_i = b.i64s("ow", &[ow])?;
        let gy = b.op("Unsqueeze", "grid_y_1", &[grid_y, &axis_0], &[]);
        let gx = b.op("Unsqueeze", "grid_x_1", &[grid_x, &axis_0], &[]);
        let cell_shape = b.op(
            "Concat",
            "cell_shape",
            &[&rois_n, &channels, &oh_i, &gy, &ow_i, &gx],
            &axis(0),
        );
        let points = b.op("Mul", "own_count", &[own_y, own_x], &[]);
        let per_roi = b.i64s("per_roi", &[-1, 1, 1, 1])?;
        let points = b.op("Reshape", "own_count_4d", &[&points, &per_roi], &[]);
        let cell_axes = [("axes", Attr::Ints(vec![3, 5])), ("keepdims", Attr::Int(0))];
        let pooled = if mode == "avg" {
            let t = b.op("Reshape", "cells", &[&t, &cell_shape], &[]);
            let sum = b.op("ReduceSum", "cell_sums", &[&t], &cell_axes);
            let count = b.op("Max", "own_count_1", &[&points, &one], &[]);
            b.op("Div", "pooled", &[&sum, &count], &[])
        } else {
            // Points beyond a ROI's own grid never win; a ROI of no points gives 0.
            let own = own_points.expect("adaptive");
            let own = b.op("Reshape", "own_flat", &[&own, &row_shape], &[]);
            let own = b.op(
                "Cast",
                "own_bool",
                &[&own],
                &[("to", Attr::String("bool".into()))],
            );
            let lowest = b.f32_scalar("lowest", f32::NEG_INFINITY)?;
            let t = b.op("Where", "own_terms", &[&own, &t, &lowest], &[]);
            let t = b.op("Reshape", "cells", &[&t, &cell_shape], &[]);
            let most = b.op("ReduceMax", "cell_max", &[&t], &cell_axes);
            let any = b.op("Greater", "has_points", &[&points, &zero], &[]);
            b.op("Where", "pooled", &[&any, &most, &zero], &[])
        };
        b.op_to("CastLike", &y, &[&pooled, &x], &[]);
        return Ok(b.finish());
    }
    let grid = b.i64s("grid", &[oh * ratio, ow * ratio])?;
    let grid_shape = b.op(
        "Concat",
        "grid_shape",
        &[&rois_n, &channels, &grid],
        &axis(0),
    );
    let t = b.op("Reshape", "cells", &[&t, &grid_shape], &[]);
    let pool = if mode == "avg" {
        "AveragePool"
    } else {
        "MaxPool"
    };
    let window = Attr::Ints(vec![ratio, ratio]);
    let pooled = b.op(
        pool,
        "pooled",
        &[&t],
        &[("kernel_shape", window.clone()), ("strides", window)],
    );
    b.op_to("CastLike", &y, &[&pooled, &x], &[]);
    Ok(b.finish())
}

/// DeformConv-19 (2-D) as the ops that compute it. Each kernel tap of each output position
/// samples X at its place in the (strided, dilated, padded) window moved by its offset,
/// bilinearly from its four neighbours, those outside the image counting as 0 (as the ONNX
/// reference's GridSample with zero padding samples): GatherElements of each neighbour for
/// every channel of the tap's offset group. The taps are weighed by the mask where given, then
/// one batched MatMul per group of the weights with those columns, and the bias. Positions
/// stay in pixels (exact integers plus the offsets): normalizing them for GridSample and back
/// moved points on the image's edge by a rounding, enough to miss the node tests' 1e-7.
fn deform_conv(node: &Node) -> Result<Expansion> {
    let bad = |msg: &str| node_error(node, msg);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(x), Some(w), Some(offset)) = (input(0), input(1), input(2)) else {
        return Err(bad("needs X, W and offset"));
    };
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output"));
    };
    let pair = |name: &str, default: i64, len: usize| -> Result<Vec<i64>> {
        let v = ints(node, name)?.unwrap_or_else(|| vec![default; len]);
        if v.len() != len {
            return Err(bad(&format!(
                "{name} is {v:?}; 2-D DeformConv takes {len} values"
            )));
        }
        Ok(v)
    };
    let strides = pair("strides", 1, 2)?;
    let dilations = pair("dilations", 1, 2)?;
    let pads = pair("pads", 0, 4)?;
    if strides.iter().chain(&dilations).any(|&v| v < 1) || pads.iter().any(|&p| p < 0) {
        return Err(bad(&format!(
            "strides {strides:?} and dilations {dilations:?} must be at least 1, pads {pads:?} at least 0"
        )));
    }
    if let Some(k) = ints(node, "kernel_shape")? {
        if k.len() != 2 {
            return Err(bad(&format!(
                "kernel_shape is {k:?}; DeformConv is supported in 2-D (as onnxruntime and the ONNX reference support it)"
            )));
        }
    }
    let positive = |name: &str| -> Result<i64> {
        let v = int_attr(node, name)?.unwrap_or(1);
        if v < 1 {
            return Err(bad(&format!("{name} is {v}; it must be at least 1")));
        }
        Ok(v)
    };
    let (group, offset_group) = (positive("group")?, positive("offset_group")?);
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, &node.op, &[]);
    let axis = |a: i64| [("axis", Attr::Int(a))];
    // 4-D inputs (a transpose that moves nothing fails at run time on another rank).
    let identity = [("perm", Attr::Ints(vec![0, 1, 2, 3]))];
    let x = b.op("Transpose", "x_is_4d", &[&x], &identity);
    let w = b.op("Transpose", "w_is_4d", &[&w], &identity);
    let offset = b.op("Transpose", "offset_is_4d", &[&offset], &identity);
    let batch = b.dims("n", &x, 0, Some(1));
    let (height, width) = (b.dims("h", &x, 2, Some(3)), b.dims("w", &x, 3, Some(4)));
    let (out_h, out_w) = (
        b.dims("out_h", &offset, 2, Some(3)),
        b.dims("out_w", &offset, 3, Some(4)),
    );
    let (kernel_h, kernel_w) = (b.dims("k_h", &w, 2, Some(3)), b.dims("k_w", &w, 3, Some(4)));
    let minus = b.i64s("minus_one", &[-1])?;
    let zero = b.i64s("zero", &[0])?;
    let one = b.i64s("one", &[1])?;
    let two = b.i64s("two", &[2])?;
    // Each tap's place before its offset, per axis: tap * dilation + output * stride - pad,
    // shaped [kH, 1, oH, 1] (rows) and [1, kW, 1, oW] (columns).
    let mut base = Vec::new();
    for (k, (taps, outs, what)) in [(&kernel_h, &out_h, "rows"), (&kernel_w, &out_w, "cols")]
        .into_iter()
        .enumerate()
    {
        let taps_n = b.op("Squeeze", &format!("{what}_taps_n"), &[taps, &zero], &[]);
        let outs_n = b.op("Squeeze", &format!("{what}_outs_n"), &[outs, &zero], &[]);
        let start = b.i64s(&format!("{what}_start"), &[0])?;
        let start = b.op("Squeeze", &format!("{what}_start_n"), &[&start, &zero], &[]);
        let step = b.i64s(&format!("{what}_step"), &[1])?;
        let step = b.op("Squeeze", &format!("{what}_step_n"), &[&step, &zero], &[]);
        let t = b.op(
            "Range",
            &format!("{what}_taps"),
            &[&start, &taps_n, &step],
            &[],
        );
        let o = b.op(
            "Range",
            &format!("{what}_outs"),
            &[&start, &outs_n, &step],
            &[],
        );
        let dil = b.i64s(&format!("{what}_dilation"), &[dilations[k]])?;
        let t = b.op("Mul", &format!("{what}_tap_at"), &[&t, &dil], &[]);
        let stride = b.i64s(&format!("{what}_stride"), &[strides[k]])?;
        let pad = b.i64s(&format!("{what}_pad"), &[pads[k]])?;
        let o = b.op("Mul", &format!("{what}_out_at"), &[&o, &stride], &[]);
        let o = b.op("Sub", &format!("{what}_out_from"), &[&o, &pad], &[]);
        // rows: taps on axis 0, outputs on axis 2; columns: taps on axis 1, outputs on 3.
        let (tap_axes, out_axes): (&[i64], &[i64]) = if k == 0 {
            (&[1, 2, 3], &[0, 1, 3])
        } else {
            (&[0, 2, 3], &[0, 1, 2])
        };
        let ta = b.i64s(&format!("{what}_tap_axes"), tap_axes)?;
        let oa = b.i64s(&format!("{what}_out_axes"), out_axes)?;
        let t = b.op("Unsqueeze", &format!("{what}_tap_4d"), &[&t, &ta], &[]);
        let o = b.op("Unsqueeze", &format!("{what}_out_4d"), &[&o, &oa], &[]);
        let p = b.op("Add", &format!("{what}_base_i"), &[&t, &o], &[]);
        base.push(b.op("CastLike", &format!("{what}_base"), &[&p, &offset], &[]));
    }
    // The offsets as [N * offset_group, kH, kW, 2, oH, oW]; then each tap's place.
    let groups = b.i64s("offset_groups", &[offset_group])?;
    let images = b.op("Mul", "images", &[&batch, &groups], &[]);
    let offset_shape = b.op(
        "Concat",
        "offset_shape",
        &[&images, &kernel_h, &kernel_w, &two, &out_h, &out_w],
        &axis(0),
    );
    let offsets = b.op("Reshape", "offsets", &[&offset, &offset_shape], &[]);
    let sizes = [&height, &width];
    let taps = b.op("Mul", "taps", &[&kernel_h, &kernel_w], &[]);
    let positions = b.op("Mul", "positions", &[&out_h, &out_w], &[]);
    let one_f = b.f32_scalar("one_f", 1.0)?;
    let one_f = b.op("CastLike", "one_t", &[&one_f, &offset], &[]);
    let zero_f = b.f32_scalar("zero_f", 0.0)?;
    let zero_f = b.op("CastLike", "zero_t", &[&zero_f, &offset], &[]);
    // Per axis: each tap's place p ([N * offset_group, kH, kW, oH, oW]), its low neighbour
    // floor(p) and the high one, their weights (1 - frac, frac), whether each is inside the
    // image, and each clamped to it (an index to read; outside ones weigh nothing).
    let mut axes = Vec::new();
    for (k, what) in ["rows", "cols"].into_iter().enumerate() {
        let at = b.i64s(&format!("{what}_at"), &[k as i64])?;
        let at = b.op("Squeeze", &format!("{what}_at_n"), &[&at, &zero], &[]);
        let off = b.op(
            "Gather",
            &format!("{what}_offset"),
            &[&offsets, &at],
            &axis(3),
        );
        let p = b.op("Add", &format!("{what}_place"), &[&off, &base[k]], &[]);
        let size = b.op(
            "CastLike",
            &format!("{what}_size"),
            &[sizes[k], &offset],
            &[],
        );
        let last = b.op("Sub", &format!("{what}_last"), &[&size, &one_f], &[]);
        let low = b.op("Floor", &format!("{what}_low"), &[&p], &[]);
        let high = b.op("Add", &format!("{what}_high"), &[&low, &one_f], &[]);
        let frac = b.op("Sub", &format!("{what}_frac"), &[&p, &low], &[]);
        let rest = b.op("Sub", &format!("{what}_rest"), &[&one_f, &frac], &[]);
        let mut ends = Vec::new();
        for (v, weight, end) in [(&low, &rest, "lo"), (&high, &frac, "hi")] {
            let above = b.op(
                "GreaterOrEqual",
                &format!("{what}_{end}_from"),
                &[v, &zero_f],
                &[],
            );
            let below = b.op("LessOrEqual", &format!("{what}_{end}_to"), &[v, &last], &[]);
            let inside = b.op(
                "And",
                &format!("{what}_{end}_inside"),
                &[&above, &below],
                &[],
            );
            let c = b.op("Max", &format!("{what}_{end}_min"), &[v, &zero_f], &[]);
            let c = b.op("Min", &format!("{what}_{end}_clamped"), &[&c, &last], &[]);
            let c = b.op(
                "Cast",
                &format!("{what}_{end}_index"),
                &[&c],
                &[("to", Attr::String("i64".into()))],
            );
            ends.push((c, weight.clone(), inside));
        }
        axes.push(ends);
    }
    // X by offset group, flattened: [N * offset_group, C / offset_group, H * W].
    let pixels = b.op("Mul", "pixels", &[&height, &width], &[]);
    let flat_shape = b.op(
        "Concat",
        "flat_shape",
        &[&images, &minus, &pixels],
        &axis(0),
    );
    let flat = b.op("Reshape", "x_flat", &[&x, &flat_shape], &[]);
    let channels = b.dims("group_channels", &flat, 1, Some(2));
    let samples_n = b.op("Mul", "samples_n", &[&taps, &positions], &[]);
    let index_shape = b.op(
        "Concat",
        "index_shape",
        &[&images, &channels, &samples_n],
        &axis(0),
    );
    let row_shape = b.op(
        "Concat",
        "row_shape",
        &[&images, &one, &samples_n],
        &axis(0),
    );
    let width_i = b.op("Squeeze", "width_n", &[&width, &zero], &[]);
    let mut terms = Vec::new();
    for (r, (ry, wy, iny)) in axes[0].iter().enumerate() {
        for (c, (cx, wx, inx)) in axes[1].iter().enumerate() {
            let what = format!("n{r}{c}");
            let at = b.op("Mul", &format!("{what}_row_at"), &[ry, &width_i], &[]);
            let at = b.op("Add", &format!("{what}_at"), &[&at, cx], &[]);
            let at = b.op(
                "Reshape",
                &format!("{what}_at_row"),
                &[&at, &row_shape],
                &[],
            );
            let at = b.op(
                "Expand",
                &format!("{what}_at_all"),
                &[&at, &index_shape],
                &[],
            );
            let v = b.op(
                "GatherElements",
                &format!("{what}_v"),
                &[&flat, &at],
                &axis(2),
            );
            let inside = b.op("And", &format!("{what}_inside"), &[iny, inx], &[]);
            let inside = b.op(
                "Reshape",
                &format!("{what}_inside_row"),
                &[&inside, &row_shape],
                &[],
            );
            // Outside the image counts as 0 (not 0 times what the clamped index reads).
            let v = b.op(
                "Where",
                &format!("{what}_v_in"),
                &[&inside, &v, &zero_f],
                &[],
            );
            let weight = b.op("Mul", &format!("{what}_w"), &[wy, wx], &[]);
            let weight = b.op(
                "Reshape",
                &format!("{what}_w_row"),
                &[&weight, &row_shape],
                &[],
            );
            terms.push(b.op("Mul", &format!("{what}_term"), &[&v, &weight], &[]));
        }
    }
    let refs: Vec<&str> = terms.iter().map(String::as_str).collect();
    let samples = b.op("Sum", "samples_flat", &refs, &[]);
    // [N * offset_group, C / offset_group, kH * kW, oH * oW]
    let samples_shape = b.op(
        "Concat",
        "samples_shape",
        &[&images, &minus, &taps, &positions],
        &axis(0),
    );
    let mut samples = b.op("Reshape", "samples", &[&samples, &samples_shape], &[]);
    if let Some(mask) = input(4) {
        let mask_shape = b.op(
            "Concat",
            "mask_shape",
            &[&images, &one, &taps, &positions],
            &axis(0),
        );
        let m = b.op("Reshape", "mask", &[&mask, &mask_shape], &[]);
        samples = b.op("Mul", "masked", &[&samples, &m], &[]);
    }
    // Columns [N, group, C / group * kH * kW, oH * oW] against weights [group, oC / group,
    // C / group * kH * kW].
    let g = b.i64s("groups", &[group])?;
    let cols_shape = b.op(
        "Concat",
        "cols_shape",
        &[&batch, &g, &minus, &positions],
        &axis(0),
    );
    let cols = b.op("Reshape", "cols", &[&samples, &cols_shape], &[]);
    let out_channels = b.dims("oc", &w, 0, Some(1));
    let per_group = b.op("Div", "oc_per_group", &[&out_channels, &g], &[]);
    let w_shape = b.op("Concat", "w_shape", &[&g, &per_group, &minus], &axis(0));
    let wm = b.op("Reshape", "w_by_group", &[&w, &w_shape], &[]);
    let product = b.op("MatMul", "product", &[&wm, &cols], &[]);
    let y_shape = b.op(
        "Concat",
        "y_shape",
        &[&batch, &minus, &out_h, &out_w],
        &axis(0),
    );
    match input(3) {
        Some(bias) => {
            let yy = b.op("Reshape", "y_no_bias", &[&product, &y_shape], &[]);
            let bias_shape = b.i64s("bias_shape", &[1, -1, 1, 1])?;
            let bias = b.op("Reshape", "bias", &[&bias, &bias_shape], &[]);
            b.op_to("Add", &y, &[&yy, &bias], &[]);
        }
        None => {
            b.op_to("Reshape", &y, &[&product, &y_shape], &[]);
        }
    }
    Ok(b.finish())
}
