//! ONNX LayerNormalization-17 and RMSNormalization-23 (the normalizations of transformer and
//! linear-attention language models), built from the reduction kernel and element-wise
//! programs as the ONNX reference implementation computes them: the mean (of the squares for
//! RMS) over the axes from `axis` on, `1 / sqrt(variance + epsilon)`, then the scaled (and
//! shifted) result. With `stash_type` 1 (float, the only one defined) f16 and bf16 inputs
//! are computed in f32 and rounded once; f64 stays f64. The mean and variance are reductions
//! that compute `x - mean` and the squares where they read them, never stored.

use super::widened;
use crate::kernels::program::{Arg, Program};
use crate::kernels::row_norm::{along_row, RowNorm};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

/// The type a normalization of `dtype` computes in, or an error naming `op`.
fn compute_type(op: &'static str, dtype: DType, stash_type: i64) -> Result<DType> {
    if stash_type != 1 {
        return Err(Error::invalid(
            op,
            "stash_type",
            format!("stash_type is {stash_type}; only 1 (float) is defined"),
        ));
    }
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Ok(DType::F32),
        DType::F64 => Ok(DType::F64),
        d => Err(Error::invalid(
            op,
            "X",
            format!("X is {d}; {op} takes f32, f16, bf16 or f64"),
        )),
    }
}

/// The axes from `axis` (negative from the end) to the last of a rank-`rank` tensor.
fn normalized_axes(op: &'static str, axis: i64, rank: usize) -> Result<Vec<i64>> {
    let r = rank as i64;
    if rank == 0 || axis < -r || axis >= r {
        return Err(Error::invalid(
            op,
            "axis",
            format!("axis {axis} is out of range for X of rank {rank}"),
        ));
    }
    let first = if axis < 0 { axis + r } else { axis };
    Ok((first..r).collect())
}

/// `input` (a scale or bias) checked to be of `x`'s dtype and to broadcast to `x`'s shape
/// without enlarging it.
fn check_affine(op: &'static str, name: &str, input: &Tensor, x: &Tensor) -> Result<()> {
    if input.dtype() != x.dtype() {
        return Err(Error::invalid(
            op,
            name,
            format!("{name} is {} but X is {}", input.dtype(), x.dtype()),
        ));
    }
    let shape = super::broadcast_shape(op, x.shape(), input.shape()).ok();
    if shape.as_deref() != Some(x.shape()) {
        return Err(Error::invalid(
            op,
            name,
            format!(
                "{name} {:?} does not broadcast to X {:?}",
                input.shape(),
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// `1 / sqrt(variance + epsilon)` from the operands `variance` and `epsilon` of `p`.
fn inverse_deviation(p: &mut Program, variance: u8, epsilon: u8, c: DType) -> Result<Arg> {
    let v = pushed(
        p,
        "Add",
        vec![Arg::Operand(variance), Arg::Operand(epsilon)],
        c,
    )?;
    let s = pushed(p, "Sqrt", vec![v], c)?;
    pushed(p, "Reciprocal", vec![s], c)
}

fn pushed(p: &mut Program, op: &'static str, args: Vec<Arg>, dtype: DType) -> Result<Arg> {
    p.push(op, args, dtype)
        .ok_or_else(|| Error::Graph(format!("internal: normalization has no {op} on {dtype}")))
}

impl Recorder {
    /// The mean over `axes` (kept as 1s) of `program`'s values over `leaves` (the first
    /// leaf's shape), computed where the reduction reads them.
    fn mean_over(&mut self, program: &Program, leaves: &[&Tensor], axes: &[i64]) -> Result<Tensor> {
        let shape = leaves[0].shape().to_vec();
        self.reduce_program_to(
            "ReduceMean",
            program,
            leaves,
            &shape,
            Some(axes),
            true,
            false,
            Out::NEW,
        )
    }

    /// Records ONNX LayerNormalization-17, `Y = (X - mean) / sqrt(variance + epsilon) *
    /// Scale + B` over the axes from `axis` on, and the mean and `1 / sqrt(variance +
    /// epsilon)` (f32, the reduced axes kept as 1) where `outputs` asks for them. Returns
    /// `[Y, Mean, InvStdDev]`, the last two `None` when not asked for.
    #[allow(clippy::too_many_arguments)]
    pub fn layer_normalization_to(
        &mut self,
        x: &Tensor,
        scale: &Tensor,
        bias: Option<&Tensor>,
        axis: i64,
        epsilon: f64,
        stash_type: i64,
        outputs: [Option<Out>; 3],
    ) -> Result<[Option<Tensor>; 3]> {
        const OP: &str = "LayerNormalization";
        let mut named = vec![("X", x), ("Scale", scale)];
        if let Some(b) = bias {
            named.push(("B", b));
        }
        self.check_inputs(OP, &named)?;
        let dtype = x.dtype();
        let c = compute_type(OP, dtype, stash_type)?;
        let axes = normalized_axes(OP, axis, x.rank())?;
        check_affine(OP, "Scale", scale, x)?;
        if let Some(b) = bias {
            check_affine(OP, "B", b, x)?;
        }
        let [y_out, mean_out, inv_out] = outputs;
        let row_affine = |t: Option<&Tensor>| t.is_none_or(|t| along_row(t, x, axes[0] as usize));
        if mean_out.is_none() && inv_out.is_none() && row_affine(Some(scale)) && row_affine(bias) {
            let n = x.shape()[axes[0] as usize..].iter().product();
            let y_out = y_out.unwrap_or(Out::NEW);
            let affine = [Some(scale), bias];
            if let Some(y) =
                self.row_norm_to(RowNorm::LayerNorm, x, n, affine, epsilon, y_out, x.shape())?
            {
                return Ok([Some(y), None, None]);
            }
        }
        // The mean, then the variance: a reduction of (x - mean)^2 computed as it is read.
        let mut square = Program::new(vec![dtype, c], false);
        let xc = widened(&mut square, Arg::Operand(0), dtype, c)?;
        let d = pushed(&mut square, "Sub", vec![xc, Arg::Operand(1)], c)?;
        pushed(&mut square, "Mul", vec![d, d], c)?;
        let mut wide = Program::new(vec![dtype], false);
        widened(&mut wide, Arg::Operand(0), dtype, c)?;
        let mean = self.mean_over(&wide, &[x], &axes)?;
        let variance = self.mean_over(&square, &[x, &mean], &axes)?;
        let eps = super::scalar_tensor(self, c, epsilon)?;
        // Y = (x - mean) * (1 / sqrt(variance + epsilon)) * scale + bias, in one program.
        let mut result = Program::new(vec![dtype, c, c, c, dtype], false);
        let xc = widened(&mut result, Arg::Operand(0), dtype, c)?;
        let d = pushed(&mut result, "Sub", vec![xc, Arg::Operand(1)], c)?;
        let inv = inverse_deviation(&mut result, 2, 3, c)?;
        let normalized = pushed(&mut result, "Mul", vec![d, inv], c)?;
        let sc = widened(&mut result, Arg::Operand(4), dtype, c)?;
        let mut y = pushed(&mut result, "Mul", vec![normalized, sc], c)?;
        let mut leaves = vec![x, &mean, &variance, &eps, scale];
        if let Some(b) = bias {
            let operand = result.add_operand(dtype);
            let bc = widened(&mut result, operand, dtype, c)?;
            y = pushed(&mut result, "Add", vec![y, bc], c)?;
            leaves.push(b);
        }
        if c != dtype {
            pushed(&mut result, "Cast", vec![y], dtype)?;
        }
        let y = self.program_to(&result, &leaves, y_out.unwrap_or(Out::NEW))?;
        let mean_result = match mean_out {
            Some(out) => Some(self.cast_to(&mean, DType::F32, out)?),
            None => None,
        };
        let inv_result = match inv_out {
            Some(out) => {
                let mut p = Program::new(vec![c, c], false);
                let inv = inverse_deviation(&mut p, 0, 1, c)?;
                if c != DType::F32 {
                    pushed(&mut p, "Cast", vec![inv], DType::F32)?;
                }
                Some(self.program_to(&p, &[&variance, &eps], out)?)
            }
            None => None,
        };
        self.release(variance);
        if mean_result.is_none() {
            self.release(mean);
        }
        Ok([Some(y), mean_result, inv_result])
    }

    /// Records ONNX RMSNormalization-23: `Y = X / sqrt(mean(X^2) + epsilon) * Scale` over the
    /// axes from `axis` on.
    pub fn rms_normalization_to(
        &mut self,
        x: &Tensor,
        scale: &Tensor,
        axis: i64,
        epsilon: f64,
        stash_type: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "RMSNormalization";
        self.check_inputs(OP, &[("X", x), ("Scale", scale)])?;
        let dtype = x.dtype();
        let c = compute_type(OP, dtype, stash_type)?;
        let axes = normalized_axes(OP, axis, x.rank())?;
        check_affine(OP, "Scale", scale, x)?;
        if along_row(scale, x, axes[0] as usize) {
            let n = x.shape()[axes[0] as usize..].iter().product();
            let affine = [Some(scale), None];
            if let Some(y) =
                self.row_norm_to(RowNorm::RmsNorm, x, n, affine, epsilon, out, x.shape())?
            {
                return Ok(y);
            }
        }
        let mut square = Program::new(vec![dtype], false);
        let xc = widened(&mut square, Arg::Operand(0), dtype, c)?;
        pushed(&mut square, "Mul", vec![xc, xc], c)?;
        let mean_square = self.mean_over(&square, &[x], &axes)?;
        let eps = super::scalar_tensor(self, c, epsilon)?;
        let mut result = Program::new(vec![dtype, c, c, dtype], false);
        let xc = widened(&mut result, Arg::Operand(0), dtype, c)?;
        let inv = inverse_deviation(&mut result, 1, 2, c)?;
        let normalized = pushed(&mut result, "Mul", vec![xc, inv], c)?;
        let sc = widened(&mut result, Arg::Operand(3), dtype, c)?;
        let y = pushed(&mut result, "Mul", vec![normalized, sc], c)?;
        if c != dtype {
            pushed(&mut result, "Cast", vec![y], dtype)?;
        }
        let y = self.program_to(&result, &[x, &mean_square, &eps, scale], out)?;
        self.release(mean_square);
        Ok(y)
    }
}

/// BatchNormalization's channel count: X's axis 1 (X is [N, C, ...]).
fn channels_of(x: &Tensor) -> Result<usize> {
    match x.shape() {
        [_, c, ..] => Ok(*c),
        _ => Err(Error::invalid(
            "BatchNormalization",
            "X",
            format!(
                "X has rank {}; it is [N, C, ...], of rank 2 or more",
                x.rank()
            ),
        )),
    }
}

impl Recorder {
    /// Records ONNX BatchNormalization-15 in inference mode, `Y = (X - mean) / sqrt(var +
    /// epsilon) * scale + B` per channel (axis 1 of X, of rank 2 or more): one element-wise
    /// program over X and the four per-channel vectors (each of X's float type or another,
    /// as the op's T1 and T2 allow), viewed as `[C, 1, ...]` to broadcast along the channel
    /// axis. f16 and bf16 are computed in f32 and rounded once; f64 stays f64.
    pub fn batch_normalization_to(
        &mut self,
        x: &Tensor,
        [scale, bias, mean, variance]: [&Tensor; 4],
        epsilon: f64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "BatchNormalization";
        let named = [
            ("X", x),
            ("scale", scale),
            ("B", bias),
            ("input_mean", mean),
            ("input_var", variance),
        ];
        self.check_inputs(OP, &named)?;
        let c = compute_type(OP, x.dtype(), 1)?;
        let channels = channels_of(x)?;
        // [C] viewed as [C, 1, ...]: aligned with X's axis 1.
        let per_channel: Vec<usize> = std::iter::once(channels)
            .chain(std::iter::repeat_n(1, x.rank() - 2))
            .collect();
        let mut views = Vec::with_capacity(4);
        for &(name, t) in &named[1..] {
            if !matches!(
                t.dtype(),
                DType::F32 | DType::F16 | DType::BF16 | DType::F64
            ) {
                return Err(Error::invalid(
                    OP,
                    name,
                    format!("{name} is {}; it takes a float type", t.dtype()),
                ));
            }
            if t.shape() != [channels] {
                return Err(Error::invalid(
                    OP,
                    name,
                    format!(
                        "{name} {:?} is not [C] = [{channels}] (X is {:?})",
                        t.shape(),
                        x.shape()
                    ),
                ));
            }
            views.push(t.reshaped(&per_channel)?);
        }
        let dtypes: Vec<DType> = named.iter().map(|(_, t)| t.dtype()).collect();
        let mut p = Program::new(dtypes.clone(), false);
        let mut wide = Vec::with_capacity(5);
        for (k, &d) in dtypes.iter().enumerate() {
            wide.push(widened(&mut p, Arg::Operand(k as u8), d, c)?);
        }
        let eps = Arg::literal(c, epsilon).ok_or_else(|| {
            Error::invalid(
                OP,
                "epsilon",
                format!("epsilon {epsilon} is not a finite number"),
            )
        })?;
        let centered = pushed(&mut p, "Sub", vec![wide[0], wide[3]], c)?;
        let v = pushed(&mut p, "Add", vec![wide[4], eps], c)?;
        let deviation = pushed(&mut p, "Sqrt", vec![v], c)?;
        let normalized = pushed(&mut p, "Div", vec![centered, deviation], c)?;
        let scaled = pushed(&mut p, "Mul", vec![normalized, wide[1]], c)?;
        let y = pushed(&mut p, "Add", vec![scaled, wide[2]], c)?;
        if c != x.dtype() {
            pushed(&mut p, "Cast", vec![y], x.dtype())?;
        }
        let inputs: Vec<&Tensor> = std::iter::once(x).chain(views.iter()).collect();
        self.program_to(&p, &inputs, out)
    }
}

impl Recorder {
    /// Records ONNX BatchNormalization-15 in training mode: X normalized by its own
    /// statistics per channel (the mean and the biased variance over every axis but 1), and
    /// the running statistics `input_mean * momentum + mean * (1 - momentum)` (likewise the
    /// variance), of input_mean's and input_var's types, as ONNX's reference computes them.
    /// Returns `[Y, running_mean, running_var]`.
    pub fn batch_normalization_training_to(
        &mut self,
        x: &Tensor,
        [scale, bias, mean, variance]: [&Tensor; 4],
        epsilon: f64,
        momentum: f64,
        outs: [Out; 3],
    ) -> Result<[Tensor; 3]> {
        const OP: &str = "BatchNormalization";
        self.check_inputs(OP, &[("X", x)])?;
        let c = compute_type(OP, x.dtype(), 1)?;
        let channels = channels_of(x)?;
        let axes: Vec<i64> = (0..x.rank() as i64).filter(|&a| a != 1).collect();
        // The batch's mean, then the mean of the squared deviations from it (computed where
        // the reduction reads them), both [1, C, 1, ...] in the compute type.
        let mut value = Program::new(vec![x.dtype()], false);
        widened(&mut value, Arg::Operand(0), x.dtype(), c)?;
        let batch_mean = self.mean_over(&value, &[x], &axes)?;
        let mut square = Program::new(vec![x.dtype(), c], false);
        let xc = widened(&mut square, Arg::Operand(0), x.dtype(), c)?;
        let d = pushed(&mut square, "Sub", vec![xc, Arg::Operand(1)], c)?;
        pushed(&mut square, "Mul", vec![d, d], c)?;
        let batch_var = self.mean_over(&square, &[x, &batch_mean], &axes)?;
        let (batch_mean, batch_var) = (
            batch_mean.reshaped(&[channels])?,
            batch_var.reshaped(&[channels])?,
        );
        let [y_out, mean_out, var_out] = outs;
        let y =
            self.batch_normalization_to(x, [scale, bias, &batch_mean, &batch_var], epsilon, y_out)?;
        let keep = Arg::literal(c, momentum);
        let take = Arg::literal(c, 1.0 - momentum);
        let (Some(keep), Some(take)) = (keep, take) else {
            return Err(Error::invalid(
                OP,
                "momentum",
                format!("momentum {momentum} is not a finite number"),
            ));
        };
        let mut running = |given: &Tensor, batch: &Tensor, out: Out| -> Result<Tensor> {
            let mut p = Program::new(vec![given.dtype(), c], false);
            let g = widened(&mut p, Arg::Operand(0), given.dtype(), c)?;
            let kept = pushed(&mut p, "Mul", vec![g, keep], c)?;
            let added = pushed(&mut p, "Mul", vec![Arg::Operand(1), take], c)?;
            let sum = pushed(&mut p, "Add", vec![kept, added], c)?;
            if given.dtype() != c {
                pushed(&mut p, "Cast", vec![sum], given.dtype())?;
            }
            self.program_to(&p, &[given, batch], out)
        };
        let running_mean = running(mean, &batch_mean, mean_out)?;
        let running_var = running(variance, &batch_var, var_out)?;
        self.release(batch_mean);
        self.release(batch_var);
        Ok([y, running_mean, running_var])
    }
}

impl Recorder {
    /// Records ONNX InstanceNormalization (`groups` None: one group per channel) or
    /// GroupNormalization-21 (`groups` of the channels each): `Y = (X - mean) /
    /// sqrt(variance + epsilon) * scale + B`, the mean and variance over each group's channels and the
    /// spatial axes of one image, `scale` and `B` per channel (`[C]`; GroupNormalization-18's
    /// per-group `[groups]` too). X is `[N, C, ...]`; f16 and bf16 are computed in f32.
    #[allow(clippy::too_many_arguments)]
    pub fn channel_normalization_to(
        &mut self,
        op: &'static str,
        x: &Tensor,
        scale: &Tensor,
        bias: &Tensor,
        groups: Option<i64>,
        epsilon: f64,
        stash_type: i64,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(op, &[("X", x), ("scale", scale), ("B", bias)])?;
        let dtype = x.dtype();
        let c_type = compute_type(op, dtype, stash_type)?;
        if x.rank() < 2 {
            return Err(Error::invalid(
                op,
                "X",
                format!("X has shape {:?}; {op} takes [N, C, ...]", x.shape()),
            ));
        }
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let spatial: usize = x.shape()[2..].iter().product();
        let g = match groups {
            None => c,
            Some(g) => usize::try_from(g)
                .ok()
                .filter(|&g| g >= 1 && c.is_multiple_of(g))
                .ok_or_else(|| {
                    Error::invalid(
                        op,
                        "num_groups",
                        format!(
                            "num_groups is {g}; it must be at least 1 and divide the {c} channels"
                        ),
                    )
                })?,
        };
        let per = c / g;
        for (name, t) in [("scale", scale), ("B", bias)] {
            if t.dtype() != dtype {
                return Err(Error::invalid(
                    op,
                    name,
                    format!("{name} is {} but X is {dtype}", t.dtype()),
                ));
            }
            if t.shape() != [c] && t.shape() != [g] {
                return Err(Error::invalid(
                    op,
                    name,
                    format!(
                        "{name} has shape {:?}; it must be [{c}] (one per channel)",
                        t.shape()
                    ),
                ));
            }
        }
        if x.numel() == 0 {
            return out.tensor(self, dtype, x.shape());
        }
        let view = x.reshaped(&[n, g, per, spatial])?;
        let affine = |t: &Tensor| {
            if t.shape() == [c] {
                t.reshaped(&[g, per, 1])
            } else {
                t.reshaped(&[g, 1, 1])
            }
        };
        let (scale, bias) = (affine(scale)?, affine(bias)?);
        let axes = [2i64, 3];
        let mut square = Program::new(vec![dtype, c_type], false);
        let xc = widened(&mut square, Arg::Operand(0), dtype, c_type)?;
        let d = pushed(&mut square, "Sub", vec![xc, Arg::Operand(1)], c_type)?;
        pushed(&mut square, "Mul", vec![d, d], c_type)?;
        let mut wide = Program::new(vec![dtype], false);
        widened(&mut wide, Arg::Operand(0), dtype, c_type)?;
        let mean = self.mean_over(&wide, &[&view], &axes)?;
        let variance = self.mean_over(&square, &[&view, &mean], &axes)?;
        let eps = super::scalar_tensor(self, c_type, epsilon)?;
        let mut result = Program::new(vec![dtype, c_type, c_type, c_type, dtype, dtype], false);
        let xc = widened(&mut result, Arg::Operand(0), dtype, c_type)?;
        let d = pushed(&mut result, "Sub", vec![xc, Arg::Operand(1)], c_type)?;
        let inv = inverse_deviation(&mut result, 2, 3, c_type)?;
        let normalized = pushed(&mut result, "Mul", vec![d, inv], c_type)?;
        let sc = widened(&mut result, Arg::Operand(4), dtype, c_type)?;
        let scaled = pushed(&mut result, "Mul", vec![normalized, sc], c_type)?;
        let bc = widened(&mut result, Arg::Operand(5), dtype, c_type)?;
        let y = pushed(&mut result, "Add", vec![scaled, bc], c_type)?;
        if c_type != dtype {
            pushed(&mut result, "Cast", vec![y], dtype)?;
        }
        let y = self.program_to(
            &result,
            &[&view, &mean, &variance, &eps, &scale, &bias],
            Out::NEW,
        )?;
        for t in [mean, variance, eps] {
            self.release(t);
        }
        out.view(self, y.reshaped(x.shape())?)
    }
}
