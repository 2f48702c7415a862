// The iteration counter of a Scan's loop (see scan_step.wgsl) for an iteration with no copy
// to carry it: one invocation writes the next index into the other slot.

override SLOT: u32 = 0u;

@group(0) @binding(0) var<storage, read_write> iteration: array<u32>;

@compute @workgroup_size(1)
fn main() {
    iteration[SLOT ^ 1u] = iteration[SLOT] + 1u;
}
