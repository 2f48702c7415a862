//! Det on the GPU against the CPU interpreter's elimination in f64: random matrices of sides
//! 0 to 128 (the largest) under batch axes in f32 (onnxruntime's default float tolerances where the
//! matrices are small, a bound that grows with the side beyond), f64 to 1e-12, f16 and bf16
//! to one unit of their last place; singular and permutation matrices exactly; NaN; the
//! refusals.

mod common;
use common::*;
use wgpu_ops::reference::det::determinant;
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, Graph, HostTensor, Node, Session};

fn det_graph(x: &HostTensor) -> Graph {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    Graph::new()
        .input("x", x.dtype, &shape)
        .node(Node::new("Det", "det").inputs(["x"]).outputs(["y"]))
        .output("y")
}

fn gpu_det(ctx: &wgpu_ops::Context, x: &HostTensor) -> wgpu_ops::Result<HostTensor> {
    Ok(Session::new(ctx, det_graph(x))?
        .run_blocking(vec![("x".into(), x.clone())])?
        .remove(0)
        .1)
}

fn cpu_det(x: &HostTensor) -> HostTensor {
    run_graph(
        &det_graph(x),
        &[("x".into(), x.clone())],
        &Default::default(),
    )
    .unwrap()
    .remove(0)
}

/// Random matrices of side `n` (one per batch item) in [-1, 1] times `noise`, with
/// `dominance` added to their diagonals (to keep large ones' determinants in f32's range).
fn matrices(seed: u64, batch: &[usize], n: usize, dominance: f64, noise: f64) -> Vec<f64> {
    let mut rng = Rng(seed);
    let count: usize = batch.iter().product();
    let mut v = Vec::with_capacity(count * n * n);
    for _ in 0..count {
        for r in 0..n {
            for c in 0..n {
                let x = (rng.below(1 << 20) as f64 / (1 << 19) as f64 - 1.0) * noise;
                v.push(if r == c { x + dominance } else { x });
            }
        }
    }
    v
}

/// The contexts that compute f64: natively where the adapter has `SHADER_F64`, and on the
/// emulation without it (with and without `SHADER_INT64`).
fn f64_contexts() -> Vec<&'static wgpu_ops::Context> {
    let native = ctx().features().contains(wgpu::Features::SHADER_F64);
    let mut all = if native { vec![ctx()] } else { Vec::new() };
    all.extend([ctx_emulating_64_bit(), ctx_without_f64()]);
    all
}

#[test]
fn determinants_match_the_elimination_in_f64() {
    let sizes = [
        (1, 0.0, 1.0),
        (2, 0.0, 1.0),
        (3, 0.0, 1.0),
        (5, 0.0, 1.0),
        (8, 0.0, 1.0),
        (17, 2.0, 1.0),
        (64, 1.0, 0.25),
        (128, 1.0, 0.125),
    ];
    for (n, dominance, noise) in sizes {
        let batch = [2, 3];
        let values = matrices(n as u64, &batch, n, dominance, noise);
        let mut shape = batch.to_vec();
        shape.extend([n, n]);
        let exact: Vec<f64> = values
            .chunks(n * n)
            .map(|m| determinant(&mut m.to_vec(), n))
            .collect();
        // f32: onnxruntime's default tolerances (rtol 1e-4, atol 1e-5) up to side 8; beyond,
        // an elimination's rounding grows with the side: n * 2^-20 relative.
        let x = HostTensor::from_vec(
            shape.clone(),
            &values.iter().map(|&v| v as f32).collect::<Vec<_>>(),
        )
        .unwrap();
        let want = as_f64(&cpu_det(&x));
        assert!(
            want.iter().all(|w| w.is_finite() && *w != 0.0),
            "n {n}: {want:?}"
        );
        let rtol = if n <= 8 {
            1e-4
        } else {
            n as f64 / f64::from(1u32 << 20)
        };
        for ctx in [ctx(), ctx_emulating_64_bit()] {
            let got = gpu_det(ctx, &x).unwrap();
            assert_eq!(got.shape, batch);
            for (i, (&g, &w)) in as_f64(&got).iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 + rtol * w.abs(),
                    "f32 n {n} matrix {i}: {g} vs {w}"
                );
            }
        }
        // f64, natively where the adapter has it and on the emulation (without SHADER_F64).
        let x = HostTensor::from_vec(shape.clone(), &values).unwrap();
        for ctx in f64_contexts() {
            let got = as_f64(&gpu_det(ctx, &x).unwrap());
            for (i, (&g, &w)) in got.iter().zip(&exact).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs().max(1e-300),
                    "f64 n {n} matrix {i}: {g} vs {w}"
                );
            }
        }
        // f16 and bf16: computed in f32, rounded once; the interpreter rounds the f64 value.
        if n <= 5 {
            for dtype in [DType::F16, DType::BF16] {
                let x = wgpu_ops::reference::cast_host(
                    &HostTensor::from_vec(shape.clone(), &values).unwrap(),
                    dtype,
                )
                .unwrap();
                let got = as_f64(&gpu_det(ctx(), &x).unwrap());
                let want = as_f64(&cpu_det(&x));
                let ulp = if dtype == DType::F16 {
                    1.0 / 1024.0
                } else {
                    1.0 / 128.0
                };
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= ulp * w.abs().max(1e-3),
                        "{dtype} n {n} matrix {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn singular_permuted_empty_and_nan_matrices() {
    let nan = f32::NAN;
    let cases: [(&[f32], f32); 5] = [
        // Equal rows, a zero column: exactly 0.
        (&[1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0], 0.0),
        (&[0.0, 2.0, 3.0, 0.0, 5.0, 6.0, 0.0, 8.0, 9.0], 0.0),
        // Permutations: one swap -1, a cycle +1.
        (&[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0], -1.0),
        (&[0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0], 1.0),
        (&[1.0, nan, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], nan),
    ];
    for (values, want) in cases {
        let x = HostTensor::from_vec(vec![3, 3], values).unwrap();
        let got = gpu_det(ctx(), &x).unwrap().to_vec::<f32>().unwrap()[0];
        assert!(
            got == want || (got.is_nan() && want.is_nan()),
            "{values:?}: {got} vs {want}"
        );
        // The same in f64, natively and emulated.
        let wide: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        let x = HostTensor::from_vec(vec![3, 3], &wide).unwrap();
        for ctx in f64_contexts() {
            let got = gpu_det(ctx, &x).unwrap().to_vec::<f64>().unwrap()[0];
            assert!(
                got == f64::from(want) || (got.is_nan() && want.is_nan()),
                "f64 {values:?}: {got} vs {want}"
            );
        }
    }
    // Side 0: determinant 1, one per matrix; no matrices: an empty result.
    let x = HostTensor::from_vec(vec![2, 0, 0], &[] as &[f32]).unwrap();
    assert_eq!(
        gpu_det(ctx(), &x).unwrap().to_vec::<f32>().unwrap(),
        [1.0, 1.0]
    );
    let x = HostTensor::from_vec(vec![0, 2, 2], &[] as &[f32]).unwrap();
    assert_eq!(gpu_det(ctx(), &x).unwrap().shape, [0]);
}

#[test]
fn det_refuses_other_shapes_and_dtypes_in_one_line() {
    for (x, why) in [
        (
            HostTensor::from_vec(vec![2, 3], &[0f32; 6]).unwrap(),
            "Det takes square matrices",
        ),
        (
            HostTensor::from_vec(vec![3], &[0f32; 3]).unwrap(),
            "Det takes square matrices",
        ),
        (
            HostTensor::from_vec(vec![2, 2], &[0i32; 4]).unwrap(),
            "X is i32; Det takes f32, f16, bf16 or f64",
        ),
        (
            HostTensor::from_vec(vec![129, 129], &vec![0f32; 129 * 129]).unwrap(),
            "side",
        ),
    ] {
        let e = gpu_det(ctx(), &x).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("Det"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
