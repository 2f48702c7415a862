//! ONNX LinearAttention's recurrence (`shaders/linear_attention.wgsl`): one invocation per
//! column of a head's state runs the time steps in order, so a sequence of T tokens costs a
//! few dispatches (one per stretch of steps) instead of a Scan's T iterations of several each.

use super::{grid_for, Kernel, LOOP_ITERATIONS_PER_DISPATCH};
use crate::{Error, Recorder, Result, Tensor};

/// The recurrence rule (ONNX `update_rule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateRule {
    /// `S += k v^T`.
    Linear,
    /// `S = g S + k v^T`, `g` the step's decay gate.
    Gated,
    /// `S += beta k (v - S^T k)^T`: the delta rule.
    Delta,
    /// The delta rule on the decayed state.
    GatedDelta,
}

impl UpdateRule {
    /// The rule named by ONNX's `update_rule` text.
    pub fn parse(name: &str) -> Option<UpdateRule> {
        Some(match name {
            "linear" => UpdateRule::Linear,
            "gated" => UpdateRule::Gated,
            "delta" => UpdateRule::Delta,
            "gated_delta" => UpdateRule::GatedDelta,
            _ => return None,
        })
    }
    /// Whether the rule decays the state each step.
    pub fn gated(self) -> bool {
        matches!(self, UpdateRule::Gated | UpdateRule::GatedDelta)
    }
    /// Whether the rule is a delta rule (reads `beta`).
    pub fn delta(self) -> bool {
        matches!(self, UpdateRule::Delta | UpdateRule::GatedDelta)
    }
}

/// The sizes of one call, checked by the op: `batch`, `steps`, heads, head sizes.
#[derive(Clone, Copy, Debug)]
pub struct LinearAttentionPlan {
    /// Sequences.
    pub batch: usize,
    /// Time steps.
    pub steps: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key and value heads (each shared by `q_heads / kv_heads` query heads).
    pub kv_heads: usize,
    /// The key head size.
    pub dk: usize,
    /// The value head size.
    pub dv: usize,
    /// The recurrence.
    pub rule: UpdateRule,
    /// The decay has one value per key element (else one per head).
    pub decay_per_key: bool,
    /// `beta` has one value per head (else one per step only).
    pub beta_per_head: bool,
    /// The factor of the query's products with the state.
    pub scale: f32,
    /// The step inputs and the output are [T, B, ...] (a Scan over time) instead of the op's
    /// [B, T, ...].
    pub time_major: bool,
}

impl LinearAttentionPlan {
    /// Loop iterations one invocation runs per step and state column: two passes over the
    /// column (one without the delta rules) and one per further query head of the group.
    fn iterations_per_step(&self) -> usize {
        self.dk * (self.q_heads / self.kv_heads + 2)
    }

    /// Elements of one row (b, t) of each step tensor the rule reads: query, key, value, the
    /// gate, beta and the output (`None` for a gate or beta the rule does not read).
    fn row_elements(&self) -> [Option<usize>; 6] {
        [
            Some(self.q_heads * self.dk),
            Some(self.kv_heads * self.dk),
            Some(self.kv_heads * self.dv),
            self.rule
                .gated()
                .then_some(self.kv_heads * if self.decay_per_key { self.dk } else { 1 }),
            self.rule
                .delta()
                .then_some(if self.beta_per_head { self.kv_heads } else { 1 }),
            Some(self.q_heads * self.dv),
        ]
    }

    /// Sequences that one piece of a call beyond one binding runs together: all of them
    /// where the step inputs are time-major (a stretch of steps is then one stretch of rows),
    /// else one.
    fn piece_batch(&self) -> usize {
        if self.time_major {
            self.batch
        } else {
            1
        }
    }

    /// Bytes of one step's rows of the widest step tensor, and of the state, in one piece.
    fn piece_bytes(&self) -> (u64, u64) {
        let widest = self.row_elements().into_iter().flatten().max().unwrap_or(0);
        let batch = self.piece_batch() as u64;
        (
            batch * widest as u64 * 4,
            batch * (self.kv_heads * self.dk * self.dv) as u64 * 4,
        )
    }

    /// Whether one call fits the kernel on `ctx`: a step's loops within one dispatch's bound,
    /// and one step's rows and the state of the sequences run together in one binding of one
    /// buffer (tensors beyond one run in pieces of steps, see
    /// [`Recorder::linear_attention_into`]). Where they do not, that fails naming the limit.
    pub(crate) fn fits(&self, ctx: &crate::Context) -> bool {
        let limit = ctx.binding_limit().min(ctx.max_buffer_size());
        let (step, state) = self.piece_bytes();
        step <= limit
            && state <= limit
            && self.iterations_per_step() <= LOOP_ITERATIONS_PER_DISPATCH
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    columns: u32,
    first_step: u32,
    steps: u32,
    batch_rows: u32,
    step_rows: u32,
    q_heads: u32,
    kv_heads: u32,
    dk: u32,
    dv: u32,
    rule: u32,
    decay_per_key: u32,
    beta_per_head: u32,
    scale: f32,
    _pad: [u32; 3],
}

/// Columns of one workgroup of the `lanes` entry point, invocations per column, and rows each
/// invocation holds (`LANE_COLUMNS`, `LANES`, `ROWS_PER_LANE` in the shader).
const LANE_COLUMNS: usize = 32;
const LANES: usize = 8;
const ROWS_PER_LANE: usize = 16;

/// The shader with its `lanes` entry point rewritten for subgroups: invocation `local` takes
/// lane `local % LANES` of column `local / LANES`, so a column's lanes are neighbours in one
/// subgroup (subgroups of at least `LANES` invocations, which hold consecutive invocation
/// indices in a one-dimensional workgroup), and `lane_sum` adds the lanes' parts by three
/// shuffles: a step has no barrier.
pub(crate) fn with_subgroup_lanes(source: &str) -> String {
    let replace = |text: String, from: &str, to: &str| {
        assert!(
            text.contains(from),
            "linear_attention.wgsl no longer has {from:?}"
        );
        text.replace(from, to)
    };
    let text = replace(
        source.to_string(),
        "    let col = local % LANE_COLUMNS;\n    let lane = local / LANE_COLUMNS;",
        "    let col = local / LANES;\n    let lane = local % LANES;",
    );
    replace(
        text,
        "fn lane_sum(lane: u32, col: u32, part: f32) -> f32 {",
        "fn lane_sum(lane: u32, col: u32, part: f32) -> f32 {\n    var total = part;\n    \
         total += subgroupShuffleXor(total, 1u);\n    total += subgroupShuffleXor(total, 2u);\n    \
         total += subgroupShuffleXor(total, 4u);\n    return total;\n}\nfn lane_sum_shared(lane: u32, col: u32, part: f32) -> f32 {",
    )
}

impl Recorder {
    /// Records the recurrence on f32 tensors: `state` ([B, H_kv, dk, dv]) holds the initial
    /// state and ends as the final one; `output` ([B, T, H_q * dv], or [T, B, ...] with
    /// `plan.time_major`, as the step inputs) gets every step's output. `decay` and `beta` are
    /// any f32 tensor where the rule does not read them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn linear_attention_into(
        &mut self,
        op: &'static str,
        plan: &LinearAttentionPlan,
        [query, key, value, decay, beta]: [&Tensor; 5],
        state: &Tensor,
        output: &Tensor,
    ) -> Result<()> {
        let columns = plan.batch * plan.kv_heads * plan.dv;
        if columns == 0 || plan.steps == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        let per_step = plan.iterations_per_step();
        if per_step > LOOP_ITERATIONS_PER_DISPATCH {
            return Err(Error::LimitExceeded {
                op,
                what: format!(
                    "one step's {per_step} loop iterations per state column (head size {} x {} query heads per key/value head, plus 2)",
                    plan.dk,
                    plan.q_heads / plan.kv_heads
                ),
                limit: "iterations one invocation runs per dispatch",
                needed: per_step as u64,
                max: LOOP_ITERATIONS_PER_DISPATCH as u64,
            });
        }
        // Every index is a u32 and every tensor one binding; else the steps run in pieces.
        let tensors = [query, key, value, decay, beta, state, output];
        let limit = ctx.binding_limit();
        let whole = tensors.iter().all(|t| {
            t.buffers().len() == 1 && t.storage().size() <= limit && t.numel() <= u32::MAX as usize
        });
        if !whole {
            return self.linear_attention_in_pieces(
                op,
                plan,
                [query, key, value, decay, beta],
                state,
                output,
            );
        }
        self.linear_attention_dispatches(op, plan, tensors)
    }

    /// [`Recorder::linear_attention_into`] of a call beyond one binding: the steps in pieces
    /// whose rows fit one binding of one buffer (of one sequence, or of all where the step
    /// inputs are time-major), each piece's step rows copied out, run with the sequences'
    /// state carried from piece to piece (the same bits as one run: the kernel's dispatches
    /// carry it alike), and its output rows copied back.
    #[allow(clippy::too_many_arguments)]
    fn linear_attention_in_pieces(
        &mut self,
        op: &'static str,
        plan: &LinearAttentionPlan,
        inputs: [&Tensor; 5],
        state: &Tensor,
        output: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let limit = ctx.binding_limit().min(ctx.max_buffer_size());
        let (step_bytes, state_bytes) = plan.piece_bytes();
        for (what, bytes) in [
            ("one step's rows of the widest input or output", step_bytes),
            ("the state of the sequences run together", state_bytes),
        ] {
            if bytes > limit {
                return Err(Error::LimitExceeded {
                    op,
                    what: format!("{what} in one binding"),
                    limit: "max_storage_buffer_binding_size",
                    needed: bytes,
                    max: limit,
                });
            }
        }
        let rows = plan.row_elements();
        let batch = plan.piece_batch();
        let per_piece = (limit / step_bytes).min(plan.steps as u64) as usize;
        let state_elems = state_bytes as usize / 4;
        for group in 0..plan.batch / batch {
            // The group's state, copied out unless it is all of it in one binding.
            let own_state = !(batch == plan.batch && state.buffers().len() == 1);
            let piece_state = if own_state {
                let s = self.alloc(crate::DType::F32, &[state_elems])?;
                let at = (group * state_elems * 4) as u64;
                self.copy_buffer(state.storage(), at, s.storage(), 0, state_bytes)?;
                s
            } else {
                state.clone()
            };
            let mut first = 0;
            while first < plan.steps {
                let steps = per_piece.min(plan.steps - first);
                // Rows [row, row + steps * batch) of every step tensor.
                let row = if plan.time_major {
                    first * plan.batch
                } else {
                    group * plan.steps + first
                };
                let piece_rows = steps * batch;
                let cut = |rec: &mut Recorder, t: &Tensor, elems: usize| -> Result<Tensor> {
                    let piece = rec.alloc(crate::DType::F32, &[piece_rows * elems])?;
                    let at = (row * elems * 4) as u64;
                    let bytes = (piece_rows * elems * 4) as u64;
                    rec.copy_buffer(t.storage(), at, piece.storage(), 0, bytes)?;
                    Ok(piece)
                };
                let mut pieces: Vec<Tensor> = Vec::with_capacity(5);
                for (t, elems) in inputs.iter().zip(&rows[..5]) {
                    let piece = match elems {
                        Some(e) => cut(self, t, *e)?,
                        // Not read: the query's piece fills the binding.
                        None => pieces[0].clone(),
                    };
                    pieces.push(piece);
                }
                let out_elems = rows[5].unwrap_or(0);
                let piece_out = self.alloc(crate::DType::F32, &[piece_rows * out_elems])?;
                let piece_plan = LinearAttentionPlan {
                    batch,
                    steps,
                    ..*plan
                };
                let [q, k, v, g, b] = [0, 1, 2, 3, 4].map(|i| &pieces[i]);
                self.linear_attention_dispatches(
                    op,
                    &piece_plan,
                    [q, k, v, g, b, &piece_state, &piece_out],
                )?;
                let at = (row * out_elems * 4) as u64;
                let bytes = (piece_rows * out_elems * 4) as u64;
                self.copy_buffer(piece_out.storage(), 0, output.storage(), at, bytes)?;
                self.release(piece_out);
                for piece in pieces {
                    self.release(piece);
                }
                first += steps;
            }
            if own_state {
                let at = (group * state_elems * 4) as u64;
                self.copy_buffer(piece_state.storage(), 0, state.storage(), at, state_bytes)?;
                self.release(piece_state);
            }
        }
        Ok(())
    }

    /// The kernel's dispatches of a call whose tensors are each bound whole: a stretch of
    /// steps each.
    fn linear_attention_dispatches(
        &mut self,
        op: &'static str,
        plan: &LinearAttentionPlan,
        tensors: [&Tensor; 7],
    ) -> Result<()> {
        let ctx = self.context().clone();
        let columns = plan.batch * plan.kv_heads * plan.dv;
        let per_step = plan.iterations_per_step();
        // GPUs: 8 invocations per column (workgroups of 256 over 32 columns of one head), so a
        // head of 128 columns keeps 1024 invocations busy instead of 128, each holding its
        // rows in registers (up to 16: head sizes up to 128). CPU adapters run a workgroup as
        // a loop on one core, where barriers cost more than they share.
        let lanes = !ctx.cpu_kernels()
            && ctx.limits().max_compute_invocations_per_workgroup >= 256
            && plan.dk <= LANES * ROWS_PER_LANE;
        let subgroups = lanes && ctx.subgroups_of_at_least(LANES as u32);
        // Steps per dispatch: each loop of an invocation runs at most the shared bound of
        // iterations (over the column's rows, or with lanes over the lane's 16 rows: one loop
        // loading the next step's inputs, two for the delta rules' sums and the update, one
        // per further query head).
        let chunk = if lanes {
            LOOP_ITERATIONS_PER_DISPATCH / (ROWS_PER_LANE * (plan.q_heads / plan.kv_heads + 3))
        } else {
            LOOP_ITERATIONS_PER_DISPATCH / per_step
        };
        let (wg, invocations) = if lanes {
            let tiles = plan.dv.div_ceil(LANE_COLUMNS);
            (256, (plan.batch * plan.kv_heads * tiles) as u64 * 256)
        } else {
            (ctx.workgroup_size(), columns as u64)
        };
        let grid = grid_for(&ctx, op, invocations, wg)?;
        let pipeline = ctx.pipeline(&Kernel::LinearAttention {
            workgroup_size: wg,
            lanes,
            subgroups,
        })?;
        let mut first = 0;
        while first < plan.steps {
            let steps = chunk.min(plan.steps - first);
            let params = Params {
                columns: columns as u32,
                first_step: first as u32,
                steps: steps as u32,
                batch_rows: if plan.time_major {
                    1
                } else {
                    plan.steps as u32
                },
                step_rows: if plan.time_major {
                    plan.batch as u32
                } else {
                    1
                },
                q_heads: plan.q_heads as u32,
                kv_heads: plan.kv_heads as u32,
                dk: plan.dk as u32,
                dv: plan.dv as u32,
                rule: plan.rule as u32,
                decay_per_key: u32::from(plan.decay_per_key),
                beta_per_head: u32::from(plan.beta_per_head),
                scale: plan.scale,
                _pad: [0; 3],
            };
            let bindings: Vec<_> = tensors.iter().map(|t| t.storage().bind_whole()).collect();
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            first += steps;
        }
        Ok(())
    }
}
