//! Decision trees walked to their leaves (`shaders/tree_walk.wgsl`): one invocation per row and
//! tree, all levels in one dispatch (rows beyond one binding in runs of whole rows, a dispatch
//! each).

use super::windows::room;
use super::{grid_for, Kernel};
use crate::storage::Window;
use crate::{DType, Error, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    trees: u32,
    features: u32,
    nodes: u32,
    depth: u32,
    row: u32,
    plane: u32,
    x_first: u32,
    leaves_first: u32,
    tree_first: u32,
    tree_stride: u32,
    node_lo: u32,
    nodes_at: u32,
    thresholds_at: u32,
    pad: [u32; 3],
}

/// Trees `[first, end)` walked by one pass: their nodes `[lo, lo + count)`, bound as `tables`
/// says.
struct TreeGroup {
    trees: std::ops::Range<u64>,
    lo: u64,
    count: u64,
    tables: GroupTables,
}

/// How a pass binds its nodes and thresholds.
enum GroupTables {
    /// The tables bound whole.
    Whole,
    /// The windows of the node and threshold tables that hold the group's nodes.
    Windows([Window; 2]),
    /// A copy of the group's nodes and thresholds, which lie across a buffer end.
    Copied,
}

/// The first and last node each tree of `nodes` (`[G, 4]`, checked) reaches from its root in
/// `roots`: the walk follows both children of every node that is not a leaf.
fn tree_spans(nodes: &[i32], roots: &[i32]) -> Vec<(u64, u64)> {
    // Stamped with the tree's number (plus one) when visited: each tree's nodes once.
    let mut seen = vec![0u32; nodes.len() / 4];
    let mut stack = Vec::new();
    let mut spans = Vec::with_capacity(roots.len());
    for (t, &root) in roots.iter().enumerate() {
        let stamp = t as u32 + 1;
        let (mut lo, mut hi) = (root as u64, root as u64);
        stack.push(root as usize);
        seen[root as usize] = stamp;
        while let Some(k) = stack.pop() {
            lo = lo.min(k as u64);
            hi = hi.max(k as u64);
            let node = &nodes[k * 4..k * 4 + 4];
            if node[3] & crate::ops::tree_walk::rule::LEAF != 0 {
                continue;
            }
            for child in [node[1] as usize, node[2] as usize] {
                if seen[child] != stamp {
                    seen[child] = stamp;
                    stack.push(child);
                }
            }
        }
        spans.push((lo, hi));
    }
    spans
}

/// The WGSL of the kernel for f32 or f64 rows; `emulate64`: f64 on u32 pairs (adapters
/// without `SHADER_F64`).
pub(crate) fn tree_walk_source(template: &str, f64: bool, emulate64: bool) -> String {
    if f64 && emulate64 {
        let compare = "    return ((rule & 1u) != 0u && sf64_lt(v, t)) || ((rule & 2u) != 0u && sf64_eq(v, t)) || ((rule & 4u) != 0u && sf64_lt(t, v)) || ((rule & 8u) != 0u && sf64_is_nan(v));";
        let emulated = [
            ("// NAN TEST", String::new()),
            ("// COMPARE", compare.to_string()),
        ];
        return super::operands::element_typed(template, DType::F64, Some(&emulated));
    }
    let (ty, nan) = if f64 {
        ("f64", super::elementwise::f64_is_nan("v"))
    } else {
        ("f32", super::elementwise::f32_is_nan("v"))
    };
    super::operands::specialize(
        template,
        &[
            ("// ELEMENT TYPE", format!("alias T = {ty};")),
            ("// NAN TEST", format!("    let nan = {nan};")),
        ],
    )
}

impl Recorder {
    /// Records the walk of every tree for every row of `x` (`[N, F]`, f32 or f64) into `out`
    /// (`[N, T]` i32): `nodes` `[G, 4]` i32, `thresholds` `[G]` of `x`'s dtype, `roots` `[T]`
    /// i32, at most `depth` steps. Shapes and dtypes are the caller's to check. The tables are
    /// bound whole where one binding holds them, else, where they are `known` on the host
    /// (nodes and roots, checked), in groups of trees whose nodes fit one window (each tree's
    /// span from [`tree_spans`]), a pass each; the rows and their leaves in runs of whole rows
    /// where one binding does not hold them (copied into buffers of whole rows where a row
    /// would cross a buffer's end).
    pub(crate) fn tree_walk_into(
        &mut self,
        op: &'static str,
        tables: [&Tensor; 4],
        depth: u32,
        known: Option<(&[i32], &[i32])>,
        out: &Tensor,
    ) -> Result<()> {
        let [x, nodes, thresholds, roots] = tables;
        let ctx = self.context().clone();
        let f64 = x.dtype() == DType::F64;
        let emulate64 = super::operands::emulates_f64(&ctx, x.dtype());
        let (rows, features) = (x.shape()[0] as u64, x.shape()[1] as u64);
        let trees = roots.numel() as u64;
        let invocations = rows * trees;
        if invocations == 0 {
            return Ok(());
        }
        if invocations > u64::from(u32::MAX) {
            return Err(super::operands::too_many(
                op,
                "the walks (rows x trees)",
                invocations,
            ));
        }
        if x.numel() as u64 >= u64::from(u32::MAX) || nodes.numel() as u64 >= u64::from(u32::MAX) {
            return Err(Error::LimitExceeded {
                op,
                what: "the rows' elements or the node table".into(),
                limit: "2^32 - 1 elements indexed by u32",
                needed: x.numel().max(nodes.numel()) as u64,
                max: u64::from(u32::MAX) - 1,
            });
        }
        super::operands::check_bound_whole(&ctx, op, &[(roots, "roots")])?;
        let elem = x.dtype().size() as u64;
        let whole = super::operands::check_bound_whole(
            &ctx,
            op,
            &[(nodes, "nodes"), (thresholds, "thresholds")],
        );
        let groups = match (whole, known) {
            (Ok(()), _) => vec![TreeGroup {
                trees: 0..trees,
                lo: 0,
                count: thresholds.numel() as u64,
                tables: GroupTables::Whole,
            }],
            (Err(_), Some((node_table, root_table))) => {
                let spans = tree_spans(node_table, root_table);
                tree_groups(&ctx, op, [nodes, thresholds], &spans)?
            }
            (Err(e), None) => return Err(e),
        };
        // Rows and leaves that would lie across buffer ends are walked in copies laid out in
        // whole rows.
        let x_relaid = self.relaid_in_whole_slices(x, features * elem, true)?;
        let out_relaid = self.relaid_in_whole_slices(out, trees * 4, false)?;
        let x = x_relaid.as_ref().unwrap_or(x);
        let leaves = out_relaid.as_ref().unwrap_or(out);
        let runs = self.slice_windows(op, rows, &[(x, features * elem), (leaves, trees * 4)])?;
        let wg = ctx.workgroup_size();
        let pipeline = ctx.pipeline(&Kernel::TreeWalk {
            workgroup_size: wg,
            f64,
            emulate64,
        })?;
        for group in &groups {
            // A group whose nodes lie across a buffer end reads a copy of them.
            let copies = match group.tables {
                GroupTables::Copied => {
                    let (lo, count) = (group.lo, group.count);
                    let max = ctx.max_buffer_size();
                    let n = self.scratch(DType::I32, &[count as usize, 4], max)?;
                    let t = self.scratch(thresholds.dtype(), &[count as usize], max)?;
                    self.copy_buffer(nodes.storage(), lo * 16, n.storage(), 0, count * 16)?;
                    let (from, bytes) = (lo * elem, count * elem);
                    self.copy_buffer(thresholds.storage(), from, t.storage(), 0, bytes)?;
                    Some([n, t])
                }
                _ => None,
            };
            let (table_bindings, nodes_at, thresholds_at) = match (&group.tables, &copies) {
                (_, Some(copies)) => (copies.each_ref().map(|c| c.storage().bind_whole()), 0, 0),
                (GroupTables::Windows([n, t]), None) => (
                    [nodes.storage().bind(*n), thresholds.storage().bind(*t)],
                    (group.lo * 16 - n.start) / 4,
                    (group.lo * elem - t.start) / elem,
                ),
                _ => ([nodes, thresholds].map(|t| t.storage().bind_whole()), 0, 0),
            };
            let group_trees = group.trees.end - group.trees.start;
            for run in &runs {
                let [(x_window, x_at), (leaves_window, leaves_at)] =
                    [run.windows[0], run.windows[1]];
                let grid = grid_for(&ctx, op, run.count * group_trees, wg)?;
                let params = Params {
                    rows: run.count as u32,
                    trees: group_trees as u32,
                    features: features as u32,
                    nodes: group.count as u32,
                    depth,
                    row: grid[0] * wg,
                    plane: grid[1],
                    x_first: (x_at / elem) as u32,
                    leaves_first: (leaves_at / 4) as u32,
                    tree_first: group.trees.start as u32,
                    tree_stride: trees as u32,
                    node_lo: group.lo as u32,
                    nodes_at: nodes_at as u32,
                    thresholds_at: thresholds_at as u32,
                    pad: [0; 3],
                };
                let [node_binding, threshold_binding] = table_bindings.clone();
                let bindings = [
                    x.storage().bind(x_window),
                    node_binding,
                    threshold_binding,
                    roots.storage().bind_whole(),
                    leaves.storage().bind(leaves_window),
                ];
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            }
        }
        match out_relaid {
            Some(relaid) => self.copy_relaid_back(relaid, out),
            None => Ok(()),
        }
    }
}

/// Trees in order in groups whose nodes (from the first any of them reaches to the last, see
/// [`tree_spans`]) fit one window of `nodes` and of `thresholds` (copied where they lie
/// across a buffer end); refused where one tree's do not fit.
fn tree_groups(
    ctx: &crate::Context,
    op: &'static str,
    [nodes, thresholds]: [&Tensor; 2],
    spans: &[(u64, u64)],
) -> Result<Vec<TreeGroup>> {
    let limit = ctx.binding_limit();
    let elems = [16, thresholds.dtype().size() as u64];
    // A node's four words are read from any word of the window.
    let aligns = [
        ctx.window_alignment(op, 4)?,
        ctx.window_alignment(op, elems[1])?,
    ];
    let segments = [nodes, thresholds].map(|t| t.storage().segments());
    // A group's nodes fit a window, and so one buffer (its copy is bound whole).
    let most = limit.min(ctx.max_buffer_size());
    let fits = |count: u64| (0..2).all(|k| count <= room(most, aligns[k], elems[k]));
    // Nodes [lo, hi] in one window of each table where they lie in one buffer of each, else
    // in a copy.
    let place = |lo: u64, hi: u64| -> GroupTables {
        let mut windows = [None; 2];
        for k in 0..2 {
            let (first, end) = (lo * elems[k], (hi + 1) * elems[k]);
            let segment = segments[k].segment;
            if first / segment != (end - 1) / segment {
                return GroupTables::Copied;
            }
            windows[k] = Some(segments[k].window(first, end, aligns[k]));
        }
        GroupTables::Windows(windows.map(|w| w.expect("placed")))
    };
    let mut groups: Vec<TreeGroup> = Vec::new();
    for (t, &(lo, hi)) in spans.iter().enumerate() {
        let t = t as u64;
        if let Some(last) = groups.last_mut() {
            let (lo, hi) = (last.lo.min(lo), (last.lo + last.count - 1).max(hi));
            if fits(hi + 1 - lo) {
                *last = TreeGroup {
                    trees: last.trees.start..t + 1,
                    lo,
                    count: hi + 1 - lo,
                    tables: place(lo, hi),
                };
                continue;
            }
        }
        let count = hi + 1 - lo;
        if !fits(count) {
            return Err(Error::LimitExceeded {
                op,
                what: format!("tree {t}'s {count} nodes, bound at once"),
                limit: if most < limit {
                    "max_buffer_size"
                } else {
                    "max_storage_buffer_binding_size"
                },
                needed: count * 16 + aligns[0] + 4,
                max: most,
            });
        }
        groups.push(TreeGroup {
            trees: t..t + 1,
            lo,
            count,
            tables: place(lo, hi),
        });
    }
    Ok(groups)
}
