//! Kernel families: one WGSL file under `shaders/` plus its host-side dispatcher each.

pub mod block_remap;
pub mod compute;
pub mod elementwise;
pub mod gather;
pub mod windows;

/// The most axes a kernel's parameters describe (the uniforms hold 16): the largest rank the
/// data-movement ops accept.
pub const MAX_RANK: usize = 16;

/// The grid for `invocations` threads of `op`, or an error naming the limit.
pub(crate) fn grid_for(
    ctx: &crate::Context,
    op: &'static str,
    invocations: u64,
    workgroup_size: u32,
) -> crate::Result<[u32; 3]> {
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    dispatch_grid(invocations, workgroup_size, max_dim).ok_or_else(|| crate::Error::LimitExceeded {
        op,
        what: format!("{invocations} invocations"),
        limit: "max_compute_workgroups_per_dimension (cubed)",
        needed: invocations.div_ceil(u64::from(workgroup_size)),
        max: u64::from(max_dim).pow(3),
    })
}

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

/// A kernel variant's label, its WGSL text, and the override values it is compiled with.
pub type ShaderVariant = (String, String, Vec<(&'static str, u32)>);

/// Every kernel variant the crate can compile, so tests validate each with naga, without a GPU.
pub fn shader_variants() -> Vec<ShaderVariant> {
    let mut out = Vec::new();
    // The two workgroup sizes `default_workgroup_size` picks.
    for (w, wg) in [1u32, 2, 4, 8]
        .into_iter()
        .flat_map(|w| [(w, 64), (w, 256)])
    {
        let c = vec![("ELEM_BYTES", w), ("WORKGROUP_SIZE", wg)];
        out.push((
            "block_remap.wgsl".into(),
            block_remap::KERNEL.wgsl.into(),
            c.clone(),
        ));
        for strided in [0, 1].into_iter().filter(|&s| s == 0 || w >= 4) {
            let mut c = c.clone();
            c.push(("ITEMS", gather::ITEMS));
            c.push(("DST_STRIDED", strided));
            out.push(("strided_gather.wgsl".into(), gather::KERNEL.wgsl.into(), c));
        }
    }
    let types = [crate::DType::F32, crate::DType::I32, crate::DType::U32];
    for op in &elementwise::OPS {
        for d in types {
            if let Some(e) = op.wgsl(d) {
                let ty = compute::wgsl_type(d).unwrap();
                let label = format!("elementwise.wgsl {} {ty}", op.name);
                out.push((
                    label,
                    compute::elementwise_source(ty, ty, e),
                    vec![("WORKGROUP_SIZE", 64)],
                ));
            }
        }
    }
    for from in types {
        for to in types {
            let (f, t) = (
                compute::wgsl_type(from).unwrap(),
                compute::wgsl_type(to).unwrap(),
            );
            out.push((
                format!("elementwise.wgsl Cast {f}->{t}"),
                compute::elementwise_source(f, t, elementwise::cast_expression(from, to)),
                vec![("WORKGROUP_SIZE", 64)],
            ));
        }
        let ty = compute::wgsl_type(from).unwrap();
        out.push((
            format!("matmul.wgsl {ty}"),
            compute::matmul_source(ty),
            vec![],
        ));
    }
    out
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
