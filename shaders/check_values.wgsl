// A rule on values read on the GPU that no kernel of their readers checks (TensorScatter's
// write indices, RotaryEmbedding's position ids, OneHotEncoder's categories with `zeros` 0):
// the graph computes `ok` (bool, one byte per element) from the values, and element i breaks
// the rule where ok[i] is false. The first invocation of a run to find one reports its site,
// its position and its value (i32, or i64 as word pairs) through index_faults.inc (appended),
// and the host names the op, the input and the rule. Invocation 0 writes `true` to the
// one-element bool output (the node's result, read by nothing).

// The values are i64 (two words each), else i32.
override INDEX_64: bool = false;
override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    count: u32,
    site: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ok: array<u32>;
// The values, named as index_faults.inc reads them.
@group(0) @binding(2) var<storage, read> index_words: array<u32>;
@group(0) @binding(3) var<storage, read_write> checked: array<u32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let i = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    if i == 0u {
        checked[0] = 1u;
    }
    if i >= params.count || extractBits(ok[i / 4u], (i % 4u) * 8u, 8u) != 0u {
        return;
    }
    let w = index_words_at(i, INDEX_64);
    report_fault(params.site, i, w.x, w.y, 0u);
}
