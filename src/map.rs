//! ONNX-ML maps (`map(K, V)`), what DictVectorizer and CastMap read: one map from integers or
//! strings to numbers or strings, on the host only, as string tensors are.

use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::{DType, Error, HostTensor, MapKeys, Result};

/// The types of a map: its keys are i64 or strings; its values f32, f64, i64 or strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapType {
    /// The keys are i64 (else strings).
    pub int_keys: bool,
    /// The values' dtype: f32, f64 or i64; `None` for strings.
    pub values: Option<DType>,
}

impl MapType {
    /// Fails unless `values` is f32, f64, i64 or `None` (strings), the value types ONNX-ML's
    /// maps take.
    pub fn new(int_keys: bool, values: Option<DType>) -> Result<MapType> {
        match values {
            None | Some(DType::F32 | DType::F64 | DType::I64) => Ok(MapType { int_keys, values }),
            Some(d) => Err(Error::invalid(
                "Map",
                "values",
                format!("a map's values are f32, f64, i64 or strings, not {d}"),
            )),
        }
    }

    /// As ONNX writes it with our dtype names: `map(i64, f32)`, `map(string, string)`.
    pub fn name(&self) -> String {
        format!(
            "map({}, {})",
            if self.int_keys { "i64" } else { "string" },
            self.values.map_or("string", |d| d.name())
        )
    }
}

/// A map's values, in the order of its keys.
#[derive(Clone, Debug, PartialEq)]
pub enum MapValues {
    /// A 1-D tensor, f32, f64 or i64.
    Numbers(HostTensor),
    /// Strings.
    Strings(Vec<String>),
}

impl MapValues {
    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            MapValues::Numbers(t) => t.numel(),
            MapValues::Strings(s) => s.len(),
        }
    }
    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One map (ONNX-ML `map(K, V)`) on the host: `keys[i]` maps to value `i`. Its keys are
/// distinct and kept in ascending order (integers by value, strings by their bytes), the
/// order CastMap lays the values out in.
#[derive(Clone, Debug, PartialEq)]
pub struct Map {
    keys: MapKeys,
    values: MapValues,
}

impl Map {
    /// The map from `keys[i]` to value `i`, sorted by key. Fails when the counts differ, a
    /// key appears twice, or numeric values are not a 1-D f32, f64 or i64 tensor.
    pub fn new(keys: MapKeys, values: MapValues) -> Result<Map> {
        let bad = |msg: String| Error::invalid("Map", "values", msg);
        if let MapValues::Numbers(t) = &values {
            MapType::new(true, Some(t.dtype))?;
            t.check()?;
            if t.shape.len() != 1 {
                return Err(bad(format!(
                    "a map's values are a 1-D tensor, not one of shape {:?}",
                    t.shape
                )));
            }
        }
        if keys.len() != values.len() {
            return Err(bad(format!(
                "{} keys need as many values, not {}",
                keys.len(),
                values.len()
            )));
        }
        let mut order: Vec<usize> = (0..keys.len()).collect();
        match &keys {
            MapKeys::Ints(k) => order.sort_by_key(|&i| k[i]),
            MapKeys::Strings(k) => order.sort_by(|&i, &j| k[i].cmp(&k[j])),
        }
        let repeated = order.windows(2).find(|w| match &keys {
            MapKeys::Ints(k) => k[w[0]] == k[w[1]],
            MapKeys::Strings(k) => k[w[0]] == k[w[1]],
        });
        if let Some(w) = repeated {
            let key = match &keys {
                MapKeys::Ints(k) => k[w[0]].to_string(),
                MapKeys::Strings(k) => format!("'{}'", k[w[0]].escape_debug()),
            };
            return Err(Error::invalid(
                "Map",
                "keys",
                format!("key {key} appears twice; a map's keys are distinct"),
            ));
        }
        let keys = match keys {
            MapKeys::Ints(k) => MapKeys::Ints(order.iter().map(|&i| k[i]).collect()),
            MapKeys::Strings(mut k) => {
                MapKeys::Strings(order.iter().map(|&i| std::mem::take(&mut k[i])).collect())
            }
        };
        let values = match values {
            MapValues::Strings(mut v) => {
                MapValues::Strings(order.iter().map(|&i| std::mem::take(&mut v[i])).collect())
            }
            MapValues::Numbers(t) => {
                let w = t.dtype.size();
                let mut data = Vec::with_capacity(t.data.len());
                for &i in &order {
                    data.extend_from_slice(&t.data[i * w..(i + 1) * w]);
                }
                MapValues::Numbers(HostTensor::from_bytes(t.dtype, t.shape, data)?)
            }
        };
        Ok(Map { keys, values })
    }

    /// The keys, ascending.
    pub fn keys(&self) -> &MapKeys {
        &self.keys
    }
    /// The values, in the order of the keys.
    pub fn values(&self) -> &MapValues {
        &self.values
    }
    /// The number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Its key and value types.
    pub fn map_type(&self) -> MapType {
        MapType {
            int_keys: matches!(self.keys, MapKeys::Ints(_)),
            values: match &self.values {
                MapValues::Numbers(t) => Some(t.dtype),
                MapValues::Strings(_) => None,
            },
        }
    }

    /// Reads a map of type `ty` from a JSON object: `{"a": 1.5, "b": -2}`. Integer keys are
    /// written in decimal (JSON's keys are text); i64 values are integers; float values are
    /// numbers, read exactly as Rust reads their text (rounded once to f32 or f64), or the
    /// strings `"NaN"`, `"Infinity"` and `"-Infinity"`; string values are strings. A key may
    /// appear once. The error's message says what broke which rule.
    pub fn from_json(text: &str, ty: MapType) -> Result<Map> {
        let bad = |msg: String| Error::invalid("Map", "json", msg);
        let entries = serde_json::from_str::<Entries>(text)
            .map_err(|e| {
                bad(format!(
                    "a map is a JSON object of its keys and values: {e}"
                ))
            })?
            .0;
        let key_text = |k: &str| k.escape_debug().to_string();
        let keys = if ty.int_keys {
            MapKeys::Ints(
                entries
                    .iter()
                    .map(|(k, _)| {
                        // Decimal only: no sign but '-', no spaces, no leading zeros.
                        let canonical = k.parse::<i64>().ok().filter(|n| n.to_string() == *k);
                        canonical.ok_or_else(|| {
                            bad(format!(
                                "key '{}' is not an i64 in decimal; this map's keys are i64",
                                key_text(k)
                            ))
                        })
                    })
                    .collect::<Result<_>>()?,
            )
        } else {
            MapKeys::Strings(entries.iter().map(|(k, _)| k.clone()).collect())
        };
        let value_err = |k: &str, v: &RawValue, want: &str| {
            bad(format!(
                "the value of key '{}' is {}; this map's values are {want}",
                key_text(k),
                v.get()
            ))
        };
        let values = match ty.values {
            None => MapValues::Strings(
                entries
                    .iter()
                    .map(|(k, v)| {
                        serde_json::from_str::<String>(v.get())
                            .map_err(|_| value_err(k, v, "strings"))
                    })
                    .collect::<Result<_>>()?,
            ),
            Some(DType::I64) => {
                let v: Vec<i64> = entries
                    .iter()
                    .map(|(k, v)| {
                        v.get()
                            .parse::<i64>()
                            .map_err(|_| value_err(k, v, "i64 (integers)"))
                    })
                    .collect::<Result<_>>()?;
                MapValues::Numbers(HostTensor::from_vec(vec![v.len()], &v)?)
            }
            Some(d @ (DType::F32 | DType::F64)) => {
                let v: Vec<f64> = entries
                    .iter()
                    .map(|(k, v)| {
                        float_text(v.get(), d == DType::F32)
                            .ok_or_else(|| value_err(k, v, &format!("{d} numbers")))
                    })
                    .collect::<Result<_>>()?;
                let t = match d {
                    DType::F32 => {
                        let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                        HostTensor::from_vec(vec![v.len()], &v)?
                    }
                    _ => HostTensor::from_vec(vec![v.len()], &v)?,
                };
                MapValues::Numbers(t)
            }
            Some(d) => {
                return Err(bad(format!(
                    "a map's values are f32, f64, i64 or strings, not {d}"
                )))
            }
        };
        Map::new(keys, values)
    }

    /// The map as a JSON object, as [`Map::from_json`] reads it: keys ascending, integer keys
    /// in decimal, floats as the shortest text that reads back as the same value (NaN and the
    /// infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`).
    pub fn to_json(&self) -> String {
        let keys: Vec<String> = match &self.keys {
            MapKeys::Strings(k) => k.iter().map(|k| json_string(k)).collect(),
            MapKeys::Ints(k) => k.iter().map(|k| json_string(&k.to_string())).collect(),
        };
        let float = |x: f64, text: String| match x {
            x if x.is_nan() => "\"NaN\"".to_string(),
            x if x == f64::INFINITY => "\"Infinity\"".to_string(),
            x if x == f64::NEG_INFINITY => "\"-Infinity\"".to_string(),
            _ => text,
        };
        let values: Vec<String> = match &self.values {
            MapValues::Strings(v) => v.iter().map(|v| json_string(v)).collect(),
            MapValues::Numbers(t) => match t.dtype {
                DType::F32 => t
                    .to_vec::<f32>()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|x| float(x as f64, format!("{x:?}")))
                    .collect(),
                DType::F64 => t
                    .to_vec::<f64>()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|x| float(x, format!("{x:?}")))
                    .collect(),
                _ => t
                    .to_vec::<i64>()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|x| x.to_string())
                    .collect(),
            },
        };
        let body: Vec<String> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        format!("{{{}}}\n", body.join(", "))
    }
}

/// A JSON number's text read as a float (rounded once, to f32 where `single`), or the
/// strings that stand for NaN and the infinities.
fn float_text(text: &str, single: bool) -> Option<f64> {
    match text {
        "\"NaN\"" => Some(f64::NAN),
        "\"Infinity\"" => Some(f64::INFINITY),
        "\"-Infinity\"" => Some(f64::NEG_INFINITY),
        t => {
            // Digits first: Rust would also read "inf" and "nan", which JSON's numbers are not.
            if !t
                .trim_start_matches('-')
                .starts_with(|c: char| c.is_ascii_digit())
            {
                return None;
            }
            let x = match single {
                true => t.parse::<f32>().ok().map(f64::from),
                false => t.parse::<f64>().ok(),
            }?;
            // Beyond the type's range is refused rather than made infinite.
            x.is_finite().then_some(x)
        }
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// A JSON object's entries in file order, each value's text as written; a key given twice
/// is an error (serde_json's own maps keep the last silently).
struct Entries(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Entries, A::Error> {
                let mut entries: Vec<(String, Box<RawValue>)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some((k, v)) = m.next_entry::<String, Box<RawValue>>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "key '{}' appears twice; a map's keys are distinct",
                            k.escape_debug()
                        )));
                    }
                    entries.push((k, v));
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(Object)
    }
}

#[cfg(test)]
mod tests {
    use super::{Map, MapType, MapValues};
    use crate::{DType, HostTensor, MapKeys};

    #[test]
    fn keys_are_sorted_and_distinct() {
        let m = Map::new(
            MapKeys::Ints(vec![5, -2, 3]),
            MapValues::Strings(vec!["five".into(), "minus two".into(), "three".into()]),
        )
        .unwrap();
        assert_eq!(m.keys(), &MapKeys::Ints(vec![-2, 3, 5]));
        assert_eq!(
            m.values(),
            &MapValues::Strings(vec!["minus two".into(), "three".into(), "five".into()])
        );
        let numbers = HostTensor::from_vec(vec![3], &[1.5f64, 2.5, 3.5]).unwrap();
        let m = Map::new(
            MapKeys::Strings(vec!["b".into(), "a".into(), "é".into()]),
            MapValues::Numbers(numbers.clone()),
        )
        .unwrap();
        assert_eq!(
            m.keys(),
            &MapKeys::Strings(vec!["a".into(), "b".into(), "é".into()])
        );
        assert_eq!(
            m.values(),
            &MapValues::Numbers(HostTensor::from_vec(vec![3], &[2.5f64, 1.5, 3.5]).unwrap())
        );
        assert_eq!(m.map_type().name(), "map(string, f64)");
        let twice = Map::new(
            MapKeys::Ints(vec![1, 2, 1]),
            MapValues::Numbers(numbers.clone()),
        );
        assert!(twice
            .unwrap_err()
            .to_string()
            .contains("key 1 appears twice"));
        let short = Map::new(MapKeys::Ints(vec![1]), MapValues::Numbers(numbers));
        assert!(short
            .unwrap_err()
            .to_string()
            .contains("1 keys need as many values, not 3"));
        let u8s = HostTensor::from_vec(vec![1], &[1u8]).unwrap();
        assert!(Map::new(MapKeys::Ints(vec![1]), MapValues::Numbers(u8s)).is_err());
    }

    #[test]
    fn json_reads_back_what_it_writes() {
        let f32_map = MapType::new(true, Some(DType::F32)).unwrap();
        let m = Map::from_json(
            r#"{"3": 0.1, "-7": -2, "10": "NaN", "0": "-Infinity", "1": 1e-45}"#,
            f32_map,
        )
        .unwrap();
        assert_eq!(m.keys(), &MapKeys::Ints(vec![-7, 0, 1, 3, 10]));
        let MapValues::Numbers(t) = m.values() else {
            panic!("numbers")
        };
        let v = t.to_vec::<f32>().unwrap();
        assert_eq!(v[0], -2.0);
        assert_eq!(v[1], f32::NEG_INFINITY);
        assert_eq!(v[2].to_bits(), 1); // the smallest subnormal, rounded once
        assert_eq!(v[3], 0.1f32);
        assert!(v[4].is_nan());
        assert_eq!(
            Map::from_json(&m.to_json(), f32_map).unwrap().to_json(),
            m.to_json()
        );

        // 2^53 + 1, which a float would round.
        let i64_map = MapType::new(false, Some(DType::I64)).unwrap();
        let m = Map::from_json(r#"{"b": 9007199254740993, "a": -1}"#, i64_map).unwrap();
        assert_eq!(m.to_json(), "{\"a\": -1, \"b\": 9007199254740993}\n");
        let strings = MapType::new(true, None).unwrap();
        let m = Map::from_json(r#"{"2": "two\nlines", "1": ""}"#, strings).unwrap();
        assert_eq!(Map::from_json(&m.to_json(), strings).unwrap(), m);

        for (text, ty, says) in [
            (r#"{"a": 1, "a": 2}"#, i64_map, "key 'a' appears twice"),
            (r#"[1, 2]"#, i64_map, "a JSON object"),
            (r#"{"a": 1.5}"#, i64_map, "value of key 'a' is 1.5"),
            (r#"{"01": 1.5}"#, f32_map, "key '01' is not an i64"),
            (r#"{"x": 1.5}"#, f32_map, "key 'x' is not an i64"),
            (r#"{"1": "abc"}"#, f32_map, "value of key '1' is \"abc\""),
            (r#"{"1": 1e39}"#, f32_map, "value of key '1' is 1e39"),
            (r#"{"1": 2}"#, strings, "this map's values are strings"),
        ] {
            let e = Map::from_json(text, ty).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
