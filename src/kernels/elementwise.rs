//! The element-wise kernel's expressions: for every ONNX element-wise op, its arity and its
//! WGSL expression (of `a`, `b`) per type class, and Cast's conversions. Validation of the
//! ops' inputs lives with the ops; this is what the kernel computes.

use crate::DType;

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
    /// The WGSL expression computing the op on `dtype`, if the kernel computes that dtype.
    pub fn wgsl(&self, dtype: DType) -> Option<&'static str> {
        match dtype {
            DType::F32 => self.float,
            DType::I32 => self.int,
            DType::U32 => self.uint,
            _ => None,
        }
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
