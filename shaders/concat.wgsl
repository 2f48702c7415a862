// ONNX Concat of up to 6 inputs in one dispatch, of whole 32-bit words: the output is `outer`
// rows of `out_run` units, and input k fills units [ends[k-1], ends[k]) of every row (its
// own rows `ends[k] - ends[k-1]` units long, one after another). A dispatch covers the units
// [first, first + run) of each row, `run` the sum of its inputs' runs: inputs beyond 6 take
// further dispatches. Built one input at a time, a Transformer decoder's Concat of a cache
// with its new row took two dispatches per cache.
//
// `main` moves one word per invocation, `main_vec4` one `vec4<u32>` (every run, `first` and
// `out_run` in 16-byte units then); the same bindings viewed both ways.

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    // Units this dispatch writes: outer * run.
    units: u32,
    // Units of an output row, of this dispatch's part of it, and where the part starts.
    out_run: u32,
    run: u32,
    first: u32,
    // Where input k's part of a row ends, counted from `first` (k < 6; unused ones equal run).
    ends: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
@group(0) @binding(3) var<storage, read> in2: array<u32>;
@group(0) @binding(4) var<storage, read> in3: array<u32>;
@group(0) @binding(5) var<storage, read> in4: array<u32>;
@group(0) @binding(6) var<storage, read> in5: array<u32>;
@group(0) @binding(7) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read> in0_4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> in1_4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> in2_4: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read> in3_4: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> in4_4: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> in5_4: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> out_4: array<vec4<u32>>;

fn unit_index(group: vec3<u32>, groups: vec3<u32>, local: u32) -> u32 {
    // Grids past 65 535 workgroups are folded into y and z by the host.
    return (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
}

fn end_of(k: u32) -> u32 {
    return params.ends[k / 4u][k % 4u];
}

// Unit i of the dispatch: its input, that input's unit index and the output's.
struct Place {
    input: u32,
    src: u32,
    dst: u32,
}

fn place(i: u32) -> Place {
    let row = i / params.run;
    let at = i - row * params.run;
    var k = 0u;
    while k < 5u && at >= end_of(k) {
        k += 1u;
    }
    var start = 0u;
    if k > 0u {
        start = end_of(k - 1u);
    }
    let run = end_of(k) - start;
    return Place(k, row * run + (at - start), row * params.out_run + params.first + at);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let i = unit_index(group, groups, local);
    if i >= params.units {
        return;
    }
    let p = place(i);
    var v: u32;
    switch p.input {
        case 0u: { v = in0[p.src]; }
        case 1u: { v = in1[p.src]; }
        case 2u: { v = in2[p.src]; }
        case 3u: { v = in3[p.src]; }
        case 4u: { v = in4[p.src]; }
        default: { v = in5[p.src]; }
    }
    out[p.dst] = v;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_vec4(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let i = unit_index(group, groups, local);
    if i >= params.units {
        return;
    }
    let p = place(i);
    var v: vec4<u32>;
    switch p.input {
        case 0u: { v = in0_4[p.src]; }
        case 1u: { v = in1_4[p.src]; }
        case 2u: { v = in2_4[p.src]; }
        case 3u: { v = in3_4[p.src]; }
        case 4u: { v = in4_4[p.src]; }
        default: { v = in5_4[p.src]; }
    }
    out_4[p.dst] = v;
}
