//! The scatter kernel (`shaders/scatter.wgsl`): ONNX ScatterElements and ScatterND onto a
//! copy of the data, each update merged by a `combine` function generated for the dtype and
//! the reduction.

use super::{grid_for, Kernel, MAX_RANK};
use crate::{DType, Recorder, Result, Tensor};

/// How an update merges with the element it lands on (ONNX's `reduction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterReduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl ScatterReduction {
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

    pub fn name(self) -> &'static str {
        match self {
            ScatterReduction::None => "none",
            ScatterReduction::Add => "add",
            ScatterReduction::Mul => "mul",
            ScatterReduction::Max => "max",
            ScatterReduction::Min => "min",
        }
    }

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

/// The scatter kernel's source for a variant.
pub(crate) fn scatter_source(dtype: DType, reduction: ScatterReduction, emulate64: bool) -> String {
    const MARKED: &str =
        "fn combine(old: vec2<u32>, v: vec2<u32>) -> vec2<u32> { return v; } // COMBINE\n";
    debug_assert!(super::SCATTER.contains(MARKED));
    super::SCATTER.replace(MARKED, &combine_source(dtype, reduction, emulate64))
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ScatterParams {
    count: u32,
    steps: u32,
    nd: u32,
    index64: u32,
    rank: u32,
    axis_len: u32,
    axis_ustride: u32,
    axis_dstride: u32,
    axes: [[u32; 4]; MAX_RANK],
    site: u32,
    pad: [u32; 3],
}

/// Where a scatter's updates land.
pub(crate) enum ScatterPlan {
    /// ScatterElements: `columns` are the updates' axes but the scatter axis (innermost first)
    /// as (length, update stride, data stride); along the axis, `steps` updates `ustride`
    /// apart go to data positions `dstride` apart on an axis of `len`.
    Elements {
        columns: Vec<[usize; 3]>,
        steps: usize,
        len: usize,
        ustride: usize,
        dstride: usize,
    },
    /// ScatterND: `tuples` index tuples over the data's first axes (their lengths and element
    /// strides), each addressing a slice of `slice` elements.
    Nd {
        tuples: usize,
        axes: Vec<[usize; 2]>,
        slice: usize,
    },
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
            &[
                (indices, "indices"),
                (updates, "updates"),
                (out, "the output"),
            ],
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
            nd: 0,
            index64: u32::from(indices.dtype() == DType::I64),
            rank: 0,
            axis_len: 0,
            axis_ustride: 0,
            axis_dstride: 0,
            axes: [[0; 4]; MAX_RANK],
            site: 0,
            pad: [0; 3],
        };
        match plan {
            ScatterPlan::Elements {
                columns,
                steps,
                len,
                ustride,
                dstride,
            } => {
                params.count = columns.iter().map(|c| c[0]).product::<usize>() as u32;
                params.steps = *steps as u32;
                params.rank = columns.len() as u32;
                params.axis_len = *len as u32;
                params.axis_ustride = *ustride as u32;
                params.axis_dstride = *dstride as u32;
                for (k, c) in columns.iter().enumerate() {
                    params.axes[k] = [c[0] as u32, c[1] as u32, c[2] as u32, 0];
                }
            }
            ScatterPlan::Nd {
                tuples,
                axes,
                slice,
            } => {
                params.nd = 1;
                params.count = *slice as u32;
                params.steps = *tuples as u32;
                params.rank = axes.len() as u32;
                params.axis_len = *slice as u32;
                for (k, a) in axes.iter().enumerate() {
                    params.axes[k] = [a[0] as u32, 0, a[1] as u32, 0];
                }
            }
        }
        if params.count == 0 || params.steps == 0 {
            return Ok(());
        }
        let dtype = out.dtype();
        let wg = ctx.workgroup_size();
        let kernel = Kernel::Scatter {
            dtype: kernel_dtype(dtype, reduction),
            reduction,
            emulate64: reduction != ScatterReduction::None
                && super::operands::emulates64(&ctx, dtype),
            workgroup_size: wg,
        };
        let pipeline = ctx.pipeline(&kernel)?;
        let (site, faults) = self.index_site(op, rule)?;
        params.site = site;
        let bindings = [
            indices.storage().bind_whole(),
            updates.storage().bind_whole(),
            out.storage().bind_whole(),
            faults.storage().bind_whole(),
        ];
        let grid = grid_for(&ctx, op, u64::from(params.count), wg)?;
        self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)
    }
}
