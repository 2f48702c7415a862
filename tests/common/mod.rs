//! Shared test helpers: one GPU context per test binary, GPU-vs-reference comparisons.
#![allow(dead_code)]

pub mod onnx_proto;

use std::sync::OnceLock;

use wgpu_ops::{Context, ContextOptions, DType, HostTensor, Tensor};

/// The context every GPU test uses. No adapter is a failure, never a skip.
/// `WGPU_OPS_CPU_KERNELS=0` runs the suite with the kernels meant for GPUs on a CPU adapter
/// (lavapipe), so those variants are checked without a GPU; `1` the reverse on a GPU.
pub fn cpu_kernels_from_env() -> Option<bool> {
    std::env::var("WGPU_OPS_CPU_KERNELS").ok().map(|v| v != "0")
}

/// `webgpu_limits` of contexts whose bindings or buffers hold a few hundred bytes (to reach
/// the windowed and multi-buffer paths with small tensors): the adapter's own limits, whatever
/// `WGPU_OPS_WEBGPU_LIMITS` asks (a window must hold an element from an aligned offset, and no
/// device pairs WebGPU's 256-byte alignment with bindings of a few hundred bytes).
pub const ADAPTER_LIMITS: Option<bool> = Some(false);

pub fn ctx() -> &'static Context {
    static CTX: OnceLock<Context> = OnceLock::new();
    CTX.get_or_init(|| {
        let _ = env_logger::builder().is_test(true).try_init();
        Context::new_blocking(ContextOptions {
            cpu_kernels: cpu_kernels_from_env(),
            ..Default::default()
        })
        .expect("no GPU adapter: install mesa-vulkan-drivers (lavapipe) to run the GPU tests")
    })
}

/// A context without wgpu's 64-bit shader features (as in browsers): i64 and u64 run on the
/// 32-bit emulation.
#[allow(dead_code)]
pub fn ctx_emulating_64_bit() -> &'static Context {
    static CTX: OnceLock<Context> = OnceLock::new();
    CTX.get_or_init(|| {
        lacking(
            ContextOptions {
                native_64_bit: Some(false),
                ..Default::default()
            },
            wgpu_ops::gpu::Features::SHADER_INT64,
        )
    })
}

/// A context like [`ctx_emulating_64_bit`] whose MatMuls all take `kernel` (each kernel has
/// its emulated variant, whichever the shape rule picks on this adapter).
#[allow(dead_code)]
pub fn ctx_emulating_64_bit_with(kernel: wgpu_ops::MatMulKernel) -> Context {
    lacking(
        ContextOptions {
            native_64_bit: Some(false),
            matmul: Some(wgpu_ops::MatMulChoice::Always(kernel)),
            ..Default::default()
        },
        wgpu_ops::gpu::Features::SHADER_INT64,
    )
}

/// A context with wgpu's `SHADER_INT64` (where the adapter has it) and without its
/// `SHADER_F64`, as GPUs with 64-bit integers and no double precision give it: i64 and u64
/// native, f64 on the emulation.
#[allow(dead_code)]
pub fn ctx_without_f64() -> &'static Context {
    static CTX: OnceLock<Context> = OnceLock::new();
    CTX.get_or_init(|| {
        lacking(
            ContextOptions {
                native_f64: Some(false),
                ..Default::default()
            },
            wgpu_ops::gpu::Features::SHADER_F64,
        )
    })
}

/// A context of `options` with the kernel set from the environment, checked to lack
/// `missing`.
fn lacking(options: ContextOptions, missing: wgpu_ops::gpu::Features) -> Context {
    let ctx = Context::new_blocking(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..options
    })
    .expect("no GPU adapter: install mesa-vulkan-drivers (lavapipe) to run the GPU tests");
    assert!(!ctx.features().contains(missing));
    ctx
}

/// The contexts a test of `dtype` runs on: the default one, and for i64 and u64 the one that
/// emulates them (the same results, bit for bit).
#[allow(dead_code)]
pub fn contexts_for(dtype: DType) -> Vec<&'static Context> {
    let mut all = vec![ctx()];
    if matches!(dtype, DType::I64 | DType::U64) {
        all.push(ctx_emulating_64_bit());
    }
    all
}

/// A context of the test's own (the kernel set from the environment, as [`ctx`]), whose
/// statistics count only the test's own work.
pub fn own_ctx() -> Context {
    Context::new_blocking(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .expect("no GPU adapter")
}

/// A context of its own without read-backs (as the browser runs graphs): an op whose plan
/// needs values computed on the GPU is refused instead (see `ContextOptions::read_back`).
pub fn ctx_without_read_back() -> Context {
    Context::new_blocking(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        read_back: Some(false),
        ..Default::default()
    })
    .expect("no GPU adapter")
}

/// `got` has `want`'s dtype and shape and each element is within `atol + rtol * |want|` of
/// it (compared as f64; NaN where NaN, an infinity where the same infinity).
pub fn assert_close(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64, what: &str) {
    assert_eq!((got.dtype, &got.shape), (want.dtype, &want.shape), "{what}");
    for (i, (g, w)) in as_f64(got).iter().zip(as_f64(want)).enumerate() {
        assert!(
            (g.is_nan() && w.is_nan()) || *g == w || (g - w).abs() <= atol + rtol * w.abs(),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

/// The values of a float tensor as f64 (exact: every float dtype widens without rounding).
pub fn as_f64(t: &HostTensor) -> Vec<f64> {
    wgpu_ops::reference::cast_host(t, DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

/// Runs the one-node graph `node` (output `y`) on `ctx` and on the CPU reference interpreter:
/// the GPU's result (or its error) and the reference's.
pub fn both_on(
    ctx: &Context,
    node: wgpu_ops::graph::Node,
    inputs: Vec<(&str, HostTensor)>,
) -> Result<(HostTensor, HostTensor), wgpu_ops::Error> {
    let mut g = wgpu_ops::graph::Graph::new();
    for (name, t) in &inputs {
        let shape: Vec<Option<usize>> = t.shape.iter().map(|&d| Some(d)).collect();
        g = g.input(*name, t.dtype, &shape);
    }
    let g = g.node(node.outputs(["y"])).output("y");
    let inputs: Vec<(String, HostTensor)> = inputs
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
    let got = wgpu_ops::Session::new(ctx, g.clone())?
        .run_blocking(inputs.clone())?
        .remove(0)
        .1;
    let want = wgpu_ops::reference::graph::run_graph(&g, &inputs, &Default::default())
        .unwrap()
        .remove(0);
    Ok((got, want))
}

/// Deterministic pseudo-random bytes (splitmix64), so data is not all zeros or a ramp.
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut state = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

pub fn random_tensor(seed: u64, dtype: DType, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let mut data = bytes(seed, n * dtype.size());
    if let Some(bits) = dtype.packed_bits() {
        // Types narrower than a byte: the low bits only.
        data.iter_mut().for_each(|b| *b &= (1u8 << bits) - 1);
    }
    HostTensor::from_bytes(dtype, shape.to_vec(), data).unwrap()
}

/// `t` with its subnormal f32 and bf16 values replaced by zeros of their sign (as a flushing
/// adapter reads them).
pub fn flushed(t: &HostTensor) -> HostTensor {
    let mut t = t.clone();
    match t.dtype {
        DType::F32 => {
            for w in t.data.chunks_exact_mut(4) {
                let bits = u32::from_le_bytes(w.try_into().unwrap());
                if bits & 0x7f80_0000 == 0 {
                    w.copy_from_slice(&(bits & 0x8000_0000).to_le_bytes());
                }
            }
        }
        DType::BF16 => {
            for w in t.data.chunks_exact_mut(2) {
                let bits = u16::from_le_bytes(w.try_into().unwrap());
                if bits & 0x7f80 == 0 {
                    w.copy_from_slice(&(bits & 0x8000).to_le_bytes());
                }
            }
        }
        _ => {}
    }
    t
}

/// A tensor whose element `i` holds the value `i` (as i64), for readable expected values.
pub fn iota(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::from_vec(shape.to_vec(), &(0..n as i64).collect::<Vec<_>>()).unwrap()
}

pub fn upload(h: &HostTensor) -> Tensor {
    Tensor::from_host(ctx(), h).unwrap()
}

pub fn values(t: &Tensor) -> Vec<i64> {
    t.to_host_blocking().unwrap().to_vec::<i64>().unwrap()
}

/// One `#[test]` per dtype, all 13: `dtype_tests!(name, |dtype| ...)` makes a module `name`
/// whose tests (`name::f32`, `name::bool`, ...) each run the check on their dtype, so a
/// failure names the dtype and the other dtypes still run.
#[macro_export]
macro_rules! dtype_tests {
    ($name:ident, $check:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn check(dtype: wgpu_ops::DType) {
                let f: &dyn Fn(wgpu_ops::DType) = &$check;
                f(dtype)
            }
            $crate::dtype_tests!(@each f32 F32, f16 F16, bf16 BF16, f64 F64, i8 I8, i16 I16,
                i32 I32, i64 I64, u8 U8, u16 U16, u32 U32, u64 U64, bool Bool);
        }
    };
    (@each $($test:ident $dtype:ident),*) => {
        $(
            #[test]
            fn $test() {
                check(wgpu_ops::DType::$dtype)
            }
        )*
    };
}

/// splitmix64: the same pseudo-random sequence for the same seed on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `t`'s bytes with every NaN of a float dtype written as one canonical NaN: GPUs need not
/// keep a NaN's sign and payload through arithmetic (NVIDIA's Vulkan driver writes its own),
/// and ONNX leaves them open, so bit-for-bit comparisons of float results compare these.
pub fn nan_canonical(t: &HostTensor) -> Vec<u8> {
    let mut data = t.data.clone();
    fn canon<const N: usize>(data: &mut [u8], is_nan: impl Fn(u64) -> bool, nan: u64) {
        for w in data.chunks_exact_mut(N) {
            let mut b = [0u8; 8];
            b[..N].copy_from_slice(w);
            if is_nan(u64::from_le_bytes(b)) {
                w.copy_from_slice(&nan.to_le_bytes()[..N]);
            }
        }
    }
    match t.dtype {
        DType::F64 => canon::<8>(&mut data, |b| f64::from_bits(b).is_nan(), 0x7ff8 << 48),
        DType::F32 => canon::<4>(
            &mut data,
            |b| f32::from_bits(b as u32).is_nan(),
            0x7fc0_0000,
        ),
        DType::F16 => canon::<2>(&mut data, |b| b & 0x7fff > 0x7c00, 0x7e00),
        DType::BF16 => canon::<2>(&mut data, |b| b & 0x7fff > 0x7f80, 0x7fc0),
        _ => {}
    }
    data
}
