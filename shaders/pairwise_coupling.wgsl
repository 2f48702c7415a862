// PairwiseCoupling: class probabilities from the probabilities of each pair of classes, one
// invocation per row, by libsvm's fixed-point iteration in its order of operations (the host's
// `reference::coupling` is the same algorithm). The iteration is cut into units of about K
// steps each so that a dispatch runs a bounded stretch of it (`kernels/coupling.rs`):
//   units 0..K: class t's start, p[t] = 1 / K and Q[t][t] = sum_{j != t} r[j][t]^2;
//   then per sweep 2K + 1 units: (Qp)[t] recomputed for each t, the stopping test, and the
//   update of each class t.
// A row that passes the stopping test is done: its later units do nothing. The state between
// units lives in `state`, 2K + 2 words per row: Qp, Q's diagonal, p^T Q p and the done flag;
// p itself lives in `p`, the output.

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    rows: u32,
    classes: u32,
    // The units this dispatch runs: first..end.
    first: u32,
    end: u32,
    // Invocations per row of the grid and rows per plane (grids folded into y and z beyond
    // 65 535 workgroups).
    row: u32,
    plane: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> pairs: array<f32>;
@group(0) @binding(2) var<storage, read_write> p: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;

// The column of pair (i, j), i < j, in the order (0, 1), (0, 2), ..., (1, 2), ...
fn pair_column(i: u32, j: u32, k: u32) -> u32 {
    return i * k - i * (i + 1u) / 2u + j - i - 1u;
}

// r[a][b], a != b: the probability that class a beats class b.
fn r(base: u32, a: u32, b: u32, k: u32) -> f32 {
    if a < b {
        return pairs[base + pair_column(a, b, k)];
    }
    return 1.0 - pairs[base + pair_column(b, a, k)];
}

// Q[t][j], t != j: -r[j][t] r[t][j], the same product whichever of t and j is smaller.
fn q_off(base: u32, t: u32, j: u32, k: u32) -> f32 {
    let pr = pairs[base + pair_column(min(t, j), max(t, j), k)];
    return -(1.0 - pr) * pr;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = (gid.z * params.plane + gid.y) * params.row + gid.x;
    if n >= params.rows {
        return;
    }
    let k = params.classes;
    let base = n * (k * (k - 1u) / 2u);
    let pb = n * k;
    let qp = n * (2u * k + 2u);
    let diag = qp + k;
    let pqp_at = diag + k;
    let done = pqp_at + 1u;
    for (var u = params.first; u < params.end; u++) {
        if u < k {
            let t = u;
            p[pb + t] = 1.0 / f32(k);
            var d = 0.0;
            for (var j = 0u; j < k; j++) {
                if j != t {
                    let v = r(base, j, t, k);
                    d += v * v;
                }
            }
            state[diag + t] = d;
            if t == 0u {
                state[done] = 0.0;
            }
            continue;
        }
        if state[done] != 0.0 {
            return;
        }
        let s = (u - k) % (2u * k + 1u);
        if s < k {
            let t = s;
            var acc = 0.0;
            for (var j = 0u; j < k; j++) {
                var qtj = state[diag + t];
                if j != t {
                    qtj = q_off(base, t, j, k);
                }
                acc += qtj * p[pb + j];
            }
            state[qp + t] = acc;
        } else if s == k {
            var pqp = 0.0;
            for (var t = 0u; t < k; t++) {
                pqp += p[pb + t] * state[qp + t];
            }
            state[pqp_at] = pqp;
            // NaN errors are passed over, as the host's f32::max passes them over.
            var max_error = 0.0;
            for (var t = 0u; t < k; t++) {
                let e = abs(state[qp + t] - pqp);
                if e > max_error {
                    max_error = e;
                }
            }
            if max_error < 0.005 / f32(k) {
                state[done] = 1.0;
                return;
            }
        } else {
            let t = s - k - 1u;
            let qtt = state[diag + t];
            let qpt = state[qp + t];
            var pqp = state[pqp_at];
            let diff = (-qpt + pqp) / qtt;
            p[pb + t] += diff;
            pqp = (pqp + diff * (diff * qtt + 2.0 * qpt)) / (1.0 + diff) / (1.0 + diff);
            state[pqp_at] = pqp;
            for (var j = 0u; j < k; j++) {
                var qtj = qtt;
                if j != t {
                    qtj = q_off(base, t, j, k);
                }
                state[qp + j] = (state[qp + j] + diff * qtj) / (1.0 + diff);
                p[pb + j] /= 1.0 + diff;
            }
        }
    }
}
