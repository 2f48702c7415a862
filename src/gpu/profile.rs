//! Per-dispatch GPU times: after [`Context::start_profile`] every dispatch a recorder encodes
//! runs in a compute pass of its own whose start and end the GPU stamps, and
//! [`Context::take_profile`] reads the stamps back as each dispatch's time, named by its
//! kernel. For finding which kernels a model's time goes to; timing a whole run is the
//! benchmarks' business (a pass per dispatch takes away the overlap of dispatches that share
//! a pass, so the sum can exceed a run's time without the profile).

use std::ops::Range;
use std::sync::atomic::Ordering;

use super::{Context, Pipeline, ScopeCheck};
use crate::{Error, Result};

/// One dispatch's time on the GPU.
#[derive(Clone, Debug)]
pub struct DispatchTime {
    /// The kernel: its module (shader file and variant) and entry point.
    pub kernel: String,
    /// Nanoseconds from the start of its compute pass to the end.
    pub ns: f64,
}

/// The dispatches recorded between [`Context::start_profile`] and [`Context::take_profile`],
/// in the order they were encoded.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Each timed dispatch: its kernel and GPU time.
    pub dispatches: Vec<DispatchTime>,
    /// Dispatches encoded once the profile was full, not timed.
    pub untimed: u64,
}

impl Profile {
    /// The dispatches' times added up, in nanoseconds.
    pub fn total_ns(&self) -> f64 {
        self.dispatches.iter().map(|d| d.ns).sum()
    }

    /// Per kernel: its name, its dispatches and their nanoseconds together, most time first.
    pub fn by_kernel(&self) -> Vec<(String, usize, f64)> {
        let mut kernels: Vec<(String, usize, f64)> = Vec::new();
        for d in &self.dispatches {
            match kernels.iter_mut().find(|(k, _, _)| *k == d.kernel) {
                Some(entry) => {
                    entry.1 += 1;
                    entry.2 += d.ns;
                }
                None => kernels.push((d.kernel.clone(), 1, d.ns)),
            }
        }
        kernels.sort_by(|a, b| b.2.total_cmp(&a.2));
        kernels
    }

    /// [`Profile::by_kernel`] as a table: microseconds, share of the total, dispatches and
    /// the kernel (names cut to `width` characters).
    pub fn table(&self, width: usize) -> String {
        let total = self.total_ns();
        let mut lines = vec![format!(
            "{:>10} {:>6} {:>10}  kernel",
            "us", "share", "dispatches"
        )];
        for (kernel, n, ns) in self.by_kernel() {
            let name: String = kernel.chars().take(width).collect();
            let share = if total > 0.0 { ns / total } else { 0.0 };
            lines.push(format!(
                "{:>10.1} {:>5.1}% {n:>10}  {name}",
                ns / 1e3,
                100.0 * share
            ));
        }
        lines.push(format!(
            "{:>10.1} {:>6} {:>10}  in all{}",
            total / 1e3,
            "",
            self.dispatches.len(),
            if self.untimed > 0 {
                format!(
                    " ({} more dispatches past the profile's capacity, not timed)",
                    self.untimed
                )
            } else {
                String::new()
            }
        ));
        lines.join("\n")
    }
}

/// A profile being recorded: a timestamp query pair per dispatch, resolved into `resolved`
/// as each command buffer is submitted.
pub(super) struct Profiler {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    capacity: u32,
    kernels: Vec<String>,
    untimed: u64,
    /// The error scopes around the query set's creation, where they had not answered yet
    /// (the browser answers later).
    created: Option<ScopeCheck>,
}

/// Where a recorder's encoder wrote timestamps: the queries to resolve before it is finished.
pub(crate) struct Stamped {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    queries: Range<u32>,
}

impl Stamped {
    /// Takes in the queries of one more dispatch (`pair`, from [`Context::profile_pair`]).
    pub(crate) fn extend(stamped: &mut Option<Stamped>, pair: &ProfilePair) {
        let queries = 2 * pair.index..2 * pair.index + 2;
        match stamped {
            Some(s) if s.set == pair.set => {
                s.queries = s.queries.start.min(queries.start)..s.queries.end.max(queries.end)
            }
            // A new profile (the old one's queries were read already or never will be).
            _ => {
                *stamped = Some(Stamped {
                    set: pair.set.clone(),
                    resolved: pair.resolved.clone(),
                    queries,
                })
            }
        }
    }

    /// Copies the stamps into the profile's buffer, in `encoder` (before it is finished).
    /// Resolving starts at a query whose offset in the buffer WebGPU allows (a multiple of
    /// 256 bytes); the queries before `start` there were written by earlier command buffers
    /// and still hold their stamps.
    pub(crate) fn resolve(self, encoder: &mut wgpu::CommandEncoder) {
        let per_offset = (wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT / 8) as u32;
        let start = self.queries.start / per_offset * per_offset;
        encoder.resolve_query_set(
            &self.set,
            start..self.queries.end,
            &self.resolved,
            u64::from(start) * 8,
        );
    }
}

/// The queries of one dispatch's compute pass: `2 index` at its start, `2 index + 1` at its
/// end.
pub(crate) struct ProfilePair {
    pub(crate) set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    pub(crate) index: u32,
}

impl Context {
    /// Times every dispatch encoded from now on, up to `capacity` of them (at most 2 048),
    /// until [`Context::take_profile`]: each runs in a compute pass of its own, stamped at its
    /// start and end. Needs the adapter's timestamp queries (`TIMESTAMP_QUERY`). A profile
    /// already started is dropped.
    pub fn start_profile(&self, capacity: u32) -> Result<()> {
        const OP: &str = "profile";
        if !self.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(Error::invalid(
                OP,
                "adapter",
                format!(
                    "{} has no timestamp queries (TIMESTAMP_QUERY) to time dispatches with",
                    self.adapter_info().name
                ),
            ));
        }
        let most = wgpu::QUERY_SET_MAX_QUERIES / 2;
        if !(1..=most).contains(&capacity) {
            return Err(Error::invalid(
                OP,
                "capacity",
                format!("capacity {capacity} is outside 1 to {most} dispatches"),
            ));
        }
        let device = self.device();
        let ((set, resolved), mut created) = self.scoped(OP, || {
            let set = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("wgpu-ops profile"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * capacity,
            });
            let resolved = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgpu-ops profile"),
                size: 16 * u64::from(capacity),
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            (set, resolved)
        });
        created.poll_now()?;
        *self.inner.profiler.lock().unwrap() = Some(Profiler {
            set,
            resolved,
            capacity,
            kernels: Vec::new(),
            untimed: 0,
            created: (!created.is_settled()).then_some(created),
        });
        self.inner.profiling.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The queries to stamp `pipeline`'s next dispatch with, while a profile is recorded and
    /// has room (else `None`, counting the dispatch as untimed).
    pub(crate) fn profile_pair(&self, pipeline: &Pipeline) -> Option<ProfilePair> {
        if !self.inner.profiling.load(Ordering::Relaxed) {
            return None;
        }
        let mut profiler = self.inner.profiler.lock().unwrap();
        let p = profiler.as_mut()?;
        let index = p.kernels.len() as u32;
        if index >= p.capacity {
            p.untimed += 1;
            return None;
        }
        p.kernels.push(pipeline.name());
        Some(ProfilePair {
            set: p.set.clone(),
            resolved: p.resolved.clone(),
            index,
        })
    }

    /// Ends the profile [`Context::start_profile`] began and returns each dispatch's time.
    /// Call it once the recorders that encoded them have finished (their command buffers
    /// resolve the stamps when submitted).
    pub async fn take_profile(&self) -> Result<Profile> {
        const OP: &str = "profile";
        self.inner.profiling.store(false, Ordering::Relaxed);
        let Some(profiler) = self.inner.profiler.lock().unwrap().take() else {
            return Err(Error::invalid(
                OP,
                "context",
                "no profile was started (Context::start_profile)",
            ));
        };
        if let Some(created) = profiler.created {
            created.wait().await?;
        }
        let n = profiler.kernels.len();
        if n == 0 {
            return Ok(Profile {
                dispatches: Vec::new(),
                untimed: profiler.untimed,
            });
        }
        let bytes = 16 * n as u64;
        let device = self.device();
        let (read, check) = self.scoped(OP, || {
            let read = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgpu-ops profile read-back"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(&profiler.resolved, 0, &read, 0, bytes);
            self.submit(encoder.finish());
            read
        });
        check.wait().await?;
        let (tx, rx) = futures_channel::oneshot::channel();
        read.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Adapter(format!("profile: {e}")))?;
        rx.await
            .map_err(|_| Error::Adapter("profile: the device was lost".into()))?
            .map_err(|e| Error::Adapter(format!("profile: {e}")))?;
        let stamps: Vec<u64> = {
            let view = read
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Adapter(format!("profile: {e}")))?;
            bytemuck::cast_slice(&view).to_vec()
        };
        read.unmap();
        let period = f64::from(self.inner.queue.get_timestamp_period());
        let dispatches = profiler
            .kernels
            .into_iter()
            .zip(stamps.chunks_exact(2))
            .map(|(kernel, pair)| DispatchTime {
                kernel,
                ns: pair[1].saturating_sub(pair[0]) as f64 * period,
            })
            .collect();
        Ok(Profile {
            dispatches,
            untimed: profiler.untimed,
        })
    }

    /// Blocking [`Context::take_profile`] for native callers.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn take_profile_blocking(&self) -> Result<Profile> {
        pollster::block_on(self.take_profile())
    }
}
