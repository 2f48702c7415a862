// Softmax, LogSoftmax, LayerNormalization and RMSNormalization of rows lying one after another
// ([rows, n]) in one dispatch: LANES threads per row fold its statistics (the maximum and the
// sum of exp(x - max); the mean and the mean of the squared deviations; the mean of the
// squares) through workgroup memory, each reading the row again for the next, then write the
// results. The same steps as the reductions and programs the ops are otherwise built from
// (3 dispatches each), with no tensor in between. A workgroup holds WORKGROUP / LANES rows side
// by side; LANES 1 is a thread per row walking it in order (many rows on CPU adapters).
//
// f32, or f16 and bf16 packed two to a word (rows of an even length, so that no word is
// shared by two rows): the normalizations compute in f32 and round once; Softmax and
// LogSoftmax round each step of their ONNX function body to the type (Sub, Exp, the sum
// accumulated in f32 then rounded, Div; or Log and Sub), as the general path does.

const WORKGROUP: u32 = 256u;
override LANES: u32 = 256u;
// 0 Softmax, 1 LogSoftmax, 2 LayerNormalization, 3 RMSNormalization.
override MODE: u32 = 0u;
// LayerNormalization's bias.
override HAS_BIAS: bool = false;
// The elements: 0 f32, 1 f16, 2 bf16.
override DTYPE: u32 = 0u;

struct Params {
    rows: u32,
    n: u32,
    epsilon: f32,
    // 0: the bits of -inf made a runtime value (a constant infinity is a shader-creation error
    // in WGSL).
    zero: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
// The normalizations' scale and bias, of n elements (src bound in their place where unused).
@group(0) @binding(2) var<storage, read> scale: array<u32>;
@group(0) @binding(3) var<storage, read> bias: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<u32>;

// WORD HELPERS

// Element i's value from the word holding it.
fn widen(word: u32, i: u32) -> f32 {
    if DTYPE == 0u {
        return bitcast<f32>(word);
    }
    let bits = field(word, i, 16u);
    if DTYPE == 1u {
        return f16_to_f32(bits);
    }
    return bitcast<f32>(bits << 16u);
}

fn x_at(i: u32) -> f32 {
    return widen(src[select(i, i / 2u, DTYPE != 0u)], i);
}

fn scale_at(j: u32) -> f32 {
    return widen(scale[select(j, j / 2u, DTYPE != 0u)], j);
}

fn bias_at(j: u32) -> f32 {
    return widen(bias[select(j, j / 2u, DTYPE != 0u)], j);
}

// v's bits in the type (f16 and bf16 in the low 16).
fn bits_of(v: f32) -> u32 {
    if DTYPE == 1u {
        return f32_to_f16(v);
    }
    if DTYPE == 2u {
        return f32_to_bf16(v);
    }
    return bitcast<u32>(v);
}

// v rounded to the type, as a step of the function body stores it.
fn rounded(v: f32) -> f32 {
    if DTYPE == 0u {
        return v;
    }
    return widen(bits_of(v), 0u);
}

var<workgroup> partial: array<f32, WORKGROUP>;

// max that keeps NaN, as the maximum reduction does.
fn max_nan(u: f32, v: f32) -> f32 {
    return select(max(u, v), u + v, is_nan32(u) || is_nan32(v));
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
    let folded = partial[first];
    workgroupBarrier();
    return folded;
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
        var m = runtime_f32(0xff800000u | params.zero);
        for (var j = lane; j < n; j += LANES) {
            m = max_nan(m, x_at(base + j));
        }
        first = fold(m, local, true);
        var s = 0.0;
        for (var j = lane; j < n; j += LANES) {
            s += rounded(exp(rounded(x_at(base + j) - first)));
        }
        second = rounded(fold(s, local, false));
    } else if MODE == 2u {
        var s = 0.0;
        for (var j = lane; j < n; j += LANES) {
            s += x_at(base + j);
        }
        first = fold(s, local, false) / count;
        var q = 0.0;
        for (var j = lane; j < n; j += LANES) {
            let d = x_at(base + j) - first;
            q += d * d;
        }
        second = fold(q, local, false) / count;
    } else {
        var q = 0.0;
        for (var j = lane; j < n; j += LANES) {
            let x = x_at(base + j);
            q += x * x;
        }
        second = fold(q, local, false) / count;
    }
    let inv = 1.0 / sqrt(second + params.epsilon);
    let log_sum = rounded(log(second));
    if DTYPE == 0u {
        for (var j = lane; j < n; j += LANES) {
            dst[base + j] = bits_of(result(base, j, first, second, inv, log_sum));
        }
    } else {
        // Two elements to a word: the row starts on a word (n is even).
        for (var p = lane; p < n / 2u; p += LANES) {
            let j = 2u * p;
            let low = bits_of(result(base, j, first, second, inv, log_sum));
            let high = bits_of(result(base, j + 1u, first, second, inv, log_sum));
            dst[(base + j) / 2u] = low | (high << 16u);
        }
    }
}

// Element j of the row at `base` from its statistics (Softmax: the maximum and the sum;
// LogSoftmax: the maximum and the log of the sum; the normalizations: the mean and the
// inverse deviation).
fn result(base: u32, j: u32, first: f32, second: f32, inv: f32, log_sum: f32) -> f32 {
    let x = x_at(base + j);
    if MODE == 0u {
        return rounded(exp(rounded(x - first))) / second;
    }
    if MODE == 1u {
        return rounded(x - first) - log_sum;
    }
    if MODE == 2u {
        var y = (x - first) * inv * scale_at(j);
        if HAS_BIAS {
            y = y + bias_at(j);
        }
        return y;
    }
    return x * inv * scale_at(j);
}
