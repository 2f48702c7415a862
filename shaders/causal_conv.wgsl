// ONNX CausalConvWithState (f32): a depthwise causal 1-D convolution over the last axis of
// input [batch, channels, length] with weight [channels, 1, k], after the k - 1 positions of
// past_state [batch, channels, k - 1] (zeros without one), plus an optional bias [channels]
// and SiLU. One invocation per output element sums its k products in order; the invocations
// after those write present_state, the last k - 1 positions of the state and the input.

override WORKGROUP_SIZE: u32 = 64u;

struct Params {
    batch: u32,
    channels: u32,
    length: u32,
    k: u32,
    has_state: u32,
    has_bias: u32,
    silu: u32,
    // Invocations per row of the grid and rows per plane (grids folded into y and z beyond
    // 65 535 workgroups).
    row: u32,
    plane: u32,
    // Tensors beyond one binding run in passes over windows of whole channel rows: this
    // pass's `rows` from row `row_first` on, its first row at these elements of the windows.
    rows: u32,
    row_first: u32,
    input_first: u32,
    output_first: u32,
    past_first: u32,
    present_first: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
// Bound to the input when absent (flags say so): never read then.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> past: array<f32>;
@group(0) @binding(5) var<storage, read_write> output: array<f32>;
@group(0) @binding(6) var<storage, read_write> present: array<f32>;

// Position `p` of the pass's channel row `r` of the state followed by the input.
fn padded(r: u32, p: u32) -> f32 {
    let carry = params.k - 1u;
    if p < carry {
        if params.has_state == 0u {
            return 0.0;
        }
        return past[params.past_first + r * carry + p];
    }
    return input[params.input_first + r * params.length + p - carry];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = (id.z * params.plane + id.y) * params.row + id.x;
    let rows = params.rows;
    let outputs = rows * params.length;
    let carry = params.k - 1u;
    if i < outputs {
        let r = i / params.length;
        let t = i % params.length;
        // The row's channel (rows run over batch * channels).
        let c = (params.row_first + r) % params.channels;
        var acc = 0.0;
        for (var j = 0u; j < params.k; j++) {
            acc += weight[c * params.k + j] * padded(r, t + j);
        }
        if params.has_bias != 0u {
            acc += bias[c];
        }
        if params.silu != 0u {
            acc = acc * (1.0 / (1.0 + exp(-acc)));
        }
        output[params.output_first + i] = acc;
    } else if i < outputs + rows * carry {
        let s = i - outputs;
        let r = s / carry;
        let m = s % carry;
        present[params.present_first + s] = padded(r, params.length + m);
    }
}
