//! ImageDecoder: lossless files made here from known pixels (PNG with alpha and 16-bit
//! samples, BMP, PNM, TIFF) decode to those pixels, in RGB, BGR and Grayscale (Pillow's luma);
//! JPEG files of every kind the decoder reads give libjpeg-turbo's samples bit for bit (the
//! fixtures in tests/data/jpeg, written by scripts/jpeg_fixtures.py); damaged files and
//! decompression bombs are refused in one line. The ONNX node tests hold PNG, BMP, TIFF, WebP,
//! PNM and JPEG to Pillow's decodes.

#![cfg(feature = "image-decoder")]

mod common;
use common::*;
use std::io::Cursor;
use wgpu_ops::graph::Attr;
use wgpu_ops::{DType, Graph, HostTensor, Node, Session};

fn decode(bytes: &[u8], format: &str) -> wgpu_ops::Result<HostTensor> {
    let g = Graph::new()
        .input("encoded", DType::U8, &[None])
        .node(
            Node::new("ImageDecoder", "d")
                .inputs(["encoded"])
                .outputs(["image"])
                .attr("pixel_format", Attr::String(format.into())),
        )
        .output("image");
    let encoded = HostTensor::from_vec(vec![bytes.len()], bytes).unwrap();
    Ok(Session::new(ctx(), g)?
        .run_blocking(vec![("encoded".into(), encoded)])?
        .remove(0)
        .1)
}

/// A 5 x 3 picture (width 5), each pixel's channels from its position.
fn pixels() -> Vec<[u8; 3]> {
    (0..15u32)
        .map(|i| {
            [
                (i * 17) as u8,
                (255 - i * 13) as u8,
                (i * i * 7 % 256) as u8,
            ]
        })
        .collect()
}

fn encoded(format: image::ImageFormat, img: image::DynamicImage) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn rgb_image() -> image::RgbImage {
    let px = pixels();
    image::RgbImage::from_fn(5, 3, |x, y| image::Rgb(px[(y * 5 + x) as usize]))
}

#[test]
fn lossless_files_decode_to_their_pixels_in_each_format() {
    let want_rgb: Vec<u8> = pixels().concat();
    let want_bgr: Vec<u8> = pixels().iter().flat_map(|p| [p[2], p[1], p[0]]).collect();
    let want_gray: Vec<u8> = pixels()
        .iter()
        .map(|p| {
            let (r, g, b) = (u32::from(p[0]), u32::from(p[1]), u32::from(p[2]));
            ((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16) as u8
        })
        .collect();
    let rgba = image::RgbaImage::from_fn(5, 3, |x, y| {
        let p = pixels()[(y * 5 + x) as usize];
        image::Rgba([p[0], p[1], p[2], (x * 60) as u8])
    });
    let deep = image::DynamicImage::ImageRgb16(image::ImageBuffer::from_fn(5, 3, |x, y| {
        let p = pixels()[(y * 5 + x) as usize];
        image::Rgb(p.map(|v| u16::from(v) * 257))
    }));
    let files = [
        ("png", encoded(image::ImageFormat::Png, rgb_image().into())),
        (
            "png with alpha",
            encoded(image::ImageFormat::Png, rgba.into()),
        ),
        ("16-bit png", encoded(image::ImageFormat::Png, deep)),
        ("bmp", encoded(image::ImageFormat::Bmp, rgb_image().into())),
        ("ppm", encoded(image::ImageFormat::Pnm, rgb_image().into())),
        (
            "tiff",
            encoded(image::ImageFormat::Tiff, rgb_image().into()),
        ),
    ];
    for (what, bytes) in files {
        for (format, want, c) in [
            ("RGB", &want_rgb, 3),
            ("BGR", &want_bgr, 3),
            ("Grayscale", &want_gray, 1),
        ] {
            let got = decode(&bytes, format).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                (got.dtype, got.shape.clone()),
                (DType::U8, vec![3, 5, c]),
                "{what}"
            );
            assert_eq!(&got.data, want, "{what} as {format}");
        }
    }
    // A grayscale file is its own luma.
    let gray = image::GrayImage::from_fn(5, 3, |x, y| image::Luma([(x * 50 + y) as u8]));
    let got = decode(
        &encoded(image::ImageFormat::Png, gray.clone().into()),
        "Grayscale",
    )
    .unwrap();
    assert_eq!(got.data, gray.into_raw());
}

#[test]
fn damaged_files_and_bombs_are_refused_in_one_line() {
    let png = encoded(image::ImageFormat::Png, rgb_image().into());
    // A PNG header claiming 100 000 x 100 000 pixels (30 GB of RGB): the decoder's
    // allocation limit refuses it before any pixel is read.
    let mut bomb = png.clone();
    bomb[16..24].copy_from_slice(&[0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0]);
    let crc = crc32(&bomb[12..29]);
    bomb[29..33].copy_from_slice(&crc.to_be_bytes());
    let cases: [(&[u8], &str); 4] = [
        (
            &png[..png.len() / 2],
            "ImageDecoder: encoded_stream cannot be decoded",
        ),
        (b"hello, world", "its format is not recognized"),
        (
            &bomb,
            "PNG: decoding its 100000 x 100000 pixels needs more than the limit of",
        ),
        (&[], "ImageDecoder: encoded_stream cannot be decoded"),
    ];
    for (bytes, want) in cases {
        let e = decode(bytes, "RGB").unwrap_err().to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{e}");
    }
    let e = decode(&png, "YUV").unwrap_err().to_string();
    assert!(
        e.contains("pixel_format is 'YUV'; it must be RGB, BGR or Grayscale"),
        "{e}"
    );
}

/// A JPEG file and libjpeg-turbo's RGB samples of it.
struct Fixture {
    name: String,
    w: usize,
    h: usize,
    file: Vec<u8>,
    rgb: Vec<u8>,
}

/// The fixtures listed in `tests/data/<folder>/cases.txt`: name, width, height and the file's
/// extension (`jpg` where the line has none).
fn fixtures(folder: &str) -> Vec<Fixture> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(folder);
    let manifest = std::fs::read_to_string(dir.join("cases.txt")).unwrap();
    manifest
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ext = f.get(3).unwrap_or(&"jpg");
            let file = std::fs::read(dir.join(format!("{}.{ext}", f[0]))).unwrap();
            let rgb = std::fs::read(dir.join(format!("{}.rgb", f[0]))).unwrap();
            Fixture {
                name: f[0].to_string(),
                w: f[1].parse().unwrap(),
                h: f[2].parse().unwrap(),
                file,
                rgb,
            }
        })
        .collect()
}

fn jpeg_fixtures() -> Vec<Fixture> {
    fixtures("jpeg")
}

#[test]
fn jpeg_gives_libjpeg_turbos_samples_bit_for_bit() {
    let fixtures = jpeg_fixtures();
    assert_eq!(fixtures.len(), 24, "tests/data/jpeg/cases.txt");
    for fixture in &fixtures {
        decodes_to_its_samples(fixture, "libjpeg-turbo", 0.0);
    }
}

/// A fixture decodes to its expected RGB samples: bit for bit, or with at most `off_by_one`
/// of them (a fraction) one away and none further. BGR is the RGB decode reversed; Grayscale
/// is the luma plane of a gray file and Pillow's luma of a color one.
fn decodes_to_its_samples(fixture: &Fixture, reference: &str, off_by_one: f64) {
    let Fixture {
        name,
        w,
        h,
        file,
        rgb: want,
    } = fixture;
    assert_eq!(want.len(), w * h * 3, "{name}");
    let got = decode(file, "RGB").unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got.shape, vec![*h, *w, 3], "{name}");
    let differ = got.data.iter().zip(want).filter(|(a, b)| a != b).count();
    let furthest = got.data.iter().zip(want).map(|(a, b)| a.abs_diff(*b)).max();
    assert!(
        differ as f64 <= off_by_one * want.len() as f64 && furthest <= Some(1),
        "{name}: {differ} of {} samples differ from {reference}'s, by up to {furthest:?}",
        want.len()
    );
    let bgr = decode(file, "BGR").unwrap();
    let want_bgr: Vec<u8> = got
        .data
        .chunks_exact(3)
        .flat_map(|p| [p[2], p[1], p[0]])
        .collect();
    assert_eq!(bgr.data, want_bgr, "{name} as BGR");
    let gray = decode(file, "Grayscale").unwrap();
    let want_gray: Vec<u8> = got
        .data
        .chunks_exact(3)
        .map(|p| {
            let (r, g, b) = (u32::from(p[0]), u32::from(p[1]), u32::from(p[2]));
            ((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16) as u8
        })
        .collect();
    assert_eq!(gray.shape, vec![*h, *w, 1], "{name}");
    assert_eq!(gray.data, want_gray, "{name} as Grayscale");
}

/// JPEG 2000 files of every kind in tests/data/jpeg2000 (scripts/jpeg2000_fixtures.py: both
/// wavelets, tiles, layers, progression orders, alpha, bare codestreams, 16-bit gray) give
/// OpenJPEG's samples (Pillow's decode). The reversible (lossless) ones match bit for bit. The
/// irreversible 9/7 wavelet is float arithmetic whose rounding differs between decoders: there
/// 0.02% to 0.35% of samples are one away from OpenJPEG's (measured per file), none further.
/// sYCC is converted to RGB as Pillow converts it, bit for bit. Subsampled components, which
/// Pillow misreads, give opj_decompress's samples bit for bit: every component subsampled
/// alike gives the components' grid; subsampled sYCC chroma is upsampled and converted as
/// OpenJPEG converts it.
#[test]
fn jpeg2000_gives_openjpegs_samples() {
    let fixtures = fixtures("jpeg2000");
    assert_eq!(fixtures.len(), 32, "tests/data/jpeg2000/cases.txt");
    for fixture in &fixtures {
        // Lossy files: the 9/7 wavelet in float arithmetic, rounded apart from OpenJPEG's on a
        // fraction of a percent of samples.
        let off_by_one = if fixture.name.contains("lossy") {
            0.005
        } else {
            0.0
        };
        decodes_to_its_samples(fixture, "OpenJPEG", off_by_one);
    }
}

/// Files whose samples are not 8 bits (tests/data/image_depths, scripts/image_depth_fixtures.py:
/// 16-bit PNG and TIFF, 16-bit BMP, PGM and PPM of maxvals from 1 to 65535, raw and plain,
/// bitmaps, JPEG 2000 of 4 to 16 bits) give Pillow's samples bit for bit: 16-bit PNG and TIFF
/// samples keep their high byte, 16-bit BMP fields widen as `v * 255 / max` truncated, PNM
/// samples scale as `round(v / maxval * 255)` (ties to even), JPEG 2000 samples shift. Where
/// Pillow gives no 8-bit image (gray of more than 8 bits) or wraps (JPEG 2000 samples within
/// half a step of the top), `docs/spec-decisions.md` 31.
#[test]
fn samples_of_every_depth_come_to_8_bits_as_pillow_brings_them() {
    let fixtures = fixtures("image_depths");
    assert_eq!(fixtures.len(), 36, "tests/data/image_depths/cases.txt");
    for fixture in &fixtures {
        decodes_to_its_samples(fixture, "Pillow", 0.0);
    }
}

#[test]
fn damaged_and_unsupported_jpegs_are_refused_in_one_line() {
    let fixtures = jpeg_fixtures();
    let file = |name: &str| &fixtures.iter().find(|f| f.name == name).unwrap().file;
    let base = file("420_37x23_q95");
    let progressive = file("420_progressive_100x75_q95");
    let sof = base.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    let with = |at: usize, bytes: &[u8]| {
        let mut f = base.clone();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    };
    // SOF: marker, length (2), precision, height (2), width (2), components.
    let bomb = with(sof + 5, &[0xFF, 0xFF, 0xFF, 0xFF]);
    let arithmetic = with(sof + 1, &[0xC9]);
    let twelve_bit = with(sof + 4, &[12]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (base[..base.len() / 2].to_vec(), "truncated"),
        (progressive[..progressive.len() - 40].to_vec(), "truncated"),
        (bomb, "over the limit"),
        (arithmetic, "arithmetic-coded JPEG is not supported"),
        (twelve_bit, "12-bit samples are not supported"),
        (base[..sof].to_vec(), "truncated"),
    ];
    refused_in_one_line(cases);
}

#[test]
fn damaged_and_unsupported_jpeg2000_files_are_refused_in_one_line() {
    let fixtures = fixtures("jpeg2000");
    let file = |name: &str| &fixtures.iter().find(|f| f.name == name).unwrap().file;
    let rgba = file("rgba_lossless_19x13");
    let codestream = file("rgb_lossless_codestream_40x17");
    // The colour box's enumerated space (at byte 73) set to CMYK, and the channel definition
    // box that marks the fourth channel as alpha renamed out of the way: four CMYK channels.
    let mut cmyk = rgba.clone();
    assert_eq!(&cmyk[66..70], b"colr");
    cmyk[73..77].copy_from_slice(&12u32.to_be_bytes());
    assert_eq!(&cmyk[81..85], b"cdef");
    cmyk[81..85].copy_from_slice(b"free");
    // SIZ: Xsiz, Ysiz at bytes 8 and 12 of the codestream, tile size at 24 and 28.
    let mut bomb = codestream.clone();
    bomb[8..16].copy_from_slice(&[0, 0, 0xea, 0x60, 0, 0, 0xea, 0x60]);
    bomb[24..32].copy_from_slice(&[0, 0, 0xea, 0x60, 0, 0, 0xea, 0x60]);
    let mut tiny_tiles = codestream.clone();
    tiny_tiles[8..16].copy_from_slice(&[0, 0, 0x0f, 0xa0, 0, 0, 0x0f, 0xa0]);
    tiny_tiles[24..32].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            cmyk,
            "JPEG 2000: its color space (CMYK, 4 channels) is neither gray nor RGB",
        ),
        (
            bomb,
            "60000 x 60000 pixels in 1 tile of 3 components would need about",
        ),
        (
            tiny_tiles,
            "4000 x 4000 pixels in 16000000 tiles of 3 components",
        ),
        (
            rgba[..100].to_vec(),
            "JPEG 2000: its box at byte 32 runs past the end of the file",
        ),
        (
            codestream[..60].to_vec(),
            "JPEG 2000: its codestream's main header is cut short",
        ),
        (rgba[..rgba.len() - 200].to_vec(), "JPEG 2000: "),
    ];
    refused_in_one_line(cases);
}

/// Each file is refused in one line that holds its reason.
fn refused_in_one_line(cases: Vec<(Vec<u8>, &str)>) {
    for (bytes, want) in cases {
        let e = decode(&bytes, "RGB").unwrap_err().to_string();
        assert!(
            e.contains("ImageDecoder: encoded_stream cannot be decoded")
                && e.contains(want)
                && !e.contains('\n'),
            "{e}"
        );
    }
}

/// CRC-32 (IEEE), as PNG chunks carry it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Damaged JPEGs (bytes changed, bits flipped, files cut short) decode or are refused in one
/// line; none panics. Overflow checks are on in the test profile, so wrapped arithmetic on
/// wild coefficients would panic here too.
#[test]
fn mutated_jpegs_never_panic() {
    mutations_decode_or_are_refused(&jpeg_fixtures(), 3000, 0x9E37_79B9_7F4A_7C15);
}

/// The same for JPEG 2000 files and codestreams, which the `hayro-jpeg2000` crate reads.
#[test]
fn mutated_jpeg2000_files_never_panic() {
    mutations_decode_or_are_refused(&fixtures("jpeg2000"), 3000, 0x2545_F491_4F6C_DD1D);
}

#[test]
fn mutated_files_of_other_depths_never_panic() {
    mutations_decode_or_are_refused(&fixtures("image_depths"), 3000, 0x9E37_79B9_7F4A_7C15);
}

fn mutations_decode_or_are_refused(fixtures: &[Fixture], runs: usize, seed: u64) {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut decoded, mut refused) = (0, 0);
    for i in 0..runs {
        let mut file = fixtures[i % fixtures.len()].file.clone();
        for _ in 0..1 + next() % 4 {
            let at = next() as usize % file.len();
            match next() % 3 {
                0 => file[at] = next() as u8,
                1 => file[at] ^= 1 << (next() % 8),
                _ => file.truncate(at.max(3)),
            }
        }
        let bytes = HostTensor::from_vec(vec![file.len()], &file).unwrap();
        match wgpu_ops::ops::image_decoder::decode_image(&bytes, "RGB") {
            Ok(img) => {
                assert_eq!(img.shape[2], 3);
                decoded += 1;
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.starts_with("ImageDecoder: ") && !e.contains('\n'), "{e}");
                refused += 1;
            }
        }
    }
    // Both outcomes occur, so the mutations neither always break nor never reach the decoder.
    assert!(
        decoded > 100 && refused > 100,
        "{decoded} decoded, {refused} refused"
    );
}
