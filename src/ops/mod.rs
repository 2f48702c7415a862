//! Operators. Each op file validates its inputs and computes a plan (plain data, no GPU), and
//! records the kernel that executes the plan.

pub mod batch_to_space;
pub(crate) mod blocks;
pub mod elementwise;
pub mod indices;
pub mod layout;
pub mod matmul;
pub mod scan;
pub mod slice;
pub mod slicing;
pub mod space_to_batch;
pub mod strided_slice;

/// The largest input rank the data-movement ops accept (the kernels' uniform holds 16 axes).
pub const MAX_RANK: usize = 16;

pub(crate) fn check_rank(op: &'static str, shape: &[usize]) -> crate::Result<()> {
    if shape.len() > MAX_RANK {
        return Err(crate::Error::invalid(
            op,
            "data",
            format!(
                "data has rank {}; ranks up to {MAX_RANK} are supported",
                shape.len()
            ),
        ));
    }
    Ok(())
}
