//! ONNX Col2Im-18: the columns of sliding blocks (im2col's output) summed back into an image.
//! It is the ConvTranspose of the columns, seen as a grid of blocks, by a kernel that puts
//! each column row at its block offset: one one-hot kernel per channel (groups of one output
//! channel), planned on the host, so the existing ConvTranspose does the work.

use crate::ops::window::{TransposeAttrs, WindowAttrs};
use crate::{Error, Out, Recorder, Result, Tensor};

const OP: &str = "Col2Im";

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

/// The most entries of Col2Im's one-hot kernels (256 MiB in f32).
const MAX_KERNEL_ENTRIES: u64 = 1 << 26;

/// Col2Im's geometry, plain data (shared with the CPU interpreter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Col2ImPlan {
    /// Channels of the image (C).
    pub channels: usize,
    /// The image's spatial shape.
    pub image: Vec<usize>,
    /// The block's spatial shape.
    pub block: Vec<usize>,
    /// Blocks along each axis.
    pub blocks: Vec<usize>,
    /// Steps between blocks along each axis.
    pub strides: Vec<usize>,
    /// Steps between a block's elements along each axis.
    pub dilations: Vec<usize>,
    /// Padding before each axis of the image.
    pub pads_begin: Vec<usize>,
    /// Padding after each axis of the image.
    pub pads_end: Vec<usize>,
}

/// Plans Col2Im of an input of `shape` `[N, C * prod(block), L]` into `image_shape`, after
/// checking that the blocks tile it: L is the number of blocks the image, padding, strides and
/// dilations give.
pub fn col2im_plan(
    shape: &[usize],
    image_shape: &[i64],
    block_shape: &[i64],
    strides: Option<&[i64]>,
    dilations: Option<&[i64]>,
    pads: Option<&[i64]>,
) -> Result<Col2ImPlan> {
    let k = image_shape.len();
    if k == 0 || block_shape.len() != k {
        return Err(invalid(
            "block_shape",
            format!(
                "image_shape {image_shape:?} and block_shape {block_shape:?} must give the same number (at least 1) of axes"
            ),
        ));
    }
    let list = |v: Option<&[i64]>, name: &str, len: usize, default: i64, min: i64| {
        let v = v.map_or(vec![default; len], <[i64]>::to_vec);
        if v.len() != len || v.iter().any(|&x| x < min) {
            return Err(invalid(
                name,
                format!("{name} must hold {len} values of at least {min}, not {v:?}"),
            ));
        }
        Ok(v.into_iter().map(|x| x as usize).collect::<Vec<usize>>())
    };
    let image = list(Some(image_shape), "image_shape", k, 1, 1)?;
    let block = list(Some(block_shape), "block_shape", k, 1, 1)?;
    let strides = list(strides, "strides", k, 1, 1)?;
    let dilations = list(dilations, "dilations", k, 1, 1)?;
    let pads = list(pads, "pads", 2 * k, 0, 0)?;
    // Sizes from the model, held where their arithmetic cannot overflow.
    let too_large = |what: &str| {
        invalid(
            what,
            format!(
                "{what} is too large (image_shape {image_shape:?}, block_shape {block_shape:?})"
            ),
        )
    };
    if image
        .iter()
        .chain(&block)
        .chain(&pads)
        .chain(&strides)
        .chain(&dilations)
        .any(|&v| v > 1 << 31)
    {
        return Err(too_large("image_shape"));
    }
    let per_block = block
        .iter()
        .try_fold(1usize, |p, &b| p.checked_mul(b))
        .filter(|&p| p <= 1 << 31)
        .ok_or_else(|| too_large("block_shape"))?;
    if shape.len() != 3 || !shape[1].is_multiple_of(per_block) {
        return Err(invalid(
            "input",
            format!("input must be [N, C * {per_block}, L] for block_shape {block_shape:?}, not {shape:?}"),
        ));
    }
    let mut blocks = Vec::with_capacity(k);
    for d in 0..k {
        let span = dilations[d] * (block[d] - 1) + 1;
        let padded = image[d] + pads[d] + pads[k + d];
        if padded < span {
            return Err(invalid(
                "block_shape",
                format!(
                    "a block spans {span} along axis {d}, more than the padded image ({padded})"
                ),
            ));
        }
        blocks.push((padded - span) / strides[d] + 1);
    }
    let count = blocks
        .iter()
        .try_fold(1usize, |p, &b| p.checked_mul(b))
        .ok_or_else(|| too_large("the number of blocks"))?;
    if shape[2] != count {
        return Err(invalid(
            "input",
            format!(
                "input holds {} blocks but image_shape {image_shape:?}, block_shape {block_shape:?}, strides, dilations and pads give {count} ({blocks:?})",
                shape[2]
            ),
        ));
    }
    Ok(Col2ImPlan {
        channels: shape[1] / per_block,
        image,
        block,
        blocks,
        strides,
        dilations,
        pads_begin: pads[..k].to_vec(),
        pads_end: pads[k..].to_vec(),
    })
}

impl Recorder {
    /// Records ONNX Col2Im of `input` `[N, C * prod(block_shape), L]` into `[N, C,
    /// image_shape...]` (see [`col2im_plan`]): overlapping blocks add; the float types.
    #[allow(clippy::too_many_arguments)]
    pub fn col2im_to(
        &mut self,
        input: &Tensor,
        image_shape: &[i64],
        block_shape: &[i64],
        strides: Option<&[i64]>,
        dilations: Option<&[i64]>,
        pads: Option<&[i64]>,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(OP, &[("input", input)])?;
        let plan = col2im_plan(
            input.shape(),
            image_shape,
            block_shape,
            strides,
            dilations,
            pads,
        )?;
        let (n, c) = (input.shape()[0], plan.channels);
        let per_block: usize = plan.block.iter().product();
        // The one-hot kernels hold C * K^2 values, planned on the host.
        let entries = (c as u64).saturating_mul((per_block as u64).saturating_pow(2));
        if entries > MAX_KERNEL_ENTRIES {
            return Err(Error::LimitExceeded {
                op: OP,
                what: "the one-hot kernels (channels times block size squared)".into(),
                limit: "2^26 kernel entries",
                needed: entries,
                max: MAX_KERNEL_ENTRIES,
            });
        }
        // The columns as a grid of blocks: [N, C * K, blocks...].
        let mut grid: Vec<i64> = vec![n as i64, (c * per_block) as i64];
        grid.extend(plan.blocks.iter().map(|&b| b as i64));
        let x = self.reshape_to(input, &grid, false, Out::NEW)?;
        // One kernel per channel: row j of a channel's K rows lands at block offset j.
        let mut kernel = vec![0.0; c * per_block * per_block];
        for ch in 0..c {
            for j in 0..per_block {
                kernel[(ch * per_block + j) * per_block + j] = 1.0;
            }
        }
        let mut w_shape = vec![c * per_block, 1];
        w_shape.extend(&plan.block);
        let w = self.host_values(input.dtype(), &w_shape, &kernel)?;
        // The padding ConvTranspose leaves short of the image (less than a stride).
        let k = plan.image.len();
        let output_padding: Vec<i64> = (0..k)
            .map(|d| {
                let reach = (plan.blocks[d] - 1) * plan.strides[d]
                    + plan.dilations[d] * (plan.block[d] - 1)
                    + 1;
                (plan.image[d] + plan.pads_begin[d] + plan.pads_end[d] - reach) as i64
            })
            .collect();
        let to_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
        let (s, d) = (to_i64(&plan.strides), to_i64(&plan.dilations));
        let mut p = to_i64(&plan.pads_begin);
        p.extend(to_i64(&plan.pads_end));
        let block = to_i64(&plan.block);
        let attrs = TransposeAttrs {
            window: WindowAttrs {
                kernel_shape: Some(&block),
                strides: Some(&s),
                dilations: Some(&d),
                pads: Some(&p),
                auto_pad: "NOTSET",
                ceil_mode: false,
            },
            output_padding: Some(&output_padding),
            output_shape: None,
        };
        let y = self.conv_transpose_to(&x, &w, None, &attrs, c as i64, out)?;
        self.release(w);
        Ok(y)
    }
}
