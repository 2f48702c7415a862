//! A Scan body's work that reads no state, moved out of the loop: a node computed only from
//! scan-input elements, constants and outer values gives the same result at step `t` as row
//! `t` of the node run once on the whole scan inputs, so it runs once before the loop and its
//! results become extra scan inputs. An RNN cell's `X_t W^T` is then one large MatMul instead
//! of one small MatMul per step, and the step keeps only the work on the state.
//!
//! Only nodes whose stacked form is exactly the stacked per-step results are moved:
//! element-wise nodes whose stacked inputs all have the result's rank and whose other inputs
//! have a smaller rank (so broadcasting aligns them with the element, not the sequence axis),
//! and MatMul of a stacked matrix (or batch of them) by an unstacked matrix. Every scan input
//! must run along axis 0 in one direction.

use std::collections::{HashMap, HashSet};

use super::exec::{record_graph, NodeArgs, Scope, Slot};
use super::fuse::{fusable, head_op};
use super::scan::{ScanAttrs, ScanPlan};
use super::{Graph, Node, ValueInfo};
use crate::recorder::Step;
use crate::{Recorder, Result, Tensor};

/// The loop without its state-free nodes: the body, attributes and scan inputs to run.
pub(crate) struct Hoisted {
    pub body: Graph,
    pub attrs: ScanAttrs,
    pub scans: Vec<Tensor>,
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

/// The stacked result's shape of `node` on `inputs`, when the stacked node computes the
/// stacked per-step results.
fn stacked_shape(node: &Node, inputs: &[&Known]) -> Option<Vec<usize>> {
    if !inputs.iter().any(|k| k.stacked) {
        return None;
    }
    if head_op(node) {
        let (a, b) = (inputs[0], inputs[1]);
        let (ra, rb) = (a.shape.len(), b.shape.len());
        if a.stacked && !b.stacked && ra >= 2 && rb == 2 && a.shape[ra - 1] == b.shape[0] {
            let mut shape = a.shape.clone();
            shape[ra - 1] = b.shape[1];
            return Some(shape);
        }
        return None;
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
    let rank = inputs
        .iter()
        .filter(|k| k.stacked)
        .map(|k| k.shape.len())
        .max()?;
    let aligned = inputs.iter().all(|k| {
        if k.stacked {
            k.shape.len() == rank
        } else {
            k.shape.len() < rank
        }
    });
    if !aligned {
        return None;
    }
    inputs.iter().try_fold(Vec::new(), |acc, k| {
        crate::ops::broadcast_shape("Scan", &acc, &k.shape).ok()
    })
}

/// Moves the state-free nodes of the Scan's `body` out of the loop: captures them on the
/// whole scan inputs and returns the Scan that reads their results as extra scan inputs (and
/// no longer reads the scan inputs only they read), or `None` when no node moves (or the moved
/// values would hold more than twice the scan inputs).
pub(crate) fn hoist(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    attrs: &ScanAttrs,
    plan: &ScanPlan,
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
    let mut known: HashMap<String, Known> = HashMap::new();
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
    let states: HashSet<&str> = body.inputs[..n].iter().map(|i| i.name.as_str()).collect();
    let produced: HashSet<&str> = body
        .nodes
        .iter()
        .flat_map(|nd| nd.outputs.iter().map(String::as_str))
        .collect();
    let order = body.schedule(&args.scope().names())?;
    let mut moved = vec![false; body.nodes.len()];
    for &k in &order {
        let node = &body.nodes[k];
        let mut inputs = Vec::new();
        for name in node.inputs.iter().filter(|i| !i.is_empty()) {
            if !known.contains_key(name) && !produced.contains(name.as_str()) {
                // An outer value: its shape, unstacked.
                if let Some(slot) = args
                    .scope()
                    .get(name)
                    .filter(|_| !states.contains(name.as_str()))
                {
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
        if let Some(shape) = all_known.then(|| stacked_shape(node, &refs)).flatten() {
            known.insert(
                node.outputs[0].clone(),
                Known {
                    stacked: true,
                    shape,
                },
            );
            moved[k] = true;
        }
    }
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
    let held: usize = needed.iter().map(|v| elements(&known[v].shape)).sum();
    let given: usize = scans.iter().map(|s| elements(s.shape())).sum();
    if needed.is_empty() || held > 2 * given {
        return Ok(None);
    }
    // The moved nodes as a graph over the whole scan inputs, recorded now.
    let before = Graph {
        inputs: body.inputs[n..].to_vec(),
        constants: body.constants.clone(),
        nodes: body
            .nodes
            .iter()
            .zip(&moved)
            .filter(|(_, &mv)| mv)
            .map(|(nd, _)| nd.clone())
            .collect(),
        outputs: needed.iter().map(ValueInfo::named).collect(),
        symbolic_dims: Default::default(),
    };
    let mut scope = Scope {
        slots: HashMap::new(),
        parent: Some(args.scope()),
    };
    for (decl, scan) in body.inputs[n..].iter().zip(scans) {
        scope
            .slots
            .insert(decl.name.clone(), Slot::gpu(scan.clone()));
    }
    for (name, value) in &body.constants {
        scope
            .slots
            .insert(name.clone(), Slot::constant(value.clone()));
    }
    let before_order = before.schedule(&args.scope().names())?;
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
        scans: all_scans,
        before: before_steps,
    }))
}
