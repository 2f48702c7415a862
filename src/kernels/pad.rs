//! The pad kernel (`shaders/pad.wgsl`): ONNX Pad in one pass, every output element mapped to
//! its input element (or the constant) axis by axis, moved as bits in words.

use super::windows::{room, Walk};
use super::{grid_for, Kernel, MAX_RANK};
use crate::{Error, Recorder, Result, Tensor};

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
    dst_base: u32,
    pad: u32,
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
        let tensors = [(data, "data"), (out, "the output")];
        if let Err(e) = super::operands::check_bound_whole(&ctx, op, &tensors) {
            return self.pad_in_windows(op, data, axes, mode, value, out, e);
        }
        if count > u64::from(u32::MAX) || data.numel() as u64 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the data or output", count));
        }
        let bindings = [data.storage().bind_whole(), out.storage().bind_whole()];
        let pad = (axes, data.shape(), mode, value);
        self.pad_piece(op, data.dtype(), pad, (0, 0), bindings)
    }

    /// One dispatch of the pad kernel: `axes` over data of `dims` (a C-order block of the
    /// data binding from its element `base` on) into the output binding from element
    /// `dst_base` on (a multiple of the elements per word).
    fn pad_piece(
        &mut self,
        op: &'static str,
        dtype: crate::DType,
        (axes, dims, mode, value): (&[PadAxis], &[usize], PadMode, u64),
        (base, dst_base): (u64, u64),
        bindings: [wgpu::BindingResource<'_>; 2],
    ) -> Result<()> {
        let ctx = self.context().clone();
        let count: u64 = axes.iter().map(|a| a.out_len as u64).product();
        debug_assert!(axes.len() <= MAX_RANK && axes.len() == dims.len());
        let elem = dtype.size() as u32;
        let lanes = (4 / elem).max(1) as u64;
        debug_assert_eq!(dst_base % lanes, 0);
        let mut params = PadParams {
            count: count as u32,
            units: 0,
            rank: axes.len() as u32,
            base: base as u32,
            value: [value as u32, (value >> 32) as u32],
            dst_base: (dst_base / lanes) as u32,
            pad: 0,
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
            stride *= dims[k];
        }
        let units = count.div_ceil(lanes);
        params.units = units as u32;
        let wg = ctx.workgroup_size();
        let kernel = Kernel::Pad {
            elem_bytes: elem,
            mode,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let grid = grid_for(&ctx, op, units, wg)?;
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }

    /// A pad whose data or output is too large to bind whole: cut along its leading axes
    /// that neither pad nor crop (the batch and channels of a spatial pad, where input and
    /// output planes correspond one to one) into runs of planes whose input and output each
    /// fit one window, a dispatch each. With 1- and 2-byte elements every run starts on a
    /// whole output word (planes taken in groups where one plane is not whole words).
    /// Otherwise (no such axis, or one plane beyond a window) `refused` is the error.
    #[allow(clippy::too_many_arguments)]
    fn pad_in_windows(
        &mut self,
        op: &'static str,
        data: &Tensor,
        axes: &[PadAxis],
        mode: PadMode,
        value: u64,
        out: &Tensor,
        refused: Error,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let shape = data.shape();
        let outer_axes = axes
            .iter()
            .zip(shape)
            .take_while(|(a, &d)| a.before == 0 && a.crop == 0 && a.len == d && a.out_len == d)
            .count();
        let inner_in: usize = shape[outer_axes..].iter().product();
        let inner_out: usize = axes[outer_axes..].iter().map(|a| a.out_len).product();
        if outer_axes == 0 || inner_in == 0 {
            return Err(refused);
        }
        let outer: usize = shape[..outer_axes].iter().product();
        let elem = data.dtype().size() as u64;
        let lanes = (4 / elem).max(1) as usize;
        let group = lanes / gcd(lanes, inner_out);
        let (inner_in, inner_out) = (inner_in as u64, inner_out as u64);
        let storages = [&**data.storage(), &**out.storage()];
        let elems = [elem, elem];
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, elem)?;
        let (_, segments) = super::operands::layout_of(&storages, limit, &elems);
        let g = group as u64;
        let run = |planes: u64, first: u64| Walk {
            lens: vec![planes],
            steps: vec![vec![g * inner_in, g * inner_out]],
            bases: vec![first * inner_in, first * inner_out],
            extents: vec![g * inner_in, g * inner_out],
        };
        let full = outer / group;
        let mut walks = vec![run(full as u64, 0)];
        if !outer.is_multiple_of(group) {
            let mut last = run(1, (full * group) as u64);
            last.extents = vec![
                (outer % group) as u64 * inner_in,
                (outer % group) as u64 * inner_out,
            ];
            walks.push(last);
        }
        let mut pieces = Vec::new();
        for walk in walks.iter().filter(|w| w.count() > 0) {
            match walk.split(room(limit, align, elem), &segments) {
                Some(runs) => pieces.extend(runs),
                None => return Err(refused),
            }
        }
        for piece in pieces {
            let planes = if piece.extents[0] == g * inner_in {
                piece.count() * g
            } else {
                piece.extents[0] / inner_in
            };
            let (firsts, bindings) =
                super::operands::bind_windows(&storages, &piece, false, align, &elems);
            let mut piece_axes = vec![PadAxis {
                out_len: planes as usize,
                len: planes as usize,
                before: 0,
                crop: 0,
            }];
            piece_axes.extend_from_slice(&axes[outer_axes..]);
            let mut dims = vec![planes as usize];
            dims.extend_from_slice(&shape[outer_axes..]);
            let count = planes * inner_out;
            if count > u64::from(u32::MAX) || firsts[0] + planes * inner_in > u64::from(u32::MAX) {
                return Err(super::operands::too_many(op, "the data or output", count));
            }
            let bindings: [wgpu::BindingResource; 2] = bindings.try_into().expect("two bindings");
            let pad = (piece_axes.as_slice(), dims.as_slice(), mode, value);
            self.pad_piece(op, data.dtype(), pad, (firsts[0], firsts[1]), bindings)?;
        }
        Ok(())
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
