//! Every element-wise op on every dtype ONNX defines it for, GPU against the CPU reference,
//! one test per dtype (`dtype_tests!`), on edge values (the extremes, overflow, division by
//! zero and by -1, NaN, infinities, subnormals, -0.0) mixed with random ones and broadcast.
//! Integer, bool and the exactly rounded float results (+ - * / sqrt, the comparisons, moves,
//! rounding, Cast) compare bit for bit; transcendental ones within a few units in the last
//! place of their type. The same runs without the adapter's 64-bit features show the error
//! that names them.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::cast_host;
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, HostTensor, MatMulKernel, Session};

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];
const SIGNED: [DType; 4] = [DType::I8, DType::I16, DType::I32, DType::I64];

fn numeric(d: DType) -> bool {
    d != DType::Bool && !d.is_storage_only()
}
fn float(d: DType) -> bool {
    FLOATS.contains(&d)
}
fn signed(d: DType) -> bool {
    float(d) || SIGNED.contains(&d)
}

/// The dtypes ONNX defines each op on (among ours), for the operand that decides the type.
fn onnx_allows(op: &str, d: DType) -> bool {
    match op {
        "Add" | "Sub" | "Mul" | "Div" | "Max" | "Min" | "Abs" | "Sign" | "Clip" | "Mod"
        | "FMod" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" => numeric(d),
        "Neg" | "Relu" => signed(d),
        "Exp" | "Log" | "Sqrt" | "Tanh" | "Sigmoid" | "Reciprocal" | "Floor" | "Ceil" | "Round"
        | "Erf" | "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh"
        | "Acosh" | "Atanh" => float(d),
        "Pow" => float(d) || matches!(d, DType::I32 | DType::I64),
        "Equal" | "Where" => true,
        "And" | "Or" | "Xor" | "Not" => d == DType::Bool,
        "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => numeric(d) && !float(d),
        "BitShiftLeft" | "BitShiftRight" => numeric(d) && !float(d),
        // ONNX's PRelu takes i32, i64, u32 and u64 among the integers; we take them all.
        "Shrink" | "PRelu" => numeric(d),
        _ => panic!("{op}"),
    }
}

/// What is not written yet: nothing (kept so a gap would be named here, not hidden).
fn not_yet(_op: &str, _d: DType) -> bool {
    false
}

/// Ops whose float results are correctly rounded on every path: compared bit for bit.
fn exact(op: &str) -> bool {
    !matches!(
        op,
        "Exp"
            | "Log"
            | "Tanh"
            | "Sigmoid"
            | "Pow"
            | "Erf"
            | "Div"
            | "Reciprocal"
            | "Sin"
            | "Cos"
            | "Tan"
            | "Asin"
            | "Acos"
            | "Atan"
            | "Sinh"
            | "Cosh"
            | "Asinh"
            | "Acosh"
            | "Atanh"
    )
}

/// Ops tested on subnormal inputs too: the exact ones, and Log and Pow, which take the log of
/// a subnormal from its bits (lavapipe's log gave -88.03 for 1e-45, whose log is -103.28;
/// flushing adapters give -inf).
fn takes_subnormals(op: &str) -> bool {
    exact(op) || matches!(op, "Log" | "Pow")
}

/// Edge values of `dtype` (as f64 or i128, converted exactly) then random ones, `n` in all,
/// rotated by `seed`.
fn values(dtype: DType, n: usize, seed: u64) -> HostTensor {
    values_with(dtype, n, seed, true)
}

/// [`values`], with the smallest normal value for the subnormal one unless `subnormal`: GPUs
/// may flush subnormal inputs of transcendental functions to zero (WGSL allows it).
fn values_with(dtype: DType, n: usize, seed: u64, subnormal: bool) -> HostTensor {
    let raw = bytes(seed, n * 8);
    let word = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
    let ints = |lo: i128, hi: i128| -> Vec<i128> {
        let edges = [0, 1, -1, lo, hi, lo + 1, hi - 1, 2, -2, 3, 100, -7];
        let span = (hi - lo + 1) as u128;
        (0..n)
            .map(|i| {
                let k = (i + seed as usize) % (edges.len() + 8);
                match edges.get(k) {
                    Some(&e) => e.clamp(lo, hi),
                    None => lo + (u128::from(word(i)) % span) as i128,
                }
            })
            .collect()
    };
    let floats = |max: f64, tiny: f64| -> Vec<f64> {
        let edges = [
            0.0,
            -0.0,
            1.5,
            -2.25,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            max,
            -max,
            tiny,
            0.5,
            2.5,
            -3.0,
            0.1,
        ];
        (0..n)
            .map(|i| {
                let k = (i + seed as usize) % (edges.len() + 10);
                match edges.get(k) {
                    Some(&e) => e,
                    None => (word(i) % 2001) as f64 / 97.0 - 10.0,
                }
            })
            .collect()
    };
    let shape = vec![n];
    macro_rules! from {
        ($v:expr, $t:ty) => {
            HostTensor::from_vec(shape, &$v.into_iter().map(|x| x as $t).collect::<Vec<_>>())
        };
    }
    match dtype {
        DType::I8 => from!(ints(i8::MIN.into(), i8::MAX.into()), i8),
        DType::I16 => from!(ints(i16::MIN.into(), i16::MAX.into()), i16),
        DType::I32 => from!(ints(i32::MIN.into(), i32::MAX.into()), i32),
        DType::I64 => from!(ints(i64::MIN.into(), i64::MAX.into()), i64),
        DType::U8 => from!(ints(0, u8::MAX.into()), u8),
        DType::U16 => from!(ints(0, u16::MAX.into()), u16),
        DType::U32 => from!(ints(0, u32::MAX.into()), u32),
        DType::U64 => from!(ints(0, u64::MAX.into()), u64),
        DType::Bool => {
            HostTensor::from_vec(shape, &(0..n).map(|i| word(i) % 2 == 1).collect::<Vec<_>>())
        }
        DType::F32 if subnormal => from!(floats(f32::MAX.into(), 1e-45), f32),
        DType::F32 => from!(floats(f32::MAX.into(), f32::MIN_POSITIVE.into()), f32),
        DType::F64 if subnormal => from!(floats(f64::MAX, 5e-324), f64),
        DType::F64 => from!(floats(f64::MAX, f64::MIN_POSITIVE), f64),
        DType::F16 => HostTensor::from_vec(
            shape,
            &floats(65504.0, if subnormal { 6e-8 } else { 6.2e-5 })
                .into_iter()
                .map(half::f16::from_f64)
                .collect::<Vec<_>>(),
        ),
        DType::BF16 => HostTensor::from_vec(
            shape,
            &floats(3.3e38, if subnormal { 1e-40 } else { 1.2e-38 })
                .into_iter()
                .map(half::bf16::from_f64)
                .collect::<Vec<_>>(),
        ),
        // The storage-only types: their codes in turn, every one of them.
        d => {
            let mask = d.packed_bits().map_or(0xff, |b| (1u16 << b) - 1) as usize;
            let codes = (0..n).map(|i| ((i + seed as usize) & mask) as u8).collect();
            HostTensor::from_bytes(d, shape, codes)
        }
    }
    .unwrap()
}

/// Bit-equal, or for floats: both NaN, equal (-0.0 == 0.0), or for inexact ops within a
/// relative tolerance.
fn check(op: &str, got: &HostTensor, want: &HostTensor, what: &str) {
    if let Err(e) = compare(op, got, want, what) {
        panic!("{e}");
    }
}

/// `check` as a result, for tests that report every mismatch before failing.
fn compare(op: &str, got: &HostTensor, want: &HostTensor, what: &str) -> Result<(), String> {
    if (got.dtype, &got.shape) != (want.dtype, &want.shape) {
        return Err(format!(
            "{what}: {:?} {:?} vs reference {:?} {:?}",
            got.dtype, got.shape, want.dtype, want.shape
        ));
    }
    if !float(got.dtype) {
        if got.data != want.data {
            let i = (0..got.data.len())
                .find(|&i| got.data[i] != want.data[i])
                .unwrap_or(0);
            return Err(format!("{what}: byte {i} differs from the reference"));
        }
        return Ok(());
    }
    // Relative tolerances of the inexact ops: f32 as onnxruntime's own tests compare float
    // results (1e-5), two units in the last place of f16 and bf16, and 1e-12 for f64.
    // WGSL's f32 sqrt need not be correctly rounded (NVIDIA's is not); f64's is.
    let exact = exact(op) && !(op == "Sqrt" && got.dtype != DType::F64);
    let tolerance = match (exact, got.dtype) {
        (true, _) => 0.0,
        (false, DType::F32) => 1e-5,
        (false, DType::F16) => 2.0 * 9.77e-4,
        (false, DType::BF16) => 2.0 * 7.82e-3,
        (false, _) => 1e-12,
    };
    for (i, (a, b)) in as_f64(got).iter().zip(&as_f64(want)).enumerate() {
        let ok = (a.is_nan() && b.is_nan())
            || a == b
            || (a - b).abs() <= tolerance * a.abs().max(b.abs());
        if !ok {
            return Err(format!("{what}: element {i}: GPU {a:e} vs reference {b:e}"));
        }
    }
    Ok(())
}

/// Whether `ctx`'s adapter flushes subnormal f32 values to zero in arithmetic (WGSL allows
/// it; NVIDIA's Vulkan driver does): the smallest subnormal times one comes back as zero.
fn flushes_subnormals(ctx: &wgpu_ops::Context) -> bool {
    let tiny = HostTensor::from_vec(vec![1], &[f32::from_bits(1)]).unwrap();
    let one = HostTensor::from_vec(vec![1], &[1.0f32]).unwrap();
    let (got, _) = both_on(
        ctx,
        Node::new("Mul", "m").inputs(["a", "b"]),
        vec![("a", tiny), ("b", one)],
    )
    .unwrap();
    got.to_vec::<f32>().unwrap()[0] == 0.0
}

/// The ops whose f32 results stay exact on adapters that flush subnormals: they choose a
/// value or change its sign on the bits.
fn exact_on_flushing_adapters(op: &str) -> bool {
    matches!(
        op,
        "Neg" | "Abs" | "Relu" | "Sign" | "Max" | "Min" | "Where" | "Cast" | "Clip"
    )
}

fn shaped(mut t: HostTensor, shape: &[usize]) -> HostTensor {
    t.shape = shape.to_vec();
    t
}

/// Every op on `d`: operands of shapes [5, 7] and [7] (broadcast), and [5, 7] with itself
/// so every edge value meets every other one over the op's rotations.
fn every_op_on(d: DType) {
    let ctx = ctx();
    let unary = [
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Sqrt",
        "Tanh",
        "Sigmoid",
        "Relu",
        "Reciprocal",
        "Sign",
        "Floor",
        "Ceil",
        "Round",
        "Erf",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Not",
        "BitwiseNot",
        "Shrink",
    ];
    let binary = [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "Pow",
        "Mod",
        "FMod",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitShiftLeft",
        "BitShiftRight",
        "PRelu",
    ];
    let mut ran = 0;
    let mut mismatches = Vec::new();
    let flushing = flushes_subnormals(ctx);
    let mut run = |op: &str, inputs: Vec<(&str, HostTensor)>| {
        let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
        let node = match op {
            "FMod" => Node::new("Mod", "m").attr("fmod", Attr::Int(1)),
            "Mod" => Node::new("Mod", "m").attr("fmod", Attr::Int(0)),
            "BitShiftLeft" => {
                Node::new("BitShift", "s").attr("direction", Attr::String("LEFT".into()))
            }
            "BitShiftRight" => {
                Node::new("BitShift", "s").attr("direction", Attr::String("RIGHT".into()))
            }
            "Shrink" => shrink(),
            _ => Node::new(op, "n"),
        }
        .inputs(names);
        let what = format!("{op} on {d}");
        let flushed_inputs: Vec<(&str, HostTensor)> =
            inputs.iter().map(|(n, t)| (*n, flushed(t))).collect();
        match both_on(ctx, node.clone(), inputs) {
            Ok((got, want)) => {
                assert!(onnx_allows(op, d) && !not_yet(op, d), "{what} ran");
                if let Err(e) = compare(op, &got, &want, &what) {
                    // Arithmetic on a flushing adapter: the reference on the operands as
                    // that adapter reads them, its subnormal results flushed too.
                    let as_flushed = (flushing && !exact_on_flushing_adapters(op))
                        .then(|| both_on(ctx, node, flushed_inputs).ok())
                        .flatten()
                        .map(|(_, w)| compare(op, &got, &flushed(&w), &what));
                    if as_flushed != Some(Ok(())) {
                        mismatches.push(e);
                    }
                }
                ran += 1;
            }
            Err(e) => {
                assert!(!onnx_allows(op, d) || not_yet(op, d), "{what}: {e}");
                assert!(e.to_string().contains(&format!(" is {d}")), "{what}: {e}");
            }
        }
    };
    for op in unary {
        let a = values_with(d, 35, 1, takes_subnormals(op));
        run(op, vec![("a", shaped(a, &[5, 7]))]);
    }
    for op in binary {
        for seed in 0..3 {
            let a = shaped(values_with(d, 35, seed, takes_subnormals(op)), &[5, 7]);
            let b = values_with(d, 7, 10 + seed, takes_subnormals(op));
            run(op, vec![("a", a), ("b", b)]);
        }
    }
    // Where on d, Clip on d.
    let cond = values(DType::Bool, 35, 3);
    run(
        "Where",
        vec![
            ("cond", shaped(cond, &[5, 7])),
            ("x", shaped(values(d, 35, 4), &[5, 7])),
            ("other", values(d, 7, 5)),
        ],
    );
    if numeric(d) {
        // Bounds in either order: Clip is min(max(x, lo), hi) whatever they are.
        let (lo, hi) = (values(d, 1, 6), values(d, 1, 9));
        run(
            "Clip",
            vec![
                ("x", shaped(values(d, 35, 7), &[5, 7])),
                ("lo", shaped(lo, &[])),
                ("hi", shaped(hi, &[])),
            ],
        );
    }
    assert!(ran > 0, "nothing ran on {d}");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

dtype_tests!(every_elementwise_op, every_op_on);

/// Cast from `d` to every dtype, on edge and random values: bit for bit.
fn casts_from(d: DType) {
    let x = values(d, 48, 2);
    let mut mismatches = Vec::new();
    for to in DType::ALL {
        let node = Node::new("Cast", "c").attr("to", Attr::String(to.name().into()));
        let (got, want) = both_on(ctx(), node.inputs(["x"]), vec![("x", x.clone())])
            .unwrap_or_else(|e| panic!("Cast {d} -> {to}: {e}"));
        if let Err(e) = compare("Cast", &got, &want, &format!("Cast {d} -> {to}")) {
            mismatches.push(e);
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

dtype_tests!(cast_between_every_pair, casts_from);

/// The rounding of f16 and bf16 written in the kernel, against `half`'s, on every f16 and a
/// sweep of f32 bit patterns: all 65536 f16 values to f32 and back, and f32 values around
/// every rounding boundary (ties to even, overflow to infinity, subnormal results).
#[test]
fn f16_and_bf16_round_to_nearest_even() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let halves = HostTensor::from_vec(vec![all.len()], &all).unwrap();
    let halves = HostTensor::from_bytes(DType::F16, halves.shape.clone(), halves.data).unwrap();
    let cast = |x: &HostTensor, to: DType| {
        let node = Node::new("Cast", "c").attr("to", Attr::String(to.name().into()));
        both_on(ctx(), node.inputs(["x"]), vec![("x", x.clone())]).unwrap()
    };
    let (wide, want) = cast(&halves, DType::F32);
    let (g, w) = (wide.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    for (h, (a, b)) in all.iter().zip(g.iter().zip(&w)) {
        // NaN payloads may differ (half sets the quiet bit of signalling NaNs).
        let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        assert!(same, "f16 {h:#06x} -> f32: GPU {a:e}, half {b:e}");
    }
    let (back, _) = cast(&wide, DType::F16);
    let back: &[u16] = bytemuck::cast_slice(&back.data);
    for (h, b) in all.iter().zip(back) {
        let nan = h & 0x7c00 == 0x7c00 && h & 0x3ff != 0;
        assert!(h == b || nan, "f16 {h:#06x} -> f32 -> f16: {b:#06x}");
    }
    // f32 patterns: every exponent, mantissas near the f16 and bf16 rounding points.
    let mut bits = Vec::new();
    for sign in [0u32, 0x8000_0000] {
        for exp in 0..=255u32 {
            for low in [
                0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001,
            ] {
                for high in [0u32, 0x2000, 0x7f_e000, 0x40_0000] {
                    bits.push(sign | (exp << 23) | high | low);
                }
            }
        }
    }
    let floats = HostTensor::from_vec(vec![bits.len()], &bits).unwrap();
    let floats = HostTensor::from_bytes(DType::F32, floats.shape.clone(), floats.data).unwrap();
    for to in [DType::F16, DType::BF16] {
        let (got, want) = cast(&floats, to);
        let g: Vec<u16> = bytemuck::cast_slice(&got.data).to_vec();
        let w: Vec<u16> = bytemuck::cast_slice(&want.data).to_vec();
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            // NaN payloads may differ; NaN must stay NaN.
            let nan = |v: u16| match to {
                DType::F16 => v & 0x7c00 == 0x7c00 && v & 0x3ff != 0,
                _ => v & 0x7f80 == 0x7f80 && v & 0x7f != 0,
            };
            assert!(
                a == b || (nan(*a) && nan(*b)),
                "f32 {:#010x} -> {to}: GPU {a:#06x}, half {b:#06x}",
                bits[i]
            );
        }
    }
}

/// MatMul on every dtype ONNX defines it for, with broadcast batches and shapes across the
/// 16 x 16 tiles and an empty inner axis (sums of nothing: zeros), on small integer values
/// (every sum exact, so every dtype compares bit for bit; f16 and bf16 accumulate in f32 and
/// round once); i64 and u64 also emulated.
#[test]
fn matmul_on_every_dtype() {
    let cases: [(&[usize], &[usize]); 7] = [
        (&[17, 33], &[33, 18]),
        (&[2, 3, 5], &[5, 4]),
        (&[6], &[6, 3]),
        (&[4, 5], &[5]),
        (&[2, 0], &[0, 3]),
        (&[2, 3, 0], &[0, 4]),
        (&[0], &[0]),
    ];
    for d in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U32,
        DType::U64,
    ] {
        for (k, (sa, sb)) in cases.iter().enumerate() {
            let small = |shape: &[usize], seed: u64| {
                let n: usize = shape.iter().product();
                let v: Vec<f64> = bytes(seed, n).iter().map(|&b| f64::from(b % 5)).collect();
                let t = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
                let node = Node::new("Cast", "c").attr("to", Attr::String(d.name().into()));
                both_on(ctx(), node.inputs(["x"]), vec![("x", t)])
                    .unwrap()
                    .0
            };
            let (a, b) = (small(sa, k as u64), small(sb, 50 + k as u64));
            for ctx in contexts_for(d) {
                let (got, want) = both_on(
                    ctx,
                    Node::new("MatMul", "m").inputs(["a", "b"]),
                    vec![("a", a.clone()), ("b", b.clone())],
                )
                .unwrap_or_else(|e| panic!("MatMul {d}: {e}"));
                assert_eq!(got, want, "MatMul {d} {sa:?} x {sb:?}");
                if sa.last() == Some(&0) {
                    assert!(
                        got.data.iter().all(|&b| b == 0),
                        "MatMul {d} {sa:?} x {sb:?}"
                    );
                }
            }
        }
    }
    // i64 and u64 on edge values (the products and sums wrap), natively and emulated on
    // 32-bit words, on the tiles and the few-rows kernels (each forced on the emulation).
    let forced = [MatMulKernel::Tiles, MatMulKernel::Rows].map(ctx_emulating_64_bit_with);
    for d in [DType::I64, DType::U64] {
        for (m, k, n) in [(3, 7, 5), (20, 9, 17)] {
            let a = shaped(values(d, m * k, 4), &[m, k]);
            let b = shaped(values(d, k * n, 5), &[k, n]);
            for ctx in contexts_for(d).into_iter().chain(&forced) {
                let (got, want) = both_on(
                    ctx,
                    Node::new("MatMul", "m").inputs(["a", "b"]),
                    vec![("a", a.clone()), ("b", b.clone())],
                )
                .unwrap_or_else(|e| panic!("MatMul {d}: {e}"));
                assert_eq!(got, want, "MatMul {d} {m}x{k}x{n} on edge values");
            }
        }
    }
}

/// A MatMul over an empty inner axis followed by an element-wise epilogue (fused into the
/// product where it fits): the bias alone, on the 8-byte types too (their kernels bind
/// 8-byte elements, which an empty operand's buffer does not hold).
#[test]
fn matmul_of_an_empty_inner_axis_with_an_epilogue() {
    for d in [DType::F32, DType::F64, DType::I64, DType::F16] {
        let cast = |t: HostTensor| {
            let node = Node::new("Cast", "c").attr("to", Attr::String(d.name().into()));
            both_on(ctx(), node.inputs(["x"]), vec![("x", t)])
                .unwrap()
                .0
        };
        let a = cast(HostTensor::from_vec(vec![2, 0], &[] as &[f32]).unwrap());
        let b = cast(HostTensor::from_vec(vec![0, 3], &[] as &[f32]).unwrap());
        let bias = cast(HostTensor::from_vec(vec![3], &[1f32, 2.0, 3.0]).unwrap());
        let g = Graph::new()
            .input("a", d, &[Some(2), Some(0)])
            .input("b", d, &[Some(0), Some(3)])
            .input("bias", d, &[Some(3)])
            .node(Node::new("MatMul", "m").inputs(["a", "b"]).outputs(["p"]))
            .node(Node::new("Add", "e").inputs(["p", "bias"]).outputs(["y"]))
            .output("y");
        for ctx in contexts_for(d) {
            let inputs = vec![
                ("a".to_string(), a.clone()),
                ("b".to_string(), b.clone()),
                ("bias".to_string(), bias.clone()),
            ];
            let got = Session::new(ctx, g.clone())
                .and_then(|s| s.run_blocking(inputs))
                .unwrap_or_else(|e| panic!("{d}: {e}"))
                .remove(0)
                .1;
            let want =
                cast(HostTensor::from_vec(vec![2, 3], &[1f32, 2.0, 3.0, 1.0, 2.0, 3.0]).unwrap());
            assert_eq!(got, want, "{d}");
        }
    }
}

/// ReduceMax and ReduceMin over an empty axis give the input type's lowest and highest
/// values, as onnxruntime and the reference do (the 8- and 16-bit signed types gave the
/// 32-bit ends cut to their width: 0 and -1).
#[test]
fn max_and_min_of_nothing_are_the_types_ends() {
    for d in [
        DType::I8,
        DType::I16,
        DType::U8,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::F32,
        DType::F16,
    ] {
        let empty = {
            let node = Node::new("Cast", "c").attr("to", Attr::String(d.name().into()));
            let t = HostTensor::from_vec(vec![2, 0], &[] as &[f32]).unwrap();
            both_on(ctx(), node.inputs(["x"]), vec![("x", t)])
                .unwrap()
                .0
        };
        for (op, high) in [("ReduceMax", false), ("ReduceMin", true)] {
            for ctx in contexts_for(d) {
                let node = Node::new(op, "r")
                    .inputs(["x"])
                    .attr("axes", Attr::Ints(vec![1]))
                    .attr("keepdims", Attr::Int(0));
                let (got, want) = both_on(ctx, node, vec![("x", empty.clone())])
                    .unwrap_or_else(|e| panic!("{op} {d}: {e}"));
                assert_eq!(got, want, "{op} {d}");
                let end: f64 = match (d, high) {
                    (DType::I8, false) => -128.0,
                    (DType::I8, true) => 127.0,
                    (DType::I16, false) => -32768.0,
                    (DType::I16, true) => 32767.0,
                    (DType::U8, true) => 255.0,
                    (DType::U16, true) => 65535.0,
                    (DType::I32, false) => f64::from(i32::MIN),
                    (DType::I32, true) => f64::from(i32::MAX),
                    (DType::U32, true) => f64::from(u32::MAX),
                    (DType::I64, false) => i64::MIN as f64,
                    (DType::I64, true) => i64::MAX as f64,
                    (DType::F32 | DType::F16, false) => f64::NEG_INFINITY,
                    (DType::F32 | DType::F16, true) => f64::INFINITY,
                    _ => 0.0,
                };
                let got = cast_host(&got, DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert_eq!(got, vec![end; 2], "{op} {d}");
            }
        }
    }
}

/// Gather on `d` along each axis, by i32 and i64 indices (negative ones too), bit for bit;
/// rows of 8 and 32 elements take the kernel that moves whole 16-byte quads for every width
/// (or most), those of 5 and 20 the element kernel.
fn gather_on(d: DType) {
    let rows = shaped(values(d, 96, 4), &[3, 4, 8]);
    let data = shaped(values(d, 60, 4), &[3, 4, 5]);
    for (data, axis) in [0i64, 1, 2, -1]
        .map(|a| (data.clone(), a))
        .into_iter()
        .chain([(rows.clone(), 0), (rows, 1)])
    {
        let dim = data.shape[axis.rem_euclid(3) as usize] as i64;
        let picks: Vec<i64> = vec![0, dim - 1, -1, -dim, 1, 1];
        let i64s = HostTensor::from_vec(vec![2, 3], &picks).unwrap();
        let i32s = HostTensor::from_vec(
            vec![6],
            &picks.iter().map(|&v| v as i32).collect::<Vec<_>>(),
        )
        .unwrap();
        for indices in [i64s, i32s] {
            let node = Node::new("Gather", "g").attr("axis", Attr::Int(axis));
            let (got, want) = both_on(
                ctx(),
                node.inputs(["data", "indices"]),
                vec![("data", data.clone()), ("indices", indices.clone())],
            )
            .unwrap_or_else(|e| panic!("Gather {d} axis {axis}: {e}"));
            assert_eq!(got, want, "Gather {d} axis {axis} by {}", indices.dtype);
        }
    }
    // An index out of range, known on the host, is an error naming it.
    let bad = HostTensor::from_vec(vec![1], &[5i64]).unwrap();
    let e = both_on(
        ctx(),
        Node::new("Gather", "g").inputs(["data", "indices"]),
        vec![("data", data), ("indices", bad)],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("index 5 is out of range for axis 0 of size 3"),
        "{e}"
    );
}

dtype_tests!(gather_by_indices, gather_on);

/// Trilu on `d`: upper and lower triangles of [2, 3, 4] and [5, 2] with diagonals below,
/// on and above the main one (and beyond the matrix), bit for bit against the reference;
/// rank 1 is refused.
fn trilu_on(d: DType) {
    for shape in [vec![2usize, 3, 4], vec![5, 2]] {
        let n: usize = shape.iter().product();
        let x = shaped(values(d, n, 12), &shape);
        for upper in [0i64, 1] {
            for k in [-10i64, -1, 0, 2, 10] {
                let kt = HostTensor::from_vec(vec![], &[k]).unwrap();
                let node = Node::new("Trilu", "t").attr("upper", Attr::Int(upper));
                for ctx in contexts_for(d) {
                    let (got, want) = both_on(
                        ctx,
                        node.clone().inputs(["x", "k"]),
                        vec![("x", x.clone()), ("k", kt.clone())],
                    )
                    .unwrap_or_else(|e| panic!("Trilu {d} {shape:?} upper {upper} k {k}: {e}"));
                    assert_eq!(got, want, "Trilu {d} {shape:?} upper {upper} k {k}");
                }
            }
        }
    }
    let e = both_on(
        ctx(),
        Node::new("Trilu", "t").inputs(["x"]),
        vec![("x", shaped(values(d, 3, 1), &[3]))],
    )
    .unwrap_err();
    assert!(e.to_string().contains("Trilu needs rank 2"), "{e}");
}

dtype_tests!(trilu_keeps_a_triangle, trilu_on);

/// ONNX-ML's ArrayFeatureExtractor on each type it takes (f32, f64, i32, i64, the last also
/// emulated): indices of any shape read flat along the last axis (negative ones from the end),
/// `[1, n]` from 1-D data, indices computed on the GPU (TopK's, as in scikit-learn's
/// nearest-neighbour models) and given; bit for bit against the reference. Bad inputs are one
/// error naming the op and the input.
#[test]
fn array_feature_extractor_picks_along_the_last_axis() {
    const OP: &str = "ai.onnx.ml.ArrayFeatureExtractor";
    for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let data3 = shaped(values(d, 60, 7), &[3, 4, 5]);
        let picks = |shape: &[usize], v: &[i64]| HostTensor::from_vec(shape.to_vec(), v).unwrap();
        let cases = [
            (
                data3.clone(),
                picks(&[2, 3], &[0, 4, -1, -5, 2, 2]),
                vec![3, 4, 6],
            ),
            (
                shaped(values(d, 7, 8), &[7]),
                picks(&[4], &[6, 0, -2, 3]),
                vec![1, 4],
            ),
            (
                shaped(values(d, 10, 9), &[2, 5]),
                picks(&[1, 3], &[1, 1, 4]),
                vec![2, 3],
            ),
            (
                shaped(values(d, 6, 10), &[2, 3]),
                picks(&[0], &[]),
                vec![2, 0],
            ),
        ];
        for ctx in contexts_for(d) {
            for (data, indices, shape) in &cases {
                let (got, want) = both_on(
                    ctx,
                    Node::new(OP, "afe").inputs(["data", "indices"]),
                    vec![("data", data.clone()), ("indices", indices.clone())],
                )
                .unwrap_or_else(|e| panic!("{d} {:?}: {e}", indices.shape));
                assert_eq!(&got.shape, shape, "{d}");
                assert_eq!(got, want, "{d} {:?} by {:?}", data.shape, indices.shape);
            }
            // The three nearest of 6 distances per row, then their targets: [1, 4 * 3].
            let g = Graph::new()
                .input("dist", DType::F32, &[Some(4), Some(6)])
                .input("targets", d, &[Some(6)])
                .input("k", DType::I64, &[Some(1)])
                .node(
                    Node::new("TopK", "t")
                        .inputs(["dist", "k"])
                        .outputs(["v", "i"])
                        .attr("largest", Attr::Int(0)),
                )
                .node(
                    Node::new(OP, "afe")
                        .inputs(["targets", "i"])
                        .outputs(["picked"]),
                )
                .output("picked");
            let dist: Vec<f32> = (0..24)
                .map(|i| ((i * 7) % 11) as f32 + i as f32 / 32.0)
                .collect();
            let inputs = vec![
                (
                    "dist".to_string(),
                    HostTensor::from_vec(vec![4, 6], &dist).unwrap(),
                ),
                ("targets".to_string(), shaped(values(d, 6, 11), &[6])),
                (
                    "k".to_string(),
                    HostTensor::from_vec(vec![1], &[3i64]).unwrap(),
                ),
            ];
            let got = Session::new(ctx, g.clone())
                .unwrap()
                .run_blocking(inputs.clone())
                .unwrap();
            let want = run_graph(&g, &inputs, &Default::default()).unwrap();
            assert_eq!(got[0].1.shape, vec![1, 12], "{d}");
            assert_eq!(got[0].1, want[0], "{d} by TopK's indices");
        }
    }
    let data = shaped(values(DType::F32, 10, 1), &[2, 5]);
    let refused = |x: HostTensor, y: HostTensor| {
        both_on(
            ctx(),
            Node::new(OP, "afe").inputs(["data", "indices"]),
            vec![("data", x), ("indices", y)],
        )
        .unwrap_err()
        .to_string()
    };
    let e = refused(
        data.clone(),
        HostTensor::from_vec(vec![2], &[1i64, 5]).unwrap(),
    );
    assert!(
        e.contains("ArrayFeatureExtractor") && e.contains("index 5 is out of range"),
        "{e}"
    );
    let e = refused(
        data.clone(),
        HostTensor::from_vec(vec![1], &[-6i64]).unwrap(),
    );
    assert!(e.contains("index -6 is out of range"), "{e}");
    let e = refused(data, HostTensor::from_vec(vec![1], &[1i32]).unwrap());
    assert!(e.contains("Y is i32"), "{e}");
    let e = refused(
        shaped(values(DType::U8, 4, 1), &[4]),
        HostTensor::from_vec(vec![1], &[1i64]).unwrap(),
    );
    assert!(e.contains("X is u8"), "{e}");
    let e = refused(
        shaped(values(DType::F32, 1, 1), &[]),
        HostTensor::from_vec(vec![1], &[0i64]).unwrap(),
    );
    assert!(e.contains("rank 0"), "{e}");
}

/// ONNX-ML's FeatureVectorizer on each type it takes (f32, f64, i32, i64, the last also
/// emulated; the inputs of a node share one): rows cut to their width, padded with zeros,
/// widths of 0, 1-D inputs as one row, rank 3 as rows of the rest flattened, no rows at all;
/// the f32 matrix bit for bit against the reference (the casts round alike). Bad inputs are
/// one error naming the op and the rule.
#[test]
fn feature_vectorizer_lays_rows_side_by_side() {
    const OP: &str = "ai.onnx.ml.FeatureVectorizer";
    let node = |n: usize, dims: &[i64]| {
        Node::new(OP, "fv")
            .inputs((0..n).map(|k| format!("x{k}")).collect::<Vec<_>>())
            .attr("inputdimensions", Attr::Ints(dims.to_vec()))
    };
    let f32s = |n: usize, seed: u64, shape: &[usize]| shaped(values(DType::F32, n, seed), shape);
    for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let x = |n: usize, seed: u64, shape: &[usize]| shaped(values(d, n, seed), shape);
        let cases: Vec<(Vec<HostTensor>, Vec<i64>, Vec<usize>)> = vec![
            (
                vec![x(8, 1, &[4, 2]), x(12, 2, &[4, 3])],
                vec![3, 1],
                vec![4, 4],
            ),
            (
                vec![x(8, 3, &[4, 2]), x(20, 4, &[4, 5])],
                vec![0, 7],
                vec![4, 7],
            ),
            (vec![x(2, 5, &[2]), x(3, 6, &[3])], vec![2, 2], vec![1, 4]),
            (vec![x(12, 7, &[2, 3, 2])], vec![4], vec![2, 4]),
            (
                vec![x(6, 8, &[3, 2]), x(3, 9, &[3, 1]), x(9, 10, &[3, 3])],
                vec![2, 2, 2],
                vec![3, 6],
            ),
            (
                vec![x(0, 11, &[0, 2]), x(0, 12, &[0, 3])],
                vec![2, 3],
                vec![0, 5],
            ),
        ];
        for ctx in contexts_for(d) {
            for (inputs, dims, shape) in &cases {
                let names: Vec<String> = (0..inputs.len()).map(|k| format!("x{k}")).collect();
                let feeds = names
                    .iter()
                    .map(String::as_str)
                    .zip(inputs.iter().cloned())
                    .collect();
                let (got, want) = both_on(ctx, node(inputs.len(), dims), feeds)
                    .unwrap_or_else(|e| panic!("{d} {dims:?}: {e}"));
                assert_eq!(got.dtype, DType::F32, "{d}");
                assert_eq!(&got.shape, shape, "{d} {dims:?}");
                assert_eq!(got, want, "{d} {dims:?}");
            }
        }
    }
    // Where the reference and the kernels meet known values: 1-D as a row, cut and padded.
    let (got, _) = both_on(
        ctx(),
        node(2, &[3, 1]),
        vec![
            (
                "x0",
                HostTensor::from_vec(vec![2], &[5i64, -(1 << 40) - 1]).unwrap(),
            ),
            ("x1", HostTensor::from_vec(vec![1, 2], &[1i64, 3]).unwrap()),
        ],
    )
    .unwrap();
    assert_eq!(
        got.to_vec::<f32>().unwrap(),
        vec![5.0, -((1i64 << 40) as f32), 0.0, 1.0]
    );
    let refused = |inputs: Vec<(&str, HostTensor)>, dims: &[i64]| {
        both_on(ctx(), node(inputs.len(), dims), inputs)
            .unwrap_err()
            .to_string()
    };
    let m = |shape: &[usize]| f32s(shape.iter().product(), 1, shape);
    let e = refused(vec![("x0", m(&[4, 2])), ("x1", m(&[3, 2]))], &[2, 2]);
    assert!(
        e.contains("FeatureVectorizer") && e.contains("input 1 has 3 rows and input 0 has 4"),
        "{e}"
    );
    let e = refused(vec![("x0", m(&[4, 2])), ("x1", m(&[4, 2]))], &[2]);
    assert!(
        e.contains("inputdimensions has 1 values for 2 inputs"),
        "{e}"
    );
    let e = refused(vec![("x0", m(&[4, 2]))], &[-1]);
    assert!(e.contains("inputdimensions[0] is -1"), "{e}");
    let e = refused(vec![("x0", m(&[]))], &[1]);
    assert!(e.contains("input 0 has rank 0"), "{e}");
    let e = refused(vec![("x0", shaped(values(DType::U8, 4, 1), &[2, 2]))], &[2]);
    assert!(e.contains("input 0 is u8"), "{e}");
    let e = refused(
        vec![
            ("x0", m(&[2, 2])),
            ("x1", shaped(values(DType::F64, 4, 1), &[2, 2])),
        ],
        &[2, 2],
    );
    assert!(e.contains("input 1 is f64 and input 0 is f32"), "{e}");
}

/// MaxRoiPool over windows larger than one invocation's loop may walk in one dispatch (300 x
/// 300 elements: lavapipe stops an invocation's loops after about 65 000 iterations, and one
/// dispatch gave the maximum of the first rows): the window folds over several dispatches,
/// each going on from the maximum the one before left. Beside it a small ROI (done after the
/// first) and pooled bins of either size; the largest value planted late in one channel and
/// early in the other. Bit for bit against the reference on 4-, 2- and 8-byte floats.
#[test]
fn max_roi_pool_folds_large_windows_over_dispatches() {
    let (h, w) = (300usize, 300usize);
    let rois: [f32; 10] = [0.0, 0.0, 0.0, 299.0, 299.0, 0.0, 3.0, 4.0, 6.0, 5.0];
    for d in [DType::F32, DType::F16, DType::F64] {
        let mut v: Vec<f32> = (0..2 * h * w)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
            .collect();
        v[(h - 2) * w + w - 3] = 500.0;
        v[h * w + 5] = 400.0;
        let x = cast_host(&HostTensor::from_vec(vec![1, 2, h, w], &v).unwrap(), d).unwrap();
        let r = cast_host(&HostTensor::from_vec(vec![2, 5], &rois).unwrap(), d).unwrap();
        for pooled in [[1i64, 1], [2, 1]] {
            let (got, want) = both_on(
                ctx(),
                Node::new("MaxRoiPool", "pool")
                    .inputs(["x", "rois"])
                    .attr("pooled_shape", Attr::Ints(pooled.to_vec())),
                vec![("x", x.clone()), ("rois", r.clone())],
            )
            .unwrap_or_else(|e| panic!("{d} {pooled:?}: {e}"));
            assert_eq!(got, want, "{d} {pooled:?}");
        }
    }
}

/// MaxRoiPool on each float type (f32, f16, bf16, f64): ROIs inside, across and outside the
/// image, malformed (corners swapped: one pixel) and at half pixels (rounded away from zero),
/// two images, several channels, bins of 1 to 4, spatial scales; the values the generator's
/// edges give (NaN, infinities, both zeros) pooled bit for bit as the reference does. ROIs
/// computed on the GPU are read back. Bad inputs are one error naming the op and the rule.
#[test]
fn max_roi_pool_takes_each_bins_largest() {
    const OP: &str = "MaxRoiPool";
    let roi_rows: [[f32; 5]; 8] = [
        [0.0, 0.5, 1.0, 7.5, 6.0],
        [1.0, 2.0, 2.0, 2.4, 2.3],
        [1.0, -3.0, -2.0, 4.0, 12.0],
        [0.0, 8.0, 5.0, 30.0, 20.0],
        [1.0, 1.0, 0.0, 10.0, 8.0],
        [0.0, 2.5, 1.5, 3.5, 2.5],
        [1.0, 20.0, 20.0, 30.0, 30.0],
        [0.0, 6.0, 6.0, 2.0, 2.0],
    ];
    let flat: Vec<f32> = roi_rows.iter().flatten().copied().collect();
    let node = |pooled: [i64; 2], scale: Option<f32>| {
        let n = Node::new(OP, "pool")
            .inputs(["x", "rois"])
            .attr("pooled_shape", Attr::Ints(pooled.to_vec()));
        match scale {
            Some(s) => n.attr("spatial_scale", Attr::Float(f64::from(s))),
            None => n,
        }
    };
    for d in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        let x = shaped(values(d, 2 * 3 * 9 * 11, 5), &[2, 3, 9, 11]);
        let rois = cast_host(&HostTensor::from_vec(vec![8, 5], &flat).unwrap(), d).unwrap();
        for (pooled, scale) in [
            ([2, 2], None),
            ([3, 4], Some(0.5)),
            ([1, 1], Some(1.0)),
            ([4, 3], Some(2.0)),
        ] {
            let (got, want) = both_on(
                ctx(),
                node(pooled, scale),
                vec![("x", x.clone()), ("rois", rois.clone())],
            )
            .unwrap_or_else(|e| panic!("{d} {pooled:?}: {e}"));
            assert_eq!(
                got.shape,
                vec![8, 3, pooled[0] as usize, pooled[1] as usize]
            );
            assert_eq!(got, want, "{d} {pooled:?} {scale:?}");
        }
    }
    // Known values: a 4x4 ramp, one ROI over its lower right 2x3, two bins across.
    let ramp: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let (got, _) = both_on(
        ctx(),
        node([1, 2], None),
        vec![
            ("x", HostTensor::from_vec(vec![1, 1, 4, 4], &ramp).unwrap()),
            (
                "rois",
                HostTensor::from_vec(vec![1, 5], &[0.0f32, 1.0, 2.0, 3.0, 3.0]).unwrap(),
            ),
        ],
    )
    .unwrap();
    // Columns 1..4 in bins [1, 3) and [2, 4) (bin width 1.5), rows 2..4: maxima 14 and 15.
    assert_eq!(got.to_vec::<f32>().unwrap(), vec![14.0, 15.0]);
    // ROIs computed on the GPU (their absolute values) are read back to plan the bins.
    let g = Graph::new()
        .input("x", DType::F32, &[Some(2), Some(3), Some(9), Some(11)])
        .input("r", DType::F32, &[Some(8), Some(5)])
        .node(Node::new("Abs", "abs").inputs(["r"]).outputs(["rois"]))
        .node(node([3, 3], None).outputs(["y"]))
        .output("y");
    let inputs = vec![
        (
            "x".to_string(),
            shaped(values(DType::F32, 594, 6), &[2, 3, 9, 11]),
        ),
        (
            "r".to_string(),
            HostTensor::from_vec(vec![8, 5], &flat).unwrap(),
        ),
    ];
    let got = Session::new(ctx(), g.clone())
        .unwrap()
        .run_blocking(inputs.clone())
        .unwrap();
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    assert_eq!(got[0].1, want[0], "ROIs computed on the GPU");
    let x = shaped(values(DType::F32, 2 * 9, 1), &[2, 1, 3, 3]);
    let refused =
        |x: HostTensor, rois: Vec<f32>, shape: Vec<usize>, pooled: [i64; 2], scale: Option<f32>| {
            both_on(
                ctx(),
                node(pooled, scale),
                vec![
                    ("x", x),
                    ("rois", HostTensor::from_vec(shape, &rois).unwrap()),
                ],
            )
            .unwrap_err()
            .to_string()
        };
    let e = refused(
        x.clone(),
        vec![2.0, 0.0, 0.0, 1.0, 1.0],
        vec![1, 5],
        [1, 1],
        None,
    );
    assert!(
        e.contains("MaxRoiPool") && e.contains("ROI 0 has batch index 2; X has 2 images"),
        "{e}"
    );
    let e = refused(
        x.clone(),
        vec![-1.0, 0.0, 0.0, 1.0, 1.0],
        vec![1, 5],
        [1, 1],
        None,
    );
    assert!(e.contains("batch index -1"), "{e}");
    let e = refused(x.clone(), vec![0.0; 4], vec![1, 4], [1, 1], None);
    assert!(e.contains("rois has shape [1, 4]"), "{e}");
    let e = refused(x.clone(), vec![0.0; 5], vec![1, 5], [0, 1], None);
    assert!(e.contains("pooled_shape is [0, 1]"), "{e}");
    let e = refused(x.clone(), vec![0.0; 5], vec![1, 5], [1, 1], Some(0.0));
    assert!(e.contains("spatial_scale is 0"), "{e}");
    let e = refused(
        shaped(values(DType::F32, 9, 1), &[1, 3, 3]),
        vec![0.0; 5],
        vec![1, 5],
        [1, 1],
        None,
    );
    assert!(e.contains("X has shape [1, 3, 3]"), "{e}");
    let e = both_on(
        ctx(),
        node([1, 1], None),
        vec![
            ("x", x),
            (
                "rois",
                HostTensor::from_vec(vec![1, 5], &[0.0f64; 5]).unwrap(),
            ),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("rois is f64 and X is f32"), "{e}");
}

/// Shrink with a fractional bias larger than its threshold, so that integers just above the
/// threshold go below zero (and wrap in the unsigned types: 1 is 254 in u8).
fn shrink() -> Node {
    Node::new("Shrink", "s")
        .attr("bias", Attr::Float(3.5))
        .attr("lambd", Attr::Float(0.5))
}

/// PRelu broadcasts X and the slope both ways, as onnxruntime and the reference do: a slope
/// of more axes than X widens the output (X [3] and slope [2, 1, 3] give [2, 1, 3]), in
/// floats and integers, on the GPU as in the interpreter.
#[test]
fn prelu_broadcasts_both_ways() {
    // Integers take the same values doubled (whole).
    let x = [-1.0f64, 0.5, -4.0];
    let slope = [0.5f64, -1.0, 2.0, 3.0, 0.0, -0.5];
    for d in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let k = if d.is_integer() { 2.0 } else { 1.0 };
        let (xs, ss): (Vec<f64>, Vec<f64>) = (
            x.iter().map(|v| v * k).collect(),
            slope.iter().map(|v| v * k).collect(),
        );
        let ws: Vec<f64> = (0..6)
            .map(|i| {
                if xs[i % 3] < 0.0 {
                    xs[i % 3] * ss[i]
                } else {
                    xs[i % 3]
                }
            })
            .collect();
        let host = |shape: Vec<usize>, v: &[f64]| {
            cast_host(&HostTensor::from_vec(shape, v).unwrap(), d).unwrap()
        };
        let node = Node::new("PRelu", "p").inputs(["x", "slope"]);
        let inputs = vec![
            ("x", host(vec![3], &xs)),
            ("slope", host(vec![2, 1, 3], &ss)),
        ];
        let (got, reference) = both_on(ctx(), node, inputs).unwrap();
        let want = host(vec![2, 1, 3], &ws);
        assert_eq!(got, want, "PRelu on {d}");
        assert_eq!(reference, want, "PRelu on {d}, interpreter");
    }
}

/// i64 and u64 without `SHADER_INT64` (as in browsers): the ops the 32-bit emulation covers
/// (arithmetic, division and remainders, order, casts to and from the integer types, bool and
/// f32/f16/bf16) give the native path's bits (the reference's), on edge values (extremes,
/// zero divisors, MIN / -1, NaN, infinities); the others are an error that names the missing
/// feature.
fn emulated_on(d: DType) {
    if !matches!(d, DType::I64 | DType::U64) {
        return;
    }
    let plain = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    })
    .unwrap();
    assert!(!plain
        .features()
        .contains(wgpu_ops::gpu::Features::SHADER_INT64));
    let covered = [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "Pow",
        "Max",
        "Min",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Neg",
        "Abs",
        "Relu",
        "Sign",
        "Shrink",
        "PRelu",
    ];
    let mut ran = 0;
    let ops = [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "Equal",
        "Less",
        "LessOrEqual",
    ]
    .into_iter()
    .chain([
        "Greater",
        "GreaterOrEqual",
        "Neg",
        "Abs",
        "Relu",
        "Sign",
        "Mod",
        "Pow",
        "Exp",
        "Shrink",
        "PRelu",
    ]);
    for op in ops {
        let unary = matches!(op, "Neg" | "Abs" | "Relu" | "Sign" | "Exp" | "Shrink");
        let mut inputs = vec![("a", shaped(values(d, 35, 3), &[5, 7]))];
        if !unary {
            inputs.push(("b", values(d, 7, 8)));
        }
        let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
        let node = if op == "Shrink" {
            shrink()
        } else {
            Node::new(op, "n")
        }
        .inputs(names);
        match both_on(&plain, node, inputs) {
            Ok((got, want)) => {
                assert!(covered.contains(&op), "{op} on {d} ran emulated");
                assert_eq!(got, want, "{op} on {d}, emulated");
                ran += 1;
            }
            Err(e) => {
                let e = e.to_string();
                let defined = onnx_allows(op, d);
                assert!(!covered.contains(&op) || !defined, "{op} on {d}: {e}");
                if defined {
                    assert!(e.contains("SHADER_INT64"), "{op} on {d}: {e}");
                }
            }
        }
    }
    assert!(ran >= 12, "{ran}");
    // C's remainder (Mod with fmod = 1) too.
    let (got, want) = both_on(
        &plain,
        Node::new("Mod", "m")
            .attr("fmod", Attr::Int(1))
            .inputs(["a", "b"]),
        vec![
            ("a", shaped(values(d, 35, 3), &[5, 7])),
            ("b", values(d, 7, 8)),
        ],
    )
    .unwrap();
    assert_eq!(got, want, "Mod fmod=1 on {d}, emulated");
    // Where and Clip on d, and Cast between d and the 32-bit and narrow integers and bool.
    where_and_clip_match(&plain, d);
    for other in [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::F32,
        DType::F16,
        DType::BF16,
    ] {
        for (from, to) in [(d, other), (other, d)] {
            let node = Node::new("Cast", "c").attr("to", Attr::String(to.name().into()));
            let (got, want) = both_on(&plain, node.inputs(["x"]), vec![("x", values(from, 40, 5))])
                .unwrap_or_else(|e| panic!("Cast {from} -> {to} emulated: {e}"));
            assert_eq!(got, want, "Cast {from} -> {to}, emulated");
        }
    }
}

dtype_tests!(int64_emulated_without_the_feature, emulated_on);

/// f64 values whose bits are random in every field, by groups: any exponent, exponents near
/// 1023 (ordinary values), near 0 (subnormal results), pairs a few units apart (cancellation),
/// and operands whose quotients and roots round from near a tie; `n` of them from `seed`.
fn f64_bit_patterns(n: usize, seed: u64) -> HostTensor {
    let raw = bytes(seed, n * 16);
    let word = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let (w, x) = (word(2 * i), word(2 * i + 1));
            let mantissa = w & ((1 << 52) - 1);
            let sign = w & (1 << 63);
            let bits = match i % 5 {
                0 => w,
                1 => sign | ((1023 - 40 + x % 80) << 52) | mantissa,
                2 => sign | ((x % 60) << 52) | mantissa,
                // Neighbours of 1.5 * 2^k: differences of a few units, and ties.
                3 => sign | ((1000 + x % 40) << 52) | (1 << 51) | (x >> 60),
                _ => sign | ((1023 + x % 8) << 52) | (mantissa & !0xffff_ffff),
            };
            f64::from_bits(bits)
        })
        .collect();
    HostTensor::from_vec(vec![n], &v).unwrap()
}

/// `got` against `want`: the same bits, but that any NaN matches any NaN (the payload a NaN
/// operand passes on is the CPU's choice of operand, which the compiler may commute).
fn assert_same_or_nan(got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{what}");
    if got.dtype != DType::F64 {
        let first = got.data.iter().zip(&want.data).position(|(a, b)| a != b);
        assert!(first.is_none(), "{what}: byte {first:?} differs");
        return;
    }
    let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{what}: element {k} is {a:e} ({:#x}), want {b:e} ({:#x})",
            a.to_bits(),
            b.to_bits()
        );
    }
}

/// Where (with a broadcast operand) and Clip on `d` in `ctx`: bit for bit the reference's.
fn where_and_clip_match(ctx: &wgpu_ops::Context, d: DType) {
    let (got, want) = both_on(
        ctx,
        Node::new("Where", "w").inputs(["cond", "x", "other"]),
        vec![
            ("cond", shaped(values(DType::Bool, 35, 1), &[5, 7])),
            ("x", shaped(values(d, 35, 2), &[5, 7])),
            ("other", values(d, 7, 3)),
        ],
    )
    .unwrap();
    assert_eq!(got, want, "Where on {d}");
    let (got, want) = both_on(
        ctx,
        Node::new("Clip", "c").inputs(["x", "lo", "hi"]),
        vec![
            ("x", shaped(values(d, 35, 4), &[5, 7])),
            ("lo", values(d, 1, 6)),
            ("hi", values(d, 1, 9)),
        ],
    )
    .unwrap();
    assert_eq!(got, want, "Clip on {d}");
}

/// f64 without `SHADER_F64` (as in browsers and on Metal): arithmetic, square root,
/// reciprocal, order, Where, Clip, Sign, the rounding ops, Mod, the NaN and infinity tests and Cast
/// to and from every type run on the emulation and give the CPU reference's bits, on edge
/// values (zeros of both signs, infinities, NaN, the extremes, the smallest subnormal) and on
/// 4 000 random bit patterns of every kind; exp, log, tanh, sigmoid, erf and pow within a
/// few ulp of libm, as the native algorithms they follow (the trigonometric and hyperbolic
/// functions: `trigonometric_functions_across_the_range`), and every activation; an op beyond
/// the emulation (Det's kernel) is an error that names the feature.
#[test]
fn f64_emulated_without_the_feature() {
    let plain = ctx_emulating_64_bit();
    assert!(!plain
        .features()
        .contains(wgpu_ops::gpu::Features::SHADER_F64));
    let d = DType::F64;
    let edges = || shaped(values(d, 35, 3), &[5, 7]);
    let patterns = |seed| f64_bit_patterns(4000, seed);
    let unary = [
        "Neg",
        "Abs",
        "Sqrt",
        "Reciprocal",
        "Relu",
        "Sign",
        "Floor",
        "Ceil",
        "Round",
        "IsNaN",
        "IsInf",
    ];
    for op in unary {
        for x in [edges(), patterns(11), values(d, 64, 9)] {
            let (got, want) = both_on(plain, Node::new(op, "n").inputs(["a"]), vec![("a", x)])
                .unwrap_or_else(|e| panic!("{op} emulated: {e}"));
            assert_same_or_nan(&got, &want, &format!("{op} on f64, emulated"));
        }
    }
    let binary = [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
    ];
    for op in binary {
        // Edge values against each other (broadcast), and random patterns pairwise.
        let pairs = [
            (edges(), values(d, 7, 8)),
            (patterns(12), patterns(13)),
            (patterns(14), patterns(14)),
        ];
        for (a, b) in pairs {
            let node = Node::new(op, "n").inputs(["a", "b"]);
            let (got, want) = both_on(plain, node, vec![("a", a), ("b", b)])
                .unwrap_or_else(|e| panic!("{op} emulated: {e}"));
            assert_same_or_nan(&got, &want, &format!("{op} on f64, emulated"));
        }
    }
    // Mod, Python's (fmod = 0) and C's (fmod = 1): exact remainders, whatever the exponents.
    for fmod in [0, 1] {
        let pairs = [
            (edges(), values(d, 7, 8)),
            (patterns(16), patterns(17)),
            (patterns(18), patterns(18)),
        ];
        for (a, b) in pairs {
            let node = Node::new("Mod", "n")
                .attr("fmod", Attr::Int(fmod))
                .inputs(["a", "b"]);
            let (got, want) = both_on(plain, node, vec![("a", a), ("b", b)])
                .unwrap_or_else(|e| panic!("Mod emulated: {e}"));
            assert_same_or_nan(&got, &want, &format!("Mod fmod={fmod} on f64, emulated"));
        }
    }
    // Cancellation: neighbours one to a few units apart, and a value with its negation.
    let a = patterns(15);
    let near: Vec<f64> = a
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, v)| f64::from_bits(v.to_bits() ^ (k as u64 % 7)))
        .collect();
    for op in ["Sub", "Add"] {
        let b = HostTensor::from_vec(vec![near.len()], &near).unwrap();
        let b = if op == "Add" {
            let neg: Vec<f64> = near.iter().map(|v| -v).collect();
            HostTensor::from_vec(vec![neg.len()], &neg).unwrap()
        } else {
            b
        };
        let node = Node::new(op, "n").inputs(["a", "b"]);
        let (got, want) = both_on(plain, node, vec![("a", a.clone()), ("b", b)]).unwrap();
        assert_same_or_nan(&got, &want, &format!("{op} of neighbours, emulated"));
    }
    where_and_clip_match(plain, d);
    for other in DType::ALL.into_iter().filter(|&o| o != d) {
        let mut sources = vec![values(d, 40, 5), patterns(16)];
        if other == DType::F32 {
            // Around f32's rounding boundaries, its overflow and its subnormals.
            let v: Vec<f64> = (0..4000u64)
                .map(|k| {
                    let e = [
                        1023,
                        1023 + 127,
                        1023 - 126,
                        1023 - 140,
                        1023 - 149,
                        1023 - 150,
                    ][k as usize % 6];
                    // f32 keeps the top 23 bits of the 52: bit 28 is its half, below it
                    // the sticky bits, zero for every third (ties, to even).
                    let half = ((k >> 3) % 5) << 28;
                    let sticky = if k % 3 == 0 {
                        0
                    } else {
                        (k * 0x9e37_79b9) & 0xfff_ffff
                    };
                    f64::from_bits(((k & 1) << 63) | (e << 52) | half | sticky)
                })
                .collect();
            sources.push(HostTensor::from_vec(vec![v.len()], &v).unwrap());
        }
        for x in sources {
            let node = Node::new("Cast", "c").attr("to", Attr::String(other.name().into()));
            let (got, want) = both_on(plain, node.inputs(["x"]), vec![("x", x)])
                .unwrap_or_else(|e| panic!("Cast f64 -> {other} emulated: {e}"));
            assert_same_or_nan(&got, &want, &format!("Cast f64 -> {other}, emulated"));
        }
        let node = Node::new("Cast", "c").attr("to", Attr::String(d.name().into()));
        let (got, want) = both_on(plain, node.inputs(["x"]), vec![("x", values(other, 40, 5))])
            .unwrap_or_else(|e| panic!("Cast {other} -> f64 emulated: {e}"));
        assert_eq!(got, want, "Cast {other} -> f64, emulated");
    }
    // exp, log, tanh, sigmoid and pow, in units in the last place of the reference (libm):
    // edge values, random bit patterns, and values across each function's working range.
    let spread: Vec<f64> = (0..2000)
        .map(|k| {
            let t = f64::from(k) / 2000.0;
            match k % 4 {
                0 => (t - 0.5) * 1500.0,
                1 => (t - 0.5) * 60.0,
                2 => 2f64.powf((t - 0.5) * 2000.0),
                _ => 1.0 + (t - 0.5) * 1e-3,
            }
        })
        .collect();
    let spread = HostTensor::from_vec(vec![spread.len()], &spread).unwrap();
    let mut report = Vec::new();
    // The bounds are the native f64 algorithms' (which the emulation follows): tanh loses 2
    // bits to cancellation in 1 - 2 / (e^2|x| + 1) above 0.17; pow through e^(b log a) carries
    // the rounding of b log a, scaled by its magnitude (up to 2^10 ulp for results near the
    // ends of the range; 1e-13 relative).
    for (op, bound) in [
        ("Exp", 2.0),
        ("Log", 2.0),
        ("Tanh", 4.0),
        ("Sigmoid", 3.0),
        // Below 2 by the Taylor series, whose alternating terms near 2 (up to 7 times the
        // result) lose 3 bits to cancellation.
        ("Erf", 8.0),
        ("Pow", 1024.0),
    ] {
        let sources = [values(d, 64, 9), patterns(17), spread.clone()];
        let mut worst = (0.0f64, String::new());
        for x in sources {
            let mut inputs = vec![("a", x.clone())];
            if op == "Pow" {
                // Exponents whole (by squaring) and not (through exp and log), small.
                let e: Vec<f64> = (0..x.shape[0])
                    .map(|k| [2.0, -3.0, 0.5, 1.75, -0.25, 7.0, 0.0, 30.5][k % 8])
                    .collect();
                inputs.push(("b", HostTensor::from_vec(vec![e.len()], &e).unwrap()));
            }
            let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
            let (got, want) = both_on(plain, Node::new(op, "n").inputs(names), inputs.clone())
                .unwrap_or_else(|e| panic!("{op} emulated: {e}"));
            let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
            let a = x.to_vec::<f64>().unwrap();
            for (k, (&g, &w)) in g.iter().zip(&w).enumerate() {
                let ulps = if g.is_nan() || w.is_nan() {
                    if g.is_nan() && w.is_nan() {
                        0.0
                    } else {
                        f64::INFINITY
                    }
                } else if g == w {
                    0.0
                } else {
                    // The spacing above |w| (from the bits: powers of two underflow there).
                    let spacing = f64::from_bits(w.abs().to_bits() + 1) - w.abs();
                    (g - w).abs() / spacing
                };
                if ulps > worst.0 {
                    worst = (ulps, format!("{op}({:e}) = {g:e}, libm {w:e}", a[k]));
                }
            }
        }
        report.push(format!("{op}: {:.2} ulp ({})", worst.0, worst.1));
        assert!(
            worst.0 <= bound,
            "{op} on f64, emulated: {:.2} ulp: {}",
            worst.0,
            worst.1
        );
    }
    println!("{}", report.join("\n"));
    // Every activation and Softmax, built from those steps (Gelu's erf, Softplus's and Mish's
    // log1p among them): within 4 ulp of the reference's largest magnitude.
    let x = HostTensor::from_vec(
        vec![4, 16],
        &(0..64)
            .map(|k| (f64::from(k) - 31.5) * 0.37)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let activations = wgpu_ops::ops::activation::ACTIVATIONS
        .into_iter()
        .filter(|&op| !matches!(op, "PRelu" | "SwiGLU" | "Shrink"));
    for op in activations.chain(["Softmax", "LogSoftmax"]) {
        let (got, want) = both_on(
            plain,
            Node::new(op, "n").inputs(["a"]),
            vec![("a", x.clone())],
        )
        .unwrap_or_else(|e| panic!("{op} emulated: {e}"));
        let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
        let scale = w.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
        for (k, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                (a - b).abs() <= 4.0 * f64::EPSILON * scale,
                "{op} on f64, emulated: element {k} is {a:e}, want {b:e}"
            );
        }
    }
}

/// Pow with a base and an exponent of different dtypes, one of them i64 or u64 (ONNX Pow-15's
/// T and T1): emulated on 32-bit words, the native path's bits, on edge values of both
/// (negative exponents, NaN and infinite float ones); integer powers also the reference's.
#[test]
fn pow_of_mixed_types_emulated() {
    let mut ran = 0;
    for base in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64] {
        for exponent in DType::ALL.into_iter().filter(|d| !d.is_storage_only()) {
            let long = |d: DType| matches!(d, DType::I64 | DType::U64);
            if base == exponent
                || !(long(base) || long(exponent))
                || matches!(exponent, DType::F64 | DType::Bool)
            {
                continue;
            }
            let inputs = vec![
                ("a", shaped(values(base, 35, 3), &[5, 7])),
                ("b", values(exponent, 7, 8)),
            ];
            let node = Node::new("Pow", "p").inputs(["a", "b"]);
            let (native, want) = both_on(ctx(), node.clone(), inputs.clone())
                .unwrap_or_else(|e| panic!("Pow {base} ^ {exponent}: {e}"));
            let (emulated, _) = both_on(ctx_emulating_64_bit(), node, inputs)
                .unwrap_or_else(|e| panic!("Pow {base} ^ {exponent} emulated: {e}"));
            if base.is_integer() && exponent.is_integer() {
                assert_eq!(native, want, "Pow {base} ^ {exponent}, native vs reference");
            }
            assert_eq!(emulated, native, "Pow {base} ^ {exponent}, emulated");
            ran += 1;
        }
    }
    // An i64 base to the 11 other exponent types, and i64 and u64 exponents of 4 other bases.
    assert_eq!(ran, 11 + 4 * 2 - 1, "{ran}");
}

/// Pow with one of base and exponent f64 and the other of another numeric type, on the f64
/// emulation (without SHADER_F64; also without SHADER_INT64 beside i64 and u64), on edge
/// values of both:
/// f64 results within 1024 ulp of the native path's (the bound of f64 Pow emulated, see
/// `f64_emulated_without_the_feature`), the others (an f32, f16 or bf16 base to an f64
/// exponent converted to f32; i32 and i64 bases truncated back) its bits.
#[test]
fn pow_of_f64_and_other_types_emulated() {
    let others = DType::ALL
        .into_iter()
        .filter(|&d| !d.is_storage_only() && !matches!(d, DType::F64 | DType::Bool));
    let bases = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64];
    let pairs: Vec<(DType, DType)> = others
        .map(|e| (DType::F64, e))
        .chain(bases.map(|b| (b, DType::F64)))
        .collect();
    let ordered = |bits: u64| -> i128 {
        let magnitude = i128::from(bits & !(1 << 63));
        if bits >> 63 == 1 {
            -magnitude
        } else {
            magnitude
        }
    };
    for &(base, exponent) in &pairs {
        let inputs = vec![
            ("a", shaped(values(base, 35, 3), &[5, 7])),
            ("b", values(exponent, 7, 8)),
        ];
        let node = Node::new("Pow", "p").inputs(["a", "b"]);
        let (native, _) = both_on(ctx(), node.clone(), inputs.clone())
            .unwrap_or_else(|e| panic!("Pow {base} ^ {exponent}: {e}"));
        // Without SHADER_INT64 as well where the other type is a 64-bit integer.
        let mut contexts = vec![ctx_without_f64()];
        if [base, exponent]
            .iter()
            .any(|d| matches!(d, DType::I64 | DType::U64))
        {
            contexts.push(ctx_emulating_64_bit());
        }
        for plain in contexts {
            let what = format!(
                "Pow {base} ^ {exponent}, emulated (SHADER_INT64: {})",
                plain
                    .features()
                    .contains(wgpu_ops::gpu::Features::SHADER_INT64)
            );
            let (emulated, _) = both_on(plain, node.clone(), inputs.clone())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            if base != DType::F64 {
                assert_eq!(nan_canonical(&emulated), nan_canonical(&native), "{what}");
                continue;
            }
            let (g, w) = (
                emulated.to_vec::<f64>().unwrap(),
                native.to_vec::<f64>().unwrap(),
            );
            for (k, (g, w)) in g.iter().zip(&w).enumerate() {
                let ulps = (ordered(g.to_bits()) - ordered(w.to_bits())).abs();
                assert!(
                    (g.is_nan() && w.is_nan()) || ulps <= 1024,
                    "{what}: element {k}: {g:e} against native {w:e}"
                );
            }
        }
    }
    // An f64 base to the 11 other numeric types, and 5 bases to an f64 exponent.
    assert_eq!(pairs.len(), 11 + 5);
}

/// Whole float exponents (up to 1024) go by squaring, as C's pow is exact on them where the
/// result fits: integer bases give exact powers (5^4.0 is 625, where exp2(4 log2 5) came to
/// 624.9999, truncated to 624), native and emulated; x^2.0 is x * x, bit for bit, in f32
/// and f64; x^-2.0 is 1 / (x * x).
#[test]
fn pow_to_whole_float_exponents_is_exact() {
    let bases = [5i64, -5, 3, 7, -2, 10, 12, 0, 1, -1, 6, 9];
    let exponents = [
        4.0f32, 4.0, 5.0, 6.0, 9.0, 5.0, 4.0, 3.0, 0.0, 7.0, 8.0, 7.0,
    ];
    let want: Vec<i64> = bases
        .iter()
        .zip(&exponents)
        .map(|(&a, &b)| a.pow(b as u32))
        .collect();
    let e32 = HostTensor::from_vec(vec![12], &exponents).unwrap();
    for exponent in [e32.clone(), cast_host(&e32, DType::F16).unwrap()] {
        for (base, ctx) in [
            (DType::I32, ctx()),
            (DType::I64, ctx()),
            (DType::I64, ctx_emulating_64_bit()),
        ] {
            let a = cast_host(&HostTensor::from_vec(vec![12], &bases).unwrap(), base).unwrap();
            let node = Node::new("Pow", "p").inputs(["a", "b"]);
            let (got, _) = both_on(ctx, node, vec![("a", a), ("b", exponent.clone())]).unwrap();
            let got = cast_host(&got, DType::I64)
                .unwrap()
                .to_vec::<i64>()
                .unwrap();
            assert_eq!(got, want, "{base} ^ {}", exponent.dtype);
        }
    }
    for d in [DType::F32, DType::F64] {
        let x = cast_host(&values_with(d, 64, 5, false), DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let x = cast_host(&HostTensor::from_vec(vec![64], &x).unwrap(), d).unwrap();
        for (power, square) in [(2.0, true), (-2.0, false)] {
            let b = cast_host(&HostTensor::from_vec(vec![], &[power]).unwrap(), d).unwrap();
            let node = Node::new("Pow", "p").inputs(["a", "b"]);
            let (got, _) = both_on(ctx(), node, vec![("a", x.clone()), ("b", b)]).unwrap();
            let xs = cast_host(&x, DType::F64).unwrap().to_vec::<f64>().unwrap();
            let want: Vec<f64> = xs
                .iter()
                .map(|&v| match (d, square) {
                    (DType::F32, true) => f64::from((v as f32) * (v as f32)),
                    (DType::F32, false) => f64::from(1.0 / ((v as f32) * (v as f32))),
                    (_, true) => v * v,
                    _ => 1.0 / (v * v),
                })
                .collect();
            let want = cast_host(&HostTensor::from_vec(vec![64], &want).unwrap(), d).unwrap();
            if d == DType::F64 || square {
                assert_eq!(got, want, "{d} ^ {power}");
            } else {
                // WGSL's f32 division is within 2.5 ulp, not exactly rounded.
                compare("Pow", &got, &want, &format!("{d} ^ {power}")).unwrap();
            }
        }
    }
}

/// The word kernel beyond the binding limit: with 128 bytes bound at a time, outputs of 1 and
/// 2 bytes are written in windows whose pieces start and end inside words (a piece keeps the
/// bytes of the word that belong to its neighbours), and Cast changes the element size.
#[test]
fn word_kernel_in_windows() {
    let small = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_binding_size: Some(128),
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap();
    let shapes: [(&[usize], &[usize]); 3] = [
        (&[9, 13], &[9, 13]),
        (&[5, 1, 41], &[3, 1]),
        (&[1, 37], &[50, 1]),
    ];
    for d in [DType::U8, DType::I16, DType::F16, DType::Bool] {
        for (sa, sb) in shapes {
            let na: usize = sa.iter().product();
            let nb: usize = sb.iter().product();
            let a = shaped(values(d, na, 1), sa);
            let b = shaped(values(d, nb, 2), sb);
            let op = if d == DType::Bool { "Xor" } else { "Max" };
            let (got, want) = both_on(
                &small,
                Node::new(op, "n").inputs(["a", "b"]),
                vec![("a", a.clone()), ("b", b)],
            )
            .unwrap_or_else(|e| panic!("{op} {d} {sa:?} {sb:?}: {e}"));
            // Max of 0.0 and -0.0 may be either zero: `check` compares floats as numbers.
            check(
                op,
                &got,
                &want,
                &format!("{op} {d} {sa:?} {sb:?} in windows"),
            );
            for to in [DType::U8, DType::F16, DType::I64] {
                let node = Node::new("Cast", "c").attr("to", Attr::String(to.name().into()));
                let (got, want) = both_on(&small, node.inputs(["x"]), vec![("x", a.clone())])
                    .unwrap_or_else(|e| panic!("Cast {d} -> {to}: {e}"));
                assert_eq!(got, want, "Cast {d} -> {to} {sa:?} in windows");
            }
        }
    }
}

/// Values across the whole range of f32 (`wide` false) or f64: every exponent from 2^-30 up
/// with random significands, both signs, and the floats nearest multiples of pi/2 (and their
/// neighbours), where the reduction of sin, cos and tan cancels most.
fn trigonometric_arguments(wide: bool) -> Vec<f64> {
    let raw = bytes(42, 1 << 16);
    let word = |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
    let mut v = Vec::new();
    let (bits, max_exp) = if wide { (52, 1023) } else { (23, 127) };
    let mut n = 0;
    for e in -30..=max_exp {
        for _ in 0..4 {
            let m = 1.0 + (word(n) >> (64 - bits)) as f64 / (1u64 << bits) as f64;
            n += 1;
            v.push(m * 2f64.powi(e));
        }
    }
    for k in 1..600u32 {
        let x = f64::from(k * k) * std::f64::consts::FRAC_PI_2;
        if wide {
            v.extend([
                x,
                f64::from_bits(x.to_bits() + 1),
                f64::from_bits(x.to_bits() - 1),
            ]);
        } else {
            let y = x as f32;
            v.extend(
                [
                    y,
                    f32::from_bits(y.to_bits() + 1),
                    f32::from_bits(y.to_bits() - 1),
                ]
                .map(f64::from),
            );
        }
    }
    let negated: Vec<f64> = v.iter().map(|x| -x).collect();
    v.extend(negated);
    v
}

/// The circular and hyperbolic functions and their inverses on f32 and f64 across their whole
/// range, against musl's (libm, within an ulp of the exact result), in units in the last
/// place of the reference. The bounds are what the kernels' own arithmetic allows by WGSL's
/// accuracy rules: sin, cos and tan reduce exactly and sum series (a few roundings); the
/// inverses add a division and a square root (2.5 and 1 ulp each in f32); the hyperbolic
/// functions use the built-in exp and log, which WGSL allows 3 + 2|x| ulp.
#[test]
fn trigonometric_functions_across_the_range() {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    // f64 natively and on the emulation (browsers, Metal), which follows the native
    // algorithms step by step and is held to the same bounds.
    let runs = [
        (DType::F32, ctx(), ""),
        (DType::F64, ctx(), ""),
        (DType::F64, ctx_emulating_64_bit(), " emulated"),
    ];
    for (d, ctx, how) in runs {
        let wide = d == DType::F64;
        let args = trigonometric_arguments(wide);
        let x = if wide {
            HostTensor::from_vec(vec![args.len()], &args).unwrap()
        } else {
            let narrow: Vec<f32> = args.iter().map(|&a| a as f32).collect();
            HostTensor::from_vec(vec![args.len()], &narrow).unwrap()
        };
        for (op, bound) in [
            ("Sin", 4.0),
            ("Cos", 4.0),
            ("Tan", 6.0),
            ("Asin", 8.0),
            ("Acos", 8.0),
            ("Atan", 6.0),
            ("Sinh", 8.0),
            ("Cosh", 8.0),
            ("Asinh", 8.0),
            ("Acosh", 8.0),
            ("Atanh", 8.0),
        ] {
            let (got, want) = both_on(
                ctx,
                Node::new(op, "n").inputs(["x"]),
                vec![("x", x.clone())],
            )
            .unwrap_or_else(|e| panic!("{op} on {d}{how}: {e}"));
            let (got, want) = (as_f64(&got), as_f64(&want));
            let mut worst = (0.0f64, 0usize);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let ulps = if g.is_nan() || w.is_nan() {
                    if g.is_nan() && w.is_nan() {
                        0.0
                    } else {
                        f64::INFINITY
                    }
                } else if g == w {
                    0.0
                } else {
                    (g - w).abs() / ulp(w, wide)
                };
                if ulps > worst.0 {
                    worst = (ulps, i);
                }
            }
            let (ulps, i) = worst;
            report.push(format!("{op} {d}{how}: {ulps:.2} ulp (at {:e})", args[i]));
            // f64 Sinh and Cosh compute e^|x| / 2 in one range reduction (no square of
            // e^(|x| / 2), which doubled its error to 3 ulp), so they are held to 2.
            let bound = if wide && matches!(op, "Sinh" | "Cosh") {
                2.0
            } else {
                bound
            };
            if ulps > bound {
                failures.push(format!(
                    "{op} on {d}{how}: {ulps} ulp at {:e}: GPU {:e}, libm {:e}",
                    args[i], got[i], want[i]
                ));
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The spacing of f32 (or f64 where `wide`) values at `x` (the smallest subnormal's at 0).
fn ulp(x: f64, wide: bool) -> f64 {
    let (bits, min_exp) = if wide { (52, -1074) } else { (23, -149) };
    let a = x.abs();
    if a == 0.0 || !a.is_finite() {
        return 2f64.powi(min_exp);
    }
    2f64.powi((a.log2().floor() as i32 - bits).max(min_exp))
}

/// BitShift on every integer type by every amount from 0 to past the width (and negative
/// ones, which as amounts of an unsigned type are huge), left and right, 64-bit types natively
/// and on the 32-bit emulation: bit for bit with the reference.
#[test]
fn bit_shifts_by_every_amount() {
    for d in DType::ALL.into_iter().filter(|&d| numeric(d) && !float(d)) {
        let bits = 8 * d.size() as i64;
        let amounts: Vec<i64> = (0..bits + 3)
            .chain([1 << 32, i64::MAX, -1, -bits, i64::MIN])
            .collect();
        let n = amounts.len();
        let x = values(d, n, 5);
        let shift = HostTensor::from_vec(vec![n], &amounts).unwrap();
        let shift = Session::new(
            ctx(),
            Graph::new()
                .input("s", DType::I64, &[Some(n)])
                .node(
                    Node::new("Cast", "c")
                        .attr("to", Attr::String(d.name().into()))
                        .inputs(["s"])
                        .outputs(["y"]),
                )
                .output("y"),
        )
        .unwrap()
        .run_blocking(vec![("s".into(), shift)])
        .unwrap()
        .remove(0)
        .1;
        for direction in ["LEFT", "RIGHT"] {
            let node = Node::new("BitShift", "s").attr("direction", Attr::String(direction.into()));
            for ctx in contexts_for(d) {
                let (got, want) = both_on(
                    ctx,
                    node.clone().inputs(["x", "amount"]),
                    vec![("x", x.clone()), ("amount", shift.clone())],
                )
                .unwrap();
                check(
                    "BitShift",
                    &got,
                    &want,
                    &format!("BitShift {direction} on {d}"),
                );
            }
        }
    }
}

/// Tile on `d`: repeats along some axes, all, none, of size-1 axes, zero repeats and a
/// rank-0 input, bit for bit with the reference; repeats of the wrong count or negative are
/// errors that say so.
fn tile_on(d: DType) {
    let cases: [(&[usize], &[i64]); 8] = [
        (&[2, 3], &[2, 1]),
        (&[2, 3], &[1, 3]),
        (&[2, 3], &[3, 2]),
        (&[1, 4], &[5, 2]),
        (&[2, 1, 3], &[2, 3, 2]),
        (&[2, 3], &[0, 2]),
        (&[3], &[1]),
        (&[], &[]),
    ];
    for (seed, (shape, repeats)) in cases.into_iter().enumerate() {
        let x = random_tensor(seed as u64, d, shape);
        let r = HostTensor::from_vec(vec![repeats.len()], repeats).unwrap();
        let (got, want) = both_on(
            ctx(),
            Node::new("Tile", "t").inputs(["x", "repeats"]),
            vec![("x", x), ("repeats", r)],
        )
        .unwrap_or_else(|e| panic!("Tile {shape:?} by {repeats:?} on {d}: {e}"));
        let tiled: Vec<usize> = shape
            .iter()
            .zip(repeats)
            .map(|(&s, &r)| s * r as usize)
            .collect();
        assert_eq!(got.shape, tiled);
        check(
            "Tile",
            &got,
            &want,
            &format!("Tile {shape:?} by {repeats:?} on {d}"),
        );
    }
    for (repeats, message) in [
        (&[2i64][..], "has 1 values but the input has rank 2"),
        (&[2, -1], "-1 is negative"),
    ] {
        let r = HostTensor::from_vec(vec![repeats.len()], repeats).unwrap();
        let e = both_on(
            ctx(),
            Node::new("Tile", "t").inputs(["x", "repeats"]),
            vec![("x", random_tensor(1, d, &[2, 3])), ("repeats", r)],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(message), "{e}");
    }
}

dtype_tests!(tile_repeats_the_input, tile_on);

/// GatherElements on `d`: along each axis (negative too), indices of i32 and i64 (negative
/// ones count from the end), indices shorter than the data off the axis, longer along it, and
/// none, and odd lengths on every axis; bit for bit with the reference and, for the spec's example, with its stated result.
/// Indices out of range, of another rank or longer than the data off the axis are errors.
fn gather_elements_on(d: DType) {
    type Case<'a> = (&'a [usize], &'a [usize], i64);
    let cases: [Case; 8] = [
        (&[3, 4], &[3, 4], 1),
        // Odd lengths on every axis and a few thousand elements: the kernel's divisions by
        // multiply-high, and words of 1- and 2-byte outputs that cross rows.
        (&[3, 50, 7], &[3, 61, 7], 1),
        (&[3, 4], &[5, 4], 0),
        (&[3, 4], &[2, 3], -1),
        (&[2, 3, 5], &[2, 2, 5], 1),
        (&[2, 3, 5], &[1, 3, 7], 2),
        (&[6], &[9], 0),
        (&[3, 4], &[0, 4], 0),
    ];
    for (seed, (shape, wanted, axis)) in cases.into_iter().enumerate() {
        let x = random_tensor(seed as u64, d, shape);
        let rank = shape.len() as i64;
        let dim = shape[(axis + rank) as usize % shape.len()] as i64;
        let n: usize = wanted.iter().product();
        // Every index in [-dim, dim), in a scrambled order.
        let picks: Vec<i64> = (0..n as i64)
            .map(|i| (i * 7 + 3) % (2 * dim) - dim)
            .collect();
        for wide in [false, true] {
            let ind = if wide {
                HostTensor::from_vec(wanted.to_vec(), &picks).unwrap()
            } else {
                let narrow: Vec<i32> = picks.iter().map(|&i| i as i32).collect();
                HostTensor::from_vec(wanted.to_vec(), &narrow).unwrap()
            };
            let what = format!("GatherElements {shape:?} by {wanted:?} on axis {axis} on {d}");
            let (got, want) = both_on(
                ctx(),
                Node::new("GatherElements", "g")
                    .inputs(["x", "i"])
                    .attr("axis", Attr::Int(axis)),
                vec![("x", x.clone()), ("i", ind)],
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got.shape, wanted, "{what}");
            check("GatherElements", &got, &want, &what);
        }
    }
    // The spec's example: [[1, 2], [3, 4]] along axis 1 by [[0, 0], [1, 0]].
    let x = cast_host(
        &HostTensor::from_vec(vec![2, 2], &[1i64, 2, 3, 4]).unwrap(),
        d,
    )
    .unwrap();
    let i = HostTensor::from_vec(vec![2, 2], &[0i64, 0, 1, 0]).unwrap();
    let (got, _) = both_on(
        ctx(),
        Node::new("GatherElements", "g")
            .inputs(["x", "i"])
            .attr("axis", Attr::Int(1)),
        vec![("x", x), ("i", i)],
    )
    .unwrap();
    let stated = cast_host(
        &HostTensor::from_vec(vec![2, 2], &[1i64, 1, 4, 3]).unwrap(),
        d,
    )
    .unwrap();
    assert_eq!(got, stated, "the spec's example on {d}");
    for (shape, wanted, picks, message) in [
        (
            &[3usize, 4][..],
            &[3usize, 1][..],
            &[0i64, 4, 1][..],
            "index 4 is out of range",
        ),
        (&[3, 4], &[2, 1], &[0, -5], "index -5 is out of range"),
        (
            &[3, 4],
            &[3],
            &[0, 1, 2],
            "indices has rank 1 but data has rank 2",
        ),
        (
            &[3, 4],
            &[4, 1],
            &[0, 1, 2, 0],
            "indices has 4 along axis 0 but data only 3",
        ),
    ] {
        let e = both_on(
            ctx(),
            Node::new("GatherElements", "g")
                .inputs(["x", "i"])
                .attr("axis", Attr::Int(1)),
            vec![
                ("x", random_tensor(1, d, shape)),
                ("i", HostTensor::from_vec(wanted.to_vec(), picks).unwrap()),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(message), "{e}");
    }
}

dtype_tests!(gather_elements_reads_by_position, gather_elements_on);

/// Dropout on `d` at inference: the output is the input bit for bit and the mask all true,
/// with the ratio and training mode absent, given as false, or training with ratio 0; training
/// with a ratio above 0 is refused, naming the rule.
fn dropout_on(d: DType) {
    let x = random_tensor(5, d, &[3, 7]);
    let ratio = |r: f32| HostTensor::from_vec(vec![], &[r]).unwrap();
    let mode = |t: bool| HostTensor::from_bytes(DType::Bool, vec![], vec![u8::from(t)]).unwrap();
    let cases: [Vec<(&str, HostTensor)>; 3] = [
        vec![],
        vec![("r", ratio(0.3)), ("t", mode(false))],
        vec![("r", ratio(0.0)), ("t", mode(true))],
    ];
    for extra in cases {
        let names: Vec<&str> = ["x"].into_iter().chain(extra.iter().map(|e| e.0)).collect();
        let mut inputs = vec![("x", x.clone())];
        inputs.extend(extra.clone());
        let node = Node::new("Dropout", "drop")
            .inputs(names.clone())
            .outputs(["y", "mask"]);
        let g = inputs
            .iter()
            .fold(Graph::new(), |g, (n, t)| {
                let shape: Vec<Option<usize>> = t.shape.iter().map(|&s| Some(s)).collect();
                g.input(*n, t.dtype, &shape)
            })
            .node(node)
            .output("y")
            .output("mask");
        let owned: Vec<(String, HostTensor)> = inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        let got = Session::new(ctx(), g).unwrap().run_blocking(owned).unwrap();
        assert_eq!(got[0].1, x, "Dropout {names:?} on {d}");
        let all_true = HostTensor::from_bytes(DType::Bool, vec![3, 7], vec![1; 21]).unwrap();
        assert_eq!(got[1].1, all_true, "Dropout {names:?} on {d}: the mask");
    }
    // Training mode drops at random (tests/random.rs): the float types keep each element or
    // zero it, the others are refused in one line.
    let g = Graph::new()
        .input("x", d, &[Some(3), Some(7)])
        .input("r", DType::F32, &[])
        .input("t", DType::Bool, &[])
        .node(
            Node::new("Dropout", "drop")
                .inputs(["x", "r", "t"])
                .outputs(["y", "mask"]),
        )
        .output("y")
        .output("mask");
    let given = vec![
        ("x".to_string(), x.clone()),
        ("r".to_string(), ratio(0.5)),
        ("t".to_string(), mode(true)),
    ];
    let run = Session::new(ctx(), g).unwrap().run_blocking(given);
    if matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        let run = run.unwrap();
        let (xs, ys) = (
            cast_host(&x, DType::F64).unwrap().to_vec::<f64>().unwrap(),
            cast_host(&run[0].1, DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap(),
        );
        // The input doubled in its own type (f16 may overflow to infinity).
        let doubled: Vec<f64> = xs.iter().map(|a| a * 2.0).collect();
        let doubled = HostTensor::from_vec(vec![doubled.len()], &doubled).unwrap();
        let doubled = cast_host(&cast_host(&doubled, d).unwrap(), DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        for (k, (a, y)) in xs.iter().zip(&ys).enumerate() {
            let kept = run[1].1.data[k] != 0;
            let want = if kept { doubled[k] } else { 0.0 };
            assert!(
                *y == want || y.is_nan() && want.is_nan(),
                "Dropout training on {d}, element {k}: {y} from {a}"
            );
        }
    } else {
        let e = run.unwrap_err().to_string();
        assert!(
            e.contains(&format!("Dropout: data is {d}; Dropout takes floats")),
            "{e}"
        );
    }
}

dtype_tests!(dropout_passes_its_input_at_inference, dropout_on);

/// Pad on `d` in every mode: padding before and after, cropping by negative pads (alone, at
/// the end only, and with padding on the other side), wrap and reflect beyond the axis' length, a subset of axes (negative
/// too), rank 0 and 3, and a constant of the data's dtype; bit for bit with the reference, and
/// the spec's reflect and edge examples against their stated results. Pads each mode cannot
/// take, and malformed inputs, are errors naming the rule.
fn pad_on(d: DType) {
    type Case<'a> = (&'a [usize], &'a [i64], Option<&'a [i64]>);
    let cases: [Case; 11] = [
        (&[3, 4], &[1, 2, 2, 1], None),
        // Cropped at the end only (no element added, none cropped in front).
        (&[4, 5], &[0, 0, 0, -2], None),
        (&[6], &[0, -4], None),
        (&[3, 2], &[0, 3, 0, 5], None),
        (&[3, 4], &[0, 1, 0, 2], None),
        (&[5, 4], &[-1, 1, 2, -2], None),
        (&[3, 5], &[2, 3], Some(&[-1])),
        (&[3, 3, 4], &[1, 0, 2, 1], Some(&[0, 2])),
        (&[7], &[-2, 3], None),
        (&[2, 3, 2], &[0, 0, 0, 0, 0, 0], None),
        (&[], &[], None),
    ];
    for mode in ["constant", "reflect", "edge", "wrap"] {
        for (seed, (shape, pads, axes)) in cases.iter().enumerate() {
            let x = random_tensor(seed as u64, d, shape);
            let mut names = vec!["x", "pads"];
            let mut inputs = vec![
                ("x", x),
                (
                    "pads",
                    HostTensor::from_vec(vec![pads.len()], pads).unwrap(),
                ),
            ];
            if mode == "constant" {
                names.push("value");
                inputs.push(("value", random_tensor(99, d, &[])));
            }
            if let Some(axes) = axes {
                if mode != "constant" {
                    names.push("");
                }
                names.push("axes");
                inputs.push((
                    "axes",
                    HostTensor::from_vec(vec![axes.len()], axes).unwrap(),
                ));
            }
            let what = format!("Pad {mode} {shape:?} by {pads:?} on axes {axes:?} on {d}");
            let node = Node::new("Pad", "p")
                .inputs(names)
                .attr("mode", Attr::String(mode.into()));
            let (got, want) =
                both_on(ctx(), node, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            check("Pad", &got, &want, &what);
        }
    }
    // The spec's examples on [[1, 2], [3, 4], [5, 6]], pads [0, 2, 0, 0] (reflect passes the far
    // edge: decision 15).
    let x = cast_host(
        &HostTensor::from_vec(vec![3, 2], &[1i64, 2, 3, 4, 5, 6]).unwrap(),
        d,
    )
    .unwrap();
    for (mode, stated) in [
        ("reflect", [1i64, 2, 1, 2, 3, 4, 3, 4, 5, 6, 5, 6]),
        ("edge", [1, 1, 1, 2, 3, 3, 3, 4, 5, 5, 5, 6]),
        ("constant", [0, 0, 1, 2, 0, 0, 3, 4, 0, 0, 5, 6]),
    ] {
        let (got, _) = both_on(
            ctx(),
            Node::new("Pad", "p")
                .inputs(["x", "pads"])
                .attr("mode", Attr::String(mode.into())),
            vec![
                ("x", x.clone()),
                (
                    "pads",
                    HostTensor::from_vec(vec![4], &[0i64, 2, 0, 0]).unwrap(),
                ),
            ],
        )
        .unwrap();
        let stated = cast_host(&HostTensor::from_vec(vec![3, 4], &stated).unwrap(), d).unwrap();
        assert_eq!(got, stated, "the spec's {mode} example on {d}");
    }
    let wrong_value = if d == DType::I32 {
        DType::F32
    } else {
        DType::I32
    };
    for (mode, shape, pads, value, message) in [
        (
            "reflect",
            &[3usize, 1][..],
            &[0i64, 1, 0, 0][..],
            None,
            "reflecting needs 2 or more",
        ),
        (
            "edge",
            &[3, 2],
            &[0, -2, 0, 1],
            Some(d),
            "empty after cropping",
        ),
        (
            "constant",
            &[3, 4],
            &[-2, 0, -2, 0],
            None,
            "crop axis 0 by more than its 3",
        ),
        (
            "constant",
            &[3, 4],
            &[1, 1],
            None,
            "it needs 2 per padded axis (4)",
        ),
        (
            "constant",
            &[3, 4],
            &[1, 1, 1, 1],
            Some(wrong_value),
            "the data's type",
        ),
        (
            "mirror",
            &[3, 4],
            &[1, 1, 1, 1],
            None,
            "is not one of constant",
        ),
    ] {
        let mut inputs = vec![
            ("x", random_tensor(1, d, shape)),
            (
                "pads",
                HostTensor::from_vec(vec![pads.len()], pads).unwrap(),
            ),
        ];
        let mut names = vec!["x", "pads"];
        if let Some(v) = value {
            names.push("value");
            inputs.push(("value", random_tensor(2, v, &[])));
        }
        let e = both_on(
            ctx(),
            Node::new("Pad", "p")
                .inputs(names)
                .attr("mode", Attr::String(mode.into())),
            inputs,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(message), "{mode} {pads:?}: {e}");
    }
}

dtype_tests!(pad_fills_and_mirrors, pad_on);

/// Small positive values of `d` (1 to 5), for reductions whose results stay exact.
fn small_values(d: DType, shape: &[usize], seed: i64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n as i64).map(|i| (i * 3 + seed) % 5 + 1).collect();
    cast_host(&HostTensor::from_vec(shape.to_vec(), &v).unwrap(), d).unwrap()
}

/// Scatter indices in `[-dim, dim)` for `n` updates, repeating some.
fn scatter_picks(n: usize, dim: usize, seed: i64) -> Vec<i64> {
    let dim = dim as i64;
    (0..n as i64)
        .map(|i| (i * 5 + seed) % (2 * dim) - dim)
        .collect()
}

/// ScatterElements and ScatterND on `d`: along each axis, updates shorter than the data, i32
/// and i64 indices with repeats and negative values, rows, pairs and single elements of ND
/// tuples and an empty tuple (the whole data); replacing (random bits, bit for bit) and every
/// reduction on small values (repeats merged in order), against the reference and the spec's
/// example; i64, u64 and f64 (its reductions) natively and emulated on u32 pairs; malformed
/// inputs are errors naming the rule.
fn scatter_on(d: DType) {
    let reductions: &[&str] = if d == DType::Bool {
        &["none"]
    } else {
        &["none", "add", "mul", "max", "min"]
    };
    let elements: [(&[usize], &[usize], i64); 5] = [
        (&[3, 4], &[3, 4], 0),
        (&[3, 4], &[2, 3], 1),
        (&[4, 3, 5], &[6, 2, 5], 0),
        (&[4, 3, 5], &[2, 3, 4], -1),
        (&[9], &[12], 0),
    ];
    let nd: [(&[usize], &[usize]); 6] = [
        // Slices of 16 elements: whole quads for every width (claimed by quads on GPUs).
        (&[4, 16], &[3, 1]),
        (&[4, 5, 3], &[3, 1]),
        (&[4, 5, 3], &[5, 2]),
        (&[4, 5, 3], &[2, 3, 3]),
        (&[6], &[7, 1]),
        (&[2, 3], &[2, 0]),
    ];
    // f64's reductions also on the emulation (without SHADER_F64; with and without
    // SHADER_INT64); replacing moves bits the same way everywhere.
    let f64_emulated: Vec<_> = match d {
        DType::F64 => [ctx_emulating_64_bit(), ctx_without_f64()]
            .into_iter()
            .flat_map(|c| reductions[1..].iter().map(move |r| (c, r)))
            .collect(),
        _ => Vec::new(),
    };
    for (c, &reduction) in contexts_for(d)
        .into_iter()
        .flat_map(|c| reductions.iter().map(move |r| (c, r)))
        .chain(f64_emulated)
    {
        let values = |shape: &[usize], seed: u64| match reduction {
            "none" => random_tensor(seed, d, shape),
            _ => small_values(d, shape, seed as i64),
        };
        for (seed, (shape, wanted, axis)) in elements.into_iter().enumerate() {
            let dim = shape[(axis + shape.len() as i64) as usize % shape.len()];
            let n: usize = wanted.iter().product();
            let picks = scatter_picks(n, dim, seed as i64);
            let wide = seed % 2 == 0;
            let ind = if wide {
                HostTensor::from_vec(wanted.to_vec(), &picks).unwrap()
            } else {
                let narrow: Vec<i32> = picks.iter().map(|&i| i as i32).collect();
                HostTensor::from_vec(wanted.to_vec(), &narrow).unwrap()
            };
            let what = format!(
                "ScatterElements {reduction} {shape:?} by {wanted:?} on axis {axis} on {d}"
            );
            let (got, want) = both_on(
                c,
                Node::new("ScatterElements", "s")
                    .inputs(["x", "i", "u"])
                    .attr("axis", Attr::Int(axis))
                    .attr("reduction", Attr::String(reduction.into())),
                vec![
                    ("x", values(shape, seed as u64)),
                    ("i", ind),
                    ("u", values(wanted, 50 + seed as u64)),
                ],
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            check("ScatterElements", &got, &want, &what);
        }
        for (seed, (shape, ishape)) in nd.into_iter().enumerate() {
            let (&k, tuples) = ishape.split_last().unwrap();
            let n: usize = tuples.iter().product();
            let mut picks = Vec::with_capacity(n * k);
            for t in 0..n {
                for (j, &dim) in shape[..k].iter().enumerate() {
                    picks.push(scatter_picks(n, dim, (t * 7 + j) as i64)[t]);
                }
            }
            let ind = HostTensor::from_vec(ishape.to_vec(), &picks).unwrap();
            let ushape: Vec<usize> = tuples.iter().chain(&shape[k..]).copied().collect();
            let what = format!("ScatterND {reduction} {shape:?} by {ishape:?} on {d}");
            let (got, want) = both_on(
                c,
                Node::new("ScatterND", "s")
                    .inputs(["x", "i", "u"])
                    .attr("reduction", Attr::String(reduction.into())),
                vec![
                    ("x", values(shape, seed as u64)),
                    ("i", ind),
                    ("u", values(&ushape, 70 + seed as u64)),
                ],
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            check("ScatterND", &got, &want, &what);
        }
    }
    // Our `unique_indices`: updates on distinct elements (one invocation each with the GPU
    // kernels, or one per 16-byte quad of rows the index repeats over), indices repeated
    // along axes of the updates, i32 and i64, negative ones.
    // (data, updates, indices' shape, axis, indices)
    type DistinctCase<'a> = (&'a [usize], &'a [usize], &'a [usize], i64, &'a [i64]);
    let distinct: [DistinctCase; 6] = [
        (
            &[4, 6, 5],
            &[4, 3, 5],
            &[4, 3, 1],
            1,
            &[0, 2, -1, 1, 3, -2, 5, 0, 2, 4, 1, -6],
        ),
        (&[5, 7], &[3, 7], &[3, 1], 0, &[2, -5, 4]),
        (&[9], &[4], &[4], 0, &[-1, 3, 0, 5]),
        (
            &[2, 3, 8],
            &[2, 3, 8],
            &[1, 1, 8],
            -1,
            &[7, 6, -3, 4, 3, 2, 1, -8],
        ),
        // Rows of 16 elements: whole quads for every width.
        (
            &[3, 5, 16],
            &[3, 2, 16],
            &[3, 2, 1],
            1,
            &[4, 0, -1, 2, 1, 3],
        ),
        // Update rows of 2 x 8 at the start of data rows of 3 x 8: whole quads from 2 bytes.
        (
            &[2, 4, 3, 8],
            &[2, 2, 2, 8],
            &[2, 2, 1, 1],
            1,
            &[3, -4, 1, 2],
        ),
    ];
    for (seed, (shape, wanted, ishape, axis, picks)) in distinct.into_iter().enumerate() {
        let ind = if seed % 2 == 0 {
            HostTensor::from_vec(ishape.to_vec(), picks).unwrap()
        } else {
            let narrow: Vec<i32> = picks.iter().map(|&i| i as i32).collect();
            HostTensor::from_vec(ishape.to_vec(), &narrow).unwrap()
        };
        let what = format!("ScatterElements unique {shape:?} by {ishape:?} to {wanted:?} on {d}");
        let x = random_tensor(90 + seed as u64, d, shape);
        let u = random_tensor(95 + seed as u64, d, wanted);
        let (got, want) = both_on(
            ctx(),
            Node::new("ScatterElements", "s")
                .inputs(["x", "i", "u"])
                .attr("axis", Attr::Int(axis))
                .attr("unique_indices", Attr::Int(1)),
            vec![("x", x.clone()), ("i", ind.clone()), ("u", u.clone())],
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        check("ScatterElements", &got, &want, &what);
        // The indices spelled out per update give the same result without the promise.
        let full = run_graph(
            &Graph::new()
                .input(
                    "i",
                    ind.dtype,
                    &ishape.iter().map(|&n| Some(n)).collect::<Vec<_>>(),
                )
                .input("s", DType::I64, &[Some(wanted.len())])
                .node(Node::new("Expand", "e").inputs(["i", "s"]).outputs(["y"]))
                .output("y"),
            &[
                ("i".to_string(), ind),
                (
                    "s".to_string(),
                    HostTensor::from_vec(
                        vec![wanted.len()],
                        &wanted.iter().map(|&n| n as i64).collect::<Vec<_>>(),
                    )
                    .unwrap(),
                ),
            ],
            &Default::default(),
        )
        .unwrap()
        .remove(0);
        let (plain, _) = both_on(
            ctx(),
            Node::new("ScatterElements", "s")
                .inputs(["x", "i", "u"])
                .attr("axis", Attr::Int(axis)),
            vec![("x", x), ("i", full), ("u", u)],
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got, plain, "{what}: against the plain ScatterElements");
    }
    // The spec's first ScatterElements example (updates as small integers).
    let x = cast_host(&HostTensor::from_vec(vec![3, 3], &[0i64; 9]).unwrap(), d).unwrap();
    let i = HostTensor::from_vec(vec![2, 3], &[1i64, 0, 2, 0, 2, 1]).unwrap();
    let u = cast_host(
        &HostTensor::from_vec(vec![2, 3], &[1i64, 2, 3, 4, 5, 6]).unwrap(),
        d,
    )
    .unwrap();
    let (got, _) = both_on(
        ctx(),
        Node::new("ScatterElements", "s").inputs(["x", "i", "u"]),
        vec![("x", x.clone()), ("i", i.clone()), ("u", u.clone())],
    )
    .unwrap();
    let stated = [4i64, 2, 0, 1, 0, 6, 0, 5, 3];
    let stated = cast_host(&HostTensor::from_vec(vec![3, 3], &stated).unwrap(), d).unwrap();
    assert_eq!(got, stated, "the spec's example on {d}");
    let bad: [(&str, &str, HostTensor, &str); 5] = [
        (
            "ScatterElements",
            "none",
            HostTensor::from_vec(vec![2, 3], &[1i64, 0, 3, 0, 2, 1]).unwrap(),
            "index 3 is out of range",
        ),
        (
            "ScatterElements",
            "none",
            HostTensor::from_vec(vec![3, 2], &[0i64; 6]).unwrap(),
            "must have one shape",
        ),
        (
            "ScatterElements",
            "sum",
            i.clone(),
            "is not one of none, add",
        ),
        (
            "ScatterND",
            "none",
            HostTensor::from_vec(vec![3, 1], &[0i64, 1, 2]).unwrap(),
            "updates has shape [2, 3]; indices [3, 1] on data [3, 3] need [3, 3]",
        ),
        (
            "ScatterND",
            "none",
            HostTensor::from_vec(vec![2, 2], &[0i64, 1, 2, 3]).unwrap(),
            "index 3 is out of range for axis 1",
        ),
    ];
    for (unique, reduction, indices, message) in [
        (
            1,
            "add",
            i.clone(),
            "unique_indices is 1 with reduction 'add'; it needs reduction none",
        ),
        (
            2,
            "none",
            i.clone(),
            "unique_indices is 2; it must be 0 or 1",
        ),
        (
            1,
            "none",
            HostTensor::from_vec(vec![2, 2], &[0i64; 4]).unwrap(),
            "indices [2, 2] must broadcast to the updates' shape [2, 3]",
        ),
    ] {
        let e = both_on(
            ctx(),
            Node::new("ScatterElements", "s")
                .inputs(["x", "i", "u"])
                .attr("reduction", Attr::String(reduction.into()))
                .attr("unique_indices", Attr::Int(unique)),
            vec![("x", x.clone()), ("i", indices), ("u", u.clone())],
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains(message), "unique_indices {unique}: {e:?}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    for (op, reduction, indices, message) in bad {
        let u = if op == "ScatterND" && indices.shape == [2, 2] {
            cast_host(&HostTensor::from_vec(vec![2], &[1i64, 2]).unwrap(), d).unwrap()
        } else {
            u.clone()
        };
        let e = both_on(
            ctx(),
            Node::new(op, "s")
                .inputs(["x", "i", "u"])
                .attr("reduction", Attr::String(reduction.into())),
            vec![("x", x.clone()), ("i", indices), ("u", u)],
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains(message), "{op} {reduction}: {e:?}");
    }
}

dtype_tests!(scatter_writes_and_reduces_in_order, scatter_on);

// Scatters whose updates are walked in order by one invocation each (ScatterND of single
// elements, ScatterElements along a long axis) over 20 000 and 40 000 updates, the indices
// repeating so that the last write (or the reduction in order) decides across the stretches
// the walk is cut into: lavapipe counts every loop iteration of an invocation against one
// budget and then stops its loops, which kept only the first 13 107 of ScatterND's updates
// and 32 767 of ScatterElements' when one dispatch walked them all. Bit for bit against the
// reference, on 4-byte, 1-byte (compare-and-swap) and 8-byte elements.
#[test]
fn long_scatters_apply_every_update_in_order() {
    let (n, len) = (20_000usize, 30_000usize);
    let picks: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % len as i64).collect();
    for d in [DType::F32, DType::U8, DType::I64] {
        for c in contexts_for(d) {
            for reduction in ["none", "add"] {
                let values = |shape: &[usize], seed: i64| small_values(d, shape, seed);
                let what = format!("ScatterND {reduction} of {n} elements on {d}");
                let (got, want) = both_on(
                    c,
                    Node::new("ScatterND", "s")
                        .inputs(["x", "i", "u"])
                        .attr("reduction", Attr::String(reduction.into())),
                    vec![
                        ("x", values(&[len], 1)),
                        ("i", HostTensor::from_vec(vec![n, 1], &picks).unwrap()),
                        ("u", values(&[n], 2)),
                    ],
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                check("ScatterND", &got, &want, &what);
                let long: Vec<i64> = picks.iter().chain(&picks).copied().collect();
                let what = format!("ScatterElements {reduction} along {} on {d}", 2 * n);
                let (got, want) = both_on(
                    c,
                    Node::new("ScatterElements", "s")
                        .inputs(["x", "i", "u"])
                        .attr("axis", Attr::Int(1))
                        .attr("reduction", Attr::String(reduction.into())),
                    vec![
                        ("x", values(&[1, len], 3)),
                        ("i", HostTensor::from_vec(vec![1, 2 * n], &long).unwrap()),
                        ("u", values(&[1, 2 * n], 4)),
                    ],
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                check("ScatterElements", &got, &want, &what);
            }
        }
    }
}

/// OneHot with values of `d`: indices of i32, i64 and f32 (truncated), negative ones and ones
/// out of range (a row of `off`), along every axis (negative too), against the reference and
/// the spec's example; EyeLike of `d` (and to another dtype) on every diagonal, against the
/// reference and a stated identity.
fn one_hot_and_eye_on(d: DType) {
    // Bools as the canonical 0 and 1 the kernels write (random bytes are not bools).
    let values = match d {
        DType::Bool => HostTensor::from_bytes(d, vec![2], vec![0, 1]).unwrap(),
        _ => random_tensor(3, d, &[2]),
    };
    let picks = [0i64, 3, -1, 5, -4, 2, -6, 1];
    let wide = HostTensor::from_vec(vec![2, 4], &picks).unwrap();
    let narrow = cast_host(&wide, DType::I32).unwrap();
    let float =
        HostTensor::from_vec(vec![2, 4], &[0.7f32, 3.2, -1.5, 5.0, -4.0, 2.9, -6.0, 1.0]).unwrap();
    for (k, indices) in [wide, narrow, float].into_iter().enumerate() {
        for axis in [-3i64, -1, 0, 1, 2] {
            let depth = HostTensor::from_vec(vec![], &[5i64]).unwrap();
            let what = format!("OneHot {:?} on axis {axis} into {d}", indices.dtype);
            let (got, want) = both_on(
                ctx(),
                Node::new("OneHot", "o")
                    .inputs(["i", "depth", "v"])
                    .attr("axis", Attr::Int(axis)),
                vec![
                    ("i", indices.clone()),
                    ("depth", depth),
                    ("v", values.clone()),
                ],
            )
            .unwrap_or_else(|e| panic!("{what} ({k}): {e}"));
            check("OneHot", &got, &want, &what);
        }
    }
    // The spec's example: indices [1, 9, 2], depth 10, values [off, on], axis -1 (9 is in range).
    let on_off = cast_host(&HostTensor::from_vec(vec![2], &[0i64, 1]).unwrap(), d).unwrap();
    let (got, _) = both_on(
        ctx(),
        Node::new("OneHot", "o").inputs(["i", "depth", "v"]),
        vec![
            ("i", HostTensor::from_vec(vec![3], &[1i64, 9, 2]).unwrap()),
            ("depth", HostTensor::from_vec(vec![], &[10f32]).unwrap()),
            ("v", on_off),
        ],
    )
    .unwrap();
    let mut stated = vec![0i64; 30];
    for (row, hot) in [1, 9, 2].into_iter().enumerate() {
        stated[row * 10 + hot] = 1;
    }
    let stated = cast_host(&HostTensor::from_vec(vec![3, 10], &stated).unwrap(), d).unwrap();
    assert_eq!(got, stated, "the spec's OneHot example on {d}");

    for (shape, k) in [
        ([3usize, 3], 0i64),
        ([3, 5], 2),
        ([4, 3], -1),
        ([2, 3], 7),
        ([0, 3], 0),
    ] {
        let x = random_tensor(9, d, &shape);
        for to in [None, Some(DType::F32)] {
            let mut node = Node::new("EyeLike", "e")
                .inputs(["x"])
                .attr("k", Attr::Int(k));
            if let Some(to) = to {
                node = node.attr("dtype", Attr::String(to.name().into()));
            }
            let what = format!("EyeLike {shape:?} k {k} of {d} to {to:?}");
            let (got, want) = both_on(ctx(), node, vec![("x", x.clone())])
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            check("EyeLike", &got, &want, &what);
        }
    }
    let (got, _) = both_on(
        ctx(),
        Node::new("EyeLike", "e").inputs(["x"]),
        vec![("x", random_tensor(1, d, &[2, 2]))],
    )
    .unwrap();
    let identity = cast_host(
        &HostTensor::from_vec(vec![2, 2], &[1i64, 0, 0, 1]).unwrap(),
        d,
    )
    .unwrap();
    assert_eq!(got, identity, "EyeLike's identity on {d}");
}

dtype_tests!(one_hot_and_eye_like_place_values, one_hot_and_eye_on);

/// Hardmax on the float dtypes along every axis and, as before opset 13, over all axes from
/// one on (ties go to the first), against the reference.
#[test]
fn hardmax_marks_the_first_largest() {
    for d in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        // Small integers: ties on purpose.
        let v: Vec<i64> = (0..60).map(|i| (i * 7 + 3) % 9).collect();
        let x = cast_host(&HostTensor::from_vec(vec![3, 4, 5], &v).unwrap(), d).unwrap();
        for (axis, coerce) in [(0i64, 0i64), (1, 0), (-1, 0), (1, 1), (0, 1)] {
            let what = format!("Hardmax axis {axis} coerce {coerce} on {d}");
            let (got, want) = both_on(
                ctx(),
                Node::new("Hardmax", "h")
                    .inputs(["x"])
                    .attr("axis", Attr::Int(axis))
                    .attr("coerce_2d", Attr::Int(coerce)),
                vec![("x", x.clone())],
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            check("Hardmax", &got, &want, &what);
        }
    }
}

/// Halves round to even in f64 as in f32: Round and GridSample's nearest mode. lavapipe's
/// built-in f64 round takes halves toward zero on some CPUs (AMD EPYC seen), so both are
/// written out from floor.
#[test]
fn f64_halves_round_to_even() {
    let round = Graph::new()
        .input("x", DType::F64, &[Some(8)])
        .node(Node::new("Round", "r").inputs(["x"]).outputs(["y"]))
        .output("y");
    let x =
        HostTensor::from_vec(vec![8], &[0.5f64, 1.5, 2.5, -0.5, -1.5, 3.5, 2.4999, -0.3]).unwrap();
    let y = Session::new(ctx(), round)
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap();
    let y = y[0].1.to_vec::<f64>().unwrap();
    assert_eq!(y, [0.0, 2.0, 2.0, -0.0, -2.0, 4.0, 2.0, -0.0]);
    assert!(y[3].is_sign_negative() && y[7].is_sign_negative());

    // Columns 0.5, 1.5 and 2.5 of a row of 4 (align_corners 0: g = (2 x + 1) / 4 - 1).
    let sample = Graph::new()
        .input("X", DType::F64, &[Some(1), Some(1), Some(1), Some(4)])
        .input("grid", DType::F64, &[Some(1), Some(1), Some(3), Some(2)])
        .node(
            Node::new("GridSample", "g")
                .inputs(["X", "grid"])
                .outputs(["Y"])
                .attr("mode", Attr::String("nearest".into())),
        )
        .output("Y");
    let image = HostTensor::from_vec(vec![1, 1, 1, 4], &[10.0f64, 20.0, 30.0, 40.0]).unwrap();
    let grid = HostTensor::from_vec(vec![1, 1, 3, 2], &[-0.5f64, 0.0, 0.0, 0.0, 0.5, 0.0]).unwrap();
    let y = Session::new(ctx(), sample)
        .unwrap()
        .run_blocking(vec![("X".into(), image), ("grid".into(), grid)])
        .unwrap();
    assert_eq!(y[0].1.to_vec::<f64>().unwrap(), [10.0, 30.0, 30.0]);

    // QuantizeLinear's cast (rounded, then saturated).
    let quantize = Graph::new()
        .input("x", DType::F64, &[Some(8)])
        .node(
            Node::new("Cast", "q")
                .inputs(["x"])
                .outputs(["y"])
                .attr("to", Attr::String("i8".into()))
                .attr("quantize", Attr::Int(1)),
        )
        .output("y");
    let x =
        HostTensor::from_vec(vec![8], &[0.5f64, 1.5, 2.5, -2.5, -0.5, 3.5, 126.5, 300.0]).unwrap();
    let y = Session::new(ctx(), quantize)
        .unwrap()
        .run_blocking(vec![("x".into(), x)])
        .unwrap();
    assert_eq!(
        y[0].1.to_vec::<i8>().unwrap(),
        [0, 2, 2, -2, 0, 4, 126, 127]
    );
}
