//! `.npy` files as host tensors (C order, little endian), with npyz parsing and writing the
//! headers. bfloat16 travels as `<u2` holding the raw bits (docs/graph-format.md).

use std::io::{Read, Write};
use std::path::Path;

use crate::{DType, Error, HostTensor, Result, StringTensor};

fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 | DType::U16 => "<u2",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        // No numpy type: the codes as bytes (see `as_declared`).
        _ => "|u1",
    }
}

/// A tensor read from a `.npy` file as the dtype a graph declares for it, where numpy has no
/// such type: bf16 travels as `<u2` holding the bits, the 8-, 6- and 4-bit floats and the 4-
/// and 2-bit integers as `|u1` holding one code per byte (low bits).
pub fn as_declared(mut t: HostTensor, declared: Option<DType>) -> Result<HostTensor> {
    if let Some(d) = declared {
        let carried = (d == DType::BF16 && t.dtype == DType::U16)
            || (d.is_storage_only() && t.dtype == DType::U8);
        if carried {
            t.dtype = d;
            t.check()?;
        }
    }
    Ok(t)
}

fn from_descr(descr: &str) -> Option<DType> {
    // One-byte types may be written with any byte-order mark.
    let d = match descr.trim_start_matches(['<', '|', '=']) {
        "f4" => DType::F32,
        "f2" => DType::F16,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return None,
    };
    // '>' (big endian) is only harmless for one-byte types.
    (!descr.starts_with('>') || d.size() == 1).then_some(d)
}

fn file_error(path: &str, message: impl std::fmt::Display) -> Error {
    Error::File {
        path: path.to_string(),
        message: message.to_string(),
    }
}

/// A `.npy` file's dtype text (`<f4`, `<U5`), shape and data bytes; `what` names the source
/// in errors.
fn parse(what: &str, bytes: &[u8]) -> Result<(String, Vec<usize>, Vec<u8>)> {
    let mut reader = bytes;
    let file = npyz::NpyFile::new(&mut reader)
        .map_err(|e| file_error(what, format!("not a valid .npy file: {e}")))?;
    let descr = match file.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => {
            return Err(file_error(
                what,
                format!("unsupported .npy dtype {}", other.descr()),
            ))
        }
    };
    let fortran = file.order() == npyz::Order::Fortran;
    let shape: Vec<usize> = file
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| file_error(what, "dimension too large")))
        .collect::<Result<_>>()?;
    let mut data = Vec::new();
    file.into_inner()
        .read_to_end(&mut data)
        .map_err(|e| file_error(what, e))?;
    // numpy saves an array that is contiguous in Fortran order (a transposed one) as it lies:
    // its first axis varies fastest. Our tensors are in C order.
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        data = fortran_to_c(what, &shape, &data)?;
    }
    Ok((descr, shape, data))
}

/// `data`, elements of `shape` in Fortran order (the first axis fastest), in C order.
fn fortran_to_c(what: &str, shape: &[usize], data: &[u8]) -> Result<Vec<u8>> {
    let n =
        crate::host::checked_numel(shape).ok_or_else(|| file_error(what, "too many elements"))?;
    if n == 0 || !data.len().is_multiple_of(n) {
        // check_len reports the length that does not fit.
        return Ok(data.to_vec());
    }
    let width = data.len() / n;
    // The Fortran strides (in elements) of each axis.
    let mut strides = vec![1usize; shape.len()];
    for k in 1..shape.len() {
        strides[k] = strides[k - 1] * shape[k - 1];
    }
    let mut out = Vec::with_capacity(data.len());
    let mut at = vec![0usize; shape.len()];
    for _ in 0..n {
        let src = at.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>() * width;
        out.extend_from_slice(&data[src..src + width]);
        // The next position in C order: the last axis fastest.
        for k in (0..shape.len()).rev() {
            at[k] += 1;
            if at[k] < shape[k] {
                break;
            }
            at[k] = 0;
        }
    }
    Ok(out)
}

/// Checks that `data` holds `shape` of `width`-byte elements.
fn check_len(what: &str, descr: &str, shape: &[usize], width: usize, data: &[u8]) -> Result<()> {
    let expected = crate::host::checked_numel(shape).and_then(|n| n.checked_mul(width));
    if expected != Some(data.len()) {
        return Err(file_error(
            what,
            format!(
                "holds {} data bytes but its header announces {shape:?} of {descr}",
                data.len()
            ),
        ));
    }
    Ok(())
}

/// Parses `.npy` bytes; `what` names the source in errors.
pub fn from_bytes(what: &str, bytes: &[u8]) -> Result<HostTensor> {
    let (descr, shape, data) = parse(what, bytes)?;
    let dtype = from_descr(&descr).ok_or_else(|| {
        file_error(
            what,
            format!("unsupported .npy dtype '{descr}' (use <f4 <f8 <f2 <i1 <i2 <i4 <i8 <u1 <u2 <u4 <u8 |b1)"),
        )
    })?;
    check_len(what, &descr, &shape, dtype.size(), &data)?;
    HostTensor::from_bytes(dtype, shape, data)
}

/// Whether `.npy` bytes hold numpy strings (`<U` fixed-width unicode).
pub fn holds_strings(bytes: &[u8]) -> bool {
    let mut reader = bytes;
    npyz::NpyFile::new(&mut reader).is_ok_and(|f| match f.dtype() {
        npyz::DType::Plain(t) => t
            .to_string()
            .trim_start_matches(['<', '|', '='])
            .starts_with('U'),
        _ => false,
    })
}

/// Parses `.npy` bytes of numpy strings (`<Un`: n UTF-32 code units per string, padded with
/// NULs) as a string tensor; `what` names the source in errors.
pub fn strings_from_bytes(what: &str, bytes: &[u8]) -> Result<StringTensor> {
    let (descr, shape, data) = parse(what, bytes)?;
    let width = descr
        .strip_prefix("<U")
        .or_else(|| descr.strip_prefix("|U"))
        .or_else(|| descr.strip_prefix("=U"))
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| {
            file_error(
                what,
                format!("dtype '{descr}' is not numpy's little-endian strings (<U)"),
            )
        })?;
    check_len(what, &descr, &shape, width * 4, &data)?;
    let numel = crate::host::checked_numel(&shape).unwrap_or(0);
    if width == 0 {
        // Strings of width 0 are all empty (numpy writes `<U1` for those, though).
        return StringTensor::new(shape, vec![String::new(); numel]);
    }
    let mut values = Vec::with_capacity(numel);
    for (i, item) in data.chunks(width * 4).enumerate() {
        let mut s = String::new();
        for unit in item.chunks_exact(4) {
            let code = u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]);
            if code == 0 {
                break;
            }
            s.push(char::from_u32(code).ok_or_else(|| {
                file_error(
                    what,
                    format!("string {i} holds {code:#x}, which is not a character"),
                )
            })?);
        }
        values.push(s);
    }
    StringTensor::new(shape, values)
}

/// The `.npy` bytes of string tensor `t`, as numpy writes `np.array([...], dtype=str)`.
pub fn strings_to_bytes(t: &StringTensor) -> Vec<u8> {
    let width = t
        .values
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(1);
    let mut data = Vec::with_capacity(t.numel() * width * 4);
    for s in &t.values {
        let mut n = 0;
        for c in s.chars() {
            data.extend_from_slice(&(c as u32).to_le_bytes());
            n += 1;
        }
        data.resize(data.len() + (width - n) * 4, 0);
    }
    with_header(&format!("<U{width}"), &t.shape, data)
}

/// Reads a numeric or bool `.npy` file.
pub fn read(path: &Path) -> Result<HostTensor> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| file_error(&shown, e))?;
    from_bytes(&shown, &bytes)
}

/// The `.npy` bytes of `t`. The header is format version 1.0 when it fits its 16-bit length
/// field, else version 2.0 (32-bit length, which numpy reads likewise): a tensor of very high
/// rank has a long shape text.
pub fn to_bytes(t: &HostTensor) -> Vec<u8> {
    with_header(descr(t.dtype), &t.shape, t.data.clone())
}

/// `data` after the header of an array of `descr` and `shape`.
fn with_header(descr: &str, shape: &[usize], data: Vec<u8>) -> Vec<u8> {
    let shape = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic, version, length field, the dict, then spaces and a newline up to a multiple of 64.
    let padded = |field: usize| (6 + 2 + field + dict.len() + 1).div_ceil(64) * 64 - (8 + field);
    let (version, field) = if padded(2) <= usize::from(u16::MAX) {
        (1u8, 2)
    } else {
        (2u8, 4)
    };
    let header_len = padded(field);
    let total = 8 + field + header_len;
    let mut out = Vec::with_capacity(total + data.len());
    out.extend_from_slice(b"\x93NUMPY");
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(&data);
    out
}

/// Reads a `.npy` file of numbers or of strings.
pub fn read_value(path: &Path) -> Result<crate::graph::Value> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| file_error(&shown, e))?;
    if holds_strings(&bytes) {
        return strings_from_bytes(&shown, &bytes).map(crate::graph::Value::Strings);
    }
    from_bytes(&shown, &bytes).map(crate::graph::Value::Tensor)
}

/// Writes a string tensor as a `.npy` file of unicode strings (`<U`).
pub fn write_strings(path: &Path, t: &StringTensor) -> Result<()> {
    let shown = path.display().to_string();
    let mut f = std::fs::File::create(path).map_err(|e| file_error(&shown, e))?;
    f.write_all(&strings_to_bytes(t))
        .map_err(|e| file_error(&shown, e))
}

/// Writes `t` as a `.npy` file.
pub fn write(path: &Path, t: &HostTensor) -> Result<()> {
    let shown = path.display().to_string();
    let mut f = std::fs::File::create(path).map_err(|e| file_error(&shown, e))?;
    f.write_all(&to_bytes(t)).map_err(|e| file_error(&shown, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 1.0 `.npy` file of `descr`, Fortran order, `shape` (a Python tuple's text)
    /// and `data`.
    fn fortran_file(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': True, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        bytes
    }

    #[test]
    fn fortran_order_files_read_in_c_order() {
        // numpy.save of np.arange(24, dtype='<i2').reshape(2, 3, 4).T: a [4, 3, 2] array
        // lying as the [2, 3, 4] one does, its first axis fastest.
        let data: Vec<u8> = (0..24i16).flat_map(|v| v.to_le_bytes()).collect();
        let t = from_bytes("t.npy", &fortran_file("<i2", "(4, 3, 2)", &data)).unwrap();
        assert_eq!(t.shape, vec![4, 3, 2]);
        let want: Vec<i16> = (0..4)
            .flat_map(|i| {
                (0..3).flat_map(move |j| (0..2).map(move |k| (k * 12 + j * 4 + i) as i16))
            })
            .collect();
        assert_eq!(t.to_vec::<i16>().unwrap(), want);
        // Strings: [["ab", "c"], ["d", "ef"]] in Fortran order lies as ab, d, c, ef.
        let cells: Vec<u8> = ["ab", "d", "c", "ef"]
            .iter()
            .flat_map(|w| {
                let mut cell: Vec<u32> = w.chars().map(|c| c as u32).collect();
                cell.resize(2, 0);
                cell.into_iter().flat_map(u32::to_le_bytes)
            })
            .collect();
        let s = strings_from_bytes("s.npy", &fortran_file("<U2", "(2, 2)", &cells)).unwrap();
        assert_eq!(s.values, vec!["ab", "c", "d", "ef"]);
        // One axis longer than 1 lies alike in both orders.
        let t = from_bytes("v.npy", &fortran_file("<i2", "(1, 3)", &data[..6])).unwrap();
        assert_eq!(t.to_vec::<i16>().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn round_trip_every_dtype_and_rank_0() {
        for dtype in DType::ALL {
            for shape in [vec![], vec![3], vec![2, 0, 3], vec![2, 3]] {
                let n: usize = shape.iter().product();
                let data: Vec<u8> = (0..n * dtype.size())
                    .map(|i| {
                        if dtype == DType::Bool {
                            (i % 2) as u8
                        } else if dtype.packed_bits().is_some() {
                            (i % 4) as u8
                        } else {
                            i as u8
                        }
                    })
                    .collect();
                let t = HostTensor::from_bytes(dtype, shape.clone(), data).unwrap();
                let back = from_bytes("mem", &to_bytes(&t)).unwrap();
                assert_eq!(as_declared(back.clone(), Some(dtype)).unwrap(), t);
                let want = if dtype == DType::BF16 {
                    DType::U16
                } else if dtype.is_storage_only() {
                    DType::U8
                } else {
                    dtype
                };
                assert_eq!(
                    (back.dtype, &back.shape, &back.data),
                    (want, &t.shape, &t.data)
                );
            }
        }
    }

    #[test]
    fn headers_of_any_length() {
        // Rank 22 000: the shape text alone is longer than a version-1 header can hold.
        for rank in [0usize, 1, 3, 9000, 22_000] {
            let t = HostTensor::from_bytes(DType::U8, vec![1; rank], vec![7]).unwrap();
            let bytes = to_bytes(&t);
            assert_eq!(&bytes[..6], b"\x93NUMPY");
            let version = if rank < 20_000 { 1 } else { 2 };
            assert_eq!(bytes[6], version, "rank {rank}");
            let field = if version == 1 { 2 } else { 4 };
            let header_end = bytes.len() - 1;
            assert_eq!(header_end % 64, 0, "rank {rank}");
            assert_eq!(bytes[header_end - 1], b'\n');
            assert_eq!(header_end - 8 - field, {
                let mut n = [0u8; 4];
                n[..field].copy_from_slice(&bytes[8..8 + field]);
                u32::from_le_bytes(n) as usize
            });
            let back = from_bytes("mem", &bytes).unwrap();
            assert_eq!((back.shape.len(), back.data), (rank, vec![7]));
        }
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(from_bytes("x", b"not npy").is_err());
        let t = HostTensor::from_vec(vec![4], &[1i32, 2, 3, 4]).unwrap();
        let bytes = to_bytes(&t);
        let e = from_bytes("x.npy", &bytes[..bytes.len() - 2]).unwrap_err();
        assert!(
            e.to_string().starts_with("x.npy: holds 14 data bytes"),
            "{e}"
        );
    }

    #[test]
    fn strings_are_written_as_numpy_writes_them_and_read_back() {
        // np.save(f, np.array([["héllo", "", "a b"], ["€", "x", "yz"]])), byte for byte.
        let numpy: &[u8] = b"\x93NUMPY\x01\x00v\x00{'descr': '<U5', 'fortran_order': False, 'shape': (2, 3), }                                                          \x0ah\x00\x00\x00\xe9\x00\x00\x00l\x00\x00\x00l\x00\x00\x00o\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00a\x00\x00\x00 \x00\x00\x00b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xac \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00x\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00y\x00\x00\x00z\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
        let t = StringTensor::new(
            vec![2, 3],
            ["héllo", "", "a b", "€", "x", "yz"]
                .map(String::from)
                .to_vec(),
        )
        .unwrap();
        assert!(holds_strings(numpy));
        assert_eq!(strings_to_bytes(&t), numpy);
        assert_eq!(strings_from_bytes("mem", numpy).unwrap(), t);
        // Empty tensors and empty strings only.
        for t in [
            StringTensor::new(vec![0, 2], Vec::new()).unwrap(),
            StringTensor::new(vec![], vec![String::new()]).unwrap(),
        ] {
            assert_eq!(strings_from_bytes("mem", &strings_to_bytes(&t)).unwrap(), t);
        }
        // Numbers are not strings, and a truncated file is refused.
        let n = HostTensor::from_vec(vec![2], &[1i32, 2]).unwrap();
        assert!(!holds_strings(&to_bytes(&n)));
        assert!(strings_from_bytes("mem", &numpy[..numpy.len() - 4]).is_err());
        // Width 0: empty strings.
        let zero = with_header("<U0", &[2], Vec::new());
        assert_eq!(strings_from_bytes("mem", &zero).unwrap().values, ["", ""]);
    }
}
