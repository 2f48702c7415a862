//! PairwiseCoupling (`shaders/pairwise_coupling.wgsl`): one invocation per row runs libsvm's
//! coupling iteration, cut into units of about K steps that dispatches of bounded length run
//! in turn.

use super::{grid_for, Kernel};
use crate::{Error, Recorder, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    classes: u32,
    first: u32,
    end: u32,
    row: u32,
    plane: u32,
    _pad: [u32; 2],
}

/// Words of state the kernel keeps per row: Qp, Q's diagonal, p^T Q p and the done flag.
pub(crate) fn state_words(classes: usize) -> usize {
    2 * classes + 2
}

/// The units of the iteration for `classes` classes and `sweeps` sweeps (see the shader), each
/// with its loop iterations: K starts, then per sweep K recomputations of Qp, the stopping
/// test and K updates.
fn unit_costs(classes: usize, sweeps: usize) -> impl Iterator<Item = usize> {
    let k = classes;
    let sweep = (0..2 * k + 1).map(move |s| if s == k { 2 * k + 1 } else { k + 1 });
    std::iter::repeat_n(k + 1, k).chain((0..sweeps).flat_map(move |_| sweep.clone()))
}

/// The dispatches of the iteration: consecutive ranges of units of at most
/// `LOOP_ITERATIONS_PER_DISPATCH` loop iterations each.
pub(crate) fn unit_ranges(classes: usize, sweeps: usize) -> Vec<(u32, u32)> {
    let budget = super::LOOP_ITERATIONS_PER_DISPATCH;
    let mut ranges = Vec::new();
    let (mut first, mut end, mut cost) = (0u32, 0u32, 0usize);
    for c in unit_costs(classes, sweeps) {
        if cost + c > budget && end > first {
            ranges.push((first, end));
            (first, cost) = (end, 0);
        }
        cost += c;
        end += 1;
    }
    if end > first {
        ranges.push((first, end));
    }
    ranges
}

impl Recorder {
    /// Records the coupling of `pairs` (`[N, K (K - 1) / 2]` f32) into `out` (`[N, K]` f32),
    /// with `state` (`[N, state_words(K)]` f32) as the iteration's scratch, over at most
    /// `sweeps` sweeps. Shapes and dtypes are the caller's to check.
    pub(crate) fn pairwise_coupling_into(
        &mut self,
        op: &'static str,
        pairs: &Tensor,
        classes: usize,
        sweeps: usize,
        state: &Tensor,
        out: &Tensor,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let rows = out.shape()[0] as u64;
        if rows == 0 {
            return Ok(());
        }
        if state.numel() as u64 >= u64::from(u32::MAX)
            || pairs.numel() as u64 >= u64::from(u32::MAX)
        {
            return Err(Error::LimitExceeded {
                op,
                what: "the pairs or the iteration's state".into(),
                limit: "2^32 - 1 elements indexed by u32",
                needed: pairs.numel().max(state.numel()) as u64,
                max: u64::from(u32::MAX) - 1,
            });
        }
        super::operands::check_bound_whole(
            &ctx,
            op,
            &[
                (pairs, "pairs"),
                (state, "the iteration's state"),
                (out, "the class probabilities"),
            ],
        )?;
        let wg = ctx.workgroup_size();
        let grid = grid_for(&ctx, op, rows, wg)?;
        let pipeline = ctx.pipeline(&Kernel::PairwiseCoupling { workgroup_size: wg })?;
        for (first, end) in unit_ranges(classes, sweeps) {
            let params = Params {
                rows: rows as u32,
                classes: classes as u32,
                first,
                end,
                row: grid[0] * wg,
                plane: grid[1],
                _pad: [0; 2],
            };
            let bindings = [
                pairs.storage().bind_whole(),
                out.storage().bind_whole(),
                state.storage().bind_whole(),
            ];
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_every_unit_once_within_the_budget() {
        for (k, sweeps) in [(2, 100), (3, 100), (10, 100), (64, 100), (128, 128)] {
            let ranges = unit_ranges(k, sweeps);
            let costs: Vec<usize> = unit_costs(k, sweeps).collect();
            assert_eq!(costs.len(), k + sweeps * (2 * k + 1));
            assert_eq!(ranges.first().unwrap().0, 0);
            assert_eq!(ranges.last().unwrap().1 as usize, costs.len());
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].1, pair[1].0);
            }
            for &(first, end) in &ranges {
                let cost: usize = costs[first as usize..end as usize].iter().sum();
                assert!(
                    cost <= crate::kernels::LOOP_ITERATIONS_PER_DISPATCH,
                    "{k}: {cost}"
                );
            }
        }
        // Three classes: the whole iteration in one dispatch.
        assert_eq!(unit_ranges(3, 100), vec![(0, 703)]);
    }
}
