//! ONNX sequences and optionals through the graph API: SplitToSequence and ConcatFromSequence
//! on every axis and kind of split, bit for bit against slicing on the host; positions as
//! ONNX defines them (negative from the end, defaults); a Loop that carries a sequence;
//! optionals given to and taken from a run; and the refusals, one line each.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node, Value, ValueInfo, ValueKind};
use wgpu_ops::{DType, HostTensor, Session};

fn declared(name: &str, kind: ValueKind) -> ValueInfo {
    ValueInfo {
        kind,
        ..ValueInfo::named(name)
    }
}

fn scalar_i64(v: i64) -> HostTensor {
    HostTensor::from_vec(Vec::new(), &[v]).unwrap()
}

fn run(g: Graph, inputs: Vec<(&str, Value)>) -> wgpu_ops::Result<Vec<Value>> {
    let session = Session::new(ctx(), g)?;
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

fn tensor(v: Value) -> HostTensor {
    match v {
        Value::Tensor(t) => t,
        other => panic!("expected a tensor, got {}", other.kind_name()),
    }
}

fn sequence(v: Value) -> Vec<HostTensor> {
    match v {
        Value::Sequence(items) => items,
        other => panic!("expected a sequence, got {}", other.kind_name()),
    }
}

/// `x`'s elements `start..end` along `axis`, sliced on the host; without the axis where
/// `squeeze`.
fn host_slice(x: &HostTensor, axis: usize, start: usize, end: usize, squeeze: bool) -> HostTensor {
    let size = x.dtype.size();
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product::<usize>() * size;
    let dim = x.shape[axis];
    let mut data = Vec::new();
    for o in 0..outer {
        let base = o * dim * inner;
        data.extend_from_slice(&x.data[base + start * inner..base + end * inner]);
    }
    let mut shape = x.shape.clone();
    shape[axis] = end - start;
    if squeeze {
        shape.remove(axis);
    }
    HostTensor::from_bytes(x.dtype, shape, data).unwrap()
}

/// One graph: `x` split into a sequence `s` by `split` (a constant where given), returned,
/// and joined back along `axis` (stacked where `new_axis`).
fn split_and_join(
    x: &HostTensor,
    split: Option<HostTensor>,
    axis: i64,
    keepdims: Option<i64>,
    new_axis: bool,
) -> (Vec<HostTensor>, HostTensor) {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    let mut g = Graph::new().input("x", x.dtype, &shape);
    let mut node = Node::new("SplitToSequence", "split").attr("axis", Attr::Int(axis));
    if let Some(k) = keepdims {
        node = node.attr("keepdims", Attr::Int(k));
    }
    node = match split {
        Some(s) => {
            g = g.constant("sizes", s);
            node.inputs(["x", "sizes"])
        }
        None => node.inputs(["x"]),
    };
    g = g.node(node.outputs(["s"])).node(
        Node::new("ConcatFromSequence", "join")
            .inputs(["s"])
            .outputs(["y"])
            .attr("axis", Attr::Int(axis))
            .attr("new_axis", Attr::Int(i64::from(new_axis))),
    );
    g.outputs = vec![declared("s", ValueKind::Sequence), ValueInfo::named("y")];
    let mut out = run(g, vec![("x", Value::Tensor(x.clone()))]).unwrap();
    let y = tensor(out.pop().unwrap());
    (sequence(out.pop().unwrap()), y)
}

#[test]
fn split_to_sequence_and_concat_from_sequence_on_every_axis_bit_for_bit() {
    for dtype in [DType::F32, DType::U8, DType::I64, DType::F16] {
        let x = random_tensor(7, dtype, &[3, 5, 4]);
        for axis in -3i64..3 {
            let k = axis.rem_euclid(3) as usize;
            let dim = x.shape[k];
            let what = format!("{dtype} axis {axis}");
            // No split: parts of one, kept or squeezed (then stacked back).
            for keepdims in [1, 0] {
                let (items, y) = split_and_join(&x, None, axis, Some(keepdims), keepdims == 0);
                assert_eq!(items.len(), dim, "{what}");
                for (i, item) in items.iter().enumerate() {
                    assert_eq!(
                        *item,
                        host_slice(&x, k, i, i + 1, keepdims == 0),
                        "{what} part {i}"
                    );
                }
                assert_eq!(y, x, "{what} keepdims {keepdims} joined");
            }
            // A scalar split: parts of 2, the last one shorter where 2 does not divide.
            let (items, y) = split_and_join(&x, Some(scalar_i64(2)), axis, Some(0), false);
            assert_eq!(items.len(), dim.div_ceil(2), "{what}");
            for (i, item) in items.iter().enumerate() {
                let end = (2 * i + 2).min(dim);
                assert_eq!(
                    *item,
                    host_slice(&x, k, 2 * i, end, false),
                    "{what} chunk {i}"
                );
            }
            assert_eq!(y, x, "{what} chunks joined");
            // A list of sizes (i32), one of them 0.
            let sizes: Vec<i32> = vec![1, 0, dim as i32 - 1];
            let split = HostTensor::from_vec(vec![3], &sizes).unwrap();
            let (items, y) = split_and_join(&x, Some(split), axis, None, false);
            let bounds = [(0, 1), (1, 1), (1, dim)];
            for (item, &(s, e)) in items.iter().zip(&bounds) {
                assert_eq!(
                    *item,
                    host_slice(&x, k, s, e, false),
                    "{what} sizes {sizes:?}"
                );
            }
            assert_eq!(y, x, "{what} sizes joined");
        }
    }
}

#[test]
fn positions_count_from_the_end_when_negative_and_default_to_the_end() {
    let t = |v: f32| HostTensor::from_vec(vec![2], &[v, v + 0.5]).unwrap();
    let pos32 = |v: i32| HostTensor::from_vec(Vec::new(), &[v]).unwrap();
    let g = Graph::new()
        .input("a", DType::F32, &[Some(2)])
        .input("b", DType::F32, &[Some(2)])
        .input("c", DType::F32, &[Some(2)])
        .constant("minus1", scalar_i64(-1))
        .constant("zero", pos32(0))
        .constant("minus2", scalar_i64(-2))
        // [a, b] -> insert c before the last: [a, c, b] -> insert a at the end: [a, c, b, a]
        // -> erase the first: [c, b, a] -> erase the last: [c, b]; at -2: c.
        .node(
            Node::new("SequenceConstruct", "make")
                .inputs(["a", "b"])
                .outputs(["s0"]),
        )
        .node(
            Node::new("SequenceInsert", "ins1")
                .inputs(["s0", "c", "minus1"])
                .outputs(["s1"]),
        )
        .node(
            Node::new("SequenceInsert", "ins2")
                .inputs(["s1", "a"])
                .outputs(["s2"]),
        )
        .node(
            Node::new("SequenceErase", "er1")
                .inputs(["s2", "zero"])
                .outputs(["s3"]),
        )
        .node(
            Node::new("SequenceErase", "er2")
                .inputs(["s3"])
                .outputs(["s4"]),
        )
        .node(
            Node::new("SequenceAt", "at")
                .inputs(["s4", "minus2"])
                .outputs(["first"]),
        )
        .node(
            Node::new("SequenceLength", "len")
                .inputs(["s2"])
                .outputs(["n"]),
        )
        // A tensor op on a sequence's tensor, on the GPU.
        .node(Node::new("Neg", "neg").inputs(["first"]).outputs(["neg"]));
    let mut g = g;
    g.outputs = vec![
        declared("s2", ValueKind::Sequence),
        declared("s4", ValueKind::Sequence),
        ValueInfo::named("n"),
        ValueInfo::named("neg"),
    ];
    let (a, b, c) = (t(1.0), t(2.0), t(3.0));
    let out = run(
        g,
        vec![
            ("a", Value::Tensor(a.clone())),
            ("b", Value::Tensor(b.clone())),
            ("c", Value::Tensor(c.clone())),
        ],
    )
    .unwrap();
    assert_eq!(
        out[0],
        Value::Sequence(vec![a.clone(), c.clone(), b.clone(), a.clone()])
    );
    assert_eq!(out[1], Value::Sequence(vec![c.clone(), b.clone()]));
    assert_eq!(out[2], Value::Tensor(scalar_i64(4)));
    let negated = HostTensor::from_vec(vec![2], &[-3.0f32, -3.5]).unwrap();
    assert_eq!(out[3], Value::Tensor(negated));
}

#[test]
fn sequences_and_optionals_pass_into_and_out_of_a_run() {
    // A sequence input mapped by SequenceMap (with a tensor input read whole), an optional
    // input that may hold nothing, and OptionalHasElement on both.
    let body = {
        let mut b = Graph::new()
            .node(
                Node::new("Add", "add")
                    .inputs(["item", "bias"])
                    .outputs(["sum"]),
            )
            .node(
                Node::new("Shape", "shape")
                    .inputs(["item"])
                    .outputs(["dims"]),
            );
        b.inputs = vec![ValueInfo::named("item"), ValueInfo::named("bias")];
        b.outputs = vec![ValueInfo::named("sum"), ValueInfo::named("dims")];
        b
    };
    let mut g = Graph::new()
        .input("bias", DType::F32, &[Some(1)])
        .node(
            Node::new("SequenceMap", "map")
                .inputs(["s", "bias"])
                .outputs(["sums", "shapes"])
                .attr("body", Attr::Graph(Box::new(body))),
        )
        .node(
            Node::new("OptionalHasElement", "has")
                .inputs(["maybe"])
                .outputs(["has"]),
        )
        .node(
            Node::new("Identity", "same")
                .inputs(["maybe"])
                .outputs(["maybe_out"]),
        );
    let mut s = declared("s", ValueKind::Sequence);
    s.dtype = Some(DType::F32);
    g.inputs.push(s);
    g.inputs.push(declared("maybe", ValueKind::OptionalTensor));
    g.outputs = vec![
        declared("sums", ValueKind::Sequence),
        declared("shapes", ValueKind::Sequence),
        ValueInfo::named("has"),
        declared("maybe_out", ValueKind::OptionalTensor),
    ];
    let items = vec![
        HostTensor::from_vec(vec![2], &[1.0f32, 2.0]).unwrap(),
        HostTensor::from_vec(vec![3, 1], &[3.0f32, 4.0, 5.0]).unwrap(),
    ];
    let bias = HostTensor::from_vec(vec![1], &[10.0f32]).unwrap();
    let session = Session::new(ctx(), g).unwrap();
    for maybe in [Value::None, Value::Tensor(scalar_i64(5))] {
        let out: Vec<Value> = session
            .run_values_blocking(vec![
                ("s".into(), Value::Sequence(items.clone())),
                ("bias".into(), Value::Tensor(bias.clone())),
                ("maybe".into(), maybe.clone()),
            ])
            .unwrap()
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let want_sums = vec![
            HostTensor::from_vec(vec![2], &[11.0f32, 12.0]).unwrap(),
            HostTensor::from_vec(vec![3, 1], &[13.0f32, 14.0, 15.0]).unwrap(),
        ];
        let want_shapes = vec![
            HostTensor::from_vec(vec![1], &[2i64]).unwrap(),
            HostTensor::from_vec(vec![2], &[3i64, 1]).unwrap(),
        ];
        assert_eq!(out[0], Value::Sequence(want_sums));
        assert_eq!(out[1], Value::Sequence(want_shapes));
        let has = maybe != Value::None;
        assert_eq!(
            out[2],
            Value::Tensor(HostTensor::from_vec(Vec::new(), &[has]).unwrap())
        );
        assert_eq!(out[3], maybe);
    }
    // An empty sequence maps to empty sequences.
    let out = session
        .run_values_blocking(vec![
            ("s".into(), Value::Sequence(Vec::new())),
            ("bias".into(), Value::Tensor(bias.clone())),
            ("maybe".into(), Value::None),
        ])
        .unwrap();
    assert_eq!(out[0].1, Value::Sequence(Vec::new()));
}

#[test]
fn a_loop_carries_a_sequence_that_grows_and_then_joins_it() {
    // for i in 0..4: s.append(x[0 : i + 1]); then the parts joined: x[0:1] x[0:2] ... on axis 0.
    let x = HostTensor::from_vec(vec![4], &[1i32, 2, 3, 4]).unwrap();
    let mut body = Graph::new()
        .constant("one", scalar_i64(1))
        .constant("zero", HostTensor::from_vec(vec![1], &[0i64]).unwrap())
        .constant("axes", HostTensor::from_vec(vec![1], &[0i64]).unwrap())
        .node(
            Node::new("Add", "end")
                .inputs(["i", "one"])
                .outputs(["end"]),
        )
        .node(
            Node::new("Unsqueeze", "u")
                .inputs(["end", "axes"])
                .outputs(["ends"]),
        )
        .node(
            Node::new("OnnxSlice", "part")
                .inputs(["x", "zero", "ends"])
                .outputs(["part"]),
        )
        .node(
            Node::new("SequenceInsert", "push")
                .inputs(["s_in", "part"])
                .outputs(["s_out"]),
        )
        .node(
            Node::new("Identity", "c")
                .inputs(["cond"])
                .outputs(["cond_out"]),
        );
    body.inputs = vec![
        ValueInfo::named("i"),
        ValueInfo::named("cond"),
        declared("s_in", ValueKind::Sequence),
    ];
    body.outputs = vec![
        ValueInfo::named("cond_out"),
        declared("s_out", ValueKind::Sequence),
    ];
    let mut g = Graph::new()
        .input("x", DType::I32, &[Some(4)])
        .constant("m", scalar_i64(4))
        .node(
            Node::new("SequenceEmpty", "empty")
                .outputs(["s0"])
                .attr("dtype", Attr::String("i32".into())),
        )
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "s0"])
                .outputs(["s"])
                .attr("body", Attr::Graph(Box::new(body))),
        )
        .node(
            Node::new("ConcatFromSequence", "join")
                .inputs(["s"])
                .outputs(["y"])
                .attr("axis", Attr::Int(0)),
        );
    g.outputs = vec![ValueInfo::named("y")];
    // Through `run`: the graph's inputs and outputs are tensors.
    let y = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap()
        .remove(0)
        .1;
    assert_eq!(y.to_vec::<i32>().unwrap(), [1, 1, 2, 1, 2, 3, 1, 2, 3, 4]);
}

/// The error of running `g` on `inputs`, as one line.
fn refusal(g: Graph, inputs: Vec<(&str, Value)>) -> String {
    let e = run(g, inputs).expect_err("refused").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn three() -> Vec<(&'static str, Value)> {
    let t = HostTensor::from_vec(vec![2], &[1.0f32, 2.0]).unwrap();
    vec![("a", Value::Tensor(t))]
}

fn pair_graph() -> Graph {
    Graph::new().input("a", DType::F32, &[Some(2)]).node(
        Node::new("SequenceConstruct", "make")
            .inputs(["a", "a"])
            .outputs(["s"]),
    )
}

#[test]
fn misuse_is_refused_in_one_line_naming_the_op_and_the_input() {
    // A position out of range.
    let g = pair_graph()
        .constant("p", scalar_i64(2))
        .node(
            Node::new("SequenceAt", "at")
                .inputs(["s", "p"])
                .outputs(["y"]),
        )
        .output("y");
    let e = refusal(g, three());
    assert!(
        e.contains("SequenceAt") && e.contains("position 2") && e.contains("from -2 to 1"),
        "{e}"
    );
    // A position computed on the GPU.
    let g = pair_graph()
        .input("q", DType::I64, &[Some(1)])
        .node(Node::new("ReduceSum", "p").inputs(["q"]).outputs(["p"]))
        .node(
            Node::new("SequenceAt", "at")
                .inputs(["s", "p"])
                .outputs(["y"]),
        )
        .output("y");
    let no_read_back = common::ctx_without_read_back();
    let session = Session::new(&no_read_back, g.clone()).unwrap();
    let q = HostTensor::from_vec(vec![1], &[1i64]).unwrap();
    let a = HostTensor::from_vec(vec![2], &[1.0f32, 2.0]).unwrap();
    let tensors = |ctx: &wgpu_ops::Context| {
        vec![
            (
                "a".to_string(),
                wgpu_ops::Tensor::from_host(ctx, &a).unwrap(),
            ),
            (
                "q".to_string(),
                wgpu_ops::Tensor::from_host(ctx, &q).unwrap(),
            ),
        ]
    };
    let e = session
        .run_tensors_blocking(tensors(&no_read_back))
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("SequenceAt") && e.contains("computed on the GPU"),
        "{e}"
    );
    // With read-backs (native builds by default) the position is read back: ReduceSum of
    // [1] is 1, the sequence's second tensor.
    let y = Session::new(ctx(), g)
        .unwrap()
        .run_tensors_blocking(tensors(ctx()))
        .unwrap()
        .remove(0)
        .1;
    assert_eq!(y.to_host_blocking().unwrap(), a);
    // A tensor op reading a sequence.
    let g = pair_graph()
        .node(Node::new("Relu", "r").inputs(["s"]).outputs(["y"]))
        .output("y");
    let e = refusal(g, three());
    assert!(e.contains("Relu input 0 ('s') is a sequence"), "{e}");
    // A tensor of another dtype inserted.
    let g = pair_graph().constant("i", scalar_i64(1)).node(
        Node::new("SequenceInsert", "ins")
            .inputs(["s", "i"])
            .outputs(["t"]),
    );
    let mut g = g;
    g.outputs = vec![declared("t", ValueKind::Sequence)];
    let e = refusal(g, three());
    assert!(
        e.contains("SequenceInsert") && e.contains("share one dtype"),
        "{e}"
    );
    // The element of an empty optional.
    let g = Graph::new()
        .node(
            Node::new("Optional", "o")
                .outputs(["o"])
                .attr("type", Attr::String("tensor(f32)".into())),
        )
        .node(
            Node::new("OptionalGetElement", "get")
                .inputs(["o"])
                .outputs(["y"]),
        )
        .output("y");
    let e = refusal(g, Vec::new());
    assert!(
        e.contains("OptionalGetElement") && e.contains("empty optional"),
        "{e}"
    );
    // Joining an empty sequence.
    let g = Graph::new()
        .node(Node::new("SequenceEmpty", "e").outputs(["s"]))
        .node(
            Node::new("ConcatFromSequence", "join")
                .inputs(["s"])
                .outputs(["y"])
                .attr("axis", Attr::Int(0)),
        )
        .output("y");
    let e = refusal(g, Vec::new());
    assert!(
        e.contains("ConcatFromSequence") && e.contains("is empty"),
        "{e}"
    );
    // Sizes that do not cover the axis.
    let g = Graph::new()
        .input("a", DType::F32, &[Some(2)])
        .constant("sizes", HostTensor::from_vec(vec![2], &[1i64, 2]).unwrap())
        .node(
            Node::new("SplitToSequence", "split")
                .inputs(["a", "sizes"])
                .outputs(["s"]),
        )
        .node(
            Node::new("ConcatFromSequence", "join")
                .inputs(["s"])
                .outputs(["y"])
                .attr("axis", Attr::Int(0)),
        )
        .output("y");
    let e = refusal(g, three());
    assert!(
        e.contains("SplitToSequence: split") && e.contains("add up"),
        "{e}"
    );
    // A sequence where a tensor is declared, and the other way round.
    let mut g = pair_graph();
    g.outputs = vec![ValueInfo {
        dtype: Some(DType::F32),
        ..ValueInfo::named("s")
    }];
    let e = refusal(g, three());
    assert!(
        e.contains("output 's' is declared a tensor but is a sequence"),
        "{e}"
    );
    let mut g = Graph::new().node(
        Node::new("SequenceLength", "n")
            .inputs(["s"])
            .outputs(["n"]),
    );
    g.inputs.push(declared("s", ValueKind::Sequence));
    g.outputs = vec![ValueInfo::named("n")];
    let e = refusal(
        g,
        vec![(
            "s",
            Value::Tensor(HostTensor::from_vec(vec![1], &[1.0f32]).unwrap()),
        )],
    );
    assert!(
        e.contains("input 's' is declared a sequence but is a tensor"),
        "{e}"
    );
    // `run` points at `run_values` for a sequence output.
    let mut g = pair_graph();
    g.outputs = vec![declared("s", ValueKind::Sequence)];
    let t = HostTensor::from_vec(vec![2], &[1.0f32, 2.0]).unwrap();
    let e = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("a".into(), t)])
        .expect_err("refused")
        .to_string();
    assert!(e.contains("run_values"), "{e}");
}

#[test]
fn a_scan_body_reads_a_sequence_of_the_graph_around_it_and_splits_and_joins_its_own() {
    // state += rows[1] + elem, where rows is a sequence outside the body; the body also
    // splits its element into a sequence and joins it back (a copy).
    let x = HostTensor::from_vec(vec![2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let elems =
        HostTensor::from_vec(vec![4, 3], &(0..12).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
    let mut body = Graph::new()
        .constant("one", scalar_i64(1))
        .node(
            Node::new("SequenceAt", "at")
                .inputs(["rows", "one"])
                .outputs(["row"]),
        )
        .node(
            Node::new("SplitToSequence", "split")
                .inputs(["elem"])
                .outputs(["parts"]),
        )
        .node(
            Node::new("ConcatFromSequence", "join")
                .inputs(["parts"])
                .outputs(["copy"])
                .attr("axis", Attr::Int(0)),
        )
        .node(
            Node::new("Add", "a")
                .inputs(["state", "row"])
                .outputs(["s1"]),
        )
        .node(
            Node::new("Add", "b")
                .inputs(["s1", "copy"])
                .outputs(["next"]),
        )
        .node(
            Node::new("Identity", "out")
                .inputs(["next"])
                .outputs(["seen"]),
        );
    body.inputs = vec![ValueInfo::named("state"), ValueInfo::named("elem")];
    body.outputs = vec![ValueInfo::named("next"), ValueInfo::named("seen")];
    let g = Graph::new()
        .input("x", DType::F32, &[Some(2), Some(3)])
        .input("elems", DType::F32, &[Some(4), Some(3)])
        .constant("init", HostTensor::from_vec(vec![3], &[0.0f32; 3]).unwrap())
        .node(
            Node::new("SplitToSequence", "rows")
                .inputs(["x"])
                .outputs(["rows"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Scan", "scan")
                .inputs(["init", "elems"])
                .outputs(["final", "all"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("final")
        .output("all");
    for ctx in [ctx(), ctx_emulating_64_bit()] {
        let out = Session::new(ctx, g.clone())
            .unwrap()
            .run_blocking(vec![
                ("x".into(), x.clone()),
                ("elems".into(), elems.clone()),
            ])
            .unwrap();
        // final = 4 * [4, 5, 6] + column sums of elems.
        let want: Vec<f32> = (0..3)
            .map(|j| 4.0 * (4.0 + j as f32) + (0..4).map(|i| (3 * i + j) as f32).sum::<f32>())
            .collect();
        assert_eq!(out[0].1.to_vec::<f32>().unwrap(), want);
        assert_eq!(out[1].1.shape, [4, 3]);
    }
}
