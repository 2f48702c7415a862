//! A Scan's per-iteration reads and writes as dispatches (`shaders/scan_step.wgsl`,
//! `shaders/scan_counter.wgsl`): the iteration index is a GPU counter (two slots, by parity;
//! the iteration's last copy advances it), so one captured dispatch serves every iteration and
//! an iteration holds no buffer copy, which would end the compute pass.

use super::{grid_for, Kernel};
use crate::gpu::Binding;
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

/// The most copies one [`Kernel::ScanCopies`] dispatch makes (each binds two buffers; the
/// device's storage-buffer limit may allow fewer, see [`grouped_copies_limit`]).
pub const MAX_GROUPED_COPIES: u32 = 8;

/// Copies per grouped dispatch on `ctx`: one storage binding is the counter, each copy takes
/// two (WebGPU's default limit of 8 storage buffers per stage allows 3).
pub fn grouped_copies_limit(ctx: &crate::Context) -> u32 {
    let buffers = ctx.limits().max_storage_buffers_per_shader_stage;
    (buffers.saturating_sub(1) / 2).min(MAX_GROUPED_COPIES)
}

/// Bindings of the grouped kernel: parameters, counter, then each copy's source and
/// destination.
pub fn copies_bindings(copies: u32) -> &'static [Binding] {
    const ALL: [Binding; 2 + 2 * MAX_GROUPED_COPIES as usize] = {
        let mut all = [Binding::StorageRead; 2 + 2 * MAX_GROUPED_COPIES as usize];
        all[0] = Binding::Uniform;
        all[1] = Binding::StorageReadWrite;
        let mut k = 3;
        while k < all.len() {
            all[k] = Binding::StorageReadWrite;
            k += 2;
        }
        all
    };
    &ALL[..2 + 2 * copies.clamp(1, MAX_GROUPED_COPIES) as usize]
}

/// WGSL of the grouped kernel for `copies` copies: invocation `i` moves word `i - start` of
/// the copy whose words it falls in (the copies' words laid end to end), at that copy's
/// position `p` of iteration `t + ahead` (none past the sequence's end); invocation 0 advances
/// the counter when asked. One binding pair per copy, so the copy is chosen by a `switch`.
pub fn copies_source(copies: u32) -> String {
    let copies = copies.clamp(1, MAX_GROUPED_COPIES);
    let mut s = String::from(
        "// Generated by kernels::scan_step::copies_source (see scan_step.wgsl).
override WORKGROUP_SIZE: u32 = 64u;

struct Copy {
    words: u32,
    src_base: u32,
    src_step: u32,
    dst_base: u32,
    dst_step: u32,
    reverse: u32,
    // 1: the copy reads for the next iteration (its element read ahead of the body).
    ahead: u32,
    // The copies' words end to end: this copy's end.
    end: u32,
}
",
    );
    s += &format!(
        "
struct Params {{
    seq: u32,
    slot: u32,
    advance: u32,
    _pad: u32,
    copies: array<Copy, {copies}>,
}}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> counter: array<u32>;
"
    );
    for c in 0..copies {
        s += &format!(
            "@group(0) @binding({}) var<storage, read> src{c}: array<u32>;\n\
             @group(0) @binding({}) var<storage, read_write> dst{c}: array<u32>;\n",
            2 + 2 * c,
            3 + 2 * c
        );
    }
    s += "
@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let i = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    let t = counter[params.slot];
    if i == 0u && params.advance != 0u {
        counter[params.slot ^ 1u] = t + 1u;
    }
    var c = 0u;
    var start = 0u;
";
    for k in 0..copies - 1 {
        s += &format!(
            "    if i >= params.copies[{k}u].end {{\n        c = {}u;\n        start = params.copies[{k}u].end;\n    }}\n",
            k + 1
        );
    }
    s += "    let copy = params.copies[c];
    let at = t + copy.ahead;
    if i >= copy.end || at >= params.seq {
        return;
    }
    let p = select(at, params.seq - 1u - at, copy.reverse != 0u);
    let s = copy.src_base + p * copy.src_step + (i - start);
    let d = copy.dst_base + p * copy.dst_step + (i - start);
    switch c {
";
    for c in 0..copies {
        s += &format!("        case {c}u: {{ dst{c}[d] = src{c}[s]; }}\n");
    }
    s += "        default: {}
    }
}
";
    s
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GroupedCopy {
    words: u32,
    src_base: u32,
    src_step: u32,
    dst_base: u32,
    dst_step: u32,
    reverse: u32,
    ahead: u32,
    end: u32,
}

impl Recorder {
    /// Records `copies` (source, destination, copy, whether it reads for the next iteration)
    /// in one dispatch at the position `counter` holds; with `advance`, the dispatch also
    /// advances the counter from slot `slot`. The buffers must all differ (one is written
    /// while another is read) and be bound whole (see [`IterationCopy::fits`]); at most
    /// [`grouped_copies_limit`] copies.
    pub(crate) fn copies_at_iteration(
        &mut self,
        op: &'static str,
        copies: &[(&Tensor, &Tensor, IterationCopy, bool)],
        counter: &Tensor,
        slot: u32,
        advance: bool,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let n = copies.len() as u32;
        if n == 0 || n > grouped_copies_limit(&ctx) {
            return Err(crate::Error::Graph(format!(
                "{op}: {n} copies in one dispatch (1 to {} here)",
                grouped_copies_limit(&ctx)
            )));
        }
        let seq = copies[0].2.seq;
        let mut bytes = Vec::with_capacity(16 + 32 * copies.len());
        bytes.extend_from_slice(bytemuck::cast_slice(&[seq, slot, u32::from(advance), 0]));
        let mut end = 0u64;
        let mut bindings = vec![counter.storage().bind_whole()];
        for &(src, dst, copy, ahead) in copies {
            end += u64::from(copy.words);
            let end = u32::try_from(end).map_err(|_| crate::Error::LimitExceeded {
                op,
                what: "words of one iteration's grouped copies".into(),
                limit: "2^32 invocations per dispatch",
                needed: end,
                max: u64::from(u32::MAX),
            })?;
            let params = GroupedCopy {
                words: copy.words,
                src_base: copy.src_base,
                src_step: copy.src_step,
                dst_base: copy.dst_base,
                dst_step: copy.dst_step,
                reverse: u32::from(copy.reverse),
                ahead: u32::from(ahead),
                end,
            };
            bytes.extend_from_slice(bytemuck::bytes_of(&params));
            bindings.push(src.storage().bind_whole());
            bindings.push(dst.storage().bind_whole());
        }
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, end.max(1), wg)?;
        let pipeline = ctx.pipeline(&Kernel::ScanCopies {
            workgroup_size: wg,
            copies: n,
        })?;
        self.dispatch(op, &pipeline, &bytes, &bindings, grid)
    }
}
