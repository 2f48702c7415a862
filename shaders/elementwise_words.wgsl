// Element-wise programs on every dtype, reading and writing raw 32-bit words: out[i] is a
// chain of element-wise steps (one op, or several fused) over N operands read at their
// broadcast positions (numpy rules, stride 0 on broadcast axes). Each operand is loaded into
// the type it computes in (8/16-bit integers widened to 32 bits, f16 and bf16 to f32, bool to
// u32 0/1); each step's result is narrowed to its dtype as a store would narrow it (integers
// wrap, f16 and bf16 round to nearest-even by integer arithmetic), so a fused chain gives the
// bits of its ops run one by one, whatever a driver's conversions do (and its folds across
// steps: see `opaque_source`). Outputs of 1 or 2 bytes
// are written a whole word per invocation (no two invocations share a word; no atomics).
//
// Specialized per program by a validated substitution of the marked lines below; the tests
// validate every single-op variant and many fused ones with naga.

override WORKGROUP_SIZE: u32 = 64u;
// Bytes of an output element: 1, 2, 4 or 8.
override OUT_BYTES: u32 = 4u;
// The walk's rank the index code is compiled for: 1, 2 or 3, 4 for four axes or more, 0 for
// any (read from `params.rank`).
override WALK_RANK: u32 = 0u;
// Operands of the program.
const OPERANDS: u32 = 1u; // OPERAND COUNT

struct Params {
    // Output elements of this dispatch.
    count: u32,
    // Invocations with work: output words for 1- and 2-byte outputs, else elements.
    units: u32,
    rank: u32,
    // Element index of this dispatch's output element 0 in the bound output window.
    dst_base: u32,
    // Element offsets of the operands inside their bound windows (up to 8).
    base: array<vec4<u32>, 2>,
    // Output shape, innermost axis first.
    shape: array<vec4<u32>, 4>,
    // Each operand's element strides, innermost axis first.
    stride: array<array<vec4<u32>, 4>, OPERANDS>,
    // Each axis' length as a divisor (src/kernels/divide.rs), innermost axis first.
    shift: array<vec4<u32>, 4>,
    magic: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> w0: array<u32>; // OPERAND BINDINGS
@group(0) @binding(2) var<storage, read_write> dst: array<u32>; // OUTPUT BINDING
// The same output as 16-byte quads, for `main_quads`.
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4<u32>>; // OUTPUT QUADS BINDING

// A small uniform (the walk's rank, below 2^29), whose high bits are the zeros that keep a
// fused program's steps apart (`opaque_f32_0` and its kin, src/kernels/program.rs).
fn opaque_source() -> u32 {
    return params.rank;
}

// BEGIN WORD HELPERS (the reduction kernel's template receives this block too)
// Infinity and NaN made at run time: as constant expressions they are shader-creation errors
// in WGSL (Chromium's Tint rejects them; naga does not).
fn runtime_f32(bits: u32) -> f32 {
    var b = bits;
    return bitcast<f32>(b);
}

// BEGIN F16 CONVERSIONS (a context whose adapter converts exactly swaps in f16_native.wgsl)
// f16 bits (low 16) to f32, exactly (subnormals, infinities and NaN payloads included).
fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0x1fu {
        return runtime_f32(sign | 0x7f800000u | (m << 13u));
    }
    if e == 0u {
        // Subnormal or zero: m * 2^-24, exact in f32.
        let v = f32(m) * 5.9604644775390625e-8;
        return select(v, -v, sign != 0u);
    }
    return runtime_f32(sign | ((e + 112u) << 23u) | (m << 13u));
}

// f32 to f16 bits, rounded to nearest-even; NaN stays a (quiet) NaN.
fn f32_to_f16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let sign = (x >> 16u) & 0x8000u;
    let mag = x & 0x7fffffffu;
    if mag > 0x7f800000u {
        return sign | 0x7e00u | ((mag >> 13u) & 0x3ffu);
    }
    if mag >= 0x477ff000u {
        // 65520 and above round to infinity.
        return sign | 0x7c00u;
    }
    if mag >= 0x38800000u {
        // Normal in f16: rebias the exponent, round the 13 dropped bits.
        let r = mag - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    }
    let e = mag >> 23u;
    if e < 102u {
        // Below 2^-25: rounds to zero.
        return sign;
    }
    // Subnormal in f16: the significand in units of 2^-24, rounded.
    let m = (mag & 0x7fffffu) | 0x800000u;
    let shift = 126u - e;
    let q = m >> shift;
    let rest = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    let up = rest > half || (rest == half && (q & 1u) == 1u);
    return sign | (q + u32(up));
}
// END F16 CONVERSIONS

// Whether x is NaN, from its bits: drivers fold `!(x == x)` away next to a min or max.
fn is_nan32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// f32 to bf16 bits, rounded to nearest-even; NaN stays a (quiet) NaN.
fn f32_to_bf16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    if (x & 0x7fffffffu) > 0x7f800000u {
        return (x >> 16u) | 0x40u;
    }
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}

// The 8- or 16-bit field of word `w` holding element `i` (zero-extended).
fn field(w: u32, i: u32, bits: u32) -> u32 {
    return extractBits(w, (i % (32u / bits)) * bits, bits);
}

// log and log2 on f32 taking positive subnormals at their value: drivers may take the log
// from the exponent field as if the number were normal (lavapipe gives -88.03 for 1e-45,
// whose log is -103.28) or flush subnormals to zero (-inf). A subnormal's bits, read as an
// integer, are its value times 2^149, and that integer (below 2^23) converts to f32 exactly.
fn onnx_log(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    if bits - 1u < 0x007fffffu {
        return log(f32(bits)) - 103.27892990343185;
    }
    return log(x);
}
fn onnx_log2(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    if bits - 1u < 0x007fffffu {
        return log2(f32(bits)) - 149.0;
    }
    return log2(x);
}
// END WORD HELPERS

// C's pow on f32 (onnxruntime's): WGSL's pow is undefined for negative bases and for 0^0.
// a^n by squaring: x^2 exactly rounded as C's pow gives it, and whole powers of integers
// exact while they fit (5^4 = 625, where exp2(4 log2 5) is 624.9999, truncated to 624).
fn pow_whole(a: f32, n: u32) -> f32 {
    var k = n;
    var x = a;
    var r = 1.0;
    loop {
        if (k & 1u) == 1u {
            r = r * x;
        }
        k = k >> 1u;
        if k == 0u {
            break;
        }
        x = x * x;
    }
    return r;
}
fn onnx_pow(a: f32, b: f32) -> f32 {
    if b == 0.0 || a == 1.0 {
        return 1.0;
    }
    if is_nan32(a) || is_nan32(b) {
        return a + b;
    }
    let inf = runtime_f32(0x7f800000u);
    if abs(a) == 1.0 && abs(b) == inf {
        return 1.0;
    }
    if a == 0.0 {
        return select(0.0, inf, b < 0.0);
    }
    if floor(b) == b && abs(b) <= 1024.0 {
        let n = u32(abs(b));
        if b > 0.0 {
            return pow_whole(a, n);
        }
        // 1 / a^n, or (1 / a)^n where a^n overflows and its reciprocal need not.
        let p = pow_whole(a, n);
        return select(1.0 / p, pow_whole(1.0 / a, n), abs(p) == inf);
    }
    let m = exp2(b * onnx_log2(abs(a)));
    if a > 0.0 {
        return m;
    }
    if floor(b) != b {
        // A negative base to a fractional power: NaN, but for -inf.
        return select(runtime_f32(0x7fc00000u), m, a == -inf);
    }
    let odd = abs(b) < 16777216.0 && (i32(abs(b)) & 1) == 1;
    return select(m, -m, odd);
}

// tanh on f32 from its series and exp, not the built-in, which GPUs may approximate (NVIDIA's
// is good to about 11 bits): the series to z^15 below 0.5 (truncation below 1e-8 relative),
// 1 - 2 / (e^2z + 1) above, where the subtraction loses at most a factor 1.2. NaN stays NaN.
fn onnx_tanh(x: f32) -> f32 {
    if is_nan32(x) {
        return x;
    }
    let z = abs(x);
    var t: f32;
    if z < 0.5 {
        let s = z * z;
        var p = 929569.0 / 638512875.0;
        p = 21844.0 / 6081075.0 - s * p;
        p = 1382.0 / 155925.0 - s * p;
        p = 62.0 / 2835.0 - s * p;
        p = 17.0 / 315.0 - s * p;
        p = 2.0 / 15.0 - s * p;
        p = 1.0 / 3.0 - s * p;
        t = z - z * s * p;
    } else {
        t = 1.0 - 2.0 / (exp(2.0 * min(z, 15.0)) + 1.0);
    }
    return select(t, -t, bitcast<i32>(x) < 0);
}

// log(1 + x) on f32. For x in [-0.5, 1] (Softplus's e^-|x| among them) 2 atanh(s) with
// s = x / (2 + x), |s| <= 1/3, by its odd series to s^17 (truncation below 1e-9): no
// subtraction cancels, where log(1 + x) would lose the digits of a small x to the rounding
// of 1 + x (and GPUs' log near 1 is accurate only to an absolute 2^-22 or so). Tricks that
// undo that rounding, such as ((1 + x) - 1), are folded away by shader compilers.
fn onnx_log1p(x: f32) -> f32 {
    if !(x >= -0.5 && x <= 1.0) {
        return log(1.0 + x);
    }
    let s = x / (2.0 + x);
    let z = s * s;
    var p = 1.0 / 17.0;
    p = 1.0 / 15.0 + z * p;
    p = 1.0 / 13.0 + z * p;
    p = 1.0 / 11.0 + z * p;
    p = 1.0 / 9.0 + z * p;
    p = 1.0 / 7.0 + z * p;
    p = 1.0 / 5.0 + z * p;
    p = 1.0 / 3.0 + z * p;
    return 2.0 * s + 2.0 * s * z * p;
}

// erf on f32: its Taylor series near 0, else 1 - erfc by a Chebyshev fit (relative error
// below 1.2e-7).
fn onnx_erf(x: f32) -> f32 {
    let z = abs(x);
    if z < 0.5 {
        let s = z * z;
        let p = 1.0 - s * (1.0 / 3.0 - s * (0.1 - s * (1.0 / 42.0 - s * (1.0 / 216.0 - s / 1320.0))));
        return x * 1.1283791670955126 * p;
    }
    let t = 1.0 / (1.0 + 0.5 * z);
    let q = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277))))))));
    let r = 1.0 - t * exp(q);
    return select(r, -r, x < 0.0);
}
// END MATH HELPERS (the MatMul kernel's epilogues receive the helpers up to here)

// Operand element i from its words (the marked line is specialized per operand dtype).
alias T0 = f32; fn load0(i: u32) -> T0 { return bitcast<f32>(w0[i]); } // LOADS

// One function per step, with the aliases and helpers of its types.
fn step0(a: f32) -> f32 { return a; } // STEPS

alias R = f32; // RESULT TYPE

// A result's bits: the low word (the low 8 or 16 bits for narrow types), and the high word of
// 64-bit types.
fn bits(r: R) -> vec2<u32> { return vec2<u32>(bitcast<u32>(r), 0u); } // BITS

// Output element `e` of this dispatch: its operands' elements, computed. The indexes are one
// variable per operand (generated; a private array indexed in a loop is much slower on CPU
// adapters): one multiply each for one axis (same-shape operands, merged on the host), else
// a walk over the axes.
fn compute(e: u32) -> R {
    var i0 = params.base[0][0]; // INDEXES
    return step0(load0(i0)); // PROGRAM
}

// The output word holding results e..e + 32 / width (sub-word outputs).
fn packed_word(e: u32) -> u32 {
    // min(): dead for 4- and 8-byte outputs but still constant-evaluated.
    let width = min(OUT_BYTES, 2u) * 8u;
    var word = 0u;
    for (var lane = 0u; lane < 32u / width; lane++) {
        word = insertBits(word, bits(compute(e + lane)).x, lane * width, width);
    }
    return word;
}

// One 16-byte quad of results per invocation (programs, and lone 4-byte ops on GPUs): four
// 4-byte results, two 8-byte ones, or four words of 16 / OUT_BYTES packed ones. The host picks
// this entry point only where the output's piece starts on a quad and is whole quads, with
// `units` the number of quads.
@compute @workgroup_size(WORKGROUP_SIZE)
fn main_quads(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let t = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if t >= params.units {
        return;
    }
    let per_quad = 16u / OUT_BYTES;
    let e = per_quad * t;
    var q: vec4<u32>;
    if OUT_BYTES == 8u {
        let a = bits(compute(e));
        let b = bits(compute(e + 1u));
        q = vec4<u32>(a.x, a.y, b.x, b.y);
    } else if OUT_BYTES == 4u {
        q = vec4<u32>(
            bits(compute(e)).x,
            bits(compute(e + 1u)).x,
            bits(compute(e + 2u)).x,
            bits(compute(e + 3u)).x,
        );
    } else {
        let lanes = per_quad / 4u;
        q = vec4<u32>(
            packed_word(e),
            packed_word(e + lanes),
            packed_word(e + 2u * lanes),
            packed_word(e + 3u * lanes),
        );
    }
    dst4[params.dst_base / per_quad + t] = q;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let t = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if t >= params.units {
        return;
    }
    if OUT_BYTES >= 4u {
        let v = bits(compute(t));
        let d = params.dst_base + t;
        if OUT_BYTES == 8u {
            dst[2u * d] = v.x;
            dst[2u * d + 1u] = v.y;
        } else {
            dst[d] = v.x;
        }
        return;
    }
    // One whole output word: its element slots before or after this dispatch's output keep
    // their bytes (a window or a neighbour's output may start or end inside the word).
    // min(): this path is dead for 4- and 8-byte outputs but still constant-evaluated.
    let width = min(OUT_BYTES, 2u) * 8u;
    let lanes = 32u / width;
    let w = params.dst_base / lanes + t;
    var word = 0u;
    var keep = 0u;
    for (var lane = 0u; lane < lanes; lane++) {
        let slot = w * lanes + lane;
        if slot < params.dst_base || slot - params.dst_base >= params.count {
            keep |= insertBits(0u, 0xffffffffu, lane * width, width);
        } else {
            word = insertBits(word, bits(compute(slot - params.dst_base)).x, lane * width, width);
        }
    }
    if keep != 0u {
        word |= dst[w] & keep;
    }
    dst[w] = word;
}
