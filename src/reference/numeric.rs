//! Element-wise arithmetic of the CPU reference on every dtype, written from ONNX's
//! definitions: 8- and 16-bit integers compute in 32 bits and wrap back (the same as wrapping
//! arithmetic in the narrow type), f16 and bf16 compute in f32 and round to nearest-even
//! (`half`'s conversions), bool is 0 or 1. Integer division by zero gives the dividend, as
//! WGSL defines it; ONNX leaves it undefined.

use ndarray::{ArrayD, Axis, IxDyn, Zip};

use crate::{DType, HostTensor};

use super::RefError;

type R<T> = std::result::Result<T, RefError>;

/// Host tensors as typed arrays, narrow types widened.
pub(crate) enum Num {
    F(ArrayD<f32>),
    I(ArrayD<i32>),
    U(ArrayD<u32>),
    D(ArrayD<f64>),
    L(ArrayD<i64>),
    Q(ArrayD<u64>),
}

pub(crate) fn num(t: &HostTensor) -> R<Num> {
    Ok(match t.dtype {
        DType::F32 => Num::F(t.to_array()?),
        DType::F16 => Num::F(t.to_array::<half::f16>()?.mapv(f32::from)),
        DType::BF16 => Num::F(t.to_array::<half::bf16>()?.mapv(f32::from)),
        DType::I32 => Num::I(t.to_array()?),
        DType::I8 => Num::I(t.to_array::<i8>()?.mapv(i32::from)),
        DType::I16 => Num::I(t.to_array::<i16>()?.mapv(i32::from)),
        DType::U32 => Num::U(t.to_array()?),
        DType::U8 => Num::U(t.to_array::<u8>()?.mapv(u32::from)),
        DType::U16 => Num::U(t.to_array::<u16>()?.mapv(u32::from)),
        DType::Bool => Num::U(t.to_array::<bool>()?.mapv(u32::from)),
        DType::F64 => Num::D(t.to_array()?),
        DType::I64 => Num::L(t.to_array()?),
        DType::U64 => Num::Q(t.to_array()?),
        d @ (DType::I4 | DType::I2) => {
            Num::I(codes(t)?.mapv(|b| crate::minifloat::int_value(d, b)))
        }
        d @ (DType::U4 | DType::U2) => {
            Num::U(codes(t)?.mapv(|b| crate::minifloat::int_value(d, b) as u32))
        }
        d => Num::F(codes(t)?.mapv(|b| crate::minifloat::decode(d, b))),
    })
}

/// The one-byte codes of a storage-only tensor.
fn codes(t: &HostTensor) -> R<ArrayD<u8>> {
    let mut bytes = t.clone();
    bytes.dtype = DType::U8;
    Ok(bytes.to_array::<u8>()?)
}

/// Codes of `dtype` (storage-only) as its tensor.
fn from_codes(a: ArrayD<u8>, dtype: DType) -> HostTensor {
    let mut t = HostTensor::from_array(&a);
    t.dtype = dtype;
    t
}

pub(crate) fn host(n: Num) -> HostTensor {
    match n {
        Num::F(a) => HostTensor::from_array(&a),
        Num::I(a) => HostTensor::from_array(&a),
        Num::U(a) => HostTensor::from_array(&a),
        Num::D(a) => HostTensor::from_array(&a),
        Num::L(a) => HostTensor::from_array(&a),
        Num::Q(a) => HostTensor::from_array(&a),
    }
}

/// `n` stored as `to`: the inverse of [`num`]'s widening (wrapping, rounding to nearest-even,
/// bool as `!= 0`); `to` must be of `n`'s class.
pub(crate) fn narrow(n: Num, to: DType) -> R<HostTensor> {
    Ok(match (n, to) {
        (Num::F(a), DType::F16) => HostTensor::from_array(&a.mapv(half::f16::from_f32)),
        (Num::F(a), DType::BF16) => HostTensor::from_array(&a.mapv(half::bf16::from_f32)),
        (Num::I(a), DType::I8) => HostTensor::from_array(&a.mapv(|v| v as i8)),
        (Num::I(a), DType::I16) => HostTensor::from_array(&a.mapv(|v| v as i16)),
        (Num::U(a), DType::U8) => HostTensor::from_array(&a.mapv(|v| v as u8)),
        (Num::U(a), DType::U16) => HostTensor::from_array(&a.mapv(|v| v as u16)),
        (Num::U(a), DType::Bool) => HostTensor::from_array(&a.mapv(|v| v != 0)),
        (Num::I(a), d @ (DType::I4 | DType::I2)) => {
            from_codes(a.mapv(|v| crate::minifloat::int_code(d, v as i64)), d)
        }
        (Num::U(a), d @ (DType::U4 | DType::U2)) => {
            from_codes(a.mapv(|v| crate::minifloat::int_code(d, v as i64)), d)
        }
        (Num::F(a), d) if d.is_storage_only() => from_codes(
            a.mapv(|v| crate::minifloat::encode(d, v, crate::CastMode::default())),
            d,
        ),
        (n, to) => {
            let t = host(n);
            if t.dtype != to {
                return Err(format!("{} cannot be stored as {to}", t.dtype).into());
            }
            t
        }
    })
}

/// The numpy broadcast of `shapes`.
fn broadcast_shape(shapes: &[&[usize]]) -> R<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1; rank];
    for s in shapes {
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + k];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err("shapes do not broadcast".into());
            }
        }
    }
    Ok(out)
}

fn zip2<T: Copy, U: Copy, V>(a: &ArrayD<T>, b: &ArrayD<U>, f: impl Fn(T, U) -> V) -> R<ArrayD<V>> {
    let shape = broadcast_shape(&[a.shape(), b.shape()])?;
    let (a, b) = (
        a.broadcast(IxDyn(&shape)).ok_or("no broadcast")?,
        b.broadcast(IxDyn(&shape)).ok_or("no broadcast")?,
    );
    Ok(Zip::from(&a).and(&b).map_collect(|&x, &y| f(x, y)))
}

fn zip3<T: Copy, U: Copy, W: Copy, V>(
    a: &ArrayD<T>,
    b: &ArrayD<U>,
    c: &ArrayD<W>,
    f: impl Fn(T, U, W) -> V,
) -> R<ArrayD<V>> {
    let shape = broadcast_shape(&[a.shape(), b.shape(), c.shape()])?;
    let (a, b, c) = (
        a.broadcast(IxDyn(&shape)).ok_or("no broadcast")?,
        b.broadcast(IxDyn(&shape)).ok_or("no broadcast")?,
        c.broadcast(IxDyn(&shape)).ok_or("no broadcast")?,
    );
    Ok(Zip::from(&a)
        .and(&b)
        .and(&c)
        .map_collect(|&x, &y, &z| f(x, y, z)))
}

/// Applies a generic two-operand function to two arrays of one variant.
macro_rules! same2 {
    ($a:expr, $b:expr, $f:ident $(, $arg:expr)*) => {
        match ($a, $b) {
            (Num::F(x), Num::F(y)) => $f(&x, &y $(, $arg)*),
            (Num::I(x), Num::I(y)) => $f(&x, &y $(, $arg)*),
            (Num::U(x), Num::U(y)) => $f(&x, &y $(, $arg)*),
            (Num::D(x), Num::D(y)) => $f(&x, &y $(, $arg)*),
            (Num::L(x), Num::L(y)) => $f(&x, &y $(, $arg)*),
            (Num::Q(x), Num::Q(y)) => $f(&x, &y $(, $arg)*),
            _ => Err("operands differ in dtype".into()),
        }
    };
}

fn compare<T: PartialOrd + Copy>(x: &ArrayD<T>, y: &ArrayD<T>, op: &str) -> R<Num> {
    Ok(Num::U(zip2(x, y, |a, b| {
        u32::from(match op {
            "Equal" => a == b,
            "Less" => a < b,
            "LessOrEqual" => a <= b,
            "Greater" => a > b,
            _ => a >= b,
        })
    })?))
}

/// Integer arithmetic with wrapping, and the float ops on their own types.
trait Arith: Copy + PartialOrd + Default {
    fn arith(op: &str, a: Self, b: Self) -> R<Self>;
    fn wrap(a: ArrayD<Self>) -> Num;
}

macro_rules! int_arith {
    ($($t:ty => $v:ident),*) => {$(
        impl Arith for $t {
            fn arith(op: &str, a: Self, b: Self) -> R<Self> {
                Ok(match op {
                    "Add" => a.wrapping_add(b),
                    "Sub" => a.wrapping_sub(b),
                    "Mul" => a.wrapping_mul(b),
                    "Div" => if b == 0 { a } else { a.wrapping_div(b) },
                    "Max" => a.max(b),
                    "Min" => a.min(b),
                    // C's fmod: the dividend's sign.
                    "FMod" => if b == 0 { 0 } else { a.wrapping_rem(b) },
                    // Python's %: the divisor's sign.
                    "Mod" => {
                        if b == 0 {
                            0
                        } else {
                            let r = a.wrapping_rem(b);
                            #[allow(unused_comparisons)]
                            let flip = r != 0 && ((r < 0) != (b < 0));
                            if flip { r.wrapping_add(b) } else { r }
                        }
                    }
                    "BitwiseAnd" => a & b,
                    "BitwiseOr" => a | b,
                    "BitwiseXor" => a ^ b,
                    // BitShift-28: signed values shift right arithmetically; a negative shift
                    // or one of the width or more gives what the sign alone gives.
                    "BitShiftLeft" => u32::try_from(b).ok().and_then(|s| a.checked_shl(s)).unwrap_or(0),
                    "BitShiftRight" => {
                        let fill = if <$t>::MIN == 0 { 0 } else { a >> (<$t>::BITS - 1) };
                        u32::try_from(b).ok().and_then(|s| a.checked_shr(s)).unwrap_or(fill)
                    }
                    _ => return Err(format!("{op} is not defined on integers").into()),
                })
            }
            fn wrap(a: ArrayD<Self>) -> Num {
                Num::$v(a)
            }
        }
    )*};
}
int_arith!(i32 => I, u32 => U, i64 => L, u64 => Q);

macro_rules! float_arith {
    ($($t:ty => $v:ident),*) => {$(
        impl Arith for $t {
            fn arith(op: &str, a: Self, b: Self) -> R<Self> {
                Ok(match op {
                    "Add" => a + b,
                    "Sub" => a - b,
                    "Mul" => a * b,
                    "Div" => a / b,
                    // NaN propagates, as in onnxruntime (Rust's max and min drop it).
                    "Max" => if a.is_nan() || b.is_nan() { a + b } else { a.max(b) },
                    "Min" => if a.is_nan() || b.is_nan() { a + b } else { a.min(b) },
                    // Rust's float % is C's fmod.
                    "FMod" => a % b,
                    // numpy's mod: the divisor's sign; a zero takes it too.
                    "Mod" => {
                        let r = a % b;
                        if r == 0.0 {
                            (0.0 as $t).copysign(b)
                        } else if (r < 0.0) != (b < 0.0) {
                            r + b
                        } else {
                            r
                        }
                    }
                    _ => return Err(format!("{op} is not defined on floats here").into()),
                })
            }
            fn wrap(a: ArrayD<Self>) -> Num {
                Num::$v(a)
            }
        }
    )*};
}
float_arith!(f32 => F, f64 => D);

fn arith<T: Arith>(x: &ArrayD<T>, y: &ArrayD<T>, op: &str) -> R<Num> {
    let out = zip2(x, y, |a, b| T::arith(op, a, b))?;
    let values: Vec<T> = out.iter().cloned().collect::<R<_>>()?;
    Ok(T::wrap(ArrayD::from_shape_vec(out.raw_dim(), values)?))
}

/// Clip as onnxruntime clamps: by comparisons, so a NaN input stays NaN and a NaN bound does
/// not bound.
fn clip<T: Arith>(x: &ArrayD<T>, lo: &ArrayD<T>, hi: &ArrayD<T>) -> R<Num> {
    let out = zip3(x, lo, hi, |a, l, h| {
        let r = if a < l { l } else { a };
        if r > h {
            h
        } else {
            r
        }
    })?;
    Ok(T::wrap(out))
}

/// Integer power by squaring with wrapping; a negative exponent truncates the real power.
fn int_pow<T>(base: T, exponent: T, one: T, mul: impl Fn(T, T) -> T) -> T
where
    T: Copy + PartialEq + PartialOrd + Default + std::ops::Neg<Output = T>,
    T: std::ops::Shr<u32, Output = T> + std::ops::BitAnd<Output = T>,
{
    let zero = T::default();
    if exponent < zero {
        return if base == one {
            one
        } else if base == -one {
            if exponent & one != zero {
                -one
            } else {
                one
            }
        } else {
            zero
        };
    }
    let (mut r, mut x, mut e) = (one, base, exponent);
    while e > zero {
        if e & one != zero {
            r = mul(r, x);
        }
        x = mul(x, x);
        e = e >> 1;
    }
    r
}

/// ONNX Pow: the base's dtype; the exponent of any numeric type.
fn pow(base: Num, exponent: Num) -> R<Num> {
    let as_f32 = |e: Num| -> ArrayD<f32> {
        match e {
            Num::F(e) => e,
            Num::I(e) => e.mapv(|v| v as f32),
            Num::U(e) => e.mapv(|v| v as f32),
            Num::L(e) => e.mapv(|v| v as f32),
            Num::Q(e) => e.mapv(|v| v as f32),
            Num::D(e) => e.mapv(|v| v as f32),
        }
    };
    let as_i64 = |e: &Num| -> Option<ArrayD<i64>> {
        match e {
            Num::I(e) => Some(e.mapv(i64::from)),
            Num::U(e) => Some(e.mapv(i64::from)),
            Num::L(e) => Some(e.clone()),
            Num::Q(e) => Some(e.mapv(|v| v as i64)),
            _ => None,
        }
    };
    Ok(match base {
        Num::F(b) => Num::F(zip2(&b, &as_f32(exponent), f32::powf)?),
        Num::I(b) => match as_i64(&exponent) {
            Some(e) => Num::I(zip2(&b, &e, |x, y| {
                int_pow(x, y as i32, 1, i32::wrapping_mul)
            })?),
            None => Num::I(zip2(&b, &as_f32(exponent), |x, y| {
                (x as f32).powf(y) as i32
            })?),
        },
        Num::L(b) => match as_i64(&exponent) {
            Some(e) => Num::L(zip2(&b, &e, |x, y| int_pow(x, y, 1, i64::wrapping_mul))?),
            None => Num::L(zip2(&b, &as_f32(exponent), |x, y| {
                (x as f32).powf(y) as i64
            })?),
        },
        Num::D(b) => {
            let e = match exponent {
                Num::D(e) => e,
                Num::F(e) => e.mapv(f64::from),
                Num::I(e) => e.mapv(f64::from),
                Num::U(e) => e.mapv(f64::from),
                Num::L(e) => e.mapv(|v| v as f64),
                Num::Q(e) => e.mapv(|v| v as f64),
            };
            Num::D(zip2(&b, &e, f64::powf)?)
        }
        _ => return Err("Pow is defined on float, i32 and i64 bases here".into()),
    })
}

fn unary(op: &str, a: Num) -> R<Num> {
    // Sign keeps zeros (and NaN), unlike Rust's signum.
    macro_rules! float_unary {
        ($x:expr, $t:ty) => {
            $x.mapv(|v: $t| match op {
                "Neg" => -v,
                "Abs" => v.abs(),
                "Exp" => v.exp(),
                "Log" => v.ln(),
                "Log1p" => v.ln_1p(),
                "Sqrt" => v.sqrt(),
                "Tanh" => v.tanh(),
                "Sigmoid" => 1.0 / (1.0 + (-v).exp()),
                "Reciprocal" => 1.0 / v,
                "Floor" => v.floor(),
                "Ceil" => v.ceil(),
                "Round" => v.round_ties_even(),
                "Sign" => {
                    if v > 0.0 {
                        1.0
                    } else if v < 0.0 {
                        -1.0
                    } else {
                        v
                    }
                }
                _ => {
                    if v.is_nan() {
                        v
                    } else {
                        v.max(0.0)
                    }
                } // Relu
            })
        };
    }
    let known = [
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Log1p",
        "Sqrt",
        "Tanh",
        "Sigmoid",
        "Reciprocal",
        "Relu",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Erf",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "BitwiseNot",
    ];
    if !known.contains(&op) {
        return Err(format!("unknown op {op}").into());
    }
    macro_rules! signed {
        ($x:expr, $t:ty, $v:ident) => {
            Num::$v(match op {
                "Neg" => $x.mapv(<$t>::wrapping_neg),
                "Abs" => $x.mapv(<$t>::wrapping_abs),
                "Relu" => $x.mapv(|v| v.max(0)),
                "Sign" => $x.mapv(<$t>::signum),
                "BitwiseNot" => $x.mapv(|v| !v),
                _ => return Err(format!("{op} is not defined on integers").into()),
            })
        };
    }
    macro_rules! unsigned {
        ($x:expr, $v:ident) => {
            Num::$v(match op {
                "Abs" => $x,
                "Sign" => $x.mapv(|v| (v > 0).into()),
                "BitwiseNot" => $x.mapv(|v| !v),
                _ => return Err(format!("{op} is not defined on unsigned integers").into()),
            })
        };
    }
    // musl's functions (libm), correctly rounded or within an ulp or two.
    let libm32: Option<fn(f32) -> f32> = match op {
        "Erf" => Some(libm::erff),
        "Sin" => Some(libm::sinf),
        "Cos" => Some(libm::cosf),
        "Tan" => Some(libm::tanf),
        "Asin" => Some(libm::asinf),
        "Acos" => Some(libm::acosf),
        "Atan" => Some(libm::atanf),
        "Sinh" => Some(libm::sinhf),
        "Cosh" => Some(libm::coshf),
        "Asinh" => Some(libm::asinhf),
        // musl's acosh is not NaN for every argument below 1.
        "Acosh" => Some(|x| if x < 1.0 { f32::NAN } else { libm::acoshf(x) }),
        "Atanh" => Some(libm::atanhf),
        _ => None,
    };
    let libm64: Option<fn(f64) -> f64> = match op {
        "Erf" => Some(libm::erf),
        "Sin" => Some(libm::sin),
        "Cos" => Some(libm::cos),
        "Tan" => Some(libm::tan),
        "Asin" => Some(libm::asin),
        "Acos" => Some(libm::acos),
        "Atan" => Some(libm::atan),
        "Sinh" => Some(libm::sinh),
        "Cosh" => Some(libm::cosh),
        "Asinh" => Some(libm::asinh),
        "Acosh" => Some(|x| if x < 1.0 { f64::NAN } else { libm::acosh(x) }),
        "Atanh" => Some(libm::atanh),
        _ => None,
    };
    Ok(match (a, libm32, libm64) {
        (Num::F(x), Some(f), _) => Num::F(x.mapv(f)),
        (Num::F(x), None, _) => Num::F(float_unary!(x, f32)),
        (Num::D(x), _, Some(f)) => Num::D(x.mapv(f)),
        (Num::D(x), _, None) => Num::D(float_unary!(x, f64)),
        (Num::I(x), ..) => signed!(x, i32, I),
        (Num::L(x), ..) => signed!(x, i64, L),
        (Num::U(x), ..) => unsigned!(x, U),
        (Num::Q(x), ..) => unsigned!(x, Q),
    })
}

/// The dtype element-wise op `op` gives on `inputs`.
fn result_dtype(op: &str, inputs: &[HostTensor]) -> DType {
    match op {
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor"
        | "Not" | "IsNaN" | "IsInf" | "IsPosInf" | "IsNegInf" | "IsInfNone" => DType::Bool,
        "Where" => inputs[1].dtype,
        _ => inputs[0].dtype,
    }
}

/// Element-wise op `op` (ONNX's name; `FMod` is Mod with fmod = 1) on `inputs`, with numpy
/// broadcasting, stored in its result dtype.
pub(crate) fn elementwise(op: &str, inputs: &[HostTensor]) -> R<HostTensor> {
    let out = result_dtype(op, inputs);
    let bools = |k: usize| -> R<ArrayD<u32>> {
        match num(&inputs[k])? {
            Num::U(x) if inputs[k].dtype == DType::Bool => Ok(x),
            _ => Err(format!("{op} takes bool").into()),
        }
    };
    let same = inputs.iter().all(|t| t.dtype == inputs[0].dtype);
    let r = match (op, inputs.len()) {
        ("Pow", 2) => pow(num(&inputs[0])?, num(&inputs[1])?)?,
        (_, 2) if !same => return Err(format!("{op}: operands differ in dtype").into()),
        ("Equal", 2) => same2!(num(&inputs[0])?, num(&inputs[1])?, compare, op)?,
        ("Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual", 2) => {
            if inputs[0].dtype == DType::Bool {
                return Err(format!("{op} is not defined on bool").into());
            }
            same2!(num(&inputs[0])?, num(&inputs[1])?, compare, op)?
        }
        ("And" | "Or" | "Xor", 2) => Num::U(zip2(&bools(0)?, &bools(1)?, |a, b| match op {
            "And" => a & b,
            "Or" => a | b,
            _ => a ^ b,
        })?),
        ("Not", 1) => Num::U(bools(0)?.mapv(|v| 1 - v)),
        // IsInf with its attributes as the op's name: both signs, +inf, -inf or neither.
        ("IsNaN" | "IsInf" | "IsPosInf" | "IsNegInf" | "IsInfNone", 1) => {
            let test = |v: f64| -> u32 {
                u32::from(match op {
                    "IsNaN" => v.is_nan(),
                    "IsInf" => v.is_infinite(),
                    "IsPosInf" => v == f64::INFINITY,
                    "IsNegInf" => v == f64::NEG_INFINITY,
                    _ => false,
                })
            };
            match num(&inputs[0])? {
                Num::F(x) => Num::U(x.mapv(|v| test(f64::from(v)))),
                Num::D(x) => Num::U(x.mapv(test)),
                _ => return Err(format!("{op} takes floats").into()),
            }
        }
        ("Where", 3) => {
            let c = bools(0)?;
            macro_rules! pick {
                ($($v:ident),*) => {
                    match (num(&inputs[1])?, num(&inputs[2])?) {
                        $((Num::$v(x), Num::$v(y)) => Num::$v(zip3(&c, &x, &y, |c, x, y| if c != 0 { x } else { y })?),)*
                        _ => return Err("Where: X and Y differ in dtype".into()),
                    }
                };
            }
            pick!(F, I, U, D, L, Q)
        }
        ("Clip", 3) => {
            if !inputs.iter().all(|t| t.dtype == inputs[0].dtype) || out == DType::Bool {
                return Err("Clip: operands differ in dtype".into());
            }
            match (num(&inputs[0])?, num(&inputs[1])?, num(&inputs[2])?) {
                (Num::F(x), Num::F(l), Num::F(h)) => clip(&x, &l, &h)?,
                (Num::I(x), Num::I(l), Num::I(h)) => clip(&x, &l, &h)?,
                (Num::U(x), Num::U(l), Num::U(h)) => clip(&x, &l, &h)?,
                (Num::D(x), Num::D(l), Num::D(h)) => clip(&x, &l, &h)?,
                (Num::L(x), Num::L(l), Num::L(h)) => clip(&x, &l, &h)?,
                (Num::Q(x), Num::Q(l), Num::Q(h)) => clip(&x, &l, &h)?,
                _ => return Err("Clip: operands differ in dtype".into()),
            }
        }
        (_, 2) => {
            if inputs[0].dtype == DType::Bool {
                return Err(format!("{op} is not defined on bool").into());
            }
            same2!(num(&inputs[0])?, num(&inputs[1])?, arith, op)?
        }
        (_, 1) => {
            if inputs[0].dtype == DType::Bool {
                return Err(format!("{op} is not defined on bool").into());
            }
            unary(op, num(&inputs[0])?)?
        }
        _ => return Err(format!("{op} with {} inputs", inputs.len()).into()),
    };
    narrow(r, out)
}

/// ONNX Cast: integers wrap, floats to integers truncate and saturate (NaN as 0) as Rust's
/// `as` does, anything to bool is `!= 0` (NaN is true), f64 to f16/bf16 rounds through f32.
pub(crate) fn cast(t: &HostTensor, to: DType) -> R<HostTensor> {
    cast_mode(t, to, crate::CastMode::default())
}

/// [`cast`] in `mode` (for the 8-bit floats). Floats to the 4- and 2-bit integers truncate to
/// i32 and wrap; anything to a small float goes through f32.
pub(crate) fn cast_mode(t: &HostTensor, to: DType, mode: crate::CastMode) -> R<HostTensor> {
    use crate::minifloat::{encode, int_code};
    let n = num(t)?;
    if mode.quantize {
        if let Some((lo, hi)) = crate::kernels::words::quantized_range(to) {
            // QuantizeLinear's cast: rounded half to even, clamped, NaN as 0; then exact.
            let q = |v: f64| {
                if v.is_nan() {
                    0.0
                } else {
                    v.round_ties_even().clamp(f64::from(lo), f64::from(hi))
                }
            };
            let rounded = match &n {
                Num::F(a) => Some(a.mapv(|v| q(f64::from(v)))),
                Num::D(a) => Some(a.mapv(q)),
                _ => None,
            };
            if let Some(r) = rounded {
                return cast(&HostTensor::from_array(&r.mapv(|v| v as i32)), to);
            }
        }
    }
    macro_rules! conv {
        ($a:expr) => {
            match to {
                DType::F32 => HostTensor::from_array(&$a.mapv(|v| v as f32)),
                DType::F16 => HostTensor::from_array(&$a.mapv(|v| half::f16::from_f32(v as f32))),
                DType::BF16 => HostTensor::from_array(&$a.mapv(|v| half::bf16::from_f32(v as f32))),
                DType::F64 => HostTensor::from_array(&$a.mapv(|v| v as f64)),
                DType::I8 => HostTensor::from_array(&$a.mapv(|v| v as i8)),
                DType::I16 => HostTensor::from_array(&$a.mapv(|v| v as i16)),
                DType::I32 => HostTensor::from_array(&$a.mapv(|v| v as i32)),
                DType::I64 => HostTensor::from_array(&$a.mapv(|v| v as i64)),
                DType::U8 => HostTensor::from_array(&$a.mapv(|v| v as u8)),
                DType::U16 => HostTensor::from_array(&$a.mapv(|v| v as u16)),
                DType::U32 => HostTensor::from_array(&$a.mapv(|v| v as u32)),
                DType::U64 => HostTensor::from_array(&$a.mapv(|v| v as u64)),
                DType::Bool => HostTensor::from_array(&$a.mapv(|v| v as f64 != 0.0)),
                d @ (DType::I4 | DType::U4 | DType::I2 | DType::U2) => {
                    from_codes($a.mapv(|v| int_code(d, v as i32 as i64)), d)
                }
                d => from_codes($a.mapv(|v| encode(d, v as f32, mode)), d),
            }
        };
    }
    Ok(match n {
        Num::F(a) => conv!(a),
        Num::I(a) => conv!(a),
        Num::U(a) => conv!(a),
        Num::D(a) => conv!(a),
        Num::L(a) => conv!(a),
        Num::Q(a) => conv!(a),
    })
}

pub(crate) fn matmul<T: Copy + Default + std::ops::Add<Output = T>>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    mul: impl Fn(T, T) -> T,
    add: impl Fn(T, T) -> T,
) -> R<ArrayD<T>> {
    let a2 = if a.ndim() == 1 {
        a.clone().insert_axis(Axis(0))
    } else {
        a.clone()
    };
    let b2 = if b.ndim() == 1 {
        b.clone().insert_axis(Axis(1))
    } else {
        b.clone()
    };
    let (m, k, n) = (
        a2.shape()[a2.ndim() - 2],
        a2.shape()[a2.ndim() - 1],
        b2.shape()[b2.ndim() - 1],
    );
    if b2.shape()[b2.ndim() - 2] != k {
        return Err("inner dimensions differ".into());
    }
    let (ab, bb) = (&a2.shape()[..a2.ndim() - 2], &b2.shape()[..b2.ndim() - 2]);
    let rank = ab.len().max(bb.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    let batch: Vec<usize> = (0..rank)
        .map(|i| {
            if dim(ab, i) == 1 {
                dim(bb, i)
            } else {
                dim(ab, i)
            }
        })
        .collect();
    let mut sa = batch.clone();
    sa.extend([m, k]);
    let mut sb = batch.clone();
    sb.extend([k, n]);
    let a3 = a2
        .broadcast(IxDyn(&sa))
        .ok_or("batch dims do not broadcast")?
        .to_owned();
    let b3 = b2
        .broadcast(IxDyn(&sb))
        .ok_or("batch dims do not broadcast")?
        .to_owned();
    let nb: usize = batch.iter().product();
    let a3 = a3.into_shape_with_order(IxDyn(&[nb, m, k]))?;
    let b3 = b3.into_shape_with_order(IxDyn(&[nb, k, n]))?;
    let mut out = Vec::with_capacity(nb * m * n);
    for q in 0..nb {
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::default();
                for l in 0..k {
                    acc = add(acc, mul(a3[[q, i, l]], b3[[q, l, j]]));
                }
                out.push(acc);
            }
        }
    }
    let mut shape = batch;
    if a.ndim() > 1 {
        shape.push(m);
    }
    if b.ndim() > 1 {
        shape.push(n);
    }
    Ok(ArrayD::from_shape_vec(IxDyn(&shape), out)?)
}

/// `a` as rows of its reduced elements: kept axes first (C order), then `axes`.
fn rows<T: Clone>(a: &ArrayD<T>, axes: &[usize]) -> R<(Vec<Vec<T>>, Vec<usize>)> {
    let kept: Vec<usize> = (0..a.ndim()).filter(|k| !axes.contains(k)).collect();
    let mut perm = kept.clone();
    perm.extend_from_slice(axes);
    let p = a.view().permuted_axes(IxDyn(&perm));
    let n: usize = axes.iter().map(|&k| a.shape()[k]).product();
    let flat: Vec<T> = p.iter().cloned().collect();
    let count: usize = kept.iter().map(|&k| a.shape()[k]).product();
    let rows = (0..count)
        .map(|r| flat[r * n..(r + 1) * n].to_vec())
        .collect();
    Ok((rows, kept.iter().map(|&k| a.shape()[k]).collect()))
}

/// ONNX Reduce* over `axes` (distinct, in range), and ArgMax/ArgMin over one axis (the ops
/// named as the GPU kernel names them: `ArgMaxLast` keeps the last of equal values). Floats
/// fold in f64 and round once to their dtype; integers wrap in their own width; the result
/// has the kept axes (with 1s for reduced ones when `keepdims`).
pub(crate) fn reduce(op: &str, t: &HostTensor, axes: &[usize], keepdims: bool) -> R<HostTensor> {
    let shape: Vec<usize> = (0..t.shape.len())
        .filter_map(|k| match (axes.contains(&k), keepdims) {
            (false, _) => Some(t.shape[k]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    let arg = |vals: &[f64], max: bool, last: bool| -> i64 {
        let mut best: Option<(f64, usize)> = None;
        for (j, &v) in vals.iter().enumerate() {
            let better = match best {
                None => true,
                Some((b, _)) => (if max { v > b } else { v < b }) || (last && v == b),
            };
            if better {
                best = Some((v, j));
            }
        }
        best.map_or(0, |(_, j)| j as i64)
    };
    if let Some(kind) = op.strip_prefix("Arg") {
        let (max, last) = (kind.starts_with("Max"), kind.ends_with("Last"));
        // Order-preserving as f64 (i64 and u64 beyond 2^53 compare through i128 below).
        let out: Vec<i64> = match num(t)? {
            Num::L(a) => rows(&a, axes)?
                .0
                .iter()
                .map(|r| {
                    let v: Vec<i128> = r.iter().map(|&x| i128::from(x)).collect();
                    arg_exact(&v, max, last)
                })
                .collect(),
            Num::Q(a) => rows(&a, axes)?
                .0
                .iter()
                .map(|r| {
                    let v: Vec<i128> = r.iter().map(|&x| i128::from(x)).collect();
                    arg_exact(&v, max, last)
                })
                .collect(),
            n => float_rows(n, axes)?
                .iter()
                .map(|r| arg(r, max, last))
                .collect(),
        };
        return Ok(HostTensor::from_vec(shape, &out)?);
    }
    macro_rules! ints {
        ($a:expr, $t:ty, $v:ident) => {{
            let (rs, _) = rows(&$a, axes)?;
            let n = rs.first().map_or(0, |r| r.len()) as $t;
            // Max and Min of no element: the input type's ends (8- and 16-bit signed types
            // are computed in i32).
            let (lowest, highest) = match t.dtype {
                DType::I8 => (i64::from(i8::MIN) as $t, i8::MAX as $t),
                DType::I16 => (i64::from(i16::MIN) as $t, i16::MAX as $t),
                _ => (<$t>::MIN, <$t>::MAX),
            };
            let out: Vec<$t> = rs
                .iter()
                .map(|r| -> R<$t> {
                    let it = r.iter().copied();
                    Ok(match op {
                        "ReduceSum" => it.fold(0, <$t>::wrapping_add),
                        "ReduceSumSquare" => {
                            it.fold(0 as $t, |s: $t, x| s.wrapping_add(x.wrapping_mul(x)))
                        }
                        "ReduceMean" => {
                            let s = it.fold(0, <$t>::wrapping_add);
                            if n == 0 {
                                s
                            } else {
                                s.wrapping_div(n)
                            }
                        }
                        "ReduceProd" => it.fold(1, <$t>::wrapping_mul),
                        #[allow(unused_comparisons)]
                        "ReduceL1" => it.fold(0 as $t, |s: $t, x| {
                            s.wrapping_add(if x < 0 { x.wrapping_neg() } else { x })
                        }),
                        "ReduceL2" => {
                            let s = it.fold(0 as $t, |s: $t, x| s.wrapping_add(x.wrapping_mul(x)));
                            (s as f32).sqrt() as $t
                        }
                        "ReduceMax" => it.fold(lowest, <$t>::max),
                        "ReduceMin" => it.fold(highest, <$t>::min),
                        _ => return Err(format!("{op} is not defined on integers").into()),
                    })
                })
                .collect::<R<_>>()?;
            Num::$v(ArrayD::from_shape_vec(IxDyn(&shape), out)?)
        }};
    }
    let result = match num(t)? {
        Num::I(a) => ints!(a, i32, I),
        Num::U(a) => ints!(a, u32, U),
        Num::L(a) => ints!(a, i64, L),
        Num::Q(a) => ints!(a, u64, Q),
        n => {
            let double = matches!(n, Num::D(_));
            let out: Vec<f64> = float_rows(n, axes)?
                .iter()
                .map(|r| -> R<f64> {
                    let it = r.iter().copied();
                    let sum = |f: &dyn Fn(f64) -> f64| r.iter().map(|&x| f(x)).sum::<f64>();
                    let nan = r.iter().any(|x| x.is_nan());
                    Ok(match op {
                        "ReduceSum" => sum(&|x| x),
                        "ReduceSumSquare" => sum(&|x| x * x),
                        "ReduceMean" => sum(&|x| x) / r.len() as f64,
                        "ReduceProd" => it.product(),
                        "ReduceL1" => sum(&f64::abs),
                        "ReduceL2" => sum(&|x| x * x).sqrt(),
                        "ReduceLogSum" => sum(&|x| x).ln(),
                        "ReduceLogSumExp" if nan => f64::NAN,
                        "ReduceLogSumExp" => {
                            let m = it.fold(f64::NEG_INFINITY, f64::max);
                            if m.is_infinite() {
                                m
                            } else {
                                m + sum(&|x| (x - m).exp()).ln()
                            }
                        }
                        "ReduceMax" if nan => f64::NAN,
                        "ReduceMin" if nan => f64::NAN,
                        "ReduceMax" => it.fold(f64::NEG_INFINITY, f64::max),
                        "ReduceMin" => it.fold(f64::INFINITY, f64::min),
                        _ => return Err(format!("unknown reduction {op}").into()),
                    })
                })
                .collect::<R<_>>()?;
            let a = ArrayD::from_shape_vec(IxDyn(&shape), out)?;
            if double {
                Num::D(a)
            } else {
                Num::F(a.mapv(|v| v as f32))
            }
        }
    };
    narrow(result, t.dtype)
}

/// The rows of a float (or 32-bit integer) array as f64 values.
fn float_rows(n: Num, axes: &[usize]) -> R<Vec<Vec<f64>>> {
    Ok(match n {
        Num::F(a) => rows(&a.mapv(f64::from), axes)?.0,
        Num::D(a) => rows(&a, axes)?.0,
        Num::I(a) => rows(&a.mapv(f64::from), axes)?.0,
        Num::U(a) => rows(&a.mapv(f64::from), axes)?.0,
        _ => return Err("64-bit integers compare exactly elsewhere".into()),
    })
}

fn arg_exact(vals: &[i128], max: bool, last: bool) -> i64 {
    let mut best: Option<(i128, usize)> = None;
    for (j, &v) in vals.iter().enumerate() {
        let better = match best {
            None => true,
            Some((b, _)) => (if max { v > b } else { v < b }) || (last && v == b),
        };
        if better {
            best = Some((v, j));
        }
    }
    best.map_or(0, |(_, j)| j as i64)
}
