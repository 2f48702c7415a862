//! Scan-16 on the GPU: the spec's RNN example against an independent recurrence, random Scans
//! (N states, M scan inputs, K scan outputs, axes, directions, lengths 0..40) and nested Scans
//! against the CPU reference interpreter, submissions that do not grow with the sequence, and
//! every error of the issue.

mod common;
use common::*;
use ndarray::{Array1, Array2, Array3, Axis};
use proptest::prelude::*;
use wgpu_ops::graph::{Attr, Graph, Node, ValueInfo};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, Error, HostTensor, Session};

fn declared(name: &str, dtype: DType, shape: &[usize]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        dtype: Some(dtype),
        shape: Some(shape.iter().map(|&d| Some(d)).collect()),
        kind: Default::default(),
    }
}

fn shape_of(t: &HostTensor) -> Vec<Option<usize>> {
    t.shape.iter().map(|&d| Some(d)).collect()
}

fn f32s(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = bytes(seed, n)
        .iter()
        .map(|&b| (b as f32 - 128.0) / 256.0)
        .collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

#[test]
fn rnn_example_matches_an_independent_recurrence() {
    // The spec's "Encoding RNN using a Scan": Ht = tanh(X_t Wi^T + H_{t-1} Ri^T + Wbi + Rbi),
    // with the weights as constants of the body graph; outputs Y_h (last state) and Y.
    let (seq, batch, input, hidden) = (7, 2, 3, 5);
    let (wi, ri, wbi, rbi) = (
        f32s(&[hidden, input], 1),
        f32s(&[hidden, hidden], 2),
        f32s(&[hidden], 3),
        f32s(&[hidden], 4),
    );
    let body = Graph::new()
        .input("H_tminus1", DType::F32, &[Some(batch), Some(hidden)])
        .input("X_t", DType::F32, &[Some(batch), Some(input)])
        .constant("Wi", wi.clone())
        .constant("Ri", ri.clone())
        .constant("Wbi", wbi.clone())
        .constant("Rbi", rbi.clone())
        .node(
            Node::new("Transpose", "wit")
                .inputs(["Wi"])
                .outputs(["WiT"]),
        )
        .node(
            Node::new("Transpose", "rit")
                .inputs(["Ri"])
                .outputs(["RiT"]),
        )
        .node(
            Node::new("MatMul", "t1")
                .inputs(["X_t", "WiT"])
                .outputs(["t1"]),
        )
        .node(
            Node::new("MatMul", "t2")
                .inputs(["H_tminus1", "RiT"])
                .outputs(["t2"]),
        )
        .node(Node::new("Add", "t3").inputs(["t1", "t2"]).outputs(["t3"]))
        .node(Node::new("Add", "t4").inputs(["t3", "Wbi"]).outputs(["t4"]))
        .node(Node::new("Add", "t5").inputs(["t4", "Rbi"]).outputs(["t5"]))
        .node(Node::new("Tanh", "ht").inputs(["t5"]).outputs(["Ht"]))
        .node(
            Node::new("Identity", "acc")
                .inputs(["Ht"])
                .outputs(["Accumulate"]),
        )
        .output("Ht")
        .output("Accumulate");
    let g = Graph::new()
        .input("H_0", DType::F32, &[Some(batch), Some(hidden)])
        .input("X", DType::F32, &[Some(seq), Some(batch), Some(input)])
        .node(
            Node::new("Scan", "rnn")
                .inputs(["H_0", "X"])
                .outputs(["Y_h", "Y"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("Y")
        .output("Y_h");
    let (h0, x) = (f32s(&[batch, hidden], 5), f32s(&[seq, batch, input], 6));
    let out = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("H_0".into(), h0.clone()), ("X".into(), x.clone())])
        .unwrap();

    let a2 = |t: &HostTensor| {
        t.to_array::<f32>()
            .unwrap()
            .into_dimensionality::<ndarray::Ix2>()
            .unwrap()
    };
    let a1 = |t: &HostTensor| {
        t.to_array::<f32>()
            .unwrap()
            .into_dimensionality::<ndarray::Ix1>()
            .unwrap()
    };
    let (wi, ri, wbi, rbi): (Array2<f32>, Array2<f32>, Array1<f32>, Array1<f32>) =
        (a2(&wi), a2(&ri), a1(&wbi), a1(&rbi));
    let xs: Array3<f32> = x.to_array::<f32>().unwrap().into_dimensionality().unwrap();
    let mut h = a2(&h0);
    let mut ys = Vec::new();
    for t in 0..seq {
        h = (xs.index_axis(Axis(0), t).dot(&wi.t()) + h.dot(&ri.t()) + &wbi + &rbi).mapv(f32::tanh);
        ys.push(h.clone());
    }
    let y = out[0].1.to_vec::<f32>().unwrap();
    let want_y: Vec<f32> = ys.iter().flat_map(|h| h.iter().copied()).collect();
    assert_eq!(out[0].1.shape, [seq, batch, hidden]);
    assert_eq!(out[1].1.shape, [batch, hidden]);
    for (a, b) in y.iter().zip(&want_y) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    for (a, b) in out[1].1.to_vec::<f32>().unwrap().iter().zip(h.iter()) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
}

/// Inputs: `states` then `scans`; outputs: states then scan outputs. Returns the Scan graph.
fn scan_graph(
    states: &[HostTensor],
    scans: &[HostTensor],
    body: Graph,
    attrs: Vec<(&str, Attr)>,
    k: usize,
) -> Graph {
    let mut g = Graph::new();
    let mut names = Vec::new();
    for (i, t) in states.iter().chain(scans).enumerate() {
        g = g.input(format!("in{i}"), t.dtype, &shape_of(t));
        names.push(format!("in{i}"));
    }
    let outs: Vec<String> = (0..states.len() + k).map(|i| format!("out{i}")).collect();
    let mut node = Node::new("Scan", "scan")
        .inputs(names)
        .outputs(outs.clone())
        .attr("body", Attr::Graph(Box::new(body)))
        .attr("num_scan_inputs", Attr::Int(scans.len() as i64));
    for (name, a) in attrs {
        node = node.attr(name, a);
    }
    let mut g = g.node(node);
    for o in outs {
        g = g.output(o);
    }
    g
}

/// `inputs` named as [`scan_graph`] names its inputs: `in0`, `in1`, ...
fn named_inputs(inputs: &[HostTensor]) -> Vec<(String, HostTensor)> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("in{i}"), t.clone()))
        .collect()
}

fn run_both(
    g: &Graph,
    inputs: &[HostTensor],
) -> (
    Result<Vec<HostTensor>, Error>,
    Result<Vec<HostTensor>, wgpu_ops::reference::RefError>,
) {
    run_both_on(ctx(), g, inputs)
}

/// A context with the GPU kernel variants even on a CPU adapter: Scans read and write their
/// elements with dispatches at a GPU counter's position instead of buffer copies.
fn gpu_kernels_ctx() -> &'static wgpu_ops::Context {
    static CTX: std::sync::OnceLock<wgpu_ops::Context> = std::sync::OnceLock::new();
    CTX.get_or_init(|| {
        wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(false),
            ..Default::default()
        })
        .unwrap()
    })
}

fn run_both_on(
    ctx: &wgpu_ops::Context,
    g: &Graph,
    inputs: &[HostTensor],
) -> (
    Result<Vec<HostTensor>, Error>,
    Result<Vec<HostTensor>, wgpu_ops::reference::RefError>,
) {
    let named = named_inputs(inputs);
    let gpu = Session::new(ctx, g.clone())
        .and_then(|s| s.run_blocking(named.clone()))
        .map(|o| o.into_iter().map(|(_, t)| t).collect());
    (gpu, run_graph(g, &named, &Default::default()))
}

#[derive(Debug, Clone)]
struct Case {
    dtype: DType,
    elem: Vec<usize>,
    seq: usize,
    n: usize,
    m: usize,
    k: usize,
    in_axes: Vec<usize>,
    in_dirs: Vec<i64>,
    out_axes: Vec<i64>,
    out_dirs: Vec<i64>,
    ops: Vec<(usize, usize)>,
    passthrough: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        // Every dtype: 64-bit bodies run on the adapter's native 64-bit shader types (lavapipe
        // has them), the narrow ones in the word kernel; bool bodies use And, Or and Xor. (The
        // storage-only types are not computed on: tests/narrow_types.rs scans them.)
        prop::sample::select(
            DType::ALL
                .into_iter()
                .filter(|d| !d.is_storage_only())
                .collect::<Vec<_>>(),
        ),
        // Small elements of any size, and rows of 8 to 64 elements (32 bytes and more, which
        // the device can often bind in place at each iteration's offset).
        prop_oneof![
            3 => prop::collection::vec(1usize..4, 0..3),
            1 => (prop::sample::select(vec![8usize, 16, 64]), prop::collection::vec(1usize..3, 0..2))
                .prop_map(|(row, mut outer)| { outer.push(row); outer }),
        ],
        prop_oneof![1 => Just(0usize), 1 => Just(1usize), 6 => 2usize..41],
        0usize..3,
        1usize..3,
        0usize..3,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(|(dtype, elem, seq, n, m, k, passthrough, seed)| {
            let r = elem.len();
            (
                prop::collection::vec(0..=r, m),
                prop::collection::vec(0i64..2, m),
                prop::collection::vec(-(r as i64) - 1..=r as i64, k.max(1)),
                prop::collection::vec(0i64..2, k.max(1)),
                prop::collection::vec((0usize..5, 0usize..8), n + 3),
            )
                .prop_map(
                    move |(in_axes, in_dirs, mut out_axes, mut out_dirs, ops)| {
                        // A Scan has at least one output.
                        let k = if n == 0 { k.max(1) } else { k };
                        out_axes.truncate(k);
                        out_dirs.truncate(k);
                        Case {
                            k,
                            dtype,
                            elem: elem.clone(),
                            seq,
                            n,
                            m,
                            in_axes,
                            in_dirs,
                            out_axes,
                            out_dirs,
                            ops,
                            passthrough,
                            seed,
                        }
                    },
                )
        })
}

impl Case {
    /// Small integer values (exact in every float type through the body's arithmetic;
    /// integers wrap alike on both sides), as the case's dtype.
    fn tensor(&self, shape: &[usize], seed: u64) -> HostTensor {
        let n: usize = shape.iter().product();
        let raw: Vec<i64> = bytes(seed, n).iter().map(|&b| (b % 7) as i64 - 3).collect();
        let s = shape.to_vec();
        macro_rules! of {
            ($f:expr) => {
                HostTensor::from_vec(s, &raw.iter().map($f).collect::<Vec<_>>()).unwrap()
            };
        }
        match self.dtype {
            DType::F32 => of!(|&v| v as f32),
            DType::F16 => of!(|&v| half::f16::from_f32(v as f32)),
            DType::BF16 => of!(|&v| half::bf16::from_f32(v as f32)),
            DType::F64 => of!(|&v| v as f64),
            DType::I8 => of!(|&v| v as i8),
            DType::I16 => of!(|&v| v as i16),
            DType::I32 => of!(|&v| v as i32),
            DType::I64 => of!(|&v| v << 40),
            DType::U8 => of!(|&v| v as u8),
            DType::U16 => of!(|&v| v as u16),
            DType::U32 => of!(|&v| v as u32),
            DType::U64 => of!(|&v| (v as u64) << 20),
            DType::Bool => of!(|&v| v > 0),
            d => panic!("{d} is not computed on"),
        }
    }

    /// Body: state i <- op(state i, element j); scan output q <- op(a state, an element), or a
    /// plain element / state. With `passthrough`, the last state is passed through unchanged.
    fn body(&self) -> Graph {
        let ops: [&str; 5] = if self.dtype == DType::Bool {
            ["And", "Or", "Xor", "Or", "And"]
        } else {
            ["Add", "Sub", "Max", "Min", "Add"]
        };
        let mut b = Graph::new();
        for i in 0..self.n {
            b = b.input(
                format!("s{i}"),
                self.dtype,
                &self.elem.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
            );
        }
        for j in 0..self.m {
            b.inputs.push(ValueInfo::named(format!("x{j}")));
        }
        let mut outputs = Vec::new();
        for i in 0..self.n {
            let (op, j) = self.ops[i];
            if self.passthrough && i == self.n - 1 {
                outputs.push(format!("s{i}"));
                continue;
            }
            b = b.node(
                Node::new(ops[op], format!("st{i}"))
                    .inputs([format!("s{i}"), format!("x{}", j % self.m)])
                    .outputs([format!("ns{i}")]),
            );
            outputs.push(format!("ns{i}"));
        }
        for q in 0..self.k {
            let (op, j) = self.ops[self.n + q];
            let x = format!("x{}", j % self.m);
            let name = match (op, self.n) {
                (4, _) => x,
                (_, 0) => {
                    b = b.node(
                        Node::new(ops[op], format!("o{q}"))
                            .inputs([x.clone(), x])
                            .outputs([format!("y{q}")]),
                    );
                    format!("y{q}")
                }
                _ => {
                    let s = outputs[j % self.n].clone();
                    b = b.node(
                        Node::new(ops[op], format!("o{q}"))
                            .inputs([s, x])
                            .outputs([format!("y{q}")]),
                    );
                    format!("y{q}")
                }
            };
            outputs.push(name);
        }
        for (idx, o) in outputs.iter().enumerate() {
            let _ = idx;
            b.outputs.push(declared(o, self.dtype, &self.elem));
        }
        b
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_scans_match_the_reference(case in case()) {
        let states: Vec<HostTensor> = (0..case.n).map(|i| case.tensor(&case.elem, case.seed + i as u64)).collect();
        let scans: Vec<HostTensor> = (0..case.m)
            .map(|j| {
                let mut shape = case.elem.clone();
                shape.insert(case.in_axes[j], case.seq);
                case.tensor(&shape, case.seed + 100 + j as u64)
            })
            .collect();
        // Negative input axes count from the back.
        let in_axes: Vec<i64> = case.in_axes.iter().enumerate()
            .map(|(j, &a)| if j % 2 == 1 { a as i64 - case.elem.len() as i64 - 1 } else { a as i64 }).collect();
        let g = scan_graph(&states, &scans, case.body(), vec![
            ("scan_input_axes", Attr::Ints(in_axes)),
            ("scan_input_directions", Attr::Ints(case.in_dirs.clone())),
            ("scan_output_axes", Attr::Ints(case.out_axes.clone())),
            ("scan_output_directions", Attr::Ints(case.out_dirs.clone())),
        ], case.k);
        let inputs: Vec<HostTensor> = states.into_iter().chain(scans).collect();
        let (gpu, cpu) = run_both(&g, &inputs);
        let (gpu, cpu) = (gpu.unwrap(), cpu.unwrap());
        prop_assert_eq!(&gpu, &cpu);
        // The same with element reads and output rows as dispatches within the pass.
        let (in_pass, _) = run_both_on(gpu_kernels_ctx(), &g, &inputs);
        prop_assert_eq!(&in_pass.unwrap(), &cpu);
        // A session's run on other values of the same shapes, its tensors on the GPU, then
        // one on these, which replays the first one's commands (see `tests/replay.rs`).
        let others: Vec<HostTensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| case.tensor(&t.shape, case.seed + 1000 + i as u64))
            .collect();
        for ctx in [ctx(), gpu_kernels_ctx()] {
            prop_assert_eq!(replayed(ctx, &g, &others, &inputs), cpu.clone());
        }
    }
}

/// `g` run by one session with its tensors on the GPU on `first`, then on `second`, which
/// must replay the first run; the second run's outputs.
fn replayed(
    ctx: &wgpu_ops::Context,
    g: &Graph,
    first: &[HostTensor],
    second: &[HostTensor],
) -> Vec<HostTensor> {
    let session = Session::new(ctx, g.clone()).unwrap();
    let on_gpu = |inputs: &[HostTensor]| -> Vec<(String, wgpu_ops::Tensor)> {
        named_inputs(inputs)
            .into_iter()
            .map(|(n, h)| (n, wgpu_ops::Tensor::from_host(ctx, &h).unwrap()))
            .collect()
    };
    drop(session.run_tensors_blocking(on_gpu(first)).unwrap());
    let out = session.run_tensors_blocking(on_gpu(second)).unwrap();
    assert_eq!(session.replayed_runs(), 1, "not replayed");
    out.iter()
        .map(|(_, t)| t.to_host_blocking().unwrap())
        .collect()
}

/// An outer Scan over `x` ([seq, 6]) and `w` ([seq, 8]): each step's inner Scan sums the row
/// of `x`, and the outer state adds that sum times the row of `w`.
fn nested_and_plain_elements(seq: usize) -> (Graph, Vec<(String, HostTensor)>) {
    let inner = Graph::new()
        .input("acc", DType::F32, &[])
        .input("v", DType::F32, &[])
        .node(
            Node::new("Add", "sum")
                .inputs(["acc", "v"])
                .outputs(["acc2"]),
        )
        .output("acc2");
    let outer = Graph::new()
        .input("total", DType::F32, &[Some(8)])
        .input("row", DType::F32, &[Some(6)])
        .input("w", DType::F32, &[Some(8)])
        .constant("zero", HostTensor::from_vec(vec![], &[0f32]).unwrap())
        .node(
            Node::new("Scan", "inner")
                .inputs(["zero", "row"])
                .outputs(["last"])
                .attr("body", Attr::Graph(Box::new(inner)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .node(Node::new("Mul", "m").inputs(["last", "w"]).outputs(["m"]))
        .node(
            Node::new("Add", "t")
                .inputs(["total", "m"])
                .outputs(["total2"]),
        )
        .output("total2");
    let inputs = [f32s(&[8], 31), f32s(&[seq, 6], 32), f32s(&[seq, 8], 33)];
    let g = scan_graph(&inputs[..1], &inputs[1..], outer, vec![], 0);
    (g, named_inputs(&inputs))
}

#[test]
fn a_body_with_a_nested_scan_reads_the_elements_it_does_not_use_in_place() {
    // The inner Scan reads the outer row of `x` through its own commands, which the outer loop
    // cannot rebind: that element is copied each outer step. The row of `w`, which only the
    // outer body's own kernels read, is laid out once and read in place: with the CPU
    // kernels (whose element moves are buffer copies) an outer step makes 2 copies, not 3 as
    // when any nested Scan kept every element copied. Against the reference with either
    // kernel set.
    for cpu_kernels in [false, true] {
        let (_, copies) = cost_of_one_more_step(nested_and_plain_elements, 20, cpu_kernels);
        if cpu_kernels {
            assert_eq!(copies, 2);
        }
    }
}

#[test]
fn nested_scan_reading_an_outer_value() {
    // Outer Scan over the rows of X; for each row an inner Scan computes the running sum of
    // (row + bias) along the columns, where `bias` is an outer-graph value read by the inner
    // body; the outer state accumulates the last running sum of each row.
    let x =
        HostTensor::from_vec(vec![4, 6], &(0..24).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
    let bias = HostTensor::from_vec(vec![], &[0.5f32]).unwrap();
    let inner = Graph::new()
        .input("acc", DType::F32, &[])
        .input("v", DType::F32, &[])
        .node(
            Node::new("Add", "plus_bias")
                .inputs(["v", "bias"])
                .outputs(["vb"]),
        )
        .node(
            Node::new("Add", "sum")
                .inputs(["acc", "vb"])
                .outputs(["acc2"]),
        )
        .node(
            Node::new("Identity", "emit")
                .inputs(["acc2"])
                .outputs(["out"]),
        )
        .output("acc2")
        .output("out");
    let outer = Graph::new()
        .input("total", DType::F32, &[])
        .input("row", DType::F32, &[Some(6)])
        .constant("zero", HostTensor::from_vec(vec![], &[0f32]).unwrap())
        .node(
            Node::new("Scan", "inner")
                .inputs(["zero", "row"])
                .outputs(["last", "running"])
                .attr("body", Attr::Graph(Box::new(inner)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .node(
            Node::new("Add", "t")
                .inputs(["total", "last"])
                .outputs(["total2"]),
        )
        .output("total2")
        .output("running");
    let g = Graph::new()
        .input("in0", DType::F32, &[])
        .input("in1", DType::F32, &[Some(4), Some(6)])
        .input("bias", DType::F32, &[])
        .node(
            Node::new("Scan", "outer")
                .inputs(["in0", "in1"])
                .outputs(["out0", "out1"])
                .attr("body", Attr::Graph(Box::new(outer)))
                .attr("num_scan_inputs", Attr::Int(1))
                .attr("scan_output_axes", Attr::Ints(vec![1])),
        )
        .output("out0")
        .output("out1");
    let init = HostTensor::from_vec(vec![], &[1f32]).unwrap();
    let named = vec![
        ("in0".to_string(), init),
        ("in1".to_string(), x),
        ("bias".to_string(), bias),
    ];
    let gpu = Session::new(ctx(), g.clone())
        .unwrap()
        .run_blocking(named.clone())
        .unwrap();
    let cpu = run_graph(&g, &named, &Default::default()).unwrap();
    assert_eq!(gpu[0].1, cpu[0]);
    assert_eq!(gpu[1].1, cpu[1]);
    assert_eq!(gpu[1].1.shape, [6, 4]);
    // Row r's running sums end at sum(row) + 6 * 0.5; the total adds them to 1.
    let total: f32 = 1.0 + (0..24).map(|v| v as f32).sum::<f32>() + 4.0 * 3.0;
    assert_eq!(gpu[0].1.to_vec::<f32>().unwrap(), [total]);
}

fn cumsum(seq: usize) -> (Graph, Vec<HostTensor>) {
    cumsum_of_width(seq, 8)
}

/// The running sum of `width`-element rows, with each row's running sum after `Relu` as a scan
/// output.
fn cumsum_of_width(seq: usize, width: usize) -> (Graph, Vec<HostTensor>) {
    let body = Graph::new()
        .input("sum", DType::F32, &[Some(width)])
        .input("x", DType::F32, &[Some(width)])
        .node(
            Node::new("Add", "add")
                .inputs(["sum", "x"])
                .outputs(["next"]),
        )
        .node(Node::new("Relu", "relu").inputs(["next"]).outputs(["y"]))
        .output("next");
    let mut body = body;
    body.outputs.push(declared("y", DType::F32, &[width]));
    let states = vec![HostTensor::from_vec(vec![width], &vec![0f32; width]).unwrap()];
    let scans = vec![f32s(&[seq, width], 9)];
    let g = scan_graph(&states, &scans, body, vec![], 1);
    (g, states.into_iter().chain(scans).collect())
}

#[test]
fn submissions_and_waits_do_not_grow_with_the_sequence() {
    // A context of its own: other tests submit work concurrently on the shared one.
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    for seq in [10, 1000] {
        let (g, inputs) = cumsum(seq);
        let session = Session::new(&ctx, g.clone()).unwrap();
        let named = named_inputs(&inputs);
        let before = ctx.stats();
        let out = session.run_blocking(named.clone()).unwrap();
        let after = ctx.stats();
        // No host round-trip per iteration: one submission per 4096 commands of the loop (and
        // a wait for the one before it), one for reading the outputs back, one final wait.
        let chunks = (after.dispatches - before.dispatches) / 4096;
        assert_eq!(
            after.submissions - before.submissions,
            2 + chunks,
            "seq {seq}"
        );
        assert_eq!(
            after.host_waits - before.host_waits,
            1 + chunks.saturating_sub(1),
            "seq {seq}"
        );
        assert!(chunks <= seq as u64 / 500, "seq {seq}: {chunks} chunks");
        let want = run_graph(&g, &named, &Default::default()).unwrap();
        let got: Vec<HostTensor> = out.into_iter().map(|(_, t)| t).collect();
        let (g0, w0) = (
            got[0].to_vec::<f32>().unwrap(),
            want[0].to_vec::<f32>().unwrap(),
        );
        for (a, b) in g0.iter().zip(&w0) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

/// Scatters in a body write into their data where it lies when nothing reads it afterwards
/// (each replay computes it anew), and copy it when a later node of the body reads it: both
/// agree with the reference over every iteration, on both kernel sets.
#[test]
fn body_scatters_write_in_place_only_into_values_read_no_more() {
    let (len, seq) = (8usize, 6usize);
    let body = Graph::new()
        .input("acc", DType::F32, &[Some(len)])
        .input("k", DType::I64, &[Some(1)])
        .input("x", DType::F32, &[Some(1)])
        .constant("one", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
        // Read by its scatter only: written over.
        .node(Node::new("Neg", "neg").inputs(["acc"]).outputs(["neg"]))
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["neg", "k", "x"])
                .outputs(["put"]),
        )
        .node(
            Node::new("Neg", "acc_out")
                .inputs(["put"])
                .outputs(["acc_out"]),
        )
        // Read again after its scatter: copied.
        .node(Node::new("Abs", "root").inputs(["acc"]).outputs(["root"]))
        .node(
            Node::new("ScatterElements", "put_again")
                .inputs(["root", "k", "x"])
                .outputs(["put_again"]),
        )
        .node(
            Node::new("Add", "y")
                .inputs(["root", "put_again"])
                .outputs(["y"]),
        )
        .node(
            Node::new("Add", "k_out")
                .inputs(["k", "one"])
                .outputs(["k_out"]),
        )
        .output("acc_out")
        .output("k_out")
        .output("y");
    let acc = HostTensor::from_vec(
        vec![len],
        &(1..=len).map(|v| (v * v) as f32).collect::<Vec<_>>(),
    )
    .unwrap();
    let k = HostTensor::from_vec(vec![1], &[1i64]).unwrap();
    let xs: Vec<f32> = (0..seq).map(|t| 100.0 + t as f32).collect();
    let x = HostTensor::from_vec(vec![seq, 1], &xs).unwrap();
    let g = scan_graph(
        &[acc.clone(), k.clone()],
        std::slice::from_ref(&x),
        body,
        vec![],
        1,
    );
    let inputs = [acc, k, x];
    for ctx in [ctx(), gpu_kernels_ctx()] {
        let (gpu, reference) = run_both_on(ctx, &g, &inputs);
        let (gpu, reference) = (gpu.unwrap(), reference.unwrap());
        for (got, want) in gpu.iter().zip(&reference) {
            assert_eq!(got, want, "cpu_kernels {}", ctx.cpu_kernels());
        }
        // Positions 1 to 6 hold their iteration's x, negated by the last Neg.
        let acc = gpu[0].to_vec::<f32>().unwrap();
        assert_eq!(acc[1..=seq], xs.iter().map(|v| -v).collect::<Vec<_>>()[..]);
    }
}

/// A Scan that carries a cache of `len` f32 and a position, and writes its element into the
/// cache at the position each step (a decode loop's KV cache, in one dimension). Its scan
/// output: the sum of the cache after the step, or where `old_too` the sum of what the step
/// changed, read from a view of the cache made before the scatter and held past it, and that
/// view (the cache before each step).
fn cache_updates(seq: usize, len: usize, old_too: bool) -> (Graph, Vec<(String, HostTensor)>) {
    let mut body = Graph::new()
        .input("cache", DType::F32, &[Some(len)])
        .input("k", DType::I64, &[Some(1)])
        .input("x", DType::F32, &[Some(1)])
        .constant("one", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
        .constant(
            "shape",
            HostTensor::from_vec(vec![1], &[len as i64]).unwrap(),
        );
    if old_too {
        body = body.node(
            Node::new("Reshape", "old")
                .inputs(["cache", "shape"])
                .outputs(["old"]),
        );
    }
    body = body
        .node(
            Node::new("ScatterElements", "put")
                .inputs(["cache", "k", "x"])
                .outputs(["put"]),
        )
        .node(
            Node::new("Add", "k_out")
                .inputs(["k", "one"])
                .outputs(["k_out"]),
        );
    let summed = if old_too {
        body = body.node(
            Node::new("Sub", "change")
                .inputs(["put", "old"])
                .outputs(["change"]),
        );
        "change"
    } else {
        "put"
    };
    body = body
        .node(Node::new("ReduceSum", "y").inputs([summed]).outputs(["y"]))
        .output("put")
        .output("k_out")
        .output("y");
    if old_too {
        body = body.output("old");
    }
    let cache = HostTensor::from_vec(
        vec![len],
        &(0..len).map(|v| (v % 7) as f32).collect::<Vec<_>>(),
    )
    .unwrap();
    let k = HostTensor::from_vec(vec![1], &[2i64]).unwrap();
    let xs: Vec<f32> = (0..seq).map(|t| 100.0 + t as f32).collect();
    let x = HostTensor::from_vec(vec![seq, 1], &xs).unwrap();
    let g = scan_graph(
        &[cache.clone(), k.clone()],
        std::slice::from_ref(&x),
        body,
        vec![],
        1 + usize::from(old_too),
    );
    (g, named_inputs(&[cache, k, x]))
}

/// [`cache_updates`] where the row written is computed from the cache itself (its first
/// element plus the step's, bounded): the reads of the old cache are recorded before the
/// scatter, and the scatter still writes where the cache lies.
fn cache_updates_from_itself(seq: usize, len: usize) -> (Graph, Vec<(String, HostTensor)>) {
    let (mut g, inputs) = cache_updates(seq, len, false);
    let Attr::Graph(body) = g.nodes[0].attrs.get_mut("body").unwrap() else {
        unreachable!("a Scan")
    };
    let i64s = |v: &[i64]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let bound = |v: f32| HostTensor::from_vec(vec![], &[v]).unwrap();
    let mut nodes = vec![
        Node::new("Add", "sum")
            .inputs(["cache", "x"])
            .outputs(["sum"]),
        Node::new("Clip", "bounded")
            .inputs(["sum", "lo", "hi"])
            .outputs(["bounded"]),
        Node::new("Slice", "row")
            .inputs(["bounded", "zero", "one_i", "one_i", "zero"])
            .outputs(["row"]),
    ];
    for (name, value) in [("zero", i64s(&[0])), ("one_i", i64s(&[1]))] {
        body.constants.push((name.into(), value.into()));
    }
    for (name, value) in [("lo", bound(-1000.0)), ("hi", bound(1000.0))] {
        body.constants.push((name.into(), value.into()));
    }
    for n in body.nodes.iter_mut().filter(|n| n.op == "ScatterElements") {
        n.inputs[2] = "row".into();
    }
    nodes.append(&mut body.nodes);
    body.nodes = nodes;
    (g, inputs)
}

/// A step: the Add and Clip (fused), the Slice (a 4-byte copy with the CPU adapters'
/// kernels, else a dispatch), the scatter's index check, the scatter, the position's Add, the
/// sum; no copy of the cache (the commands that read it before the scatter, and the values
/// released, hold handles to its buffer that read nothing more: counted as such, not as
/// readers, else the state would go back to two buffers and a copy per step).
#[test]
fn a_state_written_with_values_read_from_it_is_updated_where_it_lies() {
    for cpu_kernels in [true, false] {
        let got = cost_of_one_more_step(|seq| cache_updates_from_itself(seq, 4096), 9, cpu_kernels);
        let want = if cpu_kernels { (5, 1) } else { (6, 0) };
        assert_eq!(got, want, "cpu kernels {cpu_kernels}");
    }
}

/// A state the body scatters into, read by nothing after the scatter, is kept in one buffer
/// that the scatter writes into where it lies: no copy of the whole cache per step (two
/// buffers, as other states have, need the old cache copied into the other buffer first).
/// Where the body still holds a view of the old state after the scatter, the state keeps its
/// two buffers and the view reads the old cache. Bit for bit against the reference (in
/// `cost_of_one_more_step`) on both kernel sets.
#[test]
fn a_state_the_body_scatters_into_is_updated_where_it_lies() {
    for cpu_kernels in [true, false] {
        let (in_place, in_place_copies) =
            cost_of_one_more_step(|seq| cache_updates(seq, 4096, false), 9, cpu_kernels);
        let (kept, kept_copies) =
            cost_of_one_more_step(|seq| cache_updates(seq, 4096, true), 9, cpu_kernels);
        // A step: the scatter's index check, the scatter, the position's Add, the sum. Where
        // the old cache is still read (the Sub fuses into the sum), two copies of the cache (buffer copies with
        // the CPU adapters' kernels, else dispatches), one into the other state buffer and one
        // into the old cache's row of its scan output.
        let why = format!("cpu kernels {cpu_kernels}");
        assert_eq!((in_place, in_place_copies), (4, 0), "{why}");
        let copy = if cpu_kernels { (4, 2) } else { (6, 0) };
        assert_eq!((kept, kept_copies), copy, "{why}");
        // With `scan_in_place` off the cache ping-pongs between two buffers: its copy, and
        // the element's read and the sum's write (two buffer copies with the CPU adapters'
        // kernels, one dispatch with the others).
        let (g, inputs) = cache_updates(9, 4096, false);
        let (got, d9, c9) = counted_run(&g, &inputs, cpu_kernels, false);
        assert_eq!(got, run_graph(&g, &inputs, &Default::default()).unwrap());
        let (g, inputs) = cache_updates(10, 4096, false);
        let (_, d10, c10) = counted_run(&g, &inputs, cpu_kernels, false);
        let copies = if cpu_kernels { (4, 3) } else { (6, 0) };
        assert_eq!((d10 - d9, c10 - c9), copies, "{why}");
    }
    // Step t changes position 2 + t from t % 7 ... to 100 + t.
    let (g, inputs) = cache_updates(6, 16, true);
    let got = counted_run(&g, &inputs, true, true).0;
    let want: Vec<f32> = (0..6)
        .map(|t| 100.0 + t as f32 - ((2 + t) % 7) as f32)
        .collect();
    assert_eq!(got[2].to_vec::<f32>().unwrap(), want);
}

/// Where the executor declines the one buffer (the held view of [`cache_updates`]), the body's
/// first capture is thrown away: its buffers go back to the pool, so that a session's later
/// runs create none (as where the one buffer is kept).
#[test]
fn a_capture_thrown_away_hands_its_buffers_back() {
    for (cpu_kernels, old_too) in [(true, true), (false, true), (true, false)] {
        let (g, inputs) = cache_updates(9, 4096, old_too);
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        let session = Session::new(&ctx, g.clone()).unwrap();
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let mut created = Vec::new();
        for _ in 0..4 {
            let before = ctx.stats().buffers_created;
            let got: Vec<HostTensor> = session
                .run_blocking(inputs.clone())
                .unwrap()
                .into_iter()
                .map(|(_, t)| t)
                .collect();
            assert_eq!(got, want);
            created.push(ctx.stats().buffers_created - before);
        }
        let why = format!("cpu kernels {cpu_kernels}, old cache held {old_too}: {created:?}");
        assert_eq!(created[3], 0, "{why}");
    }
}

#[test]
fn sequence_length_zero_and_one() {
    // Decision 13: "A sequence length of 0 gives the initial states back and scan outputs of
    // length 0 along their scan axis, with element shapes taken from the body's declared output
    // shapes; where the body does not declare them, it is an error that names the output."
    let (g, mut inputs) = cumsum(0);
    let (gpu, cpu) = run_both(&g, &inputs);
    let gpu = gpu.unwrap();
    assert_eq!(gpu, cpu.unwrap());
    assert_eq!(gpu[0], inputs[0]);
    assert_eq!(gpu[1].shape, [0, 8]);
    let (mut g, _) = cumsum(0);
    if let Attr::Graph(body) = g.nodes[0].attrs.get_mut("body").unwrap() {
        body.outputs[1] = ValueInfo::named("y");
    }
    let e = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![
            ("in0".into(), inputs[0].clone()),
            ("in1".into(), inputs[1].clone()),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("scan output 'y'"), "{e}");
    inputs[1] = f32s(&[1, 8], 3);
    let (g, _) = cumsum(1);
    let (gpu, cpu) = run_both(&g, &inputs);
    assert_eq!(gpu.unwrap(), cpu.unwrap());
}

#[test]
fn errors() {
    let msg = |g: Graph, inputs: &[HostTensor]| -> String {
        let named = named_inputs(inputs);
        match Session::new(ctx(), g).and_then(|s| s.run_blocking(named)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("expected an error"),
        }
    };
    let body = || {
        Graph::new()
            .input("s", DType::F32, &[Some(8)])
            .input("x", DType::F32, &[Some(8)])
            .node(Node::new("Add", "add").inputs(["s", "x"]).outputs(["n"]))
            .output("n")
            .output("x")
    };
    let s = f32s(&[8], 1);
    // Scan inputs of different lengths.
    let g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2), f32s(&[4, 8], 3)],
        body().input("x2", DType::F32, &[Some(8)]),
        vec![],
        1,
    );
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2), f32s(&[4, 8], 3)]);
    assert!(
        m.contains("scan input 1 has 4 elements along its scan axis but scan input 0 has 3"),
        "{m}"
    );
    // Body input count that does not match N + M.
    let g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2)],
        body().input("extra", DType::F32, &[Some(8)]),
        vec![],
        1,
    );
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2)]);
    assert!(
        m.contains("the body has 3 inputs but the Scan has 1 states and 1 scan inputs"),
        "{m}"
    );
    // Body outputs that do not match N + K (the node names 3 outputs, the body gives 2).
    let g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2)],
        body(),
        vec![],
        2,
    );
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2)]);
    assert!(
        m.contains("the node names 3 outputs but the body gives 1 states and 1 scan outputs"),
        "{m}"
    );
    // A state whose shape changes between iterations.
    let growing = Graph::new()
        .input("s", DType::F32, &[None])
        .input("x", DType::F32, &[Some(8)])
        .node(
            Node::new("Concat", "c")
                .inputs(["s", "x"])
                .outputs(["n"])
                .attr("axis", Attr::Int(0)),
        )
        .output("n");
    let g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2)],
        growing,
        vec![],
        0,
    );
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2)]);
    assert!(
        m.contains(
            "is f32 [16] but was f32 [8] in the iteration before; states must keep their shape"
        ),
        "{m}"
    );
    // Axes out of range.
    let g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2)],
        body(),
        vec![("scan_input_axes", Attr::Ints(vec![2]))],
        1,
    );
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2)]);
    assert!(
        m.contains("scan_input_axes[0] is 2, outside [-2, 1]"),
        "{m}"
    );
    let g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2)],
        body(),
        vec![("scan_output_axes", Attr::Ints(vec![-3]))],
        1,
    );
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2)]);
    assert!(m.contains("scan_output_axes[0] is -3"), "{m}");
    // num_scan_inputs larger than the inputs given.
    let mut g = scan_graph(
        std::slice::from_ref(&s),
        &[f32s(&[3, 8], 2)],
        body(),
        vec![],
        1,
    );
    g.nodes[0]
        .attrs
        .insert("num_scan_inputs".into(), Attr::Int(3));
    let m = msg(g, &[s.clone(), f32s(&[3, 8], 2)]);
    assert!(
        m.contains("num_scan_inputs is 3 but 2 inputs are given"),
        "{m}"
    );
}

// Elements of every dtype: 1- and 2-byte elements of odd sizes are the hard case (scan-input
// elements are gathered at their offset, scan-output rows are padded to whole words and
// compacted by the final gather); states pass through a data-movement body of any dtype.
dtype_tests!(sub_word_elements_of_any_dtype, |dtype: DType| {
    let body = Graph::new()
        .input("s", dtype, &[Some(3)])
        .input("x", dtype, &[Some(5)])
        .constant("b", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
        .constant("e", HostTensor::from_vec(vec![1], &[4i64]).unwrap())
        .constant("r", HostTensor::from_vec(vec![1], &[-1i64]).unwrap())
        .constant("lo", HostTensor::from_vec(vec![1], &[i64::MIN]).unwrap())
        .node(
            Node::new("Slice", "mid")
                .inputs(["x", "b", "e"].into_iter().chain(["b"]).collect::<Vec<_>>())
                .outputs(["mid"]),
        )
        .node(
            Node::new("Slice", "rev")
                .inputs(["s", "r", "lo", "r"])
                .outputs(["s2"]),
        )
        .output("s2");
    let mut body = body;
    body.outputs.push(declared("mid", dtype, &[3]));
    body.outputs.push(ValueInfo::named("x"));
    let states = [random_tensor(1, dtype, &[3])];
    let scans = [random_tensor(2, dtype, &[5, 7])];
    let g = scan_graph(
        &states,
        &scans,
        body,
        vec![
            ("scan_input_axes", Attr::Ints(vec![-1])),
            ("scan_input_directions", Attr::Ints(vec![1])),
            ("scan_output_axes", Attr::Ints(vec![1, 0])),
            ("scan_output_directions", Attr::Ints(vec![1, 0])),
        ],
        2,
    );
    let inputs = [states[0].clone(), scans[0].clone()];
    let (gpu, cpu) = run_both(&g, &inputs);
    let (gpu, cpu) = (gpu.unwrap(), cpu.unwrap());
    assert_eq!(gpu[1].shape, [3, 7], "{dtype}");
    assert_eq!(gpu[2].shape, [7, 5], "{dtype}");
    assert_eq!(gpu, cpu, "{dtype}");
});

/// A running sum of the rows of `x` ([n, 4] f32) from zero, as `levels` Scans nested in each
/// other (`x` then has `levels` sequence axes: each body scans its element's rows).
fn running_sum(levels: usize, shape: &[usize]) -> Graph {
    fn body(depth: usize) -> Graph {
        let row: Vec<Option<usize>> = std::iter::repeat_n(None, depth).chain([Some(4)]).collect();
        let b = Graph::new()
            .input("sum", DType::F32, &[Some(4)])
            .input("row", DType::F32, &row);
        let b = if depth == 0 {
            b.node(
                Node::new("Add", "add")
                    .inputs(["sum", "row"])
                    .outputs(["next"]),
            )
        } else {
            b.node(
                Node::new("Scan", format!("scan{depth}"))
                    .inputs(["sum", "row"])
                    .outputs(["next"])
                    .attr("body", Attr::Graph(Box::new(body(depth - 1))))
                    .attr("num_scan_inputs", Attr::Int(1)),
            )
        };
        b.output("next")
    }
    let dims: Vec<Option<usize>> = shape.iter().map(|&d| Some(d)).collect();
    Graph::new()
        .input("x", DType::F32, &dims)
        .constant("zero", HostTensor::from_vec(vec![4], &[0f32; 4]).unwrap())
        .node(
            Node::new("Scan", "scan")
                .inputs(["zero", "x"])
                .outputs(["total"])
                .attr("body", Attr::Graph(Box::new(body(levels - 1))))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("total")
}

fn sum_input(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::from_vec(
        shape.to_vec(),
        &(0..n).map(|i| (i % 5) as f32).collect::<Vec<_>>(),
    )
    .unwrap()
}

#[test]
fn long_scans_are_submitted_in_chunks() {
    // 12 000 iterations of one dispatch (elements in place): about three command buffers'
    // worth (4096 commands each), so the recorder submits along the way instead of holding
    // every command until the end.
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let g = running_sum(1, &[12_000, 4]);
    let x = sum_input(&[12_000, 4]);
    let before = ctx.stats();
    let got = Session::new(&ctx, g.clone())
        .unwrap()
        .run_blocking(vec![("x".into(), x.clone())])
        .unwrap();
    let after = ctx.stats();
    assert!(after.submissions - before.submissions >= 4, "{after:?}");
    let want = run_graph(&g, &[("x".into(), x)], &Default::default()).unwrap();
    assert_eq!(got[0].1, want[0]);
}

#[test]
fn deeply_nested_scans_of_length_one_take_linear_work() {
    // Scans nested 40 deep, each over one element: every level captures its body once, so the
    // buffers made grow with the depth, not as 2^depth (one capture per iteration parity).
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let shape: Vec<usize> = std::iter::repeat_n(1, 40).chain([4]).collect();
    let g = running_sum(40, &shape);
    let x = sum_input(&shape);
    let before = ctx.stats();
    let got = Session::new(&ctx, g)
        .unwrap()
        .run_blocking(vec![("x".into(), x.clone())])
        .unwrap();
    let made = ctx.stats().buffers_created - before.buffers_created;
    assert!(made <= 8 * 40, "{made} buffers for 40 levels");
    assert_eq!(
        got[0].1.to_vec::<f32>().unwrap(),
        x.to_vec::<f32>().unwrap()
    );
}

#[test]
fn work_beyond_the_limit_is_refused_before_the_loop_runs() {
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_commands: Some(1000),
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    // 3 levels of 20: 8000 innermost iterations, refused by the outermost Scan before any of
    // its iterations is encoded.
    let shape = [20, 20, 20, 4];
    let before = ctx.stats();
    let e = Session::new(&ctx, running_sum(3, &shape))
        .unwrap()
        .run_blocking(vec![("x".into(), sum_input(&shape))])
        .unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(&e, Error::Node { source, .. } if matches!(**source, Error::LimitExceeded { op: "Scan", max: 1000, .. })),
        "{m}"
    );
    assert!(m.contains("ContextOptions::max_commands"), "{m}");
    assert_eq!(ctx.stats().dispatches, before.dispatches);
    // Within the limit the same context runs it.
    let shape = [4, 4, 4];
    let g = running_sum(2, &shape);
    let got = Session::new(&ctx, g.clone())
        .unwrap()
        .run_blocking(vec![("x".into(), sum_input(&shape))])
        .unwrap();
    let want = run_graph(&g, &[("x".into(), sum_input(&shape))], &Default::default()).unwrap();
    assert_eq!(got[0].1, want[0]);
}

// Scan outputs whose elements are empty (a slice that takes nothing): rows of 0 bytes, never
// a padding word (for 8-byte dtypes a word is not even one element). Found by the fuzzer.
dtype_tests!(scan_outputs_of_empty_elements, |dtype: DType| {
    let body = Graph::new()
        .input("e", dtype, &[Some(2), Some(0)])
        .node(Node::new("Identity", "id").inputs(["e"]).outputs(["f"]))
        .output("f");
    let scans = [random_tensor(3, dtype, &[4, 2, 0])];
    let g = scan_graph(
        &[],
        &scans,
        body,
        vec![("scan_output_axes", Attr::Ints(vec![1]))],
        1,
    );
    let (gpu, cpu) = run_both(&g, &scans);
    let (gpu, cpu) = (gpu.unwrap(), cpu.unwrap());
    assert_eq!(gpu[0].shape, [2, 4, 0]);
    assert_eq!(gpu, cpu);
});

/// Runs `g` once on a context of its own (so that its counts are exact) with the given kernel
/// set and `scan_in_place`: the outputs, and the dispatches and copies the run encoded.
fn counted_run(
    g: &Graph,
    inputs: &[(String, HostTensor)],
    cpu_kernels: bool,
    in_place: bool,
) -> (Vec<HostTensor>, u64, u64) {
    let options = wgpu_ops::ContextOptions {
        cpu_kernels: Some(cpu_kernels),
        scan_in_place: Some(in_place),
        ..Default::default()
    };
    counted_run_with(g, inputs, options)
}

/// The dispatches and copies one more step costs: the Scan `build(seq)` makes, run at `seq`
/// and `seq + 1` with the scan inputs and outputs in place, each run bit for bit against the
/// reference.
fn cost_of_one_more_step(
    build: impl Fn(usize) -> (Graph, Vec<(String, HostTensor)>),
    seq: usize,
    cpu_kernels: bool,
) -> (u64, u64) {
    let mut counts = Vec::new();
    for seq in [seq, seq + 1] {
        let (g, inputs) = build(seq);
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        let (got, dispatches, copies) = counted_run(&g, &inputs, cpu_kernels, true);
        assert_eq!(got, want, "cpu kernels {cpu_kernels}, {seq}");
        counts.push((dispatches, copies));
    }
    (counts[1].0 - counts[0].0, counts[1].1 - counts[0].1)
}

/// [`counted_run`] on a context made with `options`.
fn counted_run_with(
    g: &Graph,
    inputs: &[(String, HostTensor)],
    options: wgpu_ops::ContextOptions,
) -> (Vec<HostTensor>, u64, u64) {
    let ctx = wgpu_ops::Context::new_blocking(options).unwrap();
    let session = Session::new(&ctx, g.clone()).unwrap();
    let before = ctx.stats();
    let got = session.run_blocking(inputs.to_vec()).unwrap();
    let after = ctx.stats();
    let got = got.into_iter().map(|(_, t)| t).collect();
    (
        got,
        after.dispatches - before.dispatches,
        after.copies - before.copies,
    )
}

#[test]
fn elements_are_read_and_written_in_place_or_else_by_dispatches_or_copies() {
    // An iteration of the running sum reads its row of `x` and writes its row of `ys`. Rows of
    // 64 f32 (256 bytes, a multiple of every device's storage offset alignment) are bound in
    // place at the iteration's offset: an iteration is the body's two dispatches and nothing
    // else, with either kernel set. Rows of 3 f32 (12 bytes) and of 16 385 are not at the device's
    // alignment: one dispatch before the loop lays `x` out as padded rows, the iteration's
    // output rows are padded likewise, and one gather after the loop packs them, so an
    // iteration is still its body alone. The initial state, an upload nothing reads after the
    // Scan, is where the first iteration reads it: no copy of it.
    // `scan_in_place: false` turns this off (for comparisons): with the GPU kernel variants
    // one dispatch after the body writes the row, reads the next element and advances a GPU
    // counter (3 per iteration; no buffer copy ends the compute pass), with the CPU adapters'
    // kernels two buffer copies do (cheaper there), and the counter's clear and the first
    // element's read come before the loop.
    for (width, cpu_kernels, in_place, dispatches, copies) in [
        (64, false, true, 200, 0),
        (64, true, true, 200, 0),
        (64, false, false, 300 + 1, 1),
        (3, false, true, 200 + 2, 0),
        (3, true, true, 200 + 2, 0),
        (3, false, false, 300 + 1, 1),
        (3, true, false, 200, 200),
        // Rows of 64 KiB and more have buffers of whole 16-byte quads: 65 540 bytes of data
        // bound in a 65 552-byte slot, padded rows again.
        (16385, false, true, 200 + 2, 0),
        (16385, true, true, 200 + 2, 0),
    ] {
        let (g, inputs) = cumsum_of_width(100, width);
        let named = named_inputs(&inputs);
        let want = run_graph(&g, &named, &Default::default()).unwrap();
        let got = counted_run(&g, &named, cpu_kernels, in_place);
        let case = format!("width {width}, cpu kernels {cpu_kernels}, in place {in_place}");
        assert_eq!(got, (want, dispatches, copies), "{case}");
    }
}

/// A Scan over the rows of `x` ([seq, width] f32) forwards and backwards at once, the body
/// combining the two rows with `op`, its output in `output_direction`.
fn scanned_twice(seq: usize, width: usize, op: &str, output_direction: i64) -> Graph {
    let body = Graph::new()
        .input("a", DType::F32, &[Some(width)])
        .input("b", DType::F32, &[Some(width)])
        .node(Node::new(op, "combine").inputs(["a", "b"]).outputs(["y"]))
        .output("y");
    Graph::new()
        .input("x", DType::F32, &[Some(seq), Some(width)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["x", "x"])
                .outputs(["ys"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(2))
                .attr("scan_input_directions", Attr::Ints(vec![0, 1]))
                .attr("scan_output_directions", Attr::Ints(vec![output_direction])),
        )
        .output("ys")
}

#[test]
fn grouped_copies_read_one_tensor_twice_and_an_element_passed_on_is_the_input_itself() {
    // One tensor scanned twice (forwards and backwards): both reads share a source buffer, which
    // one dispatch may bind twice as it only reads it, so an iteration is the body's dispatch
    // and one for its copies (with elements in place turned off). A body that outputs its
    // element as is moves nothing at all: the output is the input (no dispatch, no copy).
    // Both against the reference.
    let x = f32s(&[50, 3], 3);
    let twice = scanned_twice(50, 3, "Add", 0);
    let passed_on = scan_graph(
        &[],
        std::slice::from_ref(&x),
        Graph::new()
            .input("e", DType::F32, &[Some(3)])
            .node(Node::new("Identity", "id").inputs(["e"]).outputs(["f"]))
            .output("f"),
        vec![],
        1,
    );
    // A context of its own: the dispatch counts are the context's, and other tests use the
    // shared ones concurrently. Elements in place would leave no copy to group.
    let ctx = &wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: Some(false),
        scan_in_place: Some(false),
        ..Default::default()
    })
    .unwrap();
    for (g, name, per_iteration) in [(&twice, "x", 2), (&passed_on, "in0", 0)] {
        let inputs = vec![(name.to_string(), x.clone())];
        let want = run_graph(g, &inputs, &Default::default()).unwrap();
        let before = ctx.stats().dispatches;
        let got = Session::new(ctx, g.clone())
            .unwrap()
            .run_blocking(inputs)
            .unwrap();
        let dispatches = ctx.stats().dispatches - before;
        // Plus the initial reads and the output's layout, for the grouped copies.
        let once = if per_iteration == 0 {
            0
        } else {
            dispatches % 50
        };
        assert_eq!(
            dispatches,
            per_iteration * 50 + once,
            "{name}: {dispatches} dispatches"
        );
        assert_eq!(got[0].1, want[0], "{name}");
    }
}

#[test]
fn one_tensor_read_in_place_forwards_and_backwards_into_a_reversed_output() {
    // Both reads of `x` and the reversed scan output bound in place at each iteration's
    // offsets (rows of 64 f32): an iteration is the body's one dispatch, with no copy, and
    // every row lands where the reference puts it.
    let x = f32s(&[20, 64], 5);
    let g = scanned_twice(20, 64, "Sub", 1);
    let inputs = vec![("x".to_string(), x)];
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    for cpu_kernels in [false, true] {
        let got = counted_run(&g, &inputs, cpu_kernels, true);
        assert_eq!(got, (want.clone(), 20, 0), "{cpu_kernels}");
    }
}

#[test]
fn an_element_the_body_copies_is_still_read_into_its_buffer() {
    // The body passes its element on as the state (a buffer copy into the state's buffer with
    // the CPU adapters' kernels) and writes its difference from the state as a scan output.
    // A copy cannot move with the iteration, so that element keeps its own buffer and is
    // copied into it; the output is still written in place. With the GPU kernels the copy is a dispatch, which
    // moves: the element is read in place too.
    let x = f32s(&[30, 64], 7);
    let body = Graph::new()
        .input("s", DType::F32, &[Some(64)])
        .input("e", DType::F32, &[Some(64)])
        .node(Node::new("Identity", "keep").inputs(["e"]).outputs(["s2"]))
        .node(Node::new("Sub", "step").inputs(["e", "s"]).outputs(["y"]))
        .output("s2")
        .output("y");
    let state = HostTensor::from_vec(vec![64], &[0f32; 64]).unwrap();
    let g = scan_graph(
        std::slice::from_ref(&state),
        std::slice::from_ref(&x),
        body,
        vec![],
        1,
    );
    let inputs = vec![("in0".to_string(), state), ("in1".to_string(), x)];
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    // (kernels, copies per iteration: the element's read and the state's copy, or none)
    for (cpu_kernels, copies) in [(true, 2), (false, 0)] {
        let (got, _, copied) = counted_run(&g, &inputs, cpu_kernels, true);
        assert_eq!(copied / 30, copies, "{cpu_kernels}");
        assert_eq!(got, want, "{cpu_kernels}");
    }
}

/// An RNN cell (`h = Tanh(h W + x)`) over `seq` steps of `batch` x 64 f32, with `h` both the
/// state and the scan output (in `direction`).
fn rnn_cell(seq: usize, batch: usize, direction: i64) -> (Graph, Vec<(String, HostTensor)>) {
    let hidden = 64;
    let w = f32s(&[hidden, hidden], 11);
    let w = HostTensor::from_vec(
        vec![hidden, hidden],
        &w.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v / 64.0)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let body = Graph::new()
        .input("h", DType::F32, &[Some(batch), Some(hidden)])
        .input("x", DType::F32, &[Some(batch), Some(hidden)])
        .constant("w", w)
        .node(Node::new("MatMul", "hw").inputs(["h", "w"]).outputs(["hw"]))
        .node(Node::new("Add", "in").inputs(["hw", "x"]).outputs(["a"]))
        .node(Node::new("Tanh", "act").inputs(["a"]).outputs(["h2"]))
        .output("h2")
        .output("h2");
    let h0 = f32s(&[batch, hidden], 12);
    let xs = f32s(&[seq, batch, hidden], 13);
    let g = scan_graph(
        std::slice::from_ref(&h0),
        std::slice::from_ref(&xs),
        body,
        vec![("scan_output_directions", Attr::Ints(vec![direction]))],
        1,
    );
    (g, vec![("in0".into(), h0), ("in1".into(), xs)])
}

#[test]
fn a_state_that_is_also_a_scan_output_is_kept_as_its_rows() {
    // The RNN cell's `h` is the state and the scan output. Held as the output's rows in two
    // buffers by parity (iteration t reads slot t / 2 of one and writes (t + 1) / 2 of the
    // other), an iteration is the body alone: one dispatch (the MatMul with the rest as its
    // epilogue, the step's `x` read in place), no copy, where copying `h` into its row took a
    // dispatch (GPU kernels) or a buffer copy (CPU kernels) per step. Odd and even lengths,
    // one step, several rows, and reversed outputs (the rows reversed once after the loop),
    // against the reference; per-iteration counts from the difference of two lengths.
    for (seq, batch, direction) in [
        (1, 1, 0),
        (2, 4, 0),
        (7, 1, 0),
        (8, 2, 0),
        (7, 1, 1),
        (8, 3, 1),
        (1, 2, 1),
    ] {
        let (g, inputs) = rnn_cell(seq, batch, direction);
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        for cpu_kernels in [false, true] {
            let (got, _, _) = counted_run(&g, &inputs, cpu_kernels, true);
            let case = format!(
                "seq {seq}, batch {batch}, direction {direction}, cpu kernels {cpu_kernels}"
            );
            assert_eq!(got.len(), 2, "{case}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.shape, w.shape, "{case}");
                let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
                for (a, b) in g.iter().zip(&w) {
                    assert!((a - b).abs() <= 1e-5 + 1e-4 * b.abs(), "{case}: {a} vs {b}");
                }
            }
        }
    }
    // (kernels, in place, output direction, dispatches and copies per iteration)
    for (cpu_kernels, in_place, direction, per) in [
        (false, true, 0, (1, 0)),
        (false, true, 1, (1, 0)),
        (false, false, 0, (2, 0)),
        (true, true, 0, (1, 0)),
        (true, true, 1, (1, 0)),
        (true, false, 0, (1, 2)),
    ] {
        let counts: Vec<(u64, u64)> = [10, 20]
            .into_iter()
            .map(|seq| {
                let (g, inputs) = rnn_cell(seq, 2, direction);
                let (_, d, c) = counted_run(&g, &inputs, cpu_kernels, in_place);
                (d, c)
            })
            .collect();
        let per_iteration = (
            (counts[1].0 - counts[0].0) / 10,
            (counts[1].1 - counts[0].1) / 10,
        );
        assert_eq!(
            per_iteration, per,
            "cpu kernels {cpu_kernels}, in place {in_place}"
        );
    }
}

#[test]
fn a_state_beyond_the_row_limit_is_copied_into_its_row() {
    // `ContextOptions::scan_state_rows_max_bytes`: a state of more bytes stays in its state
    // buffers and is copied into its output row each iteration (on the H100 that is faster
    // for large states); at the limit it is still held as rows. The same results either way.
    let (batch, hidden) = (2, 64);
    let state_bytes = (batch * hidden * 4) as u64;
    // (kernels, limit, dispatches and copies per iteration)
    for (cpu_kernels, limit, per) in [
        (false, state_bytes, (1, 0)),
        (false, state_bytes - 4, (2, 0)),
        (true, state_bytes, (1, 0)),
        (true, state_bytes - 4, (1, 1)),
    ] {
        let case = format!("cpu kernels {cpu_kernels}, limit {limit}");
        let mut counts = Vec::new();
        for seq in [10, 20] {
            let (g, inputs) = rnn_cell(seq, batch, 0);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            let options = wgpu_ops::ContextOptions {
                cpu_kernels: Some(cpu_kernels),
                scan_state_rows_max_bytes: Some(limit),
                ..Default::default()
            };
            let (got, d, c) = counted_run_with(&g, &inputs, options);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.shape, w.shape, "{case}");
                let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
                for (a, b) in g.iter().zip(&w) {
                    assert!((a - b).abs() <= 1e-5 + 1e-4 * b.abs(), "{case}: {a} vs {b}");
                }
            }
            counts.push((d, c));
        }
        let per_iteration = (
            (counts[1].0 - counts[0].0) / 10,
            (counts[1].1 - counts[0].1) / 10,
        );
        assert_eq!(per_iteration, per, "{case}");
    }
}

/// A body that gathers rows of its scan element by indices it computes from the element's
/// shape (`Shape -> Gather -> Range -> Gather`): the indices are known on the host, and every
/// iteration must read its own element, not one recorded for an earlier iteration.
#[test]
fn body_gathers_its_element_by_host_known_indices() {
    let (seq, rows, cols) = (5, 4, 2);
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let body = Graph::new()
        .input("x", DType::F32, &[Some(rows), Some(cols)])
        .constant("zero", scalar(0))
        .constant("one", scalar(1))
        .node(Node::new("Shape", "shape").inputs(["x"]).outputs(["shape"]))
        .node(
            Node::new("Gather", "len")
                .inputs(["shape", "zero"])
                .outputs(["len"]),
        )
        .node(
            Node::new("Range", "steps")
                .inputs(["zero", "len", "one"])
                .outputs(["steps"]),
        )
        .node(
            Node::new("Sub", "last")
                .inputs(["len", "one"])
                .outputs(["last"]),
        )
        .node(
            Node::new("Sub", "back")
                .inputs(["last", "steps"])
                .outputs(["back"]),
        )
        .node(
            Node::new("Gather", "rows")
                .inputs(["x", "back"])
                .outputs(["y"]),
        )
        .output("y");
    let xs = f32s(&[seq, rows, cols], 11);
    let g = scan_graph(&[], std::slice::from_ref(&xs), body, vec![], 1);
    for ctx in [ctx(), gpu_kernels_ctx()] {
        let (gpu, cpu) = run_both_on(ctx, &g, std::slice::from_ref(&xs));
        let (gpu, cpu) = (gpu.unwrap(), cpu.unwrap());
        assert_eq!(gpu, cpu);
        // Each element reversed along its rows.
        let x = xs.to_vec::<f32>().unwrap();
        let want: Vec<f32> = (0..seq)
            .flat_map(|t| (0..rows).rev().map(move |r| (t, r)))
            .flat_map(|(t, r)| x[(t * rows + r) * cols..][..cols].to_vec())
            .collect();
        assert_eq!(gpu[0].to_vec::<f32>().unwrap(), want);
    }
}

/// Body nodes that read no state run once before the loop on the whole scan inputs (their
/// rows then read as extra scan inputs): the same results as the reference interpreter, which
/// runs every step, including where the stacked form would not be the same computation and
/// nothing may move (a constant of the result's rank, a scan input along axis 1, mixed
/// directions), reversed inputs, moved values used as state and scan outputs, a MatMul of a
/// vector element, and a nested Scan reading a moved value.
#[test]
fn state_free_nodes_run_before_the_loop() {
    let ints = |shape: &[usize], seed: u64| -> HostTensor {
        let n: usize = shape.iter().product();
        let v: Vec<i32> = bytes(seed, n).iter().map(|&b| i32::from(b) - 128).collect();
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    };
    let (seq, k) = (6, 4);
    let w = ints(&[k, 3], 1);
    // As many rows as steps: stacked, Add(x2, c2) would broadcast without error, row by step.
    let c2 = ints(&[seq, k], 2);
    // s' = s + (x W) * 2 (moved: x W, * 2); y = x + c2 (not moved: c2 has the result's rank);
    // z = x W (a moved value as a scan output); the state itself moves nothing.
    let body = |extra: Vec<Node>, outputs: &[&str]| {
        let mut g = Graph::new()
            .input("s", DType::I32, &[Some(3)])
            .input("x", DType::I32, &[Some(k)])
            .input("x2", DType::I32, &[Some(k)])
            .constant("W", w.clone())
            .constant("c2", c2.clone())
            .constant("two", HostTensor::from_vec(vec![], &[2i32]).unwrap())
            .node(Node::new("MatMul", "xw").inputs(["x", "W"]).outputs(["xw"]))
            .node(
                Node::new("Mul", "xw2")
                    .inputs(["xw", "two"])
                    .outputs(["xw2"]),
            )
            .node(Node::new("Add", "s1").inputs(["s", "xw2"]).outputs(["s1"]))
            .node(Node::new("Add", "y").inputs(["x2", "c2"]).outputs(["y"]));
        for nd in extra {
            g = g.node(nd);
        }
        for o in outputs {
            g = g.output(*o);
        }
        g
    };
    let s0 = ints(&[3], 3);
    let xs = ints(&[seq, k], 4);
    let xs2 = ints(&[seq, k], 5);
    // (body, Scan attributes, states then scan inputs, scan outputs)
    type Case<'a> = (Graph, Vec<(&'a str, Attr)>, Vec<HostTensor>, usize);
    let mut cases: Vec<Case> = Vec::new();
    for dirs in [vec![0, 0], vec![1, 1], vec![0, 1]] {
        cases.push((
            body(vec![], &["s1", "y", "xw"]),
            vec![("scan_input_directions", Attr::Ints(dirs))],
            vec![s0.clone(), xs.clone(), xs2.clone()],
            2,
        ));
    }
    // The second scan input along axis 1: nothing moves.
    cases.push((
        body(vec![], &["s1", "y", "xw"]),
        vec![("scan_input_axes", Attr::Ints(vec![0, 1]))],
        vec![s0.clone(), xs.clone(), ints(&[k, seq], 6)],
        2,
    ));
    // A moved value as the state (the last step's x W * 2), and read by a nested Scan.
    let inner = Graph::new()
        .input("acc", DType::I32, &[])
        .input("v", DType::I32, &[])
        .node(Node::new("Add", "a").inputs(["acc", "v"]).outputs(["acc2"]))
        .node(
            Node::new("Add", "b")
                .inputs(["acc2", "xw2"])
                .outputs(["out"]),
        )
        .output("acc2")
        .output("out");
    let nested = Node::new("Scan", "inner")
        .inputs(["zero", "xw"])
        .outputs(["total", "running"])
        .attr("body", Attr::Graph(Box::new(inner)))
        .attr("num_scan_inputs", Attr::Int(1));
    let mut g = body(vec![nested], &["xw2", "running", "total"]);
    g.constants.push((
        "zero".into(),
        HostTensor::from_vec(vec![], &[0i32]).unwrap().into(),
    ));
    cases.push((g, vec![], vec![s0.clone(), xs.clone(), xs2.clone()], 2));
    for (n, (b, attrs, inputs, k_out)) in cases.into_iter().enumerate() {
        let (states, scans) = inputs.split_at(1);
        let g = scan_graph(states, scans, b, attrs, k_out);
        for ctx in [ctx(), gpu_kernels_ctx()] {
            let (gpu, cpu) = run_both_on(ctx, &g, &inputs);
            assert_eq!(gpu.unwrap(), cpu.unwrap(), "case {n}");
        }
    }
}

/// The running sum of `x`'s elements along `x_axis` (backwards), with the sum's Relu as a
/// scan output along axis 1 and `-y` (elements of `y`, an i64 scan input along `y_axis`) as a
/// reversed scan output: elements along other axes, of 8-byte integers, and rows that no
/// device's alignment divides.
fn sums_along_axes(seq: usize, x_axis: usize, y_axis: usize) -> (Graph, Vec<(String, HostTensor)>) {
    let body = Graph::new()
        .input("s", DType::F32, &[Some(3), Some(5)])
        .input("a", DType::F32, &[Some(3), Some(5)])
        .input("b", DType::I64, &[Some(2)])
        .node(Node::new("Add", "add").inputs(["s", "a"]).outputs(["n"]))
        .node(Node::new("Relu", "relu").inputs(["n"]).outputs(["p"]))
        .node(Node::new("Neg", "neg").inputs(["b"]).outputs(["c"]))
        .output("n")
        .output("p")
        .output("c");
    let mut x_shape = vec![3, 5];
    x_shape.insert(x_axis, seq);
    let mut y_shape = vec![2];
    y_shape.insert(y_axis, seq);
    let y: Vec<i64> = (0..2 * seq as i64).map(|i| i * 7 - 40).collect();
    let inputs = vec![
        HostTensor::from_vec(vec![3, 5], &[0f32; 15]).unwrap(),
        f32s(&x_shape, 11),
        HostTensor::from_vec(y_shape, &y).unwrap(),
    ];
    let g = scan_graph(
        &inputs[..1],
        &inputs[1..],
        body,
        vec![
            (
                "scan_input_axes",
                Attr::Ints(vec![x_axis as i64, y_axis as i64]),
            ),
            ("scan_input_directions", Attr::Ints(vec![1, 0])),
            ("scan_output_axes", Attr::Ints(vec![1, 0])),
            ("scan_output_directions", Attr::Ints(vec![0, 1])),
        ],
        2,
    );
    (g, named_inputs(&inputs))
}

#[test]
fn elements_along_any_axis_are_laid_out_once_and_read_and_written_in_place() {
    // Elements of 60 and 16 bytes along axes 1 and 0 or 1 (no device's storage offset
    // alignment divides 60): each scan input is laid out as padded rows by one dispatch
    // before the loop, each scan output is packed from padded rows by one after it, so an
    // iteration costs the body's dispatches alone (Add, Relu, Neg) and no copy, with either
    // kernel set. Against the reference for every case.
    for (x_axis, y_axis) in [(1, 0), (2, 1), (0, 1)] {
        for cpu_kernels in [false, true] {
            for seq in [30, 31] {
                let (g, inputs) = sums_along_axes(seq, x_axis, y_axis);
                let want = run_graph(&g, &inputs, &Default::default()).unwrap();
                let got = counted_run(&g, &inputs, cpu_kernels, true);
                // The body's three dispatches per iteration; two fills and two packs; no copy of
                // the initial state (an upload nothing reads after the Scan).
                let once = (4, 0);
                let case = format!("axes {x_axis} {y_axis}, cpu kernels {cpu_kernels}, {seq}");
                assert_eq!(got, (want, 3 * seq as u64 + once.0, once.1), "{case}");
            }
        }
    }
}

/// A Scan over 2- and 1-byte elements along axes other than 0: u16 `x` [3, seq, 4] along axis
/// 1 and i8 `y` [2, 4, seq] along axis 2: the state plus `x`'s elements, their differences
/// and `y`'s elements doubled (integers wrap).
fn narrow_elements(seq: usize) -> (Graph, Vec<(String, HostTensor)>) {
    let body = Graph::new()
        .input("s", DType::U16, &[Some(3), Some(4)])
        .input("a", DType::U16, &[Some(3), Some(4)])
        .input("b", DType::I8, &[Some(2), Some(4)])
        .node(Node::new("Add", "add").inputs(["s", "a"]).outputs(["n"]))
        .node(Node::new("Sub", "sub").inputs(["a", "s"]).outputs(["d"]))
        .node(Node::new("Add", "twice").inputs(["b", "b"]).outputs(["c"]))
        .output("n")
        .output("d")
        .output("c");
    let x: Vec<u16> = (0..12 * seq as u16)
        .map(|i| i.wrapping_mul(2_654))
        .collect();
    let y: Vec<i8> = (0..8 * seq).map(|i| (i * 37 % 256) as u8 as i8).collect();
    let inputs = vec![
        HostTensor::from_vec(vec![3, 4], &[65_000u16; 12]).unwrap(),
        HostTensor::from_vec(vec![3, seq, 4], &x).unwrap(),
        HostTensor::from_vec(vec![2, 4, seq], &y).unwrap(),
    ];
    let g = scan_graph(
        &inputs[..1],
        &inputs[1..],
        body,
        vec![("scan_input_axes", Attr::Ints(vec![1, 2]))],
        2,
    );
    (g, named_inputs(&inputs))
}

#[test]
fn narrow_elements_along_other_axes_are_laid_out_once() {
    // 24- and 8-byte rows of 2- and 1-byte elements along axes 1 and 2: each input is moved
    // to scan-axis-first order and laid out as padded rows once before the loop (the strided
    // copy writes 4- and 8-byte elements only, so the bytes are packed by a gather first), so
    // one more step costs the body's three dispatches and no copy, with either kernel set.
    // Against the reference, bit for bit.
    for cpu_kernels in [false, true] {
        let cost = cost_of_one_more_step(narrow_elements, 30, cpu_kernels);
        assert_eq!(cost, (3, 0), "cpu kernels {cpu_kernels}");
    }
}

#[test]
fn a_state_that_is_a_scan_output_keeps_padded_rows() {
    // A u16 state of 24 bytes (no device's storage offset alignment divides it) that is also
    // a scan output, forwards and reversed: its rows alternate between two buffers of slots
    // padded to the alignment and are interleaved after the loop, so one more step costs the
    // body's one dispatch and no copy, with either kernel set. Against the reference.
    for direction in [0, 1] {
        let build = |seq: usize| {
            let body = Graph::new()
                .input("s", DType::U16, &[Some(3), Some(4)])
                .input("a", DType::U16, &[Some(3), Some(4)])
                .node(Node::new("Add", "add").inputs(["s", "a"]).outputs(["n"]))
                .output("n")
                .output("n");
            let x: Vec<u16> = (0..12 * seq as u16)
                .map(|i| i.wrapping_mul(2_654))
                .collect();
            let inputs = vec![
                HostTensor::from_vec(vec![3, 4], &[65_000u16; 12]).unwrap(),
                HostTensor::from_vec(vec![seq, 3, 4], &x).unwrap(),
            ];
            let attrs = vec![("scan_output_directions", Attr::Ints(vec![direction]))];
            let g = scan_graph(&inputs[..1], &inputs[1..], body, attrs, 1);
            (g, named_inputs(&inputs))
        };
        for cpu_kernels in [false, true] {
            let cost = cost_of_one_more_step(build, 30, cpu_kernels);
            let case = format!("direction {direction}, cpu kernels {cpu_kernels}");
            assert_eq!(cost, (1, 0), "{case}");
        }
    }
}

/// skl2onnx's pairwise distances as a Scan: the state `xs` ([rows, width]) goes through
/// Identity unchanged while each of `seq` steps reduces `(xs - row)^2` over its rows.
fn pairwise_distances(rows: usize, width: usize, seq: usize) -> (Graph, Vec<(String, HostTensor)>) {
    let body = Graph::new()
        .input("xs", DType::F32, &[Some(rows), Some(width)])
        .input("row", DType::F32, &[Some(width)])
        .node(
            Node::new("Identity", "carry")
                .inputs(["xs"])
                .outputs(["xs_out"]),
        )
        .node(Node::new("Sub", "sub").inputs(["xs", "row"]).outputs(["d"]))
        .node(
            Node::new("ReduceSumSquare", "sq")
                .inputs(["d"])
                .outputs(["dist"])
                .attr("axes", Attr::Ints(vec![1]))
                .attr("keepdims", Attr::Int(0)),
        )
        .output("xs_out")
        .output("dist");
    let inputs = [f32s(&[rows, width], 21), f32s(&[seq, width], 22)];
    let g = scan_graph(&inputs[..1], &inputs[1..], body, vec![], 1);
    (g, named_inputs(&inputs))
}

#[test]
fn a_state_passed_on_unchanged_is_read_where_it_is() {
    // skl2onnx's pairwise distances: the state `xs` goes through Identity unchanged while each
    // iteration reduces (xs - row)^2 over its rows. The state is the same at every step, so
    // the whole loop is one reduction of the stacked rows against it before the loop (the
    // Sub computed as the reduction reads it), which is the scan output: one dispatch in
    // all, and the final state is `xs` itself. Without fusion (so nothing moves out of the
    // loop) the state is still read where it is: an iteration is its two dispatches (Sub,
    // ReduceSumSquare) with no copy; rows of 3 f32 are laid out once (one dispatch) and the
    // 16-byte output rows packed once (one dispatch). Against the reference with either
    // kernel set.
    let (g, named) = pairwise_distances(4, 3, 30);
    let want = run_graph(&g, &named, &Default::default()).unwrap();
    assert_eq!(want[0], named[0].1);
    for cpu_kernels in [false, true] {
        let got = counted_run(&g, &named, cpu_kernels, true);
        assert_eq!(got, (want.clone(), 1, 0), "cpu kernels {cpu_kernels}");
        let options = wgpu_ops::ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            fuse_elementwise: Some(false),
            ..Default::default()
        };
        let got = counted_run_with(&g, &named, options);
        let want = (want.clone(), 2 * 30 + 2, 0);
        assert_eq!(got, want, "unfused, cpu kernels {cpu_kernels}");
    }
}

#[test]
fn an_element_passed_on_as_a_scan_output_is_the_input_laid_out_once() {
    // The body outputs its element of `x` ([4, 5, 3], scanned along `in_axis`) as it is, with
    // `out_axis` and directions: the output is `x` itself where they agree (no dispatch),
    // else one gather after the loop; nothing moves per iteration either way. With a running
    // sum of the elements beside it, the loop still reads them (in place: one dispatch per
    // iteration, the Add). Against the reference, either kernel set.
    for (in_axis, in_dir, out_axis, out_dir, layout) in [
        (0, 0, 0, 0, 0),
        (1, 0, 1, 0, 0),
        (0, 0, 0, 1, 1),
        (1, 1, 2, 0, 1),
        (2, 0, 0, 1, 1),
    ] {
        let x = f32s(&[4, 5, 3], 41);
        let mut element = vec![4, 5, 3];
        let seq = element.remove(in_axis);
        let dims: Vec<Option<usize>> = element.iter().map(|&d| Some(d)).collect();
        let attrs = || {
            vec![
                ("scan_input_axes", Attr::Ints(vec![in_axis as i64])),
                ("scan_input_directions", Attr::Ints(vec![in_dir])),
                ("scan_output_axes", Attr::Ints(vec![out_axis as i64])),
                ("scan_output_directions", Attr::Ints(vec![out_dir])),
            ]
        };
        let alone = scan_graph(
            &[],
            std::slice::from_ref(&x),
            Graph::new()
                .input("e", DType::F32, &dims)
                .node(Node::new("Identity", "id").inputs(["e"]).outputs(["y"]))
                .output("y"),
            attrs(),
            1,
        );
        let zero = HostTensor::from_vec(element.clone(), &vec![0f32; 20 * 3 / seq]).unwrap();
        let summed = scan_graph(
            std::slice::from_ref(&zero),
            std::slice::from_ref(&x),
            Graph::new()
                .input("s", DType::F32, &dims)
                .input("e", DType::F32, &dims)
                .node(Node::new("Add", "add").inputs(["s", "e"]).outputs(["t"]))
                .node(Node::new("Identity", "id").inputs(["e"]).outputs(["y"]))
                .output("t")
                .output("y"),
            attrs(),
            1,
        );
        let case = format!("axes {in_axis} -> {out_axis}, directions {in_dir} -> {out_dir}");
        for cpu_kernels in [false, true] {
            let inputs = named_inputs(std::slice::from_ref(&x));
            let want = run_graph(&alone, &inputs, &Default::default()).unwrap();
            let got = counted_run(&alone, &inputs, cpu_kernels, true);
            // What giving back an input as a graph output costs (a tensor of its own).
            let identity = Graph::new()
                .input("in0", DType::F32, &[Some(4), Some(5), Some(3)])
                .node(Node::new("Identity", "id").inputs(["in0"]).outputs(["y"]))
                .output("y");
            let (_, returned, _) = counted_run(&identity, &inputs, cpu_kernels, true);
            let layout = if layout == 0 { returned } else { layout };
            assert_eq!(
                got,
                (want, layout, 0),
                "{case}, alone, cpu kernels {cpu_kernels}"
            );
            let inputs = named_inputs(&[zero.clone(), x.clone()]);
            let want = run_graph(&summed, &inputs, &Default::default()).unwrap();
            let (got, dispatches, _) = counted_run(&summed, &inputs, cpu_kernels, true);
            assert_eq!(got, want, "{case}, summed, cpu kernels {cpu_kernels}");
            // The Add per iteration; the fill laying `x` out as rows at the alignment (no
            // element here is a multiple of 32 bytes); the layout. No copy of the initial
            // state (an upload nothing reads after the Scan).
            let once = 1 + layout;
            assert_eq!(dispatches, seq as u64 + once, "{case}, summed");
        }
    }
}

/// A body reducing its steps against a state it passes on unchanged (`s`, [4, 3]; rows `r`
/// of 3): `ReduceSum(s - r)` over the last axis (kept), `ReduceMax(r * r)` over all axes,
/// `ReduceMin(s + r)` over axes given as an input (a constant), and `s - r` under a
/// ReduceSum with `noop_with_empty_axes` and no axes (the identity).
fn reductions_of_steps(seq: usize) -> (Graph, Vec<(String, HostTensor)>) {
    let reduce = |op: &str, from: &str, to: &str| Node::new(op, to).inputs([from]).outputs([to]);
    let body = Graph::new()
        .input("s", DType::F32, &[Some(4), Some(3)])
        .input("r", DType::F32, &[Some(3)])
        .constant("zero", HostTensor::from_vec(vec![1], &[0i64]).unwrap())
        .node(
            Node::new("Identity", "carry")
                .inputs(["s"])
                .outputs(["s_out"]),
        )
        .node(Node::new("Sub", "a").inputs(["s", "r"]).outputs(["a"]))
        .node(
            reduce("ReduceSum", "a", "sum_a")
                .attr("axes", Attr::Ints(vec![-1]))
                .attr("keepdims", Attr::Int(1)),
        )
        .node(Node::new("Mul", "b").inputs(["r", "r"]).outputs(["b"]))
        .node(reduce("ReduceMax", "b", "max_b").attr("keepdims", Attr::Int(0)))
        .node(Node::new("Add", "c").inputs(["s", "r"]).outputs(["c"]))
        .node(
            Node::new("ReduceMin", "min_c")
                .inputs(["c", "zero"])
                .outputs(["min_c"])
                .attr("keepdims", Attr::Int(0)),
        )
        .node(Node::new("Sub", "e").inputs(["s", "r"]).outputs(["e"]))
        .node(reduce("ReduceSum", "e", "same_e").attr("noop_with_empty_axes", Attr::Int(1)))
        .output("s_out")
        .output("sum_a")
        .output("max_b")
        .output("min_c")
        .output("same_e");
    let inputs = [f32s(&[4, 3], 51), f32s(&[seq, 3], 52)];
    let g = scan_graph(&inputs[..1], &inputs[1..], body, vec![], 4);
    (g, named_inputs(&inputs))
}

#[test]
fn reductions_of_steps_against_an_unchanged_state_run_once_before_the_loop() {
    // The first three reductions (with the chains they reduce, computed as they read them)
    // run once on all the rows: one dispatch each whatever the sequence's length. The last
    // cannot (no axes to move past the sequence axis), so its Sub stays in the loop as well:
    // one dispatch per iteration, its rows written in place. Against the reference.
    // Besides: the rows of `r` laid out at the alignment once, the last output's padded rows
    // packed once.
    for cpu_kernels in [false, true] {
        for seq in [7, 8] {
            let (g, inputs) = reductions_of_steps(seq);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            let got = counted_run(&g, &inputs, cpu_kernels, true);
            let case = format!("seq {seq}, cpu kernels {cpu_kernels}");
            assert_eq!(got, (want, seq as u64 + 3 + 2, 0), "{case}");
        }
    }
}

#[test]
fn a_row_broadcast_beyond_the_budget_stays_in_the_loop() {
    // 1025 rows against a carried [1024, 32] matrix: all steps at once would broadcast to
    // 33.6 Mi elements, past the 32 Mi that hoisting may compute in one go (in case the value
    // had to be stored), so each step runs in the loop: one dispatch per row. 1024 rows stay
    // within it and run as one reduction. Against the reference. Rows of 128 bytes are read
    // where they lie where the storage offset alignment divides them, else laid out at it
    // first (one dispatch more).
    let align = u64::from(ctx().limits().min_storage_buffer_offset_alignment);
    let layout = u64::from(128 % align != 0);
    for (seq, dispatches) in [(1025, 1025 + layout), (1024, 1)] {
        let (g, named) = pairwise_distances(1024, 32, seq);
        let want = run_graph(&g, &named, &Default::default()).unwrap();
        let (got, count, _) = counted_run(&g, &named, false, true);
        assert_eq!(got[0], want[0]);
        assert_eq!(count, dispatches, "{seq} rows");
        for (a, b) in got[1]
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(want[1].to_vec::<f32>().unwrap())
        {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{seq} rows: {a} vs {b}"
            );
        }
    }
}

#[test]
fn later_runs_of_a_session_reuse_the_scans_buffers() {
    // A session's later runs of the same shapes take the buffers of the Scan's loop (states,
    // elements, state rows, counter), of its values and of their inputs' uploads from the runs
    // before, and upload the body's constant once: they create no buffer. Results are
    // checked against the reference on every run, whose inputs differ.
    let ctx = own_ctx();
    let (g, first) = rnn_cell(5, 3, 0);
    let session = Session::new(&ctx, g.clone()).unwrap();
    let mut created = Vec::new();
    for run in 0..4 {
        // New values each run, of the same shapes.
        let inputs: Vec<(String, HostTensor)> = first
            .iter()
            .map(|(name, t)| {
                let v: Vec<f32> = t.to_vec::<f32>().unwrap();
                let v: Vec<f32> = v.iter().map(|x| x * (1.0 - 0.1 * run as f32)).collect();
                (
                    name.clone(),
                    HostTensor::from_vec(t.shape.clone(), &v).unwrap(),
                )
            })
            .collect();
        let before = ctx.stats().buffers_created;
        let got = session.run_blocking(inputs.clone()).unwrap();
        created.push(ctx.stats().buffers_created - before);
        let want = run_graph(&g, &inputs, &Default::default()).unwrap();
        for ((name, got), want) in got.iter().zip(&want) {
            let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
            assert_eq!(got.shape, want.shape, "run {run}: {name}");
            for (a, b) in g.iter().zip(&w) {
                assert!(
                    (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
                    "run {run}: {name}: {a} vs {b}"
                );
            }
        }
    }
    eprintln!("buffers created per run: {created:?}");
    assert!(created[0] > 2, "{created:?}");
    assert_eq!(created[1..], [0, 0, 0], "{created:?}");
}

/// `h` [64] f32 negated into `s0`, then a Scan over `x` [seq, 64] whose one state starts at
/// `s0` and adds each row to it (its scan output: the state doubled). Where `s0_after`, `s0`
/// is also read after the Scan (subtracted from its last state, a graph output).
fn sum_from_a_value(seq: usize, s0_after: bool) -> (Graph, Vec<(String, HostTensor)>) {
    let w = Some(64);
    let body = Graph::new()
        .input("s", DType::F32, &[w])
        .input("e", DType::F32, &[w])
        .node(Node::new("Add", "add").inputs(["s", "e"]).outputs(["t"]))
        .node(Node::new("Add", "twice").inputs(["t", "t"]).outputs(["y"]))
        .output("t")
        .output("y");
    let mut g = Graph::new()
        .input("h", DType::F32, &[w])
        .input("x", DType::F32, &[Some(seq), w])
        .node(Node::new("Neg", "neg").inputs(["h"]).outputs(["s0"]))
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "x"])
                .outputs(["last", "ys"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("last")
        .output("ys");
    if s0_after {
        g = g
            .node(
                Node::new("Sub", "change")
                    .inputs(["last", "s0"])
                    .outputs(["change"]),
            )
            .output("change");
    }
    let inputs = vec![
        ("h".to_string(), f32s(&[64], 81)),
        ("x".to_string(), f32s(&[seq, 64], 82)),
    ];
    (g, inputs)
}

/// A Scan keeps a state in the buffer of its initial value where nothing reads that value
/// after the Scan (a node's value here): the first iteration reads it where it is, with no
/// copy into a buffer of the loop's own. Where the value is read after the Scan, it is copied
/// first and stays as it was (the Sub sees it). Bit for bit against the reference, both kernel
/// sets, even and odd lengths (the last state in either buffer).
#[test]
fn a_scan_keeps_its_state_where_the_dead_initial_value_lies() {
    for cpu_kernels in [true, false] {
        for seq in [6, 7] {
            let (g, inputs) = sum_from_a_value(seq, false);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            let (got, dispatches, copies) = counted_run(&g, &inputs, cpu_kernels, true);
            assert_eq!(got, want, "cpu kernels {cpu_kernels}, {seq}");
            let (g, inputs) = sum_from_a_value(seq, true);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            let (got, read_after, copied_after) = counted_run(&g, &inputs, cpu_kernels, true);
            assert_eq!(got, want, "cpu kernels {cpu_kernels}, {seq}, s0 read after");
            // Read after the Scan: its Sub, and the initial state's copy (a buffer copy with
            // the CPU adapters' kernels, a dispatch with the others).
            let copy = if cpu_kernels { (1, 1) } else { (2, 0) };
            assert_eq!(
                (read_after - dispatches, copied_after - copies),
                copy,
                "cpu kernels {cpu_kernels}, {seq}"
            );
            // The Neg, then per step the two Adds (the body's scan output is written in
            // place), and nothing else.
            assert_eq!((dispatches, copies), (1 + 2 * seq as u64, 0), "{seq}");
        }
    }
}

/// Through `run_tensors`, an initial state the caller hands over (no other handle kept) is
/// the run's: the Scan keeps its state in it. One the caller still holds is copied and left
/// as it was.
#[test]
fn a_scan_keeps_its_state_in_a_handed_over_tensor_and_leaves_a_held_one_alone() {
    let w = Some(64);
    let body = Graph::new()
        .input("s", DType::F32, &[w])
        .input("e", DType::F32, &[w])
        .node(Node::new("Add", "add").inputs(["s", "e"]).outputs(["t"]))
        .output("t");
    let g = Graph::new()
        .input("s0", DType::F32, &[w])
        .input("x", DType::F32, &[Some(5), w])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "x"])
                .outputs(["last"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("last");
    let (s0, x) = (f32s(&[64], 83), f32s(&[5, 64], 84));
    let named = vec![("s0".to_string(), s0.clone()), ("x".to_string(), x.clone())];
    let want = run_graph(&g, &named, &Default::default()).unwrap();
    for cpu_kernels in [true, false] {
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        let session = Session::new(&ctx, g.clone()).unwrap();
        let mut counts = Vec::new();
        for keep in [false, true] {
            let given = wgpu_ops::Tensor::from_host(&ctx, &s0).unwrap();
            let kept = keep.then(|| given.clone());
            let x = wgpu_ops::Tensor::from_host(&ctx, &x).unwrap();
            let before = ctx.stats();
            let out = session
                .run_tensors_blocking(vec![("s0".into(), given), ("x".into(), x)])
                .unwrap();
            let after = ctx.stats();
            counts.push((
                after.dispatches - before.dispatches,
                after.copies - before.copies,
            ));
            assert_eq!(out[0].1.to_host_blocking().unwrap(), want[0], "keep {keep}");
            if let Some(kept) = kept {
                assert_eq!(
                    kept.to_host_blocking().unwrap(),
                    s0,
                    "the held state changed"
                );
            }
        }
        // Held: the initial state's copy (a buffer copy with the CPU adapters' kernels, a
        // dispatch with the others).
        let copy = if cpu_kernels { (0, 1) } else { (1, 0) };
        let why = format!("cpu kernels {cpu_kernels}: {counts:?}");
        assert_eq!(
            (counts[1].0 - counts[0].0, counts[1].1 - counts[0].1),
            copy,
            "{why}"
        );
        assert_eq!(counts[0], (5, 0), "{why}");
    }
}

/// A Scan of one step whose state is also a scan output (as an RNN's H is its Y) has no state
/// rows, and that output is the buffer its last state is in: the Add is all it records (the
/// initial state is an upload read where it lies). With rows it took the initial state's copy
/// into them, the last state's out of them and their interleaving into the output: 2
/// dispatches and 2 copies with the CPU adapters' kernels, 4 dispatches with the others;
/// without rows but with the output's row copied, 1 and 1, and 2 and 1 (a dispatch at a GPU
/// counter, whose clear counts as a copy). Two steps keep the rows (no copy per step). A
/// state given out reshaped, along another output axis and backwards, is that buffer too.
/// Against the reference, both kernel sets.
#[test]
fn a_one_step_scan_outputs_its_last_state_as_it_lies() {
    let w = Some(64);
    let body = Graph::new()
        .input("s", DType::F32, &[w])
        .input("e", DType::F32, &[w])
        .node(Node::new("Add", "add").inputs(["s", "e"]).outputs(["t"]))
        .node(Node::new("Identity", "row").inputs(["t"]).outputs(["y"]))
        .output("t")
        .output("y");
    for cpu_kernels in [true, false] {
        let mut counts = Vec::new();
        for seq in [1, 2] {
            let inputs = [f32s(&[64], 85), f32s(&[seq, 64], 86)];
            let g = scan_graph(&inputs[..1], &inputs[1..], body.clone(), vec![], 1);
            let named = named_inputs(&inputs);
            let want = run_graph(&g, &named, &Default::default()).unwrap();
            let (got, dispatches, copies) = counted_run(&g, &named, cpu_kernels, true);
            assert_eq!(got, want, "cpu kernels {cpu_kernels}, {seq}");
            counts.push((dispatches, copies));
        }
        let want = match cpu_kernels {
            true => [(1, 0), (4, 2)],
            false => [(1, 0), (6, 0)],
        };
        assert_eq!(counts, want, "cpu kernels {cpu_kernels}");
    }
    // The state [4, 16] given out reshaped to [64] along output axis 1, backwards: still the
    // last state's buffer, seen in the output's shape [64, 1].
    let shape = HostTensor::from_vec(vec![1], &[64i64]).unwrap();
    let body = Graph::new()
        .input("s", DType::F32, &[Some(4), Some(16)])
        .input("e", DType::F32, &[Some(4), Some(16)])
        .constant("flat", shape)
        .node(Node::new("Add", "add").inputs(["s", "e"]).outputs(["t"]))
        .node(
            Node::new("Reshape", "row")
                .inputs(["t", "flat"])
                .outputs(["y"]),
        )
        .output("t")
        .output("y");
    let inputs = [f32s(&[4, 16], 87), f32s(&[1, 4, 16], 88)];
    let attrs = vec![
        ("scan_output_axes", Attr::Ints(vec![1])),
        ("scan_output_directions", Attr::Ints(vec![1])),
    ];
    let g = scan_graph(&inputs[..1], &inputs[1..], body, attrs, 1);
    let named = named_inputs(&inputs);
    let want = run_graph(&g, &named, &Default::default()).unwrap();
    assert_eq!(want[1].shape, vec![64, 1]);
    for cpu_kernels in [true, false] {
        let got = counted_run(&g, &named, cpu_kernels, true);
        assert_eq!(got, (want.clone(), 1, 0), "cpu kernels {cpu_kernels}");
    }
}
