//! The word kernel family (`shaders/elementwise_words.wgsl`): element-wise ops of one to three
//! operands on every dtype, each operand read from raw 32-bit words into the type it computes
//! in, the result narrowed when stored. It computes what the typed element-wise kernel cannot:
//! 8- and 16-bit integers, `f16`, `bf16` and `bool` (in 32-bit arithmetic, then wrapped or
//! rounded to nearest-even), operands of different dtypes (`Where`, comparisons, `Pow` with an
//! exponent of another type), and `Cast` between all 13 dtypes.

use super::elementwise::{cast_expression, f32_is_nan, f32_order_key, f64_is_nan, lookup};
use super::operands::native_feature;
use super::program::Program;
use super::Kernel;
use crate::{CastMode, DType, Recorder, Result, Round, Tensor};

pub(crate) const WORDS: &str = concat!(
    include_str!("../../shaders/elementwise_words.wgsl"),
    "\n",
    include_str!("../../shaders/divide.inc")
);
/// f64 exp, log, tanh, sigmoid and pow written out (Vulkan has none): helpers of the f64
/// variants only, since a module with f64 in it needs wgpu's `SHADER_F64`.
pub(crate) const F64_MATH: &str = include_str!("../../shaders/f64_math.inc");
/// f64 computed from its bits on u32 pairs (`shaders/f64_emulation.inc`), for adapters
/// without `SHADER_F64`: arithmetic, square root, order, rounding and conversions, each the
/// CPU's bits. It builds on [`I64_EMULATION`], which precedes it in every module.
pub(crate) const F64_EMULATION: &str = include_str!("../../shaders/f64_emulation.inc");
/// exp, log, tanh, sigmoid and pow on the f64 emulation (`shaders/f64_emulation_math.inc`):
/// helpers of the variants that call them, after [`F64_EMULATION`].
pub(crate) const F64_EMULATION_MATH: &str = include_str!("../../shaders/f64_emulation_math.inc");
/// erf, log(1 + x) and the trigonometric and hyperbolic functions on the f64 emulation
/// (`shaders/f64_emulation_special.inc`): helpers of the variants that call them, after
/// [`F64_EMULATION_MATH`].
pub(crate) const F64_EMULATION_SPECIAL: &str =
    include_str!("../../shaders/f64_emulation_special.inc");
/// The 8-, 6- and 4-bit floats' conversions (`shaders/minifloat.inc`): helpers of the programs
/// whose dtypes include a storage-only type.
pub(crate) const MINIFLOAT: &str = include_str!("../../shaders/minifloat.inc");
/// The circular and hyperbolic functions and their inverses on f32 written out (GPUs
/// approximate the built-ins, and far from 0 not at all): helpers of the variants that call them.
const TRIG32: &str = include_str!("../../shaders/trig_f32.inc");

/// The trigonometric and hyperbolic ops (ONNX names) with their f32 and f64 functions.
pub(crate) const TRIGONOMETRIC: [(&str, &str, &str); 11] = [
    ("Sin", "onnx_sin", "sin64"),
    ("Cos", "onnx_cos", "cos64"),
    ("Tan", "onnx_tan", "tan64"),
    ("Asin", "onnx_asin", "asin64"),
    ("Acos", "onnx_acos", "acos64"),
    ("Atan", "onnx_atan", "atan64"),
    ("Sinh", "onnx_sinh", "sinh64"),
    ("Cosh", "onnx_cosh", "cosh64"),
    ("Asinh", "onnx_asinh", "asinh64"),
    ("Acosh", "onnx_acosh", "acosh64"),
    ("Atanh", "onnx_atanh", "atanh64"),
];

/// The WGSL of trigonometric op `name` on operands of `class` (floats only).
fn trigonometric(name: &str, class: Class) -> Option<Expr> {
    let &(_, f32_fn, f64_fn) = TRIGONOMETRIC.iter().find(|(op, _, _)| *op == name)?;
    let (helpers, function) = match class {
        Class::Float => (TRIG32, f32_fn),
        Class::Double => (F64_MATH, f64_fn),
        _ => return None,
    };
    Some(Expr {
        helpers: helpers.into(),
        expression: format!("{function}(a)"),
    })
}

/// How an operand computes: the WGSL type its elements are widened into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// f32, and f16 and bf16 widened to f32.
    Float,
    /// f64 (wgpu's `SHADER_F64`).
    Double,
    /// i32, and i8 and i16 sign-extended.
    Int,
    /// i64 (`SHADER_INT64`).
    Long,
    /// u32, and u8 and u16 zero-extended.
    Uint,
    /// u64 (`SHADER_INT64`).
    Ulong,
    /// bool as u32 0 or 1.
    Bool,
}

impl Class {
    /// The class a kernel holds `dtype` in.
    pub fn of(dtype: DType) -> Class {
        match dtype {
            DType::F32
            | DType::F16
            | DType::BF16
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0
            | DType::F4E2M1
            | DType::F6E2M3
            | DType::F6E3M2 => Class::Float,
            DType::F64 => Class::Double,
            DType::I8 | DType::I16 | DType::I32 | DType::I4 | DType::I2 => Class::Int,
            DType::I64 => Class::Long,
            DType::U8 | DType::U16 | DType::U32 | DType::U4 | DType::U2 => Class::Uint,
            DType::U64 => Class::Ulong,
            DType::Bool => Class::Bool,
        }
    }

    /// The WGSL type the class computes in.
    pub fn wgsl(self) -> &'static str {
        match self {
            Class::Float => "f32",
            Class::Double => "f64",
            Class::Int => "i32",
            Class::Long => "i64",
            Class::Uint | Class::Bool => "u32",
            Class::Ulong => "u64",
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Class::Float | Class::Double)
    }

    fn is_signed(self) -> bool {
        matches!(self, Class::Int | Class::Long)
    }

    fn is_unsigned(self) -> bool {
        matches!(self, Class::Uint | Class::Ulong)
    }

    fn is_number(self) -> bool {
        self != Class::Bool
    }

    /// The dtype of 32 or 64 bits that computes like this class (bool as u32).
    pub fn wide(self) -> DType {
        match self {
            Class::Float => DType::F32,
            Class::Double => DType::F64,
            Class::Int => DType::I32,
            Class::Long => DType::I64,
            Class::Uint | Class::Bool => DType::U32,
            Class::Ulong => DType::U64,
        }
    }
}

/// WGSL expression loading element `i` of `dtype` from the words of `buffer`: 8-byte elements
/// from a pair of words, narrower ones from their field of a word (see [`decode_expression`]).
pub(crate) fn load_expression(dtype: DType, buffer: &str) -> String {
    let pair = format!("((u64({buffer}[2u * i + 1u]) << 32u) | u64({buffer}[2u * i]))");
    match dtype {
        DType::U64 => pair,
        DType::I64 => format!("bitcast<i64>{pair}"),
        DType::F64 => format!("bitcast<f64>{pair}"),
        _ => {
            let raw = match dtype.size() {
                4 => format!("{buffer}[i]"),
                2 => format!("field({buffer}[i / 2u], i, 16u)"),
                _ => format!("field({buffer}[i / 4u], i, 8u)"),
            };
            decode_expression(dtype, &raw)
        }
    }
}

/// WGSL expression of the value of `dtype` whose stored bits are `raw` (a u32 expression, the
/// element's bits zero-extended), for elements of at most 4 bytes: how [`load_expression`]
/// and the dense entry point widen what they read.
pub(crate) fn decode_expression(dtype: DType, raw: &str) -> String {
    match dtype {
        DType::F32 => format!("bitcast<f32>({raw})"),
        DType::I32 => format!("bitcast<i32>({raw})"),
        DType::U32 | DType::U8 | DType::U16 => raw.to_string(),
        DType::F16 => format!("f16_to_f32({raw})"),
        DType::BF16 => format!("bitcast<f32>({raw} << 16u)"),
        DType::I8 => format!("(bitcast<i32>({raw} << 24u) >> 24u)"),
        DType::I16 => format!("(bitcast<i32>({raw} << 16u) >> 16u)"),
        DType::Bool => format!("u32({raw} != 0u)"),
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1
        | DType::F6E2M3
        | DType::F6E3M2 => format!("{}_to_f32({raw})", dtype.name()),
        DType::I4 => format!("(bitcast<i32>({raw} << 28u) >> 28u)"),
        DType::I2 => format!("(bitcast<i32>({raw} << 30u) >> 30u)"),
        DType::U4 => format!("({raw} & 0xfu)"),
        DType::U2 => format!("({raw} & 0x3u)"),
        DType::U64 | DType::I64 | DType::F64 => {
            unreachable!("decode_expression: 8-byte elements are read as word pairs")
        }
    }
}

/// WGSL expression of the stored bits of result `r` as `dtype`: the low word (whose low 8 or
/// 16 bits the kernel keeps for narrow types) and the high word.
pub(crate) fn bits_expression(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 | DType::I32 | DType::I8 | DType::I16 => "vec2<u32>(bitcast<u32>(r), 0u)",
        DType::U32 | DType::U8 | DType::U16 | DType::Bool => "vec2<u32>(r, 0u)",
        DType::F16 => "vec2<u32>(f32_to_f16(r), 0u)",
        DType::BF16 => "vec2<u32>(f32_to_bf16(r), 0u)",
        DType::U64 => "vec2<u32>(u32(r & 0xfffffffflu), u32(r >> 32u))",
        DType::I64 | DType::F64 => {
            "vec2<u32>(u32(bitcast<u64>(r) & 0xfffffffflu), u32(bitcast<u64>(r) >> 32u))"
        }
        DType::F8E4M3FN => "vec2<u32>(f32_to_f8e4m3fn(r), 0u)",
        DType::F8E4M3FNUZ => "vec2<u32>(f32_to_f8e4m3fnuz(r), 0u)",
        DType::F8E5M2 => "vec2<u32>(f32_to_f8e5m2(r), 0u)",
        DType::F8E5M2FNUZ => "vec2<u32>(f32_to_f8e5m2fnuz(r), 0u)",
        DType::F4E2M1 => "vec2<u32>(f32_to_f4e2m1(r), 0u)",
        DType::F6E2M3 => "vec2<u32>(f32_to_f6e2m3(r), 0u)",
        DType::F6E3M2 => "vec2<u32>(f32_to_f6e3m2(r), 0u)",
        // Cast leaves the code in the exponent field (see `small_float_cast`).
        DType::F8E8M0 => "vec2<u32>((bitcast<u32>(r) >> 23u) & 0xffu, 0u)",
        DType::I4 => "vec2<u32>(bitcast<u32>(r) & 0xfu, 0u)",
        DType::I2 => "vec2<u32>(bitcast<u32>(r) & 0x3u, 0u)",
        DType::U4 => "vec2<u32>(r & 0xfu, 0u)",
        DType::U2 => "vec2<u32>(r & 0x3u, 0u)",
    }
}

/// An op's WGSL: helper functions (of the operand types `A`, `B`, `C` and result type `R`)
/// and the expression of `a`, `b`, `c`.
pub struct Expr {
    /// Functions the expression calls.
    pub helpers: String,
    /// The expression.
    pub expression: String,
}

fn expr(expression: impl Into<String>) -> Option<Expr> {
    Some(Expr {
        helpers: String::new(),
        expression: expression.into(),
    })
}

/// Integer power by squaring, wrapping like the other integer ops; a negative exponent gives
/// what truncating the real power gives (0, or +-1 for a base of +-1; 0 for a base of 0).
const INT_POW: &str = "fn int_pow(base: A, exponent: A) -> A {
    if exponent < A(0) {
        if base == A(1) { return A(1); }
        if base == A(-1) { return select(A(1), A(-1), (exponent & A(1)) != A(0)); }
        return A(0);
    }
    var r = A(1);
    var x = base;
    var e = exponent;
    while e > A(0) {
        if (e & A(1)) != A(0) { r *= x; }
        x *= x;
        e = e >> 1u;
    }
    return r;
}";

/// Integer Mod with the divisor's sign (Python's %); 0 for a divisor of 0.
const INT_MOD: &str = "fn int_mod(a: A, b: A) -> A {
    if b == A(0) { return A(0); }
    let r = a % b;
    return select(r, r + b, r != A(0) && ((r < A(0)) != (b < A(0))));
}";

/// C's fmod and Python's float % on the float type `A` whose largest finite value is `BIG`,
/// exact: the remainder is reduced by the divisor scaled by powers of two, largest first, and
/// each subtraction is exact (Sterbenz: s <= r < 2s). Zeros keep the sign C and numpy give.
const FLOAT_MOD: &str = "fn c_fmod(a: A, b: A) -> A {
    let m = abs(b);
    var r = abs(a);
    if !(r <= A(BIG)) || !(m > A(0)) {
        // An infinite or NaN dividend, a zero or NaN divisor: NaN, made at run time.
        let z = m - m;
        return z / z;
    }
    if r < m {
        return a;
    }
    var s = m;
    while s <= r * A(0.5) {
        s = s * A(2);
    }
    loop {
        if r >= s {
            r = r - s;
        }
        if s == m {
            break;
        }
        s = s * A(0.5);
    }
    return select(r, -r, a < A(0));
}
fn py_mod(a: A, b: A) -> A {
    let r = c_fmod(a, b);
    if r == A(0) { return select(A(0), -A(0), b < A(0)); }
    return select(r, r + b, (r < A(0)) != (b < A(0)));
}";

/// A bitwise op's expression on integers (narrow ones widened: the store keeps their bits).
fn bitwise(classes: &[Class], expression: &str) -> Option<Expr> {
    let c = classes[0];
    (c.is_signed() || c.is_unsigned())
        .then(|| expr(expression))
        .flatten()
}

/// Where the result dtype of an op comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Result_ {
    /// The first operand's dtype (the second's for `Where`).
    Same,
    /// bool.
    Bool,
}

/// One op the word kernel computes beyond the typed kernel's table: operand count, result,
/// and its WGSL for operand classes (None where ONNX does not define it on those dtypes).
pub struct WordOp {
    /// The op's name.
    pub name: &'static str,
    /// Operands it reads (1 to 3).
    pub inputs: usize,
    /// Its result's type.
    pub result: Result_,
    /// Its WGSL for the operands' classes.
    pub wgsl: fn(&[Class]) -> Option<Expr>,
}

/// `u32(bits of a <test>)` on f32 (f16 and bf16 widened exactly) or f64, the sign bit cleared
/// first where `magnitude`.
fn float_bits_test(class: Class, test32: &str, test64: &str, magnitude: bool) -> Option<Expr> {
    match class {
        Class::Float if magnitude => expr(format!("u32((bitcast<u32>(a) & 0x7fffffffu) {test32})")),
        Class::Float => expr(format!("u32(bitcast<u32>(a) {test32})")),
        Class::Double if magnitude => expr(format!(
            "u32((bitcast<u64>(a) & 0x7ffffffffffffffflu) {test64})"
        )),
        Class::Double => expr(format!("u32(bitcast<u64>(a) {test64})")),
        _ => None,
    }
}

fn compare(op: &'static str, classes: &[Class]) -> Option<Expr> {
    (classes[0].is_number() && classes[0] == classes[1]).then(|| Expr {
        helpers: String::new(),
        expression: format!("u32(a {op} b)"),
    })
}

/// The ops only the word kernel computes.
pub static WORD_OPS: [WordOp; 42] = [
    WordOp {
        name: "Equal",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| (c[0] == c[1]).then(|| expr("u32(a == b)")).flatten(),
    },
    WordOp {
        name: "Less",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| compare("<", c),
    },
    WordOp {
        name: "LessOrEqual",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| compare("<=", c),
    },
    WordOp {
        name: "Greater",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| compare(">", c),
    },
    WordOp {
        name: "GreaterOrEqual",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| compare(">=", c),
    },
    WordOp {
        name: "And",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| (c == [Class::Bool; 2]).then(|| expr("a & b")).flatten(),
    },
    WordOp {
        name: "Or",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| (c == [Class::Bool; 2]).then(|| expr("a | b")).flatten(),
    },
    WordOp {
        name: "Xor",
        inputs: 2,
        result: Result_::Bool,
        wgsl: |c| (c == [Class::Bool; 2]).then(|| expr("a ^ b")).flatten(),
    },
    WordOp {
        name: "Not",
        inputs: 1,
        result: Result_::Bool,
        wgsl: |c| (c[0] == Class::Bool).then(|| expr("a ^ 1u")).flatten(),
    },
    WordOp {
        name: "Where",
        inputs: 3,
        result: Result_::Same,
        wgsl: |c| {
            (c[0] == Class::Bool && c[1] == c[2])
                .then(|| expr("select(c, b, a != 0u)"))
                .flatten()
        },
    },
    WordOp {
        name: "Sign",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| {
            match c[0] {
            // On the bits for f32, so subnormals count as nonzero where GPUs flush them.
            Class::Float => expr(format!(
                "select(select(1.0, -1.0, bitcast<i32>(a) < 0), a, (bitcast<u32>(a) & 0x7fffffffu) == 0u || {})",
                f32_is_nan("a")
            )),
            Class::Double => expr(format!("select(sign(a), a, {})", f64_is_nan("a"))),
            Class::Int | Class::Long => expr("A(a > A(0)) - A(a < A(0))"),
            Class::Uint | Class::Ulong => expr("A(a > A(0))"),
            Class::Bool => None,
        }
        },
    },
    WordOp {
        name: "Floor",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| c[0].is_float().then(|| expr("floor(a)")).flatten(),
    },
    WordOp {
        name: "Ceil",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| c[0].is_float().then(|| expr("ceil(a)")).flatten(),
    },
    WordOp {
        name: "Round",
        inputs: 1,
        result: Result_::Same,
        // WGSL's round takes halves to even, as ONNX's does. f64 is written out: lavapipe
        // (Mesa 22.3.6) rounds 1.5 to 1 on some x86 CPUs (AMD EPYC seen) where it gives 2 on
        // others.
        wgsl: |c| match c[0] {
            Class::Double => Some(Expr {
                helpers: F64_MATH.into(),
                expression: "round_even64(a)".into(),
            }),
            _ => c[0].is_float().then(|| expr("round(a)")).flatten(),
        },
    },
    WordOp {
        name: "Erf",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| match c[0] {
            Class::Float => expr("onnx_erf(a)"),
            Class::Double => Some(Expr {
                helpers: F64_MATH.into(),
                expression: "erf64(a)".into(),
            }),
            _ => None,
        },
    },
    // log(1 + a), for Softplus: exact where 1 + a rounds (not an ONNX op).
    WordOp {
        name: "Log1p",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| match c[0] {
            Class::Float => expr("onnx_log1p(a)"),
            Class::Double => Some(Expr {
                helpers: F64_MATH.into(),
                expression: "log1p64(a)".into(),
            }),
            _ => None,
        },
    },
    WordOp {
        name: "Sin",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Sin", c[0]),
    },
    WordOp {
        name: "Cos",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Cos", c[0]),
    },
    WordOp {
        name: "Tan",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Tan", c[0]),
    },
    WordOp {
        name: "Asin",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Asin", c[0]),
    },
    WordOp {
        name: "Acos",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Acos", c[0]),
    },
    WordOp {
        name: "Atan",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Atan", c[0]),
    },
    WordOp {
        name: "Sinh",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Sinh", c[0]),
    },
    WordOp {
        name: "Cosh",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Cosh", c[0]),
    },
    WordOp {
        name: "Asinh",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Asinh", c[0]),
    },
    WordOp {
        name: "Acosh",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Acosh", c[0]),
    },
    WordOp {
        name: "Atanh",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| trigonometric("Atanh", c[0]),
    },
    // The bitwise ops on integers; BitShift by its direction (BitShift-28: signed integers
    // shift right arithmetically; a negative shift, or one of the width or more, gives what
    // the sign alone gives: 0, or -1 for a negative value shifted right).
    WordOp {
        name: "BitwiseAnd",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| bitwise(c, "a & b"),
    },
    WordOp {
        name: "BitwiseOr",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| bitwise(c, "a | b"),
    },
    WordOp {
        name: "BitwiseXor",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| bitwise(c, "a ^ b"),
    },
    WordOp {
        name: "BitwiseNot",
        inputs: 1,
        result: Result_::Same,
        wgsl: |c| bitwise(c, "~a"),
    },
    WordOp {
        name: "BitShiftLeft",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| match c[0] {
            Class::Uint => expr("select(a << b, 0u, b >= 32u)"),
            Class::Ulong => expr("select(a << u32(min(b, 63lu)), 0lu, b >= 64lu)"),
            Class::Int => expr("select(a << u32(clamp(b, 0, 31)), 0, b < 0 || b >= 32)"),
            Class::Long => expr("select(a << u32(clamp(b, 0li, 63li)), 0li, b < 0li || b >= 64li)"),
            _ => None,
        },
    },
    WordOp {
        name: "BitShiftRight",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| match c[0] {
            Class::Uint => expr("select(a >> b, 0u, b >= 32u)"),
            Class::Ulong => expr("select(a >> u32(min(b, 63lu)), 0lu, b >= 64lu)"),
            // Shifting by 31 (63) fills with the sign: what a shift out of range gives.
            Class::Int => expr("a >> u32(select(b, 31, b < 0 || b > 31))"),
            Class::Long => expr("a >> u32(select(b, 63li, b < 0li || b > 63li))"),
            _ => None,
        },
    },
    // IsNaN and IsInf on the bits (drivers may fold `a != a` away); IsInf's attributes name
    // the op: both signs, +inf only, -inf only, neither.
    WordOp {
        name: "IsNaN",
        inputs: 1,
        result: Result_::Bool,
        wgsl: |c| float_bits_test(c[0], "> 0x7f800000u", "> 0x7ff0000000000000lu", true),
    },
    WordOp {
        name: "IsInf",
        inputs: 1,
        result: Result_::Bool,
        wgsl: |c| float_bits_test(c[0], "== 0x7f800000u", "== 0x7ff0000000000000lu", true),
    },
    WordOp {
        name: "IsPosInf",
        inputs: 1,
        result: Result_::Bool,
        wgsl: |c| float_bits_test(c[0], "== 0x7f800000u", "== 0x7ff0000000000000lu", false),
    },
    WordOp {
        name: "IsNegInf",
        inputs: 1,
        result: Result_::Bool,
        wgsl: |c| float_bits_test(c[0], "== 0xff800000u", "== 0xfff0000000000000lu", false),
    },
    WordOp {
        name: "IsInfNone",
        inputs: 1,
        result: Result_::Bool,
        wgsl: |c| c[0].is_float().then(|| expr("0u")).flatten(),
    },
    // ONNX Mod with fmod = 0: the result takes the divisor's sign (Python's %).
    WordOp {
        name: "Mod",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| match c[0] {
            Class::Int | Class::Long => Some(Expr {
                helpers: INT_MOD.into(),
                expression: "int_mod(a, b)".into(),
            }),
            Class::Uint | Class::Ulong => expr("select(a % b, A(0), b == A(0))"),
            Class::Float => Some(Expr {
                helpers: FLOAT_MOD.replace("BIG", "3.4028234663852886e38"),
                expression: "py_mod(a, b)".into(),
            }),
            Class::Double => Some(Expr {
                helpers: FLOAT_MOD.replace("BIG", "1.7976931348623157e308"),
                expression: "py_mod(a, b)".into(),
            }),
            Class::Bool => None,
        },
    },
    // ONNX Mod with fmod = 1: C's fmod, the result takes the dividend's sign.
    WordOp {
        name: "FMod",
        inputs: 2,
        result: Result_::Same,
        wgsl: |c| match c[0] {
            Class::Float => Some(Expr {
                helpers: FLOAT_MOD.replace("BIG", "3.4028234663852886e38"),
                expression: "c_fmod(a, b)".into(),
            }),
            Class::Double => Some(Expr {
                helpers: FLOAT_MOD.replace("BIG", "1.7976931348623157e308"),
                expression: "c_fmod(a, b)".into(),
            }),
            Class::Bool => None,
            _ => expr("select(a % b, A(0), b == A(0))"),
        },
    },
    WordOp {
        name: "Clip",
        inputs: 3,
        result: Result_::Same,
        wgsl: |c| {
            // Comparisons, as onnxruntime clamps: a NaN input stays NaN, a NaN bound
            // does not bound.
            // NaN is tested on its own: drivers may turn the selects into min and max, which
            // drop NaN (NVIDIA's does).
            if !(c[0].is_number() && c[0] == c[1] && c[1] == c[2]) {
                return None;
            }
            if c[0] != Class::Float {
                let clamped = "select(select(a, b, a < b), c, select(a, b, a < b) > c)";
                return if c[0] == Class::Double {
                    expr(format!("select({clamped}, a, {})", f64_is_nan("a")))
                } else {
                    expr(clamped)
                };
            }
            // f32 compared on the bits (as the typed kernel's Max and Min), so subnormals
            // keep their order where GPUs flush them in comparisons.
            let (key, nan) = (f32_order_key, f32_is_nan);
            let lo = format!("select(a, b, !{} && {} < {})", nan("b"), key("a"), key("b"));
            let hi = format!(
                "select({lo}, c, !{} && {} < {})",
                nan("c"),
                key("c"),
                key(&lo)
            );
            expr(format!("select({hi}, a, {})", nan("a")))
        },
    },
    WordOp {
        name: "Pow",
        inputs: 2,
        result: Result_::Same,
        // The exponent may be of another numeric type. Integer bases to integer exponents
        // by squaring; to float exponents through f32, truncated back.
        wgsl: |c| {
            match (c[0], c[1]) {
            (Class::Float, e) if e.is_number() => expr("onnx_pow(a, f32(b))"),
            (Class::Double, e) if e.is_number() => Some(Expr {
                helpers: F64_MATH.into(),
                expression: "pow64(a, f64(b))".into(),
            }),
            // 32-bit exponents of an i64 base widened from their words (sign- or
            // zero-extended by their own type): `i64(b)` here gave lavapipe exponents that
            // were neither negative nor positive.
            (Class::Long, Class::Int) => Some(Expr {
                helpers: INT_POW.into(),
                expression: "int_pow(a, bitcast<i64>((u64(bitcast<u32>(b >> 31u)) << 32u) | u64(bitcast<u32>(b))))".into(),
            }),
            (Class::Long, Class::Uint) => Some(Expr {
                helpers: INT_POW.into(),
                expression: "int_pow(a, bitcast<i64>(u64(b)))".into(),
            }),
            (Class::Int | Class::Long, e) if e.is_signed() || e.is_unsigned() => Some(Expr {
                helpers: INT_POW.into(),
                expression: "int_pow(a, A(b))".into(),
            }),
            // Computed in the exponent's float type (f64 as onnxruntime's std::pow), then
            // truncated back as Cast does (saturating, NaN as 0), not by the driver's
            // conversion, whose out-of-range results differ between GPUs.
            (Class::Int | Class::Long, e @ (Class::Float | Class::Double)) => {
                let to = if c[0] == Class::Int {
                    DType::I32
                } else {
                    DType::I64
                };
                let (float, pow, library) = match e {
                    Class::Float => (DType::F32, "onnx_pow", ""),
                    _ => (DType::F64, "pow64", F64_MATH),
                };
                let ty = e.wgsl();
                Some(Expr {
                    helpers: format!(
                        "{library}\nfn pow_to_int(base: A, exponent: {ty}) -> A {{\n    let a = {pow}({ty}(base), exponent);\n    return {};\n}}",
                        cast_words(float, to).replace("R(", "A(")
                    ),
                    expression: "pow_to_int(a, b)".into(),
                })
            }
            _ => None,
        }
        },
    },
];

/// The word kernel's Cast ops, one per [`CastMode`] (`Cast` is ONNX's default: saturating,
/// F8E8M0 rounded up). The mode matters only for the 8-bit floats.
pub const CAST_OPS: [(&str, CastMode); 7] = [
    ("Cast", cast_mode_of(true, Round::Up, false)),
    ("CastDown", cast_mode_of(true, Round::Down, false)),
    ("CastNearest", cast_mode_of(true, Round::Nearest, false)),
    ("CastNoSaturate", cast_mode_of(false, Round::Up, false)),
    (
        "CastNoSaturateDown",
        cast_mode_of(false, Round::Down, false),
    ),
    (
        "CastNoSaturateNearest",
        cast_mode_of(false, Round::Nearest, false),
    ),
    ("CastQuantize", cast_mode_of(true, Round::Up, true)),
];

const fn cast_mode_of(saturate: bool, round: Round, quantize: bool) -> CastMode {
    CastMode {
        saturate,
        round,
        quantize,
    }
}

/// The Cast op of the word kernel for a cast to `to` in `mode`: the default `Cast` wherever
/// the mode changes nothing (saturation and rounding matter for the 8-bit floats, clamping
/// for the 8-, 16-, 4- and 2-bit integers).
pub fn cast_op(to: DType, mode: CastMode) -> &'static str {
    let mode = match to {
        DType::F8E8M0 => CastMode {
            quantize: false,
            ..mode
        },
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => {
            cast_mode_of(mode.saturate, Round::Up, false)
        }
        DType::I8
        | DType::U8
        | DType::I16
        | DType::U16
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => cast_mode_of(true, Round::Up, mode.quantize),
        _ => CastMode::default(),
    };
    CAST_OPS
        .iter()
        .find(|(_, m)| *m == mode)
        .map_or("Cast", |(name, _)| name)
}

/// The mode of a word-kernel Cast op (`None` for other ops).
pub fn cast_mode(op: &str) -> Option<CastMode> {
    CAST_OPS
        .iter()
        .find(|(name, _)| *name == op)
        .map(|&(_, m)| m)
}

/// The range QuantizeLinear clamps an integer type to (`None` for the types it does not
/// quantize to).
pub fn quantized_range(dtype: DType) -> Option<(i32, i32)> {
    Some(match dtype {
        DType::I8 => (-128, 127),
        DType::U8 => (0, 255),
        DType::I16 => (-32768, 32767),
        DType::U16 => (0, 65535),
        DType::I4 => (-8, 7),
        DType::U4 => (0, 15),
        DType::I2 => (-2, 1),
        DType::U2 => (0, 3),
        _ => return None,
    })
}

/// A cast's expression to a small float from `inner`, the value as f32: clamped to the finite
/// range where saturating; for F8E8M0 the code itself, rounded as `mode` says and left in
/// the exponent field of an f32 (its store takes it from there).
fn small_float_cast(to: DType, mode: CastMode, inner: &str) -> Option<String> {
    let max = match to {
        DType::F8E4M3FN => "448.0",
        DType::F8E4M3FNUZ => "240.0",
        DType::F8E5M2 | DType::F8E5M2FNUZ => "57344.0",
        DType::F4E2M1 => "6.0",
        DType::F6E2M3 => "7.5",
        DType::F6E3M2 => "28.0",
        DType::F8E8M0 => {
            let round = match mode.round {
                Round::Up => 0,
                Round::Down => 1,
                Round::Nearest => 2,
            };
            return Some(format!(
                "bitcast<f32>(f32_to_f8e8m0(f32({inner}), {round}u, {}) << 23u)",
                mode.saturate
            ));
        }
        _ => return None,
    };
    Some(if mode.saturate {
        format!("clamp_finite(f32({inner}), {max})")
    } else {
        format!("f32({inner})")
    })
}

/// The op of [`WORD_OPS`] named `name`.
pub fn word_op(name: &str) -> Option<&'static WordOp> {
    WORD_OPS.iter().find(|o| o.name == name)
}

/// The WGSL of op `name` on operands of `dtypes` giving `out` (Cast, the ops of
/// [`WORD_OPS`], and the typed kernel's table on every dtype it is defined for).
pub fn word_expression(name: &str, dtypes: &[DType], out: DType) -> Option<Expr> {
    let classes: Vec<Class> = dtypes.iter().map(|&d| Class::of(d)).collect();
    if let Some(mode) = cast_mode(name) {
        return expr(cast_words_mode(dtypes[0], out, mode));
    }
    // The storage-only types are cast, never computed on.
    if dtypes.iter().any(|d| d.is_storage_only()) {
        return None;
    }
    // Operands of one dtype, but for Where's condition and Pow's exponent.
    // ONNX's Pow takes integer bases of 32 and 64 bits only.
    if name == "Pow" && dtypes[0].is_integer() && !matches!(dtypes[0], DType::I32 | DType::I64) {
        return None;
    }
    let same = match name {
        "Where" => &dtypes[1..],
        "Pow" => &dtypes[..1],
        _ => dtypes,
    };
    if same.iter().any(|&d| d != same[0]) {
        return None;
    }
    if let Some(op) = word_op(name) {
        return (op.inputs == dtypes.len())
            .then(|| (op.wgsl)(&classes))
            .flatten();
    }
    let op = lookup(name)?;
    if classes == [Class::Double] {
        let f = match name {
            "Exp" => "exp64",
            "Log" => "log64",
            "Tanh" => "tanh64",
            "Sigmoid" => "sigmoid64",
            _ => "",
        };
        if !f.is_empty() {
            return Some(Expr {
                helpers: F64_MATH.into(),
                expression: format!("{f}(a)"),
            });
        }
    }
    if dtypes.len() != 1 + usize::from(op.binary)
        || classes.iter().any(|&c| c != classes[0])
        || classes[0] == Class::Bool
    {
        return None;
    }
    // Computed in the class's wide type: the typed kernel's expression for it.
    expr(op.expression(classes[0].wide())?)
}

/// Cast's expression from `from` to `to` in the word kernel (the operand is `a` of `from`'s
/// class, the result of `to`'s). Integers narrow by wrapping (the store keeps the low bits),
/// floats to integers truncate toward zero and saturate to the target's range (NaN as 0),
/// anything to bool is `!= 0` (NaN is true), f64 to f16/bf16 rounds through f32.
pub fn cast_words(from: DType, to: DType) -> String {
    cast_words_mode(from, to, CastMode::default())
}

/// [`cast_words`] in `mode` (which matters for the 8-bit floats only). Floats to the 4- and
/// 2-bit integers truncate to i32 and wrap, as the ONNX reference does.
pub fn cast_words_mode(from: DType, to: DType, mode: CastMode) -> String {
    let (fc, tc) = (Class::of(from), Class::of(to));
    if tc == Class::Float && to.is_storage_only() {
        let inner = cast_words(from, DType::F32).replace("R(", "f32(");
        if let Some(e) = small_float_cast(to, mode, &inner) {
            return e;
        }
    }
    if let (Some((lo, hi)), true) = (quantized_range(to), mode.quantize && fc.is_float()) {
        // QuantizeLinear's cast: rounded half to even (WGSL's round), clamped; NaN as 0.
        let nan = if fc == Class::Float {
            "(bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u"
        } else {
            "!(a <= 0.0 || a > 0.0)"
        };
        // f64 halves are rounded from floor: lavapipe's built-in round takes them toward
        // zero on some CPUs.
        let rounded = if fc == Class::Float {
            "round(a)"
        } else {
            "(floor(a) + select(f64(0.0), f64(1.0), a - floor(a) > 0.5 || a - floor(a) == 0.5 && floor(a) - 2.0 * floor(floor(a) * 0.5) != 0.0))"
        };
        return format!("select(R(clamp({rounded}, {lo}.0, {hi}.0)), R(0), {nan})");
    }
    if to.packed_bits().is_some() && tc != Class::Float && fc.is_float() {
        return format!(
            "R({})",
            cast_expression(fc.wide(), DType::I32).replace("U(", "i32(")
        );
    }
    if tc == Class::Bool {
        return match fc {
            // NaN is not 0: compare the magnitude's bits, which no compiler reorders.
            Class::Float => "u32((bitcast<u32>(a) & 0x7fffffffu) != 0u)".into(),
            Class::Double => "u32(!(a == 0.0))".into(),
            _ => "u32(a != A(0))".into(),
        };
    }
    let narrow = match to {
        DType::I8 => Some(("-128.0", "127.0")),
        DType::I16 => Some(("-32768.0", "32767.0")),
        DType::U8 => Some(("0.0", "255.0")),
        DType::U16 => Some(("0.0", "65535.0")),
        _ => None,
    };
    if let (Some((lo, hi)), true) = (narrow, fc.is_float()) {
        let nan = if fc == Class::Float {
            "(bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u"
        } else {
            "!(a <= 0.0 || a > 0.0)"
        };
        return format!("select(R(clamp(a, {lo}, {hi})), R(0), {nan})");
    }
    let from_wide = if fc == Class::Bool {
        DType::U32
    } else {
        fc.wide()
    };
    cast_expression(from_wide, tc.wide()).replace("U(", "R(")
}

/// i64 and u64 as (low, high) u32 pairs, for adapters without `SHADER_INT64` (browsers):
/// wrapping add, subtract and multiply, negation, signed and unsigned order, long division,
/// and conversions to and from f32 rounded exactly from the bits.
pub(crate) const I64_EMULATION: &str = "fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn neg64(a: vec2<u32>) -> vec2<u32> {
    return add64(~a, vec2<u32>(1u, 0u));
}
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return add64(a, neg64(b));
}
// The full 64-bit product of two u32, from 16-bit halves.
fn mul32x32(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi);
}
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let p = mul32x32(a.x, b.x);
    return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
fn lt_u64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x < b.x);
}
fn lt_s64(a: vec2<u32>, b: vec2<u32>) -> bool {
    let ah = bitcast<i32>(a.y);
    let bh = bitcast<i32>(b.y);
    return ah < bh || (ah == bh && a.x < b.x);
}
fn negative64(a: vec2<u32>) -> bool {
    return bitcast<i32>(a.y) < 0;
}
// Integer power by squaring with wrapping; a negative exponent gives 0, or +-1 for a base of
// +-1 (the native int_pow's rules).
fn pow_s64(base: vec2<u32>, exponent: vec2<u32>) -> vec2<u32> {
    if negative64(exponent) {
        if all(base == vec2<u32>(1u, 0u)) { return base; }
        if all(base == vec2<u32>(0xffffffffu, 0xffffffffu)) {
            return select(vec2<u32>(1u, 0u), base, (exponent.x & 1u) == 1u);
        }
        return vec2<u32>(0u, 0u);
    }
    var r = vec2<u32>(1u, 0u);
    var x = base;
    var e = exponent;
    for (var k = 0u; k < 64u; k++) {
        if all(e == vec2<u32>(0u, 0u)) { break; }
        if (e.x & 1u) == 1u { r = mul64(r, x); }
        x = mul64(x, x);
        e = vec2<u32>((e.x >> 1u) | (e.y << 31u), e.y >> 1u);
    }
    return r;
}
fn shl64(a: vec2<u32>, n: u32) -> vec2<u32> {
    if n == 0u { return a; }
    if n >= 64u { return vec2<u32>(0u, 0u); }
    if n >= 32u { return vec2<u32>(0u, a.x << (n - 32u)); }
    return vec2<u32>(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}
fn shr64(a: vec2<u32>, n: u32) -> vec2<u32> {
    if n == 0u { return a; }
    if n >= 64u { return vec2<u32>(0u, 0u); }
    if n >= 32u { return vec2<u32>(a.y >> (n - 32u), 0u); }
    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), a.y >> n);
}
// Arithmetic (sign-filling) right shift.
fn sar64(a: vec2<u32>, n: u32) -> vec2<u32> {
    let fill = select(0u, 0xffffffffu, (a.y >> 31u) == 1u);
    if n == 0u { return a; }
    if n >= 64u { return vec2<u32>(fill, fill); }
    if n >= 32u { return vec2<u32>(bitcast<u32>(bitcast<i32>(a.y) >> (n - 32u)), fill); }
    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), bitcast<u32>(bitcast<i32>(a.y) >> n));
}
struct DivMod64 {
    q: vec2<u32>,
    r: vec2<u32>,
}
// Unsigned long division, one quotient bit per step; by zero: quotient a, remainder 0 (WGSL's
// integer rules, which the native path follows).
fn divmod_u64(a: vec2<u32>, b: vec2<u32>) -> DivMod64 {
    if all(b == vec2<u32>(0u, 0u)) {
        return DivMod64(a, vec2<u32>(0u, 0u));
    }
    var q = vec2<u32>(0u, 0u);
    var r = vec2<u32>(0u, 0u);
    for (var i = 63; i >= 0; i--) {
        let bit = select((a.x >> u32(i)) & 1u, (a.y >> u32(i - 32)) & 1u, i >= 32);
        r = shl64(r, 1u) | vec2<u32>(bit, 0u);
        if !lt_u64(r, b) {
            r = sub64(r, b);
            q = q | shl64(vec2<u32>(1u, 0u), u32(i));
        }
    }
    return DivMod64(q, r);
}
fn abs64(a: vec2<u32>) -> vec2<u32> {
    return select(a, neg64(a), negative64(a));
}
// Signed division truncating toward zero (MIN / -1 wraps to MIN); by zero: a.
fn div_s64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if all(b == vec2<u32>(0u, 0u)) { return a; }
    let q = divmod_u64(abs64(a), abs64(b)).q;
    return select(q, neg64(q), negative64(a) != negative64(b));
}
// C's remainder (the dividend's sign); by zero: 0.
fn rem_s64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let r = divmod_u64(abs64(a), abs64(b)).r;
    return select(r, neg64(r), negative64(a));
}
// Python's remainder (the divisor's sign); by zero: 0.
fn mod_s64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let r = rem_s64(a, b);
    let zero = all(r == vec2<u32>(0u, 0u));
    return select(r, add64(r, b), !zero && negative64(r) != negative64(b));
}
// u64 to f32, rounded to nearest-even from the bits.
fn u64_to_f32(a: vec2<u32>) -> f32 {
    if all(a == vec2<u32>(0u, 0u)) { return 0.0; }
    let lz = select(countLeadingZeros(a.y), 32u + countLeadingZeros(a.x), a.y == 0u);
    let n = shl64(a, lz);
    var top = 63u - lz;
    var m = n.y >> 8u;
    let half = (n.y >> 7u) & 1u;
    let sticky = (n.y & 0x7fu) != 0u || n.x != 0u;
    if half == 1u && (sticky || (m & 1u) == 1u) {
        m += 1u;
        if m == 0x1000000u {
            m = 0x800000u;
            top += 1u;
        }
    }
    return bitcast<f32>(((top + 127u) << 23u) | (m & 0x7fffffu));
}
fn i64_to_f32(a: vec2<u32>) -> f32 {
    let v = u64_to_f32(abs64(a));
    return select(v, -v, negative64(a));
}
// f32 to the magnitude of its integer part as u64 (below 2^64).
fn f32_magnitude64(v: f32) -> vec2<u32> {
    let bits = bitcast<u32>(v);
    let e = i32((bits >> 23u) & 0xffu) - 127;
    if e < 0 { return vec2<u32>(0u, 0u); }
    let m = (bits & 0x7fffffu) | 0x800000u;
    if e >= 23 { return shl64(vec2<u32>(m, 0u), u32(e - 23)); }
    return vec2<u32>(m >> u32(23 - e), 0u);
}
// f32 to i64 truncating toward zero, saturating, NaN as 0 (Rust's `as`).
fn f32_to_i64(v: f32) -> vec2<u32> {
    let bits = bitcast<u32>(v);
    if (bits & 0x7fffffffu) > 0x7f800000u { return vec2<u32>(0u, 0u); }
    let negative = (bits >> 31u) == 1u;
    if (bits & 0x7fffffffu) >= 0x5f000000u {
        return select(vec2<u32>(0xffffffffu, 0x7fffffffu), vec2<u32>(0u, 0x80000000u), negative);
    }
    let m = f32_magnitude64(v);
    return select(m, neg64(m), negative);
}
fn f32_to_u64(v: f32) -> vec2<u32> {
    let bits = bitcast<u32>(v);
    if (bits & 0x7fffffffu) > 0x7f800000u || (bits >> 31u) == 1u { return vec2<u32>(0u, 0u); }
    if bits >= 0x5f800000u { return vec2<u32>(0xffffffffu, 0xffffffffu); }
    return f32_magnitude64(v);
}";

/// The word template's helpers (f16 and bf16 conversions, field extraction, run-time
/// infinities), which the reduction template loads its operands with too.
pub(crate) fn word_helpers() -> &'static str {
    template_block("// END WORD HELPERS")
}

/// The word helpers and the f32 math the steps of programs call (`onnx_tanh`, ...), for
/// templates other than the word template that compute programs (MatMul epilogues).
pub(crate) fn program_helpers() -> &'static str {
    template_block("// END MATH HELPERS")
}

/// The word template from its helpers' start to the marker `end`.
fn template_block(end: &str) -> &'static str {
    let begin = WORDS
        .find("// BEGIN WORD HELPERS")
        .expect("the word template marks its helpers");
    let len = WORDS[begin..]
        .find(end)
        .expect("the word template marks the end of its helpers");
    &WORDS[begin..begin + len]
}

/// Whether `dtypes` (and `out`) include a 64-bit numeric type (i64, u64, f64), which the
/// emulation holds on u32 pairs.
pub fn uses_64_bit(dtypes: &[DType], out: DType) -> bool {
    dtypes
        .iter()
        .chain([&out])
        .any(|d| matches!(d, DType::I64 | DType::U64 | DType::F64))
}

/// Whether an op on `dtypes` giving `out` computes on the emulation (every 64-bit value on
/// u32 pairs) on an adapter with `features`: f64 among them and not both `SHADER_F64` and
/// `SHADER_INT64` (native f64 kernels take its bits as u64), or else i64 or u64 and no
/// `SHADER_INT64`.
pub fn emulates_64_bit(features: wgpu::Features, dtypes: &[DType], out: DType) -> bool {
    let all = || dtypes.iter().chain([&out]);
    if all().any(|&d| d == DType::F64) {
        return !features.contains(wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64);
    }
    all().any(|d| matches!(d, DType::I64 | DType::U64))
        && !features.contains(wgpu::Features::SHADER_INT64)
}

/// The op's WGSL with i64/u64 emulated on u32 pairs (`None` where the emulation does not
/// cover it: powers with an exponent of another type, and anything with f64, which needs the
/// native types).
pub fn emulated_expression(name: &str, dtypes: &[DType], out: DType) -> Option<Expr> {
    if dtypes.iter().chain([&out]).any(|&d| d == DType::F64) {
        return emulated_f64_expression(name, dtypes, out);
    }
    let emu = |e: &str| {
        Some(Expr {
            helpers: I64_EMULATION.into(),
            expression: e.into(),
        })
    };
    let long = |d: DType| matches!(d, DType::I64 | DType::U64);
    if let Some(mode) = cast_mode(name) {
        let (from, to) = (dtypes[0], out);
        let (fc, tc) = (Class::of(from), Class::of(to));
        if long(from) && tc == Class::Float {
            let inner = if from == DType::I64 {
                "i64_to_f32(a)"
            } else {
                "u64_to_f32(a)"
            };
            if let Some(e) = small_float_cast(to, mode, inner) {
                return emu(&e);
            }
        }
        return match (long(from), long(to)) {
            (true, true) => emu("a"),
            (false, true) => match fc {
                Class::Int => emu("vec2<u32>(bitcast<u32>(a), select(0u, 0xffffffffu, a < 0))"),
                Class::Uint | Class::Bool => emu("vec2<u32>(a, 0u)"),
                Class::Float if to == DType::I64 => emu("f32_to_i64(a)"),
                Class::Float => emu("f32_to_u64(a)"),
                _ => None,
            },
            (true, false) => match tc {
                Class::Int => emu("bitcast<i32>(a.x)"),
                Class::Uint => emu("a.x"),
                Class::Bool => emu("u32(any(a != vec2<u32>(0u, 0u)))"),
                Class::Float if from == DType::I64 => emu("i64_to_f32(a)"),
                Class::Float => emu("u64_to_f32(a)"),
                _ => None,
            },
            (false, false) => None,
        };
    }
    if name == "Pow" && dtypes.len() == 2 && dtypes[0] != dtypes[1] {
        return emulated_mixed_pow(dtypes[0], dtypes[1]);
    }
    // Operands of one dtype, but for Where's condition.
    let same = if name == "Where" {
        &dtypes[1..]
    } else {
        dtypes
    };
    if same.iter().any(|&d| d != same[0]) || !long(same[0]) {
        return None;
    }
    if name == "Where" {
        return (dtypes.len() == 3 && dtypes[0] == DType::Bool)
            .then(|| emu("select(c, b, a != 0u)"))
            .flatten();
    }
    let signed = same[0] == DType::I64;
    let lt = if signed { "lt_s64" } else { "lt_u64" };
    let arity = dtypes.len();
    let e = match (name, arity) {
        ("Add", 2) => "add64(a, b)".to_string(),
        ("Sub", 2) => "sub64(a, b)".to_string(),
        ("Mul", 2) => "mul64(a, b)".to_string(),
        ("Pow", 2) if signed => "pow_s64(a, b)".to_string(),
        ("Div", 2) if signed => "div_s64(a, b)".to_string(),
        ("Div", 2) => "divmod_u64(a, b).q".to_string(),
        ("Mod", 2) if signed => "mod_s64(a, b)".to_string(),
        ("FMod", 2) if signed => "rem_s64(a, b)".to_string(),
        ("Mod" | "FMod", 2) => "divmod_u64(a, b).r".to_string(),
        ("Max", 2) => format!("select(a, b, {lt}(a, b))"),
        ("Min", 2) => format!("select(a, b, {lt}(b, a))"),
        ("Equal", 2) => "u32(all(a == b))".to_string(),
        ("Less", 2) => format!("u32({lt}(a, b))"),
        ("LessOrEqual", 2) => format!("u32(!{lt}(b, a))"),
        ("Greater", 2) => format!("u32({lt}(b, a))"),
        ("GreaterOrEqual", 2) => format!("u32(!{lt}(a, b))"),
        ("Clip", 3) => {
            format!("select(select(a, b, {lt}(a, b)), c, {lt}(c, select(a, b, {lt}(a, b))))")
        }
        ("BitwiseAnd", 2) => "a & b".to_string(),
        ("BitwiseOr", 2) => "a | b".to_string(),
        ("BitwiseXor", 2) => "a ^ b".to_string(),
        ("BitwiseNot", 1) => "~a".to_string(),
        // Shifts of 2^32 or more give 0 as those of 64 to 2^32 - 1 do.
        // A negative shift, or one of 2^32 or more, is out of range as those of 64 on are.
        ("BitShiftLeft", 2) => "select(shl64(a, b.x), vec2<u32>(0u, 0u), b.y != 0u)".to_string(),
        ("BitShiftRight", 2) if signed => "sar64(a, select(b.x, 64u, b.y != 0u))".to_string(),
        ("BitShiftRight", 2) => "select(shr64(a, b.x), vec2<u32>(0u, 0u), b.y != 0u)".to_string(),
        ("Neg", 1) if signed => "neg64(a)".to_string(),
        ("Abs", 1) if signed => "select(a, neg64(a), negative64(a))".to_string(),
        ("Abs", 1) => "a".to_string(),
        ("Relu", 1) if signed => "select(a, vec2<u32>(0u, 0u), negative64(a))".to_string(),
        ("Sign", 1) => {
            let zero = "all(a == vec2<u32>(0u, 0u))";
            let positive = format!("select(vec2<u32>(1u, 0u), vec2<u32>(0u, 0u), {zero})");
            if signed {
                format!("select({positive}, vec2<u32>(0xffffffffu, 0xffffffffu), negative64(a))")
            } else {
                positive
            }
        }
        _ => return None,
    };
    Some(Expr {
        helpers: I64_EMULATION.into(),
        expression: e,
    })
}

/// The emulation of op `name` where f64 is among its dtypes (`out` included): every 64-bit
/// value on u32 pairs, f64 computed by [`F64_EMULATION`]. Arithmetic, square root,
/// reciprocal, order (Max, Min, Clip and the comparisons), Where, Sign, the rounding ops, the
/// NaN and infinity tests, Mod, Cast to and from every type, (by [`F64_EMULATION_MATH`]) Exp,
/// Log, Tanh, Sigmoid and Pow, and (by [`F64_EMULATION_SPECIAL`]) Erf, Log1p and the
/// trigonometric and hyperbolic functions; `None` for the rest.
fn emulated_f64_expression(name: &str, dtypes: &[DType], out: DType) -> Option<Expr> {
    let emu = |e: &str| {
        Some(Expr {
            helpers: format!("{I64_EMULATION}\n{F64_EMULATION}"),
            expression: e.into(),
        })
    };
    if let Some(mode) = cast_mode(name) {
        let (from, to) = (dtypes[0], out);
        if mode.quantize && from == DType::F64 && to != DType::F64 {
            return None;
        }
        if from == DType::F64 {
            if to == DType::F64 {
                return emu("a");
            }
            if to.is_storage_only() && Class::of(to) == Class::Float {
                return emu(&small_float_cast(to, mode, "sf64_to_f32(a)")?);
            }
            if to.packed_bits().is_some() && Class::of(to) != Class::Float {
                // Truncated to i32 and wrapped, as the native path does.
                return emu("R(sf64_to_i32(a))");
            }
            return match to {
                DType::I8 => emu("clamp(sf64_to_i32(a), -128, 127)"),
                DType::I16 => emu("clamp(sf64_to_i32(a), -32768, 32767)"),
                DType::U8 => emu("min(sf64_to_u32(a), 255u)"),
                DType::U16 => emu("min(sf64_to_u32(a), 65535u)"),
                DType::I32 => emu("sf64_to_i32(a)"),
                DType::U32 => emu("sf64_to_u32(a)"),
                DType::I64 => emu("sf64_to_i64(a)"),
                DType::U64 => emu("sf64_to_u64(a)"),
                DType::Bool => emu("u32(!sf64_is_zero(a))"),
                _ if Class::of(to) == Class::Float => emu("sf64_to_f32(a)"),
                _ => None,
            };
        }
        if to != DType::F64 {
            return None;
        }
        return emu(&emulated_to_f64(from, "a")?);
    }
    if name == "Pow" && dtypes.len() == 2 && dtypes[0] != dtypes[1] {
        return emulated_f64_mixed_pow(dtypes[0], dtypes[1]);
    }
    // Operands of f64, but for Where's condition.
    let (values, arity) = match name {
        "Where" if dtypes.len() == 3 && dtypes[0] == DType::Bool => (&dtypes[1..], 3),
        "Where" => return None,
        _ => (dtypes, dtypes.len()),
    };
    if values.iter().any(|&d| d != DType::F64) {
        return None;
    }
    let one = "vec2<u32>(0u, 0x3ff00000u)";
    // Functions of the math library, and (`true`) of the special functions' built on it.
    let math = match (name, arity) {
        ("Exp", 1) => Some(("sf64_exp(a)", false)),
        ("Log", 1) => Some(("sf64_log(a)", false)),
        ("Tanh", 1) => Some(("sf64_tanh(a)", false)),
        ("Sigmoid", 1) => Some(("sf64_sigmoid(a)", false)),
        ("Pow", 2) => Some(("sf64_pow(a, b)", false)),
        ("Erf", 1) => Some(("sf64_erf(a)", true)),
        ("Log1p", 1) => Some(("sf64_log1p(a)", true)),
        ("Sin", 1) => Some(("sf64_sin(a)", true)),
        ("Cos", 1) => Some(("sf64_cos(a)", true)),
        ("Tan", 1) => Some(("sf64_tan(a)", true)),
        ("Asin", 1) => Some(("sf64_asin(a)", true)),
        ("Acos", 1) => Some(("sf64_acos(a)", true)),
        ("Atan", 1) => Some(("sf64_atan(a)", true)),
        ("Sinh", 1) => Some(("sf64_sinh(a)", true)),
        ("Cosh", 1) => Some(("sf64_cosh(a)", true)),
        ("Asinh", 1) => Some(("sf64_asinh(a)", true)),
        ("Acosh", 1) => Some(("sf64_acosh(a)", true)),
        ("Atanh", 1) => Some(("sf64_atanh(a)", true)),
        _ => None,
    };
    if let Some((e, special)) = math {
        let mut helpers = format!("{I64_EMULATION}\n{F64_EMULATION}\n{F64_EMULATION_MATH}");
        if special {
            helpers = format!("{helpers}\n{F64_EMULATION_SPECIAL}");
        }
        return Some(Expr {
            helpers,
            expression: e.into(),
        });
    }
    let e = match (name, arity) {
        ("Add", 2) => "sf64_add(a, b)".to_string(),
        ("Sub", 2) => "sf64_sub(a, b)".to_string(),
        ("Mul", 2) => "sf64_mul(a, b)".to_string(),
        ("Div", 2) => "sf64_div(a, b)".to_string(),
        ("Max", 2) => "sf64_max(a, b)".to_string(),
        ("Min", 2) => "sf64_min(a, b)".to_string(),
        ("Mod", 2) => "sf64_py_mod(a, b)".to_string(),
        ("FMod", 2) => "sf64_fmod(a, b)".to_string(),
        ("Equal", 2) => "u32(sf64_eq(a, b))".to_string(),
        ("Less", 2) => "u32(sf64_lt(a, b))".to_string(),
        ("LessOrEqual", 2) => "u32(sf64_le(a, b))".to_string(),
        ("Greater", 2) => "u32(sf64_lt(b, a))".to_string(),
        ("GreaterOrEqual", 2) => "u32(sf64_le(b, a))".to_string(),
        ("Where", 3) => "select(c, b, a != 0u)".to_string(),
        // As the native path: a NaN input stays NaN, a NaN bound does not bound.
        ("Clip", 3) => {
            let lo = "select(a, b, sf64_lt(a, b))";
            format!("select(select({lo}, c, sf64_lt(c, {lo})), a, sf64_is_nan(a))")
        }
        ("Neg", 1) => "sf64_neg(a)".to_string(),
        ("Abs", 1) => "sf64_abs(a)".to_string(),
        ("Sqrt", 1) => "sf64_sqrt(a)".to_string(),
        ("Reciprocal", 1) => format!("sf64_div({one}, a)"),
        ("Relu", 1) => "select(a, vec2<u32>(0u, 0u), sf64_sign(a) == 1u && !sf64_is_nan(a))".into(),
        ("Sign", 1) => format!(
            "select(select({one}, vec2<u32>(0u, 0xbff00000u), sf64_sign(a) == 1u), a, \
             sf64_is_nan(a) || sf64_is_zero(a))"
        ),
        ("Floor", 1) => "sf64_floor(a)".to_string(),
        ("Ceil", 1) => "sf64_ceil(a)".to_string(),
        ("Round", 1) => "sf64_round_even(a)".to_string(),
        ("IsNaN", 1) => "u32(sf64_is_nan(a))".to_string(),
        ("IsInf", 1) => "u32(sf64_is_inf(a))".to_string(),
        ("IsPosInf", 1) => "u32(all(a == vec2<u32>(0u, 0x7ff00000u)))".to_string(),
        ("IsNegInf", 1) => "u32(all(a == vec2<u32>(0u, 0xfff00000u)))".to_string(),
        ("IsInfNone", 1) => "0u".to_string(),
        _ => return None,
    };
    emu(&e)
}

/// The emulated f64 of value `v` of `from` (any type but f64, as the emulation holds it).
fn emulated_to_f64(from: DType, v: &str) -> Option<String> {
    Some(match Class::of(from) {
        Class::Float => format!("sf64_from_f32({v})"),
        Class::Int => {
            format!("sf64_from_i64(vec2<u32>(bitcast<u32>({v}), select(0u, 0xffffffffu, {v} < 0)))")
        }
        Class::Uint | Class::Bool => format!("sf64_from_u64(vec2<u32>({v}, 0u))"),
        Class::Long => format!("sf64_from_i64({v})"),
        Class::Ulong => format!("sf64_from_u64({v})"),
        Class::Double => return None,
    })
}

/// Pow with a base and an exponent of different dtypes, one of them f64, on the emulation:
/// the native path's rules (see the Pow word op). An f64 base to any numeric exponent
/// converted to f64; an f32 (f16, bf16) base to the exponent converted to f32; an i32 or i64
/// base to an f64 exponent computed in f64 and truncated back as Cast truncates.
fn emulated_f64_mixed_pow(base: DType, exponent: DType) -> Option<Expr> {
    let (bc, ec) = (Class::of(base), Class::of(exponent));
    if !ec.is_number()
        || (bc != Class::Double && ec != Class::Double)
        || [base, exponent].iter().any(|d| d.is_storage_only())
    {
        return None;
    }
    let e = match bc {
        Class::Double => format!("sf64_pow(a, {})", emulated_to_f64(exponent, "b")?),
        Class::Float => "onnx_pow(a, sf64_to_f32(b))".to_string(),
        Class::Int if base == DType::I32 => {
            format!("sf64_to_i32(sf64_pow({}, b))", emulated_to_f64(base, "a")?)
        }
        Class::Long if base == DType::I64 => "sf64_to_i64(sf64_pow(sf64_from_i64(a), b))".into(),
        _ => return None,
    };
    Some(Expr {
        helpers: format!("{I64_EMULATION}\n{F64_EMULATION}\n{F64_EMULATION_MATH}"),
        expression: e,
    })
}

/// Pow with a base and an exponent of different dtypes, one of them i64 or u64 emulated on u32
/// pairs: the native path's rules (see the Pow word op) on the emulated values. An i64 base
/// to an integer exponent widened to 64 bits, by squaring; to a float exponent through f32,
/// truncated back; a float or i32 base to a 64-bit exponent converted to its type.
fn emulated_mixed_pow(base: DType, exponent: DType) -> Option<Expr> {
    let (bc, ec) = (Class::of(base), Class::of(exponent));
    let emu = |e: String| {
        Some(Expr {
            helpers: I64_EMULATION.into(),
            expression: e,
        })
    };
    match (bc, ec) {
        (Class::Long, Class::Int) => {
            emu("pow_s64(a, vec2<u32>(bitcast<u32>(b), select(0u, 0xffffffffu, b < 0)))".into())
        }
        (Class::Long, Class::Uint | Class::Bool) if exponent != DType::Bool => {
            emu("pow_s64(a, vec2<u32>(b, 0u))".into())
        }
        (Class::Long, Class::Ulong) => emu("pow_s64(a, b)".into()),
        (Class::Long, Class::Float) => emu("f32_to_i64(onnx_pow(i64_to_f32(a), b))".into()),
        (Class::Float, Class::Long) => emu("onnx_pow(a, i64_to_f32(b))".into()),
        (Class::Float, Class::Ulong) => emu("onnx_pow(a, u64_to_f32(b))".into()),
        // The native path converts the exponent to the base's i32, keeping its low word.
        (Class::Int, Class::Long | Class::Ulong) if base == DType::I32 => Some(Expr {
            helpers: INT_POW.into(),
            expression: "int_pow(a, bitcast<i32>(b.x))".into(),
        }),
        _ => None,
    }
}

/// The dtype op `name` gives on operands of `dtypes` (Cast's is its target, not derived here).
pub fn result_dtype(name: &str, dtypes: &[DType]) -> DType {
    match word_op(name).map(|o| o.result) {
        Some(Result_::Bool) => DType::Bool,
        _ if name == "Where" => dtypes[1],
        _ => dtypes[0],
    }
}

/// Every word-kernel variant: (op, operands, arity, result) for each op on each dtype
/// combination it is defined for.
pub fn variants() -> Vec<(&'static str, [DType; 3], u8, DType, bool)> {
    let mut out = Vec::new();
    for from in DType::ALL {
        for to in DType::ALL {
            for (op, mode) in CAST_OPS {
                if cast_op(to, mode) != op {
                    continue;
                }
                out.push((op, [from, DType::F32, DType::F32], 1, to, false));
                if uses_64_bit(&[from], to) && emulated_expression(op, &[from], to).is_some() {
                    out.push((op, [from, DType::F32, DType::F32], 1, to, true));
                }
            }
        }
    }
    let table = super::elementwise::OPS
        .iter()
        .filter(|o| word_op(o.name).is_none())
        .map(|o| (o.name, 1 + usize::from(o.binary)));
    let words = WORD_OPS.iter().map(|o| (o.name, o.inputs));
    for (name, arity) in table.chain(words) {
        let combos = DType::ALL.len().pow(arity as u32);
        for mut k in 0..combos {
            let mut dtypes = [DType::F32; 3];
            for d in dtypes.iter_mut().take(arity) {
                *d = DType::ALL[k % DType::ALL.len()];
                k /= DType::ALL.len();
            }
            let ins = &dtypes[..arity];
            let result = result_dtype(name, ins);
            if word_expression(name, ins, DType::F32).is_some() {
                out.push((name, dtypes, arity as u8, result, false));
            }
            if uses_64_bit(ins, result) && emulated_expression(name, ins, result).is_some() {
                out.push((name, dtypes, arity as u8, result, true));
            }
        }
    }
    out
}

/// WGSL source of the word kernel for `name` on `dtypes` (one to three operands) to `out`:
/// the program of that one step.
pub fn words_source(name: &'static str, dtypes: &[DType], out: DType, emulate64: bool) -> String {
    let program = Program::single(name, dtypes, out, emulate64).unwrap_or_else(|| {
        // Not defined there: a program that only converts operand 0 (never dispatched; the
        // tables list only defined variants).
        Program::single("Cast", &dtypes[..1], out, false).expect("every Cast is defined")
    });
    program.source()
}

/// The wgpu features a word kernel on these dtypes needs (none for i64/u64 when emulated).
pub fn words_features(dtypes: &[DType], out: DType, emulate64: bool) -> wgpu::Features {
    let mut f = wgpu::Features::empty();
    if emulate64 {
        return f;
    }
    for &d in dtypes.iter().chain([&out]) {
        if let Some((feature, _)) = native_feature(d) {
            f |= feature;
        }
        // 64-bit words are assembled with u64 arithmetic.
        if d.size() == 8 {
            f |= wgpu::Features::SHADER_INT64;
        }
    }
    f
}

impl Recorder {
    /// Records `out = op(inputs...)` (one to three operands, numpy broadcasting) with the word
    /// kernel. The op must be defined on these dtypes (checked by the caller).
    pub(crate) fn words_into(
        &mut self,
        op: &'static str,
        inputs: &[&Tensor],
        out: &Tensor,
    ) -> Result<()> {
        let mut operands = [DType::F32; 3];
        for (d, t) in operands.iter_mut().zip(inputs) {
            *d = t.dtype();
        }
        let all: Vec<DType> = inputs.iter().map(|t| t.dtype()).collect();
        let ctx = self.context();
        let emulate64 = emulates_64_bit(ctx.features(), &all, out.dtype());
        let kernel = Kernel::Words {
            op,
            operands,
            arity: inputs.len() as u8,
            out: out.dtype(),
            emulate64,
            workgroup_size: ctx.workgroup_size(),
        };
        self.program_into(op, kernel, inputs, out)
    }
}
