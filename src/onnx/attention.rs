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
    let kt = b.op(
        "Transpose",
        "k_t",
        &[&kx],
        &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let zero = b.f32_scalar("zero", 0.0)?;
    let neg_inf = b.f32_scalar("neg_inf", f32::NEG_INFINITY)?;
    let total = b.dims("total", &kc, 2, Some(3));
    let q_len = b.dims("q_len", &q4, 2, Some(3));
    // What the causal frontier, the padding and the window compare each query's position
    // with: the keys' positions and the queries' offset among them.
    let frontier = if causal || nonpad.is_some() || left.is_some() || right.is_some() {
        let keys = positions(&mut b, "keys", &total)?;
        let per_item = b.i64s("per_item", &[-1, 1, 1, 1])?;
        let nonpad_b = nonpad
            .as_ref()
            .map(|n| b.op("Reshape", "nonpad_b", &[n, &per_item], &[]));
        // Keys before the query block: the past's length, else the cache's valid keys less
        // the queries (per item), else none.
        let offset = match (&past, &nonpad_b) {
            (Some((pk, _)), _) => b.dims("past_len", pk, 2, Some(3)),
            (None, Some(n)) => b.op("Sub", "offset", &[n, &q_len], &[]),
            (None, None) => b.i64s("zero_s", &[0])?,
        };
        Some(Frontier {
            keys,
            offset,
            nonpad: nonpad_b,
            causal,
            left,
            right,
        })
    } else {
        None
    };
    let core = Core {
        kt,
        root,
        vx,
        softcap,
        softmax_dtype,
        zero,
        neg_inf,
        total: total.clone(),
        mask: mask.clone(),
        frontier,
    };
    let qk_out = output(3).map(|out| (out, mode));
    let y4 = if qk_out.is_some() {
        // The scores are an output whole: no bands.
        let rows = core.rows_of(&mut b, "rows", &q_len)?;
        core.record(&mut b, &q4, rows.as_deref(), mask.as_deref(), qk_out)?
    } else {
        // Scores of more than BAND_BYTES are computed a band of query rows at a time.
        let mut plain = b.child("whole");
        let rows = core.rows_of(&mut plain, "rows", &q_len)?;
        let y_whole = core.record(&mut plain, &q4, rows.as_deref(), mask.as_deref(), None)?;
        let whole = plain.into_branch(&mut b, &[], &[&y_whole]);
        let mut banded = b.child("bands");
        let y_bands = core.bands(&mut banded, &q4, &q_len)?;
        let bands = banded.into_branch(&mut b, &[], &[&y_bands]);
        // Few nodes: the condition is planned on every run, decode steps included.
        let dims = b.dims("score_dims", &q4, 0, Some(3));
        let dims = b.op(
            "Concat",
            "score_dims_all",
            &[&dims, &total],
            &[("axis", Attr::Int(0))],
        );
        let cells = b.op(
            "ReduceProd",
            "score_cells",
            &[&dims],
            &[("keepdims", Attr::Int(0))],
        );
        let limit = b.constant(
            "band_cells",
            HostTensor::from_vec(vec![], &[band_bytes() / 4])?,
        );
        let over = b.op("Greater", "scores_in_bands", &[&cells, &limit], &[]);
        b.op(
            "If",
            "y4_whole_or_banded",
            &[&over],
            &[
                ("then_branch", Attr::Graph(Box::new(bands))),
                ("else_branch", Attr::Graph(Box::new(whole))),
            ],
        )
    };
    match heads {
        None => {
            b.op_to("Identity", &y, &[&y4], &[]);
        }
        Some(_) => b.merge_heads(&y4, &y)?,
    }
    Ok(Some(b.finish()))
}

/// The most bytes of scores (counted at 4 bytes each) computed at once: beyond, the queries
/// go through a Scan a band of rows at a time, so a long sequence's attention takes memory
/// for a band's scores, not for all of them (32 heads of 32 768 queries and keys would need
/// 128 GiB in f32).
pub(super) const BAND_BYTES: i64 = 128 << 20;

/// [`BAND_BYTES`], or the environment variable `WGPU_OPS_ATTENTION_BAND_BYTES` where it is a
/// positive number when the model is loaded: the tests take the banded path with small
/// inputs through it.
fn band_bytes() -> i64 {
    std::env::var("WGPU_OPS_ATTENTION_BAND_BYTES")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|&v| v > 0)
        .unwrap_or(BAND_BYTES)
}

/// `0, 1, ..., n - 1` as a 1-D i64 tensor (`n` a 1-element one).
fn positions(b: &mut Builder, what: &str, n: &str) -> Result<String> {
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]);
    let from = b.constant(&format!("{what}_from"), scalar(0)?);
    let step = b.constant(&format!("{what}_step"), scalar(1)?);
    let axis0 = b.i64s(&format!("{what}_axis0"), &[0])?;
    let end = b.op("Squeeze", &format!("{what}_end"), &[n, &axis0], &[]);
    Ok(b.op("Range", what, &[&from, &end, &step], &[]))
}

/// What the causal frontier, the padding and the window read: values of the enclosing graph.
struct Frontier {
    /// The keys' positions, `[keys]`.
    keys: String,
    /// The queries' first position among the keys (`[1]`, or `[batch, 1, 1, 1]` with
    /// padding).
    offset: String,
    /// The valid keys of each batch item, `[batch, 1, 1, 1]`.
    nonpad: Option<String>,
    causal: bool,
    left: Option<i64>,
    right: Option<i64>,
}

/// What the product of the queries with the keys and the values reads from the enclosing
/// graph, by name.
struct Core {
    /// K^T, its heads repeated: `[batch, heads, head size, keys]`.
    kt: String,
    /// The square root of the scale, which Q and K^T are each multiplied by (in the branch
    /// that reads them, so that the product computes it where it reads them).
    root: String,
    /// V, its heads repeated: `[batch, heads, keys, value size]`.
    vx: String,
    softcap: f64,
    softmax_dtype: Option<&'static str>,
    zero: String,
    neg_inf: String,
    /// The keys' count, `[1]`.
    total: String,
    /// The node's mask as given: `[..., queries or 1, keys or fewer]`, bool or a float type.
    mask: Option<String>,
    frontier: Option<Frontier>,
}

impl Core {
    /// The query positions `[n, 1]` of `n` rows from 0 (`q_len`, a 1-element tensor), where a
    /// frontier needs them.
    fn rows_of(&self, b: &mut Builder, what: &str, q_len: &str) -> Result<Option<String>> {
        if self.frontier.is_none() {
            return Ok(None);
        }
        let rows = positions(b, what, q_len)?;
        let axis1 = b.i64s(&format!("{what}_axis1"), &[1])?;
        Ok(Some(b.op(
            "Unsqueeze",
            &format!("{what}_col"),
            &[&rows, &axis1],
            &[],
        )))
    }

    /// `m` (rows of the node's mask) as a bias in f32, padded with -inf to every key.
    fn mask_bias(&self, b: &mut Builder, m: &str) -> Result<String> {
        // A boolean mask is 0 where true and -inf where false, a float one is added as it is.
        // The mask's type is known only when the graph runs: 2 cast to it and back is 1 for
        // bool, 2 for the float types, a constant that the host folds, selecting one reading.
        let two = b.f32_scalar("two", 2.0)?;
        let probe = b.op("CastLike", "mask_probe", &[&two, m], &[]);
        let f32 = || [("to", Attr::String("f32".into()))];
        let probe = b.op("Cast", "mask_probe_f", &[&probe], &f32());
        let is_bool = b.op("Less", "mask_is_bool", &[&probe, &two], &[]);
        let as_bool = b.op(
            "Cast",
            "mask_bool",
            &[m],
            &[("to", Attr::String("bool".into()))],
        );
        let from_bool = b.op(
            "Where",
            "mask_from_bool",
            &[&as_bool, &self.zero, &self.neg_inf],
            &[],
        );
        let from_float = b.op("Cast", "mask_f32", &[m], &f32());
        let m_f = b.op(
            "Where",
            "mask_bias",
            &[&is_bool, &from_bool, &from_float],
            &[],
        );
        let m_len = b.dims("mask_len", m, -1, None);
        let short = b.op("Sub", "mask_short", &[&self.total, &m_len], &[]);
        let zero1 = b.i64s("zero1", &[0])?;
        let pads = b.op(
            "Concat",
            "mask_pads",
            &[&zero1, &short],
            &[("axis", Attr::Int(0))],
        );
        let last = b.i64s("last_axis", &[-1])?;
        Ok(b.op(
            "Pad",
            "mask_padded",
            &[&m_f, &pads, &self.neg_inf, &last],
            &[],
        ))
    }

    /// Records, into `b`, the attention of queries `q` (`[batch, heads, n, head size]`, not
    /// yet scaled) at positions `rows` (`[n, 1]`, where a frontier needs them) with `mask`
    /// (the node's mask's rows for these queries, `[..., n or 1, keys or fewer]`): the
    /// scores, soft-capped, biased, their softmax (a row every key of which is excluded is
    /// zero), and its product with the values. `qk_out`: the node's scores output and its
    /// mode. Returns `[batch, heads, n, value size]`.
    fn record(
        &self,
        b: &mut Builder,
        q: &str,
        rows: Option<&str>,
        mask: Option<&str>,
        qk_out: Option<(String, i64)>,
    ) -> Result<String> {
        let qk_out = |mode: i64| qk_out.as_ref().filter(|(_, m)| *m == mode).map(|(o, _)| o);
        let qs = b.op("Mul", "q_scaled", &[q, &self.root], &[]);
        let ks = b.op("Mul", "k_scaled", &[&self.kt, &self.root], &[]);
        let mut scores = b.op("MatMul", "scores", &[&qs, &ks], &[]);
        if let Some(out) = qk_out(0) {
            b.op_to("Identity", out, &[&scores], &[]);
        }
        if self.softcap > 0.0 {
            let c = b.f32_scalar("softcap", self.softcap as f32)?;
            let c = b.op("CastLike", "softcap_t", &[&c, &scores], &[]);
            let d = b.op("Div", "capped_in", &[&scores, &c], &[]);
            let t = b.op("Tanh", "capped_tanh", &[&d], &[]);
            scores = b.op("Mul", "capped", &[&t, &c], &[]);
        }
        if let Some(out) = qk_out(1) {
            b.op_to("Identity", out, &[&scores], &[]);
        }
        // The bias, in f32: the mask plus -inf where the causal frontier, the padding or the
        // window excludes a key.
        let mut parts: Vec<String> = Vec::new();
        if let Some(m) = mask {
            parts.push(self.mask_bias(b, m)?);
        }
        if let (Some(f), Some(rows)) = (&self.frontier, rows) {
            let position = b.op("Add", "position", &[rows, &f.offset], &[]);
            let keys = f.keys.as_str();
            let mut allowed: Vec<String> = Vec::new();
            if f.causal {
                allowed.push(b.op("LessOrEqual", "causal", &[keys, &position], &[]));
            }
            if let Some(n) = &f.nonpad {
                allowed.push(b.op("Less", "unpadded", &[keys, n], &[]));
            }
            if let Some(l) = f.left {
                let l = b.i64s("left", &[l])?;
                let from = b.op("Sub", "window_from", &[&position, &l], &[]);
                allowed.push(b.op("GreaterOrEqual", "after_left", &[keys, &from], &[]));
            }
            if let Some(r) = f.right {
                let r = b.i64s("right", &[r])?;
                let to = b.op("Add", "window_to", &[&position, &r], &[]);
                allowed.push(b.op("LessOrEqual", "before_right", &[keys, &to], &[]));
            }
            let mut all = allowed[0].clone();
            for (i, a) in allowed[1..].iter().enumerate() {
                all = b.op("And", &format!("allowed{i}"), &[&all, a], &[]);
            }
            parts.push(b.op("Where", "frontier", &[&all, &self.zero, &self.neg_inf], &[]));
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
        if let Some(out) = qk_out(2) {
            b.op_to("Identity", out, &[&scores], &[]);
        }
        let softmax_in = match self.softmax_dtype {
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
        if self.softmax_dtype.is_some() {
            probs = b.op("CastLike", "probs_t", &[&probs, &scores], &[]);
        }
        // A row whose every key is excluded (its bias all -inf) is zero, not NaN.
        if let Some(bias) = &bias {
            let last = b.i64s("row_axis", &[-1])?;
            let row_max = b.op("ReduceMax", "bias_row_max", &[bias, &last], &[]);
            let neg_inf_t = b.op("CastLike", "neg_inf_t", &[&self.neg_inf, bias], &[]);
            let dead = b.op("Equal", "row_masked", &[&row_max, &neg_inf_t], &[]);
            let zero_t = b.op("CastLike", "zero_t", &[&self.zero, &probs], &[]);
            probs = b.op("Where", "probs_safe", &[&dead, &zero_t, &probs], &[]);
        }
        if let Some(out) = qk_out(3) {
            b.op_to("Identity", out, &[&probs], &[]);
        }
        Ok(b.op("MatMul", "y4", &[&probs, &self.vx], &[]))
    }

    /// [`Self::record`] over bands of query rows, into `b`: as many bands as scores of
    /// [`BAND_BYTES`] each need, of equal rows (the queries padded with zero rows to a whole
    /// number of bands, their results cut off after), run as a Scan along the query axis
    /// whose body is one band's attention. The body gathers its rows of the mask (the one row
    /// of a mask that has one), so no tensor of all the queries' scores or mask is made.
    /// `q_len` is the queries' count (`[1]`).
    fn bands(&self, b: &mut Builder, q: &str, q_len: &str) -> Result<String> {
        let cat = || [("axis", Attr::Int(0))];
        // Rows per band: the most whose scores fit BAND_BYTES (at least 1), then evened out
        // over the bands that takes.
        let batch_heads = b.dims_product("batch_heads", q, 0, Some(2));
        let row_cells = b.op("Mul", "row_cells", &[&batch_heads, &self.total], &[]);
        let cell_bytes = b.i64s("cell_bytes", &[4])?;
        let row_bytes = b.op("Mul", "row_bytes", &[&row_cells, &cell_bytes], &[]);
        let limit = b.i64s("limit", &[band_bytes()])?;
        let most = b.op("Div", "most_rows", &[&limit, &row_bytes], &[]);
        let one = b.i64s("one", &[1])?;
        let most = b.op("Max", "most_rows1", &[&most, &one], &[]);
        let ceil_div = |b: &mut Builder, what: &str, n: &str, d: &str| {
            let d1 = b.op("Sub", &format!("{what}_d1"), &[d, &one], &[]);
            let up = b.op("Add", &format!("{what}_up"), &[n, &d1], &[]);
            b.op("Div", what, &[&up, d], &[])
        };
        let count = ceil_div(b, "band_count", q_len, &most);
        let rows = ceil_div(b, "band_rows", q_len, &count);
        let padded = b.op("Mul", "padded_len", &[&count, &rows], &[]);
        let short = b.op("Sub", "pad_rows", &[&padded, q_len], &[]);
        let zero1 = b.i64s("zero1", &[0])?;
        let pads = b.op("Concat", "pads", &[&zero1, &short], &cat());
        // Q [B, H, n, D] -> [B, H, bands, rows, D], scanned along axis 2.
        let axis2 = b.i64s("axis2", &[2])?;
        let q_padded = b.op("Pad", "q_padded", &[q, &pads, "", &axis2], &[]);
        let lead = b.dims("q_lead", q, 0, Some(2));
        let depth = b.dims("q_depth", q, 3, Some(4));
        let q_shape = b.op(
            "Concat",
            "q_bands_shape",
            &[&lead, &count, &rows, &depth],
            &cat(),
        );
        let q_bands = b.op("Reshape", "q_bands", &[&q_padded, &q_shape], &[]);
        let mut scanned = vec![q_bands];
        let mut axes = vec![2];
        let mut body_inputs = vec![b.name("scan_q")];
        // The query positions [bands, rows], scanned along axis 0.
        let scan_positions = self.frontier.is_some() || self.mask.is_some();
        if scan_positions {
            let all = positions(b, "positions", &padded)?;
            let shape = b.op("Concat", "positions_shape", &[&count, &rows], &cat());
            scanned.push(b.op("Reshape", "position_bands", &[&all, &shape], &[]));
            axes.push(0);
            body_inputs.push(b.name("scan_positions"));
        }
        // The mask as [..., rows, keys] (a 1-D one as one row), and its last row: a band's
        // rows past it read it (the one row of a mask that has one; a padded query's row,
        // whose result is cut off).
        let mask_rows = match &self.mask {
            Some(m) => {
                let lead = b.dims("mask_lead", m, 0, Some(-2));
                let q_rows = b.dims("mask_query_dims", m, -2, Some(-1));
                let q_rows = b.op("ReduceProd", "mask_rows", &[&q_rows], &[]);
                let keys = b.dims("mask_keys", m, -1, None);
                let shape = b.op("Concat", "mask_shape", &[&lead, &q_rows, &keys], &cat());
                let m2 = b.op("Reshape", "mask_2d", &[m, &shape], &[]);
                let one = b.i64s("mask_row_one", &[1])?;
                Some((m2, b.op("Sub", "mask_last_row", &[&q_rows, &one], &[])))
            }
            None => None,
        };
        let mut body = b.child("band");
        let band_positions = scan_positions.then(|| body_inputs[1].clone());
        let band_rows = match (&self.frontier, &band_positions) {
            (Some(_), Some(p)) => {
                let axis1 = body.i64s("positions_axis1", &[1])?;
                Some(body.op("Unsqueeze", "rows_col", &[p, &axis1], &[]))
            }
            _ => None,
        };
        let band_mask = match (&mask_rows, &band_positions) {
            (Some((m, last)), Some(p)) => {
                let at = body.op("Min", "mask_row", &[p, last], &[]);
                Some(body.op("Gather", "mask_rows", &[m, &at], &[("axis", Attr::Int(-2))]))
            }
            _ => None,
        };
        let y_band = self.record(
            &mut body,
            &body_inputs[0],
            band_rows.as_deref(),
            band_mask.as_deref(),
            None,
        )?;
        let inputs: Vec<&str> = body_inputs.iter().map(String::as_str).collect();
        let body = body.into_branch(b, &inputs, &[&y_band]);
        let scanned_refs: Vec<&str> = scanned.iter().map(String::as_str).collect();
        let y_bands = b.op(
            "Scan",
            "y_bands",
            &scanned_refs,
            &[
                ("body", Attr::Graph(Box::new(body))),
                ("num_scan_inputs", Attr::Int(scanned.len() as i64)),
                ("scan_input_axes", Attr::Ints(axes)),
                ("scan_output_axes", Attr::Ints(vec![2])),
            ],
        );
        // [B, H, bands, rows, Dv] -> [B, H, bands * rows, Dv] -> the first n rows.
        let y_lead = b.dims("y_lead", &y_bands, 0, Some(2));
        let y_depth = b.dims("y_depth", &y_bands, 4, Some(5));
        let y_shape = b.op("Concat", "y_shape", &[&y_lead, &padded, &y_depth], &cat());
        let y_rows = b.op("Reshape", "y_rows", &[&y_bands, &y_shape], &[]);
        Ok(b.op("OnnxSlice", "y_cut", &[&y_rows, &zero1, q_len, &axis2], &[]))
    }
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
