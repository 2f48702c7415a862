// Batched matrix product out[b] = lhs[b] (m x k) * rhs[b] (k x n), tiled through workgroup
// memory: each 16 x 16 workgroup loads 16 x 16 tiles of both operands per step of k. Batch
// dimensions broadcast (numpy rules) through per-operand batch strides (0 where broadcast).
//
// Specialized per dtype by a validated substitution of the marked line, and per epilogue (an
// element-wise program applied to each sum before it is stored) by the EPILOGUE markers. i64
// and u64 emulated on u32 pairs (no SHADER_INT64) replace the SUM and TOTAL lines by the
// emulation's wrapping arithmetic and leave out `blocks` (its vec4<T> has no pair form).
// f16 and bf16 compute in f32 (T) on their packed words: the operand bindings become
// array<u32> read through `lhs_at`/`rhs_at`, and `store` rounds each result once and writes
// its half of a word with two atomics, since the two halves belong to different invocations.

alias T = f32; // LHS TYPE

const TILE: u32 = 16u;
// Invocations per workgroup of `rows`: the context's workgroup size within 4..=256 (a
// multiple of SLICES that fits `partial`).
override ROWS_WORKGROUP: u32 = 64u;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    batch_rank: u32,
    // Element offsets of the first matrices inside the bound windows (products larger than
    // one binding run in several dispatches over windows of the buffers).
    lhs_base: u32,
    rhs_base: u32,
    dst_base: u32,
    // The first batch entry of this dispatch (more entries than one grid axis holds run in
    // several dispatches).
    batch_base: u32,
    // Element strides of A's rows and columns and of B's rows and columns inside a matrix:
    // (k, 1, n, 1), or transposed operands read in place ((1, m) for A stored as k x m).
    strides: vec4<u32>,
    // Batch shape and the operands' and output's batch strides (elements), innermost first.
    batch_shape: array<vec4<u32>, 4>,
    lhs_stride: array<vec4<u32>, 4>,
    rhs_stride: array<vec4<u32>, 4>,
    dst_stride: array<vec4<u32>, 4>,
    // EPILOGUE PARAMS
    // PROLOGUE PARAMS
}

@group(0) @binding(0) var<uniform> params: Params;

// A small uniform (below 2^29), whose high bits are the zeros that keep a fused program's
// steps apart (`opaque_f32_0` and its kin, src/kernels/program.rs).
fn opaque_source() -> u32 {
    return params.batch_rank;
}
@group(0) @binding(1) var<storage, read> lhs: array<T>; // LHS BINDING
@group(0) @binding(2) var<storage, read> rhs: array<T>; // RHS BINDING
@group(0) @binding(3) var<storage, read_write> dst: array<T>; // DST BINDING
// EPILOGUE BINDINGS
// PROLOGUE BINDINGS

// Element `i` of each operand: read from its buffer, or the value of an element-wise program
// (a prologue) at that position of the operand, computed here and never stored. The buffer of
// an operand with a prologue holds the prologue's first input, unread.
fn lhs_at(i: u32) -> T { return lhs[i]; } // LHS AT
fn rhs_at(i: u32) -> T { return rhs[i]; } // RHS AT

// What is stored for output element `d` (its index in `dst`) with sum `acc`: the sum, or an
// element-wise program on it and other tensors (a fused epilogue, see the MatMul kernels).
fn epilogue(acc: T, d: u32) -> T { return acc; } // EPILOGUE FUNCTION

// Stores output element `d`.
fn store(d: u32, v: T) { dst[d] = v; } // STORE

var<workgroup> lhs_tile: array<array<T, 16>, 16>;
var<workgroup> rhs_tile: array<array<T, 16>, 16>;

// Element offsets of batch entry `batch`'s matrices: (lhs, rhs, dst).
fn bases(batch: u32) -> vec3<u32> {
    var rest = batch;
    var b = vec3<u32>(params.lhs_base, params.rhs_base, params.dst_base);
    for (var d = 0u; d < params.batch_rank; d++) {
        let n = params.batch_shape[d / 4u][d % 4u];
        let c = rest % n;
        rest /= n;
        b += c * vec3<u32>(
            params.lhs_stride[d / 4u][d % 4u],
            params.rhs_stride[d / 4u][d % 4u],
            params.dst_stride[d / 4u][d % 4u],
        );
    }
    return b;
}

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {
    let based = bases(params.batch_base + group.z);
    let lhs_base = based.x;
    let rhs_base = based.y;
    let dst_base = based.z;
    let row = group.y * TILE + local.y;
    let col = group.x * TILE + local.x;
    var acc = T(0);
    let steps = (params.k + TILE - 1u) / TILE;
    for (var t = 0u; t < steps; t++) {
        let lk = t * TILE + local.x;
        let rk = t * TILE + local.y;
        var a = T(0);
        if row < params.m && lk < params.k {
            a = lhs_at(lhs_base + row * params.strides.x + lk * params.strides.y);
        }
        var b = T(0);
        if rk < params.k && col < params.n {
            b = rhs_at(rhs_base + rk * params.strides.z + col * params.strides.w);
        }
        lhs_tile[local.y][local.x] = a;
        rhs_tile[local.y][local.x] = b;
        workgroupBarrier();
        for (var i = 0u; i < TILE; i++) { // TILE LOOP
            acc += lhs_tile[local.y][i] * rhs_tile[i][local.x]; // TILE SUM
        }
        workgroupBarrier();
    }
    if row < params.m && col < params.n {
        let d = dst_base + row * params.n + col;
        store(d, epilogue(acc, d));
    }
}

// Fewer than 16 rows (a batch-1 RNN step, a vector times a matrix): the tiles above would
// leave most invocations idle and wait at a barrier per step of k, which CPU adapters make
// especially slow. Here an output element is SLICES invocations, each summing a slice of k in
// order; one barrier, then the first adds the partial sums. The row of A is read by all
// invocations of a workgroup alike. SLICES is 16 in workgroups of 128 or more (GPUs: a sum's
// loop, whose every iteration waits for its loads, is then k / 16 long), else 4.
override SLICES: u32 = 4u;
var<workgroup> partial: array<T, 256>;

@compute @workgroup_size(ROWS_WORKGROUP)
fn rows(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let cols = ROWS_WORKGROUP / SLICES;
    let c = local % cols;
    let slice = local / cols;
    let col = group.x * cols + c;
    let row = group.y;
    let b = bases(params.batch_base + group.z);
    let valid = row < params.m && col < params.n;
    var acc = T(0);
    if valid {
        let len = (params.k + SLICES - 1u) / SLICES;
        let k0 = min(slice * len, params.k);
        let k1 = min(k0 + len, params.k);
        let a = b.x + row * params.strides.x;
        let r = b.y + col * params.strides.w;
        for (var i = k0; i < k1; i++) {
            acc += lhs_at(a + i * params.strides.y) * rhs_at(r + i * params.strides.z); // ROWS SUM
        }
    }
    partial[local] = acc;
    workgroupBarrier();
    if valid && slice == 0u {
        var sum = partial[c];
        for (var s = 1u; s < SLICES; s++) {
            sum += partial[c + s * cols]; // ROWS TOTAL
        }
        let d = b.z + row * params.n + col;
        store(d, epilogue(sum, d));
    }
}

// BEGIN BLOCKS
// CPU adapters (lavapipe, SwiftShader): no workgroup memory, no barrier (a barrier is a
// costly switch between invocations there). Each invocation sums a block of 8 rows x 4
// columns over all of k, the columns as far apart as the workgroup has invocations with
// columns, so that they read adjacent elements of B together: per step of k, 8 loads of A and 4 of B
// serve 32 products. (On lavapipe 8 x 4 beat 4 x 4 by ~20% and one row x 4 by 2.5x.)
@compute @workgroup_size(ROWS_WORKGROUP)
fn blocks(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    // The workgroup's columns: 4 x ROWS_WORKGROUP, or as many as are left, spread over as
    // few invocations as hold them (4 each), so that a narrow product (a late convolution's
    // 49 positions) keeps no invocation busy with copies of the last column.
    // A product whose columns all fit one workgroup stacks bands of 8 rows in it instead
    // (`blocks_bands` on the host): a workgroup costs lavapipe far more than an invocation, and
    // a tall, narrow product ([59776, 64] x [64, 64], a long DFT's step) took 9x as long with
    // 8 rows per workgroup.
    let first = group.x * ROWS_WORKGROUP * 4u;
    let w = max(min(ROWS_WORKGROUP, (params.n - first + 3u) / 4u), 1u);
    let bands = select(1u, ROWS_WORKGROUP / w, params.n <= 4u * ROWS_WORKGROUP);
    let band = local / w;
    let col = first + local % w;
    let row = (group.y * bands + band) * 8u;
    if band >= bands || col >= params.n || row >= params.m {
        return;
    }
    let b = bases(params.batch_base + group.z);
    // Rows and columns past the last repeat it, so loads stay in the bound windows; their
    // sums are not stored.
    let last = params.m - 1u;
    let c = vec4<u32>(col, min(col + w, params.n - 1u), min(col + 2u * w, params.n - 1u),
        min(col + 3u * w, params.n - 1u));
    let a0 = b.x + min(row + 0u, last) * params.strides.x;
    let a1 = b.x + min(row + 1u, last) * params.strides.x;
    let a2 = b.x + min(row + 2u, last) * params.strides.x;
    let a3 = b.x + min(row + 3u, last) * params.strides.x;
    let a4 = b.x + min(row + 4u, last) * params.strides.x;
    let a5 = b.x + min(row + 5u, last) * params.strides.x;
    let a6 = b.x + min(row + 6u, last) * params.strides.x;
    let a7 = b.x + min(row + 7u, last) * params.strides.x;
    var acc0 = vec4<T>(T(0));
    var acc1 = vec4<T>(T(0));
    var acc2 = vec4<T>(T(0));
    var acc3 = vec4<T>(T(0));
    var acc4 = vec4<T>(T(0));
    var acc5 = vec4<T>(T(0));
    var acc6 = vec4<T>(T(0));
    var acc7 = vec4<T>(T(0));
    let cs = c * params.strides.w;
    for (var i = 0u; i < params.k; i++) {
        let r = b.y + i * params.strides.z;
        let bv = vec4<T>(rhs_at(r + cs.x), rhs_at(r + cs.y), rhs_at(r + cs.z), rhs_at(r + cs.w));
        let ai = i * params.strides.y;
        acc0 += lhs_at(a0 + ai) * bv;
        acc1 += lhs_at(a1 + ai) * bv;
        acc2 += lhs_at(a2 + ai) * bv;
        acc3 += lhs_at(a3 + ai) * bv;
        acc4 += lhs_at(a4 + ai) * bv;
        acc5 += lhs_at(a5 + ai) * bv;
        acc6 += lhs_at(a6 + ai) * bv;
        acc7 += lhs_at(a7 + ai) * bv;
    }
    var accs = array<vec4<T>, 8>(acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7);
    for (var y = 0u; y < 8u && row + y < params.m; y++) {
        let d = b.z + (row + y) * params.n;
        for (var x = 0u; x < 4u && col + x * w < params.n; x++) {
            store(d + col + x * w, epilogue(accs[y][x], d + col + x * w));
        }
    }
}
// END BLOCKS
