//! The host side of the storage-only types ([`DType::STORAGE_ONLY`]): the value of every code
//! of the 8-, 6- and 4-bit floats, conversion from f32 (found by searching those values, not by
//! the bit arithmetic the kernels use, so each checks the other), and the packing ONNX files
//! use for the 6-, 4- and 2-bit types (a stream of bits, the first element in the low bits of
//! the first byte; 6-bit elements straddle bytes).

use crate::DType;

/// How a conversion to an 8-bit float treats values beyond its range, and how one to
/// [`DType::F8E8M0`] rounds (ONNX Cast's `saturate` and `round_mode`; the defaults are
/// saturating and rounding up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CastMode {
    /// Out-of-range values (infinities included) become the largest finite value of their
    /// sign; without it they become infinity or NaN, whichever the format has.
    pub saturate: bool,
    /// How a cast to [`DType::F8E8M0`] rounds.
    pub round: Round,
    /// Floats cast to the 8-, 16-, 4- and 2-bit integers round half to even and clamp to the
    /// type's range, as QuantizeLinear does (Cast truncates, and wraps the 4- and 2-bit ones).
    pub quantize: bool,
}

/// Rounding of a conversion to [`DType::F8E8M0`] (powers of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Round {
    /// Away from zero: any fraction goes to the next power.
    Up,
    /// Toward zero.
    Down,
    /// To the nearer power, ties up.
    Nearest,
}

impl Default for CastMode {
    fn default() -> Self {
        CastMode {
            saturate: true,
            round: Round::Up,
            quantize: false,
        }
    }
}

impl Round {
    /// The mode of ONNX Cast's `round_mode` text (`up`, `down`, `nearest`).
    pub fn from_name(name: &str) -> Option<Round> {
        match name {
            "up" => Some(Round::Up),
            "down" => Some(Round::Down),
            "nearest" => Some(Round::Nearest),
            _ => None,
        }
    }
}

/// Layout of a small float: mantissa bits, exponent bias, the bit holding the sign.
struct Layout {
    mantissa: u32,
    bias: i32,
    sign: u32,
}

fn layout(dtype: DType) -> Option<Layout> {
    let (mantissa, bias, sign) = match dtype {
        DType::F8E4M3FN => (3, 7, 7),
        DType::F8E4M3FNUZ => (3, 8, 7),
        DType::F8E5M2 => (2, 15, 7),
        DType::F8E5M2FNUZ => (2, 16, 7),
        DType::F4E2M1 => (1, 1, 3),
        DType::F6E2M3 => (3, 1, 5),
        DType::F6E3M2 => (2, 3, 5),
        _ => return None,
    };
    Some(Layout {
        mantissa,
        bias,
        sign,
    })
}

/// The value of code `code` of a small float (F8E8M0 included): NaN codes give NaN (of the
/// code's sign), E5M2's infinity codes infinity.
pub fn decode(dtype: DType, code: u8) -> f32 {
    let code = u32::from(code);
    if dtype == DType::F8E8M0 {
        return match code {
            0xff => f32::NAN,
            _ => 2f32.powi(code as i32 - 127),
        };
    }
    let Some(l) = layout(dtype) else {
        return f32::NAN;
    };
    let negative = code >> l.sign & 1 == 1;
    let magnitude = code & ((1 << l.sign) - 1);
    let nan = match dtype {
        DType::F8E4M3FN => magnitude == 0x7f,
        DType::F8E5M2 => magnitude > 0x7c,
        DType::F8E4M3FNUZ | DType::F8E5M2FNUZ => code == 0x80,
        _ => false,
    };
    if nan {
        // The FNUZ formats' one NaN (0x80) has no sign.
        let unsigned = matches!(dtype, DType::F8E4M3FNUZ | DType::F8E5M2FNUZ);
        return if negative && !unsigned {
            -f32::NAN
        } else {
            f32::NAN
        };
    }
    let value = if dtype == DType::F8E5M2 && magnitude == 0x7c {
        f32::INFINITY
    } else {
        let exponent = (magnitude >> l.mantissa) as i32;
        let fraction = (magnitude & ((1 << l.mantissa) - 1)) as f32;
        let unit = 2f32.powi(-(l.mantissa as i32));
        if exponent == 0 {
            fraction * unit * 2f32.powi(1 - l.bias)
        } else {
            (1.0 + fraction * unit) * 2f32.powi(exponent - l.bias)
        }
    };
    if negative {
        -value
    } else {
        value
    }
}

/// The largest finite magnitude code of a small float.
fn top(dtype: DType) -> u32 {
    match dtype {
        DType::F8E4M3FN => 0x7e,
        DType::F8E5M2 => 0x7b,
        DType::F4E2M1 => 0x7,
        DType::F6E2M3 | DType::F6E3M2 => 0x1f,
        _ => 0x7f,
    }
}

/// `v` as a small float's code, as ONNX Cast gives it: rounded to the nearest value, ties to
/// the even code; beyond the range per `mode.saturate` (the 6- and 4-bit floats, which have
/// neither infinity nor NaN, always saturate, and take NaN to a zero of the opposite sign, as
/// the ONNX reference does). F8E8M0 follows the ONNX reference's bit rules (see `e8m0`).
pub fn encode(dtype: DType, v: f32, mode: CastMode) -> u8 {
    if dtype == DType::F8E8M0 {
        return e8m0(v, mode);
    }
    let Some(l) = layout(dtype) else {
        return 0;
    };
    let negative = v.is_sign_negative();
    let sign = u32::from(negative) << l.sign;
    let unsigned_zero = matches!(dtype, DType::F8E4M3FNUZ | DType::F8E5M2FNUZ);
    let top = top(dtype);
    if v.is_nan() {
        return match dtype {
            DType::F8E4M3FN => (sign | 0x7f) as u8,
            DType::F8E5M2 => (sign | 0x7e) as u8,
            _ if no_specials(dtype) => (sign ^ (1 << l.sign)) as u8,
            _ => 0x80,
        };
    }
    let saturate = mode.saturate || no_specials(dtype);
    let overflow = |sign: u32| -> u8 {
        if saturate {
            return (sign | top) as u8;
        }
        match dtype {
            DType::F8E4M3FN => (sign | 0x7f) as u8,
            DType::F8E5M2 => (sign | 0x7c) as u8,
            _ => 0x80,
        }
    };
    let a = v.abs();
    if a.is_infinite() {
        return overflow(sign);
    }
    // Nearest among the finite magnitudes and the one a further code would have (past it
    // is overflow), ties to the even code.
    let value = |c: u32| f64::from(decode(dtype, c as u8));
    let beyond = 2.0 * value(top) - value(top - 1);
    let a = f64::from(a);
    let (mut lo, mut hi) = (0u32, top + 1);
    let at = |c: u32| if c > top { beyond } else { value(c) };
    // Largest code whose value is <= a.
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if at(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let below = lo;
    let code = if below > top || at(below) == a {
        below
    } else {
        let (d0, d1) = (a - at(below), at(below + 1) - a);
        if d0 < d1 || (d0 == d1 && below % 2 == 0) {
            below
        } else {
            below + 1
        }
    };
    if code > top {
        return overflow(sign);
    }
    if code == 0 && unsigned_zero {
        return 0;
    }
    (sign | code) as u8
}

/// Whether a small float has neither infinities nor NaN (its casts always saturate).
fn no_specials(dtype: DType) -> bool {
    matches!(dtype, DType::F4E2M1 | DType::F6E2M3 | DType::F6E3M2)
}

/// F8E8M0 from the bits of `v` as the ONNX reference computes it (the node tests come from
/// it): the f32 exponent field, raised by one for `Up` when any fraction bit is set and for
/// `Nearest` from a half up; saturating keeps 0xfe from rising to 0xff (NaN). The sign is
/// ignored; infinities and NaN give 0xff, zeros and f32 subnormals the exponent 0 (2^-127)
/// or, rounded up, 1.
fn e8m0(v: f32, mode: CastMode) -> u8 {
    let b = v.to_bits();
    let exponent = (b >> 23) & 0xff;
    let fraction = b & 0x7f_ffff;
    if exponent == 0xff {
        return 0xff;
    }
    let up = match mode.round {
        Round::Up => fraction != 0,
        Round::Down => false,
        Round::Nearest => fraction & 0x40_0000 != 0 && (fraction & 0x3f_ffff != 0 || exponent > 0),
    };
    let up = up && !(mode.saturate && exponent == 0xfe);
    (exponent + u32::from(up)) as u8
}

/// The value of a 4- or 2-bit integer held in a byte's low bits.
pub fn int_value(dtype: DType, byte: u8) -> i32 {
    match dtype {
        DType::I4 => i32::from((byte << 4) as i8 >> 4),
        DType::U4 => i32::from(byte & 0xf),
        DType::I2 => i32::from((byte << 6) as i8 >> 6),
        DType::U2 => i32::from(byte & 0x3),
        _ => i32::from(byte),
    }
}

/// Integer `v` wrapped into a 4- or 2-bit type's low bits (its two's complement bits).
pub fn int_code(dtype: DType, v: i64) -> u8 {
    let bits = dtype.packed_bits().unwrap_or(8);
    (v as u8) & ((1u16 << bits) - 1) as u8
}

/// One byte per element from ONNX's packing of `numel` elements (`bits` each, element `i` at
/// bits `i * bits` up of the little-endian stream: the first in the low bits of the first
/// byte). `packed` must hold [`packed_len`] bytes.
pub fn unpack(dtype: DType, packed: &[u8], numel: usize) -> Vec<u8> {
    let bits = dtype.packed_bits().unwrap_or(8);
    let mask = (1u16 << bits) - 1;
    (0..numel)
        .map(|i| {
            let (byte, shift) = (i * bits / 8, i * bits % 8);
            let next = packed.get(byte + 1).map_or(0, |&b| u16::from(b) << 8);
            ((u16::from(packed[byte]) | next) >> shift & mask) as u8
        })
        .collect()
}

/// ONNX's packing of one-per-byte elements (the inverse of [`unpack`]; unused high bits of
/// the last byte are zero).
pub fn pack(dtype: DType, elements: &[u8]) -> Vec<u8> {
    let bits = dtype.packed_bits().unwrap_or(8);
    let mask = (1u16 << bits) - 1;
    let mut out = vec![0u8; (elements.len() * bits).div_ceil(8)];
    for (i, &e) in elements.iter().enumerate() {
        let (byte, shift) = (i * bits / 8, i * bits % 8);
        let field = (u16::from(e) & mask) << shift;
        out[byte] |= field as u8;
        if field > 0xff {
            out[byte + 1] |= (field >> 8) as u8;
        }
    }
    out
}

/// Bytes ONNX needs for `numel` elements of `dtype` (packed where the type is narrower than a
/// byte).
pub fn packed_len(dtype: DType, numel: usize) -> Option<usize> {
    match dtype.packed_bits() {
        Some(bits) => Some(numel.checked_mul(bits)?.div_ceil(8)),
        None => numel.checked_mul(dtype.size()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(decode(DType::F8E4M3FN, 0x7e), 448.0);
        assert_eq!(decode(DType::F8E4M3FNUZ, 0x7f), 240.0);
        assert_eq!(decode(DType::F8E5M2, 0x7b), 57344.0);
        assert_eq!(decode(DType::F8E5M2FNUZ, 0x7f), 57344.0);
        assert_eq!(decode(DType::F4E2M1, 0x7), 6.0);
        assert_eq!(decode(DType::F4E2M1, 0x1), 0.5);
        assert_eq!(decode(DType::F8E4M3FN, 0x01), 2f32.powi(-9));
        assert!(decode(DType::F8E4M3FN, 0xff).is_nan());
        assert_eq!(decode(DType::F8E8M0, 0), 2f32.powi(-127));
        let s = CastMode::default();
        let n = CastMode {
            saturate: false,
            ..s
        };
        assert_eq!(encode(DType::F8E4M3FN, 464.0, n), 0x7e);
        assert_eq!(encode(DType::F8E4M3FN, 464.1, n), 0x7f);
        assert_eq!(encode(DType::F8E4M3FN, 1e6, s), 0x7e);
        assert_eq!(encode(DType::F8E5M2, 61440.0, n), 0x7c);
        assert_eq!(encode(DType::F8E5M2, f32::INFINITY, s), 0x7b);
        assert_eq!(encode(DType::F4E2M1, 0.25, s), 0x0);
        assert_eq!(encode(DType::F4E2M1, -0.0, s), 0x8);
        assert_eq!(encode(DType::F8E4M3FNUZ, -0.0, s), 0x0);
        assert_eq!(pack(DType::I4, &[0x7, 0x8, 0xf]), vec![0x87, 0x0f]);
        assert_eq!(unpack(DType::I2, &[0b11_10_01_00], 4), vec![0, 1, 2, 3]);
        assert_eq!(int_value(DType::I4, 0x8), -8);
        assert_eq!(int_code(DType::I2, -1), 0x3);
        // The 6-bit floats, against ml_dtypes' float6_e2m3fn and float6_e3m2fn (what the ONNX
        // reference casts with): largest values, smallest subnormals, ties to even, NaN to a
        // zero of the opposite sign, saturation whatever `saturate` says.
        assert_eq!(decode(DType::F6E2M3, 0x1f), 7.5);
        assert_eq!(decode(DType::F6E2M3, 0x01), 0.125);
        assert_eq!(decode(DType::F6E2M3, 0x3f), -7.5);
        assert_eq!(decode(DType::F6E3M2, 0x1f), 28.0);
        assert_eq!(decode(DType::F6E3M2, 0x01), 0.0625);
        assert_eq!(decode(DType::F6E3M2, 0x18), 8.0);
        for (dtype, v, code) in [
            (DType::F6E2M3, f32::NAN, 0x20),
            (DType::F6E2M3, -f32::NAN, 0x00),
            (DType::F6E2M3, f32::INFINITY, 0x1f),
            (DType::F6E2M3, -1e9, 0x3f),
            (DType::F6E2M3, 7.75, 0x1f),
            (DType::F6E2M3, 0.0625, 0x00),
            (DType::F6E2M3, 0.09375, 0x01),
            (DType::F6E3M2, f32::NAN, 0x20),
            (DType::F6E3M2, -f32::INFINITY, 0x3f),
            (DType::F6E3M2, 30.0, 0x1f),
            (DType::F6E3M2, 7.75, 0x18),
            (DType::F6E3M2, 0.03125, 0x00),
            (DType::F6E3M2, 0.0625, 0x01),
            (DType::F6E3M2, -0.0, 0x20),
        ] {
            assert_eq!(encode(dtype, v, n), code, "{dtype} {v}");
        }
        // Four 6-bit elements in three bytes, as onnx.numpy_helper packs them.
        let codes = [0x01, 0x3f, 0x15, 0x2a, 0x07];
        let packed = pack(DType::F6E2M3, &codes);
        assert_eq!(packed, vec![0xc1, 0x5f, 0xa9, 0x07]);
        assert_eq!(unpack(DType::F6E2M3, &packed, 5), codes);
    }
}
