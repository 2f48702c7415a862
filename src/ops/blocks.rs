//! Validation shared by BatchToSpace-2 and SpaceToBatch-2 (docs/spec-decisions.md 11 and 12).

use crate::kernels::block_remap::BlockPlan;
use crate::{Error, Out, Recorder, Result, Tensor};

/// Records BatchToSpace or SpaceToBatch (`op`) of `data` into `out`, planned by `plan`.
pub(crate) fn record(
    rec: &mut Recorder,
    op: &'static str,
    data: &Tensor,
    plan: impl FnOnce(&[usize]) -> Result<BlockPlan>,
    out: Out,
) -> Result<Tensor> {
    rec.check_inputs(op, &[("data", data)])?;
    let plan = plan(data.shape())?;
    let out = out.tensor(rec, data.dtype(), &plan.output_shape)?;
    rec.block_remap_into(op, data, &plan, &out)?;
    Ok(out)
}

/// Checks data's rank, the lengths and ranges of block_shape and the begin/end amounts (crops or
/// pads, named by `begin_name`/`end_name`), and the batch-axis rules of decision 11. Returns the
/// values as `u64`.
pub(crate) fn check(
    op: &'static str,
    shape: &[usize],
    block: &[i64],
    (begin_name, begin): (&str, &[i64]),
    (end_name, end): (&str, &[i64]),
) -> Result<(Vec<u64>, Vec<u64>, Vec<u64>)> {
    let rank = shape.len();
    if rank < 2 {
        return Err(Error::invalid(
            op,
            "data",
            format!("data has rank {rank}; {op} needs rank 2 or more"),
        ));
    }
    super::check_rank(op, shape)?;
    for (name, values) in [("block_shape", block), (begin_name, begin), (end_name, end)] {
        if values.len() != rank {
            return Err(Error::invalid(
                op,
                name,
                format!(
                    "{name} has {} values but data has rank {rank}; block_shape, {begin_name} and {end_name} need one value per data axis",
                    values.len()
                ),
            ));
        }
    }
    if let Some((i, b)) = block.iter().enumerate().find(|(_, &b)| b < 1) {
        return Err(Error::invalid(
            op,
            "block_shape",
            format!("block_shape[{i}] is {b}; block values must be at least 1"),
        ));
    }
    if block[0] != 1 {
        return Err(Error::invalid(
            op,
            "block_shape",
            format!(
                "block_shape[0] is {}; the batch axis is never split, so it must be 1",
                block[0]
            ),
        ));
    }
    for (name, values) in [(begin_name, begin), (end_name, end)] {
        if let Some((i, v)) = values.iter().enumerate().find(|(_, &v)| v < 0) {
            return Err(Error::invalid(
                op,
                name,
                format!("{name}[{i}] is {v}; it must be non-negative"),
            ));
        }
        if values[0] != 0 {
            return Err(Error::invalid(
                op,
                name,
                format!("{name}[0] is {}; it must be 0 on the batch axis", values[0]),
            ));
        }
    }
    // Everything the kernel addresses stays below 2^32; larger values cannot describe a tensor
    // this backend can hold.
    let limit = u64::from(u32::MAX);
    for (name, values) in [("block_shape", block), (begin_name, begin), (end_name, end)] {
        if let Some((i, v)) = values.iter().enumerate().find(|(_, &v)| v as u64 >= limit) {
            return Err(Error::invalid(
                op,
                name,
                format!("{name}[{i}] is {v}; values must be below 2^32"),
            ));
        }
    }
    let as_u64 = |v: &[i64]| v.iter().map(|&x| x as u64).collect::<Vec<_>>();
    Ok((as_u64(block), as_u64(begin), as_u64(end)))
}
