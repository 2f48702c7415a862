// ONNX Gather where each picked row (the elements after the axis) is whole 16-byte quads: an
// embedding lookup's layout. Output quad q lies in row t = q / row_quads, which is index
// j = t % indices of outer slice t / indices, and copies quad q % row_quads of the data row
// that index picks: one index read and one vec4 moved per invocation, where the element
// kernel (gather_index.wgsl) computes every element's index. Indices are i32 or i64 (word
// pairs), negative ones count from the end; one still out of range gives a zero quad and is
// reported where the kernel has a site (index_faults.inc, appended, then divide.inc).

// Indices are i64 (two words each), else i32.
override INDEX_64: bool = false;
override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    // Output quads, quads per row, the indices' count and the data's length along the axis.
    quads: u32,
    row_quads: u32,
    indices: u32,
    axis_dim: u32,
    // Where an index out of range is reported (0: it is not).
    site: u32,
    _pad0: u32,
    // `row_quads` and `indices` as `divide` takes them (divide.inc, appended).
    row_shift: u32,
    row_magic: u32,
    indices_shift: u32,
    indices_magic: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> index_words: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let q = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if q >= params.quads {
        return;
    }
    let t = divide(q, params.row_shift, params.row_magic);
    let c = q - t * params.row_quads;
    let outer = divide(t, params.indices_shift, params.indices_magic);
    let j = t - outer * params.indices;
    let w = index_words_at(j, INDEX_64);
    let index = index_within(w.x, w.y, params.axis_dim);
    if index < 0 {
        // The row's first quad reports it (its other quads would report the same index).
        if c == 0u {
            report_fault(params.site, j, w.x, w.y, 0u);
        }
        dst[q] = vec4<u32>(0u);
        return;
    }
    dst[q] = src[(outer * params.axis_dim + u32(index)) * params.row_quads + c];
}
