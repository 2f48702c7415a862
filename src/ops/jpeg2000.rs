//! JPEG 2000 (JP2 files and bare codestreams) for ImageDecoder, decoded by the `hayro-jpeg2000`
//! crate and brought to what Pillow (OpenJPEG) gives: each sample rounded to an integer of its
//! component's precision (ties to even, as OpenJPEG's `lrintf`) and clamped to its range, then
//! brought to 8 bits as Pillow brings them (`to_8_bits`). Reversible (lossless) files
//! give OpenJPEG's samples bit for bit; the irreversible 9/7 wavelet is float arithmetic, and
//! there a fraction of a percent of samples are one level away from OpenJPEG's.
//!
//! Gray and RGB images are read (an ICC profile is ignored, as Pillow ignores it; sYCC is
//! converted to RGB here as Pillow converts it, CIELab by the decoder); alpha is dropped; CMYK
//! and other channel counts are refused. Subsampled components come out as OpenJPEG's own
//! decoder gives them (Pillow misreads them): the components' grid when all are subsampled
//! alike, subsampled sYCC chroma upsampled and converted as OpenJPEG converts it. The decoder's memory is estimated from the codestream's main header
//! (image size, tiles, components, code-block size) and bounded before anything is decoded.

use super::jpeg::Decoded;
use hayro_jpeg2000::{ColorSpace, DecodeSettings, DecoderContext, Image};

const JP2_SIGNATURE: &[u8] = b"\x00\x00\x00\x0cjP  \r\n\x87\n";
/// SOC followed by SIZ: the start of every codestream.
const CODESTREAM_START: &[u8] = b"\xff\x4f\xff\x51";

pub(crate) fn is_jpeg2000(bytes: &[u8]) -> bool {
    bytes.starts_with(JP2_SIGNATURE) || bytes.starts_with(CODESTREAM_START)
}

/// Decodes `bytes`; `max_bytes` bounds what the decode allocates (estimated from the main
/// header before decoding).
pub(crate) fn decode(bytes: &[u8], max_bytes: u64) -> Result<Decoded, String> {
    let header = main_header(codestream(bytes)?)?;
    // Checked before the decoder reads the header, which allocates per tile; the output is
    // counted as RGB.
    let needed = header.decode_bytes(3);
    if needed > max_bytes {
        return Err(format!(
            "{} x {} pixels in {} tile{} of {} component{} would need about {needed} bytes \
             to decode, over the limit of {max_bytes}",
            header.width,
            header.height,
            header.tiles,
            if header.tiles == 1 { "" } else { "s" },
            header.components,
            if header.components == 1 { "" } else { "s" },
        ));
    }
    // sYCC is converted to RGB here, as Pillow converts it, from the integer samples: the
    // decoder is told the samples are sRGB, so that it leaves them as they are.
    let sycc = sycc_at(bytes);
    let relabelled;
    let bytes = match sycc {
        Some(at) => {
            relabelled = [&bytes[..at], &SRGB.to_be_bytes(), &bytes[at + 4..]].concat();
            &relabelled[..]
        }
        None => bytes,
    };
    let image = Image::new(bytes, &DecodeSettings::default()).map_err(|e| e.to_string())?;
    let (width, height) = (image.width() as usize, image.height() as usize);
    let channels = match image.color_space() {
        ColorSpace::Gray => 1,
        ColorSpace::RGB => 3,
        ColorSpace::Icc { num_channels, .. } | ColorSpace::Unknown { num_channels }
            if matches!(num_channels, 1 | 3) =>
        {
            usize::from(*num_channels)
        }
        other => {
            return Err(format!(
                "its color space ({}{} channels) is neither gray nor RGB",
                if matches!(other, ColorSpace::CMYK) {
                    "CMYK, "
                } else {
                    ""
                },
                other.num_channels(),
            ))
        }
    };
    let mut context = DecoderContext::default();
    let decoded = image.decode(&mut context).map_err(|e| e.to_string())?;
    let components = decoded.components();
    if components.len() < channels
        || components[..channels]
            .iter()
            .any(|c| c.samples().len() != width * height)
    {
        return Err("its decoded components do not cover the image".into());
    }
    let mut pixels = vec![0u8; width * height * channels];
    for (c, component) in components[..channels].iter().enumerate() {
        // JPEG 2000 allows up to 38 bits a sample; the decoder's floats hold 24 exactly.
        let bits = u32::from(component.bit_depth()).clamp(1, 32);
        let max = (1u64 << bits) - 1;
        for (out, &x) in pixels[c..]
            .iter_mut()
            .step_by(channels)
            .zip(component.samples())
        {
            // NaN (from a corrupt stream) becomes 0 through the saturating cast.
            let v = (x.round_ties_even().clamp(0.0, max as f32) as u64).min(max);
            *out = to_8_bits(v, bits);
        }
    }
    if sycc.is_some() && channels == 3 {
        if header.subsampled {
            openjpeg_sycc_to_rgb(&mut pixels);
        } else {
            ycbcr_to_rgb(&mut pixels);
        }
    }
    Ok(Decoded {
        width,
        height,
        channels,
        pixels,
    })
}

/// A sample of `bits` bits as 8, as Pillow reduces JPEG 2000 samples: shifted left from fewer
/// bits; from more, shifted right after adding half a step, and at most 255 where Pillow's sum
/// wraps to 0 (`docs/spec-decisions.md` 31).
fn to_8_bits(v: u64, bits: u32) -> u8 {
    if bits <= 8 {
        (v << (8 - bits)) as u8
    } else {
        ((v + (1 << (bits - 9))) >> (bits - 8)).min(255) as u8
    }
}

/// The codestream: the whole of `bytes`, or the contents of a JP2 file's `jp2c` box.
fn codestream(bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.starts_with(CODESTREAM_START) {
        return Ok(bytes);
    }
    find_box(bytes, b"jp2c")?.ok_or_else(|| "its JP2 file holds no codestream box".into())
}

/// The contents of the first box of type `kind` among the boxes `bytes` holds.
fn find_box<'a>(bytes: &'a [u8], kind: &[u8; 4]) -> Result<Option<&'a [u8]>, String> {
    let mut pos = 0usize;
    while bytes.len() - pos >= 8 {
        let length = u64::from(be32(bytes, pos));
        let (start, end) = match length {
            // The last box runs to the end of the file.
            0 => (pos + 8, bytes.len()),
            // A 64-bit length follows the type.
            1 if bytes.len() - pos >= 16 => {
                let long = u64::from(be32(bytes, pos + 8)) << 32 | u64::from(be32(bytes, pos + 12));
                (pos + 16, box_end(bytes, pos, long)?)
            }
            _ => (pos + 8, box_end(bytes, pos, length)?),
        };
        if start > end {
            return Err(format!("its box at byte {pos} is shorter than its header"));
        }
        if &bytes[pos + 4..pos + 8] == kind {
            return Ok(Some(&bytes[start..end]));
        }
        pos = end;
    }
    Ok(None)
}

/// The enumerated colour space sYCC in a JP2 file's colour specification box.
const SYCC: u32 = 18;
const SRGB: u32 = 16;

/// Where a JP2 file's (first) colour specification names sYCC: the offset of that number in
/// `bytes`.
fn sycc_at(bytes: &[u8]) -> Option<usize> {
    if !bytes.starts_with(JP2_SIGNATURE) {
        return None;
    }
    let header = find_box(bytes, b"jp2h").ok()??;
    let colr = find_box(header, b"colr").ok()??;
    // METH 1 (an enumerated colour space), PREC, APPROX, then the colour space.
    (colr.len() >= 7 && colr[0] == 1 && be32(colr, 3) == SYCC)
        .then(|| colr.as_ptr() as usize + 3 - bytes.as_ptr() as usize)
}

/// OpenJPEG's sYCC to RGB conversion (its decoder's, which the subsampled files Pillow
/// misreads follow): `R = Y + 1.402 Cr`, `G = Y - (0.344 Cb + 0.714 Cr)`, `B = Y + 1.772 Cb`
/// on the integer samples, chroma less 128, each product truncated toward zero, clamped.
fn openjpeg_sycc_to_rgb(pixels: &mut [u8]) {
    for p in pixels.chunks_exact_mut(3) {
        let y = i32::from(p[0]);
        let (cb, cr) = (f64::from(p[1]) - 128.0, f64::from(p[2]) - 128.0);
        let clamp = |v: i32| v.clamp(0, 255) as u8;
        p[0] = clamp(y + (1.402 * cr) as i32);
        p[1] = clamp(y - (0.344 * cb + 0.714 * cr) as i32);
        p[2] = clamp(y + (1.772 * cb) as i32);
    }
}

/// Pillow's YCbCr to RGB conversion (JPEG's, `R = Y + 1.402 (Cr - 128)`, ...) in its fixed
/// point: each term a table of `c * 64 * (v - 128)` rounded half up (toward zero below 0,
/// as C's cast truncates), shifted down 6 bits, then clamped.
fn ycbcr_to_rgb(pixels: &mut [u8]) {
    let table = |c: f64| -> [i32; 256] {
        std::array::from_fn(|v| (c * 64.0 * (v as f64 - 128.0) + 0.5) as i32)
    };
    let (r_cr, g_cb, g_cr, b_cb) = (table(1.402), table(-0.34414), table(-0.71414), table(1.772));
    for p in pixels.chunks_exact_mut(3) {
        let (y, cb, cr) = (i32::from(p[0]), usize::from(p[1]), usize::from(p[2]));
        let clamp = |v: i32| v.clamp(0, 255) as u8;
        p[0] = clamp(y + (r_cr[cr] >> 6));
        p[1] = clamp(y + ((g_cb[cb] + g_cr[cr]) >> 6));
        p[2] = clamp(y + (b_cb[cb] >> 6));
    }
}

fn box_end(bytes: &[u8], pos: usize, length: u64) -> Result<usize, String> {
    usize::try_from(length)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| format!("its box at byte {pos} runs past the end of the file"))
}

fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn be32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// What a codestream's main header declares that the decoder's memory depends on.
#[derive(Debug, PartialEq)]
struct MainHeader {
    /// The image area's size on the reference grid.
    width: u64,
    height: u64,
    tiles: u64,
    components: u64,
    /// Whether a component is subsampled (XRsiz or YRsiz above 1).
    subsampled: bool,
    /// The smallest code-block (its samples) the main header's COD and COC markers set.
    smallest_code_block: u64,
}

impl MainHeader {
    /// About what the decoder allocates, measured (peak resident memory, `hayro-jpeg2000` 0.5):
    /// each component's samples as f32 with a working copy (8 bytes), about 200 bytes per
    /// code-block, about 1 KiB per tile and component, and the `channels` bytes of output a
    /// pixel. A 6000 x 5900 RGB image in one tile of 64 x 64 code-blocks peaked at 26 bytes a
    /// pixel (estimated 27), with 4 x 4 code-blocks at 65 (estimated 66), and 1 x 1 tiles at
    /// 650 bytes a tile (estimated 3 KiB).
    fn decode_bytes(&self, channels: u64) -> u64 {
        let pixels = self.width * self.height;
        let samples = pixels.saturating_mul(self.components);
        samples
            .saturating_mul(8)
            .saturating_add(samples.saturating_mul(200) / self.smallest_code_block.max(1))
            .saturating_add(
                self.tiles
                    .saturating_mul(self.components)
                    .saturating_mul(1024),
            )
            .saturating_add(pixels.saturating_mul(channels))
    }
}

/// Reads the main header's SIZ, COD and COC markers (up to the first tile-part).
fn main_header(stream: &[u8]) -> Result<MainHeader, String> {
    const SIZ: u16 = 0xff51;
    const COD: u16 = 0xff52;
    const COC: u16 = 0xff53;
    const SOT: u16 = 0xff90;
    let truncated = || "its codestream's main header is cut short".to_string();
    if !stream.starts_with(CODESTREAM_START) {
        return Err("its codestream does not start with the SOC and SIZ markers".into());
    }
    let mut pos = 2;
    let mut header: Option<MainHeader> = None;
    let mut code_block_exponents = u32::MAX;
    loop {
        if stream.len() - pos < 2 {
            return Err(truncated());
        }
        let marker = be16(stream, pos);
        if marker == SOT {
            break;
        }
        if stream.len() - pos < 4 {
            return Err(truncated());
        }
        let length = usize::from(be16(stream, pos + 2));
        let segment = stream
            .get(pos + 4..pos + 2 + length.max(2))
            .ok_or_else(truncated)?;
        match marker {
            SIZ => {
                // Rsiz, Xsiz, Ysiz, XOsiz, YOsiz, XTsiz, YTsiz, XTOsiz, YTOsiz, Csiz.
                if segment.len() < 36 {
                    return Err(truncated());
                }
                let field = |i: usize| u64::from(be32(segment, 2 + 4 * i));
                let [x, y, x0, y0, tw, th, tx0, ty0] = std::array::from_fn(field);
                if tw == 0 || th == 0 || x <= x0 || y <= y0 || x <= tx0 || y <= ty0 {
                    return Err("its SIZ marker declares an empty image or tile".into());
                }
                let components = u64::from(be16(segment, 34));
                // Per component: Ssiz, XRsiz, YRsiz.
                let subsampled = segment[36..]
                    .chunks_exact(3)
                    .take(components as usize)
                    .any(|c| c[1] > 1 || c[2] > 1);
                header = Some(MainHeader {
                    width: x - x0,
                    height: y - y0,
                    tiles: (x - tx0).div_ceil(tw) * (y - ty0).div_ceil(th),
                    components,
                    subsampled,
                    smallest_code_block: 0,
                });
            }
            // Scod, progression, layers (2 bytes), MCT, levels, xcb, ycb, ...
            COD if segment.len() >= 8 => {
                code_block_exponents =
                    code_block_exponents.min(u32::from(segment[6]) + u32::from(segment[7]));
            }
            // Ccoc (1 byte, or 2 with over 256 components), Scoc, levels, xcb, ycb, ...
            COC => {
                let wide = header.as_ref().is_some_and(|h| h.components > 256);
                let xcb = if wide { 4 } else { 3 };
                if segment.len() >= xcb + 2 {
                    code_block_exponents = code_block_exponents
                        .min(u32::from(segment[xcb]) + u32::from(segment[xcb + 1]));
                }
            }
            _ => {}
        }
        pos += 2 + length.max(2);
    }
    let mut header = header.ok_or("its codestream has no SIZ marker")?;
    // Code-blocks are 2^(xcb + 2) x 2^(ycb + 2) samples, at least 4 x 4; the decoder refuses
    // exponents past the standard's 10 (1024 x 1024 samples at most: 4096 x 4096 overall).
    header.smallest_code_block = 1u64 << (code_block_exponents.min(10) + 4);
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A codestream's start: SOC, SIZ (width x height, one tile of tile x tile, 3 components),
    /// COD with code-block exponents 4 and 4 (64 x 64), and SOT.
    fn codestream_start(width: u32, height: u32, tile: u32) -> Vec<u8> {
        let mut s = vec![0xff, 0x4f, 0xff, 0x51, 0, 47, 0, 0];
        for v in [width, height, 0, 0, tile, tile, 0, 0] {
            s.extend(v.to_be_bytes());
        }
        s.extend([0, 3]);
        s.extend([7, 1, 1, 7, 1, 1, 7, 1, 1]);
        s.extend([0xff, 0x52, 0, 12, 0, 0, 0, 1, 1, 5, 4, 4, 0, 1]);
        s.extend([0xff, 0x90]);
        s
    }

    #[test]
    fn the_main_header_gives_what_memory_depends_on() {
        let s = codestream_start(6000, 5900, 64);
        let h = main_header(&s).unwrap();
        assert_eq!(
            h,
            MainHeader {
                width: 6000,
                height: 5900,
                tiles: 94 * 93,
                components: 3,
                subsampled: false,
                smallest_code_block: 64 * 64,
            }
        );
        // The third component subsampled 2 x 1.
        let mut chroma = s.clone();
        chroma[6 + 36 + 7] = 2;
        assert!(main_header(&chroma).unwrap().subsampled);
        // A JP2 file's codestream box, and a 64-bit box length.
        let mut jp2 = JP2_SIGNATURE.to_vec();
        jp2.extend([0, 0, 0, 1]);
        jp2.extend(b"jp2c");
        jp2.extend((16 + s.len() as u64).to_be_bytes());
        jp2.extend(&s);
        assert_eq!(codestream(&jp2).unwrap(), &s[..]);
        // Cut anywhere, the header is refused, never read past its end.
        for cut in 0..s.len() {
            assert!(main_header(&s[..cut]).is_err(), "cut at {cut}");
        }
        let mut jp2_cut = jp2.clone();
        jp2_cut.truncate(30);
        assert!(codestream(&jp2_cut).is_err());
    }

    #[test]
    fn bombs_are_refused_before_decoding() {
        // 60000 x 60000 RGB pixels in a file of 70 bytes.
        let e = decode(&codestream_start(60000, 60000, 60000), 512 << 20)
            .err()
            .unwrap();
        assert!(e.contains("over the limit of 536870912"), "{e}");
        // A small image cut into 1 x 1 tiles: 4 million tiles.
        let e = decode(&codestream_start(2000, 2000, 1), 512 << 20)
            .err()
            .unwrap();
        assert!(e.contains("in 4000000 tiles"), "{e}");
    }
}
