// ONNX Concat of up to 6 inputs in one dispatch, of whole 32-bit words: the output is `outer`
// rows of `out_run` units, and input k fills units [ends[k-1], ends[k]) of every row (its
// own rows `ends[k] - ends[k-1]` units long, one after another). A dispatch covers the units
// [first, first + run) of each row, `run` the sum of its inputs' runs: inputs beyond 6 take
// further dispatches. Built one input at a time, a Transformer decoder's Concat of a cache
// with its new row took two dispatches per cache.
//
// `main` moves one word per invocation, `main_vec4` one `vec4<u32>` (every run, `first` and
// `out_run` in 16-byte units then); the same bindings viewed both ways.
//
// Split is the same walk the other way (the parts' rows written, the whole's read): its
// kernel is the text above the line `CONCAT ONLY` and entry points generated for its number
// of parts (`kernels/concat.rs`), each part a writable binding of its own.

override WORKGROUP_SIZE: u32 = 64u;

// The whole (Concat's output, Split's input) is rows of `out_run` units; part k (an input of
// Concat, an output of Split) fills units [ends[k-1], ends[k]) of each row, counted from
// `first`, its own rows lying one after another.
struct Params {
    // Units this dispatch moves: rows * run.
    units: u32,
    // Units of a row of the whole, of this dispatch's parts of it, and where those start.
    out_run: u32,
    run: u32,
    first: u32,
    // Where part k ends (k < 6; unused ones equal run).
    ends: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;

fn unit_index(group: vec3<u32>, groups: vec3<u32>, local: u32) -> u32 {
    // Grids past 65 535 workgroups are folded into y and z by the host.
    return (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
}

fn end_of(k: u32) -> u32 {
    return params.ends[k / 4u][k % 4u];
}

// Unit i of the dispatch: its part, its index in that part and in the whole.
struct Place {
    k: u32,
    part: u32,
    whole: u32,
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

// CONCAT ONLY

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
    switch p.k {
        case 0u: { v = in0[p.part]; }
        case 1u: { v = in1[p.part]; }
        case 2u: { v = in2[p.part]; }
        case 3u: { v = in3[p.part]; }
        case 4u: { v = in4[p.part]; }
        default: { v = in5[p.part]; }
    }
    out[p.whole] = v;
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
    switch p.k {
        case 0u: { v = in0_4[p.part]; }
        case 1u: { v = in1_4[p.part]; }
        case 2u: { v = in2_4[p.part]; }
        case 3u: { v = in3_4[p.part]; }
        case 4u: { v = in4_4[p.part]; }
        default: { v = in5_4[p.part]; }
    }
    out_4[p.whole] = v;
}
