//! Reductions against the CPU reference on every dtype each is defined for: any set of axes
//! (leading, inner, not adjacent, all, none), keepdims, rows longer than a workgroup (the
//! threads' strided loops and the tree merge), empty rows, and ArgMax/ArgMin with ties.
//! i64 and u64 run natively and emulated on 32-bit words (as without `SHADER_INT64`), with
//! the same bits. Integers and Max/Min/ArgMax compare bit for bit; float sums within the rounding of the
//! summation order (1e-5 relative for f32 and f64 sums of mixed signs scaled by their
//! magnitude, two units in the last place for f16 and bf16).

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, HostTensor, Session};

fn both(ctx: &wgpu_ops::Context, node: Node, x: HostTensor) -> (HostTensor, HostTensor) {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    let g = Graph::new()
        .input("x", x.dtype, &shape)
        .node(node.inputs(["x"]).outputs(["y"]))
        .output("y");
    let inputs = vec![("x".to_string(), x)];
    let got = Session::new(ctx, g.clone())
        .unwrap()
        .run_blocking(inputs.clone())
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
        .1;
    let want = run_graph(&g, &inputs, &Default::default())
        .unwrap()
        .remove(0);
    (got, want)
}

/// `t` cast to `dtype` by the reference's Cast.
fn cast(t: &HostTensor, dtype: DType) -> HostTensor {
    let node = Node::new("Cast", "c").attr("to", Attr::String(dtype.name().into()));
    let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
    let g = Graph::new()
        .input("x", t.dtype, &shape)
        .node(node.inputs(["x"]).outputs(["y"]))
        .output("y");
    run_graph(&g, &[("x".to_string(), t.clone())], &Default::default())
        .unwrap()
        .remove(0)
}

/// Small integers (so sums and products stay exact in every type) or floats of mixed sign.
fn data(dtype: DType, shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let f: Vec<f64> = bytes(seed, n)
        .iter()
        .map(|&b| (b % 7) as f64 - 2.0)
        .collect();
    data_from(dtype, shape, &f)
}

/// `values` as a tensor of `dtype`.
fn data_from(dtype: DType, shape: &[usize], values: &[f64]) -> HostTensor {
    cast(
        &HostTensor::from_vec(shape.to_vec(), values).unwrap(),
        dtype,
    )
}

fn reductions_on(dtype: DType) {
    let ops = [
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
    ];
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    // Rows of up to 32 elements are folded by one thread each ([3, 4, 5] along any axes and
    // [600, 3] along 1, three workgroups of them; [4, 3] whole), longer ones by a workgroup.
    // The last three have few rows long enough for the two-pass reduction (chunks of a row
    // folded in parallel, then merged). Rows of 33 to 1024 elements take 16 to 256 threads
    // each, several rows to a workgroup ([5, 100]: 32 threads a row, a workgroup's 8 rows not
    // all there; [9, 200, 2]: 64 threads a row, its elements 2 apart).
    let cases: [(&[usize], &[i64]); 15] = [
        // Two reduced axes that do not merge, rows of 48: 16 threads a row.
        (&[6, 5, 8], &[0, 2]),
        // Three that do not merge, rows of 8 folded a thread each: planes of 2 x 2.
        (&[2, 3, 2, 3, 2], &[0, 2, 4]),
        (&[5, 100], &[1]),
        (&[9, 200, 2], &[1]),
        (&[3, 4, 5], &[1]),
        (&[3, 4, 5], &[0, 2]),
        (&[3, 4, 5], &[-1]),
        (&[2, 700], &[1]),
        (&[600, 3], &[0]),
        (&[600, 3], &[1]),
        (&[3, 0, 2], &[1]),
        (&[4, 3], &[]),
        (&[2, 3000], &[1]),
        (&[3, 40, 60], &[]),
        (&[2100, 3], &[0]),
    ];
    let mut ran = 0;
    for op in ops {
        let logs = matches!(op, "ReduceLogSum" | "ReduceLogSumExp");
        if dtype == DType::Bool && !matches!(op, "ReduceMax" | "ReduceMin") || logs && !float {
            continue;
        }
        for (k, (shape, axes)) in cases.iter().enumerate() {
            // Products of hundreds of elements overflow every type: fewer for them.
            if op == "ReduceProd" && shape.iter().product::<usize>() > 60 {
                continue;
            }
            let mut x = data(dtype, shape, k as u64);
            if op == "ReduceLogSum" {
                // Sums of positive values only.
                let positive: Vec<f64> = as_f64(&x).iter().map(|v| v.abs() + 1.0).collect();
                x = data_from(dtype, shape, &positive);
            }
            for keepdims in [0, 1] {
                let node = Node::new(op, "r")
                    .attr("axes", Attr::Ints(axes.to_vec()))
                    .attr("keepdims", Attr::Int(keepdims));
                let what = format!("{op} {dtype} {shape:?} axes {axes:?} keepdims {keepdims}");
                let mut outputs = Vec::new();
                for ctx in contexts_for(dtype) {
                    outputs.push(both(ctx, node.clone(), x.clone()));
                }
                let (got, want) = outputs.remove(0);
                assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{what}");
                // i64 and u64 emulated on 32-bit words: the native path's bits.
                for (emulated, _) in outputs {
                    assert_eq!(emulated, got, "{what}, emulated");
                }
                if !float || matches!(op, "ReduceMax" | "ReduceMin") {
                    assert_eq!(got.data, want.data, "{what}");
                } else {
                    let tol = match dtype {
                        DType::F16 => 2e-3,
                        DType::BF16 => 1.6e-2,
                        _ => 1e-5,
                    };
                    for (i, (a, b)) in as_f64(&got).iter().zip(as_f64(&want)).enumerate() {
                        let ok = a == &b
                            || (a.is_nan() && b.is_nan())
                            || (a - b).abs() <= tol * b.abs().max(1.0);
                        assert!(ok, "{what}: element {i}: GPU {a} vs reference {b}");
                    }
                }
                ran += 1;
            }
        }
    }
    assert!(ran > 0);
    // ArgMax and ArgMin: values with many ties, first and last index.
    if dtype == DType::Bool {
        return;
    }
    for (shape, axis) in [
        (&[3usize, 4, 5][..], 1i64),
        (&[2, 700], -1),
        // 128 threads a row, two rows to a workgroup, the second one missing.
        (&[3, 300], 1),
        (&[300, 2], 0),
        (&[2, 5000], 1),
    ] {
        let x = data(dtype, shape, 9);
        for op in ["ArgMax", "ArgMin"] {
            for last in [0, 1] {
                for keepdims in [0, 1] {
                    let node = Node::new(op, "a")
                        .attr("axis", Attr::Int(axis))
                        .attr("keepdims", Attr::Int(keepdims))
                        .attr("select_last_index", Attr::Int(last));
                    for ctx in contexts_for(dtype) {
                        let (got, want) = both(ctx, node.clone(), x.clone());
                        assert_eq!(got, want, "{op} {dtype} {shape:?} axis {axis} last {last}");
                    }
                }
            }
        }
    }
}

dtype_tests!(every_reduction, reductions_on);

/// CumSum and CumProd on every dtype they are defined for, along each axis, inclusive and
/// exclusive, forward and reversed, against the reference, bit for bit (integers wrap; floats
/// are added or multiplied in the same order, f16 and bf16 in f32 and rounded once); i64, u64
/// and f64 also on the emulation.
#[test]
fn cumsum_and_cumprod_on_every_dtype() {
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U32,
        DType::U64,
    ] {
        let x = data(dtype, &[3, 4, 5], 3);
        for (op, axis) in ["CumSum", "CumProd"]
            .into_iter()
            .flat_map(|op| [0i64, 1, -1].map(|axis| (op, axis)))
        {
            for (exclusive, reverse) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let (g, inputs) = cumulative(op, &x, axis, exclusive, reverse);
                let want = run_graph(&g, &inputs, &Default::default())
                    .unwrap()
                    .remove(0);
                for ctx in contexts_with_emulated_f64(dtype) {
                    let got = Session::new(ctx, g.clone())
                        .unwrap()
                        .run_blocking(inputs.clone())
                        .unwrap_or_else(|e| panic!("{op} {dtype}: {e}"))
                        .remove(0)
                        .1;
                    assert_eq!(got, want, "{op} {dtype} axis {axis} {exclusive} {reverse}");
                }
            }
        }
    }
}

/// `contexts_for(dtype)`, and for f64 the contexts that emulate it too (the kernels with an
/// f64 emulation: CumSum, TopK), without either 64-bit feature and with native i64 only.
fn contexts_with_emulated_f64(dtype: DType) -> Vec<&'static wgpu_ops::Context> {
    let mut all = contexts_for(dtype);
    if dtype == DType::F64 {
        all.extend([ctx_emulating_64_bit(), ctx_without_f64()]);
    }
    all
}

/// TopK on every numeric dtype, along each axis, largest and smallest, K from 0 to the
/// axis's length, on values with many ties (the lower index first), against the reference
/// (i64, u64 and f64 also on the emulation).
#[test]
fn topk_on_every_dtype() {
    for dtype in DType::ALL
        .into_iter()
        .filter(|&d| d != DType::Bool && !d.is_storage_only())
    {
        let x = data(dtype, &[3, 6, 4], 11);
        for axis in [0i64, 1, -1] {
            let len = x.shape[axis.rem_euclid(3) as usize] as i64;
            for k in [0, 1, len / 2, len] {
                for largest in [0, 1] {
                    let (g, inputs) = topk(&x, axis, k, largest);
                    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
                    for ctx in contexts_with_emulated_f64(dtype) {
                        let got = Session::new(ctx, g.clone())
                            .unwrap()
                            .run_blocking(inputs.clone())
                            .unwrap_or_else(|e| panic!("TopK {dtype}: {e}"));
                        for ((_, g), w) in got.iter().zip(&want) {
                            assert_eq!(g, w, "TopK {dtype} axis {axis} k {k} largest {largest}");
                        }
                    }
                }
            }
        }
    }
}

/// Contexts that split CumSum's and TopK's lines as told (`split_lines`): the kernel set from
/// the environment, and for i64, u64 and f64 also on their emulation.
fn split_contexts(dtype: DType, split_lines: Option<bool>) -> Vec<wgpu_ops::Context> {
    let options = |native_64_bit| wgpu_ops::ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        split_lines,
        native_64_bit,
        ..Default::default()
    };
    let mut all = vec![None];
    if matches!(dtype, DType::I64 | DType::U64 | DType::F64) {
        all.push(Some(false));
    }
    all.into_iter()
        .map(|native| wgpu_ops::Context::new_blocking(options(native)).unwrap())
        .collect()
}

/// CumSum's or CumProd's graph along `axis` with the attributes, and its inputs.
fn cumulative(
    op: &str,
    x: &HostTensor,
    axis: i64,
    exclusive: i64,
    reverse: i64,
) -> (Graph, Vec<(String, HostTensor)>) {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    let g = Graph::new()
        .input("x", x.dtype, &shape)
        .input("axis", DType::I64, &[])
        .node(
            Node::new(op, "c")
                .inputs(["x", "axis"])
                .outputs(["y"])
                .attr("exclusive", Attr::Int(exclusive))
                .attr("reverse", Attr::Int(reverse)),
        )
        .output("y");
    let axis = HostTensor::from_vec(vec![], &[axis]).unwrap();
    (
        g,
        vec![("x".to_string(), x.clone()), ("axis".to_string(), axis)],
    )
}

/// A few long lines run as a scan (the sums of blocks or chunks of each line, their running
/// sums, then each block's or chunk's: three dispatches, where one invocation walking each
/// line takes one per 16 384 positions): in blocks with the GPU kernels, in chunks with the
/// CPU ones (the suite runs with both). On every dtype CumSum computes in and on the 64-bit
/// emulation, inclusive and exclusive, forward and reversed: one line of 70 001 (18 blocks
/// of 4096, the last short; or 1094 chunks of 64), one of 1 100 000 (269 blocks, or 4090
/// chunks of 269: their sums' running sums take 2 rounds of a workgroup, or 16), 3 lines
/// strided along axis 0, and [2, 9000, 2] along its middle axis. The values are small integers, and CumProd's factors
/// 1, -1, 2 and 1/2 in a period prime to the workgroup, so every sum and product is exact in
/// any order: bit for bit against the reference (integers wrap alike in any order).
#[test]
fn few_long_lines_scan_in_blocks() {
    let cases: [(&[usize], i64); 4] = [
        (&[1, 70_001], 1),
        (&[1_100_000], 0),
        (&[3000, 3], 0),
        (&[2, 9000, 2], 1),
    ];
    for dtype in [
        DType::I32,
        DType::F32,
        DType::U32,
        DType::I64,
        DType::F64,
        DType::U64,
    ] {
        let contexts = split_contexts(dtype, None);
        for (seed, &(shape, axis)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            // The long line, or the many small types, not both: the suite's time.
            if n > 100_000 && !matches!(dtype, DType::I32 | DType::F32 | DType::I64) {
                continue;
            }
            let values: Vec<f64> = (0..n).map(|i| ((i * 7919) % 7) as f64 - 3.0).collect();
            let factors: Vec<f64> = (0..n)
                .map(|i| [2.0, 1.0, -1.0, 0.5, 1.0, -1.0, 1.0][(i + seed) % 7])
                .collect();
            let runs = [
                ("CumSum", data_from(dtype, shape, &values)),
                ("CumProd", data_from(dtype, shape, &factors)),
            ];
            for ((op, x), (exclusive, reverse)) in runs
                .iter()
                .flat_map(|run| [(0, 0), (1, 0), (0, 1), (1, 1)].map(|flags| (run, flags)))
            {
                let (g, inputs) = cumulative(op, x, axis, exclusive, reverse);
                let want = run_graph(&g, &inputs, &Default::default())
                    .unwrap()
                    .remove(0);
                for ctx in &contexts {
                    let before = ctx.stats().dispatches;
                    let got = Session::new(ctx, g.clone())
                        .unwrap()
                        .run_blocking(inputs.clone())
                        .unwrap()
                        .remove(0)
                        .1;
                    let what = format!("{op} {dtype} {shape:?} {exclusive} {reverse}");
                    assert!(got == want, "{what}");
                    // Three dispatches (a cast around f16 is not among these dtypes).
                    assert_eq!(ctx.stats().dispatches - before, 3, "{what}");
                }
            }
        }
    }
}

/// The scan in blocks adds f32 in another order than one walk: within f32's rounding of the
/// exact running sums. Over one line of 1 000 000 values of mixed sign (each from -1 to 1),
/// every running sum lies within 1e-7 of the sum of the magnitudes before it (the
/// summation's depth in blocks is a few hundred additions: 2^-24 x 300 is 1.8e-5 of it at
/// worst; a walk's depth is the line's length); the walk's error is measured beside it.
#[test]
fn blocks_round_f32_sums_within_their_depth() {
    let n = 1_000_000usize;
    let values: Vec<f32> = bytes(7, 2 * n)
        .chunks(2)
        .map(|b| (f32::from(u16::from_le_bytes([b[0], b[1]])) / 32768.0) - 1.0)
        .collect();
    let x = HostTensor::from_vec(vec![n], &values).unwrap();
    let (g, inputs) = cumulative("CumSum", &x, 0, 0, 0);
    let run = |blocks| {
        let ctx = &split_contexts(DType::F32, Some(blocks))[0];
        let y = Session::new(ctx, g.clone())
            .unwrap()
            .run_blocking(inputs.clone())
            .unwrap()
            .remove(0)
            .1;
        y.to_vec::<f32>().unwrap()
    };
    let (blocks, walk) = (run(true), run(false));
    let (mut exact, mut magnitude) = (0f64, 0f64);
    let (mut worst_blocks, mut worst_walk) = (0f64, 0f64);
    for i in 0..n {
        exact += f64::from(values[i]);
        magnitude += f64::from(values[i].abs());
        worst_blocks = worst_blocks.max((f64::from(blocks[i]) - exact).abs() / magnitude);
        worst_walk = worst_walk.max((f64::from(walk[i]) - exact).abs() / magnitude);
    }
    assert!(
        worst_blocks <= 1e-7,
        "blocks {worst_blocks:e} of the magnitudes (the walk {worst_walk:e})"
    );
    // The walk adds in the reference's order: bit for bit with it.
    let want = run_graph(&g, &inputs, &Default::default())
        .unwrap()
        .remove(0);
    assert_eq!(walk, want.to_vec::<f32>().unwrap());
}

/// TopK's graph keeping `k` along `axis`, the largest (1) or the smallest (0), and its inputs.
fn topk(x: &HostTensor, axis: i64, k: i64, largest: i64) -> (Graph, Vec<(String, HostTensor)>) {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    let g = Graph::new()
        .input("x", x.dtype, &shape)
        .input("k", DType::I64, &[Some(1)])
        .node(
            Node::new("TopK", "t")
                .inputs(["x", "k"])
                .outputs(["v", "i"])
                .attr("axis", Attr::Int(axis))
                .attr("largest", Attr::Int(largest)),
        )
        .output("v")
        .output("i");
    let k = HostTensor::from_vec(vec![1], &[k]).unwrap();
    (g, vec![("x".to_string(), x.clone()), ("k".to_string(), k)])
}

/// A few long lines of TopK are split: each chunk's K best kept and sorted by an invocation
/// of its own, then merged two by two, a dispatch per level: the same values and indices as
/// the reference, bit for bit, on values with many ties (the lower index first) and, in
/// floats, NaNs (the largest), on every dtype TopK computes in and on the 64-bit emulation,
/// largest and smallest. One line of 150 001 (a vocabulary's logits) keeping 1, 50 and 300;
/// 3 lines of 5000 strided along axis 0 keeping 7; [2, 24 000, 2] along its middle axis
/// keeping 300 (chunks of 1338 positions, as many as one dispatch keeps and sorts, 18 of
/// them: 5 merges, three of them of an odd count of lists); and a line of 33 175 positive
/// values keeping the 100 smallest, whose last chunk of 59 positions holds the smallest and
/// fewer than its list's 100 slots (the unwritten ones must not be read).
#[test]
fn few_long_topk_lines_split_into_chunks() {
    // Shape, axis, the Ks, and the values' least (a line whose last chunk is shorter than
    // its list of K, of values above the zeros of its list's unwritten slots).
    // (First, on fresh contexts, whose lists' unused slots hold zeros.)
    let cases: [(&[usize], i64, &[i64], f64); 4] = [
        (&[1, 33_175], 1, &[100], 1.0),
        (&[1, 150_001], 1, &[1, 50, 300], -1000.0),
        (&[5000, 3], 0, &[7], -1000.0),
        (&[2, 24_000, 2], 1, &[300], -1000.0),
    ];
    for dtype in [
        DType::F32,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F64,
        DType::U64,
    ] {
        // Split as told (the CPU kernels' rule walks K of 300 here).
        let contexts = split_contexts(dtype, Some(true));
        for &(shape, axis, ks, least) in &cases {
            let n: usize = shape.iter().product();
            if n > 100_000 && !matches!(dtype, DType::F32 | DType::I64) {
                continue;
            }
            // About 2000 distinct values, so every K cuts through ties; the short last chunk
            // of the line of positive values holds the smallest (so that the merges reach
            // past its list's written slots, into the zeros of a fresh buffer, if they read
            // them).
            let (tail, above) = match least > 0.0 {
                true => (n % 1948, 5.0),
                false => (0, 0.0),
            };
            let values: Vec<f64> = (0..n)
                .map(|i| match (i * 7919) % 2003 {
                    _ if i >= n - tail => (i % 5) as f64 + least,
                    v if v == 17 && !dtype.is_integer() => f64::NAN,
                    v => v as f64 + least + above,
                })
                .collect();
            let x = data_from(dtype, shape, &values);
            let len = shape[axis as usize] as u64;
            for (&k, largest) in ks.iter().flat_map(|k| [(k, 0), (k, 1)]) {
                let (g, inputs) = topk(&x, axis, k, largest);
                let want = run_graph(&g, &inputs, &Default::default()).unwrap();
                let chunk = wgpu_ops::kernels::topk::split_chunk(
                    1,
                    len,
                    k as u64,
                    ctx().cpu_kernels(),
                    Some(true),
                )
                .unwrap();
                let levels = wgpu_ops::kernels::topk::merge_levels(len, chunk);
                if least > 0.0 {
                    assert_eq!(len % chunk, tail as u64, "the last chunk");
                    assert!(len % chunk < k as u64, "a last chunk shorter than its list");
                }
                if shape.len() == 3 {
                    assert_eq!(levels.iter().filter(|(_, lists)| lists % 2 == 1).count(), 3);
                }
                let levels = levels.len() as u64;
                for ctx in &contexts {
                    let before = ctx.stats().dispatches;
                    let got = Session::new(ctx, g.clone())
                        .unwrap()
                        .run_blocking(inputs.clone())
                        .unwrap();
                    let what = format!("TopK {dtype} {shape:?} k {k} largest {largest}");
                    for ((_, g), w) in got.iter().zip(&want) {
                        assert!(g == w, "{what}");
                    }
                    assert_eq!(ctx.stats().dispatches - before, 1 + levels, "{what}");
                }
            }
        }
    }
}

/// Lines longer than one invocation walks in one dispatch (16 384 positions for CumSum and
/// CumProd; for TopK 16 384 / (2 + log2 K)) run in several dispatches carrying the running
/// sum or product, or the kept elements' heap, in the output, and TopK's sort of a large K
/// likewise (and split, K 9000 and 20 000 of 20 000): the same bits as the reference. lavapipe stops a shader's loops after about
/// 65 000 iterations, so one long walk gave zeros past element 65 535 there.
/// The lines are walked here, not split (CumProd's products of floats near 1 round in the
/// walk's order, as the reference's).
#[test]
fn long_lines_run_in_several_dispatches() {
    let len = 70_001;
    for dtype in [DType::I32, DType::I64, DType::F32] {
        // Two lines along axis 0 (inner 2), with many ties for TopK.
        let values: Vec<f64> = (0..2 * len)
            .map(|i| ((i * 7919) % 1000) as f64 - 500.0)
            .collect();
        let x = data_from(dtype, &[len, 2], &values);
        // Products of factors that keep floats finite and near 1 (integers wrap).
        let factors: Vec<f64> = (0..2 * len)
            .map(|i| match dtype {
                DType::F32 => 1.0 + ((i % 13) as f64 - 6.0) * 1e-4,
                _ => [1.0, -1.0, 3.0, 1.0, 2.0, -1.0][i % 6],
            })
            .collect();
        let runs = [
            ("CumSum", x.clone()),
            ("CumProd", data_from(dtype, &[len, 2], &factors)),
        ];
        for ((op, x), (exclusive, reverse)) in runs
            .iter()
            .flat_map(|run| [(0, 0), (1, 0), (0, 1), (1, 1)].map(|flags| (run, flags)))
        {
            let (g, inputs) = cumulative(op, x, 0, exclusive, reverse);
            let want = run_graph(&g, &inputs, &Default::default())
                .unwrap()
                .remove(0);
            for ctx in &split_contexts(dtype, Some(false)) {
                let got = Session::new(ctx, g.clone())
                    .unwrap()
                    .run_blocking(inputs.clone())
                    .unwrap()
                    .remove(0)
                    .1;
                assert!(got == want, "{op} {dtype} {exclusive} {reverse}");
            }
        }
        for (k, largest) in [(1i64, 1), (5, 0), (40, 1)] {
            let (g, inputs) = topk(&x, 0, k, largest);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            for ctx in &split_contexts(dtype, Some(false)) {
                let got = Session::new(ctx, g.clone())
                    .unwrap()
                    .run_blocking(inputs.clone())
                    .unwrap();
                for ((_, g), w) in got.iter().zip(&want) {
                    assert!(g == w, "TopK {dtype} k {k} largest {largest}");
                }
            }
        }
    }
    // A K beyond what one dispatch sorts (a whole line sorted: its heap popped over several
    // dispatches), walked and split (merged a slot an invocation, log2 K steps each).
    let len = 20_000;
    let values: Vec<f64> = (0..len).map(|i| ((i * 7919) % 1000) as f64).collect();
    for dtype in [DType::F32, DType::I64] {
        let x = data_from(dtype, &[len], &values);
        for (k, largest) in [(9000i64, 1), (20_000, 0)] {
            let (g, inputs) = topk(&x, 0, k, largest);
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            let walk = wgpu_ops::kernels::topk::walk_plan(len as u64, k as u64).len();
            assert!(walk > 4, "{k}");
            for (ctx, forced) in split_contexts(dtype, Some(true))
                .iter()
                .map(|c| (c, true))
                .chain(
                    split_contexts(dtype, Some(false))
                        .iter()
                        .map(|c| (c, false)),
                )
            {
                let before = ctx.stats().dispatches;
                let got = Session::new(ctx, g.clone())
                    .unwrap()
                    .run_blocking(inputs.clone())
                    .unwrap();
                for ((_, g), w) in got.iter().zip(&want) {
                    assert!(
                        g == w,
                        "TopK {dtype} k {k} largest {largest} split {forced}"
                    );
                }
                let dispatches = match (forced, ctx.cpu_kernels()) {
                    (true, cpu) => {
                        let (len, k) = (len as u64, k as u64);
                        let chunk =
                            wgpu_ops::kernels::topk::split_chunk(1, len, k, cpu, Some(true));
                        1 + wgpu_ops::kernels::topk::merge_levels(len, chunk.unwrap()).len()
                    }
                    (false, _) => walk,
                };
                assert_eq!(ctx.stats().dispatches - before, dispatches as u64, "{k}");
            }
        }
    }
}

/// Many rows of more elements than a short row (a pool's windows, or a reduction over the
/// outer axis of a wide tensor): one thread folds each row where the rows are many (on GPU
/// kernels only where neighbouring rows start side by side: the first shape), a workgroup per
/// row otherwise. Small integers, so every sum is exact in f32 too, and many ties for ArgMax
/// and ArgMin (the first position wins): bit for bit against the reference.
#[test]
fn many_rows_of_forty_elements_reduce_exactly() {
    for (shape, axis) in [([40usize, 70_000], 0i64), ([20_000, 40], 1)] {
        for dtype in [DType::I32, DType::F32] {
            let x = data(dtype, &shape, 31 + axis as u64);
            for op in ["ReduceSum", "ReduceMax", "ArgMax", "ArgMin"] {
                let node = if op.starts_with("Arg") {
                    Node::new(op, "r").attr("axis", Attr::Int(axis))
                } else {
                    Node::new(op, "r").attr("axes", Attr::Ints(vec![axis]))
                }
                .attr("keepdims", Attr::Int(0));
                for ctx in contexts_for(dtype) {
                    let (got, want) = both(ctx, node.clone(), x.clone());
                    assert!(got == want, "{op} {dtype} {shape:?} axis {axis}");
                }
            }
        }
    }
}

/// f16 Softmax rounds each step of the ONNX function body that defines it (Sub, Exp, ReduceSum
/// and Div each to f16; the sum accumulates in f32), as the ONNX backend tests' expected
/// outputs do. Rows of one 0 and seven copies of `d`, chosen so that rounding only the final
/// quotient gives other bits in both outputs, and so that no f32 step lies near an f16
/// rounding midpoint (WGSL's `exp` and division need not be correctly rounded in f32).
#[test]
fn softmax_on_f16_rounds_each_step_of_its_function_body() {
    use half::f16;
    // -0.51708984375, -0.66748046875, -0.69482421875
    let ds = [0xb823, 0xb957, 0xb98f].map(|bits| f16::from_bits(bits).to_f32());
    let n = 8;
    let mut x = Vec::new();
    let mut step_by_step = Vec::new();
    for &d in &ds {
        x.push(f16::ZERO);
        x.extend(std::iter::repeat_n(f16::from_f32(d), n - 1));
        let e = f16::from_f32(d.exp());
        let s = f16::from_f32(1.0 + (n - 1) as f32 * e.to_f32());
        let first = f16::from_f32(1.0 / s.to_f32());
        let rest = f16::from_f32(e.to_f32() / s.to_f32());
        let exact = (d as f64).exp();
        let sum = 1.0 + (n - 1) as f64 * exact;
        assert_ne!(
            first,
            f16::from_f64(1.0 / sum),
            "d = {d}: the case does not tell"
        );
        assert_ne!(
            rest,
            f16::from_f64(exact / sum),
            "d = {d}: the case does not tell"
        );
        step_by_step.push(first);
        step_by_step.extend(std::iter::repeat_n(rest, n - 1));
    }
    let x = HostTensor::from_vec(vec![ds.len(), n], &x).unwrap();
    for ctx in contexts_for(DType::F16) {
        let (got, want) = both(
            ctx,
            Node::new("Softmax", "s").attr("axis", Attr::Int(1)),
            x.clone(),
        );
        assert_eq!(got.to_vec::<f16>().unwrap(), step_by_step, "GPU");
        assert_eq!(want.to_vec::<f16>().unwrap(), step_by_step, "reference");
    }
}

#[test]
fn softmax_is_one_dispatch_or_computes_exp_where_it_is_read() {
    // Rows of 6 and 300 (a thread and a workgroup per row) take the row kernel (max, sum of
    // exp(x - max), result in one dispatch), f16 ones too (an even length: whole words). Rows
    // of 7 f16 take the general path: ReduceMax, ReduceSum computing exp(x - max) as it reads
    // it and the quotient (or x - max - log(sum)) computing it again, no tensor of exp
    // values, with the casts of the two sums accumulated in f32. Within 1e-6 relative of the
    // reference in f32 (it rounds once per op, as we do; the sums may add in another order).
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    for (dtype, cols, per_run) in [
        (DType::F32, 6, 1),
        (DType::F32, 300, 1),
        (DType::F16, 6, 1),
        (DType::F16, 300, 1),
        (DType::F16, 7, 5),
    ] {
        for op in ["Softmax", "LogSoftmax"] {
            let x = data(dtype, &[4, cols], cols as u64);
            let before = ctx.stats().dispatches;
            let (got, want) = both(&ctx, Node::new(op, "s").attr("axis", Attr::Int(1)), x);
            let what = format!("{op} {dtype} rows of {cols}");
            assert_eq!(ctx.stats().dispatches - before, per_run, "{what}");
            let tol = if dtype == DType::F16 { 1e-3 } else { 1e-6 };
            for (a, b) in as_f64(&got).iter().zip(as_f64(&want)) {
                assert!(
                    (a - b).abs() <= tol * b.abs().max(1.0),
                    "{what}: {a} vs {b}"
                );
            }
        }
    }
}

/// LayerNormalization and RMSNormalization on f32, f16, bf16 and f64 against the reference
/// (computed in f64): over the last axis, the last two, all axes, with and without a bias,
/// the scale broadcast from fewer axes, Mean and InvStdDev (f32) when the node names them. Tolerances: 1e-4 relative for f32 (the sums of 60 squares in f32, sqrt and
/// reciprocal), 1e-12 for f64, one rounding of the type for f16 and bf16 (computed in f32
/// and rounded once). On f32, and on f16 and bf16 rows of an even length, with the scale and
/// bias varying along the normalized axes only, Y is one dispatch (the row kernel); otherwise the reductions compute `x - mean` and the
/// squares as they read them: LayerNormalization is 3 dispatches for Y (mean, variance,
/// result), RMSNormalization 2.
#[test]
fn normalizations_match_the_reference() {
    // A context of its own: other tests' dispatches do not count in its statistics.
    let own = own_ctx();
    // f64 also on the emulation (without SHADER_F64), where Y takes more dispatches.
    let emulated = [ctx_emulating_64_bit(), ctx_without_f64()];
    let on = [DType::F32, DType::F16, DType::BF16, DType::F64]
        .into_iter()
        .map(|d| (d, &own))
        .chain(emulated.into_iter().map(|c| (DType::F64, c)));
    for (dtype, ctx) in on {
        let counted = std::ptr::eq(ctx, &own);
        let (rtol, atol) = match dtype {
            DType::F32 => (1e-4, 1e-6),
            DType::F64 => (1e-12, 1e-14),
            DType::F16 => (2e-3, 1e-4),
            _ => (1.6e-2, 1e-3),
        };
        let cast = |t: HostTensor| wgpu_ops::reference::cast_host(&t, dtype).unwrap();
        let floats = |shape: &[usize], seed: u64| {
            let n: usize = shape.iter().product();
            let v: Vec<f64> = bytes(seed, n)
                .iter()
                .map(|&b| f64::from(b) / 32.0 - 3.0)
                .collect();
            cast(HostTensor::from_vec(shape.to_vec(), &v).unwrap())
        };
        let x = floats(&[3, 4, 5], 1);
        for (axis, scale_shape, with_bias) in [
            (-1i64, vec![5usize], true),
            (1, vec![4, 5], false),
            (0, vec![1, 5], true),
            (-2, vec![4, 5], true),
        ] {
            for op in ["LayerNormalization", "RMSNormalization"] {
                let layer = op == "LayerNormalization";
                let mut g = Graph::new()
                    .input("x", dtype, &[Some(3), Some(4), Some(5)])
                    .input(
                        "scale",
                        dtype,
                        &scale_shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                    );
                let mut inputs = vec!["x", "scale"];
                if layer && with_bias {
                    g = g.input("bias", dtype, &[Some(5)]);
                    inputs.push("bias");
                }
                let outputs: Vec<&str> = match (layer, axis) {
                    (false, _) => vec!["y"],
                    (true, -1) => vec!["y", "mean", "inv"],
                    (true, 1) => vec!["y", "mean"],
                    _ => vec!["y"],
                };
                let mut node = Node::new(op, "n")
                    .inputs(inputs.clone())
                    .outputs(outputs.clone())
                    .attr("axis", Attr::Int(axis));
                if axis == -2 {
                    node = node.attr("epsilon", Attr::Float(0.25));
                }
                g = g.node(node);
                for o in &outputs {
                    g = g.output(*o);
                }
                let mut given = vec![
                    ("x".to_string(), x.clone()),
                    ("scale".to_string(), floats(&scale_shape, 2)),
                ];
                if layer && with_bias {
                    given.push(("bias".to_string(), floats(&[5], 3)));
                }
                let session = Session::new(ctx, g.clone()).unwrap();
                let before = ctx.stats().dispatches;
                let got = session.run_blocking(given.clone()).unwrap();
                let dispatches = ctx.stats().dispatches - before;
                let want = run_graph(&g, &given, &Default::default()).unwrap();
                let what = format!("{op} {dtype} axis {axis} bias {with_bias} own {counted}");
                for ((name, t), w) in got.iter().zip(&want) {
                    let (rtol, atol) = if name == "y" {
                        (rtol, atol)
                    } else {
                        (1e-4, 1e-6)
                    };
                    assert_close(t, w, rtol, atol, &format!("{what}: {name}"));
                    if name != "y" {
                        assert_eq!(t.dtype, DType::F32, "{what}: {name}");
                    }
                }
                let trimmed = |d: &[usize]| -> Vec<usize> {
                    d.iter().copied().skip_while(|&d| d == 1).collect()
                };
                let first = axis.rem_euclid(3) as usize;
                let row = trimmed(&x.shape[first..]);
                let along_row =
                    trimmed(&scale_shape) == row && (!layer || !with_bias || trimmed(&[5]) == row);
                let row_kernel = dtype == DType::F32
                    || (dtype != DType::F64 && row.iter().product::<usize>() % 2 == 0);
                if !counted {
                    continue;
                }
                if outputs == ["y"] && row_kernel && along_row {
                    assert_eq!(dispatches, 1, "{what}");
                } else if outputs == ["y"] && matches!(dtype, DType::F32 | DType::F64) {
                    assert_eq!(dispatches, if layer { 3 } else { 2 }, "{what}");
                }
            }
        }
    }
    // Bad inputs: one error naming the op and the input.
    let ctx = &own;
    let x = HostTensor::from_vec(vec![2, 3], &[1.0f32; 6]).unwrap();
    let refused = |node: Node, inputs: Vec<(&str, HostTensor)>| {
        let mut g = Graph::new();
        for (name, t) in &inputs {
            g = g.input(
                *name,
                t.dtype,
                &t.shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
            );
        }
        let g = g.node(node.outputs(["y"])).output("y");
        let given = inputs
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect();
        Session::new(ctx, g)
            .unwrap()
            .run_blocking(given)
            .unwrap_err()
            .to_string()
    };
    let e = refused(
        Node::new("LayerNormalization", "n")
            .inputs(["x", "s"])
            .attr("axis", Attr::Int(2)),
        vec![
            ("x", x.clone()),
            ("s", HostTensor::from_vec(vec![3], &[1.0f32; 3]).unwrap()),
        ],
    );
    assert!(
        e.contains("LayerNormalization") && e.contains("axis 2 is out of range"),
        "{e}"
    );
    let e = refused(
        Node::new("RMSNormalization", "n").inputs(["x", "s"]),
        vec![
            ("x", x.clone()),
            ("s", HostTensor::from_vec(vec![4], &[1.0f32; 4]).unwrap()),
        ],
    );
    assert!(e.contains("RMSNormalization") && e.contains("Scale"), "{e}");
    let e = refused(
        Node::new("RMSNormalization", "n")
            .inputs(["x", "s"])
            .attr("stash_type", Attr::Int(16)),
        vec![
            ("x", x),
            ("s", HostTensor::from_vec(vec![3], &[1.0f32; 3]).unwrap()),
        ],
    );
    assert!(e.contains("stash_type is 16"), "{e}");
    let ints = HostTensor::from_vec(vec![2], &[1i32, 2]).unwrap();
    let e = refused(
        Node::new("RMSNormalization", "n").inputs(["x", "s"]),
        vec![("x", ints.clone()), ("s", ints)],
    );
    assert!(e.contains("X is i32"), "{e}");
}

/// ReduceLogSumExp where the largest value is infinite or a value is NaN: +inf gives +inf
/// (its shift by the max, inf - inf, made NaN), all -inf gives -inf, NaN gives NaN, as
/// onnxruntime gives them; f32 and f64, on the GPU and in the interpreter. Rows longer than a
/// workgroup put the infinity in one thread's part and finite values (or -inf) in the others'.
// ReduceLogSum of rows whose sums are subnormal f32 values takes their log from the bits:
// lavapipe's `log` read the exponent field as if the number were normal (-88.03 for 1e-45,
// whose log is -103.28). An adapter that flushes subnormals adds them as zeros: -inf there.
#[test]
fn log_sum_of_subnormal_sums() {
    let ctx = ctx();
    let tiny = f32::from_bits(1);
    let rows = [
        [tiny, 0.0, 0.0],
        [tiny, tiny, tiny],
        [1e-39, 1e-40, 0.0],
        [2.9e-39, 0.0, 0.0],
        [1.1e-38, 0.0, 0.0],
    ];
    let x = HostTensor::from_vec(vec![rows.len(), 3], rows.as_flattened()).unwrap();
    let flushing = {
        let node = Node::new("ReduceSum", "s")
            .attr("axes", Attr::Ints(vec![1]))
            .attr("keepdims", Attr::Int(0));
        both(ctx, node, x.clone()).0.to_vec::<f32>().unwrap()[0] == 0.0
    };
    let node = Node::new("ReduceLogSum", "r")
        .attr("axes", Attr::Ints(vec![1]))
        .attr("keepdims", Attr::Int(0));
    let got = both(ctx, node, x).0.to_vec::<f32>().unwrap();
    for (row, &g) in rows.iter().zip(&got) {
        // Sums of f32 subnormals are exact in f32: whole multiples of 2^-149.
        let want = row.iter().map(|&v| f64::from(v)).sum::<f64>().ln();
        if flushing {
            assert_eq!(g, f32::NEG_INFINITY, "{row:?}");
        } else {
            assert!(
                (f64::from(g) - want).abs() <= 1e-6 * want.abs(),
                "{row:?}: {g} vs {want}"
            );
        }
    }
}

#[test]
fn log_sum_exp_of_infinities_and_nan() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let rows: [(&[f64], f64); 8] = [
        (&[inf, 1.0], inf),
        (&[inf, -inf], inf),
        (&[-inf, -inf], -inf),
        (&[nan, inf], nan),
        (&[inf, inf], inf),
        (&[-inf, nan], nan),
        (&[3.0, -inf], 3.0),
        (&[inf, nan], nan),
    ];
    for width in [2usize, 1000] {
        for dtype in [DType::F32, DType::F64] {
            let mut values = Vec::new();
            for (row, expected) in &rows {
                // Finite values beside a +inf or NaN; -inf beside the others (no change).
                let filler = if *expected == inf || expected.is_nan() {
                    0.5
                } else {
                    -inf
                };
                let mut line = vec![filler; width];
                line[width - 2..].copy_from_slice(row);
                line.rotate_right(width / 3);
                values.extend(line);
            }
            let x = data_from(dtype, &[rows.len(), width], &values);
            let node = Node::new("ReduceLogSumExp", "r")
                .attr("axes", Attr::Ints(vec![1]))
                .attr("keepdims", Attr::Int(0));
            let (got, want) = both(ctx(), node, x);
            for (name, t) in [("GPU", got), ("interpreter", want)] {
                let v = as_f64(&t);
                for ((row, expected), v) in rows.iter().zip(v) {
                    let ok = if expected.is_nan() {
                        v.is_nan()
                    } else {
                        v == *expected
                    };
                    assert!(
                        ok,
                        "{name} {dtype} width {width} {row:?}: {v}, not {expected}"
                    );
                }
            }
        }
    }
}

/// TopK orders NaN (of either sign) above every number and -0 equal to 0 (ties keep their
/// order), as onnxruntime does: the indices it gives, on the GPU and in the interpreter, for
/// f32, f64 and f16.
#[test]
fn topk_orders_nan_above_every_number() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let negative_nan = -f64::NAN;
    let x = [
        nan,
        1.0,
        2.0,
        nan,
        -inf,
        3.0,
        nan,
        -1.0,
        inf,
        0.0,
        0.0,
        -0.0,
        negative_nan,
        0.0,
        -1.0,
    ];
    // (largest, k, onnxruntime 1.32's indices)
    let cases: [(i64, i64, [&[i64]; 3]); 4] = [
        (0, 2, [&[4, 1], &[2, 4], &[4, 0]]),
        (0, 4, [&[4, 1, 2, 0], &[2, 4, 0, 3], &[4, 0, 1, 3]]),
        (1, 2, [&[0, 3], &[1, 3], &[2, 0]]),
        (1, 4, [&[0, 3, 2, 1], &[1, 3, 0, 4], &[2, 0, 1, 3]]),
    ];
    for dtype in [DType::F32, DType::F64, DType::F16] {
        let x = data_from(dtype, &[3, 5], &x);
        for (largest, k, want) in cases {
            let g = Graph::new()
                .input("x", dtype, &[Some(3), Some(5)])
                .input("k", DType::I64, &[Some(1)])
                .node(
                    Node::new("TopK", "t")
                        .inputs(["x", "k"])
                        .outputs(["v", "i"])
                        .attr("largest", Attr::Int(largest)),
                )
                .output("v")
                .output("i");
            let inputs = vec![
                ("x".to_string(), x.clone()),
                (
                    "k".to_string(),
                    HostTensor::from_vec(vec![1], &[k]).unwrap(),
                ),
            ];
            let want: Vec<i64> = want.concat();
            let reference = run_graph(&g, &inputs, &Default::default()).unwrap();
            let got = Session::new(ctx(), g)
                .unwrap()
                .run_blocking(inputs)
                .unwrap();
            for (name, indices) in [("GPU", &got[1].1), ("interpreter", &reference[1])] {
                assert_eq!(
                    indices.to_vec::<i64>().unwrap(),
                    want,
                    "{name} {dtype} largest {largest} k {k}"
                );
            }
        }
    }
}

/// The one-dispatch row kernel of Softmax, LogSoftmax, LayerNormalization and
/// RMSNormalization against the reference, on f32 (and f16 and bf16 below): rows of 1 to 16 384 elements (a thread per row, or
/// 16 to 256 lanes folding each), many short rows (a thread each on CPU adapters), masked
/// (-inf) entries, a row of -inf only and a row with a NaN (NaN throughout, as the reference
/// gives), and values of 1e30 (exp of x - max never overflows). One dispatch each; rows of
/// 16 385 take the general path (its reductions in two passes each), as do
/// LayerNormalization's scales that vary across rows. f32 within 1e-6 (Softmax, of outputs at most 1) and 1e-4 relative
/// (normalizations, as `normalizations_match_the_reference`).
#[test]
fn one_dispatch_row_kernels_match_the_reference() {
    let own = own_ctx();
    let ctx = &own;
    let run = |g: &Graph, given: &[(String, HostTensor)]| -> (Vec<HostTensor>, u64) {
        let session = Session::new(ctx, g.clone()).unwrap();
        let before = ctx.stats().dispatches;
        let got = session.run_blocking(given.to_vec()).unwrap();
        let dispatches = ctx.stats().dispatches - before;
        (got.into_iter().map(|(_, v)| v).collect(), dispatches)
    };
    // `op` over the last axis of `x`: the GPU's result, the reference's, the dispatches.
    let softmax = |op: &str, x: &HostTensor| -> (HostTensor, HostTensor, u64) {
        let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
        let node = Node::new(op, "s").attr("axis", Attr::Int(-1));
        let g = Graph::new()
            .input("x", x.dtype, &shape)
            .node(node.inputs(["x"]).outputs(["y"]))
            .output("y");
        let given = vec![("x".to_string(), x.clone())];
        let (mut got, dispatches) = run(&g, &given);
        let want = run_graph(&g, &given, &Default::default())
            .unwrap()
            .remove(0);
        (got.remove(0), want, dispatches)
    };
    // `op` (a normalization) over the last axis of `x`: as `softmax`.
    let normalize = |op: &str, x: &HostTensor, scale: &HostTensor, bias: Option<&HostTensor>| {
        let n = x.shape[x.shape.len() - 1];
        let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
        let mut g = Graph::new()
            .input("x", x.dtype, &shape)
            .input("scale", x.dtype, &[Some(n)]);
        let mut inputs = vec!["x", "scale"];
        let mut given = vec![
            ("x".to_string(), x.clone()),
            ("scale".to_string(), scale.clone()),
        ];
        if let Some(b) = bias {
            g = g.input("bias", x.dtype, &[Some(n)]);
            inputs.push("bias");
            given.push(("bias".to_string(), b.clone()));
        }
        let node = Node::new(op, "n").attr("axis", Attr::Int(-1));
        let g = g.node(node.inputs(inputs).outputs(["y"])).output("y");
        let (mut got, dispatches) = run(&g, &given);
        let want = run_graph(&g, &given, &Default::default())
            .unwrap()
            .remove(0);
        (got.remove(0), want, dispatches)
    };
    let floats = |n: usize, seed: u64, scale: f64| -> Vec<f32> {
        bytes(seed, n)
            .iter()
            .map(|&b| ((f64::from(b) - 127.5) / 32.0 * scale) as f32)
            .collect()
    };
    for (rows, n) in [
        (3usize, 1usize),
        (4, 5),
        (5, 33),
        (3, 65),
        (2, 300),
        (2, 4097),
        (1, 16384),
        (2048, 40),
        (1, 16385),
    ] {
        let mut x = floats(rows * n, (rows * n) as u64, 1.0);
        if n >= 5 && rows >= 3 {
            // Masked entries, a row of -inf only, a NaN, and values far beyond exp's range.
            x[1] = f32::NEG_INFINITY;
            x[n..2 * n].fill(f32::NEG_INFINITY);
            x[2 * n + 2] = f32::NAN;
            if rows >= 4 {
                for v in &mut x[3 * n..4 * n] {
                    *v *= 1e30;
                }
            }
        }
        let xt = HostTensor::from_vec(vec![rows, n], &x).unwrap();
        let general = n > 16384;
        for op in ["Softmax", "LogSoftmax"] {
            let (got, want, dispatches) = softmax(op, &xt);
            let what = format!("{op} [{rows}, {n}]");
            // The general path's reductions take two passes each over so long a row.
            assert_eq!(dispatches, if general { 5 } else { 1 }, "{what}");
            let atol = if op == "Softmax" { 1e-6 } else { 1e-5 };
            assert_close(&got, &want, 1e-6, atol, &what);
        }
        if x.iter().any(|v| !v.is_finite()) {
            continue;
        }
        for (op, bias) in [
            ("LayerNormalization", true),
            ("LayerNormalization", false),
            ("RMSNormalization", false),
        ] {
            let scale = HostTensor::from_vec(vec![n], &floats(n, 7, 1.0)).unwrap();
            let b = HostTensor::from_vec(vec![n], &floats(n, 8, 1.0)).unwrap();
            let (got, want, dispatches) = normalize(op, &xt, &scale, bias.then_some(&b));
            let what = format!("{op} [{rows}, {n}] bias {bias}");
            let general_count = if op == "RMSNormalization" { 3 } else { 5 };
            assert_eq!(
                dispatches,
                if general { general_count } else { 1 },
                "{what}"
            );
            assert_close(&got, &want, 1e-4, 1e-5, &what);
        }
    }
    // f16 and bf16: rows of an even length take the kernel (Softmax rounding each step of its
    // function body, the normalizations rounding once), odd ones the general path. Within one
    // rounding of the type (as `normalizations_match_the_reference`).
    for dtype in [DType::F16, DType::BF16] {
        let (rtol, atol) = match dtype {
            DType::F16 => (2e-3, 1e-4),
            _ => (1.6e-2, 1e-3),
        };
        let typed = |shape: Vec<usize>, v: Vec<f32>| {
            let t = HostTensor::from_vec(shape, &v).unwrap();
            wgpu_ops::reference::cast_host(&t, dtype).unwrap()
        };
        for (rows, n) in [(4usize, 6usize), (3, 300), (2048, 40), (2, 7)] {
            let mut x = floats(rows * n, (rows * n + 1) as u64, 1.0);
            if rows >= 3 {
                x[1] = f32::NEG_INFINITY;
                x[n..2 * n].fill(f32::NEG_INFINITY);
                x[2 * n + 2] = f32::NAN;
            }
            let xt = typed(vec![rows, n], x.clone());
            let kernel = n % 2 == 0;
            for op in ["Softmax", "LogSoftmax"] {
                let (got, want, dispatches) = softmax(op, &xt);
                let what = format!("{op} {dtype} [{rows}, {n}]");
                assert_eq!(dispatches == 1, kernel, "{what}: {dispatches} dispatches");
                assert_close(&got, &want, rtol, atol, &what);
            }
            let x = floats(rows * n, (rows * n + 2) as u64, 1.0);
            let xt = typed(vec![rows, n], x);
            let scale = typed(vec![n], floats(n, 9, 1.0));
            let bias = typed(vec![n], floats(n, 10, 1.0));
            for op in ["LayerNormalization", "RMSNormalization"] {
                let layer = op == "LayerNormalization";
                let (got, want, dispatches) = normalize(op, &xt, &scale, layer.then_some(&bias));
                let what = format!("{op} {dtype} [{rows}, {n}]");
                assert_eq!(dispatches == 1, kernel, "{what}: {dispatches} dispatches");
                assert_close(&got, &want, rtol, atol, &what);
            }
        }
    }
    // A scale that varies across rows (LayerNormalization over the last axis of [4, 6] with
    // a [4, 6] scale) keeps the general path, and its results.
    let x = HostTensor::from_vec(vec![4, 6], &floats(24, 3, 1.0)).unwrap();
    let scale = HostTensor::from_vec(vec![4, 6], &floats(24, 4, 1.0)).unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[Some(4), Some(6)])
        .input("scale", DType::F32, &[Some(4), Some(6)])
        .node(
            Node::new("LayerNormalization", "n")
                .inputs(["x", "scale"])
                .outputs(["y"])
                .attr("axis", Attr::Int(-1)),
        )
        .output("y");
    let given = vec![("x".to_string(), x), ("scale".to_string(), scale)];
    let (got, dispatches) = run(&g, &given);
    let want = run_graph(&g, &given, &Default::default()).unwrap();
    assert_eq!(dispatches, 3, "scale across rows");
    assert_close(&got[0], &want[0], 1e-4, 1e-5, "scale across rows");
}
