"""Shared by the scripts that run one ONNX model on onnxruntime (CPU) and on wgpu-ops
(examples/onnx_timing.rs) and compare: saving the model and feeds, timing both, checking the
outputs with the bounds onnxruntime's own tests use for float32 (rtol 1e-3, atol 1e-5)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort


def case_options(doc):
    """The options of a script timing named cases: `[--runs N] [--threads N] [NAME_FILTER]`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("only", nargs="?", default="")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    return parser.parse_args()


def save(model, feeds, prefix):
    """Writes the model and one .npy per feed to a new folder; returns (folder, model path)."""
    work = tempfile.mkdtemp(prefix=prefix)
    path = os.path.join(work, "model.onnx")
    # The onnx package may write a newer IR version than the installed onnxruntime reads
    # (onnx 1.23's 14 against onnxruntime 1.30's 13); these models need nothing past IR 10.
    model.ir_version = min(model.ir_version, 10)
    onnx.save(model, path)
    for k, v in feeds.items():
        np.save(os.path.join(work, k + ".npy"), v)
    return work, path


def load_exported(folder):
    """A model, its input and its size as `export_and_exit` wrote them: (model, x, size)."""
    model = onnx.load(os.path.join(folder, "model.onnx"))
    x = np.load(os.path.join(folder, "x.npy"))
    with open(os.path.join(folder, "size.json")) as f:
        return model, x, json.load(f)


def export_and_exit(folder, model, x, size):
    """Writes the model, its input and its size to `folder` (for a machine without
    scikit-learn, which `load_exported` reads back) and exits."""
    os.makedirs(folder, exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    np.save(os.path.join(folder, "x.npy"), x)
    with open(os.path.join(folder, "size.json"), "w") as f:
        json.dump(size, f)
    print(f"wrote the model and its input to {folder}")
    sys.exit(0)


def onnxruntime_run(path, feeds, runs, threads=0):
    """onnxruntime's outputs and its median time per run (ms)."""
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    times = []
    for _ in range(runs):
        s = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - s)
    return want, sorted(times)[len(times) // 2] * 1e3


def wgpu_ops_run(work, path, feeds, runs, extra=()):
    """Runs onnx_timing (`ONNX_TIMING=PATH`, else through cargo) writing to work/out, with the
    flags of `ONNX_TIMING_FLAGS` too (`--profile`: the GPU time by kernel of one run); returns
    (its report, median ms per run, dispatches per run)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.environ.get("ONNX_TIMING")
    cmd = ([binary] if binary else
           ["cargo", "run", "-q", "--release", "--example", "onnx_timing", "--"]) + \
          [path, os.path.join(work, "out"), str(runs)] + list(extra) + \
          os.environ.get("ONNX_TIMING_FLAGS", "").split() + \
          [f"{k}={os.path.join(work, k + '.npy')}" for k in feeds]
    report = subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout
    lines = report.strip().splitlines()
    ms = float(next(l for l in lines if l.startswith("median of")).split(": ")[1].split()[0])
    counts = next(l for l in lines if l.startswith("dispatches per run"))
    dispatches = float(counts.split(": ")[1].split(",")[0])
    return report.strip(), ms, dispatches


def timing_text(report, ort_ms, ours_ms, dispatches):
    """Both times per run, onnx_timing's with the tensors on the GPU, and the ratios."""
    resident = next(l for l in report.splitlines() if l.startswith("tensors on the GPU"))
    gpu_ms = float(resident.split("median ")[1].split()[0])
    made = resident.split("buffers created per run ")[1].split()[0] if "buffers created" in resident else "?"
    return (f"onnxruntime {ort_ms:.2f} ms; wgpu-ops {ours_ms:.2f} ms per run ({dispatches} "
            f"dispatches), {gpu_ms:.2f} ms with the tensors on the GPU ({made} buffers created "
            f"per run); ratio to onnxruntime {ort_ms / ours_ms:.2f}x ({ort_ms / gpu_ms:.2f}x resident)")


def resident_line(report, steps, ort_ms, dispatches):
    """onnx_timing's runs on tensors already on the GPU, per step: total, host and the ratio to
    onnxruntime (whose inputs and outputs are in host memory already)."""
    line = next(l for l in report.splitlines() if l.startswith("tensors on the GPU"))
    ms = float(line.split("median ")[1].split()[0])
    host = float(line.split("host ")[1].split()[0])
    return (f"wgpu-ops, tensors on the GPU: {ms:.2f} ms per run, {ms / steps * 1e3:.1f} us per step "
            f"(host {host / steps * 1e3:.1f} us per step), {dispatches / steps:.2f} dispatches per "
            f"step; ratio to onnxruntime {ort_ms / ms:.2f}x")


def compare(work, names, want):
    """Asserts every output within rtol 1e-3, atol 1e-5; returns the worst error as a fraction
    of its bound."""
    worst = 0.0
    for name, w in zip(names, want):
        got = np.load(os.path.join(work, "out", name + ".npy"))
        err = np.abs(got - w) / (1e-5 + 1e-3 * np.abs(w))
        worst = max(worst, float(err.max()))
        np.testing.assert_allclose(got, w, rtol=1e-3, atol=1e-5, err_msg=name)
    return worst
