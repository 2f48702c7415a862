//! Bindings that move with a loop's iteration. A Scan body captured against an element buffer
//! (a scan input's element, or the element of a scan output) can instead bind, at iteration
//! `t`, the bytes of that element inside the whole sequence: the bind group is made once with
//! dynamic offsets, and each replay passes the iteration's offsets. The iteration then reads
//! its scan inputs and writes its scan outputs in place, with no copy.

use std::num::NonZeroU64;

use super::{Recorder, Step};
use crate::Result;

/// The most moving bindings one dispatch may have (also bounded by the device's
/// `max_dynamic_storage_buffers_per_pipeline_layout`).
pub(crate) const MAX_MOVING: usize = 8;

/// A buffer bound by a captured dispatch: the buffer, the offset and the size (`None`: to the
/// buffer's end).
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    buffer: Option<wgpu::Buffer>,
    offset: u64,
    size: Option<NonZeroU64>,
}

impl Bound {
    pub(super) fn of(resource: &wgpu::BindingResource<'_>) -> Bound {
        match resource {
            wgpu::BindingResource::Buffer(b) => Bound {
                buffer: Some(b.buffer.clone()),
                offset: b.offset,
                size: b.size,
            },
            // No kernel binds anything else; such a binding is never rebound.
            _ => Bound {
                buffer: None,
                offset: 0,
                size: None,
            },
        }
    }
}

impl Bound {
    /// The buffer bound (`None` for a binding that is not a buffer).
    pub(super) fn buffer(&self) -> Option<&wgpu::Buffer> {
        self.buffer.as_ref()
    }

    /// The same binding of `to` in place of `from` (same offset and size).
    pub(super) fn replaced(&self, from: &wgpu::Buffer, to: &wgpu::Buffer) -> Option<Bound> {
        (self.buffer.as_ref() == Some(from)).then(|| Bound {
            buffer: Some(to.clone()),
            offset: self.offset,
            size: self.size,
        })
    }

    /// The binding as a resource to make a bind group with.
    pub(super) fn resource(&self) -> Option<wgpu::BindingResource<'_>> {
        Some(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: self.buffer.as_ref()?,
            offset: self.offset,
            size: self.size,
        }))
    }
}

/// The dynamic offset of one moving binding at iteration `t`: `stride * slot(t)` with
/// `slot(t) = (position(t) + add) >> shift`, where the position runs backwards when `reverse`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Moving {
    stride: u32,
    last: u32,
    reverse: bool,
    add: u32,
    shift: u32,
}

impl Moving {
    pub(super) fn offset(&self, t: u32) -> u32 {
        let position = if self.reverse {
            self.last.saturating_sub(t)
        } else {
            t.min(self.last)
        };
        self.stride * ((position + self.add) >> self.shift)
    }
}

/// Every binding of `from` (a buffer of at most `stride` bytes a captured body uses) becomes,
/// at iteration `t` of `seq`, as many bytes of `to` from `stride * k` on, for the slot
/// `k = (p + add) >> shift`, where `p` is `t` (or `seq - 1 - t` when `reverse`). A stride
/// larger than `from` leaves padding between the slots (rows padded to the device's
/// alignment).
#[derive(Clone, Debug)]
pub(crate) struct Slide {
    pub from: wgpu::Buffer,
    pub to: wgpu::Buffer,
    pub stride: u64,
    pub seq: u32,
    pub reverse: bool,
    pub add: u32,
    pub shift: u32,
}

impl Slide {
    /// Slot `t` (or `seq - 1 - t`) at iteration `t`: an element of a sequence.
    pub(crate) fn along(
        from: wgpu::Buffer,
        to: wgpu::Buffer,
        stride: u64,
        seq: u32,
        reverse: bool,
    ) -> Slide {
        Slide {
            from,
            to,
            stride,
            seq,
            reverse,
            add: 0,
            shift: 0,
        }
    }

    /// Whether the device can bind `to` at every iteration's offset: `from` fits in one
    /// stride and in the context's binding size, and every offset is a multiple of the
    /// device's storage offset alignment, fits a dynamic offset (32 bits) and stays inside
    /// `to`.
    pub(crate) fn fits(&self, ctx: &crate::Context) -> bool {
        let align = u64::from(ctx.limits().min_storage_buffer_offset_alignment.max(1));
        let Some(last_slot) = (self.seq.max(1) - 1)
            .checked_add(self.add)
            .map(|p| u64::from(p >> self.shift.min(31)))
        else {
            return false;
        };
        let last = self.stride * last_slot;
        self.from.size() <= self.stride
            && self.stride.is_multiple_of(align)
            && self.stride.is_multiple_of(4)
            && last <= u64::from(u32::MAX)
            && last + self.from.size() <= self.to.size()
            && self.from.size() <= ctx.binding_limit()
    }

    fn moving(&self) -> Moving {
        Moving {
            stride: self.stride as u32,
            last: self.seq.max(1) - 1,
            reverse: self.reverse,
            add: self.add,
            shift: self.shift.min(31),
        }
    }

    fn used_by(&self, buffers: &[wgpu::Buffer]) -> bool {
        buffers.contains(&self.from)
    }
}

/// Whether any of `steps` may use `buffer`: binds, copies or clears it, or is a nested loop
/// whose commands (not in `steps`) may.
pub(crate) fn uses(steps: &[Step], buffer: &wgpu::Buffer) -> bool {
    steps.iter().any(|step| match step {
        Step::Dispatch { bound, .. } => bound.iter().any(|b| b.buffer.as_ref() == Some(buffer)),
        Step::Copy { src, dst, .. } => {
            src.buffers().contains(buffer) || dst.buffers().contains(buffer)
        }
        Step::Clear { buffer: b, .. } => b.buffers().contains(buffer),
        Step::Loop { buffers, .. } => buffers.contains(buffer),
    })
}

/// Every buffer `steps` may bind, copy or clear (a nested loop's included), once each.
pub(crate) fn step_buffers(steps: &[Step]) -> Vec<wgpu::Buffer> {
    let mut out: Vec<wgpu::Buffer> = Vec::new();
    let mut add = |b: &wgpu::Buffer| {
        if !out.contains(b) {
            out.push(b.clone());
        }
    };
    for step in steps {
        match step {
            Step::Dispatch { bound, .. } => bound
                .iter()
                .filter_map(|b| b.buffer.as_ref())
                .for_each(&mut add),
            Step::Copy { src, dst, .. } => {
                src.buffers().iter().chain(dst.buffers()).for_each(&mut add)
            }
            Step::Clear { buffer, .. } => buffer.buffers().iter().for_each(&mut add),
            Step::Loop { buffers, .. } => buffers.iter().for_each(&mut add),
        }
    }
    out
}

/// Whether a dispatch of `steps` binds `buffer` for writing.
pub(crate) fn writes(steps: &[Step], buffer: &wgpu::Buffer) -> bool {
    steps.iter().any(|step| match step {
        Step::Dispatch {
            pipeline, bound, ..
        } => bound.iter().zip(pipeline.bindings()).any(|(b, kind)| {
            *kind == crate::gpu::Binding::StorageReadWrite && b.buffer.as_ref() == Some(buffer)
        }),
        _ => false,
    })
}

impl Recorder {
    /// `steps` with every use of each slide's `from` rebound as a binding that moves with the
    /// iteration (replay them with [`Recorder::replay_at`]). `Ok(Err(k))` when slide `k`
    /// cannot be made: its buffer is copied or cleared, a nested loop (whose commands are not
    /// in `steps`) may use it, or a dispatch would have more moving bindings than the device
    /// allows. Each slide must pass [`Slide::fits`].
    pub(crate) fn slide(
        &mut self,
        op: &str,
        steps: &[Step],
        slides: &[Slide],
    ) -> Result<std::result::Result<Vec<Step>, usize>> {
        if slides.is_empty() {
            return Ok(Ok(steps.to_vec()));
        }
        let most = (self
            .ctx
            .limits()
            .max_dynamic_storage_buffers_per_pipeline_layout as usize)
            .min(MAX_MOVING);
        let mut out = Vec::with_capacity(steps.len());
        for step in steps {
            let (pipeline, grid, bound, moving) = match step {
                Step::Copy { src, dst, .. } => {
                    if let Some(k) = slides
                        .iter()
                        .position(|s| s.used_by(src.buffers()) || s.used_by(dst.buffers()))
                    {
                        return Ok(Err(k));
                    }
                    out.push(step.clone());
                    continue;
                }
                Step::Clear { buffer, .. } => {
                    if let Some(k) = slides.iter().position(|s| s.used_by(buffer.buffers())) {
                        return Ok(Err(k));
                    }
                    out.push(step.clone());
                    continue;
                }
                Step::Loop { buffers, .. } => {
                    // Its commands are not in `steps`: they keep the buffers they bind.
                    if let Some(k) = slides.iter().position(|s| s.used_by(buffers)) {
                        return Ok(Err(k));
                    }
                    out.push(step.clone());
                    continue;
                }
                Step::Dispatch {
                    pipeline,
                    grid,
                    bound,
                    moving,
                    ..
                } => (pipeline, grid, bound, moving),
            };
            let mut rebound: Vec<Bound> = bound.to_vec();
            let mut mask = 0u64;
            let mut offsets = Vec::new();
            let mut last_slide = 0;
            for (i, b) in rebound.iter_mut().enumerate() {
                let Some(k) = slides
                    .iter()
                    .position(|s| b.buffer.as_ref() == Some(&s.from))
                else {
                    continue;
                };
                let s = &slides[k];
                let extent = s.from.size();
                let size = b
                    .size
                    .map_or(extent - b.offset.min(extent), NonZeroU64::get);
                if !moving.is_empty() || b.offset + size > extent || size == 0 {
                    return Ok(Err(k));
                }
                *b = Bound {
                    buffer: Some(s.to.clone()),
                    offset: b.offset,
                    size: NonZeroU64::new(size),
                };
                mask |= 1 << i;
                offsets.push(s.moving());
                last_slide = k;
            }
            if mask == 0 {
                out.push(step.clone());
                continue;
            }
            let resources: Option<Vec<wgpu::BindingResource<'_>>> = rebound
                .iter()
                .map(|b| {
                    Some(wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.buffer.as_ref()?,
                        offset: b.offset,
                        size: b.size,
                    }))
                })
                .collect();
            let Some(resources) = resources.filter(|_| offsets.len() <= most) else {
                return Ok(Err(last_slide));
            };
            let variant = self.ctx.moving_variant(pipeline, mask)?;
            let bind_group = self.bind_group(op, &variant, &resources)?;
            out.push(Step::Dispatch {
                pipeline: variant,
                bind_group,
                grid: *grid,
                bound: rebound.into(),
                moving: offsets.into(),
            });
        }
        Ok(Ok(out))
    }
}

#[cfg(test)]
mod tests {
    use super::Moving;

    #[test]
    fn offsets_follow_the_position() {
        let forward = Moving {
            stride: 256,
            last: 4,
            reverse: false,
            add: 0,
            shift: 0,
        };
        let backward = Moving {
            reverse: true,
            ..forward
        };
        // A state's rows split by parity: iteration t reads slot t / 2 and writes (t + 1) / 2.
        let read = Moving {
            shift: 1,
            ..forward
        };
        let written = Moving { add: 1, ..read };
        let at = |m: Moving| (0..5).map(|t| m.offset(t) / 256).collect::<Vec<_>>();
        assert_eq!(at(forward), [0, 1, 2, 3, 4]);
        assert_eq!(at(backward), [4, 3, 2, 1, 0]);
        assert_eq!(at(read), [0, 0, 1, 1, 2]);
        assert_eq!(at(written), [0, 1, 1, 2, 2]);
    }
}
