//! The compute ops against the CPU reference interpreter: every element-wise op on f32, i32 and
//! u32 with broadcasting, MatMul on shapes that are not multiples of the 16 x 16 tile with
//! broadcast batches, Transpose, Reshape, Concat, Cast, and the errors for dtypes WGSL lacks.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, Error, HostTensor, MatMulChoice, MatMulKernel, Session};

fn values_for(dtype: DType, shape: &[usize], seed: u64, positive: bool) -> HostTensor {
    let n: usize = shape.iter().product();
    let raw = bytes(seed, n);
    match dtype {
        DType::F32 => {
            let v: Vec<f32> = raw
                .iter()
                .map(|&b| {
                    if positive {
                        (b as f32 + 1.0) / 37.0
                    } else {
                        (b as f32 - 128.0) / 37.0
                    }
                })
                .collect();
            HostTensor::from_vec(shape.to_vec(), &v).unwrap()
        }
        DType::I32 => {
            let v: Vec<i32> = raw
                .iter()
                .map(|&b| {
                    if positive {
                        b as i32 + 1
                    } else {
                        b as i32 - 128
                    }
                })
                .collect();
            HostTensor::from_vec(shape.to_vec(), &v).unwrap()
        }
        _ => HostTensor::from_vec(
            shape.to_vec(),
            &raw.iter().map(|&b| b as u32 * 7919).collect::<Vec<u32>>(),
        )
        .unwrap(),
    }
}

/// Runs a one-node graph on the GPU and on the CPU reference; returns both outputs.
fn both(node: Node, inputs: Vec<(&str, HostTensor)>) -> Result<(HostTensor, HostTensor), Error> {
    both_on(ctx(), node, inputs)
}

fn close(got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{what}");
    if got.dtype != DType::F32 {
        assert_eq!(got, want, "{what}");
        return;
    }
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 2e-5 * b.abs().max(1.0);
        assert!(ok, "{what}: element {i}: GPU {a} vs reference {b}");
    }
}

#[test]
fn elementwise_ops_with_broadcasting() {
    let shapes: [(&[usize], &[usize]); 4] = [
        (&[3, 4], &[3, 4]),
        (&[2, 1, 5], &[3, 1]),
        (&[], &[4, 2]),
        (&[7], &[0, 7]),
    ];
    let mut checked = 0;
    for op in &wgpu_ops::ops::elementwise::OPS {
        for dtype in [DType::F32, DType::I32, DType::U32] {
            let n = 1 + usize::from(op.binary);
            let supported = op.expression(dtype).is_some()
                || wgpu_ops::ops::elementwise::word_expression(op.name, &vec![dtype; n], dtype)
                    .is_some();
            for (k, (sa, sb)) in shapes.iter().enumerate() {
                // Log and Sqrt of negative numbers are NaN either way; keep them in domain.
                let positive = matches!(op.name, "Log" | "Sqrt" | "Pow");
                let a = values_for(dtype, sa, k as u64, positive);
                let b = values_for(dtype, sb, 100 + k as u64, false);
                let node = Node::new(op.name, op.name).inputs(if op.binary {
                    vec!["a", "b"]
                } else {
                    vec!["a"]
                });
                let inputs = if op.binary {
                    vec![("a", a), ("b", b)]
                } else {
                    vec![("a", a)]
                };
                match both(node, inputs) {
                    Ok((got, want)) => {
                        assert!(supported, "{} {dtype} ran but is not in the table", op.name);
                        close(&got, &want, &format!("{} {dtype} {sa:?} {sb:?}", op.name));
                        checked += 1;
                    }
                    Err(e) => {
                        assert!(!supported, "{} {dtype}: {e}", op.name);
                        assert!(e.to_string().contains(&format!(" is {dtype}; ")), "{e}");
                    }
                }
            }
        }
    }
    assert!(checked >= 120, "{checked}");
}

#[test]
fn pow_follows_numpy_for_negative_bases_and_zero() {
    let a = HostTensor::from_vec(vec![6], &[-2.0f32, -2.0, 0.0, 0.0, -8.0, 3.0]).unwrap();
    let b = HostTensor::from_vec(vec![6], &[2.0f32, 3.0, 0.0, 2.0, 1.0 / 3.0, -1.0]).unwrap();
    let (got, _) = both(
        Node::new("Pow", "p").inputs(["a", "b"]),
        vec![("a", a), ("b", b)],
    )
    .unwrap();
    let g = got.to_vec::<f32>().unwrap();
    assert_eq!(&g[..4], &[4.0, -8.0, 1.0, 0.0]);
    assert!(g[4].is_nan());
    assert!((g[5] - 1.0 / 3.0).abs() < 1e-6);
}

#[test]
fn matmul_shapes_and_batch_broadcasting() {
    // Fewer than 16 rows take the one-element-per-invocation kernel, 16 and more the tiles.
    // More batch entries than one grid axis holds (65 535) run in several dispatches.
    let cases: [(&[usize], &[usize]); 10] = [
        (&[2, 35000, 1, 3], &[35000, 3, 2]),
        (&[66000, 16, 2], &[2, 3]),
        (&[17, 33], &[33, 18]),
        (&[3, 70], &[2, 70, 130]),
        (&[1, 1], &[1, 1]),
        (&[5], &[5, 3]),
        (&[4, 5], &[5]),
        (&[6], &[6]),
        (&[2, 1, 3, 20], &[4, 20, 7]),
        (&[3, 0, 4], &[4, 5]),
    ];
    for dtype in [DType::F32, DType::I32, DType::U32] {
        for (k, (sa, sb)) in cases.iter().enumerate() {
            let a = values_for(dtype, sa, 10 + k as u64, false);
            let b = values_for(dtype, sb, 20 + k as u64, false);
            let (got, want) = both(
                Node::new("MatMul", "mm").inputs(["a", "b"]),
                vec![("a", a), ("b", b)],
            )
            .unwrap();
            close(&got, &want, &format!("MatMul {dtype} {sa:?} x {sb:?}"));
        }
    }
    let e = both(
        Node::new("MatMul", "mm").inputs(["a", "b"]),
        vec![
            ("a", values_for(DType::F32, &[2, 3], 1, false)),
            ("b", values_for(DType::F32, &[4, 2], 1, false)),
        ],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("has 3 columns but B [4, 2] has 4 rows"),
        "{e}"
    );
}

#[test]
fn layout_ops_and_cast() {
    for dtype in [DType::F32, DType::I64, DType::U8] {
        let x = random_tensor(3, dtype, &[2, 3, 4]);
        let (got, want) = both(
            Node::new("Transpose", "t")
                .inputs(["x"])
                .attr("perm", Attr::Ints(vec![2, 0, 1])),
            vec![("x", x.clone())],
        )
        .unwrap();
        assert_eq!(got, want);
        assert_eq!(got.shape, [4, 2, 3]);
        let (got, want) = both(
            Node::new("Transpose", "t").inputs(["x"]),
            vec![("x", x.clone())],
        )
        .unwrap();
        assert_eq!(
            (got.shape.as_slice(), &got),
            ([4usize, 3, 2].as_slice(), &want)
        );
        let shape = HostTensor::from_vec(vec![3], &[0i64, -1, 2]).unwrap();
        let mut g = both(
            Node::new("Reshape", "r").inputs(["x", "s"]),
            vec![("x", x.clone()), ("s", shape)],
        )
        .unwrap();
        assert_eq!(g.0.shape, [2, 6, 2]);
        g.0.shape = x.shape.clone();
        assert_eq!(g.0, x);
        let (got, want) = both(
            Node::new("Identity", "i").inputs(["x"]),
            vec![("x", x.clone())],
        )
        .unwrap();
        assert_eq!((&got, &want), (&x, &x));
    }
    for dtype in [DType::F32, DType::I32, DType::F64, DType::U64] {
        let parts = [
            random_tensor(1, dtype, &[2, 1, 3]),
            random_tensor(2, dtype, &[2, 4, 3]),
            random_tensor(3, dtype, &[2, 0, 3]),
        ];
        let (got, want) = both(
            Node::new("Concat", "c")
                .inputs(["a", "b", "c"])
                .attr("axis", Attr::Int(-2)),
            vec![
                ("a", parts[0].clone()),
                ("b", parts[1].clone()),
                ("c", parts[2].clone()),
            ],
        )
        .unwrap();
        assert_eq!(got, want);
        assert_eq!(got.shape, [2, 5, 3]);
    }
    for (from, to) in [
        (DType::F32, "i32"),
        (DType::F32, "u32"),
        (DType::I32, "f32"),
        (DType::U32, "i32"),
        (DType::I32, "u32"),
    ] {
        let x = values_for(from, &[3, 5], 4, false);
        let (got, want) = both(
            Node::new("Cast", "c")
                .inputs(["x"])
                .attr("to", Attr::String(to.into())),
            vec![("x", x)],
        )
        .unwrap();
        assert_eq!(got, want, "{from} -> {to}");
    }
}

#[test]
fn transposes_that_move_only_unit_axes_are_views() {
    let ctx = own_ctx();
    for (shape, perm, moves) in [
        (vec![1usize, 5, 3, 4], vec![1i64, 0, 2, 3], false),
        (vec![5, 1, 1, 4], vec![2, 0, 3, 1], false),
        (vec![1, 1], vec![1, 0], false),
        (vec![5, 1, 4], vec![2, 1, 0], true),
        (vec![2, 3], vec![1, 0], true),
        (vec![2, 1, 3], vec![1, 2, 0], true),
    ] {
        for dtype in [DType::U8, DType::F32, DType::I64] {
            let x = random_tensor(7, dtype, &shape);
            let mut rec = ctx.recorder();
            let before = ctx.stats();
            let t = rec
                .transpose(&wgpu_ops::Tensor::from_host(&ctx, &x).unwrap(), Some(&perm))
                .unwrap();
            let after = ctx.stats();
            pollster::block_on(rec.finish()).unwrap();
            let got = t.to_host_blocking().unwrap();
            let want = run_graph(
                &Graph::new()
                    .input(
                        "x",
                        dtype,
                        &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                    )
                    .node(
                        Node::new("Transpose", "t")
                            .inputs(["x"])
                            .outputs(["y"])
                            .attr("perm", Attr::Ints(perm.clone())),
                    )
                    .output("y"),
                &[("x".to_string(), x.clone())],
                &Default::default(),
            )
            .unwrap()
            .remove(0);
            assert_eq!(got, want, "{shape:?} {perm:?} {dtype}");
            let recorded = after.dispatches + after.copies - before.dispatches - before.copies;
            assert_eq!(recorded > 0, moves, "{shape:?} {perm:?} {dtype}");
        }
    }
}

/// Edge values of the 64-bit dtypes (overflow, division by zero and by -1, the largest and
/// smallest values, infinities, subnormals, -0.0), as a [12] tensor.
fn edge_values(dtype: DType, rotate: usize) -> HostTensor {
    fn rot<T: Copy>(mut v: Vec<T>, k: usize) -> Vec<T> {
        let n = v.len();
        v.rotate_left(k % n);
        v
    }
    match dtype {
        DType::I64 => HostTensor::from_vec(
            vec![12],
            &rot(
                vec![
                    0,
                    1,
                    -1,
                    i64::MAX,
                    i64::MIN,
                    i64::MAX - 1,
                    1 << 40,
                    -(1 << 33) + 7,
                    3,
                    -3,
                    12_345_678_901_234,
                    2,
                ],
                rotate,
            ),
        ),
        DType::U64 => HostTensor::from_vec(
            vec![12],
            &rot(
                vec![
                    0,
                    1,
                    u64::MAX,
                    u64::MAX - 1,
                    1 << 63,
                    1 << 32,
                    4_294_967_295,
                    7,
                    3,
                    123_456_789_012_345,
                    2,
                    5,
                ],
                rotate,
            ),
        ),
        _ => HostTensor::from_vec(
            vec![12],
            &rot(
                vec![
                    0.0,
                    -0.0,
                    1.5,
                    -2.25,
                    1e300,
                    -1e-300,
                    5e-324,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    std::f64::consts::PI,
                    1e16 + 2.0,
                    0.1,
                ],
                rotate,
            ),
        ),
    }
    .unwrap()
}

/// Equal element for element; for f64, NaNs equal each other and -0.0 equals 0.0 (IEEE
/// comparison: `Max(0.0, -0.0)` may give either zero).
fn same(dtype: DType, got: &HostTensor, want: &HostTensor) -> bool {
    if dtype != DType::F64 {
        return got == want;
    }
    let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    got.shape == want.shape
        && g.iter()
            .zip(&w)
            .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
}

#[test]
fn elementwise_on_64_bit_dtypes_with_native_features() {
    let ctx = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    let features = ctx.features();
    // lavapipe offers both features; an adapter without them is tested below.
    if !features
        .contains(wgpu_ops::gpu::Features::SHADER_INT64 | wgpu_ops::gpu::Features::SHADER_F64)
    {
        panic!(
            "{} lacks SHADER_INT64 or SHADER_F64",
            ctx.adapter_info().name
        );
    }
    let mut checked = 0;
    for dtype in [DType::I64, DType::U64, DType::F64] {
        for op in &wgpu_ops::ops::elementwise::OPS {
            if op.wgsl(dtype).is_none() {
                continue;
            }
            let a = edge_values(dtype, 0);
            // Every pair of edge values, and broadcasting of a [1] operand.
            for (k, b) in (0..12)
                .map(|k| edge_values(dtype, k))
                .chain([HostTensor::from_bytes(
                    dtype,
                    vec![1],
                    edge_values(dtype, 3).data[..8].to_vec(),
                )
                .unwrap()])
                .enumerate()
            {
                let inputs = if op.binary {
                    vec![a.clone(), b]
                } else {
                    vec![a.clone()]
                };
                let uploaded: Vec<wgpu_ops::Tensor> = inputs
                    .iter()
                    .map(|t| wgpu_ops::Tensor::from_host(&ctx, t).unwrap())
                    .collect();
                let got = ctx
                    .run(|rec| rec.elementwise(op.name, &uploaded[0], uploaded.get(1)))
                    .unwrap()
                    .to_host_blocking()
                    .unwrap();
                let want = cpu(op.name, inputs);
                assert!(
                    same(dtype, &got, &want),
                    "{} {dtype} #{k}: {got:?} vs {want:?}",
                    op.name
                );
                checked += 1;
                if !op.binary {
                    break;
                }
            }
        }
    }
    // i64: 9 ops, u64: 7, f64: 11 (Reciprocal); binary ones over 13 operand pairs.
    assert_eq!(checked, 6 * 13 * 3 + 3 + 1 + 5);
    // Without the features (a browser, or turned off), i64 runs on the 32-bit emulation (see
    // tests/every_dtype.rs), the reductions included, with the native path's bits; f64 Erf
    // and Det on the f64 emulation.
    let plain = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    })
    .unwrap();
    let sum = |ctx: &wgpu_ops::Context| {
        let x = wgpu_ops::Tensor::from_host(ctx, &edge_values(DType::I64, 0)).unwrap();
        ctx.run(|rec| rec.reduce_to("ReduceSum", &x, None, true, false, wgpu_ops::Out::NEW))
            .and_then(|t| t.to_host_blocking())
            .unwrap()
    };
    assert_eq!(sum(&plain), sum(&ctx));
    let x = wgpu_ops::Tensor::from_host(&plain, &edge_values(DType::F64, 0)).unwrap();
    assert!(plain.run(|rec| rec.elementwise("Erf", &x, None)).is_ok());
    let x = x.reshaped(&[3, 2, 2]).unwrap();
    assert!(plain.run(|rec| rec.det_to(&x, wgpu_ops::Out::NEW)).is_ok());
}

/// Without SHADER_F64 (with neither 64-bit feature, and with SHADER_INT64 only), GridSample
/// on f64 computes its coordinates and weights on the emulation: every mode, padding and
/// align_corners on 1-, 2- and 3-D inputs, at coordinates inside and outside [-1, 1], at
/// halves (nearest mode rounds them to even), NaN, infinite, huge and far (reflected from
/// past i32's range). Nearest mode picks values bit for bit; linear and cubic within 1e-12
/// relative to the interpreter's f64 (onnxruntime's own tests hold doubles to 1e-5).
#[test]
fn grid_sample_on_f64_runs_on_the_emulation() {
    // (x, y) pairs; on a row of 4 (align_corners 0) x = -0.5, 0 and 0.5 are columns 0.5, 1.5
    // and 2.5.
    let special: Vec<f64> = vec![
        f64::NAN,
        0.5,
        f64::INFINITY,
        -0.25,
        f64::NEG_INFINITY,
        -1e12,
        -0.5,
        1.0,
        0.0,
        -1.0,
        0.5,
        0.0,
        1e300,
        -1e300,
        1.0,
        f64::NAN,
    ];
    let grids = [
        (
            f64_values(1, &[2, 3, 7], true),
            f64_values(2, &[2, 9, 1], true),
        ),
        (
            f64_values(3, &[1, 2, 4, 5], true),
            f64_values(4, &[1, 3, 4, 2], true),
        ),
        (
            f64_values(5, &[1, 1, 1, 4], true),
            HostTensor::from_vec(vec![1, 2, 4, 2], &special).unwrap(),
        ),
        (
            f64_values(6, &[1, 2, 3, 2, 3], true),
            f64_values(7, &[1, 2, 2, 2, 3], true),
        ),
    ];
    for plain in [common::ctx_emulating_64_bit(), common::ctx_without_f64()] {
        for (x, grid) in &grids {
            for (mode, padding, align) in ["nearest", "linear", "cubic"]
                .into_iter()
                .flat_map(|m| ["zeros", "border", "reflection"].map(|p| (m, p)))
                .flat_map(|(m, p)| [(m, p, 0), (m, p, 1)])
            {
                let node = Node::new("GridSample", "g")
                    .inputs(["x", "grid"])
                    .attr("mode", Attr::String(mode.into()))
                    .attr("padding_mode", Attr::String(padding.into()))
                    .attr("align_corners", Attr::Int(align));
                let inputs = vec![("x", x.clone()), ("grid", grid.clone())];
                let what = format!("{mode} {padding} align {align} {:?}", x.shape);
                let (got, want) =
                    both_on(plain, node, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!((&got.shape, got.dtype), (&want.shape, want.dtype), "{what}");
                if mode == "nearest" {
                    assert_eq!(got.data, want.data, "{what}");
                    continue;
                }
                let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
                for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                    let ok =
                        (a - b).abs() <= 1e-12 * b.abs().max(1.0) || (a.is_nan() && b.is_nan());
                    assert!(ok, "{what}: element {i}: emulated {a} vs reference {b}");
                }
            }
        }
    }
}

/// A grid coordinate that is NaN, infinite or beyond 2^62 pixels (1e30; 3e38, whose pixel
/// coordinate overflows f32) samples where -1 does, the axis's low bound, as onnxruntime
/// replaces it (`docs/spec-decisions.md` 19): every mode, padding and align_corners, f32 and
/// f64, the GPU and the CPU reference each bit for bit the same as on a grid holding -1 there.
/// And a linear tap of an f32 coordinate past 2^24 pixels weighs 0 where x + 1 rounds to x,
/// as onnxruntime weighs it: 0 with border padding, where the taps read the last column.
#[test]
fn grid_sample_takes_undefined_coordinates_as_onnxruntime() {
    let ctx = ctx();
    let special = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e30,
        -1e30,
        3e38,
        2e19,
    ];
    let mut pairs = vec![];
    for (i, &v) in special.iter().enumerate() {
        let other = i as f64 / 4.0 - 0.8;
        pairs.extend([v, other, other, v]);
    }
    let replaced: Vec<f64> = pairs
        .iter()
        .map(|&v| {
            if v.is_finite() && v.abs() < 1e6 {
                v
            } else {
                -1.0
            }
        })
        .collect();
    let positions = pairs.len() / 2;
    let run = |grid: &[f64], dtype: DType, mode: &str, padding: &str, align: i64| {
        let x = f64_values(9, &[1, 2, 3, 4], true);
        let grid = HostTensor::from_vec(vec![1, 1, grid.len() / 2, 2], grid).unwrap();
        let cast = |t: HostTensor| match dtype {
            DType::F32 => {
                let v: Vec<f32> = t
                    .to_vec::<f64>()
                    .unwrap()
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                HostTensor::from_vec(t.shape.clone(), &v).unwrap()
            }
            _ => t,
        };
        let node = Node::new("GridSample", "g")
            .inputs(["x", "grid"])
            .attr("mode", Attr::String(mode.into()))
            .attr("padding_mode", Attr::String(padding.into()))
            .attr("align_corners", Attr::Int(align));
        both_on(ctx, node, vec![("x", cast(x)), ("grid", cast(grid))]).unwrap()
    };
    let as_f64 = |t: &HostTensor| -> Vec<f64> {
        match t.dtype {
            DType::F32 => t
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|&v| f64::from(v))
                .collect(),
            _ => t.to_vec::<f64>().unwrap(),
        }
    };
    for dtype in [DType::F32, DType::F64] {
        for mode in ["nearest", "linear", "cubic"] {
            for padding in ["zeros", "border", "reflection"] {
                for align in [0, 1] {
                    let what = format!("{dtype:?} {mode} {padding} align {align}");
                    let (got, want) = run(&pairs, dtype, mode, padding, align);
                    let (got_at_low, want_at_low) = run(&replaced, dtype, mode, padding, align);
                    assert_eq!(got.data, got_at_low.data, "{what}: GPU");
                    assert_eq!(want.data, want_at_low.data, "{what}: reference");
                    assert_eq!(got.shape, vec![1, 2, 1, positions], "{what}");
                    // Far but defined: reflected from where they lie (past i32's range in
                    // f64), GPU as the reference.
                    let far = if dtype == DType::F32 { 1e6 } else { 1e12 };
                    let (got, want) = run(
                        &[far, 0.1, -far, 0.6, 0.3, far, -0.4, -far],
                        dtype,
                        mode,
                        padding,
                        align,
                    );
                    for (i, (a, b)) in as_f64(&got).iter().zip(as_f64(&want)).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                            "{what}: element {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
    // 1e8 is column 2e8 (1.5e8 with align_corners), where f32's spacing is 16.
    for align in [0, 1] {
        let (got, want) = run(
            &[1e8, 0.2, -0.3, 1e8],
            DType::F32,
            "linear",
            "border",
            align,
        );
        for y in [&got, &want] {
            assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0; 4], "align {align}");
        }
    }
}

/// f64 values from `seed`: whole numbers from -8 to 8 (whose products and sums are exact in
/// any order) or, with `fractions`, values in [-2, 2) of every bit of the significand.
fn f64_values(seed: u64, shape: &[usize], fractions: bool) -> HostTensor {
    let n: usize = shape.iter().product();
    let raw = bytes(seed, n * 8);
    let v: Vec<f64> = raw
        .chunks(8)
        .map(|c| {
            let w = u64::from_le_bytes(c.try_into().unwrap());
            if fractions {
                (w >> 11) as f64 / (1u64 << 51) as f64 - 2.0
            } else {
                (w % 17) as f64 - 8.0
            }
        })
        .collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

/// Without SHADER_F64 (browsers, Metal), MatMul and Gemm on f64 run on the emulation: whole
/// numbers bit for bit against the CPU reference (their sums are exact in any order), values
/// of every significand bit within 1e-13 of the reference's magnitude (onnxruntime's own
/// tests hold doubles to 1e-5 relative), in shapes that take the kernels of few rows and of
/// tiles, batched and broadcast, with Gemm's transposes and its alpha, beta and C as the
/// MatMul's epilogue; on each kernel with an emulated variant (forced, whichever the shape
/// rule picks).
#[test]
fn f64_products_run_on_the_emulation_without_the_feature() {
    for kernel in [MatMulKernel::Tiles, MatMulKernel::Rows] {
        f64_products_on(&common::ctx_emulating_64_bit_with(kernel), kernel);
    }
}

fn f64_products_on(plain: &wgpu_ops::Context, kernel: MatMulKernel) {
    let run = |node: Node, inputs: Vec<(&str, HostTensor)>| {
        let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
        both_on(plain, node.inputs(names), inputs).unwrap_or_else(|e| panic!("{kernel:?}: {e}"))
    };
    let mut seed = 0;
    for fractions in [false, true] {
        let shapes: [(&[usize], &[usize]); 5] = [
            (&[3, 5], &[5, 4]),
            (&[40, 33], &[33, 21]),
            (&[2, 1, 7, 9], &[3, 9, 5]),
            (&[1, 64], &[64, 1]),
            (&[17, 0], &[0, 3]),
        ];
        for (sa, sb) in shapes {
            seed += 2;
            let inputs = vec![
                ("a", f64_values(seed, sa, fractions)),
                ("b", f64_values(seed + 1, sb, fractions)),
            ];
            let (got, want) = run(Node::new("MatMul", "m"), inputs);
            let what = format!("{kernel:?} MatMul {sa:?} x {sb:?}");
            assert_f64_close(&got, &want, fractions, &what);
        }
        for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            seed += 3;
            let (m, k, n) = (19, 23, 6);
            let sa = if ta == 1 { [k, m] } else { [m, k] };
            let sb = if tb == 1 { [n, k] } else { [k, n] };
            let node = Node::new("Gemm", "g")
                .attr("alpha", Attr::Float(0.5))
                .attr("beta", Attr::Float(-2.0))
                .attr("transA", Attr::Int(ta))
                .attr("transB", Attr::Int(tb));
            let inputs = vec![
                ("a", f64_values(seed, &sa, fractions)),
                ("b", f64_values(seed + 1, &sb, fractions)),
                ("c", f64_values(seed + 2, &[n], fractions)),
            ];
            let (got, want) = run(node, inputs);
            assert_f64_close(&got, &want, fractions, &format!("{kernel:?} Gemm {ta}{tb}"));
        }
    }
}

/// Without SHADER_F64, the f64 reductions run on the emulation (LogSum and LogSumExp with its
/// exp and log): whole numbers bit for bit against the CPU reference, values of every
/// significand bit within 1e-13 of its magnitude, NaN and infinities as the native path keeps
/// them (Max and Min keep NaN, the Arg reductions skip it), over rows short and long (one
/// thread's fold, a workgroup's tree, and the chunked passes of rows longer than a
/// workgroup), inner and outer axes.
#[test]
fn f64_reductions_run_on_the_emulation_without_the_feature() {
    let plain = common::ctx_emulating_64_bit();
    let run = |node: Node, x: HostTensor| {
        both_on(plain, node.inputs(["x"]), vec![("x", x)]).unwrap_or_else(|e| panic!("{e}"))
    };
    let ops = [
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceMean",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceMax",
        "ReduceMin",
        "ArgMax",
        "ArgMin",
        "ReduceLogSum",
        "ReduceLogSumExp",
    ];
    let mut seed = 100;
    for shape in [&[3usize, 7][..], &[2, 3000], &[70000], &[5, 4, 33]] {
        for fractions in [false, true] {
            for op in ops {
                seed += 1;
                if op.starts_with("ReduceLog") && shape.iter().product::<usize>() > 1000 {
                    // Short rows only: each pass of these compiles exp and log on the
                    // emulation (seconds each on a CPU adapter), and the longer rows add
                    // passes, not cases.
                    continue;
                }
                let mut x = f64_values(seed, shape, fractions);
                if op == "ReduceProd" && !fractions {
                    // Products of whole numbers stay exact below 2^53: ones and twos, few.
                    let v: Vec<f64> = x
                        .to_vec::<f64>()
                        .unwrap()
                        .iter()
                        .map(|v| if v.abs() > 6.0 { 2.0 } else { 1.0 })
                        .collect();
                    x = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
                }
                if op == "ReduceLogSum" {
                    // Of positive sums.
                    let v: Vec<f64> = x
                        .to_vec::<f64>()
                        .unwrap()
                        .iter()
                        .map(|v| v.abs() + 0.5)
                        .collect();
                    x = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
                }
                for axis in [shape.len() as i64 - 1, 0] {
                    let node = Node::new(op, "r").attr("keepdims", Attr::Int(0));
                    let node = if op.starts_with("Arg") {
                        node.attr("axis", Attr::Int(axis))
                            .attr("select_last_index", Attr::Int(seed as i64 % 2))
                    } else {
                        node.attr("axes", Attr::Ints(vec![axis]))
                    };
                    let (got, want) = run(node, x.clone());
                    let what = format!("{op} of {shape:?} over axis {axis}");
                    if op.starts_with("Arg") {
                        assert_eq!(got, want, "{what}");
                    } else if fractions || op.starts_with("ReduceLog") {
                        // Sums in another order (an error growing with the row's length at
                        // worst as its square root times the row's, typically), and exp and
                        // log within a few ulp.
                        let n = shape[axis as usize] as f64;
                        assert_f64_within(&got, &want, 1e-15 * n.max(100.0), &what);
                    } else {
                        assert_f64_close(&got, &want, false, &what);
                    }
                }
            }
        }
    }
    // NaN, infinities and zeros of both signs.
    let specials = [
        1.0,
        f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        -3.0,
        f64::NEG_INFINITY,
        2.5,
    ];
    let x = HostTensor::from_vec(vec![2, 4], &specials).unwrap();
    for op in ops {
        for axis in [0, 1] {
            let node = Node::new(op, "r").attr("keepdims", Attr::Int(1));
            let node = if op.starts_with("Arg") {
                node.attr("axis", Attr::Int(axis))
            } else {
                node.attr("axes", Attr::Ints(vec![axis]))
            };
            let (got, want) = run(node, x.clone());
            if got.dtype == DType::F64 {
                let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
                for (a, b) in g.iter().zip(&w) {
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "{op} over {axis}: {g:?}, want {w:?}"
                    );
                }
            } else {
                assert_eq!(got, want, "{op} over {axis}");
            }
        }
    }
}

/// Without SHADER_F64, Conv (with its bias as the MatMul's epilogue) and the pools on f64 run
/// on the emulation, built from the gathers, MatMul, the reductions and element-wise ops:
/// whole numbers bit for bit against the CPU reference, values of every significand bit
/// within 1e-13 of its magnitude (sums in another order); padding, strides, dilations,
/// partial windows (`ceil_mode`, `count_include_pad` off) and MaxPool's indices.
#[test]
fn f64_windows_run_on_the_emulation_without_the_feature() {
    let plain = common::ctx_emulating_64_bit();
    let ints = |v: &[i64]| Attr::Ints(v.to_vec());
    let mut seed = 300;
    for fractions in [false, true] {
        seed += 10;
        let x = f64_values(seed, &[2, 3, 7, 6], fractions);
        let cases: Vec<(Node, Vec<(&str, HostTensor)>)> = vec![
            (
                Node::new("Conv", "c")
                    .attr("pads", ints(&[1, 0, 2, 1]))
                    .attr("strides", ints(&[2, 1]))
                    .attr("dilations", ints(&[1, 2])),
                vec![
                    ("x", x.clone()),
                    ("w", f64_values(seed + 1, &[4, 3, 3, 2], fractions)),
                    ("b", f64_values(seed + 2, &[4], fractions)),
                ],
            ),
            (
                Node::new("Conv", "g").attr("group", Attr::Int(3)),
                vec![
                    ("x", x.clone()),
                    ("w", f64_values(seed + 3, &[6, 1, 2, 2], fractions)),
                ],
            ),
            (
                Node::new("AveragePool", "a")
                    .attr("kernel_shape", ints(&[3, 2]))
                    .attr("strides", ints(&[2, 2]))
                    .attr("pads", ints(&[1, 1, 1, 1]))
                    .attr("ceil_mode", Attr::Int(1)),
                vec![("x", x.clone())],
            ),
            (
                Node::new("MaxPool", "m")
                    .attr("kernel_shape", ints(&[2, 3]))
                    .attr("pads", ints(&[0, 1, 1, 1])),
                vec![("x", x.clone())],
            ),
            (
                Node::new("LpPool", "l")
                    .attr("kernel_shape", ints(&[2, 2]))
                    .attr("p", Attr::Int(2)),
                vec![("x", x.clone())],
            ),
            (Node::new("GlobalAveragePool", "ga"), vec![("x", x.clone())]),
            (Node::new("GlobalMaxPool", "gm"), vec![("x", x.clone())]),
        ];
        for (node, inputs) in cases {
            let op = node.op.clone();
            let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
            let (got, want) = both_on(plain, node.inputs(names), inputs)
                .unwrap_or_else(|e| panic!("{op} emulated: {e}"));
            // Means and norms divide or take roots: rounded as the reference rounds them,
            // but of sums in another order.
            let rounded = fractions || matches!(op.as_str(), "AveragePool" | "LpPool");
            let what = format!("{op} on f64, emulated (fractions: {fractions})");
            assert_f64_close(&got, &want, rounded, &what);
        }
        // MaxPool's indices, bit for bit.
        let g = Graph::new()
            .input("x", DType::F64, &[Some(2), Some(3), Some(7), Some(6)])
            .node(
                Node::new("MaxPool", "m")
                    .attr("kernel_shape", ints(&[3, 3]))
                    .attr("strides", ints(&[2, 2]))
                    .inputs(["x"])
                    .outputs(["y", "i"]),
            )
            .output("y")
            .output("i");
        let given = vec![("x".to_string(), x.clone())];
        let got = Session::new(plain, g.clone())
            .and_then(|s| s.run_blocking(given.clone()))
            .unwrap_or_else(|e| panic!("MaxPool with indices emulated: {e}"));
        let want = wgpu_ops::reference::graph::run_graph(&g, &given, &Default::default()).unwrap();
        assert_eq!(got[0].1, want[0], "MaxPool values");
        assert_eq!(got[1].1, want[1], "MaxPool indices");
    }
}

/// Without SHADER_F64, TopK on f64 runs on the emulation (scikit-learn's nearest neighbours
/// pick theirs with it): values and indices the reference's, bit for bit, largest and
/// smallest, with ties (the lower index first), NaN (larger than every number), infinities and
/// zeros of both signs, along inner and outer axes.
#[test]
fn f64_topk_runs_on_the_emulation_without_the_feature() {
    let plain = common::ctx_emulating_64_bit();
    let mut v = f64_values(7, &[6, 50], false).to_vec::<f64>().unwrap();
    for (k, special) in [
        f64::NAN,
        -0.0,
        0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-310,
    ]
    .into_iter()
    .enumerate()
    {
        v[k * 37 % 300] = special;
        v[(k * 53 + 11) % 300] = special;
    }
    let x = HostTensor::from_vec(vec![6, 50], &v).unwrap();
    let k_of = |k: i64| HostTensor::from_vec(vec![1], &[k]).unwrap();
    for (axis, k) in [(1i64, 7i64), (0, 4), (1, 50)] {
        for largest in [1i64, 0] {
            let g = Graph::new()
                .input("x", DType::F64, &[Some(6), Some(50)])
                .input("k", DType::I64, &[Some(1)])
                .node(
                    Node::new("TopK", "t")
                        .attr("axis", Attr::Int(axis))
                        .attr("largest", Attr::Int(largest))
                        .inputs(["x", "k"])
                        .outputs(["values", "indices"]),
                )
                .output("values")
                .output("indices");
            let given = vec![("x".to_string(), x.clone()), ("k".to_string(), k_of(k))];
            let got = Session::new(plain, g.clone())
                .and_then(|s| s.run_blocking(given.clone()))
                .unwrap_or_else(|e| panic!("{e}"));
            let want =
                wgpu_ops::reference::graph::run_graph(&g, &given, &Default::default()).unwrap();
            assert_eq!(
                got[0].1, want[0],
                "values, axis {axis}, k {k}, largest {largest}"
            );
            assert_eq!(
                got[1].1, want[1],
                "indices, axis {axis}, k {k}, largest {largest}"
            );
        }
    }
}

/// f64 `got` against `want`: bit for bit, or with `rounded` within 1e-13 of the largest
/// magnitude in `want` (sums in another order).
fn assert_f64_close(got: &HostTensor, want: &HostTensor, rounded: bool, what: &str) {
    assert_f64_within(got, want, if rounded { 1e-13 } else { 0.0 }, what)
}

/// f64 `got` against `want`: within `tolerance` times the largest magnitude in `want` (bit for
/// bit where it is 0).
fn assert_f64_within(got: &HostTensor, want: &HostTensor, tolerance: f64, what: &str) {
    assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{what}");
    let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = if tolerance > 0.0 {
            (a - b).abs() <= tolerance * scale
        } else {
            a.to_bits() == b.to_bits()
        };
        assert!(ok, "{what}: element {k} is {a:e}, want {b:e}");
    }
}

/// `op` of `inputs` by the CPU reference interpreter.
fn cpu(op: &str, inputs: Vec<HostTensor>) -> HostTensor {
    let inputs: Vec<(String, HostTensor)> = inputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("x{i}"), t))
        .collect();
    let mut g = Graph::new();
    for (n, t) in &inputs {
        let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
        g = g.input(n.as_str(), t.dtype, &shape);
    }
    let names: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
    let g = g
        .node(Node::new(op, "op").inputs(names).outputs(["y"]))
        .output("y");
    run_graph(&g, &inputs, &Default::default())
        .unwrap()
        .remove(0)
}

fn small_binding_context(bytes: u64) -> wgpu_ops::Context {
    wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_binding_size: Some(bytes),
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn elementwise_beyond_the_binding_limit_runs_in_windows() {
    // Every buffer here is larger than the 128 bytes this context may bind at once.
    let small = small_binding_context(128);
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[9, 13], &[9, 13]),
        (&[5, 1, 40], &[3, 1]),
        (&[1, 37], &[50, 1]),
        (&[2, 3, 4, 5], &[5]),
        (&[], &[70]),
    ];
    for (name, dtype) in [
        ("Sub", DType::F32),
        ("Mul", DType::I32),
        ("Max", DType::U32),
        ("Neg", DType::F32),
    ] {
        let op = wgpu_ops::ops::elementwise::lookup(name).unwrap();
        for (k, (sa, sb)) in shapes.iter().enumerate() {
            let a = values_for(dtype, sa, k as u64, false);
            let b = values_for(dtype, sb, 50 + k as u64, false);
            let (ta, tb) = (
                wgpu_ops::Tensor::from_host(&small, &a).unwrap(),
                wgpu_ops::Tensor::from_host(&small, &b).unwrap(),
            );
            let mut rec = small.recorder();
            let y = rec
                .elementwise(name, &ta, op.binary.then_some(&tb))
                .unwrap();
            let dispatches = rec.dispatches();
            pollster::block_on(rec.finish()).unwrap();
            let got = y.to_host_blocking().unwrap();

            let want = cpu(name, if op.binary { vec![a, b] } else { vec![a] });
            let what = format!("{name} {dtype} {sa:?} {sb:?}");
            close(&got, &want, &what);
            if got.data.len() > 128 {
                assert!(dispatches > 1, "{what}: {dispatches} dispatch");
            }
        }
    }
}

#[test]
fn matmul_beyond_the_binding_limit_runs_in_windows() {
    let small = small_binding_context(512);
    let cases: [(&[usize], &[usize]); 4] = [
        (&[3, 5, 7], &[7, 6]),
        (&[2, 1, 20, 3], &[4, 3, 5]),
        (&[40, 2], &[2, 3]),
        (&[2, 6, 0], &[0, 7]),
    ];
    for (k, (sa, sb)) in cases.iter().enumerate() {
        for dtype in [DType::F32, DType::I32] {
            let a = values_for(dtype, sa, k as u64, false);
            let b = values_for(dtype, sb, 10 + k as u64, false);
            let (ta, tb) = (
                wgpu_ops::Tensor::from_host(&small, &a).unwrap(),
                wgpu_ops::Tensor::from_host(&small, &b).unwrap(),
            );
            let mut rec = small.recorder();
            let y = rec.matmul(&ta, &tb).unwrap();
            let dispatches = rec.dispatches();
            pollster::block_on(rec.finish()).unwrap();
            let got = y.to_host_blocking().unwrap();
            let what = format!("{dtype} {sa:?} x {sb:?}");
            close(&got, &cpu("MatMul", vec![a, b]), &what);
            if got.data.len() > 512 {
                assert!(dispatches > 1, "{what}: {dispatches} dispatch");
            }
        }
    }
    // One output row needs all of B (40 x 40 x 4 bytes), more than a window can hold: the
    // product is summed over slices of B's rows (and A's columns).
    for (sa, sb) in [(&[2, 40][..], &[40, 40][..]), (&[3, 2, 40], &[3, 40, 9])] {
        let a = values_for(DType::F32, sa, 1, false);
        let b = values_for(DType::F32, sb, 2, false);
        let (ta, tb) = (
            wgpu_ops::Tensor::from_host(&small, &a).unwrap(),
            wgpu_ops::Tensor::from_host(&small, &b).unwrap(),
        );
        let y = small.run(|rec| rec.matmul(&ta, &tb)).unwrap();
        let what = format!("{sa:?} x {sb:?} in slices of B");
        close(
            &y.to_host_blocking().unwrap(),
            &cpu("MatMul", vec![a, b]),
            &what,
        );
    }
    // One row of B (200 x 4 bytes) is more than a window holds: no slice fits.
    let a = values_for(DType::F32, &[2, 3], 1, false);
    let b = values_for(DType::F32, &[3, 200], 2, false);
    let (ta, tb) = (
        wgpu_ops::Tensor::from_host(&small, &a).unwrap(),
        wgpu_ops::Tensor::from_host(&small, &b).unwrap(),
    );
    match small.run(|rec| rec.matmul(&ta, &tb)) {
        Err(Error::LimitExceeded { op, limit, max, .. }) => {
            assert_eq!(
                (op, limit, max),
                ("MatMul", "max_storage_buffer_binding_size", 512)
            );
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

/// Concat of `parts` along `axis` by the CPU interpreter.
fn concat_reference(parts: Vec<HostTensor>, axis: i64) -> HostTensor {
    let mut g = Graph::new();
    let mut names = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let shape: Vec<Option<usize>> = p.shape.iter().map(|&d| Some(d)).collect();
        g = g.input(format!("x{i}"), p.dtype, &shape);
        names.push(format!("x{i}"));
    }
    let g = g
        .node(
            Node::new("Concat", "c")
                .inputs(names.clone())
                .outputs(["y"])
                .attr("axis", Attr::Int(axis)),
        )
        .output("y");
    let inputs: Vec<(String, HostTensor)> = names.into_iter().zip(parts).collect();
    run_graph(&g, &inputs, &Default::default())
        .unwrap()
        .remove(0)
}

#[test]
fn concat_of_any_dtype_in_words_and_windows() {
    let small = small_binding_context(128);
    // (dtype, shapes, axis): axis 0 is one copy per input; whole-word runs move as words.
    let cases: [(DType, &[&[usize]], i64); 6] = [
        (DType::U8, &[&[3, 5], &[1, 5], &[4, 5]], 0),
        (DType::I16, &[&[2, 3, 2], &[2, 3, 4]], -1),
        (DType::U8, &[&[6, 4], &[6, 8], &[6, 0]], 1),
        (DType::F32, &[&[9, 7], &[9, 2]], 1),
        (DType::F64, &[&[3, 2, 5], &[3, 1, 5]], 1),
        (DType::Bool, &[&[40, 4], &[40, 12]], -1),
    ];
    for ctx in [ctx(), &small] {
        for (dtype, shapes, axis) in cases {
            let parts: Vec<HostTensor> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| random_tensor(i as u64, dtype, s))
                .collect();
            let tensors: Vec<wgpu_ops::Tensor> = parts
                .iter()
                .map(|p| wgpu_ops::Tensor::from_host(ctx, p).unwrap())
                .collect();
            let got = ctx
                .run(|rec| rec.concat(&tensors, axis))
                .unwrap()
                .to_host_blocking()
                .unwrap();
            let want = concat_reference(parts, axis);
            assert_eq!(got, want, "{dtype} {shapes:?} axis {axis}");
        }
    }
}

/// Concat of inputs of whole words is one dispatch per 6 inputs on both kernel sets (a
/// decoder's cache and its new row; 16-bit runs of whole words; 8 inputs of bytes; an empty
/// input between two; one input twice), `vec4` where every run is whole quads; a single row
/// is that too with the GPU kernels and buffer copies with the CPU ones; runs that are not
/// whole words keep the general path. Bit for bit the reference.
#[test]
fn concat_takes_one_dispatch_per_six_inputs() {
    // (dtype, shapes, axis, dispatches and quad dispatches where they are the kernel's), the
    // same input twice where a shape is empty.
    type Case = (DType, &'static [&'static [usize]], i64, Option<(u64, u64)>);
    let cases: [Case; 7] = [
        (
            DType::F32,
            &[&[1, 4, 64, 16], &[1, 4, 1, 16]],
            2,
            Some((1, 1)),
        ),
        (DType::F16, &[&[2, 3, 4], &[2, 3, 6]], 2, Some((1, 0))),
        (
            DType::U8,
            &[
                &[3, 4],
                &[3, 8],
                &[3, 4],
                &[3, 4],
                &[3, 12],
                &[3, 4],
                &[3, 4],
                &[3, 8],
            ],
            1,
            Some((2, 0)),
        ),
        (
            DType::I64,
            &[&[2, 1, 3], &[2, 0, 3], &[2, 2, 3]],
            1,
            Some((1, 0)),
        ),
        (DType::I32, &[&[5, 8], &[]], 1, Some((1, 1))),
        (DType::F32, &[&[5], &[7]], 0, Some((1, 0))),
        // Runs of 5 bytes: transposed copies, concatenated, transposed back.
        (DType::U8, &[&[2, 5], &[2, 5]], 1, None),
    ];
    for cpu_kernels in [false, true] {
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        for (k, &(dtype, shapes, axis, counts)) in cases.iter().enumerate() {
            let mut parts: Vec<HostTensor> = shapes
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .map(|(i, s)| random_tensor(10 * k as u64 + i as u64, dtype, s))
                .collect();
            if shapes.iter().any(|s| s.is_empty()) {
                parts.push(parts[0].clone());
            }
            let tensors: Vec<wgpu_ops::Tensor> = parts
                .iter()
                .map(|p| wgpu_ops::Tensor::from_host(&ctx, p).unwrap())
                .collect();
            let before = ctx.stats();
            let got = ctx
                .run(|rec| rec.concat(&tensors, axis))
                .unwrap()
                .to_host_blocking()
                .unwrap();
            let after = ctx.stats();
            let case = format!("{dtype} {shapes:?} axis {axis} cpu kernels {cpu_kernels}");
            assert_eq!(got, concat_reference(parts, axis), "{case}");
            let Some((dispatches, quads)) = counts else {
                continue;
            };
            let (copies, dispatches, quads) = match (cpu_kernels, shapes[0].len()) {
                (true, 1) => (2, 0, 0),
                _ => (0, dispatches, quads),
            };
            let counted = (
                after.dispatches - before.dispatches,
                after.copies - before.copies,
                after.quad_dispatches - before.quad_dispatches,
            );
            assert_eq!(counted, (dispatches, copies, quads), "{case}");
        }
    }
}

/// Split into parts of whole words is one dispatch per 6 parts on both kernel sets (a
/// decoder's query, key and value; 16-bit parts of whole words; 7 parts of bytes; an empty
/// part), `vec4` where every run is whole quads; a single row is that too with the GPU
/// kernels; parts that are not whole words keep the general path. Bit for bit the reference.
#[test]
fn split_takes_one_dispatch_per_six_outputs() {
    // (dtype, shape, axis, sizes, dispatches and quad dispatches where they are the
    // kernel's on both kernel sets)
    type Case = (
        DType,
        &'static [usize],
        i64,
        &'static [usize],
        Option<(u64, u64)>,
    );
    let cases: [Case; 7] = [
        (DType::F32, &[1, 3, 768], 2, &[256, 256, 256], Some((1, 1))),
        (DType::F16, &[4, 6], 1, &[2, 4], Some((1, 0))),
        (DType::U8, &[3, 32], 1, &[4, 4, 4, 4, 8, 4, 4], Some((2, 0))),
        (DType::I64, &[2, 5, 3], 1, &[1, 0, 4], Some((1, 0))),
        (DType::F32, &[12], 0, &[5, 7], None),
        (DType::F32, &[7, 8], 0, &[3, 4], None),
        // Runs of 5 bytes: a slice per part.
        (DType::U8, &[2, 10], 1, &[5, 5], None),
    ];
    for cpu_kernels in [false, true] {
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        for (k, &(dtype, shape, axis, sizes, counts)) in cases.iter().enumerate() {
            let x = random_tensor(40 + k as u64, dtype, shape);
            let t = wgpu_ops::Tensor::from_host(&ctx, &x).unwrap();
            let before = ctx.stats();
            let parts = ctx
                .run(|rec| rec.split_to(&t, axis, sizes, vec![wgpu_ops::Out::NEW; sizes.len()]))
                .unwrap();
            let after = ctx.stats();
            let names: Vec<String> = (0..sizes.len()).map(|j| format!("y{j}")).collect();
            let split: Vec<i64> = sizes.iter().map(|&n| n as i64).collect();
            let mut g = Graph::new()
                .input(
                    "x",
                    dtype,
                    &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                )
                .constant(
                    "split",
                    HostTensor::from_vec(vec![sizes.len()], &split).unwrap(),
                )
                .node(
                    Node::new("Split", "s")
                        .inputs(["x", "split"])
                        .outputs(names.clone())
                        .attr("axis", Attr::Int(axis)),
                );
            for n in &names {
                g = g.output(n.clone());
            }
            let want = run_graph(&g, &[("x".to_string(), x)], &Default::default()).unwrap();
            let case = format!("{dtype} {shape:?} axis {axis} {sizes:?} cpu kernels {cpu_kernels}");
            for (j, (p, w)) in parts.iter().zip(&want).enumerate() {
                assert_eq!(&p.to_host_blocking().unwrap(), w, "{case} part {j}");
            }
            let single_row = shape[..axis as usize].iter().product::<usize>() == 1;
            let counts = match (counts, single_row && !cpu_kernels) {
                (None, true) if dtype == DType::F32 => Some((1, u64::from(k == 5))),
                (c, _) => c,
            };
            let Some((dispatches, quads)) = counts else {
                continue;
            };
            let counted = (
                after.dispatches - before.dispatches,
                after.copies - before.copies,
                after.quad_dispatches - before.quad_dispatches,
            );
            assert_eq!(counted, (dispatches, 0, quads), "{case}");
        }
    }
}

/// Concat of one input is that input (a view, no command); in a graph, a scatter into it
/// while the input is read afterwards writes into a copy, and leaves the input as it was.
#[test]
fn concat_of_one_input_is_a_view() {
    let x = random_tensor(30, DType::F32, &[6, 4]);
    // A context of its own: its counts are this test's alone.
    let own = own_ctx();
    let t = wgpu_ops::Tensor::from_host(&own, &x).unwrap();
    let before = own.stats();
    let one = own
        .run(|rec| rec.concat(std::slice::from_ref(&t), 1))
        .unwrap();
    let after = own.stats();
    assert!(one.shares_buffer(&t));
    assert_eq!(
        after.dispatches + after.copies,
        before.dispatches + before.copies
    );
    // Its axis is checked as for several inputs.
    let e = own
        .run(|rec| rec.concat(std::slice::from_ref(&t), 2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("Concat"), "{e}");
    let idx = HostTensor::from_vec(vec![1, 4], &[5i64, 0, 3, 2]).unwrap();
    let upd = random_tensor(31, DType::F32, &[1, 4]);
    let g = Graph::new()
        .input("x", DType::F32, &[Some(6), Some(4)])
        .input("i", DType::I64, &[Some(1), Some(4)])
        .input("u", DType::F32, &[Some(1), Some(4)])
        .node(
            Node::new("Concat", "c")
                .inputs(["x"])
                .outputs(["c"])
                .attr("axis", Attr::Int(0)),
        )
        .node(
            Node::new("ScatterElements", "s")
                .inputs(["c", "i", "u"])
                .outputs(["y"])
                .attr("axis", Attr::Int(0)),
        )
        .node(Node::new("Neg", "n").inputs(["x"]).outputs(["z"]))
        .output("y")
        .output("z");
    let inputs = vec![
        ("x".to_string(), x.clone()),
        ("i".to_string(), idx),
        ("u".to_string(), upd),
    ];
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    let session = Session::new(ctx(), g).unwrap();
    let got: Vec<HostTensor> = session
        .run_blocking(inputs)
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(got, want);
}

// Runs that are not whole 32-bit words (1- and 2-byte dtypes after the first axis: u8 runs of
// 3 and 1 bytes, the fuzzer's bool [1, 2, 2] twice along axis 1, odd shapes) go through
// transposed copies; every dtype, against the CPU interpreter.
dtype_tests!(concat_of_runs_that_are_not_whole_words, |dtype: DType| {
    let cases: [(&[&[usize]], i64); 4] = [
        (&[&[2, 3], &[2, 1]], 1),
        (&[&[1, 2, 2], &[1, 2, 2]], 1),
        (&[&[3, 1, 5], &[3, 2, 5], &[3, 0, 5]], -2),
        (&[&[2, 3, 3], &[2, 3, 1]], 2),
    ];
    for (shapes, axis) in cases {
        let parts: Vec<HostTensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| random_tensor(10 + i as u64, dtype, s))
            .collect();
        let tensors: Vec<wgpu_ops::Tensor> = parts.iter().map(upload).collect();
        let got = ctx()
            .run(|rec| rec.concat(&tensors, axis))
            .unwrap()
            .to_host_blocking()
            .unwrap();
        let want = concat_reference(parts, axis);
        assert_eq!(got, want, "{dtype} {shapes:?} axis {axis}");
    }
});

#[test]
fn matmul_kernels_at_every_workgroup_size() {
    // Each of the three MatMul kernels (tiles, few rows, CPU blocks; see `MatMulKernel`) at
    // workgroup sizes 1 to 256, on rows of 1, 3 and 37, k not a multiple of 4 or 16, n not a
    // multiple of 4 (blocks end short, and a workgroup's last columns spread over fewer
    // invocations), broadcast batches. i32 values, so sums are exact.
    let cases: [(&[usize], &[usize]); 5] = [
        (&[3, 70], &[70, 130]),
        (&[9, 20], &[20, 300]),
        (&[37, 70], &[70, 130]),
        (&[1, 70], &[70, 131]),
        (&[2, 1, 3, 21], &[4, 21, 7]),
    ];
    let exact = |shape: &[usize], seed: i32| {
        let n: usize = shape.iter().product();
        let v: Vec<i32> = (0..n as i32).map(|i| (i * seed) % 13 - 6).collect();
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    };
    let mut kernels = std::collections::HashSet::new();
    for cpu in [false, true] {
        for size in [1, 8, 64, 256] {
            let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
                workgroup_size: Some(size),
                cpu_kernels: Some(cpu),
                matmul: Some(MatMulChoice::ByShape),
                ..Default::default()
            })
            .unwrap();
            for (sa, sb) in cases {
                let (a, b) = (exact(sa, 7), exact(sb, 5));
                let mut g = Graph::new();
                for (name, t) in [("a", &a), ("b", &b)] {
                    let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
                    g = g.input(name, DType::I32, &shape);
                }
                let g = g
                    .node(Node::new("MatMul", "mm").inputs(["a", "b"]).outputs(["y"]))
                    .output("y");
                let inputs = vec![("a".to_string(), a), ("b".to_string(), b)];
                let got = Session::new(&ctx, g.clone())
                    .unwrap()
                    .run_blocking(inputs.clone())
                    .unwrap();
                let want = run_graph(&g, &inputs, &Default::default()).unwrap();
                assert_eq!(got[0].1, want[0], "cpu {cpu}, size {size}: {sa:?} x {sb:?}");
                let rows = sa[sa.len() - 2] as u64;
                let n = sb[sb.len() - 1] as u64;
                let group = size.clamp(4, 256);
                let k = sb[sb.len() - 2] as u64;
                kernels.insert(wgpu_ops::kernels::matmul::matmul_kernel(
                    rows, n, k, cpu, group, 65535,
                ));
            }
        }
    }
    assert_eq!(kernels.len(), 3, "{kernels:?}");
}

/// f16 and bf16 products in one dispatch on every MatMul kernel: the operands read from their
/// packed words, summed in f32 and rounded once when stored (two halves of a word written by
/// different invocations; odd widths put a row's end and the next row's start in one word).
/// Small integers times 16-bit values of full precision in [1, 2) make every f32 sum exact and
/// most results round, so each compares bit for bit with the reference (which rounds its exact
/// sums once too). An epilogue reads the product rounded.
#[test]
fn matmul_on_16_bit_floats_rounds_exact_sums_once_in_one_dispatch() {
    use wgpu_ops::ops::elementwise::{Arg, Program};
    use wgpu_ops::{Context, ContextOptions, Out, Tensor};
    let cases: [(&[usize], &[usize]); 5] = [
        (&[1, 33], &[33, 7]),
        (&[5, 40], &[40, 9]),
        (&[37, 70], &[70, 131]),
        (&[2, 1, 3, 21], &[4, 21, 7]),
        (&[6, 5], &[5, 1]),
    ];
    let mut rounded = 0;
    for dtype in [DType::F16, DType::BF16] {
        let ints = |shape: &[usize], seed: u64| {
            let v: Vec<f32> = bytes(seed, shape.iter().product())
                .iter()
                .map(|&b| f32::from(b % 5) - 2.0)
                .collect();
            HostTensor::from_vec(shape.to_vec(), &v).unwrap()
        };
        // Random significands in [1, 2) with either sign.
        let fractions = |shape: &[usize], seed: u64| {
            let raw = bytes(seed, 2 * shape.iter().product::<usize>());
            let v: Vec<f32> = raw
                .chunks(2)
                .map(|b| {
                    let bits = u16::from_le_bytes([b[0], b[1]]);
                    let one = 1.0 + f32::from(bits & 0x3ff) / 1024.0;
                    if bits & 0x8000 != 0 {
                        -one
                    } else {
                        one
                    }
                })
                .collect();
            HostTensor::from_vec(shape.to_vec(), &v).unwrap()
        };
        let narrow = |t: &HostTensor| cpu_cast(t, dtype);
        for (kernel, cpu_kernels) in [
            (MatMulKernel::Tiles, false),
            (MatMulKernel::Rows, false),
            (MatMulKernel::Blocks, true),
        ] {
            let ctx = Context::new_blocking(ContextOptions {
                cpu_kernels: Some(cpu_kernels),
                matmul: Some(MatMulChoice::Always(kernel)),
                ..Default::default()
            })
            .unwrap();
            for (k, (sa, sb)) in cases.iter().enumerate() {
                let a = narrow(&ints(sa, k as u64));
                let b = narrow(&fractions(sb, 40 + k as u64));
                let want = cpu("MatMul", vec![a.clone(), b.clone()]);
                let wide = cpu(
                    "MatMul",
                    vec![cpu_cast(&a, DType::F32), cpu_cast(&b, DType::F32)],
                );
                rounded += usize::from(cpu_cast(&want, DType::F32) != wide);
                let (ta, tb) = (
                    Tensor::from_host(&ctx, &a).unwrap(),
                    Tensor::from_host(&ctx, &b).unwrap(),
                );
                let before = ctx.stats().dispatches;
                let y = ctx.run(|rec| rec.matmul(&ta, &tb)).unwrap();
                let dispatches = ctx.stats().dispatches - before;
                let got = y.to_host_blocking().unwrap();
                let case = format!("{dtype} {kernel:?} {sa:?} x {sb:?}");
                assert_eq!(got, want, "{case}");
                assert_eq!(dispatches, 1, "{case}");
                // An epilogue reads the rounded product, as the product stored first would be:
                // `product - c` in one dispatch against the same two ops apart.
                let shape = got.shape.clone();
                let c =
                    Tensor::from_host(&ctx, &narrow(&fractions(&shape, 90 + k as u64))).unwrap();
                let mut p = Program::new(vec![dtype; 2], false);
                p.push("Sub", vec![Arg::Operand(0), Arg::Operand(1)], dtype)
                    .unwrap();
                let before = ctx.stats().dispatches;
                let fused = ctx
                    .run(|rec| rec.matmul_program_to(&ta, &tb, &p, &[&c], Out::NEW))
                    .unwrap();
                assert_eq!(ctx.stats().dispatches - before, 1, "{case} epilogue");
                let apart = ctx
                    .run(|rec| rec.program_to(&p, &[&y, &c], Out::NEW))
                    .unwrap();
                assert_eq!(
                    fused.to_host_blocking().unwrap(),
                    apart.to_host_blocking().unwrap(),
                    "{case} epilogue"
                );
            }
        }
    }
    // The values do test rounding: most products differ from their f32 sums.
    assert!(rounded >= 20, "{rounded}");
}

/// `t` cast to `dtype` by the reference.
fn cpu_cast(t: &HostTensor, dtype: DType) -> HostTensor {
    let mut g = Graph::new().input(
        "x",
        t.dtype,
        &t.shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
    );
    g = g
        .node(
            Node::new("Cast", "c")
                .inputs(["x"])
                .outputs(["y"])
                .attr("to", Attr::String(dtype.name().into())),
        )
        .output("y");
    run_graph(&g, &[("x".to_string(), t.clone())], &Default::default())
        .unwrap()
        .remove(0)
}

/// `a x b` on a context choosing MatMul kernels by `choice`, with the work it took (dispatches,
/// plus submissions and host waits in higher bits: see `run_matmul`).
fn matmul_with(
    choice: MatMulChoice,
    a: &HostTensor,
    b: &HostTensor,
) -> (HostTensor, u64, wgpu_ops::Context) {
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        matmul: Some(choice),
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    let (got, dispatches) = run_matmul(&ctx, a, b);
    (got, dispatches, ctx)
}

fn run_matmul(ctx: &wgpu_ops::Context, a: &HostTensor, b: &HostTensor) -> (HostTensor, u64) {
    let shape =
        |t: &HostTensor| -> Vec<Option<usize>> { t.shape.iter().map(|&d| Some(d)).collect() };
    let g = Graph::new()
        .input("a", a.dtype, &shape(a))
        .input("b", b.dtype, &shape(b))
        .node(Node::new("MatMul", "mm").inputs(["a", "b"]).outputs(["y"]))
        .output("y");
    let inputs = vec![("a".to_string(), a.clone()), ("b".to_string(), b.clone())];
    let session = Session::new(ctx, g).unwrap();
    let before = ctx.stats();
    let got = session.run_blocking(inputs).unwrap().remove(0).1;
    let after = ctx.stats();
    // Submissions and waits in the high bits, so that one comparison covers all three.
    let work = |s: wgpu_ops::Stats| s.dispatches + (s.submissions << 20) + (s.host_waits << 40);
    (got, work(after) - work(before))
}

#[test]
fn matmul_kernels_forced_or_measured_per_shape() {
    // A recurrent step's product, [8, 256] x [256, 256] in f32: every kernel can compute it,
    // each sums in its own order (so forcing one shows in the bits), all within tolerance
    // (positive terms: no cancellation, so relative error stays that of the sum's rounding).
    let a = values_for(DType::F32, &[8, 256], 1, true);
    let b = values_for(DType::F32, &[256, 256], 2, true);
    let want = cpu("MatMul", vec![a.clone(), b.clone()]);
    let mut forced = Vec::new();
    for kernel in MatMulKernel::ALL {
        let (got, dispatches, ctx) = matmul_with(MatMulChoice::Always(kernel), &a, &b);
        close(&got, &want, kernel.name());
        assert_eq!(dispatches & 0xFFFFF, 1, "{}", kernel.name());
        assert!(ctx.matmul_measurements().is_empty());
        forced.push((kernel, got, dispatches));
    }
    let orders: std::collections::HashSet<&[u8]> =
        forced.iter().map(|(_, t, _)| &t.data[..]).collect();
    assert!(
        orders.len() >= 2,
        "every forced kernel gave the same bits: forcing had no effect"
    );

    let (got, dispatches, ctx) = matmul_with(MatMulChoice::Measure, &a, &b);
    close(&got, &want, "measured");
    // The timing runs are not the caller's work: the same dispatches, submissions and host
    // waits as the run forced to the chosen kernel (checked below).
    let measured = ctx.matmul_measurements();
    assert_eq!(measured.len(), 1, "{measured:?}");
    let m = &measured[0];
    assert_eq!(
        (m.shape.batches, m.shape.rows, m.shape.n, m.shape.k),
        (1, 8, 256, 256)
    );
    let timed: Vec<MatMulKernel> = m.micros.iter().map(|&(k, _)| k).collect();
    assert_eq!(timed, MatMulKernel::ALL, "{m:?}");
    assert!(
        m.micros.iter().all(|&(_, us)| us.is_finite() && us > 0.0),
        "{m:?}"
    );
    let fastest = m
        .micros
        .iter()
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .unwrap()
        .0;
    assert_eq!(m.chosen, fastest);
    let (_, chosen_bits, chosen_work) = forced.iter().find(|(k, _, _)| *k == m.chosen).unwrap();
    assert_eq!(
        got.data, chosen_bits.data,
        "the measured run used another kernel than it chose"
    );
    assert_eq!(
        dispatches, *chosen_work,
        "work counted beside the product's"
    );
    // Measured once per shape; products too small to matter and products of many rows go by
    // shape.
    run_matmul(&ctx, &a, &b);
    let small = values_for(DType::F32, &[8, 16], 3, false);
    let small_b = values_for(DType::F32, &[16, 16], 4, false);
    run_matmul(&ctx, &small, &small_b);
    let tall = values_for(DType::F32, &[65, 256], 5, false);
    run_matmul(&ctx, &tall, &b);
    assert_eq!(ctx.matmul_measurements().len(), 1);
    // Outer products (one product per sum) are measured whatever their rows: LinearAttention's
    // k v^T, 16 heads of 128.
    let k = values_for(DType::F32, &[16, 128, 1], 6, false);
    let v = values_for(DType::F32, &[16, 1, 128], 7, false);
    let (outer, _) = run_matmul(&ctx, &k, &v);
    close(&outer, &cpu("MatMul", vec![k, v]), "outer products");
    let measured = ctx.matmul_measurements();
    assert_eq!(measured.len(), 2, "{measured:?}");
    let s = measured[1].shape;
    assert_eq!((s.batches, s.rows, s.n, s.k), (16, 128, 128, 1));
}

#[test]
fn float_to_integer_casts_saturate_on_every_adapter() {
    // Rounded toward zero, saturated, NaN as 0, like the reference. Run on every adapter wgpu
    // finds (lavapipe's Vulkan and llvmpipe's GL here): GLSL's conversion wraps negative
    // floats unless the kernel clamps them.
    let v = [
        -3.5f32,
        -1.0,
        -0.5,
        0.0,
        0.7,
        65536.5,
        2147483520.0,
        3.0e9,
        1.0e10,
        -1.0e10,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let x = HostTensor::from_vec(vec![v.len()], &v).unwrap();
    let adapters = pollster::block_on(wgpu_ops::gpu::list_adapters(&Default::default()));
    assert!(!adapters.is_empty());
    let mut checked = 0;
    for info in adapters {
        // An adapter listed but unable to give a device (NVIDIA's GL through EGL on a
        // headless machine answers "Parent device is lost") is not one this test can check.
        let ctx = match wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            backends: Some(info.backend.into()),
            adapter_name: Some(info.name.clone()),
            ..Default::default()
        }) {
            Ok(ctx) => ctx,
            Err(e) => {
                eprintln!("not checked: {} ({:?}): {e}", info.name, info.backend);
                continue;
            }
        };
        checked += 1;
        let t = wgpu_ops::Tensor::from_host(&ctx, &x).unwrap();
        let (u, i) = ctx
            .run(|rec| Ok((rec.cast(&t, DType::U32)?, rec.cast(&t, DType::I32)?)))
            .unwrap();
        let want_u: Vec<u32> = v.iter().map(|&f| f as u32).collect();
        let want_i: Vec<i32> = v.iter().map(|&f| f as i32).collect();
        let place = format!("{} ({:?})", info.name, info.backend);
        assert_eq!(
            u.to_host_blocking().unwrap().to_vec::<u32>().unwrap(),
            want_u,
            "{place}"
        );
        assert_eq!(
            i.to_host_blocking().unwrap().to_vec::<i32>().unwrap(),
            want_i,
            "{place}"
        );
    }
    assert!(checked > 0, "no adapter gave a device");
}

/// Inputs of the variadic test: the 32-bit helper's values, widened for the 64-bit dtypes (i64
/// values beyond 32 bits).
fn variadic_input(dtype: DType, shape: &[usize], seed: u64) -> HostTensor {
    match dtype {
        DType::F64 => {
            let v = values_for(DType::F32, shape, seed, false)
                .to_vec::<f32>()
                .unwrap();
            HostTensor::from_vec(
                shape.to_vec(),
                &v.iter().map(|&x| f64::from(x) * 1e10).collect::<Vec<_>>(),
            )
        }
        DType::I64 => {
            let v = values_for(DType::I32, shape, seed, false)
                .to_vec::<i32>()
                .unwrap();
            HostTensor::from_vec(
                shape.to_vec(),
                &v.iter().map(|&x| i64::from(x) << 33).collect::<Vec<_>>(),
            )
        }
        _ => Ok(values_for(dtype, shape, seed, false)),
    }
    .unwrap()
}

#[test]
fn variadic_max_min_sum_mean_with_broadcasting() {
    // 1 to 4 inputs of shapes that broadcast together, combined in order.
    let shapes: [&[usize]; 4] = [&[2, 1, 3], &[4, 1], &[1], &[2, 4, 3]];
    let mut checked = 0;
    for dtype in [DType::F32, DType::F64, DType::I32, DType::U32, DType::I64] {
        for op in ["Max", "Min", "Sum", "Mean"] {
            let float = matches!(dtype, DType::F32 | DType::F64);
            for n in 1..=4 {
                let inputs: Vec<HostTensor> = (0..n)
                    .map(|i| variadic_input(dtype, shapes[i], 7 + i as u64))
                    .collect();
                let uploaded: Vec<wgpu_ops::Tensor> = inputs.iter().map(upload).collect();
                let got = ctx().run(|rec| rec.variadic_to(op, &uploaded, wgpu_ops::Out::NEW));
                if !float && matches!(op, "Sum" | "Mean") {
                    assert!(
                        matches!(&got, Err(Error::InvalidInput { message, .. }) if message.contains("takes the float types")),
                        "{op} {dtype}: {got:?}"
                    );
                    continue;
                }
                let got = got.unwrap().to_host_blocking().unwrap();
                let want = cpu(op, inputs);
                let ok = if op == "Mean" && dtype == DType::F32 {
                    // The division by the count: within 1e-6 relative (WGSL's f32 division is
                    // not promised to be correctly rounded); sums and Max/Min are exact.
                    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
                    got.shape == want.shape
                        && g.iter()
                            .zip(&w)
                            .all(|(a, b)| (a - b).abs() <= 1e-6 * b.abs().max(1e-30))
                } else {
                    same(dtype, &got, &want)
                };
                assert!(ok, "{op} {dtype} with {n} inputs: {got:?} vs {want:?}");
                checked += 1;
            }
        }
    }
    // Max and Min on 5 dtypes, Sum and Mean on 2, each with 1 to 4 inputs.
    assert_eq!(checked, 2 * 5 * 4 + 2 * 2 * 4);
    // As graph nodes: Max of three inputs, Sum of one, Mean of two (i64 Sum refused).
    let x = |seed| variadic_input(DType::F64, &[2, 3], seed);
    for (op, names) in [
        ("Max", &["a", "b", "c"][..]),
        ("Sum", &["a"][..]),
        ("Mean", &["a", "b"][..]),
    ] {
        let inputs: Vec<(&str, HostTensor)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, x(i as u64)))
            .collect();
        let (got, want) = both(Node::new(op, "v").inputs(names.to_vec()), inputs).unwrap();
        assert!(same(DType::F64, &got, &want), "{op}: {got:?} vs {want:?}");
    }
    // A mean of scalars is a scalar: the count divides without broadcasting it to [1].
    let scalar = |v: f32| HostTensor::from_vec(vec![], &[v]).unwrap();
    let (got, want) = both(
        Node::new("Mean", "m").inputs(["a", "b", "c"]),
        vec![("a", scalar(1.0)), ("b", scalar(2.0)), ("c", scalar(6.0))],
    )
    .unwrap();
    assert_eq!(got, scalar(3.0));
    assert_eq!(want, scalar(3.0));
    let e = both(
        Node::new("Sum", "s").inputs(["a", "b"]),
        vec![
            ("a", variadic_input(DType::I64, &[2], 1)),
            ("b", variadic_input(DType::I64, &[2], 2)),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("Sum: data_0 is i64"), "{e}");
    // Inputs of different dtypes are refused, naming the input.
    let a = upload(&values_for(DType::F32, &[2], 1, false));
    let b = upload(&values_for(DType::I32, &[2], 2, false));
    match ctx().run(|rec| rec.variadic_to("Max", &[a.clone(), a, b], wgpu_ops::Out::NEW)) {
        Err(Error::InvalidInput {
            op: "Max", input, ..
        }) => assert_eq!(input, "data_2"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn cast_between_32_and_64_bit_types() {
    // Every pair among f32 i32 u32 f64 i64 u64 (64-bit ones through the adapter's features, and
    // on the emulation without them) on edge values, bit for bit against Rust's `as` in the
    // CPU interpreter: integers wrap or
    // extend, floats to integers truncate and saturate with NaN as 0, integers to floats round
    // to nearest.
    let types = [
        DType::F32,
        DType::I32,
        DType::U32,
        DType::F64,
        DType::I64,
        DType::U64,
    ];
    let sources = |dtype: DType| -> HostTensor {
        match dtype {
            DType::F32 => HostTensor::from_vec(
                vec![14],
                &[
                    0.0f32,
                    -0.0,
                    1.9,
                    -1.9,
                    2147483520.0,
                    2147483648.0,
                    -2147483904.0,
                    4294967296.0,
                    9.3e18,
                    -9.3e18,
                    1.9e19,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    f32::NAN,
                ],
            ),
            DType::F64 => HostTensor::from_vec(
                vec![14],
                &[
                    0.0f64,
                    -0.5,
                    1.9,
                    -1.9,
                    2147483647.5,
                    4294967295.9,
                    -2147483649.0,
                    9223372036854774784.0,
                    9223372036854775808.0,
                    -9.3e18,
                    1.9e19,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::NAN,
                ],
            ),
            DType::I32 => HostTensor::from_vec(vec![6], &[0, -1, 1, i32::MIN, i32::MAX, 16777217]),
            DType::U32 => HostTensor::from_vec(vec![6], &[0, 1, u32::MAX, 1 << 31, 16777217, 7]),
            DType::I64 => HostTensor::from_vec(
                vec![7],
                &[
                    0,
                    -1,
                    i64::MIN,
                    i64::MAX,
                    1 << 40,
                    -(1 << 32) - 5,
                    9007199254740993,
                ],
            ),
            _ => HostTensor::from_vec(
                vec![6],
                &[0u64, 1, u64::MAX, 1 << 63, (1 << 32) + 3, 9007199254740993],
            ),
        }
        .unwrap()
    };
    // Without the 64-bit features (as in browsers), every pair runs on the 64-bit emulation:
    // the same bits.
    let plain = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    })
    .unwrap();
    for from in types {
        for to in types {
            let x = sources(from);
            let (got, want) = both(
                Node::new("Cast", "c")
                    .inputs(["x"])
                    .attr("to", Attr::String(to.name().into())),
                vec![("x", x.clone())],
            )
            .unwrap();
            assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape));
            assert_eq!(nan_canonical(&got), nan_canonical(&want), "{from} -> {to}");
            let x = wgpu_ops::Tensor::from_host(&plain, &x).unwrap();
            let emulated = plain
                .run(|rec| rec.cast(&x, to))
                .and_then(|t| t.to_host_blocking())
                .unwrap_or_else(|e| panic!("{from} -> {to} emulated: {e}"));
            assert_eq!(
                nan_canonical(&emulated),
                nan_canonical(&want),
                "{from} -> {to}, emulated"
            );
        }
    }
}

#[test]
fn casts_that_change_the_element_size_run_in_windows() {
    // 128 bytes bound at a time: the 4-byte input and the 8-byte output (and the other way)
    // are cut into windows of their own element sizes.
    let small = small_binding_context(128);
    let cases = [
        (variadic_input(DType::I32, &[3, 37], 5), DType::I64),
        (variadic_input(DType::I64, &[101], 6), DType::I32),
        (variadic_input(DType::F64, &[5, 19], 7), DType::F32),
        (values_for(DType::F32, &[77], 8, false), DType::U64),
    ];
    for (x, to) in cases {
        let t = wgpu_ops::Tensor::from_host(&small, &x).unwrap();
        let got = small
            .run(|rec| rec.cast(&t, to))
            .unwrap()
            .to_host_blocking()
            .unwrap();
        let g = Graph::new()
            .input(
                "x",
                x.dtype,
                &x.shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
            )
            .node(
                Node::new("Cast", "c")
                    .inputs(["x"])
                    .outputs(["y"])
                    .attr("to", Attr::String(to.name().into())),
            )
            .output("y");
        let want = run_graph(&g, &[("x".into(), x.clone())], &Default::default())
            .unwrap()
            .remove(0);
        assert_eq!(got, want, "{} -> {to}", x.dtype);
    }
}

#[test]
fn pow_with_an_exponent_of_another_type() {
    // An f32 base with integer and f64 exponents (ONNX Pow-15's T1), against the interpreter,
    // which converts the exponent likewise; broadcast exponent of shape [3].
    let base = HostTensor::from_vec(vec![2, 3], &[2.0f32, -3.0, 0.5, 0.0, -1.5, 10.0]).unwrap();
    let exponents = [
        HostTensor::from_vec(vec![3], &[2i32, -1, 3]).unwrap(),
        HostTensor::from_vec(vec![3], &[0i64, 5, -2]).unwrap(),
        HostTensor::from_vec(vec![3], &[1u32, 2, 4]).unwrap(),
        HostTensor::from_vec(vec![3], &[0.5f64, 2.0, -1.0]).unwrap(),
    ];
    for e in exponents {
        let dtype = e.dtype;
        let (got, want) = both(
            Node::new("Pow", "p").inputs(["x", "e"]),
            vec![("x", base.clone()), ("e", e)],
        )
        .unwrap();
        close(&got, &want, &format!("Pow f32 ^ {dtype}"));
    }
}

/// Sums longer than one invocation's loop may run (lavapipe stops loops after 65 535
/// iterations) go to a kernel that splits them: exact on integers, on every kernel set.
#[test]
fn matmul_with_a_long_inner_dimension() {
    for (sa, sb) in [
        (&[16usize, 140_000][..], &[140_000usize, 2][..]),
        (&[2, 300_000], &[300_000, 3]),
    ] {
        let a = values_for(DType::I32, sa, 1, false);
        let b = values_for(DType::I32, sb, 2, false);
        let (got, want) = both(
            Node::new("MatMul", "mm").inputs(["a", "b"]),
            vec![("a", a), ("b", b)],
        )
        .unwrap();
        assert!(got == want, "MatMul {sa:?} x {sb:?}");
    }
}

/// Results whose relative precision GPUs lose with the obvious formulas (found on an H100):
/// Softplus and Mish in the negative tail (log of a rounded 1 + e^x), Tanh (NVIDIA's built-in
/// is good to about 11 bits), f32 division by a divisor beyond 2^126 (the reciprocal is
/// subnormal and flushed: Softsign of f32::MAX gave 0), and NaN through f64 Min, Max and
/// Relu (NVIDIA's driver folds the `!(a == a)` test away). Tolerances are relative only.
#[test]
fn activations_keep_relative_precision_in_their_tails() {
    let tails = [-30.0, -20.0, -15.0, -12.0, -10.0, -8.0, -3.0, 8.0, 20.0];
    let tanh_args = [
        1e-3, 0.1, 0.3, 0.49, 0.51, 0.7, 1.0, 2.0, 5.0, 9.0, -0.3, -2.0,
    ];
    let big = [f64::from(f32::MAX), -f64::from(f32::MAX), 1e38, -3e37, 2.0];
    let cases: [(&str, &[f64]); 4] = [
        ("Softplus", &tails),
        ("Mish", &tails),
        ("Tanh", &tanh_args),
        ("Softsign", &big),
    ];
    for dtype in [DType::F32, DType::F64] {
        let rtol = if dtype == DType::F32 { 4e-6 } else { 1e-13 };
        for (op, values) in cases {
            let x = cpu_cast(
                &HostTensor::from_vec(vec![values.len()], values).unwrap(),
                dtype,
            );
            let (got, want) = both(Node::new(op, "a").inputs(["x"]), vec![("x", x)]).unwrap();
            assert_close(&got, &want, rtol, 0.0, &format!("{op} {dtype}"));
        }
        let nan = cpu_cast(
            &HostTensor::from_vec(vec![3], &[f64::NAN, 1.0, -1.0]).unwrap(),
            dtype,
        );
        for op in ["HardSigmoid", "Softplus", "Mish", "Relu", "Tanh", "Exp"] {
            let (got, _) =
                both(Node::new(op, "a").inputs(["x"]), vec![("x", nan.clone())]).unwrap();
            let got = wgpu_ops::reference::cast_host(&got, DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            assert!(got[0].is_nan(), "{op} {dtype} of NaN: {}", got[0]);
        }
        for op in ["Max", "Min"] {
            let one = cpu_cast(
                &HostTensor::from_vec(vec![3], &[1.0, f64::NAN, 0.0]).unwrap(),
                dtype,
            );
            let (got, _) = both(
                Node::new(op, "a").inputs(["x", "z"]),
                vec![("x", nan.clone()), ("z", one)],
            )
            .unwrap();
            let got = wgpu_ops::reference::cast_host(&got, DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            assert!(
                got[0].is_nan() && got[1].is_nan(),
                "{op} {dtype} with NaN: {got:?}"
            );
        }
    }
}

/// The activations defined by function bodies (Elu ... SwiGLU) on f32, f16, bf16 and f64
/// against the reference (f64 math, one rounding): within 1e-5 relative on f32 (GPU exp, tanh
/// and erf), 1e-12 on f64, one rounding of f16 and bf16 (they compute in f32 and round
/// once); each one dispatch. Integers and mismatched inputs are one error naming the input.
#[test]
fn activations_match_the_reference() {
    use wgpu_ops::ops::activation::ACTIVATIONS;
    let ctx = own_ctx();
    let v: Vec<f64> = (0..60).map(|i| f64::from(i) * 0.25 - 7.0).collect();
    let x64 = HostTensor::from_vec(vec![6, 10], &v).unwrap();
    let slope = HostTensor::from_vec(
        vec![10],
        &(0..10)
            .map(|i| f64::from(i) * 0.1 - 0.3)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        let (rtol, atol) = match dtype {
            DType::F32 => (1e-5, 1e-6),
            DType::F64 => (1e-12, 1e-14),
            DType::F16 => (1e-3, 1e-4),
            _ => (8e-3, 1e-3),
        };
        let x = cpu_cast(&x64, dtype);
        for op in ACTIVATIONS {
            let mut node = Node::new(op, "a");
            let mut inputs = vec![("x".to_string(), x.clone())];
            let mut names = vec!["x"];
            match op {
                "PRelu" => {
                    inputs.push(("s".to_string(), cpu_cast(&slope, dtype)));
                    names.push("s");
                }
                "SwiGLU" => {
                    inputs.push(("s".to_string(), cpu_cast(&x64, dtype)));
                    names.push("s");
                }
                "Gelu" => node = node.attr("approximate", Attr::String("tanh".into())),
                "Elu" | "Celu" | "Swish" => node = node.attr("alpha", Attr::Float(0.75)),
                _ => {}
            }
            let mut g = Graph::new();
            for (name, t) in &inputs {
                let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
                g = g.input(name.clone(), dtype, &shape);
            }
            let g = g.node(node.inputs(names).outputs(["y"])).output("y");
            let before = ctx.stats().dispatches;
            let got = Session::new(&ctx, g.clone())
                .unwrap()
                .run_blocking(inputs.clone())
                .unwrap_or_else(|e| panic!("{op} {dtype}: {e}"));
            let dispatches = ctx.stats().dispatches - before;
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            assert_close(&got[0].1, &want[0], rtol, atol, &format!("{op} {dtype}"));
            assert_eq!(dispatches, 1, "{op} {dtype}");
        }
    }
    let refused = |op: &str, inputs: Vec<(&str, HostTensor)>| {
        let mut g = Graph::new();
        for (name, t) in &inputs {
            let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
            g = g.input(*name, t.dtype, &shape);
        }
        let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
        let g = g
            .node(Node::new(op, "a").inputs(names).outputs(["y"]))
            .output("y");
        let given = inputs
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect();
        Session::new(&ctx, g)
            .unwrap()
            .run_blocking(given)
            .unwrap_err()
            .to_string()
    };
    let ints = HostTensor::from_vec(vec![3], &[1i32, -2, 3]).unwrap();
    let e = refused("Elu", vec![("x", ints)]);
    assert!(e.contains("Elu") && e.contains("X is i32"), "{e}");
    let a = HostTensor::from_vec(vec![2, 3], &[1.0f32; 6]).unwrap();
    let b = HostTensor::from_vec(vec![3], &[1.0f32; 3]).unwrap();
    let e = refused("SwiGLU", vec![("a", a.clone()), ("b", b)]);
    assert!(
        e.contains("SwiGLU") && e.contains("the shapes must be equal"),
        "{e}"
    );
    // A slope of more axes widens the output (see every_dtype's PRelu test); one that does
    // not broadcast with X is refused.
    let mismatched = HostTensor::from_vec(vec![4, 2], &[1.0f32; 8]).unwrap();
    let e = refused("PRelu", vec![("x", a), ("s", mismatched)]);
    assert!(
        e.contains("PRelu") && e.contains("slope") && e.contains("broadcast together"),
        "{e}"
    );
}

/// BatchNormalization in inference mode, one dispatch, on f32, f16 and f64 X of rank 2 and 4
/// with f32 statistics (T2 may differ from T), against the formula computed on the host in
/// f64 (f16 within its rounding); and in training mode, the batch's own statistics and the
/// running ones. X of rank 1, statistics of the wrong length, and running outputs asked for
/// in inference mode are errors naming the op and input.
#[test]
fn batch_normalization_in_inference_and_training() {
    let ctx = own_ctx();
    let floats = |seed: u64, n: usize, lo: f32, hi: f32| -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect()
    };
    let bn = |training: bool| {
        let mut n = Node::new("BatchNormalization", "bn")
            .inputs(["x", "scale", "b", "mean", "var"])
            .attr("epsilon", Attr::Float(1e-3));
        if training {
            n = n
                .outputs(["y", "running_mean", "running_var"])
                .attr("training_mode", Attr::Int(1))
                .attr("momentum", Attr::Float(0.8));
        } else {
            n = n.outputs(["y"]);
        }
        n
    };
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-3), (DType::F64, 1e-12)] {
        for shape in [vec![5usize, 3], vec![2, 3, 4, 5]] {
            let channels = 3;
            let inner: usize = shape[2..].iter().product();
            let xs = floats(1, shape.iter().product(), -2.0, 2.0);
            let stats: Vec<Vec<f32>> = [
                (2, -1.0, 1.0),
                (3, -1.0, 1.0),
                (4, -0.5, 0.5),
                (5, 0.1, 2.0),
            ]
            .iter()
            .map(|&(seed, lo, hi)| floats(seed, channels, lo, hi))
            .collect();
            let x = wgpu_ops::reference::cast_host(
                &HostTensor::from_vec(shape.clone(), &xs).unwrap(),
                dtype,
            )
            .unwrap();
            let xs: Vec<f64> = wgpu_ops::reference::cast_host(&x, DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let mut inputs = vec![("x".to_string(), x.clone())];
            for (name, v) in ["scale", "b", "mean", "var"].iter().zip(&stats) {
                inputs.push((
                    name.to_string(),
                    HostTensor::from_vec(vec![channels], v).unwrap(),
                ));
            }
            let s = |k: usize, c: usize| f64::from(stats[k][c]);
            let channel = |i: usize| (i / inner) % channels;
            for training in [false, true] {
                let mut g = Graph::new().input(
                    "x",
                    dtype,
                    &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                );
                for name in ["scale", "b", "mean", "var"] {
                    g = g.input(name, DType::F32, &[Some(channels)]);
                }
                g = g.node(bn(training)).output("y");
                if training {
                    g = g.output("running_mean").output("running_var");
                }
                let before = ctx.stats().dispatches;
                let got = Session::new(&ctx, g)
                    .unwrap()
                    .run_blocking(inputs.clone())
                    .unwrap();
                if !training {
                    assert_eq!(ctx.stats().dispatches - before, 1, "{dtype} {shape:?}");
                }
                // The statistics used: given, or the batch's (biased variance).
                let count = (xs.len() / channels) as f64;
                let (mut bm, mut bv) = (vec![0f64; channels], vec![0f64; channels]);
                for (i, &v) in xs.iter().enumerate() {
                    bm[channel(i)] += v / count;
                }
                for (i, &v) in xs.iter().enumerate() {
                    bv[channel(i)] += (v - bm[channel(i)]).powi(2) / count;
                }
                let (m, var): (Vec<f64>, Vec<f64>) = if training {
                    (bm.clone(), bv.clone())
                } else {
                    (
                        (0..channels).map(|c| s(2, c)).collect(),
                        (0..channels).map(|c| s(3, c)).collect(),
                    )
                };
                let want: Vec<f64> = xs
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let c = channel(i);
                        (v - m[c]) / (var[c] + 1e-3).sqrt() * s(0, c) + s(1, c)
                    })
                    .collect();
                let want = wgpu_ops::reference::cast_host(
                    &HostTensor::from_vec(shape.clone(), &want).unwrap(),
                    dtype,
                )
                .unwrap();
                let what = format!("{dtype} {shape:?} training {training}");
                assert_close(&got[0].1, &want, tol, tol, &what);
                if training {
                    for (given, batch) in [(2usize, &bm), (3, &bv)] {
                        let run: Vec<f32> = (0..channels)
                            .map(|c| (s(given, c) * 0.8 + batch[c] * 0.2) as f32)
                            .collect();
                        let run = HostTensor::from_vec(vec![channels], &run).unwrap();
                        assert_close(&got[given - 1].1, &run, 1e-4, 1e-5, &what);
                    }
                }
            }
        }
    }
    // Errors: one line naming the op and the input.
    let x = HostTensor::from_vec(vec![4], &[1f32, 2., 3., 4.]).unwrap();
    let c3 = HostTensor::from_vec(vec![3], &[1f32, 1., 1.]).unwrap();
    let c2 = HostTensor::from_vec(vec![2], &[1f32, 1.]).unwrap();
    let x2 = HostTensor::from_vec(vec![2, 3], &[1f32; 6]).unwrap();
    for (x, stat, training, outputs, want) in [
        (&x, &c3, false, 1, "X"),
        (&x2, &c2, false, 1, "scale"),
        (&x2, &c3, false, 2, "running_mean"),
    ] {
        let mut n = bn(training);
        if outputs == 2 {
            n = n.outputs(["y", "running_mean"]);
        }
        let mut g = Graph::new().input(
            "x",
            DType::F32,
            &x.shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
        );
        for name in ["scale", "b", "mean", "var"] {
            g = g.input(name, DType::F32, &[Some(stat.shape[0])]);
        }
        let g = g.node(n).output("y");
        let mut inputs = vec![("x".to_string(), x.clone())];
        for name in ["scale", "b", "mean", "var"] {
            inputs.push((name.to_string(), stat.clone()));
        }
        let e = Session::new(&ctx, g)
            .unwrap()
            .run_blocking(inputs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("BatchNormalization") && e.contains(want), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
