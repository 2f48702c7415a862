//! A session's `run_tensors` encoded again: a run with inputs of the same dtypes and shapes,
//! handed over the same way, replays the last run's commands instead of planning the graph.
//! Every replayed run is checked bit for bit against the same run on a fresh session (planned
//! and recorded as usual), with both kernel sets, and the runs that cannot be replayed (a held
//! output, other shapes, a random draw) against the same.

mod common;
use common::*;
use proptest::prelude::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::{Context, ContextOptions, DType, Error, HostTensor, Session, Tensor};

fn contexts() -> Vec<Context> {
    vec![context(true), context(false)]
}

fn f32s(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = bytes(seed, n)
        .iter()
        .map(|&b| (b as f32 - 128.0) / 256.0)
        .collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

/// An RNN cell as a Scan of `steps` steps: h = tanh(x W + h R), its states also a scan
/// output, the weights constants of the body; `batch` `None` leaves the batch open (runs of
/// other shapes).
fn rnn(batch: Option<usize>, hidden: usize, steps: usize) -> Graph {
    let (b, h) = (batch, Some(hidden));
    let body = Graph::new()
        .input("h", DType::F32, &[b, h])
        .input("x", DType::F32, &[b, h])
        .constant("W", f32s(&[hidden, hidden], 1))
        .constant("R", f32s(&[hidden, hidden], 2))
        .node(Node::new("MatMul", "xw").inputs(["x", "W"]).outputs(["a"]))
        .node(Node::new("MatMul", "hr").inputs(["h", "R"]).outputs(["c"]))
        .node(Node::new("Add", "sum").inputs(["a", "c"]).outputs(["s"]))
        .node(Node::new("Tanh", "tanh").inputs(["s"]).outputs(["h2"]))
        .node(Node::new("Identity", "y").inputs(["h2"]).outputs(["y"]))
        .output("h2")
        .output("y");
    Graph::new()
        .input("h0", DType::F32, &[b, h])
        .input("xs", DType::F32, &[Some(steps), b, h])
        .node(
            Node::new("Scan", "scan")
                .inputs(["h0", "xs"])
                .outputs(["hn", "ys"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("hn")
        .output("ys")
}

/// `graph` on `inputs` in a session of its own (planned and recorded, not replayed).
fn fresh(ctx: &Context, graph: &Graph, inputs: &[(&str, &HostTensor)]) -> Vec<HostTensor> {
    let session = Session::new(ctx, graph.clone()).unwrap();
    let given = inputs
        .iter()
        .map(|(n, h)| (n.to_string(), Tensor::from_host(ctx, h).unwrap()))
        .collect();
    let out = session.run_tensors_blocking(given).unwrap();
    out.iter()
        .map(|(_, t)| t.to_host_blocking().unwrap())
        .collect()
}

/// A token-by-token loop: each run gets a new input and the state the last run gave out,
/// handed back. From the second run on each is a replay (the state's buffer and the one the
/// last run left in the pool trade places), and each equals the fresh session's run.
#[test]
fn a_handed_back_state_and_new_inputs_replay_the_last_run() {
    for steps in [1, 3] {
        let g = rnn(Some(2), 16, steps);
        for ctx in contexts() {
            let session = Session::new(&ctx, g.clone()).unwrap();
            let mut h = f32s(&[2, 16], 10);
            let mut state = Tensor::from_host(&ctx, &h).unwrap();
            let mut counts = Vec::new();
            for run in 0..6u64 {
                let x = f32s(&[steps, 2, 16], 20 + run);
                let want = fresh(&ctx, &g, &[("h0", &h), ("xs", &x)]);
                let before = ctx.stats();
                let given = vec![
                    ("h0".to_string(), state),
                    ("xs".to_string(), Tensor::from_host(&ctx, &x).unwrap()),
                ];
                let mut out = session.run_tensors_blocking(given).unwrap();
                let after = ctx.stats();
                counts.push((
                    after.replayed_runs - before.replayed_runs,
                    after.dispatches - before.dispatches,
                    after.copies - before.copies,
                    after.buffers_created - before.buffers_created,
                    session.spare_bytes(),
                ));
                let got: Vec<HostTensor> = out
                    .iter()
                    .map(|(_, t)| t.to_host_blocking().unwrap())
                    .collect();
                assert_eq!(got, want, "{steps} steps, run {run}");
                h = got[0].clone();
                // The state handed back, the rest dropped.
                state = out.swap_remove(0).1;
            }
            let why = format!("{steps} steps, {:?}: {counts:?}", ctx.adapter_info().name);
            assert_eq!(counts[0].0, 0, "{why}");
            for c in &counts[1..] {
                // Replayed, with the first run's commands; the new xs is the only buffer made
                // (uploaded by the test), none by the run.
                assert_eq!(c.0, 1, "{why}");
                assert_eq!((c.1, c.2), (counts[0].1, counts[0].2), "{why}");
                assert_eq!(c.3, 1, "{why}");
                // What the session keeps does not grow with the runs.
                assert_eq!(c.4, counts[2].4, "{why}");
            }
        }
    }
}

/// Inputs kept by the caller, their values written in place between runs: every later run is
/// a replay and reads the new values.
#[test]
fn inputs_rewritten_in_place_are_read_anew_by_each_replay() {
    let g = rnn(Some(4), 32, 2);
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let h0 = Tensor::from_host(&ctx, &f32s(&[4, 32], 30)).unwrap();
        let xs = Tensor::from_host(&ctx, &f32s(&[2, 4, 32], 31)).unwrap();
        for run in 0..4u64 {
            let (h, x) = (f32s(&[4, 32], 40 + run), f32s(&[2, 4, 32], 50 + run));
            ctx.queue().write_buffer(&h0.buffers()[0], 0, &h.data);
            ctx.queue().write_buffer(&xs.buffers()[0], 0, &x.data);
            let before = ctx.stats().replayed_runs;
            let out = session
                .run_tensors_blocking(vec![("h0".into(), h0.clone()), ("xs".into(), xs.clone())])
                .unwrap();
            assert_eq!(ctx.stats().replayed_runs - before, u64::from(run > 0));
            let got: Vec<HostTensor> = out
                .iter()
                .map(|(_, t)| t.to_host_blocking().unwrap())
                .collect();
            assert_eq!(got, fresh(&ctx, &g, &[("h0", &h), ("xs", &x)]), "run {run}");
            // The inputs the caller holds are left as they were.
            assert_eq!(h0.to_host_blocking().unwrap(), h, "run {run}");
        }
    }
}

/// An output the caller still holds is never written by a later run: a replay writes that
/// output's part into another buffer, and the one after it (all outputs dropped) is replayed
/// into the buffers it left.
#[test]
fn a_held_output_is_not_written_over_by_a_replay() {
    let g = rnn(Some(2), 16, 1);
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let h = f32s(&[2, 16], 60);
        let inputs = |seed| {
            vec![
                ("h0".to_string(), Tensor::from_host(&ctx, &h).unwrap()),
                (
                    "xs".to_string(),
                    Tensor::from_host(&ctx, &f32s(&[1, 2, 16], seed)).unwrap(),
                ),
            ]
        };
        let replays = || ctx.stats().replayed_runs;
        let first = session.run_tensors_blocking(inputs(61)).unwrap();
        let held = first[0].1.to_host_blocking().unwrap();
        let before = replays();
        let second = session.run_tensors_blocking(inputs(62)).unwrap();
        assert_eq!(replays(), before + 1);
        assert_eq!(first[0].1.to_host_blocking().unwrap(), held);
        assert!(!first[0].1.shares_buffer(&second[0].1));
        let want = fresh(&ctx, &g, &[("h0", &h), ("xs", &f32s(&[1, 2, 16], 62))]);
        assert_eq!(second[0].1.to_host_blocking().unwrap(), want[0]);
        drop((first, second));
        let third = session.run_tensors_blocking(inputs(63)).unwrap();
        assert_eq!(replays(), before + 2);
        let want = fresh(&ctx, &g, &[("h0", &h), ("xs", &f32s(&[1, 2, 16], 63))]);
        assert_eq!(third[0].1.to_host_blocking().unwrap(), want[0]);
    }
}

/// Other shapes are planned anew; the same shapes again are replayed.
#[test]
fn other_shapes_are_planned_anew() {
    let g = Graph::new()
        .input("x", DType::F32, &[None, Some(8)])
        .input("y", DType::F32, &[Some(8)])
        .node(Node::new("Mul", "m").inputs(["x", "y"]).outputs(["p"]))
        .node(Node::new("Sqrt", "s").inputs(["p"]).outputs(["q"]))
        .output("q");
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let mut replayed = Vec::new();
        for (run, rows) in [3, 3, 5, 5, 3].into_iter().enumerate() {
            let (x, y) = (f32s(&[rows, 8], 70 + run as u64), f32s(&[8], 80));
            let before = ctx.stats().replayed_runs;
            let given = vec![
                ("x".to_string(), Tensor::from_host(&ctx, &x).unwrap()),
                ("y".to_string(), Tensor::from_host(&ctx, &y).unwrap()),
            ];
            let out = session.run_tensors_blocking(given).unwrap();
            replayed.push(ctx.stats().replayed_runs - before);
            let want = fresh(&ctx, &g, &[("x", &x), ("y", &y)]);
            assert_eq!(out[0].1.to_host_blocking().unwrap(), want[0], "run {run}");
        }
        assert_eq!(replayed, [0, 1, 0, 1, 0]);
    }
}

/// `data` [rows, 4] gathered by `picks` row indices `i`.
fn gather_rows(rows: usize, picks: usize) -> Graph {
    Graph::new()
        .input("data", DType::F32, &[Some(rows), Some(4)])
        .input("i", DType::I64, &[Some(picks)])
        .node(
            Node::new("Gather", "g")
                .inputs(["data", "i"])
                .outputs(["out"])
                .attr("axis", Attr::Int(0)),
        )
        .output("out")
}

/// A replay zeroes the index fault buffer first: an index out of range in one replayed run is
/// reported for that run only.
#[test]
fn a_replay_reports_its_own_index_faults() {
    let g = gather_rows(6, 3);
    let data = f32s(&[6, 4], 90);
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        for (run, at) in [[0i64, 5, 2], [1, 6, 0], [5, 4, -6], [7, 0, 0], [3, 3, 3]]
            .into_iter()
            .enumerate()
        {
            let i = HostTensor::from_vec(vec![3], &at).unwrap();
            let before = ctx.stats().replayed_runs;
            let given = vec![
                ("data".to_string(), Tensor::from_host(&ctx, &data).unwrap()),
                ("i".to_string(), Tensor::from_host(&ctx, &i).unwrap()),
            ];
            let out = session.run_tensors_blocking(given).unwrap();
            assert_eq!(ctx.stats().replayed_runs - before, u64::from(run > 0));
            let check = session.check_gpu_indices_blocking();
            let bad = at.iter().any(|&k| !(-6..6).contains(&k));
            match check {
                Err(Error::IndexOutOfRange { .. }) if bad => {}
                Ok(()) if !bad => {
                    let want = fresh(&ctx, &g, &[("data", &data), ("i", &i)]);
                    assert_eq!(out[0].1.to_host_blocking().unwrap(), want[0], "run {run}");
                }
                other => panic!("run {run} {at:?}: {other:?}"),
            }
        }
    }
}

/// A KV cache handed back each run and written in place by a scatter: the cache buffer is the
/// same every run, and each replay writes the new rows into it.
#[test]
fn a_cache_written_in_place_is_replayed_in_place() {
    let g = Graph::new()
        .input("cache", DType::F32, &[Some(8), Some(4)])
        .input("at", DType::I64, &[Some(1), Some(4)])
        .input("row", DType::F32, &[Some(1), Some(4)])
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["cache", "at", "row"])
                .outputs(["next"])
                .attr("axis", Attr::Int(0)),
        )
        .output("next");
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let mut host = f32s(&[8, 4], 100);
        let mut cache = Tensor::from_host(&ctx, &host).unwrap();
        let first = cache.buffers()[0].clone();
        for step in 0..8i64 {
            let at = HostTensor::from_vec(vec![1, 4], &[step; 4]).unwrap();
            let row = f32s(&[1, 4], 110 + step as u64);
            let want = fresh(&ctx, &g, &[("cache", &host), ("at", &at), ("row", &row)]);
            let before = ctx.stats().replayed_runs;
            let given = vec![
                ("cache".to_string(), cache),
                ("at".to_string(), Tensor::from_host(&ctx, &at).unwrap()),
                ("row".to_string(), Tensor::from_host(&ctx, &row).unwrap()),
            ];
            let mut out = session.run_tensors_blocking(given).unwrap();
            assert_eq!(ctx.stats().replayed_runs - before, u64::from(step > 0));
            cache = out.remove(0).1;
            assert_eq!(cache.buffers()[0], first, "step {step}: the cache moved");
            host = cache.to_host_blocking().unwrap();
            assert_eq!(host, want[0], "step {step}");
        }
    }
}

/// A graph that draws random numbers is never replayed: its stream's state is filled from the
/// host, and each run draws anew.
#[test]
fn a_random_draw_is_not_replayed() {
    let g = Graph::new()
        .input("x", DType::F32, &[Some(64)])
        .node(
            Node::new("RandomUniformLike", "u")
                .inputs(["x"])
                .outputs(["u"]),
        )
        .node(Node::new("Add", "a").inputs(["x", "u"]).outputs(["y"]))
        .output("y");
    let x = f32s(&[64], 120);
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let mut seen: Vec<HostTensor> = Vec::new();
        for run in 0..3 {
            let before = ctx.stats().replayed_runs;
            let given = vec![("x".to_string(), Tensor::from_host(&ctx, &x).unwrap())];
            let out = session.run_tensors_blocking(given).unwrap();
            assert_eq!(ctx.stats().replayed_runs, before, "run {run}");
            let got = out[0].1.to_host_blocking().unwrap();
            assert!(!seen.contains(&got), "run {run} drew the same numbers");
            seen.push(got);
        }
    }
}

fn named(inputs: &[(&str, &HostTensor)]) -> Vec<(String, HostTensor)> {
    inputs
        .iter()
        .map(|(n, h)| (n.to_string(), (*h).clone()))
        .collect()
}

/// `Session::run` with new values each time: its inputs are uploaded before planning, so from
/// the second run on each is a replay, uploads into the first run's buffers (none made) and
/// equals the fresh session's run.
#[test]
fn host_runs_replay_the_last_run() {
    for steps in [1, 3] {
        let g = rnn(Some(2), 16, steps);
        for ctx in contexts() {
            let session = Session::new(&ctx, g.clone()).unwrap();
            let mut counts = Vec::new();
            for run in 0..5u64 {
                let h = f32s(&[2, 16], 30 + run);
                let x = f32s(&[steps, 2, 16], 40 + run);
                let inputs = [("h0", &h), ("xs", &x)];
                let want = fresh(&ctx, &g, &inputs);
                let before = ctx.stats();
                let out = session.run_blocking(named(&inputs)).unwrap();
                let after = ctx.stats();
                counts.push((
                    after.replayed_runs - before.replayed_runs,
                    after.dispatches - before.dispatches,
                    after.buffers_created - before.buffers_created,
                ));
                let got: Vec<HostTensor> = out.into_iter().map(|(_, t)| t).collect();
                assert_eq!(got, want, "{steps} steps, run {run}");
            }
            let why = format!("{steps} steps, {:?}: {counts:?}", ctx.adapter_info().name);
            assert_eq!(counts[0].0, 0, "{why}");
            for c in &counts[1..] {
                assert_eq!((c.0, c.1), (1, counts[0].1), "{why}");
                // Downloads' staging buffers aside, which every run makes.
                assert_eq!(c.2, counts[1].2, "{why}");
                assert!(c.2 < counts[0].2, "{why}");
            }
        }
    }
}

/// A host input whose values plan an op (a Reshape's shape) stays on the host: a run with
/// other values there is planned anew, one with the same values replayed.
#[test]
fn host_values_that_plan_ops_must_match_for_a_replay() {
    let g = Graph::new()
        .input("x", DType::F32, &[Some(16)])
        .input("shape", DType::I64, &[Some(2)])
        .node(Node::new("Neg", "n").inputs(["x"]).outputs(["y"]))
        .node(
            Node::new("Reshape", "r")
                .inputs(["y", "shape"])
                .outputs(["z"]),
        )
        .output("z");
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        for (run, (dims, replayed)) in [([2i64, 8], 0), ([2, 8], 1), ([8, 2], 0), ([8, 2], 1)]
            .into_iter()
            .enumerate()
        {
            let x = f32s(&[16], 50 + run as u64);
            let shape = HostTensor::from_vec(vec![2], &dims).unwrap();
            let inputs = [("x", &x), ("shape", &shape)];
            let want = fresh(&ctx, &g, &inputs);
            let before = ctx.stats().replayed_runs;
            let out = session.run_blocking(named(&inputs)).unwrap();
            assert_eq!(ctx.stats().replayed_runs - before, replayed, "run {run}");
            assert_eq!(out[0].1, want[0], "run {run}");
        }
    }
}

/// Inputs whose rules (`CheckInputs`) read only their shapes are uploaded first like any
/// other: new values each run, every run after the first replayed. A bad shape is still
/// refused by the rule.
#[test]
fn inputs_checked_by_shape_only_replay_with_new_values() {
    let cast = |from: &str, to: &str| {
        Node::new("Cast", to)
            .inputs([from])
            .outputs([to])
            .attr("to", Attr::String("i32".into()))
    };
    let g = Graph::new()
        .input("A", DType::U8, &[Some(2), Some(3)])
        .input("B", DType::U8, &[Some(3), Some(4)])
        .node(
            Node::new("CheckInputs", "check")
                .inputs(["A", "B"])
                .outputs(["ok"])
                .attr("op", Attr::String("MatMulInteger".into())),
        )
        .node(cast("A", "a"))
        .node(cast("B", "b"))
        .node(Node::new("MatMul", "mm").inputs(["a", "b"]).outputs(["Y"]))
        .output("Y");
    let u8s = |shape: &[usize], seed: u64| {
        HostTensor::from_bytes(
            DType::U8,
            shape.to_vec(),
            bytes(seed, shape.iter().product()),
        )
        .unwrap()
    };
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        for run in 0..4u64 {
            let (a, b) = (u8s(&[2, 3], 130 + run), u8s(&[3, 4], 140 + run));
            let inputs = [("A", &a), ("B", &b)];
            let before = ctx.stats().replayed_runs;
            let out = session.run_blocking(named(&inputs)).unwrap();
            assert_eq!(
                ctx.stats().replayed_runs - before,
                u64::from(run > 0),
                "run {run}"
            );
            assert_eq!(out[0].1, fresh(&ctx, &g, &inputs)[0], "run {run}");
        }
    }
}

/// An index out of range given on the host keeps the message planning on the host gives it
/// (the run uploaded first finds it on the GPU, then is planned again on the host values);
/// runs before and after it are replayed.
#[test]
fn host_index_errors_keep_their_message() {
    let g = gather_rows(3, 2);
    let data = f32s(&[3, 4], 60);
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        for (run, at) in [[0i64, 2], [1, 1], [5, 0], [2, -3], [-1, 0]]
            .into_iter()
            .enumerate()
        {
            let i = HostTensor::from_vec(vec![2], &at).unwrap();
            let inputs = [("data", &data), ("i", &i)];
            let before = ctx.stats().replayed_runs;
            let result = session.run_blocking(named(&inputs));
            let replayed = ctx.stats().replayed_runs - before;
            if at[0] == 5 {
                let e = result.unwrap_err().to_string();
                assert!(
                    e.contains("index 5 is out of range for axis 0 of size 3"),
                    "{e}"
                );
            } else {
                assert_eq!(
                    result.unwrap()[0].1,
                    fresh(&ctx, &g, &inputs)[0],
                    "run {run}"
                );
            }
            assert!(session.uploads_inputs_first(), "run {run}");
            // Run 2 is a replay that finds the index on the GPU, then is planned on the host
            // values (which drops the log): the run after it is planned, the next replayed.
            assert_eq!(
                replayed,
                u64::from(run == 1 || run == 2 || run == 4),
                "run {run}"
            );
        }
    }
}

/// A Scan body that reshapes by an outer input needs its values while planning, which the
/// input uploaded first cannot give: the run is planned again on the host values, and the
/// session plans every later run that way (correct, not replayed).
#[test]
fn a_graph_that_needs_host_values_falls_back_to_planning_on_them() {
    let body = Graph::new()
        .input("acc", DType::F32, &[Some(2), Some(3)])
        .input("x", DType::F32, &[Some(6)])
        .node(
            Node::new("Reshape", "r")
                .inputs(["x", "shape"])
                .outputs(["xr"]),
        )
        .node(
            Node::new("Add", "a")
                .inputs(["acc", "xr"])
                .outputs(["next"]),
        )
        .output("next");
    let g = Graph::new()
        .input("acc0", DType::F32, &[Some(2), Some(3)])
        .input("xs", DType::F32, &[Some(4), Some(6)])
        .input("shape", DType::I64, &[Some(2)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["acc0", "xs"])
                .outputs(["acc"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("acc");
    let shape = HostTensor::from_vec(vec![2], &[2i64, 3]).unwrap();
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        for run in 0..3u64 {
            let acc = f32s(&[2, 3], 70 + run);
            let xs = f32s(&[4, 6], 80 + run);
            let inputs = [("acc0", &acc), ("xs", &xs), ("shape", &shape)];
            let before = ctx.stats().replayed_runs;
            let out = session.run_blocking(named(&inputs)).unwrap();
            assert_eq!(ctx.stats().replayed_runs, before, "run {run}");
            assert!(!session.uploads_inputs_first(), "run {run}");
            // The rows added in order, as the loop adds them (f32 sums round alike).
            let mut want = acc.to_vec::<f32>().unwrap();
            for row in xs.to_vec::<f32>().unwrap().chunks(6) {
                want.iter_mut().zip(row).for_each(|(a, x)| *a += x);
            }
            assert_eq!(out[0].1.to_vec::<f32>().unwrap(), want, "run {run}");
        }
    }
}

/// One run of a caller's loop (see `any_sequence_of_runs_gives_what_fresh_sessions_give`).
#[derive(Clone, Debug)]
struct Step {
    batch: usize,
    /// 0: a new upload handed over; 1: the last run's state handed back; 2: the last run's
    /// state, a handle kept.
    state: u8,
    /// The scan input: a new upload handed over, or the caller's own tensor rewritten.
    own_xs: bool,
    /// The caller keeps this run's outputs through the next run.
    keep: bool,
    /// Before the run: 1 releases the session's buffers, 2 turns replays off, 3 on again.
    before: u8,
    /// Run through `Session::run` on the values on the host (uploaded first, replayed too).
    host: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        2usize..4,
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![8 => Just(0u8), 1 => 1u8..4],
        any::<bool>(),
    )
        .prop_map(|(batch, state, own_xs, keep, before, host)| Step {
            batch,
            state,
            own_xs,
            keep,
            before,
            host,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Any mix of the ways a caller hands its tensors over, keeps its outputs and changes
    /// shapes, replayed or not, and runs on host values between them: each run gives what a
    /// fresh session gives on the same values, bit for bit, and no tensor the caller holds
    /// changes.
    #[test]
    fn any_sequence_of_runs_gives_what_fresh_sessions_give(
        groups in prop::collection::vec((step(), 1usize..5), 1..5),
        cpu_kernels in any::<bool>(),
    ) {
        // Each step repeated a few times: the runs a replay may repeat.
        let steps: Vec<Step> = groups
            .iter()
            .flat_map(|(s, n)| {
                let again = Step { before: 0, ..s.clone() };
                std::iter::once(s.clone()).chain(std::iter::repeat_n(again, n - 1))
            })
            .collect();
        let ctx = if cpu_kernels { cpu_ctx() } else { gpu_ctx() };
        let (hidden, seq) = (8, 2);
        let g = rnn(None, hidden, seq);
        let session = Session::new(ctx, g.clone()).unwrap();
        let mut seed = 200u64;
        let mut last: Option<(Tensor, HostTensor)> = None;
        let mut held: Vec<(Tensor, HostTensor)> = Vec::new();
        let mut own_xs: Vec<Tensor> = Vec::new();
        for (k, s) in steps.iter().enumerate() {
            match s.before {
                1 => session.release_buffers(),
                2 => session.set_replay(false),
                3 => session.set_replay(true),
                _ => {}
            }
            seed += 1;
            let (state, h) = match (last.take(), s.state) {
                (Some((t, h)), 1) if t.shape()[0] == s.batch => (t, h),
                (Some((t, h)), 2) if t.shape()[0] == s.batch => {
                    held.push((t.clone(), h.clone()));
                    (t, h)
                }
                _ => {
                    let h = f32s(&[s.batch, hidden], seed);
                    (Tensor::from_host(ctx, &h).unwrap(), h)
                }
            };
            let x = f32s(&[seq, s.batch, hidden], seed + 1000);
            let xs = if s.own_xs {
                let at = own_xs.iter().position(|t| t.shape()[1] == s.batch);
                let t = match at {
                    Some(i) => own_xs[i].clone(),
                    None => {
                        own_xs.push(Tensor::from_host(ctx, &x).unwrap());
                        own_xs.last().unwrap().clone()
                    }
                };
                ctx.queue().write_buffer(&t.buffers()[0], 0, &x.data);
                t
            } else {
                Tensor::from_host(ctx, &x).unwrap()
            };
            let want = fresh(ctx, &g, &[("h0", &h), ("xs", &x)]);
            if s.host {
                // The same values from the host, between the runs on the GPU tensors.
                let got: Vec<HostTensor> = session
                    .run_blocking(vec![("h0".into(), h), ("xs".into(), x)])
                    .unwrap()
                    .into_iter()
                    .map(|(_, t)| t)
                    .collect();
                prop_assert_eq!(&got, &want, "host run {} of {:?}", k, steps);
                for (t, h) in &held {
                    prop_assert_eq!(&t.to_host_blocking().unwrap(), h, "a held tensor changed at run {}", k);
                }
                held.clear();
                last = Some((Tensor::from_host(ctx, &got[0]).unwrap(), got[0].clone()));
                continue;
            }
            let mut out = session
                .run_tensors_blocking(vec![("h0".into(), state), ("xs".into(), xs)])
                .unwrap();
            let got: Vec<HostTensor> = out.iter().map(|(_, t)| t.to_host_blocking().unwrap()).collect();
            prop_assert_eq!(&got, &want, "run {} of {:?}", k, steps);
            for (t, h) in &held {
                prop_assert_eq!(&t.to_host_blocking().unwrap(), h, "a held tensor changed at run {}", k);
            }
            if s.keep {
                for ((_, t), h) in out.iter().zip(&got) {
                    held.push((t.clone(), h.clone()));
                }
            } else {
                held.clear();
            }
            let hn = out.swap_remove(0).1;
            last = Some((hn, got[0].clone()));
        }
    }
}

fn context(cpu_kernels: bool) -> Context {
    Context::new_blocking(ContextOptions {
        cpu_kernels: Some(cpu_kernels),
        ..Default::default()
    })
    .unwrap()
}

fn cpu_ctx() -> &'static Context {
    static CTX: std::sync::OnceLock<Context> = std::sync::OnceLock::new();
    CTX.get_or_init(|| context(true))
}

fn gpu_ctx() -> &'static Context {
    static CTX: std::sync::OnceLock<Context> = std::sync::OnceLock::new();
    CTX.get_or_init(|| context(false))
}
