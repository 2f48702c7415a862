// Block remapping between batch and space, in one pass (BatchToSpace-2 and SpaceToBatch-2).
// Each output element finds its single source element directly; no reshape/transpose/crop
// chain, no temporaries. Axes are given outermost first; axis 0 is the batch axis.
//
// BatchToSpace (MODE 0): output coordinate o_k (k >= 1) is x_k = o_k + crop_begin_k in the
//   uncropped space; it comes from block offset r_k = x_k % B_k of input element
//   x_k / B_k, and the input batch is (r_1 ... r_{n-1} in mixed radix B) * out_batch + o_0.
// SpaceToBatch (MODE 1): output batch o_0 = (r_1 ... r_{n-1}) * in_batch + b; output
//   coordinate o_k reads padded position o_k * B_k + r_k, i.e. input x_k = that - pad_begin_k,
//   and zero where x_k falls in the padding.
//
// Elements move as 32-bit words as in strided_gather.wgsl: 1- and 2-byte elements are
// assembled into whole words by one invocation (no races), 8-byte elements are two words.

override ELEM_BYTES: u32 = 4u;
override WORKGROUP_SIZE: u32 = 64u;
// The rank, when the host compiles the kernel for it (0: taken from the parameters). The
// per-axis loops then have a constant trip count, which compilers unroll into straight code
// with constant indices into the parameter arrays.
override RANK: u32 = 0u;
// Scatter (4- and 8-byte elements, BatchToSpace's arithmetic without crops): SpaceToBatch
// without padding is BatchToSpace run backwards, so each invocation reads element e of `src`
// in order and writes it where BatchToSpace would have read it from. The reads are then
// contiguous and the writes go to a few contiguous streams (one per block offset), where
// gathering read every block-th element of a row.
override SCATTER: bool = false;

struct Params {
    count: u32,
    units: u32,
    rank: u32,
    mode: u32,
    // BatchToSpace: output batch; SpaceToBatch: input batch.
    batch: u32,
    // Output elements per output batch entry.
    out_inner: u32,
    // With 4-byte elements and an innermost axis that is neither blocked nor offset (the
    // host's word view of NHWC-like data), each invocation moves `items` consecutive
    // elements of it (0: one element each); `runs` invocations cover one innermost row.
    items: u32,
    runs: u32,
    out_shape: array<vec4<u32>, 4>,
    in_shape: array<vec4<u32>, 4>,
    in_stride: array<vec4<u32>, 4>,
    block: array<vec4<u32>, 4>,
    // crops_begin (BatchToSpace) or pads_begin (SpaceToBatch).
    offset: array<vec4<u32>, 4>,
    // The divisors out_shape, block, out_inner, runs, batch and rows as `divide` takes them
    // (divide.inc, appended to this file): divisions are the costliest index arithmetic.
    out_shift: array<vec4<u32>, 4>,
    out_magic: array<vec4<u32>, 4>,
    block_shift: array<vec4<u32>, 4>,
    block_magic: array<vec4<u32>, 4>,
    inner_shift: u32,
    inner_magic: u32,
    runs_shift: u32,
    runs_magic: u32,
    batch_shift: u32,
    batch_magic: u32,
    // With runs: innermost rows per output batch entry (out_inner / the innermost length).
    rows: u32,
    rows_shift: u32,
    rows_magic: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
// The same buffers as 16-byte vectors, for `runs_vec4` (an entry point uses one view or the
// other, never both).
@group(0) @binding(1) var<storage, read> src4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4<u32>>;


fn rank() -> u32 {
    if RANK != 0u {
        return RANK;
    }
    return params.rank;
}

// Marks an output element that reads padding (SpaceToBatch); it is written as zero.
const PADDING: u32 = 0xFFFFFFFFu;

// x / out_shape[k] and x / block[k].
fn over_out_shape(x: u32, k: u32) -> u32 {
    return divide(x, params.out_shift[k / 4u][k % 4u], params.out_magic[k / 4u][k % 4u]);
}

fn over_block(x: u32, k: u32) -> u32 {
    return divide(x, params.block_shift[k / 4u][k % 4u], params.block_magic[k / 4u][k % 4u]);
}

// Input element index of the output element of batch entry o0 at position `within` of the
// axes 1..=top (the axes after `top` at coordinate 0), or PADDING.
fn source_from(o0: u32, within: u32, top: u32) -> u32 {
    var rest = within;
    var index = 0u;
    // The host compiles the rank in for BatchToSpace's arithmetic only, so the other loop
    // is dropped there (code that never runs still costs registers and, on CPU adapters,
    // time).
    if RANK != 0u || params.mode == 0u {
        var r = 0u;
        var radix = 1u;
        for (var k = top; k >= 1u; k--) {
            let n = params.out_shape[k / 4u][k % 4u];
            let b = params.block[k / 4u][k % 4u];
            // Axis 1 holds what is left (rest < n there): no division. With the rank
            // compiled in, the loop unrolls and the test folds away.
            var q = 0u;
            if k > 1u {
                q = over_out_shape(rest, k);
            }
            let x = rest - q * n + params.offset[k / 4u][k % 4u];
            rest = q;
            let xb = over_block(x, k);
            r += (x - xb * b) * radix;
            radix *= b;
            index += xb * params.in_stride[k / 4u][k % 4u];
        }
        return index + (r * params.batch + o0) * params.in_stride[0u][0u];
    }
    var blocks = divide(o0, params.batch_shift, params.batch_magic);
    index = (o0 - blocks * params.batch) * params.in_stride[0u][0u];
    for (var k = top; k >= 1u; k--) {
        let n = params.out_shape[k / 4u][k % 4u];
        let b = params.block[k / 4u][k % 4u];
        // At axis 1 both are what is left (below n and b): no division.
        var q = 0u;
        var bq = 0u;
        if k > 1u {
            q = over_out_shape(rest, k);
            bq = over_block(blocks, k);
        }
        let padded = (rest - q * n) * b + (blocks - bq * b);
        rest = q;
        blocks = bq;
        let pad = params.offset[k / 4u][k % 4u];
        if padded < pad || padded - pad >= params.in_shape[k / 4u][k % 4u] {
            return PADDING;
        }
        index += (padded - pad) * params.in_stride[k / 4u][k % 4u];
    }
    return index;
}

// Input element index of output element i, or PADDING.
fn source_index(i: u32) -> u32 {
    let o0 = divide(i, params.inner_shift, params.inner_magic);
    return source_from(o0, i - o0 * params.out_inner, rank() - 1u);
}

// With runs (the innermost axis neither blocked nor offset, so it maps to itself): the input
// index of run `unit`'s first element, or PADDING, from the index arithmetic of its row alone.
fn run_source(unit: u32, first: u32) -> u32 {
    let row = divide(unit, params.runs_shift, params.runs_magic);
    let o0 = divide(row, params.rows_shift, params.rows_magic);
    let s = source_from(o0, row - o0 * params.rows, rank() - 2u);
    return select(s + first, PADDING, s == PADDING);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let unit = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if unit >= params.units {
        return;
    }
    if ELEM_BYTES == 4u && params.items > 1u {
        // The run is contiguous on both sides and is padding or not as a whole: the index
        // arithmetic is done once per run.
        let last = params.out_shape[(rank() - 1u) / 4u][(rank() - 1u) % 4u];
        let row = divide(unit, params.runs_shift, params.runs_magic);
        let first = (unit - row * params.runs) * params.items;
        let e = row * last + first;
        let n = min(params.items, last - first);
        let s = run_source(unit, first);
        // Read at `read_at`, write at `write_at` (scattered: the other way round; s is then
        // never padding, as there are no crops).
        let read_at = select(s, e, SCATTER);
        let write_at = select(e, s, SCATTER);
        if n == 4u && s != PADDING {
            // All loads before any store, as named values: the compiler cannot tell `src`
            // and `dst` apart, so a load after a store would wait for it.
            let v0 = src[read_at];
            let v1 = src[read_at + 1u];
            let v2 = src[read_at + 2u];
            let v3 = src[read_at + 3u];
            dst[write_at] = v0;
            dst[write_at + 1u] = v1;
            dst[write_at + 2u] = v2;
            dst[write_at + 3u] = v3;
            return;
        }
        for (var j = 0u; j < n; j++) {
            let v = src[min(read_at + j, arrayLength(&src) - 1u)];
            dst[write_at + j] = select(v, 0u, s == PADDING);
        }
    } else if ELEM_BYTES == 4u {
        let s = source_index(unit);
        let read_at = select(s, unit, SCATTER);
        let write_at = select(unit, s, SCATTER);
        // select() reads both sides: clamp the index so padding never reads out of bounds.
        dst[write_at] = select(src[min(read_at, arrayLength(&src) - 1u)], 0u, s == PADDING);
    } else if ELEM_BYTES == 8u {
        let s = source_index(unit);
        let read_at = select(s, unit, SCATTER);
        let write_at = select(unit, s, SCATTER);
        let lo = min(2u * read_at, max(arrayLength(&src), 2u) - 2u);
        let a = select(src[lo], 0u, s == PADDING);
        let b = select(src[lo + 1u], 0u, s == PADDING);
        dst[2u * write_at] = a;
        dst[2u * write_at + 1u] = b;
    } else {
        // min(): this branch is dead for 4- and 8-byte elements but still constant-evaluated.
        let per_word = 4u / min(ELEM_BYTES, 2u);
        let bits = ELEM_BYTES * 8u;
        let mask = select(0xFFFFu, 0xFFu, ELEM_BYTES == 1u);
        var w = 0u;
        for (var k = 0u; k < per_word; k++) {
            let e = unit * per_word + k;
            if e < params.count {
                let s = source_index(e);
                if s != PADDING {
                    let value = (src[s / per_word] >> ((s % per_word) * bits)) & mask;
                    w |= value << (k * bits);
                }
            }
        }
        dst[unit] = w;
    }
}

// Runs per invocation of `runs_vec4`, a workgroup's width apart (each load and store
// instruction of a warp still covers one contiguous span): every run's source is found and
// loaded before any run is stored, so several loads are in flight per invocation behind the
// index arithmetic that precedes each.
override UNROLL: u32 = 1u;

// Output quad `at` gets `value` where `ok`.
struct RunMove {
    at: u32,
    value: vec4<u32>,
    ok: bool,
}

// The 16-byte run `unit` of `runs_vec4`, or none past the last.
fn run_move(unit: u32) -> RunMove {
    if unit >= params.units {
        return RunMove(0u, vec4<u32>(0u), false);
    }
    let last = params.out_shape[(rank() - 1u) / 4u][(rank() - 1u) % 4u];
    let row = divide(unit, params.runs_shift, params.runs_magic);
    let first = (unit - row * params.runs) * 4u;
    let e = row * last + first;
    let s = run_source(unit, first);
    let read_at = select(s, e, SCATTER);
    let write_at = select(e, s, SCATTER);
    // select() reads both sides: clamp the index so padding never reads out of bounds.
    let v = src4[min(read_at / 4u, arrayLength(&src4) - 1u)];
    return RunMove(write_at / 4u, select(v, vec4<u32>(0u), s == PADDING), true);
}

fn store_run(m: RunMove) {
    if m.ok {
        dst4[m.at] = m.value;
    }
}

// Runs of 4 words (items = 4) that start on 16-byte boundaries on both sides, which the host
// guarantees when the innermost axis holds a multiple of 4 words: one 16-byte load and store
// per run, the widest access WGSL has, fully coalesced across an invocation group.
@compute @workgroup_size(WORKGROUP_SIZE)
fn runs_vec4(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let workgroup = group.x + groups.x * (group.y + groups.y * group.z);
    let unit = workgroup * WORKGROUP_SIZE * UNROLL + local;
    let m0 = run_move(unit);
    var m1 = RunMove(0u, vec4<u32>(0u), false);
    var m2 = m1;
    var m3 = m1;
    if UNROLL >= 2u {
        m1 = run_move(unit + WORKGROUP_SIZE);
    }
    if UNROLL >= 4u {
        m2 = run_move(unit + 2u * WORKGROUP_SIZE);
        m3 = run_move(unit + 3u * WORKGROUP_SIZE);
    }
    store_run(m0);
    store_run(m1);
    store_run(m2);
    store_run(m3);
}
