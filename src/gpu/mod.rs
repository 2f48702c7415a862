//! The GPU layer: adapter choice, the device and queue, limits, the pipeline and layout cache
//! (`pipeline`), error scopes (`scope`) and the staging buffers transfers reuse (`staging`).
//! Nothing here knows tensors, kernels or ops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Error, Result};

pub mod f16;
pub(crate) mod pipeline;
pub mod profile;
pub(crate) mod scope;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod staging;

pub(crate) use pipeline::Pipeline;
pub use pipeline::{Binding, KernelSpec};
use pipeline::{PipelineCache, PipelineKey};
pub(crate) use scope::ScopeCheck;
pub use wgpu::Features;

/// How to choose an adapter. Fields left `None` fall back to wgpu's environment variables
/// (`WGPU_BACKEND`, `WGPU_ADAPTER_NAME`), then to any adapter, software ones last.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Backends to consider, e.g. `wgpu::Backends::VULKAN`.
    pub backends: Option<wgpu::Backends>,
    /// Case-insensitive substring of the adapter's name.
    pub adapter_name: Option<String>,
    /// Bind at most this many bytes of a buffer at once (below the device's
    /// `max_storage_buffer_binding_size`); larger tensors are then processed in chunks.
    /// Mostly for tests of the chunked paths on small tensors.
    pub max_binding_size: Option<u64>,
    /// Make GPU buffers of at most this many bytes (below the device's `max_buffer_size`,
    /// rounded down to a multiple of 256, at least 256); larger tensors are then held in
    /// several buffers. Mostly for tests of multi-buffer tensors on small sizes.
    pub max_buffer_size: Option<u64>,
    /// Launch at most this many workgroups along each grid dimension (below the device's
    /// `max_compute_workgroups_per_dimension`); larger grids fold into y and z sooner, and
    /// products whose tiles exceed it are refused sooner. Mostly for tests of the folded
    /// grids on small tensors.
    pub max_workgroups_per_dimension: Option<u32>,
    /// Invocations per workgroup of the data-movement and element-wise kernels (a power of
    /// two within the device's limits). `None`: [`default_workgroup_size`] for the adapter.
    pub workgroup_size: Option<u32>,
    /// The most bytes of tensors this context holds on the device at once; an op or upload
    /// that would go beyond is refused with `Error::LimitExceeded` before anything is
    /// allocated (constants kept between recordings, at most an eighth of it, are dropped
    /// first). `None`: on CPU adapters (whose device memory is the host's, where an
    /// oversized allocation succeeds and then exhausts the machine) half the host's memory
    /// (`/proc/meminfo`, else 8 GiB); on GPUs no limit of ours (the driver's out-of-memory
    /// errors are caught and returned).
    pub max_memory: Option<u64>,
    /// The most commands (dispatches and copies) one recording may encode; a graph that would
    /// need more (a Scan over a very long sequence, Scans nested deeply) is refused with
    /// `Error::LimitExceeded` before its loop runs. `None`: 20 million on CPU adapters (about
    /// 10 µs each there: minutes of work) and 200 million on GPUs.
    pub max_commands: Option<u64>,
    /// Compute i64, u64 and f64 natively where the adapter offers wgpu's `SHADER_INT64` and
    /// `SHADER_F64` (lavapipe and most native drivers do; browsers and Metal do not). `None`:
    /// on native builds the environment variable `WGPU_OPS_NATIVE_64_BIT` (`1` or `0`), else
    /// yes. Without them, i64, u64 and f64 are emulated on u32 pairs (the CPU's bits) by
    /// every kernel that computes on them.
    pub native_64_bit: Option<bool>,
    /// With `native_64_bit`, also compute f64 natively (where the adapter offers
    /// `SHADER_F64`). `None`: the environment variable `WGPU_OPS_NATIVE_F64` (`1` or `0`) on
    /// native builds, else yes. Off, the context is what a GPU with 64-bit integers and no
    /// double precision gives: i64 and u64 native, f64 on the emulation (for tests of that
    /// combination on adapters that have both).
    pub native_f64: Option<bool>,
    /// Use the kernel variants written for CPU adapters (MatMul without workgroup memory or
    /// barriers, see the MatMul kernels). `None`: when the adapter is a
    /// CPU one (lavapipe, SwiftShader, WARP).
    pub cpu_kernels: Option<bool>,
    /// How a matrix product of few rows (a recurrent step) picks its kernel. `None`:
    /// [`MatMulChoice::Measure`] on GPUs, [`MatMulChoice::ByShape`] on CPU adapters (whose
    /// timings are noisy and whose choice the benchmarks settled) and in the browser (which
    /// cannot wait for a measurement).
    pub matmul: Option<MatMulChoice>,
    /// Fuse chains of element-wise nodes in graphs (a Scan body's `Add -> Add -> Tanh`, say)
    /// into one kernel each, with no intermediate tensors. `None`: yes. Off, every node is
    /// its own dispatch (for comparisons).
    pub fuse_elementwise: Option<bool>,
    /// Let a Scan's body read its scan-input elements and write its scan-output elements in
    /// place, bound at each iteration's offset in the whole tensors, where the device's
    /// storage offset alignment allows (elements of a multiple of it, 32 or 256 bytes on
    /// most devices); and keep a state that the body's scatter updates in one buffer, written
    /// where it lies (a decode loop's cache). `None`: yes. Off, every element is copied in
    /// and out, and every state ping-pongs between two buffers (for comparisons).
    pub scan_in_place: Option<bool>,
    /// The largest state (in bytes) that a Scan, where the state is also a scan output, holds
    /// as the output's rows, read and written in place by the body, instead of keeping it in
    /// a state buffer and copying it into its row each iteration. `None`: 32 KiB with the GPU
    /// kernels, no limit with the CPU ones. On the H100 the rows saved 4 µs per RNN step at
    /// 1 KiB states, and cost 10 µs at 64 KiB (`bench/h100/rnn_state_rows.txt`).
    pub scan_state_rows_max_bytes: Option<u64>,
    /// Run a Scan whose body is a recurrence the crate has a kernel of its own for (the
    /// expansion of ONNX LinearAttention, see `docs/onnx.md`) with that kernel, a few
    /// dispatches for all steps, instead of iterating the body. `None`: yes. Off, the body is iterated
    /// (for comparisons).
    pub scan_recurrences: Option<bool>,
    /// Split the lines of CumSum, CumProd and TopK across invocations instead of one
    /// invocation walking each line: CumSum's as a scan (in blocks on GPUs: block sums, their
    /// running sums, then each block's; in chunks with the CPU kernels), TopK's in chunks
    /// whose K best are merged two by two. `None`: where the lines are too few to keep the
    /// adapter busy and long enough (see [`crate::kernels::cumsum`] and
    /// [`crate::kernels::topk`]). `Some(true)`: always; `Some(false)`: never (for
    /// comparisons). CumSum's floats then add in another order than one walk's and may round
    /// apart from it; TopK keeps the same elements.
    pub split_lines: Option<bool>,
    /// Use subgroup operations where the device has them (LinearAttention's lanes add their
    /// parts by shuffles). `None`: yes. Off, kernels take their workgroup-memory variants, the
    /// ones browsers run (for tests of those on native adapters).
    pub subgroups: Option<bool>,
    /// Where an op's plan needs values computed on the GPU (a Reshape's shape, NonZero's
    /// input, an If's condition, NonMaxSuppression's boxes), submit what is recorded so far,
    /// wait and read them back in the middle of the run. `None`: yes on native builds (the
    /// browser cannot wait: there, and with this off, such a graph is refused in one line
    /// naming the op and the input). Never inside a Scan body, whose iterations run without
    /// the host.
    pub read_back: Option<bool>,
    /// Blocks of 16 bytes each invocation of the data-movement kernels' 16-byte variants
    /// moves (the strided gather's quads, BatchToSpace and SpaceToBatch runs): 1, 2 or 4, a
    /// workgroup's width apart, all loaded before any is stored, for more independent loads
    /// in flight per invocation where index arithmetic delays each one. `None`:
    /// [`DEFAULT_GATHER_UNROLL`]. Ignored with the CPU kernels.
    pub gather_unroll: Option<u32>,
    /// Request WebGPU's default limits (`wgpu::Limits::default()`: what every WebGPU
    /// implementation offers, browsers included: bindings at offsets aligned to 256 bytes, 8
    /// storage buffers and 16 KiB of workgroup memory per kernel, bindings of 128 MiB, buffers
    /// of 256 MiB), or the adapter's where it offers less, instead of the adapter's own: what
    /// runs on such a context runs within any browser's limits (with `native_64_bit:
    /// Some(false)` and `subgroups: Some(false)`, on the browser's shader features too).
    /// `None`: on native builds the environment variable `WGPU_OPS_WEBGPU_LIMITS` (`1` or
    /// `0`; the test suite's third pass sets `1`), else the adapter's own limits.
    pub webgpu_limits: Option<bool>,
    /// Convert f16 to and from f32 with WGSL's `unpack2x16float` and `pack2x16float` where a
    /// probe when the context is made finds them exact on this adapter (every f16 value
    /// widened, f32 values around every rounding boundary narrowed; see [`f16`](mod@self::f16)), instead
    /// of by integer arithmetic. `None`: on native builds the environment variable
    /// `WGPU_OPS_NATIVE_F16` (`1` or `0`; the test suite's third pass sets `0`), else yes.
    /// Off, the integer conversions everywhere (for comparisons).
    /// [`Context::native_f16_conversions`] says which the context uses.
    pub native_f16_conversions: Option<bool>,
    /// The most compiled kernels the context keeps for later recordings once no recording or
    /// session uses them; beyond it, the least recently used go (and are compiled again if
    /// asked for; the one compiled last always stays). Kernels in use are never dropped. On
    /// lavapipe a kernel holds about 1.2 MB of host memory, so a process that plans many
    /// different graphs would otherwise grow without bound. `None`:
    /// [`DEFAULT_CACHED_PIPELINES`].
    pub cached_pipelines: Option<usize>,
}

/// [`ContextOptions::cached_pipelines`] by default: more than the kernels of any model we
/// run (the largest use a few dozen), so a model planned again finds its kernels.
pub const DEFAULT_CACHED_PIPELINES: usize = 256;

/// [`ContextOptions::gather_unroll`] by default: on the H200, 2 and 4 lowered every
/// data-movement case up to 64 MiB (`bench/h200/data_movement_experiments.txt`).
pub const DEFAULT_GATHER_UNROLL: u32 = 1;

/// [`ContextOptions::scan_state_rows_max_bytes`] with the GPU kernels: between the H100's
/// 1 KiB states, faster as rows, and its 64 KiB ones, slower.
const DEFAULT_STATE_ROWS_MAX_BYTES: u64 = 32 * 1024;

/// The kernels of a matrix product (`shaders/matmul.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatMulKernel {
    /// 16 x 16 tiles through workgroup memory (`main`): GPUs, 16 rows and more.
    Tiles,
    /// Several invocations per output element, each summing a slice of k (`rows`): GPUs
    /// under 16 rows, where tiles would idle; CPU adapters when blocks would use one
    /// workgroup.
    Rows,
    /// A block of 8 rows x 4 columns per invocation over all of k, no workgroup memory or
    /// barrier (`blocks`): CPU adapters, where a barrier is a costly switch between
    /// invocations.
    Blocks,
}

impl MatMulKernel {
    /// Every kernel.
    pub const ALL: [MatMulKernel; 3] = [
        MatMulKernel::Tiles,
        MatMulKernel::Rows,
        MatMulKernel::Blocks,
    ];

    /// The kernel's name in reports and options (`tiles`, `rows`, `blocks`).
    pub fn name(self) -> &'static str {
        match self {
            MatMulKernel::Tiles => "tiles",
            MatMulKernel::Rows => "rows",
            MatMulKernel::Blocks => "blocks",
        }
    }
}

/// How a matrix product picks its kernel; see [`ContextOptions::matmul`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatMulChoice {
    /// By shape and adapter kind alone.
    ByShape,
    /// The first time a product of at most [`MEASURED_ROWS`] rows or at most [`MEASURED_K`]
    /// products per sum, and at least [`MEASURED_WORK`] multiply-adds, is recorded (the
    /// shapes of recurrent steps and of LinearAttention's outer products), every kernel that
    /// can compute it is timed
    /// on the device, and the fastest serves that shape (dtype, batch, rows, n, k) for the
    /// context's life; other products go by shape. Results of floats depend on the kernel
    /// only through the order of their sums.
    Measure,
    /// This kernel wherever it can compute the product (comparisons and tests), elsewhere
    /// by shape.
    Always(MatMulKernel),
}

/// Products of up to this many rows are measured under [`MatMulChoice::Measure`]: the rows
/// of recurrent steps, where the kernels' order depends on the device.
pub const MEASURED_ROWS: u64 = 64;
/// Products summing up to this many products per element are measured under
/// [`MatMulChoice::Measure`] too: outer products (LinearAttention's `k v^T` per head).
pub const MEASURED_K: u64 = 4;
/// Products with fewer multiply-adds than this are not measured (they take microseconds on
/// any kernel).
pub const MEASURED_WORK: u64 = 1 << 16;

/// A product's shape as the MatMul kernels see it, the key of measured choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatMulShape {
    /// The operands' element type.
    pub dtype: crate::DType,
    /// Matrices in the batch.
    pub batches: u64,
    /// Rows of each product (of A).
    pub rows: u64,
    /// Columns of each product (of B).
    pub n: u64,
    /// Products summed per element (A's columns, B's rows).
    pub k: u64,
    /// i64, u64 or f64 on u32 pairs (no blocks kernel there).
    pub emulate64: bool,
}

/// One measured choice: the time of one product per kernel timed (microseconds, the best of
/// several runs) and the kernel chosen.
#[derive(Clone, Debug)]
pub struct MatMulMeasurement {
    /// The product measured.
    pub shape: MatMulShape,
    /// Each kernel timed and its best time, in microseconds.
    pub micros: Vec<(MatMulKernel, f64)>,
    /// The kernel that serves this shape from now on.
    pub chosen: MatMulKernel,
}

/// The most bytes of constants a context keeps between recordings (or an eighth of
/// [`ContextOptions::max_memory`], if less).
pub(crate) const CONSTANT_CACHE_BYTES: u64 = 128 << 20;

/// What names a set of constants an op builds on the host: the op's name for them, their
/// dtype and the numbers that decide their values (a transform's length, its direction).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct ConstantKey {
    pub what: &'static str,
    pub dtype: crate::DType,
    pub params: Vec<u64>,
}

/// Constants that ops build on the host (a long DFT's twiddles and matrices) kept on the device
/// between recordings, so a session's later runs neither compute nor upload them again; the
/// least recently used go first past `budget` bytes, and all of them when a tensor would not
/// fit under the memory limit.
#[derive(Default)]
pub(crate) struct ConstantCache {
    entries: HashMap<ConstantKey, CachedConstants>,
    bytes: u64,
    budget: u64,
    clock: u64,
}

struct CachedConstants {
    /// Storages, not tensors: a tensor holds its context, which holds this cache.
    tensors: Vec<(crate::DType, Vec<usize>, Arc<crate::storage::Storage>)>,
    bytes: u64,
    used: u64,
}

/// Device memory counted against [`ContextOptions::max_memory`] while a tensor's storage lives.
pub(crate) struct MemoryLease {
    counter: Arc<AtomicU64>,
    bytes: u64,
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Total host memory (Linux), for the default memory limit of CPU adapters.
fn host_memory() -> Option<u64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(target_arch = "wasm32")]
    None
}

/// Host memory a program can still take (Linux: `MemAvailable` plus free swap), for checking
/// that downloads fit before they are made. `None` where it cannot be read.
pub(crate) fn host_memory_available() -> Option<u64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = text.lines().find(|l| l.starts_with(name))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        };
        Some((field("MemAvailable:")? + field("SwapFree:").unwrap_or(0)) * 1024)
    }
    #[cfg(target_arch = "wasm32")]
    None
}

/// The largest workgroup size a context accepts (whatever the device allows beyond it): the
/// kernels are validated for every power of two up to it.
pub const MAX_WORKGROUP_SIZE: u32 = 1024;

/// The workgroup size the kernels use on an adapter unless told otherwise: 64 on CPU adapters
/// (lavapipe, SwiftShader, WARP), where a workgroup is a loop on one core and small groups
/// spread best over few cores, and 256 elsewhere (8 warps or 4 wavefronts, enough to keep
/// a discrete GPU's memory busy; measured in the benchmark, `--workgroup-size`); never above
/// the device's limits.
pub fn default_workgroup_size(info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> u32 {
    let wanted = if is_software(info) { 64 } else { 256 };
    let max = limits
        .max_compute_invocations_per_workgroup
        .min(limits.max_compute_workgroup_size_x);
    // The largest power of two within the limits (WebGPU guarantees at least 256).
    wanted.min(1 << (31 - max.max(1).leading_zeros()))
}

/// Counters for tests and benchmarks: how often the crate submitted work or waited for the GPU.
/// The timing runs of [`MatMulChoice::Measure`] are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Command buffers submitted to the queue.
    pub submissions: u64,
    /// Times the host waited for the GPU (read-backs, fence waits).
    pub host_waits: u64,
    /// Compute pipelines compiled (each kernel variant once per context, and again after
    /// the cache dropped it: see [`ContextOptions::cached_pipelines`]).
    pub pipelines_built: u64,
    /// Compute dispatches encoded (a Scan's replayed iterations count each time).
    pub dispatches: u64,
    /// Buffer-to-buffer copies and clears encoded by ops (a Scan's replayed ones count each
    /// time; uploads and downloads not counted).
    pub copies: u64,
    /// GPU buffers created for tensors (uploads and op outputs; reused buffers not counted; a
    /// tensor held in several buffers counts each).
    pub buffers_created: u64,
    /// Scans run by a recurrence's own kernel (see [`ContextOptions::scan_recurrences`]).
    pub scans_as_recurrences: u64,
    /// Values read back in the middle of runs (see [`ContextOptions::read_back`]).
    pub read_backs: u64,
    /// Session runs that encoded the last run's logged commands again instead of planning
    /// the graph (see [`crate::Session::run_tensors`]).
    pub replayed_runs: u64,
    /// Dispatches recorded with a kernel that stores 16-byte quads (copies, gathers, Pad,
    /// element-wise programs): the GPU's fast path for moving bytes. A captured Scan body
    /// counts once.
    pub quad_dispatches: u64,
    /// Nodes computed on the host from a run's inputs rather than from constants alone: the
    /// small ops between a graph input given on the host and a value that plans a later op
    /// (a Range's limit `n + 1`). Everything else a run computes from its inputs is on the GPU.
    pub host_computed_nodes: u64,
}

struct Inner {
    /// Why the device was lost, once it is (set by wgpu's device-lost callback).
    lost: Arc<Mutex<Option<String>>>,
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    /// The device's, kept: asked while planning every fused op.
    features: wgpu::Features,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    binding_limit: u64,
    segment_bytes: u64,
    workgroup_size: u32,
    gather_unroll: u32,
    cpu_kernels: bool,
    matmul: MatMulChoice,
    /// Choices made under [`MatMulChoice::Measure`], in the order they were made.
    matmul_measured: Mutex<Vec<MatMulMeasurement>>,
    fuse_elementwise: bool,
    scan_in_place: bool,
    scan_state_rows_max_bytes: u64,
    scan_recurrences: bool,
    split_lines: Option<bool>,
    subgroups: bool,
    max_commands: u64,
    max_memory: u64,
    /// Bytes of tensor storage alive on the device (see [`MemoryLease`]).
    memory_in_use: Arc<AtomicU64>,
    constants: Mutex<ConstantCache>,
    // Looked up on every dispatch (keys of long module names).
    modules: Mutex<crate::FastMap<std::borrow::Cow<'static, str>, wgpu::ShaderModule>>,
    layouts: Mutex<crate::FastMap<(&'static [Binding], u64), wgpu::BindGroupLayout>>,
    pipelines: Mutex<PipelineCache>,
    /// Pipeline builds and buffer creations whose error scopes had not answered yet (the
    /// browser answers later); the next `Recorder::finish` awaits them. A failed pipeline
    /// leaves the cache.
    unchecked_builds: Mutex<Vec<(Option<PipelineKey>, ScopeCheck)>>,
    submissions: AtomicU64,
    host_waits: AtomicU64,
    pipelines_built: AtomicU64,
    buffers_created: AtomicU64,
    dispatches: AtomicU64,
    copies: AtomicU64,
    scans_as_recurrences: AtomicU64,
    read_backs: AtomicU64,
    replayed_runs: AtomicU64,
    quad_dispatches: AtomicU64,
    host_computed_nodes: AtomicU64,
    /// The profile being recorded (see [`Context::start_profile`]); `profiling` says whether
    /// there is one without taking the lock on every dispatch.
    profiler: Mutex<Option<profile::Profiler>>,
    profiling: AtomicBool,
    read_back: bool,
    /// Whether kernels convert f16 with the built-ins (see [`ContextOptions::native_f16_conversions`]).
    native_f16: bool,
    /// Staging buffers reused by large uploads and by downloads.
    #[cfg(not(target_arch = "wasm32"))]
    staging: staging::StagingPool,
}

/// Owns the wgpu device. Cheap to clone (shared), `Send + Sync`.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("adapter", &self.inner.info.name)
            .field("backend", &self.inner.info.backend)
            .finish()
    }
}

fn device_type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let name = info.name.to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || ["llvmpipe", "lavapipe", "swiftshader", "warp", "software"]
            .iter()
            .any(|s| name.contains(s))
}

fn instance_for(backends: Option<wgpu::Backends>) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if let Some(b) = backends {
        desc.backends = b;
    }
    wgpu::Instance::new(desc)
}

/// Lists the adapters wgpu can see with these options' backends (all, or `WGPU_BACKEND`).
pub async fn list_adapters(options: &ContextOptions) -> Vec<wgpu::AdapterInfo> {
    let instance = instance_for(options.backends);
    let backends = options.backends.unwrap_or(wgpu::Backends::all());
    instance
        .enumerate_adapters(backends)
        .await
        .iter()
        .map(|a| a.get_info())
        .collect()
}

/// [`ContextOptions::webgpu_limits`], else the environment's.
fn webgpu_limits(options: &ContextOptions) -> Result<bool> {
    switch(options.webgpu_limits, "WGPU_OPS_WEBGPU_LIMITS", false)
}

/// A switch of [`ContextOptions`]: the option where given, else on native builds the
/// environment variable `var` (`1` or `0`), else `default`.
fn switch(option: Option<bool>, var: &str, default: bool) -> Result<bool> {
    if let Some(on) = option {
        return Ok(on);
    }
    // (The browser has no environment.)
    #[cfg(target_arch = "wasm32")]
    let _ = var;
    #[cfg(not(target_arch = "wasm32"))]
    if let Ok(text) = std::env::var(var) {
        return match text.trim() {
            "1" => Ok(true),
            "0" => Ok(false),
            _ => Err(Error::invalid(
                "Context",
                var,
                format!("{var} '{}' is neither 1 nor 0", text.escape_debug()),
            )),
        };
    }
    Ok(default)
}

impl Context {
    /// Creates a context on the adapter chosen by `options` (see [`ContextOptions`]), requesting
    /// the adapter's own limits rather than wgpu's conservative defaults.
    pub async fn new(options: ContextOptions) -> Result<Context> {
        // Without a choice, try the native APIs first: asking GL as well would make EGL probe
        // (and log) on machines where Vulkan already answers.
        let chosen = options.backends.or_else(wgpu::Backends::from_env);
        let mut instance = instance_for(Some(chosen.unwrap_or(wgpu::Backends::PRIMARY)));
        let mut backends = chosen.unwrap_or(wgpu::Backends::PRIMARY);
        if chosen.is_none() && instance.enumerate_adapters(backends).await.is_empty() {
            instance = instance_for(Some(wgpu::Backends::all()));
            backends = wgpu::Backends::all();
        }
        let wanted = options.adapter_name.clone().or_else(|| {
            #[cfg(not(target_arch = "wasm32"))]
            {
                std::env::var("WGPU_ADAPTER_NAME").ok()
            }
            #[cfg(target_arch = "wasm32")]
            {
                None
            }
        });
        let mut adapters = instance.enumerate_adapters(backends).await;
        let adapter = if adapters.is_empty() {
            // The browser's WebGPU backend cannot enumerate; it hands out one adapter on request.
            instance
                .request_adapter(&wgpu::RequestAdapterOptions::default())
                .await
                .map_err(|e| Error::Adapter(format!("no adapter found: {e}")))?
        } else {
            let seen: Vec<String> = adapters
                .iter()
                .map(|a| {
                    let i = a.get_info();
                    format!("{} ({:?})", i.name, i.backend)
                })
                .collect();
            if let Some(w) = &wanted {
                let w = w.to_lowercase();
                adapters.retain(|a| a.get_info().name.to_lowercase().contains(&w));
            }
            // Hardware first, software (lavapipe, llvmpipe, WARP) last; GL after native APIs.
            adapters.sort_by_key(|a| {
                let i = a.get_info();
                (
                    is_software(&i),
                    device_type_rank(i.device_type),
                    i.backend == wgpu::Backend::Gl,
                )
            });
            adapters.into_iter().next().ok_or_else(|| {
                Error::Adapter(format!(
                    "no adapter name contains '{}'; adapters seen: {}",
                    wanted.unwrap_or_default(),
                    if seen.is_empty() {
                        "none".to_string()
                    } else {
                        seen.join(", ")
                    }
                ))
            })?
        };
        let info = adapter.get_info();
        let limits = match webgpu_limits(&options)? {
            true => wgpu::Limits::default().or_worse_values_from(&adapter.limits()),
            false => adapter.limits(),
        };
        let workgroup_size = match options.workgroup_size {
            None => default_workgroup_size(&info, &limits),
            Some(n)
                if n.is_power_of_two()
                    && n <= MAX_WORKGROUP_SIZE
                    && n <= limits.max_compute_invocations_per_workgroup
                    && n <= limits.max_compute_workgroup_size_x =>
            {
                n
            }
            Some(n) => {
                return Err(Error::invalid(
                    "Context",
                    "workgroup_size",
                    format!(
                        "workgroup_size {n} must be a power of two of at most {} on {} \
                         (max_compute_invocations_per_workgroup {}, max_compute_workgroup_size_x {}, \
                         kernels validated up to {MAX_WORKGROUP_SIZE})",
                        limits
                            .max_compute_invocations_per_workgroup
                            .min(limits.max_compute_workgroup_size_x)
                            .min(MAX_WORKGROUP_SIZE),
                        info.name,
                        limits.max_compute_invocations_per_workgroup,
                        limits.max_compute_workgroup_size_x
                    ),
                ))
            }
        };
        let gather_unroll = match options.gather_unroll {
            None => DEFAULT_GATHER_UNROLL,
            Some(n @ (1 | 2 | 4)) => n,
            Some(n) => {
                return Err(Error::invalid(
                    "Context",
                    "gather_unroll",
                    format!("gather_unroll {n} must be 1, 2 or 4"),
                ))
            }
        };
        let cpu_kernels = options.cpu_kernels.unwrap_or_else(|| is_software(&info));
        let matmul = options.matmul.unwrap_or({
            if is_software(&info) || cfg!(target_arch = "wasm32") {
                MatMulChoice::ByShape
            } else {
                MatMulChoice::Measure
            }
        });
        let software = is_software(&info);
        let max_commands =
            options
                .max_commands
                .unwrap_or(if software { 20_000_000 } else { 200_000_000 });
        let max_memory = options.max_memory.unwrap_or_else(|| {
            if software {
                host_memory().map_or(8 << 30, |m| m / 2)
            } else {
                u64::MAX
            }
        });
        let segment_bytes = match options.max_buffer_size {
            Some(m) if m < 256 => {
                return Err(Error::invalid(
                    "Context",
                    "max_buffer_size",
                    format!("max_buffer_size {m} is below the 256 bytes a buffer must hold"),
                ))
            }
            m => m.map_or(limits.max_buffer_size, |m| m.min(limits.max_buffer_size)) / 256 * 256,
        };
        // What the kernels see; the device is requested with the adapter's own limits.
        let mut kernel_limits = limits.clone();
        match options.max_workgroups_per_dimension {
            Some(0) => {
                return Err(Error::invalid(
                    "Context",
                    "max_workgroups_per_dimension",
                    "max_workgroups_per_dimension 0 launches nothing".to_string(),
                ))
            }
            Some(m) => {
                kernel_limits.max_compute_workgroups_per_dimension =
                    m.min(limits.max_compute_workgroups_per_dimension)
            }
            None => {}
        }
        let mut wanted_features =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
        if switch(options.native_64_bit, "WGPU_OPS_NATIVE_64_BIT", true)? {
            wanted_features |= wgpu::Features::SHADER_INT64;
            if switch(options.native_f64, "WGPU_OPS_NATIVE_F64", true)? {
                wanted_features |= wgpu::Features::SHADER_F64;
            }
        }
        // Subgroup shuffles let LinearAttention's lanes add their parts without barriers
        // (native only, see `subgroups_of_at_least`).
        if cfg!(not(target_arch = "wasm32")) {
            wanted_features |= wgpu::Features::SUBGROUP;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgpu-ops"),
                // Timestamps only let benchmarks time kernels on the GPU; the 64-bit shader
                // types let the element-wise kernel compute i64, u64 and f64 natively.
                required_features: adapter.features() & wanted_features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Adapter(format!("{}: cannot create device: {e}", info.name)))?;
        let native_f16 = switch(options.native_f16_conversions, "WGPU_OPS_NATIVE_F16", true)?
            && (adapter.get_downlevel_capabilities().flags)
                .contains(wgpu::DownlevelFlags::SHADER_F16_IN_F32)
            && f16::native_conversions_exact(&device, &queue).await;
        // Errors outside our error scopes would otherwise panic inside wgpu; log them instead.
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| {
            log::error!("uncaptured wgpu error: {e}");
        }));
        // WebGPU reports nothing from the calls on a lost device (they do nothing): the
        // callback is all there is to tell a caller that its results were not computed.
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let on_loss = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            let why = match message.trim() {
                "" => format!("{reason:?}"),
                message => format!("{reason:?}: {message}"),
            };
            log::warn!("GPU device lost: {why}");
            *on_loss.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        });
        log::info!(
            "wgpu-ops on {} ({:?}, {:?})",
            info.name,
            info.backend,
            info.device_type
        );
        Ok(Context {
            inner: Arc::new(Inner {
                lost,
                instance,
                adapter,
                features: device.features(),
                device,
                queue,
                info,
                binding_limit: options
                    .max_binding_size
                    .map_or(limits.max_storage_buffer_binding_size, |m| {
                        m.min(limits.max_storage_buffer_binding_size)
                    }),
                segment_bytes,
                workgroup_size,
                gather_unroll,
                cpu_kernels,
                matmul,
                matmul_measured: Mutex::new(Vec::new()),
                #[cfg(not(target_arch = "wasm32"))]
                staging: Default::default(),
                fuse_elementwise: options.fuse_elementwise.unwrap_or(true),
                scan_in_place: options.scan_in_place.unwrap_or(true),
                scan_state_rows_max_bytes: options.scan_state_rows_max_bytes.unwrap_or(
                    if cpu_kernels {
                        u64::MAX
                    } else {
                        DEFAULT_STATE_ROWS_MAX_BYTES
                    },
                ),
                scan_recurrences: options.scan_recurrences.unwrap_or(true),
                split_lines: options.split_lines,
                subgroups: options.subgroups.unwrap_or(true),
                max_commands,
                max_memory,
                memory_in_use: Arc::default(),
                constants: Mutex::new(ConstantCache {
                    budget: CONSTANT_CACHE_BYTES.min(max_memory / 8),
                    ..Default::default()
                }),
                limits: kernel_limits,
                modules: Mutex::default(),
                layouts: Mutex::default(),
                pipelines: Mutex::new(PipelineCache::new(
                    options.cached_pipelines.unwrap_or(DEFAULT_CACHED_PIPELINES),
                )),
                unchecked_builds: Mutex::default(),
                submissions: AtomicU64::new(0),
                host_waits: AtomicU64::new(0),
                pipelines_built: AtomicU64::new(0),
                buffers_created: AtomicU64::new(0),
                dispatches: AtomicU64::new(0),
                copies: AtomicU64::new(0),
                scans_as_recurrences: AtomicU64::new(0),
                read_backs: AtomicU64::new(0),
                replayed_runs: AtomicU64::new(0),
                quad_dispatches: AtomicU64::new(0),
                host_computed_nodes: AtomicU64::new(0),
                profiler: Mutex::default(),
                profiling: AtomicBool::new(false),
                read_back: options.read_back.unwrap_or(true),
                native_f16,
            }),
        })
    }

    /// Blocking [`Context::new`] for native callers. Contexts are created one at a time in a
    /// process: on the H100 (Vulkan, driver 580) several threads creating contexts at once
    /// sometimes never returned, while one at a time they always did.
    #[cfg(feature = "native")]
    pub fn new_blocking(options: ContextOptions) -> Result<Context> {
        static CREATING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        pollster::block_on(Context::new(options))
    }

    /// Whether kernels may use subgroup operations on subgroups of at least `n` invocations
    /// (the device has wgpu's `SUBGROUP` feature, its smallest subgroup is that large, and
    /// [`ContextOptions::subgroups`] allows them).
    /// Native only: browsers' WGSL wants an `enable subgroups;` that naga does not take.
    pub fn subgroups_of_at_least(&self, n: u32) -> bool {
        cfg!(not(target_arch = "wasm32"))
            && self.inner.subgroups
            && self
                .inner
                .device
                .features()
                .contains(wgpu::Features::SUBGROUP)
            && self.inner.info.subgroup_min_size >= n
    }

    /// The adapter's name, backend and driver.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.info
    }
    /// The limits the device was created with (the adapter's own, or WebGPU's defaults where
    /// [`ContextOptions::webgpu_limits`] asks for them).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }
    /// The wgpu device, for work of the embedding program's own on this context's tensors.
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }
    /// The device's queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }
    /// The adapter the device was made from.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }
    /// The wgpu instance the adapter came from.
    pub fn instance(&self) -> &wgpu::Instance {
        &self.inner.instance
    }

    /// The context's counters so far (see [`Stats`]); compare two to count a run's work.
    pub fn stats(&self) -> Stats {
        Stats {
            submissions: self.inner.submissions.load(Ordering::Relaxed),
            host_waits: self.inner.host_waits.load(Ordering::Relaxed),
            pipelines_built: self.inner.pipelines_built.load(Ordering::Relaxed),
            buffers_created: self.inner.buffers_created.load(Ordering::Relaxed),
            dispatches: self.inner.dispatches.load(Ordering::Relaxed),
            copies: self.inner.copies.load(Ordering::Relaxed),
            scans_as_recurrences: self.inner.scans_as_recurrences.load(Ordering::Relaxed),
            read_backs: self.inner.read_backs.load(Ordering::Relaxed),
            replayed_runs: self.inner.replayed_runs.load(Ordering::Relaxed),
            quad_dispatches: self.inner.quad_dispatches.load(Ordering::Relaxed),
            host_computed_nodes: self.inner.host_computed_nodes.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_buffers(&self, n: usize) {
        self.inner
            .buffers_created
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Takes back from the statistics the work of a [`MatMulChoice::Measure`] timing run,
    /// which is not the caller's work.
    #[cfg(feature = "native")]
    pub(crate) fn uncount(&self, work: &Stats) {
        let i = &self.inner;
        i.submissions.fetch_sub(work.submissions, Ordering::Relaxed);
        i.host_waits.fetch_sub(work.host_waits, Ordering::Relaxed);
        i.pipelines_built
            .fetch_sub(work.pipelines_built, Ordering::Relaxed);
        i.dispatches.fetch_sub(work.dispatches, Ordering::Relaxed);
        i.copies.fetch_sub(work.copies, Ordering::Relaxed);
        i.buffers_created
            .fetch_sub(work.buffers_created, Ordering::Relaxed);
        i.quad_dispatches
            .fetch_sub(work.quad_dispatches, Ordering::Relaxed);
    }

    pub(crate) fn count_dispatch(&self) {
        self.inner.dispatches.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a dispatch of a quad-storing kernel (see [`Stats::quad_dispatches`]).
    pub(crate) fn count_quads(&self, quads: bool) {
        if quads {
            self.inner.quad_dispatches.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_scan_as_recurrence(&self) {
        self.inner
            .scans_as_recurrences
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_host_computed_node(&self) {
        self.inner
            .host_computed_nodes
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_replayed_run(&self) {
        self.inner.replayed_runs.fetch_add(1, Ordering::Relaxed);
    }

    #[cfg(feature = "native")]
    pub(crate) fn count_read_back(&self) {
        self.inner.read_backs.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether runs read values back in the middle (see [`ContextOptions::read_back`]).
    pub fn read_back(&self) -> bool {
        cfg!(feature = "native") && self.inner.read_back
    }

    pub(crate) fn count_copy(&self) {
        self.inner.copies.fetch_add(1, Ordering::Relaxed);
    }

    /// Why the device was lost, if it was (see [`Error::DeviceLost`]): a context whose device
    /// is lost refuses all work with that error.
    pub fn lost(&self) -> Option<String> {
        self.inner
            .lost
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// [`Error::DeviceLost`] for `op` once the device is lost.
    pub(crate) fn check_device(&self, op: &str) -> Result<()> {
        match self.lost() {
            None => Ok(()),
            Some(reason) => Err(Error::DeviceLost {
                op: op.to_string(),
                reason,
            }),
        }
    }

    /// `e`, or [`Error::DeviceLost`] where the device is lost: calls on a device being lost
    /// fail with errors of their own (an invalid bind group, say) before wgpu, polled, tells.
    pub(crate) fn explain_loss(&self, op: &str, e: Error) -> Error {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.inner.device.poll(wgpu::PollType::Poll);
        match self.check_device(op) {
            Err(lost) => lost,
            Ok(()) => e,
        }
    }

    pub(crate) fn submit(&self, commands: wgpu::CommandBuffer) -> wgpu::SubmissionIndex {
        self.inner.submissions.fetch_add(1, Ordering::Relaxed);
        self.inner.queue.submit([commands])
    }

    /// Waits until submission `index` has completed (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_for(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.inner.host_waits.fetch_add(1, Ordering::Relaxed);
        let waited = self.inner.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        // A lost device ends the wait too; say so rather than how the wait ended.
        self.check_device("waiting for the GPU")?;
        waited
            .map(|_| ())
            .map_err(|e| Error::Readback(format!("waiting for the GPU failed: {e}")))
    }

    /// Waits for submitted work (native only: in the browser, map callbacks fire from the event
    /// loop and the awaited futures complete on their own).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_idle(&self) -> Result<()> {
        self.inner.host_waits.fetch_add(1, Ordering::Relaxed);
        let waited = self.inner.device.poll(wgpu::PollType::wait_indefinitely());
        // A lost device ends the wait too; say so rather than how the wait ended.
        self.check_device("waiting for the GPU")?;
        waited
            .map(|_| ())
            .map_err(|e| Error::Readback(format!("waiting for the GPU failed: {e}")))
    }

    /// Whether this context's kernels convert f16 with WGSL's built-ins, found exact on its
    /// adapter (see [`ContextOptions::native_f16_conversions`]), rather than by integer
    /// arithmetic.
    pub fn native_f16_conversions(&self) -> bool {
        self.inner.native_f16
    }

    /// The wgpu features the device was created with.
    pub fn features(&self) -> wgpu::Features {
        self.inner.features
    }

    /// The most bytes one buffer of a tensor holds (the device's `max_buffer_size`, or
    /// [`ContextOptions::max_buffer_size`] if less, a multiple of 256); larger tensors span
    /// several buffers.
    pub fn max_buffer_size(&self) -> u64 {
        self.inner.segment_bytes
    }

    /// The alignment of window offsets inside a buffer (the device's storage-buffer offset
    /// alignment, at least a word); an error when windows so aligned cannot start at every
    /// `elem`-byte element.
    pub(crate) fn window_alignment(&self, op: &'static str, elem: u64) -> Result<u64> {
        let align = u64::from(self.inner.limits.min_storage_buffer_offset_alignment).max(4);
        if !align.is_multiple_of(elem) {
            return Err(Error::LimitExceeded {
                op,
                what: format!("windows aligned to {align} bytes for {elem}-byte elements"),
                limit: "min_storage_buffer_offset_alignment",
                needed: align,
                max: align - align % elem,
            });
        }
        Ok(align)
    }

    /// The most bytes bound at once (the device limit, or less if the options said so).
    pub fn binding_limit(&self) -> u64 {
        self.inner.binding_limit
    }

    /// True when the kernels written for CPU adapters are used (see
    /// [`ContextOptions::cpu_kernels`]).
    pub fn cpu_kernels(&self) -> bool {
        self.inner.cpu_kernels
    }

    /// How matrix products pick their kernels (see [`ContextOptions::matmul`]).
    pub fn matmul_choice(&self) -> MatMulChoice {
        self.inner.matmul
    }

    /// The kernel measured fastest for `shape`, if it was measured.
    pub(crate) fn measured_matmul(&self, shape: &MatMulShape) -> Option<MatMulKernel> {
        let measured = self
            .inner
            .matmul_measured
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        measured
            .iter()
            .find(|m| m.shape == *shape)
            .map(|m| m.chosen)
    }

    #[cfg(feature = "native")]
    pub(crate) fn remember_matmul(&self, measurement: MatMulMeasurement) {
        let mut measured = self
            .inner
            .matmul_measured
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !measured.iter().any(|m| m.shape == measurement.shape) {
            measured.push(measurement);
        }
    }

    /// The kernel choices this context measured so far (see [`MatMulChoice::Measure`]).
    pub fn matmul_measurements(&self) -> Vec<MatMulMeasurement> {
        self.inner
            .matmul_measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True when graphs fuse chains of element-wise nodes (see
    /// [`ContextOptions::fuse_elementwise`]).
    pub fn fuse_elementwise(&self) -> bool {
        self.inner.fuse_elementwise
    }

    /// Whether Scans bind their elements in place where they can (see
    /// [`ContextOptions::scan_in_place`]).
    pub fn scan_in_place(&self) -> bool {
        self.inner.scan_in_place
    }

    /// Whether a Scan whose body is a known recurrence runs with that recurrence's kernel
    /// (see [`ContextOptions::scan_recurrences`]).
    pub fn scan_recurrences(&self) -> bool {
        self.inner.scan_recurrences
    }

    /// Whether CumSum and TopK split their lines across invocations: always, never, or `None`
    /// by the lines' count and length (see [`ContextOptions::split_lines`]).
    pub fn split_lines(&self) -> Option<bool> {
        self.inner.split_lines
    }

    /// The largest state a Scan holds as its output's rows (see
    /// [`ContextOptions::scan_state_rows_max_bytes`]).
    pub fn scan_state_rows_max_bytes(&self) -> u64 {
        self.inner.scan_state_rows_max_bytes
    }

    /// The constants kept under `key`, if any (see [`ConstantCache`]).
    pub(crate) fn cached_constants(&self, key: &ConstantKey) -> Option<Vec<crate::Tensor>> {
        let mut cache = self.inner.constants.lock().unwrap();
        cache.clock += 1;
        let clock = cache.clock;
        let entry = cache.entries.get_mut(key)?;
        entry.used = clock;
        Some(
            entry
                .tensors
                .iter()
                .map(|(dtype, shape, storage)| {
                    crate::Tensor::from_parts(self, *dtype, shape.clone(), storage.clone())
                })
                .collect(),
        )
    }

    /// Keeps `tensors` under `key` while they fit the cache's budget, making room by dropping
    /// the least recently used.
    pub(crate) fn keep_constants(&self, key: ConstantKey, tensors: &[crate::Tensor]) {
        let bytes: u64 = tensors.iter().map(|t| t.storage().size()).sum();
        let mut cache = self.inner.constants.lock().unwrap();
        if bytes > cache.budget || cache.entries.contains_key(&key) {
            return;
        }
        while cache.bytes + bytes > cache.budget {
            let Some(oldest) = cache
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            let gone = cache.entries.remove(&oldest).map_or(0, |e| e.bytes);
            cache.bytes -= gone;
        }
        cache.clock += 1;
        let used = cache.clock;
        cache.bytes += bytes;
        let tensors = tensors
            .iter()
            .map(|t| (t.dtype(), t.shape().to_vec(), t.storage().clone()))
            .collect();
        cache.entries.insert(
            key,
            CachedConstants {
                tensors,
                bytes,
                used,
            },
        );
    }

    /// Drops every kept constant (their memory returns once no tensor holds them); whether
    /// there were any.
    fn drop_constants(&self) -> bool {
        let mut cache = self.inner.constants.lock().unwrap();
        cache.bytes = 0;
        !std::mem::take(&mut cache.entries).is_empty()
    }

    /// Reserves `bytes` of device memory for a tensor (released when the lease drops), or
    /// refuses them when the context's tensors would then exceed
    /// [`ContextOptions::max_memory`] (after dropping the constants kept between recordings).
    pub(crate) fn reserve_memory(&self, op: &'static str, bytes: u64) -> Result<MemoryLease> {
        let counter = &self.inner.memory_in_use;
        let max = self.inner.max_memory;
        let mut used = counter.load(Ordering::Relaxed);
        loop {
            let total = used.saturating_add(bytes);
            if total > max && self.drop_constants() {
                used = counter.load(Ordering::Relaxed);
                continue;
            }
            if total > max {
                return Err(Error::LimitExceeded {
                    op,
                    what: format!("{bytes} bytes of tensors (with {used} in use)"),
                    limit: "memory limit (ContextOptions::max_memory)",
                    needed: total,
                    max,
                });
            }
            match counter.compare_exchange_weak(used, total, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    return Ok(MemoryLease {
                        counter: counter.clone(),
                        bytes,
                    })
                }
                Err(now) => used = now,
            }
        }
    }

    /// The most bytes of tensors this context may hold at once (see
    /// [`ContextOptions::max_memory`]).
    pub fn max_memory(&self) -> u64 {
        self.inner.max_memory
    }

    /// Bytes of tensors this context holds on the device now.
    pub fn memory_in_use(&self) -> u64 {
        self.inner.memory_in_use.load(Ordering::Relaxed)
    }

    /// The most commands one recording may encode (see [`ContextOptions::max_commands`]).
    pub fn max_commands(&self) -> u64 {
        self.inner.max_commands
    }

    /// Invocations per workgroup of the 1-D kernels on this context (see
    /// [`ContextOptions::workgroup_size`]).
    pub fn workgroup_size(&self) -> u32 {
        self.inner.workgroup_size
    }

    /// 16-byte blocks per invocation of the data-movement kernels' GPU variants (see
    /// [`ContextOptions::gather_unroll`]).
    pub fn gather_unroll(&self) -> u32 {
        self.inner.gather_unroll
    }

    /// A buffer of `size` bytes (a multiple of 4, at least `contents`' length rounded up to
    /// a word) starting with `contents`; the rest is zeros. Unlike wgpu's
    /// `create_buffer_init`, which panics when the device cannot create the buffer (out of
    /// memory), this leaves the failure to the caller's error scope, which reports it.
    pub(crate) fn buffer_sized(
        &self,
        label: Option<&str>,
        usage: wgpu::BufferUsages,
        size: u64,
        contents: &[u8],
    ) -> wgpu::Buffer {
        let buffer = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
            label,
            size,
            usage,
            mapped_at_creation: true,
        });
        if let Ok(mut view) = buffer.get_mapped_range_mut(..) {
            view.slice(..contents.len()).copy_from_slice(contents);
            drop(view);
            buffer.unmap();
        }
        buffer
    }

    /// True when both handles share one device (tensors cannot move between devices).
    pub fn same_device(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The context of the crate's unit tests that need a GPU (no adapter is a failure).
#[cfg(all(test, feature = "native"))]
pub(crate) fn test_context() -> Context {
    Context::new_blocking(ContextOptions::default()).expect("a GPU adapter (lavapipe) is needed")
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;

    fn ctx() -> Context {
        test_context()
    }

    #[test]
    fn workgroup_size_follows_the_adapter_kind_and_limits() {
        let info = |name: &str, device_type| wgpu::AdapterInfo {
            name: name.into(),
            device_type,
            ..ctx().adapter_info().clone()
        };
        let limits = wgpu::Limits::default();
        let gpu = info("NVIDIA H100 80GB HBM3", wgpu::DeviceType::DiscreteGpu);
        assert_eq!(default_workgroup_size(&gpu, &limits), 256);
        let cpu = info("llvmpipe (LLVM 15.0.6, 256 bits)", wgpu::DeviceType::Cpu);
        assert_eq!(default_workgroup_size(&cpu, &limits), 64);
        // A software renderer that calls itself a GPU is still a CPU.
        let swiftshader = info("SwiftShader Device", wgpu::DeviceType::IntegratedGpu);
        assert_eq!(default_workgroup_size(&swiftshader, &limits), 64);
        let small = wgpu::Limits {
            max_compute_invocations_per_workgroup: 192,
            ..limits
        };
        assert_eq!(default_workgroup_size(&gpu, &small), 128);
    }
}
