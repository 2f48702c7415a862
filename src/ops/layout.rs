//! ONNX layout ops: Identity, Reshape, Squeeze, Unsqueeze, Flatten (views, no copy), Transpose,
//! Expand and Concat (strided gathers).

use crate::host::c_strides;
use crate::kernels::block_remap::{CopyDim, CopyPiece};
use crate::kernels::concat::Direction;
use crate::kernels::gather::{AxisSlice, GatherDim, GatherPlan};
use crate::kernels::pad::{PadAxis, PadMode};
use crate::ops::slicing::SlicePlan;
use crate::recorder::IndexRule;
use crate::storage::padded_size;
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

/// ONNX Reshape's output shape: 0 copies the input dim (unless `allowzero`), -1 is inferred.
pub fn reshape_shape(input: &[usize], shape: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    const OP: &str = "Reshape";
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            -1 => {
                return Err(Error::invalid(
                    OP,
                    "shape",
                    format!("shape[{i}] is a second -1; at most one dimension is inferred"),
                ))
            }
            0 if !allowzero => match input.get(i) {
                Some(&d) => out.push(d),
                None => {
                    return Err(Error::invalid(
                        OP,
                        "shape",
                        format!("shape[{i}] is 0 (copy) but data has rank {}", input.len()),
                    ))
                }
            },
            d if d >= 0 => out.push(d as usize),
            d => {
                return Err(Error::invalid(
                    OP,
                    "shape",
                    format!("shape[{i}] is {d}; dimensions must be -1 or more"),
                ))
            }
        }
    }
    let n: usize = input.iter().product();
    let known: usize = out.iter().product();
    if let Some(i) = infer {
        if known == 0 || !n.is_multiple_of(known) {
            return Err(Error::invalid(
                OP,
                "shape",
                format!("shape {shape:?} cannot hold the {n} elements of {input:?}"),
            ));
        }
        out[i] = n / known;
    } else if known != n {
        return Err(Error::invalid(
            OP,
            "shape",
            format!("shape {shape:?} holds {known} elements but data {input:?} has {n}"),
        ));
    }
    Ok(out)
}

/// `axis` of a rank-`rank` tensor made non-negative, or an error naming `input`.
fn normalize_axis(op: &'static str, input: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if (-r..r).contains(&axis) {
        Ok(if axis < 0 { axis + r } else { axis } as usize)
    } else {
        Err(Error::invalid(
            op,
            input,
            format!("axis {axis} is outside [-{r}, {r}) for rank {rank}"),
        ))
    }
}

/// ONNX Squeeze's output shape: the listed axes (each of size 1) removed, or every axis of
/// size 1 when `axes` is `None`.
pub fn squeeze_shape(input: &[usize], axes: Option<&[i64]>) -> Result<Vec<usize>> {
    const OP: &str = "Squeeze";
    let Some(axes) = axes else {
        return Ok(input.iter().copied().filter(|&d| d != 1).collect());
    };
    let mut drop = vec![false; input.len()];
    for &a in axes {
        let k = normalize_axis(OP, "axes", a, input.len())?;
        if std::mem::replace(&mut drop[k], true) {
            return Err(Error::invalid(
                OP,
                "axes",
                format!("axis {a} is listed twice"),
            ));
        }
        if input[k] != 1 {
            return Err(Error::invalid(
                OP,
                "axes",
                format!("axis {a} has size {}, not 1, in {input:?}", input[k]),
            ));
        }
    }
    Ok(input
        .iter()
        .zip(&drop)
        .filter(|(_, &d)| !d)
        .map(|(&n, _)| n)
        .collect())
}

/// ONNX Unsqueeze's output shape: axes of size 1 inserted at `axes` of the output.
pub fn unsqueeze_shape(input: &[usize], axes: &[i64]) -> Result<Vec<usize>> {
    const OP: &str = "Unsqueeze";
    let rank = input.len() + axes.len();
    let mut inserted = vec![false; rank];
    for &a in axes {
        let k = normalize_axis(OP, "axes", a, rank)?;
        if std::mem::replace(&mut inserted[k], true) {
            return Err(Error::invalid(
                OP,
                "axes",
                format!("axis {a} is listed twice"),
            ));
        }
    }
    let mut dims = input.iter();
    Ok(inserted
        .iter()
        .map(|&new| {
            if new {
                1
            } else {
                *dims.next().expect("rank adds up")
            }
        })
        .collect())
}

/// ONNX Flatten's output shape: the axes before `axis` and those from it, each multiplied out.
pub fn flatten_shape(input: &[usize], axis: i64) -> Result<Vec<usize>> {
    let r = input.len() as i64;
    if !(-r..=r).contains(&axis) {
        return Err(Error::invalid(
            "Flatten",
            "axis",
            format!("axis {axis} is outside [-{r}, {r}] for rank {r}"),
        ));
    }
    let split = if axis < 0 { axis + r } else { axis } as usize;
    Ok(vec![
        input[..split].iter().product(),
        input[split..].iter().product(),
    ])
}

/// ONNX Expand's gather: the input broadcast against `shape` (which may also be smaller, or
/// hold 1s where the input is larger); broadcast axes read with step 0.
pub fn expand_plan(input: &[usize], shape: &[i64]) -> Result<(Vec<usize>, GatherPlan)> {
    const OP: &str = "Expand";
    let wanted: Vec<usize> = shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                Error::invalid(
                    OP,
                    "shape",
                    format!("shape {shape:?} has a negative dimension"),
                )
            })
        })
        .collect::<Result<_>>()?;
    let out = super::broadcast_shape(OP, input, &wanted).map_err(|_| {
        Error::invalid(
            OP,
            "shape",
            format!("data of shape {input:?} does not broadcast to {shape:?}"),
        )
    })?;
    let strides = c_strides(input);
    let lead = out.len() - input.len();
    let dims: Vec<GatherDim> = out
        .iter()
        .enumerate()
        .map(|(k, &len)| {
            let step = match k.checked_sub(lead) {
                Some(i) if input[i] == len => strides[i] as i64,
                _ => 0,
            };
            GatherDim {
                len: len as u64,
                step,
            }
        })
        .collect();
    Ok((out, GatherPlan::from_dims(0, &dims)))
}

/// ONNX Transpose's gather: output axis `k` walks input axis `perm[k]`.
pub fn transpose_plan(input: &[usize], perm: Option<&[i64]>) -> Result<(Vec<usize>, GatherPlan)> {
    const OP: &str = "Transpose";
    let r = input.len();
    let perm: Vec<usize> = match perm {
        None => (0..r).rev().collect(),
        Some(p) => {
            let mut seen = vec![false; r];
            if p.len() != r {
                return Err(Error::invalid(
                    OP,
                    "perm",
                    format!("perm has {} values but data has rank {r}", p.len()),
                ));
            }
            p.iter()
                .enumerate()
                .map(|(i, &a)| {
                    let ok = (0..r as i64).contains(&a)
                        && !std::mem::replace(&mut seen[a as usize], true);
                    if ok {
                        Ok(a as usize)
                    } else {
                        Err(Error::invalid(
                            OP,
                            "perm",
                            format!("perm {p:?} is not a permutation of 0..{r} (perm[{i}] = {a})"),
                        ))
                    }
                })
                .collect::<Result<_>>()?
        }
    };
    let strides = c_strides(input);
    let shape: Vec<usize> = perm.iter().map(|&a| input[a]).collect();
    let dims: Vec<GatherDim> = perm
        .iter()
        .map(|&a| GatherDim {
            len: input[a] as u64,
            step: strides[a] as i64,
        })
        .collect();
    Ok((shape, GatherPlan::from_dims(0, &dims)))
}

impl Recorder {
    /// Records ONNX Transpose (`perm` `None`: reverse the axes).
    pub fn transpose(&mut self, data: &Tensor, perm: Option<&[i64]>) -> Result<Tensor> {
        self.transpose_to(data, perm, Out::NEW)
    }

    /// Records ONNX Transpose into `out`: the op's one recording path.
    pub fn transpose_to(
        &mut self,
        data: &Tensor,
        perm: Option<&[i64]>,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("Transpose", &[("data", data)])?;
        super::check_rank("Transpose", data.shape())?;
        let (shape, plan) = transpose_plan(data.shape(), perm)?;
        // Where the axes of more than one element keep their order, only axes of size 1 move
        // ([1, T, H, D] to [T, 1, H, D]: a batch of one laid out for a Scan over T) and no
        // element does: the same bytes, viewed.
        let order: Vec<usize> = match perm {
            Some(p) => p.iter().map(|&a| a as usize).collect(),
            None => (0..shape.len()).rev().collect(),
        };
        let moved: Vec<usize> = order
            .into_iter()
            .filter(|&a| data.shape()[a] != 1)
            .collect();
        if moved.is_sorted() {
            return out.view(self, data.reshaped(&shape)?);
        }
        let out = out.tensor(self, data.dtype(), &shape)?;
        self.gather_into("Transpose", data, &plan, &out)?;
        Ok(out)
    }

    /// Records ONNX Reshape (a view, no copy; copied when `out` names a tensor).
    pub fn reshape_to(
        &mut self,
        data: &Tensor,
        shape: &[i64],
        allowzero: bool,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("Reshape", &[("data", data)])?;
        let shape = reshape_shape(data.shape(), shape, allowzero)?;
        out.view(self, data.reshaped(&shape)?)
    }

    /// Records ONNX Squeeze (a view; `axes` `None`: every axis of size 1).
    pub fn squeeze_to(&mut self, data: &Tensor, axes: Option<&[i64]>, out: Out) -> Result<Tensor> {
        self.check_inputs("Squeeze", &[("data", data)])?;
        let shape = squeeze_shape(data.shape(), axes)?;
        out.view(self, data.reshaped(&shape)?)
    }

    /// Records ONNX Unsqueeze (a view).
    pub fn unsqueeze_to(&mut self, data: &Tensor, axes: &[i64], out: Out) -> Result<Tensor> {
        self.check_inputs("Unsqueeze", &[("data", data)])?;
        let shape = unsqueeze_shape(data.shape(), axes)?;
        out.view(self, data.reshaped(&shape)?)
    }

    /// Records ONNX Flatten (a view).
    pub fn flatten_to(&mut self, data: &Tensor, axis: i64, out: Out) -> Result<Tensor> {
        self.check_inputs("Flatten", &[("data", data)])?;
        let shape = flatten_shape(data.shape(), axis)?;
        out.view(self, data.reshaped(&shape)?)
    }

    /// Records ONNX Expand: `data` broadcast to `shape` (a gather; every dtype).
    pub fn expand_to(&mut self, data: &Tensor, shape: &[i64], out: Out) -> Result<Tensor> {
        self.check_inputs("Expand", &[("data", data)])?;
        super::check_rank("Expand", data.shape())?;
        let (shape, plan) = expand_plan(data.shape(), shape)?;
        super::check_rank("Expand", &shape)?;
        if shape == data.shape() {
            // Nothing to broadcast (Attention's grouped heads when there is one query head
            // per key head): the input itself, as Identity gives it.
            return out.view(self, data.clone());
        }
        let out = out.tensor(self, data.dtype(), &shape)?;
        self.gather_into("Expand", data, &plan, &out)?;
        Ok(out)
    }

    /// Records ONNX Tile: `data` repeated `repeats[k]` times along each axis k, as a broadcast
    /// (Expand's gather) of `data` viewed with an axis of size 1 before each repeated axis,
    /// expanded to the repeats there: `[r, d]` read back as `[r * d]`.
    pub fn tile_to(&mut self, data: &Tensor, repeats: &[i64], out: Out) -> Result<Tensor> {
        self.check_inputs("Tile", &[("input", data)])?;
        if repeats.len() != data.rank() {
            return Err(Error::invalid(
                "Tile",
                "repeats",
                format!(
                    "has {} values but the input has rank {}",
                    repeats.len(),
                    data.rank()
                ),
            ));
        }
        let (mut source, mut target, mut tiled) = (Vec::new(), Vec::new(), Vec::new());
        for (&d, &r) in data.shape().iter().zip(repeats) {
            let r = usize::try_from(r).map_err(|_| {
                Error::invalid(
                    "Tile",
                    "repeats",
                    format!("{r} is negative; repeats must be 0 or more"),
                )
            })?;
            let len = d
                .checked_mul(r)
                .ok_or_else(|| Error::invalid("Tile", "repeats", "the output's size overflows"))?;
            if r != 1 && d != 1 {
                source.push(1);
                target.push(r as i64);
            }
            source.push(d);
            target.push((if d == 1 { r } else { d }) as i64);
            tiled.push(len);
        }
        // Each axis both repeated and longer than 1 takes a second axis in the broadcast.
        super::check_rank("Tile", &source)?;
        let broadcast = self.expand_to(&data.reshaped(&source)?, &target, Out::NEW)?;
        out.view(self, broadcast.reshaped(&tiled)?)
    }

    /// Records ONNX GatherElements: `out` has the indices' shape and reads, at each position,
    /// `data` at that position with the coordinate along `axis` replaced by the index there.
    /// The indices may be shorter than `data` along the other axes (then `data` is first cut to
    /// their extents, as onnxruntime reads it), not longer. An index out of range that is known
    /// on the host is an error; one computed on the GPU gives a zero element.
    pub fn gather_elements_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        axis: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "GatherElements";
        self.check_inputs(OP, &[("data", data), ("indices", indices)])?;
        super::check_index_dtype(OP, indices)?;
        let (shape, wanted) = (data.shape(), indices.shape());
        let axis = super::elements_axis(OP, shape, wanted, axis)?;
        let out = out.tensor(self, data.dtype(), wanted)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        if shape[axis] == 0 {
            return Err(Error::invalid(
                OP,
                "indices",
                format!("data's axis {axis} is empty: there is nothing to gather"),
            ));
        }
        // Data cut to the indices' extents off the axis (a view when nothing is cut).
        let mut cut = shape.to_vec();
        for (k, c) in cut.iter_mut().enumerate() {
            if k != axis {
                *c = wanted[k];
            }
        }
        let data = if cut == shape {
            data.clone()
        } else {
            let plan = SlicePlan {
                input_shape: shape.to_vec(),
                axes: cut.iter().map(|&len| AxisSlice::full(len)).collect(),
                output_shape: cut.clone(),
            };
            self.apply_slice(OP, data, &plan, Out::NEW)?
        };
        let inner: usize = cut[axis + 1..].iter().product();
        let rule = IndexRule::Axis {
            axis,
            len: cut[axis],
        };
        self.gather_index_into(
            OP,
            &data,
            indices,
            cut[axis],
            inner,
            Some(wanted[axis]),
            rule,
            &out,
        )?;
        Ok(out)
    }

    /// Records ONNX Pad: `pads` holds the elements added before each axis (of `axes`, else
    /// of every axis), then those after; negative ones crop first, and the padding is then
    /// relative to what is left (as onnxruntime does). Reflect mode reflects again where the
    /// pads pass the axis' far end (as the spec's example does; onnxruntime refuses pads beyond
    /// the axis' length less one). `value` is the constant of constant
    /// mode (a scalar of the data's dtype; zero when absent). One pass: each output element
    /// reads its input element or is the constant.
    pub fn pad_to(
        &mut self,
        data: &Tensor,
        pads: &[i64],
        mode: PadMode,
        value: Option<&HostTensor>,
        axes: Option<&[i64]>,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Pad";
        self.check_inputs(OP, &[("data", data)])?;
        // The kernel's parameters hold each axis, up to MAX_RANK of them.
        super::check_rank(OP, data.shape())?;
        let rank = data.rank();
        let axes = super::distinct_axes(OP, rank, axes)?;
        if pads.len() != 2 * axes.len() {
            return Err(Error::invalid(
                OP,
                "pads",
                format!(
                    "has {} values; it needs 2 per padded axis ({})",
                    pads.len(),
                    2 * axes.len()
                ),
            ));
        }
        let value: u64 = match value.filter(|_| mode == PadMode::Constant) {
            None => 0,
            Some(v) if v.dtype != data.dtype() || v.numel() != 1 => {
                return Err(Error::invalid(
                    OP,
                    "constant_value",
                    format!(
                        "is {} {:?}; it must be one {} value, the data's type",
                        v.dtype,
                        v.shape,
                        data.dtype()
                    ),
                ))
            }
            Some(v) => {
                let mut bits = [0u8; 8];
                bits[..v.data.len()].copy_from_slice(&v.data);
                u64::from_le_bytes(bits)
            }
        };
        let mut plan: Vec<PadAxis> = data
            .shape()
            .iter()
            .map(|&d| PadAxis {
                out_len: d,
                len: d,
                before: 0,
                crop: 0,
            })
            .collect();
        for (j, &k) in axes.iter().enumerate() {
            let (b, e) = (pads[j], pads[j + axes.len()]);
            let dim = plan[k].len;
            let crop = b.min(0).unsigned_abs() + e.min(0).unsigned_abs();
            let (before, after) = (b.max(0) as u64, e.max(0) as u64);
            let Some(len) = (dim as u64).checked_sub(crop) else {
                // In constant mode onnxruntime takes output element j from input element
                // j - b: a crop past the data (into the other side's padding) leaves
                // constants, as long as something remains.
                let out_len = (dim as i128) + i128::from(b) + i128::from(e);
                if mode != PadMode::Constant || out_len < 0 {
                    return Err(Error::invalid(
                        OP,
                        "pads",
                        format!("pads {b} and {e} crop axis {k} by more than its {dim} elements"),
                    ));
                }
                plan[k] = PadAxis {
                    out_len: usize::try_from(out_len)
                        .map_err(|_| Error::invalid(OP, "pads", "the output's size overflows"))?,
                    len: 0,
                    before: before as usize,
                    crop: (b.min(0).unsigned_abs() as usize).min(dim),
                };
                continue;
            };
            let len = len as usize;
            let padded = before > 0 || after > 0;
            let rule = match mode {
                PadMode::Reflect if padded && len < 2 => Some(format!(
                    "reflect mode cannot pad axis {k}: it holds {len} elements after cropping, and reflecting needs 2 or more"
                )),
                PadMode::Edge | PadMode::Wrap if padded && len == 0 => Some(format!(
                    "{} mode cannot pad axis {k}: it is empty after cropping",
                    mode.name()
                )),
                _ => None,
            };
            if let Some(rule) = rule {
                return Err(Error::invalid(OP, "pads", rule));
            }
            let out_len = (len as u64)
                .checked_add(before + after)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| Error::invalid(OP, "pads", "the output's size overflows"))?;
            plan[k] = PadAxis {
                out_len,
                len,
                before: before as usize,
                crop: b.min(0).unsigned_abs() as usize,
            };
        }
        let shape: Vec<usize> = plan.iter().map(|a| a.out_len).collect();
        // Nothing added or cropped: every axis keeps its length (an end crop shortens `len`
        // and `out_len` alike, so they are compared with the data's length).
        if plan
            .iter()
            .zip(data.shape())
            .all(|(a, &d)| a.before == 0 && a.crop == 0 && a.out_len == d)
        {
            return out.view(self, data.clone());
        }
        let out = out.tensor(self, data.dtype(), &shape)?;
        self.pad_into(OP, data, &plan, mode, value, &out)?;
        Ok(out)
    }

    /// Records ONNX Identity (a view, no copy; copied when `out` names a tensor).
    pub fn identity_to(&mut self, input: &Tensor, out: Out) -> Result<Tensor> {
        self.check_inputs("Identity", &[("input", input)])?;
        out.view(self, input.clone())
    }

    /// Records ONNX Concat of `inputs` along `axis` (4- and 8-byte dtypes).
    pub fn concat(&mut self, inputs: &[Tensor], axis: i64) -> Result<Tensor> {
        self.concat_to(inputs, axis, Out::NEW)
    }

    /// Records ONNX Concat into `out`: the op's one recording path.
    pub fn concat_to(&mut self, inputs: &[Tensor], axis: i64, out: Out) -> Result<Tensor> {
        for t in inputs {
            self.check_inputs("Concat", &[("inputs", t)])?;
        }
        let shape = concat_shape(inputs, axis)?;
        if let [only] = inputs {
            // One input is the result as it is (a recurrent layer's one direction): a view.
            return out.view(self, only.clone());
        }
        let out = out.tensor(self, inputs[0].dtype(), &shape)?;
        self.concat_into(inputs, axis, &out)?;
        Ok(out)
    }

    /// Concat along `axis` as: every input transposed to put `axis` first, the results
    /// concatenated along axis 0 (buffer copies), and that transposed back into `out`.
    fn concat_axis_first(&mut self, inputs: &[Tensor], axis: usize, out: &Tensor) -> Result<()> {
        let rank = out.rank();
        let perm: Vec<i64> = std::iter::once(axis)
            .chain((0..rank).filter(|&k| k != axis))
            .map(|k| k as i64)
            .collect();
        let mut moved = Vec::with_capacity(inputs.len());
        for t in inputs {
            let (shape, plan) = transpose_plan(t.shape(), Some(&perm))?;
            let m = self.alloc(t.dtype(), &shape)?;
            self.gather_into("Concat", t, &plan, &m)?;
            moved.push(m);
        }
        let (first_shape, _) = transpose_plan(out.shape(), Some(&perm))?;
        let joined = self.alloc(out.dtype(), &first_shape)?;
        self.concat_into(&moved, 0, &joined)?;
        let mut back = vec![0i64; rank];
        for (i, &p) in perm.iter().enumerate() {
            back[p as usize] = i as i64;
        }
        let (_, plan) = transpose_plan(&first_shape, Some(&back))?;
        self.gather_into("Concat", &joined, &plan, out)?;
        for t in moved.into_iter().chain([joined]) {
            self.release(t);
        }
        Ok(())
    }

    fn concat_into(&mut self, inputs: &[Tensor], axis: i64, out: &Tensor) -> Result<()> {
        let axis = if axis < 0 {
            axis + out.rank() as i64
        } else {
            axis
        } as usize;
        let elem = out.dtype().size() as u64;
        // Each input is `outer` runs of its axes from `axis` on, contiguous in the input and
        // `out_run` elements apart in the output.
        let outer: u64 = out.shape()[..axis].iter().map(|&d| d as u64).product();
        let out_run: u64 = out.shape()[axis..].iter().map(|&d| d as u64).product();
        let slab: u64 = out.shape()[axis + 1..].iter().map(|&d| d as u64).product();
        // Runs of 1- and 2-byte elements after the first axis that are not whole 32-bit words
        // cannot move as words (one invocation writes a whole word): concatenate along axis 0
        // of transposed copies instead, then transpose back.
        let whole_words = {
            let mut at = 0u64;
            inputs.iter().all(|t| {
                let run = t.numel() as u64 / outer.max(1);
                let dst = at * slab * elem;
                at += t.shape()[axis] as u64;
                t.numel() == 0
                    || ((run * elem).is_multiple_of(4)
                        && (out_run * elem).is_multiple_of(4)
                        && dst.is_multiple_of(4))
            })
        };
        if whole_words && outer > 0 {
            // Whole words throughout: one dispatch for up to 6 inputs where the kernel applies.
            let parts: Vec<&Tensor> = inputs.iter().collect();
            let runs: Vec<u64> = inputs
                .iter()
                .map(|t| t.numel() as u64 / outer * elem / 4)
                .collect();
            if self.move_parts(Direction::Join, out, &parts, &runs, outer)? {
                return Ok(());
            }
        }
        if outer > 1 && !whole_words {
            return self.concat_axis_first(inputs, axis, out);
        }
        let mut offset = 0u64;
        for t in inputs {
            let run = t.numel() as u64 / outer.max(1);
            let dst = offset * slab * elem;
            offset += t.shape()[axis] as u64;
            if t.numel() == 0 {
                continue;
            }
            if outer == 1 {
                if dst.is_multiple_of(4) {
                    // One run: a buffer copy. Its padding may spill into the next input's
                    // place, which that input overwrites afterwards (commands run in order).
                    let bytes = padded_size(run * elem);
                    self.copy(t.storage(), 0, out.storage(), dst, bytes)?;
                } else {
                    // A run starting inside a word: the gather keeps the word's earlier bytes.
                    let plan = GatherPlan {
                        count: run,
                        base: 0,
                        dims: vec![GatherDim { len: run, step: 1 }],
                    };
                    self.gather_chunked("Concat", elem, t, &plan, out, dst / elem)?;
                }
                continue;
            }
            // Runs and their places are whole words here (checked above): they move as words.
            let (in_words, out_words) = ((run * elem) / 4, (out_run * elem) / 4);
            let piece = CopyPiece {
                src_base: 0,
                dst_base: dst / 4,
                dims: vec![
                    CopyDim {
                        len: outer,
                        src: in_words,
                        dst: out_words,
                    },
                    CopyDim {
                        len: in_words,
                        src: 1,
                        dst: 1,
                    },
                ],
            };
            self.copy_piece("Concat", 4, t.storage(), out.storage(), &piece)?;
        }
        Ok(())
    }
}

fn concat_shape(inputs: &[Tensor], axis: i64) -> Result<Vec<usize>> {
    const OP: &str = "Concat";
    let first = inputs
        .first()
        .ok_or_else(|| Error::invalid(OP, "inputs", "Concat needs at least one input"))?;
    let r = first.rank() as i64;
    if !(-r..r).contains(&axis) {
        return Err(Error::invalid(
            OP,
            "axis",
            format!(
                "axis is {axis}, outside [{}, {}] for inputs of rank {r}",
                -r,
                r - 1
            ),
        ));
    }
    let a = if axis < 0 { axis + r } else { axis } as usize;
    let mut shape = first.shape().to_vec();
    for (i, t) in inputs.iter().enumerate().skip(1) {
        if t.dtype() != first.dtype() {
            return Err(Error::invalid(
                OP,
                "inputs",
                format!(
                    "input {i} is {} but input 0 is {}",
                    t.dtype(),
                    first.dtype()
                ),
            ));
        }
        let same = t.rank() == first.rank()
            && t.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(k, (x, y))| k == a || x == y);
        if !same {
            return Err(Error::invalid(
                OP,
                "inputs",
                format!("input {i} has shape {:?} but input 0 has {:?}; they may differ only on axis {a}", t.shape(), first.shape()),
            ));
        }
        shape[a] += t.shape()[a];
    }
    super::check_rank(OP, &shape)?;
    Ok(shape)
}

impl Recorder {
    /// Records ONNX Gather: the slices of `data` along `axis` picked by `indices` (i32 or i64,
    /// any shape; negative ones count from the end). The output's shape is `data`'s with the
    /// axis replaced by `indices`'s shape. Indices read on the GPU cannot fail the run: one
    /// out of range gives zeros; the graph executor checks indices it knows on the host.
    pub fn gather_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        axis: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Gather";
        self.check_inputs(OP, &[("data", data), ("indices", indices)])?;
        super::check_index_dtype(OP, indices)?;
        let rank = data.rank() as i64;
        if rank == 0 || axis < -rank || axis >= rank {
            return Err(Error::invalid(
                OP,
                "axis",
                format!("axis {axis} is out of range for data of rank {rank}"),
            ));
        }
        let axis = if axis < 0 { axis + rank } else { axis } as usize;
        let shape = data.shape();
        let mut out_shape = shape[..axis].to_vec();
        out_shape.extend_from_slice(indices.shape());
        out_shape.extend_from_slice(&shape[axis + 1..]);
        super::check_rank(OP, &out_shape)?;
        let inner: usize = shape[axis + 1..].iter().product();
        let out = out.tensor(self, data.dtype(), &out_shape)?;
        if shape[axis] == 0 && out.numel() > 0 {
            return Err(Error::invalid(
                OP,
                "indices",
                format!("data's axis {axis} is empty: there is nothing to gather"),
            ));
        }
        let rule = IndexRule::Axis {
            axis,
            len: shape[axis],
        };
        self.gather_index_into(OP, data, indices, shape[axis], inner, None, rule, &out)?;
        Ok(out)
    }

    /// Records ONNX Trilu-14: `input` ([..., n, m]) with the elements off its upper (or lower)
    /// triangle zeroed; `k` shifts the diagonal (positive: above the main one). The triangle
    /// is a mask made here from the shape, and one `Where` keeps the input's bits inside it.
    pub fn trilu_to(&mut self, input: &Tensor, k: i64, upper: bool, out: Out) -> Result<Tensor> {
        const OP: &str = "Trilu";
        self.check_inputs(OP, &[("input", input)])?;
        let r = input.rank();
        if r < 2 {
            return Err(Error::invalid(
                OP,
                "input",
                format!("input has rank {r}; Trilu needs rank 2 or more"),
            ));
        }
        let (n, m) = (input.shape()[r - 2], input.shape()[r - 1]);
        let mask: Vec<bool> = (0..n * m)
            .map(|e| {
                let (i, j) = ((e / m) as i64, (e % m) as i64);
                if upper {
                    j - i >= k
                } else {
                    j - i <= k
                }
            })
            .collect();
        let mask = self.upload(&crate::HostTensor::from_vec(vec![n, m], &mask)?)?;
        let zero = self.upload(&crate::HostTensor::from_bytes(
            input.dtype(),
            vec![],
            vec![0; input.dtype().size()],
        )?)?;
        self.map_to("Where", &[&mask, input, &zero], out)
    }

    /// Records ONNX-ML ArrayFeatureExtractor (domain `ai.onnx.ml`): the elements of `data`'s
    /// last axis at `indices` (i64, any shape, read flat; negative ones count from the end, as
    /// in the ONNX reference implementation). The output is `data`'s shape with the last axis
    /// replaced by the number of indices, and `[1, n]` for 1-D `data`. scikit-learn's
    /// nearest-neighbour models exported by skl2onnx pick the neighbours' targets this way.
    /// One gather kernel, as Gather; an index read on the GPU out of range gives zeros.
    pub fn array_feature_extractor_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "ArrayFeatureExtractor";
        self.check_inputs(OP, &[("X", data), ("Y", indices)])?;
        if !matches!(
            data.dtype(),
            DType::F32 | DType::F64 | DType::I32 | DType::I64
        ) {
            return Err(Error::invalid(
                OP,
                "X",
                format!(
                    "X is {}; ArrayFeatureExtractor takes f32, f64, i32 or i64",
                    data.dtype()
                ),
            ));
        }
        if indices.dtype() != DType::I64 {
            return Err(Error::invalid(
                OP,
                "Y",
                format!(
                    "Y is {}; ArrayFeatureExtractor takes i64 indices",
                    indices.dtype()
                ),
            ));
        }
        let shape = data.shape();
        let Some((&last, outer)) = shape.split_last() else {
            return Err(Error::invalid(
                OP,
                "X",
                "X has rank 0; ArrayFeatureExtractor needs rank 1 or more",
            ));
        };
        let n = indices.numel();
        let out_shape: Vec<usize> = if outer.is_empty() {
            vec![1, n]
        } else {
            outer.iter().copied().chain([n]).collect()
        };
        super::check_rank(OP, &out_shape)?;
        let out = out.tensor(self, data.dtype(), &out_shape)?;
        if last == 0 && n > 0 {
            return Err(Error::invalid(
                OP,
                "Y",
                "X's last axis is empty: there is nothing to pick",
            ));
        }
        if out.numel() == 0 {
            return Ok(out);
        }
        // Gather along the last axis by the flat indices, written straight into `out`.
        let gathered: Vec<usize> = outer.iter().copied().chain([n]).collect();
        let rule = IndexRule::Axis {
            axis: data.rank() - 1,
            len: last,
        };
        self.gather_index_into(
            OP,
            data,
            &indices.reshaped(&[n])?,
            last,
            1,
            None,
            rule,
            &out.reshaped(&gathered)?,
        )?;
        Ok(out)
    }

    /// Records ONNX-ML FeatureVectorizer into `out`: the inputs (all f32, f64, i32 or i64) as rows
    /// side by side in one f32 matrix `[N, sum(dims)]`, each cut or padded with zeros to its
    /// width in `dims`. A 1-D input is one row `[1, C]`; an input of rank 3 or more is `N` rows
    /// of its other axes flattened (onnxruntime's reading; the ONNX reference takes ranks 1
    /// and 2 only, a 1-D input there being a column). Every input has the same `N`.
    /// skl2onnx writes it where a scaler, normalizer, binarizer or imputer takes several
    /// inputs. Each input is cut, cast and padded, then the pieces are concatenated.
    pub fn feature_vectorizer_to(
        &mut self,
        inputs: &[Tensor],
        dims: &[i64],
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "FeatureVectorizer";
        for t in inputs {
            self.check_inputs(OP, &[("X", t)])?;
        }
        if inputs.is_empty() {
            return Err(Error::invalid(OP, "X", "needs at least one input"));
        }
        if dims.len() != inputs.len() {
            return Err(Error::invalid(
                OP,
                "inputdimensions",
                format!(
                    "inputdimensions has {} values for {} inputs; it needs one per input",
                    dims.len(),
                    inputs.len()
                ),
            ));
        }
        if let Some((k, d)) = dims.iter().enumerate().find(|(_, &d)| d < 0) {
            return Err(Error::invalid(
                OP,
                "inputdimensions",
                format!("inputdimensions[{k}] is {d}; a width cannot be negative"),
            ));
        }
        let mut rows = None;
        let mut views = Vec::with_capacity(inputs.len());
        for (k, t) in inputs.iter().enumerate() {
            if !matches!(t.dtype(), DType::F32 | DType::F64 | DType::I32 | DType::I64) {
                return Err(Error::invalid(
                    OP,
                    "X",
                    format!(
                        "input {k} is {}; FeatureVectorizer takes f32, f64, i32 or i64",
                        t.dtype()
                    ),
                ));
            }
            if t.dtype() != inputs[0].dtype() {
                return Err(Error::invalid(
                    OP,
                    "X",
                    format!(
                        "input {k} is {} and input 0 is {}; the inputs share one type",
                        t.dtype(),
                        inputs[0].dtype()
                    ),
                ));
            }
            let n = match t.shape() {
                [] => {
                    return Err(Error::invalid(
                        OP,
                        "X",
                        format!("input {k} has rank 0; FeatureVectorizer needs rank 1 or more"),
                    ))
                }
                [_] => 1,
                [n, ..] => *n,
            };
            let width: usize = if t.rank() == 1 {
                t.shape()[0]
            } else {
                t.shape()[1..].iter().product()
            };
            match rows {
                None => rows = Some(n),
                Some(first) if first != n => {
                    return Err(Error::invalid(
                        OP,
                        "X",
                        format!(
                            "input {k} has {n} rows and input 0 has {first}; every input needs the same number"
                        ),
                    ))
                }
                Some(_) => {}
            }
            views.push(t.reshaped(&[n, width])?);
        }
        let n = rows.unwrap_or(0);
        let total = dims.iter().try_fold(0usize, |sum, &d| {
            usize::try_from(d).ok().and_then(|d| sum.checked_add(d))
        });
        let shape = match total.map(|t| [n, t]) {
            Some(shape) if crate::host::checked_numel(&shape).is_some() => shape,
            _ => {
                return Err(Error::invalid(
                    OP,
                    "inputdimensions",
                    "the output's element count does not fit in 64 bits",
                ))
            }
        };
        let out = out.tensor(self, DType::F32, &shape)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        // The pieces, and the cut or cast tensors they were made from: all handed back to
        // the pool once the concatenation is recorded (the inputs' own buffers stay theirs).
        let mut pieces = Vec::with_capacity(views.len());
        let mut made = Vec::new();
        for (view, &d) in views.iter().zip(dims) {
            let d = d as usize;
            let width = view.shape()[1];
            if d == 0 {
                continue;
            }
            let cut = if width > d {
                self.slice(view, &crate::Slice::new([0], [d as i64], [1]).axes([1]))?
            } else {
                view.clone()
            };
            let cast = self.cast(&cut, DType::F32)?;
            made.push(cut);
            pieces.push(if width < d {
                let padded = self.pad_to(
                    &cast,
                    &[0, (d - width) as i64],
                    PadMode::Constant,
                    None,
                    Some(&[1]),
                    Out::NEW,
                )?;
                made.push(cast);
                padded
            } else {
                cast
            });
        }
        self.concat_into(&pieces, 1, &out)?;
        for t in pieces.into_iter().chain(made) {
            self.release(t);
        }
        Ok(out)
    }
}
