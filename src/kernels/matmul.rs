//! The MatMul kernel family (`shaders/matmul.wgsl`, specialized per dtype): 16 x 16 tiles,
//! the few-rows kernel and the CPU-adapter blocks, chosen per shape and adapter; batch
//! broadcasting by strides, windows over large tensors, one-buffer copies of operands that
//! cross a buffer end.

use super::elementwise::broadcast_strides;
use super::gather::{AxisSlice, GatherPlan};
use super::operands::{bind_windows, elementwise_type, layout_of, specialize};
use super::program::{
    broadcast_walk_words, index_code, narrow, walk_rank, walk_struct, walk_words, Program,
};
use super::windows::{room, Broadcast, Walk};
use super::words::{load_expression, program_helpers, F64_EMULATION, I64_EMULATION};
use super::{Kernel, MAX_RANK};
pub use crate::gpu::MatMulKernel;
#[cfg(feature = "native")]
use crate::gpu::MatMulMeasurement;
use crate::gpu::{Binding, MatMulChoice, MatMulShape, MEASURED_K, MEASURED_ROWS, MEASURED_WORK};
use crate::storage::Storage;
use crate::{DType, Error, Out, Recorder, Result, Tensor};

const MATMUL: &str = concat!(
    include_str!("../../shaders/matmul.wgsl"),
    "\n",
    include_str!("../../shaders/divide.inc")
);

/// The most tensors an epilogue reads besides the sums: WebGPU's 8 storage buffers per stage,
/// less the two operands and the output.
pub const MAX_EPILOGUE_LEAVES: usize = 5;

/// WGSL source of the MatMul kernel for one element type, with an epilogue program (operand 0
/// the sum, the others read from buffers at their broadcast positions in the output) or none,
/// and a prologue or none: `(program, j)` computes operand `j` (0: A, 1: B) where the kernel
/// reads it, from tensors bound after the epilogue's. `emulate64`: i64 or u64 on u32 pairs,
/// without the `blocks` entry point (and without prologues). `walk_ranks`: the epilogue's and
/// the prologue's walk ranks, whose index code is straight-line where they are 4 or more.
pub fn matmul_source(
    dtype: DType,
    epilogue: Option<&Program>,
    prologue: Option<(&Program, u8)>,
    emulate64: bool,
    walk_ranks: [u8; 2],
) -> String {
    let [epilogue_rank, prologue_rank] = walk_ranks.map(usize::from);
    let ty = compute_type(dtype).unwrap_or("f32");
    let mut replacements = vec![("// LHS TYPE", format!("alias T = {ty};"))];
    let mut template = MATMUL.to_string();
    let packed = packed16(dtype);
    if packed {
        replacements.extend([
            (
                "// LHS BINDING",
                "@group(0) @binding(1) var<storage, read> lhs: array<u32>;".to_string(),
            ),
            (
                "// RHS BINDING",
                "@group(0) @binding(2) var<storage, read> rhs: array<u32>;".to_string(),
            ),
            (
                "// DST BINDING",
                "@group(0) @binding(3) var<storage, read_write> dst: array<atomic<u32>>;"
                    .to_string(),
            ),
            (
                "// STORE",
                format!(
                    "fn store(d: u32, v: T) {{
    let shift = (d % 2u) * 16u;
    atomicAnd(&dst[d / 2u], ~(0xffffu << shift));
    atomicOr(&dst[d / 2u], {} << shift);
}}",
                    if dtype == DType::F16 {
                        "f32_to_f16(v)"
                    } else {
                        "f32_to_bf16(v)"
                    }
                ),
            ),
        ]);
        for (j, (marker, name, buffer)) in [
            ("// LHS AT", "lhs_at", "lhs"),
            ("// RHS AT", "rhs_at", "rhs"),
        ]
        .into_iter()
        .enumerate()
        {
            if prologue.is_none_or(|(_, operand)| usize::from(operand) != j) {
                replacements.push((
                    marker,
                    format!(
                        "fn {name}(i: u32) -> T {{ return {}; }}",
                        load_expression(dtype, buffer)
                    ),
                ));
            }
        }
    }
    let epilogue_parts = epilogue.map(|p| p.parts(4, true, ""));
    let leaves = epilogue.map_or(0, |p| p.operands().len().saturating_sub(1));
    let prologue_parts = prologue.map(|(p, _)| p.parts(4 + leaves, false, "_p"));
    // Helpers both programs call are defined once, as are the programs' f32 math functions.
    let mut helpers: Vec<&String> = Vec::new();
    for parts in epilogue_parts.iter().chain(&prologue_parts) {
        for h in &parts.helpers {
            if !helpers.contains(&h) {
                helpers.push(h);
            }
        }
    }
    let mut common = String::new();
    if epilogue.is_some() || prologue.is_some() || packed {
        common.push_str(program_helpers());
        common.push('\n');
    }
    for h in &helpers {
        common.push_str(h);
        common.push('\n');
    }
    if emulate64 {
        // The epilogue's steps may share the emulation's helpers: defined once.
        let defined = |f: &str| {
            epilogue_parts.as_ref().is_some_and(|p| p.steps.contains(f)) || common.contains(f)
        };
        let mut helpers = String::new();
        if !defined("fn add64(") {
            helpers.push_str(I64_EMULATION);
        }
        // f64 on u32 pairs: each product and sum rounded as the CPU rounds them.
        let (add, mul) = if dtype == DType::F64 {
            if !defined("fn sf64_add(") {
                helpers.push('\n');
                helpers.push_str(F64_EMULATION);
            }
            ("sf64_add", "sf64_mul")
        } else {
            ("add64", "mul64")
        };
        replacements[0].1 = format!("alias T = vec2<u32>;\n{helpers}");
        replacements.extend([
            // An emulated product costs tens of instructions: the sums skip the tiles' padding
            // (k past its end, rows and columns past the output's), which is most of the tile
            // where k or n is small (a distance's few features).
            (
                "// TILE LOOP",
                "        let span = select(0u, min(TILE, params.k - t * TILE), row < params.m && col < params.n);\n        for (var i = 0u; i < span; i++) {".into(),
            ),
            (
                "// TILE SUM",
                format!(
                    "            acc = {add}(acc, {mul}(lhs_tile[local.y][i], rhs_tile[i][local.x]));"
                ),
            ),
            (
                "// ROWS SUM",
                format!(
                    "            acc = {add}(acc, {mul}(lhs_at(a + i * params.strides.y), rhs_at(r + i * params.strides.z)));"
                ),
            ),
            (
                "// ROWS TOTAL",
                format!("            sum = {add}(sum, partial[c + s * cols]);"),
            ),
        ]);
        let begin = template
            .find("// BEGIN BLOCKS")
            .expect("matmul.wgsl marks blocks");
        let end = template
            .find("// END BLOCKS")
            .expect("matmul.wgsl marks blocks");
        template.replace_range(begin..end, "");
    }
    if let (Some(p), Some(parts)) = (epilogue, &epilogue_parts) {
        let leaves = p.operands().len().saturating_sub(1);
        let strides = leaves.max(1);
        replacements.push(("// EPILOGUE PARAMS", "    epi: Epilogue,".into()));
        replacements.push((
            "// EPILOGUE BINDINGS",
            format!(
                "// The epilogue's walk over the output: its rank, the leaves' element offsets in their bound
// windows, the output's shape and each leaf's element strides (innermost axis first).
{}
{}",
                walk_struct("Epilogue", strides),
                parts.bindings
            ),
        ));
        replacements.push((
            "// EPILOGUE FUNCTION",
            format!(
                "{}
{}
override EPILOGUE_RANK: u32 = 0u;
fn epilogue(sum: T, d: u32) -> T {{
    let acc = {};
{}{}
}}",
                parts.loads,
                parts.steps,
                narrow(dtype, "sum"),
                index_code(
                    leaves,
                    "params.epi",
                    "d - params.dst_base",
                    Some("EPILOGUE_RANK"),
                    epilogue_rank
                ),
                parts.body
            ),
        ));
    }
    if let (Some((p, j)), Some(parts)) = (prologue, &prologue_parts) {
        let n = p.operands().len();
        replacements.push(("// PROLOGUE PARAMS", "    pro: Prologue,".into()));
        replacements.push((
            "// PROLOGUE BINDINGS",
            format!(
                "// The prologue's walk over its operand: its rank, the inputs' element offsets, the
// operand's shape and each input's element strides (innermost axis first).
{}
{}",
                walk_struct("Prologue", n),
                parts.bindings
            ),
        ));
        let (marker, name) = if j == 0 {
            ("// LHS AT", "lhs_at")
        } else {
            ("// RHS AT", "rhs_at")
        };
        replacements.push((
            marker,
            format!(
                "{}
{}
override PROLOGUE_RANK: u32 = 0u;
fn prologue(e: u32) -> T {{
{}{}
}}
fn {name}(i: u32) -> T {{ return {}; }}",
                parts.loads,
                parts.steps,
                index_code(n, "params.pro", "e", Some("PROLOGUE_RANK"), prologue_rank),
                parts.body,
                narrow(p.out(), "prologue(i)")
            ),
        ));
    }
    if !common.is_empty() {
        // Module-level declarations may come in any order: with the first program's pieces.
        let marker = if epilogue.is_some() {
            "// EPILOGUE FUNCTION"
        } else if prologue.is_some_and(|(_, j)| j == 1) {
            "// RHS AT"
        } else {
            "// LHS AT"
        };
        if let Some(r) = replacements.iter_mut().find(|(m, _)| *m == marker) {
            r.1 = format!("{common}{}", r.1);
        }
    }
    specialize(&template, &replacements)
}

/// The WGSL type a MatMul of `dtype` computes in: the element-wise type, and f32 for f16
/// and bf16 (read from their packed words, summed in f32, rounded once when stored).
pub fn compute_type(dtype: DType) -> Option<&'static str> {
    if packed16(dtype) {
        Some("f32")
    } else {
        elementwise_type(dtype)
    }
}

/// Whether MatMuls of `dtype` read and write packed 16-bit words (f16, bf16).
pub fn packed16(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// Whether `tensors` each bind whole (no windows): what reading an operand transposed in
/// place, or an epilogue, needs.
pub fn binds_whole(ctx: &crate::Context, tensors: &[&Tensor]) -> bool {
    let storages: Vec<&Storage> = tensors.iter().map(|t| &**t.storage()).collect();
    let elems: Vec<u64> = tensors.iter().map(|t| t.dtype().size() as u64).collect();
    layout_of(&storages, ctx.binding_limit(), &elems).0
}

/// Rows of B per slice when one `k x n` matrix B is larger than a binding (or a buffer) can
/// hold but a slice of its rows is not: the product is then summed from the products of A's
/// column slices and B's row slices (see [`Recorder::matmul_in_k_slices`]). `None` where B
/// fits, where the tensors bind whole, for operands read transposed (their callers bind them
/// whole), and where a single row of B is too large, which the row walk then reports.
fn k_slice_rows(
    ctx: &crate::Context,
    op: &'static str,
    elem: u64,
    transposed: [bool; 2],
    k: usize,
    n: usize,
    tensors: &[&Tensor],
) -> Result<Option<usize>> {
    if transposed != [false; 2] || k < 2 || binds_whole(ctx, tensors) {
        return Ok(None);
    }
    let align = ctx.window_alignment(op, elem)?;
    let room = ctx
        .binding_limit()
        .saturating_sub(align + elem)
        .min(ctx.max_buffer_size());
    let row = n as u64 * elem;
    if k as u64 * row <= room || row > room {
        return Ok(None);
    }
    Ok(Some((room / row) as usize))
}

/// The binding layout of a MatMul kernel whose epilogue and prologue read `leaves` tensors
/// in all.
pub fn matmul_bindings(leaves: usize) -> &'static [Binding] {
    use Binding::{StorageRead as R, StorageReadWrite as W, Uniform as U};
    const LAYOUTS: [&[Binding]; MAX_EPILOGUE_LEAVES + 1] = [
        &[U, R, R, W],
        &[U, R, R, W, R],
        &[U, R, R, W, R, R],
        &[U, R, R, W, R, R, R],
        &[U, R, R, W, R, R, R, R],
        &[U, R, R, W, R, R, R, R, R],
    ];
    LAYOUTS[leaves.min(MAX_EPILOGUE_LEAVES)]
}

/// Whether `program` can be a MatMul epilogue on `dtype`: its operand 0 and result of the
/// MatMul's type as the kernel holds it, and few enough leaves to bind.
pub fn epilogue_fits(program: &Program, dtype: DType, emulate64: bool) -> bool {
    let ty = if emulate64 {
        Some("vec2<u32>")
    } else {
        compute_type(dtype)
    };
    program.operands().first() == Some(&dtype)
        && program.out() == dtype
        && program.operands().len() <= MAX_EPILOGUE_LEAVES + 1
        && ty.is_some()
        && ty == Some(program.value_type(dtype))
        && program.emulate64() == emulate64
}

/// A MatMul operand that is never stored: the values of an element-wise program over
/// `leaves`, computed where the kernel reads each element (LinearAttention's decayed state,
/// read once by the product with the key).
#[derive(Clone, Copy)]
pub(crate) struct Prologue<'a> {
    /// Which operand: 0 for A, 1 for B.
    pub operand: usize,
    pub program: &'static Program,
    pub leaves: &'a [&'a Tensor],
}

impl Prologue<'_> {
    /// Whether the program can compute an operand of `dtype` and `shape` in the kernel,
    /// beside an epilogue of `epilogue_leaves` inputs: as a reduction's prologue must fit (see
    /// [`super::reduce::prologue_fits`]), of the operand's type, and all inputs bound at once.
    pub fn fits(
        &self,
        ctx: &crate::Context,
        dtype: DType,
        shape: &[usize],
        epilogue_leaves: usize,
    ) -> bool {
        self.program.out() == dtype
            && compute_type(dtype) == Some(self.program.value_type(dtype))
            && epilogue_leaves + self.leaves.len() <= MAX_EPILOGUE_LEAVES
            && super::reduce::prologue_fits(ctx, self.program, self.leaves, shape)
    }

    /// A tensor of the operand's dtype and `shape` standing for it where the kernel's plan
    /// needs one: it shares the first input's buffer, which is bound in the operand's place
    /// and not read. Never read or written as a tensor.
    pub fn stand_in(&self, shape: &[usize]) -> Tensor {
        let first = self.leaves[0];
        Tensor::from_parts(
            first.context(),
            self.program.out(),
            shape.to_vec(),
            first.storage().clone(),
        )
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MatMulParams {
    m: u32,
    n: u32,
    k: u32,
    batch_rank: u32,
    lhs_base: u32,
    rhs_base: u32,
    dst_base: u32,
    batch_base: u32,
    layout: [u32; 4],
    batch_shape: [u32; MAX_RANK],
    lhs_stride: [u32; MAX_RANK],
    rhs_stride: [u32; MAX_RANK],
    dst_stride: [u32; MAX_RANK],
}

/// The most iterations of one loop over k in one invocation, the whole of an invocation's loop
/// budget (`INVOCATION_LOOP_BUDGET`): lavapipe stops a shader's loops after 65 535
/// iterations and keeps what it has (a blocks product with k = 140 000 came out as 65 534).
/// Blocks loop over all of k, rows over a quarter, tiles over k / 16 steps.
pub const MAX_K_LOOP: u64 = super::INVOCATION_LOOP_BUDGET as u64;

/// Invocations per output element of the `rows` kernel in workgroups of `group` (its `SLICES`):
/// 16 in the workgroups of GPUs (128 and more: [1, 256] x [256, 256] took 6.4 us instead of
/// 14.5 with 4 on the H100, its loop over k being latency-bound), 4 in the smaller ones of CPU
/// adapters, where an invocation's loop is cheap and the partial sums are not.
pub fn rows_slices(group: u32) -> u32 {
    if group >= 128 {
        16
    } else {
        4
    }
}

/// The kernel for `rows` output rows of `n` columns summing `k` products, with workgroups of
/// `group` invocations, `max` workgroups per grid dimension, on CPU-style kernels or not (the
/// rule [`MatMulChoice::ByShape`] follows).
pub fn matmul_kernel(rows: u64, n: u64, k: u64, cpu: bool, group: u32, max: u32) -> MatMulKernel {
    let (row_groups, col_groups) = (rows.div_ceil(8), n.div_ceil(4 * u64::from(group)));
    // CPU adapters: blocks from two rows (lavapipe, 2 cores, [r, 256] x [256, 256]: 204 us at
    // 2 rows and 242 at 8, the few-rows kernel 250 and 876); a single row split into slices
    // does better in one workgroup (148 us, blocks 220). `bench --matmul-only`.
    if cpu
        && k <= MAX_K_LOOP
        && row_groups <= u64::from(max)
        && col_groups <= u64::from(max)
        && (rows >= 2 || col_groups >= 2)
    {
        MatMulKernel::Blocks
    } else if rows < 16 && k.div_ceil(4) <= MAX_K_LOOP {
        MatMulKernel::Rows
    } else {
        MatMulKernel::Tiles
    }
}

/// Bands of 8 rows in one workgroup of the blocks kernel: as many as its invocations hold
/// where all `n` columns (4 per invocation) fit one workgroup, else 1 (see `blocks` in
/// matmul.wgsl, which computes the same).
pub fn blocks_bands(n: u64, group: u32) -> u64 {
    let group = u64::from(group);
    match n <= 4 * group {
        true => group / n.div_ceil(4).max(1),
        false => 1,
    }
}

/// Whether `kernel` can compute products of `shape` (loop and grid limits; the emulated
/// 64-bit types have no blocks kernel).
fn can_run(kernel: MatMulKernel, shape: &MatMulShape, group: u32, max: u32) -> bool {
    let (rows, n, k, max) = (shape.rows, shape.n, shape.k, u64::from(max));
    match kernel {
        MatMulKernel::Tiles => k.div_ceil(16) <= MAX_K_LOOP,
        MatMulKernel::Rows => {
            let per_group = u64::from(group / rows_slices(group));
            k.div_ceil(4) <= MAX_K_LOOP && rows <= max && n.div_ceil(per_group) <= max
        }
        MatMulKernel::Blocks => {
            !shape.emulate64
                && k <= MAX_K_LOOP
                && rows.div_ceil(8) <= max
                && n.div_ceil(4 * u64::from(group)) <= max
        }
    }
}

/// The kernel [`matmul_kernel`] picks for `shape`, where it can run. The emulated 64-bit
/// types have no blocks kernel: CPU adapters take the tiles for sums of at most one tile of
/// products (their emulated sums skip the padding), else the rows kernel. On lavapipe (2 cores,
/// `bench --matmul-only`) that is the faster of the two in every row of the emulated table: the
/// tiles 1.9-2.0x faster at [640, 3] x [3, 3] in f64, 1.1-1.4x at [1000, 16] x [16, 100]; the
/// rows 1.1x at [64, 256] x [256, 256], 1.2-1.3x at [100, 100] x [100, 100], even at k = 32.
fn kernel_by_shape(shape: &MatMulShape, cpu: bool, group: u32, max: u32) -> MatMulKernel {
    match matmul_kernel(shape.rows, shape.n, shape.k, cpu, group, max) {
        MatMulKernel::Blocks if shape.emulate64 => {
            match shape.k > 16 && can_run(MatMulKernel::Rows, shape, group, max) {
                true => MatMulKernel::Rows,
                false => MatMulKernel::Tiles,
            }
        }
        v => v,
    }
}

/// Times every kernel that can compute products of `shape` on `ctx` (runs of `reps` products
/// into one output, so each waits for the one before as in a recurrent step, doubled from one
/// until a run takes a millisecond; interleaved, best of three after a warm-up), for
/// [`MatMulChoice::Measure`]. Its own work is taken back from the context's statistics.
#[cfg(feature = "native")]
fn measure(
    ctx: &crate::Context,
    shape: &MatMulShape,
    group: u32,
    max: u32,
) -> Result<MatMulMeasurement> {
    let candidates: Vec<MatMulKernel> = MatMulKernel::ALL
        .into_iter()
        .filter(|&kernel| can_run(kernel, shape, group, max))
        .collect();
    if candidates.len() < 2 {
        return Err(Error::Graph(format!(
            "MatMul {shape:?}: no kernels to compare"
        )));
    }
    let before = ctx.stats();
    let dims = |a: u64, b: u64| -> Vec<usize> {
        [shape.batches, a, b]
            .iter()
            .skip(usize::from(shape.batches == 1))
            .map(|&d| d as usize)
            .collect()
    };
    let lhs = Tensor::uninit(ctx, shape.dtype, &dims(shape.rows, shape.k))?;
    let rhs = Tensor::uninit(ctx, shape.dtype, &dims(shape.k, shape.n))?;
    let out = Tensor::uninit(ctx, shape.dtype, &dims(shape.rows, shape.n))?;
    let mut timed = crate::gpu::Stats::default();
    let mut time = |kernel: MatMulKernel, reps: u32| -> Result<f64> {
        ctx.wait_idle()?;
        let mut rec = ctx.recorder();
        rec.matmul_kernel = Some(kernel);
        for _ in 0..reps {
            rec.matmul_into("MatMul", &lhs, &rhs, &out)?;
        }
        timed.dispatches += rec.dispatches();
        timed.submissions += 1;
        timed.host_waits += 2;
        let start = std::time::Instant::now();
        pollster::block_on(rec.finish())?;
        ctx.wait_idle()?;
        Ok(start.elapsed().as_secs_f64())
    };
    let outcome = (|| -> Result<Vec<(MatMulKernel, f64)>> {
        for &kernel in &candidates {
            time(kernel, 1)?;
        }
        // Large products (a hoisted product over all steps) are timed once per round.
        let mut reps = 1;
        while reps < 256 && time(candidates[0], reps)? < 1e-3 {
            reps *= 2;
        }
        let mut best = vec![f64::INFINITY; candidates.len()];
        for _ in 0..3 {
            for (j, &kernel) in candidates.iter().enumerate() {
                best[j] = best[j].min(time(kernel, reps)?);
            }
        }
        Ok(candidates
            .iter()
            .zip(best)
            .map(|(&kernel, t)| (kernel, t * 1e6 / f64::from(reps)))
            .collect())
    })();
    drop((lhs, rhs, out));
    let after = ctx.stats();
    timed.pipelines_built = after.pipelines_built - before.pipelines_built;
    timed.buffers_created = after.buffers_created - before.buffers_created;
    ctx.uncount(&timed);
    let micros = outcome?;
    let chosen = micros
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|&(kernel, _)| kernel)
        .expect("two candidates or more");
    Ok(MatMulMeasurement {
        shape: *shape,
        micros,
        chosen,
    })
}

/// Times every kernel that can compute products of `rows x k` by `k x n` (`batches` of them)
/// on `ctx`, as [`MatMulChoice::Measure`] does, whatever their size, together with the kernel
/// the shape rule would pick. For the benchmark's table; remembers nothing.
#[doc(hidden)]
#[cfg(feature = "native")]
pub fn measure_matmul(
    ctx: &crate::Context,
    dtype: DType,
    [batches, rows, n, k]: [u64; 4],
) -> Result<(MatMulMeasurement, MatMulKernel)> {
    let shape = MatMulShape {
        dtype,
        batches,
        rows,
        n,
        k,
        emulate64: super::operands::emulated(ctx, dtype),
    };
    let group = ctx.workgroup_size().clamp(4, 256);
    let max = ctx.limits().max_compute_workgroups_per_dimension;
    let by_shape = kernel_by_shape(&shape, ctx.cpu_kernels(), group, max);
    Ok((measure(ctx, &shape, group, max)?, by_shape))
}

impl Recorder {
    /// The kernel for products of `shape`: forced by this recorder (a measurement's timing
    /// run) or the context's [`MatMulChoice`], measured, or by shape.
    fn choose_matmul_kernel(&mut self, shape: &MatMulShape, group: u32, max: u32) -> MatMulKernel {
        let ctx = self.context().clone();
        let by_shape = kernel_by_shape(shape, ctx.cpu_kernels(), group, max);
        let forced = match ctx.matmul_choice() {
            MatMulChoice::Always(kernel) => self.matmul_kernel.or(Some(kernel)),
            _ => self.matmul_kernel,
        };
        if let Some(kernel) = forced {
            return if can_run(kernel, shape, group, max) {
                kernel
            } else {
                by_shape
            };
        }
        let work = shape.batches * shape.rows * shape.n * shape.k;
        let candidates = MatMulKernel::ALL
            .into_iter()
            .filter(|&kernel| can_run(kernel, shape, group, max))
            .count();
        if ctx.matmul_choice() != MatMulChoice::Measure
            || (shape.rows > MEASURED_ROWS && shape.k > MEASURED_K)
            || work < MEASURED_WORK
            || candidates < 2
        {
            return by_shape;
        }
        if let Some(kernel) = ctx.measured_matmul(shape) {
            return kernel;
        }
        #[cfg(feature = "native")]
        match measure(&ctx, shape, group, max) {
            Ok(measurement) => {
                let chosen = measurement.chosen;
                log::info!(
                    "MatMul {shape:?}: {:?}, chose {}",
                    measurement.micros,
                    chosen.name()
                );
                ctx.remember_matmul(measurement);
                return chosen;
            }
            // The product itself then runs (and reports its own errors) on the kernel by shape.
            Err(e) => log::warn!("MatMul {shape:?}: measuring the kernels failed: {e}"),
        }
        by_shape
    }

    /// Records `out = lhs x rhs` as the sum over slices of `rows` rows of B (and the same
    /// columns of A), for a B too large to bind: each slice is copied out (A's columns are
    /// strided, B's rows contiguous), multiplied, and added to the sum so far. B thus moves
    /// twice more than in one product; it only serves matrices beyond the binding limit
    /// (lavapipe's and browsers' 128 MiB: fully connected layers of VGG and AlexNet, large
    /// vocabularies' embeddings and output layers).
    fn matmul_in_k_slices(
        &mut self,
        op: &'static str,
        lhs: &Tensor,
        rhs: &Tensor,
        out: &Tensor,
        rows: usize,
    ) -> Result<()> {
        let dtype = lhs.dtype();
        let (lr, rr) = (lhs.rank(), rhs.rank());
        let k = lhs.shape()[lr - 1];
        let mut sum: Option<Tensor> = None;
        for first in (0..k).step_by(rows) {
            let len = rows.min(k - first);
            let slice_of = |t: &Tensor, axis: usize| -> (GatherPlan, Vec<usize>) {
                let mut axes: Vec<AxisSlice> =
                    t.shape().iter().map(|&d| AxisSlice::full(d)).collect();
                axes[axis] = AxisSlice {
                    start: first as u64,
                    step: 1,
                    len: len as u64,
                };
                let mut shape = t.shape().to_vec();
                shape[axis] = len;
                (GatherPlan::from_axes(t.shape(), &axes), shape)
            };
            let (a_plan, a_shape) = slice_of(lhs, lr - 1);
            let (b_plan, b_shape) = slice_of(rhs, rr - 2);
            let a = self.alloc(dtype, &a_shape)?;
            let b = self.alloc(dtype, &b_shape)?;
            self.gather_into(op, lhs, &a_plan, &a)?;
            self.gather_into(op, rhs, &b_plan, &b)?;
            let last = first + len == k;
            let product = if last && sum.is_none() {
                out.clone()
            } else {
                self.alloc(out.dtype(), out.shape())?
            };
            self.matmul_epilogue_into(op, &a, &b, &product, None, [false; 2], None)?;
            self.release(a);
            self.release(b);
            sum = Some(match sum {
                None => product,
                Some(before) => {
                    let total = if last {
                        out.clone()
                    } else {
                        self.alloc(out.dtype(), out.shape())?
                    };
                    self.map_to("Add", &[&before, &product], Out::into(op, &total))?;
                    self.release(before);
                    self.release(product);
                    total
                }
            });
        }
        Ok(())
    }

    /// Records a batched matrix product. `lhs` is `[..., m, k]`, `rhs` `[..., k, n]` (batch
    /// dims already broadcast-compatible), `out` `[batch..., m, n]`.
    pub(crate) fn matmul_into(
        &mut self,
        op: &'static str,
        lhs: &Tensor,
        rhs: &Tensor,
        out: &Tensor,
    ) -> Result<()> {
        self.matmul_epilogue_into(op, lhs, rhs, out, None, [false; 2], None)
    }

    /// Records `out = epilogue(lhs x rhs, leaves...)`: the product's elements are operand 0
    /// of the element-wise program, `leaves` (broadcast to `out`'s shape, which is the
    /// product's) the others. In one dispatch where the program fits the kernel (see
    /// [`epilogue_fits`]) and every tensor binds whole; else the product goes through a
    /// temporary tensor and the program runs after it. `transposed[j]`: operand `j` is
    /// stored transposed (its last two axes swapped: `[..., k, m]` for A) and read in place,
    /// which needs every tensor bound whole (see [`binds_whole`]). With a `prologue`, that
    /// operand is its [`Prologue::stand_in`], computed where it is read (every tensor bound
    /// whole, see [`Prologue::fits`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul_epilogue_into(
        &mut self,
        op: &'static str,
        lhs: &Tensor,
        rhs: &Tensor,
        out: &Tensor,
        epilogue: Option<(&'static Program, &[&Tensor])>,
        transposed: [bool; 2],
        prologue: Option<Prologue<'_>>,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let emulate64 = super::operands::emulated(&ctx, lhs.dtype());
        if let Some(p) = &prologue {
            let operand = [lhs, rhs][p.operand];
            let leaves = epilogue.map_or(0, |(_, l)| l.len());
            if !p.fits(&ctx, operand.dtype(), operand.shape(), leaves)
                || !binds_whole(&ctx, &[lhs, rhs, out])
            {
                return Err(Error::Graph(format!(
                    "internal: {op} prologue {} does not fit",
                    p.program.describe()
                )));
            }
        }
        // The epilogue's walk over the output (its leaves' windows), planned once.
        let mut leaf_plan = None;
        let inner = lhs.shape()[lhs.rank() - 1 - usize::from(transposed[0])];
        if let Some((program, leaves)) = epilogue {
            // An empty inner axis makes the product zeros first, then the program.
            if inner > 0
                && epilogue_fits(program, lhs.dtype(), emulate64)
                && binds_whole(&ctx, &[lhs, rhs, out])
                && out.numel() as u64 <= u64::from(u32::MAX)
            {
                let plan = Broadcast::plan(&ctx, op, leaves, out)?;
                if plan.whole && plan.walks.len() == 1 {
                    leaf_plan = Some(plan);
                }
            }
            if leaf_plan.is_none() {
                let shape = out.shape().to_vec();
                let product = self.alloc(lhs.dtype(), &shape)?;
                self.matmul_epilogue_into(op, lhs, rhs, &product, None, transposed, prologue)?;
                let mut inputs = vec![&product];
                inputs.extend_from_slice(leaves);
                let kernel = Kernel::Fused {
                    program,
                    workgroup_size: ctx.workgroup_size(),
                    quads: false,
                    dense: None,
                    walk_rank: 0,
                };
                self.program_into(op, kernel, &inputs, out)?;
                self.release(product);
                return Ok(());
            }
        }
        let dtype = lhs.dtype();
        compute_type(dtype).ok_or_else(|| {
            Error::invalid(
                op,
                "A",
                format!("MatMul on {} cannot be computed in WGSL", lhs.dtype()),
            )
        })?;
        let elem = dtype.size() as u64;
        let (lr, rr, or) = (lhs.rank(), rhs.rank(), out.rank());
        let [ta, tb] = transposed;
        let (m, k, n) = (
            lhs.shape()[lr - 2 + usize::from(ta)],
            lhs.shape()[lr - 1 - usize::from(ta)],
            rhs.shape()[rr - 1 - usize::from(tb)],
        );
        let batch_shape = &out.shape()[..or - 2];
        if out.numel() == 0 {
            return Ok(());
        }
        if k == 0 {
            // Empty sums: zeros. No kernel binds the empty operands, whose buffers may hold
            // less than one element (an 8-byte element's binding needs 8 bytes).
            return self.clear(out.storage(), 0, out.byte_len().next_multiple_of(4));
        }
        if n == 1 && m > 1 {
            // A matrix times a vector as the row x^T A^T: the kernels for few rows, A read
            // transposed in place (one output column would leave most invocations idle).
            let mut all = vec![lhs, rhs, out];
            all.extend(
                epilogue
                    .iter()
                    .flat_map(|(_, leaves)| leaves.iter().copied()),
            );
            // A computed B (the vector) would need its inputs viewed as a row too: not swapped.
            if binds_whole(&ctx, &all) && prologue.is_none_or(|p| p.operand == 0) {
                let row = |t: &Tensor, len: usize| -> Result<Tensor> {
                    let r = t.rank();
                    let shape: Vec<usize> =
                        t.shape()[..r - 2].iter().copied().chain([1, len]).collect();
                    t.reshaped(&shape)
                };
                let out_row = row(out, m)?;
                let leaves: Vec<Tensor> = epilogue
                    .map(|(_, leaves)| {
                        leaves
                            .iter()
                            .map(|t| {
                                let shape = crate::host::unit_axes_view(
                                    t.shape(),
                                    out.shape(),
                                    out_row.shape(),
                                )
                                .ok_or_else(|| {
                                    Error::Graph(format!(
                                        "internal: {op} epilogue input {:?} against {:?}",
                                        t.shape(),
                                        out.shape()
                                    ))
                                })?;
                                t.reshaped(&shape)
                            })
                            .collect::<Result<_>>()
                    })
                    .transpose()?
                    .unwrap_or_default();
                let refs: Vec<&Tensor> = leaves.iter().collect();
                let epilogue = epilogue.map(|(p, _)| (p, refs.as_slice()));
                return self.matmul_epilogue_into(
                    op,
                    &row(rhs, k)?,
                    lhs,
                    &out_row,
                    epilogue,
                    [false, !ta],
                    prologue.map(|p| Prologue { operand: 1, ..p }),
                );
            }
        }
        if let Some(rows) = k_slice_rows(&ctx, op, elem, [ta, tb], k, n, &[lhs, rhs, out])? {
            return self.matmul_in_k_slices(op, lhs, rhs, out, rows);
        }
        let max = ctx.limits().max_compute_workgroups_per_dimension;
        let tiles = [n.div_ceil(16) as u64, m.div_ceil(16) as u64];
        if tiles[0].max(tiles[1]) > u64::from(max) {
            return Err(Error::LimitExceeded {
                op,
                what: "the matrix tiles".into(),
                limit: "max_compute_workgroups_per_dimension",
                needed: tiles[0].max(tiles[1]),
                max: u64::from(max),
            });
        }
        // Batch strides: matrices are (m * k) and (k * n) elements apart along broadcast dims.
        let strides = |shape: &[usize], matrix: u64| -> Vec<u64> {
            let b = &shape[..shape.len() - 2];
            broadcast_strides(b, batch_shape)
                .into_iter()
                .map(|s| s * matrix)
                .collect()
        };
        let (m, k, n) = (m as u64, k as u64, n as u64);
        let (ls, rs) = (strides(lhs.shape(), m * k), strides(rhs.shape(), k * n));
        let os: Vec<u64> = crate::host::c_strides(batch_shape)
            .into_iter()
            .map(|s| s * m * n)
            .collect();
        // A walk over the output rows (batch dims, then m): each row reads a row of lhs and
        // the whole rhs matrix and writes a row of the output.
        let br = batch_shape.len();
        let walk = Walk {
            lens: batch_shape.iter().map(|&d| d as u64).chain([m]).collect(),
            steps: (0..br)
                .map(|d| vec![ls[d], rs[d], os[d]])
                .chain([vec![k, 0, n]])
                .collect(),
            bases: vec![0; 3],
            extents: vec![k, k * n, n],
        };
        let storages = [&**lhs.storage(), &**rhs.storage(), &**out.storage()];
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, elem)?;
        let (whole, segments) = layout_of(&storages, limit, &[elem; 3]);
        let room = room(limit, align, elem);
        if (ta || tb || prologue.is_some() || packed16(dtype)) && !whole {
            return Err(Error::Graph(format!(
                "internal: {op} read a transposed, computed or 16-bit operand in place without \
                 binding it whole"
            )));
        }
        let pieces = if whole {
            vec![(walk, true)]
        } else if room == 0 {
            vec![(walk, false)]
        } else {
            walk.pieces(room, &segments)
        };
        let wg = ctx.workgroup_size();
        let arcs = [lhs.storage(), rhs.storage(), out.storage()];
        for (w, fits) in pieces {
            // An output row whose row of A, matrix B or output row crosses from one buffer of
            // a large tensor to the next: that operand goes through a one-buffer copy.
            let mut staged: [Option<Tensor>; 3] = [None, None, None];
            let w = if fits {
                w
            } else {
                let needed = w.extents.iter().max().copied().unwrap_or(0) * elem;
                if needed + align + elem > limit {
                    return Err(Error::LimitExceeded {
                        op,
                        what: format!(
                            "one output row: a {k}-element row of A and the {k} x {n} matrix B \
                             in windows aligned to {align} bytes"
                        ),
                        limit: "max_storage_buffer_binding_size",
                        needed: needed + align + elem,
                        max: limit,
                    });
                }
                if needed > ctx.max_buffer_size() {
                    return Err(Error::LimitExceeded {
                        op,
                        what: format!(
                            "a {k} x {n} matrix B or a row of A or of the output in one buffer"
                        ),
                        limit: "max_buffer_size",
                        needed,
                        max: ctx.max_buffer_size(),
                    });
                }
                for j in 0..3 {
                    if !w.extent_fits(j, room, segments[j]) {
                        let dtype = if j == 2 { out.dtype() } else { lhs.dtype() };
                        let temp =
                            self.scratch(dtype, &[w.extents[j] as usize], ctx.max_buffer_size())?;
                        if j < 2 {
                            let bytes = w.extents[j] * elem;
                            self.copy(arcs[j], w.bases[j] * elem, temp.storage(), 0, bytes)?;
                        }
                        staged[j] = Some(temp);
                    }
                }
                Walk {
                    lens: vec![1],
                    steps: vec![vec![k, 0, n]],
                    ..w
                }
            };
            // Staged operands are read from (or written to) the start of their copy.
            let used: [&Storage; 3] =
                std::array::from_fn(|j| staged[j].as_ref().map_or(storages[j], |t| &**t.storage()));
            let mut bound = w.clone();
            for (j, t) in staged.iter().enumerate() {
                if t.is_some() {
                    bound.bases[j] = 0;
                }
            }
            let (firsts, bindings) = bind_windows(&used, &bound, whole, align, &[elem; 3]);
            // Every piece ends with the row axis; the axes before it are (part of) the batch.
            let (rows, batch) = w.lens.split_last().expect("the row axis");
            let wr = batch.len();
            let mut params = MatMulParams {
                m: *rows as u32,
                n: n as u32,
                k: k as u32,
                batch_rank: wr as u32,
                lhs_base: firsts[0] as u32,
                rhs_base: firsts[1] as u32,
                dst_base: firsts[2] as u32,
                batch_base: 0,
                layout: [
                    if ta { 1 } else { k as u32 },
                    if ta { m as u32 } else { 1 },
                    if tb { 1 } else { n as u32 },
                    if tb { k as u32 } else { 1 },
                ],
                batch_shape: [1; MAX_RANK],
                lhs_stride: [0; MAX_RANK],
                rhs_stride: [0; MAX_RANK],
                dst_stride: [0; MAX_RANK],
            };
            for d in 0..wr {
                let j = wr - 1 - d; // innermost first
                params.batch_shape[d] = batch[j] as u32;
                params.lhs_stride[d] = w.steps[j][0] as u32;
                params.rhs_stride[d] = w.steps[j][1] as u32;
                params.dst_stride[d] = w.steps[j][2] as u32;
            }
            let batches = batch.iter().product::<u64>();
            let group = wg.clamp(4, 256);
            // The epilogue's walk over the output and its leaves' bindings (checked above to
            // be one walk over whole buffers).
            let mut bindings = bindings;
            let mut bytes = bytemuck::bytes_of(&params).to_vec();
            // The ranks of the walks, as the kernel's index code is compiled for them.
            let (mut epilogue_rank, mut prologue_rank) = (0, 0);
            let program = epilogue.map(|(p, _)| p);
            if let (Some((_, leaves)), Some(plan)) = (epilogue, &leaf_plan) {
                let walk = &plan.walks[0];
                let (firsts, leaf_bindings) = plan.bind(walk);
                let n = leaves.len();
                bindings.extend(leaf_bindings.into_iter().take(n));
                let words = walk_words(&walk.lens, &walk.steps, &firsts, n);
                epilogue_rank = walk_rank(&words);
                bytes.extend_from_slice(bytemuck::cast_slice(&words));
            }
            if let Some(p) = &prologue {
                let shape = [lhs, rhs][p.operand].shape();
                let words = broadcast_walk_words(p.leaves, shape);
                prologue_rank = walk_rank(&words);
                bytes.extend_from_slice(bytemuck::cast_slice(&words));
                bindings.extend(p.leaves.iter().map(|leaf| leaf.storage().bind_whole()));
            }
            let prologue_key = prologue.map(|p| (p.program, p.operand as u8));
            let shape = MatMulShape {
                dtype,
                batches,
                rows: *rows,
                n,
                k,
                emulate64,
            };
            let variant = self.choose_matmul_kernel(&shape, group, max);
            if variant == MatMulKernel::Tiles && k.div_ceil(16) > MAX_K_LOOP {
                return Err(Error::LimitExceeded {
                    op,
                    what: format!(
                        "k = {k}: a sum of that many products in 16-wide steps of one loop"
                    ),
                    limit: "loop iterations of one invocation (lavapipe stops loops after 65 535)",
                    needed: k.div_ceil(16),
                    max: MAX_K_LOOP,
                });
            }
            // The tiles have a fixed 16 x 16 workgroup: `group` keys only the other entries.
            let kernel = Kernel::MatMul {
                variant,
                dtype,
                group: if variant == MatMulKernel::Tiles {
                    0
                } else {
                    group
                },
                epilogue: program,
                prologue: prologue_key,
                emulate64,
                epilogue_rank,
                prologue_rank,
            };
            let grid = match variant {
                // 8 x 4 outputs per invocation (see `blocks` in matmul.wgsl).
                MatMulKernel::Blocks => [
                    n.div_ceil(4 * u64::from(group)) as u32,
                    rows.div_ceil(8 * blocks_bands(n, group)) as u32,
                    0,
                ],
                MatMulKernel::Rows => {
                    // `rows_slices` invocations per output element (see `rows` in matmul.wgsl).
                    let per_group = group / rows_slices(group);
                    let columns = n.div_ceil(u64::from(per_group));
                    if columns > u64::from(max) {
                        return Err(Error::LimitExceeded {
                            op,
                            what: format!("{n} output columns in workgroups of {per_group}"),
                            limit: "max_compute_workgroups_per_dimension",
                            needed: columns,
                            max: u64::from(max),
                        });
                    }
                    [columns as u32, *rows as u32, 0]
                }
                MatMulKernel::Tiles => [n.div_ceil(16) as u32, rows.div_ceil(16) as u32, 0],
            };
            let pipeline = ctx.pipeline(&kernel)?;
            // Batch entries along the grid's z axis, in dispatches of at most `max`.
            let mut first = 0;
            while first < batches {
                let count = (batches - first).min(u64::from(max));
                let at = std::mem::offset_of!(MatMulParams, batch_base);
                bytes[at..at + 4].copy_from_slice(&(first as u32).to_ne_bytes());
                self.dispatch(
                    op,
                    &pipeline,
                    &bytes,
                    &bindings,
                    [grid[0], grid[1], count as u32],
                )?;
                first += count;
            }
            if let Some(t) = &staged[2] {
                self.copy(t.storage(), 0, arcs[2], w.bases[2] * elem, n * elem)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{matmul_kernel, MatMulKernel::*};

    #[test]
    fn matmul_kernel_follows_rows_and_adapter_kind() {
        // GPUs: tiles from 16 rows, the few-rows kernel below.
        assert_eq!(matmul_kernel(16, 256, 64, false, 256, 65535), Tiles);
        assert_eq!(matmul_kernel(15, 256, 64, false, 256, 65535), Rows);
        // CPU adapters: blocks from two rows or two workgroups, else the few-rows kernel.
        assert_eq!(matmul_kernel(64, 256, 64, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(9, 256, 64, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(1, 512, 64, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(2, 256, 64, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(1, 256, 64, true, 64, 65535), Rows);
        // Row groups beyond a grid dimension go back to tiles.
        assert_eq!(matmul_kernel(8 * 70000, 256, 64, true, 64, 65535), Tiles);
        // Sums too long for one invocation's loop go to a kernel that splits them.
        assert_eq!(matmul_kernel(64, 256, 70_000, true, 64, 65535), Tiles);
        assert_eq!(matmul_kernel(8, 256, 70_000, true, 64, 65535), Rows);
        assert_eq!(matmul_kernel(8, 256, 300_000, false, 64, 65535), Tiles);
    }
}
