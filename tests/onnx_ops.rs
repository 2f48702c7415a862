//! Conv, ConvTranspose, the pools, Resize and Einsum beyond the ONNX node tests and the
//! onnxruntime differential cases (tests/onnx_node.rs runs both, on the GPU and on the CPU
//! interpreter): refusals, NaN and infinities, GlobalLpPool (which onnxruntime has no CPU
//! kernel for), a Conv inside a Scan body, the interpreter against the GPU on random
//! geometry, and Einsum's numpy rules where onnxruntime refuses.

mod common;

use wgpu_ops::graph::Attr;
use wgpu_ops::{reference, DType, Graph, HostTensor, Node, Out, Session};

fn f32s(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

/// Graph `g` on `inputs` on the GPU and on the CPU reference: the first output of each.
fn on_both(
    ctx: &wgpu_ops::Context,
    g: &Graph,
    inputs: Vec<(String, HostTensor)>,
) -> (HostTensor, HostTensor) {
    let got = Session::new(ctx, g.clone())
        .unwrap()
        .run_blocking(inputs.clone())
        .unwrap()
        .remove(0)
        .1;
    let want = reference::graph::run_graph(g, &inputs, &Default::default())
        .unwrap()
        .remove(0);
    (got, want)
}

/// One node of `op` over `inputs` (name, value), each a graph input (`as_inputs`: run on the
/// GPU) or a constant (folded on the host by the interpreter); the session's outputs.
fn run(
    ctx: &wgpu_ops::Context,
    op: &str,
    inputs: &[(&str, HostTensor)],
    attrs: &[(&str, Attr)],
    outputs: usize,
    as_inputs: bool,
) -> wgpu_ops::Result<Vec<HostTensor>> {
    let mut g = Graph::new();
    for (name, v) in inputs {
        g = if as_inputs {
            let shape: Vec<Option<usize>> = v.shape.iter().map(|&d| Some(d)).collect();
            g.input(*name, v.dtype, &shape)
        } else {
            g.constant(*name, v.clone())
        };
    }
    let names: Vec<String> = (0..outputs).map(|i| format!("y{i}")).collect();
    let mut node = Node::new(op, "n")
        .inputs(inputs.iter().map(|(n, _)| *n))
        .outputs(names.iter().cloned());
    for (k, v) in attrs {
        node = node.attr(*k, v.clone());
    }
    g = g.node(node);
    for n in &names {
        g = g.output(n.clone());
    }
    let given = if as_inputs {
        inputs
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let out = Session::new(ctx, g)?.run_blocking(given)?;
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

/// A refusal to check: op, inputs, attributes, and text the error must contain.
type Case<'a> = (
    &'a str,
    Vec<(&'a str, HostTensor)>,
    Vec<(&'a str, Attr)>,
    &'a str,
);

/// Each case is refused on both paths (GPU and interpreter folding) with one error line that
/// names the op and holds the case's text.
fn assert_refused(ctx: &wgpu_ops::Context, cases: &[Case]) {
    for (op, inputs, attrs, mention) in cases {
        for as_inputs in [true, false] {
            let e = run(ctx, op, inputs, attrs, 1, as_inputs)
                .expect_err(&format!("{op} {attrs:?} {mention} (inputs {as_inputs})"))
                .to_string();
            assert!(
                e.contains(op) && e.contains(mention) && e.lines().count() == 1,
                "{op} {attrs:?} (inputs {as_inputs}): {e}"
            );
        }
    }
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

#[test]
fn window_ops_refuse_bad_geometry_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[1, 4, 5, 5], 1);
    let w = f32s(&[2, 4, 3, 3], 2);
    let x3 = f32s(&[1, 4, 5], 3);
    let cases: Vec<Case> = vec![
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("group", Attr::Int(3))],
            "group",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("group", Attr::Int(-2))],
            "group",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", f32s(&[2, 3, 3, 3], 4))],
            vec![],
            "W",
        ),
        (
            "Conv",
            vec![("x", x3.clone()), ("w", w.clone())],
            vec![],
            "W",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone()), ("b", f32s(&[3], 5))],
            vec![],
            "B",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", f32s(&[2, 4, 7, 3], 6))],
            vec![],
            "kernel",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("kernel_shape", ints(&[3, 2]))],
            "kernel_shape",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("strides", ints(&[1, 0]))],
            "strides",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("pads", ints(&[1, 1]))],
            "pads",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("pads", ints(&[1 << 40, 0, 0, 0]))],
            "pads",
        ),
        (
            "Conv",
            vec![("x", x.clone()), ("w", w.clone())],
            vec![("auto_pad", Attr::String("SAME\nUPPER".into()))],
            "auto_pad",
        ),
        (
            "ConvTranspose",
            vec![("x", x.clone()), ("w", f32s(&[3, 2, 3, 3], 7))],
            vec![],
            "W",
        ),
        (
            "ConvTranspose",
            vec![("x", x.clone()), ("w", f32s(&[4, 2, 3, 3], 8))],
            vec![("pads", ints(&[5, 5, 5, 5]))],
            "pads",
        ),
        (
            "ConvTranspose",
            vec![("x", x.clone()), ("w", f32s(&[4, 2, 3, 3], 8))],
            vec![("output_shape", ints(&[1 << 30, 1 << 30]))],
            "",
        ),
        ("MaxPool", vec![("x", x.clone())], vec![], "kernel_shape"),
        (
            "MaxPool",
            vec![("x", x.clone())],
            vec![
                ("kernel_shape", ints(&[2, 2])),
                ("storage_order", Attr::Int(2)),
            ],
            "storage_order",
        ),
        (
            "LpPool",
            vec![("x", x.clone())],
            vec![("kernel_shape", ints(&[2, 2])), ("p", Attr::Int(0))],
            "p",
        ),
        (
            "MaxPool",
            vec![("x", HostTensor::from_vec(vec![1, 4], &[0i32; 4]).unwrap())],
            vec![("kernel_shape", ints(&[2]))],
            "spatial",
        ),
        (
            "GlobalAveragePool",
            vec![(
                "x",
                HostTensor::from_vec(vec![1, 4, 2], &[0i32; 8]).unwrap(),
            )],
            vec![],
            "i32",
        ),
    ];
    assert_refused(&ctx, &cases);
}

/// A pool over an axis shorter than its kernel (with the padding) has no window there, as the
/// spec's formula, the ONNX reference and onnxruntime's AveragePool and LpPool give (an empty
/// output), but with `ceil_mode` one window where it starts in the input; Conv refuses it, as
/// onnxruntime does.
#[test]
fn pools_over_axes_shorter_than_their_kernel_have_no_window() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[1, 4, 5, 5], 1);
    // [1, 2, 2, 2]: -3 -2 / -1 0 in channel 0, 1 2 / 3 4 in channel 1.
    let small: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
    let small = HostTensor::from_vec(vec![1, 2, 2, 2], &small).unwrap();
    let k31 = ("kernel_shape", ints(&[3, 1]));
    let s31 = ("strides", ints(&[3, 1]));
    // (op, input, attributes, output shape)
    type Shaped<'a> = (&'a str, &'a HostTensor, Vec<(&'a str, Attr)>, Vec<usize>);
    let empty: Vec<Shaped> = vec![
        (
            "AveragePool",
            &x,
            vec![("kernel_shape", ints(&[6, 2]))],
            vec![1, 4, 0, 4],
        ),
        (
            "MaxPool",
            &small,
            vec![k31.clone(), s31.clone()],
            vec![1, 2, 0, 2],
        ),
        ("LpPool", &small, vec![k31.clone()], vec![1, 2, 0, 2]),
    ];
    for (op, x, attrs, shape) in empty {
        for as_inputs in [true, false] {
            let y = run(&ctx, op, &[("x", x.clone())], &attrs, 1, as_inputs).unwrap();
            assert_eq!(y[0].shape, shape, "{op} {attrs:?}");
        }
    }
    for as_inputs in [true, false] {
        let attrs = [k31.clone(), s31.clone(), ("ceil_mode", Attr::Int(1))];
        let y = run(
            &ctx,
            "MaxPool",
            &[("x", small.clone())],
            &attrs,
            2,
            as_inputs,
        )
        .unwrap();
        assert_eq!(y[0].shape, vec![1, 2, 1, 2]);
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![-1.0, 0.0, 3.0, 4.0]);
        assert_eq!(y[1].to_vec::<i64>().unwrap(), vec![2, 3, 6, 7]);
    }
    let cases: Vec<Case> = vec![(
        "Conv",
        vec![("x", x.clone()), ("w", f32s(&[2, 4, 7, 3], 6))],
        vec![],
        "kernel",
    )];
    assert_refused(&ctx, &cases);
}

/// MaxPool's maximum is ReduceMax's: NaN wins, -inf stays -inf, padding never wins. The GPU
/// and the interpreter agree, and both give the values written out here.
#[test]
fn max_pool_takes_nan_and_infinities_as_reduce_max_does() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let (inf, nan) = (f32::INFINITY, f32::NAN);

    let x = HostTensor::from_vec(
        vec![1, 1, 8],
        &[-inf, 1.0, -inf, -inf, 2.0, nan, -3.0, -4.0],
    )
    .unwrap();
    let attrs = [
        ("kernel_shape", ints(&[2])),
        ("strides", ints(&[2])),
        ("pads", ints(&[1, 1])),
    ];
    // Padded: [pad, -inf, 1, -inf, -inf, 2, NaN, -3, -4, pad], windows of two.
    let want = [-inf, 1.0, 2.0, nan, -4.0];
    for as_inputs in [true, false] {
        let y = run(&ctx, "MaxPool", &[("x", x.clone())], &attrs, 1, as_inputs).unwrap();
        let got = y[0].to_vec::<f32>().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                g == &w || (g.is_nan() && w.is_nan()),
                "inputs {as_inputs}: {got:?}"
            );
        }
    }
}

/// Automatic padding follows the spec's formulas (`docs/spec-decisions.md` 33), where the
/// runtimes differ: a negative `SAME` total pads nothing (onnxruntime's MaxPool refuses it,
/// its AveragePool shifts the window), `SAME` pads the dilated kernel (onnxruntime's MaxPool
/// pads the undilated one), and `VALID` ignores `ceil_mode` (onnxruntime adds a partial
/// window). Written-out values, on constants and inputs alike.
#[test]
fn automatic_padding_follows_the_spec_formulas() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x3 = HostTensor::from_vec(vec![1, 1, 3], &[0.0f32, 1.0, 2.0]).unwrap();
    // -2, -0.5, 1, 2.5, 4, 5.5, 7
    let x7: Vec<f32> = (0..7).map(|i| i as f32 * 1.5 - 2.0).collect();
    let x7 = HostTensor::from_vec(vec![1, 1, 7], &x7).unwrap();
    let same = |pad: &str| ("auto_pad", Attr::String(pad.into()));
    // (op, input, attributes, expected output)
    type Case<'a> = (&'a str, &'a HostTensor, Vec<(&'a str, Attr)>, Vec<f32>);
    let cases: Vec<Case> = vec![
        (
            "MaxPool",
            &x3,
            vec![
                ("kernel_shape", ints(&[1])),
                ("strides", ints(&[3])),
                same("SAME_UPPER"),
            ],
            vec![0.0],
        ),
        (
            "AveragePool",
            &x3,
            vec![
                ("kernel_shape", ints(&[1])),
                ("strides", ints(&[3])),
                same("SAME_UPPER"),
            ],
            vec![0.0],
        ),
        (
            "MaxPool",
            &x3,
            vec![
                ("kernel_shape", ints(&[1])),
                ("strides", ints(&[3])),
                same("SAME_LOWER"),
            ],
            vec![0.0],
        ),
        // Total padding (4 - 1) * 2 + 3 - 7 = 2: one element each side; windows read
        // positions -1 and 1, 1 and 3, 3 and 5, 5 and 7.
        (
            "MaxPool",
            &x7,
            vec![
                ("kernel_shape", ints(&[2])),
                ("strides", ints(&[2])),
                ("dilations", ints(&[2])),
                same("SAME_UPPER"),
            ],
            vec![-0.5, 2.5, 5.5, 5.5],
        ),
        (
            "MaxPool",
            &x7,
            vec![
                ("kernel_shape", ints(&[2])),
                ("strides", ints(&[3])),
                ("ceil_mode", Attr::Int(1)),
                same("VALID"),
            ],
            vec![-0.5, 4.0],
        ),
        (
            "AveragePool",
            &x7,
            vec![
                ("kernel_shape", ints(&[2])),
                ("strides", ints(&[3])),
                ("ceil_mode", Attr::Int(1)),
                same("VALID"),
            ],
            vec![-1.25, 3.25],
        ),
    ];
    for (op, x, attrs, want) in cases {
        for as_inputs in [true, false] {
            let y = run(&ctx, op, &[("x", x.clone())], &attrs, 1, as_inputs).unwrap();
            assert_eq!(y[0].to_vec::<f32>().unwrap(), want, "{op} {attrs:?}");
        }
    }
}

/// `SAME` gives ceil(len / stride) windows: none along an empty axis, where the padding of
/// a whole kernel would otherwise make one (as the ONNX reference; onnxruntime refuses any
/// empty spatial axis).
#[test]
fn same_padding_gives_no_window_over_an_empty_axis() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = HostTensor::from_vec(vec![2, 4, 3, 0], &[] as &[f32]).unwrap();
    let w = HostTensor::from_vec(vec![2, 4, 1, 2], &[1.0f32; 16]).unwrap();
    for op in ["MaxPool", "AveragePool", "LpPool", "Conv"] {
        for pad in ["SAME_UPPER", "SAME_LOWER"] {
            let attrs = [
                ("kernel_shape", ints(&[1, 2])),
                ("strides", ints(&[2, 2])),
                ("auto_pad", Attr::String(pad.into())),
            ];
            let mut inputs = vec![("x", x.clone())];
            if op == "Conv" {
                inputs.push(("w", w.clone()));
            }
            let channels = if op == "Conv" { 2 } else { 4 };
            for as_inputs in [true, false] {
                let y = run(&ctx, op, &inputs, &attrs, 1, as_inputs).unwrap();
                assert_eq!(y[0].shape, [2, channels, 2, 0], "{op} {pad}");
            }
        }
    }
}

#[test]
fn global_lp_pool_is_the_norm_of_each_image() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[2, 3, 4, 5], 9);
    let v = x.to_vec::<f32>().unwrap();
    for p in [1i64, 2, 3] {
        let want: Vec<f64> = v
            .chunks(20)
            .map(|c| {
                c.iter()
                    .map(|&e| (e as f64).abs().powi(p as i32))
                    .sum::<f64>()
                    .powf(1.0 / p as f64)
            })
            .collect();
        for as_inputs in [true, false] {
            let y = run(
                &ctx,
                "GlobalLpPool",
                &[("x", x.clone())],
                &[("p", Attr::Int(p))],
                1,
                as_inputs,
            )
            .unwrap();
            assert_eq!(y[0].shape, [2, 3, 1, 1]);
            for (g, w) in y[0].to_vec::<f32>().unwrap().iter().zip(&want) {
                assert!(
                    ((*g as f64) - w).abs() <= 1e-4 * w.abs() + 1e-5,
                    "p {p}: {g} {w}"
                );
            }
        }
    }
}

/// Random Conv, ConvTranspose and pool geometry (strides, dilations, pads, groups, ceil_mode)
/// on the GPU against the interpreter's direct sums.
#[test]
fn random_geometry_matches_the_interpreter() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let mut seed = 17u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut compared = 0;
    for case in 0..24 {
        let op = ["Conv", "ConvTranspose", "MaxPool", "AveragePool"][case % 4];
        let dims = 1 + next(2) as usize;
        let group = if op.starts_with("Conv") {
            1 + next(2) as usize
        } else {
            1
        };
        let c = group * (1 + next(2) as usize);
        let mut xs = vec![1 + next(2) as usize, c];
        let (mut kernel, mut strides, mut dilations, mut pads) = (vec![], vec![], vec![], vec![]);
        for _ in 0..dims {
            xs.push(4 + next(5) as usize);
            kernel.push(1 + next(3) as i64);
            strides.push(1 + next(3) as i64);
            dilations.push(1 + next(2) as i64);
        }
        for j in 0..2 * dims {
            pads.push(next(kernel[j % dims] as u64) as i64);
        }
        let mut attrs = vec![
            ("strides", ints(&strides)),
            ("dilations", ints(&dilations)),
            ("pads", ints(&pads)),
        ];
        let mut inputs = vec![("x", f32s(&xs, case as u64))];
        if op.starts_with("Conv") {
            let m = group * (1 + next(2) as usize);
            let mut ws = if op == "Conv" {
                vec![m, c / group]
            } else {
                vec![c, m / group]
            };
            ws.extend(kernel.iter().map(|&k| k as usize));
            inputs.push(("w", f32s(&ws, 100 + case as u64)));
            inputs.push(("b", f32s(&[m], 200 + case as u64)));
            attrs.push(("group", Attr::Int(group as i64)));
        } else {
            attrs.push(("kernel_shape", ints(&kernel)));
            attrs.push(("ceil_mode", Attr::Int(next(2) as i64)));
            if op == "AveragePool" {
                attrs.push(("count_include_pad", Attr::Int(next(2) as i64)));
            }
        }
        let gpu = run(&ctx, op, &inputs, &attrs, 1, true);
        let mut g = Graph::new();
        for (n, v) in &inputs {
            g = g.constant(*n, v.clone());
        }
        let mut node = Node::new(op, "n")
            .inputs(inputs.iter().map(|(n, _)| *n))
            .outputs(["y"]);
        for (k, v) in &attrs {
            node = node.attr(*k, v.clone());
        }
        let cpu = reference::graph::run_graph(&g.node(node).output("y"), &[], &Default::default());
        match (gpu, cpu) {
            (Ok(gpu), Ok(cpu)) => {
                assert_eq!(gpu[0].shape, cpu[0].shape, "{op} {xs:?} {attrs:?}");
                assert_eq!(gpu[0].dtype, DType::F32);
                let (a, b) = (
                    gpu[0].to_vec::<f32>().unwrap(),
                    cpu[0].to_vec::<f32>().unwrap(),
                );
                for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                    assert!(
                        (p - q).abs() <= 1e-4 * q.abs() + 1e-5,
                        "{op} {xs:?} {attrs:?}: [{i}] {p} {q}"
                    );
                }
                compared += 1;
            }
            // Geometry without a window (pads beyond the kernel's reach) is refused by both.
            (Err(_), Err(_)) => {}
            (gpu, cpu) => panic!(
                "{op} {xs:?} {attrs:?}: GPU {:?}, CPU {:?}",
                gpu.err(),
                cpu.err()
            ),
        }
    }
    assert!(compared >= 18, "only {compared} of 24 cases had windows");
}

/// A Conv in a Scan body runs per iteration against the state: a 1-D smoothing applied
/// three times.
#[test]
fn conv_runs_in_a_scan_body() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let w = HostTensor::from_vec(vec![1, 1, 3], &[0.25f32, 0.5, 0.25]).unwrap();
    let body = Graph::new()
        .input("s", DType::F32, &[Some(1), Some(1), Some(6)])
        .input("t", DType::F32, &[Some(1)])
        .constant("w", w)
        .node(
            Node::new("Conv", "c")
                .inputs(["s", "w"])
                .outputs(["s2"])
                .attr("pads", ints(&[1, 1])),
        )
        .output("s2");
    let s0 = HostTensor::from_vec(vec![1, 1, 6], &[0f32, 0.0, 8.0, 0.0, 0.0, 0.0]).unwrap();
    let g = Graph::new()
        .input("s0", DType::F32, &[Some(1), Some(1), Some(6)])
        .input("ts", DType::F32, &[Some(3), Some(1)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "ts"])
                .outputs(["s"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("s");
    let ts = HostTensor::from_vec(vec![3, 1], &[0f32; 3]).unwrap();
    let out = Session::new(&ctx, g.clone())
        .unwrap()
        .run_blocking(vec![("s0".into(), s0.clone()), ("ts".into(), ts.clone())])
        .unwrap();
    let got = out[0].1.to_vec::<f32>().unwrap();
    // [0, 0, 8, 0, 0, 0] smoothed three times by [1/4, 1/2, 1/4] (zeros beyond the ends).
    let want = [0.75f32, 1.875, 2.5, 1.875, 0.75, 0.125];
    assert_eq!(got, want);
    let cpu = reference::graph::run_graph(
        &g,
        &[("s0".into(), s0), ("ts".into(), ts)],
        &Default::default(),
    )
    .unwrap();
    assert_eq!(cpu[0].to_vec::<f32>().unwrap(), want);
}

#[test]
fn resize_refuses_bad_arguments_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[1, 1, 4, 4], 11);
    let f = |v: &[f32]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let sizes = |v: &[i64]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let empty = f(&[]);
    let string = |s: &str| Attr::String(s.into());
    type ResizeCase<'a> = (Vec<(&'a str, HostTensor)>, Vec<(&'a str, Attr)>, &'a str);
    let cases: Vec<ResizeCase> = vec![
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[1.0, 1.0, 2.0, 2.0])),
                ("sizes", sizes(&[1, 1, 8, 8])),
            ],
            vec![],
            "exactly one",
        ),
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[2.0, 2.0])),
            ],
            vec![],
            "scales",
        ),
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[1.0, 1.0, -2.0, 2.0])),
            ],
            vec![],
            "positive",
        ),
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[1.0, 1.0, 2.0, 2.0])),
            ],
            vec![("mode", string("bicubic\n"))],
            "mode",
        ),
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[1.0, 1.0, 2.0, 2.0])),
            ],
            vec![(
                "coordinate_transformation_mode",
                string("tf_crop_and_resize"),
            )],
            "roi",
        ),
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[2.0, 2.0])),
            ],
            vec![("axes", ints(&[2, 2]))],
            "axes",
        ),
        (
            vec![
                (
                    "x",
                    HostTensor::from_vec(vec![1, 4], &[1i32, 2, 3, 4]).unwrap(),
                ),
                ("roi", empty.clone()),
                ("scales", f(&[1.0, 2.0])),
            ],
            vec![("mode", string("linear"))],
            "i32",
        ),
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", empty.clone()),
                ("sizes", sizes(&[1, 1, 8])),
            ],
            vec![],
            "sizes",
        ),
        // Upsample (loaded as Resize with upscale_only) only enlarges.
        (
            vec![
                ("x", x.clone()),
                ("roi", empty.clone()),
                ("scales", f(&[1.0, 1.0, 0.5, 2.0])),
            ],
            vec![("upscale_only", Attr::Int(1))],
            "Upsample's are at least 1",
        ),
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .map(|(inputs, attrs, mention)| ("Resize", inputs, attrs, mention))
        .collect();
    assert_refused(&ctx, &cases);
}

/// Einsum as numpy reads it where onnxruntime refuses: ellipses of different widths
/// broadcast from the right, and an implicit output of upper-case letters (ASCII order puts
/// them first). The GPU and the interpreter agree with sums written out here.
#[test]
fn einsum_follows_numpy_where_onnxruntime_refuses() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let a = f32s(&[2, 1, 3, 4], 21);
    let b = f32s(&[5, 4, 2], 22);
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let eq = [("equation", Attr::String("...ij,...jk->...ik".into()))];
    for as_inputs in [true, false] {
        let y = run(
            &ctx,
            "Einsum",
            &[("a", a.clone()), ("b", b.clone())],
            &eq,
            1,
            as_inputs,
        )
        .unwrap();
        assert_eq!(y[0].shape, [2, 5, 3, 2]);
        let got = y[0].to_vec::<f32>().unwrap();
        for (p, q, i, k) in [(0, 0, 0, 0), (1, 4, 2, 1), (1, 2, 1, 0)] {
            let want: f32 = (0..4)
                .map(|j| av[(p * 3 + i) * 4 + j] * bv[(q * 4 + j) * 2 + k])
                .sum();
            let g = got[((p * 5 + q) * 3 + i) * 2 + k];
            assert!(
                (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{p} {q} {i} {k}: {g} {want}"
            );
        }
    }
    let c = f32s(&[3, 4], 23);
    let d = f32s(&[4, 2], 24);
    let implicit = [("equation", Attr::String("bA,Cb".into()))];
    for as_inputs in [true, false] {
        let y = run(
            &ctx,
            "Einsum",
            &[("c", c.clone()), ("d", d.clone())],
            &implicit,
            1,
            as_inputs,
        );
        // "bA,Cb": b is summed, the output is "AC" (A from c's axis 1, C from d's axis 0).
        assert!(y.is_err(), "bA,Cb needs b's lengths equal: 3 and 2");
    }
    let implicit = [("equation", Attr::String("Ab,bC".into()))];
    for as_inputs in [true, false] {
        let y = run(
            &ctx,
            "Einsum",
            &[("c", c.clone()), ("d", d.clone())],
            &implicit,
            1,
            as_inputs,
        )
        .unwrap();
        assert_eq!(y[0].shape, [3, 2]);
    }
}

#[test]
fn einsum_refuses_bad_equations_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let a = f32s(&[3, 4], 31);
    let b = f32s(&[4, 5], 32);
    let two = |eq: &str| (vec![("a", a.clone()), ("b", b.clone())], eq.to_string());
    let cases = vec![
        two("ij,jk->i\u{7}k"),
        two("i1,jk"),
        two("......ij,jk"),
        two("ijk,jk"),
        two("ij,kl->ij,"),
        two("ij,ik->ik"),
        two("ij,jk->iz"),
        two("ij,jk->ii"),
        two("ij"),
        (
            vec![
                ("a", a.clone()),
                ("b", HostTensor::from_vec(vec![4, 5], &[0i32; 20]).unwrap()),
            ],
            "ij,jk".into(),
        ),
        (
            vec![("a", HostTensor::from_vec(vec![2], &[true, false]).unwrap())],
            "i".into(),
        ),
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .map(|(inputs, eq)| ("Einsum", inputs, vec![("equation", Attr::String(eq))], ""))
        .collect();
    assert_refused(&ctx, &cases);
}

/// LRN of an even size (onnxruntime takes odd ones only): one more channel after than
/// before, as the spec's ceil and floor put them; GroupNormalization and LRN refusals.
#[test]
fn lrn_even_sizes_and_channel_refusals() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[2, 5, 3], 41);
    let v = x.to_vec::<f32>().unwrap();
    let attrs = [
        ("size", Attr::Int(4)),
        ("alpha", Attr::Float(0.5)),
        ("bias", Attr::Float(1.5)),
    ];
    for as_inputs in [true, false] {
        let y = run(&ctx, "LRN", &[("x", x.clone())], &attrs, 1, as_inputs).unwrap();
        let got = y[0].to_vec::<f32>().unwrap();
        // Channel 0 of image 1, position 2: channels 0..=2 (1 before is cut, 2 after).
        let at = |c: usize| v[(5 + c) * 3 + 2] as f64;
        let sum: f64 = (0..=2).map(|c| at(c) * at(c)).sum();
        let want = at(0) / (1.5 + 0.5 / 4.0 * sum).powf(0.75);
        let g = got[5 * 3 + 2] as f64;
        assert!((g - want).abs() <= 1e-5 * want.abs().max(1.0), "{g} {want}");
    }
    let scale = f32s(&[5], 42);
    let cases: Vec<Case> = vec![
        (
            "GroupNormalization",
            vec![("x", x.clone()), ("s", scale.clone()), ("b", scale.clone())],
            vec![("num_groups", Attr::Int(2))],
            "num_groups",
        ),
        (
            "InstanceNormalization",
            vec![
                ("x", x.clone()),
                ("s", f32s(&[4], 43)),
                ("b", scale.clone()),
            ],
            vec![],
            "scale",
        ),
        (
            "LRN",
            vec![("x", x.clone())],
            vec![("size", Attr::Int(0))],
            "size",
        ),
    ];
    assert_refused(&ctx, &cases);
}

#[test]
fn gather_nd_refuses_bad_indices_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let data = f32s(&[2, 3, 4], 51);
    let idx = |shape: &[usize], v: &[i64]| HostTensor::from_vec(shape.to_vec(), v).unwrap();
    let cases: Vec<Case> = vec![
        (
            "GatherND",
            vec![("d", data.clone()), ("i", idx(&[1, 2], &[1, 3]))],
            vec![],
            "out of range",
        ),
        (
            "GatherND",
            vec![("d", data.clone()), ("i", idx(&[1, 2], &[-3, 0]))],
            vec![],
            "out of range",
        ),
        (
            "GatherND",
            vec![("d", data.clone()), ("i", idx(&[1, 4], &[0, 0, 0, 0]))],
            vec![],
            "tuples",
        ),
        (
            "GatherND",
            vec![("d", data.clone()), ("i", idx(&[3, 1], &[0, 0, 0]))],
            vec![("batch_dims", Attr::Int(1))],
            "batch_dims",
        ),
        (
            "GatherND",
            vec![("d", data.clone()), ("i", idx(&[2, 1], &[0, 0]))],
            vec![("batch_dims", Attr::Int(2))],
            "batch_dims",
        ),
    ];
    assert_refused(&ctx, &cases);
}

#[test]
fn row_picking_ops_refuse_bad_inputs_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[4, 3], 61);
    let lens = |v: &[i64]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let cond = |v: &[bool]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let cases: Vec<Case> = vec![
        (
            "ReverseSequence",
            vec![("x", x.clone()), ("l", lens(&[1, 5, 2]))],
            vec![],
            "sequence_lens[1] is 5",
        ),
        (
            "ReverseSequence",
            vec![("x", x.clone()), ("l", lens(&[1, 2]))],
            vec![],
            "batch of 3",
        ),
        (
            "ReverseSequence",
            vec![("x", x.clone()), ("l", lens(&[1, 2, 3]))],
            vec![("time_axis", Attr::Int(2))],
            "time_axis",
        ),
        (
            "Compress",
            vec![("x", x.clone()), ("c", cond(&[true; 5]))],
            vec![("axis", Attr::Int(0))],
            "shorter",
        ),
        (
            "Compress",
            vec![("x", x.clone()), ("c", cond(&[true]))],
            vec![("axis", Attr::Int(2))],
            "axis",
        ),
        (
            "Compress",
            vec![("x", x.clone()), ("c", lens(&[1, 0]))],
            vec![],
            "bool",
        ),
        (
            "CenterCropPad",
            vec![("x", x.clone()), ("s", lens(&[2]))],
            vec![],
            "1 lengths for 2 axes",
        ),
        (
            "CenterCropPad",
            vec![("x", x.clone()), ("s", lens(&[2, 2]))],
            vec![("axes", ints(&[0, -2]))],
            "given twice",
        ),
    ];
    assert_refused(&ctx, &cases);
    // TopK's K past the axis (or negative): the interpreter, which folds constants, gave
    // the rows padded with zeros for 4, and aborted the process for 2^40.
    for k in [4, -1, 1 << 40] {
        for as_inputs in [true, false] {
            let inputs = [("x", x.clone()), ("k", lens(&[k]))];
            let e = run(&ctx, "TopK", &inputs, &[], 2, as_inputs)
                .expect_err("K past the axis")
                .to_string();
            assert!(
                e.contains("TopK: K is") && e.contains("0..=3") && e.lines().count() == 1,
                "K {k} (inputs {as_inputs}): {e}"
            );
        }
    }
}

/// Values that plan an op are checked alike whether they are constants (computed while
/// planning, by the interpreter) or graph inputs (the GPU's plan): the interpreter took an
/// axis past the rank, a shape Expand cannot broadcast to and a depth of 0, and neither path
/// checked the ranges the spec gives a ratio and an IoU threshold (onnxruntime refuses them).
#[test]
fn planning_values_are_checked_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[4, 3], 62);
    let scalar = |v: f32| HostTensor::from_vec(vec![], &[v]).unwrap();
    let boxes = HostTensor::from_vec(vec![1, 2, 4], &[0f32, 0., 1., 1., 0., 0., 1., 2.]).unwrap();
    let scores = HostTensor::from_vec(vec![1, 1, 2], &[0.5f32, 0.9]).unwrap();
    let count = HostTensor::from_vec(vec![1], &[2i64]).unwrap();
    let mut cases: Vec<Case> = [-3i64, 2, 1 << 31]
        .into_iter()
        .map(|axis| {
            (
                "CumSum",
                vec![
                    ("x", x.clone()),
                    ("axis", HostTensor::from_vec(vec![], &[axis]).unwrap()),
                ],
                vec![],
                "out of range",
            )
        })
        .collect();
    for ratio in [1.0, 2.0, -0.5, f32::NAN] {
        for training in [false, true] {
            cases.push((
                "Dropout",
                vec![
                    ("x", x.clone()),
                    ("ratio", scalar(ratio)),
                    (
                        "training",
                        HostTensor::from_vec(vec![], &[training]).unwrap(),
                    ),
                ],
                vec![],
                "[0, 1)",
            ));
        }
    }
    for iou in [1.5, -0.1, f32::NAN] {
        cases.push((
            "NonMaxSuppression",
            vec![
                ("boxes", boxes.clone()),
                ("scores", scores.clone()),
                ("count", count.clone()),
                ("iou", HostTensor::from_vec(vec![1], &[iou]).unwrap()),
            ],
            vec![],
            "iou_threshold",
        ));
    }
    // The interpreter expanded [4, 3] to [0] (a dim that is neither 1 nor equal kept the
    // data's) and gave OneHot of depth 0 an empty result.
    cases.push((
        "Expand",
        vec![
            ("x", x.clone()),
            ("shape", HostTensor::from_vec(vec![1], &[0i64]).unwrap()),
        ],
        vec![],
        "does not broadcast",
    ));
    for depth in [0f32, -2.0] {
        cases.push((
            "OneHot",
            vec![
                (
                    "indices",
                    HostTensor::from_vec(vec![2], &[0i64, 1]).unwrap(),
                ),
                ("depth", scalar(depth)),
                (
                    "values",
                    HostTensor::from_vec(vec![2], &[0f32, 1.]).unwrap(),
                ),
            ],
            vec![],
            "1 or more",
        ));
    }
    assert_refused(&ctx, &cases);
    // Split sizes that are negative or do not fill the axis: the interpreter cut [1, -1] of
    // an axis of 4 as if the -1 were 2^64 - 1.
    for split in [[1i64, -1], [1, 2], [5, -1]] {
        for as_inputs in [true, false] {
            let inputs = [
                ("x", x.clone()),
                ("split", HostTensor::from_vec(vec![2], &split).unwrap()),
            ];
            let e = run(&ctx, "Split", &inputs, &[], 2, as_inputs)
                .expect_err("bad split")
                .to_string();
            assert!(
                e.contains("Split: split") && e.lines().count() == 1,
                "{split:?} (inputs {as_inputs}): {e}"
            );
        }
    }
    // The ends of the ranges run.
    for (ratio, training) in [(0.0, true), (0.99, false)] {
        let inputs = [
            ("x", x.clone()),
            ("ratio", scalar(ratio)),
            (
                "training",
                HostTensor::from_vec(vec![], &[training]).unwrap(),
            ),
        ];
        for as_inputs in [true, false] {
            let out = run(&ctx, "Dropout", &inputs, &[], 1, as_inputs).unwrap();
            assert_eq!(out[0], x, "ratio {ratio}");
        }
    }
    for iou in [0.0, 1.0] {
        let inputs = [
            ("boxes", boxes.clone()),
            ("scores", scores.clone()),
            ("count", count.clone()),
            ("iou", HostTensor::from_vec(vec![1], &[iou]).unwrap()),
        ];
        for as_inputs in [true, false] {
            run(&ctx, "NonMaxSuppression", &inputs, &[], 1, as_inputs).unwrap();
        }
    }
}

#[test]
fn grid_sample_refuses_bad_inputs_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[1, 2, 4, 5], 1);
    let grid = f32s(&[1, 3, 3, 2], 2);
    let mode = |m: &str| vec![("mode", Attr::String(m.into()))];
    let i32s = HostTensor::from_vec(vec![1, 2, 4, 5], &[3i32; 40]).unwrap();
    assert_refused(
        &ctx,
        &[
            (
                "GridSample",
                vec![("x", f32s(&[2, 5], 1)), ("grid", grid.clone())],
                vec![],
                "at least one spatial axis",
            ),
            (
                "GridSample",
                vec![("x", x.clone()), ("grid", f32s(&[1, 3, 3, 3], 2))],
                vec![],
                "K = 2 spatial axes",
            ),
            (
                "GridSample",
                vec![("x", x.clone()), ("grid", f32s(&[2, 3, 3, 2], 2))],
                vec![],
                "with N = 1",
            ),
            (
                "GridSample",
                vec![("x", x.clone()), ("grid", grid.clone())],
                mode("area"),
                "mode 'area' is not one of",
            ),
            (
                "GridSample",
                vec![("x", x.clone()), ("grid", grid.clone())],
                vec![("padding_mode", Attr::String("wrap".into()))],
                "padding_mode 'wrap'",
            ),
            (
                "GridSample",
                vec![("x", i32s.clone()), ("grid", grid.clone())],
                mode("linear"),
                "X is i32; linear mode takes",
            ),
            (
                "GridSample",
                vec![
                    ("x", x),
                    (
                        "grid",
                        HostTensor::from_vec(vec![1, 3, 3, 2], &[0i32; 18]).unwrap(),
                    ),
                ],
                vec![],
                "grid is i32",
            ),
            (
                "GridSample",
                vec![
                    (
                        "x",
                        HostTensor::from_vec(vec![1, 2, 4, 0], &[] as &[f32]).unwrap(),
                    ),
                    ("grid", grid.clone()),
                ],
                vec![],
                "spatial axis 1 is empty",
            ),
        ],
    );
}

/// GridSample where onnxruntime has no kernel (1-D inputs, 3-D cubic, integer inputs in
/// nearest mode, coordinates that are NaN or infinite) against the interpreter: nearest mode
/// bit for bit, the others within f32's tolerance.
#[test]
fn grid_sample_beyond_onnxruntime_matches_the_interpreter() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let mut cases: Vec<(HostTensor, HostTensor, &str, &str)> = Vec::new();
    for padding in ["zeros", "border", "reflection"] {
        cases.push((f32s(&[2, 3, 7], 3), f32s(&[2, 5, 1], 4), "linear", padding));
        cases.push((f32s(&[2, 3, 7], 3), f32s(&[2, 5, 1], 4), "cubic", padding));
        cases.push((
            f32s(&[1, 2, 3, 4, 3], 5),
            f32s(&[1, 2, 2, 3, 3], 6),
            "cubic",
            padding,
        ));
        let bytes: Vec<u8> = (0..2 * 3 * 4 * 5).map(|v| (v * 37 % 251) as u8).collect();
        let u8s = HostTensor::from_vec(vec![2, 3, 4, 5], &bytes).unwrap();
        cases.push((u8s, f32s(&[2, 3, 2, 2], 7), "nearest", padding));
        let longs: Vec<i64> = (0..3 * 2 * 6).map(|v| (v as i64 - 20) << 40).collect();
        let i64s = HostTensor::from_vec(vec![3, 2, 6], &longs).unwrap();
        cases.push((i64s, f32s(&[3, 4, 1], 8), "nearest", padding));
        let odd = HostTensor::from_vec(
            vec![1, 2, 2, 2],
            &[
                f32::NAN,
                0.5,
                f32::INFINITY,
                -0.25,
                -f32::INFINITY,
                3.0,
                0.0,
                f32::NAN,
            ],
        )
        .unwrap();
        cases.push((f32s(&[1, 1, 3, 3], 9), odd, "linear", padding));
    }
    for (x, grid, mode, padding) in cases {
        for align in [0, 1] {
            let attrs = vec![
                ("mode", Attr::String(mode.into())),
                ("padding_mode", Attr::String(padding.into())),
                ("align_corners", Attr::Int(align)),
            ];
            let inputs = [("x", x.clone()), ("grid", grid.clone())];
            let gpu = run(&ctx, "GridSample", &inputs, &attrs, 1, true).unwrap();
            let node = attrs.iter().fold(
                Node::new("GridSample", "n")
                    .inputs(["x", "grid"])
                    .outputs(["y"]),
                |n, (k, v)| n.attr(*k, v.clone()),
            );
            let g = Graph::new()
                .constant("x", x.clone())
                .constant("grid", grid.clone())
                .node(node)
                .output("y");
            let cpu = reference::graph::run_graph(&g, &[], &Default::default()).unwrap();
            let what = format!("{mode} {padding} align {align} {:?}", x.shape);
            assert_eq!(
                (gpu[0].dtype, &gpu[0].shape),
                (cpu[0].dtype, &cpu[0].shape),
                "{what}"
            );
            if mode == "nearest" {
                assert_eq!(gpu[0].data, cpu[0].data, "{what}");
                continue;
            }
            let (a, b) = (
                gpu[0].to_vec::<f32>().unwrap(),
                cpu[0].to_vec::<f32>().unwrap(),
            );
            for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                let close = (p - q).abs() <= 1e-4 * q.abs() + 1e-5;
                assert!(close || (p.is_nan() && q.is_nan()), "{what}: [{i}] {p} {q}");
            }
        }
    }
}

#[test]
fn spectral_ops_refuse_bad_inputs_with_one_line_on_both_paths() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let int = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let signal = f32s(&[2, 16, 1], 3);
    assert_refused(
        &ctx,
        &[
            (
                "DFT",
                vec![("x", f32s(&[2, 8, 3], 1))],
                vec![],
                "holds 1 (real) or 2 (real, imaginary) parts, not 3",
            ),
            (
                "DFT",
                vec![("x", f32s(&[2, 8, 2], 1)), ("n", int(0))],
                vec![],
                "dft_length must be at least 1",
            ),
            (
                "DFT",
                vec![("x", f32s(&[2, 8, 2], 1)), ("n", int(8)), ("axis", int(2))],
                vec![],
                "axis 2 is not a signal axis",
            ),
            (
                "DFT",
                vec![("x", f32s(&[1, 8, 2], 1)), ("n", int((1 << 24) + 1))],
                vec![],
                "2^24 points per transform",
            ),
            (
                "STFT",
                vec![
                    ("s", signal.clone()),
                    ("step", int(0)),
                    ("w", f32s(&[4], 2)),
                ],
                vec![],
                "frame_step must be at least 1",
            ),
            (
                "STFT",
                vec![
                    ("s", signal.clone()),
                    ("step", int(2)),
                    ("w", f32s(&[20], 2)),
                ],
                vec![],
                "longer than the signal",
            ),
            (
                "STFT",
                vec![
                    ("s", signal),
                    ("step", int(2)),
                    ("w", f32s(&[4], 2)),
                    ("l", int(5)),
                ],
                vec![],
                "frame_length 5 must be the window's length 4",
            ),
            (
                "MelWeightMatrix",
                vec![
                    ("m", int(0)),
                    ("l", int(64)),
                    ("r", int(16000)),
                    ("lo", HostTensor::from_vec(vec![], &[0f32]).unwrap()),
                    ("hi", HostTensor::from_vec(vec![], &[8000f32]).unwrap()),
                ],
                vec![],
                "num_mel_bins (0) and dft_length (64) must be at least 1",
            ),
            (
                "MelWeightMatrix",
                vec![
                    ("m", int(8)),
                    ("l", int(64)),
                    ("r", int(16000)),
                    ("lo", HostTensor::from_vec(vec![], &[900f32]).unwrap()),
                    ("hi", HostTensor::from_vec(vec![], &[800f32]).unwrap()),
                ],
                vec![],
                "the edges must satisfy 0 <= lower (900) < upper (800)",
            ),
            (
                "MelWeightMatrix",
                vec![
                    ("m", int(8)),
                    ("l", HostTensor::from_vec(vec![], &[64f32]).unwrap()),
                    ("r", int(16000)),
                    ("lo", HostTensor::from_vec(vec![], &[0f32]).unwrap()),
                    ("hi", HostTensor::from_vec(vec![], &[800f32]).unwrap()),
                ],
                vec![],
                "dft_length is f32; it is an integer",
            ),
            (
                "AffineGrid",
                vec![
                    ("theta", f32s(&[2, 2, 3], 4)),
                    (
                        "size",
                        HostTensor::from_vec(vec![5], &[2i64, 1, 3, 4, 5]).unwrap(),
                    ),
                ],
                vec![],
                "theta must be [N, K, K + 1] = [2, 3, 4]",
            ),
        ],
    );
}

/// Col2Im on the GPU against the interpreter on 1-, 2- and 3-D geometry (onnxruntime's 1-D
/// and 3-D results differ from the ONNX reference, which the interpreter follows), and its
/// refusals.
#[test]
fn col2im_matches_the_interpreter_and_refuses_bad_geometry() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let longs = |v: &[i64]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    type Geometry<'a> = (&'a [i64], &'a [i64], &'a [i64], &'a [i64], &'a [i64]);
    let cases: [Geometry; 3] = [
        (&[11], &[3], &[2], &[2], &[1, 2]),
        (&[9, 8], &[2, 3], &[2, 3], &[2, 1], &[1, 0, 2, 1]),
        (
            &[4, 5, 3],
            &[2, 2, 2],
            &[1, 2, 1],
            &[1, 1, 2],
            &[0, 1, 1, 1, 0, 1],
        ),
    ];
    for (image, block, strides, dilations, pads) in cases {
        let k = image.len();
        let blocks: usize = (0..k)
            .map(|d| {
                ((image[d] + pads[d] + pads[k + d] - dilations[d] * (block[d] - 1) - 1)
                    / strides[d]
                    + 1) as usize
            })
            .product();
        let per_block: i64 = block.iter().product();
        let x = f32s(&[2, 3 * per_block as usize, blocks], 11);
        let attrs = vec![
            ("strides", ints(strides)),
            ("dilations", ints(dilations)),
            ("pads", ints(pads)),
        ];
        let inputs = [("x", x), ("image", longs(image)), ("block", longs(block))];
        let gpu = run(&ctx, "Col2Im", &inputs, &attrs, 1, true).unwrap();
        let node = attrs.iter().fold(
            Node::new("Col2Im", "n")
                .inputs(["x", "image", "block"])
                .outputs(["y"]),
            |n, (k, v)| n.attr(*k, v.clone()),
        );
        let g = inputs
            .iter()
            .fold(Graph::new(), |g, (n, v)| g.constant(*n, v.clone()))
            .node(node)
            .output("y");
        let cpu = reference::graph::run_graph(&g, &[], &Default::default()).unwrap();
        assert_eq!(gpu[0].shape, cpu[0].shape, "{image:?}");
        let (a, b) = (
            gpu[0].to_vec::<f32>().unwrap(),
            cpu[0].to_vec::<f32>().unwrap(),
        );
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!(
                (p - q).abs() <= 1e-4 * q.abs() + 1e-5,
                "{image:?}: [{i}] {p} {q}"
            );
        }
    }
    assert_refused(
        &ctx,
        &[
            (
                "Col2Im",
                vec![
                    ("x", f32s(&[1, 4, 5], 1)),
                    ("image", longs(&[4, 4])),
                    ("block", longs(&[2, 2])),
                ],
                vec![],
                "input holds 5 blocks but",
            ),
            (
                "Col2Im",
                vec![
                    ("x", f32s(&[1, 6, 9], 1)),
                    ("image", longs(&[4, 4])),
                    ("block", longs(&[2, 2])),
                ],
                vec![],
                "input must be [N, C * 4, L]",
            ),
            (
                "Col2Im",
                vec![
                    ("x", f32s(&[1, 4, 9], 1)),
                    ("image", longs(&[4, 4])),
                    ("block", longs(&[2])),
                ],
                vec![],
                "must give the same number",
            ),
            (
                "Col2Im",
                vec![
                    ("x", f32s(&[1, 25, 1], 1)),
                    ("image", longs(&[4, 4])),
                    ("block", longs(&[5, 5])),
                ],
                vec![],
                "more than the padded image",
            ),
        ],
    );
}

/// Conv on i32 (the integer convolutions' core) sums exactly, as the CPU reference does, with
/// pads, strides, dilations and groups, bias included; i8 is refused in one line.
#[test]
fn conv_on_i32_is_exact() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let ints_of = |shape: Vec<usize>, seed: u64, span: i32| {
        let n: usize = shape.iter().product();
        // splitmix64
        let mut state = seed;
        let v: Vec<i32> = (0..n)
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((z ^ (z >> 31)) % (2 * span as u64)) as i32 - span
            })
            .collect();
        HostTensor::from_vec(shape, &v).unwrap()
    };
    let x = ints_of(vec![2, 4, 9, 7], 1, 40_000);
    let w = ints_of(vec![6, 2, 3, 2], 2, 300);
    let b = ints_of(vec![6], 3, 1_000_000);
    let g = Graph::new()
        .input("x", DType::I32, &[Some(2), Some(4), Some(9), Some(7)])
        .input("w", DType::I32, &[Some(6), Some(2), Some(3), Some(2)])
        .input("b", DType::I32, &[Some(6)])
        .node(
            Node::new("Conv", "c")
                .inputs(["x", "w", "b"])
                .outputs(["y"])
                .attr("pads", ints(&[1, 0, 2, 1]))
                .attr("strides", ints(&[2, 1]))
                .attr("dilations", ints(&[1, 2]))
                .attr("group", Attr::Int(2)),
        )
        .output("y");
    let inputs = vec![("x".into(), x), ("w".into(), w), ("b".into(), b)];
    let (got, want) = on_both(&ctx, &g, inputs);
    assert_eq!(got, want);
    assert_eq!(got.dtype, DType::I32);

    let g = Graph::new()
        .input("x", DType::I8, &[Some(1), Some(1), Some(4)])
        .input("w", DType::I8, &[Some(1), Some(1), Some(2)])
        .node(Node::new("Conv", "c").inputs(["x", "w"]).outputs(["y"]))
        .output("y");
    let e = Session::new(&ctx, g)
        .and_then(|s| {
            s.run_blocking(vec![
                (
                    "x".into(),
                    HostTensor::from_vec(vec![1, 1, 4], &[1i8; 4]).unwrap(),
                ),
                (
                    "w".into(),
                    HostTensor::from_vec(vec![1, 1, 2], &[1i8; 2]).unwrap(),
                ),
            ])
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("X is i8; Conv takes f32, f16, bf16, f64 or i32"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1);
}

/// NonZero of a graph input (known while planning): the coordinates in C order, NaN counted,
/// any rank, on the GPU path as in the reference; of a value computed on the GPU: read back
/// in the middle of the run, or, without read-backs (as in the browser), refused in one line
/// naming the node and the input.
#[test]
fn non_zero_of_known_values_and_of_gpu_values() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = HostTensor::from_vec(
        vec![2, 3, 2],
        &[
            0f32,
            1.0,
            -0.0,
            f32::NAN,
            0.0,
            2.0,
            3.0,
            0.0,
            0.0,
            0.0,
            4.0,
            5.0,
        ],
    )
    .unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[Some(2), Some(3), Some(2)])
        .node(Node::new("NonZero", "nz").inputs(["x"]).outputs(["y"]))
        .output("y");
    let (got, want) = on_both(&ctx, &g, vec![("x".to_string(), x)]);
    assert_eq!(got, want);
    assert_eq!(got.shape, [3, 6]);
    assert_eq!(
        got.to_vec::<i64>().unwrap(),
        [0, 0, 0, 1, 1, 1, 0, 1, 2, 0, 2, 2, 1, 1, 1, 0, 0, 1]
    );

    // A small op on a graph input is computed on the host for the plan too.
    let relu = |n: usize| {
        Graph::new()
            .input("x", DType::F32, &[Some(n)])
            .node(Node::new("Relu", "r").inputs(["x"]).outputs(["r"]))
            .node(Node::new("NonZero", "nz\n1").inputs(["r"]).outputs(["y"]))
            .output("y")
    };
    let x = HostTensor::from_vec(vec![4], &[1f32, -1.0, 0.0, 2.0]).unwrap();
    let got = Session::new(&ctx, relu(4))
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap();
    assert_eq!(got[0].1.to_vec::<i64>().unwrap(), [0, 3]);
    // A large one is computed on the GPU, then read back.
    let n = 1 << 15;
    let g = relu(n);
    let values: Vec<f32> = (0..n)
        .map(|i| if i % 1000 == 7 { 1.0 } else { -1.0 })
        .collect();
    let x = HostTensor::from_vec(vec![n], &values).unwrap();
    let got = Session::new(&ctx, g.clone())
        .unwrap()
        .run_blocking(vec![("x".into(), x.clone())])
        .unwrap();
    let want: Vec<i64> = (0..n as i64).filter(|i| i % 1000 == 7).collect();
    assert_eq!(got[0].1.to_vec::<i64>().unwrap(), want);
    assert_eq!(ctx.stats().read_backs, 1);
    let no_read_back = common::ctx_without_read_back();
    let e = Session::new(&no_read_back, g)
        .and_then(|s| s.run_blocking(vec![("x".into(), x)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nz\\n1") && e.contains("computed on the GPU"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// NonMaxSuppression of boxes and scores on the GPU (a detector's outputs): both read back in
/// one round trip, the boxes kept equal to the host's selection for both box formats; without
/// read-backs, refused in one line.
#[test]
fn non_max_suppression_of_gpu_values_is_read_back() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let (batches, classes, n) = (2, 3, 500);
    let boxes = f32s(&[batches, n, 4], 41);
    // Boxes of size 0.5 to 2.5 around centres in [-2, 2]: many overlap.
    let corners: Vec<f32> = boxes
        .to_vec::<f32>()
        .unwrap()
        .chunks(4)
        .flat_map(|b| {
            let (y, x, h, w) = (b[0], b[1], b[2].abs() + 0.5, b[3].abs() + 0.5);
            [y, x, y + h, x + w]
        })
        .collect();
    let boxes = HostTensor::from_vec(vec![batches, n, 4], &corners).unwrap();
    let scores = f32s(&[batches, classes, n], 43);
    let limits = [
        HostTensor::from_vec(vec![1], &[200i64]).unwrap(),
        HostTensor::from_vec(vec![1], &[0.3f32]).unwrap(),
        HostTensor::from_vec(vec![1], &[-0.5f32]).unwrap(),
    ];
    for center in [0, 1] {
        let g = Graph::new()
            .input("boxes", DType::F32, &[Some(batches), Some(n), Some(4)])
            .input(
                "scores",
                DType::F32,
                &[Some(batches), Some(classes), Some(n)],
            )
            .constant("max", limits[0].clone())
            .constant("iou", limits[1].clone())
            .constant("score", limits[2].clone())
            .node(
                Node::new("NonMaxSuppression", "nms")
                    .inputs(["boxes", "scores", "max", "iou", "score"])
                    .outputs(["selected"])
                    .attr("center_point_box", Attr::Int(center)),
            )
            .output("selected");
        let want = reference::nms::non_max_suppression(
            &boxes,
            &scores,
            [Some(&limits[0]), Some(&limits[1]), Some(&limits[2])],
            center,
        )
        .unwrap();
        // Boxes suppressed: fewer kept than the cap allows.
        assert!(
            want.shape[0] > 60 && want.shape[0] < 2 * 3 * 200,
            "{:?}",
            want.shape
        );
        let before = ctx.stats().read_backs;
        let on_gpu = vec![
            (
                "boxes".to_string(),
                wgpu_ops::Tensor::from_host(&ctx, &boxes).unwrap(),
            ),
            (
                "scores".to_string(),
                wgpu_ops::Tensor::from_host(&ctx, &scores).unwrap(),
            ),
        ];
        let got = Session::new(&ctx, g.clone())
            .unwrap()
            .run_tensors_blocking(on_gpu)
            .unwrap()
            .remove(0)
            .1
            .to_host_blocking()
            .unwrap();
        assert_eq!(got, want, "center_point_box {center}");
        assert_eq!(ctx.stats().read_backs, before + 1);
        // The interpreter agrees.
        let (_, interpreted) = on_both(
            &ctx,
            &g,
            vec![
                ("boxes".into(), boxes.clone()),
                ("scores".into(), scores.clone()),
            ],
        );
        assert_eq!(interpreted, want);
    }
    let no_read_back = common::ctx_without_read_back();
    let g = Graph::new()
        .input("boxes", DType::F32, &[Some(batches), Some(n), Some(4)])
        .input(
            "scores",
            DType::F32,
            &[Some(batches), Some(classes), Some(n)],
        )
        .node(
            Node::new("NonMaxSuppression", "nms\n2")
                .inputs(["boxes", "scores"])
                .outputs(["selected"]),
        )
        .output("selected");
    let on_gpu = vec![
        (
            "boxes".to_string(),
            wgpu_ops::Tensor::from_host(&no_read_back, &boxes).unwrap(),
        ),
        (
            "scores".to_string(),
            wgpu_ops::Tensor::from_host(&no_read_back, &scores).unwrap(),
        ),
    ];
    let e = Session::new(&no_read_back, g)
        .unwrap()
        .run_tensors_blocking(on_gpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nms\\n2") && e.contains("cannot read them back"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// Unique of class ids computed on the GPU (an ArgMax over scores): read back, the same as
/// the host's for every output, sorted and in order of appearance, flattened and along an
/// axis.
#[test]
fn unique_of_gpu_values_is_read_back() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let scores = f32s(&[300, 7], 47);
    for (axis, sorted) in [(None, 1), (None, 0), (Some(0), 1), (Some(-2), 0)] {
        let mut unique = Node::new("Unique", "u")
            .inputs(["ids"])
            .outputs(["y", "first", "inverse", "counts"])
            .attr("sorted", Attr::Int(sorted));
        if let Some(a) = axis {
            unique = unique.attr("axis", Attr::Int(a));
        }
        // Along an axis: the ids as [150, 2] rows (of 49 possible rows: repeats).
        let g = Graph::new()
            .input("scores", DType::F32, &[Some(300), Some(7)])
            .constant("rows", HostTensor::from_vec(vec![2], &[150i64, 2]).unwrap())
            .node(
                Node::new("ArgMax", "a")
                    .inputs(["scores"])
                    .outputs(["flat_ids"])
                    .attr("axis", Attr::Int(1))
                    .attr("keepdims", Attr::Int(0)),
            )
            .node(
                Node::new("Reshape", "r")
                    .inputs(["flat_ids", "rows"])
                    .outputs(["ids"]),
            )
            .node(unique)
            .output("y")
            .output("first")
            .output("inverse")
            .output("counts");
        let ids = reference::graph::run_graph(
            &Graph::new()
                .input("scores", DType::F32, &[Some(300), Some(7)])
                .node(
                    Node::new("ArgMax", "a")
                        .inputs(["scores"])
                        .outputs(["ids"])
                        .attr("axis", Attr::Int(1))
                        .attr("keepdims", Attr::Int(0)),
                )
                .output("ids"),
            &[("scores".into(), scores.clone())],
            &Default::default(),
        )
        .unwrap()
        .remove(0);
        let ids = HostTensor::from_bytes(DType::I64, vec![150, 2], ids.data).unwrap();
        let want = reference::unique::unique(&ids, axis, sorted != 0).unwrap();
        let before = ctx.stats().read_backs;
        let input = wgpu_ops::Tensor::from_host(&ctx, &scores).unwrap();
        let got = Session::new(&ctx, g)
            .unwrap()
            .run_tensors_blocking(vec![("scores".into(), input)])
            .unwrap();
        assert_eq!(ctx.stats().read_backs, before + 1);
        for ((name, got), want) in got.iter().zip(&want) {
            assert_eq!(
                &got.to_host_blocking().unwrap(),
                want,
                "{name} axis {axis:?} sorted {sorted}"
            );
        }
        // Repeats: fewer distinct values than values, the counts adding up to all of them.
        let counts: i64 = want[3].to_vec::<i64>().unwrap().iter().sum();
        assert_eq!(counts, want[2].numel() as i64);
        assert!(want[3].numel() < want[2].numel(), "{:?}", want[3]);
    }
}

/// A context of its own holding at most `limit` bytes of tensors.
fn limited_ctx(limit: u64) -> wgpu_ops::Context {
    wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(limit),
        cpu_kernels: common::cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap()
}

/// Conv and ConvTranspose whose windows (im2col columns) would not fit the memory limit run in
/// bands of images and of rows of the first output axis: under a 128 KiB limit each case here
/// needs more than that for its windows alone, and was refused before bands. 1-, 2- and 3-D,
/// groups, strides, bias, and f16 with an odd row length (bands of an even number of rows, so
/// each band's copy into the output moves whole 32-bit words) and with odd images (bands of
/// two images, the last one alone ending inside a word), and f64 (8-byte bands). Against the
/// interpreter: f32 within 1e-4 relative plus 1e-5 (as the random geometry test), f16 within
/// 2^-8 relative plus 2^-8, f64 within 1e-12 relative plus 1e-12.
#[test]
fn convs_beyond_the_column_budget_run_in_bands() {
    let limit = 128u64 << 10;
    let ctx = limited_ctx(limit);
    type ConvCase<'a> = (&'a str, DType, Vec<usize>, Vec<usize>, Vec<(&'a str, Attr)>);
    let cases: Vec<ConvCase> = vec![
        (
            "Conv",
            DType::F32,
            vec![3, 4, 20, 18],
            vec![6, 2, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1])), ("group", Attr::Int(2))],
        ),
        (
            "Conv",
            DType::F16,
            vec![1, 8, 80, 13],
            vec![4, 8, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
        ),
        (
            "Conv",
            DType::F16,
            vec![19, 8, 7, 7],
            vec![3, 8, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
        ),
        (
            "Conv",
            DType::F32,
            vec![2, 16, 500],
            vec![8, 16, 5],
            vec![("strides", ints(&[2])), ("dilations", ints(&[2]))],
        ),
        (
            "ConvTranspose",
            DType::F32,
            vec![1, 8, 12, 12],
            vec![8, 4, 3, 3],
            vec![("strides", ints(&[2, 2]))],
        ),
        (
            "Conv",
            DType::F32,
            vec![1, 2, 10, 10, 10],
            vec![3, 2, 3, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1, 1, 1]))],
        ),
        (
            "Conv",
            DType::F64,
            vec![2, 4, 20, 18],
            vec![5, 4, 3, 3],
            vec![("pads", ints(&[1, 1, 1, 1]))],
        ),
    ];
    for (i, (op, dtype, xs, ws, attrs)) in cases.into_iter().enumerate() {
        let what = format!("{op} {dtype} {xs:?} {ws:?}");
        let m = if op == "Conv" { ws[0] } else { ws[1] };
        let as_dtype = |t: HostTensor| reference::cast_host(&t, dtype).unwrap();
        let inputs = vec![
            ("x", as_dtype(f32s(&xs, 300 + i as u64))),
            ("w", as_dtype(f32s(&ws, 400 + i as u64))),
            ("b", as_dtype(f32s(&[m], 500 + i as u64))),
        ];
        let got = run(&ctx, op, &inputs, &attrs, 1, true)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .remove(0);
        let mut g = Graph::new();
        for (n, v) in &inputs {
            g = g.constant(*n, v.clone());
        }
        let mut node = Node::new(op, "n").inputs(["x", "w", "b"]).outputs(["y"]);
        for (k, v) in &attrs {
            node = node.attr(*k, v.clone());
        }
        let want = reference::graph::run_graph(&g.node(node).output("y"), &[], &Default::default())
            .unwrap()
            .remove(0);
        // The windows alone (channels x kernel x output positions per image) exceed the limit.
        let kernel: usize = ws[2..].iter().product();
        let windows = xs[0] * xs[1] * kernel * want.shape[2..].iter().product::<usize>();
        assert!(
            (windows * dtype.size()) as u64 > limit,
            "{what}: windows of {windows} elements fit the limit"
        );
        let (rtol, atol) = match dtype {
            DType::F16 => (1.0 / 256.0, 1.0 / 256.0),
            DType::F64 => (1e-12, 1e-12),
            _ => (1e-4, 1e-5),
        };
        common::assert_close(&got, &want, rtol, atol, &what);
    }
}

/// MaxPool, AveragePool and LpPool whose windows would not fit the memory limit: under a
/// 128 KiB limit each case's windows alone exceed it, and the pools read them where they lie
/// (no window tensor); under an 8 KiB binding limit as well, the padding and the reduction run
/// in windows of planes and of output rows. MaxPool on u8 and f16 (odd rows) equals the
/// interpreter bit for bit; AveragePool without the padding counted (divisors that differ by
/// output position) and LpPool with p = 3 within 1e-4 relative plus 1e-5.
#[test]
fn pools_beyond_the_window_budget_and_a_binding_read_windows_in_place() {
    let limit = 128u64 << 10;
    let binding = 8u64 << 10;
    let in_place = limited_ctx(limit);
    let in_windows = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_memory: Some(limit),
        max_binding_size: Some(binding),
        cpu_kernels: common::cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    type PoolCase<'a> = (&'a str, DType, Vec<usize>, Vec<(&'a str, Attr)>);
    let cases: Vec<PoolCase> = vec![
        (
            "MaxPool",
            DType::U8,
            vec![1, 8, 40, 40],
            vec![("kernel_shape", ints(&[5, 5]))],
        ),
        (
            "MaxPool",
            DType::F16,
            vec![3, 16, 16, 15],
            vec![("kernel_shape", ints(&[3, 3]))],
        ),
        (
            "AveragePool",
            DType::F32,
            vec![2, 4, 30, 30],
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("pads", ints(&[1, 1, 1, 1])),
                ("count_include_pad", Attr::Int(0)),
            ],
        ),
        (
            "LpPool",
            DType::F32,
            vec![1, 6, 31, 29],
            vec![("kernel_shape", ints(&[3, 3])), ("p", Attr::Int(3))],
        ),
    ];
    for (i, (op, dtype, xs, attrs)) in cases.into_iter().enumerate() {
        let x = if dtype == DType::U8 {
            common::random_tensor(600 + i as u64, dtype, &xs)
        } else {
            reference::cast_host(&f32s(&xs, 600 + i as u64), dtype).unwrap()
        };
        // Every padded input here is larger than the small binding limit.
        assert!((x.data.len() as u64) > binding, "{op} {xs:?}");
        for (ctx, path) in [(&in_place, "bound whole"), (&in_windows, "in windows")] {
            let what = format!("{op} {dtype} {xs:?} {path}");
            let got = run(ctx, op, &[("x", x.clone())], &attrs, 1, true)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .remove(0);
            let mut node = Node::new(op, "n").inputs(["x"]).outputs(["y"]);
            for (k, v) in &attrs {
                node = node.attr(*k, v.clone());
            }
            let g = Graph::new().constant("x", x.clone()).node(node).output("y");
            let want = reference::graph::run_graph(&g, &[], &Default::default())
                .unwrap()
                .remove(0);
            let window: usize = 9 + if dtype == DType::U8 { 16 } else { 0 };
            let windows = xs[0] * xs[1] * window * want.shape[2..].iter().product::<usize>();
            assert!(
                (windows * dtype.size()) as u64 > limit,
                "{what}: windows of {windows} elements fit the limit"
            );
            if op == "MaxPool" {
                assert_eq!((&got.shape, &got.data), (&want.shape, &want.data), "{what}");
            } else {
                common::assert_close(&got, &want, 1e-4, 1e-5, &what);
            }
        }
    }
}

/// A pool whose padded input fits one binding reduces its windows where they lie: the padding
/// (where there is any) and one reduction are all it records, with no tensor of windows
/// gathered (which took a gather dispatch, and the kernel volume times the output in memory).
/// MaxPool's indices take one more reduction (ArgMax) and the table lookup. Results against
/// the interpreter: bit for bit for MaxPool, within 1e-5 relative plus 1e-6 otherwise.
#[test]
fn pools_reduce_their_windows_without_gathering_them() {
    use wgpu_ops::ops::window::WindowAttrs;
    let ctx = common::ctx();
    let xs = [2usize, 5, 17, 15];
    let x = f32s(&xs, 77);
    let t = wgpu_ops::Tensor::from_host(ctx, &x).unwrap();
    let kernel = [3i64, 3];
    let (pads, strides) = ([1i64, 1, 1, 1], [2i64, 2]);
    let padded = WindowAttrs {
        kernel_shape: Some(&kernel),
        strides: Some(&strides),
        pads: Some(&pads),
        ..Default::default()
    };
    let unpadded = WindowAttrs {
        kernel_shape: Some(&kernel),
        ..Default::default()
    };
    type Record = fn(&mut wgpu_ops::Recorder, &wgpu_ops::Tensor, &WindowAttrs) -> wgpu_ops::Tensor;
    type Case<'a> = (
        &'a str,
        &'a WindowAttrs<'a>,
        Vec<(&'a str, Attr)>,
        Record,
        u64,
    );
    let cases: [Case; 5] = [
        (
            "MaxPool",
            &padded,
            vec![("pads", ints(&pads)), ("strides", ints(&strides))],
            |r, t, a| r.max_pool_to(t, a, 0, (Out::NEW, None)).unwrap().0,
            2,
        ),
        (
            "MaxPool",
            &unpadded,
            vec![],
            |r, t, a| r.max_pool_to(t, a, 0, (Out::NEW, None)).unwrap().0,
            1,
        ),
        (
            "AveragePool",
            &unpadded,
            vec![],
            |r, t, a| r.average_pool_to(t, a, false, Out::NEW).unwrap(),
            1,
        ),
        (
            "LpPool",
            &padded,
            vec![("pads", ints(&pads)), ("strides", ints(&strides))],
            |r, t, a| r.lp_pool_to(t, a, 2, Out::NEW).unwrap(),
            2,
        ),
        // The values, then the positions (ArgMax) mapped through the table: an Add of each
        // output position's first entry, a Gather and an Add of each image's base.
        (
            "MaxPool",
            &padded,
            vec![("pads", ints(&pads)), ("strides", ints(&strides))],
            |r, t, a| {
                r.max_pool_to(t, a, 0, (Out::NEW, Some(Out::NEW)))
                    .unwrap()
                    .1
                    .unwrap()
            },
            6,
        ),
    ];
    for (i, (op, attrs, node_attrs, record, dispatches)) in cases.into_iter().enumerate() {
        let what = format!("case {i}: {op} {:?}", attrs.pads);
        let mut rec = ctx.recorder();
        let y = record(&mut rec, &t, attrs);
        assert_eq!(rec.dispatches(), dispatches, "{what}: dispatches");
        pollster::block_on(rec.finish()).unwrap();
        let got = y.to_host_blocking().unwrap();
        let mut node = Node::new(op, "n")
            .inputs(["x"])
            .outputs(["y", "i"])
            .attr("kernel_shape", ints(&kernel));
        for (k, v) in node_attrs {
            node = node.attr(k, v);
        }
        if op == "LpPool" {
            node = node.attr("p", Attr::Int(2));
        }
        let output = if i == 4 { "i" } else { "y" };
        let g = Graph::new()
            .constant("x", x.clone())
            .node(node)
            .output(output);
        let want = reference::graph::run_graph(&g, &[], &Default::default())
            .unwrap()
            .remove(0);
        if op == "MaxPool" {
            assert_eq!((&got.shape, &got.data), (&want.shape, &want.data), "{what}");
        } else {
            common::assert_close(&got, &want, 1e-5, 1e-6, &what);
        }
    }
}

/// A DFT to check: label, input shape, axis, dft_length, inverse, onesided.
type DftCase<'a> = (&'a str, &'a [usize], i64, Option<i64>, i64, i64);

/// The largest magnitude of `v`.
fn peak(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

#[test]
fn long_dft_constants_are_built_once_per_context() {
    // A factored DFT's twiddles and matrices are built on the host and uploaded by the first
    // run only: later runs on the context (this session's or another's) take them from its
    // cache and give the same bits. Under a memory limit they would not fit beside, the cache
    // is dropped and the transform still runs.
    let int = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let graph = |n: usize| {
        Graph::new()
            .input("x", DType::F32, &[Some(2), Some(n), Some(2)])
            .constant("axis", int(1))
            .node(
                Node::new("DFT", "dft")
                    .inputs(["x", "", "axis"])
                    .outputs(["y"]),
            )
            .output("y")
    };
    // 4096 = 64 x 64 (twiddles a pass of their own) and the prime 1031 (the chirp).
    for n in [4096, 1031] {
        let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
        let inputs = vec![("x".to_string(), f32s(&[2, n, 2], n as u64))];
        // A new session's run: its outputs and the buffers it made.
        let counted_run = || {
            let before = ctx.stats().buffers_created;
            let out = Session::new(&ctx, graph(n))
                .unwrap()
                .run_blocking(inputs.clone())
                .unwrap();
            (out, ctx.stats().buffers_created - before)
        };
        let (first, first_buffers) = counted_run();
        let (second, second_buffers) = counted_run();
        assert_eq!(first, second, "{n}");
        assert!(
            second_buffers + 2 <= first_buffers,
            "{n}: {first_buffers} buffers made by the first run, {second_buffers} by the second"
        );
        // 48 MiB: the cache keeps up to 6 MiB, the constants of either transform (1 to 4 MiB),
        // which an upload of all but 1 MiB of the limit then needs back.
        let limit = 48u64 << 20;
        let tight = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            max_memory: Some(limit),
            ..Default::default()
        })
        .unwrap();
        let run = || {
            Session::new(&tight, graph(n))
                .unwrap()
                .run_blocking(inputs.clone())
                .unwrap()
        };
        assert_eq!(run(), first, "{n} under a memory limit");
        let kept = tight.memory_in_use();
        assert!(kept > 1 << 20, "{n}: {kept} bytes kept");
        let big = HostTensor::from_bytes(
            DType::U8,
            vec![(limit - (1 << 20)) as usize],
            vec![0; (limit - (1 << 20)) as usize],
        )
        .unwrap();
        let held = wgpu_ops::Tensor::from_host(&tight, &big).unwrap();
        drop(held);
        assert_eq!(run(), first, "{n} after the cache was dropped");
    }
}

#[test]
fn long_dfts_are_factored_and_match_the_direct_sums() {
    // Past 512 points DFT and STFT are factored (Cooley-Tukey, Bluestein for primes) instead
    // of one product with their matrix; the interpreter sums each bin directly in f64. An f32
    // FFT's error is a few ulps of the spectrum's peak times log2(N), so f32 bins are held to
    // 2e-6 of the peak (and f64 ones to 1e-13), not to a share of each bin.
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let int = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let cases: &[DftCase] = &[
        ("complex 1024 = 32 x 32", &[2, 1024, 2], 1, None, 0, 0),
        (
            "real one-sided 1200 = 30 x 40",
            &[2, 1200, 1],
            1,
            None,
            0,
            1,
        ),
        (
            "inverse of the prime 1031 (chirp)",
            &[1, 1031, 2],
            1,
            None,
            1,
            0,
        ),
        (
            "2000 samples to 2062 = 2 x 1031",
            &[1, 2000, 2],
            -2,
            Some(2062),
            0,
            0,
        ),
        (
            "3000 samples cut to 1500",
            &[1, 3000, 2],
            1,
            Some(1500),
            0,
            0,
        ),
        ("real 1100 along axis 0", &[1100, 3, 1], 0, None, 0, 0),
        (
            "irfft of 700 bins to 1300",
            &[2, 700, 2],
            1,
            Some(1300),
            1,
            1,
        ),
        (
            "irfft of 500 bins to the prime 1201",
            &[1, 500, 2],
            1,
            Some(1201),
            1,
            1,
        ),
        ("irfft of real bins to 1024", &[1, 513, 1], 1, None, 1, 1),
        // 256 x 256: the twiddles a pass of their own (the reference: the host's f64 FFT).
        ("complex 65536 = 256 x 256", &[1, 65536, 2], 1, None, 0, 0),
    ];
    for &(label, shape, axis, length, inverse, onesided) in cases {
        for dtype in [DType::F32, DType::F64] {
            let x = reference::cast_host(&f32s(shape, shape[1] as u64), dtype).unwrap();
            let mut g = Graph::new()
                .input(
                    "x",
                    dtype,
                    &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                )
                .constant("axis", int(axis));
            let mut names = vec!["x", "", "axis"];
            if let Some(l) = length {
                g = g.constant("n", int(l));
                names[1] = "n";
            }
            let g = g
                .node(
                    Node::new("DFT", "dft")
                        .inputs(names)
                        .outputs(["y"])
                        .attr("inverse", Attr::Int(inverse))
                        .attr("onesided", Attr::Int(onesided)),
                )
                .output("y");
            let (got, want) = on_both(&ctx, &g, vec![("x".into(), x)]);
            let what = format!("{label} {dtype}");
            assert_eq!(got.shape, want.shape, "{what}");
            let (got, want) = (
                reference::cast_host(&got, DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap(),
                reference::cast_host(&want, DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap(),
            );
            let bound = peak(&want) * if dtype == DType::F64 { 1e-13 } else { 2e-6 };
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0, f64::max);
            assert!(worst <= bound, "{what}: off by {worst:e}, bound {bound:e}");
        }
    }
}

/// Resize to an empty output takes any scales on its other axes, as onnxruntime does: scales
/// of 1e-10 and 1e10 on two axes of 4 give [1, 1, 0, 40000000000] with no element, on both
/// paths (as inputs and as constants); the same long axis with the other kept is refused.
#[test]
fn resize_to_an_empty_output_allows_an_axis_past_i32() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let x = f32s(&[1, 1, 4, 4], 12);
    let scales = |v: &[f32]| HostTensor::from_vec(vec![v.len()], v).unwrap();
    let empty = scales(&[]);
    for as_inputs in [true, false] {
        let inputs = [
            ("x", x.clone()),
            ("roi", empty.clone()),
            ("scales", scales(&[1.0, 1.0, 1e-10, 1e10])),
        ];
        let got = run(&ctx, "Resize", &inputs, &[], 1, as_inputs)
            .unwrap_or_else(|e| panic!("as inputs {as_inputs}: {e}"))
            .remove(0);
        assert_eq!(
            got.shape,
            vec![1, 1, 0, 40_000_000_000],
            "as inputs {as_inputs}"
        );
        assert!(got.data.is_empty());
        let inputs = [
            ("x", x.clone()),
            ("roi", empty.clone()),
            ("scales", scales(&[1.0, 1.0, 1.0, 1e10])),
        ];
        let e = run(&ctx, "Resize", &inputs, &[], 1, as_inputs).unwrap_err();
        let line = e.to_string();
        assert!(line.contains("make axis 3 too long"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }
    // The interpreter gives the same empty tensor.
    let g = Graph::new()
        .constant("x", x)
        .constant("roi", empty)
        .constant("scales", scales(&[1.0, 1.0, 1e-10, 1e10]))
        .node(
            Node::new("Resize", "r")
                .inputs(["x", "roi", "scales"])
                .outputs(["y"]),
        )
        .output("y");
    let want = reference::graph::run_graph(&g, &[], &Default::default())
        .unwrap()
        .remove(0);
    assert_eq!(want.shape, vec![1, 1, 0, 40_000_000_000]);
}
