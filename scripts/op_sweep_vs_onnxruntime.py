#!/usr/bin/env python3
"""Random attributes and inputs for 186 ops against onnxruntime, and where the two differ,
against the ONNX reference (`onnx.reference`): Resize (every mode, coordinate transform,
nearest mode, cubic coefficient, antialias, ROI, sizes with an aspect policy), Conv,
ConvTranspose and the pools (ranks 1 to 3, strides, dilations, pads, every auto_pad, ceil_mode,
groups, output padding and shape), Gemm, MatMul and the integer and quantized products, the
quantizers (per tensor, axis and block, 8- and 16-bit), the ten reductions (axes given,
negative, none; keepdims; noop_with_empty_axes), and Tile, Split, Gather, Slice, Einsum, Pad,
GridSample, ScatterElements, TopK, ArgMax, ArgMin, CumSum, DepthToSpace, SpaceToDepth, Trilu,
GatherElements, LayerNormalization, the softmaxes, OneHot, Attention (opset 23: grouped heads,
the 3-D layout, masks, causal, scale, softcap), RMS, group and instance normalization,
ScatterND and GatherND, RoiAlign, LRN, Compress, CenterCropPad, Mod and BitShift; then the
element-wise ops on every dtype ONNX gives them (the unary math and activations, arithmetic,
comparisons, logic and bitwise ops, Max/Min/Sum/Mean, Where, Clip, Cast between any two
types) on values with the types' ends, zeros of both signs, infinities, NaN, subnormals and
halves, broadcast; NonZero, Unique, NonMaxSuppression, MaxUnpool, ReverseSequence, Col2Im,
AffineGrid, BatchNormalization, MeanVarianceNormalization, LpNormalization, Det, ConvInteger,
QLinearConv and the two losses; the shape and data ops (Concat, Expand, Reshape with 0, -1
and allowzero, Transpose, Squeeze, Unsqueeze, Flatten, Range, CumProd, ConstantOfShape,
EyeLike, CastLike, Shape with start and end, Size, Identity, Dropout), the global pools,
MaxRoiPool, DFT, STFT, the three windows and MelWeightMatrix; the string ops (StringNormalizer,
StringSplit, StringConcat, RegexFullMatch, LabelEncoder, CategoryMapper, Equal and Cast on
strings) on words with case, accents, other scripts, blanks and delimiters; the sequence ops
(SplitToSequence, SequenceConstruct, SequenceAt, SequenceLength, SequenceInsert,
SequenceErase, ConcatFromSequence); and Swish, SwiGLU, TensorScatter, BitCast,
RotaryEmbedding, DeformConv, TfIdfVectorizer, Upsample and CausalConvWithState. One op per
model (a sequence op after the SequenceConstruct that makes its input), run through
`wgpu-ops run`; outputs compared to rtol 1e-4, atol 1e-5 (f16 1e-3, 1e-4; integers, bools and
strings exactly; sequences element by element). StringNormalizer needs the en_US.UTF-8 locale
for onnxruntime. Where
onnxruntime has no kernel for a model (f64 Acos, f16 Elu, ...), the reference alone decides.

Prints each model that differs from onnxruntime, saying whether it agrees with the ONNX
reference instead, each error of ours, a tally, and what onnxruntime refused per op. Not
part of the tests (each model is a run of the command); `docs/onnx.md` records what its
runs found.

With EMPTY=P in the environment, a share P of the models get empty inputs: one axis of the
first input is cut to 0 in every input of that shape (the models are otherwise those of
the seed without EMPTY). With CONSTANT=P, a share P of the models hold their inputs as
initializers, so that small ones are computed while the graph is planned, by the host's
interpreter rather than the GPU's kernels.

Models that both runtimes refuse are run too: ours must refuse them in one `error:` line. A
run that ends otherwise (a panic, an abort, a signal, an error without that line) is a crash
whatever the runtimes say.

usage: scripts/op_sweep_vs_onnxruntime.py WGPU_OPS_BINARY [COUNT] [SEED] [WORK_DIR] [OP,OP...]
"""
import concurrent.futures
import multiprocessing
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

warnings.filterwarnings("ignore")
T = onnx.TensorProto
NP2T = {np.dtype(np.bool_): T.BOOL, np.dtype(np.uint32): T.UINT32, np.dtype(np.uint64): T.UINT64,
        np.dtype(np.uint16): T.UINT16, np.dtype(np.int16): T.INT16, np.dtype(np.uint8): T.UINT8,
        np.dtype(np.int8): T.INT8, np.dtype(np.float32): T.FLOAT, np.dtype(np.int64): T.INT64,
        np.dtype(np.int32): T.INT32, np.dtype(np.float64): T.DOUBLE, np.dtype(np.float16): T.FLOAT16}
binary = os.path.abspath(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
work = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp()
only = sys.argv[5].split(",") if len(sys.argv) > 5 else None
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(seed)


FLOATS = [np.float32, np.float64, np.float16]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
INTS = SIGNED + UNSIGNED
FLOAT_UNARY = ["Sqrt", "Exp", "Log", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
               "Acosh", "Atanh", "Erf", "Sigmoid", "Tanh", "Reciprocal", "Softplus", "Softsign", "Elu",
               "Celu", "Selu", "HardSigmoid", "HardSwish", "Mish", "Gelu", "LeakyRelu", "ThresholdedRelu",
               "Round", "Floor", "Ceil", "IsNaN", "IsInf"]
UNARY = FLOAT_UNARY + ["Abs", "Neg", "Sign", "Relu", "Not", "BitwiseNot", "Shrink"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
          "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu"]
VARIADIC = ["Max", "Min", "Sum", "Mean"]
CAST_TO = {np.float32: T.FLOAT, np.float64: T.DOUBLE, np.float16: T.FLOAT16, np.int8: T.INT8,
           np.int16: T.INT16, np.int32: T.INT32, np.int64: T.INT64, np.uint8: T.UINT8, np.uint16: T.UINT16,
           np.uint32: T.UINT32, np.uint64: T.UINT64, np.bool_: T.BOOL}


def values(dt, shape, special=True):
    """Random values of `dt`: mostly small, with ties at .5, the ends of the type, and for floats
    zeros of both signs, infinities, NaN and subnormals."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind == "f":
        x = rng.uniform(-4, 4, shape)
        x = np.where(rng.random(shape) < 0.2, np.round(x * 2) / 2, x)
        if special:
            fi = np.finfo(dt)
            pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, float(fi.max), -float(fi.max), float(fi.tiny) / 4,
                             1e4, -1e4, 0.5, -0.5, 2.5, -1.5], np.float64)
            x = np.where(rng.random(shape) < 0.15, rng.choice(pool, shape), x)
        return x.astype(dt)
    info = np.iinfo(dt)
    x = rng.integers(max(info.min, -9), min(info.max, 9) + 1, shape).astype(dt)
    if special:
        ends = np.array([info.min, info.max, info.min + 1, info.max - 1], dt)
        x = np.where(rng.random(shape) < 0.1, rng.choice(ends, shape), x).astype(dt)
    return x


def broadcast_pair():
    r = int(rng.integers(0, 4)); a = [int(s) for s in rng.integers(1, 5, r)]
    b = list(a[int(rng.integers(0, r + 1)):]) if r else []
    b = [1 if rng.random() < 0.3 else s for s in b]
    if rng.random() < 0.5:
        a, b = b, a
    a = [1 if rng.random() < 0.2 else s for s in a]
    return a, b


def elementwise(op):
    if op == "Cast":
        r = int(rng.integers(0, 3)); shape = [int(s) for s in rng.integers(1, 6, r)]
        kinds = FLOATS + INTS + [np.bool_]
        src, to = kinds[int(rng.integers(0, len(kinds)))], kinds[int(rng.integers(0, len(kinds)))]
        x = values(src, shape)
        if np.dtype(src).kind == "f" and np.dtype(to).kind in "iu":
            # Out of range and NaN are undefined behaviour in onnxruntime (C++ casts).
            info = np.iinfo(to)
            lo, hi = max(float(info.min), -3e38), min(float(info.max), 3e38)
            x = np.where(np.isfinite(x.astype(np.float64)) & (x >= lo) & (x < hi * 0.999), x, 3).astype(src)
            if np.dtype(to).kind == "u": x = np.abs(x)
        return {"to": CAST_TO[to]}, {"I0": x}, []
    if op == "Where":
        a, b = broadcast_pair()
        dt = (FLOATS + INTS + [np.bool_])[int(rng.integers(0, 12))]
        return {}, {"I0": rng.random(a) < 0.5, "I1": values(dt, b), "I2": values(dt, a if rng.random() < 0.5 else b)}, []
    if op == "Clip":
        r = int(rng.integers(0, 3)); shape = [int(s) for s in rng.integers(1, 6, r)]
        dt = (FLOATS + INTS)[int(rng.integers(0, 11))]
        lo, hi = sorted(values(dt, [2], special=False).tolist())
        inits, names = [], ["I0"]
        if rng.random() < 0.7: inits.append(numpy_helper.from_array(np.array(lo, dt), "lo")); names.append("lo")
        else: names.append("")
        if rng.random() < 0.7: inits.append(numpy_helper.from_array(np.array(hi, dt), "hi")); names.append("hi")
        return {}, {"I0": values(dt, shape)}, inits, names
    if op in VARIADIC:
        n = int(rng.integers(1, 4))
        dt = FLOATS[int(rng.integers(0, 3))] if op in ("Sum", "Mean") else (FLOATS + INTS)[int(rng.integers(0, 11))]
        a, b = broadcast_pair()
        feeds = {f"I{i}": values(dt, [a, b, a][i]) for i in range(n)}
        return {}, feeds, []
    if op in BINARY:
        a, b = broadcast_pair()
        if op in ("And", "Or", "Xor"): dt = np.bool_
        elif op.startswith("Bitwise"): dt = INTS[int(rng.integers(0, 8))]
        elif op == "PRelu": dt = (FLOATS + [np.int32, np.int64, np.uint32, np.uint64])[int(rng.integers(0, 7))]
        elif op == "Pow": dt = [np.float32, np.float64, np.float16, np.int32, np.int64][int(rng.integers(0, 5))]
        else: dt = (FLOATS + INTS)[int(rng.integers(0, 11))]
        x = values(dt, a)
        if op == "Pow":
            et = (FLOATS + INTS)[int(rng.integers(0, 11))]
            y = values(et, b, special=np.dtype(dt).kind == "f")
            if np.dtype(dt).kind in "iu" or np.dtype(et).kind in "iu":
                x = values(dt, a, special=False)
                y = (np.abs(y.astype(np.float64)) % 4).astype(et) if np.dtype(et).kind in "iu" else np.round(np.abs(y) % 4).astype(et)
            return {}, {"I0": x, "I1": y}, []
        y = values(dt, b)
        if op == "Div" and np.dtype(dt).kind in "iu":
            y = np.where(y == 0, 3, y).astype(dt)
            if np.dtype(dt).kind == "i":  # INT_MIN / -1 traps in onnxruntime
                y = np.where(y == -1, 5, y).astype(dt)
        return {}, {"I0": x, "I1": y}, []
    r = int(rng.integers(0, 3)); shape = [int(s) for s in rng.integers(1, 6, r)]
    attrs = {}
    if op == "Shrink" and rng.random() < 0.5:
        # Integers, away from the ends of the 64-bit types: onnxruntime converts them to f32
        # and back, undefined there.
        dt = INTS[int(rng.integers(0, 8))]
        return {"bias": float(rng.choice([0.0, 1.5, 3.0, -2.5])), "lambd": float(rng.choice([0.5, -1.0, 2.0]))}, {
            "I0": values(dt, shape, special=np.dtype(dt).itemsize < 8)}, []
    if op == "Not": dt = np.bool_
    elif op == "BitwiseNot": dt = INTS[int(rng.integers(0, 8))]
    elif op == "Neg": dt = (FLOATS + SIGNED)[int(rng.integers(0, 7))]
    elif op in ("Abs", "Sign"): dt = (FLOATS + INTS)[int(rng.integers(0, 11))]
    elif op == "Relu": dt = (FLOATS + [np.int8, np.int32, np.int64])[int(rng.integers(0, 6))]
    else: dt = FLOATS[int(rng.integers(0, 3))]
    if op in ("Elu", "Celu", "LeakyRelu", "ThresholdedRelu"): attrs["alpha"] = float(rng.choice([0.1, 1.0, 2.0]))
    if op == "Selu": attrs.update(alpha=float(rng.choice([1.6732, 2.0])), gamma=float(rng.choice([1.0507, 0.5])))
    if op == "HardSigmoid": attrs.update(alpha=float(rng.choice([0.2, 0.5])), beta=float(rng.choice([0.5, 0.1])))
    if op == "Gelu" and rng.random() < 0.5: attrs["approximate"] = "tanh"
    if op == "Shrink": attrs.update(bias=float(rng.choice([0.0, 1.0, 2.0])), lambd=float(rng.choice([0.5, 1.0, 3.0])))
    if op == "IsInf" and rng.random() < 0.5: attrs.update(detect_negative=int(rng.integers(0, 2)), detect_positive=int(rng.integers(0, 2)))
    return attrs, {"I0": values(dt, shape)}, []


ANY = FLOATS + INTS + [np.bool_]
WORDS = ["apple", "Apple", "APPLE", "straße", "École", "naïve", "", " ", "a,b", "a,,b", "x y  z", "42",
         "-1.5", "inf", "NaN", "1e3", "ab", "abab", "Ünïcode", "日本", "tab\tsep", "the", "The", "0x10"]
SHAPE_OPS = ["Concat", "Expand", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Range",
             "CumProd", "ConstantOfShape", "EyeLike", "CastLike", "Shape", "Size", "Identity", "Dropout",
             "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "MaxRoiPool", "DFT", "STFT",
             "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"]
STRING_OPS = ["StringNormalizer", "StringSplit", "StringConcat", "RegexFullMatch", "LabelEncoder",
              "CategoryMapper", "StringEqual", "StringCast"]
SEQUENCE_OPS = ["SplitToSequence", "SequenceAt", "SequenceLength", "SequenceInsert", "SequenceErase",
                "ConcatFromSequence", "SequenceConstruct"]
NEWER_OPS = ["Swish", "SwiGLU", "TensorScatter", "BitCast", "RotaryEmbedding", "DeformConv", "TfIdfVectorizer",
             "Upsample", "CausalConvWithState"]
OPSET = {"CumProd": 26, "Attention": 23, "RMSNormalization": 23, "Swish": 24, "SwiGLU": 28, "TensorScatter": 24,
         "BitCast": 26, "RotaryEmbedding": 23, "DeformConv": 22, "Upsample": 9, "CausalConvWithState": 27}
SAME_WIDTH = [[np.float32, np.int32, np.uint32], [np.float64, np.int64, np.uint64], [np.float16, np.int16, np.uint16],
              [np.int8, np.uint8]]


def pick(pool):
    return pool[int(rng.integers(0, len(pool)))]


def shape_of(rmin=0, rmax=3, smax=4, zero=0.0):
    r = int(rng.integers(rmin, rmax + 1))
    return [0 if rng.random() < zero else int(rng.integers(1, smax + 1)) for _ in range(r)]


def words(shape):
    return np.array(rng.choice(WORDS, shape), dtype=str) if shape else np.array(pick(WORDS), dtype=str)


def i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def gen_more(op):
    """Cases of the shape and data ops, signal ops, string ops and sequence ops: attributes, inputs,
    initializers, input names, and a dict of extras (nodes before it, outputs, domain)."""
    if op == "Concat":
        base = shape_of(1, 3); axis = int(rng.integers(0, len(base)))
        n = int(rng.integers(1, 5)); dt = pick(ANY + [str])
        feeds = {}
        for i in range(n):
            s = list(base); s[axis] = int(rng.integers(0, 4))
            feeds[f"I{i}"] = words(s) if dt is str else values(dt, s)
        return {"axis": axis - len(base) if rng.random() < 0.5 else axis}, feeds, [], None, {}
    if op == "Expand":
        a, b = broadcast_pair(); dt = pick(ANY)
        return {}, {"I0": values(dt, a)}, [i64("shape", b)], ["I0", "shape"], {}
    if op == "Reshape":
        s = shape_of(0, 4, zero=0.05); n = int(np.prod(s))
        t = []
        m = int(np.prod(s))
        while m > 1 and len(t) < 4:
            f = next(f for f in range(2, m + 1) if m % f == 0); t.append(f); m //= f
        if m != 1 or rng.random() < 0.3: t.append(m)
        t = [int(x) for x in rng.permutation(t)] if t else []
        if rng.random() < 0.3: t.insert(int(rng.integers(0, len(t) + 1)), 1)
        attrs = {}
        if int(np.prod(s)) == 0: t = [int(x) for x in s]; attrs["allowzero"] = 1
        else:
            for i in range(min(len(s), len(t))):
                if s[i] == t[i] and rng.random() < 0.4: t[i] = 0
            if t and rng.random() < 0.4: t[int(rng.integers(0, len(t)))] = -1
            if t.count(-1) and t.count(0) == 0 and rng.random() < 0.3: attrs["allowzero"] = 1
        return attrs, {"I0": values(pick(ANY), s)}, [i64("shape", t)], ["I0", "shape"], {}
    if op == "Transpose":
        s = shape_of(0, 5, zero=0.05)
        attrs = {"perm": [int(x) for x in rng.permutation(len(s))]} if s and rng.random() < 0.8 else {}
        return attrs, {"I0": values(pick(ANY), s)}, [], None, {}
    if op == "Squeeze":
        s = [1 if rng.random() < 0.5 else x for x in shape_of(0, 4)]
        ones = [i for i, x in enumerate(s) if x == 1]
        if ones and rng.random() < 0.7:
            ax = [i - len(s) if rng.random() < 0.5 else i for i in ones if rng.random() < 0.7]
            return {}, {"I0": values(pick(ANY), s)}, [i64("axes", ax)], ["I0", "axes"], {}
        return {}, {"I0": values(pick(ANY), s)}, [], None, {}
    if op == "Unsqueeze":
        s = shape_of(0, 3); k = int(rng.integers(1, 3)); r = len(s) + k
        ax = [int(a) - r if rng.random() < 0.5 else int(a) for a in rng.choice(r, k, replace=False)]
        return {}, {"I0": values(pick(ANY), s)}, [i64("axes", ax)], ["I0", "axes"], {}
    if op == "Flatten":
        s = shape_of(0, 4, zero=0.05); r = len(s)
        return {"axis": int(rng.integers(-r, r + 1))}, {"I0": values(pick(ANY), s)}, [], None, {}
    if op == "Range":
        dt = pick([np.float32, np.float64, np.int16, np.int32, np.int64])
        if np.dtype(dt).kind == "f":
            start, delta = rng.uniform(-5, 5), pick([0.1, 0.3, -0.7, 1.0, 2.5, -0.25, 1 / 3])
            limit = start + delta * rng.uniform(-2, 30)
        else:
            start, delta = int(rng.integers(-10, 10)), pick([1, 2, 3, -1, -4, 7])
            limit = start + delta * int(rng.integers(-2, 20)) + int(rng.integers(-1, 2))
        return {}, {"I0": np.array(start, dt), "I1": np.array(limit, dt), "I2": np.array(delta, dt)}, [], None, {}
    if op == "CumProd":
        s = shape_of(1, 3, smax=5); dt = pick([np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64])
        x = values(dt, s, special=False)
        ax = int(rng.integers(-len(s), len(s)))
        attrs = {k: 1 for k in ("exclusive", "reverse") if rng.random() < 0.5}
        return attrs, {"I0": x}, [i64("axis", ax)], ["I0", "axis"], {}
    if op == "ConstantOfShape":
        s = shape_of(0, 3, zero=0.1)
        attrs = {}
        if rng.random() < 0.8:
            dt = pick(ANY)
            attrs["value"] = numpy_helper.from_array(values(dt, [1]), "value")
        return attrs, {"I0": np.array(s, np.int64)}, [], None, {}
    if op == "EyeLike":
        s = [int(x) for x in rng.integers(1, 6, 2)]
        attrs = {"k": int(rng.integers(-4, 5))} if rng.random() < 0.7 else {}
        if rng.random() < 0.5: attrs["dtype"] = CAST_TO[pick(ANY)]
        return attrs, {"I0": values(pick(ANY), s)}, [], None, {}
    if op == "CastLike":
        attrs, feeds, _ = elementwise("Cast")
        to = {v: k for k, v in CAST_TO.items()}[attrs["to"]]
        return {}, {"I0": feeds["I0"], "I1": values(to, [int(rng.integers(0, 3))])}, [], None, {}
    if op in ("Shape", "Size", "Identity"):
        s = shape_of(0, 4, zero=0.05); attrs = {}
        if op == "Shape":
            r = len(s)
            if rng.random() < 0.5: attrs["start"] = int(rng.integers(-r - 2, r + 2))
            if rng.random() < 0.5: attrs["end"] = int(rng.integers(-r - 2, r + 2))
        return attrs, {"I0": words(s) if rng.random() < 0.2 else values(pick(ANY), s)}, [], None, {}
    if op == "Dropout":
        s = shape_of(0, 3); dt = pick(FLOATS)
        inits, names = [], ["I0"]
        train = rng.random() < 0.3
        if rng.random() < 0.6 or train:
            inits.append(numpy_helper.from_array(np.array(0.0 if train else rng.uniform(0, 0.9), dt), "ratio")); names.append("ratio")
        if train:
            inits.append(numpy_helper.from_array(np.array(True), "training_mode")); names.append("training_mode")
        return {}, {"I0": values(dt, s)}, inits, names, {"outs": ["Y", "Ymask"] if rng.random() < 0.6 else ["Y"]}
    if op.startswith("Global"):
        s = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + shape_of(1, 3, smax=5)
        attrs = {"p": int(pick([1, 2, 3]))} if op == "GlobalLpPool" and rng.random() < 0.8 else {}
        return attrs, {"I0": values(pick(FLOATS), s, special=op == "GlobalMaxPool")}, [], None, {}
    if op == "MaxRoiPool":
        n, c, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(2, 9)), int(rng.integers(2, 9))
        k = int(rng.integers(1, 4)); scale = float(pick([1.0, 0.5, 0.25]))
        rois = []
        for _ in range(k):
            x1, y1 = rng.uniform(0, w / scale), rng.uniform(0, h / scale)
            rois.append([int(rng.integers(0, n)), x1, y1, x1 + rng.uniform(0, w / scale), y1 + rng.uniform(0, h / scale)])
        attrs = {"pooled_shape": [int(rng.integers(1, 4)), int(rng.integers(1, 4))], "spatial_scale": scale}
        return attrs, {"I0": values(np.float32, [n, c, h, w], special=False), "I1": np.array(rois, np.float32)}, [], None, {}
    if op == "DFT":
        dt = pick([np.float32, np.float64]); r = int(rng.integers(1, 3)); s = shape_of(r, r, smax=6)
        cplx = rng.random() < 0.5
        x = values(dt, [1] + s + [2 if cplx else 1], special=False)
        attrs = {}
        inverse = rng.random() < 0.4
        if inverse: attrs["inverse"] = 1
        elif not cplx and rng.random() < 0.5: attrs["onesided"] = 1
        names, inits = ["I0"], []
        if rng.random() < 0.5:
            inits.append(i64("len", int(rng.integers(1, 9)))); names.append("len")
        ax = int(rng.integers(1, r + 1))
        if rng.random() < 0.7:
            if len(names) == 1: names.append("")
            inits.append(i64("axis", ax - (r + 2) if rng.random() < 0.5 else ax)); names.append("axis")
        return attrs, {"I0": x}, inits, names, {}
    if op == "STFT":
        dt = pick([np.float32, np.float64]); n = int(rng.integers(4, 24)); cplx = rng.random() < 0.3
        x = values(dt, [int(rng.integers(1, 3)), n, 2 if cplx else 1], special=False)
        fl = int(rng.integers(2, n + 1)); step = int(rng.integers(1, 5))
        names, inits = ["I0", "step"], [i64("step", step)]
        use_w = rng.random() < 0.6
        names.append("win" if use_w else "")
        if use_w: inits.append(numpy_helper.from_array(rng.uniform(0, 1, fl).astype(dt), "win"))
        if not use_w or rng.random() < 0.5:
            inits.append(i64("fl", fl)); names.append("fl")
        attrs = {"onesided": 0} if cplx else ({"onesided": int(rng.integers(0, 2))} if rng.random() < 0.7 else {})
        return attrs, {"I0": x}, inits, names, {}
    if op.endswith("Window"):
        attrs = {}
        if rng.random() < 0.5: attrs["periodic"] = int(rng.integers(0, 2))
        # Not f16: onnxruntime has no kernel for it and the reference computes in f16.
        if rng.random() < 0.5: attrs["output_datatype"] = CAST_TO[pick([np.float32, np.float64, np.int32, np.int64, np.uint8])]
        size = int(rng.integers(0, 12))
        if size == 1 and attrs.get("periodic") == 0 and attrs.get("output_datatype", 1) not in (1, 11):
            size = 2  # the symmetric window of one element is 0/0: NaN, undefined as an integer
        return attrs, {}, [i64("size", size)], ["size"], {}
    if op == "MelWeightMatrix":
        dft = int(rng.integers(4, 64)); sr = int(pick([8000, 16000, 22050]))
        lo = float(rng.uniform(0, 1000)); hi = float(rng.uniform(lo + 100, sr / 2))
        inits = [i64("bins", int(rng.integers(1, 12))), i64("dft", dft), i64("sr", sr),
                 numpy_helper.from_array(np.array(lo, np.float32), "lo"), numpy_helper.from_array(np.array(hi, np.float32), "hi")]
        attrs = {"output_datatype": CAST_TO[pick(FLOATS)]} if rng.random() < 0.5 else {}
        return attrs, {}, inits, ["bins", "dft", "sr", "lo", "hi"], {}
    if op == "StringNormalizer":
        s = [int(rng.integers(1, 6))]
        if rng.random() < 0.3: s = [1] + s
        attrs = {"case_change_action": str(pick(["LOWER", "UPPER", "NONE"]))} if rng.random() < 0.8 else {}
        if rng.random() < 0.6:
            attrs["stopwords"] = [str(w) for w in rng.choice(WORDS, int(rng.integers(1, 4)))]
            attrs["is_case_sensitive"] = int(rng.integers(0, 2))
        return attrs, {"I0": words(s)}, [], None, {}
    if op == "StringSplit":
        attrs = {}
        if rng.random() < 0.7: attrs["delimiter"] = str(pick([",", " ", "ab", ",,", "\t"]))
        if rng.random() < 0.5: attrs["maxsplit"] = int(rng.integers(0, 3))
        return attrs, {"I0": words(shape_of(0, 2))}, [], None, {"outs": ["Y", "Z"]}
    if op == "StringConcat":
        a, b = broadcast_pair()
        return {}, {"I0": words(a), "I1": words(b)}, [], None, {}
    if op == "RegexFullMatch":
        pat = str(pick([r"[a-z]+", r"[A-Z].*", r"\d+", r"a(b)*", r".*,.*", r"", r"(?i)apple", r"\w+", r"[^ ]+"]))
        return {"pattern": pat}, {"I0": words(shape_of(0, 2))}, [], None, {}
    if op == "StringEqual":
        a, b = broadcast_pair()
        return {}, {"I0": words(a), "I1": words(b)}, [], None, {"op": "Equal"}
    if op == "StringCast":
        s = shape_of(0, 2)
        if rng.random() < 0.5:
            dt = pick(FLOATS + [np.int32, np.int64, np.bool_])
            return {"to": T.STRING}, {"I0": values(dt, s)}, [], None, {"op": "Cast"}
        dt = pick([np.float32, np.float64, np.int32, np.int64])
        nums = ["1", "-3", "0", "17", "2.5", "-0", "inf", "-inf", "NaN", "1e3", "+4", " 5"] if np.dtype(dt).kind == "f" else ["1", "-3", "0", "17", "+4", "-0"]
        x = np.array(rng.choice(nums, s), dtype=str) if s else np.array(pick(nums), dtype=str)
        return {"to": CAST_TO[dt]}, {"I0": x}, [], None, {"op": "Cast"}
    if op == "LabelEncoder":
        kind_in, kind_out = pick(["strings", "int64s", "floats"]), pick(["strings", "int64s", "floats"])
        k = int(rng.integers(1, 6))
        pool = {"strings": lambda n: [str(w) for w in rng.choice(WORDS[:12], n, replace=False)],
                "int64s": lambda n: [int(v) for v in rng.choice(20, n, replace=False) - 5],
                "floats": lambda n: [float(v) for v in rng.choice([0.5, -1.0, 2.0, 3.25, 0.0, 7.0], n, replace=False)]}
        keys = pool[kind_in](k); vals = pool[kind_out](k) if kind_out != "strings" else [str(w) for w in rng.choice(WORDS, k)]
        attrs = {f"keys_{kind_in}": keys, f"values_{kind_out}": vals}
        if rng.random() < 0.5:
            attrs[{"strings": "default_string", "int64s": "default_int64", "floats": "default_float"}[kind_out]] = pool[kind_out](1)[0]
        s = shape_of(0, 2)
        x = {"strings": lambda: words(s), "int64s": lambda: rng.integers(-6, 16, s).astype(np.int64),
             "floats": lambda: np.array(rng.choice([0.5, -1.0, 2.0, 3.25, 0.0, 7.0, 9.0], s), np.float32)}[kind_in]()
        return attrs, {"I0": x}, [], None, {"domain": "ai.onnx.ml"}
    if op == "CategoryMapper":
        k = int(rng.integers(1, 6))
        cats_s = [str(w) for w in rng.choice(WORDS[:12], k, replace=False)]
        cats_i = [int(v) for v in rng.choice(20, k, replace=False)]
        attrs = {"cats_strings": cats_s, "cats_int64s": cats_i}
        if rng.random() < 0.5: attrs["default_string"] = "???"
        if rng.random() < 0.5: attrs["default_int64"] = -7
        s = shape_of(0, 2)
        x = words(s) if rng.random() < 0.5 else rng.integers(-2, 22, s).astype(np.int64)
        return attrs, {"I0": x}, [], None, {"domain": "ai.onnx.ml"}
    if op in ("Swish", "SwiGLU"):
        s = shape_of(0, 3); dt = pick(FLOATS); attrs = {"alpha": float(pick([1.0, 1.702, 0.5, -1.0]))} if rng.random() < 0.7 else {}
        feeds = {"I0": values(dt, s)}
        if op == "SwiGLU": feeds["I1"] = values(dt, s)
        return attrs, feeds, [], None, {}
    if op == "BitCast":
        group = pick(SAME_WIDTH); src, to = pick(group), pick(group)
        return {"to": CAST_TO[to]}, {"I0": values(src, shape_of(0, 3))}, [], None, {}
    if op == "TensorScatter":
        r = int(rng.integers(2, 5)); shape = [int(rng.integers(1, 4)) for _ in range(r)]
        axis = int(rng.integers(1, r)); big = int(rng.integers(1, 7)); shape[axis] = big
        small = list(shape); small[axis] = int(rng.integers(1, big + 1))
        mode = str(pick(["linear", "circular"]))
        dt = pick(FLOATS + [np.int32, np.int64, np.int8])
        attrs = {"mode": mode} if mode == "circular" or rng.random() < 0.5 else {}
        if axis != r - 2 or rng.random() < 0.5: attrs["axis"] = axis - r if rng.random() < 0.5 else axis
        feeds = {"I0": values(dt, shape), "I1": values(dt, small)}
        if rng.random() < 0.7:
            hi = big if mode == "circular" else big - small[axis] + 1
            feeds["I2"] = rng.integers(0, hi, shape[0]).astype(np.int64)
        return attrs, feeds, [], None, {}
    if op == "RotaryEmbedding":
        b, sq, h, d = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(pick([2, 4, 6, 8]))
        dt = pick([np.float32, np.float16])
        rot = d if rng.random() < 0.6 else int(pick([x for x in range(2, d + 1, 2)]))
        attrs = {}
        if rot != d or rng.random() < 0.3: attrs["rotary_embedding_dim"] = rot
        if rng.random() < 0.5: attrs["interleaved"] = 1
        if rng.random() < 0.5:
            x = values(dt, [b, h, sq, d], special=False)
        else:
            x = values(dt, [b, sq, h * d], special=False); attrs["num_heads"] = h
        use_pos = rng.random() < 0.6
        if use_pos:
            maxp = sq + int(rng.integers(0, 4))
            ang = rng.uniform(0, 6.3, [maxp, rot // 2])
            pos = rng.integers(0, maxp, [b, sq]).astype(np.int64)
            feeds = {"I0": x, "I1": np.cos(ang).astype(dt), "I2": np.sin(ang).astype(dt), "I3": pos}
        else:
            ang = rng.uniform(0, 6.3, [b, sq, rot // 2])
            feeds = {"I0": x, "I1": np.cos(ang).astype(dt), "I2": np.sin(ang).astype(dt)}
        return attrs, feeds, [], None, {}
    if op == "DeformConv":
        n, g, og = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
        c = g * og * int(rng.integers(1, 3)); oc = g * int(rng.integers(1, 3))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        h, w = int(rng.integers(kh, 7)), int(rng.integers(kw, 7))
        stride = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]; pads = [int(rng.integers(0, 2)) for _ in range(4)]
        dil = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        if oh < 1 or ow < 1: pads, dil, oh, ow = [0, 0, 0, 0], [1, 1], h - kh + 1, w - kw + 1
        dt = pick([np.float32, np.float64])
        attrs = {"kernel_shape": [kh, kw], "strides": stride, "pads": pads, "dilations": dil}
        if g > 1: attrs["group"] = g
        if og > 1 or rng.random() < 0.3: attrs["offset_group"] = og
        feeds = {"I0": values(dt, [n, c, h, w], special=False), "I1": values(dt, [oc, c // g, kh, kw], special=False),
                 "I2": rng.uniform(-2, 2, [n, 2 * og * kh * kw, oh, ow]).astype(dt)}
        names = ["I0", "I1", "I2"]
        if rng.random() < 0.5: feeds["I3"] = values(dt, [oc], special=False); names.append("I3")
        if rng.random() < 0.5:
            if len(names) == 3: names.append("")
            feeds["I4"] = rng.uniform(0, 1, [n, og * kh * kw, oh, ow]).astype(dt); names.append("I4")
        return attrs, feeds, [], names, {}
    if op == "TfIdfVectorizer":
        strings = rng.random() < 0.4
        vocab = [str(w) for w in rng.choice(WORDS[:14], 6, replace=False)] if strings else [int(v) for v in rng.choice(10, 6, replace=False)]
        n1 = int(rng.integers(1, 4)); n2 = int(rng.integers(0, 3))
        uni = [vocab[i] for i in rng.choice(6, n1, replace=False)]
        bi = [vocab[int(i)] for i in rng.integers(0, 6, 2 * n2)]
        count = n1 + n2
        lo = int(pick([1, 1, 2])) if n2 else 1; hi = int(pick([lo, 2])) if n2 else 1
        attrs = {"mode": str(pick(["TF", "IDF", "TFIDF"])), "min_gram_length": lo, "max_gram_length": hi,
                 "max_skip_count": int(rng.integers(0, 3)), "ngram_counts": [0, n1],
                 "ngram_indexes": [int(v) for v in rng.permutation(count)]}
        attrs["pool_strings" if strings else "pool_int64s"] = uni + bi
        if rng.random() < 0.5: attrs["weights"] = [float(v) for v in rng.uniform(0.5, 3, count)]
        sh = [int(rng.integers(1, 9))] if rng.random() < 0.5 else [int(rng.integers(1, 3)), int(rng.integers(1, 9))]
        pool = vocab + (["zzz"] if strings else [77])
        x = np.array(rng.choice(np.array(pool, dtype=object), sh).tolist(), dtype=str if strings else np.int64)
        if not strings and rng.random() < 0.3: x = x.astype(np.int32)
        return attrs, {"I0": x}, [], None, {}
    if op == "Upsample":
        r = int(rng.integers(3, 5)); s = [int(rng.integers(1, 3)), int(rng.integers(1, 3))] + [int(rng.integers(1, 5)) for _ in range(r - 2)]
        scales = [1.0, 1.0] + [float(pick([1.0, 2.0, 3.0, 1.5, 0.5])) for _ in range(r - 2)]
        mode = str(pick(["nearest", "linear"]))
        return {"mode": mode}, {"I0": values(np.float32, s, special=False)}, [
            numpy_helper.from_array(np.array(scales, np.float32), "scales")], ["I0", "scales"], {}
    if op == "CausalConvWithState":
        b, c, t, k = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 7)), int(rng.integers(1, 5))
        dt = pick([np.float32, np.float16])  # the spec's types (and bf16)
        feeds = {"I0": values(dt, [b, c, t], special=False), "I1": values(dt, [c, 1, k], special=False)}
        names = ["I0", "I1"]
        if rng.random() < 0.5: feeds["I2"] = values(dt, [c], special=False); names.append("I2")
        if k > 1 and rng.random() < 0.6:
            if len(names) == 2: names.append("")
            feeds["I3"] = values(dt, [b, c, k - 1], special=False); names.append("I3")
        attrs = {"activation": str(pick(["none", "silu"]))} if rng.random() < 0.6 else {}
        return attrs, feeds, [], names, {"outs": ["Y", "Ystate"]}
    # Sequence ops: the sequence comes from SplitToSequence or SequenceConstruct before the op.
    dt = pick(ANY)
    if op == "SplitToSequence":
        s = shape_of(1, 3, smax=5); ax = int(rng.integers(0, len(s)))
        attrs = {"axis": ax - len(s) if rng.random() < 0.5 else ax}
        names, inits = ["I0"], []
        u = rng.random()
        if u < 0.3:
            inits.append(i64("split", int(rng.integers(1, s[ax] + 2)))); names.append("split")
        elif u < 0.6:
            parts, left = [], s[ax]
            while left: p = int(rng.integers(0, left + 1)); parts.append(p); left -= p
            inits.append(i64("split", parts)); names.append("split")
        elif rng.random() < 0.5:
            attrs["keepdims"] = 0
        return attrs, {"I0": values(dt, s)}, inits, names, {}
    s = shape_of(1, 3)
    n = int(rng.integers(1 if op != "SequenceConstruct" else 1, 4))
    feeds = {}
    for i in range(n):
        t = list(s)
        if op == "ConcatFromSequence" and rng.random() < 0.5: t[0] = int(rng.integers(0, 4))
        feeds[f"S{i}"] = values(dt, t)
    pre = [helper.make_node("SequenceConstruct", list(feeds), ["seq"])]
    if op == "SequenceConstruct":
        return {}, feeds, [], list(feeds), {"pre": [], "seq_in": False}
    names, inits, attrs = ["seq"], [], {}
    if op in ("SequenceAt", "SequenceErase", "SequenceInsert"):
        if op == "SequenceInsert":
            feeds["I0"] = values(dt, s); names.append("I0")
        if op == "SequenceAt" or rng.random() < 0.7:
            lim = n + (1 if op == "SequenceInsert" else 0)
            inits.append(i64("pos", int(rng.integers(-n, lim)))); names.append("pos")
    if op == "ConcatFromSequence":
        new = rng.random() < 0.4
        if new: attrs["new_axis"] = 1
        r = len(s) + (1 if new else 0)
        if any(feeds[f"S{i}"].shape != feeds["S0"].shape for i in range(n)):
            attrs = {"axis": int(pick([0, -len(s)]))}  # they differ along axis 0 only
        else:
            attrs["axis"] = int(rng.integers(-r, r))
    return attrs, feeds, inits, names, {"pre": pre}


def gen(op):
    """Attributes, inputs (name: array), initializers, and optionally the node's input names
    and extras, of a random case of `op`."""
    if op in SHAPE_OPS + STRING_OPS + SEQUENCE_OPS + NEWER_OPS:
        return gen_more(op)
    if op == "Einsum":
        letters = "abcde"
        n_in = int(rng.integers(1, 4))
        dims = {l: int(rng.integers(1, 4)) for l in letters}
        terms = []
        for _ in range(n_in):
            r = int(rng.integers(0, 4))
            terms.append("".join(rng.choice(list(letters), r, replace=True)))
        used = sorted(set("".join(terms)))
        out = "".join(rng.permutation([l for l in used if rng.random() < 0.5])) if rng.random() < 0.8 else None
        eq = ",".join(terms) + ("->" + out if out is not None else "")
        feeds = {f"I{i}": rng.uniform(-1, 1, [dims[c] for c in t]).astype(np.float32) for i, t in enumerate(terms)}
        return dict(equation=eq), feeds, []
    if op == "Pad":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        mode = str(rng.choice(["constant", "reflect", "edge", "wrap"]))
        pads = [int(p) for p in rng.integers(-2, 4, 2 * r)]
        # keep outputs non-negative
        for i in range(r):
            while shape[i] + pads[i] + pads[i + r] < 0: pads[i] += 1
        feeds = {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}
        inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
        if mode == "constant" and rng.random() < 0.5:
            inits.append(numpy_helper.from_array(np.array(1.5, np.float32), "cv"))
        return dict(mode=mode), feeds, inits
    if op == "GridSample":
        sp = 2 if rng.random() < 0.7 else 3
        N, C = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        ins = [int(s) for s in rng.integers(1, 6, sp)]; outs = [int(s) for s in rng.integers(1, 5, sp)]
        mode = str(rng.choice(["linear", "nearest", "cubic"] if sp == 2 else ["linear", "nearest"]))
        feeds = {"I0": rng.uniform(-1, 1, [N, C] + ins).astype(np.float32),
                 "I1": rng.uniform(-1.3, 1.3, [N] + outs + [sp]).astype(np.float32)}
        return dict(mode=mode, padding_mode=str(rng.choice(["zeros", "border", "reflection"])), align_corners=int(rng.integers(0, 2))), feeds, []
    if op == "ScatterElements":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        axis = int(rng.integers(-r, r)); ishape = list(shape); ishape[axis] = int(rng.integers(1, 4))
        ishape = [min(a, b) if i != axis % r else a for i, (a, b) in enumerate(zip(ishape, shape))]
        red = str(rng.choice(["none", "add", "mul", "max", "min"]))
        idx = rng.integers(-shape[axis], shape[axis], ishape)
        if red == "none":  # unique positions per line to avoid undefined order
            idx = np.zeros(ishape, np.int64)
            # use a permutation along axis
            ishape[axis % r] = min(ishape[axis % r], shape[axis % r])
            perm = rng.permutation(shape[axis])[:ishape[axis]]
            sl = [1]*r; sl[axis % r] = ishape[axis % r]
            idx = np.broadcast_to(perm.reshape(sl), ishape).copy()
        feeds = {"I0": rng.uniform(-1, 1, shape).astype(np.float32), "I1": idx.astype(np.int64), "I2": rng.uniform(-1, 1, ishape).astype(np.float32)}
        return dict(axis=axis, reduction=red), feeds, []
    if op in ("TopK",):
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        axis = int(rng.integers(-r, r)); k = int(rng.integers(0, shape[axis] + 1))
        x = rng.integers(-3, 4, shape).astype(np.float32)  # ties
        if rng.random() < 0.3: x = values(np.float32, shape)
        return dict(axis=axis, largest=int(rng.integers(0, 2)), sorted=1), {"I0": x}, [numpy_helper.from_array(np.array([k], np.int64), "k")]
    if op in ("ArgMax", "ArgMin"):
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        x = rng.integers(-2, 3, shape).astype(np.float32)
        if rng.random() < 0.3: x = values(np.float32, shape)
        return dict(axis=int(rng.integers(-r, r)), keepdims=int(rng.integers(0, 2)), select_last_index=int(rng.integers(0, 2))), {"I0": x}, []
    if op == "CumSum":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        if rng.random() < 0.3: x = values(np.float32, shape)
        return dict(exclusive=int(rng.integers(0, 2)), reverse=int(rng.integers(0, 2))), {"I0": x}, [numpy_helper.from_array(np.array(int(rng.integers(-r, r)), np.int64), "axis")]
    if op in ("DepthToSpace", "SpaceToDepth"):
        b = int(rng.integers(1, 4)); N = int(rng.integers(1, 3))
        if op == "DepthToSpace":
            shape = [N, b * b * int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4))]
            return dict(blocksize=b, mode=str(rng.choice(["DCR", "CRD"]))), {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, []
        shape = [N, int(rng.integers(1, 3)), b * int(rng.integers(1, 3)), b * int(rng.integers(1, 3))]
        return dict(blocksize=b), {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, []
    if op == "Trilu":
        r = int(rng.integers(2, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        return dict(upper=int(rng.integers(0, 2))), {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, [numpy_helper.from_array(np.array(int(rng.integers(-6, 7)), np.int64), "k")]
    if op == "GatherElements":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        axis = int(rng.integers(-r, r)); ishape = [int(rng.integers(1, s + 1)) for s in shape]; ishape[axis] = int(rng.integers(1, 5))
        idx = rng.integers(-shape[axis], shape[axis], ishape).astype(np.int64)
        return dict(axis=axis), {"I0": rng.uniform(-1, 1, shape).astype(np.float32), "I1": idx}, []
    if op == "LayerNormalization":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        axis = int(rng.integers(-r, r)); ns = shape[axis:]
        inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, ns).astype(np.float32), "scale")]
        if rng.random() < 0.5: inits.append(numpy_helper.from_array(rng.uniform(-1, 1, ns).astype(np.float32), "bias"))
        return dict(axis=axis, epsilon=float(rng.choice([1e-5, 1e-2]))), {"I0": rng.uniform(-2, 2, shape).astype(np.float32)}, inits
    if op == "Softmax" or op == "LogSoftmax" or op == "Hardmax":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        x = rng.integers(-2, 3, shape).astype(np.float32) if op == "Hardmax" else rng.uniform(-5, 5, shape).astype(np.float32)
        if rng.random() < 0.3: x = values(np.float32, shape)
        return dict(axis=int(rng.integers(-r, r))), {"I0": x}, []
    if op == "OneHot":
        r = int(rng.integers(0, 3)); shape = [int(s) for s in rng.integers(1, 5, r)]
        depth = int(rng.integers(1, 6))
        idx = rng.integers(-depth - 1, depth + 1, shape).astype(np.int64)
        return dict(axis=int(rng.integers(-r - 1, r + 1))), {"I0": idx}, [numpy_helper.from_array(np.array(depth, np.int64), "depth"), numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "values")]
    if op == "Gemm":
        M, K, N = (int(v) for v in rng.integers(1, 6, 3))
        ta, tb = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        A = rng.uniform(-1, 1, [K, M] if ta else [M, K]).astype(np.float32)
        B = rng.uniform(-1, 1, [N, K] if tb else [K, N]).astype(np.float32)
        feeds = {"I0": A, "I1": B}
        cshape = [[M, N], [N], [1, N], [M, 1], [], [1]][int(rng.integers(0, 6))]
        if rng.random() < 0.7: feeds["I2"] = rng.uniform(-1, 1, cshape).astype(np.float32)
        return dict(transA=ta, transB=tb, alpha=float(rng.choice([1.0, 0.5, -2.0])), beta=float(rng.choice([1.0, 0.0, 3.0]))), feeds, []
    if op == "MatMul" or op == "MatMulInteger":
        ra, rb = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        K = int(rng.integers(1, 6))
        batch = [int(s) for s in rng.integers(1, 4, 3)]
        sa = [b if rng.random() < 0.7 else 1 for b in batch[3 - max(ra - 2, 0):]] + ([int(rng.integers(1, 5)), K] if ra >= 2 else [K])
        sb = [b if rng.random() < 0.7 else 1 for b in batch[3 - max(rb - 2, 0):]] + ([K, int(rng.integers(1, 5))] if rb >= 2 else [K])
        sa = sa[-ra:] if ra >= 2 else [K]; sb = sb[-rb:] if rb >= 2 else [K]
        if op == "MatMul":
            return {}, {"I0": rng.uniform(-1, 1, sa).astype(np.float32), "I1": rng.uniform(-1, 1, sb).astype(np.float32)}, []
        a = rng.integers(0, 256, sa).astype(np.uint8); b = rng.integers(-128, 128, sb).astype(np.int8)
        return {}, {"I0": a, "I1": b}, [numpy_helper.from_array(np.array(int(rng.integers(0, 256)), np.uint8), "azp")]
    if op.startswith("Reduce"):
        r = int(rng.integers(0, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        dt = rng.choice([np.float32, np.int32, np.int64]) if op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd") else np.float32
        x = (rng.integers(-9, 10, shape) if dt != np.float32 else rng.uniform(0.1, 2, shape)).astype(dt)
        if rng.random() < 0.3: x = values(dt, shape)  # NaN, infinities, -0, the ends
        # Distinct axes, some written negative (a repeated axis is refused, as the reference does).
        axes = sorted(set(int(a) for a in rng.integers(0, r, int(rng.integers(0, r + 1))))) if r else []
        axes = [a - r if rng.random() < 0.5 else a for a in axes]
        inits = [numpy_helper.from_array(np.array(axes, np.int64), "axes")] if (axes or rng.random() < 0.5) else []
        return dict(keepdims=int(rng.integers(0, 2)), noop_with_empty_axes=int(rng.integers(0, 2))), {"I0": x}, inits
    if op == "Tile":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 4, r)]
        return {}, {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, [numpy_helper.from_array(rng.integers(0, 4, r).astype(np.int64), "reps")]
    if op == "Split":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 7, r)]
        axis = int(rng.integers(-r, r))
        return dict(axis=axis, num_outputs=int(rng.integers(1, shape[axis] + 1))), {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, []
    if op == "Gather":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        axis = int(rng.integers(-r, r))
        idx = rng.integers(-shape[axis], shape[axis], [int(s) for s in rng.integers(1, 4, int(rng.integers(0, 3)))]).astype(np.int64)
        return dict(axis=axis), {"I0": rng.uniform(-1, 1, shape).astype(np.float32), "I1": idx}, []
    if op == "Slice":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 7, r)]
        n = int(rng.integers(1, r + 1)); axes = [int(a) for a in rng.permutation(r)[:n]]
        starts = rng.integers(-8, 9, n); ends = rng.integers(-8, 9, n); steps = rng.choice([-3, -2, -1, 1, 2, 3], n)
        inits = [numpy_helper.from_array(starts.astype(np.int64), "starts"), numpy_helper.from_array(ends.astype(np.int64), "ends"),
                 numpy_helper.from_array(np.array(axes, np.int64), "axes"), numpy_helper.from_array(steps.astype(np.int64), "steps")]
        return {}, {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, inits
    if op == "Resize":
        rank = int(rng.integers(2, 5)); shape = [int(s) for s in rng.integers(1, 7, rank)]
        mode = str(rng.choice(["nearest", "linear", "cubic"]))
        ctm = str(rng.choice(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                              "tf_crop_and_resize", "half_pixel_symmetric"]))
        attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
        if mode == "nearest":
            attrs["nearest_mode"] = str(rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
        if mode == "cubic":
            attrs["cubic_coeff_a"] = float(rng.choice([-0.75, -0.5]))
            attrs["exclude_outside"] = int(rng.integers(0, 2))
        if mode != "nearest" and rng.random() < 0.3:
            attrs["antialias"] = 1
        n_axes = 2 if mode != "nearest" else int(rng.integers(1, rank + 1))
        axes = list(range(rank - n_axes, rank))
        inits = []
        if ctm == "tf_crop_and_resize":
            lo, hi = rng.uniform(0, 0.4, rank), rng.uniform(0.6, 1, rank)
            inside = np.isin(range(rank), axes)
            roi = np.concatenate([np.where(inside, lo, 0), np.where(inside, hi, 1)]).astype(np.float32)
            attrs["extrapolation_value"] = float(rng.choice([0.0, -1.0]))
        else:
            roi = np.array([], np.float32)
        inits.append(numpy_helper.from_array(roi, "roi"))
        if rng.random() < 0.5:
            scales = [float(rng.choice([0.3, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0])) if i in axes else 1.0
                      for i in range(rank)]
            inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
            names = ["I0", "roi", "scales"]
        else:
            sizes = [int(rng.integers(1, 10)) if i in axes else shape[i] for i in range(rank)]
            inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
            names = ["I0", "roi", "", "sizes"]
            if rng.random() < 0.3:
                attrs["keep_aspect_ratio_policy"] = str(rng.choice(["not_larger", "not_smaller"]))
        return attrs, {"I0": rng.uniform(-2, 2, shape).astype(np.float32)}, inits, names
    if op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"):
        sp = int(rng.integers(1, 4))
        N, C = int(rng.integers(1, 3)), int(rng.integers(1, 5))
        spatial = [int(s) for s in rng.integers(1, 9, sp)]
        k = [int(s) for s in rng.integers(1, 4, sp)]
        attrs = {"kernel_shape": k} if op.endswith("Pool") or rng.random() < 0.5 else {}
        if rng.random() < 0.7:
            attrs["strides"] = [int(s) for s in rng.integers(1, 4, sp)]
        if op in ("Conv", "ConvTranspose", "MaxPool") and rng.random() < 0.4:
            attrs["dilations"] = [int(s) for s in rng.integers(1, 3, sp)]
        auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        if auto_pad != "NOTSET":
            attrs["auto_pad"] = auto_pad
        elif rng.random() < 0.6:
            attrs["pads"] = [int(p) for p in rng.integers(0, 3, 2 * sp)]
        if op in ("MaxPool", "AveragePool") and rng.random() < 0.5:
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and rng.random() < 0.5:
            attrs["count_include_pad"] = 1
        if op == "LpPool":
            attrs["p"] = int(rng.choice([1, 2, 3]))
        inits = []
        if op in ("Conv", "ConvTranspose"):
            group = int(rng.choice([g for g in (1, 2, C) if C % g == 0]))
            M = group * int(rng.integers(1, 3))
            if group > 1:
                attrs["group"] = group
            w = [M, C // group] + k if op == "Conv" else [C, M // group] + k
            inits.append(numpy_helper.from_array(rng.uniform(-1, 1, w).astype(np.float32), "W"))
            if rng.random() < 0.5:
                inits.append(numpy_helper.from_array(rng.uniform(-1, 1, [M]).astype(np.float32), "B"))
            if op == "ConvTranspose" and rng.random() < 0.3 and "strides" in attrs:
                d = attrs.get("dilations", [1] * sp)
                attrs["output_padding"] = [int(rng.integers(0, max(1, min(s, t)))) for s, t in zip(attrs["strides"], d)]
            if op == "ConvTranspose" and rng.random() < 0.2:
                attrs["output_shape"] = [int(s) for s in rng.integers(2, 12, sp)]
        return attrs, {"I0": rng.uniform(-2, 2, [N, C] + spatial).astype(np.float32)}, inits
    if op == "Attention":
        B, Hq, Sq, Skv, D = (int(v) for v in rng.integers(1, 5, 5))
        Hkv = int(rng.choice([h for h in range(1, Hq + 1) if Hq % h == 0]))
        Dv = int(rng.integers(1, 5))
        attrs = {}
        three_d = rng.random() < 0.3
        if three_d:
            attrs.update(q_num_heads=Hq, kv_num_heads=Hkv)
            q = rng.uniform(-1, 1, [B, Sq, Hq * D]); k = rng.uniform(-1, 1, [B, Skv, Hkv * D])
            v = rng.uniform(-1, 1, [B, Skv, Hkv * Dv])
        else:
            q = rng.uniform(-1, 1, [B, Hq, Sq, D]); k = rng.uniform(-1, 1, [B, Hkv, Skv, D])
            v = rng.uniform(-1, 1, [B, Hkv, Skv, Dv])
        feeds = {"I0": q.astype(np.float32), "I1": k.astype(np.float32), "I2": v.astype(np.float32)}
        names = ["I0", "I1", "I2"]
        if rng.random() < 0.4:
            if rng.random() < 0.5:
                feeds["I3"] = rng.random([Sq, Skv]) < 0.8
            else:
                feeds["I3"] = rng.uniform(-2, 0, [1, 1, Sq, Skv]).astype(np.float32)
            names.append("I3")
        if rng.random() < 0.4:
            attrs["is_causal"] = 1
        if rng.random() < 0.3:
            attrs["scale"] = float(rng.choice([0.5, 1.0, 0.1]))
        if rng.random() < 0.3:
            attrs["softcap"] = float(rng.choice([1.0, 5.0]))
        return attrs, feeds, [], names
    if op == "RMSNormalization" or op == "GroupNormalization" or op == "InstanceNormalization":
        N, C = int(rng.integers(1, 3)), int(rng.integers(1, 5))
        spatial = [int(s) for s in rng.integers(1, 5, int(rng.integers(0, 3)))]
        x = rng.uniform(-2, 2, [N, C] + spatial).astype(np.float32)
        attrs = {"epsilon": float(rng.choice([1e-5, 1e-2]))}
        if op == "RMSNormalization":
            axis = int(rng.integers(-x.ndim, x.ndim)); attrs["axis"] = axis
            scale = rng.uniform(0.5, 1.5, x.shape[axis:]).astype(np.float32)
            return attrs, {"I0": x}, [numpy_helper.from_array(scale, "scale")]
        if op == "GroupNormalization":
            g = int(rng.choice([d for d in range(1, C + 1) if C % d == 0])); attrs["num_groups"] = g
        inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, [C]).astype(np.float32), "scale"),
                 numpy_helper.from_array(rng.uniform(-1, 1, [C]).astype(np.float32), "bias")]
        return attrs, {"I0": x}, inits
    if op == "ScatterND" or op == "GatherND":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        if op == "GatherND":
            b = int(rng.integers(0, r)); q = int(rng.integers(1, r - b + 1))
            lead = shape[:b]
            idx = np.stack([rng.integers(-shape[b + j], shape[b + j], lead + [2]) for j in range(q)], -1)
            return {"batch_dims": b}, {"I0": x, "I1": idx.astype(np.int64)}, []
        q = int(rng.integers(1, r + 1))
        cells = list(np.ndindex(*shape[:q]))
        n = int(rng.integers(1, len(cells) + 1))
        red = str(rng.choice(["none", "add", "mul", "max", "min"]))
        pick = rng.permutation(len(cells))[:n] if red == "none" else rng.integers(0, len(cells), n)
        idx = np.array([cells[i] for i in pick], np.int64).reshape(n, q)
        upd = rng.uniform(-1, 1, [n] + shape[q:]).astype(np.float32)
        return {"reduction": red}, {"I0": x, "I1": idx, "I2": upd}, []
    if op == "RoiAlign":
        N, C, H, W = 1, int(rng.integers(1, 3)), int(rng.integers(2, 9)), int(rng.integers(2, 9))
        R = int(rng.integers(1, 4))
        x1 = rng.uniform(0, W * 0.6, R); y1 = rng.uniform(0, H * 0.6, R)
        rois = np.stack([x1, y1, x1 + rng.uniform(0.5, W * 0.5, R), y1 + rng.uniform(0.5, H * 0.5, R)], 1)
        attrs = dict(mode=str(rng.choice(["avg", "max"])), output_height=int(rng.integers(1, 4)),
                     output_width=int(rng.integers(1, 4)), sampling_ratio=int(rng.integers(0, 3)),
                     spatial_scale=float(rng.choice([1.0, 0.5])),
                     coordinate_transformation_mode=str(rng.choice(["half_pixel", "output_half_pixel"])))
        return attrs, {"I0": rng.uniform(-1, 1, [N, C, H, W]).astype(np.float32),
                       "I1": rois.astype(np.float32), "I2": np.zeros(R, np.int64)}, []
    if op == "LRN":
        x = rng.uniform(-2, 2, [1, int(rng.integers(1, 7)), 3, 2]).astype(np.float32)
        return dict(size=int(rng.choice([1, 2, 3, 5])), alpha=float(rng.choice([1e-4, 0.5])),
                    beta=float(rng.choice([0.75, 0.5])), bias=float(rng.choice([1.0, 2.0]))), {"I0": x}, []
    if op == "Compress":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        if rng.random() < 0.3:
            return {}, {"I0": x, "I1": rng.random(int(rng.integers(0, x.size + 1))) < 0.5}, []
        axis = int(rng.integers(-r, r))
        return {"axis": axis}, {"I0": x, "I1": rng.random(int(rng.integers(0, shape[axis] + 1))) < 0.5}, []
    if op == "CenterCropPad":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 7, r)]
        axes = sorted(set(int(a) for a in rng.integers(0, r, int(rng.integers(1, r + 1)))))
        target = rng.integers(1, 9, len(axes)).astype(np.int64)
        return {"axes": axes}, {"I0": rng.uniform(-1, 1, shape).astype(np.float32)}, [numpy_helper.from_array(target, "shape")]
    if op == "Mod" or op == "BitShift":
        r = int(rng.integers(0, 3)); shape = [int(s) for s in rng.integers(1, 5, r)]
        if op == "BitShift":
            t = [np.uint8, np.uint32, np.uint64][int(rng.integers(0, 3))]
            bits = np.iinfo(t).bits
            return ({"direction": str(rng.choice(["LEFT", "RIGHT"]))},
                    {"I0": rng.integers(0, 2 ** min(bits, 62), shape, dtype=np.uint64).astype(t),
                     "I1": rng.integers(0, bits, shape).astype(t)}, [])
        fmod = int(rng.integers(0, 2))
        if fmod or rng.random() < 0.5:
            a = rng.uniform(-9, 9, shape).astype(np.float32); b = rng.choice([-2.5, -1.0, 0.75, 3.0], shape).astype(np.float32)
            return {"fmod": fmod}, {"I0": a, "I1": b}, []
        a = rng.integers(-20, 21, shape).astype(np.int32); b = rng.choice([-7, -3, 2, 5], shape).astype(np.int32)
        return {}, {"I0": a, "I1": b}, []
    if op == "QuantizeLinear" or op == "DequantizeLinear":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 6, r)]
        zt = [np.uint8, np.int8, np.uint16, np.int16][int(rng.integers(0, 4))]
        info = np.iinfo(zt)
        kind = int(rng.integers(0, 3)); axis = int(rng.integers(-r, r)); attrs = {}
        if kind == 0: sshape = []
        elif kind == 1: sshape = [shape[axis]]; attrs["axis"] = axis
        else:
            bs = int(rng.integers(1, 4)); attrs["axis"] = axis; attrs["block_size"] = bs
            sshape = list(shape); sshape[axis] = -(-shape[axis] // bs)
        scale = rng.choice([0.5, 0.25, 0.1, 0.03, 1.0, 2.0, 0.7], sshape).astype(np.float32)
        zp = rng.integers(max(info.min, -50), min(info.max, 50) + 1, sshape).astype(zt)
        inits = [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(zp, "zp")]
        if op == "QuantizeLinear":
            x = (rng.integers(-400, 400, shape) * rng.choice([0.5, 0.25, 0.05, 0.125], shape)).astype(np.float32)  # ties
            return attrs, {"I0": x}, inits
        x = rng.integers(info.min, info.max + 1, shape).astype(zt)
        return attrs, {"I0": x}, inits
    if op == "DynamicQuantizeLinear":
        r = int(rng.integers(1, 3)); shape = [int(s) for s in rng.integers(1, 6, r)]
        x = rng.uniform(-3, 3, shape).astype(np.float32)
        if rng.random() < 0.3: x = np.abs(x)
        return {}, {"I0": x}, []
    if op == "QLinearMatMul":
        M, K, N = (int(v) for v in rng.integers(1, 6, 3))
        a = rng.integers(0, 256, [M, K]).astype(np.uint8); b = rng.integers(0, 256, [K, N]).astype(np.uint8)
        f = lambda v, n, t: numpy_helper.from_array(np.array(v, t), n)
        inits = [f(rng.choice([0.01, 0.02, 0.05]), "as", np.float32), f(int(rng.integers(0, 256)), "az", np.uint8),
                 f(rng.choice([0.01, 0.03]), "bs", np.float32), f(int(rng.integers(0, 256)), "bz", np.uint8),
                 f(rng.choice([0.05, 0.2, 1.0]), "ys", np.float32), f(int(rng.integers(0, 256)), "yz", np.uint8)]
        return {}, {"I0": a, "I1": b}, inits
    if op in UNARY or op in BINARY or op in VARIADIC or op == "Cast" or op == "Where" or op == "Clip":
        return elementwise(op)
    if op == "NonZero":
        r = int(rng.integers(0, 4)); shape = [int(s) for s in rng.integers(0, 5, r)]
        dt = [np.float32, np.int32, np.bool_, np.int64, np.uint8][int(rng.integers(0, 5))]
        return {}, {"I0": ((rng.random(shape) < 0.4) * rng.integers(1, 5, shape)).astype(dt)}, []
    if op == "Unique":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        dt = [np.float32, np.int64, np.int8][int(rng.integers(0, 3))]
        x = rng.integers(-3, 4, shape).astype(dt)
        if dt != np.int8 and rng.random() < 0.3: x = values(dt, shape)
        attrs = {"sorted": int(rng.integers(0, 2))}
        if rng.random() < 0.5:
            attrs["axis"] = int(rng.integers(-r, r))
        return attrs, {"I0": x}, []
    if op == "NonMaxSuppression":
        B, C, N = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 9))
        a, b = rng.uniform(0, 4, [B, N, 2]), rng.uniform(0.5, 3, [B, N, 2])
        cpb = int(rng.integers(0, 2))
        boxes = np.concatenate([a, b], -1) if cpb else np.concatenate([a, a + b * rng.choice([-1, 1], [B, N, 2])], -1)
        feeds = {"I0": boxes.astype(np.float32), "I1": rng.uniform(0, 1, [B, C, N]).astype(np.float32)}
        inits = [numpy_helper.from_array(np.array([int(rng.integers(0, N + 2))], np.int64), "mo"),
                 numpy_helper.from_array(np.array([float(rng.choice([0.0, 0.3, 0.5, 0.9]))], np.float32), "iou"),
                 numpy_helper.from_array(np.array([float(rng.choice([0.0, 0.4, 0.7]))], np.float32), "st")]
        n = int(rng.integers(0, 4))
        return {"center_point_box": cpb}, feeds, inits[:n], list(feeds) + [i.name for i in inits[:n]]
    if op == "MaxUnpool":
        sp = int(rng.integers(1, 3)); N, C = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        ins = [int(s) for s in rng.integers(1, 4, sp)]; k = [int(s) for s in rng.integers(1, 4, sp)]
        st = [int(s) for s in rng.integers(1, 3, sp)]; pads = [int(p) for p in rng.integers(0, 2, 2 * sp)]
        pads = [min(p, k[i % sp] - 1) for i, p in enumerate(pads)]
        out = [(i - 1) * s + kk - pads[j] - pads[j + sp] for j, (i, s, kk) in enumerate(zip(ins, st, k))]
        if min(out) < 1:
            pads = [0] * (2 * sp); out = [(i - 1) * s + kk for i, s, kk in zip(ins, st, k)]
        plane, cells = int(np.prod(out)), int(np.prod(ins))
        idx = np.stack([rng.permutation(plane)[:cells] if plane >= cells else rng.integers(0, plane, cells)
                        for _ in range(N * C)]).reshape([N, C] + ins)
        idx = idx + (np.arange(N * C) * plane).reshape([N, C] + [1] * sp)
        feeds = {"I0": rng.uniform(-1, 1, [N, C] + ins).astype(np.float32), "I1": idx.astype(np.int64)}
        attrs = {"kernel_shape": k, "strides": st, "pads": pads}
        if rng.random() < 0.3:
            bigger = [N, C] + [o + int(rng.integers(0, 2)) for o in out]
            return attrs, feeds, [numpy_helper.from_array(np.array(bigger, np.int64), "os")]
        return attrs, feeds, []
    if op == "ReverseSequence":
        T_, B = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        rest = [int(s) for s in rng.integers(1, 4, int(rng.integers(0, 2)))]
        tb = int(rng.integers(0, 2))
        shape = ([B, T_] if tb else [T_, B]) + rest
        lens = rng.integers(1, T_ + 1, B).astype(np.int64)
        return {"batch_axis": 1 - tb, "time_axis": tb}, {"I0": rng.uniform(-1, 1, shape).astype(np.float32), "I1": lens}, []
    if op == "Col2Im":
        sp = 2 if rng.random() < 0.8 else int(rng.choice([1, 3]))
        N, C = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        img = [int(s) for s in rng.integers(1, 7, sp)]; blk = [int(rng.integers(1, i + 1)) for i in img]
        d = [int(s) for s in rng.integers(1, 3, sp)]; s = [int(v) for v in rng.integers(1, 3, sp)]
        p = [int(v) for v in rng.integers(0, 2, 2 * sp)]
        nb = [(img[i] + p[i] + p[i + sp] - d[i] * (blk[i] - 1) - 1) // s[i] + 1 for i in range(sp)]
        if min(nb) < 1:
            d = [1] * sp; nb = [(img[i] + p[i] + p[i + sp] - blk[i]) // s[i] + 1 for i in range(sp)]
        x = rng.uniform(-1, 1, [N, C * int(np.prod(blk)), int(np.prod(nb))]).astype(np.float32)
        return {"dilations": d, "strides": s, "pads": p}, {"I0": x}, [
            numpy_helper.from_array(np.array(img, np.int64), "img"), numpy_helper.from_array(np.array(blk, np.int64), "blk")]
    if op == "AffineGrid":
        N = int(rng.integers(1, 3)); three = rng.random() < 0.3
        size = [N, int(rng.integers(1, 3))] + [int(s) for s in rng.integers(1, 6, 3 if three else 2)]
        theta = rng.uniform(-1.5, 1.5, [N, 3, 4] if three else [N, 2, 3]).astype(np.float32)
        return {"align_corners": int(rng.integers(0, 2))}, {"I0": theta}, [numpy_helper.from_array(np.array(size, np.int64), "size")]
    if op == "BatchNormalization":
        N, C = int(rng.integers(1, 3)), int(rng.integers(1, 5))
        x = rng.uniform(-2, 2, [N, C] + [int(s) for s in rng.integers(1, 4, int(rng.integers(0, 3)))])
        dt = np.float64 if rng.random() < 0.3 else np.float32
        inits = [numpy_helper.from_array(v.astype(dt), n) for v, n in (
            (rng.uniform(0.5, 1.5, C), "scale"), (rng.uniform(-1, 1, C), "bias"), (rng.uniform(-1, 1, C), "mean"), (rng.uniform(0.1, 2, C), "var"))]
        return {"epsilon": float(rng.choice([1e-5, 0.1])), "momentum": 0.9}, {"I0": x.astype(dt)}, inits
    if op == "MeanVarianceNormalization":
        r = int(rng.integers(1, 5)); shape = [int(s) for s in rng.integers(1, 5, r)]
        axes = sorted(set(int(a) for a in rng.integers(0, r, int(rng.integers(1, r + 1)))))
        attrs = {"axes": axes} if r != 4 or rng.random() < 0.6 else {}
        return attrs, {"I0": rng.uniform(-2, 2, shape).astype(np.float32)}, []
    if op == "LpNormalization":
        r = int(rng.integers(1, 4)); shape = [int(s) for s in rng.integers(1, 5, r)]
        x = rng.uniform(-2, 2, shape) * (rng.random(shape) < 0.8)
        return {"axis": int(rng.integers(-r, r)), "p": int(rng.integers(1, 3))}, {"I0": x.astype(np.float32)}, []
    if op == "Det":
        n = int(rng.integers(1, 5)); batch = [int(s) for s in rng.integers(1, 3, int(rng.integers(0, 3)))]
        x = rng.uniform(-2, 2, batch + [n, n])
        if rng.random() < 0.2 and n > 1: x[..., 1, :] = x[..., 0, :] * 2  # singular
        return {}, {"I0": x.astype(np.float64 if rng.random() < 0.3 else np.float32)}, []
    if op == "ConvInteger" or op == "QLinearConv":
        sp = int(rng.integers(1, 3)); N, C = int(rng.integers(1, 3)), int(rng.integers(1, 5))
        spatial = [int(s) for s in rng.integers(2, 7, sp)]; k = [int(rng.integers(1, min(3, s) + 1)) for s in spatial]
        group = int(rng.choice([g for g in (1, 2, C) if C % g == 0])); M = group * int(rng.integers(1, 3))
        attrs = {"kernel_shape": k, "group": group}
        if rng.random() < 0.5: attrs["strides"] = [int(s) for s in rng.integers(1, 3, sp)]
        if rng.random() < 0.5: attrs["pads"] = [int(p) for p in rng.integers(0, 2, 2 * sp)]
        if rng.random() < 0.3: attrs["dilations"] = [int(s) for s in rng.integers(1, 3, sp)]
        xt = np.uint8 if op == "QLinearConv" or rng.random() < 0.7 else np.int8
        wt = np.int8 if rng.random() < 0.5 else np.uint8
        info, winfo = np.iinfo(xt), np.iinfo(wt)
        x = rng.integers(info.min, info.max + 1, [N, C] + spatial).astype(xt)
        w = rng.integers(winfo.min, winfo.max + 1, [M, C // group] + k).astype(wt)
        f = lambda v, n, t: numpy_helper.from_array(np.array(v, t), n)
        if op == "ConvInteger":
            inits = [f(w, "W", wt), f(int(rng.integers(info.min, info.max + 1)), "xz", xt)]
            if rng.random() < 0.5:
                inits.append(f(int(rng.integers(winfo.min, winfo.max + 1)), "wz", wt))
            return attrs, {"I0": x}, inits, ["I0", "W"] + [i.name for i in inits[1:]]
        wz = rng.integers(winfo.min, winfo.max + 1, [M] if rng.random() < 0.5 else []) if wt == np.uint8 else np.zeros([M] if rng.random() < 0.5 else [], np.int64)
        ws = rng.choice([0.01, 0.02, 0.005], list(wz.shape))
        inits = [f(rng.choice([0.01, 0.05]), "xs", np.float32), f(int(rng.integers(0, 256)), "xz", xt), f(w, "W", wt),
                 f(ws, "ws", np.float32), f(wz, "wz", wt), f(rng.choice([0.05, 0.5, 2.0]), "ys", np.float32),
                 f(int(rng.integers(0, 256)), "yz", np.uint8)]
        if rng.random() < 0.5:
            inits.append(f(rng.integers(-5000, 5000, [M]), "B", np.int32))
        return attrs, {"I0": x}, inits, ["I0"] + [i.name for i in inits]
    if op == "NegativeLogLikelihoodLoss" or op == "SoftmaxCrossEntropyLoss":
        N, C = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        extra = [int(s) for s in rng.integers(1, 4, int(rng.integers(0, 3)))]
        x = rng.uniform(-3, 3 if op == "SoftmaxCrossEntropyLoss" else 0, [N, C] + extra).astype(np.float32)
        t = rng.integers(0, C, [N] + extra).astype(np.int64)
        attrs = {"reduction": str(rng.choice(["none", "sum", "mean"]))}
        if rng.random() < 0.4:
            ig = int(rng.integers(0, C)) if rng.random() < 0.7 else -1
            attrs["ignore_index"] = ig
            t[rng.random(t.shape) < 0.4] = ig
        feeds = {"I0": x, "I1": t}
        if rng.random() < 0.5:
            feeds["I2"] = rng.uniform(0, 2, [C]).astype(np.float32)
        return attrs, feeds, []
    raise ValueError(op)

OPS = ["Resize", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "Gemm", "MatMul",
       "MatMulInteger", "QLinearMatMul", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
       "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceL2",
       "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "Tile", "Split", "Gather", "Slice",
       "Einsum", "Pad", "GridSample", "ScatterElements", "TopK", "ArgMax", "ArgMin", "CumSum",
       "DepthToSpace", "SpaceToDepth", "Trilu", "GatherElements", "LayerNormalization", "Softmax",
       "LogSoftmax", "Hardmax", "OneHot", "Attention", "RMSNormalization", "GroupNormalization",
       "InstanceNormalization", "ScatterND", "GatherND", "RoiAlign", "LRN", "Compress",
       "CenterCropPad", "Mod", "BitShift", "NonZero", "Unique", "NonMaxSuppression", "MaxUnpool",
       "ReverseSequence", "Col2Im", "AffineGrid", "BatchNormalization", "MeanVarianceNormalization",
       "LpNormalization", "Det", "ConvInteger", "QLinearConv", "NegativeLogLikelihoodLoss",
       "SoftmaxCrossEntropyLoss", "Cast", "Where", "Clip"] + UNARY + BINARY + VARIADIC + SHAPE_OPS + STRING_OPS + SEQUENCE_OPS + NEWER_OPS
if only:
    OPS = only
refused = {}  # op: models onnxruntime refused (a dtype or rank it has no kernel for, ...)
tally = {"ok": 0, "as the reference": 0, "mismatch": 0, "our error": 0, "reference only, ok": 0,
         "reference only, mismatch": 0, "refused by both": 0}
empty_share = float(os.environ.get("EMPTY", "0"))


def ort_session_run(path, feeds):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)


ort_pool = None


def ort_run(path, feeds):
    """onnxruntime's outputs; with EMPTY in a child process, as onnxruntime aborts the whole
    process on some empty inputs (Unique, GRU, ...): an abort counts as a refusal."""
    global ort_pool
    if not empty_share:
        return ort_session_run(path, feeds)
    if ort_pool is None:
        ort_pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    try:
        return ort_pool.submit(ort_session_run, path, feeds).result()
    except concurrent.futures.process.BrokenProcessPool:
        ort_pool = None
        raise RuntimeError("onnxruntime aborted")


empty_rng = np.random.default_rng(seed + 7919)  # apart, so the models stay the seed's
constant_share = float(os.environ.get("CONSTANT", "0"))
constant_rng = np.random.default_rng(seed + 7927)
tally["our crash"] = 0
tally["refused by both, we ran"] = 0


def crashed(run):
    """A run that did not end as the command's contract says (0, or 1 with one error line)."""
    return run.returncode not in (0, 1) or (run.returncode == 1 and not run.stderr.startswith("error: "))


for case in range(count):
    op = str(rng.choice(OPS))
    attrs, feeds, inits, *given = gen(op)
    ranked = [k for k, v in feeds.items() if v.ndim]
    if empty_rng.random() < empty_share and ranked:
        shape = feeds[ranked[0]].shape
        cut = list(shape); cut[int(empty_rng.integers(0, len(shape)))] = 0
        feeds = {k: v[tuple(slice(0, c) for c in cut)] if v.shape == shape else v for k, v in feeds.items()}
    names = given[0] if given and given[0] is not None else list(feeds) + [i.name for i in inits]
    if constant_rng.random() < constant_share and all(v.dtype.kind != "U" for v in feeds.values()):
        inits = list(inits) + [numpy_helper.from_array(v, k) for k, v in feeds.items()]
        feeds = {}
    extra = given[1] if len(given) > 1 else {}
    if op == "QLinearMatMul":
        names = ["I0", "as", "az", "I1", "bs", "bz", "ys", "yz"]
    outs = (["Y", "Ys", "Yz"] if op == "DynamicQuantizeLinear" else ["Y", "Yi"] if op == "TopK"
            else ["Y", "Yi", "Yinv", "Yc"] if op == "Unique"
            else [f"Y{i}" for i in range(attrs["num_outputs"])] if op == "Split" else ["Y"])
    outs = extra.get("outs", outs)
    node = helper.make_node(extra.get("op", op), names, outs, domain=extra.get("domain", ""), **attrs)
    graph = helper.make_graph(
        extra.get("pre", []) + [node], "g",
        [helper.make_tensor_value_info(k, T.STRING if v.dtype.kind == "U" else NP2T[v.dtype], list(v.shape))
         for k, v in feeds.items()],
        [onnx.ValueInfoProto(name=o) for o in outs], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET.get(op, 21)),
                                                helper.make_opsetid("ai.onnx.ml", 4)])
    m.ir_version = 10
    path = f"{work}/m{case}.onnx"
    onnx.save(m, path)
    ort_refused = False
    try:
        want = ort_run(path, {k: v.astype(object) if v.dtype.kind == "U" else v for k, v in feeds.items()})
    except Exception:
        # No kernel in onnxruntime (f64 Acos, f16 Elu, ...): the ONNX reference decides.
        ort_refused = True
        refused[op] = refused.get(op, 0) + 1
        try:
            with np.errstate(all="ignore"):
                want = ReferenceEvaluator(m).run(None, feeds)
        except Exception:
            want = None
    args = [binary, "run", path, "--out", f"{work}/o{case}"]
    for k, v in feeds.items():
        np.save(f"{work}/m{case}_{k}.npy", v)
        args += ["--input", f"{k}={work}/m{case}_{k}.npy"]
    run = subprocess.run(args, capture_output=True, text=True)
    described = f"{op} {attrs} {[(str(v.dtype), v.shape) for v in feeds.values()]}"
    if crashed(run):
        tally["our crash"] += 1
        print(f"m{case} CRASH (exit {run.returncode}) {described}: {run.stderr.strip()[-300:]}")
        continue
    if want is None:
        key = "refused by both" if run.returncode else "refused by both, we ran"
        tally[key] += 1
        if not run.returncode:
            params = [numpy_helper.to_array(i).tolist() for i in inits if i.name not in ('W', 'B')]
            print(f"m{case} refused by both runtimes, RUN by ours: {described} {str(params)[:300]}")
        continue
    if run.returncode:
        tally["our error"] += 1
        print(f"m{case} ERROR {described}: {run.stderr.strip()[-200:]}")
        continue
    got = [[np.load(f"{work}/o{case}/{o}/{i}.npy") for i in range(len(os.listdir(f"{work}/o{case}/{o}")))]
           if os.path.isdir(f"{work}/o{case}/{o}") else np.load(f"{work}/o{case}/{o}.npy") for o in outs]

    def same(a, b):
        if isinstance(a, list) or isinstance(b, list):  # sequences
            return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind in "UO" or b.dtype.kind in "UO":
            return a.shape == b.shape and a.dtype.kind in "UO" and b.dtype.kind in "UO" and a.astype(str).tolist() == b.astype(str).tolist()
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind != "f":
            return np.array_equal(a, b)
        tol = 1e-3 if a.dtype == np.float16 else 1e-4  # onnxruntime's tests: 1e-3 for float16
        return np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol / 10, equal_nan=True)

    params = [numpy_helper.to_array(i).tolist() for i in inits if i.name not in ('W', 'B')]
    if ort_refused:
        agree = all(same(g, w) for g, w in zip(got, want))
        tally["reference only, ok" if agree else "reference only, mismatch"] += 1
        if not agree:
            print(f"m{case} MISMATCH with the ONNX reference (onnxruntime refuses it): {described} {str(params)[:300]}")
        continue
    if all(same(g, w) for g, w in zip(got, want)):
        tally["ok"] += 1
        continue
    try:
        with np.errstate(all="ignore"):
            ref = ReferenceEvaluator(m).run(None, feeds)
        as_ref = all(same(g, r) for g, r in zip(got, ref))
    except Exception as e:
        as_ref = False
    tally["as the reference" if as_ref else "mismatch"] += 1
    print(f"m{case} {'differs from onnxruntime, as the ONNX reference' if as_ref else 'MISMATCH'}: "
          f"{described} {str(params)[:300]}")
print(", ".join(f"{v} {k}" for k, v in tally.items()), f"(seed {seed}, models in {work})")
if refused:
    print("refused by onnxruntime:", ", ".join(f"{k} {v}" for k, v in sorted(refused.items())))
