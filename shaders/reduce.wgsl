// Reductions (ONNX Reduce*, ArgMax, ArgMin): one workgroup per output element (or a segment of
// one, `LANES`; or, for short rows, one thread: pass 3 below). Its threads
// stride over the reduced coordinates (any set of axes, read through the input's strides, so
// nothing is transposed first), each folding its elements into a state, and the workgroup
// merges the states in a tree in workgroup memory. The state is a pair of values and an index
// (a running sum, a max and a scaled sum for LogSumExp, a value and its position for ArgMax).
//
// Specialized per op and dtype by a validated substitution of the marked lines below; every
// variant is validated with naga in the tests.

alias A = f32; // INPUT TYPE
alias C = f32; // STATE TYPE

const WORKGROUP: u32 = 256u;
// The result is 8 bytes (two words per output element), else one word.
override OUT_PAIRS: bool = false;
// 0: one pass, a workgroup per output element. Rows too long for one workgroup take two:
// 1 folds chunks of a row into states (5 words each: a, b as word pairs, i), 2 merges each
// row's states and finishes. 3: one thread per output element folding its whole row in order,
// for short rows (a workgroup of a tree for five elements leaves most of it idle). 4 and 5: as
// 0 and 3, but each output element is a state (at `dst_base` on): the chunks of rows too long
// for one binding, which pass 2 then merges (6: as 2, one thread per row, for few chunks).
override PASS: u32 = 0u;
// Passes 0 and 4: threads per output element (a power of two up to WORKGROUP), so that a
// workgroup folds WORKGROUP / LANES rows side by side: a row of 64 elements leaves no thread
// idle with 16 lanes, and their tree has 4 levels, not 8. The other passes keep WORKGROUP.
override LANES: u32 = 256u;

struct Params {
    // Output elements (workgroups with work) and reduced elements per output.
    rows: u32,
    n: u32,
    keep_rank: u32,
    reduce_rank: u32,
    // Kept and reduced axes of the input: extents and element strides, innermost first.
    keep_shape: array<vec4<u32>, 4>,
    keep_stride: array<vec4<u32>, 4>,
    reduce_shape: array<vec4<u32>, 4>,
    reduce_stride: array<vec4<u32>, 4>,
    // Passes 1 and 2: chunks per row and elements per chunk.
    chunks: u32,
    chunk_len: u32,
    // Where the walk starts in `a_words` (elements) and output element 0 lies in `dst`: windows
    // of an input or output larger than one binding (passes 0 and 3; else 0).
    base: u32,
    dst_base: u32,
    // Pass 2: row r's chunk c state is at r * state_row_step + c * state_chunk_step, and its
    // index (ArgMax, ArgMin) counts from c * i_step.
    i_step: u32,
    state_row_step: u32,
    state_chunk_step: u32,
    pad: u32,
    // PROLOGUE PARAMS
}

struct State {
    a: C,
    b: C,
    i: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

// A small uniform (below 2^29), whose high bits are the zeros that keep a fused program's
// steps apart (`opaque_f32_0` and its kin, src/kernels/program.rs).
fn opaque_source() -> u32 {
    return params.keep_rank;
}
@group(0) @binding(1) var<storage, read> a_words: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
// PROLOGUE BINDINGS

var<workgroup> states: array<State, WORKGROUP>;

// The word kernel's loading and rounding helpers, inserted here per variant.
// WORD HELPERS

// Element `i` of the input (in C order). With a prologue, an element-wise program over the
// tensors bound after `dst` computes it there (the input is never stored).
fn load_a(i: u32) -> A { return bitcast<f32>(a_words[i]); } // LOAD A

// The op: the empty state, folding element x (the j-th reduced one) in, merging two states
// (`b` holds the later elements), and the result's bits from the final state.
fn init() -> State { return State(C(0), C(0), 0u); } // INIT
fn absorb(s: State, x: C, j: u32) -> State { return State(s.a + x, s.b, s.i); } // ABSORB
fn merge(s: State, t: State) -> State { return State(s.a + t.a, s.b, s.i); } // MERGE
fn finish(s: State) -> vec2<u32> { return vec2<u32>(bitcast<u32>(s.a), 0u); } // FINISH

// A state value's bits as a word pair, and back (specialized per state type).
fn c_bits(v: C) -> vec2<u32> { return vec2<u32>(bitcast<u32>(v), 0u); } // C BITS
fn c_from(w: vec2<u32>) -> C { return bitcast<f32>(w.x); } // C FROM

fn store_state(k: u32, s: State) {
    let a = c_bits(s.a);
    let b = c_bits(s.b);
    dst[5u * k] = a.x;
    dst[5u * k + 1u] = a.y;
    dst[5u * k + 2u] = b.x;
    dst[5u * k + 3u] = b.y;
    dst[5u * k + 4u] = s.i;
}

fn load_state(k: u32) -> State {
    let w = 5u * k;
    return State(
        c_from(vec2<u32>(a_words[w], a_words[w + 1u])),
        c_from(vec2<u32>(a_words[w + 2u], a_words[w + 3u])),
        a_words[w + 4u],
    );
}

// The input index of output element `row`'s first reduced element.
fn row_base(row: u32) -> u32 {
    var rest = row;
    var base = params.base;
    for (var k = 0u; k < params.keep_rank; k++) {
        let extent = params.keep_shape[k / 4u][k % 4u];
        base += (rest % extent) * params.keep_stride[k / 4u][k % 4u];
        rest /= extent;
    }
    return base;
}

// The walk's reduced axes, as the host merged them (axes that step through memory as one
// are one): 1, element j lies j strides from the row's first; 2, one division splits j (a
// pool's window rows and columns); 0, any number, a division and a remainder per axis. A
// thread folding its row in order (`one_row`) walks the two innermost as loops instead. A
// constant, since CPU adapters run both sides of a uniform branch.
override REDUCED_RANK: u32 = 0u;

// The input index of reduced element `j` of the row starting at `base`.
fn reduced_index(base: u32, j: u32) -> u32 {
    if REDUCED_RANK == 1u {
        return base + j * params.reduce_stride[0][0];
    }
    if REDUCED_RANK == 2u {
        let n0 = params.reduce_shape[0][0];
        let q = j / n0;
        return base + (j - q * n0) * params.reduce_stride[0][0] + q * params.reduce_stride[0][1];
    }
    return base + axes_offset(j, 0u);
}

// The offset of position `at` of the reduced axes from `first_axis` on (innermost first): a
// division and a remainder per axis.
fn axes_offset(at: u32, first_axis: u32) -> u32 {
    var r = at;
    var offset = 0u;
    for (var k = first_axis; k < params.reduce_rank; k++) {
        let extent = params.reduce_shape[k / 4u][k % 4u];
        offset += (r % extent) * params.reduce_stride[k / 4u][k % 4u];
        r /= extent;
    }
    return offset;
}

// Pass 2 and 6: chunk `c`'s state of output element `row`, its index counted from the row's
// first element.
fn chunk_state(row: u32, c: u32) -> State {
    var part = load_state(row * params.state_row_step + c * params.state_chunk_step);
    if part.i != 0xffffffffu {
        part.i += c * params.i_step;
    }
    return part;
}

fn store_result(row: u32, s: State) {
    let v = finish(s);
    let at = params.dst_base + row;
    if OUT_PAIRS {
        dst[2u * at] = v.x;
        dst[2u * at + 1u] = v.y;
    } else {
        dst[at] = v.x;
    }
}

// Passes 3, 5 and 6: output element `row` from one thread (a function of its own, so that its
// early return leaves the caller's barriers in uniform control flow).
fn one_row(row: u32) {
    if row >= params.rows {
        return;
    }
    var s = init();
    if PASS == 6u {
        for (var c = 0u; c < params.chunks; c++) {
            s = merge(s, chunk_state(row, c));
        }
        store_result(row, s);
        return;
    }
    let base = row_base(row);
    if REDUCED_RANK == 1u {
        for (var j = 0u; j < params.n; j++) {
            s = absorb(s, C(load_a(reduced_index(base, j))), j);
        }
    } else {
        // The two innermost axes walked as two loops, with no division; the axes beyond them
        // (a 3-D pool's window) split once per plane of the two.
        let n0 = params.reduce_shape[0][0];
        let n1 = params.reduce_shape[0][1];
        let planes = params.n / max(n0 * n1, 1u);
        var j = 0u;
        for (var p = 0u; p < planes; p++) {
            let plane = base + axes_offset(p, 2u);
            for (var o = 0u; o < n1; o++) {
                let first = plane + o * params.reduce_stride[0][1];
                for (var i = 0u; i < n0; i++) {
                    s = absorb(s, C(load_a(first + i * params.reduce_stride[0][0])), j);
                    j++;
                }
            }
        }
    }
    if PASS == 5u {
        store_state(params.dst_base + row, s);
    } else {
        store_result(row, s);
    }
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let g = group.x + groups.x * (group.y + groups.y * group.z);
    if PASS == 3u || PASS == 5u || PASS == 6u {
        one_row(g * WORKGROUP + t);
        return;
    }
    // Row `row` is folded by the LANES threads of one segment of the workgroup, `lane` the
    // thread's place in it. Rows past the end fold nothing but take part in the barriers.
    let lane = t % LANES;
    var row = g * (WORKGROUP / LANES) + t / LANES;
    var lo = 0u;
    var hi = params.n;
    if PASS == 1u {
        row = g / params.chunks;
        lo = (g % params.chunks) * params.chunk_len;
        hi = min(params.n, lo + params.chunk_len);
    }
    let has_row = row < params.rows;
    var s = init();
    if has_row {
        let base = row_base(row);
        if PASS == 2u {
            for (var c = lane; c < params.chunks; c += LANES) {
                s = merge(s, chunk_state(row, c));
            }
            hi = 0u;
        }
        for (var j = lo + lane; j < hi; j += LANES) {
            s = absorb(s, C(load_a(reduced_index(base, j))), j);
        }
    }
    states[t] = s;
    workgroupBarrier();
    for (var half = LANES / 2u; half > 0u; half /= 2u) {
        if lane < half {
            states[t] = merge(states[t], states[t + half]);
        }
        workgroupBarrier();
    }
    if lane != 0u || !has_row {
        return;
    }
    if PASS == 1u {
        store_state(g, states[t]);
    } else if PASS == 4u {
        store_state(params.dst_base + row, states[t]);
    } else {
        store_result(row, states[t]);
    }
}
