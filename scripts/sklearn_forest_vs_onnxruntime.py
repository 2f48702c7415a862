#!/usr/bin/env python3
"""A scikit-learn random forest (regressor) exported by skl2onnx, whose graph is one ONNX-ML
TreeEnsembleRegressor: wgpu-ops walks every tree for every row in one TreeWalk dispatch. Runs
the model on onnxruntime (CPU) and on wgpu-ops (examples/onnx_timing.rs), compares the outputs
(f32: rtol 1e-4, atol 1e-5, as onnxruntime's own tests compare floats) and prints both times.

Usage: scripts/sklearn_forest_vs_onnxruntime.py [TREES [DEPTH [ROWS]]] [--runs N]
[--threads N] [--train N] [--export DIR | --model DIR]
(default 100 trees at most 10 deep, trained on 2000 rows, 8 features, 10 000 query rows; a
deep forest trained on many rows has node tables beyond a binding: 40 trees 40 deep trained
on 200 000 rows hold about 10 million nodes, 160 MB). Exporting needs
scikit-learn and skl2onnx besides numpy and onnxruntime: --export DIR only writes the model and
its input there, --model DIR runs one written so (on a machine without scikit-learn).
ONNX_TIMING=PATH runs that prebuilt onnx_timing binary instead of
`cargo run --release --example onnx_timing`.
"""
import argparse
import os
import sys

import numpy as np
import onnxruntime as ort

from ort_compare import export_and_exit, load_exported, onnxruntime_run, save, wgpu_ops_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("size", nargs="*", type=int, default=[], metavar="TREES DEPTH ROWS")
parser.add_argument("--runs", type=int, default=5)
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--train", type=int, default=2000, help="training rows")
parser.add_argument("--export", metavar="DIR")
parser.add_argument("--model", metavar="DIR")
opts = parser.parse_args()
if len(opts.size) > 3:
    parser.error("give at most TREES DEPTH ROWS")
trees, depth, rows = opts.size + [100, 10, 10000][len(opts.size):]

if opts.model:
    model, x, (trees, depth, rows) = load_exported(opts.model)
else:
    from sklearn.ensemble import RandomForestRegressor
    from skl2onnx import to_onnx

    rng = np.random.RandomState(0)
    x_train = rng.rand(opts.train, 8)
    y_train = np.sin(3 * x_train).sum(1)
    forest = RandomForestRegressor(trees, max_depth=depth, random_state=0, n_jobs=-1)
    forest.fit(x_train, y_train)
    nodes = sum(t.tree_.node_count for t in forest.estimators_)
    print(f"{nodes} nodes in all ({nodes * 16 / 2**20:.0f} MiB as wgpu-ops' node table)")
    x = rng.rand(rows, 8).astype(np.float32)
    model = to_onnx(forest, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
assert any(n.op_type == "TreeEnsembleRegressor" for n in model.graph.node), \
    "skl2onnx no longer exports a TreeEnsembleRegressor for the forest"
if opts.export:
    export_and_exit(opts.export, model, x, [trees, depth, rows])

name = model.graph.input[0].name
feeds = {name: x}
work, path = save(model, feeds, "forest-")
want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs)
rtol, atol = 1e-4, 1e-5
worst = 0.0
for out, w in zip([o.name for o in model.graph.output], want):
    got = np.load(os.path.join(work, "out", out + ".npy"))
    worst = max(worst, float((np.abs(got - w) / (atol + rtol * np.abs(w))).max()))
    np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, err_msg=out)
print(report)
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
print(f"random forest, {trees} trees at most {depth} deep, {rows} rows of 8 features (f32): "
      f"outputs match onnxruntime (rtol {rtol:g}, atol {atol:g}; worst error {worst:.2f} of "
      f"the bound)")
print(f"onnxruntime {ort.__version__} CPU, threads {threads}: {ort_ms:.2f} ms per run")
print(f"wgpu-ops: {ours_ms:.2f} ms per run (inputs uploaded, outputs read back), "
      f"{dispatches} dispatches per run; ratio to onnxruntime {ort_ms / ours_ms:.2f}x")
sys.stdout.flush()
