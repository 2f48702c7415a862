//! GridSample's taps (`shaders/grid_taps.wgsl`): for every output position and combination
//! of per-axis taps, the row of the input (seen as `[N * S + 1, C]`, the last row zeros) that
//! the tap reads and its weight, computed from the grid in one dispatch (positions beyond one
//! binding in runs of whole positions, a dispatch each).

use super::{grid_for, Kernel};
use crate::{DType, Error, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    positions: u32,
    per_batch: u32,
    rank: u32,
    taps: u32,
    combinations: u32,
    mode: u32,
    padding: u32,
    align_corners: u32,
    batch_rows: u32,
    zero_row: u32,
    row: u32,
    plane: u32,
    first: u32,
    grid_first: u32,
    rows_first: u32,
    weights_first: u32,
    dims: [[u32; 4]; 4],
    strides: [[u32; 4]; 4],
}

/// The most spatial axes the kernel takes.
pub(crate) const MAX_AXES: usize = 16;

/// The WGSL of the kernel for f32 or f64 coordinates; `emulate64`: f64 on u32 pairs.
pub(crate) fn grid_taps_source(template: &str, f64: bool, emulate64: bool) -> String {
    let dtype = if f64 { DType::F64 } else { DType::F32 };
    if !f64 {
        return super::operands::element_typed(template, dtype, None);
    }
    if !emulate64 {
        let source = super::operands::element_typed(template, dtype, None);
        // 2^62's bits 0x43d0000000000000, the sign shifted out.
        let far =
            "fn t_far(x: T) -> bool { return (bitcast<u64>(x) << 1u) > 0x87a0000000000000lu; }";
        return super::operands::specialize(&source, &[("// FAR", far.to_string())]);
    }
    let binary =
        |name: &str, f: &str| format!("fn t_{name}(x: T, y: T) -> T {{ return {f}(x, y); }}");
    let emulated = [
        (
            "// OF F32",
            "fn t_of(x: f32) -> T { return sf64_from_f32(x); }".to_string(),
        ),
        (
            "// OF U32",
            "fn t_of_u32(x: u32) -> T { return sf64_from_u64(vec2<u32>(x, 0u)); }".to_string(),
        ),
        (
            "// OF I32",
            "fn t_of_i32(x: i32) -> T { return sf64_from_i64(vec2<u32>(bitcast<u32>(x), \
             select(0u, 0xffffffffu, x < 0))); }"
                .to_string(),
        ),
        (
            "// TO I32",
            "fn t_to_i32(x: T) -> i32 { return sf64_to_i32(x); }".to_string(),
        ),
        ("// ADD", binary("add", "sf64_add")),
        ("// SUB", binary("sub", "sf64_sub")),
        ("// MUL", binary("mul", "sf64_mul")),
        ("// DIV", binary("div", "sf64_div")),
        (
            "// FLOOR",
            "fn t_floor(x: T) -> T { return sf64_floor(x); }".to_string(),
        ),
        (
            "// ABS",
            "fn t_abs(x: T) -> T { return sf64_abs(x); }".to_string(),
        ),
        (
            "// CLAMP",
            "fn t_clamp(x: T, lo: T, hi: T) -> T { return sf64_min(sf64_max(x, lo), hi); }"
                .to_string(),
        ),
        (
            "// AT MOST",
            "fn t_at_most(x: T, y: T) -> bool { return sf64_le(x, y); }".to_string(),
        ),
        (
            "// LESS",
            "fn t_less(x: T, y: T) -> bool { return sf64_lt(x, y); }".to_string(),
        ),
        (
            "// FAR",
            "fn t_far(x: T) -> bool { let h = x.y & 0x7fffffffu; \
             return h > 0x43d00000u || (h == 0x43d00000u && x.x != 0u); }"
                .to_string(),
        ),
        (
            "// EQUAL",
            "fn t_equal(x: T, y: T) -> bool { return sf64_eq(x, y); }".to_string(),
        ),
    ];
    super::operands::element_typed(template, dtype, Some(&emulated))
}

/// What the taps are computed for.
pub(crate) struct TapsPlan<'a> {
    /// The input's spatial extents.
    pub dims: &'a [usize],
    pub batch: usize,
    /// 0 nearest, 1 linear, 2 cubic.
    pub mode: u32,
    /// 0 zeros, 1 border, 2 reflection.
    pub padding: u32,
    pub align_corners: bool,
}

impl Recorder {
    /// Records the taps of GridSample for `grid` (f32 or f64, `[N, O..., K]`): into `rows`
    /// (i32) and `weights` (the grid's dtype), each of `N x O x T^K` elements (T taps per axis
    /// for `plan.mode`).
    pub(crate) fn grid_taps_into(
        &mut self,
        op: &'static str,
        grid: &Tensor,
        plan: &TapsPlan,
        rows: &Tensor,
        weights: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let rank = plan.dims.len();
        let f64 = grid.dtype() == DType::F64;
        if rows.dtype() != DType::I32 || weights.dtype() != grid.dtype() {
            return Err(Error::Graph(format!(
                "internal: {op}'s taps are i32 rows and weights of the grid's dtype"
            )));
        }
        let emulate64 = super::operands::emulated(&ctx, grid.dtype());
        let taps = [1u32, 2, 4][plan.mode as usize];
        let combinations = (taps as u64).pow(rank as u32);
        let positions = grid.numel() as u64 / rank.max(1) as u64;
        let invocations = positions * combinations;
        if invocations == 0 {
            return Ok(());
        }
        let batch_rows: u64 = plan.dims.iter().map(|&d| d as u64).product();
        // Row indices are i32 for the gather, and the zero row is one past the last.
        let zero_row = plan.batch as u64 * batch_rows;
        if invocations > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the taps", invocations));
        }
        if zero_row >= i32::MAX as u64 || rank > MAX_AXES {
            return Err(Error::LimitExceeded {
                op,
                what: "the input's positions (N times the spatial size)".into(),
                limit: "2^31 - 1 rows indexed by i32, 16 spatial axes",
                needed: zero_row,
                max: i32::MAX as u64 - 1,
            });
        }
        if rows.numel() as u64 != invocations || weights.numel() as u64 != invocations {
            return Err(Error::Graph(format!(
                "internal: {op}'s taps need {invocations} rows and weights"
            )));
        }
        let mut dims = [[0u32; 4]; 4];
        let mut strides = [[0u32; 4]; 4];
        let mut stride = 1u64;
        for k in (0..rank).rev() {
            dims[k / 4][k % 4] = plan.dims[k] as u32;
            strides[k / 4][k % 4] = stride as u32;
            stride *= plan.dims[k] as u64;
        }
        let elem = grid.dtype().size() as u64;
        // A position's coordinates that would lie across a buffer end (3 of them) are read
        // from a copy laid out in whole positions; its taps, a power of two, never do.
        let relaid = self.relaid_in_whole_slices(grid, rank.max(1) as u64 * elem, true)?;
        let grid = relaid.as_ref().unwrap_or(grid);
        let runs = self.slice_windows(
            op,
            positions,
            &[
                (grid, rank.max(1) as u64 * elem),
                (rows, combinations * 4),
                (weights, combinations * elem),
            ],
        )?;
        let wg = ctx.workgroup_size();
        let pipeline = ctx.pipeline(&Kernel::GridTaps {
            workgroup_size: wg,
            f64,
            emulate64,
        })?;
        for run in runs {
            let [(grid_window, grid_at), (rows_window, rows_at), (weights_window, weights_at)] =
                [run.windows[0], run.windows[1], run.windows[2]];
            let grid_size = grid_for(&ctx, op, run.count * combinations, wg)?;
            let params = Params {
                positions: run.count as u32,
                per_batch: (positions / plan.batch.max(1) as u64) as u32,
                rank: rank as u32,
                taps,
                combinations: combinations as u32,
                mode: plan.mode,
                padding: plan.padding,
                align_corners: u32::from(plan.align_corners),
                batch_rows: batch_rows as u32,
                zero_row: zero_row as u32,
                row: grid_size[0] * wg,
                plane: grid_size[1],
                first: run.first as u32,
                grid_first: (grid_at / elem) as u32,
                rows_first: (rows_at / 4) as u32,
                weights_first: (weights_at / elem) as u32,
                dims,
                strides,
            };
            let bindings = [
                grid.storage().bind(grid_window),
                rows.storage().bind(rows_window),
                weights.storage().bind(weights_window),
            ];
            self.dispatch(
                op,
                &pipeline,
                bytemuck::bytes_of(&params),
                &bindings,
                grid_size,
            )?;
        }
        Ok(())
    }
}
