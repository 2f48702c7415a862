#!/usr/bin/env python3
"""Writes the JPEG fixtures of tests/image_decoder.rs into tests/data/jpeg/: small JPEG files of
every kind our decoder reads (baseline and progressive; 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1 and
4:2:0 with 4x2 luma; gray; RGB without color transform; restart intervals; sizes that are not
multiples of the block or MCU, down to 1 x 1), each with the RGB samples libjpeg-turbo decodes
from it (Pillow's decode, which is what the ONNX reference's ImageDecoder returns).

Needs Pillow (built with libjpeg-turbo, as its wheels are) and `cjpeg` from libjpeg-turbo's
tools for the samplings Pillow cannot write. Usage: scripts/jpeg_fixtures.py [out_dir]
"""
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, features

from fixture_picture import picture

out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/jpeg")
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(20261128)


def pillow(w, h, mode="RGB", **save):
    a = picture(rng, w, h, 3 if mode == "RGB" else 1)
    img = Image.fromarray(a if mode == "RGB" else a[..., 0], mode)
    b = io.BytesIO()
    img.save(b, "JPEG", **save)
    return b.getvalue()


def cjpeg(w, h, *args):
    with tempfile.NamedTemporaryFile(suffix=".ppm") as f:
        Image.fromarray(picture(rng, w, h, 3)).save(f.name)
        return subprocess.run(
            ["cjpeg", "-quality", "85", *args, f.name], capture_output=True, check=True
        ).stdout


cases = {
    "444_37x23_q95": pillow(37, 23, quality=95, subsampling=0),
    "422_37x23_q30": pillow(37, 23, quality=30, subsampling=1),
    "420_37x23_q95": pillow(37, 23, quality=95, subsampling=2),
    "420_1x1": pillow(1, 1, quality=75, subsampling=2),
    "422_3x2": pillow(3, 2, quality=75, subsampling=1),
    "420_5x9": pillow(5, 9, quality=75, subsampling=2),
    "444_progressive_37x23_q30": pillow(37, 23, quality=30, subsampling=0, progressive=True),
    "422_progressive_37x23_q95": pillow(37, 23, quality=95, subsampling=1, progressive=True),
    "420_progressive_100x75_q95": pillow(100, 75, quality=95, subsampling=2, progressive=True),
    "420_progressive_2x3": pillow(2, 3, quality=75, subsampling=2, progressive=True),
    "gray_17x64": pillow(17, 64, mode="L", quality=75),
    "gray_progressive_100x75": pillow(100, 75, mode="L", quality=75, progressive=True),
    "gray_restart_61x47": pillow(61, 47, mode="L", quality=80, restart_marker_blocks=3),
    "420_restart_64x48": pillow(64, 48, quality=80, subsampling=2, restart_marker_blocks=1),
    "420_progressive_restart_64x48": pillow(
        64, 48, quality=80, subsampling=2, progressive=True, restart_marker_blocks=2
    ),
    "rgb_adobe_33x21": pillow(33, 21, quality=90, keep_rgb=True),
    "440_33x21": cjpeg(33, 21, "-sample", "1x2"),
    "440_progressive_33x21": cjpeg(33, 21, "-sample", "1x2", "-progressive"),
    "411_33x21": cjpeg(33, 21, "-sample", "4x1"),
    "411_progressive_70x9": cjpeg(70, 9, "-sample", "4x1", "-progressive"),
    "luma4x2_33x21": cjpeg(33, 21, "-sample", "4x2"),
    "422_restart_70x9": cjpeg(70, 9, "-sample", "2x1", "-restart", "1"),
    "420_2x2": cjpeg(2, 2, "-sample", "2x2"),
    "rgb_ids_70x9": cjpeg(70, 9, "-rgb"),
}

manifest = []
for name, data in cases.items():
    rgb = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
    (out / f"{name}.jpg").write_bytes(data)
    (out / f"{name}.rgb").write_bytes(rgb.tobytes())
    manifest.append(f"{name} {rgb.shape[1]} {rgb.shape[0]}")
(out / "cases.txt").write_text(
    f"# name width height; expected: Pillow {Image.__version__}, libjpeg-turbo "
    f"{features.version('libjpeg_turbo')}\n" + "\n".join(manifest) + "\n"
)
print(f"{len(cases)} fixtures in {out}")
