//! A Scan body's work that reads no state, moved out of the loop: a node computed only from
//! scan-input elements, constants and outer values gives the same result at step `t` as row
//! `t` of the node run once on the whole scan inputs, so it runs once before the loop and its
//! results become extra scan inputs. An RNN cell's `X_t W^T` is then one large MatMul instead
//! of one small MatMul per step, and the step keeps only the work on the state.
//!
//! A state the body passes on unchanged (skl2onnx's pairwise distances carry one operand so)
//! is the same at every step, so it counts as an outer value here.
//!
//! Only nodes whose stacked form is exactly the stacked per-step results are moved:
//! element-wise nodes (and Identity) whose stacked inputs all have the result's rank and whose
//! other inputs have a smaller rank (so broadcasting aligns them with the element, not the
//! sequence axis); reductions over axes known on the host, run with those axes moved past the
//! sequence axis; and MatMul of a stacked matrix (or batch of them) by an unstacked matrix. An
//! element-wise node whose stacked input has a lower rank than an unchanged state it meets
//! (a row against a matrix) moves too when its only reader is a moved reduction: the input is
//! viewed with unit axes after the sequence axis, and the reduction computes the broadcast
//! value as it reads it (its prologue), so that value, `seq` times the state, is never
//! stored. Every scan input must run along axis 0 in one direction.

use std::collections::{HashMap, HashSet};

use super::exec::{record_graph, NodeArgs, Scope, Slot};
use super::fuse::{fusable, head_op, prologue_reader};
use super::scan::{ScanAttrs, ScanPlan};
use super::{Attr, FastMap, FastSet, Graph, Node, ValueInfo};
use crate::recorder::Step;
use crate::{HostTensor, Recorder, Result, Tensor};

/// The loop without its state-free nodes: the body, attributes and scan inputs to run.
pub(crate) struct Hoisted {
    pub body: Graph,
    pub attrs: ScanAttrs,
    pub scans: Vec<Tensor>,
    /// How many of `scans`, at their end, are moved values rather than given scan inputs.
    pub moved: usize,
    /// The moved nodes' commands, captured: the loop replays them before its first
    /// iteration, so the Scan's work limit counts them before any is encoded.
    pub before: Vec<Step>,
}

/// What is known of a value before the loop: whether it has the sequence axis in front
/// (a scan input or computed from one), and its shape (stacked: with that axis).
#[derive(Clone)]
struct Known {
    stacked: bool,
    shape: Vec<usize>,
}

/// The most elements a row broadcast against an unchanged state may have in its stacked form
/// (all steps at once). The reduction reading it computes it as it reads it, but where its
/// prologue cannot (too many operands, 64-bit integers emulated, operands too large to bind
/// whole) the value is stored first: 32 Mi elements keep that to 256 MiB at most. Larger
/// ones stay in the loop, one step at a time.
const MAX_BROADCAST_ELEMENTS: usize = 32 << 20;

/// How many times the scan inputs' elements the moved values the loop reads may hold: an
/// LSTM layer's four gate terms x_t W_k' with an input half the hidden size hold 8 times X.
const MAX_HELD_PER_GIVEN: usize = 8;

/// Whether the loop may read `held` elements of moved values, computed before it, beside the
/// `given` elements of its scan inputs: at most [`MAX_HELD_PER_GIVEN`] times as many, and a
/// quarter of the device memory the context's limit leaves free (moved values live as long as
/// the loop; a layer run over a very long sequence keeps its input terms in the loop instead).
fn worth_holding(ctx: &crate::Context, held: usize, given: usize, scans: &[Tensor]) -> bool {
    let elem = scans.iter().map(|s| s.dtype().size()).max().unwrap_or(4) as u64;
    let free = ctx.max_memory().saturating_sub(ctx.memory_in_use());
    held <= MAX_HELD_PER_GIVEN.saturating_mul(given)
        && (held as u64).saturating_mul(elem) <= free / 4
}

/// How `node` runs on stacked values: its stacked result's shape, the node to run (with its
/// axes moved past the sequence axis), and the views of stacked inputs it needs first (their
/// shape constants, and Reshape nodes) to put their sequence axis in front of the others'.
struct Stacked {
    shape: Vec<usize>,
    node: Node,
    constants: Vec<(String, std::sync::Arc<HostTensor>)>,
    views: Vec<Node>,
}

/// The stacked form of `node` on `inputs`, when the stacked node computes the stacked per-step
/// results: element-wise nodes (stacked inputs of lower rank viewed with unit axes after the
/// sequence axis, where `reduced`: the node's one reader is a moved reduction, which computes
/// it as it reads it, so the broadcast value is never stored), reductions of a stacked input
/// over axes known on the host, and MatMul of a stacked matrix by an unstacked one.
fn stacked_form(
    node: &Node,
    inputs: &[&Known],
    axes_input: Option<Vec<i64>>,
    reduced: bool,
) -> Option<Stacked> {
    if !inputs.iter().any(|k| k.stacked) {
        return None;
    }
    let plain = |shape: Vec<usize>| Stacked {
        shape,
        node: node.clone(),
        constants: Vec::new(),
        views: Vec::new(),
    };
    if head_op(node) {
        let (a, b) = (inputs[0], inputs[1]);
        let (ra, rb) = (a.shape.len(), b.shape.len());
        if a.stacked && !b.stacked && ra >= 2 && rb == 2 && a.shape[ra - 1] == b.shape[0] {
            let mut shape = a.shape.clone();
            shape[ra - 1] = b.shape[1];
            return Some(plain(shape));
        }
        return None;
    }
    if prologue_reader(node) {
        return stacked_reduction(node, inputs, axes_input);
    }
    if node.op == "Identity" && inputs.len() == 1 {
        return Some(plain(inputs[0].shape.clone()));
    }
    if !fusable(node) {
        return None;
    }
    // CastLike reads only its second input's dtype.
    let inputs = if node.op == "CastLike" {
        &inputs[..1]
    } else {
        inputs
    };
    // The element's rank: the largest among the stacked inputs' elements and the others.
    let element_rank = |k: &Known| k.shape.len() - usize::from(k.stacked);
    let rank = inputs.iter().map(|k| element_rank(k)).max()?;
    let seq = inputs.iter().find(|k| k.stacked)?.shape[0];
    let mut stacked = plain(Vec::new());
    let mut elements = Vec::new();
    for (k, known) in inputs.iter().enumerate() {
        let element = &known.shape[usize::from(known.stacked)..];
        elements.push(element.to_vec());
        if !known.stacked || element.len() == rank {
            continue;
        }
        if !reduced {
            return None;
        }
        // The stacked input viewed as [seq, 1, .., element]: its sequence axis in front.
        let mut shape = vec![seq];
        shape.extend(std::iter::repeat_n(1, rank - element.len()));
        shape.extend_from_slice(element);
        let name = format!("{}__stacked_input{k}", node.outputs[0]);
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let constant = HostTensor::from_vec(vec![dims.len()], &dims).ok()?;
        stacked
            .constants
            .push((format!("{name}_shape"), std::sync::Arc::new(constant)));
        stacked.views.push(
            Node::new("Reshape", name.clone())
                .inputs([node.inputs[k].clone(), format!("{name}_shape")])
                .outputs([name.clone()]),
        );
        stacked.node.inputs[k] = name;
    }
    let element = elements.iter().try_fold(Vec::new(), |acc, e| {
        crate::ops::broadcast_shape("Scan", &acc, e).ok()
    })?;
    stacked.shape = std::iter::once(seq).chain(element).collect();
    Some(stacked)
}

/// A reduction of a stacked input over the element's axes (its attribute, or its axes input
/// known on the host in `axes_input`), as a reduction of the stacked input over those axes
/// moved past the sequence axis.
fn stacked_reduction(
    node: &Node,
    inputs: &[&Known],
    axes_input: Option<Vec<i64>>,
) -> Option<Stacked> {
    let data = inputs.first().filter(|k| k.stacked)?;
    if inputs[1..].iter().any(|k| k.stacked) || node.inputs.len() > 2 {
        return None;
    }
    let int = |name: &str, default: i64| match node.attrs.get(name) {
        None => Some(default),
        Some(Attr::Int(v)) => Some(*v),
        Some(_) => None,
    };
    let keepdims = int("keepdims", 1)? != 0;
    let noop = int("noop_with_empty_axes", 0)? != 0;
    let axes = match (node.inputs.len(), axes_input, node.attrs.get("axes")) {
        (2, Some(a), _) => a,
        (1, None, Some(Attr::Ints(a))) => a.clone(),
        (1, None, None) => Vec::new(),
        _ => return None,
    };
    let rank = data.shape.len() - 1;
    if axes.is_empty() && noop {
        return None;
    }
    let axes = if axes.is_empty() {
        (0..rank).collect()
    } else {
        crate::ops::reduce::normalize_axes("Scan", rank, &axes).ok()?
    };
    let mut shape = vec![data.shape[0]];
    shape.extend(crate::ops::reduce::reduced_shape(
        &data.shape[1..],
        &axes,
        keepdims,
    ));
    let mut stacked = node.clone();
    stacked.inputs.truncate(1);
    stacked.attrs.remove("noop_with_empty_axes");
    stacked.attrs.insert(
        "axes".into(),
        Attr::Ints(axes.iter().map(|&a| a as i64 + 1).collect()),
    );
    Some(Stacked {
        shape,
        node: stacked,
        constants: Vec::new(),
        views: Vec::new(),
    })
}

/// Moves the state-free nodes of the Scan's `body` out of the loop: captures them on the
/// whole scan inputs and returns the Scan that reads their results as extra scan inputs (and
/// no longer reads the scan inputs only they read), or `None` when no node moves (or the moved
/// values would hold more than [`worth_holding`] allows). `order` is the body's schedule.
#[allow(clippy::too_many_arguments)]
pub(crate) fn hoist(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    attrs: &ScanAttrs,
    plan: &ScanPlan,
    order: &[usize],
    states: &[Tensor],
    scans: &[Tensor],
) -> Result<Option<Hoisted>> {
    let ctx = rec.context().clone();
    let (n, m) = (plan.n, plan.m);
    if !ctx.fuse_elementwise()
        || plan.in_axes.iter().any(|&a| a != 0)
        || plan.in_reverse.iter().any(|&r| r != plan.in_reverse[0])
    {
        return Ok(None);
    }
    let mut known: FastMap<String, Known> = FastMap::default();
    for (decl, scan) in body.inputs[n..].iter().zip(scans) {
        let shape = scan.shape().to_vec();
        known.insert(
            decl.name.clone(),
            Known {
                stacked: true,
                shape,
            },
        );
    }
    for (name, value) in &body.constants {
        let shape = value.shape.clone();
        known.insert(
            name.clone(),
            Known {
                stacked: false,
                shape,
            },
        );
    }
    // States the body passes on unchanged are the same at every step, like outer values.
    let invariant: Vec<usize> = (0..n)
        .filter(|&i| super::scan::passes_through(body, i))
        .collect();
    for &i in &invariant {
        known.insert(
            body.inputs[i].name.clone(),
            Known {
                stacked: false,
                shape: states[i].shape().to_vec(),
            },
        );
    }
    let state_names: FastSet<&str> = body.inputs[..n].iter().map(|i| i.name.as_str()).collect();
    let produced: FastSet<&str> = body
        .nodes
        .iter()
        .flat_map(|nd| nd.outputs.iter().map(String::as_str))
        .collect();
    // The body nodes reading each value.
    let mut readers: FastMap<&str, Vec<usize>> = FastMap::default();
    for (k, nd) in body.nodes.iter().enumerate() {
        for name in nd.reads() {
            if let Some(name) = produced.get(name.as_str()) {
                readers.entry(name).or_default().push(k);
            }
        }
    }
    // A node broadcasting a stacked input to a larger shape moves only with its one reader, a
    // reduction computing it as it reads it; where that reader stays, the node is kept too
    // and the pass runs again.
    let mut kept_back: HashSet<usize> = HashSet::new();
    let (moved, forms) = loop {
        let mut known = known.clone();
        let mut moved = vec![false; body.nodes.len()];
        let mut forms: HashMap<usize, Stacked> = HashMap::new();
        for &k in order {
            let node = &body.nodes[k];
            let mut inputs = Vec::new();
            for name in node.inputs.iter().filter(|i| !i.is_empty()) {
                if !known.contains_key(name) && !produced.contains(name.as_str()) {
                    // An outer value: its shape, unstacked (a sequence stays unknown, so
                    // what reads it stays in the loop).
                    if let Some(slot) = args.scope().get(name).filter(|s| {
                        !state_names.contains(name.as_str()) && s.non_tensor().is_none()
                    }) {
                        let shape = slot.dtype_shape().1;
                        known.insert(
                            name.clone(),
                            Known {
                                stacked: false,
                                shape,
                            },
                        );
                    }
                }
                match known.get(name) {
                    Some(k) => inputs.push(k.clone()),
                    None => break,
                }
            }
            let all_known = inputs.len() == node.inputs.iter().filter(|i| !i.is_empty()).count();
            let refs: Vec<&Known> = inputs.iter().collect();
            let reduced = !kept_back.contains(&k)
                && node.outputs.len() == 1
                && matches!(readers.get(node.outputs[0].as_str()).map(Vec::as_slice),
                    Some([r]) if prologue_reader(&body.nodes[*r])
                        && body.nodes[*r].inputs[0] == node.outputs[0]
                        && !body.outputs.iter().any(|o| o.name == node.outputs[0]));
            // A reduction's axes input, known on the host (a body constant).
            let axes_input = node.inputs.get(1).and_then(|a| {
                let (_, v) = body.constants.iter().find(|(name, _)| name == a)?;
                v.to_indices("Scan", "axes").ok()
            });
            let form = all_known
                .then(|| stacked_form(node, &refs, axes_input, reduced))
                .flatten()
                .filter(|f| {
                    f.views.is_empty()
                        || f.shape.iter().product::<usize>() <= MAX_BROADCAST_ELEMENTS
                });
            if let Some(form) = form {
                known.insert(
                    node.outputs[0].clone(),
                    Known {
                        stacked: true,
                        shape: form.shape.clone(),
                    },
                );
                moved[k] = true;
                forms.insert(k, form);
            }
        }
        // Broadcasting nodes whose reducing reader stays in the loop.
        let stranded: Vec<usize> = forms
            .iter()
            .filter(|(_, f)| !f.views.is_empty())
            .map(|(&k, _)| k)
            .filter(|&k| {
                readers[body.nodes[k].outputs[0].as_str()]
                    .iter()
                    .any(|&r| !moved[r])
            })
            .collect();
        if stranded.is_empty() {
            break (moved, forms);
        }
        kept_back.extend(stranded);
    };
    if !moved.contains(&true) {
        return Ok(None);
    }
    // The moved values the loop still reads: by a node left in the body (or a subgraph of
    // one), or as a body output.
    let moved_values: HashSet<&str> = body
        .nodes
        .iter()
        .zip(&moved)
        .filter(|(_, &mv)| mv)
        .flat_map(|(nd, _)| nd.outputs.iter().map(String::as_str))
        .collect();
    let mut needed: Vec<String> = Vec::new();
    let reads = body
        .nodes
        .iter()
        .zip(&moved)
        .filter(|(_, &mv)| !mv)
        .flat_map(|(nd, _)| nd.reads())
        .chain(body.outputs.iter().map(|o| o.name.clone()));
    for name in reads {
        if moved_values.contains(name.as_str()) && !needed.contains(&name) {
            needed.push(name);
        }
    }
    let elements = |shape: &[usize]| shape.iter().product::<usize>();
    // A moved value that is a scan output is that output (see `record_loop`): it takes no
    // memory the loop would not.
    let outputs: HashSet<&str> = body.outputs[n..].iter().map(|o| o.name.as_str()).collect();
    let held: usize = needed
        .iter()
        .filter(|v| !outputs.contains(v.as_str()))
        .map(|v| {
            let k = body.nodes.iter().position(|nd| nd.outputs.contains(v));
            k.and_then(|k| forms.get(&k))
                .map_or(0, |f| elements(&f.shape))
        })
        .sum();
    let given: usize = scans.iter().map(|s| elements(s.shape())).sum();
    if needed.is_empty() || !worth_holding(&ctx, held, given, scans) {
        return Ok(None);
    }
    // The moved nodes (in their stacked forms, after the views they need) as a graph over the
    // whole scan inputs and the states passed on unchanged, recorded now.
    let mut constants = body.constants.clone();
    let mut nodes = Vec::new();
    for k in 0..body.nodes.len() {
        if let Some(f) = forms.get(&k) {
            constants.extend(f.constants.iter().cloned());
            nodes.extend(f.views.iter().cloned());
            nodes.push(f.node.clone());
        }
    }
    let before = Graph {
        inputs: invariant
            .iter()
            .map(|&i| body.inputs[i].clone())
            .chain(body.inputs[n..].iter().cloned())
            .collect(),
        constants,
        nodes,
        outputs: needed.iter().map(ValueInfo::named).collect(),
        symbolic_dims: Default::default(),
    };
    let mut scope = Scope {
        slots: Default::default(),
        parent: Some(args.scope()),
    };
    for &i in &invariant {
        scope
            .slots
            .insert(body.inputs[i].name.clone(), Slot::gpu(states[i].clone()));
    }
    for (decl, scan) in body.inputs[n..].iter().zip(scans) {
        scope
            .slots
            .insert(decl.name.clone(), Slot::gpu(scan.clone()));
    }
    for (name, value) in &before.constants {
        scope
            .slots
            .insert(name.clone(), Slot::constant(value.clone()));
    }
    let before_order = before.schedule(&|n: &str| args.scope().get(n).is_some())?;
    let ((), before_steps) =
        rec.capture(|rec| record_graph(rec, &before, &before_order, &mut scope, &HashMap::new()))?;
    let mut rest = body.clone();
    rest.nodes = body
        .nodes
        .iter()
        .zip(&moved)
        .filter(|(_, &mv)| !mv)
        .map(|(nd, _)| nd.clone())
        .collect();
    // Scan inputs that only moved nodes read are not read per iteration any more.
    let still_read: HashSet<String> = rest
        .nodes
        .iter()
        .flat_map(|nd| nd.reads())
        .chain(body.outputs.iter().map(|o| o.name.clone()))
        .collect();
    let kept: Vec<usize> = (0..m)
        .filter(|&j| still_read.contains(&body.inputs[n + j].name))
        .collect();
    rest.inputs = body.inputs[..n]
        .iter()
        .chain(kept.iter().map(|&j| &body.inputs[n + j]))
        .cloned()
        .collect();
    let mut all_scans: Vec<Tensor> = kept.iter().map(|&j| scans[j].clone()).collect();
    for name in &needed {
        let slot = scope.get(name).expect("recorded");
        all_scans.push(slot.tensor(&ctx)?);
    }
    rest.inputs.extend(needed.iter().map(ValueInfo::named));
    let count = all_scans.len();
    let reverse = i64::from(plan.in_reverse[0]);
    let mut attrs = attrs.clone();
    attrs.num_scan_inputs = Some(count as i64);
    if attrs.scan_input_axes.is_some() {
        attrs.scan_input_axes = Some(vec![0; count]);
    }
    attrs.scan_input_directions = Some(vec![reverse; count]);
    Ok(Some(Hoisted {
        body: rest,
        attrs,
        moved: needed.len(),
        scans: all_scans,
        before: before_steps,
    }))
}
