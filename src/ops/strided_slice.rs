//! StridedSlice-1 (OpenVINO): begin/end/stride with begin, end, new-axis, shrink-axis and
//! ellipsis masks, as settled by `docs/spec-decisions.md` (decisions 0 to 9).

use super::check_rank;
use super::slicing::{python_range, AxisSlice, SlicePlan};
use crate::indices::IntoIndices;
use crate::{Error, Out, Recorder, Result, Tensor};

const OP: &str = "StridedSlice";

/// StridedSlice-1's index inputs and masks. Masks are lists of 0/1 of any length (shorter ones
/// are padded with zeros, longer ones truncated to the length of `begin`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StridedSlice {
    /// The first position along each axis of the index expression.
    pub begin: Vec<i64>,
    /// The position each stops before.
    pub end: Vec<i64>,
    /// `None`: all strides 1.
    pub stride: Option<Vec<i64>>,
    /// 1 where `begin` is ignored (the axis starts at its first element, or its last when
    /// the stride is negative).
    pub begin_mask: Vec<i64>,
    /// 1 where `end` is ignored (the axis runs to its end).
    pub end_mask: Vec<i64>,
    /// 1 where a new axis of size 1 is inserted.
    pub new_axis_mask: Vec<i64>,
    /// 1 where the axis is indexed at `begin` and removed.
    pub shrink_axis_mask: Vec<i64>,
    /// 1 at the position standing for every axis not named (`...`); one at most.
    pub ellipsis_mask: Vec<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Position {
    Ellipsis,
    NewAxis,
    Shrink,
    Range,
}

impl StridedSlice {
    /// The op with `begin` and `end` (integers of any type), strides 1 and no masks.
    pub fn new(begin: impl IntoIndices, end: impl IntoIndices) -> Self {
        StridedSlice {
            begin: begin.into_indices(),
            end: end.into_indices(),
            ..Default::default()
        }
    }
    /// Sets the strides.
    pub fn stride(mut self, stride: impl IntoIndices) -> Self {
        self.stride = Some(stride.into_indices());
        self
    }
    /// Sets `begin_mask`.
    pub fn begin_mask(mut self, mask: impl IntoIndices) -> Self {
        self.begin_mask = mask.into_indices();
        self
    }
    /// Sets `end_mask`.
    pub fn end_mask(mut self, mask: impl IntoIndices) -> Self {
        self.end_mask = mask.into_indices();
        self
    }
    /// Sets `new_axis_mask`.
    pub fn new_axis_mask(mut self, mask: impl IntoIndices) -> Self {
        self.new_axis_mask = mask.into_indices();
        self
    }
    /// Sets `shrink_axis_mask`.
    pub fn shrink_axis_mask(mut self, mask: impl IntoIndices) -> Self {
        self.shrink_axis_mask = mask.into_indices();
        self
    }
    /// Sets `ellipsis_mask`.
    pub fn ellipsis_mask(mut self, mask: impl IntoIndices) -> Self {
        self.ellipsis_mask = mask.into_indices();
        self
    }

    /// Validates against `input_shape` and computes the plan; needs neither a GPU nor the data.
    pub fn plan(&self, input_shape: &[usize]) -> Result<SlicePlan> {
        check_rank(OP, input_shape)?;
        let m = self.begin.len();
        if self.end.len() != m {
            return Err(Error::invalid(
                OP,
                "end",
                format!(
                    "end has {} values but begin has {m}; begin, end and stride must have the same length",
                    self.end.len()
                ),
            ));
        }
        let ones;
        let stride = match &self.stride {
            Some(s) => {
                if s.len() != m {
                    return Err(Error::invalid(
                        OP,
                        "stride",
                        format!(
                            "stride has {} values but begin has {m}; begin, end and stride must have the same length",
                            s.len()
                        ),
                    ));
                }
                s
            }
            None => {
                ones = vec![1; m];
                &ones
            }
        };
        if let Some(i) = stride.iter().position(|&s| s == 0) {
            return Err(Error::invalid(
                OP,
                "stride",
                format!("stride[{i}] is 0; strides must be non-zero"),
            ));
        }
        let masks = [
            ("begin_mask", &self.begin_mask),
            ("end_mask", &self.end_mask),
            ("new_axis_mask", &self.new_axis_mask),
            ("shrink_axis_mask", &self.shrink_axis_mask),
            ("ellipsis_mask", &self.ellipsis_mask),
        ];
        for (name, mask) in masks {
            if let Some((i, v)) = mask.iter().enumerate().find(|(_, &v)| v != 0 && v != 1) {
                return Err(Error::invalid(
                    OP,
                    name,
                    format!("{name}[{i}] is {v}; mask values must be 0 or 1"),
                ));
            }
        }
        // Padded with zeros / truncated to m (decision 5).
        let bit = |mask: &Vec<i64>, i: usize| mask.get(i) == Some(&1);
        // Precedence at one position: ellipsis, then new axis, then shrink (decision 6).
        let positions: Vec<Position> = (0..m)
            .map(|i| {
                if bit(&self.ellipsis_mask, i) {
                    Position::Ellipsis
                } else if bit(&self.new_axis_mask, i) {
                    Position::NewAxis
                } else if bit(&self.shrink_axis_mask, i) {
                    Position::Shrink
                } else {
                    Position::Range
                }
            })
            .collect();
        // Two ellipsis bits are an error wherever they are, also past the length of `begin`
        // where other bits are ignored (decision 7).
        let ellipses: Vec<usize> = (0..self.ellipsis_mask.len())
            .filter(|&i| bit(&self.ellipsis_mask, i))
            .collect();
        if ellipses.len() > 1 {
            return Err(Error::invalid(
                OP,
                "ellipsis_mask",
                format!(
                    "ellipsis_mask has bits set at positions {ellipses:?}; at most one ellipsis is allowed"
                ),
            ));
        }
        let rank = input_shape.len();
        let consumed = positions
            .iter()
            .filter(|p| matches!(p, Position::Shrink | Position::Range))
            .count();
        if consumed > rank {
            return Err(Error::invalid(
                OP,
                "begin",
                format!(
                    "begin has {m} positions, {consumed} of which index input dimensions, but data has rank {rank}; too many indices"
                ),
            ));
        }
        let mut axes = Vec::with_capacity(rank);
        let mut output_shape = Vec::with_capacity(m + rank);
        let mut j = 0;
        for (i, position) in positions.into_iter().enumerate() {
            match position {
                Position::Ellipsis => {
                    for _ in 0..rank - consumed {
                        axes.push(AxisSlice::full(input_shape[j]));
                        output_shape.push(input_shape[j]);
                        j += 1;
                    }
                }
                Position::NewAxis => output_shape.push(1),
                Position::Shrink => {
                    let d = input_shape[j] as i64;
                    let b = self.begin[i];
                    let index = if b < 0 { b + d } else { b };
                    if !(0..d).contains(&index) {
                        return Err(Error::invalid(
                            OP,
                            "begin",
                            format!(
                                "begin[{i}] is {b} with shrink_axis_mask[{i}] set, outside [{}, {}] for input dimension {j} of size {d}",
                                -d,
                                d - 1
                            ),
                        ));
                    }
                    axes.push(AxisSlice {
                        start: index as u64,
                        step: 1,
                        len: 1,
                    });
                    j += 1;
                }
                Position::Range => {
                    let begin = (!bit(&self.begin_mask, i)).then_some(self.begin[i]);
                    let end = (!bit(&self.end_mask, i)).then_some(self.end[i]);
                    let a = python_range(input_shape[j], begin, end, stride[i]);
                    output_shape.push(a.len as usize);
                    axes.push(a);
                    j += 1;
                }
            }
        }
        // Trailing dimensions without a position are taken whole (decision 8).
        for &d in &input_shape[j..] {
            axes.push(AxisSlice::full(d));
            output_shape.push(d);
        }
        Ok(SlicePlan {
            input_shape: input_shape.to_vec(),
            axes,
            output_shape,
        })
    }

    /// Runs the op on `data` and waits for validation (native).
    #[cfg(feature = "native")]
    pub fn run(&self, data: &Tensor) -> Result<Tensor> {
        data.context().run(|rec| self.record(rec, data, Out::NEW))
    }
}

impl StridedSlice {
    /// Records StridedSlice-1 of `data` into `out`: the one recording path of the op (the Rust API and
    /// graph nodes both come here).
    pub fn record(&self, rec: &mut Recorder, data: &Tensor, out: Out) -> Result<Tensor> {
        rec.check_inputs(OP, &[("data", data)])?;
        let plan = self.plan(data.shape())?;
        rec.apply_slice(OP, data, &plan, out)
    }
}

impl Recorder {
    /// Records StridedSlice-1 of `data` into a new tensor.
    pub fn strided_slice(&mut self, data: &Tensor, op: &StridedSlice) -> Result<Tensor> {
        op.record(self, data, Out::NEW)
    }
}
