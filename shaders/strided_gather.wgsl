// Strided gather: output element i (C order) = input element
//   base + sum_k coord_k(i) * step_k
// where coord_k are the coordinates of i in the output shape. Steps are signed (reversed axes);
// they travel as two's-complement u32 and the sum wraps mod 2^32, which gives the exact index
// because every true index is below 2^32.
//
// Data is moved as 32-bit words whatever the dtype (ELEM_BYTES = 1, 2, 4 or 8):
// - 4 bytes: one word per element;
// - 8 bytes: two words per element;
// - 1 or 2 bytes: each invocation assembles one whole output word from 4 / ELEM_BYTES
//   elements, so no two invocations ever write the same word (no races, no atomics).

override ELEM_BYTES: u32 = 4u;
// Output element i goes to dst_base + i (dst_base counts words for 1- and 2-byte elements),
// or with DST_STRIDED (4- and 8-byte elements only) to dst_base + sum_k coord_k(i) * dst_step_k
// (Concat writes its inputs this way).
override DST_STRIDED: bool = false;
override WORKGROUP_SIZE: u32 = 64u;
override ITEMS: u32 = 4u;

struct Params {
    // Output elements.
    count: u32,
    // Invocations with work: output words for 1- and 2-byte elements, else elements.
    units: u32,
    rank: u32,
    // Input element index of output element 0.
    base: u32,
    // Output shape and input steps, innermost axis first, 4 axes per vec4.
    shape: array<vec4<u32>, 4>,
    step: array<vec4<u32>, 4>,
    dst_base: u32,
    // 1- and 2-byte elements: element slots of the first output word that precede this
    // dispatch's output (a chunk starting inside a word); they keep their bytes.
    dst_skip: u32,
    _pad1: u32,
    _pad2: u32,
    dst_step: array<vec4<u32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

fn source_index(i: u32) -> u32 {
    var rest = i;
    var index = params.base;
    for (var k = 0u; k < params.rank; k++) {
        let n = params.shape[k / 4u][k % 4u];
        index += (rest % n) * params.step[k / 4u][k % 4u];
        rest /= n;
    }
    return index;
}

fn destination_index(i: u32) -> u32 {
    if !DST_STRIDED {
        return params.dst_base + i;
    }
    var rest = i;
    var index = params.dst_base;
    for (var k = 0u; k < params.rank; k++) {
        let n = params.shape[k / 4u][k % 4u];
        index += (rest % n) * params.dst_step[k / 4u][k % 4u];
        rest /= n;
    }
    return index;
}

// Consecutive output elements' source indices: the full decomposition once, then one add per
// element until the innermost axis wraps.
struct Cursor {
    index: u32,
    inner: u32,
}

fn cursor_at(i: u32) -> Cursor {
    return Cursor(source_index(i), i % params.shape[0][0]);
}

fn advance(c: Cursor, i_next: u32) -> Cursor {
    if c.inner + 1u < params.shape[0][0] {
        return Cursor(c.index + params.step[0][0], c.inner + 1u);
    }
    return cursor_at(i_next);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    // Flattened id: grids past 65 535 workgroups are folded into y and z by the host.
    let invocation = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;
    // Each invocation moves ITEMS consecutive units (elements, or words of sub-word elements).
    let first = invocation * ITEMS;
    if first >= params.units {
        return;
    }
    if ELEM_BYTES >= 4u {
        var c = cursor_at(first);
        for (var k = 0u; k < ITEMS; k++) {
            let e = first + k;
            if e >= params.count {
                break;
            }
            let d = destination_index(e);
            if ELEM_BYTES == 4u {
                dst[d] = src[c.index];
            } else {
                dst[2u * d] = src[2u * c.index];
                dst[2u * d + 1u] = src[2u * c.index + 1u];
            }
            if k + 1u < ITEMS {
                c = advance(c, e + 1u);
            }
        }
    } else {
        // min(): this branch is dead for 4- and 8-byte elements but still constant-evaluated.
        let per_word = 4u / min(ELEM_BYTES, 2u);
        let bits = ELEM_BYTES * 8u;
        let mask = select(0xFFFFu, 0xFFu, ELEM_BYTES == 1u);
        let first_slot = first * per_word;
        var c = cursor_at(select(0u, first_slot - params.dst_skip, first_slot >= params.dst_skip));
        for (var w = 0u; w < ITEMS; w++) {
            let unit = first + w;
            if unit >= params.units {
                break;
            }
            var word = 0u;
            var keep = 0u;
            for (var k = 0u; k < per_word; k++) {
                let slot = unit * per_word + k;
                if slot >= params.dst_skip && slot - params.dst_skip < params.count {
                    let e = slot - params.dst_skip;
                    let value = (src[c.index / per_word] >> ((c.index % per_word) * bits)) & mask;
                    word |= value << (k * bits);
                    c = advance(c, e + 1u);
                } else {
                    keep |= mask << (k * bits);
                }
            }
            // Edge words shared with a neighbouring chunk keep its bytes. Chunks are separate
            // dispatches, so this read-modify-write never races.
            if keep != 0u {
                word |= dst[params.dst_base + unit] & keep;
            }
            dst[params.dst_base + unit] = word;
        }
    }
}
