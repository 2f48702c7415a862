//! ONNX GatherND: slices of `data` picked by tuples of indices (the last axis of
//! `indices`), after `batch_dims` leading axes both share. Each tuple becomes one row index
//! of `data` seen as rows of the slices (negative entries counted from the end), computed by
//! element-wise ops and a reduction over the tuple, then Gather's kernel moves the rows.

use crate::recorder::IndexRule;
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

const OP: &str = "GatherND";

/// GatherND's shapes: the output's, and (batch count, tuple length, rows per batch, row
/// length).
pub fn gather_nd_shape(
    data: &[usize],
    indices: &[usize],
    batch_dims: i64,
) -> Result<(Vec<usize>, usize)> {
    let (r, q) = (data.len(), indices.len());
    if r == 0 || q == 0 {
        return Err(Error::invalid(
            OP,
            "indices",
            format!("data has rank {r} and indices rank {q}; both must be at least 1"),
        ));
    }
    let b = usize::try_from(batch_dims)
        .ok()
        .filter(|&b| b < q.min(r))
        .ok_or_else(|| {
            Error::invalid(
                OP,
                "batch_dims",
                format!("batch_dims is {batch_dims}; it must be in 0..{}", q.min(r)),
            )
        })?;
    if data[..b] != indices[..b] {
        return Err(Error::invalid(
            OP,
            "indices",
            format!(
                "the first {b} axes of data {data:?} and indices {indices:?} (batch_dims) differ"
            ),
        ));
    }
    let k = indices[q - 1];
    if k < 1 || k > r - b {
        return Err(Error::invalid(
            OP,
            "indices",
            format!(
                "indices' last axis holds tuples of {k}; with batch_dims {b} they must hold 1 to {}",
                r - b
            ),
        ));
    }
    let mut shape = indices[..q - 1].to_vec();
    shape.extend(&data[b + k..]);
    Ok((shape, k))
}

/// Checks indices known on the host against `data`'s axes (after `batch_dims`).
pub fn check_gather_nd_indices(
    data: &[usize],
    indices: &HostTensor,
    batch_dims: usize,
) -> Result<()> {
    let k = *indices.shape.last().unwrap_or(&0);
    let flat = HostTensor {
        shape: vec![indices.numel()],
        ..HostTensor::clone(indices)
    };
    for (n, &i) in flat.to_indices(OP, "indices")?.iter().enumerate() {
        let len = data[batch_dims + n % k.max(1)] as i64;
        if i < -len || i >= len {
            return Err(Error::invalid(
                OP,
                "indices",
                format!(
                    "index {i} (element {n} of indices) is out of range for axis {} of length {len}",
                    batch_dims + n % k.max(1)
                ),
            ));
        }
    }
    Ok(())
}

impl Recorder {
    /// Records ONNX GatherND (`indices` i32 or i64). Indices out of range read zeros (check
    /// them with [`check_gather_nd_indices`] where they are known on the host; a graph's node
    /// reports those computed on the GPU after the run).
    pub fn gather_nd_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        batch_dims: i64,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(OP, &[("data", data), ("indices", indices)])?;
        super::check_index_dtype(OP, indices)?;
        let (shape, k) = gather_nd_shape(data.shape(), indices.shape(), batch_dims)?;
        let b = batch_dims as usize;
        let (ds, is) = (data.shape(), indices.shape());
        let batches: usize = ds[..b].iter().product();
        let rows: usize = ds[b..b + k].iter().product();
        let row: usize = ds[b + k..].iter().product();
        if shape.contains(&0) || data.numel() == 0 {
            return out.tensor(self, data.dtype(), &shape);
        }
        let wide = if indices.dtype() == DType::I64 {
            indices.clone()
        } else {
            self.cast(indices, DType::I64)?
        };
        // Negative entries counted from the end of their axis.
        let lens: Vec<i64> = ds[b..b + k].iter().map(|&d| d as i64).collect();
        let mut strides = vec![1i64; k];
        for j in (0..k.saturating_sub(1)).rev() {
            strides[j] = strides[j + 1] * lens[j + 1];
        }
        let lens = self.upload(&HostTensor::from_vec(vec![k], &lens)?)?;
        let strides = self.upload(&HostTensor::from_vec(vec![k], &strides)?)?;
        let zero = self.upload(&HostTensor::from_vec(vec![], &[0i64])?)?;
        let negative = self.elementwise("Less", &wide, Some(&zero))?;
        let wrapped = self.elementwise("Add", &wide, Some(&lens))?;
        let entries = self.map_to("Where", &[&negative, &wrapped, &wide], Out::NEW)?;
        let mut weighted = self.elementwise("Mul", &entries, Some(&strides))?;
        if self.index_checks.checking() {
            // An entry out of range makes its tuple's row index far below -2^32 (the sum of
            // up to 16 such entries does not wrap), which the kernel then reports.
            let low = self.elementwise("Less", &entries, Some(&zero))?;
            let high = self.elementwise("GreaterOrEqual", &entries, Some(&lens))?;
            let bad = self.elementwise("Or", &low, Some(&high))?;
            let far = self.upload(&HostTensor::from_vec(vec![], &[-(1i64 << 40)])?)?;
            let marked = self.map_to("Where", &[&bad, &far, &weighted], Out::NEW)?;
            for t in [
                low,
                high,
                bad,
                far,
                std::mem::replace(&mut weighted, marked),
            ] {
                self.release(t);
            }
        }
        let mut row_index =
            self.reduce_to("ReduceSum", &weighted, Some(&[-1]), false, false, Out::NEW)?;
        for t in [lens, strides, zero, negative, wrapped, entries, weighted] {
            self.release(t);
        }
        if !wide.shares_buffer(indices) {
            self.release(wide);
        }
        if b > 0 {
            // Each batch's first row: its position among the batches times the rows of one.
            let mut offset_shape = is[..b].to_vec();
            offset_shape.extend(std::iter::repeat_n(1, is.len() - 1 - b));
            let offsets: Vec<i64> = (0..batches as i64).map(|i| i * rows as i64).collect();
            let offsets = self.upload(&HostTensor::from_vec(offset_shape, &offsets)?)?;
            let shifted = self.elementwise("Add", &row_index, Some(&offsets))?;
            self.release(row_index);
            self.release(offsets);
            row_index = shifted;
        }
        let table = data.reshaped(&[batches * rows, row])?;
        let y = out.tensor(self, data.dtype(), &shape)?;
        let rule = IndexRule::Tuples {
            first: b,
            sizes: ds[b..b + k].to_vec(),
        };
        self.gather_index_into(OP, &table, &row_index, batches * rows, row, None, rule, &y)?;
        self.release(row_index);
        Ok(y)
    }
}
