//! The strided-gather kernel family (`shaders/strided_gather.wgsl`): every output element reads
//! one input element at `base + sum(coord_k * step_k)`. Slicing ops lower to it.

use super::MAX_RANK;
use crate::{Error, Recorder, Result, Tensor};

use super::divide::Divisor;
use super::windows::element_beyond_window;
use super::{grid_for, Kernel};
use crate::storage::{padded_size, Storage};
use crate::storage::{Segments, Window};

/// What one input axis contributes: input indices `start + k * step` for `k < len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisSlice {
    /// The first input index.
    pub start: u64,
    /// Input indices between output positions (negative: backwards).
    pub step: i64,
    /// Output positions.
    pub len: u64,
}

impl AxisSlice {
    /// The whole axis, in order.
    pub fn full(dim: usize) -> AxisSlice {
        AxisSlice {
            start: 0,
            step: 1,
            len: dim as u64,
        }
    }
}

/// Consecutive elements (or words of 1- and 2-byte elements) each invocation moves: the index
/// arithmetic is done once per run, and a run stays contiguous when the inner axis is.
/// The kernels' straight-line paths for interior runs are written for 4; other values would
/// take their loops.
pub const ITEMS: u32 = 4;

/// Every (innermost step, interior) a gather pipeline is compiled for: the steps with paths of
/// their own in the kernel (0: any, read from the parameters), with and without edge paths.
pub(crate) fn specializations() -> impl Iterator<Item = (i32, bool)> {
    [0, 1, -1, 2, -2]
        .into_iter()
        .flat_map(|step| [(step, false), (step, true)])
}

/// One axis of a gather, in elements: `len` positions, `step` input elements apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherDim {
    /// Positions along the axis.
    pub len: u64,
    /// Input elements between positions (negative: backwards).
    pub step: i64,
}

/// An element-level gather: output element `i` (C order over `dims`) reads input element
/// `base + sum(coord_k * step_k)`. Axes of length 1 are dropped and adjacent axes that are
/// contiguous in both input and output are merged, so the kernel loops over as few as possible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherPlan {
    /// Output elements.
    pub count: u64,
    /// The input element of output element 0.
    pub base: u64,
    /// Outermost first.
    pub dims: Vec<GatherDim>,
}

impl GatherPlan {
    /// A gather over `dims` (outermost first) from `base`, with unit axes dropped and
    /// contiguous axes merged.
    pub fn from_dims(base: u64, dims: &[GatherDim]) -> GatherPlan {
        let count = dims.iter().map(|d| d.len).product();
        if count == 0 {
            return GatherPlan {
                count: 0,
                base: 0,
                dims: Vec::new(),
            };
        }
        // Merge from the inside out: an outer axis whose step is the inner axis' whole extent
        // continues it.
        let mut merged: Vec<GatherDim> = Vec::with_capacity(dims.len());
        for &dim in dims.iter().rev().filter(|d| d.len != 1) {
            match merged.last_mut() {
                Some(inner) if dim.step == inner.step * inner.len as i64 => inner.len *= dim.len,
                _ => merged.push(dim),
            }
        }
        merged.reverse();
        GatherPlan {
            count,
            base,
            dims: merged,
        }
    }

    /// The gather of a C-order input of `input_shape` taking `axes` (one per input axis).
    pub fn from_axes(input_shape: &[usize], axes: &[AxisSlice]) -> GatherPlan {
        debug_assert_eq!(input_shape.len(), axes.len());
        // Element strides of the (C-order) input.
        let mut stride = 1i64;
        let mut strides = vec![0i64; input_shape.len()];
        for (k, &d) in input_shape.iter().enumerate().rev() {
            strides[k] = stride;
            stride = stride.wrapping_mul(d as i64);
        }
        let base = axes
            .iter()
            .zip(&strides)
            .map(|(a, &s)| a.start * s as u64)
            .sum();
        let dims: Vec<GatherDim> = axes
            .iter()
            .zip(&strides)
            .map(|(a, &s)| GatherDim {
                len: a.len,
                // An axis of one element never steps (and its step may be huge, e.g. i64::MAX).
                step: if a.len > 1 { a.step * s } else { 0 },
            })
            .collect();
        GatherPlan::from_dims(base, &dims)
    }

    /// The input element read by output element `i` (the kernel's arithmetic, for tests).
    pub fn source_index(&self, i: u64) -> u64 {
        let mut rest = i;
        let mut index = self.base as i64;
        for d in self.dims.iter().rev() {
            index += (rest % d.len) as i64 * d.step;
            rest /= d.len;
        }
        index as u64
    }

    /// True when the gather reads all `numel` input elements in order: the output is the
    /// input itself, so no work is needed.
    pub fn is_identity(&self, numel: u64) -> bool {
        self.base == 0 && self.count == numel && self.is_contiguous()
    }

    /// The same gather on 32-bit words when every access is whole words: the innermost axis
    /// is contiguous with a whole number of words, and the base and the other steps are whole
    /// words. 1- and 2-byte slices of channel-last data (an RGBA picture cropped or mirrored)
    /// then move as words instead of being assembled element by element. `None` otherwise,
    /// and for 4- and 8-byte elements.
    pub fn as_words(&self, elem: u64) -> Option<GatherPlan> {
        if elem >= 4 {
            return None;
        }
        let per = 4 / elem;
        let (inner, outer) = self.dims.split_last()?;
        let whole = |elems: u64| (elems * elem).is_multiple_of(4);
        if inner.step != 1
            || !whole(inner.len)
            || !whole(self.base)
            || outer.iter().any(|d| !whole(d.step.unsigned_abs()))
        {
            return None;
        }
        let dims = outer
            .iter()
            .map(|d| GatherDim {
                len: d.len,
                step: d.step / per as i64,
            })
            .chain([GatherDim {
                len: inner.len / per,
                step: 1,
            }])
            .collect();
        Some(GatherPlan {
            count: self.count / per,
            base: self.base / per,
            dims,
        })
    }

    /// True when the gather reads `count` consecutive input elements in order.
    pub fn is_contiguous(&self) -> bool {
        match self.dims.as_slice() {
            [] => true,
            [d] => d.step == 1,
            _ => false,
        }
    }
}

/// Where the pieces of a chunked gather must fit: windows of at most `limit` bytes starting
/// at multiples of `align`, inside one buffer of the source and of the output.
#[derive(Clone, Copy, Debug)]
pub struct Fit {
    /// The most bytes a window binds.
    pub limit: u64,
    /// Windows start at multiples of this many bytes.
    pub align: u64,
    /// The source's buffers.
    pub src: Segments,
    /// The output's buffers.
    pub out: Segments,
}

/// One dispatch of a chunked gather: its plan (the base counted from the source window's
/// start), the two windows, and where its output starts in the output window: `dst_base`
/// elements in, or for 1- and 2-byte elements `dst_base` words plus `skip` element slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherChunk {
    /// The elements this dispatch moves, counted from the source window.
    pub plan: GatherPlan,
    /// The source's bytes it binds.
    pub src: Window,
    /// The output's bytes it binds.
    pub out: Window,
    /// Where its output starts in the output window (elements, or words of 1- and 2-byte
    /// elements).
    pub dst_base: u64,
    /// Element slots of the first word it leaves (1- and 2-byte elements).
    pub skip: u64,
}

/// `plan` (elements of `w` bytes, its output starting at element `out_offset`) cut into
/// chunks that fit `fit`: the outermost axis is cut into runs of indices whose source and
/// output spans each fit in one window of one buffer; an index that does not fit alone is
/// cut along the next axis in turn. `None` when one element cannot be placed.
pub fn gather_chunks(
    plan: &GatherPlan,
    w: u64,
    out_offset: u64,
    fit: &Fit,
) -> Option<Vec<GatherChunk>> {
    let mut chunks = Vec::new();
    chunks_into(plan, w, out_offset, fit, &mut chunks).then_some(chunks)
}

fn chunks_into(
    plan: &GatherPlan,
    w: u64,
    out_offset: u64,
    fit: &Fit,
    chunks: &mut Vec<GatherChunk>,
) -> bool {
    let (outer, inner) = match plan.dims.split_first() {
        Some((o, rest)) => (*o, rest),
        None => (GatherDim { len: 1, step: 0 }, &[][..]),
    };
    let row_elems = plan.count / outer.len;
    let inner_lo: i64 = inner
        .iter()
        .map(|d| ((d.len - 1) as i64 * d.step).min(0))
        .sum();
    let inner_hi: i64 = inner
        .iter()
        .map(|d| ((d.len - 1) as i64 * d.step).max(0))
        .sum();
    let inner_span = (inner_hi - inner_lo + 1) as u64;
    // Each window may start up to `align` bytes early, plus a word for sub-word edges.
    let room = fit.limit.saturating_sub(fit.align + 4) / w;
    let (src_seg, out_seg) = (fit.src.segment / w, fit.out.segment / w);
    let segment_end = |at: u64, seg: u64| (at / seg).saturating_add(1).saturating_mul(seg);
    let mut i0 = 0;
    while i0 < outer.len {
        let first = plan.base as i64 + i0 as i64 * outer.step;
        // Rows from i0 on: the source span grows away from the first row's extent, in the
        // direction of the step, and must stay in the first row's buffer.
        let (lo1, hi1) = ((first + inner_lo) as u64, (first + inner_hi) as u64);
        let by_source = if inner_span > room || lo1 / src_seg != hi1 / src_seg {
            0
        } else {
            let avail = if outer.step >= 0 {
                room.min(segment_end(lo1, src_seg) - lo1)
            } else {
                room.min(hi1 % src_seg + 1)
            };
            match outer.step.unsigned_abs() {
                0 => u64::MAX,
                s => (avail - inner_span) / s + 1,
            }
        };
        let out_first = out_offset + i0 * row_elems;
        let by_output = room.min(segment_end(out_first, out_seg) - out_first) / row_elems;
        let n = by_source.min(by_output).min(outer.len - i0);
        if n == 0 {
            if inner.is_empty() {
                return false;
            }
            let sub = GatherPlan {
                count: row_elems,
                base: first as u64,
                dims: inner.to_vec(),
            };
            if !chunks_into(&sub, w, out_first, fit, chunks) {
                return false;
            }
            i0 += 1;
            continue;
        }
        let last = (n - 1) as i64 * outer.step;
        let lo = (first + last.min(0) + inner_lo) as u64;
        let hi = (first + last.max(0) + inner_hi) as u64;
        let src = fit.src.window(lo * w, (hi + 1) * w, fit.align);
        let src = fit.src.ending_on_a_quad(src, fit.limit);
        let mut dims = plan.dims.clone();
        if let Some(d) = dims.first_mut() {
            d.len = n;
        }
        let out_byte = out_first * w;
        let out = fit
            .out
            .window(out_byte, out_byte + n * row_elems * w, fit.align);
        let out = fit.out.ending_on_a_quad(out, fit.limit);
        let into = out_byte - out.start;
        let (dst_base, skip) = if w < 4 {
            (into / 4, (into % 4) / w)
        } else {
            (into / w, 0)
        };
        chunks.push(GatherChunk {
            plan: GatherPlan {
                count: n * row_elems,
                base: first as u64 - src.start / w,
                dims,
            },
            src,
            out,
            dst_base,
            skip,
        });
        i0 += n;
    }
    true
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    units: u32,
    rank: u32,
    base: u32,
    shape: [u32; MAX_RANK],
    step: [u32; MAX_RANK],
    dst_base: u32,
    dst_skip: u32,
    pad: [u32; 2],
    dst_step: [u32; MAX_RANK],
    /// Each axis length as the kernel's `divide` takes it ([`Divisor`]): a power of two
    /// splits an index by a shift and a mask, any other by a multiply-high.
    shift: [u32; MAX_RANK],
    magic: [u32; MAX_RANK],
}

impl Recorder {
    /// Records `plan` reading `src` into `out` (same dtype, `plan.count` elements).
    pub(crate) fn gather_into(
        &mut self,
        op: &'static str,
        src: &Tensor,
        plan: &GatherPlan,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        debug_assert!(out.numel() as u64 == plan.count);
        if plan.count == 0 {
            return Ok(());
        }
        if plan.dims.len() > MAX_RANK {
            return Err(Error::invalid(
                op,
                "data",
                format!(
                    "the slice needs {} gather axes; at most {MAX_RANK} are supported",
                    plan.dims.len()
                ),
            ));
        }
        let w = src.dtype().size() as u64;
        // A contiguous run at a word-aligned offset is one buffer copy: no kernel, any size.
        if plan.is_contiguous() && (plan.base * w).is_multiple_of(4) {
            let bytes = padded_size(plan.count * w);
            return self.copy(src.storage(), plan.base * w, out.storage(), 0, bytes);
        }
        let words = plan.as_words(w);
        let (plan, w) = match &words {
            Some(p) => (p, 4),
            None => (plan, w),
        };
        let limit = ctx.binding_limit();
        let (src_store, out_store) = (src.storage(), out.storage());
        if let (Some(s), Some(o)) = (src_store.single(), out_store.single()) {
            if s.size() <= limit && o.size() <= limit {
                return self.gather_window(
                    op,
                    w as u32,
                    src_store,
                    src_store.whole_window(),
                    plan,
                    out_store,
                    out_store.whole_window(),
                    None,
                    0,
                );
            }
        }
        self.gather_chunked(op, w, src, plan, out, 0)
    }

    /// A gather over tensors larger than the binding limit or held in several buffers, in
    /// chunks that each bind one window of each (see [`gather_chunks`]). `out_offset` is where
    /// (in elements) this plan's output starts; elements are `w` bytes (4 for a word view of
    /// 1- and 2-byte data).
    pub(crate) fn gather_chunked(
        &mut self,
        op: &'static str,
        w: u64,
        src: &Tensor,
        plan: &GatherPlan,
        out: &Tensor,
        out_offset: u64,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, w)?;
        let (src_store, out_store) = (src.storage(), out.storage());
        let fit = Fit {
            limit,
            align,
            src: src_store.segments(),
            out: out_store.segments(),
        };
        let chunks = gather_chunks(plan, w, out_offset, &fit)
            .ok_or_else(|| element_beyond_window(op, w, align, limit))?;
        for c in chunks {
            self.gather_window(
                op,
                w as u32,
                src_store,
                c.src,
                &c.plan,
                out_store,
                c.out,
                Some((c.dst_base, &[])),
                c.skip,
            )?;
        }
        Ok(())
    }

    /// One dispatch of the kernel over a window of the source and one of the output.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gather_window(
        &mut self,
        op: &'static str,
        elem: u32,
        src: &Storage,
        src_window: Window,
        plan: &GatherPlan,
        out: &Storage,
        out_window: Window,
        dst: Option<(u64, &[u64])>,
        skip: u64,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let count = u32::try_from(plan.count).map_err(|_| Error::LimitExceeded {
            op,
            what: "the output's element count".into(),
            limit: "2^32 elements per kernel",
            needed: plan.count,
            max: u64::from(u32::MAX),
        })?;
        let units = if elem < 4 {
            (skip + plan.count).div_ceil(u64::from(4 / elem))
        } else {
            plan.count
        };
        // `dst`: an output offset, plus steps when the output is strided (Concat).
        let strided = dst.is_some_and(|(_, steps)| !steps.is_empty());
        let mut params = Params {
            count,
            units: units as u32,
            rank: plan.dims.len() as u32,
            base: plan.base as u32,
            shape: [1; MAX_RANK],
            step: [0; MAX_RANK],
            dst_base: dst.map_or(0, |(b, _)| b as u32),
            dst_skip: skip as u32,
            pad: [0; 2],
            dst_step: [0; MAX_RANK],
            shift: [0; MAX_RANK],
            magic: [0; MAX_RANK],
        };
        if let Some((_, steps)) = dst {
            for (k, s) in steps.iter().rev().enumerate() {
                params.dst_step[k] = *s as u32;
            }
        }
        for (k, d) in plan.dims.iter().rev().enumerate() {
            params.shape[k] = d.len as u32;
            params.step[k] = d.step as u32; // two's complement; the kernel's sum wraps
            let by = Divisor::new(d.len as u32);
            (params.shift[k], params.magic[k]) = (by.shift, by.magic);
        }
        let wg = ctx.workgroup_size();
        // 8-byte elements move as pairs of words when both windows start and end on 8-byte
        // boundaries (element indices in the kernel count from the window's start).
        let aligned = |to: u64| {
            [src_window, out_window]
                .iter()
                .all(|w| w.offset % to == 0 && w.size % to == 0 && w.size >= to)
        };
        // On GPUs, words are stored as 16-byte quads when both windows are whole quads
        // (16-byte accesses are what a GPU's copy needs to reach its bandwidth).
        let quads = !strided && !ctx.cpu_kernels() && aligned(16);
        let pairs = elem == 8 && !quads && aligned(8);
        // `main_quads` moves blocks of one 16-byte quad (two 8-byte elements), several per
        // invocation (`ContextOptions::gather_unroll`).
        let per_block = if quads && elem == 8 { 2 } else { ITEMS };
        let unroll = if quads { ctx.gather_unroll() } else { 1 };
        let invocations = units
            .div_ceil(u64::from(per_block))
            .div_ceil(u64::from(unroll));
        let grid = grid_for(&ctx, op, invocations, wg)?;
        // What the kernel is compiled for: the innermost step where the kernel has a path of
        // its own for it, and whether every unit block is interior: innermost rows of whole
        // blocks, no skipped slots and, for `main_quads` with 4- and 8-byte elements, an
        // output starting on a quad.
        let (inner_step, interior) = match plan.dims.last() {
            Some(d) => {
                let block = match (quads, elem) {
                    (true, 4 | 8) => 16 / u64::from(elem),
                    (false, 4 | 8) => u64::from(ITEMS),
                    _ => u64::from(ITEMS) * 4 / u64::from(elem),
                };
                let dst_base = dst.map_or(0, |(b, _)| b);
                let interior = d.len.is_multiple_of(block)
                    && skip == 0
                    && (!quads || elem < 4 || dst_base.is_multiple_of(block));
                let step = specializations()
                    .map(|(s, _)| s)
                    .find(|&s| s != 0 && i64::from(s) == d.step)
                    .unwrap_or(0);
                (step, interior)
            }
            None => (0, false),
        };
        let pipeline = ctx.pipeline(&Kernel::Gather {
            elem_bytes: elem,
            workgroup_size: wg,
            dst_strided: strided,
            pairs,
            quads,
            unroll,
            inner_step,
            interior,
        })?;
        ctx.count_quads(quads);
        self.dispatch(
            op,
            &pipeline,
            bytemuck::bytes_of(&params),
            &[src.bind(src_window), out.bind(out_window)],
            grid,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(start: u64, step: i64, len: u64) -> AxisSlice {
        AxisSlice { start, step, len }
    }

    #[test]
    fn merges_contiguous_axes_and_drops_unit_axes() {
        let full = [axis(0, 1, 2), axis(0, 1, 3), axis(0, 1, 4)];
        let p = GatherPlan::from_axes(&[2, 3, 4], &full);
        assert_eq!(p.dims, [GatherDim { len: 24, step: 1 }]);
        assert!(p.is_contiguous());

        // x[1:2, :, ::-1]: the unit axis goes, the reversed inner axis cannot merge.
        let p = GatherPlan::from_axes(&[2, 3, 4], &[axis(1, 1, 1), axis(0, 1, 3), axis(3, -1, 4)]);
        assert_eq!(p.base, 12 + 3);
        assert_eq!(
            p.dims,
            [
                GatherDim { len: 3, step: 4 },
                GatherDim { len: 4, step: -1 }
            ]
        );
        assert_eq!(
            (0..12).map(|i| p.source_index(i)).collect::<Vec<_>>(),
            [15, 14, 13, 12, 19, 18, 17, 16, 23, 22, 21, 20]
        );

        // Reversed outer axes of full rows merge too: x[::-1, ::-1] on [3, 1] is one axis.
        let p = GatherPlan::from_axes(&[3, 1], &[axis(2, -1, 3), axis(0, -1, 1)]);
        assert_eq!(p.dims, [GatherDim { len: 3, step: -1 }]);
        assert_eq!(p.base, 2);
    }

    #[test]
    fn word_views_read_the_same_bytes() {
        // [6, 5, 4] u8 (an RGBA-like row of 5 pixels per row), rows 1..5, pixels reversed.
        let plan =
            GatherPlan::from_axes(&[6, 5, 4], &[axis(1, 1, 4), axis(4, -1, 5), axis(0, 1, 4)]);
        let words = plan.as_words(1).unwrap();
        assert_eq!(words.count * 4, plan.count);
        for i in 0..plan.count {
            assert_eq!(
                words.source_index(i / 4) * 4 + i % 4,
                plan.source_index(i),
                "{i}"
            );
        }
        // 2-byte elements in pairs: [3, 8] i16, every column pair reversed in order.
        let plan = GatherPlan::from_dims(
            2,
            &[GatherDim { len: 3, step: 8 }, GatherDim { len: 2, step: 1 }],
        );
        let words = plan.as_words(2).unwrap();
        for i in 0..plan.count {
            assert_eq!(
                words.source_index(i / 2) * 2 + i % 2,
                plan.source_index(i),
                "{i}"
            );
        }
        // Not whole words: 3-byte pixels, an odd base, a strided inner axis, 4-byte elements.
        let rgb =
            GatherPlan::from_axes(&[6, 5, 3], &[axis(1, 1, 4), axis(4, -1, 5), axis(0, 1, 3)]);
        assert!(rgb.as_words(1).is_none());
        let odd = GatherPlan::from_dims(
            1,
            &[GatherDim { len: 3, step: 8 }, GatherDim { len: 4, step: 1 }],
        );
        assert!(odd.as_words(1).is_none());
        let strided = GatherPlan::from_dims(0, &[GatherDim { len: 8, step: 2 }]);
        assert!(strided.as_words(1).is_none());
        assert!(plan.as_words(4).is_none());
    }

    #[test]
    fn chunks_cover_the_gather_in_order_inside_one_buffer_each() {
        // Reversed and strided axes over 1-, 2-, 4- and 8-byte elements, in buffers of 256
        // or 512 bytes bound in windows of 96 to 1000 bytes.
        let plans = [
            GatherPlan::from_dims(
                2 * 40 + 39,
                &[
                    GatherDim { len: 3, step: -40 },
                    GatherDim { len: 40, step: -1 },
                ],
            ),
            GatherPlan::from_dims(
                5,
                &[
                    GatherDim { len: 4, step: 60 },
                    GatherDim { len: 5, step: 11 },
                    GatherDim { len: 3, step: 2 },
                ],
            ),
            GatherPlan::from_dims(7, &[GatherDim { len: 200, step: 1 }]),
        ];
        for plan in &plans {
            for w in [1, 2, 4, 8] {
                for (segment, limit) in [(256, 96), (512, 200), (256, 1000)] {
                    let fit = Fit {
                        limit,
                        align: 16,
                        src: Segments {
                            segment,
                            size: 300 * w,
                        },
                        out: Segments {
                            segment,
                            size: padded_size((3 + plan.count) * w),
                        },
                    };
                    let chunks = gather_chunks(plan, w, 3, &fit).unwrap();
                    let mut next = 3;
                    for c in &chunks {
                        for win in [c.src, c.out] {
                            assert!(win.size <= limit && win.offset % 16 == 0, "{c:?}");
                            assert!(win.offset + win.size <= segment, "{c:?}");
                        }
                        let out_first = if w < 4 {
                            (c.out.start + c.dst_base * 4) / w + c.skip
                        } else {
                            c.out.start / w + c.dst_base
                        };
                        assert_eq!(out_first, next, "{c:?}");
                        for i in 0..c.plan.count {
                            let at = c.src.start / w + c.plan.source_index(i);
                            assert!(
                                at * w >= c.src.start && (at + 1) * w <= c.src.start + c.src.size
                            );
                            assert_eq!(at, plan.source_index(next - 3 + i), "{c:?}");
                        }
                        next += c.plan.count;
                    }
                    assert_eq!(next, 3 + plan.count);
                }
            }
        }
    }

    #[test]
    fn empty_output_has_no_dims() {
        let p = GatherPlan::from_axes(&[2, 0], &[axis(0, 1, 2), axis(0, 1, 0)]);
        assert_eq!((p.count, p.dims.len()), (0, 0));
    }
}
