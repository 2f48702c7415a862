//! The random ops on the GPU: their values bit for bit against the generator on the CPU
//! (`wgpu_ops::reference::random`, from the Philox paper's known answers) where the arithmetic
//! is exact (uniforms in [0, 1), Bernoulli), to a tolerance where it is not (normals: f32's
//! log and the series for cos and sin, 1e-5 relative; f64 1e-12); their distributions by
//! statistics of a million draws (deterministic, being seeded); a new draw at every
//! execution (Scan iterations, session runs) and the same numbers for the same seed; the
//! refusals.

mod common;
use common::*;
use wgpu_ops::graph::Attr;
use wgpu_ops::reference::random as cpu;
use wgpu_ops::{Context, DType, Graph, HostTensor, Node, Out, RandomStream, Session};

fn uniform(
    ctx: &Context,
    stream: &RandomStream,
    dtype: DType,
    n: usize,
    lo: f32,
    hi: f32,
) -> HostTensor {
    let t = ctx
        .run(|rec| rec.random_uniform_to(stream, dtype, &[n], lo, hi, Out::NEW))
        .unwrap();
    t.to_host_blocking().unwrap()
}

fn has_f64(ctx: &Context) -> bool {
    ctx.features()
        .contains(wgpu_ops::gpu::Features::SHADER_F64 | wgpu_ops::gpu::Features::SHADER_INT64)
}

/// The contexts that draw f64: natively where the adapter has the features, and on the
/// emulation without `SHADER_F64` (with and without `SHADER_INT64`).
fn f64_contexts() -> Vec<&'static Context> {
    let mut all = if has_f64(ctx()) {
        vec![ctx()]
    } else {
        Vec::new()
    };
    all.extend([ctx_emulating_64_bit(), ctx_without_f64()]);
    all
}

fn emulates_f64(ctx: &Context) -> bool {
    !ctx.features().contains(wgpu_ops::gpu::Features::SHADER_F64)
}

/// Kolmogorov-Smirnov distance of `v` from the distribution with CDF `cdf`.
fn ks_distance(mut v: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            let c = cdf(x);
            (c - i as f64 / n).abs().max((c - (i + 1) as f64 / n).abs())
        })
        .fold(0.0, f64::max)
}

/// The standard normal CDF (erf by Abramowitz and Stegun 7.1.26, 1.5e-7 absolute).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * z);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erf = 1.0 - poly * (-z * z).exp();
    0.5 * (1.0 + erf.copysign(x))
}

/// 1.95 / sqrt(n): the KS distance that a sample from the distribution exceeds with
/// probability 0.1%.
fn ks_bound(n: usize) -> f64 {
    1.95 / (n as f64).sqrt()
}

#[test]
fn uniform_draws_are_the_generators_bit_for_bit_and_each_draw_is_new() {
    for ctx in [ctx(), ctx_emulating_64_bit()] {
        let n = 1_000_003;
        let stream = RandomStream::new(ctx, 42).unwrap();
        for draw in 0..2 {
            let got = uniform(ctx, &stream, DType::F32, n, 0.0, 1.0)
                .to_vec::<f32>()
                .unwrap();
            let want = cpu::units_f32(42, draw, n);
            assert!(got == want, "draw {draw}: differs from the CPU generator");
        }
        // A new stream with the same seed starts again.
        let again = RandomStream::new(ctx, 42).unwrap();
        let got = uniform(ctx, &again, DType::F32, 5, 0.0, 1.0)
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(got, cpu::units_f32(42, 0, 5));
        let got = uniform(ctx, &again, DType::F32, n, -3.0, 5.0)
            .to_vec::<f32>()
            .unwrap();
        let units = cpu::units_f32(42, 1, n);
        for (g, u) in got.iter().zip(&units) {
            let want = -3.0 + 8.0 * u;
            assert!((g - want).abs() <= 8.0 * f32::EPSILON, "{g} vs {want}");
            assert!((-3.0..=5.0).contains(g));
        }
        let d = ks_distance(got.iter().map(|&x| f64::from(x)).collect(), |x| {
            ((x + 3.0) / 8.0).clamp(0.0, 1.0)
        });
        assert!(d < ks_bound(n), "KS distance {d}");
    }
    for ctx in f64_contexts() {
        let stream = RandomStream::new(ctx, u64::MAX - 7).unwrap();
        let got = uniform(ctx, &stream, DType::F64, 100_001, 0.0, 1.0)
            .to_vec::<f64>()
            .unwrap();
        let units = cpu::units_f64(u64::MAX - 7, 0, 100_001);
        assert!(got == units);
        // The emulation rounds `lo + (hi - lo) * u` step by step, as the CPU does (a driver
        // may fuse the native path's multiply and add).
        if emulates_f64(ctx) {
            let got = uniform(ctx, &stream, DType::F64, 100_001, -3.0, 5.0)
                .to_vec::<f64>()
                .unwrap();
            let units = cpu::units_f64(u64::MAX - 7, 1, 100_001);
            let want: Vec<f64> = units.iter().map(|u| -3.0 + 8.0 * u).collect();
            assert!(got == want);
        }
    }
}

#[test]
fn normal_draws_follow_the_generator_and_the_normal_law() {
    let n = 1 << 20;
    let stream = RandomStream::new(ctx(), 7).unwrap();
    let t = ctx()
        .run(|rec| rec.random_normal_to(&stream, DType::F32, &[n], 0.0, 1.0, Out::NEW))
        .unwrap();
    let got = t.to_host_blocking().unwrap().to_vec::<f32>().unwrap();
    let want = cpu::normals_f32(7, 0, n);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
    let v: Vec<f64> = got.iter().map(|&x| f64::from(x)).collect();
    let mean = v.iter().sum::<f64>() / n as f64;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
    // Standard errors: 0.001 for the mean, 0.0014 for the variance.
    assert!(
        mean.abs() < 0.005 && (var - 1.0).abs() < 0.007,
        "{mean} {var}"
    );
    let d = ks_distance(v, normal_cdf);
    assert!(d < ks_bound(n), "KS distance {d}");

    // Mean and scale, and 16-bit floats rounded from the f32 values.
    let stream = RandomStream::new(ctx(), 7).unwrap();
    let t = ctx()
        .run(|rec| rec.random_normal_to(&stream, DType::F16, &[4, 250], 10.0, 0.5, Out::NEW))
        .unwrap();
    let h = t.to_host_blocking().unwrap();
    assert_eq!((h.dtype, h.shape.clone()), (DType::F16, vec![4, 250]));
    let got = wgpu_ops::reference::cast_host(&h, DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    for (g, w) in got.iter().zip(&want) {
        let w = 10.0 + 0.5 * w;
        assert!((g - w).abs() <= 0.01, "{g} vs {w}");
    }

    for ctx in f64_contexts() {
        let stream = RandomStream::new(ctx, 3).unwrap();
        let t = ctx
            .run(|rec| rec.random_normal_to(&stream, DType::F64, &[100_001], 0.0, 1.0, Out::NEW))
            .unwrap();
        let got = t.to_host_blocking().unwrap().to_vec::<f64>().unwrap();
        let want = cpu::normals_f64(3, 0, 100_001);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{g} vs {w}");
        }
        assert!(ks_distance(got, normal_cdf) < ks_bound(100_001));
    }
}

#[test]
fn bernoulli_is_the_uniform_below_the_probability() {
    let n = 200_000;
    let p: Vec<f32> = (0..n)
        .map(|i| [0.0, 1.0, 0.25, 0.9, f32::NAN, -1.0, 2.0, 0.5][i % 8])
        .collect();
    let ph = HostTensor::from_vec(vec![n], &p).unwrap();
    for dtype in [DType::F32, DType::Bool, DType::I64, DType::F16] {
        let stream = RandomStream::new(ctx(), 11).unwrap();
        let t = ctx()
            .run(|rec| rec.bernoulli_to(&stream, &upload(&ph), dtype, Out::NEW))
            .unwrap();
        let got = wgpu_ops::reference::cast_host(&t.to_host_blocking().unwrap(), DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let units = cpu::units_f32(11, 0, n);
        for i in 0..n {
            let want = if units[i] < p[i] { 1.0 } else { 0.0 };
            assert_eq!(got[i], want, "{dtype} element {i}: p {}", p[i]);
        }
        // The frequencies (a sanity check of the CPU side too): 25 000 of each p.
        for (k, &q) in [0.25f64, 0.9, 0.5].iter().enumerate() {
            let at = [2, 3, 7][k];
            let ones = (at..n).step_by(8).filter(|&i| got[i] == 1.0).count() as f64;
            let sd = (25_000.0 * q * (1.0 - q)).sqrt();
            assert!((ones - 25_000.0 * q).abs() < 5.0 * sd, "p {q}: {ones}");
        }
    }
    // f64 probabilities draw f64 units (53 bits), natively and on the emulation.
    let wide: Vec<f64> = p.iter().map(|&q| f64::from(q)).collect();
    let ph = HostTensor::from_vec(vec![n], &wide).unwrap();
    let units = cpu::units_f64(11, 0, n);
    for ctx in f64_contexts() {
        let stream = RandomStream::new(ctx, 11).unwrap();
        let p = wgpu_ops::Tensor::from_host(ctx, &ph).unwrap();
        let t = ctx
            .run(|rec| rec.bernoulli_to(&stream, &p, DType::F64, Out::NEW))
            .unwrap();
        let got = t.to_host_blocking().unwrap().to_vec::<f64>().unwrap();
        for i in 0..n {
            let want = if units[i] < wide[i] { 1.0 } else { 0.0 };
            assert_eq!(got[i], want, "f64 element {i}: p {}", wide[i]);
        }
    }
}

#[test]
fn multinomial_samples_follow_the_softmax() {
    let logits: Vec<f32> = vec![
        0.0,
        1.0,
        2.0,
        f32::NEG_INFINITY,
        -1.0, //
        5.0,
        5.0,
        5.0,
        5.0,
        5.0,
    ];
    let samples = 100_000;
    let x = HostTensor::from_vec(vec![2, 5], &logits).unwrap();
    for dtype in [DType::I32, DType::I64] {
        let classes = multinomial(ctx(), &x, samples, dtype);
        follows_the_softmax(&logits, &classes, samples);
    }
    // f64 logits, natively and on the emulation: the same uniform draws against running sums
    // within an ulp or so of the native ones, hence the same classes (a uniform within ulps
    // of a boundary is a chance of about 1e-15 per sample).
    let wide: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
    let x = HostTensor::from_vec(vec![2, 5], &wide).unwrap();
    let mut native = None;
    for ctx in f64_contexts() {
        let classes = multinomial(ctx, &x, samples, DType::I64);
        follows_the_softmax(&logits, &classes, samples);
        if !emulates_f64(ctx) {
            native = Some(classes);
        } else if let Some(native) = &native {
            assert!(
                classes == *native,
                "f64 on the emulation drew other classes"
            );
        }
    }
}

/// `samples` classes per row of `x` drawn with seed 99, as i64.
fn multinomial(ctx: &Context, x: &HostTensor, samples: usize, dtype: DType) -> Vec<i64> {
    let stream = RandomStream::new(ctx, 99).unwrap();
    let x = wgpu_ops::Tensor::from_host(ctx, x).unwrap();
    let t = ctx
        .run(|rec| rec.multinomial_to(&stream, &x, samples, dtype, Out::NEW))
        .unwrap();
    let h = t.to_host_blocking().unwrap();
    assert_eq!((h.dtype, h.shape.clone()), (dtype, vec![2, samples]));
    wgpu_ops::reference::cast_host(&h, DType::I64)
        .unwrap()
        .to_vec::<i64>()
        .unwrap()
}

/// Pearson's chi-square of the classes drawn from each row of 5 `logits` against the row's
/// softmax, over the classes that can occur (at most 4 degrees of freedom: 0.1% of samples
/// exceed 18.5); no class of probability 0 drawn.
fn follows_the_softmax(logits: &[f32], classes: &[i64], samples: usize) {
    for (row, logits) in logits.chunks(5).enumerate() {
        let total: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        let mut counts = [0usize; 5];
        for &c in &classes[row * samples..(row + 1) * samples] {
            counts[usize::try_from(c).unwrap()] += 1;
        }
        let mut chi2 = 0.0;
        for (k, &l) in logits.iter().enumerate() {
            let expected = samples as f64 * f64::from(l).exp() / total;
            if expected == 0.0 {
                assert_eq!(
                    counts[k], 0,
                    "row {row}: a class of probability 0 was drawn"
                );
            } else {
                chi2 += (counts[k] as f64 - expected).powi(2) / expected;
            }
        }
        assert!(
            chi2 < 18.5,
            "row {row}: chi-square {chi2}, counts {counts:?}"
        );
    }
}

/// A Scan whose body draws `[n]` uniforms (RandomUniformLike of its scan input, and a
/// RandomNormal) at each of `seq` steps.
fn scan_drawing(seq: usize, n: usize) -> Graph {
    let body = Graph::new()
        .input("s", DType::F32, &[Some(1)])
        .input("x_t", DType::F32, &[Some(n)])
        .node(
            Node::new("RandomUniformLike", "u")
                .inputs(["x_t"])
                .outputs(["u"])
                .attr("seed", Attr::Float(5.0)),
        )
        .node(
            Node::new("RandomNormal", "z")
                .outputs(["z"])
                .attr("seed", Attr::Float(6.0))
                .attr("shape", Attr::Ints(vec![n as i64])),
        )
        .node(
            Node::new("Add", "next")
                .inputs(["s", "x_t"])
                .outputs(["s_next"]),
        )
        .node(
            Node::new("ReduceSum", "r")
                .inputs(["s_next"])
                .outputs(["s_out"])
                .attr("keepdims", Attr::Int(1)),
        )
        .output("s_out")
        .output("u")
        .output("z");
    Graph::new()
        .input("s0", DType::F32, &[Some(1)])
        .input("x", DType::F32, &[Some(seq), Some(n)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "x"])
                .outputs(["s", "us", "zs"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("us")
        .output("zs")
}

#[test]
fn scan_bodies_and_session_runs_draw_anew_each_time() {
    let (seq, n) = (9, 6);
    let inputs = || {
        vec![
            (
                "s0".to_string(),
                HostTensor::from_vec(vec![1], &[0.0f32]).unwrap(),
            ),
            (
                "x".to_string(),
                HostTensor::from_vec(vec![seq, n], &vec![1.0f32; seq * n]).unwrap(),
            ),
        ]
    };
    let session = Session::new(ctx(), scan_drawing(seq, n)).unwrap();
    for run in 0..2u64 {
        let out = session.run_blocking(inputs()).unwrap();
        let us = out[0].1.to_vec::<f32>().unwrap();
        let zs = out[1].1.to_vec::<f32>().unwrap();
        for t in 0..seq as u64 {
            // Iteration t of run r is the stream's draw r * seq + t.
            let draw = run * seq as u64 + t;
            let row = t as usize * n..(t as usize + 1) * n;
            assert_eq!(
                us[row.clone()],
                cpu::units_f32(5, draw, n)[..],
                "run {run} step {t}"
            );
            for (g, w) in zs[row].iter().zip(cpu::normals_f32(6, draw, n)) {
                assert!((f64::from(*g) - w).abs() <= 1e-5 * (1.0 + w.abs()));
            }
        }
    }
    // A new session starts the seeded streams again.
    let fresh = Session::new(ctx(), scan_drawing(seq, n)).unwrap();
    let out = fresh.run_blocking(inputs()).unwrap();
    assert_eq!(
        out[0].1.to_vec::<f32>().unwrap()[..n],
        cpu::units_f32(5, 0, n)[..]
    );
}

#[test]
fn unseeded_nodes_draw_differently_in_every_session() {
    let g = || {
        Graph::new()
            .node(
                Node::new("RandomUniform", "u")
                    .outputs(["u"])
                    .attr("shape", Attr::Ints(vec![64])),
            )
            .node(
                Node::new("RandomUniform", "v")
                    .outputs(["v"])
                    .attr("shape", Attr::Ints(vec![64])),
            )
            .output("u")
            .output("v")
    };
    let a = Session::new(ctx(), g())
        .unwrap()
        .run_blocking(vec![])
        .unwrap();
    let b = Session::new(ctx(), g())
        .unwrap()
        .run_blocking(vec![])
        .unwrap();
    assert_ne!(a[0].1.data, b[0].1.data);
    assert_ne!(
        a[0].1.data, a[1].1.data,
        "two unseeded nodes share a stream"
    );
}

#[test]
fn training_dropout_keeps_and_scales_at_the_ratio() {
    let n = 100_000;
    let x = random_tensor(4, DType::F32, &[n]);
    let xs = x.to_vec::<f32>().unwrap();
    let g = Graph::new()
        .input("x", DType::F32, &[Some(n)])
        .constant("ratio", HostTensor::from_vec(vec![], &[0.75f32]).unwrap())
        .constant(
            "training",
            HostTensor::from_bytes(DType::Bool, vec![], vec![1]).unwrap(),
        )
        .node(
            Node::new("Dropout", "d")
                .inputs(["x", "ratio", "training"])
                .outputs(["y", "mask"])
                .attr("seed", Attr::Float(1.0)),
        )
        .output("y")
        .output("mask");
    let out = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("x".into(), x.clone())])
        .unwrap();
    let y = out[0].1.to_vec::<f32>().unwrap();
    assert_eq!(out[1].1.dtype, DType::Bool);
    let mask = &out[1].1.data;
    let units = cpu::units_f32(1, 0, n);
    let mut kept = 0usize;
    for i in 0..n {
        let keep = units[i] < 0.25;
        assert_eq!(mask[i] != 0, keep, "mask {i}");
        let want = if keep { xs[i] * 4.0 } else { 0.0 };
        assert!(
            y[i] == want || y[i].is_nan() && want.is_nan(),
            "element {i}: {} vs {want}",
            y[i]
        );
        kept += usize::from(keep);
    }
    let sd = (n as f64 * 0.25 * 0.75).sqrt();
    assert!((kept as f64 - n as f64 * 0.25).abs() < 5.0 * sd, "{kept}");
}

type Inputs = Vec<(String, HostTensor)>;

fn run_error(g: Graph, inputs: Inputs) -> String {
    let e = Session::new(ctx(), g)
        .and_then(|s| s.run_blocking(inputs))
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'));
    e
}

#[test]
fn random_ops_refuse_bad_attributes_in_one_line() {
    let one = |op: &str, attrs: Vec<(&str, Attr)>, inputs: &[&str]| {
        let mut node = Node::new(op, "n")
            .inputs(inputs.iter().copied())
            .outputs(["y"]);
        for (k, v) in attrs {
            node = node.attr(k, v);
        }
        let mut g = Graph::new();
        if !inputs.is_empty() {
            g = g.input("x", DType::F32, &[Some(2), Some(3)]);
        }
        g.node(node).output("y")
    };
    let x = || {
        vec![(
            "x".to_string(),
            HostTensor::from_vec(vec![2, 3], &[0.5f32; 6]).unwrap(),
        )]
    };
    let shape = || ("shape", Attr::Ints(vec![2, 3]));
    let cases: Vec<(Graph, Inputs, &str)> = vec![
        (
            one("RandomUniform", vec![], &[]),
            vec![],
            "RandomUniform: attribute shape is required",
        ),
        (
            one(
                "RandomUniform",
                vec![("shape", Attr::Ints(vec![2, -1]))],
                &[],
            ),
            vec![],
            "shape is [2, -1]; its dimensions must not be negative",
        ),
        (
            one(
                "RandomUniform",
                vec![
                    shape(),
                    ("low", Attr::Float(2.0)),
                    ("high", Attr::Float(1.0)),
                ],
                &[],
            ),
            vec![],
            "low is 2 and high 1; they must be finite with low <= high",
        ),
        (
            one(
                "RandomNormal",
                vec![shape(), ("dtype", Attr::String("i32".into()))],
                &[],
            ),
            vec![],
            "RandomNormal: dtype is i32; RandomNormal makes f32, f16, bf16 or f64",
        ),
        (
            one(
                "RandomUniformLike",
                vec![("seed", Attr::Float(f64::NAN))],
                &["x"],
            ),
            x(),
            "RandomUniformLike: seed is NaN; it must be a finite number",
        ),
        (
            one(
                "Multinomial",
                vec![("dtype", Attr::String("f32".into()))],
                &["x"],
            ),
            x(),
            "Multinomial: dtype is f32; Multinomial makes i32 or i64 classes",
        ),
        (
            one("Multinomial", vec![("sample_size", Attr::Int(-2))], &["x"]),
            x(),
            "sample_size is -2; it must not be negative",
        ),
        (
            one(
                "RandomUniform",
                vec![("shape", Attr::Ints(vec![1 << 20, 1 << 20, 1 << 10]))],
                &[],
            ),
            vec![],
            "RandomUniform: 4503599627370496 bytes of tensors",
        ),
        (
            one(
                "RandomNormal",
                vec![("shape", Attr::Ints(vec![1 << 40, 1 << 40, 1 << 40]))],
                &[],
            ),
            vec![],
            "RandomNormal: shape [1099511627776, 1099511627776, 1099511627776] of f32 has more bytes than this host can address",
        ),
    ];
    for (g, inputs, want) in cases {
        let e = run_error(g, inputs);
        assert!(e.contains(want), "{e}\nwants: {want}");
    }
    // Multinomial of a rank-3 input.
    let g = Graph::new()
        .input("x", DType::F32, &[Some(1), Some(2), Some(3)])
        .node(Node::new("Multinomial", "n").inputs(["x"]).outputs(["y"]))
        .output("y");
    let e = run_error(
        g,
        vec![(
            "x".into(),
            HostTensor::from_vec(vec![1, 2, 3], &[0f32; 6]).unwrap(),
        )],
    );
    assert!(
        e.contains("input has shape [1, 2, 3]; Multinomial takes [batch_size, class_size]"),
        "{e}"
    );
}

#[test]
fn a_tensor_on_the_gpu_is_a_valid_probability_input() {
    // Bernoulli of values computed on the GPU (Sigmoid of an input), in a graph.
    let g = Graph::new()
        .input("x", DType::F32, &[Some(4)])
        .node(Node::new("Sigmoid", "s").inputs(["x"]).outputs(["p"]))
        .node(
            Node::new("Bernoulli", "b")
                .inputs(["p"])
                .outputs(["y"])
                .attr("seed", Attr::Float(2.0))
                .attr("dtype", Attr::String("i32".into())),
        )
        .output("y");
    let x = HostTensor::from_vec(vec![4], &[-100.0f32, 100.0, -100.0, 100.0]).unwrap();
    let out = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap();
    assert_eq!(out[0].1.to_vec::<i32>().unwrap(), [0, 1, 0, 1]);
}

#[test]
fn loop_bodies_draw_anew_at_each_iteration() {
    // Loop of 5 iterations whose body draws [3] uniforms and passes them out as a scan
    // output; the count carried in `v` only keeps the body honest.
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]).unwrap();
    let body = Graph::new()
        .input("i", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .input("v", DType::F32, &[Some(1)])
        .constant("one", HostTensor::from_vec(vec![1], &[1.0f32]).unwrap())
        .node(
            Node::new("Identity", "c")
                .inputs(["cond"])
                .outputs(["cond_out"]),
        )
        .node(
            Node::new("Add", "a")
                .inputs(["v", "one"])
                .outputs(["v_out"]),
        )
        .node(
            Node::new("RandomUniform", "u")
                .outputs(["u"])
                .attr("seed", Attr::Float(8.0))
                .attr("shape", Attr::Ints(vec![3])),
        )
        .output("cond_out")
        .output("v_out")
        .output("u");
    let g = Graph::new()
        .input("v0", DType::F32, &[Some(1)])
        .constant("m", scalar(5))
        .node(
            Node::new("Loop", "loop")
                .inputs(["m", "", "v0"])
                .outputs(["v", "us"])
                .attr("body", Attr::Graph(Box::new(body))),
        )
        .output("v")
        .output("us");
    let v0 = HostTensor::from_vec(vec![1], &[0.0f32]).unwrap();
    let out = Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("v0".into(), v0)])
        .unwrap();
    assert_eq!(out[0].1.to_vec::<f32>().unwrap(), [5.0]);
    assert_eq!(out[1].1.shape, [5, 3]);
    let us = out[1].1.to_vec::<f32>().unwrap();
    for t in 0..5 {
        assert_eq!(
            us[t * 3..t * 3 + 3],
            cpu::units_f32(8, t as u64, 3)[..],
            "iteration {t}"
        );
    }
}
