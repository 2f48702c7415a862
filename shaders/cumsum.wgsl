// ONNX CumSum (and CumProd, `add` then multiplying from 1) along one axis of a tensor seen as
// [outer, axis, inner]: one invocation per (outer, inner) line walks the axis in order (or
// reversed), writing the running sum after (inclusive) or before (exclusive) adding each
// element. Lines are independent, so a large
// tensor has as many invocations as it has lines.
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
    // far is kept in `carried` at the end of each dispatch and taken from there (where not,
    // the output holds it).
    carry: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<T>;
@group(0) @binding(2) var<storage, read_write> dst: array<T>;
@group(0) @binding(3) var<storage, read_write> carried: array<T>;

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
    let inner_pos = line % params.inner;
    let outer = line / params.inner;
    let base = outer * params.axis_len * params.inner + inner_pos;
    var acc = identity();
    if params.start > 0u && params.carry != 0u {
        acc = carried[line];
    } else if params.start > 0u {
        // The sum through the previous position, exactly as one walk would hold it.
        let previous = base + select(params.start - 1u, params.axis_len - params.start, REVERSE) * params.inner;
        acc = dst[params.dst_first + previous];
        if EXCLUSIVE {
            acc = add(acc, src[params.src_first + previous]);
        }
    }
    for (var k = params.start; k < params.start + params.count; k++) {
        let j = select(k, params.axis_len - 1u - k, REVERSE);
        let i = base + j * params.inner;
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
        carried[line] = acc;
    }
}
