//! Running a graph: all kernels of a run are recorded into one submission, dead values hand
//! their buffers back for reuse, and only the graph's outputs are read back.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::fuse::{self, Held, Pending};
use super::registry::{self, OpDef};
use super::{Attr, FastMap, FastSet, Graph, Node, Value, ValueKind};
use crate::kernels::program::Values;
use crate::recorder::{CallerInput, IndexFaults, Logged, SparePool};

mod derived;
mod replay;
use crate::{
    download_all, Context, DType, Error, HostTensor, MapSequence, Out, Recorder, Result,
    StringTensor, Tensor,
};

/// A value during a run: known on the host (inputs, constants), on the GPU, or both.
#[derive(Default)]
pub(crate) struct Slot {
    /// Shared: a session's constants are not copied per run.
    pub host: Option<Arc<HostTensor>>,
    pub gpu: OnceCell<Tensor>,
    /// Known before the run: a constant, or computed from constants and shapes only. Small ops
    /// on such values run on the host (see [`fold`]); ops on graph inputs run on the GPU but
    /// where their results plan a later op.
    pub constant: bool,
    /// Not recorded yet: an element-wise program its one reader fuses (see [`super::fuse`]).
    pub pending: Option<Box<Pending>>,
    /// Not recorded: this tensor with its last two axes swapped (a Transpose that only
    /// MatMuls read, which read it in place).
    pub swapped: Option<Tensor>,
    /// Not recorded: this pending program's value with its last two axes swapped (a
    /// Transpose of a chain that the MatMuls reading it compute in place).
    pub swapped_pending: Option<Box<Pending>>,
    /// Buffers of this input's upload in a session's last run, to upload into again.
    pub reserved: std::sync::Mutex<Option<Arc<crate::storage::Storage>>>,
    /// An ONNX sequence, not a tensor: its tensors' slots (see [`super::sequence`]).
    pub seq: Option<Sequence>,
    /// An ONNX optional that holds nothing, not a tensor.
    pub absent: bool,
    /// A tensor of strings, on the host only (see [`super::strings`]).
    pub strings: Option<Arc<StringTensor>>,
    /// A sequence of maps, on the host only (ZipMap's output, see [`super::strings`]).
    pub maps: Option<Arc<MapSequence>>,
    /// One map, on the host only (DictVectorizer's and CastMap's input, see [`super::strings`]).
    pub map: Option<Arc<crate::Map>>,
    /// A graph input whose buffer the run may write over once its last reader has run (see
    /// [`Owned`]). `None` for node values (which the run always owns) and for inputs it must
    /// not change.
    pub owned_input: Option<Owned>,
}

/// Whose a graph input's buffer is that the run may write over once its last reader has run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owned {
    /// The run's upload of a host value.
    Upload,
    /// A tensor the caller handed over (its list of inputs holds a handle too).
    Handed,
    /// A Scan body's state, in the buffer the loop keeps it in for every iteration; the loop
    /// holds this many handles to it besides the body's values.
    LoopState(usize),
}

impl Owned {
    /// Handles to the buffer held outside the run's values.
    fn handles_outside(self) -> usize {
        match self {
            Owned::Upload => 0,
            Owned::Handed => 1,
            Owned::LoopState(n) => n,
        }
    }
}

/// A sequence during planning: its tensors, each on the host or on the GPU, and their dtype
/// (known for an empty sequence too where it was declared).
#[derive(Default)]
pub(crate) struct Sequence {
    pub dtype: Option<DType>,
    pub items: Vec<Slot>,
}

/// Ops on constants with at most this many input elements in all are computed on the host.
const FOLD_LIMIT: usize = 1 << 14;

impl Slot {
    /// A graph input given on the host (uploaded on first use).
    pub fn input(value: impl Into<Arc<HostTensor>>) -> Slot {
        Slot {
            host: Some(value.into()),
            gpu: OnceCell::new(),
            constant: false,
            pending: None,
            swapped: None,
            swapped_pending: None,
            reserved: Default::default(),
            seq: None,
            absent: false,
            strings: None,
            maps: None,
            map: None,
            owned_input: None,
        }
    }
    pub fn constant(value: impl Into<Arc<HostTensor>>) -> Slot {
        Slot {
            host: Some(value.into()),
            gpu: OnceCell::new(),
            constant: true,
            pending: None,
            swapped: None,
            swapped_pending: None,
            reserved: Default::default(),
            seq: None,
            absent: false,
            strings: None,
            maps: None,
            map: None,
            owned_input: None,
        }
    }
    pub fn gpu(value: Tensor) -> Slot {
        let slot = Slot::default();
        let _ = slot.gpu.set(value);
        slot
    }
    pub fn sequence(seq: Sequence) -> Slot {
        Slot {
            seq: Some(seq),
            ..Slot::default()
        }
    }
    pub fn absent() -> Slot {
        Slot {
            absent: true,
            ..Slot::default()
        }
    }
    pub fn strings(value: impl Into<Arc<StringTensor>>) -> Slot {
        Slot {
            strings: Some(value.into()),
            ..Slot::default()
        }
    }
    pub fn maps(value: impl Into<Arc<MapSequence>>) -> Slot {
        Slot {
            maps: Some(value.into()),
            ..Slot::default()
        }
    }
    pub fn map(value: impl Into<Arc<crate::Map>>) -> Slot {
        Slot {
            map: Some(value.into()),
            ..Slot::default()
        }
    }
    /// What the slot holds when it is not a tensor of numbers ("a sequence", "an empty
    /// optional", "a string tensor", "a sequence of maps", "a map").
    pub fn non_tensor(&self) -> Option<&'static str> {
        match (&self.seq, self.absent, &self.strings) {
            (Some(_), _, _) => Some("a sequence"),
            (None, true, _) => Some("an empty optional"),
            (None, false, Some(_)) => Some("a string tensor"),
            (None, false, None) if self.maps.is_some() => Some("a sequence of maps"),
            (None, false, None) if self.map.is_some() => Some("a map"),
            (None, false, None) => None,
        }
    }
    /// Another slot of the same value (a host value shared, a GPU tensor's handle cloned, a
    /// sequence's tensors likewise).
    pub fn share(&self, ctx: &Context) -> Result<Slot> {
        Ok(match (&self.seq, &self.host) {
            (Some(seq), _) => Slot::sequence(Sequence {
                dtype: seq.dtype,
                items: seq
                    .items
                    .iter()
                    .map(|s| s.share(ctx))
                    .collect::<Result<_>>()?,
            }),
            _ if self.absent => Slot::absent(),
            _ if self.strings.is_some() || self.maps.is_some() || self.map.is_some() => Slot {
                strings: self.strings.clone(),
                maps: self.maps.clone(),
                map: self.map.clone(),
                constant: self.constant,
                ..Slot::default()
            },
            (None, Some(h)) if self.constant => Slot::constant(h.clone()),
            (None, Some(h)) => Slot::input(h.clone()),
            (None, None) => Slot::gpu(self.tensor(ctx)?),
        })
    }
    /// The dtype and shape of a tensor's slot (callers check [`Slot::non_tensor`] first; a
    /// string tensor gives its shape and, having no dtype, `U8`, so that a caller that did not
    /// check still does not panic).
    pub fn dtype_shape(&self) -> (DType, Vec<usize>) {
        if let Some(s) = &self.strings {
            return (DType::U8, s.shape.clone());
        }
        if let Some(m) = &self.maps {
            return (DType::U8, vec![m.len()]);
        }
        if let Some(m) = &self.map {
            return (DType::U8, vec![m.len()]);
        }
        let swapped = match (&self.swapped, &self.swapped_pending) {
            (Some(t), _) => Some((t.dtype(), t.shape().to_vec())),
            (_, Some(p)) => Some((p.program.out(), p.shape.clone())),
            _ => None,
        };
        if let Some((dtype, mut shape)) = swapped {
            let r = shape.len();
            shape.swap(r - 2, r - 1);
            return (dtype, shape);
        }
        match (&self.host, self.gpu.get(), &self.pending) {
            (Some(h), _, _) => (h.dtype, h.shape.clone()),
            (_, Some(t), _) => (t.dtype(), t.shape().to_vec()),
            (_, _, Some(p)) => (p.program.out(), p.shape.clone()),
            (None, None, None) => unreachable!("a slot holds a value"),
        }
    }

    /// The value on the GPU, uploaded on first use. A pending value is recorded by
    /// [`record_graph`] before any reader but its fusing one can see it.
    pub fn tensor(&self, ctx: &Context) -> Result<Tensor> {
        if let Some(t) = self.gpu.get() {
            return Ok(t.clone());
        }
        if let Some(what) = self.non_tensor() {
            return Err(Error::Graph(format!(
                "internal: {what} was read as a tensor"
            )));
        }
        if self.pending.is_some() || self.swapped.is_some() || self.swapped_pending.is_some() {
            return Err(Error::Graph(
                "internal: a fused value was read before it was recorded".into(),
            ));
        }
        let host = self.host.as_ref().expect("a slot holds a value");
        let reserved = self
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .filter(|s| s.size() == crate::storage::alloc_size(host.data.len() as u64));
        let t = match reserved {
            Some(storage) => Tensor::upload_into(ctx, host, storage)?,
            None => Tensor::from_host(ctx, host)?,
        };
        Ok(self.gpu.get_or_init(|| t).clone())
    }

    /// [`Slot::tensor`], uploading a value on the host only into a buffer an earlier run of
    /// a session uploaded into where one of its size is kept (see [`reserve_uploads`]): for
    /// ops that read the tensors of a sequence, which no node input names.
    pub(crate) fn tensor_on(&self, rec: &mut Recorder) -> Result<Tensor> {
        reserve_upload(rec, self);
        self.tensor(rec.context())
    }
}

/// The values visible to a graph: its own, then those of the enclosing graphs (ONNX outer scope).
pub(crate) struct Scope<'a> {
    pub slots: FastMap<String, Slot>,
    pub parent: Option<&'a Scope<'a>>,
}

impl Scope<'_> {
    pub fn get(&self, name: &str) -> Option<&Slot> {
        self.slots
            .get(name)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

/// The error for a node's required input `i` (called `role` in the op's spec) left out.
pub(crate) fn missing_input(node: &Node, i: usize, role: &str) -> Error {
    Error::Graph(format!(
        "node '{}': {} needs input {i} ({role})",
        node.name, node.op
    ))
}

/// A node's view of its inputs and attributes, handed to the op's graph entry.
pub(crate) struct NodeArgs<'a> {
    pub ctx: &'a Context,
    pub node: &'a Node,
    def: &'a OpDef,
    slots: Vec<Option<&'a Slot>>,
    scope: &'a Scope<'a>,
    /// Buffers some outputs must be written to (a Scan body writes its states in place).
    placements: &'a HashMap<String, Tensor>,
    /// The input the first output may be written over, by name (see [`writable_input`]).
    writable: Option<(&'a str, Tensor)>,
    /// The initial states the node's loop may keep its states in, by input index (see
    /// [`dead_loop_states`]).
    dead_states: DeadStates,
}

impl<'a> NodeArgs<'a> {
    /// The view of `node` as an op of `def` reading `slots` (how one op runs as another: a
    /// Loop as a Scan).
    pub(crate) fn new(
        ctx: &'a Context,
        node: &'a Node,
        def: &'a OpDef,
        slots: Vec<Option<&'a Slot>>,
        scope: &'a Scope<'a>,
        placements: &'a HashMap<String, Tensor>,
    ) -> NodeArgs<'a> {
        NodeArgs {
            ctx,
            node,
            def,
            slots,
            scope,
            placements,
            writable: None,
            dead_states: Vec::new(),
        }
    }

    /// This view with `dead` as the initial states its loop may keep its states in.
    pub(crate) fn with_dead_states(mut self, dead: DeadStates) -> NodeArgs<'a> {
        self.dead_states = dead;
        self
    }

    /// Initial state `i` where the loop may keep that state in its buffer (nothing reads it
    /// after the loop, the run owns it): the loop's writes then change it.
    pub(crate) fn dead_state(&self, rec: &mut Recorder, i: usize) -> Option<Tensor> {
        let (_, d) = self.dead_states.iter().find(|(k, _)| *k == i)?;
        if d.handed {
            rec.overwrites_caller_input();
        }
        Some(d.tensor.clone())
    }

    fn missing(&self, i: usize, role: &str) -> Error {
        missing_input(self.node, i, role)
    }

    /// Number of inputs given (including left-out optional ones).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The scope the node runs in (for ops with subgraphs).
    pub fn scope(&self) -> &Scope<'_> {
        self.scope
    }

    /// Input `i`'s element-wise program when it is pending (not recorded: see
    /// `fuse::prologue_reader`).
    pub fn pending(&self, i: usize) -> Option<&Pending> {
        self.slots.get(i).copied().flatten()?.pending.as_deref()
    }

    /// Input `i` (called `role` in the op's spec) as a GPU tensor, uploaded if needed.
    pub fn tensor(&self, i: usize, role: &str) -> Result<Tensor> {
        self.slots
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| self.missing(i, role))?
            .tensor(self.ctx)
    }

    /// Optional index input `i` as `i64` values; it must be known on the host (a constant or a
    /// graph input), since the op's plan depends on it.
    pub fn indices(&self, i: usize, role: &str) -> Result<Option<Vec<i64>>> {
        let Some(slot) = self.slots.get(i).copied().flatten() else {
            return Ok(None);
        };
        match &slot.host {
            Some(h) => h.to_indices(self.def.name, role).map(Some),
            None => Err(Error::Graph(format!(
                "node '{}': {} input '{role}' ('{}') is computed on the GPU, but its values are needed on the host to plan the op; give it as a constant or a graph input",
                self.node.name, self.def.name, self.node.inputs[i]
            ))),
        }
    }

    /// Input `i`'s values when they are known on the host (a constant or a graph input).
    pub fn host_value(&self, i: usize) -> Option<&crate::HostTensor> {
        self.slots.get(i).copied().flatten()?.host.as_deref()
    }

    /// The dtype of input `i` (its values are not needed).
    pub fn dtype_of(&self, i: usize, role: &str) -> Result<DType> {
        let slot = self.slots.get(i).copied().flatten();
        Ok(slot.ok_or_else(|| self.missing(i, role))?.dtype_shape().0)
    }

    /// The shape of input `i` (its values are not needed).
    pub fn shape_of(&self, i: usize, role: &str) -> Result<Vec<usize>> {
        let slot = self.slots.get(i).copied().flatten();
        Ok(slot.ok_or_else(|| self.missing(i, role))?.dtype_shape().1)
    }

    /// Required index input `i`.
    pub fn required_indices(&self, i: usize, role: &str) -> Result<Vec<i64>> {
        self.indices(i, role)?.ok_or_else(|| self.missing(i, role))
    }

    /// Integer-list attribute, `None` when absent.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.node.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(other) => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' must be a list of integers, not {other:?}",
                self.node.name
            ))),
        }
    }

    /// Integer attribute, `None` when absent.
    pub fn int(&self, name: &str) -> Result<Option<i64>> {
        match self.node.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(*v)),
            Some(other) => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' must be an integer, not {other:?}",
                self.node.name
            ))),
        }
    }

    /// Float attribute (an integer is taken as its value), `None` when absent.
    pub fn float(&self, name: &str) -> Result<Option<f64>> {
        match self.node.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Float(v)) => Ok(Some(*v)),
            Some(Attr::Int(v)) => Ok(Some(*v as f64)),
            Some(other) => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' must be a number, not {other:?}",
                self.node.name
            ))),
        }
    }

    /// String attribute, `None` when absent.
    pub fn string(&self, name: &str) -> Result<Option<&str>> {
        match self.node.attrs.get(name) {
            None => Ok(None),
            Some(Attr::String(s)) => Ok(Some(s)),
            Some(other) => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' must be a string, not {other:?}",
                self.node.name
            ))),
        }
    }

    /// Graph attribute (a Scan body).
    pub fn graph(&self, name: &str) -> Result<&Graph> {
        match self.node.attrs.get(name) {
            Some(Attr::Graph(g)) => Ok(g),
            None => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' is required",
                self.node.name
            ))),
            Some(other) => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' must be a graph, not {other:?}",
                self.node.name
            ))),
        }
    }

    /// Where output `k` goes: into its placement if it has one (a Scan body's state), else
    /// over the input it may be written over (see [`writable_input`]), else a new tensor.
    pub fn out(&self, k: usize) -> Out<'_> {
        let name = &self.node.outputs[k];
        match (self.placements.get(name), &self.writable) {
            (Some(t), _) => Out::into(name, t),
            (None, Some((input, t))) if k == 0 => Out::into(input, t),
            (None, _) => Out::NEW,
        }
    }
}

/// Records `graph`'s nodes (in `order`) against `scope`, whose own slots hold the graph's
/// inputs and constants; node outputs are added to it. Values whose last reader has run give
/// their buffers back to the recorder, except `keep` (the graph's outputs).
pub(crate) fn record_graph(
    rec: &mut Recorder,
    graph: &Graph,
    order: &[usize],
    scope: &mut Scope<'_>,
    placements: &HashMap<String, Tensor>,
) -> Result<()> {
    record_graph_planned(rec, graph, order, scope, placements, &[])
}

/// [`record_graph`], where `plans` also names values of the graph that plan ops of an
/// enclosing graph (an If branch's outputs that a Reshape outside reads as its shape).
pub(crate) fn record_graph_planned(
    rec: &mut Recorder,
    graph: &Graph,
    order: &[usize],
    scope: &mut Scope<'_>,
    placements: &HashMap<String, Tensor>,
    plans: &[&str],
) -> Result<()> {
    record_nodes(rec, graph, order, scope, placements, plans, None)
}

/// An If branch's order and [`Analysis`], made the first time a session's run records it
/// and kept in the enclosing graph's analysis for later runs (a branch is planned on every
/// run, as the If's condition may change; its structure does not).
pub(crate) struct AnalysedBranch {
    pub order: Vec<usize>,
    pub analysis: Analysis,
}

/// [`record_graph_planned`] of an If branch analysed beforehand.
pub(crate) fn record_branch(
    rec: &mut Recorder,
    graph: &Graph,
    branch: &AnalysedBranch,
    scope: &mut Scope<'_>,
    plans: &[&str],
) -> Result<()> {
    let session = SessionRun {
        analysis: &branch.analysis,
        skip: &[],
    };
    record_nodes(
        rec,
        graph,
        &branch.order,
        scope,
        &HashMap::new(),
        plans,
        Some(session),
    )
}

/// What planning a graph's nodes needs from its structure alone: what each node reads, the
/// values fusion defers or swaps, those that plan ops, and when each value dies. A session's
/// graph and order are the same on every run, so the session computes this once.
pub(crate) struct Analysis {
    /// Each node's op, by node index.
    defs: Vec<Option<&'static registry::OpDef>>,
    reads: Vec<Vec<String>>,
    deferred: HashMap<String, usize>,
    swappable: HashSet<String>,
    plan_values: HashSet<String>,
    dead_after: DeadAfter,
    /// The If branches recorded so far, by the If's node index and branch (then: true).
    branches: Mutex<FastMap<(usize, bool), Arc<AnalysedBranch>>>,
}

impl Analysis {
    /// The analysed branch `then` of the If at node `k`, made by `make` the first time.
    pub(crate) fn branch(
        &self,
        k: usize,
        then: bool,
        make: impl FnOnce() -> Result<AnalysedBranch>,
    ) -> Result<Arc<AnalysedBranch>> {
        if let Some(b) = self.branches.lock().expect("not poisoned").get(&(k, then)) {
            return Ok(b.clone());
        }
        let made = Arc::new(make()?);
        self.branches
            .lock()
            .expect("not poisoned")
            .insert((k, then), made.clone());
        Ok(made)
    }
}

impl Analysis {
    pub(crate) fn new(
        ctx: &Context,
        graph: &Graph,
        order: &[usize],
        placements: &HashMap<String, Tensor>,
        plans: &[&str],
    ) -> Analysis {
        let keep: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
        let (deferred, swappable) = if ctx.fuse_elementwise() {
            let swappable = fuse::swappable(graph, &keep, placements);
            (
                fuse::deferrable(graph, &keep, placements, &swappable),
                swappable,
            )
        } else {
            (HashMap::new(), HashSet::new())
        };
        let reads: Vec<Vec<String>> = graph.nodes.iter().map(|n| n.reads()).collect();
        let dead_after = DeadAfter::new(graph, order, &reads, placements);
        Analysis {
            defs: graph
                .nodes
                .iter()
                .map(|n| registry::lookup(&n.op))
                .collect(),
            reads,
            deferred,
            swappable,
            plan_values: plan_values(graph, plans),
            dead_after,
            branches: Default::default(),
        }
    }
}

/// A session's run of its graph: the graph's [`Analysis`], and the nodes it skips (by index):
/// those whose values the session kept from its first run (see `derived`), which the run's
/// scope holds already.
struct SessionRun<'a> {
    analysis: &'a Analysis,
    skip: &'a [bool],
}

/// [`record_graph_planned`], for a session's graph with `session`.
fn record_nodes(
    rec: &mut Recorder,
    graph: &Graph,
    order: &[usize],
    scope: &mut Scope<'_>,
    placements: &HashMap<String, Tensor>,
    plans: &[&str],
    session: Option<SessionRun<'_>>,
) -> Result<()> {
    let ctx = rec.context().clone();
    let owned;
    let (analysis, skip) = match session {
        Some(s) => (s.analysis, s.skip),
        None => {
            owned = Analysis::new(&ctx, graph, order, placements, plans);
            (&owned, &[][..])
        }
    };
    let Analysis {
        defs,
        reads,
        deferred,
        swappable,
        plan_values,
        dead_after,
        branches: _,
    } = analysis;
    // Index kernels name the node path they were recorded at (see `IndexFaults`).
    let depth = rec.index_checks.depth();
    for (pos, &k) in order.iter().enumerate() {
        if skip.get(k) == Some(&true) {
            continue;
        }
        let node = &graph.nodes[k];
        rec.index_checks.enter(depth, &node.name);
        let def = defs[k].expect("checked by schedule");
        let in_node = |e: Error| match e {
            // It names its own nodes: it may have been found while this node was recorded.
            e @ Error::IndexOutOfRange { .. } => e,
            // The device's, not the node's.
            e @ Error::DeviceLost { .. } => e,
            e => Error::Node {
                node: node.name.clone(),
                source: Box::new(e),
            },
        };
        #[cfg(feature = "native")]
        read_back_plan_inputs(rec, scope, node).map_err(in_node)?;
        let here = input_slots(scope, node);
        if super::strings::handles(node, &here) || super::strings::makes_strings(node) {
            let _numbers = super::strings::host_inputs(node, &here);
            #[cfg(feature = "native")]
            read_back_inputs(rec, scope, node, &_numbers).map_err(in_node)?;
            materialize(rec, scope, node).map_err(in_node)?;
            let outputs = super::strings::record(rec, scope, node).map_err(in_node)?;
            for (name, slot) in node.outputs.iter().zip(outputs) {
                scope.slots.insert(name.clone(), slot);
            }
            release_dead(rec, scope, pos, dead_after);
            continue;
        }
        if super::sequence::handles(node, &here) {
            materialize(rec, scope, node).map_err(in_node)?;
            let outputs =
                super::sequence::record(rec, scope, node, plan_values).map_err(in_node)?;
            for (name, slot) in node.outputs.iter().zip(outputs) {
                scope.slots.insert(name.clone(), slot);
            }
            release_dead(rec, scope, pos, dead_after);
            continue;
        }
        super::sequence::check_tensor_inputs(node, &here).map_err(in_node)?;
        // CheckInputs reads shapes only: its pending inputs stay pending for their readers.
        if node.op != "CheckInputs" {
            materialize_extra_heads(rec, scope, node).map_err(in_node)?;
        }
        let slots = input_slots(scope, node);
        registry::check_storage_only(
            def,
            node,
            slots.iter().map(|s| s.map(|s| s.dtype_shape().0)),
        )
        .map_err(in_node)?;
        let plans = node
            .outputs
            .iter()
            .any(|o| plan_values.contains(o.as_str()));
        let folded = fold(node, def, &slots, plans).map_err(in_node)?;
        if folded.is_none() {
            reserve_uploads(rec, scope, node);
        }
        // A reduction of a pending element-wise chain (not one starting from a MatMul)
        // computes it as it reads it: the chain is never recorded.
        let prologue = folded.is_none()
            && fuse::prologue_reader(node)
            && slots
                .first()
                .copied()
                .flatten()
                .is_some_and(|s| s.pending.as_ref().is_some_and(|p| p.head.is_none()))
            && !slots[1..].iter().flatten().any(|s| s.pending.is_some());
        // A Transpose of a pending chain that MatMuls compute in place stays pending.
        let mut swap_pending = None;
        if folded.is_none() && node.outputs.first().is_some_and(|o| swappable.contains(o)) {
            swap_pending = fuse::swapped_pending(node, &slots);
        }
        // Fusion: a node whose value is deferred, or that reads pending values, merges its
        // step with their programs.
        let readers = node.outputs.first().and_then(|o| deferred.get(o)).copied();
        let mut defer = readers.is_some();
        let pending_inputs = slots
            .iter()
            .flatten()
            .any(|s| s.pending.is_some() || s.swapped_pending.is_some());
        let mut fused = None;
        if folded.is_none() && !prologue && swap_pending.is_none() && (defer || pending_inputs) {
            fused = fuse::build(rec, node, &slots).map_err(in_node)?;
            // A diamond's branches that cannot merge with their MatMul's epilogue: the product
            // is recorded once, and the branches may merge as programs reading it.
            if fused.is_none() && share_heads(rec, scope, node).map_err(in_node)? {
                fused = fuse::build(rec, node, &input_slots(scope, node)).map_err(in_node)?;
            }
            if fused.is_none() && pending_inputs {
                // The merged program would be too large (or the node is not a step after all):
                // its pending inputs are recorded, and the node starts a chain of its own.
                materialize(rec, scope, node).map_err(in_node)?;
                if defer {
                    fused = fuse::build(rec, node, &input_slots(scope, node)).map_err(in_node)?;
                }
            }
        }
        // A value several nodes read is computed by each only while that is cheap.
        if readers.is_some_and(|n| n > 1) && fused.as_ref().is_some_and(|p| !fuse::worth_sharing(p))
        {
            defer = false;
        }
        let slots = input_slots(scope, node);
        let swap = match &folded {
            None if node.outputs.first().is_some_and(|o| swappable.contains(o)) => {
                fuse::swapped_input(&ctx, node, &slots).map_err(in_node)?
            }
            _ => None,
        };
        let outputs: Vec<Slot> = match (folded, fused) {
            (None, _) if swap_pending.is_some() => vec![Slot {
                swapped_pending: swap_pending.map(Box::new),
                ..Slot::default()
            }],
            (None, _) if swap.is_some() => vec![Slot {
                swapped: swap,
                ..Slot::default()
            }],
            (None, None)
                if node.op == "MatMul" && slots.iter().flatten().any(|s| s.swapped.is_some()) =>
            {
                let (a, ta) = fuse::operand(&ctx, slots[0]).map_err(in_node)?;
                let (b, tb) = fuse::operand(&ctx, slots[1]).map_err(in_node)?;
                let (a, b) = (recorded(a).map_err(in_node)?, recorded(b).map_err(in_node)?);
                let out = match placements.get(&node.outputs[0]) {
                    Some(t) => Out::into(&node.outputs[0], t),
                    None => Out::NEW,
                };
                vec![Slot::gpu(
                    rec.matmul_transposed_to(&a, &b, ta, tb, out)
                        .map_err(in_node)?,
                )]
            }
            (Some(values), _) => {
                // Values folded from graph inputs (for a later op's plan) are known on the
                // host but are not constants: the ops that only compute on them stay on the GPU.
                // (CastLike's second input gives its dtype only.)
                let shape_only = node.shape_only_inputs();
                let from_inputs = def.host.is_none()
                    && slots
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| !shape_only.contains(k))
                        .filter_map(|(_, s)| *s)
                        .any(|s| !s.constant);
                if from_inputs {
                    ctx.count_host_computed_node();
                }
                node.outputs
                    .iter()
                    .zip(values)
                    .map(|(name, value)| match placements.get(name) {
                        // A Scan body state computed from constants still goes to its buffer.
                        Some(t) => {
                            let v = rec.upload(&value)?;
                            Ok(Slot::gpu(rec.identity_to(&v, Out::into(name, t))?))
                        }
                        // Uploaded, if at all, by its first reader on the GPU (see
                        // `reserve_uploads`).
                        None => Ok(match from_inputs {
                            true => Slot::input(value),
                            false => Slot::constant(value),
                        }),
                    })
                    .collect::<Result<_>>()?
            }
            (None, Some(p)) if defer => vec![Slot {
                pending: Some(Box::new(p)),
                ..Slot::default()
            }],
            (None, Some(p)) => {
                let name = &node.outputs[0];
                let out = match placements.get(name) {
                    Some(t) => Out::into(name, t),
                    None => Out::NEW,
                };
                vec![Slot::gpu(record_pending(rec, p, out).map_err(in_node)?)]
            }
            (None, None) if node.op == "If" => {
                super::control::record_if(rec, scope, node, placements, plan_values, (analysis, k))
                    .map_err(in_node)?
            }
            (None, None) if node.op == "Loop" => {
                // Asked only where the Loop runs as a Scan: one unrolled may keep its carried
                // values on the host.
                let dead = |rec: &mut Recorder| {
                    dead_loop_states(rec, scope, node, (pos, &reads[k]), dead_after)
                };
                super::control::record_loop(
                    rec,
                    scope,
                    node,
                    &slots,
                    placements,
                    plan_values,
                    &dead,
                )
                .map_err(in_node)?
            }
            (None, None) => {
                let writable =
                    writable_input(rec, scope, node, (pos, &reads[k]), dead_after, placements)
                        .map_err(in_node)?;
                let dead_states = dead_loop_states(rec, scope, node, (pos, &reads[k]), dead_after)
                    .map_err(in_node)?;
                let args = NodeArgs {
                    ctx: &ctx,
                    node,
                    def,
                    slots,
                    scope,
                    placements,
                    writable,
                    dead_states,
                };
                (def.run)(rec, &args)
                    .map_err(in_node)?
                    .into_iter()
                    .map(Slot::gpu)
                    .collect()
            }
        };
        for (name, slot) in node.outputs.iter().zip(outputs) {
            scope.slots.insert(name.clone(), slot);
        }
        return_unused_reservations(rec, scope, node);
        release_dead(rec, scope, pos, dead_after);
    }
    rec.index_checks.leave(depth);
    Ok(())
}

/// Reads back the inputs of `node` that plan it ([`registry::host_inputs`]: a Reshape's shape,
/// NonZero's input, an If's condition) where they were computed on the GPU, so that it can be
/// planned: each becomes a value known on the host that is also on the GPU. Where the
/// recorder cannot read back (a Scan body, the option off), they stay as they are and the op
/// refuses them.
#[cfg(feature = "native")]
fn read_back_plan_inputs(rec: &mut Recorder, scope: &mut Scope<'_>, node: &Node) -> Result<()> {
    read_back_inputs(rec, scope, node, registry::host_inputs(&node.op))
}

/// Reads back `node`'s inputs `indices` where they were computed on the GPU (see
/// [`read_back_plan_inputs`]).
#[cfg(feature = "native")]
fn read_back_inputs(
    rec: &mut Recorder,
    scope: &mut Scope<'_>,
    node: &Node,
    indices: &[usize],
) -> Result<()> {
    if !rec.can_read_back() {
        return Ok(());
    }
    let mut names: Vec<&String> = Vec::new();
    for &i in indices {
        let Some(name) = node.inputs.get(i).filter(|n| !n.is_empty()) else {
            continue;
        };
        let needed = scope
            .get(name)
            .is_some_and(|s| s.host.is_none() && s.non_tensor().is_none());
        if needed && !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Ok(());
    }
    materialize(rec, scope, node)?;
    let tensors = names
        .iter()
        .map(|name| match scope.get(name) {
            Some(slot) => slot.tensor(rec.context()),
            None => Err(Error::Graph(format!(
                "internal: '{}' is not a value",
                name.escape_debug()
            ))),
        })
        .collect::<Result<Vec<Tensor>>>()?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let values = rec.read_back(&node.op, &refs)?;
    for ((name, t), value) in names.into_iter().zip(tensors).zip(values) {
        let slot = Slot::input(value);
        let _ = slot.gpu.set(t);
        // A value of an enclosing graph is shadowed here, where it is read.
        scope.slots.insert(name.clone(), slot);
    }
    Ok(())
}

/// What decides when a node's values are dead: the values nodes produce, the graph's outputs
/// and placed values (kept), and the position in the order of each value's last reader; and
/// from those, the values dead once the node at each position has run.
struct DeadAfter {
    produced: FastSet<String>,
    keep: FastSet<String>,
    placed: FastSet<String>,
    last_use: FastMap<String, usize>,
    /// By position in the order: what that node reads for the last time, and its outputs
    /// that nothing reads (neither kept nor placed).
    dead_at: Vec<Vec<String>>,
}

impl DeadAfter {
    fn new(
        graph: &Graph,
        order: &[usize],
        reads: &[Vec<String>],
        placements: &HashMap<String, Tensor>,
    ) -> DeadAfter {
        let mut last_use: FastMap<String, usize> = FastMap::default();
        for (pos, &k) in order.iter().enumerate() {
            for input in &reads[k] {
                last_use.insert(input.clone(), pos);
            }
        }
        let mut after = DeadAfter {
            produced: graph
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().cloned())
                .collect(),
            keep: graph.outputs.iter().map(|o| o.name.clone()).collect(),
            placed: placements.keys().cloned().collect(),
            last_use,
            dead_at: Vec::with_capacity(order.len()),
        };
        for (pos, &k) in order.iter().enumerate() {
            let dead = reads[k]
                .iter()
                .chain(&graph.nodes[k].outputs)
                .filter(|v| {
                    after.produced.contains(*v)
                        && !after.keep.contains(*v)
                        && !after.placed.contains(*v)
                        && after.last_use.get(*v).is_none_or(|&p| p == pos)
                })
                .cloned()
                .collect();
            after.dead_at.push(dead);
        }
        after
    }
}

/// The input of `node` (at `pos` in the order) that its first output may be written over, as
/// the op's registry entry allows ([`registry::writes_over`]): a scatter then updates its data
/// where it lies instead of copying it first (see [`dead_owned_input`]).
fn writable_input<'n>(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &'n Node,
    (pos, reads): (usize, &[String]),
    after: &DeadAfter,
    placements: &HashMap<String, Tensor>,
) -> Result<Option<(&'n str, Tensor)>> {
    let Some(i) = registry::writes_over(&node.op) else {
        return Ok(None);
    };
    let Some(name) = node.inputs.get(i).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    // An output placed elsewhere is written there.
    if node
        .outputs
        .first()
        .is_none_or(|o| placements.contains_key(o))
    {
        return Ok(None);
    }
    Ok(
        dead_owned_input(rec, scope, node, i, (pos, reads), after)?.map(|d| {
            if d.handed {
                rec.overwrites_caller_input();
            }
            (name.as_str(), d.tensor)
        }),
    )
}

/// Initial states a loop may keep its states in, by input index (see [`dead_loop_states`]).
pub(crate) type DeadStates = Vec<(usize, DeadInput)>;

/// A value a node reads for the last time that the run owns: the node may write over its
/// buffer, or take it for its own.
pub(crate) struct DeadInput {
    pub tensor: Tensor,
    /// The caller handed the tensor over (see `Recorder::overwrites_caller_input`).
    pub handed: bool,
}

/// Input `i` of `node` (at `pos` in the order, reading `reads`: its inputs and the outer
/// values its subgraphs read) where the node may write over its buffer: the
/// run owns it (a node's value, or a graph input the session marked [`Slot::owned_input`]),
/// nothing reads it after this node (nor does this node otherwise, its subgraphs included), and
/// no other handle to the buffer exists (a view that another value holds). Uploaded buffers
/// are left alone while a Scan body is captured: its replays read them again, and their upload
/// is not replayed (but for the loop's own state, which each iteration writes anyway).
fn dead_owned_input(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    i: usize,
    (pos, reads): (usize, &[String]),
    after: &DeadAfter,
) -> Result<Option<DeadInput>> {
    let Some(name) = node.inputs.get(i).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let Some(slot) = scope.slots.get(name) else {
        // A value of an enclosing graph.
        return Ok(None);
    };
    let outside = match slot.owned_input {
        Some(owned) => owned.handles_outside(),
        None if after.produced.contains(name.as_str()) => 0,
        None => return Ok(None),
    };
    let dead_here = after.last_use.get(name.as_str()) == Some(&pos)
        && !after.keep.contains(name.as_str())
        && !after.placed.contains(name.as_str())
        && reads.iter().filter(|n| *n == name).count() == 1;
    let plain_tensor = !slot.constant
        && slot.pending.is_none()
        && slot.swapped.is_none()
        && slot.swapped_pending.is_none()
        && slot.non_tensor().is_none();
    if !dead_here || !plain_tensor {
        return Ok(None);
    }
    let t = slot.tensor(rec.context())?;
    // The slot's handle and `t`, those held outside the run's values, and those that read
    // nothing more (released ones, and recorded copies').
    let sole = Arc::strong_count(t.storage()) == 2 + outside + rec.idle_handles(t.storage());
    let loop_state = matches!(slot.owned_input, Some(Owned::LoopState(_)));
    if !sole || (t.storage().uploaded() && rec.capturing() && !loop_state) {
        return Ok(None);
    }
    Ok(Some(DeadInput {
        tensor: t,
        handed: slot.owned_input == Some(Owned::Handed),
    }))
}

/// The initial states of a Scan or Loop `node` (at `pos`) that the loop may keep its states
/// in ([`registry::loop_states`], [`dead_owned_input`]), by input index: the first iteration
/// then reads each where it lies instead of a copy.
fn dead_loop_states(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    (pos, reads): (usize, &[String]),
    after: &DeadAfter,
) -> Result<DeadStates> {
    let mut dead = Vec::new();
    for i in registry::loop_states(node) {
        if let Some(d) = dead_owned_input(rec, scope, node, i, (pos, reads), after)? {
            dead.push((i, d));
        }
    }
    Ok(dead)
}

/// Gives `node`'s inputs that are on the host only (values folded there, host inputs without
/// a buffer of their own from the last run) a buffer of their size that an earlier run's
/// upload left, if there is one, for the node to upload them into as it reads them on the
/// GPU. Reserved only here, where they are read on the GPU: values that never leave the
/// host hold none.
fn reserve_uploads(rec: &mut Recorder, scope: &Scope<'_>, node: &Node) {
    // Those that plan the op are read on the host.
    let planning = registry::host_inputs(&node.op);
    for (i, name) in node.inputs.iter().enumerate() {
        if name.is_empty() || planning.contains(&i) {
            continue;
        }
        if let Some(slot) = scope.get(name) {
            reserve_upload(rec, slot);
        }
    }
}

/// Returns the buffers [`reserve_uploads`] reserved for the node's inputs that it did not
/// upload (a fused program takes a constant as a literal, CheckInputs reads shapes only), so
/// that later nodes of the run can have them: a reservation held until its value dies left a
/// later upload without one, and each run made a buffer for it.
fn return_unused_reservations(rec: &mut Recorder, scope: &Scope<'_>, node: &Node) {
    for name in node.inputs.iter().filter(|n| !n.is_empty()) {
        let Some(slot) = scope.get(name).filter(|s| s.gpu.get().is_none()) else {
            continue;
        };
        let reserved = slot
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(storage) = reserved {
            rec.return_reserved_upload(storage);
        }
    }
}

/// Reserves for `slot`, where its value is on the host only, a buffer of its size that an
/// earlier run's upload left, if there is one.
fn reserve_upload(rec: &mut Recorder, slot: &Slot) {
    let Some(host) = slot.host.as_ref().filter(|_| slot.gpu.get().is_none()) else {
        return;
    };
    let mut reserved = slot.reserved.lock().unwrap_or_else(|e| e.into_inner());
    if reserved.is_none() {
        *reserved = rec.reserve_upload(crate::storage::alloc_size(host.data.len() as u64));
    }
}

/// Releases the values the node at `pos` in the order read for the last time, and its outputs
/// nobody reads.
fn release_dead(rec: &mut Recorder, scope: &mut Scope<'_>, pos: usize, after: &DeadAfter) {
    for v in &after.dead_at[pos] {
        if let Some(slot) = scope.slots.remove(v) {
            release_slot(rec, slot);
        }
    }
}

/// Gives a dead value's buffers back to the recorder (those nothing else holds are reused).
fn release_slot(rec: &mut Recorder, slot: Slot) {
    let reserved = slot
        .reserved
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(storage) = reserved {
        rec.unreserve_upload(storage);
    }
    if let Some(t) = slot.gpu.into_inner() {
        rec.release(t);
    }
    if let Some(t) = slot.swapped {
        rec.release(t);
    }
    for item in slot.seq.into_iter().flat_map(|s| s.items) {
        release_slot(rec, item);
    }
    // A chain computed where it was read: its inputs (its MatMul's operands too) go back to
    // the recorder, as when it is recorded.
    for p in slot.pending.into_iter().chain(slot.swapped_pending) {
        for (_, leaf) in p.leaves {
            rec.release(leaf);
        }
        for t in p.head.into_iter().flat_map(|h| {
            let mut held = h.lhs.1.into_tensors();
            held.extend(h.rhs.1.into_tensors());
            held
        }) {
            rec.release(t);
        }
    }
}

/// Slots of a subgraph's constants (a Scan body's, an If branch's, a Loop body's), on the
/// GPU already where an earlier capture, iteration or run uploaded them.
pub(crate) fn constant_slots(rec: &Recorder, graph: &Graph) -> Vec<(String, Slot)> {
    graph
        .constants
        .iter()
        .map(|(name, value)| {
            let slot = Slot::constant(value.clone());
            if let Some((_, t)) = rec.body_constants.get(&(Arc::as_ptr(value) as usize)) {
                let _ = slot.gpu.set(t.clone());
            }
            (name.clone(), slot)
        })
        .collect()
}

/// Keeps the subgraph constants that recording `graph` against `scope` uploaded, for the
/// next captures, iterations and runs.
pub(crate) fn keep_uploaded_constants(rec: &mut Recorder, graph: &Graph, scope: &Scope<'_>) {
    for (name, value) in &graph.constants {
        if let Some(t) = scope.slots.get(name).and_then(|s| s.gpu.get()) {
            if t.storage().uploaded() {
                rec.body_constants
                    .entry(Arc::as_ptr(value) as usize)
                    .or_insert_with(|| (value.clone(), t.clone()));
            }
        }
    }
}

/// The slots of `node`'s inputs (`None` for optional inputs left out).
pub(crate) fn input_slots<'s>(scope: &'s Scope<'_>, node: &Node) -> Vec<Option<&'s Slot>> {
    node.inputs
        .iter()
        .map(|i| if i.is_empty() { None } else { scope.get(i) })
        .collect()
}

/// Records the pending values among `node`'s inputs (their programs into tensors of their own;
/// a swapped one into the tensor its MatMuls read transposed).
fn materialize(rec: &mut Recorder, scope: &mut Scope<'_>, node: &Node) -> Result<()> {
    share_heads(rec, scope, node)?;
    for name in &node.inputs {
        if let Some(slot) = scope.slots.get_mut(name) {
            if let Some(p) = slot.pending.take() {
                let _ = slot.gpu.set(record_pending(rec, *p, Out::NEW)?);
            }
            if let Some(p) = slot.swapped_pending.take() {
                slot.swapped = Some(record_pending(rec, *p, Out::NEW)?);
            }
        }
    }
    Ok(())
}

/// Where a pending input of `node` has a MatMul head that other pending values of the scope
/// carry too (a diamond's branches that could not all merge), records that product once and
/// makes each of them a program reading it, so that no recording computes it twice. Whether
/// there was one.
fn share_heads(rec: &mut Recorder, scope: &mut Scope<'_>, node: &Node) -> Result<bool> {
    let mut shared = false;
    for name in &node.inputs {
        let Some(head) = scope.slots.get(name).and_then(head_of).cloned() else {
            continue;
        };
        let sharing: Vec<String> = scope
            .slots
            .iter()
            .filter(|(_, s)| head_of(s).is_some_and(|h| h.same(&head)))
            .map(|(n, _)| n.clone())
            .collect();
        if sharing.len() < 2 {
            continue;
        }
        let dtype = scope.slots[name]
            .pending
            .as_ref()
            .map(|p| p.program.operands()[0])
            .ok_or_else(|| Error::Graph("internal: a shared head lost its program".into()))?;
        let emulate64 =
            crate::kernels::words::emulates_64_bit(rec.context().features(), &[dtype], dtype);
        let bare = Pending {
            program: crate::kernels::program::Program::new(vec![dtype], emulate64),
            leaves: Vec::new(),
            shape: head.shape.clone(),
            head: Some(head.clone()),
        };
        let product = record_pending(rec, bare, Out::NEW)?;
        for n in sharing {
            let Some(slot) = scope.slots.get_mut(&n) else {
                continue;
            };
            let Some(p) = slot.pending.take().map(|p| *p) else {
                continue;
            };
            let leaf = fuse::product_view(&product, &head.shape, &p.shape)?;
            // Named (by no name a graph's value has) so that a merge reads it once.
            let name = format!("\u{0}product {} {}", head.lhs.0, head.rhs.0);
            let leaves = std::iter::once((Some(name), leaf))
                .chain(p.leaves)
                .collect();
            slot.pending = Some(Box::new(Pending {
                program: p.program,
                leaves,
                shape: p.shape,
                head: None,
            }));
        }
        rec.release(product);
        shared = true;
    }
    Ok(shared)
}

/// The MatMul head of a slot's pending value, if any.
fn head_of(slot: &Slot) -> Option<&fuse::Head> {
    slot.pending.as_ref().and_then(|p| p.head.as_ref())
}

/// A MatMul operand that must be a tensor by now (its inputs were materialized).
fn recorded(held: Held) -> Result<Tensor> {
    match held {
        Held::Tensor(t) => Ok(t),
        Held::Program(_) => Err(Error::Graph(
            "internal: a MatMul operand was still pending".into(),
        )),
    }
}

/// The inputs of a held operand's program (none for a tensor).
fn held_leaves(held: &Held) -> Vec<&Tensor> {
    match held {
        Held::Tensor(_) => Vec::new(),
        Held::Program(p) => p.leaves.iter().map(|(_, t)| t).collect(),
    }
}

/// A held operand as the MatMul reads it, its program's inputs `leaves` (see [`held_leaves`]).
fn held_values<'a>(held: &'a Held, leaves: &'a [&'a Tensor]) -> Values<'a> {
    match held {
        Held::Tensor(t) => Values::Tensor(t),
        Held::Program(p) => Values::Program {
            program: &p.program,
            leaves,
            shape: &p.shape,
        },
    }
}

/// Records a pending value's program into `out`. Its leaves go back to the recorder: a
/// buffer that no live value holds any more (the program held it last) is reused.
fn record_pending(rec: &mut Recorder, p: Pending, out: Out) -> Result<Tensor> {
    let refs: Vec<&Tensor> = p.leaves.iter().map(|(_, t)| t).collect();
    let t = match &p.head {
        Some(h) if h.shape == p.shape => {
            let (la, lb) = (held_leaves(&h.lhs.1), held_leaves(&h.rhs.1));
            let values = [held_values(&h.lhs.1, &la), held_values(&h.rhs.1, &lb)];
            // A MatMul that reads a pending chain but is read as it is has no epilogue.
            let epilogue = (!p.program.steps().is_empty() || !refs.is_empty())
                .then_some((&p.program, refs.as_slice()));
            rec.matmul_values_to(values, h.transposed, epilogue, out)?
        }
        Some(h) if p.program.steps().is_empty() && refs.is_empty() => {
            // Only viewed since (a Reshape of the product read by a node that is not a step):
            // the product itself, viewed, with no copy into a tensor of the viewed shape.
            let (la, lb) = (held_leaves(&h.lhs.1), held_leaves(&h.rhs.1));
            let values = [held_values(&h.lhs.1, &la), held_values(&h.rhs.1, &lb)];
            let product = rec.matmul_values_to(values, h.transposed, None, Out::NEW)?;
            out.view(rec, product.reshaped(&p.shape)?)?
        }
        Some(h) => {
            // Viewed since (unit axes added or removed): the epilogue runs on the product's
            // shape, its leaves viewed back.
            let leaves = p
                .leaves
                .iter()
                .map(|(_, t)| fuse::product_view(t, &p.shape, &h.shape))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = leaves.iter().collect();
            let t = out.tensor(rec, p.program.out(), &p.shape)?;
            let product = t.reshaped(&h.shape)?;
            let (la, lb) = (held_leaves(&h.lhs.1), held_leaves(&h.rhs.1));
            let values = [held_values(&h.lhs.1, &la), held_values(&h.rhs.1, &lb)];
            rec.matmul_values_to(
                values,
                h.transposed,
                Some((&p.program, &refs)),
                Out::into("fused MatMul", &product),
            )?;
            t
        }
        // A program of no steps on one tensor of its shape (a product recorded once for
        // several readers, see `share_heads`): that tensor, not a copy.
        None if p.program.steps().is_empty()
            && refs.len() == 1
            && refs[0].shape() == p.shape.as_slice() =>
        {
            out.view(rec, refs[0].clone())?
        }
        None => rec.program_to(&p.program, &refs, out)?,
    };
    for (_, leaf) in p.leaves {
        rec.release(leaf);
    }
    if let Some(h) = p.head {
        for t in h
            .lhs
            .1
            .into_tensors()
            .into_iter()
            .chain(h.rhs.1.into_tensors())
        {
            rec.release(t);
        }
    }
    Ok(t)
}

/// Records the pending MatMul heads among `node`'s inputs but the last: a program has one
/// (inputs carrying one head, a diamond's branches, count once).
fn materialize_extra_heads(rec: &mut Recorder, scope: &mut Scope<'_>, node: &Node) -> Result<()> {
    let head_of = |name: &String| scope.slots.get(name).and_then(head_of);
    let last = node.inputs.iter().rev().find_map(head_of);
    let mut names: Vec<&String> = Vec::new();
    for name in &node.inputs {
        let extra = head_of(name).is_some_and(|h| !last.is_some_and(|l| h.same(l)));
        if extra && !names.contains(&name) {
            names.push(name);
        }
    }
    for name in names {
        if let Some(slot) = scope.slots.get_mut(name) {
            if let Some(p) = slot.pending.take() {
                let _ = slot.gpu.set(record_pending(rec, *p, Out::NEW)?);
            }
        }
    }
    Ok(())
}

/// The values that plan an op (its inputs of [`registry::host_inputs`]: a Range's limit, a
/// Reshape's shape) and every value they are computed from.
/// `extra`: more such values (see [`record_graph_planned`]). An If whose output plans an op
/// plans it with its condition and every value its branches read.
pub(crate) fn plan_values(graph: &Graph, extra: &[&str]) -> HashSet<String> {
    let producer: HashMap<&str, &Node> = graph
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n)))
        .collect();
    let mut pending: Vec<String> = graph
        .nodes
        .iter()
        .flat_map(|n| {
            registry::host_inputs(&n.op)
                .iter()
                .filter_map(|&i| n.inputs.get(i))
                .cloned()
        })
        .chain(extra.iter().map(|v| v.to_string()))
        .collect();
    let mut values = HashSet::new();
    while let Some(v) = pending.pop() {
        if v.is_empty() || values.contains(&v) {
            continue;
        }
        if let Some(p) = producer.get(v.as_str()) {
            // Shape(x) plans with x's shape alone: x itself stays on the GPU.
            pending.extend(p.value_reads());
        }
        values.insert(v);
    }
    values
}

/// The node's outputs computed on the host, when they can be: ops that need only shapes
/// (Shape, Size), and ops whose inputs are all small constants (shape arithmetic such as
/// `Shape -> Gather -> Concat -> Reshape`), through the CPU interpreter; where the outputs
/// plan a later op (`plans`), also small ops on graph inputs given on the host (a Range's
/// limit `n + 1`). `None`: record the op on the GPU. The results are constants, so the index
/// inputs of later ops are known.
fn fold(
    node: &Node,
    def: &OpDef,
    slots: &[Option<&Slot>],
    plans: bool,
) -> Result<Option<Vec<HostTensor>>> {
    if let Some(on_host) = def.host {
        return on_host(node, slots);
    }
    if matches!(def.name, "Scan" | "If" | "Loop") || node.outputs.iter().any(|o| o.is_empty()) {
        return Ok(None);
    }
    // CastLike reads only its second input's dtype: a small constant cast like a value
    // computed on the GPU is a constant too (element-wise chains then read it as a literal).
    if let ("CastLike", [Some(input), Some(target)]) = (node.op.as_str(), slots) {
        if let Some(value) = input
            .host
            .as_ref()
            .filter(|v| input.constant && v.numel() <= FOLD_LIMIT)
        {
            if node.attrs.is_empty() {
                let to = target.dtype_shape().0;
                return Ok(crate::reference::cast_host(value, to).ok().map(|v| vec![v]));
            }
        }
    }
    // Every input known and small before any is cloned: a large constant read beside a
    // value of the GPU (an embedding table beside the token ids) was copied on every run.
    let mut elements = 0usize;
    for slot in slots.iter().flatten() {
        match &slot.host {
            Some(h) if slot.constant || plans => elements += h.numel(),
            _ => return Ok(None),
        }
    }
    if elements > FOLD_LIMIT {
        return Ok(None);
    }
    let inputs: Vec<Option<HostTensor>> = slots
        .iter()
        .map(|slot| slot.and_then(|s| s.host.as_deref()).cloned())
        .collect();
    // Small inputs can ask for a large result (pads, scales, a depth, a shape of 10^10): the
    // interpreter would build it on the host, past its memory, where the GPU's plan checks
    // the device's limits first and says which was exceeded. A repeat of small constants
    // into a result over FOLD_LIMIT goes to the GPU too: computed on the host it is built
    // and uploaded every run; the GPU writes it in one dispatch.
    let repeat = matches!(node.op.as_str(), "Expand" | "Tile");
    let limit = if repeat && !plans {
        FOLD_LIMIT as u64
    } else {
        FOLD_RESULT_LIMIT
    };
    if result_elements(node, &inputs).is_none_or(|n| n > limit) {
        return Ok(None);
    }
    // An op the interpreter cannot compute (or refuses) is left to the GPU, whose validation
    // reports user errors.
    Ok(crate::reference::graph::eval_node(node, &inputs).ok())
}

/// The most elements the results of one node computed on the host (see `fold`) may hold:
/// 2^24, 128 MiB of f64.
const FOLD_RESULT_LIMIT: u64 = 1 << 24;

/// At most how many elements the node's results hold, from its inputs' shapes and the values
/// it reads as sizes, before they are computed; `None` where that is not known without
/// computing them (ops sized by their attributes: pads, strides, output shapes, counts).
/// Ops not sized by values or attributes give at most the product of their inputs' sizes
/// (broadcasts, products, gathers) or a few times their sum (concatenations, NonZero's
/// coordinates).
fn result_elements(node: &Node, inputs: &[Option<HostTensor>]) -> Option<u64> {
    let input = |k: usize| inputs.get(k)?.as_ref();
    let shape = |k: usize| -> Option<Vec<u64>> {
        Some(input(k)?.shape.iter().map(|&d| d as u64).collect())
    };
    let ints = |k: usize| input(k)?.to_indices("fold", "sizes").ok();
    let int = |k: usize| {
        ints(k)?
            .first()
            .copied()
            .and_then(|v| u64::try_from(v).ok())
    };
    let floats = |k: usize| -> Option<Vec<f64>> {
        crate::reference::cast_host(input(k)?, DType::F64)
            .ok()?
            .to_vec::<f64>()
            .ok()
    };
    let product = |d: &[u64]| d.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    // The dims of `x` each grown by `more[k]` along `axes` (all of them when `None`).
    let grown = |x: &[u64], axes: Option<Vec<i64>>, more: &[u64]| -> Option<u64> {
        let axes: Vec<usize> = match axes {
            Some(a) => a
                .iter()
                .map(|&a| axis_at(a, x.len()))
                .collect::<Option<_>>()?,
            None => (0..x.len()).collect(),
        };
        let mut dims = x.to_vec();
        for (&a, &m) in axes.iter().zip(more) {
            *dims.get_mut(a)? = dims[a].checked_add(m)?;
        }
        product(&dims)
    };
    let attr_axes = || match node.attrs.get("axes") {
        Some(crate::graph::Attr::Ints(a)) => Some(a.clone()),
        _ => None,
    };
    match node.op.as_str() {
        "Expand" | "Tile" => repeated_elements(&node.op, inputs),
        "Pad" => {
            let pads = ints(1)?;
            let n = pads.len() / 2;
            let more: Vec<u64> = (0..n)
                .map(|k| pads[k].max(0) as u64 + pads[n + k].max(0) as u64)
                .collect();
            grown(&shape(0)?, input(3).and_then(|_| ints(3)), &more)
        }
        "SpaceToBatch" => {
            let (begin, end) = (ints(2)?, ints(3)?);
            let more: Vec<u64> = begin
                .iter()
                .zip(&end)
                .map(|(&b, &e)| b.max(0) as u64 + e.max(0) as u64)
                .collect();
            grown(&shape(0)?, None, &more)
        }
        "CenterCropPad" => {
            let to: Vec<u64> = ints(1)?.iter().map(|&d| d.max(0) as u64).collect();
            grown(&shape(0)?, attr_axes(), &to)
        }
        "OneHot" => {
            let depth = floats(1)?.first()?.abs().ceil();
            let indices = input(0)?.numel() as u64;
            (depth < 1e18).then(|| (depth as u64).saturating_mul(indices))
        }
        "Resize" => {
            // Each resized axis at most its largest scale (or size over length) times its
            // length, plus one.
            let x = shape(0)?;
            let axes = attr_axes();
            let lengths: Vec<u64> = match &axes {
                Some(a) => a
                    .iter()
                    .map(|&a| Some(x[axis_at(a, x.len())?]))
                    .collect::<Option<_>>()?,
                None => x.clone(),
            };
            let scale = match floats(2).filter(|s| !s.is_empty()) {
                Some(s) => s.into_iter().fold(0.0, f64::max),
                None => ints(3)?
                    .iter()
                    .zip(&lengths)
                    .map(|(&s, &d)| s as f64 / d.max(1) as f64)
                    .fold(0.0, f64::max),
            };
            let more: Vec<u64> = lengths
                .iter()
                .map(|&d| ((scale - 1.0).max(0.0) * d as f64).min(1e18) as u64 + 1)
                .collect();
            grown(&x, axes, &more)
        }
        "DFT" => (input(0)?.numel() as u64)
            .checked_mul(int(1).unwrap_or(1).max(1))?
            .checked_mul(2),
        "STFT" => {
            let frame = int(3).or_else(|| Some(input(2)?.numel() as u64))?;
            (input(0)?.numel() as u64)
                .checked_mul(frame.max(1))?
                .checked_mul(2)
        }
        "Col2Im" => {
            let x = shape(0)?;
            let image: Vec<u64> = ints(1)?.iter().map(|&d| d.max(0) as u64).collect();
            product(x.get(..2)?)?.checked_mul(product(&image)?)
        }
        "AffineGrid" => {
            let size: Vec<u64> = ints(1)?.iter().map(|&d| d.max(0) as u64).collect();
            product(&size)?.checked_mul(3)
        }
        // Sized by their attributes.
        "Conv"
        | "ConvTranspose"
        | "MaxPool"
        | "AveragePool"
        | "LpPool"
        | "MaxRoiPool"
        | "ai.onnx.ml.FeatureVectorizer"
        | "TreeWalk"
        | "RandomNormal"
        | "RandomUniform"
        | "RandomNormalLike"
        | "RandomUniformLike"
        | "Multinomial"
        | "Bernoulli" => None,
        _ => {
            let given: Vec<&HostTensor> = inputs.iter().flatten().collect();
            if given.is_empty() {
                return None;
            }
            let rank = given.iter().map(|t| t.shape.len() as u64).max()?;
            let sum = given.iter().map(|t| t.numel() as u64).sum::<u64>();
            let all = given
                .iter()
                .try_fold(1u64, |n, t| n.checked_mul(t.numel().max(1) as u64))?;
            Some(all.max(sum * (rank + 4)))
        }
    }
}

/// Axis `a` of `rank` axes (from the end when negative), if there is one.
fn axis_at(a: i64, rank: usize) -> Option<usize> {
    let k = if a < 0 { a + rank as i64 } else { a };
    usize::try_from(k).ok().filter(|&k| k < rank)
}

/// The elements of the result of an op that repeats its input (Expand, Tile; ConstantOfShape
/// decides for itself), from its inputs; `None` for other ops and inputs they would refuse.
fn repeated_elements(op: &str, inputs: &[Option<HostTensor>]) -> Option<u64> {
    let dims = |k: usize| -> Option<Vec<u64>> {
        let t = inputs.get(k)?.as_ref()?;
        let v = t.to_indices("fold", "dims").ok()?;
        v.into_iter().map(|d| u64::try_from(d).ok()).collect()
    };
    let product = |d: &[u64]| d.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    match op {
        "Expand" => {
            let shape: Vec<u64> = inputs
                .first()?
                .as_ref()?
                .shape
                .iter()
                .map(|&d| d as u64)
                .collect();
            let to = dims(1)?;
            let rank = shape.len().max(to.len());
            let at = |d: &[u64], k: usize| match k + d.len() >= rank {
                true => d[k + d.len() - rank],
                false => 1,
            };
            let out: Vec<u64> = (0..rank).map(|k| at(&shape, k).max(at(&to, k))).collect();
            product(&out)
        }
        "Tile" => {
            let shape = &inputs.first()?.as_ref()?.shape;
            let repeats = dims(1)?;
            let n = product(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>())?;
            n.checked_mul(product(&repeats)?)
        }
        _ => None,
    }
}

/// A [`Value`] given to a run, its tensors shared.
enum Given {
    Tensor(Arc<HostTensor>),
    Sequence(Vec<Arc<HostTensor>>),
    None,
    Strings(Arc<StringTensor>),
    Maps(Arc<MapSequence>),
    Map(Arc<crate::Map>),
}

/// A validated, scheduled graph bound to a context, ready to run many times.
///
/// The graph's constants (weights), and those of its Scan bodies, are uploaded by the first
/// run that reads them and stay on the GPU for the session's life, so later runs neither copy
/// nor upload them again. So do the values computed from constants alone that the rest of the
/// graph reads (weights cut, transposed, cast or dequantized): the first run computes them in
/// a submission of its own, and no run computes them again ([`Session::constant_bytes`]).
/// The buffers of a run's intermediate values (and of its outputs once
/// downloaded, or once the caller drops the tensors [`Session::run_tensors`] gave it), and
/// those of its Scans' loops (states, elements, rows), are kept for the next
/// run, which takes them instead of creating buffers of the same sizes: between runs
/// a session holds at most what its last run used besides its inputs and outputs
/// ([`Session::spare_bytes`]; [`Session::release_buffers`] frees them, and a run that the
/// memory limit would refuse frees them first).
pub struct Session {
    ctx: Context,
    graph: Graph,
    order: Vec<usize>,
    /// The constants uploaded so far, by name.
    uploaded: Mutex<FastMap<String, Tensor>>,
    /// Buffers the last run left, for the next one.
    spare: Mutex<SparePool>,
    /// Scan bodies' constants uploaded so far (see `Recorder::body_constants`).
    body_constants: Mutex<crate::recorder::BodyConstants>,
    /// The random nodes' streams, whose draw indices the runs advance on the GPU.
    streams: Mutex<HashMap<String, crate::RandomStream>>,
    /// The buffers the last run uploaded each host input into, by input name: the next run
    /// uploads inputs of the same sizes into them instead of into new buffers.
    input_buffers: Mutex<HashMap<String, Arc<crate::storage::Storage>>>,
    /// The buffers of the tensors the last `run_tensors` handed out: those the caller has
    /// dropped by the next run (the session then holds the only handle) serve its values.
    lent: Mutex<Vec<Arc<crate::storage::Storage>>>,
    /// The index faults of the last run if it was a `run_tensors`, for
    /// [`Session::check_gpu_indices`].
    faults: Mutex<Option<IndexFaults>>,
    /// The buffer the last run's index kernels reported into, for the next run's.
    fault_buffer: Mutex<Option<Tensor>>,
    /// The last `run_tensors`' commands, where the next may encode them again (see
    /// `replay`).
    replay: Mutex<Option<replay::RunLog>>,
    /// How many runs replayed a log.
    replayed: std::sync::atomic::AtomicU64,
    /// Whether `run_tensors` may replay (see [`Session::set_replay`]).
    replay_on: std::sync::atomic::AtomicBool,
    /// Whether `run_values` uploads its tensors before planning (see
    /// [`Session::run_values`]); off for graphs with strings, maps or sequences, and once a
    /// run failed that way and succeeded planned on the host values.
    upload_first: std::sync::atomic::AtomicBool,
    /// The buffers the last run uploaded its inputs into before planning, by input name: the
    /// next run uploads into them, so that a replay binds what the log bound.
    uploaded_inputs: Mutex<HashMap<String, std::sync::Weak<crate::storage::Storage>>>,
    /// The graph inputs whose values planning reads, which `run_values` leaves on the host.
    planning_inputs: HashSet<String>,
    /// Values computed from the constants alone, kept from the first run.
    derived: derived::Derived,
    /// The graph's structure as planning reads it, computed once.
    analysis: Analysis,
}

/// A run recorded and submitted: its values, the buffers it pooled but did not use, the
/// index faults to read back, and its commands where they were logged to be encoded again.
/// `tensors` downloaded at once with the run's index faults, which are checked.
async fn download_checked(
    ctx: &Context,
    mut tensors: Vec<&Tensor>,
    faults: Option<&IndexFaults>,
) -> Result<Vec<HostTensor>> {
    tensors.extend(faults.map(IndexFaults::buffer));
    let mut downloaded = download_all(ctx, &tensors).await?;
    if let Some(faults) = faults {
        let words = downloaded
            .pop()
            .expect("the fault words were downloaded last");
        faults.check(&words)?;
    }
    Ok(downloaded)
}

/// An output of a run: on the GPU, or a value on the host where the caller downloads them.
enum Produced {
    Gpu(Tensor),
    Host(HostTensor),
}

struct Recorded {
    scope: Scope<'static>,
    spare: SparePool,
    faults: Option<IndexFaults>,
    log: Option<Vec<Logged>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("graph", &self.graph)
            .field("spare_bytes", &self.spare_bytes())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session running `graph` on `ctx`: the graph is checked (outputs distinct, its nodes
    /// ordered without a cycle) and analysed once here; each run plans it for its inputs (or
    /// replays the last run's commands where the shapes are the same, see
    /// [`Session::run_tensors`]).
    pub fn new(ctx: &Context, graph: Graph) -> Result<Session> {
        graph.check_outputs_distinct()?;
        // Gemms that are MatMuls in all but name run as MatMuls, which head fused programs
        // and move out of Scan loops (both of which fusing turns on).
        let graph = match ctx.fuse_elementwise() {
            true => super::lower::gemms_as_matmuls(graph),
            false => graph,
        };
        let order = graph.schedule(&|_: &str| false)?;
        let derived = derived::Derived::new(&graph, &order);
        let analysis = Analysis::new(ctx, &graph, &order, &HashMap::new(), &[]);
        // Graph inputs whose values planning reads: those that plan ops, and those whose
        // values `CheckInputs` rules check while planning only (where no `CheckValues` node
        // checks them on the GPU, as the ONNX loader adds one for each such rule).
        let on_gpu_checked: HashSet<&str> = graph
            .nodes
            .iter()
            .filter(|n| n.op == "CheckValues")
            .filter_map(|n| n.inputs.first().map(String::as_str))
            .collect();
        let host_checked: HashSet<&str> = graph
            .nodes
            .iter()
            .filter(|n| n.op == "CheckInputs")
            .flat_map(|n| {
                let op = match n.attrs.get("op") {
                    Some(Attr::String(op)) => op.as_str(),
                    _ => "",
                };
                let checked = super::input_rules::value_checked_inputs(op);
                checked.iter().filter_map(|&k| n.inputs.get(k))
            })
            .map(String::as_str)
            .filter(|v| !on_gpu_checked.contains(v))
            .collect();
        let planning_inputs = graph
            .inputs
            .iter()
            .map(|i| &i.name)
            .filter(|&i| analysis.plan_values.contains(i) || host_checked.contains(i.as_str()))
            .cloned()
            .collect();
        // Strings, maps and sequences are made and read on the host: a graph with them
        // plans on the host values.
        let host_kinds = graph.nodes.iter().any(|n| {
            super::strings::OPS.contains(&n.op.as_str())
                || super::sequence::OPS.contains(&n.op.as_str())
                || super::strings::makes_strings(n)
        });
        Ok(Session {
            ctx: ctx.clone(),
            graph,
            order,
            uploaded: Mutex::new(FastMap::default()),
            spare: Mutex::new(SparePool::default()),
            body_constants: Mutex::new(Default::default()),
            streams: Mutex::new(HashMap::new()),
            input_buffers: Mutex::new(HashMap::new()),
            lent: Mutex::new(Vec::new()),
            faults: Mutex::new(None),
            fault_buffer: Mutex::new(None),
            replay: Mutex::new(None),
            replayed: Default::default(),
            replay_on: std::sync::atomic::AtomicBool::new(true),
            upload_first: std::sync::atomic::AtomicBool::new(!host_kinds),
            uploaded_inputs: Mutex::new(HashMap::new()),
            planning_inputs,
            derived,
            analysis,
        })
    }

    /// The graph the session runs (after the rewrites it made: Gemms as MatMuls, ...).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Bytes of device buffers the session keeps between runs for its next run.
    pub fn spare_bytes(&self) -> u64 {
        let inputs: u64 = self
            .input_buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|s| s.size())
            .sum();
        let returned: u64 = self
            .lent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| Arc::strong_count(s) == 1)
            .map(|s| s.size())
            .sum();
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).bytes() + inputs + returned
    }

    /// Bytes of device buffers the session keeps for its life: the constants its runs
    /// uploaded, and the values its first run computed from them (see [`Session`]).
    pub fn constant_bytes(&self) -> u64 {
        let held = self.held_for_life();
        // Kept values may view uploads, or each other.
        let mut storages: Vec<&Arc<crate::storage::Storage>> = Vec::new();
        for t in &held {
            if !storages.iter().any(|s| Arc::ptr_eq(s, t.storage())) {
                storages.push(t.storage());
            }
        }
        storages.iter().map(|s| s.size()).sum()
    }

    /// The constants uploaded and the values kept from the first run.
    fn held_for_life(&self) -> Vec<Tensor> {
        let uploaded = self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
        let mut held: Vec<Tensor> = uploaded.values().cloned().collect();
        held.extend(self.derived.tensors());
        held
    }

    /// How many of this session's runs encoded the last run's commands again instead of
    /// planning the graph (see [`Session::run_tensors`]).
    pub fn replayed_runs(&self) -> u64 {
        self.replayed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether [`Session::run_values`] (and [`Session::run`]) upload their tensor inputs
    /// before planning, and so may replay: true until a run failed that way and succeeded
    /// planned on the values on the host (a Scan body that reshapes by an outer input, say).
    pub fn uploads_inputs_first(&self) -> bool {
        self.upload_first.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether [`Session::run_values`] (and [`Session::run`]) upload their tensor inputs
    /// before planning (on by default, but for graphs with strings, maps or sequences); off,
    /// every such run is planned on the values on the host (for comparisons).
    pub fn set_uploads_inputs_first(&self, on: bool) {
        self.upload_first
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`Session::run_tensors`] may encode the last run's commands again (on by
    /// default); off, every run plans and records the graph (for comparisons).
    pub fn set_replay(&self, on: bool) {
        self.replay_on
            .store(on, std::sync::atomic::Ordering::Relaxed);
        if !on {
            drop(self.replay.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
    }

    /// Frees the buffers the session keeps between runs (the next run creates its own).
    pub fn release_buffers(&self) {
        let freed = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|e| e.into_inner()));
        let inputs =
            std::mem::take(&mut *self.input_buffers.lock().unwrap_or_else(|e| e.into_inner()));
        let lent = std::mem::take(&mut *self.lent.lock().unwrap_or_else(|e| e.into_inner()));
        let log = self.replay.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop((freed, inputs, lent, log));
    }

    /// Keeps for the next run the buffers `spare` holds and those of the run's values in
    /// `scope` that nothing else holds (not the caller's outputs, inputs or kept constants).
    /// The buffers of host inputs' uploads (or those reserved for them and not used) are kept
    /// by input name, for the next run's uploads.
    fn keep_spare(&self, mut spare: SparePool, scope: Scope<'static>) {
        let mut inputs = HashMap::new();
        for (name, slot) in scope.slots {
            // Graph inputs given on the host (not values folded on the host from them).
            let host_input = slot.host.is_some()
                && !slot.constant
                && self.graph.inputs.iter().any(|i| i.name == name);
            let Slot {
                gpu,
                pending,
                swapped,
                swapped_pending,
                reserved,
                seq,
                ..
            } = slot;
            drop((pending, swapped, swapped_pending));
            // A sequence's tensors (SplitToSequence's, SequenceMap's): those that nothing else
            // holds serve the next run's values as the others' do.
            for item in seq.into_iter().flat_map(|s| s.items) {
                if let Some(t) = item.gpu.into_inner() {
                    spare.keep(t);
                }
                // Reserved for an upload that did not happen (see `Slot::tensor_on`).
                let reserved = item.reserved.into_inner();
                if let Some(storage) = reserved.unwrap_or_else(|e| e.into_inner()) {
                    spare.keep_storage(storage);
                }
            }
            let reserved = reserved.into_inner().unwrap_or_else(|e| e.into_inner());
            match gpu.into_inner() {
                Some(t) if host_input => {
                    if let Some(storage) = t.into_unique_storage().filter(|s| s.uploaded()) {
                        inputs.insert(name, storage);
                    }
                }
                Some(t) => spare.keep(t),
                None => match reserved {
                    Some(storage) if host_input => {
                        inputs.insert(name, storage);
                    }
                    // Reserved for a folded value that was not uploaded.
                    Some(storage) => spare.keep_storage(storage),
                    None => {}
                },
            }
        }
        *self.spare.lock().unwrap_or_else(|e| e.into_inner()) = spare;
        *self.input_buffers.lock().unwrap_or_else(|e| e.into_inner()) = inputs;
    }

    /// Runs the graph on `inputs` (by name) and returns its outputs in declaration order.
    /// A graph whose inputs or outputs are sequences or optionals runs with
    /// [`Session::run_values`].
    pub async fn run(
        &self,
        inputs: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>> {
        if let Some(o) = self
            .graph
            .outputs
            .iter()
            .find(|o| o.kind != ValueKind::Tensor)
        {
            return Err(Error::Graph(format!(
                "output '{}' is declared {}; Session::run_values gives such outputs",
                o.name.escape_debug(),
                o.kind.name()
            )));
        }
        let inputs = inputs
            .into_iter()
            .map(|(n, v)| (n, Value::Tensor(v)))
            .collect();
        self.run_values(inputs)
            .await?
            .into_iter()
            .map(|(name, value)| match value {
                Value::Tensor(t) => Ok((name, t)),
                other => Err(Error::Graph(format!(
                    "output '{}' is {}; Session::run_values gives such outputs",
                    name.escape_debug(),
                    other.kind_name()
                ))),
            })
            .collect()
    }

    /// Runs the graph on `inputs` (by name), which may be sequences, empty optionals, string
    /// tensors, sequences of maps and maps as the graph declares them, and returns its outputs
    /// in declaration order.
    ///
    /// Where every input and output is a tensor, the inputs are uploaded before the graph is
    /// planned, but for those whose values plan ops (a Reshape's shape, a Range's limit) or
    /// input rules check while planning only (`CheckInputs` without a `CheckValues`), and
    /// the run goes the way of [`Session::run_tensors`]: a run whose inputs have the dtypes
    /// and shapes of the last run's, and the same values where they plan ops, encodes the
    /// last run's commands again instead of planning the graph ([`Session::replayed_runs`]).
    /// A run that fails that way is planned again on the values on the host, which gives
    /// the error its precise message (an index out of range named while planning rather than
    /// found on the GPU); where that succeeds, the session plans on the host from then on.
    pub async fn run_values(&self, inputs: Vec<(String, Value)>) -> Result<Vec<(String, Value)>> {
        // Shared, so that a second attempt (see `record_run`) does not copy them.
        let inputs: Vec<(String, Given)> = inputs
            .into_iter()
            .map(|(n, v)| {
                let given = match v {
                    Value::Tensor(t) => Given::Tensor(Arc::new(t)),
                    Value::Sequence(items) => {
                        Given::Sequence(items.into_iter().map(Arc::new).collect())
                    }
                    Value::None => Given::None,
                    Value::Strings(t) => Given::Strings(Arc::new(t)),
                    Value::Maps(m) => Given::Maps(Arc::new(m)),
                    Value::Map(m) => Given::Map(Arc::new(m)),
                };
                (n, given)
            })
            .collect();
        let tensors: Option<Vec<(String, Arc<HostTensor>)>> = inputs
            .iter()
            .map(|(n, v)| match v {
                Given::Tensor(t) => Some((n.clone(), t.clone())),
                _ => None,
            })
            .collect();
        let tensor_outputs = self
            .graph
            .outputs
            .iter()
            .all(|o| o.kind == ValueKind::Tensor);
        let upload_first = self.upload_first.load(std::sync::atomic::Ordering::Relaxed);
        if let (Some(tensors), true, true) = (tensors, tensor_outputs, upload_first) {
            if let Ok(outputs) = self.run_uploaded(tensors).await {
                return Ok(outputs);
            }
            let planned = self.run_planned(&inputs).await;
            if planned.is_ok() {
                self.upload_first
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            return planned;
        }
        self.run_planned(&inputs).await
    }

    /// [`Session::run_values`] with the inputs' values on the host while planning.
    async fn run_planned(&self, inputs: &[(String, Given)]) -> Result<Vec<(String, Value)>> {
        let slot_of = |v: &Given| match v {
            Given::Tensor(t) => Slot::input(t.clone()),
            Given::Sequence(items) => Slot::sequence(Sequence {
                dtype: items.first().map(|t| t.dtype),
                items: items.iter().map(|t| Slot::input(t.clone())).collect(),
            }),
            Given::None => Slot::absent(),
            Given::Strings(t) => Slot::strings(t.clone()),
            Given::Maps(m) => Slot::maps(m.clone()),
            Given::Map(m) => Slot::map(m.clone()),
        };
        let slots = || {
            inputs
                .iter()
                .map(|(n, v)| (n.clone(), slot_of(v)))
                .collect()
        };
        let Recorded {
            scope,
            spare,
            faults,
            ..
        } = self.record_run(slots, false).await?;

        // Every tensor of the outputs that is on the GPU, in order, downloaded at once, with
        // the run's index faults last.
        let mut on_gpu: Vec<&Tensor> = Vec::new();
        for o in &self.graph.outputs {
            let slot = &scope.slots[o.name.as_str()];
            let items: Vec<&Slot> = match &slot.seq {
                Some(seq) => seq.items.iter().collect(),
                None if slot.non_tensor().is_some() => Vec::new(),
                None => vec![slot],
            };
            for item in items.into_iter().filter(|s| s.host.is_none()) {
                on_gpu.push(item.gpu.get().expect("node outputs are on the GPU"));
            }
        }
        let downloaded = download_checked(&self.ctx, on_gpu, faults.as_ref()).await?;
        let mut downloaded = downloaded.into_iter();
        let mut value_of = |slot: &Slot| match &slot.host {
            Some(h) => HostTensor::clone(h),
            None => downloaded.next().expect("one download per GPU output"),
        };
        let mut results = Vec::with_capacity(self.graph.outputs.len());
        for o in &self.graph.outputs {
            let slot = &scope.slots[o.name.as_str()];
            super::sequence::check_slot(o, "output", slot)?;
            let value = match &slot.seq {
                Some(seq) => Value::Sequence(seq.items.iter().map(&mut value_of).collect()),
                None if slot.absent => Value::None,
                None => match (&slot.strings, &slot.maps, &slot.map) {
                    (Some(t), _, _) => Value::Strings(StringTensor::clone(t)),
                    (_, Some(m), _) => Value::Maps(MapSequence::clone(m)),
                    (_, _, Some(m)) => Value::Map(crate::Map::clone(m)),
                    _ => Value::Tensor(value_of(slot)),
                },
            };
            results.push((o.name.clone(), value));
        }
        self.keep_spare(spare, scope);
        Ok(results)
    }

    /// Runs the graph on tensors already on the GPU and returns its outputs there (no upload,
    /// no download): for engines that keep their data on the device. The buffers of outputs
    /// the caller has dropped by the next run serve that run (a loop that drops its outputs
    /// creates none); outputs it still holds are left alone. An input the caller keeps no
    /// other handle to is the run's: a scatter that reads it last writes its updates into it
    /// where it lies (a decode loop that gives each step's KV cache back as the next step's
    /// input copies no cache), and a Scan or Loop whose initial state it is keeps that state
    /// in it; an input the caller still holds is never written.
    ///
    /// A run whose inputs have the dtypes and shapes of the last run's, each handed over or
    /// held as then, encodes the last run's commands again instead of planning the graph (its
    /// inputs bound where they lie): see the replay notes in `graph/exec/replay.rs`,
    /// [`Session::replayed_runs`] and [`Session::set_replay`].
    pub async fn run_tensors(
        &self,
        inputs: Vec<(String, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>> {
        let outputs = self.run_on(inputs, Vec::new(), false).await?;
        let tensor = |(name, out)| match out {
            Produced::Gpu(t) => Ok((name, t)),
            Produced::Host(_) => Err(Error::Graph("internal: an output left on the host".into())),
        };
        outputs.into_iter().map(tensor).collect()
    }

    /// `run_values` on tensors, each uploaded before planning but those whose values planning
    /// reads (see [`Session::run_values`]); the outputs downloaded and the index faults checked.
    async fn run_uploaded(
        &self,
        inputs: Vec<(String, Arc<HostTensor>)>,
    ) -> Result<Vec<(String, Value)>> {
        let mut tensors = Vec::with_capacity(inputs.len());
        let mut host = Vec::new();
        {
            let targets = self
                .uploaded_inputs
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
            let lent = self.lent.lock().unwrap_or_else(|e| e.into_inner());
            for (name, value) in inputs {
                if self.planning_inputs.contains(&name) {
                    host.push((name, value));
                    continue;
                }
                // The last run's buffer for this input, where nothing but the pool and the
                // last outputs (downloaded) hold it.
                let size = crate::storage::alloc_size(value.data.len() as u64);
                let target = targets
                    .get(&name)
                    .and_then(std::sync::Weak::upgrade)
                    .filter(|s| s.size() == size);
                let target = target.filter(|s| {
                    spare.remove(s);
                    let lent = lent.iter().filter(|l| Arc::ptr_eq(l, s)).count();
                    Arc::strong_count(s) == 1 + lent
                });
                let t = match target {
                    Some(storage) => Tensor::upload_into(&self.ctx, &value, storage)?,
                    None => Tensor::from_host(&self.ctx, &value)?,
                };
                tensors.push((name, t));
            }
        }
        *self
            .uploaded_inputs
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = tensors
            .iter()
            .map(|(n, t)| (n.clone(), Arc::downgrade(t.storage())))
            .collect();
        let outputs = self.run_on(tensors, host, true).await?;
        let faults = self.faults.lock().unwrap_or_else(|e| e.into_inner()).take();
        let on_gpu: Vec<&Tensor> = outputs
            .iter()
            .filter_map(|(_, out)| match out {
                Produced::Gpu(t) => Some(t),
                Produced::Host(_) => None,
            })
            .collect();
        let downloaded = download_checked(&self.ctx, on_gpu, faults.as_ref()).await?;
        let mut downloaded = downloaded.into_iter();
        let mut value = |out| match out {
            Produced::Gpu(_) => downloaded.next().expect("one download per GPU output"),
            Produced::Host(h) => h,
        };
        Ok(outputs
            .into_iter()
            .map(|(name, out)| (name, Value::Tensor(value(out))))
            .collect())
    }

    /// [`Session::run_tensors`] on `inputs`, and on `host`, inputs given on the host (whose
    /// values planning reads: a replay needs them equal). `host_outputs`: outputs that are
    /// values on the host are given as such (not uploaded).
    async fn run_on(
        &self,
        inputs: Vec<(String, Tensor)>,
        host: Vec<(String, Arc<HostTensor>)>,
        host_outputs: bool,
    ) -> Result<Vec<(String, Produced)>> {
        let handed = {
            let lent = self.lent.lock().unwrap_or_else(|e| e.into_inner());
            replay::handed_over(&inputs, &lent)
        };
        if let Some(outputs) = self.replay_run(&inputs, &handed, &host).await? {
            let outputs = outputs.into_iter();
            return Ok(outputs.map(|(n, t)| (n, Produced::Gpu(t))).collect());
        }
        // An input the caller kept no other handle to (`inputs` holds one) is the run's to
        // write over once its last reader has run (see `writable_input`).
        let slots = || {
            inputs
                .iter()
                .map(|(n, t)| {
                    let mut slot = Slot::gpu(t.clone());
                    slot.owned_input = Some(Owned::Handed);
                    (n.clone(), slot)
                })
                .chain(
                    host.iter()
                        .map(|(n, h)| (n.clone(), Slot::input(h.clone()))),
                )
                .collect()
        };
        let Recorded {
            scope,
            spare,
            faults,
            log,
        } = self
            .record_run(
                slots,
                self.replay_on.load(std::sync::atomic::Ordering::Relaxed),
            )
            .await?;
        let logged_faults = log.as_ref().and(faults.clone());
        *self.faults.lock().unwrap_or_else(|e| e.into_inner()) = faults;
        let logged_inputs = log
            .as_ref()
            .map(|_| replay::logged_inputs(&inputs, &handed));
        drop(inputs);
        // Values on the host stay there where the caller downloads the outputs.
        let on_host = |slot: &Slot| match (&slot.host, host_outputs) {
            (Some(h), true) if slot.gpu.get().is_none() => Some(HostTensor::clone(h)),
            _ => None,
        };
        let outputs: Vec<(String, Produced)> = self
            .graph
            .outputs
            .iter()
            .map(|o| {
                let slot = &scope.slots[o.name.as_str()];
                if let Some(what) = slot.non_tensor() {
                    return Err(Error::Graph(format!(
                        "output '{}' is {what}; Session::run_values gives such outputs",
                        o.name.escape_debug()
                    )));
                }
                if let Some(h) = on_host(slot) {
                    o.check("output", h.dtype, &h.shape)?;
                    return Ok((o.name.clone(), Produced::Host(h)));
                }
                let t = slot.tensor(&self.ctx)?;
                o.check("output", t.dtype(), t.shape())?;
                Ok((o.name.clone(), Produced::Gpu(t)))
            })
            .collect::<Result<_>>()?;
        // An output that is a kept constant (or a view of one) is handed out as a copy: the
        // caller may write into it (`Out::into`), and later runs read the constant.
        let kept = self.held_for_life();
        let mut rec: Option<Recorder> = None;
        let mut copied = Vec::with_capacity(outputs.len());
        let mut on_gpu = Vec::with_capacity(outputs.len());
        for (name, out) in outputs {
            let t = match out {
                Produced::Gpu(t) => t,
                host => {
                    copied.push((name, host));
                    continue;
                }
            };
            let t = if kept.iter().any(|k| k.shares_buffer(&t)) {
                let rec = rec.get_or_insert_with(|| self.ctx.recorder());
                let copy = Tensor::uninit(&self.ctx, t.dtype(), t.shape())?;
                let bytes = crate::storage::padded_size(t.byte_len());
                rec.copy(t.storage(), 0, copy.storage(), 0, bytes)?;
                copy
            } else {
                t
            };
            on_gpu.push((name.clone(), t.clone()));
            copied.push((name, Produced::Gpu(t)));
        }
        // A log gives back buffers: outputs left on the host are not in one.
        let replayable = rec.is_none() && on_gpu.len() == copied.len();
        if let Some(rec) = rec {
            rec.finish().await?;
        }
        self.keep_spare(spare, scope);
        *self.lent.lock().unwrap_or_else(|e| e.into_inner()) =
            on_gpu.iter().map(|(_, t)| t.storage().clone()).collect();
        // Outputs copied out of kept constants are made anew by each run, outside the log.
        if let (Some(steps), Some(inputs), true) = (log, logged_inputs, replayable) {
            let kept = replay::RunLog::new(steps, inputs, host, &on_gpu, logged_faults);
            *self.replay.lock().unwrap_or_else(|e| e.into_inner()) = kept;
        }
        Ok(copied)
    }

    /// Checks the indices that the last [`Session::run_tensors`] computed on the GPU (as
    /// [`Session::run_values`] does when it reads its outputs back): waits for the run and
    /// reads back the word its index kernels report into. An index out of range (a Gather's,
    /// GatherElements', GatherND's, a scatter's or ArrayFeatureExtractor's) fails with
    /// [`Error::IndexOutOfRange`]; the outputs that depend on it hold zeros (gathers) or
    /// miss its update (scatters) there. Ok when that run had no such index or no such op.
    pub async fn check_gpu_indices(&self) -> Result<()> {
        let faults = self.faults.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(faults) = faults else {
            return Ok(());
        };
        let words = download_all(&self.ctx, &[faults.buffer()]).await?;
        faults.check(&words[0])
    }

    /// Blocking [`Session::check_gpu_indices`] for native callers.
    #[cfg(feature = "native")]
    pub fn check_gpu_indices_blocking(&self) -> Result<()> {
        pollster::block_on(self.check_gpu_indices())
    }

    /// Blocking [`Session::run_tensors`] for native callers.
    #[cfg(feature = "native")]
    pub fn run_tensors_blocking(
        &self,
        inputs: Vec<(String, Tensor)>,
    ) -> Result<Vec<(String, Tensor)>> {
        pollster::block_on(self.run_tensors(inputs))
    }

    /// Records and submits a run on the inputs `slots` makes, with the buffers kept from the
    /// last run; where the memory limit refuses it while buffers were kept, once more without
    /// them (uploads do not draw on them, so a run on larger inputs may need their room).
    async fn record_run(
        &self,
        slots: impl Fn() -> Vec<(String, Slot)>,
        log: bool,
    ) -> Result<Recorded> {
        // A run recorded anew replaces the last one's log (its buffers are the pool's again).
        drop(self.replay.lock().unwrap_or_else(|e| e.into_inner()).take());
        if self.derived.not_yet() {
            // The first run's: a copy, as the lock is not held across the submission.
            let uploaded = self
                .uploaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let shared = self
                .derived
                .ensure(&self.ctx, &self.graph, &self.order, &uploaded)
                .await;
            drop(uploaded);
            let mut uploaded = self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
            for (name, t) in shared {
                uploaded.entry(name).or_insert(t);
            }
        }
        let mut spare = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|e| e.into_inner()));
        // Outputs of the last `run_tensors` that the caller has dropped; the others are the
        // caller's alone from now on.
        let lent = std::mem::take(&mut *self.lent.lock().unwrap_or_else(|e| e.into_inner()));
        for storage in lent {
            if Arc::strong_count(&storage) == 1 {
                spare.keep_storage(storage);
            }
        }
        let inputs =
            std::mem::take(&mut *self.input_buffers.lock().unwrap_or_else(|e| e.into_inner()));
        let kept = spare.bytes() > 0 || !inputs.is_empty() || self.derived.holds();
        // Not again once the attempt changed an input tensor the caller handed over.
        let mut changed = false;
        match self
            .record_attempt(slots(), spare, inputs, &mut changed, log)
            .await
        {
            Err(e) if kept && e.is_memory_limit() && !changed => {
                // Nor the values computed from constants: this run and the next compute them.
                self.derived.give_up();
                self.record_attempt(
                    slots(),
                    SparePool::default(),
                    HashMap::new(),
                    &mut changed,
                    log,
                )
                .await
            }
            result => result,
        }
    }

    /// Checks the inputs, records the whole graph into one submission and submits it; returns
    /// the run's values and the buffers it pooled but did not reuse. Where it fails,
    /// `caller_input_changed` tells whether it changed an input tensor the caller handed over.
    async fn record_attempt(
        &self,
        inputs: Vec<(String, Slot)>,
        spare: SparePool,
        mut input_buffers: HashMap<String, Arc<crate::storage::Storage>>,
        caller_input_changed: &mut bool,
        log: bool,
    ) -> Result<Recorded> {
        let mut given: HashMap<String, Slot> = HashMap::new();
        for (name, value) in inputs {
            let Some(decl) = self.graph.inputs.iter().find(|i| i.name == name) else {
                let known: Vec<&str> = self.graph.inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(Error::Graph(format!(
                    "'{name}' is not a graph input (inputs: {known:?})"
                )));
            };
            super::sequence::check_slot(decl, "input", &value)?;
            if given.insert(name.clone(), value).is_some() {
                return Err(Error::Graph(format!("input '{name}' is given twice")));
            }
        }
        // Inputs sized by one symbolic dimension must agree on it.
        for (param, uses) in &self.graph.symbolic_dims {
            let mut first: Option<(&str, usize, usize)> = None;
            for (input, axis) in uses {
                let Some(size) = given
                    .get(input)
                    .filter(|v| v.non_tensor().is_none())
                    .and_then(|v| v.dtype_shape().1.get(*axis).copied())
                else {
                    continue;
                };
                match first {
                    None => first = Some((input, *axis, size)),
                    Some((other, other_axis, other_size)) if other_size != size => {
                        return Err(Error::Graph(format!(
                            "input '{}' has {size} along axis {axis} but input '{}' has {other_size} along axis {other_axis}; both are the dimension '{}'",
                            input.escape_debug(),
                            other.escape_debug(),
                            param.escape_debug()
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        // Sized for every value the graph may hold at once: growing it costs a planned run.
        let values = self.graph.inputs.len()
            + self.graph.constants.len()
            + self
                .graph
                .nodes
                .iter()
                .map(|n| n.outputs.len())
                .sum::<usize>();
        let mut scope = Scope {
            slots: FastMap::with_capacity_and_hasher(values, Default::default()),
            parent: None,
        };
        for decl in &self.graph.inputs {
            let optional = matches!(
                decl.kind,
                ValueKind::OptionalTensor | ValueKind::OptionalSequence
            );
            let mut value = match given.remove(&decl.name) {
                Some(v) => v,
                // An optional input left out holds nothing.
                None if optional => Slot::absent(),
                None => return Err(Error::Graph(format!("input '{}' is not given", decl.name))),
            };
            if value.host.is_some() {
                *value.reserved.lock().unwrap_or_else(|e| e.into_inner()) =
                    input_buffers.remove(&decl.name);
                // Its upload is the run's own.
                value.owned_input = Some(Owned::Upload);
            }
            scope.slots.insert(decl.name.clone(), value);
        }
        let start = self.derived.start();
        {
            let uploaded = self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
            for (k, (name, value)) in self.graph.constants.iter().enumerate() {
                // Not those that only skipped nodes read.
                if start.as_ref().is_some_and(|s| !s.constants[k]) {
                    continue;
                }
                let slot = Slot::constant(value.clone());
                if let Some(t) = uploaded.get(name) {
                    let _ = slot.gpu.set(t.clone());
                }
                scope.slots.insert(name.clone(), slot);
            }
        }
        let mut skip = Vec::new();
        if let Some(start) = start {
            for (name, value) in start.values {
                scope.slots.insert(name, value.slot());
            }
            skip = start.skip;
        }
        let mut rec = self.ctx.recorder();
        if log {
            rec.start_log();
        }
        rec.adopt_spare(spare);
        // The last run's faults are read or dropped by now (see `Session::check_gpu_indices`).
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(b) = self
            .fault_buffer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            rec.index_checks.keep(b);
        }
        rec.body_constants = std::mem::take(
            &mut *self
                .body_constants
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        rec.streams = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let recorded = record_nodes(
            &mut rec,
            &self.graph,
            &self.order,
            &mut scope,
            &HashMap::new(),
            &[],
            Some(SessionRun {
                analysis: &self.analysis,
                skip: &skip,
            }),
        );
        *caller_input_changed = rec.caller_input() == CallerInput::Changed;
        recorded?;
        // Constants this run uploaded are kept for the next runs.
        {
            let mut uploaded = self.uploaded.lock().unwrap_or_else(|e| e.into_inner());
            for (name, _) in &self.graph.constants {
                if let Some(t) = scope.slots.get(name).and_then(|s| s.gpu.get()) {
                    if t.storage().uploaded() {
                        uploaded.entry(name.clone()).or_insert_with(|| t.clone());
                    }
                }
            }
        }
        let spare = rec.take_spare();
        *self
            .body_constants
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = std::mem::take(&mut rec.body_constants);
        // The streams this run created are kept once its commands are submitted.
        let streams = std::mem::take(&mut rec.streams);
        *self.fault_buffer.lock().unwrap_or_else(|e| e.into_inner()) = rec.index_checks.buffer();
        let faults = rec.index_checks.take();
        // What is recorded is submitted now, whether or not it then fails.
        *caller_input_changed = rec.caller_input() != CallerInput::Untouched;
        let log = rec.take_log();
        rec.finish().await?;
        *self.streams.lock().unwrap_or_else(|e| e.into_inner()) = streams;
        Ok(Recorded {
            scope,
            spare,
            faults,
            log,
        })
    }

    /// Blocking [`Session::run_values`] for native callers.
    #[cfg(feature = "native")]
    pub fn run_values_blocking(
        &self,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<(String, Value)>> {
        pollster::block_on(self.run_values(inputs))
    }

    /// Blocking [`Session::run`] for native callers.
    #[cfg(feature = "native")]
    pub fn run_blocking(
        &self,
        inputs: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>> {
        pollster::block_on(self.run(inputs))
    }
}
