//! The plan shared by the slicing ops: for each input axis, the first index, the signed step
//! and the number of elements taken; plus the output shape (which may drop or insert axes).

pub use crate::kernels::gather::AxisSlice;
use crate::kernels::gather::GatherPlan;
use crate::{Out, Recorder, Result, Tensor};

/// A normalized slice of a tensor, computed from the shape and index values alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePlan {
    /// The shape it was planned for.
    pub input_shape: Vec<usize>,
    /// One entry per input axis, in order.
    pub axes: Vec<AxisSlice>,
    /// The op's output shape: the axes' lengths with shrunk axes removed and new axes inserted.
    pub output_shape: Vec<usize>,
}

impl SlicePlan {
    /// The element-level gather this slice amounts to (contiguous axes merged).
    pub fn gather(&self) -> GatherPlan {
        GatherPlan::from_axes(&self.input_shape, &self.axes)
    }
}

impl Recorder {
    /// Records a slice plan: a view when it takes the whole input in order (copied when `out`
    /// names a tensor), else a gather into `out`.
    pub(crate) fn apply_slice(
        &mut self,
        op: &'static str,
        data: &Tensor,
        plan: &SlicePlan,
        out: Out,
    ) -> Result<Tensor> {
        let gather = plan.gather();
        if gather.is_identity(data.numel() as u64) {
            // The whole input in order: a view, no dispatch and no copy.
            return out.view(self, data.reshaped(&plan.output_shape)?);
        }
        let out = out.tensor(self, data.dtype(), &plan.output_shape)?;
        self.gather_into(op, data, &gather, &out)?;
        Ok(out)
    }
}

/// Python's `x[begin:end:step]` on an axis of `dim` elements, `None` meaning an omitted (or
/// masked) bound, with one deliberate difference (docs/spec-decisions.md, decision 0): with a negative
/// step, a begin that is still negative after adding `dim` clamps to 0 instead of giving an
/// empty range. `step` must be non-zero.
pub fn python_range(dim: usize, begin: Option<i64>, end: Option<i64>, step: i64) -> AxisSlice {
    debug_assert!(step != 0);
    let d = dim as i64;
    let empty = AxisSlice {
        start: 0,
        step,
        len: 0,
    };
    if d == 0 {
        return empty;
    }
    let wrap = |v: i64| if v < 0 { v + d } else { v };
    let (start, stop) = if step > 0 {
        (
            begin.map_or(0, |b| wrap(b).clamp(0, d)),
            end.map_or(d, |e| wrap(e).clamp(0, d)),
        )
    } else {
        // Reverse: start in [0, d-1] (decision 0); stop in [-1, d-1], -1 meaning "through 0".
        (
            begin.map_or(d - 1, |b| wrap(b).clamp(0, d - 1)),
            end.map_or(-1, |e| wrap(e).clamp(-1, d - 1)),
        )
    };
    let span = if step > 0 { stop - start } else { start - stop };
    if span <= 0 {
        return empty;
    }
    AxisSlice {
        start: start as u64,
        step,
        len: (span as u64 - 1) / step.unsigned_abs() + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(dim: usize, b: Option<i64>, e: Option<i64>, s: i64) -> Vec<i64> {
        let r = python_range(dim, b, e, s);
        (0..r.len as i64)
            .map(|k| r.start as i64 + k * r.step)
            .collect()
    }

    #[test]
    fn python_examples() {
        assert_eq!(ids(10, Some(1), Some(8), 2), [1, 3, 5, 7]);
        assert_eq!(ids(10, Some(9), Some(-11), -2), [9, 7, 5, 3, 1]);
        assert_eq!(ids(10, Some(9), Some(0), -1), [9, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(ids(4, Some(3), None, -1), [3, 2, 1, 0]);
        assert_eq!(ids(4, Some(2), Some(2), 1), Vec::<i64>::new());
        assert_eq!(ids(0, None, None, -1), Vec::<i64>::new());
        assert_eq!(ids(5, Some(i64::MIN), Some(i64::MAX), i64::MAX), [0]);
        assert_eq!(ids(5, Some(i64::MAX), Some(i64::MIN), i64::MIN), [4]);
    }

    #[test]
    fn decision_0_reverse_begin_still_negative_clamps_to_zero() {
        // docs/spec-decisions.md 0: "begin -17, end -100, stride -1 gives [a0]; begin -5, end -6,
        // stride -1 gives [a0]; Slice-8 start -5, stop INT64_MIN, step -1 gives [a0]".
        assert_eq!(ids(4, Some(-17), Some(-100), -1), [0]);
        assert_eq!(ids(4, Some(-5), Some(-6), -1), [0]);
        assert_eq!(ids(4, Some(-5), Some(i64::MIN), -1), [0]);
    }
}
