//! Fusion of element-wise chains in graphs: the fused run against the same graph run node by
//! node and against the CPU reference, bit for bit on CPU adapters (the chains use exactly
//! rounded ops only; see `assert_alike` for GPUs), on every dtype; the dispatches it saves; where chains are cut (values read twice, graph
//! outputs, the operand limit); Scan bodies; i64 emulated.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{Context, ContextOptions, DType, HostTensor, Session};

/// A context of its own (dispatch counts are per context), fusing or not, with the adapter's
/// 64-bit features or without them.
fn context(fuse: bool, native_64_bit: bool) -> Context {
    context_64(fuse, native_64_bit, true)
}

/// [`context`], with f64 native or not beside native 64-bit integers (`native_f64`).
fn context_64(fuse: bool, native_64_bit: bool, native_f64: bool) -> Context {
    Context::new_blocking(ContextOptions {
        fuse_elementwise: Some(fuse),
        native_64_bit: Some(native_64_bit),
        native_f64: Some(native_f64),
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap()
}

/// [`check_fused`] on contexts whose 64-bit integers are native (where the adapter has them)
/// and whose f64 is emulated, as on GPUs without double precision.
fn check_fused_without_f64(graph: &Graph, inputs: &[(String, HostTensor)]) -> (u64, u64) {
    let fusing = context_64(true, true, false);
    assert!(!fusing.features().contains(wgpu::Features::SHADER_F64));
    check_fused_on(&fusing, &context_64(false, true, false), graph, inputs)
}

/// A context with the CPU or the GPU kernel set, whatever the environment says.
fn kernel_set(cpu_kernels: bool, native_64_bit: bool) -> Context {
    Context::new_blocking(ContextOptions {
        cpu_kernels: Some(cpu_kernels),
        native_64_bit: Some(native_64_bit),
        ..Default::default()
    })
    .unwrap()
}

fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node::new(op, output)
        .inputs(inputs.iter().copied())
        .outputs([output])
}

/// `got` and `want` (NaNs made canonical) bit for bit; on a GPU, floats within 3 ulp: Vulkan
/// bounds a division at 2.5 ulp, and NVIDIA's driver rounds a quotient differently in
/// different programs (1 ulp apart on the H200), where CPU adapters (lavapipe) round every
/// op of these chains exactly.
fn assert_alike(got: &HostTensor, want: &HostTensor, what: &str) {
    let (a, b) = (nan_canonical(got), nan_canonical(want));
    if a == b {
        return;
    }
    let exact = ctx().adapter_info().device_type == wgpu::DeviceType::Cpu;
    let width = got.dtype.size();
    let ordered = |w: &[u8]| -> i64 {
        let mut bytes = [0u8; 8];
        bytes[..width].copy_from_slice(w);
        let bits = u64::from_le_bytes(bytes);
        let sign = 1u64 << (8 * width - 1);
        if bits & sign != 0 {
            -((bits & (sign - 1)) as i64)
        } else {
            bits as i64
        }
    };
    let float = matches!(
        got.dtype,
        DType::F16 | DType::BF16 | DType::F32 | DType::F64
    ) && got.dtype == want.dtype
        && a.len() == b.len();
    if exact || !float {
        assert_eq!(a, b, "{what}");
        return;
    }
    for (i, (x, y)) in a.chunks_exact(width).zip(b.chunks_exact(width)).enumerate() {
        let ulps = (ordered(x) - ordered(y)).abs();
        assert!(
            ulps <= 3,
            "{what}: element {i} {ulps} ulp apart ({x:?} against {y:?})"
        );
    }
}

/// Runs `graph` on `ctx`: its outputs and the dispatches recorded.
fn run(ctx: &Context, graph: &Graph, inputs: &[(String, HostTensor)]) -> (Vec<HostTensor>, u64) {
    let session = Session::new(ctx, graph.clone()).unwrap();
    let before = ctx.stats().dispatches;
    let out = session.run_blocking(inputs.to_vec()).unwrap();
    let dispatches = ctx.stats().dispatches - before;
    (out.into_iter().map(|(_, t)| t).collect(), dispatches)
}

/// Runs `graph` fused and node by node and on the reference: all three alike, bit for bit.
/// Returns the dispatches (fused, node by node).
fn check_fused(graph: &Graph, inputs: &[(String, HostTensor)], native_64_bit: bool) -> (u64, u64) {
    check_fused_on(
        &context(true, native_64_bit),
        &context(false, native_64_bit),
        graph,
        inputs,
    )
}

/// [`check_fused`] on the given fusing and not fusing contexts.
fn check_fused_on(
    fusing: &Context,
    plain: &Context,
    graph: &Graph,
    inputs: &[(String, HostTensor)],
) -> (u64, u64) {
    let (fused, fused_dispatches) = run(fusing, graph, inputs);
    let (plain, plain_dispatches) = run(plain, graph, inputs);
    let want = run_graph(graph, inputs, &Default::default()).unwrap();
    for (k, ((f, p), w)) in fused.iter().zip(&plain).zip(&want).enumerate() {
        assert_eq!((f.dtype, &f.shape), (w.dtype, &w.shape), "output {k}");
        assert_alike(f, p, &format!("output {k}: fused vs node by node"));
        assert_alike(f, w, &format!("output {k}: fused vs the reference"));
    }
    (fused_dispatches, plain_dispatches)
}

fn named(inputs: Vec<(&str, HostTensor)>) -> Vec<(String, HostTensor)> {
    inputs
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect()
}

fn declare(mut g: Graph, inputs: &[(String, HostTensor)]) -> Graph {
    for (name, t) in inputs {
        let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
        g = g.input(name.clone(), t.dtype, &shape);
    }
    g
}

// A chain of six ops with broadcasting (x [4, 6], y [6], z [4, 1]) into one output, and a
// comparison chain on that output into a second: 2 dispatches fused, 9 node by node. No
// product feeds a sum, so no driver may contract float steps into a fused multiply-add.
dtype_tests!(chains_fuse_on_every_dtype, |d| {
    let inputs = named(vec![
        ("x", random_tensor(1, d, &[4, 6])),
        ("y", random_tensor(2, d, &[6])),
        ("z", random_tensor(3, d, &[4, 1])),
        ("c", random_tensor(4, DType::Bool, &[4, 6])),
    ]);
    let g = declare(Graph::new(), &inputs);
    let g = if d == DType::Bool {
        g.node(node("And", &["x", "y"], "t1"))
            .node(node("Or", &["t1", "z"], "t2"))
            .node(node("Xor", &["t2", "x"], "t3"))
            .node(node("Not", &["t3"], "t4"))
            .node(node("Where", &["c", "t4", "z"], "t5"))
            .node(node("Equal", &["t5", "y"], "t6"))
    } else {
        g.node(node("Add", &["x", "y"], "t1"))
            .node(node("Max", &["t1", "z"], "t2"))
            .node(node("Sub", &["t2", "y"], "t3"))
            .node(node("Min", &["t3", "x"], "t4"))
            .node(node("Where", &["c", "t4", "z"], "t5"))
            .node(node("Mul", &["t5", "y"], "t6"))
    };
    let g = g
        .node(node("Equal", &["t6", "x"], "b1"))
        .node(node("Not", &["b1"], "b2"))
        .node(
            Node::new("Cast", "b3")
                .inputs(["b2"])
                .outputs(["b3"])
                // A Cast to its own dtype is a view: bool results go to u8.
                .attr(
                    "to",
                    Attr::String(if d == DType::Bool { DType::U8 } else { d }.name().into()),
                ),
        )
        .output("t6")
        .output("b3");
    assert_eq!(check_fused(&g, &inputs, true), (2, 9));
});

/// Intermediate results are narrowed to their dtype as a store would: (x + y) - y in f16 is
/// not x where the sum rounds, and (x + y) / 3 in i8 is not the wide quotient where the sum
/// wraps. Both match the reference, which stores every op's result.
#[test]
fn intermediate_results_are_narrowed_like_stores() {
    for d in [
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::U8,
        DType::U16,
    ] {
        let inputs = named(vec![
            ("x", random_tensor(5, d, &[64])),
            ("y", random_tensor(6, d, &[64])),
        ]);
        let three = match d {
            DType::F16 => HostTensor::from_vec(vec![], &[half::f16::from_f32(3.0)]),
            DType::BF16 => HostTensor::from_vec(vec![], &[half::bf16::from_f32(3.0)]),
            DType::I8 => HostTensor::from_vec(vec![], &[3i8]),
            DType::I16 => HostTensor::from_vec(vec![], &[3i16]),
            DType::U8 => HostTensor::from_vec(vec![], &[3u8]),
            _ => HostTensor::from_vec(vec![], &[3u16]),
        }
        .unwrap();
        let second = if d.is_integer() { "Div" } else { "Sub" };
        let rhs = if d.is_integer() { "three" } else { "y" };
        let g = declare(Graph::new(), &inputs)
            .constant("three", three)
            .node(node("Add", &["x", "y"], "s"))
            .node(node(second, &["s", rhs], "r"))
            .output("r");
        assert_eq!(check_fused(&g, &inputs, true), (1, 2), "{d}");
    }
    // The data makes narrowing matter: without it, most f16 results would be x again and
    // many i8 quotients would differ.
    let x = random_tensor(5, DType::I8, &[64]).to_vec::<i8>().unwrap();
    let y = random_tensor(6, DType::I8, &[64]).to_vec::<i8>().unwrap();
    let wraps = x
        .iter()
        .zip(&y)
        .filter(|(&a, &b)| i16::from(a) + i16::from(b) != i16::from(a.wrapping_add(b)))
        .count();
    assert!(wraps > 8, "{wraps}");
}

/// Each fused step computes as its op alone would, though WGSL lets a driver assume away
/// infinities and NaN and lavapipe folds across the steps of a kernel: `(x + y) - y` is not
/// `x` where the sum rounds, `x / (x - x)` is an infinity or NaN, `(x - x) * x` is NaN at the
/// infinities, and `(x + x) - x` overflows. In element-wise programs, in a MatMul's epilogue
/// and in a chain a reduction reads, on every float dtype.
#[test]
fn fused_steps_compute_as_their_ops_alone() {
    let xs = [
        1.5f64,
        -2.0,
        0.0,
        f64::INFINITY,
        -3.0e38,
        f64::NAN,
        3.0e38,
        1.0,
    ];
    let ys = [1.0e8f64, 3.0, 1.0e-30, 1.0, 2.0, 7.0, 1.0, 5.9604645e-8];
    for d in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        let typed = |v: &[f64], shape: &[usize]| {
            let t = HostTensor::from_vec(vec![v.len()], v).unwrap();
            let t = wgpu_ops::reference::cast_host(&t, d).unwrap();
            HostTensor::from_bytes(d, shape.to_vec(), t.data).unwrap()
        };
        let inputs = named(vec![("x", typed(&xs, &[2, 4])), ("y", typed(&ys, &[2, 4]))]);
        let g = declare(Graph::new(), &inputs)
            .node(node("Add", &["x", "y"], "s1"))
            .node(node("Sub", &["s1", "y"], "rounded"))
            .node(node("Sub", &["x", "x"], "z2"))
            .node(node("Div", &["x", "z2"], "divided"))
            .node(node("Sub", &["x", "x"], "z3"))
            .node(node("Mul", &["z3", "x"], "multiplied"))
            .node(node("Add", &["x", "x"], "s4"))
            .node(node("Sub", &["s4", "x"], "overflowed"))
            .output("rounded")
            .output("divided")
            .output("multiplied")
            .output("overflowed");
        let (fused, plain) = check_fused(&g, &inputs, true);
        assert!(
            fused < plain,
            "{d}: {fused} dispatches fused, {plain} node by node"
        );

        // A reduction reading its chain, and a MatMul's epilogue.
        let inputs = named(vec![
            ("x", typed(&xs, &[2, 4])),
            ("y", typed(&ys, &[2, 4])),
            ("c", typed(&xs[..4], &[2, 2])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .constant("axis", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
            .constant(
                "w",
                typed(&[1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.25], &[4, 2]),
            )
            .node(node("Add", &["x", "y"], "s1"))
            .node(node("Sub", &["s1", "y"], "d1"))
            .node(
                Node::new("ReduceMax", "m")
                    .inputs(["d1", "axis"])
                    .outputs(["m"]),
            )
            .node(node("MatMul", &["y", "w"], "p"))
            .node(node("Add", &["c", "p"], "q1"))
            .node(node("Sub", &["q1", "p"], "q2"))
            .output("m")
            .output("q2");
        let (fused, plain) = check_fused(&g, &inputs, true);
        assert!(
            fused < plain,
            "{d}: {fused} dispatches fused, {plain} node by node"
        );
    }
}

/// Readers of a value's shape alone (Shape, Size) do not count as readers of the value: a
/// chain whose middle value is also read by Shape, for a Reshape's shape, and by Size, for a
/// Range's limit, is one dispatch; a transposed operand read by Size as well as by a MatMul is
/// read in place by the MatMul.
#[test]
fn shape_readers_do_not_cut_chains() {
    let inputs = named(vec![("x", random_tensor(40, DType::F32, &[4, 6]))]);
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let g = declare(Graph::new(), &inputs)
        .constant("zero", scalar(0))
        .constant("one", scalar(1))
        .node(node("Abs", &["x"], "a"))
        .node(node("Neg", &["a"], "b"))
        .node(node("Shape", &["a"], "dims"))
        .node(node("Size", &["a"], "n"))
        .node(node("Reshape", &["b", "dims"], "r"))
        .node(node("Range", &["zero", "n", "one"], "steps"))
        .output("r")
        .output("steps");
    assert_eq!(check_fused(&g, &inputs, true), (1, 2));
    // A transposed operand read by a MatMul and by Size: the MatMul reads it in place.
    let inputs = named(vec![
        ("x", random_tensor(41, DType::F32, &[4, 6])),
        ("w", random_tensor(42, DType::F32, &[5, 6])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .constant("zero", scalar(0))
        .constant("one", scalar(1))
        .node(node("Transpose", &["w"], "t").attr("perm", Attr::Ints(vec![1, 0])))
        .node(node("MatMul", &["x", "t"], "p"))
        .node(node("Size", &["t"], "n"))
        .node(node("Range", &["zero", "n", "one"], "steps"))
        .output("p")
        .output("steps");
    assert_eq!(check_fused(&g, &inputs, true), (1, 2));
}

/// A chain reading more tensors than one kernel binds is cut where the operand limit is
/// reached: 12 inputs summed in a chain take 2 dispatches (11 node by node).
#[test]
fn long_chains_are_cut_at_the_operand_limit() {
    let inputs: Vec<(String, HostTensor)> = (0..12)
        .map(|k| (format!("i{k}"), random_tensor(10 + k, DType::I32, &[3, 5])))
        .collect();
    let mut g = declare(Graph::new(), &inputs).node(node("Add", &["i0", "i1"], "s1"));
    for k in 2..12 {
        g = g.node(node(
            "Add",
            &[&format!("s{}", k - 1), &format!("i{k}")],
            &format!("s{k}"),
        ));
    }
    let g = g.output("s11");
    assert_eq!(check_fused(&g, &inputs, true), (2, 11));
}

/// Programs are compiled for the rank of the walk they run on (`WALK_RANK`): operands
/// broadcast so that the walk keeps one to six axes, with outputs of whole 16-byte quads
/// (`main_quads`) and not (`main`), on both kernel sets, f32 and i32.
#[test]
fn programs_run_on_walks_of_every_rank() {
    let cases: [(&[usize], &[usize]); 9] = [
        (&[8, 6], &[8, 6]),
        (&[3, 5], &[3, 5]),
        (&[4, 6], &[6]),
        (&[3, 5], &[3, 1]),
        (&[2, 1, 4], &[1, 3, 1]),
        (&[2, 1, 3], &[1, 5, 1]),
        (&[3, 1, 3, 1], &[1, 5, 1, 3]),
        (&[2, 1, 2, 1, 3], &[1, 3, 1, 2, 1]),
        // Six axes: the divisors past the first four are read from the second row.
        (&[2, 1, 2, 1, 5, 1], &[1, 3, 1, 3, 1, 4]),
    ];
    for cpu_kernels in [false, true] {
        let with = |fuse| {
            Context::new_blocking(ContextOptions {
                fuse_elementwise: Some(fuse),
                cpu_kernels: Some(cpu_kernels),
                ..Default::default()
            })
            .unwrap()
        };
        let (fusing, plain) = (with(true), with(false));
        for (k, (xs, ys)) in cases.iter().enumerate() {
            for d in [DType::F32, DType::I32] {
                let inputs = named(vec![
                    ("x", random_tensor(40 + k as u64, d, xs)),
                    ("y", random_tensor(60 + k as u64, d, ys)),
                ]);
                let g = declare(Graph::new(), &inputs)
                    .node(node("Add", &["x", "y"], "t1"))
                    .node(node("Max", &["t1", "x"], "t2"))
                    .node(node("Sub", &["t2", "y"], "t3"))
                    .output("t3");
                let (fused, _) = check_fused_on(&fusing, &plain, &g, &inputs);
                assert_eq!(fused, 1, "{xs:?} {ys:?} {d}: one program");
            }
        }
    }
}

/// `Recorder::reduce_fused_to`: the reduction computes the program's values as it reads them
/// (one dispatch), the bits of the program recorded first and then reduced, on walks of one,
/// two and four axes; inputs that do not fit the program are errors naming the rule.
#[test]
fn reductions_of_programs_match_the_program_then_the_reduction() {
    use wgpu_ops::ops::elementwise::{Arg, Program};
    use wgpu_ops::{Out, Tensor};
    let ctx = ctx();
    let mut p = Program::new(vec![DType::F32, DType::F32], false);
    let product = p
        .push("Mul", vec![Arg::Operand(0), Arg::Operand(1)], DType::F32)
        .unwrap();
    p.push("Abs", vec![product], DType::F32).unwrap();
    for (xs, ys, axes) in [
        (vec![64, 48], vec![64, 48], vec![1i64]),
        (vec![64, 48], vec![48], vec![1]),
        (vec![4, 1, 6, 1], vec![1, 5, 1, 7], vec![1, 3]),
    ] {
        let x = Tensor::from_host(ctx, &random_tensor(80, DType::F32, &xs)).unwrap();
        let y = Tensor::from_host(ctx, &random_tensor(81, DType::F32, &ys)).unwrap();
        let before = ctx.stats().dispatches;
        let fused = ctx
            .run(|rec| {
                rec.reduce_fused_to(
                    "ReduceSum",
                    &p,
                    &[&x, &y],
                    Some(&axes),
                    false,
                    false,
                    Out::NEW,
                )
            })
            .unwrap();
        let dispatches = ctx.stats().dispatches - before;
        let apart = ctx
            .run(|rec| {
                let values = rec.program_to(&p, &[&x, &y], Out::NEW)?;
                rec.reduce_to("ReduceSum", &values, Some(&axes), false, false, Out::NEW)
            })
            .unwrap();
        let (f, w) = (
            fused.to_host_blocking().unwrap(),
            apart.to_host_blocking().unwrap(),
        );
        assert_eq!((&f.shape, &f.data), (&w.shape, &w.data), "{xs:?} {ys:?}");
        assert_eq!(dispatches, 1, "{xs:?} {ys:?}");
    }
    let x = Tensor::from_host(ctx, &random_tensor(82, DType::F32, &[3, 4])).unwrap();
    let i = Tensor::from_host(ctx, &random_tensor(83, DType::I32, &[3, 4])).unwrap();
    let z = Tensor::from_host(ctx, &random_tensor(84, DType::F32, &[5])).unwrap();
    for (inputs, rule) in [
        (
            vec![&x],
            "the program reads 2 operands but 1 inputs are given",
        ),
        (vec![&x, &i], "input 1 is i32 but the program reads f32"),
        (vec![&x, &z], "broadcast"),
    ] {
        let err = ctx
            .run(|rec| rec.reduce_fused_to("ReduceSum", &p, &inputs, None, false, false, Out::NEW))
            .unwrap_err()
            .to_string();
        assert!(err.contains(rule), "{err}");
    }
}

/// A small value read by two nodes that can compute it is computed by each and never stored;
/// one read by three nodes, or too large to compute twice, is recorded (its readers still fuse
/// what follows them). Graph outputs are recorded; a node reading one pending value twice
/// reads it once.
#[test]
fn shared_values_are_computed_by_each_reader_within_limits() {
    let inputs = named(vec![
        ("x", random_tensor(20, DType::U32, &[7])),
        ("y", random_tensor(21, DType::U32, &[7])),
        ("z", random_tensor(22, DType::U32, &[7])),
        ("w", random_tensor(23, DType::U32, &[7])),
    ]);
    let g = declare(Graph::new(), &inputs)
        // t is read by two nodes, each computing it.
        .node(node("Add", &["x", "y"], "t"))
        .node(node("Mul", &["t", "x"], "a"))
        .node(node("Sub", &["t", "y"], "b"))
        // a and b each have one reader: fused into c; c is an output and read by d.
        .node(node("Max", &["a", "b"], "c"))
        // e reads the pending value d twice.
        .node(node("Abs", &["c"], "d"))
        .node(node("Mul", &["d", "d"], "e"))
        .output("c")
        .output("e");
    // Fused: c (Add twice, Mul, Sub, Max), then e (Abs, Mul): 2 dispatches.
    assert_eq!(check_fused(&g, &inputs, true), (2, 6));

    // Three readers whose branches meet in one node (a diamond): one program computes t once.
    let g = declare(Graph::new(), &inputs)
        .node(node("Add", &["x", "y"], "t"))
        .node(node("Mul", &["t", "x"], "a"))
        .node(node("Sub", &["t", "y"], "b"))
        .node(node("Add", &["t", "z"], "c"))
        .node(node("Max", &["a", "b"], "m"))
        .node(node("Min", &["m", "c"], "out"))
        .output("out");
    assert_eq!(check_fused(&g, &inputs, true), (1, 6));
    // Three readers, one of them an output: t is recorded, then the rest is one program.
    let g = g.output("c");
    assert_eq!(check_fused(&g, &inputs, true), (3, 6));

    // Two readers of a chain over four inputs (more than computing it twice saves), one of
    // them an output: recorded.
    let g = declare(Graph::new(), &inputs)
        .node(node("Add", &["x", "y"], "t1"))
        .node(node("Add", &["t1", "z"], "t2"))
        .node(node("Mul", &["t2", "w"], "t"))
        .node(node("Mul", &["t", "x"], "a"))
        .node(node("Sub", &["t", "y"], "b"))
        .node(node("Max", &["a", "b"], "out"))
        .output("out")
        .output("a");
    assert_eq!(check_fused(&g, &inputs, true), (3, 6));
}

/// Diamonds: a value read by several element-wise nodes whose branches meet in one node is
/// computed once, by that node's program, even a MatMul's product with its epilogue (GELU's
/// `x * (1 + erf(x / sqrt 2)) * 0.5` after `MatMul -> Add`, as torch exports it; SiLU's
/// `x * sigmoid(x)`; the tanh GELU, which reads x three times): one dispatch each, on every
/// dtype MatMul computes, against the ops one by one and the reference. A diamond whose
/// branch is also an output is not one: the product is recorded once and read twice.
#[test]
fn diamonds_compute_their_top_once() {
    let probe = context(true, true);
    let mut dtypes = vec![DType::F32, DType::I32, DType::U32, DType::F16, DType::BF16];
    if probe.features().contains(wgpu::Features::SHADER_F64) {
        dtypes.push(DType::F64);
    }
    if probe.features().contains(wgpu::Features::SHADER_INT64) {
        dtypes.extend([DType::I64, DType::U64]);
    }
    for d in dtypes {
        // Exact on every dtype (small integers): |x| and x - bias meet in Max.
        let inputs = named(vec![
            ("a", small_ints(1, d, &[2, 3, 5])),
            ("b", small_ints(2, d, &[5, 4])),
            ("bias", small_ints(3, d, &[4])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "bias"], "x"))
            .node(node("Mul", &["x", "x"], "sq"))
            .node(node("Sub", &["x", "bias"], "s"))
            .node(node("Max", &["sq", "s"], "y"))
            .output("y");
        assert_eq!(check_fused(&g, &inputs, true), (1, 5), "{d} diamond");
        // The same with a branch that is an output too: the product and its Add once, then
        // the square (an output), then the rest.
        let g = g.output("sq");
        assert_eq!(check_fused(&g, &inputs, true), (3, 5), "{d} branch out");
        // Branches reading 6 tensors besides the product, one more than an epilogue takes:
        // the product alone, once, then one program of the rest (not the product computed
        // again for each branch).
        let mut inputs = inputs;
        for k in 1..=5 {
            inputs.push((format!("l{k}"), small_ints(10 + k as u64, d, &[4])));
        }
        let g = declare(Graph::new(), &inputs)
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "bias"], "x"))
            .node(node("Mul", &["x", "l1"], "m1"))
            .node(node("Add", &["m1", "l2"], "m2"))
            .node(node("Mul", &["m2", "l5"], "m3"))
            .node(node("Sub", &["x", "l3"], "s1"))
            .node(node("Add", &["s1", "l4"], "s2"))
            .node(node("Max", &["m3", "s2"], "y"))
            .output("y");
        assert_eq!(check_fused(&g, &inputs, true), (2, 8), "{d} wide branches");
        // The product itself one branch (the Max reads it as it is), the other reading 6
        // tensors: the product once, then one program.
        if d == DType::F32 {
            let g = declare(Graph::new(), &inputs)
                .node(node("MatMul", &["a", "b"], "p"))
                .node(node("Mul", &["p", "l1"], "m1"))
                .node(node("Add", &["m1", "l2"], "m2"))
                .node(node("Mul", &["m2", "l3"], "m3"))
                .node(node("Sub", &["m3", "l4"], "m4"))
                .node(node("Add", &["m4", "l5"], "m5"))
                .node(node("Mul", &["m5", "bias"], "m6"))
                .node(node("Max", &["p", "m6"], "y"))
                .output("y");
            assert_eq!(
                check_fused(&g, &inputs, true),
                (2, 8),
                "{d} product as a branch"
            );
        }
    }

    let scalar = |v: f64, d: DType| {
        let t = HostTensor::from_vec(vec![], &[v]).unwrap();
        wgpu_ops::reference::cast_host(&t, d).unwrap()
    };
    for (d, rtol) in [
        (DType::F32, 1e-5),
        (DType::F16, 4e-3),
        (DType::BF16, 2e-2),
        (DType::F64, 1e-12),
    ] {
        if d == DType::F64 && !probe.features().contains(wgpu::Features::SHADER_F64) {
            continue;
        }
        let inputs = named(vec![
            ("a", random_tensor(4, d, &[3, 8])),
            ("b", random_tensor(5, d, &[8, 6])),
            ("bias", random_tensor(6, d, &[6])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .constant("sqrt2", scalar(std::f64::consts::SQRT_2, d))
            .constant("one", scalar(1.0, d))
            .constant("half", scalar(0.5, d))
            .constant("three", scalar(3.0, d))
            .constant("c", scalar(0.044715, d))
            .constant("k", scalar((2.0 / std::f64::consts::PI).sqrt(), d))
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "bias"], "x"));
        let erf = g
            .clone()
            .node(node("Div", &["x", "sqrt2"], "e1"))
            .node(node("Erf", &["e1"], "e2"))
            .node(node("Add", &["e2", "one"], "e3"))
            .node(node("Mul", &["x", "e3"], "e4"))
            .node(node("Mul", &["e4", "half"], "y"))
            .output("y");
        let silu = declare(Graph::new(), &inputs)
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Sigmoid", &["p"], "s"))
            .node(node("Mul", &["p", "s"], "y"))
            .output("y");
        let tanh = g
            .node(node("Mul", &["x", "half"], "h"))
            .node(node("Pow", &["x", "three"], "t1"))
            .node(node("Mul", &["t1", "c"], "t2"))
            .node(node("Add", &["x", "t2"], "t3"))
            .node(node("Mul", &["t3", "k"], "t4"))
            .node(node("Tanh", &["t4"], "t5"))
            .node(node("Add", &["t5", "one"], "t6"))
            .node(node("Mul", &["h", "t6"], "y"))
            .output("y");
        for (name, g, unfused) in [("erf", &erf, 7), ("silu", &silu, 3), ("tanh", &tanh, 10)] {
            let (fused, fused_dispatches) = run(&context(true, true), g, &inputs);
            let (plain, plain_dispatches) = run(&context(false, true), g, &inputs);
            let case = format!("{d} {name}");
            assert_eq!((fused_dispatches, plain_dispatches), (1, unfused), "{case}");
            let want = run_graph(g, &inputs, &Default::default()).unwrap();
            assert_close(&fused[0], &want[0], rtol, rtol, &format!("{case} fused"));
            assert_close(
                &fused[0],
                &plain[0],
                rtol,
                rtol,
                &format!("{case} vs plain"),
            );
        }
    }

    // A diamond's branches repeat its top's steps, which the merged program computes once: a
    // top of 14 steps read by two branches of one step each is one program of 17 steps (31
    // repeated, over the limit of 24).
    let inputs = named(vec![
        ("x", random_tensor(30, DType::U32, &[9])),
        ("y", random_tensor(31, DType::U32, &[9])),
    ]);
    let mut g = declare(Graph::new(), &inputs);
    let mut last = "x".to_string();
    for k in 0..14 {
        let out = format!("t{k}");
        let op = ["Add", "Mul", "BitwiseXor"][k % 3];
        g = g.node(node(op, &[&last, "y"], &out));
        last = out;
    }
    let g = g
        .node(node("Sub", &[&last, "x"], "l"))
        .node(node("BitwiseNot", &[&last], "r"))
        .node(node("BitwiseAnd", &["l", "r"], "out"))
        .output("out");
    assert_eq!(check_fused(&g, &inputs, true), (1, 17));
}

/// A Cast node from `input` to `output` of dtype `to`.
fn cast(input: &str, to: DType, output: &str) -> Node {
    Node::new("Cast", output)
        .inputs([input])
        .outputs([output])
        .attr("to", Attr::String(to.name().into()))
}

/// i64 chains fuse on adapters without SHADER_INT64 too (the emulation on u32 pairs), casts
/// to and from i64 included.
#[test]
fn i64_chains_fuse_with_the_emulation() {
    let inputs = named(vec![
        ("x", random_tensor(30, DType::I64, &[5, 4])),
        ("y", random_tensor(31, DType::I64, &[4])),
        ("n", random_tensor(32, DType::I32, &[5, 1])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .node(cast("n", DType::I64, "n64"))
        .node(node("Mul", &["x", "y"], "p"))
        .node(node("Add", &["p", "n64"], "s"))
        .node(node("Max", &["s", "x"], "m"))
        .node(node("Less", &["m", "y"], "l"))
        .node(node("Where", &["l", "m", "y"], "w"))
        .node(cast("w", DType::I32, "out"))
        .output("out");
    // m has two readers, Less and Where, which both compute it: one dispatch.
    for native in [true, false] {
        assert_eq!(
            check_fused(&g, &inputs, native),
            (1, 7),
            "native i64: {native}"
        );
    }
}

/// A chain of f64 and i64 values fuses on every mix of the 64-bit features: both native,
/// both emulated, and native i64 with f64 emulated (GPUs without double precision), where
/// the f64 steps move the whole program onto the emulation, i64 included.
#[test]
fn f64_and_i64_chains_fuse_where_only_f64_is_emulated() {
    let inputs = named(vec![
        ("x", small_ints(33, DType::I64, &[5, 4])),
        ("y", small_ints(34, DType::F64, &[4])),
        ("n", small_ints(35, DType::I32, &[5, 1])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .node(cast("x", DType::F64, "xf"))
        .node(cast("n", DType::F64, "nf"))
        .node(node("Mul", &["xf", "y"], "p"))
        .node(node("Add", &["p", "nf"], "q"))
        .node(node("Max", &["q", "y"], "m"))
        .node(cast("m", DType::I64, "mi"))
        .node(node("Sub", &["mi", "x"], "out"))
        .output("out");
    for native in [true, false] {
        assert_eq!(
            check_fused(&g, &inputs, native),
            (1, 7),
            "native 64-bit: {native}"
        );
    }
    assert_eq!(check_fused_without_f64(&g, &inputs), (1, 7), "f64 emulated");
}

/// The spec's RNN cell as a Scan: the body's second MatMul and its Add -> Add -> Add -> Tanh
/// are one dispatch per iteration instead of five, and the states match the body run node by
/// node bit for bit.
#[test]
fn scan_bodies_fuse_their_chains() {
    let (batch, hidden, steps) = (2, 8, 5);
    let body = Graph::new()
        .input("H", DType::F32, &[Some(batch), Some(hidden)])
        .input("X", DType::F32, &[Some(batch), Some(hidden)])
        .constant("W", random_floats(40, &[hidden, hidden]))
        .constant("R", random_floats(41, &[hidden, hidden]))
        .constant("Wb", random_floats(42, &[hidden]))
        .constant("Rb", random_floats(43, &[hidden]))
        .node(node("MatMul", &["X", "W"], "t1"))
        .node(node("MatMul", &["H", "R"], "t2"))
        .node(node("Add", &["t1", "t2"], "t3"))
        .node(node("Add", &["t3", "Wb"], "t4"))
        .node(node("Add", &["t4", "Rb"], "t5"))
        .node(node("Tanh", &["t5"], "Ht"))
        .output("Ht")
        .output("Ht");
    let g = Graph::new()
        .input("H0", DType::F32, &[Some(batch), Some(hidden)])
        .input("Xs", DType::F32, &[Some(steps), Some(batch), Some(hidden)])
        .node(
            Node::new("Scan", "rnn")
                .inputs(["H0", "Xs"])
                .outputs(["Hn", "Y"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("Hn")
        .output("Y");
    let inputs = named(vec![
        ("H0", random_floats(44, &[batch, hidden])),
        ("Xs", random_floats(45, &[steps, batch, hidden])),
    ]);
    let (fused, fused_dispatches) = run(&context(true, true), &g, &inputs);
    let (plain, plain_dispatches) = run(&context(false, true), &g, &inputs);
    for (f, p) in fused.iter().zip(&plain) {
        assert_eq!(f.data, p.data);
    }
    // Tanh is within onnxruntime's float tolerance of the reference.
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    for (f, w) in fused.iter().zip(&want) {
        for (a, b) in f
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(w.to_vec::<f32>().unwrap())
        {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
    // The first MatMul reads no state: it runs once on all the steps before the loop (its
    // rows are read as a scan input), and the second takes Add -> Add -> Add -> Tanh as its
    // epilogue: per iteration 1 dispatch instead of 6, plus one before the loop.
    assert_eq!(
        plain_dispatches - fused_dispatches,
        5 * steps as u64 - 1,
        "node by node {plain_dispatches} dispatches, fused {fused_dispatches}"
    );
}

/// Values in [-1, 1): random floats that stay finite through the RNN cell.
fn random_floats(seed: u64, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let raw = bytes(seed, n);
    let v: Vec<f32> = raw.iter().map(|&b| f32::from(b) / 128.0 - 1.0).collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

/// Small integers (exact in every dtype's sums) of `dtype`, from -3 to 3 (0 to 6 unsigned).
fn small_ints(seed: u64, dtype: DType, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let unsigned = matches!(dtype, DType::U32 | DType::U64);
    let v: Vec<i64> = bytes(seed, n)
        .iter()
        .map(|&b| i64::from(b % 7) - if unsigned { 0 } else { 3 })
        .collect();
    let s = shape.to_vec();
    match dtype {
        DType::F32 => HostTensor::from_vec(s, &v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        DType::F64 => HostTensor::from_vec(s, &v.iter().map(|&x| x as f64).collect::<Vec<_>>()),
        DType::I32 => HostTensor::from_vec(s, &v.iter().map(|&x| x as i32).collect::<Vec<_>>()),
        DType::U32 => HostTensor::from_vec(s, &v.iter().map(|&x| x as u32).collect::<Vec<_>>()),
        DType::I64 => HostTensor::from_vec(s, &v),
        DType::U64 => HostTensor::from_vec(s, &v.iter().map(|&x| x as u64).collect::<Vec<_>>()),
        DType::F16 => HostTensor::from_vec(
            s,
            &v.iter()
                .map(|&x| half::f16::from_f32(x as f32))
                .collect::<Vec<_>>(),
        ),
        DType::BF16 => HostTensor::from_vec(
            s,
            &v.iter()
                .map(|&x| half::bf16::from_f32(x as f32))
                .collect::<Vec<_>>(),
        ),
        d => panic!("no small integers of {d} here"),
    }
    .unwrap()
}

// MatMul with an element-wise epilogue (the sum, then Add bias [n], Max column [m, 1], Sub a
// tensor of the product's shape, and Tanh on floats) against the product recorded and the
// program run after it: bit for bit, one dispatch instead of two, on each MatMul kernel
// (tiles and the few-rows kernel with the GPU kernel set, blocks with the CPU one) and each
// dtype the kernel computes (f16 and bf16 on their packed words, the sum rounded before the
// epilogue reads it, as the product recorded first is).
#[test]
fn matmul_epilogues_match_product_then_program() {
    use wgpu_ops::ops::elementwise::{Arg, Program};
    use wgpu_ops::{Out, Tensor};
    // The last two: i64 and u64 emulated on 32-bit words (no SHADER_INT64, no blocks kernel).
    for (cpu_kernels, native) in [(false, true), (true, true), (false, false), (true, false)] {
        let ctx = kernel_set(cpu_kernels, native);
        let mut dtypes = vec![DType::F32, DType::I32, DType::U32, DType::F16, DType::BF16];
        if ctx.features().contains(wgpu::Features::SHADER_F64) {
            dtypes.push(DType::F64);
        }
        if ctx.features().contains(wgpu::Features::SHADER_INT64) {
            dtypes.extend([DType::I64, DType::U64]);
        }
        if !native {
            dtypes = vec![DType::I64, DType::U64];
        }
        for &d in &dtypes {
            for (seed, batch, m, k, n) in [
                (1u64, vec![], 1, 5, 7),
                (2, vec![2], 3, 4, 70),
                (3, vec![], 20, 9, 33),
                (4, vec![2, 1], 40, 3, 130),
            ] {
                let shape = |tail: &[usize]| -> Vec<usize> {
                    batch.iter().copied().chain(tail.iter().copied()).collect()
                };
                let up = |seed: u64, s: &[usize]| Tensor::from_host(&ctx, &small_ints(seed, d, s));
                let a = up(seed, &shape(&[m, k])).unwrap();
                let b = up(seed + 10, &shape(&[k, n])).unwrap();
                let bias = up(seed + 20, &[n]).unwrap();
                let column = up(seed + 30, &[m, 1]).unwrap();
                let full = up(seed + 40, &shape(&[m, n])).unwrap();
                let mut p = Program::new(vec![d; 4], !native);
                let s0 = p.push("Add", vec![Arg::Operand(0), Arg::Operand(1)], d);
                let s1 = p.push("Max", vec![s0.unwrap(), Arg::Operand(2)], d);
                let s2 = p
                    .push("Sub", vec![s1.unwrap(), Arg::Operand(3)], d)
                    .unwrap();
                if matches!(d, DType::F32 | DType::F16 | DType::BF16) {
                    p.push("Tanh", vec![s2], d).unwrap();
                }
                let leaves = [&bias, &column, &full];
                let before = ctx.stats().dispatches;
                let fused = ctx
                    .run(|rec| rec.matmul_program_to(&a, &b, &p, &leaves, Out::NEW))
                    .unwrap();
                let fused_dispatches = ctx.stats().dispatches - before;
                let apart = ctx
                    .run(|rec| {
                        let product = rec.matmul(&a, &b)?;
                        rec.program_to(&p, &[&product, &bias, &column, &full], Out::NEW)
                    })
                    .unwrap();
                let (f, w) = (
                    fused.to_host_blocking().unwrap(),
                    apart.to_host_blocking().unwrap(),
                );
                let case =
                    format!("{d} cpu kernels {cpu_kernels} native {native} {batch:?} {m}x{k}x{n}");
                assert_eq!(f.shape, shape(&[m, n]), "{case}");
                assert_eq!(f.data, w.data, "{case}");
                assert_eq!(fused_dispatches, 1, "{case}");
            }
        }
    }
}

// MatMul epilogues and prologues on walks of one to six axes (each compiled for its walk's
// rank): A computed where it is read as x * y, and the sum's epilogue `(sum + leaf) * leaf`,
// with x, y and the leaf broadcast along alternating axes so that no axes merge. One
// dispatch, bit for bit the program, the product and the epilogue recorded one by one, on
// both kernel sets, f32 and i32.
#[test]
fn matmul_chains_run_on_walks_of_every_rank() {
    use wgpu_ops::ops::elementwise::{Arg, Program, Values};
    use wgpu_ops::{Out, Tensor};
    // (A = x * y broadcast to it, the leaf of the [.., m, 3] output), k = 6: each element
    // of A is read by the 3 columns, so it is computed where it is read.
    #[allow(clippy::type_complexity)]
    let cases: [(&[usize], &[usize], &[usize], &[usize]); 6] = [
        (&[1, 6], &[1, 6], &[1, 6], &[1, 3]),
        (&[5, 6], &[5, 6], &[6], &[5, 1]),
        (&[2, 5, 6], &[2, 5, 6], &[2, 1, 6], &[2, 1, 3]),
        (&[2, 3, 5, 6], &[2, 1, 5, 6], &[1, 3, 1, 6], &[2, 1, 5, 1]),
        (
            &[2, 3, 2, 5, 6],
            &[2, 1, 2, 5, 6],
            &[1, 3, 1, 5, 1],
            &[2, 1, 2, 1, 3],
        ),
        (
            &[2, 3, 2, 2, 5, 6],
            &[2, 1, 2, 1, 5, 6],
            &[1, 3, 1, 2, 1, 6],
            &[2, 1, 2, 1, 5, 1],
        ),
    ];
    for cpu_kernels in [false, true] {
        let ctx = kernel_set(cpu_kernels, true);
        for d in [DType::F32, DType::I32] {
            let mut mul = Program::new(vec![d, d], false);
            mul.push("Mul", vec![Arg::Operand(0), Arg::Operand(1)], d)
                .unwrap();
            let mut epi = Program::new(vec![d, d], false);
            let s = epi
                .push("Add", vec![Arg::Operand(0), Arg::Operand(1)], d)
                .unwrap();
            epi.push("Mul", vec![s, Arg::Operand(1)], d).unwrap();
            for (c, &(a_shape, xs, ys, ls)) in cases.iter().enumerate() {
                let up = |seed: u64, s: &[usize]| {
                    Tensor::from_host(&ctx, &small_ints(90 + 4 * c as u64 + seed, d, s)).unwrap()
                };
                let (x, y, leaf) = (up(0, xs), up(1, ys), up(2, ls));
                let b = up(3, &[6, 3]);
                let before = ctx.stats().dispatches;
                let fused = ctx
                    .run(|rec| {
                        let a = Values::Program {
                            program: &mul,
                            leaves: &[&x, &y],
                            shape: a_shape,
                        };
                        rec.matmul_values_to(
                            [a, Values::Tensor(&b)],
                            [false; 2],
                            Some((&epi, &[&leaf])),
                            Out::NEW,
                        )
                    })
                    .unwrap();
                let dispatches = ctx.stats().dispatches - before;
                let apart = ctx
                    .run(|rec| {
                        let a = rec.program_to(&mul, &[&x, &y], Out::NEW)?;
                        let product = rec.matmul(&a, &b)?;
                        rec.program_to(&epi, &[&product, &leaf], Out::NEW)
                    })
                    .unwrap();
                let case = format!("{d} cpu kernels {cpu_kernels} A {a_shape:?}");
                let (f, w) = (
                    fused.to_host_blocking().unwrap(),
                    apart.to_host_blocking().unwrap(),
                );
                assert_eq!(f.shape, w.shape, "{case}");
                assert_eq!(f.data, w.data, "{case}");
                assert_eq!(dispatches, 1, "{case}");
            }
        }
    }
}

// MatMul heads in graphs, on each dtype the MatMul kernel computes: a MatMul whose product
// only an element-wise chain reads takes the chain as its epilogue; where it cannot (the
// chain broadcasts beyond the product, ends in another dtype, or the product is read twice)
// everything still matches node by node and the reference bit for bit.
#[test]
fn matmul_heads_take_element_wise_chains() {
    let probe = context(true, true);
    let mut dtypes = vec![DType::F32, DType::I32, DType::U32, DType::F16, DType::BF16];
    if probe.features().contains(wgpu::Features::SHADER_F64) {
        dtypes.push(DType::F64);
    }
    if probe.features().contains(wgpu::Features::SHADER_INT64) {
        dtypes.extend([DType::I64, DType::U64]);
    }
    // And i64 and u64 emulated on 32-bit words (no SHADER_INT64), f32 there too (as in
    // browsers), and f64 emulated beside native 64-bit integers (no SHADER_F64).
    let emulated = [
        (DType::I64, false, true),
        (DType::U64, false, true),
        (DType::F32, false, true),
        (DType::F64, true, false),
    ];
    for (d, native, native_f64) in dtypes.into_iter().map(|d| (d, true, true)).chain(emulated) {
        let check_fused = |g: &Graph, inputs: &[(String, HostTensor)], native| {
            let fusing = context_64(true, native, native_f64);
            check_fused_on(&fusing, &context_64(false, native, native_f64), g, inputs)
        };
        let inputs = named(vec![
            ("a", small_ints(1, d, &[2, 3, 5])),
            ("b", small_ints(2, d, &[5, 4])),
            ("b2", small_ints(6, d, &[5, 4])),
            ("bias", small_ints(3, d, &[4])),
            ("col", small_ints(4, d, &[3, 1])),
            ("wide", small_ints(5, d, &[6, 2, 3, 4])),
        ]);
        let g = declare(Graph::new(), &inputs);
        // One chain as the epilogue: 1 dispatch instead of 4.
        let chain = g
            .clone()
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "bias"], "t1"))
            .node(node("Max", &["col", "t1"], "t2"))
            .node(node("Sub", &["t2", "bias"], "y"))
            .output("y");
        assert_eq!(check_fused(&chain, &inputs, native), (1, 4), "{d} chain");
        // Two products into one Add: one is recorded, the other takes the epilogue; two
        // MatMuls of the same operands are one product, computed once.
        for (second, fused) in [("b2", 2), ("b", 1)] {
            let two = g
                .clone()
                .node(node("MatMul", &["a", "b"], "p"))
                .node(node("MatMul", &["a", second], "q"))
                .node(node("Add", &["p", "q"], "t1"))
                .node(node("Mul", &["t1", "col"], "y"))
                .output("y");
            assert_eq!(
                check_fused(&two, &inputs, native),
                (fused, 4),
                "{d} products of a, b and a, {second}"
            );
        }
        // Broadcast beyond the product ([2, 3, 4] against [6, 2, 3, 4]): product, then the
        // chain.
        let wider = g
            .clone()
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "wide"], "t1"))
            .node(node("Abs", &["t1"], "y"))
            .output("y");
        assert_eq!(check_fused(&wider, &inputs, native), (2, 3), "{d} wider");
        // Ends in another dtype: product, then the chain.
        let other = if d == DType::I32 { "u32" } else { "i32" };
        let cast = g
            .clone()
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "bias"], "t1"))
            .node(node("Cast", &["t1"], "y").attr("to", Attr::String(other.into())))
            .output("y");
        assert_eq!(check_fused(&cast, &inputs, native), (2, 3), "{d} cast");
        // The product read twice is recorded; the chains after it fuse as usual.
        let shared = g
            .clone()
            .node(node("MatMul", &["a", "b"], "p"))
            .node(node("Add", &["p", "bias"], "y"))
            .node(node("Sub", &["p", "col"], "z"))
            .output("y")
            .output("z");
        assert_eq!(check_fused(&shared, &inputs, native), (3, 3), "{d} shared");
    }
}

fn ints(values: Vec<i64>) -> HostTensor {
    HostTensor::from_vec(vec![values.len()], &values).unwrap()
}

// Chains through views (Unsqueeze, Squeeze, Reshape, Flatten): LinearAttention's
// `Exp -> Unsqueeze -> Mul` and `MatMul -> Squeeze -> Sub -> Mul -> Unsqueeze -> MatMul`
// shapes (Neg for Exp: exact against the reference), a reshape of a chain whose leaves all
// have its shape, one that cannot follow (a broadcast leaf across a reshape), and one value
// read in two shapes.
#[test]
fn chains_fuse_through_views() {
    let d = DType::F32;
    let inputs = named(vec![
        ("x", small_ints(1, d, &[2, 3])),
        ("state", small_ints(2, d, &[2, 3, 4])),
        ("k", small_ints(3, d, &[2, 4, 1])),
        ("v", small_ints(4, d, &[2, 3])),
        ("beta", small_ints(5, d, &[2, 1])),
        ("col", small_ints(6, d, &[2, 3, 1])),
        ("y", small_ints(7, d, &[2, 6])),
        ("z", small_ints(8, d, &[3, 4])),
        ("r", small_ints(9, d, &[6])),
        ("c", small_ints(10, d, &[3, 1])),
        ("w", small_ints(11, d, &[6, 4])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .constant("last", ints(vec![-1]))
        .constant("second_last", ints(vec![-2]))
        .constant("zero", ints(vec![0]))
        .constant("three_four", ints(vec![3, 4]));
    // Neg -> Unsqueeze -> Mul: one dispatch instead of two.
    let decay = g
        .clone()
        .node(node("Neg", &["x"], "e"))
        .node(node("Unsqueeze", &["e", "last"], "eu"))
        .node(node("Mul", &["state", "eu"], "out"))
        .output("out");
    assert_eq!(check_fused(&decay, &inputs, true), (1, 2), "decay");
    // The product viewed through Squeeze and Unsqueeze, its epilogue between them, read by a
    // MatMul: 2 dispatches instead of 4.
    let delta = g
        .clone()
        .node(node("MatMul", &["state", "k"], "p"))
        .node(node("Squeeze", &["p", "last"], "ps"))
        .node(node("Sub", &["v", "ps"], "diff"))
        .node(node("Mul", &["beta", "diff"], "delta"))
        .node(node("Unsqueeze", &["delta", "second_last"], "row"))
        .node(node("MatMul", &["col", "row"], "outer"))
        .output("outer");
    assert_eq!(check_fused(&delta, &inputs, true), (2, 4), "delta");
    // Leaves of the chain's own shape follow any reshape: 1 dispatch instead of 2.
    let reshaped = g
        .clone()
        .node(node("Add", &["y", "y"], "s"))
        .node(node("Reshape", &["s", "three_four"], "sr"))
        .node(node("Mul", &["sr", "z"], "out"))
        .output("out");
    assert_eq!(check_fused(&reshaped, &inputs, true), (1, 2), "reshape");
    let flat = g
        .clone()
        .node(node("Add", &["state", "state"], "s"))
        .node(node("Flatten", &["s"], "sf").attr("axis", Attr::Int(2)))
        .node(node("Sub", &["sf", "w"], "out"))
        .output("out");
    assert_eq!(check_fused(&flat, &inputs, true), (1, 2), "flatten");
    // A broadcast leaf cannot follow a reshape beyond unit axes: recorded, then the Mul.
    let broadcast = g
        .clone()
        .node(node("Add", &["y", "r"], "s"))
        .node(node("Reshape", &["s", "three_four"], "sr"))
        .node(node("Mul", &["sr", "z"], "out"))
        .output("out");
    assert_eq!(check_fused(&broadcast, &inputs, true), (2, 2), "broadcast");
    // `c` [3, 1] read as a leaf in two shapes: squeezed to [3] by the view, and as itself.
    let twice = g
        .clone()
        .node(node("Neg", &["c"], "n"))
        .node(node("Squeeze", &["n"], "ns"))
        .node(node("Add", &["ns", "c"], "out"))
        .output("out");
    assert_eq!(check_fused(&twice, &inputs, true), (1, 2), "two shapes");
    // A view node whose input is not pending stays a view; a view that is a graph output is
    // recorded.
    let output = g
        .clone()
        .node(node("Neg", &["x"], "e"))
        .node(node("Unsqueeze", &["e", "zero"], "eu"))
        .output("eu");
    assert_eq!(check_fused(&output, &inputs, true), (1, 1), "output");
}

// Operands read transposed in place (Gemm's transA/transB, a graph's Transpose feeding a
// MatMul) against the transpose recorded first: bit for bit, on each MatMul kernel, with an
// epilogue or not, broadcast batches; one dispatch per product where the tensors bind whole,
// and the transposed copies where they do not (a binding limit smaller than the operands).
#[test]
fn matmul_reads_transposed_operands_in_place() {
    use wgpu_ops::ops::elementwise::{Arg, Program};
    use wgpu_ops::{Out, Tensor};
    for (cpu_kernels, binding) in [(false, None), (true, None), (true, Some(2048u64))] {
        let ctx = Context::new_blocking(ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            max_binding_size: binding,
            ..Default::default()
        })
        .unwrap();
        for d in [DType::F32, DType::I32, DType::F16, DType::BF16] {
            for (seed, batch_a, batch_b, m, k, n) in [
                (1u64, vec![], vec![], 1, 5, 7),
                (2, vec![3], vec![1], 20, 9, 33),
                (3, vec![2, 1], vec![3], 4, 70, 1),
            ] {
                let up = |seed: u64, s: &[usize]| {
                    Tensor::from_host(&ctx, &small_ints(seed, d, s)).unwrap()
                };
                let with = |batch: &[usize], tail: [usize; 2]| -> Vec<usize> {
                    batch.iter().copied().chain(tail).collect()
                };
                for (ta, tb) in [(true, false), (false, true), (true, true)] {
                    let a = up(seed, &with(&batch_a, if ta { [k, m] } else { [m, k] }));
                    let b = up(seed + 5, &with(&batch_b, if tb { [n, k] } else { [k, n] }));
                    let swap = |t: &Tensor| {
                        let r = t.rank() as i64;
                        let mut perm: Vec<i64> = (0..r).collect();
                        perm.swap(r as usize - 2, r as usize - 1);
                        perm
                    };
                    let case = format!(
                        "{d} cpu {cpu_kernels} binding {binding:?} {batch_a:?} {batch_b:?} \
                         {m}x{k}x{n} transposed {ta} {tb}"
                    );
                    let before = ctx.stats().dispatches;
                    let fused = ctx
                        .run(|rec| rec.matmul_transposed_to(&a, &b, ta, tb, Out::NEW))
                        .unwrap();
                    let dispatches = ctx.stats().dispatches - before;
                    let want = ctx
                        .run(|rec| {
                            let a2 = if ta {
                                rec.transpose(&a, Some(&swap(&a)))?
                            } else {
                                a.clone()
                            };
                            let b2 = if tb {
                                rec.transpose(&b, Some(&swap(&b)))?
                            } else {
                                b.clone()
                            };
                            rec.matmul(&a2, &b2)
                        })
                        .unwrap();
                    let (f, w) = (
                        fused.to_host_blocking().unwrap(),
                        want.to_host_blocking().unwrap(),
                    );
                    assert_eq!((&f.shape, &f.data), (&w.shape, &w.data), "{case}");
                    if binding.is_none() {
                        assert_eq!(dispatches, 1, "{case}");
                    }
                    // With an epilogue: Add of a bias row, then Neg.
                    let bias = up(seed + 7, &[n]);
                    let mut p = Program::new(vec![d; 2], false);
                    let s0 = p
                        .push("Add", vec![Arg::Operand(0), Arg::Operand(1)], d)
                        .unwrap();
                    p.push("Neg", vec![s0], d).unwrap();
                    let fused = ctx
                        .run(|rec| rec.matmul_fused_to(&a, &b, [ta, tb], &p, &[&bias], Out::NEW))
                        .unwrap();
                    let want = ctx
                        .run(|rec| rec.program_to(&p, &[&want, &bias], Out::NEW))
                        .unwrap();
                    let (f, w) = (
                        fused.to_host_blocking().unwrap(),
                        want.to_host_blocking().unwrap(),
                    );
                    assert_eq!((&f.shape, &f.data), (&w.shape, &w.data), "{case} epilogue");
                }
            }
        }
    }
}

// A Transpose of the last two axes that only MatMuls read is not recorded: they read its
// input transposed in place (LinearAttention's `Transpose -> MatMul` of the state). Other
// permutations, and transposes other nodes read too, are recorded.
#[test]
fn matmuls_read_transposes_in_place() {
    let d = DType::F32;
    let inputs = named(vec![
        ("state", small_ints(1, d, &[2, 3, 4])),
        ("k", small_ints(2, d, &[2, 3, 1])),
        ("m", small_ints(3, d, &[5, 4])),
        ("q", small_ints(4, d, &[2, 4])),
        ("v", small_ints(5, d, &[2, 4, 1])),
        ("w", small_ints(6, d, &[4, 1])),
    ]);
    let g = declare(Graph::new(), &inputs);
    let perm = |p: &[i64]| Attr::Ints(p.to_vec());
    // Transpose -> MatMul -> Sub: 1 dispatch instead of 3.
    let la = g
        .clone()
        .node(node("Transpose", &["state"], "st").attr("perm", perm(&[0, 2, 1])))
        .node(node("MatMul", &["st", "k"], "r"))
        .node(node("Sub", &["v", "r"], "out"))
        .output("out");
    assert_eq!(check_fused(&la, &inputs, true), (1, 3), "state");
    // No perm at rank 2, the right operand, read by two MatMuls: 2 dispatches instead of 3.
    let two = g
        .clone()
        .node(node("Transpose", &["m"], "mt"))
        .node(node("MatMul", &["q", "mt"], "a"))
        .node(node("MatMul", &["q", "mt"], "b"))
        .output("a")
        .output("b");
    assert_eq!(check_fused(&two, &inputs, true), (2, 3), "two readers");
    // Read by a MatMul and an Add: recorded.
    let shared = g
        .clone()
        .node(node("Transpose", &["state"], "st").attr("perm", perm(&[0, 2, 1])))
        .node(node("MatMul", &["st", "k"], "r"))
        .node(node("Add", &["st", "st"], "s2"))
        .output("r")
        .output("s2");
    assert_eq!(check_fused(&shared, &inputs, true), (3, 3), "shared");
    // Another permutation: recorded.
    let other = g
        .clone()
        .node(node("Transpose", &["state"], "st").attr("perm", perm(&[1, 0, 2])))
        .node(node("MatMul", &["st", "w"], "out"))
        .output("out");
    assert_eq!(check_fused(&other, &inputs, true), (2, 2), "other perm");
}

// A chain a MatMul reads as an operand is computed where the kernel reads each element (a
// prologue), never stored, where each element is read at most 4 times: LinearAttention's
// decayed state, read transposed by the product with the key and also by the update's
// epilogue, costs no dispatch of its own. A chain read more often is recorded first, as are
// chains on i64 emulated on u32 pairs. Both kernel sets, bit for bit against the reference,
// f16 and bf16 included (computed in f32 on their packed words).
#[test]
fn matmuls_compute_the_chains_they_read() {
    let perm = Attr::Ints(vec![0, 2, 1]);
    let cases = [
        (DType::F32, true),
        (DType::I32, true),
        (DType::F64, true),
        (DType::I64, true),
        (DType::I64, false),
        (DType::F16, true),
        (DType::BF16, true),
    ];
    for (d, native) in cases {
        let inputs = named(vec![
            ("state", small_ints(1, d, &[2, 20, 24])),
            ("decay", small_ints(2, d, &[2, 20, 1])),
            ("k", small_ints(3, d, &[2, 20, 1])),
            ("v", small_ints(4, d, &[2, 24, 1])),
            ("q", small_ints(5, d, &[2, 1, 24])),
            ("a", small_ints(6, d, &[3, 40, 20])),
            ("b", small_ints(7, d, &[20])),
            ("w4", small_ints(8, d, &[20, 4])),
            ("w5", small_ints(9, d, &[20, 5])),
            ("row", small_ints(10, d, &[1, 20])),
            ("m", small_ints(11, d, &[20, 30])),
            ("s", small_ints(12, d, &[30])),
        ]);
        let g = declare(Graph::new(), &inputs);
        // Decay, state^T x k with a Sub epilogue, the outer product with an Add epilogue.
        let la = g
            .clone()
            .node(node("Mul", &["state", "decay"], "ds"))
            .node(node("Transpose", &["ds"], "dst").attr("perm", perm.clone()))
            .node(node("MatMul", &["dst", "k"], "r"))
            .node(node("Sub", &["v", "r"], "delta"))
            .node(node("MatMul", &["k", "q"], "outer"))
            .node(node("Add", &["ds", "outer"], "next"))
            .output("delta")
            .output("next");
        let computed_a = |w: &str| {
            g.clone()
                .node(node("Mul", &["a", "b"], "ab"))
                .node(node("MatMul", &["ab", w], "out"))
                .output("out")
        };
        let computed_b = g
            .clone()
            .node(node("Mul", &["m", "s"], "ms"))
            .node(node("MatMul", &["row", "ms"], "out"))
            .output("out");
        // Emulated i64: every chain is recorded first.
        let extra = u64::from(!native);
        for cpu_kernels in [false, true] {
            let ctx = |fuse: bool| {
                Context::new_blocking(ContextOptions {
                    fuse_elementwise: Some(fuse),
                    native_64_bit: Some(native),
                    cpu_kernels: Some(cpu_kernels),
                    ..Default::default()
                })
                .unwrap()
            };
            let (fusing, plain) = (ctx(true), ctx(false));
            let case = format!("{d} native {native} cpu kernels {cpu_kernels}");
            let check = |g: &Graph| check_fused_on(&fusing, &plain, g, &inputs);
            assert_eq!(check(&la), (2 + extra, 6), "LinearAttention step, {case}");
            // A's elements read by 4 columns: computed; by 5: recorded.
            assert_eq!(
                check(&computed_a("w4")),
                (1 + extra, 2),
                "A, 4 reads, {case}"
            );
            assert_eq!(check(&computed_a("w5")), (2, 2), "A, 5 reads, {case}");
            assert_eq!(check(&computed_b), (1 + extra, 2), "B, {case}");
        }
    }
}

// A chain read through a walk of 4 axes or more (here [2, 3, rows, k] times [2, 1, rows, 1],
// which merge no further, and a 6-axis one) finds each element's index axis by axis. lavapipe
// counts every loop iteration of an invocation against one budget of about 65 000 and then
// cuts every loop short: with that index code a loop, a MatMul computing such a chain over
// k = 3 000 products per sum (the blocks kernel reads 8 elements per step), or a reduction
// whose thread folds rows of 16 000 such elements, came out as zeros after its first rows.
// The index code is straight-line at the walk's compiled rank, so the chain is computed
// where it is read (one dispatch) at every length. Both kernel sets, bit for bit against the
// reference on CPU adapters.
#[test]
fn chains_read_through_long_loops_stay_within_the_loop_budget() {
    let d = DType::F32;
    for cpu_kernels in [true, false] {
        let ctx = |fuse: bool| {
            Context::new_blocking(ContextOptions {
                fuse_elementwise: Some(fuse),
                cpu_kernels: Some(cpu_kernels),
                ..Default::default()
            })
            .unwrap()
        };
        let (fusing, plain) = (ctx(true), ctx(false));
        for k in [64, 3000] {
            let inputs = named(vec![
                ("a", small_ints(1, d, &[2, 3, 5, k])),
                ("b", small_ints(2, d, &[2, 1, 5, 1])),
                ("w", small_ints(3, d, &[k, 4])),
                ("e", small_ints(4, d, &[2, 1, 5, 1])),
            ]);
            let g = declare(Graph::new(), &inputs)
                .node(node("Mul", &["a", "b"], "ab"))
                .node(node("MatMul", &["ab", "w"], "p"))
                .node(node("Add", &["p", "e"], "out"))
                .output("out");
            let case = format!("MatMul, k {k}, cpu kernels {cpu_kernels}");
            assert_eq!(
                check_fused_on(&fusing, &plain, &g, &inputs),
                (1, 3),
                "{case}"
            );
        }
        let k = 3000;
        let inputs = named(vec![
            ("a", small_ints(7, d, &[2, 3, 2, 3, 2, k])),
            ("b", small_ints(8, d, &[2, 1, 2, 1, 2, 1])),
            ("w", small_ints(9, d, &[k, 3])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .node(node("Mul", &["a", "b"], "ab"))
            .node(node("MatMul", &["ab", "w"], "out"))
            .output("out");
        let case = format!("MatMul of a 6-axis walk, cpu kernels {cpu_kernels}");
        assert_eq!(
            check_fused_on(&fusing, &plain, &g, &inputs),
            (1, 2),
            "{case}"
        );
        // 600 rows: a thread each on CPU adapters of up to 2 cores.
        for k in [4000, 16000] {
            let inputs = named(vec![
                ("a", small_ints(5, d, &[2, 3, 100, k])),
                ("b", small_ints(6, d, &[2, 1, 100, 1])),
            ]);
            let g = declare(Graph::new(), &inputs)
                .constant("axes", HostTensor::from_vec(vec![1], &[-1i64]).unwrap())
                .node(node("Mul", &["a", "b"], "ab"))
                .node(node("ReduceSum", &["ab", "axes"], "out"))
                .output("out");
            let case = format!("ReduceSum, rows of {k}, cpu kernels {cpu_kernels}");
            let (fused_dispatches, _) = check_fused_on(&fusing, &plain, &g, &inputs);
            if cpu_kernels {
                assert_eq!(fused_dispatches, 1, "{case}");
            }
        }
    }
}

// Matrix-vector products (one output column) run as vector-matrix ones with the matrix read
// transposed in place: against sums computed here, batched and broadcast, A stored plain or
// transposed, with an epilogue reading a tensor of the product's shape.
#[test]
fn matrix_vector_products_match_host_sums() {
    use wgpu_ops::ops::elementwise::{Arg, Program};
    use wgpu_ops::{Out, Tensor};
    for cpu_kernels in [false, true] {
        let ctx = kernel_set(cpu_kernels, true);
        let (batch, m, k) = (3usize, 37usize, 19usize);
        let a = small_ints(1, DType::I32, &[batch, m, k])
            .to_vec::<i32>()
            .unwrap();
        let x = small_ints(2, DType::I32, &[k, 1]).to_vec::<i32>().unwrap();
        let c = small_ints(3, DType::I32, &[batch, m, 1])
            .to_vec::<i32>()
            .unwrap();
        let want: Vec<i32> = (0..batch * m)
            .map(|r| (0..k).map(|i| a[r * k + i] * x[i]).sum::<i32>() - c[r])
            .collect();
        let at: Vec<i32> = (0..batch * k * m)
            .map(|j| {
                let (b, rest) = (j / (k * m), j % (k * m));
                let (i, row) = (rest / m, rest % m);
                a[b * m * k + row * k + i]
            })
            .collect();
        let up = |v: &[i32], shape: &[usize]| {
            Tensor::from_host(&ctx, &HostTensor::from_vec(shape.to_vec(), v).unwrap()).unwrap()
        };
        let (ta, tat, tx, tc) = (
            up(&a, &[batch, m, k]),
            up(&at, &[batch, k, m]),
            up(&x, &[k, 1]),
            up(&c, &[batch, m, 1]),
        );
        let mut p = Program::new(vec![DType::I32; 2], false);
        p.push("Sub", vec![Arg::Operand(0), Arg::Operand(1)], DType::I32)
            .unwrap();
        for (lhs, transposed) in [(&ta, false), (&tat, true)] {
            let before = ctx.stats().dispatches;
            let got = ctx
                .run(|rec| rec.matmul_fused_to(lhs, &tx, [transposed, false], &p, &[&tc], Out::NEW))
                .unwrap();
            assert_eq!(ctx.stats().dispatches - before, 1);
            let got = got.to_host_blocking().unwrap();
            assert_eq!(got.shape, [batch, m, 1]);
            assert_eq!(
                got.to_vec::<i32>().unwrap(),
                want,
                "cpu {cpu_kernels} A transposed {transposed}"
            );
        }
    }
}

// Gemm is one dispatch: A and B read transposed in place, alpha * sum + beta * C as the
// MatMul's epilogue; against the reference bit for bit (small integers in f32).
#[test]
fn gemm_is_one_dispatch() {
    let d = DType::F32;
    let inputs = named(vec![
        ("a", small_ints(1, d, &[5, 3])),
        ("b", small_ints(2, d, &[4, 5])),
        ("c", small_ints(3, d, &[4])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .node(
            node("Gemm", &["a", "b", "c"], "y")
                .attr("transA", Attr::Int(1))
                .attr("transB", Attr::Int(1))
                .attr("alpha", Attr::Float(2.0))
                .attr("beta", Attr::Float(3.0)),
        )
        .output("y");
    assert_eq!(check_fused(&g, &inputs, true), (1, 1));
}

// A Gemm of a graph input by constant weights (PyTorch's nn.Linear on 2-D inputs: transB 1
// and a bias C) runs as a MatMul by the weights transposed once on the host, so it heads the
// chain after it: Gemm and Relu in one dispatch, where a Gemm whose alpha is 2 stays a Gemm
// (its own dispatch, then Relu's). Bit for bit against the reference (small integers).
#[test]
fn gemms_by_constant_weights_head_the_chains_after_them() {
    let d = DType::F32;
    let inputs = named(vec![("x", small_ints(1, d, &[5, 4]))]);
    let gemm = |alpha: f64| {
        declare(Graph::new(), &inputs)
            .constant("w", small_ints(2, d, &[3, 4]))
            .constant("b", small_ints(3, d, &[3]))
            .node(
                node("Gemm", &["x", "w", "b"], "g")
                    .attr("transB", Attr::Int(1))
                    .attr("alpha", Attr::Float(alpha)),
            )
            .node(node("Relu", &["g"], "r"))
            .output("r")
    };
    assert_eq!(check_fused(&gemm(1.0), &inputs, true), (1, 2));
    assert_eq!(check_fused(&gemm(2.0), &inputs, true), (2, 2));
}

/// A Gemm on a computed A that is certain to be 2-D (a CNN's classifier after Flatten, an
/// MLP's second layer after an activation) runs as a MatMul too, heading the activation after
/// it; an A whose rank is not certain (after Unsqueeze) stays a Gemm, and its error names Gemm.
#[test]
fn gemms_on_computed_two_d_values_head_their_chains() {
    let d = DType::F32;
    let inputs = named(vec![("x", small_ints(4, d, &[2, 3, 4, 4]))]);
    let g = declare(Graph::new(), &inputs)
        .constant("w", small_ints(5, d, &[4, 3, 3, 3]))
        .constant("fc1", small_ints(6, d, &[5, 4]))
        .constant("b1", small_ints(7, d, &[5]))
        .constant("fc2", small_ints(8, d, &[3, 5]))
        .node(node("Conv", &["x", "w"], "c"))
        .node(node("Relu", &["c"], "r"))
        .node(node("GlobalAveragePool", &["r"], "p"))
        .node(node("Flatten", &["p"], "f"))
        .node(node("Gemm", &["f", "fc1", "b1"], "h").attr("transB", Attr::Int(1)))
        .node(node("Relu", &["h"], "hr"))
        .node(node("Gemm", &["hr", "fc2"], "o").attr("transB", Attr::Int(1)))
        .node(node("Neg", &["o"], "y"))
        .output("y");
    // Node by node: Conv 2 (windows, product with its bias), Relu, the pool, Gemm, Relu, Gemm,
    // Neg (Flatten is a view). Fused: each Gemm and its activation one MatMul.
    assert_eq!(check_fused(&g, &inputs, true), (6, 8));
    let x = named(vec![("x", small_ints(9, d, &[3, 4]))]);
    let unsqueezed = declare(Graph::new(), &x)
        .constant("axes", HostTensor::from_vec(vec![1], &[0i64]).unwrap())
        .constant("fc", small_ints(10, d, &[2, 4]))
        .node(node("Unsqueeze", &["x", "axes"], "u"))
        .node(node("Gemm", &["u", "fc"], "o").attr("transB", Attr::Int(1)))
        .output("o");
    let e = Session::new(&context(true, true), unsqueezed)
        .unwrap()
        .run_blocking(x)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Gemm") && !e.contains("MatMul"), "{e}");
    // A classifier on one token (ViT's class token): a Transpose keeps the rank, the Gather
    // of a scalar index drops an axis, so the Gemm's A is 2-D and its Relu its epilogue.
    let t = named(vec![("t", small_ints(14, d, &[5, 2, 4]))]);
    let head = declare(Graph::new(), &t)
        .constant("first", HostTensor::from_vec(vec![], &[0i64]).unwrap())
        .constant("fc", small_ints(17, d, &[3, 4]))
        .node(node("Transpose", &["t"], "n").attr("perm", Attr::Ints(vec![1, 0, 2])))
        .node(node("Gather", &["n", "first"], "c").attr("axis", Attr::Int(1)))
        .node(node("Gemm", &["c", "fc"], "o").attr("transB", Attr::Int(1)))
        .node(node("Relu", &["o"], "y"))
        .output("y");
    // Transpose, Gather, then the Gemm with its Relu (4 node by node; without the Gather's
    // rank the Gemm stayed one and its Relu another).
    assert_eq!(check_fused(&head, &t, true), (3, 4));
}

/// A MatMul product that is only reshaped before a node that is not a step (a Transpose that
/// moves a unit axis, as ViT's attention writes it) is the product viewed: no copy, as node by
/// node.
#[test]
fn a_reshaped_product_read_by_a_transpose_is_not_copied() {
    let d = DType::F32;
    let inputs = named(vec![
        ("x", small_ints(11, d, &[17, 32])),
        ("b", small_ints(12, d, &[1, 17, 32])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .constant("w", small_ints(13, d, &[32, 32]))
        .constant("s", HostTensor::from_vec(vec![3], &[17i64, 1, 32]).unwrap())
        .node(node("MatMul", &["x", "w"], "p"))
        .node(node("Reshape", &["p", "s"], "v"))
        .node(node("Transpose", &["v"], "t").attr("perm", Attr::Ints(vec![1, 0, 2])))
        .node(node("Add", &["t", "b"], "y"))
        .output("y");
    assert_eq!(check_fused(&g, &inputs, true), (2, 2));
    let ctx = context(true, true);
    let session = Session::new(&ctx, g).unwrap();
    let before = ctx.stats().copies;
    session.run_blocking(inputs).unwrap();
    assert_eq!(ctx.stats().copies - before, 0);
}

// A reduction of a chain computes the chain as it reads it (its prologue): no tensor of the
// chain's values and no dispatch for it, on every dtype, broadcast operands included, for
// rows folded by one thread (6 elements), by a workgroup (100) and in two passes (3000
// elements in 2 rows). Max and Min give the same bits in any order, so all three results
// compare bit for bit with the reference; i8 sums that wrap show the chain's values are
// narrowed as stored ones would be.
dtype_tests!(reductions_compute_their_chains_as_they_read_them, |d| {
    let inputs = named(vec![
        ("x", random_tensor(31, d, &[5, 6])),
        ("y", random_tensor(32, d, &[6])),
        ("u", random_tensor(33, d, &[3, 100])),
        ("v", random_tensor(34, d, &[3, 1])),
        ("w", random_tensor(35, d, &[2, 3000])),
    ]);
    let reduce = |op: &str, from: &str, to: &str| {
        Node::new(op, to)
            .inputs([from])
            .outputs([to])
            .attr("axes", Attr::Ints(vec![1]))
            .attr("keepdims", Attr::Int(0))
    };
    let (add, sub, mul) = if d == DType::Bool {
        ("Xor", "And", "Or")
    } else {
        ("Add", "Sub", "Mul")
    };
    let g = declare(Graph::new(), &inputs)
        .node(node(add, &["x", "y"], "t1"))
        .node(reduce("ReduceMax", "t1", "m"))
        .node(node(sub, &["u", "v"], "t2"))
        .node(reduce("ReduceMin", "t2", "n"))
        .node(node(mul, &["w", "w"], "t3"))
        .node(reduce("ReduceMax", "t3", "k"))
        .output("m")
        .output("n")
        .output("k");
    let (fused, plain) = check_fused(&g, &inputs, true);
    // One dispatch per reduction, two for the long rows; a cast after each where the
    // reduction's result is stored wider (8- and 16-bit types and bool).
    let casts = if d.size() < 4 { 3 } else { 0 };
    assert_eq!((fused, plain), (4 + casts, 7 + casts), "{d}");
    // i64 and u64 emulated on u32 pairs: the chain is recorded first (same bits).
    if matches!(d, DType::I64 | DType::U64) {
        assert_eq!(check_fused(&g, &inputs, false), (7, 7), "{d} emulated");
    }
});

/// With the GPU kernels, a fused program of 4-byte results stores four per invocation where
/// the output is whole 16-byte quads, and one per invocation otherwise: both give the bits of
/// the CPU kernels and of the reference, for lengths that are and are not whole quads, a
/// broadcast operand included.
///
/// The quads tests' inputs hold no subnormal f32 or bf16 values: whether a kernel flushes them
/// is the driver's choice per shader (WGSL allows it), and NVIDIA's made the quad and word
/// entry points differ in the last bits of results computed from them.
#[test]
fn fused_programs_store_quads_where_the_output_is_whole_quads() {
    let (gpu, cpu) = (kernel_set(false, true), kernel_set(true, true));
    for d in [DType::F32, DType::I32, DType::U32] {
        for n in [3, 4, 1000, 1001, 4096] {
            let inputs = named(vec![
                ("x", flushed(&random_tensor(41, d, &[n]))),
                ("y", flushed(&random_tensor(42, d, &[n]))),
                ("s", flushed(&random_tensor(43, d, &[1]))),
            ]);
            // Add, then Mul: no `a * b + c` that a driver may contract into one rounding.
            let g = declare(Graph::new(), &inputs)
                .node(node("Add", &["x", "y"], "t"))
                .node(node("Mul", &["t", "s"], "z"))
                .output("z");
            let (on_gpu, dispatches) = run(&gpu, &g, &inputs);
            let (on_cpu, _) = run(&cpu, &g, &inputs);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            assert_eq!(dispatches, 1, "{d} {n}");
            assert_alike(&on_gpu[0], &on_cpu[0], &format!("{d} {n}"));
            assert_alike(&on_gpu[0], &want[0], &format!("{d} {n}"));
        }
    }
}

#[test]
fn lone_element_wise_nodes_store_quads_on_both_kernel_sets() {
    // A lone op of 4-byte results is a one-step program: four results per invocation, one
    // 16-byte store, where the output is whole quads (4096 elements), else one result per
    // invocation (1001 elements): two pipelines where the typed kernel would build one, on
    // each kernel set. Unary and binary ops (y broadcast along x's rows), on each 4-byte
    // dtype; every result as the other kernel set and the reference compute it, bit for bit.
    for (d, ops) in [
        (DType::F32, &["Add", "Div", "Max", "Neg", "Relu"][..]),
        (DType::I32, &["Sub", "Mul", "Abs", "Min"][..]),
        (DType::U32, &["Add", "Div", "Max"][..]),
    ] {
        for &op in ops {
            let (gpu, cpu) = (kernel_set(false, true), kernel_set(true, true));
            let unary = matches!(op, "Neg" | "Relu" | "Abs");
            for (k, (x_shape, y_shape)) in
                [(vec![512, 8], [8]), (vec![1001], [1]), (vec![512, 8], [8])]
                    .into_iter()
                    .enumerate()
            {
                let mut inputs = vec![("x", flushed(&random_tensor(51, d, &x_shape)))];
                if !unary {
                    inputs.push(("y", flushed(&random_tensor(52, d, &y_shape))));
                }
                let inputs = named(inputs);
                let args: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
                let g = declare(Graph::new(), &inputs)
                    .node(node(op, &args, "z"))
                    .output("z");
                let built = [gpu.stats().pipelines_built, cpu.stats().pipelines_built];
                let (on_gpu, dispatches) = run(&gpu, &g, &inputs);
                let (on_cpu, cpu_dispatches) = run(&cpu, &g, &inputs);
                let want = run_graph(&g, &inputs, &Default::default()).unwrap();
                let what = format!("{op} {d} {x_shape:?}");
                assert_eq!((dispatches, cpu_dispatches), (1, 1), "{what}");
                // The quad kernel first, the word kernel next, nothing new the third time.
                for (set, before) in [&gpu, &cpu].into_iter().zip(built) {
                    assert_eq!(
                        set.stats().pipelines_built - before,
                        u64::from(k < 2),
                        "{what}"
                    );
                }
                assert_alike(&on_gpu[0], &on_cpu[0], &what);
                assert_alike(&on_gpu[0], &want[0], &what);
            }
        }
    }
}

#[test]
fn fused_programs_of_every_width_store_quads() {
    // With the GPU kernels a program's results go out a 16-byte quad at a time: two 8-byte
    // results, four words of packed 1- and 2-byte ones (and four 4-byte ones, tested above),
    // where the output is whole quads (4096 elements); 1001 elements take the word kernel's
    // entry point (a second pipeline). i64 and u64 also on u32 pairs. Every result as the
    // CPU kernels and the reference compute it, bit for bit.
    let dtypes = DType::ALL
        .into_iter()
        .filter(|d| d.size() != 4 && *d != DType::Bool && !d.is_storage_only())
        .map(|d| (d, true))
        .chain([(DType::I64, false), (DType::U64, false)]);
    for (d, native_64_bit) in dtypes {
        let (gpu, cpu) = (
            kernel_set(false, native_64_bit),
            kernel_set(true, native_64_bit),
        );
        for (k, n) in [4096usize, 1001].into_iter().enumerate() {
            let inputs = named(vec![
                ("x", flushed(&random_tensor(61, d, &[n]))),
                ("y", flushed(&random_tensor(62, d, &[n]))),
                ("s", flushed(&random_tensor(63, d, &[1]))),
            ]);
            let g = declare(Graph::new(), &inputs)
                .node(node("Add", &["x", "y"], "t"))
                .node(node("Mul", &["t", "s"], "z"))
                .output("z");
            let built = gpu.stats().pipelines_built;
            let (on_gpu, dispatches) = run(&gpu, &g, &inputs);
            let (on_cpu, _) = run(&cpu, &g, &inputs);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            let what = format!("{d} native 64-bit {native_64_bit}, {n}");
            assert_eq!(dispatches, 1, "{what}");
            assert_eq!(gpu.stats().pipelines_built - built, 1, "{what}: {k}");
            assert_alike(&on_gpu[0], &on_cpu[0], &what);
            assert_alike(&on_gpu[0], &want[0], &what);
        }
    }
}

/// Outputs of 2^16 elements or more whose last 16-byte quad is partial: the whole quads go by
/// the quad kernel (dense for narrow types) and the rest, the end of the last row, by a
/// dispatch of its own; where the rest is longer than a row, one word kernel does it all.
/// On both kernel sets, every width, a broadcast row among the operands; bit for bit.
#[test]
fn large_programs_ending_inside_a_quad_store_quads_then_the_rest() {
    for cpu_kernels in [false, true] {
        let set = kernel_set(cpu_kernels, true);
        for d in [
            DType::U8,
            DType::I16,
            DType::F16,
            DType::F32,
            DType::I64,
            DType::F64,
        ] {
            let per_quad = 16 / d.size();
            for (x_shape, y_shape) in [
                (vec![65537usize], vec![65537usize]),
                (vec![257, 259], vec![259]),
                (vec![32771, 3], vec![3]),
            ] {
                let n: usize = x_shape.iter().product();
                assert!(
                    !n.is_multiple_of(per_quad) && n >= 1 << 16,
                    "{d} {x_shape:?}"
                );
                // The rest in the last row (for u8 the 9 elements past [32771, 3]'s last
                // quad are not).
                let split = n % per_quad <= x_shape[x_shape.len() - 1];
                let inputs = named(vec![
                    ("x", flushed(&random_tensor(71, d, &x_shape))),
                    ("y", flushed(&random_tensor(72, d, &y_shape))),
                ]);
                let g = declare(Graph::new(), &inputs)
                    .node(node("Add", &["x", "y"], "t"))
                    .node(node("Mul", &["t", "y"], "z"))
                    .output("z");
                let (got, dispatches) = run(&set, &g, &inputs);
                let want = run_graph(&g, &inputs, &Default::default()).unwrap();
                let what = format!("{d} {x_shape:?} + {y_shape:?}, cpu kernels {cpu_kernels}");
                assert_eq!(dispatches, 1 + u64::from(split), "{what}");
                assert_alike(&got[0], &want[0], &what);
            }
        }
    }
}

/// Chains of the bitwise ops (BitShift both ways among them) fuse into one kernel on every
/// integer width, natively and with i64/u64 emulated, bit for bit with the reference; chains
/// of the trigonometric and hyperbolic functions likewise on floats, with the bits of the
/// ops run one by one (the functions are written out, so fusing changes nothing) and within
/// the tolerance of `tests/every_dtype.rs` of the reference.
#[test]
fn bitwise_and_trigonometric_chains_fuse() {
    let shift = |direction: &str, inputs: &[&str], output: &str| {
        node("BitShift", inputs, output).attr("direction", Attr::String(direction.into()))
    };
    for d in [DType::I8, DType::U16, DType::I32, DType::U64, DType::I64] {
        let inputs = named(vec![
            ("x", random_tensor(1, d, &[4, 6])),
            ("y", random_tensor(2, d, &[6])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .node(node("BitwiseAnd", &["x", "y"], "t1"))
            .node(node("BitwiseXor", &["t1", "x"], "t2"))
            .node(shift("LEFT", &["t2", "y"], "t3"))
            .node(node("BitwiseNot", &["t3"], "t4"))
            .node(shift("RIGHT", &["t4", "x"], "t5"))
            .output("t5");
        for native in [true, false] {
            assert_eq!(check_fused(&g, &inputs, native), (1, 5), "{d}");
        }
    }
    for (d, rtol) in [(DType::F32, 1e-5), (DType::F16, 2e-3), (DType::F64, 1e-12)] {
        let inputs = named(vec![
            ("x", random_tensor(3, d, &[4, 6])),
            ("y", random_tensor(4, d, &[6])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .node(node("Sin", &["x"], "t1"))
            .node(node("Atan", &["t1"], "t2"))
            .node(node("Mul", &["t2", "y"], "t3"))
            .node(node("Cosh", &["t3"], "t4"))
            .node(node("Asinh", &["t4"], "t5"))
            .output("t5");
        let (fused, fused_dispatches) = run(&context(true, true), &g, &inputs);
        let (plain, plain_dispatches) = run(&context(false, true), &g, &inputs);
        assert_eq!((fused_dispatches, plain_dispatches), (1, 5), "{d}");
        assert_alike(&fused[0], &plain[0], &format!("{d}"));
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        assert_close(&fused[0], &want[0], rtol, 0.0, &format!("{d}"));
    }
}

/// Activation functions (several steps each, their parameters constants of the shader, not
/// bound operands) fuse into chains and MatMul epilogues like single ops, on every float
/// dtype: `x + y -> LeakyRelu -> HardSigmoid -> Elu -> * y` is one dispatch (5 node by
/// node), `Softplus -> Gelu -> ThresholdedRelu` one (3), and `MatMul -> + y -> HardSigmoid`
/// one (3). Compared with node by node and with the reference (these use exp and erf, which
/// GPUs approximate: f32 within 1e-5, f16 and bf16 within their rounding, f64 1e-12).
#[test]
fn activations_fuse_with_their_parameters() {
    let act = |op: &str, input: &str, output: &str, attrs: &[(&str, f64)]| {
        let mut n = node(op, &[input], output);
        for &(name, v) in attrs {
            n = n.attr(name, Attr::Float(v));
        }
        n
    };
    for (d, rtol) in [
        (DType::F32, 1e-5),
        (DType::F16, 4e-3),
        (DType::BF16, 2e-2),
        (DType::F64, 1e-12),
    ] {
        let inputs = named(vec![
            ("x", random_tensor(5, d, &[4, 6])),
            ("y", random_tensor(6, d, &[6])),
        ]);
        let first = declare(Graph::new(), &inputs)
            .node(node("Add", &["x", "y"], "t1"))
            .node(act("LeakyRelu", "t1", "t2", &[("alpha", 0.25)]))
            .node(act(
                "HardSigmoid",
                "t2",
                "t3",
                &[("alpha", 0.3), ("beta", 0.1)],
            ))
            .node(act("Elu", "t3", "t4", &[("alpha", 0.5)]))
            .node(node("Mul", &["t4", "y"], "t5"))
            .output("t5");
        let second = declare(Graph::new(), &inputs)
            .node(act("Softplus", "x", "t1", &[]))
            .node(act("Gelu", "t1", "t2", &[]).attr("approximate", Attr::String("tanh".into())))
            .node(act("ThresholdedRelu", "t2", "t3", &[("alpha", 0.4)]))
            .output("t3");
        for (g, unfused) in [(&first, 5), (&second, 3)] {
            let (fused, fused_dispatches) = run(&context(true, true), g, &inputs);
            let (plain, plain_dispatches) = run(&context(false, true), g, &inputs);
            assert_eq!((fused_dispatches, plain_dispatches), (1, unfused), "{d}");
            let want = run_graph(g, &inputs, &Default::default()).unwrap();
            assert_close(&fused[0], &want[0], rtol, rtol, &format!("{d} fused"));
            assert_close(
                &fused[0],
                &plain[0],
                rtol,
                rtol,
                &format!("{d} fused vs plain"),
            );
        }
    }
    let inputs = named(vec![
        ("a", random_tensor(7, DType::F32, &[4, 5])),
        ("b", random_tensor(8, DType::F32, &[5, 6])),
        ("y", random_tensor(9, DType::F32, &[6])),
    ]);
    let g = declare(Graph::new(), &inputs)
        .node(node("MatMul", &["a", "b"], "p"))
        .node(node("Add", &["p", "y"], "s"))
        .node(act(
            "HardSigmoid",
            "s",
            "h",
            &[("alpha", 0.3), ("beta", 0.1)],
        ))
        .output("h");
    let (fused, fused_dispatches) = run(&context(true, true), &g, &inputs);
    let (_, plain_dispatches) = run(&context(false, true), &g, &inputs);
    assert_eq!((fused_dispatches, plain_dispatches), (1, 3));
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    assert_close(&fused[0], &want[0], 1e-5, 1e-6, "MatMul epilogue");
}

/// Scalar constants (a graph's, and small constants cast like a computed value) are literals
/// of the fused program, not tensors it binds: a chain of 8 of them and an input is one
/// dispatch (the operand limit, 7, cut it in two before), bit for bit the ops one by one on
/// f32 and f64. A constant of shape [1, 1], which broadcasts the [6] input to [1, 6], is
/// bound as a tensor (the kernel's shape is its tensors').
#[test]
fn scalar_constants_are_literals_of_fused_programs() {
    for d in [DType::F32, DType::F64] {
        let inputs = named(vec![("x", random_tensor(11, d, &[6]))]);
        let scalar = |v: f64, shape: &[usize]| {
            let t = HostTensor::from_vec(shape.to_vec(), &[v]).unwrap();
            wgpu_ops::reference::cast_host(&t, d).unwrap()
        };
        let mut g = declare(Graph::new(), &inputs);
        let ops = ["Add", "Mul", "Max", "Sub", "Div", "Min", "Add", "Mul"];
        // The divisor is a power of two: a driver may divide by a literal as a product with
        // its reciprocal (NVIDIA's does), which is exact only then.
        let values = [0.5, 1.5, -0.25, 0.125, 4.0, 0.75, -1.0, 2.5];
        let mut last = "x".to_string();
        for (k, (op, v)) in ops.iter().zip(values).enumerate() {
            let c = format!("c{k}");
            let shape: &[usize] = if k == 3 { &[1, 1] } else { &[] };
            g = g.constant(c.clone(), scalar(v, shape));
            let out = format!("t{k}");
            g = g.node(node(op, &[&last, &c], &out));
            last = out;
        }
        let g = g.output(last);
        assert_eq!(check_fused(&g, &inputs, true), (1, 8), "{d}");
        let (out, _) = run(&context(true, true), &g, &inputs);
        assert_eq!(out[0].shape, vec![1, 6], "{d}");
    }
}

/// Programs of narrow types with the GPU kernel set, where whole-quad walks read each
/// operand's words once (`main_dense`): every operand contiguous, or one broadcast scalar;
/// 1-, 2- and 4-byte results from 1-, 2- and 4-byte operands; lengths that are whole quads
/// (dense) and lengths that are not (the per-element path for the tail walk or the whole
/// tensor). Bit for bit against the reference, fused and node by node.
#[test]
fn narrow_programs_read_whole_words_alike() {
    let gpu_kernels = |fuse: bool| {
        Context::new_blocking(ContextOptions {
            fuse_elementwise: Some(fuse),
            cpu_kernels: Some(false),
            ..Default::default()
        })
        .unwrap()
    };
    let (fusing, plain) = (gpu_kernels(true), gpu_kernels(false));
    for len in [4096usize, 4096 + 7, 48] {
        // u8 and i8 Add (wrapping), one operand broadcast from a scalar.
        for d in [DType::U8, DType::I8] {
            let inputs = named(vec![
                ("x", random_tensor(1, d, &[len])),
                ("y", random_tensor(2, d, &[len])),
                ("s", random_tensor(3, d, &[])),
            ]);
            let g = declare(Graph::new(), &inputs)
                .node(node("Add", &["x", "y"], "a"))
                .node(node("Sub", &["a", "s"], "b"))
                .output("a")
                .output("b");
            check_fused_on(&fusing, &plain, &g, &inputs);
        }
        // f16: Mul, a comparison to bool, Where on it, a Cast to u8 and one to f32.
        let inputs = named(vec![
            ("x", random_tensor(4, DType::F16, &[len])),
            ("y", random_tensor(5, DType::F16, &[len])),
        ]);
        let mut to_u8 = node("Cast", &["m"], "u");
        to_u8 = to_u8.attr("to", Attr::String(DType::U8.name().into()));
        let mut to_f32 = node("Cast", &["x"], "f");
        to_f32 = to_f32.attr("to", Attr::String(DType::F32.name().into()));
        let g = declare(Graph::new(), &inputs)
            .node(node("Mul", &["x", "y"], "m"))
            .node(node("Less", &["x", "y"], "c"))
            .node(node("Where", &["c", "m", "y"], "w"))
            .node(to_u8)
            .node(to_f32)
            .output("m")
            .output("c")
            .output("w")
            .output("u")
            .output("f");
        check_fused_on(&fusing, &plain, &g, &inputs);
        // bf16 and i16 from i16 and u16 inputs.
        let inputs = named(vec![
            ("p", random_tensor(6, DType::I16, &[len])),
            ("q", random_tensor(7, DType::U16, &[len])),
            ("h", random_tensor(8, DType::BF16, &[len])),
        ]);
        let g = declare(Graph::new(), &inputs)
            .node(node("Max", &["p", "p"], "pp"))
            .node(node("Add", &["h", "h"], "hh"))
            .node(node("Mul", &["q", "q"], "qq"))
            .output("pp")
            .output("hh")
            .output("qq");
        check_fused_on(&fusing, &plain, &g, &inputs);
    }
}
