#!/usr/bin/env python3
"""Random ONNX graphs of element-wise chains against onnxruntime: what fusion, broadcasting
and dtype changes do together, which the one-node cases of ort_differential.py cannot show.

Each graph has two or three inputs of shapes that broadcast (ranks 0 to 4, sizes of 1 among
them), and 3 to 14 nodes drawn from the unary and binary element-wise ops, comparisons, Where,
Cast (between floats and integers, with NaN made 0 and the floats clipped into the
target's range first, as onnxruntime's casts of other floats are undefined behaviour),
Clip, views (Transpose, Reshape, Unsqueeze, Expand), reductions and MatMul (and with `moves`,
Slice with any steps, Concat, Gather, Squeeze, Flatten, Split, Tile and Pad), on one dtype
family at a time (f32, f16, f64, or the integers i8, u8, i32, i64). Some values are read by
several nodes and some are graph outputs, so chains are cut where fusion must cut them.

Integers compare bit for bit. Floats compare to rtol 1e-3, atol 1e-4 (f16: 1e-2, 1e-2),
looser than the one-op tolerance as errors grow along a chain. Prints each disagreement
(the model and its inputs are kept in WORK_DIR) and a summary.

Not part of the tests (each graph is a run of the command); its first runs found fused
steps folded together by lavapipe (`fused_steps_compute_as_their_ops_alone` in
tests/fusion.rs). `VERBOSE=1` also prints why onnxruntime refused a graph (it has no kernel
for some op and dtype pairs).

usage: scripts/random_graphs_vs_onnxruntime.py WGPU_OPS_BINARY [COUNT] [SEED] [WORK_DIR] [moves]
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

warnings.filterwarnings("ignore")
T = onnx.TensorProto
binary = os.path.abspath(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 100
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
work = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp()
moves = len(sys.argv) > 5 and sys.argv[5] == "moves"
os.makedirs(work, exist_ok=True)

FLOATS = {"f32": (np.float32, T.FLOAT), "f16": (np.float16, T.FLOAT16), "f64": (np.float64, T.DOUBLE)}
INTS = {"i8": (np.int8, T.INT8), "u8": (np.uint8, T.UINT8), "i32": (np.int32, T.INT32),
        "i64": (np.int64, T.INT64)}
ALL = {**FLOATS, **INTS, "bool": (np.bool_, T.BOOL)}
FLOAT_UNARY = ["Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Round", "Sign", "Exp",
               "Sqrt", "Log", "Reciprocal", "Erf", "Sin", "Cos", "Softsign", "Softplus"]
INT_UNARY = ["Neg", "Abs", "Sign"]
FLOAT_BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"]
INT_BINARY = ["Add", "Sub", "Mul", "Max", "Min", "BitwiseAnd", "BitwiseOr", "BitwiseXor"]
COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
RANGE = {"i8": (-128, 127), "u8": (0, 255), "i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1)}


class Builder:
    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inits = []
        self.values = []  # (name, dtype key, shape)
        self.n = 0

    def name(self, stem):
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, array):
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def add(self, op, inputs, dtype, shape, **attrs):
        out = self.name("v")
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.values.append((out, dtype, tuple(shape)))
        return out

    def pick(self, family=None, avoid_bool=True):
        """A value to read: recent ones more often (long chains), any of the family."""
        choices = [v for v in self.values
                   if (family is None or v[1] in family) and not (avoid_bool and v[1] == "bool")]
        if not choices:
            return None
        k = len(choices)
        i = k - 1 - min(int(self.rng.exponential(2.0)), k - 1)
        return choices[i]


def can_broadcast(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def broadcast(a, b):
    return tuple(np.broadcast_shapes(a, b))


def cast_to(b, v, target):
    """Casts v to dtype key `target`, clipping floats into an integer target's range."""
    name, dtype, shape = v
    if dtype == target:
        return v
    if dtype in FLOATS and target in INTS:
        lo, hi = RANGE[target]
        lo, hi = max(lo, -1000), min(hi, 1000)
        np_t = FLOATS[dtype][0]
        # NaN to an integer is undefined behaviour in onnxruntime (its minimum on x86; 0 here).
        same = b.add("Equal", [name, name], "bool", shape)
        name = b.add("Where", [same, name, b.const(np.array(0, np_t))], dtype, shape)
        name = b.add("Clip", [name, b.const(np.array(lo, np_t)), b.const(np.array(hi, np_t))],
                     dtype, shape)
    out = b.add("Cast", [name], target, shape, to=ALL[target][1])
    return (out, target, shape)


def move(b, rng, v):
    """A data-movement op on value v (shapes worked out by numpy on a stand-in array)."""
    name, dtype, shape = v
    r = len(shape)
    probe = np.arange(int(np.prod(shape))).reshape(shape)
    op = rng.choice(["Slice", "Concat", "Gather", "Squeeze", "Flatten", "Split", "Tile", "Pad"])
    i64 = lambda a: b.const(np.array(a, np.int64))
    if r == 0 and op != "Tile":
        op = "Flatten"  # onnxruntime pads no scalar
    if op == "Slice":
        axes = sorted(set(int(a) for a in rng.integers(0, r, int(rng.integers(1, r + 1)))))
        starts, ends, steps, index = [], [], [], [slice(None)] * r
        for a in axes:
            step = int(rng.choice([1, 1, 2, -1, -2, 3]))
            lo, hi = int(rng.integers(-shape[a] - 2, shape[a] + 2)), int(rng.integers(-shape[a] - 2, shape[a] + 2))
            if rng.random() < 0.2: hi = 2**62 if step > 0 else -2**62
            starts.append(lo); ends.append(hi); steps.append(step)
            index[a] = slice(lo, max(min(hi, 2**31), -2**31), step)
        out = probe[tuple(index)].shape
        b.add("Slice", [name, i64(starts), i64(ends), i64([a - r if rng.random() < 0.5 else a for a in axes]), i64(steps)],
              dtype, out)
    elif op == "Concat":
        axis = int(rng.integers(0, r))
        partners = [u for u in b.values if u[1] == dtype and len(u[2]) == r and
                    all(u[2][i] == shape[i] for i in range(r) if i != axis)]
        other = partners[int(rng.integers(0, len(partners)))][0]
        out = list(shape); out[axis] += [u for u in partners if u[0] == other][0][2][axis]
        b.add("Concat", [name, other], dtype, out, axis=axis - r if rng.random() < 0.5 else axis)
    elif op == "Gather":
        axis = int(rng.integers(0, r))
        if shape[axis] == 0:
            return
        ind = rng.integers(-shape[axis], shape[axis], [int(x) for x in rng.integers(1, 3, int(rng.integers(0, 3)))])
        out = np.take(probe, ind % shape[axis], axis=axis).shape
        b.add("Gather", [name, i64(ind)], dtype, out, axis=axis)
    elif op == "Squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        if not ones:
            return
        axes = [i for i in ones if rng.random() < 0.7] or ones[:1]
        b.add("Squeeze", [name, i64(axes)], dtype, [d for i, d in enumerate(shape) if i not in axes])
    elif op == "Flatten":
        axis = int(rng.integers(-r, r + 1)) if r else 0
        a = axis % (r + 1) if r else 0
        b.add("Flatten", [name], dtype, [int(np.prod(shape[:a])), int(np.prod(shape[a:]))], axis=axis)
    elif op == "Split":
        axis = int(rng.integers(0, r))
        if shape[axis] < 2:
            return
        first = int(rng.integers(1, shape[axis]))
        outs = [b.name("v"), b.name("v")]
        b.nodes.append(helper.make_node("Split", [name, i64([first, shape[axis] - first])], outs, axis=axis))
        for o, size in zip(outs, (first, shape[axis] - first)):
            sh = list(shape); sh[axis] = size
            b.values.append((o, dtype, tuple(sh)))
    elif op == "Tile":
        reps = [int(x) for x in rng.integers(1, 3, r)]
        b.add("Tile", [name, i64(reps)], dtype, [d * k for d, k in zip(shape, reps)])
    else:
        pads = [int(x) for x in rng.integers(0, 3, 2 * r)]
        np_t = ALL[dtype][0]
        b.add("Pad", [name, i64(pads), b.const(np.array(int(rng.integers(-2, 3)) if dtype != "u8" else 1, np_t))],
              dtype, [d + pads[i] + pads[i + r] for i, d in enumerate(shape)])


def random_graph(rng):
    family_kind = rng.choice(["float", "int"], p=[0.6, 0.4])
    family = FLOATS if family_kind == "float" else INTS
    main = rng.choice(list(family))
    b = Builder(rng)
    rank = int(rng.integers(0, 5))
    full = tuple(int(rng.integers(1, 5)) for _ in range(rank))
    inputs = []
    for i in range(int(rng.integers(2, 4))):
        # Each input drops leading axes or has sizes of 1 where the full shape has others.
        r = int(rng.integers(0, rank + 1))
        shape = tuple(1 if rng.random() < 0.3 else s for s in full[rank - r:])
        dtype = main if rng.random() < 0.8 else rng.choice(list(family))
        name = f"x{i}"
        inputs.append((name, dtype, shape))
        b.values.append((name, dtype, shape))
    for _ in range(int(rng.integers(3, 15))):
        kind = rng.choice(["unary", "binary", "binary", "compare_where", "cast", "clip", "view",
                           "reduce", "matmul"],
                          p=[0.2, 0.3, 0.1, 0.1, 0.07, 0.07, 0.08, 0.04, 0.04])
        if moves and rng.random() < 0.3:
            kind = "move"
        v = b.pick(family)
        if v is None:
            break
        name, dtype, shape = v
        if kind == "move":
            move(b, rng, v)
        elif kind == "unary":
            op = rng.choice(FLOAT_UNARY if dtype in FLOATS else INT_UNARY)
            if dtype == "u8" and op in ("Neg",):
                continue
            src = name
            if op in ("Sqrt", "Log"):
                src = b.add("Abs", [name], dtype, shape)
            if op == "Exp":
                np_t = FLOATS[dtype][0]
                src = b.add("Min", [name, b.const(np.array(8, np_t))], dtype, shape)
            b.add(op, [src], dtype, shape)
        elif kind in ("binary", "compare_where"):
            partners = [u for u in b.values if u[1] == dtype and can_broadcast(shape, u[2])]
            k = len(partners)
            w = partners[k - 1 - min(int(rng.exponential(2.0)), k - 1)]
            other, _, oshape = w
            out_shape = broadcast(shape, oshape)
            if kind == "binary":
                op = rng.choice(FLOAT_BINARY if dtype in FLOATS else INT_BINARY)
                if op == "Pow":
                    base = b.add("Abs", [name], dtype, shape)
                    np_t = FLOATS[dtype][0]
                    expo = b.add("Clip", [other, b.const(np.array(-3, np_t)), b.const(np.array(3, np_t))],
                                 dtype, oshape)
                    b.add("Pow", [base, expo], dtype, out_shape)
                else:
                    b.add(op, [name, other], dtype, out_shape)
            else:
                cond = b.add(rng.choice(COMPARE), [name, other], "bool", out_shape)
                if rng.random() < 0.3:
                    cond = b.add(rng.choice(["Not", "Xor"]), [cond] if rng.random() < 0.5 else [cond, cond],
                                 "bool", out_shape)
                    b.nodes[-1].op_type = "Not" if len(b.nodes[-1].input) == 1 else "Xor"
                b.add("Where", [cond, name, other], dtype, out_shape)
        elif kind == "cast":
            targets = [t for t in ALL if t != "bool" and t != dtype]
            target = rng.choice(targets)
            cast_to(b, v, target)
        elif kind == "clip":
            np_t = ALL[dtype][0]
            lo, hi = sorted(rng.integers(-3 if dtype != "u8" else 0, 4, 2))
            b.add("Clip", [name, b.const(np.array(lo, np_t)), b.const(np.array(hi, np_t))], dtype, shape)
        elif kind == "view":
            r = len(shape)
            choice = rng.integers(0, 4)
            if choice == 0 and r >= 2:
                perm = [int(p) for p in rng.permutation(r)]
                b.add("Transpose", [name], dtype, [shape[p] for p in perm], perm=perm)
            elif choice == 1:
                b.add("Reshape", [name, b.const(np.array([-1], np.int64))], dtype, [int(np.prod(shape))])
            elif choice == 2 and r < 4:
                axis = int(rng.integers(0, r + 1))
                new = list(shape)
                new.insert(axis, 1)
                b.add("Unsqueeze", [name, b.const(np.array([axis], np.int64))], dtype, new)
            else:
                target = tuple(int(rng.integers(2, 4)) if s == 1 and rng.random() < 0.5 else s for s in shape)
                b.add("Expand", [name, b.const(np.array(target, np.int64))], dtype, target)
        elif kind == "reduce":
            r = len(shape)
            if r == 0:
                continue
            # onnxruntime has no 8-bit ReduceSum.
            op = rng.choice(["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"] if dtype in FLOATS
                            else ["ReduceMax", "ReduceMin"] if dtype in ("i8", "u8")
                            else ["ReduceSum", "ReduceMax", "ReduceMin"])
            axes = sorted(set(int(a) for a in rng.integers(0, r, int(rng.integers(1, r + 1)))))
            keep = int(rng.integers(0, 2))
            out = [1 if i in axes else s for i, s in enumerate(shape)] if keep else \
                [s for i, s in enumerate(shape) if i not in axes]
            b.add(op, [name, b.const(np.array(axes, np.int64))], dtype, out, keepdims=keep)
        elif kind == "matmul":
            if dtype not in FLOATS and dtype not in ("i32", "i64"):
                continue
            if len(shape) < 1:
                continue
            k = shape[-1]
            n = int(rng.integers(1, 5))
            np_t = ALL[dtype][0]
            weights = rng.integers(-3, 4, (k, n)).astype(np_t) if dtype in INTS else \
                rng.uniform(-1, 1, (k, n)).astype(np_t)
            out = b.add("MatMul", [name, b.const(weights)], dtype, list(shape[:-1]) + [n])
            if rng.random() < 0.5:
                bias = b.const((rng.integers(-3, 4, n) if dtype in INTS else rng.uniform(-1, 1, n)).astype(np_t))
                b.add("Add", [out, bias], dtype, list(shape[:-1]) + [n])
    # Outputs: the last value and one or two others (which cut chains).
    outs = [b.values[-1]]
    for _ in range(int(rng.integers(0, 3))):
        v = b.values[int(rng.integers(len(inputs), len(b.values)))]
        if v not in outs and v[0] not in [i[0] for i in inputs]:
            outs.append(v)
    graph = helper.make_graph(
        b.nodes, "random",
        [helper.make_tensor_value_info(n, ALL[d][1], list(s)) for n, d, s in inputs],
        [helper.make_tensor_value_info(n, ALL[d][1], list(s)) for n, d, s in outs],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    feeds = {}
    for n, d, s in inputs:
        np_t = ALL[d][0]
        if d in FLOATS:
            x = rng.uniform(-3, 3, s)
            x = np.where(rng.random(s) < 0.2, np.round(x * 2) / 2, x)  # ties and exact values
            feeds[n] = np.asarray(x, dtype=np_t)
        else:
            lo, hi = RANGE[d]
            feeds[n] = np.asarray(rng.integers(max(lo, -20), min(hi, 20) + 1, s), dtype=np_t)
    return model, feeds, [o[0] for o in outs]


def close(got, want, dtype):
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{list(got.shape)}, not {want.dtype}{list(want.shape)}"
    if want.dtype.kind in "iub":
        bad = int((got != want).sum())
        return f"{bad} of {want.size} differ" if bad else ""
    rtol, atol = (1e-2, 1e-2) if want.dtype == np.float16 else (1e-3, 1e-4)
    g, w = got.astype(np.float64), want.astype(np.float64)
    ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    # Both infinite or huge the same way.
    ok |= (np.isinf(w) & (g == w))
    bad = int((~ok).sum())
    if not bad:
        return ""
    i = int(np.argmax(~ok.reshape(-1)))
    return f"{bad} of {want.size} off (first: {g.reshape(-1)[i]!r}, onnxruntime {w.reshape(-1)[i]!r})"


verbose = os.environ.get("VERBOSE") == "1"
rng = np.random.default_rng(seed)
tally = {"ok": 0, "mismatch": 0, "our error": 0, "ort error": 0}
for case in range(count):
    model, feeds, outs = random_graph(rng)
    path = os.path.join(work, f"g{case}.onnx")
    onnx.save(model, path)
    try:
        onnx.checker.check_model(model, full_check=True)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = session.run(outs, feeds)
    except Exception as e:
        tally["ort error"] += 1
        if verbose:
            print(f"g{case}: onnxruntime: {str(e).splitlines()[0][:200]}")
        continue
    args = [binary, "run", path, "--out", os.path.join(work, f"out{case}")]
    for n, x in feeds.items():
        f = os.path.join(work, f"g{case}_{n}.npy")
        np.save(f, x)
        args += ["--input", f"{n}={f}"]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        tally["our error"] += 1
        print(f"g{case}: ERROR {run.stderr.strip().splitlines()[-1][:200]}")
        continue
    bad = []
    for n, w in zip(outs, want):
        got = np.load(os.path.join(work, f"out{case}", f"{n}.npy"))
        why = close(got, np.asarray(w), None)
        if why:
            bad.append(f"{n}: {why}")
    if bad:
        tally["mismatch"] += 1
        ops = sorted({nd.op_type for nd in model.graph.node})
        print(f"g{case}: MISMATCH {'; '.join(bad)} [{' '.join(ops)}]")
    else:
        tally["ok"] += 1
print(", ".join(f"{v} {k}" for k, v in tally.items()), f"(seed {seed}, models in {work})")
