//! The CumSum kernel (`shaders/cumsum.wgsl`): running sums along one axis, one invocation per
//! line, on the 32- and 64-bit types (the op casts 16-bit floats to f32 around it).

use super::operands::element_typed;
use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::{DType, Recorder, Result, Tensor};

const CUMSUM: &str = include_str!("../../shaders/cumsum.wgsl");

/// WGSL source of CumSum (or with `product` CumProd) on `dtype`; `emulate64`: i64, u64 or f64
/// on u32 pairs (f64 each step rounded from the bits, as the CPU rounds it).
pub fn cumsum_source(dtype: DType, emulate64: bool, product: bool) -> String {
    let (sum, combine, one) = match (emulate64, dtype) {
        (true, DType::F64) => (
            "sf64_add(a, b)",
            "sf64_mul(a, b)",
            "vec2<u32>(0u, 0x3ff00000u)",
        ),
        (true, _) => ("add64(a, b)", "mul64(a, b)", "vec2<u32>(1u, 0u)"),
        (false, _) => ("a + b", "a * b", "T(1)"),
    };
    let mut lines = Vec::new();
    if emulate64 && !product {
        lines.push((
            "// ADD",
            format!("fn add(a: T, b: T) -> T {{ return {sum}; }}"),
        ));
    }
    if product {
        lines.push((
            "// ADD",
            format!("fn add(a: T, b: T) -> T {{ return {combine}; }}"),
        ));
        lines.push((
            "// IDENTITY",
            format!("fn identity() -> T {{ return {one}; }}"),
        ));
    }
    let source = element_typed(CUMSUM, dtype, emulate64.then_some(&lines[..]));
    if emulate64 {
        source
    } else {
        super::operands::specialize(&source, &lines)
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CumSumParams {
    lines: u32,
    axis_len: u32,
    inner: u32,
    start: u32,
    count: u32,
    src_first: u32,
    dst_first: u32,
    pad: u32,
}

impl Recorder {
    /// Records the running sums (or with `product` products) of `x` (seen as
    /// `[outer, axis_len, inner]`) into `out`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cumsum_into(
        &mut self,
        x: &Tensor,
        axis_len: usize,
        inner: usize,
        exclusive: bool,
        reverse: bool,
        product: bool,
        out: &Tensor,
    ) -> Result<()> {
        let op = if product { "CumProd" } else { "CumSum" };
        let n = x.numel() as u64;
        if n == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        if n > u64::from(u32::MAX) {
            return Err(super::operands::too_many(op, "the input", n));
        }
        let elem = x.dtype().size() as u64;
        let slice = (axis_len.max(1) * inner.max(1)) as u64;
        let runs = self.slice_windows(op, n / slice, &[(x, slice * elem), (out, slice * elem)])?;
        let wg = ctx.workgroup_size();
        let kernel = Kernel::CumSum {
            dtype: x.dtype(),
            emulate64: super::operands::emulated(&ctx, x.dtype()),
            exclusive,
            reverse,
            product,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        for run in &runs {
            let lines = run.count * inner.max(1) as u64;
            let grid = grid_for(&ctx, op, lines, wg)?;
            let [(src, src_at), (dst, dst_at)] = [run.windows[0], run.windows[1]];
            let bindings = [x.storage().bind(src), out.storage().bind(dst)];
            let mut start = 0;
            while start < axis_len {
                let count = (axis_len - start).min(LOOP_ITERATIONS_PER_DISPATCH);
                let params = CumSumParams {
                    lines: lines as u32,
                    axis_len: axis_len as u32,
                    inner: inner.max(1) as u32,
                    start: start as u32,
                    count: count as u32,
                    src_first: (src_at / elem) as u32,
                    dst_first: (dst_at / elem) as u32,
                    pad: 0,
                };
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                start += count;
            }
        }
        Ok(())
    }
}
