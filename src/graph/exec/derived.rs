//! Values a session computes once: those of its graph that depend on its constants alone (a
//! recurrent layer's weights cut into gates and transposed, weights cast or dequantized). Planned
//! as part of every run they are computed again each time, copies and dispatches that change
//! nothing. The session's first run computes them in a submission of their own and keeps them,
//! like the constants it uploads; every run then starts from them and skips the nodes that made
//! them (so a run's log, see `replay`, holds none of their commands either).
//!
//! Which values are kept: those computed from constants only (no graph input, no random draw,
//! no subgraph) that some other node reads. Not kept, and so computed by each run as before:
//! - a graph output (the caller may write into it);
//! - the initial state of a Scan or Loop (a fresh one is the loop's state in place; a kept one
//!   would be copied into the loop's buffer, costing what computing it does);
//! - a value the index checks of its computation flagged, or one computed from such a value (a
//!   run must report the fault each time);
//! - one much larger than the constants it is made from (a broadcast), which would hold that
//!   memory for the session's life;
//! - sequences, strings and maps;
//! - beyond a quarter of the context's memory limit, the values after the first that would
//!   pass it.
//!
//! A run the memory limit refuses while values are kept drops them and tries again: from then
//! on the session's runs compute them as any other value.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::{record_graph, Scope, Slot};
use crate::graph::{registry, Attr, FastMap, Graph, ValueInfo, ValueKind};
use crate::{download_all, Context, HostTensor, Result, Tensor};

/// A kept value may take this many times the bytes of the constants it is computed from (a
/// dequantized weight takes 4), or this floor, whichever is more.
const GROWTH: u64 = 4;
const FLOOR_BYTES: u64 = 1 << 20;
/// The kept values together take at most this part of the context's memory limit: the rest is
/// the runs'.
const SHARE_OF_LIMIT: u64 = 4;

/// A kept value: on the host (folded there) or on the GPU.
#[derive(Clone)]
pub(super) enum Kept {
    Host(Arc<HostTensor>),
    Gpu(Tensor),
}

impl Kept {
    /// The value as a run's slot: a constant, never written in place (the session's handle
    /// keeps its buffer out of the run's pool too).
    pub(super) fn slot(&self) -> Slot {
        match self {
            Kept::Host(h) => Slot::constant(h.clone()),
            Kept::Gpu(t) => {
                let mut slot = Slot::gpu(t.clone());
                slot.constant = true;
                slot
            }
        }
    }
}

enum State {
    /// Not computed yet (by the session's first run).
    NotYet,
    /// Nothing to keep, or computing them failed: every run computes them.
    Off,
    Kept {
        values: HashMap<String, Kept>,
        /// By node index: nodes whose values the runs do not need.
        skip: Vec<bool>,
        /// By index among the graph's constants: read by a node the runs do not skip, or an
        /// output.
        constants: Vec<bool>,
    },
}

pub(super) struct Derived {
    /// By node index: computed from constants alone.
    derivable: Vec<bool>,
    /// Values computed from constants alone that another node reads, in the graph's order.
    candidates: Vec<String>,
    state: Mutex<State>,
}

/// What a run starts from: the kept values, the nodes it skips and the constants it reads.
pub(super) struct Start {
    pub values: Vec<(String, Kept)>,
    pub skip: Vec<bool>,
    pub constants: Vec<bool>,
}

impl Derived {
    /// Finds the values of `graph` (scheduled as `order`) computed from constants alone.
    pub(super) fn new(graph: &Graph, order: &[usize]) -> Derived {
        let inputs: HashSet<&str> = graph.inputs.iter().map(|i| i.name.as_str()).collect();
        // A constant an input of the same name overrides is not one.
        let mut constant: HashSet<&str> = graph
            .constants
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| !inputs.contains(n))
            .collect();
        let mut derivable = vec![false; graph.nodes.len()];
        for &k in order {
            let node = &graph.nodes[k];
            let random = super::super::random::is_random(&node.op) || node.op == "Dropout";
            let subgraph = node.attrs.values().any(|a| matches!(a, Attr::Graph(_)));
            let from_constants = node
                .inputs
                .iter()
                .filter(|i| !i.is_empty())
                .all(|i| constant.contains(i.as_str()));
            if !random && !subgraph && from_constants && node.op != "CheckInputs" {
                derivable[k] = true;
                constant.extend(
                    node.outputs
                        .iter()
                        .filter(|o| !o.is_empty())
                        .map(String::as_str),
                );
            }
        }
        let outputs: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
        let produced: HashSet<&str> = graph
            .nodes
            .iter()
            .zip(&derivable)
            .filter(|(_, d)| **d)
            .flat_map(|(n, _)| n.outputs.iter().map(String::as_str))
            .collect();
        // Read by a node that is not computed from constants alone; never a loop's state.
        let mut read_outside: HashSet<&str> = HashSet::new();
        let mut states: HashSet<&str> = HashSet::new();
        for (k, node) in graph.nodes.iter().enumerate() {
            if derivable[k] {
                continue;
            }
            for i in registry::loop_states(node) {
                if let Some(name) = node.inputs.get(i) {
                    states.insert(name.as_str());
                }
            }
            for name in node.reads() {
                if let Some(&p) = produced.get(name.as_str()) {
                    read_outside.insert(p);
                }
            }
        }
        let mut candidates = Vec::new();
        for &k in order {
            for o in &graph.nodes[k].outputs {
                let o = o.as_str();
                if derivable[k]
                    && read_outside.contains(o)
                    && !states.contains(o)
                    && !outputs.contains(o)
                    && !candidates.iter().any(|c: &String| c == o)
                {
                    candidates.push(o.to_string());
                }
            }
        }
        let state = match candidates.is_empty() {
            true => State::Off,
            false => State::NotYet,
        };
        Derived {
            derivable,
            candidates,
            state: Mutex::new(state),
        }
    }

    /// Whether values are kept.
    pub(super) fn holds(&self) -> bool {
        matches!(
            *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            State::Kept { .. }
        )
    }

    /// Drops the kept values for good: the runs compute them from now on.
    pub(super) fn give_up(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Off;
    }

    /// What a run starts from; `None` where it computes everything itself.
    pub(super) fn start(&self) -> Option<Start> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Kept {
                values,
                skip,
                constants,
            } => Some(Start {
                values: values.iter().map(|(n, v)| (n.clone(), v.clone())).collect(),
                skip: skip.clone(),
                constants: constants.clone(),
            }),
            _ => None,
        }
    }

    /// The GPU tensors kept (an output sharing a buffer with one is handed out as a copy).
    pub(super) fn tensors(&self) -> Vec<Tensor> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Kept { values, .. } => values
                .values()
                .filter_map(|v| match v {
                    Kept::Gpu(t) => Some(t.clone()),
                    Kept::Host(_) => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the values are still to be computed (by [`Derived::ensure`]).
    pub(super) fn not_yet(&self) -> bool {
        matches!(
            *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            State::NotYet
        )
    }

    /// Computes and keeps the values on the session's first run (`uploaded`: the constants on
    /// the GPU already). A failure leaves them to the runs, which report it as they would.
    /// Returns the constants it uploaded that the runs read too, or that kept values view, for
    /// the session to keep as its uploads (so that they are not uploaded twice).
    pub(super) async fn ensure(
        &self,
        ctx: &Context,
        graph: &Graph,
        order: &[usize],
        uploaded: &FastMap<String, Tensor>,
    ) -> Vec<(String, Tensor)> {
        if !self.not_yet() {
            return Vec::new();
        }
        let mut shared = Vec::new();
        let state = match self.compute(ctx, graph, order, uploaded).await {
            Ok((values, uploads)) if !values.is_empty() => {
                let skip = self.skipped(graph, order, &values);
                let read: HashSet<String> = (0..graph.nodes.len())
                    .filter(|&k| !skip[k])
                    .flat_map(|k| graph.nodes[k].reads())
                    .chain(graph.outputs.iter().map(|o| o.name.clone()))
                    .collect();
                let constants = graph
                    .constants
                    .iter()
                    .map(|(name, _)| read.contains(name))
                    .collect();
                shared = uploads
                    .into_iter()
                    .filter(|(name, t)| {
                        read.contains(name)
                            || values
                                .values()
                                .any(|v| matches!(v, Kept::Gpu(k) if k.shares_buffer(t)))
                    })
                    .collect();
                State::Kept {
                    values,
                    skip,
                    constants,
                }
            }
            _ => State::Off,
        };
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        shared
    }

    /// Records the nodes the candidates are computed from as a graph of their own, runs it and
    /// returns the candidates that may be kept, and the constants it uploaded.
    #[allow(clippy::type_complexity)]
    async fn compute(
        &self,
        ctx: &Context,
        graph: &Graph,
        order: &[usize],
        uploaded: &FastMap<String, Tensor>,
    ) -> Result<(HashMap<String, Kept>, Vec<(String, Tensor)>)> {
        // The nodes the candidates are computed from.
        let mut wanted: HashSet<String> = self.candidates.iter().cloned().collect();
        let mut nodes: Vec<usize> = Vec::new();
        for &k in order.iter().rev() {
            let node = &graph.nodes[k];
            if self.derivable[k] && node.outputs.iter().any(|o| wanted.contains(o)) {
                wanted.extend(node.reads());
                nodes.push(k);
            }
        }
        nodes.reverse();
        let read: HashSet<String> = nodes.iter().flat_map(|&k| graph.nodes[k].reads()).collect();
        let constants: Vec<(String, Arc<HostTensor>)> = graph
            .constants
            .iter()
            .filter(|(n, _)| read.contains(n))
            .cloned()
            .collect();
        let sub = Graph {
            inputs: Vec::new(),
            constants: constants.clone(),
            nodes: nodes.iter().map(|&k| graph.nodes[k].clone()).collect(),
            outputs: self
                .candidates
                .iter()
                .map(|name| ValueInfo {
                    name: name.clone(),
                    dtype: None,
                    shape: None,
                    kind: ValueKind::Tensor,
                })
                .collect(),
            ..Graph::default()
        };
        let sub_order: Vec<usize> = (0..sub.nodes.len()).collect();
        let mut scope = Scope {
            slots: Default::default(),
            parent: None,
        };
        for (name, value) in &constants {
            let slot = Slot::constant(value.clone());
            if let Some(t) = uploaded.get(name) {
                let _ = slot.gpu.set(t.clone());
            }
            scope.slots.insert(name.clone(), slot);
        }
        let mut rec = ctx.recorder();
        record_graph(&mut rec, &sub, &sub_order, &mut scope, &HashMap::new())?;
        let faults = rec.index_checks.take();
        rec.finish().await?;
        if let Some(faults) = faults {
            let words = download_all(ctx, &[faults.buffer()]).await?;
            faults.check(&words[0])?;
        }
        // The bytes of the constants each value is computed from.
        let mut cone: HashMap<&str, HashSet<&str>> = HashMap::new();
        for (name, _) in &constants {
            cone.insert(name.as_str(), HashSet::from([name.as_str()]));
        }
        for node in &sub.nodes {
            let mut from: HashSet<&str> = HashSet::new();
            for i in node.inputs.iter().filter(|i| !i.is_empty()) {
                from.extend(cone.get(i.as_str()).into_iter().flatten().copied());
            }
            for o in &node.outputs {
                cone.insert(o.as_str(), from.clone());
            }
        }
        let constant_bytes = |name: &str| -> u64 {
            cone.get(name)
                .into_iter()
                .flatten()
                .filter_map(|c| constants.iter().find(|(n, _)| n == c))
                .map(|(_, v)| v.data.len() as u64)
                .sum()
        };
        let mut kept = HashMap::new();
        let mut budget = ctx.max_memory() / SHARE_OF_LIMIT;
        for name in &self.candidates {
            let Some(slot) = scope.slots.get(name) else {
                continue;
            };
            let plain = slot.non_tensor().is_none()
                && slot.pending.is_none()
                && slot.swapped.is_none()
                && slot.swapped_pending.is_none();
            if !plain {
                continue;
            }
            let value = match (&slot.host, slot.gpu.get()) {
                (Some(h), _) => Kept::Host(h.clone()),
                (None, Some(t)) => Kept::Gpu(t.clone()),
                (None, None) => continue,
            };
            let bytes = match &value {
                Kept::Host(h) => h.data.len() as u64,
                Kept::Gpu(t) => t.byte_len(),
            };
            let on_gpu = matches!(value, Kept::Gpu(_));
            let fits = !on_gpu || bytes <= budget;
            if fits && bytes <= (GROWTH * constant_bytes(name)).max(FLOOR_BYTES) {
                if on_gpu {
                    budget -= bytes;
                }
                kept.insert(name.clone(), value);
            }
        }
        let uploads = constants
            .iter()
            .filter(|(name, _)| !uploaded.contains_key(name))
            .filter_map(|(name, _)| {
                let t = scope.slots.get(name)?.gpu.get()?;
                t.storage().uploaded().then(|| (name.clone(), t.clone()))
            })
            .collect();
        Ok((kept, uploads))
    }

    /// The nodes whose values no run needs with `kept` at hand: computed from constants alone,
    /// and every value of theirs kept or read only by nodes skipped too.
    fn skipped(&self, graph: &Graph, order: &[usize], kept: &HashMap<String, Kept>) -> Vec<bool> {
        let mut needed_values: HashSet<String> =
            graph.outputs.iter().map(|o| o.name.clone()).collect();
        let mut skip = vec![false; graph.nodes.len()];
        for &k in order.iter().rev() {
            let node = &graph.nodes[k];
            let needed = !self.derivable[k]
                || node
                    .outputs
                    .iter()
                    .any(|o| needed_values.contains(o) && !kept.contains_key(o));
            match needed {
                true => needed_values.extend(node.reads()),
                false => skip[k] = true,
            }
        }
        skip
    }
}
