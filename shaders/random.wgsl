// Random numbers (RandomUniform, RandomNormal, Bernoulli, Multinomial; Dropout's mask):
// Philox4x32-10, a counter-based generator (Salmon et al., SC 2011), so each invocation
// computes its own numbers and no state is shared between invocations. Block `b` of draw `d`
// is philox((b, 0, d_lo, d_hi), key): four words, which make four f32 values or two f64
// values. The draw index `d` is read from `state`, which random_advance.wgsl increments after
// each draw: a node in a Scan body draws new numbers at every iteration with no host work.
// reference/random.rs computes the same words and values on the CPU.
//
// Specialized per element type by a validated substitution of the marked lines below.

alias T = f32; // ELEMENT TYPE
// F64 MATH

// Per element type (the f64 variants replace these lines, see kernels/random.rs): values per
// block, the block's uniform and normal values, and the arithmetic on T (f64 on u32 pairs
// without SHADER_F64).
const PER_BLOCK: u32 = 4u; // PER BLOCK
fn units(w: vec4<u32>) -> array<T, 4> { let v = units32(w); return array<T, 4>(v.x, v.y, v.z, v.w); } // UNITS
fn normals(w: vec4<u32>) -> array<T, 4> { let v = normals32(w); return array<T, 4>(v.x, v.y, v.z, v.w); } // NORMALS
fn t_of(x: f32) -> T { return T(x); } // OF F32
fn t_of_u32(x: u32) -> T { return T(x); } // OF U32
fn t_add(x: T, y: T) -> T { return x + y; } // ADD
fn t_sub(x: T, y: T) -> T { return x - y; } // SUB
fn t_mul(x: T, y: T) -> T { return x * y; } // MUL
fn t_less(x: T, y: T) -> bool { return x < y; } // LESS

override WORKGROUP_SIZE: u32 = 64u;
// 0: uniform in [a, b); 1: normal with mean a and scale b; 2: Bernoulli, 1 where the value
// is below the probability in `src`; 3: Multinomial, the class of each sample, found in the
// running sums of its row's probabilities in `src` (rows of `classes`, `samples` per row).
override MODE: u32 = 0u;

struct Params {
    a: f32,
    b: f32,
    count: u32,
    key_lo: u32,
    key_hi: u32,
    classes: u32,
    samples: u32,
    // An output beyond one binding is drawn in passes over windows of it: this pass computes
    // blocks [block_first, block_end); `dst` starts at element dst_first, Bernoulli's `src` at
    // src_first. Multinomial's running sums beyond one binding are read in windows of whole
    // rows: this pass draws the samples of rows [row_first, row_end), row_first's sums at
    // element src_first of the window.
    block_first: u32,
    block_end: u32,
    dst_first: u32,
    src_first: u32,
    row_first: u32,
    row_end: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> state: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<T>;
@group(0) @binding(3) var<storage, read_write> dst: array<T>;

// The full product of two words as (high word, low word), from 16-bit halves.
fn mul_hi_lo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p10 & 0xffffu) + p01;
    return vec2<u32>(a1 * b1 + (p10 >> 16u) + (mid >> 16u), a * b);
}

fn philox(counter: vec4<u32>, key_in: vec2<u32>) -> vec4<u32> {
    var x = counter;
    var key = key_in;
    for (var r = 0u; r < 10u; r++) {
        let p0 = mul_hi_lo(0xD2511F53u, x.x);
        let p1 = mul_hi_lo(0xCD9E8D57u, x.z);
        x = vec4<u32>(p1.x ^ x.y ^ key.x, p1.y, p0.x ^ x.w ^ key.y, p0.y);
        key += vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
    }
    return x;
}

// f32: uniforms on a grid of 2^-24, four per block; normals from a radius of 32 bits and an
// angle of 32 bits (by series on the quarter turn, since GPUs' built-in cos and sin are good
// to only about 2^-11 absolute).
fn unit(w: u32) -> f32 {
    return f32(w >> 8u) * 5.9604644775390625e-8;
}
fn units32(w: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(unit(w.x), unit(w.y), unit(w.z), unit(w.w));
}
// (cos, sin) of the fraction w / 2^32 of a turn.
fn turn(w: u32) -> vec2<f32> {
    let q = (w + 0x20000000u) >> 30u;
    let r = f32(bitcast<i32>(w - (q << 30u))) * 1.4629180792671596e-9;
    let r2 = r * r;
    let c = 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889 + r2 * 2.48015873015873e-5)));
    let s = r * (1.0 + r2 * (-0.16666666666666666 + r2 * (0.008333333333333333 + r2 * (-0.0001984126984126984 + r2 * 2.7557319223985893e-6))));
    switch q {
        case 0u: { return vec2<f32>(c, s); }
        case 1u: { return vec2<f32>(-s, c); }
        case 2u: { return vec2<f32>(-c, -s); }
        default: { return vec2<f32>(s, -c); }
    }
}
// -log((u + 1) / 2^32): near 1 from 1 - x = (2^32 - 1 - u) / 2^32, exact, by the series of
// 2 atanh(s), s = d / (2 - d) <= 1/3, since built-in log is good to only 2^-21 absolute
// there (small radii would lose most of their digits).
fn minus_log_unit(u: u32) -> f32 {
    if u < 0x80000000u {
        return -log((f32(u) + 1.0) * 2.3283064365386963e-10);
    }
    let d = f32(0xffffffffu - u) * 2.3283064365386963e-10;
    let s = d / (2.0 - d);
    let z = s * s;
    let p = 1.0 + z * (0.3333333333333333 + z * (0.2 + z * (0.14285714285714285 + z * (0.1111111111111111 + z * (0.09090909090909091 + z * 0.07692307692307693)))));
    return 2.0 * s * p;
}
fn normal_pair(u: u32, v: u32) -> vec2<f32> {
    return sqrt(2.0 * minus_log_unit(u)) * turn(v);
}
fn normals32(w: vec4<u32>) -> vec4<f32> {
    let a = normal_pair(w.x, w.y);
    let b = normal_pair(w.z, w.w);
    return vec4<f32>(a.x, a.y, b.x, b.y);
}

// The class of a sample at `goal` in row `row`'s running sums: the first whose sum exceeds
// it (zero-probability classes are never chosen), else the last (NaN sums).
fn class_at(row: u32, goal: T) -> u32 {
    let base = (row - params.row_first) * params.classes + params.src_first;
    var lo = 0u;
    var hi = params.classes - 1u;
    while lo < hi {
        let mid = (lo + hi) / 2u;
        if t_less(goal, src[base + mid]) {
            hi = mid;
        } else {
            lo = mid + 1u;
        }
    }
    return lo;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let block = params.block_first + (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    let first = block * PER_BLOCK;
    if block >= params.block_end || first >= params.count {
        return;
    }
    let words = philox(vec4<u32>(block, 0u, state[0], state[1]), vec2<u32>(params.key_lo, params.key_hi));
    var values = units(words);
    if MODE == 1u {
        values = normals(words);
    }
    let a = t_of(params.a);
    let b = t_of(params.b);
    for (var k = 0u; k < PER_BLOCK; k++) {
        let i = first + k;
        if i >= params.count {
            break;
        }
        switch MODE {
            case 0u: {
                dst[i - params.dst_first] = t_add(a, t_mul(t_sub(b, a), values[k]));
            }
            case 1u: {
                dst[i - params.dst_first] = t_add(a, t_mul(b, values[k]));
            }
            case 2u: {
                let p = src[i - params.src_first];
                dst[i - params.dst_first] = t_of_u32(select(0u, 1u, t_less(values[k], p)));
            }
            default: {
                let row = i / params.samples;
                // Rows beyond this pass's window of sums are drawn by another pass.
                if row >= params.row_first && row < params.row_end {
                    let total = src[(row - params.row_first) * params.classes + params.src_first + params.classes - 1u];
                    dst[i - params.dst_first] = t_of_u32(class_at(row, t_mul(values[k], total)));
                }
            }
        }
    }
}
