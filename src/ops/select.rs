//! ONNX ReverseSequence and Compress: rows picked by indices the host computes from inputs
//! known while planning (each batch item's length; the condition), moved by Gather's kernel.

use crate::{Error, HostTensor, Out, Recorder, Result, Tensor};

/// ReverseSequence's row table for `input` of `shape` ([T, B, ...] or [B, T, ...]): output row
/// `r` of the input seen as rows of its first two axes reads input row `table[r]`.
pub fn reverse_sequence_rows(
    shape: &[usize],
    lengths: &[i64],
    time_axis: i64,
    batch_axis: i64,
) -> Result<Vec<i64>> {
    const OP: &str = "ReverseSequence";
    if shape.len() < 2 {
        return Err(Error::invalid(
            OP,
            "input",
            format!("input has shape {shape:?}; it needs rank 2 or more"),
        ));
    }
    let time_first = match (time_axis, batch_axis) {
        (0, 1) => true,
        (1, 0) => false,
        _ => {
            return Err(Error::invalid(
                OP,
                "time_axis",
                format!(
                "time_axis {time_axis} and batch_axis {batch_axis}: one must be 0 and the other 1"
            ),
            ))
        }
    };
    let (t, b) = if time_first {
        (shape[0], shape[1])
    } else {
        (shape[1], shape[0])
    };
    if lengths.len() != b {
        return Err(Error::invalid(
            OP,
            "sequence_lens",
            format!(
                "sequence_lens holds {} lengths for a batch of {b}",
                lengths.len()
            ),
        ));
    }
    if let Some((i, &l)) = lengths
        .iter()
        .enumerate()
        .find(|&(_, &l)| l < 0 || l > t as i64)
    {
        return Err(Error::invalid(
            OP,
            "sequence_lens",
            format!("sequence_lens[{i}] is {l}; each must be in 0..={t}"),
        ));
    }
    let mut table = Vec::with_capacity(t * b);
    let row = |time: usize, item: usize| -> i64 {
        if time_first {
            (time * b + item) as i64
        } else {
            (item * t + time) as i64
        }
    };
    for outer in 0..shape[0] {
        for inner in 0..shape[1] {
            let (time, item) = if time_first {
                (outer, inner)
            } else {
                (inner, outer)
            };
            let l = lengths[item] as usize;
            let from = if time < l { l - 1 - time } else { time };
            table.push(row(from, item));
        }
    }
    Ok(table)
}

/// Compress's plan for `input` of `shape`: the row table of the input seen as `rows`
/// [count, length], and the output's shape. Kept are the slices along `axis` (of the
/// flattened input when `None`) where `condition` is true; positions past its end are dropped.
pub fn compress_plan(
    shape: &[usize],
    condition: &[bool],
    axis: Option<i64>,
) -> Result<(Vec<i64>, [usize; 2], Vec<usize>)> {
    const OP: &str = "Compress";
    let (view, k) = match axis {
        None => (vec![shape.iter().product()], 0),
        Some(a) => {
            let r = shape.len() as i64;
            if r == 0 || a < -r || a >= r {
                return Err(Error::invalid(
                    OP,
                    "axis",
                    format!("axis {a} is out of range for input of rank {r}"),
                ));
            }
            (shape.to_vec(), if a < 0 { a + r } else { a } as usize)
        }
    };
    let len = view[k];
    if condition.len() > len {
        return Err(Error::invalid(
            OP,
            "condition",
            format!(
                "condition holds {} values for an axis of {len}; it may be shorter, not longer",
                condition.len()
            ),
        ));
    }
    let kept: Vec<i64> = (0..condition.len() as i64)
        .filter(|&i| condition[i as usize])
        .collect();
    let before: usize = view[..k].iter().product();
    let after: usize = view[k + 1..].iter().product();
    // Rows of [before, len, after] seen as [before * len, after].
    let table: Vec<i64> = (0..before as i64)
        .flat_map(|p| kept.iter().map(move |&i| p * len as i64 + i))
        .collect();
    let mut out = view;
    out[k] = kept.len();
    Ok((table, [before * len, after], out))
}

impl Recorder {
    /// Records ONNX ReverseSequence: for each batch item, the first `lengths[item]` steps
    /// along the time axis reversed, the rest copied.
    pub fn reverse_sequence_to(
        &mut self,
        input: &Tensor,
        lengths: &[i64],
        time_axis: i64,
        batch_axis: i64,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("ReverseSequence", &[("input", input)])?;
        let table = reverse_sequence_rows(input.shape(), lengths, time_axis, batch_axis)?;
        let s = input.shape();
        let rows = s[0] * s[1];
        let rest: usize = s[2..].iter().product();
        self.rows_by_table(input, &[rows, rest], &table, s, out)
    }

    /// Records ONNX Compress: the slices along `axis` (of the input flattened when `None`)
    /// where `condition` is true.
    pub fn compress_to(
        &mut self,
        input: &Tensor,
        condition: &[bool],
        axis: Option<i64>,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("Compress", &[("input", input)])?;
        let (table, rows, shape) = compress_plan(input.shape(), condition, axis)?;
        self.rows_by_table(input, &rows, &table, &shape, out)
    }

    /// `input` seen as `rows` [count, length], its rows picked by `table`, as `shape`.
    fn rows_by_table(
        &mut self,
        input: &Tensor,
        rows: &[usize; 2],
        table: &[i64],
        shape: &[usize],
        out: Out,
    ) -> Result<Tensor> {
        if shape.contains(&0) || input.numel() == 0 {
            return out.tensor(self, input.dtype(), shape);
        }
        let index = self.upload(&HostTensor::from_vec(vec![table.len()], table)?)?;
        let y = self.gather_to(&input.reshaped(rows)?, &index, 0, Out::NEW)?;
        self.release(index);
        out.view(self, y.reshaped(shape)?)
    }
}

/// CenterCropPad's pads (all begins, then all ends, over every axis; negative ones crop) for
/// `input` of `shape` to `target` lengths along `axes` (every axis when `None`): centered,
/// the odd element cropped or padded at the end.
pub fn center_crop_pad_pads(
    shape: &[usize],
    target: &[i64],
    axes: Option<&[i64]>,
) -> Result<Vec<i64>> {
    const OP: &str = "CenterCropPad";
    let r = shape.len();
    let axes = super::distinct_axes(OP, r, axes)?;
    if target.len() != axes.len() {
        return Err(Error::invalid(
            OP,
            "shape",
            format!(
                "shape holds {} lengths for {} axes",
                target.len(),
                axes.len()
            ),
        ));
    }
    let mut pads = vec![0i64; 2 * r];
    for (&a, &want) in axes.iter().zip(target) {
        if !(0..=i32::MAX as i64).contains(&want) {
            return Err(Error::invalid(OP, "shape", format!("shape holds {want}")));
        }
        let d = want - shape[a] as i64;
        // d / 2 before and the rest after, rounding toward the start (crops and pads alike).
        let before = if d >= 0 { d / 2 } else { -((-d) / 2) };
        pads[a] = before;
        pads[r + a] = d - before;
    }
    Ok(pads)
}

impl Recorder {
    /// Records ONNX CenterCropPad: `input` cropped or zero-padded to `target` lengths along
    /// `axes`, centered. One Pad (negative pads crop).
    pub fn center_crop_pad_to(
        &mut self,
        input: &Tensor,
        target: &[i64],
        axes: Option<&[i64]>,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("CenterCropPad", &[("input_data", input)])?;
        let pads = center_crop_pad_pads(input.shape(), target, axes)?;
        self.pad_to(
            input,
            &pads,
            crate::kernels::pad::PadMode::Constant,
            None,
            None,
            out,
        )
    }
}
