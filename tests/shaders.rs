//! naga parses and validates every WGSL file in `shaders/` and every kernel variant the crate
//! can dispatch (`Kernel::all()`: per element width, op, dtype and every workgroup size a
//! context accepts), down to SPIR-V. No GPU needed.

use std::collections::HashMap;

use wgpu_ops::gpu::KernelSpec;
use wgpu_ops::kernels::{Kernel, WORKGROUP_SIZES};

use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// naga's capabilities for the wgpu features a kernel needs.
fn capabilities(features: wgpu_ops::gpu::Features) -> Capabilities {
    let mut c = Capabilities::default();
    if features.contains(wgpu_ops::gpu::Features::SHADER_INT64) {
        c |= Capabilities::SHADER_INT64;
    }
    if features.contains(wgpu_ops::gpu::Features::SHADER_F64) {
        c |= Capabilities::FLOAT64;
    }
    if features.contains(wgpu_ops::gpu::Features::SUBGROUP) {
        c |= Capabilities::SUBGROUP;
    }
    c
}

fn validate(name: &str, source: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    // (`pack2x16float` and `unpack2x16float`, of `f16_native.wgsl`, need wgpu's downlevel
    // flag `SHADER_F16_IN_F32`, which every WebGPU adapter has.)
    validate_with(name, source, Capabilities::SHADER_FLOAT16_IN_FLOAT32)
}

fn validate_with(
    name: &str,
    source: &str,
    caps: Capabilities,
) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    (module, info)
}

#[test]
fn every_shader_file_parses_and_validates() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
    let variants = Kernel::all();
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            let mut source = std::fs::read_to_string(&path).unwrap();
            // Kernels that call the word kernel's conversions get its helpers in place.
            if source.contains("// WORD HELPERS") && source.contains("f32_to_f16(") {
                let words =
                    std::fs::read_to_string(format!("{dir}/elementwise_words.wgsl")).unwrap();
                let begin = words.find("// BEGIN WORD HELPERS").unwrap();
                let end = words.find("// END WORD HELPERS").unwrap();
                source = source.replace("// WORD HELPERS", &words[begin..end]);
            }
            // The index-splitting kernels get the division by invariant divisors appended.
            if source.contains("divide(") {
                source += &std::fs::read_to_string(format!("{dir}/divide.inc")).unwrap();
            }
            // The index kernels get the reporting of indices out of range appended.
            if source.contains("report_fault(") {
                source += &std::fs::read_to_string(format!("{dir}/index_faults.inc")).unwrap();
            }
            validate(&path.display().to_string(), &source);
            // Every file is compiled by some kernel (the built-in f16 conversions by the
            // context's probe and into every kernel with the word helpers, when exact).
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                variants.iter().any(|k| k.file() == file) || file == "f16_native.wgsl",
                "{file} is unused"
            );
            files += 1;
        }
    }
    assert_eq!(files, 27);
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
    let mut seen = std::collections::HashSet::new();
    for kernel in Kernel::all() {
        if seen.insert(kernel.module()) {
            let caps = capabilities(kernel.features());
            let (module, _) = validate_with(&kernel.module(), &kernel.wgsl(), caps);
            assert_eq!(non_finite_constants(&module), [] as [f32; 0], "{kernel:?}");
        }
    }
}

/// Validates a variant's module (parsed once per module text in `parsed`) with its override
/// constants, checks its entry point and writes it as SPIR-V.
fn check_kernel(
    kernel: &Kernel,
    parsed: &mut HashMap<String, (naga::Module, naga::valid::ModuleInfo)>,
) {
    let label = format!("{kernel:?}");
    let caps = capabilities(kernel.features());
    let (module, info) = parsed
        .entry(kernel.module().into_owned())
        .or_insert_with(|| {
            let source = kernel.wgsl();
            // The same module with the built-in f16 conversions, as contexts whose adapter
            // converts exactly build it.
            if let Some(native) = wgpu_ops::gpu::f16::with_native_f16(&source) {
                let caps = caps | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
                validate_with(
                    &format!("{label} (built-in f16 conversions)"),
                    &native,
                    caps,
                );
            }
            validate_with(&label, &source, caps)
        });
    let mut map = naga::back::PipelineConstants::default();
    let constants = kernel.overrides();
    for (name, value) in &constants {
        map.insert(name.to_string(), f64::from(*value));
    }
    let (module, _) = naga::back::pipeline_constants::process_overrides(module, info, None, &map)
        .unwrap_or_else(|e| panic!("{label} {constants:?}: {e:?}"));
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{label} {constants:?}: {e:?}"));
    // The entry point exists in the module.
    assert!(
        module
            .entry_points
            .iter()
            .any(|e| e.name == kernel.entry_point()),
        "{label}: no entry point {}",
        kernel.entry_point()
    );
    let options = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: kernel.entry_point().to_string(),
    };
    spv::write_vec(&module, &info, &spv::Options::default(), Some(&options))
        .unwrap_or_else(|e| panic!("{label} {constants:?}: {e:?}"));
    check_bindings(kernel, &module);
}

/// Fused programs of two steps: every word-kernel variant (each op on each dtype combination,
/// native and with i64 emulated) followed by the same op again on its result where that is
/// defined, else by a Cast of it, so every dtype is an intermediate result (narrowed as a
/// store would) and helpers of typed ops appear twice (renamed per step). Validated like the
/// variants above, bindings included.
#[test]
fn fused_programs_validate_and_compile() {
    use wgpu_ops::kernels::program::{Arg, Program};
    use wgpu_ops::kernels::words;
    use wgpu_ops::DType;
    let mut parsed = HashMap::new();
    let mut count = 0;
    let mut repeated = 0;
    let mut dense = 0;
    for (op, operands, arity, out, emulate64) in words::variants() {
        let dtypes = &operands[..usize::from(arity)];
        let mut p = Program::single(op, dtypes, out, emulate64).expect("a listed variant");
        let mut args: Vec<Arg> = (0..arity).map(Arg::Operand).collect();
        args[usize::from(op == "Where")] = Arg::Step(0);
        if p.push(op, args, out).is_some() {
            repeated += 1;
        } else {
            p.push("Cast", vec![Arg::Step(0)], DType::F32)
                .unwrap_or_else(|| panic!("{op} {dtypes:?} -> {out}: no Cast to f32"));
        }
        let program: &'static Program = Box::leak(Box::new(p));
        let kernel = Kernel::Fused {
            program,
            workgroup_size: 64,
            // Both entry points, and each walk rank the index code is compiled for.
            quads: count % 2 == 1,
            dense: None,
            walk_rank: (count % 17) as u8,
        };
        check_kernel(&kernel, &mut parsed);
        count += 1;
        if program.has_dense() {
            // Every operand contiguous, or the first one broadcast, by turns.
            let kernel = Kernel::Fused {
                program,
                workgroup_size: 64,
                quads: true,
                dense: Some((count % 2) as u8),
                walk_rank: 0,
            };
            check_kernel(&kernel, &mut parsed);
            dense += 1;
        }
    }
    assert_eq!(count, 1504 + 221 + 121);
    assert!(repeated > 200, "{repeated}");
    assert!(dense > 500, "{dense} dense variants");
}

/// Programs that mix the 64-bit emulation's parts (i64 arithmetic, f64 arithmetic and f64
/// math) in one module define each part once: a subtraction then exp (a naive Bayes model's
/// step), a cast of the result to i64 and i64 arithmetic on it, and f64 math twice.
#[test]
fn programs_mixing_the_64_bit_emulation_validate() {
    use wgpu_ops::kernels::program::{Arg, Program};
    use wgpu_ops::DType;
    let mut parsed = HashMap::new();
    let f64s = vec![DType::F64, DType::F64];
    let mut p = Program::new(f64s.clone(), true);
    let d = p
        .push("Sub", vec![Arg::Operand(0), Arg::Operand(1)], DType::F64)
        .unwrap();
    let e = p.push("Exp", vec![d], DType::F64).unwrap();
    let l = p.push("Log", vec![e], DType::F64).unwrap();
    let i = p.push("Cast", vec![l], DType::I64).unwrap();
    p.push("Add", vec![i, i], DType::I64).unwrap();
    let mut q = Program::new(f64s, true);
    let x = q
        .push("Mul", vec![Arg::Operand(0), Arg::Operand(1)], DType::F64)
        .unwrap();
    let y = q
        .push(
            "Pow",
            vec![x, Arg::Literal(DType::F64, 2.5f64.to_bits())],
            DType::F64,
        )
        .unwrap();
    q.push("Tanh", vec![y], DType::F64).unwrap();
    // The special functions' library beside the math one it builds on, and alone.
    let mut r = Program::new(vec![DType::F64], true);
    let s = r.push("Sin", vec![Arg::Operand(0)], DType::F64).unwrap();
    let e = r.push("Exp", vec![s], DType::F64).unwrap();
    let t = r.push("Atanh", vec![e], DType::F64).unwrap();
    r.push("Erf", vec![t], DType::F64).unwrap();
    let mut u = Program::new(vec![DType::F64], true);
    u.push("Erf", vec![Arg::Operand(0)], DType::F64).unwrap();
    for program in [p, q, r, u] {
        let program: &'static Program = Box::leak(Box::new(program));
        let kernel = Kernel::Fused {
            program,
            workgroup_size: 64,
            quads: false,
            dense: None,
            walk_rank: 0,
        };
        check_kernel(&kernel, &mut parsed);
    }
}

#[test]
fn every_variant_validates_and_compiles() {
    let variants = Kernel::all();
    let mut parsed: HashMap<String, (naga::Module, naga::valid::ModuleInfo)> = HashMap::new();
    for kernel in &variants {
        check_kernel(kernel, &mut parsed);
    }
    // Per workgroup size: 8 block-remap variants x 4 ranks (any, and compiled for 1, 4 and 8)
    // and 4 more scattering x 4 ranks (4- and 8-byte elements, SpaceToBatch without padding),
    // the 24 of them with vector runs also unrolled 2 and 4 times (48), all 96 with and without
    // every divisor a power of two (192), and 200 gather variants (20 kinds, 12 of them quads: 4 element sizes x unrolled 1, 2,
    // 4; each with the innermost step any, 1, -1, 2 or -2, with and without edge paths), 29 typed element-wise on
    // 32-bit types (Log is the word kernel's only) and 27 on 64-bit ones (11 f64, 9 i64, 7 u64), 36 typed casts (between f32
    // i32 u32 f64 i64 u64), the Scan's iteration copies (1 to 8 per dispatch), 2 copies (words, vec4), 2 Concats (words, vec4), 12 Splits (1 to 6 parts, words and vec4), LinearAttention, CausalConvWithState, GridSample's taps (f32, f64, f64 emulated), TreeWalk (f32, f64, f64 emulated), Det (f32, f64, f64 emulated), PairwiseCoupling, 4 MaxRoiPools (f16, bf16, 4- and 8-byte floats), 12 random (4 modes x f32, f64, f64 emulated), 16 index gathers (4 element sizes x i32/i64
    // indices x Gather/GatherElements), 2 of rows of quads (i32/i64 indices) and 2 value checks (i32/i64 values), 32 pads (4 element sizes x 4 modes x stored by words or quads), 168 scatters (4 replacing, one per element size, each with
    // 5 entry points: in order, by rows of quads, ScatterND's claims and claimed writes by
    // elements and by quads; 4
    // reductions x 12 dtypes; 12 with i64, u64 or f64 emulated; all with and without every divisor a
    // power of two), 432 CumSums and CumProds (6 dtypes and i64/u64/f64 emulated on u32 pairs x
    // exclusive x reverse x sum or product x 6 entry points: a walk per line, the scan in
    // blocks and the scan in chunks, three steps each with one shared), 48 TopKs (those 8 x largest x 3 entry points: a walk per line, and a split line's chunks and merges) and 6 of f64 emulated, 1504 word-kernel variants (1050 casts: each of 25 dtypes to
    // each, in every mode that changes the result: 2 for the four 8-bit floats, 6 for F8E8M0, 2
    // for QuantizeLinear's 8 integer targets; then every op on every dtype combination it is
    // defined for) and 221 with i64/u64 emulated on u32 pairs (for adapters without
    // SHADER_INT64; 18 of them Pow of mixed types) and 121 with f64 emulated (for adapters
    // without SHADER_F64: casts to and from it, arithmetic, Mod, order, rounding, exp, log, tanh,
    // sigmoid, pow (16 of them of f64 and another type), erf, log1p and the 11 trigonometric
    // and hyperbolic functions); then 8 dtypes
    // (f16 and bf16 on packed words) x (tiles + 7 row-workgroup sizes x 2 entry points)
    // MatMuls and 3 emulated (i64, u64, f64) x (tiles + 7 x rows),
    // 154 reductions x 7 passes (14 ops on the 12 numeric dtypes and bool for Max and Min,
    // but LogSum and LogSumExp on the 4 float types only) and 38 emulated (12 ops x i64,
    // u64, 14 x f64) x 7, and twice again for the 5 passes that read an input, compiled for one and for
    // two reduced axes (`REDUCED_RANK`), passes 0 and 4 for each of the three again for 16,
    // 32, 64 and 128 threads per row (`LANES`; 256 is the one above), the Scan counter (2 slots), the random streams' advance and LinearAttention's
    // 8-lane variants (workgroups of 256; sums in workgroup memory or by subgroup shuffles),
    // and 90 one-dispatch row normalizations (Softmax, LogSoftmax, LayerNormalization with and
    // without bias, RMSNormalization x f32, f16, bf16 x 6 lane counts).
    assert_eq!(
        variants.len(),
        WORKGROUP_SIZES.len() * (746 + 432 + 54 + 2 + 1504 + 221 + 121)
            + 8 * 15
            + 3 * 8
            + (154 + 38) * (7 + 2 * 5 + 2 * 3 * 4)
            + 5
            + 90
    );
    // Every workgroup size a context accepts (powers of two up to the largest it allows).
    for size in WORKGROUP_SIZES {
        assert!(variants.iter().any(
            |k| matches!(k, Kernel::Gather { workgroup_size, .. } if *workgroup_size == size)
        ));
    }
    let mut n = 1;
    while n <= wgpu_ops::gpu::MAX_WORKGROUP_SIZE {
        assert!(WORKGROUP_SIZES.contains(&n), "{n}");
        n *= 2;
    }
}

/// Each variant's declared bindings (the pipeline layout the context builds) match the
/// shader's: every `@binding` the module declares is in the layout with its address space and
/// access (a read-only storage buffer in the layout for a read-write one in the shader is a
/// pipeline-creation error that only a GPU would otherwise show).
#[test]
fn declared_bindings_match_the_shaders() {
    let mut seen = std::collections::HashSet::new();
    for kernel in Kernel::all() {
        if !seen.insert(kernel.module().into_owned()) {
            continue;
        }
        let caps = capabilities(kernel.features());
        let (module, _) = validate_with(&kernel.module(), &kernel.wgsl(), caps);
        check_bindings(&kernel, &module);
    }
}

/// Every `@binding` the module declares is in the kernel's layout with its address space and
/// access.
fn check_bindings(kernel: &Kernel, module: &naga::Module) {
    use wgpu_ops::gpu::Binding;
    let layout = kernel.bindings();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        assert_eq!(rb.group, 0, "{kernel:?}");
        let want = match var.space {
            naga::AddressSpace::Uniform => Binding::Uniform,
            naga::AddressSpace::Storage { access }
                if access.contains(naga::StorageAccess::STORE) =>
            {
                Binding::StorageReadWrite
            }
            naga::AddressSpace::Storage { .. } => Binding::StorageRead,
            other => panic!("{kernel:?}: binding in {other:?}"),
        };
        let got = layout.get(rb.binding as usize);
        assert!(
            got == Some(&want),
            "{kernel:?}: binding {} is {want:?} in the shader, {got:?} in the layout",
            rb.binding
        );
    }
}

/// MatMul epilogues: on each dtype the MatMul kernel computes (f16 and bf16 on packed words)
/// and each of its entry points,
/// an epilogue of every binary word op defined on (sum, leaf) of that dtype followed by a
/// unary one where defined, with 0 to 5 leaves (the most that bind), and on i64 and u64
/// emulated on u32 pairs; prologues computing A or B, alone and beside those epilogues that
/// leave room for their inputs; validated like the variants above, bindings included.
#[test]
fn matmul_epilogues_validate_and_compile() {
    use wgpu_ops::kernels::matmul::{MatMulKernel, MAX_EPILOGUE_LEAVES};
    use wgpu_ops::kernels::program::{Arg, Program};
    use wgpu_ops::DType;
    let mut parsed = HashMap::new();
    let mut count = 0;
    let dtypes = [
        DType::F32,
        DType::I32,
        DType::U32,
        DType::F64,
        DType::I64,
        DType::U64,
        DType::F16,
        DType::BF16,
    ];
    let emulated = [(DType::I64, true), (DType::U64, true)];
    let unary = |dtype: DType| {
        if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            "Tanh"
        } else {
            "Abs"
        }
    };
    for (dtype, emulate64) in dtypes.map(|d| (d, false)).into_iter().chain(emulated) {
        let mut programs = Vec::new();
        for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"] {
            let Some(mut p) = Program::single(op, &[dtype, dtype], dtype, emulate64) else {
                continue;
            };
            p.push(unary(dtype), vec![Arg::Step(0)], dtype);
            programs.push(p);
        }
        // The widest: a chain over MAX_EPILOGUE_LEAVES leaves, and no leaf at all.
        let mut wide = Program::new(vec![dtype], emulate64);
        let mut acc = Arg::Operand(0);
        for _ in 0..MAX_EPILOGUE_LEAVES {
            let leaf = wide.add_operand(dtype);
            acc = wide.push("Add", vec![acc, leaf], dtype).unwrap();
        }
        programs.push(wide);
        let mut none = Program::new(vec![dtype], emulate64);
        none.push("Sign", vec![Arg::Operand(0)], dtype).unwrap();
        programs.push(none);
        // Prologues (not on emulated pairs): a two-input chain with a unary step, computing A
        // or B, alone or beside an epilogue that calls the same helpers.
        let prologue = (!emulate64).then(|| {
            let mut p = Program::single("Mul", &[dtype, dtype], dtype, false).unwrap();
            p.push(unary(dtype), vec![Arg::Step(0)], dtype).unwrap();
            &*Box::leak(Box::new(p))
        });
        for p in programs {
            let program: &'static Program = Box::leak(Box::new(p));
            let leaves = program.operands().len() - 1;
            let mut pairs = vec![(Some(program), None)];
            if let Some(pro) = prologue {
                for j in [0u8, 1] {
                    pairs.push((None, Some((pro, j))));
                    if leaves + 2 <= MAX_EPILOGUE_LEAVES {
                        pairs.push((Some(program), Some((pro, j))));
                    }
                }
            }
            for (variant, group) in [
                (MatMulKernel::Tiles, 0),
                (MatMulKernel::Rows, 64),
                (MatMulKernel::Blocks, 64),
            ] {
                if emulate64 && variant == MatMulKernel::Blocks {
                    continue;
                }
                for &(epilogue, prologue) in &pairs {
                    let kernel = Kernel::MatMul {
                        variant,
                        dtype,
                        group,
                        epilogue,
                        prologue,
                        emulate64,
                        // Each rank the index code is compiled for, by turns.
                        epilogue_rank: (count % 17) as u8,
                        prologue_rank: ((count / 17) % 17) as u8,
                    };
                    check_kernel(&kernel, &mut parsed);
                    count += 1;
                }
            }
        }
    }
    assert!(count > 400, "{count}");
}

/// Reduction prologues: every reduction variant that reads its input (passes 0, 1 and 3; not
/// on emulated pairs, which record the chain first) with a prologue of one input as it is and
/// one of five inputs (a `Max` chain, with a `Tanh` step on f32 for the math helpers), where
/// the input's type has those ops; validated like the variants above, bindings included.
#[test]
fn reduction_prologues_validate_and_compile() {
    use wgpu_ops::kernels::program::{Arg, Program};
    use wgpu_ops::kernels::reduce::MAX_PROLOGUE_LEAVES;
    use wgpu_ops::DType;
    let mut parsed = HashMap::new();
    let mut count = 0;
    for kernel in Kernel::all() {
        let Kernel::Reduce {
            op,
            input,
            pass,
            emulate64: false,
            prologue: None,
            reduced_rank,
            lanes,
            ..
        } = kernel
        else {
            continue;
        };
        // Passes 2, 4, 5 and 6 read states or chunks of tensors beyond a binding, never a prologue.
        if !matches!(pass, 0 | 1 | 3) {
            continue;
        }
        let mut programs = vec![Program::new(vec![input], false)];
        if let Some(mut wide) = Program::single("Max", &[input, input], input, false) {
            let mut acc = Arg::Step(0);
            for _ in 2..MAX_PROLOGUE_LEAVES {
                let leaf = wide.add_operand(input);
                acc = wide.push("Max", vec![acc, leaf], input).unwrap();
            }
            if input == DType::F32 {
                wide.push("Tanh", vec![acc], input).unwrap();
            }
            programs.push(wide);
        }
        for p in programs {
            let kernel = Kernel::Reduce {
                op,
                input,
                pass,
                emulate64: false,
                prologue: Some(Box::leak(Box::new(p))),
                reduced_rank,
                // Each rank the prologue's index code is compiled for, by turns.
                prologue_rank: (count % 17) as u8,
                lanes,
            };
            check_kernel(&kernel, &mut parsed);
            count += 1;
        }
    }
    assert!(count > 600, "{count}");
}
