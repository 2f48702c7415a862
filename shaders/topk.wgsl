// ONNX TopK along one axis of a tensor seen as [outer, axis, inner]: one invocation per
// (outer, inner) line keeps its K best elements sorted in the output as it walks the axis,
// inserting each element after the equal ones already kept (so of equal values the one with
// the lower index comes first, as ONNX asks). Indices are written as i64 word pairs. O(n K)
// per line: meant for the K of Scan bodies and classifiers, not for sorting long rows.
//
// Specialized per dtype by a validated substitution of the marked lines below (i64 and u64
// emulated on u32 pairs compare word by word).

alias T = f32; // ELEMENT TYPE

override WORKGROUP_SIZE: u32 = 64u;
override LARGEST: bool = true;

struct Params {
    lines: u32,
    axis_len: u32,
    inner: u32,
    k: u32,
    // This dispatch walks positions [start, start + count) of each line (long lines run in
    // several dispatches; the elements kept so far are in the outputs).
    start: u32,
    count: u32,
    // Where the first line's first element lies in `src`, `values` and `indices` (i64s):
    // tensors beyond one binding run in windows of whole outer slices.
    src_first: u32,
    values_first: u32,
    indices_first: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<T>;
@group(0) @binding(2) var<storage, read_write> values: array<T>;
@group(0) @binding(3) var<storage, read_write> indices: array<u32>;

// Whether `a` goes before `b` in the output (ties keep their order: not before).
fn before(a: T, b: T) -> bool { return select((a < b), (a > b), LARGEST); } // BEFORE

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let line = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if line >= params.lines {
        return;
    }
    let inner = params.inner;
    let inner_pos = line % inner;
    let outer = line / inner;
    let src_base = params.src_first + outer * params.axis_len * inner + inner_pos;
    let dst_base = outer * params.k * inner + inner_pos;
    // Values and indices of this line's kept elements: slot s at `dst_base + s * inner` of
    // each, from where each window puts the first line.
    let vb = params.values_first;
    let ib = params.indices_first;
    var kept = min(params.start, params.k);
    for (var j = params.start; j < params.start + params.count; j++) {
        let x = src[src_base + j * inner];
        // The slot x goes to: after every kept element not worse than it.
        var slot = kept;
        while slot > 0u && before(x, values[vb + dst_base + (slot - 1u) * inner]) {
            slot -= 1u;
        }
        if slot >= params.k {
            continue;
        }
        // Shift the worse ones down one place (the last falls off when K are kept).
        var t = min(kept, params.k - 1u);
        while t > slot {
            let to = dst_base + t * inner;
            let source = dst_base + (t - 1u) * inner;
            values[vb + to] = values[vb + source];
            indices[2u * (ib + to)] = indices[2u * (ib + source)];
            indices[2u * (ib + to) + 1u] = 0u;
            t -= 1u;
        }
        let at = dst_base + slot * inner;
        values[vb + at] = x;
        indices[2u * (ib + at)] = j;
        indices[2u * (ib + at) + 1u] = 0u;
        kept = min(kept + 1u, params.k);
    }
}
