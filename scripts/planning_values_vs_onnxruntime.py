#!/usr/bin/env python3
"""Ops whose inputs' values plan them (counts, axes, pads, shapes, positions), given extreme
values (negative, zero, past the axis, 2^40) as constants (folded on the host) or as graph
inputs, run through `wgpu-ops run`: every run must end in 0 or in exit 1 with one `error:`
line; where onnxruntime runs the model, ours must agree, and where it refuses, ours should
refuse too (printed when not).

usage: scripts/planning_values_vs_onnxruntime.py WGPU_OPS_BINARY COUNT SEED WORK_DIR
"""
import os, subprocess, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, numpy_helper
T = onnx.TensorProto
binary, count, seed, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(seed)
BIG = [1 << 40, 1 << 31, (1 << 63) - 1, -(1 << 63), 2 ** 32 + 1]
def bad_int(lo=-3, hi=6):
    r = rng.random()
    if r < 0.25: return int(rng.choice(BIG))
    if r < 0.4: return int(rng.integers(-(1 << 20), 1 << 20))
    return int(rng.integers(lo, hi))
def ints(n, lo=-3, hi=6): return np.array([bad_int(lo, hi) for _ in range(n)], np.int64)
def x(shape=None, dt=np.float32):
    shape = shape or tuple(int(d) for d in rng.integers(1, 5, rng.integers(1, 4)))
    return (rng.standard_normal(shape) * 3).astype(dt)
def badf():
    return float(rng.choice([0.0, -1.0, np.nan, np.inf, 1e10, 0.5, 2.0, 1e-10, 3.0]))
def gen(op):
    a = x()
    r = a.ndim
    if op == "Reshape": return {}, [("d", a), ("s", ints(rng.integers(1, 4), -2, 5))]
    if op == "Expand": return {}, [("d", a), ("s", ints(rng.integers(1, 4), -1, 5))]
    if op == "Tile": return {}, [("d", a), ("s", ints(r, -1, 4))]
    if op in ("Squeeze", "Unsqueeze"): return {}, [("d", a), ("s", ints(rng.integers(1, 3), -5, 5))]
    if op == "Split": return {}, [("d", a), ("s", ints(2, -1, 5))]
    if op == "TopK": return {}, [("d", a), ("s", ints(1, -1, 6))]
    if op == "Slice":
        n = int(rng.integers(1, r + 1))
        return {}, [("d", a), ("b", ints(n, -6, 6)), ("e", ints(n, -6, 6)), ("ax", ints(n, -r - 1, r + 1)), ("st", ints(n, -3, 3))]
    if op == "Pad": return {"mode": str(rng.choice(["constant", "reflect", "edge", "wrap"]))}, [("d", a), ("p", ints(2 * r, -4, 4))]
    if op == "OneHot": return {}, [("i", ints(3, -4, 4)), ("depth", np.array(badf() if rng.random() < 0.5 else bad_int(-2, 6), np.float32)), ("v", np.array([0, 1], np.float32))]
    if op == "Range": return {}, [("a", np.array(bad_int(), np.int64)), ("l", np.array(bad_int(), np.int64)), ("dl", np.array(bad_int(-2, 3), np.int64))]
    if op == "ConstantOfShape": return {}, [("s", ints(rng.integers(1, 3), -1, 4))]
    if op == "CumSum": return {}, [("d", a), ("s", np.array(bad_int(-4, 4), np.int64))]
    if op == "ReduceSum": return {"keepdims": int(rng.integers(0, 2))}, [("d", a), ("s", ints(rng.integers(1, 3), -4, 4))]
    if op == "Trilu": return {"upper": int(rng.integers(0, 2))}, [("d", x((3, 4))), ("s", np.array(bad_int(-5, 5), np.int64))]
    if op == "ReverseSequence":
        b = x((3, 4, 2))
        return {"batch_axis": 1, "time_axis": 0}, [("d", b), ("s", ints(4, -1, 5))]
    if op == "CenterCropPad": return {}, [("d", a), ("s", ints(r, -1, 6))]
    if op == "Gather": return {"axis": int(rng.integers(-r, r))}, [("d", a), ("s", ints(3, -6, 6))]
    if op == "GatherElements":
        return {"axis": 0}, [("d", x((3, 2))), ("s", ints(4, -5, 5).reshape(2, 2))]
    if op == "ScatterElements":
        return {"axis": 0}, [("d", x((3, 2))), ("s", ints(4, -5, 5).reshape(2, 2)), ("u", x((2, 2)))]
    if op == "GatherND": return {}, [("d", x((3, 2))), ("s", ints(4, -5, 5).reshape(2, 2))]
    if op == "ScatterND": return {}, [("d", x((3, 2))), ("s", ints(2, -5, 5).reshape(2, 1)), ("u", x((2, 2)))]
    if op == "Resize":
        b = x((1, 1, 2, 3))
        if rng.random() < 0.5:
            return {}, [("d", b), ("roi", np.array([], np.float32)), ("sc", np.array([1, 1, badf(), badf()], np.float32))]
        return {}, [("d", b), ("roi", np.array([], np.float32)), ("sc", np.array([], np.float32)), ("sz", np.array([1, 1, bad_int(-1, 5), bad_int(-1, 5)], np.int64))]
    if op == "DFT": return {}, [("d", x((1, 5, 1))), ("s", np.array(bad_int(-1, 9), np.int64)), ("ax", np.array(bad_int(-3, 3), np.int64))]
    if op == "Col2Im": return {}, [("d", x((1, 4, 4))), ("s", ints(2, -1, 5)), ("b", ints(2, -1, 3))]
    if op == "AffineGrid": return {}, [("d", x((1, 2, 3))), ("s", ints(4, -1, 5))]
    if op in ("HannWindow", "HammingWindow", "BlackmanWindow"): return {}, [("s", np.array(bad_int(-2, 10), np.int64))]
    if op == "Dropout": return {}, [("d", a), ("ratio", np.array(badf(), np.float32)), ("t", np.array(bool(rng.integers(0, 2))))]
    if op == "NonMaxSuppression":
        boxes = np.abs(x((1, 3, 4)))
        return {}, [("b", boxes), ("sc", np.abs(x((1, 1, 3)))), ("m", np.array([bad_int(-2, 5)], np.int64)), ("iou", np.array([badf()], np.float32)), ("st", np.array([badf()], np.float32))]
    if op == "Compress": return {"axis": int(rng.integers(-r, r))}, [("d", a), ("s", rng.integers(0, 2, int(rng.integers(0, 6))).astype(bool))]
    if op == "MaxRoiPool":
        return {"pooled_shape": [2, 2]}, [("d", x((1, 1, 4, 4))), ("s", np.array([[0, bad_int(-3, 6), bad_int(-3, 6), bad_int(-3, 6), bad_int(-3, 6)]], np.float32))]
    if op == "SplitToSequence": return {}, [("d", a), ("s", ints(2, -1, 4))]
    raise KeyError(op)
OPS = ["Reshape", "Expand", "Tile", "Squeeze", "Unsqueeze", "Split", "TopK", "Slice", "Pad", "OneHot", "Range",
       "ConstantOfShape", "CumSum", "ReduceSum", "Trilu", "ReverseSequence", "CenterCropPad", "Gather",
       "GatherElements", "ScatterElements", "GatherND", "ScatterND", "Resize", "DFT", "Col2Im", "AffineGrid",
       "HannWindow", "HammingWindow", "BlackmanWindow", "Dropout", "NonMaxSuppression", "Compress", "MaxRoiPool",
       "SplitToSequence"]
OPSET = {"DFT": 20, "Col2Im": 18, "AffineGrid": 20, "HannWindow": 17, "HammingWindow": 17, "BlackmanWindow": 17,
         "CenterCropPad": 18, "MaxRoiPool": 21}
tally = {"ok": 0, "both refuse": 0, "ours refuses": 0, "ort refuses, ours runs": 0, "mismatch": 0, "crash": 0}
def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype: return False
    if a.dtype.kind != "f": return np.array_equal(a, b)
    return np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
for case in range(count):
    op = str(rng.choice(OPS))
    try:
        attrs, inputs = gen(op)
    except ValueError:
        continue
    constant = rng.random() < 0.5
    outs = ["Y", "Yi"] if op == "TopK" else ["Y0", "Y1"] if op == "Split" else ["Y"]
    node = helper.make_node(op, [n for n, _ in inputs], outs, **attrs)
    feeds = {} if constant else dict(inputs)
    inits = [numpy_helper.from_array(v, n) for n, v in inputs] if constant else []
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in feeds.items()],
                          [onnx.ValueInfoProto(name=o) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET.get(op, 21))]); m.ir_version = 10
    path = f"{work}/m{case}.onnx"; onnx.save(m, path)
    try:
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception:
        want = None
    args = [binary, "run", path, "--out", f"{work}/o{case}"]
    for k, v in feeds.items():
        np.save(f"{work}/m{case}_{k}.npy", v); args += ["--input", f"{k}={work}/m{case}_{k}.npy"]
    try:
        run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        tally["crash"] += 1; print(f"m{case} TIMEOUT {op} const={constant} {[(n, v.tolist()) for n, v in inputs if v.size < 12]}"); continue
    described = f"{op} {attrs} const={constant} {[(n, v.tolist() if v.size < 12 else v.shape) for n, v in inputs]}"
    lines = run.stderr.strip().splitlines()
    if run.returncode not in (0, 1) or (run.returncode == 1 and not (len(lines) == 1 and lines[0].startswith("error: "))):
        tally["crash"] += 1; print(f"m{case} CRASH rc={run.returncode} {described}: {run.stderr.strip()[-300:]}"); continue
    if want is None:
        if run.returncode: tally["both refuse"] += 1
        else: tally["ort refuses, ours runs"] += 1; print(f"m{case} ort refuses, ours runs: {described}")
        continue
    if run.returncode:
        tally["ours refuses"] += 1; print(f"m{case} ours refuses, ort runs: {described}: {lines[0][:200]}"); continue
    got = [np.load(f"{work}/o{case}/{o}.npy") for o in outs]
    if all(same(g_, w) for g_, w in zip(got, want)): tally["ok"] += 1
    else:
        tally["mismatch"] += 1
        print(f"m{case} MISMATCH {described}: ours {[g_.shape for g_ in got]} ort {[np.asarray(w).shape for w in want]}")
print(tally, f"(seed {seed})")
