#!/usr/bin/env python3
"""Writes the JPEG 2000 fixtures of tests/image_decoder.rs into tests/data/jpeg2000/: small JP2
files and bare codestreams of the kinds encoders write (reversible 5/3 and irreversible 9/7
wavelets, with and without the component transform, gray, gray with alpha, RGB and RGBA,
sYCC, tiles, several resolutions, quality layers, every progression order, code-block and
precinct sizes, image and tile offsets, sizes down to 1 x 1), each with the RGB samples
OpenJPEG decodes from it (Pillow's decode, which is what the ONNX reference's ImageDecoder
returns); 16-bit gray files whose expected samples are their source reduced to 8 bits as
Pillow reduces 16-bit color (docs/spec-decisions.md 31); and
files with subsampled components, with the samples of OpenJPEG's own decoder.

Needs Pillow built with OpenJPEG, as its wheels are, and OpenJPEG's opj_compress and
opj_decompress (Debian's libopenjp2-tools) for the subsampled files.
Usage: scripts/jpeg2000_fixtures.py [out_dir]
"""
import io
import re
import sys
import tempfile
from subprocess import run
from pathlib import Path

import numpy as np
from PIL import Image, features

from fixture_picture import picture

out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/jpeg2000")
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(20261202)


def encode(w, h, mode="RGB", codestream=False, **save):
    channels = {"RGB": 3, "RGBA": 4, "L": 1, "LA": 2}[mode]
    a = picture(rng, w, h, channels)
    img = Image.fromarray(a if channels > 1 else a[..., 0], mode)
    b = io.BytesIO()
    img.save(b, "JPEG2000", no_jp2=codestream, **save)
    return b.getvalue()


lossy = {"irreversible": True, "quality_mode": "rates"}
cases = {
    "rgb_lossless_33x21": encode(33, 21),
    "rgb_lossless_mct_33x21": encode(33, 21, mct=1),
    "rgb_lossless_1x1": encode(1, 1),
    "rgb_lossless_codestream_40x17": encode(40, 17, codestream=True),
    "rgba_lossless_19x13": encode(19, 13, mode="RGBA"),
    "rgba_lossless_codestream_19x13": encode(19, 13, mode="RGBA", codestream=True),
    "gray_alpha_lossless_21x11": encode(21, 11, mode="LA"),
    "gray_lossless_64x48": encode(64, 48, mode="L"),
    "gray_lossless_2x3": encode(2, 3, mode="L"),
    "rgb_tiles_70x45": encode(70, 45, tile_size=(16, 16), mct=1),
    "rgb_tiles_offsets_70x45": encode(70, 45, tile_size=(32, 16), offset=(5, 3), tile_offset=(2, 1)),
    "rgb_one_resolution_37x23": encode(37, 23, num_resolutions=1),
    "rgb_resolutions_100x75": encode(100, 75, num_resolutions=6, mct=1),
    "rgb_codeblocks_precincts_100x75": encode(
        100, 75, codeblock_size=(16, 8), precinct_size=(32, 32), mct=1
    ),
    "rgb_layers_lossless_64x64": encode(64, 64, quality_mode="rates", quality_layers=[40, 10, 0]),
    "rgb_lossy_37x23": encode(37, 23, **lossy, quality_layers=[8]),
    "rgb_lossy_mct_100x75": encode(100, 75, **lossy, quality_layers=[20], mct=1),
    "rgb_lossy_layers_100x75": encode(100, 75, **lossy, quality_layers=[80, 20, 5], mct=1),
    "rgb_lossy_db_64x48": encode(64, 48, irreversible=True, quality_mode="dB", quality_layers=[38]),
    "gray_lossy_100x75": encode(100, 75, mode="L", **lossy, quality_layers=[10]),
    "gray_lossy_tiles_70x45": encode(70, 45, mode="L", **lossy, quality_layers=[6], tile_size=(32, 32)),
    "rgb_lossy_codestream_45x31": encode(45, 31, codestream=True, **lossy, quality_layers=[15], mct=1),
}
for order in ["LRCP", "RLCP", "RPCL", "PCRL", "CPRL"]:
    cases[f"rgb_{order.lower()}_48x40"] = encode(
        48, 40, progression=order, num_resolutions=4, precinct_size=(16, 16),
        quality_mode="rates", quality_layers=[30, 10], mct=1,
    )


def as_sycc(data):
    """The JP2 file `data` with its colour space relabelled sYCC: its samples are then read as
    Y, Cb and Cr, which Pillow converts to RGB with its JPEG conversion."""
    at = data.index(b"colr") + 4
    assert data[at] == 1, "an enumerated colour space"
    return data[: at + 3] + (18).to_bytes(4, "big") + data[at + 7 :]


cases["rgb_sycc_lossless_33x21"] = as_sycc(encode(33, 21, mct=0))

manifest = []
for name, data in cases.items():
    rgb = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
    ext = "j2k" if data.startswith(b"\xff\x4f\xff\x51") else "jp2"
    (out / f"{name}.{ext}").write_bytes(data)
    (out / f"{name}.rgb").write_bytes(rgb.tobytes())
    manifest.append(f"{name} {rgb.shape[1]} {rgb.shape[0]} {ext}")

# 16-bit gray: Pillow gives the 16-bit samples (mode I;16), not an 8-bit image; the decoder
# reduces them as Pillow reduces 16-bit color (docs/spec-decisions.md 31): (v + 128) >> 8, at
# most 255.
for name, (w, h), save in [
    ("gray16_lossless_23x17", (23, 17), {}),
    ("gray16_lossless_codeblocks_40x33", (40, 33), {"num_resolutions": 3, "codeblock_size": (16, 16)}),
]:
    y, x = np.mgrid[0:h, 0:w]
    a = ((x * 2741 + y * 1013 + x * y * 97) % 65536).astype(np.uint16)
    b = io.BytesIO()
    Image.fromarray(a).save(b, "JPEG2000", **save)
    data = b.getvalue()
    back = np.array(Image.open(io.BytesIO(data)))
    assert back.dtype == np.uint16 and (back == a).all(), name
    eight = np.minimum(255, (a.astype(np.uint32) + 128) >> 8).astype(np.uint8)
    (out / f"{name}.jp2").write_bytes(data)
    (out / f"{name}.rgb").write_bytes(np.repeat(eight[..., None], 3, -1).tobytes())
    manifest.append(f"{name} {w} {h} jp2")

# Subsampled components, written and decoded by OpenJPEG's own tools (libopenjp2-tools): Pillow
# misreads them (13.0 takes every component at the image's size), so the expected samples are
# opj_decompress's. Every component subsampled 2 x 2 (opj_compress -s): the image is the
# components' grid. Chroma subsampled 2 x 2 (4:2:0 planes, which opj_compress marks sYCC):
# upsampled and converted to RGB.
subsampled = []
with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    a = picture(rng, 33, 21, 3)
    Image.fromarray(a).save(tmp / "all.ppm")
    planes = [picture(rng, 33, 21, 1), picture(rng, 17, 11, 1), picture(rng, 17, 11, 1)]
    (tmp / "chroma.raw").write_bytes(b"".join(p.tobytes() for p in planes))
    for name, args in [
        ("subsampled_all_33x21", ["-i", tmp / "all.ppm", "-s", "2,2"]),
        ("subsampled_chroma_sycc_33x21",
         ["-i", tmp / "chroma.raw", "-F", "33,21,3,8,u@1x1:2x2:2x2", "-n", "3"]),
    ]:
        jp2, png = tmp / f"{name}.jp2", tmp / f"{name}.png"
        run(["opj_compress", *args, "-o", jp2], check=True, capture_output=True)
        run(["opj_decompress", "-i", jp2, "-o", png], check=True, capture_output=True)
        rgb = np.array(Image.open(png).convert("RGB"))
        (out / f"{name}.jp2").write_bytes(jp2.read_bytes())
        (out / f"{name}.rgb").write_bytes(rgb.tobytes())
        subsampled.append(f"{name} {rgb.shape[1]} {rgb.shape[0]} jp2")
opj = run(["opj_decompress", "-h"], capture_output=True, text=True).stdout
opj = re.search(r"library v([0-9.]*[0-9])", opj)
opj = opj.group(1) if opj else "?"

(out / "cases.txt").write_text(
    f"# name width height extension; expected: Pillow {Image.__version__}, OpenJPEG "
    f"{features.version('jpg_2000')}\n" + "\n".join(manifest) + "\n"
    f"# subsampled: expected from opj_decompress (OpenJPEG {opj})\n" + "\n".join(subsampled) + "\n"
)
manifest += subsampled
print(f"{len(manifest)} fixtures in {out}")
