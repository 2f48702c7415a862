//! PBM, PGM and PPM (P1 to P6) for ImageDecoder, read here as Pillow (the ONNX reference's
//! decoder) reads them: samples of a maxval other than 255 become `round(v / maxval * 255)`,
//! computed in f64 and rounded half to even (Python's `round`), at most 255; bitmaps give 0
//! for a set (black) bit and 255 for a clear one. The header's tokens are read as Pillow reads
//! them: separated by whitespace, at most 10 bytes each, a `#` skipping to the end of its
//! line. PAM (P7), which Pillow does not read, is left to the `image` crate.

use super::jpeg::Decoded;

const WHITESPACE: &[u8] = b" \t\n\x0b\x0c\r";
/// Pillow's limit on a token, in the header and in plain (ASCII) samples.
const MAX_TOKEN: usize = 10;

pub(crate) fn is_pnm(bytes: &[u8]) -> bool {
    bytes.len() >= 3
        && bytes[0] == b'P'
        && (b'1'..=b'6').contains(&bytes[1])
        && WHITESPACE.contains(&bytes[2])
}

/// Decodes `bytes` (which `is_pnm` accepted); `max_bytes` bounds the decoded samples.
pub(crate) fn decode(bytes: &[u8], max_bytes: u64) -> Result<Decoded, String> {
    let kind = bytes[1];
    let mut header = Header { bytes, at: 3 };
    let width = header.number("width")?;
    let height = header.number("height")?;
    let bitmap = matches!(kind, b'1' | b'4');
    let maxval = if bitmap { 1 } else { header.number("maxval")? };
    if width == 0 || height == 0 {
        return Err(format!("its size is {width} x {height} pixels"));
    }
    if !(1..=65535).contains(&maxval) {
        return Err(format!("its maxval is {maxval}; it must be 1 to 65535"));
    }
    let channels = if matches!(kind, b'3' | b'6') { 3 } else { 1 };
    let samples = u64::from(width) * u64::from(height) * channels as u64;
    if samples > max_bytes {
        return Err(format!(
            "{width} x {height} pixels would need {samples} bytes to decode, over the limit of \
             {max_bytes}"
        ));
    }
    let data = &bytes[header.at..];
    let (width, height, samples) = (width as usize, height as usize, samples as usize);
    let truncated = || format!("it is truncated: {width} x {height} pixels need more data");
    let pixels = match kind {
        b'4' => {
            let row = width.div_ceil(8);
            if data.len() / row < height {
                return Err(truncated());
            }
            data.chunks_exact(row)
                .take(height)
                .flat_map(|r| (0..width).map(move |x| bit_to_gray(r[x / 8] >> (7 - x % 8))))
                .collect()
        }
        b'5' | b'6' => {
            let wide = maxval > 255;
            let size = if wide { 2 } else { 1 };
            if data.len() / size < samples {
                return Err(truncated());
            }
            if maxval == 255 {
                data[..samples].to_vec()
            } else {
                let table = scale_table(maxval, wide);
                if wide {
                    data.chunks_exact(2)
                        .take(samples)
                        .map(|s| table[usize::from(u16::from_be_bytes([s[0], s[1]]))])
                        .collect()
                } else {
                    data[..samples]
                        .iter()
                        .map(|&s| table[usize::from(s)])
                        .collect()
                }
            }
        }
        // Plain samples: every sample takes at least one byte, so the file's size bounds
        // what is allocated.
        _ if data.len() < samples => return Err(truncated()),
        b'1' => {
            let mut pixels = Vec::with_capacity(samples);
            // Every byte is checked, also past the last pixel, as Pillow checks them.
            for &c in uncommented(data).iter().filter(|c| !WHITESPACE.contains(c)) {
                match c {
                    b'0' | b'1' if pixels.len() < samples => pixels.push(bit_to_gray(c - b'0')),
                    b'0' | b'1' => {}
                    _ => return Err(format!("its bitmap holds '{}'", c.escape_ascii())),
                }
            }
            if pixels.len() < samples {
                return Err(truncated());
            }
            pixels
        }
        _ => {
            let table = scale_table(maxval, true);
            let text = uncommented(data);
            let mut pixels = Vec::with_capacity(samples);
            for token in text
                .split(|c| WHITESPACE.contains(c))
                .filter(|t| !t.is_empty())
                .take(samples)
            {
                let v = sample(token)?;
                if v > maxval {
                    return Err(format!("a sample is {v}, over its maxval {maxval}"));
                }
                pixels.push(table[v as usize]);
            }
            if pixels.len() < samples {
                return Err(truncated());
            }
            pixels
        }
    };
    Ok(Decoded {
        width,
        height,
        channels,
        pixels,
    })
}

/// A bitmap's bit: 1 is black.
fn bit_to_gray(bit: u8) -> u8 {
    if bit & 1 == 1 {
        0
    } else {
        255
    }
}

/// Every sample value of 8 (or, `wide`, 16) bits as Pillow scales it to 8 bits for `maxval`.
/// Raw samples past the maxval, which Pillow does not refuse, come out as 255.
fn scale_table(maxval: u32, wide: bool) -> Vec<u8> {
    let count = if wide { 1 << 16 } else { 1 << 8 };
    (0..count)
        .map(|v: u32| {
            (f64::from(v) / f64::from(maxval) * 255.0)
                .round_ties_even()
                .min(255.0) as u8
        })
        .collect()
}

/// `data` without its comments: from a `#` through the next CR or LF (the text on both sides
/// joins, as in Pillow).
fn uncommented(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut in_comment = false;
    for &c in data {
        if in_comment {
            in_comment = !matches!(c, b'\r' | b'\n');
        } else if c == b'#' {
            in_comment = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// A plain sample: decimal digits, at most `MAX_TOKEN` of them.
fn sample(token: &[u8]) -> Result<u32, String> {
    if token.len() > MAX_TOKEN || !token.iter().all(u8::is_ascii_digit) {
        return Err(format!(
            "a sample is '{}', not a number of at most {MAX_TOKEN} digits",
            token.escape_ascii()
        ));
    }
    Ok(token
        .iter()
        .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'))
        .min(u64::from(u32::MAX)) as u32)
}

/// The header after the magic number: whitespace-separated tokens, a `#` skipping the rest of
/// its line (also inside a token, which then goes on after it), each token ending at one
/// whitespace byte, after which the raster starts.
struct Header<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Header<'_> {
    fn number(&mut self, what: &str) -> Result<u32, String> {
        let mut token = Vec::new();
        while token.len() <= MAX_TOKEN {
            let Some(&c) = self.bytes.get(self.at) else {
                break;
            };
            self.at += 1;
            if WHITESPACE.contains(&c) {
                if token.is_empty() {
                    continue;
                }
                break;
            } else if c == b'#' {
                while let Some(&c) = self.bytes.get(self.at) {
                    self.at += 1;
                    if matches!(c, b'\r' | b'\n') {
                        break;
                    }
                }
                continue;
            }
            token.push(c);
        }
        if token.is_empty() {
            return Err(format!("its header ends before its {what}"));
        }
        sample(&token).map_err(|_| {
            format!(
                "its {what} is '{}', not a number of at most {MAX_TOKEN} digits",
                token.escape_ascii()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(bytes: &[u8]) -> Result<(usize, usize, usize, Vec<u8>), String> {
        assert!(is_pnm(bytes));
        decode(bytes, 1 << 20).map(|d| (d.width, d.height, d.channels, d.pixels))
    }

    #[test]
    fn samples_are_scaled_as_pillow_scales_them() {
        // 30 / 100 * 255 and 70 / 100 * 255 are 76.5 and 178.5: Pillow rounds them to even.
        let mut pgm = b"P5\n4 1\n100\n".to_vec();
        pgm.extend([30, 70, 100, 200]);
        assert_eq!(decoded(&pgm).unwrap(), (4, 1, 1, vec![76, 178, 255, 255]));
        let ppm = b"P3 # a comment\n1 1 # and another\n1000\n300 700 1000";
        assert_eq!(decoded(ppm).unwrap(), (1, 1, 3, vec![76, 178, 255]));
        let mut wide = b"P6\n1 1\n65535\n".to_vec();
        wide.extend([0x01, 0xFF, 0x80, 0x00, 0xFF, 0xFF]);
        assert_eq!(decoded(&wide).unwrap().3, vec![2, 128, 255]);
        // A comment inside a token: the token goes on after it, as in Pillow (width 10).
        let (w, h, c, _) = decoded(b"P2\n1#x\n0 1\n255\n0 1 2 3 4 5 6 7 8 9").unwrap();
        assert_eq!((w, h, c), (10, 1, 1));
    }

    #[test]
    fn bitmaps_are_black_where_bits_are_set() {
        // 10 pixels a row: two bytes, the second padded.
        let pbm = [b"P4\n10 1\n".as_slice(), &[0b1010_0000, 0b0100_0000]].concat();
        let want = vec![0, 255, 0, 255, 255, 255, 255, 255, 255, 0];
        assert_eq!(decoded(&pbm).unwrap().3, want);
        // Plain bitmaps need no space between pixels.
        assert_eq!(decoded(b"P1\n3 1\n1 01").unwrap().3, vec![0, 255, 0]);
        assert!(decoded(b"P1\n3 1\n1 01 0 x")
            .unwrap_err()
            .contains("holds 'x'"));
    }

    #[test]
    fn damaged_files_are_refused() {
        let cases: [(&[u8], &str); 7] = [
            (b"P5\n4 1\n255\nabc", "truncated"),
            (b"P6\n2 1\n256\n\0\0\0\0\0\0\0", "truncated"),
            (b"P2\n2 1\n10\n3 11", "a sample is 11, over its maxval 10"),
            (b"P2\n2 1\n10\n3 -1", "a sample is '-1'"),
            (b"P5\n2 1\n0\n\0\0", "its maxval is 0"),
            (b"P5\n0 1\n255\n", "its size is 0 x 1"),
            (b"P5\n99999999999 1\n255\n", "its width is '99999999999"),
        ];
        for (bytes, why) in cases {
            let e = decoded(bytes).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let e = decode(b"P5\n70000 70000\n255\n", 1 << 20)
            .map(|_| ())
            .unwrap_err();
        assert!(e.contains("over the limit"), "{e}");
    }
}
