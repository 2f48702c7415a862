//! Graphs built with the Rust API: scheduling, validation, and one submission per run.

mod common;
use common::*;
use wgpu_ops::graph::Attr;
use wgpu_ops::{reference, DType, Error, Graph, HostTensor, Node, Session, Slice, StridedSlice};

fn idx(v: &[i64]) -> HostTensor {
    HostTensor::from_vec(vec![v.len()], v).unwrap()
}

#[test]
fn chained_slices_record_one_submission_and_read_back_only_outputs() {
    // Nodes listed out of order; five Slices that take everything (views: no kernel, no copy)
    // and one reversing StridedSlice (one gather); one output.
    let mut g = Graph::new()
        .input("x", DType::U16, &[None, Some(8)])
        .constant("one", idx(&[1]))
        .constant("mone", idx(&[-1]))
        .constant("zero", idx(&[0]))
        .constant("big", idx(&[i64::MAX]));
    for k in (1..=5).rev() {
        g = g.node(
            Node::new("Slice", format!("s{k}"))
                .inputs([
                    if k == 1 {
                        "x".to_string()
                    } else {
                        format!("v{}", k - 1)
                    },
                    "zero".into(),
                    "big".into(),
                    "one".into(),
                    "mone".into(),
                ])
                .outputs([format!("v{k}")]),
        );
    }
    let g = g
        .node(
            Node::new("StridedSlice", "last")
                .inputs(["v5", "mone", "zero", "mone"])
                .outputs(["y"])
                .attr("end_mask", Attr::Ints(vec![1])),
        )
        .output("y");
    // A context of its own: other tests submit work concurrently on the shared one.
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let session = Session::new(&ctx, g).unwrap();
    let x = random_tensor(5, DType::U16, &[6, 8]);
    let before = ctx.stats();
    let out = session.run_blocking(vec![("x".into(), x.clone())]).unwrap();
    let after = ctx.stats();
    // One submission for all kernels, one for the readback of the single output, one wait.
    assert_eq!(after.submissions - before.submissions, 2);
    assert_eq!(after.host_waits - before.host_waits, 1);
    // The views dispatch nothing: the one dispatch is the StridedSlice's; the buffers made
    // are the input's upload and the output.
    assert_eq!(after.dispatches - before.dispatches, 1);
    assert_eq!(after.buffers_created - before.buffers_created, 2);
    let mut want = x;
    for _ in 0..5 {
        want = reference::slice(&want, &Slice::new([0], [i64::MAX], [1]).axes([-1])).unwrap();
    }
    let want = reference::strided_slice(
        &want,
        &StridedSlice::new([-1], [0]).stride([-1]).end_mask([1]),
    )
    .unwrap();
    assert_eq!(out, vec![("y".to_string(), want)]);
}

#[test]
fn validation_errors_name_the_problem() {
    let base = || {
        Graph::new()
            .input("x", DType::F32, &[Some(3)])
            .constant("i", idx(&[0]))
    };
    let slice = |name: &str, inputs: &[&str], out: &str| {
        Node::new("Slice", name)
            .inputs(inputs.iter().copied())
            .outputs([out])
    };
    let check = |g: Graph, expected: &str| match Session::new(ctx(), g) {
        Err(Error::Graph(m)) => assert!(m.contains(expected), "{m}"),
        other => panic!("expected a graph error containing {expected:?}, got {other:?}"),
    };
    check(
        base()
            .node(slice("a", &["x", "i", "i", "i"], "x"))
            .output("x"),
        "'x' is produced more than once",
    );
    check(
        base().node(slice("a", &["x", "i", "i"], "y")).output("y"),
        "Slice takes 4 to 5 inputs but 3 are given",
    );
    check(
        base()
            .node(Node::new("Frob", "f").inputs(["x"]).outputs(["y"]))
            .output("y"),
        "unknown op 'Frob'",
    );
    check(base().output("nothing"), "output 'nothing' is not");
    check(
        base()
            .node(slice("a", &["b_out", "i", "i", "i"], "a_out"))
            .node(slice("b", &["a_out", "i", "i", "i"], "b_out"))
            .output("a_out"),
        "cycle",
    );
    // Errors of an op inside a graph name the node.
    let g = base()
        .constant("z", idx(&[0]))
        .node(slice("bad", &["x", "i", "i", "z"], "y"))
        .output("y");
    let s = Session::new(ctx(), g).unwrap();
    let x = HostTensor::from_vec(vec![3], &[1f32, 2., 3.]).unwrap();
    let e = s.run_blocking(vec![("x".into(), x)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node 'bad': Slice: step[0] is 0; steps must be non-zero"
    );
}

#[test]
fn dead_values_give_their_buffers_back() {
    // Eight Negs in a chain, not fused: each intermediate dies as soon as the next one is
    // computed, so two buffers take turns (plus the uploaded input) instead of eight.
    let mut g = Graph::new().input("v0", DType::F32, &[Some(1000)]);
    for k in 1..=8 {
        g = g.node(
            Node::new("Neg", format!("n{k}"))
                .inputs([format!("v{}", k - 1)])
                .outputs([format!("v{k}")]),
        );
    }
    let g = g.output("v8");
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        fuse_elementwise: Some(false),
        ..Default::default()
    })
    .unwrap();
    let session = Session::new(&ctx, g).unwrap();
    let x =
        HostTensor::from_vec(vec![1000], &(0..1000).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
    let before = ctx.stats().buffers_created;
    let out = session
        .run_blocking(vec![("v0".into(), x.clone())])
        .unwrap();
    assert_eq!(ctx.stats().buffers_created - before, 3);
    assert_eq!(out[0].1, x);
}

#[test]
fn session_keeps_its_constants_on_the_gpu_between_runs() {
    // A context of its own: the test counts the buffers each run creates.
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    let f32s = |shape: &[usize], seed: u64| {
        let v: Vec<f32> = bytes(seed, shape.iter().product())
            .iter()
            .map(|&b| (b as f32 - 128.0) / 64.0)
            .collect();
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    };
    // One constant read by a MatMul, one that is a Scan's initial state (copied into the
    // loop's buffer), and the first also a graph output.
    let body = Graph::new()
        .input("s", DType::F32, &[Some(5)])
        .input("x_t", DType::F32, &[Some(5)])
        .node(
            Node::new("Add", "next")
                .inputs(["s", "x_t"])
                .outputs(["s2"]),
        )
        .node(Node::new("Neg", "y").inputs(["s2"]).outputs(["y"]))
        .output("s2")
        .output("y");
    let g = Graph::new()
        .input("x", DType::F32, &[Some(4), Some(3)])
        .constant("W", f32s(&[3, 5], 1))
        .constant("S0", f32s(&[5], 2))
        .node(Node::new("MatMul", "mm").inputs(["x", "W"]).outputs(["xw"]))
        .node(
            Node::new("Scan", "scan")
                .inputs(["S0", "xw"])
                .outputs(["last", "ys"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("last")
        .output("ys")
        .output("W");
    let x = f32s(&[4, 3], 3);
    let inputs = vec![("x".to_string(), x.clone())];
    let expected = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    let session = Session::new(&ctx, g).unwrap();
    let created = || ctx.stats().buffers_created;
    let mut runs = Vec::new();
    let mut buffers = Vec::new();
    for _ in 0..3 {
        let before = created();
        runs.push(session.run_blocking(inputs.clone()).unwrap());
        buffers.push(created() - before);
    }
    // MatMul sums of 3 products: the interpreter's order, so equal within f32 rounding.
    for ((name, got), want) in runs[0].iter().zip(&expected) {
        let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        for (a, b) in g.iter().zip(&w) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{name}: {g:?} vs {w:?}"
            );
        }
    }
    assert_eq!(runs[1], runs[0]);
    assert_eq!(runs[2], runs[0]);
    // The two constants were uploaded by the first run only (one buffer each); later runs
    // also take the first run's buffers of the product, the Scan's states and its
    // accumulator again (13 buffers, then 7: the Scan's padded rows and its body's values are
    // still made per run).
    assert!(buffers[0] > buffers[1] + 2, "buffers per run: {buffers:?}");
    assert_eq!(buffers[1], buffers[2], "buffers per run: {buffers:?}");

    // An output that is a kept constant is the caller's to overwrite: later runs still read
    // the constant.
    let on_gpu = session
        .run_tensors_blocking(vec![(
            "x".to_string(),
            wgpu_ops::Tensor::from_host(&ctx, &x).unwrap(),
        )])
        .unwrap();
    let w_out = &on_gpu.iter().find(|(n, _)| n == "W").unwrap().1;
    let zeros = HostTensor::from_vec(vec![3, 5], &[0f32; 15]).unwrap();
    let zeros = wgpu_ops::Tensor::from_host(&ctx, &zeros).unwrap();
    ctx.run(|rec| rec.identity_to(&zeros, wgpu_ops::Out::into("W", w_out)))
        .unwrap();
    assert_eq!(
        w_out.to_host_blocking().unwrap(),
        zeros.to_host_blocking().unwrap()
    );
    assert_eq!(session.run_blocking(inputs.clone()).unwrap(), runs[0]);
}

/// A session keeps the buffers of a run's intermediate values, downloaded outputs and input
/// uploads for its next run: later runs create no buffer, give the reference's results bit for
/// bit, and `release_buffers` frees what is kept. Shapes that change between runs (a symbolic
/// batch) are served by new buffers.
#[test]
fn later_runs_reuse_the_buffers_of_earlier_ones() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    // Four values that no kernel fuses away: a product, a reduction, a transpose, a product.
    let g = Graph::new()
        .input("x", DType::I32, &[None, Some(6)])
        .input("w", DType::I32, &[Some(6), Some(5)])
        .node(Node::new("MatMul", "m").inputs(["x", "w"]).outputs(["p"]))
        .node(
            Node::new("ReduceMax", "r")
                .inputs(["p"])
                .outputs(["q"])
                .attr("axes", Attr::Ints(vec![1]))
                .attr("keepdims", Attr::Int(1)),
        )
        .node(Node::new("Sub", "s").inputs(["p", "q"]).outputs(["d"]))
        .node(Node::new("Transpose", "t").inputs(["d"]).outputs(["dt"]))
        .node(Node::new("MatMul", "m2").inputs(["dt", "x"]).outputs(["y"]))
        .output("y")
        .output("q");
    let session = Session::new(&ctx, g.clone()).unwrap();
    let ints = |shape: &[usize], seed: i32| {
        let n: usize = shape.iter().product();
        let v: Vec<i32> = (0..n as i32).map(|i| (i * seed + 3) % 11 - 5).collect();
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    };
    let mut created = Vec::new();
    for (run, rows) in [4usize, 4, 4, 9, 9].into_iter().enumerate() {
        let inputs = vec![
            ("x".to_string(), ints(&[rows, 6], run as i32 + 2)),
            ("w".to_string(), ints(&[6, 5], 7)),
        ];
        let before = ctx.stats().buffers_created;
        let got = session.run_blocking(inputs.clone()).unwrap();
        created.push(ctx.stats().buffers_created - before);
        let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
        for ((name, t), w) in got.iter().zip(&want) {
            assert_eq!(t, w, "run {run}: {name}");
        }
        assert!(session.spare_bytes() > 0, "run {run}");
    }
    // The second and third runs create nothing: their two inputs are uploaded into the
    // buffers of the run before; so does the fifth, after the fourth made buffers of its new
    // sizes (inputs included).
    assert!(created[0] > 2, "{created:?}");
    assert_eq!(
        [created[1], created[2], created[4]],
        [0, 0, 0],
        "{created:?}"
    );
    assert!(created[3] > 2, "{created:?}");
    let held = ctx.memory_in_use();
    let spare = session.spare_bytes();
    session.release_buffers();
    assert_eq!(session.spare_bytes(), 0);
    assert_eq!(ctx.memory_in_use(), held - spare);
}

/// Outputs handed out on the GPU (`run_tensors`) that the caller has dropped by the next run
/// serve that run's values, so a loop that drops its outputs creates no buffer; outputs the
/// caller keeps, or gives back as the next run's input (a decode loop), are never written.
#[test]
fn dropped_gpu_outputs_serve_the_next_run() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let one = HostTensor::from_vec(vec![1], &[1i32]).unwrap();
    let g = Graph::new()
        .input("x", DType::I32, &[Some(5000)])
        .constant("one", one)
        .node(Node::new("Add", "a").inputs(["x", "one"]).outputs(["y"]))
        .output("y");
    let session = Session::new(&ctx, g).unwrap();
    let host = |v: &[i32]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let start: Vec<i32> = (0..5000).map(|i| i * 7 - 9000).collect();
    let plus = |k: i32| host(&start.iter().map(|v| v + k).collect::<Vec<_>>());
    let run = |x: wgpu_ops::Tensor| {
        let before = ctx.stats().buffers_created;
        let mut out = session
            .run_tensors_blocking(vec![("x".to_string(), x)])
            .unwrap();
        (out.remove(0).1, ctx.stats().buffers_created - before)
    };
    let x0 = wgpu_ops::Tensor::from_host(&ctx, &host(&start)).unwrap();
    // Each run's output is the next run's input: none may take the buffer it reads.
    let (x1, _) = run(x0.clone());
    let (x2, made2) = run(x1.clone());
    let (x3, made3) = run(x2.clone());
    assert_eq!((made2, made3), (1, 1));
    for (k, t) in [(0, &x0), (1, &x1), (2, &x2), (3, &x3)] {
        assert_eq!(t.to_host_blocking().unwrap(), plus(k), "x{k}");
    }
    // Outputs kept by the caller keep their values through later runs.
    let (kept, _) = run(x0.clone());
    let (again, made) = run(x0.clone());
    assert_eq!(made, 1);
    assert_eq!(kept.to_host_blocking().unwrap(), plus(1));
    assert_eq!(again.to_host_blocking().unwrap(), plus(1));
    // Dropped outputs come back: later runs create no buffer, and give the same values.
    drop((x1, x2, x3, kept, again));
    let spare = session.spare_bytes();
    let (y, made) = run(x0.clone());
    assert_eq!(made, 0, "spare bytes before the run: {spare}");
    assert_eq!(y.to_host_blocking().unwrap(), plus(1));
    drop(y);
    assert!(session.spare_bytes() >= 20_000);
    for _ in 0..3 {
        let (y, made) = run(x0.clone());
        assert_eq!(made, 0);
        assert_eq!(y.to_host_blocking().unwrap(), plus(1));
    }
    let held = ctx.memory_in_use();
    let spare = session.spare_bytes();
    session.release_buffers();
    assert_eq!(session.spare_bytes(), 0);
    assert_eq!(ctx.memory_in_use(), held - spare);
}

/// Buffers a session keeps never make a run fail that would fit without them: under a memory
/// limit that the kept buffers and a larger run's own do not fit together, the run goes on
/// without the kept ones.
#[test]
fn kept_buffers_give_way_under_the_memory_limit() {
    let (small, big) = (500_000usize, 700_000usize);
    // The larger run holds its input, the negated values and their running sums.
    let limit = 3 * 4 * big as u64 + (1 << 19);
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(limit),
        ..Default::default()
    })
    .unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[None])
        .input("axis", DType::I64, &[])
        .node(Node::new("Neg", "n").inputs(["x"]).outputs(["a"]))
        .node(
            Node::new("CumSum", "c")
                .inputs(["a", "axis"])
                .outputs(["y"]),
        )
        .output("y");
    let run = |session: &Session, n: usize| {
        let x = HostTensor::from_vec(vec![n], &vec![-1.0f32; n]).unwrap();
        let axis = HostTensor::from_vec(vec![], &[0i64]).unwrap();
        let y = session.run_blocking(vec![("x".to_string(), x), ("axis".to_string(), axis)])?;
        let y = y[0].1.to_vec::<f32>().unwrap();
        assert_eq!((y.len(), y[n - 1]), (n, n as f32));
        Ok::<_, Error>(())
    };
    // The larger run alone fits.
    run(&Session::new(&ctx, g.clone()).unwrap(), big).unwrap();
    let session = Session::new(&ctx, g).unwrap();
    run(&session, small).unwrap();
    let kept = session.spare_bytes();
    assert!(kept >= 2 * 4 * small as u64, "{kept}");
    assert!(kept + 3 * 4 * big as u64 > limit, "{kept}");
    let y = run(&session, big);
    assert!(y.is_ok(), "{y:?} with {kept} bytes kept");

    // Uploads do not draw on kept buffers: an input that does not fit beside them makes the
    // run start again without them. The first run keeps 2 x 3.6 MB (x's negation and running
    // sums); the second uploads 4.8 MB of w beside them, then negates it.
    let (s, w) = (900_000usize, 1_200_000usize);
    let limit = 11_500_000u64;
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(limit),
        ..Default::default()
    })
    .unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[None])
        .input("w", DType::F32, &[None])
        .input("axis", DType::I64, &[])
        .node(Node::new("Neg", "n").inputs(["x"]).outputs(["a"]))
        .node(
            Node::new("CumSum", "c")
                .inputs(["a", "axis"])
                .outputs(["y"]),
        )
        .node(Node::new("Neg", "m").inputs(["w"]).outputs(["z"]))
        .output("y")
        .output("z");
    let session = Session::new(&ctx, g).unwrap();
    let run = |n: usize, m: usize| {
        let x = HostTensor::from_vec(vec![n], &vec![-1.0f32; n]).unwrap();
        let w = HostTensor::from_vec(vec![m], &vec![2.0f32; m]).unwrap();
        let axis = HostTensor::from_vec(vec![], &[0i64]).unwrap();
        let out = session.run_blocking(vec![
            ("x".to_string(), x),
            ("w".to_string(), w),
            ("axis".to_string(), axis),
        ])?;
        let (y, z) = (
            out[0].1.to_vec::<f32>().unwrap(),
            out[1].1.to_vec::<f32>().unwrap(),
        );
        assert_eq!((y[n - 1], z[m - 1]), (n as f32, -2.0));
        Ok::<_, Error>(())
    };
    run(s, 1).unwrap();
    let kept = session.spare_bytes();
    assert!(kept + 4 * w as u64 > limit, "{kept}");
    let second = run(1, w);
    assert!(second.is_ok(), "{second:?} with {kept} bytes kept");
}

/// A run that has written over an input tensor the caller handed over is not started again
/// without the kept buffers (it would read the input written over): it fails with the memory
/// limit. Here a scatter-add writes into `past` where it lies; the read-back of an If's
/// condition, computed after it, submits that write; then the branch taken uploads a constant
/// that the kept buffers leave no room for. Run again, the updates would be added twice.
#[test]
fn a_run_that_changed_a_handed_over_input_is_not_run_again() {
    use wgpu_ops::Tensor;
    let n = 1usize << 18; // 1 MiB of f32
    let limit = (7u64 << 20) / 2;
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(limit),
        ..Default::default()
    })
    .unwrap();
    let scalar = |v: f32| HostTensor::from_vec(vec![], &[v]).unwrap();
    let branch = |g: Graph| Attr::Graph(Box::new(g.output("y")));
    // 2 MiB of ones, uploaded by the first run that takes the branch.
    let then_branch = Graph::new()
        .constant(
            "ones",
            HostTensor::from_vec(vec![2 * n], &vec![1f32; 2 * n]).unwrap(),
        )
        .node(
            Node::new("ReduceSum", "count")
                .inputs(["ones"])
                .outputs(["y"])
                .attr("keepdims", Attr::Int(0)),
        );
    let else_branch = Graph::new().constant("none", scalar(0.)).node(
        Node::new("Identity", "none")
            .inputs(["none"])
            .outputs(["y"]),
    );
    let g = Graph::new()
        .input("past", DType::F32, &[None])
        .input("at", DType::I64, &[Some(2), Some(1)])
        .input("update", DType::F32, &[Some(2)])
        .input("flag", DType::F32, &[])
        .constant("nought", scalar(0.))
        .constant("half", scalar(0.5))
        .node(
            Node::new("ScatterND", "write")
                .inputs(["past", "at", "update"])
                .outputs(["present"])
                .attr("reduction", Attr::String("add".into())),
        )
        // flag + 0 * min(present) > 0.5: computed after the scatter.
        .node(
            Node::new("ReduceMin", "least")
                .inputs(["present"])
                .outputs(["least"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Mul", "none")
                .inputs(["least", "nought"])
                .outputs(["none"]),
        )
        .node(
            Node::new("Add", "raised")
                .inputs(["none", "flag"])
                .outputs(["raised"]),
        )
        .node(
            Node::new("Greater", "cond")
                .inputs(["raised", "half"])
                .outputs(["cond"]),
        )
        .node(
            Node::new("If", "choose")
                .inputs(["cond"])
                .outputs(["count"])
                .attr("then_branch", branch(then_branch))
                .attr("else_branch", branch(else_branch)),
        )
        .output("present")
        .output("count");
    let session = Session::new(&ctx, g).unwrap();
    let upload = |t: HostTensor| Tensor::from_host(&ctx, &t).unwrap();
    let run = |flag: f32| {
        let inputs = vec![
            (
                "past".to_string(),
                upload(HostTensor::from_vec(vec![n], &vec![1f32; n]).unwrap()),
            ),
            (
                "at".to_string(),
                upload(HostTensor::from_vec(vec![2, 1], &[3i64, 3]).unwrap()),
            ),
            (
                "update".to_string(),
                upload(HostTensor::from_vec(vec![2], &[10f32, 100.]).unwrap()),
            ),
            ("flag".to_string(), upload(scalar(flag))),
        ];
        let out = session.run_tensors_blocking(inputs)?;
        let present = out[0].1.to_host_blocking()?.to_vec::<f32>().unwrap();
        let count = out[1].1.to_host_blocking()?.to_vec::<f32>().unwrap();
        let want = if flag > 0.5 { 2 * n } else { 0 };
        assert_eq!((present[3], present[4], count[0]), (111., 1., want as f32));
        Ok::<_, Error>(())
    };
    run(0.).unwrap();
    let kept = session.spare_bytes();
    assert!(kept >= 4 * n as u64, "{kept}");
    let second = run(1.);
    assert!(
        second.as_ref().is_err_and(|e| e.is_memory_limit()),
        "{second:?} with {kept} bytes kept"
    );
    // Without the kept buffers, the same run fits.
    session.release_buffers();
    run(1.).unwrap();
}

/// What ops upload for themselves (LayerNormalization's epsilon, Trilu's mask, Resize's taps,
/// a fused Clip's bounds) goes into the buffers of the run before: a session's later runs
/// create no buffer.
#[test]
fn later_runs_upload_op_tables_into_the_buffers_of_the_run_before() {
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions::default()).unwrap();
    let scales = HostTensor::from_vec(vec![2], &[2f32, 1.5]).unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[Some(6), Some(4)])
        .input("k", DType::I64, &[])
        .constant("scales", scales)
        .constant(
            "gamma",
            HostTensor::from_vec(vec![4], &[1f32, 2., 0.5, 1.]).unwrap(),
        )
        .node(
            Node::new("LayerNormalization", "norm")
                .inputs(["x", "gamma"])
                .outputs(["normed"])
                .attr("epsilon", Attr::Float(1e-3)),
        )
        .node(
            Node::new("Trilu", "lower")
                .inputs(["normed", "k"])
                .outputs(["lower"])
                .attr("upper", Attr::Int(0)),
        )
        .node(
            Node::new("Resize", "grow")
                .inputs(["lower", "", "scales"])
                .outputs(["grown"])
                .attr("mode", Attr::String("linear".into())),
        )
        // Clip-6's bounds are attributes: the fused program reads them as constants.
        .node(
            Node::new("Clip", "bound")
                .inputs(["grown"])
                .outputs(["bounded"])
                .attr("min", Attr::Float(-0.75))
                .attr("max", Attr::Float(0.75)),
        )
        .node(Node::new("Exp", "y").inputs(["bounded"]).outputs(["y"]))
        .output("y");
    let session = Session::new(&ctx, g.clone()).unwrap();
    let x = HostTensor::from_vec(
        vec![6, 4],
        &(0..24).map(|v| (v * v % 7) as f32).collect::<Vec<_>>(),
    )
    .unwrap();
    let k = HostTensor::from_vec(vec![], &[1i64]).unwrap();
    let inputs = vec![("x".to_string(), x), ("k".to_string(), k)];
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    for run in 0..3 {
        let created = ctx.stats().buffers_created;
        let y = session.run_blocking(inputs.clone()).unwrap();
        assert_close(&y[0].1, &want[0], 1e-5, 1e-5, "y");
        if run > 0 {
            assert_eq!(ctx.stats().buffers_created, created, "run {run}");
        }
    }
}

/// Index inputs computed from graph inputs (a Range's limit `n + 1`, a Reshape's shape
/// concatenated from a shape input) are computed on the host, as the ops' plans read them; the
/// element-wise work on their results stays on the GPU. Given as a GPU tensor, the same input
/// gets the error that says why.
#[test]
fn index_inputs_computed_from_graph_inputs_are_computed_on_the_host() {
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let g = Graph::new()
        .input("n", DType::I64, &[])
        .input("cols", DType::I64, &[Some(1)])
        .input("x", DType::F32, &[Some(6)])
        .constant("zero", scalar(0))
        .constant("one", scalar(1))
        .constant("rows", idx(&[-1]))
        .node(
            Node::new("Add", "limit")
                .inputs(["n", "one"])
                .outputs(["limit"]),
        )
        .node(
            Node::new("Range", "range")
                .inputs(["zero", "limit", "one"])
                .outputs(["steps"]),
        )
        .node(
            Node::new("Mul", "scaled")
                .inputs(["steps", "limit"])
                .outputs(["scaled"]),
        )
        .node(
            Node::new("Concat", "shape")
                .inputs(["rows", "cols"])
                .attr("axis", Attr::Int(0))
                .outputs(["shape"]),
        )
        .node(
            Node::new("Reshape", "reshape")
                .inputs(["x", "shape"])
                .outputs(["y"]),
        )
        .output("scaled")
        .output("y");
    let x = HostTensor::from_vec(vec![6], &[0f32, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let inputs = vec![
        ("n".to_string(), scalar(3)),
        ("cols".to_string(), idx(&[2])),
        ("x".to_string(), x.clone()),
    ];
    let ctx = own_ctx();
    let session = Session::new(&ctx, g.clone()).unwrap();
    let before = ctx.stats();
    let got = session.run_blocking(inputs.clone()).unwrap();
    let dispatches = ctx.stats().dispatches - before.dispatches;
    // The Add making the limit and the Concat making the shape.
    let on_host = ctx.stats().host_computed_nodes - before.host_computed_nodes;
    assert_eq!(on_host, 2);
    assert_eq!(got[0].1.to_vec::<i64>().unwrap(), [0, 4, 8, 12]);
    assert_eq!(got[1].1.shape, [3, 2]);
    assert_eq!(
        got[1].1.to_vec::<f32>().unwrap(),
        x.to_vec::<f32>().unwrap()
    );
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    assert_eq!(got[0].1, want[0]);
    // The Mul of the Range's values and the limit runs on the GPU (the Reshape is a view).
    assert_eq!(dispatches, 1);

    // Given as GPU tensors, the limit and the shape are read back (one round trip for each
    // of the Range and the Reshape) and the results are the same.
    let on_gpu = |ctx: &wgpu_ops::Context| -> Vec<(String, wgpu_ops::Tensor)> {
        inputs
            .iter()
            .map(|(name, v)| (name.clone(), wgpu_ops::Tensor::from_host(ctx, v).unwrap()))
            .collect()
    };
    let before = ctx.stats().read_backs;
    let got_gpu = session.run_tensors_blocking(on_gpu(&ctx)).unwrap();
    assert_eq!(ctx.stats().read_backs - before, 2);
    for ((_, g), (_, h)) in got_gpu.iter().zip(&got) {
        assert_eq!(&g.to_host_blocking().unwrap(), h);
    }
    // Without read-backs (as in the browser) the Range is refused.
    let no_read_back = common::ctx_without_read_back();
    let e = Session::new(&no_read_back, g)
        .unwrap()
        .run_tensors_blocking(on_gpu(&no_read_back))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Range's length depends on its values"), "{e}");
}

/// Inputs uploaded into the buffers of the run before: a 5-byte u8 input (its last word part
/// padding) and a 1.2 MB f32 one (streamed through the staging buffers); each run's values
/// differ and every result is the reference's, bit for bit; later runs create no buffer.
#[test]
fn inputs_are_uploaded_into_the_last_runs_buffers() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let n = 300_000;
    let g = Graph::new()
        .input("small", DType::U8, &[Some(5)])
        .input("large", DType::F32, &[Some(n)])
        .node(
            Node::new("Add", "a")
                .inputs(["small", "small"])
                .outputs(["s2"]),
        )
        .node(
            Node::new("Mul", "m")
                .inputs(["large", "large"])
                .outputs(["l2"]),
        )
        .output("s2")
        .output("l2");
    let session = Session::new(&ctx, g.clone()).unwrap();
    let mut created = Vec::new();
    for run in 0..3u8 {
        let small: Vec<u8> = (0..5).map(|i| i * 7 + run * 31).collect();
        let large: Vec<f32> = (0..n)
            .map(|i| (i % 97) as f32 - f32::from(run) * 3.5)
            .collect();
        let inputs = vec![
            (
                "small".to_string(),
                HostTensor::from_vec(vec![5], &small).unwrap(),
            ),
            (
                "large".to_string(),
                HostTensor::from_vec(vec![n], &large).unwrap(),
            ),
        ];
        let before = ctx.stats().buffers_created;
        let got = session.run_blocking(inputs.clone()).unwrap();
        created.push(ctx.stats().buffers_created - before);
        let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
        for ((name, t), w) in got.iter().zip(&want) {
            assert_eq!(t, w, "run {run}: {name}");
        }
    }
    assert_eq!(created[1..], [0, 0], "{created:?}");
}

/// An Expand that broadcasts nothing (its shape is the input's, or ones) is a view of its
/// input, no dispatch; one that broadcasts is one gather. Both give the reference's values.
#[test]
fn expand_to_the_input_shape_is_a_view() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    for (shape, dispatches) in [
        (vec![1i64, 1, 1], 0u64),
        (vec![2, 3, 4], 0),
        (vec![2, 2, 3, 4], 1),
    ] {
        let g = Graph::new()
            .input("x", DType::I32, &[Some(2), Some(3), Some(4)])
            .constant("shape", idx(&shape))
            .node(
                Node::new("Expand", "e")
                    .inputs(["x", "shape"])
                    .outputs(["y"]),
            )
            .output("y");
        let session = Session::new(&ctx, g.clone()).unwrap();
        let x = random_tensor(7, DType::I32, &[2, 3, 4]);
        let before = ctx.stats().dispatches;
        let out = session.run_blocking(vec![("x".into(), x.clone())]).unwrap();
        assert_eq!(ctx.stats().dispatches - before, dispatches, "{shape:?}");
        let want =
            reference::graph::run_graph(&g, &[("x".into(), x)], &Default::default()).unwrap();
        assert_eq!(out[0].1, want[0], "{shape:?}");
    }
}

/// Ops that read only a value's shape (Shape, Size) plan later ops from it without the value:
/// the element-wise op making it runs on the GPU, not in the host's interpreter, as it did
/// when every value before a Shape was taken to plan the op; a GPU tensor given for it is not
/// read back.
#[test]
fn values_whose_shape_alone_plans_an_op_are_computed_on_the_gpu() {
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[Some(2), Some(3)])
        .constant("zero", scalar(0))
        .constant("one", scalar(1))
        .node(Node::new("Neg", "neg").inputs(["x"]).outputs(["y"]))
        .node(Node::new("Shape", "shape").inputs(["y"]).outputs(["dims"]))
        .node(Node::new("Size", "size").inputs(["y"]).outputs(["n"]))
        .node(
            Node::new("Reshape", "reshape")
                .inputs(["y", "dims"])
                .outputs(["z"]),
        )
        .node(
            Node::new("Range", "range")
                .inputs(["zero", "n", "one"])
                .outputs(["steps"]),
        )
        .output("z")
        .output("steps");
    let inputs = vec![(
        "x".to_string(),
        HostTensor::from_vec(vec![2, 3], &[0f32, 1.0, -2.0, 3.0, 4.5, -5.0]).unwrap(),
    )];
    let ctx = own_ctx();
    let session = Session::new(&ctx, g.clone()).unwrap();
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    for run in 0..2 {
        let before = ctx.stats();
        let got = session.run_blocking(inputs.clone()).unwrap();
        assert_eq!(got[0].1, want[0], "run {run}");
        assert_eq!(got[1].1, want[1], "run {run}");
        // The Neg (the Reshape is a view; the Range's inputs are known while planning).
        let after = ctx.stats();
        assert_eq!(after.dispatches - before.dispatches, 1, "run {run}");
        assert_eq!(after.host_computed_nodes, before.host_computed_nodes);
    }
    // Given as a GPU tensor, x is not read back, and contexts without read-backs (as in the
    // browser) run the graph too.
    for ctx in [ctx, common::ctx_without_read_back()] {
        let x = wgpu_ops::Tensor::from_host(&ctx, &inputs[0].1).unwrap();
        let session = Session::new(&ctx, g.clone()).unwrap();
        let before = ctx.stats().read_backs;
        let got = session
            .run_tensors_blocking(vec![("x".to_string(), x)])
            .unwrap();
        assert_eq!(ctx.stats().read_backs - before, 0);
        for ((_, got), want) in got.iter().zip(&want) {
            assert_eq!(&got.to_host_blocking().unwrap(), want);
        }
    }
}

/// A fill or repeat of small constants (ConstantOfShape, Expand, Tile) is computed while
/// planning where its result is small, and on the GPU (one dispatch) where it is large (over
/// 16384 elements), so that no large constant is built on the host and uploaded every run;
/// both give the reference's values, run after run.
#[test]
fn large_results_of_small_constants_are_made_on_the_gpu() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let small = random_tensor(8, DType::I64, &[2, 3]);
    let cases = |n: i64| {
        [
            Node::new("ConstantOfShape", "fill")
                .inputs(["dims"])
                .outputs(["y"])
                .attr(
                    "value",
                    Attr::Tensor(HostTensor::from_vec(vec![1], &[7i64]).unwrap()),
                ),
            Node::new("Expand", "expand")
                .inputs(["small", "expanded"])
                .outputs(["y"]),
            Node::new("Tile", "tile")
                .inputs(["small", "repeats"])
                .outputs(["y"]),
        ]
        .map(|node| {
            Graph::new()
                .constant("small", small.clone())
                .constant("dims", idx(&[n, 2, 3]))
                .constant("expanded", idx(&[n, 2, 3]))
                .constant("repeats", idx(&[n, 1]))
                .node(node)
                .output("y")
        })
    };
    // 2 * 3 * n elements: under the fold's limit of 16384, then over it.
    for (n, dispatches) in [(100i64, 0u64), (3000, 1)] {
        for g in cases(n) {
            let op = g.nodes[0].op.clone();
            let session = Session::new(&ctx, g.clone()).unwrap();
            let want = reference::graph::run_graph(&g, &[], &Default::default()).unwrap();
            for run in 0..2 {
                let before = ctx.stats().dispatches;
                let out = session.run_blocking(vec![]).unwrap();
                assert_eq!(
                    ctx.stats().dispatches - before,
                    dispatches,
                    "{op} {n} run {run}"
                );
                assert_eq!(out[0].1, want[0], "{op} {n} run {run}");
            }
        }
    }
}

/// Small inputs that ask for a result larger than the host's memory (pads, scales, an
/// expanded shape of 2^60 elements) get the device's memory-limit error from the op's plan:
/// the host's interpreter, which computes small values while planning, neither builds them
/// (an allocation of 2^62 bytes aborted the process) nor is asked to.
#[test]
fn results_too_large_for_any_memory_are_refused_before_they_are_built() {
    let ctx = own_ctx();
    let small = HostTensor::from_vec(vec![2, 2], &[1f32, 2., 3., 4.]).unwrap();
    let huge = 1i64 << 59;
    // All of its inputs constants: computed while planning where the result is small.
    let padded = Graph::new()
        .constant("x", small.clone())
        .constant("pads", idx(&[0, 0, 0, huge]))
        .node(Node::new("Pad", "pad").inputs(["x", "pads"]).outputs(["y"]))
        .output("y");
    // x given on the host, and the Expand's sum plans a Range: computed while planning
    // where it is small.
    let planned = Graph::new()
        .input("x", DType::F32, &[Some(2), Some(2)])
        .constant("dims", idx(&[huge, 2, 2]))
        .constant("zero", HostTensor::from_vec(vec![], &[0f32]).unwrap())
        .constant("one", HostTensor::from_vec(vec![], &[1f32]).unwrap())
        .node(
            Node::new("Expand", "expand")
                .inputs(["x", "dims"])
                .outputs(["e"]),
        )
        .node(
            Node::new("ReduceSum", "sum")
                .inputs(["e"])
                .outputs(["n"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Range", "range")
                .inputs(["zero", "n", "one"])
                .outputs(["y"]),
        )
        .output("y");
    for (g, inputs) in [
        (padded, vec![]),
        (planned, vec![("x".to_string(), small.clone())]),
    ] {
        let op = g.nodes[0].op.clone();
        let got = Session::new(&ctx, g).unwrap().run_blocking(inputs);
        assert!(
            got.as_ref().is_err_and(|e| e.is_memory_limit()),
            "{op}: {got:?}"
        );
    }
    // Resize's taps (a few numbers per output position, on the host before their upload)
    // are not built for an output over the limit: scales of 1e9 asked for tables of 2^31 rows.
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(64 << 20),
        ..Default::default()
    })
    .unwrap();
    let resize = Graph::new()
        .input("x", DType::F32, &[Some(1), Some(1), Some(2), Some(2)])
        .constant(
            "scales",
            HostTensor::from_vec(vec![4], &[1f32, 1., 1., 1e7]).unwrap(),
        )
        .node(
            Node::new("Resize", "resize")
                .inputs(["x", "", "scales"])
                .outputs(["y"])
                .attr("mode", Attr::String("linear".into())),
        )
        .output("y");
    let x = HostTensor::from_vec(vec![1, 1, 2, 2], &[1f32, 2., 3., 4.]).unwrap();
    let x = wgpu_ops::Tensor::from_host(&ctx, &x).unwrap();
    let got = Session::new(&ctx, resize)
        .unwrap()
        .run_tensors_blocking(vec![("x".to_string(), x)]);
    let err = got.expect_err("over the memory limit").to_string();
    assert!(
        err.contains("taps' tables") && err.contains("max_memory"),
        "{err}"
    );
}

/// BitCast reads the same bytes as another dtype of the same width, as a view (no dispatch),
/// bit for bit with the reference; other widths, and bool from bytes that may not be 0 or 1,
/// are errors naming the op and the rule.
#[test]
fn bitcast_is_a_view_of_the_same_bytes() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let graph = |from: DType, to: DType| {
        Graph::new()
            .input("x", from, &[Some(3), Some(5)])
            .node(
                Node::new("BitCast", "b")
                    .inputs(["x"])
                    .outputs(["y"])
                    .attr("to", Attr::String(to.name().into())),
            )
            .output("y")
    };
    for (from, to) in [
        (DType::F32, DType::I32),
        (DType::U64, DType::F64),
        (DType::BF16, DType::I16),
        (DType::Bool, DType::U8),
    ] {
        let g = graph(from, to);
        let x = random_tensor(3, from, &[3, 5]);
        let session = Session::new(&ctx, g.clone()).unwrap();
        let before = ctx.stats().dispatches;
        let out = session.run_blocking(vec![("x".into(), x.clone())]).unwrap();
        assert_eq!(ctx.stats().dispatches - before, 0, "{from} to {to}");
        assert_eq!(out[0].1.dtype, to);
        assert_eq!(out[0].1.data, x.data, "{from} to {to}");
        let want =
            reference::graph::run_graph(&g, &[("x".into(), x)], &Default::default()).unwrap();
        assert_eq!(out[0].1, want[0], "{from} to {to}");
    }
    for (from, to, why) in [
        (
            DType::F32,
            DType::F64,
            "f64 is 8 bytes wide, the input's f32 is 4",
        ),
        (DType::U8, DType::Bool, "bool from u8 is not supported"),
    ] {
        let session = Session::new(&ctx, graph(from, to)).unwrap();
        let x = random_tensor(3, from, &[3, 5]);
        let e = session
            .run_blocking(vec![("x".into(), x)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("BitCast") && e.contains(why), "{e}");
    }
}

/// An axis outside the input's rank is an error, not a panic, both in the CPU interpreter
/// (which a session also runs on constants and small host inputs while planning) and in a
/// session, for every op that reads an `axis` attribute through an index.
#[test]
fn axes_out_of_range_are_errors_in_the_interpreter_and_in_sessions() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = HostTensor::from_vec(vec![2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let i = idx(&[0]);
    let i2 = HostTensor::from_vec(vec![2, 3], &[0i64; 6]).unwrap();
    for (op, inputs, axis) in [
        ("Gather", &["x", "i"][..], 5),
        ("Gather", &["x", "i"][..], -5),
        ("GatherElements", &["x", "i2"][..], 5),
        ("Hardmax", &["x"][..], 5),
        ("Softmax", &["x"][..], 5),
        ("LogSoftmax", &["x"][..], -7),
        ("Split", &["x"][..], 5),
        ("OneHot", &["i", "i", "x"][..], 5),
        ("ScatterElements", &["x", "i2", "x"][..], 5),
        ("TopK", &["x", "i"][..], 5),
    ] {
        let g = Graph::new()
            .constant("x", x.clone())
            .constant("i", i.clone())
            .constant("i2", i2.clone())
            .node(
                Node::new(op, "n")
                    .inputs(inputs.iter().copied())
                    .outputs(["y"])
                    .attr("axis", Attr::Int(axis)),
            )
            .output("y");
        let e = reference::graph::run_graph(&g, &[], &Default::default()).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{op} {axis}: {e}");
        let run = Session::new(&ctx, g).and_then(|s| s.run_blocking(vec![]));
        let e = run.unwrap_err().to_string();
        assert!(e.contains(op) && e.lines().count() == 1, "{op} {axis}: {e}");
    }
}

/// Buffers an op uses for a while and hands back (Conv's columns, released while a view of
/// them was still held; OneHot's picked values; BatchNormalization's batch statistics), a
/// sequence's tensors, a Loop's iteration numbers, and a Scan's padded rows all serve a
/// session's later runs: from the second run on, none of these graphs creates a buffer, and
/// every run gives the first run's outputs (which the reference interpreter gives, where it
/// has the ops).
#[test]
fn later_runs_reuse_scratch_sequence_and_loop_buffers() {
    use wgpu_ops::graph::{Value, ValueInfo, ValueKind};
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions::default()).unwrap();
    let f32s = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|k| ((k * 7 + seed) % 11) as f32 - 5.0).collect();
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    };
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let conv = Graph::new()
        .input("x", DType::F32, &[Some(1), Some(2), Some(5), Some(5)])
        .constant("w", f32s(&[3, 2, 3, 3], 1))
        .node(
            Node::new("Conv", "conv")
                .inputs(["x", "w"])
                .outputs(["y"])
                .attr("pads", Attr::Ints(vec![1, 1, 1, 1])),
        )
        .output("y");
    let one_hot = Graph::new()
        .input("i", DType::I64, &[Some(3)])
        .constant("depth", scalar(4))
        .constant(
            "values",
            HostTensor::from_vec(vec![2], &[-1f32, 3.0]).unwrap(),
        )
        .node(
            Node::new("OneHot", "hot")
                .inputs(["i", "depth", "values"])
                .outputs(["y"]),
        )
        .output("y");
    let ones = HostTensor::from_vec(vec![3], &[1f32; 3]).unwrap();
    let zeros = HostTensor::from_vec(vec![3], &[0f32; 3]).unwrap();
    let batch_norm = Graph::new()
        .input("x", DType::F32, &[Some(2), Some(3), Some(4)])
        .constant("scale", ones.clone())
        .constant("bias", zeros.clone())
        .constant("mean", zeros)
        .constant("var", ones)
        .node(
            Node::new("BatchNormalization", "norm")
                .inputs(["x", "scale", "bias", "mean", "var"])
                .outputs(["y", "running_mean", "running_var"])
                .attr("training_mode", Attr::Int(1)),
        )
        .output("y")
        .output("running_mean")
        .output("running_var");
    let mut split = Graph::new()
        .input("x", DType::F32, &[Some(6), Some(2)])
        .node(
            Node::new("SplitToSequence", "split")
                .inputs(["x"])
                .outputs(["s"])
                .attr("keepdims", Attr::Int(0)),
        );
    split.outputs = vec![ValueInfo {
        kind: ValueKind::Sequence,
        ..ValueInfo::named("s")
    }];
    let loop_body = Graph::new()
        .input("i", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .input("v", DType::F32, &[Some(2)])
        .node(
            Node::new("Identity", "keep")
                .inputs(["cond"])
                .outputs(["cond_out"]),
        )
        .node(
            Node::new("Cast", "at")
                .inputs(["i"])
                .outputs(["at"])
                .attr("to", Attr::String("f32".into())),
        )
        .node(
            Node::new("Add", "add")
                .inputs(["v", "at"])
                .outputs(["v_out"]),
        )
        .output("cond_out")
        .output("v_out");
    let looped = Graph::new()
        .input("v0", DType::F32, &[Some(2)])
        .constant("m", scalar(5))
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "v0"])
                .outputs(["v"])
                .attr("body", Attr::Graph(Box::new(loop_body))),
        )
        .output("v");
    // Rows of 3 f32 (12 bytes): laid out as padded rows before the loop, and its output's
    // rows padded likewise.
    let scan_body = Graph::new()
        .input("sum", DType::F32, &[Some(3)])
        .input("x", DType::F32, &[Some(3)])
        .node(
            Node::new("Add", "add")
                .inputs(["sum", "x"])
                .outputs(["next"]),
        )
        .node(Node::new("Relu", "relu").inputs(["next"]).outputs(["y"]))
        .output("next")
        .output("y");
    let scanned = Graph::new()
        .input("s0", DType::F32, &[Some(3)])
        .input("xs", DType::F32, &[Some(7), Some(3)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "xs"])
                .outputs(["s", "ys"])
                .attr("body", Attr::Graph(Box::new(scan_body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("s")
        .output("ys");
    let tensor = |name: &str, t: HostTensor| (name.to_string(), Value::Tensor(t));
    // What, the graph, its inputs, whether the reference interpreter has its ops.
    type Case = (&'static str, Graph, Vec<(String, Value)>, bool);
    let cases: Vec<Case> = vec![
        (
            "Conv",
            conv,
            vec![tensor("x", f32s(&[1, 2, 5, 5], 2))],
            true,
        ),
        (
            "OneHot",
            one_hot,
            vec![tensor(
                "i",
                HostTensor::from_vec(vec![3], &[0i64, 3, -1]).unwrap(),
            )],
            true,
        ),
        (
            "BatchNormalization",
            batch_norm,
            vec![tensor("x", f32s(&[2, 3, 4], 3))],
            false,
        ),
        (
            "SplitToSequence",
            split,
            vec![tensor("x", f32s(&[6, 2], 4))],
            false,
        ),
        ("Loop", looped, vec![tensor("v0", f32s(&[2], 5))], true),
        (
            "Scan",
            scanned,
            vec![tensor("s0", f32s(&[3], 6)), tensor("xs", f32s(&[7, 3], 7))],
            true,
        ),
    ];
    for (what, g, inputs, interpreted) in cases {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let mut first = None;
        for run in 0..3 {
            let created = ctx.stats().buffers_created;
            let out = session.run_values_blocking(inputs.clone()).unwrap();
            if run > 0 {
                assert_eq!(ctx.stats().buffers_created, created, "{what}, run {run}");
            }
            let out: Vec<Value> = out.into_iter().map(|(_, v)| v).collect();
            match &first {
                None => first = Some(out),
                Some(first) => assert_eq!(&out, first, "{what}, run {run}"),
            }
        }
        if interpreted {
            let given: Vec<(String, HostTensor)> = inputs
                .into_iter()
                .map(|(n, v)| match v {
                    Value::Tensor(t) => (n, t),
                    _ => unreachable!("tensors given"),
                })
                .collect();
            let want = reference::graph::run_graph(&g, &given, &Default::default()).unwrap();
            for (got, want) in first.unwrap().iter().zip(&want) {
                let Value::Tensor(got) = got else {
                    panic!("{what}: a tensor output")
                };
                assert_close(got, want, 1e-5, 1e-5, what);
            }
        }
    }
}

/// Kernel parameters live in uniform buffers shared by a run's dispatches, each range written
/// before the commands reading it are submitted: 40 reversing slices (a gather each, with
/// parameters of its own), a Reshape whose shape is read back from the GPU (submitting what
/// came before), and 40 more slices after it, every output the reference's bit for bit: on the
/// adapter's limits and on WebGPU's (offsets aligned to 256 bytes, so that a 4 KiB chunk holds
/// 16 dispatches' parameters).
#[test]
fn kernel_parameters_of_many_dispatches_around_a_read_back_reach_their_kernels() {
    for webgpu_limits in [false, true] {
        kernel_parameters_around_a_read_back(webgpu_limits);
    }
}

fn kernel_parameters_around_a_read_back(webgpu_limits: bool) {
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        webgpu_limits: Some(webgpu_limits),
        ..Default::default()
    })
    .unwrap();
    let align = ctx.limits().min_uniform_buffer_offset_alignment;
    assert!(!webgpu_limits || align == 256, "{align}");
    let mut g = Graph::new()
        .input("x", DType::F32, &[Some(64), Some(8)])
        .input("dims", DType::I64, &[Some(2)])
        .constant("stride", idx(&[1, -1]));
    let slice = |g: Graph, from: &str, k: i64, out: String| {
        g.constant(format!("b{out}"), idx(&[k, -1]))
            .constant(format!("e{out}"), idx(&[k + 3, 0]))
            .node(
                Node::new("StridedSlice", format!("n{out}"))
                    .inputs([
                        from.to_string(),
                        format!("b{out}"),
                        format!("e{out}"),
                        "stride".into(),
                    ])
                    .outputs([out.clone()])
                    .attr("end_mask", Attr::Ints(vec![0, 1])),
            )
            .output(out)
    };
    for k in 0..40 {
        g = slice(g, "x", k, format!("before{k}"));
    }
    g = g
        .node(
            Node::new("Abs", "dims_on_gpu")
                .inputs(["dims"])
                .outputs(["shape"]),
        )
        .node(
            Node::new("Reshape", "r")
                .inputs(["x", "shape"])
                .outputs(["xr"]),
        );
    for k in 0..40 {
        g = slice(g, "xr", k + 20, format!("after{k}"));
    }
    let session = Session::new(&ctx, g.clone()).unwrap();
    let x = random_tensor(7, DType::F32, &[64, 8]);
    let dims = idx(&[64, 8]);
    let inputs = vec![("x".to_string(), x), ("dims".to_string(), dims)];
    let on_gpu: Vec<_> = inputs
        .iter()
        .map(|(n, v)| (n.clone(), wgpu_ops::Tensor::from_host(&ctx, v).unwrap()))
        .collect();
    let before = ctx.stats();
    let got = session.run_tensors_blocking(on_gpu).unwrap();
    let after = ctx.stats();
    assert_eq!(after.read_backs - before.read_backs, 1);
    assert!(after.dispatches - before.dispatches >= 80);
    let want = reference::graph::run_graph(&g, &inputs, &Default::default()).unwrap();
    assert_eq!(got.len(), 80);
    for ((name, got), want) in got.iter().zip(&want) {
        assert_eq!(
            &got.to_host_blocking().unwrap(),
            want,
            "{name} (alignment {align})"
        );
    }
}
