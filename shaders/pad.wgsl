// ONNX Pad in one pass: output element e reads, along each axis, the input coordinate its
// output coordinate maps to under MODE, or is the constant when that falls outside (constant
// mode). Negative pads crop first (the host folds the crop into `base` and each axis' `len`);
// MODE then maps i = o - before on the cropped axis of `len` elements:
// 0 constant (outside [0, len) gives the value), 1 reflect (mirrored without repeating the
// edge; the host checks the pads are below len), 2 edge (clamped), 3 wrap (modulo len).
// Elements move as bits in 32-bit words whatever the dtype; outputs of 1 or 2 bytes are
// written a whole word per invocation (no two invocations share a word).

override ELEM_BYTES: u32 = 4u;
override MODE: u32 = 0u;
override WORKGROUP_SIZE: u32 = 64u;

struct Axis {
    // Output elements along the axis, the cropped input's, the pad before it, and the
    // input's element stride.
    out_len: u32,
    len: u32,
    before: u32,
    stride: u32,
}

struct Params {
    // Output elements, and invocations with work (words for 1- and 2-byte elements).
    count: u32,
    units: u32,
    rank: u32,
    // The input element at the cropped origin.
    base: u32,
    // The constant's bits (the high word for 8-byte elements).
    value: vec2<u32>,
    // Output element 0's place in `dst` (words for 1- and 2-byte elements).
    dst_base: u32,
    // Output element 0's index in the whole output (a window of a larger output).
    first: u32,
    axes: array<Axis, 16>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

// The input coordinate for cropped coordinate i (o - before) on an axis of `len`, or -1 for
// the constant.
fn source_coordinate(i: i32, len: i32) -> i32 {
    if MODE == 1u {
        // Reflect: period 2 (len - 1); the host guarantees len >= 2 where anything is padded.
        let period = max(2 * (len - 1), 1);
        var r = i % period;
        if r < 0 {
            r += period;
        }
        return select(r, period - r, r >= len);
    }
    if MODE == 2u {
        return clamp(i, 0, len - 1);
    }
    if MODE == 3u {
        var r = i % len;
        if r < 0 {
            r += len;
        }
        return r;
    }
    return select(i, -1, i < 0 || i >= len);
}

// Output element e as the low ELEM_BYTES * 8 bits of a word (x) and the high word of 8-byte
// elements (y).
fn element(e: u32) -> vec2<u32> {
    var rest = params.first + e;
    var s = params.base;
    for (var k = i32(params.rank) - 1; k >= 0; k--) {
        let axis = params.axes[k];
        let o = rest % axis.out_len;
        rest /= axis.out_len;
        let c = source_coordinate(i32(o) - i32(axis.before), i32(axis.len));
        if c < 0 {
            return params.value;
        }
        s += u32(c) * axis.stride;
    }
    if ELEM_BYTES == 8u {
        return vec2<u32>(src[2u * s], src[2u * s + 1u]);
    }
    if ELEM_BYTES == 4u {
        return vec2<u32>(src[s], 0u);
    }
    // min(): this path is dead for 4- and 8-byte elements but still constant-evaluated.
    let bits = min(ELEM_BYTES, 2u) * 8u;
    let lanes = 32u / bits;
    return vec2<u32>(extractBits(src[s / lanes], (s % lanes) * bits, bits), 0u);
}

// The entry point: packed_elements.inc, appended.
