//! ONNX LinearAttention (opset 27): the recurrent state of linear-attention language models
//! (linear, gated, delta and gated delta rules; grouped query heads), computed in f32 by one
//! dispatch over the whole sequence (see `kernels/linear_attention.rs`).

use crate::kernels::linear_attention::{LinearAttentionPlan, UpdateRule};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "LinearAttention";

/// The attributes of a LinearAttention node.
#[derive(Clone, Debug)]
pub struct LinearAttention {
    /// Heads of the query (a positive multiple of `kv_num_heads`).
    pub q_num_heads: i64,
    /// Heads of the keys and values.
    pub kv_num_heads: i64,
    /// 0: `1 / sqrt(dk)`.
    pub scale: f32,
    /// `linear`, `gated`, `delta` or `gated_delta`.
    pub update_rule: String,
}

/// The optional inputs.
#[derive(Clone, Copy, Default)]
pub struct LinearAttentionState<'a> {
    /// The state before the first step (zeros when absent).
    pub past_state: Option<&'a Tensor>,
    /// The gated rules' per-step decay (its log, as the op takes it).
    pub decay: Option<&'a Tensor>,
    /// The delta rules' per-step update strength.
    pub beta: Option<&'a Tensor>,
    /// The dtype of `present_state` when there is no `past_state` (else `past_state`'s);
    /// `None`: the query's.
    pub state_dtype: Option<DType>,
}

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

impl LinearAttention {
    /// Checks the inputs' dtypes and shapes against the attributes; the plan of the call.
    pub fn plan(
        &self,
        [query, key, value]: [&[usize]; 3],
        decay: Option<&[usize]>,
        beta: Option<&[usize]>,
        past_state: Option<&[usize]>,
    ) -> Result<LinearAttentionPlan> {
        let rule = UpdateRule::parse(&self.update_rule).ok_or_else(|| {
            invalid(
                "update_rule",
                format!(
                    "update_rule is '{}'; it must be linear, gated, delta or gated_delta",
                    crate::error::escape(&self.update_rule)
                ),
            )
        })?;
        let (hq, hkv) = (self.q_num_heads, self.kv_num_heads);
        if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
            return Err(invalid(
                "q_num_heads",
                format!("q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})"),
            ));
        }
        let (hq, hkv) = (hq as usize, hkv as usize);
        for (name, shape) in [("query", query), ("key", key), ("value", value)] {
            if shape.len() != 3 {
                return Err(invalid(
                    name,
                    format!("{name} has shape {shape:?}; it must be 3-D [batch, steps, heads * head size]"),
                ));
            }
        }
        let (batch, steps) = (query[0], query[1]);
        for (name, shape) in [("key", key), ("value", value)] {
            if shape[..2] != query[..2] {
                return Err(invalid(
                    name,
                    format!("{name} has shape {shape:?} but query {query:?}: batch and steps must agree"),
                ));
            }
        }
        let per_head = |name: &str, size: usize, heads: usize| -> Result<usize> {
            if !size.is_multiple_of(heads) || size == 0 {
                return Err(invalid(
                    name,
                    format!("{name}'s last axis ({size}) is not a positive multiple of its {heads} heads"),
                ));
            }
            Ok(size / heads)
        };
        let dk = per_head("query", query[2], hq)?;
        if key[2] != hkv * dk {
            return Err(invalid(
                "key",
                format!(
                    "key's last axis is {} but kv_num_heads * dk = {hkv} * {dk} (dk from query)",
                    key[2]
                ),
            ));
        }
        let dv = per_head("value", value[2], hkv)?;
        let step_input = |name: &str, shape: &[usize], sizes: &[usize]| -> Result<usize> {
            match shape {
                [b, t, n] if *b == batch && *t == steps && sizes.contains(n) => Ok(*n),
                _ => Err(invalid(
                    name,
                    format!(
                        "{name} has shape {shape:?}; it must be [{batch}, {steps}, n] with n one of {sizes:?}"
                    ),
                )),
            }
        };
        let decay_per_key = match decay {
            Some(shape) if rule.gated() => {
                step_input("decay", shape, &[hkv * dk, hkv])? == hkv * dk
            }
            None if rule.gated() => {
                return Err(invalid(
                    "decay",
                    format!("update_rule '{}' needs decay", self.update_rule),
                ))
            }
            _ => false,
        };
        let beta_per_head = match beta {
            Some(shape) if rule.delta() => step_input("beta", shape, &[hkv, 1])? == hkv && hkv > 1,
            None if rule.delta() => {
                return Err(invalid(
                    "beta",
                    format!("update_rule '{}' needs beta", self.update_rule),
                ))
            }
            _ => false,
        };
        if let Some(shape) = past_state {
            if shape != [batch, hkv, dk, dv] {
                return Err(invalid(
                    "past_state",
                    format!(
                        "past_state has shape {shape:?}; it must be [{batch}, {hkv}, {dk}, {dv}]"
                    ),
                ));
            }
        }
        let scale = if self.scale == 0.0 {
            1.0 / (dk as f32).sqrt()
        } else {
            self.scale
        };
        Ok(LinearAttentionPlan {
            batch,
            steps,
            q_heads: hq,
            kv_heads: hkv,
            dk,
            dv,
            rule,
            decay_per_key,
            beta_per_head,
            scale,
            time_major: false,
        })
    }
}

impl Recorder {
    /// The kernel's five f32 operands: query, key and value, the gate exp(decay) (computed
    /// once here rather than by each of the dv columns that share it) and beta. The rule
    /// reads neither of the last two where it is not given: any f32 tensor fills the binding.
    pub(crate) fn linear_attention_operands(
        &mut self,
        qkv: [&Tensor; 3],
        decay: Option<&Tensor>,
        beta: Option<&Tensor>,
    ) -> Result<[Tensor; 5]> {
        let wide = |rec: &mut Recorder, t: &Tensor| rec.cast_to(t, DType::F32, Out::NEW);
        let [q, k, v] = [
            wide(self, qkv[0])?,
            wide(self, qkv[1])?,
            wide(self, qkv[2])?,
        ];
        let gate = match decay {
            Some(t) => {
                let wide_decay = wide(self, t)?;
                let gate = self.elementwise("Exp", &wide_decay, None)?;
                self.release(wide_decay);
                gate
            }
            None => q.clone(),
        };
        let beta = match beta {
            Some(t) => wide(self, t)?,
            None => q.clone(),
        };
        Ok([q, k, v, gate, beta])
    }

    /// Records ONNX LinearAttention: returns `output` ([B, T, H_q * dv], the query's dtype) and
    /// `present_state` ([B, H_kv, dk, dv]). 16-bit inputs are computed in f32 and the results
    /// rounded once (the state too, only at the end).
    pub fn linear_attention_to(
        &mut self,
        attrs: &LinearAttention,
        [query, key, value]: [&Tensor; 3],
        optional: LinearAttentionState,
        [out, state_out]: [Out; 2],
    ) -> Result<[Tensor; 2]> {
        let mut named = vec![("query", query), ("key", key), ("value", value)];
        for (name, t) in [
            ("past_state", optional.past_state),
            ("decay", optional.decay),
            ("beta", optional.beta),
        ] {
            if let Some(t) = t {
                named.push((name, t));
            }
        }
        self.check_inputs(OP, &named)?;
        let dtype = query.dtype();
        for (name, t) in &named {
            if !is_float(t.dtype()) || (*name != "past_state" && t.dtype() != dtype) {
                return Err(invalid(
                    name,
                    format!(
                        "{name} is {} and query {dtype}; query, key, value, decay and beta share one of f32, f16, bf16 (past_state any of them)",
                        t.dtype()
                    ),
                ));
            }
        }
        let state_dtype = optional
            .past_state
            .map(Tensor::dtype)
            .or(optional.state_dtype)
            .unwrap_or(dtype);
        if !is_float(state_dtype) {
            return Err(invalid(
                "present_state",
                format!("present_state is {state_dtype}; it must be f32, f16 or bf16"),
            ));
        }
        let plan = attrs.plan(
            [query.shape(), key.shape(), value.shape()],
            optional.decay.map(Tensor::shape),
            optional.beta.map(Tensor::shape),
            optional.past_state.map(Tensor::shape),
        )?;
        let [q, k, v, decay, beta] = self.linear_attention_operands(
            [query, key, value],
            optional.decay.filter(|_| plan.rule.gated()),
            optional.beta.filter(|_| plan.rule.delta()),
        )?;
        let state_shape = [plan.batch, plan.kv_heads, plan.dk, plan.dv];
        // A new buffer: the kernel updates the state in place, and past_state is an input.
        let state = self.alloc(DType::F32, &state_shape)?;
        match optional.past_state {
            Some(p) => {
                self.cast_to(p, DType::F32, Out::into("present_state", &state))?;
            }
            None => self.clear(state.storage(), 0, state.storage().size())?,
        }
        let output_shape = [plan.batch, plan.steps, plan.q_heads * plan.dv];
        let f32_output = dtype == DType::F32;
        let output = if f32_output {
            out.tensor(self, DType::F32, &output_shape)?
        } else {
            self.alloc(DType::F32, &output_shape)?
        };
        self.linear_attention_into(OP, &plan, [&q, &k, &v, &decay, &beta], &state, &output)?;
        let y = if f32_output {
            output
        } else {
            let y = self.cast_to(&output, dtype, out)?;
            self.release(output);
            y
        };
        let s = self.cast_to(&state, state_dtype, state_out)?;
        if !s.shares_buffer(&state) {
            self.release(state);
        }
        for t in [q, k, v, decay, beta] {
            self.release(t);
        }
        Ok([y, s])
    }
}
