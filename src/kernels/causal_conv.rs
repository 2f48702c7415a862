//! The CausalConvWithState kernel (`shaders/causal_conv.wgsl`, f32): the convolution's
//! outputs and the state passed on, in one dispatch (one per window of whole channel rows
//! for tensors beyond one binding).

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
    /// Tensors beyond one binding run in passes over windows of whole channel rows: this
    /// pass's rows (from row `row_first` of all), and where its first row lies in each window
    /// (elements): input, output, past and present.
    rows: u32,
    row_first: u32,
    input_first: u32,
    output_first: u32,
    past_first: u32,
    present_first: u32,
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
        // The weight and bias are bound whole; the rest in windows of whole channel rows.
        let limit = ctx.binding_limit();
        for t in [weight].into_iter().chain(bias) {
            if !t.storage().fits_one_binding(limit) {
                return Err(Error::LimitExceeded {
                    op,
                    what: "the weight or bias bound at once".into(),
                    limit: "max_storage_buffer_binding_size",
                    needed: t.byte_len(),
                    max: limit,
                });
            }
        }
        let rows = (batch * channels) as u64;
        let carry = k as u64 - 1;
        let (row_bytes, carry_bytes) = (length as u64 * 4, carry * 4);
        // Rows that would lie across a buffer end: copies laid out in whole rows.
        let input_relaid = self.relaid_in_whole_slices(input, row_bytes, true)?;
        let output_relaid = self.relaid_in_whole_slices(output, row_bytes, false)?;
        let past_relaid = match past {
            Some(p) => self.relaid_in_whole_slices(p, carry_bytes, true)?,
            None => None,
        };
        let present_relaid = self.relaid_in_whole_slices(present, carry_bytes, false)?;
        let input_used = input_relaid.as_ref().unwrap_or(input);
        let output_used = output_relaid.as_ref().unwrap_or(output);
        let past_used = past_relaid.as_ref().or(past);
        let present_used = present_relaid.as_ref().unwrap_or(present);
        let mut sliced = vec![
            (input_used, row_bytes),
            (output_used, row_bytes),
            (present_used, carry_bytes),
        ];
        sliced.extend(past_used.map(|p| (p, carry_bytes)));
        let runs = self.slice_windows(op, rows, &sliced)?;
        let pipeline = ctx.pipeline(&Kernel::CausalConv {
            workgroup_size: ctx.workgroup_size(),
        })?;
        for run in runs {
            let at = |j: usize| run.windows[j];
            let first = |j: usize| (at(j).1 / 4) as u32;
            let invocations = run.count * (length as u64 + carry);
            self.causal_conv_pass(
                op,
                &pipeline,
                [batch, channels, length, k],
                (bias, past.is_some(), silu),
                (run.first, run.count),
                [
                    first(0),
                    first(1),
                    past_used.map_or(0, |_| first(3)),
                    first(2),
                ],
                [
                    input_used.storage().bind(at(0).0),
                    weight.storage().bind_whole(),
                    bias.unwrap_or(weight).storage().bind_whole(),
                    match past_used {
                        Some(p) => p.storage().bind(at(3).0),
                        None => weight.storage().bind_whole(),
                    },
                    output_used.storage().bind(at(1).0),
                    present_used.storage().bind(at(2).0),
                ],
                invocations,
            )?;
        }
        if let Some(relaid) = output_relaid {
            self.copy_relaid_back(relaid, output)?;
        }
        if let Some(relaid) = present_relaid {
            self.copy_relaid_back(relaid, present)?;
        }
        Ok(())
    }

    /// One dispatch of [`Recorder::causal_conv_into`] over `rows` (first, count) of channel
    /// rows, its windows' first elements (input, output, past, present) in `firsts`.
    #[allow(clippy::too_many_arguments)]
    fn causal_conv_pass(
        &mut self,
        op: &'static str,
        pipeline: &std::sync::Arc<crate::gpu::Pipeline>,
        [batch, channels, length, k]: [usize; 4],
        (bias, has_state, silu): (Option<&Tensor>, bool, bool),
        (row_first, rows): (u64, u64),
        firsts: [u32; 4],
        bindings: [wgpu::BindingResource<'_>; 6],
        invocations: u64,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, invocations, wg)?;
        let params = Params {
            batch: batch as u32,
            channels: channels as u32,
            length: length as u32,
            k: k as u32,
            has_state: u32::from(has_state),
            has_bias: u32::from(bias.is_some()),
            silu: u32::from(silu),
            row: grid[0] * wg,
            plane: grid[1],
            rows: rows as u32,
            row_first: row_first as u32,
            input_first: firsts[0],
            output_first: firsts[1],
            past_first: firsts[2],
            present_first: firsts[3],
            pad: [0; 3],
        };
        // Absent inputs are bound to the weight (read-only, never read).
        self.dispatch(op, pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }
}
