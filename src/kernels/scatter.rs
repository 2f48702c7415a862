//! The scatter kernel (`shaders/scatter.wgsl`): ONNX ScatterElements and ScatterND onto a
//! copy of the data, each update merged by a `combine` function generated for the dtype and
//! the reduction.

use super::divide::Divisor;
use super::windows::Walk;
use super::{grid_for, Kernel, MAX_RANK};
use crate::storage::{Segments, Window};
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
    /// The box of the walk this pass covers (see [`scatter_pieces`]): where its first update
    /// and index lie in their windows (elements, or quads of the updates), its first index
    /// position as reported (an element of the indices, or ScatterND's tuple), and the data
    /// element its walk starts at.
    upd_off: u32,
    idx_off: u32,
    pos_first: u32,
    data_off: u32,
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

/// A box of a scatter's walk (innermost axis first, as the kernel's axes) whose updates lie in
/// one window and whose indices in another: its first coordinates and lengths, and each
/// window with the byte in it of the box's first position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScatterPiece {
    pub start: Vec<u64>,
    pub lens: Vec<u64>,
    pub updates: (Window, u64),
    pub indices: (Window, u64),
}

impl ScatterPiece {
    /// The data elements `[lo, hi)` a box of ScatterElements' walk over `axes` (the data's
    /// stride 0 along the scattered axis) can write, its index picking one of `axis_len`
    /// positions `axis_dstride` apart.
    pub(crate) fn data_reach(
        &self,
        axes: &[ElementsAxis],
        axis_len: u64,
        axis_dstride: u64,
    ) -> (u64, u64) {
        let at = |coordinate: &dyn Fn(usize) -> u64| -> u64 {
            axes.iter()
                .enumerate()
                .map(|(k, a)| coordinate(k) * a.dstride as u64)
                .sum()
        };
        let lo = at(&|k| self.start[k]);
        let last = at(&|k| self.start[k] + self.lens[k] - 1) + (axis_len - 1) * axis_dstride;
        (lo, last + 1)
    }
}

/// The walk over `axes` (innermost first; the updates laid out over them contiguously,
/// `unit` bytes per position; the indices `index_bytes` per element, `index_extent` bytes
/// read from each position's) cut in C order into boxes whose updates fit one window of at
/// most `limit` bytes of one buffer of `segments[0]`, and whose indices one of
/// `segments[1]`, windows starting at multiples of `align`. A column's steps along any axis
/// keep their order across boxes. `None` when one position cannot be placed so.
pub(crate) fn scatter_pieces(
    axes: &[ElementsAxis],
    unit: u64,
    index_bytes: u64,
    index_extent: u64,
    segments: [Segments; 2],
    limit: u64,
    align: u64,
) -> Option<Vec<ScatterPiece>> {
    let walk = Walk {
        lens: axes.iter().rev().map(|a| a.len as u64).collect(),
        steps: axes
            .iter()
            .rev()
            .map(|a| vec![a.ustride as u64 * unit, a.istride as u64 * index_bytes])
            .collect(),
        bases: vec![0, 0],
        extents: vec![unit, index_extent],
    };
    debug_assert!(
        axes.iter()
            .try_fold(1, |stride, a| (a.ustride == stride || a.len == 1)
                .then_some(stride * a.len))
            .is_some(),
        "the updates lie contiguously over the walk"
    );
    let room = limit.saturating_sub(align + 4);
    let pieces = walk.split(room, &[segments[0].segment, segments[1].segment])?;
    Some(
        pieces
            .into_iter()
            .map(|piece| {
                // The updates are contiguous: their offset is the position's number.
                let position = piece.bases[0] / unit;
                let start = axes
                    .iter()
                    .map(|a| position / a.ustride.max(1) as u64 % a.len as u64)
                    .collect();
                // The piece keeps the walk's inner axes; the outer ones it lost are one long.
                let inner = piece.lens.len();
                let lens = (0..axes.len())
                    .map(|k| match k < inner {
                        true => piece.lens[inner - 1 - k],
                        false => 1,
                    })
                    .collect();
                ScatterPiece {
                    start,
                    lens,
                    updates: piece.window(0, 1, align, segments[0]),
                    indices: piece.window(1, 1, align, segments[1]),
                }
            })
            .collect(),
    )
}

impl Recorder {
    /// Records the updates of `plan` into `out`, which holds a copy of the data. Updates and
    /// indices beyond one binding (or buffer) are read in boxes of the walk that fit a window
    /// of each, the output written in windows of it: a pass per box and window of the output
    /// its box can reach, in order, so repeated indices keep their order.
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
        if out.numel() as u64 > u64::from(u32::MAX) || updates.numel() as u64 > u64::from(u32::MAX)
        {
            return Err(super::operands::too_many(
                op,
                "the data or updates",
                out.numel().max(updates.numel()) as u64,
            ));
        }
        if updates.numel() == 0 || out.numel() == 0 {
            return Ok(());
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
            upd_off: 0,
            idx_off: 0,
            pos_first: 0,
            data_off: 0,
        };
        let dtype = out.dtype();
        let elem = dtype.size() as u64;
        let index_bytes = indices.dtype().size() as u64;
        // The walk over the updates that passes cut into boxes: its axes (innermost first, the
        // data's stride 0 along the scattered axis: the index gives that coordinate), the axis
        // the walk in order steps along, the bytes of a position in the updates (the unit the
        // output is written in too), and the index bytes read from a position's.
        let (walk, scattered, unit, index_extent);
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
                index_extent = index_bytes;
                let rows = match *distinct {
                    true => rows_of_quads(axes, *axis, dtype.size()),
                    false => None,
                };
                if let Some((quad_axes, axis_dstride)) = rows {
                    params.mode = 3;
                    params.axis_dstride = axis_dstride as u32;
                    (walk, scattered, unit) = (quad_axes, None, 16);
                } else {
                    let mut along = axes.clone();
                    along[*axis].dstride = 0;
                    if *distinct && !ctx.cpu_kernels() {
                        params.mode = 2;
                        scattered = None;
                    } else {
                        params.axis_ustride = axes[*axis].ustride as u32;
                        params.axis_istride = axes[*axis].istride as u32;
                        scattered = Some(*axis);
                    }
                    (walk, unit) = (along, elem);
                }
            }
            ScatterPlan::Nd {
                tuples,
                axes,
                slice,
            } => {
                params.mode = 1;
                params.rank = axes.len() as u32;
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
                // Claimed slices of whole quads move by quads: lengths in quads.
                let slice_bytes = *slice as u64 * elem;
                unit = match claims && slice_bytes.is_multiple_of(16) {
                    true => 16,
                    false => elem,
                };
                let slice_units = (slice_bytes / unit) as usize;
                params.axis_len = slice_units as u32;
                walk = vec![
                    ElementsAxis {
                        len: slice_units,
                        ustride: 1,
                        dstride: 1,
                        istride: 0,
                    },
                    ElementsAxis {
                        len: *tuples,
                        ustride: slice_units,
                        dstride: 0,
                        istride: axes.len(),
                    },
                ];
                // A tuple of no entries reads no index (one byte keeps the window non-empty).
                (scattered, index_extent) = (None, (axes.len() as u64 * index_bytes).max(1));
            }
        }
        let wg = ctx.workgroup_size();
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
        let limit = ctx.binding_limit();
        // The updates and indices bound whole, or in boxes of the walk that fit a window of
        // each.
        let pieces = if updates.storage().fits_one_binding(limit)
            && indices.storage().fits_one_binding(limit)
        {
            vec![ScatterPiece {
                start: vec![0; walk.len()],
                lens: walk.iter().map(|a| a.len as u64).collect(),
                updates: (updates.storage().whole_window(), 0),
                indices: (indices.storage().whole_window(), 0),
            }]
        } else {
            let align = ctx.window_alignment(op, unit.max(index_bytes))?;
            let segments = [updates.storage().segments(), indices.storage().segments()];
            scatter_pieces(
                &walk,
                unit,
                index_bytes,
                index_extent,
                segments,
                limit,
                align,
            )
            .ok_or_else(|| {
                let needed = unit.max(index_extent);
                super::windows::element_beyond_window(op, needed, align, limit)
            })?
        };
        // The output bound whole, or one pass per window of it, each writing the elements (or
        // quads) in it.
        let runs = self.unit_windows(op, out, out.byte_len().div_ceil(unit), unit)?;
        let nd = matches!(plan, ScatterPlan::Nd { .. });
        // A box's parameters, and the data units [lo, hi) it can write.
        let in_box = |params: &mut ScatterParams, piece: &ScatterPiece| -> (u64, u64) {
            params.upd_off = (piece.updates.1 / unit) as u32;
            params.idx_off = (piece.indices.1 / index_bytes) as u32;
            let dot = |stride: fn(&ElementsAxis) -> usize| -> u64 {
                walk.iter()
                    .zip(&piece.start)
                    .map(|(a, &c)| c * stride(a) as u64)
                    .sum()
            };
            params.data_off = dot(|a| a.dstride) as u32;
            if nd {
                params.pos_first = piece.start[1] as u32;
                params.count = piece.lens[0] as u32;
                params.steps = piece.lens[1] as u32;
                return (0, u64::MAX);
            }
            params.pos_first = dot(|a| a.istride) as u32;
            let boxed = walk.iter().zip(&piece.lens).map(|(a, &len)| ElementsAxis {
                len: len as usize,
                ..*a
            });
            params.rank = 0;
            params.steps = 1;
            for (k, a) in boxed.enumerate() {
                if Some(k) == scattered {
                    params.steps = a.len as u32;
                    continue;
                }
                params.axes[params.rank as usize] = ScatterAxis::new(a);
                params.rank += 1;
            }
            let used = &params.axes[..params.rank as usize];
            params.count = used.iter().map(|a| a.len).product();
            let along = [params.axis_len, params.axis_dstride].map(u64::from);
            piece.data_reach(&walk, along[0], along[1])
        };
        let in_window = |params: &mut ScatterParams, run: &(u64, u64, Window)| {
            params.dst_first = (run.2.start / unit) as u32;
            params.dst_lo = run.0 as u32;
            params.dst_hi = run.1.min(u64::from(u32::MAX)) as u32;
        };
        let bind = |piece: &ScatterPiece, window: Window| {
            [
                indices.storage().bind(piece.indices.0),
                updates.storage().bind(piece.updates.0),
                out.storage().bind(window),
                faults.storage().bind_whole(),
            ]
        };
        if claims {
            let slots = out.numel() as u64 * elem / unit / u64::from(params.axis_len);
            let claimed = self.alloc(DType::U32, &[slots as usize])?;
            self.clear(claimed.storage(), 0, slots * 4)?;
            // Every tuple claims its slice (once: in the box holding its slice's start), then
            // the winners' updates are written; the claims split nothing and write no data.
            let first = ctx.pipeline(&kernel(ScatterEntry::Claims, true))?;
            for piece in pieces.iter().filter(|p| p.start[0] == 0) {
                in_box(&mut params, piece);
                let tuples = grid_for(&ctx, op, u64::from(params.steps), wg)?;
                let all = [
                    &bind(piece, runs[0].2)[..],
                    &[claimed.storage().bind_whole()],
                ]
                .concat();
                self.dispatch(op, &first, bytemuck::bytes_of(&params), &all, tuples)?;
            }
            let entry = match unit {
                16 => ScatterEntry::ClaimedQuads,
                _ => ScatterEntry::Claimed,
            };
            for piece in &pieces {
                in_box(&mut params, piece);
                params.count *= params.steps;
                params.slice = Divisor::new(params.axis_len);
                let second = ctx.pipeline(&kernel(entry, params.slice.shift < 32))?;
                let grid = grid_for(&ctx, op, u64::from(params.count), wg)?;
                for run in &runs {
                    in_window(&mut params, run);
                    let all = [&bind(piece, run.2)[..], &[claimed.storage().bind_whole()]].concat();
                    self.dispatch(op, &second, bytemuck::bytes_of(&params), &all, grid)?;
                }
            }
            self.release(claimed);
            return Ok(());
        }
        let entry = match params.mode {
            3 => ScatterEntry::Rows,
            _ => ScatterEntry::Main,
        };
        for piece in &pieces {
            let (lo, hi) = in_box(&mut params, piece);
            if params.count == 0 || params.steps == 0 {
                continue;
            }
            // ScatterND's axes are not split (its tuples index them).
            let used = &params.axes[..params.rank as usize];
            let pow2 = nd || used.iter().all(|a| a.divisor.shift < 32);
            let pipeline = ctx.pipeline(&kernel(entry, pow2))?;
            let grid = grid_for(&ctx, op, u64::from(params.count), wg)?;
            // The walks in order run in stretches of steps: each dispatch goes on where the
            // one before stopped, after its writes; each window's in turn (an element lies in
            // one).
            let (steps, chunk) = match params.mode {
                0 | 1 => (
                    params.steps,
                    steps_per_dispatch(params.mode, params.rank, dtype.size()),
                ),
                _ => (params.steps, params.steps),
            };
            for run in runs.iter().filter(|run| run.0 < hi && lo < run.1) {
                in_window(&mut params, run);
                let bindings = bind(piece, run.2);
                let mut first = 0;
                while first < steps {
                    params.first = first;
                    params.steps = chunk.min(steps - first);
                    self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
                    first += params.steps;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every position of the box in C order (outermost axis first), as coordinates innermost
    /// first.
    fn positions(piece: &ScatterPiece) -> Vec<Vec<u64>> {
        let rank = piece.lens.len();
        let count: u64 = piece.lens.iter().product();
        (0..count)
            .map(|mut p| {
                (0..rank)
                    .map(|k| {
                        let c = piece.start[k] + p % piece.lens[k];
                        p /= piece.lens[k];
                        c
                    })
                    .collect()
            })
            .collect()
    }

    /// Random walks of ScatterElements (updates no longer than the data off the scattered
    /// axis, indices repeating along some axes) and of ScatterND (slices of tuples) cut by
    /// [`scatter_pieces`] under small limits: the boxes cover every position once, in C order
    /// (so a column's steps keep their order); each position's update and index bytes lie in
    /// the box's windows, which start aligned, fit the limit and lie in one buffer, the box's
    /// first position where its offsets say; and every data element a box can write (any index
    /// value) lies in its `data_reach`, whose ends it reaches.
    #[test]
    fn boxes_cover_the_walk_in_order_within_their_windows() {
        let mut next = crate::kernels::windows::test_numbers(11);
        let (mut placed, mut split) = (0, 0);
        for case in 0..3000 {
            let nd = case % 3 == 0;
            let align = [16u64, 32][next(2) as usize];
            let unit = [1u64, 2, 4, 8, 16][next(5) as usize];
            let index_bytes = [4u64, 8][next(2) as usize];
            let rank = 1 + next(3) as usize;
            let mut axes = Vec::new();
            let (mut ustride, mut istride, mut dstride) = (1, 1, 1);
            let scattered = next(rank as u64) as usize;
            let (mut axis_len, mut axis_dstride) = (1, 0);
            let mut k_entries = 0;
            if nd {
                k_entries = 1 + next(3) as usize;
                let (slice, tuples) = (1 + next(40) as usize, 1 + next(12) as usize);
                axes.push(ElementsAxis {
                    len: slice,
                    ustride: 1,
                    dstride: 1,
                    istride: 0,
                });
                axes.push(ElementsAxis {
                    len: tuples,
                    ustride: slice,
                    dstride: 0,
                    istride: k_entries,
                });
            } else {
                for k in 0..rank {
                    let data_len = 1 + next(6) as usize;
                    let len = match k == scattered {
                        true => 1 + next(7) as usize,
                        false => 1 + next(data_len as u64) as usize,
                    };
                    let repeats = k != scattered && next(4) == 0;
                    axes.push(ElementsAxis {
                        len,
                        ustride,
                        dstride: if k == scattered { 0 } else { dstride },
                        istride: if repeats { 0 } else { istride },
                    });
                    if k == scattered {
                        (axis_len, axis_dstride) = (data_len as u64, dstride as u64);
                    }
                    dstride *= data_len;
                    ustride *= len;
                    istride *= if repeats { 1 } else { len };
                }
            }
            let count: usize = axes.iter().map(|a| a.len).product();
            let index_count =
                axes.iter().map(|a| (a.len - 1) * a.istride).sum::<usize>() + k_entries.max(1);
            let index_extent = match nd {
                true => k_entries as u64 * index_bytes,
                false => index_bytes,
            };
            let limit = 40 + next(200);
            let segment =
                |next: &mut dyn FnMut(u64) -> u64| [64u64, 96, 128, 256, 1 << 20][next(5) as usize];
            let segments = [
                Segments {
                    segment: segment(&mut next),
                    size: (count as u64 * unit).next_multiple_of(4),
                },
                Segments {
                    segment: segment(&mut next),
                    size: index_count as u64 * index_bytes,
                },
            ];
            let Some(pieces) = scatter_pieces(
                &axes,
                unit,
                index_bytes,
                index_extent,
                segments,
                limit,
                align,
            ) else {
                continue;
            };
            placed += 1;
            split += usize::from(pieces.len() > 1);
            let layout = format!("{axes:?} unit {unit} index {index_bytes} limit {limit}");
            let mut walked = 0u64;
            for piece in &pieces {
                let inside = |w: &(Window, u64), segments: &Segments, first: u64, end: u64| {
                    let base = w.0.segment as u64 * segments.segment;
                    w.0.start == base + w.0.offset
                        && w.0.start <= first
                        && end <= w.0.start + w.0.size
                        && w.0.offset.is_multiple_of(align)
                        && w.0.size <= limit
                };
                let all = positions(piece);
                let byte = |c: &[u64], stride: fn(&ElementsAxis) -> usize, size: u64| {
                    axes.iter()
                        .zip(c)
                        .map(|(a, &x)| x * stride(a) as u64)
                        .sum::<u64>()
                        * size
                };
                let first = &all[0];
                assert_eq!(
                    piece.updates.0.start + piece.updates.1,
                    byte(first, |a| a.ustride, unit),
                    "{layout}"
                );
                assert_eq!(
                    piece.indices.0.start + piece.indices.1,
                    byte(first, |a| a.istride, index_bytes),
                    "{layout}"
                );
                let (lo, hi) = piece.data_reach(&axes, axis_len, axis_dstride);
                let (mut least, mut most) = (u64::MAX, 0);
                for c in &all {
                    let u = byte(c, |a| a.ustride, unit);
                    assert_eq!(u / unit, walked, "{layout}: out of order");
                    walked += 1;
                    assert!(
                        inside(&piece.updates, &segments[0], u, u + unit),
                        "{layout}"
                    );
                    let i = byte(c, |a| a.istride, index_bytes);
                    assert!(
                        inside(&piece.indices, &segments[1], i, i + index_extent),
                        "{layout}"
                    );
                    if nd {
                        continue;
                    }
                    for v in 0..axis_len {
                        let d = byte(c, |a| a.dstride, 1) + v * axis_dstride;
                        (least, most) = (least.min(d), most.max(d));
                    }
                }
                if !nd {
                    assert!(lo == least && hi == most + 1, "{layout}: {lo}..{hi}");
                }
            }
            assert_eq!(walked, count as u64, "{layout}");
        }
        assert!(
            placed > 2500 && split > 1000,
            "{placed} of 3000 placed, {split} split"
        );
    }
}
