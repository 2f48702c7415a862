//! The ONNX loader on models built here with the protobuf types: initializers in every storage
//! (raw, typed fields, external files), symbolic dimensions, model-local functions, Scan-8 with
//! a batch, unsupported ops listed with counts, and hostile files refused with one error.

mod common;

use prost::Message;
use wgpu_ops::onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataLocation, tensor_proto::DataType, type_proto,
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TypeProto, ValueInfoProto,
};
use wgpu_ops::onnx::Model;
use wgpu_ops::{Context, ContextOptions, HostTensor};

use common::onnx_proto::{floats_attr, int_attr, ints_attr, node, value};

fn model(graph: GraphProto, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

fn run(m: &Model, inputs: Vec<(&str, HostTensor)>) -> Vec<HostTensor> {
    let session = m.clone().session(common::ctx()).unwrap();
    session
        .run_blocking(inputs.into_iter().map(|(n, t)| (n.into(), t)).collect())
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// `y = x + a + b + c`: `a` in raw bytes, `b` in `float_data`, `c` in an external file.
#[test]
fn initializers_in_every_storage_and_symbolic_dimensions() {
    let dir = tempfile::tempdir().unwrap();
    let c_values = [10f32, 20., 30.];
    let mut file = vec![0u8; 7]; // the tensor starts at offset 7
    file.extend(c_values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(dir.path().join("weights.bin"), &file).unwrap();
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    let graph = GraphProto {
        node: vec![
            node("Add", &["x", "a"], &["xa"]),
            node("Add", &["xa", "b"], &["xab"]),
            node("Add", &["xab", "c"], &["y"]),
        ],
        initializer: vec![
            TensorProto {
                name: Some("a".into()),
                dims: vec![3],
                data_type: Some(DataType::Float as i32),
                raw_data: Some(
                    [1f32, 2., 3.]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                ),
                ..Default::default()
            },
            TensorProto {
                name: Some("b".into()),
                dims: vec![3],
                data_type: Some(DataType::Float as i32),
                float_data: vec![100., 200., 300.],
                ..Default::default()
            },
            TensorProto {
                name: Some("c".into()),
                dims: vec![3],
                data_type: Some(DataType::Float as i32),
                data_location: Some(DataLocation::External as i32),
                external_data: vec![
                    entry("location", "weights.bin"),
                    entry("offset", "7"),
                    entry("length", "12"),
                ],
                ..Default::default()
            },
        ],
        input: vec![value("x", DataType::Float, &[None, Some(3)])],
        output: vec![value("y", DataType::Float, &[None, Some(3)])],
        ..Default::default()
    };
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model(graph, 17).encode_to_vec()).unwrap();
    let m = Model::load(&path).unwrap();
    assert_eq!(m.graph.inputs[0].shape, Some(vec![None, Some(3)]));
    let x = HostTensor::from_vec(vec![2, 3], &[0f32, 0., 0., 1., 1., 1.]).unwrap();
    let y = run(&m, vec![("x", x)]);
    assert_eq!(f32s(&y[0]), [111., 222., 333., 112., 223., 334.]);

    // From bytes there is no folder to read the external file from: one clear error.
    let e = Model::from_bytes(&std::fs::read(&path).unwrap()).unwrap_err();
    assert!(
        e.to_string()
            .contains("external data needs the model's folder"),
        "{e}"
    );
}

/// The 6-bit floats (opset 28): raw bytes hold them packed, four in three bytes (element `i`
/// at bits `6 i` up); `int32_data` one code each (its bits above the low 6 ignored). Values
/// from ml_dtypes' float6_e2m3fn and float6_e3m2fn.
#[test]
fn six_bit_floats_from_raw_bytes_and_int32_data() {
    let codes = [0x01, 0x3f, 0x15, 0x2a, 0x07];
    let tensor = |name: &str, dtype: DataType, raw: bool| TensorProto {
        name: Some(name.into()),
        dims: vec![5],
        data_type: Some(dtype as i32),
        raw_data: raw.then(|| vec![0xc1, 0x5f, 0xa9, 0x07]),
        int32_data: if raw {
            vec![]
        } else {
            codes.iter().map(|&c| c | 0x40).collect()
        },
        ..Default::default()
    };
    for (dtype, want) in [
        (DataType::Float6e2m3, [0.125f32, -7.5, 3.25, -1.25, 0.875]),
        (DataType::Float6e3m2, [0.0625, -28.0, 5.0, -0.75, 0.4375]),
    ] {
        let mut cast = node("Cast", &["raw"], &["from_raw"]);
        cast.attribute = vec![int_attr("to", DataType::Float as i64)];
        let mut cast_typed = node("Cast", &["typed"], &["from_typed"]);
        cast_typed.attribute = cast.attribute.clone();
        let graph = GraphProto {
            node: vec![cast, cast_typed],
            initializer: vec![tensor("raw", dtype, true), tensor("typed", dtype, false)],
            output: vec![
                value("from_raw", DataType::Float, &[Some(5)]),
                value("from_typed", DataType::Float, &[Some(5)]),
            ],
            ..Default::default()
        };
        let m = Model::from_bytes(&model(graph, 28).encode_to_vec()).unwrap();
        let y = run(&m, vec![]);
        assert_eq!(f32s(&y[0]), want, "{dtype:?} raw");
        assert_eq!(f32s(&y[1]), want, "{dtype:?} int32_data");
    }
    // Raw bytes of the wrong length for 5 packed elements (4 bytes) are refused.
    let mut short = tensor("raw", DataType::Float6e2m3, true);
    short.raw_data = Some(vec![0; 5]);
    let graph = GraphProto {
        node: vec![node("Identity", &["raw"], &["y"])],
        initializer: vec![short],
        output: vec![value("y", DataType::Float6e2m3, &[Some(5)])],
        ..Default::default()
    };
    let e = Model::from_bytes(&model(graph, 28).encode_to_vec()).unwrap_err();
    assert!(e.to_string().contains("raw_data holds 5 bytes"), "{e}");
}

/// QuantizeLinear-28 to the 6-bit floats and DequantizeLinear back, per axis with a zero
/// point of the type: `x / scale + zero point` rounded as Cast rounds to the type (the host's
/// nearest-value search), then `(q - zero point) * scale`.
#[test]
fn six_bit_floats_quantize_and_dequantize() {
    use wgpu_ops::minifloat::{decode, encode};
    use wgpu_ops::{CastMode, DType};
    const ROW: usize = 10;
    let values = [
        0.1f32,
        -3.3,
        100.0,
        -f32::NAN,
        1.0,
        f32::NAN,
        2.6,
        -1e9,
        0.3,
        -0.02,
    ];
    let x: Vec<f32> = (0..2 * ROW).map(|i| values[i % values.len()]).collect();
    let scales = [0.5f32, 0.25];
    for (dtype, code) in [
        (DType::F6E2M3, DataType::Float6e2m3),
        (DType::F6E3M2, DataType::Float6e3m2),
    ] {
        let zero_points = [0x01u8, 0x21];
        let zp = TensorProto {
            name: Some("zp".into()),
            dims: vec![2],
            data_type: Some(code as i32),
            int32_data: zero_points.iter().map(|&c| i32::from(c)).collect(),
            ..Default::default()
        };
        let scale = TensorProto {
            name: Some("scale".into()),
            dims: vec![2],
            data_type: Some(DataType::Float as i32),
            float_data: scales.to_vec(),
            ..Default::default()
        };
        let mut quantize = node("QuantizeLinear", &["x", "scale", "zp"], &["q"]);
        quantize.attribute = vec![int_attr("axis", 0)];
        let mut dequantize = node("DequantizeLinear", &["q", "scale", "zp"], &["y"]);
        dequantize.attribute = vec![int_attr("axis", 0)];
        let graph = GraphProto {
            node: vec![quantize, dequantize],
            initializer: vec![scale, zp],
            input: vec![value("x", DataType::Float, &[Some(2), Some(ROW as i64)])],
            output: vec![
                value("q", code, &[Some(2), Some(ROW as i64)]),
                value("y", DataType::Float, &[Some(2), Some(ROW as i64)]),
            ],
            ..Default::default()
        };
        let m = Model::from_bytes(&model(graph, 28).encode_to_vec()).unwrap();
        let y = run(
            &m,
            vec![("x", HostTensor::from_vec(vec![2, ROW], &x).unwrap())],
        );
        let (mut want_q, mut want_y) = (Vec::new(), Vec::new());
        for (i, &v) in x.iter().enumerate() {
            let (s, z) = (scales[i / ROW], decode(dtype, zero_points[i / ROW]));
            let q = encode(dtype, v / s + z, CastMode::default());
            want_q.push(q);
            want_y.push((decode(dtype, q) - z) * s);
        }
        assert_eq!(y[0].dtype, dtype);
        assert_eq!(y[0].data, want_q, "{dtype} q");
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(bits(f32s(&y[1])), bits(want_y), "{dtype} y");
    }
}

#[test]
fn external_data_outside_the_model_folder_is_refused() {
    for location in ["../secret.bin", "/etc/passwd"] {
        let graph = GraphProto {
            node: vec![node("Identity", &["c"], &["y"])],
            initializer: vec![TensorProto {
                name: Some("c".into()),
                dims: vec![1],
                data_type: Some(DataType::Float as i32),
                data_location: Some(DataLocation::External as i32),
                external_data: vec![StringStringEntryProto {
                    key: Some("location".into()),
                    value: Some(location.into()),
                }],
                ..Default::default()
            }],
            output: vec![value("y", DataType::Float, &[Some(1)])],
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, model(graph, 17).encode_to_vec()).unwrap();
        let e = Model::load(&path).unwrap_err().to_string();
        assert!(e.contains("leaves the model's folder"), "{location}: {e}");
    }
}

#[test]
fn hostile_bytes_and_sizes_are_one_error() {
    let garbage = Model::from_bytes(&[0xff, 0xff, 0xff, 0x0f, 0x08]).unwrap_err();
    assert!(
        garbage.to_string().starts_with("model: not an ONNX model"),
        "{garbage}"
    );
    // Shapes of 2^62 and 2^32 elements with 4 bytes of data: refused before allocating.
    for (dims, why) in [
        (vec![1 << 31, 1 << 31], "has too many bytes"),
        (vec![1 << 30, 4], "raw_data holds 4 bytes"),
    ] {
        let graph = GraphProto {
            node: vec![node("Identity", &["c"], &["y"])],
            initializer: vec![TensorProto {
                name: Some("c".into()),
                dims,
                data_type: Some(DataType::Float as i32),
                raw_data: Some(vec![0; 4]),
                ..Default::default()
            }],
            output: vec![value("y", DataType::Float, &[None])],
            ..Default::default()
        };
        let e = Model::from_bytes(&model(graph, 17).encode_to_vec()).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
}

/// `graph` at opset 17 with `function` in the domain "local", loaded.
fn with_local_function(graph: GraphProto, function: FunctionProto) -> Model {
    let mut m = model(graph, 17);
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("local".into()),
        version: Some(1),
    });
    m.functions.push(function);
    Model::from_bytes(&m.encode_to_vec()).unwrap()
}

/// A model-local function called twice, with an attribute reference and a default.
#[test]
fn local_functions_are_inlined() {
    // AddThenScale(X, Y) = (X + Y) * Cast(Constant(value_int = scale))
    let mut constant = node("Constant", &[], &["s_int"]);
    constant.attribute.push(AttributeProto {
        name: Some("value_int".into()),
        ref_attr_name: Some("scale".into()),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    });
    let mut cast = node("Cast", &["s_int"], &["s"]);
    cast.attribute.push(int_attr("to", DataType::Float as i64));
    let function = FunctionProto {
        name: Some("AddThenScale".into()),
        domain: Some("local".into()),
        input: vec!["X".into(), "Y".into()],
        output: vec!["Z".into()],
        attribute_proto: vec![int_attr("scale", 2)],
        node: vec![
            node("Add", &["X", "Y"], &["sum"]),
            constant,
            cast,
            node("Mul", &["sum", "s"], &["Z"]),
        ],
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        ..Default::default()
    };
    let call = |inputs: &[&str], out: &str, scale: Option<i64>| {
        let mut n = node("AddThenScale", inputs, &[out]);
        n.domain = Some("local".into());
        n.attribute.extend(scale.map(|s| int_attr("scale", s)));
        n
    };
    let graph = GraphProto {
        node: vec![
            call(&["x", "x"], "p", Some(10)),
            call(&["p", "x"], "q", None),
        ],
        input: vec![value("x", DataType::Float, &[Some(2)])],
        output: vec![value("q", DataType::Float, &[Some(2)])],
        ..Default::default()
    };
    let m = with_local_function(graph, function);
    let x = HostTensor::from_vec(vec![2], &[1f32, 3.]).unwrap();
    // p = (x + x) * 10; q = (p + x) * 2
    assert_eq!(f32s(&run(&m, vec![("x", x)])[0]), [42., 126.]);
}

/// A function whose If branches define a value named as the caller's input: ONNX lets a
/// subgraph define a name its enclosing graphs have, so inlining must not rename the branch's
/// free `X` to the caller's `x` next to the branch's own `x` (skl2onnx's KNNImputer does this;
/// it was refused as a cycle).
#[test]
fn inlined_subgraphs_keep_their_own_names_apart_from_the_callers() {
    let graph_attr = |name: &str, g: GraphProto| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    };
    let branch = |op: &str, inputs: &[&str]| GraphProto {
        node: vec![node(op, inputs, &["x"])],
        output: vec![value("x", DataType::Float, &[Some(2)])],
        ..Default::default()
    };
    let mut cond = node("Constant", &[], &["c"]);
    cond.attribute.push(AttributeProto {
        name: Some("value_int".into()),
        i: Some(1),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    });
    let mut to_bool = node("Cast", &["c"], &["cb"]);
    to_bool
        .attribute
        .push(int_attr("to", DataType::Bool as i64));
    let mut choose = node("If", &["cb"], &["Z"]);
    choose
        .attribute
        .push(graph_attr("then_branch", branch("Add", &["X", "X"])));
    choose
        .attribute
        .push(graph_attr("else_branch", branch("Identity", &["X"])));
    let function = FunctionProto {
        name: Some("Twice".into()),
        domain: Some("local".into()),
        input: vec!["X".into()],
        output: vec!["Z".into()],
        node: vec![cond, to_bool, choose],
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        ..Default::default()
    };
    let mut call = node("Twice", &["x"], &["y"]);
    call.domain = Some("local".into());
    let graph = GraphProto {
        node: vec![call],
        input: vec![value("x", DataType::Float, &[Some(2)])],
        output: vec![value("y", DataType::Float, &[Some(2)])],
        ..Default::default()
    };
    let m = with_local_function(graph, function);
    let x = HostTensor::from_vec(vec![2], &[1.5f32, -4.]).unwrap();
    assert_eq!(f32s(&run(&m, vec![("x", x)])[0]), [3., -8.]);
}

/// Scan-8 with `sequence_lens` ([4, 2, 1] of 4 steps) as onnxruntime computes it: item `b`
/// runs its first `L_b` steps, its final state is the state after them, and its scan outputs
/// are those steps' followed by zeros. Lengths outside `1..=4` or of the wrong count are an
/// error before any GPU work. A reversed input runs its first `L_b` elements backwards.
#[test]
fn scan8_runs_each_batch_item_for_its_sequence_length() {
    let body = GraphProto {
        node: vec![
            node("Add", &["sum_in", "next"], &["sum_out"]),
            node("Mul", &["sum_out", "sum_out"], &["scan_out"]),
        ],
        input: vec![
            value("sum_in", DataType::Int64, &[Some(2)]),
            value("next", DataType::Int64, &[Some(2)]),
        ],
        output: vec![
            value("sum_out", DataType::Int64, &[Some(2)]),
            value("scan_out", DataType::Int64, &[Some(2)]),
        ],
        ..Default::default()
    };
    let init: Vec<i64> = vec![0, 0, 100, 100, -1, 1];
    let x: Vec<i64> = (0..24).map(|v| v * 3 - 20).collect();
    for reverse in [false, true] {
        let mut scan = node("Scan", &["lens", "initial", "x"], &["y", "z"]);
        scan.attribute.push(AttributeProto {
            name: Some("body".into()),
            r#type: Some(AttributeType::Graph as i32),
            g: Some(body.clone()),
            ..Default::default()
        });
        scan.attribute.push(int_attr("num_scan_inputs", 1));
        scan.attribute.push(AttributeProto {
            name: Some("directions".into()),
            r#type: Some(AttributeType::Ints as i32),
            ints: vec![i64::from(reverse)],
            ..Default::default()
        });
        let graph = GraphProto {
            node: vec![scan],
            input: vec![
                value("lens", DataType::Int64, &[None]),
                value("initial", DataType::Int64, &[Some(3), Some(2)]),
                value("x", DataType::Int64, &[Some(3), Some(4), Some(2)]),
            ],
            output: vec![
                value("y", DataType::Int64, &[Some(3), Some(2)]),
                value("z", DataType::Int64, &[Some(3), Some(4), Some(2)]),
            ],
            ..Default::default()
        };
        let m = Model::from_bytes(&model(graph, 8).encode_to_vec()).unwrap();
        let inputs = |lens: &[i64]| {
            vec![
                (
                    "lens",
                    HostTensor::from_vec(vec![lens.len()], lens).unwrap(),
                ),
                ("initial", HostTensor::from_vec(vec![3, 2], &init).unwrap()),
                ("x", HostTensor::from_vec(vec![3, 4, 2], &x).unwrap()),
            ]
        };
        let lens = [4usize, 2, 1];
        let out = run(&m, inputs(&[4, 2, 1]));
        let (mut want_y, mut want_z) = (vec![0i64; 6], vec![0i64; 24]);
        for b in 0..3 {
            let mut acc = [init[2 * b], init[2 * b + 1]];
            let order: Vec<usize> = if reverse {
                (0..lens[b]).rev().collect()
            } else {
                (0..lens[b]).collect()
            };
            for (k, t) in order.into_iter().enumerate() {
                for c in 0..2 {
                    acc[c] += x[b * 8 + t * 2 + c];
                    want_z[b * 8 + k * 2 + c] = acc[c] * acc[c];
                }
            }
            want_y[2 * b..2 * b + 2].copy_from_slice(&acc);
        }
        assert_eq!(out[0].to_vec::<i64>().unwrap(), want_y, "reverse {reverse}");
        assert_eq!(out[1].to_vec::<i64>().unwrap(), want_z, "reverse {reverse}");
        // With every length 4, what the Scan gives without sequence_lens.
        let full = run(&m, inputs(&[4, 4, 4]));
        assert!(full[1].to_vec::<i64>().unwrap().iter().all(|&v| v != 0));
        for bad in [&[0i64, 2, 1][..], &[4, 5, 1], &[4, 2]] {
            let session = m.clone().session(common::ctx()).unwrap();
            let e = session
                .run_blocking(
                    inputs(bad)
                        .into_iter()
                        .map(|(n, t)| (n.into(), t))
                        .collect(),
                )
                .unwrap_err()
                .to_string();
            assert!(e.contains("sequence_lens"), "{bad:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}

/// Scan-8 with `sequence_lens` and two scan inputs, the second reversed: item `b`'s step `k`
/// reads `a[k]` and `b[L_b - 1 - k]` (as onnxruntime 1.32.0 computes it; checked by hand on
/// this model, bit for bit). Compared with the ONNX node tests' float tolerance (rtol 1e-3,
/// atol 1e-7), since fusion may contract the Mul and Sub.
#[test]
fn scan8_sequence_lens_with_a_reversed_input() {
    let body = GraphProto {
        node: vec![
            node("Add", &["s", "a"], &["s1"]),
            node("Mul", &["s1", "b"], &["s2"]),
            node("Sub", &["s2", "a"], &["o"]),
        ],
        input: vec![
            value("s", DataType::Float, &[Some(2)]),
            value("a", DataType::Float, &[Some(2)]),
            value("b", DataType::Float, &[Some(2)]),
        ],
        output: vec![
            value("s2", DataType::Float, &[Some(2)]),
            value("o", DataType::Float, &[Some(2)]),
        ],
        ..Default::default()
    };
    let mut scan = node("Scan", &["lens", "init", "xa", "xb"], &["y", "z"]);
    scan.attribute.push(AttributeProto {
        name: Some("body".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(body),
        ..Default::default()
    });
    scan.attribute.push(int_attr("num_scan_inputs", 2));
    scan.attribute.push(AttributeProto {
        name: Some("directions".into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: vec![0, 1],
        ..Default::default()
    });
    let (batch, steps) = (5usize, 6usize);
    let (b_, t_) = (Some(batch as i64), Some(steps as i64));
    let graph = GraphProto {
        node: vec![scan],
        input: vec![
            value("lens", DataType::Int64, &[None]),
            value("init", DataType::Float, &[b_, Some(2)]),
            value("xa", DataType::Float, &[b_, t_, Some(2)]),
            value("xb", DataType::Float, &[b_, t_, Some(2)]),
        ],
        output: vec![
            value("y", DataType::Float, &[b_, Some(2)]),
            value("z", DataType::Float, &[b_, t_, Some(2)]),
        ],
        ..Default::default()
    };
    let m = Model::from_bytes(&model(graph, 8).encode_to_vec()).unwrap();
    let lens = [6i64, 2, 3, 1, 5];
    let init: Vec<f32> = (0..10).map(|v| v as f32 * 0.25 - 1.0).collect();
    let xa: Vec<f32> = (0..60)
        .map(|v| ((v * 7) % 11) as f32 * 0.125 - 0.5)
        .collect();
    let xb: Vec<f32> = (0..60)
        .map(|v| ((v * 5) % 13) as f32 * 0.0625 + 0.5)
        .collect();
    let out = run(
        &m,
        vec![
            ("lens", HostTensor::from_vec(vec![batch], &lens).unwrap()),
            ("init", HostTensor::from_vec(vec![batch, 2], &init).unwrap()),
            (
                "xa",
                HostTensor::from_vec(vec![batch, steps, 2], &xa).unwrap(),
            ),
            (
                "xb",
                HostTensor::from_vec(vec![batch, steps, 2], &xb).unwrap(),
            ),
        ],
    );
    let (mut want_y, mut want_z) = (vec![0f32; 10], vec![0f32; 60]);
    for b in 0..batch {
        let len = lens[b] as usize;
        let mut s = [init[2 * b], init[2 * b + 1]];
        for k in 0..len {
            for c in 0..2 {
                let a = xa[(b * steps + k) * 2 + c];
                let r = xb[(b * steps + len - 1 - k) * 2 + c];
                s[c] = (s[c] + a) * r;
                want_z[(b * steps + k) * 2 + c] = s[c] - a;
            }
        }
        want_y[2 * b..2 * b + 2].copy_from_slice(&s);
    }
    for (got, want) in [(&out[0], &want_y), (&out[1], &want_z)] {
        for (g, w) in f32s(got).iter().zip(want.iter()) {
            assert!((g - w).abs() <= 1e-7 + 1e-3 * w.abs(), "{g} vs {w}");
        }
    }
}

/// Scan-8 over a batch of 3 (test_scan_sum has a batch of 1), one sequence reversed.
#[test]
fn scan8_runs_each_batch_item() {
    let body = GraphProto {
        node: vec![
            node("Add", &["sum_in", "next"], &["sum_out"]),
            node("Identity", &["sum_out"], &["scan_out"]),
        ],
        input: vec![
            value("sum_in", DataType::Float, &[Some(2)]),
            value("next", DataType::Float, &[Some(2)]),
        ],
        output: vec![
            value("sum_out", DataType::Float, &[Some(2)]),
            value("scan_out", DataType::Float, &[Some(2)]),
        ],
        ..Default::default()
    };
    let mut scan = node("Scan", &["", "initial", "x"], &["y", "z"]);
    scan.attribute.push(AttributeProto {
        name: Some("body".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(body),
        ..Default::default()
    });
    scan.attribute.push(int_attr("num_scan_inputs", 1));
    scan.attribute.push(AttributeProto {
        name: Some("directions".into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: vec![1],
        ..Default::default()
    });
    let graph = GraphProto {
        node: vec![scan],
        input: vec![
            value("initial", DataType::Float, &[Some(3), Some(2)]),
            value("x", DataType::Float, &[Some(3), Some(4), Some(2)]),
        ],
        output: vec![
            value("y", DataType::Float, &[Some(3), Some(2)]),
            value("z", DataType::Float, &[Some(3), Some(4), Some(2)]),
        ],
        ..Default::default()
    };
    let m = Model::from_bytes(&model(graph, 8).encode_to_vec()).unwrap();
    let init: Vec<f32> = vec![0., 0., 100., 100., -1., 1.];
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let out = run(
        &m,
        vec![
            ("initial", HostTensor::from_vec(vec![3, 2], &init).unwrap()),
            ("x", HostTensor::from_vec(vec![3, 4, 2], &x).unwrap()),
        ],
    );
    // Per batch item b, the running sum of its 4 steps taken last to first (direction 1).
    let (mut want_y, mut want_z) = (vec![0f32; 6], vec![0f32; 24]);
    for b in 0..3 {
        let mut acc = [init[2 * b], init[2 * b + 1]];
        for (k, t) in (0..4).rev().enumerate() {
            for c in 0..2 {
                acc[c] += x[b * 8 + t * 2 + c];
                want_z[b * 8 + k * 2 + c] = acc[c];
            }
        }
        want_y[2 * b..2 * b + 2].copy_from_slice(&acc);
    }
    assert_eq!(f32s(&out[0]), want_y);
    assert_eq!(f32s(&out[1]), want_z);
}

#[test]
fn unsupported_ops_are_listed_with_counts_before_gpu_work() {
    let graph = GraphProto {
        node: vec![
            node("Frobnicate", &["x"], &["v"]),
            node("Sprocket", &["x"], &["g"]),
            node("Frobnicate", &["g"], &["y"]),
            NodeProto {
                domain: Some("com.example".into()),
                ..node("Fancy", &["y"], &["z"])
            },
        ],
        input: vec![value("x", DataType::Float, &[Some(4)])],
        output: vec![value("z", DataType::Float, &[None])],
        ..Default::default()
    };
    let m = Model::from_bytes(&model(graph, 17).encode_to_vec()).unwrap();
    let e = m.session(common::ctx()).unwrap_err().to_string();
    assert_eq!(
        e,
        "model: unsupported ops: Frobnicate (2), Sprocket (1), com.example.Fancy (1) (see `wgpu-ops info` for the model's ops)"
    );
}

#[test]
fn inputs_sharing_a_symbolic_dimension_must_agree() {
    // x [batch, 1] + y [batch]: numpy broadcasting alone would accept batches 3 and 4.
    let graph = GraphProto {
        node: vec![node("Add", &["x", "y"], &["z"])],
        input: vec![
            value("x", DataType::Float, &[None, Some(1)]),
            value("y", DataType::Float, &[None]),
        ],
        output: vec![value("z", DataType::Float, &[None, None])],
        ..Default::default()
    };
    let m = Model::from_bytes(&model(graph, 17).encode_to_vec()).unwrap();
    assert_eq!(
        m.graph.symbolic_dims["batch"],
        [("x".to_string(), 0), ("y".to_string(), 0)]
    );
    let x = HostTensor::from_vec(vec![3, 1], &[1f32, 2., 3.]).unwrap();
    let same = HostTensor::from_vec(vec![3], &[10f32, 20., 30.]).unwrap();
    let out = run(&m, vec![("x", x.clone()), ("y", same)]);
    assert_eq!(out[0].shape, [3, 3]);
    let other = HostTensor::from_vec(vec![4], &[10f32, 20., 30., 40.]).unwrap();
    let session = m.session(common::ctx()).unwrap();
    let e = session
        .run_blocking(vec![("x".into(), x), ("y".into(), other)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input 'y' has 4 along axis 0 but input 'x' has 3 along axis 0; both are the dimension 'batch'"),
        "{e}"
    );
}

/// Values in [-1, 1) from `seed` (a fixed generator, so failures reproduce).
fn uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// One forward step of an ONNX recurrent layer on the host, in f64, with default activations:
/// `x` [batch, input], states [batch, hidden], direction 0's W, R and B.
struct Layer<'a> {
    op: &'a str,
    hidden: usize,
    linear_before_reset: bool,
    /// `clip`: the pre-activations of the gates bounded to [-clip, clip].
    clip: Option<f64>,
    w: &'a [f32],
    r: &'a [f32],
    b: &'a [f32],
}

impl Layer<'_> {
    fn gates(&self) -> usize {
        match self.op {
            "RNN" => 1,
            "GRU" => 3,
            _ => 4,
        }
    }

    /// Gate `k`'s pre-activations for item `b`: x W_k' + Wb_k (from `x`) and h R_k' + Rb_k
    /// (from `h`), apart.
    fn terms(&self, k: usize, x: &[f64], h: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (hd, g) = (self.hidden, self.gates());
        let row = |m: &[f32], j: usize, v: &[f64]| -> f64 {
            v.iter()
                .enumerate()
                .map(|(c, &e)| f64::from(m[j * v.len() + c]) * e)
                .sum()
        };
        let xs = (0..hd)
            .map(|j| row(self.w, k * hd + j, x) + f64::from(self.b[k * hd + j]))
            .collect();
        let hs = (0..hd)
            .map(|j| row(self.r, k * hd + j, h) + f64::from(self.b[(g + k) * hd + j]))
            .collect();
        (xs, hs)
    }

    fn step(&self, x: &[f64], h: &[f64], c: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let cl = |v: f64| self.clip.map_or(v, |c| v.clamp(-c, c));
        let sig = |v: f64| 1.0 / (1.0 + (-cl(v)).exp());
        let tanh = |v: &f64| cl(*v).tanh();
        let sum = |(a, b): (Vec<f64>, Vec<f64>)| -> Vec<f64> {
            a.iter().zip(&b).map(|(a, b)| a + b).collect()
        };
        match self.op {
            "RNN" => (sum(self.terms(0, x, h)).iter().map(tanh).collect(), vec![]),
            "GRU" => {
                let z: Vec<f64> = sum(self.terms(0, x, h)).into_iter().map(sig).collect();
                let r: Vec<f64> = sum(self.terms(1, x, h)).into_iter().map(sig).collect();
                let candidate: Vec<f64> = if self.linear_before_reset {
                    let (xs, hs) = self.terms(2, x, h);
                    (0..self.hidden)
                        .map(|j| tanh(&(xs[j] + r[j] * hs[j])))
                        .collect()
                } else {
                    let reset: Vec<f64> = h.iter().zip(&r).map(|(h, r)| h * r).collect();
                    sum(self.terms(2, x, &reset)).iter().map(tanh).collect()
                };
                let next = (0..self.hidden)
                    .map(|j| (1.0 - z[j]) * candidate[j] + z[j] * h[j])
                    .collect();
                (next, vec![])
            }
            _ => {
                // Gates i, o, f, c.
                let i: Vec<f64> = sum(self.terms(0, x, h)).into_iter().map(sig).collect();
                let o: Vec<f64> = sum(self.terms(1, x, h)).into_iter().map(sig).collect();
                let f: Vec<f64> = sum(self.terms(2, x, h)).into_iter().map(sig).collect();
                let g: Vec<f64> = sum(self.terms(3, x, h)).iter().map(tanh).collect();
                let c_next: Vec<f64> = (0..self.hidden)
                    .map(|j| f[j] * c[j] + i[j] * g[j])
                    .collect();
                let h_next = (0..self.hidden).map(|j| o[j] * c_next[j].tanh()).collect();
                (h_next, c_next)
            }
        }
    }
}

/// ONNX RNN, GRU (both ways of applying the reset gate) and LSTM layers load as Scans whose
/// steps take one dispatch per gate at most: each gate's product computes its gate in its
/// epilogue, GRU's candidate product the new state and LSTM's the new cell state (the output
/// gate's, H), and the input terms x_t W_k' run before the loop for all steps. Counted as the
/// dispatches of 11 steps less those of 3; the outputs are checked against the layers'
/// equations on the host (f64) at onnxruntime's float tolerance for these layers in its own
/// tests (rtol 1e-3, atol 1e-5).
#[test]
fn recurrent_layers_take_one_dispatch_per_gate_and_step() {
    let (batch, input, hidden) = (3usize, 5usize, 8usize);
    for (op, lbr, clip, most_per_step) in [
        ("RNN", false, None, 1),
        ("GRU", false, None, 3),
        ("GRU", true, None, 3),
        ("LSTM", false, None, 4),
        // With the bounds of clip.
        ("RNN", false, Some(0.5), 1),
        ("GRU", false, Some(0.5), 3),
        ("LSTM", false, Some(0.5), 4),
    ] {
        let g = match op {
            "RNN" => 1,
            "GRU" => 3,
            _ => 4,
        };
        let w = uniform(1, g * hidden * input);
        let r = uniform(2, g * hidden * hidden);
        let b = uniform(3, 2 * g * hidden);
        let layer = Layer {
            op,
            hidden,
            linear_before_reset: lbr,
            clip,
            w: &w,
            r: &r,
            b: &b,
        };
        let outputs: &[&str] = if op == "LSTM" {
            &["Y", "Y_h", "Y_c"]
        } else {
            &["Y", "Y_h"]
        };
        let mut layer_node = node(op, &["X", "W", "R", "B"], outputs);
        layer_node
            .attribute
            .push(int_attr("hidden_size", hidden as i64));
        if lbr {
            layer_node
                .attribute
                .push(int_attr("linear_before_reset", 1));
        }
        if let Some(c) = clip {
            layer_node.attribute.push(AttributeProto {
                name: Some("clip".into()),
                r#type: Some(AttributeType::Float as i32),
                f: Some(c as f32),
                ..Default::default()
            });
        }
        let f = DataType::Float;
        let graph = GraphProto {
            node: vec![layer_node],
            input: vec![
                value("X", f, &[None, Some(batch as i64), Some(input as i64)]),
                value(
                    "W",
                    f,
                    &[Some(1), Some((g * hidden) as i64), Some(input as i64)],
                ),
                value(
                    "R",
                    f,
                    &[Some(1), Some((g * hidden) as i64), Some(hidden as i64)],
                ),
                value("B", f, &[Some(1), Some((2 * g * hidden) as i64)]),
            ],
            output: outputs
                .iter()
                .map(|o| {
                    let mut v = value(o, f, &[]);
                    if let Some(type_proto::Value::TensorType(t)) =
                        v.r#type.as_mut().and_then(|t| t.value.as_mut())
                    {
                        t.shape = None;
                    }
                    v
                })
                .collect(),
            ..Default::default()
        };
        let bytes = model(graph, 22).encode_to_vec();
        // Also with the GPU kernels and the states kept in their buffers (as larger states
        // are): each state is then copied into its output row, one more dispatch per step.
        let states_in_buffers = Context::new_blocking(ContextOptions {
            cpu_kernels: Some(false),
            scan_state_rows_max_bytes: Some(0),
            ..Default::default()
        })
        .unwrap();
        for (ctx, row_copies) in [(common::own_ctx(), 0), (states_in_buffers, 1)] {
            let session = Model::from_bytes(&bytes).unwrap().session(&ctx).unwrap();
            let mut dispatches = Vec::new();
            let mut buffers = Vec::new();
            // 11 steps twice: the second run takes every buffer from the first (the input terms
            // computed before the loop included).
            for (run, seq) in [3usize, 11, 11].into_iter().enumerate() {
                let x = uniform(4 + (seq + run) as u64, seq * batch * input);
                let inputs = vec![
                    (
                        "X".to_string(),
                        HostTensor::from_vec(vec![seq, batch, input], &x).unwrap(),
                    ),
                    (
                        "W".into(),
                        HostTensor::from_vec(vec![1, g * hidden, input], &w).unwrap(),
                    ),
                    (
                        "R".into(),
                        HostTensor::from_vec(vec![1, g * hidden, hidden], &r).unwrap(),
                    ),
                    (
                        "B".into(),
                        HostTensor::from_vec(vec![1, 2 * g * hidden], &b).unwrap(),
                    ),
                ];
                let before = ctx.stats();
                let got = session.run_blocking(inputs).unwrap();
                dispatches.push(ctx.stats().dispatches - before.dispatches);
                buffers.push(ctx.stats().buffers_created - before.buffers_created);
                // The host's steps: Y [seq, 1, batch, hidden], Y_h and Y_c [1, batch, hidden].
                let mut y = Vec::new();
                let (mut hs, mut cs) = (Vec::new(), Vec::new());
                for item in 0..batch {
                    let (mut h, mut c) = (vec![0.0; hidden], vec![0.0; hidden]);
                    let mut ys = Vec::new();
                    for t in 0..seq {
                        let at = (t * batch + item) * input;
                        let xt: Vec<f64> = x[at..at + input].iter().map(|&v| v.into()).collect();
                        let (h_next, c_next) = layer.step(&xt, &h, &c);
                        h = h_next;
                        c = c_next;
                        ys.push(h.clone());
                    }
                    y.push(ys);
                    hs.extend(h);
                    cs.extend(c);
                }
                let y: Vec<f64> = (0..seq)
                    .flat_map(|t| y.iter().flat_map(move |ys| ys[t].clone()))
                    .collect();
                let want = |shape: Vec<usize>, v: &[f64]| {
                    let v: Vec<f32> = v.iter().map(|&e| e as f32).collect();
                    HostTensor::from_vec(shape, &v).unwrap()
                };
                let what = format!("{op} linear_before_reset {lbr} clip {clip:?}, {seq} steps");
                common::assert_close(
                    &got[0].1,
                    &want(vec![seq, 1, batch, hidden], &y),
                    1e-3,
                    1e-5,
                    &what,
                );
                common::assert_close(
                    &got[1].1,
                    &want(vec![1, batch, hidden], &hs),
                    1e-3,
                    1e-5,
                    &what,
                );
                if op == "LSTM" {
                    common::assert_close(
                        &got[2].1,
                        &want(vec![1, batch, hidden], &cs),
                        1e-3,
                        1e-5,
                        &what,
                    );
                }
            }
            let per_step = (dispatches[1] - dispatches[0]) as f64 / 8.0;
            let most = most_per_step + row_copies;
            assert!(
            per_step <= most as f64,
            "{op} linear_before_reset {lbr} clip {clip:?}, {row_copies} row copies: {per_step} dispatches per step (at most {most}), {dispatches:?}"
        );
            assert_eq!(
            buffers[2], 0,
            "{op} linear_before_reset {lbr} clip {clip:?}, {row_copies} row copies: buffers created per run {buffers:?}"
        );
        }
    }
}

/// Attention's attributes outside the specification are refused when the model loads, with
/// one line naming the node and the rule.
#[test]
fn attention_refuses_attributes_outside_the_specification() {
    let f = DataType::Float;
    for (attrs, why) in [
        (
            vec![int_attr("q_num_heads", 4)],
            "q_num_heads and kv_num_heads together",
        ),
        (
            vec![int_attr("q_num_heads", 4), int_attr("kv_num_heads", 3)],
            "a multiple of kv_num_heads",
        ),
        (
            vec![int_attr("qk_matmul_output_mode", 4)],
            "qk_matmul_output_mode 4 is not 0 to 3",
        ),
        (
            vec![int_attr("softmax_precision", 7)],
            "softmax_precision 7 is not 1, 10, 11 or 16",
        ),
        (
            vec![int_attr("left_window_size", -2)],
            "left_window_size -2 is below -1",
        ),
    ] {
        let mut n = node("Attention", &["Q", "K", "V"], &["Y"]);
        n.name = Some("attn\n1".into());
        n.attribute = attrs;
        let graph = GraphProto {
            node: vec![n],
            input: ["Q", "K", "V"]
                .iter()
                .map(|i| value(i, f, &[Some(1), Some(2), Some(3), Some(4)]))
                .collect(),
            output: vec![value("Y", f, &[None])],
            ..Default::default()
        };
        let e = Model::from_bytes(&model(graph, 23).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("attn\\n1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// LpNormalization divides by the L1 or L2 norm along its axis, and gives zeros where that
/// norm is zero (ONNX-22), checked against the host in f64 at rtol 1e-6.
#[test]
fn lp_normalization_divides_by_the_norm_and_zero_norms_give_zero() {
    let f = DataType::Float;
    let (rows, cols) = (3usize, 4usize);
    let mut x = uniform(9, rows * cols);
    for v in &mut x[cols..2 * cols] {
        *v = 0.0; // a zero row: its norm along axis 1 is zero
    }
    let ctx = common::own_ctx();
    for (p, axis) in [(1i64, 1i64), (2, 1), (2, 0), (1, -1)] {
        let mut n = node("LpNormalization", &["x"], &["y"]);
        n.attribute = vec![int_attr("p", p), int_attr("axis", axis)];
        let graph = GraphProto {
            node: vec![n],
            input: vec![value("x", f, &[Some(rows as i64), Some(cols as i64)])],
            output: vec![value("y", f, &[Some(rows as i64), Some(cols as i64)])],
            ..Default::default()
        };
        let session = Model::from_bytes(&model(graph, 22).encode_to_vec())
            .unwrap()
            .session(&ctx)
            .unwrap();
        let got = session
            .run_blocking(vec![(
                "x".into(),
                HostTensor::from_vec(vec![rows, cols], &x).unwrap(),
            )])
            .unwrap();
        let along_rows = axis == 0;
        let want: Vec<f32> = (0..rows * cols)
            .map(|i| {
                let (r, c) = (i / cols, i % cols);
                let line: Vec<f64> = if along_rows {
                    (0..rows).map(|k| f64::from(x[k * cols + c])).collect()
                } else {
                    (0..cols).map(|k| f64::from(x[r * cols + k])).collect()
                };
                let norm = if p == 1 {
                    line.iter().map(|v| v.abs()).sum::<f64>()
                } else {
                    line.iter().map(|v| v * v).sum::<f64>().sqrt()
                };
                if norm == 0.0 {
                    0.0
                } else {
                    (f64::from(x[i]) / norm) as f32
                }
            })
            .collect();
        common::assert_close(
            &got[0].1,
            &HostTensor::from_vec(vec![rows, cols], &want).unwrap(),
            1e-6,
            0.0,
            &format!("p {p} axis {axis}"),
        );
    }
}

/// Attention's q_num_heads/kv_num_heads (and RotaryEmbedding's num_heads) mark 3-D inputs: a
/// 4-D input with them is refused when the model runs, with the node named, rather than read
/// as 3-D.
#[test]
fn head_counts_on_four_dimensional_inputs_are_refused() {
    let f = DataType::Float;
    let dims = [Some(1), Some(2), Some(3), Some(4)];
    let x = HostTensor::from_vec(vec![1, 2, 3, 4], &uniform(5, 24)).unwrap();
    let ctx = common::own_ctx();
    let mut attention = node("Attention", &["Q", "K", "V"], &["Y"]);
    attention.name = Some("attn".into());
    attention.attribute = vec![int_attr("q_num_heads", 2), int_attr("kv_num_heads", 2)];
    let mut rope = node("RotaryEmbedding", &["Q", "K", "V"], &["Y"]);
    rope.name = Some("rope".into());
    rope.attribute = vec![int_attr("num_heads", 2)];
    for (n, name) in [(attention, "attn"), (rope, "rope")] {
        let graph = GraphProto {
            node: vec![n],
            input: ["Q", "K", "V"].iter().map(|i| value(i, f, &dims)).collect(),
            output: vec![value("Y", f, &[None])],
            ..Default::default()
        };
        let session = Model::from_bytes(&model(graph, 23).encode_to_vec())
            .unwrap()
            .session(&ctx)
            .unwrap();
        let e = session
            .run_blocking(["Q", "K", "V"].map(|i| (i.to_string(), x.clone())).to_vec())
            .unwrap_err()
            .to_string();
        println!("{e}");
        // The rule, not the inner node that would meet the 4-D input.
        assert!(
            e.contains(name)
                && e.contains("[1, 2, 3, 4]; with")
                && e.contains("[batch, sequence, 2 * head size]"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// MaxUnpool's geometry is checked when the model loads: one error line naming the node.
#[test]
fn max_unpool_refuses_bad_geometry() {
    let f = DataType::Float;
    let ints = ints_attr;
    for (attrs, why) in [
        (vec![], "needs kernel_shape"),
        (
            vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2])],
            "needs positive kernel_shape and strides of one length (2)",
        ),
        (
            vec![ints("kernel_shape", &[2, 0])],
            "needs positive kernel_shape",
        ),
    ] {
        let mut n = node("MaxUnpool", &["X", "I"], &["Y"]);
        n.name = Some("unpool\n1".into());
        n.attribute = attrs;
        let graph = GraphProto {
            node: vec![n],
            input: vec![
                value("X", f, &[Some(1), Some(1), Some(2), Some(2)]),
                value("I", DataType::Int64, &[Some(1), Some(1), Some(2), Some(2)]),
            ],
            output: vec![value("Y", f, &[None])],
            ..Default::default()
        };
        let e = Model::from_bytes(&model(graph, 22).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("unpool\\n1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// Upsample (opsets 7 and 9) enlarges: scales below 1, in its attribute or its input, are
/// refused in one line, as the spec and onnxruntime refuse them; scales of 1 and more run.
#[test]
fn upsample_refuses_scales_below_one() {
    let f = DataType::Float;
    let x = HostTensor::from_vec(vec![1, 1, 2, 2], &[1f32, 2., 3., 4.]).unwrap();
    for (opset, scales, refused) in [
        (7, [1f32, 1., 0.5, 2.], true),
        (9, [1., 1., 0.5, 2.], true),
        (7, [1., 1., 1., 2.], false),
        (9, [1., 1., 2., 1.], false),
    ] {
        let mut n = node("Upsample", &["X"], &["Y"]);
        let mut input = vec![value("X", f, &[Some(1), Some(1), Some(2), Some(2)])];
        if opset == 7 {
            n.attribute = vec![floats_attr("scales", &scales)];
        } else {
            n.input.push("S".into());
            input.push(value("S", f, &[Some(4)]));
        }
        let graph = GraphProto {
            node: vec![n],
            input,
            output: vec![value("Y", f, &[None])],
            ..Default::default()
        };
        let m = Model::from_bytes(&model(graph, opset).encode_to_vec()).unwrap();
        let mut inputs = vec![("X".to_string(), x.clone())];
        if opset == 9 {
            inputs.push(("S".into(), HostTensor::from_vec(vec![4], &scales).unwrap()));
        }
        let got = m.session(common::ctx()).unwrap().run_blocking(inputs);
        match got {
            Err(e) if refused => {
                let e = e.to_string();
                assert!(e.contains("at least 1") && e.lines().count() == 1, "{e}");
            }
            Ok(out) if !refused => {
                let want: Vec<usize> = [1, 1, 2, 2]
                    .iter()
                    .zip(scales)
                    .map(|(&d, s)| (d as f32 * s) as usize)
                    .collect();
                assert_eq!(out[0].1.shape, want, "opset {opset}");
            }
            other => panic!("opset {opset} scales {scales:?}: {other:?}"),
        }
    }
}

/// A list of maps other than ZipMap's (to f32) is refused in one line naming the value.
#[test]
fn lists_of_maps_other_than_zipmaps_are_refused() {
    let map = TypeProto {
        value: Some(type_proto::Value::MapType(Box::new(type_proto::Map {
            key_type: Some(DataType::Int64 as i32),
            value_type: Some(Box::new(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(DataType::Double as i32),
                    shape: None,
                })),
                ..Default::default()
            })),
        }))),
        ..Default::default()
    };
    let probabilities = ValueInfoProto {
        name: Some("output_probability".into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::SequenceType(Box::new(
                type_proto::Sequence {
                    elem_type: Some(Box::new(map)),
                },
            ))),
            ..Default::default()
        }),
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![node("Identity", &["X"], &["output_probability"])],
        input: vec![value("X", DataType::Float, &[Some(2)])],
        output: vec![probabilities],
        ..Default::default()
    };
    let e = Model::from_bytes(&model(graph, 17).encode_to_vec())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("output_probability") && e.contains("from strings or integers to floats"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// A map input loads with its types (`map(i64, f64)`); one of types no map op takes (keys
/// i32, values bool) is refused in one line naming the value.
#[test]
fn maps_load_with_their_types_and_others_are_refused() {
    let map_of = |key: DataType, values: DataType| TypeProto {
        value: Some(type_proto::Value::MapType(Box::new(type_proto::Map {
            key_type: Some(key as i32),
            value_type: Some(Box::new(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(values as i32),
                    shape: None,
                })),
                ..Default::default()
            })),
        }))),
        ..Default::default()
    };
    let graph = |ty: TypeProto| GraphProto {
        node: vec![node("CastMap", &["M"], &["y"])],
        input: vec![ValueInfoProto {
            name: Some("M".into()),
            r#type: Some(ty),
            ..Default::default()
        }],
        output: vec![value("y", DataType::Float, &[None, None])],
        ..Default::default()
    };
    let loaded = Model::from_bytes(
        &model(graph(map_of(DataType::Int64, DataType::Double)), 17).encode_to_vec(),
    )
    .unwrap();
    assert_eq!(
        loaded.graph.inputs[0].kind,
        wgpu_ops::graph::ValueKind::Map(
            wgpu_ops::MapType::new(true, Some(wgpu_ops::DType::F64)).unwrap()
        )
    );
    for (key, values, why) in [
        (
            DataType::Int32,
            DataType::Float,
            "keys other than i64 or strings",
        ),
        (
            DataType::String,
            DataType::Bool,
            "values other than f32, f64, i64 or strings",
        ),
    ] {
        let e = Model::from_bytes(&model(graph(map_of(key, values)), 17).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("'M'") && e.contains(why), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// TfIdfVectorizer's attributes are checked when the model loads: one error line naming the
/// node.
#[test]
fn tfidf_vectorizer_refuses_bad_attributes() {
    use common::onnx_proto::string_attr;
    let pool = || ints_attr("pool_int64s", &[1, 2, 3, 4]);
    for (attrs, why) in [
        (
            vec![
                pool(),
                ints_attr("ngram_counts", &[0, 3]),
                ints_attr("ngram_indexes", &[0, 1, 2]),
            ],
            "do not cut the pool of 4 values into n-grams",
        ),
        (
            vec![
                pool(),
                ints_attr("ngram_counts", &[0]),
                ints_attr("ngram_indexes", &[0, 1, 2, 3]),
                string_attr("mode", "BM25"),
            ],
            "mode 'BM25' is not TF, IDF or TFIDF",
        ),
        (
            vec![
                pool(),
                ints_attr("ngram_counts", &[0]),
                ints_attr("ngram_indexes", &[0, 1]),
                int_attr("max_gram_length", 1),
            ],
            "has fewer ngram_indexes (2) than n-grams",
        ),
        (
            vec![
                pool(),
                ints_attr("ngram_counts", &[0]),
                ints_attr("ngram_indexes", &[0, 1, 2, 3, -1]),
            ],
            "ngram_indexes holds -1",
        ),
        (
            vec![
                pool(),
                ints_attr("ngram_counts", &[0]),
                ints_attr("ngram_indexes", &[0, 1, 2, 3]),
                floats_attr("weights", &[1.0, 2.0]),
            ],
            "has 2 weights for 4 ngram_indexes",
        ),
    ] {
        let mut n = node("TfIdfVectorizer", &["X"], &["Y"]);
        n.name = Some("tfidf\n1".into());
        n.attribute = attrs;
        let graph = GraphProto {
            node: vec![n],
            input: vec![value("X", DataType::Int64, &[Some(2), Some(5)])],
            output: vec![value("Y", DataType::Float, &[None])],
            ..Default::default()
        };
        let e = Model::from_bytes(&model(graph, 9).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("tfidf\\n1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// The training optimizers check their inputs and mode when the model loads: one error line
/// naming the node.
#[test]
fn optimizers_refuse_bad_inputs_and_modes() {
    use common::onnx_proto::string_attr;
    for (op, inputs, outputs, attrs, why) in [
        (
            "Adam",
            vec!["R", "T", "X", "G", "V"],
            vec!["X_new", "V_new", "H_new"],
            vec![],
            "needs R, T and 4 tensors per group",
        ),
        (
            "Adagrad",
            vec!["R", "T", "X", "G", "H"],
            vec!["X_new"],
            vec![],
            "with 2 outputs per group",
        ),
        (
            "Momentum",
            vec!["R", "T", "X", "G", "V"],
            vec!["X_new", "V_new"],
            vec![string_attr("mode", "heavy")],
            "mode 'heavy' is not standard or nesterov",
        ),
    ] {
        let mut n = node(op, &inputs, &outputs);
        n.name = Some("opt\n1".into());
        n.domain = Some("ai.onnx.preview.training".into());
        n.attribute = attrs;
        let f = DataType::Float;
        let input: Vec<ValueInfoProto> = inputs
            .iter()
            .map(|i| value(i, if *i == "T" { DataType::Int64 } else { f }, &[]))
            .collect();
        let graph = GraphProto {
            node: vec![n],
            input,
            output: outputs.iter().map(|o| value(o, f, &[])).collect(),
            ..Default::default()
        };
        let mut m = model(graph, 17);
        m.opset_import.push(OperatorSetIdProto {
            domain: Some("ai.onnx.preview.training".into()),
            version: Some(1),
        });
        let e = Model::from_bytes(&m.encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("opt\\n1"), "{op}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// TensorScatter on a KV cache of an 8-bit float (circular, per-item write indices): the
/// codes land where the ONNX pseudocode puts them, bit for bit, with either kernel set and no
/// index per update element; bad attributes are one line.
#[test]
fn tensor_scatter_updates_an_f8_cache() {
    use common::onnx_proto::string_attr;
    let (b, h, max, d, seq) = (2usize, 2usize, 5usize, 3usize, 3usize);
    let mut n = node("TensorScatter", &["past", "update", "write"], &["present"]);
    n.attribute = vec![string_attr("mode", "circular")];
    let dims = |v: &[usize]| v.iter().map(|&x| Some(x as i64)).collect::<Vec<_>>();
    let graph = GraphProto {
        node: vec![n],
        input: vec![
            value("past", DataType::Float8e4m3fn, &dims(&[b, h, max, d])),
            value("update", DataType::Float8e4m3fn, &dims(&[b, h, seq, d])),
            value("write", DataType::Int64, &[Some(b as i64)]),
        ],
        output: vec![value("present", DataType::Float8e4m3fn, &[None])],
        ..Default::default()
    };
    let m = Model::from_bytes(&model(graph, 24).encode_to_vec()).unwrap();
    let past: Vec<u8> = (0..b * h * max * d).map(|i| (i % 120) as u8).collect();
    let update: Vec<u8> = (0..b * h * seq * d)
        .map(|i| 0x80 | (i % 100) as u8)
        .collect();
    let write = [1i64, 4];
    let f8 = |shape: &[usize], v: &[u8]| {
        HostTensor::from_bytes(wgpu_ops::DType::F8E4M3FN, shape.to_vec(), v.to_vec()).unwrap()
    };
    let got = run(
        &m,
        vec![
            ("past", f8(&[b, h, max, d], &past)),
            ("update", f8(&[b, h, seq, d], &update)),
            ("write", HostTensor::from_vec(vec![b], &write).unwrap()),
        ],
    );
    let mut want = past.clone();
    for bi in 0..b {
        for hi in 0..h {
            for s in 0..seq {
                let at = (write[bi] as usize + s) % max;
                for di in 0..d {
                    want[((bi * h + hi) * max + at) * d + di] =
                        update[((bi * h + hi) * seq + s) * d + di];
                }
            }
        }
    }
    assert_eq!(got[0].dtype, wgpu_ops::DType::F8E4M3FN);
    assert_eq!(got[0].data, want);
    // Both kernel sets (the GPU set applies every update at once), in three commands: the
    // check of the write indices (uploaded before planning, they are checked on the GPU), the
    // write positions, one per batch item and position (an Add of the write indices), and the
    // scatter, which repeats them over the heads and the head's elements. An index per update
    // element would take a fourth, and so would a copy of the cache: its upload is the run's
    // own, which the scatter updates where it lies.
    for cpu_kernels in [true, false] {
        let ctx = Context::new_blocking(ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        let session = m.clone().session(&ctx).unwrap();
        let commands = |s: wgpu_ops::Stats| s.dispatches + s.copies;
        // Later runs upload into the buffers of the first's and create none, however often
        // (the cache's upload, written over, is still kept for the next run's).
        for run in 0..4 {
            let (before, buffers) = (commands(ctx.stats()), ctx.stats().buffers_created);
            let got = session
                .run_blocking(vec![
                    ("past".into(), f8(&[b, h, max, d], &past)),
                    ("update".into(), f8(&[b, h, seq, d], &update)),
                    (
                        "write".into(),
                        HostTensor::from_vec(vec![b], &write).unwrap(),
                    ),
                ])
                .unwrap();
            let why = format!("cpu_kernels {cpu_kernels}, run {run}");
            assert_eq!(got[0].1.data, want, "{why}");
            assert_eq!(commands(ctx.stats()) - before, 3, "{why}");
            if run > 0 {
                assert_eq!(ctx.stats().buffers_created, buffers, "{why}");
            }
        }
    }

    for (attrs, why) in [
        (vec![int_attr("axis", 0)], "axis is 0, the batch axis"),
        (
            vec![string_attr("mode", "ring")],
            "mode is 'ring', not linear or circular",
        ),
    ] {
        let mut n = node("TensorScatter", &["past", "update"], &["present"]);
        n.name = Some("kv\n1".into());
        n.attribute = attrs;
        let graph = GraphProto {
            node: vec![n],
            input: vec![
                value("past", DataType::Float, &dims(&[1, 4, 2])),
                value("update", DataType::Float, &dims(&[1, 1, 2])),
            ],
            output: vec![value("present", DataType::Float, &[None])],
            ..Default::default()
        };
        let e = Model::from_bytes(&model(graph, 24).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("kv\\n1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// FlexAttention refuses inputs and attributes it cannot take, in one line naming the node.
/// A decode loop on the GPU: each step hands the cache the last step gave back to the session
/// (`run_tensors`, keeping no other handle), which writes the new position into it where it
/// lies, copying nothing. A cache the caller still holds is left as it was, and so is one that
/// a later node reads.
#[test]
fn a_handed_over_cache_is_updated_where_it_lies() {
    use wgpu_ops::Tensor;
    let (h, max, d) = (2usize, 6usize, 4usize);
    let dims = |v: &[usize]| v.iter().map(|&x| Some(x as i64)).collect::<Vec<_>>();
    let flat_shape = TensorProto {
        name: Some("flat_shape".into()),
        dims: vec![1],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![-1],
        ..Default::default()
    };
    let cache_shape = TensorProto {
        name: Some("cache_shape".into()),
        dims: vec![4],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![1, h as i64, max as i64, d as i64],
        ..Default::default()
    };
    let cache_model = |data: &str, extra: Vec<NodeProto>, outputs: &[&str]| {
        let mut nodes = extra;
        nodes.push(node(
            "TensorScatter",
            &[data, "update", "write"],
            &["present"],
        ));
        let graph = GraphProto {
            node: nodes,
            input: vec![
                value("past", DataType::Float, &dims(&[1, h, max, d])),
                value("update", DataType::Float, &dims(&[1, h, 1, d])),
                value("write", DataType::Int64, &[Some(1)]),
            ],
            output: outputs
                .iter()
                .map(|o| value(o, DataType::Float, &[None]))
                .collect(),
            initializer: vec![flat_shape.clone(), cache_shape.clone()],
            ..Default::default()
        };
        Model::from_bytes(&model(graph, 24).encode_to_vec()).unwrap()
    };
    let decode = cache_model("past", vec![], &["present"]);
    // `past` is read after the scatter: the scatter must not write over it.
    let reread = cache_model(
        "past",
        vec![node("Add", &["present", "past"], &["sum"])],
        &["present", "sum"],
    );
    // The scatter's data is a view of `past` (a Reshape shares its buffer), and another view
    // of it is an output.
    let viewed = cache_model(
        "past_viewed",
        vec![
            node("Reshape", &["past", "cache_shape"], &["past_viewed"]),
            node("Reshape", &["past", "flat_shape"], &["flat"]),
        ],
        &["present", "flat"],
    );
    let read = |t: &Tensor| t.to_host_blocking().unwrap().to_vec::<f32>().unwrap();
    for cpu_kernels in [true, false] {
        let ctx = Context::new_blocking(ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        let upload = |t: HostTensor| Tensor::from_host(&ctx, &t).unwrap();
        let step_inputs = |past: Tensor, step: usize| {
            let update: Vec<f32> = (0..h * d).map(|i| (100 * (step + 1) + i) as f32).collect();
            let inputs: Vec<(String, Tensor)> = vec![
                ("past".into(), past),
                (
                    "update".into(),
                    upload(HostTensor::from_vec(vec![1, h, 1, d], &update).unwrap()),
                ),
                (
                    "write".into(),
                    upload(HostTensor::from_vec(vec![1], &[step as i64]).unwrap()),
                ),
            ];
            (inputs, update)
        };
        let write = |cache: &mut Vec<f32>, update: &[f32], step: usize| {
            for hi in 0..h {
                let at = (hi * max + step) * d;
                cache[at..at + d].copy_from_slice(&update[hi * d..(hi + 1) * d]);
            }
        };
        // The write indices' range check, the write positions (an Add) and the scatter; a copy
        // of the cache would be a fourth.
        let commands = |s: wgpu_ops::Stats| s.dispatches + s.copies;
        let session = decode.clone().session(&ctx).unwrap();
        let mut want: Vec<f32> = (0..h * max * d).map(|i| -(i as f32)).collect();
        let mut cache = upload(HostTensor::from_vec(vec![1, h, max, d], &want).unwrap());
        for step in 0..max - 1 {
            let (inputs, update) = step_inputs(cache, step);
            write(&mut want, &update, step);
            let (before, buffers) = (commands(ctx.stats()), ctx.stats().buffers_created);
            let mut outputs = session.run_tensors_blocking(inputs).unwrap();
            let commands = commands(ctx.stats()) - before;
            assert_eq!(commands, 3, "cpu_kernels {cpu_kernels}, step {step}");
            // Nor does a step after the first create a buffer.
            if step > 0 {
                let created = ctx.stats().buffers_created - buffers;
                assert_eq!(created, 0, "cpu_kernels {cpu_kernels}, step {step}");
            }
            cache = outputs.remove(0).1;
            assert_eq!(read(&cache), want, "cpu_kernels {cpu_kernels}, step {step}");
        }

        // The caller keeps a handle: the run copies the cache and leaves it as it was.
        let step = max - 1;
        let (inputs, update) = step_inputs(cache.clone(), step);
        let before = commands(ctx.stats());
        let outputs = session.run_tensors_blocking(inputs).unwrap();
        let commands = commands(ctx.stats()) - before;
        assert_eq!(commands, 4, "cpu_kernels {cpu_kernels}");
        assert_eq!(read(&cache), want, "cpu_kernels {cpu_kernels}");
        let before = want.clone();
        write(&mut want, &update, step);
        assert_eq!(read(&outputs[0].1), want, "cpu_kernels {cpu_kernels}");

        // Handed over, but read again after the scatter.
        let session = reread.clone().session(&ctx).unwrap();
        let cache = upload(HostTensor::from_vec(vec![1, h, max, d], &before).unwrap());
        let (inputs, _) = step_inputs(cache, step);
        let outputs = session.run_tensors_blocking(inputs).unwrap();
        assert_eq!(read(&outputs[0].1), want, "cpu_kernels {cpu_kernels}");
        let sum: Vec<f32> = want.iter().zip(&before).map(|(a, b)| a + b).collect();
        assert_eq!(read(&outputs[1].1), sum, "cpu_kernels {cpu_kernels}");

        let session = viewed.clone().session(&ctx).unwrap();
        let cache = upload(HostTensor::from_vec(vec![1, h, max, d], &before).unwrap());
        let (inputs, _) = step_inputs(cache, step);
        let outputs = session.run_tensors_blocking(inputs).unwrap();
        assert_eq!(read(&outputs[0].1), want, "cpu_kernels {cpu_kernels}");
        assert_eq!(read(&outputs[1].1), before, "cpu_kernels {cpu_kernels}");
    }
}

#[test]
fn flex_attention_refuses_bad_attributes() {
    let mut bad_graph_attr = AttributeProto {
        name: Some("score_mod".into()),
        ..Default::default()
    };
    bad_graph_attr.set_type(AttributeType::Graph);
    bad_graph_attr.g = Some(GraphProto {
        input: vec![
            value("a", DataType::Float, &[None]),
            value("b", DataType::Float, &[None]),
        ],
        output: vec![value("a", DataType::Float, &[None])],
        ..Default::default()
    });
    for (inputs, attrs, why) in [
        (vec!["Q", "K"], vec![], "needs Q, K and V"),
        (
            vec!["Q", "K", "V"],
            vec![int_attr("softmax_precision", 7)],
            "softmax_precision 7 is not a float type",
        ),
        (
            vec!["Q", "K", "V"],
            vec![bad_graph_attr.clone()],
            "score_mod must take one input and give one output (it has 2 and 1)",
        ),
    ] {
        let mut n = node("FlexAttention", &inputs, &["Y"]);
        n.domain = Some("ai.onnx.preview".into());
        n.name = Some("flex\n1".into());
        n.attribute = attrs;
        let q = value("Q", DataType::Float, &[Some(1), Some(2), Some(3), Some(4)]);
        let graph = GraphProto {
            node: vec![n],
            input: ["Q", "K", "V"]
                .iter()
                .map(|name| ValueInfoProto {
                    name: Some(name.to_string()),
                    ..q.clone()
                })
                .collect(),
            output: vec![value("Y", DataType::Float, &[None])],
            ..Default::default()
        };
        let mut m = model(graph, 26);
        m.opset_import.push(OperatorSetIdProto {
            domain: Some("ai.onnx.preview".into()),
            version: Some(1),
        });
        let e = Model::from_bytes(&m.encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("flex\\n1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// RoiAlign refuses what it cannot compute, in one line naming the node: a negative sampling
/// ratio, an unknown mode or coordinate transformation, an empty output.
#[test]
fn roi_align_refuses_bad_sampling_and_modes() {
    use common::onnx_proto::string_attr;
    for (attrs, why) in [
        (
            vec![int_attr("sampling_ratio", -1)],
            "sampling_ratio is -1; it must be 0 (adaptive) or more",
        ),
        (
            vec![int_attr("sampling_ratio", 2), string_attr("mode", "min")],
            "mode is 'min', not avg or max",
        ),
        (
            vec![
                int_attr("sampling_ratio", 2),
                string_attr("coordinate_transformation_mode", "corners"),
            ],
            "coordinate_transformation_mode is 'corners'",
        ),
        (
            vec![int_attr("sampling_ratio", 2), int_attr("output_height", 0)],
            "output_height is 0; it must be at least 1",
        ),
    ] {
        let mut n = node("RoiAlign", &["X", "rois", "batch"], &["Y"]);
        n.name = Some("roi\n1".into());
        n.attribute = attrs;
        let graph = GraphProto {
            node: vec![n],
            input: vec![
                value("X", DataType::Float, &[Some(1), Some(1), Some(4), Some(4)]),
                value("rois", DataType::Float, &[Some(2), Some(4)]),
                value("batch", DataType::Int64, &[Some(2)]),
            ],
            output: vec![value("Y", DataType::Float, &[None])],
            ..Default::default()
        };
        let e = Model::from_bytes(&model(graph, 16).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("roi\\n1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// DeformConv refuses what it does not compute, in one line naming the node: a kernel that is
/// not 2-D, group or offset_group below 1, negative pads; and an X that is not 4-D when it
/// runs.
#[test]
fn deform_conv_refuses_other_ranks_and_bad_attributes() {
    let graph = |attrs: Vec<wgpu_ops::onnx::proto::AttributeProto>, x_dims: &[Option<i64>]| {
        let mut n = node("DeformConv", &["X", "W", "offset"], &["Y"]);
        n.name = Some("deform\t1".into());
        n.attribute = attrs;
        GraphProto {
            node: vec![n],
            input: vec![
                value("X", DataType::Float, x_dims),
                value("W", DataType::Float, &[Some(1), Some(1), Some(2), Some(2)]),
                value(
                    "offset",
                    DataType::Float,
                    &[Some(1), Some(8), Some(2), Some(2)],
                ),
            ],
            output: vec![value("Y", DataType::Float, &[None])],
            ..Default::default()
        }
    };
    let four = [Some(1), Some(1), Some(3), Some(3)];
    for (attrs, why) in [
        (
            vec![ints_attr("kernel_shape", &[2, 2, 2])],
            "DeformConv is supported in 2-D",
        ),
        (
            vec![int_attr("group", 0)],
            "group is 0; it must be at least 1",
        ),
        (
            vec![int_attr("offset_group", -1)],
            "offset_group is -1; it must be at least 1",
        ),
        (vec![ints_attr("pads", &[0, -1, 0, 0])], "at least 0"),
        (vec![ints_attr("strides", &[1])], "takes 2 values"),
    ] {
        let e = Model::from_bytes(&model(graph(attrs, &four), 19).encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("deform\\t1"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // A 3-D X loads (ranks are known only when it runs) and is refused then, by the rule.
    let three = [Some(1), Some(3), Some(3)];
    let session = Model::from_bytes(&model(graph(Vec::new(), &three), 19).encode_to_vec())
        .unwrap()
        .session(common::ctx())
        .unwrap();
    let x = HostTensor::from_vec(vec![1, 3, 3], &[0f32; 9]).unwrap();
    let w = HostTensor::from_vec(vec![1, 1, 2, 2], &[1f32; 4]).unwrap();
    let offset = HostTensor::from_vec(vec![1, 8, 2, 2], &[0f32; 32]).unwrap();
    let e = session
        .run_blocking(vec![
            ("X".into(), x),
            ("W".into(), w),
            ("offset".into(), offset),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("deform\\t1") && e.contains("X has shape [1, 3, 3]; it must be [N, C, H, W]"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// RoiAlign over an image of no row or no column gives zeros of the output's shape (what
/// onnxruntime gives, though its average mode reads past the image: its values are not
/// compared here), not an inner node's refusal of the empty axis.
#[test]
fn roi_align_over_an_empty_image_is_zeros() {
    let f = DataType::Float;
    for (shape, attrs, out) in [
        ([1, 2, 0, 3], vec![], [2, 2, 1, 1]),
        (
            [1, 2, 4, 0],
            vec![
                AttributeProto {
                    name: Some("mode".into()),
                    s: Some(b"max".to_vec()),
                    r#type: Some(AttributeType::String as i32),
                    ..Default::default()
                },
                int_attr("sampling_ratio", 2),
            ],
            [2, 2, 1, 1],
        ),
        (
            [2, 1, 0, 0],
            vec![int_attr("output_height", 2), int_attr("output_width", 3)],
            [2, 1, 2, 3],
        ),
    ] {
        let dims: Vec<Option<i64>> = shape.iter().map(|&d| Some(d)).collect();
        let mut n = node("RoiAlign", &["X", "rois", "batch"], &["Y"]);
        n.attribute = attrs;
        let graph = GraphProto {
            node: vec![n],
            input: vec![
                value("X", f, &dims),
                value("rois", f, &[Some(2), Some(4)]),
                value("batch", DataType::Int64, &[Some(2)]),
            ],
            output: vec![value("Y", f, &[None])],
            ..Default::default()
        };
        let m = Model::from_bytes(&model(graph, 16).encode_to_vec()).unwrap();
        let x = HostTensor::from_vec(shape.map(|d| d as usize).to_vec(), &[0f32; 0]).unwrap();
        let rois =
            HostTensor::from_vec(vec![2, 4], &[0f32, 0.0, 2.0, 1.5, 0.5, 1.0, 3.0, 2.0]).unwrap();
        let batch = HostTensor::from_vec(vec![2], &[0i64, shape[0] - 1]).unwrap();
        let y = run(&m, vec![("X", x), ("rois", rois), ("batch", batch)]).remove(0);
        assert_eq!(y.shape, out.to_vec(), "{shape:?}");
        assert!(f32s(&y).iter().all(|&v| v == 0.0), "{shape:?}: {y:?}");
    }
}

/// A model run again and again on the same inputs creates no buffer from its fourth run on,
/// where it is planned anew each run (as an adaptive RoiAlign is where the ROIs change: its
/// sampling grid depends on them), on contexts of small buffers and bindings too: a fused
/// node that takes a constant as a literal gives back the upload buffer reserved for it at
/// once, for later uploads of the run (each run made one for a host-computed scalar before).
#[test]
fn a_replanned_model_reuses_its_upload_buffers() {
    let f = DataType::Float;
    let mut n = node("RoiAlign", &["X", "rois", "batch"], &["Y"]);
    n.attribute = vec![
        int_attr("output_height", 3),
        int_attr("output_width", 4),
        int_attr("sampling_ratio", 0),
    ];
    let graph = GraphProto {
        node: vec![n],
        input: vec![
            value("X", f, &[Some(2), Some(3), Some(9), Some(11)]),
            value("rois", f, &[Some(5), Some(4)]),
            value("batch", DataType::Int64, &[Some(5)]),
        ],
        output: vec![value("Y", f, &[None])],
        ..Default::default()
    };
    let m = Model::from_bytes(&model(graph, 16).encode_to_vec()).unwrap();
    let x: Vec<f32> = uniform(7, 2 * 3 * 9 * 11);
    let rois = [
        0.0f32, 0.0, 4.0, 3.0, 1.5, 2.0, 9.5, 7.0, 0.0, 0.0, 10.0, 8.0, 3.0, 1.0, 5.5, 8.5, 2.0,
        4.0, 2.5, 4.5,
    ];
    let inputs = vec![
        (
            "X".to_string(),
            HostTensor::from_vec(vec![2, 3, 9, 11], &x).unwrap(),
        ),
        (
            "rois".to_string(),
            HostTensor::from_vec(vec![5, 4], &rois).unwrap(),
        ),
        (
            "batch".to_string(),
            HostTensor::from_vec(vec![5], &[0i64, 1, 1, 0, 1]).unwrap(),
        ),
    ];
    let want = run(
        &m,
        inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect(),
    );
    // (Bindings of 256 bytes would refuse the emulated i64 casts under WebGPU's limits.)
    for (buffer, binding) in [(None, None), (Some(1024), Some(512))] {
        let ctx = Context::new_blocking(ContextOptions {
            max_buffer_size: buffer,
            max_binding_size: binding,
            ..Default::default()
        })
        .unwrap();
        let session = m.clone().session(&ctx).unwrap();
        // As a run whose planning values change (other ROIs) is.
        session.set_replay(false);
        for run in 0..4 {
            let before = ctx.stats();
            let got = session.run_blocking(inputs.clone()).unwrap();
            let after = ctx.stats();
            assert_eq!(got[0].1, want[0], "{buffer:?}: run {run}");
            assert_eq!(after.replayed_runs, before.replayed_runs, "planned anew");
            if run == 3 {
                assert_eq!(
                    after.buffers_created - before.buffers_created,
                    0,
                    "{buffer:?}: buffers created by the fourth run"
                );
            }
        }
    }
}
