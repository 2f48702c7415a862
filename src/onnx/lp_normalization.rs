//! ONNX `LpNormalization` loaded as the ops it is defined by: the input divided by its L1 or
//! L2 norm along `axis`, zero where that norm is zero.

use super::expansion::{int_attr, node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::{Error, Result};

/// The nodes that compute an `LpNormalization` node; `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    if node.op != "LpNormalization" {
        return Ok(None);
    }
    let bad = |msg: String| node_error(node, msg);
    let int = |name: &str, default: i64| Ok::<_, Error>(int_attr(node, name)?.unwrap_or(default));
    let norm = match int("p", 2)? {
        1 => "ReduceL1",
        2 => "ReduceL2",
        p => return Err(bad(format!("p {p} is not 1 or 2"))),
    };
    let axis = int("axis", -1)?;
    let (Some(x), Some(y)) = (node.inputs.first(), node.outputs.first()) else {
        return Err(bad("needs an input and an output".into()));
    };
    let mut b = Builder::new(node, y);
    b.check_inputs(node, &node.op, &[]);
    let axes = b.i64s("axes", &[axis])?;
    let n = b.op(norm, "norm", &[x, &axes], &[("keepdims", Attr::Int(1))]);
    let zero = b.f32_scalar("zero", 0.0)?;
    let zero = b.op("CastLike", "zero_t", &[&zero, x], &[]);
    let is_zero = b.op("Equal", "norm_is_zero", &[&n, &zero], &[]);
    let q = b.op("Div", "quotient", &[x, &n], &[]);
    b.op_to("Where", y, &[&is_zero, &zero, &q], &[]);
    Ok(Some(b.finish()))
}
