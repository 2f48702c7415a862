//! Fusion of element-wise chains while a graph is recorded: a node whose one output is read
//! only by one element-wise node is not recorded; its value stays a [`Pending`] program over
//! the tensors it reads, and the reader records the merged program as one kernel (a Scan
//! body's `Add -> Add -> Add -> Tanh` is one dispatch, with no intermediate tensors). Graph
//! outputs, a Scan body's states and values read by several nodes are always recorded.
//!
//! A MatMul whose product is read only by an element-wise node is deferred too: its pending
//! value is a program whose operand 0 is the product (the *head*), and the chain that follows
//! becomes the MatMul kernel's epilogue (a recurrent cell's `MatMul -> Add -> Tanh` is one
//! dispatch).
//!
//! A chain a MatMul reads (directly or through a Transpose it reads in place) stays pending
//! too, and the kernel computes it where it reads it (a prologue, see
//! `Recorder::matmul_values_to`). A small chain read by up to [`MAX_SHARED_READERS`] nodes that
//! can all compute it so is computed by each, never stored: LinearAttention's decayed state is
//! read by the product with the key and by the update's epilogue.
//!
//! A value whose element-wise readers all lead to one node (a diamond: GELU's
//! `x * (1 + erf(x / sqrt 2))`, SiLU's `x * sigmoid(x)`) stays pending whatever it is, a
//! MatMul's product included: each branch carries its program, and the node where they meet
//! merges them, computing the shared steps once (see [`converges`]). Where they cannot merge
//! with the MatMul (too many tensors for an epilogue), the product is recorded once and every
//! branch reads it (`exec.rs`, `share_heads`).

use std::collections::{HashMap, HashSet};

use super::exec::Slot;
use super::{Attr, Graph, Node};
use crate::kernels::matmul::MAX_EPILOGUE_LEAVES;
use crate::ops::elementwise::{lookup, word_op, Arg, Program, MAX_OPERANDS};
use crate::{Context, DType, HostTensor, Result, Tensor};

/// A node's value not recorded yet: the program computing it from `leaves` (by value name;
/// constants a node made have none) and its shape. With a `head`, operand 0 of the program
/// is that MatMul's product and `leaves` are operands 1 on.
#[derive(Clone)]
pub(crate) struct Pending {
    pub program: Program,
    pub leaves: Vec<(Option<String>, Tensor)>,
    pub shape: Vec<usize>,
    pub head: Option<Head>,
}

/// The MatMul a pending program starts from (its operands, by value name, and the product's
/// shape: the pending value's shape may differ from it by unit axes, see [`view_op`]).
#[derive(Clone)]
pub(crate) struct Head {
    pub lhs: (String, Held),
    pub rhs: (String, Held),
    /// Operands held with their last two axes swapped, read transposed in place.
    pub transposed: [bool; 2],
    pub shape: Vec<usize>,
}

impl Head {
    /// Whether both are one product (the branches of a diamond carry clones of one head).
    pub fn same(&self, other: &Head) -> bool {
        self.lhs.0 == other.lhs.0
            && self.rhs.0 == other.rhs.0
            && self.transposed == other.transposed
            && self.lhs.1.same(&other.lhs.1)
    }
}

/// A MatMul operand: a tensor, or a pending element-wise program (no MatMul head of its own)
/// that the kernel computes where it reads it.
#[derive(Clone)]
pub(crate) enum Held {
    Tensor(Tensor),
    Program(Box<Pending>),
}

impl Held {
    /// Whether both are the same value (as two pending programs reading one MatMul's operands
    /// must be).
    fn same(&self, other: &Held) -> bool {
        let first = |h: &Held| match h {
            Held::Tensor(t) => Some(t.storage().clone()),
            Held::Program(p) => p.leaves.first().map(|(_, t)| t.storage().clone()),
        };
        match (first(self), first(other)) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(&a, &b),
            _ => false,
        }
    }

    /// The tensors it holds (the program's inputs), handed back once it is recorded.
    pub fn into_tensors(self) -> Vec<Tensor> {
        match self {
            Held::Tensor(t) => vec![t],
            Held::Program(p) => p.leaves.into_iter().map(|(_, t)| t).collect(),
        }
    }
}

/// The most nodes that may each compute one pending chain where they read it, rather than
/// read it stored.
pub const MAX_SHARED_READERS: usize = 2;

/// Whether a pending value is small enough for several readers to compute it each: no MatMul,
/// a few inputs and steps (each reader reads its inputs instead of one stored value).
pub(crate) fn worth_sharing(p: &Pending) -> bool {
    p.head.is_none() && p.leaves.len() <= 3 && p.program.steps().len() <= 4
}

/// Whether a node only reshapes its input (a view): a pending value stays pending through it,
/// its leaves viewed alike (LinearAttention's `Exp -> Unsqueeze -> Mul`).
pub(crate) fn view_op(node: &Node) -> bool {
    matches!(
        node.op.as_str(),
        "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten"
    ) && node.outputs.len() == 1
        && !node.outputs[0].is_empty()
        && node.inputs.first().is_some_and(|i| !i.is_empty())
}

/// The output shape of view node `node` on an input of `shape`, where its index input (axes,
/// shape) is known on the host; `None` otherwise or where the op rejects it (the node then
/// runs as usual and reports the error).
fn view_shape(node: &Node, slots: &[Option<&Slot>], shape: &[usize]) -> Option<Vec<usize>> {
    use crate::ops::layout::{flatten_shape, reshape_shape, squeeze_shape, unsqueeze_shape};
    let op = node.op.as_str();
    let second = match slots.get(1).copied().flatten() {
        Some(slot) => Some(slot.host.as_ref()?.to_indices("view", "axes").ok()?),
        None => None,
    };
    let attr = |name: &str| match node.attrs.get(name) {
        Some(Attr::Ints(v)) => Some(v.clone()),
        Some(Attr::Int(v)) => Some(vec![*v]),
        _ => None,
    };
    match op {
        "Reshape" => {
            let allowzero = matches!(node.attrs.get("allowzero"), Some(Attr::Int(v)) if *v != 0);
            reshape_shape(shape, &second?, allowzero).ok()
        }
        "Squeeze" => squeeze_shape(shape, second.or_else(|| attr("axes")).as_deref()).ok(),
        "Unsqueeze" => unsqueeze_shape(shape, &second.or_else(|| attr("axes"))?).ok(),
        "Flatten" => {
            let axis = match node.attrs.get("axis") {
                Some(Attr::Int(v)) => *v,
                None => 1,
                Some(_) => return None,
            };
            flatten_shape(shape, axis).ok()
        }
        _ => None,
    }
}

/// A MatMul operand: the slot's tensor or pending program (without a MatMul head), and
/// whether it is held with its last two axes swapped (a Transpose read in place).
pub(crate) fn operand(ctx: &Context, slot: Option<&Slot>) -> Result<(Held, bool)> {
    let slot =
        slot.ok_or_else(|| crate::Error::Graph("internal: a MatMul input is missing".into()))?;
    Ok(
        match (&slot.swapped, &slot.swapped_pending, &slot.pending) {
            (Some(t), _, _) => (Held::Tensor(t.clone()), true),
            (_, Some(p), _) => (Held::Program(p.clone()), true),
            (_, _, Some(p)) if p.head.is_none() => (Held::Program(p.clone()), false),
            _ => (Held::Tensor(slot.tensor(ctx)?), false),
        },
    )
}

/// The Transposes whose output only MatMuls read: each may stay unrecorded (a swapped slot)
/// if it swaps the last two axes only (see [`swapped_input`]). Never a value in `keep` or
/// with a placement.
pub(crate) fn swappable(
    graph: &Graph,
    keep: &HashSet<&str>,
    placements: &HashMap<String, Tensor>,
) -> HashSet<String> {
    let mut out = HashSet::new();
    for node in graph.nodes.iter().filter(|n| n.op == "Transpose") {
        let Some(v) = node.outputs.first().filter(|v| !v.is_empty()) else {
            continue;
        };
        if keep.contains(v.as_str()) || placements.contains_key(v) {
            continue;
        }
        let readers: Vec<&Node> = graph
            .nodes
            .iter()
            .filter(|n| n.op != "CheckInputs" && n.value_reads().iter().any(|r| r == v))
            .collect();
        let only_matmuls = readers.iter().all(|n| {
            n.op == "MatMul" && n.inputs.len() == 2 && n.inputs.iter().all(|i| !i.is_empty())
        });
        if !readers.is_empty() && only_matmuls {
            out.insert(v.clone());
        }
    }
    out
}

/// The input of a Transpose node that swaps its input's last two axes only (rank 2 or more),
/// held unrecorded; `None` for any other permutation (the node runs as usual).
pub(crate) fn swapped_input(
    ctx: &Context,
    node: &Node,
    slots: &[Option<&Slot>],
) -> Result<Option<Tensor>> {
    let Some(Some(slot)) = slots.first() else {
        return Ok(None);
    };
    if slot.pending.is_some() || slot.swapped.is_some() || slot.swapped_pending.is_some() {
        return Ok(None);
    }
    if !swaps_last_axes(node, slot) {
        return Ok(None);
    }
    Ok(Some(slot.tensor(ctx)?))
}

/// The pending program of a Transpose node's input, where the node swaps its last two axes
/// only and the program has no MatMul head: its MatMul readers compute it in place.
pub(crate) fn swapped_pending(node: &Node, slots: &[Option<&Slot>]) -> Option<Pending> {
    let slot = slots.first().copied().flatten()?;
    let p = slot.pending.as_ref().filter(|p| p.head.is_none())?;
    swaps_last_axes(node, slot).then(|| (**p).clone())
}

/// Whether Transpose node `node` on `slot`'s value swaps its last two axes and no other.
fn swaps_last_axes(node: &Node, slot: &Slot) -> bool {
    let r = slot.dtype_shape().1.len();
    if r < 2 {
        return false;
    }
    let mut swap: Vec<i64> = (0..r as i64).collect();
    swap.swap(r - 2, r - 1);
    let perm = match node.attrs.get("perm") {
        Some(Attr::Ints(p)) => p.clone(),
        // No perm: every axis reversed, a swap at rank 2.
        None => (0..r as i64).rev().collect(),
        Some(_) => return false,
    };
    perm == swap
}

/// Leaf `t` of a pending value of shape `from` viewed in the shape `to` of its MatMul head's
/// product (the two differ by unit axes: [`view`] checked it).
pub(crate) fn product_view(t: &Tensor, from: &[usize], to: &[usize]) -> Result<Tensor> {
    let shape = crate::host::unit_axes_view(t.shape(), from, to)
        .ok_or_else(|| crate::Error::Graph("internal: a fused view lost its unit axes".into()))?;
    t.reshaped(&shape)
}

/// Pending value `p` viewed as `shape` (a view node on it): its leaves viewed alike. `None`
/// where the leaves cannot follow (a reshape beyond unit axes of a value whose leaves
/// broadcast, or of a MatMul's product).
fn view(p: &Pending, shape: Vec<usize>) -> Option<Pending> {
    let full = p
        .leaves
        .iter()
        .all(|(_, t)| t.shape() == p.shape.as_slice());
    let mut leaves = Vec::with_capacity(p.leaves.len());
    for (name, t) in &p.leaves {
        let viewed = match crate::host::unit_axes_view(t.shape(), &p.shape, &shape) {
            Some(s) => s,
            None if full && p.head.is_none() => shape.clone(),
            None => return None,
        };
        leaves.push((name.clone(), t.reshaped(&viewed).ok()?));
    }
    if let Some(h) = &p.head {
        crate::host::unit_axes_view(&[], &h.shape, &shape)?;
    }
    Some(Pending {
        program: p.program.clone(),
        leaves,
        shape,
        head: p.head.clone(),
    })
}

/// Whether a node may head a pending program: a MatMul of two given inputs.
pub(crate) fn head_op(node: &Node) -> bool {
    node.op == "MatMul"
        && node.inputs.len() == 2
        && node.inputs.iter().all(|i| !i.is_empty())
        && node.outputs.len() == 1
        && !node.outputs[0].is_empty()
}

/// Where an operand of a node's step comes from.
enum Source {
    /// The node's input `i`.
    Input(usize),
    /// A constant the node supplies (Clip's absent bounds).
    Constant(HostTensor),
}

/// Whether a node may compute as one element-wise step (by its op and inputs; whether its
/// dtypes allow it is known when it is recorded).
pub(crate) fn fusable(node: &Node) -> bool {
    if node.outputs.len() != 1 || node.outputs[0].is_empty() {
        return false;
    }
    let n = node.inputs.len();
    if activation(node).is_some() {
        return true;
    }
    match node.op.as_str() {
        "Cast" | "CastLike" | "Mod" | "Clip" | "BitShift" => true,
        "Sum" | "Max" | "Min" => n == 2,
        "FMod" => false,
        op => lookup(op).is_some() || word_op(op).is_some(),
    }
}

/// An activation node's op, float attributes and Gelu's `approximate`.
type Activation = (&'static str, Vec<(&'static str, f64)>, String);

/// An activation function of one input (`Elu`, `HardSigmoid`, `Gelu`, ...; see
/// `ops/activation.rs`) as several steps: its op, float attributes and Gelu's
/// `approximate`. `None` for other nodes, and where an attribute is not what the op takes
/// (the node then runs as usual and reports it).
fn activation(node: &Node) -> Option<Activation> {
    use crate::ops::activation::{float_attributes, ACTIVATIONS};
    let &op = ACTIVATIONS
        .iter()
        .find(|&&a| a == node.op && !matches!(a, "PRelu" | "SwiGLU"))?;
    if node.inputs.len() != 1 || node.inputs[0].is_empty() {
        return None;
    }
    if node.outputs.len() != 1 || node.outputs[0].is_empty() {
        return None;
    }
    let mut attrs = Vec::new();
    let mut approximate = "none".to_string();
    for (name, value) in &node.attrs {
        match (value, float_attributes(op).iter().find(|(n, _)| n == name)) {
            (Attr::Float(v), Some(&(known, _))) => attrs.push((known, *v)),
            (Attr::String(a), None) if op == "Gelu" && name == "approximate" => {
                approximate = a.clone()
            }
            _ => return None,
        }
    }
    Some((op, attrs, approximate))
}

/// Whether `node` is a reduction that computes a pending data input where it reads it (its
/// prologue, see `kernels/reduce.rs`) instead of reading it from a tensor.
pub(crate) fn prologue_reader(node: &Node) -> bool {
    node.op.starts_with("Reduce")
        && crate::kernels::reduce::OPS.contains(&node.op.as_str())
        && node.outputs.len() == 1
        && node.inputs.first().is_some_and(|i| !i.is_empty())
}

/// Whether `reader` can compute value `v` of a fusable node where it reads it: an
/// element-wise node reading it as an input, a reduction reading it as its data (and only so),
/// a MatMul reading it as an operand, or a Transpose in `swappable` (read in place by MatMuls).
fn computes_where_read(reader: &Node, v: &str, swappable: &HashSet<String>) -> bool {
    if prologue_reader(reader) {
        reader.inputs[0] == v && !reader.inputs[1..].iter().any(|i| i == v)
    } else if head_op(reader) {
        true
    } else if reader.op == "Transpose" {
        reader.inputs.first().is_some_and(|i| i == v)
            && reader
                .outputs
                .first()
                .is_some_and(|o| swappable.contains(o))
    } else {
        !view_op(reader) && fusable(reader) && reader.inputs.iter().any(|i| i == v)
    }
}

/// The values to leave pending, each with its number of readers: produced by a fusable node
/// and read by exactly one node, which is fusable and reads it as an input, or a reduction
/// reading it as its data (and only so), or a MatMul or a Transpose in `swappable`; or read
/// by up to [`MAX_SHARED_READERS`] such nodes. A MatMul or a view op's value likewise, with
/// one fusable (or view) reader. Never a value in `keep` (the graph's outputs) or with a
/// placement (a Scan body's state, written in place).
pub(crate) fn deferrable(
    graph: &Graph,
    keep: &HashSet<&str>,
    placements: &HashMap<String, Tensor>,
    swappable: &HashSet<String>,
) -> HashMap<String, usize> {
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    // CheckInputs, Shape and Size read only shapes: a value they read is still fused into
    // its one reader of values.
    let reads: Vec<Vec<String>> = graph
        .nodes
        .iter()
        .map(|n| match n.op.as_str() {
            "CheckInputs" => Vec::new(),
            _ => n.value_reads(),
        })
        .collect();
    for (k, names) in reads.iter().enumerate() {
        let mut seen = HashSet::new();
        for name in names {
            if seen.insert(name.as_str()) {
                readers.entry(name.as_str()).or_default().push(k);
            }
        }
    }
    let mut out = HashMap::new();
    for node in graph
        .nodes
        .iter()
        .filter(|n| fusable(n) || head_op(n) || view_op(n))
    {
        let v = node.outputs[0].as_str();
        if keep.contains(v) || placements.contains_key(v) {
            continue;
        }
        let Some(of_v) = readers.get(v) else {
            continue;
        };
        // A diamond (GELU's `x * (1 + erf(x / sqrt 2))`, SiLU's `x * sigmoid(x)`): one
        // program computes the value once for all its readers, even a MatMul's product.
        if (fusable(node) || head_op(node)) && converges(graph, v, &readers, keep, placements) {
            out.insert(v.to_string(), 1);
            continue;
        }
        let computed = fusable(node)
            && of_v.len() <= MAX_SHARED_READERS
            && of_v
                .iter()
                .all(|&r| computes_where_read(&graph.nodes[r], v, swappable));
        let reads_it = match of_v.as_slice() {
            [reader] => {
                let reader = &graph.nodes[*reader];
                if view_op(reader) {
                    reader.inputs[0] == v
                } else {
                    computed || (fusable(reader) && reader.inputs.iter().any(|i| i == v))
                }
            }
            _ => computed,
        };
        if reads_it {
            out.insert(v.to_string(), of_v.len());
        }
    }
    out
}

/// The most nodes a diamond's branches may hold (see [`converges`]).
const MAX_DIAMOND_NODES: usize = 16;

/// Whether the readers of `v` (two or more, each an element-wise node) all lead, through
/// values each read by one element-wise node only, to one node, the diamond's end: merging
/// the branches' pending programs there computes `v` once, so `v` may stay pending even when
/// it is a MatMul's product (the branches share its head). No value on the way is in `keep`
/// or placed, except the end's own.
fn converges(
    graph: &Graph,
    v: &str,
    readers: &HashMap<&str, Vec<usize>>,
    keep: &HashSet<&str>,
    placements: &HashMap<String, Tensor>,
) -> bool {
    let elementwise = |k: usize| {
        let n = &graph.nodes[k];
        fusable(n) && !view_op(n)
    };
    let Some(of_v) = readers.get(v).filter(|r| r.len() > 1) else {
        return false;
    };
    let mut ends = HashSet::new();
    let mut region = HashSet::new();
    for &first in of_v {
        if !elementwise(first) || !graph.nodes[first].inputs.iter().any(|i| i == v) {
            return false;
        }
        let mut at = first;
        loop {
            region.insert(at);
            if region.len() > MAX_DIAMOND_NODES {
                return false;
            }
            let out = graph.nodes[at].outputs[0].as_str();
            if keep.contains(out) || placements.contains_key(out) {
                break;
            }
            match readers.get(out).map(Vec::as_slice) {
                Some(&[next]) if elementwise(next) => at = next,
                _ => break,
            }
        }
        ends.insert(at);
    }
    ends.len() == 1
}

/// The node as one step: its op as the word kernel names it, its operands, and Cast's target.
/// `None` where the node is anything else (it then runs, and is checked, as usual).
fn as_step(
    node: &Node,
    slots: &[Option<&Slot>],
) -> Option<(&'static str, Vec<Source>, Option<DType>)> {
    let n = node.inputs.len();
    let present = |i: usize| slots.get(i).copied().flatten().is_some();
    let dtype = |i: usize| Some(slots.get(i).copied().flatten()?.dtype_shape().0);
    let all = |count: usize| -> Option<Vec<Source>> {
        (n == count && (0..n).all(present)).then(|| (0..n).map(Source::Input).collect())
    };
    let no_attrs = node.attrs.is_empty();
    match node.op.as_str() {
        "Cast" => {
            let to = match node.attrs.get("to") {
                Some(Attr::String(s)) => DType::from_name(s)?,
                _ => return None,
            };
            let op = crate::kernels::words::cast_op(to, super::cast_mode(node).ok()?);
            Some((op, all(1)?, Some(to)))
        }
        "CastLike" => {
            let to = dtype(1)?;
            let op = crate::kernels::words::cast_op(to, super::cast_mode(node).ok()?);
            Some((op, vec![Source::Input(0)], Some(to))).filter(|_| n == 2 && present(0))
        }
        "Mod" => {
            let fmod = match node.attrs.get("fmod") {
                None => false,
                Some(Attr::Int(v)) => *v != 0,
                Some(_) => return None,
            };
            Some((if fmod { "FMod" } else { "Mod" }, all(2)?, None))
        }
        "BitShift" => {
            let direction = match node.attrs.get("direction") {
                Some(Attr::String(d)) => Some(d.as_str()),
                _ => None,
            };
            Some((super::registry::bit_shift_op(direction)?, all(2)?, None))
        }
        "Clip" => {
            if !present(0) {
                return None;
            }
            let x = dtype(0)?;
            let mut sources = vec![Source::Input(0)];
            for (k, (name, none)) in [("min", f64::NEG_INFINITY), ("max", f64::INFINITY)]
                .into_iter()
                .enumerate()
            {
                if n > k + 1 && present(k + 1) {
                    sources.push(Source::Input(k + 1));
                    continue;
                }
                let v = match node.attrs.get(name) {
                    Some(Attr::Float(v)) => *v,
                    None => none,
                    Some(_) => return None,
                };
                let v = HostTensor::from_vec(Vec::new(), &[v]).ok()?;
                sources.push(Source::Constant(crate::reference::cast_host(&v, x).ok()?));
            }
            Some(("Clip", sources, None))
        }
        "Sum" if no_attrs => Some(("Add", all(2)?, None)),
        op if no_attrs => {
            let (name, arity) = match (word_op(op), lookup(op)) {
                (Some(w), _) => (w.name, w.inputs),
                (None, Some(t)) => (t.name, 1 + usize::from(t.binary)),
                _ => return None,
            };
            Some((name, all(arity)?, None))
        }
        _ => None,
    }
}

/// Builds the program of `node` on its inputs, merging the programs of pending ones: `None`
/// where the node is not one step on these dtypes, this adapter cannot run it, shapes do not
/// broadcast, or the merged program would read more than [`MAX_OPERANDS`] tensors (the node
/// then runs as usual, after its pending inputs are recorded).
pub(crate) fn build(
    rec: &mut crate::Recorder,
    node: &Node,
    slots: &[Option<&Slot>],
) -> Result<Option<Pending>> {
    let ctx = &rec.context().clone();
    if head_op(node) {
        return head(ctx, node, slots);
    }
    if view_op(node) {
        let Some(Some(p)) = slots.first().map(|s| s.and_then(|s| s.pending.as_ref())) else {
            return Ok(None);
        };
        return Ok(view_shape(node, slots, &p.shape).and_then(|shape| view(p, shape)));
    }
    // An activation: its program's steps, reading the input's argument for its operand.
    let steps = match activation(node) {
        Some((op, attrs, approximate)) => {
            let Some(Some(x)) = slots.first() else {
                return Ok(None);
            };
            let dtype = x.dtype_shape().0;
            if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
                return Ok(None);
            }
            match crate::ops::activation::activation_program(
                op,
                dtype,
                1,
                &attrs,
                &approximate,
                false,
            ) {
                Ok((program, constants)) if constants.is_empty() => Some(program),
                _ => return Ok(None),
            }
        }
        None => None,
    };
    let (op, sources, to) = match &steps {
        Some(_) => ("", vec![Source::Input(0)], None),
        None => match as_step(node, slots) {
            Some(step) => step,
            None => return Ok(None),
        },
    };
    // Where the values are computed is settled once the program is whole (below).
    let emulate64 = !ctx.features().contains(wgpu::Features::SHADER_INT64);
    // The one MatMul head among the inputs (the caller records all but one) comes first.
    let head = slots.iter().flatten().find_map(|s| {
        s.pending
            .as_ref()
            .and_then(|p| p.head.clone())
            .map(|h| (h, p_shape(s)))
    });
    let mut merged = Merge {
        program: Program::new(Vec::new(), emulate64),
        leaves: Vec::new(),
        shape: Vec::new(),
        results: HashMap::new(),
        head: None,
    };
    let mut head_shape = None;
    if let Some((h, (dtype, shape))) = head {
        merged.program.add_operand(dtype);
        merged.shape = shape.clone();
        merged.head = Some(h);
        head_shape = Some(shape);
    }
    let mut args = Vec::new();
    for source in sources {
        let arg = match source {
            Source::Input(i) => {
                let name = &node.inputs[i];
                let slot = slots[i].expect("as_step checked the input");
                match merged.input(ctx, name, slot)? {
                    Some(a) => a,
                    None => return Ok(None),
                }
            }
            Source::Constant(h) => {
                let t = rec.upload(&h)?;
                match merged.leaf(None, t) {
                    Some(a) => a,
                    None => return Ok(None),
                }
            }
        };
        args.push(arg);
    }
    let pushed = match &steps {
        Some(program) => merged.splice(program, &args, false),
        None => merged.program.push(op, args, to.unwrap_or(DType::F32)),
    };
    // Where the adapter computes the merged dtypes: f64 joining i64 on an adapter with
    // SHADER_INT64 and without SHADER_F64 moves the whole program onto the emulation.
    let settled = merged
        .program
        .on_adapter(ctx.features())
        .filter(|p| ctx.features().contains(p.features()));
    let Some(program) = settled else {
        return Ok(None);
    };
    if pushed.is_none()
        // Literals only (constants the host did not fold): the node runs as usual.
        || (merged.leaves.is_empty() && merged.head.is_none())
        || crate::ops::check_rank(op, &merged.shape).is_err()
        // An epilogue computes the product's elements only: no broadcasting beyond them.
        || head_shape.is_some_and(|s| s != merged.shape)
    {
        return Ok(None);
    }
    Ok(Some(Pending {
        program,
        leaves: merged.leaves,
        shape: merged.shape,
        head: merged.head,
    }))
}

/// The dtype and shape of a pending slot's value.
fn p_shape(slot: &Slot) -> (DType, Vec<usize>) {
    let p = slot.pending.as_ref().expect("a pending slot");
    (p.program.operands()[0], p.shape.clone())
}

/// A MatMul node as the head of a program of no steps yet, where its operands (2-D or more,
/// of one dtype the adapter computes MatMul in) allow an epilogue; `None` otherwise (it runs
/// as usual, which reports any error).
fn head(ctx: &Context, node: &Node, slots: &[Option<&Slot>]) -> Result<Option<Pending>> {
    let (Some(Some(a)), Some(Some(b))) = (slots.first(), slots.get(1)) else {
        return Ok(None);
    };
    // A product read by this one is recorded first: a program has one head.
    if [a, b]
        .iter()
        .any(|s| s.pending.as_ref().is_some_and(|p| p.head.is_some()))
    {
        return Ok(None);
    }
    let ((lhs, ta), (rhs, tb)) = (operand(ctx, Some(a))?, operand(ctx, Some(b))?);
    let ((da, sa), (db, sb)) = (a.dtype_shape(), b.dtype_shape());
    let Ok(plan) = crate::ops::matmul::plan((da, &sa), (db, &sb)) else {
        return Ok(None);
    };
    // i64, u64 and f64 without their features are emulated by the kernel (as its epilogue
    // then); f16 and bf16 are computed in f32 on their packed words.
    let emulate64 = crate::kernels::words::emulates_64_bit(ctx.features(), &[da], da);
    let computed = crate::kernels::matmul::compute_type(da).is_some()
        && (emulate64
            || crate::kernels::operands::native_feature(da)
                .is_none_or(|(f, _)| ctx.features().contains(f)));
    if sa.len() < 2 || sb.len() < 2 || da != db || !computed {
        return Ok(None);
    }
    Ok(Some(Pending {
        program: Program::new(vec![da], emulate64),
        leaves: Vec::new(),
        shape: plan.output.clone(),
        head: Some(Head {
            lhs: (node.inputs[0].clone(), lhs),
            rhs: (node.inputs[1].clone(), rhs),
            transposed: [ta, tb],
            shape: plan.output,
        }),
    }))
}

/// A program being assembled from a node's inputs.
struct Merge {
    program: Program,
    leaves: Vec<(Option<String>, Tensor)>,
    shape: Vec<usize>,
    /// Inputs already merged, by name (a node reading one value twice merges it once).
    results: HashMap<String, Arg>,
    /// The MatMul whose product is operand 0 (leaves are then operands 1 on).
    head: Option<Head>,
}

/// A constant of one element (a graph's or a body's, or one computed from them on the host)
/// of a float dtype, as a literal of the program, with its shape. Not a value computed from
/// graph inputs, which changes from run to run: each value would be a kernel of its own.
fn constant_literal(slot: &Slot) -> Option<(Arg, &[usize])> {
    let h = slot
        .host
        .as_ref()
        .filter(|h| slot.constant && h.numel() == 1)?;
    let value = match h.dtype {
        DType::F32 => f64::from(*h.to_vec::<f32>().ok()?.first()?),
        DType::F64 => *h.to_vec::<f64>().ok()?.first()?,
        DType::F16 => h.to_vec::<half::f16>().ok()?.first()?.to_f64(),
        DType::BF16 => h.to_vec::<half::bf16>().ok()?.first()?.to_f64(),
        _ => return None,
    };
    Some((Arg::literal(h.dtype, value)?, &h.shape))
}

impl Merge {
    /// The argument standing for input `name`: its pending program's steps appended, or a leaf.
    fn input(&mut self, ctx: &Context, name: &str, slot: &Slot) -> Result<Option<Arg>> {
        if let Some(&a) = self.results.get(name) {
            return Ok(Some(a));
        }
        let arg = match &slot.pending {
            Some(p) => self.append(p),
            None => match constant_literal(slot) {
                // Read from no buffer, where it broadcasts to what the program has (a
                // constant that would add axes is bound: the kernel's shape is its leaves').
                Some((literal, shape))
                    if crate::ops::broadcast_shape("Fused", &self.shape, shape)
                        .ok()
                        .as_ref()
                        == Some(&self.shape) =>
                {
                    Some(literal)
                }
                _ => {
                    let t = slot.tensor(ctx)?;
                    self.leaf(Some(name.to_string()), t)
                }
            },
        };
        if let Some(a) = arg {
            self.results.insert(name.to_string(), a);
        }
        Ok(arg)
    }

    /// A tensor the program reads (the same named value is read once).
    fn leaf(&mut self, name: Option<String>, tensor: Tensor) -> Option<Arg> {
        let first = usize::from(self.head.is_some());
        // The same value viewed alike (views give one value several shapes).
        if let Some(k) = name.as_ref().and_then(|n| {
            self.leaves
                .iter()
                .position(|(m, t)| m.as_ref() == Some(n) && t.shape() == tensor.shape())
        }) {
            return Some(Arg::Operand((first + k) as u8));
        }
        let most = if self.head.is_some() {
            MAX_EPILOGUE_LEAVES
        } else {
            MAX_OPERANDS
        };
        if self.leaves.len() >= most {
            return None;
        }
        self.shape = crate::ops::broadcast_shape("Fused", &self.shape, tensor.shape()).ok()?;
        let k = self.program.add_operand(tensor.dtype());
        self.leaves.push((name, tensor));
        Some(k)
    }

    /// Appends `program`'s steps, its operand `k` standing for `operands[k]`; returns the
    /// last one's result (`None` where the program would be too long). With `reuse`, a step
    /// the program has already (a diamond's branches both computing its top) is not repeated:
    /// for a pending input's steps, never the node's own, whose last must be the output.
    fn splice(&mut self, program: &Program, operands: &[Arg], reuse: bool) -> Option<Arg> {
        let mut results: Vec<Arg> = Vec::with_capacity(program.steps().len());
        for step in program.steps() {
            let args: Vec<Arg> = step
                .args
                .iter()
                .map(|&a| match a {
                    Arg::Operand(k) => operands[usize::from(k)],
                    Arg::Step(k) => results[usize::from(k)],
                    literal => literal,
                })
                .collect();
            let known = self
                .program
                .steps()
                .iter()
                .position(|s| s.op == step.op && s.args == args && s.out == step.out)
                .filter(|_| reuse);
            results.push(match known {
                Some(k) => Arg::Step(k as u8),
                None => self.program.push(step.op, args, step.out)?,
            });
        }
        results.last().copied()
    }

    /// Appends a pending program's steps (its leaves become this program's operands).
    fn append(&mut self, p: &Pending) -> Option<Arg> {
        let mut operands = Vec::with_capacity(p.leaves.len() + 1);
        if p.head.is_some() {
            // Only the merge's own head (see `build`); its product is operand 0 here too.
            if !self.head.as_ref()?.same(p.head.as_ref()?) {
                return None;
            }
            operands.push(Arg::Operand(0));
            if p.program.steps().is_empty() {
                return Some(Arg::Operand(0));
            }
        }
        for (name, t) in &p.leaves {
            operands.push(self.leaf(name.clone(), t.clone())?);
        }
        if p.program.steps().is_empty() {
            // A value read as it is (a product recorded once for several readers).
            return operands.first().copied();
        }
        self.splice(&p.program, &operands, true)
    }
}
