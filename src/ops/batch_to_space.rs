//! BatchToSpace-2 (OpenVINO): moves blocks of the batch axis into the spatial axes, then crops.
//! Decisions 11 and 12 of docs/spec-decisions.md settle the batch axis and the crop limits.

use super::blocks;
use crate::indices::IntoIndices;
use crate::kernels::block_remap::{BlockMode, BlockPlan};
use crate::{Error, Out, Recorder, Result, Tensor};

const OP: &str = "BatchToSpace";

/// BatchToSpace-2's index inputs (one value per data axis each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchToSpace {
    /// The block's size along each axis (the batch axis' is 1).
    pub block_shape: Vec<i64>,
    /// Elements cropped from the start of each axis of the result.
    pub crops_begin: Vec<i64>,
    /// Elements cropped from the end of each axis of the result.
    pub crops_end: Vec<i64>,
}

impl BatchToSpace {
    /// The op with these inputs (integers of any type).
    pub fn new(
        block_shape: impl IntoIndices,
        crops_begin: impl IntoIndices,
        crops_end: impl IntoIndices,
    ) -> Self {
        BatchToSpace {
            block_shape: block_shape.into_indices(),
            crops_begin: crops_begin.into_indices(),
            crops_end: crops_end.into_indices(),
        }
    }

    /// Validates against `input_shape` and computes the plan; needs neither a GPU nor the data.
    pub fn plan(&self, input_shape: &[usize]) -> Result<BlockPlan> {
        let (block, begin, end) = blocks::check(
            OP,
            input_shape,
            &self.block_shape,
            ("crops_begin", &self.crops_begin),
            ("crops_end", &self.crops_end),
        )?;
        let product = block.iter().try_fold(1u64, |p, &b| p.checked_mul(b));
        let batch = input_shape[0] as u64;
        match product {
            Some(p) if batch.is_multiple_of(p) => {}
            _ => {
                return Err(Error::invalid(
                    OP,
                    "block_shape",
                    format!(
                        "data's batch {batch} is not divisible by the product of block_shape {:?}",
                        self.block_shape
                    ),
                ))
            }
        }
        let mut output_shape = vec![(batch / product.unwrap()) as usize];
        for k in 1..input_shape.len() {
            let full = input_shape[k] as u64 * block[k];
            let crop = begin[k] + end[k];
            if crop > full {
                return Err(Error::invalid(
                    OP,
                    "crops_begin",
                    format!(
                        "crops_begin[{k}] + crops_end[{k}] = {crop} exceeds data dimension {k} ({}) times block_shape[{k}] ({}) = {full}",
                        input_shape[k], block[k]
                    ),
                ));
            }
            output_shape.push((full - crop) as usize);
        }
        Ok(BlockPlan {
            mode: BlockMode::BatchToSpace,
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

    /// Records BatchToSpace-2 of `data` into `out`: the one recording path of the op (the Rust API and
    /// graph nodes both come here).
    pub fn record(&self, rec: &mut Recorder, data: &Tensor, out: Out) -> Result<Tensor> {
        blocks::record(rec, OP, data, |shape| self.plan(shape), out)
    }
}

impl Recorder {
    /// Records BatchToSpace-2 of `data` into a new tensor.
    pub fn batch_to_space(&mut self, data: &Tensor, op: &BatchToSpace) -> Result<Tensor> {
        op.record(self, data, Out::NEW)
    }
}
