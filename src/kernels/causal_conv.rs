//! The CausalConvWithState kernel (`shaders/causal_conv.wgsl`, f32): the convolution's
//! outputs and the state passed on, in one dispatch.

use super::{grid_for, Kernel};
use crate::{Error, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    channels: u32,
    length: u32,
    k: u32,
    has_state: u32,
    has_bias: u32,
    silu: u32,
    row: u32,
    plane: u32,
    pad: [u32; 3],
}

impl Recorder {
    /// Records the convolution of `input` [batch, channels, length] by `weight` [channels, 1,
    /// k] after `past` [batch, channels, k - 1] (zeros when `None`), plus `bias` `[channels]`,
    /// then SiLU where `silu`, into `output`, and the last k - 1 positions into `present`.
    /// All f32, shapes checked by the caller.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn causal_conv_into(
        &mut self,
        op: &'static str,
        input: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        past: Option<&Tensor>,
        silu: bool,
        output: &Tensor,
        present: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let [batch, channels, length] = [0, 1, 2].map(|a| input.shape()[a]);
        let k = weight.shape()[2];
        let invocations = (output.numel() + present.numel()) as u64;
        if invocations == 0 {
            return Ok(());
        }
        if invocations > u64::from(u32::MAX) {
            return Err(super::operands::too_many(
                op,
                "the output and state",
                invocations,
            ));
        }
        let limit = ctx.binding_limit();
        let all = [input, weight, output, present]
            .into_iter()
            .chain(bias)
            .chain(past);
        for t in all {
            if !t.storage().fits_one_binding(limit) {
                return Err(Error::LimitExceeded {
                    op,
                    what: "a tensor bound at once".into(),
                    limit: "max_storage_buffer_binding_size",
                    needed: t.byte_len(),
                    max: limit,
                });
            }
        }
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, invocations, wg)?;
        let params = Params {
            batch: batch as u32,
            channels: channels as u32,
            length: length as u32,
            k: k as u32,
            has_state: u32::from(past.is_some()),
            has_bias: u32::from(bias.is_some()),
            silu: u32::from(silu),
            row: grid[0] * wg,
            plane: grid[1],
            pad: [0; 3],
        };
        let pipeline = ctx.pipeline(&Kernel::CausalConv { workgroup_size: wg })?;
        // Absent inputs are bound to the input (read-only, never read).
        let tensors = [
            input,
            weight,
            bias.unwrap_or(input),
            past.unwrap_or(input),
            output,
            present,
        ];
        let bindings: Vec<_> = tensors.iter().map(|t| t.storage().bind_whole()).collect();
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }
}
