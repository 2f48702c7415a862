//! Copies between storages. On GPUs a compute kernel (`shaders/copy.wgsl`) moves the words:
//! the H100 copies 64 MiB at 2515 GB/s that way (one `vec4<u32>` per invocation) against 838
//! GB/s with `copy_buffer_to_buffer`, and a dispatch leaves the compute pass open where a buffer
//! copy ends it (a Scan body's copies then cost no pass). CPU adapters keep buffer copies,
//! which are a `memcpy` there and ten times faster than any kernel.

use std::sync::Arc;

use super::{grid_for, Kernel};
use crate::storage::{Storage, Window};
use crate::{Recorder, Result};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    units: u32,
    src_base: u32,
    dst_base: u32,
    pad: u32,
}

/// Bytes from which a copy that ends inside a quad takes a second dispatch for its last words
/// so that the rest moves as `vec4`. The word kernel runs at about 0.77 of the `vec4` one on the
/// H100 (1942 against 2515 GB/s), so at 16 MiB the split saves about 4 µs, about what a
/// dispatch costs in a replayed Scan (4-6 µs); below, the extra dispatch costs more.
const SPLIT_FROM: u64 = 16 << 20;

/// The window of a buffer a copy binds: from `at` rounded down to `align` (a binding's offset
/// must be a multiple of it) through `at + size`, and `at`'s word index inside it.
fn window(segment: usize, at: u64, size: u64, align: u64) -> (Window, u64) {
    let offset = at - at % align;
    let window = Window {
        segment,
        offset,
        size: at - offset + size,
        start: offset,
    };
    (window, (at - offset) / 4)
}

impl Recorder {
    /// Records copying `size` bytes from `src` at `src_offset` to `dst` at `dst_offset` (all
    /// multiples of 4, within both storages).
    pub(crate) fn copy(
        &mut self,
        src: &Arc<Storage>,
        src_offset: u64,
        dst: &Arc<Storage>,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        let ctx = self.context().clone();
        // One buffer both read and written in a dispatch is a usage conflict; buffer copies
        // between its own bytes are refused likewise, with wgpu's error.
        if size == 0 || ctx.cpu_kernels() || Arc::ptr_eq(src, dst) {
            return self.copy_buffer(src, src_offset, dst, dst_offset, size);
        }
        // Windows start on the binding alignment and, for `vec4` views, on 16 bytes (both
        // powers of two); a chunk leaves room for the part before its first byte.
        let align = u64::from(ctx.limits().min_storage_buffer_offset_alignment).max(16);
        let chunk = (ctx.binding_limit() / align).saturating_sub(1) * align;
        if chunk == 0 {
            return self.copy_buffer(src, src_offset, dst, dst_offset, size);
        }
        let (src_segment, dst_segment) = (src.segments().segment, dst.segments().segment);
        for (i, offset, len) in src.segments().ranges(src_offset, size) {
            let at = dst_offset + (i as u64 * src_segment + offset - src_offset);
            for (j, dst_at, n) in dst.segments().ranges(at, len) {
                let from = offset + (j as u64 * dst_segment + dst_at - at);
                let mut done = 0;
                while done < n {
                    let mut m = (n - done).min(chunk);
                    // A large run starting on a quad at both ends but ending inside one: its
                    // whole quads as `vec4`, the rest (1 to 3 words) in a second dispatch.
                    let (a, b) = (from + done, dst_at + done);
                    if m >= SPLIT_FROM && a % 16 == 0 && b % 16 == 0 && m % 16 != 0 {
                        m -= m % 16;
                    }
                    let (src_window, src_base) = window(i, a, m, align);
                    let (dst_window, dst_base) = window(j, b, m, align);
                    self.copy_window(src, src_window, src_base, dst, dst_window, dst_base, m)?;
                    done += m;
                }
            }
        }
        Ok(())
    }

    /// One dispatch copying `bytes` from word `src_base` of `src_window` to word `dst_base` of
    /// `dst_window`, as `vec4<u32>` when both start on 16 bytes and `bytes` is whole vectors.
    #[allow(clippy::too_many_arguments)]
    fn copy_window(
        &mut self,
        src: &Storage,
        src_window: Window,
        src_base: u64,
        dst: &Storage,
        dst_window: Window,
        dst_base: u64,
        bytes: u64,
    ) -> Result<()> {
        const OP: &str = "copy";
        let ctx = self.context().clone();
        let vec4 =
            src_base.is_multiple_of(4) && dst_base.is_multiple_of(4) && bytes.is_multiple_of(16);
        let per_unit = if vec4 { 4 } else { 1 };
        let units = bytes / 4 / per_unit;
        let params = Params {
            // Below 2^32: a window is at most the binding limit.
            units: units as u32,
            src_base: (src_base / per_unit) as u32,
            dst_base: (dst_base / per_unit) as u32,
            pad: 0,
        };
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, OP, units, wg)?;
        let pipeline = ctx.pipeline(&Kernel::Copy {
            workgroup_size: wg,
            vec4,
        })?;
        ctx.count_quads(vec4);
        self.dispatch(
            OP,
            &pipeline,
            bytemuck::bytes_of(&params),
            &[src.bind(src_window), dst.bind(dst_window)],
            grid,
        )
    }
}
