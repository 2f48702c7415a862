//! What the compute kernels (element-wise and MatMul) share: WGSL types and source templates,
//! and the binding of their three operands whole or in windows.

use crate::storage::Storage;
use crate::{DType, Error};

use super::windows::Walk;

/// The WGSL scalar type of a dtype, where WGSL can compute it without optional features.
pub fn wgsl_type(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("f32"),
        DType::I32 => Some("i32"),
        DType::U32 => Some("u32"),
        _ => None,
    }
}

/// The WGSL scalar type the element-wise kernel (Cast included) computes `dtype` in: the
/// 32-bit types, and
/// `f64`, `i64`, `u64` on adapters with wgpu's `SHADER_F64` / `SHADER_INT64` features (see
/// [`native_feature`]).
pub fn elementwise_type(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F64 => Some("f64"),
        DType::I64 => Some("i64"),
        DType::U64 => Some("u64"),
        d => wgsl_type(d),
    }
}

/// The wgpu feature an element type needs in shaders, if any. f64 kernels also take its bits
/// as u64 (NaN tests, the f64 math's exponent arithmetic).
pub fn native_feature(dtype: DType) -> Option<(wgpu::Features, &'static str)> {
    match dtype {
        DType::F64 => Some((
            wgpu::Features::SHADER_F64.union(wgpu::Features::SHADER_INT64),
            "SHADER_F64 (with SHADER_INT64)",
        )),
        DType::I64 | DType::U64 => Some((wgpu::Features::SHADER_INT64, "SHADER_INT64")),
        _ => None,
    }
}

/// Whether a kernel typed by `dtype` (reductions, CumSum, TopK, MatMul) computes it on the
/// i64/u64 emulation in context `ctx`: a 64-bit integer and no `SHADER_INT64`.
pub fn emulates64(ctx: &crate::Context, dtype: DType) -> bool {
    matches!(dtype, DType::I64 | DType::U64)
        && !ctx.features().contains(wgpu::Features::SHADER_INT64)
}

/// Whether a kernel typed by `dtype` computes it on the f64 emulation in context `ctx`: f64
/// without both `SHADER_F64` and `SHADER_INT64` (the kernels that have an f64 emulation:
/// MatMul, the reductions and TopK; the others refuse f64 there).
pub fn emulates_f64(ctx: &crate::Context, dtype: DType) -> bool {
    dtype == DType::F64
        && !ctx
            .features()
            .contains(wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64)
}

/// Whether a kernel typed by `dtype` (reductions, TopK, MatMul) holds it on u32 pairs in
/// context `ctx`: i64 or u64 on the i64 emulation, or f64 on the f64 emulation.
pub fn emulated(ctx: &crate::Context, dtype: DType) -> bool {
    emulates64(ctx, dtype) || emulates_f64(ctx, dtype)
}

/// `template` with its `// ELEMENT TYPE` line made `alias T = ...` of the type `dtype`
/// computes in (the per-dtype kernels with one element type: CumSum, TopK, the tree walk).
/// With `emulated` (i64, u64 or f64 on u32 pairs), `T` is `vec2<u32>` and each
/// `(marker, line)` of `emulated` replaces its marked line, after the emulation's helpers (the
/// f64 ones too for f64); without, those lines stay.
pub(crate) fn element_typed(
    template: &str,
    dtype: DType,
    emulated: Option<&[(&str, String)]>,
) -> String {
    let Some(lines) = emulated else {
        let ty = elementwise_type(dtype).unwrap_or("f32");
        return specialize(template, &[("// ELEMENT TYPE", format!("alias T = {ty};"))]);
    };
    let mut replacements = vec![(
        "// ELEMENT TYPE",
        match dtype {
            DType::F64 => format!(
                "alias T = vec2<u32>;\n{}\n{}",
                super::words::I64_EMULATION,
                super::words::F64_EMULATION
            ),
            _ => format!("alias T = vec2<u32>;\n{}", super::words::I64_EMULATION),
        },
    )];
    replacements.extend(lines.iter().cloned());
    specialize(template, &replacements)
}

/// Replaces each marked line of a template (the line containing the marker) by the given text.
/// A marker that is missing or repeated is a bug in the crate, caught by the shader tests.
pub(crate) fn specialize(template: &str, replacements: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut used = vec![0; replacements.len()];
    for line in template.lines() {
        match replacements
            .iter()
            .position(|(marker, _)| line.contains(marker))
        {
            Some(k) => {
                used[k] += 1;
                out.push_str(&replacements[k].1);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    assert!(
        used.iter().all(|&u| u == 1),
        "shader template markers: {used:?}"
    );
    out
}

/// The bindings of `storages` (elements of `elems[j]` bytes) for piece `w` of a walk (whole
/// buffers when `whole`, else the aligned windows `w` needs), and the element index of the
/// piece's first position in each.
pub(crate) fn bind_windows<'a>(
    storages: &[&'a Storage],
    w: &Walk,
    whole: bool,
    align: u64,
    elems: &[u64],
) -> (Vec<u64>, Vec<wgpu::BindingResource<'a>>) {
    let mut firsts = vec![0u64; storages.len()];
    let mut bindings = Vec::with_capacity(storages.len());
    for (j, &storage) in storages.iter().enumerate() {
        if whole {
            firsts[j] = w.bases[j];
            bindings.push(storage.bind_whole());
        } else {
            let (window, first) = w.window(j, elems[j], align, storage.segments());
            firsts[j] = first;
            bindings.push(storage.bind(window));
        }
    }
    (firsts, bindings)
}

/// Whether storages can all be bound whole, else the elements (of `elems[j]` bytes) per
/// buffer of each (for [`Walk::split`]).
pub(crate) fn layout_of(storages: &[&Storage], limit: u64, elems: &[u64]) -> (bool, Vec<u64>) {
    let whole = storages.iter().all(|s| s.fits_one_binding(limit));
    let segments = storages
        .iter()
        .zip(elems)
        .map(|(s, e)| s.segments().segment / e)
        .collect();
    (whole, segments)
}

/// Checks that each of `tensors` lies in one buffer the device binds whole, as a kernel that
/// reads it through one binding needs; the first that does not is an error naming it (`what`).
pub(crate) fn check_bound_whole(
    ctx: &crate::Context,
    op: &'static str,
    tensors: &[(&crate::Tensor, &str)],
) -> crate::Result<()> {
    let limit = ctx.binding_limit();
    for (t, what) in tensors {
        if !t.storage().fits_one_binding(limit) {
            return Err(Error::LimitExceeded {
                op,
                what: format!("{what} bound at once"),
                limit: "max_storage_buffer_binding_size",
                needed: t.byte_len(),
                max: limit,
            });
        }
    }
    Ok(())
}

impl crate::Recorder {
    /// Units `[0, units)` of `unit` bytes of `t`: one window of all of it when one binding
    /// holds it, else runs that each lie in one window ([`super::windows::unit_runs`]);
    /// refused when one unit cannot be placed.
    pub(crate) fn unit_windows(
        &self,
        op: &'static str,
        t: &crate::Tensor,
        units: u64,
        unit: u64,
    ) -> crate::Result<Vec<(u64, u64, crate::storage::Window)>> {
        let ctx = self.context();
        let limit = ctx.binding_limit();
        if t.storage().fits_one_binding(limit) {
            return Ok(vec![(0, units, t.storage().whole_window())]);
        }
        let align = ctx.window_alignment(op, unit)?;
        super::windows::unit_runs(0, units, unit, &t.storage().segments(), limit, align)
            .ok_or_else(|| super::windows::element_beyond_window(op, unit, align, limit))
    }

    /// Tensors laid out `[outer, ...]` (each with its slice's bytes) bound whole when each is
    /// one buffer that one binding holds, else in runs of whole outer slices that fit one
    /// window of each ([`super::windows::slice_runs`]); refused when one slice cannot be.
    pub(crate) fn slice_windows(
        &self,
        op: &'static str,
        outer: u64,
        tensors: &[(&crate::Tensor, u64)],
    ) -> crate::Result<Vec<super::windows::SliceRun>> {
        let ctx = self.context();
        let limit = ctx.binding_limit();
        let whole = |t: &crate::Tensor| t.storage().fits_one_binding(limit);
        if tensors.iter().all(|(t, _)| whole(t)) {
            return Ok(vec![super::windows::SliceRun {
                first: 0,
                count: outer,
                windows: tensors
                    .iter()
                    .map(|(t, _)| (t.storage().whole_window(), 0))
                    .collect(),
            }]);
        }
        let widest = tensors.iter().map(|(t, _)| t.dtype().size() as u64).max();
        let align = ctx.window_alignment(op, widest.unwrap_or(4).max(4))?;
        let slices: Vec<u64> = tensors.iter().map(|&(_, b)| b).collect();
        let segments: Vec<_> = tensors
            .iter()
            .map(|(t, _)| t.storage().segments())
            .collect();
        super::windows::slice_runs(outer, &slices, &segments, limit, align).ok_or_else(|| {
            let widest = slices.iter().max().copied().unwrap_or(0);
            if widest + align + 4 > limit {
                return Error::LimitExceeded {
                    op,
                    what: "one slice before the axis, bound at once".into(),
                    limit: "max_storage_buffer_binding_size",
                    needed: widest + align + 4,
                    max: limit,
                };
            }
            // Each fits a binding: one lies across the end of one of its tensor's buffers.
            let (t, slice) = tensors
                .iter()
                .find(|(t, b)| t.storage().segments().segment % b.max(&1) != 0)
                .copied()
                .unwrap_or(tensors[0]);
            Error::LimitExceeded {
                op,
                what: format!(
                    "a tensor whose slices before the axis ({slice} bytes each) lie across \
                     the ends of its buffers (a slice must lie in one buffer)"
                ),
                limit: "max_buffer_size",
                needed: t.byte_len(),
                max: t.storage().segments().segment,
            }
        })
    }
}

impl crate::Recorder {
    /// `t` laid out again in buffers that end on whole slices of `slice` bytes, where its own
    /// buffers cut one (a tensor of several buffers whose size is not a multiple of the
    /// slice's), so that [`Recorder::slice_windows`] can place every slice: a copy of its bytes
    /// when `copy` (an input), else unwritten (an output, copied back with
    /// [`Recorder::copy_relaid_back`]). `None` where its slices lie in its buffers, or where
    /// no buffer a device allows holds a whole number of slices and quads (the kernel then
    /// refuses, naming the slice).
    ///
    /// [`Recorder::slice_windows`]: crate::Recorder::slice_windows
    pub(crate) fn relaid_in_whole_slices(
        &mut self,
        t: &crate::Tensor,
        slice: u64,
        copy: bool,
    ) -> crate::Result<Option<crate::Tensor>> {
        let segments = t.storage().segments();
        if segments.count() == 1 || slice == 0 || segments.segment.is_multiple_of(slice) {
            return Ok(None);
        }
        // Buffers of whole slices and whole 16-byte quads (the windows' alignment is counted
        // from each buffer's start).
        let unit = slice / gcd(slice, 16) * 16;
        let max = self.context().max_buffer_size();
        if unit > max {
            return Ok(None);
        }
        let relaid = self.scratch(t.dtype(), t.shape(), max / unit * unit)?;
        if copy {
            self.copy_buffer(t.storage(), 0, relaid.storage(), 0, t.storage().size())?;
        }
        Ok(Some(relaid))
    }

    /// Copies `relaid` (from [`Recorder::relaid_in_whole_slices`] of `out`) back into `out`.
    pub(crate) fn copy_relaid_back(
        &mut self,
        relaid: crate::Tensor,
        out: &crate::Tensor,
    ) -> crate::Result<()> {
        self.copy_buffer(relaid.storage(), 0, out.storage(), 0, out.storage().size())
    }
}

/// The greatest common divisor of `a` and `b`.
pub(crate) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

pub(crate) fn too_many(op: &'static str, what: &str, needed: u64) -> Error {
    Error::LimitExceeded {
        op,
        what: what.to_string(),
        limit: "2^32 elements per kernel",
        needed,
        max: u64::from(u32::MAX),
    }
}
