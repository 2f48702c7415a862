//! Runs each op on the default adapter, checks every result against the CPU reference bit for
//! bit, and prints what it ran on. Exits non-zero if any check fails.

use std::time::Instant;

use wgpu_ops::{
    reference, BatchToSpace, Context, ContextOptions, DType, HostTensor, Slice, SpaceToBatch,
    StridedSlice, Tensor,
};

fn pseudo_random(dtype: DType, shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product::<usize>() * dtype.size();
    let mut s = seed;
    let data = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let b = (s >> 56) as u8;
            // Bool is 0 or 1; types narrower than a byte keep their low bits, the rest zero.
            match (dtype, dtype.packed_bits()) {
                (DType::Bool, _) => b & 1,
                (_, Some(bits)) => b & ((1u8 << bits) - 1),
                _ => b,
            }
        })
        .collect();
    HostTensor::from_bytes(dtype, shape.to_vec(), data).unwrap()
}

enum Case {
    Strided(&'static str, StridedSlice),
    Slice(&'static str, Slice),
    B2S(&'static str, BatchToSpace),
    S2B(&'static str, SpaceToBatch),
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let ctx = Context::new_blocking(ContextOptions::default())?;
    let info = ctx.adapter_info();
    println!(
        "adapter: {} ({:?}, {:?}, {})\n",
        info.name, info.backend, info.device_type, info.driver_info
    );

    let cases = [
        Case::Strided(
            "x[1:, :, ::-1]",
            StridedSlice::new([1, 0, 0], [0, 0, 0])
                .stride([1, 1, -1])
                .begin_mask([0, 1, 1])
                .end_mask([1, 1, 1]),
        ),
        Case::Strided(
            "x[np.newaxis, 0, ..., ::2]",
            StridedSlice::new([0, 0, 0, 0], [0, 0, 0, 0])
                .stride([1, 1, 1, 2])
                .new_axis_mask([1])
                .shrink_axis_mask([0, 1])
                .ellipsis_mask([0, 0, 1])
                .begin_mask([0, 0, 0, 1])
                .end_mask([0, 0, 0, 1]),
        ),
        Case::Slice(
            "Slice axes=[-1, 0] start=[-2, 5] stop=[INT64_MIN, 1] step=[-3, -2]",
            Slice::new([-2, 5], [i64::MIN, 1], [-3, -2]).axes([-1, 0]),
        ),
        Case::Slice(
            "Slice start=[1] stop=[INT32_MAX] step=[1] (int32 indices)",
            Slice::new([1i32], [i32::MAX], [1i32]),
        ),
        Case::B2S(
            "BatchToSpace block=[1,2,2] crops_begin=[0,1,0] crops_end=[0,1,2]",
            BatchToSpace::new([1, 2, 2], [0, 1, 0], [0, 1, 2]),
        ),
        Case::S2B(
            "SpaceToBatch block=[1,4,2] pads_begin=[0,1,0] pads_end=[0,3,1]",
            SpaceToBatch::new([1, 4, 2], [0, 1, 0], [0, 3, 1]),
        ),
    ];
    let shape = [64, 48, 33];
    println!(
        "{:<66} {:<5} {:>14} {:>9}  check",
        "op", "dtype", "output shape", "time"
    );
    let mut failures = 0;
    for (k, dtype) in DType::ALL.into_iter().enumerate() {
        let host = pseudo_random(dtype, &shape, k as u64 + 1);
        let x = Tensor::from_host(&ctx, &host)?;
        for case in &cases {
            let start = Instant::now();
            let (name, y, want) = match case {
                Case::Strided(name, op) => {
                    (name, op.run(&x)?, reference::strided_slice(&host, op)?)
                }
                Case::Slice(name, op) => (name, op.run(&x)?, reference::slice(&host, op)?),
                Case::B2S(name, op) => (name, op.run(&x)?, reference::batch_to_space(&host, op)?),
                Case::S2B(name, op) => (name, op.run(&x)?, reference::space_to_batch(&host, op)?),
            };
            let got = y.to_host_blocking()?;
            let elapsed = start.elapsed();
            let ok = got == want;
            failures += usize::from(!ok);
            println!(
                "{:<66} {:<5} {:>14} {:>7.2}ms  {}",
                name,
                dtype.name(),
                format!("{:?}", y.shape()),
                elapsed.as_secs_f64() * 1e3,
                if ok { "bit-exact" } else { "MISMATCH" }
            );
        }
    }
    println!("\n(time: recording, kernel and download of the result; input shape {shape:?})");
    if failures > 0 {
        return Err(format!("{failures} result(s) differ from the CPU reference").into());
    }
    println!("all results match the CPU reference bit for bit");
    Ok(())
}
