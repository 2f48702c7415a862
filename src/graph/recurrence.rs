//! Scans whose body is a recurrence the crate has a kernel of its own for, run by that kernel
//! instead of iterating the body: ONNX LinearAttention's expansion (the op's function body in
//! opset 27, which exporters and runtimes without the op produce) is a Scan over the time steps
//! whose step reads and writes the whole [B, H, dk, dv] state several times; its kernel runs
//! the steps in a few dispatches (one per stretch of steps), each state column held by the
//! invocations that update it.
//!
//! The same recurrence as PyTorch's dynamo exporter writes a `torch.scan` of it is recognized
//! too, written with matrix products (the key's row times the state instead of the transposed
//! state times its column) or with broadcast products and sums over the key axis, per-head
//! decay and beta unsqueezed in the body, no scale.
//!
//! The body is recognized by its data flow, not by names: every node of the body must be part
//! of the pattern, each input and attribute that changes the arithmetic (axes, the transpose's
//! permutation, the operand order of `Sub`, the scale) is checked, and the shapes of the actual
//! inputs must be the ones the kernel reads. Anything else runs as a Scan, so a body that only
//! resembles the expansion keeps its own meaning. `ContextOptions::scan_recurrences` turns the
//! recognition off for comparisons.

use std::collections::HashMap;
use std::sync::Arc;

use super::exec::{NodeArgs, Scope};
use super::scan::{ScanAttrs, ScanPlan};
use super::{Attr, Graph, Node};
use crate::kernels::linear_attention::{LinearAttentionPlan, UpdateRule};
use crate::{DType, HostTensor, Out, Recorder, Result, Tensor};

/// What the body computes, found from its nodes alone: the roles of its inputs (indices among
/// the body's inputs; 0 is the state) and the constants of its arithmetic.
#[derive(Clone, Debug, PartialEq)]
struct LinearAttentionBody {
    /// Body inputs read without a Cast to f32.
    uncast: Vec<bool>,
    rule: UpdateRule,
    query: usize,
    key: usize,
    value: usize,
    decay: Option<usize>,
    beta: Option<usize>,
    /// Decay and beta given one per head as [T, B, H] and unsqueezed by the body (PyTorch's
    /// `g.exp()[..., None, None]` and `beta[..., None]`), rather than as [T, B, H, 1].
    decay_unsqueezed: bool,
    beta_unsqueezed: bool,
    scale: f32,
    /// The output's dtype: the body's last cast (to the query's dtype), f32 without one.
    output: OutputCast,
    /// Where the body spreads the state over query heads (grouped-query attention): the
    /// shapes of its Expand and Reshape, checked against the inputs' sizes.
    spread: Option<(Vec<i64>, Vec<i64>)>,
}

#[derive(Clone, Debug, PartialEq)]
enum OutputCast {
    None,
    /// `CastLike` to body input `i`.
    Like(usize),
    To(DType),
}

/// The body's nodes by the value they produce, and which ones the pattern took.
struct Body<'a> {
    graph: &'a Graph,
    scope: &'a Scope<'a>,
    producer: HashMap<&'a str, usize>,
    matched: Vec<bool>,
    /// Body inputs the pattern reads without a Cast to f32 (which must then be f32).
    uncast: Vec<bool>,
    decay_unsqueezed: bool,
    beta_unsqueezed: bool,
}

/// Whether `axes` is the one axis `want` of a tensor of rank `rank` (negative axes count from
/// the end).
fn one_axis(axes: &[i64], rank: i64, want: i64) -> bool {
    matches!(axes, [a] if *a == want || *a + rank == want)
}

impl<'a> Body<'a> {
    fn new(graph: &'a Graph, scope: &'a Scope<'a>) -> Body<'a> {
        let mut producer = HashMap::new();
        for (k, node) in graph.nodes.iter().enumerate() {
            for o in &node.outputs {
                producer.insert(o.as_str(), k);
            }
        }
        Body {
            graph,
            scope,
            producer,
            matched: vec![false; graph.nodes.len()],
            uncast: vec![false; graph.inputs.len()],
            decay_unsqueezed: false,
            beta_unsqueezed: false,
        }
    }

    /// The node producing `value` when it is an `op` of one output; the pattern takes it.
    fn node(&mut self, value: &str, op: &str) -> Option<&'a Node> {
        let k = *self.producer.get(value)?;
        let node = &self.graph.nodes[k];
        if node.op != op || node.outputs.len() != 1 {
            return None;
        }
        self.matched[k] = true;
        Some(node)
    }

    fn op_of(&self, value: &str) -> Option<&'a str> {
        let k = *self.producer.get(value)?;
        Some(self.graph.nodes[k].op.as_str())
    }

    /// `value`'s contents when they are known on the host: a constant of the body, or a value
    /// of the enclosing graphs known there (the expansion computes its scale and shapes from
    /// the inputs' shapes outside the Scan, which runs them on the host).
    fn host(&self, value: &str) -> Option<Arc<HostTensor>> {
        if self.producer.contains_key(value) {
            return None;
        }
        if let Some((_, t)) = self.graph.constants.iter().find(|(n, _)| n == value) {
            return Some(t.clone());
        }
        if self.graph.inputs.iter().any(|i| i.name == value) {
            return None;
        }
        self.scope.get(value)?.host.clone()
    }

    fn ints(&self, value: &str) -> Option<Vec<i64>> {
        let t = self.host(value)?;
        if !t.dtype.is_integer() {
            return None;
        }
        t.to_indices("Scan", "body").ok()
    }

    /// The axes of a Squeeze or Unsqueeze: its second input, or its attribute (before opset 13).
    fn axes(&self, node: &Node) -> Option<Vec<i64>> {
        match (
            node.inputs.get(1).filter(|i| !i.is_empty()),
            node.attrs.get("axes"),
        ) {
            (Some(name), None) => self.ints(name),
            (None, Some(Attr::Ints(axes))) => Some(axes.clone()),
            _ => None,
        }
    }

    /// `value` as `op` (Squeeze or Unsqueeze) of one axis `axis` of rank `rank` (the output's
    /// for Unsqueeze, the input's for Squeeze): its input.
    fn reshaped(&mut self, value: &str, op: &str, rank: i64, axis: i64) -> Option<&'a str> {
        let node = self.node(value, op)?;
        let axes = self.axes(node)?;
        one_axis(&axes, rank, axis).then_some(node.inputs[0].as_str())
    }

    /// `value` as a ReduceSum over axis `axis` of its rank-`rank` data, the axis dropped
    /// (`keepdims` 0): its data.
    fn summed(&mut self, value: &str, rank: i64, axis: i64) -> Option<&'a str> {
        let node = self.node(value, "ReduceSum")?;
        let attrs_ok = node.attrs.iter().all(|(name, v)| {
            matches!(
                (name.as_str(), v),
                ("keepdims", Attr::Int(0)) | ("noop_with_empty_axes", Attr::Int(0))
            )
        });
        if !attrs_ok || !matches!(node.attrs.get("keepdims"), Some(Attr::Int(0))) {
            return None;
        }
        let axes = self.ints(node.inputs.get(1)?)?;
        one_axis(&axes, rank, axis).then_some(node.inputs[0].as_str())
    }

    /// The body input `value` is, directly or through a Cast to f32: its index.
    fn input(&mut self, value: &str) -> Option<usize> {
        let name = match self.op_of(value) {
            Some("Cast") => {
                let node = self.node(value, "Cast")?;
                let to_f32 = matches!(node.attrs.get("to"), Some(Attr::String(s)) if DType::from_name(s) == Some(DType::F32));
                if !to_f32 || node.attrs.keys().any(|a| a != "to") {
                    return None;
                }
                node.inputs[0].as_str()
            }
            Some(_) => return None,
            None => value,
        };
        let i = self.graph.inputs.iter().position(|i| i.name == name)?;
        if name == value {
            self.uncast[i] = true;
        }
        Some(i)
    }

    /// `f(a, b)` for a commutative node's operands in either order; what the pattern took
    /// (and which inputs it read uncast) in a failed order is given back.
    fn either<T>(
        &mut self,
        node: &'a Node,
        mut f: impl FnMut(&mut Self, &'a str, &'a str) -> Option<T>,
    ) -> Option<T> {
        let [a, b] = [node.inputs[0].as_str(), node.inputs[1].as_str()];
        let before = (self.matched.clone(), self.uncast.clone());
        if let Some(found) = f(self, a, b) {
            return Some(found);
        }
        (self.matched, self.uncast) = before.clone();
        let found = f(self, b, a);
        if found.is_none() {
            (self.matched, self.uncast) = before;
        }
        found
    }

    /// The decayed state: the state itself, or `state * Unsqueeze(Exp(decay), -1)` (the gated
    /// rules). Returns the decay input.
    fn decayed(&mut self, value: &str) -> Option<Option<usize>> {
        let state = self.graph.inputs[0].name.as_str();
        if value == state {
            return Some(None);
        }
        let mul = self.node(value, "Mul")?;
        self.either(mul, |b, s, gate| {
            if s != state {
                return None;
            }
            // Per key, [B, H, dk] unsqueezed at the end; or per head, [B, H] unsqueezed
            // twice (PyTorch's `g.exp()[..., None, None]`).
            let exp = match b.reshaped(gate, "Unsqueeze", 4, 3) {
                Some(exp) => exp,
                None => {
                    let node = b.node(gate, "Unsqueeze")?;
                    let mut axes = b.axes(node)?;
                    axes.iter_mut()
                        .for_each(|a| *a = if *a < 0 { *a + 4 } else { *a });
                    axes.sort_unstable();
                    if axes != [2, 3] {
                        return None;
                    }
                    b.decay_unsqueezed = true;
                    node.inputs[0].as_str()
                }
            };
            let decay = b.node(exp, "Exp")?.inputs[0].as_str();
            b.input(decay).map(Some)
        })
    }

    /// `Unsqueeze(key, -1)`: the key input.
    fn key_column(&mut self, value: &str) -> Option<usize> {
        let k = self.reshaped(value, "Unsqueeze", 4, 3)?;
        self.input(k)
    }

    /// The written row before its Unsqueeze: the value (linear and gated rules), or
    /// `beta * (v - Squeeze(Transpose(decayed)^T k, -1))` (the delta rules). Returns the value
    /// and beta inputs.
    fn written(
        &mut self,
        value: &str,
        decayed: &str,
        key: usize,
    ) -> Option<(usize, Option<usize>)> {
        if self.op_of(value) != Some("Mul") {
            return Some((self.input(value)?, None));
        }
        let mul = self.node(value, "Mul")?;
        self.either(mul, |b, beta, diff| {
            // Beta as the input, or (PyTorch's `beta[..., None]`) [B, H] unsqueezed.
            let beta = match b.op_of(beta) {
                Some("Unsqueeze") => {
                    let beta = b.reshaped(beta, "Unsqueeze", 3, 2)?;
                    b.beta_unsqueezed = true;
                    b.input(beta)?
                }
                _ => b.input(beta)?,
            };
            let sub = b.node(diff, "Sub")?;
            let v = b.input(&sub.inputs[0])?;
            // What the decayed state holds for the key: Transpose(decayed) x the key's column
            // (the expansion), the key's row x decayed (PyTorch's `k[..., None, :] @ S`), or
            // the sum over the key axis of decayed times the key's column (`(S * k[...,
            // None]).sum(-2)`).
            if b.op_of(&sub.inputs[1]) == Some("ReduceSum") {
                let product = b.summed(&sub.inputs[1], 4, 2)?;
                let mul = b.node(product, "Mul")?;
                let found = b.either(mul, |b, s, column| {
                    (s == decayed && b.key_column(column)? == key).then_some(())
                });
                return found.map(|()| (v, Some(beta)));
            }
            if b.op_of(&sub.inputs[1]) != Some("Squeeze") {
                return None;
            }
            let squeeze = b.node(&sub.inputs[1], "Squeeze")?;
            let axes = b.axes(squeeze)?;
            let product = b.node(&squeeze.inputs[0], "MatMul")?;
            if one_axis(&axes, 4, 3) {
                let transpose = b.node(&product.inputs[0], "Transpose")?;
                let perm = matches!(transpose.attrs.get("perm"),
                    Some(Attr::Ints(p)) if p == &[0, 1, 3, 2]);
                if !perm
                    || transpose.inputs[0] != decayed
                    || b.key_column(&product.inputs[1])? != key
                {
                    return None;
                }
            } else if one_axis(&axes, 4, 2) {
                let k = b.reshaped(&product.inputs[0], "Unsqueeze", 4, 2)?;
                if product.inputs[1] != decayed || b.input(k)? != key {
                    return None;
                }
            } else {
                return None;
            }
            Some((v, Some(beta)))
        })
    }

    /// The state the output reads: the new state, or (grouped-query attention) the new state
    /// spread over the query heads by `Reshape(Expand(Unsqueeze(state, 2), e), r)`.
    fn read_state(&mut self, value: &str, state_out: &str) -> Option<Option<(Vec<i64>, Vec<i64>)>> {
        if value == state_out {
            return Some(None);
        }
        let reshape = self.node(value, "Reshape")?;
        if reshape.attrs.keys().any(|a| a != "allowzero")
            || matches!(reshape.attrs.get("allowzero"), Some(Attr::Int(z)) if *z != 0)
        {
            return None;
        }
        let r = self.ints(reshape.inputs.get(1)?)?;
        let expand = self.node(&reshape.inputs[0], "Expand")?;
        let e = self.ints(expand.inputs.get(1)?)?;
        let unsqueezed = self.reshaped(&expand.inputs[0], "Unsqueeze", 5, 2)?;
        (unsqueezed == state_out).then_some(Some((e, r)))
    }

    fn find(&mut self) -> Option<LinearAttentionBody> {
        let g = self.graph;
        if g.outputs.len() != 2 || g.inputs.is_empty() {
            return None;
        }
        let (state_out, output_t) = (g.outputs[0].name.as_str(), g.outputs[1].name.as_str());

        // output_t = Cast(scale * Squeeze(Unsqueeze(q, -2) x state', -2)), state' the new state
        // as the query heads read it.
        let (scaled, output) = match self.op_of(output_t)? {
            "CastLike" => {
                let node = self.node(output_t, "CastLike")?;
                let like = g
                    .inputs
                    .iter()
                    .position(|i| Some(&i.name) == node.inputs.get(1))?;
                (node.inputs[0].as_str(), OutputCast::Like(like))
            }
            "Cast" => {
                let node = self.node(output_t, "Cast")?;
                let to = match node.attrs.get("to") {
                    Some(Attr::String(s)) if node.attrs.len() == 1 => DType::from_name(s)?,
                    _ => return None,
                };
                (node.inputs[0].as_str(), OutputCast::To(to))
            }
            _ => (output_t, OutputCast::None),
        };
        let read_out = |b: &mut Self, read: &'a str| {
            if b.op_of(read) == Some("ReduceSum") {
                // (state' * q[..., None]).sum(-2).
                let product = b.summed(read, 4, 2)?;
                let mul = b.node(product, "Mul")?;
                return b.either(mul, |b, state, column| {
                    let q = b.reshaped(column, "Unsqueeze", 4, 3)?;
                    let query = b.input(q)?;
                    let spread = b.read_state(state, state_out)?;
                    Some((query, spread))
                });
            }
            let product = b.reshaped(read, "Squeeze", 4, 2)?;
            let product = b.node(product, "MatMul")?;
            let q = b.reshaped(&product.inputs[0], "Unsqueeze", 4, 2)?;
            let query = b.input(q)?;
            let spread = b.read_state(&product.inputs[1], state_out)?;
            Some((query, spread))
        };
        // Scaled by a constant (the expansion), or not at all (a scale of 1).
        let (scale, query, spread) = if self.op_of(scaled) == Some("Mul") {
            let mul = self.node(scaled, "Mul")?;
            self.either(mul, |b, scale, read| {
                let scale = b.host(scale)?;
                if scale.dtype != DType::F32 || scale.numel() != 1 || scale.shape.len() > 3 {
                    return None;
                }
                let scale = scale.to_vec::<f32>().ok()?[0];
                let (query, spread) = read_out(b, read)?;
                Some((scale, query, spread))
            })?
        } else {
            let (query, spread) = read_out(self, scaled)?;
            (1.0, query, spread)
        };

        // state_out = decayed + Unsqueeze(k, -1) x Unsqueeze(written, -2).
        let add = self.node(state_out, "Add")?;
        let (decay, key, value, beta) = self.either(add, |b, decayed, outer| {
            let decay = b.decayed(decayed)?;
            // The key's column times the written row: a MatMul, or a broadcast Mul.
            let (key, row) = match b.op_of(outer)? {
                "MatMul" => {
                    let outer = b.node(outer, "MatMul")?;
                    let key = b.key_column(&outer.inputs[0])?;
                    (key, b.reshaped(&outer.inputs[1], "Unsqueeze", 4, 2)?)
                }
                "Mul" => {
                    let outer = b.node(outer, "Mul")?;
                    b.either(outer, |b, column, row| {
                        let key = b.key_column(column)?;
                        Some((key, b.reshaped(row, "Unsqueeze", 4, 2)?))
                    })?
                }
                _ => return None,
            };
            let (value, beta) = b.written(row, decayed, key)?;
            Some((decay, key, value, beta))
        })?;

        // Every node is the pattern's, and the body's inputs are the state and one role each.
        if self.matched.iter().any(|m| !m) {
            return None;
        }
        let mut roles = vec![query, key, value];
        roles.extend(decay);
        roles.extend(beta);
        let mut sorted = roles.clone();
        sorted.sort_unstable();
        if sorted != (1..g.inputs.len()).collect::<Vec<_>>() {
            return None;
        }
        let rule = match (decay.is_some(), beta.is_some()) {
            (false, false) => UpdateRule::Linear,
            (true, false) => UpdateRule::Gated,
            (false, true) => UpdateRule::Delta,
            (true, true) => UpdateRule::GatedDelta,
        };
        Some(LinearAttentionBody {
            uncast: self.uncast.clone(),
            rule,
            query,
            key,
            value,
            decay,
            beta,
            decay_unsqueezed: self.decay_unsqueezed && decay.is_some(),
            beta_unsqueezed: self.beta_unsqueezed && beta.is_some(),
            scale,
            output,
            spread,
        })
    }
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
}

/// `shape` of Reshape (no `allowzero`) applied to a tensor of shape `from`, when valid.
fn reshape_to(from: &[usize], shape: &[i64]) -> Option<Vec<usize>> {
    let total: usize = from.iter().product();
    let mut out = Vec::with_capacity(shape.len());
    let mut inferred = None;
    for (i, &s) in shape.iter().enumerate() {
        match s {
            0 => out.push(*from.get(i)?),
            -1 if inferred.is_none() => {
                inferred = Some(i);
                out.push(1);
            }
            s if s > 0 => out.push(usize::try_from(s).ok()?),
            _ => return None,
        }
    }
    let known: usize = out.iter().product();
    if let Some(i) = inferred {
        if known == 0 || !total.is_multiple_of(known) {
            return None;
        }
        out[i] = total / known;
    }
    (out.iter().product::<usize>() == total).then_some(out)
}

impl LinearAttentionBody {
    /// The kernel's plan for these inputs (body inputs in order: the state, then the scan
    /// inputs, whole), or `None` where their dtypes and shapes are not the ones it reads.
    fn plan(
        &self,
        body: &Graph,
        inputs: &[&Tensor],
        element_shapes: &[Vec<usize>],
    ) -> Option<(LinearAttentionPlan, DType)> {
        let state = inputs[0];
        let &[batch, kv_heads, dk, dv] = state.shape() else {
            return None;
        };
        // Empty heads are left to the Scan (the op refuses them; the kernel assumes rows).
        if state.dtype() != DType::F32 || [batch, kv_heads, dk, dv].contains(&0) {
            return None;
        }
        let steps = inputs[1].shape()[0];
        let shape_of = |i: usize| inputs[i].shape();
        // A role's input: a float (f32 where the body does not cast it), [T, B, heads, size].
        let dtype_ok = |i: usize| {
            let d = inputs[i].dtype();
            if self.uncast[i] {
                d == DType::F32
            } else {
                is_float(d)
            }
        };
        let fits = |i: usize, heads: &[usize], sizes: &[usize]| -> bool {
            dtype_ok(i)
                && matches!(shape_of(i), [s, b, h, n]
                    if *s == steps && *b == batch && heads.contains(h) && sizes.contains(n))
        };
        let q_heads = shape_of(self.query).get(2).copied()?;
        if !fits(self.query, &[q_heads], &[dk])
            || !fits(self.key, &[kv_heads], &[dk])
            || !fits(self.value, &[kv_heads], &[dv])
        {
            return None;
        }
        if q_heads % kv_heads != 0 {
            return None;
        }
        let group = q_heads / kv_heads;
        match &self.spread {
            None if group != 1 => return None,
            None => {}
            Some((e, r)) => {
                // Expand of [B, Hkv, 1, dk, dv] to [B, Hkv, G, dk, dv], then [B, Hq, dk, dv].
                let from = [batch, kv_heads, 1, dk, dv];
                let fits_expand = e.len() == 5
                    && e.iter().zip(from).enumerate().all(|(i, (&s, d))| {
                        if i == 2 {
                            s == group as i64
                        } else {
                            s == 1 || s == d as i64
                        }
                    });
                let spread = [batch, kv_heads, group, dk, dv];
                if !fits_expand || reshape_to(&spread, r)? != [batch, q_heads, dk, dv] {
                    return None;
                }
            }
        }
        // One per head, [T, B, H], where the body unsqueezes it.
        let per_head = |i: usize, heads: &[usize]| {
            dtype_ok(i)
                && matches!(shape_of(i), [s, b, h] if *s == steps && *b == batch && heads.contains(h))
        };
        let decay_per_key = match self.decay {
            Some(d) if self.decay_unsqueezed => {
                if !per_head(d, &[kv_heads]) {
                    return None;
                }
                false
            }
            Some(d) if fits(d, &[kv_heads], &[dk]) => true,
            Some(d) if fits(d, &[kv_heads], &[1]) => false,
            Some(_) => return None,
            None => false,
        };
        let beta_per_head = match self.beta {
            Some(b) if self.beta_unsqueezed => {
                if !per_head(b, &[kv_heads, 1]) {
                    return None;
                }
                shape_of(b)[2] == kv_heads && kv_heads > 1
            }
            Some(b) if fits(b, &[kv_heads, 1], &[1]) => shape_of(b)[2] == kv_heads && kv_heads > 1,
            Some(_) => return None,
            None => false,
        };
        let output = match self.output {
            OutputCast::None => DType::F32,
            OutputCast::Like(i) => inputs[i].dtype(),
            OutputCast::To(d) => d,
        };
        if !is_float(output) {
            return None;
        }
        // What the body declares must hold, else the Scan reports it.
        let declared_ok = body.inputs.iter().enumerate().all(|(i, info)| {
            let shape = if i == 0 {
                state.shape()
            } else {
                &element_shapes[i - 1][..]
            };
            info.check("body input", inputs[i].dtype(), shape).is_ok()
        }) && body.outputs[0]
            .check("body output", DType::F32, state.shape())
            .is_ok()
            && body.outputs[1]
                .check("body output", output, &[batch, q_heads, dv])
                .is_ok();
        if !declared_ok {
            return None;
        }
        Some((
            LinearAttentionPlan {
                batch,
                steps,
                q_heads,
                kv_heads,
                dk,
                dv,
                rule: self.rule,
                decay_per_key,
                beta_per_head,
                scale: self.scale,
                time_major: true,
            },
            output,
        ))
    }
}

/// Runs the Scan as LinearAttention's recurrence when its body is the op's expansion and its
/// inputs are what the kernel reads: `None` otherwise, and the Scan iterates its body.
pub(crate) fn linear_attention(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    attrs: &ScanAttrs,
    plan: &ScanPlan,
    inputs: &[Tensor],
) -> Result<Option<Vec<Tensor>>> {
    let ctx = rec.context().clone();
    let zeros = |v: &Option<Vec<i64>>, rank: i64| {
        v.as_ref()
            .is_none_or(|v| v.iter().all(|&a| a == 0 || a == -rank))
    };
    if !ctx.scan_recurrences()
        || plan.n != 1
        || plan.k != 1
        || plan.in_axes.iter().any(|&a| a != 0)
        || plan.in_reverse.iter().any(|&r| r)
        || !zeros(&attrs.scan_output_axes, 4)
        || !zeros(&attrs.scan_output_directions, 0)
        || body.inputs.len() != inputs.len()
    {
        return Ok(None);
    }
    let Some(found) = Body::new(body, args.scope()).find() else {
        return Ok(None);
    };
    let tensors: Vec<&Tensor> = inputs.iter().collect();
    let Some((la, output_dtype)) = found.plan(body, &tensors, &plan.element_shapes) else {
        return Ok(None);
    };
    if !la.fits(&ctx) {
        return Ok(None);
    }
    // Decay and beta given as [T, B, H]: the kernel reads them as [T, B, H, 1].
    let unsqueezed = |i: usize, yes: bool| -> Result<Tensor> {
        let t = &inputs[i];
        if yes {
            let mut shape = t.shape().to_vec();
            shape.push(1);
            t.reshaped(&shape)
        } else {
            Ok(t.clone())
        }
    };
    let decay = found
        .decay
        .map(|i| unsqueezed(i, found.decay_unsqueezed))
        .transpose()?;
    let beta = found
        .beta
        .map(|i| unsqueezed(i, found.beta_unsqueezed))
        .transpose()?;
    let [q, k, v, gate, beta] = rec.linear_attention_operands(
        [found.query, found.key, found.value].map(|i| &inputs[i]),
        decay.as_ref(),
        beta.as_ref(),
    )?;
    let state = args.out(0).tensor(rec, DType::F32, inputs[0].shape())?;
    if !state.shares_buffer(&inputs[0]) {
        Out::into("state", &state).view(rec, inputs[0].clone())?;
    }
    let output_shape = [la.steps, la.batch, la.q_heads, la.dv];
    let output = if output_dtype == DType::F32 {
        args.out(1).tensor(rec, DType::F32, &output_shape)?
    } else {
        rec.alloc(DType::F32, &output_shape)?
    };
    rec.linear_attention_into("Scan", &la, [&q, &k, &v, &gate, &beta], &state, &output)?;
    let output = if output_dtype == DType::F32 {
        output
    } else {
        let cast = rec.cast_to(&output, output_dtype, args.out(1))?;
        rec.release(output);
        cast
    };
    for t in [q, k, v, gate, beta] {
        rec.release(t);
    }
    ctx.count_scan_as_recurrence();
    Ok(Some(vec![state, output]))
}
