#!/usr/bin/env python3
"""Writes `tests/data/torch`: small models exported from PyTorch by both of its ONNX exporters
(the dynamo one and the TorchScript one), with inputs and onnxruntime's outputs, for
`tests/torch_models.rs`. The models are those of `scripts/torch_sweep.py` at small widths (so
the files stay small), exported with dynamic axes where the sweep has them and run on other
sizes than the export's. Needs torch, torchvision and onnxscript; the test itself needs only
the files. Run again after changing the cases; the outputs depend on torch's seeded weights.

usage: scripts/torch_fixtures.py [OUT_DIR]
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_sweep import (  # noqa: E402
    Branch, Conv1dStack, DataDependent, GatedDeltaRule, GptBlock, HalfBlock, Indexing,
    Recurrent, ScanCell, SdpaBlock, UpDown, WhileLoop, export, gated_delta_inputs, image,
    tokens,
)

out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "torch")
os.makedirs(out_dir, exist_ok=True)


def tiny_vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=10)


def tiny_mobilenet():
    import torchvision.models as tvm
    return tvm.mobilenet_v3_small(weights=None, width_mult=0.25, num_classes=10)


# The inputs below are drawn here, so seeded: the files stay the same from run to run.
torch.manual_seed(1234)
BS = [{0: "batch", 1: "seq"}]
# name, model, export inputs, dynamic axes (None: static), run inputs, exporters
CASES = [
    ("gpt_block", lambda: GptBlock(d=32, heads=4, vocab=50), tokens(vocab=50), BS,
     tokens(n=3, t=11, vocab=50), ["dynamo", "torchscript"]),
    ("sdpa_block", lambda: SdpaBlock(d=32), (torch.randn(2, 16, 32),), BS,
     (torch.randn(1, 9, 32),), ["dynamo"]),
    ("transformer_encoder", lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2),
     (torch.randn(2, 16, 32),), BS, (torch.randn(3, 7, 32),), ["dynamo"]),
    ("transformer_decoder_layer", lambda: nn.TransformerDecoderLayer(
        32, 4, 64, dropout=0.0, batch_first=True, norm_first=True),
     (torch.randn(2, 10, 32), torch.randn(2, 16, 32)), None, None, ["dynamo"]),
    ("lstm", lambda: Recurrent("LSTM", 8, 16), (torch.randn(2, 12, 8),), BS,
     (torch.randn(5, 30, 8),), ["dynamo", "torchscript"]),
    ("gru", lambda: Recurrent("GRU", 8, 16), (torch.randn(2, 12, 8),), BS,
     (torch.randn(1, 4, 8),), ["dynamo", "torchscript"]),
    ("rnn", lambda: Recurrent("RNN", 8, 16), (torch.randn(2, 12, 8),), None, None,
     ["dynamo", "torchscript"]),
    ("up_down", UpDown, image(h=32, w=32), [{0: "batch", 2: "h", 3: "w"}],
     image(n=1, h=12, w=20), ["dynamo", "torchscript"]),
    ("indexing", Indexing, (torch.randn(4, 10), torch.randint(0, 10, (4, 3))), None, None,
     ["dynamo", "torchscript"]),
    ("conv1d_stack", Conv1dStack, (torch.randn(2, 4, 100),), [{0: "batch", 2: "time"}],
     (torch.randn(3, 4, 77),), ["dynamo", "torchscript"]),
    ("mobilenet_v3_small", tiny_mobilenet, image(h=64, w=64), [{0: "batch", 2: "h", 3: "w"}],
     image(n=2, h=48, w=80), ["torchscript"]),
    ("vit", tiny_vit, image(h=32, w=32), None, image(n=1, h=32, w=32), ["dynamo"]),
    ("scan_cell", ScanCell, (torch.randn(10, 3, 8),), [{0: "time", 1: "batch"}],
     (torch.randn(37, 5, 8),), ["dynamo"]),
    ("cond", Branch, (torch.randn(4, 5),), None, None, ["dynamo"]),
    ("cond_else", Branch, (torch.randn(4, 5),), None, (-torch.rand(4, 5),), ["dynamo"]),
    ("while_loop", WhileLoop, (torch.randn(4, 5),), None, None, ["dynamo"]),
    ("data_dependent", DataDependent, (torch.randn(6, 5),), None, None,
     ["dynamo", "torchscript"]),
    ("half_block", lambda: HalfBlock().half(), (torch.randn(3, 16).half(),), None, None,
     ["dynamo", "torchscript"]),
    ("gated_delta_matmul", GatedDeltaRule, gated_delta_inputs(12, 2, 3, 8, 8), None, None,
     ["dynamo"]),
    ("gated_delta_sums", lambda: GatedDeltaRule(matmul=False),
     gated_delta_inputs(12, 2, 3, 8, 8), None, None, ["dynamo"]),
]

manifest = []
for name, build, args, dynamic, run_args, exporters in CASES:
    torch.manual_seed(0)
    model = build().eval()
    run_args = run_args or args
    for exporter in exporters:
        stem = f"{name}.{exporter}"
        path = os.path.join(out_dir, stem + ".onnx")
        with torch.no_grad():
            proto = export(model, args, path, exporter == "dynamo", dynamic)
        initializers = {t.name for t in proto.graph.initializer}
        inputs = [i.name for i in proto.graph.input if i.name not in initializers]
        feeds = {n: a.numpy() for n, a in zip(inputs, run_args)}
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outputs = session.run(None, feeds)
        entry = {"name": stem, "inputs": [], "outputs": [],
                 "ops": sorted({n.op_type for n in proto.graph.node}),
                 "symbolic": any(d.dim_param for i in proto.graph.input
                                 for d in i.type.tensor_type.shape.dim)}
        for j, (n, a) in enumerate(feeds.items()):
            file = f"{stem}.in{j}.npy"
            np.save(os.path.join(out_dir, file), a)
            entry["inputs"].append({"name": n, "file": file})
        for j, (meta, a) in enumerate(zip(session.get_outputs(), outputs)):
            file = f"{stem}.out{j}.npy"
            np.save(os.path.join(out_dir, file), np.asarray(a))
            entry["outputs"].append({"name": meta.name, "file": file})
        manifest.append(entry)
        print(stem, os.path.getsize(path), "bytes,", len(proto.graph.node), "nodes", flush=True)
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
print(f"torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}")
