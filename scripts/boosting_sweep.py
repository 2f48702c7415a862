#!/usr/bin/env python3
"""A sweep of gradient-boosting models from the libraries outside scikit-learn: LightGBM and
XGBoost models exported by onnxmltools, CatBoost models exported by CatBoost itself. Each is
fitted on a small synthetic problem (with missing values where the library takes them), run
through `wgpu-ops run` on 64 rows, and compared with onnxruntime (1e-3 relative, 1e-4
absolute; labels exactly) and with the library's own predictions (the same tolerance, as a
check of the exporter, not of us).

Prints one line per model: ok, MISMATCH (outputs), RUN FAIL (our error), ORT FAIL
(onnxruntime's error), or why there is no model. Not part of the tests (it needs the three
libraries and onnxmltools); `docs/onnx.md` records its last result.

With `--fixtures DIR` it also writes a few of the models (those in FIXTURES), their inputs
and onnxruntime's outputs into DIR for tests/boosting_models.rs (which needs none of the
libraries); a ZipMap's maps are written as a [rows, classes] matrix and the keys.

usage: scripts/boosting_sweep.py [--fixtures DIR] WGPU_OPS_BINARY [WORK_DIR]
"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnxruntime as ort

warnings.filterwarnings("ignore")
args = sys.argv[1:]
fixtures = None
if args[:1] == ["--fixtures"]:
    fixtures, args = args[1], args[2:]
binary = os.path.abspath(args[0])
work = args[1] if len(args) > 1 else tempfile.mkdtemp()
os.makedirs(work, exist_ok=True)
if fixtures:
    os.makedirs(fixtures, exist_ok=True)
rng = np.random.default_rng(7)
ROWS, FEATURES = 400, 6


def problem(kind, classes=2, missing=False, positive=False):
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    score = x[:, 0] * 1.5 - x[:, 1] + 0.5 * x[:, 2] * x[:, 3] + 0.2 * rng.normal(size=ROWS)
    if kind == "regression":
        y = np.exp(score / 2) if positive else score
    else:
        edges = np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1])
        y = np.searchsorted(edges, score)
    if missing:
        x[rng.random(x.shape) < 0.1] = np.nan
    return x, y


def models():
    """(name, fitted model or None, x, exporter) for every case; exporter returns ONNX."""
    cases = []
    try:
        import lightgbm as lgb
        from onnxmltools import convert_lightgbm
        from onnxmltools.convert.common.data_types import FloatTensorType

        def lgb_export(model):
            return convert_lightgbm(model, initial_types=[("x", FloatTensorType([None, FEATURES]))],
                                    target_opset=15, zipmap=False)

        lgb_base = dict(n_estimators=30, num_leaves=15, verbose=-1, random_state=0)
        for objective in ["regression", "regression_l1", "huber", "poisson", "gamma", "tweedie",
                          "quantile"]:
            positive = objective in ("poisson", "gamma", "tweedie")
            x, y = problem("regression", positive=positive, missing=True)
            cases.append((f"lgb_reg_{objective}", lambda x=x, y=y, o=objective:
                          lgb.LGBMRegressor(objective=o, **lgb_base).fit(x, y), x, lgb_export))
        for classes, missing in [(2, False), (2, True), (3, False), (4, True)]:
            x, y = problem("classification", classes, missing)
            cases.append((f"lgb_clf_{classes}{'_nan' if missing else ''}", lambda x=x, y=y:
                          lgb.LGBMClassifier(**lgb_base).fit(x, y), x, lgb_export))
        x, y = problem("classification", 3)
        cases.append(("lgb_clf_3_dart", lambda x=x, y=y:
                      lgb.LGBMClassifier(boosting_type="dart", **lgb_base).fit(x, y), x, lgb_export))
        cases.append(("lgb_clf_3_rf", lambda x=x, y=y:
                      lgb.LGBMClassifier(boosting_type="rf", bagging_freq=1, bagging_fraction=0.7,
                                         **lgb_base).fit(x, y), x, lgb_export))
        x, y = problem("classification", 2)
        cases.append(("lgb_clf_2_ova", lambda x=x, y=y:
                      lgb.LGBMClassifier(objective="multiclassova", num_class=2, **lgb_base).fit(x, y),
                      x, lgb_export))
        # Categorical splits: two columns of small integer codes.
        x, y = problem("classification", 2)
        x[:, 4] = rng.integers(0, 8, ROWS)
        x[:, 5] = rng.integers(0, 30, ROWS)
        y = ((x[:, 4] % 3 == 0) ^ (x[:, 0] > 0)).astype(np.int64)
        cases.append(("lgb_clf_categorical", lambda x=x, y=y:
                      lgb.LGBMClassifier(min_data_per_group=5, cat_smooth=1, **lgb_base)
                      .fit(x, y, categorical_feature=[4, 5]), x, lgb_export))
        x, y = problem("regression", missing=True)
        cases.append(("lgb_reg_deep_many", lambda x=x, y=y:
                      lgb.LGBMRegressor(n_estimators=300, num_leaves=63, min_child_samples=2,
                                        verbose=-1).fit(x, y), x, lgb_export))
        cases.append(("lgb_reg_split", lambda x=x, y=y:
                      lgb.LGBMRegressor(n_estimators=120, num_leaves=7, verbose=-1).fit(x, y), x,
                      lambda m: convert_lightgbm(m, initial_types=[("x", FloatTensorType([None, FEATURES]))],
                                                 target_opset=15, split=40)))
        x, y = problem("regression")
        x[rng.random(x.shape) < 0.2] = 0
        cases.append(("lgb_reg_zero_as_missing", lambda x=x, y=y:
                      lgb.LGBMRegressor(zero_as_missing=True, **lgb_base).fit(x, y), x, lgb_export))
        x, y = problem("regression")
        groups = [20] * (ROWS // 20)
        cases.append(("lgb_ranker", lambda x=x, y=y:
                      lgb.LGBMRanker(**lgb_base).fit(x, np.digitize(y, [-1, 0, 1]), group=groups),
                      x, lgb_export))
    except ImportError as e:
        print("no LightGBM:", e)
    try:
        import xgboost as xgb
        from onnxmltools import convert_xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType

        def xgb_export(model):
            return convert_xgboost(model, initial_types=[("x", FloatTensorType([None, FEATURES]))],
                                   target_opset=15)

        xgb_base = dict(n_estimators=30, max_depth=4, random_state=0)
        for objective in ["reg:squarederror", "reg:absoluteerror", "reg:pseudohubererror",
                          "count:poisson", "reg:gamma", "reg:tweedie", "reg:logistic"]:
            positive = objective in ("count:poisson", "reg:gamma", "reg:tweedie")
            x, y = problem("regression", positive=positive, missing=True)
            if objective == "reg:logistic":
                y = 1 / (1 + np.exp(-y))
            cases.append((f"xgb_reg_{objective.split(':')[1]}", lambda x=x, y=y, o=objective:
                          xgb.XGBRegressor(objective=o, **xgb_base).fit(x, y), x, xgb_export))
        for classes, missing in [(2, False), (2, True), (3, False), (5, True)]:
            x, y = problem("classification", classes, missing)
            cases.append((f"xgb_clf_{classes}{'_nan' if missing else ''}", lambda x=x, y=y:
                          xgb.XGBClassifier(**xgb_base).fit(x, y), x, xgb_export))
        x, y = problem("classification", 2)
        cases.append(("xgb_clf_2_logitraw", lambda x=x, y=y:
                      xgb.XGBClassifier(objective="binary:logitraw", **xgb_base).fit(x, y), x, xgb_export))
        x, y = problem("classification", 3)
        cases.append(("xgb_clf_3_softmax", lambda x=x, y=y:
                      xgb.XGBClassifier(objective="multi:softmax", **xgb_base).fit(x, y), x, xgb_export))
        cases.append(("xgb_clf_3_dart", lambda x=x, y=y:
                      xgb.XGBClassifier(booster="dart", **xgb_base).fit(x, y), x, xgb_export))
        x, y = problem("regression", missing=True)
        cases.append(("xgb_reg_deep_many", lambda x=x, y=y:
                      xgb.XGBRegressor(n_estimators=300, max_depth=8, **{"random_state": 0})
                      .fit(x, y), x, xgb_export))
        x, y = problem("regression")
        cases.append(("xgb_rf_reg", lambda x=x, y=y:
                      xgb.XGBRFRegressor(n_estimators=20, max_depth=5, random_state=0).fit(x, y),
                      x, xgb_export))
        x, y = problem("regression", missing=True)
        y2 = np.stack([y, np.sin(y)], 1)
        cases.append(("xgb_reg_two_targets", lambda x=x, y=y2:
                      xgb.XGBRegressor(**xgb_base).fit(x, y), x, xgb_export))
        x, y = problem("classification", 2)
        cases.append(("xgb_clf_2_base_score", lambda x=x, y=y:
                      xgb.XGBClassifier(base_score=0.3, **xgb_base).fit(x, y), x, xgb_export))
        x, y = problem("regression")
        cases.append(("xgb_ranker", lambda x=x, y=y:
                      xgb.XGBRanker(**xgb_base).fit(x, np.digitize(y, [-1, 0, 1]),
                                                    qid=np.repeat(np.arange(ROWS // 20), 20)),
                      x, xgb_export))
    except ImportError as e:
        print("no XGBoost:", e)
    try:
        import catboost as cb

        def cb_export(model):
            import onnx

            path = os.path.join(work, "catboost.onnx")
            model.save_model(path, format="onnx")
            return onnx.load(path)

        cb_base = dict(iterations=30, depth=4, verbose=False, random_seed=0, allow_writing_files=False)
        for loss in ["RMSE", "MAE", "Poisson", "Quantile"]:
            x, y = problem("regression", positive=loss == "Poisson", missing=True)
            cases.append((f"cb_reg_{loss.lower()}", lambda x=x, y=y, l=loss:
                          cb.CatBoostRegressor(loss_function=l, **cb_base).fit(x, y), x, cb_export))
        for classes, missing in [(2, False), (2, True), (3, True)]:
            x, y = problem("classification", classes, missing)
            cases.append((f"cb_clf_{classes}{'_nan' if missing else ''}", lambda x=x, y=y:
                          cb.CatBoostClassifier(**cb_base).fit(x, y), x, cb_export))
    except ImportError as e:
        print("no CatBoost:", e)
    return cases


def as_array(value):
    """A ZipMap's list of {class: probability} maps as a [rows, classes] array."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        keys = sorted(value[0], key=lambda k: (str(type(k)), int(k) if str(k).lstrip("-").isdigit() else k))
        return np.array([[row[k] for k in keys] for row in value], dtype=np.float32)
    return np.asarray(value)


def compare(got, want):
    """'' when got matches want, else why not."""
    got, want = as_array(got), as_array(want)
    if got.shape != want.shape:
        if got.size == want.size:
            got = got.reshape(want.shape)
        else:
            return f"shape {list(got.shape)}, not {list(want.shape)}"
    if want.dtype.kind in "iub" or got.dtype.kind in "iub":
        diff = int((got.astype(np.int64) != want.astype(np.int64)).sum())
        return f"{diff} of {want.size} labels differ" if diff else ""
    g, w = got.astype(np.float64), want.astype(np.float64)
    if np.allclose(g, w, rtol=1e-3, atol=1e-4, equal_nan=True):
        equal[0] += int(((g == w) | (np.isnan(g) & np.isnan(w))).sum())
        equal[1] += g.size
        return ""
    worst = np.nanmax(np.abs(g - w) / np.maximum(np.abs(w), 0.1))
    bad = int((~np.isclose(g, w, rtol=1e-3, atol=1e-4, equal_nan=True)).sum())
    return f"{bad} of {want.size} values off (worst relative {worst:.2e})"


# Models kept as test fixtures: each library's classifiers and regressors, NaN features,
# categorical splits, an ensemble split in parts summed in f64, a target without weights.
FIXTURES = ["lgb_clf_4_nan", "lgb_clf_categorical", "lgb_reg_poisson", "lgb_reg_split",
            "xgb_clf_2_nan", "xgb_clf_5_nan", "xgb_reg_gamma", "xgb_reg_two_targets",
            "cb_clf_3_nan", "cb_reg_rmse"]
manifest = []


def keep(name, path, input_name, rows, session, expected):
    """Copies a model, its input and onnxruntime's outputs into the fixtures."""
    import shutil

    shutil.copy(path, os.path.join(fixtures, f"{name}.onnx"))
    np.save(os.path.join(fixtures, f"{name}.in.npy"), rows)
    outputs = []
    for i, (meta_out, want) in enumerate(zip(session.get_outputs(), expected)):
        entry = {"name": meta_out.name, "file": f"{name}.out{i}.npy"}
        if isinstance(want, list):
            entry["keys"] = [int(k) for k in sorted(want[0])]
            want = as_array(want)
        np.save(os.path.join(fixtures, entry["file"]), np.asarray(want))
        outputs.append(entry)
    manifest.append({"name": name, "input": input_name, "file": f"{name}.in.npy",
                     "outputs": outputs})


results = {}
equal = [0, 0]  # float values bit-equal to onnxruntime's, of all compared
for name, fit, x, export in models():
    try:
        model = fit()
        onx = export(model)
    except Exception as e:
        results[name] = "no model: " + str(e).split("\n")[0][:100]
        continue
    path = os.path.join(work, f"{name}.onnx")
    with open(path, "wb") as f:
        f.write(onx.SerializeToString())
    rows = x[-64:]
    np.save(os.path.join(work, f"x_{name}.npy"), rows)
    input_name = onx.graph.input[0].name
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        expected = session.run(None, {input_name: rows})
    except Exception as e:
        results[name] = "ORT FAIL " + str(e).split("\n")[0][:100]
        continue
    # The exporter's own check: onnxruntime against the library (the label, or the
    # probabilities when there are any, else the prediction).
    own = model.predict_proba(rows) if hasattr(model, "predict_proba") else model.predict(rows)
    exporter = ""
    for want in map(as_array, expected):
        if want.dtype.kind == "f" and want.size == np.asarray(own).size:
            exporter = compare(want, own)
            break
    out = os.path.join(work, "out_" + name)
    run = subprocess.run(
        [binary, "run", path, "--input", f"{input_name}={work}/x_{name}.npy", "--out", out],
        capture_output=True, text=True,
    )
    note = f" (exporter vs library: {exporter})" if exporter else ""
    if run.returncode != 0:
        results[name] = "RUN FAIL " + (run.stderr.strip().splitlines() or ["?"])[-1][:200] + note
        continue
    bad = []
    for meta_out, want in zip(session.get_outputs(), expected):
        file = os.path.join(out, f"{meta_out.name}.npy")
        if os.path.exists(file):
            got = np.load(file)
        elif os.path.exists(file[:-4] + ".json"):
            with open(file[:-4] + ".json") as f:
                got = json.load(f)
        else:
            bad.append(meta_out.name + " (missing)")
            continue
        why = compare(got, want)
        if why:
            bad.append(f"{meta_out.name}: {why}")
    results[name] = ("MISMATCH " + "; ".join(bad) if bad else "ok") + note
    if fixtures and name in FIXTURES:
        keep(name, path, input_name, rows, session, expected)
for name, result in sorted(results.items(), key=lambda kv: (not kv[1].startswith("ok"), kv[0])):
    print(f"{name:28s} {result}")
exported = [r for r in results.values() if not r.startswith("no model")]
print(f"{sum(r.startswith('ok') for r in exported)} of {len(exported)} exported models ran and matched")
print(f"{equal[0]} of {equal[1]} float outputs equal to onnxruntime's bit for bit")
if fixtures:
    with open(os.path.join(fixtures, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(manifest)} fixtures to {fixtures}")
