//! Slice-8 (OpenVINO): start/stop/step with optional axes and Python slicing rules
//! (docs/spec-decisions.md, decisions 0 and 10).

use super::check_rank;
use super::slicing::{python_range, AxisSlice, SlicePlan};
use crate::indices::IntoIndices;
use crate::{Error, Out, Recorder, Result, Tensor};

const OP: &str = "Slice";

/// Slice-8's index inputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// The first position along each sliced axis (from the end when negative; clamped).
    pub start: Vec<i64>,
    /// The position each stops before (from the end when negative; clamped).
    pub stop: Vec<i64>,
    /// The step along each (not 0; negative walks backwards).
    pub step: Vec<i64>,
    /// `None`: axes `0..start.len()`.
    pub axes: Option<Vec<i64>>,
}

impl Slice {
    /// The op with these inputs (integers of any type) over axes `0..start.len()`.
    pub fn new(start: impl IntoIndices, stop: impl IntoIndices, step: impl IntoIndices) -> Self {
        Slice {
            start: start.into_indices(),
            stop: stop.into_indices(),
            step: step.into_indices(),
            axes: None,
        }
    }
    /// Slices these axes instead (from the end when negative), in the order of `start`.
    pub fn axes(mut self, axes: impl IntoIndices) -> Self {
        self.axes = Some(axes.into_indices());
        self
    }

    /// Validates against `input_shape` and computes the plan; needs neither a GPU nor the data.
    pub fn plan(&self, input_shape: &[usize]) -> Result<SlicePlan> {
        let rank = input_shape.len();
        if rank == 0 {
            return Err(Error::invalid(
                OP,
                "data",
                "data has rank 0; Slice needs rank 1 or more",
            ));
        }
        check_rank(OP, input_shape)?;
        let n = self.start.len();
        let lengths = [("stop", self.stop.len()), ("step", self.step.len())]
            .into_iter()
            .chain(self.axes.as_ref().map(|a| ("axes", a.len())));
        for (name, len) in lengths {
            if len != n {
                return Err(Error::invalid(
                    OP,
                    name,
                    format!(
                        "{name} has {len} values but start has {n}; start, stop, step and axes must have the same length"
                    ),
                ));
            }
        }
        if let Some(i) = self.step.iter().position(|&s| s == 0) {
            return Err(Error::invalid(
                OP,
                "step",
                format!("step[{i}] is 0; steps must be non-zero"),
            ));
        }
        let r = rank as i64;
        let axes: Vec<usize> = match &self.axes {
            None => {
                if n > rank {
                    return Err(Error::invalid(
                        OP,
                        "start",
                        format!("start has {n} values but data has rank {rank} (axes default to 0..{n})"),
                    ));
                }
                (0..n).collect()
            }
            Some(axes) => {
                let mut seen: Vec<Option<usize>> = vec![None; rank];
                let mut out = Vec::with_capacity(n);
                for (i, &a) in axes.iter().enumerate() {
                    if !(-r..r).contains(&a) {
                        return Err(Error::invalid(
                            OP,
                            "axes",
                            format!(
                                "axes[{i}] is {a}, outside [{}, {}] for data of rank {rank}",
                                -r,
                                r - 1
                            ),
                        ));
                    }
                    let axis = if a < 0 { a + r } else { a } as usize;
                    if let Some(first) = seen[axis] {
                        return Err(Error::invalid(
                            OP,
                            "axes",
                            format!("axes[{i}] is {a}, which repeats axes[{first}] (axis {axis}); axes must be unique"),
                        ));
                    }
                    seen[axis] = Some(i);
                    out.push(axis);
                }
                out
            }
        };
        let mut slices: Vec<AxisSlice> = input_shape.iter().map(|&d| AxisSlice::full(d)).collect();
        for (i, &axis) in axes.iter().enumerate() {
            slices[axis] = python_range(
                input_shape[axis],
                Some(self.start[i]),
                Some(self.stop[i]),
                self.step[i],
            );
        }
        Ok(SlicePlan {
            input_shape: input_shape.to_vec(),
            output_shape: slices.iter().map(|a| a.len as usize).collect(),
            axes: slices,
        })
    }

    /// Runs the op on `data` and waits for validation (native).
    #[cfg(feature = "native")]
    pub fn run(&self, data: &Tensor) -> Result<Tensor> {
        data.context().run(|rec| self.record(rec, data, Out::NEW))
    }
}

impl Slice {
    /// Records Slice-8 of `data` into `out`: the one recording path of the op (the Rust API and
    /// graph nodes both come here).
    pub fn record(&self, rec: &mut Recorder, data: &Tensor, out: Out) -> Result<Tensor> {
        rec.check_inputs(OP, &[("data", data)])?;
        let plan = self.plan(data.shape())?;
        rec.apply_slice(OP, data, &plan, out)
    }
}

impl Recorder {
    /// Records Slice-8 of `data` into a new tensor.
    pub fn slice(&mut self, data: &Tensor, op: &Slice) -> Result<Tensor> {
        op.record(self, data, Out::NEW)
    }
}
