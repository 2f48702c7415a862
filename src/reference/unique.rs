//! Unique (ONNX-11) on the host: the distinct elements (or slices along `axis`) of X, sorted
//! or in the order they first appear, with the index of each one's first appearance, the
//! index in Y of every element (or slice) of X, and each one's count. Floats compare by
//! value (-0 equals 0; NaNs equal one another and sort last, as numpy's `unique` does); the
//! output's length is the number of distinct values, so the executor computes it while
//! planning, on values known there or read back.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::{DType, Error, HostTensor, Result};

const OP: &str = "Unique";

/// One element as a key: an exact integer, or a float with -0 as 0 and one NaN.
#[derive(Clone, Copy, Debug)]
enum Key {
    Int(i128),
    Float(f64),
}

impl Key {
    fn float(v: f64) -> Key {
        Key::Float(if v.is_nan() {
            f64::NAN
        } else if v == 0.0 {
            0.0
        } else {
            v
        })
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Int(a), Key::Int(b)) => a.cmp(b),
            (Key::Float(a), Key::Float(b)) => a.total_cmp(b),
            (Key::Int(_), Key::Float(_)) => Ordering::Less,
            (Key::Float(_), Key::Int(_)) => Ordering::Greater,
        }
    }
}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Key {}

/// Every element of `x` as a key.
fn keys(x: &HostTensor) -> Result<Vec<Key>> {
    Ok(match x.dtype {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => {
            crate::reference::cast_host(x, DType::F64)?
                .to_vec::<f64>()?
                .into_iter()
                .map(Key::float)
                .collect()
        }
        DType::U64 => x
            .to_vec::<u64>()?
            .into_iter()
            .map(|v| Key::Int(v.into()))
            .collect(),
        DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::Bool => crate::reference::cast_host(x, DType::I64)?
            .to_vec::<i64>()?
            .into_iter()
            .map(|v| Key::Int(v.into()))
            .collect(),
        other => {
            return Err(Error::invalid(
                OP,
                "X",
                format!("X is {other}; Unique takes the numeric types and bool"),
            ))
        }
    })
}

/// Unique of `x` along `axis` (`None`: of its elements, flattened), `sorted` or in order of
/// first appearance: `[Y, indices, inverse_indices, counts]`.
pub fn unique(x: &HostTensor, axis: Option<i64>, sorted: bool) -> Result<[HostTensor; 4]> {
    let size = x.dtype.size();
    let (shape, k) = match axis {
        None => (vec![x.numel()], 0),
        Some(a) => {
            let r = x.shape.len() as i64;
            if a < -r || a >= r {
                return Err(Error::invalid(
                    OP,
                    "axis",
                    format!("axis {a} is out of range for rank {r}"),
                ));
            }
            (x.shape.clone(), (if a < 0 { a + r } else { a }) as usize)
        }
    };
    let outer: usize = shape[..k].iter().product();
    let dim = shape[k];
    let inner: usize = shape[k + 1..].iter().product();
    let all = keys(x)?;
    // Slice i along the axis: its keys in C order of the other axes.
    let slice = |i: usize| -> Vec<Key> {
        (0..outer)
            .flat_map(|o| all[(o * dim + i) * inner..][..inner].iter().copied())
            .collect()
    };
    let mut ids: BTreeMap<Vec<Key>, usize> = BTreeMap::new();
    let (mut first, mut counts, mut inverse) = (Vec::new(), Vec::new(), Vec::with_capacity(dim));
    for i in 0..dim {
        let next = ids.len();
        let id = *ids.entry(slice(i)).or_insert(next);
        if id == next {
            first.push(i);
            counts.push(0i64);
        }
        counts[id] += 1;
        inverse.push(id);
    }
    // Output position of each id: in key order, or as first seen.
    let mut rank = vec![0; first.len()];
    if sorted {
        for (pos, &id) in ids.values().enumerate() {
            rank[id] = pos;
        }
    } else {
        rank = (0..first.len()).collect();
    }
    let mut order = vec![0; first.len()];
    for (id, &pos) in rank.iter().enumerate() {
        order[pos] = id;
    }
    let u = order.len();
    let mut data = Vec::with_capacity(outer * u * inner * size);
    for o in 0..outer {
        for &id in &order {
            let at = ((o * dim + first[id]) * inner) * size;
            data.extend_from_slice(&x.data[at..at + inner * size]);
        }
    }
    let mut y_shape = shape.clone();
    y_shape[k] = u;
    let y = HostTensor::from_bytes(x.dtype, y_shape, data)?;
    let as_i64 = |v: Vec<i64>| HostTensor::from_vec(vec![v.len()], &v);
    Ok([
        y,
        as_i64(order.iter().map(|&id| first[id] as i64).collect())?,
        as_i64(inverse.iter().map(|&id| rank[id] as i64).collect())?,
        as_i64(order.iter().map(|&id| counts[id]).collect())?,
    ])
}
