//! The element-wise kernel family (`shaders/elementwise.wgsl`, specialized per op and dtype):
//! for every ONNX element-wise op its arity and WGSL expression (of `a`, `b`) per type class,
//! Cast's conversions, and the dispatcher (numpy broadcasting by strides, windows over large
//! tensors). Validation of the ops' inputs lives with the ops.

use super::operands::{elementwise_type, specialize, too_many};
use super::windows::Broadcast;
use super::{grid_for, Kernel, MAX_RANK};
use crate::{DType, Error, Recorder, Result, Tensor};

const ELEMENTWISE: &str = include_str!("../../shaders/elementwise.wgsl");

/// One element-wise op: its arity and WGSL expression (of `a`, `b`) per type class.
pub struct ElementwiseOp {
    /// The ONNX op's name.
    pub name: &'static str,
    /// Two operands (`a`, `b`), else one (`a`).
    pub binary: bool,
    /// The expression for float types (`None`: not defined on them).
    pub float: Option<&'static str>,
    /// The expression for signed integers.
    pub int: Option<&'static str>,
    /// The expression for unsigned integers.
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

/// WGSL: whether the f64 `$x` is NaN, from its bits (the sign shifted out), as a literal for
/// the static table below ([`f64_is_nan`] writes the same test for any expression).
macro_rules! nan64 {
    ($x:literal) => {
        concat!("((bitcast<u64>(", $x, ") << 1u) > 0xffe0000000000000lu)")
    };
}

/// Every element-wise op. ONNX semantics: integer Div truncates; Relu is max(x, 0); Pow and
/// Tanh as the word kernel's `onnx_pow` and `onnx_tanh` write them, Log as its `onnx_log`. NaN
/// propagates through Max, Min, Relu and Tanh as in onnxruntime (WGSL leaves max and min of
/// NaN open). Max, Min and Relu's float expressions serve f64 only (f32 has `F32_BITWISE`)
/// and test NaN on the bits: NVIDIA's driver folds `!(a == a)` next to a min or max away.
pub static OPS: [ElementwiseOp; 16] = [
    op("Add", true, Some("a + b"), Some("a + b"), Some("a + b")),
    op("Sub", true, Some("a - b"), Some("a - b"), Some("a - b")),
    op("Mul", true, Some("a * b"), Some("a * b"), Some("a * b")),
    op("Div", true, Some("a / b"), Some("a / b"), Some("a / b")),
    op(
        "Max",
        true,
        Some(concat!(
            "select(max(a, b), a + b, ",
            nan64!("a"),
            " || ",
            nan64!("b"),
            ")"
        )),
        Some("max(a, b)"),
        Some("max(a, b)"),
    ),
    op(
        "Min",
        true,
        Some(concat!(
            "select(min(a, b), a + b, ",
            nan64!("a"),
            " || ",
            nan64!("b"),
            ")"
        )),
        Some("min(a, b)"),
        Some("min(a, b)"),
    ),
    op("Pow", true, Some("onnx_pow(a, b)"), None, None),
    op("Neg", false, Some("-a"), Some("-a"), None),
    op("Abs", false, Some("abs(a)"), Some("abs(a)"), Some("a")),
    op("Exp", false, Some("exp(a)"), None, None),
    op("Log", false, Some("onnx_log(a)"), None, None),
    op("Sqrt", false, Some("sqrt(a)"), None, None),
    op("Reciprocal", false, Some("1.0 / a"), None, None),
    op("Tanh", false, Some("onnx_tanh(a)"), None, None),
    op("Sigmoid", false, Some("1.0 / (1.0 + exp(-a))"), None, None),
    op(
        "Relu",
        false,
        Some(concat!("select(max(a, 0.0), a, ", nan64!("a"), ")")),
        Some("max(a, 0)"),
        None,
    ),
];

/// The op of [`OPS`] named `name`.
pub fn lookup(name: &str) -> Option<&'static ElementwiseOp> {
    OPS.iter().find(|o| o.name == name)
}

/// The ops whose f64 expressions compile to native f64 instructions.
const F64_NATIVE: [&str; 11] = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Relu",
];

/// f32 ops written for GPUs that flush subnormal f32 values to zero in arithmetic and
/// comparisons (NVIDIA's Vulkan driver does; WGSL allows it). Those that only choose a value or
/// change its sign work on the bits and stay exact (comparisons on `f32_order_key`). Div
/// scales a divisor beyond 2^126 by 1/8 first: GPUs divide by multiplying with the
/// reciprocal, which is subnormal there and flushed, so MAX / MAX gave 0.
static F32_BITWISE: std::sync::LazyLock<[(&str, String); 6]> = std::sync::LazyLock::new(|| {
    let either_nan = format!("{} || {}", f32_is_nan("a"), f32_is_nan("b"));
    [
        ("Neg", "bitcast<f32>(bitcast<u32>(a) ^ 0x80000000u)".into()),
        (
            "Div",
            "select(a / b, (a * 0.125) / (b * 0.125), abs(b) > 8.507059e37)".into(),
        ),
        ("Abs", "bitcast<f32>(bitcast<u32>(a) & 0x7fffffffu)".into()),
        (
            "Relu",
            format!(
                "select(a, 0.0, bitcast<i32>(a) < 0 && !{})",
                f32_is_nan("a")
            ),
        ),
        (
            "Max",
            format!(
                "select(select(a, b, {} < {}), a + b, {either_nan})",
                f32_order_key("a"),
                f32_order_key("b")
            ),
        ),
        (
            "Min",
            format!(
                "select(select(a, b, {} < {}), a + b, {either_nan})",
                f32_order_key("b"),
                f32_order_key("a")
            ),
        ),
    ]
});

/// WGSL: the f32 `x`'s bits as an i32 that orders floats as numbers (-0 below +0; the
/// magnitude bits of negatives flipped), for comparisons that must not flush subnormals.
pub(crate) fn f32_order_key(x: &str) -> String {
    format!("(bitcast<i32>({x}) ^ ((bitcast<i32>({x}) >> 31u) & 0x7fffffff))")
}

/// WGSL: whether the f64 `x` is NaN, from its bits (the sign shifted out).
pub(crate) fn f64_is_nan(x: &str) -> String {
    format!(nan64!("{0}"), x)
}

/// WGSL: whether the f32 `x` is NaN, from its bits.
pub(crate) fn f32_is_nan(x: &str) -> String {
    format!("((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)")
}

/// The ops whose expressions call functions only the word kernel's template has.
const WORDS_ONLY: [&str; 3] = ["Pow", "Tanh", "Log"];

impl ElementwiseOp {
    /// The WGSL expression computing the op on `dtype` in the typed kernel, if it computes
    /// that dtype (the word kernel computes the rest).
    pub fn wgsl(&self, dtype: DType) -> Option<&'static str> {
        if WORDS_ONLY.contains(&self.name) {
            return None;
        }
        self.expression(dtype)
    }

    /// The op's WGSL expression for the 32- or 64-bit type `dtype` computes in.
    pub fn expression(&self, dtype: DType) -> Option<&'static str> {
        match dtype {
            DType::F32 => F32_BITWISE
                .iter()
                .find(|(name, _)| *name == self.name)
                .map(|(_, e)| e.as_str())
                .or(self.float),
            // Vulkan's extended instructions have no f64 exp, log, tanh or pow: those need
            // software implementations, not written yet.
            DType::F64 if F64_NATIVE.contains(&self.name) => self.float,
            DType::I32 | DType::I64 => self.int,
            DType::U32 | DType::U64 => self.uint,
            _ => None,
        }
    }
}

/// The Cast kernel's expression, with Rust's `as` semantics (which the reference uses). Floats
/// become integers rounded toward zero, saturated to the target's range (its maximum included,
/// which clamping to the largest float below it cannot reach), NaN as 0: WGSL's own conversion
/// stops below the maximum, and naga's GLSL output is undefined out of range (negative floats
/// wrapped to huge `u32`s on llvmpipe GL), so every case is written out. NaN is found by its
/// bits for f32 (`a != a` compiles to an ordered comparison on lavapipe, false for NaN), and for
/// f64 (whose bits would need 64-bit integers, another feature) as the value that is neither
/// <= 0 nor > 0.
pub fn cast_expression(from: DType, to: DType) -> String {
    let nan = match (from, to) {
        (DType::F32, _) => "(bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u",
        (DType::F64, _) => "!(a <= 0.0 || a > 0.0)",
        // naga widens integers by the target's signedness (u64 zero-extends, i64
        // sign-extends); Rust's `as`, like C++'s, extends by the source's: widen within the
        // source's signedness, then reinterpret.
        (DType::I32, DType::U64) => return "U(i64(a))".into(),
        (DType::U32, DType::I64) => return "U(u64(a))".into(),
        _ => return "U(a)".into(),
    };
    let (lo, below, max, limit, zero) = match (from, to) {
        (DType::F32, DType::U32) => ("0.0", "4294967040.0", "4294967295u", "4294967296.0", "0u"),
        (DType::F32, DType::I32) => (
            "-2147483648.0",
            "2147483520.0",
            "2147483647i",
            "2147483648.0",
            "0i",
        ),
        (DType::F32, DType::I64) => (
            "-9223372036854775808.0",
            "9223371487098961920.0",
            "9223372036854775807li",
            "9223372036854775808.0",
            "0li",
        ),
        (DType::F32, DType::U64) => (
            "0.0",
            "18446742974197923840.0",
            "18446744073709551615lu",
            "18446744073709551616.0",
            "0lu",
        ),
        (DType::F64, DType::U32) => ("0.0", "4294967295.0", "4294967295u", "4294967296.0", "0u"),
        (DType::F64, DType::I32) => (
            "-2147483648.0",
            "2147483647.0",
            "2147483647i",
            "2147483648.0",
            "0i",
        ),
        (DType::F64, DType::I64) => (
            "-9223372036854775808.0",
            "9223372036854774784.0",
            "9223372036854775807li",
            "9223372036854775808.0",
            "0li",
        ),
        (DType::F64, DType::U64) => (
            "0.0",
            "18446744073709549568.0",
            "18446744073709551615lu",
            "18446744073709551616.0",
            "0lu",
        ),
        // Subnormal f32 values by their bits (2^-149 per unit of the mantissa is exact in
        // f64), as flushing GPUs would read them as zero.
        (DType::F32, DType::F64) => {
            return "select(U(a), select(U(1), U(-1), bitcast<i32>(a) < 0) * U(bitcast<u32>(a) & 0x7fffffu) * 1.401298464324817e-45, (bitcast<u32>(a) & 0x7f800000u) == 0u)".into()
        }
        // Between floats.
        _ => return "U(a)".into(),
    };
    format!("select(select(U(clamp(a, {lo}, {below})), {max}, a >= {limit}), {zero}, {nan})")
}

/// WGSL source of the element-wise kernel computing `expression` (of `a`, `b`) from `lhs`
/// elements to `out` elements.
pub fn elementwise_source(lhs: &str, out: &str, expression: &str) -> String {
    specialize(
        ELEMENTWISE,
        &[
            ("// LHS TYPE", format!("alias T = {lhs};")),
            ("// OUT TYPE", format!("alias U = {out};")),
            ("// EXPRESSION", format!("    return {expression};")),
        ],
    )
}

/// Element strides of `shape` seen through the broadcast to `out` (0 on broadcast axes).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<u64> {
    let lead = out.len() - shape.len();
    let mut strides = vec![0u64; out.len()];
    let mut s = 1u64;
    for k in (0..shape.len()).rev() {
        if shape[k] != 1 {
            strides[lead + k] = s;
        }
        s *= shape[k] as u64;
    }
    strides
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ElementwiseParams {
    count: u32,
    rank: u32,
    lhs_base: u32,
    rhs_base: u32,
    dst_base: u32,
    pad: [u32; 3],
    shape: [u32; MAX_RANK],
    lhs_stride: [u32; MAX_RANK],
    rhs_stride: [u32; MAX_RANK],
}

impl Recorder {
    /// Records `out = expression(lhs, rhs)` with broadcasting; `rhs` is `lhs` for unary ops.
    /// `expression` must be valid for the WGSL types of the dtypes (checked by the caller).
    pub(crate) fn elementwise_into(
        &mut self,
        op: &'static str,
        lhs: &Tensor,
        rhs: &Tensor,
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        if count > u64::from(u32::MAX) {
            return Err(too_many(op, "the output", count));
        }
        let ctx = self.context().clone();
        if elementwise_type(lhs.dtype()).is_none() || elementwise_type(out.dtype()).is_none() {
            return Err(Error::invalid(
                op,
                "A",
                format!("{op} on {} cannot be computed in WGSL", lhs.dtype()),
            ));
        }
        let rank = out.rank();
        if rank > MAX_RANK {
            return Err(Error::invalid(
                op,
                "A",
                format!("rank {rank} exceeds {MAX_RANK}"),
            ));
        }
        let wg = ctx.workgroup_size();
        // Cast converts `lhs`'s dtype to `out`'s; every other op computes in one dtype.
        let kernel = if op == "Cast" {
            Kernel::Cast {
                from: lhs.dtype(),
                to: out.dtype(),
                workgroup_size: wg,
            }
        } else {
            Kernel::Elementwise {
                op,
                dtype: lhs.dtype(),
                workgroup_size: wg,
            }
        };
        let pipeline = ctx.pipeline(&kernel)?;

        // Buffers: lhs, rhs, out (Cast may change the element size).
        let plan = Broadcast::plan(&ctx, op, &[lhs, rhs], out)?;
        for w in &plan.walks {
            let (firsts, bindings) = plan.bind(w);
            let mut params = ElementwiseParams {
                count: w.count() as u32,
                rank: w.lens.len() as u32,
                lhs_base: firsts[0] as u32,
                rhs_base: firsts[1] as u32,
                dst_base: firsts[2] as u32,
                pad: [0; 3],
                shape: [1; MAX_RANK],
                lhs_stride: [0; MAX_RANK],
                rhs_stride: [0; MAX_RANK],
            };
            let r = w.lens.len();
            for k in 0..r {
                let j = r - 1 - k; // innermost first
                params.shape[k] = w.lens[j] as u32;
                params.lhs_stride[k] = w.steps[j][0] as u32;
                params.rhs_stride[k] = w.steps[j][1] as u32;
            }
            let grid = grid_for(&ctx, op, w.count(), wg)?;
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        }
        Ok(())
    }
}
