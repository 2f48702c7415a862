//! The pad kernel (`shaders/pad.wgsl`): ONNX Pad in one pass, every output element mapped to
//! its input element (or the constant) axis by axis, moved as bits in words.

use super::{grid_for, Kernel, MAX_RANK};
use crate::{Recorder, Result, Tensor};

/// How Pad fills what lies outside the input (ONNX's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl PadMode {
    pub fn parse(mode: &str) -> Option<PadMode> {
        Some(match mode {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" => PadMode::Wrap,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Edge => "edge",
            PadMode::Wrap => "wrap",
        }
    }

    /// The kernel's `MODE`.
    pub(crate) fn code(self) -> u32 {
        match self {
            PadMode::Constant => 0,
            PadMode::Reflect => 1,
            PadMode::Edge => 2,
            PadMode::Wrap => 3,
        }
    }
}

/// One axis of a pad: `before` elements ahead of the `len` input elements kept (from `crop`
/// on), `out_len` in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadAxis {
    pub out_len: usize,
    pub len: usize,
    pub before: usize,
    pub crop: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PadParams {
    count: u32,
    units: u32,
    rank: u32,
    base: u32,
    value: [u32; 2],
    pad: [u32; 2],
    /// Per axis: out_len, len, before, stride.
    axes: [[u32; 4]; MAX_RANK],
}

impl Recorder {
    /// Records `out` (of the axes' `out_len`s) as `data` padded per `axes` under `mode`, the
    /// constant being `value`'s bits (low word first).
    pub(crate) fn pad_into(
        &mut self,
        op: &'static str,
        data: &Tensor,
        axes: &[PadAxis],
        mode: PadMode,
        value: u64,
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        super::operands::check_bound_whole(&ctx, op, &[(data, "data"), (out, "the output")])?;
        if count > u64::from(u32::MAX) || data.numel() as u64 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the data or output", count));
        }
        debug_assert!(axes.len() <= MAX_RANK);
        let mut params = PadParams {
            count: count as u32,
            units: 0,
            rank: axes.len() as u32,
            base: 0,
            value: [value as u32, (value >> 32) as u32],
            pad: [0; 2],
            axes: [[0; 4]; MAX_RANK],
        };
        let mut stride = 1usize;
        for (k, axis) in axes.iter().enumerate().rev() {
            params.axes[k] = [
                axis.out_len as u32,
                axis.len as u32,
                axis.before as u32,
                stride as u32,
            ];
            params.base += (axis.crop * stride) as u32;
            stride *= data.shape()[k];
        }
        let elem = data.dtype().size() as u32;
        let lanes = (4 / elem).max(1) as u64;
        let units = count.div_ceil(lanes);
        params.units = units as u32;
        let wg = ctx.workgroup_size();
        let kernel = Kernel::Pad {
            elem_bytes: elem,
            mode,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let bindings = [data.storage().bind_whole(), out.storage().bind_whole()];
        let grid = grid_for(&ctx, op, units, wg)?;
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }
}
