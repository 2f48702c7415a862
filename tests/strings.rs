//! Tensors of strings through the graph API: given to and taken from a run, moved by the ops
//! that only move values (against the same moves on the host), indices computed on the GPU
//! and read back (counted), carried by If and Loop, and the refusals, one line each (an op
//! that computes on numbers, a value the GPU computed where read-backs are off, a Scan body).

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node, Value, ValueInfo, ValueKind};
use wgpu_ops::{Context, DType, HostTensor, Session, StringTensor};

fn strings(shape: &[usize], values: &[&str]) -> StringTensor {
    StringTensor::new(
        shape.to_vec(),
        values.iter().map(|s| s.to_string()).collect(),
    )
    .unwrap()
}

fn declared_strings(name: &str) -> ValueInfo {
    ValueInfo {
        kind: ValueKind::Strings,
        ..ValueInfo::named(name)
    }
}

fn run_on(ctx: &Context, g: Graph, inputs: Vec<(&str, Value)>) -> wgpu_ops::Result<Vec<Value>> {
    let session = Session::new(ctx, g)?;
    let inputs = inputs
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    Ok(session
        .run_values_blocking(inputs)?
        .into_iter()
        .map(|(_, v)| v)
        .collect())
}

fn run(g: Graph, inputs: Vec<(&str, Value)>) -> wgpu_ops::Result<Vec<Value>> {
    run_on(ctx(), g, inputs)
}

fn as_strings(v: &Value) -> &StringTensor {
    match v {
        Value::Strings(s) => s,
        other => panic!("expected strings, got {}", other.kind_name()),
    }
}

fn as_tensor(v: &Value) -> &HostTensor {
    match v {
        Value::Tensor(t) => t,
        other => panic!("expected a tensor, got {}", other.kind_name()),
    }
}

fn i64s(shape: Vec<usize>, v: &[i64]) -> HostTensor {
    HostTensor::from_vec(shape, v).unwrap()
}

/// A 3 x 4 tensor of distinct strings, some of them not ASCII.
fn words() -> StringTensor {
    strings(
        &[3, 4],
        &[
            "a", "bé", "", "dd", "e e", "f", "ğ", "h", "i", "jj", "k", "€",
        ],
    )
}

#[test]
fn moving_ops_move_strings_as_they_move_numbers() {
    // Each op on the strings against the same op on their positions (numbers, on the GPU):
    // the positions the strings land at must be those the numbers land at.
    let x = words();
    let positions = i64s(vec![3, 4], &(0..12).collect::<Vec<i64>>());
    let cases: Vec<(Node, Vec<(&str, HostTensor)>)> = vec![
        (
            Node::new("Transpose", "t").attr("perm", Attr::Ints(vec![1, 0])),
            vec![],
        ),
        (
            Node::new("Gather", "g").attr("axis", Attr::Int(1)),
            vec![("i", i64s(vec![2, 2], &[3, -1, 0, 0]))],
        ),
        (
            Node::new("OnnxSlice", "s"),
            vec![
                ("a", i64s(vec![2], &[2, 3])),
                ("b", i64s(vec![2], &[-4, -9])),
                ("c", i64s(vec![2], &[0, 1])),
                ("d", i64s(vec![2], &[-1, -2])),
            ],
        ),
        (
            Node::new("Reshape", "r"),
            vec![("shape", i64s(vec![3], &[2, -1, 2]))],
        ),
        (
            Node::new("Expand", "e"),
            vec![("shape", i64s(vec![3], &[2, 3, 1]))],
        ),
        (Node::new("Concat", "c").attr("axis", Attr::Int(-1)), vec![]),
        (
            Node::new("GatherElements", "ge").attr("axis", Attr::Int(0)),
            vec![("i", i64s(vec![2, 4], &[2, 1, 0, -1, 0, 0, 2, 1]))],
        ),
    ];
    for (node, extra) in cases {
        let op = node.op.clone();
        let mut inputs = vec!["x".to_string()];
        if op == "Concat" {
            inputs.push("x".into());
        }
        inputs.extend(extra.iter().map(|(n, _)| n.to_string()));
        let node = node
            .inputs(inputs.iter().map(String::as_str))
            .outputs(["y"]);
        let with = |g: Graph| {
            extra
                .iter()
                .fold(g, |g, (n, v)| g.constant(*n, v.clone()))
                .node(node.clone())
                .output("y")
        };
        let mut on_strings = with(Graph::new());
        on_strings.inputs.push(declared_strings("x"));
        let got = run(on_strings, vec![("x", Value::Strings(x.clone()))]).unwrap();
        let on_numbers = with(Graph::new().input("x", DType::I64, &[Some(3), Some(4)]));
        let want = run(on_numbers, vec![("x", Value::Tensor(positions.clone()))]).unwrap();
        let (got, want) = (as_strings(&got[0]), as_tensor(&want[0]));
        assert_eq!(got.shape, want.shape, "{op}");
        let moved: Vec<&str> = want
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|p| x.values[p as usize].as_str())
            .collect();
        assert_eq!(got.values, moved, "{op}");
    }
}

#[test]
fn indices_computed_on_the_gpu_are_read_back_once() {
    // The best of 5 scores per row names its label: ArgMax on the GPU, then a Gather of the
    // label strings at it (read back), then StringConcat and Equal on the host.
    let rows = 700;
    let mut rng = Rng(17);
    let scores: Vec<f32> = (0..rows * 5)
        .map(|_| rng.below(1000) as f32 - 500.0)
        .collect();
    let labels = ["cat", "dog", "émeu", "", "ğnu"];
    let g = |g: Graph| {
        g.input("scores", DType::F32, &[Some(rows), Some(5)])
            .node(
                Node::new("StringConstant", "labels")
                    .outputs(["labels"])
                    .attr(
                        "value",
                        Attr::Strings(labels.iter().map(|s| s.to_string()).collect()),
                    )
                    .attr("shape", Attr::Ints(vec![5])),
            )
            .node(
                Node::new("ArgMax", "best")
                    .inputs(["scores"])
                    .outputs(["best"])
                    .attr("axis", Attr::Int(1))
                    .attr("keepdims", Attr::Int(0)),
            )
            .node(
                Node::new("Gather", "name")
                    .inputs(["labels", "best"])
                    .outputs(["name"]),
            )
            .node(
                Node::new("StringConcat", "tag")
                    .inputs(["name", "suffix"])
                    .outputs(["tagged"]),
            )
            .node(
                Node::new("Equal", "is_dog")
                    .inputs(["name", "dog"])
                    .outputs(["is_dog"]),
            )
            .output("tagged")
            .output("is_dog")
    };
    let mut graph = g(Graph::new());
    graph.inputs.push(declared_strings("suffix"));
    graph.inputs.push(declared_strings("dog"));
    let inputs = || {
        vec![
            (
                "scores",
                Value::Tensor(HostTensor::from_vec(vec![rows, 5], &scores).unwrap()),
            ),
            ("suffix", Value::Strings(strings(&[1], &["!"]))),
            ("dog", Value::Strings(strings(&[], &["dog"]))),
        ]
    };
    let before = ctx().stats().read_backs;
    let out = run(graph.clone(), inputs()).unwrap();
    assert_eq!(ctx().stats().read_backs - before, 1, "one read-back");
    let (tagged, is_dog) = (as_strings(&out[0]), as_tensor(&out[1]));
    assert_eq!(tagged.shape, [rows]);
    let is_dog = is_dog.to_vec::<bool>().unwrap();
    for r in 0..rows {
        let row = &scores[r * 5..r * 5 + 5];
        // ArgMax takes the first of equal maxima.
        let best = (0..5).fold(0, |b, k| if row[k] > row[b] { k } else { b });
        assert_eq!(tagged.values[r], format!("{}!", labels[best]), "row {r}");
        assert_eq!(is_dog[r], best == 1, "row {r}");
    }
    // Without read-backs the Gather cannot plan: one line naming the op and the input.
    let e = run_on(&ctx_without_read_back(), graph, inputs())
        .expect_err("refused")
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.contains("Gather") && e.contains("'best'") && e.contains("read back"),
        "{e}"
    );
}

#[test]
fn if_and_loop_carry_strings() {
    // If: each branch gives a string tensor; Loop: appends "ab" three times to a carried
    // string, counting with the trip number cast to strings.
    let branch = |word: &str| {
        let mut b = Graph::new().node(
            Node::new("StringConstant", "w")
                .outputs([format!("w_{word}")])
                .attr("value", Attr::Strings(vec![word.to_string()])),
        );
        b.outputs = vec![ValueInfo::named(format!("w_{word}"))];
        b
    };
    let mut body = Graph::new()
        .node(
            Node::new("Cast", "count")
                .inputs(["i"])
                .outputs(["count"])
                .attr("to", Attr::String("string".into())),
        )
        .node(
            Node::new("StringConcat", "more")
                .inputs(["s_in", "count"])
                .outputs(["s_out"]),
        )
        .node(
            Node::new("Identity", "c")
                .inputs(["c_in"])
                .outputs(["c_out"]),
        );
    body.inputs = vec![
        ValueInfo::named("i"),
        ValueInfo::named("c_in"),
        declared_strings("s_in"),
    ];
    body.outputs = vec![ValueInfo::named("c_out"), declared_strings("s_out")];
    let g = Graph::new()
        .input("flag", DType::Bool, &[])
        .constant("m", i64s(vec![], &[3]))
        .node(
            Node::new("If", "pick")
                .inputs(["flag"])
                .outputs(["picked"])
                .attr("then_branch", Attr::Graph(Box::new(branch("yes"))))
                .attr("else_branch", Attr::Graph(Box::new(branch("no")))),
        )
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "picked"])
                .outputs(["counted"])
                .attr("body", Attr::Graph(Box::new(body))),
        )
        .output("counted");
    for (flag, want) in [(true, "yes012"), (false, "no012")] {
        let out = run(
            g.clone(),
            vec![(
                "flag",
                Value::Tensor(HostTensor::from_vec(vec![], &[flag]).unwrap()),
            )],
        )
        .unwrap();
        assert_eq!(as_strings(&out[0]).values, [want]);
    }
}

/// The error of running `g` on `inputs`, as one line.
fn refusal(g: Graph, inputs: Vec<(&str, Value)>) -> String {
    let e = run(g, inputs).expect_err("refused").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn misuse_is_refused_in_one_line_naming_the_op_and_the_input() {
    let given = || vec![("x", Value::Strings(words()))];
    let with_x = |g: Graph| {
        let mut g = g;
        g.inputs.insert(0, declared_strings("x"));
        g
    };
    // An op that computes on numbers.
    let g = with_x(Graph::new())
        .node(Node::new("Add", "sum").inputs(["x", "x"]).outputs(["y"]))
        .output("y");
    let e = refusal(g, given());
    assert!(
        e.contains("Add") && e.contains("'x'") && e.contains("string"),
        "{e}"
    );
    // Strings where a moving op takes numbers (Gather's indices).
    let g = with_x(Graph::new())
        .node(Node::new("Gather", "g").inputs(["x", "x"]).outputs(["y"]))
        .output("y");
    let e = refusal(g, given());
    assert!(e.contains("Gather") && e.contains("input 1"), "{e}");
    // Numbers given for a declared string input, and strings for a numeric one.
    let g = with_x(Graph::new())
        .node(Node::new("Identity", "i").inputs(["x"]).outputs(["y"]))
        .output("y");
    let numbers = HostTensor::from_vec(vec![1], &[1.0f32]).unwrap();
    let e = refusal(g, vec![("x", Value::Tensor(numbers))]);
    assert!(e.contains("'x'") && e.contains("string tensor"), "{e}");
    let g = Graph::new()
        .input("x", DType::F32, &[Some(1)])
        .node(Node::new("Identity", "i").inputs(["x"]).outputs(["y"]))
        .output("y");
    let e = refusal(g, given());
    assert!(
        e.contains("'x'") && e.contains("f32") && e.contains("string tensor"),
        "{e}"
    );
    // A bad pattern, a string that is not a number, shapes that do not broadcast.
    let g = with_x(Graph::new())
        .node(
            Node::new("RegexFullMatch", "re")
                .inputs(["x"])
                .outputs(["y"])
                .attr("pattern", Attr::String("(unclosed\n".into())),
        )
        .output("y");
    let e = refusal(g, given());
    assert!(e.contains("RegexFullMatch") && e.contains("pattern"), "{e}");
    let g = with_x(Graph::new())
        .node(
            Node::new("Cast", "c")
                .inputs(["x"])
                .outputs(["y"])
                .attr("to", Attr::String("f32".into())),
        )
        .output("y");
    let e = refusal(g, given());
    assert!(
        e.contains("Cast") && e.contains("'a' is not a number of f32"),
        "{e}"
    );
    let g = with_x(Graph::new())
        .node(
            Node::new("StringConcat", "c")
                .inputs(["x", "z"])
                .outputs(["y"]),
        )
        .output("y");
    let mut g = g;
    g.inputs.push(declared_strings("z"));
    let mut inputs = given();
    inputs.push(("z", Value::Strings(strings(&[3], &["1", "2", "3"]))));
    let e = refusal(g, inputs);
    assert!(e.contains("StringConcat") && e.contains("broadcast"), "{e}");
}

#[test]
fn numbers_cast_to_strings_as_printf_g8_writes_them() {
    // C's printf("%.8g") of each value (what onnxruntime writes), NaN and infinities as it
    // writes them.
    let cases: [(f64, &str); 14] = [
        (0.1, "0.1"),
        (1e-5, "1e-05"),
        (123456789.0, "1.2345679e+08"),
        (-0.0, "-0"),
        (f64::NAN, "NaN"),
        (f64::NEG_INFINITY, "-INF"),
        (1.0 / 3.0, "0.33333333"),
        (12345678.0, "12345678"),
        (99999999.5, "1e+08"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (-2.5e300, "-2.5e+300"),
        (100.0, "100"),
        (5e-324, "4.9406565e-324"),
    ];
    let values: Vec<f64> = cases.iter().map(|c| c.0).collect();
    let g = Graph::new()
        .input("x", DType::F64, &[Some(values.len())])
        .node(
            Node::new("Cast", "c")
                .inputs(["x"])
                .outputs(["y"])
                .attr("to", Attr::String("string".into())),
        )
        .output("y");
    let x = HostTensor::from_vec(vec![values.len()], &values).unwrap();
    let out = run(g, vec![("x", Value::Tensor(x))]).unwrap();
    let want: Vec<&str> = cases.iter().map(|c| c.1).collect();
    assert_eq!(as_strings(&out[0]).values, want);
}

#[test]
fn a_scan_body_refuses_strings_it_would_need_per_iteration() {
    // The body gathers a label at each element's value: the index is the iteration's element
    // (on the GPU, not read back inside a Scan), so the body is refused in one line.
    // Likewise a string tensor as a body output.
    let mut body = Graph::new()
        .node(
            Node::new("StringConstant", "labels")
                .outputs(["labels"])
                .attr("value", Attr::Strings(vec!["a".into(), "b".into()])),
        )
        .node(
            Node::new("Gather", "g")
                .inputs(["labels", "e"])
                .outputs(["name"]),
        )
        .node(
            Node::new("Identity", "s")
                .inputs(["s_in"])
                .outputs(["s_out"]),
        )
        .node(Node::new("Size", "n").inputs(["name"]).outputs(["n"]));
    body.inputs = vec![ValueInfo::named("s_in"), ValueInfo::named("e")];
    body.outputs = vec![ValueInfo::named("s_out"), ValueInfo::named("n")];
    let g = Graph::new()
        .input("s0", DType::I64, &[])
        .input("xs", DType::I64, &[Some(3)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "xs"])
                .outputs(["s", "ns"])
                .attr("num_scan_inputs", Attr::Int(1))
                .attr("body", Attr::Graph(Box::new(body))),
        )
        .output("ns");
    let inputs = || {
        vec![
            ("s0", Value::Tensor(i64s(vec![], &[0]))),
            ("xs", Value::Tensor(i64s(vec![3], &[0, 1, 0]))),
        ]
    };
    let e = refusal(g, inputs());
    assert!(e.contains("Gather") && e.contains("'e'"), "{e}");
    // A body that reads an outer string tensor computes numbers from it (Size, on the host),
    // but gives it as a scan output: refused, a Scan stacks tensors.
    let scan = |n_output: &str| {
        let mut body = Graph::new()
            .node(Node::new("Size", "n").inputs(["labels"]).outputs(["n"]))
            .node(
                Node::new("Add", "s")
                    .inputs(["s_in", "n"])
                    .outputs(["s_out"]),
            );
        body.inputs = vec![ValueInfo::named("s_in"), ValueInfo::named("e")];
        body.outputs = vec![ValueInfo::named("s_out"), ValueInfo::named(n_output)];
        Graph::new()
            .input("s0", DType::I64, &[])
            .input("xs", DType::I64, &[Some(3)])
            .node(
                Node::new("StringConstant", "labels")
                    .outputs(["labels"])
                    .attr("value", Attr::Strings(vec!["a".into(), "b".into()])),
            )
            .node(
                Node::new("Scan", "scan")
                    .inputs(["s0", "xs"])
                    .outputs(["s", "ys"])
                    .attr("num_scan_inputs", Attr::Int(1))
                    .attr("body", Attr::Graph(Box::new(body))),
            )
            .output("s")
            .output("ys")
    };
    let out = run(scan("n"), inputs()).unwrap();
    assert_eq!(as_tensor(&out[0]).to_vec::<i64>().unwrap(), [6]);
    assert_eq!(as_tensor(&out[1]).to_vec::<i64>().unwrap(), [2, 2, 2]);
    let e = refusal(scan("labels"), inputs());
    assert!(
        e.contains("Scan") && e.contains("'labels'") && e.contains("stacks tensors"),
        "{e}"
    );
}

#[test]
fn zip_map_gives_maps_of_the_scores_the_gpu_computed() {
    // Softmax on the GPU, then ZipMap (read back once): each row a map from the labels to
    // its scores, string labels and integer ones.
    let rows = 5;
    let x: Vec<f32> = (0..rows * 3).map(|i| (i as f32 * 0.37).sin()).collect();
    let graph = |labels: (&str, Attr)| {
        Graph::new()
            .input("x", DType::F32, &[Some(rows), Some(3)])
            .node(
                Node::new("Softmax", "p")
                    .inputs(["x"])
                    .outputs(["p"])
                    .attr("axis", Attr::Int(1)),
            )
            .node(
                Node::new("ZipMap", "zip")
                    .inputs(["p"])
                    .outputs(["maps"])
                    .attr(labels.0, labels.1),
            )
            .output("maps")
    };
    let input = || {
        vec![(
            "x",
            Value::Tensor(HostTensor::from_vec(vec![rows, 3], &x).unwrap()),
        )]
    };
    let names = Attr::Strings(vec!["a".into(), "é".into(), "".into()]);
    let before = ctx().stats().read_backs;
    let out = run(graph(("classlabels_strings", names.clone())), input()).unwrap();
    assert_eq!(ctx().stats().read_backs - before, 1, "one read-back");
    let Value::Maps(maps) = &out[0] else {
        panic!("expected maps, got {}", out[0].kind_name());
    };
    assert_eq!(
        maps.keys,
        wgpu_ops::MapKeys::Strings(vec!["a".into(), "é".into(), "".into()])
    );
    assert_eq!(maps.len(), rows);
    let got = maps.values.to_vec::<f32>().unwrap();
    for r in 0..rows {
        let row = &x[r * 3..r * 3 + 3];
        let max = row.iter().cloned().fold(f32::MIN, f32::max);
        let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
        for k in 0..3 {
            let want = (row[k] - max).exp() / sum;
            assert!((got[r * 3 + k] - want).abs() <= 1e-6, "row {r} key {k}");
        }
    }
    let out = run(
        graph(("classlabels_int64s", Attr::Ints(vec![7, -1, 3]))),
        input(),
    )
    .unwrap();
    let Value::Maps(maps) = &out[0] else {
        panic!("expected maps");
    };
    assert_eq!(maps.keys, wgpu_ops::MapKeys::Ints(vec![7, -1, 3]));
    // Two labels for three scores, and the scores not read back: one line each.
    let e = refusal(
        graph((
            "classlabels_strings",
            Attr::Strings(vec!["a".into(), "b".into()]),
        )),
        input(),
    );
    assert!(e.contains("ZipMap") && e.contains("[5, 3]"), "{e}");
    let e = run_on(
        &ctx_without_read_back(),
        graph(("classlabels_strings", names)),
        input(),
    )
    .expect_err("refused")
    .to_string();
    assert!(e.contains("ZipMap") && e.contains("'p'"), "{e}");
}

#[test]
fn results_beyond_the_memory_limit_are_refused_before_they_are_made() {
    // Expand and Tile of one string to 10^15 and 10^9 strings, a StringConcat broadcast to
    // 10^10: refused in one line naming the op and the limit (4 GiB here, whatever the
    // device), without allocating them.
    let limited = Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(4 << 30),
        ..Default::default()
    })
    .unwrap();
    let refusal = |g: Graph, inputs: Vec<(&str, Value)>| {
        let e = run_on(&limited, g, inputs)
            .expect_err("refused")
            .to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    };
    let word = || {
        Node::new("StringConstant", "w")
            .outputs(["w"])
            .attr("value", Attr::Strings(vec!["abc".into()]))
    };
    let cases = [
        ("Expand", i64s(vec![3], &[100_000, 100_000, 100_000])),
        ("Tile", i64s(vec![1], &[1_000_000_000])),
    ];
    for (op, arg) in cases {
        let g = Graph::new()
            .constant("n", arg)
            .node(word())
            .node(Node::new(op, "big").inputs(["w", "n"]).outputs(["y"]))
            .output("y");
        let e = refusal(g, vec![]);
        assert!(e.contains(op) && e.contains("memory limit"), "{e}");
    }
    let mut g = Graph::new()
        .node(
            Node::new("StringConcat", "big")
                .inputs(["a", "b"])
                .outputs(["y"]),
        )
        .output("y");
    g.inputs = vec![declared_strings("a"), declared_strings("b")];
    let column = StringTensor::new(vec![100_000, 1], vec!["x".to_string(); 100_000]).unwrap();
    let row = StringTensor::new(vec![100_000], vec!["y".to_string(); 100_000]).unwrap();
    let e = refusal(
        g,
        vec![("a", Value::Strings(column)), ("b", Value::Strings(row))],
    );
    assert!(
        e.contains("StringConcat") && e.contains("memory limit"),
        "{e}"
    );
}
