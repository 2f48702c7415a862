//! The CumSum kernel (`shaders/cumsum.wgsl`): running sums along one axis, one invocation per
//! line, on the 32- and 64-bit types (the op casts 16-bit floats to f32 around it).

use super::operands::element_typed;
use super::windows::Walk;
use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::storage::{Segments, Window};
use crate::{DType, Error, Recorder, Result, Tensor};

const CUMSUM: &str = include_str!("../../shaders/cumsum.wgsl");

/// WGSL source of CumSum (or with `product` CumProd) on `dtype`; `emulate64`: i64, u64 or f64
/// on u32 pairs (f64 each step rounded from the bits, as the CPU rounds it).
pub fn cumsum_source(dtype: DType, emulate64: bool, product: bool) -> String {
    let (sum, combine, one) = match (emulate64, dtype) {
        (true, DType::F64) => (
            "sf64_add(a, b)",
            "sf64_mul(a, b)",
            "vec2<u32>(0u, 0x3ff00000u)",
        ),
        (true, _) => ("add64(a, b)", "mul64(a, b)", "vec2<u32>(1u, 0u)"),
        (false, _) => ("a + b", "a * b", "T(1)"),
    };
    let mut lines = Vec::new();
    if emulate64 && !product {
        lines.push((
            "// ADD",
            format!("fn add(a: T, b: T) -> T {{ return {sum}; }}"),
        ));
    }
    if product {
        lines.push((
            "// ADD",
            format!("fn add(a: T, b: T) -> T {{ return {combine}; }}"),
        ));
        lines.push((
            "// IDENTITY",
            format!("fn identity() -> T {{ return {one}; }}"),
        ));
    }
    let source = element_typed(CUMSUM, dtype, emulate64.then_some(&lines[..]));
    if emulate64 {
        source
    } else {
        super::operands::specialize(&source, &lines)
    }
}

/// A pass of the running sums over windows of the input and the output: the lines of
/// `slices` whole outer slices from `outer`, walking positions `[k0, k1)` of the axis (all of
/// it, or a stretch of one slice longer than a window: `stretch`, whose lines carry their sums
/// from one stretch to the next in a buffer of their own). `firsts`: each tensor's window and
/// the element of slice `outer`'s start counted from the window's (modulo 2^32: a stretch's
/// window may start past it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LinePass {
    pub outer: u64,
    pub slices: u64,
    pub k0: u64,
    pub k1: u64,
    pub stretch: bool,
    pub firsts: [(Window, u32); 2],
}

/// The passes of running sums over `[outer, axis_len, inner]` (`elem`-byte elements) from an
/// input laid out as `segments[0]` into an output as `segments[1]`: runs of whole slices that
/// fit one window of at most `limit` bytes of one buffer, windows starting at multiples of
/// `align`; a slice that does not fit is walked in stretches whose rows (`inner` elements at
/// each position) fit one. `None` when a row does not fit one (or crosses a buffer end).
pub(crate) fn line_passes(
    [outer, axis_len, inner]: [u64; 3],
    elem: u64,
    reverse: bool,
    segments: [Segments; 2],
    limit: u64,
    align: u64,
) -> Option<Vec<LinePass>> {
    let row = inner * elem;
    let slice = axis_len * row;
    let room = limit.saturating_sub(align + 4);
    let sizes = segments.map(|s| s.segment);
    if room == 0 {
        return None;
    }
    let walk = Walk {
        lens: vec![outer],
        steps: vec![vec![slice; 2]],
        bases: vec![0; 2],
        extents: vec![slice; 2],
    };
    // The element of `start` counted from window `w`'s first, modulo 2^32.
    let first = |start: u64, w: &Window| ((start / elem).wrapping_sub(w.start / elem)) as u32;
    let mut passes = Vec::new();
    for (piece, fits) in walk.pieces(room, &sizes) {
        let start = piece.bases[0];
        if fits {
            let windows = [0, 1].map(|j| piece.window(j, 1, align, segments[j]).0);
            passes.push(LinePass {
                outer: start / slice,
                slices: piece.lens.first().copied().unwrap_or(1),
                k0: 0,
                k1: axis_len,
                stretch: false,
                firsts: windows.map(|w| (w, first(start, &w))),
            });
            continue;
        }
        let mut k0 = 0;
        while k0 < axis_len {
            // The rows from position k0 on (down from its row when reversed) that fit.
            let mut k1 = axis_len;
            for size in sizes {
                let avail = if reverse {
                    let end = start + (axis_len - k0) * row;
                    room.min(end - (end - 1) / size * size)
                } else {
                    let begin = start + k0 * row;
                    room.min((begin / size + 1) * size - begin)
                };
                k1 = k1.min(k0 + avail / row);
            }
            if k1 == k0 {
                return None;
            }
            // Rows [r0, r1) of the slice.
            let (r0, r1) = match reverse {
                true => (axis_len - k1, axis_len - k0),
                false => (k0, k1),
            };
            let windows =
                [0, 1].map(|j| segments[j].window(start + r0 * row, start + r1 * row, align));
            passes.push(LinePass {
                outer: start / slice,
                slices: 1,
                k0,
                k1,
                stretch: true,
                firsts: windows.map(|w| (w, first(start, &w))),
            });
            k0 = k1;
        }
    }
    Some(passes)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CumSumParams {
    lines: u32,
    axis_len: u32,
    inner: u32,
    start: u32,
    count: u32,
    src_first: u32,
    dst_first: u32,
    carry: u32,
}

impl Recorder {
    /// Records the running sums (or with `product` products) of `x` (seen as
    /// `[outer, axis_len, inner]`) into `out`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cumsum_into(
        &mut self,
        x: &Tensor,
        axis_len: usize,
        inner: usize,
        exclusive: bool,
        reverse: bool,
        product: bool,
        out: &Tensor,
    ) -> Result<()> {
        let op = if product { "CumProd" } else { "CumSum" };
        let n = x.numel() as u64;
        if n == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        if n > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the input", n));
        }
        let elem = x.dtype().size() as u64;
        let slice = (axis_len.max(1) * inner.max(1)) as u64;
        let limit = ctx.binding_limit();
        let runs = if x.storage().fits_one_binding(limit) && out.storage().fits_one_binding(limit) {
            let whole = [x, out].map(|t| (t.storage().whole_window(), 0));
            vec![LinePass {
                outer: 0,
                slices: n / slice,
                k0: 0,
                k1: axis_len as u64,
                stretch: false,
                firsts: whole,
            }]
        } else {
            let align = ctx.window_alignment(op, elem)?;
            let segments = [x.storage().segments(), out.storage().segments()];
            let (len, inner) = (axis_len as u64, inner.max(1) as u64);
            line_passes(
                [n / slice, len, inner],
                elem,
                reverse,
                segments,
                limit,
                align,
            )
            .ok_or_else(|| Error::LimitExceeded {
                op,
                what: "one row along the axis (in one buffer), bound at once".into(),
                limit: "max_storage_buffer_binding_size",
                needed: inner * elem + align + 4,
                max: limit,
            })?
        };
        let wg = ctx.workgroup_size();
        let kernel = Kernel::CumSum {
            dtype: x.dtype(),
            emulate64: super::operands::emulated(&ctx, x.dtype()),
            exclusive,
            reverse,
            product,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        // Stretches carry each line's sum to the next in a buffer of their own (a row fits a
        // window, so a binding).
        let stretched = runs.iter().any(|r| r.stretch);
        let carried = self.alloc(x.dtype(), &[if stretched { inner.max(1) } else { 1 }])?;
        for run in &runs {
            let lines = run.slices * inner.max(1) as u64;
            let grid = grid_for(&ctx, op, lines, wg)?;
            let [(src, src_first), (dst, dst_first)] = run.firsts;
            let bindings = [
                x.storage().bind(src),
                out.storage().bind(dst),
                carried.storage().bind_whole(),
            ];
            let mut start = run.k0 as usize;
            while start < run.k1 as usize {
                let count = (run.k1 as usize - start).min(LOOP_ITERATIONS_PER_DISPATCH);
                let params = CumSumParams {
                    lines: lines as u32,
                    axis_len: axis_len as u32,
                    inner: inner.max(1) as u32,
                    start: start as u32,
                    count: count as u32,
                    src_first,
                    dst_first,
                    carry: u32::from(run.stretch),
                };
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                start += count;
            }
        }
        self.release(carried);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random layouts under small limits: every position of every line is walked once, each
    /// line's in order (so a stretch goes on from the sums before it), and every element a pass
    /// reads or writes lies in each tensor's window, which starts aligned, fits the limit and
    /// lies in one buffer.
    #[test]
    fn passes_walk_every_line_in_order_within_their_windows() {
        let mut next = crate::kernels::windows::test_numbers(5);
        let (mut placed, mut stretched) = (0, 0);
        for _ in 0..3000 {
            let (outer, axis_len, inner) = (1 + next(6), 1 + next(90), 1 + next(4));
            let elem = [4u64, 8][next(2) as usize];
            let reverse = next(2) == 1;
            let align = [16u64, 32][next(2) as usize];
            let limit = 48 + next(300);
            let bytes = outer * axis_len * inner * elem;
            let segments = [0, 1].map(|_| Segments {
                segment: [64u64, 128, 200, 1 << 20][next(4) as usize],
                size: bytes,
            });
            let layout = format!(
                "[{outer}, {axis_len}, {inner}] x {elem} reverse {reverse} limit {limit} {segments:?}"
            );
            let Some(passes) = line_passes(
                [outer, axis_len, inner],
                elem,
                reverse,
                segments,
                limit,
                align,
            ) else {
                // A row does not fit, or crosses a buffer end.
                let row = inner * elem;
                assert!(
                    row + align + 4 > limit
                        || segments.iter().any(|s| !s.segment.is_multiple_of(row)),
                    "{layout}"
                );
                continue;
            };
            placed += 1;
            for p in &passes {
                let whole = p.k0 == 0 && p.k1 == axis_len;
                assert!(p.stretch || whole, "{layout}: {p:?}");
                assert!(!p.stretch || p.slices == 1, "{layout}: {p:?}");
            }
            stretched += usize::from(passes.iter().any(|p| p.k0 > 0 || p.k1 < axis_len));
            // The next position each line walks.
            let mut walked = vec![0u64; (outer * inner) as usize];
            for p in &passes {
                for (j, (w, first)) in p.firsts.iter().enumerate() {
                    let base = w.segment as u64 * segments[j].segment;
                    assert!(
                        w.start == base + w.offset
                            && w.offset.is_multiple_of(align)
                            && w.size <= limit
                            && w.offset + w.size <= segments[j].len(w.segment),
                        "{layout}: {p:?}"
                    );
                    let slice_start = p.outer * axis_len * inner;
                    assert_eq!(
                        (slice_start.wrapping_sub(w.start / elem)) as u32,
                        *first,
                        "{layout}"
                    );
                    let inside = |e: u64| e * elem >= w.start && (e + 1) * elem <= w.start + w.size;
                    for o in p.outer..p.outer + p.slices {
                        for i in 0..inner {
                            let at = |k: u64| {
                                let j = if reverse { axis_len - 1 - k } else { k };
                                (o * axis_len + j) * inner + i
                            };
                            for k in p.k0..p.k1 {
                                assert!(inside(at(k)), "{layout}: {p:?} position {k}");
                            }
                        }
                    }
                }
                for o in p.outer..p.outer + p.slices {
                    for i in 0..inner {
                        let line = &mut walked[(o * inner + i) as usize];
                        assert_eq!(*line, p.k0, "{layout}: line {o}, {i} out of order");
                        *line = p.k1;
                    }
                }
            }
            assert!(walked.iter().all(|&k| k == axis_len), "{layout}");
        }
        assert!(
            placed > 1500 && stretched > 1000,
            "{placed} placed, {stretched} stretched"
        );
    }
}
