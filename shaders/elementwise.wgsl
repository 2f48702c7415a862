// Element-wise ops with numpy broadcasting: dst[i] = apply(lhs[ia], rhs[ib]), where ia and ib
// follow i's coordinates with stride 0 on broadcast axes. Unary ops bind the same buffer twice
// and ignore `b`.
//
// Specialized per op and dtype by a validated substitution of the three marked lines below
// (the element types and the expression); every variant is validated with naga in the tests.

alias T = f32; // LHS TYPE
alias U = f32; // OUT TYPE

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    count: u32,
    rank: u32,
    // Element offsets of this dispatch's operands inside the bound windows (work larger than
    // one binding runs in several dispatches over windows of the buffers).
    lhs_base: u32,
    rhs_base: u32,
    dst_base: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    // Output shape and the operands' element strides, innermost axis first.
    shape: array<vec4<u32>, 4>,
    lhs_stride: array<vec4<u32>, 4>,
    rhs_stride: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> lhs: array<T>;
@group(0) @binding(2) var<storage, read> rhs: array<T>;
@group(0) @binding(3) var<storage, read_write> dst: array<U>;

fn apply(a: T, b: T) -> U {
    return a + b; // EXPRESSION
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let i = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if i >= params.count {
        return;
    }
    var rest = i;
    var ia = params.lhs_base;
    var ib = params.rhs_base;
    // One axis (same-shape operands, merged on the host): no division per element.
    let one_axis = params.rank == 1u;
    if one_axis {
        ia += i * params.lhs_stride[0][0];
        ib += i * params.rhs_stride[0][0];
    }
    for (var k = 0u; k < params.rank && !one_axis; k++) {
        let n = params.shape[k / 4u][k % 4u];
        let c = rest % n;
        rest /= n;
        ia += c * params.lhs_stride[k / 4u][k % 4u];
        ib += c * params.rhs_stride[k / 4u][k % 4u];
    }
    dst[params.dst_base + i] = apply(lhs[ia], rhs[ib]);
}
