#!/usr/bin/env python3
"""Writes a differential test of the element-wise ops against onnxruntime: for every op and
every dtype onnxruntime has a CPU kernel for, a one-node model, edge and random inputs (with
broadcasting) and onnxruntime's outputs, in the layout of the ONNX node tests (DIR/<test>/
model.onnx, DIR/<test>/data_0/{input,output}_<i>.pb, DIR/manifest.json with tolerances), which
tests/onnx_node.rs runs like the node tests.

Inputs avoid what is undefined behaviour in onnxruntime's C++ (integer division by zero or of
the minimum by -1, integer powers that overflow, float-to-integer casts out of range).
Tolerances: integers and bools bit for bit; floats as onnxruntime's own tests compare them
(float rtol 1e-4 atol 1e-5, double rtol 1e-5 atol 1e-6; f16 rtol 2e-3 atol 1e-3). Our f64
functions are held to 1e-12 against Rust's in tests/every_dtype.rs; onnxruntime's double
Sigmoid is itself about 1e-12 off.

usage: scripts/ort_differential.py DIR
"""
import json
import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

T = onnx.TensorProto
DTYPES = {
    "f32": (np.float32, T.FLOAT),
    "f16": (np.float16, T.FLOAT16),
    "f64": (np.float64, T.DOUBLE),
    "i8": (np.int8, T.INT8),
    "i16": (np.int16, T.INT16),
    "i32": (np.int32, T.INT32),
    "i64": (np.int64, T.INT64),
    "u8": (np.uint8, T.UINT8),
    "u16": (np.uint16, T.UINT16),
    "u32": (np.uint32, T.UINT32),
    "u64": (np.uint64, T.UINT64),
    "bool": (np.bool_, T.BOOL),
}
UNARY = ["Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu", "Reciprocal", "Sign",
         "Floor", "Ceil", "Round", "Erf", "Not"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Mod", "FMod", "Equal", "Less",
          "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"]
TRIGONOMETRIC = ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
                 "Atanh"]
BOOL_OUT = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not",
            "IsNaN", "IsInf"}


def values(np_type, n, rng, positive=False):
    if np_type == np.bool_:
        return rng.rand(n) < 0.5
    if np.issubdtype(np_type, np.floating):
        info = np.finfo(np_type)
        edges = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, float(info.max), -float(info.max),
                 float(info.tiny), 0.5, 2.5, -3.0, 0.1]
        v = np.concatenate([np.array(edges), rng.uniform(-10, 10, n)])[:n]
        v = rng.permutation(v)
        if positive:
            v = np.abs(v)
        return v.astype(np_type)
    info = np.iinfo(np_type)
    edges = [0, 1, info.max, info.min, info.max - 1, info.min + 1, 2, 3, 100 % info.max]
    if info.min < 0:
        edges += [-1, -2, -7]
    v = np.concatenate([np.array(edges, dtype=np.float64),
                        rng.randint(max(info.min, -1000), min(info.max, 1000), n)])[:n]
    return rng.permutation(v).astype(np_type)


def map_proto(d):
    """A dict from strings or integers to floats as a MapProto, its values a sequence of f32
    scalars."""
    proto = onnx.MapProto()
    keys = list(d.keys())
    if keys and isinstance(keys[0], str):
        proto.key_type = T.STRING
        proto.string_keys.extend(k.encode() for k in keys)
    else:
        proto.key_type = T.INT64
        proto.keys.extend(int(k) for k in keys)
    vals = onnx.SequenceProto(elem_type=onnx.SequenceProto.TENSOR)
    vals.tensor_values.extend(numpy_helper.from_array(np.array(d[k], np.float32)) for k in keys)
    proto.values.CopyFrom(vals)
    return proto


def write_case(out, name, m, inputs, outputs):
    """One test as the node tests lay theirs out: out/name/model.onnx and data_0/input_i.pb,
    output_i.pb."""
    tdir = os.path.join(out, name)
    os.makedirs(os.path.join(tdir, "data_0"), exist_ok=True)
    with open(os.path.join(tdir, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for kind, values in (("input", inputs), ("output", outputs)):
        for i, v in enumerate(values):
            # A list of maps (ZipMap's) as a SequenceProto of MapProtos.
            if isinstance(v, list) and v and isinstance(v[0], dict):
                proto = onnx.SequenceProto(elem_type=onnx.SequenceProto.MAP)
                proto.map_values.extend(map_proto(d) for d in v)
            # One map (onnxruntime's binding takes maps to f32 only) as a MapProto.
            elif isinstance(v, dict):
                proto = map_proto(v)
            # A sequence (onnxruntime gives a list of arrays) as a SequenceProto.
            elif isinstance(v, list):
                proto = numpy_helper.from_list([np.asarray(x) for x in v])
            else:
                proto = numpy_helper.from_array(np.asarray(v))
            with open(os.path.join(tdir, "data_0", f"{kind}_{i}.pb"), "wb") as f:
                f.write(proto.SerializeToString())


def model(op, inputs, out_type, attrs):
    names = [f"x{i}" for i in range(len(inputs))]
    infos = [helper.make_tensor_value_info(nm, DTYPES[d][1], list(v.shape))
             for nm, (d, v) in zip(names, inputs)]
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    ort.set_default_logger_severity(3)
    rng = np.random.RandomState(7)
    manifest = {}
    cases = []
    for d, (np_type, code) in DTYPES.items():
        for op in UNARY:
            a = values(np_type, 35, rng).reshape(5, 7)
            cases.append((op, d, [(d, a)], {}))
        for op in BINARY:
            a = values(np_type, 35, rng).reshape(5, 7)
            b = values(np_type, 7, rng)
            if np.issubdtype(np_type, np.integer) and op in ("Div", "Mod", "FMod"):
                # Division by zero and MIN / -1 are undefined behaviour in C++.
                b = np.where((b == 0) | (b == -1) if np.issubdtype(np_type, np.signedinteger) else b == 0, 3, b).astype(np_type)
            if np.issubdtype(np_type, np.integer) and op == "Pow":
                # onnxruntime raises integers through double: overflow is undefined there.
                a = rng.randint(-9 if np.issubdtype(np_type, np.signedinteger) else 0, 10, 35)
                a = a.reshape(5, 7).astype(np_type)
                b = np.array([0, 1, 2, 3, 5, 2, 1], dtype=np_type)
            attrs = {}
            name = op
            if op in ("Mod", "FMod"):
                name = "Mod"
                attrs = {"fmod": 1 if op == "FMod" else 0}
            cases.append((name, d, [(d, a), (d, b)], attrs, op))
        cond = rng.rand(5, 7) < 0.5
        cases.append(("Where", d, [("bool", cond), (d, values(np_type, 35, rng).reshape(5, 7)),
                                   (d, values(np_type, 7, rng))], {}))
        if d != "bool":
            lo, hi = np.sort(values(np_type, 2, rng))
            cases.append(("Clip", d, [(d, values(np_type, 35, rng).reshape(5, 7)),
                                      (d, np.array(lo, dtype=np_type)), (d, np.array(hi, dtype=np_type))], {}))
        # Cast to every dtype, on values every target holds (out-of-range casts are UB).
        for t, (_, tcode) in DTYPES.items():
            src = (rng.randint(0, 100, 35) if d != "bool" else rng.rand(35) < 0.5).astype(np_type)
            cases.append(("Cast", d, [(d, src.reshape(5, 7))], {"to": tcode}, f"Cast_{t}"))
    # Pow with an exponent of another type (Pow-15's T1): integer bases to integer exponents
    # (small, so no power overflows), float bases to any exponent.
    for d in ("i32", "i64", "f32", "f64"):
        for e in ("i32", "i64", "f32", "f64"):
            if d == e or (d.startswith("i") and e.startswith("f")):
                continue
            base = DTYPES[d][0]
            if d.startswith("i"):
                a = rng.randint(-9, 10, 35).astype(base)
            else:
                a = values(base, 35, rng)
            b = np.array([0, 1, 2, 3, 5, 2, -1], dtype=DTYPES[e][0])
            cases.append(("Pow", d, [(d, a.reshape(5, 7)), (e, b)], {}, f"Pow_{e}"))
    # Integer bases to float exponents (computed in the exponent's type, truncated back), on
    # whole exponents and bases whose powers the base type holds; a random state of their own.
    rng_pow = np.random.RandomState(9)
    for d in ("i32", "i64"):
        for e in ("f32", "f64"):
            a = rng_pow.randint(-9, 10, 35).astype(DTYPES[d][0])
            b = np.array([0, 1, 2, 3, 5, 2, 1], dtype=DTYPES[e][0])
            cases.append(("Pow", d, [(d, a.reshape(5, 7)), (e, b)], {}, f"Pow_{e}"))
    # IsNaN and IsInf (each sign alone and neither), from their own random state so that the
    # cases above keep their values.
    rng_is = np.random.RandomState(8)
    for d, (np_type, _) in DTYPES.items():
        if not np.issubdtype(np_type, np.floating):
            continue
        cases.append(("IsNaN", d, [(d, values(np_type, 35, rng_is).reshape(5, 7))], {}))
        for pos, neg in ((1, 1), (1, 0), (0, 1), (0, 0)):
            a = values(np_type, 35, rng_is).reshape(5, 7)
            attrs = {"detect_positive": pos, "detect_negative": neg}
            cases.append(("IsInf", d, [(d, a)], attrs, f"IsInf_{pos}{neg}"))
    # Activations defined by function bodies, with default and other attributes, from their
    # own random state.
    rng_act = np.random.RandomState(9)
    activations = [
        ("Elu", {}), ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Celu", {"alpha": 2.0}),
        ("LeakyRelu", {"alpha": 0.1}), ("ThresholdedRelu", {"alpha": 0.5}),
        ("HardSigmoid", {}), ("HardSwish", {}), ("Softplus", {}), ("Softsign", {}),
        ("Mish", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
        ("Shrink", {"bias": 0.5, "lambd": 1.5}),
    ]
    for d, (np_type, _) in DTYPES.items():
        if not np.issubdtype(np_type, np.floating):
            continue
        for k, (op, attrs) in enumerate(activations):
            a = values(np_type, 35, rng_act).reshape(5, 7)
            cases.append((op, d, [(d, a)], attrs, f"{op}_{k}"))
        slope = values(np_type, 7, rng_act)
        cases.append(("PRelu", d, [(d, values(np_type, 35, rng_act).reshape(5, 7)), (d, slope)], {}))
    # The circular and hyperbolic functions and their inverses, from their own random state.
    rng_trig = np.random.RandomState(10)
    for d, (np_type, _) in DTYPES.items():
        if not np.issubdtype(np_type, np.floating):
            continue
        for op in TRIGONOMETRIC:
            a = values(np_type, 35, rng_trig).reshape(5, 7)
            cases.append((op, d, [(d, a)], {}))
    # The bitwise ops on integers and BitShift on unsigned ones (by amounts up to past the
    # width), from their own random state.
    rng_bits = np.random.RandomState(11)
    for d, (np_type, _) in DTYPES.items():
        if not np.issubdtype(np_type, np.integer):
            continue
        for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
            a = values(np_type, 35, rng_bits).reshape(5, 7)
            cases.append((op, d, [(d, a), (d, values(np_type, 7, rng_bits))], {}))
        cases.append(("BitwiseNot", d, [(d, values(np_type, 35, rng_bits).reshape(5, 7))], {}))
        if np.issubdtype(np_type, np.unsignedinteger):
            width = 8 * np.dtype(np_type).itemsize
            for direction in ("LEFT", "RIGHT"):
                a = values(np_type, 35, rng_bits).reshape(5, 7)
                amounts = rng_bits.randint(0, width + 3, 35).astype(np_type).reshape(5, 7)
                cases.append(("BitShift", d, [(d, a), (d, amounts)], {"direction": direction},
                              f"BitShift_{direction}"))
    written = 0
    for case in cases:
        op, d, inputs, attrs = case[:4]
        label = case[4] if len(case) > 4 else op
        name = f"ort_{label}_{d}"
        if op in BOOL_OUT:
            out_type = T.BOOL
        elif op == "Cast":
            out_type = attrs["to"]
        elif op == "Where":
            out_type = DTYPES[d][1]
        else:
            out_type = DTYPES[d][1]
        m = model(op, inputs, out_type, attrs)
        try:
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            got = sess.run(None, {f"x{i}": v for i, (_, v) in enumerate(inputs)})
        except Exception:
            continue  # no onnxruntime kernel for this op and dtype
        write_case(out, name, m, [v for _, v in inputs], got)
        out_np = np.asarray(got[0]).dtype
        # onnxruntime's own default test tolerances (test/providers/checkers.cc): float rel
        # 1e-4 abs 1e-5, double rel 1e-5 abs 1e-6; for f16, two units in its last place.
        rtol, atol = {np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float16): (2e-3, 1e-3),
                      np.dtype(np.float64): (1e-5, 1e-6)}.get(out_np, (0.0, 0.0))
        manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": [op], "opset": 18}
        written += 1
    written += recurrent_cases(out, manifest)
    written += window_cases(out, manifest)
    written += resize_cases(out, manifest)
    written += einsum_cases(out, manifest)
    written += channel_cases(out, manifest)
    written += signal_window_cases(out, manifest)
    written += gather_nd_cases(out, manifest)
    written += select_cases(out, manifest)
    written += center_crop_pad_cases(out, manifest)
    written += control_flow_cases(out, manifest)
    written += grid_sample_cases(out, manifest)
    written += spectral_cases(out, manifest)
    written += col2im_cases(out, manifest)
    written += mel_weight_matrix_cases(out, manifest)
    written += integer_matmul_cases(out, manifest)
    written += integer_conv_cases(out, manifest)
    written += roi_align_cases(out, manifest)
    written += max_roi_pool_cases(out, manifest)
    written += ml_cases(out, manifest)
    written += feature_vectorizer_cases(out, manifest)
    written += map_cases(out, manifest)
    written += unpool_cases(out, manifest)
    written += tfidf_cases(out, manifest)
    written += narrow_type_cases(out, manifest)
    written += tensor_scatter_cases(out, manifest)
    written += long_attention_cases(out, manifest)
    written += sequence_cases(out, manifest)
    written += deform_conv_cases(out, manifest)
    written += det_cases(out, manifest)
    written += nms_cases(out, manifest)
    written += unique_cases(out, manifest)
    written += string_cases(out, manifest)
    written += reduce_noop_cases(out, manifest)
    written += integer_shrink_cases(out, manifest)
    written += prelu_broadcast_cases(out, manifest)
    written += empty_input_cases(out, manifest)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(f"wrote {written} differential tests (onnxruntime {ort.__version__}) to {out}")


def recurrent_cases(out, manifest):
    """RNN, GRU and LSTM (f32, which onnxruntime's CPU kernels take) in every direction, with
    biases, initial states, per-item sequence lengths (forward, reversed and both
    ways), GRU's linear_before_reset, clip, other activations and LSTM's peepholes; every output
    compared. Returns how many were written."""
    rng = np.random.RandomState(12)
    seq, batch, size, hidden = 5, 3, 4, 6
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}
    other = {"RNN": ["Relu"], "GRU": ["HardSigmoid", "Softsign"],
             "LSTM": ["Sigmoid", "Elu", "Softplus"]}
    written = 0
    for op in ("RNN", "GRU", "LSTM"):
        g = gates[op]
        variants = []
        # onnxruntime takes layout 0 only (the node tests cover layout 1).
        for direction in ("forward", "reverse", "bidirectional"):
            variants.append((direction, direction, 0, {}, False, False))
            variants.append((f"{direction}_lengths", direction, 0, {}, True, False))
        variants.append(("clip", "bidirectional", 0, {"clip": 0.7}, False, False))
        variants.append(("activations", "bidirectional", 0,
                         {"activations": other[op] * 2}, True, False))
        if op == "GRU":
            variants.append(("linear_before_reset", "bidirectional", 0,
                             {"linear_before_reset": 1}, True, False))
        if op == "LSTM":
            variants.append(("peepholes", "bidirectional", 0, {}, True, True))
            variants.append(("input_forget", "bidirectional", 0, {"input_forget": 1}, False, True))
        # Activation parameters, consumed in order by the functions that take them (the rest
        # at their defaults); ScaledTanh and Affine; ThresholdedRelu at its default.
        params = {
            "RNN": (["LeakyRelu", "HardSigmoid"], [0.2, 0.3], [0.6]),
            "GRU": (["HardSigmoid", "Affine", "ScaledTanh", "ThresholdedRelu"],
                    [0.3, 0.5, 1.5], [0.4, -0.25, 0.8]),
            "LSTM": (["HardSigmoid", "ScaledTanh", "Affine", "Elu", "Tanh", "ThresholdedRelu"],
                     [0.25, 0.9, 0.7, 0.5], [0.45, 1.2]),
        }[op]
        variants.append(("activation_parameters", "bidirectional", 0,
                         {"activations": params[0], "activation_alpha": params[1],
                          "activation_beta": params[2]}, False, False))
        variants.append(("thresholded_relu_default", "forward", 0,
                         {"activations": {"RNN": ["ThresholdedRelu"],
                                          "GRU": ["Sigmoid", "ThresholdedRelu"],
                                          "LSTM": ["Sigmoid", "ThresholdedRelu", "Tanh"]}[op]},
                         False, False))
        for label, direction, layout, attrs, lengths, peep in variants:
            dirs = 2 if direction == "bidirectional" else 1
            def f32(*shape):
                return rng.uniform(-1, 1, shape).astype(np.float32)
            x = f32(seq, batch, size) if layout == 0 else f32(batch, seq, size)
            state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
            feeds = [("X", x), ("W", f32(dirs, g * hidden, size)),
                     ("R", f32(dirs, g * hidden, hidden)), ("B", f32(dirs, 2 * g * hidden))]
            feeds.append(("sequence_lens", np.array([5, 2, 4], np.int32)) if lengths else ("", None))
            feeds.append(("initial_h", f32(*state)))
            if op == "LSTM":
                feeds.append(("initial_c", f32(*state)))
                feeds.append(("P", f32(dirs, 3 * hidden)) if peep else ("", None))
            while feeds[-1][0] == "":
                feeds.pop()
            outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
            node = helper.make_node(op, [n for n, _ in feeds], outputs, hidden_size=hidden,
                                    direction=direction, layout=layout, **attrs)
            infos = [helper.make_tensor_value_info(n, T.INT32 if n == "sequence_lens" else T.FLOAT,
                                                   list(v.shape)) for n, v in feeds if n]
            graph = helper.make_graph([node], "g", infos,
                                      [helper.make_tensor_value_info(o, T.FLOAT, None)
                                       for o in outputs])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            given = [(n, v) for n, v in feeds if n]
            got = sess.run(None, dict(given))
            name = f"ort_{op}_{label}_f32"
            write_case(out, name, m, [v for _, v in given], got)
            manifest[name] = {"rtol": 1e-4, "atol": 1e-5, "data_sets": 1, "ops": [op],
                              "opset": 22}
            written += 1
    return written


def window_cases(out, manifest):
    """Conv, ConvTranspose and the pools: 1-, 2- and 3-D, groups, strides, dilations, uneven
    pads, every auto_pad (odd total padding), ConvTranspose's output_padding and output_shape
    (odd and negative total padding), ceil_mode, count_include_pad, MaxPool's indices in both
    storage orders, LpPool's p, on every dtype onnxruntime's CPU kernels take of f32, f16,
    f64, i8 and u8 (the others are not written). Returns how many were written."""
    rng = np.random.RandomState(27)
    tolerance = {"f32": (1e-4, 1e-5), "f16": (2e-3, 1e-3), "f64": (1e-5, 1e-6),
                 "i8": (0.0, 0.0), "u8": (0.0, 0.0)}
    cases = []
    # (op, label, x shape, w shape or None, bias, attrs, dtypes, outputs)
    floats = ["f32", "f16", "f64"]
    cases += [
        ("Conv", "1d", (2, 3, 11), (4, 3, 3), True, {}, floats, 1),
        ("Conv", "2d_pads_strides", (2, 3, 9, 8), (5, 3, 3, 2), True,
         {"pads": [1, 0, 2, 1], "strides": [2, 3]}, floats, 1),
        ("Conv", "2d_dilations_group", (1, 4, 10, 9), (6, 2, 3, 3), True,
         {"dilations": [2, 1], "group": 2, "pads": [2, 1, 0, 1]}, floats, 1),
        ("Conv", "2d_depthwise", (2, 4, 7, 7), (4, 1, 3, 3), False,
         {"group": 4, "pads": [1, 1, 1, 1]}, floats, 1),
        ("Conv", "2d_same_upper", (1, 2, 8, 7), (3, 2, 4, 3), True,
         {"auto_pad": "SAME_UPPER", "strides": [3, 2]}, floats, 1),
        ("Conv", "2d_same_lower", (1, 2, 8, 7), (3, 2, 4, 3), True,
         {"auto_pad": "SAME_LOWER", "strides": [3, 2]}, floats, 1),
        ("Conv", "2d_valid", (1, 2, 8, 7), (3, 2, 4, 3), False,
         {"auto_pad": "VALID", "strides": [2, 2]}, floats, 1),
        ("Conv", "1x1", (2, 6, 5, 4), (3, 6, 1, 1), True, {}, floats, 1),
        ("Conv", "3d", (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), True,
         {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}, floats, 1),
        ("ConvTranspose", "1d", (2, 3, 6), (3, 4, 3), True, {}, floats, 1),
        ("ConvTranspose", "2d_strides_pads", (1, 3, 5, 4), (3, 2, 3, 3), True,
         {"strides": [2, 3], "pads": [1, 0, 2, 1]}, floats, 1),
        ("ConvTranspose", "2d_output_padding", (2, 2, 4, 4), (2, 3, 3, 2), True,
         {"strides": [3, 2], "output_padding": [2, 1]}, floats, 1),
        ("ConvTranspose", "2d_dilations_group", (1, 4, 4, 5), (4, 2, 3, 2), True,
         {"dilations": [2, 3], "group": 2, "strides": [2, 1]}, floats, 1),
        ("ConvTranspose", "2d_output_shape_odd", (1, 2, 4, 3), (2, 2, 3, 3), False,
         {"strides": [2, 2], "output_shape": [8, 7]}, floats, 1),
        ("ConvTranspose", "2d_output_shape_longer", (1, 2, 3, 3), (2, 3, 3, 3), True,
         {"strides": [3, 2], "output_shape": [10, 8]}, floats, 1),
        ("ConvTranspose", "2d_same_upper", (1, 2, 4, 3), (2, 2, 4, 3), False,
         {"auto_pad": "SAME_UPPER", "strides": [2, 3]}, floats, 1),
        ("ConvTranspose", "2d_same_lower", (1, 2, 4, 3), (2, 2, 4, 3), False,
         {"auto_pad": "SAME_LOWER", "strides": [2, 3]}, floats, 1),
        ("ConvTranspose", "3d", (1, 2, 3, 4, 2), (2, 2, 2, 2, 3), True,
         {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}, floats, 1),
    ]
    pool_types = ["f32", "f16", "f64", "i8", "u8"]
    cases += [
        ("MaxPool", "1d", (2, 3, 11), None, False, {"kernel_shape": [3], "strides": [2]},
         pool_types, 1),
        ("MaxPool", "2d_pads_ceil", (1, 3, 9, 8), None, False,
         {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 1, 1], "ceil_mode": 1},
         pool_types, 1),
        ("MaxPool", "2d_dilations", (2, 2, 10, 9), None, False,
         {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 1, 1, 1]}, pool_types, 1),
        ("MaxPool", "2d_same_upper", (1, 2, 7, 8), None, False,
         {"kernel_shape": [3, 4], "strides": [2, 3], "auto_pad": "SAME_UPPER"}, pool_types, 1),
        ("MaxPool", "2d_indices", (2, 3, 7, 6), None, False,
         {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0]}, ["f32", "f64"], 2),
        ("MaxPool", "2d_indices_column_major", (2, 3, 7, 6), None, False,
         {"kernel_shape": [3, 2], "strides": [2, 2], "storage_order": 1}, ["f32"], 2),
        ("MaxPool", "3d_ceil", (1, 2, 5, 6, 7), None, False,
         {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2], "ceil_mode": 1}, pool_types, 1),
        ("AveragePool", "2d_exclude_pad", (2, 3, 8, 7), None, False,
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 2, 1, 0]}, floats, 1),
        ("AveragePool", "2d_include_pad", (2, 3, 8, 7), None, False,
         {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 2, 1, 0],
          "count_include_pad": 1}, floats, 1),
        ("AveragePool", "2d_ceil_include_pad", (1, 2, 9, 8), None, False,
         {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 0, 1], "ceil_mode": 1,
          "count_include_pad": 1}, floats, 1),
        ("AveragePool", "2d_dilations_ceil", (1, 2, 9, 10), None, False,
         {"kernel_shape": [2, 2], "strides": [2, 3], "dilations": [2, 2], "ceil_mode": 1},
         floats, 1),
        ("AveragePool", "1d_same_lower", (2, 2, 9), None, False,
         {"kernel_shape": [4], "strides": [2], "auto_pad": "SAME_LOWER"}, floats, 1),
        ("LpPool", "2d_p1", (1, 2, 7, 6), None, False,
         {"kernel_shape": [3, 2], "strides": [2, 1], "p": 1, "pads": [1, 0, 0, 1]}, floats, 1),
        ("LpPool", "2d_p2", (1, 2, 7, 6), None, False,
         {"kernel_shape": [2, 3], "strides": [1, 2]}, floats, 1),
        ("LpPool", "2d_p3", (1, 2, 7, 6), None, False,
         {"kernel_shape": [2, 2], "p": 3}, floats, 1),
        ("GlobalAveragePool", "3d", (2, 3, 4, 5, 3), None, False, {}, floats, 1),
        ("GlobalMaxPool", "2d", (2, 3, 4, 5), None, False, {}, pool_types, 1),
        ("GlobalLpPool", "2d_p3", (2, 3, 4, 5), None, False, {"p": 3}, floats, 1),
    ]
    written = 0
    for op, label, xs, ws, bias, attrs, dtypes, n_out in cases:
        for d in dtypes:
            np_type, onnx_type = DTYPES[d]
            if np.issubdtype(np_type, np.integer):
                x = rng.randint(np.iinfo(np_type).min, np.iinfo(np_type).max + 1, xs)
                x = x.astype(np_type)
            else:
                x = rng.uniform(-2, 2, xs).astype(np_type)
            feeds = [("X", x)]
            if ws is not None:
                feeds.append(("W", rng.uniform(-1, 1, ws).astype(np_type)))
                if bias:
                    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
                    feeds.append(("B", rng.uniform(-1, 1, (m,)).astype(np_type)))
            outputs = ["Y", "Indices"][:n_out]
            node = helper.make_node(op, [n for n, _ in feeds], outputs, **attrs)
            infos = [helper.make_tensor_value_info(n, onnx_type, list(v.shape)) for n, v in feeds]
            outs = [helper.make_tensor_value_info("Y", onnx_type, None)]
            if n_out == 2:
                outs.append(helper.make_tensor_value_info("Indices", T.INT64, None))
            graph = helper.make_graph([node], "g", infos, outs)
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
            try:
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                got = sess.run(None, dict(feeds))
            except Exception:  # no CPU kernel for this dtype
                continue
            name = f"ort_{op}_{label}_{d}"
            write_case(out, name, m, [v for _, v in feeds], got)
            rtol, atol = tolerance[d]
            manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": [op],
                              "opset": 22}
            written += 1
    return written


def resize_cases(out, manifest):
    """Resize in each mode and coordinate transformation, with scales and sizes, axes,
    antialias, exclude_outside, tf_crop_and_resize's extrapolation, on f32, f16 and f64 (and
    u8 and i8 in nearest mode, exact), and Resize-10 (X, scales), whose nearest positions
    round down when enlarging and up when shrinking. Returns how many were written."""
    rng = np.random.RandomState(19)
    tolerance = {"f32": (1e-4, 1e-5), "f16": (2e-3, 1e-3), "f64": (1e-5, 1e-6),
                 "i8": (0.0, 0.0), "u8": (0.0, 0.0)}
    floats = ["f32", "f16", "f64"]
    every = floats + ["u8", "i8"]
    f = np.float32
    # (label, x shape, roi, scales, sizes, attrs, dtypes, opset)
    cases = [
        ("nearest_up", (1, 2, 3, 4), None, [1, 1, 2.5, 1.7], None, {}, every, 19),
        ("nearest_down_ceil", (1, 2, 7, 9), None, [1, 1, 0.6, 0.45], None,
         {"nearest_mode": "ceil"}, every, 19),
        ("nearest_sizes_align_corners_floor", (2, 1, 5, 6), None, None, [2, 1, 8, 4],
         {"coordinate_transformation_mode": "align_corners", "nearest_mode": "floor"}, every, 19),
        ("nearest_round_prefer_ceil_asymmetric", (1, 1, 4, 5), None, [1, 1, 1.5, 2.0], None,
         {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "round_prefer_ceil"},
         every, 19),
        ("linear_up_half_pixel", (1, 2, 4, 5), None, [1, 1, 2.0, 1.5], None,
         {"mode": "linear"}, floats, 19),
        ("linear_down_pytorch_half_pixel", (1, 2, 9, 7), None, None, [1, 2, 4, 1],
         {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, floats, 19),
        ("linear_antialias", (1, 1, 12, 10), None, [1, 1, 0.4, 0.7], None,
         {"mode": "linear", "antialias": 1}, floats, 19),
        ("linear_axes_not_larger", (2, 3, 6, 8), None, None, [5, 9],
         {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}, floats, 19),
        ("cubic_up_align_corners", (1, 1, 4, 4), None, [1, 1, 1.75, 2.5], None,
         {"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, floats, 19),
        ("cubic_down_exclude_outside", (1, 2, 8, 9), None, [1, 1, 0.5, 0.7], None,
         {"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, floats, 19),
        ("cubic_antialias", (1, 1, 10, 11), None, [1, 1, 0.35, 0.6], None,
         {"mode": "cubic", "antialias": 1}, floats, 19),
        ("tf_crop_and_resize_extrapolation", (1, 1, 6, 7), [0, 0, 0.2, -0.25, 1, 1, 0.9, 1.2],
         None, [1, 1, 5, 6],
         {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
          "extrapolation_value": 7.5}, floats, 19),
        ("3d_linear_half_pixel_symmetric", (1, 1, 3, 4, 5), None, [1, 1, 1.5, 0.75, 2.2], None,
         {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
         ["f32"], 19),
        ("v10_nearest_up", (1, 1, 3, 4), None, [1, 1, 2.5, 1.5], None, {}, ["f32", "u8"], 10),
        ("v10_nearest_down", (1, 1, 9, 7), None, [1, 1, 0.6, 0.45], None, {}, ["f32", "u8"], 10),
        ("v10_linear", (1, 1, 4, 5), None, [1, 1, 1.5, 0.8], None, {"mode": "linear"},
         ["f32"], 10),
    ]
    written = 0
    for label, xs, roi, scales, sizes, attrs, dtypes, opset in cases:
        for d in dtypes:
            np_type, onnx_type = DTYPES[d]
            if np.issubdtype(np_type, np.integer):
                x = rng.randint(np.iinfo(np_type).min, np.iinfo(np_type).max + 1, xs)
                x = x.astype(np_type)
            else:
                x = rng.uniform(-2, 2, xs).astype(np_type)
            inits = []
            if opset >= 11:
                names = ["X", "roi", "scales", "sizes"]
                inits.append(numpy_helper.from_array(np.array(roi or [], f), "roi"))
                inits.append(numpy_helper.from_array(np.array(scales or [], f), "scales"))
                if sizes is not None:
                    inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
                else:
                    names = names[:3]
            else:
                names = ["X", "scales"]
                inits.append(numpy_helper.from_array(np.array(scales, f), "scales"))
            node = helper.make_node("Resize", names, ["Y"], **attrs)
            graph = helper.make_graph(
                [node], "g", [helper.make_tensor_value_info("X", onnx_type, list(xs))],
                [helper.make_tensor_value_info("Y", onnx_type, None)], initializer=inits)
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            try:
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                got = sess.run(None, {"X": x})
            except Exception:  # no CPU kernel for this dtype
                continue
            name = f"ort_Resize_{label}_{d}"
            write_case(out, name, m, [x], got)
            rtol, atol = tolerance[d]
            manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": ["Resize"],
                              "opset": opset}
            written += 1
    return written


def einsum_cases(out, manifest):
    """Einsum: products, batches, ellipses broadcast across operands, diagonals and traces,
    sums, transposes, implicit outputs and three operands, on every dtype of f32, f64, f16,
    i32 and i64 onnxruntime's CPU kernel takes. Returns how many were written."""
    rng = np.random.RandomState(28)
    tolerance = {"f32": (1e-4, 1e-5), "f16": (2e-3, 1e-3), "f64": (1e-5, 1e-6),
                 "i32": (0.0, 0.0), "i64": (0.0, 0.0)}
    cases = [
        ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
        ("implicit_matmul", "ij,jk", [(3, 4), (4, 5)]),
        ("attention_scores", "bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("ellipsis_broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (2, 5, 4, 2)]),
        ("outer", "i,j->ij", [(4,), (5,)]),
        ("inner_scalar", "i,i->", [(6,), (6,)]),
        ("trace", "ii", [(5, 5)]),
        ("batch_diagonal", "bii->bi", [(3, 4, 4)]),
        ("sum_axis", "ijk->ik", [(3, 4, 5)]),
        ("transpose3", "abc->cba", [(2, 3, 4)]),
        ("three_operands", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
        ("elementwise_three", "i,i,i->i", [(7,), (7,), (7,)]),
        ("shared_kept", "bij,bjk->bjik", [(2, 3, 4), (2, 4, 5)]),
        ("upper_case", "Ab,bC->AC", [(3, 4), (4, 2)]),
    ]
    written = 0
    for label, equation, shapes in cases:
        for d in ["f32", "f64", "f16", "i32", "i64"]:
            np_type, onnx_type = DTYPES[d]
            if np.issubdtype(np_type, np.integer):
                xs = [rng.randint(-9, 10, s).astype(np_type) for s in shapes]
            else:
                xs = [rng.uniform(-2, 2, s).astype(np_type) for s in shapes]
            names = [f"x{i}" for i in range(len(xs))]
            node = helper.make_node("Einsum", names, ["y"], equation=equation)
            infos = [helper.make_tensor_value_info(n, onnx_type, list(x.shape))
                     for n, x in zip(names, xs)]
            graph = helper.make_graph([node], "g", infos,
                                      [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
            try:
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                got = sess.run(None, dict(zip(names, xs)))
            except Exception:  # no CPU kernel for this dtype
                continue
            name = f"ort_Einsum_{label}_{d}"
            write_case(out, name, m, xs, got)
            rtol, atol = tolerance[d]
            manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": ["Einsum"],
                              "opset": 12}
            written += 1
    return written


def channel_cases(out, manifest):
    """InstanceNormalization, GroupNormalization-21 and LRN (odd and even sizes, other
    alpha, beta and bias), on every float type onnxruntime's CPU kernels take. Returns how
    many were written."""
    rng = np.random.RandomState(21)
    tolerance = {"f32": (1e-4, 1e-5), "f16": (2e-3, 1e-3), "f64": (1e-5, 1e-6)}
    cases = [
        ("InstanceNormalization", "3d", (2, 3, 4, 5, 2), {"epsilon": 1e-3}, "c", 22),
        ("InstanceNormalization", "1d", (3, 4, 7), {}, "c", 22),
        ("GroupNormalization", "groups2", (2, 6, 3, 4), {"num_groups": 2, "epsilon": 1e-4},
         "c", 21),
        ("GroupNormalization", "groups1", (1, 4, 5), {"num_groups": 1}, "c", 21),
        ("LRN", "size3", (2, 7, 3, 4), {"size": 3}, None, 13),
        ("LRN", "size5_params", (1, 9, 2, 5), {"size": 5, "alpha": 0.01, "beta": 0.5,
                                               "bias": 2.0}, None, 13),
    ]
    written = 0
    for op, label, xs, attrs, affine, opset in cases:
        for d in ["f32", "f16", "f64"]:
            np_type, onnx_type = DTYPES[d]
            x = rng.uniform(-2, 2, xs).astype(np_type)
            feeds = [("X", x)]
            if affine:
                feeds.append(("scale", rng.uniform(-1, 1, (xs[1],)).astype(np_type)))
                feeds.append(("B", rng.uniform(-1, 1, (xs[1],)).astype(np_type)))
            node = helper.make_node(op, [n for n, _ in feeds], ["Y"], **attrs)
            infos = [helper.make_tensor_value_info(n, onnx_type, list(v.shape)) for n, v in feeds]
            graph = helper.make_graph([node], "g", infos,
                                      [helper.make_tensor_value_info("Y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            try:
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                got = sess.run(None, dict(feeds))
            except Exception:  # no CPU kernel for this dtype
                continue
            name = f"ort_{op}_{label}_{d}"
            write_case(out, name, m, [v for _, v in feeds], got)
            rtol, atol = tolerance[d]
            manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": [op],
                              "opset": opset}
            written += 1
    return written


def signal_window_cases(out, manifest):
    """HannWindow, HammingWindow and BlackmanWindow: periodic and symmetric, sizes 1 and 10,
    f32 and f64 outputs. Returns how many were written."""
    written = 0
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        for periodic in (0, 1):
            for size in (1, 10):
                for d, code in (("f32", T.FLOAT), ("f64", T.DOUBLE)):
                    node = helper.make_node(op, ["size"], ["y"], periodic=periodic,
                                            output_datatype=code)
                    graph = helper.make_graph(
                        [node], "g", [helper.make_tensor_value_info("size", T.INT64, [])],
                        [helper.make_tensor_value_info("y", code, None)])
                    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                    sess = ort.InferenceSession(m.SerializeToString(),
                                                providers=["CPUExecutionProvider"])
                    x = np.array(size, np.int64)
                    got = sess.run(None, {"size": x})
                    name = f"ort_{op}_periodic{periodic}_size{size}_{d}"
                    write_case(out, name, m, [x], got)
                    rtol, atol = (1e-4, 1e-5) if d == "f32" else (1e-5, 1e-6)
                    manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": [op],
                                      "opset": 17}
                    written += 1
    return written


def gather_nd_cases(out, manifest):
    """GatherND: tuples of 1 to 3 indices, negative ones, batch_dims 0 to 2, on 1-, 2-, 4- and
    8-byte and bool data; bit for bit. Returns how many were written."""
    rng = np.random.RandomState(13)
    cases = [
        ("rows", (3, 4, 5), (2, 1), 0),
        ("elements", (3, 4, 5), (4, 3), 0),
        ("pairs_nested", (3, 4, 5), (2, 3, 2), 0),
        ("batch1", (2, 3, 4), (2, 5, 1), 1),
        ("batch2", (2, 3, 4, 5), (2, 3, 6, 2), 2),
    ]
    written = 0
    for label, ds, idx_shape, b in cases:
        k = idx_shape[-1]
        lens = ds[b:b + k]
        idx = np.stack([rng.randint(-n, n, idx_shape[:-1]) for n in lens], axis=-1)
        idx = idx.astype(np.int64)
        for d in ["f32", "f16", "i8", "i64", "bool"]:
            np_type, onnx_type = DTYPES[d]
            data = values(np_type, int(np.prod(ds)), rng).reshape(ds)
            node = helper.make_node("GatherND", ["data", "indices"], ["y"], batch_dims=b)
            graph = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info("data", onnx_type, list(ds)),
                 helper.make_tensor_value_info("indices", T.INT64, list(idx.shape))],
                [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
            try:
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                got = sess.run(None, {"data": data, "indices": idx})
            except Exception:  # no CPU kernel for this dtype
                continue
            name = f"ort_GatherND_{label}_{d}"
            write_case(out, name, m, [data, idx], got)
            manifest[name] = {"rtol": 0.0, "atol": 0.0, "data_sets": 1, "ops": ["GatherND"],
                              "opset": 13}
            written += 1
    return written


def select_cases(out, manifest):
    """ReverseSequence (time axis first or second, lengths from 1 to the full length, extra
    axes) and Compress (no axis, negative axis, a condition shorter than the axis), on 1-,
    2-, 4- and 8-byte data; bit for bit. Returns how many were written."""
    rng = np.random.RandomState(8)
    cases = [
        ("ReverseSequence", "time_first", (5, 3, 2), np.array([5, 1, 3], np.int64),
         {"time_axis": 0, "batch_axis": 1}),
        ("ReverseSequence", "batch_first", (4, 6), np.array([2, 6, 1, 4], np.int64),
         {"time_axis": 1, "batch_axis": 0}),
        ("Compress", "flat", (3, 4), np.array([True, False, True, True, False, True]), {}),
        ("Compress", "negative_axis", (3, 5, 2), np.array([False, True, True, False, True]),
         {"axis": -2}),
        ("Compress", "short_condition", (4, 3), np.array([True, False]), {"axis": 0}),
    ]
    written = 0
    for op, label, xs, second, attrs in cases:
        for d in ["f32", "f16", "i8", "i64"]:
            np_type, onnx_type = DTYPES[d]
            x = values(np_type, int(np.prod(xs)), rng).reshape(xs)
            name2 = "sequence_lens" if op == "ReverseSequence" else "condition"
            t2 = T.INT64 if op == "ReverseSequence" else T.BOOL
            node = helper.make_node(op, ["x", name2], ["y"], **attrs)
            graph = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info("x", onnx_type, list(xs)),
                 helper.make_tensor_value_info(name2, t2, list(second.shape))],
                [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
            try:
                sess = ort.InferenceSession(m.SerializeToString(),
                                            providers=["CPUExecutionProvider"])
                got = sess.run(None, {"x": x, name2: second})
            except Exception:  # no CPU kernel for this dtype
                continue
            name = f"ort_{op}_{label}_{d}"
            write_case(out, name, m, [x, second], got)
            manifest[name] = {"rtol": 0.0, "atol": 0.0, "data_sets": 1, "ops": [op],
                              "opset": 13}
            written += 1
    return written


def center_crop_pad_cases(out, manifest):
    """CenterCropPad (onnxruntime runs its function body): odd and even crops and pads, mixed
    on one input, negative axes. Bit for bit. Returns how many were written."""
    rng = np.random.RandomState(18)
    cases = [
        ("odd_crop_and_pad", (5, 6, 3), [2, 9, 3], None),
        ("even_crop_odd_pad", (8, 4), [4, 7], None),
        ("negative_axes", (2, 7, 4), [4, 5], [-1, -2]),
    ]
    written = 0
    for label, xs, shape, axes in cases:
        for d in ["f32", "u8"]:
            np_type, onnx_type = DTYPES[d]
            x = values(np_type, int(np.prod(xs)), rng).reshape(xs)
            attrs = {} if axes is None else {"axes": axes}
            node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"], **attrs)
            target = np.array(shape, np.int64)
            graph = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info("x", onnx_type, list(xs)),
                 helper.make_tensor_value_info("shape", T.INT64, [len(shape)])],
                [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            got = sess.run(None, {"x": x, "shape": target})
            name = f"ort_CenterCropPad_{label}_{d}"
            write_case(out, name, m, [x, target], got)
            manifest[name] = {"rtol": 0.0, "atol": 0.0, "data_sets": 1, "ops": ["CenterCropPad"],
                              "opset": 18}
            written += 1
    return written


def ort_case(out, manifest, name, m, feeds, ops, opset, rtol, atol):
    """Runs model `m` on `feeds` (name, value) with onnxruntime and writes it as test `name`
    with its outputs and tolerances; 0 (and a note) where onnxruntime has no kernel for it,
    else 1."""
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        got = sess.run(None, dict(feeds))
    except Exception as e:  # a rank or dtype onnxruntime has no kernel for
        print(f"skipped {name}: {str(e)[:100]}")
        return 0
    write_case(out, name, m, [v for _, v in feeds], got)
    manifest[name] = {"rtol": rtol, "atol": atol, "data_sets": 1, "ops": ops, "opset": opset}
    return 1


def control_flow_cases(out, manifest):
    """If and Loop. If: a condition given as a graph input (both ways) or computed from a
    shape, branches of different shapes, an If in a Loop's body. Loop: bodies that use the
    iteration number on the GPU only (a Gather at it, a Cast of it) and on the host (a Slice
    at it, a condition computed from it, with and without a trip count), no iteration (a trip
    count of 0, a false condition), a value that grows every iteration, i64 and f64 values, a
    Loop in a Loop, a condition output that ends a Loop without a condition input. Every output compared: f32 rtol 1e-4 atol 1e-5, f64 1e-5/1e-6, integers
    bit for bit. Returns how many were written."""
    rng = np.random.RandomState(31)
    mk = helper.make_node

    def info(name, onnx_type, shape):
        return helper.make_tensor_value_info(name, onnx_type, shape)

    def const(name, value):
        return mk("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))

    def loop_body(nodes, carried, scans, extra_inputs=()):
        """A Loop body: inputs i, cond and the carried values (name, type, shape), outputs
        cond_out, the carried outputs (name_out) and the scan outputs (name, type, shape)."""
        inputs = [info("i", T.INT64, []), info("cond", T.BOOL, [])]
        inputs += [info(n, t, s) for n, t, s in carried]
        outputs = [info("cond_out", T.BOOL, [])]
        outputs += [info(n + "_out", t, None) for n, t, _ in carried]
        outputs += [info(n, t, s) for n, t, s in scans]
        return helper.make_graph(nodes, "body", inputs, outputs)

    f32, f64 = T.FLOAT, T.DOUBLE
    cases = []

    # Loop, iteration number on the GPU only: x = 0.5 x + i; scan out x * x.
    body = loop_body([mk("Identity", ["cond"], ["cond_out"]),
                      mk("Cast", ["i"], ["i_f"], to=f32), const("half", np.float32(0.5)),
                      mk("Mul", ["x", "half"], ["x_half"]), mk("Add", ["x_half", "i_f"], ["x_out"]),
                      mk("Mul", ["x_out", "x_out"], ["sq"])],
                     [("x", f32, [3])], [("sq", f32, [3])])
    cases.append(("Loop", "counter_on_gpu", [("M", np.array(6, np.int64)), ("c", np.array(True)),
                                            ("x0", rng.uniform(-1, 1, 3).astype(np.float32))],
                  [mk("Loop", ["M", "c", "x0"], ["x", "sqs"], body=body)], ["x", "sqs"]))
    # Gather of row i of an outer value, in f32 and f64, the condition input left out.
    for label, np_type, onnx_type in (("f32", np.float32, f32), ("f64", np.float64, f64)):
        body = loop_body([const("t", np.array(True)), mk("Identity", ["t"], ["cond_out"]),
                          mk("Gather", ["X", "i"], ["row"]), mk("Add", ["h", "row"], ["sum"]),
                          mk("Tanh", ["sum"], ["h_out"]), mk("Identity", ["h_out"], ["hs"])],
                         [("h", onnx_type, [4])], [("hs", onnx_type, [4])])
        cases.append(("Loop", f"gather_at_iteration_{label}",
                      [("M", np.array(7, np.int64)),
                       ("X", rng.uniform(-1, 1, (7, 4)).astype(np_type)),
                       ("h0", rng.uniform(-1, 1, 4).astype(np_type))],
                      [mk("Loop", ["M", "", "h0"], ["h", "hs"], body=body)], ["h", "hs"]))
    # i64 values: s += i * i, scan out s and i.
    body = loop_body([mk("Identity", ["cond"], ["cond_out"]), mk("Mul", ["i", "i"], ["ii"]),
                      mk("Add", ["s", "ii"], ["s_out"]), mk("Identity", ["s_out"], ["ss"]),
                      mk("Identity", ["i"], ["is"])],
                     [("s", T.INT64, [])], [("ss", T.INT64, []), ("is", T.INT64, [])])
    cases.append(("Loop", "i64_values", [("M", np.array(5, np.int64)), ("c", np.array(True)),
                                         ("s0", np.array(3, np.int64))],
                  [mk("Loop", ["M", "c", "s0"], ["s", "ss", "is"], body=body)],
                  ["s", "ss", "is"]))
    # Slice at the iteration number (as test_loop11): unrolled.
    body = loop_body([mk("Identity", ["cond"], ["cond_out"]), const("one", np.array([1], np.int64)),
                      const("axes", np.array([0], np.int64)),
                      mk("Unsqueeze", ["i", "axes"], ["start"]), mk("Add", ["start", "one"], ["end"]),
                      mk("Slice", ["X", "start", "end"], ["row"]),
                      mk("Add", ["y", "row"], ["y_out"]), mk("Identity", ["y_out"], ["ys"])],
                     [("y", f32, [1, 3])], [("ys", f32, [1, 3])])
    cases.append(("Loop", "slice_at_iteration",
                  [("M", np.array(4, np.int64)), ("c", np.array(True)),
                   ("X", rng.uniform(-1, 1, (4, 3)).astype(np.float32)),
                   ("y0", rng.uniform(-1, 1, (1, 3)).astype(np.float32))],
                  [mk("Loop", ["M", "c", "y0"], ["y", "ys"], body=body)], ["y", "ys"]))
    # The body's condition computed from the iteration number: i < 3 ends after 4 iterations,
    # with a trip count of 10 and without one.
    body = loop_body([const("three", np.array(3, np.int64)), mk("Less", ["i", "three"], ["cond_out"]),
                      const("two", np.float32(2.0)), mk("Mul", ["x", "two"], ["x_out"]),
                      mk("Identity", ["x_out"], ["xs"])],
                     [("x", f32, [2])], [("xs", f32, [2])])
    for label, m in (("trip_count", "M"), ("no_trip_count", "")):
        inputs = [("c", np.array(True)), ("x0", rng.uniform(-1, 1, 2).astype(np.float32))]
        if m:
            inputs.insert(0, ("M", np.array(10, np.int64)))
        cases.append(("Loop", f"condition_from_iteration_{label}", inputs,
                      [mk("Loop", [m, "c", "x0"], ["x", "xs"], body=body)], ["x", "xs"]))
    # No iteration: a trip count of 0, and a false condition.
    body = loop_body([mk("Identity", ["cond"], ["cond_out"]), mk("Neg", ["x"], ["x_out"]),
                      mk("Identity", ["x_out"], ["xs"])],
                     [("x", f32, [3])], [("xs", f32, [3])])
    for label, m, c in (("zero_trips", 0, True), ("false_condition", 5, False)):
        cases.append(("Loop", label, [("M", np.array(m, np.int64)), ("c", np.array(c)),
                                      ("x0", rng.uniform(-1, 1, 3).astype(np.float32))],
                      [mk("Loop", ["M", "c", "x0"], ["x", "xs"], body=body)], ["x", "xs"]))
    # A value that grows every iteration (Concat): it runs unrolled.
    body = loop_body([mk("Identity", ["cond"], ["cond_out"]), mk("Cast", ["i"], ["i_f"], to=f32),
                      const("axes", np.array([0], np.int64)),
                      mk("Unsqueeze", ["i_f", "axes"], ["item"]),
                      mk("Concat", ["v", "item"], ["v_out"], axis=0)],
                     [("v", f32, None)], [])
    cases.append(("Loop", "growing_value", [("M", np.array(5, np.int64)), ("c", np.array(True)),
                                            ("v0", np.array([7.0], np.float32))],
                  [mk("Loop", ["M", "c", "v0"], ["v"], body=body)], ["v"]))
    # A Loop in a Loop: the inner one adds the outer iteration number twice per round.
    inner = helper.make_graph(
        [mk("Identity", ["k_cond"], ["k_cond_out"]), mk("Cast", ["outer_i"], ["oi"], to=f32),
         mk("Add", ["k_a", "oi"], ["k_a_out"])],
        "inner", [info("k", T.INT64, []), info("k_cond", T.BOOL, []), info("k_a", f32, [2])],
        [info("k_cond_out", T.BOOL, []), info("k_a_out", f32, None)])
    outer = helper.make_graph(
        [mk("Identity", ["i"], ["outer_i"]), mk("Identity", ["cond"], ["cond_out"]),
         const("two", np.array(2, np.int64)), const("yes", np.array(True)),
         mk("Loop", ["two", "yes", "a"], ["a_out"], body=inner),
         mk("Identity", ["a_out"], ["as"])],
        "outer", [info("i", T.INT64, []), info("cond", T.BOOL, []), info("a", f32, [2])],
        [info("cond_out", T.BOOL, []), info("a_out", f32, None), info("as", f32, [2])])
    cases.append(("Loop", "nested", [("M", np.array(3, np.int64)), ("c", np.array(True)),
                                     ("a0", rng.uniform(-1, 1, 2).astype(np.float32))],
                  [mk("Loop", ["M", "c", "a0"], ["a", "as"], body=outer)], ["a", "as"]))

    # If on a graph input, both ways; branches of different shapes.
    then_b = helper.make_graph([mk("Add", ["x", "y"], ["r"])], "then", [], [info("r", f32, None)])
    else_b = helper.make_graph([const("s", np.array([-1], np.int64)), mk("Sub", ["x", "y"], ["d"]),
                                mk("Reshape", ["d", "s"], ["r2"])], "else", [], [info("r2", f32, None)])
    for flag in (True, False):
        cases.append(("If", f"graph_input_{str(flag).lower()}",
                      [("c", np.array(flag)), ("x", rng.uniform(-1, 1, (2, 3)).astype(np.float32)),
                       ("y", rng.uniform(-1, 1, (2, 3)).astype(np.float32))],
                      [mk("If", ["c"], ["r"], then_branch=then_b, else_branch=else_b)], ["r"]))
    # The condition from a shape, a branch output that plans a Reshape after the If.
    then_b = helper.make_graph([const("a", np.array([3, -1], np.int64))], "then", [],
                               [info("a", T.INT64, [2])])
    else_b = helper.make_graph([const("b", np.array([-1], np.int64))], "else", [],
                               [info("b", T.INT64, [1])])
    cases.append(("If", "shape_condition",
                  [("x", rng.uniform(-1, 1, (2, 6)).astype(np.float32))],
                  [mk("Size", ["x"], ["n"]), const("five", np.array(5, np.int64)),
                   mk("Greater", ["n", "five"], ["big"]),
                   mk("If", ["big"], ["shape"], then_branch=then_b, else_branch=else_b),
                   mk("Reshape", ["x", "shape"], ["r"])], ["r"]))
    # An If in a Loop's body on the iteration number's parity: h + 1 or h * 2.
    then_b = helper.make_graph([const("one", np.float32(1)), mk("Add", ["h", "one"], ["t"])],
                               "then", [], [info("t", f32, None)])
    else_b = helper.make_graph([const("two", np.float32(2)), mk("Mul", ["h", "two"], ["e"])],
                               "else", [], [info("e", f32, None)])
    body = loop_body([mk("Identity", ["cond"], ["cond_out"]), const("two_i", np.array(2, np.int64)),
                      mk("Mod", ["i", "two_i"], ["parity"]), const("zero", np.array(0, np.int64)),
                      mk("Equal", ["parity", "zero"], ["even"]),
                      mk("If", ["even"], ["h_out"], then_branch=then_b, else_branch=else_b),
                      mk("Identity", ["h_out"], ["hs"])],
                     [("h", f32, [2])], [("hs", f32, [2])])
    cases.append(("If", "in_loop_body", [("M", np.array(5, np.int64)), ("c", np.array(True)),
                                         ("h0", rng.uniform(-1, 1, 2).astype(np.float32))],
                  [mk("Loop", ["M", "c", "h0"], ["h", "hs"], body=body)], ["h", "hs"]))
    # The body's condition ends a Loop whose condition input is left out (the spec's
    # pseudo-code would ignore it; onnxruntime does not): i < 2 ends after 3 of 10 iterations.
    body = loop_body([const("two_i", np.array(2, np.int64)), mk("Less", ["i", "two_i"], ["cond_out"]),
                      const("three", np.float32(3.0)), mk("Sub", ["x", "three"], ["x_out"]),
                      mk("Identity", ["x_out"], ["xs"])],
                     [("x", f32, [2])], [("xs", f32, [2])])
    cases.append(("Loop", "condition_output_without_condition_input",
                  [("M", np.array(10, np.int64)), ("x0", rng.uniform(-1, 1, 2).astype(np.float32))],
                  [mk("Loop", ["M", "", "x0"], ["x", "xs"], body=body)], ["x", "xs"]))

    written = 0
    for op, label, feeds, nodes, outputs in cases:
        type_of = {np.dtype(np.float32): f32, np.dtype(np.float64): f64,
                   np.dtype(np.int64): T.INT64, np.dtype(np.bool_): T.BOOL}
        graph = helper.make_graph(
            nodes, "g", [info(n, type_of[v.dtype], list(v.shape)) for n, v in feeds],
            [onnx.ValueInfoProto(name=o) for o in outputs])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        f64_in = any(v.dtype == np.float64 for _, v in feeds)
        rtol, atol = (1e-5, 1e-6) if f64_in else (1e-4, 1e-5)
        ops = sorted({n.op_type for n in nodes if n.op_type in ("If", "Loop")})
        written += ort_case(out, manifest, f"ort_{op}_{label}", m, feeds, ops, 19, rtol, atol)
    return written


def grid_sample_cases(out, manifest):
    """GridSample: every mode, padding mode and align_corners on 2-D inputs of several batch
    items and channels, coordinates reaching past the borders by up to three times the extent
    (several reflections), coordinates NaN, infinite, huge and far, 1-D and 3-D inputs where
    onnxruntime takes them, f32, f64 and f16. Tolerances as onnxruntime's tests (f16 rtol 2e-3
    atol 1e-3). Returns how many were written."""
    rng = np.random.RandomState(44)
    tolerance = {"f32": (1e-4, 1e-5), "f16": (2e-3, 1e-3), "f64": (1e-5, 1e-6)}
    written = 0
    shapes = [("2d", (2, 3, 5, 4), (2, 3, 6, 2)), ("3d", (1, 2, 3, 4, 2), (1, 2, 3, 2, 3)),
              ("1d", (2, 2, 7), (2, 5, 1))]
    for label, xs, gs in shapes:
        for mode in ("nearest", "linear", "cubic"):
            for padding in ("zeros", "border", "reflection"):
                for align in (0, 1):
                    for d in ("f32", "f64", "f16"):
                        if d != "f32" and (label != "2d" or align == 1):
                            continue
                        np_type, onnx_type = DTYPES[d]
                        x = rng.uniform(-2, 2, xs).astype(np_type)
                        grid = rng.uniform(-3, 3, gs)
                        # Coordinates onnxruntime replaces by -1 (NaN, infinite, past 2^62
                        # pixels) and far ones it reflects from where they lie (past i32's
                        # range in f64).
                        special = {"f64": [1e12, -1e12, 1e30, -1e30], "f32": [1e6, -1e6, 1e30, -1e30],
                                   "f16": [6e4, -6e4]}[d]
                        special = [np.nan, np.inf, -np.inf] + special
                        room = grid.reshape(-1)[5::2]
                        room[:len(special)] = special[:len(room)]
                        grid = grid.astype(np_type)
                        node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                                                padding_mode=padding, align_corners=align)
                        graph = helper.make_graph(
                            [node], "g", [helper.make_tensor_value_info("x", onnx_type, list(xs)),
                                          helper.make_tensor_value_info("grid", onnx_type, list(gs))],
                            [helper.make_tensor_value_info("y", onnx_type, None)])
                        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
                        name = f"ort_GridSample_{label}_{mode}_{padding}_align{align}_{d}"
                        written += ort_case(out, manifest, name, m, [("x", x), ("grid", grid)],
                                            ["GridSample"], 22, *tolerance[d])
    return written


def spectral_cases(out, manifest):
    """DFT (opset 20: real and complex input, every axis, dft_length shorter and longer than
    the signal, inverse, one-sided, the one-sided inverse of even and odd lengths; and DFT-17's
    axis attribute), STFT (a window, a frame length, one- and two-sided, overlapping and gapped
    frames) and AffineGrid (2-D and 3-D, align_corners both ways), in f32 and f64. Tolerances
    as onnxruntime's tests. Returns how many were written."""
    rng = np.random.RandomState(45)
    tolerance = {"f32": (1e-4, 1e-5), "f64": (1e-5, 1e-6)}
    cases = []
    for d in ("f32", "f64"):
        np_type, onnx_type = DTYPES[d]
        # DFT-20: (label, input shape, axis, dft_length, inverse, onesided).
        for label, shape, axis, length, inverse, onesided in [
                ("real_axis1", (2, 8, 3, 1), 1, None, 0, 0),
                ("complex_axis2", (2, 5, 6, 2), 2, None, 0, 0),
                ("complex_axis_minus3", (2, 5, 6, 2), -3, None, 0, 0),
                ("real_onesided", (3, 10, 1), 1, None, 0, 1),
                ("real_onesided_odd", (3, 9, 1), -2, None, 0, 1),
                ("shorter_length", (2, 12, 2), 1, 7, 0, 0),
                ("longer_length", (2, 6, 1), 1, 11, 0, 1),
                ("inverse", (2, 7, 2), 1, None, 1, 0),
                ("inverse_longer", (2, 5, 2), 1, 8, 1, 0),
                ("irfft_even", (2, 5, 2), 1, None, 1, 1),
                ("irfft_odd_length", (2, 5, 2), 1, 9, 1, 1),
                ("irfft_short", (3, 6, 2), 1, 6, 1, 1),
                # Long transforms, factored: 64 x 64, 100 x 100, a prime (Bluestein), a
                # one-sided inverse of 4097 bins, 2^16 points of a real signal. In f64 only:
                # onnxruntime's own f32 results for them are off the exact sums by more than
                # its test tolerance (4e-5 where the exact value is 0), so ours in f32 are
                # held to the exact sums in tests/onnx_ops.rs instead.
                ("long_complex_4096", (2, 4096, 2), 1, None, 0, 0),
                ("long_real_onesided_10000", (1, 10000, 1), 1, None, 0, 1),
                ("long_prime_inverse_10007", (1, 10007, 2), 1, None, 1, 0),
                ("long_irfft_8192", (1, 4097, 2), 1, None, 1, 1),
                ("long_real_65536_axis0", (65536, 1, 1), 0, None, 0, 0),
                # No samples: an empty transform.
                ("empty_complex", (2, 0, 2), 1, None, 0, 0),
                ("empty_real_inverse", (1, 0, 1), 1, None, 1, 0)]:
            if label.startswith("long_") and d == "f32":
                continue
            x = rng.uniform(-2, 2, shape).astype(np_type)
            feeds = [("x", x)]
            names = ["x", "", "axis"]
            if length is not None:
                feeds.append(("n", np.array(length, np.int64)))
                names[1] = "n"
            feeds.append(("axis", np.array(axis, np.int64)))
            node = helper.make_node("DFT", names, ["y"], inverse=inverse, onesided=onesided)
            cases.append((f"DFT_{label}_{d}", "DFT", 20, d, node, feeds))
        # DFT-17: the axis as an attribute.
        x = rng.uniform(-2, 2, (2, 6, 4, 2)).astype(np_type)
        node = helper.make_node("DFT", ["x"], ["y"], axis=2)
        cases.append((f"DFT_opset17_axis_attribute_{d}", "DFT", 17, d, node, [("x", x)]))
        # STFT: (label, signal shape, step, window length or None, frame_length or None,
        # onesided).
        for label, shape, step, window, frame, onesided in [
                ("window_onesided", (2, 32, 1), 4, 8, None, 1),
                ("frame_length_two_sided", (1, 30, 1), 6, None, 10, 0),
                ("window_and_length_gapped", (2, 40, 1), 12, 9, 9, 1),
                ("complex_two_sided", (1, 24, 2), 5, 6, None, 0),
                ("long_frames_2048", (1, 16000, 1), 512, 2048, None, 1)]:
            if label.startswith("long_") and d == "f32":
                continue
            x = rng.uniform(-1, 1, shape).astype(np_type)
            feeds = [("signal", x), ("step", np.array(step, np.int64))]
            names = ["signal", "step", "", ""]
            if window is not None:
                w = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window) / window)).astype(np_type)
                feeds.append(("window", w))
                names[2] = "window"
            if frame is not None:
                feeds.append(("frame", np.array(frame, np.int64)))
                names[3] = "frame"
            while names[-1] == "":
                names.pop()
            node = helper.make_node("STFT", names, ["y"], onesided=onesided)
            cases.append((f"STFT_{label}_{d}", "STFT", 17, d, node, feeds))
        # AffineGrid.
        for label, theta_shape, size in [("2d", (2, 2, 3), [2, 3, 5, 4]),
                                         ("3d", (2, 3, 4), [2, 1, 3, 4, 2])]:
            for align in (0, 1):
                theta = rng.uniform(-1.5, 1.5, theta_shape).astype(np_type)
                node = helper.make_node("AffineGrid", ["theta", "size"], ["y"],
                                        align_corners=align)
                cases.append((f"AffineGrid_{label}_align{align}_{d}", "AffineGrid", 20, d, node,
                              [("theta", theta), ("size", np.array(size, np.int64))]))
    written = 0
    for name, op, opset, d, node, feeds in cases:
        type_of = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE,
                   np.dtype(np.int64): T.INT64}
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info(n, type_of[v.dtype], list(v.shape)) for n, v in feeds],
            [helper.make_tensor_value_info("y", DTYPES[d][1], None)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        written += ort_case(out, manifest, f"ort_{name}", m, feeds, [op], opset, *tolerance[d])
    return written


def col2im_cases(out, manifest):
    """Col2Im: 1-, 2- and 3-D images, overlapping and gapped blocks (strides below and above
    the block), dilations, uneven pads, several batch items and channels, f32 and f64.
    Tolerances as onnxruntime's tests. Returns how many were written."""
    rng = np.random.RandomState(46)
    cases = [
        ("2d_overlapping", [7, 6], [3, 2], [1, 1], [1, 1], [0, 0, 0, 0], 2, 3),
        ("2d_strided_dilated_padded", [9, 8], [2, 3], [2, 3], [2, 1], [1, 0, 2, 1], 1, 2),
        ("2d_gapped", [10, 9], [2, 2], [4, 3], [1, 1], [0, 1, 0, 0], 2, 1),
        ("1d", [11], [3], [2], [2], [1, 2], 2, 2),
        ("3d", [4, 5, 3], [2, 2, 2], [1, 2, 1], [1, 1, 2], [0, 1, 1, 1, 0, 1], 1, 2),
    ]
    written = 0
    for label, image, block, strides, dilations, pads, n, c in cases:
        k = len(image)
        blocks = [(image[d] + pads[d] + pads[k + d] - dilations[d] * (block[d] - 1) - 1)
                  // strides[d] + 1 for d in range(k)]
        for d in ("f32", "f64"):
            np_type, onnx_type = DTYPES[d]
            x = rng.uniform(-2, 2, (n, c * int(np.prod(block)), int(np.prod(blocks)))).astype(np_type)
            feeds = [("x", x), ("image", np.array(image, np.int64)),
                     ("block", np.array(block, np.int64))]
            node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=strides,
                                    dilations=dilations, pads=pads)
            graph = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info(nm, onnx_type if nm == "x" else T.INT64,
                                               list(v.shape)) for nm, v in feeds],
                [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
            rtol, atol = {"f32": (1e-4, 1e-5), "f64": (1e-5, 1e-6)}[d]
            written += ort_case(out, manifest, f"ort_Col2Im_{label}_{d}", m, feeds, ["Col2Im"],
                                18, rtol, atol)
    return written


def mel_weight_matrix_cases(out, manifest):
    """MelWeightMatrix: speech and music settings, an odd DFT length, bands narrower than a
    bin, f32 and f64 outputs. Tolerances as onnxruntime's tests. Returns how many were
    written."""
    cases = [("speech", 8, 64, 16000, 0.0, 8000.0), ("music", 20, 512, 22050, 60.0, 7600.0),
             ("odd_length", 5, 31, 8000, 100.0, 3000.0), ("narrow_bands", 40, 64, 16000, 20.0, 900.0)]
    written = 0
    for label, mels, length, rate, low, high in cases:
        for d in ("f32", "f64"):
            feeds = [("mels", np.array(mels, np.int64)), ("length", np.array(length, np.int64)),
                     ("rate", np.array(rate, np.int64)), ("low", np.array(low, np.float32)),
                     ("high", np.array(high, np.float32))]
            node = helper.make_node("MelWeightMatrix", [n for n, _ in feeds], ["y"],
                                    output_datatype=DTYPES[d][1])
            graph = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info(n, T.INT64 if v.dtype == np.int64 else T.FLOAT, [])
                 for n, v in feeds],
                [helper.make_tensor_value_info("y", DTYPES[d][1], None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            rtol, atol = {"f32": (1e-4, 1e-5), "f64": (1e-5, 1e-6)}[d]
            written += ort_case(out, manifest, f"ort_MelWeightMatrix_{label}_{d}", m, feeds,
                                ["MelWeightMatrix"], 17, rtol, atol)
    return written


def integer_matmul_cases(out, manifest):
    """MatMulInteger and QLinearMatMul: u8 and i8 operands, scalar zero points (and none),
    2-D and batched 3-D products, scales that round sums both ways and saturate. Bit for bit.
    Returns how many were written."""
    rng = np.random.RandomState(47)
    written = 0
    for d in ("u8", "i8"):
        np_type, onnx_type = DTYPES[d]
        lo, hi = (0, 256) if d == "u8" else (-128, 128)
        for label, a_shape, b_shape in [("2d", (5, 7), (7, 4)), ("3d", (2, 3, 6), (6, 5))]:
            a = rng.randint(lo, hi, a_shape).astype(np_type)
            b = rng.randint(lo, hi, b_shape).astype(np_type)
            a_zp = np.array(rng.randint(lo, hi), np_type)
            b_zp = np.array(rng.randint(lo, hi), np_type)
            cases = [("MatMulInteger", f"{label}_{d}", ["a", "b", "a_zp", "b_zp"],
                      [("a", a), ("b", b), ("a_zp", a_zp), ("b_zp", b_zp)], 10),
                     ("MatMulInteger", f"{label}_{d}_no_zero_points", ["a", "b"],
                      [("a", a), ("b", b)], 10)]
            for y_scale in (0.37, 11.0):
                feeds = [("a", a), ("a_scale", np.array(0.05, np.float32)), ("a_zp", a_zp),
                         ("b", b), ("b_scale", np.array(0.21, np.float32)), ("b_zp", b_zp),
                         ("y_scale", np.array(y_scale, np.float32)),
                         ("y_zp", np.array(rng.randint(lo, hi), np_type))]
                cases.append(("QLinearMatMul", f"{label}_{d}_y_scale_{y_scale}",
                              [n for n, _ in feeds], feeds, 21))
            for op, name, inputs, feeds, opset in cases:
                type_of = {np.dtype(np.float32): T.FLOAT, np.dtype(np.uint8): T.UINT8,
                           np.dtype(np.int8): T.INT8}
                node = helper.make_node(op, inputs, ["y"])
                graph = helper.make_graph(
                    [node], "g",
                    [helper.make_tensor_value_info(n, type_of[v.dtype], list(v.shape))
                     for n, v in feeds],
                    [onnx.ValueInfoProto(name="y")])
                m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
                written += ort_case(out, manifest, f"ort_{op}_{name}", m, feeds, [op], opset,
                                    0.0, 0.0)
    return written


def integer_conv_cases(out, manifest):
    """ConvInteger and QLinearConv: u8 and i8 inputs (u8 kernels for ConvInteger), 2-D with
    pads, strides, dilations and groups, 1-D, per-tensor and per-channel kernel scales, with
    and without a bias and zero points. Bit for bit. Returns how many were written."""
    rng = np.random.RandomState(67)
    written = 0
    type_of = {np.dtype(np.float32): T.FLOAT, np.dtype(np.uint8): T.UINT8,
               np.dtype(np.int8): T.INT8, np.dtype(np.int32): T.INT32}
    geometries = [("2d", (1, 4, 7, 6), (6, 2, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2}),
                  ("2d_dilated", (2, 3, 8, 8), (4, 3, 2, 2), {"dilations": [2, 3]}),
                  ("1d", (2, 2, 9), (3, 2, 4), {"pads": [2, 1], "strides": [2]})]

    def write(op, name, node_inputs, feeds, attrs, opset):
        nonlocal written
        node = helper.make_node(op, node_inputs, ["y"], **attrs)
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info(n, type_of[v.dtype], list(v.shape)) for n, v in feeds],
            [onnx.ValueInfoProto(name="y")])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        written += ort_case(out, manifest, f"ort_{op}_{name}", m, feeds, [op], opset, 0.0, 0.0)

    for label, xs, ws, attrs in geometries:
        x = rng.randint(0, 256, xs).astype(np.uint8)
        w = rng.randint(0, 256, ws).astype(np.uint8)
        feeds = [("x", x), ("w", w), ("x_zp", np.array(rng.randint(0, 256), np.uint8)),
                 ("w_zp", np.array(rng.randint(0, 256), np.uint8))]
        write("ConvInteger", f"{label}_u8", [n for n, _ in feeds], feeds, attrs, 10)
        write("ConvInteger", f"{label}_u8_no_zero_points", ["x", "w"], feeds[:2], attrs, 10)
        for d, lo, hi in (("u8", 0, 256), ("i8", -128, 128)):
            np_type = np.uint8 if d == "u8" else np.int8
            x = rng.randint(lo, hi, xs).astype(np_type)
            # u8 activations take kernels in [-64, 64): onnxruntime's u8 x s8 kernel on AVX2
            # CPUs without VNNI (AMD EPYC seen) sums pairs of products in saturating 16 bits,
            # which 255 * 128 * 2 overflows, so its result would depend on the CPU.
            w_lo = -64 if d == "u8" else -128
            w = rng.randint(w_lo, -w_lo, ws).astype(np.int8)
            m = ws[0]
            for scales in ("tensor", "channel"):
                w_scale = (np.array(0.02, np.float32) if scales == "tensor"
                           else rng.uniform(0.005, 0.05, m).astype(np.float32))
                w_zp = np.zeros(w_scale.shape, np.int8)
                feeds = [("x", x), ("x_scale", np.array(0.05, np.float32)),
                         ("x_zp", np.array(rng.randint(lo, hi), np_type)),
                         ("w", w), ("w_scale", w_scale), ("w_zp", w_zp),
                         ("y_scale", np.array(0.7, np.float32)),
                         ("y_zp", np.array(rng.randint(lo, hi), np_type)),
                         ("bias", rng.randint(-500, 500, m).astype(np.int32))]
                write("QLinearConv", f"{label}_{d}_{scales}", [n for n, _ in feeds], feeds, attrs, 10)
                write("QLinearConv", f"{label}_{d}_{scales}_no_bias", [n for n, _ in feeds[:8]],
                      feeds[:8], attrs, 10)
    return written


def roi_align_cases(out, manifest):
    """RoiAlign: both modes, both coordinate transformations, sampling ratios 0 (adaptive) to 3, a
    spatial scale, ROIs inside, across and outside the image and smaller than a cell, two
    images and several channels, f32 (and f64, computed in f32 here: f32 tolerances).
    Returns how many were written."""
    rng = np.random.RandomState(71)
    written = 0
    x = rng.uniform(-3, 3, (2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 7.5, 6.0], [2.0, 2.0, 2.4, 2.3], [-3.0, -2.0, 4.0, 12.0],
                     [8.0, 5.0, 30.0, 20.0], [1.0, 0.0, 10.0, 8.0]], np.float32)
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    for mode in ("avg", "max"):
        for ctm in ("half_pixel", "output_half_pixel"):
            for ratio, scale, oh, ow in ((2, 1.0, 3, 4), (1, 0.5, 2, 2), (3, 1.0, 4, 3), (0, 1.0, 3, 4),
                                        (0, 0.5, 2, 2)):
                for d, np_type, onnx_type in (("f32", np.float32, T.FLOAT), ("f64", np.float64, T.DOUBLE)):
                    if d == "f64" and (ratio, mode) != (2, "avg"):
                        continue
                    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode,
                                            coordinate_transformation_mode=ctm, sampling_ratio=ratio,
                                            spatial_scale=scale, output_height=oh, output_width=ow)
                    feeds = [("x", x.astype(np_type)), ("rois", rois.astype(np_type)), ("batch", batch)]
                    graph = helper.make_graph(
                        [node], "g",
                        [helper.make_tensor_value_info("x", onnx_type, list(x.shape)),
                         helper.make_tensor_value_info("rois", onnx_type, list(rois.shape)),
                         helper.make_tensor_value_info("batch", T.INT64, [5])],
                        [helper.make_tensor_value_info("y", onnx_type, None)])
                    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
                    label = f"r{ratio}" if ratio else f"adaptive_{oh}x{ow}"
                    written += ort_case(out, manifest, f"ort_RoiAlign_{mode}_{ctm}_{label}_{d}", m,
                                        feeds, ["RoiAlign"], 16, 1e-4, 1e-5)
    # Adaptive sampling of ROIs computed in the graph (on the GPU): their grid is read back.
    for mode in ("avg", "max"):
        nodes = [helper.make_node("Abs", ["rois_in"], ["rois"]),
                 helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode,
                                  output_height=3, output_width=2)]
        graph = helper.make_graph(
            nodes, "g",
            [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape)),
             helper.make_tensor_value_info("rois_in", T.FLOAT, list(rois.shape)),
             helper.make_tensor_value_info("batch", T.INT64, [5])],
            [helper.make_tensor_value_info("y", T.FLOAT, None)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
        feeds = [("x", x), ("rois_in", rois), ("batch", batch)]
        written += ort_case(out, manifest, f"ort_RoiAlign_{mode}_adaptive_computed_rois", m,
                            feeds, ["RoiAlign", "Abs"], 16, 1e-4, 1e-5)
    # No ROI: an empty output, with a fixed and an adaptive grid.
    for mode, ratio in (("avg", 2), ("max", 0)):
        node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode, sampling_ratio=ratio,
                                output_height=3, output_width=2)
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape)),
             helper.make_tensor_value_info("rois", T.FLOAT, [0, 4]),
             helper.make_tensor_value_info("batch", T.INT64, [0])],
            [helper.make_tensor_value_info("y", T.FLOAT, None)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
        feeds = [("x", x), ("rois", np.zeros((0, 4), np.float32)), ("batch", np.zeros(0, np.int64))]
        written += ort_case(out, manifest, f"ort_RoiAlign_{mode}_no_rois", m, feeds, ["RoiAlign"], 16, 1e-4, 1e-5)
    return written


def feature_vectorizer_cases(out, manifest):
    """FeatureVectorizer (ai.onnx.ml 1, as skl2onnx writes for a scaler of several inputs):
    rows cut and padded to their widths, widths of 0, 1-D inputs (one row), rank 3 (rows of the
    rest flattened), each input type (one per node: the inputs share it) with values that f32
    rounds (i64 and i32 beyond 2^24, f64 past f32's range); bit for bit. No rows at all is left out: onnxruntime 1.32 aborts there.
    Returns how many were written."""
    rng = np.random.RandomState(113)
    written = 0
    f32 = lambda *shape: rng.uniform(-4, 4, shape).astype(np.float32)
    big = np.array([[2**40 + 1, -3, 2**24 + 1], [7, -(2**53) - 3, 0]], np.int64)
    wide = np.array([[1e300, -1e-300, 0.1], [1 / 3, -1e39, 2.5]], np.float64)
    i32 = lambda *shape: rng.randint(-2**31, 2**31 - 1, shape).astype(np.int32)
    for label, feeds, dims in (
            ("cut_and_pad", [f32(4, 2), f32(4, 3)], [3, 1]),
            ("i64", [big, big[:, ::-1] * 3], [2, 5]),
            ("f64", [wide, wide[:, :1]], [4, 1]),
            ("i32", [i32(3, 2), i32(3, 4), i32(3, 1)], [2, 2, 3]),
            ("one_d", [f32(3), f32(1, 2)], [3, 2]),
            ("rank_3", [f32(2, 3, 2)], [4]),
            ("zero_width", [f32(2, 1), f32(2, 2), f32(2, 3)], [0, 2, 3])):
        names = [f"x{k}" for k in range(len(feeds))]
        node = helper.make_node("FeatureVectorizer", names, ["y"], domain="ai.onnx.ml",
                                inputdimensions=dims)
        written += graph_case(out, manifest, f"ort_FeatureVectorizer_{label}", [node],
                              list(zip(names, feeds)), ["y"], ["FeatureVectorizer"], opset=17,
                              ml_opset=1)
    return written


def map_cases(out, manifest):
    """DictVectorizer and CastMap on one map (ai.onnx.ml 1). onnxruntime's Python binding
    gives maps from strings or integers to f32 only, so these are the types compared here
    (`tests/maps.rs` holds the others to values worked out from its kernels): vocabularies
    with keys the map lacks, keys outside them and a repeated entry; CastMap to f32, i64 and
    text (`%f`: NaN of either sign, infinities, values past 2^24 and below 1e-6), DENSE and
    SPARSE (keys past max_map); a DictVectorizer feeding a GPU op. Bit for bit. Returns how
    many were written."""
    written = 0
    f = lambda *v: [float(np.float32(x)) for x in v]
    neg_nan = float(np.frombuffer(np.uint32(0xFFC00000).tobytes(), np.float32)[0])
    def case(label, node, key, feed, out_type, extra=()):
        mt = helper.make_map_type_proto(key, helper.make_tensor_type_proto(T.FLOAT, None))
        g = helper.make_graph([node, *extra], "g", [helper.make_value_info("x", mt)],
                              [helper.make_tensor_value_info("y", out_type, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                helper.make_opsetid("ai.onnx.ml", 1)])
        op = node.op_type
        return ort_case(out, manifest, f"ort_{op}_{label}", m, [("x", feed)], [op], 18, 0, 0)
    words = dict(zip(["b", "é", "", "zz", "a b"], f(1.5, -2.25, 3e38, 7, -0.0)))
    for label, vocab in (("strings", ["a b", "b", "missing", "", "b"]), ("empty_vocabulary", [])):
        node = helper.make_node("DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml")
        node.attribute.append(helper.make_attribute("string_vocabulary", vocab,
                                                    attr_type=onnx.AttributeProto.STRINGS))
        written += case(label, node, T.STRING, words, T.FLOAT)
    ints = dict(zip([5, -1, 2**40, 0], f(0.1, -3, 1e-30, 2.5)))
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain="ai.onnx.ml",
                            int64_vocabulary=[0, 2**40, 9, -1, 5])
    written += case("ints", node, T.INT64, ints, T.FLOAT)
    # Into a GPU op.
    node = helper.make_node("DictVectorizer", ["x"], ["v"], domain="ai.onnx.ml",
                            int64_vocabulary=[5, 0, -1])
    scale = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([2, -1, 0.5], np.float32)))
    mul = helper.make_node("Mul", ["v", "s"], ["y"])
    written += case("into_mul", node, T.INT64, ints, T.FLOAT, [scale, mul])
    floats = dict(zip([3, 1, 2, 8, 0, 6, 11, 4, 9],
                      f(1.5, -2.75, 16777217, 0.0078125, -1e-7, 123456.789, -7.5, 1e20, 3.999)))
    special = dict(zip([0, 1, 2, 3, 4], [float("nan"), neg_nan, float("inf"), -float("inf"), 5e-7]))
    for to, out_type in (("TO_FLOAT", T.FLOAT), ("TO_INT64", T.INT64), ("TO_STRING", T.STRING)):
        for form, max_map in (("DENSE", 1), ("SPARSE", 10), ("SPARSE", 1)):
            feed = dict(floats)
            if to == "TO_INT64":
                # Past i64 (1e20) onnxruntime's static_cast is undefined; Cast saturates.
                feed[4] = 12345.0
            node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", cast_to=to,
                                    map_form=form, max_map=max_map)
            written += case(f"{to.lower()}_{form.lower()}_{max_map}", node, T.INT64, feed, out_type)
        if to != "TO_INT64":
            node = helper.make_node("CastMap", ["x"], ["y"], domain="ai.onnx.ml", cast_to=to)
            written += case(f"{to.lower()}_special", node, T.INT64, special, out_type)
    return written


def max_roi_pool_cases(out, manifest):
    """MaxRoiPool (opset 16: onnxruntime has only version 1's kernel): ROIs inside, across and
    outside the image, malformed (corners swapped) and at half pixels, two images, bins of 1
    to 4, spatial scales, f32 and f16 (onnxruntime's types); ROIs computed in the graph (read
    back to plan the bins). Bit for bit: every output is one of X's elements or 0. Returns how
    many were written."""
    rng = np.random.RandomState(127)
    written = 0
    x = rng.uniform(-3, 3, (2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0, 0.5, 1, 7.5, 6], [1, 2, 2, 2.4, 2.3], [1, -3, -2, 4, 12], [0, 8, 5, 30, 20],
                     [1, 1, 0, 10, 8], [0, 2.5, 1.5, 3.5, 2.5], [1, 20, 20, 30, 30], [0, 6, 6, 2, 2],
                     [1.9, 0, 0, 10, 8]], np.float32)
    for d, np_type, onnx_type in (("f32", np.float32, T.FLOAT), ("f16", np.float16, T.FLOAT16)):
        for pooled, scale in (([2, 2], None), ([3, 4], 0.5), ([1, 1], 1.0), ([4, 3], 2.0), ([7, 7], 1.0)):
            attrs = {"pooled_shape": pooled}
            if scale is not None:
                attrs["spatial_scale"] = scale
            node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], **attrs)
            written += graph_case(out, manifest, f"ort_MaxRoiPool_{pooled[0]}x{pooled[1]}_{scale}_{d}", [node],
                                  [("x", x.astype(np_type)), ("rois", rois.astype(np_type))], ["y"],
                                  ["MaxRoiPool"], opset=16)
    nodes = [helper.make_node("Abs", ["rois_in"], ["rois"]),
             helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[3, 2])]
    written += graph_case(out, manifest, "ort_MaxRoiPool_computed_rois", nodes,
                          [("x", x), ("rois_in", rois)], ["y"], ["MaxRoiPool", "Abs"], opset=16)
    return written


def unpool_cases(out, manifest):
    """MeanVarianceNormalization (default and other axes, f32) and MaxUnpool of MaxPool's own
    indices (1-D, 2-D and 3-D, strides, pads, an output_shape larger than the inferred one,
    where onnxruntime and the ONNX reference differ: decision 24). f32 rtol 1e-4 atol 1e-5,
    MaxUnpool bit for bit. Returns how many were written."""
    rng = np.random.RandomState(59)
    written = 0
    # f32 only: onnxruntime's own expansion of the function body refuses f64 (its epsilon is
    # an f32 constant added to f64 values).
    for d, np_type, onnx_type, tol in (("f32", np.float32, T.FLOAT, (1e-4, 1e-5)),):
        for label, axes in (("default", None), ("last", [3]), ("batch_channels", [0, 1])):
            x = rng.uniform(-2, 2, (2, 3, 4, 5)).astype(np_type)
            attrs = {} if axes is None else {"axes": axes}
            node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **attrs)
            g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, list(x.shape))],
                                  [onnx.ValueInfoProto(name="y")])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            written += ort_case(out, manifest, f"ort_MVN_{label}_{d}", m, [("x", x)],
                                ["MeanVarianceNormalization"], 13, *tol)
    for label, shape, kernel, strides, pads, grow in (
            ("1d", (2, 3, 9), [3], [2], [1, 1], None),
            ("2d", (1, 2, 6, 8), [2, 2], [2, 2], [0, 0, 0, 0], None),
            ("2d_padded", (2, 1, 5, 5), [3, 3], [2, 2], [1, 1, 1, 1], None),
            ("2d_output_shape", (1, 2, 6, 6), [2, 2], [2, 2], [0, 0, 0, 0], [1, 2, 7, 8]),
            ("3d", (1, 2, 4, 4, 4), [2, 2, 2], [2, 2, 2], [0, 0, 0, 0, 0, 0], None)):
        x = rng.permutation(np.arange(np.prod(shape))).reshape(shape).astype(np.float32)
        pool = helper.make_node("MaxPool", ["x"], ["pooled", "indices"], kernel_shape=kernel,
                                strides=strides, pads=pads)
        inputs = ["pooled", "indices"] + (["shape"] if grow else [])
        unpool = helper.make_node("MaxUnpool", inputs, ["y"], kernel_shape=kernel, strides=strides, pads=pads)
        nodes = [pool, unpool]
        if grow:
            nodes.insert(0, helper.make_node("Constant", [], ["shape"],
                                             value=numpy_helper.from_array(np.array(grow, np.int64))))
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                              [onnx.ValueInfoProto(name="y")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
        written += ort_case(out, manifest, f"ort_MaxUnpool_{label}", m, [("x", x)],
                            ["MaxPool", "MaxUnpool"], 22, 0.0, 0.0)
    return written


def tfidf_cases(out, manifest):
    """TfIdfVectorizer on integer tokens: TF, IDF and TFIDF with and without weights, 1- to
    3-grams with skips, i32 and i64 tokens, one row and a batch, rows shorter than the longest
    n-gram. f32 counts bit for bit. Returns how many were written."""
    rng = np.random.RandomState(61)
    pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 4, 5, 6, 7]  # 4 unigrams, 3 bigrams, 2 trigrams
    base = {"ngram_counts": [0, 4, 10], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6, 7, 8],
            "pool_int64s": pool}
    written = 0
    for label, extra, shape, np_type in (
            ("tf_uni_bi_tri_skip2", {"mode": "TF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 2}, (3, 12), np.int64),
            ("idf_bi_skip1", {"mode": "IDF", "min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 1}, (12,), np.int32),
            ("idf_weights", {"mode": "IDF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 0,
                             "weights": [0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 0.75, 4.0, 1.25]}, (2, 10), np.int64),
            ("tfidf_weights_skip3", {"mode": "TFIDF", "min_gram_length": 2, "max_gram_length": 3, "max_skip_count": 3,
                                     "weights": [0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 0.75, 4.0, 1.25]}, (2, 15), np.int32),
            ("tfidf_short_rows", {"mode": "TFIDF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 4}, (4, 2), np.int64)):
        x = rng.randint(1, 9, shape).astype(np_type)
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **base, **extra)
        onnx_type = T.INT64 if np_type == np.int64 else T.INT32
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, list(shape))],
                              [onnx.ValueInfoProto(name="y")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
        written += ort_case(out, manifest, f"ort_TfIdfVectorizer_{label}", m, [("x", x)],
                            ["TfIdfVectorizer"], 9, 0.0, 0.0)
    # String tokens: the same pool as words (repeated words, tokens outside the pool).
    names = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    spool = [names[v] for v in pool]
    for label, extra, shape in (
            ("strings_tf_skip2", {"mode": "TF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 2}, (3, 12)),
            ("strings_tfidf_weights", {"mode": "TFIDF", "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": 1,
                                       "weights": [0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 0.75, 4.0, 1.25]}, (14,))):
        x = np.array([names.get(v, "one") for v in rng.randint(1, 9, shape).ravel()], dtype=object).reshape(shape)
        attrs = dict(base, pool_strings=spool)
        del attrs["pool_int64s"]
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs, **extra)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.STRING, list(shape))],
                              [onnx.ValueInfoProto(name="y")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
        written += ort_case(out, manifest, f"ort_TfIdfVectorizer_{label}", m, [("x", x)],
                            ["TfIdfVectorizer"], 9, 0.0, 0.0)
    # Columns in another order than the pool (and with gaps): weight k is the weight of the
    # pool's n-gram k, which counts into column ngram_indexes[k].
    for label, mode, indexes, tokens in (
            ("idf_weights_permuted", "IDF", [3, 0, 8, 1, 5, 2, 7, 4, 6], "ints"),
            ("tfidf_weights_permuted_gaps", "TFIDF", [6, 0, 12, 2, 9, 4, 10, 1, 7], "ints"),
            ("strings_tfidf_weights_permuted", "TFIDF", [8, 7, 6, 5, 4, 3, 2, 1, 0], "strings")):
        attrs = dict(base, ngram_indexes=indexes, mode=mode, min_gram_length=1, max_gram_length=3, max_skip_count=1,
                     weights=[0.5, 1.5, 2.0, 1.0, 3.0, 0.25, 0.75, 4.0, 1.25])
        values = rng.randint(1, 9, (2, 12))
        if tokens == "strings":
            attrs["pool_strings"] = spool
            del attrs["pool_int64s"]
            x = np.array([names.get(v, "one") for v in values.ravel()], dtype=object).reshape(values.shape)
            onnx_type = T.STRING
        else:
            x, onnx_type = values.astype(np.int64), T.INT64
        node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, list(x.shape))],
                              [onnx.ValueInfoProto(name="y")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
        written += ort_case(out, manifest, f"ort_TfIdfVectorizer_{label}", m, [("x", x)],
                            ["TfIdfVectorizer"], 9, 0.0, 0.0)
    return written


def narrow_type_cases(out, manifest):
    """Casts to the 8-bit floats and back (every format, saturating and not, on values at and
    between their values, past their range, infinities, NaN, f32 subnormals), and
    QuantizeLinear -> DequantizeLinear through the 8-bit floats and the 4-bit integers
    (per tensor, per axis, per block; zero points; saturate 0 and 1), computed inside one model
    so that inputs and outputs are f32. Bit for bit. Returns how many were written."""
    import ml_dtypes
    rng = np.random.RandomState(59)
    written = 0
    formats = {"FLOAT8E4M3FN": (T.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
               "FLOAT8E4M3FNUZ": (T.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
               "FLOAT8E5M2": (T.FLOAT8E5M2, ml_dtypes.float8_e5m2),
               "FLOAT8E5M2FNUZ": (T.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz)}

    def sweep(np8):
        codes = np.arange(256, dtype=np.uint8).view(np8).astype(np.float32)
        finite = np.unique(np.abs(codes[np.isfinite(codes)]))
        mids = (finite[1:] + finite[:-1]) / 2
        around = np.concatenate([finite, mids])
        around = np.concatenate([around, np.nextafter(around, np.float32(np.inf)),
                                 np.nextafter(around, np.float32(-np.inf))])
        top, before = finite[-1], finite[-2]
        beyond = np.array([top + (top - before) / 2, top * 2, 1e30, np.inf, np.nan, 1e-45, 1e-40],
                          np.float32)
        v = np.concatenate([around, beyond, rng.uniform(-2 * top, 2 * top, 200).astype(np.float32)])
        return np.concatenate([v, -v]).astype(np.float32)

    def f32_model(nodes, inputs, opset=21):
        graph = helper.make_graph(nodes, "g",
                                  [helper.make_tensor_value_info(n, T.FLOAT, list(v.shape)) for n, v in inputs],
                                  [helper.make_tensor_value_info("y", T.FLOAT, None)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        return m

    for name, (code, np8) in formats.items():
        x = sweep(np8)
        for saturate in (1, 0):
            nodes = [helper.make_node("Cast", ["x"], ["q"], to=code, saturate=saturate),
                     helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT)]
            written += ort_case(out, manifest, f"ort_Cast_{name}_saturate{saturate}",
                                f32_model(nodes, [("x", x)]), [("x", x)], ["Cast"], 21, 0.0, 0.0)
        # QuantizeLinear to the format (zero point 0 of its type) and back, per tensor and
        # per axis.
        for label, scale, axis in [("tensor", np.array(0.37, np.float32), None),
                                   ("axis", rng.uniform(0.05, 3.0, 4).astype(np.float32), 1)]:
            xq = rng.uniform(-600, 600, (3, 4, 5)).astype(np.float32)
            zp = numpy_helper.from_array(np.zeros(scale.shape, np8), "zp")
            s = numpy_helper.from_array(scale, "scale")
            for saturate in (1, 0):
                attrs = {"saturate": saturate} if axis is None else {"saturate": saturate, "axis": axis}
                nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], **attrs),
                         helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"],
                                          **({} if axis is None else {"axis": axis}))]
                m = f32_model(nodes, [("x", xq)])
                m.graph.initializer.extend([s, zp])
                written += ort_case(out, manifest, f"ort_QDQ_{name}_{label}_saturate{saturate}",
                                    m, [("x", xq)], ["QuantizeLinear", "DequantizeLinear"], 21, 0.0, 0.0)
    # The 4-bit integers: per tensor, per axis and per block, with zero points; values past the
    # range saturate.
    for name, code, lo, hi, np4 in [("INT4", T.INT4, -8, 7, ml_dtypes.int4),
                                     ("UINT4", T.UINT4, 0, 15, ml_dtypes.uint4)]:
        xq = rng.uniform(-12, 12, (4, 6)).astype(np.float32)
        xq[0, :4] = [2.5, 3.5, -2.5, -0.5]
        for label, scale, zp, attrs in [
                ("tensor", np.array(0.9, np.float32), np.array(1 if lo < 0 else 5), {}),
                ("axis", rng.uniform(0.5, 2.0, 6).astype(np.float32), rng.randint(lo, hi + 1, 6), {"axis": 1}),
                ("block", rng.uniform(0.5, 2.0, (4, 2)).astype(np.float32), rng.randint(lo, hi + 1, (4, 2)),
                 {"axis": 1, "block_size": 3})]:
            s = numpy_helper.from_array(scale, "scale")
            z = helper.make_tensor("zp", code, list(zp.shape), zp.astype(np.int64).ravel().tolist())
            nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], **attrs),
                     helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], **attrs)]
            m = f32_model(nodes, [("x", xq)])
            m.graph.initializer.extend([s, z])
            written += ort_case(out, manifest, f"ort_QDQ_{name}_{label}", m, [("x", xq)],
                                ["QuantizeLinear", "DequantizeLinear"], 21, 0.0, 0.0)
    # Casts to the 4- and 2-bit integers of whole numbers in and far past their range, from
    # floats and integers, and back: the high bits are dropped (onnxruntime wraps as the ONNX
    # reference did with ml_dtypes before 0.7, which gives 0 past the range). Fractions are
    # left out: onnxruntime rounds them, the reference truncates (docs/spec-decisions.md 25).
    whole = np.concatenate([np.arange(-40, 41), [-1000, 1000, -65536, 65535, 123456789, -123456789,
                                                 2 ** 30, -(2 ** 31)]]).astype(np.int64)
    for name, code in [("INT4", T.INT4), ("UINT4", T.UINT4), ("INT2", T.INT2), ("UINT2", T.UINT2)]:
        for src_name, src_type, src_np in [("f32", T.FLOAT, np.float32), ("f64", T.DOUBLE, np.float64),
                                           ("i32", T.INT32, np.int32), ("i64", T.INT64, np.int64),
                                           ("i8", T.INT8, np.int8), ("u16", T.UINT16, np.uint16)]:
            with np.errstate(over="ignore"):
                x = whole.astype(src_np).reshape(-1, 1)
            nodes = [helper.make_node("Cast", ["x"], ["q"], to=code),
                     helper.make_node("Cast", ["q"], ["y"], to=T.INT32)]
            graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", src_type, list(x.shape))],
                                      [helper.make_tensor_value_info("y", T.INT32, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
            m.ir_version = 11
            written += ort_case(out, manifest, f"ort_Cast_{src_name}_to_{name}_wraps", m, [("x", x)],
                                ["Cast"], 25, 0.0, 0.0)
    return written


def long_attention_cases(out, manifest):
    """Attention whose scores exceed the 128 MiB that wgpu-ops computes at once, so its
    queries go through a Scan a band of rows at a time: causal over 5800 queries and keys;
    3-D inputs with grouped heads, a boolean mask and a soft cap over 4101 queries (bands of
    unequal division, so the queries are padded). Floats as onnxruntime's tests compare them
    (rtol 1e-4, atol 1e-5). Returns how many were written."""
    rng = np.random.RandomState(67)
    f32 = T.FLOAT
    written = 0
    cases = [
        ("causal", dict(is_causal=1), (1, 1, 5800, 4), (1, 1, 5800, 4), None),
        ("gqa_mask_softcap", dict(q_num_heads=2, kv_num_heads=1, softcap=5.0),
         (1, 4101, 8), (1, 4100, 4), (4101, 4100)),
    ]
    for label, attrs, q_shape, kv_shape, mask_shape in cases:
        feeds = [("Q", rng.uniform(-1, 1, q_shape).astype(np.float32)),
                 ("K", rng.uniform(-1, 1, kv_shape).astype(np.float32)),
                 ("V", rng.uniform(-1, 1, kv_shape).astype(np.float32))]
        if mask_shape is not None:
            feeds.append(("M", rng.uniform(0, 1, mask_shape) < 0.9))
        node = helper.make_node("Attention", [n for n, _ in feeds], ["y"], **attrs)
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info(n, T.BOOL if n == "M" else f32, list(v.shape))
             for n, v in feeds],
            [helper.make_tensor_value_info("y", f32, None)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
        m.ir_version = 10
        written += ort_case(out, manifest, f"long_attention_{label}", m, feeds, ["Attention"],
                            23, 1e-4, 1e-5)
    return written


def tensor_scatter_cases(out, manifest):
    """TensorScatter (KV cache updates): linear and circular mode, with and without write
    indices, the sequence axis at -2, -1, 1 and 2, ranks 3 and 4, f32, f16 and i64. Bit for
    bit. Returns how many were written."""
    rng = np.random.RandomState(61)
    written = 0
    for label, shape, axis, seq, mode, write, d in [
            ("prefill", (2, 3, 8, 4), -2, 8, "linear", None, "f32"),
            ("decode", (2, 3, 8, 4), -2, 1, "linear", [3, 7], "f32"),
            ("append", (2, 3, 8, 4), -2, 3, "linear", [0, 5], "f16"),
            ("circular", (2, 3, 8, 4), -2, 3, "circular", [6, 7], "f32"),
            ("circular_long", (3, 5, 4), 1, 4, "circular", [2, 9, 0], "i64"),
            ("last_axis", (2, 4, 6), -1, 2, "linear", [1, 4], "f32"),
            ("axis_2", (2, 2, 5, 3), 2, 2, "circular", [4, 1], "f32"),
            ("no_indices_circular", (1, 2, 4, 2), -2, 3, "circular", None, "f32")]:
        np_type, onnx_type = DTYPES[d]
        past = values(np_type, int(np.prod(shape)), rng).reshape(shape)
        ushape = list(shape)
        ushape[axis] = seq
        update = values(np_type, int(np.prod(ushape)), rng).reshape(ushape)
        feeds = [("past", past), ("update", update)]
        if write is not None:
            feeds.append(("write", np.array(write, np.int64)))
        node = helper.make_node("TensorScatter", [n for n, _ in feeds], ["y"], mode=mode, axis=axis)
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info(n, onnx_type if n != "write" else T.INT64, list(v.shape))
             for n, v in feeds],
            [helper.make_tensor_value_info("y", onnx_type, None)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
        m.ir_version = 10
        written += ort_case(out, manifest, f"ort_TensorScatter_{label}_{d}", m, feeds,
                            ["TensorScatter"], 24, 0.0, 0.0)
    return written


def sequence_cases(out, manifest):
    """Sequences and optionals: SplitToSequence on every axis with no split (kept and
    squeezed), a scalar split and a list of sizes, on f32, i64 and i32 (onnxruntime has no u8 kernel), its sequence returned;
    ConcatFromSequence joining and stacking; SequenceConstruct, SequenceInsert, SequenceErase
    and SequenceAt at positions given as graph inputs (i32 and i64, negative, left out), and
    SequenceLength; a Loop that carries a sequence; SequenceMap with a tensor input; an If
    whose branches give an optional or nothing, then OptionalHasElement. Sequences and
    integers bit for bit, f32 rtol 1e-4 atol 1e-5. Returns how many were written."""
    rng = np.random.RandomState(83)
    mk = helper.make_node
    written = 0

    def graph_case(name, nodes, feeds, outputs, ops, opset=18, rtol=1e-4, atol=1e-5):
        infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                               list(v.shape)) for n, v in feeds]
        g = helper.make_graph(nodes, "g", infos, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        return ort_case(out, manifest, name, m, feeds, ops, opset, rtol, atol)

    def seq_info(name, elem):
        return helper.make_tensor_sequence_value_info(name, elem, None)

    for label, np_type, elem in (("f32", np.float32, T.FLOAT), ("i64", np.int64, T.INT64),
                                 ("i32", np.int32, T.INT32)):
        x = (rng.uniform(-50, 50, (3, 5, 4)) if np_type == np.float32
             else rng.randint(0, 200, (3, 5, 4))).astype(np_type)
        for axis in (-1, 0, 1):
            dim = x.shape[axis]
            splits = [("ones_keep", None, 1), ("ones_squeeze", None, 0),
                      ("chunks_of_2", np.array(2, np.int64), 1),
                      ("sizes", np.array([1, 0, dim - 1], np.int32), 1)]
            for split_label, split, keepdims in splits:
                feeds = [("x", x)]
                inputs = ["x"]
                if split is not None:
                    feeds.append(("split", split))
                    inputs.append("split")
                nodes = [mk("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims)]
                written += graph_case(f"ort_SplitToSequence_{split_label}_axis{axis}_{label}", nodes,
                                      feeds, [seq_info("s", elem)], ["SplitToSequence"], rtol=0, atol=0)
            # Joined back, and the squeezed parts stacked back.
            nodes = [mk("SplitToSequence", ["x"], ["s"], axis=axis, keepdims=0),
                     mk("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=1),
                     mk("SplitToSequence", ["x", "two"], ["t"], axis=axis),
                     mk("ConcatFromSequence", ["t"], ["z"], axis=axis)]
            nodes.insert(0, mk("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2, np.int64))))
            written += graph_case(
                f"ort_ConcatFromSequence_axis{axis}_{label}", nodes, [("x", x)],
                [onnx.ValueInfoProto(name="y"), onnx.ValueInfoProto(name="z")],
                ["ConcatFromSequence", "SplitToSequence"], rtol=0, atol=0)

    # Positions: [a, b] -> insert c at p1 -> insert a at the end -> erase at p2 -> at p3.
    a, b, c = (rng.uniform(-1, 1, (2, 3)).astype(np.float32) for _ in range(3))
    for p1, p2, p3 in ((np.int64(-1), np.int32(0), np.int64(-2)), (np.int32(2), np.int64(-4), np.int32(1)),
                       (np.int64(0), None, np.int64(0))):
        feeds = [("a", a), ("b", b), ("c", c), ("p1", np.array(p1)), ("p3", np.array(p3))]
        erase = ["s2"]
        if p2 is not None:
            feeds.append(("p2", np.array(p2)))
            erase.append("p2")
        nodes = [mk("SequenceConstruct", ["a", "b"], ["s0"]),
                 mk("SequenceInsert", ["s0", "c", "p1"], ["s1"]),
                 mk("SequenceInsert", ["s1", "a"], ["s2"]),
                 mk("SequenceErase", erase, ["s3"]),
                 mk("SequenceAt", ["s3", "p3"], ["y"]),
                 mk("SequenceLength", ["s3"], ["n"]),
                 mk("Neg", ["y"], ["neg"])]
        name = f"ort_SequenceInsert_Erase_At_{p1}_{p2}_{p3}".replace("-", "m")
        written += graph_case(name, nodes, feeds,
                              [seq_info("s3", T.FLOAT), onnx.ValueInfoProto(name="n"),
                               onnx.ValueInfoProto(name="neg")],
                              ["SequenceAt", "SequenceConstruct", "SequenceErase", "SequenceInsert",
                               "SequenceLength"])

    # A Loop that appends x[0 : i + 1] * i to a sequence, then joins it.
    body = helper.make_graph(
        [mk("Identity", ["cond"], ["cond_out"]),
         mk("Constant", [], ["one"], value=numpy_helper.from_array(np.array([1], np.int64))),
         mk("Constant", [], ["zero"], value=numpy_helper.from_array(np.array([0], np.int64))),
         mk("Unsqueeze", ["i", "zero"], ["i1"]), mk("Add", ["i1", "one"], ["end"]),
         mk("Slice", ["x", "zero", "end"], ["part"]), mk("Cast", ["i"], ["i_f"], to=T.FLOAT),
         mk("Mul", ["part", "i_f"], ["scaled"]), mk("SequenceInsert", ["s", "scaled"], ["s_out"])],
        "body", [helper.make_tensor_value_info("i", T.INT64, []),
                 helper.make_tensor_value_info("cond", T.BOOL, []), seq_info("s", T.FLOAT)],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), seq_info("s_out", T.FLOAT)])
    x = rng.uniform(-1, 1, (5, 2)).astype(np.float32)
    nodes = [mk("SequenceEmpty", [], ["s0"], dtype=T.FLOAT),
             mk("Loop", ["m", "", "s0"], ["s"], body=body),
             mk("ConcatFromSequence", ["s"], ["y"], axis=0)]
    written += graph_case("ort_Loop_carries_a_sequence", nodes, [("m", np.array(4, np.int64)), ("x", x)],
                          [seq_info("s", T.FLOAT), onnx.ValueInfoProto(name="y")],
                          ["ConcatFromSequence", "Loop", "SequenceEmpty", "SequenceInsert"])

    # SequenceMap: each part of a split, plus a bias read whole, then its sum per column.
    body = helper.make_graph(
        [mk("Add", ["part", "bias"], ["shifted"]),
         mk("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([0], np.int64))),
         mk("ReduceSum", ["shifted", "axes"], ["sums"], keepdims=0)],
        "body", [helper.make_tensor_value_info("part", T.FLOAT, None),
                 helper.make_tensor_value_info("bias", T.FLOAT, [3])],
        [helper.make_tensor_value_info("shifted", T.FLOAT, None),
         helper.make_tensor_value_info("sums", T.FLOAT, None)])
    x = rng.uniform(-1, 1, (7, 3)).astype(np.float32)
    nodes = [mk("Constant", [], ["sizes"], value=numpy_helper.from_array(np.array([2, 4, 1], np.int64))),
             mk("SplitToSequence", ["x", "sizes"], ["parts"]),
             mk("SequenceMap", ["parts", "bias"], ["shifted", "sums"], body=body),
             mk("ConcatFromSequence", ["sums"], ["table"], axis=0, new_axis=1)]
    written += graph_case("ort_SequenceMap_split_parts", nodes,
                          [("x", x), ("bias", rng.uniform(-1, 1, 3).astype(np.float32))],
                          [seq_info("shifted", T.FLOAT), onnx.ValueInfoProto(name="table")],
                          ["ConcatFromSequence", "SequenceMap", "SplitToSequence"])

    # An If whose then branch wraps x in an optional and whose else branch gives nothing.
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(T.FLOAT, [2]))
    then_b = helper.make_graph([mk("Optional", ["x"], ["o1"])], "then", [],
                               [helper.make_value_info("o1", opt_type)])
    else_b = helper.make_graph([mk("Optional", [], ["o2"], type=helper.make_tensor_type_proto(T.FLOAT, [2]))],
                               "else", [], [helper.make_value_info("o2", opt_type)])
    for flag in (True, False):
        nodes = [mk("If", ["c"], ["o"], then_branch=then_b, else_branch=else_b),
                 mk("OptionalHasElement", ["o"], ["has"])]
        written += graph_case(f"ort_Optional_in_If_{str(flag).lower()}", nodes,
                              [("c", np.array(flag)), ("x", rng.uniform(-1, 1, 2).astype(np.float32))],
                              [onnx.ValueInfoProto(name="has")],
                              ["If", "Optional", "OptionalHasElement"])
    return written


def deform_conv_cases(out, manifest):
    """DeformConv (2-D): strides, dilations, asymmetric pads, groups and offset groups, a mask
    and a bias, offsets up to 3 pixels that move taps past the image's edges, a 1-pixel-high
    image, f32 and f64. onnxruntime's default tolerances (f32 rtol 1e-4 atol 1e-5, f64 1e-5 and
    1e-6). Returns how many were written."""
    rng = np.random.RandomState(89)
    written = 0
    configs = [
        # label, N, C, H, W, oC, kH, kW, strides, dilations, pads, group, offset_group, mask, bias
        ("basic", 1, 1, 4, 5, 1, 2, 2, [1, 1], [1, 1], [0, 0, 0, 0], 1, 1, False, False),
        ("strided_padded", 2, 3, 7, 6, 4, 3, 3, [2, 1], [1, 1], [1, 0, 2, 1], 1, 1, True, True),
        ("dilated", 1, 2, 8, 8, 3, 3, 2, [1, 2], [2, 1], [2, 1, 2, 1], 1, 1, False, True),
        ("groups", 2, 4, 6, 5, 6, 2, 3, [1, 1], [1, 1], [1, 1, 1, 1], 2, 1, True, False),
        ("offset_groups", 1, 6, 5, 7, 4, 3, 3, [1, 2], [1, 1], [1, 1, 1, 1], 2, 3, True, True),
        ("one_row", 1, 2, 1, 9, 2, 1, 3, [1, 1], [1, 1], [0, 1, 0, 1], 1, 2, False, False),
    ]
    for d, np_type, onnx_type, rtol, atol in (("f32", np.float32, T.FLOAT, 1e-4, 1e-5),
                                              ("f64", np.float64, T.DOUBLE, 1e-5, 1e-6)):
        for (label, n, c, h, w, oc, kh, kw, strides, dilations, pads, group, og, with_mask,
             with_bias) in configs:
            if d == "f64" and label not in ("strided_padded", "offset_groups"):
                continue
            oh = (h + pads[0] + pads[2] - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
            ow = (w + pads[1] + pads[3] - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
            x = rng.uniform(-2, 2, (n, c, h, w)).astype(np_type)
            wt = rng.uniform(-1, 1, (oc, c // group, kh, kw)).astype(np_type)
            offset = rng.uniform(-3, 3, (n, og * 2 * kh * kw, oh, ow)).astype(np_type)
            feeds = [("x", x), ("w", wt), ("offset", offset)]
            names = ["x", "w", "offset"]
            if with_bias:
                feeds.append(("b", rng.uniform(-1, 1, oc).astype(np_type)))
                names.append("b")
            elif with_mask:
                names.append("")
            if with_mask:
                feeds.append(("mask", rng.uniform(0, 1, (n, og * kh * kw, oh, ow)).astype(np_type)))
                names.append("mask")
            node = helper.make_node("DeformConv", names, ["y"], strides=strides, dilations=dilations,
                                    pads=pads, group=group, offset_group=og, kernel_shape=[kh, kw])
            g = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info(nm, onnx_type, list(v.shape)) for nm, v in feeds],
                [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
            written += ort_case(out, manifest, f"ort_DeformConv_{label}_{d}", m, feeds,
                                ["DeformConv"], 19, rtol, atol)
    return written


def det_cases(out, manifest):
    """Det: sides 1 to 32 under no, one and two batch axes, a singular matrix and a
    permutation, in f32 (onnxruntime's default tolerances; it has no f64 kernel, which
    tests/det.rs checks against the interpreter). Returns how many were written."""
    rng = np.random.RandomState(97)
    written = 0
    for d, np_type, onnx_type, rtol, atol in (("f32", np.float32, T.FLOAT, 1e-4, 1e-5),):
        cases = [("2x2", rng.uniform(-2, 2, (2, 2))), ("batch_3x3", rng.uniform(-2, 2, (4, 3, 3))),
                 ("batches_5x5", rng.uniform(-1, 1, (2, 3, 5, 5))), ("1x1", rng.uniform(-3, 3, (3, 1, 1))),
                 ("32x32", rng.uniform(-0.2, 0.2, (2, 32, 32)) + np.eye(32)),
                 ("singular", np.array([[1, 2, 3], [2, 4, 6], [1, 0, 1]])),
                 ("permutation", np.eye(4)[[2, 0, 3, 1]])]
        for label, x in cases:
            x = x.astype(np_type)
            node = helper.make_node("Det", ["x"], ["y"])
            g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, list(x.shape))],
                                  [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
            written += ort_case(out, manifest, f"ort_Det_{label}_{d}", m, [("x", x)], ["Det"], 22, rtol, atol)
    return written


def nms_cases(out, manifest):
    """NonMaxSuppression: 2 batch items, 3 classes, 200 overlapping boxes of both formats
    (corners given either way round), with and without a score threshold, caps of 0, 5 and
    1000, IoU thresholds 0.2 and 0.7, equal scores (the lower index first); compared exactly.
    Returns how many were written."""
    rng = np.random.RandomState(101)
    written = 0
    n = 200
    centres = rng.uniform(-2, 2, (2, n, 2))
    sizes = rng.uniform(0.3, 2.0, (2, n, 2))
    corners = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=2)
    flipped = corners[:, :, [2, 3, 0, 1]]
    flipped[:, ::2] = corners[:, ::2]
    centre_form = np.concatenate([centres[:, :, ::-1], sizes[:, :, ::-1]], axis=2)
    scores = rng.uniform(0, 1, (2, 3, n)).astype(np.float32)
    scores[:, :, 10:20] = 0.5
    for label, boxes, center in (("corners", corners, 0), ("flipped", flipped, 0), ("centres", centre_form, 1)):
        for cap, iou, score in ((1000, 0.2, None), (5, 0.7, 0.3), (0, 0.5, None), (1000, 0.7, 0.45)):
            feeds = [("boxes", boxes.astype(np.float32)), ("scores", scores),
                     ("max", np.array([cap], np.int64)), ("iou", np.array([iou], np.float32))]
            if score is not None:
                feeds.append(("score", np.array([score], np.float32)))
            node = helper.make_node("NonMaxSuppression", [f for f, _ in feeds], ["selected"],
                                    center_point_box=center)
            g = helper.make_graph(
                [node], "g",
                [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                 for nm, v in feeds],
                [helper.make_tensor_value_info("selected", T.INT64, None)])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
            name = f"ort_NonMaxSuppression_{label}_cap{cap}_iou{iou}_score{score}".replace(".", "_")
            written += ort_case(out, manifest, name, m, feeds, ["NonMaxSuppression"], 11, 0, 0)
    # Boxes computed in the graph (anchors plus offsets, exact in f32: dyadic values), more of
    # them than the executor computes while planning: they are computed on the GPU and read
    # back. Likewise the class ids Unique counts (an ArgMax over 24 000 scores).
    many = 5000
    anchors = (rng.randint(-64, 64, (1, many, 4)) / 16).astype(np.float32)
    anchors[:, :, 2:] += 2
    offsets = (rng.randint(-8, 8, (1, many, 4)) / 32).astype(np.float32)
    scores = rng.uniform(0, 1, (1, 2, many)).astype(np.float32)
    nodes = [helper.make_node("Add", ["anchors", "offsets"], ["boxes"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["selected"])]
    feeds = [("anchors", anchors), ("offsets", offsets), ("scores", scores),
             ("max", np.array([50], np.int64)), ("iou", np.array([0.4], np.float32))]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for nm, v in feeds],
        [helper.make_tensor_value_info("selected", T.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    written += ort_case(out, manifest, "ort_NonMaxSuppression_boxes_computed_on_gpu", m, feeds,
                        ["Add", "NonMaxSuppression"], 11, 0, 0)
    logits = rng.uniform(-1, 1, (6000, 4)).astype(np.float32)
    nodes = [helper.make_node("ArgMax", ["logits"], ["ids"], axis=1, keepdims=0),
             helper.make_node("Unique", ["ids"], ["y", "indices", "inverse", "counts"], sorted=1)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("logits", T.FLOAT, [6000, 4])],
        [onnx.ValueInfoProto(name=o) for o in ("y", "indices", "inverse", "counts")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    written += ort_case(out, manifest, "ort_Unique_of_argmax_computed_on_gpu", m, [("logits", logits)],
                        ["ArgMax", "Unique"], 13, 0, 0)
    return written


def unique_cases(out, manifest):
    """Unique: f32 (with -0 and 0, no NaN: onnxruntime's ordering of NaN is undefined) and
    i64 values with repeats, flattened and along each axis of a 2-D and a 3-D input, sorted
    and in order of appearance, all four outputs; compared exactly. Returns how many were
    written."""
    rng = np.random.RandomState(103)
    written = 0
    f = rng.randint(-3, 4, (6, 4)).astype(np.float32) / 2
    f[0, 0], f[3, 1] = -0.0, 0.0
    f[4] = f[1]
    i = rng.randint(-2, 3, (5, 2, 3)).astype(np.int64)
    i[3] = i[0]
    i[:, :, 2] = i[:, :, 0]
    for label, x in (("f32", f), ("i64", i)):
        for axis in [None] + list(range(-x.ndim, x.ndim)):
            for sorted_ in (1, 0):
                attrs = {"sorted": sorted_}
                if axis is not None:
                    attrs["axis"] = axis
                node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
                g = helper.make_graph(
                    [node], "g",
                    [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
                    [onnx.ValueInfoProto(name=o) for o in ("y", "indices", "inverse", "counts")])
                m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
                name = f"ort_Unique_{label}_axis{axis}_sorted{sorted_}".replace("-", "m")
                written += ort_case(out, manifest, name, m, [("x", x)], ["Unique"], 11, 0, 0)
    return written


def strings(*values, shape=None):
    """A numpy array of strings as onnxruntime takes them (dtype object)."""
    a = np.array(list(values), dtype=object)
    return a.reshape(shape) if shape is not None else a


def graph_case(out, manifest, name, nodes, feeds, outputs, ops, opset=20, ml_opset=None, tol=(0, 0),
               out_types=None, contrib=False):
    """A graph of `nodes` on `feeds` (name, array; object arrays are strings) giving `outputs`
    (of the TypeProtos `out_types` where given), run by onnxruntime and compared exactly
    (floats within `tol`, rtol and atol)."""
    def info(nm, v):
        t = T.STRING if v.dtype == object else helper.np_dtype_to_tensor_dtype(v.dtype)
        return helper.make_tensor_value_info(nm, t, list(v.shape))
    outs = [onnx.ValueInfoProto(name=o) if not out_types or out_types[i] is None
            else helper.make_value_info(o, out_types[i]) for i, o in enumerate(outputs)]
    g = helper.make_graph(nodes, "g", [info(nm, v) for nm, v in feeds], outs)
    imports = [helper.make_opsetid("", opset)]
    if ml_opset:
        imports.append(helper.make_opsetid("ai.onnx.ml", ml_opset))
    if contrib:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(g, opset_imports=imports)
    return ort_case(out, manifest, name, m, feeds, ops, opset, *tol)


def string_cases(out, manifest):
    """Tensors of strings: the string ops (StringConcat, StringSplit, RegexFullMatch,
    StringNormalizer with locale "" as this machine has no en_US.UTF-8 for onnxruntime),
    Equal, Cast to and from strings, LabelEncoder with string keys or values, the ops that
    only move values on strings (indices known, and computed on the GPU then read back), and
    classifiers with string labels; all compared exactly. Returns how many were written."""
    rng = np.random.RandomState(107)
    written = 0
    words = strings("apple", "", "Été", "a b", "x.y.z", "naïve", "ÅNGSTRÖM", "mon", shape=(2, 4))
    n = lambda op, i, o, **a: helper.make_node(op, i, o, **a)
    w = 0
    # StringConcat with broadcasting, and Equal of strings.
    for label, a, b in (("same", words, words[::-1]), ("row", words, strings("-", "+", "", "é")),
                        ("scalar", strings("pre_", shape=()), words), ("empty", words[:, :0], strings("z"))):
        w += graph_case(out, manifest, f"ort_StringConcat_{label}", [n("StringConcat", ["a", "b"], ["y"])],
                        [("a", a), ("b", b)], ["y"], ["StringConcat"])
        w += graph_case(out, manifest, f"ort_Equal_strings_{label}", [n("Equal", ["a", "b"], ["y"])],
                        [("a", a), ("b", b)], ["y"], ["Equal"])
    w += graph_case(out, manifest, "ort_Equal_strings_repeats",
                    [n("Equal", ["a", "b"], ["y"])],
                    [("a", strings("a", "b", "a", "", "é", "e")), ("b", strings("a", "a", "b", "", "e", "é"))],
                    ["y"], ["Equal"])
    # StringSplit: delimiters of one and several characters, whitespace runs, maxsplit.
    texts = strings("a.b..c", ".lead", "trail.", "a", "no delimiter", "  spaced  out  words ",
                    "x..y", "...", shape=(2, 4))
    for label, attrs in (("dot", {"delimiter": "."}), ("dots", {"delimiter": ".."}),
                         ("whitespace", {}), ("empty_delimiter", {"delimiter": ""}),
                         ("dot_max1", {"delimiter": ".", "maxsplit": 1}),
                         ("whitespace_max0", {"maxsplit": 0})):
        w += graph_case(out, manifest, f"ort_StringSplit_{label}",
                        [n("StringSplit", ["x"], ["y", "z"], **attrs)], [("x", texts)], ["y", "z"],
                        ["StringSplit"])
    # Where onnxruntime and Python's str.split differ (decision 28): an empty string with a
    # delimiter (one empty piece), and the rest after maxsplit keeps its trailing whitespace.
    w += graph_case(out, manifest, "ort_StringSplit_empty_string_with_delimiter",
                    [n("StringSplit", ["x"], ["y", "z"], delimiter=",")], [("x", strings("", "a,"))],
                    ["y", "z"], ["StringSplit"])
    w += graph_case(out, manifest, "ort_StringSplit_tabs_and_newlines",
                    [n("StringSplit", ["x"], ["y", "z"])], [("x", strings("a\tb\nc  d", " x\t"))],
                    ["y", "z"], ["StringSplit"])
    w += graph_case(out, manifest, "ort_StringSplit_rest_keeps_trailing_whitespace",
                    [n("StringSplit", ["x"], ["y", "z"], maxsplit=1)], [("x", strings("  a  b  c  "))],
                    ["y", "z"], ["StringSplit"])
    # RegexFullMatch: RE2's ASCII classes, anchors, alternation, '.' on non-ASCII characters.
    subjects = strings("abc", "é", "a b", "", "user@gmail.com", "x@yahoo.com.", "www.a-b.com", "A1_", "ü1")
    for label, pattern in (("word", r"\w+"), ("not_word", r"\W*"), ("dot", r"..?"),
                           ("email", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)"),
                           ("boundary", r"www\.[\w.-]+\.\bcom\b"), ("digits", r"\D\d"),
                           ("class", r"[a-c]+|[^a-z]+")):
        w += graph_case(out, manifest, f"ort_RegexFullMatch_{label}",
                        [n("RegexFullMatch", ["x"], ["y"], pattern=pattern)], [("x", subjects)], ["y"],
                        ["RegexFullMatch"])
    # StringNormalizer (locale "": onnxruntime maps each character alone).
    mixed = strings("Monday", "straße", "ÉTÉ", "monday", "Σσς", "İi", "ok", shape=(1, 7))
    for label, attrs in (("upper_insensitive", {"case_change_action": "UPPER", "stopwords": ["MONDAY", "ok"]}),
                         ("lower_sensitive", {"case_change_action": "LOWER", "is_case_sensitive": 1,
                                              "stopwords": ["monday"]}),
                         ("none_all_removed", {"is_case_sensitive": 0,
                                               "stopwords": ["monday", "STRASSE", "straße", "été", "σσς", "İi", "OK"]}),
                         ("c_locale_upper", {"case_change_action": "UPPER", "locale": "C"})):
        attrs = dict(attrs)
        attrs.setdefault("locale", "")
        w += graph_case(out, manifest, f"ort_StringNormalizer_{label}",
                        [n("StringNormalizer", ["x"], ["y"], **attrs)], [("x", mixed)], ["y"],
                        ["StringNormalizer"])
    # Cast to strings (%.8g for floats) and from strings.
    floats = np.array([0.1, 1e-5, 123456789.0, -0.0, np.nan, np.inf, -np.inf, 1 / 3, 1e16, 12345678,
                       1e-4, 99999999, 1e8, 2.5, -7.25e-20, 3.4e38], np.float32)
    for label, x in (("f32", floats), ("f64", floats.astype(np.float64) * 1.0000001),
                     ("f16", floats[:8].astype(np.float16)),
                     ("i64", np.array([0, -1, 2**62, -2**63, 7], np.int64)),
                     ("u8", np.array([0, 255, 17], np.uint8)), ("bool", np.array([True, False]))):
        w += graph_case(out, manifest, f"ort_Cast_{label}_to_string",
                        [n("Cast", ["x"], ["y"], to=T.STRING)], [("x", x)], ["y"], ["Cast"])
    numbers = strings("1.5", " 2", "inf", "-INF", "NaN", "1e3", "+4", "-0", "3.4028236e38", "1E-5", "0.1")
    for label, to in (("f32", T.FLOAT), ("f64", T.DOUBLE)):
        w += graph_case(out, manifest, f"ort_Cast_string_to_{label}",
                        [n("Cast", ["x"], ["y"], to=to)], [("x", numbers)], ["y"], ["Cast"])
    for label, to in (("i64", T.INT64), ("i32", T.INT32), ("u16", T.UINT16)):
        w += graph_case(out, manifest, f"ort_Cast_string_to_{label}",
                        [n("Cast", ["x"], ["y"], to=to)], [("x", strings("12", " 7", "+5", "0", "65535", "-3" if to != T.UINT16 else "3"))],
                        ["y"], ["Cast"])
    # LabelEncoder with strings among its keys or values (ai.onnx.ml 2 and 4).
    keys = ["apple", "Été", "", "mon", "apple"]
    x = words
    for label, attrs, feed in (
            ("string_int", {"keys_strings": keys, "values_int64s": [1, 2, 3, 4, 5], "default_int64": -7}, x),
            ("string_float", {"keys_strings": keys, "values_floats": [0.5, 1.5, 2.5, 3.5, 4.5]}, x),
            ("string_string", {"keys_strings": keys, "values_strings": ["A", "B", "C", "D", "E"],
                               "default_string": "?"}, x),
            ("int_string", {"keys_int64s": [3, 1, 4, 1], "values_strings": ["three", "one", "four", "uno"]},
             np.array([[1, 2, 3], [4, 5, 1]], np.int64)),
            ("float_string", {"keys_floats": [0.5, -1.0, 2.0], "values_strings": ["half", "minus", "two"],
                              "default_string": "none"}, np.array([0.5, 2.0, 3.0, -1.0, -0.0], np.float32))):
        w += graph_case(out, manifest, f"ort_ml_LabelEncoder_{label}",
                        [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)],
                        [("x", feed)], ["y"], ["LabelEncoder"], opset=17, ml_opset=2)
    for label, feed in (("to_int", strings("mon", "tue", "", "sun", "tue", shape=(5, 1))),
                        ("to_string", np.array([[3, 1], [9, -2]], np.int64))):
        w += graph_case(out, manifest, f"ort_ml_CategoryMapper_{label}",
                        [helper.make_node("CategoryMapper", ["x"], ["y"], domain="ai.onnx.ml",
                                          cats_strings=["mon", "tue", "wed", "sun"], cats_int64s=[1, 2, 3, 7],
                                          default_int64=-5, default_string="none")],
                        [("x", feed)], ["y"], ["CategoryMapper"], opset=17, ml_opset=1)
    w += graph_case(out, manifest, "ort_ml_OneHotEncoder_strings",
                    [helper.make_node("OneHotEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                                      cats_strings=["red", "green", "blüe"], zeros=1)],
                    [("x", strings("green", "blüe", "pink", "red", shape=(2, 2)))], ["y"],
                    ["OneHotEncoder"], opset=17, ml_opset=1)
    key_tensor = numpy_helper.from_array(np.array(["b", "a", "c"], dtype=object))
    value_tensor = numpy_helper.from_array(np.array([20, 10, 30], np.int64))
    default = numpy_helper.from_array(np.array([-1], np.int64))
    w += graph_case(out, manifest, "ort_ml_LabelEncoder_tensor_attributes",
                    [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_tensor=key_tensor,
                                      values_tensor=value_tensor, default_tensor=default)],
                    [("x", strings("a", "c", "z", "b", shape=(2, 2)))], ["y"], ["LabelEncoder"], opset=17, ml_opset=4)
    # The ops that only move values, on strings: indices and shapes given, and computed on
    # the GPU (from float inputs: an ArgMax, a comparison) then read back.
    idx = np.array([[3, 0], [-1, 2]], np.int64)
    moves = [
        ("Reshape", [n("Reshape", ["x", "s"], ["y"])], [("s", np.array([4, -1], np.int64))]),
        ("Transpose", [n("Transpose", ["x"], ["y"], perm=[1, 0])], []),
        ("Gather", [n("Gather", ["x", "i"], ["y"], axis=1)], [("i", idx)]),
        ("GatherElements", [n("GatherElements", ["x", "i"], ["y"], axis=1)], [("i", idx)]),
        ("GatherND", [n("GatherND", ["x", "i"], ["y"])], [("i", np.array([[1, 2], [0, 0]], np.int64))]),
        ("Concat", [n("Concat", ["x", "x"], ["y"], axis=0)], []),
        ("Split", [n("Split", ["x", "s"], ["y", "y2"], axis=1)], [("s", np.array([1, 3], np.int64))]),
        ("Slice", [n("Slice", ["x", "a", "b", "c", "d"], ["y"])],
         [("a", np.array([3], np.int64)), ("b", np.array([-5], np.int64)), ("c", np.array([1], np.int64)),
          ("d", np.array([-2], np.int64))]),
        ("Expand", [n("Expand", ["x", "s"], ["y"])], [("s", np.array([3, 1, 4], np.int64))]),
        ("Tile", [n("Tile", ["x", "s"], ["y"])], [("s", np.array([2, 1], np.int64))]),
        ("Unsqueeze_Squeeze", [n("Unsqueeze", ["x", "s"], ["u"]), n("Squeeze", ["u", "s"], ["y"])],
         [("s", np.array([0], np.int64))]),
        ("Flatten", [n("Flatten", ["x"], ["y"], axis=0)], []),
        ("Compress", [n("Compress", ["x", "c"], ["y"], axis=1)], [("c", np.array([True, False, True, True]))]),
        ("Where", [n("Where", ["c", "x", "z"], ["y"])],
         [("c", np.array([[True, False, False, True]] * 2)), ("z", strings("other"))]),
        ("Shape_Size", [n("Shape", ["x"], ["y"]), n("Size", ["x"], ["y2"])], []),
        ("Identity", [n("Identity", ["x"], ["y"])], []),
    ]
    for label, nodes, extra in moves:
        outs = [o for nd in nodes for o in nd.output if o in ("y", "y2")]
        ops = sorted({nd.op_type for nd in nodes})
        w += graph_case(out, manifest, f"ort_strings_{label}", nodes, [("x", words)] + extra, outs, ops)
    scores = rng.uniform(-1, 1, (300, 8)).astype(np.float32)
    w += graph_case(out, manifest, "ort_strings_Gather_of_argmax_computed_on_gpu",
                    [n("ArgMax", ["scores"], ["best"], axis=1, keepdims=0),
                     n("Reshape", ["x", "flat"], ["names"]),
                     n("Gather", ["names", "best"], ["y"])],
                    [("scores", scores), ("x", words), ("flat", np.array([-1], np.int64))], ["y"],
                    ["ArgMax", "Gather", "Reshape"])
    w += graph_case(out, manifest, "ort_strings_Where_of_comparison_computed_on_gpu",
                    [n("Greater", ["scores", "zero"], ["c"]), n("Where", ["c", "yes", "no"], ["y"])],
                    [("scores", scores), ("zero", np.array(0, np.float32)), ("yes", strings("up")),
                     ("no", strings("down"))], ["y"], ["Greater", "Where"])
    # onnxruntime's contrib Tokenizer (skl2onnx's text vectorizers): token expressions (the
    # longest match: "a|ab"), separators, characters, marks, mincharnum, [N, C] inputs, and
    # inputs without any token.
    docs = strings("Hello World", "I love  computer science !", "", "a", "héllo wörld_2 x", "abab")
    for label, attrs, x in (
            ("tokenexp", {"tokenexp": "[a-zA-Z0-9_]+"}, docs),
            ("tokenexp_mark", {"tokenexp": "[a-zA-Z0-9_]+", "mark": 1}, docs),
            ("tokenexp_longest", {"tokenexp": "a|ab|\\w"}, docs),
            ("tokenexp_word_class_min2", {"tokenexp": "\\w+", "mincharnum": 2}, docs),
            ("separators", {"separators": [" ", "o"]}, docs.reshape(2, 3)),
            ("separators_min2", {"separators": ["\\s+", "!"], "mincharnum": 2}, docs),
            ("characters", {"separators": [""]}, docs),
            ("no_tokens", {"tokenexp": "[0-9]+", "mark": 1}, strings("", "abc"))):
        w += graph_case(out, manifest, f"ort_Tokenizer_{label}",
                        [helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft",
                                          pad_value="#", mincharnum=attrs.pop("mincharnum", 1),
                                          mark=attrs.pop("mark", 0), **attrs)],
                        [("x", x)], ["y"], ["Tokenizer"], opset=17, ml_opset=None, contrib=True)
    # ZipMap of scores computed on the GPU (a Softmax), with string and integer labels.
    for label, key_type, attrs in (("strings", T.STRING, {"classlabels_strings": ["cat", "dög", ""]}),
                                   ("ints", T.INT64, {"classlabels_int64s": [7, -1, 3]})):
        maps = helper.make_sequence_type_proto(
            helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(T.FLOAT, None)))
        w += graph_case(out, manifest, f"ort_ml_ZipMap_{label}",
                        [n("Softmax", ["x"], ["p"], axis=1),
                         helper.make_node("ZipMap", ["p"], ["y"], domain="ai.onnx.ml", **attrs)],
                        [("x", rng.uniform(-2, 2, (6, 3)).astype(np.float32))], ["y"], ["Softmax", "ZipMap"],
                        opset=17, ml_opset=1, tol=(1e-4, 1e-5), out_types=[maps])
    # Classifiers with string labels (their labels gathered at the positions the GPU computes;
    # scores to onnxruntime's ML tolerance, as in ml_cases).
    feats = rng.uniform(-1, 1, (40, 3)).astype(np.float32)
    labels = ["cat", "dog", "émeu"]
    coef = list(rng.uniform(-1, 1, 9).astype(np.float32))
    w += graph_case(out, manifest, "ort_ml_LinearClassifier_string_labels",
                    [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                                      coefficients=coef, intercepts=[0.1, -0.2, 0.0],
                                      classlabels_strings=labels, post_transform="SOFTMAX")],
                    [("x", feats)], ["label", "scores"], ["LinearClassifier"], opset=17, ml_opset=1, tol=(1e-4, 1e-5))
    w += graph_case(out, manifest, "ort_ml_LinearClassifier_binary_string_labels",
                    [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                                      coefficients=coef[:3], intercepts=[0.05],
                                      classlabels_strings=["no", "yes"], post_transform="LOGISTIC")],
                    [("x", feats)], ["label", "scores"], ["LinearClassifier"], opset=17, ml_opset=1, tol=(1e-4, 1e-5))
    nodes_, weights = random_forest(rng, 3, 3, 3, ["BRANCH_LEQ", "BRANCH_LT"], 3)
    attrs = forest_attrs(nodes_, weights, "class")
    w += graph_case(out, manifest, "ort_ml_TreeEnsembleClassifier_string_labels",
                    [helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                                      classlabels_strings=labels, **attrs)],
                    [("x", (rng.randint(0, 5, (40, 3)) / 2).astype(np.float32))], ["label", "scores"],
                    ["TreeEnsembleClassifier"], opset=17, ml_opset=3, tol=(1e-4, 1e-5))
    return written + w


def random_forest(rng, trees, features, max_depth, modes, targets, missing=False):
    """Random trees as TreeEnsembleRegressor/Classifier attributes (v3): lists of nodes (tree
    id, node id, feature, threshold, mode, true id, false id, NaN goes true) and of leaf
    weights (tree id, node id, target, weight). Thresholds come from the same small set as
    the features' values (halves from 0 to 2), so equal values happen."""
    nodes, weights = [], []
    for t in range(trees):
        counter = [0]

        def grow(depth):
            nid = counter[0]
            counter[0] += 1
            if depth >= max_depth or (depth > 0 and rng.rand() < 0.3):
                nodes.append([t, nid, 0, 0.0, "LEAF", 0, 0, 0])
                for target in range(targets):
                    if rng.rand() < 0.9 or target == 0:
                        weights.append([t, nid, target, float(np.float32(rng.uniform(-1, 1)))])
                return nid
            entry = [t, nid, int(rng.randint(features)), rng.randint(0, 5) / 2,
                     modes[rng.randint(len(modes))], 0, 0, int(missing and rng.rand() < 0.5)]
            nodes.append(entry)
            entry[5] = grow(depth + 1)
            entry[6] = grow(depth + 1)
            return nid

        grow(0)
    return nodes, weights


def forest_attrs(nodes, weights, prefix):
    cols = list(zip(*nodes))
    w = list(zip(*weights))
    return {"nodes_treeids": list(cols[0]), "nodes_nodeids": list(cols[1]),
            "nodes_featureids": list(cols[2]), "nodes_values": [float(v) for v in cols[3]],
            "nodes_modes": list(cols[4]), "nodes_truenodeids": list(cols[5]),
            "nodes_falsenodeids": list(cols[6]), "nodes_missing_value_tracks_true": list(cols[7]),
            f"{prefix}_treeids": list(w[0]), f"{prefix}_nodeids": list(w[1]),
            f"{prefix}_ids": list(w[2]), f"{prefix}_weights": [float(v) for v in w[3]]}


def ml_cases(out, manifest):
    """ONNX-ML ops of exported scikit-learn models, against onnxruntime's kernels: Binarizer,
    Scaler, Normalizer, Imputer, LinearRegressor and LinearClassifier (every post transform,
    one and several targets or classes, two labels), TreeEnsembleRegressor (random trees of
    every branch mode, NaN features going either way, every aggregate, base values, one and
    two targets), TreeEnsembleClassifier (several classes, classes without weights on some
    leaves, binary models of one weighted class with positive and mixed weights and 0, 1 or 2
    base values, binary models of two weighted classes, labels other than 0 and 1) and
    TreeEnsemble (ai.onnx.ml 5, set membership), SVMRegressor and SVMClassifier (every kernel,
    support vectors or a linear model, one-class, binary and three classes). Scores f32 rtol
    1e-4 atol 1e-5, labels bit for bit; OneHotEncoder and LabelEncoder (integer and float keys,
    NaN and repeated keys, defaults, tensors). Returns how many were written."""
    rng = np.random.RandomState(53)
    types = {"f32": (np.float32, T.FLOAT), "f64": (np.float64, T.DOUBLE),
             "i64": (np.int64, T.INT64), "i32": (np.int32, T.INT32)}
    written = 0

    def case(name, op, x, attrs, outputs, ml_opset=3, domain="ai.onnx.ml"):
        nonlocal written
        np_type = x.dtype
        onnx_type = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE,
                     np.dtype(np.int64): T.INT64, np.dtype(np.int32): T.INT32}[np_type]
        node = helper.make_node(op, ["x"], outputs, domain=domain, **attrs)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, list(x.shape))],
                                  [onnx.ValueInfoProto(name=o) for o in outputs])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
        written += ort_case(out, manifest, f"ort_ml_{name}", m, [("x", x)], [op], 17, 1e-4, 1e-5)

    def features(np_type, rows=6, cols=4, nan=False):
        x = rng.randint(0, 5, (rows, cols)) / 2 + (rng.rand(rows, cols) < 0.3) * rng.uniform(-0.2, 0.2, (rows, cols))
        if nan:
            x[rng.rand(rows, cols) < 0.2] = np.nan
        return x.astype(np_type)

    x32 = features(np.float32)
    case("binarizer", "Binarizer", x32 - 1, {"threshold": 0.25}, ["y"])
    case("binarizer_default", "Binarizer", x32 - 1, {}, ["y"])
    for d, (np_type, _) in types.items():
        x = (rng.uniform(-5, 5, (5, 3)) if d.startswith("f") else rng.randint(-5, 6, (5, 3))).astype(np_type)
        case(f"scaler_{d}", "Scaler", x, {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.25, -1.5]}, ["y"])
        case(f"scaler_one_{d}", "Scaler", x, {"offset": [1.5], "scale": [0.5]}, ["y"])
        x[1] = 0
        for norm in ("MAX", "L1", "L2"):
            case(f"normalizer_{norm}_{d}", "Normalizer", x, {"norm": norm}, ["y"])
    case("normalizer_1d", "Normalizer", np.array([3.0, -4.0, 1.0], np.float32), {"norm": "L2"}, ["y"])
    xn = features(np.float32, nan=True)
    case("imputer_nan", "Imputer", xn, {"imputed_value_floats": [9.0, 8.0, 7.0, 6.0],
                                        "replaced_value_float": float("nan")}, ["y"])
    case("imputer_value_one", "Imputer", x32, {"imputed_value_floats": [-3.0], "replaced_value_float": 1.0}, ["y"])
    xi = rng.randint(-2, 3, (4, 3)).astype(np.int64)
    case("imputer_i64", "Imputer", xi, {"imputed_value_int64s": [7, 8, 9], "replaced_value_int64": 0}, ["y"])

    # Linear models: coefficients [targets, 4].
    for targets, posts in ((1, ("NONE", "PROBIT")), (3, ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"))):
        coef = rng.uniform(-1, 1, targets * 4).round(2).tolist()
        inter = rng.uniform(-0.5, 0.5, targets).round(2).tolist()
        for post in posts:
            xp = (x32 * 0.1) if post == "PROBIT" else x32
            if post == "PROBIT":
                coef_p = (np.abs(np.array(coef)) * 0.1).tolist()
                attrs = {"coefficients": coef_p, "intercepts": [0.2] * targets, "targets": targets, "post_transform": post}
            else:
                attrs = {"coefficients": coef, "intercepts": inter, "targets": targets, "post_transform": post}
            case(f"linear_regressor_{targets}_{post}", "LinearRegressor", xp, attrs, ["y"])
    case("linear_regressor_no_intercepts", "LinearRegressor", x32,
         {"coefficients": [0.5, -1.0, 0.25, 2.0, 1.0, 1.0, -1.0, 0.5], "targets": 2}, ["y"])
    case("linear_regressor_1d", "LinearRegressor", x32[0], {"coefficients": [0.5, -1.0, 0.25, 2.0], "intercepts": [1.0]}, ["y"])
    coef3 = rng.uniform(-1, 1, 12).round(2).tolist()
    for post in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
        for d in ("f32", "f64", "i64"):
            x = x32.astype(types[d][0]) if d != "i64" else rng.randint(-3, 4, (6, 4)).astype(np.int64)
            case(f"linear_classifier_3_{post}_{d}", "LinearClassifier", x,
                 {"coefficients": coef3, "intercepts": [0.1, -0.2, 0.05], "classlabels_ints": [4, 7, 9],
                  "post_transform": post}, ["label", "scores"])
    for post in ("NONE", "LOGISTIC"):
        case(f"linear_classifier_binary_{post}", "LinearClassifier", x32 - 1,
             {"coefficients": [0.5, -1.0, 0.25, 0.75], "intercepts": [-0.1], "classlabels_ints": [3, 8],
              "post_transform": post}, ["label", "scores"])

    # Tree ensembles, f32 and f64 features (with NaN), every branch mode.
    all_modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    for label, modes, missing in (("leq", ["BRANCH_LEQ"], False), ("lt_missing", ["BRANCH_LT"], True),
                                  ("mixed", all_modes, True)):
        for targets in (1, 2):
            nodes, weights = random_forest(rng, 4, 4, 4, modes, targets, missing)
            base = rng.uniform(-1, 1, targets).round(2).tolist()
            for agg in ("SUM", "AVERAGE", "MIN", "MAX"):
                attrs = forest_attrs(nodes, weights, "target")
                attrs.update(n_targets=targets, aggregate_function=agg, base_values=base)
                for d in ("f32", "f64"):
                    x = features(types[d][0], rows=12, nan=True)
                    case(f"tree_regressor_{label}_{targets}_{agg}_{d}", "TreeEnsembleRegressor", x, attrs, ["y"])
            attrs = forest_attrs(nodes, weights, "target")
            attrs.update(n_targets=targets, post_transform="PROBIT" if targets == 1 else "SOFTMAX")
            case(f"tree_regressor_{label}_{targets}_post", "TreeEnsembleRegressor",
                 features(np.float32, rows=12), attrs, ["y"])
    # Regressors whose leaves lack weights: onnxruntime scores a target that no reached leaf
    # weights as 0, without its base value (target 2 has no weight at all); a single target
    # takes a leaf's first weight (two on some leaves) and 0 where it has none, also for MIN
    # and MAX.
    for targets in (1, 3):
        nodes, weights = random_forest(rng, 3, 4, 3, ["BRANCH_LEQ", "BRANCH_GT"], targets)
        if targets == 1:
            kept = [w for w in weights if rng.rand() < 0.6]
            weights = kept + [[t, n, c, -w] for t, n, c, w in kept if rng.rand() < 0.5]
        else:
            weights = [w for w in weights if w[2] != 2 and rng.rand() < 0.5]
        base = rng.uniform(-1, 1, targets).round(2).tolist()
        posts = ("NONE", "PROBIT") if targets == 1 else ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")
        for agg in ("SUM", "AVERAGE", "MIN", "MAX"):
            for post in posts:
                attrs = forest_attrs(nodes, weights, "target")
                attrs.update(n_targets=targets, aggregate_function=agg, base_values=base,
                             post_transform=post)
                case(f"tree_regressor_sparse_{targets}_{agg}_{post}", "TreeEnsembleRegressor",
                     features(np.float32, rows=12), attrs, ["y"])
    # Classifiers: several classes, some leaves without a class's weight.
    for label, modes in (("leq", ["BRANCH_LEQ"]), ("mixed", all_modes)):
        nodes, weights = random_forest(rng, 3, 4, 3, modes, 3, True)
        for post, base in (("NONE", []), ("SOFTMAX", []), ("LOGISTIC", [0.1, 0.2, -0.3]), ("SOFTMAX_ZERO", [])):
            attrs = forest_attrs(nodes, weights, "class")
            attrs.update(classlabels_int64s=[2, 5, 11], post_transform=post)
            if base:
                attrs["base_values"] = base
            case(f"tree_classifier_3_{label}_{post}", "TreeEnsembleClassifier",
                 features(np.float32, rows=12, nan=True), attrs, ["label", "scores"])
    # Binary classifiers: one weighted class (class 0 or 1; weights positive or mixed) with 0,
    # 1 or 2 base values, and two weighted classes.
    for weighted, sign in ((0, "positive"), (0, "mixed"), (1, "positive"), (1, "mixed"), (None, "mixed")):
        nodes, weights = random_forest(rng, 3, 4, 3, ["BRANCH_LEQ"], 2)
        if weighted is None:
            pass
        else:
            weights = [[t, n, weighted, abs(w) if sign == "positive" else w] for t, n, c, w in weights if c == 0]
        for base in ([], [0.3], [-0.2, 0.4]):
            for post in ("NONE", "LOGISTIC", "SOFTMAX"):
                attrs = forest_attrs(nodes, weights, "class")
                attrs.update(classlabels_int64s=[3, 8], post_transform=post)
                if base:
                    attrs["base_values"] = base
                name = f"tree_classifier_binary_{weighted}_{sign}_{len(base)}_{post}"
                case(name, "TreeEnsembleClassifier", features(np.float32, rows=10), attrs, ["label", "scores"])
    # SVMs: every kernel, support vectors or a linear model, one-class regressors, binary and
    # three-class classifiers (one against one), the post transforms.
    kernels = [("LINEAR", [0.0, 0.0, 0.0]), ("RBF", [0.7, 0.0, 0.0]), ("POLY", [0.5, 0.25, 2.0]),
               ("POLY3", [0.5, 0.25, 3.0]), ("SIGMOID", [0.3, -0.2, 0.0])]
    xs = rng.uniform(-1, 1, (7, 3)).astype(np.float32)
    sv = rng.uniform(-1, 1, (5, 3)).round(2)
    for kname, params in kernels:
        kernel = kname.rstrip("3")
        attrs = {"kernel_type": kernel, "kernel_params": params, "n_supports": 5,
                 "support_vectors": sv.reshape(-1).tolist(), "coefficients": rng.uniform(-1, 1, 5).round(2).tolist(),
                 "rho": [0.15]}
        case(f"svm_regressor_{kname}", "SVMRegressor", xs, attrs, ["y"])
        case(f"svm_regressor_{kname}_one_class", "SVMRegressor", xs, dict(attrs, one_class=1), ["y"])
        for classes, per_class in ((2, [2, 3]), (3, [2, 1, 2])):
            coef = rng.uniform(-1, 1, (classes - 1) * 5).round(2).tolist()
            rho = rng.uniform(-0.3, 0.3, classes * (classes - 1) // 2).round(2).tolist()
            for post in ("NONE", "LOGISTIC", "SOFTMAX"):
                a = {"kernel_type": kernel, "kernel_params": params, "support_vectors": sv.reshape(-1).tolist(),
                     "vectors_per_class": per_class, "coefficients": coef, "rho": rho,
                     "classlabels_ints": [4, 6, 9][:classes], "post_transform": post}
                case(f"svm_classifier_{classes}_{kname}_{post}", "SVMClassifier", xs, a, ["label", "scores"])
    # Probability estimates (prob_a, prob_b): each pair's score Platt-scaled, then coupled into
    # class probabilities by libsvm's iteration; the label stays the vote's.
    sv6 = rng.uniform(-1, 1, (6, 3)).round(2)
    for classes, per_class in ((2, [3, 3]), (3, [2, 2, 2]), (4, [2, 1, 2, 1])):
        pairs = classes * (classes - 1) // 2
        coef = rng.uniform(-1, 1, (classes - 1) * 6).round(2).tolist()
        rho = rng.uniform(-0.3, 0.3, pairs).round(2).tolist()
        prob_a = rng.uniform(-4, -0.5, pairs).round(3).tolist()
        prob_b = rng.uniform(-0.5, 0.5, pairs).round(3).tolist()
        for post in ("NONE", "LOGISTIC", "SOFTMAX"):
            a = {"kernel_type": "RBF", "kernel_params": [0.7, 0.0, 0.0],
                 "support_vectors": sv6.reshape(-1).tolist(), "vectors_per_class": per_class,
                 "coefficients": coef, "rho": rho, "prob_a": prob_a, "prob_b": prob_b,
                 "classlabels_ints": [4, 6, 9, 11][:classes], "post_transform": post}
            case(f"svm_classifier_probabilities_{classes}_{post}", "SVMClassifier", xs, a,
                 ["label", "scores"])
    case("svm_regressor_linear_model", "SVMRegressor", xs,
         {"coefficients": [0.5, -0.25, 1.0], "rho": [0.1], "kernel_type": "LINEAR",
          "kernel_params": [0.0, 0.0, 0.0]}, ["y"])
    for classes in (2, 3):
        for sign, coef in (("mixed", rng.uniform(-1, 1, classes * 3).round(2)),
                           ("positive", rng.uniform(0, 1, classes * 3).round(2))):
            for post in ("NONE", "LOGISTIC", "SOFTMAX"):
                case(f"svm_classifier_linear_model_{classes}_{sign}_{post}", "SVMClassifier", xs,
                     {"coefficients": coef.tolist(), "rho": [0.1], "classlabels_ints": [4, 6, 9][:classes],
                      "post_transform": post, "kernel_params": [0.0, 0.0, 0.0]}, ["label", "scores"])
    # OneHotEncoder (integer categories, integer and float inputs, unknown values) and
    # LabelEncoder (integer and float keys, a NaN key, which matches nothing, repeated keys,
    # defaults, tensors).
    xi = rng.randint(-1, 5, (4, 3)).astype(np.int64)
    case("one_hot_encoder_i64", "OneHotEncoder", xi, {"cats_int64s": [0, 2, 3, 7]}, ["y"])
    case("one_hot_encoder_f32", "OneHotEncoder", (xi + 0.25).astype(np.float32), {"cats_int64s": [3, 1, 0]}, ["y"])
    case("one_hot_encoder_1d", "OneHotEncoder", xi[0], {"cats_int64s": [0, 1, 2, 3, 4]}, ["y"])
    case("label_encoder_int_int", "LabelEncoder", xi, {"keys_int64s": [0, 1, 2, 1], "values_int64s": [10, 11, 12, 13]}, ["y"], ml_opset=2)
    case("label_encoder_int_float", "LabelEncoder", xi, {"keys_int64s": [3, 4], "values_floats": [0.5, -1.5],
                                                          "default_float": 7.0}, ["y"], ml_opset=2)
    xf = np.array([[0.5, np.nan, 1.0], [2.0, -0.0, 0.5], [3.0, 1.0, np.inf]], np.float32)
    case("label_encoder_float_int", "LabelEncoder", xf, {"keys_floats": [0.5, float("nan"), 0.0, np.inf],
                                                          "values_int64s": [1, 2, 3, 4], "default_int64": -5}, ["y"], ml_opset=2)
    case("label_encoder_float_float", "LabelEncoder", xf, {"keys_floats": [1.0, 3.0], "values_floats": [0.25, 0.75]},
         ["y"], ml_opset=2)
    case("label_encoder_tensors", "LabelEncoder", xi,
         {"keys_tensor": numpy_helper.from_array(np.array([0, 2, 4], np.int64)),
          "values_tensor": numpy_helper.from_array(np.array([5.5, 6.5, 7.5], np.float32)),
          "default_tensor": numpy_helper.from_array(np.array([-9.0], np.float32))}, ["y"], ml_opset=4)
    # TreeEnsemble (ai.onnx.ml 5): two trees, a set-membership split.
    leaf_w = np.array([1.0, 10.0, 100.0, 1000.0, 0.5], np.float32)
    for d in ("f32", "f64"):
        np_type = types[d][0]
        attrs = {
            "nodes_featureids": [0, 1, 2], "nodes_modes": numpy_helper.from_array(np.array([0, 6, 3], np.uint8)),
            "nodes_splits": numpy_helper.from_array(np.array([1.0, 0.0, 0.5], np_type)),
            "nodes_truenodeids": [1, 0, 2], "nodes_trueleafs": [0, 1, 1],
            "nodes_falsenodeids": [2, 1, 3], "nodes_falseleafs": [1, 1, 1],
            "membership_values": numpy_helper.from_array(np.array([0.5, 1.5, np.nan], np_type)),
            "nodes_missing_value_tracks_true": [1, 0, 0],
            "tree_roots": [0, 2], "leaf_targetids": [0, 1, 0, 1, 0],
            "leaf_weights": numpy_helper.from_array(leaf_w.astype(np_type)), "n_targets": 2,
        }
        for agg in (1, 0, 2, 3):
            a = dict(attrs, aggregate_function=agg)
            case(f"tree_ensemble_v5_agg{agg}_{d}", "TreeEnsemble", features(np_type, rows=10, cols=3, nan=True),
                 a, ["y"], ml_opset=5)
    # Integer features of classifiers (i64 and i32, as skl2onnx exports trees fitted on
    # integer columns; onnxruntime has no integer regressor): onnxruntime converts each feature
    # to the thresholds' type (f32, or f64 for thresholds given as a double tensor) to compare
    # them, so past 2^24 an f32 comparison rounds the feature. A generator of its own keeps
    # the cases above on their data.
    irng = np.random.RandomState(57)
    nodes, weights = random_forest(irng, 4, 4, 4, all_modes, 3, False)
    for d in ("i64", "i32"):
        x = irng.randint(-1, 4, (12, 4)).astype(types[d][0])
        attrs = forest_attrs(nodes, weights, "class")
        attrs.update(classlabels_int64s=[2, 5, 11], post_transform="SOFTMAX")
        case(f"tree_classifier_3_mixed_{d}", "TreeEnsembleClassifier", x, attrs, ["label", "scores"])
    # One split at 2^24 (LEQ): 2^24 + 1 is 2^24 in f32, so it goes left. (onnxruntime refuses
    # thresholds given as a double tensor with integer features.)
    big = np.array([[2**24 - 1], [2**24], [2**24 + 1], [2**24 + 2], [2**24 + 3], [2**25 + 2],
                    [-(2**24) - 1], [2**40 + 1]], np.int64)
    split = [[0, 0, 0, float(2**24), "BRANCH_LEQ", 1, 2, 0], [0, 1, 0, 0.0, "LEAF", 0, 0, 0],
             [0, 2, 0, 0.0, "LEAF", 0, 0, 0]]
    attrs = forest_attrs(split, [[0, 1, 0, 1.0], [0, 2, 1, 1.0]], "class")
    attrs.update(classlabels_int64s=[4, 9])
    case("tree_classifier_i64_past_2_24", "TreeEnsembleClassifier", big, attrs, ["label", "scores"])
    return written


def reduce_noop_cases(out, manifest):
    """The reductions with `noop_with_empty_axes` and no axes (an empty axes input, or none):
    each element reduced alone, which onnxruntime and the ONNX reference make x^2 for
    ReduceSumSquare, |x| for ReduceL1, sqrt(x^2) for ReduceL2, log x for ReduceLogSum and x
    for the others; f32 (with values whose square overflows) and f64, i32 and i64 (but for
    the logarithms, whose integer forms we do not take), each with keepdims 0 and 1. Floats
    rtol 1e-4 atol 1e-5 (f64 1e-5/1e-6), integers bit for bit. Returns how many were
    written."""
    rng = np.random.RandomState(61)
    written = 0
    ops = ["ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd"]
    for op in ops:
        for d, (np_type, onnx_type) in (("f32", DTYPES["f32"]), ("f64", DTYPES["f64"]),
                                        ("i32", DTYPES["i32"]), ("i64", DTYPES["i64"])):
            if d in ("i32", "i64") and op in ("ReduceLogSum", "ReduceLogSumExp"):
                continue  # integer logarithms, which we do not take
            if d in ("i32", "i64"):
                x = rng.randint(-9, 10, (3, 4)).astype(np_type)
            else:
                x = rng.uniform(-3, 3, (3, 4)).astype(np_type)
                x[0, :3] = [0.0, 1e20, -2e30]
            for given in ("input", "absent"):
                for keepdims in (0, 1):
                    inputs = ["x", "axes"] if given == "input" else ["x"]
                    node = helper.make_node(op, inputs, ["y"], keepdims=keepdims, noop_with_empty_axes=1)
                    init = [numpy_helper.from_array(np.array([], np.int64), "axes")] if given == "input" else []
                    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, [3, 4])],
                                              [helper.make_tensor_value_info("y", onnx_type, None)], initializer=init)
                    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
                    rtol, atol = (1e-5, 1e-6) if d == "f64" else (1e-4, 1e-5)
                    written += ort_case(out, manifest, f"ort_{op}_noop_{given}_{keepdims}_{d}", m, [("x", x)],
                                        [op], 18, rtol, atol)
    return written


def integer_shrink_cases(out, manifest):
    """Shrink on the eight integer types (ONNX takes every numeric type): onnxruntime computes
    x - bias or x + bias in f32 and converts back, truncating toward zero and wrapping (x = 1
    with bias 3 is 254 in u8). Values up to 2^20, where that arithmetic is exact, with biases
    and thresholds whole, fractional, zero and negative; bit for bit. Returns how many were
    written."""
    rng = np.random.RandomState(62)
    written = 0
    for d in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"):
        np_type, onnx_type = DTYPES[d]
        info = np.iinfo(np_type)
        lo, hi = max(int(info.min), -(1 << 20)), min(int(info.max), 1 << 20)
        x = np.concatenate([np.arange(max(lo, -4), 6), rng.randint(lo, hi, 20, dtype=np.int64)]).astype(np_type)
        for k, (bias, lambd) in enumerate([(0.0, 0.5), (1.5, 0.5), (3.0, 2.0), (0.7, -1.0), (-2.5, 1.0)]):
            node = helper.make_node("Shrink", ["x"], ["y"], bias=bias, lambd=lambd)
            graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, [len(x)])],
                                      [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
            written += ort_case(out, manifest, f"ort_shrink_{d}_{k}", m, [("x", x)], ["Shrink"], 9, 0, 0)
    return written


def prelu_broadcast_cases(out, manifest):
    """PRelu whose slope has more axes than X, or axes X broadcasts along: onnxruntime (and
    the reference) broadcast both ways, the output taking the joint shape. f32 and f64,
    rtol 1e-4 atol 1e-5 (f64 1e-5/1e-6). Returns how many were written."""
    rng = np.random.RandomState(63)
    written = 0
    for k, (xs, ss) in enumerate([([3], [2, 3]), ([4, 1], [2, 4, 3]), ([], [3]), ([2, 1, 4], [3, 1]),
                                  ([1], [2, 2])]):
        for d in ("f32", "f64"):
            np_type, onnx_type = DTYPES[d]
            x = rng.uniform(-2, 2, xs).astype(np_type)
            slope = rng.uniform(-1, 1, ss).astype(np_type)
            node = helper.make_node("PRelu", ["x", "slope"], ["y"])
            graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, xs),
                                                    helper.make_tensor_value_info("slope", onnx_type, ss)],
                                      [helper.make_tensor_value_info("y", onnx_type, None)])
            m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
            rtol, atol = (1e-5, 1e-6) if d == "f64" else (1e-4, 1e-5)
            written += ort_case(out, manifest, f"ort_prelu_broadcast_{k}_{d}", m, [("x", x), ("slope", slope)],
                                ["PRelu"], 16, rtol, atol)
    return written


def empty_input_cases(out, manifest):
    """Inputs with an axis of 0 where the output is not empty, or an expansion reshapes an
    empty value: MatMul and Gemm over an empty inner axis (every dtype onnxruntime takes:
    zeros, plus C), ReduceMax and ReduceMin over an empty axis (the type's ends, i8 and u8
    among them), RotaryEmbedding of an empty sequence (3-D), TfIdfVectorizer of rows of no
    token (onnxruntime refuses Attention with no query), MaxUnpool of no channel or batch, ConvTranspose of an empty axis, TfIdfVectorizer of no token, DynamicQuantizeLinear with no range, constant Pads that crop past the data. Bit for bit (f16 1e-3). Returns how many were written."""
    written = 0

    def case(name, op, nodes_attrs, feeds, opset, outputs=("y",), domain_opsets=()):
        node = helper.make_node(op, [n for n, _ in feeds], list(outputs), **nodes_attrs)
        types = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float64): T.DOUBLE, np.dtype(np.float16): T.FLOAT16,
                 np.dtype(np.int32): T.INT32, np.dtype(np.int64): T.INT64, np.dtype(np.int8): T.INT8,
                 np.dtype(np.uint8): T.UINT8}
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, types[v.dtype], list(v.shape))
                                                for n, v in feeds],
                                  [onnx.ValueInfoProto(name=o) for o in outputs])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        tol = 1e-3 if any(v.dtype == np.float16 for _, v in feeds) else 0.0
        return ort_case(out, manifest, f"ort_empty_{name}", m, feeds, [op], opset, tol, tol)

    for d in ("f32", "f64", "f16", "i32", "i64"):
        np_type = DTYPES[d][0]
        written += case(f"MatMul_k0_{d}", "MatMul", {}, [("a", np.zeros((2, 0), np_type)),
                                                         ("b", np.zeros((0, 3), np_type))], 13)
        written += case(f"MatMul_k0_batched_{d}", "MatMul", {}, [("a", np.zeros((2, 3, 0), np_type)),
                                                                 ("b", np.zeros((0, 4), np_type))], 13)
        written += case(f"Gemm_k0_bias_{d}", "Gemm", {"transB": 1},
                        [("a", np.zeros((2, 0), np_type)), ("b", np.zeros((3, 0), np_type)),
                         ("c", np.arange(3).astype(np_type))], 13)
        written += case(f"Gemm_bias_{d}", "Gemm", {"transB": 1, "alpha": 2.0, "beta": 0.5},
                        [("a", np.arange(6).reshape(2, 3).astype(np_type)),
                         ("b", np.arange(12).reshape(4, 3).astype(np_type)),
                         ("c", np.arange(4).astype(np_type))], 13)
    for d in ("f32", "f64", "i32", "i64", "i8", "u8"):
        np_type = DTYPES[d][0]
        for op in ("ReduceMax", "ReduceMin"):
            written += case(f"{op}_{d}", op, {"keepdims": 0},
                            [("x", np.zeros((2, 0, 3), np_type)), ("axes", np.array([1], np.int64))], 18)
    for d in ("f32", "f16"):
        np_type = DTYPES[d][0]
        written += case(f"RotaryEmbedding_no_sequence_{d}", "RotaryEmbedding", {"num_heads": 2},
                        [("x", np.zeros((1, 0, 8), np_type)), ("cos", np.ones((4, 2), np_type)),
                         ("sin", np.zeros((4, 2), np_type)), ("pos", np.zeros((1, 0), np.int64))], 23)
    for d in ("i32", "i64"):
        np_type = DTYPES[d][0]
        written += case(f"TfIdfVectorizer_rows_of_no_token_{d}", "TfIdfVectorizer",
                        {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1,
                         "ngram_counts": [0, 2], "ngram_indexes": [0, 1, 2], "pool_int64s": [1, 2, 1, 2]},
                        [("x", np.zeros((2, 0), np_type))], 9)
    # Expansions whose reshapes are spelled out from dims holding a 0.
    for name, shape in (("no_channels", (1, 0, 2, 2)), ("no_batch", (0, 2, 2, 2))):
        written += case(f"MaxUnpool_{name}", "MaxUnpool", {"kernel_shape": [2, 2], "strides": [2, 2]},
                        [("x", np.zeros(shape, np.float32)), ("i", np.zeros(shape, np.int64))], 11)
    written += case("TfIdfVectorizer_no_token", "TfIdfVectorizer",
                    {"mode": "TF", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
                     "ngram_counts": [0], "ngram_indexes": [0, 1, 2], "pool_int64s": [4, 5, 6]},
                    [("x", np.zeros((0,), np.int64))], 9)
    # ConvTranspose of an empty spatial axis: the bias over the length the formula gives.
    for name, attrs in (("stride_1", {}), ("stride_2", {"strides": [2, 1]}),
                        ("dilated_pads", {"dilations": [2, 1], "pads": [1, 0, 0, 1]})):
        written += case(f"ConvTranspose_empty_axis_{name}", "ConvTranspose", {"kernel_shape": [3, 2], **attrs},
                        [("x", np.zeros((1, 2, 0, 3), np.float32)),
                         ("w", np.arange(24, dtype=np.float32).reshape(2, 2, 3, 2)),
                         ("b", np.array([0.5, -2.0], np.float32))], 11)
    # Constant pads whose crop runs past the data: output element j is input element j - b.
    for name, x, pads in (("past_the_end", np.array([1.0, 2.0], np.float32), [2, -3]),
                          ("past_the_start", np.array([1.0, 2.0], np.float32), [-3, 3]),
                          ("of_nothing", np.zeros((1, 2, 0), np.float32), [0, 1, 3, 0, 0, -1])):
        written += case(f"Pad_crop_{name}", "Pad", {"mode": "constant"},
                        [("x", x), ("pads", np.array(pads, np.int64)), ("value", np.array(7.0, np.float32))], 18)
    # No range to spread (empty, or all zeros): onnxruntime takes a scale of 1, not 0.
    for name, x in (("empty", np.zeros((0, 3), np.float32)), ("zeros", np.zeros((2, 3), np.float32)),
                    ("positive", np.array([0.0, 2.0, 5.1], np.float32))):
        written += case(f"DynamicQuantizeLinear_{name}", "DynamicQuantizeLinear", {}, [("x", x)], 11,
                        outputs=("y", "y_scale", "y_zero_point"))
    return written


if __name__ == "__main__":
    main()
