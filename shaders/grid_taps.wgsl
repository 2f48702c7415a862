// ONNX GridSample's taps: for every output position p (of N x O, batch-major) and every
// combination c of one tap per spatial axis (T taps per axis: 1 nearest, 2 linear, 4 cubic;
// axis 0 the most significant digit of c), the row of the input seen as [N * S + 1, C] that
// the tap reads (row N * S is zeros: taps outside the input with zeros padding read it) and
// the tap's weight, the product of its per-axis weights. The grid holds K coordinates per
// position, x (the last spatial axis) first, normalized to [-1, 1]; coordinates and weights
// are computed in T (f32, or f64 for f64 inputs).
//
// Padding applies to each tap's index (clamped with border padding, reflected with
// reflection padding), as onnxruntime and PyTorch pad bicubic taps; for nearest and linear
// sampling that equals moving the coordinate first, as the ONNX reference does.

alias T = f32; // ELEMENT TYPE

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
    // The spatial extents and their row strides, axis k at [k / 4][k % 4].
    dims: array<vec4<u32>, 4>,
    strides: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> grid: array<T>;
@group(0) @binding(2) var<storage, read_write> rows: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<T>;

// The coordinates inside an axis of `size` elements: pixel centres with align_corners,
// else pixel edges.
// Halves to even from floor (lavapipe's built-in round takes f64 halves toward zero on some
// CPUs).
fn round_half_even(x: T) -> T {
    let f = floor(x);
    let d = x - f;
    let odd = f - 2.0 * floor(f * 0.5) != 0.0;
    return select(f, f + 1.0, d > 0.5 || d == 0.5 && odd);
}

fn bounds(size: T) -> vec2<T> {
    if params.align_corners != 0u {
        return vec2<T>(0.0, size - 1.0);
    }
    return vec2<T>(-0.5, size - 0.5);
}

// Reflects x by the nearer border until it lies in [lo, hi].
fn reflect(x: T, lo: T, hi: T) -> T {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    if x < lo {
        let dx = lo - x;
        let n = floor(dx / span);
        let r = dx - n * span;
        if n - 2.0 * floor(n / 2.0) == 0.0 {
            return lo + r;
        }
        return hi - r;
    }
    if x > hi {
        let dx = x - hi;
        let n = floor(dx / span);
        let r = dx - n * span;
        if n - 2.0 * floor(n / 2.0) == 0.0 {
            return hi - r;
        }
        return lo + r;
    }
    return x;
}

// Keys' cubic convolution weight of tap t (0 to 3) at fraction f, a = -0.75.
fn cubic(t: u32, f: T) -> T {
    let a: T = -0.75;
    switch t {
        case 0u: {
            let x = f + 1.0;
            return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
        }
        case 1u: {
            return ((a + 2.0) * f - (a + 3.0)) * f * f + 1.0;
        }
        case 2u: {
            let x = 1.0 - f;
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
        }
        default: {
            let x = 2.0 - f;
            return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
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
    var weight: T = 1.0;
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
        let size = T(d);
        // The grid's coordinates run the other way: x (the last axis) first.
        let g = grid[p * params.rank + (params.rank - 1u - k)];
        var x: T;
        if params.align_corners != 0u {
            x = (g + 1.0) / 2.0 * (size - 1.0);
        } else {
            x = ((g + 1.0) * size - 1.0) / 2.0;
        }
        if params.mode == 0u {
            // Halves to even, as PyTorch and the ONNX reference round.
            x = round_half_even(x);
        }
        // Positions far outside (infinite coordinates) held where index arithmetic cannot
        // overflow.
        let far: T = 1e9;
        var j: i32;
        if params.mode == 0u {
            j = i32(clamp(x, -far, far));
        } else {
            let f = x - floor(x);
            let base = clamp(floor(x), -far, far);
            if params.mode == 1u {
                j = i32(base) + i32(t);
                weight *= select(f, 1.0 - f, t == 0u);
            } else {
                j = i32(base) - 1 + i32(t);
                weight *= cubic(t, f);
            }
        }
        let last = i32(d) - 1;
        if params.padding == 0u {
            inside = inside && j >= 0 && j <= last;
        } else if params.padding == 1u {
            j = clamp(j, 0, last);
        } else if j < 0 || j > last {
            let b = bounds(size);
            j = i32(reflect(T(j), b.x, b.y));
        }
        // In range whatever the coordinate was (NaN, infinite): never read outside.
        j = clamp(j, 0, max(last, 0));
        flat += u32(j) * params.strides[k / 4u][k % 4u];
    }
    let n = p / params.per_batch;
    rows[i] = select(params.zero_row, n * params.batch_rows + flat, inside);
    weights[i] = weight;
}
