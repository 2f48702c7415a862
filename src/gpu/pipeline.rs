//! Kernel sources, their bind-group layouts, and the context's cache of compiled pipelines (a
//! kernel variant is compiled once while it is in use or among the recently used ones; a
//! build that fails leaves the cache).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Context;
use crate::Result;

/// Which kind of resource a binding of a kernel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binding {
    /// A uniform buffer (the kernel's parameters).
    Uniform,
    /// A storage buffer the kernel only reads.
    StorageRead,
    /// A storage buffer the kernel writes.
    StorageReadWrite,
}

/// What the pipeline cache needs of a kernel variant. The kernels layer describes each variant
/// with a typed key; this layer only compiles and caches what the key says.
pub trait KernelSpec {
    /// Names the shader text: variants with the same text share one shader module.
    fn module(&self) -> Cow<'static, str>;
    /// The WGSL text (asked for only when the module is not cached yet).
    fn source(&self) -> Cow<'static, str>;
    /// The entry point's name in the module.
    fn entry(&self) -> &'static str;
    /// Values of the shader's `override` constants.
    fn constants(&self) -> Vec<(&'static str, u32)>;
    /// The kinds of its bindings, in binding order (group 0).
    fn bindings(&self) -> &'static [Binding];
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct PipelineKey {
    module: Cow<'static, str>,
    entry: &'static str,
    constants: Vec<(&'static str, u32)>,
    /// Bindings (bit i: binding i) whose buffer offset is given when the bind group is set
    /// (see [`Context::moving_variant`]).
    moving: u64,
}

pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    key: PipelineKey,
    bindings: &'static [Binding],
    module: wgpu::ShaderModule,
}

impl Pipeline {
    pub(crate) fn bindings(&self) -> &'static [Binding] {
        self.bindings
    }

    /// The kernel's module (shader file and variant) and entry point.
    pub(crate) fn name(&self) -> String {
        format!("{} ({})", self.key.module, self.key.entry)
    }
}

/// The context's compiled pipelines: all those in use (held by a recording or a session's
/// logged commands) and at most `capacity` others, the most recently used.
pub(super) struct PipelineCache {
    entries: crate::FastMap<PipelineKey, Cached>,
    /// Counts lookups: an entry's `used` is the count at its last one.
    clock: u64,
    capacity: usize,
}

struct Cached {
    pipeline: Arc<Pipeline>,
    used: u64,
}

impl PipelineCache {
    pub(super) fn new(capacity: usize) -> PipelineCache {
        PipelineCache {
            entries: Default::default(),
            clock: 0,
            capacity,
        }
    }

    fn get(&mut self, key: &PipelineKey) -> Option<Arc<Pipeline>> {
        self.clock += 1;
        let cached = self.entries.get_mut(key)?;
        cached.used = self.clock;
        Some(cached.pipeline.clone())
    }

    /// Adds `pipeline` and drops the least recently used of those nobody holds beyond the
    /// capacity; returns the modules that no pipeline left in the cache was built from.
    fn insert(&mut self, key: PipelineKey, pipeline: Arc<Pipeline>) -> Vec<Cow<'static, str>> {
        self.clock += 1;
        let used = self.clock;
        self.entries.insert(key, Cached { pipeline, used });
        if self.entries.len() <= self.capacity {
            return Vec::new();
        }
        // The new one counts as idle (its caller may drop it at once) but stays: a kernel
        // in use must be found here.
        let keep = self.capacity.saturating_sub(1);
        // Only the cache holds these (a holder clones under this cache's lock or from its
        // own clone, so the count cannot rise while it is held).
        let mut idle: Vec<(u64, &PipelineKey)> = self
            .entries
            .iter()
            .filter(|(_, c)| c.used != used && Arc::strong_count(&c.pipeline) == 1)
            .map(|(k, c)| (c.used, k))
            .collect();
        if idle.len() <= keep {
            return Vec::new();
        }
        idle.sort_unstable_by_key(|&(used, _)| used);
        let dropped: Vec<PipelineKey> = idle[..idle.len() - keep]
            .iter()
            .map(|&(_, k)| k.clone())
            .collect();
        for key in &dropped {
            self.entries.remove(key);
        }
        let mut unused: Vec<Cow<'static, str>> = dropped.into_iter().map(|k| k.module).collect();
        unused.sort_unstable();
        unused.dedup();
        unused.retain(|m| !self.entries.keys().any(|k| &k.module == m));
        unused
    }

    pub(super) fn remove(&mut self, key: &PipelineKey) {
        self.entries.remove(key);
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl Context {
    /// Compiled kernels the context holds now: those in use and at most
    /// [`ContextOptions::cached_pipelines`](super::ContextOptions::cached_pipelines) others.
    pub fn cached_pipelines(&self) -> usize {
        self.inner.pipelines.lock().unwrap().len()
    }

    /// The cached pipeline of `kernel` (built on first use).
    pub(crate) fn pipeline(&self, kernel: &dyn KernelSpec) -> Result<Arc<Pipeline>> {
        let key = PipelineKey {
            module: kernel.module(),
            entry: kernel.entry(),
            constants: kernel.constants(),
            moving: 0,
        };
        if let Some(p) = self.inner.pipelines.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let module = self.inner.modules.lock().unwrap().get(&key.module).cloned();
        self.build(key, kernel.bindings(), module, &|| kernel.source())
    }

    /// `pipeline`'s kernel with the bindings of `moving` (bit i: binding i, storage buffers)
    /// taking their offsets when bound, so one bind group serves every iteration of a Scan
    /// whose element moves through a larger buffer (cached like the kernel itself).
    pub(crate) fn moving_variant(&self, pipeline: &Pipeline, moving: u64) -> Result<Arc<Pipeline>> {
        let key = PipelineKey {
            moving,
            ..pipeline.key.clone()
        };
        if let Some(p) = self.inner.pipelines.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let source = || -> Cow<'static, str> { unreachable!("the module is given") };
        self.build(
            key,
            pipeline.bindings,
            Some(pipeline.module.clone()),
            &source,
        )
    }

    /// `source` as this context compiles it: with the built-in f16 conversions where they
    /// are exact here (see [`super::f16`]).
    pub(crate) fn adapted(&self, source: Cow<'static, str>) -> Cow<'static, str> {
        match self.inner.native_f16 {
            true => super::f16::with_native_f16(&source).map_or(source, Cow::Owned),
            false => source,
        }
    }

    fn build(
        &self,
        key: PipelineKey,
        bindings: &'static [Binding],
        module: Option<wgpu::ShaderModule>,
        source: &dyn Fn() -> Cow<'static, str>,
    ) -> Result<Arc<Pipeline>> {
        let device = &self.inner.device;
        let label = format!("{} {}", key.module, key.entry);
        let (built, check) = self.scoped(&label, || {
            let module = module.unwrap_or_else(|| {
                self.inner
                    .modules
                    .lock()
                    .unwrap()
                    .entry(key.module.clone())
                    .or_insert_with(|| {
                        device.create_shader_module(wgpu::ShaderModuleDescriptor {
                            label: Some(&key.module),
                            source: wgpu::ShaderSource::Wgsl(self.adapted(source())),
                        })
                    })
                    .clone()
            });
            let layout = self
                .inner
                .layouts
                .lock()
                .unwrap()
                .entry((bindings, key.moving))
                .or_insert_with(|| bind_group_layout(device, bindings, key.moving))
                .clone();
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(&label),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let constants: Vec<(&str, f64)> = key
                .constants
                .iter()
                .map(|&(n, v)| (n, f64::from(v)))
                .collect();
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(key.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
            Pipeline {
                pipeline,
                layout,
                key: key.clone(),
                bindings,
                module,
            }
        });
        let mut check = check;
        check.poll_now()?;
        if !check.is_settled() {
            self.inner
                .unchecked_builds
                .lock()
                .unwrap()
                .push((Some(key.clone()), check));
        }
        self.inner.pipelines_built.fetch_add(1, Ordering::Relaxed);
        let built = Arc::new(built);
        let unused = self
            .inner
            .pipelines
            .lock()
            .unwrap()
            .insert(key, built.clone());
        if !unused.is_empty() {
            let mut modules = self.inner.modules.lock().unwrap();
            for module in &unused {
                modules.remove(module);
            }
        }
        Ok(built)
    }
}

fn bind_group_layout(
    device: &wgpu::Device,
    bindings: &[Binding],
    moving: u64,
) -> wgpu::BindGroupLayout {
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
                has_dynamic_offset: moving >> i & 1 == 1,
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

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;
    use crate::Error;

    fn ctx() -> Context {
        crate::gpu::test_context()
    }

    #[test]
    fn shader_errors_come_back_as_errors_naming_the_kernel() {
        struct Broken;
        impl KernelSpec for Broken {
            fn module(&self) -> Cow<'static, str> {
                "broken_kernel".into()
            }
            fn source(&self) -> Cow<'static, str> {
                "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }".into()
            }
            fn entry(&self) -> &'static str {
                "main"
            }
            fn constants(&self) -> Vec<(&'static str, u32)> {
                Vec::new()
            }
            fn bindings(&self) -> &'static [Binding] {
                &[]
            }
        }
        match ctx().pipeline(&Broken) {
            Err(Error::Validation { op, message }) => {
                assert_eq!(op, "broken_kernel main");
                assert!(!message.is_empty());
            }
            Err(e) => panic!("expected a validation error, got {e}"),
            Ok(_) => panic!("a broken shader compiled"),
        }
    }

    /// A kernel writing `value` (one module per value); counts the times its source is asked
    /// for, that is, its module compiled.
    struct Writes<'a> {
        value: u32,
        sources: &'a std::cell::Cell<u32>,
    }

    impl KernelSpec for Writes<'_> {
        fn module(&self) -> Cow<'static, str> {
            format!("writes_{}", self.value).into()
        }
        fn source(&self) -> Cow<'static, str> {
            self.sources.set(self.sources.get() + 1);
            format!(
                "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                 @compute @workgroup_size(1) fn main() {{ out[0] = {}u; }}",
                self.value
            )
            .into()
        }
        fn entry(&self) -> &'static str {
            "main"
        }
        fn constants(&self) -> Vec<(&'static str, u32)> {
            Vec::new()
        }
        fn bindings(&self) -> &'static [Binding] {
            &[Binding::StorageReadWrite]
        }
    }

    #[test]
    fn the_cache_keeps_kernels_in_use_and_the_most_recently_used_others() {
        let ctx = Context::new_blocking(crate::ContextOptions {
            cached_pipelines: Some(2),
            ..Default::default()
        })
        .unwrap();
        let sources = std::cell::Cell::new(0);
        let kernel = |value| Writes {
            value,
            sources: &sources,
        };
        let built = || ctx.stats().pipelines_built;
        let in_use = ctx.pipeline(&kernel(0)).unwrap();
        for value in 1..=3 {
            ctx.pipeline(&kernel(value)).unwrap();
        }
        assert_eq!((built(), sources.get()), (4, 4));
        // 1 went when 3 came; 2 and 3 are idle, 0 is in use.
        assert_eq!(ctx.cached_pipelines(), 3);
        ctx.pipeline(&kernel(2)).unwrap();
        ctx.pipeline(&kernel(4)).unwrap();
        // 3 was used least recently, so 4 took its place, not 2's.
        assert_eq!(ctx.cached_pipelines(), 3);
        for value in [0, 2, 4] {
            ctx.pipeline(&kernel(value)).unwrap();
        }
        assert_eq!((built(), sources.get()), (5, 5));
        // A kernel that went is compiled again, its module too (no other kernel used it).
        ctx.pipeline(&kernel(3)).unwrap();
        assert_eq!((built(), sources.get()), (6, 6));
        // Once nothing holds it, the kernel in use is an idle one like the others.
        drop(in_use);
        ctx.pipeline(&kernel(1)).unwrap();
        assert_eq!(ctx.cached_pipelines(), 2);
        assert!(Arc::ptr_eq(
            &ctx.pipeline(&kernel(1)).unwrap(),
            &ctx.pipeline(&kernel(1)).unwrap()
        ));
    }
}
