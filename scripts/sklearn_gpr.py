#!/usr/bin/env python3
"""Exports a scikit-learn Gaussian-process regressor (RBF kernel) to ONNX with skl2onnx, in
f32 and f64, with query inputs and onnxruntime's outputs, for tests/sklearn_gpr.rs.

skl2onnx computes the kernel's pairwise distances with a Scan whose body is Sub,
ReduceSumSquare and Identity; the rest of the graph is Transpose, Div, Mul, Neg, Exp,
MatMul, Add and Reshape.

usage: scripts/sklearn_gpr.py OUT_DIR   (needs numpy, scikit-learn, skl2onnx, onnxruntime)
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF
from skl2onnx import to_onnx


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(0)
    x_train = rng.rand(40, 5)
    y_train = np.sin(3 * x_train).sum(1) + 0.1 * rng.randn(40)
    model = GaussianProcessRegressor(kernel=RBF(0.5), alpha=1e-2).fit(x_train, y_train)
    x = rng.rand(64, 5)
    manifest = []
    for name, dtype in [("f32", np.float32), ("f64", np.float64)]:
        onx = to_onnx(model, x[:1].astype(dtype), target_opset=17)
        path = os.path.join(out, f"gpr_{name}.onnx")
        with open(path, "wb") as f:
            f.write(onx.SerializeToString())
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x.astype(dtype)}
        expected = session.run(None, feed)
        np.save(os.path.join(out, f"x_{name}.npy"), x.astype(dtype))
        outputs = []
        for meta, value in zip(session.get_outputs(), expected):
            file = f"expected_{name}_{meta.name}.npy"
            np.save(os.path.join(out, file), value)
            outputs.append({"name": meta.name, "file": file})
        ops = sorted({n.op_type for n in onx.graph.node})
        manifest.append(
            {
                "model": os.path.basename(path),
                "input": session.get_inputs()[0].name,
                "input_file": f"x_{name}.npy",
                "outputs": outputs,
                "dtype": name,
                "ops": ops,
            }
        )
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"exported {len(manifest)} models to {out}")


if __name__ == "__main__":
    main()
