//! A Scan's per-iteration reads and writes as dispatches (`shaders/scan_step.wgsl`,
//! `shaders/scan_counter.wgsl`): the iteration index is a GPU counter (two slots, by parity;
//! the iteration's last copy advances it), so one captured dispatch serves every iteration and
//! an iteration holds no buffer copy, which would end the compute pass.

use super::{grid_for, Kernel};
use crate::{Recorder, Result, Tensor};

/// Words `[0, words)` of an element moved between `src` at `src_base + p * src_step` and
/// `dst` at `dst_base + p * dst_step` (in words), where `p` is the iteration's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IterationCopy {
    pub words: u32,
    pub src_base: u32,
    pub src_step: u32,
    pub dst_base: u32,
    pub dst_step: u32,
    pub seq: u32,
    pub reverse: bool,
    /// The counter slot the iteration reads (its parity).
    pub slot: u32,
    /// This copy also advances the counter (the iteration's last copy).
    pub advance: bool,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    words: u32,
    src_base: u32,
    src_step: u32,
    dst_base: u32,
    dst_step: u32,
    seq: u32,
    reverse: u32,
    slot: u32,
    advance: u32,
    pad: [u32; 3],
}

impl IterationCopy {
    /// True when `src`, `dst` and `counter` can each be bound whole and every word index
    /// stays below 2^32 (else the Scan copies with buffer copies).
    pub fn fits(&self, rec: &Recorder, src: &Tensor, dst: &Tensor, counter: &Tensor) -> bool {
        let limit = rec.context().binding_limit();
        let whole = |t: &Tensor| t.buffers().len() == 1 && t.buffers()[0].size() <= limit;
        let last = |base: u32, step: u32| {
            u64::from(base)
                + u64::from(step) * u64::from(self.seq.max(1) - 1)
                + u64::from(self.words)
        };
        whole(src)
            && whole(dst)
            && whole(counter)
            && last(self.src_base, self.src_step) <= u64::from(u32::MAX)
            && last(self.dst_base, self.dst_step) <= u64::from(u32::MAX)
    }
}

impl Recorder {
    /// Records `copy` at the position `counter` holds (see [`IterationCopy::fits`]).
    pub(crate) fn copy_at_iteration(
        &mut self,
        op: &'static str,
        src: &Tensor,
        dst: &Tensor,
        counter: &Tensor,
        copy: IterationCopy,
    ) -> Result<()> {
        if copy.words == 0 && !copy.advance {
            return Ok(());
        }
        let ctx = self.context().clone();
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, u64::from(copy.words.max(1)), wg)?;
        let pipeline = ctx.pipeline(&Kernel::ScanStep { workgroup_size: wg })?;
        let params = Params {
            words: copy.words,
            src_base: copy.src_base,
            src_step: copy.src_step,
            dst_base: copy.dst_base,
            dst_step: copy.dst_step,
            seq: copy.seq,
            reverse: u32::from(copy.reverse),
            slot: copy.slot,
            advance: u32::from(copy.advance),
            pad: [0; 3],
        };
        self.dispatch(
            op,
            &pipeline,
            bytemuck::bytes_of(&params),
            &[
                src.storage().bind_whole(),
                dst.storage().bind_whole(),
                counter.storage().bind_whole(),
            ],
            grid,
        )
    }

    /// Records the counter's advance alone (an iteration with no copy to carry it): slot
    /// `slot ^ 1` gets slot `slot` plus one.
    pub(crate) fn next_iteration(
        &mut self,
        op: &'static str,
        counter: &Tensor,
        slot: u32,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let pipeline = ctx.pipeline(&Kernel::ScanCounter { slot })?;
        self.dispatch_with(op, &pipeline, &[counter.storage().bind_whole()], [1, 1, 1])
    }
}
