#!/usr/bin/env python3
"""Gathers and scatters at indices computed in the graph, against onnxruntime: some of the
indices are out of range, which both must refuse (onnxruntime stops; we report the index
after the run, read back with the outputs), and the others must give the same values.

Each model takes data and indices as inputs and computes the indices it uses on the GPU
(`Add` of a zero given as an input, so nothing is known while planning), then one of Gather,
GatherElements, GatherND (batch_dims 0 or 1), ScatterElements and ScatterND (reduction none
with distinct targets, or add on i32 data, so that the order of updates does not matter). In
about half the models one index is out of range, on either side, by a little or by far.
Values compare bit for bit. Prints each disagreement (the model and its inputs are kept in
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
for m in range(count):
    op, data, idx, extra, attrs = case(rng)
    onnx_dtype = T.INT32 if data.dtype == np.int32 else T.FLOAT
    names = ["data", "at"] + [n for n, _ in extra]
    nodes = [helper.make_node("Add", ["i", "z"], ["at"]), helper.make_node(op, names, ["y"], **attrs)]
    inputs = [helper.make_tensor_value_info("data", onnx_dtype, data.shape),
              helper.make_tensor_value_info("i", T.INT64, idx.shape),
              helper.make_tensor_value_info("z", T.INT64, [])]
    inputs += [helper.make_tensor_value_info(n, onnx_dtype, v.shape) for n, v in extra]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", onnx_dtype, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    d = os.path.join(work, f"m{m}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    feeds = {"data": data, "i": idx, "z": np.array(0, np.int64), **dict(extra)}
    try:
        want, ort_error = ort.InferenceSession(path).run(None, feeds)[0], None
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusals are what is compared
        want, ort_error = None, str(e).splitlines()[0][:160]
    got, our_error = run_ours(path, feeds, os.path.join(d, "out"))
    what = f"m{m} {op} {attrs} data {list(data.shape)} {data.dtype} indices {list(idx.shape)}"
    if want is None and got is None:
        tally["both refused"] += 1
        if "read on the GPU" not in our_error:
            print(f"{what}: both refuse, ours not as an index read on the GPU: {our_error}")
    elif want is not None and got is not None and want.dtype == got.dtype and np.array_equal(want, got):
        tally["agree"] += 1
    else:
        tally["mismatch"] += 1
        print(f"{what}: onnxruntime {ort_error or 'ran'}; ours {our_error or 'ran'}")
        if want is not None and got is not None:
            print(f"  want {want.reshape(-1)[:12]}\n  got  {got.reshape(-1)[:12]}")
print(f"{tally} (seed {seed}, models in {work})")
