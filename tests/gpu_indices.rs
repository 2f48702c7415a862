//! Indices computed on the GPU: a graph's Gather, GatherElements, GatherND, ScatterElements,
//! ScatterND and ArrayFeatureExtractor report one out of range after the run (read back with
//! the outputs), naming the node path, the op, the index's position and value, and the axis.
//! Indices known on the host are checked while planning (tests/graph.rs, tests/errors.rs).

mod common;
use common::*;
use wgpu_ops::graph::Attr;
use wgpu_ops::{reference, DType, Error, Graph, HostTensor, Node, Session, Tensor};

fn i64s(shape: &[usize], v: &[i64]) -> HostTensor {
    HostTensor::from_vec(shape.to_vec(), v).unwrap()
}

fn f32s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_vec(shape.to_vec(), v).unwrap()
}

/// `graph` with input `i` (i64, the shape of `given`) shifted by `shift` on the GPU into `at`.
fn shifted(graph: Graph, shape: &[usize], shift: i64) -> Graph {
    graph
        .input(
            "i",
            DType::I64,
            &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
        )
        .constant("shift", i64s(&[], &[shift]))
        .node(
            Node::new("Add", "shift")
                .inputs(["i", "shift"])
                .outputs(["at"]),
        )
}

/// Runs `graph` on the GPU and in the CPU interpreter; returns the GPU's error line, checked
/// to be an index out of range, one line, and an error of the interpreter too.
fn refused(graph: Graph, inputs: Vec<(String, HostTensor)>) -> String {
    assert!(
        reference::graph::run_graph(&graph, &inputs, &Default::default()).is_err(),
        "the interpreter must refuse it too"
    );
    let session = Session::new(ctx(), graph).unwrap();
    let e = session.run_blocking(inputs).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { .. }), "{e:?}");
    let line = e.to_string();
    assert!(!line.contains('\n'), "{line}");
    line
}

fn gather_graph(op: &str, data: HostTensor, axis: i64, indices: &[usize], shift: i64) -> Graph {
    shifted(Graph::new(), indices, shift)
        .constant("data", data)
        .node(
            Node::new(op, "pick")
                .inputs(["data", "at"])
                .outputs(["y"])
                .attr("axis", Attr::Int(axis)),
        )
        .output("y")
}

#[test]
fn gathers_report_an_index_computed_out_of_range() {
    let data = f32s(&[3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    // Gather along axis 1 (of 4): element 2 of the shifted indices is 1 + 4 = 5.
    let g = gather_graph("Gather", data.clone(), 1, &[3], 4);
    let inputs = vec![("i".to_string(), i64s(&[3], &[-4, -5, 1]))];
    let line = refused(g, inputs);
    assert_eq!(
        line,
        "node 'pick': Gather: index 5 (element 2 of indices, read on the GPU) is out of range for axis 1 of size 4"
    );
    // Negative beyond the axis, and a value that does not fit in 32 bits.
    for (given, value, element) in [(-13i64, -9i64, 1usize), ((1 << 33) - 4, 1 << 33, 1)] {
        let g = gather_graph("Gather", data.clone(), 0, &[2], 4);
        let inputs = vec![("i".to_string(), i64s(&[2], &[-2, given]))];
        let line = refused(g, inputs);
        assert!(
            line.contains(&format!("index {value} (element {element} of indices")),
            "{line}"
        );
        assert!(line.contains("axis 0 of size 3"), "{line}");
    }
    // GatherElements: the position is the element's in the indices.
    let g = gather_graph("GatherElements", data.clone(), 0, &[1, 4], 0);
    let inputs = vec![("i".to_string(), i64s(&[1, 4], &[0, 2, -3, 3]))];
    let line = refused(g, inputs);
    assert_eq!(
        line,
        "node 'pick': GatherElements: index 3 (element 3 of indices, read on the GPU) is out of range for axis 0 of size 3"
    );
}

#[test]
fn gathers_of_indices_computed_in_range_run_as_the_interpreter() {
    let data = f32s(&[3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    for (op, axis, shape, given) in [
        ("Gather", 1, vec![3], vec![-8i64, -5, -2]),
        ("Gather", 0, vec![2, 2], vec![-4, -6, -5, -4]),
        (
            "GatherElements",
            1,
            vec![3, 2],
            vec![-4, -1, -3, -2, -4, -4],
        ),
    ] {
        let g = gather_graph(op, data.clone(), axis, &shape, 4);
        let inputs = vec![("i".to_string(), i64s(&shape, &given))];
        let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
        // A context of its own: its buffer count is the session's alone.
        let ctx = own_ctx();
        let session = Session::new(&ctx, g).unwrap();
        let got = session.run_blocking(inputs.clone()).unwrap();
        assert_eq!(got[0].1, want[0], "{op}");
        // A fault of one run is not the next one's, and a run after a run makes no buffers
        // (the fault buffer is the last run's, zeroed).
        let mut bad = inputs[0].1.clone();
        bad.data[..8].copy_from_slice(&100i64.to_le_bytes());
        let e = session
            .run_blocking(vec![("i".to_string(), bad)])
            .unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { .. }), "{op}: {e}");
        let got = session.run_blocking(inputs.clone()).unwrap();
        assert_eq!(got[0].1, want[0], "{op}");
        let before = ctx.stats().buffers_created;
        let got = session.run_blocking(inputs).unwrap();
        assert_eq!(got[0].1, want[0], "{op}");
        assert_eq!(ctx.stats().buffers_created, before, "{op}");
    }
}

#[test]
fn gather_nd_reports_a_tuple_out_of_range_on_one_axis() {
    // [0, 5] on data [3, 4] is row 5 of the flattened data, in range there, but its second
    // entry is past axis 1: it must not read element [1, 1].
    let data = f32s(&[3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let g = shifted(Graph::new(), &[2, 2], 1)
        .constant("data", data.clone())
        .node(
            Node::new("GatherND", "nd")
                .inputs(["data", "at"])
                .outputs(["y"]),
        )
        .output("y");
    let inputs = vec![("i".to_string(), i64s(&[2, 2], &[1, 2, -1, 4]))];
    let line = refused(g.clone(), inputs);
    assert_eq!(
        line,
        "node 'nd': GatherND: tuple 1 of indices (read on the GPU) is out of range for data's axes from 0 on, of sizes [3, 4]"
    );
    // In range (negative entries too), it gathers as the interpreter does.
    let inputs = vec![("i".to_string(), i64s(&[2, 2], &[1, -2, -4, -5]))];
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    let got = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(inputs)
        .unwrap();
    assert_eq!(got[0].1, want[0]);
    assert_eq!(got[0].1.to_vec::<f32>().unwrap(), vec![11.0, 0.0]);
}

#[test]
fn scatters_report_an_index_computed_out_of_range() {
    let data = f32s(&[3, 4], &[0.0; 12]);
    let g = shifted(Graph::new(), &[2, 2], 1)
        .constant("data", data.clone())
        .constant("updates", f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]))
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["data", "at", "updates"])
                .outputs(["y"])
                .attr("axis", Attr::Int(1)),
        )
        .output("y");
    let inputs = vec![("i".to_string(), i64s(&[2, 2], &[0, 1, 3, -6]))];
    let line = refused(g, inputs);
    assert_eq!(
        line,
        "node 'put': ScatterElements: index 4 (element 2 of indices, read on the GPU) is out of range for axis 1 of size 4"
    );
    // Our `unique_indices` (distinct targets, at once on GPUs): an index per update, and one
    // per row of whole quads (16 f32), the same report.
    let g = shifted(Graph::new(), &[2, 2], 1)
        .constant("data", data.clone())
        .constant("updates", f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]))
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["data", "at", "updates"])
                .outputs(["y"])
                .attr("axis", Attr::Int(1))
                .attr("unique_indices", Attr::Int(1)),
        )
        .output("y");
    let inputs = vec![("i".to_string(), i64s(&[2, 2], &[0, 1, 3, -6]))];
    assert_eq!(
        refused(g, inputs),
        "node 'put': ScatterElements: index 4 (element 2 of indices, read on the GPU) is out of range for axis 1 of size 4"
    );
    let g = shifted(Graph::new(), &[2, 2, 1], 1)
        .constant("rows", f32s(&[2, 3, 16], &[0.0; 96]))
        .constant("updates", f32s(&[2, 2, 16], &[1.0; 64]))
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["rows", "at", "updates"])
                .outputs(["y"])
                .attr("axis", Attr::Int(1))
                .attr("unique_indices", Attr::Int(1)),
        )
        .output("y");
    let inputs = vec![("i".to_string(), i64s(&[2, 2, 1], &[0, 1, 2, -3]))];
    assert_eq!(
        refused(g, inputs),
        "node 'put': ScatterElements: index 3 (element 2 of indices, read on the GPU) is out of range for axis 1 of size 3"
    );
    // ScatterND: the entry of the tuple that is out of range, and its axis.
    let g = shifted(Graph::new(), &[2, 2], 0)
        .constant("data", data)
        .constant("updates", f32s(&[2], &[1.0, 2.0]))
        .node(
            Node::new("ScatterND", "put")
                .inputs(["data", "at", "updates"])
                .outputs(["y"]),
        )
        .output("y");
    let inputs = vec![("i".to_string(), i64s(&[2, 2], &[2, 3, -1, -5]))];
    let line = refused(g, inputs);
    assert_eq!(
        line,
        "node 'put': ScatterND: index -5 (entry 1 of tuple 1 of indices, read on the GPU) is out of range for axis 1 of size 4"
    );
}

#[test]
fn an_index_out_of_range_in_a_scan_body_names_the_scan() {
    // Each iteration gathers row `t + shift` of the table: the third is past it.
    // The body reads `table` from the enclosing graph.
    let body = Graph::new()
        .input("acc", DType::F32, &[Some(2)])
        .input("t", DType::I64, &[])
        .node(
            Node::new("Gather", "row")
                .inputs(["table", "t"])
                .outputs(["r"])
                .attr("axis", Attr::Int(0)),
        )
        .node(
            Node::new("Add", "sum")
                .inputs(["acc", "r"])
                .outputs(["acc2"]),
        )
        .output("acc2");
    let g = shifted(Graph::new(), &[4], 0)
        .constant("acc0", f32s(&[2], &[0.0, 0.0]))
        .constant("table", f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .node(
            Node::new("Scan", "loop")
                .inputs(["acc0", "at"])
                .outputs(["total"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("total");
    let inputs = vec![("i".to_string(), i64s(&[4], &[0, 2, 3, 1]))];
    let line = refused(g.clone(), inputs);
    assert_eq!(
        line,
        "node 'loop': node 'row': Gather: index 3 (element 0 of indices, read on the GPU) is out of range for axis 0 of size 3"
    );
    let inputs = vec![("i".to_string(), i64s(&[4], &[0, 2, -1, 1]))];
    let got = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(inputs)
        .unwrap();
    assert_eq!(got[0].1.to_vec::<f32>().unwrap(), vec![14.0, 18.0]);
}

#[test]
fn a_shape_read_back_after_an_index_out_of_range_reports_the_index() {
    // The Reshape's shape is gathered from a table by an index on the GPU: reading it back
    // to plan the Reshape finds the fault first, instead of planning with the zeros it read.
    let g = Graph::new()
        .input("at", DType::I64, &[Some(2)])
        .input("x", DType::F32, &[Some(6)])
        .constant("dims", i64s(&[3], &[2, 3, 6]))
        .node(
            Node::new("Gather", "dims_of")
                .inputs(["dims", "at"])
                .outputs(["shape"])
                .attr("axis", Attr::Int(0)),
        )
        .node(
            Node::new("Reshape", "fold")
                .inputs(["x", "shape"])
                .outputs(["y"]),
        )
        .output("y");
    let session = Session::new(ctx(), g).unwrap();
    let x = Tensor::from_host(ctx(), &f32s(&[6], &[1.0; 6])).unwrap();
    let run = |at: &[i64]| {
        let at = Tensor::from_host(ctx(), &i64s(&[2], at)).unwrap();
        session.run_tensors_blocking(vec![("at".to_string(), at), ("x".to_string(), x.clone())])
    };
    let e = run(&[3, 0]).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "node 'dims_of': Gather: index 3 (element 0 of indices, read on the GPU) is out of range for axis 0 of size 3"
    );
    let y = run(&[0, -2]).unwrap();
    assert_eq!(y[0].1.shape(), &[2, 3]);
}

#[test]
fn run_tensors_leaves_the_check_to_check_gpu_indices() {
    let data = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let g = Graph::new()
        .input("i", DType::I64, &[Some(2)])
        .constant("data", data)
        .node(
            Node::new("Gather", "pick")
                .inputs(["data", "i"])
                .outputs(["y"])
                .attr("axis", Attr::Int(0)),
        )
        .output("y");
    let session = Session::new(ctx(), g).unwrap();
    let run = |given: &[i64]| {
        let i = Tensor::from_host(ctx(), &i64s(&[2], given)).unwrap();
        session
            .run_tensors_blocking(vec![("i".to_string(), i)])
            .unwrap()
    };
    // No check, no wait: the run returns its outputs, the check reports the fault.
    let out = run(&[1, 7]);
    let e = session.check_gpu_indices_blocking().unwrap_err();
    assert_eq!(
        e.to_string(),
        "node 'pick': Gather: index 7 (element 1 of indices, read on the GPU) is out of range for axis 0 of size 4"
    );
    assert_eq!(
        out[0]
            .1
            .to_host_blocking()
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![2.0, 0.0]
    );
    // A run in range is clean (the fault does not carry over from the last run).
    let out = run(&[-1, 0]);
    session.check_gpu_indices_blocking().unwrap();
    assert_eq!(
        out[0]
            .1
            .to_host_blocking()
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![4.0, 1.0]
    );
}

/// The value and position an index fault reports (`index V (element P of indices`).
fn reported(e: &Error) -> (i64, usize) {
    let line = e.to_string();
    let at = line.find("index ").expect("an index") + 6;
    let rest = &line[at..];
    let value: i64 = rest[..rest.find(' ').unwrap()].parse().unwrap();
    let at = rest.find("(element ").expect("a position") + 9;
    let rest = &rest[at..];
    let position: usize = rest[..rest.find(' ').unwrap()].parse().unwrap();
    (value, position)
}

#[test]
fn random_gathers_and_scatters_of_computed_indices_agree_with_the_interpreter() {
    let (mut refused_both, mut ran) = (0, 0);
    for seed in 0..90u64 {
        let r = bytes(seed, 256);
        let mut next = r.iter().map(|&b| b as usize).cycle();
        let mut pick = |n: usize| next.next().unwrap() % n;
        let op = ["Gather", "GatherElements", "ScatterElements"][seed as usize % 3];
        let rank = 1 + pick(3);
        let shape: Vec<usize> = (0..rank).map(|_| 1 + pick(4)).collect();
        let axis = pick(rank);
        let len = shape[axis] as i64;
        let index_shape: Vec<usize> = match op {
            "Gather" => (0..1 + pick(2)).map(|_| 1 + pick(4)).collect(),
            _ => {
                let mut s = shape.clone();
                s[axis] = 1 + pick(4);
                s
            }
        };
        let n: usize = index_shape.iter().product();
        // About one index in eight out of range, on either side, some far out.
        let given: Vec<i64> = (0..n)
            .map(|_| match pick(16) {
                0 => len + pick(3) as i64,
                1 => -len - 1 - pick(3) as i64,
                _ => pick(2 * len as usize) as i64 - len,
            })
            .collect();
        let i32_indices = pick(2) == 0;
        let dtype = if i32_indices { DType::I32 } else { DType::I64 };
        let as_dtype = |v: &[i64], shape: &[usize]| match i32_indices {
            true => HostTensor::from_vec(
                shape.to_vec(),
                &v.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            )
            .unwrap(),
            false => i64s(shape, v),
        };
        let numel: usize = shape.iter().product();
        let data = f32s(&shape, &(0..numel).map(|v| v as f32).collect::<Vec<_>>());
        let mut g = Graph::new()
            .input(
                "i",
                dtype,
                &index_shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
            )
            .constant("zero", as_dtype(&[0], &[]))
            .constant("data", data)
            .node(
                Node::new("Add", "shift")
                    .inputs(["i", "zero"])
                    .outputs(["at"]),
            );
        let mut inputs_of = vec!["data", "at"];
        if op == "ScatterElements" {
            let updates: Vec<f32> = (0..n).map(|v| -(v as f32) - 1.0).collect();
            g = g.constant("updates", f32s(&index_shape, &updates));
            inputs_of.push("updates");
        }
        let g = g
            .node(
                Node::new(op, "op")
                    .inputs(inputs_of)
                    .outputs(["y"])
                    .attr("axis", Attr::Int(axis as i64)),
            )
            .output("y");
        let inputs = vec![("i".to_string(), as_dtype(&given, &index_shape))];
        let what =
            format!("seed {seed}: {op} on {shape:?} axis {axis}, indices {given:?} ({dtype})");
        let want = reference::graph::run_graph(&g, &inputs, &Default::default());
        let got = Session::new(ctx(), g).unwrap().run_blocking(inputs);
        match (want, got) {
            (Ok(want), Ok(got)) => {
                assert_eq!(got[0].1, want[0], "{what}");
                ran += 1;
            }
            (Err(_), Err(e)) => {
                assert!(matches!(e, Error::IndexOutOfRange { .. }), "{what}: {e}");
                let (value, position) = reported(&e);
                assert_eq!(given[position], value, "{what}: {e}");
                assert!(value < -len || value >= len, "{what}: {e}");
                assert!(
                    e.to_string()
                        .contains(&format!("axis {axis} of size {len}")),
                    "{e}"
                );
                refused_both += 1;
            }
            (want, got) => panic!("{what}: the interpreter gave {want:?}, the GPU {got:?}"),
        }
    }
    // Both kinds of case were drawn.
    assert!(
        ran >= 20 && refused_both >= 20,
        "{ran} ran, {refused_both} refused"
    );
}

/// A loss (an ONNX op the loader expands) of targets computed in the graph: an ignored target
/// is not an index out of range, a class past the scores is, and so is a negative one other
/// than ignore_index (the expansion's GatherElements would count it from the last class),
/// each reported by the loss's rule on its targets (`CheckValues`), as for targets known on
/// the host.
#[test]
fn a_loss_of_computed_targets_reports_a_class_out_of_range() {
    use prost::Message;
    use wgpu_ops::onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto, ValueInfoProto};
    use wgpu_ops::onnx::{onnx_code, Model};
    let i64_code = onnx_code(DType::I64).unwrap();
    let mut loss = common::onnx_proto::node("NegativeLogLikelihoodLoss", &["x", "tt"], &["loss"]);
    loss.name = Some("loss".into());
    loss.attribute = vec![common::onnx_proto::int_attr("ignore_index", -1)];
    let graph = GraphProto {
        node: vec![common::onnx_proto::node("Add", &["t", "z"], &["tt"]), loss],
        input: vec![
            common::onnx_proto::value("x", onnx_code(DType::F32).unwrap(), &[Some(3), Some(4)]),
            common::onnx_proto::value("t", i64_code, &[Some(3)]),
            common::onnx_proto::value("z", i64_code, &[]),
        ],
        output: vec![ValueInfoProto {
            name: Some("loss".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let m = ModelProto {
        ir_version: Some(9),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    let model = Model::from_bytes(&m.encode_to_vec()).unwrap();
    let session = model.session(ctx()).unwrap();
    let x: Vec<f32> = (0..12).map(|v| v as f32 * 0.5).collect();
    let run = |t: &[i64]| {
        session.run_blocking(vec![
            ("x".to_string(), f32s(&[3, 4], &x)),
            ("t".to_string(), i64s(&[3], t)),
            ("z".to_string(), i64s(&[], &[0])),
        ])
    };
    // The mean of -x[0][1] and -x[2][3] (the second target ignored).
    let got = run(&[1, -1, 3]).unwrap();
    assert_eq!(got[0].1.to_vec::<f32>().unwrap(), vec![-(0.5 + 5.5) / 2.0]);
    for (t, says) in [
        (
            [1, -1, 7],
            "target's element 2 is 7; a class must be in 0..4 (or ignore_index -1)",
        ),
        (
            [-2, -1, 0],
            "target's element 0 is -2; a class must be in 0..4 (or ignore_index -1)",
        ),
    ] {
        let e = run(&t).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("node 'loss': NegativeLogLikelihoodLoss: {says}")
        );
    }
}

/// ArrayFeatureExtractor's indices are its input Y: the report names that input.
#[test]
fn array_feature_extractor_names_its_input_y() {
    let data = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let g = shifted(Graph::new(), &[2], 1)
        .constant("X", data)
        .node(
            Node::new("ai.onnx.ml.ArrayFeatureExtractor", "pick")
                .inputs(["X", "at"])
                .outputs(["y"]),
        )
        .output("y");
    let inputs = vec![("i".to_string(), i64s(&[2], &[-1, 2]))];
    let line = refused(g, inputs);
    assert_eq!(
        line,
        "node 'pick': ArrayFeatureExtractor: index 3 (element 1 of Y, read on the GPU) is out of range for axis 1 of size 3"
    );
}

/// A context binding at most 256 bytes, in buffers of 1 KiB.
fn windowed() -> wgpu_ops::Context {
    wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_buffer_size: Some(1024),
        max_binding_size: Some(256),
        webgpu_limits: ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap()
}

/// Runs `g` (input `i`, i64 of `shape`) on `ctx` with `given` indices, checked against the
/// interpreter, then with 47 at `bad_at`, which both must refuse; returns the GPU's line.
fn runs_then_reports(
    ctx: &wgpu_ops::Context,
    g: Graph,
    shape: &[usize],
    given: &[i64],
    bad_at: usize,
) -> String {
    let inputs = vec![("i".to_string(), i64s(shape, given))];
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    let session = Session::new(ctx, g.clone()).unwrap();
    let got = session.run_blocking(inputs).unwrap();
    assert_eq!(got[0].1, want[0]);
    let mut bad = given.to_vec();
    bad[bad_at] = 47;
    let inputs = vec![("i".to_string(), i64s(shape, &bad))];
    let e = session.run_blocking(inputs.clone()).unwrap_err();
    assert!(reference::graph::run_graph(&g, &inputs, &Default::default()).is_err());
    e.to_string()
}

/// Gathers in passes over windows (data, indices and outputs past a binding of 256 bytes, in
/// buffers of 1 KiB): an index computed out of range is reported as when bound whole, by the
/// pass that reads it, and indices in range gather as the interpreter does (rows of whole
/// quads, rows of 9 bytes, GatherElements).
#[test]
fn gathers_in_windows_report_an_index_computed_out_of_range() {
    let ctx = windowed();
    let quads = f32s(&[40, 4], &(0..160).map(|v| v as f32).collect::<Vec<_>>());
    let bytes =
        HostTensor::from_vec(vec![40, 9], &(0..360).map(|v| v as u8).collect::<Vec<_>>()).unwrap();
    for (op, data, shape, bad_at) in [
        ("Gather", quads.clone(), vec![100], 77usize),
        ("Gather", bytes, vec![100], 3),
        ("GatherElements", quads, vec![90, 4], 301),
    ] {
        let n: usize = shape.iter().product();
        let given: Vec<i64> = (0..n as i64).map(|i| (i * 13) % 80 - 40).collect();
        let g = gather_graph(op, data, 0, &shape, 0);
        let line = runs_then_reports(&ctx, g, &shape, &given, bad_at);
        assert_eq!(
            line,
            format!(
                "node 'pick': {op}: index 47 (element {bad_at} of indices, read on the GPU) is out of range for axis 0 of size 40"
            )
        );
    }
}

/// Scatters whose indices and updates exceed a binding of 256 bytes (in buffers of 1 KiB) read
/// them in boxes of their walk: an index computed out of range is reported as when bound
/// whole, by the box that reads it (its element, or its tuple and entry), and indices in range
/// scatter as the interpreter does (the walk in order, distinct rows of whole quads,
/// ScatterND's claims and its walk in order).
#[test]
fn scatters_in_windows_report_an_index_computed_out_of_range() {
    let ctx = windowed();
    let data = f32s(&[40, 4], &(0..160).map(|v| v as f32).collect::<Vec<_>>());
    let updates = |n: usize| {
        f32s(
            &[n, 4],
            &(0..4 * n).map(|v| -(v as f32)).collect::<Vec<_>>(),
        )
    };
    let repeating = |n: usize| {
        (0..n as i64)
            .map(|i| (i * 13) % 80 - 40)
            .collect::<Vec<_>>()
    };
    let distinct: Vec<i64> = (0..40).map(|i| (i * 7) % 40).collect();
    let elements = |unique: bool| {
        Node::new("ScatterElements", "put")
            .inputs(["data", "at", "updates"])
            .outputs(["y"])
            .attr("axis", Attr::Int(0))
            .attr("unique_indices", Attr::Int(i64::from(unique)))
    };
    let nd = |reduction: &str| {
        Node::new("ScatterND", "put")
            .inputs(["data", "at", "updates"])
            .outputs(["y"])
            .attr("reduction", Attr::String(reduction.into()))
    };
    let cases = [
        (
            elements(false),
            vec![40, 4],
            repeating(160),
            40,
            101,
            "element 101",
        ),
        (elements(true), vec![40, 1], distinct, 40, 33, "element 33"),
        (
            nd("none"),
            vec![60, 1],
            repeating(60),
            60,
            50,
            "entry 0 of tuple 50",
        ),
        (
            nd("add"),
            vec![60, 1],
            repeating(60),
            60,
            7,
            "entry 0 of tuple 7",
        ),
    ];
    for (node, shape, given, rows, bad_at, place) in cases {
        let op = node.op.clone();
        let g = shifted(Graph::new(), &shape, 0)
            .constant("data", data.clone())
            .constant("updates", updates(rows))
            .node(node)
            .output("y");
        let line = runs_then_reports(&ctx, g, &shape, &given, bad_at);
        assert_eq!(
            line,
            format!(
                "node 'put': {op}: index 47 ({place} of indices, read on the GPU) is out of range for axis 0 of size 40"
            )
        );
    }
}
