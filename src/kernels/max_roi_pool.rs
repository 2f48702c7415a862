//! MaxRoiPool's maxima (`shaders/max_roi_pool.wgsl`): one invocation per output element (per
//! word of 2-byte elements) folds its window, read from a table made on the host; windows of
//! more elements than one invocation's loop may take fold over several dispatches.

use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::{DType, Error, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    outputs: u32,
    channels: u32,
    height: u32,
    width: u32,
    pooled_h: u32,
    pooled_w: u32,
    row: u32,
    plane: u32,
    first: u32,
    count: u32,
    _pad: [u32; 2],
}

impl Recorder {
    /// Records the maxima of `x` `[N, C, H, W]` over the window table `windows` (u32, see
    /// `ops::roi_pool::roi_pool_windows`) into `out` `[R, C, pooled_h, pooled_w]` of x's dtype,
    /// the largest window holding `largest` elements. Shapes and dtypes are the caller's to
    /// check.
    pub(crate) fn max_roi_pool_into(
        &mut self,
        op: &'static str,
        x: &Tensor,
        (windows, largest): (&Tensor, u64),
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let elem_bytes = x.dtype().size() as u64;
        let outputs = out.numel() as u64;
        // Element indices (and 8-byte elements' word indices) are u32 in the kernel.
        if x.numel() as u64 * elem_bytes.max(4) / 4 > u64::from(u32::MAX) {
            return Err(Error::LimitExceeded {
                op,
                what: "X's words".into(),
                limit: "2^32 - 1 words indexed by u32",
                needed: x.numel() as u64 * elem_bytes.max(4) / 4,
                max: u64::from(u32::MAX),
            });
        }
        if outputs * elem_bytes.max(4) / 4 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the output's words", outputs));
        }
        super::operands::check_bound_whole(
            &ctx,
            op,
            &[(x, "X"), (windows, "the window table"), (out, "the output")],
        )?;
        let invocations = if elem_bytes == 2 {
            outputs.div_ceil(2)
        } else {
            outputs
        };
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, invocations, wg)?;
        let shape = out.shape();
        let mut params = Params {
            outputs: outputs as u32,
            channels: shape[1] as u32,
            height: x.shape()[2] as u32,
            width: x.shape()[3] as u32,
            pooled_h: shape[2] as u32,
            pooled_w: shape[3] as u32,
            row: grid[0] * wg,
            plane: grid[1],
            first: 0,
            count: 0,
            _pad: [0; 2],
        };
        let pipeline = ctx.pipeline(&Kernel::MaxRoiPool {
            workgroup_size: wg,
            elem_bytes: elem_bytes as u32,
            bf16: x.dtype() == DType::BF16,
        })?;
        let bindings = [
            x.storage().bind_whole(),
            windows.storage().bind_whole(),
            out.storage().bind_whole(),
        ];
        // Window elements per dispatch: one invocation folds that many (twice for 2-byte
        // elements, two outputs each) in its one loop. lavapipe stops an invocation's loops
        // past its budget (see LOOP_ITERATIONS_PER_DISPATCH): a 300 x 300 window in one
        // dispatch gave the maximum of its first rows.
        let per_dispatch =
            LOOP_ITERATIONS_PER_DISPATCH as u64 / if elem_bytes == 2 { 2 } else { 1 };
        params.count = per_dispatch as u32;
        let mut first = 0u64;
        loop {
            params.first = first as u32;
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            first += per_dispatch;
            if first >= largest {
                return Ok(());
            }
        }
    }
}
