//! ONNX-ML (`ai.onnx.ml`) ops of exported scikit-learn models, loaded as the standard ops that
//! compute them: Binarizer, Scaler, Normalizer, Imputer, LinearRegressor, LinearClassifier,
//! TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble (ai.onnx.ml 5), SVMRegressor,
//! SVMClassifier, OneHotEncoder and LabelEncoder (integer and float keys). Where the spec
//! leaves a case open (binary classifiers, scores without a weight, the post transforms), they
//! compute what onnxruntime's CPU kernels compute. Scores are f32, as the spec's outputs are;
//! linear models and scalers compute in f32 (onnxruntime casts their inputs to f32 too), trees
//! compare each feature with its threshold in the input's own type.

use std::collections::HashMap;

use super::expansion::{node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::reference::cast_host;
use crate::{DType, Error, HostTensor, Result};

/// The deepest tree path followed (one gather step per level).
const MAX_TREE_DEPTH: usize = 4096;

/// The nodes that compute an ONNX-ML node; `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    // skl2onnx's text vectorizers tokenize with onnxruntime's contrib Tokenizer: the graph's
    // string op of that name.
    if node.op == "com.microsoft.Tokenizer" {
        let mut n = node.clone();
        n.op = "Tokenizer".into();
        return Ok(Some((vec![n], Vec::new())));
    }
    let Some(op) = node.op.strip_prefix("ai.onnx.ml.") else {
        return Ok(None);
    };
    if let Some(expansion) = with_string_labels(node)? {
        return Ok(Some(expansion));
    }
    let expansion = match op {
        "Binarizer" => binarizer(node)?,
        "Scaler" => scaler(node)?,
        "Normalizer" => normalizer(node)?,
        "Imputer" => imputer(node)?,
        "LinearRegressor" => linear_regressor(node)?,
        "LinearClassifier" => linear_classifier(node)?,
        "TreeEnsembleRegressor" | "TreeEnsembleClassifier" | "TreeEnsemble" => tree_ensemble(node)?,
        "SVMRegressor" => svm_regressor(node)?,
        "SVMClassifier" => svm_classifier(node)?,
        "OneHotEncoder" => one_hot_encoder(node)?,
        "LabelEncoder" => label_encoder(node)?,
        _ => return Ok(None),
    };
    Ok(Some(expansion))
}

/// A classifier with string class labels (`classlabels_strings`): expanded with the labels'
/// positions as its integer labels, then the label strings gathered at them (a string op,
/// which reads the positions back from the GPU). A LabelEncoder that maps strings, a
/// CategoryMapper and a ZipMap: the graph's host ops of those names. `None` for other nodes.
fn with_string_labels(node: &Node) -> Result<Option<Expansion>> {
    let op = node.op.strip_prefix("ai.onnx.ml.").unwrap_or_default();
    if op == "CategoryMapper" || op == "ZipMap" {
        let mut n = node.clone();
        n.op = op.into();
        return Ok(Some((vec![n], Vec::new())));
    }
    if op == "LabelEncoder" {
        let strings = [
            "keys_strings",
            "values_strings",
            "keys_tensor",
            "values_tensor",
        ]
        .iter()
        .any(|k| matches!(node.attrs.get(*k), Some(Attr::Strings(_))));
        if !strings {
            return Ok(None);
        }
        let mut n = node.clone();
        n.op = "LabelEncoder".into();
        return Ok(Some((vec![n], Vec::new())));
    }
    if !matches!(
        op,
        "LinearClassifier" | "TreeEnsembleClassifier" | "SVMClassifier"
    ) {
        return Ok(None);
    }
    let labels = Attrs(node).strings("classlabels_strings")?;
    if labels.is_empty() {
        return Ok(None);
    }
    let Some(label_out) = node.outputs.first().filter(|o| !o.is_empty()).cloned() else {
        return Ok(None);
    };
    let mut n = node.clone();
    n.attrs.remove("classlabels_strings");
    let positions: Vec<i64> = (0..labels.len() as i64).collect();
    n.attrs
        .insert("classlabels_int64s".into(), Attr::Ints(positions));
    let b = Builder::new(node, &label_out);
    let index = b.name("label_position");
    n.outputs[0] = index.clone();
    let (mut nodes, constants) = match expand(&n)? {
        Some(e) => e,
        None => return Ok(None),
    };
    let table = b.name("label_strings");
    let count = labels.len() as i64;
    nodes.push(
        Node::new("StringConstant", table.as_str())
            .outputs([table.as_str()])
            .attr("value", Attr::Strings(labels))
            .attr("shape", Attr::Ints(vec![count])),
    );
    nodes.push(
        Node::new("Gather", label_out.as_str())
            .inputs([table.as_str(), index.as_str()])
            .outputs([label_out.as_str()]),
    );
    Ok(Some((nodes, constants)))
}

/// Typed reads of a node's attributes, absent ones as their defaults.
struct Attrs<'a>(&'a Node);

impl Attrs<'_> {
    fn bad(&self, msg: impl std::fmt::Display) -> Error {
        node_error(self.0, msg)
    }

    fn get(&self, name: &str) -> Option<&Attr> {
        self.0.attrs.get(name)
    }

    fn int(&self, name: &str, default: i64) -> Result<i64> {
        match self.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(_) => Err(self.bad(format!("{name} must be an integer"))),
        }
    }

    fn float(&self, name: &str, default: f64) -> Result<f64> {
        match self.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f64),
            Some(_) => Err(self.bad(format!("{name} must be a float"))),
        }
    }

    fn string(&self, name: &str, default: &str) -> Result<String> {
        match self.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::String(v)) => Ok(v.clone()),
            Some(_) => Err(self.bad(format!("{name} must be a string"))),
        }
    }

    fn ints(&self, name: &str) -> Result<Vec<i64>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Attr::Ints(v)) => Ok(v.clone()),
            Some(Attr::Int(v)) => Ok(vec![*v]),
            Some(Attr::Tensor(t)) => cast_host(t, DType::I64)
                .and_then(|t| t.to_vec::<i64>())
                .map_err(|e| self.bad(format!("{name}: {e}"))),
            Some(_) => Err(self.bad(format!("{name} must be integers"))),
        }
    }

    fn strings(&self, name: &str) -> Result<Vec<String>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Attr::Strings(v)) => Ok(v.clone()),
            Some(Attr::String(v)) => Ok(vec![v.clone()]),
            Some(_) => Err(self.bad(format!("{name} must be strings"))),
        }
    }

    /// Floats given as a list or as a tensor (also under `name_as_tensor`), with the tensor's
    /// dtype (f32 for a list).
    fn values(&self, name: &str) -> Result<(Vec<f64>, DType)> {
        let as_tensor = format!("{name}_as_tensor");
        let attr = self.get(&as_tensor).or_else(|| self.get(name));
        match attr {
            None => Ok((Vec::new(), DType::F32)),
            Some(Attr::Floats(v)) => Ok((v.clone(), DType::F32)),
            Some(Attr::Float(v)) => Ok((vec![*v], DType::F32)),
            Some(Attr::Tensor(t)) => cast_host(t, DType::F64)
                .and_then(|v| v.to_vec::<f64>())
                .map(|v| (v, t.dtype))
                .map_err(|e| self.bad(format!("{name}: {e}"))),
            Some(_) => Err(self.bad(format!("{name} must be floats or a tensor"))),
        }
    }

    /// Integer class labels (string labels are their positions here, see
    /// [`with_string_labels`]).
    fn class_labels(&self) -> Result<Vec<i64>> {
        match self.ints("classlabels_int64s")? {
            v if v.is_empty() => self.ints("classlabels_ints"),
            v => Ok(v),
        }
    }
}

fn io(node: &Node) -> Result<(String, String)> {
    match (node.inputs.first(), node.outputs.first()) {
        (Some(x), Some(y)) if !x.is_empty() && !y.is_empty() => Ok((x.clone(), y.clone())),
        _ => Err(node_error(node, "needs an input and an output")),
    }
}

fn f32s(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

fn cast(b: &mut Builder, out: &str, x: &str, to: &str) -> String {
    b.op("Cast", out, &[x], &[("to", Attr::String(to.into()))])
}

/// `x` as rows of features: `[N, F]` stays, `[F]` becomes `[1, F]` (onnxruntime's reading).
fn rows(b: &mut Builder, x: &str) -> Result<String> {
    let width = b.dims("row_width", x, -1, None);
    // The leading dims' product, not -1: rows of no feature leave -1 undetermined.
    let lead = b.dims_product("rows_lead", x, 0, Some(-1));
    let shape = b.op(
        "Concat",
        "rows_shape",
        &[&lead, &width],
        &[("axis", Attr::Int(0))],
    );
    Ok(b.op("Reshape", "rows", &[x, &shape], &[]))
}

/// Checks that X holds `features` values per row (its last axis), as the op's attributes
/// are given for; a count of 1 is one value for every feature and checks nothing.
fn check_features(b: &mut Builder, node: &Node, features: usize) {
    if features != 1 {
        let op = node.op.strip_prefix("ai.onnx.ml.").unwrap_or(&node.op);
        b.check_inputs(node, op, &[("features", Attr::Int(features as i64))]);
    }
}

fn f32_const(b: &mut Builder, name: &str, shape: Vec<usize>, v: &[f32]) -> Result<String> {
    Ok(b.constant(name, HostTensor::from_vec(shape, v)?))
}

/// The post transforms of the ML ops' scores.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Post {
    None,
    Logistic,
    Softmax,
    SoftmaxZero,
    Probit,
}

impl Post {
    fn parse(a: &Attrs) -> Result<Post> {
        // TreeEnsemble (ai.onnx.ml 5) gives it as an integer.
        if let Some(Attr::Int(v)) = a.get("post_transform") {
            return match v {
                0 => Ok(Post::None),
                1 => Ok(Post::Softmax),
                2 => Ok(Post::Logistic),
                3 => Ok(Post::SoftmaxZero),
                4 => Ok(Post::Probit),
                v => Err(a.bad(format!("post_transform {v} is not 0 to 4"))),
            };
        }
        match a.string("post_transform", "NONE")?.as_str() {
            "NONE" => Ok(Post::None),
            "LOGISTIC" => Ok(Post::Logistic),
            "SOFTMAX" => Ok(Post::Softmax),
            "SOFTMAX_ZERO" => Ok(Post::SoftmaxZero),
            "PROBIT" => Ok(Post::Probit),
            other => Err(a.bad(format!(
                "post_transform '{}' is not NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO or PROBIT",
                other.escape_debug()
            ))),
        }
    }
}

/// onnxruntime's probit: sqrt(2) times its approximation of erfinv(2p - 1) (Winitzki's, in
/// f32 with its constants), not the exact inverse.
fn probit(b: &mut Builder, p: &str) -> Result<String> {
    let two = b.f32_scalar("probit_two", 2.0)?;
    let one = b.f32_scalar("probit_one", 1.0)?;
    let zero = b.f32_scalar("probit_zero", 0.0)?;
    let minus_one = b.f32_scalar("probit_minus_one", -1.0)?;
    let x = b.op("Mul", "probit_2p", &[p, &two], &[]);
    let x = b.op("Sub", "probit_x", &[&x, &one], &[]);
    let negative = b.op("Less", "probit_negative", &[&x, &zero], &[]);
    let sign = b.op("Where", "probit_sign", &[&negative, &minus_one, &one], &[]);
    let lo = b.op("Sub", "probit_1mx", &[&one, &x], &[]);
    let hi = b.op("Add", "probit_1px", &[&one, &x], &[]);
    let t = b.op("Mul", "probit_t", &[&lo, &hi], &[]);
    let log = b.op("Log", "probit_log", &[&t], &[]);
    // onnxruntime's own 3.14159 (not pi): the constant it computes with.
    #[allow(clippy::approx_constant)]
    const ORT_PI: f32 = 3.14159;
    let c1 = b.f32_scalar("probit_c1", 2.0f32 / (ORT_PI * 0.147f32))?;
    let half = b.f32_scalar("probit_half", 0.5)?;
    let c2 = b.f32_scalar("probit_c2", 1.0f32 / 0.147f32)?;
    let half_log = b.op("Mul", "probit_half_log", &[&half, &log], &[]);
    let v = b.op("Add", "probit_v", &[&c1, &half_log], &[]);
    let v2 = b.op("Mul", "probit_v2", &[&c2, &log], &[]);
    let vv = b.op("Mul", "probit_vv", &[&v, &v], &[]);
    let d = b.op("Sub", "probit_d", &[&vv, &v2], &[]);
    let r = b.op("Sqrt", "probit_root", &[&d], &[]);
    let v3 = b.op("Sub", "probit_v3", &[&r, &v], &[]);
    let s = b.op("Sqrt", "probit_s", &[&v3], &[]);
    let e = b.op("Mul", "probit_erfinv", &[&sign, &s], &[]);
    let sqrt2 = b.f32_scalar("probit_sqrt2", std::f32::consts::SQRT_2)?;
    Ok(b.op("Mul", "probit", &[&sqrt2, &e], &[]))
}

/// The transform of a row of scores (`[N, K]`, over the last axis) as onnxruntime applies it
/// to two or more scores.
fn transform_rows(b: &mut Builder, z: &str, post: Post) -> Result<String> {
    Ok(match post {
        Post::None => z.to_string(),
        Post::Logistic => b.op("Sigmoid", "logistic", &[z], &[]),
        Post::Softmax => b.op("Softmax", "softmax", &[z], &[("axis", Attr::Int(-1))]),
        Post::Probit => probit(b, z)?,
        Post::SoftmaxZero => {
            // Scores within 1e-7 of zero are scaled by exp(-max) and left out of the sum.
            let axes = b.i64s("sz_axes", &[-1])?;
            let keep = [("keepdims", Attr::Int(1))];
            let max = b.op("ReduceMax", "sz_max", &[z, &axes], &keep);
            let abs = b.op("Abs", "sz_abs", &[z], &[]);
            let tiny = b.f32_scalar("sz_tiny", 1e-7)?;
            let counted = b.op("Greater", "sz_counted", &[&abs, &tiny], &[]);
            let shifted = b.op("Sub", "sz_shifted", &[z, &max], &[]);
            let e = b.op("Exp", "sz_exp", &[&shifted], &[]);
            let neg_max = b.op("Neg", "sz_neg_max", &[&max], &[]);
            let scale = b.op("Exp", "sz_scale", &[&neg_max], &[]);
            let small = b.op("Mul", "sz_small", &[z, &scale], &[]);
            let v = b.op("Where", "sz_values", &[&counted, &e, &small], &[]);
            let zero = b.f32_scalar("sz_zero", 0.0)?;
            let summed = b.op("Where", "sz_summed", &[&counted, &e, &zero], &[]);
            let sum = b.op("ReduceSum", "sz_sum", &[&summed, &axes], &keep);
            b.op("Div", "softmax_zero", &[&v, &sum], &[])
        }
    })
}

/// Columns `[N]` side by side as `[N, k]`.
fn columns(b: &mut Builder, name: &str, cols: &[&str]) -> Result<String> {
    let axis = b.i64s(&format!("{name}_axis"), &[1])?;
    let wide: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(k, c)| b.op("Unsqueeze", &format!("{name}_{k}"), &[c, &axis], &[]))
        .collect();
    let refs: Vec<&str> = wide.iter().map(String::as_str).collect();
    Ok(b.op("Concat", name, &refs, &[("axis", Attr::Int(1))]))
}

/// Column `k` (`[N]`) of `z` (`[N, K]`).
fn column(b: &mut Builder, name: &str, z: &str, k: i64) -> Result<String> {
    let index = b.constant(
        &format!("{name}_index"),
        HostTensor::from_vec(vec![], &[k])?,
    );
    Ok(b.op("Gather", name, &[z, &index], &[("axis", Attr::Int(1))]))
}

fn binarizer(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let threshold = a.float("threshold", 0.0)?;
    let mut b = Builder::new(node, &y);
    let xf = cast(&mut b, "x_f32", &x, "f32");
    let t = b.f32_scalar("threshold", threshold as f32)?;
    let above = b.op("Greater", "above", &[&xf, &t], &[]);
    b.op_to("CastLike", &y, &[&above, &x], &[]);
    Ok(b.finish())
}

/// A per-feature vector (`[F]`) or one value for all (`[]`) of an attribute.
fn per_feature(b: &mut Builder, name: &str, v: &[f64]) -> Result<String> {
    let v32 = f32s(v);
    let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
    f32_const(b, name, shape, &v32)
}

fn scaler(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let (scale, _) = a.values("scale")?;
    let (offset, _) = a.values("offset")?;
    if scale.is_empty() || scale.len() != offset.len() {
        return Err(a.bad(format!(
            "needs scale and offset of one length (1 or the feature count), not {} and {}",
            scale.len(),
            offset.len()
        )));
    }
    let mut b = Builder::new(node, &y);
    check_features(&mut b, node, offset.len());
    let xf = cast(&mut b, "x_f32", &x, "f32");
    let offset = per_feature(&mut b, "offset", &offset)?;
    let scale = per_feature(&mut b, "scale", &scale)?;
    let centered = b.op("Sub", "centered", &[&xf, &offset], &[]);
    b.op_to("Mul", &y, &[&centered, &scale], &[]);
    Ok(b.finish())
}

fn normalizer(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let norm = a.string("norm", "MAX")?;
    let mut b = Builder::new(node, &y);
    b.check_inputs(node, "Normalizer", &[]);
    let xf = cast(&mut b, "x_f32", &x, "f32");
    let axes = b.i64s("axes", &[-1])?;
    let keep = [("keepdims", Attr::Int(1))];
    let zero = b.f32_scalar("zero", 0.0)?;
    // Rows whose norm is zero pass through (onnxruntime's kernel).
    let (n, q) = match norm.as_str() {
        "MAX" => {
            let n = b.op("ReduceMax", "max", &[&xf, &axes], &keep);
            let q = b.op("Div", "quotient", &[&xf, &n], &[]);
            (n, q)
        }
        "L1" => {
            let n = b.op("ReduceL1", "l1", &[&xf, &axes], &keep);
            let q = b.op("Div", "quotient", &[&xf, &n], &[]);
            (n, q)
        }
        "L2" => {
            // sqrt(x^2 / sum x^2) with x's sign, as onnxruntime computes it.
            let sq = b.op("Mul", "square", &[&xf, &xf], &[]);
            let n = b.op("ReduceSum", "sum_sq", &[&sq, &axes], &keep);
            let r = b.op("Div", "ratio", &[&sq, &n], &[]);
            let r = b.op("Sqrt", "root", &[&r], &[]);
            let neg = b.op("Neg", "negated", &[&r], &[]);
            let below = b.op("Less", "below", &[&xf, &zero], &[]);
            let q = b.op("Where", "quotient", &[&below, &neg, &r], &[]);
            (n, q)
        }
        other => {
            return Err(a.bad(format!(
                "norm '{}' is not MAX, L1 or L2",
                other.escape_debug()
            )))
        }
    };
    let is_zero = b.op("Equal", "norm_is_zero", &[&n, &zero], &[]);
    b.op_to("Where", &y, &[&is_zero, &xf, &q], &[]);
    Ok(b.finish())
}

fn imputer(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let (floats, _) = a.values("imputed_value_floats")?;
    let ints = a.ints("imputed_value_int64s")?;
    if floats.is_empty() == ints.is_empty() {
        return Err(
            a.bad("needs imputed_value_floats or imputed_value_int64s (one of them, not both)")
        );
    }
    let mut b = Builder::new(node, &y);
    check_features(&mut b, node, floats.len().max(ints.len()));
    let (values, replaced) = if !floats.is_empty() {
        let replaced = a.float("replaced_value_float", 0.0)?;
        (per_feature(&mut b, "imputed", &floats)?, Ok(replaced))
    } else {
        let shape = if ints.len() == 1 {
            vec![]
        } else {
            vec![ints.len()]
        };
        let v = b.constant("imputed", HostTensor::from_vec(shape, &ints)?);
        (v, Err(a.int("replaced_value_int64", 0)?))
    };
    let values = b.op("CastLike", "imputed_t", &[&values, &x], &[]);
    let matches = match replaced {
        Ok(r) if r.is_nan() => b.op("IsNaN", "missing", &[&x], &[]),
        Ok(r) => {
            let r = b.f32_scalar("replaced", r as f32)?;
            let r = b.op("CastLike", "replaced_t", &[&r, &x], &[]);
            b.op("Equal", "missing", &[&x, &r], &[])
        }
        Err(r) => {
            let r = b.constant("replaced", HostTensor::from_vec(vec![], &[r])?);
            let r = b.op("CastLike", "replaced_t", &[&r, &x], &[]);
            b.op("Equal", "missing", &[&x, &r], &[])
        }
    };
    b.op_to("Where", &y, &[&matches, &values, &x], &[]);
    Ok(b.finish())
}

/// `x · Wᵀ + intercepts` in f32 for `coefficients` of `targets` rows: `[N, targets]`.
fn linear_scores(
    b: &mut Builder,
    a: &Attrs,
    x: &str,
    coefficients: &[f64],
    intercepts: Option<&[f64]>,
    targets: usize,
) -> Result<String> {
    if targets == 0 || coefficients.is_empty() || !coefficients.len().is_multiple_of(targets) {
        return Err(a.bad(format!(
            "has {} coefficients, not a multiple of its {targets} targets or classes",
            coefficients.len()
        )));
    }
    let features = coefficients.len() / targets;
    if features != 1 {
        let op = a.0.op.strip_prefix("ai.onnx.ml.").unwrap_or(&a.0.op);
        b.check_inputs(a.0, op, &[("features", Attr::Int(features as i64))]);
    }
    let xf = cast(b, "x_f32", x, "f32");
    let xr = rows(b, &xf)?;
    let w = f32_const(
        b,
        "coefficients",
        vec![targets, features],
        &f32s(coefficients),
    )?;
    let mut inputs = vec![xr, w];
    if let Some(c) = intercepts {
        inputs.push(f32_const(b, "intercepts", vec![targets], &f32s(c))?);
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    Ok(b.op("Gemm", "scores", &refs, &[("transB", Attr::Int(1))]))
}

fn linear_regressor(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let targets =
        usize::try_from(a.int("targets", 1)?).map_err(|_| a.bad("targets must not be negative"))?;
    let (coefficients, _) = a.values("coefficients")?;
    let (intercepts, _) = a.values("intercepts")?;
    let post = Post::parse(&a)?;
    let mut b = Builder::new(node, &y);
    // Intercepts of another length than the targets are ignored (onnxruntime).
    let intercepts = (intercepts.len() == targets).then_some(intercepts.as_slice());
    let scores = linear_scores(&mut b, &a, &x, &coefficients, intercepts, targets)?;
    // One target takes PROBIT only (onnxruntime's scoring of a single value).
    let post = if targets == 1 && post != Post::Probit {
        Post::None
    } else {
        post
    };
    let z = transform_rows(&mut b, &scores, post)?;
    b.op_to("Identity", &y, &[&z], &[]);
    Ok(b.finish())
}

fn linear_classifier(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, _) = io(node)?;
    let label_out = node.outputs.first().cloned().unwrap_or_default();
    let scores_out = node.outputs.get(1).filter(|s| !s.is_empty()).cloned();
    let labels = a.class_labels()?;
    let (coefficients, _) = a.values("coefficients")?;
    let (intercepts, _) = a.values("intercepts")?;
    let post = Post::parse(&a)?;
    let classes = intercepts.len();
    let mut b = Builder::new(node, &label_out);
    let scores = linear_scores(&mut b, &a, &x, &coefficients, Some(&intercepts), classes)?;
    let zero = b.f32_scalar("zero", 0.0)?;
    let (label, z) = if classes == 1 {
        // One score s: the second label where it is above 0, and the scores [1 - s, s]
        // (LOGISTIC: of the logistic of s; no other transform), as onnxruntime gives them.
        if labels.len() != 2 {
            return Err(a.bad(format!(
                "has one class of coefficients and {} class labels; it needs exactly 2",
                labels.len()
            )));
        }
        if post == Post::Probit {
            return Err(a.bad(
                "with one class of coefficients takes no PROBIT transform (onnxruntime leaves those scores out of order)",
            ));
        }
        let s = column(&mut b, "score", &scores, 0)?;
        let positive = b.op("Greater", "positive", &[&s, &zero], &[]);
        let pos = b.constant(
            "positive_label",
            HostTensor::from_vec(vec![], &[labels[1]])?,
        );
        let neg = b.constant(
            "negative_label",
            HostTensor::from_vec(vec![], &[labels[0]])?,
        );
        let label = b.op("Where", "label", &[&positive, &pos, &neg], &[]);
        let p = if post == Post::Logistic {
            b.op("Sigmoid", "logistic", &[&s], &[])
        } else {
            s
        };
        let one = b.f32_scalar("one", 1.0)?;
        let other = b.op("Sub", "other", &[&one, &p], &[]);
        (label, columns(&mut b, "two_scores", &[&other, &p])?)
    } else {
        if labels.len() < classes {
            return Err(a.bad(format!(
                "has {} class labels for {classes} classes",
                labels.len()
            )));
        }
        let best = b.op(
            "ArgMax",
            "best",
            &[&scores],
            &[("axis", Attr::Int(1)), ("keepdims", Attr::Int(0))],
        );
        let table = b.constant("labels", HostTensor::from_vec(vec![labels.len()], &labels)?);
        let label = b.op("Gather", "label", &[&table, &best], &[]);
        (label, transform_rows(&mut b, &scores, post)?)
    };
    b.op_to("Identity", &label_out, &[&label], &[]);
    if let Some(out) = scores_out {
        b.op_to("Identity", &out, &[&z], &[]);
    }
    Ok(b.finish())
}

/// How a branch node compares its feature `x` with its threshold `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    Member,
    Leaf,
}

impl Mode {
    fn parse(a: &Attrs, s: &str) -> Result<Mode> {
        Ok(match s {
            "BRANCH_LEQ" => Mode::Leq,
            "BRANCH_LT" => Mode::Lt,
            "BRANCH_GTE" => Mode::Gte,
            "BRANCH_GT" => Mode::Gt,
            "BRANCH_EQ" => Mode::Eq,
            "BRANCH_NEQ" => Mode::Neq,
            "LEAF" => Mode::Leaf,
            other => {
                return Err(a.bad(format!(
                    "node mode '{}' is not one of BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, LEAF",
                    other.escape_debug()
                )))
            }
        })
    }
}

/// Every node of every tree in one table (leaves loop to themselves), with each leaf's
/// weights per target.
struct Forest {
    feature: Vec<i64>,
    threshold: Vec<f64>,
    mode: Vec<Mode>,
    tracks_true: Vec<bool>,
    /// The members of each MEMBER node's set (empty for others).
    members: Vec<Vec<f64>>,
    true_next: Vec<i64>,
    false_next: Vec<i64>,
    roots: Vec<i64>,
    /// (target, weight) of each node.
    weights: Vec<Vec<(usize, f64)>>,
    targets: usize,
    /// The dtype of the thresholds (and, for TreeEnsemble, of the weights and output).
    dtype: DType,
}

impl Forest {
    fn new(dtype: DType, targets: usize) -> Forest {
        Forest {
            feature: Vec::new(),
            threshold: Vec::new(),
            mode: Vec::new(),
            tracks_true: Vec::new(),
            members: Vec::new(),
            true_next: Vec::new(),
            false_next: Vec::new(),
            roots: Vec::new(),
            weights: Vec::new(),
            targets,
            dtype,
        }
    }

    fn push_leaf(&mut self) -> usize {
        let k = self.feature.len();
        self.feature.push(0);
        self.threshold.push(0.0);
        self.mode.push(Mode::Leaf);
        self.tracks_true.push(false);
        self.members.push(Vec::new());
        self.true_next.push(k as i64);
        self.false_next.push(k as i64);
        self.weights.push(Vec::new());
        k
    }

    /// The most branch nodes on a path from a root; an error for a cycle.
    fn depth(&self, a: &Attrs) -> Result<usize> {
        let n = self.feature.len();
        // 0: unvisited, 1: on the current path, 2: done.
        let mut state = vec![0u8; n];
        let mut depth = vec![0usize; n];
        for &root in &self.roots {
            let mut stack = vec![(root as usize, false)];
            while let Some((v, children_done)) = stack.pop() {
                if children_done {
                    depth[v] = if self.mode[v] == Mode::Leaf {
                        0
                    } else {
                        1 + depth[self.true_next[v] as usize]
                            .max(depth[self.false_next[v] as usize])
                    };
                    state[v] = 2;
                    continue;
                }
                match state[v] {
                    2 => continue,
                    1 => return Err(a.bad("has a tree whose branches form a cycle")),
                    _ => {}
                }
                state[v] = 1;
                stack.push((v, true));
                if self.mode[v] != Mode::Leaf {
                    for c in [self.true_next[v], self.false_next[v]] {
                        match state[c as usize] {
                            1 => return Err(a.bad("has a tree whose branches form a cycle")),
                            0 => stack.push((c as usize, false)),
                            _ => {}
                        }
                    }
                }
            }
        }
        let d = self
            .roots
            .iter()
            .map(|&r| depth[r as usize])
            .max()
            .unwrap_or(0);
        if d > MAX_TREE_DEPTH {
            return Err(a.bad(format!(
                "has a tree {d} levels deep, more than the {MAX_TREE_DEPTH} supported"
            )));
        }
        Ok(d)
    }
}

fn len_check(a: &Attrs, what: &[(&str, usize)], n: usize) -> Result<()> {
    for (name, len) in what {
        if *len != n {
            return Err(a.bad(format!("has {len} {name} for {n} nodes")));
        }
    }
    Ok(())
}

/// TreeEnsembleRegressor and TreeEnsembleClassifier (ai.onnx.ml 1 to 3): nodes named by
/// (tree id, node id), weights attached to leaves by the same pair.
fn forest_v3(a: &Attrs, classifier: bool) -> Result<Forest> {
    let tree_ids = a.ints("nodes_treeids")?;
    let node_ids = a.ints("nodes_nodeids")?;
    let features = a.ints("nodes_featureids")?;
    let (values, dtype) = a.values("nodes_values")?;
    let modes = a.strings("nodes_modes")?;
    let true_ids = a.ints("nodes_truenodeids")?;
    let false_ids = a.ints("nodes_falsenodeids")?;
    let tracks = a.ints("nodes_missing_value_tracks_true")?;
    let n = tree_ids.len();
    if n == 0 {
        return Err(a.bad("has no nodes"));
    }
    len_check(
        a,
        &[
            ("nodes_nodeids", node_ids.len()),
            ("nodes_featureids", features.len()),
            ("nodes_modes", modes.len()),
            ("nodes_truenodeids", true_ids.len()),
            ("nodes_falsenodeids", false_ids.len()),
        ],
        n,
    )?;
    if !values.is_empty() && values.len() != n {
        return Err(a.bad(format!("has {} nodes_values for {n} nodes", values.len())));
    }
    if !tracks.is_empty() && tracks.len() != n {
        return Err(a.bad(format!(
            "has {} nodes_missing_value_tracks_true for {n} nodes",
            tracks.len()
        )));
    }
    let mut index: HashMap<(i64, i64), usize> = HashMap::new();
    for k in 0..n {
        if index.insert((tree_ids[k], node_ids[k]), k).is_some() {
            return Err(a.bad(format!(
                "has node {} of tree {} twice",
                node_ids[k], tree_ids[k]
            )));
        }
    }
    let mut f = Forest::new(dtype, 0);
    let mut child = vec![false; n];
    for k in 0..n {
        let mode = Mode::parse(a, &modes[k])?;
        f.mode.push(mode);
        f.threshold.push(values.get(k).copied().unwrap_or(0.0));
        f.tracks_true.push(tracks.get(k).is_some_and(|&t| t != 0));
        f.members.push(Vec::new());
        f.weights.push(Vec::new());
        if mode == Mode::Leaf {
            f.feature.push(0);
            f.true_next.push(k as i64);
            f.false_next.push(k as i64);
            continue;
        }
        if features[k] < 0 {
            return Err(a.bad(format!("has a negative feature id {}", features[k])));
        }
        f.feature.push(features[k]);
        for (ids, next) in [
            (&true_ids, &mut f.true_next),
            (&false_ids, &mut f.false_next),
        ] {
            let Some(&c) = index.get(&(tree_ids[k], ids[k])) else {
                return Err(a.bad(format!(
                    "node {} of tree {} branches to node {}, which the tree does not have",
                    node_ids[k], tree_ids[k], ids[k]
                )));
            };
            child[c] = true;
            next.push(c as i64);
        }
    }
    // Roots: the nodes no branch leads to, one per tree, in the order trees first appear.
    let mut seen = std::collections::HashSet::new();
    for k in 0..n {
        if !child[k] && seen.insert(tree_ids[k]) {
            f.roots.push(k as i64);
        }
    }
    if let Some(t) = tree_ids.iter().find(|t| !seen.contains(t)) {
        return Err(a.bad(format!(
            "has a tree whose branches form a cycle (every node of tree {t} is a branch's child)"
        )));
    }
    let prefix = if classifier { "class" } else { "target" };
    let w_tree = a.ints(&format!("{prefix}_treeids"))?;
    let w_node = a.ints(&format!("{prefix}_nodeids"))?;
    let w_id = a.ints(&format!("{prefix}_ids"))?;
    let (w_value, _) = a.values(&format!("{prefix}_weights"))?;
    len_check(
        a,
        &[
            (&format!("{prefix}_nodeids"), w_node.len()),
            (&format!("{prefix}_ids"), w_id.len()),
            (&format!("{prefix}_weights"), w_value.len()),
        ],
        w_tree.len(),
    )
    .map_err(|_| {
        a.bad(format!(
            "needs {prefix}_treeids, _nodeids, _ids and _weights of one length"
        ))
    })?;
    f.targets = if classifier {
        a.class_labels()?.len()
    } else {
        usize::try_from(a.int("n_targets", 1)?).map_err(|_| a.bad("n_targets is negative"))?
    };
    for k in 0..w_tree.len() {
        let Some(&node) = index.get(&(w_tree[k], w_node[k])) else {
            return Err(a.bad(format!(
                "has a weight for node {} of tree {}, which it does not have",
                w_node[k], w_tree[k]
            )));
        };
        let target = usize::try_from(w_id[k])
            .ok()
            .filter(|&t| t < f.targets)
            .ok_or_else(|| {
                a.bad(format!(
                    "has a weight for {} {}, not below its {} {}",
                    if classifier { "class" } else { "target" },
                    w_id[k],
                    f.targets,
                    if classifier { "labels" } else { "targets" },
                ))
            })?;
        f.weights[node].push((target, w_value[k]));
    }
    Ok(f)
}

/// TreeEnsemble (ai.onnx.ml 5): branch nodes and leaves in their own lists, each branch
/// naming whether its children are nodes or leaves.
fn forest_v5(a: &Attrs) -> Result<Forest> {
    let features = a.ints("nodes_featureids")?;
    let (splits, dtype) = a.values("nodes_splits")?;
    let modes = a.ints("nodes_modes")?;
    let true_ids = a.ints("nodes_truenodeids")?;
    let true_leafs = a.ints("nodes_trueleafs")?;
    let false_ids = a.ints("nodes_falsenodeids")?;
    let false_leafs = a.ints("nodes_falseleafs")?;
    let tracks = a.ints("nodes_missing_value_tracks_true")?;
    let (members, _) = a.values("membership_values")?;
    let roots = a.ints("tree_roots")?;
    let leaf_targets = a.ints("leaf_targetids")?;
    let (leaf_weights, weight_dtype) = a.values("leaf_weights")?;
    let n = features.len();
    len_check(
        a,
        &[
            ("nodes_splits", splits.len()),
            ("nodes_modes", modes.len()),
            ("nodes_truenodeids", true_ids.len()),
            ("nodes_trueleafs", true_leafs.len()),
            ("nodes_falsenodeids", false_ids.len()),
            ("nodes_falseleafs", false_leafs.len()),
        ],
        n,
    )?;
    if !tracks.is_empty() && tracks.len() != n {
        return Err(a.bad(format!(
            "has {} nodes_missing_value_tracks_true for {n} nodes",
            tracks.len()
        )));
    }
    if leaf_targets.len() != leaf_weights.len() {
        return Err(a.bad(format!(
            "has {} leaf_targetids for {} leaf_weights",
            leaf_targets.len(),
            leaf_weights.len()
        )));
    }
    let leaves = leaf_weights.len();
    let targets =
        usize::try_from(a.int("n_targets", 1)?).map_err(|_| a.bad("n_targets is negative"))?;
    let mut f = Forest::new(
        if splits.is_empty() {
            weight_dtype
        } else {
            dtype
        },
        targets,
    );
    let mut member_sets = members.split(|v| v.is_nan()).map(|s| s.to_vec());
    for k in 0..n {
        let mode = match modes[k] {
            0 => Mode::Leq,
            1 => Mode::Lt,
            2 => Mode::Gte,
            3 => Mode::Gt,
            4 => Mode::Eq,
            5 => Mode::Neq,
            6 => Mode::Member,
            m => return Err(a.bad(format!("node mode {m} is not 0 to 6"))),
        };
        if features[k] < 0 {
            return Err(a.bad(format!("has a negative feature id {}", features[k])));
        }
        f.feature.push(features[k]);
        f.threshold.push(splits[k]);
        f.mode.push(mode);
        f.tracks_true.push(tracks.get(k).is_some_and(|&t| t != 0));
        f.members.push(if mode == Mode::Member {
            member_sets
                .next()
                .ok_or_else(|| a.bad("has fewer membership sets than MEMBER nodes"))?
        } else {
            Vec::new()
        });
        f.weights.push(Vec::new());
    }
    let to_global = |id: i64, leaf: bool| -> Result<i64> {
        let (limit, base) = if leaf { (leaves, n) } else { (n, 0) };
        usize::try_from(id)
            .ok()
            .filter(|&i| i < limit)
            .map(|i| (i + base) as i64)
            .ok_or_else(|| {
                a.bad(format!(
                    "branches to {} {id}, which it does not have",
                    if leaf { "leaf" } else { "node" }
                ))
            })
    };
    for k in 0..n {
        f.true_next
            .push(to_global(true_ids[k], true_leafs[k] != 0)?);
        f.false_next
            .push(to_global(false_ids[k], false_leafs[k] != 0)?);
    }
    for l in 0..leaves {
        let g = f.push_leaf();
        let target = usize::try_from(leaf_targets[l])
            .ok()
            .filter(|&t| t < f.targets)
            .ok_or_else(|| {
                a.bad(format!(
                    "has leaf target {}, not below its {} targets",
                    leaf_targets[l], f.targets
                ))
            })?;
        f.weights[g].push((target, leaf_weights[l]));
    }
    for &r in &roots {
        let k = usize::try_from(r)
            .ok()
            .filter(|&k| k < n)
            .ok_or_else(|| a.bad(format!("has tree root {r}, not one of its {n} nodes")))?;
        // A tree that is one leaf: a root whose branches both lead to that leaf.
        let single_leaf = true_leafs[k] != 0 && false_leafs[k] != 0 && true_ids[k] == false_ids[k];
        f.roots.push(if single_leaf {
            f.true_next[k]
        } else {
            k as i64
        });
    }
    if f.roots.is_empty() {
        return Err(a.bad("has no trees"));
    }
    Ok(f)
}

#[derive(Clone, Copy, PartialEq)]
enum Aggregate {
    Sum,
    Average,
    Min,
    Max,
}

/// Which rows the trees give a target (class) a weight: every row (every leaf some tree
/// reaches has one), none (no reachable leaf has one), or some (found per row).
#[derive(Clone, Copy, PartialEq)]
enum Coverage {
    Every,
    None,
    Some,
}

/// Whether a row's trees give a target (class) a weight: for every row, for none, or per row
/// (a `[N]` bool value).
enum Has {
    Always,
    Never,
    PerSample(String),
}

fn tree_ensemble(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let op = node.op.strip_prefix("ai.onnx.ml.").unwrap_or(&node.op);
    let classifier = op == "TreeEnsembleClassifier";
    let (x, _) = io(node)?;
    let first_out = node.outputs.first().cloned().unwrap_or_default();
    let forest = if op == "TreeEnsemble" {
        forest_v5(&a)?
    } else {
        forest_v3(&a, classifier)?
    };
    let aggregate = match a.get("aggregate_function") {
        Some(Attr::Int(v)) => match v {
            0 => Aggregate::Average,
            1 => Aggregate::Sum,
            2 => Aggregate::Min,
            3 => Aggregate::Max,
            v => return Err(a.bad(format!("aggregate_function {v} is not 0 to 3"))),
        },
        _ => match a.string("aggregate_function", "SUM")?.as_str() {
            "SUM" => Aggregate::Sum,
            "AVERAGE" => Aggregate::Average,
            "MIN" => Aggregate::Min,
            "MAX" => Aggregate::Max,
            other => {
                return Err(a.bad(format!(
                    "aggregate_function '{}' is not SUM, AVERAGE, MIN or MAX",
                    other.escape_debug()
                )))
            }
        },
    };
    let aggregate = if classifier {
        Aggregate::Sum
    } else {
        aggregate
    };
    let post = Post::parse(&a)?;
    let (base, _) = a.values("base_values")?;
    if forest.targets == 0 {
        return Err(a.bad("has no targets or class labels"));
    }
    let depth = forest.depth(&a)?;
    // v1-3 outputs are f32; TreeEnsemble's are its weights' type.
    let out_dtype = if op == "TreeEnsemble" {
        forest.dtype
    } else {
        DType::F32
    };
    let mut b = Builder::new(node, &first_out);
    // X holds at least every feature a branch reads.
    let read = forest
        .feature
        .iter()
        .zip(&forest.mode)
        .filter(|(_, m)| **m != Mode::Leaf)
        .map(|(&f, _)| f.saturating_add(1))
        .max();
    if let Some(at_least) = read {
        b.check_inputs(node, op, &[("min_features", Attr::Int(at_least))]);
    }
    let xr = rows(&mut b, &x)?;
    let leaf_node = walk(&mut b, &forest, &xr, depth)?;

    // Each node's weight per target (summed, or the least or greatest of a leaf's), gathered
    // at each tree's leaf and combined over the trees.
    let g = forest.feature.len();
    let k = forest.targets;
    let trees = forest.roots.len();
    let empty = match aggregate {
        Aggregate::Min => f64::INFINITY,
        Aggregate::Max => f64::NEG_INFINITY,
        _ => 0.0,
    };
    let mut table = vec![empty; g * k];
    let mut has = vec![false; g * k];
    // A single-target regressor scores a leaf by its first weight, and a leaf without one as
    // 0, also for MIN and MAX (onnxruntime's one-output path).
    let first_weight_only: Vec<Vec<(usize, f64)>>;
    let weights = if k == 1 && !classifier {
        first_weight_only = (0..g)
            .map(|v| match forest.weights[v].first() {
                Some(&w) => vec![w],
                None if forest.mode[v] == Mode::Leaf => vec![(0, 0.0)],
                None => Vec::new(),
            })
            .collect();
        &first_weight_only
    } else {
        &forest.weights
    };
    for (v, ws) in weights.iter().enumerate() {
        for &(t, w) in ws {
            let cell = &mut table[v * k + t];
            *cell = match aggregate {
                Aggregate::Min if has[v * k + t] => cell.min(w),
                Aggregate::Max if has[v * k + t] => cell.max(w),
                Aggregate::Min | Aggregate::Max => w,
                _ => *cell + w,
            };
            has[v * k + t] = true;
        }
    }
    let table = typed_const(&mut b, "leaf_values", vec![g, k], &table, out_dtype)?;
    let values = b.op("Gather", "tree_values", &[&table, &leaf_node], &[]);
    let tree_axis = b.i64s("tree_axis", &[1])?;
    let drop = [("keepdims", Attr::Int(0))];
    let combined = match aggregate {
        Aggregate::Sum | Aggregate::Average => {
            b.op("ReduceSum", "sum", &[&values, &tree_axis], &drop)
        }
        Aggregate::Min => b.op("ReduceMin", "min", &[&values, &tree_axis], &drop),
        Aggregate::Max => b.op("ReduceMax", "max", &[&values, &tree_axis], &drop),
    };
    // Per target: does some tree give it a weight for every leaf, or none at all?
    let reachable_leaves = forest.reachable_leaves();
    let mut has_kind = Vec::with_capacity(k);
    for t in 0..k {
        let always = reachable_leaves
            .iter()
            .any(|ls| ls.iter().all(|&l| has[l * k + t]));
        let never = reachable_leaves
            .iter()
            .all(|ls| ls.iter().all(|&l| !has[l * k + t]));
        has_kind.push(if always {
            Coverage::Every
        } else if never {
            Coverage::None
        } else {
            Coverage::Some
        });
    }
    let has_per_sample = if has_kind.contains(&Coverage::Some) {
        let flags: Vec<f32> = has.iter().map(|&h| if h { 1.0 } else { 0.0 }).collect();
        let flags = f32_const(&mut b, "has_weight", vec![g, k], &flags)?;
        let at = b.op("Gather", "tree_has", &[&flags, &leaf_node], &[]);
        let any = b.op("ReduceMax", "any_has", &[&at, &tree_axis], &drop);
        let zero = b.f32_scalar("has_zero", 0.0)?;
        Some(b.op("Greater", "has", &[&any, &zero], &[]))
    } else {
        None
    };
    let score = match aggregate {
        Aggregate::Average => {
            let n = typed_const(&mut b, "tree_count", vec![], &[trees as f64], out_dtype)?;
            b.op("Div", "average", &[&combined, &n], &[])
        }
        _ => combined,
    };
    if classifier {
        let labels = a.class_labels()?;
        let has = Presence {
            kind: &has_kind,
            per_sample: has_per_sample.as_deref(),
        };
        classify(
            &mut b, &a, node, &forest, &score, &base, &labels, post, &has,
        )?;
        return Ok(b.finish());
    }
    // Base values are added where there is one per target.
    let score = if base.len() == k {
        let base = typed_const(&mut b, "base_values", vec![k], &base, out_dtype)?;
        b.op("Add", "with_base", &[&score, &base], &[])
    } else {
        score
    };
    // A target that no reached leaf gives a weight scores 0, without its base value, before
    // the post transform (as onnxruntime scores it; single targets always have a weight here).
    let score = if has_kind.iter().any(|&h| h != Coverage::Every) {
        let zero = typed_const(&mut b, "no_weight", vec![], &[0.0], out_dtype)?;
        let mask = match &has_per_sample {
            Some(h) => h.clone(),
            None => {
                let flags: Vec<bool> = has_kind.iter().map(|&h| h == Coverage::Every).collect();
                b.constant("has_weight", HostTensor::from_vec(vec![k], &flags)?)
            }
        };
        b.op("Where", "scored", &[&mask, &score, &zero], &[])
    } else {
        score
    };
    let post = if k == 1 && post != Post::Probit {
        Post::None
    } else {
        post
    };
    let y = if post == Post::None {
        score
    } else {
        // The transforms compute in f32.
        let s32 = cast(&mut b, "score_f32", &score, "f32");
        let t = transform_rows(&mut b, &s32, post)?;
        b.op("CastLike", "transformed", &[&t, &score], &[])
    };
    b.op_to("Identity", &first_out, &[&y], &[]);
    Ok(b.finish())
}

fn typed_const(
    b: &mut Builder,
    name: &str,
    shape: Vec<usize>,
    v: &[f64],
    dtype: DType,
) -> Result<String> {
    let t = HostTensor::from_vec(shape, v)?;
    Ok(b.constant(name, cast_host(&t, dtype)?))
}

impl Forest {
    /// The leaves each tree can reach.
    fn reachable_leaves(&self) -> Vec<Vec<usize>> {
        self.roots
            .iter()
            .map(|&r| {
                let mut out = Vec::new();
                let mut seen = std::collections::HashSet::new();
                let mut stack = vec![r as usize];
                while let Some(v) = stack.pop() {
                    if !seen.insert(v) {
                        continue;
                    }
                    if self.mode[v] == Mode::Leaf {
                        out.push(v);
                    } else {
                        stack.push(self.true_next[v] as usize);
                        stack.push(self.false_next[v] as usize);
                    }
                }
                out
            })
            .collect()
    }
}

/// Walks every tree for every row of `xr` with TreeWalk (all levels in one dispatch): each
/// node's feature, children and rule bits in one i32 table. Returns each tree's leaf,
/// `[N, trees]` (i32).
fn walk_in_one_dispatch(b: &mut Builder, f: &Forest, xr: &str, depth: usize) -> Result<String> {
    use crate::ops::tree_walk::rule;
    let g = f.feature.len();
    let mut table = Vec::with_capacity(g * 4);
    for v in 0..g {
        let m = f.mode[v];
        let mut bits = 0;
        if matches!(m, Mode::Leq | Mode::Lt | Mode::Neq) {
            bits |= rule::LESS;
        }
        if matches!(m, Mode::Leq | Mode::Gte | Mode::Eq) {
            bits |= rule::EQUAL;
        }
        if matches!(m, Mode::Gte | Mode::Gt | Mode::Neq) {
            bits |= rule::GREATER;
        }
        if f.tracks_true[v] || m == Mode::Neq {
            bits |= rule::NAN;
        }
        if m == Mode::Leaf {
            bits = rule::LEAF;
        }
        table.extend([
            f.feature[v] as i32,
            f.true_next[v] as i32,
            f.false_next[v] as i32,
            bits,
        ]);
    }
    let nodes = b.constant("nodes", HostTensor::from_vec(vec![g, 4], &table)?);
    // TreeWalk brings the thresholds to float rows' type, and integer rows to the thresholds'
    // (as onnxruntime compares integer features).
    let thresholds = typed_const(b, "thresholds", vec![g], &f.threshold, f.dtype)?;
    let roots: Vec<i32> = f.roots.iter().map(|&r| r as i32).collect();
    let roots = b.constant("roots", HostTensor::from_vec(vec![roots.len()], &roots)?);
    Ok(b.op(
        "TreeWalk",
        "leaves",
        &[xr, &nodes, &thresholds, &roots],
        &[("depth", Attr::Int(depth as i64))],
    ))
}

/// Walks every tree for every row of `xr` (`[N, F]`): one gather of each tree's current node's
/// feature and one comparison per level (forests with set membership, which TreeWalk does not
/// test). Returns each tree's leaf, `[N, trees]` (i64).
fn walk(b: &mut Builder, f: &Forest, xr: &str, depth: usize) -> Result<String> {
    let g = f.feature.len();
    if !f.mode.contains(&Mode::Member) && g < i32::MAX as usize {
        return walk_in_one_dispatch(b, f, xr, depth);
    }
    let branch_modes: std::collections::HashSet<Mode> = f
        .mode
        .iter()
        .copied()
        .filter(|&m| m != Mode::Leaf)
        .collect();
    let tracks: std::collections::HashSet<bool> = f
        .mode
        .iter()
        .zip(&f.tracks_true)
        .filter(|(m, _)| **m != Mode::Leaf)
        .map(|(_, &t)| t)
        .collect();
    // One mode and one missing-value rule for all branches: one comparison. Else each branch's
    // rule from tables: which of x < t, x == t, x > t, NaN, membership send it true.
    let single =
        (branch_modes.len() <= 1 && tracks.len() <= 1 && !branch_modes.contains(&Mode::Member))
            .then(|| {
                (
                    branch_modes.iter().next().copied().unwrap_or(Mode::Leq),
                    tracks.contains(&true),
                )
            });
    let max_members = f.members.iter().map(Vec::len).max().unwrap_or(0);
    let tables = |b: &mut Builder| -> Result<[String; 5]> {
        let mut cols: [Vec<bool>; 5] = Default::default();
        for v in 0..g {
            let m = f.mode[v];
            cols[0].push(matches!(m, Mode::Leq | Mode::Lt | Mode::Neq));
            cols[1].push(matches!(m, Mode::Leq | Mode::Gte | Mode::Eq));
            cols[2].push(matches!(m, Mode::Gte | Mode::Gt | Mode::Neq));
            cols[3].push(m != Mode::Leaf && (f.tracks_true[v] || m == Mode::Neq));
            cols[4].push(m == Mode::Member);
        }
        let mut names: [String; 5] = Default::default();
        for (c, name) in ["on_less", "on_equal", "on_greater", "on_nan", "on_member"]
            .iter()
            .enumerate()
        {
            names[c] = b.constant(name, HostTensor::from_vec(vec![g], &cols[c])?);
        }
        Ok(names)
    };
    let rule_tables = if single.is_none() {
        Some(tables(b)?)
    } else {
        None
    };
    let member_table = if branch_modes.contains(&Mode::Member) {
        // Each node's set, padded with NaN (which equals nothing).
        let mut t = vec![f64::NAN; g * max_members.max(1)];
        for (v, s) in f.members.iter().enumerate() {
            for (j, &m) in s.iter().enumerate() {
                t[v * max_members.max(1) + j] = m;
            }
        }
        Some(typed_const(
            b,
            "member_sets",
            vec![g, max_members.max(1)],
            &t,
            f.dtype,
        )?)
    } else {
        None
    };
    let thresholds = typed_const(b, "thresholds", vec![g], &f.threshold, f.dtype)?;
    let thresholds = b.op("CastLike", "thresholds_t", &[&thresholds, xr], &[]);
    let features = b.constant("features", HostTensor::from_vec(vec![g], &f.feature)?);
    let true_next = b.constant("true_next", HostTensor::from_vec(vec![g], &f.true_next)?);
    let false_next = b.constant("false_next", HostTensor::from_vec(vec![g], &f.false_next)?);
    let roots = b.constant(
        "roots",
        HostTensor::from_vec(vec![f.roots.len()], &f.roots)?,
    );
    let mut current = roots;
    for level in 0..depth.max(1) {
        let p = |s: &str| format!("l{level}_{s}");
        let feature = b.op("Gather", &p("feature"), &[&features, &current], &[]);
        let x = if level == 0 {
            // The roots are the same for every row: one gather of their columns.
            b.op(
                "Gather",
                &p("x"),
                &[xr, &feature],
                &[("axis", Attr::Int(1))],
            )
        } else {
            b.op(
                "GatherElements",
                &p("x"),
                &[xr, &feature],
                &[("axis", Attr::Int(1))],
            )
        };
        let t = b.op("Gather", &p("t"), &[&thresholds, &current], &[]);
        let go = match single {
            Some((mode, nan_true)) => {
                let cmp = match mode {
                    Mode::Leq => b.op("LessOrEqual", &p("go_cmp"), &[&x, &t], &[]),
                    Mode::Lt => b.op("Less", &p("go_cmp"), &[&x, &t], &[]),
                    Mode::Gte => b.op("GreaterOrEqual", &p("go_cmp"), &[&x, &t], &[]),
                    Mode::Gt => b.op("Greater", &p("go_cmp"), &[&x, &t], &[]),
                    Mode::Eq => b.op("Equal", &p("go_cmp"), &[&x, &t], &[]),
                    _ => {
                        let eq = b.op("Equal", &p("go_eq"), &[&x, &t], &[]);
                        b.op("Not", &p("go_cmp"), &[&eq], &[])
                    }
                };
                if nan_true || level == 0 {
                    // At level 0 the NaN test also refuses integer features (IsNaN takes
                    // floats): their thresholds would be truncated.
                    let nan = b.op("IsNaN", &p("features_must_be_float"), &[&x], &[]);
                    let nan = if nan_true {
                        nan
                    } else {
                        let never =
                            b.constant(&p("never"), HostTensor::from_vec(vec![], &[false])?);
                        b.op("And", &p("nan_off"), &[&nan, &never], &[])
                    };
                    b.op("Or", &p("go"), &[&cmp, &nan], &[])
                } else {
                    cmp
                }
            }
            None => {
                let [on_less, on_equal, on_greater, on_nan, on_member] =
                    rule_tables.clone().unwrap_or_default();
                let mut terms = Vec::new();
                for (cmp, table) in [
                    ("Less", &on_less),
                    ("Equal", &on_equal),
                    ("Greater", &on_greater),
                ] {
                    let c = b.op(cmp, &p(&format!("is_{cmp}")), &[&x, &t], &[]);
                    let rule = b.op(
                        "Gather",
                        &p(&format!("rule_{cmp}")),
                        &[table, &current],
                        &[],
                    );
                    terms.push(b.op("And", &p(&format!("go_{cmp}")), &[&c, &rule], &[]));
                }
                let nan = b.op("IsNaN", &p("features_must_be_float"), &[&x], &[]);
                let rule = b.op("Gather", &p("rule_nan"), &[&on_nan, &current], &[]);
                terms.push(b.op("And", &p("go_nan"), &[&nan, &rule], &[]));
                if let Some(sets) = &member_table {
                    let set = b.op("Gather", &p("set"), &[sets, &current], &[]);
                    let set = b.op("CastLike", &p("set_t"), &[&set, &x], &[]);
                    let axis = b.i64s(&p("member_axis"), &[-1])?;
                    let xs = b.op("Unsqueeze", &p("x_wide"), &[&x, &axis], &[]);
                    let eq = b.op("Equal", &p("in_set_each"), &[&xs, &set], &[]);
                    let eq = cast(b, &p("in_set_f"), &eq, "f32");
                    let any = b.op(
                        "ReduceMax",
                        &p("in_set_any"),
                        &[&eq, &axis],
                        &[("keepdims", Attr::Int(0))],
                    );
                    let half = b.f32_scalar(&p("half"), 0.5)?;
                    let member = b.op("Greater", &p("in_set"), &[&any, &half], &[]);
                    let rule = b.op("Gather", &p("rule_member"), &[&on_member, &current], &[]);
                    terms.push(b.op("And", &p("go_member"), &[&member, &rule], &[]));
                }
                let mut go = terms[0].clone();
                for (j, term) in terms.iter().enumerate().skip(1) {
                    go = b.op("Or", &p(&format!("go_{j}")), &[&go, term], &[]);
                }
                go
            }
        };
        let yes = b.op("Gather", &p("true_next"), &[&true_next, &current], &[]);
        let no = b.op("Gather", &p("false_next"), &[&false_next, &current], &[]);
        current = b.op("Where", &p("next"), &[&go, &yes, &no], &[]);
    }
    Ok(current)
}

/// Which classes the trees give a weight, per class (with `per_sample`, `[N, classes]` bool,
/// for those covered in some rows).
struct Presence<'a> {
    kind: &'a [Coverage],
    per_sample: Option<&'a str>,
}

impl Presence<'_> {
    fn of(&self, b: &mut Builder, t: usize) -> Result<Has> {
        Ok(match self.kind[t] {
            Coverage::Every => Has::Always,
            Coverage::None => Has::Never,
            Coverage::Some => Has::PerSample(column(
                b,
                &format!("has_{t}"),
                self.per_sample.unwrap_or_default(),
                t as i64,
            )?),
        })
    }
}

/// Zeros shaped like `p` (`[N]`).
fn zeros_like(b: &mut Builder, name: &str, p: &str) -> Result<String> {
    let zero = b.f32_scalar(&format!("{name}_zero"), 0.0)?;
    let shape = b.op("Shape", &format!("{name}_shape"), &[p], &[]);
    Ok(b.op("Expand", name, &[&zero, &shape], &[]))
}

/// TreeEnsembleClassifier's labels and scores from the summed class weights `score`
/// (`[N, classes]`), as onnxruntime's classifier finishes them.
#[allow(clippy::too_many_arguments)]
fn classify(
    b: &mut Builder,
    a: &Attrs,
    node: &Node,
    f: &Forest,
    score: &str,
    base: &[f64],
    labels: &[i64],
    post: Post,
    has: &Presence,
) -> Result<()> {
    let k = labels.len();
    let label_out = node.outputs.first().cloned().unwrap_or_default();
    let scores_out = node.outputs.get(1).filter(|s| !s.is_empty()).cloned();
    let zero = b.f32_scalar("zero", 0.0)?;
    let label_table = b.constant("labels", HostTensor::from_vec(vec![k], labels)?);
    let (label, z) = if k > 2 {
        if !base.is_empty() && base.len() != k {
            return Err(a.bad(format!("has {} base_values for {k} classes", base.len())));
        }
        let s = if base.is_empty() {
            score.to_string()
        } else {
            let bv = f32_const(b, "base_values", vec![k], &f32s(base))?;
            b.op("Add", "with_base", &[score, &bv], &[])
        };
        // The label: the first class of the highest score among those with a weight (every
        // class once there are base values).
        let masked = if !base.is_empty() || has.kind.iter().all(|&h| h == Coverage::Every) {
            s.clone()
        } else {
            let mask = match has.per_sample {
                Some(m) => m.to_string(),
                None => {
                    let flags: Vec<bool> = has.kind.iter().map(|&h| h == Coverage::Every).collect();
                    b.constant("has_mask", HostTensor::from_vec(vec![k], &flags)?)
                }
            };
            let low = b.f32_scalar("lowest", f32::NEG_INFINITY)?;
            b.op("Where", "masked", &[&mask, &s, &low], &[])
        };
        let best = b.op(
            "ArgMax",
            "best",
            &[&masked],
            &[("axis", Attr::Int(1)), ("keepdims", Attr::Int(0))],
        );
        let label = b.op("Gather", "label", &[&label_table, &best], &[]);
        (label, transform_rows(b, &s, post)?)
    } else if k == 2 {
        let weight_classes: std::collections::HashSet<usize> = f
            .weights
            .iter()
            .flat_map(|ws| ws.iter().map(|&(t, _)| t))
            .collect();
        let all_positive = f.weights.iter().flatten().all(|&(_, w)| w >= 0.0);
        let binary_case = weight_classes.len() == 1;
        let s0 = column(b, "s0", score, 0)?;
        let s1 = column(b, "s1", score, 1)?;
        let h0 = has.of(b, 0)?;
        let h1 = has.of(b, 1)?;
        // Per row: the scores p0, p1, and whether a row with class 1 unscored keeps one
        // score (expanded to two below) or two; `open_wa` is onnxruntime's rule for expanding
        // one score when the labels do not set it.
        let (p0, p1, single, open_wa) = match base.len() {
            2 => {
                let b1 = b.f32_scalar("base_1", base[1] as f32)?;
                let b0 = b.f32_scalar("base_0", base[0] as f32)?;
                // Class 1 scored: p1 = base1 + s0 and p0 = -p1 (onnxruntime's reading of two
                // base values); else each class adds its base value.
                let a1 = b.op("Add", "p1_a", &[&b1, &s0], &[]);
                let a0 = b.op("Neg", "p0_a", &[&a1], &[]);
                let c1 = b.op("Add", "p1_b", &[&s1, &b1], &[]);
                let c0 = b.op("Add", "p0_b", &[&s0, &b0], &[]);
                let (p0, p1) = match &h1 {
                    Has::Always => (a0, a1),
                    Has::Never => (c0, c1),
                    Has::PerSample(h) => (
                        b.op("Where", "p0", &[h, &a0, &c0], &[]),
                        b.op("Where", "p1", &[h, &a1, &c1], &[]),
                    ),
                };
                (p0, p1, false, -1)
            }
            1 => {
                let b0 = b.f32_scalar("base_0", base[0] as f32)?;
                let p0 = b.op("Add", "p0", &[&s0, &b0], &[]);
                (p0, s1.clone(), true, -1)
            }
            0 => (s0.clone(), s1.clone(), true, 3),
            n => return Err(a.bad(format!("has {n} base_values for 2 classes"))),
        };
        // The weight deciding the label: p1 where class 1 has a weight, else p0 where class 0
        // has one, else 0.
        let from_p0 = match &h0 {
            Has::Always => p0.clone(),
            Has::Never => zero.clone(),
            Has::PerSample(h) => b.op("Where", "w_p0", &[h, &p0, &zero], &[]),
        };
        let weight = match &h1 {
            Has::Always => p1.clone(),
            Has::Never => from_p0,
            Has::PerSample(h) => b.op("Where", "w", &[h, &p1, &from_p0], &[]),
        };
        let (threshold, wa) = match (binary_case, all_positive) {
            (true, true) => (0.5, 0),
            (true, false) => (0.0, 2),
            (false, _) => (0.0, open_wa),
        };
        let t = b.f32_scalar("label_threshold", threshold)?;
        let positive = b.op("Greater", "positive", &[&weight, &t], &[]);
        // Without a single weighted class onnxruntime answers 1 or 0 here, not the labels.
        let (pos, neg) = if binary_case {
            (labels[1], labels[0])
        } else {
            (1, 0)
        };
        let pos = b.constant("positive_label", HostTensor::from_vec(vec![], &[pos])?);
        let neg = b.constant("negative_label", HostTensor::from_vec(vec![], &[neg])?);
        let label = b.op("Where", "label", &[&positive, &pos, &neg], &[]);
        // Scores: two per row transformed together (a class without a weight scores 0, as
        // onnxruntime writes it), or one expanded to two.
        let scored = |b: &mut Builder, name: &str, h: &Has, p: &str| match h {
            Has::Always => p.to_string(),
            Has::Never => zero.clone(),
            Has::PerSample(h) => b.op("Where", name, &[h, p, &zero], &[]),
        };
        // Class 1 gets a score from two base values where it has a weight.
        let z0 = scored(b, "z0", &h0, &p0);
        let z1 = scored(b, "z1", &h1, &p1);
        let z0 = if matches!(h0, Has::Never) {
            zeros_like(b, "z0_rows", &p0)?
        } else {
            z0
        };
        let z1 = if matches!(h1, Has::Never) {
            zeros_like(b, "z1_rows", &p0)?
        } else {
            z1
        };
        let pair = columns(b, "pair", &[&z0, &z1])?;
        let two = transform_rows(b, &pair, post)?;
        let z = if !single || matches!(h1, Has::Always) {
            two
        } else {
            let one = b.f32_scalar("one", 1.0)?;
            let (c0, c1) = if post == Post::Probit {
                // onnxruntime writes the first score only; the second is 0 here.
                (probit(b, &z0)?, zeros_like(b, "second", &z0)?)
            } else {
                match wa {
                    // LOGISTIC: [1 - logistic(p), logistic(p)] (onnxruntime 1.32).
                    0..=3 if post == Post::Logistic => {
                        let sig = b.op("Sigmoid", "sig_p", &[&z0], &[]);
                        (b.op("Sub", "one_minus", &[&one, &sig], &[]), sig)
                    }
                    0 | 1 => (b.op("Sub", "one_minus", &[&one, &z0], &[]), z0.clone()),
                    2 | 3 => (b.op("Neg", "neg_p", &[&z0], &[]), z0.clone()),
                    // onnxruntime writes the score alone; the second is 0 here.
                    _ => (z0.clone(), zeros_like(b, "second", &z0)?),
                }
            };
            let one_score = columns(b, "one_score", &[&c0, &c1])?;
            match &h1 {
                Has::PerSample(h) => {
                    let axis = b.i64s("h1_axis", &[1])?;
                    let wide = b.op("Unsqueeze", "h1_wide", &[h, &axis], &[]);
                    b.op("Where", "scores_z", &[&wide, &two, &one_score], &[])
                }
                _ => one_score,
            }
        };
        (label, z)
    } else {
        return Err(a.bad(format!(
            "has {k} class labels; a classifier needs at least 2"
        )));
    };
    b.op_to("Identity", &label_out, &[&label], &[]);
    if let Some(out) = scores_out {
        b.op_to("Identity", &out, &[&z], &[]);
    }
    Ok(())
}

/// An SVM's kernel and its parameters (gamma, coef0, degree).
struct Kernel {
    kind: String,
    gamma: f32,
    coef0: f32,
    degree: f32,
}

impl Kernel {
    fn parse(a: &Attrs) -> Result<Kernel> {
        let kind = a.string("kernel_type", "LINEAR")?;
        if !matches!(kind.as_str(), "LINEAR" | "POLY" | "RBF" | "SIGMOID") {
            return Err(a.bad(format!(
                "kernel_type '{}' is not LINEAR, POLY, RBF or SIGMOID",
                kind.escape_debug()
            )));
        }
        let (params, _) = a.values("kernel_params")?;
        let p = |k: usize| params.get(k).copied().unwrap_or(0.0) as f32;
        Ok(Kernel {
            kind,
            gamma: p(0),
            coef0: p(1),
            degree: p(2),
        })
    }

    /// The kernel of each row of `xr` (`[N, F]`, f32) with each support vector: `[N, V]`.
    fn apply(&self, b: &mut Builder, xr: &str, vectors: &[f64], count: usize) -> Result<String> {
        let features = vectors.len() / count;
        if self.kind == "RBF" {
            // exp(-gamma |x - v|^2), the differences squared and summed as onnxruntime sums
            // them (one reduction reading x - v where it reads it).
            let sv = f32_const(b, "support_vectors", vec![count, features], &f32s(vectors))?;
            let axis1 = b.i64s("rows_axis", &[1])?;
            let wide = b.op("Unsqueeze", "x_wide", &[xr, &axis1], &[]);
            let diff = b.op("Sub", "x_minus_v", &[&wide, &sv], &[]);
            let axis2 = b.i64s("feature_axis", &[2])?;
            let d = b.op(
                "ReduceSumSquare",
                "distance",
                &[&diff, &axis2],
                &[("keepdims", Attr::Int(0))],
            );
            let g = b.f32_scalar("minus_gamma", -self.gamma)?;
            let e = b.op("Mul", "scaled_distance", &[&d, &g], &[]);
            return Ok(b.op("Exp", "kernel", &[&e], &[]));
        }
        // x · v, transposed on the host.
        let mut t = vec![0f32; vectors.len()];
        for v in 0..count {
            for f in 0..features {
                t[f * count + v] = vectors[v * features + f] as f32;
            }
        }
        let svt = f32_const(b, "support_vectors_t", vec![features, count], &t)?;
        let dot = b.op("MatMul", "dot", &[xr, &svt], &[]);
        if self.kind == "LINEAR" {
            return Ok(dot);
        }
        let g = b.f32_scalar("gamma", self.gamma)?;
        let c = b.f32_scalar("coef0", self.coef0)?;
        let scaled = b.op("Mul", "gamma_dot", &[&dot, &g], &[]);
        let shifted = b.op("Add", "shifted", &[&scaled, &c], &[]);
        Ok(match (self.kind.as_str(), self.degree) {
            ("SIGMOID", _) => b.op("Tanh", "kernel", &[&shifted], &[]),
            (_, 2.0) => b.op("Mul", "kernel", &[&shifted, &shifted], &[]),
            (_, 3.0) => {
                let sq = b.op("Mul", "square", &[&shifted, &shifted], &[]);
                b.op("Mul", "kernel", &[&sq, &shifted], &[])
            }
            (_, d) => {
                let d = b.f32_scalar("degree", d)?;
                b.op("Pow", "kernel", &[&shifted, &d], &[])
            }
        })
    }
}

fn svm_regressor(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let kernel = Kernel::parse(&a)?;
    let (vectors, _) = a.values("support_vectors")?;
    let (coefficients, _) = a.values("coefficients")?;
    let (rho, _) = a.values("rho")?;
    let count =
        usize::try_from(a.int("n_supports", 0)?).map_err(|_| a.bad("n_supports is negative"))?;
    let Some(&rho0) = rho.first() else {
        return Err(a.bad("needs rho"));
    };
    if coefficients.is_empty() {
        return Err(a.bad("needs coefficients"));
    }
    let mut b = Builder::new(node, &y);
    if count > 0 && vectors.len().is_multiple_of(count) {
        check_features(&mut b, node, vectors.len() / count);
    }
    let xf = cast(&mut b, "x_f32", &x, "f32");
    let xr = rows(&mut b, &xf)?;
    let rho = b.f32_scalar("rho", rho0 as f32)?;
    let sum = if count > 0 {
        // One coefficient per support vector: the kernels' weighted sum.
        if vectors.is_empty() || !vectors.len().is_multiple_of(count) || coefficients.len() != count
        {
            return Err(a.bad(format!(
                "has {} support vector values and {} coefficients for {count} support vectors",
                vectors.len(),
                coefficients.len()
            )));
        }
        let k = kernel.apply(&mut b, &xr, &vectors, count)?;
        let c = f32_const(&mut b, "coefficients", vec![count, 1], &f32s(&coefficients))?;
        b.op("MatMul", "weighted", &[&k, &c], &[])
    } else {
        // No support vectors: a linear model of the coefficients.
        let n = coefficients.len();
        let c = f32_const(&mut b, "coefficients", vec![n, 1], &f32s(&coefficients))?;
        b.op("MatMul", "weighted", &[&xr, &c], &[])
    };
    let score = b.op("Add", "score", &[&sum, &rho], &[]);
    // onnxruntime applies no post transform here; a one-class model answers 1 or -1.
    let out = if a.int("one_class", 0)? != 0 {
        let zero = b.f32_scalar("zero", 0.0)?;
        let one = b.f32_scalar("one", 1.0)?;
        let minus_one = b.f32_scalar("minus_one", -1.0)?;
        let inside = b.op("Greater", "inside", &[&score, &zero], &[]);
        b.op("Where", "one_class", &[&inside, &one, &minus_one], &[])
    } else {
        score
    };
    b.op_to("Identity", &y, &[&out], &[]);
    Ok(b.finish())
}

fn svm_classifier(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, _) = io(node)?;
    let label_out = node.outputs.first().cloned().unwrap_or_default();
    let scores_out = node.outputs.get(1).filter(|s| !s.is_empty()).cloned();
    let labels = a.class_labels()?;
    let kernel = Kernel::parse(&a)?;
    let post = Post::parse(&a)?;
    let (vectors, _) = a.values("support_vectors")?;
    let (coefficients, _) = a.values("coefficients")?;
    let (rho, _) = a.values("rho")?;
    let (prob_a, _) = a.values("prob_a")?;
    let (prob_b, _) = a.values("prob_b")?;
    let per_class = a.ints("vectors_per_class")?;
    if prob_a.len() != prob_b.len() {
        return Err(a.bad(format!(
            "has {} prob_a and {} prob_b; probability estimates need one of each per pair of classes",
            prob_a.len(),
            prob_b.len()
        )));
    }
    let classes = labels.len();
    if classes < 2 {
        return Err(a.bad(format!("has {classes} class labels; it needs 2 or more")));
    }
    if coefficients.is_empty() || rho.is_empty() {
        return Err(a.bad("needs coefficients and rho"));
    }
    let all_positive = coefficients.iter().all(|&c| c >= 0.0);
    let mut b = Builder::new(node, &label_out);
    let xf = cast(&mut b, "x_f32", &x, "f32");
    let xr = rows(&mut b, &xf)?;
    let count: usize = per_class.iter().map(|&c| c.max(0) as usize).sum();
    if count > 0 && vectors.len().is_multiple_of(count) {
        check_features(&mut b, node, vectors.len() / count);
    }
    let table = b.constant("labels", HostTensor::from_vec(vec![classes], &labels)?);
    let argmax = |b: &mut Builder, name: &str, v: &str| {
        b.op(
            name,
            "best",
            &[v],
            &[("axis", Attr::Int(1)), ("keepdims", Attr::Int(0))],
        )
    };
    let (label, z) = if count == 0 {
        // No support vectors: one linear score per class, rho[0] added to each.
        if !coefficients.len().is_multiple_of(classes) {
            return Err(a.bad(format!(
                "has {} coefficients, not a multiple of its {classes} classes",
                coefficients.len()
            )));
        }
        let features = coefficients.len() / classes;
        let w = f32_const(
            &mut b,
            "coefficients",
            vec![classes, features],
            &f32s(&coefficients),
        )?;
        let r = b.f32_scalar("rho", rho[0] as f32)?;
        let scores = b.op(
            "Gemm",
            "scores",
            &[&xr, &w, &r],
            &[("transB", Attr::Int(1))],
        );
        let best = argmax(&mut b, "ArgMax", &scores);
        let mut label = b.op("Gather", "label", &[&table, &best], &[]);
        if classes == 2 {
            // The second label where the best score passes 0.5 (positive coefficients) or 0.
            let axes = b.i64s("class_axis", &[1])?;
            let top = b.op(
                "ReduceMax",
                "top",
                &[&scores, &axes],
                &[("keepdims", Attr::Int(0))],
            );
            let t = b.f32_scalar("top_threshold", if all_positive { 0.5 } else { 0.0 })?;
            let pass = if all_positive {
                b.op("GreaterOrEqual", "passes", &[&top, &t], &[])
            } else {
                b.op("Greater", "passes", &[&top, &t], &[])
            };
            let second = b.constant("second_label", HostTensor::from_vec(vec![], &[labels[1]])?);
            label = b.op("Where", "label_binary", &[&pass, &second, &label], &[]);
        }
        (label, transform_rows(&mut b, &scores, post)?)
    } else {
        // One-against-one: a score per pair of classes, a vote for the winner of each.
        if per_class.len() != classes || per_class.iter().any(|&c| c < 0) {
            return Err(a.bad(format!(
                "has {} vectors_per_class for {classes} classes",
                per_class.len()
            )));
        }
        if vectors.is_empty() || !vectors.len().is_multiple_of(count) {
            return Err(a.bad(format!(
                "has {} support vector values for {count} support vectors",
                vectors.len()
            )));
        }
        let pairs = classes * (classes - 1) / 2;
        if coefficients.len() < (classes - 1) * count || rho.len() < pairs {
            return Err(a.bad(format!(
                "has {} coefficients and {} rho for {classes} classes and {count} support vectors (needs {} and {pairs})",
                coefficients.len(),
                rho.len(),
                (classes - 1) * count
            )));
        }
        let mut start = Vec::with_capacity(classes);
        let mut s = 0usize;
        for &c in &per_class {
            start.push(s);
            s += c as usize;
        }
        // Pair p = (i, j): the coefficients of class i's vectors in row j - 1, of class j's
        // in row i; one column of a [V, pairs] matrix.
        let mut m = vec![0f32; count * pairs];
        let mut win = vec![0f32; pairs * classes];
        let mut lose = vec![0f32; pairs * classes];
        let mut p = 0;
        for i in 0..classes {
            for j in i + 1..classes {
                for v in start[i]..start[i] + per_class[i] as usize {
                    m[v * pairs + p] = coefficients[(j - 1) * count + v] as f32;
                }
                for v in start[j]..start[j] + per_class[j] as usize {
                    m[v * pairs + p] = coefficients[i * count + v] as f32;
                }
                win[p * classes + i] = 1.0;
                win[p * classes + j] -= 1.0;
                lose[p * classes + j] = 1.0;
                p += 1;
            }
        }
        let k = kernel.apply(&mut b, &xr, &vectors, count)?;
        let m = f32_const(&mut b, "pair_coefficients", vec![count, pairs], &m)?;
        let rho = f32_const(&mut b, "rho", vec![pairs], &f32s(&rho[..pairs]))?;
        let sums = b.op("MatMul", "pair_sums", &[&k, &m], &[]);
        let scores = b.op("Add", "pair_scores", &[&sums, &rho], &[]);
        // Votes: class i where the pair's score is above 0, else class j.
        let zero = b.f32_scalar("zero", 0.0)?;
        let won = b.op("Greater", "i_wins", &[&scores, &zero], &[]);
        let won = cast(&mut b, "i_wins_f", &won, "f32");
        let win = f32_const(&mut b, "win_minus_lose", vec![pairs, classes], &win)?;
        let lose_totals: Vec<f32> = (0..classes)
            .map(|c| (0..pairs).map(|p| lose[p * classes + c]).sum())
            .collect();
        let lose = f32_const(&mut b, "lose_totals", vec![classes], &lose_totals)?;
        let shifted = b.op("MatMul", "vote_shift", &[&won, &win], &[]);
        let votes = b.op("Add", "votes", &[&shifted, &lose], &[]);
        let best = argmax(&mut b, "ArgMax", &votes);
        let label = b.op("Gather", "label", &[&table, &best], &[]);
        let z = if !prob_a.is_empty() {
            // Probability estimates (Platt scaling of each pair's score, coupled into class
            // probabilities); the label stays the vote's, as in onnxruntime and scikit-learn.
            if prob_a.len() < pairs {
                return Err(a.bad(format!(
                    "has {} prob_a and prob_b for {pairs} pairs of classes",
                    prob_a.len()
                )));
            }
            let pa = f32_const(&mut b, "prob_a", vec![pairs], &f32s(&prob_a[..pairs]))?;
            let pb = f32_const(&mut b, "prob_b", vec![pairs], &f32s(&prob_b[..pairs]))?;
            let scaled = b.op("Mul", "platt_scaled", &[&scores, &pa], &[]);
            let shifted = b.op("Add", "platt_shifted", &[&scaled, &pb], &[]);
            let sig = b.op("Sigmoid", "platt_sigmoid", &[&shifted], &[]);
            let one = b.f32_scalar("one", 1.0)?;
            let r = b.op("Sub", "pair_probability", &[&one, &sig], &[]);
            let lo = b.f32_scalar("probability_floor", 1e-7)?;
            let hi = b.f32_scalar("probability_ceiling", 1.0 - 1e-7)?;
            let r = b.op("Clip", "pair_probability_clipped", &[&r, &lo, &hi], &[]);
            let probabilities = b.op("PairwiseCoupling", "class_probabilities", &[&r], &[]);
            transform_rows(&mut b, &probabilities, post)?
        } else if classes > 2 {
            transform_rows(&mut b, &scores, post)?
        } else {
            // One pair's score s: [-s, s] without a transform, else [1 - s, s] (onnxruntime).
            let s = column(&mut b, "score", &scores, 0)?;
            let (c0, c1) = match post {
                Post::None => (b.op("Neg", "neg_s", &[&s], &[]), s.clone()),
                Post::Probit => (probit(&mut b, &s)?, zeros_like(&mut b, "second", &s)?),
                Post::Logistic => {
                    let sig = b.op("Sigmoid", "sig_s", &[&s], &[]);
                    let one = b.f32_scalar("one", 1.0)?;
                    (b.op("Sub", "one_minus", &[&one, &sig], &[]), sig)
                }
                _ => {
                    let one = b.f32_scalar("one", 1.0)?;
                    (b.op("Sub", "one_minus", &[&one, &s], &[]), s.clone())
                }
            };
            columns(&mut b, "two_scores", &[&c0, &c1])?
        };
        (label, z)
    };
    b.op_to("Identity", &label_out, &[&label], &[]);
    if let Some(out) = scores_out {
        b.op_to("Identity", &out, &[&z], &[]);
    }
    Ok(b.finish())
}

/// `x == keys[k]` for each key along a new last axis (`[..., K]`, bool). A NaN matches no
/// key, NaN keys included (onnxruntime's hash maps).
fn matches_keys(b: &mut Builder, x: &str, keys: &str) -> Result<String> {
    let last = b.i64s("key_axis", &[-1])?;
    let wide = b.op("Unsqueeze", "x_wide", &[x, &last], &[]);
    let keys = b.op("CastLike", "keys_t", &[keys, x], &[]);
    Ok(b.op("Equal", "is_key", &[&wide, &keys], &[]))
}

fn one_hot_encoder(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let names = a.strings("cats_strings")?;
    let mut b = Builder::new(node, &y);
    let integer_categories = names.is_empty();
    let (xi, cats) = if integer_categories {
        // Values are compared as i64, floats truncated first (onnxruntime's cast). With
        // `zeros` 0 a value of no category is an error where X is known on the host.
        if a.int("zeros", 1)? == 0 {
            b.check_inputs(node, "OneHotEncoder", &[]);
        }
        (cast(&mut b, "x_i64", &x, "i64"), a.ints("cats_int64s")?)
    } else {
        // String categories: each string's category position (a string op on the host),
        // -1 for none, then the positions one-hot.
        let positions: Vec<i64> = (0..names.len() as i64).collect();
        let out = b.name("category_position");
        b.op_to(
            "LabelEncoder",
            &out,
            &[&x],
            &[
                ("keys_strings", Attr::Strings(names)),
                ("values_int64s", Attr::Ints(positions.clone())),
                ("default_int64", Attr::Int(-1)),
            ],
        );
        (out, positions)
    };
    if cats.is_empty() {
        return Err(a.bad("needs cats_int64s or cats_strings"));
    }
    let cats = b.constant("categories", HostTensor::from_vec(vec![cats.len()], &cats)?);
    let eq = matches_keys(&mut b, &xi, &cats)?;
    if integer_categories && a.int("zeros", 1)? == 0 {
        // Each value a category, checked on X itself (as i64, as compared), so that X known
        // while planning costs nothing on the GPU.
        let none = b.i64s("no_range", &[1, 0])?;
        b.check_values(
            ("OneHotEncoder", "X"),
            "X's element {i} is {v}, no category of cats_int64s; with zeros 0 every value must be one",
            &x,
            &none,
            Some(&cats),
        );
    }
    b.op_to("Cast", &y, &[&eq], &[("to", Attr::String("f32".into()))]);
    Ok(b.finish())
}

fn label_encoder(node: &Node) -> Result<Expansion> {
    let a = Attrs(node);
    let (x, y) = io(node)?;
    let tensor = |name: &str| match a.get(name) {
        Some(Attr::Tensor(t)) => Some(t.clone()),
        _ => None,
    };
    // Keys: integers, floats or a tensor; values likewise, with their default.
    let keys: HostTensor = if let Some(t) = tensor("keys_tensor") {
        t
    } else if !a.ints("keys_int64s")?.is_empty() {
        let k = a.ints("keys_int64s")?;
        HostTensor::from_vec(vec![k.len()], &k)?
    } else {
        let (k, _) = a.values("keys_floats")?;
        HostTensor::from_vec(vec![k.len()], &f32s(&k))?
    };
    let (values, default): (HostTensor, HostTensor) = if let Some(t) = tensor("values_tensor") {
        let d = match tensor("default_tensor") {
            Some(d) => cast_host(&d, t.dtype)?,
            None => cast_host(&HostTensor::from_vec(vec![], &[0f32])?, t.dtype)?,
        };
        (t, d)
    } else if !a.ints("values_int64s")?.is_empty() {
        let v = a.ints("values_int64s")?;
        let d = a.int("default_int64", -1)?;
        (
            HostTensor::from_vec(vec![v.len()], &v)?,
            HostTensor::from_vec(vec![], &[d])?,
        )
    } else {
        let (v, _) = a.values("values_floats")?;
        let d = a.float("default_float", -0.0)? as f32;
        (
            HostTensor::from_vec(vec![v.len()], &f32s(&v))?,
            HostTensor::from_vec(vec![], &[d])?,
        )
    };
    let k = keys.numel();
    if k == 0 || values.numel() != k {
        return Err(a.bad(format!(
            "has {k} keys and {} values; it needs one value per key",
            values.numel()
        )));
    }
    let default = HostTensor::from_bytes(
        default.dtype,
        vec![],
        default.data[..default.dtype.size()].to_vec(),
    )
    .map_err(|_| a.bad("needs a default of one value"))?;
    let mut b = Builder::new(node, &y);
    let keys = b.constant(
        "keys",
        HostTensor::from_bytes(keys.dtype, vec![k], keys.data.clone())?,
    );
    let values = b.constant(
        "values",
        HostTensor::from_bytes(values.dtype, vec![k], values.data.clone())?,
    );
    let default = b.constant("default", default);
    let eq = matches_keys(&mut b, &x, &keys)?;
    // The first matching key's value (onnxruntime keeps the first of repeated keys).
    let eqf = cast(&mut b, "is_key_f", &eq, "f32");
    let drop = [("axis", Attr::Int(-1)), ("keepdims", Attr::Int(0))];
    let first = b.op("ArgMax", "first_key", &[&eqf], &drop);
    let axes = b.i64s("any_axis", &[-1])?;
    let any = b.op(
        "ReduceMax",
        "any_key",
        &[&eqf, &axes],
        &[("keepdims", Attr::Int(0))],
    );
    let half = b.f32_scalar("half", 0.5)?;
    let found = b.op("Greater", "found", &[&any, &half], &[]);
    let v = b.op("Gather", "value", &[&values, &first], &[]);
    b.op_to("Where", &y, &[&found, &v, &default], &[]);
    Ok(b.finish())
}
