//! Ops that load as graphs of other ops (the losses, RoiAlign, the recurrent layers,
//! Attention, the quantizers, ...) refuse inputs that break their rules in one line naming
//! the node, the op, the input and the rule, on the GPU and in the CPU interpreter, before
//! any work: not with the message of an inner node of the expansion, and not by computing
//! something else where the inner ops accept the shapes (a loss over fewer targets than
//! scores).

mod common;

use prost::Message;
use wgpu_ops::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, OperatorSetIdProto, ValueInfoProto,
};
use wgpu_ops::onnx::{onnx_code, Model};
use wgpu_ops::{reference, HostTensor};

use common::onnx_proto::{
    floats_attr, int_attr, ints_attr, node, string_attr, strings_attr, value,
};

fn f32s(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25 + 0.5).collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

fn i64s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::from_vec(shape.to_vec(), v).unwrap()
}

/// One node `op` (of `domain`) on `inputs` (an empty name: absent), as a model whose graph
/// inputs are the given values.
fn model(
    op: &str,
    domain: &str,
    opset: i64,
    inputs: &[(&str, HostTensor)],
    attrs: Vec<AttributeProto>,
    outputs: usize,
) -> Model {
    model_computing(op, domain, opset, inputs, attrs, outputs, None)
}

/// [`model`], where input `computed` (if any) is computed on the GPU from the graph input
/// `given` (`Neg(Neg(given))`), so that its values are not known while planning.
fn model_computing(
    op: &str,
    domain: &str,
    opset: i64,
    inputs: &[(&str, HostTensor)],
    attrs: Vec<AttributeProto>,
    outputs: usize,
    computed: Option<&str>,
) -> Model {
    let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
    let outs: Vec<String> = (0..outputs).map(|k| format!("y{k}")).collect();
    let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    let mut n = node(op, &names, &out_refs);
    n.name = Some("rule\n1".into());
    n.domain = Some(domain.into());
    n.attribute = attrs;
    let mut nodes = vec![n];
    if let Some(c) = computed {
        nodes.insert(0, node("Neg", &["given"], &["negated"]));
        nodes.insert(1, node("Neg", &["negated"], &[c]));
    }
    let input: Vec<ValueInfoProto> = inputs
        .iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, t)| {
            let dims: Vec<Option<i64>> = t.shape.iter().map(|&d| Some(d as i64)).collect();
            let name = if Some(*name) == computed {
                "given"
            } else {
                name
            };
            value(name, onnx_code(t.dtype).unwrap(), &dims)
        })
        .collect();
    let output = outs
        .iter()
        .map(|o| ValueInfoProto {
            name: Some(o.clone()),
            ..Default::default()
        })
        .collect();
    let graph = GraphProto {
        node: nodes,
        input,
        output,
        ..Default::default()
    };
    let mut opset_import = vec![OperatorSetIdProto {
        domain: Some(String::new()),
        version: Some(opset),
    }];
    if !domain.is_empty() {
        opset_import.push(OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(if domain == "ai.onnx.ml" { 3 } else { 1 }),
        });
    }
    let m = ModelProto {
        ir_version: Some(9),
        opset_import,
        graph: Some(graph),
        ..Default::default()
    };
    Model::from_bytes(&m.encode_to_vec()).unwrap()
}

struct Case {
    op: &'static str,
    domain: &'static str,
    opset: i64,
    inputs: Vec<(&'static str, HostTensor)>,
    attrs: Vec<AttributeProto>,
    outputs: usize,
    /// What the error must say: the input and its rule.
    says: &'static str,
}

fn case(
    op: &'static str,
    opset: i64,
    inputs: Vec<(&'static str, HostTensor)>,
    attrs: Vec<AttributeProto>,
    says: &'static str,
) -> Case {
    Case {
        op,
        domain: "",
        opset,
        inputs,
        attrs,
        outputs: 1,
        says,
    }
}

fn cases() -> Vec<Case> {
    let scores = || ("scores", f32s(&[3, 4]));
    let x4 = || ("X", f32s(&[1, 2, 5, 5]));
    let q = || ("Q", f32s(&[1, 2, 3, 4]));
    let k = || ("K", f32s(&[1, 2, 5, 4]));
    let v = || ("V", f32s(&[1, 2, 5, 4]));
    let rnn_x = || ("X", f32s(&[2, 1, 3]));
    let mut all = vec![
        case(
            "SoftmaxCrossEntropyLoss",
            22,
            vec![scores(), ("target", i64s(&[2], &[0, 1]))],
            vec![],
            "target has shape [2]; it must be [3], the scores' shape [3, 4] without its class axis",
        ),
        case(
            "NegativeLogLikelihoodLoss",
            22,
            vec![
                scores(),
                ("target", i64s(&[3], &[0, 1, 2])),
                ("weight", f32s(&[3])),
            ],
            vec![],
            "weight has shape [3]; it must be [4], one weight per class",
        ),
        case(
            "NegativeLogLikelihoodLoss",
            22,
            vec![scores(), ("target", i64s(&[3], &[0, 1, 7]))],
            vec![int_attr("ignore_index", -1)],
            "target's element 2 is 7; a class must be in 0..4 (or ignore_index -1)",
        ),
        case(
            "RoiAlign",
            22,
            vec![
                x4(),
                ("rois", f32s(&[2, 3])),
                ("batch_indices", i64s(&[2], &[0, 0])),
            ],
            vec![],
            "rois has shape [2, 3]; it must be [num_rois, 4]",
        ),
        case(
            "RoiAlign",
            22,
            vec![
                x4(),
                ("rois", f32s(&[2, 4])),
                ("batch_indices", i64s(&[2], &[0, 3])),
            ],
            vec![],
            "batch_indices[1] is 3; it must be in 0..1",
        ),
        case(
            "TensorScatter",
            24,
            vec![
                ("past_cache", f32s(&[2, 3, 8, 4])),
                ("update", f32s(&[2, 3, 2, 5])),
            ],
            vec![],
            "update has shape [2, 3, 2, 5]; it must be past_cache's [2, 3, 8, 4] but along axis 2",
        ),
        case(
            "TensorScatter",
            24,
            vec![
                ("past_cache", f32s(&[2, 3, 8, 4])),
                ("update", f32s(&[2, 3, 2, 4])),
                ("write_indices", i64s(&[2], &[0, 7])),
            ],
            vec![],
            "write_indices[1] is 7; in linear mode an update of 2 must be written at 0..=6",
        ),
        case(
            "MaxUnpool",
            22,
            vec![
                ("X", f32s(&[1, 1, 2, 2])),
                ("I", i64s(&[1, 1, 3, 2], &[0; 6])),
            ],
            vec![ints_attr("kernel_shape", &[2, 2]), ints_attr("strides", &[2, 2])],
            "I has shape [1, 1, 3, 2]; it must be [1, 1, 2, 2]",
        ),
        case(
            "TfIdfVectorizer",
            21,
            vec![("X", i64s(&[2, 2, 3], &[0, 1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1]))],
            tf_idf_attrs(),
            "X has shape [2, 2, 3]; TfIdfVectorizer takes [C] or [N, C]",
        ),
        case(
            "TfIdfVectorizer",
            21,
            vec![("X", i64s(&[], &[2]))],
            tf_idf_attrs(),
            "X has shape []; TfIdfVectorizer takes [C] or [N, C]",
        ),
        case(
            "MaxUnpool",
            22,
            vec![
                ("X", f32s(&[1, 1, 2, 2])),
                ("I", i64s(&[1, 1, 2, 2], &[0, 3, -1, 15])),
            ],
            vec![ints_attr("kernel_shape", &[2, 2]), ints_attr("strides", &[2, 2])],
            "I's element 2 is -1; it must be in 0..16, a position of the unpooled tensor",
        ),
        case(
            "DeformConv",
            22,
            vec![
                ("X", f32s(&[1, 1, 4, 4])),
                ("W", f32s(&[1, 1, 2, 2])),
                ("offset", f32s(&[1, 7, 3, 3])),
            ],
            vec![],
            "offset has shape [1, 7, 3, 3]; it must be [1, 8, 3, 3]",
        ),
        case(
            "RotaryEmbedding",
            23,
            vec![
                ("X", f32s(&[1, 2, 3, 4])),
                ("cos_cache", f32s(&[3, 3])),
                ("sin_cache", f32s(&[3, 3])),
            ],
            vec![],
            "cos_cache has shape [3, 3]; it must be [1, 3, 2]",
        ),
        case(
            "RotaryEmbedding",
            23,
            vec![
                ("X", f32s(&[1, 2, 3, 4])),
                ("cos_cache", f32s(&[8, 2])),
                ("sin_cache", f32s(&[8, 2])),
                ("position_ids", i64s(&[1, 3], &[0, 1, 9])),
            ],
            vec![],
            "position_ids' element 2 is 9; it must be in 0..8",
        ),
        case(
            "Attention",
            23,
            vec![q(), k(), ("V", f32s(&[1, 2, 6, 4]))],
            vec![],
            "V is [batch 1, heads 2, sequence 6, head size 4]; it must have K's batch, heads and sequence",
        ),
        case(
            "Attention",
            23,
            vec![q(), k(), v(), ("attn_mask", f32s(&[3, 9]))],
            vec![],
            "attn_mask has shape [3, 9]; it must broadcast to [1, 2, 3, at most 5]",
        ),
        case(
            "QuantizeLinear",
            21,
            vec![("x", f32s(&[2, 3])), ("y_scale", f32s(&[4]))],
            vec![int_attr("axis", 1)],
            "y_scale has shape [4]; it must be [3]",
        ),
        case(
            "DequantizeLinear",
            21,
            vec![
                ("x", HostTensor::from_vec(vec![2, 3], &[1i8; 6]).unwrap()),
                ("x_scale", f32s(&[3])),
                ("x_zero_point", HostTensor::from_vec(vec![2], &[0i8; 2]).unwrap()),
            ],
            vec![],
            "x_zero_point has shape [2]; it must be [3], x_scale's shape",
        ),
        case(
            "MatMulInteger",
            21,
            vec![
                ("A", HostTensor::from_vec(vec![2, 3], &[7u8; 6]).unwrap()),
                ("B", HostTensor::from_vec(vec![3, 4], &[9u8; 12]).unwrap()),
                ("a_zero_point", HostTensor::from_vec(vec![3], &[1u8, 2, 3]).unwrap()),
            ],
            vec![],
            "a_zero_point has shape [3]; it must be one value, or [2, 1]: one per row of A [2, 3]",
        ),
        case(
            "ConvInteger",
            21,
            vec![
                ("x", HostTensor::from_vec(vec![1, 2, 4, 4], &[3u8; 32]).unwrap()),
                ("w", HostTensor::from_vec(vec![3, 2, 2, 2], &[1u8; 24]).unwrap()),
                ("", f32s(&[1])),
                ("w_zero_point", HostTensor::from_vec(vec![2], &[0u8; 2]).unwrap()),
            ],
            vec![],
            "w_zero_point has shape [2]; it must be [3]: one value, or one per output channel",
        ),
        case(
            "RNN",
            22,
            vec![rnn_x(), ("W", f32s(&[1, 4, 2])), ("R", f32s(&[1, 4, 4]))],
            vec![int_attr("hidden_size", 4)],
            "W has shape [1, 4, 2]; it must be [1, 4, 3]",
        ),
        case(
            "LSTM",
            22,
            vec![
                rnn_x(),
                ("W", f32s(&[2, 16, 3])),
                ("R", f32s(&[2, 16, 4])),
                ("", f32s(&[1])),
                ("", f32s(&[1])),
                ("initial_h", f32s(&[2, 2, 4])),
            ],
            vec![
                int_attr("hidden_size", 4),
                string_attr("direction", "bidirectional"),
            ],
            "initial_h has shape [2, 2, 4]; it must be [2, 1, 4]",
        ),
        case(
            "LpNormalization",
            22,
            vec![("input", f32s(&[2, 3]))],
            vec![int_attr("axis", 2)],
            "axis 2 is out of range for the input of shape [2, 3]",
        ),
        case(
            "MeanVarianceNormalization",
            22,
            vec![("X", f32s(&[2, 3]))],
            vec![ints_attr("axes", &[0, 3])],
            "axes [0, 3] holds 3, which is out of range",
        ),
    ];
    all.push(Case {
        domain: "ai.onnx.preview",
        ..case(
            "FlexAttention",
            23,
            vec![q(), ("K", f32s(&[1, 2, 5, 3])), v()],
            vec![],
            "K is [batch 1, heads 2, sequence 5, head size 3]; with Q [batch 1, heads 2, sequence 3, head size 4] it must have Q's batch and head size",
        )
    });
    all.push(Case {
        domain: "ai.onnx.ml",
        ..case(
            "Scaler",
            22,
            vec![("X", f32s(&[2, 3]))],
            vec![
                floats_attr("offset", &[1.0, 2.0]),
                floats_attr("scale", &[1.0, 1.0]),
            ],
            "X has shape [2, 3]; its last axis must hold the 2 features",
        )
    });
    all.push(Case {
        domain: "ai.onnx.ml",
        ..case(
            "OneHotEncoder",
            22,
            vec![(
                "X",
                HostTensor::from_vec(vec![1, 2], &[1.5f32, 5.0]).unwrap(),
            )],
            vec![ints_attr("cats_int64s", &[1, 2, 3]), int_attr("zeros", 0)],
            "X's element 1 is 5, no category of cats_int64s; with zeros 0 every value must be one",
        )
    });
    all.push(Case {
        domain: "ai.onnx.ml",
        ..case(
            "Normalizer",
            22,
            vec![("X", f32s(&[2, 3, 4]))],
            vec![string_attr("norm", "L2")],
            "X has shape [2, 3, 4]; Normalizer takes [N, C] or [C]",
        )
    });
    all.push(Case {
        domain: "ai.onnx.ml",
        ..case(
            "TreeEnsembleRegressor",
            22,
            vec![("X", f32s(&[2, 3]))],
            vec![
                ints_attr("nodes_treeids", &[0, 0, 0]),
                ints_attr("nodes_nodeids", &[0, 1, 2]),
                ints_attr("nodes_featureids", &[5, 0, 0]),
                strings_attr("nodes_modes", &["BRANCH_LEQ", "LEAF", "LEAF"]),
                floats_attr("nodes_values", &[0.5, 0.0, 0.0]),
                ints_attr("nodes_truenodeids", &[1, 0, 0]),
                ints_attr("nodes_falsenodeids", &[2, 0, 0]),
                ints_attr("target_treeids", &[0, 0]),
                ints_attr("target_nodeids", &[1, 2]),
                ints_attr("target_ids", &[0, 0]),
                floats_attr("target_weights", &[1.0, 2.0]),
                int_attr("n_targets", 1),
            ],
            "X has shape [2, 3]; its last axis must hold at least 6 features, as the trees read feature 5",
        )
    });
    all.push(Case {
        domain: "ai.onnx.preview.training",
        outputs: 3,
        ..case(
            "Adam",
            22,
            vec![
                ("R", HostTensor::from_vec(vec![], &[0.1f32]).unwrap()),
                ("T", HostTensor::from_vec(vec![], &[0i64]).unwrap()),
                ("X", f32s(&[3])),
                ("G", f32s(&[4])),
                ("V", f32s(&[3])),
                ("H", f32s(&[3])),
            ],
            vec![],
            "G1 has shape [4]; it must be [3], X1's shape",
        )
    });
    all
}

#[test]
fn broken_input_rules_are_refused_by_rule_on_the_gpu_and_in_the_interpreter() {
    for c in cases() {
        let m = model(c.op, c.domain, c.opset, &c.inputs, c.attrs, c.outputs);
        let given: Vec<(String, HostTensor)> = c
            .inputs
            .iter()
            .filter(|(n, _)| !n.is_empty())
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        let gpu = m
            .clone()
            .session(common::ctx())
            .unwrap()
            .run_blocking(given.clone())
            .expect_err(c.says)
            .to_string();
        assert!(
            gpu.contains("node 'rule\\n1'")
                && gpu.contains(&format!("{}: {}", c.op, c.says))
                && gpu.lines().count() == 1,
            "{}: {gpu}",
            c.op
        );
        let cpu = reference::graph::run_graph(&m.graph, &given, &Default::default())
            .expect_err(c.says)
            .0;
        assert!(cpu.contains(c.says), "{} (interpreter): {cpu}", c.op);
    }
}

/// The same ops on inputs that keep the rules run (their values are checked against
/// onnxruntime by the differential cases): the check refuses nothing it should not.
#[test]
fn inputs_that_keep_the_rules_run() {
    let runs = [
        case(
            "SoftmaxCrossEntropyLoss",
            22,
            vec![
                ("scores", f32s(&[3, 4, 2])),
                ("target", i64s(&[3, 2], &[0, 1, 2, 3, -5, 0])),
            ],
            vec![int_attr("ignore_index", -5)],
            "",
        ),
        case(
            "TensorScatter",
            24,
            vec![
                ("past_cache", f32s(&[2, 3, 8, 4])),
                ("update", f32s(&[2, 3, 2, 4])),
                ("write_indices", i64s(&[2], &[0, 6])),
            ],
            vec![],
            "",
        ),
        case(
            "Attention",
            23,
            vec![
                ("Q", f32s(&[1, 3, 8])),
                ("K", f32s(&[1, 5, 4])),
                ("V", f32s(&[1, 5, 6])),
                ("attn_mask", f32s(&[3, 4])),
            ],
            vec![int_attr("q_num_heads", 2), int_attr("kv_num_heads", 1)],
            "",
        ),
        // No query head: zero is a multiple of the key heads.
        case(
            "Attention",
            23,
            vec![
                ("Q", f32s(&[1, 0, 3, 4])),
                ("K", f32s(&[1, 2, 5, 4])),
                ("V", f32s(&[1, 2, 5, 4])),
            ],
            vec![],
            "",
        ),
        case(
            "QuantizeLinear",
            21,
            vec![("x", f32s(&[2, 6])), ("y_scale", f32s(&[2, 2]))],
            vec![int_attr("axis", 1), int_attr("block_size", 4)],
            "",
        ),
        case(
            "QLinearMatMul",
            21,
            vec![
                ("a", HostTensor::from_vec(vec![2, 3], &[7u8; 6]).unwrap()),
                ("a_scale", f32s(&[2, 1])),
                (
                    "a_zero_point",
                    HostTensor::from_vec(vec![2, 1], &[1u8, 2]).unwrap(),
                ),
                ("b", HostTensor::from_vec(vec![3, 4], &[9u8; 12]).unwrap()),
                ("b_scale", f32s(&[4])),
                (
                    "b_zero_point",
                    HostTensor::from_vec(vec![1, 4], &[0u8; 4]).unwrap(),
                ),
                ("y_scale", f32s(&[])),
                (
                    "y_zero_point",
                    HostTensor::from_vec(vec![], &[128u8]).unwrap(),
                ),
            ],
            vec![],
            "",
        ),
        Case {
            domain: "ai.onnx.ml",
            ..case("Normalizer", 22, vec![("X", f32s(&[3]))], vec![], "")
        },
        Case {
            domain: "ai.onnx.ml",
            ..case(
                "OneHotEncoder",
                22,
                vec![("X", i64s(&[1, 2], &[1, 5]))],
                vec![ints_attr("cats_int64s", &[1, 2, 3]), int_attr("zeros", 1)],
                "",
            )
        },
    ];
    for c in runs {
        let m = model(c.op, c.domain, c.opset, &c.inputs, c.attrs, c.outputs);
        let given: Vec<(String, HostTensor)> = c
            .inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        let out = m.session(common::ctx()).unwrap().run_blocking(given);
        assert!(out.is_ok(), "{}: {:?}", c.op, out.err());
    }
}

/// `CheckInputs` is a node of the graph format too: it outputs `true` for inputs that keep
/// the rules of the op it names, refuses others by the rule, and refuses an op it has no
/// rules for in one line.
#[test]
fn check_inputs_nodes_of_graphs() {
    use wgpu_ops::graph::Attr;
    use wgpu_ops::{Graph, Node, Session};
    let graph = |op: &str| {
        Graph::new()
            .constant("scores", f32s(&[3, 4]))
            .input("target", wgpu_ops::DType::I64, &[Some(3)])
            .node(
                Node::new("CheckInputs", "check\n1")
                    .inputs(["scores", "target"])
                    .outputs(["ok"])
                    .attr("op", Attr::String(op.into())),
            )
            .output("ok")
    };
    let run = |op: &str, target: &[i64]| {
        Session::new(common::ctx(), graph(op))
            .and_then(|s| s.run_blocking(vec![("target".into(), i64s(&[3], target))]))
    };
    let ok = run("NegativeLogLikelihoodLoss", &[0, 3, 2]).unwrap();
    assert_eq!(ok[0].1.data, vec![1u8]);
    let e = run("NegativeLogLikelihoodLoss", &[0, 4, 2])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("node 'check\\n1'")
            && e.contains("target's element 1 is 4; a class must be in 0..4"),
        "{e}"
    );
    let e = run("Made\nUp", &[0, 1, 2]).unwrap_err().to_string();
    assert!(
        e.contains("CheckInputs has no rules for op 'Made\\nUp'") && e.lines().count() == 1,
        "{e}"
    );
}

/// A case of a rule on values: the op, its domain and opset, its inputs, its attributes, and
/// the input whose values the rule is on.
type ValueCase = (
    &'static str,
    &'static str,
    i64,
    Vec<(&'static str, HostTensor)>,
    Vec<AttributeProto>,
    &'static str,
);

/// TensorScatter (`mode` empty: not given) with `write_indices` `w`.
fn scatter_case(w: &[i64], mode: &str) -> ValueCase {
    let mut attrs = vec![];
    if !mode.is_empty() {
        attrs.push(string_attr("mode", mode));
    }
    (
        "TensorScatter",
        "",
        24,
        vec![
            ("past_cache", f32s(&[2, 3, 8, 4])),
            ("update", f32s(&[2, 3, 2, 4])),
            ("write_indices", i64s(&[2], w)),
        ],
        attrs,
        "write_indices",
    )
}

/// RotaryEmbedding with caches of 5 rows and `position_ids` `ids`.
fn rotary_case(ids: &[i64]) -> ValueCase {
    (
        "RotaryEmbedding",
        "",
        23,
        vec![
            ("X", f32s(&[1, 2, 3, 4])),
            ("cos_cache", f32s(&[5, 2])),
            ("sin_cache", f32s(&[5, 2])),
            ("position_ids", i64s(&[1, 3], ids)),
        ],
        vec![],
        "position_ids",
    )
}

/// OneHotEncoder of categories 1, 2, 3 on `x`.
fn one_hot_case(x: &[i64], zeros: i64) -> ValueCase {
    (
        "OneHotEncoder",
        "ai.onnx.ml",
        22,
        vec![("X", i64s(&[2, 2], x))],
        vec![
            ints_attr("cats_int64s", &[1, 2, 3]),
            int_attr("zeros", zeros),
        ],
        "X",
    )
}

/// TfIdfVectorizer's attributes: counts of the unigrams 2 and 3.
fn tf_idf_attrs() -> Vec<AttributeProto> {
    vec![
        string_attr("mode", "TF"),
        int_attr("min_gram_length", 1),
        int_attr("max_gram_length", 1),
        int_attr("max_skip_count", 0),
        ints_attr("ngram_counts", &[0]),
        ints_attr("ngram_indexes", &[0, 1]),
        ints_attr("pool_int64s", &[2, 3]),
    ]
}

/// MaxUnpool of a 2x2 window and stride to 4x4, with indices `i`.
fn max_unpool_case(i: &[i64]) -> ValueCase {
    (
        "MaxUnpool",
        "",
        22,
        vec![("X", f32s(&[1, 1, 2, 2])), ("I", i64s(&[1, 1, 2, 2], i))],
        vec![
            ints_attr("kernel_shape", &[2, 2]),
            ints_attr("strides", &[2, 2]),
        ],
        "I",
    )
}

/// The feeds of `inputs`, the `computed` one (see [`model_computing`]) given as `given`.
fn given_as(inputs: &[(&str, HostTensor)], computed: Option<&str>) -> Vec<(String, HostTensor)> {
    inputs
        .iter()
        .map(|(n, t)| {
            let n = if Some(*n) == computed { "given" } else { n };
            (n.to_string(), t.clone())
        })
        .collect()
}

/// The rules on values that no kernel of the op's expansion checks, on values computed on the
/// GPU: TensorScatter's write indices (a negative one would count from the cache's end),
/// RotaryEmbedding's position ids and MaxUnpool's indices (likewise), OneHotEncoder's values
/// with `zeros` 0 (a value of no category would give zeros). The run fails after its commands with the same line
/// the rule gives for values known on the host; the interpreter refuses them too, and
/// values that keep the rules run and agree with it.
#[test]
fn value_rules_hold_for_values_computed_on_the_gpu() {
    let refused = [
        (
            max_unpool_case(&[0, 3, 8, -1]),
            "MaxUnpool: I's element 3 is -1; it must be in 0..16, a position of the unpooled tensor",
        ),
        (
            max_unpool_case(&[16, 3, 8, 1]),
            "MaxUnpool: I's element 0 is 16; it must be in 0..16, a position of the unpooled tensor",
        ),
        (
            scatter_case(&[0, -1], ""),
            "TensorScatter: write_indices[1] is -1; in linear mode an update of 2 must be written at 0..=6 of the cache's 8",
        ),
        (
            scatter_case(&[7, 0], "linear"),
            "TensorScatter: write_indices[0] is 7; in linear mode an update of 2 must be written at 0..=6 of the cache's 8",
        ),
        (
            scatter_case(&[3, -2], "circular"),
            "TensorScatter: write_indices[1] is -2; in circular mode an update of 2 must be written at 0..=9223372036854775807 of the cache's 8",
        ),
        (
            rotary_case(&[0, 4, -1]),
            "RotaryEmbedding: position_ids' element 2 is -1; it must be in 0..5, a row of cos_cache",
        ),
        (
            rotary_case(&[5, 0, 1]),
            "RotaryEmbedding: position_ids' element 0 is 5; it must be in 0..5, a row of cos_cache",
        ),
        (
            one_hot_case(&[1, 3, 7, 2], 0),
            "OneHotEncoder: X's element 2 is 7, no category of cats_int64s; with zeros 0 every value must be one",
        ),
    ];
    let session_of = |m: &Model| m.clone().session(common::ctx()).unwrap();
    for ((op, domain, opset, inputs, attrs, computed), says) in refused {
        let m = model_computing(op, domain, opset, &inputs, attrs, 1, Some(computed));
        let given = given_as(&inputs, Some(computed));
        let e = session_of(&m).run_blocking(given.clone()).expect_err(says);
        // Read on the GPU: reported after the run, not refused while planning.
        assert!(
            matches!(e, wgpu_ops::Error::IndexOutOfRange { .. }),
            "{op}: {e:?}"
        );
        assert_eq!(e.to_string(), format!("node 'rule\\n1': {says}"));
        let cpu = reference::graph::run_graph(&m.graph, &given, &Default::default())
            .expect_err(says)
            .0;
        assert!(cpu.contains(says), "{op} (interpreter): {cpu}");
    }
    let kept = [
        scatter_case(&[0, 6], ""),
        scatter_case(&[7, 5], "circular"),
        rotary_case(&[0, 4, 2]),
        one_hot_case(&[1, 3, 3, 2], 0),
        max_unpool_case(&[0, 3, 8, 15]),
    ];
    for (op, domain, opset, inputs, attrs, computed) in kept {
        let m = model_computing(op, domain, opset, &inputs, attrs, 1, Some(computed));
        let given = given_as(&inputs, Some(computed));
        let gpu = session_of(&m).run_blocking(given.clone()).unwrap();
        let cpu = reference::graph::run_graph(&m.graph, &given, &Default::default()).unwrap();
        assert_eq!(gpu[0].1.shape, cpu[0].shape, "{op}");
        common::assert_close(&gpu[0].1, &cpu[0], 1e-5, 1e-6, op);
    }
}

/// `CheckValues` as a node of the graph format: `true` where every value lies in the bounds'
/// range or is a kept one; else the message with the value's position, the value and the
/// bounds put in: while planning for values known there (a graph input), after the run for
/// values computed on the GPU (i64, i32, or f32 read as i64); an op it does not check is
/// refused in one line.
#[test]
fn check_values_nodes_of_graphs() {
    use wgpu_ops::graph::Attr;
    use wgpu_ops::{DType, Graph, Node, Session};
    let graph = |op: &str, values: &str| {
        Graph::new()
            .input("w", DType::I64, &[Some(3)])
            .constant("bounds", i64s(&[3], &[-5, 3, 8]))
            .constant("kept", i64s(&[2], &[7, 20]))
            .node(Node::new("Neg", "neg1").inputs(["w"]).outputs(["n1"]))
            .node(Node::new("Neg", "neg2").inputs(["n1"]).outputs(["v"]))
            .node(
                Node::new("Cast", "to_f32")
                    .inputs(["v"])
                    .outputs(["vf"])
                    .attr("to", Attr::String("f32".into())),
            )
            .node(
                Node::new("Cast", "to_i32")
                    .inputs(["v"])
                    .outputs(["vi"])
                    .attr("to", Attr::String("i32".into())),
            )
            .node(
                Node::new("CheckValues", "check\n1")
                    .inputs([values, "bounds", "kept"])
                    .outputs(["checked"])
                    .attr("op", Attr::String(op.into()))
                    .attr("input", Attr::String("write_indices".into()))
                    .attr(
                        "message",
                        Attr::String("element {i} is {v}; in {b0}..={b1} (of {b2}) or kept".into()),
                    ),
            )
            .output("checked")
    };
    let run = |op: &str, values: &str, w: &[i64]| {
        Session::new(common::ctx(), graph(op, values))
            .and_then(|s| s.run_blocking(vec![("w".into(), i64s(&[3], w))]))
    };
    for values in ["v", "vi", "vf", "w"] {
        for w in [[0, 3, -2], [-5, 7, 20]] {
            let ok = run("TensorScatter", values, &w).unwrap();
            assert_eq!(ok[0].1.data, vec![1u8], "{values} {w:?}");
        }
        for (w, says) in [
            ([0, 3, 6], "element 2 is 6; in -5..=3 (of 8) or kept"),
            ([-6, 21, 4], "element 0 is -6; in -5..=3 (of 8) or kept"),
            // Out of range by its high word alone (as i32: cast to 0, in range).
            (
                [0, 1 << 32, 1],
                "element 1 is 4294967296; in -5..=3 (of 8) or kept",
            ),
        ] {
            if values == "vi" && w[1] == 1 << 32 {
                continue;
            }
            let e = run("TensorScatter", values, &w).unwrap_err();
            // Values on the GPU are reported after the run; a graph input's while planning.
            assert_eq!(
                matches!(e, wgpu_ops::Error::IndexOutOfRange { .. }),
                values != "w",
                "{values}: {e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!("node 'check\\n1': TensorScatter: {says}"),
                "{values}"
            );
        }
    }
    let e = run("Made\nUp", "v", &[0, 1, 2]).unwrap_err().to_string();
    assert!(
        e.contains("CheckValues checks the values of TensorScatter, RotaryEmbedding, ")
            && e.contains("not of 'Made\\nUp'")
            && e.lines().count() == 1,
        "{e}"
    );
}

/// A rule on values known while planning (a graph input) is checked there: its
/// `CheckValues` costs no dispatch; on values computed on the GPU it costs one (its kernel).
/// Measured against the same graph without its `CheckValues` node.
#[test]
fn value_rules_on_values_known_while_planning_cost_no_dispatch() {
    let ctx = common::own_ctx();
    let dispatches = |graph: &wgpu_ops::Graph, given: &[(String, HostTensor)]| {
        let session = wgpu_ops::Session::new(&ctx, graph.clone()).unwrap();
        // Graph inputs known while planning: on the host values.
        session.set_uploads_inputs_first(false);
        let before = ctx.stats().dispatches;
        session.run_blocking(given.to_vec()).unwrap();
        ctx.stats().dispatches - before
    };
    // Uploaded before planning, as `run` does by default, graph inputs are checked on the GPU.
    let uploaded_first = |graph: &wgpu_ops::Graph, given: &[(String, HostTensor)]| {
        let session = wgpu_ops::Session::new(&ctx, graph.clone()).unwrap();
        let before = ctx.stats().dispatches;
        session.run_blocking(given.to_vec()).unwrap();
        ctx.stats().dispatches - before
    };
    let loss = |op: &'static str, label: &'static str| {
        (
            op,
            "",
            22,
            vec![("scores", f32s(&[3, 4])), (label, i64s(&[3], &[0, -1, 3]))],
            vec![int_attr("ignore_index", -1)],
            label,
        )
    };
    let cases = [
        scatter_case(&[0, 6], "linear"),
        rotary_case(&[0, 4, 2]),
        one_hot_case(&[1, 3, 3, 2], 0),
        max_unpool_case(&[0, 3, 8, 15]),
        loss("NegativeLogLikelihoodLoss", "target"),
        loss("SoftmaxCrossEntropyLoss", "labels"),
    ];
    for (op, domain, opset, inputs, attrs, checked) in cases {
        for computed in [None, Some(checked)] {
            let m = model_computing(op, domain, opset, &inputs, attrs.clone(), 1, computed);
            let given = given_as(&inputs, computed);
            let mut unchecked = m.graph.clone();
            let before = unchecked.nodes.len();
            unchecked.nodes.retain(|n| n.op != "CheckValues");
            assert_eq!(before - unchecked.nodes.len(), 1, "{op}: one CheckValues");
            let cost = dispatches(&m.graph, &given) - dispatches(&unchecked, &given);
            // On the GPU: the check, and for TensorScatter and OneHotEncoder the computed
            // values themselves, which without the check fuse into their one reader of values
            // (TensorScatter's Reshape, Add; OneHotEncoder's Cast to i64; a Shape of them reads
            // no values).
            let expected = match computed {
                None => 0,
                Some(_) => 1 + u64::from(matches!(op, "TensorScatter" | "OneHotEncoder")),
            };
            assert_eq!(cost, expected, "{op} {computed:?}");
            if computed.is_none() {
                let cost = uploaded_first(&m.graph, &given) - uploaded_first(&unchecked, &given);
                assert_eq!(cost, 1, "{op}, uploaded first");
            }
        }
    }
    // OneHotEncoder with `zeros` 0 costs what it costs with `zeros` 1 on a graph input.
    let cost = |zeros| {
        let (op, domain, opset, inputs, attrs, _) = one_hot_case(&[1, 3, 3, 2], zeros);
        let m = model(op, domain, opset, &inputs, attrs, 1);
        dispatches(&m.graph, &given_as(&inputs, None))
    };
    assert_eq!(cost(0), cost(1));
}
