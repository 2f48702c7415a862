#!/usr/bin/env python3
"""A scikit-learn Gaussian-process regressor (RBF kernel) exported by skl2onnx, whose pairwise
distances are a Scan over the training rows (Sub, ReduceSumSquare, Identity). Runs the model on
onnxruntime (CPU) and on wgpu-ops (examples/onnx_timing.rs), compares the outputs and prints
both times, per run and per Scan iteration.

Usage: scripts/sklearn_gpr_vs_onnxruntime.py [TRAIN [FEATURES [QUERIES]]] [--f64] [--runs N]
[--threads N] [--copied-elements] [--export DIR | --model DIR]
(default 2000 training rows of 5 features, 1000 queries, f32). --copied-elements also times
wgpu-ops with the Scan's elements copied each iteration (not bound in place). Exporting needs
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
parser.add_argument("size", nargs="*", type=int, default=[], metavar="TRAIN FEATURES QUERIES")
parser.add_argument("--f64", action="store_true")
parser.add_argument("--runs", type=int, default=5)
parser.add_argument("--threads", type=int, default=0)
parser.add_argument("--copied-elements", action="store_true")
parser.add_argument("--export", metavar="DIR")
parser.add_argument("--model", metavar="DIR")
opts = parser.parse_args()
if len(opts.size) > 3:
    parser.error("give at most TRAIN FEATURES QUERIES")
train, features, queries = opts.size + [2000, 5, 1000][len(opts.size):]
dtype = np.float64 if opts.f64 else np.float32

if opts.model:
    model, x, (train, features, queries) = load_exported(opts.model)
    opts.f64 = x.dtype == np.float64
else:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF
    from skl2onnx import to_onnx

    rng = np.random.RandomState(0)
    x_train = rng.rand(train, features)
    y_train = np.sin(3 * x_train).sum(1) + 0.1 * rng.randn(train)
    gpr = GaussianProcessRegressor(kernel=RBF(0.5), alpha=1e-2).fit(x_train, y_train)
    x = rng.rand(queries, features).astype(dtype)
    model = to_onnx(gpr, x[:1], target_opset=17)
scans = [n for n in model.graph.node if n.op_type == "Scan"]
assert scans, "skl2onnx no longer exports a Scan for the pairwise distances"
if opts.export:
    export_and_exit(opts.export, model, x, [train, features, queries])

name = model.graph.input[0].name
feeds = {name: x}
work, path = save(model, feeds, "gpr-")
want, ort_ms = onnxruntime_run(path, feeds, opts.runs, opts.threads)
extra = ["--copied-elements"] if opts.copied_elements else []
report, ours_ms, dispatches = wgpu_ops_run(work, path, feeds, opts.runs, extra)
# Float results as onnxruntime's own tests compare them (f32: rtol 1e-4, atol 1e-5; f64
# tighter, as tests/sklearn_models.rs).
rtol, atol = (1e-9, 1e-12) if opts.f64 else (1e-4, 1e-5)
outputs = [o.name for o in model.graph.output]
worst = 0.0
for out, w in zip(outputs, want):
    got = np.load(os.path.join(work, "out", out + ".npy"))
    worst = max(worst, float((np.abs(got - w) / (atol + rtol * np.abs(w))).max()))
    np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, err_msg=out)
print(report)
threads = opts.threads or f"default ({os.cpu_count()} logical cores)"
kind = "f64" if opts.f64 else "f32"
print(f"Gaussian process ({kind}), {train} training rows of {features} features, {queries} "
      f"queries: a Scan of {train} iterations; outputs match onnxruntime (rtol {rtol:g}, "
      f"atol {atol:g}; worst error {worst:.2f} of the bound)")
print(f"onnxruntime {ort.__version__} CPU, threads {threads}: {ort_ms:.2f} ms per run")
print(f"wgpu-ops: {ours_ms:.2f} ms per run (inputs uploaded, outputs read back), "
      f"{ours_ms / train * 1e3:.1f} us per iteration, {dispatches / train:.2f} dispatches per "
      f"iteration; ratio to onnxruntime {ort_ms / ours_ms:.2f}x")
sys.stdout.flush()
