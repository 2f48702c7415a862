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
fn units(w: vec4<u32>) -> vec4<f64> {
    return vec4<f64>(unit53(w.x, w.y), unit53(w.z, w.w), 0.0, 0.0);
}";
const NORMALS_F64: &str = r"fn normals(w: vec4<u32>) -> vec4<f64> {
    let u = (f64(w.x >> 11u) * 4294967296.0 + f64(w.y) + 1.0) * 1.1102230246251565e-16;
    let radius = sqrt(-2.0 * log64(u));
    let angle = unit53(w.z, w.w) * 6.283185307179586;
    return vec4<f64>(radius * cos64(angle), radius * sin64(angle), 0.0, 0.0);
}";

/// The WGSL of the generator on f32 or f64.
pub(crate) fn random_source(template: &str, f64: bool) -> String {
    if !f64 {
        return template.to_string();
    }
    super::operands::specialize(
        template,
        &[
            ("// ELEMENT TYPE", "alias T = f64;".to_string()),
            ("// F64 MATH", super::words::F64_MATH.to_string()),
            ("// PER BLOCK", PER_BLOCK_F64.to_string()),
            ("// UNITS", UNITS_F64.to_string()),
            ("// NORMALS", NORMALS_F64.to_string()),
        ],
    )
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
    _pad: u32,
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
    /// Records one draw of the stream (`key`, draw index in `state`) into `out` (f32 or f64;
    /// f64 needs `SHADER_F64`), then advances the stream.
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
        if f64 && !ctx.features().contains(Kernel::random_features(true)) {
            return Err(Error::invalid(
                op,
                "dtype",
                "f64 random numbers need the adapter's SHADER_F64 and SHADER_INT64 features"
                    .to_string(),
            ));
        }
        let count = out.numel() as u64;
        if count > u64::from(u32::MAX) / 4 {
            return Err(super::operands::too_many(op, "random values", count));
        }
        let mut bound = vec![(out, "the output")];
        if let Some(src) = draw.src {
            bound.push((src, "the probabilities"));
        }
        super::operands::check_bound_whole(&ctx, op, &bound)?;
        if count > 0 {
            let wg = ctx.workgroup_size();
            let per_block = if f64 { 2 } else { 4 };
            let grid = grid_for(&ctx, op, count.div_ceil(per_block), wg)?;
            let pipeline = ctx.pipeline(&Kernel::Random {
                mode: draw.mode,
                f64,
                workgroup_size: wg,
            })?;
            let params = Params {
                a: draw.a,
                b: draw.b,
                count: count as u32,
                key_lo: key as u32,
                key_hi: (key >> 32) as u32,
                classes: draw.classes as u32,
                samples: draw.samples.max(1) as u32,
                _pad: 0,
            };
            // Uniform and normal draws read no source: the state stands in for it.
            let src = draw.src.map_or(state.storage(), |t| t.storage());
            let bindings = [
                state.storage().bind_whole(),
                src.bind_whole(),
                out.storage().bind_whole(),
            ];
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        }
        // Even an empty draw moves the stream on, so draws stay one per execution.
        let advance = ctx.pipeline(&Kernel::RandomAdvance)?;
        self.dispatch_with(op, &advance, &[state.storage().bind_whole()], [1, 1, 1])
    }
}
