//! The pad kernel (`shaders/pad.wgsl`): ONNX Pad in one pass, every output element mapped to
//! its input element (or the constant) axis by axis, moved as bits in words.

use super::divide::Divisor;
use super::windows::room;
use super::{grid_for, Kernel, MAX_RANK};
use crate::{DType, Error, Recorder, Result, Tensor};

/// How Pad fills what lies outside the input (ONNX's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// The constant value.
    Constant,
    /// The input mirrored at its edges, the edge element not repeated.
    Reflect,
    /// The edge element repeated.
    Edge,
    /// The input repeated (from its other end).
    Wrap,
}

impl PadMode {
    /// The mode named by ONNX's `mode` text.
    pub fn parse(mode: &str) -> Option<PadMode> {
        Some(match mode {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" => PadMode::Wrap,
            _ => return None,
        })
    }

    /// ONNX's name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Edge => "edge",
            PadMode::Wrap => "wrap",
        }
    }

    /// The kernel's `MODE`.
    pub(crate) fn code(self) -> u32 {
        match self {
            PadMode::Constant => 0,
            PadMode::Reflect => 1,
            PadMode::Edge => 2,
            PadMode::Wrap => 3,
        }
    }
}

/// One axis of a pad: `before` elements ahead of the `len` input elements kept (from `crop`
/// on), `out_len` in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadAxis {
    /// Output elements along the axis.
    pub out_len: usize,
    /// Input elements kept.
    pub len: usize,
    /// Padding ahead of them.
    pub before: usize,
    /// Input elements cropped ahead of them.
    pub crop: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PadParams {
    count: u32,
    units: u32,
    rank: u32,
    base: u32,
    value: [u32; 2],
    dst_base: u32,
    first: u32,
    /// Per axis, outermost first: out_len, len, before, stride, out_len's divisor, the
    /// mode's period and its divisor (see `pad.wgsl`), three words of padding.
    axes: [[u32; 12]; MAX_RANK],
}

impl Recorder {
    /// Records `out` (of the axes' `out_len`s) as `data` padded per `axes` under `mode`, the
    /// constant being `value`'s bits (low word first).
    pub(crate) fn pad_into(
        &mut self,
        op: &'static str,
        data: &Tensor,
        axes: &[PadAxis],
        mode: PadMode,
        value: u64,
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        let tensors = [(data, "data"), (out, "the output")];
        if let Err(e) = super::operands::check_bound_whole(&ctx, op, &tensors) {
            return self.pad_in_windows(op, data, axes, mode, value, out, e);
        }
        if count > u64::from(u32::MAX) || data.numel() as u64 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the data or output", count));
        }
        let bindings = [data.storage().bind_whole(), out.storage().bind_whole()];
        let pad = (axes, data.shape(), mode, value);
        let piece = PadPiece {
            base: 0,
            dst_base: 0,
            first: 0,
            count,
        };
        self.pad_piece(op, data.dtype(), pad, piece, bindings)
    }

    /// One dispatch of the pad kernel: output elements `[first, first + count)` of `axes` over
    /// data of `dims` (C order, its element 0 at element `base` of the data binding, which
    /// may be before the binding's start: indices wrap) into the output binding from element
    /// `dst_base` on (a multiple of the elements per word, as `first` is).
    fn pad_piece(
        &mut self,
        op: &'static str,
        dtype: crate::DType,
        (axes, dims, mode, value): (&[PadAxis], &[usize], PadMode, u64),
        piece: PadPiece,
        bindings: [wgpu::BindingResource<'_>; 2],
    ) -> Result<()> {
        let ctx = self.context().clone();
        debug_assert!(axes.len() <= MAX_RANK && axes.len() == dims.len());
        let elem = dtype.size() as u32;
        let lanes = (4 / elem).max(1) as u64;
        debug_assert_eq!(piece.dst_base % lanes, 0);
        debug_assert_eq!(piece.first % lanes, 0);
        // A large output that starts on a quad but ends inside one: its whole quads by 16-byte
        // stores, then its last 1 to 3 words in a dispatch of their own (else every word of it
        // would be stored alone).
        let words = (piece.count * u64::from(elem)).div_ceil(4);
        let whole = words / 4 * 4;
        let dst_word = piece.dst_base * u64::from(elem) / 4;
        if dst_word.is_multiple_of(4) && whole != words && whole >= SPLIT_FROM_WORDS {
            let head = whole * 4 / u64::from(elem);
            let pad = (axes, dims, mode, value);
            let [a, b] = bindings;
            let again = [a.clone(), b.clone()];
            self.pad_piece(
                op,
                dtype,
                pad,
                PadPiece {
                    count: head,
                    ..piece
                },
                again,
            )?;
            let tail = PadPiece {
                dst_base: piece.dst_base + head,
                first: piece.first + head,
                count: piece.count - head,
                ..piece
            };
            return self.pad_piece(op, dtype, pad, tail, [a, b]);
        }
        let mut params = PadParams {
            count: piece.count as u32,
            units: 0,
            rank: 0,
            base: piece.base as u32,
            value: [value as u32, (value >> 32) as u32],
            dst_base: (piece.dst_base * u64::from(elem) / 4) as u32,
            first: piece.first as u32,
            axes: [[0; 12]; MAX_RANK],
        };
        // A scalar is one axis of one element: the kernel splits off an innermost axis.
        let scalar = [PadAxis {
            out_len: 1,
            len: 1,
            before: 0,
            crop: 0,
        }];
        let (axes, dims) = match axes.is_empty() {
            true => (&scalar[..], &[1usize][..]),
            false => (axes, dims),
        };
        params.rank = axes.len() as u32;
        let mut stride = 1usize;
        for (k, axis) in axes.iter().enumerate().rev() {
            let out = Divisor::new(axis.out_len as u32);
            // Reflect folds by 2 (len - 1), wrap by len (only where anything is padded, so
            // never by 0 there; an axis padded by nothing never folds).
            let period = match mode {
                PadMode::Reflect => (2 * axis.len.saturating_sub(1)).max(1),
                _ => axis.len.max(1),
            } as u32;
            let by_period = Divisor::new(period);
            params.axes[k] = [
                axis.out_len as u32,
                axis.len as u32,
                axis.before as u32,
                stride as u32,
                out.shift,
                out.magic,
                period,
                by_period.shift,
                by_period.magic,
                0,
                0,
                0,
            ];
            params.base = params.base.wrapping_add((axis.crop * stride) as u32);
            stride *= dims[k];
        }
        params.units = words as u32;
        let wg = ctx.workgroup_size();
        // 16-byte stores where the output's words come in whole quads.
        let quads = params.dst_base.is_multiple_of(4) && words.is_multiple_of(4);
        let kernel = Kernel::Pad {
            elem_bytes: elem,
            mode,
            workgroup_size: wg,
            quads,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let grid = grid_for(&ctx, op, words.div_ceil(4), wg)?;
        ctx.count_quads(quads);
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }

    /// A pad whose data or output is too large to bind whole: its output cut, in order, into
    /// runs of elements (whole words) that fit one window and whose inputs (found on the host
    /// axis by axis: see [`Reads`]) fit another, each run as long as fits, a dispatch each.
    /// A word whose inputs straddle two of the data's buffers reads a copy of them. `refused`
    /// where the indices pass 32 bits; an error naming the run where a word's inputs spread
    /// beyond a window.
    #[allow(clippy::too_many_arguments)]
    fn pad_in_windows(
        &mut self,
        op: &'static str,
        data: &Tensor,
        axes: &[PadAxis],
        mode: PadMode,
        value: u64,
        out: &Tensor,
        refused: Error,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let count = out.numel() as u64;
        if count > u64::from(u32::MAX) || data.numel() as u64 > u64::from(u32::MAX) {
            return Err(refused);
        }
        let elem = data.dtype().size() as u64;
        let lanes = (4 / elem).max(1);
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, elem)?;
        let room = room(limit, align, elem);
        let (data_segments, out_segments) = (data.storage().segments(), out.storage().segments());
        let (in_segment, out_segment) = (data_segments.segment / elem, out_segments.segment / elem);
        let reads = Reads::new(axes, data.shape(), mode);
        // The input elements `[lo, hi]` that output elements `[e0, e1)` read, if any, when
        // both fit one window and one buffer.
        let fits = |e0: u64, e1: u64| -> Option<Option<(u64, u64)>> {
            let out_ok = e1 - e0 <= room && e0 / out_segment == (e1 - 1) / out_segment;
            let span = reads.span(0, e0, e1);
            let in_ok =
                span.is_none_or(|(lo, hi)| hi - lo < room && lo / in_segment == hi / in_segment);
            (out_ok && in_ok).then_some(span)
        };
        let mut pieces = Vec::new();
        let mut e0 = 0;
        while e0 < count {
            // Whole words, unless the run ends the output.
            let word_end = |e: u64| if e >= count { count } else { e / lanes * lanes };
            let mut e1 = word_end(e0 + room.max(lanes));
            if fits(e0, e1).is_none() {
                // The longest run that fits (runs that fit are closed under shortening).
                let (mut lo, mut hi) = (e0, e1);
                while hi - lo > lanes {
                    let mid = word_end(lo + (hi - lo) / 2);
                    let mid = if mid <= lo { lo + lanes } else { mid };
                    if fits(e0, mid).is_some() {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                e1 = lo;
                if e1 == e0 {
                    // Not one word fits: where its inputs fit a window but straddle two of
                    // the data's buffers, they are copied into a buffer of their own.
                    e1 = word_end(e0 + lanes);
                    match reads.span(0, e0, e1) {
                        Some((lo, hi)) if hi - lo < room && e1 - e0 <= room => {
                            pieces.push((e0, e1, Some((lo, hi)), true));
                            e0 = e1;
                            continue;
                        }
                        Some((lo, hi)) => {
                            return Err(Error::LimitExceeded {
                                op,
                                what: format!(
                                    "the data that output elements {e0}..{e1} read, in one binding"
                                ),
                                limit: "max_storage_buffer_binding_size",
                                needed: (hi - lo + 1) * elem,
                                max: room * elem,
                            })
                        }
                        None => return Err(refused),
                    }
                }
            }
            pieces.push((e0, e1, fits(e0, e1).flatten(), false));
            e0 = e1;
        }
        for (e0, e1, span, staged) in pieces {
            let out_window = out_segments.window(e0 * elem, e1 * elem, align);
            // An input window holding what the run reads (a run of constants reads nothing:
            // the first element's window is bound).
            let (lo, hi) = span.unwrap_or((0, 0));
            let (from, to) = (lo * elem / 4 * 4, ((hi + 1) * elem).div_ceil(4) * 4);
            let copied = match staged {
                true => {
                    let t =
                        self.scratch(DType::U8, &[(to - from) as usize], ctx.max_buffer_size())?;
                    self.copy(data.storage(), from, t.storage(), 0, to - from)?;
                    Some(t)
                }
                false => None,
            };
            let (in_binding, start) = match &copied {
                Some(t) => (t.storage().bind_whole(), from),
                None => {
                    let w = data_segments.window(lo * elem, (hi + 1) * elem, align);
                    (data.storage().bind(w), w.start)
                }
            };
            let piece = PadPiece {
                base: (start / elem).wrapping_neg(),
                dst_base: e0 - out_window.start / elem,
                first: e0,
                count: e1 - e0,
            };
            let bindings = [in_binding, out.storage().bind(out_window)];
            let pad = (axes, data.shape(), mode, value);
            self.pad_piece(op, data.dtype(), pad, piece, bindings)?;
        }
        Ok(())
    }
}

/// Output words from which a pad whose last quad is partial takes a second dispatch for it:
/// below, the dispatch costs more than the 16-byte stores save.
const SPLIT_FROM_WORDS: u64 = 1 << 16;

/// Where one dispatch of the pad kernel reads and writes (see [`Recorder::pad_piece`]).
#[derive(Clone, Copy)]
struct PadPiece {
    base: u64,
    dst_base: u64,
    first: u64,
    count: u64,
}

/// The input elements runs of a pad's output read, axis by axis: plain data, so that a pad
/// beyond one binding is cut where each run's inputs fit a window.
struct Reads<'a> {
    axes: &'a [PadAxis],
    mode: PadMode,
    /// Per axis: the input's element stride, and the output's.
    strides: Vec<u64>,
    out_strides: Vec<u64>,
    /// Per axis: the least and greatest input offset that a whole output block of that axis
    /// and the ones after it reads (`None`: it is all constant).
    blocks: Vec<Option<(u64, u64)>>,
}

impl<'a> Reads<'a> {
    fn new(axes: &'a [PadAxis], dims: &[usize], mode: PadMode) -> Reads<'a> {
        let strides = crate::host::c_strides(dims);
        let out_strides =
            crate::host::c_strides(&axes.iter().map(|a| a.out_len).collect::<Vec<_>>());
        let mut reads = Reads {
            axes,
            mode,
            strides,
            out_strides,
            blocks: vec![Some((0, 0)); axes.len() + 1],
        };
        for k in (0..axes.len()).rev() {
            reads.blocks[k] = reads.planes(k, 0, axes[k].out_len as u64);
        }
        reads
    }

    /// The input coordinate (from the uncropped axis' start) of output coordinate `o` along
    /// `axis`, as the kernel's `source_coordinate` maps it; `None` for the constant.
    fn source(&self, axis: &PadAxis, o: u64) -> Option<u64> {
        let (i, len) = (o as i64 - axis.before as i64, axis.len as i64);
        if len == 0 {
            return None;
        }
        let c = match self.mode {
            PadMode::Constant => (0..len).contains(&i).then_some(i)?,
            PadMode::Reflect => {
                let period = (2 * (len - 1)).max(1);
                let r = i.rem_euclid(period);
                if r >= len {
                    period - r
                } else {
                    r
                }
            }
            PadMode::Edge => i.clamp(0, len - 1),
            PadMode::Wrap => i.rem_euclid(len),
        };
        Some(axis.crop as u64 + c as u64)
    }

    /// The least and greatest input coordinate that output coordinates `[o0, o1)` of `axis`
    /// read, in time independent of the range's length.
    fn sources(&self, axis: &PadAxis, o0: u64, o1: u64) -> Option<(u64, u64)> {
        let (before, len) = (axis.before as i64, axis.len as i64);
        if o0 >= o1 || len == 0 {
            return None;
        }
        let mut hull: Option<(i64, i64)> = None;
        let mut add = |lo: i64, hi: i64| {
            hull = Some(hull.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        };
        // Cropped coordinates [i0, i1): inside [0, len) as they are; outside by the mode.
        let (i0, i1) = (o0 as i64 - before, o1 as i64 - before);
        let (m0, m1) = (i0.max(0), i1.min(len));
        if m0 < m1 {
            add(m0, m1 - 1);
        }
        for (p0, p1) in [(i0, i1.min(0)), (i0.max(len), i1)] {
            if p0 >= p1 {
                continue;
            }
            match self.mode {
                PadMode::Constant => {}
                PadMode::Edge => add(p0.clamp(0, len - 1), (p1 - 1).clamp(0, len - 1)),
                // Residues modulo a period: every one in a stretch as long, else one interval
                // or two (then their hull is the whole axis too).
                PadMode::Wrap => {
                    let (r0, r1) = (p0.rem_euclid(len), (p1 - 1).rem_euclid(len));
                    if p1 - p0 >= len || r0 > r1 {
                        add(0, len - 1);
                    } else {
                        add(r0, r1);
                    }
                }
                PadMode::Reflect => {
                    let period = (2 * (len - 1)).max(1);
                    let (r0, r1) = (p0.rem_euclid(period), (p1 - 1).rem_euclid(period));
                    let runs = if p1 - p0 >= period {
                        [(0, period - 1), (1, 0)]
                    } else if r0 <= r1 {
                        [(r0, r1), (1, 0)]
                    } else {
                        [(r0, period - 1), (0, r1)]
                    };
                    // Residues below len read themselves, the others period - r.
                    for (a, b) in runs.into_iter().filter(|(a, b)| a <= b) {
                        if a < len {
                            add(a, b.min(len - 1));
                        }
                        if b >= len {
                            add(period - b, period - a.max(len));
                        }
                    }
                }
            }
        }
        let crop = axis.crop as i64;
        hull.map(|(lo, hi)| ((crop + lo) as u64, (crop + hi) as u64))
    }

    /// What whole output blocks `[p0, p1)` of axis `k` read: their coordinates' inputs times
    /// the axis' stride, plus what one whole block of the next axis reads.
    fn planes(&self, k: usize, p0: u64, p1: u64) -> Option<(u64, u64)> {
        let (lo, hi) = self.sources(&self.axes[k], p0, p1)?;
        let (inner_lo, inner_hi) = self.blocks[k + 1]?;
        Some((
            lo * self.strides[k] + inner_lo,
            hi * self.strides[k] + inner_hi,
        ))
    }

    /// The least and greatest input element that output elements `[e0, e1)` (offsets in one
    /// block of axis `k`, `e0 < e1`) read; `None` when they are all the constant.
    fn span(&self, k: usize, e0: u64, e1: u64) -> Option<(u64, u64)> {
        if k == self.axes.len() {
            return self.blocks[k];
        }
        let plane = self.out_strides[k];
        let (p0, p1) = (e0 / plane, (e1 - 1) / plane);
        let part = |p: u64, a: u64, b: u64| -> Option<(u64, u64)> {
            if a == 0 && b == plane {
                return self.planes(k, p, p + 1);
            }
            let c = self.source(&self.axes[k], p)?;
            let (lo, hi) = self.span(k + 1, a, b)?;
            Some((c * self.strides[k] + lo, c * self.strides[k] + hi))
        };
        if p0 == p1 {
            return part(p0, e0 - p0 * plane, e1 - p0 * plane);
        }
        let pieces = [
            part(p0, e0 - p0 * plane, plane),
            (p0 + 1 < p1).then(|| self.planes(k, p0 + 1, p1)).flatten(),
            part(p1, 0, e1 - p1 * plane),
        ];
        pieces
            .into_iter()
            .flatten()
            .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::{PadAxis, PadMode, Reads};

    /// The input element output element `e` reads, walked coordinate by coordinate.
    fn read_of(reads: &Reads, e: u64) -> Option<u64> {
        let mut at = 0;
        for (k, axis) in reads.axes.iter().enumerate() {
            let o = e / reads.out_strides[k] % axis.out_len as u64;
            at += reads.source(axis, o)? * reads.strides[k];
        }
        Some(at)
    }

    #[test]
    fn spans_are_the_hull_of_what_each_run_reads() {
        let mut next = crate::kernels::windows::test_numbers(7);
        let modes = [
            PadMode::Constant,
            PadMode::Reflect,
            PadMode::Edge,
            PadMode::Wrap,
        ];
        for _ in 0..2000 {
            let mode = modes[next(4) as usize];
            let rank = 1 + next(3) as usize;
            let mut dims = Vec::new();
            let mut axes = Vec::new();
            for _ in 0..rank {
                let dim = 2 + next(5) as usize;
                let crop = next(2) as usize;
                let len = dim - crop - next(2) as usize;
                // As Pad checks: reflect pads less than the length, and a length of at
                // least 2 if any; edge and wrap pad no empty axis; constant up to 3.
                let most = match mode {
                    PadMode::Reflect if len < 2 => 1,
                    PadMode::Reflect => len as u64,
                    PadMode::Edge | PadMode::Wrap if len == 0 => 1,
                    // Stretches longer than the axis, for wrap several periods.
                    _ => 20,
                };
                let (before, after) = (next(most) as usize, next(most) as usize);
                dims.push(dim);
                axes.push(PadAxis {
                    out_len: before + len + after,
                    len,
                    before,
                    crop,
                });
            }
            let reads = Reads::new(&axes, &dims, mode);
            let count: u64 = axes.iter().map(|a| a.out_len as u64).product();
            for _ in 0..20.min(count) {
                let e0 = next(count);
                let e1 = e0 + 1 + next(count - e0);
                let want = (e0..e1).filter_map(|e| read_of(&reads, e)).fold(
                    None,
                    |hull: Option<(u64, u64)>, i| {
                        Some(hull.map_or((i, i), |(a, b)| (a.min(i), b.max(i))))
                    },
                );
                assert_eq!(
                    reads.span(0, e0, e1),
                    want,
                    "{mode:?} {dims:?} {axes:?} [{e0}, {e1})"
                );
            }
        }
    }
}
