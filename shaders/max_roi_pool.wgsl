// MaxRoiPool: output element (r, c, i, j) is the largest element of X[b, c, h0..h1, w0..w1],
// where the window table (made on the host from the ROIs) holds b and the bounds of row bin i
// and column bin j of ROI r; 0 where a window is empty. One invocation per output element
// (per two of 2-byte elements, which share a word). A dispatch folds the elements `first` to
// `first + count` of each window (in row-major order), on from the maximum the dispatch
// before left in the output: large windows take several (see `max_roi_pool.rs`).
//
// Elements are compared by their bits mapped to an unsigned order (no float arithmetic:
// f16, bf16, f32 and f64 alike, without shader-f16 or 64-bit types), NaN above every number,
// +0 above -0. The winner's bits are stored unchanged.

override ELEM_BYTES: u32 = 4u;
override WORKGROUP_SIZE: u32 = 64u;
// The infinity bits of the 2-byte type (0x7C00 for f16, 0x7F80 for bf16).
override EXPONENT_MASK_16: u32 = 0x7C00u;

struct Params {
    // Output elements: ROIs x channels x pooled_h x pooled_w.
    outputs: u32,
    channels: u32,
    height: u32,
    width: u32,
    pooled_h: u32,
    pooled_w: u32,
    // Invocations per row of the grid and rows per plane (grids folded into y and z beyond
    // 65 535 workgroups).
    row: u32,
    plane: u32,
    // The window elements this dispatch folds (row-major within each window).
    first: u32,
    count: u32,
    // Tensors beyond one binding run in passes: this one reads images [image_first,
    // image_end) of X, image_first from element x_first of X's binding on, and writes its
    // `outputs` (whole ROIs, table entries from 0) from element out_first of y's binding on;
    // with `windowed`, outputs of ROIs of other images keep what they hold.
    image_first: u32,
    image_end: u32,
    x_first: u32,
    out_first: u32,
    windowed: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
// Per ROI: its image b, then (h0, h1) per row bin, then (w0, w1) per column bin.
@group(0) @binding(2) var<storage, read> windows: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>;

// The bits of element `k` of X: (low word, high word), the high word 0 below 8 bytes.
fn element(k: u32) -> vec2<u32> {
    if ELEM_BYTES == 8u {
        return vec2<u32>(x[2u * k], x[2u * k + 1u]);
    }
    if ELEM_BYTES == 2u {
        return vec2<u32>((x[k / 2u] >> (16u * (k % 2u))) & 0xFFFFu, 0u);
    }
    return vec2<u32>(x[k], 0u);
}

// The element's place in the order of its values as an unsigned (high, low) pair: negative
// numbers (sign set) have every bit flipped, the others their sign bit set; NaN (exponent all
// ones, mantissa not zero) above everything.
fn order_key(v: vec2<u32>) -> vec2<u32> {
    var sign = 0x80000000u;
    var hi = v.x;
    var lo = 0u;
    var nan = false;
    if ELEM_BYTES == 8u {
        hi = v.y;
        lo = v.x;
        nan = (hi & 0x7FFFFFFFu) > 0x7FF00000u || ((hi & 0x7FFFFFFFu) == 0x7FF00000u && lo != 0u);
    } else if ELEM_BYTES == 2u {
        sign = 0x8000u;
        // f16 or bf16, whose exponent fields differ: EXPONENT_MASK_16 says which.
        nan = (hi & 0x7FFFu) > EXPONENT_MASK_16;
    } else {
        nan = (hi & 0x7FFFFFFFu) > 0x7F800000u;
    }
    if nan {
        return vec2<u32>(0xFFFFFFFFu, 0xFFFFFFFFu);
    }
    if (hi & sign) != 0u {
        return vec2<u32>(~hi & select(0xFFFFFFFFu, 0xFFFFu, ELEM_BYTES == 2u), ~lo);
    }
    return vec2<u32>(hi | sign, lo);
}

fn above(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.x > b.x || (a.x == b.x && a.y > b.y);
}

// True when output element `e` of this pass pools from an image this pass reads.
fn in_pass(e: u32) -> bool {
    let r = e / (params.pooled_w * params.pooled_h * params.channels);
    let b = windows[r * (1u + 2u * (params.pooled_h + params.pooled_w))];
    return b >= params.image_first && b < params.image_end;
}

// The bits of output element `e`, whose maximum so far (from the dispatches before this one)
// is `before`.
fn pooled(e: u32, before: vec2<u32>) -> vec2<u32> {
    let pw = params.pooled_w;
    let ph = params.pooled_h;
    let j = e % pw;
    let i = (e / pw) % ph;
    let c = (e / (pw * ph)) % params.channels;
    let r = e / (pw * ph * params.channels);
    let table = r * (1u + 2u * (ph + pw));
    let b = windows[table] - params.image_first;
    let h0 = windows[table + 1u + 2u * i];
    let h1 = windows[table + 2u + 2u * i];
    let w0 = windows[table + 1u + 2u * ph + 2u * j];
    let w1 = windows[table + 2u + 2u * ph + 2u * j];
    if h1 <= h0 || w1 <= w0 {
        return vec2<u32>(0u, 0u);
    }
    let plane = (b * params.channels + c) * params.height;
    let width = w1 - w0;
    let len = (h1 - h0) * width;
    if params.first >= len {
        return before;
    }
    var best = before;
    if params.first == 0u {
        best = element(params.x_first + (plane + h0) * params.width + w0);
    }
    var best_key = order_key(best);
    var h = h0 + params.first / width;
    var w = w0 + params.first % width;
    let end = min(len, params.first + params.count);
    // One loop over the stretch (lavapipe counts nested loops' iterations together).
    for (var t = params.first; t < end; t++) {
        let v = element(params.x_first + (plane + h) * params.width + w);
        let key = order_key(v);
        if above(key, best_key) {
            best = v;
            best_key = key;
        }
        w += 1u;
        if w == w1 {
            w = w0;
            h += 1u;
        }
    }
    return best;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = (gid.z * params.plane + gid.y) * params.row + gid.x;
    let keep = params.first > 0u || params.windowed != 0u;
    if ELEM_BYTES == 2u {
        // Two elements per word: word i of the pass holds its elements 2i - s and 2i + 1 - s
        // (s: whether its first element is a high half); a half beyond the pass's outputs,
        // or of an image another pass reads, keeps its bits (which are 0 with nothing kept).
        let s = params.out_first % 2u;
        let word_at = params.out_first / 2u + i;
        if 2u * i >= params.outputs + s {
            return;
        }
        let old = select(0u, y[word_at], keep);
        var word = old;
        for (var half = 0u; half < 2u; half++) {
            let k = 2u * i + half;
            if k < s || k - s >= params.outputs {
                continue;
            }
            let e = k - s;
            if keep && !in_pass(e) {
                continue;
            }
            let bits = pooled(e, vec2<u32>((old >> (16u * half)) & 0xFFFFu, 0u)).x;
            word = (word & ~(0xFFFFu << (16u * half))) | (bits << (16u * half));
        }
        y[word_at] = word;
        return;
    }
    if i >= params.outputs || (params.windowed != 0u && !in_pass(i)) {
        return;
    }
    let at = params.out_first + i;
    var before = vec2<u32>(0u, 0u);
    if params.first > 0u {
        if ELEM_BYTES == 8u {
            before = vec2<u32>(y[2u * at], y[2u * at + 1u]);
        } else {
            before = vec2<u32>(y[at], 0u);
        }
    }
    let v = pooled(i, before);
    if ELEM_BYTES == 8u {
        y[2u * at] = v.x;
        y[2u * at + 1u] = v.y;
    } else {
        y[at] = v.x;
    }
}
