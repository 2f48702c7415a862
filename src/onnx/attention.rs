//! ONNX `Attention` (opsets 23 to 25) loaded as the graph of ops it is defined by: heads split
//! from 3-D inputs, the key and value caches concatenated, grouped heads repeated, the scores
//! scaled, soft-capped and biased by the mask, the causal frontier, the padding and the
//! sliding window, a softmax whose fully masked rows are zero, and the product with the values.
//! The order of the arithmetic is the specification's (Q and K each scaled by the square root
//! of the scale, the bias built in f32 and cast to the scores' type), so the results round as
//! its reference does.

use super::expansion::{int_attr, node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::{HostTensor, Result};

/// The nodes that compute an `Attention` node, with the constants they read; `None` for
/// other ops. Rank-3 inputs are told by `q_num_heads` and `kv_num_heads`, which the
/// specification requires for them and only for them.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    if node.op != "Attention" {
        return Ok(None);
    }
    let bad = |msg: String| node_error(node, msg);
    let int = |name: &str| int_attr(node, name);
    let float = |name: &str| match node.attrs.get(name) {
        None => Ok(None),
        Some(Attr::Float(v)) => Ok(Some(*v)),
        Some(_) => Err(bad(format!("{name} must be a float"))),
    };
    let heads = match (int("q_num_heads")?, int("kv_num_heads")?) {
        (None, None) => None,
        (Some(q), Some(kv)) if q > 0 && kv > 0 && q % kv == 0 => Some((q, kv)),
        _ => {
            return Err(bad(
                "needs q_num_heads and kv_num_heads together, positive, q_num_heads a multiple of kv_num_heads".into(),
            ))
        }
    };
    let causal = int("is_causal")?.unwrap_or(0) != 0;
    let mode = int("qk_matmul_output_mode")?.unwrap_or(0);
    if !(0..=3).contains(&mode) {
        return Err(bad(format!("qk_matmul_output_mode {mode} is not 0 to 3")));
    }
    let scale = float("scale")?;
    let softcap = float("softcap")?.unwrap_or(0.0);
    let softmax_dtype = match int("softmax_precision")? {
        None => None,
        Some(1) => Some("f32"),
        Some(10) => Some("f16"),
        Some(11) => Some("f64"),
        Some(16) => Some("bf16"),
        Some(other) => {
            return Err(bad(format!(
            "softmax_precision {other} is not 1, 10, 11 or 16 (float, float16, double, bfloat16)"
        )))
        }
    };
    let window = |name: &str| -> Result<Option<i64>> {
        match int(name)?.unwrap_or(-1) {
            -1 => Ok(None),
            w if w >= 0 => Ok(Some(w)),
            w => Err(bad(format!("{name} {w} is below -1"))),
        }
    };
    let (left, right) = (window("left_window_size")?, window("right_window_size")?);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let output = |k: usize| node.outputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(q), Some(k), Some(v)) = (input(0), input(1), input(2)) else {
        return Err(bad("needs Q, K and V".into()));
    };
    let Some(y) = output(0) else {
        return Err(bad("needs the output Y".into()));
    };
    let (mask, nonpad) = (input(3), input(6));
    let past = match (input(4), input(5)) {
        (None, None) => None,
        (Some(k), Some(v)) => Some((k, v)),
        _ => return Err(bad("takes past_key and past_value together".into())),
    };

    let mut b = Builder::new(node, &y);
    b.check_inputs(node, &node.op, &[]);
    let (q4, k4, v4) = match heads {
        Some((qh, kvh)) => (
            b.split_heads(&q, qh, "q")?,
            b.split_heads(&k, kvh, "k")?,
            b.split_heads(&v, kvh, "v")?,
        ),
        None => (q, k, v),
    };
    // The caches: past then present keys and values along the sequence.
    let (kc, vc) = match &past {
        Some((pk, pv)) => (
            b.op("Concat", "k_all", &[pk, &k4], &[("axis", Attr::Int(2))]),
            b.op("Concat", "v_all", &[pv, &v4], &[("axis", Attr::Int(2))]),
        ),
        None => (k4, v4),
    };
    if let Some(out) = output(1) {
        b.op_to("Identity", &out, &[&kc], &[]);
    }
    if let Some(out) = output(2) {
        b.op_to("Identity", &out, &[&vc], &[]);
    }
    // Grouped heads: each key and value head serves q_heads / kv_heads query heads in a row.
    let q_heads = b.dims("q_heads", &q4, 1, Some(2));
    let kv_heads = b.dims("kv_heads", &kc, 1, Some(2));
    let group = b.op("Div", "group", &[&q_heads, &kv_heads], &[]);
    let ones2 = b.i64s("ones2", &[1, 1])?;
    let repeat = b.op(
        "Concat",
        "repeat",
        &[&ones2, &group, &ones2],
        &[("axis", Attr::Int(0))],
    );
    let axis2 = b.i64s("axis2", &[2])?;
    let batch_heads = b.dims("batch_heads", &q4, 0, Some(2));
    let repeat_heads = |b: &mut Builder, x: &str, what: &str| {
        let u = b.op("Unsqueeze", &format!("{what}_u"), &[x, &axis2], &[]);
        let e = b.op("Expand", &format!("{what}_e"), &[&u, &repeat], &[]);
        let tail = b.dims(&format!("{what}_tail"), x, 2, Some(4));
        let shape = b.op(
            "Concat",
            &format!("{what}_shape"),
            &[&batch_heads, &tail],
            &[("axis", Attr::Int(0))],
        );
        b.op("Reshape", &format!("{what}_x"), &[&e, &shape], &[])
    };
    let kx = repeat_heads(&mut b, &kc, "k");
    let vx = repeat_heads(&mut b, &vc, "v");

    // Q and K^T each times sqrt(scale), scale defaulting to 1 / sqrt(head size), in f32.
    let scale = match scale {
        Some(s) => b.f32_scalar("scale", s as f32)?,
        None => {
            let d = b.dims("head_size", &q4, 3, Some(4));
            let d = b.op(
                "Cast",
                "head_size_f",
                &[&d],
                &[("to", Attr::String("f32".into()))],
            );
            let root = b.op("Sqrt", "root_head_size", &[&d], &[]);
            let one = b.f32_scalar("one", 1.0)?;
            b.op("Div", "default_scale", &[&one, &root], &[])
        }
    };
    let root = b.op("Sqrt", "root_scale", &[&scale], &[]);
    let root = b.op("CastLike", "root_scale_t", &[&root, &q4], &[]);
    let qs = b.op("Mul", "q_scaled", &[&q4, &root], &[]);
    let kt = b.op(
        "Transpose",
        "k_t",
        &[&kx],
        &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let ks = b.op("Mul", "k_scaled", &[&kt, &root], &[]);
    let mut scores = b.op("MatMul", "scores", &[&qs, &ks], &[]);
    let qk_out = output(3);
    if let (Some(out), 0) = (&qk_out, mode) {
        b.op_to("Identity", out, &[&scores], &[]);
    }
    if softcap > 0.0 {
        let c = b.f32_scalar("softcap", softcap as f32)?;
        let c = b.op("CastLike", "softcap_t", &[&c, &scores], &[]);
        let d = b.op("Div", "capped_in", &[&scores, &c], &[]);
        let t = b.op("Tanh", "capped_tanh", &[&d], &[]);
        scores = b.op("Mul", "capped", &[&t, &c], &[]);
    }
    if let (Some(out), 1) = (&qk_out, mode) {
        b.op_to("Identity", out, &[&scores], &[]);
    }

    // The bias, in f32: the mask (a boolean one as 0 or -inf), padded with -inf to every key,
    // plus -inf where the causal frontier, the padding or the window excludes a key.
    let zero = b.f32_scalar("zero", 0.0)?;
    let neg_inf = b.f32_scalar("neg_inf", f32::NEG_INFINITY)?;
    let mut parts = Vec::new();
    let total = b.dims("total", &kc, 2, Some(3));
    if let Some(m) = &mask {
        // A boolean mask is 0 where true and -inf where false, a float one is added as it is.
        // The mask's type is known only when the graph runs: 2 cast to it and back is 1 for
        // bool, 2 for the float types, a constant that the host folds, selecting one reading.
        let two = b.f32_scalar("two", 2.0)?;
        let probe = b.op("CastLike", "mask_probe", &[&two, m], &[]);
        let probe = b.op(
            "Cast",
            "mask_probe_f",
            &[&probe],
            &[("to", Attr::String("f32".into()))],
        );
        let is_bool = b.op("Less", "mask_is_bool", &[&probe, &two], &[]);
        let as_bool = b.op(
            "Cast",
            "mask_bool",
            &[m],
            &[("to", Attr::String("bool".into()))],
        );
        let from_bool = b.op("Where", "mask_from_bool", &[&as_bool, &zero, &neg_inf], &[]);
        let from_float = b.op(
            "Cast",
            "mask_f32",
            &[m],
            &[("to", Attr::String("f32".into()))],
        );
        let m_f = b.op(
            "Where",
            "mask_bias",
            &[&is_bool, &from_bool, &from_float],
            &[],
        );
        let m_len = b.dims("mask_len", m, -1, None);
        let short = b.op("Sub", "mask_short", &[&total, &m_len], &[]);
        let zero1 = b.i64s("zero1", &[0])?;
        let pads = b.op(
            "Concat",
            "mask_pads",
            &[&zero1, &short],
            &[("axis", Attr::Int(0))],
        );
        let last = b.i64s("last_axis", &[-1])?;
        parts.push(b.op("Pad", "mask_padded", &[&m_f, &pads, &neg_inf, &last], &[]));
    }
    if causal || nonpad.is_some() || left.is_some() || right.is_some() {
        let q_len = b.dims("q_len", &q4, 2, Some(3));
        let z = b.i64s("zero_s", &[0])?;
        let one = b.i64s("one_s", &[1])?;
        let squeeze0 = b.i64s("axis0", &[0])?;
        let q_len0 = b.op("Squeeze", "q_len0", &[&q_len, &squeeze0], &[]);
        let total0 = b.op("Squeeze", "total0", &[&total, &squeeze0], &[]);
        let z0 = b.op("Squeeze", "zero0", &[&z, &squeeze0], &[]);
        let one0 = b.op("Squeeze", "one0", &[&one, &squeeze0], &[]);
        let rows = b.op("Range", "rows", &[&z0, &q_len0, &one0], &[]);
        let axis1 = b.i64s("axis1", &[1])?;
        let rows = b.op("Unsqueeze", "rows_col", &[&rows, &axis1], &[]);
        let keys = b.op("Range", "keys", &[&z0, &total0, &one0], &[]);
        let per_item = b.i64s("per_item", &[-1, 1, 1, 1])?;
        let nonpad_b = nonpad
            .as_ref()
            .map(|n| b.op("Reshape", "nonpad_b", &[n, &per_item], &[]));
        // Keys before the query block: the past's length, else the cache's valid keys less
        // the queries (per item), else none.
        let offset = match (&past, &nonpad_b) {
            (Some((pk, _)), _) => b.dims("past_len", pk, 2, Some(3)),
            (None, Some(n)) => b.op("Sub", "offset", &[n, &q_len], &[]),
            (None, None) => z.clone(),
        };
        let position = b.op("Add", "position", &[&rows, &offset], &[]);
        let mut allowed: Vec<String> = Vec::new();
        if causal {
            allowed.push(b.op("LessOrEqual", "causal", &[&keys, &position], &[]));
        }
        if let Some(n) = &nonpad_b {
            allowed.push(b.op("Less", "unpadded", &[&keys, n], &[]));
        }
        if let Some(l) = left {
            let l = b.i64s("left", &[l])?;
            let from = b.op("Sub", "window_from", &[&position, &l], &[]);
            allowed.push(b.op("GreaterOrEqual", "after_left", &[&keys, &from], &[]));
        }
        if let Some(r) = right {
            let r = b.i64s("right", &[r])?;
            let to = b.op("Add", "window_to", &[&position, &r], &[]);
            allowed.push(b.op("LessOrEqual", "before_right", &[&keys, &to], &[]));
        }
        let mut all = allowed[0].clone();
        for (i, a) in allowed[1..].iter().enumerate() {
            all = b.op("And", &format!("allowed{i}"), &[&all, a], &[]);
        }
        parts.push(b.op("Where", "frontier", &[&all, &zero, &neg_inf], &[]));
    }
    let bias = match parts.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        [a, c] => Some(b.op("Add", "bias_f32", &[a, c], &[])),
        _ => unreachable!("at most the mask and the frontier"),
    };
    let bias = bias.map(|bias| b.op("CastLike", "bias", &[&bias, &scores], &[]));
    if let Some(bias) = &bias {
        scores = b.op("Add", "biased", &[&scores, bias], &[]);
    }
    if let (Some(out), 2) = (&qk_out, mode) {
        b.op_to("Identity", out, &[&scores], &[]);
    }
    let softmax_in = match softmax_dtype {
        Some(d) => b.op(
            "Cast",
            "softmax_in",
            &[&scores],
            &[("to", Attr::String(d.into()))],
        ),
        None => scores.clone(),
    };
    let mut probs = b.op(
        "Softmax",
        "softmax",
        &[&softmax_in],
        &[("axis", Attr::Int(-1))],
    );
    if softmax_dtype.is_some() {
        probs = b.op("CastLike", "probs_t", &[&probs, &scores], &[]);
    }
    // A row whose every key is excluded (its bias all -inf) is zero, not NaN.
    if let Some(bias) = &bias {
        let last = b.i64s("row_axis", &[-1])?;
        let row_max = b.op("ReduceMax", "bias_row_max", &[bias, &last], &[]);
        let neg_inf_t = b.op("CastLike", "neg_inf_t", &[&neg_inf, bias], &[]);
        let dead = b.op("Equal", "row_masked", &[&row_max, &neg_inf_t], &[]);
        let zero_t = b.op("CastLike", "zero_t", &[&zero, &probs], &[]);
        probs = b.op("Where", "probs_safe", &[&dead, &zero_t, &probs], &[]);
    }
    if let (Some(out), 3) = (&qk_out, mode) {
        b.op_to("Identity", out, &[&probs], &[]);
    }
    match heads {
        None => {
            b.op_to("MatMul", &y, &[&probs, &vx], &[]);
        }
        Some(_) => {
            let y4 = b.op("MatMul", "y4", &[&probs, &vx], &[]);
            b.merge_heads(&y4, &y)?;
        }
    }
    Ok(Some(b.finish()))
}

/// ai.onnx.preview FlexAttention-1 as the ops of its definition: Q and K each scaled by the
/// square root of `scale` (1/sqrt(head size) by default) in their type, Q K^T, K and V heads
/// repeated for grouped queries, the scores cast to `softmax_precision` (f32, or f64 for f64
/// inputs: the loader names the inputs' type when it knows it), `score_mod`, Softmax over the
/// keys, `prob_mod`, the product with V in that precision, cast back to Q's type. The modifier
/// graphs run as the one branch of an If whose condition is a constant.
pub(super) fn flex_attention(node: &Node) -> Result<Option<Expansion>> {
    if node.op != "ai.onnx.preview.FlexAttention" {
        return Ok(None);
    }
    let bad = |msg: &str| node_error(node, msg);
    let input = |k: usize| node.inputs.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(q), Some(k), Some(v)) = (input(0), input(1), input(2)) else {
        return Err(bad("needs Q, K and V"));
    };
    if node.inputs.len() > 3 {
        return Err(bad("takes three inputs (Q, K, V)"));
    }
    let Some(y) = node.outputs.first().filter(|n| !n.is_empty()).cloned() else {
        return Err(bad("needs an output"));
    };
    let precision = match int_attr(node, "softmax_precision")? {
        None | Some(1) => "f32",
        Some(11) => "f64",
        Some(10) => "f16",
        Some(16) => "bf16",
        Some(p) => {
            return Err(bad(&format!(
                "softmax_precision {p} is not a float type (1, 10, 11 or 16)"
            )))
        }
    };
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, "FlexAttention", &[]);
    let to = |d: &str| ("to", Attr::String(d.into()));
    // The scale's square root, in Q's type, on Q and on K.
    let scale = match node.attrs.get("scale") {
        None => {
            let head = b.dims("head_size", &q, 3, Some(4));
            let head = b.op("Cast", "head_size_f32", &[&head], &[to("f32")]);
            let root = b.op("Sqrt", "sqrt_head_size", &[&head], &[]);
            b.op("Reciprocal", "scale", &[&root], &[])
        }
        Some(Attr::Float(s)) => b.f32_scalar("scale", *s as f32)?,
        Some(_) => return Err(bad("scale must be a float")),
    };
    let root = b.op("Sqrt", "scale_sqrt_f32", &[&scale], &[]);
    let root = b.op("CastLike", "scale_sqrt", &[&root, &q], &[]);
    // K and V heads repeated for the query heads sharing them: [B, Hkv, S, D] ->
    // [B, Hkv, Hq / Hkv, S, D] -> [B, Hq, S, D].
    let batch = b.dims("batch", &q, 0, Some(1));
    let q_heads = b.dims("q_heads", &q, 1, Some(2));
    let kv_heads = b.dims("kv_heads", &k, 1, Some(2));
    let repeat = b.op("Div", "kv_repeat", &[&q_heads, &kv_heads], &[]);
    let axis2 = b.i64s("axis2", &[2])?;
    let mut aligned = Vec::new();
    for (x, what) in [(&k, "k"), (&v, "v")] {
        let len = b.dims(&format!("{what}_len"), x, 2, Some(3));
        let size = b.dims(&format!("{what}_head_size"), x, 3, Some(4));
        let wide = b.op(
            "Unsqueeze",
            &format!("{what}_unsqueezed"),
            &[x, &axis2],
            &[],
        );
        let cat = [("axis", Attr::Int(0))];
        let shape = b.op(
            "Concat",
            &format!("{what}_expand_shape"),
            &[&batch, &kv_heads, &repeat, &len, &size],
            &cat,
        );
        let wide = b.op("Expand", &format!("{what}_expanded"), &[&wide, &shape], &[]);
        let shape = b.op(
            "Concat",
            &format!("{what}_aligned_shape"),
            &[&batch, &q_heads, &len, &size],
            &cat,
        );
        aligned.push(b.op("Reshape", &format!("{what}_aligned"), &[&wide, &shape], &[]));
    }
    let qs = b.op("Mul", "q_scaled", &[&q, &root], &[]);
    let ks = b.op("Mul", "k_scaled", &[&aligned[0], &root], &[]);
    let kt = b.op(
        "Transpose",
        "k_transposed",
        &[&ks],
        &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let scores = b.op("MatMul", "scores", &[&qs, &kt], &[]);
    let scores = b.op("Cast", "scores_cast", &[&scores], &[to(precision)]);
    let scores = modifier(&mut b, node, "score_mod", &scores)?;
    let probs = b.op("Softmax", "probs", &[&scores], &[("axis", Attr::Int(3))]);
    let probs = modifier(&mut b, node, "prob_mod", &probs)?;
    let vp = b.op("Cast", "v_cast", &[&aligned[1]], &[to(precision)]);
    let out = b.op("MatMul", "y_precision", &[&probs, &vp], &[]);
    b.op_to("CastLike", &y, &[&out, &q], &[]);
    Ok(Some(b.finish()))
}

/// Graph attribute `attr` of `node` (one input, one output) applied to `x`: the branch of an
/// If on a constant condition, its input read from `x` (none: `x` itself).
fn modifier(b: &mut Builder, node: &Node, attr: &str, x: &str) -> Result<String> {
    let graph = match node.attrs.get(attr) {
        None => return Ok(x.to_string()),
        Some(Attr::Graph(g)) => g,
        Some(_) => return Err(node_error(node, format!("{attr} must be a graph"))),
    };
    if graph.inputs.len() != 1 || graph.outputs.len() != 1 {
        return Err(node_error(
            node,
            format!(
                "{attr} must take one input and give one output (it has {} and {})",
                graph.inputs.len(),
                graph.outputs.len()
            ),
        ));
    }
    let mut body = (**graph).clone();
    let formal = body.inputs.remove(0).name;
    let bound = b.op("Identity", &format!("{attr}_input"), &[x], &[]);
    super::rename_free(&mut body, &|n: &str| {
        if n == formal {
            bound.clone()
        } else {
            n.to_string()
        }
    });
    let cond = b.constant(
        &format!("{attr}_always"),
        HostTensor::from_vec(vec![], &[true])?,
    );
    Ok(b.op(
        "If",
        &format!("{attr}_output"),
        &[&cond],
        &[
            ("then_branch", Attr::Graph(Box::new(body.clone()))),
            ("else_branch", Attr::Graph(Box::new(body))),
        ],
    ))
}
