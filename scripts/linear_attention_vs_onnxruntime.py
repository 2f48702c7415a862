#!/usr/bin/env python3
"""LinearAttention (gated delta rule, ONNX opset 27) from its expanded ONNX graph: a Scan over the
time steps. Builds the model for B, T, heads, head size; runs it on onnxruntime (CPU, all cores)
and on wgpu-ops (examples/onnx_timing.rs), compares the outputs and prints both times.

Usage: scripts/linear_attention_vs_onnxruntime.py [B T HEADS HEAD_SIZE] [--runs N] [--node-by-node]
[--copied-elements] [--iterated] [--op]
(default 1 1024 16 128, the size of a small linear-attention language model layer);
--node-by-node also runs the model once with element-wise chains not fused, for the dispatch
count and time before fusion; --copied-elements with the Scan's elements copied in and out
instead of bound in place; --iterated also times the Scan iterating its body (without the
recurrence's own kernel, which wgpu-ops otherwise runs the expansion with); --op builds the
model with the LinearAttention node itself instead of its expansion (both runtimes run that model; wgpu-ops in one dispatch).
ONNX_TIMING=PATH runs that prebuilt onnx_timing binary instead of `cargo run`.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, TensorProto
from onnx.backend.test.case.node import function_testcase_helper

from ort_compare import compare, onnxruntime_run, resident_line, save, wgpu_ops_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("size", nargs="*", type=int, default=[1, 1024, 16, 128],
                    metavar="B T HEADS HEAD_SIZE")
parser.add_argument("--runs", type=int, default=3)
parser.add_argument("--node-by-node", action="store_true")
parser.add_argument("--copied-elements", action="store_true")
parser.add_argument("--iterated", action="store_true")
parser.add_argument("--op", action="store_true")
opts = parser.parse_args()
if len(opts.size) != 4:
    parser.error("give B T HEADS HEAD_SIZE, or nothing for 1 1024 16 128")
b, t, h, d = opts.size
runs = opts.runs

node = helper.make_node(
    "LinearAttention",
    inputs=["query", "key", "value", "", "decay", "beta"],
    outputs=["output", "present_state"],
    q_num_heads=h,
    kv_num_heads=h,
)
shapes = {"query": [b, t, h * d], "key": [b, t, h * d], "value": [b, t, h * d],
          "decay": [b, t, h * d], "beta": [b, t, h]}
inputs_vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
types = [inputs_vi[0].type, inputs_vi[1].type, inputs_vi[2].type, onnx.TypeProto(),
         inputs_vi[3].type, inputs_vi[4].type]
opsets = [helper.make_opsetid("", 27)]
(expanded, _) = function_testcase_helper(node, types, "la", opset_imports=opsets)
nodes, func_opsets = expanded[0]
outputs_vi = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [b, t, h * d]),
              helper.make_tensor_value_info("present_state", TensorProto.FLOAT, [b, h, d, d])]
if opts.op:
    nodes, func_opsets = [node], opsets
graph = helper.make_graph(nodes, "linear_attention_gated_delta", inputs_vi, outputs_vi)
model = helper.make_model(graph, opset_imports=list(func_opsets), producer_name="wgpu-ops")
model.ir_version = 10

rng = np.random.default_rng(0)
def l2(x):  # unit keys per head, as the node tests make them
    y = x.reshape(b, t, h, d)
    return (y / np.linalg.norm(y, axis=-1, keepdims=True)).reshape(b, t, h * d)
feeds = {
    "query": rng.standard_normal(shapes["query"], dtype=np.float32),
    "key": l2(rng.standard_normal(shapes["key"], dtype=np.float32)).astype(np.float32),
    "value": rng.standard_normal(shapes["value"], dtype=np.float32),
    "decay": (-np.abs(rng.standard_normal(shapes["decay"], dtype=np.float32)) * 0.1).astype(np.float32),
    "beta": rng.random(shapes["beta"], dtype=np.float32),
}

work, path = save(model, feeds, "linear-attention-")
want, ort_ms = onnxruntime_run(path, feeds, runs)
flags = (["--node-by-node"] if opts.node_by_node else []) + \
    (["--copied-elements"] if opts.copied_elements else []) + \
    (["--iterated-scans"] if opts.iterated else [])
report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, runs, flags)
lines = report.splitlines()
worst = compare(work, ["output", "present_state"], want)
print(report)
form = "the op" if opts.op else "its expansion (a Scan)"
print(f"model: LinearAttention as {form}")
print(f"LinearAttention gated_delta B={b} T={t} heads={h} head_size={d}: outputs match onnxruntime "
      f"(rtol 1e-3, atol 1e-5; worst error {worst:.2f} of the bound)")
print(f"onnxruntime {ort.__version__} CPU ({os.cpu_count()} cores): {ort_ms:.1f} ms per run, "
      f"{ort_ms / t * 1e3:.1f} us per step")
print(f"wgpu-ops: {ours_ms:.1f} ms per run, {ours_ms / t * 1e3:.1f} us per step, "
      f"{dispatches / t:.2f} dispatches per step; ratio to onnxruntime {ort_ms / ours_ms:.2f}x")
print(resident_line(report, t, ort_ms, dispatches))
for l in lines:
    for prefix, name in [("node by node", "node by node"), ("Scan elements copied", "elements copied"),
                         ("Scans iterated", "Scan iterated")]:
        if l.startswith(prefix):
            ms = float(l.split("median ")[1].split()[0])
            n = int(l.split("dispatches per run: ")[1].split(",")[0])
            c = int(l.split("copies per run: ")[1])
            print(f"wgpu-ops {name}: {ms:.1f} ms per run, {ms / t * 1e3:.1f} us per step, "
                  f"{n / t:.2f} dispatches and {c / t:.2f} copies per step")
