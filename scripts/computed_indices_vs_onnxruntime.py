#!/usr/bin/env python3
"""Gathers and scatters at indices computed in the graph, against onnxruntime: some of the
indices are out of range, which both must refuse (onnxruntime stops; we report the index
after the run, read back with the outputs), and the others must give the same values.

Each model takes data and indices as inputs and computes the indices it uses on the GPU
(`Add` of a zero given as an input, so nothing is known while planning), then one of Gather,
GatherElements, GatherND (batch_dims 0 or 1), ScatterElements and ScatterND (reduction none
with distinct targets, or add on i32 data, so that the order of updates does not matter). In
about half the models one index is out of range, on either side, by a little or by far.
Then the ops whose rules on such values a node `CheckValues` holds (no inner kernel reads
them as indices of their own): TensorScatter's write indices (linear or circular),
RotaryEmbedding's position ids, MaxUnpool's indices, OneHotEncoder's values with `zeros` 0,
again half of them broken. Values compare bit for bit (RotaryEmbedding's within 1e-6, as its products may round
differently). Prints each disagreement (the model and its inputs are kept in
WORK_DIR) and a summary: both ran and agree, both refused, mismatches.

Not part of the tests (each model is a run of the command); tests/gpu_indices.rs holds the
cases in Rust against the CPU interpreter.

usage: scripts/computed_indices_vs_onnxruntime.py WGPU_OPS_BINARY [COUNT] [SEED] [WORK_DIR]
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

warnings.filterwarnings("ignore")
ort.set_default_logger_severity(4)  # its refusals are expected: they are compared, not shown
T = onnx.TensorProto
binary = os.path.abspath(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 100
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
work = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp()
os.makedirs(work, exist_ok=True)
OPS = ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"]
VALUE_OPS = ["TensorScatter", "RotaryEmbedding", "OneHotEncoder", "MaxUnpool"]


def in_range(rng, n, size):
    return rng.integers(-n, n, size=size) if n > 0 else np.zeros(size, np.int64)


def spoil(rng, idx, n):
    """One entry of `idx` out of range for an axis of `n` (half the time)."""
    if idx.size == 0 or rng.random() < 0.5:
        return idx
    flat = idx.reshape(-1)
    far = int(rng.choice([0, 1, 2, 1 << 33]))
    flat[rng.integers(flat.size)] = n + far if rng.random() < 0.5 else -n - 1 - far
    return idx


def value_case(rng, op):
    """A model of `op` whose checked input is computed (`Add` of a zero), its feeds, and what
    to call it; one value breaks the rule half the time."""
    far = int(rng.choice([0, 1, 2, 1 << 33]))
    broken = rng.random() < 0.5
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    if op == "TensorScatter":
        b, s, d = (int(v) for v in rng.integers(1, 5, size=3))
        s += 2
        length = int(rng.integers(1, s + 1))
        circular = rng.random() < 0.5
        last = s - 1 if circular else s - length
        idx = rng.integers(0, last + 1, size=[b]).astype(np.int64)
        if broken:
            low = circular or rng.random() < 0.5
            idx[rng.integers(b)] = -1 - far if low else last + 1 + far
        attrs = {"mode": "circular" if circular else "linear"}
        feeds = {"past": f32(b, s, d), "update": f32(b, length, d)}
        return attrs, feeds, ["past", "update", "at"], idx, 24, ""
    if op == "RotaryEmbedding":
        b, h, s = (int(v) for v in rng.integers(1, 4, size=3))
        half = int(rng.integers(1, 4))
        # onnxruntime refuses caches shorter than the sequence ("updating" them).
        rows = s + int(rng.integers(0, 4))
        idx = rng.integers(0, rows, size=[b, s]).astype(np.int64)
        if broken:
            idx.reshape(-1)[rng.integers(idx.size)] = -1 - far if rng.random() < 0.5 else rows + far
        attrs = {"interleaved": int(rng.integers(0, 2))}
        feeds = {"x": f32(b, h, s, 2 * half), "cos": f32(rows, half), "sin": f32(rows, half)}
        return attrs, feeds, ["x", "cos", "sin", "at"], idx, 23, ""
    if op == "MaxUnpool":
        x_shape = [int(v) for v in rng.integers(1, 4, size=4)]
        total = x_shape[0] * x_shape[1] * 4 * x_shape[2] * x_shape[3]
        # Distinct positions, so that the order of the scatter's writes does not matter.
        idx = rng.permutation(total)[: int(np.prod(x_shape))].reshape(x_shape).astype(np.int64)
        if broken:
            idx.reshape(-1)[rng.integers(idx.size)] = -1 - far if rng.random() < 0.5 else total + far
        attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
        return attrs, {"x": f32(*x_shape)}, ["x", "at"], idx, 22, ""
    cats = sorted(set(int(v) for v in rng.integers(-20, 20, size=int(rng.integers(1, 6)))))
    idx = rng.choice(cats, size=[int(rng.integers(1, 4)), int(rng.integers(1, 4))]).astype(np.int64)
    if broken:
        missing = [v for v in range(-25, 25) if v not in cats] + [1 << 33]
        idx.reshape(-1)[rng.integers(idx.size)] = int(rng.choice(missing))
    return {"cats_int64s": cats, "zeros": 0}, {}, ["at"], idx, 21, "ai.onnx.ml"


def case(rng):
    op = str(rng.choice(OPS))
    rank = int(rng.integers(1, 4))
    shape = [int(d) for d in rng.integers(1, 5, size=rank)]
    attrs = {}
    scatter_add = op.startswith("Scatter") and rng.random() < 0.5
    dtype = np.int32 if scatter_add else np.float32
    data = (rng.integers(-50, 50, size=shape)).astype(dtype)
    extra = []
    if op in ("Gather", "GatherElements", "ScatterElements"):
        axis = int(rng.integers(-rank, rank))
        attrs["axis"] = axis
        n = shape[axis]
        if op == "Gather":
            ishape = [int(d) for d in rng.integers(1, 4, size=int(rng.integers(1, 3)))]
            idx = in_range(rng, n, ishape)
        else:
            ishape = list(shape)
            ishape[axis] = int(rng.integers(1, n + 1)) if op == "ScatterElements" else int(rng.integers(1, 5))
            if op == "ScatterElements" and not scatter_add:
                # Distinct targets along the axis in each column: a permutation's prefix.
                idx = np.stack([rng.permutation(n)[: ishape[axis]] for _ in range(int(np.prod(ishape)) // ishape[axis])])
                idx = np.moveaxis(idx.reshape([-1] + [ishape[axis]]), -1, 0)
                other = [d for k, d in enumerate(ishape) if k != axis % rank]
                idx = np.moveaxis(idx.reshape([ishape[axis]] + other), 0, axis % rank)
            else:
                idx = in_range(rng, n, ishape)
        idx = spoil(rng, idx.astype(np.int64), n)
        if op == "ScatterElements":
            extra = [("updates", rng.integers(-9, 9, size=idx.shape).astype(dtype))]
    elif op == "GatherND":
        b = int(rng.integers(0, min(2, rank)))
        attrs["batch_dims"] = b
        k = int(rng.integers(1, rank - b + 1))
        lead = shape[:b] + [int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 2)))]
        idx = np.stack([in_range(rng, shape[b + j], lead) for j in range(k)], axis=-1)
        if rng.random() < 0.5 and idx.size:
            j = int(rng.integers(k))
            flat = idx.reshape(-1, k)
            far = int(rng.choice([0, 1, 1 << 33]))
            n = shape[b + j]
            flat[rng.integers(flat.shape[0]), j] = n + far if rng.random() < 0.5 else -n - 1 - far
    else:  # ScatterND
        k = int(rng.integers(1, rank + 1))
        rows = int(np.prod(shape[:k]))
        m = int(rng.integers(1, rows + 1))
        # Distinct tuples (a permutation of the rows), negative half the time.
        picks = rng.permutation(rows)[:m]
        idx = np.stack(np.unravel_index(picks, shape[:k]), axis=-1).astype(np.int64)
        neg = rng.random(idx.shape) < 0.5
        idx = np.where(neg, idx - np.array(shape[:k]), idx)
        if rng.random() < 0.5:
            j = int(rng.integers(k))
            n = shape[j]
            far = int(rng.choice([0, 1, 1 << 33]))
            idx[rng.integers(m), j] = n + far if rng.random() < 0.5 else -n - 1 - far
        extra = [("updates", rng.integers(-9, 9, size=[m] + shape[k:]).astype(dtype))]
        if scatter_add:
            attrs["reduction"] = "add"
    if op == "ScatterElements" and scatter_add:
        attrs["reduction"] = "add"
    return op, data, np.ascontiguousarray(idx, np.int64), extra, attrs


def run_ours(path, feeds, out):
    args = [binary, "run", path, "--out", out]
    for name, v in feeds.items():
        f = os.path.join(os.path.dirname(path), f"{name}.npy")
        np.save(f, v)
        args += ["--input", f"{name}={f}"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return np.load(os.path.join(out, "y.npy")), None


rng = np.random.default_rng(seed)
tally = {"agree": 0, "both refused": 0, "mismatch": 0}
per_op = {}
for m in range(count):
    opsets = [helper.make_opsetid("", 18)]
    if m % 3 == 2:
        # Every third model: an op whose values CheckValues holds.
        op = str(rng.choice(VALUE_OPS))
        attrs, given, names, idx, opset, domain = value_case(rng, op)
        data = np.zeros(0, np.float32)
        extra = list(given.items())
        nodes = [helper.make_node("Add", ["i", "z"], ["at"]),
                 helper.make_node(op, names, ["y"], domain=domain, **attrs)]
        inputs = [helper.make_tensor_value_info("i", T.INT64, idx.shape),
                  helper.make_tensor_value_info("z", T.INT64, [])]
        opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 3)] if domain else [])
    else:
        op, data, idx, extra, attrs = case(rng)
        names = ["data", "at"] + [n for n, _ in extra]
        nodes = [helper.make_node("Add", ["i", "z"], ["at"]), helper.make_node(op, names, ["y"], **attrs)]
        inputs = [helper.make_tensor_value_info("data", T.INT32 if data.dtype == np.int32 else T.FLOAT, data.shape),
                  helper.make_tensor_value_info("i", T.INT64, idx.shape),
                  helper.make_tensor_value_info("z", T.INT64, [])]
    onnx_dtype = T.INT32 if data.dtype == np.int32 else T.FLOAT
    inputs += [helper.make_tensor_value_info(n, onnx_dtype, v.shape) for n, v in extra]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", onnx_dtype, None)])
    model = helper.make_model(g, opset_imports=opsets)
    d = os.path.join(work, f"m{m}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    feeds = {"i": idx, "z": np.array(0, np.int64), **dict(extra)}
    if data.size:
        feeds["data"] = data
    try:
        want, ort_error = ort.InferenceSession(path).run(None, feeds)[0], None
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusals are what is compared
        want, ort_error = None, str(e).splitlines()[0][:160]
    got, our_error = run_ours(path, feeds, os.path.join(d, "out"))
    what = f"m{m} {op} {attrs} data {list(data.shape)} {data.dtype} indices {list(idx.shape)}"
    # An index op's error says it was read on the GPU; a value rule's names its op's input.
    reported = op in VALUE_OPS or "read on the GPU" in (our_error or "")
    close = op == "RotaryEmbedding" and want is not None and got is not None \
        and want.shape == got.shape and np.allclose(want, got, rtol=1e-6, atol=1e-6)
    counts = per_op.setdefault(op, [0, 0, 0])
    if want is None and got is None:
        counts[1] += 1
        tally["both refused"] += 1
        if not reported or f"{op}:" not in our_error:
            print(f"{what}: both refuse, ours not as a value read on the GPU: {our_error}")
    elif want is not None and got is not None and want.dtype == got.dtype and (np.array_equal(want, got) or close):
        counts[0] += 1
        tally["agree"] += 1
    else:
        counts[2] += 1
        tally["mismatch"] += 1
        print(f"{what}: onnxruntime {ort_error or 'ran'}; ours {our_error or 'ran'}")
        if want is not None and got is not None:
            print(f"  want {want.reshape(-1)[:12]}\n  got  {got.reshape(-1)[:12]}")
print(f"{tally} (seed {seed}, models in {work})")
print("per op (agree, both refused, mismatch):", ", ".join(f"{k} {tuple(v)}" for k, v in sorted(per_op.items())))
