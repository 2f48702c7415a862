//! Host-side tensors: raw little-endian bytes with a dtype and shape.

use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};

use crate::indices::IndexValue;
use crate::{DType, Element, Error, Result};

/// A tensor in host memory. Used for uploads, downloads, graph constants and index inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTensor {
    /// The element type.
    pub dtype: DType,
    /// The dimensions, outermost first.
    pub shape: Vec<usize>,
    /// `numel * dtype.size()` bytes, C order, little endian.
    pub data: Vec<u8>,
}

/// Asks Linux to back the spare capacity of `v`, about to be filled, with transparent huge
/// pages (where the system allows them on request, its usual setting). A large allocation is
/// a fresh mapping (glibc maps blocks of 32 MiB and more anew each time), and filling it one
/// 4 KiB page fault at a time ran at a fifth of a copy into memory written before, on this
/// machine and on the H100's (`bench/transfer_lavapipe.txt`, `bench/h100/transfer.txt`).
/// Advice only: nothing changes where it is refused, and the allocator still owns the memory.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn advise_huge_pages(v: &mut Vec<u8>) {
    const HUGE_PAGE: usize = 2 << 20;
    let spare = v.spare_capacity_mut();
    if spare.len() < 4 * HUGE_PAGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let page = 4096;
        let start = (spare.as_mut_ptr() as usize).next_multiple_of(page);
        let end = (spare.as_mut_ptr() as usize + spare.len()) / page * page;
        // SAFETY: [start, end) lies inside `v`'s allocation, which this function borrows
        // mutably; MADV_HUGEPAGE changes how the pages are backed, never their contents or
        // the mapping's ownership.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

/// Number of elements of `shape`, or `None` if it does not fit in `usize`.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Checks that `len` bytes are exactly those of a `dtype` tensor of `shape` (an error of `op`
/// about its `data` otherwise).
pub(crate) fn check_bytes(
    op: &'static str,
    dtype: DType,
    shape: &[usize],
    len: usize,
) -> Result<()> {
    let expected = checked_numel(shape).and_then(|n| n.checked_mul(dtype.size()));
    if expected != Some(len) {
        return Err(Error::invalid(
            op,
            "data",
            format!(
                "data has {len} bytes but shape {shape:?} of {dtype} needs {}",
                expected.map_or("more than usize::MAX".to_string(), |n| n.to_string())
            ),
        ));
    }
    Ok(())
}

/// A tensor of strings (ONNX `tensor(string)`), on the host only: string ops run while a graph
/// is planned (see `graph::strings`), and no kernel reads strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StringTensor {
    /// The dimensions, outermost first.
    pub shape: Vec<usize>,
    /// C order.
    pub values: Vec<String>,
}

impl StringTensor {
    /// Fails when the number of values does not match the shape.
    pub fn new(shape: Vec<usize>, values: Vec<String>) -> Result<Self> {
        if checked_numel(&shape) != Some(values.len()) {
            return Err(Error::invalid(
                "StringTensor",
                "values",
                format!("{} strings do not fill shape {shape:?}", values.len()),
            ));
        }
        Ok(StringTensor { shape, values })
    }

    /// The number of strings.
    pub fn numel(&self) -> usize {
        self.values.len()
    }
}

/// The keys of ONNX-ML maps: strings or integers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapKeys {
    /// String keys.
    Strings(Vec<String>),
    /// Integer keys.
    Ints(Vec<i64>),
}

impl MapKeys {
    /// The number of keys.
    pub fn len(&self) -> usize {
        match self {
            MapKeys::Strings(k) => k.len(),
            MapKeys::Ints(k) => k.len(),
        }
    }
    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A sequence of maps that share their keys (ONNX `seq(map(K, float))`, what ONNX-ML's ZipMap
/// makes of a classifier's probabilities), on the host: map `i` maps `keys[j]` to
/// `values[i, j]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MapSequence {
    /// The keys every map shares.
    pub keys: MapKeys,
    /// f32, `[maps, keys]`.
    pub values: HostTensor,
}

impl MapSequence {
    /// Fails unless `values` is f32 `[n, keys.len()]`.
    pub fn new(keys: MapKeys, values: HostTensor) -> Result<Self> {
        if values.dtype != DType::F32 || values.shape.len() != 2 || values.shape[1] != keys.len() {
            return Err(Error::invalid(
                "MapSequence",
                "values",
                format!(
                    "values are {} {:?}; {} keys need f32 [maps, {}]",
                    values.dtype,
                    values.shape,
                    keys.len(),
                    keys.len()
                ),
            ));
        }
        Ok(MapSequence { keys, values })
    }

    /// The number of maps.
    pub fn len(&self) -> usize {
        self.values.shape[0]
    }

    /// The maps as JSON, a list of objects (`[{"cat": 0.25, "dog": 0.75}, ...]`; integer keys
    /// in decimal, as JSON keys are text), each value the shortest text that reads back as
    /// the same f32; NaN and infinities, which JSON lacks, as `null`.
    pub fn to_json(&self) -> String {
        let keys: Vec<String> = match &self.keys {
            MapKeys::Strings(k) => k.iter().map(|k| json_string(k)).collect(),
            MapKeys::Ints(k) => k.iter().map(|k| json_string(&k.to_string())).collect(),
        };
        let values: Vec<f32> = self
            .values
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut out = String::from("[");
        for (i, row) in values
            .chunks(keys.len().max(1))
            .take(self.len())
            .enumerate()
        {
            if i > 0 {
                out.push_str(", ");
            }
            out.push('{');
            for (j, (k, v)) in keys.iter().zip(row).enumerate() {
                if j > 0 {
                    out.push_str(", ");
                }
                let v = if v.is_finite() {
                    format!("{v:?}")
                } else {
                    "null".into()
                };
                out.push_str(&format!("{k}: {v}"));
            }
            out.push('}');
        }
        out.push_str("]\n");
        out
    }
    /// Whether the sequence holds no maps.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Element strides of a C-order tensor of `shape`.
pub(crate) fn c_strides(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1] as u64;
    }
    s
}

impl HostTensor {
    /// Wraps raw bytes; fails when their length does not match the shape and dtype.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self> {
        let t = HostTensor { dtype, shape, data };
        t.check()?;
        Ok(t)
    }

    /// A tensor of `shape` holding `values` in C order; fails when their count does not
    /// match the shape.
    pub fn from_vec<T: Element>(shape: Vec<usize>, values: &[T]) -> Result<Self> {
        let mut data = Vec::with_capacity(std::mem::size_of_val(values));
        T::write_bytes(values, &mut data);
        HostTensor::from_bytes(T::DTYPE, shape, data)
    }

    /// A copy of an ndarray array (of any layout) in C order.
    pub fn from_array<T: Element, S: Data<Elem = T>, D: Dimension>(a: &ArrayBase<S, D>) -> Self {
        let mut data = Vec::with_capacity(a.len() * T::DTYPE.size());
        match a.as_slice() {
            Some(s) => T::write_bytes(s, &mut data),
            None => a
                .iter()
                .for_each(|v| T::write_bytes(std::slice::from_ref(v), &mut data)),
        }
        HostTensor {
            dtype: T::DTYPE,
            shape: a.shape().to_vec(),
            data,
        }
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// Checks that `data` holds exactly the bytes `shape` and `dtype` describe (the fields are
    /// public, so a tensor built by hand may not).
    /// Types narrower than a byte hold each element in its byte's low bits, the rest zero.
    pub fn check(&self) -> Result<()> {
        check_bytes("HostTensor", self.dtype, &self.shape, self.data.len())?;
        if let Some(bits) = self.dtype.packed_bits() {
            if let Some(k) = self.data.iter().position(|&b| b >> bits != 0) {
                return Err(Error::invalid(
                    "HostTensor",
                    "data",
                    format!(
                        "element {k} of the {} tensor is byte {:#04x}, which has bits above its low {bits}",
                        self.dtype, self.data[k]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The values as `T`; fails when `T` is not this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid(
                "HostTensor",
                "dtype",
                format!("tensor is {} but {} was asked for", self.dtype, T::DTYPE),
            ));
        }
        self.check()?;
        Ok(self
            .data
            .chunks_exact(self.dtype.size())
            .map(T::read_bytes)
            .collect())
    }

    /// The values as an ndarray array; fails when `T` is not the tensor's dtype.
    pub fn to_array<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(&self.shape), v)
            .map_err(|e| Error::invalid("HostTensor", "shape", e.to_string()))
    }

    /// Reads a 1-D integer tensor as `i64` index values for `op`'s input `input`.
    ///
    /// Values convert as [`crate::IntoIndices`] describes (int32 sentinels, `u64` saturation).
    pub fn to_indices(&self, op: &'static str, input: &str) -> Result<Vec<i64>> {
        if self.shape.len() != 1 {
            return Err(Error::invalid(
                op,
                input,
                format!("{input} must be 1-D but has shape {:?}", self.shape),
            ));
        }
        let read: fn(&[u8]) -> i64 = match self.dtype {
            DType::I8 => |b| (b[0] as i8).to_index(),
            DType::U8 => |b| b[0].to_index(),
            DType::I16 => |b| i16::read_bytes(b).to_index(),
            DType::U16 => |b| u16::read_bytes(b).to_index(),
            DType::I32 => |b| i32::read_bytes(b).to_index(),
            DType::U32 => |b| u32::read_bytes(b).to_index(),
            DType::I64 => i64::read_bytes,
            DType::U64 => |b| u64::read_bytes(b).to_index(),
            _ => {
                return Err(Error::invalid(
                    op,
                    input,
                    format!("{input} must have an integer dtype but is {}", self.dtype),
                ))
            }
        };
        self.check()?;
        let w = self.dtype.size();
        Ok(self.data.chunks_exact(w).map(read).collect())
    }
}

/// The shape of a leaf broadcast to `from`, in `to`, when the two differ only by unit axes
/// (their dims other than 1 are the same, in order): the leaf's dims on those axes, 1 on
/// the others. `None` when the shapes differ otherwise.
pub(crate) fn unit_axes_view(leaf: &[usize], from: &[usize], to: &[usize]) -> Option<Vec<usize>> {
    let big = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    if big(from) != big(to) || leaf.len() > from.len() {
        return None;
    }
    // The leaf's dims on `from`'s axes (leading 1s where it has a lower rank).
    let padded = std::iter::repeat_n(1, from.len() - leaf.len()).chain(leaf.iter().copied());
    let mut kept = padded.zip(from).filter(|&(_, &f)| f != 1).map(|(l, _)| l);
    Some(
        to.iter()
            .map(|&t| if t == 1 { 1 } else { kept.next().unwrap_or(1) })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::unit_axes_view;
    use super::{HostTensor, MapKeys, MapSequence};

    #[test]
    fn maps_are_written_as_a_json_list_of_objects() {
        let values = HostTensor::from_vec(vec![2, 2], &[0.25f32, 0.1, f32::NAN, 1e-10]).unwrap();
        let ints = MapSequence::new(MapKeys::Ints(vec![3, -1]), values.clone()).unwrap();
        assert_eq!(
            ints.to_json(),
            "[{\"3\": 0.25, \"-1\": 0.1}, {\"3\": null, \"-1\": 1e-10}]\n"
        );
        let text =
            MapSequence::new(MapKeys::Strings(vec!["a\"b".into(), "é".into()]), values).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text.to_json()).unwrap();
        assert_eq!(parsed[0]["a\"b"], 0.25);
        assert_eq!(parsed[1]["é"].as_f64().unwrap() as f32, 1e-10);
        // Values that do not match the keys are refused.
        let wrong = HostTensor::from_vec(vec![1, 3], &[0f32; 3]).unwrap();
        assert!(MapSequence::new(MapKeys::Ints(vec![1]), wrong).is_err());
    }

    #[test]
    fn leaves_follow_unit_axis_views() {
        // [2, 3] -> [2, 3, 1]: a leaf [3] becomes [1, 3, 1]; a full one [2, 3, 1].
        assert_eq!(
            unit_axes_view(&[3], &[2, 3], &[2, 3, 1]),
            Some(vec![1, 3, 1])
        );
        assert_eq!(
            unit_axes_view(&[2, 3], &[2, 3], &[2, 3, 1]),
            Some(vec![2, 3, 1])
        );
        // [2, 4, 1] -> [2, 1, 4]: a leaf [2, 1, 1] keeps its batch axis only.
        assert_eq!(
            unit_axes_view(&[2, 1, 1], &[2, 4, 1], &[2, 1, 4]),
            Some(vec![2, 1, 1])
        );
        assert_eq!(
            unit_axes_view(&[4, 1], &[2, 4, 1], &[1, 2, 4]),
            Some(vec![1, 1, 4])
        );
        // Not a unit-axis view.
        assert_eq!(unit_axes_view(&[6], &[2, 6], &[3, 4]), None);
        assert_eq!(unit_axes_view(&[2, 3], &[2, 3], &[3, 2]), None);
    }
}
