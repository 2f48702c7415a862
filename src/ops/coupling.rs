//! PairwiseCoupling on the GPU: class probabilities from pairwise ones (`reference::coupling`
//! is the same iteration on the host), one invocation per row, so that an SVM's probability
//! estimates need no read-back and run in Scan bodies and the browser.

use crate::reference::coupling::{coupling_classes, max_sweeps};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "PairwiseCoupling";

/// The most classes the GPU couples: with no read-back, every row runs all max(100, K) sweeps
/// of about 2 K^2 steps, in dispatches of bounded length (260 dispatches at this many; at the
/// host's limit of 1000 classes it would be 125 000). Past it the host couples, where it can
/// read the pairs back.
pub const GPU_MAX_CLASSES: usize = 128;

impl Recorder {
    /// Records PairwiseCoupling: `pairs` `[N, K (K - 1) / 2]` f32, the probability that class
    /// i beats class j for each pair i < j in the order (0, 1), (0, 2), ..., (1, 2), ...; gives
    /// the class probabilities `[N, K]` f32, at most [`GPU_MAX_CLASSES`] classes.
    pub fn pairwise_coupling_to(&mut self, pairs: &Tensor, out: Out) -> Result<Tensor> {
        self.check_inputs(OP, &[("pairs", pairs)])?;
        let k = coupling_classes(pairs.dtype(), pairs.shape())?;
        if k > GPU_MAX_CLASSES {
            return Err(Error::LimitExceeded {
                op: OP,
                what: "classes coupled on the GPU".into(),
                limit: "every sweep run without a read-back (ops::coupling::GPU_MAX_CLASSES)",
                needed: k as u64,
                max: GPU_MAX_CLASSES as u64,
            });
        }
        let rows = pairs.shape()[0];
        let probabilities = out.tensor(self, DType::F32, &[rows, k])?;
        if rows == 0 {
            return Ok(probabilities);
        }
        let state = self.alloc(
            DType::F32,
            &[rows, crate::kernels::coupling::state_words(k)],
        )?;
        self.pairwise_coupling_into(OP, pairs, k, max_sweeps(k), &state, &probabilities)?;
        self.release(state);
        Ok(probabilities)
    }
}
