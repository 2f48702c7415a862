#!/usr/bin/env python3
"""A sweep of PyTorch's ONNX exporters: torchvision's classification, segmentation and video
models (random weights, seeded) and small modules built from torch.nn (attention blocks,
recurrent layers, normalizations, up-sampling, indexing), each exported with the dynamo
exporter (`dynamo=True`, the default) and with the TorchScript one (`dynamo=False`), run
through `wgpu-ops run` and compared with onnxruntime on the same inputs.

Outputs match when every element is within rtol 1e-3 and atol 1e-4 times the largest
magnitude of that output (random weights give logits of any scale; one tolerance for all);
f16 outputs within 2 units in the last place and 2^-10 times that magnitude.
Prints one line per model and exporter: ok, MISMATCH (outputs, worst error), RUN FAIL (our
error), ORT FAIL, or why there is no model. Not part of the tests: it needs torch and takes
many minutes on a CPU adapter. `docs/onnx.md` records its last result.

usage: scripts/torch_sweep.py WGPU_OPS_BINARY [WORK_DIR] [NAME_FILTER ...]
"""
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")


def image(n=1, c=3, h=224, w=224):
    return (torch.randn(n, c, h, w),)


def tokens(n=2, t=16, vocab=100):
    return (torch.randint(0, vocab, (n, t)),)


class GptBlock(nn.Module):
    """A decoder-only block: causal self-attention written out, pre-norm, GELU (tanh) MLP."""

    def __init__(self, d=64, heads=4, vocab=100, t=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, t, d) * 0.02)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.heads = heads

    def forward(self, ids):
        b, t = ids.shape
        x = self.embed(ids) + self.pos[:, :t]
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        x = x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))
        return self.head(x)


class SdpaBlock(nn.Module):
    """Attention through F.scaled_dot_product_attention (causal), RMSNorm and SiLU gating."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.gate = nn.Linear(d, 2 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, d)
        a, g = self.gate(x).chunk(2, dim=-1)
        return self.out(y) + a * F.silu(g)


class Recurrent(nn.Module):
    def __init__(self, kind, inputs=16, hidden=32):
        super().__init__()
        self.rnn = getattr(nn, kind)(inputs, hidden, num_layers=2, batch_first=True,
                                     bidirectional=True)

    def forward(self, x):
        return self.rnn(x)[0]


class UpDown(nn.Module):
    """Decoder-style image ops: transposed conv, bilinear and nearest up-sampling, pixel
    shuffle, group and instance norms, reflect padding."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.up = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.shuffle = nn.Conv2d(8, 12, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.gn(self.down(F.pad(x, (1, 1, 1, 1), mode="reflect"))))
        y = self.inorm(self.up(y))
        a = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        b = F.interpolate(y, scale_factor=2, mode="nearest")
        c = F.pixel_shuffle(self.shuffle(y), 2)
        return torch.cat([a, b, c], dim=1)


class Indexing(nn.Module):
    """Indexing and reductions exporters produce: gather, top-k, argmax, cumsum, where,
    scatter, sort, one-hot."""

    def forward(self, x, idx):
        g = torch.gather(x, 1, idx)
        top, where = x.topk(3, dim=-1)
        s = torch.cumsum(x, dim=-1)
        m = torch.where(x > 0, x, 0.1 * x)
        z = torch.zeros_like(x).scatter(1, idx, g)
        srt = torch.sort(x, dim=-1, descending=True).values
        hot = F.one_hot(x.argmax(-1), x.shape[-1]).float()
        return g, top, where, s, m, z, srt, hot


class Conv1dStack(nn.Module):
    """Audio-style: strided and dilated Conv1d, BatchNorm1d, causal padding, GLU, mean pool."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(4, 32, 5, stride=2)
        self.bn = nn.BatchNorm1d(32)
        self.b = nn.Conv1d(32, 64, 3, dilation=2)
        self.c = nn.Conv1d(32, 8, 1)

    def forward(self, x):
        y = F.relu(self.bn(self.a(x)))
        y = F.glu(self.b(F.pad(y, (4, 0))), dim=1)
        return self.c(y).mean(-1)


class ScanCell(nn.Module):
    """A recurrence through torch's `scan` higher-order op, which the dynamo exporter writes
    as an ONNX Scan: a tanh cell over the time axis, with each step's state doubled as the
    scan output."""

    def __init__(self, inputs=8, hidden=16):
        super().__init__()
        self.w = nn.Linear(inputs, hidden)
        self.u = nn.Linear(hidden, hidden, bias=False)
        self.hidden = hidden

    def forward(self, x):
        from torch._higher_order_ops.scan import scan

        def step(h, xt):
            h = torch.tanh(self.w(xt) + self.u(h))
            return h, h * 2

        return scan(step, torch.zeros(x.shape[1], self.hidden), x)


class GatedDeltaRule(nn.Module):
    """The gated delta rule of linear attention as a torch `scan` over time-major [T, B, H, d]
    inputs: per-head log decay `g` and write strength `beta` ([T, B, H]), the state [B, H,
    dk, dv]. `matmul`: the state read and written with matrix products (as linear-attention
    libraries' naive references write it), else with broadcast products and sums."""

    def __init__(self, matmul=True):
        super().__init__()
        self.matmul = matmul

    def forward(self, q, k, v, g, beta, s0):
        from torch._higher_order_ops.scan import scan

        def step(S, xs):
            q_t, k_t, v_t, g_t, b_t = xs
            S = S * g_t.exp()[..., None, None]
            if self.matmul:
                kv = (k_t.unsqueeze(-2) @ S).squeeze(-2)
            else:
                kv = (S * k_t[..., None]).sum(-2)
            delta = (v_t - kv) * b_t[..., None]
            if self.matmul:
                S = S + k_t.unsqueeze(-1) @ delta.unsqueeze(-2)
                o = (q_t.unsqueeze(-2) @ S).squeeze(-2)
            else:
                S = S + k_t[..., None] * delta[..., None, :]
                o = (S * q_t[..., None]).sum(-2)
            return S, o

        S, o = scan(step, s0, (q, k, v, g, beta))
        return o, S


def gated_delta_inputs(t, b, h, dk, dv):
    return (torch.randn(t, b, h, dk) / dk ** 0.5,
            F.normalize(torch.randn(t, b, h, dk), dim=-1),
            torch.randn(t, b, h, dv), -torch.rand(t, b, h) * 0.1, torch.rand(t, b, h),
            torch.randn(b, h, dk, dv) * 0.1)


class Branch(nn.Module):
    """`torch.cond` (an ONNX If) on a value computed from the input."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x.exp() - 1, (x,))


class WhileLoop(nn.Module):
    """`while_loop` (an ONNX Loop) carrying a counter and a tensor."""

    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop

        return while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 1.5 + 1),
                          (torch.tensor(0), x))[1]


class DataDependent(nn.Module):
    """Outputs whose shapes depend on the values: NonZero, a boolean mask's GatherND, Unique."""

    def forward(self, x):
        return torch.nonzero(x > 0), x[x > 0.5], torch.unique(torch.round(x))


class HalfBlock(nn.Module):
    """Linear, LayerNorm and GELU, meant to be converted to f16 (`.half()`)."""

    def __init__(self, d=16):
        super().__init__()
        self.linear = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return F.gelu(self.norm(self.linear(x)))


def torchvision_models():
    import torchvision.models as tvm
    import torchvision.models.segmentation as seg
    import torchvision.models.video as video

    cases = []
    for name in ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                 "squeezenet1_0", "shufflenet_v2_x0_5", "mnasnet0_5", "regnet_y_400mf",
                 "densenet121", "convnext_tiny", "alexnet", "vit_b_16", "swin_t"]:
        cases.append((name, lambda name=name: getattr(tvm, name)(weights=None), image()))
    cases.append(("googlenet", lambda: tvm.googlenet(weights=None, aux_logits=False,
                                                     init_weights=True), image()))
    cases.append(("inception_v3", lambda: tvm.inception_v3(weights=None, aux_logits=False,
                                                           init_weights=True),
                  image(h=299, w=299)))
    cases.append(("lraspp_mobilenet_v3_large",
                  lambda: seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None),
                  image(h=256, w=256)))
    cases.append(("deeplabv3_mobilenet_v3_large",
                  lambda: seg.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                           aux_loss=False),
                  image(h=256, w=256)))
    cases.append(("r3d_18", lambda: video.r3d_18(weights=None),
                  (torch.randn(1, 3, 8, 112, 112),)))
    return cases


def module_cases():
    return [
        ("gpt_block", GptBlock, tokens()),
        ("sdpa_block", SdpaBlock, (torch.randn(2, 16, 64),)),
        ("transformer_encoder", lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2),
         (torch.randn(2, 16, 64),)),
        ("transformer_decoder_layer", lambda: nn.TransformerDecoderLayer(
            64, 4, 128, dropout=0.0, batch_first=True, norm_first=True),
         (torch.randn(2, 10, 64), torch.randn(2, 16, 64))),
        ("lstm", lambda: Recurrent("LSTM"), (torch.randn(2, 12, 16),)),
        ("gru", lambda: Recurrent("GRU"), (torch.randn(2, 12, 16),)),
        ("rnn", lambda: Recurrent("RNN"), (torch.randn(2, 12, 16),)),
        ("up_down", UpDown, image(h=32, w=32)),
        ("indexing", Indexing, (torch.randn(4, 10), torch.randint(0, 10, (4, 3)))),
        ("conv1d_stack", Conv1dStack, (torch.randn(2, 4, 100),)),
        ("scan_cell", ScanCell, (torch.randn(10, 3, 8),)),
        ("cond", Branch, (torch.randn(4, 5),)),
        ("while_loop", WhileLoop, (torch.randn(4, 5),)),
        ("data_dependent", DataDependent, (torch.randn(6, 5),)),
        ("half_block", lambda: HalfBlock().half(), (torch.randn(3, 16).half(),)),
        ("gated_delta_matmul", GatedDeltaRule, gated_delta_inputs(64, 1, 4, 32, 32)),
        ("gated_delta_sums", lambda: GatedDeltaRule(matmul=False),
         gated_delta_inputs(64, 1, 4, 32, 32)),
    ]


# Exported with dynamic axes (batch and sequence, or image size) and run on other sizes than
# the export's: the graphs then compute shapes (Shape, Gather, Concat, Reshape, Range, ...).
# Each: name, model, export inputs, dynamic axes per input, run inputs.
def dynamic_cases():
    return [
        ("gpt_block_dyn", GptBlock, tokens(), [{0: "batch", 1: "seq"}], tokens(n=3, t=11)),
        ("sdpa_block_dyn", SdpaBlock, (torch.randn(2, 16, 64),), [{0: "batch", 1: "seq"}],
         (torch.randn(1, 9, 64),)),
        ("transformer_encoder_dyn", lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2),
         (torch.randn(2, 16, 64),), [{0: "batch", 1: "seq"}], (torch.randn(3, 7, 64),)),
        ("lstm_dyn", lambda: Recurrent("LSTM"), (torch.randn(2, 12, 16),),
         [{0: "batch", 1: "seq"}], (torch.randn(5, 30, 16),)),
        ("gru_dyn", lambda: Recurrent("GRU"), (torch.randn(2, 12, 16),),
         [{0: "batch", 1: "seq"}], (torch.randn(1, 4, 16),)),
        ("up_down_dyn", UpDown, image(h=32, w=32), [{0: "batch", 2: "h", 3: "w"}],
         image(n=2, h=24, w=40)),
        ("conv1d_stack_dyn", Conv1dStack, (torch.randn(2, 4, 100),),
         [{0: "batch", 2: "time"}], (torch.randn(3, 4, 77),)),
        ("scan_cell_dyn", ScanCell, (torch.randn(10, 3, 8),), [{0: "time", 1: "batch"}],
         (torch.randn(37, 5, 8),)),
        ("resnet18_dyn", lambda: __import__("torchvision").models.resnet18(weights=None),
         image(), [{0: "batch", 2: "h", 3: "w"}], image(n=2, h=160, w=128)),
    ]


def export(model, args, path, dynamo, dynamic=None):
    if os.path.exists(path):
        os.remove(path)
    data = path + ".data"
    if os.path.exists(data):
        os.remove(data)
    kwargs = {"dynamo": dynamo, "verbose": False}
    if not dynamo:
        kwargs["opset_version"] = 17
    if dynamic:
        names = [f"input_{j}" for j in range(len(args))]
        kwargs["input_names"] = names
        if dynamo:
            kwargs["dynamic_shapes"] = tuple(
                {axis: torch.export.Dim.DYNAMIC for axis in axes} for axes in dynamic)
        else:
            kwargs["dynamic_axes"] = dict(zip(names, dynamic))
    torch.onnx.export(model, args, path, **kwargs)
    # One file, so the command and onnxruntime read the same bytes; without the exporter's
    # notes of where in the Python source each node came from (they change with the source).
    proto = onnx.load(path)

    def strip(graph):
        for node in graph.node:
            del node.metadata_props[:]
            node.doc_string = ""
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    strip(attr.g)
    strip(proto.graph)
    del proto.metadata_props[:]
    onnx.save(proto, path, save_as_external_data=False)
    if os.path.exists(data):
        os.remove(data)
    return proto


def compare(binary, work, name, path, proto, args):
    graph_inputs = [i.name for i in proto.graph.input
                    if i.name not in {t.name for t in proto.graph.initializer}]
    feeds = {}
    command = [binary, "run", path, "--out", os.path.join(work, "out_" + name)]
    for input_name, value in zip(graph_inputs, args):
        array = value.numpy()
        feeds[input_name] = array
        file = os.path.join(work, f"{name}.{len(feeds)}.npy")
        np.save(file, array)
        command += ["--input", f"{input_name}={file}"]
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        t = time.perf_counter()
        expected = session.run(None, feeds)
        ort_s = time.perf_counter() - t
    except Exception as e:
        return "ORT FAIL " + str(e).split("\n")[0][:120]
    t = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True)
    ours_s = time.perf_counter() - t
    if run.returncode != 0:
        return "RUN FAIL " + (run.stderr.strip().splitlines() or ["?"])[-1][:300]
    bad = []
    for meta, want in zip(session.get_outputs(), expected):
        file = os.path.join(work, "out_" + name, f"{meta.name}.npy")
        if not os.path.exists(file):
            bad.append(meta.name + " (missing)")
            continue
        got, want = np.load(file), np.asarray(want)
        if got.shape != want.shape:
            bad.append(f"{meta.name} (shape {got.shape} against {want.shape})")
            continue
        # f16 results: 2 units in the last place, and one unit at the output's scale.
        rtol, atol = (2.0 ** -9, 2.0 ** -10) if want.dtype == np.float16 else (1e-3, 1e-4)
        got, want = got.astype(np.float64), want.astype(np.float64)
        scale = max(1.0, float(np.nanmax(np.abs(want))) if want.size else 1.0)
        err = np.abs(got - want) - rtol * np.abs(want)
        if want.size and not (np.nanmax(err) <= atol * scale
                              and np.array_equal(np.isnan(got), np.isnan(want))):
            bad.append(f"{meta.name} (worst {float(np.nanmax(np.abs(got - want))):.3g},"
                       f" scale {scale:.3g})")
    timing = f"[{ours_s:.1f} s run, onnxruntime {ort_s * 1e3:.0f} ms]"
    return ("MISMATCH " + ", ".join(bad) if bad else "ok") + " " + timing


def main():
    binary = os.path.abspath(sys.argv[1])
    work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
    filters = sys.argv[3:]
    os.makedirs(work, exist_ok=True)
    results = {}
    cases = [(name, build, args, None, args)
             for name, build, args in torchvision_models() + module_cases()] + dynamic_cases()
    for name, build, args, dynamic, run_args in cases:
        if filters and not any(f in name for f in filters):
            continue
        torch.manual_seed(0)
        model = build().eval()
        for dynamo in [True, False]:
            key = f"{name} ({'dynamo' if dynamo else 'torchscript'})"
            path = os.path.join(work, f"{name}.{'dynamo' if dynamo else 'ts'}.onnx")
            try:
                with torch.no_grad():
                    proto = export(model, args, path, dynamo, dynamic)
            except Exception as e:
                results[key] = "no model: " + str(e).strip().split("\n")[0][:100]
                print(f"{key:48s} {results[key]}", flush=True)
                continue
            results[key] = compare(binary, work, name + ("_d" if dynamo else "_t"), path,
                                   proto, run_args)
            print(f"{key:48s} {results[key]}", flush=True)
    print()
    for key, result in sorted(results.items(), key=lambda kv: (not kv[1].startswith("ok"), kv[0])):
        print(f"{key:48s} {result}")
    exported = [r for r in results.values() if not r.startswith("no model")]
    print(f"{sum(r.startswith('ok') for r in exported)} of {len(exported)} exported models ran"
          " and matched")


if __name__ == "__main__":
    main()
