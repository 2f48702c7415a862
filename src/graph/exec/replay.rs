//! A session's run encoded again. Planning a graph (hoisting Scan bodies, capturing them,
//! placing their elements, fusing) costs the host more than encoding the commands it
//! produces: a token-by-token loop of one-step Scans spends most of each run there. A
//! `run_tensors` whose commands a replay can repeat is logged as it is encoded; where the next
//! `run_tensors` gets inputs of the same dtypes and shapes, handed over the same way, the
//! session encodes the log again instead.
//!
//! What makes a replay repeat the run exactly: with the inputs on the GPU, what a run records
//! depends on the inputs' dtypes and shapes and on which of them the caller handed over (those
//! may be written in place), never on their values, unless it reads values back (then it is
//! not logged). The buffers the log writes must be the session's again: its pooled buffers,
//! the outputs the caller has dropped since, the inputs handed over. Buffers filled from the
//! host (uploads, a random stream's state) must not be among them, as a replay does not fill
//! them again; the index fault buffer is the one exception, zeroed before each replay.
//!
//! Inputs in other buffers are bound in place of the logged ones (new bind groups for the
//! dispatches that bind them). A buffer the log writes that is not the session's now (an
//! output of the last run the caller still holds, or one handed back as an input: a state
//! carried from step to step) is replaced by a pooled buffer of its size the replay does not
//! use otherwise (the logged input such a state displaced: the two buffers swap roles from one
//! run to the next), else by a new one.

use std::sync::{Arc, Weak};

use super::Session;
use crate::recorder::{used_buffers, written_buffers, IndexFaults, Logged, SparePool, Swap};
use crate::storage::Storage;
use crate::{DType, HostTensor, Result, Tensor};

/// A `run_tensors` kept to be encoded again (see the module's notes).
pub(super) struct RunLog {
    inputs: Vec<LoggedInput>,
    outputs: Vec<LoggedOutput>,
    /// Inputs given on the host, whose values planned the run.
    host: Vec<(String, Arc<HostTensor>)>,
    steps: Vec<Logged>,
    /// The buffers `steps` write, and all those they bind, copy or clear.
    written: Vec<wgpu::Buffer>,
    used: Vec<wgpu::Buffer>,
    faults: Option<IndexFaults>,
}

pub(super) struct LoggedInput {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// Compared by address (the caller may drop it; the log's bind groups keep its buffers).
    storage: Weak<Storage>,
    buffers: Vec<wgpu::Buffer>,
    /// The caller kept no other handle: the run may have written into it.
    handed: bool,
}

struct LoggedOutput {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    storage: Weak<Storage>,
}

/// Whether the caller handed each input over: the session's list of the last run's outputs
/// (`lent`) and `inputs` hold the only handles to its buffer.
pub(super) fn handed_over(inputs: &[(String, Tensor)], lent: &[Arc<Storage>]) -> Vec<bool> {
    inputs
        .iter()
        .map(|(_, t)| {
            let ours = 1 + lent.iter().filter(|s| Arc::ptr_eq(s, t.storage())).count();
            Arc::strong_count(t.storage()) == ours
        })
        .collect()
}

/// The inputs of a run as its log keeps them (`handed` as [`handed_over`] says).
pub(super) fn logged_inputs(inputs: &[(String, Tensor)], handed: &[bool]) -> Vec<LoggedInput> {
    inputs
        .iter()
        .zip(handed)
        .map(|((name, t), &handed)| LoggedInput {
            name: name.clone(),
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            storage: Arc::downgrade(t.storage()),
            buffers: t.buffers().to_vec(),
            handed,
        })
        .collect()
}

impl RunLog {
    /// The run just recorded, `steps` its commands, as a log to replay; `None` where a
    /// storage it copies or clears is gone. Whether a buffer it writes may be written again
    /// is decided when it is replayed (see [`plan`]).
    pub(super) fn new(
        steps: Vec<Logged>,
        inputs: Vec<LoggedInput>,
        host: Vec<(String, Arc<HostTensor>)>,
        outputs: &[(String, Tensor)],
        faults: Option<IndexFaults>,
    ) -> Option<RunLog> {
        Some(RunLog {
            inputs,
            host,
            outputs: outputs
                .iter()
                .map(|(name, t)| LoggedOutput {
                    name: name.clone(),
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                    storage: Arc::downgrade(t.storage()),
                })
                .collect(),
            written: written_buffers(&steps)?,
            used: used_buffers(&steps)?,
            steps,
            faults,
        })
    }
}

impl RunLog {
    /// Whether `host` holds the values given on the host that planned the logged run.
    fn same_host_values(&self, host: &[(String, Arc<HostTensor>)]) -> bool {
        let given = |(name, value): &(String, Arc<HostTensor>)| {
            host.iter().any(|(n, v)| n == name && v == value)
        };
        host.len() == self.host.len() && self.host.iter().all(given)
    }
}

/// How a replay binds the run's inputs and where its outputs end.
struct Plan {
    swaps: Vec<Swap>,
    outputs: Vec<Arc<Storage>>,
    /// Buffers made for the replay: the pool's after it, where not outputs.
    made: Vec<Arc<Storage>>,
}

/// The storage of `swaps` that takes the place of the one at `from`, if any.
fn swapped(swaps: &[Swap], from: *const Storage) -> Option<&Arc<Storage>> {
    swaps
        .iter()
        .find(|w| std::ptr::eq(w.from, from))
        .map(|w| &w.to)
}

fn same_layout(buffers: &[wgpu::Buffer], storage: &Storage) -> bool {
    buffers.len() == storage.buffers().len()
        && buffers
            .iter()
            .zip(storage.buffers())
            .all(|(a, b)| a.size() == b.size())
}

/// How `log` is replayed on `inputs` (handed over as `handed` says) with the session's pooled
/// buffers `spare` and the last run's outputs `lent`; `None` where it cannot be.
///
/// Each input takes the place of the logged one. A buffer the log writes that is not the
/// session's now (an output of the last run the caller still holds, or one it gives as an
/// input) is replaced by a pooled buffer of the same size the log no longer uses (the logged
/// input a handed-back state displaced, say), else by a new one.
fn plan(
    ctx: &crate::Context,
    log: &RunLog,
    inputs: &[(String, Tensor)],
    handed: &[bool],
    spare: &SparePool,
    lent: &[Arc<Storage>],
    fault_buffer: Option<&Tensor>,
) -> Result<Option<Plan>> {
    if inputs.len() != log.inputs.len() {
        return Ok(None);
    }
    let mut swaps: Vec<Swap> = Vec::new();
    for logged in &log.inputs {
        let Some(k) = inputs.iter().position(|(name, _)| *name == logged.name) else {
            return Ok(None);
        };
        let t = &inputs[k].1;
        if t.dtype() != logged.dtype || t.shape() != logged.shape || handed[k] != logged.handed {
            return Ok(None);
        }
        let from = logged.storage.as_ptr();
        if std::ptr::eq(from, Arc::as_ptr(t.storage())) {
            continue;
        }
        let taken = swaps.iter().any(|w| Arc::ptr_eq(&w.to, t.storage()));
        let layout = same_layout(&logged.buffers, t.storage());
        // The same storage for two inputs that were two, or the other way round: the log
        // may read one where the other was written.
        let other_input = log
            .inputs
            .iter()
            .any(|i| std::ptr::eq(i.storage.as_ptr(), Arc::as_ptr(t.storage())));
        if taken || !layout || other_input || swapped(&swaps, from).is_some() {
            return Ok(None);
        }
        swaps.push(Swap {
            from,
            from_buffers: logged.buffers.clone(),
            to: t.storage().clone(),
        });
    }
    let is_input = |s: &Arc<Storage>| inputs.iter().any(|(_, t)| Arc::ptr_eq(t.storage(), s));
    // Handles the session and this plan hold: more are the caller's.
    let ours = |s: &Arc<Storage>, swaps: &[Swap], made: &[Arc<Storage>]| {
        let count = |list: &mut dyn Iterator<Item = &Arc<Storage>>| {
            list.filter(|o| Arc::ptr_eq(o, s)).count()
        };
        count(&mut lent.iter())
            + count(&mut inputs.iter().map(|(_, t)| t.storage()))
            + count(&mut spare.storages())
            + count(&mut swaps.iter().map(|w| &w.to))
            + count(&mut made.iter())
    };
    let mut made: Vec<Arc<Storage>> = Vec::new();
    for b in &log.written {
        if let Some(input) = log.inputs.iter().find(|i| i.buffers.contains(b)) {
            // An input's place: written only where it was handed over (as now: the flags
            // matched above).
            if !input.handed {
                return Ok(None);
            }
            continue;
        }
        let holds = |s: &Arc<Storage>| s.buffers().contains(b);
        if fault_buffer.is_some_and(|f| holds(f.storage())) {
            continue;
        }
        let role = lent.iter().chain(spare.storages()).find(|s| holds(s));
        let Some(role) = role.filter(|s| !s.uploaded()).cloned() else {
            return Ok(None);
        };
        if swapped(&swaps, Arc::as_ptr(&role)).is_some() {
            continue;
        }
        let free = !is_input(&role) && Arc::strong_count(&role) == ours(&role, &swaps, &made) + 1;
        if free {
            continue;
        }
        // A pooled buffer of its size that the replay does not use otherwise (not bound by
        // the log where its role stays, nor taking another place), else a new one.
        let used_here = |s: &Arc<Storage>| {
            let moved = swapped(&swaps, Arc::as_ptr(s)).is_some();
            let target = swaps.iter().any(|w| Arc::ptr_eq(&w.to, s))
                || made.iter().any(|m| Arc::ptr_eq(m, s));
            target || (!moved && s.buffers().iter().any(|b| log.used.contains(b)))
        };
        let spare_one = spare.storages().find(|s| {
            !s.uploaded()
                && same_layout(role.buffers(), s)
                && !used_here(s)
                && !is_input(s)
                && Arc::strong_count(s) == 1
        });
        let to = match spare_one {
            Some(s) => s.clone(),
            None => {
                // In the role's layout (a copy laid out in whole slices has its own).
                let segment = role.segments().segment;
                let s = Storage::create_segmented(ctx, "replayed run", role.size(), None, segment);
                let s = Arc::new(s?);
                ctx.count_buffers(s.buffers().len());
                made.push(s.clone());
                s
            }
        };
        swaps.push(Swap {
            from: Arc::as_ptr(&role),
            from_buffers: role.buffers().to_vec(),
            to,
        });
    }
    let outputs = log
        .outputs
        .iter()
        .map(|o| match swapped(&swaps, o.storage.as_ptr()) {
            Some(s) => Some(s.clone()),
            None => o.storage.upgrade(),
        })
        .collect::<Option<Vec<_>>>();
    Ok(outputs.map(|outputs| Plan {
        swaps,
        outputs,
        made,
    }))
}

impl Session {
    /// Encodes the last `run_tensors`' log again on `inputs` where it can (see the module's
    /// notes) and returns the outputs; `None` where it cannot: the run is then recorded anew.
    pub(super) async fn replay_run(
        &self,
        inputs: &[(String, Tensor)],
        handed: &[bool],
        host: &[(String, Arc<HostTensor>)],
    ) -> Result<Option<Vec<(String, Tensor)>>> {
        let Some(log) = self.replay.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Ok(None);
        };
        if !log.same_host_values(host) {
            return Ok(None);
        }
        let mut spare = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|e| e.into_inner()));
        let lent = std::mem::take(&mut *self.lent.lock().unwrap_or_else(|e| e.into_inner()));
        let fault_buffer = self
            .fault_buffer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let planned = plan(
            &self.ctx,
            &log,
            inputs,
            handed,
            &spare,
            &lent,
            fault_buffer.as_ref(),
        );
        let Ok(Some(Plan {
            swaps,
            outputs,
            made,
        })) = planned
        else {
            *self.spare.lock().unwrap_or_else(|e| e.into_inner()) = spare;
            *self.lent.lock().unwrap_or_else(|e| e.into_inner()) = lent;
            return Ok(None);
        };
        let mut rec = self.ctx.recorder();
        let relogged = match swaps.is_empty() {
            true => None,
            false => Some(rec.relogged(&log.steps, &swaps)?),
        };
        // Its handles would count as the caller's below.
        drop(swaps);
        let steps = relogged.as_ref().unwrap_or(&log.steps);
        if let Some(faults) = &log.faults {
            faults.reset(&self.ctx);
        }
        rec.replay_logged(steps)?;
        rec.finish().await?;
        self.ctx.count_replayed_run();
        self.replayed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *self.faults.lock().unwrap_or_else(|e| e.into_inner()) = log.faults.clone();

        // The pool and the outputs as the run leaves them: the outputs out of the pool, the
        // inputs handed over (and the last outputs the caller dropped) in it where the log
        // uses them.
        let is_output = |s: &Arc<Storage>| outputs.iter().any(|o| Arc::ptr_eq(o, s));
        for s in &outputs {
            spare.remove(s);
        }
        let mut now_free: Vec<&Arc<Storage>> = Vec::new();
        let handed_inputs = inputs.iter().zip(handed).filter(|(_, &h)| h);
        for s in handed_inputs
            .map(|((_, t), _)| t.storage())
            .chain(&lent)
            .chain(&made)
        {
            if !is_output(s) && !now_free.iter().any(|f| Arc::ptr_eq(f, s)) {
                now_free.push(s);
            }
        }
        let used = relogged.as_deref().and_then(used_buffers);
        let used = used.as_ref().unwrap_or(&log.used);
        let in_use = |s: &Arc<Storage>| s.buffers().iter().any(|b| used.contains(b));
        if relogged.is_some() {
            // A session keeps what its last run used: not the inputs bound before.
            spare.retain(in_use);
        }
        for s in now_free {
            // An input handed over has `inputs`' handle besides; a dropped output, `lent`'s.
            let given = inputs
                .iter()
                .filter(|(_, t)| Arc::ptr_eq(t.storage(), s))
                .count();
            let theirs = given
                + lent.iter().filter(|l| Arc::ptr_eq(l, s)).count()
                + made.iter().filter(|m| Arc::ptr_eq(m, s)).count();
            let pooled = spare.storages().any(|p| Arc::ptr_eq(p, s));
            // An input handed over that the log does not read (a CastLike's target, read
            // for its dtype) is pooled as a planned run pools it.
            if (in_use(s) || given > 0) && !pooled && Arc::strong_count(s) == theirs {
                spare.keep_storage(s.clone());
            }
        }
        let results: Vec<(String, Tensor)> = log
            .outputs
            .iter()
            .zip(&outputs)
            .map(|(o, s)| {
                let t = Tensor::from_parts(&self.ctx, o.dtype, o.shape.clone(), s.clone());
                (o.name.clone(), t)
            })
            .collect();
        let log = match relogged {
            None => Some(log),
            Some(steps) => RunLog::new(
                steps,
                logged_inputs(inputs, handed),
                log.host,
                &results,
                log.faults,
            ),
        };
        drop(lent);
        *self.spare.lock().unwrap_or_else(|e| e.into_inner()) = spare;
        *self.lent.lock().unwrap_or_else(|e| e.into_inner()) = outputs;
        *self.replay.lock().unwrap_or_else(|e| e.into_inner()) = log;
        Ok(Some(results))
    }
}
