//! ONNX element-wise ops with numpy broadcasting: `Add Sub Mul Div Max Min Pow` (binary),
//! `Neg Abs Exp Log Sqrt Tanh Sigmoid Relu` (unary) and `Cast`, on the dtypes WGSL computes
//! (`f32 i32 u32`). One table describes them all; one shader family computes them.

use super::broadcast_shape;
pub use crate::kernels::elementwise::{cast_expression, lookup, ElementwiseOp, OPS};
use crate::kernels::operands::{elementwise_type, native_feature};
pub use crate::kernels::program::{Arg, Program, Step, Values, MAX_OPERANDS, MAX_STEPS};
pub use crate::kernels::words::{
    emulated_expression, emulates_64_bit, result_dtype, word_expression, word_op, WordOp, WORD_OPS,
};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

impl Recorder {
    /// Records element-wise op `name` (`Add`, `Exp`, ...) on `a` (and `b` for binary ops).
    pub fn elementwise(&mut self, name: &str, a: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        self.elementwise_to(name, a, b, Out::NEW)
    }

    /// Records element-wise op `name` into `out` (`b` for binary ops).
    pub fn elementwise_to(
        &mut self,
        name: &str,
        a: &Tensor,
        b: Option<&Tensor>,
        out: Out,
    ) -> Result<Tensor> {
        match b {
            Some(b) => self.map_to(name, &[a, b], out),
            None => self.map_to(name, &[a], out),
        }
    }

    /// Records element-wise op `name` on one to three `inputs` (numpy broadcasting across
    /// them) into `out`: the one recording path of every element-wise op (those of
    /// [`OPS`] and [`WORD_OPS`]), each on every dtype ONNX defines it for.
    pub fn map_to(&mut self, name: &str, inputs: &[&Tensor], out: Out) -> Result<Tensor> {
        let (op, arity) = match (lookup(name), word_op(name)) {
            (_, Some(w)) => (w.name, w.inputs),
            (Some(t), None) => (t.name, 1 + usize::from(t.binary)),
            _ => return Err(Error::Graph(format!("unknown element-wise op '{name}'"))),
        };
        let names = operand_names(op);
        if inputs.len() != arity {
            return Err(Error::invalid(
                op,
                names[0],
                format!("{op} takes {arity} input(s), not {}", inputs.len()),
            ));
        }
        for (t, n) in inputs.iter().zip(names) {
            self.check_inputs(op, &[(n, t)])?;
        }
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype()).collect();
        let result = result_dtype(op, &dtypes);
        // 64-bit types the adapter lacks: the word kernel's emulation on 32-bit words.
        let emulate = emulates_64_bit(self.context().features(), &dtypes, result);
        let words = if emulate {
            emulated_expression(op, &dtypes, result).is_some()
        } else {
            word_expression(op, &dtypes, DType::F32).is_some()
        };
        // 4-byte results go to the word kernel, which stores four of them as one 16-byte quad
        // (the typed kernel stores one per invocation: 0.59 of the copy's bandwidth on an
        // H100, against 0.98; on lavapipe 1.7x to 4x slower since the word kernel is compiled
        // for its walk's rank, bench/walk_rank_lavapipe.txt).
        let quads = result.size() == 4 && words;
        let typed = lookup(op).filter(|t| {
            !emulate
                && !quads
                && dtypes.iter().all(|&d| d == dtypes[0])
                && t.wgsl(dtypes[0]).is_some()
        });
        if typed.is_none() && !words {
            if emulate && word_expression(op, &dtypes, DType::F32).is_some() {
                // Defined, but beyond the emulation: the error names the missing feature.
                for (&d, n) in dtypes.iter().zip(names) {
                    require_feature(self.context(), op, n, d)?;
                }
            }
            return Err(unsupported_dtypes(op, &dtypes, names));
        }
        let mut shape = inputs[0].shape().to_vec();
        for t in &inputs[1..] {
            shape = broadcast_shape(op, &shape, t.shape())?;
        }
        super::check_rank(op, &shape)?;
        for (&d, n) in dtypes.iter().zip(names) {
            if !(emulate && matches!(d, DType::I64 | DType::U64 | DType::F64)) {
                require_feature(self.context(), op, n, d)?;
            }
        }
        let out = out.tensor(self, result, &shape)?;
        match typed {
            Some(t) => self.elementwise_into(t.name, inputs[0], inputs[arity - 1], &out)?,
            None => self.words_into(op, inputs, &out)?,
        }
        Ok(out)
    }

    /// Records `out = program(inputs...)`: a chain of element-wise ops (see [`Program`])
    /// fused into one kernel, with numpy broadcasting across the inputs and no intermediate
    /// tensors. Each step's result is narrowed to its dtype as if stored, so the output has
    /// the bits of the ops recorded one by one (up to a driver contracting float `a * b + c`).
    pub fn program_to(
        &mut self,
        program: &Program,
        inputs: &[&Tensor],
        out: Out,
    ) -> Result<Tensor> {
        // Built for no adapter in particular (a normalization's f64 steps, say): computed
        // where this one computes its dtypes, on the emulation where it lacks their features.
        let settled = program.on_adapter(self.context().features());
        let program = settled.as_ref().unwrap_or(program);
        let (op, shape) = self.program_shape(program, inputs)?;
        let ctx = self.context().clone();
        let out = out.tensor(self, program.out(), &shape)?;
        let kernel = crate::kernels::Kernel::Fused {
            program: crate::kernels::program::intern(program.clone()),
            workgroup_size: ctx.workgroup_size(),
            quads: false,
            dense: None,
            walk_rank: 0,
        };
        self.program_into(op, kernel, inputs, &out)?;
        Ok(out)
    }

    /// The op naming `program` in errors and the shape of its values over `inputs`, once the
    /// inputs are checked against the program (count, dtypes, features, broadcasting).
    pub(crate) fn program_shape(
        &self,
        program: &Program,
        inputs: &[&Tensor],
    ) -> Result<(&'static str, Vec<usize>)> {
        let op = program.steps().last().map_or("Fused", |s| s.op);
        if inputs.len() != program.operands().len() {
            return Err(Error::invalid(
                op,
                "inputs",
                format!(
                    "the program reads {} operands but {} inputs are given",
                    program.operands().len(),
                    inputs.len()
                ),
            ));
        }
        for (k, (t, &d)) in inputs.iter().zip(program.operands()).enumerate() {
            let name = format!("input {k}");
            self.check_inputs(op, &[(name.as_str(), t)])?;
            if t.dtype() != d {
                return Err(Error::invalid(
                    op,
                    name,
                    format!("input {k} is {} but the program reads {d}", t.dtype()),
                ));
            }
        }
        let ctx = self.context();
        let missing = program.features() - ctx.features();
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter_names().map(|(name, _)| name).collect();
            return Err(Error::invalid(
                op,
                "inputs",
                format!(
                    "the program needs wgpu's {}, which {} does not offer here",
                    names.join(" and "),
                    ctx.adapter_info().name
                ),
            ));
        }
        let mut shape: Vec<usize> = Vec::new();
        for t in inputs {
            shape = broadcast_shape(op, &shape, t.shape())?;
        }
        super::check_rank(op, &shape)?;
        Ok((op, shape))
    }

    /// Records ONNX Max, Min, Sum or Mean of one or more `inputs` (numpy broadcasting across
    /// all of them) into `out`: the ops' one recording path. Pairs are combined in order by
    /// the binary kernel (Sum and Mean by Add, Mean then divided by the count); Sum and Mean
    /// take the float dtypes, as ONNX defines them.
    pub fn variadic_to(&mut self, name: &str, inputs: &[Tensor], out: Out) -> Result<Tensor> {
        let (op, binary): (&'static str, &'static str) = match name {
            "Max" => ("Max", "Max"),
            "Min" => ("Min", "Min"),
            "Sum" => ("Sum", "Add"),
            "Mean" => ("Mean", "Add"),
            _ => {
                return Err(Error::Graph(format!(
                    "'{name}' is not a variadic element-wise op"
                )))
            }
        };
        let first = inputs.first().ok_or_else(|| {
            Error::invalid(op, "data_0", format!("{op} needs at least one input"))
        })?;
        for (i, t) in inputs.iter().enumerate() {
            self.check_inputs(op, &[("data_0", t)])?;
            if t.dtype() != first.dtype() {
                return Err(Error::invalid(
                    op,
                    format!("data_{i}"),
                    format!(
                        "data_{i} is {} but data_0 is {}; they must match",
                        t.dtype(),
                        first.dtype()
                    ),
                ));
            }
        }
        let float = matches!(
            first.dtype(),
            DType::F32 | DType::F16 | DType::BF16 | DType::F64
        );
        if matches!(op, "Sum" | "Mean") && !float {
            return Err(Error::invalid(
                op,
                "data_0",
                format!(
                    "data_0 is {}; {op} takes the float types (f32, f16, bf16, f64)",
                    first.dtype()
                ),
            ));
        }
        let mut shape = first.shape().to_vec();
        for t in &inputs[1..] {
            shape = broadcast_shape(op, &shape, t.shape())?;
        }
        if inputs.len() == 1 {
            // One input: itself (checked like the others for dtype support).
            let d = first.dtype();
            if word_expression(binary, &[d, d], d).is_none() {
                return Err(unsupported_dtypes(op, &[d], &["data_0"]));
            }
            return out.view(self, first.clone());
        }
        let mean = op == "Mean";
        let mut acc = first.clone();
        for (k, t) in inputs.iter().enumerate().skip(1) {
            let last = k + 1 == inputs.len() && !mean;
            let into = if last { out } else { Out::NEW };
            let next = self.elementwise_to(binary, &acc, Some(t), into)?;
            if k > 1 {
                self.release(acc);
            }
            acc = next;
        }
        if mean {
            // A scalar count: one of shape [1] would make a mean of scalars [1].
            let n = inputs.len();
            let count = match first.dtype() {
                DType::F64 => crate::HostTensor::from_vec(vec![], &[n as f64])?,
                DType::F16 => {
                    crate::HostTensor::from_vec(vec![], &[half::f16::from_f32(n as f32)])?
                }
                DType::BF16 => {
                    crate::HostTensor::from_vec(vec![], &[half::bf16::from_f32(n as f32)])?
                }
                _ => crate::HostTensor::from_vec(vec![], &[n as f32])?,
            };
            let count = self.upload(&count)?;
            let mean = self.elementwise_to("Div", &acc, Some(&count), out)?;
            self.release(acc);
            return Ok(mean);
        }
        Ok(acc)
    }

    /// Records ONNX Cast between `f32`, `i32` and `u32` (float to integer truncates toward zero
    /// and saturates, as WGSL conversions do).
    pub fn cast(&mut self, a: &Tensor, to: DType) -> Result<Tensor> {
        self.cast_to(a, to, Out::NEW)
    }

    /// Records Cast into `out`: the op's one recording path. Between any two of the 13
    /// dtypes: integers narrow by wrapping, floats to integers truncate toward zero and
    /// saturate (NaN as 0), anything to bool is `!= 0`, floats round to nearest-even.
    pub fn cast_to(&mut self, a: &Tensor, to: DType, out: Out) -> Result<Tensor> {
        self.cast_mode_to(a, to, crate::CastMode::default(), out)
    }

    /// Records Cast in `mode` into `out`: [`Recorder::cast_to`] with ONNX Cast's `saturate`
    /// and `round_mode`, which matter for the 8-bit floats only. To those floats values
    /// round to nearest-even (F8E8M0 as `mode.round` says); floats to the 4- and 2-bit
    /// integers truncate toward zero and wrap.
    pub fn cast_mode_to(
        &mut self,
        a: &Tensor,
        to: DType,
        mode: crate::CastMode,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("Cast", &[("input", a)])?;
        let op = crate::kernels::words::cast_op(to, mode);
        if a.dtype() == to {
            // The value itself (exported models cast f32 to f32 on every step of a Scan).
            return out.view(self, a.clone());
        }
        let emulate = emulates_64_bit(self.context().features(), &[a.dtype()], to)
            && emulated_expression(op, &[a.dtype()], to).is_some();
        if !emulate {
            require_feature(self.context(), "Cast", "input", a.dtype())?;
            require_feature(self.context(), "Cast", "to", to)?;
        }
        let out = out.tensor(self, to, a.shape())?;
        if emulate {
            self.words_into(op, &[a], &out)?;
        } else if elementwise_type(a.dtype()).is_some() && elementwise_type(to).is_some() {
            self.elementwise_into("Cast", a, a, &out)?;
        } else {
            self.words_into(op, &[a], &out)?;
        }
        Ok(out)
    }
}

/// The input names ONNX gives an element-wise op's operands.
fn operand_names(op: &str) -> &'static [&'static str] {
    match op {
        "Where" => &["condition", "X", "Y"],
        "Clip" => &["input", "min", "max"],
        "Pow" => &["X", "Y"],
        _ => &["A", "B", "C"],
    }
}

/// The error for an op on dtypes it is not defined for: which dtypes it takes.
fn unsupported_dtypes(op: &'static str, dtypes: &[DType], names: &[&str]) -> Error {
    let defined = |d: &[DType]| {
        word_expression(op, d, DType::F32).is_some()
            || lookup(op).is_some_and(|t| d.iter().all(|&x| x == d[0]) && t.wgsl(d[0]).is_some())
    };
    // The operand whose dtype is wrong: Where's condition must be bool; otherwise the first
    // operand's dtype decides and the others must match it (Pow's exponent excepted).
    let ok: Vec<&str> = DType::ALL
        .into_iter()
        .filter(|&d| {
            let mut trial = dtypes.to_vec();
            let k = usize::from(op == "Where");
            for (j, t) in trial.iter_mut().enumerate() {
                if j >= k && (op != "Pow" || j == 0) {
                    *t = d;
                }
            }
            defined(&trial)
        })
        .map(DType::name)
        .collect();
    let k = usize::from(op == "Where" && dtypes[0] == DType::Bool);
    let (input, got) = (names[k], dtypes[k]);
    let mismatch = dtypes
        .iter()
        .enumerate()
        .skip(k + 1)
        .find(|&(j, &d)| d != got && !(op == "Pow" && j == 1));
    let why = match mismatch {
        Some((j, d)) => format!("{input} is {got} but {} is {d}; they must match", names[j]),
        None if op == "Where" && k == 0 => format!("{input} is {got}; it must be bool"),
        None if ok.is_empty() => format!("{op} is not defined on these dtypes ({input} is {got})"),
        None => format!("{input} is {got}; {op} takes {}", ok.join(", ")),
    };
    Error::invalid(op, input, why)
}

/// Fails when `dtype` is f64 and the context's device lacks `SHADER_F64` (for kernels that
/// emulate i64 and u64 on u32 pairs where `SHADER_INT64` is missing but have no f64
/// emulation: the reductions without one).
pub(crate) fn require_f64_feature(
    ctx: &crate::Context,
    op: &'static str,
    input: &str,
    dtype: DType,
) -> Result<()> {
    if dtype == DType::F64 {
        require_feature(ctx, op, input, dtype)
    } else {
        Ok(())
    }
}

/// Fails when `dtype` (the type of `op`'s `input`) needs a wgpu feature the context's device
/// lacks, naming the feature and the adapter.
pub(crate) fn require_feature(
    ctx: &crate::Context,
    op: &'static str,
    input: &str,
    dtype: DType,
) -> Result<()> {
    match native_feature(dtype) {
        Some((feature, name)) if !ctx.features().contains(feature) => Err(Error::invalid(
            op,
            input,
            format!(
                "{input} is {dtype}; {op} computes it with wgpu's {name} feature, which {} does not offer here (without it i64, u64 and f64 are emulated on 32-bit words for arithmetic, order and casts, but not for this op)",
                ctx.adapter_info().name
            ),
        )),
        _ => Ok(()),
    }
}

/// The word kernel's op for ONNX IsInf detecting +inf where `positive` and -inf where
/// `negative`.
pub fn is_inf_op(positive: bool, negative: bool) -> &'static str {
    match (positive, negative) {
        (true, true) => "IsInf",
        (true, false) => "IsPosInf",
        (false, true) => "IsNegInf",
        (false, false) => "IsInfNone",
    }
}
