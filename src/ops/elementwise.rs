//! ONNX element-wise ops with numpy broadcasting: `Add Sub Mul Div Max Min Pow` (binary),
//! `Neg Abs Exp Log Sqrt Tanh Sigmoid Relu` (unary) and `Cast`, on the dtypes WGSL computes
//! (`f32 i32 u32`). One table describes them all; one shader family computes them.

use crate::graph::registry::OpDef;
use crate::kernels::compute::{broadcast_shape, wgsl_type};
use crate::{DType, Error, Recorder, Result, Tensor};

/// One element-wise op: its arity and WGSL expression (of `a`, `b`) per type class.
pub struct ElementwiseOp {
    pub name: &'static str,
    pub binary: bool,
    pub float: Option<&'static str>,
    pub int: Option<&'static str>,
    pub uint: Option<&'static str>,
}

const fn op(
    name: &'static str,
    binary: bool,
    float: Option<&'static str>,
    int: Option<&'static str>,
    uint: Option<&'static str>,
) -> ElementwiseOp {
    ElementwiseOp {
        name,
        binary,
        float,
        int,
        uint,
    }
}

/// Every element-wise op. ONNX semantics: integer Div truncates; Relu is max(x, 0); Pow follows
/// numpy for negative bases; Tanh's argument is clamped where f32 tanh is already +-1.
pub static OPS: [ElementwiseOp; 15] = [
    op("Add", true, Some("a + b"), Some("a + b"), Some("a + b")),
    op("Sub", true, Some("a - b"), Some("a - b"), Some("a - b")),
    op("Mul", true, Some("a * b"), Some("a * b"), Some("a * b")),
    op("Div", true, Some("a / b"), Some("a / b"), Some("a / b")),
    op(
        "Max",
        true,
        Some("max(a, b)"),
        Some("max(a, b)"),
        Some("max(a, b)"),
    ),
    op(
        "Min",
        true,
        Some("min(a, b)"),
        Some("min(a, b)"),
        Some("min(a, b)"),
    ),
    op("Pow", true, Some("onnx_pow(a, b)"), None, None),
    op("Neg", false, Some("-a"), Some("-a"), None),
    op("Abs", false, Some("abs(a)"), Some("abs(a)"), Some("a")),
    op("Exp", false, Some("exp(a)"), None, None),
    op("Log", false, Some("log(a)"), None, None),
    op("Sqrt", false, Some("sqrt(a)"), None, None),
    op(
        "Tanh",
        false,
        Some("tanh(clamp(a, -15.0, 15.0))"),
        None,
        None,
    ),
    op("Sigmoid", false, Some("1.0 / (1.0 + exp(-a))"), None, None),
    op(
        "Relu",
        false,
        Some("max(a, 0.0)"),
        Some("max(a, 0)"),
        Some("a"),
    ),
];

pub fn lookup(name: &str) -> Option<&'static ElementwiseOp> {
    OPS.iter().find(|o| o.name == name)
}

impl ElementwiseOp {
    /// The WGSL expression for `dtype`, or an error saying which dtypes the op takes.
    pub fn expression(&self, dtype: DType) -> Result<&'static str> {
        let e = match dtype {
            DType::F32 => self.float,
            DType::I32 => self.int,
            DType::U32 => self.uint,
            _ => None,
        };
        e.ok_or_else(|| {
            let ok: Vec<&str> = [
                (DType::F32, self.float),
                (DType::I32, self.int),
                (DType::U32, self.uint),
            ]
            .iter()
            .filter(|(_, e)| e.is_some())
            .map(|(d, _)| d.name())
            .collect();
            let why = match dtype {
                DType::F16 => {
                    " (f16 needs the shader-f16 feature, which wgpu-ops does not use yet)"
                }
                DType::F64 | DType::I64 | DType::U64 => " (WGSL has no 64-bit arithmetic)",
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
            _ => unreachable!("arity checked by the caller"),
        }
    }
}

impl Recorder {
    /// Records element-wise op `name` (`Add`, `Exp`, ...) on `a` (and `b` for binary ops).
    pub fn elementwise(&mut self, name: &str, a: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        let op = lookup(name)
            .ok_or_else(|| Error::Graph(format!("unknown element-wise op '{name}'")))?;
        if op.binary != b.is_some() {
            return Err(Error::invalid(
                op.name,
                "B",
                format!(
                    "{} takes {} input(s)",
                    op.name,
                    if op.binary { 2 } else { 1 }
                ),
            ));
        }
        let shape = op.plan((a.dtype(), a.shape()), b.map(|b| (b.dtype(), b.shape())))?;
        let out = self.alloc(a.dtype(), &shape)?;
        self.elementwise_into(op.name, op.expression(a.dtype())?, a, b.unwrap_or(a), &out)?;
        Ok(out)
    }

    /// Records ONNX Cast between `f32`, `i32` and `u32` (float to integer truncates toward zero
    /// and saturates, as WGSL conversions do).
    pub fn cast(&mut self, a: &Tensor, to: DType) -> Result<Tensor> {
        check_cast(a.dtype(), to)?;
        let out = self.alloc(to, a.shape())?;
        self.cast_into(a, &out)?;
        Ok(out)
    }

    pub(crate) fn cast_into(&mut self, a: &Tensor, out: &Tensor) -> Result<()> {
        check_cast(a.dtype(), out.dtype())?;
        self.elementwise_into("Cast", cast_expression(a.dtype(), out.dtype()), a, a, out)
    }
}

/// The Cast kernel's expression. Floats become integers rounded toward zero, saturated to the
/// target's range (up to its maximum, which f32 cannot hold), NaN as 0: Rust's `as`, which the
/// reference uses. WGSL's own conversion stops at the largest f32 below the maximum, and naga's
/// GLSL output (the GL backend) is undefined out of range (negative floats wrapped to huge
/// `u32`s on llvmpipe GL), so every case is written out. NaN is found by its bits: `a != a`
/// compiles to an ordered comparison on lavapipe, false for NaN.
pub fn cast_expression(from: DType, to: DType) -> &'static str {
    match (from, to) {
        (DType::F32, DType::U32) => {
            "select(select(U(clamp(a, 0.0, 4294967040.0)), 4294967295u, a >= 4294967296.0), \
             0u, (bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u)"
        }
        (DType::F32, DType::I32) => {
            "select(select(U(clamp(a, -2147483648.0, 2147483520.0)), 2147483647i, \
             a >= 2147483648.0), 0i, (bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u)"
        }
        _ => "U(a)",
    }
}

fn check_cast(from: DType, to: DType) -> Result<()> {
    for (what, d) in [("input", from), ("to", to)] {
        if wgsl_type(d).is_none() {
            return Err(Error::invalid(
                "Cast",
                what,
                format!("{what} is {d}; Cast converts between f32, i32 and u32 (WGSL has no other arithmetic types without optional features)"),
            ));
        }
    }
    Ok(())
}

fn run_elementwise(rec: &mut Recorder, args: &crate::graph::exec::NodeArgs) -> Result<Vec<Tensor>> {
    let op = lookup(&args.node.op).expect("registered from the table");
    let a = args.tensor(0, "A")?;
    let b = if op.binary {
        Some(args.tensor(1, "B")?)
    } else {
        None
    };
    let shape = op.plan(
        (a.dtype(), a.shape()),
        b.as_ref().map(|b| (b.dtype(), b.shape())),
    )?;
    let out = args.output(rec, 0, a.dtype(), &shape)?;
    rec.elementwise_into(
        op.name,
        op.expression(a.dtype())?,
        &a,
        b.as_ref().unwrap_or(&a),
        &out,
    )?;
    Ok(vec![out])
}

macro_rules! graph_ops {
    ($($name:literal $n:literal),* $(,)?) => {
        /// Graph entries of the element-wise ops, in the order of [`OPS`].
        pub(crate) static GRAPH_OPS: [OpDef; 15] = [$(OpDef {
            name: $name,
            inputs: $n..=$n,
            outputs: 1..=1,
            attrs: &[],
            run: run_elementwise,
        }),*];
    };
}
graph_ops!(
    "Add" 2, "Sub" 2, "Mul" 2, "Div" 2, "Max" 2, "Min" 2, "Pow" 2,
    "Neg" 1, "Abs" 1, "Exp" 1, "Log" 1, "Sqrt" 1, "Tanh" 1, "Sigmoid" 1, "Relu" 1,
);

pub(crate) static CAST_OP: OpDef = OpDef {
    name: "Cast",
    inputs: 1..=1,
    outputs: 1..=1,
    attrs: &["to"],
    run: |rec, args| {
        let a = args.tensor(0, "input")?;
        let to = args.string("to")?.ok_or_else(|| {
            Error::invalid(
                "Cast",
                "to",
                "the attribute 'to' (a dtype name) is required",
            )
        })?;
        let to = DType::from_name(to).ok_or_else(|| {
            Error::invalid("Cast", "to", format!("to is '{to}', not a dtype name"))
        })?;
        let out = args.output(rec, 0, to, a.shape())?;
        rec.cast_into(&a, &out)?;
        Ok(vec![out])
    },
};

#[cfg(test)]
mod tests {
    #[test]
    fn the_graph_table_follows_the_op_table() {
        for (def, op) in super::GRAPH_OPS.iter().zip(&super::OPS) {
            assert_eq!(def.name, op.name);
            assert_eq!(*def.inputs.start(), if op.binary { 2 } else { 1 });
        }
    }
}
