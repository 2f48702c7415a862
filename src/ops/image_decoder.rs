//! ImageDecoder (ONNX-20): an encoded image (a 1-D u8 tensor of the file's bytes) decoded on
//! the host while the graph is planned, as `[H, W, C]` u8: RGB or BGR (C = 3) or Grayscale
//! (C = 1). JPEG is read by our own decoder (`ops::jpeg`), which gives libjpeg-turbo's
//! samples bit for bit, in every build; PNG, BMP, TIFF and WebP by the `image` crate, PBM, PGM
//! and PPM by `ops::pnm`, and JPEG 2000 by `hayro-jpeg2000` (`ops::jpeg2000`), with the
//! `image-decoder` feature (on by default; not in the browser build). Alpha is dropped, as the
//! op's output is three (or one) u8 channels, and samples of other depths are brought to 8
//! bits as Pillow (the ONNX reference's decoder) brings them (`docs/spec-decisions.md` 31).
//! Grayscale of a color image is ITU-R 601-2 luma in the fixed point Pillow uses.

use crate::{DType, Error, HostTensor, Result};

const OP: &str = "ImageDecoder";
/// What one decode may allocate, as the `image` crate's default limit: decompression bombs
/// are refused before their pixels are.
const MAX_DECODE_BYTES: u64 = 512 << 20;

/// The decoded image of `encoded` in `pixel_format` (`RGB`, `BGR` or `Grayscale`).
pub fn decode_image(encoded: &HostTensor, pixel_format: &str) -> Result<HostTensor> {
    if encoded.dtype != DType::U8 || encoded.shape.len() != 1 {
        return Err(Error::invalid(
            OP,
            "encoded_stream",
            format!(
                "encoded_stream is {} {:?}; ImageDecoder takes the file's bytes as a 1-D u8 tensor",
                encoded.dtype, encoded.shape
            ),
        ));
    }
    if !matches!(pixel_format, "RGB" | "BGR" | "Grayscale") {
        return Err(Error::invalid(
            OP,
            "pixel_format",
            format!(
                "pixel_format is '{}'; it must be RGB, BGR or Grayscale",
                pixel_format.escape_debug()
            ),
        ));
    }
    let unreadable = |why: String| {
        Error::invalid(
            OP,
            "encoded_stream",
            format!("encoded_stream cannot be decoded as JPEG, PNG, BMP, TIFF, WebP, PNM or JPEG 2000: {why}"),
        )
    };
    // The decoded samples: gray (1 channel) or RGB (3), interleaved.
    let (w, h, channels, pixels) = if super::jpeg::is_jpeg(&encoded.data) {
        let d = super::jpeg::decode(&encoded.data, MAX_DECODE_BYTES)
            .map_err(|why| unreadable(format!("JPEG: {why}")))?;
        (d.width, d.height, d.channels, d.pixels)
    } else {
        decode_other(&encoded.data).map_err(unreadable)?
    };
    let data = match (pixel_format, channels) {
        ("Grayscale", 1) => pixels,
        ("Grayscale", _) => pixels
            .chunks_exact(3)
            .map(|p| luma(p[0], p[1], p[2]))
            .collect(),
        (_, 1) => pixels.iter().flat_map(|&v| [v, v, v]).collect(),
        (format, _) => {
            let mut rgb = pixels;
            if format == "BGR" {
                for p in rgb.chunks_exact_mut(3) {
                    p.swap(0, 2);
                }
            }
            rgb
        }
    };
    let channels = if pixel_format == "Grayscale" { 1 } else { 3 };
    HostTensor::from_bytes(DType::U8, vec![h, w, channels], data)
}

/// A PNG, BMP, TIFF, WebP, PNM or JPEG 2000 file: (width, height, channels, samples), gray
/// (1 channel) or RGB (3).
#[cfg(feature = "image-decoder")]
fn decode_other(bytes: &[u8]) -> std::result::Result<(usize, usize, usize, Vec<u8>), String> {
    let decoded = if super::jpeg2000::is_jpeg2000(bytes) {
        Some(
            super::jpeg2000::decode(bytes, MAX_DECODE_BYTES)
                .map_err(|why| format!("JPEG 2000: {why}"))?,
        )
    } else if super::pnm::is_pnm(bytes) {
        Some(super::pnm::decode(bytes, MAX_DECODE_BYTES).map_err(|why| format!("PNM: {why}"))?)
    } else {
        bmp_16_bit(bytes)
            .transpose()
            .map_err(|why| format!("BMP: {why}"))?
    };
    if let Some(d) = decoded {
        return Ok((d.width, d.height, d.channels, d.pixels));
    }
    // The decoder's default limits (512 MiB of allocations) refuse decompression bombs.
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    if reader.format().is_none() {
        return Err("its format is not recognized".into());
    }
    let format = reader.format();
    let decoded = match reader.decode() {
        Ok(decoded) => decoded,
        // Said as our own decoders say it: the file is read, its size is refused.
        Err(image::ImageError::Limits(_)) => {
            let name = format.map_or(String::new(), |f| format!("{f:?}: ").to_uppercase());
            let size = image::ImageReader::new(std::io::Cursor::new(bytes))
                .with_guessed_format()
                .ok()
                .and_then(|r| r.into_dimensions().ok())
                .map_or(String::new(), |(w, h)| format!(" its {w} x {h} pixels"));
            return Err(format!(
                "{name}decoding{size} needs more than the limit of {MAX_DECODE_BYTES} bytes"
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let (w, h) = (decoded.width() as usize, decoded.height() as usize);
    // 16-bit samples (PNG, TIFF) keep their high byte, as Pillow reduces them.
    let high_bytes = |samples: &[u16], channels: usize, keep: usize| -> Vec<u8> {
        samples
            .chunks_exact(channels)
            .flat_map(|p| p[..keep].iter().map(|v| (v >> 8) as u8))
            .collect()
    };
    use image::DynamicImage as D;
    Ok(match decoded {
        D::ImageLuma8(gray) => (w, h, 1, gray.into_raw()),
        D::ImageLuma16(gray) => (w, h, 1, high_bytes(&gray, 1, 1)),
        D::ImageLumaA16(gray) => (w, h, 1, high_bytes(&gray, 2, 1)),
        D::ImageRgb16(rgb) => (w, h, 3, high_bytes(&rgb, 3, 3)),
        D::ImageRgba16(rgba) => (w, h, 3, high_bytes(&rgba, 4, 3)),
        other => (w, h, 3, other.to_rgb8().into_raw()),
    })
}

/// A 16-bit BMP in a layout Pillow reads (5-5-5, the default, or 5-6-5 or 5-5-5 bitfields)
/// is decoded here: Pillow widens each field to 8 bits as `v * 255 / max`, truncated, where
/// the `image` crate rounds. `None` for any other file.
#[cfg(feature = "image-decoder")]
fn bmp_16_bit(bytes: &[u8]) -> Option<std::result::Result<super::jpeg::Decoded, String>> {
    bmp_16_bit_green_bits(bytes).map(|green_bits| decode_bmp_16_bit(bytes, green_bits))
}

#[cfg(feature = "image-decoder")]
fn le16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

#[cfg(feature = "image-decoder")]
fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The green field's width (5 or 6 bits) of a 16-bit BMP in a layout Pillow reads.
#[cfg(feature = "image-decoder")]
fn bmp_16_bit_green_bits(bytes: &[u8]) -> Option<u32> {
    let le16 = |at| le16(bytes, at);
    let le32 = |at| le32(bytes, at);
    // File header (14 bytes), then an info header of 40 bytes or more; bitfield masks follow
    // at byte 54, inside the longer headers or after the 40-byte one.
    if bytes.len() < 54 || &bytes[..2] != b"BM" || le16(28) != 16 {
        return None;
    }
    if !matches!(le32(14), 40 | 52 | 56 | 64 | 108 | 124) {
        return None;
    }
    const RGB_555: [u32; 3] = [0x7C00, 0x03E0, 0x001F];
    const RGB_565: [u32; 3] = [0xF800, 0x07E0, 0x001F];
    let masks = match le32(30) {
        0 => RGB_555,
        3 if bytes.len() >= 66 => [le32(54), le32(58), le32(62)],
        _ => return None,
    };
    match masks {
        RGB_555 => Some(5),
        RGB_565 => Some(6),
        _ => None,
    }
}

/// The pixels of a 16-bit BMP whose green field is `green_bits` wide.
#[cfg(feature = "image-decoder")]
fn decode_bmp_16_bit(
    bytes: &[u8],
    green_bits: u32,
) -> std::result::Result<super::jpeg::Decoded, String> {
    let le32 = |at| le32(bytes, at);
    let width = le32(18) as i32;
    let height = le32(22) as i32;
    if width <= 0 || height == 0 || height == i32::MIN {
        return Err(format!("its size is {width} x {height} pixels"));
    }
    let (width, top_down) = (width as usize, height < 0);
    let height = height.unsigned_abs() as usize;
    let needed = width as u64 * height as u64 * 3;
    if needed > MAX_DECODE_BYTES {
        return Err(format!(
            "{width} x {height} pixels would need {needed} bytes to decode, over the limit of {MAX_DECODE_BYTES}"
        ));
    }
    let stride = (width * 2).div_ceil(4) * 4;
    let start = le32(10) as usize;
    // The last row's padding may be missing, as Pillow lets it be.
    let rows = bytes
        .get(start..)
        .filter(|rows| rows.len() >= (height - 1) * stride + width * 2)
        .ok_or_else(|| format!("it is truncated: {width} x {height} pixels need more data"))?;
    let widen = |v: u32, bits: u32| (v * 255 / ((1 << bits) - 1)) as u8;
    let mut pixels = Vec::with_capacity(width * height * 3);
    for y in 0..height {
        let row = if top_down { y } else { height - 1 - y };
        for p in rows[row * stride..][..width * 2].chunks_exact(2) {
            let p = u32::from(u16::from_le_bytes([p[0], p[1]]));
            pixels.extend([
                widen(p >> (5 + green_bits) & 31, 5),
                widen(p >> 5 & ((1 << green_bits) - 1), green_bits),
                widen(p & 31, 5),
            ]);
        }
    }
    Ok(super::jpeg::Decoded {
        width,
        height,
        channels: 3,
        pixels,
    })
}

/// Without the `image` crate (the browser build) only JPEG, our own decoder, is read.
#[cfg(not(feature = "image-decoder"))]
fn decode_other(_: &[u8]) -> std::result::Result<(usize, usize, usize, Vec<u8>), String> {
    Err(
        "it is not a JPEG file, and this build reads JPEG only (the crate's `image-decoder` \
         feature adds PNG, BMP, TIFF, WebP and PNM)"
            .into(),
    )
}

/// ITU-R 601-2 luma, `(19595 R + 38470 G + 7471 B + 2^15) >> 16`, as Pillow converts to "L".
fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((19595 * u32::from(r) + 38470 * u32::from(g) + 7471 * u32::from(b) + 0x8000) >> 16) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luma_is_pillows() {
        assert_eq!(luma(255, 255, 255), 255);
        assert_eq!(luma(0, 0, 0), 0);
        // 0.299 * 200 + 0.587 * 100 + 0.114 * 50 = 124.2; Pillow gives 124, and 150 for
        // (10, 250, 3) (150.08), checked with Pillow 13.
        assert_eq!(luma(200, 100, 50), 124);
        assert_eq!(luma(10, 250, 3), 150);
    }

    /// A 16-bit BMP of `width` x 1 pixels, `missing` bytes short of the row's padding.
    #[cfg(feature = "image-decoder")]
    fn bmp_row(pixels: &[u16], missing: usize) -> HostTensor {
        let stride = (pixels.len() * 2).div_ceil(4) * 4;
        let mut f = b"BM".to_vec();
        f.extend((54 + stride as u32).to_le_bytes());
        f.extend([0, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0]);
        f.extend((pixels.len() as u32).to_le_bytes());
        f.extend(1u32.to_le_bytes());
        f.extend([1, 0, 16, 0]);
        f.extend([0; 20]);
        f.resize(54, 0);
        for p in pixels {
            f.extend(p.to_le_bytes());
        }
        f.resize(54 + stride - missing, 0);
        HostTensor::from_vec(vec![f.len()], &f).unwrap()
    }

    #[cfg(feature = "image-decoder")]
    #[test]
    fn small_16_bit_bmps_are_widened_as_pillow_widens_them() {
        // A red field of 16 of 31 is 16 * 255 / 31 = 131.6: Pillow truncates it to 131 (the
        // `image` crate rounds to 132). The file is 58 bytes, no longer than its one pixel.
        let rgb = decode_image(&bmp_row(&[16 << 10], 0), "RGB").unwrap();
        assert_eq!(rgb.data, vec![131, 0, 0]);
        // Three pixels, and one byte of the row's two of padding missing, which Pillow allows.
        let rgb = decode_image(&bmp_row(&[31, 31 << 5, 1 << 10], 1), "RGB").unwrap();
        assert_eq!(rgb.data, vec![0, 0, 255, 0, 255, 0, 8, 0, 0]);
        let e = decode_image(&bmp_row(&[31, 31 << 5, 1 << 10], 3), "RGB").unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }

    #[test]
    fn refusals_are_one_line() {
        let bytes = HostTensor::from_vec(vec![4], &[1u8, 2, 3, 4]).unwrap();
        let e = decode_image(&bytes, "RGB").unwrap_err().to_string();
        assert!(
            e.starts_with("ImageDecoder: encoded_stream cannot be decoded"),
            "{e}"
        );
        let e = decode_image(&bytes, "CMYK\n").unwrap_err().to_string();
        assert!(e.contains("pixel_format is 'CMYK\\n'"), "{e}");
        assert!(!e.contains('\n'));
        let f = HostTensor::from_vec(vec![1], &[1f32]).unwrap();
        assert!(decode_image(&f, "RGB").is_err());
    }
}
