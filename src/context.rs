//! The GPU context: instance, adapter, device and queue, plus caches of shader modules, layouts
//! and pipelines so that no kernel variant is compiled twice.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};

use crate::tensor::Storage;
use crate::{Error, Result};

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
    /// Invocations per workgroup of the data-movement and element-wise kernels (a power of
    /// two within the device's limits). `None`: [`default_workgroup_size`] for the adapter.
    pub workgroup_size: Option<u32>,
    /// Use the kernel variants written for CPU adapters (MatMul without workgroup memory or
    /// barriers, see [`crate::kernels::compute::MatMulKernel`]). `None`: when the adapter is a
    /// CPU one (lavapipe, SwiftShader, WARP).
    pub cpu_kernels: Option<bool>,
}

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub submissions: u64,
    pub host_waits: u64,
    pub pipelines_built: u64,
    /// GPU buffers created for tensors (uploads and op outputs; reused buffers not counted; a
    /// tensor held in several buffers counts each).
    pub buffers_created: u64,
}

/// Which kind of resource a binding of a kernel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Binding {
    Uniform,
    StorageRead,
    StorageReadWrite,
}

/// A kernel family: one WGSL file, one entry point, one binding layout.
pub(crate) struct KernelSource {
    pub name: &'static str,
    pub wgsl: &'static str,
    pub entry: &'static str,
    pub bindings: &'static [Binding],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PipelineKey {
    kernel: &'static str,
    constants: Vec<(&'static str, u32)>,
}

pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

struct Inner {
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    binding_limit: u64,
    segment_bytes: u64,
    workgroup_size: u32,
    cpu_kernels: bool,
    modules: Mutex<HashMap<&'static str, wgpu::ShaderModule>>,
    layouts: Mutex<HashMap<&'static [Binding], wgpu::BindGroupLayout>>,
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    /// Pipeline builds and buffer creations whose error scopes had not answered yet (the
    /// browser answers later); the next `Recorder::finish` awaits them. A failed pipeline
    /// leaves the cache.
    unchecked_builds: Mutex<Vec<(Option<PipelineKey>, ScopeCheck)>>,
    submissions: AtomicU64,
    host_waits: AtomicU64,
    pipelines_built: AtomicU64,
    buffers_created: AtomicU64,
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
        let limits = adapter.limits();
        let workgroup_size = match options.workgroup_size {
            None => default_workgroup_size(&info, &limits),
            Some(n)
                if n.is_power_of_two()
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
                         (max_compute_invocations_per_workgroup {}, max_compute_workgroup_size_x {})",
                        limits
                            .max_compute_invocations_per_workgroup
                            .min(limits.max_compute_workgroup_size_x),
                        info.name,
                        limits.max_compute_invocations_per_workgroup,
                        limits.max_compute_workgroup_size_x
                    ),
                ))
            }
        };
        let cpu_kernels = options.cpu_kernels.unwrap_or_else(|| is_software(&info));
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
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgpu-ops"),
                // Timestamps only let benchmarks time kernels on the GPU; nothing else needs them.
                required_features: adapter.features()
                    & (wgpu::Features::TIMESTAMP_QUERY
                        | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS),
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Adapter(format!("{}: cannot create device: {e}", info.name)))?;
        // Errors outside our error scopes would otherwise panic inside wgpu; log them instead.
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| {
            log::error!("uncaptured wgpu error: {e}");
        }));
        log::info!(
            "wgpu-ops on {} ({:?}, {:?})",
            info.name,
            info.backend,
            info.device_type
        );
        Ok(Context {
            inner: Arc::new(Inner {
                instance,
                adapter,
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
                cpu_kernels,
                limits,
                modules: Mutex::default(),
                layouts: Mutex::default(),
                pipelines: Mutex::default(),
                unchecked_builds: Mutex::default(),
                submissions: AtomicU64::new(0),
                host_waits: AtomicU64::new(0),
                pipelines_built: AtomicU64::new(0),
                buffers_created: AtomicU64::new(0),
            }),
        })
    }

    /// Blocking [`Context::new`] for native callers.
    #[cfg(feature = "native")]
    pub fn new_blocking(options: ContextOptions) -> Result<Context> {
        pollster::block_on(Context::new(options))
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.info
    }
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }
    pub fn instance(&self) -> &wgpu::Instance {
        &self.inner.instance
    }

    pub fn stats(&self) -> Stats {
        Stats {
            submissions: self.inner.submissions.load(Ordering::Relaxed),
            host_waits: self.inner.host_waits.load(Ordering::Relaxed),
            pipelines_built: self.inner.pipelines_built.load(Ordering::Relaxed),
            buffers_created: self.inner.buffers_created.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_buffers(&self, n: usize) {
        self.inner
            .buffers_created
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn submit(&self, commands: wgpu::CommandBuffer) -> wgpu::SubmissionIndex {
        self.inner.submissions.fetch_add(1, Ordering::Relaxed);
        self.inner.queue.submit([commands])
    }

    /// Waits for submitted work (native only: in the browser, map callbacks fire from the event
    /// loop and the awaited futures complete on their own).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_idle(&self) -> Result<()> {
        self.inner.host_waits.fetch_add(1, Ordering::Relaxed);
        self.inner
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::Readback(format!("waiting for the GPU failed: {e}")))
    }

    /// Runs `f` inside validation and out-of-memory error scopes attributed to `op`.
    pub(crate) fn scoped<T>(&self, op: &str, f: impl FnOnce() -> T) -> (T, ScopeCheck) {
        let oom = self
            .inner
            .device
            .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self
            .inner
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        let v = validation.pop();
        let o = oom.pop();
        (
            value,
            ScopeCheck {
                op: op.to_string(),
                futures: vec![Box::pin(v), Box::pin(o)],
            },
        )
    }

    /// The cached pipeline for `kernel` specialized with `constants` (WGSL `override`s).
    pub(crate) fn pipeline(
        &self,
        kernel: &'static KernelSource,
        constants: &[(&'static str, u32)],
    ) -> Result<Arc<Pipeline>> {
        let key = PipelineKey {
            kernel: kernel.name,
            constants: constants.to_vec(),
        };
        if let Some(p) = self.inner.pipelines.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let device = &self.inner.device;
        let (built, check) = self.scoped(kernel.name, || {
            let module = self
                .inner
                .modules
                .lock()
                .unwrap()
                .entry(kernel.name)
                .or_insert_with(|| {
                    device.create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(kernel.name),
                        source: wgpu::ShaderSource::Wgsl(kernel.wgsl.into()),
                    })
                })
                .clone();
            let layout = self
                .inner
                .layouts
                .lock()
                .unwrap()
                .entry(kernel.bindings)
                .or_insert_with(|| bind_group_layout(device, kernel.bindings))
                .clone();
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(kernel.name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let constants: Vec<(&str, f64)> =
                constants.iter().map(|&(n, v)| (n, f64::from(v))).collect();
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.name),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(kernel.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
            Pipeline { pipeline, layout }
        });
        let mut check = check;
        check.poll_now()?;
        if !check.futures.is_empty() {
            self.inner
                .unchecked_builds
                .lock()
                .unwrap()
                .push((Some(key.clone()), check));
        }
        self.inner.pipelines_built.fetch_add(1, Ordering::Relaxed);
        let built = Arc::new(built);
        self.inner
            .pipelines
            .lock()
            .unwrap()
            .insert(key, built.clone());
        Ok(built)
    }

    /// The most bytes in one GPU buffer (the device limit rounded down to 256 bytes, or less
    /// if the options said so). Tensors above it are held in several buffers of this size.
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

    /// Invocations per workgroup of the 1-D kernels on this context (see
    /// [`ContextOptions::workgroup_size`]).
    pub fn workgroup_size(&self) -> u32 {
        self.inner.workgroup_size
    }

    /// A buffer created holding `contents` (padded to 4 bytes). Unlike wgpu's
    /// `create_buffer_init`, which panics when the device cannot create the buffer (out of
    /// memory), this leaves the failure to the caller's error scope, which reports it.
    pub(crate) fn buffer_with(
        &self,
        label: Option<&str>,
        usage: wgpu::BufferUsages,
        contents: &[u8],
    ) -> wgpu::Buffer {
        let buffer = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
            label,
            size: (contents.len() as u64).div_ceil(4).max(1) * 4,
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

    pub(crate) fn check_same_device(
        &self,
        op: &'static str,
        input: &str,
        t: &crate::Tensor,
    ) -> Result<()> {
        if self.same_device(t.context()) {
            return Ok(());
        }
        Err(Error::invalid(
            op,
            input,
            format!(
                "{input} was created on another Context; tensors cannot be used across devices"
            ),
        ))
    }

    /// Starts recording GPU work; see [`Recorder`].
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.clone())
    }

    /// Records with `f` and submits once, waiting for validation results (native).
    #[cfg(feature = "native")]
    pub fn run<T>(&self, f: impl FnOnce(&mut Recorder) -> Result<T>) -> Result<T> {
        let mut rec = self.recorder();
        let value = f(&mut rec)?;
        pollster::block_on(rec.finish())?;
        Ok(value)
    }
}

fn bind_group_layout(device: &wgpu::Device, bindings: &[Binding]) -> wgpu::BindGroupLayout {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: match b {
                    Binding::Uniform => wgpu::BufferBindingType::Uniform,
                    Binding::StorageRead => wgpu::BufferBindingType::Storage { read_only: true },
                    Binding::StorageReadWrite => {
                        wgpu::BufferBindingType::Storage { read_only: false }
                    }
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &entries,
    })
}

// Send on native so that a Context (which keeps unchecked pipeline builds) stays Send + Sync;
// browser futures are not Send.
#[cfg(not(target_arch = "wasm32"))]
type ErrorFuture = Pin<Box<dyn Future<Output = Option<wgpu::Error>> + Send>>;
#[cfg(target_arch = "wasm32")]
type ErrorFuture = Pin<Box<dyn Future<Output = Option<wgpu::Error>>>>;

/// The popped error scopes of one recorded step. On native wgpu the result is known at once;
/// in the browser it arrives later and is awaited by [`Recorder::finish`].
pub(crate) struct ScopeCheck {
    op: String,
    futures: Vec<ErrorFuture>,
}

fn to_error(op: &str, e: wgpu::Error) -> Error {
    match e {
        wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory {
            op: op.to_string(),
            message: e.to_string(),
        },
        _ => Error::Validation {
            op: op.to_string(),
            message: e.to_string(),
        },
    }
}

impl ScopeCheck {
    /// Returns the first error already known; keeps the still-pending scopes in `self`.
    fn poll_now(&mut self) -> Result<()> {
        let mut cx = TaskContext::from_waker(Waker::noop());
        let mut first = None;
        self.futures.retain_mut(|f| match f.as_mut().poll(&mut cx) {
            Poll::Ready(e) => {
                if first.is_none() {
                    first = e;
                }
                false
            }
            Poll::Pending => true,
        });
        match first {
            Some(e) => Err(to_error(&self.op, e)),
            None => Ok(()),
        }
    }

    /// Fails with the scope's error if it is already known (always the case on native);
    /// otherwise `ctx`'s next `Recorder::finish` awaits it.
    pub(crate) fn now(mut self, ctx: &Context) -> Result<()> {
        self.poll_now()?;
        if !self.futures.is_empty() {
            ctx.inner
                .unchecked_builds
                .lock()
                .unwrap()
                .push((None, self));
        }
        Ok(())
    }

    async fn wait(self) -> Result<()> {
        for f in self.futures {
            if let Some(e) = f.await {
                return Err(to_error(&self.op, e));
            }
        }
        Ok(())
    }
}

/// One recorded GPU command, kept for replay (a Scan body is captured once and replayed for
/// every iteration).
pub(crate) enum Step {
    Dispatch {
        pipeline: Arc<Pipeline>,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
    },
    Copy {
        src: Arc<Storage>,
        src_offset: u64,
        dst: Arc<Storage>,
        dst_offset: u64,
        size: u64,
    },
    Clear {
        buffer: Arc<Storage>,
        offset: u64,
        size: u64,
    },
}

/// Records kernels of one or more ops into a single command buffer; [`Recorder::finish`]
/// submits them at once. Host-side validation errors come back from each op call; GPU
/// validation errors from the call (native) or from `finish` (browser).
pub struct Recorder {
    ctx: Context,
    encoder: wgpu::CommandEncoder,
    /// The compute pass that consecutive dispatches share (wgpu orders dispatches within a pass
    /// by their resource use, as between passes); ended before any other encoder command.
    /// One pass per dispatch cost tens of microseconds of host time each.
    pass: Option<wgpu::ComputePass<'static>>,
    pending: Vec<ScopeCheck>,
    dispatches: u64,
    /// While capturing, commands are collected here instead of being encoded.
    capture: Option<Vec<Step>>,
    /// Buffers of dead values, by size, for reuse within this recording.
    pool: HashMap<u64, Vec<Arc<Storage>>>,
}

impl Recorder {
    fn new(ctx: Context) -> Recorder {
        let encoder = ctx
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgpu-ops"),
            });
        Recorder {
            ctx,
            encoder,
            pass: None,
            pending: Vec::new(),
            dispatches: 0,
            capture: None,
            pool: HashMap::new(),
        }
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Number of compute dispatches recorded so far (replays included).
    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// Runs `f` on the encoder inside error scopes attributed to `op`.
    pub(crate) fn record<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&Context, &mut wgpu::CommandEncoder) -> T,
    ) -> Result<T> {
        let ctx = self.ctx.clone();
        let encoder = &mut self.encoder;
        let pass = &mut self.pass;
        let (value, check) = ctx.scoped(op, || {
            // Ending the pass reports its dispatches' errors, under this scope.
            *pass = None;
            f(&ctx, encoder)
        });
        self.keep(check)?;
        Ok(value)
    }

    /// Runs `f` (device calls only: buffers, bind groups) inside error scopes attributed to
    /// `op`, leaving an open compute pass open.
    fn on_device<T>(&mut self, op: &str, f: impl FnOnce(&Context) -> T) -> Result<T> {
        let ctx = self.ctx.clone();
        let (value, check) = ctx.scoped(op, || f(&ctx));
        self.keep(check)?;
        Ok(value)
    }

    /// Reports `check` now if its errors are known, or keeps it for `finish`.
    fn keep(&mut self, mut check: ScopeCheck) -> Result<()> {
        check.poll_now()?;
        if !check.futures.is_empty() {
            self.pending.push(check);
        }
        Ok(())
    }

    /// A tensor for an op's output: a pooled buffer of a dead value when one fits exactly,
    /// else a new one.
    pub(crate) fn alloc(&mut self, dtype: crate::DType, shape: &[usize]) -> Result<crate::Tensor> {
        let bytes = crate::host::checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .map(|b| crate::tensor::padded_size(b as u64));
        if let Some(storage) = bytes.and_then(|b| self.pool.get_mut(&b)).and_then(Vec::pop) {
            return Ok(crate::Tensor::from_parts(
                &self.ctx,
                dtype,
                shape.to_vec(),
                storage,
            ));
        }
        crate::Tensor::uninit(&self.ctx, dtype, shape)
    }

    /// Hands back the buffer of a tensor nobody will read again, for reuse by ops recorded
    /// later in this recording (only if no other handle to the buffer exists).
    pub fn release(&mut self, t: crate::Tensor) {
        if let Some(storage) = t.into_unique_storage() {
            self.pool.entry(storage.size()).or_default().push(storage);
        }
    }

    /// Runs `f` with commands collected instead of encoded; returns them for [`Self::replay`].
    pub(crate) fn capture<T>(
        &mut self,
        f: impl FnOnce(&mut Recorder) -> Result<T>,
    ) -> Result<(T, Vec<Step>)> {
        let outer = self.capture.replace(Vec::new());
        let result = f(self);
        let steps = std::mem::replace(&mut self.capture, outer).unwrap_or_default();
        Ok((result?, steps))
    }

    /// Encodes captured commands again (or appends them to an enclosing capture).
    pub(crate) fn replay(&mut self, steps: &[Step]) -> Result<()> {
        for step in steps {
            match step {
                Step::Dispatch {
                    pipeline,
                    bind_group,
                    grid,
                } => self.dispatch_bound(pipeline, bind_group.clone(), *grid)?,
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => self.copy(src, *src_offset, dst, *dst_offset, *size)?,
                Step::Clear {
                    buffer,
                    offset,
                    size,
                } => self.clear(buffer, *offset, *size)?,
            }
        }
        Ok(())
    }

    /// Records a copy of `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`
    /// (offsets and size multiples of 4, within both buffers).
    pub fn copy_bytes(
        &mut self,
        src: &crate::Tensor,
        src_offset: u64,
        dst: &crate::Tensor,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        let fits = |t: &crate::Tensor, offset: u64| {
            offset
                .checked_add(size)
                .is_some_and(|end| end <= t.storage().size())
        };
        if !(src_offset | dst_offset | size).is_multiple_of(4)
            || !fits(src, src_offset)
            || !fits(dst, dst_offset)
        {
            return Err(Error::invalid(
                "copy",
                "size",
                format!("copying {size} bytes from offset {src_offset} to offset {dst_offset} needs multiples of 4 within both buffers"),
            ));
        }
        self.copy(src.storage(), src_offset, dst.storage(), dst_offset, size)
    }

    /// Records a copy between storages (offsets and size multiples of 4): one buffer copy per
    /// stretch that stays inside one buffer of each.
    pub(crate) fn copy(
        &mut self,
        src: &Arc<Storage>,
        src_offset: u64,
        dst: &Arc<Storage>,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        if let Some(steps) = &mut self.capture {
            steps.push(Step::Copy {
                src: src.clone(),
                src_offset,
                dst: dst.clone(),
                dst_offset,
                size,
            });
            return Ok(());
        }
        self.record("copy", |_, encoder| {
            for (i, offset, len) in src.segments().ranges(src_offset, size) {
                let at = dst_offset + (i as u64 * src.segments().segment + offset - src_offset);
                for (j, dst_at, n) in dst.segments().ranges(at, len) {
                    let from = offset + (j as u64 * dst.segments().segment + dst_at - at);
                    encoder.copy_buffer_to_buffer(
                        &src.buffers()[i],
                        from,
                        &dst.buffers()[j],
                        dst_at,
                        n,
                    );
                }
            }
        })
    }

    /// Records zeroing `size` bytes of `buffer` from `offset` (both multiples of 4).
    pub(crate) fn clear(&mut self, buffer: &Arc<Storage>, offset: u64, size: u64) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        if let Some(steps) = &mut self.capture {
            steps.push(Step::Clear {
                buffer: buffer.clone(),
                offset,
                size,
            });
            return Ok(());
        }
        self.record("clear", |_, encoder| {
            for (i, at, n) in buffer.segments().ranges(offset, size) {
                encoder.clear_buffer(&buffer.buffers()[i], at, Some(n));
            }
        })
    }

    /// A uniform buffer holding `bytes` (kernel parameters), written when it is created.
    fn uniform(&mut self, op: &str, bytes: &[u8]) -> Result<wgpu::Buffer> {
        self.on_device(op, |ctx| {
            ctx.buffer_with(Some("params"), wgpu::BufferUsages::UNIFORM, bytes)
        })
    }

    /// Records one dispatch of `pipeline` over `grid` workgroups: `params` (the kernel's
    /// parameters) as a uniform at binding 0, then `buffers` bound in order.
    pub(crate) fn dispatch(
        &mut self,
        op: &str,
        pipeline: &Arc<Pipeline>,
        params: &[u8],
        buffers: &[wgpu::BindingResource<'_>],
        grid: [u32; 3],
    ) -> Result<()> {
        let uniform = self.uniform(op, params)?;
        let bind_group = self.on_device(op, |ctx| {
            let entries: Vec<wgpu::BindGroupEntry> = std::iter::once(uniform.as_entire_binding())
                .chain(buffers.iter().cloned())
                .enumerate()
                .map(|(i, resource)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource,
                })
                .collect();
            ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.layout,
                entries: &entries,
            })
        })?;
        self.dispatch_bound(pipeline, bind_group, grid)
    }

    fn dispatch_bound(
        &mut self,
        pipeline: &Arc<Pipeline>,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
    ) -> Result<()> {
        self.dispatches += 1;
        if let Some(steps) = &mut self.capture {
            steps.push(Step::Dispatch {
                pipeline: pipeline.clone(),
                bind_group,
                grid,
            });
            return Ok(());
        }
        let ctx = self.ctx.clone();
        let (encoder, pass) = (&mut self.encoder, &mut self.pass);
        let ((), check) = ctx.scoped("dispatch", || {
            let pass = pass.get_or_insert_with(|| {
                encoder
                    .begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: None,
                    })
                    .forget_lifetime()
            });
            pass.set_pipeline(&pipeline.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        });
        self.keep(check)
    }

    /// Writes a GPU timestamp into `set` at `index` (for benchmarks; needs the adapter's
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS`, which the context requests when available).
    pub fn timestamp(&mut self, set: &wgpu::QuerySet, index: u32) -> Result<()> {
        self.record("timestamp", |_, encoder| {
            encoder.write_timestamp(set, index)
        })
    }

    /// Submits everything recorded, then reports any GPU error the recording raised.
    pub async fn finish(self) -> Result<()> {
        let Recorder {
            ctx,
            encoder,
            pass,
            mut pending,
            ..
        } = self;
        let ((), check) = ctx.scoped("submit", || {
            drop(pass);
            ctx.submit(encoder.finish());
        });
        pending.push(check);
        // A pipeline that failed to build makes the submission fail too; its own error (the
        // shader compiler's message) is the one worth reporting, so it is awaited first.
        let builds = std::mem::take(&mut *ctx.inner.unchecked_builds.lock().unwrap());
        for (key, check) in builds {
            if let Err(e) = check.wait().await {
                if let Some(key) = key {
                    ctx.inner.pipelines.lock().unwrap().remove(&key);
                }
                return Err(e);
            }
        }
        for check in pending {
            check.wait().await?;
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::new_blocking(ContextOptions::default())
            .expect("a GPU adapter (lavapipe) is needed")
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

    #[test]
    fn shader_errors_come_back_as_errors_naming_the_kernel() {
        static BROKEN: KernelSource = KernelSource {
            name: "broken_kernel",
            wgsl: "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
            entry: "main",
            bindings: &[],
        };
        match ctx().pipeline(&BROKEN, &[]) {
            Err(Error::Validation { op, message }) => {
                assert_eq!(op, "broken_kernel");
                assert!(!message.is_empty());
            }
            Err(e) => panic!("expected a validation error, got {e}"),
            Ok(_) => panic!("a broken shader compiled"),
        }
    }

    #[test]
    fn validation_errors_while_recording_come_back_as_errors() {
        let ctx = ctx();
        let buffer = |usage| {
            ctx.device().create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        let src = buffer(wgpu::BufferUsages::COPY_SRC);
        let dst = buffer(wgpu::BufferUsages::STORAGE); // no COPY_DST: the copy is invalid
        let mut rec = ctx.recorder();
        let recorded = rec.record("copy probe", |_, encoder| {
            encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, 16);
        });
        let result = recorded.and_then(|()| pollster::block_on(rec.finish()));
        match result {
            Err(Error::Validation { op, .. }) => {
                assert!(op == "copy probe" || op == "submit", "{op}")
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
    }
}
