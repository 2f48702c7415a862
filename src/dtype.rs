//! Element types and their host-side representation.

use std::fmt;

#[cfg(target_endian = "big")]
compile_error!(
    "wgpu-ops moves tensors as little-endian bytes and supports little-endian hosts only"
);

/// The element type of a tensor. Data movement is type-agnostic: only [`DType::size`] matters
/// to the kernels, so every type here works with every data-movement op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float (ONNX FLOAT).
    F32,
    /// 16-bit IEEE float (ONNX FLOAT16).
    F16,
    /// bfloat16: the upper half of an f32 (ONNX BFLOAT16).
    BF16,
    /// 64-bit IEEE float (ONNX DOUBLE).
    F64,
    /// 8-bit signed integer (ONNX INT8).
    I8,
    /// 16-bit signed integer (ONNX INT16).
    I16,
    /// 32-bit signed integer (ONNX INT32).
    I32,
    /// 64-bit signed integer (ONNX INT64).
    I64,
    /// 8-bit unsigned integer (ONNX UINT8).
    U8,
    /// 16-bit unsigned integer (ONNX UINT16).
    U16,
    /// 32-bit unsigned integer (ONNX UINT32).
    U32,
    /// 64-bit unsigned integer (ONNX UINT64).
    U64,
    /// One byte, 0 or 1 (ONNX BOOL).
    Bool,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, no infinities, one NaN per sign (ONNX
    /// FLOAT8E4M3FN).
    F8E4M3FN,
    /// 8-bit float like [`DType::F8E4M3FN`] with exponent bias 8, no negative zero and one NaN
    /// (0x80) (ONNX FLOAT8E4M3FNUZ).
    F8E4M3FNUZ,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits, with infinities (ONNX FLOAT8E5M2).
    F8E5M2,
    /// 8-bit float like [`DType::F8E5M2`] with exponent bias 16, no infinities, no negative
    /// zero and one NaN (0x80) (ONNX FLOAT8E5M2FNUZ).
    F8E5M2FNUZ,
    /// 8-bit power of two: 8 exponent bits, bias 127, no sign, 0xff is NaN (ONNX FLOAT8E8M0).
    F8E8M0,
    /// 4-bit float, 2 exponent bits, 1 mantissa bit, no infinities or NaN (ONNX FLOAT4E2M1).
    F4E2M1,
    /// 6-bit float, 2 exponent bits, 3 mantissa bits, no infinities or NaN (ONNX FLOAT6E2M3).
    F6E2M3,
    /// 6-bit float, 3 exponent bits, 2 mantissa bits, no infinities or NaN (ONNX FLOAT6E3M2).
    F6E3M2,
    /// 4-bit signed integer (ONNX INT4).
    I4,
    /// 4-bit unsigned integer (ONNX UINT4).
    U4,
    /// 2-bit signed integer (ONNX INT2).
    I2,
    /// 2-bit unsigned integer (ONNX UINT2).
    U2,
}

impl DType {
    /// Every element type, in declaration order.
    pub const ALL: [DType; 25] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::F6E2M3,
        DType::F6E3M2,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
    ];

    /// The types tensors can hold, move and [`Cast`](crate::Recorder::cast) but that no other op
    /// computes on (ONNX defines only casts, quantization and data movement for them): the
    /// 8-, 6- and 4-bit floats and the 4- and 2-bit integers.
    pub const STORAGE_ONLY: [DType; 12] = [
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::F6E2M3,
        DType::F6E3M2,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
    ];

    /// Whether the type is one of [`DType::STORAGE_ONLY`].
    pub fn is_storage_only(self) -> bool {
        DType::STORAGE_ONLY.contains(&self)
    }

    /// Bits per element where ONNX packs elements narrower than a byte into a stream of bytes
    /// (6, 4 or 2); tensors here hold them one per byte, the integers sign- or zero-extended,
    /// the 6- and 4-bit floats in the byte's low bits.
    pub fn packed_bits(self) -> Option<usize> {
        match self {
            DType::F6E2M3 | DType::F6E3M2 => Some(6),
            DType::F4E2M1 | DType::I4 | DType::U4 => Some(4),
            DType::I2 | DType::U2 => Some(2),
            _ => None,
        }
    }

    /// Bytes per element: 1, 2, 4 or 8 (the types narrower than a byte take one each).
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0
            | DType::F4E2M1
            | DType::F6E2M3
            | DType::F6E3M2
            | DType::I4
            | DType::U4
            | DType::I2
            | DType::U2 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The name used by the graph format (`f32`, `bf16`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::F6E2M3 => "f6e2m3",
            DType::F6E3M2 => "f6e3m2",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
        }
    }

    /// The type whose [`DType::name`] is `name` (`"f32"`, `"i64"`, ...), if any.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether this is a signed or unsigned integer of 8 to 64 bits (not bool, not the 4- and
    /// 2-bit types).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The ops that take the storage-only types ([`DType::STORAGE_ONLY`]), by their graph names
/// (and every op whose name starts with `Cast`): casts and the ops
/// that move elements without computing on them (ONNX defines no others on those types).
pub const STORAGE_ONLY_OPS: &[&str] = &[
    "Cast",
    "CastLike",
    "BitCast",
    "Identity",
    "Dropout",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Concat",
    "Split",
    "Shape",
    "Size",
    "CheckInputs",
    "Expand",
    "Tile",
    "StridedSlice",
    "Slice",
    "OnnxSlice",
    "BatchToSpace",
    "SpaceToBatch",
    "DepthToSpace",
    "SpaceToDepth",
    "Gather",
    "Scan",
    "If",
    "Loop",
    // The Rust API's name for a plain copy.
    "copy",
];

/// A Rust type that can be an element of a tensor.
pub trait Element: Copy + Send + Sync + 'static {
    /// The element type this Rust type is.
    const DTYPE: DType;
    /// Appends the little-endian bytes of `values` to `out`.
    fn write_bytes(values: &[Self], out: &mut Vec<u8>);
    /// Reads one value from exactly `DTYPE.size()` little-endian bytes.
    fn read_bytes(bytes: &[u8]) -> Self;
}

macro_rules! pod_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn write_bytes(values: &[Self], out: &mut Vec<u8>) {
                out.extend_from_slice(bytemuck::cast_slice(values));
            }
            fn read_bytes(bytes: &[u8]) -> Self {
                bytemuck::pod_read_unaligned(bytes)
            }
        }
    )*};
}

pod_element!(
    f32 => F32, half::f16 => F16, half::bf16 => BF16, f64 => F64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write_bytes(values: &[Self], out: &mut Vec<u8>) {
        out.extend(values.iter().map(|&b| b as u8));
    }
    fn read_bytes(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}
