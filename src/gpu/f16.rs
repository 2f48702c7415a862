//! f16 conversions by the adapter's own instructions where they are exact.
//!
//! The kernels convert f16 to and from f32 by integer arithmetic (the word template's `BEGIN
//! F16 CONVERSIONS` block), which WGSL guarantees bit for bit; its `pack2x16float` and
//! `unpack2x16float` leave rounding and subnormals to the implementation. When a context is
//! made, a probe converts every f16 value to f32 and a set of f32 values to f16 (around each
//! rounding boundary of every exponent, subnormals and ties included) with the built-ins;
//! where every result has the bits of the integer conversions, the context's kernels use
//! `shaders/f16_native.wgsl` instead (far fewer instructions per element on a GPU).

use crate::{Error, Result};

const NATIVE: &str = include_str!("../../shaders/f16_native.wgsl");
const BEGIN: &str = "// BEGIN F16 CONVERSIONS";
const END: &str = "// END F16 CONVERSIONS";

/// The built-in conversions of `f16_native.wgsl` (without its probe).
fn native_block() -> &'static str {
    NATIVE.split("// PROBE ONLY").next().unwrap_or(NATIVE)
}

/// `source` with its bit-level f16 conversions replaced by the built-in ones; `None` where it
/// has none. (For the context's pipelines, and for tests that validate every variant so.)
pub fn with_native_f16(source: &str) -> Option<String> {
    let begin = source.find(BEGIN)?;
    let end = begin + source[begin..].find(END)? + END.len();
    Some(format!(
        "{}{}{}",
        &source[..begin],
        native_block(),
        &source[end..]
    ))
}

/// f16 bits widened to f32 bits as the bit-level conversion does (NaN payloads kept).
pub fn widened_bits(h: u16) -> u32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let (e, m) = ((h >> 10) & 0x1f, h & 0x3ff);
    match e {
        0x1f => sign | 0x7f80_0000 | (m << 13),
        0 => sign | (m as f32 * 2f32.powi(-24)).to_bits(),
        _ => sign | ((e + 112) << 23) | (m << 13),
    }
}

/// f32 bits narrowed to f16 bits as the bit-level conversion does: nearest-even, NaN quiet
/// with the payload's top bits.
pub fn narrowed_bits(x: u32) -> u32 {
    let sign = (x >> 16) & 0x8000;
    let mag = x & 0x7fff_ffff;
    if mag > 0x7f80_0000 {
        return sign | 0x7e00 | ((mag >> 13) & 0x3ff);
    }
    sign | u32::from(half::f16::from_f32(f32::from_bits(mag)).to_bits())
}

/// The f32 values the probe narrows: for every exponent and sign, significands whose dropped
/// bits (13 for f16's normals, up to 24 below them) are at, around and away from half a unit,
/// under kept bits that are even, odd and all ones (which carry into the exponent); then
/// pseudo-random ones.
fn probe_floats() -> Vec<u32> {
    let mut significands = Vec::new();
    for dropped in 13..=23u32 {
        let half = 1u32 << (dropped - 1);
        let full = (1u32 << dropped) - 1;
        for low in [0, 1, half - 1, half, half + 1, full] {
            for kept in [0u32, 1, 2, 3, 0x2aa, u32::MAX] {
                significands.push(((kept << dropped) | low) & 0x7f_ffff);
            }
        }
    }
    significands.sort_unstable();
    significands.dedup();
    let mut floats = Vec::with_capacity(significands.len() * 512 + (1 << 16));
    for sign in [0, 0x8000_0000u32] {
        for exponent in 0..=255u32 {
            floats.extend(significands.iter().map(|m| sign | (exponent << 23) | m));
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..1 << 16 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        floats.push((state >> 32) as u32);
    }
    floats
}

/// Whether the built-in conversions give the bit-level results on this device (see the
/// module's doc). Any error, of the probe or the device, counts as no.
pub(super) async fn native_conversions_exact(device: &wgpu::Device, queue: &wgpu::Queue) -> bool {
    match probe(device, queue, NATIVE).await {
        Ok(exact) => exact,
        Err(e) => {
            log::info!("f16 conversion probe failed ({e}); converting by integer arithmetic");
            false
        }
    }
}

/// Runs the probe of `source` (`f16_native.wgsl`, or a variant of it in tests): whether its
/// conversions gave the bit-level results.
async fn probe(device: &wgpu::Device, queue: &wgpu::Queue, source: &str) -> Result<bool> {
    use wgpu::util::DeviceExt;
    let floats = probe_floats();
    let n = floats.len() as u64;
    let sizes = [1 << 16, n, n];
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("f16 conversion probe"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("f16 conversion probe"),
        layout: None,
        module: &module,
        entry_point: Some("probe"),
        compilation_options: Default::default(),
        cache: None,
    });
    let input = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("f16 probe input"),
        contents: bytemuck::cast_slice(&floats),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let outputs: Vec<(wgpu::Buffer, wgpu::Buffer)> = sizes
        .iter()
        .map(|&words| {
            let buffer = |usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("f16 probe output"),
                    size: words * 4,
                    usage,
                    mapped_at_creation: false,
                })
            };
            (
                buffer(wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC),
                buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
            )
        })
        .collect();
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: input.as_entire_binding(),
    }];
    entries.extend(
        outputs
            .iter()
            .enumerate()
            .map(|(i, (out, _))| wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: out.as_entire_binding(),
            }),
    );
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        let groups = (n.max(1 << 16) as u32).div_ceil(64);
        // (Within WebGPU's 65 535 workgroups per dimension: the probe has under 2^22 cases.)
        pass.dispatch_workgroups(groups.min(1 << 15), groups.div_ceil(1 << 15), 1);
    }
    for ((out, read), words) in outputs.iter().zip(sizes) {
        encoder.copy_buffer_to_buffer(out, 0, read, 0, words * 4);
    }
    queue.submit([encoder.finish()]);
    let receivers: Vec<_> = outputs
        .iter()
        .map(|(_, read)| {
            let (tx, rx) = futures_channel::oneshot::channel();
            read.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            rx
        })
        .collect();
    let failed = |e: String| Error::Adapter(format!("f16 conversion probe: {e}"));
    if let Some(e) = validation.pop().await.or(oom.pop().await) {
        return Err(failed(e.to_string()));
    }
    #[cfg(not(target_arch = "wasm32"))]
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| failed(e.to_string()))?;
    let mut results: Vec<Vec<u32>> = Vec::new();
    for ((_, read), rx) in outputs.iter().zip(receivers) {
        rx.await
            .map_err(|_| failed("the device was lost".into()))?
            .map_err(|e| failed(e.to_string()))?;
        let view = read
            .slice(..)
            .get_mapped_range()
            .map_err(|e| failed(e.to_string()))?;
        results.push(bytemuck::cast_slice(&view).to_vec());
    }
    let widened_ok = (0..=u16::MAX).all(|h| results[0][usize::from(h)] == widened_bits(h));
    let narrowed_ok = floats
        .iter()
        .zip(&results[1])
        .zip(&results[2])
        .all(|((&x, &n), &r)| {
            let expected = narrowed_bits(x);
            n == expected && r == widened_bits(expected as u16)
        });
    if !(widened_ok && narrowed_ok) {
        log::info!("the adapter's f16 conversions differ from nearest-even; converting by integer arithmetic");
    }
    Ok(widened_ok && narrowed_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_references_follow_ieee() {
        for h in 0..=u16::MAX {
            let x = half::f16::from_bits(h);
            if x.is_nan() {
                assert_eq!(widened_bits(h) & 0x7f80_0000, 0x7f80_0000);
                assert_ne!(widened_bits(h) & 0x7f_ffff, 0);
                continue;
            }
            assert_eq!(widened_bits(h), x.to_f32().to_bits(), "{h:#x}");
            // Widening then narrowing gives the value back.
            assert_eq!(narrowed_bits(widened_bits(h)), u32::from(h), "{h:#x}");
        }
        // Ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
        assert_eq!(narrowed_bits(0x3f80_1000), 0x3c00);
        assert_eq!(narrowed_bits(0x3f80_3000), 0x3c02);
        assert_eq!(narrowed_bits(0x477f_f000), 0x7c00);
        assert_eq!(narrowed_bits(0x477f_efff), 0x7bff);
        // 2^-25 is halfway to the least subnormal: rounds to zero; just above it, up.
        assert_eq!(narrowed_bits(0x3300_0000), 0);
        assert_eq!(narrowed_bits(0xb300_0001), 0x8001);
        assert_eq!(narrowed_bits(0x7fc0_0000), 0x7e00);
    }

    #[test]
    fn probe_covers_each_rounding_case() {
        let floats = probe_floats();
        assert!(floats.len() < 1 << 22);
        // Ties of every subnormal shift and of the normals, both ways.
        for dropped in 13..=23 {
            let tie = 1u32 << (dropped - 1);
            assert!(floats.contains(&((102 << 23) | tie)));
            assert!(floats.contains(&((0x8000_0000) | (112 << 23) | (1 << dropped) | tie)));
        }
    }

    /// The probe passes the conversions where the adapter's are exact (lavapipe's are, and the
    /// test suite relies on it to check them), also where the built-in narrowing fails below
    /// f16's normals, and fails ones that round a tie the wrong way, flush subnormals, or lose
    /// a NaN's payload.
    #[cfg(feature = "native")]
    #[test]
    fn probe_tells_exact_conversions_from_wrong_ones() {
        let ctx = crate::gpu::test_context();
        let run = |source: &str| {
            pollster::block_on(probe(ctx.device(), ctx.queue(), source)).expect("the probe runs")
        };
        let on_lavapipe = ctx.adapter_info().name.contains("llvmpipe");
        let exact = run(NATIVE);
        assert!(
            exact || !on_lavapipe,
            "lavapipe's f16 conversions were found inexact"
        );
        if std::env::var("WGPU_OPS_NATIVE_F16").is_err() {
            assert_eq!(ctx.native_f16_conversions(), exact);
        }
        // The context's kernels are built with the conversions it chose.
        let template = format!("{BEGIN}\nfn f16_to_f32(h: u32) -> f32 {{}}\n{END}\n");
        let built = ctx.adapted(template.into());
        assert_eq!(
            built.contains("unpack2x16float"),
            ctx.native_f16_conversions()
        );
        let narrowing = "var bits = pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;";
        // A built-in that gets results below f16's normals wrong (SwiftShader's rounds some
        // of them down) is covered by the explicit path there.
        let flushing = "var bits = pack2x16float(vec2<f32>(select(v, 0.0, mag < 0x38800000u), 0.0)) & 0xffffu;";
        assert!(run(&NATIVE.replace(narrowing, flushing)) || !exact);
        let widening = "select(unpack2x16float(h).x, nan,";
        let nan = "sign | 0x7e00u | ((mag >> 13u) & 0x3ffu)";
        for (what, from, to) in [
            ("ties up", narrowing, "var bits = (pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu) + u32((x & 0x3fffu) == 0x1000u);"),
            ("subnormals flushed", widening, "select(select(unpack2x16float(h).x, 0.0, (h & 0x7c00u) == 0u), nan,"),
            ("NaN payload lost", nan, "sign | 0x7e00u"),
        ] {
            assert_eq!(NATIVE.matches(from).count(), 1, "{what}");
            assert!(!run(&NATIVE.replace(from, to)), "the probe passed conversions with {what}");
        }
    }

    #[test]
    fn swap_replaces_the_marked_block() {
        let source = format!("a\n{BEGIN}\nfn f16_to_f32() {{}}\n{END}\nb\n");
        let swapped = with_native_f16(&source).unwrap();
        assert!(swapped.starts_with("a\n") && swapped.ends_with("\nb\n"));
        assert!(swapped.contains("unpack2x16float") && !swapped.contains("fn f16_to_f32() {}"));
        assert!(with_native_f16("fn main() {}").is_none());
    }
}
