//! Tensors of strings (ONNX `tensor(string)`). No kernel reads strings, so they live on the
//! host only and every op on them runs while the graph is planned, as sequences do: the string
//! ops (StringConcat, StringNormalizer, StringSplit, RegexFullMatch, LabelEncoder,
//! CategoryMapper; and ZipMap, whose maps are host values too), Equal, Cast to and from strings, Shape and Size, and the ops that only move
//! values (Reshape, Gather, Concat, Where, ...). Those run in the CPU interpreter on indices
//! into the strings, so they follow exactly the rules they follow on numbers. The numeric
//! inputs of these ops (indices, shapes, a LabelEncoder's keys) must be known on the host:
//! where one was computed on the GPU it is read back (native runs; inside a Scan body, or with
//! read-backs off, the op refuses it).

use std::collections::HashMap;

use super::exec::{input_slots, Scope, Slot};
use super::registry::{planned_op, OpDef};
use super::{Attr, Node};
use crate::reference::cast_host;
use crate::{
    DType, Element, Error, HostTensor, Map, MapKeys, MapSequence, MapValues, Recorder, Result,
    StringTensor,
};

/// The ops on strings only, which the executor records here ([`record`]).
pub(crate) const OPS: &[&str] = &[
    "StringConstant",
    "StringConcat",
    "StringNormalizer",
    "StringSplit",
    "RegexFullMatch",
    "LabelEncoder",
    "CategoryMapper",
    "ZipMap",
    "Tokenizer",
    "ai.onnx.ml.DictVectorizer",
    "ai.onnx.ml.CastMap",
];

/// The ops that only move values, which take string tensors at their data inputs: all inputs
/// (`None`) or these.
fn data_inputs(op: &str) -> Option<Option<&'static [usize]>> {
    Some(match op {
        "Identity"
        | "Reshape"
        | "Flatten"
        | "Squeeze"
        | "Unsqueeze"
        | "Transpose"
        | "Gather"
        | "GatherElements"
        | "GatherND"
        | "Split"
        | "OnnxSlice"
        | "Slice"
        | "StridedSlice"
        | "Expand"
        | "Tile"
        | "Compress"
        | "ReverseSequence"
        | "DepthToSpace"
        | "SpaceToDepth"
        | "BatchToSpace"
        | "SpaceToBatch"
        | "ai.onnx.ml.ArrayFeatureExtractor" => Some(&[0]),
        "ScatterElements" | "ScatterND" => Some(&[0, 2]),
        "Where" => Some(&[1, 2]),
        "Concat" => None,
        _ => return None,
    })
}

/// Whether the executor records `node` here: an op of [`OPS`], or any op reading a string
/// tensor but the control-flow ops (which carry them as they carry sequences). Maps go only
/// to the ops of [`OPS`] that read them; any other op refuses them as it refuses sequences.
pub(crate) fn handles(node: &Node, slots: &[Option<&Slot>]) -> bool {
    OPS.contains(&node.op.as_str())
        || (!matches!(node.op.as_str(), "If" | "Loop" | "Scan")
            && slots.iter().flatten().any(|s| s.strings.is_some()))
}

/// The inputs of `node` that must be known on the host: every numeric input of an op that
/// reads strings, and the input of an op that makes strings of numbers.
pub(crate) fn host_inputs(node: &Node, slots: &[Option<&Slot>]) -> Vec<usize> {
    if !(handles(node, slots) || makes_strings(node)) {
        return Vec::new();
    }
    (0..slots.len())
        .filter(|&i| slots[i].is_some_and(|s| s.non_tensor().is_none()))
        .collect()
}

fn is_string_type(attr: Option<&Attr>) -> bool {
    matches!(attr, Some(Attr::String(s)) if s == "string")
}

/// Whether `node` makes strings of numbers (a Cast to strings), which the executor records
/// here too.
pub(crate) fn makes_strings(node: &Node) -> bool {
    node.op == "Cast" && is_string_type(node.attrs.get("to"))
}

/// The op's name as errors give it.
fn op_name(node: &Node) -> &'static str {
    super::registry::lookup(&node.op).map_or("strings", |d| d.name)
}

/// Records `node` (see [`handles`] and [`makes_strings`]) against `scope`: computes its
/// outputs on the host and gives their slots.
pub(crate) fn record(rec: &mut Recorder, scope: &Scope<'_>, node: &Node) -> Result<Vec<Slot>> {
    let slots = input_slots(scope, node);
    let op = op_name(node);
    // Host memory for the results, checked before they are made.
    let budget = rec.context().max_memory();
    let strings = |i: usize, role: &str| -> Result<&StringTensor> {
        match slots.get(i).copied().flatten() {
            Some(s) => s.strings.as_deref().ok_or_else(|| {
                Error::invalid(
                    op,
                    role,
                    format!(
                        "{role} ('{}') is {}; {} takes a string tensor there",
                        node.inputs[i].escape_debug(),
                        s.non_tensor().unwrap_or("a tensor of numbers"),
                        node.op.escape_debug()
                    ),
                )
            }),
            None => Err(Error::invalid(
                op,
                role,
                format!(
                    "{} needs its input '{role}' (input {i})",
                    node.op.escape_debug()
                ),
            )),
        }
    };
    let one = |t: StringTensor| Ok(vec![Slot::strings(t)]);
    let number = |t: HostTensor| Ok(vec![Slot::input(t)]);
    match node.op.as_str() {
        "StringConstant" => {
            let values = match node.attrs.get("value") {
                Some(Attr::Strings(v)) => v.clone(),
                Some(Attr::String(v)) => vec![v.clone()],
                _ => {
                    return Err(Error::invalid(
                        op,
                        "value",
                        "value must be a list of strings",
                    ))
                }
            };
            let shape = match node.attrs.get("shape") {
                None => vec![values.len()],
                Some(Attr::Ints(s)) => s
                    .iter()
                    .map(|&d| usize::try_from(d))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| Error::invalid(op, "shape", "shape has a negative size"))?,
                Some(_) => return Err(Error::invalid(op, "shape", "shape must be integers")),
            };
            let t = StringTensor::new(shape, values)
                .map_err(|e| Error::invalid(op, "value", e.to_string()))?;
            Ok(vec![Slot {
                constant: true,
                ..Slot::strings(t)
            }])
        }
        "StringConcat" => {
            let (a, b) = (strings(0, "X")?, strings(1, "Y")?);
            let shape = code_shape(node, a, b)?;
            check_budget(op, budget, &shape, PER_STRING + longest(a) + longest(b))?;
            let code = pair_codes(node, a, b)?;
            let values = code
                .iter()
                .map(|&(i, j)| format!("{}{}", a.values[i], b.values[j]))
                .collect();
            one(StringTensor::new(shape, values)?)
        }
        "Equal" => {
            let (a, b) = (strings(0, "A")?, strings(1, "B")?);
            let shape = code_shape(node, a, b)?;
            check_budget(op, budget, &shape, PER_STRING)?;
            let code = pair_codes(node, a, b)?;
            let values: Vec<bool> = code
                .iter()
                .map(|&(i, j)| a.values[i] == b.values[j])
                .collect();
            number(HostTensor::from_vec(shape, &values)?)
        }
        "StringNormalizer" => one(normalize(node, strings(0, "X")?)?),
        "StringSplit" => {
            let (y, z) = split(node, strings(0, "X")?, budget)?;
            let mut out = vec![Slot::strings(y)];
            if node.outputs.len() > 1 {
                out.push(Slot::input(z));
            }
            Ok(out)
        }
        "Tokenizer" => one(tokenize(node, strings(0, "X")?, budget)?),
        "RegexFullMatch" => {
            let x = strings(0, "X")?;
            let pattern = match node.attrs.get("pattern") {
                Some(Attr::String(p)) => p,
                _ => return Err(Error::invalid(op, "pattern", "pattern must be a string")),
            };
            let re = re2_regex(
                op,
                "pattern",
                pattern,
                &format!(r"\A(?:{})\z", re2_classes(pattern)),
            )?;
            let values: Vec<bool> = x.values.iter().map(|s| re.is_match(s)).collect();
            number(HostTensor::from_vec(x.shape.clone(), &values)?)
        }
        "LabelEncoder" => label_encoder(node, &slots, budget),
        "ZipMap" => zip_map(node, &slots),
        "ai.onnx.ml.DictVectorizer" => dict_vectorizer(node, &slots, budget),
        "ai.onnx.ml.CastMap" => cast_map(node, &slots, budget),
        "CategoryMapper" => {
            // A LabelEncoder from strings to integers, or back where the input is integers.
            let names = strings_attr(node, "cats_strings")?;
            let ints = match node.attrs.get("cats_int64s") {
                None => Vec::new(),
                Some(Attr::Ints(v)) => v.clone(),
                Some(_) => {
                    return Err(Error::invalid(
                        op,
                        "cats_int64s",
                        "cats_int64s must be integers",
                    ))
                }
            };
            if names.len() != ints.len() {
                return Err(Error::invalid(
                    op,
                    "cats_strings",
                    format!(
                        "has {} strings and {} integers; it needs one integer per string",
                        names.len(),
                        ints.len()
                    ),
                ));
            }
            let to_ints = slots
                .first()
                .copied()
                .flatten()
                .is_some_and(|s| s.strings.is_some());
            let encoder = Node::new("LabelEncoder", node.name.clone())
                .inputs(node.inputs.iter().cloned())
                .outputs(node.outputs.iter().cloned());
            let encoder = match to_ints {
                true => encoder
                    .attr("keys_strings", Attr::Strings(names))
                    .attr("values_int64s", Attr::Ints(ints))
                    .attr(
                        "default_int64",
                        Attr::Int(int_attr(node, "default_int64", -1)?),
                    ),
                false => encoder
                    .attr("keys_int64s", Attr::Ints(ints))
                    .attr("values_strings", Attr::Strings(names))
                    .attr(
                        "default_string",
                        Attr::String(string_attr(node, "default_string", "_Unused")?),
                    ),
            };
            label_encoder(&encoder, &slots, budget)
        }
        "Cast" => cast(node, &slots, budget),
        "Shape" => {
            let x = strings(0, "data")?;
            let r = x.shape.len() as i64;
            let clamp = |name: &str, default: i64| -> Result<usize> {
                let v = match node.attrs.get(name) {
                    None => default,
                    Some(Attr::Int(v)) => *v,
                    Some(_) => return Err(Error::invalid(op, name, "must be an integer")),
                };
                Ok((if v < 0 { v + r } else { v }).clamp(0, r) as usize)
            };
            let (start, end) = (clamp("start", 0)?, clamp("end", r)?);
            let dims: Vec<i64> = x.shape[start..end.max(start)]
                .iter()
                .map(|&d| d as i64)
                .collect();
            number(HostTensor::from_vec(vec![dims.len()], &dims)?)
        }
        "Size" => number(HostTensor::from_vec(
            vec![],
            &[strings(0, "data")?.numel() as i64],
        )?),
        _ => moved(node, &slots, budget),
    }
}

/// Host bytes a string takes besides its text (its header, and the positions the interpreter
/// moves in its place), for [`check_budget`].
const PER_STRING: u64 = 48;

/// The length in bytes of `t`'s longest string.
fn longest(t: &StringTensor) -> u64 {
    t.values.iter().map(|s| s.len() as u64).max().unwrap_or(0)
}

/// Refuses a result of `shape` strings of about `bytes_each` bytes each that would take more
/// than the context's memory limit, before any of it is made.
fn check_budget(op: &'static str, budget: u64, shape: &[usize], bytes_each: u64) -> Result<()> {
    let elements = shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    check_elements(op, budget, elements, bytes_each, 0)
}

/// [`check_budget`] of `elements` strings of `bytes_each` bytes each and `text` bytes more.
fn check_elements(
    op: &'static str,
    budget: u64,
    elements: u64,
    bytes_each: u64,
    text: u64,
) -> Result<()> {
    let needed = elements.saturating_mul(bytes_each).saturating_add(text);
    if needed > budget {
        return Err(Error::LimitExceeded {
            op,
            what: format!("a result of {elements} strings on the host"),
            limit: "memory limit",
            needed,
            max: budget,
        });
    }
    Ok(())
}

/// At least the number of elements `node` (an op that only moves values) gives on `args`
/// (string inputs as positions), from its inputs' shapes and index values, without computing
/// it (saturating at `u64::MAX`); and whether the op may repeat its inputs' elements.
fn output_bound(node: &Node, args: &[Option<HostTensor>]) -> (u64, bool) {
    let arg = |i: usize| args.get(i).and_then(|a| a.as_ref());
    let numel = |i: usize| arg(i).map_or(0u64, |t| t.numel() as u64);
    let values = |i: usize| -> Vec<i64> {
        arg(i)
            .and_then(|t| cast_host(t, DType::I64).ok())
            .and_then(|t| t.to_vec::<i64>().ok())
            .unwrap_or_default()
    };
    let product = |dims: &mut dyn Iterator<Item = u64>| dims.fold(1u64, |n, d| n.saturating_mul(d));
    // numpy broadcasting: each axis the largest of its sizes.
    let broadcast = |shapes: &[Vec<u64>]| {
        let r = shapes.iter().map(Vec::len).max().unwrap_or(0);
        product(&mut (0..r).map(|k| {
            shapes
                .iter()
                .map(|s| {
                    if k + s.len() < r {
                        1
                    } else {
                        s[k + s.len() - r]
                    }
                })
                .max()
                .unwrap_or(1)
        }))
    };
    let shape = |i: usize| -> Vec<u64> {
        arg(i).map_or(Vec::new(), |t| t.shape.iter().map(|&d| d as u64).collect())
    };
    let axis_len = |i: usize, axis: i64| -> u64 {
        let s = shape(i);
        let r = s.len() as i64;
        let a = if axis < 0 { axis + r } else { axis };
        s.get(a.clamp(0, r.max(1) - 1) as usize)
            .copied()
            .unwrap_or(1)
            .max(1)
    };
    let attr_int = |name: &str, default: i64| match node.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    };
    let bound = match node.op.as_str() {
        "Expand" => broadcast(&[
            shape(0),
            values(1).iter().map(|&d| d.max(0) as u64).collect(),
        ]),
        "Tile" => numel(0).saturating_mul(product(&mut values(1).iter().map(|&r| r.max(0) as u64))),
        "Where" => broadcast(&[shape(0), shape(1), shape(2)]),
        "Gather" => numel(1).saturating_mul(numel(0) / axis_len(0, attr_int("axis", 0))),
        "ai.onnx.ml.ArrayFeatureExtractor" => numel(1).saturating_mul(numel(0) / axis_len(0, -1)),
        "GatherND" => numel(1).saturating_mul(numel(0)),
        "SpaceToBatch" => {
            let (begin, end) = (values(2), values(3));
            product(&mut shape(0).iter().enumerate().map(|(k, &d)| {
                let pad = begin.get(k).copied().unwrap_or(0) + end.get(k).copied().unwrap_or(0);
                (d as i64).saturating_add(pad.max(0)) as u64
            }))
        }
        // The others give at most as many elements as they read.
        _ => {
            return (
                (0..args.len()).map(numel).fold(0u64, u64::saturating_add),
                false,
            )
        }
    };
    (bound, true)
}

/// For a broadcasting op on strings `a` and `b`: each output element's pair of input
/// positions (through the interpreter's Add on position codes, so the
/// broadcasting rules and their errors are those of numbers).
fn pair_codes(node: &Node, a: &StringTensor, b: &StringTensor) -> Result<Vec<(usize, usize)>> {
    let (na, nb) = (a.numel() as i64, b.numel() as i64);
    let codes_a: Vec<i64> = (0..na).map(|i| i * nb.max(1)).collect();
    let codes_b: Vec<i64> = (0..nb).collect();
    let add = Node::new("Add", node.name.clone())
        .inputs(["a", "b"])
        .outputs(["y"]);
    let sum = crate::reference::graph::eval_node(
        &add,
        &[
            Some(HostTensor::from_vec(a.shape.clone(), &codes_a)?),
            Some(HostTensor::from_vec(b.shape.clone(), &codes_b)?),
        ],
    )
    .map_err(|e| Error::invalid(op_name(node), "inputs", e.0))?;
    let codes = sum[0].to_vec::<i64>()?;
    let nb = nb.max(1) as usize;
    Ok(codes
        .iter()
        .map(|&c| (c as usize / nb, c as usize % nb))
        .collect())
}

/// `translated` (attribute `name` of `op`, `pattern` as given, after [`re2_classes`]) compiled;
/// an error names the attribute and quotes the pattern, on one line.
fn re2_regex(
    op: &'static str,
    name: &str,
    pattern: &str,
    translated: &str,
) -> Result<regex::Regex> {
    regex::Regex::new(translated).map_err(|e| {
        Error::invalid(
            op,
            name.to_string(),
            format!(
                "{name} '{}' is not a regular expression: {}",
                pattern.escape_debug(),
                e.to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .escape_debug()
            ),
        )
    })
}

/// `pattern` with RE2's meaning of the Perl classes (onnxruntime matches with RE2): `\w`, `\d`,
/// `\s` and `\b` and their negations are ASCII-only there, Unicode-aware in Rust's regex
/// (whose other syntax is RE2's). `.` matches one character in both.
fn re2_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push(c);
            break;
        };
        match e {
            'w' => out.push_str("[0-9A-Za-z_]"),
            'W' => out.push_str("[^0-9A-Za-z_]"),
            'd' => out.push_str("[0-9]"),
            'D' => out.push_str("[^0-9]"),
            's' => out.push_str("[\\t\\n\\x0C\\r ]"),
            'S' => out.push_str("[^\\t\\n\\x0C\\r ]"),
            'b' => out.push_str("(?-u:\\b)"),
            'B' => out.push_str("(?-u:\\B)"),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

/// The broadcast shape of `a` and `b` (numpy's rule).
fn code_shape(node: &Node, a: &StringTensor, b: &StringTensor) -> Result<Vec<usize>> {
    crate::ops::broadcast_shape(op_name(node), &a.shape, &b.shape)
}

/// An op that only moves values, on string data inputs: run by the interpreter on positions
/// into one table of the inputs' strings, whose results are mapped back to strings.
fn moved(node: &Node, slots: &[Option<&Slot>], budget: u64) -> Result<Vec<Slot>> {
    let op = op_name(node);
    let Some(data) = data_inputs(&node.op) else {
        let i = slots
            .iter()
            .position(|s| s.is_some_and(|s| s.strings.is_some()))
            .unwrap_or(0);
        return Err(Error::invalid(
            op,
            node.inputs.get(i).cloned().unwrap_or_default(),
            format!(
                "{} input {i} ('{}') is a string tensor; ops on strings are the string ops, Equal, Cast, Shape, Size and the ops that only move values (Reshape, Gather, Concat, Where, ...)",
                node.op.escape_debug(),
                node.inputs.get(i).map_or(String::new(), |n| n.escape_debug().to_string())
            ),
        ));
    };
    let is_data = |i: usize| data.is_none_or(|d| d.contains(&i));
    let mut table: Vec<&str> = Vec::new();
    let mut args: Vec<Option<HostTensor>> = Vec::with_capacity(slots.len());
    for (i, slot) in slots.iter().enumerate() {
        let Some(slot) = slot else {
            args.push(None);
            continue;
        };
        let name = node.inputs[i].escape_debug().to_string();
        match (&slot.strings, is_data(i)) {
            (Some(s), true) => {
                let start = table.len() as i64;
                let codes: Vec<i64> = (start..start + s.numel() as i64).collect();
                table.extend(s.values.iter().map(String::as_str));
                args.push(Some(HostTensor::from_vec(s.shape.clone(), &codes)?));
            }
            (Some(_), false) => {
                return Err(Error::invalid(
                    op,
                    name.clone(),
                    format!(
                        "{} input {i} ('{name}') is a string tensor, but it takes numbers there",
                        node.op.escape_debug()
                    ),
                ))
            }
            (None, true) => {
                return Err(Error::invalid(
                    op,
                    name.clone(),
                    format!(
                        "{} input {i} ('{name}') is {}, but its other data inputs are strings",
                        node.op.escape_debug(),
                        slot.non_tensor().unwrap_or("a tensor of numbers")
                    ),
                ))
            }
            (None, false) => args.push(Some(known(node, i, slot)?)),
        }
    }
    // The ops that give more elements than they read repeat strings (each at most the
    // longest); the others hold each of their inputs' strings at most once.
    let (bound, grows) = output_bound(node, &args);
    let (each, text) = match grows {
        true => (
            PER_STRING + table.iter().map(|s| s.len() as u64).max().unwrap_or(0),
            0,
        ),
        false => (PER_STRING, table.iter().map(|s| s.len() as u64).sum()),
    };
    check_elements(op, budget, bound, each, text)?;
    let outputs = crate::reference::graph::eval_node(node, &args)
        .map_err(|e| Error::invalid(op, "inputs", e.0))?;
    outputs
        .into_iter()
        .map(|codes| {
            let values = codes
                .to_vec::<i64>()?
                .into_iter()
                .map(|c| table[c as usize].to_string())
                .collect();
            Ok(Slot::strings(StringTensor::new(codes.shape, values)?))
        })
        .collect()
}

/// Numeric input `i` of `node`, which must be known on the host.
fn known(node: &Node, i: usize, slot: &Slot) -> Result<HostTensor> {
    if let Some(what) = slot.non_tensor() {
        return Err(Error::invalid(
            op_name(node),
            node.inputs[i].clone(),
            format!(
                "{} input {i} ('{}') is {what}; it takes a tensor there",
                node.op.escape_debug(),
                node.inputs[i].escape_debug()
            ),
        ));
    }
    match &slot.host {
        Some(h) => Ok(HostTensor::clone(h)),
        None => Err(Error::invalid(
            op_name(node),
            node.inputs[i].clone(),
            format!(
                "{} input {i} ('{}') was computed on the GPU, and an op on strings needs it on the host; it cannot be read back here (inside a Scan body, in the browser, or with read-backs off)",
                node.op.escape_debug(),
                node.inputs[i].escape_debug()
            ),
        )),
    }
}

fn string_attr(node: &Node, name: &str, default: &str) -> Result<String> {
    match node.attrs.get(name) {
        None => Ok(default.to_string()),
        Some(Attr::String(s)) => Ok(s.clone()),
        Some(_) => Err(Error::invalid(
            op_name(node),
            name.to_string(),
            format!("{name} must be a string"),
        )),
    }
}

fn int_attr(node: &Node, name: &str, default: i64) -> Result<i64> {
    match node.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Int(v)) => Ok(*v),
        Some(_) => Err(Error::invalid(
            op_name(node),
            name.to_string(),
            format!("{name} must be an integer"),
        )),
    }
}

fn strings_attr(node: &Node, name: &str) -> Result<Vec<String>> {
    match node.attrs.get(name) {
        None => Ok(Vec::new()),
        Some(Attr::Strings(v)) => Ok(v.clone()),
        Some(Attr::String(v)) => Ok(vec![v.clone()]),
        Some(_) => Err(Error::invalid(
            op_name(node),
            name.to_string(),
            format!("{name} must be strings"),
        )),
    }
}

/// StringNormalizer: stopwords removed (compared ignoring case unless `is_case_sensitive`),
/// then the case changed. Its input is `[C]` or `[1, C]`; where every string is removed the
/// output holds one empty string.
fn normalize(node: &Node, x: &StringTensor) -> Result<StringTensor> {
    let op = "StringNormalizer";
    let action = string_attr(node, "case_change_action", "NONE")?;
    // Character by character, as C++'s ctype facet maps them (onnxruntime): a character whose
    // Unicode case mapping is several characters ('ß' to "SS") stays as it is, and the "C"
    // locale maps ASCII letters only.
    let ascii = matches!(string_attr(node, "locale", "")?.as_str(), "C" | "POSIX");
    let map = |s: &str, upper: bool| -> String {
        s.chars()
            .map(|c| {
                if ascii {
                    return if upper {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    };
                }
                let m: Vec<char> = match upper {
                    true => c.to_uppercase().collect(),
                    false => c.to_lowercase().collect(),
                };
                match m.as_slice() {
                    [one] => *one,
                    _ => simple_case(c, upper),
                }
            })
            .collect()
    };
    let change = |s: &str| -> String {
        match action.as_str() {
            "LOWER" => map(s, false),
            "UPPER" => map(s, true),
            _ => s.to_string(),
        }
    };
    match action.as_str() {
        "NONE" | "LOWER" | "UPPER" => {}
        other => {
            return Err(Error::invalid(
                op,
                "case_change_action",
                format!(
                    "case_change_action is '{}'; it is LOWER, UPPER or NONE",
                    other.escape_debug()
                ),
            ))
        }
    }
    let sensitive = int_attr(node, "is_case_sensitive", 0)? != 0;
    let stopwords = strings_attr(node, "stopwords")?;
    let two_d = match x.shape.as_slice() {
        [_] => false,
        [1, _] => true,
        other => {
            return Err(Error::invalid(
                op,
                "X",
                format!("X has shape {other:?}; StringNormalizer takes [C] or [1, C]"),
            ))
        }
    };
    let stop = |s: &str| match sensitive {
        true => stopwords.iter().any(|w| w == s),
        false => {
            let s = map(s, false);
            stopwords.iter().any(|w| map(w, false) == s)
        }
    };
    let mut values: Vec<String> = x
        .values
        .iter()
        .filter(|s| !stop(s))
        .map(|s| change(s))
        .collect();
    if values.is_empty() {
        values.push(String::new());
    }
    let n = values.len();
    StringTensor::new(if two_d { vec![1, n] } else { vec![n] }, values)
}

/// `com.microsoft` Tokenizer (what skl2onnx's text vectorizers use): each string of X (`[C]`
/// or `[N, C]`) cut into tokens, along a new last axis padded with `pad_value` to the most
/// tokens any string has. With `tokenexp`, the tokens are its matches, each the longest match
/// at the leftmost place one starts (RE2's longest-match mode, as onnxruntime runs it); with
/// `separators` (regular expressions), the text between their matches, and with the one
/// separator `""`, each character. Tokens shorter than `mincharnum` characters are dropped;
/// `mark` puts U+0002 before and U+0003 after each string's tokens, unless no string has any.
fn tokenize(node: &Node, x: &StringTensor, budget: u64) -> Result<StringTensor> {
    let op = "Tokenizer";
    let bad = |name: &str, msg: String| Error::invalid(op, name.to_string(), msg);
    let mark = int_attr(node, "mark", 0)? != 0;
    let min_chars = usize::try_from(int_attr(node, "mincharnum", 1)?)
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| bad("mincharnum", "mincharnum must be at least 1".into()))?;
    let pad = string_attr(node, "pad_value", "#")?;
    let separators = strings_attr(node, "separators")?;
    let tokenexp = string_attr(node, "tokenexp", "")?;
    if x.shape.len() > 2 {
        return Err(bad(
            "X",
            format!("X has shape {:?}; Tokenizer takes [C] or [N, C]", x.shape),
        ));
    }
    let tokens: Vec<Vec<&str>> = match (tokenexp.is_empty(), separators.as_slice()) {
        (false, []) => {
            let first = re2_regex(op, "tokenexp", &tokenexp, &re2_classes(&tokenexp))?;
            let longest = regex_automata::hybrid::dfa::DFA::builder()
                .configure(
                    regex_automata::hybrid::dfa::DFA::config()
                        .match_kind(regex_automata::MatchKind::All),
                )
                .build(&re2_classes(&tokenexp))
                .map_err(|e| {
                    bad(
                        "tokenexp",
                        format!("tokenexp: {}", e.to_string().escape_debug()),
                    )
                })?;
            let mut cache = longest.create_cache();
            let mut all = Vec::with_capacity(x.numel());
            for s in &x.values {
                let mut found = Vec::new();
                let mut at = 0;
                // The leftmost place a match starts is the same in both match modes; the
                // lazy DFA then finds the longest match there.
                while let Some(m) = first.find_at(s, at) {
                    let input = regex_automata::Input::new(s.as_str())
                        .range(m.start()..)
                        .anchored(regex_automata::Anchored::Yes);
                    let end = longest
                        .try_search_fwd(&mut cache, &input)
                        .ok()
                        .flatten()
                        .map_or(m.end(), |h| h.offset().max(m.end()));
                    found.push(&s[m.start()..end]);
                    at = match end > m.start() {
                        true => end,
                        // An empty match: go on after the next character.
                        false => s[end..]
                            .chars()
                            .next()
                            .map_or(s.len() + 1, |c| end + c.len_utf8()),
                    };
                    if at > s.len() {
                        break;
                    }
                }
                all.push(found);
            }
            all
        }
        (true, [one]) if one.is_empty() => x
            .values
            .iter()
            .map(|s| {
                s.char_indices()
                    .map(|(i, c)| &s[i..i + c.len_utf8()])
                    .collect()
            })
            .collect(),
        (true, [_, ..]) => {
            let joined: Vec<String> = separators
                .iter()
                .map(|p| format!("(?:{})", re2_classes(p)))
                .collect();
            let re = re2_regex(op, "separators", &separators.join(", "), &joined.join("|"))?;
            x.values.iter().map(|s| re.split(s).collect()).collect()
        }
        _ => {
            return Err(bad(
                "tokenexp",
                "Tokenizer takes exactly one of tokenexp and separators".into(),
            ))
        }
    };
    let tokens: Vec<Vec<&str>> = tokens
        .into_iter()
        .map(|t| {
            t.into_iter()
                .filter(|t| t.chars().count() >= min_chars)
                .collect()
        })
        .collect();
    let most = tokens.iter().map(Vec::len).max().unwrap_or(0);
    let (start, end) = ("\u{2}", "\u{3}");
    let width = if mark && most > 0 { most + 2 } else { most };
    let text = x.values.iter().map(|s| s.len() as u64).sum::<u64>();
    let elements = (tokens.len() as u64).saturating_mul(width as u64);
    check_elements(op, budget, elements, PER_STRING + pad.len() as u64, text)?;
    let mut values = Vec::with_capacity(tokens.len() * width);
    for t in &tokens {
        let before = values.len();
        if mark && most > 0 {
            values.push(start.to_string());
        }
        values.extend(t.iter().map(|t| t.to_string()));
        if mark && most > 0 {
            values.push(end.to_string());
        }
        values.resize(before + width, pad.clone());
    }
    let mut shape = x.shape.clone();
    shape.push(width);
    StringTensor::new(shape, values)
}

/// The simple (one-character) case mapping of `c` where its full mapping has several
/// characters: Rust gives the full one, C's `towupper`/`towlower` the simple one. Only 'İ'
/// lowers to several, and only the Greek letters with ypogegrammeni have a simple uppercase
/// among those that upper to several ('ß' has none and stays).
fn simple_case(c: char, upper: bool) -> char {
    let code = c as u32;
    let simple = match (upper, code) {
        (false, 0x130) => 0x69,
        (true, 0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7) => code + 8,
        (true, 0x1FB3 | 0x1FC3 | 0x1FF3) => code + 9,
        _ => code,
    };
    char::from_u32(simple).unwrap_or(c)
}

/// StringSplit: each string split at `delimiter` (Python's `str.split`: at runs of whitespace,
/// ends trimmed, where the delimiter is empty or not given), at most `maxsplit` times; the
/// pieces padded with empty strings to the most any string has, and their counts.
fn split(node: &Node, x: &StringTensor, budget: u64) -> Result<(StringTensor, HostTensor)> {
    let delimiter = string_attr(node, "delimiter", "")?;
    let maxsplit = match node.attrs.get("maxsplit") {
        None => None,
        Some(Attr::Int(v)) if *v < 0 => None,
        Some(Attr::Int(v)) => Some(*v as usize),
        Some(_) => {
            return Err(Error::invalid(
                "StringSplit",
                "maxsplit",
                "maxsplit must be an integer",
            ))
        }
    };
    let pieces: Vec<Vec<&str>> = x
        .values
        .iter()
        .map(|s| match (delimiter.is_empty(), maxsplit) {
            (false, None) => s.split(delimiter.as_str()).collect(),
            (false, Some(m)) => s.splitn(m + 1, delimiter.as_str()).collect(),
            (true, _) => whitespace_split(s, maxsplit),
        })
        .collect();
    let width = pieces.iter().map(Vec::len).max().unwrap_or(0);
    // The pieces' text is the input's; the padding is empty strings.
    let text = x.values.iter().map(|s| s.len() as u64).sum();
    let elements = (pieces.len() as u64).saturating_mul(width as u64);
    check_elements("StringSplit", budget, elements, PER_STRING, text)?;
    let mut values = Vec::with_capacity(pieces.len() * width);
    for p in &pieces {
        values.extend(p.iter().map(|s| s.to_string()));
        values.extend(std::iter::repeat_n(String::new(), width - p.len()));
    }
    let mut shape = x.shape.clone();
    shape.push(width);
    let counts: Vec<i64> = pieces.iter().map(|p| p.len() as i64).collect();
    Ok((
        StringTensor::new(shape, values)?,
        HostTensor::from_vec(x.shape.clone(), &counts)?,
    ))
}

/// Python's `str.isspace`: Unicode's white space and the separators U+001C to U+001F.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `s.split(None, maxsplit)`: runs of whitespace separate pieces, none are empty,
/// and after `maxsplit` splits the rest (its leading whitespace dropped) is the last piece.
fn whitespace_split(s: &str, maxsplit: Option<usize>) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim_start_matches(is_python_space);
    while !rest.is_empty() {
        if maxsplit.is_some_and(|m| out.len() == m) {
            // Python keeps the rest's trailing whitespace.
            out.push(rest);
            break;
        }
        match rest.find(is_python_space) {
            Some(end) => {
                out.push(&rest[..end]);
                rest = rest[end..].trim_start_matches(is_python_space);
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

/// A LabelEncoder's keys or values: strings, integers or floats (a tensor of numbers keeps
/// its dtype).
enum Column {
    Strings(Vec<String>),
    Numbers(HostTensor),
}

/// ONNX-ML LabelEncoder where its keys or values are strings (the loader expands the others
/// to GPU ops): each input element mapped to the value of the first equal key, else the
/// default.
fn label_encoder(node: &Node, slots: &[Option<&Slot>], budget: u64) -> Result<Vec<Slot>> {
    let op = "LabelEncoder";
    let column = |kind: &str| -> Result<Column> {
        let tensor = format!("{kind}_tensor");
        if let Some(a) = node.attrs.get(&tensor) {
            return match a {
                Attr::Strings(v) => Ok(Column::Strings(v.clone())),
                Attr::Tensor(t) => Ok(Column::Numbers(HostTensor::from_bytes(
                    t.dtype,
                    vec![t.numel()],
                    t.data.clone(),
                )?)),
                _ => Err(Error::invalid(
                    op,
                    tensor.clone(),
                    format!("{tensor} must be a tensor"),
                )),
            };
        }
        let strings = strings_attr(node, &format!("{kind}_strings"))?;
        if !strings.is_empty() {
            return Ok(Column::Strings(strings));
        }
        match (
            node.attrs.get(&format!("{kind}_int64s")),
            node.attrs.get(&format!("{kind}_floats")),
        ) {
            (Some(Attr::Ints(v)), _) => {
                Ok(Column::Numbers(HostTensor::from_vec(vec![v.len()], v)?))
            }
            (_, Some(Attr::Floats(v))) => {
                let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                Ok(Column::Numbers(HostTensor::from_vec(vec![v.len()], &v)?))
            }
            _ => Ok(Column::Strings(Vec::new())),
        }
    };
    let keys = column("keys")?;
    let values = column("values")?;
    let count = |c: &Column| match c {
        Column::Strings(v) => v.len(),
        Column::Numbers(t) => t.numel(),
    };
    if count(&keys) == 0 || count(&keys) != count(&values) {
        return Err(Error::invalid(
            op,
            "keys",
            format!(
                "has {} keys and {} values; it needs one value per key",
                count(&keys),
                count(&values)
            ),
        ));
    }
    // The input's elements as lookup keys: strings, or numbers compared as f64 bits (f32 keys
    // are widened as the input is).
    let slot = slots
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| Error::invalid(op, "X", "LabelEncoder needs its input 'X' (input 0)"))?;
    let key_of = |t: &HostTensor| -> Result<Vec<u64>> {
        Ok(cast_host(t, DType::F64)?
            .to_vec::<f64>()?
            .into_iter()
            .map(|v| if v == 0.0 { 0 } else { v.to_bits() })
            .collect())
    };
    let (shape, positions): (Vec<usize>, Vec<Option<usize>>) = match (&keys, &slot.strings) {
        (Column::Strings(k), Some(x)) => {
            let mut index: HashMap<&str, usize> = HashMap::new();
            for (i, key) in k.iter().enumerate() {
                index.entry(key.as_str()).or_insert(i);
            }
            (
                x.shape.clone(),
                x.values
                    .iter()
                    .map(|s| index.get(s.as_str()).copied())
                    .collect(),
            )
        }
        (Column::Numbers(k), None) => {
            let x = known(node, 0, slot)?;
            let mut index: HashMap<u64, usize> = HashMap::new();
            for (i, key) in key_of(k)?.into_iter().enumerate() {
                index.entry(key).or_insert(i);
            }
            let found = key_of(&x)?
                .into_iter()
                .map(|v| index.get(&v).copied())
                .collect();
            (x.shape.clone(), found)
        }
        (Column::Strings(_), None) => {
            return Err(Error::invalid(
                op,
                "X",
                format!(
                    "X ('{}') is {}, but the keys are strings",
                    node.inputs[0].escape_debug(),
                    slot.non_tensor().unwrap_or("a tensor of numbers")
                ),
            ))
        }
        (Column::Numbers(_), Some(_)) => {
            return Err(Error::invalid(
                op,
                "X",
                format!(
                    "X ('{}') is a string tensor, but the keys are numbers",
                    node.inputs[0].escape_debug()
                ),
            ))
        }
    };
    match values {
        Column::Strings(v) => {
            let default = match node.attrs.get("default_tensor") {
                Some(Attr::Strings(d)) => d.first().cloned().unwrap_or_default(),
                _ => string_attr(node, "default_string", "_Unused")?,
            };
            let longest = v.iter().chain([&default]).map(|s| s.len() as u64).max();
            check_budget(op, budget, &shape, PER_STRING + longest.unwrap_or(0))?;
            let out = positions
                .iter()
                .map(|p| p.map_or_else(|| default.clone(), |i| v[i].clone()))
                .collect();
            Ok(vec![Slot::strings(StringTensor::new(shape, out)?)])
        }
        Column::Numbers(v) => {
            let size = v.dtype.size();
            let default = match node.attrs.get("default_tensor") {
                Some(Attr::Tensor(d)) if d.numel() >= 1 => {
                    cast_host(d, v.dtype)?.data[..size].to_vec()
                }
                Some(_) => {
                    return Err(Error::invalid(
                        op,
                        "default_tensor",
                        "default_tensor must be a tensor of one number",
                    ))
                }
                None if v.dtype == DType::I64 => {
                    int_attr(node, "default_int64", -1)?.to_le_bytes().to_vec()
                }
                None => {
                    let d = match node.attrs.get("default_float") {
                        None => -0.0,
                        Some(Attr::Float(f)) => *f as f32,
                        Some(_) => {
                            return Err(Error::invalid(
                                op,
                                "default_float",
                                "default_float must be a float",
                            ))
                        }
                    };
                    cast_host(&HostTensor::from_vec(vec![], &[d])?, v.dtype)?.data
                }
            };
            let mut data = Vec::with_capacity(positions.len() * size);
            for p in &positions {
                match p {
                    Some(i) => data.extend_from_slice(&v.data[i * size..(i + 1) * size]),
                    None => data.extend_from_slice(&default),
                }
            }
            Ok(vec![Slot::input(HostTensor::from_bytes(
                v.dtype, shape, data,
            )?)])
        }
    }
}

/// ONNX-ML ZipMap: each row of the scores `[N, C]` (or the one row `[C]`) as a map from the
/// C class labels (strings or integers) to its scores.
fn zip_map(node: &Node, slots: &[Option<&Slot>]) -> Result<Vec<Slot>> {
    let op = "ZipMap";
    let names = strings_attr(node, "classlabels_strings")?;
    let keys = match (node.attrs.get("classlabels_int64s"), names.is_empty()) {
        (Some(Attr::Ints(ints)), true) => MapKeys::Ints(ints.clone()),
        (None, false) => MapKeys::Strings(names),
        _ => {
            return Err(Error::invalid(
                op,
                "classlabels_strings",
                "ZipMap takes exactly one of classlabels_strings and classlabels_int64s",
            ))
        }
    };
    let slot = slots
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| Error::invalid(op, "X", "ZipMap needs its input 'X' (input 0)"))?;
    let x = known(node, 0, slot)?;
    if x.dtype != DType::F32 {
        return Err(Error::invalid(
            op,
            "X",
            format!("X is {}; ZipMap takes f32 scores", x.dtype),
        ));
    }
    let c = keys.len();
    let rows = match x.shape.as_slice() {
        [n, k] if *k == c => *n,
        [k] if *k == c => 1,
        other => {
            return Err(Error::invalid(
                op,
                "X",
                format!("X has shape {other:?}; {c} class labels need [N, {c}] or [{c}]"),
            ))
        }
    };
    let values = HostTensor::from_bytes(DType::F32, vec![rows, c], x.data)?;
    Ok(vec![Slot::maps(MapSequence::new(keys, values)?)])
}

/// Input 0 of an op on maps: a map.
fn map_input<'a>(node: &Node, slots: &[Option<&'a Slot>]) -> Result<&'a Map> {
    let op = op_name(node);
    let slot = slots.first().copied().flatten().ok_or_else(|| {
        Error::invalid(
            op,
            "X",
            format!("{} needs its input 'X' (input 0)", node.op.escape_debug()),
        )
    })?;
    slot.map.as_deref().ok_or_else(|| {
        Error::invalid(
            op,
            "X",
            format!(
                "X ('{}') is {}; {} takes a map",
                node.inputs[0].escape_debug(),
                slot.non_tensor().unwrap_or("a tensor"),
                node.op.escape_debug()
            ),
        )
    })
}

/// The values of `map` at `positions` (a position of `None`: `pad`, or zero for numbers)
/// as one row `[1, positions.len()]`, numbers or strings as the map holds them.
fn map_row(map: &Map, positions: &[Option<usize>], pad: &str) -> Result<Slot> {
    let shape = vec![1, positions.len()];
    Ok(match map.values() {
        MapValues::Strings(v) => Slot::strings(StringTensor::new(
            shape,
            positions
                .iter()
                .map(|p| p.map_or(pad, |i| &v[i]).to_string())
                .collect(),
        )?),
        MapValues::Numbers(t) => {
            let w = t.dtype.size();
            let mut data = vec![0u8; positions.len() * w];
            for (out, p) in data.chunks_exact_mut(w).zip(positions) {
                if let Some(i) = p {
                    out.copy_from_slice(&t.data[i * w..(i + 1) * w]);
                }
            }
            Slot::input(HostTensor::from_bytes(t.dtype, shape, data)?)
        }
    })
}

/// Refuses a result of `elements` values of `map`'s kind that would exceed the memory
/// limit, before it is made.
fn check_map_result(op: &'static str, budget: u64, map: &Map, elements: u64) -> Result<()> {
    let each = match map.values() {
        MapValues::Strings(v) => PER_STRING + v.iter().map(|s| s.len() as u64).max().unwrap_or(0),
        MapValues::Numbers(t) => t.dtype.size() as u64,
    };
    // A position (16 bytes) per element besides the value.
    check_elements(op, budget, elements, each + 16, 0)
}

/// ONNX-ML DictVectorizer: the map's values at the vocabulary's keys, one row `[1, V]` (as
/// onnxruntime gives it; the spec's text says 1-D), zero or `""` where the map lacks a key.
/// The vocabulary is `int64_vocabulary` for a map from integers, `string_vocabulary` for one
/// from strings; keys of the map outside it are left out, and a key it repeats is repeated.
fn dict_vectorizer(node: &Node, slots: &[Option<&Slot>], budget: u64) -> Result<Vec<Slot>> {
    let op = "ai.onnx.ml.DictVectorizer";
    let x = map_input(node, slots)?;
    // Given with at least one entry (an empty list may load typed either way).
    let given = |name: &str| match node.attrs.get(name) {
        None => false,
        Some(Attr::Ints(v)) => !v.is_empty(),
        Some(Attr::Strings(v)) => !v.is_empty(),
        Some(_) => true,
    };
    let (ints, strings) = (given("int64_vocabulary"), given("string_vocabulary"));
    if ints && strings {
        return Err(Error::invalid(
            op,
            "string_vocabulary",
            "DictVectorizer takes one of string_vocabulary and int64_vocabulary, not both",
        ));
    }
    let positions: Vec<Option<usize>> = match x.keys() {
        MapKeys::Ints(keys) => {
            if strings {
                return Err(Error::invalid(
                    op,
                    "string_vocabulary",
                    format!(
                        "X is a {} but the vocabulary is string_vocabulary; a map from i64 keys takes int64_vocabulary",
                        x.map_type().name()
                    ),
                ));
            }
            let vocabulary = match node.attrs.get("int64_vocabulary") {
                None => Vec::new(),
                Some(Attr::Ints(v)) => v.clone(),
                Some(Attr::Strings(v)) if v.is_empty() => Vec::new(),
                Some(_) => {
                    return Err(Error::invalid(
                        op,
                        "int64_vocabulary",
                        "int64_vocabulary must be integers",
                    ))
                }
            };
            check_map_result(op, budget, x, vocabulary.len() as u64)?;
            vocabulary
                .iter()
                .map(|v| keys.binary_search(v).ok())
                .collect()
        }
        MapKeys::Strings(keys) => {
            if ints {
                return Err(Error::invalid(
                    op,
                    "int64_vocabulary",
                    format!(
                        "X is a {} but the vocabulary is int64_vocabulary; a map from string keys takes string_vocabulary",
                        x.map_type().name()
                    ),
                ));
            }
            let vocabulary = match node.attrs.get("string_vocabulary") {
                Some(Attr::Ints(v)) if v.is_empty() => Vec::new(),
                _ => strings_attr(node, "string_vocabulary")?,
            };
            check_map_result(op, budget, x, vocabulary.len() as u64)?;
            vocabulary
                .iter()
                .map(|v| keys.binary_search(v).ok())
                .collect()
        }
    };
    Ok(vec![map_row(x, &positions, "")?])
}

/// ONNX-ML CastMap: a map from i64 keys as one row `[1, n]` of its values cast to f32
/// (`TO_FLOAT`), i64 (`TO_INT64`) or strings (`TO_STRING`), as onnxruntime computes it.
/// `DENSE`: the values in ascending key order. `SPARSE`: `max_map` values, the value of key
/// `k` at position `k`, the pad elsewhere (0, or the text `0.f`); keys from `max_map` up are
/// left out and a negative key is refused. Floats become text as C's `%f` writes them (`nan`,
/// `inf`), floats become i64 as Cast makes them (truncated, saturated, NaN as 0), and strings
/// are read as Cast reads them (surrounding whitespace ignored; an error names a string that
/// is not a number).
fn cast_map(node: &Node, slots: &[Option<&Slot>], budget: u64) -> Result<Vec<Slot>> {
    let op = "ai.onnx.ml.CastMap";
    let x = map_input(node, slots)?;
    let MapKeys::Ints(keys) = x.keys() else {
        return Err(Error::invalid(
            op,
            "X",
            format!(
                "X is a {}; CastMap takes a map from i64 keys",
                x.map_type().name()
            ),
        ));
    };
    let cast_to = string_attr(node, "cast_to", "TO_FLOAT")?;
    let target = match cast_to.as_str() {
        "TO_FLOAT" => Some(DType::F32),
        "TO_INT64" => Some(DType::I64),
        "TO_STRING" => None,
        other => {
            return Err(Error::invalid(
                op,
                "cast_to",
                format!(
                    "cast_to is '{}'; it must be TO_FLOAT, TO_INT64 or TO_STRING",
                    other.escape_debug()
                ),
            ))
        }
    };
    let sparse = match string_attr(node, "map_form", "DENSE")?.as_str() {
        "DENSE" => false,
        "SPARSE" => true,
        other => {
            return Err(Error::invalid(
                op,
                "map_form",
                format!(
                    "map_form is '{}'; it must be DENSE or SPARSE",
                    other.escape_debug()
                ),
            ))
        }
    };
    let positions: Vec<Option<usize>> = if sparse {
        let max_map = int_attr(node, "max_map", 1)?;
        if max_map <= 0 {
            return Err(Error::invalid(
                op,
                "max_map",
                format!("max_map is {max_map}; SPARSE needs a size of 1 or more"),
            ));
        }
        if let Some(k) = keys.first().filter(|k| **k < 0) {
            return Err(Error::invalid(
                op,
                "X",
                format!("X has key {k}; SPARSE places each value at its key, which must not be negative"),
            ));
        }
        // The result's text is at most the longest value's or 24 bytes a number.
        let longest = match x.values() {
            MapValues::Strings(v) => v.iter().map(|s| s.len() as u64).max().unwrap_or(0),
            MapValues::Numbers(_) => 0,
        };
        check_elements(op, budget, max_map as u64, PER_STRING + 24 + longest, 0)?;
        let size = usize::try_from(max_map).map_err(|_| {
            Error::invalid(
                op,
                "max_map",
                format!("max_map is {max_map}, more values than this machine can address"),
            )
        })?;
        let mut p = vec![None; size];
        for (i, &k) in keys.iter().enumerate() {
            // A key past the address space (on 32-bit targets) is past max_map too.
            if let Some(slot) = usize::try_from(k).ok().and_then(|k| p.get_mut(k)) {
                *slot = Some(i);
            }
        }
        p
    } else {
        (0..keys.len()).map(Some).collect()
    };
    let key_of = |i: usize| keys[i];
    let values: Vec<Option<CastSource<'_>>> = positions
        .iter()
        .map(|p| {
            p.map(|i| match x.values() {
                MapValues::Strings(v) => CastSource::Text(&v[i]),
                MapValues::Numbers(t) => match t.dtype {
                    DType::F32 => {
                        CastSource::Float(f32::read_bytes(&t.data[i * 4..i * 4 + 4]) as f64)
                    }
                    DType::F64 => CastSource::Float(f64::read_bytes(&t.data[i * 8..i * 8 + 8])),
                    _ => CastSource::Int(i64::read_bytes(&t.data[i * 8..i * 8 + 8])),
                },
            })
        })
        .collect();
    let not_a_number = |i: usize, s: &str, dtype: DType| {
        Error::invalid(
            op,
            "X",
            format!(
                "the value '{}' of key {} is not a number of {dtype}",
                s.escape_debug(),
                key_of(i)
            ),
        )
    };
    let shape = vec![1, positions.len()];
    let out = match target {
        Some(DType::F32) => {
            let mut v = Vec::with_capacity(values.len());
            for (p, s) in positions.iter().zip(&values) {
                v.push(match (p, s) {
                    (Some(_), Some(CastSource::Float(f))) => *f as f32,
                    (Some(_), Some(CastSource::Int(n))) => *n as f32,
                    (Some(i), Some(CastSource::Text(t))) => t
                        .trim()
                        .parse::<f32>()
                        .map_err(|_| not_a_number(*i, t, DType::F32))?,
                    _ => 0.0,
                });
            }
            Slot::input(HostTensor::from_vec(shape, &v)?)
        }
        Some(_) => {
            let mut v = Vec::with_capacity(values.len());
            for (p, s) in positions.iter().zip(&values) {
                v.push(match (p, s) {
                    (Some(_), Some(CastSource::Float(f))) => *f as i64,
                    (Some(_), Some(CastSource::Int(n))) => *n,
                    (Some(i), Some(CastSource::Text(t))) => t
                        .trim()
                        .parse::<i64>()
                        .map_err(|_| not_a_number(*i, t, DType::I64))?,
                    _ => 0,
                });
            }
            Slot::input(HostTensor::from_vec(shape, &v)?)
        }
        None => Slot::strings(StringTensor::new(
            shape,
            values
                .iter()
                .map(|s| match s {
                    Some(CastSource::Float(f)) => format_f6(*f),
                    Some(CastSource::Int(n)) => n.to_string(),
                    Some(CastSource::Text(t)) => t.to_string(),
                    // onnxruntime's pad for text.
                    None => "0.f".to_string(),
                })
                .collect(),
        )?),
    };
    Ok(vec![out])
}

/// A map value CastMap converts.
enum CastSource<'a> {
    Float(f64),
    Int(i64),
    Text(&'a str),
}

/// `v` as C's `printf("%f")` writes it (what `std::to_string` gives), glibc's `nan`, `-nan`,
/// `inf` and `-inf` included.
fn format_f6(v: f64) -> String {
    match v {
        v if v.is_nan() && v.is_sign_negative() => "-nan".into(),
        v if v.is_nan() => "nan".into(),
        v if v.is_infinite() => if v < 0.0 { "-inf" } else { "inf" }.into(),
        // Rust's fixed precision rounds the exact binary value half to even, as glibc does.
        v => format!("{v:.6}"),
    }
}

/// Cast to strings (integers in decimal, floats as C's `%.8g` with NaN, INF and -INF, as
/// onnxruntime writes them) or from strings (parsed as the target type; an error names the
/// first string that is not one).
fn cast(node: &Node, slots: &[Option<&Slot>], budget: u64) -> Result<Vec<Slot>> {
    let op = "Cast";
    let slot = slots
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| Error::invalid(op, "input", "Cast needs its input (input 0)"))?;
    let to = match node.attrs.get("to") {
        Some(Attr::String(s)) => s.clone(),
        _ => return Err(Error::invalid(op, "to", "to must be a dtype's name")),
    };
    match (&slot.strings, to.as_str()) {
        (Some(s), "string") => Ok(vec![Slot::strings(StringTensor::clone(s))]),
        (None, "string") => {
            let x = known(node, 0, slot)?;
            // %.8g and 64-bit integers take at most 24 bytes.
            check_budget(op, budget, &x.shape, PER_STRING + 24)?;
            let values = format_numbers(&x)?;
            Ok(vec![Slot::strings(StringTensor::new(
                x.shape.clone(),
                values,
            )?)])
        }
        (Some(s), name) => {
            let dtype = DType::from_name(name).ok_or_else(|| {
                Error::invalid(
                    op,
                    "to",
                    format!("to '{}' is not a dtype", name.escape_debug()),
                )
            })?;
            Ok(vec![Slot::input(parse_numbers(s, dtype)?)])
        }
        (None, _) => Err(Error::invalid(op, "to", "internal: not a cast of strings")),
    }
}

fn is_float(d: DType) -> bool {
    !d.is_integer()
        && !matches!(
            d,
            DType::Bool | DType::I4 | DType::U4 | DType::I2 | DType::U2
        )
}

fn format_numbers(x: &HostTensor) -> Result<Vec<String>> {
    let d = x.dtype;
    Ok(if d == DType::Bool {
        x.data
            .iter()
            .map(|&b| if b != 0 { "1" } else { "0" }.to_string())
            .collect()
    } else if is_float(d) {
        cast_host(x, DType::F64)?
            .to_vec::<f64>()?
            .into_iter()
            .map(format_g8)
            .collect()
    } else if d == DType::U64 {
        x.to_vec::<u64>()?
            .into_iter()
            .map(|v| v.to_string())
            .collect()
    } else {
        cast_host(x, DType::I64)?
            .to_vec::<i64>()?
            .into_iter()
            .map(|v| v.to_string())
            .collect()
    })
}

/// `v` as C's `printf("%.8g")` writes it; NaN, INF and -INF as onnxruntime writes those.
pub(crate) fn format_g8(v: f64) -> String {
    const P: i32 = 8;
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-INF" } else { "INF" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Rounded to P significant digits first: the exponent decides the style.
    let sci = format!("{:.*e}", (P - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').expect("{:e} writes an exponent");
    let exp: i32 = exp.parse().expect("{:e} writes an integer exponent");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..P).contains(&exp) {
        trim(&format!("{:.*}", (P - 1 - exp) as usize, v))
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    }
}

/// Each string of `s`, less surrounding whitespace, parsed as a `T`; `bad` makes the error
/// for a string that is not one.
fn parse_all<T: std::str::FromStr>(
    s: &StringTensor,
    bad: impl Fn(&str) -> Error,
) -> Result<Vec<T>> {
    s.values
        .iter()
        .map(|v| v.trim().parse::<T>().map_err(|_| bad(v)))
        .collect()
}

fn parse_numbers(s: &StringTensor, dtype: DType) -> Result<HostTensor> {
    let bad = |v: &str| {
        Error::invalid(
            "Cast",
            "input",
            format!("'{}' is not a number of {dtype}", v.escape_debug()),
        )
    };
    if is_float(dtype) {
        // Rust's float parsing takes "inf", "infinity" and "nan" in any case, as strtod does.
        if dtype == DType::F32 {
            let values: Vec<f32> = parse_all(s, bad)?;
            return HostTensor::from_vec(s.shape.clone(), &values);
        }
        let values: Vec<f64> = parse_all(s, bad)?;
        return cast_host(&HostTensor::from_vec(s.shape.clone(), &values)?, dtype);
    }
    if dtype == DType::Bool {
        return Err(Error::invalid(
            "Cast",
            "to",
            "Cast from strings to bool is not supported (the spec leaves it undefined)",
        ));
    }
    if dtype == DType::U64 {
        let values: Vec<u64> = parse_all(s, bad)?;
        return HostTensor::from_vec(s.shape.clone(), &values);
    }
    let values: Vec<i64> = parse_all(s, bad)?;
    let wide = HostTensor::from_vec(s.shape.clone(), &values)?;
    let out = cast_host(&wide, dtype)?;
    // A value the target cannot hold is refused, not wrapped.
    if cast_host(&out, DType::I64)? != wide {
        let i = values
            .iter()
            .zip(cast_host(&out, DType::I64)?.to_vec::<i64>()?)
            .position(|(a, b)| *a != b)
            .unwrap_or(0);
        return Err(bad(&s.values[i]));
    }
    Ok(out)
}

// The registry's entries for [`OPS`]: the executor records them itself ([`record`]).
planned_op!(
    STRING_CONSTANT,
    "StringConstant",
    0..=0,
    1..=1,
    &["value", "shape"]
);
planned_op!(STRING_CONCAT, "StringConcat", 2..=2, 1..=1, &[]);
planned_op!(
    STRING_NORMALIZER,
    "StringNormalizer",
    1..=1,
    1..=1,
    &[
        "case_change_action",
        "is_case_sensitive",
        "locale",
        "stopwords"
    ]
);
planned_op!(
    STRING_SPLIT,
    "StringSplit",
    1..=1,
    1..=2,
    &["delimiter", "maxsplit"]
);
planned_op!(
    REGEX_FULL_MATCH,
    "RegexFullMatch",
    1..=1,
    1..=1,
    &["pattern"]
);
planned_op!(
    LABEL_ENCODER,
    "LabelEncoder",
    1..=1,
    1..=1,
    &[
        "keys_strings",
        "keys_int64s",
        "keys_floats",
        "keys_tensor",
        "values_strings",
        "values_int64s",
        "values_floats",
        "values_tensor",
        "default_string",
        "default_int64",
        "default_float",
        "default_tensor"
    ]
);

planned_op!(
    CATEGORY_MAPPER,
    "CategoryMapper",
    1..=1,
    1..=1,
    &[
        "cats_strings",
        "cats_int64s",
        "default_string",
        "default_int64"
    ]
);

planned_op!(
    ZIP_MAP,
    "ZipMap",
    1..=1,
    1..=1,
    &["classlabels_strings", "classlabels_int64s"]
);

planned_op!(
    TOKENIZER,
    "Tokenizer",
    1..=1,
    1..=1,
    &["mark", "mincharnum", "pad_value", "separators", "tokenexp"]
);

planned_op!(
    DICT_VECTORIZER,
    "ai.onnx.ml.DictVectorizer",
    1..=1,
    1..=1,
    &["string_vocabulary", "int64_vocabulary"]
);

planned_op!(
    CAST_MAP,
    "ai.onnx.ml.CastMap",
    1..=1,
    1..=1,
    &["cast_to", "map_form", "max_map"]
);

/// The registry's entries for [`OPS`], in that order.
pub(crate) static DEFS: [&OpDef; 11] = [
    &STRING_CONSTANT,
    &STRING_CONCAT,
    &STRING_NORMALIZER,
    &STRING_SPLIT,
    &REGEX_FULL_MATCH,
    &LABEL_ENCODER,
    &CATEGORY_MAPPER,
    &ZIP_MAP,
    &TOKENIZER,
    &DICT_VECTORIZER,
    &CAST_MAP,
];
