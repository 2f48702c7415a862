//! Index values (begin, end, stride, start, stop, step, axes, ...) from any integer type.

/// Converts a list of integers of any integer type to the `i64` values the plans use.
///
/// `i32::MAX` and `i32::MIN` become `i64::MAX` and `i64::MIN`: they are the "to the end"
/// sentinels of int32 index inputs (Slice-8) and keep that meaning on any dimension size.
/// `u64` values above `i64::MAX` saturate to `i64::MAX` (also "to the end").
pub trait IntoIndices {
    /// The values as `i64`.
    fn into_indices(self) -> Vec<i64>;
}

/// One integer index value converted to `i64` as [`IntoIndices`] describes.
pub trait IndexValue: Copy {
    /// The value as `i64`.
    fn to_index(self) -> i64;
}

macro_rules! lossless_index {
    ($($t:ty),*) => {$(
        impl IndexValue for $t {
            fn to_index(self) -> i64 { self as i64 }
        }
    )*};
}
lossless_index!(i8, i16, i64, u8, u16, u32);

impl IndexValue for i32 {
    fn to_index(self) -> i64 {
        match self {
            i32::MAX => i64::MAX,
            i32::MIN => i64::MIN,
            v => v as i64,
        }
    }
}

impl IndexValue for u64 {
    fn to_index(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

impl IndexValue for usize {
    fn to_index(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

impl IndexValue for isize {
    fn to_index(self) -> i64 {
        self as i64
    }
}

impl<T: IndexValue> IntoIndices for Vec<T> {
    fn into_indices(self) -> Vec<i64> {
        self.into_iter().map(T::to_index).collect()
    }
}

impl<T: IndexValue> IntoIndices for &[T] {
    fn into_indices(self) -> Vec<i64> {
        self.iter().map(|v| v.to_index()).collect()
    }
}

impl<T: IndexValue, const N: usize> IntoIndices for [T; N] {
    fn into_indices(self) -> Vec<i64> {
        self.iter().map(|v| v.to_index()).collect()
    }
}
