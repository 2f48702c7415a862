//! ONNX `RotaryEmbedding` (opset 23) loaded as the ops it is defined by: each head's first
//! `rotary_embedding_dim` values (all by default) are rotated in pairs, halves or interleaved,
//! by the cosines and sines of the token's position; the rest pass through.

use super::expansion::{int_attr, node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::{Error, Result};

/// The nodes that compute a `RotaryEmbedding` node; `None` for other ops. A 3-D input is told
/// by `num_heads`, which the specification requires for it.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    if node.op != "RotaryEmbedding" {
        return Ok(None);
    }
    let bad = |msg: String| node_error(node, msg);
    let int = |name: &str| Ok::<_, Error>(int_attr(node, name)?.unwrap_or(0));
    let heads = int("num_heads")?;
    let dim = int("rotary_embedding_dim")?;
    let interleaved = int("interleaved")? != 0;
    if heads < 0 || dim < 0 || dim % 2 != 0 {
        return Err(bad(format!(
            "num_heads {heads} and rotary_embedding_dim {dim} must be at least 0, the latter even"
        )));
    }
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(x), Some(cos), Some(sin)) = (input(0), input(1), input(2)) else {
        return Err(bad("needs input, cos_cache and sin_cache".into()));
    };
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output".into()));
    };
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, &node.op, &[]);
    // [batch, heads, sequence, head size], the 4-D input's layout.
    let x4 = if heads > 0 {
        b.split_heads(&x, heads, "x")?
    } else {
        x.clone()
    };
    // The caches at each token's position: [batch, 1, sequence, rotated / 2].
    let (cos, sin) = match input(3) {
        Some(ids) => {
            // Each position a row of the caches; the Gathers below would count a negative
            // one from the end.
            let rows = b.dims("cache_rows", &cos, 0, Some(1));
            let bounds = b.positions_below("row_bounds", &rows)?;
            b.check_values(
                ("RotaryEmbedding", "position_ids"),
                "position_ids' element {i} is {v}; it must be in 0..{b2}, a row of cos_cache",
                &ids,
                &bounds,
                None,
            );
            (
                b.op("Gather", "cos_at", &[&cos, &ids], &[("axis", Attr::Int(0))]),
                b.op("Gather", "sin_at", &[&sin, &ids], &[("axis", Attr::Int(0))]),
            )
        }
        None => (cos, sin),
    };
    let axis1 = b.i64s("axis1", &[1])?;
    let cos = b.op("Unsqueeze", "cos4", &[&cos, &axis1], &[]);
    let sin = b.op("Unsqueeze", "sin4", &[&sin, &axis1], &[]);
    let last = b.i64s("last", &[-1])?;
    let zero = b.i64s("zero", &[0])?;
    let end = b.i64s("end", &[i64::MAX])?;
    let one = b.i64s("one", &[1])?;
    let two = b.i64s("two", &[2])?;
    let slice = |b: &mut Builder, out: &str, x: &str, from: &str, to: &str, step: &str| {
        b.op("OnnxSlice", out, &[x, from, to, &last, step], &[])
    };
    let (rotated, kept) = if dim > 0 {
        let d = b.i64s("dim", &[dim])?;
        (
            slice(&mut b, "rotated", &x4, &zero, &d, &one),
            Some(slice(&mut b, "kept", &x4, &d, &end, &one)),
        )
    } else {
        (x4.clone(), None)
    };
    let (x1, x2) = if interleaved {
        (
            slice(&mut b, "x1", &rotated, &zero, &end, &two),
            slice(&mut b, "x2", &rotated, &one, &end, &two),
        )
    } else {
        let size = b.dims("rotated_size", &rotated, 3, Some(4));
        let half = b.op("Div", "half", &[&size, &two], &[]);
        (
            slice(&mut b, "x1", &rotated, &zero, &half, &one),
            slice(&mut b, "x2", &rotated, &half, &end, &one),
        )
    };
    let cos_x1 = b.op("Mul", "cos_x1", &[&cos, &x1], &[]);
    let sin_x2 = b.op("Mul", "sin_x2", &[&sin, &x2], &[]);
    let real = b.op("Sub", "real", &[&cos_x1, &sin_x2], &[]);
    let sin_x1 = b.op("Mul", "sin_x1", &[&sin, &x1], &[]);
    let cos_x2 = b.op("Mul", "cos_x2", &[&cos, &x2], &[]);
    let imag = b.op("Add", "imag", &[&sin_x1, &cos_x2], &[]);
    let axis = [("axis", Attr::Int(-1))];
    let turned = if interleaved {
        let r = b.op("Unsqueeze", "real_pair", &[&real, &last], &[]);
        let i = b.op("Unsqueeze", "imag_pair", &[&imag, &last], &[]);
        let pairs = b.op("Concat", "pairs", &[&r, &i], &axis);
        let lead = b.dims("pairs_lead", &pairs, 0, Some(3));
        let width = b.dims_product("pairs_width", &pairs, 3, None);
        let flat = b.op("Concat", "flat", &[&lead, &width], &axis);
        b.op("Reshape", "turned", &[&pairs, &flat], &[])
    } else {
        b.op("Concat", "turned", &[&real, &imag], &axis)
    };
    let out4 = match &kept {
        Some(k) => b.op("Concat", "out4", &[&turned, k], &axis),
        None => turned,
    };
    if heads > 0 {
        b.merge_heads(&out4, &y)?;
    } else {
        b.op_to("Identity", &y, &[&out4], &[]);
    }
    Ok(Some(b.finish()))
}
