// ONNX GridSample's taps: for every output position p (of N x O, batch-major) and every
// combination c of one tap per spatial axis (T taps per axis: 1 nearest, 2 linear, 4 cubic;
// axis 0 the most significant digit of c), the row of the input seen as [N * S + 1, C] that
// the tap reads (row N * S is zeros: taps outside the input with zeros padding read it) and
// the tap's weight, the product of its per-axis weights. The grid holds K coordinates per
// position, x (the last spatial axis) first, normalized to [-1, 1]; coordinates and weights
// are computed in T (f32, or f64 for f64 inputs: native, or on u32 pairs without SHADER_F64).
//
// Padding applies to each tap's index (clamped with border padding, reflected with
// reflection padding), as onnxruntime and PyTorch pad bicubic taps; for nearest and linear
// sampling that equals moving the coordinate first, as the ONNX reference does.

alias T = f32; // ELEMENT TYPE

// The arithmetic on T, one line each (the f64 emulation on u32 pairs replaces the marked
// lines, see kernels/grid_taps.rs).
fn t_of(x: f32) -> T { return T(x); } // OF F32
fn t_of_u32(x: u32) -> T { return T(x); } // OF U32
fn t_of_i32(x: i32) -> T { return T(x); } // OF I32
fn t_to_i32(x: T) -> i32 { return i32(x); } // TO I32
fn t_add(x: T, y: T) -> T { return x + y; } // ADD
fn t_sub(x: T, y: T) -> T { return x - y; } // SUB
fn t_mul(x: T, y: T) -> T { return x * y; } // MUL
fn t_div(x: T, y: T) -> T { return x / y; } // DIV
fn t_floor(x: T) -> T { return floor(x); } // FLOOR
fn t_abs(x: T) -> T { return abs(x); } // ABS
fn t_clamp(x: T, lo: T, hi: T) -> T { return clamp(x, lo, hi); } // CLAMP
fn t_less(x: T, y: T) -> bool { return x < y; } // LESS
fn t_at_most(x: T, y: T) -> bool { return x <= y; } // AT MOST
fn t_equal(x: T, y: T) -> bool { return x == y; } // EQUAL
// Whether |x| > 2^62 or x is NaN, from the bits (drivers may fold NaN comparisons away).
fn t_far(x: T) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x5e800000u; } // FAR

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    // N x O positions, O per batch item, K spatial axes, T taps per axis, T^K combinations.
    positions: u32,
    per_batch: u32,
    rank: u32,
    taps: u32,
    combinations: u32,
    // 0 nearest, 1 linear, 2 cubic; 0 zeros, 1 border, 2 reflection.
    mode: u32,
    padding: u32,
    align_corners: u32,
    // S (rows of one batch item) and the zero row N * S.
    batch_rows: u32,
    zero_row: u32,
    // Invocations per row of the grid and rows per plane (grids folded into y and z beyond
    // 65 535 workgroups).
    row: u32,
    plane: u32,
    // This dispatch's first position, and where it lies in `grid`, `rows` and `weights`
    // (elements): positions beyond one binding run in windows of whole positions.
    first: u32,
    grid_first: u32,
    rows_first: u32,
    weights_first: u32,
    // The spatial extents and their row strides, axis k at [k / 4][k % 4].
    dims: array<vec4<u32>, 4>,
    strides: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> grid: array<T>;
@group(0) @binding(2) var<storage, read_write> rows: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<T>;

// Halves to even from floor (lavapipe's built-in round takes f64 halves toward zero on some
// CPUs).
fn round_half_even(x: T) -> T {
    let f = t_floor(x);
    let d = t_sub(x, f);
    let half = t_of(0.5);
    let odd = !t_equal(t_sub(f, t_mul(t_of(2.0), t_floor(t_mul(f, half)))), t_of(0.0));
    return select(f, t_add(f, t_of(1.0)), t_less(half, d) || t_equal(d, half) && odd);
}

// Whether n (a whole number) is even.
fn is_even(n: T) -> bool {
    let two = t_of(2.0);
    return t_equal(t_sub(n, t_mul(two, t_floor(t_div(n, two)))), t_of(0.0));
}

// Reflects x by the nearer border until it lies in [lo, hi].
fn reflect(x: T, lo: T, hi: T) -> T {
    let span = t_sub(hi, lo);
    if t_at_most(span, t_of(0.0)) {
        return lo;
    }
    if t_less(x, lo) {
        let dx = t_sub(lo, x);
        let n = t_floor(t_div(dx, span));
        let r = t_sub(dx, t_mul(n, span));
        if is_even(n) {
            return t_add(lo, r);
        }
        return t_sub(hi, r);
    }
    if t_less(hi, x) {
        let dx = t_sub(x, hi);
        let n = t_floor(t_div(dx, span));
        let r = t_sub(dx, t_mul(n, span));
        if is_even(n) {
            return t_sub(hi, r);
        }
        return t_add(lo, r);
    }
    return x;
}

// ((p * x + q) * x + r) * x + s.
fn cubic_polynomial(x: T, p: f32, q: f32, r: f32, s: f32) -> T {
    let px = t_add(t_mul(t_of(p), x), t_of(q));
    return t_add(t_mul(t_add(t_mul(px, x), t_of(r)), x), t_of(s));
}

// Keys' cubic convolution weight of tap t (0 to 3) at fraction f, a = -0.75: a x^3 - 5a x^2
// + 8a x - 4a for 1 <= x < 2, (a + 2) x^3 - (a + 3) x^2 + 1 for x < 1 (the coefficients
// exact in f32).
fn cubic(t: u32, f: T) -> T {
    const a = -0.75;
    let one = t_of(1.0);
    switch t {
        case 0u: {
            return cubic_polynomial(t_add(f, one), a, -5.0 * a, 8.0 * a, -4.0 * a);
        }
        case 1u: {
            return cubic_polynomial(f, a + 2.0, -(a + 3.0), 0.0, 1.0);
        }
        case 2u: {
            return cubic_polynomial(t_sub(one, f), a + 2.0, -(a + 3.0), 0.0, 1.0);
        }
        default: {
            return cubic_polynomial(t_sub(t_of(2.0), f), a, -5.0 * a, 8.0 * a, -4.0 * a);
        }
    }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = (id.z * params.plane + id.y) * params.row + id.x;
    if i >= params.positions * params.combinations {
        return;
    }
    let p = i / params.combinations;
    var c = i % params.combinations;
    var flat = 0u;
    var weight = t_of(1.0);
    var inside = true;
    // Digits of c from the last axis (least significant) to the first.
    var k = params.rank;
    loop {
        if k == 0u {
            break;
        }
        k -= 1u;
        let t = c % params.taps;
        c /= params.taps;
        let d = params.dims[k / 4u][k % 4u];
        let size = t_of_u32(d);
        let one = t_of(1.0);
        let two = t_of(2.0);
        // The grid's coordinates run the other way: x (the last axis) first.
        let g = grid[params.grid_first + p * params.rank + (params.rank - 1u - k)];
        // Pixel centres at -1 and 1 with align_corners, else pixel edges.
        var x: T;
        if params.align_corners != 0u {
            x = t_mul(t_div(t_add(g, one), two), t_sub(size, one));
        } else {
            x = t_div(t_sub(t_mul(t_add(g, one), size), one), two);
        }
        // A coordinate that is NaN, infinite or beyond 2^62 pixels reads where -1 does (the
        // axis's low bound), as onnxruntime replaces it.
        if t_far(x) {
            x = select(t_of(-0.5), t_of(0.0), params.align_corners != 0u);
        }
        if params.mode == 0u {
            // Halves to even, as PyTorch and the ONNX reference round.
            x = round_half_even(x);
        }
        // The tap's offset from x's floor (from x itself in nearest mode) and its weight on
        // this axis, computed as onnxruntime computes them (its weights are 0 where x + 1
        // rounds to x).
        var base = x;
        var offset = 0;
        if params.mode != 0u {
            base = t_floor(x);
            if params.mode == 1u {
                offset = i32(t);
                weight = t_mul(weight, select(t_sub(x, base), t_sub(t_add(base, one), x), t == 0u));
            } else {
                offset = i32(t) - 1;
                let f = t_sub(t_sub(x, t_sub(base, one)), one);
                weight = t_mul(weight, cubic(t, t_abs(f)));
            }
        }
        // Positions far outside held where i32 arithmetic cannot overflow.
        var j = t_to_i32(t_clamp(base, t_of(-1e9), t_of(1e9))) + offset;
        let last = i32(d) - 1;
        if params.padding == 0u {
            inside = inside && j >= 0 && j <= last;
        } else if params.padding == 2u && (j < 0 || j > last) {
            // The borders reflected about: pixel centres with align_corners, else edges.
            var lo = t_of(-0.5);
            var hi = t_sub(size, t_of(0.5));
            if params.align_corners != 0u {
                lo = t_of(0.0);
                hi = t_sub(size, one);
            }
            // The position reflected in T from where it lies, however far (as onnxruntime
            // reflects its i64 index), then truncated.
            let at = t_add(base, t_of_i32(offset));
            j = t_to_i32(t_clamp(reflect(at, lo, hi), t_of(-1.0), size));
        }
        // In range whatever the coordinate was: never read outside.
        j = clamp(j, 0, max(last, 0));
        flat += u32(j) * params.strides[k / 4u][k % 4u];
    }
    let n = (params.first + p) / params.per_batch;
    rows[params.rows_first + i] = select(params.zero_row, n * params.batch_rows + flat, inside);
    weights[params.weights_first + i] = weight;
}
