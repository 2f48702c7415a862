//! The TopK kernel (`shaders/topk.wgsl`): the K largest or smallest elements along one axis,
//! sorted, with their i64 indices; one invocation per line (the op casts 16-bit floats to f32
//! around it).

use super::operands::element_typed;
use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::{DType, Recorder, Result, Tensor};

const TOPK: &str = include_str!("../../shaders/topk.wgsl");

/// WGSL source of TopK on `dtype`; `emulate64`: i64, u64 or f64 on u32 pairs.
pub fn topk_source(dtype: DType, emulate64: bool) -> String {
    let before = match dtype {
        // NaN as the native f64 order has it (below).
        DType::F64 => "fn before(a: T, b: T) -> bool { let na = sf64_is_nan(a); let nb = sf64_is_nan(b); return select(sf64_lt(a, b) || (!na && nb), sf64_lt(b, a) || (na && !nb), LARGEST); }".to_string(),
        _ => {
            let lt = if dtype == DType::I64 { "lt_s64" } else { "lt_u64" };
            format!("fn before(a: T, b: T) -> bool {{ return select({lt}(a, b), {lt}(b, a), LARGEST); }}")
        }
    };
    let emulated = [("// BEFORE", before)];
    let source = element_typed(TOPK, dtype, emulate64.then_some(&emulated[..]));
    if emulate64 {
        return source;
    }
    let is_nan = match dtype {
        DType::F32 => super::elementwise::f32_is_nan,
        DType::F64 => super::elementwise::f64_is_nan,
        _ => return source,
    };
    // NaN is larger than every number, as onnxruntime and numpy order it: first among the
    // largest, last among the smallest (NaN tested on the bits, which drivers keep).
    let before = format!(
        "fn before(a: T, b: T) -> bool {{ let na = {}; let nb = {}; return select((a < b) || (!na && nb), (a > b) || (na && !nb), LARGEST); }}",
        is_nan("a"),
        is_nan("b")
    );
    super::operands::specialize(&source, &[("// BEFORE", before)])
}

/// The TopK kernel's entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopKEntry {
    /// `main`: one invocation walks each line.
    Walk,
    /// `chunk_tops`: the K best of each chunk of a split line, in a list of its own.
    ChunkTops,
    /// `merge_tops`: lists merged two by two.
    MergeTops,
}

impl TopKEntry {
    /// Every entry point.
    pub const ALL: [TopKEntry; 3] = [TopKEntry::Walk, TopKEntry::ChunkTops, TopKEntry::MergeTops];

    /// The entry point's name in the shader.
    pub fn name(self) -> &'static str {
        match self {
            TopKEntry::Walk => "main",
            TopKEntry::ChunkTops => "chunk_tops",
            TopKEntry::MergeTops => "merge_tops",
        }
    }
}

/// Chunks a split line is cut into at least (fewer where one dispatch's walk of a chunk
/// holds fewer positions).
pub const SPLIT_CHUNKS: u64 = 16;

/// Positions per line from which a few lines are split by default: below, one walk is
/// a dispatch or a few.
pub const SPLIT_FROM: u64 = 4096;

/// The largest K for which the CPU kernels split a few long lines (and K of a quarter of
/// the line or more: nearly a sort); other K walk.
pub const SPLIT_CPU_MOST_K: u64 = 128;

/// Loop iterations one element costs a walk keeping `k` at most, and one pop of its sort:
/// one, and a sift through the heap's levels.
pub fn heap_steps(k: u64) -> u64 {
    1 + u64::from(u64::BITS - k.leading_zeros())
}

/// Elements (or pops) one invocation keeping `k` takes in one dispatch.
fn per_dispatch(k: u64) -> u64 {
    (LOOP_ITERATIONS_PER_DISPATCH as u64 / heap_steps(k)).max(1)
}

/// The dispatches of a line of `axis_len` positions walked keeping `k`: for each, the
/// positions it walks (`start`, `count`) and the sort's pops (the roots popped before it,
/// and those it pops), within one dispatch's loop budget: the walk, then the sort from the
/// last walk's leftover budget on.
pub fn walk_plan(axis_len: u64, k: u64) -> Vec<[u64; 4]> {
    let most = per_dispatch(k);
    let pops_needed = axis_len.min(k).saturating_sub(1);
    let (mut start, mut popped) = (0, 0);
    let mut plan = Vec::new();
    while start < axis_len || popped < pops_needed {
        let count = (axis_len - start).min(most);
        let pops = if start + count == axis_len {
            (most - count).min(pops_needed - popped)
        } else {
            0
        };
        plan.push([start, count, popped, pops]);
        (start, popped) = (start + count, popped + pops);
    }
    plan
}

/// The chunk (positions) of each of `lines` lines of `axis_len` positions when TopK keeping
/// `k` splits them, or `None` where each line is walked: as `forced` says, else where the
/// lines are too few to keep the adapter busy (see [`super::cumsum::busy_lines`]) and at
/// least [`SPLIT_FROM`] long (any K on GPUs: a merge takes log2 K steps an invocation; with
/// the CPU kernels, K up to [`SPLIT_CPU_MOST_K`] or a quarter of the line). A chunk is
/// at most what one invocation keeps and sorts in a dispatch, and at most a
/// [`SPLIT_CHUNKS`]th of the line.
pub fn split_chunk(
    lines: u64,
    axis_len: u64,
    k: u64,
    cpu_kernels: bool,
    forced: Option<bool>,
) -> Option<u64> {
    // On a CPU adapter's few lanes a chunk's sort and the merges cost more than one walk's
    // insertions where K is neither small nor most of the line (lavapipe, one line of 2^20:
    // split 4x the walk keeping 1, 0.8x keeping 300, 0.6x keeping 20 000; a whole line of
    // 2^16 sorted 2.5x).
    let pays = !cpu_kernels || k <= SPLIT_CPU_MOST_K || 4 * k >= axis_len;
    let split = forced.unwrap_or(
        pays && lines < super::cumsum::busy_lines(cpu_kernels) && axis_len >= SPLIT_FROM,
    );
    let most = per_dispatch(k);
    // Its elements, then the pops of its list of min(chunk, K).
    let kept_and_sorted = if 2 * k < most { most - k } else { most / 2 };
    let chunk = kept_and_sorted.min(axis_len.div_ceil(SPLIT_CHUNKS)).max(1);
    (split && chunk < axis_len).then_some(chunk)
}

/// The merges of a line split into chunks of `chunk` positions: for each, the positions each
/// list in covers and the lists in per line (down to two).
pub fn merge_levels(axis_len: u64, chunk: u64) -> Vec<(u64, u64)> {
    let (mut span, mut lists) = (chunk, axis_len.div_ceil(chunk));
    let mut levels = Vec::new();
    while lists > 1 {
        levels.push((span, lists));
        (span, lists) = (2 * span, lists.div_ceil(2));
    }
    levels
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TopKParams {
    lines: u32,
    axis_len: u32,
    inner: u32,
    k: u32,
    start: u32,
    count: u32,
    src_first: u32,
    values_first: u32,
    indices_first: u32,
    span: u32,
    lists: u32,
    in_first: u32,
    out_first: u32,
    last: u32,
    popped: u32,
    pops: u32,
}

impl Recorder {
    /// Records the `k` best of each line of `x` (seen as `[outer, axis_len, inner]`) into
    /// `values` and `indices` (`[outer, k, inner]`, i64).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn topk_into(
        &mut self,
        x: &Tensor,
        axis_len: usize,
        inner: usize,
        k: usize,
        largest: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<()> {
        const OP: &str = "TopK";
        if values.numel() == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        for t in [x, values, indices] {
            if t.numel() as u64 > u64::from(u32::MAX) / 2 {
                return Err(super::operands::too_many(OP, "a tensor", t.numel() as u64));
            }
        }
        let elem = x.dtype().size() as u64;
        let (inner_len, axis) = (inner.max(1) as u64, axis_len.max(1) as u64);
        let outer = x.numel() as u64 / (axis * inner_len);
        // Slices that would lie across buffer ends are read and written in copies laid out in
        // whole slices.
        let x_relaid = self.relaid_in_whole_slices(x, axis * inner_len * elem, true)?;
        let values_relaid =
            self.relaid_in_whole_slices(values, k as u64 * inner_len * elem, false)?;
        let indices_relaid =
            self.relaid_in_whole_slices(indices, k as u64 * inner_len * 8, false)?;
        let x = x_relaid.as_ref().unwrap_or(x);
        let (outputs, values, indices) = (
            (values, indices),
            values_relaid.as_ref().unwrap_or(values),
            indices_relaid.as_ref().unwrap_or(indices),
        );
        let runs = self.slice_windows(
            OP,
            outer,
            &[
                (x, axis * inner_len * elem),
                (values, k as u64 * inner_len * elem),
                (indices, k as u64 * inner_len * 8),
            ],
        )?;
        let wg = ctx.workgroup_size();
        let kernel = |entry| Kernel::TopK {
            dtype: x.dtype(),
            emulate64: super::operands::emulated(&ctx, x.dtype()),
            largest,
            workgroup_size: wg,
            entry,
        };
        // A split pass's chunk and the entries its lists take at most (in two regions: a merge
        // reads one and writes the other), or `None` where it walks; a pass whose lists would
        // not fit one binding of one buffer walks too.
        let room = ctx.binding_limit().min(ctx.max_buffer_size()) / 2 / elem.max(4);
        let split_of = |run: &super::windows::SliceRun| {
            let lines = run.count * inner_len;
            let forced = ctx.split_lines();
            let chunk = split_chunk(lines, axis, k as u64, ctx.cpu_kernels(), forced)?;
            let most = merge_levels(axis, chunk)
                .iter()
                .map(|&(span, lists)| lists * span.min(k as u64))
                .max()?;
            (lines * most <= room).then_some((chunk, lines * most))
        };
        let region = runs
            .iter()
            .filter_map(|run| split_of(run).map(|(_, entries)| entries))
            .max()
            .unwrap_or(0);
        let list_len = (2 * region).max(1) as usize;
        let list_values = self.alloc(x.dtype(), &[list_len])?;
        let list_indices = self.alloc(DType::U32, &[list_len])?;
        for run in &runs {
            let lines = run.count * inner_len;
            let grid = grid_for(&ctx, OP, lines, wg)?;
            let [(src, src_at), (kept, kept_at), (picked, picked_at)] =
                [run.windows[0], run.windows[1], run.windows[2]];
            let bindings = [
                x.storage().bind(src),
                values.storage().bind(kept),
                indices.storage().bind(picked),
                list_values.storage().bind_whole(),
                list_indices.storage().bind_whole(),
            ];
            let mut params = TopKParams {
                lines: lines as u32,
                axis_len: axis_len as u32,
                inner: inner.max(1) as u32,
                k: k as u32,
                start: 0,
                count: 0,
                src_first: (src_at / elem) as u32,
                values_first: (kept_at / elem) as u32,
                indices_first: (picked_at / 8) as u32,
                span: 0,
                lists: 0,
                in_first: 0,
                out_first: 0,
                last: 0,
                popped: 0,
                pops: 0,
            };
            if let Some((chunk, _)) = split_of(run) {
                // Each chunk's list into the first region, then the merges from one region
                // to the other, the last into the outputs.
                let lists = axis.div_ceil(chunk);
                (params.span, params.lists) = (chunk as u32, lists as u32);
                let pipeline = ctx.pipeline(&kernel(TopKEntry::ChunkTops))?;
                let grid = grid_for(&ctx, OP, lines * lists, wg)?;
                self.dispatch(OP, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                let pipeline = ctx.pipeline(&kernel(TopKEntry::MergeTops))?;
                let levels = merge_levels(axis, chunk);
                for (level, &(span, lists)) in levels.iter().enumerate() {
                    let from = (level % 2) as u64 * region;
                    (params.span, params.lists) = (span as u32, lists as u32);
                    params.in_first = from as u32;
                    params.out_first = (region - from) as u32;
                    params.last = u32::from(level + 1 == levels.len());
                    // An invocation per slot of each merged list.
                    let slots = lists.div_ceil(2) * (2 * span).min(k as u64);
                    let grid = grid_for(&ctx, OP, lines * slots, wg)?;
                    self.dispatch(OP, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                }
                continue;
            }
            let pipeline = ctx.pipeline(&kernel(TopKEntry::Walk))?;
            for [start, count, popped, pops] in walk_plan(axis, k as u64) {
                [params.start, params.count] = [start as u32, count as u32];
                [params.popped, params.pops] = [popped as u32, pops as u32];
                self.dispatch(OP, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            }
        }
        self.release(list_values);
        self.release(list_indices);
        if let Some(relaid) = values_relaid {
            self.copy_relaid_back(relaid, outputs.0)?;
        }
        if let Some(relaid) = indices_relaid {
            self.copy_relaid_back(relaid, outputs.1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A split line's chunks cover it once, each kept and sorted within one dispatch's loop
    /// budget; the merges halve the lists down to one; short lines, a chunk that would be the
    /// whole line, many lines, and K beyond a dispatch's loop budget (split too: a merge takes
    /// log2 K steps an invocation).
    #[test]
    fn split_lines_cover_each_line_and_merge_down_to_one() {
        let budget = LOOP_ITERATIONS_PER_DISPATCH as u64;
        let mut next = crate::kernels::windows::test_numbers(13);
        for _ in 0..20_000 {
            let short = next(2) == 0;
            let len = 2 + next(if short { 300 } else { 1 << 30 });
            let k = 1 + next(len.min(if short { 300 } else { 40_000 }));
            for cpu in [false, true] {
                let case = format!("{len} positions, K {k}, CPU {cpu}");
                let Some(chunk) = split_chunk(1, len, k, cpu, Some(true)) else {
                    let fits = budget / heap_steps(k) / 2;
                    assert!(fits.min(len.div_ceil(SPLIT_CHUNKS)) >= len, "{case}");
                    continue;
                };
                let sort = chunk.min(k) - 1;
                assert!(chunk >= 1 && chunk < len, "{case}");
                assert!((chunk + sort) * heap_steps(k) <= budget, "{case}");
                assert!(chunk <= len.div_ceil(SPLIT_CHUNKS), "{case}");
                let levels = merge_levels(len, chunk);
                let mut lists = len.div_ceil(chunk);
                let mut span = chunk;
                for &(s, l) in &levels {
                    assert_eq!((s, l), (span, lists), "{case}");
                    assert!(l >= 2 && (l - 1) * s < len && l * s >= len, "{case}");
                    (span, lists) = (2 * span, lists.div_ceil(2));
                }
                assert_eq!(lists, 1, "{case}");
                let by_rule = split_chunk(1, len, k, cpu, None);
                let pays = !cpu || k <= SPLIT_CPU_MOST_K || 4 * k >= len;
                assert_eq!(by_rule.is_some(), pays && len >= SPLIT_FROM, "{case}");
                assert_eq!(split_chunk(1 << 16, len, k, cpu, None), None, "{case}");
                assert_eq!(split_chunk(1, len, k, cpu, Some(false)), None, "{case}");
            }
        }
    }

    /// A walk's dispatches cover the line once, in order, then pop all but one of the K kept
    /// (a sorted heap of one is in place), each dispatch within the loop budget; the sort
    /// starts in the last walk's dispatch, and no dispatch is empty.
    #[test]
    fn walks_keep_then_sort_within_the_loop_budget() {
        let budget = LOOP_ITERATIONS_PER_DISPATCH as u64;
        let mut next = crate::kernels::windows::test_numbers(17);
        for _ in 0..20_000 {
            let short = next(2) == 0;
            let len = 1 + next(if short { 300 } else { 1 << 20 });
            let k = 1 + next(len);
            let case = format!("{len} positions, K {k}");
            let plan = walk_plan(len, k);
            let (mut start, mut popped) = (0, 0);
            for (d, &[s, count, p, pops]) in plan.iter().enumerate() {
                assert_eq!((s, p), (start, popped), "{case}");
                assert!(count + pops >= 1, "{case}");
                assert!((count + pops) * heap_steps(k) <= budget, "{case}");
                assert!(pops == 0 || s + count == len, "{case}");
                if d + 1 < plan.len() {
                    // Full dispatches but for the last: as few as the budget allows.
                    assert_eq!(count + pops, budget / heap_steps(k), "{case}");
                }
                (start, popped) = (s + count, p + pops);
            }
            assert_eq!((start, popped), (len, len.min(k) - 1), "{case}");
        }
        assert_eq!(walk_plan(70_001, 1).len(), 9);
        assert_eq!(heap_steps(1), 2);
        assert_eq!(heap_steps(50), 7);
    }
}
