//! Gradient-boosting models from outside scikit-learn, as their users export them: LightGBM
//! and XGBoost models through onnxmltools, CatBoost models through CatBoost's own exporter.
//! Ten of them (multi-class with NaN features, LightGBM's categorical splits, a Poisson and a
//! gamma regressor with their `Exp`, an ensemble that onnxmltools splits into parts summed in
//! f64, CatBoost's classifier with ZipMap, and an XGBoost regressor of two targets whose
//! export gives every weight to target 0) are in `tests/data/boosting` with their inputs and
//! onnxruntime 1.32's outputs, written by `scripts/boosting_sweep.py --fixtures` (LightGBM
//! 4.7, XGBoost 3.2, CatBoost 1.2, onnxmltools 1.16); the test needs none of them. Floats
//! compare as onnxruntime's own tests compare float results (rtol 1e-4, atol 1e-5), labels
//! exactly.

mod common;
use std::path::{Path, PathBuf};

use common::*;
use wgpu_ops::graph::Value;
use wgpu_ops::onnx::Model;
use wgpu_ops::{DType, HostTensor, MapKeys};

#[derive(serde::Deserialize)]
struct Output {
    name: String,
    file: String,
    /// The keys of a sequence of maps (ZipMap's output), whose values the file holds as
    /// `[maps, keys]`.
    #[serde(default)]
    keys: Option<Vec<i64>>,
}

#[derive(serde::Deserialize)]
struct Entry {
    name: String,
    input: String,
    file: String,
    outputs: Vec<Output>,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/boosting")
}

fn manifest() -> Vec<Entry> {
    serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap()
}

fn read(file: &str) -> HostTensor {
    wgpu_ops::npy::read(&dir().join(file)).unwrap()
}

#[test]
fn boosting_libraries_exports_match_onnxruntime() {
    let manifest = manifest();
    assert_eq!(manifest.len(), 10);
    for library in ["lgb_", "xgb_", "cb_"] {
        assert!(manifest.iter().any(|e| e.name.starts_with(library)));
    }
    for entry in &manifest {
        let name = &entry.name;
        let model = Model::load(dir().join(format!("{name}.onnx")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let session = model
            .session(ctx())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let input = Value::Tensor(read(&entry.file));
        let got = session
            .run_values_blocking(vec![(entry.input.clone(), input)])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.len(), entry.outputs.len(), "{name}");
        for ((got_name, got), want) in got.iter().zip(&entry.outputs) {
            assert_eq!(got_name, &want.name, "{name}");
            let what = format!("{name} output {got_name}");
            let expected = read(&want.file);
            let got = match (got, &want.keys) {
                (Value::Maps(maps), Some(keys)) => {
                    assert_eq!(maps.keys, MapKeys::Ints(keys.clone()), "{what}");
                    &maps.values
                }
                (Value::Tensor(t), None) => t,
                (other, _) => panic!("{what}: {}", other.kind_name()),
            };
            if matches!(expected.dtype, DType::F32 | DType::F64) {
                assert_close(got, &expected, 1e-4, 1e-5, &what);
            } else {
                assert_eq!(got, &expected, "{what}");
            }
        }
    }
}

#[test]
fn a_target_without_weights_scores_zero_without_its_base_value() {
    // onnxmltools' export of XGBoost's two-target regressor puts every leaf's weight on target
    // 0, and gives target 1 a base value; onnxruntime scores target 1 as 0 (spec decision 32).
    let model = Model::load(dir().join("xgb_reg_two_targets.onnx")).unwrap();
    let session = model.session(ctx()).unwrap();
    let x = read("xgb_reg_two_targets.in.npy");
    let rows = x.shape[0];
    let got = session.run_blocking(vec![("x".into(), x)]).unwrap();
    let y = got[0].1.to_vec::<f32>().unwrap();
    assert_eq!(y.len(), rows * 2);
    assert!(y.iter().skip(1).step_by(2).all(|&v| v == 0.0));
    assert!(y.iter().step_by(2).any(|&v| v != 0.0));
}
