//! ONNX If and Loop, whose conditions are read while planning (constants, graph inputs, or
//! values computed from them or from shapes, as exporters write for shape-dependent code), so
//! a run stays one submission with no host round trip.
//!
//! If records the chosen branch in place of the node. Loop runs as a Scan (its body captured
//! once and replayed per iteration) when its trip count is known, its condition stays as given
//! and its body needs the iteration number only on the GPU; otherwise it is unrolled: the body
//! recorded once per iteration with the iteration number known on the host, so a body may
//! slice at it, and a condition the body computes on the host ends the loop. Values computed
//! on the host stay there, so they can plan later ops (a Reshape's shape, a Range's limit).

use std::collections::{HashMap, HashSet};

use super::exec::{
    constant_slots, keep_uploaded_constants, plan_values, record_graph_planned, DeadStates,
    NodeArgs, Scope, Slot,
};
use super::registry::OpDef;
use super::{Attr, Graph, Node, ValueInfo};
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

const OP: &str = "If";

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

/// The branch `cond` picks, after checking the node's shape: a graph of no inputs with one
/// output per node output. Shared with the CPU interpreter.
pub(crate) fn branch<'g>(node: &'g Node, cond: &crate::HostTensor) -> Result<&'g Graph> {
    if cond.dtype != DType::Bool || cond.numel() != 1 {
        return Err(invalid(
            "cond",
            format!(
                "cond must hold one bool, not {} {:?}",
                cond.dtype, cond.shape
            ),
        ));
    }
    let key = if cond.data[0] != 0 {
        "then_branch"
    } else {
        "else_branch"
    };
    let Some(Attr::Graph(g)) = node.attrs.get(key) else {
        return Err(invalid(
            key,
            format!("If needs the attribute '{key}' (a graph)"),
        ));
    };
    if !g.inputs.is_empty() {
        return Err(invalid(
            key,
            format!("{key} takes no inputs, but declares {}", g.inputs.len()),
        ));
    }
    if g.outputs.len() != node.outputs.len() {
        return Err(invalid(
            key,
            format!(
                "{key} has {} outputs but the node has {}",
                g.outputs.len(),
                node.outputs.len()
            ),
        ));
    }
    Ok(g)
}

/// Records the branch of `node` its condition picks against `scope`, and gives the slots of
/// the node's outputs: on the host where the branch computed them there, else on the GPU (in
/// `placements` where the node's outputs have places). `plans`: the values of the enclosing
/// graph that plan later ops, whose branch values are computed on the host where they can be.
pub(crate) fn record_if(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    placements: &HashMap<String, Tensor>,
    plans: &HashSet<String>,
    (enclosing, k): (&super::exec::Analysis, usize),
) -> Result<Vec<Slot>> {
    let cond_name = node.inputs.first().map(String::as_str).unwrap_or_default();
    let cond = scope
        .get(cond_name)
        .ok_or_else(|| invalid("cond", "If needs its input 'cond'".into()))?;
    let Some(value) = &cond.host else {
        return Err(invalid(
            "cond",
            format!(
                "cond '{}' is computed on the GPU; it must be known when the graph is planned (a constant, a graph input, or computed from them or from shapes)",
                cond_name.escape_debug()
            ),
        ));
    };
    let branch = branch(node, value)?;
    let then = value.data[0] != 0;
    let mut inner = Scope {
        slots: constant_slots(rec, branch).into_iter().collect(),
        parent: Some(scope),
    };
    let planned: Vec<&str> = node
        .outputs
        .iter()
        .zip(&branch.outputs)
        .filter(|(o, _)| plans.contains(o.as_str()))
        .map(|(_, b)| b.name.as_str())
        .collect();
    // Its order and analysis are the same on every run of a session (its graph does not
    // change): made once.
    let analysed = enclosing.branch(k, then, || {
        let order = branch.schedule(&|n: &str| scope.get(n).is_some())?;
        let analysis =
            super::exec::Analysis::new(rec.context(), branch, &order, &HashMap::new(), &planned);
        Ok(super::exec::AnalysedBranch { order, analysis })
    })?;
    super::exec::record_branch(rec, branch, &analysed, &mut inner, &planned)?;
    keep_uploaded_constants(rec, branch, &inner);
    let outputs = take_outputs(rec, &mut inner, branch, "If branch output")?;
    node.outputs
        .iter()
        .zip(outputs)
        .map(|(name, slot)| placed(rec, placements, name, slot))
        .collect()
}

/// The slot `slot` of a node's output `name`, written into its place where it has one.
fn placed(
    rec: &mut Recorder,
    placements: &HashMap<String, Tensor>,
    name: &str,
    slot: Slot,
) -> Result<Slot> {
    Ok(match placements.get(name) {
        Some(t) => {
            let v = slot.tensor(rec.context())?;
            Slot::gpu(rec.identity_to(&v, Out::into(name, t))?)
        }
        None => slot,
    })
}

/// The slots of `graph`'s outputs after recording it against `inner`, taken out of it (a
/// value of an enclosing graph, or one named twice, is shared), each checked against its
/// declaration.
pub(crate) fn take_outputs(
    rec: &Recorder,
    inner: &mut Scope<'_>,
    graph: &Graph,
    what: &str,
) -> Result<Vec<Slot>> {
    let ctx = rec.context();
    let mut taken: HashMap<&str, usize> = HashMap::new();
    let mut outputs: Vec<Slot> = Vec::with_capacity(graph.outputs.len());
    for (i, decl) in graph.outputs.iter().enumerate() {
        let name = decl.name.as_str();
        let slot = match (taken.get(name), inner.slots.remove(name)) {
            (Some(&j), _) => outputs[j].share(ctx)?,
            (None, Some(s)) => s,
            (None, None) => {
                let outer = inner.get(name).ok_or_else(|| {
                    Error::Graph(format!(
                        "{what} '{}' is not a value of the graph or its enclosing graphs",
                        name.escape_debug()
                    ))
                })?;
                outer.share(ctx)?
            }
        };
        super::sequence::check_slot(decl, what, &slot)?;
        taken.insert(name, i);
        outputs.push(slot);
    }
    Ok(outputs)
}

pub(crate) static GRAPH_OP: OpDef = OpDef {
    name: OP,
    inputs: 1..=1,
    outputs: 1..=usize::MAX,
    host: None,
    attrs: &["then_branch", "else_branch"],
    // The executor records the branch itself (`record_if`), keeping host values on the host.
    run: |_, args| {
        Err(Error::Graph(format!(
            "internal: If node '{}' was not recorded through its branch",
            args.node.name.escape_debug()
        )))
    },
};

const LOOP: &str = "Loop";

fn loop_invalid(input: &str, message: String) -> Error {
    Error::invalid(LOOP, input, message)
}

/// Loop's body after checking the node's shape against it: inputs (iteration number,
/// condition, `n` loop-carried values), outputs (condition, `n` values, `k` scan outputs),
/// and the node's outputs the `n` final values and `k` stacked scan outputs. Shared with the
/// CPU interpreter.
pub(crate) fn loop_body(node: &Node) -> Result<(&Graph, usize, usize)> {
    let Some(Attr::Graph(body)) = node.attrs.get("body") else {
        return Err(loop_invalid(
            "body",
            "Loop needs the attribute 'body' (a graph)".into(),
        ));
    };
    if node.inputs.len() < 2 {
        return Err(loop_invalid(
            "M",
            "Loop takes M and cond (either may be left out as \"\") before its loop-carried values"
                .into(),
        ));
    }
    let n = node.inputs.len() - 2;
    if body.inputs.len() != n + 2 {
        return Err(loop_invalid(
            "body",
            format!(
                "the body takes the iteration number, the condition and the {n} loop-carried values ({} inputs), but declares {}",
                n + 2,
                body.inputs.len()
            ),
        ));
    }
    if body.outputs.len() < n + 1 || node.outputs.len() != body.outputs.len() - 1 {
        return Err(loop_invalid(
            "body",
            format!(
                "the body gives the condition, the {n} loop-carried values and the scan outputs, and the node one output per value and scan output: the body has {} outputs and the node {}",
                body.outputs.len(),
                node.outputs.len()
            ),
        ));
    }
    Ok((body, n, body.outputs.len() - 1 - n))
}

/// Loop's `M` or `cond` as a value known on the host, `None` when left out.
fn host_scalar<'s>(
    node: &Node,
    slots: &[Option<&'s Slot>],
    i: usize,
    role: &str,
    dtype: DType,
) -> Result<Option<&'s HostTensor>> {
    let Some(slot) = slots.get(i).copied().flatten() else {
        return Ok(None);
    };
    let Some(value) = slot.host.as_deref() else {
        return Err(loop_invalid(
            role,
            format!(
                "{role} ('{}') is computed on the GPU; it must be known when the graph is planned (a constant, a graph input, or computed from them or from shapes)",
                node.inputs[i].escape_debug()
            ),
        ));
    };
    if value.dtype != dtype || value.numel() != 1 {
        return Err(loop_invalid(
            role,
            format!(
                "{role} must hold one {dtype}, not {} {:?}",
                value.dtype, value.shape
            ),
        ));
    }
    Ok(Some(value))
}

/// Whether the body's condition output stays true: the condition input passed through, or
/// a constant true. Shared with the CPU interpreter.
pub(crate) fn condition_stays(body: &Graph) -> bool {
    let Some(out) = body.outputs.first() else {
        return false;
    };
    super::scan::passes_through_from(body, 1, 0)
        || body
            .constants
            .iter()
            .any(|(name, v)| *name == out.name && v.dtype == DType::Bool && v.data == [1])
}

/// Whether the body needs the iteration number on the host: an op of the body is planned from
/// it (a Slice at it, an If on it).
fn iteration_on_host(body: &Graph) -> bool {
    plan_values(body, &[]).contains(&body.inputs[0].name)
}

fn too_many_iterations(needed: u64, max: u64) -> Error {
    Error::LimitExceeded {
        op: LOOP,
        what: "the loop's iterations".into(),
        limit: "limit on commands per run (ContextOptions::max_commands)",
        needed,
        max,
    }
}

/// Records `node`, an ONNX Loop, against `scope` (see the module's notes) and gives the slots
/// of its outputs.
pub(crate) fn record_loop(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    slots: &[Option<&Slot>],
    placements: &HashMap<String, Tensor>,
    plans: &HashSet<String>,
    dead_states: &dyn Fn(&mut Recorder) -> Result<DeadStates>,
) -> Result<Vec<Slot>> {
    let (body, n, k) = loop_body(node)?;
    let m = match host_scalar(node, slots, 0, "M", DType::I64)? {
        Some(h) => Some(h.to_vec::<i64>()?[0]),
        None => None,
    };
    let cond = host_scalar(node, slots, 1, "cond", DType::Bool)?.map(|h| h.data[0] != 0);
    // The body's condition ends the loop even where the node's `cond` is left out, as in
    // onnxruntime (the spec's pseudo-code ignores it there).
    let stays = condition_stays(body);
    if m.is_none() && stays && cond != Some(false) {
        return Err(loop_invalid(
            "M",
            "M is left out and the condition stays true, so the loop would not end".into(),
        ));
    }
    let trips = match (m, cond) {
        (_, Some(false)) => Some(0),
        (Some(m), _) if stays => Some(m.max(0) as usize),
        _ => None,
    };
    // Every iteration costs at least one command or one planning of the body: a trip count
    // beyond the limit on commands is refused before anything is built for it.
    let max = rec.context().max_commands();
    if let Some(t) = trips.filter(|&t| t as u64 > max) {
        return Err(too_many_iterations(t as u64, max));
    }
    // Sequences and optionals exist only while planning: a loop that carries them is
    // unrolled.
    let needs_host = iteration_on_host(body)
        || node.outputs[..n].iter().any(|o| plans.contains(o))
        || slots[2..]
            .iter()
            .flatten()
            .any(|s| s.non_tensor().is_some());
    if let (Some(trips), false) = (trips, needs_host) {
        // The Scan's states are the Loop's inputs from 2 on.
        let dead = dead_states(rec)?
            .into_iter()
            .map(|(i, d)| (i - 2, d))
            .collect();
        match as_scan(rec, scope, node, slots, placements, body, trips, dead) {
            // Loop-carried values may change shape (a value concatenated to), a Scan's states
            // may not: such a loop runs unrolled. What the Scan recorded before it found out
            // writes only to its own buffers.
            Err(e) if e.to_string().contains(crate::recorder::STATES_KEEP_SHAPE) => {}
            result => return result,
        }
    }
    unrolled(rec, scope, node, slots, placements, (body, n, k), m, cond)
}

/// The Loop as a Scan: the loop-carried values are its states, the iteration numbers
/// `0..trips` its one scan input, and the condition a constant true in its body.
#[allow(clippy::too_many_arguments)]
fn as_scan(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    slots: &[Option<&Slot>],
    placements: &HashMap<String, Tensor>,
    body: &Graph,
    trips: usize,
    dead: DeadStates,
) -> Result<Vec<Slot>> {
    let mut counter = body.inputs[0].clone();
    counter.dtype = Some(DType::I64);
    counter.shape = Some(Vec::new());
    let mut constants = body.constants.clone();
    constants.push((
        body.inputs[1].name.clone(),
        HostTensor::from_vec(Vec::new(), &[true])?.into(),
    ));
    let scan_body = Graph {
        inputs: body.inputs[2..]
            .iter()
            .cloned()
            .chain([counter])
            .collect::<Vec<ValueInfo>>(),
        constants,
        nodes: body.nodes.clone(),
        outputs: body.outputs[1..].to_vec(),
        symbolic_dims: Default::default(),
    };
    let numbers: Vec<i64> = (0..trips as i64).collect();
    let numbers = HostTensor::from_vec(vec![trips], &numbers)?;
    // Uploaded through the recorder: a session's later runs upload into the same buffer.
    let uploaded = rec.upload(&numbers)?;
    let numbers = Slot::input(numbers);
    let _ = numbers.gpu.set(uploaded);
    let mut inputs = node.inputs[2..].to_vec();
    inputs.push(format!("{}/iteration_numbers", node.name));
    let scan = Node::new("Scan", node.name.clone())
        .inputs(inputs)
        .outputs(node.outputs.clone())
        .attr("body", Attr::Graph(Box::new(scan_body)))
        .attr("num_scan_inputs", Attr::Int(1));
    let mut scan_slots = slots[2..].to_vec();
    scan_slots.push(Some(&numbers));
    let ctx = rec.context().clone();
    let def = &super::scan::GRAPH_OP;
    let args =
        NodeArgs::new(&ctx, &scan, def, scan_slots, scope, placements).with_dead_states(dead);
    Ok((def.run)(rec, &args)?.into_iter().map(Slot::gpu).collect())
}

/// The Loop unrolled: its body recorded once per iteration, with the iteration number and
/// the condition known on the host; the scan outputs stacked after the last iteration.
#[allow(clippy::too_many_arguments)]
fn unrolled(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    slots: &[Option<&Slot>],
    placements: &HashMap<String, Tensor>,
    (body, n, k): (&Graph, usize, usize),
    m: Option<i64>,
    cond: Option<bool>,
) -> Result<Vec<Slot>> {
    let ctx = rec.context().clone();
    let order = body.schedule(&|n: &str| scope.get(n).is_some())?;
    let mut carried: Vec<Slot> = (0..n)
        .map(|j| match slots.get(2 + j).copied().flatten() {
            Some(s) => s.share(&ctx),
            None => Err(loop_invalid(
                "v_initial",
                format!("loop-carried value {j} is left out"),
            )),
        })
        .collect::<Result<_>>()?;
    let mut elements: Vec<Vec<Tensor>> = vec![Vec::new(); k];
    // The condition and the loop-carried values stay on the host where the body computes them
    // there, to plan the next iteration.
    let planned: Vec<&str> = body.outputs[..=n].iter().map(|o| o.name.as_str()).collect();
    let mut going = cond.unwrap_or(true);
    let mut t = 0i64;
    let max = rec.context().max_commands();
    while going && m.is_none_or(|m| t < m) {
        if t as u64 >= max {
            return Err(too_many_iterations(t as u64 + 1, max));
        }
        let mut inner = Scope {
            slots: constant_slots(rec, body).into_iter().collect(),
            parent: Some(scope),
        };
        let number = HostTensor::from_vec(Vec::new(), &[t])?;
        let given = HostTensor::from_vec(Vec::new(), &[going])?;
        inner
            .slots
            .insert(body.inputs[0].name.clone(), Slot::input(number));
        inner
            .slots
            .insert(body.inputs[1].name.clone(), Slot::input(given));
        for (decl, slot) in body.inputs[2..].iter().zip(carried.drain(..)) {
            inner.slots.insert(decl.name.clone(), slot);
        }
        record_graph_planned(rec, body, &order, &mut inner, &HashMap::new(), &planned)?;
        keep_uploaded_constants(rec, body, &inner);
        let mut outputs = take_outputs(rec, &mut inner, body, "Loop body output")?;
        let scans = outputs.split_off(n + 1);
        carried = outputs.split_off(1);
        // A condition computed on the GPU (a while loop's convergence test) is read back
        // where the run can (see `ContextOptions::read_back`).
        #[cfg(feature = "native")]
        if outputs[0].host.is_none() && outputs[0].non_tensor().is_none() && rec.can_read_back() {
            let t = outputs[0].tensor(&ctx)?;
            let value = rec.read_back(LOOP, &[&t])?.remove(0);
            let slot = Slot::input(value);
            let _ = slot.gpu.set(t);
            outputs[0] = slot;
        }
        let out = &outputs[0];
        going = match out.host.as_deref() {
            Some(h) if h.dtype == DType::Bool && h.numel() == 1 => h.data[0] != 0,
            Some(h) => {
                return Err(loop_invalid(
                    "body",
                    format!(
                        "the body's condition output must hold one bool, not {} {:?}",
                        h.dtype, h.shape
                    ),
                ))
            }
            None => {
                return Err(loop_invalid(
                    "body",
                    format!(
                        "the body computes its condition ('{}') on the GPU and this run cannot read it back (a Scan body, or read-backs off as in the browser), so it must be known when the iteration is planned (computed from the iteration number, constants, graph inputs or shapes)",
                        body.outputs[0].name.escape_debug()
                    ),
                ))
            }
        };
        for (q, slot) in scans.iter().enumerate() {
            if let Some(what) = slot.non_tensor() {
                return Err(loop_invalid(
                    "body",
                    format!(
                        "scan output '{}' is {what}; a Loop stacks tensors",
                        body.outputs[n + 1 + q].name.escape_debug()
                    ),
                ));
            }
            let e = slot.tensor(&ctx)?;
            if let Some(first) = elements[q].first() {
                if first.shape() != e.shape() || first.dtype() != e.dtype() {
                    return Err(loop_invalid(
                        "body",
                        format!(
                            "scan output '{}' is {} {:?} in iteration {t} but {} {:?} in iteration 0; its elements must agree",
                            body.outputs[n + 1 + q].name.escape_debug(),
                            e.dtype(),
                            e.shape(),
                            first.dtype(),
                            first.shape()
                        ),
                    ));
                }
            }
            elements[q].push(e);
        }
        // This iteration's inputs (the last iteration's values) are read no more.
        let inputs: HashSet<&str> = body.inputs.iter().map(|i| i.name.as_str()).collect();
        for (name, slot) in inner.slots.drain() {
            if let (true, Some(t)) = (inputs.contains(name.as_str()), slot.gpu.into_inner()) {
                rec.release(t);
            }
        }
        rec.end_of_iteration()?;
        t += 1;
    }
    let mut results = Vec::with_capacity(n + k);
    for (name, slot) in node.outputs.iter().zip(carried) {
        results.push(placed(rec, placements, name, slot)?);
    }
    for (q, items) in elements.into_iter().enumerate() {
        let name = &node.outputs[n + q];
        let out = match placements.get(name) {
            Some(t) => Out::into(name, t),
            None => Out::NEW,
        };
        let stacked = if items.is_empty() {
            let decl = &body.outputs[n + 1 + q];
            let (Some(dtype), Some(shape)) = (decl.dtype, &decl.shape) else {
                return Err(loop_invalid(
                    "body",
                    format!(
                        "the loop ran no iteration, so scan output '{}' takes its element dtype and shape from the body's declaration, which does not give them",
                        decl.name.escape_debug()
                    ),
                ));
            };
            let mut full = vec![0];
            full.extend(shape.iter().map(|d| d.unwrap_or(0)));
            out.tensor(rec, dtype, &full)?
        } else {
            let rows = items
                .iter()
                .map(|e| rec.unsqueeze_to(e, &[0], Out::NEW))
                .collect::<Result<Vec<_>>>()?;
            drop(items);
            let stacked = rec.concat_to(&rows, 0, out)?;
            for r in rows {
                rec.release(r);
            }
            stacked
        };
        results.push(Slot::gpu(stacked));
    }
    Ok(results)
}

pub(crate) static LOOP_OP: OpDef = OpDef {
    name: LOOP,
    inputs: 2..=usize::MAX,
    outputs: 1..=usize::MAX,
    host: None,
    attrs: &["body"],
    // The executor records the loop itself (`record_loop`), keeping host values on the host.
    run: |_, args| {
        Err(Error::Graph(format!(
            "internal: Loop node '{}' was not recorded as a loop",
            args.node.name.escape_debug()
        )))
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A Loop body over `i`, `cond` and one value `v`, giving `cond_out` and `v_out`.
    fn body(nodes: Vec<Node>) -> Graph {
        let mut g = Graph::new()
            .input("i", DType::I64, &[])
            .input("cond", DType::Bool, &[])
            .input("v", DType::F32, &[Some(3)]);
        for n in nodes {
            g = g.node(n);
        }
        g.output("cond_out").output("v_out")
    }

    fn passthrough() -> Node {
        Node::new("Identity", "c")
            .inputs(["cond"])
            .outputs(["cond_out"])
    }

    #[test]
    fn a_gather_at_the_iteration_number_keeps_it_on_the_gpu() {
        let b = body(vec![
            passthrough(),
            Node::new("Gather", "g").inputs(["X", "i"]).outputs(["row"]),
            Node::new("Add", "a")
                .inputs(["v", "row"])
                .outputs(["v_out"]),
        ]);
        assert!(!iteration_on_host(&b));
        assert!(condition_stays(&b));
    }

    #[test]
    fn a_slice_or_an_if_at_the_iteration_number_needs_it_on_the_host() {
        let slice = body(vec![
            passthrough(),
            Node::new("Unsqueeze", "u")
                .inputs(["i", "axes"])
                .outputs(["start"]),
            Node::new("Add", "e")
                .inputs(["start", "one"])
                .outputs(["end"]),
            Node::new("OnnxSlice", "s")
                .inputs(["X", "start", "end"])
                .outputs(["v_out"]),
        ]);
        assert!(iteration_on_host(&slice));
        let branch = Graph::new()
            .node(Node::new("Identity", "t").inputs(["v"]).outputs(["r"]))
            .output("r");
        let by_parity = body(vec![
            passthrough(),
            Node::new("Mod", "m").inputs(["i", "two"]).outputs(["p"]),
            Node::new("Cast", "b")
                .inputs(["p"])
                .outputs(["odd"])
                .attr("to", Attr::String("bool".into())),
            Node::new("If", "if")
                .inputs(["odd"])
                .outputs(["v_out"])
                .attr("then_branch", Attr::Graph(Box::new(branch.clone())))
                .attr("else_branch", Attr::Graph(Box::new(branch))),
        ]);
        assert!(iteration_on_host(&by_parity));
    }

    #[test]
    fn only_a_passed_through_or_constant_true_condition_stays() {
        let computed = body(vec![
            Node::new("Less", "l")
                .inputs(["i", "three"])
                .outputs(["cond_out"]),
            Node::new("Identity", "v").inputs(["v"]).outputs(["v_out"]),
        ]);
        assert!(!condition_stays(&computed));
        assert!(!iteration_on_host(&computed));
        let constant = |value: bool| {
            body(vec![Node::new("Identity", "v")
                .inputs(["v"])
                .outputs(["v_out"])])
            .constant("cond_out", HostTensor::from_vec(vec![], &[value]).unwrap())
        };
        assert!(condition_stays(&constant(true)));
        assert!(!condition_stays(&constant(false)));
    }
}
