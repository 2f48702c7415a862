//! scikit-learn models through skl2onnx. Those whose ONNX graphs compute pairwise distances
//! with a Scan:
//! a Gaussian-process regressor (RBF kernel; the Scan's body is Sub, ReduceSumSquare,
//! Identity) and k-nearest-neighbour regressor and classifier (the same Scan, then TopK and
//! ONNX-ML's ArrayFeatureExtractor). Each runs whole on the GPU through the `wgpu-ops run`
//! command in f32 and f64 and is compared with onnxruntime's outputs (written by
//! `scripts/sklearn_models.py`, which this test runs when they are missing). Tolerances: f64
//! within 1e-9 relative (the outputs agree to about 1e-14 on lavapipe); f32 as onnxruntime's
//! own tests compare float results, rtol 1e-4 and atol 1e-5; integer outputs (labels)
//! exactly. And, in f32, models whose graphs are ONNX-ML ops (loaded as the standard ops that
//! compute them): a scaled logistic regression, linear regression, the normalizer, binarizer
//! and imputer, decision trees, random forests and gradient boosting, regressors and
//! classifiers (binary and multi-class), and support vector machines (SVR, SVC with RBF and
//! polynomial kernels, LinearSVC, OneClassSVM), an isolation forest, KBinsDiscretizer, and
//! OneHotEncoder and OrdinalEncoder of integer categories (i64 inputs).

use std::path::{Path, PathBuf};
use std::process::Command;

use wgpu_ops::{DType, HostTensor};

/// The exported models (exported once per test binary: the tests run in parallel threads).
fn export_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(export).clone()
}

fn export() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("WGPU_OPS_SKLEARN_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/sklearn-models"));
    if !dir.join("manifest.json").exists() {
        let status = Command::new("python3")
            .arg(root.join("scripts/sklearn_models.py"))
            .arg(&dir)
            .status()
            .expect("python3 runs scripts/sklearn_models.py");
        assert!(
            status.success(),
            "exporting the model failed: `python3 -m pip install scikit-learn skl2onnx onnxruntime` (scripts/test.sh does)"
        );
    }
    dir
}

#[derive(serde::Deserialize)]
struct Output {
    name: String,
    file: String,
}

#[derive(serde::Deserialize)]
struct Entry {
    kind: String,
    model: String,
    input: String,
    input_file: String,
    /// The other inputs of a model given several (`name`, `file`).
    #[serde(default)]
    more_inputs: Vec<Output>,
    outputs: Vec<Output>,
    dtype: String,
    ops: Vec<String>,
    /// Whether its graph holds a Scan (the distance models).
    scan: bool,
}

fn manifest(dir: &Path) -> Vec<Entry> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn scikit_learn_models_match_onnxruntime() {
    let dir = export_dir();
    let manifest = manifest(&dir);
    let kinds: Vec<(&str, &str)> = manifest
        .iter()
        .map(|e| (e.kind.as_str(), e.dtype.as_str()))
        .collect();
    for kind in ["gpr", "knn_regressor", "knn_classifier"] {
        for dtype in ["f32", "f64"] {
            assert!(
                kinds.contains(&(kind, dtype)),
                "{kind} {dtype} in {kinds:?}"
            );
        }
    }
    // Each ONNX-ML model and an op its graph must hold (so an exporter that stops writing it
    // fails here instead of passing on other ops).
    let ml = [
        ("scaled_logistic", "LinearClassifier"),
        ("linear_regression", "LinearRegressor"),
        ("normalizer", "Normalizer"),
        ("binarizer", "Binarizer"),
        ("imputer", "Imputer"),
        ("tree_regressor", "TreeEnsembleRegressor"),
        ("forest_regressor", "TreeEnsembleRegressor"),
        ("boosting_regressor", "TreeEnsembleRegressor"),
        ("tree_classifier", "TreeEnsembleClassifier"),
        ("forest_classifier", "TreeEnsembleClassifier"),
        ("forest_classifier_i64", "TreeEnsembleClassifier"),
        ("forest_binary", "TreeEnsembleClassifier"),
        ("boosting_classifier", "TreeEnsembleClassifier"),
        ("boosting_binary", "TreeEnsembleClassifier"),
        ("svr", "SVMRegressor"),
        ("svc", "SVMClassifier"),
        ("svc_binary", "SVMClassifier"),
        ("svc_probability", "SVMClassifier"),
        ("svc_probability_binary", "SVMClassifier"),
        ("linear_svc", "LinearClassifier"),
        ("one_class_svm", "SVMRegressor"),
        ("isolation_forest", "LabelEncoder"),
        ("kbins_one_hot", "OneHotEncoder"),
        ("one_hot", "OneHotEncoder"),
        ("ordinal", "LabelEncoder"),
        ("string_labels_logistic", "LinearClassifier"),
        ("string_labels_forest", "TreeEnsembleClassifier"),
        ("string_labels_binary", "TreeEnsembleClassifier"),
        ("string_labels_svc", "SVMClassifier"),
        ("one_hot_strings", "OneHotEncoder"),
        ("ordinal_strings", "LabelEncoder"),
        ("zipmap_logistic_strings", "ZipMap"),
        ("zipmap_forest", "ZipMap"),
        ("count_vectorizer", "Tokenizer"),
        ("tfidf_vectorizer", "TfIdfVectorizer"),
        ("knn_imputer", "knn_imputer_column"),
        ("mlp_classifier", "Relu"),
        ("gaussian_nb", "ReduceLogSumExp"),
        ("kmeans", "ArgMin"),
        ("power_transformer", "Pow"),
        ("quantile_transformer", "GreaterOrEqual"),
        ("polynomial_features", "ReduceProd"),
        ("adaboost_classifier", "TreeEnsembleClassifier"),
        ("scaler_two_inputs", "FeatureVectorizer"),
        ("normalizer_two_inputs", "FeatureVectorizer"),
        ("imputer_two_inputs", "FeatureVectorizer"),
        ("scaler_i64_and_f32", "FeatureVectorizer"),
        ("dict_logistic", "DictVectorizer"),
        ("dict_forest_int_keys", "DictVectorizer"),
    ];
    for (kind, op) in ml {
        let entry = manifest.iter().find(|e| e.kind == kind);
        assert!(
            entry.is_some_and(|e| e.ops.iter().any(|o| o == op)),
            "{kind} with {op} in {kinds:?}"
        );
    }
    let out_root = tempfile::tempdir().unwrap();
    for entry in &manifest {
        assert_eq!(
            entry.scan,
            entry.ops.iter().any(|o| o == "Scan"),
            "{}: {:?}",
            entry.kind,
            entry.ops
        );
        if matches!(entry.kind.as_str(), "knn_regressor" | "knn_classifier") {
            for op in ["TopK", "ArrayFeatureExtractor"] {
                assert!(entry.ops.iter().any(|o| o == op), "{:?}", entry.ops);
            }
        }
        let out = out_root.path().join(&entry.model);
        let mut run = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"));
        run.arg("run")
            .arg(dir.join(&entry.model))
            .arg("--input")
            .arg(format!(
                "{}={}",
                entry.input,
                dir.join(&entry.input_file).display()
            ));
        for more in &entry.more_inputs {
            run.arg("--input")
                .arg(format!("{}={}", more.name, dir.join(&more.file).display()));
        }
        let run = run.arg("--out").arg(&out).output().unwrap();
        assert!(
            run.status.success(),
            "{}: {}",
            entry.model,
            String::from_utf8_lossy(&run.stderr)
        );
        for o in &entry.outputs {
            // Lists of maps (ZipMap's) as JSON: the same keys, values to f32's
            // tolerance.
            if o.file.ends_with(".json") {
                let read = |p: &Path| -> serde_json::Value {
                    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
                };
                let got = read(&out.join(format!("{}.json", o.name)));
                let want = read(&dir.join(&o.file));
                let (got, want) = (got.as_array().unwrap(), want.as_array().unwrap());
                assert_eq!(got.len(), want.len(), "{} {}", entry.model, o.name);
                for (g, w) in got.iter().zip(want) {
                    let (g, w) = (g.as_object().unwrap(), w.as_object().unwrap());
                    let keys = |m: &serde_json::Map<String, serde_json::Value>| {
                        m.keys().cloned().collect::<Vec<_>>()
                    };
                    assert_eq!(keys(g), keys(w), "{} {}", entry.model, o.name);
                    for (k, wv) in w {
                        let (a, b) = (g[k].as_f64().unwrap(), wv.as_f64().unwrap());
                        assert!(
                            (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
                            "{} {} key {k}: {a} vs {b}",
                            entry.model,
                            o.name
                        );
                    }
                }
                continue;
            }
            // String outputs (class labels) compare exactly.
            let want_bytes = std::fs::read(dir.join(&o.file)).unwrap();
            if wgpu_ops::npy::holds_strings(&want_bytes) {
                let read = |p: &Path| {
                    wgpu_ops::npy::strings_from_bytes(
                        &p.display().to_string(),
                        &std::fs::read(p).unwrap(),
                    )
                    .unwrap()
                };
                let got = read(&out.join(format!("{}.npy", o.name)));
                let want = wgpu_ops::npy::strings_from_bytes(&o.file, &want_bytes).unwrap();
                assert_eq!(got, want, "{} {}", entry.model, o.name);
                continue;
            }
            let got: HostTensor =
                wgpu_ops::npy::read(&out.join(format!("{}.npy", o.name))).unwrap();
            let want: HostTensor = wgpu_ops::npy::read(&dir.join(&o.file)).unwrap();
            assert_eq!(
                (got.dtype, &got.shape),
                (want.dtype, &want.shape),
                "{}",
                o.name
            );
            if !matches!(want.dtype, DType::F32 | DType::F64) {
                assert_eq!(got, want, "{} {}", entry.model, o.name);
                continue;
            }
            let (g, w, rtol, atol): (Vec<f64>, Vec<f64>, f64, f64) = match entry.dtype.as_str() {
                "f64" => (
                    got.to_vec::<f64>().unwrap(),
                    want.to_vec::<f64>().unwrap(),
                    1e-9,
                    0.0,
                ),
                _ => (
                    got.to_vec::<f32>()
                        .unwrap()
                        .into_iter()
                        .map(f64::from)
                        .collect(),
                    want.to_vec::<f32>()
                        .unwrap()
                        .into_iter()
                        .map(f64::from)
                        .collect(),
                    1e-4,
                    1e-5,
                ),
            };
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!(
                    (a - b).abs() <= atol + rtol * b.abs(),
                    "{} {}: element {i}: GPU {a} vs onnxruntime {b}",
                    entry.model,
                    o.name
                );
            }
        }
    }
}

#[test]
fn distances_run_as_one_reduction_not_one_per_training_row() {
    // The Scan carries the queries unchanged and reduces (queries - row)^2 per training row:
    // its work moves before the loop as one reduction over all rows (see `src/graph/hoist.rs`),
    // so the whole model takes a handful of dispatches, not one or more per training row (40
    // for the Gaussian process, 300 for the neighbours), and no copy: 6 for the Gaussian
    // process and the neighbour regressor, 16 for the classifier (its labels and
    // probabilities). Their values are checked by the test above, through the command.
    let dir = export_dir();
    for entry in manifest(&dir).iter().filter(|e| e.scan) {
        let most = if entry.kind == "knn_classifier" {
            20
        } else {
            10
        };
        let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
        let session = wgpu_ops::onnx::Model::load(dir.join(&entry.model))
            .unwrap()
            .session(&ctx)
            .unwrap();
        let x: HostTensor = wgpu_ops::npy::read(&dir.join(&entry.input_file)).unwrap();
        let before = ctx.stats();
        let got = session
            .run_blocking(vec![(entry.input.clone(), x)])
            .unwrap();
        let after = ctx.stats();
        let dispatches = after.dispatches - before.dispatches;
        assert!(
            dispatches <= most,
            "{}: {dispatches} dispatches",
            entry.model
        );
        assert_eq!(after.copies - before.copies, 0, "{}", entry.model);
        for (o, (name, t)) in entry.outputs.iter().zip(&got) {
            let want: HostTensor = wgpu_ops::npy::read(&dir.join(&o.file)).unwrap();
            assert_eq!((name, &t.shape), (&o.name, &want.shape));
        }
    }
}
