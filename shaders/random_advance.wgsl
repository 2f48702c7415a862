// After a draw of random.wgsl: the next draw index of its stream (two words, low first), so
// the next execution of the node (the next Scan iteration, the next run) draws new numbers.

@group(0) @binding(0) var<storage, read_write> state: array<u32>;

@compute @workgroup_size(1)
fn main() {
    let low = state[0] + 1u;
    state[0] = low;
    if low == 0u {
        state[1] = state[1] + 1u;
    }
}
