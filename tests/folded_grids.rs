//! Grids folded into y and z: a context that launches at most 6 workgroups along each grid
//! dimension (`ContextOptions::max_workgroups_per_dimension`) runs a graph of many kinds of
//! kernel, on inputs large enough that each needs a grid of two or three dimensions, and
//! must give the bits the default context gives, with either kernel set.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::kernels::dispatch_grid;
use wgpu_ops::{Context, ContextOptions, DType, HostTensor, Session};

const FOLD_AT: u32 = 6;
const ROWS: usize = 96;
const COLS: usize = 120;

fn context(cpu_kernels: bool, max_workgroups_per_dimension: Option<u32>) -> Context {
    Context::new_blocking(ContextOptions {
        cpu_kernels: Some(cpu_kernels),
        workgroup_size: Some(64),
        max_workgroups_per_dimension,
        // CumSum's 96 rows as scans: in blocks (a workgroup per row's block and per row's
        // sums: 96 each, folded) with the GPU kernels, in chunks with the CPU ones.
        split_lines: Some(true),
        ..Default::default()
    })
    .unwrap()
}

fn i64s(v: &[i64]) -> HostTensor {
    HostTensor::from_vec(vec![v.len()], v).unwrap()
}

fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node::new(op, output)
        .inputs(inputs.iter().copied())
        .outputs([output])
}

/// Gathers of 1-, 4- and 8-byte elements, element-wise programs on 4-, 2- and 1-byte types, reductions, scans along rows,
/// TopK, a transpose, a pad, a softmax, an index gather, a product, a depth-to-space.
fn graph() -> Graph {
    let w: Vec<f32> = (0..COLS * 64)
        .map(|i| ((i * 7) % 13) as f32 - 6.0)
        .collect();
    Graph::new()
        .input("x", DType::F32, &[Some(ROWS), Some(COLS)])
        .input("b", DType::I8, &[Some(ROWS), Some(COLS)])
        .input("l", DType::I64, &[Some(ROWS), Some(COLS)])
        .input("m", DType::F32, &[Some(ROWS), Some(COLS)])
        .constant("zero", i64s(&[0]))
        .constant("one", i64s(&[1]))
        .constant("mone", i64s(&[-1]))
        .constant("two", i64s(&[2]))
        .constant("min", i64s(&[i64::MIN]))
        .constant("max", i64s(&[i64::MAX]))
        .constant("k", i64s(&[5]))
        .constant("axis1", HostTensor::from_vec(vec![], &[1i64]).unwrap())
        .constant("rows", i64s(&[95, 3, 0, 47, 50, 1, 94]))
        .constant("pads", i64s(&[1, 3, 2, 5]))
        .constant("to4d", i64s(&[1, 16, 24, 30]))
        .constant("w", HostTensor::from_vec(vec![COLS, 64], &w).unwrap())
        // Slice's inputs here: data, start, stop, step, axes.
        .node(node(
            "Slice",
            &["x", "mone", "min", "mone", "one"],
            "reversed",
        ))
        .node(node(
            "Slice",
            &["x", "one", "max", "two", "one"],
            "every_other",
        ))
        .node(node(
            "Slice",
            &["b", "mone", "min", "mone", "one"],
            "reversed_bytes",
        ))
        .node(node(
            "Slice",
            &["l", "mone", "min", "mone", "one"],
            "reversed_longs",
        ))
        .node(node("Add", &["x", "reversed"], "sum"))
        .node(node("Mul", &["sum", "x"], "product"))
        .node(
            Node::new("Cast", "half")
                .inputs(["product"])
                .outputs(["half"])
                .attr("to", Attr::String("f16".into())),
        )
        .node(node("Add", &["half", "half"], "half_sum"))
        .node(node("Add", &["b", "b"], "bytes"))
        .node(
            Node::new("ReduceSum", "row_sums")
                .inputs(["x"])
                .outputs(["row_sums"])
                .attr("axes", Attr::Ints(vec![1]))
                .attr("keepdims", Attr::Int(1)),
        )
        .node(
            Node::new("ReduceMax", "column_max")
                .inputs(["x"])
                .outputs(["column_max"])
                .attr("axes", Attr::Ints(vec![0]))
                .attr("keepdims", Attr::Int(0)),
        )
        .node(node("CumSum", &["x", "axis1"], "running"))
        .node(
            Node::new("TopK", "top")
                .inputs(["x", "k"])
                .outputs(["top_values", "top_indices"]),
        )
        .node(node("Transpose", &["x"], "transposed"))
        .node(node("Pad", &["x", "pads"], "padded"))
        .node(
            Node::new("Softmax", "soft")
                .inputs(["x"])
                .outputs(["soft"])
                .attr("axis", Attr::Int(1)),
        )
        .node(node("Gather", &["x", "rows"], "picked"))
        // Small integers, whose products sum exactly in any order: the folded grid cannot fit
        // the CPU set's blocks kernel and takes the tiles, which need not give the blocks'
        // bits for x's random ones (they did not on an AVX-512 host).
        .node(node("MatMul", &["m", "w"], "projected"))
        .node(node("Reshape", &["x", "to4d"], "image"))
        .node(
            Node::new("DepthToSpace", "d2s")
                .inputs(["image"])
                .outputs(["d2s"])
                .attr("blocksize", Attr::Int(2)),
        )
        .output("every_other")
        .output("reversed_bytes")
        .output("reversed_longs")
        .output("product")
        .output("half_sum")
        .output("bytes")
        .output("row_sums")
        .output("column_max")
        .output("running")
        .output("top_values")
        .output("top_indices")
        .output("transposed")
        .output("padded")
        .output("soft")
        .output("picked")
        .output("projected")
        .output("d2s")
}

/// [ROWS, COLS] f32 values from -8 to 7.
fn small_integers(seed: u64) -> HostTensor {
    let v: Vec<f32> = bytes(seed, ROWS * COLS)
        .iter()
        .map(|&b| f32::from(b % 16) - 8.0)
        .collect();
    HostTensor::from_vec(vec![ROWS, COLS], &v).unwrap()
}

fn run(ctx: &Context, inputs: &[(String, HostTensor)]) -> Vec<(String, HostTensor)> {
    Session::new(ctx, graph())
        .unwrap()
        .run_blocking(inputs.to_vec())
        .unwrap()
}

#[test]
fn folded_grids_give_the_bits_of_unfolded_ones() {
    // One invocation per element needs 180 workgroups of 64: 6 x 6 x 5 when folded at 6; one
    // per 16-byte quad of f32 needs 45: 6 x 4 x 2.
    let elements = (ROWS * COLS) as u64;
    assert_eq!(dispatch_grid(elements, 64, FOLD_AT), Some([6, 6, 5]));
    assert_eq!(dispatch_grid(elements / 4, 64, FOLD_AT), Some([6, 4, 2]));
    let inputs = vec![
        (
            "x".to_string(),
            random_tensor(11, DType::F32, &[ROWS, COLS]),
        ),
        ("b".to_string(), random_tensor(12, DType::I8, &[ROWS, COLS])),
        (
            "l".to_string(),
            random_tensor(14, DType::I64, &[ROWS, COLS]),
        ),
        ("m".to_string(), small_integers(15)),
    ];
    for cpu_kernels in [false, true] {
        let want = run(&context(cpu_kernels, None), &inputs);
        let got = run(&context(cpu_kernels, Some(FOLD_AT)), &inputs);
        assert_eq!(got.len(), want.len());
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            assert_eq!(
                (g.dtype, &g.shape),
                (w.dtype, &w.shape),
                "{name}, CPU kernels {cpu_kernels}"
            );
            assert!(
                g.data == w.data,
                "{name}, CPU kernels {cpu_kernels}: the folded grid's bits differ"
            );
        }
    }
}

#[test]
fn a_grid_beyond_the_fold_is_refused_with_the_limit_named() {
    // 6^3 workgroups of 64 hold 13 824 invocations; 100 000 elements need more, even at
    // four to an invocation.
    let ctx = context(false, Some(FOLD_AT));
    let g = Graph::new()
        .input("x", DType::F32, &[Some(100_000)])
        .node(node("Neg", &["x"], "y"))
        .output("y");
    let x = random_tensor(13, DType::F32, &[100_000]);
    let result = Session::new(&ctx, g)
        .unwrap()
        .run_blocking(vec![("x".to_string(), x)]);
    let Err(err) = result else {
        panic!("100 000 elements ran on a grid of at most 6 x 6 x 6 workgroups of 64");
    };
    let err = err.to_string();
    assert!(
        err.contains("max_compute_workgroups_per_dimension"),
        "{err}"
    );
}

#[test]
fn zero_workgroups_per_dimension_is_refused() {
    let result = Context::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(0),
        ..Default::default()
    });
    let Err(err) = result else {
        panic!("a context that launches nothing was made");
    };
    let err = err.to_string();
    assert!(err.contains("max_workgroups_per_dimension"), "{err}");
}
