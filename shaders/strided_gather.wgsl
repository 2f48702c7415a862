// Strided gather: output element i (C order) = input element
//   base + sum_k coord_k(i) * step_k
// where coord_k are the coordinates of i in the output shape. Steps are signed (reversed axes);
// they travel as two's-complement u32 and the sum wraps mod 2^32, which gives the exact index
// because every true index is below 2^32.
//
// Data is moved as 32-bit words whatever the dtype (ELEM_BYTES = 1, 2, 4 or 8):
// - 4 bytes: one word per element;
// - 8 bytes: two words per element;
// - 1 or 2 bytes: each invocation assembles one whole output word from 4 / ELEM_BYTES
//   elements, so no two invocations ever write the same word (no races, no atomics).

override ELEM_BYTES: u32 = 4u;
// Output element i goes to dst_base + i (dst_base counts words for 1- and 2-byte elements),
// or with DST_STRIDED (4- and 8-byte elements only) to dst_base + sum_k coord_k(i) * dst_step_k
// (Concat writes its inputs this way).
override DST_STRIDED: bool = false;
override WORKGROUP_SIZE: u32 = 64u;
override ITEMS: u32 = 4u;
// What the host knows of every dispatch of a pipeline, so the compiler drops the code that
// cannot run: the innermost step when it is 1, -1, 2 or -2 (0: read it from `params`; two's
// complement like `params.step`), and INTERIOR when every unit block is interior (in one
// innermost row, no skipped slots, and for `main_quads` on a whole output quad), which leaves
// out the edge paths and their checks. Code that never runs still costs time: on lavapipe
// this made reversed, every-other and mixed gathers 1.1x to 2.5x faster.
override INNER_STEP: u32 = 0u;
override INTERIOR: bool = false;

fn inner_step() -> u32 {
    if INNER_STEP != 0u {
        return INNER_STEP;
    }
    return params.step[0][0];
}

struct Params {
    // Output elements.
    count: u32,
    // Invocations with work: output words for 1- and 2-byte elements, else elements.
    units: u32,
    rank: u32,
    // Input element index of output element 0.
    base: u32,
    // Output shape and input steps, innermost axis first, 4 axes per vec4.
    shape: array<vec4<u32>, 4>,
    step: array<vec4<u32>, 4>,
    dst_base: u32,
    // 1- and 2-byte elements: element slots of the first output word that precede this
    // dispatch's output (a chunk starting inside a word); they keep their bytes.
    dst_skip: u32,
    _pad1: u32,
    _pad2: u32,
    dst_step: array<vec4<u32>, 4>,
    // Each length of `shape` as `divide` takes it (see `split`).
    shift: array<vec4<u32>, 4>,
    magic: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
// The same buffers as pairs of words, for `main_pairs` (8-byte elements in 8-byte aligned
// windows): an entry point uses one view or the other, never both.
@group(0) @binding(1) var<storage, read> src2: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> dst2: array<vec2<u32>>;
// And as quads of words, for `main_quads` (windows of whole quads, on GPUs): 16-byte stores,
// and 16-byte loads where four source words lie in one quad.
@group(0) @binding(1) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4<u32>>;

// `x` along axis `k`: (x / n, x % n) for its length n, by a shift and a mask where n is a
// power of two, else by `divide` (divide.inc, appended to this file: integer division is the
// costliest step of an index, and CPU adapters have no vector instruction for it). The branch
// is uniform: every invocation takes the same side.
fn split(x: u32, k: u32) -> vec2<u32> {
    let n = params.shape[k / 4u][k % 4u];
    let s = params.shift[k / 4u][k % 4u];
    if s < 32u {
        return vec2<u32>(x >> s, x & (n - 1u));
    }
    let q = divide(x, s, params.magic[k / 4u][k % 4u]);
    return vec2<u32>(q, x - q * n);
}

// The outermost axis holds what is left of an output index below `count`: no split there.
fn source_index(i: u32) -> u32 {
    if params.rank == 0u {
        return params.base;
    }
    let top = params.rank - 1u;
    var rest = i;
    var index = params.base;
    for (var k = 0u; k < top; k++) {
        let qr = split(rest, k);
        index += qr.y * params.step[k / 4u][k % 4u];
        rest = qr.x;
    }
    return index + rest * params.step[top / 4u][top % 4u];
}

fn destination_index(i: u32) -> u32 {
    if !DST_STRIDED {
        return params.dst_base + i;
    }
    if params.rank == 0u {
        return params.dst_base;
    }
    let top = params.rank - 1u;
    var rest = i;
    var index = params.dst_base;
    for (var k = 0u; k < top; k++) {
        let qr = split(rest, k);
        index += qr.y * params.dst_step[k / 4u][k % 4u];
        rest = qr.x;
    }
    return index + rest * params.dst_step[top / 4u][top % 4u];
}

// Consecutive output elements' source indices: the full decomposition once, then one add per
// element until the innermost axis wraps.
struct Cursor {
    index: u32,
    inner: u32,
}

fn cursor_at(i: u32) -> Cursor {
    return Cursor(source_index(i), split(i, 0u).y);
}

// The cursor `n` elements on, where output element `i_next` is.
fn advance(c: Cursor, n: u32, i_next: u32) -> Cursor {
    if c.inner + n < params.shape[0][0] {
        return Cursor(c.index + n * params.step[0][0], c.inner + n);
    }
    return cursor_at(i_next);
}

// Interior runs (the common case: ITEMS units within one innermost row, none at an edge) load
// everything before storing anything, in straight-line code. The compiler cannot tell `src`
// and `dst` apart, so a load after a store waits for it, and one load in flight per
// invocation is far from what a GPU needs to reach its bandwidth. Arrays would do the same
// in a loop, but CPU adapters then keep them in memory; named values stay in registers.

// Elements of 4 or 8 bytes: ITEMS consecutive output elements.
fn move_elements(first: u32) {
    var c = cursor_at(first);
    let step = inner_step();
    if ITEMS == 4u
        && (INTERIOR || (first + 4u <= params.count && c.inner + 4u <= params.shape[0][0])) {
        let d = destination_index(first);
        let dstep = select(1u, params.dst_step[0][0], DST_STRIDED);
        if ELEM_BYTES == 4u {
            let v0 = src[c.index];
            let v1 = src[c.index + step];
            let v2 = src[c.index + 2u * step];
            let v3 = src[c.index + 3u * step];
            dst[d] = v0;
            dst[d + dstep] = v1;
            dst[d + 2u * dstep] = v2;
            dst[d + 3u * dstep] = v3;
        } else {
            let i = 2u * c.index;
            let s = 2u * step;
            let a0 = src[i];
            let b0 = src[i + 1u];
            let a1 = src[i + s];
            let b1 = src[i + s + 1u];
            let a2 = src[i + 2u * s];
            let b2 = src[i + 2u * s + 1u];
            let a3 = src[i + 3u * s];
            let b3 = src[i + 3u * s + 1u];
            let o = 2u * d;
            let t = 2u * dstep;
            dst[o] = a0;
            dst[o + 1u] = b0;
            dst[o + t] = a1;
            dst[o + t + 1u] = b1;
            dst[o + 2u * t] = a2;
            dst[o + 2u * t + 1u] = b2;
            dst[o + 3u * t] = a3;
            dst[o + 3u * t + 1u] = b3;
        }
        return;
    }
    for (var k = 0u; k < ITEMS; k++) {
        let e = first + k;
        if e >= params.count {
            break;
        }
        let d = destination_index(e);
        if ELEM_BYTES == 4u {
            dst[d] = src[c.index];
        } else {
            dst[2u * d] = src[2u * c.index];
            dst[2u * d + 1u] = src[2u * c.index + 1u];
        }
        if k + 1u < ITEMS {
            c = advance(c, 1u, e + 1u);
        }
    }
}

// Input words `lo` and `hi` shifted right by `shift` bits (0..31): the 4 bytes that start
// `shift / 8` bytes into `lo`.
fn funnel(lo: u32, hi: u32, shift: u32) -> u32 {
    return (lo >> shift) | select(0u, hi << (32u - shift), shift != 0u);
}

// Element order reversed within a word (bytes, or 16-bit halves).
fn reverse_elements(w: u32) -> u32 {
    if ELEM_BYTES == 2u {
        return (w << 16u) | (w >> 16u);
    }
    return (w << 24u) | ((w & 0xFF00u) << 8u) | ((w >> 8u) & 0xFF00u) | (w >> 24u);
}

// The even-numbered elements of word `x` (bytes 0 and 2, or the low half), in its low half.
fn even_elements(x: u32) -> u32 {
    if ELEM_BYTES == 2u {
        return x & 0xFFFFu;
    }
    return (x & 0xFFu) | ((x >> 8u) & 0xFF00u);
}

// Four output words of every other input element, in input order, from the nine input words
// `q0`, `q1`, `s8` whose bytes from `shift / 8` on hold the first element: each output word
// takes the even elements of two shifted input words.
fn every_other(q0: vec4<u32>, q1: vec4<u32>, s8: u32, shift: u32) -> vec4<u32> {
    let a0 = funnel(q0.x, q0.y, shift);
    let a1 = funnel(q0.y, q0.z, shift);
    let a2 = funnel(q0.z, q0.w, shift);
    let a3 = funnel(q0.w, q1.x, shift);
    let a4 = funnel(q1.x, q1.y, shift);
    let a5 = funnel(q1.y, q1.z, shift);
    let a6 = funnel(q1.z, q1.w, shift);
    let a7 = funnel(q1.w, s8, shift);
    return vec4<u32>(even_elements(a0) | (even_elements(a1) << 16u),
                     even_elements(a2) | (even_elements(a3) << 16u),
                     even_elements(a4) | (even_elements(a5) << 16u),
                     even_elements(a6) | (even_elements(a7) << 16u));
}

// Four words in reverse order, each with its elements reversed.
fn reverse_words(a: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(reverse_elements(a.w), reverse_elements(a.z), reverse_elements(a.y),
                     reverse_elements(a.x));
}

// Interior runs of sub-word elements: the input element index of output slot `k` of a run
// whose first slot reads `index` (all in one row).
fn slot_index(index: u32, k: u32) -> u32 {
    return index + k * inner_step();
}

// The output word of sub-word slots `k..k + 4 / ELEM_BYTES` of an interior run whose slot 0
// reads input element `index`.
fn gathered_word(index: u32, k: u32) -> u32 {
    let per_word = 4u / min(ELEM_BYTES, 2u);
    let bits = ELEM_BYTES * 8u;
    let mask = select(0xFFFFu, 0xFFu, ELEM_BYTES == 1u);
    var word = 0u;
    for (var b = 0u; b < per_word; b++) {
        let e = slot_index(index, k + b);
        word |= ((src[e / per_word] >> ((e % per_word) * bits)) & mask) << (b * bits);
    }
    return word;
}

// Elements of 1 or 2 bytes: ITEMS consecutive output words, each assembled whole.
fn move_words(first: u32) {
    // min(): this function is dead for 4- and 8-byte elements but still constant-evaluated.
    let per_word = 4u / min(ELEM_BYTES, 2u);
    let bits = ELEM_BYTES * 8u;
    let mask = select(0xFFFFu, 0xFFu, ELEM_BYTES == 1u);
    let step = bitcast<i32>(inner_step());
    let first_slot = first * per_word;
    var c = cursor_at(select(0u, first_slot - params.dst_skip, first_slot >= params.dst_skip));
    let span = ITEMS * per_word;
    // A run of whole output words, all read from one input row.
    let interior = ITEMS == 4u && (INTERIOR || (first_slot >= params.dst_skip
        && first_slot - params.dst_skip + span <= params.count
        && c.inner + span <= params.shape[0][0]));
    let last = arrayLength(&src) - 1u;
    if interior && (step == 2 || step == -2) {
        // Every other element (in order or reversed): nine input words, shifted and picked.
        let low = select(c.index - 2u * (span - 1u), c.index, step == 2) * ELEM_BYTES;
        let w = low / 4u;
        let q0 = vec4<u32>(src[w], src[w + 1u], src[w + 2u], src[w + 3u]);
        let q1 = vec4<u32>(src[w + 4u], src[w + 5u], src[w + 6u], src[w + 7u]);
        // Read only when the bytes straddle it; clamped since it may lie past the input.
        let s8 = src[min(w + 8u, last)];
        var a = every_other(q0, q1, s8, (low % 4u) * 8u);
        if step == -2 {
            a = reverse_words(a);
        }
        let d = params.dst_base + first;
        dst[d] = a.x;
        dst[d + 1u] = a.y;
        dst[d + 2u] = a.z;
        dst[d + 3u] = a.w;
        return;
    }
    if interior && step != 1 && step != -1 {
        // Any other step: each element's index from the run's first, no cursor; all loads
        // before the stores.
        let w0 = gathered_word(c.index, 0u);
        let w1 = gathered_word(c.index, per_word);
        let w2 = gathered_word(c.index, 2u * per_word);
        let w3 = gathered_word(c.index, 3u * per_word);
        let d = params.dst_base + first;
        dst[d] = w0;
        dst[d + 1u] = w1;
        dst[d + 2u] = w2;
        dst[d + 3u] = w3;
        return;
    }
    if interior {
        // Sixteen adjacent input bytes (in order or reversed) make the four output words: five
        // input words, shifted into place.
        let low = select(c.index + 1u - span, c.index, step == 1) * ELEM_BYTES;
        let w = low / 4u;
        let shift = (low % 4u) * 8u;
        let s0 = src[w];
        let s1 = src[w + 1u];
        let s2 = src[w + 2u];
        let s3 = src[w + 3u];
        // Read only when the bytes straddle it; clamped since it may lie past the input.
        let s4 = src[min(w + 4u, last)];
        var a0 = funnel(s0, s1, shift);
        var a1 = funnel(s1, s2, shift);
        var a2 = funnel(s2, s3, shift);
        var a3 = funnel(s3, s4, shift);
        if step == -1 {
            let r0 = reverse_elements(a3);
            let r1 = reverse_elements(a2);
            a2 = reverse_elements(a1);
            a3 = reverse_elements(a0);
            a0 = r0;
            a1 = r1;
        }
        let d = params.dst_base + first;
        dst[d] = a0;
        dst[d + 1u] = a1;
        dst[d + 2u] = a2;
        dst[d + 3u] = a3;
        return;
    }
    for (var u = 0u; u < ITEMS; u++) {
        let unit = first + u;
        if unit >= params.units {
            break;
        }
        var word = 0u;
        var keep = 0u;
        for (var k = 0u; k < per_word; k++) {
            let slot = unit * per_word + k;
            if slot >= params.dst_skip && slot - params.dst_skip < params.count {
                let e = slot - params.dst_skip;
                let value = (src[c.index / per_word] >> ((c.index % per_word) * bits)) & mask;
                word |= value << (k * bits);
                c = advance(c, 1u, e + 1u);
            } else {
                keep |= mask << (k * bits);
            }
        }
        // Edge words shared with a neighbouring chunk keep its bytes. Chunks are separate
        // dispatches, so this read-modify-write never races.
        if keep != 0u {
            word |= dst[params.dst_base + unit] & keep;
        }
        dst[params.dst_base + unit] = word;
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    // Flattened id: grids past 65 535 workgroups are folded into y and z by the host.
    let invocation = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    // Each invocation moves ITEMS consecutive units (elements, or words of sub-word elements).
    let first = invocation * ITEMS;
    if first >= params.units {
        return;
    }
    if ELEM_BYTES >= 4u {
        move_elements(first);
    } else {
        move_words(first);
    }
}

// 8-byte elements as one 8-byte load and store each (ELEM_BYTES = 8; the host binds windows
// that start and end on 8-byte boundaries).
fn move_pairs(first: u32) {
    var c = cursor_at(first);
    let step = inner_step();
    if ITEMS == 4u
        && (INTERIOR || (first + 4u <= params.count && c.inner + 4u <= params.shape[0][0])) {
        let d = destination_index(first);
        let dstep = select(1u, params.dst_step[0][0], DST_STRIDED);
        let v0 = src2[c.index];
        let v1 = src2[c.index + step];
        let v2 = src2[c.index + 2u * step];
        let v3 = src2[c.index + 3u * step];
        dst2[d] = v0;
        dst2[d + dstep] = v1;
        dst2[d + 2u * dstep] = v2;
        dst2[d + 3u * dstep] = v3;
        return;
    }
    for (var k = 0u; k < ITEMS; k++) {
        let e = first + k;
        if e >= params.count {
            break;
        }
        dst2[destination_index(e)] = src2[c.index];
        if k + 1u < ITEMS {
            c = advance(c, 1u, e + 1u);
        }
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_pairs(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let invocation = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    let first = invocation * ITEMS;
    if first < params.count {
        move_pairs(first);
    }
}

// Quads per invocation of `main_quads`, a workgroup's width apart (so each load and store
// instruction of a warp still covers one contiguous span): an invocation computes the source
// of every quad it moves and loads them all before it stores any. A gather's index arithmetic
// comes before its load, so with one quad per invocation fewer loads are in flight than in the
// plain copy; several independent quads per invocation put them back.
override UNROLL: u32 = 1u;

// Source word `i` through the quad view.
fn quad_word(i: u32) -> u32 {
    return src4[i >> 2u][i & 3u];
}

// Source words i..i+3: one load when they are one quad.
fn quad_from(i: u32) -> vec4<u32> {
    if (i & 3u) == 0u {
        return src4[i >> 2u];
    }
    return vec4<u32>(quad_word(i), quad_word(i + 1u), quad_word(i + 2u), quad_word(i + 3u));
}

// Output words `at`..`at + 3` get `value`, where `ok`; else the unit block is at an edge of a
// row or of the output (or past the end) and moves by its edge path.
struct QuadMove {
    at: u32,
    value: vec4<u32>,
    ok: bool,
}

fn no_move() -> QuadMove {
    return QuadMove(0u, vec4<u32>(0u), false);
}

// 4-byte elements: four consecutive output elements from `first`, where they are one quad of
// the output and lie in one row.
fn quad_of_elements(first: u32) -> QuadMove {
    let c = cursor_at(first);
    let step = inner_step();
    let d = params.dst_base + first;
    if !INTERIOR
        && (first + 4u > params.count || c.inner + 4u > params.shape[0][0] || (d & 3u) != 0u) {
        return no_move();
    }
    var v: vec4<u32>;
    if step == 1u {
        v = quad_from(c.index);
    } else if step == 0xFFFFFFFFu {
        v = quad_from(c.index - 3u).wzyx;
    } else if step == 2u && (c.index & 3u) == 0u {
        // Every other word: two whole quads (the second lies in the window, which holds
        // whole quads, as its third word is read).
        let a = src4[c.index >> 2u];
        let b = src4[(c.index >> 2u) + 1u];
        v = vec4<u32>(a.x, a.z, b.x, b.z);
    } else {
        let i = c.index;
        v = vec4<u32>(quad_word(i), quad_word(i + step), quad_word(i + 2u * step),
                      quad_word(i + 3u * step));
    }
    return QuadMove(d, v, true);
}

// 4-byte elements at an edge: one at a time.
fn edge_elements(first: u32) {
    var c = cursor_at(first);
    for (var k = 0u; k < ITEMS; k++) {
        let e = first + k;
        if e >= params.count {
            break;
        }
        let o = params.dst_base + e;
        dst4[o >> 2u][o & 3u] = quad_word(c.index);
        if k + 1u < ITEMS {
            c = advance(c, 1u, e + 1u);
        }
    }
}

// 8-byte elements, two consecutive output elements (one 16-byte quad) per unit block: a warp's
// stores then cover one contiguous span, where four elements (two quads) per invocation left
// every store instruction half of each 32-byte sector to fill.
fn quad_of_pairs(first: u32) -> QuadMove {
    let c = cursor_at(first);
    let step = inner_step();
    let d = (params.dst_base + first) * 2u;
    if !INTERIOR
        && (first + 2u > params.count || c.inner + 2u > params.shape[0][0] || (d & 3u) != 0u) {
        return no_move();
    }
    let i = 2u * c.index;
    var v: vec4<u32>;
    if step == 1u {
        v = quad_from(i);
    } else if step == 0xFFFFFFFFu {
        // Elements index and index - 1: words i-2..i+1, pairs swapped.
        v = quad_from(i - 2u).zwxy;
    } else if step == 2u && (i & 3u) == 0u {
        // Every other element: the first pair of two whole quads.
        let a = src4[i >> 2u];
        let b = src4[(i >> 2u) + 1u];
        v = vec4<u32>(a.x, a.y, b.x, b.y);
    } else {
        let s = 2u * step;
        v = vec4<u32>(quad_word(i), quad_word(i + 1u), quad_word(i + s), quad_word(i + s + 1u));
    }
    return QuadMove(d, v, true);
}

// 8-byte elements at an edge: one at a time.
fn edge_pairs(first: u32) {
    var c = cursor_at(first);
    for (var k = 0u; k < 2u; k++) {
        let e = first + k;
        if e >= params.count {
            break;
        }
        let o = (params.dst_base + e) * 2u;
        let i = c.index * 2u;
        let lo = quad_word(i);
        let hi = quad_word(i + 1u);
        dst4[o >> 2u][o & 3u] = lo;
        dst4[(o + 1u) >> 2u][(o + 1u) & 3u] = hi;
        if k == 0u {
            c = advance(c, 1u, e + 1u);
        }
    }
}

// `gathered_word` through the quad view.
fn gathered_word_quads(index: u32, k: u32) -> u32 {
    let per_word = 4u / min(ELEM_BYTES, 2u);
    let bits = ELEM_BYTES * 8u;
    let mask = select(0xFFFFu, 0xFFu, ELEM_BYTES == 1u);
    var word = 0u;
    for (var b = 0u; b < per_word; b++) {
        let e = slot_index(index, k + b);
        word |= ((quad_word(e / per_word) >> ((e % per_word) * bits)) & mask) << (b * bits);
    }
    return word;
}

// Output words d..d+3 through the quad view: one store where they are one quad.
fn store_words(d: u32, a: vec4<u32>) {
    if (d & 3u) == 0u {
        dst4[d >> 2u] = a;
    } else {
        for (var k = 0u; k < 4u; k++) {
            dst4[(d + k) >> 2u][(d + k) & 3u] = a[k];
        }
    }
}

// The source word after quad `w`'s four when the bytes wanted start `shift` bits into `w`
// (they then straddle it), else 0 without a load: clamped, since it may lie past the input.
fn straddled_word(w: u32, shift: u32) -> u32 {
    if shift == 0u {
        return 0u;
    }
    return quad_word(min(w, arrayLength(&src4) * 4u - 1u));
}

// 1- and 2-byte elements: `move_words`' interior runs through the quad views, four output
// words from unit `first` on. A copy, not a shared function: WGSL cannot hand a function the
// buffer to use (storage pointers as parameters need an extension browsers lack), and an
// entry point binds one view of a buffer.
fn quad_of_words(first: u32) -> QuadMove {
    let per_word = 4u / min(ELEM_BYTES, 2u);
    let step = bitcast<i32>(inner_step());
    let first_slot = first * per_word;
    let c = cursor_at(select(0u, first_slot - params.dst_skip, first_slot >= params.dst_skip));
    let span = ITEMS * per_word;
    let d = params.dst_base + first;
    let interior = ITEMS == 4u && first_slot >= params.dst_skip
        && first_slot - params.dst_skip + span <= params.count
        && c.inner + span <= params.shape[0][0];
    if !INTERIOR && !interior {
        return no_move();
    }
    var a: vec4<u32>;
    if step == 2 || step == -2 {
        // Every other element (in order or reversed): nine input words, shifted and picked.
        let low = select(c.index - 2u * (span - 1u), c.index, step == 2) * ELEM_BYTES;
        let w = low / 4u;
        let shift = (low % 4u) * 8u;
        a = every_other(quad_from(w), quad_from(w + 4u), straddled_word(w + 8u, shift), shift);
        if step == -2 {
            a = reverse_words(a);
        }
    } else if step != 1 && step != -1 {
        a = vec4<u32>(gathered_word_quads(c.index, 0u),
                      gathered_word_quads(c.index, per_word),
                      gathered_word_quads(c.index, 2u * per_word),
                      gathered_word_quads(c.index, 3u * per_word));
    } else {
        // Sixteen adjacent input bytes (in order or reversed): five input words, shifted.
        let low = select(c.index + 1u - span, c.index, step == 1) * ELEM_BYTES;
        let w = low / 4u;
        let shift = (low % 4u) * 8u;
        let q = quad_from(w);
        let s4 = straddled_word(w + 4u, shift);
        a = vec4<u32>(funnel(q.x, q.y, shift), funnel(q.y, q.z, shift),
                      funnel(q.z, q.w, shift), funnel(q.w, s4, shift));
        if step == -1 {
            a = reverse_words(a);
        }
    }
    return QuadMove(d, a, true);
}

// 1- and 2-byte elements at an edge: each output word assembled slot by slot; slots outside
// this dispatch's output keep their bytes.
fn edge_words(first: u32) {
    let per_word = 4u / min(ELEM_BYTES, 2u);
    let bits = ELEM_BYTES * 8u;
    let mask = select(0xFFFFu, 0xFFu, ELEM_BYTES == 1u);
    let first_slot = first * per_word;
    var c = cursor_at(select(0u, first_slot - params.dst_skip, first_slot >= params.dst_skip));
    for (var u = 0u; u < ITEMS; u++) {
        let unit = first + u;
        if unit >= params.units {
            break;
        }
        var word = 0u;
        var keep = 0u;
        for (var k = 0u; k < per_word; k++) {
            let slot = unit * per_word + k;
            if slot >= params.dst_skip && slot - params.dst_skip < params.count {
                let e = slot - params.dst_skip;
                let value = (quad_word(c.index / per_word) >> ((c.index % per_word) * bits)) & mask;
                word |= value << (k * bits);
                c = advance(c, 1u, e + 1u);
            } else {
                keep |= mask << (k * bits);
            }
        }
        let o = params.dst_base + unit;
        if keep != 0u {
            word |= dst4[o >> 2u][o & 3u] & keep;
        }
        dst4[o >> 2u][o & 3u] = word;
    }
}

// The move of the unit block from `first` (2 elements of 8 bytes, else ITEMS units), or none.
fn quad_move(first: u32) -> QuadMove {
    if first >= params.units {
        return no_move();
    }
    if ELEM_BYTES == 8u {
        return quad_of_pairs(first);
    }
    if ELEM_BYTES == 4u {
        return quad_of_elements(first);
    }
    return quad_of_words(first);
}

// Stores move `m` of the unit block from `first`, or moves that block by its edge path.
fn finish_quad(first: u32, m: QuadMove) {
    if m.ok {
        store_words(m.at, m.value);
    } else if !INTERIOR && first < params.units {
        if ELEM_BYTES == 8u {
            edge_pairs(first);
        } else if ELEM_BYTES == 4u {
            edge_elements(first);
        } else {
            edge_words(first);
        }
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_quads(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let workgroup = group.x + groups.x * (group.y + groups.y * group.z);
    // Units per block: 2 elements of 8 bytes (one quad), else ITEMS (the host sizes the grid
    // alike). Block b of this invocation starts `b` workgroup widths after its first.
    let per_block = select(ITEMS, 2u, ELEM_BYTES == 8u);
    let first = (workgroup * WORKGROUP_SIZE * UNROLL + local) * per_block;
    let span = WORKGROUP_SIZE * per_block;
    // Every block's loads before any block's store (see `move_elements`).
    let m0 = quad_move(first);
    var m1 = no_move();
    var m2 = no_move();
    var m3 = no_move();
    if UNROLL >= 2u {
        m1 = quad_move(first + span);
    }
    if UNROLL >= 4u {
        m2 = quad_move(first + 2u * span);
        m3 = quad_move(first + 3u * span);
    }
    finish_quad(first, m0);
    if UNROLL >= 2u {
        finish_quad(first + span, m1);
    }
    if UNROLL >= 4u {
        finish_quad(first + 2u * span, m2);
        finish_quad(first + 3u * span, m3);
    }
}
