//! Random numbers (`shaders/random.wgsl`): Philox4x32-10 blocks turned into uniform, normal,
//! Bernoulli or Multinomial values, one invocation per block, then `random_advance.wgsl`
//! moves the stream to its next draw. The same arithmetic on the CPU is
//! [`crate::reference::random`].

use super::{grid_for, Kernel};
use crate::{DType, Error, Recorder, Result, Tensor};

/// What the kernel makes of its blocks (the `MODE` override).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RandomMode {
    /// Uniform in `[a, b)`.
    Uniform,
    /// Normal with mean `a` and scale `b` (Box-Muller).
    Normal,
    /// 1 where the uniform value is below the probability read at the element, else 0.
    Bernoulli,
    /// The class of each sample, from the running sums of its row's probabilities.
    Multinomial,
}

impl RandomMode {
    pub(crate) const ALL: [RandomMode; 4] = [
        RandomMode::Uniform,
        RandomMode::Normal,
        RandomMode::Bernoulli,
        RandomMode::Multinomial,
    ];
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

/// f64: two values per block (53 bits each from two words); normals from one Box-Muller pair
/// through the crate's f64 log, cos and sin. Each replaces its marked line of the template.
const PER_BLOCK_F64: &str = "const PER_BLOCK: u32 = 2u;";
const UNITS_F64: &str = r"fn unit53(hi: u32, lo: u32) -> f64 {
    return (f64(hi >> 11u) * 4294967296.0 + f64(lo)) * 1.1102230246251565e-16;
}
fn units(w: vec4<u32>) -> array<T, 4> {
    return array<T, 4>(unit53(w.x, w.y), unit53(w.z, w.w), 0.0, 0.0);
}";
const NORMALS_F64: &str = r"fn normals(w: vec4<u32>) -> array<T, 4> {
    let u = (f64(w.x >> 11u) * 4294967296.0 + f64(w.y) + 1.0) * 1.1102230246251565e-16;
    let radius = sqrt(-2.0 * log64(u));
    let angle = unit53(w.z, w.w) * 6.283185307179586;
    return array<T, 4>(radius * cos64(angle), radius * sin64(angle), 0.0, 0.0);
}";

/// The same on the f64 emulation (u32 pairs, low word first): the integers of 53 bits are
/// exact there too, scaled by 2^-53 exactly; 2 pi and -2 as their bits.
const UNITS_F64_EMULATED: &str = r"fn unit53(hi: u32, lo: u32) -> T {
    return sf64_mul(sf64_from_u64(vec2<u32>(lo, hi >> 11u)), vec2<u32>(0u, 0x3ca00000u));
}
fn units(w: vec4<u32>) -> array<T, 4> {
    return array<T, 4>(unit53(w.x, w.y), unit53(w.z, w.w), vec2<u32>(0u), vec2<u32>(0u));
}";
const NORMALS_F64_EMULATED: &str = r"fn normals(w: vec4<u32>) -> array<T, 4> {
    let whole = sf64_add(sf64_from_u64(vec2<u32>(w.y, w.x >> 11u)), vec2<u32>(0u, 0x3ff00000u));
    let u = sf64_mul(whole, vec2<u32>(0u, 0x3ca00000u));
    let radius = sf64_sqrt(sf64_mul(vec2<u32>(0u, 0xc0000000u), sf64_log(u)));
    let angle = sf64_mul(unit53(w.z, w.w), vec2<u32>(0x54442d18u, 0x401921fbu));
    return array<T, 4>(sf64_mul(radius, sf64_cos(angle)), sf64_mul(radius, sf64_sin(angle)), vec2<u32>(0u), vec2<u32>(0u));
}";

/// The WGSL of the generator on f32 or f64 (`emulate64`: f64 on u32 pairs).
pub(crate) fn random_source(template: &str, f64: bool, emulate64: bool) -> String {
    if !f64 {
        return template.to_string();
    }
    if !emulate64 {
        return super::operands::specialize(
            template,
            &[
                ("// ELEMENT TYPE", "alias T = f64;".to_string()),
                ("// F64 MATH", super::words::F64_MATH.to_string()),
                ("// PER BLOCK", PER_BLOCK_F64.to_string()),
                ("// UNITS", UNITS_F64.to_string()),
                ("// NORMALS", NORMALS_F64.to_string()),
            ],
        );
    }
    let line = |marker: &'static str, text: &str| (marker, text.to_string());
    let emulated = [
        line(
            "// F64 MATH",
            &format!(
                "{}\n{}",
                super::words::F64_EMULATION_MATH,
                super::words::F64_EMULATION_SPECIAL
            ),
        ),
        line("// PER BLOCK", PER_BLOCK_F64),
        line("// UNITS", UNITS_F64_EMULATED),
        line("// NORMALS", NORMALS_F64_EMULATED),
        line(
            "// OF F32",
            "fn t_of(x: f32) -> T { return sf64_from_f32(x); }",
        ),
        line(
            "// OF U32",
            "fn t_of_u32(x: u32) -> T { return sf64_from_u64(vec2<u32>(x, 0u)); }",
        ),
        line(
            "// ADD",
            "fn t_add(x: T, y: T) -> T { return sf64_add(x, y); }",
        ),
        line(
            "// SUB",
            "fn t_sub(x: T, y: T) -> T { return sf64_sub(x, y); }",
        ),
        line(
            "// MUL",
            "fn t_mul(x: T, y: T) -> T { return sf64_mul(x, y); }",
        ),
        line(
            "// LESS",
            "fn t_less(x: T, y: T) -> bool { return sf64_lt(x, y); }",
        ),
    ];
    super::operands::element_typed(template, DType::F64, Some(&emulated))
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    a: f32,
    b: f32,
    count: u32,
    key_lo: u32,
    key_hi: u32,
    classes: u32,
    samples: u32,
    /// This pass's blocks `[block_first, block_end)`, and the elements at which `dst`'s and
    /// `src`'s windows start (an output beyond one binding is drawn in windows of it).
    block_first: u32,
    block_end: u32,
    dst_first: u32,
    src_first: u32,
    /// Multinomial's rows `[row_first, row_end)` drawn in this pass, the first of them at
    /// element `src_first` of `src`'s window (running sums beyond one binding are read in
    /// windows of whole rows).
    row_first: u32,
    row_end: u32,
    pad: u32,
}

/// One draw's request to the kernel.
pub(crate) struct Draw<'a> {
    pub mode: RandomMode,
    /// Low and high, or mean and scale.
    pub a: f32,
    pub b: f32,
    /// Bernoulli's probabilities (one per output element) or Multinomial's running sums
    /// (`[rows, classes]`), in the output's dtype.
    pub src: Option<&'a Tensor>,
    pub classes: usize,
    pub samples: usize,
}

impl Recorder {
    /// Records one draw of the stream (`key`, draw index in `state`) into `out` (f32 or f64,
    /// on the f64 emulation without `SHADER_F64`), then advances the stream.
    pub(crate) fn random_into(
        &mut self,
        op: &'static str,
        key: u64,
        state: &Tensor,
        draw: &Draw<'_>,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let f64 = match out.dtype() {
            DType::F32 => false,
            DType::F64 => true,
            other => {
                return Err(Error::Graph(format!(
                    "internal: {op} drew into a {other} tensor"
                )))
            }
        };
        let emulate64 = super::operands::emulated(&ctx, out.dtype());
        let count = out.numel() as u64;
        if count > u64::from(u32::MAX) / 4 {
            return Err(super::operands::too_many(op, "random values", count));
        }
        // The output, and Bernoulli's probabilities (one per output element), in windows of
        // whole blocks; Multinomial's running sums in windows of whole rows (see `row_runs`).
        let elem = out.dtype().size() as u64;
        let limit = ctx.binding_limit();
        let row_bytes = draw.classes as u64 * elem;
        let sums_relaid = match (draw.src, draw.mode) {
            (Some(src), RandomMode::Multinomial) if !src.storage().fits_one_binding(limit) => {
                self.relaid_in_whole_slices(src, row_bytes, true)?
            }
            _ => None,
        };
        let sums = match draw.mode {
            RandomMode::Multinomial => sums_relaid.as_ref().or(draw.src),
            _ => None,
        };
        let row_align = ctx.window_alignment(op, elem)?;
        // The windows of the running sums holding rows [r0, r1): (first, end, window).
        let row_runs = |sums: &Tensor, r0: u64, r1: u64| {
            super::windows::unit_runs(
                r0,
                r1,
                row_bytes,
                &sums.storage().segments(),
                limit,
                row_align,
            )
            .ok_or_else(|| Error::LimitExceeded {
                op,
                what: format!("one row of running sums ({row_bytes} bytes) bound at once"),
                limit: "max_storage_buffer_binding_size",
                needed: row_bytes + row_align + 4,
                max: limit,
            })
        };
        if count > 0 {
            let wg = ctx.workgroup_size();
            let per_block = if f64 { 2 } else { 4 };
            let pipeline = ctx.pipeline(&Kernel::Random {
                mode: draw.mode,
                f64,
                emulate64,
                workgroup_size: wg,
            })?;
            let mut params = Params {
                a: draw.a,
                b: draw.b,
                count: count as u32,
                key_lo: key as u32,
                key_hi: (key >> 32) as u32,
                classes: draw.classes as u32,
                samples: draw.samples.max(1) as u32,
                block_first: 0,
                block_end: 0,
                dst_first: 0,
                src_first: 0,
                row_first: 0,
                row_end: u32::MAX,
                pad: 0,
            };
            // A block's values are 16 bytes of the output: windows of whole blocks.
            let blocks = count.div_ceil(per_block);
            let runs = self.unit_windows(op, out, blocks, 16)?;
            for (b0, b1, window) in runs {
                params.block_first = b0 as u32;
                params.block_end = b1 as u32;
                params.dst_first = (window.start / elem) as u32;
                if let Some(sums) = sums.filter(|s| !s.storage().fits_one_binding(limit)) {
                    // Each window of the rows these blocks' samples draw from, a pass each
                    // over the blocks reaching it (a block's values depend only on its
                    // number: a sample of a row beyond the window is left to the next pass).
                    let samples = draw.samples.max(1) as u64;
                    let r0 = b0 * per_block / samples;
                    let r1 = ((b1 * per_block).min(count) - 1) / samples + 1;
                    for (r0, r1, rows) in row_runs(sums, r0, r1)? {
                        let p0 = b0.max(r0 * samples / per_block);
                        let p1 = b1.min((r1 * samples).div_ceil(per_block));
                        [params.block_first, params.block_end] = [p0 as u32, p1 as u32];
                        [params.row_first, params.row_end] = [r0 as u32, r1 as u32];
                        params.src_first = ((r0 * row_bytes - rows.start) / elem) as u32;
                        let bindings = [
                            state.storage().bind_whole(),
                            sums.storage().bind(rows),
                            out.storage().bind(window),
                        ];
                        let grid = grid_for(&ctx, op, p1 - p0, wg)?;
                        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                    }
                    continue;
                }
                // Uniform and normal draws read no source: the state stands in for it.
                // Bernoulli's probabilities lie as the output does.
                let src = match draw.src {
                    Some(t) if draw.mode == RandomMode::Bernoulli => {
                        debug_assert_eq!(t.byte_len(), out.byte_len(), "one per element");
                        let w = match t.storage().fits_one_binding(limit) {
                            true => t.storage().whole_window(),
                            false => window,
                        };
                        params.src_first = (w.start / elem) as u32;
                        t.storage().bind(w)
                    }
                    Some(t) => t.storage().bind_whole(),
                    None => state.storage().bind_whole(),
                };
                let bindings = [
                    state.storage().bind_whole(),
                    src,
                    out.storage().bind(window),
                ];
                let grid = grid_for(&ctx, op, b1 - b0, wg)?;
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            }
        }
        // Even an empty draw moves the stream on, so draws stay one per execution.
        let advance = ctx.pipeline(&Kernel::RandomAdvance)?;
        self.dispatch_with(op, &advance, &[state.storage().bind_whole()], [1, 1, 1])
    }
}
