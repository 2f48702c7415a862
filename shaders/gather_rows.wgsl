// ONNX Gather where each picked row (the elements after the axis) is whole 16-byte quads: an
// embedding lookup's layout. Output quad q lies in row t = q / row_quads, which is index
// j = t % indices of outer slice t / indices, and copies quad q % row_quads of the data row
// that index picks: one index read and one vec4 moved per invocation, where the element
// kernel (gather_index.wgsl) computes every element's index. Indices are i32 or i64 (word
// pairs), negative ones count from the end; one still out of range gives a zero quad and is
// reported where the kernel has a site (index_faults.inc, appended, then divide.inc).
// A Gather whose data, indices or output exceed one binding runs in passes, each over a window
// of the output (quads [out_first, out_first + quads)), of the indices and of the data: a pass
// writes only the quads whose index is at a position in [index_lo, index_hi) and whose source
// lies in data quads [src_lo, src_hi), the first pass over those indices also the quads of
// indices out of range; the windows' first elements are out_first, index_first and src_first
// (src/kernels/gather_index.rs plans the passes).

// Indices are i64 (two words each), else i32.
override INDEX_64: bool = false;
override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    // The pass's output quads, quads per row, the indices' count and the data's length along
    // the axis.
    quads: u32,
    row_quads: u32,
    indices: u32,
    axis_dim: u32,
    // Where an index out of range is reported (0: it is not).
    site: u32,
    // 1 when this pass writes (and reports) the quads of indices out of range.
    first_pass: u32,
    // `row_quads` and `indices` as `divide` takes them (divide.inc, appended).
    row_shift: u32,
    row_magic: u32,
    indices_shift: u32,
    indices_magic: u32,
    // The first output quad, index and data quad bound, and the data quads this pass moves.
    out_first: u32,
    index_first: u32,
    src_first: u32,
    src_lo: u32,
    src_hi: u32,
    // The positions among the indices this pass reads.
    index_lo: u32,
    index_hi: u32,
    _pad0: u32,
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
    let here = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if here >= params.quads {
        return;
    }
    let q = params.out_first + here;
    let t = divide(q, params.row_shift, params.row_magic);
    let c = q - t * params.row_quads;
    let outer = divide(t, params.indices_shift, params.indices_magic);
    let j = t - outer * params.indices;
    if j < params.index_lo || j >= params.index_hi {
        return;
    }
    let w = index_words_at(j - params.index_first, INDEX_64);
    let index = index_within(w.x, w.y, params.axis_dim);
    if index < 0 {
        if params.first_pass == 0u {
            return;
        }
        // The row's first quad reports it (its other quads would report the same index).
        if c == 0u {
            report_fault(params.site, j, w.x, w.y, 0u);
        }
        dst[here] = vec4<u32>(0u);
        return;
    }
    let s = (outer * params.axis_dim + u32(index)) * params.row_quads + c;
    if s < params.src_lo || s >= params.src_hi {
        return;
    }
    dst[here] = src[s - params.src_first];
}
