// Softmax, LogSoftmax, LayerNormalization and RMSNormalization of f32 rows lying one after
// another ([rows, n]) in one dispatch: LANES threads per row fold its statistics (the maximum
// and the sum of exp(x - max); the mean and the mean of the squared deviations; the mean of
// the squares) through workgroup memory, each reading the row again for the next, then write
// the results. The same steps as the reductions and programs the ops are otherwise built from
// (3 dispatches each), with no tensor in between. A workgroup holds WORKGROUP / LANES rows side
// by side; LANES 1 is a thread per row walking it in order (many rows on CPU adapters).

const WORKGROUP: u32 = 256u;
override LANES: u32 = 256u;
// 0 Softmax, 1 LogSoftmax, 2 LayerNormalization, 3 RMSNormalization.
override MODE: u32 = 0u;
// LayerNormalization's bias.
override HAS_BIAS: bool = false;

struct Params {
    rows: u32,
    n: u32,
    epsilon: f32,
    // 0: the bits of -inf made a runtime value (a constant infinity is a shader-creation error
    // in WGSL).
    zero: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
// The normalizations' scale and bias, of n elements (src bound in their place where unused).
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

var<workgroup> partial: array<f32, WORKGROUP>;

// On the bits: NVIDIA's driver folds `!(x == x)` next to a max away.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// max that keeps NaN, as the maximum reduction does.
fn max_nan(u: f32, v: f32) -> f32 {
    return select(max(u, v), u + v, is_nan(u) || is_nan(v));
}

// The row's lanes' values folded (sum, or with `maximum` max) through workgroup memory: every
// thread of the workgroup calls it (its barriers), each gets its row's result.
fn fold(value: f32, local: u32, maximum: bool) -> f32 {
    partial[local] = value;
    workgroupBarrier();
    let first = local - local % LANES;
    for (var stride = LANES / 2u; stride > 0u; stride /= 2u) {
        if local % LANES < stride {
            let other = partial[local + stride];
            partial[local] = select(partial[local] + other, max_nan(partial[local], other), maximum);
        }
        workgroupBarrier();
    }
    let result = partial[first];
    workgroupBarrier();
    return result;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let g = group.x + groups.x * (group.y + groups.y * group.z);
    let lane = local % LANES;
    let row = g * (WORKGROUP / LANES) + local / LANES;
    // Threads past the last row still take part in the folds (barriers), over no element.
    let n = select(0u, params.n, row < params.rows);
    let base = row * params.n;
    let count = f32(params.n);
    var first = 0.0;
    var second = 0.0;
    if MODE <= 1u {
        var m = bitcast<f32>(0xff800000u | params.zero);
        for (var j = lane; j < n; j += LANES) {
            m = max_nan(m, src[base + j]);
        }
        first = fold(m, local, true);
        var s = 0.0;
        for (var j = lane; j < n; j += LANES) {
            s += exp(src[base + j] - first);
        }
        second = fold(s, local, false);
    } else if MODE == 2u {
        var s = 0.0;
        for (var j = lane; j < n; j += LANES) {
            s += src[base + j];
        }
        first = fold(s, local, false) / count;
        var q = 0.0;
        for (var j = lane; j < n; j += LANES) {
            let d = src[base + j] - first;
            q += d * d;
        }
        second = fold(q, local, false) / count;
    } else {
        var q = 0.0;
        for (var j = lane; j < n; j += LANES) {
            let x = src[base + j];
            q += x * x;
        }
        second = fold(q, local, false) / count;
    }
    let inv = 1.0 / sqrt(second + params.epsilon);
    let log_sum = log(second);
    for (var j = lane; j < n; j += LANES) {
        let x = src[base + j];
        var y: f32;
        if MODE == 0u {
            y = exp(x - first) / second;
        } else if MODE == 1u {
            y = (x - first) - log_sum;
        } else if MODE == 2u {
            y = (x - first) * inv * scale[j];
            if HAS_BIAS {
                y = y + bias[j];
            }
        } else {
            y = x * inv * scale[j];
        }
        dst[base + j] = y;
    }
}
