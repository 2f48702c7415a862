#!/usr/bin/env python3
"""Random ONNX Scans (and with KINDS, Loops and Ifs) against onnxruntime: bodies of 2 to 8 element-wise steps (unary and
binary ops, comparisons and Where, Clip) over one or two states and one or two scan inputs,
on one dtype (f32, f16, f64, i8, u8, i32, i64), with states clipped to stay bounded, scan
outputs of intermediate values, each scan input and output forward or reversed, 1 to 6
steps, shapes of rank 0 to 2. Integers compare bit for bit, floats to rtol 1e-3, atol 1e-4
(f16 1e-2), as errors grow over the steps. Prints each disagreement and a tally; not part of
the tests.

A Loop has a trip count, a condition or both; its body reads the iteration number (cast to
the dtype), the states and outer values, and may end the loop early; its scan outputs stack
intermediate values. An If picks between two random branches over outer values.

A `seq` Loop also carries what torch exports for a list appended to in a loop: a sequence
(begun empty or with an outer value) that the body inserts into (at the end, on even
iterations only through an If, at the front, at a random place, or from an inner Loop of 0
to 2 trips that carries it and appends to it), sometimes erases from
and reads its last element back from, and a tensor that grows by a Concat each iteration.
After the loop come the sequence itself, its length, its last element, its
ConcatFromSequence and, now and then, a SequenceMap over it.

A `scan_axes` Scan reads and writes its sequences along random axes (scan_input_axes,
scan_output_axes, negative or not). With `rich`, bodies also take ops that mix elements
while keeping the shape: MatMul by a constant square matrix, a reduction over the last axis
added back, Softmax, CumSum, Gather of a permutation and a reversing Slice.
With `scatter`, the first state of a Scan or Loop body of rank 1 or more is a cache the body
writes one row into each step (ScatterElements or ScatterND at a constant position, the row
cut from the state's usual update), and now and then the old state is read again after the
scatter (in an Add that a scan output takes): the in-place update of a state and its
fallback to two buffers.
SHOW_ORT_ERRORS=1 in the environment prints why onnxruntime refused each model it refused.

usage: scripts/random_scans_vs_onnxruntime.py WGPU_OPS_BINARY COUNT SEED WORK_DIR [scan,scan_axes,loop,if,seq,rich,scatter]
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
warnings.filterwarnings("ignore")
T = onnx.TensorProto
binary = sys.argv[1]; count = int(sys.argv[2]); seed = int(sys.argv[3]); work = sys.argv[4]
kinds = sys.argv[5].split(",") if len(sys.argv) > 5 else ["scan"]
rich = "rich" in kinds  # bodies also take MatMul, reductions, Softmax, CumSum, Gather, Slice
scatter = "scatter" in kinds  # a state written one row per step by a scatter
kinds = [k for k in kinds if k not in ("rich", "scatter")] or ["scan"]
os.makedirs(work, exist_ok=True)
FLOATS = {"f32": (np.float32, T.FLOAT), "f16": (np.float16, T.FLOAT16), "f64": (np.float64, T.DOUBLE)}
INTS = {"i8": (np.int8, T.INT8), "u8": (np.uint8, T.UINT8), "i32": (np.int32, T.INT32), "i64": (np.int64, T.INT64)}
ALL = {**FLOATS, **INTS}
FU = ["Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Floor", "Ceil", "Round", "Sign", "Softsign", "Sin", "Cos", "Erf"]
IU = ["Neg", "Abs", "Sign"]
FB = ["Add", "Sub", "Mul", "Max", "Min", "Div"]
IB = ["Add", "Sub", "Mul", "Max", "Min", "BitwiseAnd", "BitwiseOr", "BitwiseXor"]
CMP = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]

def body_graph(rng, dtype, shape, n_states, n_scans, n_outs, kind="scan", prefix=""):
    npt, ot = ALL[dtype]
    nodes, inits, vals = [], [], []
    c = [0]
    def nm(p):
        c[0] += 1; return f"{prefix}{p}{c[0]}"
    def const(a):
        n = nm("k"); inits.append(numpy_helper.from_array(np.asarray(a, npt), n)); return n
    ins = [f"s{i}" for i in range(n_states)] + [f"x{i}" for i in range(n_scans)]
    vals = list(ins)
    if kind == "loop":
        it, full, dims = nm("it"), nm("it"), nm("k")
        inits.append(numpy_helper.from_array(np.array(shape, np.int64), dims))
        nodes.append(helper.make_node("Cast", ["iter"], [it], to=ot))
        nodes.append(helper.make_node("Expand", [it, dims], [full])); vals.append(full)
    for _ in range(int(rng.integers(2, 9))):
        k = rng.choice(["u", "b", "b", "w", "clip"])
        if rich and shape and rng.random() < 0.35:
            k = "r"
        a = vals[len(vals) - 1 - min(int(rng.exponential(2)), len(vals) - 1)]
        out = nm("v")
        if k == "r":  # ops that keep the shape but mix elements
            i64 = lambda v: (inits.append(numpy_helper.from_array(np.asarray(v, np.int64), nm("k"))), inits[-1].name)[1]
            op = rng.choice(["MatMul", "Reduce", "Softmax", "CumSum", "Gather", "Slice"])
            d = shape[-1]
            if op == "MatMul" and dtype not in ("i8", "u8"):
                w = rng.integers(-2, 3, (d, d)) if dtype in INTS else rng.uniform(-1, 1, (d, d))
                nodes.append(helper.make_node("MatMul", [a, const(w)], [out]))
            elif op == "Softmax" and dtype in FLOATS:
                nodes.append(helper.make_node("Softmax", [a], [out], axis=-1))
            elif op == "CumSum" and dtype not in ("i8", "u8"):
                r = len(shape)
                nodes.append(helper.make_node("CumSum", [a, i64(int(rng.integers(-r, r)))], [out],
                                              reverse=int(rng.integers(0, 2))))
            elif op == "Gather":
                nodes.append(helper.make_node("Gather", [a, i64(rng.permutation(d))], [out], axis=-1))
            elif op == "Slice":
                nodes.append(helper.make_node("Slice", [a, i64([-1]), i64([-2**62]), i64([-1]), i64([-1])], [out]))
            else:
                red = nm("v")
                nodes.append(helper.make_node(rng.choice(["ReduceMax", "ReduceMin"] if dtype in ("i8", "u8") else
                                                         ["ReduceSum", "ReduceMax", "ReduceMin"]),
                                              [a, i64([-1])], [red], keepdims=1))
                nodes.append(helper.make_node("Add", [red, a], [out]))
        elif k == "u":
            op = rng.choice(FU if dtype in FLOATS else IU)
            if dtype == "u8" and op == "Neg": op = "Abs"
            nodes.append(helper.make_node(op, [a], [out]))
        elif k == "b":
            b = rng.choice(vals) if rng.random() < 0.8 else const(rng.integers(1, 4))
            op = rng.choice(FB if dtype in FLOATS else IB)
            if op == "Div":
                # divide by something away from 0
                d = nm("v"); nodes.append(helper.make_node("Abs", [b], [d]))
                e = nm("v"); nodes.append(helper.make_node("Add", [d, const(1)], [e])); b = e
            nodes.append(helper.make_node(op, [a, b], [out]))
        elif k == "w":
            b = rng.choice(vals)
            cnd = nm("c"); nodes.append(helper.make_node(rng.choice(CMP), [a, b], [cnd]))
            nodes.append(helper.make_node("Where", [cnd, a, b], [out]))
        else:
            lo, hi = sorted(rng.integers(-5 if dtype != "u8" else 0, 6, 2))
            nodes.append(helper.make_node("Clip", [a, const(lo), const(hi)], [out]))
        vals.append(out)
    # states: new = Clip(Add(old, some value)) to keep bounded
    outs = []
    for i in range(n_states):
        v = vals[-1 - i] if len(vals) > i + 1 else vals[-1]
        t = nm("v"); nodes.append(helper.make_node("Add", [f"s{i}", v], [t]))
        o = nm("so"); nodes.append(helper.make_node("Clip", [t, const(-50 if dtype != "u8" else 0), const(50)], [o]))
        outs.append(o)
    reread = None
    if scatter and shape and n_states and kind in ("scan", "loop"):
        # state 0: a cache written at one row per step, the row cut from its usual update
        i64 = lambda v: (inits.append(numpy_helper.from_array(np.asarray(v, np.int64), nm("k"))), inits[-1].name)[1]
        row = nm("v")
        nodes.append(helper.make_node("Slice", [outs[0], i64([0]), i64([1]), i64([0])], [row]))
        o = nm("so")
        if rng.random() < 0.5:
            at = rng.integers(0, shape[0], [1] + list(shape[1:]))
            nodes.append(helper.make_node("ScatterElements", ["s0", i64(at), row], [o], axis=0))
        else:
            nodes.append(helper.make_node("ScatterND", ["s0", i64([[int(rng.integers(0, shape[0]))]]), row], [o]))
        outs[0] = o
        if rng.random() < 0.4:  # the old state read after the scatter
            t = nm("v"); nodes.append(helper.make_node("Sub", [o, "s0"], [t]))
            reread = nm("v")
            nodes.append(helper.make_node("Clip", [t, const(-50 if dtype != "u8" else 0), const(50)], [reread]))
    for i in range(n_outs):
        v = vals[int(rng.integers(n_states + n_scans, len(vals)))] if len(vals) > n_states + n_scans else vals[-1]
        if reread and i == 0:
            v = reread
        o = nm("yo"); nodes.append(helper.make_node("Identity", [v], [o])); outs.append(o)
    vi = lambda n: helper.make_tensor_value_info(n, ot, list(shape))
    if kind == "if":  # a branch: no inputs, reads the outer values s*, x*
        return helper.make_graph(nodes, "branch", [], [vi(n) for n in outs], initializer=inits)
    if kind == "loop":  # x* are outer values; the loop may end early
        stop = nm("k"); inits.append(numpy_helper.from_array(np.array(int(rng.integers(0, 8)), np.int64), stop))
        nodes.append(helper.make_node("Less", ["iter", stop], ["cond_out"]))
        scalar = lambda n, t: helper.make_tensor_value_info(n, t, [])
        return helper.make_graph(nodes, "body", [scalar("iter", T.INT64), scalar("cond_in", T.BOOL)] +
                                 [vi(n) for n in ins[:n_states]],
                                 [scalar("cond_out", T.BOOL)] + [vi(n) for n in outs], initializer=inits)
    g = helper.make_graph(nodes, "body", [vi(n) for n in ins], [vi(n) for n in outs], initializer=inits)
    return g


def control_flow_model(rng, kind, dtype, shape, ns, nx, no, steps):
    """A Loop or an If over inputs s* (states) and x* (outer values), and its feeds' shapes."""
    npt, ot = ALL[dtype]
    vi = lambda n, s: helper.make_tensor_value_info(n, ot, s)
    ins = [vi(f"s{i}", shape) for i in range(ns)] + [vi(f"x{i}", shape) for i in range(nx)]
    inits = []
    if kind == "if":
        then = body_graph(rng, dtype, shape, ns, nx, no, "if", "t")
        other = body_graph(rng, dtype, shape, ns, nx, no, "if", "e")
        node = helper.make_node("If", ["cond"], [f"SF{i}" for i in range(ns + no)], then_branch=then, else_branch=other)
        ins.append(helper.make_tensor_value_info("cond", T.BOOL, []))
        outs = [f"SF{i}" for i in range(ns + no)]
    else:
        body = body_graph(rng, dtype, shape, ns, nx, no, "loop")
        u = rng.random()
        trip = "M" if u < 0.8 else ""
        cond = "C" if u > 0.5 else ""
        if trip: inits.append(numpy_helper.from_array(np.array(steps, np.int64), "M"))
        if cond: inits.append(numpy_helper.from_array(np.array(rng.random() < 0.9), "C"))
        outs = [f"SF{i}" for i in range(ns)] + [f"Y{i}" for i in range(no)]
        node = helper.make_node("Loop", [trip, cond] + [f"s{i}" for i in range(ns)], outs, body=body)
    g = helper.make_graph([node], "g", ins, [onnx.ValueInfoProto(name=o) for o in outs], initializer=inits)
    return g, outs

def sequence_loop_model(rng, dtype, shape, ns, nx, no, steps):
    """A Loop that also carries a sequence `q` and a growing tensor `grow`, as torch exports
    list appends and concatenations in a loop; outputs what torch code reads of them after."""
    npt, ot = ALL[dtype]
    g, outs = control_flow_model(rng, "loop", dtype, shape, ns, nx, no, steps)
    loop = g.node[0]
    body = loop.attribute[0].g
    i64 = lambda n, v: body.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), n))
    nodes = []
    # what the body appends: a state it computes, or the iteration number spread out
    v = body.output[1 + int(rng.integers(0, ns))].name
    starts_full = rng.random() < 0.6
    if starts_full and rng.random() < 0.5:  # the body reads the last element back
        nodes.append(helper.make_node("SequenceAt", ["q_in", "q_last"], ["q_read"]))
        i64("q_last", -1)
        nodes.append(helper.make_node(rng.choice(["Max", "Min", "Add"] if dtype not in ("u8",) else ["Max", "Min"]),
                                      ["q_read", v], ["q_mixed"]))
        nodes.append(helper.make_node("Clip", ["q_mixed", "q_lo", "q_hi"], ["q_val"]))
        body.initializer.append(numpy_helper.from_array(np.asarray(0 if dtype == "u8" else -50, npt), "q_lo"))
        body.initializer.append(numpy_helper.from_array(np.asarray(50, npt), "q_hi"))
        v = "q_val"
    where = rng.choice(["end", "front", "random", "nested"])
    if where == "nested":  # an inner Loop (0 to 2 trips) appends to the outer body's sequence
        seq_vi = lambda n: helper.make_tensor_sequence_value_info(n, ot, None)
        inner = helper.make_graph(
            [helper.make_node("Identity", ["qq_c_in"], ["qq_c_out"]),
             helper.make_node("CastLike", ["qq_i", v], ["qq_it"]),
             helper.make_node("Add", [v, "qq_it"], ["qq_v"]),
             helper.make_node("SequenceInsert", ["qq_in", "qq_v"], ["qq_out"])],
            "inner",
            [helper.make_tensor_value_info("qq_i", T.INT64, []),
             helper.make_tensor_value_info("qq_c_in", T.BOOL, []), seq_vi("qq_in")],
            [helper.make_tensor_value_info("qq_c_out", T.BOOL, []), seq_vi("qq_out")])
        i64("q_k", int(rng.integers(0, 3)))
        nodes.append(helper.make_node("Loop", ["q_k", "", "q_in"], ["q_ins"], body=inner))
    elif where == "end" and rng.random() < 0.4:  # only on even iterations: an If whose branches give sequences
        seq_vi = lambda n: helper.make_tensor_sequence_value_info(n, ot, None)
        then = helper.make_graph([helper.make_node("SequenceInsert", ["q_in", v], ["q_then"])], "then", [], [seq_vi("q_then")])
        other = helper.make_graph([helper.make_node("Identity", ["q_in"], ["q_else"])], "else", [], [seq_vi("q_else")])
        i64("q_two", 2); i64("q_nil", 0)
        nodes.append(helper.make_node("Mod", ["iter", "q_two"], ["q_parity"]))
        nodes.append(helper.make_node("Equal", ["q_parity", "q_nil"], ["q_even"]))
        nodes.append(helper.make_node("If", ["q_even"], ["q_ins"], then_branch=then, else_branch=other))
    elif where == "end":
        nodes.append(helper.make_node("SequenceInsert", ["q_in", v], ["q_ins"]))
    else:
        if where == "front":
            i64("q_at", 0)
        else:  # anywhere in 0..=len
            nodes.append(helper.make_node("SequenceLength", ["q_in"], ["q_len"]))
            nodes.append(helper.make_node("Add", ["q_len", "q_one"], ["q_len1"]))
            i64("q_one", 1); i64("q_r", int(rng.integers(0, 1000)))
            nodes.append(helper.make_node("Add", ["iter", "q_r"], ["q_ri"]))
            nodes.append(helper.make_node("Mod", ["q_ri", "q_len1"], ["q_at"]))
        nodes.append(helper.make_node("SequenceInsert", ["q_in", v, "q_at"], ["q_ins"]))
    if rng.random() < 0.3:  # erase one again now and then: the first, if the sequence has two
        nodes.append(helper.make_node("SequenceErase", ["q_ins", "q_zero"], ["q_out"]))
        i64("q_zero", 0)
    else:
        nodes.append(helper.make_node("Identity", ["q_ins"], ["q_out"]))
    # the growing tensor: torch.cat([grow, v.unsqueeze(0)])
    nodes.append(helper.make_node("Unsqueeze", [v, "q_axis0"], ["grow_row"]))
    i64("q_axis0", [0])
    nodes.append(helper.make_node("Concat", ["grow_in", "grow_row"], ["grow_out"], axis=0))
    body.node.extend(nodes)
    body.input.extend([helper.make_tensor_sequence_value_info("q_in", ot, None),
                       helper.make_tensor_value_info("grow_in", ot, None)])
    body.output.extend([helper.make_tensor_sequence_value_info("q_out", ot, None),
                        helper.make_tensor_value_info("grow_out", ot, None)])
    # loop-carried values come before the scan outputs
    ns_out = [o for o in loop.output]
    new_outs = ns_out[:ns] + ["Q", "GROW"] + ns_out[ns:]
    # body outputs: cond, states, q, grow, scan outputs
    bo = list(body.output)
    body.ClearField("output")
    body.output.extend(bo[:1 + ns] + bo[-2:] + bo[1 + ns:-2])
    pre = []
    if starts_full:
        pre.append(helper.make_node("SequenceConstruct", ["x0"], ["q0"]))
    else:
        pre.append(helper.make_node("SequenceEmpty", [], ["q0"], dtype=ot))
    pre.append(helper.make_node("Constant", [], ["grow_shape"], value=numpy_helper.from_array(np.array([0] + list(shape), np.int64))))
    pre.append(helper.make_node("ConstantOfShape", ["grow_shape"], ["grow0"],
                                value=numpy_helper.from_array(np.zeros(1, npt))))
    new_ins = list(loop.input[:2 + ns]) + ["q0", "grow0"]
    loop.ClearField("input"); loop.input.extend(new_ins)
    loop.ClearField("output"); loop.output.extend(new_outs)
    post = [helper.make_node("SequenceLength", ["Q"], ["QLEN"])]
    outs = new_outs + ["QLEN"]
    if rng.random() < 0.5:  # a SequenceMap over it: each element doubled plus its absolute value, and its largest
        ev = lambda n: helper.make_tensor_value_info(n, ot, None)
        mapped = helper.make_graph(
            [helper.make_node("Add", ["e", "e"], ["e2"]), helper.make_node("Abs", ["e"], ["ea"]),
             helper.make_node("Add", ["e2", "ea"], ["m0"]),
             helper.make_node("ReduceMax", ["e"], ["m1"], keepdims=0)],
            "map", [ev("e")], [ev("m0"), ev("m1")])
        post.append(helper.make_node("SequenceMap", ["Q"], ["QMAP", "QSUM"], body=mapped))
        outs += ["QMAP", "QSUM"]
    if starts_full:  # ConcatFromSequence and SequenceAt of an empty sequence are errors
        axis = int(rng.integers(-len(shape) - 1, len(shape) + 1))
        post.append(helper.make_node("ConcatFromSequence", ["Q"], ["QCAT"], axis=axis, new_axis=1))
        post.append(helper.make_node("SequenceAt", ["Q", "q_first"], ["QAT"]))
        g.initializer.append(numpy_helper.from_array(np.array(int(rng.integers(-1, 1)), np.int64), "q_first"))
        outs += ["QCAT", "QAT"]
    nodes = pre + list(g.node) + post
    g.ClearField("node"); g.node.extend(nodes)
    g.ClearField("output"); g.output.extend([onnx.ValueInfoProto(name=o) for o in outs])
    return g, outs


rng = np.random.default_rng(seed)
tally = {"ok": 0, "mismatch": 0, "our error": 0, "ort error": 0}
for case in range(count):
    dtype = rng.choice(list(ALL))
    npt, ot = ALL[dtype]
    shape = [int(s) for s in rng.integers(1, 4, int(rng.integers(0, 3)))]
    ns, nx, no = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
    steps = int(rng.integers(1, 7))
    kind = str(rng.choice(kinds)) if len(kinds) > 1 else kinds[0]
    if kind in ("scan", "scan_axes"):
        body = body_graph(rng, dtype, shape, ns, nx, no)
        reverse_in = [int(rng.integers(0, 2)) for _ in range(nx)]
        reverse_out = [int(rng.integers(0, 2)) for _ in range(no)]
        attrs = dict(body=body, num_scan_inputs=nx)
        if any(reverse_in): attrs["scan_input_directions"] = reverse_in
        if any(reverse_out): attrs["scan_output_directions"] = reverse_out
        r = len(shape)
        in_axes, out_axes = [0] * nx, [0] * no
        if kind == "scan_axes":  # the sequence along any axis, negative or not
            in_axes = [int(rng.integers(-r - 1, r + 1)) for _ in range(nx)]
            out_axes = [int(rng.integers(-r - 1, r + 1)) for _ in range(no)]
            attrs["scan_input_axes"] = in_axes
            if out_axes: attrs["scan_output_axes"] = out_axes
        along = lambda a: shape[:a % (r + 1)] + [steps] + shape[a % (r + 1):]
        ins = [f"S{i}" for i in range(ns)] + [f"X{i}" for i in range(nx)]
        outs = [f"SF{i}" for i in range(ns)] + [f"Y{i}" for i in range(no)]
        node = helper.make_node("Scan", ins, outs, **attrs)
        vi = lambda n, s: helper.make_tensor_value_info(n, ot, s)
        g = helper.make_graph([node], "g", [vi(f"S{i}", shape) for i in range(ns)] + [vi(f"X{i}", along(in_axes[i])) for i in range(nx)],
                              [vi(f"SF{i}", shape) for i in range(ns)] + [vi(f"Y{i}", along(out_axes[i])) for i in range(no)])
        shapes = {**{f"S{i}": shape for i in range(ns)}, **{f"X{i}": along(in_axes[i]) for i in range(nx)}}
    elif kind == "seq":
        g, outs = sequence_loop_model(rng, dtype, shape, ns, nx, no, steps)
        body = next(n for n in g.node if n.op_type == "Loop").attribute[0].g
        shapes = {**{f"s{i}": shape for i in range(ns)}, **{f"x{i}": shape for i in range(nx)}}
    else:
        g, outs = control_flow_model(rng, kind, dtype, shape, ns, nx, no, steps)
        body = g.node[0].attribute[0].g
        shapes = {**{f"s{i}": shape for i in range(ns)}, **{f"x{i}": shape for i in range(nx)}}
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]); m.ir_version = 8
    path = f"{work}/s{case}.onnx"; onnx.save(m, path)
    feeds = {k: np.asarray(rng.integers(0 if dtype == "u8" else -5, 6, sh) if dtype in INTS else rng.uniform(-2, 2, sh), npt)
             for k, sh in shapes.items()}
    if kind == "if": feeds["cond"] = np.array(rng.random() < 0.5)
    try:
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(outs, feeds)
    except Exception as e:
        tally["ort error"] += 1
        if os.environ.get("SHOW_ORT_ERRORS"): print(f"s{case} ORT ERROR", str(e)[-200:])
        continue
    args = [binary, "run", path, "--out", f"{work}/o{case}"]
    for k, v in feeds.items():
        np.save(f"{work}/s{case}_{k}.npy", v); args += ["--input", f"{k}={work}/s{case}_{k}.npy"]
    r = subprocess.run(args, capture_output=True, text=True)
    if os.environ.get("SHOW_STDERR") and r.stderr: print(r.stderr.strip())
    if r.returncode:
        tally["our error"] += 1; print(f"s{case} ERROR", r.stderr.strip()[-200:]); continue
    bad = []
    def compare(n, got, w):
        if isinstance(w, list):  # a sequence: a folder of its elements
            if not os.path.isdir(got): bad.append(f"{n}: not a sequence"); return
            if len(os.listdir(got)) != len(w): bad.append(f"{n}: {len(os.listdir(got))} elements vs {len(w)}"); return
            for i, e in enumerate(w): compare(f"{n}[{i}]", f"{got}/{i}.npy", e)
            return
        got = np.load(got); w = np.asarray(w)
        if got.shape != w.shape or got.dtype != w.dtype: bad.append(f"{n} {got.dtype}{got.shape} vs {w.dtype}{w.shape}"); return
        if w.dtype.kind in "iu":
            if (got != w).any(): bad.append(f"{n}: {(got != w).sum()} differ")
        else:
            rt, at = (1e-2, 1e-2) if w.dtype == np.float16 else (1e-3, 1e-4)
            if not np.allclose(got.astype(float), w.astype(float), rtol=rt, atol=at, equal_nan=True):
                bad.append(f"{n}: off {np.abs(got.astype(float)-w.astype(float)).max()}")
    for n, w in zip(outs, want):
        compare(n, f"{work}/o{case}/{n}" + ("" if isinstance(w, list) else ".npy"), w)
    if bad:
        tally["mismatch"] += 1; print(f"s{case} MISMATCH {kind} {dtype}", bad, sorted({n.op_type for n in body.node}))
    else:
        tally["ok"] += 1
print(tally)
