// ONNX CumSum (and CumProd, `add` then multiplying from 1) along one axis of a tensor seen as
// [outer, axis, inner]: one invocation per (outer, inner) line walks the axis in order (or
// reversed), writing the running sum after (inclusive) or before (exclusive) adding each
// element. Lines are independent, so a large
// tensor has as many invocations as it has lines.
//
// A few long lines would leave most of a GPU idle, walking one element after another: those
// run as a scan in blocks instead, three dispatches per pass. A block is `rounds` rounds of
// SCAN_GROUP chunks of `chunk` positions, a chunk per invocation. `block_totals` sums each
// block of each line, `scan_totals` turns each line's block sums into the sum before each
// block (from the sum carried from the stretch before, if any), and `block_scan` writes each
// block's running sums from there, a round at a time: each invocation sums its chunk, the
// workgroup's running sums of those give each chunk's start, and each invocation walks its
// chunk from there. (Longer chunks mean fewer barriers per element: CPU adapters run a
// workgroup's invocations in turns at each barrier.)
// The sums are then added in another order than one walk's, so floats may round apart from
// it (integers wrap alike in any order).
//
// Specialized per dtype by a validated substitution of the marked lines below (i64 and u64
// emulated on u32 pairs add with carries).

alias T = f32; // ELEMENT TYPE

fn add(a: T, b: T) -> T { return a + b; } // ADD
fn identity() -> T { return T(0); } // IDENTITY

override WORKGROUP_SIZE: u32 = 64u;
override EXCLUSIVE: bool = false;
override REVERSE: bool = false;

struct Params {
    lines: u32,
    axis_len: u32,
    inner: u32,
    // This dispatch walks positions [start, start + count) of each line (long lines run in
    // several dispatches; the running sum so far is read back from the output).
    start: u32,
    count: u32,
    // Where the first line's first element lies in `src` and `dst`: tensors beyond one
    // binding run in windows of whole outer slices.
    src_first: u32,
    dst_first: u32,
    // A line longer than a window runs in stretches, each in windows of its own: its sum so
    // far is kept in `aux[line]` at the end of each dispatch and taken from there (where not,
    // the output holds it).
    carry: u32,
    // The scan in blocks: blocks per line, rounds of SCAN_GROUP positions per block, and
    // where in `aux` the lines' block sums begin (past the carried sums).
    blocks: u32,
    rounds: u32,
    totals_first: u32,
    chunk: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<T>;
@group(0) @binding(2) var<storage, read_write> dst: array<T>;
// The sums carried between stretches, then the block sums of the scan in blocks.
@group(0) @binding(3) var<storage, read_write> aux: array<T>;

// The element of `line`'s first position (or last, reversed), counted from the slices' start.
fn line_base(line: u32) -> u32 {
    let inner_pos = line % params.inner;
    let outer = line / params.inner;
    return outer * params.axis_len * params.inner + inner_pos;
}

// The element at position `k` of the walk along the line from `base`.
fn element(base: u32, k: u32) -> u32 {
    return base + select(k, params.axis_len - 1u - k, REVERSE) * params.inner;
}

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
    let base = line_base(line);
    var acc = identity();
    if params.start > 0u && params.carry != 0u {
        acc = aux[line];
    } else if params.start > 0u {
        // The sum through the previous position, exactly as one walk would hold it.
        let previous = base + select(params.start - 1u, params.axis_len - params.start, REVERSE) * params.inner;
        acc = dst[params.dst_first + previous];
        if EXCLUSIVE {
            acc = add(acc, src[params.src_first + previous]);
        }
    }
    for (var k = params.start; k < params.start + params.count; k++) {
        let i = element(base, k);
        let x = src[params.src_first + i];
        if EXCLUSIVE {
            dst[params.dst_first + i] = acc;
            acc = add(acc, x);
        } else {
            acc = add(acc, x);
            dst[params.dst_first + i] = acc;
        }
    }
    if params.carry != 0u {
        aux[line] = acc;
    }
}

// Invocations per workgroup of the scan in blocks (the least limit WebGPU guarantees).
const SCAN_GROUP: u32 = 256u;

var<workgroup> partial: array<T, SCAN_GROUP>;

fn group_index(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    return group.x + groups.x * (group.y + groups.y * group.z);
}

// The running sums of the workgroup's values (invocation `t` gets those through its own): left
// in `partial` for all to read, the workgroup's sum last.
fn scan_group(t: u32, v: T) -> T {
    // The values of the round before may still be read.
    workgroupBarrier();
    partial[t] = v;
    var acc = v;
    for (var d = 1u; d < SCAN_GROUP; d = d << 1u) {
        workgroupBarrier();
        if t >= d {
            acc = add(partial[t - d], acc);
        }
        workgroupBarrier();
        partial[t] = acc;
    }
    workgroupBarrier();
    return acc;
}

// A block of `rounds` x SCAN_GROUP x `chunk` positions of a line (the line's last may be
// short): its line's first element, its first position and its length.
struct Block {
    base: u32,
    first: u32,
    len: u32,
}

// Workgroup `g`'s block.
fn block_at(g: u32) -> Block {
    let block = g % params.blocks;
    let size = params.rounds * SCAN_GROUP * params.chunk;
    let offset = block * size;
    return Block(line_base(g / params.blocks), params.start + offset, min(params.count - offset, size));
}

// The sum of the chunk of positions `[o0, o0 + chunk)` of the block from `first` that lie
// within its `len`.
fn chunk_sum(base: u32, first: u32, o0: u32, len: u32) -> T {
    var acc = identity();
    for (var o = o0; o < min(o0 + params.chunk, len); o++) {
        acc = add(acc, src[params.src_first + element(base, first + o)]);
    }
    return acc;
}

@compute @workgroup_size(SCAN_GROUP)
fn block_totals(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let g = group_index(group, groups);
    if g >= params.lines * params.blocks {
        return;
    }
    let b = block_at(g);
    var acc = identity();
    for (var r = 0u; r < params.rounds; r++) {
        acc = add(acc, chunk_sum(b.base, b.first, (r * SCAN_GROUP + t) * params.chunk, b.len));
    }
    partial[t] = acc;
    for (var half = SCAN_GROUP / 2u; half > 0u; half = half >> 1u) {
        workgroupBarrier();
        if t < half {
            partial[t] = add(partial[t], partial[t + half]);
        }
    }
    if t == 0u {
        aux[params.totals_first + g] = partial[0];
    }
}

@compute @workgroup_size(SCAN_GROUP)
fn scan_totals(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let line = group_index(group, groups);
    if line >= params.lines {
        return;
    }
    var running = identity();
    if params.start > 0u && params.carry != 0u {
        running = aux[line];
    }
    let first = params.totals_first + line * params.blocks;
    let rounds = (params.blocks + SCAN_GROUP - 1u) / SCAN_GROUP;
    for (var r = 0u; r < rounds; r++) {
        let i = r * SCAN_GROUP + t;
        var v = identity();
        if i < params.blocks {
            v = aux[first + i];
        }
        _ = scan_group(t, v);
        var before = running;
        if t > 0u {
            before = add(running, partial[t - 1u]);
        }
        if i < params.blocks {
            aux[first + i] = before;
        }
        running = add(running, partial[SCAN_GROUP - 1u]);
    }
    if params.carry != 0u && t == 0u {
        aux[line] = running;
    }
}

@compute @workgroup_size(SCAN_GROUP)
fn block_scan(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let g = group_index(group, groups);
    if g >= params.lines * params.blocks {
        return;
    }
    let b = block_at(g);
    var running = aux[params.totals_first + g];
    for (var r = 0u; r < params.rounds; r++) {
        let o0 = (r * SCAN_GROUP + t) * params.chunk;
        _ = scan_group(t, chunk_sum(b.base, b.first, o0, b.len));
        // The sum before this chunk, then the chunk walked from it.
        var before = running;
        if t > 0u {
            before = add(running, partial[t - 1u]);
        }
        walk_chunk(b.base, b.first, o0, b.len, before);
        running = add(running, partial[SCAN_GROUP - 1u]);
    }
}

// The running sums of the chunk of positions `[o0, o0 + chunk)` of the block from `first` that
// lie within its `len`, from the sum `before` it.
fn walk_chunk(base: u32, first: u32, o0: u32, len: u32, before: T) {
    var acc = before;
    for (var o = o0; o < min(o0 + params.chunk, len); o++) {
        let i = element(base, first + o);
        let x = src[params.src_first + i];
        if EXCLUSIVE {
            dst[params.dst_first + i] = acc;
            acc = add(acc, x);
        } else {
            acc = add(acc, x);
            dst[params.dst_first + i] = acc;
        }
    }
}

// The scan in chunks, for CPU adapters (which run a workgroup's invocations in turns at each
// barrier): `blocks` chunks of `chunk` positions per line, an invocation each, with no
// workgroup scan. `chunk_totals` sums each chunk, `scan_totals` (above) turns those into the
// sum before each chunk, and `chunk_scan` walks each chunk from there.
fn chunk_index(group: vec3<u32>, groups: vec3<u32>, local: u32) -> u32 {
    return group_index(group, groups) * WORKGROUP_SIZE + local;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn chunk_totals(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let c = chunk_index(group, groups, local);
    if c >= params.lines * params.blocks {
        return;
    }
    let base = line_base(c / params.blocks);
    let o0 = c % params.blocks * params.chunk;
    aux[params.totals_first + c] = chunk_sum(base, params.start, o0, params.count);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn chunk_scan(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let c = chunk_index(group, groups, local);
    if c >= params.lines * params.blocks {
        return;
    }
    let base = line_base(c / params.blocks);
    let o0 = c % params.blocks * params.chunk;
    walk_chunk(base, params.start, o0, params.count, aux[params.totals_first + c]);
}
