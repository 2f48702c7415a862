//! The index-gather kernels (`shaders/gather_index.wgsl`, `shaders/gather_rows.wgsl`): ONNX
//! Gather and GatherElements, the elements of a data tensor picked along one axis by an index
//! tensor on the GPU, moved as bits in words. Tensors larger than one binding (or held in
//! several buffers) run in passes over windows of the output and of the data
//! ([`gather_passes`], plain data tested without a GPU).

use super::divide::Divisor;
use super::windows::unit_runs;
use super::{grid_for, Kernel};
use crate::storage::{Segments, Window};
use crate::{DType, Recorder, Result, Tensor};

/// A gather in the units its kernel moves (elements, or the 16-byte quads of whole rows):
/// data `[outer, axis_dim, inner]`, output `[outer, middle, inner]`, and indices `[middle]`
/// (Gather) or of the output's shape (GatherElements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherLayout {
    /// Slices before the axis.
    pub outer: u64,
    /// The data's length along the axis.
    pub axis_dim: u64,
    /// Units after the axis.
    pub inner: u64,
    /// The output's length along the axis: the indices' count, or GatherElements' extent.
    pub middle: u64,
    /// GatherElements: one index per output unit.
    pub elements: bool,
    /// Bytes per unit of the data and of the output.
    pub unit: u64,
    /// Bytes per index (4 or 8).
    pub index_bytes: u64,
}

impl GatherLayout {
    fn out_units(&self) -> u64 {
        self.outer * self.middle * self.inner
    }

    /// The positions among the indices that output units `[u0, u1)` read, as ranges: one,
    /// or two when the units cross from one outer slice into the next.
    fn index_ranges(&self, u0: u64, u1: u64) -> Vec<(u64, u64)> {
        if self.elements {
            return vec![(u0, u1)];
        }
        let (t0, t1) = (u0 / self.inner, (u1 - 1) / self.inner);
        let (j0, j1) = (t0 % self.middle, t1 % self.middle);
        match t1 / self.middle - t0 / self.middle {
            0 => vec![(j0, j1 + 1)],
            1 if j1 < j0 => vec![(0, j1 + 1), (j0, self.middle)],
            _ => vec![(0, self.middle)],
        }
    }

    /// The data units that output units `[u0, u1)` may read: those of their outer slices.
    fn data_range(&self, u0: u64, u1: u64) -> (u64, u64) {
        let slice = self.middle * self.inner;
        let (o0, o1) = (u0 / slice, (u1 - 1) / slice + 1);
        (
            o0 * self.axis_dim * self.inner,
            o1 * self.axis_dim * self.inner,
        )
    }
}

/// Where a gather's windows must fit: at most `limit` bytes starting at multiples of `align`
/// inside one buffer of each tensor.
#[derive(Clone, Copy, Debug)]
pub struct GatherFit {
    /// The most bytes a window binds (at least `align`).
    pub limit: u64,
    /// Windows start at multiples of this many bytes (a multiple of the unit and index sizes).
    pub align: u64,
    /// The data's buffers.
    pub data: Segments,
    /// The indices' buffers.
    pub indices: Segments,
    /// The output's buffers.
    pub out: Segments,
}

/// One dispatch of a gather in passes: output units `[out_first, out_end)` through the output
/// window `out`, writing those whose index is at a position in `[index_lo, index_hi)` (bound
/// by `indices`) and whose source lies in data units `[data_lo, data_hi)` (bound by `data`)
/// and, in the first pass over those indices, those of indices out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherPass {
    /// The first output unit written, at the start of `out`.
    pub out_first: u64,
    /// The output unit after the last.
    pub out_end: u64,
    /// The output's bytes bound.
    pub out: Window,
    /// The first position among the indices this pass reads.
    pub index_lo: u64,
    /// The position after the last it reads.
    pub index_hi: u64,
    /// The indices' bytes bound.
    pub indices: Window,
    /// The first data unit this pass moves.
    pub data_lo: u64,
    /// The data unit after the last it moves.
    pub data_hi: u64,
    /// The data's bytes bound.
    pub data: Window,
    /// The first pass over these output units and indices: it writes the units of indices
    /// out of range.
    pub first: bool,
}

/// The passes of gather `l` whose windows fit `fit`: the output is cut into windows as long
/// as a binding holds, starting at multiples of `fit.align` bytes (whole words: no two passes
/// write one word at once); the indices each window reads are cut into windows, and the data
/// its outer slices hold, a pass per window of indices and of data. `None` when `fit.limit`
/// is below `fit.align` (no window can start aligned and hold a unit).
pub fn gather_passes(l: &GatherLayout, fit: &GatherFit) -> Option<Vec<GatherPass>> {
    let total = l.out_units();
    let unit = l.unit;
    let step = (fit.align / unit).max(1);
    let out_segment = fit.out.segment / unit;
    // Whole words from an aligned start, so that no window's end needs padding past it.
    let room = fit.limit / 4 * 4;
    let mut passes = Vec::new();
    let mut u0 = 0;
    while u0 < total {
        let cap = total.min((u0 / out_segment + 1) * out_segment);
        let u1 = cap.min(u0 + room / unit / step * step);
        if u1 <= u0 {
            return None;
        }
        let out = fit.out.window(u0 * unit, u1 * unit, fit.align);
        debug_assert_eq!(out.start, u0 * unit);
        let (d0, d1) = l.data_range(u0, u1);
        let data = unit_runs(d0, d1, unit, &fit.data, fit.limit, fit.align)?;
        for (i0, i1) in l.index_ranges(u0, u1) {
            for (index_lo, index_hi, indices) in
                unit_runs(i0, i1, l.index_bytes, &fit.indices, fit.limit, fit.align)?
            {
                for (k, &(data_lo, data_hi, data)) in data.iter().enumerate() {
                    passes.push(GatherPass {
                        out_first: u0,
                        out_end: u1,
                        out,
                        index_lo,
                        index_hi,
                        indices,
                        data_lo,
                        data_hi,
                        data,
                        first: k == 0,
                    });
                }
            }
        }
        u0 = u1;
    }
    Some(passes)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherRowsParams {
    quads: u32,
    row_quads: u32,
    indices: u32,
    axis_dim: u32,
    site: u32,
    first_pass: u32,
    row_quads_div: Divisor,
    indices_div: Divisor,
    out_first: u32,
    index_first: u32,
    src_first: u32,
    src_lo: u32,
    src_hi: u32,
    index_lo: u32,
    index_hi: u32,
    pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherIndexParams {
    count: u32,
    units: u32,
    axis_dim: u32,
    inner: u32,
    indices: u32,
    out_first: u32,
    site: u32,
    first_pass: u32,
    inner_div: Divisor,
    indices_div: Divisor,
    index_first: u32,
    src_first: u32,
    src_lo: u32,
    src_hi: u32,
    merge: u32,
    index_lo: u32,
    index_hi: u32,
    pad: u32,
}

impl Recorder {
    /// Records `out = data[outer][indices][inner]` for `data` seen as `[outer, axis_dim,
    /// inner]` and `indices` (i32 or i64, any shape, flattened): `out` holds `outer x
    /// indices x inner` elements. With `elements: Some(k)` (GatherElements), `indices` has
    /// the output's shape `[outer, k, inner]` and `out[o][j][i] = data[o][indices[o][j][i]][i]`.
    /// Tensors beyond one binding run in passes over windows ([`gather_passes`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gather_index_into(
        &mut self,
        op: &'static str,
        data: &Tensor,
        indices: &Tensor,
        axis_dim: usize,
        inner: usize,
        elements: Option<usize>,
        rule: crate::recorder::IndexRule,
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        if count > u64::from(u32::MAX) || data.numel() as u64 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the data or output", count));
        }
        let elem = data.dtype().size() as u64;
        let row_bytes = inner.max(1) as u64 * elem;
        let index64 = indices.dtype() == DType::I64;
        // Rows of whole quads move a quad per invocation (an embedding lookup's layout).
        let rows = elements.is_none() && row_bytes.is_multiple_of(16);
        let (unit, inner_units) = match rows {
            true => (16, row_bytes / 16),
            false => (elem, inner.max(1) as u64),
        };
        let middle = elements.unwrap_or(indices.numel()).max(1) as u64;
        let layout = GatherLayout {
            outer: out.byte_len() / unit / (middle * inner_units),
            axis_dim: axis_dim as u64,
            inner: inner_units,
            middle,
            elements: elements.is_some(),
            unit,
            index_bytes: if index64 { 8 } else { 4 },
        };
        let limit = ctx.binding_limit();
        let whole = |t: &Tensor| t.storage().fits_one_binding(limit);
        let passes = if whole(data) && whole(indices) && whole(out) {
            vec![GatherPass {
                out_first: 0,
                out_end: layout.out_units(),
                out: out.storage().whole_window(),
                index_lo: 0,
                index_hi: u64::from(u32::MAX),
                indices: indices.storage().whole_window(),
                data_lo: 0,
                data_hi: u64::from(u32::MAX),
                data: data.storage().whole_window(),
                first: true,
            }]
        } else {
            let align = ctx.window_alignment(op, unit.max(layout.index_bytes))?;
            let fit = GatherFit {
                limit,
                align,
                data: data.storage().segments(),
                indices: indices.storage().segments(),
                out: out.storage().segments(),
            };
            gather_passes(&layout, &fit)
                .ok_or_else(|| super::windows::element_beyond_window(op, unit, align, limit))?
        };
        let wg = ctx.workgroup_size();
        let kernel = match rows {
            true => Kernel::GatherRows {
                index64,
                workgroup_size: wg,
            },
            false => Kernel::GatherIndex {
                elem_bytes: elem as u32,
                index64,
                elements: elements.is_some(),
                workgroup_size: wg,
            },
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let (site, faults) = self.index_site(op, rule)?;
        let lanes = (4 / elem).max(1);
        for (k, pass) in passes.iter().enumerate() {
            // Words of 1- and 2-byte outputs that several passes write in part (the passes
            // over one output window are adjacent).
            let shared = |other: Option<&GatherPass>| other.is_some_and(|o| o.out == pass.out);
            let merge = elem < 4
                && (shared(k.checked_sub(1).and_then(|i| passes.get(i)))
                    || shared(passes.get(k + 1)));
            let units = pass.out_end - pass.out_first;
            let (first_pass, index_first) = (
                u32::from(pass.first),
                (pass.indices.start / layout.index_bytes) as u32,
            );
            let (src_first, src_lo) = ((pass.data.start / unit) as u32, pass.data_lo as u32);
            let src_hi = pass.data_hi.min(u64::from(u32::MAX)) as u32;
            let (index_lo, index_hi) = (pass.index_lo as u32, pass.index_hi as u32);
            let (params, invocations) = if rows {
                let params = GatherRowsParams {
                    quads: units as u32,
                    row_quads: inner_units as u32,
                    indices: layout.middle as u32,
                    axis_dim: axis_dim as u32,
                    site,
                    first_pass,
                    row_quads_div: Divisor::new(inner_units as u32),
                    indices_div: Divisor::new(layout.middle as u32),
                    out_first: pass.out_first as u32,
                    index_first,
                    src_first,
                    src_lo,
                    src_hi,
                    index_lo,
                    index_hi,
                    pad: [0; 3],
                };
                (bytemuck::bytes_of(&params).to_vec(), units)
            } else {
                let invocations = if elem < 4 {
                    units.div_ceil(lanes)
                } else {
                    units
                };
                let params = GatherIndexParams {
                    count: pass.out_end as u32,
                    units: invocations as u32,
                    axis_dim: axis_dim as u32,
                    inner: inner_units as u32,
                    indices: layout.middle as u32,
                    out_first: pass.out_first as u32,
                    site,
                    first_pass,
                    inner_div: Divisor::new(inner_units as u32),
                    indices_div: Divisor::new(layout.middle as u32),
                    index_first,
                    src_first,
                    src_lo,
                    src_hi,
                    merge: u32::from(merge),
                    index_lo,
                    index_hi,
                    pad: 0,
                };
                (bytemuck::bytes_of(&params).to_vec(), invocations)
            };
            let bindings = [
                data.storage().bind(pass.data),
                indices.storage().bind(pass.indices),
                out.storage().bind(pass.out),
                faults.storage().bind_whole(),
            ];
            let grid = grid_for(&ctx, op, invocations, wg)?;
            self.dispatch(op, &pipeline, &params, &bindings, grid)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(bytes: u64, segment: u64) -> Segments {
        Segments {
            segment,
            size: bytes.div_ceil(4).max(1) * 4,
        }
    }

    /// Runs the passes on the host as the kernels do: every output unit is written by exactly
    /// one pass, with the data unit its index picks (or as out of range by the first pass over
    /// its window), and every unit, index and data unit a pass touches lies in its windows,
    /// which fit one binding of one buffer and start aligned.
    fn check(l: &GatherLayout, fit: &GatherFit, picks: &[i64]) -> usize {
        let passes = gather_passes(l, fit).unwrap_or_else(|| panic!("{l:?} {fit:?}"));
        let total = l.out_units();
        let mut written = vec![0u32; total as usize];
        let inside = |w: &Window, segments: &Segments, first: u64, end: u64| {
            let base = w.segment as u64 * segments.segment;
            w.start == base + w.offset
                && w.start <= first
                && end <= w.start + w.size
                && w.offset.is_multiple_of(fit.align)
                && w.size <= fit.limit
                && w.offset + w.size <= segments.len(w.segment)
        };
        for p in &passes {
            assert!(inside(
                &p.out,
                &fit.out,
                p.out_first * l.unit,
                p.out_end * l.unit
            ));
            assert_eq!(p.out.start, p.out_first * l.unit, "{p:?}");
            assert!(inside(
                &p.data,
                &fit.data,
                p.data_lo * l.unit,
                p.data_hi * l.unit
            ));
            for u in p.out_first..p.out_end {
                let t = u / l.inner;
                let (outer, j) = (t / l.middle, t % l.middle);
                let at = if l.elements { u } else { j };
                if !(p.index_lo..p.index_hi).contains(&at) {
                    continue;
                }
                let (i0, i1) = (at * l.index_bytes, (at + 1) * l.index_bytes);
                assert!(inside(&p.indices, &fit.indices, i0, i1), "{p:?} index {at}");
                let index = picks[at as usize];
                let index = if index < 0 {
                    index + l.axis_dim as i64
                } else {
                    index
                };
                if index < 0 || index >= l.axis_dim as i64 {
                    written[u as usize] += u32::from(p.first);
                    continue;
                }
                let s = (outer * l.axis_dim + index as u64) * l.inner + u % l.inner;
                if (p.data_lo..p.data_hi).contains(&s) {
                    written[u as usize] += 1;
                }
            }
        }
        assert!(
            written.iter().all(|&n| n == 1),
            "{l:?} {fit:?}: {written:?}"
        );
        passes.len()
    }

    #[test]
    fn passes_write_every_output_unit_once_from_windows_that_fit() {
        let mut next = crate::kernels::windows::test_numbers(7);
        let mut windowed = 0;
        for case in 0..3000 {
            let unit = [1, 2, 4, 8, 16][case % 5];
            let index_bytes = [4, 8][(case / 5) % 2];
            let elements = unit < 16 && next(2) == 0;
            let l = GatherLayout {
                outer: 1 + next(3),
                axis_dim: 1 + next(40),
                inner: 1 + next(6),
                middle: 1 + next(30),
                elements,
                unit,
                index_bytes,
            };
            let align = [32, 256][next(2) as usize];
            let limit = align + next(1200);
            let segment = 256 * (1 + next(8));
            let picks: Vec<i64> = (0..l.out_units().max(l.middle))
                .map(|_| next(2 * l.axis_dim + 4) as i64 - l.axis_dim as i64 - 1)
                .collect();
            let index_count = if elements { l.out_units() } else { l.middle };
            let fit = GatherFit {
                limit,
                align,
                data: segments(l.outer * l.axis_dim * l.inner * unit, segment),
                indices: segments(index_count * index_bytes, segment),
                out: segments(l.out_units() * unit, segment),
            };
            if check(&l, &fit, &picks) > 1 {
                windowed += 1;
            }
        }
        assert!(windowed > 1000, "{windowed} cases in several passes");
    }

    #[test]
    fn an_embedding_table_past_one_binding_takes_a_pass_per_window() {
        // GPT-2 small's table (50257 x 768 f32) under 128 MiB bindings, seven tokens.
        let l = GatherLayout {
            outer: 1,
            axis_dim: 50257,
            inner: 768 * 4 / 16,
            middle: 7,
            elements: false,
            unit: 16,
            index_bytes: 8,
        };
        let limit = 128 << 20;
        let table = 50257 * 768 * 4;
        let fit = GatherFit {
            limit,
            align: 256,
            data: segments(table, 1 << 30),
            indices: segments(56, 1 << 30),
            out: segments(7 * 768 * 4, 1 << 30),
        };
        let passes = gather_passes(&l, &fit).unwrap();
        assert_eq!(passes.len(), 2);
        assert!(passes[0].first && !passes[1].first);
        assert_eq!(passes[0].data_hi, passes[1].data_lo);
        assert_eq!(passes[1].data_hi, table / 16);
        let picks = [0, 50256, -1, 25000, 40000, 3, 50257];
        check(&l, &fit, &picks);
    }

    #[test]
    fn a_unit_larger_than_a_window_is_refused() {
        let l = GatherLayout {
            outer: 1,
            axis_dim: 4,
            inner: 1,
            middle: 2,
            elements: false,
            unit: 16,
            index_bytes: 4,
        };
        let fit = GatherFit {
            limit: 20,
            align: 32,
            data: segments(64, 256),
            indices: segments(8, 256),
            out: segments(32, 256),
        };
        assert_eq!(gather_passes(&l, &fit), None);
    }
}
