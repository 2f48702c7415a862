// f16 conversions by the adapter's own instructions, in place of the word template's
// bit-level ones (the block between `BEGIN F16 CONVERSIONS` and `END F16 CONVERSIONS`). WGSL
// leaves the rounding of `pack2x16float` to the implementation, and whether either built-in
// keeps subnormals, so a context swaps these in only where the probe below gave the bit-level
// results on every f16 value widened and on the f32 values where rounding can go wrong
// (`src/gpu/f16.rs`). NaN and values out of f16's range, which WGSL leaves indeterminate,
// stay explicit, and so do results below f16's normals, where one implementation rounds
// wrongly. (On the H200, f16 Add with the bit-level ones ran at 0.55 of a plain copy,
// bf16 Add, whose conversions are a shift and a rounding, at 1.01.)

// f16 bits (low 16) to f32, exactly (subnormals, infinities and NaN payloads included).
fn f16_to_f32(h: u32) -> f32 {
    let m = h & 0x3ffu;
    let nan = bitcast<f32>(((h & 0x8000u) << 16u) | 0x7f800000u | (m << 13u));
    return select(unpack2x16float(h).x, nan, (h & 0x7c00u) == 0x7c00u && m != 0u);
}

// f32 to f16 bits, rounded to nearest-even; NaN stays a (quiet) NaN.
fn f32_to_f16(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let sign = (x >> 16u) & 0x8000u;
    let mag = x & 0x7fffffffu;
    var bits = pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;
    // Below f16's least normal (2^-14) the result is |v| in units of 2^-24, which a sum with
    // 0.5 rounds to nearest-even (an f32 unit there is 2^-24): SwiftShader's built-in drops
    // the bits below half a unit there (2^-25 + 2^-48 went to 0, not 2^-24).
    let tiny = bitcast<u32>(abs(v) + 0.5) - 0x3f000000u;
    bits = select(bits, sign | tiny, mag < 0x38800000u);
    // 65520 and above round to infinity.
    bits = select(bits, sign | 0x7c00u, mag >= 0x477ff000u);
    return select(bits, sign | 0x7e00u | ((mag >> 13u) & 0x3ffu), mag > 0x7f800000u);
}
// PROBE ONLY

// The probe: `widened[h]` is f16 `h` widened (every f16 value), `narrowed[i]` and
// `round_trip[i]` are `floats[i]` narrowed, and narrowed and widened again in one expression
// (a compiler that folded that pair away would change fused programs' roundings).
@group(0) @binding(0) var<storage, read> floats: array<u32>;
@group(0) @binding(1) var<storage, read_write> widened: array<u32>;
@group(0) @binding(2) var<storage, read_write> narrowed: array<u32>;
@group(0) @binding(3) var<storage, read_write> round_trip: array<u32>;

@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = id.x + id.y * groups.x * 64u;
    if i < 65536u {
        widened[i] = bitcast<u32>(f16_to_f32(i));
    }
    if i < arrayLength(&floats) {
        let v = bitcast<f32>(floats[i]);
        narrowed[i] = f32_to_f16(v);
        round_trip[i] = bitcast<u32>(f16_to_f32(f32_to_f16(v)));
    }
}
