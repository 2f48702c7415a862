#!/usr/bin/env python3
"""One decode step of a GPT-2-like Transformer decoder (as torch exports one: LayerNormalization,
MatMuls, the erf GELU, keys and values concatenated to the past ones) run on onnxruntime (CPU)
and on wgpu-ops (examples/onnx_timing.rs): outputs compared, time per token reported.

A decode loop whose caches grow by a Concat hands each step inputs of new shapes, so no run
is a replay of the one before: every token pays for planning the graph. The report's 'every
run planned' line is that cost; its 'replayed' line what a cache of fixed shape (a circular
TensorScatter cache) pays instead.

Usage: scripts/decoder_vs_onnxruntime.py [--layers N] [--width N] [--heads N] [--vocab N]
[--past N] [--runs N] [--threads N] (default 6 layers of 256, 4 heads, a vocabulary of 1000,
64 past positions). ONNX_TIMING=PATH runs that prebuilt onnx_timing binary instead of
`cargo run --release --example onnx_timing`.
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto

from ort_compare import compare, onnxruntime_run, save, wgpu_ops_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--vocab", type=int, default=1000)
parser.add_argument("--past", type=int, default=64)
parser.add_argument("--runs", type=int, default=20)
parser.add_argument("--threads", type=int, default=0)
opts = parser.parse_args()
layers, width, heads = opts.layers, opts.width, opts.heads
if width % heads:
    parser.error("the width must be a multiple of the heads")
head = width // heads

rng = np.random.default_rng(0)
weights, nodes = [], []


def weight(name, *shape, scale=0.05):
    weights.append(numpy_helper.from_array(
        (rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name


def constant(name, value):
    weights.append(numpy_helper.from_array(np.array(value), name))
    return name


def node(op, inputs, outputs=None, **attrs):
    outputs = outputs or [f"{op}_{len(nodes)}"]
    nodes.append(helper.make_node(op, inputs, outputs, **attrs))
    return outputs[0] if len(outputs) == 1 else outputs


def norm(x, name):
    return node("LayerNormalization", [x, weight(f"{name}_g", width, scale=1.0),
                                       weight(f"{name}_b", width)], axis=-1)


f32 = TensorProto.FLOAT
to_heads = constant("to_heads", np.array([1, -1, heads, head], np.int64))
from_heads = constant("from_heads", np.array([1, -1, width], np.int64))
sqrt2, one, half = (constant(n, np.float32(v)) for n, v in
                    [("sqrt2", np.sqrt(2)), ("one", 1), ("half", 0.5)])
scale = constant("scale", np.float32(1 / np.sqrt(head)))
inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])]
outputs = [helper.make_tensor_value_info("logits", f32, [1, 1, opts.vocab])]
feeds = {"input_ids": np.array([[5]], np.int64)}
x = node("Gather", [weight("embedding", opts.vocab, width), "input_ids"])
for l in range(layers):
    qkv = node("Add", [node("MatMul", [norm(x, f"ln1_{l}"), weight(f"qkv_{l}", width, 3 * width)]),
                       weight(f"qkv_bias_{l}", 3 * width)])
    q, k, v = node("Split", [qkv, constant(f"split_{l}", np.array([width] * 3, np.int64))],
                   [f"q_{l}", f"k_{l}", f"v_{l}"], axis=-1)
    q, k, v = (node("Transpose", [node("Reshape", [t, to_heads])], perm=[0, 2, 1, 3])
               for t in (q, k, v))
    for kind in "kv":
        feeds[f"past_{kind}{l}"] = (rng.standard_normal((1, heads, opts.past, head)) * 0.5
                                    ).astype(np.float32)
        inputs.append(helper.make_tensor_value_info(f"past_{kind}{l}", f32,
                                                    [1, heads, "past", head]))
        outputs.append(helper.make_tensor_value_info(f"present_{kind}{l}", f32,
                                                     [1, heads, "total", head]))
    k = node("Concat", [f"past_k{l}", k], [f"present_k{l}"], axis=2)
    v = node("Concat", [f"past_v{l}", v], [f"present_v{l}"], axis=2)
    scores = node("Mul", [node("MatMul", [q, node("Transpose", [k], perm=[0, 1, 3, 2])]), scale])
    a = node("MatMul", [node("Softmax", [scores], axis=-1), v])
    a = node("Reshape", [node("Transpose", [a], perm=[0, 2, 1, 3]), from_heads])
    a = node("Add", [node("MatMul", [a, weight(f"out_{l}", width, width)]),
                     weight(f"out_bias_{l}", width)])
    x = node("Add", [x, a])
    f = node("Add", [node("MatMul", [norm(x, f"ln2_{l}"), weight(f"up_{l}", width, 4 * width)]),
                     weight(f"up_bias_{l}", 4 * width)])
    gelu = node("Mul", [node("Mul", [f, node("Add", [node("Erf", [node("Div", [f, sqrt2])]),
                                                      one])]), half])
    f = node("Add", [node("MatMul", [gelu, weight(f"down_{l}", 4 * width, width)]),
                     weight(f"down_bias_{l}", width)])
    x = node("Add", [x, f])
node("MatMul", [norm(x, "ln_f"), weight("unembedding", width, opts.vocab)], ["logits"])
graph = helper.make_graph(nodes, "decoder", inputs, outputs, weights)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="wgpu-ops")
onnx.checker.check_model(model)

work, path = save(model, feeds, "decoder-")
want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs)
worst = compare(work, [o.name for o in outputs], want)
print(report)
lines = report.splitlines()
resident = next(l for l in lines if l.startswith("tensors on the GPU:"))
planned = next(l for l in lines if l.startswith("tensors on the GPU, every run planned"))


def figures(line):
    return float(line.split("median ")[1].split()[0]), float(line.split("host ")[1].split()[0])


replayed_ms, replayed_host = figures(resident)
planned_ms, planned_host = figures(planned)
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
print(f"decoder: {layers} layers of {width}, {heads} heads, vocabulary {opts.vocab}, "
      f"{opts.past} past positions, {len(nodes)} nodes: outputs match onnxruntime (rtol 1e-3, "
      f"atol 1e-5; worst error {worst:.2f} of the bound)")
print(f"onnxruntime {ort.__version__} CPU, threads {threads}: {ort_ms:.3f} ms per token")
print(f"wgpu-ops, inputs uploaded and outputs read back: {ours_ms:.3f} ms per token, "
      f"{dispatches:.0f} dispatches; ratio to onnxruntime {ort_ms / ours_ms:.2f}x")
print(f"wgpu-ops, tensors on the GPU, replayed (a cache of fixed shape): {replayed_ms:.3f} ms "
      f"per token, host {replayed_host:.3f} ms")
print(f"wgpu-ops, tensors on the GPU, every run planned (a cache that grows): {planned_ms:.3f} "
      f"ms per token, host {planned_host:.3f} ms; host / onnxruntime's whole step "
      f"{planned_host / ort_ms:.2f}")
sys.stdout.flush()
