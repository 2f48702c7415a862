//! f16 conversions by WGSL's built-ins (where a context's probe finds them exact) and by
//! integer arithmetic: every f16 value widened, f32 values at and around every rounding
//! boundary narrowed, and fused f16 chains, on a context of each kind, bit for bit against the
//! host's conversions and the CPU reference.

mod common;
use std::sync::OnceLock;

use common::*;
use wgpu_ops::gpu::f16::{narrowed_bits, widened_bits};
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{Context, ContextOptions, DType, HostTensor, Session};

/// A context converting with the built-ins where exact (`Some(true)`), or by integer
/// arithmetic (`Some(false)`).
fn context(native: bool) -> &'static Context {
    static CONTEXTS: [OnceLock<Context>; 2] = [OnceLock::new(), OnceLock::new()];
    CONTEXTS[usize::from(native)].get_or_init(|| {
        Context::new_blocking(ContextOptions {
            cpu_kernels: cpu_kernels_from_env(),
            native_f16_conversions: Some(native),
            ..Default::default()
        })
        .expect("a GPU adapter (lavapipe)")
    })
}

fn contexts() -> [&'static Context; 2] {
    let [integer, native] = [context(false), context(true)];
    assert!(!integer.native_f16_conversions());
    // lavapipe's built-ins are exact: the suite checks them there.
    if native.adapter_info().name.contains("llvmpipe") {
        assert!(native.native_f16_conversions());
    }
    [integer, native]
}

fn cast(to: DType) -> Node {
    Node::new("Cast", "c")
        .attr("to", Attr::String(to.name().into()))
        .inputs(["x"])
        .outputs(["y"])
}

/// The graph of `nodes` from `x` to `y` on `ctx`.
fn run(ctx: &Context, nodes: &[Node], x: &HostTensor) -> HostTensor {
    Session::new(ctx, graph(nodes, x))
        .unwrap()
        .run_blocking(vec![("x".into(), x.clone())])
        .unwrap()
        .remove(0)
        .1
}

fn graph(nodes: &[Node], x: &HostTensor) -> Graph {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    let mut g = Graph::new().input("x", x.dtype, &shape);
    for n in nodes {
        g = g.node(n.clone());
    }
    g.output("y")
}

fn bits_u16(t: &HostTensor) -> Vec<u16> {
    t.data
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

fn bits_u32(t: &HostTensor) -> Vec<u32> {
    t.data
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn every_f16_value_widens_exactly() {
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let x = HostTensor::from_bytes(DType::F16, vec![1 << 16], all).unwrap();
    for ctx in contexts() {
        let got = bits_u32(&run(ctx, &[cast(DType::F32)], &x));
        for h in 0..=u16::MAX {
            assert_eq!(
                got[usize::from(h)],
                widened_bits(h),
                "f16 {h:#06x} (built-ins: {})",
                ctx.native_f16_conversions()
            );
            // IEEE's widening, which the host reference follows (NaN: a NaN of its sign).
            let want = half::f16::from_bits(h).to_f32();
            let got = f32::from_bits(got[usize::from(h)]);
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()));
        }
    }
}

/// f32 values at, beside and halfway between consecutive f16 values (both signs, subnormals
/// included), past f16's range, f32 subnormals, infinities and NaN with payloads.
fn boundaries() -> Vec<u32> {
    let mut out = vec![
        0x7f80_0000,
        0x7fc0_0000,
        0x7f80_2001,
        0xffc0_1234,
        1,
        0x007f_ffff,
    ];
    for h in 0..0x7c00u16 {
        let lo = f32::from_bits(widened_bits(h));
        let hi = f32::from_bits(widened_bits(h + 1));
        let mid = (f64::from(lo) + f64::from(hi)) / 2.0;
        let mid = mid as f32;
        for v in [lo, mid, hi] {
            for b in [v.to_bits().wrapping_sub(1), v.to_bits(), v.to_bits() + 1] {
                out.push(b);
                out.push(b | 0x8000_0000);
            }
        }
    }
    // Past the largest f16 (65504) to and beyond 65520, where rounding reaches infinity.
    for v in [65504.0f32, 65519.996, 65520.0, 65536.0, 1e9] {
        out.push(v.to_bits());
        out.push((-v).to_bits());
    }
    out
}

#[test]
fn f32_narrows_to_nearest_even() {
    let values = boundaries();
    let x = HostTensor::from_bytes(
        DType::F32,
        vec![values.len()],
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
    .unwrap();
    for ctx in contexts() {
        let got = bits_u16(&run(ctx, &[cast(DType::F16)], &x));
        for (k, &v) in values.iter().enumerate() {
            assert_eq!(
                u32::from(got[k]),
                narrowed_bits(v),
                "f32 {v:#010x} ({:e}; built-ins: {})",
                f32::from_bits(v),
                ctx.native_f16_conversions()
            );
        }
    }
}

/// A fused chain of f16 steps rounds after each, as the ops one by one do: the same bits on
/// both contexts and in the CPU reference.
#[test]
fn fused_f16_chains_round_each_step() {
    // Whole 16-byte quads of output: one dispatch (a partial last quad takes a second).
    let mut values: Vec<u32> = boundaries().into_iter().step_by(7).collect();
    values.truncate(values.len() / 8 * 8);
    let wide = HostTensor::from_bytes(
        DType::F32,
        vec![values.len()],
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
    .unwrap();
    let x = run(context(false), &[cast(DType::F16)], &wide);
    let step =
        |op: &str, name: &str, a: &str, b: &str| Node::new(op, name).inputs([a, b]).outputs([name]);
    let nodes = [
        step("Mul", "sq", "x", "x"),
        step("Add", "s", "sq", "x"),
        step("Div", "q", "s", "x"),
        step("Sub", "d", "q", "x"),
        Node::new("Tanh", "y").inputs(["d"]).outputs(["y"]),
    ];
    let want = run_graph(
        &graph(&nodes, &x),
        &[("x".into(), x.clone())],
        &Default::default(),
    )
    .unwrap()
    .remove(0);
    let mut results = Vec::new();
    for ctx in contexts() {
        let before = ctx.stats().dispatches;
        let got = run(ctx, &nodes, &x);
        assert_eq!(ctx.stats().dispatches - before, 1, "one fused kernel");
        let (g, w) = (bits_u16(&got), bits_u16(&want));
        for k in 0..g.len() {
            let nan = |b: u16| b & 0x7c00 == 0x7c00 && b & 0x3ff != 0;
            // Tanh may differ from the reference by the f16 rounding of a few f32 ulp.
            let close = half::f16::from_bits(g[k]).to_f32() - half::f16::from_bits(w[k]).to_f32();
            assert!(
                g[k] == w[k] || (nan(g[k]) && nan(w[k])) || close.abs() <= 2f32.powi(-11),
                "x {:#06x}: GPU {:#06x}, reference {:#06x} (built-ins: {})",
                bits_u16(&x)[k],
                g[k],
                w[k],
                ctx.native_f16_conversions()
            );
        }
        results.push(g);
    }
    assert_eq!(results[0], results[1], "built-in and integer conversions");
}
