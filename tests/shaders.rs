//! naga parses and validates every WGSL file in `shaders/` and every variant the crate compiles
//! (per element width, op and dtype), down to SPIR-V. No GPU needed.

use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn validate(name: &str, source: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let info = Validator::new(ValidationFlags::all(), Capabilities::default())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    (module, info)
}

#[test]
fn every_shader_file_parses_and_validates() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
    let variants = wgpu_ops::kernels::shader_variants();
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            let source = std::fs::read_to_string(&path).unwrap();
            validate(&path.display().to_string(), &source);
            // Every file is compiled by some kernel.
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                variants
                    .iter()
                    .any(|(label, _, _)| label.starts_with(&file)),
                "{file} is unused"
            );
            files += 1;
        }
    }
    assert_eq!(files, 4);
}

/// Bitcasts of constants to non-finite f32 values. WGSL makes a constant expression that
/// evaluates to infinity or NaN a shader-creation error; naga accepts it (it does not fold
/// bitcasts), but Chromium's compiler (Tint) rejects the module, so naga's validation alone
/// misses it.
fn non_finite_constants(module: &naga::Module) -> Vec<f32> {
    let functions = module
        .functions
        .iter()
        .map(|(_, f)| f)
        .chain(module.entry_points.iter().map(|e| &e.function));
    let mut found = Vec::new();
    for f in functions {
        for (_, e) in f.expressions.iter() {
            let naga::Expression::As {
                expr,
                kind: naga::ScalarKind::Float,
                convert: None,
            } = e
            else {
                continue;
            };
            let bits = match f.expressions[*expr] {
                naga::Expression::Literal(naga::Literal::U32(b)) => b,
                naga::Expression::Literal(naga::Literal::I32(b)) => b as u32,
                _ => continue,
            };
            let v = f32::from_bits(bits);
            if !v.is_finite() {
                found.push(v);
            }
        }
    }
    found
}

#[test]
fn no_shader_has_a_non_finite_constant() {
    // The check itself: this is what Tint rejected in the element-wise shader.
    let (bad, _) = validate("bad", "fn f() -> f32 { return bitcast<f32>(0x7fc00000u); }");
    assert_eq!(non_finite_constants(&bad).len(), 1);
    for (label, source, _) in &wgpu_ops::kernels::shader_variants() {
        let (module, _) = validate(label, source);
        assert_eq!(non_finite_constants(&module), [] as [f32; 0], "{label}");
    }
}

#[test]
fn every_variant_validates_and_compiles() {
    let variants = wgpu_ops::kernels::shader_variants();
    for (label, source, constants) in &variants {
        let (module, info) = validate(label, source);
        let mut map = naga::back::PipelineConstants::default();
        for (name, value) in constants {
            map.insert(name.to_string(), f64::from(*value));
        }
        let (module, _) =
            naga::back::pipeline_constants::process_overrides(&module, &info, None, &map)
                .unwrap_or_else(|e| panic!("{label} {constants:?}: {e:?}"));
        let info = Validator::new(ValidationFlags::all(), Capabilities::default())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{label} {constants:?}: {e:?}"));
        spv::write_vec(&module, &info, &spv::Options::default(), None)
            .unwrap_or_else(|e| panic!("{label} {constants:?}: {e:?}"));
    }
    // (4 + 6 data-movement variants) x 2 workgroup sizes, 32 element-wise, 9 casts, 3 matmuls.
    assert_eq!(
        variants.len(),
        64,
        "{:?}",
        variants.iter().map(|v| &v.0).collect::<Vec<_>>()
    );
}
