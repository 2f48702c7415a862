//! A CPU interpreter of graphs on `ndarray`, including ONNX Scan written from the spec's
//! pseudo-code (slice each scan input per iteration, run the body, concatenate the outputs).
//! Compute ops run on `f32`, `i32` and `u32` with WGSL's integer semantics (wrapping
//! arithmetic; `x / 0 == x`). Independent of the GPU executor.

use std::collections::HashMap;

use ndarray::{concatenate, ArrayD, Axis, IxDyn};

use crate::graph::{Attr, Graph, Node};
use crate::{BatchToSpace, DType, HostTensor, Slice, SpaceToBatch, StridedSlice};

use super::numeric::{cast, elementwise, matmul, narrow, num, reduce, Num};
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

/// Runs `graph` on the CPU. `outer` holds the values of enclosing graphs.
pub fn run_graph(
    graph: &Graph,
    inputs: &[(String, HostTensor)],
    outer: &HashMap<String, HostTensor>,
) -> R<Vec<HostTensor>> {
    let mut env: HashMap<String, HostTensor> = outer.clone();
    for (n, v) in inputs {
        env.insert(n.clone(), HostTensor::clone(v));
    }
    for (n, v) in &graph.constants {
        env.insert(n.clone(), HostTensor::clone(v));
    }
    // Run nodes whenever their inputs are ready (file order otherwise).
    let mut pending: Vec<&Node> = graph.nodes.iter().collect();
    while !pending.is_empty() {
        let ready = pending
            .iter()
            .position(|n| n.reads().iter().all(|i| env.contains_key(i)))
            .ok_or("no node can run (cycle or unknown name)")?;
        let node = pending.remove(ready);
        let args: Vec<Option<HostTensor>> = node
            .inputs
            .iter()
            .map(|i| {
                if i.is_empty() {
                    None
                } else {
                    Some(env[i].clone())
                }
            })
            .collect();
        let outputs = run_node(node, &args, &env)?;
        for (name, v) in node.outputs.iter().zip(outputs) {
            env.insert(name.clone(), v);
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            env.get(&o.name)
                .cloned()
                .ok_or_else(|| RefError(format!("no value '{}'", o.name)))
        })
        .collect()
}

fn ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attrs.get(name) {
        Some(Attr::Ints(v)) => Some(v.clone()),
        Some(Attr::Int(v)) => Some(vec![*v]),
        _ => None,
    }
}

fn int(node: &Node, name: &str) -> Option<i64> {
    match node.attrs.get(name) {
        Some(Attr::Int(v)) => Some(*v),
        _ => None,
    }
}

fn idx(t: &Option<HostTensor>) -> R<Option<Vec<i64>>> {
    t.as_ref()
        .map(|t| t.to_indices("reference", "index").map_err(RefError::from))
        .transpose()
}

/// Element-wise bytes of `t` as an array with a trailing byte axis (dtype-agnostic moves).
fn bytes(t: &HostTensor) -> R<ArrayD<u8>> {
    let mut shape = t.shape.clone();
    shape.push(t.dtype.size());
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), t.data.clone())?)
}

fn from_bytes(dtype: DType, a: ArrayD<u8>) -> HostTensor {
    let shape = a.shape()[..a.ndim() - 1].to_vec();
    HostTensor {
        dtype,
        shape,
        data: a.as_standard_layout().iter().copied().collect(),
    }
}

/// One node on the CPU (no subgraph ops): the executor computes small constant values with it.
/// The node's `axis` attribute (`default` when absent) as an index below `rank`, counting
/// back from `rank` when negative; an error outside `[-rank, rank)` (the interpreter folds
/// values from the input while planning, so a bad axis must not index past a shape).
fn checked_axis(node: &Node, op: &str, default: i64, rank: usize) -> R<usize> {
    let axis = int(node, "axis").unwrap_or(default);
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("{op}: axis {axis} is out of range for rank {rank}").into());
    }
    Ok((if axis < 0 { axis + r } else { axis }) as usize)
}

pub(crate) fn eval_node(node: &Node, args: &[Option<HostTensor>]) -> R<Vec<HostTensor>> {
    if matches!(node.op.as_str(), "Scan" | "If" | "Loop") {
        return Err(format!("{} is not evaluated node by node", node.op).into());
    }
    let outputs = run_node(node, args, &HashMap::new())?;
    if outputs.len() != node.outputs.len() {
        return Err(format!("{} gave {} outputs", node.op, outputs.len()).into());
    }
    Ok(outputs)
}

fn run_node(
    node: &Node,
    args: &[Option<HostTensor>],
    env: &HashMap<String, HostTensor>,
) -> R<Vec<HostTensor>> {
    let a = |i: usize| {
        args.get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| RefError(format!("{}: input {i} missing", node.name)))
    };
    let op = node.op.as_str();
    let one = |t: HostTensor| Ok(vec![t]);
    if let Some(out) = super::window::run(node, args)? {
        return Ok(out);
    }
    if let Some(out) = super::col2im::run(node, args)? {
        return Ok(vec![out]);
    }
    if let Some(out) = super::spectral::run(node, args)? {
        return Ok(vec![out]);
    }
    if let Some(out) = super::grid_sample::run(node, args)? {
        return Ok(vec![out]);
    }
    if let Some(out) = super::tree_walk::run(node, args)? {
        return Ok(vec![out]);
    }
    if let Some(out) = super::det::run(node, args)? {
        return Ok(vec![out]);
    }
    if op == "PairwiseCoupling" {
        let out =
            super::coupling::pairwise_coupling(&a(0)?).map_err(|e| RefError(e.to_string()))?;
        return Ok(vec![out]);
    }
    if op == "Unique" {
        let x = a(0)?;
        let int = |name: &str| match node.attrs.get(name) {
            Some(crate::graph::Attr::Int(v)) => Some(*v),
            _ => None,
        };
        let outs = super::unique::unique(&x, int("axis"), int("sorted").unwrap_or(1) != 0)
            .map_err(|e| RefError(e.to_string()))?;
        return Ok(outs.into_iter().take(node.outputs.len()).collect());
    }
    if op == "NonMaxSuppression" {
        let boxes = a(0)?;
        let scores = a(1)?;
        let limit = |k: usize| args.get(k).and_then(Option::as_ref);
        let center = match node.attrs.get("center_point_box") {
            Some(crate::graph::Attr::Int(v)) => *v,
            _ => 0,
        };
        let out = super::nms::non_max_suppression(
            &boxes,
            &scores,
            [limit(2), limit(3), limit(4)],
            center,
        )
        .map_err(|e| RefError(e.to_string()))?;
        return Ok(vec![out]);
    }
    if let Some(out) = super::resize::run(node, args)? {
        return Ok(vec![out]);
    }
    if let Some(out) = super::einsum::run(node, args)? {
        return Ok(vec![out]);
    }
    if let Some(out) = super::channels::run(node, args)? {
        return Ok(vec![out]);
    }
    match op {
        "StridedSlice" => {
            let mut s = StridedSlice::new(
                idx(&Some(a(1)?))?.ok_or("an index input is missing")?,
                idx(&Some(a(2)?))?.ok_or("an index input is missing")?,
            );
            s.stride = idx(&args.get(3).cloned().flatten())?;
            for (name, field) in [
                ("begin_mask", &mut s.begin_mask),
                ("end_mask", &mut s.end_mask),
                ("new_axis_mask", &mut s.new_axis_mask),
                ("shrink_axis_mask", &mut s.shrink_axis_mask),
                ("ellipsis_mask", &mut s.ellipsis_mask),
            ] {
                *field = ints(node, name).unwrap_or_default();
            }
            one(super::strided_slice(&a(0)?, &s)?)
        }
        "Slice" => {
            let s = Slice {
                start: idx(&Some(a(1)?))?.ok_or("an index input is missing")?,
                stop: idx(&Some(a(2)?))?.ok_or("an index input is missing")?,
                step: idx(&Some(a(3)?))?.ok_or("an index input is missing")?,
                axes: idx(&args.get(4).cloned().flatten())?,
            };
            one(super::slice(&a(0)?, &s)?)
        }
        "OnnxSlice" => {
            let start = idx(&Some(a(1)?))?.ok_or("an index input is missing")?;
            let s = Slice {
                step: idx(&args.get(4).cloned().flatten())?.unwrap_or(vec![1; start.len()]),
                start,
                stop: idx(&Some(a(2)?))?.ok_or("an index input is missing")?,
                axes: idx(&args.get(3).cloned().flatten())?,
            };
            one(super::slice(&a(0)?, &s)?)
        }
        "BatchToSpace" => {
            let o = BatchToSpace::new(
                idx(&Some(a(1)?))?.ok_or("an index input is missing")?,
                idx(&Some(a(2)?))?.ok_or("an index input is missing")?,
                idx(&Some(a(3)?))?.ok_or("an index input is missing")?,
            );
            one(super::batch_to_space(&a(0)?, &o)?)
        }
        "SpaceToBatch" => {
            let o = SpaceToBatch::new(
                idx(&Some(a(1)?))?.ok_or("an index input is missing")?,
                idx(&Some(a(2)?))?.ok_or("an index input is missing")?,
                idx(&Some(a(3)?))?.ok_or("an index input is missing")?,
            );
            one(super::space_to_batch(&a(0)?, &o)?)
        }
        "Identity" => one(a(0)?),
        "BitCast" => {
            let x = a(0)?;
            match node.attrs.get("to") {
                Some(Attr::String(to)) => {
                    let to = DType::from_name(to).ok_or("bad dtype")?;
                    if to.size() != x.dtype.size() {
                        return Err("BitCast between widths".into());
                    }
                    one(HostTensor::from_bytes(to, x.shape.clone(), x.data.clone())?)
                }
                _ => Err("BitCast needs 'to'".into()),
            }
        }
        // Written from the ONNX spec: the output holds one row of depth values per index,
        // along axis; on at the index (negative ones count back from depth), off elsewhere.
        "OneHot" => {
            let ind = a(0)?;
            let indices = cast(&ind, DType::I64)?.to_vec::<i64>()?;
            let depth = cast(&a(1)?, DType::I64)?.to_vec::<i64>()?[0];
            let values = a(2)?;
            let size = values.dtype.size();
            let rank = ind.shape.len() as i64;
            let axis = checked_axis(node, "OneHot", -1, rank as usize + 1)?;
            if depth < 1 {
                return Err(format!("OneHot: depth is {depth}; it must be 1 or more").into());
            }
            let outer: usize = ind.shape[..axis].iter().product();
            let inner: usize = ind.shape[axis..].iter().product();
            let mut data = Vec::new();
            for o in 0..outer {
                for d in 0..depth {
                    for i in 0..inner {
                        let mut index = indices[o * inner + i];
                        if index < 0 {
                            index += depth;
                        }
                        let pick = usize::from(index == d);
                        data.extend_from_slice(&values.data[pick * size..][..size]);
                    }
                }
            }
            let mut shape = ind.shape.clone();
            shape.insert(axis, depth as usize);
            one(HostTensor::from_bytes(values.dtype, shape, data)?)
        }
        // The first largest element of each row along axis (all axes from axis on before
        // opset 13, which the loader marks coerce_2d) is 1, the rest 0.
        "Hardmax" => {
            let x = a(0)?;
            let rank = x.shape.len() as i64;
            let axis = checked_axis(node, "Hardmax", -1, rank.max(1) as usize)?;
            let values = cast(&x, DType::F64)?.to_vec::<f64>()?;
            let coerce = int(node, "coerce_2d").unwrap_or(0) != 0;
            let outer: usize = x.shape[..axis].iter().product();
            let (len, inner) = if coerce {
                (x.shape[axis..].iter().product::<usize>(), 1)
            } else {
                (x.shape[axis], x.shape[axis + 1..].iter().product::<usize>())
            };
            let mut ones = vec![0i64; values.len()];
            for o in 0..outer {
                for i in 0..inner {
                    let at = |k: usize| (o * len + k) * inner + i;
                    let best = (0..len).fold(None, |best: Option<usize>, k| match best {
                        Some(b) if values[at(b)] >= values[at(k)] => Some(b),
                        _ => Some(k),
                    });
                    if let Some(b) = best {
                        ones[at(b)] = 1;
                    }
                }
            }
            one(cast(
                &HostTensor::from_vec(x.shape.clone(), &ones)?,
                x.dtype,
            )?)
        }
        "MelWeightMatrix" => {
            let inputs = (0..5).map(a).collect::<R<Vec<_>>>()?;
            let refs: Vec<&HostTensor> = inputs.iter().collect();
            one(crate::graph::registry::mel_weight_matrix_of(node, &refs)?)
        }
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => {
            one(crate::graph::registry::signal_window_of(node, &a(0)?)
                .map_err(|e| RefError(e.to_string()))?)
        }
        "ReverseSequence" | "Compress" => {
            let x = a(0)?;
            let e = |e: crate::Error| RefError(e.to_string());
            let (table, shape, row) = if op == "ReverseSequence" {
                let lengths = idx(&Some(a(1)?))?.ok_or("sequence_lens is missing")?;
                let table = crate::ops::select::reverse_sequence_rows(
                    &x.shape,
                    &lengths,
                    int(node, "time_axis").unwrap_or(0),
                    int(node, "batch_axis").unwrap_or(1),
                )
                .map_err(e)?;
                (
                    table,
                    x.shape.clone(),
                    x.shape[2..].iter().product::<usize>(),
                )
            } else {
                let c = a(1)?;
                if c.dtype != DType::Bool || c.shape.len() != 1 {
                    return Err("Compress: condition must be 1-D bool".into());
                }
                let cond = c.to_vec::<bool>().map_err(e)?;
                let (table, rows, shape) =
                    crate::ops::select::compress_plan(&x.shape, &cond, int(node, "axis"))
                        .map_err(e)?;
                (table, shape, rows[1])
            };
            let size = x.dtype.size() * row;
            let mut data = Vec::with_capacity(table.len() * size);
            for &r in &table {
                let at = r as usize * size;
                data.extend_from_slice(&x.data[at..at + size]);
            }
            one(HostTensor {
                dtype: x.dtype,
                shape,
                data,
            })
        }
        "GatherND" => {
            let (data, indices) = (a(0)?, a(1)?);
            let b = int(node, "batch_dims").unwrap_or(0);
            let (shape, k) = crate::ops::gather_nd::gather_nd_shape(&data.shape, &indices.shape, b)
                .map_err(|e| RefError(e.to_string()))?;
            let b = b as usize;
            let ds = &data.shape;
            let idx = cast(&indices, DType::I64)?
                .to_vec::<i64>()
                .map_err(|e| RefError(e.to_string()))?;
            let rows: usize = ds[b..b + k].iter().product();
            let row: usize = ds[b + k..].iter().product();
            let per_batch: usize = indices.shape[b..indices.shape.len() - 1].iter().product();
            let size = data.dtype.size();
            let mut out = Vec::with_capacity(shape.iter().product::<usize>() * size);
            for (p, tuple) in idx.chunks(k).enumerate() {
                let mut r = 0usize;
                for (j, &i) in tuple.iter().enumerate() {
                    let len = ds[b + j] as i64;
                    if i < -len || i >= len {
                        return Err(format!("GatherND: index {i} is out of range").into());
                    }
                    r = r * ds[b + j] + if i < 0 { i + len } else { i } as usize;
                }
                let at = ((p / per_batch.max(1)) * rows + r) * row * size;
                out.extend_from_slice(&data.data[at..at + row * size]);
            }
            one(HostTensor {
                dtype: data.dtype,
                shape,
                data: out,
            })
        }
        // Element (i, j) is 1 where j - i is k.
        "EyeLike" => {
            let x = a(0)?;
            let dtype = match node.attrs.get("dtype") {
                Some(Attr::String(name)) => DType::from_name(name).ok_or("EyeLike dtype")?,
                _ => x.dtype,
            };
            let [_, cols] = x.shape[..] else {
                return Err("EyeLike takes 2-D tensors".into());
            };
            let k = int(node, "k").unwrap_or(0);
            let flags: Vec<i64> = (0..x.numel())
                .map(|e| i64::from((e % cols) as i64 - (e / cols) as i64 == k))
                .collect();
            one(cast(
                &HostTensor::from_vec(x.shape.clone(), &flags)?,
                dtype,
            )?)
        }
        // Written from the ONNX spec: a copy of the data, updates applied in order (so the
        // last of repeated indices wins, or the reduction runs in order, as in onnxruntime).
        "ScatterElements" | "Scatter" | "ScatterND" => {
            let x = a(0)?;
            let ind = a(1)?;
            let upd = a(2)?;
            let mut indices = cast(&ind, DType::I64)?.to_vec::<i64>()?;
            let mut ind_shape = ind.shape.clone();
            // Our `unique_indices` extension: indices may repeat along axes of the updates.
            let unique = matches!(node.attrs.get("unique_indices"), Some(Attr::Int(1)));
            if unique && ind_shape != upd.shape && ind_shape.len() == upd.shape.len() {
                let expanded = HostTensor::from_vec(ind_shape.clone(), &indices)?;
                indices = expand_to(&expanded, &upd.shape)
                    .map_err(|_| "ScatterElements: indices do not broadcast to the updates")?
                    .to_vec::<i64>()?;
                ind_shape = upd.shape.clone();
            }
            let reduction = match node.attrs.get("reduction") {
                Some(Attr::String(r)) => r.clone(),
                _ => "none".to_string(),
            };
            let size = x.dtype.size();
            let rank = x.shape.len();
            let mut strides = vec![1usize; rank];
            for k in (0..rank.saturating_sub(1)).rev() {
                strides[k] = strides[k + 1] * x.shape[k + 1];
            }
            let position = |i: i64, dim: usize| -> R<usize> {
                let d = dim as i64;
                if i < -d || i >= d {
                    return Err(format!("{op} index {i} out of range").into());
                }
                Ok((if i < 0 { i + d } else { i }) as usize)
            };
            // (data element, update element) pairs in the order they apply.
            let mut pairs: Vec<(usize, usize)> = Vec::new();
            if op == "ScatterND" {
                let k = *ind.shape.last().ok_or("ScatterND: indices of rank 0")?;
                let slice: usize = x.shape[k..].iter().product();
                let tuples: usize = ind.shape[..ind.shape.len() - 1].iter().product();
                for n in 0..tuples {
                    let tuple = &indices[n * k..(n + 1) * k];
                    let mut base = 0;
                    for j in 0..k {
                        base += position(tuple[j], x.shape[j])? * strides[j];
                    }
                    pairs.extend((0..slice).map(|s| (base + s, n * slice + s)));
                }
            } else {
                let axis = checked_axis(node, &node.op, 0, rank)?;
                let mut at = vec![0usize; rank];
                for (u, &i) in indices.iter().enumerate() {
                    let mut t = 0;
                    for k in 0..rank {
                        let c = if k == axis {
                            position(i, x.shape[k])?
                        } else {
                            at[k]
                        };
                        t += c * strides[k];
                    }
                    pairs.push((t, u));
                    for k in (0..rank).rev() {
                        at[k] += 1;
                        if at[k] < ind_shape[k] {
                            break;
                        }
                        at[k] = 0;
                    }
                }
            }
            let mut data = x.data.clone();
            let element = |bytes: &[u8]| HostTensor::from_bytes(x.dtype, vec![], bytes.to_vec());
            for (t, u) in pairs {
                let update = &upd.data[u * size..][..size];
                let merged = match reduction.as_str() {
                    "none" => update.to_vec(),
                    r => {
                        let pair = match r {
                            "add" => "Add",
                            "mul" => "Mul",
                            "max" => "Max",
                            "min" => "Min",
                            _ => return Err(format!("{op}: reduction {r}").into()),
                        };
                        let old = element(&data[t * size..][..size])?;
                        elementwise(pair, &[old, element(update)?])?.data
                    }
                };
                data[t * size..][..size].copy_from_slice(&merged);
            }
            one(HostTensor { data, ..x })
        }
        // Written from the ONNX spec and onnxruntime's behaviour: negative pads crop first,
        // then each axis is extended by its mode, one axis at a time.
        // One Pad whose negative pads crop.
        "CenterCropPad" => {
            let x = a(0)?;
            let target = idx(&Some(a(1)?))?.ok_or("CenterCropPad: shape is missing")?;
            let axes = ints(node, "axes");
            let pads = crate::ops::select::center_crop_pad_pads(&x.shape, &target, axes.as_deref())
                .map_err(|e| RefError(e.to_string()))?;
            let pads = HostTensor::from_vec(vec![pads.len()], &pads)
                .map_err(|e| RefError(e.to_string()))?;
            run_node(
                &Node::new("Pad", node.name.clone()),
                &[Some(x), Some(pads)],
                env,
            )
        }
        "Pad" => {
            let x = a(0)?;
            let rank = x.shape.len();
            let mode = match node.attrs.get("mode") {
                Some(Attr::String(m)) => m.as_str(),
                _ => "constant",
            };
            let pads = match idx(&args.get(1).cloned().flatten())? {
                Some(p) => p,
                None => ints(node, "pads").ok_or("Pad needs pads")?,
            };
            let axes: Vec<usize> = match idx(&args.get(3).cloned().flatten())? {
                Some(axes) => axes
                    .iter()
                    .map(|&k| (if k < 0 { k + rank as i64 } else { k }) as usize)
                    .collect(),
                None => (0..rank).collect(),
            };
            if pads.len() != 2 * axes.len() || axes.iter().any(|&k| k >= rank) {
                return Err("Pad: 2 pads per axis".into());
            }
            let value = crate::graph::registry::pad_value(
                node,
                args.get(2).and_then(Option::as_ref),
                x.dtype,
            )?
            .map_or(vec![0; x.dtype.size()], |v| v.data);
            let size = x.dtype.size();
            let mut t = x;
            for (j, &k) in axes.iter().enumerate() {
                let (b, e) = (pads[j], pads[j + axes.len()]);
                let outer: usize = t.shape[..k].iter().product();
                let inner: usize = t.shape[k + 1..].iter().product::<usize>() * size;
                let dim = t.shape[k] as i64;
                // Each output position along the axis: the input position, or None.
                let positions: Vec<Option<i64>> = if mode == "constant" {
                    // Output element j is input element j - b, or the constant
                    // (onnxruntime's reading, which also lets a crop run past the data).
                    if dim + b + e < 0 {
                        return Err("Pad: cropped below nothing".into());
                    }
                    (0..dim + b + e)
                        .map(|j| Some(j - b).filter(|i| (0..dim).contains(i)))
                        .collect()
                } else {
                    let (lo, hi) = (-b.min(0), dim + e.min(0));
                    if hi < lo {
                        return Err("Pad: cropped below nothing".into());
                    }
                    let kept: Vec<i64> = (lo..hi).collect();
                    let n = kept.len() as i64;
                    let padded = b > 0 || e > 0;
                    if padded && (n == 0 || (mode == "reflect" && n < 2)) {
                        return Err("Pad: the mode cannot pad this axis".into());
                    }
                    (-b.max(0)..n + e.max(0))
                        .map(|i| match mode {
                            _ if (0..n).contains(&i) => Some(kept[i as usize]),
                            "edge" => Some(kept[i.clamp(0, n - 1) as usize]),
                            "wrap" => Some(kept[i.rem_euclid(n) as usize]),
                            // Mirror across the first or last element until inside.
                            _ => {
                                let mut r = i;
                                while !(0..n).contains(&r) {
                                    r = if r < 0 { -r } else { 2 * (n - 1) - r };
                                }
                                Some(kept[r as usize])
                            }
                        })
                        .collect()
                };
                let mut data = Vec::with_capacity(outer * positions.len() * inner);
                for o in 0..outer {
                    for p in &positions {
                        match p {
                            Some(i) => {
                                let at = (o * dim as usize + *i as usize) * inner;
                                data.extend_from_slice(&t.data[at..at + inner]);
                            }
                            None => {
                                for _ in 0..inner / size.max(1) {
                                    data.extend_from_slice(&value);
                                }
                            }
                        }
                    }
                }
                t.shape[k] = positions.len();
                t.data = data;
            }
            one(t)
        }
        "Dropout" => {
            let x = a(0)?;
            let (training, ratio) = crate::graph::registry::dropout_mode(
                node,
                args.get(1).and_then(Option::as_ref),
                args.get(2).and_then(Option::as_ref),
            )?;
            if training && ratio != 0.0 {
                return Err("Dropout: training mode drops random elements".into());
            }
            let mask = HostTensor::from_bytes(DType::Bool, x.shape.clone(), vec![1; x.numel()])?;
            Ok([x, mask].into_iter().take(node.outputs.len()).collect())
        }
        "CheckInputs" => {
            let inputs: Vec<Option<crate::graph::input_rules::Input>> = args
                .iter()
                .map(|t| {
                    t.as_ref().map(|t| crate::graph::input_rules::Input {
                        dtype: t.dtype,
                        shape: &t.shape,
                        value: Some(t),
                    })
                })
                .collect();
            crate::graph::input_rules::check(node, &inputs)?;
            one(HostTensor::from_bytes(DType::Bool, vec![], vec![1])?)
        }
        "CheckValues" => {
            let bounds = args.get(1).cloned().flatten();
            let allowed = args.get(2).cloned().flatten();
            crate::graph::input_rules::ValueCheck::of(node, bounds.as_ref())?
                .check(&a(0)?, allowed.as_ref())?;
            one(HostTensor::from_bytes(DType::Bool, vec![], vec![1])?)
        }
        "ScanSequenceLens" => {
            let lens = a(0)?;
            let (batch, len) = {
                let x = a(1)?;
                (
                    x.shape.first().copied(),
                    x.shape.get(1).copied().unwrap_or(0),
                )
            };
            let values = idx(&Some(lens.clone()))?.ok_or("sequence_lens is missing")?;
            if Some(values.len()) != batch || values.iter().any(|&l| l < 1 || l as usize > len) {
                return Err(format!(
                    "sequence_lens {values:?}: each in 1..={len}, one per batch item"
                )
                .into());
            }
            one(lens)
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Equal" | "Less" | "LessOrEqual" | "Greater"
        | "GreaterOrEqual" | "And" | "Or" | "Xor" | "Where" | "BitwiseAnd" | "BitwiseOr"
        | "BitwiseXor" => {
            let ins: Vec<HostTensor> = (0..args.len()).map(a).collect::<R<_>>()?;
            one(elementwise(op, &ins)?)
        }
        // Written from the ONNX reference implementation, in f64: the mean (of the squares
        // for RMS) over the axes from `axis` on, 1 / sqrt(variance + epsilon), the scaled
        // (and shifted) result in X's type; Mean and InvStdDev in f32.
        "LayerNormalization" | "RMSNormalization" => {
            let x = a(0)?;
            let dtype = x.dtype;
            if !crate::ops::activation::takes(op, dtype) {
                return Err(format!("{op} does not take {dtype}").into());
            }
            let rank = x.shape.len() as i64;
            let axis = int(node, "axis").unwrap_or(-1);
            let axis = if axis < 0 { axis + rank } else { axis };
            if !(0..rank).contains(&axis) {
                return Err(format!("{op} axis {axis} out of range").into());
            }
            let eps = match node.attrs.get("epsilon") {
                Some(Attr::Float(v)) => *v,
                Some(Attr::Int(v)) => *v as f64,
                _ => 1e-5,
            };
            // Broadcast to X's shape by adding zeros of that shape.
            let zeros = HostTensor::from_vec(x.shape.clone(), &vec![0.0f64; x.numel()])?;
            let wide = |t: &HostTensor, _: &[usize]| -> R<Vec<f64>> {
                let t = elementwise("Add", &[zeros.clone(), cast(t, DType::F64)?])?;
                Ok(t.to_vec::<f64>()?)
            };
            let xs = wide(&x, &x.shape)?;
            let scale = wide(&a(1)?, &x.shape)?;
            let bias = match args.get(2).cloned().flatten() {
                Some(b) if op == "LayerNormalization" => Some(wide(&b, &x.shape)?),
                _ => None,
            };
            let cols: usize = x.shape[axis as usize..].iter().product();
            let rows = xs.len().checked_div(cols).unwrap_or(0);
            let (mut y, mut means, mut invs) = (vec![0.0; xs.len()], vec![], vec![]);
            for r in 0..rows {
                let row = &xs[r * cols..(r + 1) * cols];
                let n = cols as f64;
                let (mean, var) = if op == "LayerNormalization" {
                    let mean = row.iter().sum::<f64>() / n;
                    (
                        mean,
                        row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n,
                    )
                } else {
                    (0.0, row.iter().map(|v| v * v).sum::<f64>() / n)
                };
                let inv = 1.0 / (var + eps).sqrt();
                for (j, v) in row.iter().enumerate() {
                    let k = r * cols + j;
                    y[k] = (v - mean) * inv * scale[k] + bias.as_ref().map_or(0.0, |b| b[k]);
                }
                means.push(mean);
                invs.push(inv);
            }
            let y = cast(&HostTensor::from_vec(x.shape.clone(), &y)?, dtype)?;
            let mut kept = x.shape.clone();
            for d in &mut kept[axis as usize..] {
                *d = 1;
            }
            let stat = |v: &[f64]| -> R<HostTensor> {
                cast(&HostTensor::from_vec(kept.clone(), v)?, DType::F32)
            };
            let mut out = vec![y];
            if node.outputs.len() > 1 {
                out.push(stat(&means)?);
            }
            if node.outputs.len() > 2 {
                out.push(stat(&invs)?);
            }
            Ok(out)
        }
        // Written from the ONNX reference implementation, in f64 (SiLU in f32, as there):
        // the state (or zeros) then the input, convolved per channel, plus the bias.
        "CausalConvWithState" => {
            let x = a(0)?;
            let dtype = x.dtype;
            let (b, ch, len) = match x.shape[..] {
                [b, c, l] => (b, c, l),
                _ => return Err("CausalConvWithState input must be rank 3".into()),
            };
            let k = a(1)?.shape.get(2).copied().ok_or("weight must be rank 3")?;
            let f = |t: &HostTensor| -> R<Vec<f64>> { Ok(cast(t, DType::F64)?.to_vec::<f64>()?) };
            let xs = f(&x)?;
            let w = f(&a(1)?)?;
            let given = |i: usize| args.get(i).cloned().flatten();
            let bias = given(2).map(|t| f(&t)).transpose()?;
            let past = given(3).map(|t| f(&t)).transpose()?;
            let silu = matches!(
                node.attrs.get("activation"),
                Some(Attr::String(s)) if s == "silu" || s == "swish"
            );
            let carry = k - 1;
            let (mut y, mut state) = (Vec::with_capacity(xs.len()), Vec::new());
            for r in 0..b * ch {
                let c = r % ch;
                let padded: Vec<f64> = (0..carry)
                    .map(|p| past.as_ref().map_or(0.0, |s| s[r * carry + p]))
                    .chain(xs[r * len..(r + 1) * len].iter().copied())
                    .collect();
                for t in 0..len {
                    let mut acc: f64 = (0..k).map(|j| w[c * k + j] * padded[t + j]).sum();
                    acc += bias.as_ref().map_or(0.0, |b| b[c]);
                    if silu {
                        let v = acc as f32;
                        acc = f64::from(v * (1.0 / (1.0 + (-v).exp())));
                    }
                    y.push(acc);
                }
                state.extend_from_slice(&padded[len..]);
            }
            let y = cast(&HostTensor::from_vec(x.shape.clone(), &y)?, dtype)?;
            let state = cast(&HostTensor::from_vec(vec![b, ch, carry], &state)?, dtype)?;
            let mut out = vec![y];
            if node.outputs.len() > 1 {
                out.push(state);
            }
            Ok(out)
        }
        // Written from the spec: elements with j - i >= k (upper) or <= k (lower) kept.
        "Trilu" => {
            let x = a(0)?;
            let k = match args.get(1).cloned().flatten() {
                Some(t) => cast(&t, DType::I64)?
                    .to_vec::<i64>()?
                    .first()
                    .copied()
                    .unwrap_or(0),
                None => 0,
            };
            let upper = int(node, "upper").unwrap_or(1) != 0;
            let r = x.shape.len();
            if r < 2 {
                return Err("Trilu needs rank 2".into());
            }
            let (n, m) = (x.shape[r - 2], x.shape[r - 1]);
            let size = x.dtype.size();
            let mut data = x.data.clone();
            for e in 0..x.numel() {
                let (i, j) = (((e / m) % n.max(1)) as i64, (e % m) as i64);
                let keep = if upper { j - i >= k } else { j - i <= k };
                if !keep {
                    data[e * size..(e + 1) * size].fill(0);
                }
            }
            one(HostTensor {
                dtype: x.dtype,
                shape: x.shape.clone(),
                data,
            })
        }
        // Written from the ONNX definitions, in f64 (Gelu's erf from libm).
        op if crate::ops::activation::ACTIVATIONS.contains(&op) => {
            let x = a(0)?;
            let dtype = x.dtype;
            if !crate::ops::activation::takes(op, dtype) {
                return Err(format!("{op} does not take {dtype}").into());
            }
            let attr = |name: &str| -> f64 {
                match node.attrs.get(name) {
                    Some(Attr::Float(v)) => *v,
                    Some(Attr::Int(v)) => *v as f64,
                    _ => crate::ops::activation::float_attributes(op)
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map_or(0.0, |&(_, v)| v),
                }
            };
            // PRelu broadcasts X and the slope both ways, as onnxruntime and the reference do.
            let (x, second) = match args.get(1).cloned().flatten() {
                Some(t) => {
                    let shape = crate::ops::broadcast_shape("PRelu", &x.shape, &t.shape)
                        .map_err(|e| e.to_string())?;
                    (expand_to(&x, &shape)?, Some(expand_to(&t, &shape)?))
                }
                None => (x, None),
            };
            if dtype.is_integer() {
                return one(integer_activation(op, &x, second, &attr)?);
            }
            let xs = cast(&x, DType::F64)?.to_vec::<f64>()?;
            let second = match second {
                Some(t) => cast(&t, DType::F64)?.to_vec::<f64>()?,
                None => vec![0.0; xs.len()],
            };
            let softplus = |v: f64| {
                if v > 0.0 {
                    v + (-v).exp().ln_1p()
                } else {
                    v.exp().ln_1p()
                }
            };
            let approximate = match node.attrs.get("approximate") {
                Some(Attr::String(s)) => s.as_str(),
                _ => "none",
            };
            let ys: Vec<f64> = xs
                .iter()
                .zip(&second)
                .map(|(&v, &w)| match op {
                    "Elu" => {
                        if v < 0.0 {
                            attr("alpha") * (v.exp() - 1.0)
                        } else {
                            v
                        }
                    }
                    "Selu" => {
                        let (al, g) = (attr("alpha"), attr("gamma"));
                        if v > 0.0 {
                            g * v
                        } else {
                            g * (al * v.exp() - al)
                        }
                    }
                    "Celu" => {
                        let al = attr("alpha");
                        v.max(0.0) + (al * ((v / al).exp() - 1.0)).min(0.0)
                    }
                    "LeakyRelu" => {
                        if v < 0.0 {
                            attr("alpha") * v
                        } else {
                            v
                        }
                    }
                    "PRelu" => {
                        if v < 0.0 {
                            w * v
                        } else {
                            v
                        }
                    }
                    "ThresholdedRelu" => {
                        if v > attr("alpha") {
                            v
                        } else {
                            0.0
                        }
                    }
                    "HardSigmoid" => (attr("alpha") * v + attr("beta")).clamp(0.0, 1.0),
                    "HardSwish" => v * (v / 6.0 + 0.5).clamp(0.0, 1.0),
                    "Softplus" => softplus(v),
                    "Softsign" => v / (1.0 + v.abs()),
                    "Swish" => v / (1.0 + (-attr("alpha") * v).exp()),
                    "SwiGLU" => v / (1.0 + (-attr("alpha") * v).exp()) * w,
                    "Mish" => v * softplus(v).tanh(),
                    "Gelu" if approximate == "tanh" => {
                        let k = (2.0 / std::f64::consts::PI).sqrt();
                        0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
                    }
                    "Gelu" => 0.5 * v * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2)),
                    _ => {
                        let (bias, lambd) = (attr("bias"), attr("lambd"));
                        if v < -lambd {
                            v + bias
                        } else if v > lambd {
                            v - bias
                        } else {
                            0.0
                        }
                    }
                })
                .collect();
            one(cast(&HostTensor::from_vec(x.shape.clone(), &ys)?, dtype)?)
        }
        "IsInf" => {
            let name = crate::ops::elementwise::is_inf_op(
                int(node, "detect_positive").unwrap_or(1) != 0,
                int(node, "detect_negative").unwrap_or(1) != 0,
            );
            one(elementwise(name, &[a(0)?])?)
        }
        "BitShift" => {
            let direction = match node.attrs.get("direction") {
                Some(Attr::String(d)) => Some(d.as_str()),
                _ => None,
            };
            let name = crate::graph::registry::bit_shift_op(direction)
                .ok_or("BitShift: direction must be LEFT or RIGHT")?;
            one(elementwise(name, &[a(0)?, a(1)?])?)
        }
        "Mod" => {
            let name = if int(node, "fmod").unwrap_or(0) != 0 {
                "FMod"
            } else {
                "Mod"
            };
            one(elementwise(name, &[a(0)?, a(1)?])?)
        }
        // Absent bounds do not bound: the dtype's infinities (or extremes) stand for them.
        "Clip" => {
            let x = a(0)?;
            let mut bounds = Vec::new();
            for (k, (name, none)) in [("min", f64::NEG_INFINITY), ("max", f64::INFINITY)]
                .into_iter()
                .enumerate()
            {
                bounds.push(match (args.get(k + 1), node.attrs.get(name)) {
                    (Some(Some(b)), _) => b.clone(),
                    (_, Some(Attr::Float(v))) => {
                        cast(&HostTensor::from_vec(Vec::new(), &[*v])?, x.dtype)?
                    }
                    _ => cast(&HostTensor::from_vec(Vec::new(), &[none])?, x.dtype)?,
                });
            }
            one(elementwise(
                "Clip",
                &[x, bounds[0].clone(), bounds[1].clone()],
            )?)
        }
        // Variadic: inputs combined in order, Mean then divided by the count.
        "Max" | "Min" | "Sum" | "Mean" => {
            let pair = if matches!(op, "Sum" | "Mean") {
                "Add"
            } else {
                op
            };
            let mut acc = a(0)?;
            let float = matches!(
                acc.dtype,
                DType::F32 | DType::F16 | DType::BF16 | DType::F64
            );
            if pair == "Add" && !float {
                return Err(format!("{op} takes float types, not {}", acc.dtype).into());
            }
            for i in 1..args.len() {
                acc = elementwise(pair, &[acc, a(i)?])?;
            }
            if op == "Mean" {
                let n = args.len() as f64;
                let count = cast(&HostTensor::from_vec(vec![], &[n])?, acc.dtype)?;
                acc = elementwise("Div", &[acc, count])?;
            }
            one(acc)
        }
        "Neg" | "Abs" | "Exp" | "Log" | "Sqrt" | "Tanh" | "Sigmoid" | "Relu" | "Reciprocal"
        | "Not" | "Sign" | "Floor" | "Ceil" | "Round" | "Erf" | "IsNaN" | "Sin" | "Cos" | "Tan"
        | "Asin" | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh" | "Acosh" | "Atanh"
        | "BitwiseNot" => one(elementwise(op, &[a(0)?])?),
        // f16 and bf16 accumulate in f32 and round once (narrow).
        "MatMul" => one(narrow(
            match (num(&a(0)?)?, num(&a(1)?)?) {
                (Num::F(x), Num::F(y)) => Num::F(matmul(&x, &y, |p, q| p * q, |p, q| p + q)?),
                (Num::D(x), Num::D(y)) => Num::D(matmul(&x, &y, |p, q| p * q, |p, q| p + q)?),
                (Num::I(x), Num::I(y)) => {
                    Num::I(matmul(&x, &y, i32::wrapping_mul, i32::wrapping_add)?)
                }
                (Num::U(x), Num::U(y)) => {
                    Num::U(matmul(&x, &y, u32::wrapping_mul, u32::wrapping_add)?)
                }
                (Num::L(x), Num::L(y)) => {
                    Num::L(matmul(&x, &y, i64::wrapping_mul, i64::wrapping_add)?)
                }
                (Num::Q(x), Num::Q(y)) => {
                    Num::Q(matmul(&x, &y, u64::wrapping_mul, u64::wrapping_add)?)
                }
                _ => return Err("MatMul operands differ".into()),
            },
            a(0)?.dtype,
        )?),
        "Cast" => match node.attrs.get("to") {
            Some(Attr::String(to)) => one(crate::reference::numeric::cast_mode(
                &a(0)?,
                DType::from_name(to).ok_or("bad dtype")?,
                crate::graph::cast_mode(node).map_err(|e| e.to_string())?,
            )?),
            _ => Err("Cast needs 'to'".into()),
        },
        "Transpose" => {
            let x = a(0)?;
            let r = x.shape.len();
            // The op's own checks of perm (a permutation of the input's axes) first.
            crate::ops::layout::transpose_plan(&x.shape, ints(node, "perm").as_deref())?;
            let mut perm: Vec<usize> = ints(node, "perm")
                .map(|p| p.iter().map(|&v| v as usize).collect())
                .unwrap_or_else(|| (0..r).rev().collect());
            perm.push(r); // the byte axis stays last
            one(from_bytes(x.dtype, bytes(&x)?.permuted_axes(IxDyn(&perm))))
        }
        "Reshape" => {
            let x = a(0)?;
            let shape = crate::ops::layout::reshape_shape(
                &x.shape,
                &idx(&Some(a(1)?))?.ok_or("an index input is missing")?,
                int(node, "allowzero").unwrap_or(0) != 0,
            )?;
            one(HostTensor { shape, ..x })
        }
        "Concat" => {
            let parts: Vec<HostTensor> = (0..args.len()).map(a).collect::<R<_>>()?;
            let r = parts[0].shape.len() as i64;
            let axis = int(node, "axis").ok_or("Concat needs axis")?;
            let axis = if axis < 0 { axis + r } else { axis } as usize;
            let arrays: Vec<ArrayD<u8>> = parts.iter().map(bytes).collect::<R<_>>()?;
            let views: Vec<_> = arrays.iter().map(|x| x.view()).collect();
            one(from_bytes(parts[0].dtype, concatenate(Axis(axis), &views)?))
        }
        "Shape" => {
            let dims = &a(0)?.shape;
            let r = dims.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let start = clamp(int(node, "start").unwrap_or(0));
            let end = clamp(int(node, "end").unwrap_or(r)).max(start);
            let v: Vec<i64> = dims[start..end].iter().map(|&d| d as i64).collect();
            one(HostTensor::from_vec(vec![v.len()], &v)?)
        }
        "Size" => one(HostTensor::from_vec(vec![], &[a(0)?.numel() as i64])?),
        "Squeeze" | "Unsqueeze" | "Flatten" => {
            let x = a(0)?;
            // Unsqueeze also takes a scalar axis (as onnxruntime does).
            let given = args
                .get(1)
                .cloned()
                .flatten()
                .map(|t| match t.shape.is_empty() {
                    true if op == "Unsqueeze" => HostTensor {
                        shape: vec![1],
                        ..t
                    },
                    _ => t,
                });
            let axes = match idx(&given)? {
                Some(v) => Some(v),
                None => ints(node, "axes"),
            };
            let shape = match op {
                "Squeeze" => crate::ops::layout::squeeze_shape(&x.shape, axes.as_deref())?,
                "Unsqueeze" => crate::ops::layout::unsqueeze_shape(
                    &x.shape,
                    &axes.ok_or("Unsqueeze needs axes")?,
                )?,
                _ => crate::ops::layout::flatten_shape(&x.shape, int(node, "axis").unwrap_or(1))?,
            };
            one(HostTensor { shape, ..x })
        }
        // Broadcasting written from numpy's rule, with ndarray's own broadcast.
        // Output element i reads the input at i modulo the input's shape, axis by axis.
        "Tile" => {
            let x = a(0)?;
            let repeats = idx(&Some(a(1)?))?.ok_or("Tile needs repeats")?;
            if repeats.len() != x.shape.len() || repeats.iter().any(|&r| r < 0) {
                return Err("Tile: one repeat of 0 or more per input axis".into());
            }
            let shape: Vec<usize> = x
                .shape
                .iter()
                .zip(&repeats)
                .map(|(&d, &r)| {
                    d.checked_mul(r as usize)
                        .ok_or_else(|| RefError::from("Tile: the output's size overflows"))
                })
                .collect::<R<_>>()?;
            let size = x.dtype.size();
            let n = shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .ok_or("Tile: the output's size overflows")?;
            let mut data = Vec::with_capacity(n * size);
            let mut index = vec![0usize; shape.len()];
            for _ in 0..n {
                let source = index
                    .iter()
                    .zip(&x.shape)
                    .fold(0, |s, (&i, &d)| s * d + i % d);
                data.extend_from_slice(&x.data[source * size..][..size]);
                for k in (0..shape.len()).rev() {
                    index[k] += 1;
                    if index[k] < shape[k] {
                        break;
                    }
                    index[k] = 0;
                }
            }
            one(HostTensor::from_bytes(x.dtype, shape, data)?)
        }
        "Expand" => {
            let x = a(0)?;
            let wanted: Vec<usize> = idx(&Some(a(1)?))?
                .ok_or("Expand needs a shape")?
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| RefError::from("negative dimension")))
                .collect::<R<_>>()?;
            let rank = x.shape.len().max(wanted.len());
            let pad = |s: &[usize]| {
                let mut p = vec![1; rank - s.len()];
                p.extend_from_slice(s);
                p
            };
            let (xs, ws) = (pad(&x.shape), pad(&wanted));
            let shape: Vec<usize> = xs
                .iter()
                .zip(&ws)
                .map(|(&p, &q)| match (p, q) {
                    (1, q) => Ok(q),
                    (p, q) if q == 1 || q == p => Ok(p),
                    _ => Err(RefError::from("Expand: shapes do not broadcast")),
                })
                .collect::<R<_>>()?;
            let out = expand_to(&x, &shape).map_err(|_| "Expand: shapes do not broadcast")?;
            one(out)
        }
        "ConstantOfShape" => {
            let shape: Vec<usize> = idx(&Some(a(0)?))?
                .ok_or("ConstantOfShape needs a shape")?
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| RefError::from("negative dimension")))
                .collect::<R<_>>()?;
            let value = match node.attrs.get("value") {
                Some(Attr::Tensor(t)) => t.clone(),
                _ => HostTensor::from_vec(vec![1], &[0f32])?,
            };
            let n: usize = shape.iter().product();
            one(HostTensor {
                dtype: value.dtype,
                shape,
                data: value.data.repeat(n),
            })
        }
        "NonZero" => one(crate::graph::registry::non_zero_of(&a(0)?).map_err(|e| e.to_string())?),
        "CastLike" => one(crate::reference::numeric::cast_mode(
            &a(0)?,
            a(1)?.dtype,
            crate::graph::cast_mode(node).map_err(|e| e.to_string())?,
        )?),
        op if op.starts_with("Reduce") => {
            let x = a(0)?;
            let axes = match idx(&args.get(1).cloned().flatten())? {
                Some(v) => Some(v),
                None => ints(node, "axes"),
            };
            let axes = match axes {
                Some(v) if !v.is_empty() => {
                    crate::ops::reduce::normalize_axes("reference", x.shape.len(), &v)?
                }
                _ if int(node, "noop_with_empty_axes").unwrap_or(0) != 0 => {
                    if !crate::ops::reduce::transforms_elements(op) {
                        return one(x);
                    }
                    Vec::new()
                }
                _ => (0..x.shape.len()).collect(),
            };
            one(reduce(
                op,
                &x,
                &axes,
                int(node, "keepdims").unwrap_or(1) != 0,
            )?)
        }
        // Max-shifted exponentials over the axis (Softmax-1/-11: over the trailing dims from
        // the axis, with `coerce_2d`), in f64 for f32 and f64; f16 and bf16 step by step in
        // their own type, as the ONNX function body that defines the op rounds.
        "Softmax" | "LogSoftmax" => {
            let x = a(0)?;
            let rank = x.shape.len().max(1) as i64;
            let axis = checked_axis(node, &node.op, -1, rank as usize)?;
            let axes: Vec<usize> = if int(node, "coerce_2d").unwrap_or(0) != 0 {
                (axis..x.shape.len()).collect()
            } else {
                vec![axis.min(x.shape.len().saturating_sub(1))]
            };
            let wide = if matches!(x.dtype, DType::F16 | DType::BF16) {
                x.clone()
            } else {
                cast(&x, DType::F64)?
            };
            let wide = if wide.shape.is_empty() {
                HostTensor {
                    shape: vec![1],
                    ..wide
                }
            } else {
                wide
            };
            let max = reduce("ReduceMax", &wide, &axes, true)?;
            let shifted = elementwise("Sub", &[wide, max])?;
            let e = elementwise("Exp", std::slice::from_ref(&shifted))?;
            let sum = reduce("ReduceSum", &e, &axes, true)?;
            let mut y = if op == "Softmax" {
                elementwise("Div", &[e, sum])?
            } else {
                elementwise("Sub", &[shifted, elementwise("Log", &[sum])?])?
            };
            y.shape = x.shape.clone();
            one(cast(&y, x.dtype)?)
        }
        // The spec's recurrence step by step in f64, rounded once to the output types.
        "LinearAttention" => {
            let opt = |i: usize| args.get(i).cloned().flatten();
            let (q, k, v, past, decay, beta) = (a(0)?, a(1)?, a(2)?, opt(3), opt(4), opt(5));
            let attrs = crate::ops::linear_attention::LinearAttention {
                q_num_heads: int(node, "q_num_heads").ok_or("q_num_heads is required")?,
                kv_num_heads: int(node, "kv_num_heads").ok_or("kv_num_heads is required")?,
                scale: match node.attrs.get("scale") {
                    Some(Attr::Float(v)) => *v as f32,
                    _ => 0.0,
                },
                update_rule: match node.attrs.get("update_rule") {
                    Some(Attr::String(s)) => s.clone(),
                    _ => "gated_delta".into(),
                },
            };
            let shape = |t: &Option<HostTensor>| t.as_ref().map(|t| t.shape.clone());
            let (ds, bs, ps) = (shape(&decay), shape(&beta), shape(&past));
            let p = attrs
                .plan(
                    [&q.shape, &k.shape, &v.shape],
                    ds.as_deref(),
                    bs.as_deref(),
                    ps.as_deref(),
                )
                .map_err(|e| RefError(e.to_string()))?;
            let wide =
                |t: &HostTensor| -> R<Vec<f64>> { Ok(cast(t, DType::F64)?.to_vec::<f64>()?) };
            let (qv, kv_, vv) = (wide(&q)?, wide(&k)?, wide(&v)?);
            let dv_ = match &decay {
                Some(t) if p.rule.gated() => wide(t)?,
                _ => Vec::new(),
            };
            let bv = match &beta {
                Some(t) if p.rule.delta() => wide(t)?,
                _ => Vec::new(),
            };
            let (hq, hkv, dk, dv) = (p.q_heads, p.kv_heads, p.dk, p.dv);
            let mut s = match &past {
                Some(t) => wide(t)?,
                None => vec![0.0; p.batch * hkv * dk * dv],
            };
            let mut out = vec![0.0; p.batch * p.steps * hq * dv];
            for b in 0..p.batch {
                for t in 0..p.steps {
                    let row = b * p.steps + t;
                    for h in 0..hkv {
                        let st = &mut s[(b * hkv + h) * dk * dv..][..dk * dv];
                        let kvr = row * hkv + h;
                        let e = |i: usize| match (p.rule.gated(), p.decay_per_key) {
                            (false, _) => 1.0,
                            (true, true) => dv_[kvr * dk + i].exp(),
                            (true, false) => dv_[kvr].exp(),
                        };
                        for i in 0..dk {
                            let ei = e(i);
                            st[i * dv..][..dv].iter_mut().for_each(|x| *x *= ei);
                        }
                        let key = &kv_[kvr * dk..][..dk];
                        let mut u: Vec<f64> = vv[kvr * dv..][..dv].to_vec();
                        if p.rule.delta() {
                            let rate = bv[if p.beta_per_head { kvr } else { row }];
                            for (j, uj) in u.iter_mut().enumerate() {
                                let recalled: f64 = (0..dk).map(|i| st[i * dv + j] * key[i]).sum();
                                *uj = rate * (*uj - recalled);
                            }
                        }
                        for i in 0..dk {
                            for j in 0..dv {
                                st[i * dv + j] += key[i] * u[j];
                            }
                        }
                        for g in 0..hq / hkv {
                            let qh = h * (hq / hkv) + g;
                            let query = &qv[(row * hq + qh) * dk..][..dk];
                            for j in 0..dv {
                                let o: f64 = (0..dk).map(|i| query[i] * st[i * dv + j]).sum();
                                out[(row * hq + qh) * dv + j] = f64::from(p.scale) * o;
                            }
                        }
                    }
                }
            }
            let state_dtype = past.as_ref().map_or(q.dtype, |t| t.dtype);
            let y = HostTensor::from_vec(vec![p.batch, p.steps, hq * dv], &out)?;
            let present = HostTensor::from_vec(vec![p.batch, hkv, dk, dv], &s)?;
            let mut outputs = vec![cast(&y, q.dtype)?, cast(&present, state_dtype)?];
            outputs.truncate(node.outputs.len().max(1));
            Ok(outputs)
        }
        "Gemm" => {
            let float = |name: &str, d: f64| match node.attrs.get(name) {
                Some(Attr::Float(v)) => *v,
                Some(Attr::Int(v)) => *v as f64,
                _ => d,
            };
            let t = |x: HostTensor, name: &str| -> R<HostTensor> {
                if int(node, name).unwrap_or(0) == 0 {
                    return Ok(x);
                }
                let b = bytes(&x)?.permuted_axes(IxDyn(&[1, 0, 2]));
                Ok(from_bytes(x.dtype, b))
            };
            let (x, y) = (t(a(0)?, "transA")?, t(a(1)?, "transB")?);
            let dtype = x.dtype;
            let scalar = |v: f64| cast(&HostTensor::from_vec(Vec::new(), &[v])?, dtype);
            let mm = Node::new("MatMul", "mm");
            let mut p = run_node(&mm, &[Some(x), Some(y)], env)?.remove(0);
            let alpha = float("alpha", 1.0);
            if alpha != 1.0 {
                p = elementwise("Mul", &[p, scalar(alpha)?])?;
            }
            if let Some(Some(c)) = args.get(2) {
                let beta = float("beta", 1.0);
                let c = if beta != 1.0 {
                    elementwise("Mul", &[c.clone(), scalar(beta)?])?
                } else {
                    c.clone()
                };
                p = elementwise("Add", &[p, c])?;
            }
            one(p)
        }
        // Index formulas from the spec (DCR: depth is (block row, block column, channel)).
        "DepthToSpace" | "SpaceToDepth" => {
            let x = a(0)?;
            let b = int(node, "blocksize").ok_or("blocksize needed")? as usize;
            let [n, c, h, w] = <[usize; 4]>::try_from(x.shape.as_slice())
                .map_err(|_| RefError::from("rank 4 needed"))?;
            let crd = matches!(node.attrs.get("mode"), Some(Attr::String(m)) if m == "CRD");
            let size = x.dtype.size();
            let at =
                |nn: usize, cc: usize, hh: usize, ww: usize, ch: usize, hs: usize, ws: usize| {
                    (((nn * ch + cc) * hs + hh) * ws + ww) * size
                };
            let (shape, mut data) = if op == "DepthToSpace" {
                (vec![n, c / (b * b), h * b, w * b], Vec::new())
            } else {
                (vec![n, c * b * b, h / b, w / b], Vec::new())
            };
            for nn in 0..n {
                for oc in 0..shape[1] {
                    for oh in 0..shape[2] {
                        for ow in 0..shape[3] {
                            let src = if op == "DepthToSpace" {
                                let (i, j) = (oh % b, ow % b);
                                let ic = if crd {
                                    oc * b * b + i * b + j
                                } else {
                                    (i * b + j) * shape[1] + oc
                                };
                                at(nn, ic, oh / b, ow / b, c, h, w)
                            } else {
                                let (blk, ic) = if crd {
                                    (oc % (b * b), oc / (b * b))
                                } else {
                                    (oc / c, oc % c)
                                };
                                let (i, j) = (blk / b, blk % b);
                                at(nn, ic, oh * b + i, ow * b + j, c, h, w)
                            };
                            data.extend_from_slice(&x.data[src..src + size]);
                        }
                    }
                }
            }
            one(HostTensor {
                dtype: x.dtype,
                shape,
                data,
            })
        }
        "Split" => {
            let x = a(0)?;
            let rank = x.shape.len() as i64;
            let k = checked_axis(node, "Split", 0, rank as usize)?;
            let dim = x.shape[k];
            let parts = node.outputs.len();
            let given = match idx(&args.get(1).cloned().flatten())? {
                Some(v) => Some(v),
                None => ints(node, "split"),
            };
            // Sizes that are not lengths, do not fill the axis or do not match the outputs
            // are refused, as the GPU's plan refuses them.
            if let Some(v) = &given {
                let sum = v.iter().try_fold(0i64, |s, &n| s.checked_add(n));
                if v.iter().any(|&n| n < 0) || sum != Some(dim as i64) || v.len() != parts {
                    return Err(format!(
                        "Split: split {v:?} does not cut axis {k} of {dim} into {parts} parts"
                    )
                    .into());
                }
            }
            let sizes: Vec<usize> = match given {
                Some(v) => v.iter().map(|&n| n as usize).collect(),
                None => {
                    let chunk = dim.div_ceil(parts.max(1));
                    (0..parts)
                        .map(|i| dim.saturating_sub(i * chunk).min(chunk))
                        .collect()
                }
            };
            let whole = bytes(&x)?;
            let mut start = 0;
            let mut outs = Vec::new();
            for n in sizes {
                let part = whole.slice_axis(Axis(k), ndarray::Slice::from(start..start + n));
                outs.push(from_bytes(x.dtype, part.to_owned()));
                start += n;
            }
            Ok(outs)
        }
        // start + i * delta in the inputs' type, for i below ceil((limit - start) / delta).
        "Range" => {
            let (s, l, d) = (a(0)?, a(1)?, a(2)?);
            let f = |t: &HostTensor| -> R<f64> {
                Ok(cast(t, DType::F64)?
                    .to_vec::<f64>()?
                    .first()
                    .copied()
                    .ok_or("scalar needed")?)
            };
            let (start, limit, delta) = (f(&s)?, f(&l)?, f(&d)?);
            if delta == 0.0 {
                return Err("Range: delta is 0".into());
            }
            let n = ((limit - start) / delta).ceil().max(0.0);
            if n > 1e9 {
                return Err(format!(
                    "Range: limit {limit}, start {start} and delta {delta} give {n} elements; at most 10^9"
                )
                .into());
            }
            let n = n as usize;
            let out = match s.dtype {
                DType::F32 => {
                    let (st, de) = (start as f32, delta as f32);
                    HostTensor::from_vec(
                        vec![n],
                        &(0..n).map(|i| st + i as f32 * de).collect::<Vec<_>>(),
                    )?
                }
                // Integers (and f64): exact in f64 below 2^53.
                _ => {
                    let v: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
                    cast(&HostTensor::from_vec(vec![n], &v)?, s.dtype)?
                }
            };
            one(out)
        }
        // Written from the spec: a stable sort of each line (largest first, or smallest),
        // ties by lower index, the first K kept.
        "TopK" => {
            let x = a(0)?;
            let k = cast(&a(1)?, DType::I64)?.to_vec::<i64>()?[0];
            let rank = x.shape.len() as i64;
            let ax = checked_axis(node, "TopK", -1, rank as usize)?;
            let largest = int(node, "largest").unwrap_or(1) != 0;
            let len = x.shape[ax];
            let k = usize::try_from(k)
                .ok()
                .filter(|&k| k <= len)
                .ok_or_else(|| format!("TopK: K is {k}; the axis holds {len}"))?;
            let inner: usize = x.shape[ax + 1..].iter().product();
            let outer: usize = x.shape[..ax].iter().product();
            // Values compared exactly: integers as i128, floats as f64.
            let keys: Vec<f64> = cast(&x, DType::F64)?.to_vec::<f64>()?;
            let exact: Option<Vec<i128>> = match x.dtype {
                DType::I64 => Some(x.to_vec::<i64>()?.into_iter().map(i128::from).collect()),
                DType::U64 => Some(x.to_vec::<u64>()?.into_iter().map(i128::from).collect()),
                _ => None,
            };
            let size = x.dtype.size();
            let (mut values, mut indices) = (vec![0u8; outer * k * inner * size], Vec::new());
            indices.resize(outer * k * inner, 0i64);
            for o in 0..outer {
                for p in 0..inner {
                    let at = |j: usize| (o * len + j) * inner + p;
                    let mut order: Vec<usize> = (0..len).collect();
                    order.sort_by(|&i, &j| {
                        let c = match &exact {
                            Some(e) => e[at(i)].cmp(&e[at(j)]),
                            // NaN above every number (any sign), -0 equal to 0, as onnxruntime.
                            None => {
                                let (a, b) = (keys[at(i)], keys[at(j)]);
                                match (a.is_nan(), b.is_nan()) {
                                    (false, false) => a.partial_cmp(&b).unwrap(),
                                    (x, y) => x.cmp(&y),
                                }
                            }
                        };
                        if largest {
                            c.reverse()
                        } else {
                            c
                        }
                    });
                    for (t, &j) in order.iter().take(k).enumerate() {
                        let dst = (o * k + t) * inner + p;
                        values[dst * size..(dst + 1) * size]
                            .copy_from_slice(&x.data[at(j) * size..(at(j) + 1) * size]);
                        indices[dst] = j as i64;
                    }
                }
            }
            let mut shape = x.shape.clone();
            shape[ax] = k;
            Ok(vec![
                HostTensor {
                    dtype: x.dtype,
                    shape: shape.clone(),
                    data: values,
                },
                HostTensor::from_vec(shape, &indices)?,
            ])
        }
        // Running sums (or products) in f64 for f64, in f32 for the other floats (rounded once
        // per element), wrapping for integers.
        "CumSum" | "CumProd" => {
            let product = node.op == "CumProd";
            let x = a(0)?;
            let axis = cast(&a(1)?, DType::I64)?.to_vec::<i64>()?[0];
            let rank = x.shape.len().max(1) as i64;
            let k = if axis < 0 { axis + rank } else { axis };
            if !(0..rank).contains(&k) {
                return Err(
                    format!("{}: axis {axis} is out of range for rank {rank}", node.op).into(),
                );
            }
            let k = k as usize;
            let len = x.shape.get(k).copied().unwrap_or(1);
            let inner: usize = x.shape.get(k + 1..).map_or(1, |s| s.iter().product());
            let (excl, rev) = (
                int(node, "exclusive").unwrap_or(0) != 0,
                int(node, "reverse").unwrap_or(0) != 0,
            );
            let order = |n: usize| -> Vec<usize> {
                if rev {
                    (0..n).rev().collect()
                } else {
                    (0..n).collect()
                }
            };
            macro_rules! run {
                ($v:expr, $zero:expr, $add:expr) => {{
                    let v = $v;
                    let mut out = v.clone();
                    let lines = v.len() / len.max(1);
                    for line in 0..lines {
                        let base = (line / inner) * len * inner + line % inner;
                        let mut acc = $zero;
                        for j in order(len) {
                            let i = base + j * inner;
                            if excl {
                                out[i] = acc;
                                acc = $add(acc, v[i]);
                            } else {
                                acc = $add(acc, v[i]);
                                out[i] = acc;
                            }
                        }
                    }
                    HostTensor::from_vec(x.shape.clone(), &out)?
                }};
            }
            let y = match (x.dtype, product) {
                (DType::I32, false) => run!(x.to_vec::<i32>()?, 0i32, i32::wrapping_add),
                (DType::I64, false) => run!(x.to_vec::<i64>()?, 0i64, i64::wrapping_add),
                (DType::U32, false) => run!(x.to_vec::<u32>()?, 0u32, u32::wrapping_add),
                (DType::U64, false) => run!(x.to_vec::<u64>()?, 0u64, u64::wrapping_add),
                (DType::F64, false) => run!(x.to_vec::<f64>()?, 0f64, |p: f64, q: f64| p + q),
                (DType::I32, true) => run!(x.to_vec::<i32>()?, 1i32, i32::wrapping_mul),
                (DType::I64, true) => run!(x.to_vec::<i64>()?, 1i64, i64::wrapping_mul),
                (DType::U32, true) => run!(x.to_vec::<u32>()?, 1u32, u32::wrapping_mul),
                (DType::U64, true) => run!(x.to_vec::<u64>()?, 1u64, u64::wrapping_mul),
                (DType::F64, true) => run!(x.to_vec::<f64>()?, 1f64, |p: f64, q: f64| p * q),
                (_, false) => {
                    let f = cast(&x, DType::F32)?.to_vec::<f32>()?;
                    let sums = run!(f, 0f32, |p: f32, q: f32| p + q);
                    cast(&sums, x.dtype)?
                }
                (_, true) => {
                    let f = cast(&x, DType::F32)?.to_vec::<f32>()?;
                    let products = run!(f, 1f32, |p: f32, q: f32| p * q);
                    cast(&products, x.dtype)?
                }
            };
            one(y)
        }
        // Written from the spec: out[outer, j..., inner] = data[outer, indices[j...], inner].
        "Gather" => {
            let x = a(0)?;
            let indices = cast(&a(1)?, DType::I64)?.to_vec::<i64>()?;
            let rank = x.shape.len() as i64;
            let axis = checked_axis(node, "Gather", 0, rank as usize)?;
            let dim = x.shape[axis] as i64;
            let inner: usize = x.shape[axis + 1..].iter().product();
            let outer: usize = x.shape[..axis].iter().product();
            let size = x.dtype.size();
            let mut data = Vec::with_capacity(outer * indices.len() * inner * size);
            for o in 0..outer {
                for &i in &indices {
                    if i < -dim || i >= dim {
                        return Err(format!("Gather index {i} out of range").into());
                    }
                    let i = (if i < 0 { i + dim } else { i }) as usize;
                    let start = ((o * dim as usize + i) * inner) * size;
                    data.extend_from_slice(&x.data[start..start + inner * size]);
                }
            }
            let mut shape = x.shape[..axis].to_vec();
            shape.extend_from_slice(&a(1)?.shape);
            shape.extend_from_slice(&x.shape[axis + 1..]);
            one(HostTensor {
                dtype: x.dtype,
                shape,
                data,
            })
        }
        // Written from the ONNX spec: out has the indices' shape; each position reads data at
        // that position with its coordinate along axis replaced by its index.
        "GatherElements" => {
            let x = a(0)?;
            let ind = a(1)?;
            let indices = cast(&ind, DType::I64)?.to_vec::<i64>()?;
            let rank = x.shape.len();
            if rank == 0 || ind.shape.len() != rank {
                return Err("GatherElements: data and indices of one rank (1 or more)".into());
            }
            let axis = checked_axis(node, "GatherElements", 0, rank)?;
            let mut strides = vec![1usize; rank];
            for k in (0..rank - 1).rev() {
                strides[k] = strides[k + 1] * x.shape[k + 1];
            }
            let size = x.dtype.size();
            let dim = x.shape[axis] as i64;
            let mut data = Vec::with_capacity(indices.len() * size);
            let mut at = vec![0usize; rank];
            for &i in &indices {
                if i < -dim || i >= dim {
                    return Err(format!("GatherElements index {i} out of range").into());
                }
                let mut source = 0;
                for k in 0..rank {
                    let c = if k == axis {
                        (if i < 0 { i + dim } else { i }) as usize
                    } else if at[k] < x.shape[k] {
                        at[k]
                    } else {
                        return Err("GatherElements: indices longer than data".into());
                    };
                    source += c * strides[k];
                }
                data.extend_from_slice(&x.data[source * size..][..size]);
                for k in (0..rank).rev() {
                    at[k] += 1;
                    if at[k] < ind.shape[k] {
                        break;
                    }
                    at[k] = 0;
                }
            }
            one(HostTensor::from_bytes(x.dtype, ind.shape.clone(), data)?)
        }
        // Written from the ONNX-ML spec and its reference implementation: the flat indices
        // pick elements of the last axis; out is x's shape with that axis their count ([1, n]
        // for 1-D x).
        "ai.onnx.ml.ArrayFeatureExtractor" => {
            let x = a(0)?;
            let y = a(1)?;
            if y.dtype != DType::I64 {
                return Err("ArrayFeatureExtractor indices must be i64".into());
            }
            let indices = y.to_vec::<i64>()?;
            let Some((&dim, outer)) = x.shape.split_last() else {
                return Err("ArrayFeatureExtractor on a scalar".into());
            };
            let size = x.dtype.size();
            let rows: usize = outer.iter().product();
            let mut data = Vec::with_capacity(rows * indices.len() * size);
            for r in 0..rows {
                for &i in &indices {
                    let d = dim as i64;
                    if i < -d || i >= d {
                        return Err(format!("ArrayFeatureExtractor index {i} out of range").into());
                    }
                    let i = (if i < 0 { i + d } else { i }) as usize;
                    let start = (r * dim + i) * size;
                    data.extend_from_slice(&x.data[start..start + size]);
                }
            }
            let shape = if outer.is_empty() {
                vec![1, indices.len()]
            } else {
                outer.iter().copied().chain([indices.len()]).collect()
            };
            one(HostTensor {
                dtype: x.dtype,
                shape,
                data,
            })
        }
        // The bins' bounds from the op's own plan (onnxruntime's arithmetic); each bin's
        // maximum here in f64 (exact for every float type), NaN winning, +0 above -0, the
        // winner's bits kept.
        "MaxRoiPool" => {
            let x = a(0)?;
            let rois = a(1)?;
            let pooled = ints(node, "pooled_shape").ok_or("MaxRoiPool needs pooled_shape")?;
            let scale = match node.attrs.get("spatial_scale") {
                None => 1.0,
                Some(Attr::Float(v)) => *v,
                Some(_) => return Err("MaxRoiPool spatial_scale must be a float".into()),
            };
            let table =
                crate::ops::roi_pool::roi_pool_windows((x.dtype, &x.shape), &rois, &pooled, scale)?;
            let (c, h, w) = (x.shape[1], x.shape[2], x.shape[3]);
            let (ph, pw) = (pooled[0] as usize, pooled[1] as usize);
            let values = crate::reference::cast_host(&x, DType::F64)?.to_vec::<f64>()?;
            let size = x.dtype.size();
            let r_count = rois.shape[0];
            let mut data = Vec::with_capacity(r_count * c * ph * pw * size);
            let wins = |v: f64, best: f64| {
                !best.is_nan()
                    && (v.is_nan()
                        || v > best
                        || (v == 0.0
                            && best == 0.0
                            && v.is_sign_positive()
                            && best.is_sign_negative()))
            };
            for row in table.chunks_exact(1 + 2 * (ph + pw)) {
                let b = row[0] as usize;
                for ch in 0..c {
                    for i in 0..ph {
                        for j in 0..pw {
                            let (h0, h1) = (row[1 + 2 * i] as usize, row[2 + 2 * i] as usize);
                            let (w0, w1) = (
                                row[1 + 2 * ph + 2 * j] as usize,
                                row[2 + 2 * ph + 2 * j] as usize,
                            );
                            let mut best: Option<usize> = None;
                            for hh in h0..h1 {
                                for ww in w0..w1 {
                                    let k = ((b * c + ch) * h + hh) * w + ww;
                                    if best.is_none_or(|at| wins(values[k], values[at])) {
                                        best = Some(k);
                                    }
                                }
                            }
                            match best {
                                Some(k) => data.extend_from_slice(&x.data[k * size..][..size]),
                                None => data.extend(std::iter::repeat_n(0u8, size)),
                            }
                        }
                    }
                }
            }
            one(HostTensor::from_bytes(
                x.dtype,
                vec![r_count, c, ph, pw],
                data,
            )?)
        }
        // Written from the ONNX-ML spec and onnxruntime's kernel: each input as rows ([C] is
        // one row, higher ranks N rows of the rest), cut or zero-padded to its width, in f32.
        "ai.onnx.ml.FeatureVectorizer" => {
            let dims =
                ints(node, "inputdimensions").ok_or("FeatureVectorizer needs inputdimensions")?;
            if dims.len() != args.len() || dims.iter().any(|&d| d < 0) {
                return Err("FeatureVectorizer needs one width of 0 or more per input".into());
            }
            let mut rows: Option<usize> = None;
            let mut parts = Vec::new();
            for k in 0..args.len() {
                let x = a(k)?;
                if !matches!(x.dtype, DType::F32 | DType::F64 | DType::I32 | DType::I64) {
                    return Err(format!("FeatureVectorizer input {k} is {}", x.dtype).into());
                }
                if x.dtype != a(0)?.dtype {
                    return Err("FeatureVectorizer inputs of different types".into());
                }
                let (n, width) = match x.shape.as_slice() {
                    [] => return Err("FeatureVectorizer input of rank 0".into()),
                    [c] => (1, *c),
                    [n, rest @ ..] => (*n, rest.iter().product()),
                };
                if *rows.get_or_insert(n) != n {
                    return Err("FeatureVectorizer inputs with different row counts".into());
                }
                let values = crate::reference::numeric::cast_mode(
                    &x,
                    DType::F32,
                    crate::CastMode::default(),
                )?
                .to_vec::<f32>()?;
                parts.push((values, width));
            }
            let n = rows.unwrap_or(0);
            let total: usize = dims.iter().map(|&d| d as usize).sum();
            let mut data = Vec::with_capacity(n * total);
            for r in 0..n {
                for ((values, width), &d) in parts.iter().zip(&dims) {
                    let row = &values[r * width..(r + 1) * width];
                    data.extend((0..d as usize).map(|j| row.get(j).copied().unwrap_or(0.0)));
                }
            }
            one(HostTensor::from_vec(vec![n, total], &data)?)
        }
        "ArgMax" | "ArgMin" => {
            let x = a(0)?;
            let axes = crate::ops::reduce::normalize_axes(
                "reference",
                x.shape.len(),
                &[int(node, "axis").unwrap_or(0)],
            )?;
            let last = if int(node, "select_last_index").unwrap_or(0) != 0 {
                "Last"
            } else {
                ""
            };
            let keep = int(node, "keepdims").unwrap_or(1) != 0;
            one(reduce(&format!("{op}{last}"), &x, &axes, keep)?)
        }
        "Scan" => scan(node, args, env),
        "If" => {
            let branch = crate::graph::control::branch(node, &a(0)?)?;
            run_graph(branch, &[], env)
        }
        "Loop" => run_loop(node, args, env),
        other => Err(format!("the reference has no op {other}").into()),
    }
}

/// ONNX Loop: while the trip count (where given) and the condition allow, run the body on the
/// iteration number, the condition and the loop-carried values; stack each scan output's
/// elements along a new first axis. The condition starts true where `cond` is left out, and
/// the body's condition output always ends the loop, as in onnxruntime.
fn run_loop(
    node: &Node,
    args: &[Option<HostTensor>],
    env: &HashMap<String, HostTensor>,
) -> R<Vec<HostTensor>> {
    let (body, n, k) = crate::graph::control::loop_body(node)?;
    let m = match args.first().cloned().flatten() {
        Some(t) => Some(t.to_vec::<i64>()?.first().copied().ok_or("M is empty")?),
        None => None,
    };
    let cond = args
        .get(1)
        .cloned()
        .flatten()
        .map(|t| t.data.first() == Some(&1));
    if m.is_none() && cond != Some(false) && crate::graph::control::condition_stays(body) {
        return Err(
            "Loop: M is left out and the condition stays true, so the loop would not end".into(),
        );
    }
    let mut going = cond.unwrap_or(true);
    let mut carried: Vec<HostTensor> = args[2..]
        .iter()
        .map(|a| a.clone().ok_or_else(|| RefError::from("missing input")))
        .collect::<R<_>>()?;
    let mut collected: Vec<Vec<HostTensor>> = vec![Vec::new(); k];
    let mut t = 0i64;
    while going && m.is_none_or(|m| t < m) {
        let mut inputs = vec![
            (
                body.inputs[0].name.clone(),
                HostTensor::from_vec(vec![], &[t])?,
            ),
            (
                body.inputs[1].name.clone(),
                HostTensor::from_vec(vec![], &[going])?,
            ),
        ];
        for (decl, v) in body.inputs[2..].iter().zip(&carried) {
            inputs.push((decl.name.clone(), v.clone()));
        }
        let outs = run_graph(body, &inputs, env)?;
        going = outs[0].data.first() == Some(&1);
        carried = outs[1..=n].to_vec();
        for (q, o) in outs[n + 1..].iter().enumerate() {
            collected[q].push(o.clone());
        }
        t += 1;
    }
    let mut results = carried;
    for (q, items) in collected.into_iter().enumerate() {
        let stacked = match items.first() {
            None => {
                let decl = &body.outputs[n + 1 + q];
                let mut shape = vec![0];
                shape.extend(
                    decl.shape
                        .clone()
                        .ok_or("undeclared shape")?
                        .into_iter()
                        .map(|d| d.unwrap_or(0)),
                );
                let dtype = decl.dtype.ok_or("undeclared dtype")?;
                HostTensor::from_bytes(dtype, shape, Vec::new())?
            }
            Some(first) => {
                let rows: Vec<ArrayD<u8>> = items
                    .iter()
                    .map(|o| Ok(bytes(o)?.insert_axis(Axis(0))))
                    .collect::<R<_>>()?;
                let views: Vec<_> = rows.iter().map(|r| r.view()).collect();
                from_bytes(first.dtype, concatenate(Axis(0), &views)?)
            }
        };
        results.push(stacked);
    }
    Ok(results)
}

/// ONNX Scan, following the spec's pseudo-code.
fn scan(
    node: &Node,
    args: &[Option<HostTensor>],
    env: &HashMap<String, HostTensor>,
) -> R<Vec<HostTensor>> {
    let Some(Attr::Graph(body)) = node.attrs.get("body") else {
        return Err("Scan needs a body".into());
    };
    let m = int(node, "num_scan_inputs").ok_or("num_scan_inputs")? as usize;
    let vals: Vec<HostTensor> = args
        .iter()
        .map(|a| a.clone().ok_or_else(|| RefError::from("missing input")))
        .collect::<R<_>>()?;
    let n = vals.len() - m;
    let k = body.outputs.len() - n;
    let norm = |a: i64, r: usize| {
        if a < 0 {
            (a + r as i64) as usize
        } else {
            a as usize
        }
    };
    let in_axes: Vec<usize> = (0..m)
        .map(|j| {
            norm(
                ints(node, "scan_input_axes").map_or(0, |v| v[j]),
                vals[n + j].shape.len(),
            )
        })
        .collect();
    let in_dirs: Vec<i64> = (0..m)
        .map(|j| ints(node, "scan_input_directions").map_or(0, |v| v[j]))
        .collect();
    let out_axes_raw: Vec<i64> = (0..k)
        .map(|q| ints(node, "scan_output_axes").map_or(0, |v| v[q]))
        .collect();
    let out_dirs: Vec<i64> = (0..k)
        .map(|q| ints(node, "scan_output_directions").map_or(0, |v| v[q]))
        .collect();
    let seq = vals[n].shape[in_axes[0]];
    let mut states: Vec<HostTensor> = vals[..n].to_vec();
    let mut collected: Vec<Vec<HostTensor>> = vec![Vec::new(); k];
    for t in 0..seq {
        let mut inputs: Vec<(String, HostTensor)> = Vec::new();
        for (i, s) in states.iter().enumerate() {
            inputs.push((body.inputs[i].name.clone(), s.clone()));
        }
        for j in 0..m {
            let x = &vals[n + j];
            let tt = if in_dirs[j] == 1 { seq - 1 - t } else { t };
            let elem = bytes(x)?.index_axis(Axis(in_axes[j]), tt).to_owned();
            inputs.push((body.inputs[n + j].name.clone(), from_bytes(x.dtype, elem)));
        }
        let outs = run_graph(body, &inputs, env)?;
        states = outs[..n].to_vec();
        for (q, o) in outs[n..].iter().enumerate() {
            collected[q].push(o.clone());
        }
    }
    let mut results = states;
    for q in 0..k {
        let (dtype, elem_shape) = match collected[q].first() {
            Some(o) => (o.dtype, o.shape.clone()),
            None => {
                let o = &body.outputs[n + q];
                (
                    o.dtype.ok_or("undeclared dtype")?,
                    o.shape
                        .clone()
                        .ok_or("undeclared shape")?
                        .into_iter()
                        .map(|d| d.unwrap_or(0))
                        .collect(),
                )
            }
        };
        let axis = norm(out_axes_raw[q], elem_shape.len() + 1);
        let mut items: Vec<ArrayD<u8>> = collected[q]
            .iter()
            .map(|o| Ok(bytes(o)?.insert_axis(Axis(axis))))
            .collect::<R<_>>()?;
        if out_dirs[q] == 1 {
            items.reverse();
        }
        let mut shape = elem_shape.clone();
        shape.insert(axis, 0);
        shape.push(dtype.size());
        let stacked = if items.is_empty() {
            ArrayD::from_shape_vec(IxDyn(&shape), vec![])?
        } else {
            let views: Vec<_> = items.iter().map(|x| x.view()).collect();
            concatenate(Axis(axis), &views)?
        };
        results.push(from_bytes(dtype, stacked));
    }
    Ok(results)
}

/// `x` broadcast to `shape` (numpy's rule).
fn expand_to(x: &HostTensor, shape: &[usize]) -> R<HostTensor> {
    let size = x.dtype.size();
    let mut src_shape = vec![1; shape.len() - x.shape.len()];
    src_shape.extend(&x.shape);
    src_shape.push(size);
    let mut byte_shape = shape.to_vec();
    byte_shape.push(size);
    let src = ArrayD::from_shape_vec(IxDyn(&src_shape), x.data.clone())?;
    let out = src
        .broadcast(IxDyn(&byte_shape))
        .ok_or("shapes do not broadcast")?
        .to_owned();
    Ok(from_bytes(x.dtype, out))
}

/// Shrink and PRelu on integers, as the GPU computes them: Shrink in f32 (onnxruntime's
/// arithmetic), truncated toward zero and wrapped to the type (through i32 for the 8- and
/// 16-bit types, i64 for the others); PRelu as a wrapping product of x and its slope where x
/// is negative.
fn integer_activation(
    op: &str,
    x: &HostTensor,
    slope: Option<HostTensor>,
    attr: &dyn Fn(&str) -> f64,
) -> R<HostTensor> {
    let dtype = x.dtype;
    let wide = if op == "Shrink" {
        let (bias, lambd) = (attr("bias") as f32, attr("lambd") as f32);
        let xs = cast(x, DType::F32)?.to_vec::<f32>()?;
        let ys: Vec<i64> = xs
            .iter()
            .map(|&v| {
                let y = if v < -lambd {
                    v + bias
                } else if v > lambd {
                    v - bias
                } else {
                    0.0
                };
                if dtype.size() <= 2 {
                    i64::from(y as i32)
                } else {
                    y as i64
                }
            })
            .collect();
        HostTensor::from_vec(x.shape.clone(), &ys)?
    } else {
        let unsigned = matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64);
        let Some(slope) = slope.filter(|_| !unsigned) else {
            return Ok(x.clone());
        };
        let xs = cast(x, DType::I64)?;
        let ws = cast(&slope, DType::I64)?.to_vec::<i64>()?;
        let ys: Vec<i64> = xs
            .to_vec::<i64>()?
            .iter()
            .zip(&ws)
            .map(|(&v, &w)| if v < 0 { v.wrapping_mul(w) } else { v })
            .collect();
        HostTensor::from_vec(x.shape.clone(), &ys)?
    };
    cast(&wide, dtype)
}
