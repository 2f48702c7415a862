//! ONNX Concat of inputs of whole 32-bit words in one dispatch for up to 6 of them
//! (`shaders/concat.wgsl`). One input at a time, a Transformer decoder's Concat of a key or
//! value cache with its new row took a dispatch per input, 4 of a layer's 21.

use std::sync::Arc;

use super::{grid_for, Kernel};
use crate::{Recorder, Result, Tensor};

/// Inputs one dispatch reads (with the output and the parameters, 8 bindings: WebGPU's
/// storage buffers per stage are 8 at least).
pub const MAX_INPUTS: usize = 6;

/// Bytes from which a Concat of one row whose runs are not all whole `vec4` keeps a copy per
/// input (each moving `vec4` but for its last words; see `kernels/copy.rs`): the word kernel
/// runs at about 0.77 of the `vec4` one on GPUs, which outweighs a dispatch from there.
const WORDS_UP_TO: u64 = 16 << 20;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    units: u32,
    out_run: u32,
    run: u32,
    first: u32,
    ends: [u32; 8],
}

impl Recorder {
    /// Records `out` (`outer` rows of `out_run` words) as `inputs` one after another in each
    /// row, input k `runs[k]` words of each (its rows one after another), with a dispatch per
    /// [`MAX_INPUTS`] inputs. `false`, recording nothing, where the kernel does not apply:
    /// CPU adapters' single rows (buffer copies are a `memcpy` there), a tensor beyond one
    /// binding, an input in the output's buffer, sizes past 32 bits, or one row of more than
    /// 16 MiB whose runs are not whole `vec4`.
    pub(crate) fn concat_words(
        &mut self,
        inputs: &[&Tensor],
        runs: &[u64],
        outer: u64,
        out: &Tensor,
    ) -> Result<bool> {
        const OP: &str = "Concat";
        let ctx = self.context().clone();
        let out_run: u64 = runs.iter().sum();
        let total = outer * out_run;
        let limit = ctx.binding_limit();
        let fits = |t: &Tensor| t.storage().single().is_some_and(|b| b.size() <= limit);
        let quads = |r: u64| r.is_multiple_of(4);
        let usable = total > 0
            && total <= u64::from(u32::MAX)
            && fits(out)
            && inputs
                .iter()
                .all(|t| fits(t) && !Arc::ptr_eq(t.storage(), out.storage()))
            && (outer > 1
                || (!ctx.cpu_kernels()
                    && (runs.iter().all(|&r| quads(r)) || total * 4 <= WORDS_UP_TO)));
        if !usable {
            return Ok(false);
        }
        let wg = ctx.workgroup_size();
        let mut first = 0u64;
        let parts: Vec<(&Tensor, u64)> = inputs
            .iter()
            .zip(runs)
            .filter(|&(_, &r)| r > 0)
            .map(|(&t, &r)| (t, r))
            .collect();
        for group in parts.chunks(MAX_INPUTS) {
            let run: u64 = group.iter().map(|&(_, r)| r).sum();
            let vec4 = quads(out_run) && quads(first) && group.iter().all(|&(_, r)| quads(r));
            let unit = if vec4 { 4 } else { 1 };
            let mut ends = [(run / unit) as u32; 8];
            let mut end = 0;
            for (k, &(_, r)) in group.iter().enumerate() {
                end += r;
                ends[k] = (end / unit) as u32;
            }
            let units = outer * run / unit;
            let params = Params {
                units: units as u32,
                out_run: (out_run / unit) as u32,
                run: (run / unit) as u32,
                first: (first / unit) as u32,
                ends,
            };
            let pipeline = ctx.pipeline(&Kernel::Concat {
                workgroup_size: wg,
                vec4,
            })?;
            ctx.count_quads(vec4);
            let grid = grid_for(&ctx, OP, units, wg)?;
            let mut bindings: Vec<wgpu::BindingResource<'_>> = (0..MAX_INPUTS)
                .map(|k| group.get(k).unwrap_or(&group[0]).0.storage().bind_whole())
                .collect();
            bindings.push(out.storage().bind_whole());
            self.dispatch(OP, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            first += run;
        }
        Ok(true)
    }
}
