//! Decision trees walked to their leaves (`shaders/tree_walk.wgsl`): one invocation per row and
//! tree, all levels in one dispatch (rows beyond one binding in runs of whole rows, a dispatch
//! each).

use super::{grid_for, Kernel};
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
    pad: [u32; 3],
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
    /// bound whole; the rows and their leaves, in runs of whole rows where one binding does
    /// not hold them (copied into buffers of whole rows where a row would cross a buffer's
    /// end).
    pub(crate) fn tree_walk_into(
        &mut self,
        op: &'static str,
        tables: [&Tensor; 4],
        depth: u32,
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
        super::operands::check_bound_whole(
            &ctx,
            op,
            &[
                (nodes, "nodes"),
                (thresholds, "thresholds"),
                (roots, "roots"),
            ],
        )?;
        let elem = x.dtype().size() as u64;
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
        for run in runs {
            let [(x_window, x_at), (leaves_window, leaves_at)] = [run.windows[0], run.windows[1]];
            let grid = grid_for(&ctx, op, run.count * trees, wg)?;
            let params = Params {
                rows: run.count as u32,
                trees: trees as u32,
                features: features as u32,
                nodes: thresholds.numel() as u32,
                depth,
                row: grid[0] * wg,
                plane: grid[1],
                x_first: (x_at / elem) as u32,
                leaves_first: (leaves_at / 4) as u32,
                pad: [0; 3],
            };
            let bindings = [
                x.storage().bind(x_window),
                nodes.storage().bind_whole(),
                thresholds.storage().bind_whole(),
                roots.storage().bind_whole(),
                leaves.storage().bind(leaves_window),
            ];
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        }
        match out_relaid {
            Some(relaid) => self.copy_relaid_back(relaid, out),
            None => Ok(()),
        }
    }
}
