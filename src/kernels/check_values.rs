//! A rule on values read on the GPU (`shaders/check_values.wgsl`): each value in a range or
//! one of a list, both known while planning; the first one that breaks it is reported after
//! the run (see `recorder::faults`).

use super::{grid_for, Kernel};
use crate::{DType, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CheckValuesParams {
    count: u32,
    site: u32,
    allowed_count: u32,
    pad: u32,
    low: [u32; 2],
    high: [u32; 2],
}

/// An i64 as the kernel reads it: (low word, high word).
fn words(v: i64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

/// What `Recorder::check_values` checks: the values of `op`'s input `input` must lie in
/// `low..=high` or be one of `allowed` (i64, on the GPU); `message` is the error of one that
/// does not, with `{i}` its position and `{v}` its value.
pub(crate) struct ValueRule<'a> {
    pub op: &'static str,
    pub input: &'a str,
    pub message: &'a str,
    pub low: i64,
    pub high: i64,
    pub allowed: Option<&'a Tensor>,
}

impl Recorder {
    /// Records the check of `rule` on `values` (i32 or i64). Returns a bool scalar, true,
    /// that the check writes.
    pub(crate) fn check_values(&mut self, rule: &ValueRule<'_>, values: &Tensor) -> Result<Tensor> {
        let ctx = self.context().clone();
        let op = rule.op;
        let mut operands = vec![(values, rule.input)];
        operands.extend(rule.allowed.map(|a| (a, "the kept values")));
        super::operands::check_bound_whole(&ctx, op, &operands)?;
        if !matches!(values.dtype(), DType::I32 | DType::I64)
            || rule.allowed.is_some_and(|a| a.dtype() != DType::I64)
        {
            return Err(crate::Error::Graph(format!(
                "internal: {op}'s check of {} takes i32 or i64 values and i64 kept values, not {}",
                rule.input,
                values.dtype()
            )));
        }
        let count = values.numel() as u64;
        let allowed_count = rule.allowed.map_or(0, |a| a.numel() as u64);
        if count.max(allowed_count) > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, rule.input, count));
        }
        let checked = self.alloc(DType::Bool, &[])?;
        let wg = ctx.workgroup_size();
        let kernel = Kernel::CheckValues {
            index64: values.dtype() == DType::I64,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let (site, faults) = self.index_checks.value_site(
            &ctx,
            op,
            rule.input.to_string(),
            rule.message.to_string(),
        )?;
        let params = CheckValuesParams {
            count: count as u32,
            site,
            allowed_count: allowed_count as u32,
            pad: 0,
            low: words(rule.low),
            high: words(rule.high),
        };
        // Without a list the kernel reads none of it: the values stand in for its binding.
        let bindings = [
            rule.allowed.unwrap_or(values).storage().bind_whole(),
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
