#!/usr/bin/env python3
"""Exports scikit-learn models whose ONNX graphs (skl2onnx) hold a Scan, in f32 and f64, with
query inputs and onnxruntime's outputs, for tests/sklearn_models.rs:

- a Gaussian-process regressor (RBF kernel): the kernel's pairwise distances are a Scan whose
  body is Sub, ReduceSumSquare and Identity; the rest of the graph is Transpose, Div, Mul, Neg,
  Exp, MatMul, Add and Reshape;
- k-nearest-neighbour regressor and classifier (the classifier without ZipMap, which returns
  a list of maps): the same distance Scan, then Sqrt, TopK of the nearest, ONNX-ML's
  ArrayFeatureExtractor picking the neighbours' targets, and ReduceMean (regressor) or Equal,
  Cast, ReduceSum, Div and ArgMax (classifier: labels and probabilities).

and models without a Scan whose graphs use ONNX-ML's ops, in f32 (skl2onnx writes those ops
for f32 inputs only): a StandardScaler and LogisticRegression pipeline (Scaler,
LinearClassifier, Normalizer), LinearRegression (LinearRegressor), Normalizer, Binarizer,
SimpleImputer (Imputer), tree models (TreeEnsembleRegressor, TreeEnsembleClassifier):
decision trees, random forests and gradient boosting, binary and multi-class, and support
vector machines (SVMRegressor, SVMClassifier): SVR, SVC (RBF and polynomial kernels, binary
and multi-class, with and without probability estimates), LinearSVC and OneClassSVM; an
isolation forest (trees and LabelEncoder),
KBinsDiscretizer to one-hot columns, and OneHotEncoder and OrdinalEncoder of integer
categories (OneHotEncoder, LabelEncoder; i64 inputs) and of string categories (string inputs);
classifiers with string class labels (a string output), two classifiers exported with
ZipMap (probabilities as a list of maps, written as JSON), and the text vectorizers
CountVectorizer and TfidfVectorizer (StringNormalizer, onnxruntime's Tokenizer, TfIdfVectorizer),
and scalers, a normalizer and an imputer given their features as several inputs
(FeatureVectorizer).

usage: scripts/sklearn_models.py OUT_DIR   (needs numpy, scikit-learn, skl2onnx, onnxruntime)
"""
import json
import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from skl2onnx import to_onnx


def export(out, kind, name, model, x, options=None, scan=True, opset=17):
    """Writes model `kind` in dtype `name` with input x, and onnxruntime's outputs; returns
    its manifest entry."""
    dtype = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "str": str}[name]
    onx = to_onnx(model, x[:1].astype(dtype), target_opset={"": opset, "ai.onnx.ml": 3}, options=options)
    # onnxruntime's StringNormalizer needs the en_US.UTF-8 locale installed for its default
    # locale (this machine has none): the model says locale "" instead (Unicode case mapping
    # there as here).
    for n in onx.graph.node:
        if n.op_type == "StringNormalizer" and not any(a.name == "locale" for a in n.attribute):
            n.attribute.append(onnx.helper.make_attribute("locale", ""))
    path = os.path.join(out, f"{kind}_{name}.onnx")
    with open(path, "wb") as f:
        f.write(onx.SerializeToString())
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x.astype(dtype)}
    expected = session.run(None, feed)
    np.save(os.path.join(out, f"x_{kind}_{name}.npy"), x.astype(dtype))
    outputs = save_expected(out, f"{kind}_{name}", session, expected)
    ops = set()

    def walk(graph):
        for n in graph.node:
            ops.add(n.op_type)
            for a in n.attribute:
                if a.g is not None:
                    walk(a.g)

    walk(onx.graph)
    return {
        "kind": kind,
        "model": os.path.basename(path),
        "input": session.get_inputs()[0].name,
        "input_file": f"x_{kind}_{name}.npy",
        "outputs": outputs,
        "dtype": name,
        "ops": sorted(ops),
        "scan": scan,
    }


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(0)
    x_train = rng.rand(40, 5)
    y_train = np.sin(3 * x_train).sum(1) + 0.1 * rng.randn(40)
    gpr = GaussianProcessRegressor(kernel=RBF(0.5), alpha=1e-2).fit(x_train, y_train)
    x = rng.rand(64, 5)
    knn_x = rng.rand(300, 4)
    knn_y = (knn_x[:, 0] + knn_x[:, 1] > 1).astype(np.int64) + (knn_x[:, 2] > 0.7)
    knn_q = rng.rand(64, 4)
    manifest = []
    for name in ["f32", "f64"]:
        dtype = np.float32 if name == "f32" else np.float64
        manifest.append(export(out, "gpr", name, gpr, x))
        reg = KNeighborsRegressor(4).fit(knn_x.astype(dtype), knn_x[:, 3].astype(dtype))
        manifest.append(export(out, "knn_regressor", name, reg, knn_q))
        clf = KNeighborsClassifier(5).fit(knn_x.astype(dtype), knn_y)
        options = {id(clf): {"zipmap": False}}
        manifest.append(export(out, "knn_classifier", name, clf, knn_q, options))
    manifest += ml_models(out, rng)
    manifest += several_input_models(out, rng)
    manifest += dict_models(out, rng)
    manifest += converter_sweep_models(out, rng)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"exported {len(manifest)} models to {out}")


def save_expected(out, stem, session, values):
    """onnxruntime's outputs as out/expected_<stem>_<output>.npy, or .json for ZipMap's list of
    maps (keys as text, as the command writes them); returns their manifest entries."""
    outputs = []
    for meta, value in zip(session.get_outputs(), values):
        if isinstance(value, list):
            file = f"expected_{stem}_{meta.name}.json"
            with open(os.path.join(out, file), "w") as f:
                json.dump([{str(k): float(v) for k, v in m.items()} for m in value], f)
        else:
            file = f"expected_{stem}_{meta.name}.npy"
            # Strings (object arrays from onnxruntime) as numpy's fixed-width strings.
            np.save(os.path.join(out, file), value.astype(str) if value.dtype == object else value)
        outputs.append({"name": meta.name, "file": file})
    return outputs


def dict_models(out, rng):
    """Models of one dict of features, which skl2onnx begins with ONNX-ML's DictVectorizer on a
    map input: a classifier of string keys (with ZipMap's probabilities) and a regressor of
    integer keys, each queried on a dict that lacks some features and holds one the model
    never saw. The dict travels as a JSON object (`wgpu-ops run --input NAME=FILE.json`)."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, Int64TensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.pipeline import make_pipeline

    cities = ["London", "Paris", "Zürich"]
    rows = [{f"city={cities[i % 3]}": 1.0, "temperature": float(rng.uniform(-5, 30)),
             "wind": float(rng.uniform(0, 20))} for i in range(60)]
    labels = [("warm" if r["temperature"] > 12 else "cold") for r in rows]
    classifier = make_pipeline(DictVectorizer(sparse=False), LogisticRegression()).fit(rows, labels)
    int_rows = [{k: float(rng.uniform(0, 10)) for k in rng.choice([3, 7, 11, 42], 3, replace=False)}
                for _ in range(60)]
    targets = [sum(r.values()) + r.get(7, 0) for r in int_rows]
    regressor = make_pipeline(DictVectorizer(sparse=False),
                              RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0)).fit(int_rows, targets)
    models = [
        ("dict_logistic", classifier, StringTensorType([1]),
         {"city=Paris": 1.0, "temperature": 21.5, "never seen": 3.0}),
        ("dict_forest_int_keys", regressor, Int64TensorType([1]),
         {3: 2.5, 42: 7.25, 99: 1.0}),
    ]
    entries = []
    for kind, model, key_type, query in models:
        onx = convert_sklearn(model, initial_types=[("input", DictionaryType(key_type, FloatTensorType([1])))],
                              target_opset={"": 17, "ai.onnx.ml": 3})
        path = os.path.join(out, f"{kind}_f32.onnx")
        with open(path, "wb") as fh:
            fh.write(onx.SerializeToString())
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        file = f"x_{kind}.json"
        with open(os.path.join(out, file), "w") as fh:
            json.dump({str(k): v for k, v in query.items()}, fh)
        outputs = save_expected(out, kind, session, session.run(None, {"input": query}))
        entries.append({
            "kind": kind,
            "model": os.path.basename(path),
            "input": "input",
            "input_file": file,
            "more_inputs": [],
            "outputs": outputs,
            "dtype": "f32",
            "ops": sorted({n.op_type for n in onx.graph.node}),
            "scan": False,
        })
    return entries


def several_input_models(out, rng):
    """Models given their features as several inputs, which skl2onnx joins with ONNX-ML's
    FeatureVectorizer (always f32, cast back after for f64): StandardScaler in f32 and f64,
    Normalizer, SimpleImputer, and StandardScaler of an i64 and an f32 input (the i64 cast to
    f32 first). Fitted on 5 features, queried on 32 rows."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType, Int64TensorType
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import Normalizer, StandardScaler

    x = rng.rand(100, 5) * [1, 10, 100, 3, 7]
    q = rng.rand(32, 5) * [1, 10, 100, 3, 7]
    q_ints = np.round(q * 1000)
    q_nan = np.where(rng.rand(32, 5) < 0.2, np.nan, q)
    f, d, i = FloatTensorType, DoubleTensorType, Int64TensorType
    models = [
        ("scaler_two_inputs", "f32", StandardScaler().fit(x), [("a", f, 2, q), ("b", f, 3, q)]),
        ("scaler_two_inputs", "f64", StandardScaler().fit(x), [("a", d, 2, q), ("b", d, 3, q)]),
        ("normalizer_two_inputs", "f32", Normalizer().fit(x), [("a", f, 3, q), ("b", f, 2, q)]),
        ("imputer_two_inputs", "f32", SimpleImputer().fit(x), [("a", f, 4, q_nan), ("b", f, 1, q_nan)]),
        ("scaler_i64_and_f32", "i64", StandardScaler().fit(np.round(x * 1000)),
         [("a", i, 2, q_ints), ("b", f, 3, q_ints)]),
    ]
    entries = []
    for kind, name, model, inputs in models:
        types, feed, at = [], {}, 0
        for input_name, tensor_type, width, values in inputs:
            types.append((input_name, tensor_type([None, width])))
            np_type = {f: np.float32, d: np.float64, i: np.int64}[tensor_type]
            feed[input_name] = values[:, at:at + width].astype(np_type)
            at += width
        onx = convert_sklearn(model, initial_types=types,
                              target_opset={"": 17, "ai.onnx.ml": 3})
        path = os.path.join(out, f"{kind}_{name}.onnx")
        with open(path, "wb") as fh:
            fh.write(onx.SerializeToString())
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        files = []
        for input_name, value in feed.items():
            file = f"x_{kind}_{name}_{input_name}.npy"
            np.save(os.path.join(out, file), value)
            files.append({"name": input_name, "file": file})
        outputs = []
        for meta, value in zip(session.get_outputs(), session.run(None, feed)):
            file = f"expected_{kind}_{name}_{meta.name}.npy"
            np.save(os.path.join(out, file), value)
            outputs.append({"name": meta.name, "file": file})
        entries.append({
            "kind": kind,
            "model": os.path.basename(path),
            "input": files[0]["name"],
            "input_file": files[0]["file"],
            "more_inputs": files[1:],
            "outputs": outputs,
            "dtype": name,
            "ops": sorted({n.op_type for n in onx.graph.node}),
            "scan": False,
        })
    return entries


def ml_models(out, rng):
    """The ONNX-ML models, f32: fitted on 4 features, queried on 48 rows (NaN in some for the
    imputer)."""
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                                  RandomForestClassifier, RandomForestRegressor)
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.ensemble import IsolationForest
    from sklearn.preprocessing import (Binarizer, KBinsDiscretizer, Normalizer, OneHotEncoder,
                                       OrdinalEncoder, StandardScaler)
    from sklearn.svm import SVC, SVR, LinearSVC, OneClassSVM
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    x = rng.rand(200, 4) * [1, 2, 3, 4]
    y = np.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2] - x[:, 3]
    y3 = (x[:, 0] + x[:, 1] > 1.5).astype(np.int64) + (x[:, 3] > 2.5)
    y2 = (x[:, 0] * x[:, 2] > 0.8).astype(np.int64) * 5 + 2  # labels 2 and 7
    q = rng.rand(48, 4) * [1, 2, 3, 4]
    q_nan = np.where(rng.rand(48, 4) < 0.2, np.nan, q)
    nozip = lambda m: {id(m): {"zipmap": False}}  # noqa: E731
    models = [
        ("scaled_logistic", make_pipeline(StandardScaler(), LogisticRegression()).fit(x, y3), q, True),
        ("linear_regression", LinearRegression().fit(x, y), q, False),
        ("normalizer", Normalizer().fit(x), q, False),
        ("binarizer", Binarizer(threshold=1.5).fit(x), q, False),
        ("imputer", SimpleImputer().fit(np.where(rng.rand(200, 4) < 0.1, np.nan, x)), q_nan, False),
        ("tree_regressor", DecisionTreeRegressor(max_depth=6, random_state=0).fit(x, y), q, False),
        ("forest_regressor", RandomForestRegressor(10, max_depth=6, random_state=0).fit(x, y), q, False),
        ("boosting_regressor", GradientBoostingRegressor(n_estimators=20, random_state=0).fit(x, y), q, False),
        ("tree_classifier", DecisionTreeClassifier(max_depth=5, random_state=0).fit(x, y3), q, True),
        ("forest_classifier", RandomForestClassifier(10, max_depth=5, random_state=0).fit(x, y3), q, True),
        ("forest_binary", RandomForestClassifier(10, max_depth=5, random_state=0).fit(x, y2), q, True),
        ("boosting_classifier", GradientBoostingClassifier(n_estimators=10, random_state=0).fit(x, y3), q, True),
        ("boosting_binary", GradientBoostingClassifier(n_estimators=10, random_state=0).fit(x, y2), q, True),
        ("svr", SVR().fit(x, y), q, False),
        ("svc", SVC().fit(x, y3), q, True),
        ("svc_binary", SVC(kernel="poly", degree=2).fit(x, y2), q, True),
        ("svc_probability", SVC(probability=True, random_state=0).fit(x, y3), q, True),
        ("svc_probability_binary", SVC(probability=True, random_state=0).fit(x, y2), q, True),
        ("linear_svc", LinearSVC().fit(x, y3), q, False),
        ("one_class_svm", OneClassSVM(gamma=0.5).fit(x), q, False),
    ]
    models += [
        ("isolation_forest", IsolationForest(n_estimators=10, random_state=0).fit(x), q, False),
        ("kbins_one_hot", KBinsDiscretizer(4, encode="onehot-dense").fit(x), q, False),
    ]
    # String class labels (the labels output is a string tensor).
    names = np.array(["setosa", "versicolor", "virgínica"])
    models += [
        ("string_labels_logistic", make_pipeline(StandardScaler(), LogisticRegression()).fit(x, names[y3]), q, True),
        ("string_labels_forest", RandomForestClassifier(10, max_depth=5, random_state=0).fit(x, names[y3]), q, True),
        ("string_labels_binary", DecisionTreeClassifier(max_depth=4, random_state=0).fit(x, names[y2 // 5]), q, True),
        ("string_labels_svc", SVC().fit(x, names[y3]), q, True),
    ]
    # Classifiers as skl2onnx exports them by default: probabilities as ZipMap's list of maps.
    models += [
        ("zipmap_logistic_strings", LogisticRegression().fit(x, names[y3]), q, False),
        ("zipmap_forest", RandomForestClassifier(10, max_depth=5, random_state=0).fit(x, y3), q, False),
    ]
    entries = []
    # The last field: whether the exporter's ZipMap (a list of maps) must be turned off.
    for kind, model, query, zipmap in models:
        options = nozip(model) if zipmap else None
        if hasattr(model, "steps"):
            options = {id(model.steps[-1][1]): {"zipmap": False}}
        entries.append(export(out, kind, "f32", model, query, options, scan=False))
    # Integer categories (i64 inputs).
    cats = rng.randint(0, 5, (200, 3))
    q_cats = rng.randint(0, 6, (48, 3))  # 5 is a category the encoders have not seen
    entries.append(export(out, "one_hot", "i64", OneHotEncoder(handle_unknown="ignore").fit(cats),
                          q_cats, scan=False))
    entries.append(export(out, "ordinal", "i64", OrdinalEncoder(handle_unknown="use_encoded_value",
                                                                 unknown_value=-1).fit(cats),
                          q_cats, scan=False))
    # A forest fitted on integer columns, exported with i64 features: its TreeEnsembleClassifier
    # compares them with its f32 thresholds as onnxruntime does (each converted to f32). A
    # generator of its own keeps the other models on their data.
    irng = np.random.RandomState(71)
    int_rows, q_int = irng.randint(0, 20, (200, 4)), irng.randint(0, 21, (48, 4))
    int_labels = (int_rows[:, 0] + int_rows[:, 1] > 18).astype(np.int64) + (int_rows[:, 3] > 12)
    int_forest = RandomForestClassifier(10, max_depth=5, random_state=0).fit(int_rows, int_labels)
    entries.append(export(out, "forest_classifier_i64", "i64", int_forest, q_int, nozip(int_forest),
                          scan=False))
    # Text: CountVectorizer and TfidfVectorizer (StringNormalizer, onnxruntime's Tokenizer,
    # TfIdfVectorizer of string tokens), words and word pairs.
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    corpus = np.array(["The cat sat on the mat", "the dog ate my homework", "A cat and a dog!",
                       "mat mat mat", "Élan vital, the naïve café", "dogs and cats"] * 3)
    queries = np.array(["the cat and the dog", "", "unknown words only", "Mat MAT mat cat",
                        "café élan", "homework, the dog ate it"]).reshape(-1, 1)
    entries.append(export(out, "count_vectorizer", "str", CountVectorizer().fit(corpus), queries,
                          scan=False))
    entries.append(export(out, "tfidf_vectorizer", "str",
                          TfidfVectorizer(ngram_range=(1, 2)).fit(corpus), queries, scan=False))
    # String categories (string inputs): OneHotEncoder and OrdinalEncoder.
    words = np.array(["red", "green", "blüe", "", "black"], dtype=object)
    str_cats = words[rng.randint(0, 4, (200, 2))]
    q_str = words[rng.randint(0, 5, (48, 2))]  # "black" is a category the encoders have not seen
    entries.append(export(out, "one_hot_strings", "str", OneHotEncoder(handle_unknown="ignore").fit(str_cats),
                          q_str, scan=False))
    entries.append(export(out, "ordinal_strings", "str",
                          OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1).fit(str_cats),
                          q_str, scan=False))
    return entries


def converter_sweep_models(out, rng):
    """Models a sweep of skl2onnx's converters (every estimator with a converter, fitted with
    defaults) showed running, kept here so they stay so, f32: KNNImputer (opset 18: model-local
    functions whose If branches call functions, NonZero, Compress, ScatterND, TopK), an MLP,
    Gaussian naive Bayes, k-means, a Yeo-Johnson power transform, a quantile transform,
    polynomial features and AdaBoost's weighted trees. Queries are continuous random values,
    so no two distances tie (with ties, which neighbours a rounding picks is arbitrary)."""
    from sklearn.cluster import KMeans
    from sklearn.ensemble import AdaBoostClassifier
    from sklearn.impute import KNNImputer
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import PolynomialFeatures, PowerTransformer, QuantileTransformer

    x = rng.rand(150, 4) * [1, 2, 3, 4]
    y3 = (x[:, 0] + x[:, 1] > 1.5).astype(np.int64) + (x[:, 3] > 2.5)
    q = rng.rand(40, 4) * [1, 2, 3, 4]
    x_nan = np.where(rng.rand(150, 4) < 0.1, np.nan, x)
    # A NaN in about one value of six, none in a whole row (the exported graph cannot impute
    # a row with no values: onnxruntime fails on it too).
    q_nan = np.where(rng.rand(40, 4) < 0.15, np.nan, q)
    q_nan[np.isnan(q_nan).all(1), 0] = 0.5
    nozip = lambda m: {id(m): {"zipmap": False}}  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MLP's "not converged yet": it need not be
        mlp = MLPClassifier((16,), max_iter=300, random_state=0).fit(x, y3)
    gnb = GaussianNB().fit(x, y3)
    ada = AdaBoostClassifier(n_estimators=5, random_state=0).fit(x, y3)
    return [
        export(out, "knn_imputer", "f32", KNNImputer(n_neighbors=3).fit(x_nan), q_nan, scan=False,
               opset=18),
        export(out, "mlp_classifier", "f32", mlp, q, nozip(mlp), scan=False),
        export(out, "gaussian_nb", "f32", gnb, q, nozip(gnb), scan=False),
        export(out, "kmeans", "f32", KMeans(3, n_init=2, random_state=0).fit(x), q, scan=False),
        export(out, "power_transformer", "f32", PowerTransformer().fit(x), q, scan=False),
        export(out, "quantile_transformer", "f32", QuantileTransformer(n_quantiles=50).fit(x), q,
               scan=False),
        export(out, "polynomial_features", "f32", PolynomialFeatures(2).fit(x), q, scan=False),
        export(out, "adaboost_classifier", "f32", ada, q, nozip(ada), scan=False),
    ]


if __name__ == "__main__":
    main()
