//! Determinants (`shaders/det.wgsl`): one invocation per matrix, Gaussian elimination with
//! partial pivoting in place, its columns cut over dispatches of bounded length (matrices
//! beyond one binding in runs of whole matrices).

use super::{grid_for, Kernel};
use crate::{DType, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    matrices: u32,
    n: u32,
    first: u32,
    end: u32,
    row: u32,
    plane: u32,
    a_first: u32,
    det_first: u32,
}

/// The WGSL of the kernel for f32 or f64 matrices; `emulate64`: f64 on u32 pairs.
pub(crate) fn det_source(template: &str, f64: bool, emulate64: bool) -> String {
    let dtype = if f64 { DType::F64 } else { DType::F32 };
    if !(f64 && emulate64) {
        return super::operands::element_typed(template, dtype, None);
    }
    let line = |marker: &'static str, text: &str| (marker, text.to_string());
    let emulated = [
        line(
            "// ONE",
            "fn t_one() -> T { return vec2<u32>(0u, 0x3ff00000u); }",
        ),
        line(
            "// IS ZERO",
            "fn t_is_zero(x: T) -> bool { return sf64_is_zero(x); }",
        ),
        line("// ABS", "fn t_abs(x: T) -> T { return sf64_abs(x); }"),
        line(
            "// GREATER",
            "fn t_greater(x: T, y: T) -> bool { return sf64_lt(y, x); }",
        ),
        line("// NEG", "fn t_neg(x: T) -> T { return sf64_neg(x); }"),
        line(
            "// MUL",
            "fn t_mul(x: T, y: T) -> T { return sf64_mul(x, y); }",
        ),
        line(
            "// DIV",
            "fn t_div(x: T, y: T) -> T { return sf64_div(x, y); }",
        ),
        line(
            "// SUB",
            "fn t_sub(x: T, y: T) -> T { return sf64_sub(x, y); }",
        ),
    ];
    super::operands::element_typed(template, dtype, Some(&emulated))
}

impl Recorder {
    /// Records the determinant of each `[n, n]` matrix of `a` (`[B, n, n]` in all, f32 or
    /// f64, overwritten) into `out` (`[B]`, `a`'s dtype). Shapes and dtypes are the caller's
    /// to check. Matrices beyond one binding run in windows of whole matrices (copied into
    /// buffers of whole matrices where one would cross a buffer's end).
    pub(crate) fn det_into(
        &mut self,
        op: &'static str,
        a: &Tensor,
        n: usize,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let f64 = a.dtype() == DType::F64;
        let emulate64 = super::operands::emulated(&ctx, a.dtype());
        let matrices = out.numel() as u64;
        if matrices == 0 {
            return Ok(());
        }
        if matrices > u64::from(u32::MAX) || a.numel() as u64 >= u64::from(u32::MAX) {
            return Err(super::operands::too_many(
                op,
                "the matrices' elements",
                a.numel() as u64,
            ));
        }
        let elem = a.dtype().size() as u64;
        let n2 = (n * n) as u64;
        // Matrices that would lie across buffer ends are reduced in a copy of whole matrices.
        let relaid = self.relaid_in_whole_slices(a, n2 * elem, true)?;
        let a = relaid.as_ref().unwrap_or(a);
        let runs = self.slice_windows(op, matrices, &[(a, n2 * elem), (out, elem)])?;
        let wg = ctx.workgroup_size();
        let pipeline = ctx.pipeline(&Kernel::Det {
            workgroup_size: wg,
            f64,
            emulate64,
        })?;
        for run in runs {
            let [(a_window, a_at), (det_window, det_at)] = [run.windows[0], run.windows[1]];
            let grid = grid_for(&ctx, op, run.count, wg)?;
            let bindings = [a.storage().bind(a_window), out.storage().bind(det_window)];
            // Column k costs about (n - k)^2 loop iterations: the columns are cut into
            // dispatches of at most LOOP_ITERATIONS_PER_DISPATCH each (lavapipe stops a
            // shader's loops after about 65 000 iterations in all, and short dispatches keep
            // clear of watchdogs).
            let budget = super::LOOP_ITERATIONS_PER_DISPATCH;
            let mut first = 0;
            while first < n {
                let mut end = first + 1;
                let mut cost = (n - first) * (n - first);
                while end < n && cost + (n - end) * (n - end) <= budget {
                    cost += (n - end) * (n - end);
                    end += 1;
                }
                let params = Params {
                    matrices: run.count as u32,
                    n: n as u32,
                    first: first as u32,
                    end: end as u32,
                    row: grid[0] * wg,
                    plane: grid[1],
                    a_first: (a_at / elem) as u32,
                    det_first: (det_at / elem) as u32,
                };
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                first = end;
            }
        }
        Ok(())
    }
}
