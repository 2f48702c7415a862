#!/usr/bin/env python3
"""One ONNX recurrent layer (RNN, GRU or LSTM node, which wgpu-ops loads as a Scan per
direction) run on onnxruntime (CPU) and on wgpu-ops (examples/onnx_timing.rs): outputs compared,
times per step reported, with the dispatches per step.

Usage: scripts/recurrent_vs_onnxruntime.py [OP [BATCH [STEPS]]] [--hidden N]
[--direction forward|reverse|bidirectional] [--runs N] [--threads N] [--constant-weights]
(default LSTM, batch 64, 512 steps, hidden 256, forward). ONNX_TIMING=PATH runs that prebuilt
onnx_timing binary instead of `cargo run --release --example onnx_timing`.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto

from ort_compare import compare, onnxruntime_run, resident_line, save, wgpu_ops_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("op", nargs="?", default="LSTM", choices=["RNN", "GRU", "LSTM"])
parser.add_argument("size", nargs="*", type=int, default=[64, 512], metavar="BATCH STEPS")
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--direction", default="forward",
                    choices=["forward", "reverse", "bidirectional"])
parser.add_argument("--runs", type=int, default=5)
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--constant-weights", action="store_true",
                    help="W, R and B as initializers (as exported models have them), not inputs")
opts = parser.parse_args()
if len(opts.size) == 1:
    opts.size.append(512)
if len(opts.size) != 2:
    parser.error("give BATCH [STEPS]")
batch, steps = opts.size
hidden = opts.hidden
gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[opts.op]
dirs = 2 if opts.direction == "bidirectional" else 1

rng = np.random.default_rng(0)
scale = 1.0 / np.sqrt(hidden)
feeds = {
    "X": rng.standard_normal((steps, batch, hidden)).astype(np.float32),
    "W": (rng.standard_normal((dirs, gates * hidden, hidden)) * scale).astype(np.float32),
    "R": (rng.standard_normal((dirs, gates * hidden, hidden)) * scale).astype(np.float32),
    "B": (rng.standard_normal((dirs, 2 * gates * hidden)) * 0.1).astype(np.float32),
}
f32 = TensorProto.FLOAT
outputs = ["Y", "Y_h"] + (["Y_c"] if opts.op == "LSTM" else [])
node = helper.make_node(opts.op, ["X", "W", "R", "B"], outputs, hidden_size=hidden,
                        direction=opts.direction)
weights = {}
if opts.constant_weights:
    weights = {k: feeds.pop(k) for k in ["W", "R", "B"]}
graph = helper.make_graph(
    [node], "recurrent",
    [helper.make_tensor_value_info(k, f32, list(v.shape)) for k, v in feeds.items()],
    [helper.make_tensor_value_info(o, f32, [steps, dirs, batch, hidden] if o == "Y"
                                   else [dirs, batch, hidden]) for o in outputs],
    [numpy_helper.from_array(v, k) for k, v in weights.items()])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)],
                          producer_name="wgpu-ops")
onnx.checker.check_model(model)

work, path = save(model, feeds, "recurrent-")
want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs)
worst = compare(work, outputs, want)
print(report)
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
print(f"{opts.op} {opts.direction}, hidden {hidden}, batch {batch}, {steps} steps: outputs match "
      f"onnxruntime (rtol 1e-3, atol 1e-5; worst error {worst:.2f} of the bound)")
print(f"onnxruntime {ort.__version__} CPU, threads {threads}: {ort_ms:.2f} ms per run, "
      f"{ort_ms / steps * 1e3:.1f} us per step")
print(f"wgpu-ops: {ours_ms:.2f} ms per run (inputs uploaded, outputs read back), "
      f"{ours_ms / steps * 1e3:.1f} us per step, {dispatches / steps:.2f} dispatches per step; "
      f"ratio to onnxruntime {ort_ms / ours_ms:.2f}x")
print(resident_line(report, steps, ort_ms, dispatches))
sys.stdout.flush()
