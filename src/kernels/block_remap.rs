//! The block-remap kernel family (`shaders/block_remap.wgsl`): BatchToSpace-2 and
//! SpaceToBatch-2 in one pass, each output element computing its single source element.

use super::MAX_RANK;
use crate::storage::{padded_size, Storage};
use crate::{Error, Recorder, Result, Tensor};

use super::divide::Divisor;
use super::gather::{GatherDim, GatherPlan, ITEMS};
use super::windows::{element_beyond_window, room, Walk};
use super::{grid_for, Kernel};

/// Which direction the blocks move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockMode {
    /// Batch entries interleaved into the spatial axes.
    BatchToSpace,
    /// Spatial blocks moved out into the batch axis.
    SpaceToBatch,
}

/// A validated BatchToSpace or SpaceToBatch: shapes, blocks and the begin offsets (crops or
/// pads) per axis. Computed from shapes and index values only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlan {
    /// Which op.
    pub mode: BlockMode,
    /// The shape it was planned for.
    pub input_shape: Vec<usize>,
    /// The op's output shape.
    pub output_shape: Vec<usize>,
    /// `block[0]` is 1.
    pub block: Vec<u64>,
    /// `crops_begin` (BatchToSpace) or `pads_begin` (SpaceToBatch); 0 on axis 0.
    pub begin: Vec<u64>,
}

impl BlockPlan {
    /// Elements of the output.
    pub fn output_numel(&self) -> u64 {
        self.output_shape.iter().map(|&d| d as u64).product()
    }

    /// The input element read by output element `i`, `None` for padding (the kernel's
    /// arithmetic, for tests).
    pub fn source_index(&self, i: u64) -> Option<u64> {
        let rank = self.output_shape.len();
        let strides = crate::host::c_strides(&self.input_shape);
        let inner: u64 = self.output_shape[1..].iter().map(|&d| d as u64).product();
        let o0 = i / inner;
        let mut rest = i % inner;
        match self.mode {
            BlockMode::BatchToSpace => {
                let (mut r, mut radix, mut index) = (0, 1, 0);
                for k in (1..rank).rev() {
                    let x = rest % self.output_shape[k] as u64 + self.begin[k];
                    rest /= self.output_shape[k] as u64;
                    r += (x % self.block[k]) * radix;
                    radix *= self.block[k];
                    index += (x / self.block[k]) * strides[k];
                }
                Some(index + (r * self.output_shape[0] as u64 + o0) * strides[0])
            }
            BlockMode::SpaceToBatch => {
                let batch = self.input_shape[0] as u64;
                let mut blocks = o0 / batch;
                let mut index = (o0 % batch) * strides[0];
                for k in (1..rank).rev() {
                    let padded = (rest % self.output_shape[k] as u64) * self.block[k]
                        + blocks % self.block[k];
                    rest /= self.output_shape[k] as u64;
                    blocks /= self.block[k];
                    let x = padded
                        .checked_sub(self.begin[k])
                        .filter(|&x| x < self.input_shape[k] as u64)?;
                    index += x * strides[k];
                }
                Some(index)
            }
        }
    }
}

/// Ranks up to which the kernel is compiled for its rank (unrolled loops; see `RANK` in
/// `shaders/block_remap.wgsl`); higher ranks take the general kernel.
pub const SPECIALIZED_RANKS: u32 = 8;

/// One axis of a [`CopyPiece`]: `len` positions, `src` input elements and `dst` output
/// elements apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyDim {
    /// Positions along the axis.
    pub len: u64,
    /// Input elements between positions.
    pub src: u64,
    /// Output elements between positions.
    pub dst: u64,
}

/// A strided copy: the element at coordinates `c` over `dims` (outermost first) goes from
/// input element `src_base + sum(c_k * dims[k].src)` to output element
/// `dst_base + sum(c_k * dims[k].dst)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyPiece {
    /// The input element of the first position.
    pub src_base: u64,
    /// The output element of the first position.
    pub dst_base: u64,
    /// The axes, outermost first.
    pub dims: Vec<CopyDim>,
}

impl CopyPiece {
    /// Elements copied.
    pub fn count(&self) -> u64 {
        self.dims.iter().map(|d| d.len).product()
    }
}

/// `ceil(a / b)` for a possibly negative `a` and a positive `b`.
fn div_ceil_signed(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

impl BlockPlan {
    /// The plan as strided copies, one per block offset `(b_1, ..., b_{n-1})`: for a fixed
    /// offset both ops move a box of one batch slab with plain strides on both sides. Used
    /// when the tensors are too large to bind whole (each piece can be split into windows).
    /// SpaceToBatch's padding is not covered by any piece (the output must be zeroed first).
    pub fn pieces(&self) -> Vec<CopyPiece> {
        let rank = self.input_shape.len();
        let in_strides = crate::host::c_strides(&self.input_shape);
        let out_strides = crate::host::c_strides(&self.output_shape);
        let blocks: u64 = self.block.iter().product();
        let mut pieces = Vec::new();
        for r in 0..blocks {
            // Offset b_k of block slab r; b_{n-1} varies fastest (the kernels' convention).
            let mut b = vec![0u64; rank];
            let mut rest = r;
            for k in (1..rank).rev() {
                b[k] = rest % self.block[k];
                rest /= self.block[k];
            }
            let mut piece = CopyPiece {
                src_base: 0,
                dst_base: 0,
                dims: Vec::with_capacity(rank),
            };
            let mut empty = false;
            match self.mode {
                BlockMode::BatchToSpace => {
                    // Input slab r holds batches [r * N, (r + 1) * N); its element d_k lands
                    // at output x_k = d_k * B_k + b_k - crop_k when that is inside the output.
                    let n = self.output_shape[0] as u64;
                    piece.src_base = r * n * in_strides[0];
                    piece.dims.push(CopyDim {
                        len: n,
                        src: in_strides[0],
                        dst: out_strides[0],
                    });
                    for k in 1..rank {
                        let (bk, ck) = (self.block[k] as i64, self.begin[k] as i64);
                        let lo = div_ceil_signed(ck - b[k] as i64, bk).max(0);
                        let last = self.output_shape[k] as i64 - 1 + ck - b[k] as i64;
                        let hi = (last.div_euclid(bk) + 1).min(self.input_shape[k] as i64);
                        empty |= hi <= lo;
                        let lo = lo.max(0) as u64;
                        piece.src_base += lo * in_strides[k];
                        piece.dst_base +=
                            (lo * self.block[k] + b[k] - self.begin[k]) * out_strides[k];
                        piece.dims.push(CopyDim {
                            len: (hi - lo as i64).max(0) as u64,
                            src: in_strides[k],
                            dst: self.block[k] * out_strides[k],
                        });
                    }
                }
                BlockMode::SpaceToBatch => {
                    // Output slab r holds batches [r * N, (r + 1) * N); its element o_k reads
                    // input x_k = o_k * B_k + b_k - pad_k when that is inside the input.
                    let n = self.input_shape[0] as u64;
                    piece.dst_base = r * n * out_strides[0];
                    piece.dims.push(CopyDim {
                        len: n,
                        src: in_strides[0],
                        dst: out_strides[0],
                    });
                    for k in 1..rank {
                        let (bk, pk) = (self.block[k] as i64, self.begin[k] as i64);
                        let lo = div_ceil_signed(pk - b[k] as i64, bk).max(0);
                        let last = self.input_shape[k] as i64 - 1 + pk - b[k] as i64;
                        let hi = (last.div_euclid(bk) + 1).min(self.output_shape[k] as i64);
                        empty |= hi <= lo;
                        let lo = lo.max(0) as u64;
                        piece.src_base +=
                            (lo * self.block[k] + b[k] - self.begin[k]) * in_strides[k];
                        piece.dst_base += lo * out_strides[k];
                        piece.dims.push(CopyDim {
                            len: (hi - lo as i64).max(0) as u64,
                            src: self.block[k] * in_strides[k],
                            dst: out_strides[k],
                        });
                    }
                }
            }
            if !empty && piece.count() > 0 {
                pieces.push(piece);
            }
        }
        pieces
    }

    /// The BatchToSpace that undoes this SpaceToBatch when it has no padding: its input is
    /// this output and its output this input, element for element.
    pub fn inverse(&self) -> BlockPlan {
        BlockPlan {
            mode: BlockMode::BatchToSpace,
            input_shape: self.output_shape.clone(),
            output_shape: self.input_shape.clone(),
            block: self.block.clone(),
            begin: vec![0; self.begin.len()],
        }
    }

    /// True when SpaceToBatch pads (some output elements are zeros, not copies).
    pub fn has_padding(&self) -> bool {
        self.mode == BlockMode::SpaceToBatch
            && (1..self.input_shape.len())
                .any(|k| self.output_shape[k] as u64 * self.block[k] != self.input_shape[k] as u64)
    }

    /// The same remap on 32-bit words when the trailing axes are untouched (block 1, no crop
    /// or pad) and hold a whole number of words per outer index, as in NHWC tensors blocked
    /// on H and W: those axes become one axis of words, so 1- and 2-byte elements move as
    /// words and the kernel indexes fewer axes. `None` when no trailing axis qualifies.
    pub fn as_words(&self, elem_bytes: u64) -> Option<BlockPlan> {
        let rank = self.input_shape.len();
        let mut first = rank;
        while first > 1
            && self.block[first - 1] == 1
            && self.begin[first - 1] == 0
            && self.input_shape[first - 1] == self.output_shape[first - 1]
        {
            first -= 1;
        }
        let bytes = elem_bytes * self.input_shape[first..].iter().product::<usize>() as u64;
        if first == rank || !bytes.is_multiple_of(4) {
            return None;
        }
        let words = (bytes / 4) as usize;
        let with_words = |shape: &[usize]| -> Vec<usize> {
            shape[..first].iter().copied().chain([words]).collect()
        };
        Some(BlockPlan {
            mode: self.mode,
            input_shape: with_words(&self.input_shape),
            output_shape: with_words(&self.output_shape),
            block: self.block[..first].iter().copied().chain([1]).collect(),
            begin: self.begin[..first].iter().copied().chain([0]).collect(),
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    units: u32,
    rank: u32,
    mode: u32,
    batch: u32,
    out_inner: u32,
    items: u32,
    runs: u32,
    out_shape: [u32; MAX_RANK],
    in_shape: [u32; MAX_RANK],
    in_stride: [u32; MAX_RANK],
    block: [u32; MAX_RANK],
    offset: [u32; MAX_RANK],
    /// The divisors as the kernel's `divide` takes them ([`Divisor`]).
    out_shift: [u32; MAX_RANK],
    out_magic: [u32; MAX_RANK],
    block_shift: [u32; MAX_RANK],
    block_magic: [u32; MAX_RANK],
    inner: Divisor,
    runs_by: Divisor,
    batch_by: Divisor,
    rows: u32,
    rows_by: Divisor,
    pad: [u32; 3],
}

impl Params {
    /// Every divisor the kernel may divide by is a power of two.
    fn all_powers_of_two(&self) -> bool {
        let scalars = [self.inner, self.runs_by, self.batch_by, self.rows_by];
        self.out_shift
            .iter()
            .chain(&self.block_shift)
            .chain(scalars.iter().map(|d| &d.shift))
            .all(|&s| s < 32)
    }
}

impl Recorder {
    /// Records `plan` reading `src` into `out` (same dtype and shape as the plan's output).
    pub(crate) fn block_remap_into(
        &mut self,
        op: &'static str,
        src: &Tensor,
        plan: &BlockPlan,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        if plan.output_numel() == 0 {
            return Ok(());
        }
        let dtype_bytes = src.dtype().size() as u64;
        let words = plan.as_words(dtype_bytes);
        let (plan, elem) = match &words {
            Some(p) => (p, 4),
            None => (plan, dtype_bytes),
        };
        let limit = ctx.binding_limit();
        let (src_store, out_store) = (src.storage(), out.storage());
        let bindable = |s: &Storage| s.fits_one_binding(limit);
        if !bindable(src_store) || !bindable(out_store) {
            if elem < 4 {
                // Named: the limit that keeps the tensor from being bound whole.
                let largest = src_store.size().max(out_store.size());
                let (name, max) = if largest > ctx.max_buffer_size() {
                    ("max_buffer_size", ctx.max_buffer_size())
                } else {
                    ("max_storage_buffer_binding_size", limit)
                };
                return Err(Error::LimitExceeded {
                    op,
                    what: format!(
                        "{} data of {largest} bytes in windows: 1- and 2-byte elements are split \
                         only when the axes after the last blocked one hold whole 32-bit words",
                        src.dtype(),
                    ),
                    limit: name,
                    needed: largest,
                    max,
                });
            }
            // Too large to bind whole: one strided copy per block offset, each in windows.
            if plan.has_padding() {
                self.clear(out_store, 0, padded_size(out.byte_len()))?;
            }
            for piece in plan.pieces() {
                self.copy_piece(op, elem, src_store, out_store, &piece)?;
            }
            return Ok(());
        }
        // SpaceToBatch without padding: BatchToSpace's remap from its output back to its
        // input, scattered (contiguous reads; gathering read every block-th element of a row:
        // 0.62-0.79 of the copy on an H100, where BatchToSpace reached 0.82-0.98). Sub-word
        // elements keep the gather: invocations would share output words.
        let inverse = (plan.mode == BlockMode::SpaceToBatch && elem >= 4 && !plan.has_padding())
            .then(|| plan.inverse());
        let (plan, scatter) = match &inverse {
            Some(p) => (p, true),
            None => (plan, false),
        };
        let src_size = src_store.size();
        let count = plan.output_numel();
        let too_big = |what: &str, needed: u64| Error::LimitExceeded {
            op,
            what: what.to_string(),
            limit: "2^32 elements per kernel",
            needed,
            max: u64::from(u32::MAX),
        };
        let in_numel: u64 = plan.input_shape.iter().map(|&d| d as u64).product();
        // u32::MAX itself marks padding in the kernel.
        if count >= u64::from(u32::MAX) || in_numel >= u64::from(u32::MAX) {
            return Err(too_big("the tensor's element count", count.max(in_numel)));
        }
        let elem = elem as u32;
        let rank = plan.output_shape.len();
        let last = plan.output_shape[rank - 1] as u64;
        // Runs along an untouched innermost axis (always so for the word view).
        let untouched = plan.block[rank - 1] == 1
            && plan.begin[rank - 1] == 0
            && plan.input_shape[rank - 1] == plan.output_shape[rank - 1];
        let runs = (elem == 4 && rank > 1 && untouched).then(|| last.div_ceil(u64::from(ITEMS)));
        // Rows of a multiple of 4 words: every run of 4 starts 16-byte aligned on both sides
        // (row starts are multiples of the row, and the whole buffers are bound).
        // An empty input (all padding) is one 4-byte word, too small for a vector binding.
        let vec4 = runs.is_some() && ITEMS == 4 && last.is_multiple_of(4) && src_size >= 16;
        let units = match runs {
            Some(r) => count / last * r,
            None if elem < 4 => count.div_ceil(u64::from(4 / elem)),
            None => count,
        };
        let mut params = Params {
            count: count as u32,
            units: units as u32,
            rank: rank as u32,
            mode: match plan.mode {
                BlockMode::BatchToSpace => 0,
                BlockMode::SpaceToBatch => 1,
            },
            batch: match plan.mode {
                BlockMode::BatchToSpace => plan.output_shape[0] as u32,
                BlockMode::SpaceToBatch => plan.input_shape[0] as u32,
            },
            out_inner: (count / plan.output_shape[0] as u64) as u32,
            items: if runs.is_some() { ITEMS } else { 0 },
            runs: runs.unwrap_or(0) as u32,
            out_shape: [1; MAX_RANK],
            in_shape: [1; MAX_RANK],
            in_stride: [0; MAX_RANK],
            block: [1; MAX_RANK],
            offset: [0; MAX_RANK],
            out_shift: [0; MAX_RANK],
            out_magic: [0; MAX_RANK],
            block_shift: [0; MAX_RANK],
            block_magic: [0; MAX_RANK],
            inner: Divisor::default(),
            runs_by: Divisor::default(),
            batch_by: Divisor::default(),
            rows: 0,
            rows_by: Divisor::default(),
            pad: [0; 3],
        };
        let in_strides = crate::host::c_strides(&plan.input_shape);
        // Blocks and offsets are bounded by sizes below 2^32 (checked when planned).
        for (k, &stride) in in_strides.iter().enumerate() {
            params.out_shape[k] = plan.output_shape[k] as u32;
            params.in_shape[k] = plan.input_shape[k] as u32;
            params.in_stride[k] = stride as u32;
            params.block[k] = plan.block[k] as u32;
            params.offset[k] = plan.begin[k] as u32;
            let (out, block) = (
                Divisor::new(params.out_shape[k]),
                Divisor::new(params.block[k]),
            );
            (params.out_shift[k], params.out_magic[k]) = (out.shift, out.magic);
            (params.block_shift[k], params.block_magic[k]) = (block.shift, block.magic);
        }
        params.inner = Divisor::new(params.out_inner);
        params.batch_by = Divisor::new(params.batch);
        if let Some(runs) = runs {
            params.runs_by = Divisor::new(runs as u32);
            params.rows = params.out_inner / last as u32;
            params.rows_by = Divisor::new(params.rows);
        }
        let wg = ctx.workgroup_size();
        // Several 16-byte runs per invocation with the GPU kernels (`ContextOptions::gather_unroll`).
        let unroll = if vec4 && !ctx.cpu_kernels() {
            ctx.gather_unroll()
        } else {
            1
        };
        let grid = grid_for(&ctx, op, units.div_ceil(u64::from(unroll)), wg)?;
        let pipeline = ctx.pipeline(&Kernel::BlockRemap {
            elem_bytes: elem,
            workgroup_size: wg,
            vec4,
            // BatchToSpace on lavapipe at 4-16 MiB: 2.25-2.44 GB/s general, 2.74-2.85 compiled
            // for its rank; SpaceToBatch (a padding test per axis) 1.79-2.00 against
            // 1.73-1.79, so it keeps the general kernel. Scattered without padding, it is
            // BatchToSpace's arithmetic: 2.08-2.37 GB/s (1 to 8 bytes) where it gathered at
            // 1.61-1.74.
            rank: match plan.mode {
                BlockMode::BatchToSpace if rank as u32 <= SPECIALIZED_RANKS => rank as u32,
                _ => 0,
            },
            unroll,
            scatter,
            // lavapipe, BatchToSpace at 16 MiB: see bench/divisors_lavapipe.txt.
            pow2_divisors: params.all_powers_of_two(),
        })?;
        self.dispatch(
            op,
            &pipeline,
            bytemuck::bytes_of(&params),
            &[src_store.bind_whole(), out_store.bind_whole()],
            grid,
        )
    }
}

impl Recorder {
    /// Records `piece` (of 4- or 8-byte elements) with the strided-gather kernel, split along
    /// its outer axes into dispatches whose source and output spans each fit in one aligned
    /// window of at most the binding limit, inside one buffer (see [`Walk::split`]).
    pub(crate) fn copy_piece(
        &mut self,
        op: &'static str,
        elem: u64,
        src: &Storage,
        out: &Storage,
        piece: &CopyPiece,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let limit = ctx.binding_limit();
        if piece.count() == 0 {
            return Ok(());
        }
        let align = ctx.window_alignment(op, elem)?;
        if piece.dims.len() > MAX_RANK {
            return Err(Error::invalid(
                op,
                "data",
                format!(
                    "{} axes; at most {MAX_RANK} are supported",
                    piece.dims.len()
                ),
            ));
        }
        let walk = Walk {
            lens: piece.dims.iter().map(|d| d.len).collect(),
            steps: piece.dims.iter().map(|d| vec![d.src, d.dst]).collect(),
            bases: vec![piece.src_base, piece.dst_base],
            extents: vec![1, 1],
        };
        let walks = walk
            .split(
                room(limit, align, elem),
                &[src.segments().segment / elem, out.segments().segment / elem],
            )
            .ok_or_else(|| element_beyond_window(op, elem, align, limit))?;
        for w in walks {
            let (src_window, src_first) = w.window(0, elem, align, src.segments());
            let (out_window, dst_first) = w.window(1, elem, align, out.segments());
            let plan = GatherPlan {
                count: w.count(),
                base: src_first,
                dims: w
                    .lens
                    .iter()
                    .zip(&w.steps)
                    .map(|(&len, s)| GatherDim {
                        len,
                        step: s[0] as i64,
                    })
                    .collect(),
            };
            let steps: Vec<u64> = w.steps.iter().map(|s| s[1]).collect();
            self.gather_window(
                op,
                elem as u32,
                src,
                src_window,
                &plan,
                out,
                out_window,
                Some((dst_first, &steps)),
                0,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::BlockPlan;
    use crate::reference::{batch_to_space_array, space_to_batch_array};
    use crate::{BatchToSpace, SpaceToBatch};
    use ndarray::{ArrayD, IxDyn};

    fn iota(shape: &[usize]) -> ArrayD<i64> {
        let n = shape.iter().product::<usize>() as i64;
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).collect()).unwrap()
    }

    /// Runs `pieces` on the CPU: output element -> input element (`None` where no piece
    /// writes).
    fn apply_pieces(plan: &BlockPlan) -> Vec<Option<u64>> {
        let mut out = vec![None; plan.output_numel() as usize];
        for p in plan.pieces() {
            for i in 0..p.count() {
                let (mut rest, mut src, mut dst) = (i, p.src_base, p.dst_base);
                for d in p.dims.iter().rev() {
                    src += (rest % d.len) * d.src;
                    dst += (rest % d.len) * d.dst;
                    rest /= d.len;
                }
                assert!(out[dst as usize].is_none(), "two pieces write {dst}");
                out[dst as usize] = Some(src);
            }
        }
        out
    }

    #[test]
    fn pieces_and_word_plans_move_what_the_kernel_moves() {
        let shape = [24, 3, 2, 5];
        let cases: Vec<BlockPlan> = vec![
            BatchToSpace::new([1, 2, 3, 2], [0, 1, 2, 0], [0, 2, 1, 3])
                .plan(&shape)
                .unwrap(),
            BatchToSpace::new([1, 2, 2, 1], [0, 0, 0, 0], [0, 0, 0, 0])
                .plan(&[8, 3, 2, 6])
                .unwrap(),
            BatchToSpace::new([1, 1, 1, 1], [0, 0, 1, 0], [0, 0, 1, 0])
                .plan(&shape)
                .unwrap(),
            SpaceToBatch::new([1, 2, 3, 2], [0, 1, 2, 0], [0, 2, 2, 1])
                .plan(&shape)
                .unwrap(),
            SpaceToBatch::new([1, 4, 3, 1], [0, 3, 0, 0], [0, 2, 1, 0])
                .plan(&[2, 3, 2, 6])
                .unwrap(),
            SpaceToBatch::new([1, 1], [0, 0], [0, 0])
                .plan(&[5, 7])
                .unwrap(),
        ];
        for plan in &cases {
            let want: Vec<Option<u64>> = (0..plan.output_numel())
                .map(|i| plan.source_index(i))
                .collect();
            assert_eq!(apply_pieces(plan), want, "{plan:?}");
            assert_eq!(plan.has_padding(), want.contains(&None), "{plan:?}");
        }
        // [8, 3, 2, 6] with blocks on axes 1 and 2 only: 6 two-byte elements are 3 words.
        let words = cases[1].as_words(2).unwrap();
        assert_eq!(words.input_shape, [8, 3, 2, 3]);
        assert_eq!(words.output_shape, [2, 6, 4, 3]);
        assert!(
            cases[1].as_words(1).is_none(),
            "6 bytes are not whole words"
        );
        assert!(cases[0].as_words(4).is_none(), "the last axis is blocked");
        // As words, element e of the original is byte e * 2 of the words' data: same moves.
        let per_word = |p: &BlockPlan, i: u64| p.source_index(i);
        for i in 0..words.output_numel() {
            let (row, w) = (i / 3, i % 3);
            let src = per_word(&words, i).unwrap();
            // Word w of output row `row` holds elements 2w, 2w + 1 of that row.
            assert_eq!(
                cases[1].source_index(row * 6 + 2 * w),
                Some(src / 3 * 6 + 2 * (src % 3))
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        /// Random BatchToSpace/SpaceToBatch plans: the pieces move exactly what the kernel's
        /// index arithmetic moves, each output element once, padding untouched.
        #[test]
        fn pieces_match_the_kernel_on_random_plans(
            spatial in proptest::collection::vec((1usize..5, 1i64..4, 0i64..3, 0i64..3), 1..4),
            batch in 1usize..3,
        ) {
            let mut shape = vec![batch];
            let (mut block, mut begin, mut end) = (vec![1], vec![0], vec![0]);
            for &(d, b, p0, p1) in &spatial {
                shape.push(d);
                block.push(b);
                begin.push(p0);
                // Round the padded size up to a multiple of the block.
                end.push(p1 + (b - (d as i64 + p0 + p1) % b) % b);
            }
            let s2b = SpaceToBatch::new(block.clone(), begin.clone(), end.clone()).plan(&shape).unwrap();
            let want: Vec<Option<u64>> = (0..s2b.output_numel()).map(|i| s2b.source_index(i)).collect();
            proptest::prop_assert_eq!(apply_pieces(&s2b), want);
            // BatchToSpace of S2B's output shape with crops no larger than the pads.
            let b2s = BatchToSpace::new(block, begin, end).plan(&s2b.output_shape).unwrap();
            let want: Vec<Option<u64>> = (0..b2s.output_numel()).map(|i| b2s.source_index(i)).collect();
            proptest::prop_assert_eq!(apply_pieces(&b2s), want);
        }
    }

    /// The kernel's direct index arithmetic (mirrored by `source_index`) agrees with the spec's
    /// reshape/transpose/crop formulation, without a GPU.
    #[test]
    fn source_index_matches_the_reshape_formulation() {
        let shape = [24, 3, 2, 5];
        let op = BatchToSpace::new([1, 2, 3, 2], [0, 1, 2, 0], [0, 2, 1, 3]);
        let plan = op.plan(&shape).unwrap();
        let want = batch_to_space_array(&iota(&shape), &[1, 2, 3, 2], &[0, 1, 2, 0], &[0, 2, 1, 3])
            .unwrap();
        assert_eq!(want.shape(), plan.output_shape.as_slice());
        for (i, &v) in want.iter().enumerate() {
            assert_eq!(plan.source_index(i as u64), Some(v as u64), "{i}");
        }

        let op = SpaceToBatch::new([1, 2, 3, 2], [0, 1, 2, 0], [0, 2, 2, 1]);
        let plan = op.plan(&shape).unwrap();
        let want = space_to_batch_array(
            &iota(&shape),
            -1,
            &[1, 2, 3, 2],
            &[0, 1, 2, 0],
            &[0, 2, 2, 1],
        )
        .unwrap();
        assert_eq!(want.shape(), plan.output_shape.as_slice());
        for (i, &v) in want.iter().enumerate() {
            assert_eq!(
                plan.source_index(i as u64),
                (v >= 0).then_some(v as u64),
                "{i}"
            );
        }
    }
}
