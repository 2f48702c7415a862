//! ONNX CausalConvWithState-27: the stateful depthwise causal 1-D convolution of Gated
//! DeltaNet and Mamba layers (the short convolution before LinearAttention), with its state
//! carried from one call to the next for incremental decoding.

use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "CausalConvWithState";

impl Recorder {
    /// Records ONNX CausalConvWithState: `input` [batch, channels, length] convolved per
    /// channel by `weight` [channels, 1, k] over the k - 1 positions of `past_state` [batch,
    /// channels, k - 1] (zeros when absent) and the input, plus `bias` `[channels]`, then SiLU
    /// where `activation` is `silu` or `swish`. Returns `[output, present_state]` (the last
    /// k - 1 positions). One dispatch on f32; f16 and bf16 are computed in f32 and rounded
    /// once.
    #[allow(clippy::too_many_arguments)]
    pub fn causal_conv_with_state_to(
        &mut self,
        input: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        past_state: Option<&Tensor>,
        activation: &str,
        outs: [Out; 2],
    ) -> Result<[Tensor; 2]> {
        let mut named = vec![("input", input), ("weight", weight)];
        named.extend(bias.map(|b| ("bias", b)));
        named.extend(past_state.map(|p| ("past_state", p)));
        self.check_inputs(OP, &named)?;
        let silu = match activation {
            "none" => false,
            "silu" | "swish" => true,
            other => {
                return Err(Error::invalid(
                    OP,
                    "activation",
                    format!(
                        "activation is '{}'; it is 'none', 'silu' or 'swish'",
                        other.escape_debug()
                    ),
                ))
            }
        };
        let dtype = input.dtype();
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::invalid(
                OP,
                "input",
                format!("input is {dtype}; {OP} takes f32, f16 or bf16"),
            ));
        }
        for (name, t) in &named[1..] {
            if t.dtype() != dtype {
                return Err(Error::invalid(
                    OP,
                    *name,
                    format!("{name} is {} but input is {dtype}", t.dtype()),
                ));
            }
        }
        let [batch, channels, length] = match input.shape() {
            &[b, c, l] => [b, c, l],
            s => {
                return Err(Error::invalid(
                    OP,
                    "input",
                    format!("input has shape {s:?}; it must be [batch, channels, length]"),
                ))
            }
        };
        let k = match weight.shape() {
            &[c, 1, k] if c == channels && k >= 1 => k,
            s => {
                return Err(Error::invalid(
                    OP,
                    "weight",
                    format!("weight has shape {s:?}; it must be [{channels}, 1, k] with k >= 1"),
                ))
            }
        };
        if let Some(b) = bias {
            if b.shape() != [channels] {
                return Err(Error::invalid(
                    OP,
                    "bias",
                    format!("bias has shape {:?}; it must be [{channels}]", b.shape()),
                ));
            }
        }
        let state_shape = [batch, channels, k - 1];
        if let Some(p) = past_state {
            if p.shape() != state_shape {
                return Err(Error::invalid(
                    OP,
                    "past_state",
                    format!(
                        "past_state has shape {:?}; it must be {state_shape:?}",
                        p.shape()
                    ),
                ));
            }
        }
        let [out, state_out] = outs;
        if dtype == DType::F32 {
            let output = out.tensor(self, dtype, &[batch, channels, length])?;
            let present = state_out.tensor(self, dtype, &state_shape)?;
            self.causal_conv_into(OP, input, weight, bias, past_state, silu, &output, &present)?;
            return Ok([output, present]);
        }
        // 16-bit types: the same in f32, each result rounded once.
        let wide = |rec: &mut Recorder, t: &Tensor| rec.cast(t, DType::F32);
        let (wi, ww) = (wide(self, input)?, wide(self, weight)?);
        let wb = bias.map(|b| wide(self, b)).transpose()?;
        let wp = past_state.map(|p| wide(self, p)).transpose()?;
        let output = self.alloc(DType::F32, &[batch, channels, length])?;
        let present = self.alloc(DType::F32, &state_shape)?;
        self.causal_conv_into(
            OP,
            &wi,
            &ww,
            wb.as_ref(),
            wp.as_ref(),
            silu,
            &output,
            &present,
        )?;
        let y = self.cast_to(&output, dtype, out)?;
        let s = self.cast_to(&present, dtype, state_out)?;
        for t in [Some(wi), Some(ww), wb, wp, Some(output), Some(present)]
            .into_iter()
            .flatten()
        {
            self.release(t);
        }
        Ok([y, s])
    }
}
