// ONNX ScatterElements and ScatterND onto a copy of the data already in `dst`. Each invocation
// applies its updates in their order, so repeated indices end as onnxruntime leaves them (the
// last write, or the reduction in order):
// - ScatterElements: one invocation per column of the updates (every position but the one
//   along the axis), walking the axis: update k goes to the data element of its position with
//   the coordinate along the axis replaced by its index.
// - ScatterND: one invocation per element s of a slice, walking the index tuples: tuple n's
//   update s goes to element s of the slice the tuple addresses. Without a reduction, the
//   tuples claim their slices instead and every update is written at once (`main_claims`,
//   `main_claimed`, at the end).
// - ScatterElements whose indices land on distinct elements (TensorScatter's writes): the
//   updates need no order, so where the index repeats over rows of whole 16-byte quads, one
//   invocation per quad (`main_rows`), else, on GPUs, one per update (`main`). (CPU adapters
//   walk the columns instead: there a column's steps cost less than splitting every update's
//   position.)
// The walks in order take `steps` steps from `first` per dispatch: the host cuts long walks
// into several (lavapipe stops an invocation's loops after about 65 000 iterations).
// ScatterElements' indices may repeat along axes of the updates (index strides of 0).
// No two invocations write one element; 1- and 2-byte elements of neighbouring invocations
// share words, so every such word is replaced by compare-and-swap. Elements move as bits: the
// element's low bits in x (the high word of 8-byte elements in y); `combine` (generated for
// the dtype and reduction) merges the element there with the update. Indices are i32 or i64
// (word pairs; only values that fit in i32 can be in range); negative ones count from the end;
// an update whose index is out of range is skipped, and the index reported where the kernel
// has a site (index_faults.inc, appended; the host checks the indices it knows). Positions
// split by axis lengths with `divide` (divide.inc, appended): no division instruction.

override ELEM_BYTES: u32 = 4u;
override WORKGROUP_SIZE: u32 = 64u;

struct Axis {
    // ScatterElements: the column walk's axes (innermost first; of distinct targets, every
    // axis of the updates, the one scattered along with data stride 0): length, the updates',
    // the data's and the indices' element strides (0 where the indices repeat). ScatterND: the
    // indexed axes (in order): length, data stride.
    len: u32,
    ustride: u32,
    dstride: u32,
    istride: u32,
    // The length as `divide` takes it.
    shift: u32,
    magic: u32,
    _pad0: u32,
    _pad1: u32,
}

struct Params {
    // Invocations with work (columns, slice elements, or updates), and the updates each
    // applies.
    count: u32,
    steps: u32,
    // 0: ScatterElements, 1: ScatterND, 2: ScatterElements of distinct targets, 3: the same
    // by rows (`main_rows`); ScatterND's claims (`main_claims`, `main_claimed`) take none.
    mode: u32,
    index64: u32,
    // ScatterElements: the column walk's rank, the data's length along the axis, and the
    // updates' and data's strides along it. ScatterND: the tuple length, the slice length.
    rank: u32,
    axis_len: u32,
    axis_ustride: u32,
    axis_dstride: u32,
    axes: array<Axis, 16>,
    // Where an index out of range is reported (0: it is not).
    site: u32,
    // ScatterElements: the indices' stride along the axis.
    axis_istride: u32,
    // ScatterND: the slice length as `divide` takes it.
    slice_shift: u32,
    slice_magic: u32,
    // The walks in order: the first step of this dispatch (it takes `steps` from there).
    first: u32,
    // An output beyond one binding is scattered in passes over windows of it: this pass
    // writes data elements (quads for `main_rows` and `main_claimed_quads`) [dst_lo, dst_hi),
    // and `dst` starts at element dst_first (a whole word).
    dst_first: u32,
    dst_lo: u32,
    dst_hi: u32,
    // Updates and indices beyond one binding are read in boxes of the walk, a pass each: the
    // box's first update (element, or quad for the quad entries) and index element in their
    // windows, its first index position as reported (an element of the indices; ScatterND's
    // tuple), and the data element (quad) its walk starts at.
    upd_off: u32,
    idx_off: u32,
    pos_first: u32,
    data_off: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> index_words: array<u32>;
@group(0) @binding(2) var<storage, read> updates: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<atomic<u32>>; // DST

// Replacing; the kernel's generator puts the dtype's reduction here.
fn combine(old: vec2<u32>, v: vec2<u32>) -> vec2<u32> { return v; } // COMBINE

// Index j of the box (an element of the index tensor from its window's `idx_off`) against a
// length: the position, or -1 (reported as element `position` of the indices, or entry `entry`
// of tuple `position` for ScatterND).
fn index_at(j: u32, len: u32, position: u32, entry: u32) -> i32 {
    let w = index_words_at(params.idx_off + j, params.index64 != 0u);
    let index = index_within(w.x, w.y, len);
    if index < 0 {
        report_fault(params.site, position, w.x, w.y, entry);
    }
    return index;
}

// Update u of the box (from its window's `upd_off`).
fn update_at(box_u: u32) -> vec2<u32> {
    let u = params.upd_off + box_u;
    if ELEM_BYTES == 8u {
        return vec2<u32>(updates[2u * u], updates[2u * u + 1u]);
    }
    if ELEM_BYTES == 4u {
        return vec2<u32>(updates[u], 0u);
    }
    let bits = min(ELEM_BYTES, 2u) * 8u;
    let lanes = 32u / bits;
    return vec2<u32>(extractBits(updates[u / lanes], (u % lanes) * bits, bits), 0u);
}

// Merges update `v` into data element t, where this pass writes it.
fn apply(t: u32, v: vec2<u32>) {
    if t >= params.dst_lo && t < params.dst_hi {
        apply_here(t - params.dst_first, v);
    }
}

// Whether this pass writes data quad q.
fn quad_here(q: u32) -> bool {
    return q >= params.dst_lo && q < params.dst_hi;
}

// Merges update `v` into element t of `dst`.
// BEGIN SUB-WORD APPLY
// 1- and 2-byte elements, whose words neighbouring invocations share: compare-and-swap. (The
// generator swaps this block and `dst`'s type for plain loads and stores for 4- and 8-byte
// elements, whose words no other invocation touches: CPU adapters run atomics one lane at a
// time.)
fn apply_here(t: u32, v: vec2<u32>) {
    let bits = min(ELEM_BYTES, 2u) * 8u;
    let lanes = 32u / bits;
    let w = t / lanes;
    let shift = (t % lanes) * bits;
    var old = atomicLoad(&dst[w]);
    loop {
        let r = combine(vec2<u32>(extractBits(old, shift, bits), 0u), v).x;
        let word = insertBits(old, r, shift, bits);
        let swapped = atomicCompareExchangeWeak(&dst[w], old, word);
        if swapped.exchanged {
            break;
        }
        old = swapped.old_value;
    }
}
// END SUB-WORD APPLY

// The invocation's index in the dispatch (grids past 65 535 workgroups are folded into y and
// z by the host).
fn invocation(group: vec3<u32>, groups: vec3<u32>, local: u32) -> u32 {
    return (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
}

// Position p split over the walk's axes (`params.axes[..rank]`): its offsets in the updates,
// the indices and the data.
fn walk(p: u32) -> vec3<u32> {
    var rest = p;
    var offsets = vec3<u32>(0u);
    for (var k = 0u; k < params.rank; k++) {
        let axis = params.axes[k];
        let q = divide(rest, axis.shift, axis.magic);
        let x = rest - q * axis.len;
        rest = q;
        offsets += x * vec3<u32>(axis.ustride, axis.istride, axis.dstride);
    }
    return offsets;
}

// Where position u of distinct targets (an update, or a quad) lands: the index read for it
// (-1 when out of range, reported), its data position but along the axis, and the update's
// place in the box.
struct Place {
    index: i32,
    data: u32,
    update: u32,
}

fn distinct_place(u: u32) -> Place {
    let w = walk(u);
    let index = index_at(w.y, params.axis_len, params.pos_first + w.y, 0u);
    return Place(index, params.data_off + w.z, w.x);
}

// ScatterND's tuple n: whether every entry is in range (those out of range are reported),
// the data element its slice starts at, and that slice's number among the data's.
struct TupleSlice {
    valid: bool,
    base: u32,
    slot: u32,
}

fn tuple_slice(n: u32) -> TupleSlice {
    let k = params.rank;
    var t = TupleSlice(true, 0u, 0u);
    for (var j = 0u; j < k; j++) {
        let axis = params.axes[j];
        let i = index_at(n * k + j, axis.len, params.pos_first + n, j);
        t.valid = t.valid && i >= 0;
        t.base += u32(max(i, 0)) * axis.dstride;
        // The data's slices along axis j are `ustride` apart (its stride in slices).
        t.slot += u32(max(i, 0)) * axis.ustride;
    }
    return t;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let c = invocation(group, groups, local);
    if c >= params.count {
        return;
    }
    if params.mode == 2u {
        let p = distinct_place(c);
        if p.index >= 0 {
            apply(p.data + u32(p.index) * params.axis_dstride, update_at(p.update));
        }
        return;
    }
    if params.mode == 1u {
        for (var n = params.first; n < params.first + params.steps; n++) {
            let t = tuple_slice(n);
            if t.valid {
                apply(t.base + params.data_off + c, update_at(n * params.axis_len + c));
            }
        }
        return;
    }
    // The column's first update, index and data element (coordinate 0 along the axis).
    let w = walk(c);
    let u = w.x;
    let j = w.y;
    let d = params.data_off + w.z;
    for (var s = params.first; s < params.first + params.steps; s++) {
        let at = j + s * params.axis_istride;
        let i = index_at(at, params.axis_len, params.pos_first + at, 0u);
        if i >= 0 {
            apply(d + u32(i) * params.axis_dstride, update_at(u + s * params.axis_ustride));
        }
    }
}

// The same buffers as 16-byte quads, for `main_rows`.
@group(0) @binding(2) var<storage, read> updates4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> dst4: array<vec4<u32>>;

// ScatterElements of distinct targets whose index repeats over rows of whole quads (the axes
// after the one scattered along, laid out alike in the updates and the data): update quad q
// moves whole to its row's place. Mode 2's walk in quads: the row's quads are the innermost
// axis (index stride 0, data stride 1).
@compute @workgroup_size(WORKGROUP_SIZE)
fn main_rows(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let q = invocation(group, groups, local);
    if q >= params.count {
        return;
    }
    let p = distinct_place(q);
    let at = p.data + u32(max(p.index, 0)) * params.axis_dstride;
    if p.index >= 0 && quad_here(at) {
        dst4[at - params.dst_first] = updates4[params.upd_off + p.update];
    }
}

// BEGIN CLAIMS (only in the source of the entry points that use it: the others' layouts have
// no binding 5)
// ScatterND without a reduction, every update at once, the last of the tuples on one data slice
// winning as in the walk in order: `main_claims` (one invocation per tuple) leaves in each
// slice's claim the largest number + 1 of a tuple on it (the claims cleared before), then
// `main_claimed` (one per update element) writes those of the winning tuples. The claims take
// 4 bytes per data slice, where the walk in order runs a slice's elements in parallel and its
// tuples one after another: many tuples of small slices ran one long loop.
@group(0) @binding(5) var<storage, read_write> claims: array<atomic<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_claims(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let n = invocation(group, groups, local);
    if n >= params.steps {
        return;
    }
    let t = tuple_slice(n);
    if t.valid {
        atomicMax(&claims[t.slot], params.pos_first + n + 1u);
    }
}

// Position u of the box of claimed writes: where its update element (or quad) goes in the data
// (slices are `axis_len` long, in the same unit) and lies in the box's updates, valid where its
// tuple won that slice. A box holds whole slices, or part of one tuple's from slice element
// `data_off`.
struct Won {
    valid: bool,
    at: u32,
    update: u32,
}

fn won(u: u32) -> Won {
    let n = divide(u, params.slice_shift, params.slice_magic);
    let c = u - n * params.axis_len;
    let t = tuple_slice(n);
    let valid = t.valid && atomicLoad(&claims[t.slot]) == params.pos_first + n + 1u;
    let at = t.slot * params.axis_len + params.data_off + c;
    return Won(valid, at, n * params.axis_len + c);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_claimed(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let u = invocation(group, groups, local);
    if u >= params.count {
        return;
    }
    let w = won(u);
    if w.valid {
        apply(w.at, update_at(w.update));
    }
}

// `main_claimed` by 16-byte quads, where a slice is whole quads (`axis_len` and the divisor
// then count quads): no compare-and-swap for 1- and 2-byte elements.
@compute @workgroup_size(WORKGROUP_SIZE)
fn main_claimed_quads(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let q = invocation(group, groups, local);
    if q >= params.count {
        return;
    }
    let w = won(q);
    if w.valid && quad_here(w.at) {
        dst4[w.at - params.dst_first] = updates4[params.upd_off + w.update];
    }
}
