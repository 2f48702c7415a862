//! ONNX-ML maps through the graph API: DictVectorizer and CastMap on every map type, against
//! values worked out by hand from onnxruntime's kernels (its Python binding cannot give some
//! of these types; `scripts/ort_differential.py` compares the others), a map passed through
//! as an output, declarations checked, and the refusals, one line each.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node, Value, ValueInfo, ValueKind};
use wgpu_ops::{
    Context, DType, HostTensor, Map, MapKeys, MapType, MapValues, Session, StringTensor,
};

fn int_keys(k: &[i64]) -> MapKeys {
    MapKeys::Ints(k.to_vec())
}

fn string_keys(k: &[&str]) -> MapKeys {
    MapKeys::Strings(k.iter().map(|s| s.to_string()).collect())
}

fn numbers<T: wgpu_ops::Element>(v: &[T]) -> MapValues {
    MapValues::Numbers(HostTensor::from_vec(vec![v.len()], v).unwrap())
}

fn texts(v: &[&str]) -> MapValues {
    MapValues::Strings(v.iter().map(|s| s.to_string()).collect())
}

fn declared_map(name: &str, ty: MapType) -> ValueInfo {
    ValueInfo {
        kind: ValueKind::Map(ty),
        ..ValueInfo::named(name)
    }
}

/// One node `op` from the map input `x` to the output `y`.
fn one_node(op: &str, ty: MapType, attrs: &[(&str, Attr)]) -> Graph {
    let mut node = Node::new(op, "n").inputs(["x"]).outputs(["y"]);
    for (k, v) in attrs {
        node = node.attr(*k, v.clone());
    }
    let mut g = Graph::new().node(node).output("y");
    g.inputs.push(declared_map("x", ty));
    g
}

fn run_on(ctx: &Context, g: Graph, x: Value) -> wgpu_ops::Result<Value> {
    let session = Session::new(ctx, g)?;
    Ok(session
        .run_values_blocking(vec![("x".into(), x)])?
        .remove(0)
        .1)
}

fn run(g: Graph, m: Map) -> wgpu_ops::Result<Value> {
    run_on(ctx(), g, Value::Map(m))
}

fn refusal(g: Graph, m: Map) -> String {
    let e = run(g, m).expect_err("refused").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn tensor(v: &Value) -> &HostTensor {
    match v {
        Value::Tensor(t) => t,
        other => panic!("expected a tensor, got {}", other.kind_name()),
    }
}

fn strings(v: &Value) -> &StringTensor {
    match v {
        Value::Strings(t) => t,
        other => panic!("expected strings, got {}", other.kind_name()),
    }
}

const DICT: &str = "ai.onnx.ml.DictVectorizer";
const CAST: &str = "ai.onnx.ml.CastMap";

fn ty(int_keys: bool, values: Option<DType>) -> MapType {
    MapType::new(int_keys, values).unwrap()
}

#[test]
fn dict_vectorizer_lays_the_vocabularys_values_in_one_row() {
    let vocab = |v: &[&str]| Attr::Strings(v.iter().map(|s| s.to_string()).collect());
    // Strings to f32: a key outside the vocabulary left out, one the map lacks as 0, a
    // repeated vocabulary entry repeated.
    let m = Map::new(
        string_keys(&["a", "c", "zz"]),
        numbers(&[1.5f32, -2.0, 9.0]),
    )
    .unwrap();
    let g = || {
        one_node(
            DICT,
            ty(false, Some(DType::F32)),
            &[("string_vocabulary", vocab(&["c", "a", "b", "a"]))],
        )
    };
    let y = run(g(), m).unwrap();
    assert_eq!(
        tensor(&y),
        &HostTensor::from_vec(vec![1, 4], &[-2.0f32, 1.5, 0.0, 1.5]).unwrap()
    );
    // An empty map: zeros.
    let empty = Map::new(string_keys(&[]), numbers::<f32>(&[])).unwrap();
    let y = run(g(), empty).unwrap();
    assert_eq!(tensor(&y).to_vec::<f32>().unwrap(), [0.0; 4]);

    // Integers to f64 and to i64 beyond 2^53, strings to i64: bit for bit.
    let ints = Attr::Ints(vec![3, 4, -1]);
    let m = Map::new(int_keys(&[5, -1, 3]), numbers(&[0.1f64, -1e300, 2.5])).unwrap();
    let y = run(
        one_node(
            DICT,
            ty(true, Some(DType::F64)),
            &[("int64_vocabulary", ints.clone())],
        ),
        m,
    )
    .unwrap();
    assert_eq!(tensor(&y).to_vec::<f64>().unwrap(), [2.5, 0.0, -1e300]);
    let big = (1i64 << 53) + 1;
    let m = Map::new(int_keys(&[4, 3]), numbers(&[big, i64::MIN])).unwrap();
    let y = run(
        one_node(
            DICT,
            ty(true, Some(DType::I64)),
            &[("int64_vocabulary", ints)],
        ),
        m,
    )
    .unwrap();
    assert_eq!(tensor(&y).to_vec::<i64>().unwrap(), [i64::MIN, big, 0]);
    let m = Map::new(string_keys(&["é", ""]), numbers(&[-7i64, big])).unwrap();
    let y = run(
        one_node(
            DICT,
            ty(false, Some(DType::I64)),
            &[("string_vocabulary", vocab(&["", "é", "e"]))],
        ),
        m,
    )
    .unwrap();
    assert_eq!(tensor(&y).shape, [1, 3]);
    assert_eq!(tensor(&y).to_vec::<i64>().unwrap(), [big, -7, 0]);

    // Integers to strings: the missing key as "".
    let m = Map::new(int_keys(&[5, 3, 7]), texts(&["x", "yy", "q"])).unwrap();
    let y = run(
        one_node(
            DICT,
            ty(true, None),
            &[("int64_vocabulary", Attr::Ints(vec![5, 6, 3]))],
        ),
        m,
    )
    .unwrap();
    assert_eq!(
        strings(&y),
        &StringTensor::new(vec![1, 3], vec!["x".into(), "".into(), "yy".into()]).unwrap()
    );
}

#[test]
fn dict_vectorizer_refuses_a_vocabulary_of_the_wrong_kind() {
    let m = || Map::new(int_keys(&[1]), numbers(&[1.0f32])).unwrap();
    let f32_map = ty(true, Some(DType::F32));
    let e = refusal(
        one_node(
            DICT,
            f32_map,
            &[("string_vocabulary", Attr::Strings(vec!["a".into()]))],
        ),
        m(),
    );
    assert!(
        e.contains("DictVectorizer")
            && e.contains("map(i64, f32)")
            && e.contains("int64_vocabulary"),
        "{e}"
    );
    let e = refusal(
        one_node(
            DICT,
            f32_map,
            &[
                ("string_vocabulary", Attr::Strings(vec!["a".into()])),
                ("int64_vocabulary", Attr::Ints(vec![1])),
            ],
        ),
        m(),
    );
    assert!(e.contains("not both"), "{e}");
    let s = Map::new(string_keys(&["a"]), numbers(&[1.0f32])).unwrap();
    let e = refusal(
        one_node(
            DICT,
            ty(false, Some(DType::F32)),
            &[("int64_vocabulary", Attr::Ints(vec![1]))],
        ),
        s,
    );
    assert!(e.contains("string_vocabulary"), "{e}");
}

#[test]
fn cast_map_casts_dense_and_sparse_maps_as_onnxruntime_does() {
    let cast = |to: &str, form: &str, max_map: i64, m: Map| {
        let ty = m.map_type();
        run(
            one_node(
                CAST,
                ty,
                &[
                    ("cast_to", Attr::String(to.into())),
                    ("map_form", Attr::String(form.into())),
                    ("max_map", Attr::Int(max_map)),
                ],
            ),
            m,
        )
    };
    let floats = || {
        Map::new(
            int_keys(&[3, 1, 2, 5, 0, 8]),
            numbers(&[1.5f32, -2.75, 1e20, f32::NAN, -1e-7, f32::NEG_INFINITY]),
        )
        .unwrap()
    };
    // DENSE: the values in ascending key order.
    let y = cast("TO_FLOAT", "DENSE", 1, floats()).unwrap();
    let got = tensor(&y);
    assert_eq!(got.shape, [1, 6]);
    let v = got.to_vec::<f32>().unwrap();
    assert_eq!(v[..4], [-1e-7, -2.75, 1e20, 1.5]);
    assert!(v[4].is_nan() && v[5] == f32::NEG_INFINITY);
    // Truncated toward zero; beyond i64 saturated and NaN 0, as Cast does (onnxruntime's
    // static_cast leaves those undefined).
    let y = cast("TO_INT64", "DENSE", 1, floats()).unwrap();
    assert_eq!(
        tensor(&y).to_vec::<i64>().unwrap(),
        [0, -2, i64::MAX, 1, 0, i64::MIN]
    );
    // std::to_string's %f: six decimals, the float's exact value rounded.
    let y = cast("TO_STRING", "DENSE", 1, floats()).unwrap();
    assert_eq!(
        strings(&y).values,
        [
            "-0.000000",
            "-2.750000",
            "100000002004087734272.000000",
            "1.500000",
            "nan",
            "-inf"
        ]
    );
    // SPARSE: key k at position k, the pad elsewhere, keys from max_map up left out.
    let y = cast("TO_FLOAT", "SPARSE", 4, floats()).unwrap();
    let v = tensor(&y).to_vec::<f32>().unwrap();
    assert_eq!(v, [-1e-7, -2.75, 1e20, 1.5]);
    let y = cast("TO_STRING", "SPARSE", 7, floats()).unwrap();
    assert_eq!(
        strings(&y).values,
        [
            "-0.000000",
            "-2.750000",
            "100000002004087734272.000000",
            "1.500000",
            "0.f",
            "nan",
            "0.f"
        ]
    );
    let y = cast(
        "TO_INT64",
        "SPARSE",
        3,
        Map::new(int_keys(&[1]), numbers(&[2.5f32])).unwrap(),
    )
    .unwrap();
    assert_eq!(tensor(&y).to_vec::<i64>().unwrap(), [0, 2, 0]);

    // Strings read as Cast reads them: surrounding whitespace ignored.
    let words = || Map::new(int_keys(&[3, 1, 2]), texts(&[" 2.5 ", "-1e3", "inf"])).unwrap();
    let y = cast("TO_FLOAT", "DENSE", 1, words()).unwrap();
    assert_eq!(
        tensor(&y).to_vec::<f32>().unwrap(),
        [-1000.0, f32::INFINITY, 2.5]
    );
    let y = cast("TO_STRING", "SPARSE", 3, words()).unwrap();
    assert_eq!(strings(&y).values, ["0.f", "-1e3", "inf"]);
    let ints = Map::new(int_keys(&[0, 1]), texts(&["15", "-9007199254740993"])).unwrap();
    let y = cast("TO_INT64", "DENSE", 1, ints).unwrap();
    assert_eq!(tensor(&y).to_vec::<i64>().unwrap(), [15, -9007199254740993]);
    let e = cast("TO_INT64", "DENSE", 1, words())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("CastMap") && e.contains("'-1e3' of key 1 is not a number of i64"),
        "{e}"
    );
}

#[test]
fn cast_map_refuses_what_it_cannot_lay_out() {
    let m = || Map::new(int_keys(&[-1, 2]), numbers(&[1.0f32, 2.0])).unwrap();
    let f32_map = ty(true, Some(DType::F32));
    let with = |attrs: &[(&str, Attr)]| one_node(CAST, f32_map, attrs);
    let sparse = |max_map: i64| {
        with(&[
            ("map_form", Attr::String("SPARSE".into())),
            ("max_map", Attr::Int(max_map)),
        ])
    };
    let e = refusal(sparse(4), m());
    assert!(e.contains("key -1") && e.contains("negative"), "{e}");
    let ok = || Map::new(int_keys(&[1, 2]), numbers(&[1.0f32, 2.0])).unwrap();
    let e = refusal(sparse(0), ok());
    assert!(e.contains("max_map is 0"), "{e}");
    let e = refusal(with(&[("cast_to", Attr::String("TO_DOUBLE".into()))]), ok());
    assert!(e.contains("cast_to is 'TO_DOUBLE'"), "{e}");
    let e = refusal(with(&[("map_form", Attr::String("COO".into()))]), ok());
    assert!(e.contains("map_form is 'COO'"), "{e}");
    let s = Map::new(string_keys(&["a"]), numbers(&[1.0f32])).unwrap();
    let e = refusal(one_node(CAST, s.map_type(), &[]), s);
    assert!(
        e.contains("map(string, f32)") && e.contains("i64 keys"),
        "{e}"
    );

    // 2^50 values: refused by the memory limit before any is made.
    let limited = Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(4 << 30),
        ..Default::default()
    })
    .unwrap();
    let e = run_on(&limited, sparse(1 << 50), Value::Map(ok()))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("CastMap") && e.contains("memory limit"), "{e}");
}

#[test]
fn maps_pass_through_and_are_held_to_their_declarations() {
    let f32_map = ty(true, Some(DType::F32));
    let m = Map::new(int_keys(&[2, 1]), numbers(&[0.5f32, 0.25])).unwrap();
    // An input given back as an output.
    let mut g = Graph::new();
    g.inputs.push(declared_map("x", f32_map));
    g.outputs.push(declared_map("x", f32_map));
    let y = run(g.clone(), m.clone()).unwrap();
    assert_eq!(y, Value::Map(m.clone()));
    // A map of other types than declared, a tensor where a map is declared.
    let other = Map::new(string_keys(&["a"]), numbers(&[1.0f32])).unwrap();
    let e = refusal(g.clone(), other);
    assert!(
        e.contains("declared a map(i64, f32) but is a map(string, f32)"),
        "{e}"
    );
    let e = run_on(
        ctx(),
        g,
        Value::Tensor(HostTensor::from_vec(vec![1], &[1.0f32]).unwrap()),
    )
    .expect_err("refused")
    .to_string();
    assert!(e.contains("declared a map(i64, f32)"), "{e}");
    // An op on numbers refuses a map; the map ops refuse a tensor.
    let mut add = Graph::new()
        .node(Node::new("Add", "add").inputs(["x", "x"]).outputs(["y"]))
        .output("y");
    add.inputs.push(declared_map("x", f32_map));
    let e = refusal(add, m);
    assert!(e.contains("add") && e.contains("a map"), "{e}");
    let g = Graph::new()
        .input("x", DType::F32, &[Some(1)])
        .node(Node::new(CAST, "n").inputs(["x"]).outputs(["y"]))
        .output("y");
    let e = run_on(
        ctx(),
        g,
        Value::Tensor(HostTensor::from_vec(vec![1], &[1.0f32]).unwrap()),
    )
    .expect_err("refused")
    .to_string();
    assert!(e.contains("CastMap takes a map"), "{e}");
}

#[test]
fn graph_files_declare_maps_with_their_types() {
    use wgpu_ops::graph::json::from_str;
    let g = from_str(
        r#"{"inputs": [{"name": "x", "kind": "map", "keys": "i64", "values": "string"}],
            "nodes": [], "outputs": ["x"]}"#,
        None,
    )
    .unwrap();
    assert_eq!(g.inputs[0].kind, ValueKind::Map(ty(true, None)));
    for (decl, says) in [
        (
            r#"{"name": "x", "kind": "map", "values": "f32"}"#,
            r#""keys": "i64" or "string""#,
        ),
        (
            r#"{"name": "x", "kind": "map", "keys": "i32", "values": "f32"}"#,
            r#""keys": "i64" or "string""#,
        ),
        (
            r#"{"name": "x", "kind": "map", "keys": "i64", "values": "u8"}"#,
            r#""values": "f32", "f64", "i64" or "string""#,
        ),
        (
            r#"{"name": "x", "kind": "map", "keys": "i64", "values": "f32", "dtype": "f32"}"#,
            "no dtype or shape",
        ),
        (r#"{"name": "x", "keys": "i64"}"#, "keys is given only with"),
    ] {
        let text = format!(r#"{{"inputs": [{decl}], "nodes": [], "outputs": ["x"]}}"#);
        let e = from_str(&text, None).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("'x'"), "{decl}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
