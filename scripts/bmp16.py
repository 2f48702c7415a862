"""A writer of 16-bit BMP files for the image scripts (Pillow writes none)."""
import struct

import numpy as np


def bmp16(a, masks, header=40, top_down=False, gap=0):
    """A 16-bit BMP of the 16-bit pixels `a` (rows of `h x w`): `masks` None is the default
    5-5-5 layout (no bitfields), else the red, green and blue masks as bitfields; `header` is
    the info header's size; `gap` bytes lie between the headers and the pixels."""
    h, w = a.shape
    stride = (w * 2 + 3) // 4 * 4
    rows = range(h) if top_down else range(h - 1, -1, -1)
    pixels = b"".join(a[r].astype("<u2").tobytes().ljust(stride, b"\0") for r in rows)
    info = struct.pack("<IiiHHIIiiII", header, w, -h if top_down else h, 1, 16,
                       0 if masks is None else 3, len(pixels), 2835, 2835, 0, 0)
    tail = b"" if masks is None else struct.pack("<III", *masks)
    info = (info + tail).ljust(header + (len(tail) if header == 40 else 0), b"\0")
    start = 14 + len(info) + gap
    return (b"BM" + struct.pack("<IHHI", start + len(pixels), 0, 0, start) + info + b"\0" * gap
            + pixels)
