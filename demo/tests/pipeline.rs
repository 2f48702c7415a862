//! The demo's pipeline on the native adapter: every check passes on the default and on edited
//! parameters, and bad parameters give failed checks with the reason instead of a panic.

use wgpu_ops::{Context, ContextOptions, DType};
use wgpu_ops_demo::{pipeline, Image, Settings};

fn context() -> Context {
    context_with(ContextOptions::default())
}

fn context_with(options: ContextOptions) -> Context {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    Context::new_blocking(options).expect("a wgpu adapter (see README)")
}

fn picture(width: usize, height: usize) -> Image {
    let rgba = (0..width * height * 4)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    Image {
        width,
        height,
        rgba,
    }
}

fn run(image: &Image, settings: &Settings) -> Vec<pipeline::Outcome> {
    run_in(&context(), image, settings)
}

fn run_in(ctx: &Context, image: &Image, settings: &Settings) -> Vec<pipeline::Outcome> {
    let t0 = std::time::Instant::now();
    let clock = move || t0.elapsed().as_secs_f64() * 1e3;
    pollster::block_on(pipeline::run(ctx, image, settings, &clock))
}

#[test]
fn default_parameters_pass_every_check() {
    let out = run(&picture(61, 53), &Settings::default());
    let ops: Vec<&str> = out.iter().map(|o| o.op).collect();
    assert_eq!(
        ops,
        [
            "StridedSlice",
            "Slice",
            "SpaceToBatch",
            "BatchToSpace",
            "Scan",
            "Scan f16",
            "Scan i64",
            "Scan f64"
        ]
    );
    for o in &out {
        assert!(o.check.is_ok(), "{}: {:?}", o.op, o.check);
        assert!(o.picture.is_some(), "{} has no picture", o.op);
    }
    // x[24:-24, ::-1] of 53 rows keeps 5; 61 x 53 pads to 62 x 54 for 2x2 blocks.
    assert_eq!(out[0].shape, [5, 61, 4]);
    assert_eq!(out[2].shape, [4, 27, 31, 4]);
    assert_eq!(out[3].shape, [1, 53, 61, 4]);
    assert_eq!(out[4].shape, [53, 61, 3]);
    assert_eq!(
        (out[5].dtype, &out[5].shape[..]),
        (DType::F16, &[53, 61, 3][..])
    );
}

/// As a browser runs it: without 64-bit shader types, the i64 and f64 Scans compute on u32
/// pairs and still match the reference bit for bit.
#[test]
fn every_check_passes_without_64_bit_shader_types() {
    let ctx = context_with(ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    });
    assert!(!ctx
        .features()
        .intersects(wgpu_ops::gpu::Features::SHADER_F64 | wgpu_ops::gpu::Features::SHADER_INT64));
    let out = run_in(&ctx, &picture(29, 17), &Settings::default());
    assert_eq!(out.len(), 8);
    for o in &out {
        assert!(o.check.is_ok(), "{}: {:?}", o.op, o.check);
    }
    assert_eq!(
        (out[7].dtype, &out[7].shape[..]),
        (DType::F64, &[17, 29, 3][..])
    );
}

#[test]
fn edited_parameters_pass_every_check() {
    let settings = Settings {
        strided_slice: "[::2, ..., None, ::-1, 0]".into(),
        slice_axes: "-3, -2".into(),
        slice_step: "-1, 2".into(),
        slice_start: "-1, 1".into(),
        slice_stop: "-9223372036854775808, 2147483647".into(),
        block: 3,
    };
    let out = run(&picture(40, 25), &settings);
    for o in &out {
        assert!(o.check.is_ok(), "{}: {:?}", o.op, o.check);
    }
    assert_eq!(out[0].shape, [13, 1, 40]);
    assert_eq!(out[1].shape, [25, 20, 4]);
    assert!(out[2].params.contains("pads_end=[0, 2, 2, 0]"));
}

#[test]
fn bad_parameters_are_reported_not_panicked() {
    let settings = Settings {
        strided_slice: "[1:2:3:4]".into(),
        slice_step: "0, 1".into(),
        block: 0,
        ..Settings::default()
    };
    let out = run(&picture(8, 8), &settings);
    let why = |i: usize| out[i].check.clone().unwrap_err();
    assert!(why(0).contains("more than two ':'"), "{}", why(0));
    assert!(why(1).contains("Slice"), "{}", why(1));
    assert!(why(2).contains("SpaceToBatch"), "{}", why(2));
    // The Scan does not depend on the parameters.
    assert!(out.last().unwrap().check.is_ok());
}
