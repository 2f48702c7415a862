//! ONNX reductions: `ReduceSum ReduceSumSquare ReduceMean ReduceMax ReduceMin ReduceProd
//! ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp` over any set of axes, and `ArgMax ArgMin`
//! over one. Validation and output shapes here; the workgroup-tree kernel in
//! [`crate::kernels::reduce`].

use crate::kernels::program::{Program, Values};
use crate::kernels::reduce::{defined, prologue_fits, stored_dtype, ReduceWalk, OPS};
use crate::kernels::row_norm::RowNorm;
use crate::kernels::words::Class;
use crate::{DType, Error, Out, Recorder, Result, Tensor};

/// `axes` (negative counted from the end) as sorted distinct axes of a rank-`rank` input.
pub fn normalize_axes(op: &'static str, rank: usize, axes: &[i64]) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(Error::invalid(
                op,
                "axes",
                format!("axis {a} is out of range for rank {rank}"),
            ));
        }
        let k = (if a < 0 { a + r } else { a }) as usize;
        if out.contains(&k) {
            return Err(Error::invalid(
                op,
                "axes",
                format!("axis {a} is given twice"),
            ));
        }
        out.push(k);
    }
    out.sort_unstable();
    Ok(out)
}

/// The shape after reducing `axes` of `shape`.
pub fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|k| match (axes.contains(&k), keepdims) {
            (false, _) => Some(shape[k]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

fn check_dtype(op: &'static str, input: &str, dtype: DType) -> Result<()> {
    if defined(op, dtype) {
        return Ok(());
    }
    let ok: Vec<&str> = DType::ALL
        .into_iter()
        .filter(|&d| defined(op, d))
        .map(DType::name)
        .collect();
    Err(Error::invalid(
        op,
        input,
        format!("{input} is {dtype}; {op} takes {}", ok.join(", ")),
    ))
}

/// The reduction op named `op` (`ReduceSum`, ...).
fn reduction(op: &str) -> Result<&'static str> {
    OPS.into_iter()
        .find(|o| *o == op && o.starts_with("Reduce"))
        .ok_or_else(|| Error::Graph(format!("unknown reduction '{op}'")))
}

/// Whether reduction `op` of one element is not the element itself: with
/// `noop_with_empty_axes` and no axes, onnxruntime and the ONNX reference reduce each element
/// alone, which gives x² (ReduceSumSquare), |x| (ReduceL1), sqrt(x²) (ReduceL2, so squares
/// that overflow give infinity) and log x (ReduceLogSum); the other reductions leave it as it is.
pub(crate) fn transforms_elements(op: &str) -> bool {
    matches!(
        op,
        "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSum"
    )
}

/// The normalized axes of a reduction and its output's shape.
struct ReducePlan {
    axes: Vec<usize>,
    shape: Vec<usize>,
}

/// Checks reduction `op` of a `dtype` input of `shape` and plans it; `None` when it is the
/// identity (no axes, `noop_with_empty_axes`).
fn plan(
    rec: &Recorder,
    op: &'static str,
    dtype: DType,
    shape: &[usize],
    axes: Option<&[i64]>,
    keepdims: bool,
    noop_with_empty_axes: bool,
) -> Result<Option<ReducePlan>> {
    check_dtype(op, "data", dtype)?;
    // f64 reductions run on the emulation without the feature, but those that need exp and
    // log.
    if crate::kernels::reduce::emulated_f64_op_lines(op).is_none()
        || !crate::kernels::operands::emulates_f64(rec.context(), dtype)
    {
        super::elementwise::require_f64_feature(rec.context(), op, "data", dtype)?;
    }
    let axes = match axes {
        Some(a) if !a.is_empty() => normalize_axes(op, shape.len(), a)?,
        _ if noop_with_empty_axes && !transforms_elements(op) => return Ok(None),
        // Each element reduced alone (over no axes).
        _ if noop_with_empty_axes => Vec::new(),
        _ => (0..shape.len()).collect(),
    };
    Ok(Some(ReducePlan {
        shape: reduced_shape(shape, &axes, keepdims),
        axes,
    }))
}

impl Recorder {
    /// Records ONNX reduction `op` (`ReduceSum`, ...) of `data` over `axes` (all axes when
    /// `None` or empty, unless `noop_with_empty_axes`, which reduces each element alone: the
    /// identity but for the ops that transform their elements, `transforms_elements`), keeping
    /// reduced axes as 1s when `keepdims`. Floats accumulate in f32 (f16 and bf16 rounded
    /// once at the end) or f64; integers wrap.
    pub fn reduce_to(
        &mut self,
        op: &str,
        data: &Tensor,
        axes: Option<&[i64]>,
        keepdims: bool,
        noop_with_empty_axes: bool,
        out: Out,
    ) -> Result<Tensor> {
        let op = reduction(op)?;
        self.check_inputs(op, &[("data", data)])?;
        let ReducePlan { axes, shape } = match plan(
            self,
            op,
            data.dtype(),
            data.shape(),
            axes,
            keepdims,
            noop_with_empty_axes,
        )? {
            Some(p) => p,
            None => return out.view(self, data.clone()),
        };
        self.reduce_planned(op, Values::Tensor(data), &axes, &shape, out)
    }

    /// Records reduction `op` (as [`Recorder::reduce_to`]) of the values `program` computes
    /// over `inputs` (numpy broadcasting across them, checked as [`Recorder::program_to`]
    /// checks them), computed where the reduction reads them, with no tensor of their own,
    /// where the kernel can.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_fused_to(
        &mut self,
        op: &str,
        program: &Program,
        inputs: &[&Tensor],
        axes: Option<&[i64]>,
        keepdims: bool,
        noop_with_empty_axes: bool,
        out: Out,
    ) -> Result<Tensor> {
        let (_, shape) = self.program_shape(program, inputs)?;
        self.reduce_program_to(
            op,
            program,
            inputs,
            &shape,
            axes,
            keepdims,
            noop_with_empty_axes,
            out,
        )
    }

    /// Records reduction `op` (as [`Recorder::reduce_to`]) of the values of `program` over
    /// `leaves`, of `shape`: the reduction computes them where it reads them (a prologue),
    /// with no tensor of their own, where the kernel can ([`prologue_fits`]); else they are
    /// computed first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_program_to(
        &mut self,
        op: &str,
        program: &Program,
        leaves: &[&Tensor],
        shape: &[usize],
        axes: Option<&[i64]>,
        keepdims: bool,
        noop_with_empty_axes: bool,
        out: Out,
    ) -> Result<Tensor> {
        let op = reduction(op)?;
        let named: Vec<(&str, &Tensor)> = leaves.iter().map(|t| ("data", *t)).collect();
        self.check_inputs(op, &named)?;
        let dtype = program.out();
        let planned = plan(self, op, dtype, shape, axes, keepdims, noop_with_empty_axes)?;
        let (
            Some(ReducePlan {
                axes,
                shape: reduced,
            }),
            true,
        ) = (
            planned,
            prologue_fits(self.context(), program, leaves, shape),
        )
        else {
            let data = self.program_to(program, leaves, Out::NEW)?;
            let data = data.reshaped(shape)?;
            let axes: Option<Vec<i64>> = axes.map(<[i64]>::to_vec);
            let result = self.reduce_to(
                op,
                &data,
                axes.as_deref(),
                keepdims,
                noop_with_empty_axes,
                out,
            );
            self.release(data);
            return result;
        };
        let data = Values::Program {
            program,
            leaves,
            shape,
        };
        self.reduce_planned(op, data, &axes, &reduced, out)
    }

    /// The reduction of `data` over `axes` (normalized) into a tensor of `shape`.
    fn reduce_planned(
        &mut self,
        op: &'static str,
        data: Values<'_>,
        axes: &[usize],
        shape: &[usize],
        out: Out,
    ) -> Result<Tensor> {
        let walk = ReduceWalk::over_axes(data.shape(), axes);
        self.reduce_walked(op, data, &walk, shape, out)
    }

    /// Reduction `op` (`ReduceSum`, ..., ArgMax, ...; checked by the caller) of the elements
    /// of `data` that `walk` reads, into a tensor of `shape` (the kept extents), of `data`'s
    /// dtype (the Arg ops: i64).
    pub(crate) fn reduce_walked(
        &mut self,
        op: &'static str,
        data: Values<'_>,
        walk: &ReduceWalk,
        shape: &[usize],
        out: Out,
    ) -> Result<Tensor> {
        let stored = stored_dtype(op, data.dtype());
        if stored == data.dtype() || op.starts_with("Arg") {
            let out = out.tensor(self, stored, shape)?;
            self.reduce_walk_or_compute(op, data, walk, &out)?;
            return Ok(out);
        }
        // Narrow dtypes: reduce in the wide type, then round or wrap once.
        let wide = self.alloc(stored, shape)?;
        self.reduce_walk_or_compute(op, data, walk, &wide)?;
        let result = self.cast_to(&wide, data.dtype(), out);
        self.release(wide);
        result
    }

    /// [`Recorder::reduce_walk_into`], but a program's values are computed first where `out`
    /// does not fit one binding: the prologue's kernel binds its output whole, while a
    /// tensor's reduction runs in windows of rows.
    fn reduce_walk_or_compute(
        &mut self,
        op: &'static str,
        data: Values<'_>,
        walk: &ReduceWalk,
        out: &Tensor,
    ) -> Result<()> {
        let limit = self.context().binding_limit();
        let Values::Program {
            program,
            leaves,
            shape,
        } = data
        else {
            return self.reduce_walk_into(op, data, walk, out);
        };
        if out.storage().fits_one_binding(limit) {
            return self.reduce_walk_into(op, data, walk, out);
        }
        let values = self
            .program_to(program, leaves, Out::NEW)?
            .reshaped(shape)?;
        let result = self.reduce_walk_into(op, Values::Tensor(&values), walk, out);
        self.release(values);
        result
    }

    /// Records ONNX ArgMax or ArgMin of `data` along `axis`: i64 positions of the first (or
    /// with `select_last_index` the last) largest or smallest value.
    pub fn arg_reduce_to(
        &mut self,
        op: &str,
        data: &Tensor,
        axis: i64,
        keepdims: bool,
        select_last_index: bool,
        out: Out,
    ) -> Result<Tensor> {
        let (op, kernel): (&'static str, &'static str) = match (op, select_last_index) {
            ("ArgMax", false) => ("ArgMax", "ArgMax"),
            ("ArgMax", true) => ("ArgMax", "ArgMaxLast"),
            ("ArgMin", false) => ("ArgMin", "ArgMin"),
            ("ArgMin", true) => ("ArgMin", "ArgMinLast"),
            _ => return Err(Error::Graph(format!("unknown arg reduction '{op}'"))),
        };
        self.check_inputs(op, &[("data", data)])?;
        check_dtype(op, "data", data.dtype())?;
        let axes = normalize_axes(op, data.rank(), &[axis])?;
        if data.shape()[axes[0]] == 0 {
            return Err(Error::invalid(
                op,
                "data",
                format!(
                    "axis {axis} of data {:?} is empty: no position to give",
                    data.shape()
                ),
            ));
        }
        let shape = reduced_shape(data.shape(), &axes, keepdims);
        let out = out.tensor(self, DType::I64, &shape)?;
        self.reduce_into(kernel, Values::Tensor(data), &axes, &out)?;
        Ok(out)
    }
}

impl Recorder {
    /// Records ONNX Softmax or LogSoftmax of `input` along `axis` (opset 13). With
    /// `coerce_2d` (Softmax-1 and -11), the input is seen as 2-D, `[prod(dims[..axis]),
    /// prod(dims[axis..])]`, and normalized over its second axis. Built from the reduction
    /// kernel and element-wise programs: the row maximum is subtracted before `exp`, so large
    /// inputs do not overflow. f16 and bf16 follow the ONNX function body that defines the op
    /// (ReduceMax, Sub, Exp, ReduceSum, then Div, or Log and Sub): each step rounds to the
    /// type, and the sum accumulates in f32 like every 16-bit reduction.
    pub fn softmax_to(
        &mut self,
        op: &str,
        input: &Tensor,
        axis: i64,
        coerce_2d: bool,
        out: Out,
    ) -> Result<Tensor> {
        let op: &'static str = match op {
            "Softmax" => "Softmax",
            "LogSoftmax" => "LogSoftmax",
            _ => return Err(Error::Graph(format!("unknown op '{op}'"))),
        };
        self.check_inputs(op, &[("input", input)])?;
        let dtype = input.dtype();
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
            return Err(Error::invalid(
                op,
                "input",
                format!("input is {dtype}; {op} takes f32, f16, bf16, f64"),
            ));
        }
        let rank = input.rank() as i64;
        let r = rank.max(1);
        if axis < -r || axis >= r {
            return Err(Error::invalid(
                op,
                "axis",
                format!("axis {axis} is out of range for rank {rank}"),
            ));
        }
        let axis = if axis < 0 { axis + r } else { axis } as usize;
        let shape = input.shape().to_vec();
        let (x, axis) = if coerce_2d {
            let rows: usize = shape[..axis.min(shape.len())].iter().product();
            let cols: usize = shape[axis.min(shape.len())..].iter().product();
            (input.reshaped(&[rows, cols])?, 1)
        } else if shape.is_empty() {
            (input.reshaped(&[1])?, 0)
        } else {
            (input.clone(), axis)
        };
        if axis + 1 == x.rank() {
            let mode = match op {
                "Softmax" => RowNorm::Softmax,
                _ => RowNorm::LogSoftmax,
            };
            let n = x.shape()[axis];
            if let Some(y) = self.row_norm_to(mode, &x, n, [None, None], 0.0, out, &shape)? {
                return Ok(y);
            }
        }
        let axes = [axis as i64];
        let max = self.reduce_to("ReduceMax", &x, Some(&axes), true, false, Out::NEW)?;
        // exp(x - max) is computed where it is read, by the sum (its prologue) and by the
        // quotient, never stored: 3 dispatches and no tensor the size of the input besides
        // the result. Each step rounds to the type as the function body's stores would.
        // f64 without the feature on the emulation.
        let emulate =
            crate::kernels::words::emulates_64_bit(self.context().features(), &[dtype], dtype);
        let built = || -> Option<[Program; 2]> {
            use crate::kernels::program::Arg::Operand;
            let mut exp = Program::new(vec![dtype; 2], emulate);
            let shifted = exp.push("Sub", vec![Operand(0), Operand(1)], dtype)?;
            exp.push("Exp", vec![shifted], dtype)?;
            let mut result = Program::new(vec![dtype; 3], emulate);
            let shifted = result.push("Sub", vec![Operand(0), Operand(1)], dtype)?;
            if op == "Softmax" {
                let e = result.push("Exp", vec![shifted], dtype)?;
                result.push("Div", vec![e, Operand(2)], dtype)?;
            } else {
                let log = result.push("Log", vec![Operand(2)], dtype)?;
                result.push("Sub", vec![shifted, log], dtype)?;
            }
            Some([exp, result])
        };
        let [exp, result] = built()
            .ok_or_else(|| Error::Graph(format!("internal: {op} on {dtype} has no program")))?;
        let sum = self.reduce_program_to(
            "ReduceSum",
            &exp,
            &[&x, &max],
            x.shape(),
            Some(&axes),
            true,
            false,
            Out::NEW,
        )?;
        let y = self.program_to(&result, &[&x, &max, &sum], Out::NEW)?;
        self.release(max);
        self.release(sum);
        out.view(self, y.reshaped(&shape)?)
    }
}

impl Recorder {
    /// Records ONNX CumSum of `x` along `axis`: running sums, `exclusive` (each element's
    /// sum leaves it out) and `reverse` (from the end). f16 and bf16 sum in f32 and round each
    /// result once; integers wrap.
    pub fn cumsum_to(
        &mut self,
        x: &Tensor,
        axis: i64,
        exclusive: bool,
        reverse: bool,
        out: Out,
    ) -> Result<Tensor> {
        self.cumulative_to(x, axis, exclusive, reverse, false, out)
    }

    /// Records ONNX CumProd of `x` along `axis`: running products (an exclusive one starts
    /// from 1), as [`Self::cumsum_to`] sums. f16 and bf16 multiply in f32 and round each
    /// result once; integers wrap.
    pub fn cumprod_to(
        &mut self,
        x: &Tensor,
        axis: i64,
        exclusive: bool,
        reverse: bool,
        out: Out,
    ) -> Result<Tensor> {
        self.cumulative_to(x, axis, exclusive, reverse, true, out)
    }

    fn cumulative_to(
        &mut self,
        x: &Tensor,
        axis: i64,
        exclusive: bool,
        reverse: bool,
        product: bool,
        out: Out,
    ) -> Result<Tensor> {
        let op = if product { "CumProd" } else { "CumSum" };
        self.check_inputs(op, &[("x", x)])?;
        let dtype = x.dtype();
        let ok = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::F64,
            DType::I32,
            DType::I64,
            DType::U32,
            DType::U64,
        ];
        if !ok.contains(&dtype) {
            return Err(Error::invalid(
                op,
                "x",
                format!("x is {dtype}; {op} takes f32, f16, bf16, f64, i32, i64, u32, u64"),
            ));
        }
        let axes = normalize_axes(op, x.rank().max(1), &[axis])?;
        let shape = x.shape().to_vec();
        let (len, inner) = match shape.get(axes[0]) {
            Some(&d) => (d, shape[axes[0] + 1..].iter().product()),
            None => (1, 1),
        };
        if matches!(dtype, DType::F16 | DType::BF16) {
            let wide = self.cast(x, DType::F32)?;
            let running = self.cumulative_to(&wide, axis, exclusive, reverse, product, Out::NEW)?;
            self.release(wide);
            let result = self.cast_to(&running, dtype, out);
            self.release(running);
            return result;
        }
        let out = out.tensor(self, dtype, &shape)?;
        self.cumsum_into(x, len, inner, exclusive, reverse, product, &out)?;
        Ok(out)
    }
}

impl Recorder {
    /// Records ONNX TopK: the `k` largest (or smallest) elements of `x` along `axis`, sorted
    /// (of equal values the lower index first), and their i64 indices. f16 and bf16 compare
    /// through f32 (exact). `outs` receives values then indices.
    pub fn topk_to(
        &mut self,
        x: &Tensor,
        k: i64,
        axis: i64,
        largest: bool,
        outs: [Out; 2],
    ) -> Result<[Tensor; 2]> {
        const OP: &str = "TopK";
        self.check_inputs(OP, &[("X", x)])?;
        let dtype = x.dtype();
        if dtype == DType::Bool {
            return Err(Error::invalid(
                OP,
                "X",
                format!("X is {dtype}; TopK takes the numeric types"),
            ));
        }
        let axes = normalize_axes(OP, x.rank(), &[axis])?;
        let len = x.shape()[axes[0]];
        let k = usize::try_from(k)
            .ok()
            .filter(|&k| k <= len)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    "K",
                    format!("K is {k}; it must be in 0..={len}, the length of axis {axis}"),
                )
            })?;
        let [values_out, indices_out] = outs;
        let wide = match Class::of(dtype).wide() {
            w if w == dtype => x.clone(),
            w => self.cast(x, w)?,
        };
        let mut shape = x.shape().to_vec();
        shape[axes[0]] = k;
        let inner: usize = x.shape()[axes[0] + 1..].iter().product();
        let narrow = wide.dtype() != dtype;
        let values = if narrow {
            self.alloc(wide.dtype(), &shape)?
        } else {
            values_out.tensor(self, dtype, &shape)?
        };
        let indices = indices_out.tensor(self, DType::I64, &shape)?;
        self.topk_into(&wide, len, inner, k, largest, &values, &indices)?;
        if !narrow {
            return Ok([values, indices]);
        }
        self.release(wide);
        let v = self.cast_to(&values, dtype, values_out)?;
        self.release(values);
        Ok([v, indices])
    }
}
