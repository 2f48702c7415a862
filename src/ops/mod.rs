//! Operators and their Rust API. Each op file validates its inputs, computes a plan (plain
//! data, no GPU) and has one recording function taking an [`crate::Out`], which both the Rust
//! API and graph nodes call. Uses kernels; never names graphs.

pub mod activation;
pub mod batch_to_space;
pub(crate) mod blocks;
pub mod col2im;
pub mod compose;
pub mod conv;
pub mod coupling;
pub mod det;
pub mod dft;
pub mod einsum;
pub mod elementwise;
pub mod fft;
pub mod gather_nd;
pub mod grid_sample;
pub mod image_decoder;
mod jpeg;
#[cfg(feature = "image-decoder")]
mod jpeg2000;
pub mod layout;
pub mod linear_attention;
pub mod matmul;
pub mod normalization;
#[cfg(feature = "image-decoder")]
mod pnm;
pub mod random;
pub mod reduce;
pub mod resize;
pub mod roi_pool;
pub mod scatter;
pub mod select;
pub mod signal;
pub mod slice;
pub mod slicing;
pub mod space_to_batch;
pub mod strided_slice;
pub mod tree_walk;
pub mod window;

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

/// `axes` (negative ones counted from the end; every axis when `None`) as distinct axes of a
/// rank-`rank` tensor, or an error naming `op`'s `axes`.
pub(crate) fn distinct_axes(
    op: &'static str,
    rank: usize,
    axes: Option<&[i64]>,
) -> crate::Result<Vec<usize>> {
    let Some(axes) = axes else {
        return Ok((0..rank).collect());
    };
    let mut seen = vec![false; rank];
    axes.iter()
        .map(|&a| {
            let k = if a < 0 { a + rank as i64 } else { a };
            if !(0..rank as i64).contains(&k) || std::mem::replace(&mut seen[k as usize], true) {
                return Err(crate::Error::invalid(
                    op,
                    "axes",
                    format!(
                        "axes {axes:?}: axis {a} is out of range for rank {rank} or given twice"
                    ),
                ));
            }
            Ok(k as usize)
        })
        .collect()
}

impl crate::Recorder {
    /// A tensor of `dtype` and `shape` holding `values` (converted as Cast converts): scalars,
    /// weights and divisors the host computes for an op.
    pub(crate) fn host_values(
        &mut self,
        dtype: crate::DType,
        shape: &[usize],
        values: &[f64],
    ) -> crate::Result<crate::Tensor> {
        let v = crate::HostTensor::from_vec(shape.to_vec(), values)?;
        self.upload(&crate::reference::cast_host(&v, dtype)?)
    }

    /// Constants of `dtype`, each a `(shape, values)` of what `make` gives, named by `what`
    /// and `params` (the numbers that decide their values): from the context's cache when an
    /// earlier recording built them, else built, uploaded and kept there while they fit (see
    /// `gpu::ConstantCache`). Ops release them like any tensor; the cache's handle keeps them.
    pub(crate) fn cached_values(
        &mut self,
        what: &'static str,
        dtype: crate::DType,
        params: &[u64],
        make: impl FnOnce() -> crate::Result<Vec<(Vec<usize>, Vec<f64>)>>,
    ) -> crate::Result<Vec<crate::Tensor>> {
        let key = crate::gpu::ConstantKey {
            what,
            dtype,
            params: params.to_vec(),
        };
        let ctx = self.context().clone();
        if let Some(tensors) = ctx.cached_constants(&key) {
            return Ok(tensors);
        }
        let tensors = make()?
            .iter()
            .map(|(shape, values)| self.host_values(dtype, shape, values))
            .collect::<crate::Result<Vec<_>>>()?;
        ctx.keep_constants(key, &tensors);
        Ok(tensors)
    }
}

/// Checks that `indices` are i32 or i64, the index types of the ops that take index tensors.
pub(crate) fn check_index_dtype(op: &'static str, indices: &crate::Tensor) -> crate::Result<()> {
    if matches!(indices.dtype(), crate::DType::I32 | crate::DType::I64) {
        return Ok(());
    }
    Err(crate::Error::invalid(
        op,
        "indices",
        format!("indices is {}; {op} takes i32 or i64", indices.dtype()),
    ))
}

/// GatherElements' and ScatterElements' rules on their shapes: `indices` of `data`'s rank
/// (1 or more), `axis` in `[-rank, rank)`, and off the axis no longer than `data`. Returns the
/// axis counted from 0.
pub(crate) fn elements_axis(
    op: &'static str,
    data: &[usize],
    indices: &[usize],
    axis: i64,
) -> crate::Result<usize> {
    let rank = data.len() as i64;
    if indices.len() != data.len() {
        return Err(crate::Error::invalid(
            op,
            "indices",
            format!(
                "indices has rank {} but data has rank {rank}; they must be equal",
                indices.len()
            ),
        ));
    }
    if rank == 0 || axis < -rank || axis >= rank {
        return Err(crate::Error::invalid(
            op,
            "axis",
            format!("axis {axis} is out of range for data of rank {rank}"),
        ));
    }
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    if let Some(k) = (0..data.len()).find(|&k| k != axis && indices[k] > data[k]) {
        return Err(crate::Error::invalid(
            op,
            "indices",
            format!(
                "indices has {} along axis {k} but data only {}",
                indices[k], data[k]
            ),
        ));
    }
    Ok(axis)
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
    rec: &mut crate::Recorder,
    dtype: crate::DType,
    value: f64,
) -> crate::Result<crate::Tensor> {
    let host = if dtype == crate::DType::F64 {
        crate::HostTensor::from_vec(vec![], &[value])?
    } else {
        crate::HostTensor::from_vec(vec![], &[value as f32])?
    };
    rec.upload(&host)
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
