//! ONNX-ML ops beyond the onnxruntime cases and scikit-learn models (tests/onnx_node.rs and
//! tests/sklearn_models.rs): bad attributes refused with one error line naming the node, integer
//! features refused by the trees, and a tree 300 levels deep walked to the right leaf for
//! every row (checked against a walk on the host).

mod common;

use prost::Message;
use wgpu_ops::onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType,
    tensor_shape_proto::dimension::Value as Dim, tensor_shape_proto::Dimension, type_proto,
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use wgpu_ops::onnx::Model;
use wgpu_ops::HostTensor;

fn value(name: &str, elem: DataType, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&n| Dimension {
            value: Some(Dim::DimValue(n)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn floats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Floats as i32),
        floats: v.to_vec(),
        ..Default::default()
    }
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

fn strings(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Strings as i32),
        strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
}

/// A model of one ONNX-ML node named `ml\n1` on input `x` (`elem`, `[rows, features]`).
fn ml_model(op: &str, attrs: Vec<AttributeProto>, outputs: &[&str], elem: DataType) -> Vec<u8> {
    let node = NodeProto {
        op_type: Some(op.into()),
        name: Some("ml\n1".into()),
        domain: Some("ai.onnx.ml".into()),
        input: vec!["x".into()],
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![node],
        input: vec![value("x", elem, &[4, 3])],
        output: outputs
            .iter()
            .map(|o| ValueInfoProto {
                name: Some(o.to_string()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![
            OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            },
            OperatorSetIdProto {
                domain: Some("ai.onnx.ml".into()),
                version: Some(if op == "TreeEnsemble" { 5 } else { 3 }),
            },
        ],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A tree's attributes (TreeEnsembleRegressor): (node id, feature, threshold, mode, true id,
/// false id) per node, leaf weights per (node id, weight).
fn tree(nodes: &[(i64, i64, f32, &str, i64, i64)], leaves: &[(i64, f32)]) -> Vec<AttributeProto> {
    vec![
        ints("nodes_treeids", &vec![0; nodes.len()]),
        ints(
            "nodes_nodeids",
            &nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
        ),
        ints(
            "nodes_featureids",
            &nodes.iter().map(|n| n.1).collect::<Vec<_>>(),
        ),
        floats(
            "nodes_values",
            &nodes.iter().map(|n| n.2).collect::<Vec<_>>(),
        ),
        strings(
            "nodes_modes",
            &nodes.iter().map(|n| n.3).collect::<Vec<_>>(),
        ),
        ints(
            "nodes_truenodeids",
            &nodes.iter().map(|n| n.4).collect::<Vec<_>>(),
        ),
        ints(
            "nodes_falsenodeids",
            &nodes.iter().map(|n| n.5).collect::<Vec<_>>(),
        ),
        ints("target_treeids", &vec![0; leaves.len()]),
        ints(
            "target_nodeids",
            &leaves.iter().map(|l| l.0).collect::<Vec<_>>(),
        ),
        ints("target_ids", &vec![0; leaves.len()]),
        floats(
            "target_weights",
            &leaves.iter().map(|l| l.1).collect::<Vec<_>>(),
        ),
        int("n_targets", 1),
    ]
}

#[test]
fn bad_attributes_are_refused_with_one_line_naming_the_node() {
    let f = DataType::Float;
    let leaf = |id| (id, 0, 0.0, "LEAF", 0, 0);
    let cases: Vec<(&str, Vec<AttributeProto>, Vec<&str>, &str)> = vec![
        (
            "LinearClassifier",
            vec![
                floats("coefficients", &[1.0; 6]),
                floats("intercepts", &[0.0, 0.0]),
                strings("classlabels_strings", &["a", "b"]),
            ],
            vec!["label", "scores"],
            "strings are not a supported dtype",
        ),
        (
            "LinearClassifier",
            vec![
                floats("coefficients", &[1.0; 3]),
                floats("intercepts", &[0.0]),
                ints("classlabels_ints", &[1, 2, 3]),
            ],
            vec!["label", "scores"],
            "it needs exactly 2",
        ),
        (
            "LinearRegressor",
            vec![floats("coefficients", &[1.0; 5]), int("targets", 2)],
            vec!["y"],
            "has 5 coefficients, not a multiple of its 2 targets",
        ),
        (
            "Normalizer",
            vec![string("norm", "L3")],
            vec!["y"],
            "norm 'L3' is not MAX, L1 or L2",
        ),
        (
            "Scaler",
            vec![floats("scale", &[1.0, 2.0]), floats("offset", &[0.0])],
            vec!["y"],
            "scale and offset of one length",
        ),
        (
            "Imputer",
            vec![
                floats("imputed_value_floats", &[1.0]),
                ints("imputed_value_int64s", &[1]),
            ],
            vec!["y"],
            "one of them, not both",
        ),
        (
            "LinearRegressor",
            vec![
                floats("coefficients", &[1.0; 3]),
                string("post_transform", "SOFTMAXX"),
            ],
            vec!["y"],
            "post_transform 'SOFTMAXX' is not",
        ),
        (
            "TreeEnsembleRegressor",
            tree(
                &[
                    (0, 0, 0.5, "BRANCH_LEQ", 1, 1),
                    (1, 1, 0.5, "BRANCH_LEQ", 0, 2),
                    leaf(2),
                ],
                &[(2, 1.0)],
            ),
            vec!["y"],
            "cycle",
        ),
        (
            "TreeEnsembleRegressor",
            tree(
                &[
                    (0, 0, 0.5, "BRANCH_LEQ", 1, 3),
                    (1, 1, 0.5, "BRANCH_LEQ", 2, 3),
                    (2, 2, 0.5, "BRANCH_LEQ", 1, 3),
                    leaf(3),
                ],
                &[(3, 1.0)],
            ),
            vec!["y"],
            "has a tree whose branches form a cycle",
        ),
        (
            "TreeEnsembleRegressor",
            tree(&[(0, 0, 0.5, "BRANCH_LEQ", 1, 7), leaf(1)], &[(1, 1.0)]),
            vec!["y"],
            "branches to node 7, which the tree does not have",
        ),
        (
            "TreeEnsembleRegressor",
            tree(
                &[(0, 0, 0.5, "BRANCH_WHAT", 1, 2), leaf(1), leaf(2)],
                &[(1, 1.0)],
            ),
            vec!["y"],
            "node mode 'BRANCH_WHAT' is not one of",
        ),
        (
            "TreeEnsembleRegressor",
            tree(
                &[(0, 0, 0.5, "BRANCH_LEQ", 1, 2), leaf(1), leaf(2)],
                &[(9, 1.0)],
            ),
            vec!["y"],
            "has a weight for node 9 of tree 0, which it does not have",
        ),
        (
            "TreeEnsembleClassifier",
            {
                let mut a = tree(&[(0, 0, 0.5, "BRANCH_LEQ", 1, 2), leaf(1), leaf(2)], &[]);
                a.truncate(7);
                a.extend([
                    ints("class_treeids", &[0]),
                    ints("class_nodeids", &[1]),
                    ints("class_ids", &[5]),
                    floats("class_weights", &[1.0]),
                    ints("classlabels_int64s", &[0, 1]),
                ]);
                a
            },
            vec!["label", "scores"],
            "has a weight for class 5, not below its 2 labels",
        ),
        (
            "TreeEnsemble",
            vec![
                ints("nodes_featureids", &[0]),
                floats("nodes_splits", &[0.5]),
                ints("nodes_modes", &[9]),
                ints("nodes_truenodeids", &[0]),
                ints("nodes_trueleafs", &[1]),
                ints("nodes_falsenodeids", &[1]),
                ints("nodes_falseleafs", &[1]),
                ints("tree_roots", &[0]),
                ints("leaf_targetids", &[0, 0]),
                floats("leaf_weights", &[1.0, 2.0]),
                int("n_targets", 1),
            ],
            vec!["y"],
            "node mode 9 is not 0 to 6",
        ),
        (
            "SVMClassifier",
            vec![
                string("kernel_type", "RBF"),
                floats("kernel_params", &[0.5, 0.0, 0.0]),
                floats("support_vectors", &[0.0; 6]),
                ints("vectors_per_class", &[1, 1]),
                floats("coefficients", &[1.0, -1.0]),
                floats("rho", &[0.0]),
                floats("prob_a", &[1.0]),
                floats("prob_b", &[0.0]),
                ints("classlabels_ints", &[0, 1]),
            ],
            vec!["label", "scores"],
            "probability estimates (prob_a, prob_b), which are not supported",
        ),
        (
            "SVMRegressor",
            vec![
                string("kernel_type", "CUBIC"),
                floats("coefficients", &[1.0]),
                floats("rho", &[0.0]),
            ],
            vec!["y"],
            "kernel_type 'CUBIC' is not LINEAR, POLY, RBF or SIGMOID",
        ),
    ];
    for (op, attrs, outputs, why) in cases {
        let e = Model::from_bytes(&ml_model(op, attrs, &outputs, f))
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{op}: {e}");
        assert!(e.contains("ml\\n1") && e.contains(op), "{op}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn trees_refuse_integer_features_with_one_line() {
    let leaf = |id| (id, 0, 0.0, "LEAF", 0, 0);
    let attrs = tree(
        &[(0, 1, 1.5, "BRANCH_LEQ", 1, 2), leaf(1), leaf(2)],
        &[(1, 1.0), (2, 2.0)],
    );
    let m = Model::from_bytes(&ml_model(
        "TreeEnsembleRegressor",
        attrs,
        &["y"],
        DataType::Int64,
    ))
    .unwrap();
    let x = HostTensor::from_vec(vec![4, 3], &[1i64; 12]).unwrap();
    let e = m
        .session(common::ctx())
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("features_must_be_float") && e.contains("i64"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// A chain 300 branches deep (node k tests feature k % 3 against a threshold and goes on or
/// stops at a leaf of its own), walked for rows that stop at every depth, against the same
/// walk on the host.
#[test]
fn a_deep_tree_reaches_the_right_leaf_for_every_row() {
    const DEPTH: i64 = 300;
    let mut nodes = Vec::new();
    let mut leaves = Vec::new();
    for k in 0..DEPTH {
        // Branch k: ids 2k; its stopping leaf 2k + 1; the last branch's false child a leaf.
        let next = 2 * (k + 1);
        nodes.push((
            2 * k,
            k % 3,
            (k as f32) * 0.5,
            "BRANCH_LEQ",
            2 * k + 1,
            next,
        ));
        nodes.push((2 * k + 1, 0, 0.0, "LEAF", 0, 0));
        leaves.push((2 * k + 1, k as f32));
    }
    nodes.push((2 * DEPTH, 0, 0.0, "LEAF", 0, 0));
    leaves.push((2 * DEPTH, -1.0));
    let m = Model::from_bytes(&ml_model(
        "TreeEnsembleRegressor",
        tree(&nodes, &leaves),
        &["y"],
        DataType::Float,
    ))
    .unwrap();
    let rows = 4;
    let values: Vec<f32> = (0..rows * 3)
        .map(|i| [10.0f32, 60.0, 100.0, 140.0][i / 3] + (i % 3) as f32 * 0.25)
        .collect();
    let walk = |row: &[f32]| -> f32 {
        for k in 0..DEPTH {
            if row[(k % 3) as usize] <= k as f32 * 0.5 {
                return k as f32;
            }
        }
        -1.0
    };
    let want: Vec<f32> = values.chunks(3).map(walk).collect();
    assert!(
        want.iter().all(|&w| w > 0.0) && want.windows(2).all(|p| p[0] < p[1]),
        "{want:?}"
    );
    let x = HostTensor::from_vec(vec![rows, 3], &values).unwrap();
    let got = m
        .session(common::ctx())
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap();
    assert_eq!(got[0].1.shape, vec![rows, 1]);
    assert_eq!(got[0].1.to_vec::<f32>().unwrap(), want);
}
