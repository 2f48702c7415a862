//! Operators and their Rust API. Each op file validates its inputs, computes a plan (plain
//! data, no GPU) and has one recording function taking an [`crate::Out`], which both the Rust
//! API and graph nodes call. Uses kernels; never names graphs.

pub mod activation;
pub mod batch_to_space;
pub(crate) mod blocks;
pub mod compose;
pub mod conv;
pub mod elementwise;
pub mod layout;
pub mod linear_attention;
pub mod matmul;
pub mod normalization;
pub mod reduce;
pub mod scatter;
pub mod slice;
pub mod slicing;
pub mod space_to_batch;
pub mod strided_slice;

pub use crate::indices;
pub use crate::kernels::MAX_RANK;

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

/// Numpy broadcasting of two shapes.
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> crate::Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], k: usize| {
        if k + s.len() >= rank {
            s[k + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|k| match (dim(a, k), dim(b, k)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err(crate::Error::invalid(
                op,
                "B",
                format!("shapes {a:?} and {b:?} do not broadcast: axis {k} has sizes {x} and {y}"),
            )),
        })
        .collect()
}

/// A scalar tensor of `value` in `dtype` (f32 or f64): an attribute or constant that an
/// element-wise program reads as an operand.
pub(crate) fn scalar_tensor(
    ctx: &crate::Context,
    dtype: crate::DType,
    value: f64,
) -> crate::Result<crate::Tensor> {
    let host = if dtype == crate::DType::F64 {
        crate::HostTensor::from_vec(vec![], &[value])?
    } else {
        crate::HostTensor::from_vec(vec![], &[value as f32])?
    };
    crate::Tensor::from_host(ctx, &host)
}

/// Argument `arg` (of `from`) of program `p` in the compute type `c`: a Cast step where the
/// types differ.
pub(crate) fn widened(
    p: &mut crate::kernels::program::Program,
    arg: crate::kernels::program::Arg,
    from: crate::DType,
    c: crate::DType,
) -> crate::Result<crate::kernels::program::Arg> {
    if from == c {
        return Ok(arg);
    }
    p.push("Cast", vec![arg], c)
        .ok_or_else(|| crate::Error::Graph(format!("internal: no Cast from {from} to {c}")))
}
