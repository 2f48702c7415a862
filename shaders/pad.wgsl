// ONNX Pad in one pass: output element e reads, along each axis, the input coordinate its
// output coordinate maps to under MODE, or is the constant when that falls outside (constant
// mode). Negative pads crop first (the host folds the crop into `base` and each axis' `len`);
// MODE then maps i = o - before on the cropped axis of `len` elements:
// 0 constant (outside [0, len) gives the value), 1 reflect (mirrored without repeating the
// edge; the host checks len >= 2 where anything is padded), 2 edge (clamped), 3 wrap (modulo
// len). Elements move as bits in 32-bit words whatever the dtype; outputs of 1 or 2 bytes are
// written a whole word per invocation (no two invocations share a word).
//
// No division instruction: output indices are split by each axis' length, and coordinates
// outside the input folded by the mode's period, with `divide` (divide.inc, appended), and a
// coordinate inside the input (nearly all of them) takes no folding at all. The innermost
// axis is split once per row: the elements of a word that lie in one row share its outer part.

override ELEM_BYTES: u32 = 4u;
override MODE: u32 = 0u;
override WORKGROUP_SIZE: u32 = 64u;

struct Axis {
    // Output elements along the axis, the cropped input's, the pad before it, and the
    // input's element stride (1 for the innermost axis).
    out_len: u32,
    len: u32,
    before: u32,
    stride: u32,
    // `out_len` as `divide` takes it; the period of the mode's folding (2 (len - 1) for
    // reflect, len for wrap) and its own divisor.
    out_shift: u32,
    out_magic: u32,
    period: u32,
    period_shift: u32,
    period_magic: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct Params {
    // Output elements, and output words.
    count: u32,
    units: u32,
    // Axes, at least 1 (a scalar comes as one axis of 1), outermost first.
    rank: u32,
    // The input element at the cropped origin.
    base: u32,
    // The constant's bits (the high word for 8-byte elements).
    value: vec2<u32>,
    // Output element 0's word in `dst`.
    dst_base: u32,
    // Output element 0's index in the whole output (a window of a larger output).
    first: u32,
    axes: array<Axis, 16>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

const OUTSIDE: u32 = 0xFFFFFFFFu;

// The cropped input coordinate that output coordinate o maps to along `axis`, or OUTSIDE for
// the constant. Reflect and wrap are symmetric about the axis' start, so a coordinate before
// it folds its distance from the start (before - o) and one after it its distance o - before.
fn source_coordinate(o: u32, axis: Axis) -> u32 {
    let ahead = o < axis.before;
    let x = select(o - axis.before, axis.before - o, ahead);
    if !ahead && x < axis.len {
        return x;
    }
    if MODE == 0u {
        return OUTSIDE;
    }
    if MODE == 2u {
        return select(axis.len - 1u, 0u, ahead);
    }
    let r = x - divide(x, axis.period_shift, axis.period_magic) * axis.period;
    if MODE == 3u {
        // Wrap: -x is len - r, or 0 for r = 0.
        return select(r, select(axis.len - r, 0u, r == 0u), ahead);
    }
    // Reflect: residues past the far edge come back from it.
    return select(r, axis.period - r, r >= axis.len);
}

// The row of output element e: the input element (of the binding, wrapping: a window may
// start inside the row) to which its innermost coordinate's source is added (`at`), that
// coordinate (`o`), and whether an outer axis gives the constant instead (`constant`).
struct Row {
    at: u32,
    o: u32,
    constant: bool,
}

fn row_of(e: u32) -> Row {
    let top = params.rank - 1u;
    let inner = params.axes[top];
    var rest = params.first + e;
    let q = divide(rest, inner.out_shift, inner.out_magic);
    let o = rest - q * inner.out_len;
    rest = q;
    var at = params.base;
    // Outer axes, innermost first; the outermost holds what is left (no split).
    for (var k = i32(top) - 1; k >= 0; k--) {
        let axis = params.axes[k];
        var c = rest;
        if k > 0 {
            let q = divide(rest, axis.out_shift, axis.out_magic);
            c = rest - q * axis.out_len;
            rest = q;
        }
        let s = source_coordinate(c, axis);
        if s == OUTSIDE {
            return Row(0u, o, true);
        }
        at += s * axis.stride;
    }
    return Row(at, o, false);
}

// The element at innermost coordinate o of `row`, as the low ELEM_BYTES * 8 bits of a word
// (x) and the high word of 8-byte elements (y).
fn element(row: Row, o: u32) -> vec2<u32> {
    let c = source_coordinate(o, params.axes[params.rank - 1u]);
    if row.constant || c == OUTSIDE {
        return params.value;
    }
    let s = row.at + c;
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

// The 16 bytes of input from element s on (any alignment for 1- and 2-byte elements).
fn input_quad(s: u32) -> vec4<u32> {
    var w = s;
    var shift = 0u;
    if ELEM_BYTES == 8u {
        w = 2u * s;
    } else if ELEM_BYTES < 4u {
        // min(): this path is dead for 4- and 8-byte elements but still constant-evaluated.
        let lanes = 4u / min(ELEM_BYTES, 2u);
        w = s / lanes;
        shift = (s % lanes) * ELEM_BYTES * 8u;
    }
    let v = vec4<u32>(src[w], src[w + 1u], src[w + 2u], src[w + 3u]);
    if shift == 0u {
        return v;
    }
    // The run's last bytes lie in the fifth word.
    let next = vec4<u32>(v.yzw, src[w + 4u]);
    return (v >> vec4<u32>(shift)) | (next << vec4<u32>(32u - shift));
}

// The constant repeated over 16 bytes.
fn constant_quad() -> vec4<u32> {
    let v = params.value;
    if ELEM_BYTES == 8u {
        return vec4<u32>(v, v);
    }
    var word = v.x;
    if ELEM_BYTES == 1u {
        word = (v.x & 0xFFu) * 0x01010101u;
    } else if ELEM_BYTES == 2u {
        word = (v.x & 0xFFFFu) * 0x00010001u;
    }
    return vec4<u32>(word);
}

// Output words [w, w + 4) of the dispatch (w a multiple of 4); words past its end are 0.
// Where the quad's elements lie in one row and read one run of input (the common case), or
// all are the constant of a constant row, it is moved whole; else element by element.
fn output_quad(w: u32) -> vec4<u32> {
    let n = 16u / ELEM_BYTES;
    let e0 = w * 4u / ELEM_BYTES;
    let row = row_of(e0);
    let inner = params.axes[params.rank - 1u];
    if e0 + n <= params.count && row.o + n <= inner.out_len {
        if row.constant {
            return constant_quad();
        }
        let i = row.o - inner.before;
        if row.o >= inner.before && i + n <= inner.len {
            return input_quad(row.at + i);
        }
    }
    var out = vec4<u32>(0u);
    var r = row;
    var o = row.o;
    // min(): the 1- and 2-byte paths are dead otherwise but still constant-evaluated.
    let bits = min(ELEM_BYTES, 2u) * 8u;
    let lanes = 32u / bits;
    for (var j = 0u; j < n; j++) {
        let e = e0 + j;
        if e >= params.count {
            break;
        }
        if o == inner.out_len {
            // The quad continues in the next row.
            r = row_of(e);
            o = r.o;
        }
        let v = element(r, o);
        if ELEM_BYTES == 8u {
            out[2u * j] = v.x;
            out[2u * j + 1u] = v.y;
        } else if ELEM_BYTES == 4u {
            out[j] = v.x;
        } else {
            out[j / lanes] = insertBits(out[j / lanes], v.x, (j % lanes) * bits, bits);
        }
        o++;
    }
    return out;
}

fn invocation(group: vec3<u32>, groups: vec3<u32>, local: u32) -> u32 {
    return (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
}

// Four output words per invocation, stored one by one (any `dst_base`, any length).
@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let w = 4u * invocation(group, groups, local);
    if w >= params.units {
        return;
    }
    let q = output_quad(w);
    let d = params.dst_base + w;
    let n = min(params.units - w, 4u);
    for (var k = 0u; k < n; k++) {
        dst[d + k] = q[k];
    }
}

// Four output words per invocation as one 16-byte store (`dst_base` and `units` multiples
// of 4: the host's choice where it holds).
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_quads(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let t = invocation(group, groups, local);
    if 4u * t >= params.units {
        return;
    }
    dst4[params.dst_base / 4u + t] = output_quad(4u * t);
}
