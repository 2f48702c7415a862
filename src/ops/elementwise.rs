//! ONNX element-wise ops with numpy broadcasting: `Add Sub Mul Div Max Min Pow` (binary),
//! `Neg Abs Exp Log Sqrt Tanh Sigmoid Relu` (unary) and `Cast`, on the dtypes WGSL computes
//! (`f32 i32 u32`). One table describes them all; one shader family computes them.

use super::broadcast_shape;
pub use crate::kernels::elementwise::{cast_expression, lookup, ElementwiseOp, OPS};
use crate::kernels::operands::{elementwise_type, native_feature};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

impl ElementwiseOp {
    /// The WGSL expression for `dtype`, or an error saying which dtypes the op takes.
    pub fn expression(&self, dtype: DType) -> Result<&'static str> {
        self.wgsl(dtype).ok_or_else(|| {
            let ok: Vec<&str> = [
                DType::F32,
                DType::F64,
                DType::I32,
                DType::I64,
                DType::U32,
                DType::U64,
            ]
            .into_iter()
            .filter(|&d| self.wgsl(d).is_some())
            .map(DType::name)
            .collect();
            let why = match dtype {
                DType::F16 | DType::BF16 => {
                    " (16-bit floats need the rounding kernels of the every-dtype work, not written yet)"
                }
                DType::F64 if self.float.is_some() => {
                    " (Vulkan has no f64 exp, log, tanh or pow; software versions are not written yet)"
                }
                DType::I8 | DType::I16 | DType::U8 | DType::U16 | DType::Bool => {
                    " (sub-word integers need the word-packing kernels, not written yet)"
                }
                _ => "",
            };
            Error::invalid(
                self.name,
                "A",
                format!(
                    "A is {dtype}; {} computes {}{why}",
                    self.name,
                    ok.join(", ")
                ),
            )
        })
    }

    /// Validates and returns the output shape for inputs of these shapes and dtypes.
    pub fn plan(&self, a: (DType, &[usize]), b: Option<(DType, &[usize])>) -> Result<Vec<usize>> {
        self.expression(a.0)?;
        match (self.binary, b) {
            (true, Some((bd, bs))) => {
                if bd != a.0 {
                    return Err(Error::invalid(
                        self.name,
                        "B",
                        format!("A is {} but B is {bd}; they must match", a.0),
                    ));
                }
                let out = broadcast_shape(self.name, a.1, bs)?;
                super::check_rank(self.name, &out)?;
                Ok(out)
            }
            (false, None) => {
                super::check_rank(self.name, a.1)?;
                Ok(a.1.to_vec())
            }
            (binary, _) => Err(Error::invalid(
                self.name,
                "B",
                format!(
                    "{} takes {} input(s)",
                    self.name,
                    if binary { 2 } else { 1 }
                ),
            )),
        }
    }
}

impl Recorder {
    /// Records element-wise op `name` (`Add`, `Exp`, ...) on `a` (and `b` for binary ops).
    pub fn elementwise(&mut self, name: &str, a: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        self.elementwise_to(name, a, b, Out::NEW)
    }

    /// Records element-wise op `name` into `out`: the op's one recording path.
    pub fn elementwise_to(
        &mut self,
        name: &str,
        a: &Tensor,
        b: Option<&Tensor>,
        out: Out,
    ) -> Result<Tensor> {
        let op = lookup(name)
            .ok_or_else(|| Error::Graph(format!("unknown element-wise op '{}'", name)))?;
        self.check_inputs(op.name, &[("A", a)])?;
        if let Some(b) = b {
            self.check_inputs(op.name, &[("B", b)])?;
        }
        // ONNX Pow takes an exponent of another numeric type: on an f32 base it is converted
        // to f32 first (exact for integers up to 2^24), and the base's kernel runs.
        if let (Some(e), "Pow", DType::F32) = (b, op.name, a.dtype()) {
            if e.dtype() != DType::F32 && elementwise_type(e.dtype()).is_some() {
                let e = self.cast_to(e, DType::F32, Out::NEW)?;
                let result = self.elementwise_to(name, a, Some(&e), out);
                self.release(e);
                return result;
            }
        }
        let shape = op.plan((a.dtype(), a.shape()), b.map(|b| (b.dtype(), b.shape())))?;
        require_feature(self.context(), op.name, "A", a.dtype())?;
        let out = out.tensor(self, a.dtype(), &shape)?;
        self.elementwise_into(op.name, a, b.unwrap_or(a), &out)?;
        Ok(out)
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
        if matches!(op, "Sum" | "Mean") && !matches!(first.dtype(), DType::F32 | DType::F64) {
            return Err(Error::invalid(
                op,
                "data_0",
                format!(
                    "data_0 is {}; {op} takes f32 and f64 here (ONNX: float types)",
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
            lookup(binary)
                .map(|o| o.expression(first.dtype()))
                .transpose()?;
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
            let n = inputs.len();
            let count = match first.dtype() {
                DType::F64 => crate::HostTensor::from_vec(vec![1], &[n as f64])?,
                _ => crate::HostTensor::from_vec(vec![1], &[n as f32])?,
            };
            let count = Tensor::from_host(self.context(), &count)?;
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

    /// Records Cast into `out`: the op's one recording path.
    pub fn cast_to(&mut self, a: &Tensor, to: DType, out: Out) -> Result<Tensor> {
        self.check_inputs("Cast", &[("input", a)])?;
        check_cast(self.context(), a.dtype(), to)?;
        let out = out.tensor(self, to, a.shape())?;
        self.elementwise_into("Cast", a, a, &out)?;
        Ok(out)
    }
}

fn check_cast(ctx: &crate::Context, from: DType, to: DType) -> Result<()> {
    for (what, d) in [("input", from), ("to", to)] {
        if elementwise_type(d).is_none() {
            return Err(Error::invalid(
                "Cast",
                what,
                format!("{what} is {d}; Cast converts between f32, i32 and u32, and f64, i64 and u64 where the adapter has 64-bit shader types (16-bit and sub-word types need kernels not written yet)"),
            ));
        }
        require_feature(ctx, "Cast", what, d)?;
    }
    Ok(())
}

/// Fails when `dtype` (the type of `op`'s `input`) needs a wgpu feature the context's device
/// lacks, naming the feature and the adapter.
fn require_feature(
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
                "{input} is {dtype}; {op} computes it with wgpu's {name} feature, which {} does not offer here (a 32-bit emulation is not written yet)",
                ctx.adapter_info().name
            ),
        )),
        _ => Ok(()),
    }
}
