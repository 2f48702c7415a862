//! Splitting work over buffers larger than one binding: a strided walk over several buffers
//! at once is cut, in C order, into walks whose footprint in every buffer fits in one window.
//! Plain data, tested without a GPU.

use crate::tensor::padded_size;

/// A walk over `lens` (outermost first) through several buffers: at coordinates `c`, buffer
/// `j` is at element `bases[j] + sum_k c_k * steps[k][j]` and uses `extents[j]` elements from
/// there (1 for an element, a whole row or matrix for MatMul). Steps are non-negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    pub lens: Vec<u64>,
    pub steps: Vec<Vec<u64>>,
    pub bases: Vec<u64>,
    pub extents: Vec<u64>,
}

impl Walk {
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
    /// at most `room` elements; `None` when `room` is 0. An empty walk gives no pieces.
    pub fn split(&self, room: u64) -> Option<Vec<Walk>> {
        let mut pieces = Vec::new();
        if self.count() == 0 {
            return Some(pieces);
        }
        self.split_into(room, &mut pieces).then_some(pieces)
    }

    fn split_into(&self, room: u64, pieces: &mut Vec<Walk>) -> bool {
        let buffers = self.bases.len();
        if (0..buffers).all(|j| self.span(j) <= room) {
            pieces.push(self.clone());
            return true;
        }
        let Some((&outer, _)) = self.lens.split_first() else {
            return false; // one element does not fit
        };
        let rows = (0..buffers)
            .map(|j| {
                let step = self.steps[0][j];
                match room.checked_sub(self.span_of(1, j)) {
                    None => 0,
                    Some(_) if step == 0 => u64::MAX,
                    Some(left) => left / step + 1,
                }
            })
            .min()
            .unwrap_or(u64::MAX)
            .min(outer);
        if rows == 0 {
            // One index of the outer axis is still too large: split each along the next axes.
            return (0..outer).all(|i| {
                Walk {
                    lens: self.lens[1..].to_vec(),
                    steps: self.steps[1..].to_vec(),
                    bases: (0..buffers)
                        .map(|j| self.bases[j] + i * self.steps[0][j])
                        .collect(),
                    extents: self.extents.clone(),
                }
                .split_into(room, pieces)
            });
        }
        let mut i0 = 0;
        while i0 < outer {
            let n = rows.min(outer - i0);
            let mut lens = self.lens.clone();
            lens[0] = n;
            pieces.push(Walk {
                lens,
                steps: self.steps.clone(),
                bases: (0..buffers)
                    .map(|j| self.bases[j] + i0 * self.steps[0][j])
                    .collect(),
                extents: self.extents.clone(),
            });
            i0 += n;
        }
        true
    }

    /// The byte window `(offset, size)` of `buffer_size` bytes holding buffer `j`'s part of the
    /// walk, its offset a multiple of `align`, and the element index of the walk's first
    /// position inside that window.
    pub fn window(&self, j: usize, elem: u64, align: u64, buffer_size: u64) -> ((u64, u64), u64) {
        let first = self.bases[j] * elem;
        let start = first / align * align;
        let end = padded_size(first + self.span(j) * elem).min(buffer_size);
        ((start, end - start), (first - start) / elem)
    }
}

/// Elements of `elem` bytes that fit in a window of `limit` bytes whatever its alignment: a
/// window may have to start up to `align` bytes before its first element.
pub fn room(limit: u64, align: u64, elem: u64) -> u64 {
    limit.saturating_sub(align + 4) / elem
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
    fn pieces_cover_the_walk_in_order_within_the_room() {
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
            let pieces = walk.split(room).unwrap();
            let mut seen = Vec::new();
            for p in &pieces {
                for j in 0..3 {
                    assert!(p.span(j) <= room, "room {room}: {p:?}");
                }
                seen.extend(positions(p));
            }
            assert_eq!(seen, all, "room {room}");
            if room >= 1000 {
                assert_eq!(pieces.len(), 1);
            }
        }
        assert_eq!(walk.split(0), None);
        let empty = Walk {
            lens: vec![3, 0],
            steps: vec![vec![1], vec![1]],
            bases: vec![0],
            extents: vec![1],
        };
        assert_eq!(empty.split(1), Some(vec![]));
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
        let ((offset, size), first) = walk.window(0, 4, 64, 1 << 20);
        assert_eq!((offset, first), (64, 5));
        assert_eq!(offset + size, (21 + 24) * 4);
        assert_eq!(room(256, 64, 4), 47);
        // Rows of 5 elements from each position: the span grows by 4.
        let rows = Walk {
            extents: vec![5],
            ..walk.clone()
        };
        assert_eq!(rows.span(0), walk.span(0) + 4);
        let pieces = rows.split(rows.span(0) - 1).unwrap();
        assert!(
            pieces.iter().all(|p| p.span(0) < rows.span(0)),
            "{pieces:?}"
        );
        assert_eq!(pieces.iter().map(Walk::count).sum::<u64>(), 12);
    }
}
