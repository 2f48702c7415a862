// ONNX LinearAttention (opset 27): the whole recurrence over T steps in one dispatch.
//
// Column j of the state of (batch b, key/value head h) depends on nothing but itself and the
// step's shared vectors (k_t, q_t, the decay): recalling S^T k, the update and the outputs are
// all sums over the column. So one invocation per column runs every step in order, reading and
// writing its column in `state` (coalesced: neighbouring invocations hold neighbouring
// columns), and no step needs a barrier or another dispatch.
//
// Per step t, with e_i = exp(decay) for the gated rules (1 otherwise; the host computes
// exp(decay) once for all columns):
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
    // This dispatch runs steps [first_step, first_step + steps).
    first_step: u32,
    steps: u32,
    // Row (b, t) of the step inputs and the output (each row: heads x head size) is
    // b * batch_rows + t * step_rows: [B, T, ...] for the op, [T, B, ...] for a Scan over time.
    batch_rows: u32,
    step_rows: u32,
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
// exp(decay), computed once by the host's Exp.
@group(0) @binding(4) var<storage, read> gate: array<f32>;
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
        let row = b * params.batch_rows + t * params.step_rows;
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
                    s *= gate[d0 + i * d_step];
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
                s *= gate[d0 + i * d_step];
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

// The same recurrence for GPUs and head sizes up to LANES * ROWS_PER_LANE (128), where one
// invocation per column leaves most of the device idle (16 heads of 128 columns: 2048
// invocations) and each step waits on two chains of dk loads: a workgroup of 256 takes 32
// columns of one head, and LANES invocations share each column's rows (row i goes to lane
// i % LANES). Each invocation keeps its rows in registers for the whole dispatch, reading the
// state once at the start and writing it once at the end, so a step touches no state memory
// (the loops over the rows have constant bounds, which lets compilers unroll them). Sums over
// the rows meet in workgroup memory: each invocation writes its lane's part, and after a
// barrier every lane adds the LANES parts itself (so no second broadcast is needed); a second
// barrier lets the parts be overwritten. Neighbouring invocations hold neighbouring columns
// at the same row: coalesced.

const LANES: u32 = 8u;
const LANE_COLUMNS: u32 = 32u;

var<workgroup> parts: array<f32, 256>;

// The sum over lanes of `part` for this invocation's column (every lane gets it). Called in
// uniform control flow by the whole workgroup.
fn lane_sum(lane: u32, col: u32, part: f32) -> f32 {
    parts[lane * LANE_COLUMNS + col] = part;
    workgroupBarrier();
    var total = 0.0;
    for (var l = 0u; l < LANES; l++) {
        total += parts[l * LANE_COLUMNS + col];
    }
    workgroupBarrier();
    return total;
}

// Rows each invocation holds: LANES * ROWS_PER_LANE is the largest head size of `lanes`.
const ROWS_PER_LANE: u32 = 16u;

@compute @workgroup_size(256)
fn lanes(
    @builtin(workgroup_id) group_id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let dk = params.dk;
    let dv = params.dv;
    let tiles = (dv + LANE_COLUMNS - 1u) / LANE_COLUMNS;
    let w = group_id.x + groups.x * (group_id.y + groups.y * group_id.z);
    let head = w / tiles;
    if head * dv >= params.columns {
        return;
    }
    let col = local % LANE_COLUMNS;
    let lane = local / LANE_COLUMNS;
    let j = (w % tiles) * LANE_COLUMNS + col;
    let live = j < dv;
    let jj = min(j, dv - 1u);
    let rows = select(0u, dk, live);
    let h = head % params.kv_heads;
    let b = head / params.kv_heads;
    let per_kv = params.q_heads / params.kv_heads;
    let column = head * dk * dv + jj;
    let gated = params.rule == GATED || params.rule == GATED_DELTA;
    let delta = params.rule == DELTA || params.rule == GATED_DELTA;
    let per_key = params.decay_per_key != 0u;
    // Row lane + r * LANES of the column, for r < ROWS_PER_LANE.
    var rows_held: array<f32, 16>;
    for (var r = 0u; r < ROWS_PER_LANE; r++) {
        let i = lane + r * LANES;
        rows_held[r] = 0.0;
        if i < rows {
            rows_held[r] = state[column + i * dv];
        }
    }
    // A step's inputs for this lane's rows (key, gate exp(decay) and the first query head's
    // query; 0 beyond the head size), its value and beta are loaded one step ahead: the loads
    // of step t + 1 are issued before step t computes, so their latency (a trip to memory:
    // nothing else in a step waits on memory) overlaps its sums instead of adding to them.
    var key_rows: array<f32, 16>;
    var gate_rows: array<f32, 16>;
    var query_rows: array<f32, 16>;
    var next_value = 0.0;
    var next_beta = 0.0;
    let end = params.first_step + params.steps;
    for (var t = params.first_step; t <= end; t++) {
        let key_now = key_rows;
        let gate_now = gate_rows;
        let query_now = query_rows;
        let value_now = next_value;
        let beta_now = next_beta;
        let row = b * params.batch_rows + t * params.step_rows;
        let kv = row * params.kv_heads + h;
        let q0 = (row * params.q_heads + h * per_kv) * dk;
        if t < end {
            let k0 = kv * dk;
            let d0 = select(kv, kv * dk, per_key);
            let d_step = select(0u, 1u, per_key);
            for (var r = 0u; r < ROWS_PER_LANE; r++) {
                let i = lane + r * LANES;
                let inside = i < rows;
                let at = min(i, dk - 1u);
                key_rows[r] = select(0.0, key[k0 + at], inside);
                gate_rows[r] = select(0.0, select(1.0, gate[d0 + at * d_step], gated), inside);
                query_rows[r] = select(0.0, query[q0 + at], inside);
            }
            next_value = value[kv * dv + jj];
            next_beta = beta[select(row, kv, params.beta_per_head != 0u)];
        }
        if t == params.first_step {
            continue;
        }
        // Step t - 1, from the values loaded on the previous pass.
        let step = t - 1u;
        let step_row = b * params.batch_rows + step * params.step_rows;
        let step_q0 = (step_row * params.q_heads + h * per_kv) * dk;
        var u = select(0.0, value_now, live);
        if delta {
            var part = 0.0;
            for (var r = 0u; r < ROWS_PER_LANE; r++) {
                part += rows_held[r] * gate_now[r] * key_now[r];
            }
            let recalled = lane_sum(lane, col, part);
            u = beta_now * (u - recalled);
        }
        let o0 = (step_row * params.q_heads + h * per_kv) * dv + jj;
        var part = 0.0;
        for (var r = 0u; r < ROWS_PER_LANE; r++) {
            let s = rows_held[r] * gate_now[r] + key_now[r] * u;
            rows_held[r] = s;
            part += query_now[r] * s;
        }
        let first = lane_sum(lane, col, part);
        if live && lane == 0u {
            output[o0] = params.scale * first;
        }
        for (var g = 1u; g < per_kv; g++) {
            var other = 0.0;
            for (var r = 0u; r < ROWS_PER_LANE; r++) {
                let i = lane + r * LANES;
                if i < rows {
                    other += query[step_q0 + g * dk + i] * rows_held[r];
                }
            }
            let total = lane_sum(lane, col, other);
            if live && lane == 0u {
                output[o0 + g * dv] = params.scale * total;
            }
        }
    }
    for (var r = 0u; r < ROWS_PER_LANE; r++) {
        let i = lane + r * LANES;
        if i < rows {
            state[column + i * dv] = rows_held[r];
        }
    }
}
