//! Values computed from a graph's constants alone are computed by a session's first run and
//! kept: later runs skip the nodes that made them. Every run is checked bit for bit against the
//! CPU interpreter (integer MatMuls, so exact), and the values that must not be kept (an output
//! view, a faulting gather, a random draw, a Scan's initial state) behave as before.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, Error, HostTensor, Session, Tensor};

/// Small integers, so that the integer MatMuls stay exact.
fn small_ints(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i32> = bytes(seed, n).iter().map(|&b| (b % 7) as i32 - 3).collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

/// x [2, 128] times each of four blocks of a weight [64, 512] cut along its columns and
/// transposed (as the ONNX recurrent layers' loader cuts W into gates); the weight is a
/// constant, or with `weight_input` a graph input. The weight has more elements than the
/// executor folds on the host, so the cut and the transposes run on the GPU.
fn gates(weight_input: bool) -> Graph {
    let mut g = Graph::new().input("x", DType::I32, &[Some(2), Some(128)]);
    g = match weight_input {
        true => g.input("W", DType::I32, &[Some(64), Some(512)]),
        false => g.constant("W", small_ints(&[64, 512], 1)),
    };
    g = g.node(
        Node::new("Split", "cut")
            .inputs(["W"])
            .outputs(["w0", "w1", "w2", "w3"])
            .attr("axis", Attr::Int(1)),
    );
    for i in 0..4 {
        g = g
            .node(
                Node::new("Transpose", format!("t{i}"))
                    .inputs([format!("w{i}")])
                    .outputs([format!("wt{i}")])
                    .attr("perm", Attr::Ints(vec![1, 0])),
            )
            .node(
                Node::new("MatMul", format!("m{i}"))
                    .inputs(["x".to_string(), format!("wt{i}")])
                    .outputs([format!("y{i}")]),
            );
    }
    g.node(
        Node::new("Concat", "join")
            .inputs(["y0", "y1", "y2", "y3"])
            .outputs(["y"])
            .attr("axis", Attr::Int(1)),
    )
    .output("y")
}

fn counts(ctx: &wgpu_ops::Context) -> (u64, u64) {
    let s = ctx.stats();
    (s.dispatches, s.copies)
}

/// One run of `session` on `inputs`: its outputs, and the dispatches and copies it encoded.
fn counted_run(
    ctx: &wgpu_ops::Context,
    session: &Session,
    inputs: Vec<(String, HostTensor)>,
) -> (Vec<(String, HostTensor)>, (u64, u64)) {
    let before = counts(ctx);
    let got = session.run_blocking(inputs).unwrap();
    let after = counts(ctx);
    (got, (after.0 - before.0, after.1 - before.1))
}

/// The cut and transposed blocks are computed once: later runs encode fewer commands than the
/// first and than the same graph with the weight as an input, and every run equals the
/// interpreter's. Runs on the GPU replay from the second on.
#[test]
fn values_of_constants_alone_are_computed_by_the_first_run_only() {
    let ctx = own_ctx();
    let g = gates(false);
    let session = Session::new(&ctx, g.clone()).unwrap();
    assert_eq!(session.constant_bytes(), 0);
    let mut per_run = Vec::new();
    let mut kept = Vec::new();
    for run in 0..4u64 {
        let x = small_ints(&[2, 128], 10 + run);
        let inputs = vec![("x".to_string(), x)];
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let (got, count) = counted_run(&ctx, &session, inputs);
        per_run.push(count);
        kept.push(session.constant_bytes());
        assert_eq!(got[0].1, want[0], "run {run}");
    }
    let why = format!("{:?}: {per_run:?}", ctx.adapter_info().name);
    // Host inputs are uploaded before planning: runs 1 to 3 replay run 0's log.
    assert_eq!(session.replayed_runs(), 3, "{why}");
    // The first run computes the blocks (and the product); the others the product only.
    assert!(
        per_run[1].0 + per_run[1].1 < per_run[0].0 + per_run[0].1,
        "{why}"
    );
    assert!(per_run[2..].iter().all(|c| *c == per_run[1]), "{why}");
    // Four transposed blocks of 128 x 64 i32 at least, kept from the first run on.
    assert!(kept[0] >= 4 * 128 * 64 * 4, "{kept:?}");
    assert!(kept.iter().all(|&k| k == kept[0]), "{kept:?}");

    // The weight as an input: cut and transposed by every run.
    let with_input = gates(true);
    let w = small_ints(&[64, 512], 1);
    let session_w = Session::new(&ctx, with_input).unwrap();
    let x = small_ints(&[2, 128], 99);
    let inputs = vec![("x".to_string(), x.clone()), ("W".to_string(), w)];
    session_w.run_blocking(inputs.clone()).unwrap();
    let (got_w, (dispatches, copies)) = counted_run(&ctx, &session_w, inputs);
    let cut_every_run = dispatches + copies;
    assert!(
        per_run[1].0 + per_run[1].1 < cut_every_run,
        "{why} vs {cut_every_run}"
    );
    assert_eq!(
        session.run_blocking(vec![("x".to_string(), x)]).unwrap(),
        got_w
    );

    // On the GPU, the host runs' log dropped: the first run is planned (and logged without
    // the blocks' commands), the next ones replay it.
    session.set_replay(false);
    session.set_replay(true);
    for run in 0..3u64 {
        let x = small_ints(&[2, 128], 20 + run);
        let want = run_graph(&g, &[("x".to_string(), x.clone())], &Default::default()).unwrap();
        let replayed = session.replayed_runs();
        let given = vec![("x".to_string(), Tensor::from_host(&ctx, &x).unwrap())];
        let out = session.run_tensors_blocking(given).unwrap();
        assert_eq!(
            out[0].1.to_host_blocking().unwrap(),
            want[0],
            "GPU run {run}"
        );
        assert_eq!(
            session.replayed_runs() - replayed,
            (run > 0) as u64,
            "GPU run {run}"
        );
    }
}

/// An output that is a view of a kept value (a Reshape of a transposed block, which a MatMul
/// also reads) is handed out as a copy: the caller writing into it changes no later run.
#[test]
fn an_output_viewing_a_kept_value_is_the_callers_copy() {
    let ctx = own_ctx();
    let g = gates(false)
        .node(
            Node::new("Reshape", "flat")
                .inputs(["wt0", "minus_one"])
                .outputs(["wt0_flat"]),
        )
        .constant(
            "minus_one",
            HostTensor::from_vec(vec![1], &[-1i64]).unwrap(),
        )
        .output("wt0_flat");
    let session = Session::new(&ctx, g.clone()).unwrap();
    let x = small_ints(&[2, 128], 5);
    let want = run_graph(&g, &[("x".to_string(), x.clone())], &Default::default()).unwrap();
    for run in 0..3 {
        let given = vec![("x".to_string(), Tensor::from_host(&ctx, &x).unwrap())];
        let out = session.run_tensors_blocking(given).unwrap();
        let got: Vec<HostTensor> = out
            .iter()
            .map(|(_, t)| t.to_host_blocking().unwrap())
            .collect();
        assert_eq!(got, want, "run {run}");
        // The caller overwrites the flat block.
        let flat = &out[1].1;
        let zeros = HostTensor::from_vec(vec![128 * 64], &vec![0i32; 128 * 64]).unwrap();
        let zeros = Tensor::from_host(&ctx, &zeros).unwrap();
        ctx.run(|rec| rec.identity_to(&zeros, wgpu_ops::Out::into("wt0_flat", flat)))
            .unwrap();
        assert_eq!(
            flat.to_host_blocking().unwrap(),
            zeros.to_host_blocking().unwrap()
        );
    }
    assert_eq!(
        session.run_blocking(vec![("x".to_string(), x)]).unwrap()[0].1,
        want[0]
    );
}

/// A gather of constants whose indices (computed from constants on the GPU) hold one out of
/// range is not kept: every run reports it.
#[test]
fn a_faulting_gather_of_constants_fails_every_run() {
    let ctx = own_ctx();
    let n = 20_000;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut at: Vec<i32> = (0..n as i32).rev().collect();
    at[7] = n as i32 + 5;
    let g = Graph::new()
        .input("x", DType::F32, &[Some(n)])
        .constant("data", HostTensor::from_vec(vec![n], &data).unwrap())
        .constant("at", HostTensor::from_vec(vec![n], &at).unwrap())
        .constant(
            "zeros",
            HostTensor::from_vec(vec![n], &vec![0i32; n]).unwrap(),
        )
        .node(
            Node::new("Add", "index")
                .inputs(["at", "zeros"])
                .outputs(["i"]),
        )
        .node(
            Node::new("Gather", "g")
                .inputs(["data", "i"])
                .outputs(["picked"]),
        )
        .node(
            Node::new("Add", "add")
                .inputs(["x", "picked"])
                .outputs(["y"]),
        )
        .output("y");
    let session = Session::new(&ctx, g).unwrap();
    let x = HostTensor::from_vec(vec![n], &vec![0.5f32; n]).unwrap();
    for run in 0..3 {
        let err = session
            .run_blocking(vec![("x".to_string(), x.clone())])
            .unwrap_err();
        assert!(
            matches!(err, Error::IndexOutOfRange { .. }),
            "run {run}: {err}"
        );
    }
}

/// A random draw of constant shape is not a constant: each run draws anew.
#[test]
fn random_draws_are_not_kept() {
    let ctx = own_ctx();
    let g = Graph::new()
        .input("x", DType::F32, &[Some(64)])
        .node(
            Node::new("RandomUniform", "u")
                .outputs(["u"])
                .attr("shape", Attr::Ints(vec![64])),
        )
        .node(Node::new("Mul", "m").inputs(["u", "u"]).outputs(["u2"]))
        .node(Node::new("Add", "add").inputs(["x", "u2"]).outputs(["y"]))
        .output("y");
    let session = Session::new(&ctx, g).unwrap();
    let x = HostTensor::from_vec(vec![64], &[0f32; 64]).unwrap();
    let a = session
        .run_blocking(vec![("x".to_string(), x.clone())])
        .unwrap();
    let b = session.run_blocking(vec![("x".to_string(), x)]).unwrap();
    assert_ne!(a[0].1.data, b[0].1.data);
}

/// A Scan's initial state computed from constants is not kept (the loop keeps its state in
/// that fresh value's buffer rather than a copy): every run encodes the same commands.
#[test]
fn a_loop_state_made_of_constants_is_made_by_every_run() {
    let ctx = own_ctx();
    let body = Graph::new()
        .input("h", DType::I32, &[Some(20_000)])
        .input("x", DType::I32, &[Some(20_000)])
        .node(Node::new("Add", "a").inputs(["h", "x"]).outputs(["h2"]))
        .output("h2");
    let g = Graph::new()
        .input("xs", DType::I32, &[Some(3), Some(20_000)])
        .constant("c", small_ints(&[20_000], 2))
        .node(
            Node::new("Mul", "double")
                .inputs(["c", "c"])
                .outputs(["h0"]),
        )
        .node(
            Node::new("Scan", "scan")
                .inputs(["h0", "xs"])
                .outputs(["hn"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("hn");
    let session = Session::new(&ctx, g.clone()).unwrap();
    let mut per_run = Vec::new();
    for run in 0..3u64 {
        let xs = small_ints(&[3, 20_000], 30 + run);
        let inputs = vec![("xs".to_string(), xs)];
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let (got, count) = counted_run(&ctx, &session, inputs);
        per_run.push(count);
        assert_eq!(got[0].1, want[0], "run {run}");
    }
    assert!(per_run.iter().all(|c| *c == per_run[0]), "{per_run:?}");
}

/// A kept value that views a constant (a Reshape of it) and the runs' own reads of that
/// constant share one upload.
#[test]
fn a_view_of_a_constant_shares_its_upload() {
    let ctx = own_ctx();
    let w = small_ints(&[128, 4, 64], 3);
    let g = Graph::new()
        .input("x", DType::I32, &[Some(2), Some(128)])
        .input("z", DType::I32, &[Some(128), Some(4), Some(64)])
        .constant("W", w.clone())
        .constant(
            "flat",
            HostTensor::from_vec(vec![2], &[128i64, 256]).unwrap(),
        )
        .node(
            Node::new("Reshape", "r")
                .inputs(["W", "flat"])
                .outputs(["w2"]),
        )
        .node(Node::new("MatMul", "m").inputs(["x", "w2"]).outputs(["y"]))
        .node(Node::new("Mul", "scaled").inputs(["z", "W"]).outputs(["s"]))
        .output("y")
        .output("s");
    let session = Session::new(&ctx, g.clone()).unwrap();
    for run in 0..3u64 {
        let inputs = vec![
            ("x".to_string(), small_ints(&[2, 128], 40 + run)),
            ("z".to_string(), small_ints(&[128, 4, 64], 50 + run)),
        ];
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let got: Vec<HostTensor> = session
            .run_blocking(inputs)
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(got, want, "run {run}");
        // One buffer of W's size: not W uploaded by the first run's two parts apart.
        let bytes = session.constant_bytes();
        assert!(
            bytes >= w.data.len() as u64 && bytes < 2 * w.data.len() as u64,
            "{bytes}"
        );
    }
}

fn ctx_with_memory(max_memory: u64) -> wgpu_ops::Context {
    wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        max_memory: Some(max_memory),
        ..Default::default()
    })
    .expect("no GPU adapter")
}

/// Kept values take at most a quarter of the memory limit: under a limit of 480 KiB not all
/// of the 128 KiB of transposed blocks are kept.
#[test]
fn kept_values_take_at_most_a_quarter_of_the_memory_limit() {
    let ctx = ctx_with_memory(480 << 10);
    let g = gates(false);
    let session = Session::new(&ctx, g.clone()).unwrap();
    let mut per_run = Vec::new();
    let mut held = Vec::new();
    for run in 0..3u64 {
        let inputs = vec![("x".to_string(), small_ints(&[2, 128], 60 + run))];
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let (got, count) = counted_run(&ctx, &session, inputs);
        per_run.push(count);
        assert_eq!(got[0].1, want[0], "run {run}");
        held.push(session.constant_bytes());
    }
    // Three of the four 32 KiB blocks fit in 120 KiB: the cut runs every time for the
    // fourth, and the weight's upload (128 KiB) is kept for it.
    assert!(
        held.iter().all(|&b| b <= (128 << 10) + (120 << 10)),
        "{held:?}"
    );
    assert!(per_run[1..].iter().all(|c| *c == per_run[1]), "{per_run:?}");
    // Without the limit all four are kept, and later runs encode fewer commands.
    let unlimited = own_ctx();
    let session = Session::new(&unlimited, g).unwrap();
    let inputs = vec![("x".to_string(), small_ints(&[2, 128], 60))];
    session.run_blocking(inputs.clone()).unwrap();
    let (_, (dispatches, copies)) = counted_run(&unlimited, &session, inputs);
    let all_kept = dispatches + copies;
    assert!(
        all_kept < per_run[1].0 + per_run[1].1,
        "{per_run:?} vs {all_kept}"
    );
}

/// A run that the memory limit refuses with the kept values in memory drops them and runs
/// without: a weight cast from i8 (256 KiB as i32) that only an early node reads, and a later
/// 512 KiB input negated, under a limit of 1.45 MiB.
#[test]
fn a_run_the_kept_values_would_not_leave_room_for_runs_without_them() {
    let ctx = ctx_with_memory(1450 << 10);
    let n = 1 << 16;
    let w: Vec<i8> = bytes(7, n).iter().map(|&b| b as i8).collect();
    let g = Graph::new()
        .input("x", DType::I32, &[Some(n)])
        .input("z", DType::I32, &[Some(2 * n)])
        .constant("w", HostTensor::from_vec(vec![n], &w).unwrap())
        .node(
            Node::new("Cast", "widen")
                .inputs(["w"])
                .outputs(["w32"])
                .attr("to", Attr::String("i32".into())),
        )
        .node(Node::new("Add", "add").inputs(["x", "w32"]).outputs(["y"]))
        .node(
            Node::new("ReduceSum", "sum")
                .inputs(["y"])
                .outputs(["s"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(Node::new("Neg", "neg").inputs(["z"]).outputs(["nz"]))
        .output("s")
        .output("nz");
    let session = Session::new(&ctx, g.clone()).unwrap();
    for run in 0..3u64 {
        let inputs = vec![
            ("x".to_string(), small_ints(&[n], 70 + run)),
            ("z".to_string(), small_ints(&[2 * n], 80 + run)),
        ];
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let got: Vec<HostTensor> = session
            .run_blocking(inputs)
            .unwrap_or_else(|e| panic!("run {run}: {e}"))
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(got, want, "run {run}");
    }
}
