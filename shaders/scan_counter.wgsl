// The iteration counter of a Scan's loop (see scan_step.wgsl): one invocation advances it at
// the end of every iteration, inside the compute pass.

@group(0) @binding(0) var<storage, read_write> iteration: array<u32>;

@compute @workgroup_size(1)
fn main() {
    iteration[0] += 1u;
}
