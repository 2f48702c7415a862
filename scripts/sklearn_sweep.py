#!/usr/bin/env python3
"""A sweep of skl2onnx's converters: every scikit-learn estimator that fits with its defaults
on iris (classifiers and clusterers on the labels, regressors predicting the 4th feature from
the others, transformers on the features) is exported at opset 18 (ai.onnx.ml 3), run through
`wgpu-ops run` on 7 rows, and compared with onnxruntime (1e-3 relative, 1e-4 absolute).
With `--i64` they are integers (iris's tenths, i64), as integer columns export (the tree
classifiers then compare them with f32 thresholds). With `--f64` the features are f64, so every converter that has a double graph writes one
(scikit-learn's Scans of pairwise distances among them), and f64 outputs must agree as
onnxruntime's own tests compare doubles (1e-5 relative, 1e-6 absolute; f32 ones, which
ONNX-ML's schemas give some ops, as above); the worst relative error of each model's f64
outputs is printed too.
Prints one line per estimator: ok, MISMATCH (outputs), RUN FAIL (our error), ORT FAIL
(onnxruntime's error), or why there is no model. Not part of the tests (it takes minutes and
depends on the installed versions); `docs/onnx.md` records its last result.

usage: scripts/sklearn_sweep.py [--f64 | --i64] WGPU_OPS_BINARY [WORK_DIR]
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
args = sys.argv[1:]
f64 = "--f64" in args
i64 = "--i64" in args
args = [a for a in args if a not in ("--f64", "--i64")]
binary = os.path.abspath(args[0])
work = args[1] if len(args) > 1 else tempfile.mkdtemp()
os.makedirs(work, exist_ok=True)
X, y = datasets.load_iris(return_X_y=True)
X = (X * 10).astype(np.int64) if i64 else X.astype(np.float64 if f64 else np.float32)
rtol, atol = (1e-5, 1e-6) if f64 else (1e-3, 1e-4)
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
        # onnxruntime first: a model it refuses (skl2onnx writes some f64 graphs whose types
        # do not check) is its converter's failure, whatever we say of it.
        try:
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            expected = session.run(None, {input_name: x[:7]})
        except Exception as e:
            results[name] = "ORT FAIL " + str(e).split("\n")[0][:100]
            continue
        run = subprocess.run(
            [binary, "run", path, "--input", f"{input_name}={work}/x.npy", "--out", out],
            capture_output=True, text=True,
        )
        if run.returncode != 0:
            results[name] = "RUN FAIL " + (run.stderr.strip().splitlines() or ["?"])[-1][:200]
            continue
        bad = []
        worst = 0.0
        for meta_out, want in zip(session.get_outputs(), expected):
            file = os.path.join(out, f"{meta_out.name}.npy")
            if not os.path.exists(file):
                bad.append(meta_out.name + " (missing)")
                continue
            got, want = np.load(file), np.asarray(want)
            if got.dtype != want.dtype or got.shape != want.shape:
                bad.append(f"{meta_out.name} ({got.dtype}{list(got.shape)}, "
                           f"not {want.dtype}{list(want.shape)})")
                continue
            # f32 outputs of an f64 model (ONNX-ML ops whose outputs are f32 by their
            # schema, such as SVMClassifier's) keep f32's tolerance.
            r, a = (rtol, atol) if want.dtype == np.float64 else (1e-3, 1e-4)
            g, w = got.astype(np.float64), want.astype(np.float64)
            both_nan = np.isnan(g) & np.isnan(w)
            err = np.where(both_nan, 0, np.abs(g - w) / np.maximum(np.abs(w), a / r))
            if want.dtype == np.float64:
                worst = max(worst, float(np.nan_to_num(err, nan=np.inf).max(initial=0)))
            if not np.allclose(g, w, rtol=r, atol=a, equal_nan=True):
                bad.append(meta_out.name)
        tail = f" (worst {worst:.1e})" if f64 else ""
        results[name] = ("MISMATCH " + ", ".join(bad) if bad else "ok") + tail
for name, result in sorted(results.items(), key=lambda kv: (not kv[1].startswith("ok"), kv[1], kv[0])):
    print(f"{name:40s} {result}")
exported = [r for r in results.values() if not r.startswith("no model")]
print(f"{sum(r.startswith('ok') for r in exported)} of {len(exported)} exported models ran and matched")
