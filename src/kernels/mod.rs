//! Kernel families: one WGSL file under `shaders/` plus its host-side dispatcher each.

pub mod block_remap;
pub mod gather;

/// Workgroups for `invocations` threads of `workgroup_size`, folded into y and z when x would
/// exceed `max_per_dim` (65 535 on most devices). Kernels flatten the workgroup id back.
pub fn dispatch_grid(invocations: u64, workgroup_size: u32, max_per_dim: u32) -> Option<[u32; 3]> {
    let groups = invocations.div_ceil(u64::from(workgroup_size));
    if groups == 0 {
        return Some([0, 0, 0]);
    }
    let max = u64::from(max_per_dim);
    let x = groups.min(max);
    let rest = groups.div_ceil(x);
    let y = rest.min(max);
    let z = rest.div_ceil(y);
    (z <= max).then_some([x as u32, y as u32, z as u32])
}

/// A shader file name, its text, and the override values of each compiled variant.
pub type ShaderVariants = (&'static str, &'static str, Vec<Vec<(&'static str, u32)>>);

/// Every shader file with the specializations (WGSL `override` values) the crate compiles it
/// with, so tests can validate each variant with naga, without a GPU.
pub fn shader_variants() -> Vec<ShaderVariants> {
    // Both kernel families are specialized by element width only.
    let by_width: Vec<Vec<(&'static str, u32)>> = [1u32, 2, 4, 8]
        .into_iter()
        .map(|w| {
            vec![
                ("ELEM_BYTES", w),
                ("WORKGROUP_SIZE", gather::WORKGROUP_SIZE),
            ]
        })
        .collect();
    vec![
        ("strided_gather.wgsl", gather::KERNEL.wgsl, by_width.clone()),
        ("block_remap.wgsl", block_remap::KERNEL.wgsl, by_width),
    ]
}

#[cfg(test)]
mod tests {
    use super::dispatch_grid;

    #[test]
    fn grid_covers_and_folds() {
        assert_eq!(dispatch_grid(0, 64, 65535), Some([0, 0, 0]));
        assert_eq!(dispatch_grid(1, 64, 65535), Some([1, 1, 1]));
        assert_eq!(dispatch_grid(65535 * 64, 64, 65535), Some([65535, 1, 1]));
        assert_eq!(
            dispatch_grid(65535 * 64 + 1, 64, 65535),
            Some([65535, 2, 1])
        );
        assert_eq!(dispatch_grid(1000, 1, 10), Some([10, 10, 10]));
        assert_eq!(dispatch_grid(1001, 1, 10), None);
        assert_eq!(dispatch_grid(376, 3, 5), None);
        for n in [1u64, 7, 99, 300, 375] {
            let [x, y, z] = dispatch_grid(n, 3, 5).unwrap();
            let total = u64::from(x) * u64::from(y) * u64::from(z) * 3;
            assert!(total >= n && x <= 5 && y <= 5 && z <= 5, "{n}: {x} {y} {z}");
        }
    }
}
