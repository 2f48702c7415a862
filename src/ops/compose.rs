//! ONNX ops built from the others: `Gemm` (a MatMul with transposed operands and an epilogue),
//! `Split` (slices), `DepthToSpace` and `SpaceToDepth` (a view, one transpose, a view).

use crate::ops::elementwise::{Arg, Program};
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Slice, Tensor};

impl Recorder {
    /// A one-element tensor of `dtype` holding `value` (converted as Cast converts).
    fn scalar(&mut self, value: f64, dtype: DType) -> Result<Tensor> {
        let v = HostTensor::from_vec(Vec::new(), &[value])?;
        Tensor::from_host(self.context(), &crate::reference::cast_host(&v, dtype)?)
    }

    /// Records ONNX Gemm: `alpha * A' B' + beta * C`, with `A'` = `A` transposed when
    /// `trans_a` (and `B'` likewise), `C` broadcast to the product's shape.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_to(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        c: Option<&Tensor>,
        alpha: f64,
        beta: f64,
        trans_a: bool,
        trans_b: bool,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Gemm";
        for (name, t) in [("A", a), ("B", b)] {
            if t.rank() != 2 {
                return Err(Error::invalid(
                    OP,
                    name,
                    format!("{name} has shape {:?}; Gemm takes matrices", t.shape()),
                ));
            }
        }
        // One dispatch: the operands read transposed in place, `alpha * sum + beta * C` as
        // the MatMul's epilogue (the product, then the program, where it cannot be).
        let dtype = a.dtype();
        let emulate64 = !self
            .context()
            .features()
            .contains(wgpu::Features::SHADER_INT64);
        let mut program = Program::new(vec![dtype], emulate64);
        let mut leaves = Vec::new();
        let mut acc = Arg::Operand(0);
        if alpha != 1.0 {
            leaves.push(self.scalar(alpha, dtype)?);
            let s = program.add_operand(dtype);
            acc = program
                .push("Mul", vec![acc, s], dtype)
                .ok_or_else(|| Error::invalid(OP, "A", format!("alpha cannot scale {dtype}")))?;
        }
        if let Some(c) = c {
            leaves.push(c.clone());
            let mut term = program.add_operand(c.dtype());
            if beta != 1.0 {
                leaves.push(self.scalar(beta, c.dtype())?);
                let s = program.add_operand(c.dtype());
                term = program
                    .push("Mul", vec![term, s], c.dtype())
                    .ok_or_else(|| {
                        Error::invalid(OP, "C", format!("beta cannot scale {}", c.dtype()))
                    })?;
            }
            program.push("Add", vec![acc, term], dtype).ok_or_else(|| {
                Error::invalid(OP, "C", format!("C is {} but A is {dtype}", c.dtype()))
            })?;
        }
        if program.steps().is_empty() {
            return self.matmul_transposed_to(a, b, trans_a, trans_b, out);
        }
        let refs: Vec<&Tensor> = leaves.iter().collect();
        let y = self.matmul_fused_to(a, b, [trans_a, trans_b], &program, &refs, out);
        for t in leaves {
            self.release(t);
        }
        y
    }

    /// Records ONNX Split of `input` along `axis` into parts of `sizes` elements (their sum
    /// must be the axis's length), written to `outs` in order.
    pub fn split_to(
        &mut self,
        input: &Tensor,
        axis: i64,
        sizes: &[usize],
        outs: Vec<Out>,
    ) -> Result<Vec<Tensor>> {
        const OP: &str = "Split";
        let rank = input.rank() as i64;
        if axis < -rank || axis >= rank {
            return Err(Error::invalid(
                OP,
                "axis",
                format!("axis {axis} is out of range for rank {rank}"),
            ));
        }
        let k = if axis < 0 { axis + rank } else { axis } as usize;
        let dim = input.shape()[k];
        if sizes.iter().sum::<usize>() != dim || sizes.len() != outs.len() {
            return Err(Error::invalid(
                OP,
                "split",
                format!(
                    "split {sizes:?} into {} outputs does not cover axis {axis} of size {dim}",
                    outs.len()
                ),
            ));
        }
        let mut start = 0i64;
        let mut parts = Vec::with_capacity(sizes.len());
        for (&n, out) in sizes.iter().zip(outs) {
            let stop = start + n as i64;
            let s = Slice::new(vec![start], vec![stop], vec![1i64]).axes(vec![k as i64]);
            parts.push(s.record(self, input, out)?);
            start = stop;
        }
        Ok(parts)
    }

    /// Records ONNX DepthToSpace (`mode` "DCR" or "CRD") or SpaceToDepth of an NCHW `input`
    /// with block `blocksize`: a reshape (view), one transpose, a reshape.
    pub fn depth_space_to(
        &mut self,
        op: &str,
        input: &Tensor,
        blocksize: i64,
        mode: &str,
        out: Out,
    ) -> Result<Tensor> {
        let op: &'static str = match op {
            "DepthToSpace" => "DepthToSpace",
            "SpaceToDepth" => "SpaceToDepth",
            _ => return Err(Error::Graph(format!("unknown op '{op}'"))),
        };
        let [n, c, h, w] = <[usize; 4]>::try_from(input.shape()).map_err(|_| {
            Error::invalid(
                op,
                "input",
                format!(
                    "input has shape {:?}; {op} takes NCHW (rank 4)",
                    input.shape()
                ),
            )
        })?;
        let b = usize::try_from(blocksize)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    "blocksize",
                    format!("blocksize is {blocksize}; it must be positive"),
                )
            })?;
        let (view, perm, shape): (Vec<usize>, [i64; 6], Vec<usize>) = match (op, mode) {
            ("DepthToSpace", _) if c % (b * b) != 0 => {
                return Err(Error::invalid(
                    op,
                    "input",
                    format!(
                        "input has {c} channels, not a multiple of blocksize^2 = {}",
                        b * b
                    ),
                ))
            }
            ("DepthToSpace", "DCR") => (
                vec![n, b, b, c / (b * b), h, w],
                [0, 3, 4, 1, 5, 2],
                vec![n, c / (b * b), h * b, w * b],
            ),
            ("DepthToSpace", "CRD") => (
                vec![n, c / (b * b), b, b, h, w],
                [0, 1, 4, 2, 5, 3],
                vec![n, c / (b * b), h * b, w * b],
            ),
            _ if h % b != 0 || w % b != 0 => {
                return Err(Error::invalid(
                    op,
                    "input",
                    format!("input is {h} x {w}, not a multiple of blocksize {b}"),
                ))
            }
            (_, "DCR") => (
                vec![n, c, h / b, b, w / b, b],
                [0, 3, 5, 1, 2, 4],
                vec![n, c * b * b, h / b, w / b],
            ),
            // The inverse of DepthToSpace's CRD: depth is (channel, block row, block column).
            (_, "CRD") => (
                vec![n, c, h / b, b, w / b, b],
                [0, 1, 3, 5, 2, 4],
                vec![n, c * b * b, h / b, w / b],
            ),
            (_, other) => {
                return Err(Error::invalid(
                    op,
                    "mode",
                    format!("mode is '{}'; it is DCR or CRD", other.escape_debug()),
                ))
            }
        };
        let moved = self.transpose_to(&input.reshaped(&view)?, Some(&perm), Out::NEW)?;
        out.view(self, moved.reshaped(&shape)?)
    }
}
