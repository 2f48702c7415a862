//! Loading graphs from the JSON format of `docs/graph-format.md`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::{Attr, Graph, Node, ValueInfo};
use crate::{DType, Element, Error, HostTensor, Result};

fn err(msg: impl Into<String>) -> Error {
    Error::Graph(msg.into())
}

fn object<'a>(v: &'a Value, what: &str, allowed: &[&str]) -> Result<&'a Map<String, Value>> {
    let o = v
        .as_object()
        .ok_or_else(|| err(format!("{what} must be a JSON object")))?;
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(err(format!(
            "{what}: unknown key '{k}' (allowed: {})",
            allowed.join(", ")
        )));
    }
    Ok(o)
}

fn string(v: &Value, what: &str) -> Result<String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| err(format!("{what} must be a string")))
}

fn list<'a>(o: &'a Map<String, Value>, key: &str, what: &str) -> Result<&'a [Value]> {
    match o.get(key) {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(err(format!("{what}: '{key}' must be a list"))),
    }
}

fn dtype(v: &Value, what: &str) -> Result<DType> {
    let name = string(v, what)?;
    DType::from_name(&name).ok_or_else(|| {
        let all: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        err(format!(
            "{what}: unknown dtype '{name}' (one of {})",
            all.join(" ")
        ))
    })
}

fn shape(v: &Value, what: &str, allow_null: bool) -> Result<Vec<Option<usize>>> {
    let dims = v
        .as_array()
        .ok_or_else(|| err(format!("{what}: shape must be a list")))?;
    dims.iter()
        .enumerate()
        .map(|(i, d)| match d {
            Value::Null if allow_null => Ok(None),
            _ => d
                .as_u64()
                .and_then(|d| usize::try_from(d).ok())
                .map(Some)
                .ok_or_else(|| {
                    err(format!(
                        "{what}: shape[{i}] must be a non-negative integer{}",
                        if allow_null { " or null" } else { "" }
                    ))
                }),
        })
        .collect()
}

fn value_info(v: &Value, what: &str, allow_null: bool) -> Result<ValueInfo> {
    if let Value::String(name) = v {
        return Ok(ValueInfo::named(name.clone()));
    }
    let o = object(
        v,
        what,
        &["name", "dtype", "shape", "kind", "keys", "values"],
    )?;
    let name = string(
        o.get("name").unwrap_or(&Value::Null),
        &format!("{what}: name"),
    )?;
    let what = format!("{what} '{name}'");
    let kind = match o.get("kind") {
        None => super::ValueKind::Tensor,
        Some(k) => match k.as_str() {
            Some("tensor") => super::ValueKind::Tensor,
            Some("sequence") => super::ValueKind::Sequence,
            Some("optional") => super::ValueKind::OptionalTensor,
            Some("optional sequence") => super::ValueKind::OptionalSequence,
            Some("strings") => super::ValueKind::Strings,
            Some("maps") => super::ValueKind::Maps,
            Some("map") => super::ValueKind::Map(map_type(o, &what)?),
            _ => {
                return Err(err(format!(
                    "{what}: kind must be \"tensor\", \"sequence\", \"optional\", \"optional sequence\", \"strings\", \"maps\" or \"map\", not {k}"
                )))
            }
        },
    };
    if !matches!(kind, super::ValueKind::Map(_)) {
        if let Some(field) = ["keys", "values"].into_iter().find(|f| o.contains_key(*f)) {
            return Err(err(format!(
                "{what}: {field} is given only with \"kind\": \"map\""
            )));
        }
    }
    Ok(ValueInfo {
        dtype: o.get("dtype").map(|d| dtype(d, &what)).transpose()?,
        shape: o
            .get("shape")
            .map(|s| shape(s, &what, allow_null))
            .transpose()?,
        name,
        kind,
    })
}

/// A map's declared types: `"keys"` `"i64"` or `"string"`, `"values"` `"f32"`, `"f64"`,
/// `"i64"` or `"string"`.
fn map_type(o: &serde_json::Map<String, Value>, what: &str) -> Result<crate::MapType> {
    let int_keys = match o.get("keys").and_then(Value::as_str) {
        Some("i64") => true,
        Some("string") => false,
        _ => {
            return Err(err(format!(
                "{what}: a map declares \"keys\": \"i64\" or \"string\""
            )))
        }
    };
    let values = match o.get("values").and_then(Value::as_str) {
        Some("f32") => Some(DType::F32),
        Some("f64") => Some(DType::F64),
        Some("i64") => Some(DType::I64),
        Some("string") => None,
        _ => {
            return Err(err(format!(
                "{what}: a map declares \"values\": \"f32\", \"f64\", \"i64\" or \"string\""
            )))
        }
    };
    if o.contains_key("dtype") || o.contains_key("shape") {
        return Err(err(format!(
            "{what}: a map has no dtype or shape (its types are \"keys\" and \"values\")"
        )));
    }
    crate::MapType::new(int_keys, values)
}

fn encode<T: Element>(
    dtype: DType,
    values: &[Value],
    what: &str,
    convert: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(values.len() * T::DTYPE.size());
    for (i, v) in values.iter().enumerate() {
        let x = convert(v)
            .ok_or_else(|| err(format!("{what}: data[{i}] = {v} is not a valid {dtype}")))?;
        T::write_bytes(&[x], &mut out);
    }
    Ok(out)
}

fn int<T: TryFrom<i64> + TryFrom<u64>>(v: &Value) -> Option<T> {
    v.as_i64()
        .and_then(|x| T::try_from(x).ok())
        .or_else(|| v.as_u64().and_then(|x| T::try_from(x).ok()))
}

/// Encodes a flat JSON list as `dtype` elements (C order).
fn constant_data(d: DType, values: &[Value], what: &str) -> Result<Vec<u8>> {
    use half::{bf16, f16};
    match d {
        DType::F32 => encode(d, values, what, |v| v.as_f64().map(|x| x as f32)),
        DType::F64 => encode(d, values, what, Value::as_f64),
        DType::F16 => encode(d, values, what, |v| v.as_f64().map(f16::from_f64)),
        DType::BF16 => encode(d, values, what, |v| v.as_f64().map(bf16::from_f64)),
        DType::I8 => encode(d, values, what, int::<i8>),
        DType::I16 => encode(d, values, what, int::<i16>),
        DType::I32 => encode(d, values, what, int::<i32>),
        DType::I64 => encode(d, values, what, int::<i64>),
        DType::U8 => encode(d, values, what, int::<u8>),
        DType::U16 => encode(d, values, what, int::<u16>),
        DType::U32 => encode(d, values, what, int::<u32>),
        DType::U64 => encode(d, values, what, int::<u64>),
        DType::Bool => encode(d, values, what, Value::as_bool),
        DType::I4 | DType::U4 | DType::I2 | DType::U2 => {
            let bits = d.packed_bits().unwrap_or(8) as u32;
            let (lo, hi) = if matches!(d, DType::I4 | DType::I2) {
                (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
            } else {
                (0, (1i64 << bits) - 1)
            };
            encode(d, values, what, |v| {
                v.as_i64()
                    .filter(|x| (lo..=hi).contains(x))
                    .map(|x| crate::minifloat::int_code(d, x))
            })
        }
        // Floats rounded as Cast rounds them (nearest-even, saturating).
        _ => encode(d, values, what, |v| {
            v.as_f64()
                .map(|x| crate::minifloat::encode(d, x as f32, crate::CastMode::default()))
        }),
    }
}

fn constant(v: &Value, base: Option<&Path>) -> Result<(String, HostTensor)> {
    let o = object(v, "a constant", &["name", "dtype", "shape", "data", "npy"])?;
    let name = string(o.get("name").unwrap_or(&Value::Null), "a constant's name")?;
    let what = format!("constant '{name}'");
    let declared = ValueInfo {
        name: name.clone(),
        dtype: o.get("dtype").map(|d| dtype(d, &what)).transpose()?,
        shape: o.get("shape").map(|s| shape(s, &what, false)).transpose()?,
        kind: super::ValueKind::Tensor,
    };
    let value = match (o.get("data"), o.get("npy")) {
        (Some(data), None) => {
            let d = declared
                .dtype
                .ok_or_else(|| err(format!("{what}: 'dtype' is required with 'data'")))?;
            let s: Vec<usize> = declared
                .shape
                .clone()
                .ok_or_else(|| err(format!("{what}: 'shape' is required with 'data'")))?
                .into_iter()
                .map(|d| d.expect("nulls refused"))
                .collect();
            let values = data
                .as_array()
                .ok_or_else(|| err(format!("{what}: 'data' must be a flat list")))?;
            let n = crate::host::checked_numel(&s)
                .ok_or_else(|| err(format!("{what}: shape too large")))?;
            if values.len() != n {
                return Err(err(format!(
                    "{what}: 'data' has {} values but shape {s:?} holds {n}",
                    values.len()
                )));
            }
            HostTensor::from_bytes(d, s, constant_data(d, values, &what)?)?
        }
        (None, Some(path)) => read_npy_constant(
            &string(path, &format!("{what}: npy"))?,
            base,
            &what,
            &declared,
        )?,
        _ => return Err(err(format!("{what}: give exactly one of 'data' and 'npy'"))),
    };
    declared.check("constant", value.dtype, &value.shape)?;
    Ok((name, value))
}

#[cfg(feature = "native")]
fn read_npy_constant(
    path: &str,
    base: Option<&Path>,
    _what: &str,
    declared: &ValueInfo,
) -> Result<HostTensor> {
    let full = base.map_or_else(|| Path::new(path).to_path_buf(), |b| b.join(path));
    crate::npy::as_declared(crate::npy::read(&full)?, declared.dtype)
}

#[cfg(not(feature = "native"))]
fn read_npy_constant(_: &str, _: Option<&Path>, what: &str, _: &ValueInfo) -> Result<HostTensor> {
    Err(err(format!(
        "{what}: .npy constants need the 'native' feature"
    )))
}

fn attr(v: &Value, base: Option<&Path>, what: &str) -> Result<Attr> {
    Ok(match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => Attr::Int(i),
            None => Attr::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Attr::String(s.clone()),
        Value::Array(items) => {
            if items.iter().all(|i| i.as_i64().is_some()) {
                Attr::Ints(items.iter().map(|i| i.as_i64().unwrap()).collect())
            } else if items.iter().all(Value::is_number) {
                Attr::Floats(
                    items
                        .iter()
                        .map(|i| i.as_f64().unwrap_or(f64::NAN))
                        .collect(),
                )
            } else if items.iter().all(Value::is_string) {
                Attr::Strings(
                    items
                        .iter()
                        .map(|i| i.as_str().unwrap_or_default().to_string())
                        .collect(),
                )
            } else {
                return Err(err(format!(
                    "{what} must be a number, a string, a list of numbers, a list of strings or a graph"
                )));
            }
        }
        Value::Object(_) => Attr::Graph(Box::new(graph(v, base)?)),
        _ => {
            return Err(err(format!(
                "{what} must be a number, a string, a list of numbers, a list of strings or a graph"
            )))
        }
    })
}

fn node(v: &Value, k: usize, base: Option<&Path>) -> Result<Node> {
    let o = object(
        v,
        &format!("nodes[{k}]"),
        &["op", "name", "inputs", "outputs", "attrs"],
    )?;
    let op = string(
        o.get("op").unwrap_or(&Value::Null),
        &format!("nodes[{k}].op"),
    )?;
    let name = match o.get("name") {
        Some(n) => string(n, &format!("nodes[{k}].name"))?,
        None => format!("{op}#{k}"),
    };
    let what = format!("node '{name}'");
    let names = |key: &str| -> Result<Vec<String>> {
        list(o, key, &what)?
            .iter()
            .map(|n| string(n, &format!("{what}: {key}")))
            .collect()
    };
    let mut attrs = BTreeMap::new();
    if let Some(a) = o.get("attrs") {
        let a = a
            .as_object()
            .ok_or_else(|| err(format!("{what}: attrs must be an object")))?;
        for (key, value) in a {
            attrs.insert(
                key.clone(),
                attr(value, base, &format!("{what}: attribute '{key}'"))?,
            );
        }
    }
    Ok(Node {
        inputs: names("inputs")?,
        outputs: names("outputs")?,
        op,
        name,
        attrs,
    })
}

/// Builds a graph from parsed JSON; `.npy` constants are found relative to `base`.
pub fn graph(v: &Value, base: Option<&Path>) -> Result<Graph> {
    let o = object(v, "the graph", &["inputs", "constants", "nodes", "outputs"])?;
    Ok(Graph {
        inputs: list(o, "inputs", "the graph")?
            .iter()
            .map(|i| value_info(i, "an input", true))
            .collect::<Result<_>>()?,
        constants: list(o, "constants", "the graph")?
            .iter()
            .map(|c| constant(c, base).map(|(name, value)| (name, value.into())))
            .collect::<Result<_>>()?,
        nodes: list(o, "nodes", "the graph")?
            .iter()
            .enumerate()
            .map(|(k, n)| node(n, k, base))
            .collect::<Result<_>>()?,
        outputs: list(o, "outputs", "the graph")?
            .iter()
            .map(|i| value_info(i, "an output", true))
            .collect::<Result<_>>()?,
        symbolic_dims: Default::default(),
    })
}

/// Parses graph JSON text.
pub fn from_str(text: &str, base: Option<&Path>) -> Result<Graph> {
    let v: Value = serde_json::from_str(text).map_err(|e| err(format!("invalid JSON: {e}")))?;
    graph(&v, base)
}

/// Reads a graph file; `.npy` constants are relative to its folder.
#[cfg(feature = "native")]
pub fn load(path: &Path) -> Result<Graph> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    from_str(&text, path.parent()).map_err(|e| match e {
        Error::Graph(m) => Error::Graph(format!("{}: {m}", path.display())),
        e => e,
    })
}
