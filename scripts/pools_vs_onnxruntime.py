#!/usr/bin/env python3
"""Pools and a padded Conv of the sizes CNNs use, each a one-node ONNX model, on onnxruntime
(CPU) and on wgpu-ops (examples/onnx_timing.rs): outputs compared (float32: rtol 1e-3, atol
1e-5, the bounds onnxruntime's own tests use; the maxima are equal bit for bit), and the
median time per run of each, with the tensors on the GPU too.

Cases: ResNet's stem MaxPool (3x3, stride 2, [1, 64, 112, 112]), Inception's AveragePool
(3x3 without the padding counted, [1, 192, 35, 35]), YOLO's SPP MaxPool (13x13,
[1, 512, 20, 20]), a 3x3 Conv of a 155 MB input ([1, 32, 1100, 1100], beyond lavapipe's
128 MiB binding), a whole-tensor ReduceSum and a column ReduceMax of 256 MiB inputs
(rows longer than that binding), a reflect Pad of a 256 MiB row (an STFT's centring) and a
Pad of every axis of a 135 MB matrix.

Usage: scripts/pools_vs_onnxruntime.py [--runs N] [--threads N] [NAME_FILTER]
ONNX_TIMING=PATH runs that prebuilt onnx_timing binary instead of
`cargo run --release --example onnx_timing`.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ort_compare import case_options, compare, onnxruntime_run, save, timing_text, wgpu_ops_run

opts = case_options(__doc__)


def one_node(op, shape, inits=(), **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    names = ["x"] + [t.name for t in inits]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], op, [x], [y],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


rng = np.random.default_rng(0)
weights = numpy_helper.from_array((rng.standard_normal((8, 32, 3, 3)) * 0.1).astype(np.float32),
                                  "w")
cases = [
    ("maxpool-stem", one_node("MaxPool", [1, 64, 112, 112], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1])),
    ("averagepool-inception", one_node("AveragePool", [1, 192, 35, 35], kernel_shape=[3, 3],
                                       pads=[1, 1, 1, 1], count_include_pad=0)),
    ("maxpool-spp", one_node("MaxPool", [1, 512, 20, 20], kernel_shape=[13, 13],
                             pads=[6, 6, 6, 6])),
    ("conv-155mb", one_node("Conv", [1, 32, 1100, 1100], [weights], pads=[1, 1, 1, 1])),
    # Rows longer than lavapipe's 128 MiB binding: folded in chunks, then merged.
    ("reducesum-all-256mb", one_node("ReduceSum", [64, 1024, 1024])),
    ("reducemax-columns-256mb", one_node("ReduceMax", [256, 262144],
                                         [numpy_helper.from_array(np.array([0]), "axes")])),
    # Pads whose rows are longer than that binding: the output cut into runs whose inputs fit.
    ("pad-reflect-row-256mb", one_node("Pad", [1, 67108864],
                                       [numpy_helper.from_array(np.array([0, 512, 0, 512]),
                                                                "pads")], mode="reflect")),
    ("pad-every-axis-135mb", one_node("Pad", [4100, 8200],
                                      [numpy_helper.from_array(np.array([1, 1, 1, 1]),
                                                               "pads")])),
]
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
print(f"onnxruntime {ort.__version__} CPU, threads {threads}; {opts.runs} runs each")
for name, model in cases:
    if opts.only not in name:
        continue
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    work, path = save(model, feeds, name + "-")
    want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
    report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs)
    worst = compare(work, ["y"], want)
    print(f"{name}: outputs match (worst error {worst:.2f} of the bound); "
          + timing_text(report, ort_ms, ours_ms, dispatches))
    sys.stdout.flush()
