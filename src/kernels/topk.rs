//! The TopK kernel (`shaders/topk.wgsl`): the K largest or smallest elements along one axis,
//! sorted, with their i64 indices; one invocation per line (the op casts 16-bit floats to f32
//! around it).

use super::operands::element_typed;
use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::{DType, Error, Recorder, Result, Tensor};

const TOPK: &str = include_str!("../../shaders/topk.wgsl");

/// WGSL source of TopK on `dtype`; `emulate64`: i64, u64 or f64 on u32 pairs.
pub fn topk_source(dtype: DType, emulate64: bool) -> String {
    let before = match dtype {
        // NaN as the native f64 order has it (below).
        DType::F64 => "fn before(a: T, b: T) -> bool { let na = sf64_is_nan(a); let nb = sf64_is_nan(b); return select(sf64_lt(a, b) || (!na && nb), sf64_lt(b, a) || (na && !nb), LARGEST); }".to_string(),
        _ => {
            let lt = if dtype == DType::I64 { "lt_s64" } else { "lt_u64" };
            format!("fn before(a: T, b: T) -> bool {{ return select({lt}(a, b), {lt}(b, a), LARGEST); }}")
        }
    };
    let emulated = [("// BEFORE", before)];
    let source = element_typed(TOPK, dtype, emulate64.then_some(&emulated[..]));
    if emulate64 {
        return source;
    }
    let is_nan = match dtype {
        DType::F32 => super::elementwise::f32_is_nan,
        DType::F64 => super::elementwise::f64_is_nan,
        _ => return source,
    };
    // NaN is larger than every number, as onnxruntime and numpy order it: first among the
    // largest, last among the smallest (NaN tested on the bits, which drivers keep).
    let before = format!(
        "fn before(a: T, b: T) -> bool {{ let na = {}; let nb = {}; return select((a < b) || (!na && nb), (a > b) || (na && !nb), LARGEST); }}",
        is_nan("a"),
        is_nan("b")
    );
    super::operands::specialize(&source, &[("// BEFORE", before)])
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TopKParams {
    lines: u32,
    axis_len: u32,
    inner: u32,
    k: u32,
    start: u32,
    count: u32,
    src_first: u32,
    values_first: u32,
    indices_first: u32,
    pad: [u32; 3],
}

impl Recorder {
    /// Records the `k` best of each line of `x` (seen as `[outer, axis_len, inner]`) into
    /// `values` and `indices` (`[outer, k, inner]`, i64).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn topk_into(
        &mut self,
        x: &Tensor,
        axis_len: usize,
        inner: usize,
        k: usize,
        largest: bool,
        values: &Tensor,
        indices: &Tensor,
    ) -> Result<()> {
        const OP: &str = "TopK";
        if values.numel() == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        for t in [x, values, indices] {
            if t.numel() as u64 > u64::from(u32::MAX) / 2 {
                return Err(super::operands::too_many(OP, "a tensor", t.numel() as u64));
            }
        }
        let elem = x.dtype().size() as u64;
        let (inner_len, axis) = (inner.max(1) as u64, axis_len.max(1) as u64);
        let outer = x.numel() as u64 / (axis * inner_len);
        let runs = self.slice_windows(
            OP,
            outer,
            &[
                (x, axis * inner_len * elem),
                (values, k as u64 * inner_len * elem),
                (indices, k as u64 * inner_len * 8),
            ],
        )?;
        let wg = ctx.workgroup_size();
        let kernel = Kernel::TopK {
            dtype: x.dtype(),
            emulate64: super::operands::emulated(&ctx, x.dtype()),
            largest,
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        // Each element costs up to 2 K + 1 loop iterations (finding its place, shifting).
        let per_element = 2 * k + 1;
        if per_element > LOOP_ITERATIONS_PER_DISPATCH {
            return Err(Error::LimitExceeded {
                op: OP,
                what: format!("K = {k}: {per_element} loop iterations per element"),
                limit: "iterations one invocation runs per dispatch",
                needed: per_element as u64,
                max: LOOP_ITERATIONS_PER_DISPATCH as u64,
            });
        }
        let chunk = LOOP_ITERATIONS_PER_DISPATCH / per_element;
        for run in &runs {
            let lines = run.count * inner_len;
            let grid = grid_for(&ctx, OP, lines, wg)?;
            let [(src, src_at), (kept, kept_at), (picked, picked_at)] =
                [run.windows[0], run.windows[1], run.windows[2]];
            let bindings = [
                x.storage().bind(src),
                values.storage().bind(kept),
                indices.storage().bind(picked),
            ];
            let mut start = 0;
            while start < axis_len {
                let count = (axis_len - start).min(chunk);
                let params = TopKParams {
                    lines: lines as u32,
                    axis_len: axis_len as u32,
                    inner: inner.max(1) as u32,
                    k: k as u32,
                    start: start as u32,
                    count: count as u32,
                    src_first: (src_at / elem) as u32,
                    values_first: (kept_at / elem) as u32,
                    indices_first: (picked_at / 8) as u32,
                    pad: [0; 3],
                };
                self.dispatch(OP, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                start += count;
            }
        }
        Ok(())
    }
}
