//! ONNX-ML ops beyond the onnxruntime cases and scikit-learn models (tests/onnx_node.rs and
//! tests/sklearn_models.rs): bad attributes refused with one error line naming the node, integer
//! features refused by the trees (TreeWalk's rule), and a tree 300 levels deep walked to the right leaf for
//! every row (checked against a walk on the host).

mod common;

use prost::Message;
use wgpu_ops::onnx::proto::{
    tensor_proto::DataType, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    ValueInfoProto,
};
use wgpu_ops::onnx::Model;
use wgpu_ops::HostTensor;

use common::onnx_proto::{
    floats_attr as floats, int_attr as int, ints_attr as ints, string_attr as string,
    strings_attr as strings, value,
};

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
        input: vec![value("x", elem, &[Some(4), Some(3)])],
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
                floats("prob_b", &[0.0, 0.5]),
                ints("classlabels_ints", &[0, 1]),
            ],
            vec!["label", "scores"],
            "has 1 prob_a and 2 prob_b; probability estimates need one of each per pair",
        ),
        (
            "SVMClassifier",
            vec![
                string("kernel_type", "RBF"),
                floats("kernel_params", &[0.5, 0.0, 0.0]),
                floats("support_vectors", &[0.0; 9]),
                ints("vectors_per_class", &[1, 1, 1]),
                floats("coefficients", &[1.0, -1.0, 1.0, 1.0, -1.0, 1.0]),
                floats("rho", &[0.0, 0.0, 0.0]),
                floats("prob_a", &[1.0]),
                floats("prob_b", &[0.0]),
                ints("classlabels_ints", &[0, 1, 2]),
            ],
            vec!["label", "scores"],
            "has 1 prob_a and prob_b for 3 pairs of classes",
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

/// Integer features are compared as onnxruntime compares them, converted to the thresholds'
/// type: with an f32 threshold of 2^24, 2^24 + 1 (which is 2^24 in f32) goes to the true
/// child, where an exact comparison would send it to the false one.
#[test]
fn trees_compare_integer_features_in_the_thresholds_type() {
    let leaf = |id| (id, 0, 0.0, "LEAF", 0, 0);
    let attrs = tree(
        &[(0, 1, 16_777_216.0, "BRANCH_LEQ", 1, 2), leaf(1), leaf(2)],
        &[(1, 1.0), (2, 2.0)],
    );
    let m = Model::from_bytes(&ml_model(
        "TreeEnsembleRegressor",
        attrs,
        &["y"],
        DataType::Int64,
    ))
    .unwrap();
    let column = [16_777_215i64, 16_777_217, 16_777_218, 16_777_219];
    let rows: Vec<i64> = column.iter().flat_map(|&v| [0, v, 0]).collect();
    let x = HostTensor::from_vec(vec![column.len(), 3], &rows).unwrap();
    let out = m
        .session(common::ctx())
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap();
    let y = out[0].1.to_vec::<f32>().unwrap();
    // 2^24 + 3 is 2^24 + 4 in f32 (ties to even).
    assert_eq!(y, vec![1.0, 1.0, 2.0, 2.0]);
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

/// A graph of one TreeWalk node over `x` (a graph input: the GPU walks it, or a constant: the
/// interpreter folds it) and constant tables; its output.
fn tree_walk(
    x: &HostTensor,
    tables: [HostTensor; 3],
    depth: i64,
    x_as_input: bool,
) -> wgpu_ops::Result<HostTensor> {
    tree_walk_on(common::ctx(), x, tables, depth, x_as_input)
}

/// `tree_walk` in context `ctx`.
fn tree_walk_on(
    ctx: &wgpu_ops::Context,
    x: &HostTensor,
    tables: [HostTensor; 3],
    depth: i64,
    x_as_input: bool,
) -> wgpu_ops::Result<HostTensor> {
    let [nodes, thresholds, roots] = tables;
    let mut g = wgpu_ops::Graph::new();
    g = if x_as_input {
        let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
        g.input("x", x.dtype, &shape)
    } else {
        g.constant("x", x.clone())
    };
    g = g
        .constant("nodes", nodes)
        .constant("thresholds", thresholds)
        .constant("roots", roots)
        .node(
            wgpu_ops::Node::new("TreeWalk", "walk")
                .inputs(["x", "nodes", "thresholds", "roots"])
                .outputs(["leaves"])
                .attr("depth", wgpu_ops::graph::Attr::Int(depth)),
        )
        .output("leaves");
    let given = if x_as_input {
        vec![("x".to_string(), x.clone())]
    } else {
        Vec::new()
    };
    let out = wgpu_ops::Session::new(ctx, g)?.run_blocking(given)?;
    Ok(out.into_iter().next().map(|(_, v)| v).unwrap())
}

fn table(nodes: &[[i32; 4]]) -> HostTensor {
    let flat: Vec<i32> = nodes.iter().flatten().copied().collect();
    HostTensor::from_vec(vec![nodes.len(), 4], &flat).unwrap()
}

#[test]
fn tree_walk_refuses_bad_operands_with_one_line_on_both_paths() {
    let x = HostTensor::from_vec(vec![2, 3], &[0.5f32; 6]).unwrap();
    let nodes = table(&[[0, 1, 2, 3], [0, 0, 0, 16], [0, 0, 0, 16]]);
    let thresholds = HostTensor::from_vec(vec![3], &[0.25f32; 3]).unwrap();
    let roots = HostTensor::from_vec(vec![1], &[0i32]).unwrap();
    let f32s = |shape: Vec<usize>| {
        let n = shape.iter().product();
        HostTensor::from_vec(shape, &vec![0.5f32; n]).unwrap()
    };
    let cases: Vec<(HostTensor, [HostTensor; 3], i64, &str)> = vec![
        (
            HostTensor::from_vec(vec![2, 3], &[1u8; 6]).unwrap(),
            [nodes.clone(), thresholds.clone(), roots.clone()],
            2,
            "X is u8",
        ),
        (
            f32s(vec![2, 3, 1]),
            [nodes.clone(), thresholds.clone(), roots.clone()],
            2,
            "TreeWalk takes [rows, features]",
        ),
        (
            x.clone(),
            [
                HostTensor::from_vec(vec![3, 3], &[0i32; 9]).unwrap(),
                thresholds.clone(),
                roots.clone(),
            ],
            2,
            "i32 [nodes, 4]",
        ),
        (
            x.clone(),
            [
                nodes.clone(),
                HostTensor::from_vec(vec![3], &[1i32; 3]).unwrap(),
                roots.clone(),
            ],
            2,
            "one per node (3) of a float type",
        ),
        (
            x.clone(),
            [
                nodes.clone(),
                thresholds.clone(),
                HostTensor::from_vec(vec![1], &[0i64]).unwrap(),
            ],
            2,
            "i32 [trees]",
        ),
        (
            x.clone(),
            [nodes.clone(), thresholds.clone(), roots.clone()],
            5000,
            "depth 5000 is not 0 to 4096",
        ),
        (
            x.clone(),
            [
                table(&[[7, 1, 2, 3], [0, 0, 0, 16], [0, 0, 0, 16]]),
                thresholds.clone(),
                roots.clone(),
            ],
            2,
            "node 0 reads feature 7, not one of X's 3",
        ),
        (
            x.clone(),
            [
                table(&[[0, 1, 9, 3], [0, 0, 0, 16], [0, 0, 0, 16]]),
                thresholds.clone(),
                roots.clone(),
            ],
            2,
            "node 0 branches to 9, not one of the 3 nodes",
        ),
        (
            x.clone(),
            [
                nodes.clone(),
                thresholds.clone(),
                HostTensor::from_vec(vec![1], &[-1i32]).unwrap(),
            ],
            2,
            "root -1 is not one of the 3 nodes",
        ),
    ];
    for (x, tables, depth, why) in cases {
        for as_input in [true, false] {
            let e = tree_walk(&x, tables.clone(), depth, as_input)
                .expect_err(why)
                .to_string();
            assert!(
                e.contains("TreeWalk") && e.contains(why) && e.lines().count() == 1,
                "{why} (input {as_input}): {e}"
            );
        }
    }
}

/// Random forests (every rule combination, NaN features, leaves at every depth) walked on the
/// GPU and by the interpreter, in f32, f64 (natively and on the emulation) and f16, and on i64
/// and i32 rows against f32 thresholds: the same leaves, bit for bit.
#[test]
fn tree_walk_matches_the_interpreter_on_random_forests() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let (rows, features, trees) = (37usize, 5u64, 6usize);
    let mut nodes: Vec<[i32; 4]> = Vec::new();
    let mut roots = Vec::new();
    let mut thresholds = Vec::new();
    for _ in 0..trees {
        // A complete tree of depth 4: branches first, leaves after, in one block.
        let base = nodes.len() as i32;
        roots.push(base);
        for k in 0..31 {
            if k < 15 {
                let rule = 1 + next(15) as i32; // any non-empty set of the four outcomes
                nodes.push([
                    next(features) as i32,
                    base + 2 * k + 1,
                    base + 2 * k + 2,
                    rule,
                ]);
            } else {
                nodes.push([0, 0, 0, 16]);
            }
            thresholds.push(next(5) as f32 * 0.5);
        }
    }
    let values: Vec<f32> = (0..rows * features as usize)
        .map(|_| match next(8) {
            0 => f32::NAN,
            // Equal to a threshold of +0.
            7 => -0.0,
            v => v as f32 * 0.5 - 0.5,
        })
        .collect();
    let x32 = HostTensor::from_vec(vec![rows, features as usize], &values).unwrap();
    let g = nodes.len();
    let roots = HostTensor::from_vec(vec![trees], &roots).unwrap();
    let t32 = HostTensor::from_vec(vec![g], &thresholds).unwrap();
    let mut checked = 0;
    for dtype in [
        wgpu_ops::DType::F32,
        wgpu_ops::DType::F64,
        wgpu_ops::DType::F16,
        wgpu_ops::DType::I64,
        wgpu_ops::DType::I32,
    ] {
        let mut contexts = vec![common::ctx()];
        if dtype == wgpu_ops::DType::F64 {
            // Without SHADER_F64 (browsers, Metal) the walk compares f64 on u32 pairs.
            contexts.push(common::ctx_emulating_64_bit());
            let native =
                wgpu_ops::gpu::Features::SHADER_F64 | wgpu_ops::gpu::Features::SHADER_INT64;
            contexts.retain(|c| c.features().contains(native) || !std::ptr::eq(*c, common::ctx()));
        }
        let x = wgpu_ops::reference::cast_host(&x32, dtype).unwrap();
        // Integer rows (NaN cast to 0) keep f32 thresholds, halves that fall between them.
        let float = !matches!(dtype, wgpu_ops::DType::I64 | wgpu_ops::DType::I32);
        let t = if float {
            wgpu_ops::reference::cast_host(&t32, dtype).unwrap()
        } else {
            t32.clone()
        };
        let tables = [table(&nodes), t, roots.clone()];
        let cpu = tree_walk(&x, tables.clone(), 4, false).unwrap();
        for ctx in contexts {
            let gpu = tree_walk_on(ctx, &x, tables.clone(), 4, true).unwrap();
            assert_eq!(gpu.shape, vec![rows, trees]);
            assert_eq!(gpu, cpu, "{dtype}");
            // Every walk ends at a leaf (the trees are 4 deep), and the leaves differ by row.
            let leaves = gpu.to_vec::<i32>().unwrap();
            assert!(leaves.iter().all(|&l| nodes[l as usize][3] == 16));
            let distinct: std::collections::HashSet<i32> = leaves.iter().copied().collect();
            assert!(distinct.len() > trees * 4, "{}", distinct.len());
            checked += 1;
        }
    }
    assert!(checked >= 5);
}

/// More walks than one row of workgroups holds (rows x trees past 65 535 workgroups): the
/// kernel's index over a folded grid reaches every walk once. Stumps on one feature each,
/// checked on the host.
#[test]
fn tree_walk_covers_a_folded_grid() {
    // Enough trees for the context's workgroup size (64 on lavapipe, 256 on GPUs).
    let (rows, features) = (9000usize, 4usize);
    let trees = 65_536 * common::ctx().workgroup_size() as usize / rows + 7;
    let values: Vec<f32> = (0..rows * features)
        .map(|i| ((i * 7919) % 101) as f32 / 100.0)
        .collect();
    let mut nodes = Vec::new();
    let mut roots = Vec::new();
    let mut thresholds = Vec::new();
    for t in 0..trees {
        let base = nodes.len() as i32;
        roots.push(base);
        nodes.push([(t % features) as i32, base + 1, base + 2, 1 | 2]); // x <= t
        nodes.push([0, 0, 0, 16]);
        nodes.push([0, 0, 0, 16]);
        let threshold = (t % 97) as f32 / 96.0;
        thresholds.extend([threshold, 0.0, 0.0]);
    }
    let x = HostTensor::from_vec(vec![rows, features], &values).unwrap();
    let tables = [
        table(&nodes),
        HostTensor::from_vec(vec![thresholds.len()], &thresholds).unwrap(),
        HostTensor::from_vec(vec![trees], &roots).unwrap(),
    ];
    let got = tree_walk(&x, tables, 1, true)
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    assert!(
        (rows * trees) as u64 > 65_535 * u64::from(common::ctx().workgroup_size()),
        "the grid must fold"
    );
    for (i, &leaf) in got.iter().enumerate() {
        let (r, t) = (i / trees, i % trees);
        let base = 3 * t as i32;
        let go = values[r * features + t % features] <= thresholds[3 * t];
        assert_eq!(
            leaf,
            if go { base + 1 } else { base + 2 },
            "row {r} tree {t}"
        );
    }
}

/// PairwiseCoupling, the graph op behind SVM probability estimates, from a graph input and from
/// a value computed on the GPU (read back), equal to the host function; pairs that are no
/// K (K - 1) / 2 columns are refused in one line naming the node.
/// PairwiseCoupling of input `r`, or of `|r|` computed on the GPU (`on_gpu`).
fn coupling_graph(on_gpu: bool) -> wgpu_ops::Graph {
    use wgpu_ops::{DType, Graph, Node};
    let graph = Graph::new().input("r", DType::F32, &[None, None]);
    let (graph, pairs) = if on_gpu {
        let abs = Node::new("Abs", "a").inputs(["r"]).outputs(["r_gpu"]);
        (graph.node(abs), "r_gpu")
    } else {
        (graph, "r")
    };
    graph
        .node(
            Node::new("PairwiseCoupling", "c")
                .inputs([pairs])
                .outputs(["p"]),
        )
        .output("p")
}

#[test]
fn pairwise_coupling_runs_on_inputs_and_on_gpu_values() {
    use wgpu_ops::{Graph, Session};
    let r = HostTensor::from_vec(vec![2, 3], &[0.7f32, 0.6, 0.55, 0.2, 0.4, 0.9]).unwrap();
    let want = wgpu_ops::reference::coupling::pairwise_coupling(&r).unwrap();
    let run = |graph: Graph, r: HostTensor| {
        Session::new(common::ctx(), graph)?
            .run_blocking(vec![("r".into(), r)])
            .map(|mut outs| outs.remove(0).1)
    };
    let direct = coupling_graph(false);
    let computed = coupling_graph(true);
    for graph in [direct.clone(), computed] {
        let got = run(graph, r.clone()).unwrap();
        assert_eq!(got.shape, vec![2, 3]);
        assert_eq!(got.data, want.data);
    }
    let sums: Vec<f32> = want.to_vec::<f32>().unwrap();
    for row in sums.chunks(3) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
    }
    let four = HostTensor::from_vec(vec![1, 4], &[0.5f32; 4]).unwrap();
    let e = run(direct, four).unwrap_err().to_string();
    assert!(
        e.contains("PairwiseCoupling") && e.contains("not K (K - 1) / 2") && !e.contains('\n'),
        "{e}"
    );
}

/// Pairs for `rows` rows of `k` classes: from class scores with noise (what an SVM's pairs
/// look like), some at the clip bounds the SVM loader gives.
fn coupling_pairs(rows: usize, k: usize, seed: u64) -> HostTensor {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut values = Vec::new();
    for _ in 0..rows {
        let scores: Vec<f32> = (0..k).map(|_| next() * 4.0).collect();
        for i in 0..k {
            for j in i + 1..k {
                let r = 1.0 / (1.0 + (scores[j] - scores[i] + next() - 0.5).exp());
                let r = match (next() * 50.0) as u32 {
                    0 => 1e-7,
                    1 => 1.0 - 1e-7,
                    _ => r.clamp(1e-7, 1.0 - 1e-7),
                };
                values.push(r);
            }
        }
    }
    HostTensor::from_vec(vec![rows, k * (k - 1) / 2], &values).unwrap()
}

#[test]
fn pairwise_coupling_runs_on_the_gpu_without_read_backs() {
    use wgpu_ops::graph::Attr;
    use wgpu_ops::reference::coupling::pairwise_coupling;
    use wgpu_ops::{DType, Graph, Node, Session};
    // Pairs computed on the GPU (an Abs of the input) are coupled there: the same iteration
    // in the same order of f32 operations as the host's, so within a few units in the last
    // place (a GPU may fuse a product and a sum) and mostly the same bits. Class counts cover
    // one dispatch (2, 3, 10), many (33, 64, 128: 260 dispatches) and the limit.
    let computed = coupling_graph(true);
    let no_read_back = common::ctx_without_read_back();
    for (k, rows) in [
        (2, 70),
        (3, 200),
        (4, 65),
        (10, 40),
        (33, 9),
        (64, 5),
        (128, 3),
    ] {
        let r = coupling_pairs(rows, k, k as u64);
        let want = pairwise_coupling(&r).unwrap();
        let got = Session::new(&no_read_back, computed.clone())
            .unwrap()
            .run_blocking(vec![("r".into(), r)])
            .unwrap()
            .remove(0)
            .1;
        assert_eq!(got.shape, vec![rows, k]);
        let (got, want) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!("{k} classes, {rows} rows: largest difference {worst:e}");
        assert!(worst <= 1e-6, "{k} classes: largest difference {worst:e}");
        for row in got.chunks(k) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
        }
    }

    // Pairs no SVM gives (the graph op takes any): certain pairs (0 and 1) leave a class with
    // Q[t][t] = 0, and NaN pairs; the GPU gives what the host gives, NaN where it does.
    let special = [
        [0.0f32, 0.0, 0.0],
        [1.0, 1.0, 1.0],
        [1.0, 0.0, 0.5],
        [f32::NAN, 0.5, 0.5],
    ];
    let special = special.concat();
    let r = HostTensor::from_vec(vec![4, 3], &special).unwrap();
    let want = pairwise_coupling(&r).unwrap().to_vec::<f32>().unwrap();
    let got = Session::new(&no_read_back, computed.clone())
        .unwrap()
        .run_blocking(vec![("r".into(), r)])
        .unwrap()
        .remove(0)
        .1
        .to_vec::<f32>()
        .unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!(a == b || a.is_nan() && b.is_nan(), "{got:?} vs {want:?}");
    }

    // Past 128 classes the host couples: read back where the run can, refused where not.
    let r = coupling_pairs(2, 129, 7);
    let want = pairwise_coupling(&r).unwrap();
    let ctx = common::ctx();
    let before = ctx.stats().read_backs;
    let got = Session::new(ctx, computed.clone())
        .unwrap()
        .run_blocking(vec![("r".into(), r.clone())])
        .unwrap();
    assert_eq!(got[0].1, want);
    assert_eq!(ctx.stats().read_backs - before, 1);
    let e = Session::new(&no_read_back, computed)
        .unwrap()
        .run_blocking(vec![("r".into(), r)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'c'") && e.contains("more than 128 classes") && !e.contains('\n'),
        "{e}"
    );

    // In a Scan body: the coupling of each step's pairs summed into the state.
    let (steps, rows, k) = (4, 6, 3);
    let body = Graph::new()
        .input("acc", DType::F32, &[Some(rows), Some(k)])
        .input("r_t", DType::F32, &[Some(rows), Some(k * (k - 1) / 2)])
        .node(
            Node::new("PairwiseCoupling", "c")
                .inputs(["r_t"])
                .outputs(["p_t"]),
        )
        .node(
            Node::new("Add", "sum")
                .inputs(["acc", "p_t"])
                .outputs(["acc2"]),
        )
        .output("acc2");
    let graph = Graph::new()
        .input(
            "r",
            DType::F32,
            &[Some(steps), Some(rows), Some(k * (k - 1) / 2)],
        )
        .constant(
            "zero",
            HostTensor::from_vec(vec![rows, k], &vec![0f32; rows * k]).unwrap(),
        )
        .node(
            Node::new("Scan", "scan")
                .inputs(["zero", "r"])
                .outputs(["total"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("total");
    let r = coupling_pairs(steps * rows, k, 11);
    let mut want = vec![0f32; rows * k];
    for step in r.to_vec::<f32>().unwrap().chunks(rows * 3) {
        let step = HostTensor::from_vec(vec![rows, 3], step).unwrap();
        for (w, p) in want
            .iter_mut()
            .zip(pairwise_coupling(&step).unwrap().to_vec::<f32>().unwrap())
        {
            *w += p;
        }
    }
    let r = HostTensor::from_vec(vec![steps, rows, 3], &r.to_vec::<f32>().unwrap()).unwrap();
    let got = Session::new(&no_read_back, graph)
        .unwrap()
        .run_blocking(vec![("r".into(), r)])
        .unwrap()
        .remove(0)
        .1
        .to_vec::<f32>()
        .unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() <= 4e-6, "{got:?} vs {want:?}");
    }
}
