//! Softmax, LogSoftmax, LayerNormalization and RMSNormalization of rows in one dispatch
//! (`shaders/row_norm.wgsl`). Built from reductions and element-wise programs they take 3
//! dispatches each (2 for RMSNormalization), every one reading the whole input: a decoder
//! layer's two LayerNormalizations and its Softmax were 9 of its 23 dispatches. Rows of up to
//! [`MAX_ROW`] f32 elements, or of an even number of f16 or bf16 ones, lying one after
//! another, the scale and bias varying along the row only, take this kernel (the same
//! roundings as the general path); everything else keeps the general path.

use std::sync::Arc;

use super::reduce::{RowKernel, WORKGROUP};
use super::{grid_for, Kernel};
use crate::{DType, Out, Recorder, Result, Tensor};

/// What the kernel computes over each row (the shader's `MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowNorm {
    /// ONNX Softmax along the row.
    Softmax = 0,
    /// ONNX LogSoftmax along the row.
    LogSoftmax = 1,
    /// ONNX LayerNormalization: the row less its mean over its standard deviation.
    LayerNorm = 2,
    /// ONNX RMSNormalization: the row over its root mean square.
    RmsNorm = 3,
}

/// The longest row: a thread per row (CPU adapters) walks it three times, and a workgroup's
/// lanes 64 elements each, well within what one invocation may loop.
pub const MAX_ROW: usize = 16384;

/// Threads per row: 1, or the reduction's lanes for its rows (16 to 256).
const LANES: [u32; 6] = [1, 16, 32, 64, 128, 256];

/// Every variant, for validation.
pub fn variants() -> impl Iterator<Item = Kernel> {
    let modes = [
        (RowNorm::Softmax, false),
        (RowNorm::LogSoftmax, false),
        (RowNorm::LayerNorm, false),
        (RowNorm::LayerNorm, true),
        (RowNorm::RmsNorm, false),
    ];
    modes.into_iter().flat_map(|(mode, has_bias)| {
        DTYPES.into_iter().flat_map(move |dtype| {
            LANES.into_iter().map(move |lanes| Kernel::RowNorm {
                mode,
                dtype,
                lanes,
                has_bias,
            })
        })
    })
}

/// The element types: f16 and bf16 packed two to a word.
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The shader's `DTYPE` of `dtype` (one of [`DTYPES`]).
pub(crate) fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => 0,
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RowNormParams {
    rows: u32,
    n: u32,
    epsilon: f32,
    zero: u32,
}

/// Whether `affine` (a normalization's scale or bias, which broadcasts to `x`) varies along
/// the normalized axes from `axis` on only, as `n` values in the row's order: its shape is
/// theirs but for leading 1s.
pub(crate) fn along_row(affine: &Tensor, x: &Tensor, axis: usize) -> bool {
    let trimmed =
        |d: &[usize]| -> Vec<usize> { d.iter().copied().skip_while(|&d| d == 1).collect() };
    trimmed(affine.shape()) == trimmed(&x.shape()[axis..])
}

impl Recorder {
    /// Records `mode` over the rows of `n` elements of `x` with one dispatch, into `out` as a
    /// tensor of `shape` (`x`'s elements), where the kernel applies: one of f32, f16 and bf16
    /// throughout, rows of 1 to [`MAX_ROW`] elements (an even number for the 16-bit types),
    /// every tensor in one binding, the result in a buffer of its own. `None`, recording
    /// nothing, where it does not apply. Rows take a thread or the lanes the reduction would
    /// give them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn row_norm_to(
        &mut self,
        mode: RowNorm,
        x: &Tensor,
        n: usize,
        affine: [Option<&Tensor>; 2],
        epsilon: f64,
        out: Out,
        shape: &[usize],
    ) -> Result<Option<Tensor>> {
        let numel = x.numel();
        if n == 0
            || n > MAX_ROW
            || numel == 0
            || !numel.is_multiple_of(n)
            || numel > u32::MAX as usize
        {
            return Ok(None);
        }
        let ctx = self.context().clone();
        let limit = ctx.binding_limit();
        let dtype = x.dtype();
        // 16-bit rows of an even length start on a word: no two rows share one.
        if !DTYPES.contains(&dtype) || (dtype != DType::F32 && n % 2 == 1) {
            return Ok(None);
        }
        let fits = |t: &Tensor| t.dtype() == dtype && t.storage().fits_one_binding(limit);
        let inputs: Vec<&Tensor> = std::iter::once(x)
            .chain(affine.iter().flatten().copied())
            .collect();
        if !inputs.iter().all(|t| fits(t)) {
            return Ok(None);
        }
        let rows = numel / n;
        let lanes = match RowKernel::of_rows(&ctx, rows, n) {
            RowKernel::Thread => 1,
            RowKernel::Group(lanes) => lanes,
            // Few long rows, which a reduction splits over several workgroups: at most
            // MAX_ROW elements, a workgroup each still makes one dispatch of three.
            RowKernel::Chunks(_) => super::reduce::lanes_for(n as u64),
        };
        // Its own buffer: a dispatch cannot read and write one buffer through two bindings.
        let usable = |y: &Tensor| {
            fits(y)
                && y.numel() == numel
                && inputs
                    .iter()
                    .all(|t| !Arc::ptr_eq(t.storage(), y.storage()))
        };
        let y = match out.placed() {
            Some(t) if t.shape() == shape && usable(t) => t.clone(),
            Some(_) => return Ok(None),
            None => {
                let y = self.alloc(dtype, shape)?;
                if !usable(&y) {
                    self.release(y);
                    return Ok(None);
                }
                y
            }
        };
        let [scale, bias] = affine;
        let kernel = Kernel::RowNorm {
            mode,
            dtype,
            lanes,
            has_bias: bias.is_some(),
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let per_group = u64::from(WORKGROUP / lanes);
        let groups = (rows as u64).div_ceil(per_group);
        let op = match mode {
            RowNorm::Softmax => "Softmax",
            RowNorm::LogSoftmax => "LogSoftmax",
            RowNorm::LayerNorm => "LayerNormalization",
            RowNorm::RmsNorm => "RMSNormalization",
        };
        let grid = grid_for(&ctx, op, groups * u64::from(WORKGROUP), WORKGROUP)?;
        let params = RowNormParams {
            rows: rows as u32,
            n: n as u32,
            epsilon: epsilon as f32,
            zero: 0,
        };
        let bindings = [
            x.storage().bind_whole(),
            scale.unwrap_or(x).storage().bind_whole(),
            bias.unwrap_or(x).storage().bind_whole(),
            y.storage().bind_whole(),
        ];
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        Ok(Some(y))
    }
}
