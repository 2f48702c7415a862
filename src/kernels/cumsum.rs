//! The CumSum kernel (`shaders/cumsum.wgsl`): running sums along one axis, one invocation per
//! line, or a few long lines as a scan in blocks, on the 32- and 64-bit types (the op casts
//! 16-bit floats to f32 around it).

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

/// The CumSum kernel's entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CumSumEntry {
    /// `main`: one invocation walks each line.
    Lines,
    /// `block_totals`: the scan in blocks' first step, each block's sum.
    BlockTotals,
    /// `scan_totals`: each block's (or chunk's) sum becomes the sum of the line before it.
    ScanTotals,
    /// `block_scan`: each block's running sums from the sum before it.
    BlockScan,
    /// `chunk_totals`: the scan in chunks' first step, each chunk's sum.
    ChunkTotals,
    /// `chunk_scan`: each chunk walked from the sum before it.
    ChunkScan,
}

impl CumSumEntry {
    /// Every entry point.
    pub const ALL: [CumSumEntry; 6] = [
        CumSumEntry::Lines,
        CumSumEntry::BlockTotals,
        CumSumEntry::ScanTotals,
        CumSumEntry::BlockScan,
        CumSumEntry::ChunkTotals,
        CumSumEntry::ChunkScan,
    ];

    /// The entry point's name in the shader.
    pub fn name(self) -> &'static str {
        match self {
            CumSumEntry::Lines => "main",
            CumSumEntry::BlockTotals => "block_totals",
            CumSumEntry::ScanTotals => "scan_totals",
            CumSumEntry::BlockScan => "block_scan",
            CumSumEntry::ChunkTotals => "chunk_totals",
            CumSumEntry::ChunkScan => "chunk_scan",
        }
    }
}

/// Invocations per workgroup of the scan in blocks (the shader's `SCAN_GROUP`).
pub const SCAN_GROUP: u64 = 256;

/// Rounds per block at most: fewer, larger blocks keep the block sums few (their scan is one
/// workgroup per line), while a block is still one workgroup's short walk.
pub const MAX_ROUNDS: u64 = 16;

/// Positions per invocation and round of the scan in blocks at most: a few neighbours each,
/// so a warp's loads stay close together.
pub const BLOCK_CHUNK: u64 = 4;

/// Chunks per line the scan in chunks aims at: enough for every core's vector lanes, few
/// enough that their sums' scan is a few rounds of one workgroup.
pub const LINE_CHUNKS: u64 = 4096;

/// Positions per chunk of the scan in chunks at least, so each invocation's walk outweighs
/// its start (and at most one dispatch's walk, 16 384).
pub const MIN_CHUNK: u64 = 64;

/// Lines that keep the adapter busy walking one each: on a CPU adapter, a few per core walked
/// side by side in its vector lanes (on lavapipe with 2 cores, 16 lines of 262 144 f32 ran at
/// 1.6 GB/s walked and 1.9 in chunks, 256 lines at 3.4 and 1.9); a GPU wants tens of
/// thousands of invocations.
pub fn busy_lines(cpu_kernels: bool) -> u64 {
    if cpu_kernels {
        super::reduce::host_cores() * 8
    } else {
        1 << 16
    }
}

/// How a pass runs its lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineScan {
    /// One invocation walks each line, 16 384 positions a dispatch.
    Walk,
    /// The scan in blocks (GPUs), three dispatches.
    Blocks {
        /// Positions per invocation and round.
        chunk: u64,
        /// Rounds of [`SCAN_GROUP`] chunks per block.
        rounds: u64,
        /// Blocks per line, a workgroup each.
        blocks: u64,
    },
    /// The scan in chunks (CPU adapters), three dispatches.
    Chunks {
        /// Positions per chunk.
        chunk: u64,
        /// Chunks per line, an invocation each.
        chunks: u64,
    },
}

impl LineScan {
    /// How `lines` lines of `count` positions run: as `forced` says (`Some(true)`: the
    /// adapter's scan, in blocks on GPUs and in chunks with the CPU kernels), else by their
    /// count and length. A walk reads each element once and writes it once, the scans read it
    /// twice; a walk is one invocation per line, the scans spread a line over many. So the
    /// scans take lines too few to keep the adapter busy ([`busy_lines`]), at least two of
    /// the scan's units long.
    pub fn of(lines: u64, count: u64, cpu_kernels: bool, forced: Option<bool>) -> LineScan {
        let parallel_lines = busy_lines(cpu_kernels);
        let unit = if cpu_kernels {
            MIN_CHUNK
        } else {
            SCAN_GROUP * BLOCK_CHUNK
        };
        let scan = forced.unwrap_or(count >= 2 * unit && lines < parallel_lines);
        match (scan, cpu_kernels) {
            (false, _) => LineScan::Walk,
            (true, true) => {
                let chunk = count
                    .div_ceil(LINE_CHUNKS)
                    .clamp(MIN_CHUNK.min(count), LOOP_ITERATIONS_PER_DISPATCH as u64);
                LineScan::Chunks {
                    chunk,
                    chunks: count.div_ceil(chunk),
                }
            }
            (true, false) => {
                let chunk = count.div_ceil(SCAN_GROUP).clamp(1, BLOCK_CHUNK);
                let round = SCAN_GROUP * chunk;
                let rounds = count.div_ceil(round).clamp(1, MAX_ROUNDS);
                LineScan::Blocks {
                    chunk,
                    rounds,
                    blocks: count.div_ceil(rounds * round),
                }
            }
        }
    }

    /// Sums kept per line between the scan's dispatches: one per block or chunk.
    pub fn totals(self) -> u64 {
        match self {
            LineScan::Walk => 0,
            LineScan::Blocks { blocks, .. } => blocks,
            LineScan::Chunks { chunks, .. } => chunks,
        }
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
    blocks: u32,
    rounds: u32,
    totals_first: u32,
    chunk: u32,
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
            let row = inner.max(1) as u64 * elem;
            let shape = [n / slice, axis_len as u64, inner.max(1) as u64];
            let refused = || Error::LimitExceeded {
                op,
                what: "one row along the axis (in one buffer), bound at once".into(),
                limit: "max_storage_buffer_binding_size",
                needed: row + align + 4,
                max: limit,
            };
            match line_passes(shape, elem, reverse, segments, limit, align) {
                Some(runs) => runs,
                None if row + align + 4 > limit => return Err(refused()),
                None => {
                    // Rows that lie across buffer ends: the sums run over copies laid out in
                    // buffers of whole rows.
                    let x_relaid = self.relaid_in_whole_slices(x, row, true)?;
                    let out_relaid = self.relaid_in_whole_slices(out, row, false)?;
                    if x_relaid.is_none() && out_relaid.is_none() {
                        return Err(refused());
                    }
                    let relaid_out = out_relaid.as_ref().unwrap_or(out);
                    self.cumsum_into(
                        x_relaid.as_ref().unwrap_or(x),
                        axis_len,
                        inner,
                        exclusive,
                        reverse,
                        product,
                        relaid_out,
                    )?;
                    if let Some(relaid) = out_relaid {
                        self.copy_relaid_back(relaid, out)?;
                    }
                    return Ok(());
                }
            }
        };
        let wg = ctx.workgroup_size();
        let kernel = |entry| Kernel::CumSum {
            dtype: x.dtype(),
            emulate64: super::operands::emulated(&ctx, x.dtype()),
            exclusive,
            reverse,
            product,
            workgroup_size: wg,
            entry,
        };
        let inner = inner.max(1) as u64;
        // Stretches carry each line's sum to the next in `aux` (a row fits a window, so a
        // binding); the scans keep their block or chunk sums after those, where they fit one
        // binding of one buffer (else the pass walks).
        let stretched = runs.iter().any(|r| r.stretch);
        let totals_first = if stretched { inner } else { 0 };
        let room = ctx.binding_limit().min(ctx.max_buffer_size()) / elem;
        let scan_of = |run: &LinePass| {
            let (lines, count) = (run.slices * inner, run.k1 - run.k0);
            match LineScan::of(lines, count, ctx.cpu_kernels(), ctx.split_lines()) {
                scan if totals_first + lines * scan.totals() > room => LineScan::Walk,
                scan => scan,
            }
        };
        let totals = runs
            .iter()
            .map(|run| run.slices * inner * scan_of(run).totals())
            .max()
            .unwrap_or(0);
        let aux = self.alloc(x.dtype(), &[(totals_first + totals).max(1) as usize])?;
        for run in &runs {
            let lines = run.slices * inner;
            let [(src, src_first), (dst, dst_first)] = run.firsts;
            let bindings = [
                x.storage().bind(src),
                out.storage().bind(dst),
                aux.storage().bind_whole(),
            ];
            let scan = scan_of(run);
            let mut params = CumSumParams {
                lines: lines as u32,
                axis_len: axis_len as u32,
                inner: inner as u32,
                start: run.k0 as u32,
                count: (run.k1 - run.k0) as u32,
                src_first,
                dst_first,
                carry: u32::from(run.stretch),
                blocks: scan.totals() as u32,
                rounds: 0,
                totals_first: totals_first as u32,
                chunk: 0,
            };
            // The scans' dispatches: entry point, invocations, workgroup size.
            let group = SCAN_GROUP as u32;
            let steps = match scan {
                LineScan::Walk => Vec::new(),
                LineScan::Blocks { chunk, rounds, .. } => {
                    (params.chunk, params.rounds) = (chunk as u32, rounds as u32);
                    let blocks = lines * scan.totals() * SCAN_GROUP;
                    vec![
                        (CumSumEntry::BlockTotals, blocks, group),
                        (CumSumEntry::ScanTotals, lines * SCAN_GROUP, group),
                        (CumSumEntry::BlockScan, blocks, group),
                    ]
                }
                LineScan::Chunks { chunk, chunks } => {
                    params.chunk = chunk as u32;
                    vec![
                        (CumSumEntry::ChunkTotals, lines * chunks, wg),
                        (CumSumEntry::ScanTotals, lines * SCAN_GROUP, group),
                        (CumSumEntry::ChunkScan, lines * chunks, wg),
                    ]
                }
            };
            for (entry, invocations, group) in steps {
                let pipeline = ctx.pipeline(&kernel(entry))?;
                let grid = grid_for(&ctx, op, invocations, group)?;
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            }
            if scan != LineScan::Walk {
                continue;
            }
            let pipeline = ctx.pipeline(&kernel(CumSumEntry::Lines))?;
            let grid = grid_for(&ctx, op, lines, wg)?;
            let mut start = run.k0 as usize;
            while start < run.k1 as usize {
                let count = (run.k1 as usize - start).min(LOOP_ITERATIONS_PER_DISPATCH);
                params.start = start as u32;
                params.count = count as u32;
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                start += count;
            }
        }
        self.release(aux);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scans cover every position of a line once (their blocks or chunks end past its
    /// last position, and one fewer would not), on lines up to 2^32 positions; each
    /// invocation's loops keep within one dispatch's walk and lavapipe's loop budget (the
    /// sums' scan takes a round of the workgroup per [`SCAN_GROUP`] sums, each round a loop
    /// of 8 steps); short lines and many lines walk.
    #[test]
    fn scans_cover_each_line_once_within_the_loop_budget() {
        let mut next = crate::kernels::windows::test_numbers(9);
        let budget = crate::kernels::INVOCATION_LOOP_BUDGET as u64;
        for i in 0..20_000 {
            let count = match i % 3 {
                0 => 1 + next(5000),
                1 => 1 + next(1 << 24),
                _ => u64::from(u32::MAX) - next(1 << 30),
            };
            let lines = 1 + next(4);
            for cpu in [false, true] {
                let scan = LineScan::of(lines, count, cpu, Some(true));
                let case = format!("{count} positions, CPU {cpu}: {scan:?}");
                let per_unit = match scan {
                    LineScan::Walk => panic!("{case}"),
                    LineScan::Blocks { chunk, rounds, .. } => {
                        assert!((1..=BLOCK_CHUNK).contains(&chunk), "{case}");
                        assert!((1..=MAX_ROUNDS).contains(&rounds), "{case}");
                        // Each round sums and then walks its chunk, and scans the workgroup.
                        assert!(rounds * (2 * chunk + 9) <= budget, "{case}");
                        rounds * SCAN_GROUP * chunk
                    }
                    LineScan::Chunks { chunk, .. } => {
                        assert!(chunk <= LOOP_ITERATIONS_PER_DISPATCH as u64, "{case}");
                        assert!(chunk >= MIN_CHUNK.min(count), "{case}");
                        chunk
                    }
                };
                let units = scan.totals();
                assert!(
                    units * per_unit >= count && (units - 1) * per_unit < count,
                    "{case}"
                );
                assert!(units.div_ceil(SCAN_GROUP) * 10 <= budget, "{case}");
            }
            // By the rule: lines of fewer positions than two units, and many lines, walk.
            for cpu in [false, true] {
                let scan = LineScan::of(lines, count, cpu, None);
                let unit = if cpu {
                    MIN_CHUNK
                } else {
                    SCAN_GROUP * BLOCK_CHUNK
                };
                assert_eq!(scan == LineScan::Walk, count < 2 * unit, "{count} {cpu}");
                assert_eq!(LineScan::of(1 << 16, count, cpu, None), LineScan::Walk);
                assert_eq!(LineScan::of(lines, count, cpu, Some(false)), LineScan::Walk);
            }
        }
    }

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
