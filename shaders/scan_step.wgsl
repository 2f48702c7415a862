// Reads and writes of a Scan's iterations inside the compute pass: the iteration index lives in
// a GPU counter advanced once per iteration, so the same dispatch (same bind group and
// parameters) moves a different element each time it is replayed, and an iteration needs no
// buffer copy (which would end the compute pass). The counter has two slots: iterations of
// parity p read slot p, and one dispatch of the iteration (`advance`, the last copy) writes the
// next index into the other slot, which nothing reads before the next iteration, so no
// dispatch of its own is needed for it.
//
// `main` copies `words` 32-bit words from src[src_base + p * src_step + i] to
// dst[dst_base + p * dst_step + i], where p is the iteration's position along the sequence
// (`seq - 1 - t` when `reverse`): a scan-input element into the body's element buffer
// (dst_step 0), or a body's scan-output element into its accumulator row (src_step 0).

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    words: u32,
    src_base: u32,
    src_step: u32,
    dst_base: u32,
    dst_step: u32,
    seq: u32,
    reverse: u32,
    // The counter slot this iteration reads (its parity).
    slot: u32,
    // 1: invocation 0 writes the next index into the other slot.
    advance: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read_write> counter: array<u32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let i = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    let t = counter[params.slot];
    if i == 0u && params.advance != 0u {
        counter[params.slot ^ 1u] = t + 1u;
    }
    if i >= params.words {
        return;
    }
    let p = select(t, params.seq - 1u - t, params.reverse != 0u);
    dst[params.dst_base + p * params.dst_step + i] = src[params.src_base + p * params.src_step + i];
}
