//! Det (ONNX-22): the determinant of each square matrix in the last two axes.

use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "Det";

/// The largest matrix side: one invocation eliminates a whole matrix (n^3 / 3 steps) over
/// dispatches of at most n^2 steps for each column (16 384 at this side; see
/// `kernels::LOOP_ITERATIONS_PER_DISPATCH`).
pub const MAX_SIDE: usize = 128;

/// The output's shape (X's but the last two axes) after checking X (shared with the
/// interpreter): a float type, rank at least 2, square matrices of at most [`MAX_SIDE`].
pub fn det_shape(dtype: DType, shape: &[usize]) -> Result<Vec<usize>> {
    if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(Error::invalid(
            OP,
            "X",
            format!("X is {dtype}; Det takes f32, f16, bf16 or f64 matrices"),
        ));
    }
    let r = shape.len();
    if r < 2 || shape[r - 1] != shape[r - 2] {
        return Err(Error::invalid(
            OP,
            "X",
            format!("X has shape {shape:?}; Det takes square matrices in its last two axes"),
        ));
    }
    if shape[r - 1] > MAX_SIDE {
        return Err(Error::LimitExceeded {
            op: OP,
            what: "the matrices' side".into(),
            limit: "one invocation per matrix (Det::MAX_SIDE)",
            needed: shape[r - 1] as u64,
            max: MAX_SIDE as u64,
        });
    }
    Ok(shape[..r - 2].to_vec())
}

impl Recorder {
    /// Records Det into `out`: the determinant of each matrix of `x` (`[..., n, n]`), in
    /// x's dtype; f16 and bf16 are computed in f32 and rounded once. A matrix of side 0 has
    /// determinant 1.
    pub fn det_to(&mut self, x: &Tensor, out: Out) -> Result<Tensor> {
        self.check_inputs(OP, &[("X", x)])?;
        let shape = det_shape(x.dtype(), x.shape())?;
        let n = x.shape()[x.rank() - 1];
        let wide = if x.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        if n == 0 {
            let ones =
                crate::HostTensor::from_vec(shape.clone(), &vec![1.0f32; shape.iter().product()])?;
            let ones = self.upload(&ones)?;
            return self.cast_to(&ones, x.dtype(), out);
        }
        // The kernel eliminates in place: it works on a copy (a widened one for f16, bf16).
        let work = if x.dtype() == wide {
            let copy = self.alloc(wide, x.shape())?;
            let bytes = crate::storage::padded_size(x.byte_len());
            self.copy(x.storage(), 0, copy.storage(), 0, bytes)?;
            copy
        } else {
            self.cast(x, wide)?
        };
        let result = if x.dtype() == wide {
            out.tensor(self, wide, &shape)?
        } else {
            self.alloc(wide, &shape)?
        };
        self.det_into(OP, &work, n, &result)?;
        self.release(work);
        if x.dtype() == wide {
            Ok(result)
        } else {
            let narrowed = self.cast_to(&result, x.dtype(), out)?;
            self.release(result);
            Ok(narrowed)
        }
    }
}
