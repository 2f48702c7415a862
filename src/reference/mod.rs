//! CPU references of the ops on `ndarray`, written from the spec texts independently of the GPU
//! plans (no [`crate::ops::slicing`] code is used here). Tests compare the GPU against them.

use ndarray::{ArrayD, Axis, IxDyn};

/// Why the reference refused an input. It checks only what it needs to compute; the ops'
/// own validation is what reports user errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("reference: {0}")]
pub struct RefError(pub String);

impl From<&str> for RefError {
    fn from(s: &str) -> Self {
        RefError(s.to_string())
    }
}
impl From<String> for RefError {
    fn from(s: String) -> Self {
        RefError(s)
    }
}
impl From<crate::Error> for RefError {
    fn from(e: crate::Error) -> Self {
        RefError(e.to_string())
    }
}
impl From<ndarray::ShapeError> for RefError {
    fn from(e: ndarray::ShapeError) -> Self {
        RefError(e.to_string())
    }
}

use crate::{HostTensor, Slice, StridedSlice};

/// The spec's slicing loop for one axis: `slicing_index` starts at the clamped begin and steps
/// by `stride` while it is before the clamped end. Clamping as the StridedSlice-1 prose says,
/// corrected by docs/spec-decisions.md: a reverse begin still negative after adjusting clamps to 0
/// (decision 0) and a masked reverse end runs through index 0 (decision 2).
pub fn axis_indices(dim: usize, begin: Option<i64>, end: Option<i64>, stride: i64) -> Vec<usize> {
    let size = dim as i128;
    let adjust = |v: i64| {
        let v = v as i128;
        if v < 0 {
            v + size
        } else {
            v
        }
    };
    let mut out = Vec::new();
    if stride > 0 {
        let b = begin.map_or(0, |b| adjust(b).clamp(0, size));
        let e = end.map_or(size, |e| adjust(e).clamp(0, size));
        let mut i = b;
        while i < e {
            out.push(i as usize);
            i += stride as i128;
        }
    } else {
        let b = match begin {
            None => size - 1,
            Some(b) => {
                let b = adjust(b);
                if b >= size {
                    size - 1
                } else if b < 0 {
                    0
                } else {
                    b
                }
            }
        };
        let e = match end {
            None => -1,
            Some(e) => {
                let e = adjust(e);
                if e >= size {
                    size
                } else if e < 0 {
                    -1
                } else {
                    e
                }
            }
        };
        let mut i = b;
        while i > e && size > 0 {
            out.push(i as usize);
            i += stride as i128;
        }
    }
    out
}

/// One position of a numpy-style index expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexItem {
    /// `begin:end:stride` (numpy's defaults where `None`).
    Range {
        /// The first position (from the end when negative).
        begin: Option<i64>,
        /// The position it stops before (from the end when negative).
        end: Option<i64>,
        /// The step, negative to walk backwards.
        stride: i64,
    },
    /// One position (from the end when negative); the axis goes.
    Index(i64),
    /// A new axis of size 1 (`None`).
    NewAxis,
    /// Every axis not named (`...`).
    Ellipsis,
}

/// Applies a numpy-style index expression (basic indexing) to `a`.
pub fn apply_index<T: Clone>(a: &ArrayD<T>, items: &[IndexItem]) -> Result<ArrayD<T>, RefError> {
    let rank = a.ndim();
    if items.iter().filter(|i| **i == IndexItem::Ellipsis).count() > 1 {
        return Err("more than one ellipsis".into());
    }
    let consuming = items
        .iter()
        .filter(|i| matches!(i, IndexItem::Range { .. } | IndexItem::Index(_)))
        .count();
    if consuming > rank {
        return Err(format!("too many indices: {consuming} for rank {rank}").into());
    }
    let mut picks: Vec<Vec<usize>> = Vec::new();
    let mut shape = Vec::new();
    let mut axis = 0;
    let take_whole = |axis: &mut usize, picks: &mut Vec<Vec<usize>>, shape: &mut Vec<usize>| {
        let d = a.shape()[*axis];
        picks.push((0..d).collect());
        shape.push(d);
        *axis += 1;
    };
    for item in items {
        match item {
            IndexItem::Ellipsis => {
                for _ in 0..rank - consuming {
                    take_whole(&mut axis, &mut picks, &mut shape);
                }
            }
            IndexItem::NewAxis => shape.push(1),
            IndexItem::Index(i) => {
                let d = a.shape()[axis] as i64;
                let k = if *i < 0 { i + d } else { *i };
                if k < 0 || k >= d {
                    return Err(
                        format!("index {i} out of range for axis {axis} of size {d}").into(),
                    );
                }
                picks.push(vec![k as usize]);
                axis += 1;
            }
            IndexItem::Range { begin, end, stride } => {
                if *stride == 0 {
                    return Err("zero stride".into());
                }
                let ids = axis_indices(a.shape()[axis], *begin, *end, *stride);
                shape.push(ids.len());
                picks.push(ids);
                axis += 1;
            }
        }
    }
    while axis < rank {
        take_whole(&mut axis, &mut picks, &mut shape);
    }
    let mut selected = a.clone();
    for (k, ids) in picks.iter().enumerate() {
        selected = selected.select(Axis(k), ids);
    }
    let values: Vec<T> = selected.iter().cloned().collect();
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), values)?)
}

/// The index expression StridedSlice-1 describes, following the spec's position-by-position
/// rules and the precedence of decision 6.
pub fn strided_slice_items(op: &StridedSlice) -> Result<Vec<IndexItem>, RefError> {
    let m = op.begin.len();
    let stride = op.stride.clone().unwrap_or_else(|| vec![1; m]);
    if op.end.len() != m || stride.len() != m {
        return Err("begin, end and stride differ in length".into());
    }
    let set = |mask: &[i64], i: usize| -> Result<bool, RefError> {
        match mask.get(i) {
            None | Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(v) => Err(format!("mask value {v}").into()),
        }
    };
    for mask in [
        &op.begin_mask,
        &op.end_mask,
        &op.new_axis_mask,
        &op.shrink_axis_mask,
        &op.ellipsis_mask,
    ] {
        for i in 0..mask.len() {
            set(mask, i)?;
        }
    }
    if op.ellipsis_mask.iter().filter(|&&b| b == 1).count() > 1 {
        return Err("more than one ellipsis bit".into());
    }
    if stride.contains(&0) {
        return Err("zero stride".into());
    }
    let mut items = Vec::with_capacity(m);
    for (i, &s) in stride.iter().enumerate() {
        items.push(if set(&op.ellipsis_mask, i)? {
            IndexItem::Ellipsis
        } else if set(&op.new_axis_mask, i)? {
            IndexItem::NewAxis
        } else if set(&op.shrink_axis_mask, i)? {
            IndexItem::Index(op.begin[i])
        } else {
            IndexItem::Range {
                begin: (!set(&op.begin_mask, i)?).then_some(op.begin[i]),
                end: (!set(&op.end_mask, i)?).then_some(op.end[i]),
                stride: s,
            }
        });
    }
    Ok(items)
}

/// The index expression Slice-8 describes on data of `rank` dimensions.
pub fn slice_items(op: &Slice, rank: usize) -> Result<Vec<IndexItem>, RefError> {
    let n = op.start.len();
    if rank == 0 {
        return Err("rank 0".into());
    }
    if op.stop.len() != n || op.step.len() != n || op.axes.as_ref().is_some_and(|a| a.len() != n) {
        return Err("start, stop, step and axes differ in length".into());
    }
    let axes: Vec<i64> = op.axes.clone().unwrap_or_else(|| (0..n as i64).collect());
    let mut items = vec![
        IndexItem::Range {
            begin: None,
            end: None,
            stride: 1
        };
        rank
    ];
    let mut used = vec![false; rank];
    for (i, &a) in axes.iter().enumerate() {
        let axis = if a < 0 { a + rank as i64 } else { a };
        if axis < 0 || axis >= rank as i64 {
            return Err(format!("axis {a} out of range").into());
        }
        if std::mem::replace(&mut used[axis as usize], true) {
            return Err(format!("axis {a} repeated").into());
        }
        if op.step[i] == 0 {
            return Err("zero step".into());
        }
        items[axis as usize] = IndexItem::Range {
            begin: Some(op.start[i]),
            end: Some(op.stop[i]),
            stride: op.step[i],
        };
    }
    Ok(items)
}

fn on_host(
    data: &HostTensor,
    f: impl Fn(&ArrayD<u8>) -> Result<ArrayD<u8>, RefError>,
) -> Result<HostTensor, RefError> {
    // Elements are moved, never interpreted: view each element as its bytes along an extra axis.
    let w = data.dtype.size();
    let mut shape = data.shape.clone();
    shape.push(w);
    let bytes = ArrayD::from_shape_vec(IxDyn(&shape), data.data.clone())?;
    let out = f(&bytes)?;
    let out_shape = out.shape()[..out.ndim() - 1].to_vec();
    Ok(HostTensor {
        dtype: data.dtype,
        shape: out_shape,
        data: out.iter().copied().collect(),
    })
}

/// StridedSlice-1 on a host tensor of any dtype.
pub fn strided_slice(data: &HostTensor, op: &StridedSlice) -> Result<HostTensor, RefError> {
    let items = strided_slice_items(op)?;
    // The byte axis added by `on_host` is taken whole: it sits after every indexed axis unless
    // an ellipsis would swallow it, so give it an explicit trailing position.
    on_host(data, |a| {
        let mut items = items.clone();
        let consuming = items
            .iter()
            .filter(|i| matches!(i, IndexItem::Range { .. } | IndexItem::Index(_)))
            .count();
        if consuming > data.shape.len() {
            return Err(format!(
                "too many indices: {consuming} for rank {}",
                data.shape.len()
            )
            .into());
        }
        if !items.contains(&IndexItem::Ellipsis) {
            items.push(IndexItem::Ellipsis);
        }
        items.push(IndexItem::Range {
            begin: None,
            end: None,
            stride: 1,
        });
        apply_index(a, &items)
    })
}

/// Slice-8 on a host tensor of any dtype.
pub fn slice(data: &HostTensor, op: &Slice) -> Result<HostTensor, RefError> {
    let items = slice_items(op, data.shape.len())?;
    on_host(data, |a| apply_index(a, &items))
}

/// BatchToSpace-2 as the spec formulates it: reshape the batch into
/// `[B_1, ..., B_{N-1}, batch / prod(B), D_1, ..., D_{N-1}]`, transpose to
/// `[batch / prod(B), D_1, B_1, ..., D_{N-1}, B_{N-1}]`, reshape to
/// `[batch / prod(B), D_1 * B_1, ..., D_{N-1} * B_{N-1}]`, and crop. (The text's permutation
/// indices `[N, N + 1, 0, N + 2, 1, ...]` count `B_0` as an axis; the shapes it states are what
/// is implemented.) Works on any element type; `block`, `crops_begin` and `crops_end` must be
/// valid (see [`crate::BatchToSpace::plan`]).
pub fn batch_to_space_array<T: Clone>(
    data: &ArrayD<T>,
    block: &[usize],
    crops_begin: &[usize],
    crops_end: &[usize],
) -> Result<ArrayD<T>, RefError> {
    let n = block.len(); // spatial axes are 1..n; trailing axes of `data` beyond n ride along
    let shape = data.shape();
    let p: usize = block.iter().product();
    let batch = shape[0] / p;
    let mut s1: Vec<usize> = block[1..].to_vec();
    s1.push(batch);
    s1.extend(&shape[1..]);
    let x1 = data.to_shape(IxDyn(&s1))?.to_owned();
    // Axes of x1: 0..n-1 are B_1..B_{n-1}, n-1 is batch, n..2n-1 are D_1..D_{n-1}, then extras.
    let mut perm = vec![n - 1];
    for k in 1..n {
        perm.push(n - 1 + k); // D_k
        perm.push(k - 1); // B_k
    }
    perm.extend(2 * n - 1..x1.ndim());
    let x2 = x1.permuted_axes(IxDyn(&perm));
    let mut s3 = vec![batch];
    for k in 1..n {
        s3.push(shape[k] * block[k]);
    }
    s3.extend(&shape[n..]);
    let x3 = x2.as_standard_layout().to_shape(IxDyn(&s3))?.to_owned();
    let cropped = x3.slice_each_axis(|ax| {
        let k = ax.axis.index();
        if (1..n).contains(&k) {
            ndarray::Slice::from(crops_begin[k]..s3[k] - crops_end[k])
        } else {
            ndarray::Slice::from(..)
        }
    });
    Ok(cropped.to_owned())
}

/// SpaceToBatch-2 as its spec formulates it: zero-pad, reshape to
/// `[batch, P_1 / B_1, B_1, ..., P_{N-1} / B_{N-1}, B_{N-1}]`, transpose to
/// `[B_1, ..., B_{N-1}, batch, P_1 / B_1, ..., P_{N-1} / B_{N-1}]`, reshape to
/// `[batch * prod(B), P_1 / B_1, ...]`.
pub fn space_to_batch_array<T: Clone>(
    data: &ArrayD<T>,
    zero: T,
    block: &[usize],
    pads_begin: &[usize],
    pads_end: &[usize],
) -> Result<ArrayD<T>, RefError> {
    let n = block.len();
    let shape = data.shape();
    let mut padded_shape = shape.to_vec();
    for k in 1..n {
        padded_shape[k] += pads_begin[k] + pads_end[k];
    }
    let mut padded = ArrayD::from_elem(IxDyn(&padded_shape), zero);
    padded
        .slice_each_axis_mut(|ax| {
            let k = ax.axis.index();
            if (1..n).contains(&k) {
                ndarray::Slice::from(pads_begin[k]..pads_begin[k] + shape[k])
            } else {
                ndarray::Slice::from(..)
            }
        })
        .assign(data);
    let mut s1 = vec![shape[0]];
    for k in 1..n {
        s1.push(padded_shape[k] / block[k]);
        s1.push(block[k]);
    }
    s1.extend(&shape[n..]);
    let x1 = padded.to_shape(IxDyn(&s1))?.to_owned();
    // Axes of x1: 0 batch, then (P_k / B_k, B_k) pairs at 2k-1, 2k; then extras.
    let mut perm: Vec<usize> = (1..n).map(|k| 2 * k).collect();
    perm.push(0);
    perm.extend((1..n).map(|k| 2 * k - 1));
    perm.extend(2 * n - 1..x1.ndim());
    let x2 = x1.permuted_axes(IxDyn(&perm));
    let mut s3 = vec![shape[0] * block.iter().product::<usize>()];
    for k in 1..n {
        s3.push(padded_shape[k] / block[k]);
    }
    s3.extend(&shape[n..]);
    Ok(x2.as_standard_layout().to_shape(IxDyn(&s3))?.to_owned())
}

fn as_usize(v: &[i64]) -> Vec<usize> {
    v.iter().map(|&x| x as usize).collect()
}

/// BatchToSpace-2 on a host tensor of any dtype. The op's own validation decides what is valid.
pub fn batch_to_space(data: &HostTensor, op: &crate::BatchToSpace) -> Result<HostTensor, RefError> {
    op.plan(&data.shape)?;
    on_host(data, |a| {
        batch_to_space_array(
            a,
            &as_usize(&op.block_shape),
            &as_usize(&op.crops_begin),
            &as_usize(&op.crops_end),
        )
    })
}

/// SpaceToBatch-2 on a host tensor of any dtype (padding is all-zero bytes, i.e. 0 / false).
pub fn space_to_batch(data: &HostTensor, op: &crate::SpaceToBatch) -> Result<HostTensor, RefError> {
    op.plan(&data.shape)?;
    on_host(data, |a| {
        space_to_batch_array(
            a,
            0u8,
            &as_usize(&op.block_shape),
            &as_usize(&op.pads_begin),
            &as_usize(&op.pads_end),
        )
    })
}
mod channels;
mod col2im;
pub mod coupling;
pub mod det;
mod einsum;
pub mod graph;
mod grid_sample;
pub mod nms;
mod numeric;
pub mod random;
mod resize;
mod spectral;
mod tree_walk;
pub mod unique;
mod window;

/// ONNX Cast on the host (what the GPU's Cast computes: constants made while planning, and
/// tests that hold values in a dtype).
pub fn cast_host(t: &HostTensor, to: crate::DType) -> crate::Result<HostTensor> {
    numeric::cast(t, to).map_err(|e| crate::Error::Graph(e.to_string()))
}
