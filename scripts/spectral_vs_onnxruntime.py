#!/usr/bin/env python3
"""DFT and STFT of the sizes audio front ends and long convolutions use, each a one-node ONNX
model (float32), on onnxruntime (CPU) and on wgpu-ops (examples/onnx_timing.rs): the median
time per run of each, with the tensors on the GPU too, and the accuracy of both against numpy's
FFT in float64 (worst error as a fraction of the spectrum's peak: two float32 FFTs differ from
each other by about as much as each differs from the exact values, so they are compared with
those, not with each other).

Cases: Whisper's STFT (30 s at 16 kHz, 400-point Hann frames every 160 samples: one product
with the matrix), an STFT of 2048-point frames (factored, 32 x 64), 64 complex signals of 4096
points (factored; a direct DFT's matrix was 256 MiB), a complex signal of 2^20 points (factored
twice), the one-sided DFT of a real one (rfft) and a one-sided inverse (irfft), and 4 complex signals of 10007 points, a prime
(Bluestein's chirp through 2^15-point transforms).

Usage: scripts/spectral_vs_onnxruntime.py [--runs N] [--threads N] [NAME_FILTER]
ONNX_TIMING=PATH runs that prebuilt onnx_timing binary instead of
`cargo run --release --example onnx_timing`.
"""
import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ort_compare import case_options, onnxruntime_run, save, timing_text, wgpu_ops_run

opts = case_options(__doc__)


def model(op, shape, inits, opset, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    names = ["x"] + [t.name if t is not None else "" for t in inits]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], op, [x], [y],
                              [t for t in inits if t is not None])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def const(name, value):
    return numpy_helper.from_array(np.array(value), name)


def stft(shape, step, frame):
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)).astype(np.float32)
    m = model("STFT", shape, [const("step", np.int64(step)), const("window", window)], 17,
              onesided=1)
    def exact(x):
        frames = 1 + (x.shape[1] - frame) // step
        idx = np.arange(frame)[None, :] + step * np.arange(frames)[:, None]
        spec = np.fft.rfft(x[:, idx, 0].astype(np.float64) * window, axis=-1)
        return np.stack([spec.real, spec.imag], axis=-1)
    return m, exact


def dft(shape, inverse=0, onesided=0, length=None):
    inits = [const("n", np.int64(length)) if length else None, const("axis", np.int64(1))]
    m = model("DFT", shape, inits, 20, inverse=inverse, onesided=onesided)
    def exact(x):
        z = x.astype(np.float64)
        z = z[..., 0] + 1j * z[..., 1] if z.shape[-1] == 2 else z[..., 0]
        if inverse and onesided:
            return np.fft.irfft(z, n=length, axis=1)[..., None]
        y = np.fft.ifft(z, axis=1) if inverse else np.fft.fft(z, axis=1)
        if onesided:
            y = y[:, :shape[1] // 2 + 1]
        return np.stack([y.real, y.imag], axis=-1)
    return m, exact


cases = [
    ("stft-whisper-400", *stft([1, 480000, 1], 160, 400)),
    ("stft-frames-2048", *stft([1, 480000, 1], 512, 2048)),
    ("dft-64x4096-complex", *dft([64, 4096, 2])),
    ("dft-2^20-complex", *dft([1, 1 << 20, 2])),
    ("rfft-2^20", *dft([1, 1 << 20, 1], onesided=1)),
    ("irfft-2^20", *dft([1, (1 << 19) + 1, 2], inverse=1, onesided=1, length=1 << 20)),
    ("dft-4x10007-prime", *dft([4, 10007, 2])),
]
rng = np.random.default_rng(0)
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
print(f"onnxruntime {ort.__version__} CPU, threads {threads}; {opts.runs} runs each")
for name, m, exact in cases:
    if opts.only not in name:
        continue
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": rng.uniform(-1, 1, shape).astype(np.float32)}
    work, path = save(m, feeds, name + "-")
    want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
    report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs)
    got = np.load(os.path.join(work, "out", "y.npy"))
    truth = exact(feeds["x"])
    assert got.shape == truth.shape == want[0].shape, (got.shape, truth.shape, want[0].shape)
    peak = np.abs(truth).max()
    ours_err = np.abs(got - truth).max() / peak
    ort_err = np.abs(want[0] - truth).max() / peak
    print(f"{name}: worst error / peak: wgpu-ops {ours_err:.1e}, onnxruntime {ort_err:.1e}; "
          + timing_text(report, ort_ms, ours_ms, dispatches))
    sys.stdout.flush()
