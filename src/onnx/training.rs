//! The optimizers of `ai.onnx.preview.training` (Adagrad, Momentum, Adam) loaded as the
//! element-wise ops their definitions compute, one group of tensors at a time: the learning
//! rate R and the update count T are scalars shared by every group.

use super::expansion::{node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::Result;

/// The nodes that compute an optimizer node; `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    let op = match node.op.strip_prefix("ai.onnx.preview.training.") {
        Some(op @ ("Adagrad" | "Momentum" | "Adam")) => op,
        _ => return Ok(None),
    };
    let bad = |msg: String| node_error(node, msg);
    let float = |name: &str, default: f64| match node.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Float(v)) => Ok(*v),
        Some(_) => Err(bad(format!("{name} must be a float"))),
    };
    // Inputs R, T, then the groups' tensors by kind (X..., G..., and one or two states).
    let states = if op == "Adam" { 2 } else { 1 };
    let kinds = 2 + states;
    let n = node.inputs.len().saturating_sub(2) / kinds;
    if n == 0 || node.inputs.len() != 2 + kinds * n || node.outputs.len() != (1 + states) * n {
        return Err(bad(format!(
            "needs R, T and {kinds} tensors per group with {} outputs per group (has {} inputs, {} outputs)",
            1 + states,
            node.inputs.len(),
            node.outputs.len()
        )));
    }
    let (r, t) = (node.inputs[0].clone(), node.inputs[1].clone());
    let mut b = Builder::new(node, &node.outputs[0]);
    b.check_inputs(node, op, &[("groups", Attr::Int(n as i64))]);
    let norm = float("norm_coefficient", 0.0)?;
    // A scalar attribute in the type of `like`.
    let scalar = |b: &mut Builder, name: &str, v: f64, like: &str| -> Result<String> {
        let c = b.f32_scalar(name, v as f32)?;
        Ok(b.op("CastLike", &format!("{name}_t"), &[&c, like], &[]))
    };
    let tr = b.op("CastLike", "t_as_r", &[&t, &r], &[]);
    let zero_r = scalar(&mut b, "zero", 0.0, &r)?;
    let started = b.op("Greater", "started", &[&tr, &zero_r], &[]);
    // The learning rate for this update (R's type).
    let rate = match op {
        "Adagrad" => {
            let decay = scalar(&mut b, "decay_factor", float("decay_factor", 0.0)?, &r)?;
            let one = scalar(&mut b, "one", 1.0, &r)?;
            let td = b.op("Mul", "t_decay", &[&tr, &decay], &[]);
            let denom = b.op("Add", "rate_denominator", &[&one, &td], &[]);
            b.op("Div", "rate", &[&r, &denom], &[])
        }
        "Adam" => {
            // R sqrt(1 - beta^T) / (1 - alpha^T) once T > 0.
            let one = scalar(&mut b, "one", 1.0, &r)?;
            let alpha = scalar(&mut b, "alpha_r", float("alpha", 0.9)?, &r)?;
            let beta = scalar(&mut b, "beta_r", float("beta", 0.999)?, &r)?;
            let bt = b.op("Pow", "beta_t", &[&beta, &tr], &[]);
            let at = b.op("Pow", "alpha_t", &[&alpha, &tr], &[]);
            let num = b.op("Sub", "one_minus_beta_t", &[&one, &bt], &[]);
            let num = b.op("Sqrt", "sqrt_one_minus_beta_t", &[&num], &[]);
            let den = b.op("Sub", "one_minus_alpha_t", &[&one, &at], &[]);
            let scaled = b.op("Mul", "rate_scaled", &[&r, &num], &[]);
            let adjusted = b.op("Div", "rate_adjusted", &[&scaled, &den], &[]);
            b.op("Where", "rate", &[&started, &adjusted, &r], &[])
        }
        _ => r.clone(),
    };
    for k in 0..n {
        let x = &node.inputs[2 + k];
        let g = &node.inputs[2 + n + k];
        let p = |s: &str| format!("g{k}_{s}");
        let rate = b.op("CastLike", &p("rate"), &[&rate, x], &[]);
        let norm = scalar(&mut b, &p("norm"), norm, x)?;
        let nx = b.op("Mul", &p("norm_x"), &[&norm, x], &[]);
        let greg = b.op("Add", &p("g_regularized"), &[&nx, g], &[]);
        let outs = &node.outputs;
        match op {
            "Adagrad" => {
                let h = &node.inputs[2 + 2 * n + k];
                let sq = b.op("Mul", &p("g_squared"), &[&greg, &greg], &[]);
                let h_new = b.op_to("Add", &outs[n + k], &[h, &sq], &[]);
                let root = b.op("Sqrt", &p("h_sqrt"), &[&h_new], &[]);
                let eps = scalar(&mut b, &p("epsilon"), float("epsilon", 0.0)?, x)?;
                let root = b.op("Add", &p("h_adaptive"), &[&root, &eps], &[]);
                let step = b.op("Mul", &p("rate_g"), &[&rate, &greg], &[]);
                let step = b.op("Div", &p("step"), &[&step, &root], &[]);
                b.op_to("Sub", &outs[k], &[x, &step], &[]);
            }
            "Momentum" => {
                let v = &node.inputs[2 + 2 * n + k];
                let alpha = scalar(&mut b, &p("alpha"), float("alpha", 0.0)?, x)?;
                let beta = scalar(&mut b, &p("beta"), float("beta", 0.0)?, x)?;
                let one = scalar(&mut b, &p("one"), 1.0, x)?;
                // beta from the second update on (T > 0), 1 on the first.
                let beta = b.op("Where", &p("beta_adjusted"), &[&started, &beta, &one], &[]);
                let av = b.op("Mul", &p("alpha_v"), &[&alpha, v], &[]);
                let bg = b.op("Mul", &p("beta_g"), &[&beta, &greg], &[]);
                let v_new = b.op_to("Add", &outs[n + k], &[&av, &bg], &[]);
                let direction = match node.attrs.get("mode") {
                    Some(Attr::String(m)) if m == "nesterov" => {
                        let avn = b.op("Mul", &p("alpha_v_new"), &[&alpha, &v_new], &[]);
                        b.op("Add", &p("direction"), &[&greg, &avn], &[])
                    }
                    Some(Attr::String(m)) if m != "standard" => {
                        return Err(bad(format!(
                            "mode '{}' is not standard or nesterov",
                            m.escape_debug()
                        )))
                    }
                    _ => v_new,
                };
                let step = b.op("Mul", &p("step"), &[&rate, &direction], &[]);
                b.op_to("Sub", &outs[k], &[x, &step], &[]);
            }
            _ => {
                let v = &node.inputs[2 + 2 * n + k];
                let h = &node.inputs[2 + 3 * n + k];
                let (alpha, beta) = (float("alpha", 0.9)?, float("beta", 0.999)?);
                let a = scalar(&mut b, &p("alpha"), alpha, x)?;
                let a1 = scalar(&mut b, &p("one_minus_alpha"), 1.0 - alpha, x)?;
                let bb = scalar(&mut b, &p("beta"), beta, x)?;
                let b1 = scalar(&mut b, &p("one_minus_beta"), 1.0 - beta, x)?;
                let av = b.op("Mul", &p("alpha_v"), &[&a, v], &[]);
                let ag = b.op("Mul", &p("alpha1_g"), &[&a1, &greg], &[]);
                let v_new = b.op_to("Add", &outs[n + k], &[&av, &ag], &[]);
                let sq = b.op("Mul", &p("g_squared"), &[&greg, &greg], &[]);
                let bh = b.op("Mul", &p("beta_h"), &[&bb, h], &[]);
                let bg = b.op("Mul", &p("beta1_g2"), &[&b1, &sq], &[]);
                let h_new = b.op_to("Add", &outs[2 * n + k], &[&bh, &bg], &[]);
                let root = b.op("Sqrt", &p("h_sqrt"), &[&h_new], &[]);
                let eps = scalar(&mut b, &p("epsilon"), float("epsilon", 0.0)?, x)?;
                let root = b.op("Add", &p("h_adaptive"), &[&root, &eps], &[]);
                let ratio = b.op("Div", &p("ratio"), &[&v_new, &root], &[]);
                let step = b.op("Mul", &p("step"), &[&rate, &ratio], &[]);
                let x_new = b.op("Sub", &p("x_new"), &[x, &step], &[]);
                let post = float("norm_coefficient_post", 0.0)?;
                let keep = scalar(&mut b, &p("keep"), 1.0 - post, x)?;
                b.op_to("Mul", &outs[k], &[&keep, &x_new], &[]);
            }
        }
    }
    Ok(Some(b.finish()))
}
