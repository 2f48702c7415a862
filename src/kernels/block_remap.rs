//! The block-remap kernel family (`shaders/block_remap.wgsl`): BatchToSpace-2 and
//! SpaceToBatch-2 in one pass, each output element computing its single source element.

use crate::context::{Binding, KernelSource};
use crate::ops::MAX_RANK;
use crate::{Error, Recorder, Result, Tensor};

use super::gather::WORKGROUP_SIZE;
use super::grid_for;

pub(crate) static KERNEL: KernelSource = KernelSource {
    name: "block_remap",
    wgsl: include_str!("../../shaders/block_remap.wgsl"),
    entry: "main",
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
};

/// Which direction the blocks move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockMode {
    BatchToSpace,
    SpaceToBatch,
}

/// A validated BatchToSpace or SpaceToBatch: shapes, blocks and the begin offsets (crops or
/// pads) per axis. Computed from shapes and index values only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlan {
    pub mode: BlockMode,
    pub input_shape: Vec<usize>,
    pub output_shape: Vec<usize>,
    /// `block[0]` is 1.
    pub block: Vec<u64>,
    /// `crops_begin` (BatchToSpace) or `pads_begin` (SpaceToBatch); 0 on axis 0.
    pub begin: Vec<u64>,
}

impl BlockPlan {
    pub fn output_numel(&self) -> u64 {
        self.output_shape.iter().map(|&d| d as u64).product()
    }

    /// The input element read by output element `i`, `None` for padding (the kernel's
    /// arithmetic, for tests).
    pub fn source_index(&self, i: u64) -> Option<u64> {
        let rank = self.output_shape.len();
        let strides = crate::host::c_strides(&self.input_shape);
        let inner: u64 = self.output_shape[1..].iter().map(|&d| d as u64).product();
        let o0 = i / inner;
        let mut rest = i % inner;
        match self.mode {
            BlockMode::BatchToSpace => {
                let (mut r, mut radix, mut index) = (0, 1, 0);
                for k in (1..rank).rev() {
                    let x = rest % self.output_shape[k] as u64 + self.begin[k];
                    rest /= self.output_shape[k] as u64;
                    r += (x % self.block[k]) * radix;
                    radix *= self.block[k];
                    index += (x / self.block[k]) * strides[k];
                }
                Some(index + (r * self.output_shape[0] as u64 + o0) * strides[0])
            }
            BlockMode::SpaceToBatch => {
                let batch = self.input_shape[0] as u64;
                let mut blocks = o0 / batch;
                let mut index = (o0 % batch) * strides[0];
                for k in (1..rank).rev() {
                    let padded = (rest % self.output_shape[k] as u64) * self.block[k]
                        + blocks % self.block[k];
                    rest /= self.output_shape[k] as u64;
                    blocks /= self.block[k];
                    let x = padded
                        .checked_sub(self.begin[k])
                        .filter(|&x| x < self.input_shape[k] as u64)?;
                    index += x * strides[k];
                }
                Some(index)
            }
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    units: u32,
    rank: u32,
    mode: u32,
    batch: u32,
    out_inner: u32,
    pad: [u32; 2],
    out_shape: [u32; MAX_RANK],
    in_shape: [u32; MAX_RANK],
    in_stride: [u32; MAX_RANK],
    block: [u32; MAX_RANK],
    offset: [u32; MAX_RANK],
}

impl Recorder {
    /// Records `plan` reading `src` into a new tensor (same dtype).
    pub(crate) fn block_remap(
        &mut self,
        op: &'static str,
        src: &Tensor,
        plan: &BlockPlan,
    ) -> Result<Tensor> {
        let ctx = self.context().clone();
        ctx.check_same_device(op, "data", src)?;
        let out = self.alloc(src.dtype(), &plan.output_shape)?;
        self.block_remap_into(op, src, plan, &out)?;
        Ok(out)
    }

    /// Records `plan` reading `src` into `out` (same dtype and shape as the plan's output).
    pub(crate) fn block_remap_into(
        &mut self,
        op: &'static str,
        src: &Tensor,
        plan: &BlockPlan,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let count = plan.output_numel();
        if count == 0 {
            return Ok(());
        }
        ctx.check_binding_size(op, "input data", src.buffer().size())?;
        ctx.check_binding_size(op, "output", out.buffer().size())?;
        let too_big = |what: &str, needed: u64| Error::LimitExceeded {
            op,
            what: what.to_string(),
            limit: "2^32 elements per kernel",
            needed,
            max: u64::from(u32::MAX),
        };
        let in_numel: u64 = plan.input_shape.iter().map(|&d| d as u64).product();
        // u32::MAX itself marks padding in the kernel.
        if count >= u64::from(u32::MAX) || in_numel >= u64::from(u32::MAX) {
            return Err(too_big("the tensor's element count", count.max(in_numel)));
        }
        let elem = src.dtype().size() as u32;
        let units = if elem < 4 {
            count.div_ceil(u64::from(4 / elem))
        } else {
            count
        };
        let rank = plan.output_shape.len();
        let mut params = Params {
            count: count as u32,
            units: units as u32,
            rank: rank as u32,
            mode: match plan.mode {
                BlockMode::BatchToSpace => 0,
                BlockMode::SpaceToBatch => 1,
            },
            batch: match plan.mode {
                BlockMode::BatchToSpace => plan.output_shape[0] as u32,
                BlockMode::SpaceToBatch => plan.input_shape[0] as u32,
            },
            out_inner: (count / plan.output_shape[0] as u64) as u32,
            pad: [0; 2],
            out_shape: [1; MAX_RANK],
            in_shape: [1; MAX_RANK],
            in_stride: [0; MAX_RANK],
            block: [1; MAX_RANK],
            offset: [0; MAX_RANK],
        };
        let in_strides = crate::host::c_strides(&plan.input_shape);
        // Blocks and offsets are bounded by sizes below 2^32 (checked when planned).
        for (k, &stride) in in_strides.iter().enumerate() {
            params.out_shape[k] = plan.output_shape[k] as u32;
            params.in_shape[k] = plan.input_shape[k] as u32;
            params.in_stride[k] = stride as u32;
            params.block[k] = plan.block[k] as u32;
            params.offset[k] = plan.begin[k] as u32;
        }
        let grid = grid_for(&ctx, op, units, WORKGROUP_SIZE)?;
        let pipeline = ctx.pipeline(
            &KERNEL,
            &[("ELEM_BYTES", elem), ("WORKGROUP_SIZE", WORKGROUP_SIZE)],
        )?;
        self.dispatch(
            op,
            &pipeline,
            bytemuck::bytes_of(&params),
            &[
                src.buffer().as_entire_binding(),
                out.buffer().as_entire_binding(),
            ],
            grid,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::reference::{batch_to_space_array, space_to_batch_array};
    use crate::{BatchToSpace, SpaceToBatch};
    use ndarray::{ArrayD, IxDyn};

    fn iota(shape: &[usize]) -> ArrayD<i64> {
        let n = shape.iter().product::<usize>() as i64;
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).collect()).unwrap()
    }

    /// The kernel's direct index arithmetic (mirrored by `source_index`) agrees with the spec's
    /// reshape/transpose/crop formulation, without a GPU.
    #[test]
    fn source_index_matches_the_reshape_formulation() {
        let shape = [24, 3, 2, 5];
        let op = BatchToSpace::new([1, 2, 3, 2], [0, 1, 2, 0], [0, 2, 1, 3]);
        let plan = op.plan(&shape).unwrap();
        let want = batch_to_space_array(&iota(&shape), &[1, 2, 3, 2], &[0, 1, 2, 0], &[0, 2, 1, 3]);
        assert_eq!(want.shape(), plan.output_shape.as_slice());
        for (i, &v) in want.iter().enumerate() {
            assert_eq!(plan.source_index(i as u64), Some(v as u64), "{i}");
        }

        let op = SpaceToBatch::new([1, 2, 3, 2], [0, 1, 2, 0], [0, 2, 2, 1]);
        let plan = op.plan(&shape).unwrap();
        let want = space_to_batch_array(
            &iota(&shape),
            -1,
            &[1, 2, 3, 2],
            &[0, 1, 2, 0],
            &[0, 2, 2, 1],
        );
        assert_eq!(want.shape(), plan.output_shape.as_slice());
        for (i, &v) in want.iter().enumerate() {
            assert_eq!(
                plan.source_index(i as u64),
                (v >= 0).then_some(v as u64),
                "{i}"
            );
        }
    }
}
