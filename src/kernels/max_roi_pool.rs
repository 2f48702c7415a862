//! MaxRoiPool's maxima (`shaders/max_roi_pool.wgsl`): one invocation per output element (per
//! word of 2-byte elements) folds its window, read from a table made on the host; windows of
//! more elements than one invocation's loop may take fold over several dispatches, and
//! tensors beyond one binding run in passes over windows of whole images and whole ROIs.

use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::storage::{alloc_size, Window};
use crate::{DType, Error, HostTensor, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    outputs: u32,
    channels: u32,
    height: u32,
    width: u32,
    pooled_h: u32,
    pooled_w: u32,
    row: u32,
    plane: u32,
    first: u32,
    count: u32,
    /// The images of X this pass reads, `[image_first, image_end)`, image `image_first`
    /// from element `x_first` of X's window on; the pass's outputs from element `out_first`
    /// of the output's window on; `windowed`: outputs of ROIs of other images are kept (a
    /// pass over one window of X's images leaves them to another).
    image_first: u32,
    image_end: u32,
    x_first: u32,
    out_first: u32,
    windowed: u32,
    _pad: [u32; 3],
}

/// A pass of MaxRoiPool: ROIs `rois` (their part of the window table, uploaded as `windows`,
/// whose largest window holds `largest` elements), images `images` of X in `x_window` (from
/// byte `x_at` of the tensor), outputs in `out_window` (from byte `out_at`).
struct Pass<'a> {
    rois: std::ops::Range<u64>,
    windows: &'a Tensor,
    largest: u64,
    images: std::ops::Range<u64>,
    x_window: Option<Window>,
    out_window: Option<Window>,
    x_at: u64,
    out_at: u64,
}

impl Recorder {
    /// Records the maxima of `x` `[N, C, H, W]` over `table` (u32, see
    /// `ops::roi_pool::roi_pool_windows`) into `out` `[R, C, pooled_h, pooled_w]` of x's
    /// dtype. Shapes and dtypes are the caller's to check. Tensors beyond one binding (or a
    /// buffer) are read in windows of whole images and written in windows of whole ROIs, a
    /// pass for each window of ROIs and each window of the images they pool from; each pass
    /// binds its ROIs' part of the table.
    pub(crate) fn max_roi_pool_into(
        &mut self,
        op: &'static str,
        x: &Tensor,
        table: &[u32],
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let elem = x.dtype().size() as u64;
        let outputs = out.numel() as u64;
        let [rois, channels, ph, pw] = [0, 1, 2, 3].map(|k| out.shape()[k] as u64);
        let per_roi = (1 + 2 * (ph + pw)) as usize;
        let limit = ctx.binding_limit();
        let whole = |t: &Tensor| t.storage().fits_one_binding(limit);
        // The table (or a pass's part of it) is bound whole: it must lie in one buffer.
        let table_room = limit.min(ctx.max_buffer_size());
        let table_fits = |words: usize| alloc_size(words as u64 * 4) <= table_room;
        if whole(x) && whole(out) && table_fits(table.len()) {
            // Element indices (and 8-byte elements' word indices) are u32 in the kernel.
            if x.numel() as u64 * elem.max(4) / 4 > u64::from(u32::MAX) {
                return Err(Error::LimitExceeded {
                    op,
                    what: "X's words".into(),
                    limit: "2^32 - 1 words indexed by u32",
                    needed: x.numel() as u64 * elem.max(4) / 4,
                    max: u64::from(u32::MAX),
                });
            }
            if outputs * elem.max(4) / 4 > u64::from(u32::MAX) {
                return Err(super::operands::too_many(op, "the output's words", outputs));
            }
            let windows = self.upload(&HostTensor::from_vec(vec![table.len()], table)?)?;
            let pass = Pass {
                rois: 0..rois,
                windows: &windows,
                largest: largest_window(table, ph as usize, pw as usize),
                images: 0..x.shape()[0] as u64,
                x_window: None,
                out_window: None,
                x_at: 0,
                out_at: 0,
            };
            self.max_roi_pool_pass(op, x, out, &pass)?;
            self.release(windows);
            return Ok(());
        }
        let image = channels * (x.shape()[2] * x.shape()[3]) as u64 * elem;
        let roi = channels * ph * pw * elem;
        let x_relaid = self.relaid_in_whole_slices(x, image, true)?;
        let out_relaid = self.relaid_in_whole_slices(out, roi, false)?;
        let (xs, outs) = (
            x_relaid.as_ref().unwrap_or(x),
            out_relaid.as_ref().unwrap_or(out),
        );
        let align = ctx.window_alignment(op, elem.max(4))?;
        let beyond = |what: &str, unit: u64| Error::LimitExceeded {
            op,
            what: format!("{what} ({unit} bytes) bound at once"),
            limit: "max_storage_buffer_binding_size",
            needed: unit + align + 4,
            max: limit,
        };
        let segments = |t: &Tensor| t.storage().segments();
        let images = x.shape()[0] as u64;
        let image_runs = super::windows::unit_runs(0, images, image, &segments(xs), limit, align)
            .ok_or_else(|| beyond("one image of X", image))?;
        let roi_runs = super::windows::unit_runs(0, rois, roi, &segments(outs), limit, align)
            .ok_or_else(|| beyond("one ROI's output", roi))?;
        // ROIs per pass: their part of the table must fit one binding of one buffer too.
        let mut most_rois = (table_room / (per_roi as u64 * 4)).min(rois);
        while most_rois > 0 && !table_fits(most_rois as usize * per_roi) {
            most_rois -= 1;
        }
        if most_rois == 0 {
            return Err(beyond(
                "one ROI's part of the window table",
                per_roi as u64 * 4,
            ));
        }
        for (r0, r1, _) in roi_runs {
            let mut a = r0;
            while a < r1 {
                let b = r1.min(a + most_rois);
                let part = &table[a as usize * per_roi..b as usize * per_roi];
                let out_window = segments(outs).window(a * roi, b * roi, align);
                // The ROIs' part of the table, uploaded once for every window of X.
                let windows = self.upload(&HostTensor::from_vec(vec![part.len()], part)?)?;
                let largest = largest_window(part, ph as usize, pw as usize);
                for &(i0, i1, x_window) in &image_runs {
                    // Only the windows of X that hold an image these ROIs pool from.
                    let reads = part
                        .chunks_exact(per_roi)
                        .any(|w| (i0..i1).contains(&u64::from(w[0])));
                    if !reads {
                        continue;
                    }
                    let pass = Pass {
                        rois: a..b,
                        windows: &windows,
                        largest,
                        images: i0..i1,
                        x_window: Some(x_window),
                        out_window: Some(out_window),
                        x_at: i0 * image,
                        out_at: a * roi,
                    };
                    self.max_roi_pool_pass(op, xs, outs, &pass)?;
                }
                self.release(windows);
                a = b;
            }
        }
        if let Some(relaid) = out_relaid {
            self.copy_relaid_back(relaid, out)?;
        }
        Ok(())
    }

    /// Records one pass of [`Recorder::max_roi_pool_into`] (all of it where everything is
    /// bound whole).
    fn max_roi_pool_pass(
        &mut self,
        op: &'static str,
        x: &Tensor,
        out: &Tensor,
        pass: &Pass<'_>,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let elem_bytes = x.dtype().size() as u64;
        let shape = out.shape();
        let per_output = (shape[1] * shape[2] * shape[3]) as u64;
        let outputs = (pass.rois.end - pass.rois.start) * per_output;
        let x_first = pass
            .x_window
            .map_or(0, |w| (pass.x_at - w.start) / elem_bytes);
        let out_first = pass
            .out_window
            .map_or(0, |w| (pass.out_at - w.start) / elem_bytes);
        let invocations = if elem_bytes == 2 {
            (out_first % 2 + outputs).div_ceil(2)
        } else {
            outputs
        };
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, invocations, wg)?;
        let mut params = Params {
            outputs: outputs as u32,
            channels: shape[1] as u32,
            height: x.shape()[2] as u32,
            width: x.shape()[3] as u32,
            pooled_h: shape[2] as u32,
            pooled_w: shape[3] as u32,
            row: grid[0] * wg,
            plane: grid[1],
            first: 0,
            count: 0,
            image_first: pass.images.start as u32,
            image_end: pass.images.end as u32,
            x_first: x_first as u32,
            out_first: out_first as u32,
            windowed: u32::from(pass.x_window.is_some()),
            _pad: [0; 3],
        };
        let pipeline = ctx.pipeline(&Kernel::MaxRoiPool {
            workgroup_size: wg,
            elem_bytes: elem_bytes as u32,
            bf16: x.dtype() == DType::BF16,
        })?;
        let bindings = [
            match pass.x_window {
                Some(w) => x.storage().bind(w),
                None => x.storage().bind_whole(),
            },
            pass.windows.storage().bind_whole(),
            match pass.out_window {
                Some(w) => out.storage().bind(w),
                None => out.storage().bind_whole(),
            },
        ];
        // Window elements per dispatch: one invocation folds that many (twice for 2-byte
        // elements, two outputs each) in its one loop. lavapipe stops an invocation's loops
        // past its budget (see LOOP_ITERATIONS_PER_DISPATCH): a 300 x 300 window in one
        // dispatch gave the maximum of its first rows.
        let per_dispatch =
            LOOP_ITERATIONS_PER_DISPATCH as u64 / if elem_bytes == 2 { 2 } else { 1 };
        params.count = per_dispatch as u32;
        let mut first = 0u64;
        loop {
            params.first = first as u32;
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            first += per_dispatch;
            if first >= pass.largest {
                break;
            }
        }
        Ok(())
    }
}

/// The most elements a window of `table` (see `ops::roi_pool::roi_pool_windows`) holds: its
/// ROIs' tallest row bin times their widest column bin, at most.
fn largest_window(table: &[u32], ph: usize, pw: usize) -> u64 {
    let span = |bounds: &[u32]| {
        bounds
            .chunks_exact(2)
            .map(|b| u64::from(b[1].saturating_sub(b[0])))
            .max()
            .unwrap_or(0)
    };
    table
        .chunks_exact(1 + 2 * (ph + pw))
        .map(|roi| span(&roi[1..1 + 2 * ph]) * span(&roi[1 + 2 * ph..]))
        .max()
        .unwrap_or(0)
}
