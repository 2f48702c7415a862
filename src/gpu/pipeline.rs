//! Kernel sources, their bind-group layouts, and the context's cache of compiled pipelines (no
//! kernel variant is compiled twice; a build that fails leaves the cache).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Context;
use crate::Result;

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
pub(super) struct PipelineKey {
    kernel: &'static str,
    constants: Vec<(&'static str, u32)>,
}

pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

impl Context {
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
        if !check.is_settled() {
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

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;
    use crate::{ContextOptions, Error};

    fn ctx() -> Context {
        Context::new_blocking(ContextOptions::default())
            .expect("a GPU adapter (lavapipe) is needed")
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
}
