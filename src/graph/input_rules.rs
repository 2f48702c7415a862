//! The rules that ops defined by other ops (the ONNX losses, RoiAlign, the recurrent layers,
//! Attention, ...) set on their inputs' shapes, checked by the node `CheckInputs` that the
//! ONNX loader puts before such an op's expansion. Without it a broken rule surfaces as the
//! error of some inner node (a `Gather` of the expansion, named by its inner name), or not at
//! all where the inner ops happen to accept the shapes (a loss over fewer targets than
//! samples computes over the first ones). With it the error names the op, the input and the
//! rule, before any work.

use super::{Attr, Node};
use crate::{DType, Error, HostTensor, Result};

/// One input of the checked op: its dtype, its shape and, where known on the host (a
/// constant or a graph input), its value.
pub(crate) struct Input<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub value: Option<&'a HostTensor>,
}

/// The attributes `CheckInputs` takes: `op`, and those of the checked ops that their rules
/// read (`directions`, `gates` and `groups` are counts the loader gives).
pub(crate) const ATTRS: &[&str] = &[
    "op",
    "ignore_index",
    "axis",
    "axes",
    "block_size",
    "num_heads",
    "rotary_embedding_dim",
    "q_num_heads",
    "kv_num_heads",
    "mode",
    "kernel_shape",
    "strides",
    "pads",
    "dilations",
    "group",
    "offset_group",
    "hidden_size",
    "directions",
    "gates",
    "layout",
    "groups",
    "features",
    "min_features",
    "cats_int64s",
    "zeros",
];

/// The ops whose rules on values read on the GPU a `CheckValues` node checks, by name (an
/// error names its op by a static string).
const VALUE_CHECKED_OPS: &[&str] = &[
    "TensorScatter",
    "RotaryEmbedding",
    "OneHotEncoder",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "MaxUnpool",
];

/// A `CheckValues` node's rule: the values of `op`'s input `input` must lie in `low..=high`
/// (the node's first two bounds) or be one of its kept values; `message` is the error of one
/// that does not (`{i}`: its position, `{v}`: the value; all of the node's bounds, known while
/// planning, already put in for `{b0}`, `{b1}`, ...).
pub(crate) struct ValueCheck {
    pub op: &'static str,
    pub input: String,
    pub message: String,
    pub low: i64,
    pub high: i64,
}

impl ValueCheck {
    /// The rule of `node` (`CheckValues`), from its attributes `op`, `input` and `message`,
    /// and the values of its input `bounds` (`None`: not known while planning).
    pub(crate) fn of(node: &Node, bounds: Option<&HostTensor>) -> Result<ValueCheck> {
        let name = node.name.escape_debug();
        let text = |key: &str| match node.attrs.get(key) {
            Some(Attr::String(v)) => Ok(v.clone()),
            _ => Err(Error::Graph(format!(
                "node '{name}': CheckValues needs the attribute {key} (a string)"
            ))),
        };
        let op = text("op")?;
        let Some(op) = VALUE_CHECKED_OPS.iter().find(|o| **o == op) else {
            return Err(Error::Graph(format!(
                "node '{name}': CheckValues checks the values of {}, not of '{}'",
                VALUE_CHECKED_OPS.join(", "),
                op.escape_debug()
            )));
        };
        let bounds = match bounds {
            Some(b) if matches!(b.dtype, DType::I32 | DType::I64) && b.numel() >= 2 => {
                crate::reference::cast_host(b, DType::I64)?.to_vec::<i64>()?
            }
            Some(b) => {
                return Err(Error::Graph(format!(
                    "node '{name}': CheckValues' bounds must be integers, low and high first, not {} {:?}",
                    b.dtype, b.shape
                )))
            }
            None => {
                return Err(Error::Graph(format!(
                    "node '{name}': CheckValues' bounds are computed on the GPU; they must be known while planning"
                )))
            }
        };
        let mut message = text("message")?;
        for (k, v) in bounds.iter().enumerate() {
            message = message.replace(&format!("{{b{k}}}"), &v.to_string());
        }
        Ok(ValueCheck {
            op,
            input: text("input")?,
            message,
            low: bounds[0],
            high: bounds[1],
        })
    }

    /// The check on the host of `values` (as i64, floats truncated) with the kept values
    /// `allowed`.
    pub(crate) fn check(&self, values: &HostTensor, allowed: Option<&HostTensor>) -> Result<()> {
        let ints = |t: &HostTensor| -> Result<Vec<i64>> {
            match t.dtype {
                DType::Bool => Err(Error::Graph(format!(
                    "internal: {}'s check of {} takes numbers, not bools",
                    self.op, self.input
                ))),
                // As the GPU check reads them: cast to i64 (floats truncated).
                _ => crate::reference::cast_host(t, DType::I64)?.to_vec(),
            }
        };
        let values = ints(values)?;
        let mut allowed = allowed.map(ints).transpose()?.unwrap_or_default();
        allowed.sort_unstable();
        let kept = |v: &i64| (self.low..=self.high).contains(v) || allowed.binary_search(v).is_ok();
        match values.iter().position(|v| !kept(v)) {
            Some(i) => Err(Error::invalid(
                self.op,
                self.input.as_str(),
                crate::recorder::value_message(&self.message, i, values[i]),
            )),
            None => Ok(()),
        }
    }
}

/// Checks `inputs` (in the checked op's order, `None` where absent or not a tensor) against
/// the rules of the op that `node`'s attribute `op` names.
pub(crate) fn check(node: &Node, inputs: &[Option<Input<'_>>]) -> Result<()> {
    let rules = Rules { node, inputs };
    let op = match node.attrs.get("op") {
        Some(Attr::String(op)) => op.as_str(),
        _ => {
            return Err(Error::Graph(format!(
                "node '{}': CheckInputs needs the attribute op (a string)",
                node.name
            )))
        }
    };
    match op {
        "SoftmaxCrossEntropyLoss" => rules.loss("SoftmaxCrossEntropyLoss"),
        "NegativeLogLikelihoodLoss" => rules.loss("NegativeLogLikelihoodLoss"),
        "RoiAlign" => rules.roi_align(),
        "TensorScatter" => rules.tensor_scatter(),
        "MaxUnpool" => rules.max_unpool(),
        "DeformConv" => rules.deform_conv(),
        "RotaryEmbedding" => rules.rotary_embedding(),
        "Attention" => rules.attention("Attention"),
        "FlexAttention" => rules.attention("FlexAttention"),
        "QuantizeLinear" => rules.quantize("QuantizeLinear"),
        "DequantizeLinear" => rules.quantize("DequantizeLinear"),
        "RNN" => rules.recurrent("RNN"),
        "GRU" => rules.recurrent("GRU"),
        "LSTM" => rules.recurrent("LSTM"),
        "LpNormalization" => rules.axes("LpNormalization", "axis"),
        "MeanVarianceNormalization" => rules.axes("MeanVarianceNormalization", "axes"),
        "Adagrad" => rules.optimizer("Adagrad", &["X", "G", "H"]),
        "Momentum" => rules.optimizer("Momentum", &["X", "G", "V"]),
        "Adam" => rules.optimizer("Adam", &["X", "G", "V", "H"]),
        "OneHotEncoder" => rules.one_hot_encoder(),
        // As onnxruntime: rows of features, or one row (the spec's forms).
        "Normalizer" => match rules.get(0) {
            Some(x) if x.shape.len() > 2 => Err(Error::invalid(
                "Normalizer",
                "X",
                format!("X has shape {:?}; Normalizer takes [N, C] or [C]", x.shape),
            )),
            _ => Ok(()),
        },
        // As onnxruntime: a row of tokens or rows of them (the spec's forms).
        "TfIdfVectorizer" => match rules.get(0) {
            Some(x) if !(1..=2).contains(&x.shape.len()) => Err(Error::invalid(
                "TfIdfVectorizer",
                "X",
                format!(
                    "X has shape {:?}; TfIdfVectorizer takes [C] or [N, C]",
                    x.shape
                ),
            )),
            _ => Ok(()),
        },
        "MatMulInteger" => {
            rules.integer_product("MatMulInteger", [0, 1], [None, Some(2), None, Some(3)])
        }
        "QLinearMatMul" => {
            rules.integer_product(
                "QLinearMatMul",
                [0, 3],
                [Some(1), Some(2), Some(4), Some(5)],
            )?;
            rules.one_value("QLinearMatMul", &[(6, "y_scale"), (7, "y_zero_point")])
        }
        "ConvInteger" => rules.integer_conv("ConvInteger", [0, 1], [None, Some(2), None, Some(3)]),
        "QLinearConv" => {
            rules.integer_conv("QLinearConv", [0, 3], [Some(1), Some(2), Some(4), Some(5)])?;
            rules.one_value("QLinearConv", &[(6, "y_scale"), (7, "y_zero_point")])?;
            match rules.get(3) {
                Some(w) if !w.shape.is_empty() => rules.shape_is(
                    "QLinearConv",
                    8,
                    "B",
                    &[w.shape[0]],
                    ", one bias per output channel",
                ),
                _ => Ok(()),
            }
        }
        "TreeEnsembleRegressor" => rules.min_features("TreeEnsembleRegressor"),
        "TreeEnsembleClassifier" => rules.min_features("TreeEnsembleClassifier"),
        "TreeEnsemble" => rules.min_features("TreeEnsemble"),
        other => match ML_OPS.iter().find(|o| **o == other) {
            Some(op) => rules.features(op),
            None => Err(Error::Graph(format!(
                "node '{}': CheckInputs has no rules for op '{}'",
                node.name,
                other.escape_debug()
            ))),
        },
    }
}

/// The inputs of `op` (by index) whose values its rules check where they are known while
/// planning; the other inputs' rules read shapes and dtypes only.
pub(crate) fn value_checked_inputs(op: &str) -> &'static [usize] {
    match op {
        "SoftmaxCrossEntropyLoss" | "NegativeLogLikelihoodLoss" => &[1],
        "RoiAlign" | "TensorScatter" => &[2],
        "RotaryEmbedding" => &[3],
        "OneHotEncoder" => &[0],
        _ => &[],
    }
}

/// The ONNX-ML ops whose input X holds `features` values per row (its last axis).
const ML_OPS: &[&str] = &[
    "Scaler",
    "Imputer",
    "LinearRegressor",
    "LinearClassifier",
    "SVMRegressor",
    "SVMClassifier",
];

struct Rules<'a> {
    node: &'a Node,
    inputs: &'a [Option<Input<'a>>],
}

/// `value`'s elements as integers (any shape), `None` where not known on the host.
fn values(input: &Input<'_>, op: &'static str, name: &str) -> Result<Option<Vec<i64>>> {
    let Some(v) = input.value else {
        return Ok(None);
    };
    if v.shape.len() == 1 {
        return v.to_indices(op, name).map(Some);
    }
    let flat = HostTensor {
        shape: vec![v.numel()],
        ..v.clone()
    };
    flat.to_indices(op, name).map(Some)
}

impl Rules<'_> {
    fn get(&self, k: usize) -> Option<&Input<'_>> {
        self.inputs.get(k).and_then(Option::as_ref)
    }

    fn int(&self, name: &str) -> Option<i64> {
        match self.node.attrs.get(name) {
            Some(Attr::Int(v)) => Some(*v),
            _ => None,
        }
    }

    fn ints(&self, name: &str) -> Option<&[i64]> {
        match self.node.attrs.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// Fails unless input `k` (called `name`) has shape `want`; `why` says where `want` comes
    /// from.
    fn shape_is(
        &self,
        op: &'static str,
        k: usize,
        name: &str,
        want: &[usize],
        why: &str,
    ) -> Result<()> {
        match self.get(k) {
            Some(i) if i.shape != want => Err(Error::invalid(
                op,
                name,
                format!("{name} has shape {:?}; it must be {want:?}{why}", i.shape),
            )),
            _ => Ok(()),
        }
    }

    /// Input `k`'s shape where it has `rank` axes; an error naming `form` otherwise.
    fn rank_is(
        &self,
        op: &'static str,
        k: usize,
        name: &str,
        rank: usize,
        form: &str,
    ) -> Result<Option<&[usize]>> {
        match self.get(k) {
            None => Ok(None),
            Some(i) if i.shape.len() == rank => Ok(Some(i.shape)),
            Some(i) => Err(Error::invalid(
                op,
                name,
                format!("{name} has shape {:?}; it must be {form}", i.shape),
            )),
        }
    }

    /// NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss: scores [N, C, d1, ...], target
    /// [N, d1, ...] of classes in 0..C (or ignore_index), weight [C].
    fn loss(&self, op: &'static str) -> Result<()> {
        let Some(s) = self.get(0) else { return Ok(()) };
        if s.shape.len() < 2 {
            return Err(Error::invalid(
                op,
                "scores",
                format!(
                    "scores has shape {:?}; it must be [N, C] or [N, C, d1, ...]",
                    s.shape
                ),
            ));
        }
        let classes = s.shape[1];
        let mut want = vec![s.shape[0]];
        want.extend(&s.shape[2..]);
        let why = format!(", the scores' shape {:?} without its class axis", s.shape);
        self.shape_is(op, 1, "target", &want, &why)?;
        self.shape_is(
            op,
            2,
            "weight",
            &[classes],
            ", one weight per class (the scores' axis 1)",
        )?;
        let Some(t) = self.get(1) else { return Ok(()) };
        if !t.dtype.is_integer() {
            return Err(Error::invalid(
                op,
                "target",
                format!("target is {}; classes must be integers", t.dtype),
            ));
        }
        let ignore = self.int("ignore_index");
        if let Some(v) = values(t, op, "target")? {
            if let Some((i, c)) = v
                .iter()
                .enumerate()
                .find(|(_, &c)| Some(c) != ignore && !(0..classes as i64).contains(&c))
            {
                let or = match ignore {
                    Some(x) => format!(" (or ignore_index {x})"),
                    None => String::new(),
                };
                return Err(Error::invalid(
                    op,
                    "target",
                    format!("target's element {i} is {c}; a class must be in 0..{classes}{or}"),
                ));
            }
        }
        Ok(())
    }

    /// RoiAlign: X [N, C, H, W], rois [R, 4], batch_indices [R] in 0..N.
    fn roi_align(&self) -> Result<()> {
        const OP: &str = "RoiAlign";
        let x = self.rank_is(OP, 0, "X", 4, "[N, C, H, W]")?;
        let rois = self.rank_is(OP, 1, "rois", 2, "[num_rois, 4]")?;
        if let Some(r) = rois.filter(|r| r[1] != 4) {
            return Err(Error::invalid(
                OP,
                "rois",
                format!("rois has shape {r:?}; it must be [num_rois, 4], a box per row"),
            ));
        }
        if let Some(r) = rois {
            self.shape_is(OP, 2, "batch_indices", &[r[0]], ", one per row of rois")?;
        }
        if let (Some(x), Some(b)) = (x, self.get(2)) {
            if let Some(v) = values(b, OP, "batch_indices")? {
                if let Some((i, n)) = v
                    .iter()
                    .enumerate()
                    .find(|(_, &n)| !(0..x[0] as i64).contains(&n))
                {
                    return Err(Error::invalid(
                        OP,
                        "batch_indices",
                        format!(
                            "batch_indices[{i}] is {n}; it must be in 0..{}, an image of X",
                            x[0]
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// TensorScatter: update shaped as past_cache but along `axis` (at most as long),
    /// write_indices [batch]; in linear mode each write within the cache.
    fn tensor_scatter(&self) -> Result<()> {
        const OP: &str = "TensorScatter";
        let (Some(c), Some(u)) = (self.get(0), self.get(1)) else {
            return Ok(());
        };
        let rank = c.shape.len() as i64;
        let axis = self.int("axis").unwrap_or(-2);
        let a = if axis < 0 { axis + rank } else { axis };
        if !(1..rank).contains(&a) {
            return Err(Error::invalid(
                OP,
                "axis",
                format!(
                    "axis {axis} is not a sequence axis of past_cache {:?} (1 to {})",
                    c.shape,
                    rank - 1
                ),
            ));
        }
        let a = a as usize;
        let fits = u.shape.len() == c.shape.len()
            && (0..c.shape.len()).all(|k| {
                if k == a {
                    u.shape[k] <= c.shape[k]
                } else {
                    u.shape[k] == c.shape[k]
                }
            });
        if !fits {
            return Err(Error::invalid(
                OP,
                "update",
                format!(
                    "update has shape {:?}; it must be past_cache's {:?} but along axis {a}, where it may be shorter",
                    u.shape, c.shape
                ),
            ));
        }
        self.shape_is(
            OP,
            2,
            "write_indices",
            &[c.shape[0]],
            ", one per batch item",
        )?;
        let linear =
            !matches!(self.node.attrs.get("mode"), Some(Attr::String(m)) if m == "circular");
        if let Some(w) = self.get(2) {
            if let Some(v) = values(w, OP, "write_indices")? {
                let (len, max) = (u.shape[a] as i64, c.shape[a] as i64);
                if let Some((i, p)) = v
                    .iter()
                    .enumerate()
                    .find(|(_, &p)| p < 0 || (linear && p > max - len))
                {
                    return Err(Error::invalid(
                        OP,
                        "write_indices",
                        format!(
                            "write_indices[{i}] is {p}; in {} mode an update of {len} must be written at 0..={} of the cache's {max}",
                            if linear { "linear" } else { "circular" },
                            if linear { max - len } else { i64::MAX }
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// MaxUnpool: I holds one index per value of X.
    fn max_unpool(&self) -> Result<()> {
        const OP: &str = "MaxUnpool";
        let Some(x) = self.get(0) else { return Ok(()) };
        if x.shape.len() < 3 {
            return Err(Error::invalid(
                OP,
                "X",
                format!("X has shape {:?}; it must be [N, C, d1, ...]", x.shape),
            ));
        }
        self.shape_is(OP, 1, "I", x.shape, ", X's shape (an index per value)")
    }

    /// DeformConv (2-D): X [N, C, H, W], W [oC, C / group, kH, kW], offset [N, offset_group
    /// * 2 * kH * kW, oH, oW], B [oC], mask [N, offset_group * kH * kW, oH, oW].
    fn deform_conv(&self) -> Result<()> {
        const OP: &str = "DeformConv";
        let (Some(x), Some(w)) = (
            self.rank_is(OP, 0, "X", 4, "[N, C, H, W]")?,
            self.rank_is(OP, 1, "W", 4, "[out channels, C / group, kH, kW]")?,
        ) else {
            return Ok(());
        };
        let group = self.int("group").unwrap_or(1).max(1) as usize;
        let offset_group = self.int("offset_group").unwrap_or(1).max(1) as usize;
        if w[1].saturating_mul(group) != x[1] || w[0] % group != 0 {
            return Err(Error::invalid(
                OP,
                "W",
                format!(
                    "W has shape {w:?}; with X {x:?} and group {group} it must be [a multiple of {group}, {}, kH, kW]",
                    x[1] / group
                ),
            ));
        }
        if x[1] % offset_group != 0 {
            return Err(Error::invalid(
                OP,
                "X",
                format!(
                    "X has {} channels; offset_group {offset_group} must divide them",
                    x[1]
                ),
            ));
        }
        if let Some(k) = self
            .ints("kernel_shape")
            .filter(|k| k != &[w[2] as i64, w[3] as i64])
        {
            return Err(Error::invalid(
                OP,
                "W",
                format!("W has shape {w:?}; kernel_shape is {k:?}"),
            ));
        }
        let attr = |name: &str, default: i64, k: usize| {
            self.ints(name)
                .and_then(|v| v.get(k).copied())
                .unwrap_or(default)
                .max(0) as usize
        };
        let mut out = [0usize; 2];
        for (axis, o) in out.iter_mut().enumerate() {
            // Saturating: the attributes are any i64 the file holds.
            let span = attr("dilations", 1, axis)
                .saturating_mul(w[2 + axis].max(1) - 1)
                .saturating_add(1);
            let padded = x[2 + axis]
                .saturating_add(attr("pads", 0, axis))
                .saturating_add(attr("pads", 0, axis + 2));
            let stride = attr("strides", 1, axis).max(1);
            if padded < span {
                return Err(Error::invalid(
                    OP,
                    "W",
                    format!(
                        "W has shape {w:?}; its dilated kernel spans {span} along spatial axis {axis}, more than X's padded {padded}"
                    ),
                ));
            }
            *o = (padded - span) / stride + 1;
        }
        let taps = w[2].saturating_mul(w[3]);
        self.shape_is(
            OP,
            2,
            "offset",
            &[
                x[0],
                offset_group.saturating_mul(taps.saturating_mul(2)),
                out[0],
                out[1],
            ],
            ": N, offset_group * 2 * kH * kW, and the output's spatial shape",
        )?;
        self.shape_is(OP, 3, "B", &[w[0]], ", one bias per output channel")?;
        self.shape_is(
            OP,
            4,
            "mask",
            &[x[0], offset_group.saturating_mul(taps), out[0], out[1]],
            ": N, offset_group * kH * kW, and the output's spatial shape",
        )
    }

    /// RotaryEmbedding: X [B, H, S, D], or [B, S, H * D] with num_heads; with position_ids
    /// [B, S] (in 0..M) caches [M, R / 2], without them caches [B, S, R / 2]; R (the rotated
    /// part, rotary_embedding_dim or D) at most D.
    fn rotary_embedding(&self) -> Result<()> {
        const OP: &str = "RotaryEmbedding";
        let Some(x) = self.get(0) else { return Ok(()) };
        let heads = self.int("num_heads").unwrap_or(0).max(0) as usize;
        let (batch, seq, head) = match (x.shape, heads) {
            (&[b, s, hidden], h) if h > 0 && hidden % h == 0 => (b, s, hidden / h),
            (&[b, _, s, d], 0) => (b, s, d),
            (s, 0) => {
                return Err(Error::invalid(
                    OP,
                    "X",
                    format!("X has shape {s:?}; without num_heads it must be [batch, heads, sequence, head size]"),
                ))
            }
            (s, h) => {
                return Err(Error::invalid(
                    OP,
                    "X",
                    format!("X has shape {s:?}; with num_heads {h} it must be [batch, sequence, {h} * head size]"),
                ))
            }
        };
        let rotated = match self.int("rotary_embedding_dim").unwrap_or(0) {
            0 => head,
            r => r.max(0) as usize,
        };
        if rotated > head || rotated % 2 != 0 {
            return Err(Error::invalid(
                OP,
                "rotary_embedding_dim",
                format!("rotary_embedding_dim is {rotated}; it must be even and at most the head size {head}"),
            ));
        }
        let half = rotated / 2;
        match self.get(3) {
            Some(ids) => {
                self.shape_is(OP, 3, "position_ids", &[batch, seq], ": [batch, sequence]")?;
                let cos = self.rank_is(
                    OP,
                    1,
                    "cos_cache",
                    2,
                    &format!("[max position, {half}] with position_ids"),
                )?;
                let max = cos.map_or(0, |c| c[0]);
                if let Some(c) = cos.filter(|c| c[1] != half) {
                    return Err(Error::invalid(
                        OP,
                        "cos_cache",
                        format!("cos_cache has shape {c:?}; it must be [max position, {half}], half the rotated size"),
                    ));
                }
                if let Some(v) = values(ids, OP, "position_ids")? {
                    if let Some((i, p)) = v
                        .iter()
                        .enumerate()
                        .find(|(_, &p)| !(0..max as i64).contains(&p))
                    {
                        return Err(Error::invalid(
                            OP,
                            "position_ids",
                            format!("position_ids' element {i} is {p}; it must be in 0..{max}, a row of cos_cache"),
                        ));
                    }
                }
            }
            None => self.shape_is(
                OP,
                1,
                "cos_cache",
                &[batch, seq, half],
                ": [batch, sequence, half the rotated size] without position_ids",
            )?,
        }
        match self.get(1) {
            Some(c) => self.shape_is(OP, 2, "sin_cache", c.shape, ", cos_cache's shape"),
            None => Ok(()),
        }
    }

    /// Attention: Q [B, Hq, Sq, D], K [B, Hkv, Skv, D], V [B, Hkv, Skv, Dv] (3-D with
    /// q_num_heads and kv_num_heads: [B, S, heads * size]), Hq a multiple of Hkv; past_key
    /// [B, Hkv, P, D], past_value [B, Hkv, P, Dv]; attn_mask broadcast to [B, Hq, Sq, at most
    /// P + Skv] (of rank 1 to 4); nonpad_kv_seqlen [B].
    /// FlexAttention: Q, K and V as Attention's, 4-D.
    fn attention(&self, op: &'static str) -> Result<()> {
        let heads = match (self.int("q_num_heads"), self.int("kv_num_heads")) {
            (Some(q), Some(kv)) if q > 0 && kv > 0 => Some((q as usize, kv as usize)),
            _ => None,
        };
        let four = |k: usize, name: &str, h: Option<usize>| -> Result<Option<[usize; 4]>> {
            let Some(i) = self.get(k) else {
                return Ok(None);
            };
            match (i.shape, h) {
                (&[b, h, s, d], None) => Ok(Some([b, h, s, d])),
                (&[b, s, hidden], Some(h)) if hidden % h == 0 => Ok(Some([b, h, s, hidden / h])),
                (s, None) => Err(Error::invalid(
                    op,
                    name,
                    format!("{name} has shape {s:?}; it must be [batch, heads, sequence, head size] (3-D only with q_num_heads and kv_num_heads)"),
                )),
                (s, Some(h)) => Err(Error::invalid(
                    op,
                    name,
                    format!("{name} has shape {s:?}; with {h} heads it must be [batch, sequence, {h} * head size]"),
                )),
            }
        };
        let (Some(q), Some(k), Some(v)) = (
            four(0, "Q", heads.map(|h| h.0))?,
            four(1, "K", heads.map(|h| h.1))?,
            four(2, "V", heads.map(|h| h.1))?,
        ) else {
            return Ok(());
        };
        let dims = |t: [usize; 4]| {
            format!(
                "[batch {}, heads {}, sequence {}, head size {}]",
                t[0], t[1], t[2], t[3]
            )
        };
        if k[0] != q[0] || k[3] != q[3] || q[1] % k[1].max(1) != 0 || (k[1] == 0 && q[1] != 0) {
            return Err(Error::invalid(
                op,
                "K",
                format!("K is {}; with Q {} it must have Q's batch and head size, and heads that divide Q's", dims(k), dims(q)),
            ));
        }
        if v[..3] != k[..3] {
            return Err(Error::invalid(
                op,
                "V",
                format!(
                    "V is {}; it must have K's batch, heads and sequence ({})",
                    dims(v),
                    dims(k)
                ),
            ));
        }
        let mut past = 0;
        for (idx, name, size) in [(4, "past_key", k[3]), (5, "past_value", v[3])] {
            if let Some(p) = self.get(idx) {
                match p.shape {
                    &[b, h, s, d] if b == k[0] && h == k[1] && d == size => past = s,
                    s => {
                        return Err(Error::invalid(
                            op,
                            name,
                            format!(
                                "{name} has shape {s:?}; it must be [{}, {}, past length, {size}]",
                                k[0], k[1]
                            ),
                        ))
                    }
                }
            }
        }
        if let (Some(pk), Some(pv)) = (self.get(4), self.get(5)) {
            if pk.shape[2] != pv.shape[2] {
                return Err(Error::invalid(
                    op,
                    "past_value",
                    format!(
                        "past_value has shape {:?}; it must be as long as past_key {:?}",
                        pv.shape, pk.shape
                    ),
                ));
            }
        }
        if let Some(m) = self.get(3) {
            let total = past + k[2];
            let r = m.shape.len();
            let want = [q[0], q[1], q[2]];
            let fits = (1..=4).contains(&r)
                && m.shape[r - 1] <= total
                && (2..=r).all(|a| {
                    let d = m.shape[r - a];
                    d == 1 || d == want[3 - (a - 1)]
                });
            if !fits {
                return Err(Error::invalid(
                    op,
                    "attn_mask",
                    format!(
                        "attn_mask has shape {:?}; it must broadcast to [{}, {}, {}, at most {total}] (batch, query heads, query sequence, keys)",
                        m.shape, q[0], q[1], q[2]
                    ),
                ));
            }
        }
        self.shape_is(op, 6, "nonpad_kv_seqlen", &[q[0]], ", one per batch item")
    }

    /// QuantizeLinear, DequantizeLinear: y_scale (x_scale) per tensor (one value), per axis
    /// ([x's dim along axis]) or per block (x's shape with ceil(dim / block_size) along
    /// axis); the zero point shaped as the scale.
    fn quantize(&self, op: &'static str) -> Result<()> {
        let (Some(x), Some(s)) = (self.get(0), self.get(1)) else {
            return Ok(());
        };
        let block = self.int("block_size").unwrap_or(0).max(0) as usize;
        let scale = if op == "QuantizeLinear" {
            "y_scale"
        } else {
            "x_scale"
        };
        let per_tensor = s.shape.iter().product::<usize>() == 1 && s.shape.len() <= 1;
        if !(per_tensor && block == 0) {
            let rank = x.shape.len() as i64;
            let axis = self.int("axis").unwrap_or(1);
            let a = if axis < 0 { axis + rank } else { axis };
            if !(0..rank).contains(&a) {
                return Err(Error::invalid(
                    op,
                    "axis",
                    format!("axis {axis} is out of range for x of shape {:?}", x.shape),
                ));
            }
            let a = a as usize;
            let want: Vec<usize> = match block {
                0 => vec![x.shape[a]],
                b => {
                    let mut w = x.shape.to_vec();
                    w[a] = x.shape[a].div_ceil(b);
                    w
                }
            };
            if s.shape != want {
                let how = match block {
                    0 => format!(
                        "one value, or one per index along axis {a} of x {:?}",
                        x.shape
                    ),
                    b => format!(
                        "x's shape {:?} with ceil({} / {b}) along axis {a}",
                        x.shape, x.shape[a]
                    ),
                };
                return Err(Error::invalid(
                    op,
                    scale,
                    format!(
                        "{scale} has shape {:?}; it must be {want:?}: {how}",
                        s.shape
                    ),
                ));
            }
        }
        let zp = if op == "QuantizeLinear" {
            "y_zero_point"
        } else {
            "x_zero_point"
        };
        match self.get(2) {
            // One value each way: `[]` and `[1]` alike.
            Some(z)
                if per_tensor && z.shape.len() <= 1 && z.shape.iter().product::<usize>() == 1 =>
            {
                Ok(())
            }
            _ => self.shape_is(op, 2, zp, s.shape, &format!(", {scale}'s shape")),
        }
    }

    /// RNN, GRU, LSTM with G gates, D directions and hidden size H: X [S, B, I] (layout 1:
    /// [B, S, I]), W [D, G * H, I], R [D, G * H, H], B [D, 2 * G * H], sequence_lens [B],
    /// initial_h and initial_c [D, B, H] (layout 1: [B, D, H]), P [D, 3 * H].
    fn recurrent(&self, op: &'static str) -> Result<()> {
        let Some(x) = self.rank_is(
            op,
            0,
            "X",
            3,
            "[sequence, batch, input size] (layout 1: [batch, sequence, input size])",
        )?
        else {
            return Ok(());
        };
        let layout = self.int("layout").unwrap_or(0);
        let (batch, input) = match layout {
            1 => (x[0], x[2]),
            _ => (x[1], x[2]),
        };
        let h = self.int("hidden_size").unwrap_or(0).max(0) as usize;
        let d = self.int("directions").unwrap_or(1).max(1) as usize;
        let g = self.int("gates").unwrap_or(1).max(1) as usize;
        let of = |what: &str| format!(" ({what}; {d} direction(s), {g} gate(s), hidden_size {h})");
        self.shape_is(op, 1, "W", &[d, g * h, input], &of("X's input size last"))?;
        self.shape_is(op, 2, "R", &[d, g * h, h], &of("hidden_size last"))?;
        self.shape_is(
            op,
            3,
            "B",
            &[d, 2 * g * h],
            &of("input and recurrence biases"),
        )?;
        self.shape_is(
            op,
            4,
            "sequence_lens",
            &[batch],
            ", one length per batch item",
        )?;
        let state = match layout {
            1 => [batch, d, h],
            _ => [d, batch, h],
        };
        self.shape_is(op, 5, "initial_h", &state, &of("layout's order"))?;
        self.shape_is(op, 6, "initial_c", &state, &of("layout's order"))?;
        self.shape_is(op, 7, "P", &[d, 3 * h], &of("three peepholes"))
    }

    /// LpNormalization's `axis` and MeanVarianceNormalization's `axes` within the input's
    /// rank.
    fn axes(&self, op: &'static str, name: &str) -> Result<()> {
        let Some(x) = self.get(0) else { return Ok(()) };
        let rank = x.shape.len() as i64;
        let (given, list) = match (self.int(name), self.ints(name)) {
            (Some(a), _) => (vec![a], false),
            (_, Some(v)) => (v.to_vec(), true),
            _ => return Ok(()),
        };
        let Some(a) = given.iter().find(|&&a| !(-rank..rank).contains(&a)) else {
            return Ok(());
        };
        let what = match list {
            true => format!("{name} {given:?} holds {a}, which is"),
            false => format!("{name} {a} is"),
        };
        Err(Error::invalid(
            op,
            name,
            format!("{what} out of range for the input of shape {:?}", x.shape),
        ))
    }

    /// Adagrad, Momentum, Adam: each group's X, G and states (inputs after R and T, by kind)
    /// of one shape.
    fn optimizer(&self, op: &'static str, kinds: &[&str]) -> Result<()> {
        let groups = self.int("groups").unwrap_or(0).max(0) as usize;
        for n in 0..groups {
            let Some(x) = self.get(2 + n) else { continue };
            for (kind, name) in kinds.iter().enumerate().skip(1) {
                let k = 2 + kind * groups + n;
                self.shape_is(
                    op,
                    k,
                    &format!("{name}{}", n + 1),
                    x.shape,
                    &format!(", X{}'s shape", n + 1),
                )?;
            }
        }
        Ok(())
    }

    /// OneHotEncoder with `zeros` 0 (integer categories): every value of X known on the host
    /// (truncated to an integer, as the op casts it) is one of `cats_int64s`.
    fn one_hot_encoder(&self) -> Result<()> {
        const OP: &str = "OneHotEncoder";
        let (Some(x), Some(cats)) = (self.get(0), self.ints("cats_int64s")) else {
            return Ok(());
        };
        let Some(v) = x.value.filter(|_| self.int("zeros") == Some(0)) else {
            return Ok(());
        };
        let flat = HostTensor {
            shape: vec![v.numel()],
            ..crate::reference::cast_host(v, DType::I64)?
        };
        let values = flat.to_indices(OP, "X")?;
        match values.iter().enumerate().find(|(_, c)| !cats.contains(c)) {
            Some((i, c)) => Err(Error::invalid(
                OP,
                "X",
                format!("X's element {i} is {c}, no category of cats_int64s; with zeros 0 every value must be one"),
            )),
            None => Ok(()),
        }
    }

    /// Whether input `k` is one value (per tensor): one element, of rank 0 or 1.
    fn is_one_value(&self, k: usize) -> bool {
        self.get(k)
            .is_none_or(|i| i.shape.len() <= 1 && i.shape.iter().product::<usize>() == 1)
    }

    /// Each of `inputs` (index, name) is one value.
    fn one_value(&self, op: &'static str, inputs: &[(usize, &str)]) -> Result<()> {
        match inputs.iter().find(|(k, _)| !self.is_one_value(*k)) {
            Some(&(k, name)) => Err(Error::invalid(
                op,
                name,
                format!(
                    "{name} has shape {:?}; it must be one value (per tensor)",
                    self.get(k).map(|i| i.shape).unwrap_or_default()
                ),
            )),
            None => Ok(()),
        }
    }

    /// MatMulInteger, QLinearMatMul: the operands at `operands`; `[a_scale, a_zero_point,
    /// b_scale, b_zero_point]` at `quant`. A's are one value or one per row in A's rank
    /// (`[..., M, 1]`); B's one value, one per column (`[N]`) or one per column in B's rank
    /// (`[..., 1, N]`): the forms that broadcast as the specification means them.
    fn integer_product(
        &self,
        op: &'static str,
        operands: [usize; 2],
        quant: [Option<usize>; 4],
    ) -> Result<()> {
        let (Some(a), Some(b)) = (self.get(operands[0]), self.get(operands[1])) else {
            return Ok(());
        };
        let a_name = if op == "QLinearMatMul" { "a" } else { "A" };
        let b_name = if op == "QLinearMatMul" { "b" } else { "B" };
        let per_row = (a.shape.len() >= 2).then(|| {
            let mut s = a.shape.to_vec();
            let r = s.len();
            s[r - 1] = 1;
            s
        });
        let per_col = (b.shape.len() >= 2).then(|| {
            let mut s = b.shape.to_vec();
            let r = s.len();
            s[r - 2] = 1;
            s
        });
        let names = ["a_scale", "a_zero_point", "b_scale", "b_zero_point"];
        for (q, name) in quant.iter().zip(names) {
            let Some(k) = *q else { continue };
            let Some(i) = self.get(k) else { continue };
            if self.is_one_value(k) {
                continue;
            }
            let (ok, how) = if name.starts_with('a') {
                let ok = per_row.as_deref() == Some(i.shape);
                let hint = match (i.shape.len(), &per_row) {
                    (1, Some(p)) if p.len() == 2 && i.shape[0] == a.shape[0] => {
                        format!("; one per row of a 2-D {a_name} is given as {p:?} (numpy broadcasting would read [M] per column)")
                    }
                    _ => String::new(),
                };
                let how = match &per_row {
                    Some(p) => format!(
                        "one value, or {p:?}: one per row of {a_name} {:?}{hint}",
                        a.shape
                    ),
                    None => format!("one value ({a_name} {:?} has no rows)", a.shape),
                };
                (ok, how)
            } else {
                let n = b.shape.last().copied().unwrap_or(0);
                let ok =
                    per_col.as_deref() == Some(i.shape) || (b.shape.len() >= 2 && i.shape == [n]);
                let how = match &per_col {
                    Some(p) => format!(
                        "one value, or [{n}] or {p:?}: one per column of {b_name} {:?}",
                        b.shape
                    ),
                    None => format!("one value ({b_name} {:?} has no columns)", b.shape),
                };
                (ok, how)
            };
            if !ok {
                return Err(Error::invalid(
                    op,
                    name,
                    format!("{name} has shape {:?}; it must be {how}", i.shape),
                ));
            }
        }
        Ok(())
    }

    /// ConvInteger, QLinearConv: the input and kernel at `operands`; `[x_scale,
    /// x_zero_point, w_scale, w_zero_point]` at `quant`: x's one value, w's one value or
    /// one per output channel (`[M]`).
    fn integer_conv(
        &self,
        op: &'static str,
        operands: [usize; 2],
        quant: [Option<usize>; 4],
    ) -> Result<()> {
        let x_quant: Vec<(usize, &str)> = [(quant[0], "x_scale"), (quant[1], "x_zero_point")]
            .into_iter()
            .filter_map(|(k, n)| k.map(|k| (k, n)))
            .collect();
        self.one_value(op, &x_quant)?;
        let Some(w) = self.get(operands[1]).filter(|w| !w.shape.is_empty()) else {
            return Ok(());
        };
        let m = w.shape[0];
        for (k, name) in [(quant[2], "w_scale"), (quant[3], "w_zero_point")] {
            let Some(k) = k else { continue };
            if !self.is_one_value(k) {
                self.shape_is(
                    op,
                    k,
                    name,
                    &[m],
                    ": one value, or one per output channel of w",
                )?;
            }
        }
        Ok(())
    }

    /// A tree ensemble whose branches read features up to `min_features` - 1: X's last axis
    /// holds at least that many.
    fn min_features(&self, op: &'static str) -> Result<()> {
        let (Some(x), Some(f)) = (self.get(0), self.int("min_features")) else {
            return Ok(());
        };
        match x.shape.last() {
            Some(&n) if n as i64 >= f => Ok(()),
            _ => Err(Error::invalid(
                op,
                "X",
                format!(
                    "X has shape {:?}; its last axis must hold at least {f} features, as the trees read feature {}",
                    x.shape,
                    f - 1
                ),
            )),
        }
    }

    /// An ONNX-ML op whose X holds `features` values per row, along its last axis.
    fn features(&self, op: &'static str) -> Result<()> {
        let (Some(x), Some(f)) = (self.get(0), self.int("features")) else {
            return Ok(());
        };
        match x.shape.last() {
            Some(&n) if n as i64 == f => Ok(()),
            _ => Err(Error::invalid(
                op,
                "X",
                format!(
                    "X has shape {:?}; its last axis must hold the {f} features that the op's attributes are given for",
                    x.shape
                ),
            )),
        }
    }
}
