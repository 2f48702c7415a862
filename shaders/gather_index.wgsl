// ONNX Gather: output element e = data[outer][indices[j]][inner], where e's coordinates are
// (outer, j, inner) in the output [outer, indices..., inner] and the data is [outer, axis,
// inner]. Indices are i32 or i64 (read as word pairs), negative ones count from the end; an
// index still out of range gives a zero element, and is reported where the kernel has a site
// (index_faults.inc, appended; the host checks indices it knows before the run). Elements move as bits in 32-bit words whatever the dtype; outputs of 1 or 2 bytes
// are written a whole word per invocation (no two invocations share a word).
// With ELEMENTS (ONNX GatherElements) the indices have the output's shape [outer, indices,
// inner] and output element e reads its own index, at position e, not at its middle coordinate.
// A gather whose data, indices or output exceed one binding runs in passes, each over a window
// of the output, of the indices and of the data: a pass writes only the elements whose index
// is at a position in [index_lo, index_hi) and whose source lies in data elements [src_lo,
// src_hi), the first pass over those indices also the elements of indices out of range
// (src/kernels/gather_index.rs plans the passes). Element and index numbers are the
// whole tensors'; the windows bound start at out_first, index_first and src_first.

override ELEM_BYTES: u32 = 4u;
// Indices are i64 (two words each), else i32.
override INDEX_64: bool = false;
override ELEMENTS: bool = false;
override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    // The output's elements up to the end of this pass's window, and the pass's invocations
    // with work (words for 1- and 2-byte elements).
    count: u32,
    units: u32,
    axis_dim: u32,
    inner: u32,
    indices: u32,
    // The output element at the start of the output window bound (at a whole word).
    out_first: u32,
    // Where an index out of range is reported (0: it is not).
    site: u32,
    // 1 when this pass writes (and reports) the elements of indices out of range.
    first_pass: u32,
    // `inner` and `indices` as `divide` takes them (divide.inc, appended): the two divisions
    // of every element's index are its costliest step.
    inner_shift: u32,
    inner_magic: u32,
    indices_shift: u32,
    indices_magic: u32,
    // The first index and data element bound, and the data elements this pass moves.
    index_first: u32,
    src_first: u32,
    src_lo: u32,
    src_hi: u32,
    // 1 when other passes write other elements of the same words (1- and 2-byte elements):
    // a pass keeps the lanes it does not write.
    merge: u32,
    // The positions among the indices this pass reads.
    index_lo: u32,
    index_hi: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> index_words: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

// Output element e's coordinates [outer, j, inner_pos] in [outer, indices, inner].
struct Position {
    outer: u32,
    j: u32,
    inner_pos: u32,
}

fn position(e: u32) -> Position {
    let t = divide(e, params.inner_shift, params.inner_magic);
    let outer = divide(t, params.indices_shift, params.indices_magic);
    return Position(outer, t - outer * params.indices, e - t * params.inner);
}

// The position of the next output element: a carry instead of two divisions, for the
// elements that share an output word.
fn next_position(p: Position) -> Position {
    var n = p;
    n.inner_pos += 1u;
    if n.inner_pos == params.inner {
        n.inner_pos = 0u;
        n.j += 1u;
        if n.j == params.indices {
            n.j = 0u;
            n.outer += 1u;
        }
    }
    return n;
}

// The data element for output element e at position p, as the low ELEM_BYTES * 8 bits of a
// word (x) and the high word of 8-byte elements (y), and whether this pass writes it.
struct Picked {
    bits: vec2<u32>,
    here: bool,
}

fn element_at(p: Position, e: u32) -> Picked {
    let at = select(p.j, e, ELEMENTS);
    if at < params.index_lo || at >= params.index_hi {
        return Picked(vec2<u32>(0u, 0u), false);
    }
    let w = index_words_at(at - params.index_first, INDEX_64);
    let index = index_within(w.x, w.y, params.axis_dim);
    if index < 0 {
        if params.first_pass != 0u {
            report_fault(params.site, at, w.x, w.y, 0u);
        }
        return Picked(vec2<u32>(0u, 0u), params.first_pass != 0u);
    }
    let global = (p.outer * params.axis_dim + u32(index)) * params.inner + p.inner_pos;
    if global < params.src_lo || global >= params.src_hi {
        return Picked(vec2<u32>(0u, 0u), false);
    }
    let s = global - params.src_first;
    if ELEM_BYTES == 8u {
        return Picked(vec2<u32>(src[2u * s], src[2u * s + 1u]), true);
    }
    if ELEM_BYTES == 4u {
        return Picked(vec2<u32>(src[s], 0u), true);
    }
    // min(): this path is dead for 4- and 8-byte elements but still constant-evaluated.
    let bits = min(ELEM_BYTES, 2u) * 8u;
    let lanes = 32u / bits;
    return Picked(vec2<u32>(extractBits(src[s / lanes], (s % lanes) * bits, bits), 0u), true);
}

// The entry point: packed_elements.inc, appended (then index_faults.inc and divide.inc).
