//! Splitting work over buffers larger than one binding: a strided walk over several buffers
//! at once is cut, in C order, into walks whose footprint in every buffer fits in one window,
//! and in one segment of tensors held in several GPU buffers (above `max_buffer_size`).
//! Plain data, tested without a GPU.

use crate::storage::{Segments, Window};

/// True when elements `[first, first + span)` lie in one segment of `segment` elements.
fn in_one_segment(first: u64, span: u64, segment: u64) -> bool {
    first / segment == (first + span - 1) / segment
}

/// A walk over `lens` (outermost first) through several buffers: at coordinates `c`, buffer
/// `j` is at element `bases[j] + sum_k c_k * steps[k][j]` and uses `extents[j]` elements from
/// there (1 for an element, a whole row or matrix for MatMul). Steps are non-negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Positions along each axis, outermost first.
    pub lens: Vec<u64>,
    /// `steps[k][j]`: buffer `j`'s elements between positions of axis `k`.
    pub steps: Vec<Vec<u64>>,
    /// Each buffer's element at coordinates 0.
    pub bases: Vec<u64>,
    /// Elements each buffer uses from each position.
    pub extents: Vec<u64>,
}

impl Walk {
    /// The same walk with adjacent axes merged wherever every buffer steps over both as over
    /// one (the outer step is the inner step times the inner length), and axes of length 1
    /// dropped: same-shape contiguous operands become one axis, which kernels index without
    /// a division per axis.
    pub fn merged(&self) -> Walk {
        let mut lens: Vec<u64> = Vec::new();
        let mut steps: Vec<Vec<u64>> = Vec::new();
        for (&len, step) in self.lens.iter().zip(&self.steps) {
            if len == 1 {
                continue;
            }
            if let (Some(last_len), Some(last)) = (lens.last_mut(), steps.last_mut()) {
                // `last` is the outer axis, this one the inner.
                if last.iter().zip(step).all(|(&o, &i)| o == i * len) {
                    *last_len *= len;
                    last.clone_from(step);
                    continue;
                }
            }
            lens.push(len);
            steps.push(step.clone());
        }
        if lens.is_empty() && self.count() > 0 {
            lens.push(1);
            steps.push(vec![0; self.bases.len()]);
        }
        Walk {
            lens,
            steps,
            bases: self.bases.clone(),
            extents: self.extents.clone(),
        }
    }

    /// Positions walked.
    pub fn count(&self) -> u64 {
        self.lens.iter().product()
    }

    /// Elements of buffer `j` from the walk's first position in it to its last, inclusive.
    pub fn span(&self, j: usize) -> u64 {
        self.span_of(0, j)
    }

    fn span_of(&self, from_axis: usize, j: usize) -> u64 {
        self.lens[from_axis..]
            .iter()
            .zip(&self.steps[from_axis..])
            .map(|(&len, s)| (len - 1) * s[j])
            .sum::<u64>()
            + self.extents[j]
    }

    /// The walk cut along its outer axes, in order, into walks whose span in every buffer is
    /// at most `room` elements and lies in one segment of `segments[j]` elements of buffer
    /// `j`; `None` when some position (an element, or an extent) cannot be placed so. An
    /// empty walk gives no pieces.
    pub fn split(&self, room: u64, segments: &[u64]) -> Option<Vec<Walk>> {
        if room == 0 || segments.contains(&0) {
            return (self.count() == 0).then(Vec::new);
        }
        self.pieces(room, segments)
            .into_iter()
            .map(|(w, fits)| fits.then_some(w))
            .collect()
    }

    /// [`Walk::split`], with the positions that cannot be placed kept in order as walks of
    /// one position (no axes), marked `false`: an extent that crosses from one segment to the
    /// next, or is larger than `room`. `room` and `segments` must not be 0.
    pub fn pieces(&self, room: u64, segments: &[u64]) -> Vec<(Walk, bool)> {
        let mut pieces = Vec::new();
        if self.count() > 0 {
            self.split_into(room, segments, &mut pieces);
        }
        pieces
    }

    fn fits(&self, room: u64, segments: &[u64]) -> bool {
        (0..self.bases.len()).all(|j| {
            let span = self.span(j);
            span <= room && in_one_segment(self.bases[j], span, segments[j])
        })
    }

    fn split_into(&self, room: u64, segments: &[u64], pieces: &mut Vec<(Walk, bool)>) {
        if self.fits(room, segments) {
            pieces.push((self.clone(), true));
            return;
        }
        let Some((&outer, _)) = self.lens.split_first() else {
            pieces.push((self.clone(), false)); // one position does not fit
            return;
        };
        let buffers = self.bases.len();
        let at = |i: u64, j: usize| self.bases[j] + i * self.steps[0][j];
        let mut i0 = 0;
        while i0 < outer {
            // The most outer indices from i0 whose footprint in each buffer stays within
            // `room` elements and within the segment where it starts.
            let rows = (0..buffers)
                .map(|j| {
                    let first = at(i0, j);
                    let segment_end = (first / segments[j])
                        .saturating_add(1)
                        .saturating_mul(segments[j]);
                    let avail = room.min(segment_end - first);
                    match avail.checked_sub(self.span_of(1, j)) {
                        None => 0,
                        Some(_) if self.steps[0][j] == 0 => u64::MAX,
                        Some(left) => left / self.steps[0][j] + 1,
                    }
                })
                .min()
                .unwrap_or(u64::MAX)
                .min(outer - i0);
            if rows == 0 {
                // One index of the outer axis is still too large: split it along the next axes.
                Walk {
                    lens: self.lens[1..].to_vec(),
                    steps: self.steps[1..].to_vec(),
                    bases: (0..buffers).map(|j| at(i0, j)).collect(),
                    extents: self.extents.clone(),
                }
                .split_into(room, segments, pieces);
                i0 += 1;
                continue;
            }
            let mut lens = self.lens.clone();
            lens[0] = rows;
            pieces.push((
                Walk {
                    lens,
                    steps: self.steps.clone(),
                    bases: (0..buffers).map(|j| at(i0, j)).collect(),
                    extents: self.extents.clone(),
                },
                true,
            ));
            i0 += rows;
        }
    }

    /// True when buffer `j`'s extent at the walk's first position fits in `room` elements
    /// and in one segment of `segment` elements.
    pub fn extent_fits(&self, j: usize, room: u64, segment: u64) -> bool {
        self.extents[j] <= room && in_one_segment(self.bases[j], self.extents[j], segment)
    }

    /// The window of buffer `j` (laid out as `segments`, `elem`-byte elements) holding its
    /// part of the walk, its offset a multiple of `align`, and the element index of the walk's
    /// first position inside that window.
    pub fn window(&self, j: usize, elem: u64, align: u64, segments: Segments) -> (Window, u64) {
        let first = self.bases[j] * elem;
        let window = segments.window(first, first + self.span(j) * elem, align);
        (window, (first - window.start) / elem)
    }
}

/// The error when not even one `elem`-byte element fits in a window of `limit` bytes
/// starting at a multiple of `align`.
pub(crate) fn element_beyond_window(
    op: &'static str,
    elem: u64,
    align: u64,
    limit: u64,
) -> crate::Error {
    crate::Error::LimitExceeded {
        op,
        what: format!("one element of {elem} bytes with windows aligned to {align}"),
        limit: "max_storage_buffer_binding_size",
        needed: align + 4 + elem,
        max: limit,
    }
}

/// Units `[d0, d1)` of `unit` bytes of a tensor in `segments`, cut into runs that each lie in
/// one window of at most `limit` bytes of one buffer, starting at a multiple of `align` (a
/// multiple of `unit`): (first, end, window). Runs end on whole words but at the tensor's end.
/// All of a tensor in one buffer that fits is one window. `None` when `limit` is below
/// `align`.
pub fn unit_runs(
    d0: u64,
    d1: u64,
    unit: u64,
    segments: &Segments,
    limit: u64,
    align: u64,
) -> Option<Vec<(u64, u64, Window)>> {
    if segments.count() == 1 && segments.size <= limit {
        let whole = Window {
            segment: 0,
            offset: 0,
            size: segments.size,
            start: 0,
        };
        return Some(vec![(d0, d1, whole)]);
    }
    let segment = segments.segment;
    let mut runs = Vec::new();
    let mut p0 = d0;
    while p0 < d1 {
        let base = p0 * unit / segment * segment;
        let start = base + (p0 * unit - base) / align * align;
        let p1 = d1
            .min((base + segment) / unit)
            .min((start + limit / 4 * 4) / unit);
        if p1 <= p0 {
            return None;
        }
        runs.push((p0, p1, segments.window(p0 * unit, p1 * unit, align)));
        p0 = p1;
    }
    Some(runs)
}

/// A run of whole outer slices bound in one window of each tensor (see [`slice_runs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceRun {
    /// The first outer slice.
    pub first: u64,
    /// Slices in the run.
    pub count: u64,
    /// Each tensor's window, and the byte at which the run's first slice lies in it.
    pub windows: Vec<(Window, u64)>,
}

/// Tensors laid out `[outer, ...]` (tensor `j`'s slices `slice_bytes[j]` bytes each, in
/// buffers `segments[j]`) cut into runs of whole slices whose bytes in each tensor fit one
/// window of at most `limit` bytes of one buffer, starting at a multiple of `align`. `None`
/// when one slice cannot be placed so.
pub fn slice_runs(
    outer: u64,
    slice_bytes: &[u64],
    segments: &[Segments],
    limit: u64,
    align: u64,
) -> Option<Vec<SliceRun>> {
    let walk = Walk {
        lens: vec![outer],
        steps: vec![slice_bytes.to_vec()],
        bases: vec![0; slice_bytes.len()],
        extents: slice_bytes.to_vec(),
    };
    let room = limit.saturating_sub(align + 4);
    let sizes: Vec<u64> = segments.iter().map(|s| s.segment).collect();
    let pieces = walk.split(room, &sizes)?;
    Some(
        pieces
            .into_iter()
            .map(|piece| SliceRun {
                first: piece.bases[0] / slice_bytes[0].max(1),
                count: piece.lens.first().copied().unwrap_or(1),
                windows: (0..slice_bytes.len())
                    .map(|j| piece.window(j, 1, align, segments[j]))
                    .collect(),
            })
            .collect(),
    )
}

/// Elements of `elem` bytes that fit in a window of `limit` bytes whatever its alignment: a
/// window may have to start up to `align` bytes before its first element.
pub fn room(limit: u64, align: u64, elem: u64) -> u64 {
    limit.saturating_sub(align + 4) / elem
}

/// A seeded stream of numbers below `n` (a 64-bit linear congruential generator's high bits),
/// for the planners' tests over random layouts.
#[cfg(test)]
pub(crate) fn test_numbers(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    }
}

#[cfg(test)]
mod merge_tests {
    use super::Walk;

    #[test]
    fn merging_keeps_every_position() {
        let walk = |lens: Vec<u64>, steps: Vec<Vec<u64>>| Walk {
            bases: vec![0; steps[0].len()],
            extents: vec![1; steps[0].len()],
            lens,
            steps,
        };
        let positions = |w: &Walk| -> Vec<Vec<u64>> {
            let mut out = Vec::new();
            for i in 0..w.count() {
                let mut rest = i;
                let mut at = w.bases.clone();
                for k in (0..w.lens.len()).rev() {
                    let c = rest % w.lens[k];
                    rest /= w.lens[k];
                    for (j, a) in at.iter_mut().enumerate() {
                        *a += c * w.steps[k][j];
                    }
                }
                out.push(at);
            }
            out
        };
        // Same-shape contiguous operands: one axis.
        let same = walk(vec![2, 3, 4], vec![vec![12, 12], vec![4, 4], vec![1, 1]]);
        assert_eq!(same.merged().lens, [24]);
        assert_eq!(positions(&same), positions(&same.merged()));
        // A broadcast operand (stride 0 on the middle axis) splits the merge there.
        let bcast = walk(vec![2, 3, 4], vec![vec![12, 4], vec![4, 0], vec![1, 1]]);
        assert_eq!(bcast.merged().lens, [2, 3, 4]);
        assert_eq!(positions(&bcast), positions(&bcast.merged()));
        // Axes of length 1 go; a walk of one position keeps one axis.
        let ones = walk(vec![1, 5, 1], vec![vec![5, 5], vec![1, 1], vec![1, 1]]);
        assert_eq!(ones.merged().lens, [5]);
        let one = walk(vec![1, 1], vec![vec![1, 1], vec![1, 1]]);
        assert_eq!(one.merged().lens, [1]);
        assert_eq!(positions(&one), positions(&one.merged()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every position of `walk` as (buffer 0 index, buffer 1 index), in C order.
    fn positions(w: &Walk) -> Vec<Vec<u64>> {
        (0..w.count())
            .map(|i| {
                let mut rest = i;
                let mut at = w.bases.clone();
                for k in (0..w.lens.len()).rev() {
                    let c = rest % w.lens[k];
                    rest /= w.lens[k];
                    for (j, a) in at.iter_mut().enumerate() {
                        *a += c * w.steps[k][j];
                    }
                }
                at
            })
            .collect()
    }

    #[test]
    fn pieces_cover_the_walk_in_order_within_the_room_and_one_segment() {
        // A [5, 4, 6] walk: buffer 0 contiguous, buffer 1 broadcast along the middle axis,
        // buffer 2 transposed.
        let walk = Walk {
            lens: vec![5, 4, 6],
            steps: vec![vec![24, 6, 1], vec![6, 0, 1], vec![1, 5, 20]],
            bases: vec![0, 3, 7],
            extents: vec![1; 3],
        };
        let all = positions(&walk);
        for room in [1, 5, 6, 7, 23, 24, 40, 120, 1000] {
            for segments in [[u64::MAX; 3], [64, 16, 8], [7, 128, 33], [1, 1, 1]] {
                let pieces = walk.split(room, &segments).unwrap();
                let mut seen = Vec::new();
                for p in &pieces {
                    for j in 0..3 {
                        let (first, span) = (p.bases[j], p.span(j));
                        assert!(span <= room, "room {room}: {p:?}");
                        assert_eq!(
                            first / segments[j],
                            (first + span - 1) / segments[j],
                            "segments {segments:?}: {p:?} crosses one"
                        );
                    }
                    seen.extend(positions(p));
                }
                assert_eq!(seen, all, "room {room}, segments {segments:?}");
                if room >= 1000 && segments[0] == u64::MAX {
                    assert_eq!(pieces.len(), 1);
                }
            }
        }
        assert_eq!(walk.split(0, &[u64::MAX; 3]), None);
        // An extent larger than a segment cannot be placed.
        let rows = Walk {
            extents: vec![1, 1, 9],
            ..walk.clone()
        };
        assert_eq!(rows.split(100, &[64, 64, 8]), None);
        // ... but `pieces` keeps it, in order, as single positions where it crosses.
        let pieces = rows.pieces(100, &[64, 64, 16]);
        let alone: Vec<&Walk> = pieces.iter().filter(|p| !p.1).map(|p| &p.0).collect();
        assert!(!alone.is_empty());
        for p in &alone {
            assert!(p.lens.is_empty() && !p.extent_fits(2, 100, 16), "{p:?}");
        }
        let seen: Vec<Vec<u64>> = pieces.iter().flat_map(|p| positions(&p.0)).collect();
        assert_eq!(seen, positions(&rows));
        let empty = Walk {
            lens: vec![3, 0],
            steps: vec![vec![1], vec![1]],
            bases: vec![0],
            extents: vec![1],
        };
        assert_eq!(empty.split(1, &[1]), Some(vec![]));
    }

    #[test]
    fn windows_are_aligned_and_hold_the_piece() {
        let walk = Walk {
            lens: vec![3, 4],
            steps: vec![vec![10], vec![1]],
            bases: vec![21],
            extents: vec![1],
        };
        // 4-byte elements from byte 84 to byte 84 + 24 * 4, in windows aligned to 64.
        let one = Segments {
            segment: 1 << 20,
            size: 1 << 20,
        };
        let (window, first) = walk.window(0, 4, 64, one);
        assert_eq!((window.segment, window.offset, first), (0, 64, 5));
        assert_eq!(window.offset + window.size, (21 + 24) * 4);
        assert_eq!(room(256, 64, 4), 47);
        // In buffers of 256 bytes, a row of 3 from element 69 lies 20 bytes into the second
        // buffer; its window starts at that buffer's byte 0.
        let small = Segments {
            segment: 256,
            size: 1000,
        };
        assert_eq!(small.count(), 4);
        assert_eq!(small.len(3), 232);
        let far = Walk {
            bases: vec![64 + 5],
            lens: vec![1, 3],
            ..walk.clone()
        };
        let (window, first) = far.window(0, 4, 64, small);
        assert_eq!(
            window,
            Window {
                segment: 1,
                offset: 0,
                size: 32,
                start: 256
            }
        );
        assert_eq!(first, 5);
        // Rows of 5 elements from each position: the span grows by 4.
        let rows = Walk {
            extents: vec![5],
            ..walk.clone()
        };
        assert_eq!(rows.span(0), walk.span(0) + 4);
        let pieces = rows.split(rows.span(0) - 1, &[u64::MAX]).unwrap();
        assert!(
            pieces.iter().all(|p| p.span(0) < rows.span(0)),
            "{pieces:?}"
        );
        assert_eq!(pieces.iter().map(Walk::count).sum::<u64>(), 12);
    }

    #[test]
    fn byte_ranges_are_cut_at_buffer_ends() {
        let s = Segments {
            segment: 256,
            size: 700,
        };
        let ranges: Vec<_> = s.ranges(200, 400).collect();
        assert_eq!(ranges, [(0, 200, 56), (1, 0, 256), (2, 0, 88)]);
        assert_eq!(s.ranges(0, 0).count(), 0);
        assert_eq!(s.ranges(512, 188).collect::<Vec<_>>(), [(2, 0, 188)]);
        let empty = Segments {
            segment: 256,
            size: 4,
        };
        assert_eq!((empty.count(), empty.len(0)), (1, 4));
    }
}

/// The pieces of an element-wise dispatch over `inputs` broadcast to `out`: the storages (the
/// inputs', then the output's), their element sizes, and the walks over the output with each
/// storage's element steps (axes merged; cut into windows when a storage is too large to bind
/// whole). Element-wise kernels bind each piece's windows and dispatch it.
pub(crate) struct Broadcast<'a> {
    pub storages: Vec<&'a crate::storage::Storage>,
    pub elems: Vec<u64>,
    pub whole: bool,
    pub align: u64,
    pub walks: Vec<Walk>,
}

impl<'a> Broadcast<'a> {
    pub fn plan(
        ctx: &crate::Context,
        op: &'static str,
        inputs: &[&'a crate::Tensor],
        out: &'a crate::Tensor,
    ) -> crate::Result<Broadcast<'a>> {
        let tensors: Vec<&crate::Tensor> = inputs.iter().copied().chain([out]).collect();
        // Windows are cut in whole words: sub-word elements are counted as bytes of a word.
        let elems: Vec<u64> = tensors.iter().map(|t| t.dtype().size() as u64).collect();
        let elem = elems.iter().copied().max().unwrap_or(4);
        let storages: Vec<&crate::storage::Storage> =
            tensors.iter().map(|t| &**t.storage()).collect();
        let mut strides: Vec<Vec<u64>> = inputs
            .iter()
            .map(|t| super::elementwise::broadcast_strides(t.shape(), out.shape()))
            .collect();
        strides.push(crate::host::c_strides(out.shape()));
        let n = tensors.len();
        let walk = Walk {
            lens: out.shape().iter().map(|&d| d as u64).collect(),
            steps: (0..out.rank())
                .map(|k| strides.iter().map(|s| s[k]).collect())
                .collect(),
            bases: vec![0; n],
            extents: vec![1; n],
        }
        .merged();
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, elem)?;
        let (whole, segments) = super::operands::layout_of(&storages, limit, &elems);
        let walks = if whole {
            vec![walk]
        } else {
            // Too large to bind whole: runs of the output whose operands fit in windows.
            walk.split(room(limit, align, elem), &segments)
                .ok_or_else(|| element_beyond_window(op, elem, align, limit))?
        };
        Ok(Broadcast {
            storages,
            elems,
            whole,
            align,
            walks,
        })
    }

    /// Piece `w`'s bindings, and the element index of its first position in each storage.
    pub fn bind(&self, w: &Walk) -> (Vec<u64>, Vec<wgpu::BindingResource<'a>>) {
        super::operands::bind_windows(&self.storages, w, self.whole, self.align, &self.elems)
    }
}
