// A rule on values read on the GPU that no kernel of their readers checks (TensorScatter's
// write indices, RotaryEmbedding's position ids, a loss's targets, OneHotEncoder's categories
// with `zeros` 0): each value must lie in low..=high or be one of `allowed`, all known while
// planning. The first invocation of a run to find one that breaks the rule reports its site,
// its position and its value (i32, or i64 as word pairs) through index_faults.inc (appended),
// and the host names the op, the input and the rule. Invocation 0 writes `true` to the
// one-element bool output (the node's result, read by nothing).

// The values are i64 (two words each), else i32.
override INDEX_64: bool = false;
override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    count: u32,
    site: u32,
    allowed_count: u32,
    _pad: u32,
    // i64s as (low word, high word).
    low: vec2<u32>,
    high: vec2<u32>,
}

@group(0) @binding(0) var<uniform> params: Params;
// The values outside low..=high that are kept, i64s as word pairs.
@group(0) @binding(1) var<storage, read> allowed: array<u32>;
// The values, named as index_faults.inc reads them.
@group(0) @binding(2) var<storage, read> index_words: array<u32>;
@group(0) @binding(3) var<storage, read_write> checked: array<u32>;

// a < b for i64s as (low word, high word).
fn below(a: vec2<u32>, b: vec2<u32>) -> bool {
    let ah = bitcast<i32>(a.y);
    let bh = bitcast<i32>(b.y);
    return ah < bh || (ah == bh && a.x < b.x);
}

fn kept(v: vec2<u32>) -> bool {
    if !below(v, params.low) && !below(params.high, v) {
        return true;
    }
    for (var k = 0u; k < params.allowed_count; k++) {
        if all(v == vec2<u32>(allowed[2u * k], allowed[2u * k + 1u])) {
            return true;
        }
    }
    return false;
}

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
    if i >= params.count {
        return;
    }
    let w = index_words_at(i, INDEX_64);
    if !kept(w) {
        report_fault(params.site, i, w.x, w.y, 0u);
    }
}
