//! naga parses and validates every WGSL file in `shaders/`, and every specialization the crate
//! compiles, down to SPIR-V. No GPU needed.

use std::collections::BTreeSet;

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
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            let source = std::fs::read_to_string(&path).unwrap();
            validate(&path.display().to_string(), &source);
            files.insert(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    // Every file is used by a kernel, and every kernel's source is a file here.
    let used: BTreeSet<String> = wgpu_ops::kernels::shader_variants()
        .iter()
        .map(|(f, _, _)| f.to_string())
        .collect();
    assert_eq!(files, used);
}

#[test]
fn every_specialization_validates_and_compiles() {
    let mut variants = 0;
    for (file, source, specializations) in wgpu_ops::kernels::shader_variants() {
        let on_disk =
            std::fs::read_to_string(format!("{}/shaders/{file}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        assert_eq!(on_disk, source, "{file}: the crate embeds a different text");
        let (module, info) = validate(file, source);
        for constants in specializations {
            let mut map = naga::back::PipelineConstants::default();
            for (name, value) in &constants {
                map.insert(name.to_string(), f64::from(*value));
            }
            let (module, _) =
                naga::back::pipeline_constants::process_overrides(&module, &info, None, &map)
                    .unwrap_or_else(|e| panic!("{file} {constants:?}: {e:?}"));
            let info = Validator::new(ValidationFlags::all(), Capabilities::default())
                .validate(&module)
                .unwrap_or_else(|e| panic!("{file} {constants:?}: {e:?}"));
            spv::write_vec(&module, &info, &spv::Options::default(), None)
                .unwrap_or_else(|e| panic!("{file} {constants:?}: {e:?}"));
            variants += 1;
        }
    }
    assert!(variants >= 4);
}
