//! The index-gather kernel (`shaders/gather_index.wgsl`): ONNX Gather, the elements of a data
//! tensor picked along one axis by an index tensor on the GPU, moved as bits in words.

use super::divide::Divisor;
use super::{grid_for, Kernel};
use crate::{DType, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherRowsParams {
    quads: u32,
    row_quads: u32,
    indices: u32,
    axis_dim: u32,
    site: u32,
    pad0: u32,
    row_quads_div: Divisor,
    indices_div: Divisor,
    pad1: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherIndexParams {
    count: u32,
    units: u32,
    axis_dim: u32,
    inner: u32,
    indices: u32,
    dst_base: u32,
    site: u32,
    pad: u32,
    inner_div: Divisor,
    indices_div: Divisor,
}

impl Recorder {
    /// Records `out = data[outer][indices][inner]` for `data` seen as `[outer, axis_dim,
    /// inner]` and `indices` (i32 or i64, any shape, flattened): `out` holds `outer x
    /// indices x inner` elements. With `elements: Some(k)` (GatherElements), `indices` has
    /// the output's shape `[outer, k, inner]` and `out[o][j][i] = data[o][indices[o][j][i]][i]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gather_index_into(
        &mut self,
        op: &'static str,
        data: &Tensor,
        indices: &Tensor,
        axis_dim: usize,
        inner: usize,
        elements: Option<usize>,
        rule: crate::recorder::IndexRule,
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        super::operands::check_bound_whole(
            &ctx,
            op,
            &[(data, "data"), (indices, "indices"), (out, "the output")],
        )?;
        if count > u64::from(u32::MAX) || data.numel() as u64 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the data or output", count));
        }
        let elem = data.dtype().size() as u32;
        let row_bytes = inner.max(1) as u64 * u64::from(elem);
        if elements.is_none() && row_bytes.is_multiple_of(16) {
            return self.gather_rows_into(op, data, indices, axis_dim, row_bytes / 16, rule, out);
        }
        let lanes = (4 / elem).max(1) as u64;
        let units = count.div_ceil(lanes);
        let wg = ctx.workgroup_size();
        let kernel = Kernel::GatherIndex {
            elem_bytes: elem,
            index64: indices.dtype() == DType::I64,
            elements: elements.is_some(),
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let (site, faults) = self.index_site(op, rule)?;
        let inner = inner.max(1) as u32;
        // The output's middle extent: the indices' axis for GatherElements.
        let middle = elements.unwrap_or(indices.numel()).max(1) as u32;
        let params = GatherIndexParams {
            count: count as u32,
            units: units as u32,
            axis_dim: axis_dim as u32,
            inner,
            indices: middle,
            dst_base: 0,
            site,
            pad: 0,
            inner_div: Divisor::new(inner),
            indices_div: Divisor::new(middle),
        };
        let bindings = [
            data.storage().bind_whole(),
            indices.storage().bind_whole(),
            out.storage().bind_whole(),
            faults.storage().bind_whole(),
        ];
        let grid = grid_for(&ctx, op, units, wg)?;
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }

    /// Gather (not GatherElements) of rows of `row_quads` 16-byte quads each: a quad per
    /// invocation (`shaders/gather_rows.wgsl`).
    #[allow(clippy::too_many_arguments)]
    fn gather_rows_into(
        &mut self,
        op: &'static str,
        data: &Tensor,
        indices: &Tensor,
        axis_dim: usize,
        row_quads: u64,
        rule: crate::recorder::IndexRule,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let quads = out.byte_len() / 16;
        if quads > u64::from(u32::MAX) || data.byte_len() / 16 > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the data or output", quads));
        }
        let wg = ctx.workgroup_size();
        let kernel = Kernel::GatherRows {
            index64: indices.dtype() == DType::I64,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let (site, faults) = self.index_site(op, rule)?;
        let middle = indices.numel().max(1) as u32;
        let params = GatherRowsParams {
            quads: quads as u32,
            row_quads: row_quads as u32,
            indices: middle,
            axis_dim: axis_dim as u32,
            site,
            pad0: 0,
            row_quads_div: Divisor::new(row_quads as u32),
            indices_div: Divisor::new(middle),
            pad1: [0; 2],
        };
        let bindings = [
            data.storage().bind_whole(),
            indices.storage().bind_whole(),
            out.storage().bind_whole(),
            faults.storage().bind_whole(),
        ];
        let grid = grid_for(&ctx, op, quads, wg)?;
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }
}
