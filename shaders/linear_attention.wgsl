// ONNX LinearAttention (opset 27): the whole recurrence over T steps in one dispatch.
//
// Column j of the state of (batch b, key/value head h) depends on nothing but itself and the
// step's shared vectors (k_t, q_t, the decay): recalling S^T k, the update and the outputs are
// all sums over the column. So one invocation per column runs every step in order, reading and
// writing its column in `state` (coalesced: neighbouring invocations hold neighbouring
// columns), and no step needs a barrier or another dispatch.
//
// Per step t, with e_i = exp(decay) for the gated rules (1 otherwise):
//   recalled = sum_i e_i S[i, j] k[i]                      (delta rules)
//   u        = beta (v[j] - recalled)  or  v[j]
//   S[i, j]  = e_i S[i, j] + k[i] u
//   out[g, j] = scale * sum_i q_g[i] S[i, j]  for each query head g of this key/value head
// Everything is f32 (the host casts 16-bit inputs and outputs). The host splits a long sequence
// over several dispatches (the state stays in `state` between them): one invocation then never
// runs for long (watchdogs), and lavapipe, which stops a shader's loops after about 65 000
// iterations in all, computes every step.

override WORKGROUP_SIZE: u32 = 64u;

const LINEAR: u32 = 0u;
const GATED: u32 = 1u;
const DELTA: u32 = 2u;
const GATED_DELTA: u32 = 3u;

struct Params {
    // batch * kv_heads * dv: one invocation each.
    columns: u32,
    // This dispatch runs steps [first_step, first_step + steps) of total_steps.
    first_step: u32,
    steps: u32,
    total_steps: u32,
    q_heads: u32,
    kv_heads: u32,
    dk: u32,
    dv: u32,
    rule: u32,
    // Decay per key dimension ([B, T, H_kv * dk]) or per head ([B, T, H_kv]).
    decay_per_key: u32,
    // Beta per head ([B, T, H_kv]) or one per step ([B, T, 1]).
    beta_per_head: u32,
    scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> query: array<f32>;
@group(0) @binding(2) var<storage, read> key: array<f32>;
@group(0) @binding(3) var<storage, read> value: array<f32>;
@group(0) @binding(4) var<storage, read> decay: array<f32>;
@group(0) @binding(5) var<storage, read> beta: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group_id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let n = (group_id.x + groups.x * (group_id.y + groups.y * group_id.z)) * WORKGROUP_SIZE + local;
    if n >= params.columns {
        return;
    }
    let dk = params.dk;
    let dv = params.dv;
    let j = n % dv;
    // b * kv_heads + h
    let head = n / dv;
    let h = head % params.kv_heads;
    let b = head / params.kv_heads;
    let per_kv = params.q_heads / params.kv_heads;
    let column = head * dk * dv + j;
    let gated = params.rule == GATED || params.rule == GATED_DELTA;
    let delta = params.rule == DELTA || params.rule == GATED_DELTA;
    let per_key = params.decay_per_key != 0u;
    for (var t = params.first_step; t < params.first_step + params.steps; t++) {
        let row = b * params.total_steps + t;
        // (b, t, h) among the key/value heads.
        let kv = row * params.kv_heads + h;
        let k0 = kv * dk;
        let d0 = select(kv, kv * dk, per_key);
        let d_step = select(0u, 1u, per_key);
        var u = value[kv * dv + j];
        if delta {
            var recalled = 0.0;
            for (var i = 0u; i < dk; i++) {
                var s = state[column + i * dv];
                if gated {
                    s *= exp(decay[d0 + i * d_step]);
                }
                recalled += s * key[k0 + i];
            }
            u = beta[select(row, kv, params.beta_per_head != 0u)] * (u - recalled);
        }
        // The new column, and the first query head's output on the way.
        let q0 = (row * params.q_heads + h * per_kv) * dk;
        let o0 = (row * params.q_heads + h * per_kv) * dv + j;
        var first = 0.0;
        for (var i = 0u; i < dk; i++) {
            var s = state[column + i * dv];
            if gated {
                s *= exp(decay[d0 + i * d_step]);
            }
            s += key[k0 + i] * u;
            state[column + i * dv] = s;
            first += query[q0 + i] * s;
        }
        output[o0] = params.scale * first;
        for (var g = 1u; g < per_kv; g++) {
            var other = 0.0;
            for (var i = 0u; i < dk; i++) {
                other += query[q0 + g * dk + i] * state[column + i * dv];
            }
            output[o0 + g * dv] = params.scale * other;
        }
    }
}
