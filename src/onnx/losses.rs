//! ONNX `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss` (opsets 12 on) loaded as
//! the ops they are defined by: the class each target names is picked from the (log)
//! probabilities along axis 1, negated and weighted, and reduced as `reduction` says.

use super::expansion::{node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::Result;

/// The nodes that compute a loss node, with the constants they read; `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    let softmax = match node.op.as_str() {
        "NegativeLogLikelihoodLoss" => false,
        "SoftmaxCrossEntropyLoss" => true,
        _ => return Ok(None),
    };
    let bad = |msg: String| node_error(node, msg);
    let reduction = match node.attrs.get("reduction") {
        None => "mean".to_string(),
        Some(Attr::String(r)) if matches!(r.as_str(), "mean" | "sum" | "none") => r.clone(),
        Some(Attr::String(r)) => {
            return Err(bad(format!(
                "reduction '{}' is not mean, sum or none",
                r.escape_debug()
            )))
        }
        Some(_) => return Err(bad("reduction must be a string".into())),
    };
    let ignore = match node.attrs.get("ignore_index") {
        None => None,
        Some(Attr::Int(i)) => Some(*i),
        Some(_) => return Err(bad("ignore_index must be an integer".into())),
    };
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let output = |k: usize| node.outputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(scores), Some(target)) = (input(0), input(1)) else {
        return Err(bad("needs its scores and its targets".into()));
    };
    let Some(loss) = output(0) else {
        return Err(bad("needs its output".into()));
    };
    let weight = input(2);
    let mut b = Builder::new(node, &loss);
    b.check_inputs(node, &node.op, &[]);
    // Log-probabilities along the classes (axis 1).
    let log_prob = if softmax {
        let lp = b.op(
            "LogSoftmax",
            "log_prob",
            &[&scores],
            &[("axis", Attr::Int(1))],
        );
        if let Some(out) = output(1) {
            b.op_to("Identity", &out, &[&lp], &[]);
        }
        lp
    } else {
        scores.clone()
    };
    // Each target a class (or ignore_index), where the graph computes them: the GatherElements
    // below would take a negative one as counting from the last class. Checked before the
    // cast, so that a target given as a graph input is checked while planning.
    let classes = b.dims("classes", &scores, 1, Some(2));
    let bounds = b.positions_below("class_bounds", &classes)?;
    let (ignored, or_ignored) = match ignore {
        Some(x) => (
            Some(b.i64s("ignored_class", &[x])?),
            format!(" (or ignore_index {x})"),
        ),
        None => (None, String::new()),
    };
    b.check_values(
        (&node.op, "target"),
        &format!("target's element {{i}} is {{v}}; a class must be in 0..{{b2}}{or_ignored}"),
        &target,
        &bounds,
        ignored.as_deref(),
    );
    let target = b.op(
        "Cast",
        "target",
        &[&target],
        &[("to", Attr::String("i64".into()))],
    );
    let axis1 = b.i64s("axis1", &[1])?;
    // Ignored targets pick class 0 (they may name no class) and count with weight 0.
    let (target, valid) = match ignore {
        Some(i) => {
            let i = b.i64s("ignore_index", &[i])?;
            let ignored = b.op("Equal", "ignored", &[&target, &i], &[]);
            let valid = b.op("Not", "valid", &[&ignored], &[]);
            let zero = b.i64s("class0", &[0])?;
            let safe = b.op("Where", "safe_target", &[&valid, &target, &zero], &[]);
            (safe, Some(valid))
        }
        None => (target, None),
    };
    let index = b.op("Unsqueeze", "index", &[&target, &axis1], &[]);
    let picked = b.op(
        "GatherElements",
        "picked",
        &[&log_prob, &index],
        &[("axis", Attr::Int(1))],
    );
    let picked = b.op("Squeeze", "picked_n", &[&picked, &axis1], &[]);
    let mut loss_each = b.op("Neg", "loss_each", &[&picked], &[]);
    // Each target's weight: its class's, 0 where ignored; none when neither applies.
    let weights = match (&weight, &valid) {
        (None, None) => None,
        (Some(w), _) => {
            let w = b.op(
                "Gather",
                "class_weight",
                &[w, &target],
                &[("axis", Attr::Int(0))],
            );
            Some(match &valid {
                Some(v) => {
                    let zero = b.f32_scalar("zero", 0.0)?;
                    let zero = b.op("CastLike", "zero_t", &[&zero, &w], &[]);
                    b.op("Where", "weight", &[v, &w, &zero], &[])
                }
                None => w,
            })
        }
        (None, Some(v)) => Some(b.op("CastLike", "weight", &[v, &loss_each], &[])),
    };
    if let Some(w) = &weights {
        loss_each = b.op("Mul", "weighted", &[&loss_each, w], &[]);
    }
    let keep = [("keepdims", Attr::Int(0))];
    match (reduction.as_str(), &weights) {
        ("none", _) => b.op_to("Identity", &loss, &[&loss_each], &[]),
        ("sum", _) => b.op_to("ReduceSum", &loss, &[&loss_each], &keep),
        (_, None) => b.op_to("ReduceMean", &loss, &[&loss_each], &keep),
        (_, Some(w)) => {
            let total = b.op("ReduceSum", "total", &[&loss_each], &keep);
            let weight_total = b.op("ReduceSum", "weight_total", &[w], &keep);
            b.op_to("Div", &loss, &[&total, &weight_total], &[])
        }
    };
    Ok(Some(b.finish()))
}
