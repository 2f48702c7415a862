#!/usr/bin/env python3
"""The RNN cell of the benchmark (hidden 256) as an ONNX Scan: H_t = Tanh(X_t W + H_{t-1} R + Wb + Rb).
Runs the model on onnxruntime (CPU) and on wgpu-ops (examples/onnx_timing.rs), compares the
outputs and prints both times per step.

Usage: scripts/rnn_vs_onnxruntime.py [BATCH [STEPS]] [--runs N] [--threads N]
(default batch 64, 512 steps). --threads limits onnxruntime's intra-op threads (default: its own
choice, one per physical core). ONNX_TIMING=PATH runs that prebuilt onnx_timing binary instead of
`cargo run --release --example onnx_timing`.
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
parser.add_argument("size", nargs="*", type=int, default=[64, 512], metavar="BATCH STEPS")
parser.add_argument("--runs", type=int, default=5)
parser.add_argument("--threads", type=int, default=0)
opts = parser.parse_args()
if len(opts.size) == 1:
    opts.size.append(512)
if len(opts.size) != 2:
    parser.error("give BATCH [STEPS]")
batch, steps = opts.size
hidden = 256

rng = np.random.default_rng(0)
def weight(*shape):
    return (rng.standard_normal(shape) * (1.0 / np.sqrt(hidden))).astype(np.float32)

f32 = TensorProto.FLOAT
body = helper.make_graph(
    [
        helper.make_node("MatMul", ["X", "Wi"], ["t1"]),
        helper.make_node("MatMul", ["H", "Ri"], ["t2"]),
        helper.make_node("Add", ["t1", "t2"], ["t3"]),
        helper.make_node("Add", ["t3", "Wb"], ["t4"]),
        helper.make_node("Add", ["t4", "Rb"], ["t5"]),
        helper.make_node("Tanh", ["t5"], ["H_next"]),
        helper.make_node("Identity", ["H_next"], ["Y_t"]),
    ],
    "rnn_step",
    [helper.make_tensor_value_info("H", f32, [batch, hidden]),
     helper.make_tensor_value_info("X", f32, [batch, hidden])],
    [helper.make_tensor_value_info("H_next", f32, [batch, hidden]),
     helper.make_tensor_value_info("Y_t", f32, [batch, hidden])],
)
graph = helper.make_graph(
    [helper.make_node("Scan", ["H0", "Xs"], ["Hn", "Y"], body=body, num_scan_inputs=1)],
    "rnn",
    [helper.make_tensor_value_info("H0", f32, [batch, hidden]),
     helper.make_tensor_value_info("Xs", f32, [steps, batch, hidden])],
    [helper.make_tensor_value_info("Hn", f32, [batch, hidden]),
     helper.make_tensor_value_info("Y", f32, [steps, batch, hidden])],
    initializer=[numpy_helper.from_array(weight(hidden, hidden), "Wi"),
                 numpy_helper.from_array(weight(hidden, hidden), "Ri"),
                 numpy_helper.from_array(weight(hidden) * 0.1, "Wb"),
                 numpy_helper.from_array(weight(hidden) * 0.1, "Rb")],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)],
                          producer_name="wgpu-ops")
model.ir_version = 8
onnx.checker.check_model(model)

feeds = {
    "H0": np.zeros((batch, hidden), np.float32),
    "Xs": rng.standard_normal((steps, batch, hidden)).astype(np.float32),
}
work, path = save(model, feeds, "rnn-")
want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs, ["--node-by-node"])
worst = compare(work, ["Hn", "Y"], want)
print(report)
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
print(f"RNN cell hidden {hidden}, batch {batch}, {steps} steps: outputs match onnxruntime "
      f"(rtol 1e-3, atol 1e-5; worst error {worst:.2f} of the bound)")
print(f"onnxruntime {ort.__version__} CPU, threads {threads}: {ort_ms:.2f} ms per run, "
      f"{ort_ms / steps * 1e3:.1f} us per step")
print(f"wgpu-ops: {ours_ms:.2f} ms per run (inputs uploaded, outputs read back), "
      f"{ours_ms / steps * 1e3:.1f} us per step, {dispatches / steps:.2f} dispatches per step; "
      f"ratio to onnxruntime {ort_ms / ours_ms:.2f}x")
print(resident_line(report, steps, ort_ms, dispatches))
sys.stdout.flush()
