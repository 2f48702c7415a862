// ONNX Concat of up to 6 inputs in one dispatch, of whole 32-bit words: the output is `outer`
// rows of `out_run` units, and input k fills units [ends[k-1], ends[k]) of every row (its
// own rows `ends[k] - ends[k-1]` units long, one after another). A dispatch covers the units
// [first, first + run) of each row, `run` the sum of its inputs' runs: inputs beyond 6 take
// further dispatches. Built one input at a time, a Transformer decoder's Concat of a cache
// with its new row took two dispatches per cache.
//
// Split is the same walk the other way (the parts' rows written, the whole's read). This file
// is the walk; the bindings and the entry points are generated for each direction and number
// of parts (`kernels/concat.rs`): `main` moves one word per invocation, `main_vec4` one
// `vec4<u32>` (every run, `first` and `out_run` in 16-byte units then), the same bindings
// viewed both ways.

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

