// ONNX TopK along one axis of a tensor seen as [outer, axis, inner]: one invocation per
// (outer, inner) line keeps its K best elements as it walks the axis, in a heap in the output
// whose root is the worst kept (ranked by value, then index: of equal values the lower index
// is the better, as ONNX asks), so each element costs one comparison with the root, or
// O(log K) when it is kept; the heap is then sorted in place, the best first, by popping its
// root to the end. Indices are written as i64 word pairs. Long lines, and the sort of a large
// K, run in several dispatches (the heap stays in the output between them).
//
// A few long lines (a vocabulary's logits) would leave most of a GPU idle: those are split
// instead. `chunk_tops` keeps the K best of each chunk of a line in a heap of its own (an
// invocation per chunk, as the walk keeps them) and sorts it, then `merge_tops` merges the
// sorted lists two by two, a level per dispatch, until one is left per line, written to the
// outputs: an invocation per slot of a merged list finds by bisection how many of the slots
// before it each list fills (a merge path), so a level takes log2 K steps, whatever K. A
// merge takes from the right list (later positions) only what goes strictly before the
// left's head, so ties keep the lower index first and the K kept are the walk's.
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
    // The walk's sort: the heap's roots popped before this dispatch, and those it pops.
    popped: u32,
    pops: u32,
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

// Where the heap being kept lies: a walked line's slots in the outputs (slot s at
// `heap_at + s * heap_step` from each window's first line), or a chunk's list (slot s at
// `heap_at + s`).
var<private> in_list: bool;
var<private> heap_at: u32;
var<private> heap_step: u32;

fn heap_value(s: u32) -> T {
    if in_list {
        return list_values[heap_at + s];
    }
    return values[params.values_first + heap_at + s * heap_step];
}

fn heap_index(s: u32) -> u32 {
    if in_list {
        return list_indices[heap_at + s];
    }
    return indices[2u * (params.indices_first + heap_at + s * heap_step)];
}

fn heap_set(s: u32, v: T, at: u32) {
    if in_list {
        list_values[heap_at + s] = v;
        list_indices[heap_at + s] = at;
        return;
    }
    let o = heap_at + s * heap_step;
    values[params.values_first + o] = v;
    indices[2u * (params.indices_first + o)] = at;
    indices[2u * (params.indices_first + o) + 1u] = 0u;
}

// Whether element `a` at position `i` ranks after `b` at `j` (a strict total order: of equal
// values the higher position is the worse).
fn worse(a: T, i: u32, b: T, j: u32) -> bool {
    return before(b, a) || (!before(a, b) && i > j);
}

// Adds (v, at) as slot `n` of a heap of n, at a position after every kept one (so it ranks
// after the equal ones). At most log2(n) + 1 iterations.
fn sift_up(v: T, at: u32, n: u32) {
    var hole = n;
    while hole > 0u {
        let parent = (hole - 1u) / 2u;
        let pv = heap_value(parent);
        let pi = heap_index(parent);
        if before(v, pv) {
            break;
        }
        heap_set(hole, pv, pi);
        hole = parent;
    }
    heap_set(hole, v, at);
}

// Puts (v, at) in place of the root of a heap of `n`. At most log2(n) + 1 iterations.
fn sift_down(v: T, at: u32, n: u32) {
    var hole = 0u;
    loop {
        let left = 2u * hole + 1u;
        if left >= n {
            break;
        }
        var child = left;
        var cv = heap_value(left);
        var ci = heap_index(left);
        if left + 1u < n {
            let rv = heap_value(left + 1u);
            let ri = heap_index(left + 1u);
            if worse(rv, ri, cv, ci) {
                child = left + 1u;
                cv = rv;
                ci = ri;
            }
        }
        if !worse(cv, ci, v, at) {
            break;
        }
        heap_set(hole, cv, ci);
        hole = child;
    }
    heap_set(hole, v, at);
}

// Keeps the elements at positions [first, first + count) of the line whose first element is
// `src_base` in `src`, in a heap of `kept` of at most K: they go after every kept one. Once K
// are kept, the worst of them is held in a register and a tight loop skips what it beats
// (one comparison each; CPU adapters run every branch of a loop's body, so the sift stays
// out of it).
fn keep_run(src_base: u32, first: u32, count: u32, kept_before: u32) {
    let end = first + count;
    var p = first;
    for (var kept = kept_before; kept < params.k && p < end; kept++) {
        sift_up(src[src_base + p * params.inner], p, kept);
        p++;
    }
    var worst = heap_value(0u);
    loop {
        while p < end && !before(src[src_base + p * params.inner], worst) {
            p++;
        }
        if p >= end {
            break;
        }
        sift_down(src[src_base + p * params.inner], p, params.k);
        worst = heap_value(0u);
        p++;
    }
}

// Pops the worst of a heap of `n` to slot n - 1: after popping every root down to a heap of
// one, the slots hold the kept best first.
fn pop(n: u32) {
    let worst = heap_value(0u);
    let worst_at = heap_index(0u);
    sift_down(heap_value(n - 1u), heap_index(n - 1u), n - 1u);
    heap_set(n - 1u, worst, worst_at);
}

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
    in_list = false;
    heap_at = line_dst(line);
    heap_step = params.inner;
    keep_run(line_src(line), params.start, params.count, min(params.start, params.k));
    let kept = min(params.axis_len, params.k);
    for (var p = params.popped; p < params.popped + params.pops; p++) {
        pop(kept - p);
    }
}

// Where line `line` (of this window's lines, each [outer, inner] position) starts in `src`,
// and where its first kept slot lies in `values` and `indices` from their windows' first
// line; a line's positions, and its slots, are `inner` apart.
fn line_src(line: u32) -> u32 {
    let inner = params.inner;
    return params.src_first + line / inner * params.axis_len * inner + line % inner;
}

fn line_dst(line: u32) -> u32 {
    let inner = params.inner;
    return line / inner * params.k * inner + line % inner;
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
    // The chunk's list: K slots (fewer for a shorter chunk) from list `c`'s start.
    in_list = true;
    heap_at = params.out_first + c * min(params.span, params.k);
    keep_run(line_src(line), first, min(params.span, params.axis_len - first), 0u);
    for (var n = list_len(first, params.span); n > 1u; n--) {
        pop(n);
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn merge_tops(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    // One invocation per slot of each merged list.
    let out_lists = (params.lists + 1u) / 2u;
    let span = params.span;
    let out_stride = min(2u * span, params.k);
    let t = invocation(group, groups, local);
    if t >= params.lines * out_lists * out_stride {
        return;
    }
    let s = t % out_stride;
    let m = t / out_stride;
    let line = m / out_lists;
    let pair = m % out_lists;
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
    if s >= min(left_len + right_len, params.k) {
        return;
    }
    // How many of the merged list's first s slots the left list holds: the most i such that
    // left[i - 1] goes before right[s - i] (a right entry goes first only when strictly
    // before, so ties keep the lower position first), found by bisection.
    var lo = s - min(s, right_len);
    var hi = min(s, left_len);
    while lo < hi {
        let mid = (lo + hi + 1u) / 2u;
        if before(list_values[right + s - mid], list_values[left + mid - 1u]) {
            hi = mid - 1u;
        } else {
            lo = mid;
        }
    }
    let i = lo;
    let j = s - i;
    let take_right = j < right_len
        && (i >= left_len || before(list_values[right + j], list_values[left + i]));
    var taken = left + i;
    if take_right {
        taken = right + j;
    }
    let v = list_values[taken];
    let at = list_indices[taken];
    if params.last != 0u {
        let o = line_dst(line) + s * params.inner;
        values[params.values_first + o] = v;
        indices[2u * (params.indices_first + o)] = at;
        indices[2u * (params.indices_first + o) + 1u] = 0u;
    } else {
        list_values[params.out_first + m * out_stride + s] = v;
        list_indices[params.out_first + m * out_stride + s] = at;
    }
}
