// Determinants of square matrices: one invocation per matrix, Gaussian elimination with
// partial pivoting (the largest magnitude in the column) in place in `a`, a copy of the
// matrices that the kernel overwrites. A dispatch eliminates columns `first..end`; `det`
// carries the product of the pivots so far (with the swaps' signs) from one dispatch to the
// next, since a long elimination is cut over several (see `kernels/det.rs`). A zero pivot
// ends the elimination with a determinant of 0; NaN propagates through the product.

alias T = f32; // ELEMENT TYPE

// The arithmetic on T, one line each (the f64 emulation on u32 pairs replaces the marked
// lines, see kernels/det.rs).
fn t_one() -> T { return T(1); } // ONE
fn t_is_zero(x: T) -> bool { return x == T(0); } // IS ZERO
fn t_abs(x: T) -> T { return abs(x); } // ABS
fn t_greater(x: T, y: T) -> bool { return x > y; } // GREATER
fn t_neg(x: T) -> T { return -x; } // NEG
fn t_mul(x: T, y: T) -> T { return x * y; } // MUL
fn t_div(x: T, y: T) -> T { return x / y; } // DIV
fn t_sub(x: T, y: T) -> T { return x - y; } // SUB

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    matrices: u32,
    n: u32,
    first: u32,
    end: u32,
    // Invocations per row of the grid and rows per plane (grids folded into y and z beyond
    // 65 535 workgroups).
    row: u32,
    plane: u32,
    // Where this dispatch's first matrix lies in `a` and its determinant in `det` (elements):
    // matrices beyond one binding run in windows of whole matrices.
    a_first: u32,
    det_first: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> a: array<T>;
@group(0) @binding(2) var<storage, read_write> det: array<T>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m = (gid.z * params.plane + gid.y) * params.row + gid.x;
    if m >= params.matrices {
        return;
    }
    let n = params.n;
    let base = params.a_first + m * n * n;
    var d = t_one();
    if params.first > 0u {
        d = det[params.det_first + m];
        if t_is_zero(d) {
            return;
        }
    }
    for (var k = params.first; k < params.end; k++) {
        var p = k;
        var best = t_abs(a[base + k * n + k]);
        for (var r = k + 1u; r < n; r++) {
            let v = t_abs(a[base + r * n + k]);
            if t_greater(v, best) {
                best = v;
                p = r;
            }
        }
        if p != k {
            for (var c = k; c < n; c++) {
                let t = a[base + k * n + c];
                a[base + k * n + c] = a[base + p * n + c];
                a[base + p * n + c] = t;
            }
            d = t_neg(d);
        }
        let pivot = a[base + k * n + k];
        d = t_mul(d, pivot);
        if t_is_zero(pivot) {
            break;
        }
        for (var r = k + 1u; r < n; r++) {
            let f = t_div(a[base + r * n + k], pivot);
            for (var c = k + 1u; c < n; c++) {
                a[base + r * n + c] = t_sub(a[base + r * n + c], t_mul(f, a[base + k * n + c]));
            }
        }
    }
    det[params.det_first + m] = d;
}
