//! Division by a divisor fixed for a whole dispatch (`shaders/divide.inc`): the host turns
//! each divisor of a kernel's index arithmetic into a shift, or into a multiplier and a shift
//! (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994,
//! figure 4.1), so the kernel divides with a multiply-high and shifts. On lavapipe the
//! division that a power-of-two shape never takes still cost over a quarter of BatchToSpace's
//! time, as each lane divides on its own there (`bench/divisors_lavapipe.txt`).

/// How a kernel divides by `d`: `shift < 32` for a power of two (`x >> shift`), else
/// `32 + ceil(log2 d)` with `magic`. Kernels' parameters embed it as these two words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Divisor {
    pub shift: u32,
    pub magic: u32,
}

impl Divisor {
    /// The description of `d`; 0 (an empty axis, where nothing is divided) is taken as 1.
    pub fn new(d: u32) -> Divisor {
        if d.is_power_of_two() || d == 0 {
            return Divisor {
                shift: d.max(1).trailing_zeros(),
                magic: 0,
            };
        }
        // l = ceil(log2 d), 2..=32; 2^(l-1) < d < 2^l, so the multiplier is below 2^32.
        let l = 32 - (d - 1).leading_zeros();
        let magic = ((1u64 << 32) * ((1u64 << l) - u64::from(d))) / u64::from(d) + 1;
        Divisor {
            shift: 32 + l,
            magic: magic as u32,
        }
    }

    /// `x / d` by the kernel's arithmetic.
    #[cfg(test)]
    pub fn divide(self, x: u32) -> u32 {
        if self.shift < 32 {
            return x >> self.shift;
        }
        let t = ((u64::from(x) * u64::from(self.magic)) >> 32) as u32;
        (t + ((x - t) >> 1)) >> (self.shift - 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Divisors of every kind: small ones, powers of two and their neighbours, the largest.
    fn divisors() -> Vec<u32> {
        let mut all: Vec<u32> = (1..=1000).collect();
        for k in 1..32 {
            let p = 1u32 << k;
            all.extend([p - 1, p, p + 1]);
        }
        all.extend([
            641,
            6_700_417,
            0x7FFF_FFFF,
            0x8000_0001,
            0xFFFF_FFFE,
            u32::MAX,
        ]);
        all
    }

    /// Dividends around every multiple-boundary that matters: 0, d - 1, d, d + 1, the
    /// multiples of d near 2^32, and a spread of others.
    fn dividends(d: u32, seed: &mut u64) -> Vec<u32> {
        let mut xs = vec![0, 1, d - 1, d, d.saturating_add(1), u32::MAX, u32::MAX - 1];
        let top = u32::MAX / d * d;
        xs.extend([top, top.wrapping_sub(1), top.wrapping_sub(d)]);
        for _ in 0..200 {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = (*seed >> 32) as u32;
            xs.extend([x, x / d * d, (x / d * d).wrapping_sub(1)]);
        }
        xs
    }

    #[test]
    fn divides_exactly() {
        let mut seed = 1;
        for d in divisors() {
            let div = Divisor::new(d);
            for x in dividends(d, &mut seed) {
                assert_eq!(div.divide(x), x / d, "{x} / {d} with {div:?}");
            }
        }
    }

    #[test]
    fn every_dividend_below_2_pow_20() {
        for d in [3, 7, 10, 360, 724, 1000, 65_537] {
            let div = Divisor::new(d);
            for x in 0..1u32 << 20 {
                assert_eq!(div.divide(x), x / d, "{x} / {d}");
            }
        }
    }

    /// The WGSL of `divide.inc` on the adapter, against `/`, for every divisor and dividend of
    /// the tests above.
    #[cfg(feature = "native")]
    #[test]
    fn shader_divides_exactly() {
        use wgpu::util::DeviceExt;
        let mut seed = 7;
        let mut cases: Vec<[u32; 4]> = Vec::new();
        for d in divisors() {
            let div = Divisor::new(d);
            for x in dividends(d, &mut seed) {
                cases.push([x, div.shift, div.magic, x / d]);
            }
        }
        let ctx = crate::gpu::test_context();
        let device = ctx.device();
        let code = format!(
            "{}\n{}",
            include_str!("../../shaders/divide.inc"),
            r"
@group(0) @binding(0) var<storage, read> cases: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> wrong: array<atomic<u32>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x + id.y * 64u * 65535u;
    if i >= arrayLength(&cases) {
        return;
    }
    let c = cases[i];
    if divide(c.x, c.y, c.z) != c.w {
        atomicAdd(&wrong[0], 1u);
        atomicMax(&wrong[1], i + 1u);
    }
}"
        );
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("divide test"),
            source: wgpu::ShaderSource::Wgsl(code.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let input = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&cases),
            usage: wgpu::BufferUsages::STORAGE,
        });
        let wrong = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&[0u32; 2]),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 8,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: input.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wrong.as_entire_binding(),
                },
            ],
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            let groups = (cases.len() as u32).div_ceil(64);
            pass.dispatch_workgroups(groups.min(65535), groups.div_ceil(65535), 1);
        }
        encoder.copy_buffer_to_buffer(&wrong, 0, &read, 0, 8);
        ctx.queue().submit([encoder.finish()]);
        read.slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.unwrap());
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let result: Vec<u32> =
            bytemuck::cast_slice(&read.slice(..).get_mapped_range().unwrap()).to_vec();
        assert!(cases.len() > 100_000);
        assert_eq!(
            result[0],
            0,
            "{} of {} quotients wrong, the last at case {:?}",
            result[0],
            cases.len(),
            cases.get(result[1].wrapping_sub(1) as usize)
        );
    }

    #[test]
    fn powers_of_two_shift() {
        assert_eq!(Divisor::new(1), Divisor { shift: 0, magic: 0 });
        assert_eq!(Divisor::new(0), Divisor { shift: 0, magic: 0 });
        assert_eq!(Divisor::new(1 << 31).shift, 31);
        assert!(Divisor::new(3).shift >= 32);
    }
}
