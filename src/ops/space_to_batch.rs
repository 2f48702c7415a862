//! SpaceToBatch-2 (OpenVINO), the inverse of BatchToSpace-2: zero-pads the spatial axes, then
//! moves blocks of them into the batch axis (docs/spec-decisions.md 11 and 12).

use super::blocks;
use crate::indices::IntoIndices;
use crate::kernels::block_remap::{BlockMode, BlockPlan};
use crate::{Error, Out, Recorder, Result, Tensor};

const OP: &str = "SpaceToBatch";

/// SpaceToBatch-2's index inputs (one value per data axis each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpaceToBatch {
    /// The block's size along each axis (the batch axis' is 1).
    pub block_shape: Vec<i64>,
    /// Zeros padded before each axis.
    pub pads_begin: Vec<i64>,
    /// Zeros padded after each axis.
    pub pads_end: Vec<i64>,
}

impl SpaceToBatch {
    /// The op with these inputs (integers of any type).
    pub fn new(
        block_shape: impl IntoIndices,
        pads_begin: impl IntoIndices,
        pads_end: impl IntoIndices,
    ) -> Self {
        SpaceToBatch {
            block_shape: block_shape.into_indices(),
            pads_begin: pads_begin.into_indices(),
            pads_end: pads_end.into_indices(),
        }
    }

    /// Validates against `input_shape` and computes the plan; needs neither a GPU nor the data.
    pub fn plan(&self, input_shape: &[usize]) -> Result<BlockPlan> {
        let (block, begin, end) = blocks::check(
            OP,
            input_shape,
            &self.block_shape,
            ("pads_begin", &self.pads_begin),
            ("pads_end", &self.pads_end),
        )?;
        let mut batch = input_shape[0] as u64;
        let mut output_shape = vec![0];
        for k in 1..input_shape.len() {
            let padded = input_shape[k] as u64 + begin[k] + end[k];
            if !padded.is_multiple_of(block[k]) {
                return Err(Error::invalid(
                    OP,
                    "block_shape",
                    format!(
                        "data dimension {k} padded to {padded} ({} + {} + {}) is not divisible by block_shape[{k}] = {}",
                        input_shape[k], begin[k], end[k], block[k]
                    ),
                ));
            }
            output_shape.push((padded / block[k]) as usize);
            batch = batch.checked_mul(block[k]).ok_or_else(|| {
                Error::invalid(
                    OP,
                    "block_shape",
                    "the output batch (batch times the blocks) overflows 64 bits",
                )
            })?;
        }
        output_shape[0] = usize::try_from(batch).map_err(|_| {
            Error::invalid(OP, "block_shape", "the output batch does not fit this host")
        })?;
        Ok(BlockPlan {
            mode: BlockMode::SpaceToBatch,
            input_shape: input_shape.to_vec(),
            output_shape,
            block,
            begin,
        })
    }

    /// Runs the op on `data` and waits for validation (native).
    #[cfg(feature = "native")]
    pub fn run(&self, data: &Tensor) -> Result<Tensor> {
        data.context().run(|rec| self.record(rec, data, Out::NEW))
    }

    /// Records SpaceToBatch-2 of `data` into `out`: the one recording path of the op (the Rust API and
    /// graph nodes both come here).
    pub fn record(&self, rec: &mut Recorder, data: &Tensor, out: Out) -> Result<Tensor> {
        blocks::record(rec, OP, data, |shape| self.plan(shape), out)
    }
}

impl Recorder {
    /// Records SpaceToBatch-2 of `data` into a new tensor.
    pub fn space_to_batch(&mut self, data: &Tensor, op: &SpaceToBatch) -> Result<Tensor> {
        op.record(self, data, Out::NEW)
    }
}
