#!/usr/bin/env python3
"""A sweep of skl2onnx's converters: every scikit-learn estimator that fits with its defaults
on iris (classifiers and clusterers on the labels, regressors predicting the 4th feature from
the others, transformers on the features) is exported at opset 18 (ai.onnx.ml 3), run through
`wgpu-ops run` on 7 rows, and compared with onnxruntime (1e-3 relative, 1e-4 absolute).
Prints one line per estimator: ok, MISMATCH (outputs), RUN FAIL (our error), ORT FAIL
(onnxruntime's error), or why there is no model. Not part of the tests (it takes minutes and
depends on the installed versions); `docs/onnx.md` records its last result.

usage: scripts/sklearn_sweep.py WGPU_OPS_BINARY [WORK_DIR]
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn import datasets
from sklearn.utils import all_estimators

warnings.filterwarnings("ignore")
binary = os.path.abspath(sys.argv[1])
work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
os.makedirs(work, exist_ok=True)
X, y = datasets.load_iris(return_X_y=True)
X = X.astype(np.float32)
# Meta-estimators need other estimators to be built.
meta = {
    "ClassifierChain", "MultiOutputClassifier", "MultiOutputRegressor", "OneVsOneClassifier",
    "OneVsRestClassifier", "OutputCodeClassifier", "RegressorChain", "StackingClassifier",
    "StackingRegressor", "VotingClassifier", "VotingRegressor", "SelfTrainingClassifier",
    "ColumnTransformer", "FeatureUnion", "Pipeline", "SparseCoder", "GridSearchCV",
    "RandomizedSearchCV", "HalvingGridSearchCV", "HalvingRandomSearchCV", "RFE", "RFECV",
    "SequentialFeatureSelector", "SelectFromModel", "TransformedTargetRegressor",
    "FixedThresholdClassifier", "TunedThresholdClassifierCV", "FrozenEstimator",
    "CalibratedClassifierCV",
}
results = {}
for kind in ["classifier", "regressor", "transformer", "cluster"]:
    for name, cls in all_estimators(type_filter=kind):
        if name in meta or name in results:
            continue
        try:
            model = cls()
            if kind == "regressor":
                x = X[:, :3]
                model.fit(x, X[:, 3])
            else:
                x = X
                try:
                    model.fit(X, y)
                except Exception:
                    model.fit(X)
        except Exception:
            continue
        options = {id(model): {"zipmap": False}} if kind == "classifier" else None
        try:
            onx = to_onnx(model, x[:1], options=options, target_opset={"": 18, "ai.onnx.ml": 3})
        except Exception as e:
            results[name] = "no model: " + str(e).split("\n")[0][:80]
            continue
        path = os.path.join(work, f"{name}.onnx")
        with open(path, "wb") as f:
            f.write(onx.SerializeToString())
        np.save(os.path.join(work, "x.npy"), x[:7])
        input_name = onx.graph.input[0].name
        out = os.path.join(work, "out_" + name)
        run = subprocess.run(
            [binary, "run", path, "--input", f"{input_name}={work}/x.npy", "--out", out],
            capture_output=True, text=True,
        )
        if run.returncode != 0:
            results[name] = "RUN FAIL " + (run.stderr.strip().splitlines() or ["?"])[-1][:200]
            continue
        try:
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            expected = session.run(None, {input_name: x[:7]})
        except Exception as e:
            results[name] = "ORT FAIL " + str(e).split("\n")[0][:100]
            continue
        bad = []
        for meta_out, want in zip(session.get_outputs(), expected):
            file = os.path.join(out, f"{meta_out.name}.npy")
            if not os.path.exists(file):
                bad.append(meta_out.name + " (missing)")
                continue
            got, want = np.load(file), np.asarray(want)
            same = got.shape == want.shape and np.allclose(
                got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-4
            )
            if not same:
                bad.append(meta_out.name)
        results[name] = "MISMATCH " + ", ".join(bad) if bad else "ok"
for name, result in sorted(results.items(), key=lambda kv: (kv[1] != "ok", kv[1], kv[0])):
    print(f"{name:40s} {result}")
exported = [r for r in results.values() if not r.startswith("no model")]
print(f"{sum(r == 'ok' for r in exported)} of {len(exported)} exported models ran and matched")
