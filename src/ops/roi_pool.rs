//! ONNX MaxRoiPool: the largest element of each bin of each region of interest. The ROIs are
//! known on the host when the op is recorded; their bins' bounds are computed there as
//! onnxruntime computes them (in f32) into a window table, and one kernel takes each output
//! element's maximum over its window.

use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

const OP: &str = "MaxRoiPool";

/// The window table of MaxRoiPool on `x_shape` `[N, C, H, W]` with `rois` `[R, 5]` (batch index,
/// x1, y1, x2, y2) of X's dtype, `pooled` (height, width) bins and `spatial_scale`: per ROI its
/// image, then (start, end) rows of each row bin, then (start, end) columns of each column bin
/// (ends exclusive, clipped to the image; an empty window pools to 0). Computed as onnxruntime
/// does, in f32: each corner scaled and rounded half away from zero, a malformed ROI taken as
/// one pixel, bin `i` from `floor(i * size / bins)` to `ceil((i + 1) * size / bins)` of the
/// ROI's size. Shared with the interpreter; the checks of every operand first.
pub fn roi_pool_windows(
    x: (DType, &[usize]),
    rois: &HostTensor,
    pooled: &[i64],
    spatial_scale: f64,
) -> Result<Vec<u32>> {
    let bad = |input: &str, msg: String| Error::invalid(OP, input, msg);
    if !matches!(x.0, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(bad(
            "X",
            format!("X is {}; MaxRoiPool takes f32, f16, bf16 or f64", x.0),
        ));
    }
    let &[n, _, h, w] = x.1 else {
        return Err(bad(
            "X",
            format!(
                "X has shape {:?}; MaxRoiPool takes [N, C, H, W] images",
                x.1
            ),
        ));
    };
    if rois.dtype != x.0 {
        return Err(bad(
            "rois",
            format!(
                "rois is {} and X is {}; they share one type",
                rois.dtype, x.0
            ),
        ));
    }
    if rois.shape.len() != 2 || rois.shape[1] != 5 {
        return Err(bad(
            "rois",
            format!(
                "rois has shape {:?}; MaxRoiPool takes [num_rois, 5] (batch index, x1, y1, x2, y2)",
                rois.shape
            ),
        ));
    }
    let &[ph, pw] = pooled else {
        return Err(bad(
            "pooled_shape",
            format!(
                "pooled_shape has {} values; it needs 2 (height, width)",
                pooled.len()
            ),
        ));
    };
    if ph < 1 || pw < 1 || ph > i64::from(u32::MAX) || pw > i64::from(u32::MAX) {
        return Err(bad(
            "pooled_shape",
            format!("pooled_shape is [{ph}, {pw}]; each bin count must be 1 to 2^32 - 1"),
        ));
    }
    let scale = spatial_scale as f32;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(bad(
            "spatial_scale",
            format!("spatial_scale is {spatial_scale}; it must be a positive f32 (as onnxruntime requires)"),
        ));
    }
    if h > u32::MAX as usize || w > u32::MAX as usize || n > u32::MAX as usize {
        return Err(bad(
            "X",
            format!("X has shape {:?}; each axis must be below 2^32", x.1),
        ));
    }
    let values = crate::reference::cast_host(rois, DType::F32)?.to_vec::<f32>()?;
    let (ph, pw) = (ph as u32, pw as u32);
    let per_roi = 1 + 2 * (ph as usize + pw as usize);
    let mut table = Vec::with_capacity(rois.shape[0] * per_roi);
    for (r, roi) in values.chunks_exact(5).enumerate() {
        // The batch index truncated toward zero, as onnxruntime's cast to int.
        let b = roi[0].trunc();
        if !(b >= 0.0 && (b as usize) < n) {
            return Err(bad(
                "rois",
                format!("ROI {r} has batch index {}; X has {n} images", roi[0]),
            ));
        }
        table.push(b as u32);
        // Rust's `round` rounds half away from zero, as C's `round`.
        let corner = |v: f32| (v * scale).round() as i64;
        let (x1, y1, x2, y2) = (
            corner(roi[1]),
            corner(roi[2]),
            corner(roi[3]),
            corner(roi[4]),
        );
        for (start, end, bins, size) in [(y1, y2, ph, h), (x1, x2, pw, w)] {
            let len = (end - start + 1).max(1);
            let bin = len as f32 / bins as f32;
            for i in 0..bins {
                let lo = (i as f32 * bin).floor() as i64;
                let hi = ((i + 1) as f32 * bin).ceil() as i64;
                table.push((lo + start).clamp(0, size as i64) as u32);
                table.push((hi + start).clamp(0, size as i64) as u32);
            }
        }
    }
    Ok(table)
}

impl Recorder {
    /// Records ONNX MaxRoiPool of `x` `[N, C, H, W]` (f32, f16, bf16 or f64) over `rois`
    /// `[R, 5]` (batch index, x1, y1, x2, y2, of X's dtype, known on the host) into `out`
    /// `[R, C, pooled_h, pooled_w]`: each bin's largest element, NaN above every number, 0
    /// for a bin that lies outside the image. The bins are those onnxruntime computes
    /// ([`roi_pool_windows`]); one dispatch takes every output element's maximum (several,
    /// for windows larger than one invocation's loop takes at once, and passes over windows
    /// of whole images and ROIs for tensors beyond one binding).
    pub fn max_roi_pool_to(
        &mut self,
        x: &Tensor,
        rois: &HostTensor,
        pooled: &[i64],
        spatial_scale: f64,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(OP, &[("X", x)])?;
        let table = roi_pool_windows((x.dtype(), x.shape()), rois, pooled, spatial_scale)?;
        let shape = [
            rois.shape[0],
            x.shape()[1],
            pooled[0] as usize,
            pooled[1] as usize,
        ];
        if crate::host::checked_numel(&shape).is_none() {
            return Err(Error::invalid(
                OP,
                "pooled_shape",
                "the output's element count does not fit in 64 bits",
            ));
        }
        let out = out.tensor(self, x.dtype(), &shape)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        self.max_roi_pool_into(OP, x, &table, &out)?;
        Ok(out)
    }
}
