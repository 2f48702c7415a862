#!/usr/bin/env python3
"""Random PBM/PGM/PPM and 16-bit BMP files (the two formats ImageDecoder reads with its own
code rather than a crate's), each decoded by `wgpu-ops run` and by Pillow, the ONNX
reference's decoder: headers with comments and every kind of whitespace, leading zeros,
maxvals from 1 to 65535, raw and plain samples, bitmaps, BMP header sizes from 40 to 124
bytes, top-down rows, masks, gaps before the pixels, truncated files and trailing bytes.

Prints one line per class: how many files decode alike, how many both refuse, and each
disagreement (a different decode, or one side refusing). The one expected disagreement:
16-bit BMPs of a 4-4-4 layout, which Pillow refuses and the `image` crate reads. Not part of
the tests (the fixtures of tests/data/image_depths are); it needs Pillow and onnx.

usage: scripts/image_decoder_vs_pillow.py WGPU_OPS_BINARY [FILES_PER_CLASS] [SEED]
"""
import io
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter

import numpy as np
import onnx
from onnx import TensorProto, helper
from PIL import Image

from bmp16 import bmp16

binary = os.path.abspath(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 3
random.seed(seed)
rng = np.random.default_rng(seed)
work = tempfile.mkdtemp()
node = helper.make_node("ImageDecoder", ["b"], ["y"], pixel_format="RGB")
graph = helper.make_graph([node], "decode", [helper.make_tensor_value_info("b", TensorProto.UINT8, [None])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
model = os.path.join(work, "decode.onnx")
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), model)


def separator():
    s = random.choice([b" ", b"\n", b"\t", b"\r\n", b"  ", b"\x0b", b"\x0c"])
    return s + (b"# c" + random.choice([b"\n", b"\r"]) if random.random() < 0.2 else b"")


def number(v):
    return (b"0" * random.randint(0, 2) if random.random() < 0.2 else b"") + str(v).encode()


def random_pnm():
    magic = random.choice([b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"])
    w, h = random.randint(1, 6), random.randint(1, 5)
    maxval = random.choice([1, 2, 7, 100, 255, 256, 1000, 65535])
    n = w * h * (3 if magic in (b"P3", b"P6") else 1)
    head = magic + separator() + number(w) + separator() + number(h)
    if magic not in (b"P1", b"P4"):
        head += separator() + number(maxval)
    head += random.choice([b"\n", b" ", b"\t"])
    if magic == b"P4":
        data = rng.integers(0, 256, (w + 7) // 8 * h).astype(np.uint8).tobytes()
    elif magic == b"P1":
        data = b"".join(random.choice([b"0", b"1"]) + random.choice([b"", b" ", b"\n"]) for _ in range(n))
    elif magic in (b"P2", b"P3"):
        data = b"".join(number(int(v)) + separator() for v in rng.integers(0, maxval + 1, n))
    else:
        data = rng.integers(0, maxval + 1, n).astype(">u2" if maxval > 255 else np.uint8).tobytes()
    return head + data


def random_bmp16():
    w, h = random.randint(1, 9), random.randint(1, 6)
    header = random.choice([40, 52, 56, 108, 124])
    masks = random.choice([None, (0x7C00, 0x3E0, 0x1F), (0xF800, 0x7E0, 0x1F), (0xF00, 0xF0, 0xF)])
    top_down = random.random() < 0.3
    a = rng.integers(0, 65536, (h, w))
    return bmp16(a, masks, header, top_down, random.choice([0, 0, 4]))


for name, make in [("PNM", random_pnm), ("16-bit BMP", random_bmp16)]:
    alike = both_refuse = 0
    disagree = Counter()
    for _ in range(count):
        f = make()
        if random.random() < 0.15:
            f = f[: random.randint(min(3, len(f)), len(f))]
        if random.random() < 0.1:
            f += b"extra"
        try:
            img = Image.open(io.BytesIO(f))
            img.load()
            # Gray of more than 8 bits (mode I) has no 8-bit answer in the reference.
            want = np.array(img.convert("RGB")) if img.mode in ("1", "L", "RGB") else "no 8 bits"
        except Exception as e:
            want, pillow_error = None, str(e).split("\n")[0][:50]
        np.save(os.path.join(work, "b.npy"), np.frombuffer(f, np.uint8))
        out = os.path.join(work, "out")
        run = subprocess.run([binary, "run", model, "--input", f"b={work}/b.npy", "--out", out],
                             capture_output=True, text=True)
        if isinstance(want, str):
            continue
        if want is None:
            if run.returncode == 0:
                disagree[f"Pillow refuses ({pillow_error}), ours decodes"] += 1
            else:
                both_refuse += 1
        elif run.returncode != 0:
            disagree["ours refuses: " + run.stderr.strip()[-80:]] += 1
        else:
            got = np.load(os.path.join(out, "y.npy"))
            if got.shape == want.shape and (got == want).all():
                alike += 1
            else:
                disagree["different samples"] += 1
    print(f"{name}: {alike} alike, {both_refuse} refused by both, {sum(disagree.values())} apart")
    for why, n in disagree.most_common():
        print(f"  {n} x {why}")
