#!/usr/bin/env python3
"""Writes the fixtures of tests/image_decoder.rs's sample-depth test into
tests/data/image_depths/: files whose samples are not 8 bits (16-bit PNG and TIFF, 16-bit BMP,
PGM and PPM of maxvals other than 255, raw and plain, bitmaps, JPEG 2000 of 4 to 16 bits), each
with the RGB samples Pillow decodes from it (what the ONNX reference's ImageDecoder returns:
`np.array(Image.open(file))`), written with random samples that reach both ends of the range.

Two kinds of file Pillow does not reduce to 8 bits, so the reference gives no RGB image for
them; the expected samples follow docs/spec-decisions.md 31 instead, as the script states
where it computes them:
- gray of more than 8 bits (Pillow's modes I;16 and I: 16-bit PNG and TIFF, PGM of a maxval
  over 255, JPEG 2000): reduced as Pillow reduces the same format's color samples;
- JPEG 2000 samples within half a step of the top, where Pillow's rounding wraps to 0: 255.

Needs Pillow built with OpenJPEG, as its wheels are, and OpenJPEG's opj_compress (Debian's
libopenjp2-tools).
Usage: scripts/image_depth_fixtures.py [out_dir]
"""
import io
import struct
import sys
import tempfile
import zlib
from pathlib import Path
from subprocess import run

import numpy as np
from PIL import Image, features

from bmp16 import bmp16

out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/image_depths")
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(20261203)
W, H = 11, 7


def samples(top, shape):
    """Random samples of 0..top, with both ends among them."""
    a = rng.integers(0, top + 1, shape)
    a.reshape(-1)[:4] = [0, top, top - 1, 1]
    return a


def png(a, bits, color_type):
    rows = b"".join(b"\0" + row.astype(">u2" if bits == 16 else np.uint8).tobytes() for row in a)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", a.shape[1], a.shape[0], bits, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def tiff(a):
    """An uncompressed little-endian TIFF of 16-bit samples (Pillow writes none of RGB)."""
    h, w = a.shape[:2]
    spp = 1 if a.ndim == 2 else a.shape[2]
    data = a.astype("<u2").tobytes()
    n = 10 if spp == 4 else 9
    bps_at = 8 + 2 + 12 * n + 4
    data_at = bps_at + 2 * spp + (2 * spp) % 4
    entries = [(256, 3, 1, w), (257, 3, 1, h),
               (258, 3, spp, bps_at if spp > 2 else 16), (259, 3, 1, 1),
               (262, 3, 1, 2 if spp >= 3 else 1), (273, 4, 1, data_at), (277, 3, 1, spp),
               (278, 3, 1, h), (279, 4, 1, len(data))]
    if spp == 4:
        entries.append((338, 3, 1, 2))  # the fourth sample is unassociated alpha
    ifd = struct.pack("<H", n)
    for tag, kind, count, value in entries:
        if kind == 3 and count == 1:
            ifd += struct.pack("<HHIHH", tag, kind, count, value, 0)
        else:
            ifd += struct.pack("<HHII", tag, kind, count, value)
    head = b"II*\0" + struct.pack("<I", 8) + ifd + struct.pack("<I", 0)
    bps = struct.pack("<" + "H" * spp, *[16] * spp)
    return (head + bps).ljust(data_at, b"\0") + data


def pnm(magic, a, maxval, plain=False):
    head = f"{magic}\n# a comment\n{a.shape[1]} {a.shape[0]}\n{maxval}\n".encode()
    if plain:
        return head + " ".join(map(str, a.reshape(-1))).encode() + b"\n"
    return head + a.astype(">u2" if maxval > 255 else np.uint8).tobytes()


def jp2(a, bits):
    """A lossless JP2 of `bits`-bit samples, written by opj_compress from a raw file."""
    with tempfile.TemporaryDirectory() as tmp:
        planes = np.moveaxis(a, -1, 0) if a.ndim == 3 else a[None]
        raw, out_file = Path(tmp) / "in.raw", Path(tmp) / "out.jp2"
        raw.write_bytes(planes.astype("<u2" if bits > 8 else np.uint8).tobytes())
        size = f"{a.shape[1]},{a.shape[0]},{planes.shape[0]},{bits},u"
        run(["opj_compress", "-i", raw, "-o", out_file, "-F", size, "-n", "2"],
            check=True, capture_output=True)
        return out_file.read_bytes()


def jp2_from_pnm(a, bits):
    """opj_compress's raw reader takes few depths; a PGM or PPM of maxval 2^bits - 1 gives the
    others (and their precision)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out_file = Path(tmp) / ("in.ppm" if a.ndim == 3 else "in.pgm"), Path(tmp) / "out.jp2"
        src.write_bytes(pnm("P6" if a.ndim == 3 else "P5", a, (1 << bits) - 1))
        run(["opj_compress", "-i", src, "-o", out_file, "-n", "2"], check=True, capture_output=True)
        return out_file.read_bytes()


def pillow_rgb(data):
    img = Image.open(io.BytesIO(data))
    assert img.mode in ("RGB", "RGBA", "L", "LA", "1", "P"), img.mode
    return np.array(img.convert("RGB"))


def gray(plane):
    return np.repeat(plane[..., None].astype(np.uint8), 3, -1)


def jp2_reduced(v, bits):
    """Pillow's reduction of a JPEG 2000 sample to 8 bits, its wrap at the top clamped."""
    if bits <= 8:
        return v << (8 - bits)
    return np.minimum(255, (v + (1 << (bits - 9))) >> (bits - 8))


def pnm_reduced(v, maxval):
    return np.minimum(255, np.round(v / maxval * 255)).astype(np.uint8)


cases = {}
rgb16, rgba16, la16, l16 = (samples(65535, (H, W, c)) for c in (3, 4, 2, 1))
cases["png_rgb16_11x7.png"] = (png(rgb16, 16, 2), None)
cases["png_rgba16_11x7.png"] = (png(rgba16, 16, 6), None)
cases["png_gray_alpha16_11x7.png"] = (png(la16, 16, 4), None)
# Decision 31: 16-bit gray (Pillow's mode I;16) keeps its high byte, as Pillow's 16-bit gray
# with alpha and 16-bit color do.
cases["png_gray16_11x7.png"] = (png(l16[..., 0], 16, 0), gray(l16[..., 0] >> 8))
cases["tiff_rgb16_11x7.tif"] = (tiff(rgb16), None)
cases["tiff_rgba16_11x7.tif"] = (tiff(rgba16), None)
cases["tiff_gray16_11x7.tif"] = (tiff(l16[..., 0]), gray(l16[..., 0] >> 8))
b555, b565 = samples(32767, (H, W)), samples(65535, (H, W))
cases["bmp_555_11x7.bmp"] = (bmp16(b555, None), None)
cases["bmp_555_bitfields_11x7.bmp"] = (bmp16(b555, (0x7C00, 0x3E0, 0x1F)), None)
cases["bmp_565_bitfields_11x7.bmp"] = (bmp16(b565, (0xF800, 0x7E0, 0x1F)), None)
cases["bmp_565_v5_top_down_11x7.bmp"] = (bmp16(b565, (0xF800, 0x7E0, 0x1F), 124, True), None)
for maxval in (1, 7, 100, 1000, 4095, 65535):
    rgb, plane = samples(maxval, (H, W, 3)), samples(maxval, (H, W))
    cases[f"ppm_{maxval}_11x7.ppm"] = (pnm("P6", rgb, maxval), None)
    # Decision 31: PGM of a maxval over 255 (Pillow's mode I) is reduced as its PPM is.
    want = gray(pnm_reduced(plane, maxval)) if maxval > 255 else None
    cases[f"pgm_{maxval}_11x7.pgm"] = (pnm("P5", plane, maxval), want)
# Samples 30 and 70 of 100 scale to 76.5 and 178.5, which Pillow rounds to even.
ties = np.array([[30, 70, 0, 100, 50, 1]])
cases["pgm_ties_6x1.pgm"] = (pnm("P5", ties, 100), None)
cases["ppm_plain_1000_11x7.ppm"] = (pnm("P3", samples(1000, (H, W, 3)), 1000, plain=True), None)
plane = samples(300, (H, W))
# Decision 31, as above.
cases["pgm_plain_300_11x7.pgm"] = (pnm("P2", plane, 300, plain=True), gray(pnm_reduced(plane, 300)))
bits = samples(1, (H, W))
cases["pbm_raw_11x7.pbm"] = (b"P4\n11 7\n" + np.packbits(bits, axis=1).tobytes(), None)
cases["pbm_plain_11x7.pbm"] = (b"P1\n11 7\n" + "".join(map(str, bits.reshape(-1))).encode(), None)
for depth in (4, 10, 12, 16):
    rgb, plane = samples((1 << depth) - 1, (H, W, 3)), samples((1 << depth) - 1, (H, W))
    encode = jp2 if depth == 4 else jp2_from_pnm
    data = encode(rgb, depth)
    want = pillow_rgb(data)
    # Decision 31: where Pillow's rounding wraps past 255 to 0, 255.
    wraps = depth > 8 and (rgb + (1 << (depth - 9))) >> (depth - 8) > 255
    assert (want[wraps] == 0).all()
    want[wraps] = 255
    assert (want == jp2_reduced(rgb, depth)).all()
    cases[f"jp2_rgb{depth}_11x7.jp2"] = (data, want)
    data = encode(plane, depth)
    # Decision 31: gray of more than 8 bits (Pillow's I;16) is reduced as RGB is.
    want = None if depth < 8 else gray(jp2_reduced(plane, depth))
    cases[f"jp2_gray{depth}_11x7.jp2"] = (data, want)

manifest = []
for file, (data, want) in cases.items():
    name, ext = file.rsplit(".", 1)
    rgb = pillow_rgb(data) if want is None else want
    (out / file).write_bytes(data)
    (out / f"{name}.rgb").write_bytes(np.ascontiguousarray(rgb, np.uint8).tobytes())
    manifest.append(f"{name} {rgb.shape[1]} {rgb.shape[0]} {ext}")
(out / "cases.txt").write_text(
    f"# name width height extension; expected: Pillow {Image.__version__} (OpenJPEG "
    f"{features.version('jpg_2000')}), or docs/spec-decisions.md 31 where Pillow gives no "
    "8-bit image\n" + "\n".join(manifest) + "\n"
)
print(f"{len(manifest)} fixtures in {out}")
