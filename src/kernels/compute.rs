//! Compute kernels: the element-wise family (`shaders/elementwise.wgsl`, specialized per op and
//! dtype) and tiled MatMul (`shaders/matmul.wgsl`, specialized per dtype).

use super::MAX_RANK;
use crate::storage::Storage;
use crate::{DType, Error, Recorder, Result, Tensor};

use super::windows::{element_beyond_window, room, Walk};
use super::{grid_for, Kernel};

const ELEMENTWISE: &str = include_str!("../../shaders/elementwise.wgsl");
const MATMUL: &str = include_str!("../../shaders/matmul.wgsl");

/// The WGSL scalar type of a dtype, where WGSL can compute it without optional features.
pub fn wgsl_type(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("f32"),
        DType::I32 => Some("i32"),
        DType::U32 => Some("u32"),
        _ => None,
    }
}

/// Replaces each marked line of a template (the line containing the marker) by the given text.
/// A marker that is missing or repeated is a bug in the crate, caught by the shader tests.
fn specialize(template: &str, replacements: &[(&str, String)]) -> String {
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

/// WGSL source of the element-wise kernel computing `expression` (of `a`, `b`) from `lhs`
/// elements to `out` elements.
pub fn elementwise_source(lhs: &str, out: &str, expression: &str) -> String {
    specialize(
        ELEMENTWISE,
        &[
            ("// LHS TYPE", format!("alias T = {lhs};")),
            ("// OUT TYPE", format!("alias U = {out};")),
            ("// EXPRESSION", format!("    return {expression};")),
        ],
    )
}

/// WGSL source of the MatMul kernel for one element type.
pub fn matmul_source(ty: &str) -> String {
    specialize(MATMUL, &[("// LHS TYPE", format!("alias T = {ty};"))])
}

/// Element strides of `shape` seen through the broadcast to `out` (0 on broadcast axes).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<u64> {
    let lead = out.len() - shape.len();
    let mut strides = vec![0u64; out.len()];
    let mut s = 1u64;
    for k in (0..shape.len()).rev() {
        if shape[k] != 1 {
            strides[lead + k] = s;
        }
        s *= shape[k] as u64;
    }
    strides
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ElementwiseParams {
    count: u32,
    rank: u32,
    lhs_base: u32,
    rhs_base: u32,
    dst_base: u32,
    pad: [u32; 3],
    shape: [u32; MAX_RANK],
    lhs_stride: [u32; MAX_RANK],
    rhs_stride: [u32; MAX_RANK],
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
    pad: u32,
    batch_shape: [u32; MAX_RANK],
    lhs_stride: [u32; MAX_RANK],
    rhs_stride: [u32; MAX_RANK],
    dst_stride: [u32; MAX_RANK],
}

/// Bindings of `buffers` (4-byte elements) for walk `w`: whole buffers when they fit, else the
/// aligned windows `w` needs; with the element index of `w`'s first position in each.
/// The bindings of `storages` for piece `w` of a walk (whole buffers when `whole`), and the
/// element index of the piece's first position in each.
fn bind_windows<'a>(
    storages: &[&'a Storage; 3],
    w: &Walk,
    whole: bool,
    align: u64,
) -> ([u64; 3], Vec<wgpu::BindingResource<'a>>) {
    let mut firsts = [0u64; 3];
    let mut bindings = Vec::with_capacity(3);
    for (j, &storage) in storages.iter().enumerate() {
        if whole {
            firsts[j] = w.bases[j];
            bindings.push(storage.bind_whole());
        } else {
            let (window, first) = w.window(j, 4, align, storage.segments());
            firsts[j] = first;
            bindings.push(storage.bind(window));
        }
    }
    (firsts, bindings)
}

/// The MatMul kernels of `matmul.wgsl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatMulKernel {
    /// 16 x 16 tiles through workgroup memory (`main`): GPUs, 16 rows and more.
    Tiles,
    /// Four invocations per output element, each summing a quarter of k (`rows`): GPUs under
    /// 16 rows, where tiles would idle; CPU adapters when blocks would use one workgroup.
    Rows,
    /// A block of 8 rows x 4 columns per invocation over all of k, no workgroup memory or
    /// barrier (`blocks`): CPU adapters, where a barrier is a costly switch between
    /// invocations.
    Blocks,
}

/// The kernel for `rows` output rows of `n` columns with workgroups of `group` invocations,
/// `max` workgroups per grid dimension, on CPU-style kernels or not.
pub fn matmul_kernel(rows: u64, n: u64, cpu: bool, group: u32, max: u32) -> MatMulKernel {
    let (row_groups, col_groups) = (rows.div_ceil(8), n.div_ceil(4 * u64::from(group)));
    // Blocks need two workgroups to keep two cores busy; one row split four ways does better.
    if cpu
        && row_groups <= u64::from(max)
        && col_groups <= u64::from(max)
        && row_groups * col_groups >= 2
    {
        MatMulKernel::Blocks
    } else if rows < 16 {
        MatMulKernel::Rows
    } else {
        MatMulKernel::Tiles
    }
}

/// Whether three storages can be bound whole, else the elements per buffer of each (for
/// [`Walk::split`]).
fn layout_of(storages: &[&Storage; 3], limit: u64) -> (bool, [u64; 3]) {
    let whole = storages
        .iter()
        .all(|s| s.single().is_some_and(|b| b.size() <= limit));
    (whole, storages.map(|s| s.segments().segment / 4))
}

fn too_many(op: &'static str, what: &str, needed: u64) -> Error {
    Error::LimitExceeded {
        op,
        what: what.to_string(),
        limit: "2^32 elements per kernel",
        needed,
        max: u64::from(u32::MAX),
    }
}

impl Recorder {
    /// Records `out = expression(lhs, rhs)` with broadcasting; `rhs` is `lhs` for unary ops.
    /// `expression` must be valid for the WGSL types of the dtypes (checked by the caller).
    pub(crate) fn elementwise_into(
        &mut self,
        op: &'static str,
        lhs: &Tensor,
        rhs: &Tensor,
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        if count > u64::from(u32::MAX) {
            return Err(too_many(op, "the output", count));
        }
        let ctx = self.context().clone();
        if wgsl_type(lhs.dtype()).is_none() || wgsl_type(out.dtype()).is_none() {
            return Err(Error::invalid(
                op,
                "A",
                format!("{op} on {} cannot be computed in WGSL", lhs.dtype()),
            ));
        }
        let rank = out.rank();
        if rank > MAX_RANK {
            return Err(Error::invalid(
                op,
                "A",
                format!("rank {rank} exceeds {MAX_RANK}"),
            ));
        }
        let wg = ctx.workgroup_size();
        // Cast converts `lhs`'s dtype to `out`'s; every other op computes in one dtype.
        let kernel = if op == "Cast" {
            Kernel::Cast {
                from: lhs.dtype(),
                to: out.dtype(),
                workgroup_size: wg,
            }
        } else {
            Kernel::Elementwise {
                op,
                dtype: lhs.dtype(),
                workgroup_size: wg,
            }
        };
        let pipeline = ctx.pipeline(&kernel)?;

        // Every WGSL type here is 4 bytes. Buffers: lhs, rhs, out.
        let storages = [&**lhs.storage(), &**rhs.storage(), &**out.storage()];
        let (ls, rs) = (
            broadcast_strides(lhs.shape(), out.shape()),
            broadcast_strides(rhs.shape(), out.shape()),
        );
        let os = crate::host::c_strides(out.shape());
        let walk = Walk {
            lens: out.shape().iter().map(|&d| d as u64).collect(),
            steps: (0..rank).map(|k| vec![ls[k], rs[k], os[k]]).collect(),
            bases: vec![0; 3],
            extents: vec![1; 3],
        };
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, 4)?;
        let (whole, segments) = layout_of(&storages, limit);
        let walks = if whole {
            vec![walk]
        } else {
            // Too large to bind whole: runs of the output whose operands fit in windows.
            walk.split(room(limit, align, 4), &segments)
                .ok_or_else(|| element_beyond_window(op, 4, align, limit))?
        };
        for w in walks {
            let (firsts, bindings) = bind_windows(&storages, &w, whole, align);
            let mut params = ElementwiseParams {
                count: w.count() as u32,
                rank: w.lens.len() as u32,
                lhs_base: firsts[0] as u32,
                rhs_base: firsts[1] as u32,
                dst_base: firsts[2] as u32,
                pad: [0; 3],
                shape: [1; MAX_RANK],
                lhs_stride: [0; MAX_RANK],
                rhs_stride: [0; MAX_RANK],
            };
            let r = w.lens.len();
            for k in 0..r {
                let j = r - 1 - k; // innermost first
                params.shape[k] = w.lens[j] as u32;
                params.lhs_stride[k] = w.steps[j][0] as u32;
                params.rhs_stride[k] = w.steps[j][1] as u32;
            }
            let grid = grid_for(&ctx, op, w.count(), wg)?;
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
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
        let ctx = self.context().clone();
        let dtype = lhs.dtype();
        wgsl_type(dtype).ok_or_else(|| {
            Error::invalid(
                op,
                "A",
                format!("MatMul on {} cannot be computed in WGSL", lhs.dtype()),
            )
        })?;
        let (lr, rr, or) = (lhs.rank(), rhs.rank(), out.rank());
        let (m, k, n) = (
            lhs.shape()[lr - 2],
            lhs.shape()[lr - 1],
            rhs.shape()[rr - 1],
        );
        let batch_shape = &out.shape()[..or - 2];
        let batches: u64 = batch_shape.iter().map(|&d| d as u64).product();
        if out.numel() == 0 {
            return Ok(());
        }
        let max = ctx.limits().max_compute_workgroups_per_dimension;
        if batches > u64::from(max) {
            return Err(Error::LimitExceeded {
                op,
                what: "the batch count".into(),
                limit: "max_compute_workgroups_per_dimension",
                needed: batches,
                max: u64::from(max),
            });
        }
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
        let align = ctx.window_alignment(op, 4)?;
        let (whole, segments) = layout_of(&storages, limit);
        let room = room(limit, align, 4);
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
                let needed = w.extents.iter().max().copied().unwrap_or(0) * 4;
                if needed + align + 4 > limit {
                    return Err(Error::LimitExceeded {
                        op,
                        what: format!(
                            "one output row: a {k}-element row of A and the {k} x {n} matrix B \
                             in windows aligned to {align} bytes"
                        ),
                        limit: "max_storage_buffer_binding_size",
                        needed: needed + align + 4,
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
                        let temp = Tensor::uninit(&ctx, dtype, &[w.extents[j] as usize])?;
                        if j < 2 {
                            let bytes = w.extents[j] * 4;
                            self.copy(arcs[j], w.bases[j] * 4, temp.storage(), 0, bytes)?;
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
            let (firsts, bindings) = bind_windows(&used, &bound, whole, align);
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
                pad: 0,
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
            let batches = batch.iter().product::<u64>() as u32;
            let group = wg.clamp(4, 256);
            let (pipeline, grid) = match matmul_kernel(*rows, n, ctx.cpu_kernels(), group, max) {
                MatMulKernel::Blocks => (
                    // 8 x 4 outputs per invocation (see `blocks` in matmul.wgsl).
                    ctx.pipeline(&Kernel::MatMul {
                        variant: MatMulKernel::Blocks,
                        dtype,
                        group,
                    })?,
                    [
                        n.div_ceil(4 * u64::from(group)) as u32,
                        rows.div_ceil(8) as u32,
                        batches,
                    ],
                ),
                MatMulKernel::Rows => {
                    // Four invocations per output element (see `rows` in matmul.wgsl).
                    let columns = n.div_ceil(u64::from(group / 4));
                    if columns > u64::from(max) {
                        return Err(Error::LimitExceeded {
                            op,
                            what: format!("{n} output columns in workgroups of {}", group / 4),
                            limit: "max_compute_workgroups_per_dimension",
                            needed: columns,
                            max: u64::from(max),
                        });
                    }
                    (
                        ctx.pipeline(&Kernel::MatMul {
                            variant: MatMulKernel::Rows,
                            dtype,
                            group,
                        })?,
                        [columns as u32, *rows as u32, batches],
                    )
                }
                MatMulKernel::Tiles => (
                    ctx.pipeline(&Kernel::MatMul {
                        variant: MatMulKernel::Tiles,
                        dtype,
                        group: 0,
                    })?,
                    [n.div_ceil(16) as u32, rows.div_ceil(16) as u32, batches],
                ),
            };
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
            if let Some(t) = &staged[2] {
                self.copy(t.storage(), 0, arcs[2], w.bases[2] * 4, n * 4)?;
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
        assert_eq!(matmul_kernel(16, 256, false, 256, 65535), Tiles);
        assert_eq!(matmul_kernel(15, 256, false, 256, 65535), Rows);
        // CPU adapters: blocks once there are two workgroups of them, else the few-rows kernel.
        assert_eq!(matmul_kernel(64, 256, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(9, 256, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(1, 512, true, 64, 65535), Blocks);
        assert_eq!(matmul_kernel(8, 256, true, 64, 65535), Rows);
        // Row groups beyond a grid dimension go back to tiles.
        assert_eq!(matmul_kernel(8 * 70000, 256, true, 64, 65535), Tiles);
    }
}
