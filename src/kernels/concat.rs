//! ONNX Concat and Split of whole 32-bit words in one dispatch for up to 6 parts
//! (`shaders/concat.wgsl`, the walk; the entry points are generated for each direction and
//! number of parts, each of Split's written through a binding of its own). One part at a
//! time, a Transformer decoder's Concat of a key or value cache with its new row took a
//! dispatch per input and the Split of its projection one per output: 7 of a layer's 21.

use std::sync::Arc;

use super::{grid_for, Binding, Kernel};
use crate::{Recorder, Result, Tensor};

/// Parts one dispatch moves (with the whole and the parameters, 8 bindings: WebGPU's storage
/// buffers per stage are 8 at least).
pub const MAX_PARTS: usize = 6;

/// Bytes from which a Concat of one row whose runs are not all whole `vec4` keeps a copy per
/// input (each moving `vec4` but for its last words; see `kernels/copy.rs`): the word kernel
/// runs at about 0.77 of the `vec4` one on GPUs, which outweighs a dispatch from there.
const WORDS_UP_TO: u64 = 16 << 20;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    units: u32,
    out_run: u32,
    run: u32,
    first: u32,
    ends: [u32; 8],
}

/// The WGSL of Concat of [`MAX_PARTS`] inputs (`Join`) or of Split into `parts` (1 to
/// [`MAX_PARTS`]) outputs: the walk of `walk` (`concat.wgsl`), part k bound at binding k + 1
/// and the whole at the next, with entry points `main` (a word per invocation) and
/// `main_vec4` (16 bytes) that move each unit between its part and the whole. Split's parts
/// are each a writable binding of its own, so that no two writable bindings alias (Dawn
/// refuses that); Concat's inputs are read only.
pub(crate) fn parts_source(walk: &str, direction: Direction, parts: u32) -> String {
    let mut s = walk.to_string();
    let views = [("main", "", "u32"), ("main_vec4", "_4", "vec4<u32>")];
    let (part_access, whole_access) = match direction {
        Direction::Join => ("read", "read_write"),
        Direction::Split => ("read_write", "read"),
    };
    for (_, suffix, ty) in views {
        for k in 0..parts {
            s += &format!(
                "@group(0) @binding({}) var<storage, {part_access}> part{k}{suffix}: array<{ty}>;\n",
                k + 1
            );
        }
        s += &format!(
            "@group(0) @binding({}) var<storage, {whole_access}> whole{suffix}: array<{ty}>;\n",
            parts + 1
        );
    }
    for (entry, suffix, ty) in views {
        let mut cases = String::new();
        for k in 0..parts {
            let label = if k + 1 == parts {
                "default".to_string()
            } else {
                format!("case {k}u")
            };
            let step = match direction {
                Direction::Join => format!("v = part{k}{suffix}[p.part];"),
                Direction::Split => format!("part{k}{suffix}[p.part] = v;"),
            };
            cases += &format!("        {label}: {{ {step} }}\n");
        }
        let (before, after) = match direction {
            Direction::Join => (
                format!("var v: {ty};"),
                format!("whole{suffix}[p.whole] = v;"),
            ),
            Direction::Split => (format!("let v = whole{suffix}[p.whole];"), String::new()),
        };
        s += &format!(
            "
@compute @workgroup_size(WORKGROUP_SIZE)
fn {entry}(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {{
    let i = unit_index(group, groups, local);
    if i >= params.units {{
        return;
    }}
    let p = place(i);
    {before}
    switch p.k {{
{cases}    }}
    {after}
}}
"
        );
    }
    s
}

/// The bindings of Concat: the parameters, [`MAX_PARTS`] inputs, the output.
pub(crate) fn concat_bindings() -> &'static [Binding] {
    use Binding::{StorageRead as R, StorageReadWrite as W, Uniform as U};
    &[U, R, R, R, R, R, R, W]
}

/// The bindings of Split into `parts` outputs (see [`parts_source`]).
pub(crate) fn split_bindings(parts: u32) -> &'static [Binding] {
    use Binding::{StorageRead as R, StorageReadWrite as W, Uniform as U};
    const LAYOUTS: [&[Binding]; MAX_PARTS] = [
        &[U, W, R],
        &[U, W, W, R],
        &[U, W, W, W, R],
        &[U, W, W, W, W, R],
        &[U, W, W, W, W, W, R],
        &[U, W, W, W, W, W, W, R],
    ];
    LAYOUTS[(parts as usize).clamp(1, MAX_PARTS) - 1]
}

/// Which way the parts move.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Into the whole (Concat).
    Join,
    /// Out of it (Split).
    Split,
}

impl Recorder {
    /// Records moving `parts` into or out of `whole` (`outer` rows, each the parts' runs one
    /// after another, part k `runs[k]` words of each row, its rows one after another), with a
    /// dispatch per [`MAX_PARTS`] parts that are not empty. `false`, recording nothing, where
    /// the kernel does not apply: CPU adapters' single rows (buffer copies are a `memcpy`
    /// there), a tensor beyond one binding, a part in the whole's buffer, Split's parts
    /// sharing a buffer, sizes past 32 bits, or one row of more than 16 MiB whose runs are not
    /// whole `vec4`.
    pub(crate) fn move_parts(
        &mut self,
        direction: Direction,
        whole: &Tensor,
        parts: &[&Tensor],
        runs: &[u64],
        outer: u64,
    ) -> Result<bool> {
        let op = match direction {
            Direction::Join => "Concat",
            Direction::Split => "Split",
        };
        let ctx = self.context().clone();
        let out_run: u64 = runs.iter().sum();
        let total = outer * out_run;
        let limit = ctx.binding_limit();
        let fits = |t: &Tensor| t.storage().fits_one_binding(limit);
        let quads = |r: u64| r.is_multiple_of(4);
        let one_row_ok =
            !ctx.cpu_kernels() && (runs.iter().all(|&r| quads(r)) || total * 4 <= WORDS_UP_TO);
        let apart = direction == Direction::Join
            || parts.iter().enumerate().all(|(k, t)| {
                parts[..k]
                    .iter()
                    .all(|u| !Arc::ptr_eq(t.storage(), u.storage()))
            });
        let usable = total > 0
            && total <= u64::from(u32::MAX)
            && fits(whole)
            && apart
            && parts
                .iter()
                .all(|t| fits(t) && !Arc::ptr_eq(t.storage(), whole.storage()))
            && (outer > 1 || one_row_ok);
        if !usable {
            return Ok(false);
        }
        let wg = ctx.workgroup_size();
        let mut first = 0u64;
        let moved: Vec<(&Tensor, u64)> = parts
            .iter()
            .zip(runs)
            .filter(|&(_, &r)| r > 0)
            .map(|(&t, &r)| (t, r))
            .collect();
        for group in moved.chunks(MAX_PARTS) {
            let run: u64 = group.iter().map(|&(_, r)| r).sum();
            let vec4 = quads(out_run) && quads(first) && group.iter().all(|&(_, r)| quads(r));
            let unit = if vec4 { 4 } else { 1 };
            let mut ends = [(run / unit) as u32; 8];
            let mut end = 0;
            for (k, &(_, r)) in group.iter().enumerate() {
                end += r;
                ends[k] = (end / unit) as u32;
            }
            let units = outer * run / unit;
            let params = Params {
                units: units as u32,
                out_run: (out_run / unit) as u32,
                run: (run / unit) as u32,
                first: (first / unit) as u32,
                ends,
            };
            let (kernel, slots) = match direction {
                // Unused inputs are bound to the first one's buffer (read-only bindings may
                // share one).
                Direction::Join => (
                    Kernel::Concat {
                        workgroup_size: wg,
                        vec4,
                    },
                    MAX_PARTS,
                ),
                // Writable bindings may not: a kernel for the group's number of parts.
                Direction::Split => (
                    Kernel::Split {
                        workgroup_size: wg,
                        vec4,
                        parts: group.len() as u32,
                    },
                    group.len(),
                ),
            };
            let pipeline = ctx.pipeline(&kernel)?;
            ctx.count_quads(vec4);
            let grid = grid_for(&ctx, op, units, wg)?;
            let mut bindings: Vec<wgpu::BindingResource<'_>> = (0..slots)
                .map(|k| group.get(k).unwrap_or(&group[0]).0.storage().bind_whole())
                .collect();
            bindings.push(whole.storage().bind_whole());
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            first += run;
        }
        Ok(true)
    }
}
