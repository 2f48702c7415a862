//! ONNX ScatterElements and ScatterND: a copy of the data with updates written (or merged by a
//! reduction) at positions an index tensor gives. Updates are applied in their order, so
//! repeated indices end as onnxruntime leaves them; updates known to land on distinct elements
//! are applied all at once.

use crate::kernels::scatter::{ElementsAxis, ScatterPlan, ScatterReduction};
use crate::recorder::IndexRule;
use crate::storage::padded_size;
use crate::{DType, Error, Out, Recorder, Result, Tensor};

/// The data's element strides (C order).
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    strides
}

/// ScatterElements' walk of the updates (shape `wanted`) into data of `shape` along `axis`, its
/// indices of shape `given` (`wanted`, or 1 where they repeat).
fn elements_plan(
    shape: &[usize],
    given: &[usize],
    wanted: &[usize],
    axis: usize,
    distinct: bool,
) -> ScatterPlan {
    let (ustrides, istrides, dstrides) = (strides(wanted), strides(given), strides(shape));
    let axes = (0..shape.len())
        .rev()
        .map(|k| ElementsAxis {
            len: wanted[k],
            ustride: ustrides[k],
            dstride: dstrides[k],
            istride: if given[k] == 1 { 0 } else { istrides[k] },
        })
        .collect();
    ScatterPlan::Elements {
        axes,
        axis: shape.len() - 1 - axis,
        len: shape[axis],
        distinct,
    }
}

impl Recorder {
    /// Checks what both scatters share and records `out` as a copy of `data`.
    fn scatter_start(
        &mut self,
        op: &'static str,
        data: &Tensor,
        indices: &Tensor,
        updates: &Tensor,
        reduction: ScatterReduction,
        out: Out,
    ) -> Result<Tensor> {
        let inputs = [("data", data), ("indices", indices), ("updates", updates)];
        if reduction == ScatterReduction::None {
            // Replacing moves elements: every dtype.
            self.check_devices(op, &inputs)?;
        } else {
            self.check_inputs(op, &inputs)?;
        }
        // The kernel walks the data's axes from its parameters, which hold up to MAX_RANK.
        super::check_rank(op, data.shape())?;
        super::check_index_dtype(op, indices)?;
        if updates.dtype() != data.dtype() {
            return Err(Error::invalid(
                op,
                "updates",
                format!(
                    "updates is {} but data is {}; they must match",
                    updates.dtype(),
                    data.dtype()
                ),
            ));
        }
        if reduction != ScatterReduction::None && data.dtype() == DType::Bool {
            return Err(Error::invalid(
                op,
                "reduction",
                format!("reduction '{}' does not apply to bool", reduction.name()),
            ));
        }
        let out = out.tensor(self, data.dtype(), data.shape())?;
        if !out.shares_buffer(data) && data.numel() > 0 {
            let bytes = padded_size(data.byte_len());
            self.copy(data.storage(), 0, out.storage(), 0, bytes)?;
        }
        Ok(out)
    }

    /// Records ONNX ScatterElements: a copy of `data` where each update lands at its own
    /// position with the coordinate along `axis` replaced by its index. `indices` and
    /// `updates` share a shape of `data`'s rank, no longer than `data` off the axis. Indices
    /// known on the host are range-checked; one out of range computed on the GPU is skipped
    /// (and reported after the run where a graph's node records it).
    pub fn scatter_elements_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        updates: &Tensor,
        axis: i64,
        reduction: ScatterReduction,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "ScatterElements";
        let (shape, wanted) = (data.shape(), indices.shape());
        let axis = super::elements_axis(OP, shape, wanted, axis)?;
        if updates.shape() != wanted {
            return Err(Error::invalid(
                OP,
                "updates",
                format!(
                    "indices {wanted:?} and updates {:?} must have one shape",
                    updates.shape()
                ),
            ));
        }
        self.scatter_along(data, indices, updates, axis, reduction, false, out)
    }

    /// Records a ScatterElements whose updates land on distinct elements of the data (a KV
    /// cache's writes): `indices` broadcast to the updates' shape (each of its lengths that of
    /// the updates or 1), and every update applied at once, where `scatter_elements_to` walks
    /// the axis in order, one invocation per column. Two updates on one element leave either.
    pub fn scatter_distinct_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        updates: &Tensor,
        axis: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "ScatterElements";
        let (shape, wanted) = (data.shape(), updates.shape());
        let axis = super::elements_axis(OP, shape, wanted, axis)?;
        let given = indices.shape();
        let broadcasts = given.len() == wanted.len()
            && given.iter().zip(wanted).all(|(&i, &u)| i == u || i == 1);
        if !broadcasts {
            return Err(Error::invalid(
                OP,
                "indices",
                format!("indices {given:?} must broadcast to the updates' shape {wanted:?}"),
            ));
        }
        self.scatter_along(
            data,
            indices,
            updates,
            axis,
            ScatterReduction::None,
            true,
            out,
        )
    }

    /// ScatterElements' copy and updates once its shapes are checked (`axis` in range).
    #[allow(clippy::too_many_arguments)]
    fn scatter_along(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        updates: &Tensor,
        axis: usize,
        reduction: ScatterReduction,
        distinct: bool,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "ScatterElements";
        let out = self.scatter_start(OP, data, indices, updates, reduction, out)?;
        if updates.numel() == 0 {
            return Ok(out);
        }
        let shape = data.shape();
        if shape[axis] == 0 {
            return Err(Error::invalid(
                OP,
                "indices",
                format!("data's axis {axis} is empty: there is nowhere to scatter"),
            ));
        }
        let plan = elements_plan(shape, indices.shape(), updates.shape(), axis, distinct);
        let rule = IndexRule::Axis {
            axis,
            len: shape[axis],
        };
        self.scatter_into(OP, indices, updates, &plan, reduction, rule, &out)?;
        Ok(out)
    }

    /// Records ONNX ScatterND: a copy of `data` where each index tuple (the last axis of
    /// `indices`, `k` long) addresses a slice over `data`'s axes from `k` on, which the
    /// tuple's updates replace (or merge into). `updates` has shape `indices.shape[..-1] ++
    /// data.shape[k..]`. Indices known on the host are range-checked; a tuple out of range
    /// computed on the GPU is skipped (and reported after the run where a graph's node
    /// records it).
    pub fn scatter_nd_to(
        &mut self,
        data: &Tensor,
        indices: &Tensor,
        updates: &Tensor,
        reduction: ScatterReduction,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "ScatterND";
        let shape = data.shape();
        let Some((&k, tuples)) = indices.shape().split_last() else {
            return Err(Error::invalid(
                OP,
                "indices",
                "indices has rank 0; it needs 1 or more",
            ));
        };
        if k > shape.len() {
            return Err(Error::invalid(
                OP,
                "indices",
                format!(
                    "index tuples of {k} values exceed data's rank {}",
                    shape.len()
                ),
            ));
        }
        let expected: Vec<usize> = tuples.iter().chain(&shape[k..]).copied().collect();
        if updates.shape() != expected {
            return Err(Error::invalid(
                OP,
                "updates",
                format!(
                    "updates has shape {:?}; indices {:?} on data {shape:?} need {expected:?}",
                    updates.shape(),
                    indices.shape()
                ),
            ));
        }
        let out = self.scatter_start(OP, data, indices, updates, reduction, out)?;
        let dstrides = strides(shape);
        let plan = ScatterPlan::Nd {
            tuples: tuples.iter().product(),
            axes: (0..k).map(|j| [shape[j], dstrides[j]]).collect(),
            slice: shape[k..].iter().product(),
        };
        let rule = IndexRule::Entries {
            shape: shape[..k].to_vec(),
        };
        self.scatter_into(OP, indices, updates, &plan, reduction, rule, &out)?;
        Ok(out)
    }
}
