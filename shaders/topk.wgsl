// ONNX TopK along one axis of a tensor seen as [outer, axis, inner]: one invocation per
// (outer, inner) line keeps its K best elements sorted in the output as it walks the axis,
// inserting each element after the equal ones already kept (so of equal values the one with
// the lower index comes first, as ONNX asks). Indices are written as i64 word pairs. O(n K)
// per line: meant for the K of Scan bodies and classifiers, not for sorting long rows.
//
// A few long lines (a vocabulary's logits) would leave most of a GPU idle and take a
// dispatch per 16 384 / (2 K + 1) positions: those are split instead. `chunk_tops` keeps the
// K best of each chunk of a line in a list of its own (an invocation per chunk, as the walk
// keeps them), then `merge_tops` merges the lists two by two, a level per dispatch, until one
// is left per line, written to the outputs. Lists are sorted by value, then index; a merge
// takes from the right list (later positions) only what goes strictly before the left's
// head, so ties keep the lower index first and the K kept are the walk's.
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
    // The split lines: positions per list in (`span`: `chunk` for the chunks, doubling each
    // merge), lists per line in, where the lists in and out begin in `list_values` and
    // `list_indices`, and whether the lists out are the outputs (the last merge).
    span: u32,
    lists: u32,
    in_first: u32,
    out_first: u32,
    last: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<T>;
@group(0) @binding(2) var<storage, read_write> values: array<T>;
@group(0) @binding(3) var<storage, read_write> indices: array<u32>;
// The split lines' lists: values, and positions along the axis.
@group(0) @binding(4) var<storage, read_write> list_values: array<T>;
@group(0) @binding(5) var<storage, read_write> list_indices: array<u32>;

// Whether `a` goes before `b` in the output (ties keep their order: not before).
fn before(a: T, b: T) -> bool { return select((a < b), (a > b), LARGEST); } // BEFORE

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let line = invocation(group, groups, local);
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

fn invocation(group: vec3<u32>, groups: vec3<u32>, local: u32) -> u32 {
    return (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
}

// Entries a list covering positions `[first, first + span)` of the axis holds: its positions,
// at most K.
fn list_len(first: u32, span: u32) -> u32 {
    return min(min(span, params.axis_len - first), params.k);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn chunk_tops(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let c = invocation(group, groups, local);
    if c >= params.lines * params.lists {
        return;
    }
    let line = c / params.lists;
    let first = c % params.lists * params.span;
    let inner = params.inner;
    let src_base = params.src_first + line / inner * params.axis_len * inner + line % inner;
    // The chunk's list: its slots `stride` apart from list `c`'s start.
    let stride = min(params.span, params.k);
    let base = params.out_first + c * stride;
    var kept = 0u;
    for (var j = first; j < first + min(params.span, params.axis_len - first); j++) {
        let x = src[src_base + j * inner];
        var slot = kept;
        while slot > 0u && before(x, list_values[base + slot - 1u]) {
            slot -= 1u;
        }
        if slot >= params.k {
            continue;
        }
        var t = min(kept, params.k - 1u);
        while t > slot {
            list_values[base + t] = list_values[base + t - 1u];
            list_indices[base + t] = list_indices[base + t - 1u];
            t -= 1u;
        }
        list_values[base + slot] = x;
        list_indices[base + slot] = j;
        kept = min(kept + 1u, params.k);
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn merge_tops(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let out_lists = (params.lists + 1u) / 2u;
    let m = invocation(group, groups, local);
    if m >= params.lines * out_lists {
        return;
    }
    let line = m / out_lists;
    let pair = m % out_lists;
    let span = params.span;
    let stride = min(span, params.k);
    // The left list (lower positions) and the right one, if any.
    let left_first = 2u * pair * span;
    let left = params.in_first + (line * params.lists + 2u * pair) * stride;
    let right = left + stride;
    let left_len = list_len(left_first, span);
    var right_len = 0u;
    if 2u * pair + 1u < params.lists {
        right_len = list_len(left_first + span, span);
    }
    let out_len = min(left_len + right_len, params.k);
    // Where slot s of the merged list goes: the next level's list, or the outputs.
    let out_stride = min(2u * span, params.k);
    let out_base = params.out_first + m * out_stride;
    let inner = params.inner;
    let dst_base = line / inner * params.k * inner + line % inner;
    var i = 0u;
    var j = 0u;
    for (var s = 0u; s < out_len; s++) {
        let take_right = j < right_len
            && (i >= left_len || before(list_values[right + j], list_values[left + i]));
        var v: T;
        var at: u32;
        if take_right {
            v = list_values[right + j];
            at = list_indices[right + j];
            j++;
        } else {
            v = list_values[left + i];
            at = list_indices[left + i];
            i++;
        }
        if params.last != 0u {
            let o = dst_base + s * inner;
            values[params.values_first + o] = v;
            indices[2u * (params.indices_first + o)] = at;
            indices[2u * (params.indices_first + o) + 1u] = 0u;
        } else {
            list_values[out_base + s] = v;
            list_indices[out_base + s] = at;
        }
    }
}
