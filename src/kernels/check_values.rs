//! A rule on values read on the GPU (`shaders/check_values.wgsl`): the graph computes a bool
//! per value, and the first false one is reported after the run (see `recorder::faults`).

use super::{grid_for, Kernel};
use crate::{DType, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CheckValuesParams {
    count: u32,
    site: u32,
    pad: [u32; 2],
}

impl Recorder {
    /// Records the check that every element of `ok` (bool) is true; the run then fails on
    /// the first false one with `op`'s error on its input `input`, whose message is
    /// `message` with `{i}` the element's position and `{v}` its value in `values` (i32 or
    /// i64, `ok`'s shape). Returns a bool scalar, true, that the check writes.
    pub(crate) fn check_values(
        &mut self,
        op: &'static str,
        input: &str,
        message: &str,
        ok: &Tensor,
        values: &Tensor,
    ) -> Result<Tensor> {
        let ctx = self.context().clone();
        super::operands::check_bound_whole(
            &ctx,
            op,
            &[(ok, "the checked values"), (values, input)],
        )?;
        let count = ok.numel() as u64;
        if ok.dtype() != DType::Bool
            || !matches!(values.dtype(), DType::I32 | DType::I64)
            || values.numel() as u64 != count
        {
            return Err(crate::Error::Graph(format!(
                "internal: {op}'s check of {input} takes a bool per i32 or i64 value, not {} {:?} for {} {:?}",
                ok.dtype(),
                ok.shape(),
                values.dtype(),
                values.shape()
            )));
        }
        if count > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, input, count));
        }
        let checked = self.alloc(DType::Bool, &[])?;
        let wg = ctx.workgroup_size();
        let kernel = Kernel::CheckValues {
            index64: values.dtype() == DType::I64,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let (site, faults) =
            self.index_checks
                .value_site(&ctx, op, input.to_string(), message.to_string())?;
        let params = CheckValuesParams {
            count: count as u32,
            site,
            pad: [0; 2],
        };
        let bindings = [
            ok.storage().bind_whole(),
            values.storage().bind_whole(),
            checked.storage().bind_whole(),
            faults.storage().bind_whole(),
        ];
        // At least one invocation, which writes the result.
        let grid = grid_for(&ctx, op, count.max(1), wg)?;
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        Ok(checked)
    }
}
