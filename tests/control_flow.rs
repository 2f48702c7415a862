//! If and Loop beyond the ONNX node tests and the onnxruntime cases (tests/onnx_node.rs runs
//! both): refusals, each one error line naming the op and the rule; conditions and trip
//! counts computed on the GPU, read back on native builds and refused without read-backs; If and Loop inside a Scan
//! body; and a Loop of 3000 iterations (the kind that runs as a replayed Scan: which loops do
//! is tested in src/graph/control.rs), against the CPU interpreter.

mod common;

use wgpu_ops::graph::Attr;
use wgpu_ops::{reference, DType, Graph, HostTensor, Node, Session};

fn ctx() -> wgpu_ops::Context {
    wgpu_ops::Context::new_blocking(Default::default()).expect("an adapter")
}

fn scalar<T: wgpu_ops::Element>(v: T) -> HostTensor {
    HostTensor::from_vec(vec![], &[v]).unwrap()
}

fn f32s(shape: &[usize], seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|k| (((k as u32).wrapping_mul(2654435761) ^ seed) % 2000) as f32 / 1000.0 - 1.0)
        .collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

/// A graph input declared with `value`'s dtype and shape.
fn input(g: Graph, name: &str, value: &HostTensor) -> Graph {
    let shape: Vec<Option<usize>> = value.shape.iter().map(|&d| Some(d)).collect();
    g.input(name, value.dtype, &shape)
}

/// More elements than the executor computes on the host while planning: values computed from
/// it are computed on the GPU.
const LARGE: usize = 20_000;

/// Runs `g` on `inputs` without read-backs (as the browser runs it, see
/// `ContextOptions::read_back`); the error's text where it fails.
fn refusal(g: Graph, inputs: Vec<(&str, HostTensor)>) -> String {
    let ctx = common::ctx_without_read_back();
    let given = inputs
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let e = Session::new(&ctx, g)
        .and_then(|s| s.run_blocking(given))
        .expect_err("refused");
    let m = e.to_string();
    assert!(!m.contains('\n'), "one line: {m}");
    m
}

fn branch(op: &str, out: &str) -> Attr {
    Attr::Graph(Box::new(
        Graph::new()
            .node(Node::new(op, out).inputs(["x", "x"]).outputs([out]))
            .output(out),
    ))
}

/// `Greater(ReduceSum(x), 0)`: a condition computed from `x`.
fn sum_positive(g: Graph, x: &str, out: &str) -> Graph {
    g.constant(format!("{out}/zero"), scalar(0f32))
        .node(
            Node::new("ReduceSum", format!("{out}/sum"))
                .inputs([x])
                .outputs([format!("{out}/sum")])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Greater", out)
                .inputs([format!("{out}/sum"), format!("{out}/zero")])
                .outputs([out]),
        )
}

#[test]
fn if_refuses_a_condition_computed_on_the_gpu_or_not_one_bool() {
    let x = f32s(&[LARGE], 1);
    let g = sum_positive(input(Graph::new(), "x", &x), "x", "c")
        .node(
            Node::new("If", "choose")
                .inputs(["c"])
                .outputs(["y"])
                .attr("then_branch", branch("Add", "t"))
                .attr("else_branch", branch("Sub", "e")),
        )
        .output("y");
    let m = refusal(g, vec![("x", x.clone())]);
    assert!(
        m.contains("If") && m.contains("cond 'c' is computed on the GPU"),
        "{m}"
    );

    let two = HostTensor::from_vec(vec![2], &[true, false]).unwrap();
    let g = input(input(Graph::new(), "x", &x), "c", &two)
        .node(
            Node::new("If", "choose")
                .inputs(["c"])
                .outputs(["y"])
                .attr("then_branch", branch("Add", "t"))
                .attr("else_branch", branch("Sub", "e")),
        )
        .output("y");
    let m = refusal(g, vec![("x", x.clone()), ("c", two)]);
    assert!(
        m.contains("If") && m.contains("cond must hold one bool"),
        "{m}"
    );

    // A branch with the wrong number of outputs.
    let g = input(input(Graph::new(), "x", &x), "c", &scalar(true))
        .node(
            Node::new("If", "choose")
                .inputs(["c"])
                .outputs(["y", "z"])
                .attr("then_branch", branch("Add", "t"))
                .attr("else_branch", branch("Sub", "e")),
        )
        .output("y");
    let m = refusal(g, vec![("x", x), ("c", scalar(true))]);
    assert!(
        m.contains("then_branch has 1 outputs but the node has 2"),
        "{m}"
    );
}

/// A Loop body over `i`, `cond` and one value `v`: `v_out = v + 1`, the condition `cond_out`
/// from `extra` nodes (or passed through).
fn body(extra: Vec<Node>) -> Graph {
    let mut g = Graph::new()
        .input("i", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .input("v", DType::F32, &[None])
        .constant("one", scalar(1f32))
        .node(
            Node::new("Add", "inc")
                .inputs(["v", "one"])
                .outputs(["v_out"]),
        );
    if extra.is_empty() {
        g = g.node(
            Node::new("Identity", "keep")
                .inputs(["cond"])
                .outputs(["cond_out"]),
        );
    }
    for n in extra {
        g = g.node(n);
    }
    g.output("cond_out").output("v_out")
}

fn looped(g: Graph, m: &str, cond: &str, body: Graph) -> Graph {
    g.node(
        Node::new("Loop", "loop")
            .inputs([m, cond, "v0"])
            .outputs(["v"])
            .attr("body", Attr::Graph(Box::new(body))),
    )
    .output("v")
}

#[test]
fn loop_refuses_what_would_need_a_host_round_trip_or_never_end() {
    let v0 = f32s(&[LARGE], 2);
    let small = f32s(&[3], 3);

    // The body's condition from its GPU values.
    let cond_body = {
        let b = body(vec![]);
        let mut b = Graph {
            nodes: b.nodes[..1].to_vec(),
            ..b
        };
        b = sum_positive(b, "v", "cond_out");
        b
    };
    let g = looped(
        input(input(Graph::new(), "v0", &v0), "c", &scalar(true)),
        "",
        "c",
        cond_body,
    );
    let m = refusal(g, vec![("v0", v0.clone()), ("c", scalar(true))]);
    assert!(
        m.contains("Loop") && m.contains("computes its condition ('cond_out') on the GPU"),
        "{m}"
    );

    // Neither a trip count nor a condition that can become false.
    let g = looped(
        input(input(Graph::new(), "v0", &small), "c", &scalar(true)),
        "",
        "c",
        body(vec![]),
    );
    let m = refusal(g, vec![("v0", small.clone()), ("c", scalar(true))]);
    assert!(m.contains("Loop") && m.contains("would not end"), "{m}");

    // A trip count computed on the GPU.
    let g = input(input(Graph::new(), "v0", &small), "big", &v0)
        .node(
            Node::new("ReduceSum", "s")
                .inputs(["big"])
                .outputs(["s"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Cast", "m")
                .inputs(["s"])
                .outputs(["m"])
                .attr("to", Attr::String("i64".into())),
        );
    let g = looped(g, "m", "", body(vec![]));
    let m = refusal(g, vec![("v0", small.clone()), ("big", v0)]);
    assert!(
        m.contains("Loop") && m.contains("M ('m') is computed on the GPU"),
        "{m}"
    );

    // A body that does not take the iteration number, the condition and the values.
    let short = Graph {
        inputs: body(vec![]).inputs[1..].to_vec(),
        ..body(vec![])
    };
    let g = looped(
        input(input(Graph::new(), "v0", &small), "m", &scalar(3i64)),
        "m",
        "",
        short,
    );
    let m = refusal(g, vec![("v0", small), ("m", scalar(3i64))]);
    assert!(m.contains("Loop") && m.contains("declares 2"), "{m}");
}

/// The body's condition ends a Loop whose `cond` is left out, as in onnxruntime (the spec's
/// pseudo-code ignores it there): a for loop that breaks, and a loop with neither M nor cond.
#[test]
fn the_body_condition_ends_a_loop_without_a_cond_input() {
    let v0 = f32s(&[3], 4);
    let stop_after = |k: i64| {
        body(vec![Node::new("Less", "l")
            .inputs(["i", "k"])
            .outputs(["cond_out"])])
        .constant("k", scalar(k))
    };
    // (M, the last iteration whose condition output is true, iterations run)
    for (m, k, runs) in [
        (Some(5), 2, 3),
        (Some(2), 4, 2),
        (None, 3, 4),
        (Some(5), -1, 1),
    ] {
        let mut g = input(Graph::new(), "v0", &v0);
        if let Some(m) = m {
            g = g.constant("m", scalar(m as i64));
        }
        let g = looped(g, if m.is_some() { "m" } else { "" }, "", stop_after(k));
        let v = agrees_with_the_interpreter(g, vec![("v0", v0.clone())]);
        let want: Vec<f32> = v0
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| x + runs as f32)
            .collect();
        assert_eq!(v[0].to_vec::<f32>().unwrap(), want, "M {m:?}, k {k}");
    }
}

/// `g` on the GPU and on the CPU interpreter: the same values (f32 within 1e-5 relative).
fn agrees_with_the_interpreter(g: Graph, inputs: Vec<(&str, HostTensor)>) -> Vec<HostTensor> {
    agrees_on(&ctx(), g, inputs)
}

/// [`agrees_with_the_interpreter`] on `ctx`.
fn agrees_on(
    ctx: &wgpu_ops::Context,
    g: Graph,
    inputs: Vec<(&str, HostTensor)>,
) -> Vec<HostTensor> {
    let given: Vec<(String, HostTensor)> = inputs
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let want = reference::graph::run_graph(&g, &given, &Default::default()).unwrap();
    let got = Session::new(ctx, g).unwrap().run_blocking(given).unwrap();
    assert_eq!(got.len(), want.len());
    for ((name, got), want) in got.iter().zip(&want) {
        assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{name}");
        if got.dtype == DType::F32 {
            let (a, b) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "{name}: {x} vs {y}"
                );
            }
        } else {
            assert_eq!(got.data, want.data, "{name}");
        }
    }
    got.into_iter().map(|(_, v)| v).collect()
}

#[test]
fn a_long_loop_with_a_gather_at_the_iteration_number_matches_the_interpreter() {
    // 3000 iterations, each adding row i % 7 of X (a Gather at the iteration number, on the GPU).
    let x = f32s(&[7, 4], 5);
    let v0 = f32s(&[4], 6);
    let b = body(vec![])
        .constant("seven", scalar(7i64))
        .node(Node::new("Mod", "r").inputs(["i", "seven"]).outputs(["r"]))
        .node(Node::new("Gather", "g").inputs(["X", "r"]).outputs(["row"]))
        .node(Node::new("Mul", "s").inputs(["row", "v"]).outputs(["vs"]));
    let b = Graph {
        outputs: vec![
            b.outputs[0].clone(),
            b.outputs[1].clone(),
            wgpu_ops::graph::ValueInfo::named("vs"),
        ],
        ..b
    };
    let g = input(input(Graph::new(), "X", &x), "v0", &v0)
        .constant("m", scalar(3000i64))
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "v0"])
                .outputs(["v", "vs"])
                .attr("body", Attr::Graph(Box::new(b))),
        )
        .output("v")
        .output("vs");
    let out = agrees_with_the_interpreter(g, vec![("X", x), ("v0", v0.clone())]);
    assert_eq!(out[1].shape, vec![3000, 4]);
    // v + 3000 after 3000 iterations.
    let (v, start) = (out[0].to_vec::<f32>().unwrap(), v0.to_vec::<f32>().unwrap());
    for (a, b) in v.iter().zip(&start) {
        assert!((a - (b + 3000.0)).abs() < 1e-2, "{a} vs {b} + 3000");
    }
}

#[test]
fn if_and_loop_run_inside_a_scan_body() {
    // A Scan over the rows of X: the state s becomes (s + row) or (s - row) by the outer flag,
    // then is doubled by a Loop of 2 iterations.
    let x = f32s(&[5, 3], 7);
    let s0 = f32s(&[3], 8);
    let pick = |op: &str, out: &str| {
        Attr::Graph(Box::new(
            Graph::new()
                .node(Node::new(op, out).inputs(["s", "row"]).outputs([out]))
                .output(out),
        ))
    };
    let double = Graph::new()
        .input("k", DType::I64, &[])
        .input("kc", DType::Bool, &[])
        .input("a", DType::F32, &[Some(3)])
        .node(Node::new("Add", "d").inputs(["a", "a"]).outputs(["a_out"]))
        .node(
            Node::new("Identity", "kc")
                .inputs(["kc"])
                .outputs(["kc_out"]),
        )
        .output("kc_out")
        .output("a_out");
    let scan_body = Graph::new()
        .input("s", DType::F32, &[Some(3)])
        .input("row", DType::F32, &[Some(3)])
        .constant("two", scalar(2i64))
        .node(
            Node::new("If", "pick")
                .inputs(["flag"])
                .outputs(["mixed"])
                .attr("then_branch", pick("Add", "p"))
                .attr("else_branch", pick("Sub", "m")),
        )
        .node(
            Node::new("Loop", "double")
                .inputs(["two", "", "mixed"])
                .outputs(["s_out"])
                .attr("body", Attr::Graph(Box::new(double))),
        )
        .node(Node::new("Identity", "y").inputs(["s_out"]).outputs(["y"]))
        .output("s_out")
        .output("y");
    for flag in [true, false] {
        let g = input(
            input(input(Graph::new(), "X", &x), "s0", &s0),
            "flag",
            &scalar(flag),
        )
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "X"])
                .outputs(["s", "ys"])
                .attr("body", Attr::Graph(Box::new(scan_body.clone())))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("s")
        .output("ys");
        agrees_with_the_interpreter(
            g,
            vec![("X", x.clone()), ("s0", s0.clone()), ("flag", scalar(flag))],
        );
    }
}

#[test]
fn loops_beyond_the_command_limit_are_refused_before_they_run() {
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_commands: Some(300),
        ..Default::default()
    })
    .unwrap();
    let v0 = f32s(&[3], 9);
    let run = |g: Graph| {
        let e = Session::new(&ctx, g)
            .and_then(|s| s.run_blocking(vec![("v0".to_string(), v0.clone())]))
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("Loop") && e.contains("the loop's iterations") && !e.contains('\n'),
            "{e}"
        );
        e
    };
    // A trip count of 10^12, refused before the iteration numbers are built.
    let g = input(Graph::new(), "v0", &v0).constant("m", scalar(1_000_000_000_000i64));
    let e = run(looped(g, "m", "", body(vec![])));
    assert!(e.contains("1000000000000"), "{e}");
    // A condition computed on the host that stays true: unrolled up to the limit.
    let g = input(Graph::new(), "v0", &v0).constant("c", scalar(true));
    let never = body(vec![Node::new("Less", "l")
        .inputs(["i", "far"])
        .outputs(["cond_out"])])
    .constant("far", scalar(1_000_000_000_000_000i64));
    run(looped(g, "", "c", never));
}

/// An If's condition and a Loop's trip count computed on the GPU from the data are read back
/// in the middle of the run (native builds), and the results agree with the interpreter.
#[test]
fn conditions_and_trip_counts_computed_on_the_gpu_are_read_back() {
    let x = f32s(&[LARGE], 1);
    let g = sum_positive(input(Graph::new(), "x", &x), "x", "c")
        .node(
            Node::new("If", "choose")
                .inputs(["c"])
                .outputs(["y"])
                .attr("then_branch", branch("Add", "t"))
                .attr("else_branch", branch("Sub", "e")),
        )
        .output("y");
    let ctx = ctx();
    let negated = HostTensor::from_vec(
        vec![LARGE],
        &x.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| -v - 0.5)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for (k, x) in [x.clone(), negated].into_iter().enumerate() {
        agrees_on(&ctx, g.clone(), vec![("x", x)]);
        assert_eq!(ctx.stats().read_backs, k as u64 + 1);
    }

    // A trip count computed on the GPU: a ReduceSum of three ones (and zeros) as i64.
    let small = f32s(&[2], 3);
    let mut ones = vec![0f32; LARGE];
    ones[..3].fill(1.0);
    let ones = HostTensor::from_vec(vec![LARGE], &ones).unwrap();
    let g = input(input(Graph::new(), "v0", &small), "big", &ones)
        .node(
            Node::new("ReduceSum", "s")
                .inputs(["big"])
                .outputs(["s"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Cast", "m")
                .inputs(["s"])
                .outputs(["m"])
                .attr("to", Attr::String("i64".into())),
        );
    let g = looped(g, "m", "", body(vec![]));
    let v = agrees_on(&ctx, g, vec![("v0", small.clone()), ("big", ones)]);
    let want: Vec<f32> = small
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v + 3.0)
        .collect();
    assert_eq!(v[0].to_vec::<f32>().unwrap(), want);
    assert_eq!(ctx.stats().read_backs, 3);
}

/// A while loop whose condition the body computes on the GPU (halve v while its sum exceeds
/// its length): the condition is read back once per iteration, and the loop ends where the
/// interpreter's does.
#[test]
fn a_condition_the_body_computes_on_the_gpu_is_read_back_each_iteration() {
    let v0 = HostTensor::from_vec(vec![LARGE], &vec![8f32; LARGE]).unwrap();
    let body = Graph::new()
        .input("i", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .input("v", DType::F32, &[None])
        .constant("half", scalar(0.5f32))
        .constant("limit", scalar(LARGE as f32))
        .node(
            Node::new("Mul", "halve")
                .inputs(["v", "half"])
                .outputs(["v_out"]),
        )
        .node(
            Node::new("ReduceSum", "sum")
                .inputs(["v_out"])
                .outputs(["s"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(
            Node::new("Greater", "more")
                .inputs(["s", "limit"])
                .outputs(["cond_out"]),
        )
        .output("cond_out")
        .output("v_out");
    let g = input(input(Graph::new(), "v0", &v0), "c", &scalar(true));
    let g = looped(g, "", "c", body);
    let ctx = ctx();
    let v = agrees_on(&ctx, g, vec![("v0", v0), ("c", scalar(true))]);
    // 8 -> 4 -> 2 -> 1, where the sum no longer exceeds the length.
    assert!(v[0].to_vec::<f32>().unwrap().iter().all(|&x| x == 1.0));
    assert_eq!(ctx.stats().read_backs, 3);
}

/// A Loop that writes its iteration number into a carried cache at that position (a decode
/// loop's KV cache, in one dimension): the dispatches and copies a run of `trips` iterations
/// encodes on a context of its own, after checking the cache against the interpreter. Where
/// `initial_out`, the initial cache is a graph output too (so not the loop's to write).
fn cache_loop_commands(trips: i64, cpu_kernels: bool, initial_out: bool) -> (u64, u64) {
    let len = 4096;
    let b = Graph::new()
        .input("i", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .input("cache", DType::F32, &[Some(len)])
        .constant("one", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
        .node(
            Node::new("Identity", "keep")
                .inputs(["cond"])
                .outputs(["cond_out"]),
        )
        .node(
            Node::new("Reshape", "at")
                .inputs(["i", "one"])
                .outputs(["at"]),
        )
        .node(
            Node::new("Cast", "value")
                .inputs(["at"])
                .outputs(["value"])
                .attr("to", Attr::String("f32".into())),
        )
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["cache", "at", "value"])
                .outputs(["cache_out"]),
        )
        .output("cond_out")
        .output("cache_out");
    let cache = HostTensor::from_vec(vec![len], &vec![-1f32; len]).unwrap();
    let g = input(Graph::new(), "cache0", &cache)
        .constant("m", scalar(trips))
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "cache0"])
                .outputs(["cache"])
                .attr("body", Attr::Graph(Box::new(b))),
        )
        .output("cache");
    let g = match initial_out {
        true => g.output("cache0"),
        false => g,
    };
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: Some(cpu_kernels),
        ..Default::default()
    })
    .unwrap();
    let before = ctx.stats();
    let out = agrees_on(&ctx, g, vec![("cache0", cache.clone())]);
    let after = ctx.stats();
    let got = out[0].to_vec::<f32>().unwrap();
    assert_eq!(got[..trips as usize + 1].last(), Some(&-1.0));
    assert_eq!(got[trips as usize - 1], (trips - 1) as f32);
    if initial_out {
        assert_eq!(out[1], cache, "the initial cache changed");
    }
    (
        after.dispatches - before.dispatches,
        after.copies - before.copies,
    )
}

/// A cache the Loop carries and scatters into is updated where it lies: one more iteration
/// costs two dispatches (the value's Cast and the scatter) and no copy of the cache (a buffer
/// copy with the CPU adapters' kernels, else a dispatch, when the cache ping-ponged between
/// two buffers).
#[test]
fn a_loop_updates_a_carried_cache_where_it_lies() {
    for cpu_kernels in [true, false] {
        let (d8, c8) = cache_loop_commands(8, cpu_kernels, false);
        let (d9, c9) = cache_loop_commands(9, cpu_kernels, false);
        assert_eq!((d9 - d8, c9 - c8), (2, 0), "cpu kernels {cpu_kernels}");
    }
}

/// The Loop keeps its cache in the buffer of the initial cache (an upload nothing reads after
/// the Loop): no copy of it, not even before the first iteration. Where the initial cache is
/// a graph output too, it is copied first and comes out as it was given.
#[test]
fn a_loop_keeps_its_cache_where_the_initial_one_lies() {
    for cpu_kernels in [true, false] {
        let (d, c) = cache_loop_commands(8, cpu_kernels, false);
        let (d_kept, c_kept) = cache_loop_commands(8, cpu_kernels, true);
        // The copy (a buffer copy with the CPU adapters' kernels, else a dispatch).
        let copy = if cpu_kernels { (0, 1) } else { (1, 0) };
        assert_eq!((d_kept - d, c_kept - c), copy, "cpu kernels {cpu_kernels}");
        // The Cast of every iteration number, once before the loop (it reads no state); per
        // iteration the scatter's index check and the scatter.
        assert_eq!((d, c), (1 + 2 * 8, 0), "cpu kernels {cpu_kernels}");
    }
}
