//! The scatter kernel (`shaders/scatter.wgsl`): ONNX ScatterElements and ScatterND onto a
//! copy of the data, each update merged by a `combine` function generated for the dtype and
//! the reduction.

use super::divide::Divisor;
use super::windows::unit_runs;
use super::{grid_for, Kernel, MAX_RANK};
use crate::storage::Window;
use crate::{DType, Recorder, Result, Tensor};

/// How an update merges with the element it lands on (ONNX's `reduction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterReduction {
    /// The update replaces the element.
    None,
    /// The update is added.
    Add,
    /// The element is multiplied by the update.
    Mul,
    /// The larger of the two.
    Max,
    /// The smaller of the two.
    Min,
}

impl ScatterReduction {
    /// The reduction named by ONNX's `reduction` text.
    pub fn parse(name: &str) -> Option<ScatterReduction> {
        Some(match name {
            "none" => ScatterReduction::None,
            "add" => ScatterReduction::Add,
            "mul" => ScatterReduction::Mul,
            "max" => ScatterReduction::Max,
            "min" => ScatterReduction::Min,
            _ => return None,
        })
    }

    /// ONNX's name of the reduction.
    pub fn name(self) -> &'static str {
        match self {
            ScatterReduction::None => "none",
            ScatterReduction::Add => "add",
            ScatterReduction::Mul => "mul",
            ScatterReduction::Max => "max",
            ScatterReduction::Min => "min",
        }
    }

    /// Every reduction.
    pub const ALL: [ScatterReduction; 5] = [
        ScatterReduction::None,
        ScatterReduction::Add,
        ScatterReduction::Mul,
        ScatterReduction::Max,
        ScatterReduction::Min,
    ];
}

/// The dtype a scatter kernel is compiled for: replacing moves bits, so one kernel per element
/// size serves every dtype.
pub(crate) fn kernel_dtype(dtype: DType, reduction: ScatterReduction) -> DType {
    match (reduction, dtype.size()) {
        (ScatterReduction::None, 1) => DType::U8,
        (ScatterReduction::None, 2) => DType::U16,
        (ScatterReduction::None, 4) => DType::U32,
        (ScatterReduction::None, _) => DType::U64,
        _ => dtype,
    }
}

/// WGSL of `fn combine(old: vec2<u32>, v: vec2<u32>) -> vec2<u32>` with its helpers: the
/// element `old` holds (its bits as the kernel loads them) merged with update `v`.
/// `max` and `min` keep `old` unless the update is greater (smaller), as `std::max` does.
pub(crate) fn combine_source(dtype: DType, reduction: ScatterReduction, emulate64: bool) -> String {
    const SIGNATURE: &str = "fn combine(old: vec2<u32>, v: vec2<u32>) -> vec2<u32>";
    if reduction == ScatterReduction::None {
        return format!("{SIGNATURE} {{ return v; }}\n");
    }
    if emulate64 && dtype == DType::F64 {
        // As the native path: max and min keep `old` where either is NaN.
        let body = match reduction {
            ScatterReduction::Add => "sf64_add(old, v)",
            ScatterReduction::Mul => "sf64_mul(old, v)",
            ScatterReduction::Max => "select(old, v, sf64_lt(old, v))",
            _ => "select(old, v, sf64_lt(v, old))",
        };
        return format!(
            "{}\n{}\n{SIGNATURE} {{ return {body}; }}\n",
            super::words::I64_EMULATION,
            super::words::F64_EMULATION
        );
    }
    if emulate64 {
        let less = if dtype == DType::I64 {
            "lt_s64"
        } else {
            "lt_u64"
        };
        let body = match reduction {
            ScatterReduction::Add => "add64(old, v)".to_string(),
            ScatterReduction::Mul => "mul64(old, v)".to_string(),
            ScatterReduction::Max => format!("select(old, v, {less}(old, v))"),
            _ => format!("select(old, v, {less}(v, old))"),
        };
        return format!(
            "{}\n{SIGNATURE} {{ return {body}; }}\n",
            super::words::I64_EMULATION
        );
    }
    let pair = |w: &str| format!("((u64({w}.y) << 32u) | u64({w}.x))");
    let decode = |w: &str| match dtype {
        DType::F32 => format!("bitcast<f32>({w}.x)"),
        DType::F16 => format!("f16_to_f32({w}.x)"),
        DType::BF16 => format!("bitcast<f32>({w}.x << 16u)"),
        DType::I8 => format!("(bitcast<i32>({w}.x << 24u) >> 24u)"),
        DType::I16 => format!("(bitcast<i32>({w}.x << 16u) >> 16u)"),
        DType::I32 => format!("bitcast<i32>({w}.x)"),
        DType::U64 => pair(w),
        DType::I64 => format!("bitcast<i64>{}", pair(w)),
        DType::F64 => format!("bitcast<f64>{}", pair(w)),
        _ => format!("{w}.x"),
    };
    let op = match reduction {
        ScatterReduction::Add => "a + b",
        ScatterReduction::Mul => "a * b",
        ScatterReduction::Max => "select(a, b, a < b)",
        _ => "select(a, b, b < a)",
    };
    format!(
        "{}\n{SIGNATURE} {{\n    let a = {};\n    let b = {};\n    let r = {op};\n    return {};\n}}\n",
        super::words::word_helpers(),
        decode("old"),
        decode("v"),
        super::words::bits_expression(dtype)
    )
}

/// The scatter kernel's source for a variant (with ScatterND's claims for their two entry
/// points).
pub(crate) fn scatter_source(
    dtype: DType,
    reduction: ScatterReduction,
    emulate64: bool,
    entry: ScatterEntry,
) -> String {
    const MARKED: &str =
        "fn combine(old: vec2<u32>, v: vec2<u32>) -> vec2<u32> { return v; } // COMBINE\n";
    const ATOMIC_DST: &str = "var<storage, read_write> dst: array<atomic<u32>>; // DST\n";
    const WORD_APPLY: &str = "fn apply_here(t: u32, v: vec2<u32>) {
    if ELEM_BYTES == 8u {
        let r = combine(vec2<u32>(dst[2u * t], dst[2u * t + 1u]), v);
        dst[2u * t] = r.x;
        dst[2u * t + 1u] = r.y;
        return;
    }
    dst[t] = combine(vec2<u32>(dst[t], 0u), v).x;
}
";
    debug_assert!(super::SCATTER.contains(MARKED) && super::SCATTER.contains(ATOMIC_DST));
    let mut source = super::SCATTER.replace(MARKED, &combine_source(dtype, reduction, emulate64));
    if !entry.claims() {
        source.truncate(source.find("// BEGIN CLAIMS").expect("marked"));
    }
    if dtype.size() >= 4 {
        // Whole words: no other invocation touches an element's words, so plain accesses.
        let start = source.find("// BEGIN SUB-WORD APPLY").expect("marked");
        let end = source.find("// END SUB-WORD APPLY\n").expect("marked");
        source.replace_range(start..end + "// END SUB-WORD APPLY\n".len(), WORD_APPLY);
        source = source.replace(ATOMIC_DST, "var<storage, read_write> dst: array<u32>;\n");
    }
    source
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ScatterParams {
    count: u32,
    steps: u32,
    mode: u32,
    index64: u32,
    rank: u32,
    axis_len: u32,
    axis_ustride: u32,
    axis_dstride: u32,
    axes: [ScatterAxis; MAX_RANK],
    site: u32,
    axis_istride: u32,
    slice: Divisor,
    /// The first step of this dispatch (the walks in order run in several, see
    /// [`steps_per_dispatch`]).
    first: u32,
    /// The output's window: its first element (quad for the quad entries), and the elements
    /// this pass writes.
    dst_first: u32,
    dst_lo: u32,
    dst_hi: u32,
}

/// Steps of the walks in order one invocation takes per dispatch: lavapipe counts every
/// iteration of an invocation's loops against one budget (see
/// [`super::INVOCATION_LOOP_BUDGET`]), and a step loops over the tuple's entries (ScatterND)
/// and, for 1- and 2-byte elements, until its compare-and-swap holds. ScatterND over 20 000
/// single elements kept only its first 13 107 updates there when one dispatch walked them all.
fn steps_per_dispatch(mode: u32, tuple_len: u32, elem_bytes: usize) -> u32 {
    let per_step =
        2 + 2 * if mode == 1 { tuple_len } else { 1 } + if elem_bytes < 4 { 8 } else { 0 };
    (super::LOOP_ITERATIONS_PER_DISPATCH as u32 / per_step).max(1)
}

/// The scatter kernel's entry points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterEntry {
    /// `main`: the walks in order, and distinct ScatterElements updates one each.
    Main,
    /// `main_rows`: distinct ScatterElements updates by 16-byte quads of rows.
    Rows,
    /// `main_claims`, then `main_claimed`: ScatterND without a reduction, every update at
    /// once, the last tuple on a data slice winning (its claim).
    Claims,
    /// `main_claimed`: each update element written where its tuple won the claim.
    Claimed,
    /// `main_claimed_quads`: `Claimed` by 16-byte quads, for slices of whole quads.
    ClaimedQuads,
}

impl ScatterEntry {
    /// Every entry point.
    pub const ALL: [ScatterEntry; 5] = [
        ScatterEntry::Main,
        ScatterEntry::Rows,
        ScatterEntry::Claims,
        ScatterEntry::Claimed,
        ScatterEntry::ClaimedQuads,
    ];

    /// One of ScatterND's claims passes (their module has the claims' binding).
    pub fn claims(self) -> bool {
        matches!(
            self,
            ScatterEntry::Claims | ScatterEntry::Claimed | ScatterEntry::ClaimedQuads
        )
    }

    /// The entry point's name in the shader.
    pub fn name(self) -> &'static str {
        match self {
            ScatterEntry::Main => "main",
            ScatterEntry::Rows => "main_rows",
            ScatterEntry::Claims => "main_claims",
            ScatterEntry::Claimed => "main_claimed",
            ScatterEntry::ClaimedQuads => "main_claimed_quads",
        }
    }
}

/// An axis of the kernel's walk: length, the updates', data's and indices' strides, the length
/// as `divide` takes it.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct ScatterAxis {
    len: u32,
    ustride: u32,
    dstride: u32,
    istride: u32,
    divisor: Divisor,
    pad: [u32; 2],
}

impl ScatterAxis {
    fn new(a: ElementsAxis) -> ScatterAxis {
        ScatterAxis {
            len: a.len as u32,
            ustride: a.ustride as u32,
            dstride: a.dstride as u32,
            istride: a.istride as u32,
            divisor: Divisor::new(a.len as u32),
            pad: [0; 2],
        }
    }
}

/// An axis of the updates of a ScatterElements: its length and the element strides of the
/// updates, the data and the indices along it (0 where the indices repeat).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ElementsAxis {
    pub len: usize,
    pub ustride: usize,
    pub dstride: usize,
    pub istride: usize,
}

/// Where a scatter's updates land.
pub(crate) enum ScatterPlan {
    /// ScatterElements: `axes` are the updates' (innermost first), `axis` the position there
    /// of the one scattered along, whose data positions lie on an axis of `len`. Updates are
    /// applied in order along it, column by column, unless they land on `distinct` elements:
    /// then one invocation per 16-byte quad where the index repeats over rows of whole quads
    /// (on lavapipe 1.7x the walk's speed for 4-byte elements, 5.6x for 2-byte ones), else, on
    /// GPUs, one per update.
    Elements {
        axes: Vec<ElementsAxis>,
        axis: usize,
        len: usize,
        distinct: bool,
    },
    /// ScatterND: `tuples` index tuples over the data's first axes (their lengths and element
    /// strides), each addressing a slice of `slice` elements. Without a reduction (on CPU
    /// adapters only for slices of whole 16-byte quads), several tuples claim their slices
    /// first (4 bytes per data slice), then every update element (or quad) is written at once
    /// by the last tuple on its slice; else a slice's elements run in parallel and its tuples
    /// one after another.
    Nd {
        tuples: usize,
        axes: Vec<[usize; 2]>,
        slice: usize,
    },
}

/// The walk of distinct updates by whole 16-byte quads, where the index repeats over the axes
/// after the scattered one (`axes[..axis]`, innermost first) and those lie alike in the updates
/// and the data (equal strides: the same lengths but the outermost's, so each update row is
/// a run at the start of its data row) and make rows of whole quads: the row's
/// quads as the innermost axis, then the scattered axis and the outer ones, data strides in
/// quads; and the data stride along the scattered axis in quads. None where they do not.
fn rows_of_quads(
    axes: &[ElementsAxis],
    axis: usize,
    elem_bytes: usize,
) -> Option<(Vec<ElementsAxis>, usize)> {
    let inner = &axes[..axis];
    if inner
        .iter()
        .any(|a| a.istride != 0 || a.ustride != a.dstride)
    {
        return None;
    }
    // The updates' rows may be shorter than the data's (a prefix of each): both whole quads.
    let row_bytes = inner.iter().map(|a| a.len).product::<usize>() * elem_bytes;
    let data_row_bytes = axes[axis].dstride * elem_bytes;
    if row_bytes == 0 || !row_bytes.is_multiple_of(16) || !data_row_bytes.is_multiple_of(16) {
        return None;
    }
    let quads = |elements: usize| elements * elem_bytes / 16;
    let mut walk = vec![ElementsAxis {
        len: row_bytes / 16,
        ustride: 1,
        dstride: 1,
        istride: 0,
    }];
    walk.extend(axes[axis..].iter().enumerate().map(|(k, a)| ElementsAxis {
        dstride: if k == 0 { 0 } else { quads(a.dstride) },
        ustride: quads(a.ustride),
        ..*a
    }));
    Some((walk, quads(axes[axis].dstride)))
}

impl Recorder {
    /// Records the updates of `plan` into `out`, which holds a copy of the data.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scatter_into(
        &mut self,
        op: &'static str,
        indices: &Tensor,
        updates: &Tensor,
        plan: &ScatterPlan,
        reduction: ScatterReduction,
        rule: crate::recorder::IndexRule,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        super::operands::check_bound_whole(
            &ctx,
            op,
            &[(indices, "indices"), (updates, "updates")],
        )?;
        if out.numel() as u64 > u64::from(u32::MAX) || updates.numel() as u64 > u64::from(u32::MAX)
        {
            return Err(super::operands::too_many(
                op,
                "the data or updates",
                out.numel().max(updates.numel()) as u64,
            ));
        }
        let mut params = ScatterParams {
            count: 0,
            steps: 0,
            mode: 0,
            index64: u32::from(indices.dtype() == DType::I64),
            rank: 0,
            axis_len: 0,
            axis_ustride: 0,
            axis_dstride: 0,
            axes: [ScatterAxis::default(); MAX_RANK],
            site: 0,
            axis_istride: 0,
            slice: Divisor::default(),
            first: 0,
            dst_first: 0,
            dst_lo: 0,
            dst_hi: u32::MAX,
        };
        let mut claims = false;
        match plan {
            ScatterPlan::Elements {
                axes,
                axis,
                len,
                distinct,
            } => {
                params.axis_len = *len as u32;
                params.axis_dstride = axes[*axis].dstride as u32;
                let rows = match *distinct {
                    true => rows_of_quads(axes, *axis, out.dtype().size()),
                    false => None,
                };
                if let Some((quad_axes, axis_dstride)) = rows {
                    params.mode = 3;
                    params.count = quad_axes.iter().map(|a| a.len).product::<usize>() as u32;
                    params.steps = 1;
                    params.rank = quad_axes.len() as u32;
                    params.axis_dstride = axis_dstride as u32;
                    for (k, a) in quad_axes.into_iter().enumerate() {
                        params.axes[k] = ScatterAxis::new(a);
                    }
                } else if *distinct && !ctx.cpu_kernels() {
                    params.mode = 2;
                    params.count = updates.numel() as u32;
                    params.steps = 1;
                    params.rank = axes.len() as u32;
                    for (k, a) in axes.iter().enumerate() {
                        let dstride = if k == *axis { 0 } else { a.dstride };
                        params.axes[k] = ScatterAxis::new(ElementsAxis { dstride, ..*a });
                    }
                } else {
                    let columns = axes.iter().enumerate().filter(|&(k, _)| k != *axis);
                    params.count = columns.clone().map(|(_, a)| a.len).product::<usize>() as u32;
                    params.steps = axes[*axis].len as u32;
                    params.rank = axes.len() as u32 - 1;
                    params.axis_ustride = axes[*axis].ustride as u32;
                    params.axis_istride = axes[*axis].istride as u32;
                    for (k, (_, a)) in columns.enumerate() {
                        params.axes[k] = ScatterAxis::new(*a);
                    }
                }
            }
            ScatterPlan::Nd {
                tuples,
                axes,
                slice,
            } => {
                params.mode = 1;
                params.count = *slice as u32;
                params.steps = *tuples as u32;
                params.rank = axes.len() as u32;
                params.axis_len = *slice as u32;
                params.slice = Divisor::new(*slice as u32);
                let per_slot = (*slice).max(1);
                for (k, a) in axes.iter().enumerate() {
                    params.axes[k] = ScatterAxis::new(ElementsAxis {
                        len: a[0],
                        dstride: a[1],
                        // The axis' stride in the data's slices, for the claims.
                        ustride: a[1] / per_slot,
                        ..ElementsAxis::default()
                    });
                }
                let slots = (out.numel() / per_slot) as u64;
                // The walk in order is one invocation's chain of tuples per slice element: on
                // lavapipe 65 536 single elements took 14.4 ms in order and 2.8 claimed. The
                // claims are bound whole: one buffer that one binding holds.
                claims = reduction == ScatterReduction::None
                    && *tuples > 1
                    && *slice > 0
                    && slots * 4 <= ctx.binding_limit().min(ctx.max_buffer_size());
                if claims {
                    params.count = updates.numel() as u32;
                }
            }
        }
        if params.count == 0 || params.steps == 0 {
            return Ok(());
        }
        let dtype = out.dtype();
        let wg = ctx.workgroup_size();
        let used = &params.axes[..params.rank as usize];
        let kernel = |entry: ScatterEntry, pow2_divisors: bool| Kernel::Scatter {
            dtype: kernel_dtype(dtype, reduction),
            reduction,
            emulate64: reduction != ScatterReduction::None
                && super::operands::emulated(&ctx, dtype),
            workgroup_size: wg,
            pow2_divisors,
            entry,
        };
        let (site, faults) = self.index_site(op, rule)?;
        params.site = site;
        // The output bound whole, or one pass per window of it, each writing the elements (or
        // quads, `unit` bytes) in it; the indices and updates are bound whole.
        let limit = ctx.binding_limit();
        let whole = out.storage().fits_one_binding(limit);
        let windows = |unit: u64| -> Result<Vec<(u64, u64, Window)>> {
            if whole {
                return Ok(vec![(0, u64::from(u32::MAX), out.storage().whole_window())]);
            }
            let align = ctx.window_alignment(op, unit)?;
            let units = out.byte_len().div_ceil(unit);
            unit_runs(0, units, unit, &out.storage().segments(), limit, align)
                .ok_or_else(|| super::windows::element_beyond_window(op, unit, align, limit))
        };
        let in_window = |params: &mut ScatterParams, unit: u64, run: &(u64, u64, Window)| {
            params.dst_first = (run.2.start / unit) as u32;
            params.dst_lo = run.0 as u32;
            params.dst_hi = run.1.min(u64::from(u32::MAX)) as u32;
        };
        let bind = |window: Window| {
            [
                indices.storage().bind_whole(),
                updates.storage().bind_whole(),
                out.storage().bind(window),
                faults.storage().bind_whole(),
            ]
        };
        let elem = dtype.size() as u64;
        if claims {
            let slots = out.numel() / params.axis_len as usize;
            let claimed = self.alloc(DType::U32, &[slots])?;
            self.clear(claimed.storage(), 0, slots as u64 * 4)?;
            // Slices of whole quads move by quads: lengths in quads.
            let slice_bytes = params.axis_len as u64 * elem;
            let quads = slice_bytes.is_multiple_of(16);
            let unit = if quads { 16 } else { elem };
            let runs = windows(unit)?;
            // The claims split nothing and write no data; the writes split positions by the
            // slice's length.
            let first = ctx.pipeline(&kernel(ScatterEntry::Claims, true))?;
            let tuples = grid_for(&ctx, op, u64::from(params.steps), wg)?;
            let all = [&bind(runs[0].2)[..], &[claimed.storage().bind_whole()]].concat();
            self.dispatch(op, &first, bytemuck::bytes_of(&params), &all, tuples)?;
            let entry = if quads {
                params.axis_len = (slice_bytes / 16) as u32;
                params.slice = Divisor::new(params.axis_len);
                params.count = (updates.numel() as u64 * elem / 16) as u32;
                ScatterEntry::ClaimedQuads
            } else {
                ScatterEntry::Claimed
            };
            let second = ctx.pipeline(&kernel(entry, params.slice.shift < 32))?;
            let grid = grid_for(&ctx, op, u64::from(params.count), wg)?;
            for run in &runs {
                in_window(&mut params, unit, run);
                let all = [&bind(run.2)[..], &[claimed.storage().bind_whole()]].concat();
                self.dispatch(op, &second, bytemuck::bytes_of(&params), &all, grid)?;
            }
            self.release(claimed);
            return Ok(());
        }
        let (entry, unit) = match params.mode {
            3 => (ScatterEntry::Rows, 16),
            _ => (ScatterEntry::Main, elem),
        };
        let runs = windows(unit)?;
        // ScatterND's axes are not split (its tuples index them).
        let pow2 = params.mode == 1 || used.iter().all(|a| a.divisor.shift < 32);
        let pipeline = ctx.pipeline(&kernel(entry, pow2))?;
        let grid = grid_for(&ctx, op, u64::from(params.count), wg)?;
        // The walks in order run in stretches of steps: each dispatch goes on where the one
        // before stopped, after its writes; each window's in turn (an element lies in one).
        let (steps, chunk) = match params.mode {
            0 | 1 => (
                params.steps,
                steps_per_dispatch(params.mode, params.rank, dtype.size()),
            ),
            _ => (params.steps, params.steps),
        };
        for run in &runs {
            in_window(&mut params, unit, run);
            let bindings = bind(run.2);
            let mut first = 0;
            while first < steps {
                params.first = first;
                params.steps = chunk.min(steps - first);
                self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                first += params.steps;
            }
        }
        Ok(())
    }
}
