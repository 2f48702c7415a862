//! Col2Im on the CPU, from its definition: every column element added to the image pixel its
//! block and offset reach (in f64), skipping those in the padding.

use crate::graph::{Attr, Node};
use crate::ops::col2im::col2im_plan;
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

/// Runs `node` when it is a Col2Im (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    if node.op != "Col2Im" {
        return Ok(None);
    }
    let arg = |i: usize| {
        args.get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| RefError(format!("Col2Im: input {i} missing")))
    };
    let ints = |name: &str| match node.attrs.get(name) {
        Some(Attr::Ints(v)) => Some(v.clone()),
        _ => None,
    };
    let x = arg(0)?;
    let image = arg(1)?.to_indices("Col2Im", "image_shape")?;
    let block = arg(2)?.to_indices("Col2Im", "block_shape")?;
    let (strides, dilations, pads) = (ints("strides"), ints("dilations"), ints("pads"));
    let plan = col2im_plan(
        &x.shape,
        &image,
        &block,
        strides.as_deref(),
        dilations.as_deref(),
        pads.as_deref(),
    )?;
    let k = plan.image.len();
    let (n, c) = (x.shape[0], plan.channels);
    let per_block: usize = plan.block.iter().product();
    let blocks: usize = plan.blocks.iter().product();
    let pixels = plan.image.iter().map(|&d| d as u128).product::<u128>();
    // Refused here beyond what the interpreter should build (the GPU's memory limit decides).
    if (n * c) as u128 * pixels > 1 << 28 {
        return Err("Col2Im: the image is beyond the interpreter's size".into());
    }
    let pixels = pixels as usize;
    let values = cast(x, DType::F64)?.to_vec::<f64>()?;
    let mut out = vec![0.0; n * c * pixels];
    // Multi-indices of a flat C-order index over `dims`.
    let unflatten = |mut i: usize, dims: &[usize]| {
        let mut v = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            v[a] = i % dims[a];
            i /= dims[a];
        }
        v
    };
    for b in 0..n {
        for ch in 0..c {
            for j in 0..per_block {
                let offset = unflatten(j, &plan.block);
                for l in 0..blocks {
                    let at = unflatten(l, &plan.blocks);
                    let mut pixel = 0usize;
                    let mut inside = true;
                    for d in 0..k {
                        let p = (at[d] * plan.strides[d] + offset[d] * plan.dilations[d]) as i64
                            - plan.pads_begin[d] as i64;
                        inside &= p >= 0 && (p as usize) < plan.image[d];
                        pixel = pixel * plan.image[d] + p.max(0) as usize;
                    }
                    if inside {
                        let from = ((b * c + ch) * per_block + j) * blocks + l;
                        out[(b * c + ch) * pixels + pixel] += values[from];
                    }
                }
            }
        }
    }
    let mut shape = vec![n, c];
    shape.extend(&plan.image);
    Ok(Some(cast(&HostTensor::from_vec(shape, &out)?, x.dtype)?))
}
