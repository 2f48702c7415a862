//! ONNX ops built from the others: `Gemm` (a MatMul with transposed operands and an epilogue),
//! `Split` (one dispatch for parts of whole words, else slices), `DepthToSpace` and
//! `SpaceToDepth` (a view, one transpose, a view).

use crate::kernels::concat::Direction;
use crate::ops::elementwise::{Arg, Program};
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Slice, Tensor};

impl Recorder {
    /// A one-element tensor of `dtype` holding `value` (converted as Cast converts).
    fn scalar(&mut self, value: f64, dtype: DType) -> Result<Tensor> {
        self.host_values(dtype, &[], &[value])
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
        // The epilogue computes as the MatMul kernel does: 64-bit types on the emulation
        // where the adapter lacks them.
        let emulate64 =
            crate::kernels::words::emulates_64_bit(self.context().features(), &[dtype], dtype);
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
        // Parts of whole 32-bit words in each row: one dispatch for up to 6 of them.
        let elem = input.dtype().size() as u64;
        let outer: u64 = input.shape()[..k].iter().map(|&d| d as u64).product();
        let slab: u64 = input.shape()[k + 1..].iter().map(|&d| d as u64).product();
        let bytes: Vec<u64> = sizes.iter().map(|&n| n as u64 * slab * elem).collect();
        if sizes.len() > 1 && outer > 0 && bytes.iter().all(|b| b.is_multiple_of(4)) {
            let mut made = Vec::with_capacity(sizes.len());
            for (&n, out) in sizes.iter().zip(&outs) {
                let mut shape = input.shape().to_vec();
                shape[k] = n;
                made.push(out.tensor(self, input.dtype(), &shape)?);
            }
            let refs: Vec<&Tensor> = made.iter().collect();
            let runs: Vec<u64> = bytes.iter().map(|b| b / 4).collect();
            if self.move_parts(Direction::Split, input, &refs, &runs, outer)? {
                return Ok(made);
            }
            for (t, out) in made.into_iter().zip(&outs) {
                if out.placed().is_none() {
                    self.release(t);
                }
            }
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

impl Recorder {
    /// Records ONNX OneHot: for each index (any numeric dtype, truncated to an integer;
    /// negative ones count back from `depth`), a row of `depth` values along `axis` of the
    /// output (in `[-r - 1, r]` for indices of rank `r`), `on` where the row's position is the
    /// index and `off` elsewhere (everywhere for an index out of range). One fused kernel:
    /// the indices broadcast against the positions `0..depth`.
    pub fn one_hot_to(
        &mut self,
        indices: &Tensor,
        depth: i64,
        off: &Tensor,
        on: &Tensor,
        axis: i64,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "OneHot";
        self.check_inputs(OP, &[("indices", indices), ("values", off), ("values", on)])?;
        let r = indices.rank() as i64;
        if axis < -r - 1 || axis > r {
            return Err(Error::invalid(
                OP,
                "axis",
                format!(
                    "axis {axis} is out of range for indices of rank {r} (from -{} to {r})",
                    r + 1
                ),
            ));
        }
        let axis = if axis < 0 { axis + r + 1 } else { axis } as usize;
        if depth < 1 {
            return Err(Error::invalid(
                OP,
                "depth",
                format!("depth is {depth}; it must be 1 or more"),
            ));
        }
        // The positions 0..depth are one tensor the kernel binds.
        let limit = self.context().binding_limit();
        if (depth as u64).saturating_mul(8) > limit {
            return Err(Error::invalid(
                OP,
                "depth",
                format!("depth {depth} needs more than one binding's {limit} bytes"),
            ));
        }
        if indices.dtype() == DType::Bool {
            return Err(Error::invalid(
                OP,
                "indices",
                "indices must be numbers, not bool",
            ));
        }
        let mut shape = indices.shape().to_vec();
        shape.insert(axis, 1);
        let indices = indices.reshaped(&shape)?;
        let mut positions_shape = vec![1usize; shape.len() - axis];
        positions_shape[0] = depth as usize;
        let positions: Vec<i64> = (0..depth).collect();
        let positions = self.upload(&HostTensor::from_vec(positions_shape, &positions)?)?;
        let zero = self.scalar(0.0, DType::I64)?;
        let count = self.scalar(depth as f64, DType::I64)?;
        let value = on.dtype();
        let emulate64 = crate::kernels::words::emulates_64_bit(
            self.context().features(),
            &[indices.dtype(), DType::I64],
            value,
        );
        let mut program = Program::new(vec![indices.dtype()], emulate64);
        let fail = || Error::invalid(OP, "indices", "no kernel for these dtypes");
        let mut index = Arg::Operand(0);
        if indices.dtype() != DType::I64 {
            index = program
                .push("Cast", vec![index], DType::I64)
                .ok_or_else(fail)?;
        }
        let [zero_arg, count_arg, position, on_arg, off_arg] =
            [DType::I64, DType::I64, DType::I64, value, value].map(|d| program.add_operand(d));
        let negative = program
            .push("Less", vec![index, zero_arg], DType::Bool)
            .ok_or_else(fail)?;
        let wrapped = program
            .push("Add", vec![index, count_arg], DType::I64)
            .ok_or_else(fail)?;
        let index = program
            .push("Where", vec![negative, wrapped, index], DType::I64)
            .ok_or_else(fail)?;
        let hit = program
            .push("Equal", vec![index, position], DType::Bool)
            .ok_or_else(fail)?;
        program
            .push("Where", vec![hit, on_arg, off_arg], value)
            .ok_or_else(fail)?;
        let inputs = [&indices, &zero, &count, &positions, on, off];
        let y = self.program_to(&program, &inputs, out);
        for t in [zero, count, positions] {
            self.release(t);
        }
        y
    }

    /// Records ONNX Hardmax: 1 at the first largest element along `axis` (of `[-r, r)`),
    /// 0 elsewhere, in `x`'s dtype; `coerce_2d` (before opset 13): over all axes from `axis`
    /// on at once, as one row. An ArgMax, then OneHot's kernel.
    pub fn hardmax_to(
        &mut self,
        x: &Tensor,
        axis: i64,
        coerce_2d: bool,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Hardmax";
        self.check_inputs(OP, &[("input", x)])?;
        let r = x.rank() as i64;
        if r == 0 || axis < -r || axis >= r {
            return Err(Error::invalid(
                OP,
                "axis",
                format!("axis {axis} is out of range for input of rank {r}"),
            ));
        }
        let k = if axis < 0 { axis + r } else { axis } as usize;
        let (rows, k) = if coerce_2d {
            let before: usize = x.shape()[..k].iter().product();
            let after: usize = x.shape()[k..].iter().product();
            (x.reshaped(&[before, after])?, 1)
        } else {
            (x.clone(), k)
        };
        let depth = rows.shape()[k];
        if depth == 0 || rows.numel() == 0 {
            return out.view(self, Tensor::uninit(self.context(), x.dtype(), x.shape())?);
        }
        let largest = self.arg_reduce_to("ArgMax", &rows, k as i64, false, false, Out::NEW)?;
        let one = self.scalar(1.0, x.dtype())?;
        let zero = self.scalar(0.0, x.dtype())?;
        let y = self.one_hot_to(&largest, depth as i64, &zero, &one, k as i64, Out::NEW)?;
        for t in [largest, one, zero] {
            self.release(t);
        }
        out.view(self, y.reshaped(x.shape())?)
    }
}
