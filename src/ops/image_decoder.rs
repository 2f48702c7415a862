//! ImageDecoder (ONNX-20): an encoded image (a 1-D u8 tensor of the file's bytes) decoded on
//! the host while the graph is planned, as `[H, W, C]` u8: RGB or BGR (C = 3) or Grayscale
//! (C = 1). JPEG is read by our own decoder (`ops::jpeg`), which gives libjpeg-turbo's
//! samples bit for bit, in every build; PNG, BMP, TIFF, WebP and PNM (PBM, PGM, PPM) by the
//! `image` crate and JPEG 2000 by `hayro-jpeg2000` (`ops::jpeg2000`), with the `image-decoder`
//! feature (on by default; not in the browser build). Alpha is dropped and 16-bit samples are scaled to 8 bits, as
//! the op's output is three (or one) u8 channels. Grayscale of a color image is ITU-R 601-2
//! luma in the fixed point Pillow (the ONNX reference's decoder) uses.

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
            format!("encoded_stream is not an image this decoder reads (JPEG, PNG, BMP, TIFF, WebP, PNM, JPEG 2000): {why}"),
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
    if super::jpeg2000::is_jpeg2000(bytes) {
        let d = super::jpeg2000::decode(bytes, MAX_DECODE_BYTES)
            .map_err(|why| format!("JPEG 2000: {why}"))?;
        return Ok((d.width, d.height, d.channels, d.pixels));
    }
    // The decoder's default limits (512 MiB of allocations) refuse decompression bombs.
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    if reader.format().is_none() {
        return Err("its format is not recognized".into());
    }
    let decoded = reader.decode().map_err(|e| e.to_string())?;
    let (w, h) = (decoded.width() as usize, decoded.height() as usize);
    Ok(match decoded {
        image::DynamicImage::ImageLuma8(gray) => (w, h, 1, gray.into_raw()),
        other => (w, h, 3, other.to_rgb8().into_raw()),
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

    #[test]
    fn refusals_are_one_line() {
        let bytes = HostTensor::from_vec(vec![4], &[1u8, 2, 3, 4]).unwrap();
        let e = decode_image(&bytes, "RGB").unwrap_err().to_string();
        assert!(
            e.starts_with("ImageDecoder: encoded_stream is not an image"),
            "{e}"
        );
        let e = decode_image(&bytes, "CMYK\n").unwrap_err().to_string();
        assert!(e.contains("pixel_format is 'CMYK\\n'"), "{e}");
        assert!(!e.contains('\n'));
        let f = HostTensor::from_vec(vec![1], &[1f32]).unwrap();
        assert!(decode_image(&f, "RGB").is_err());
    }
}
