//! A whole run's commands, logged as they are encoded, to be encoded again: a session whose
//! next run has the same inputs' shapes (see `graph::replay`) submits the logged commands
//! instead of planning and recording the graph anew. Unlike a captured Scan body ([`Step`]),
//! the log holds what was encoded: a loop's iterations one by one, each dispatch with the
//! dynamic offsets it was encoded with.

use std::sync::{Arc, Weak};

use super::{Bound, Recorder};
use crate::gpu::{Binding, Pipeline};
use crate::storage::Storage;
use crate::{Error, Result};

/// The most commands a run may encode and still be logged: the log holds them between runs,
/// and a run as long as a submission is long enough for its planning not to matter.
pub(crate) const MAX_LOGGED: usize = super::COMMANDS_PER_SUBMISSION as usize;

/// One command a run encoded.
#[derive(Clone)]
pub(crate) enum Logged {
    Dispatch {
        pipeline: Arc<Pipeline>,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
        /// The dynamic offsets it was encoded with (a Scan iteration's elements in place).
        offsets: Box<[u32]>,
        bound: Arc<[Bound]>,
    },
    /// Copies and clears do not keep their storages alive (the session's pool and its callers
    /// do), so that the log changes no handle count that decides whether a buffer is reused.
    Copy {
        src: Weak<Storage>,
        src_offset: u64,
        dst: Weak<Storage>,
        dst_offset: u64,
        size: u64,
    },
    Clear {
        buffer: Weak<Storage>,
        offset: u64,
        size: u64,
    },
}

impl Logged {
    pub(super) fn dispatch(
        pipeline: &Arc<Pipeline>,
        bind_group: &wgpu::BindGroup,
        grid: [u32; 3],
        offsets: &[u32],
        bound: &Arc<[Bound]>,
    ) -> Logged {
        Logged::Dispatch {
            pipeline: pipeline.clone(),
            bind_group: bind_group.clone(),
            grid,
            offsets: offsets.into(),
            bound: bound.clone(),
        }
    }

    /// The buffers the command binds (a dispatch's parameters excluded), copies or clears,
    /// or with `written` those it may write only (read-write bindings, a copy's destination);
    /// `None` where a storage it copies or clears is gone.
    fn buffers(&self, written: bool, out: &mut Vec<wgpu::Buffer>) -> Option<()> {
        match self {
            Logged::Dispatch {
                pipeline, bound, ..
            } => {
                for (b, kind) in bound.iter().zip(pipeline.bindings()) {
                    let wanted = match written {
                        true => *kind == Binding::StorageReadWrite,
                        false => *kind != Binding::Uniform,
                    };
                    if wanted {
                        out.extend(b.buffer().cloned());
                    }
                }
            }
            Logged::Copy { src, dst, .. } => {
                if !written {
                    out.extend(src.upgrade()?.buffers().iter().cloned());
                }
                out.extend(dst.upgrade()?.buffers().iter().cloned())
            }
            Logged::Clear { buffer, .. } => out.extend(buffer.upgrade()?.buffers().iter().cloned()),
        }
        Some(())
    }
}

/// Every buffer `steps` may write, once each; `None` where a storage they copy or clear is
/// gone.
pub(crate) fn written_buffers(steps: &[Logged]) -> Option<Vec<wgpu::Buffer>> {
    step_buffers(steps, true)
}

/// Every buffer `steps` bind (but for parameters), copy or clear, once each; `None` where a
/// storage they copy or clear is gone.
pub(crate) fn used_buffers(steps: &[Logged]) -> Option<Vec<wgpu::Buffer>> {
    step_buffers(steps, false)
}

fn step_buffers(steps: &[Logged], written: bool) -> Option<Vec<wgpu::Buffer>> {
    let mut all = Vec::new();
    for step in steps {
        step.buffers(written, &mut all)?;
    }
    Some(once_each(all))
}

fn once_each(all: Vec<wgpu::Buffer>) -> Vec<wgpu::Buffer> {
    let mut out: Vec<wgpu::Buffer> = Vec::with_capacity(all.len().min(64));
    for b in all {
        if !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

/// One storage of a log replaced by another of the same layout (see [`Recorder::relogged`]).
pub(crate) struct Swap {
    /// The storage replaced (compared by address: it may be gone), and its buffers.
    pub from: *const Storage,
    pub from_buffers: Vec<wgpu::Buffer>,
    pub to: Arc<Storage>,
}

impl Recorder {
    /// Logs every command encoded from now on (see [`Logged`]).
    pub(crate) fn start_log(&mut self) {
        self.log = Some(Vec::new());
    }

    /// The commands logged since [`Self::start_log`], if the whole run could be logged.
    pub(crate) fn take_log(&mut self) -> Option<Vec<Logged>> {
        self.log.take()
    }

    pub(super) fn log_step(&mut self, step: impl FnOnce() -> Logged) {
        if let Some(log) = &mut self.log {
            if log.len() >= MAX_LOGGED {
                self.log = None;
            } else {
                log.push(step());
            }
        }
    }

    /// Encodes logged commands again, under one pair of error scopes (the storages they copy
    /// and clear must be alive: see [`used_buffers`]).
    pub(crate) fn replay_logged(&mut self, steps: &[Logged]) -> Result<()> {
        let gone = || Error::Graph("internal: a replayed run's buffer is gone".into());
        let ctx = self.ctx.clone();
        self.in_replay = true;
        let (result, check) = ctx.scoped("replayed run", || -> Result<()> {
            for step in steps {
                match step {
                    Logged::Dispatch {
                        pipeline,
                        bind_group,
                        grid,
                        offsets,
                        ..
                    } => self.encode_dispatch(pipeline, bind_group, *grid, offsets)?,
                    Logged::Copy {
                        src,
                        src_offset,
                        dst,
                        dst_offset,
                        size,
                    } => {
                        let (src, dst) = (src.upgrade().ok_or_else(gone)?, dst.upgrade());
                        let dst = dst.ok_or_else(gone)?;
                        self.copy_buffer(&src, *src_offset, &dst, *dst_offset, *size)?
                    }
                    Logged::Clear {
                        buffer,
                        offset,
                        size,
                    } => {
                        let buffer = buffer.upgrade().ok_or_else(gone)?;
                        self.clear(&buffer, *offset, *size)?
                    }
                }
            }
            Ok(())
        });
        self.in_replay = false;
        self.keep(check)?;
        result
    }

    /// `steps` with storages replaced as `swaps` says (each from one storage, its buffers,
    /// to another of the same layout): copies and clears take the new storage, dispatches
    /// binding the old one get a bind group binding the new one at the same offsets.
    pub(crate) fn relogged(&mut self, steps: &[Logged], swaps: &[Swap]) -> Result<Vec<Logged>> {
        let storage = |s: &Weak<Storage>| {
            swaps
                .iter()
                .find(|w| std::ptr::eq(w.from, s.as_ptr()))
                .map_or_else(|| s.clone(), |w| Arc::downgrade(&w.to))
        };
        let pairs: Vec<(&wgpu::Buffer, &wgpu::Buffer)> = swaps
            .iter()
            .flat_map(|w| w.from_buffers.iter().zip(w.to.buffers()))
            .collect();
        let mut out = Vec::with_capacity(steps.len());
        for step in steps {
            out.push(match step {
                Logged::Dispatch {
                    pipeline,
                    grid,
                    offsets,
                    bound,
                    ..
                } => {
                    let mut changed = false;
                    let rebound: Vec<Bound> = bound
                        .iter()
                        .map(|b| {
                            let to = pairs.iter().find_map(|&(from, to)| b.replaced(from, to));
                            changed |= to.is_some();
                            to.unwrap_or_else(|| b.clone())
                        })
                        .collect();
                    if !changed {
                        out.push(step.clone());
                        continue;
                    }
                    let resources: Option<Vec<wgpu::BindingResource<'_>>> =
                        rebound.iter().map(Bound::resource).collect();
                    // Every binding a kernel has is a buffer (see `Bound::of`).
                    let resources = resources.ok_or_else(|| {
                        Error::Graph("internal: a logged dispatch binds a non-buffer".into())
                    })?;
                    Logged::Dispatch {
                        pipeline: pipeline.clone(),
                        bind_group: self.bind_group("replayed run", pipeline, &resources)?,
                        grid: *grid,
                        offsets: offsets.clone(),
                        bound: rebound.into(),
                    }
                }
                Logged::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => Logged::Copy {
                    src: storage(src),
                    src_offset: *src_offset,
                    dst: storage(dst),
                    dst_offset: *dst_offset,
                    size: *size,
                },
                Logged::Clear {
                    buffer,
                    offset,
                    size,
                } => Logged::Clear {
                    buffer: storage(buffer),
                    offset: *offset,
                    size: *size,
                },
            });
        }
        Ok(out)
    }
}
