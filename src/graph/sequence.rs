//! ONNX sequences and optionals. They exist only while a graph is planned: a sequence is the
//! list of its tensors' slots (each on the host or on the GPU) and an empty optional is a slot
//! that holds nothing. The ops that only rearrange them (SequenceInsert, SequenceAt, Optional,
//! ...) record no GPU work; SplitToSequence and ConcatFromSequence record a Split and a Concat,
//! and SequenceMap records its body once per element, as an unrolled Loop does. Positions
//! must be known when planning (constants, graph inputs, or computed from them or from
//! shapes), since a sequence's length is part of the plan.

use std::collections::{HashMap, HashSet};

use super::exec::{
    constant_slots, input_slots, keep_uploaded_constants, record_graph_planned, Scope, Sequence,
    Slot,
};
use super::registry::{planned_op, OpDef};
use super::{Attr, Graph, Node, ValueInfo, ValueKind};
use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

/// The ops on sequences and optionals, which the executor records itself ([`record`]).
pub(crate) const OPS: &[&str] = &[
    "SequenceEmpty",
    "SequenceConstruct",
    "SequenceInsert",
    "SequenceAt",
    "SequenceErase",
    "SequenceLength",
    "SplitToSequence",
    "ConcatFromSequence",
    "SequenceMap",
    "Optional",
    "OptionalHasElement",
    "OptionalGetElement",
];

/// Whether the executor records `node` here: an op of [`OPS`], or an Identity of a sequence
/// or of an empty optional.
pub(crate) fn handles(node: &Node, slots: &[Option<&Slot>]) -> bool {
    OPS.contains(&node.op.as_str())
        || (node.op == "Identity"
            && slots
                .first()
                .copied()
                .flatten()
                .is_some_and(|s| s.non_tensor().is_some()))
}

/// Refuses a sequence or an empty optional where `node` (an op on tensors) reads a tensor. A
/// Loop carries them (its inputs after M and cond).
pub(crate) fn check_tensor_inputs(node: &Node, slots: &[Option<&Slot>]) -> Result<()> {
    for (i, slot) in slots.iter().enumerate() {
        let Some(what) = slot.and_then(|s| s.non_tensor()) else {
            continue;
        };
        if node.op == "Loop" && i >= 2 {
            continue;
        }
        return Err(Error::Graph(format!(
            "{} input {i} ('{}') is {what}, but {} takes tensors there",
            node.op.escape_debug(),
            node.inputs[i].escape_debug(),
            node.op.escape_debug()
        )));
    }
    Ok(())
}

/// Checks `slot` (called `what` in messages) against its declaration `decl`: its kind, and
/// the dtype and shape of the tensor or of each of the sequence's tensors. A declaration of
/// a name only takes any value.
pub(crate) fn check_slot(decl: &ValueInfo, what: &str, slot: &Slot) -> Result<()> {
    let named_only = decl.kind == ValueKind::Tensor && decl.dtype.is_none() && decl.shape.is_none();
    let tensor_check = || {
        let (dtype, shape) = slot.dtype_shape();
        decl.check(what, dtype, &shape)
    };
    if slot.map.is_some() || matches!(decl.kind, ValueKind::Map(_)) {
        return match (&slot.map, decl.kind) {
            (Some(m), ValueKind::Map(t)) if m.map_type() == t => Ok(()),
            (Some(m), ValueKind::Map(t)) => Err(Error::Graph(format!(
                "{what} '{}' is declared a {} but is a {}",
                decl.name.escape_debug(),
                t.name(),
                m.map_type().name()
            ))),
            (Some(_), _) if named_only => Ok(()),
            _ => Err(Error::Graph(format!(
                "{what} '{}' is declared {} but is {}",
                decl.name.escape_debug(),
                match decl.kind {
                    ValueKind::Map(t) => format!("a {}", t.name()),
                    k => k.name().to_string(),
                },
                slot.non_tensor().unwrap_or("a tensor of numbers")
            ))),
        };
    }
    if slot.maps.is_some() || decl.kind == ValueKind::Maps {
        return match (slot.maps.is_some(), decl.kind) {
            (true, ValueKind::Maps) => Ok(()),
            (true, _) if named_only => Ok(()),
            _ => Err(Error::Graph(format!(
                "{what} '{}' is declared {} but is {}",
                decl.name.escape_debug(),
                decl.kind.name(),
                slot.non_tensor().unwrap_or("a tensor of numbers")
            ))),
        };
    }
    if let Some(strings) = &slot.strings {
        return match decl.kind {
            ValueKind::Strings | ValueKind::Tensor | ValueKind::OptionalTensor
                if decl.dtype.is_none() =>
            {
                ValueInfo {
                    kind: ValueKind::Tensor,
                    ..decl.clone()
                }
                .check(what, DType::U8, &strings.shape)
            }
            _ if named_only => Ok(()),
            _ => Err(Error::Graph(format!(
                "{what} '{}' is declared {}{} but is a string tensor",
                decl.name.escape_debug(),
                decl.kind.name(),
                decl.dtype.map_or(String::new(), |d| format!(" of {d}"))
            ))),
        };
    }
    if decl.kind == ValueKind::Strings {
        return Err(Error::Graph(format!(
            "{what} '{}' is declared a string tensor but is {}",
            decl.name.escape_debug(),
            slot.non_tensor().unwrap_or("a tensor of numbers")
        )));
    }
    match (decl.kind, &slot.seq, slot.absent) {
        (_, None, false) if matches!(decl.kind, ValueKind::Tensor | ValueKind::OptionalTensor) => {
            tensor_check()
        }
        (_, Some(seq), _)
            if named_only
                || matches!(decl.kind, ValueKind::Sequence | ValueKind::OptionalSequence) =>
        {
            // Element dtypes only: a sequence's tensors may differ in shape, and exporters
            // declare one shape for all of them (onnxruntime holds them to none).
            match (decl.dtype, seq.items.first().map(|i| i.dtype_shape().0)) {
                (Some(want), Some(got)) if want != got => Err(Error::Graph(format!(
                    "{what} '{}' is declared a sequence of {want} tensors but holds {got} tensors",
                    decl.name.escape_debug()
                ))),
                _ => Ok(()),
            }
        }
        (ValueKind::OptionalTensor | ValueKind::OptionalSequence, None, true) => Ok(()),
        _ if named_only => Ok(()),
        _ => Err(Error::Graph(format!(
            "{what} '{}' is declared {} but is {}",
            decl.name.escape_debug(),
            decl.kind.name(),
            slot.non_tensor().unwrap_or("a tensor")
        ))),
    }
}

/// The op's name as the registry has it (errors name ops by `&'static str`).
fn op_name(node: &Node) -> &'static str {
    OPS.iter()
        .copied()
        .find(|&o| o == node.op)
        .unwrap_or("Identity")
}

/// Records `node` (see [`handles`]) against `scope` and gives its outputs' slots. `plans`:
/// the values of the enclosing graph that plan later ops.
pub(crate) fn record(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    plans: &HashSet<String>,
) -> Result<Vec<Slot>> {
    let slots = input_slots(scope, node);
    let op = op_name(node);
    let ctx = rec.context().clone();
    let input = |i: usize, role: &str| -> Result<&Slot> {
        slots.get(i).copied().flatten().ok_or_else(|| {
            Error::invalid(
                op,
                role,
                format!("{op} needs its input '{role}' (input {i})"),
            )
        })
    };
    let sequence = |i: usize, role: &str| -> Result<&Sequence> {
        let slot = input(i, role)?;
        slot.seq.as_ref().ok_or_else(|| {
            Error::invalid(
                op,
                role,
                format!(
                    "{role} ('{}') is {}, not a sequence",
                    node.inputs[i].escape_debug(),
                    slot.non_tensor().unwrap_or("a tensor")
                ),
            )
        })
    };
    let tensor = |i: usize, role: &str| -> Result<&Slot> {
        let slot = input(i, role)?;
        match slot.non_tensor() {
            None => Ok(slot),
            Some(what) => Err(Error::invalid(
                op,
                role,
                format!(
                    "{role} ('{}') is {what}, not a tensor",
                    node.inputs[i].escape_debug()
                ),
            )),
        }
    };
    let scalar = |value: HostTensor| Ok(vec![Slot::input(value)]);
    match op {
        "SequenceEmpty" => {
            let dtype = match node.attrs.get("dtype") {
                None => DType::F32,
                Some(Attr::String(name)) => DType::from_name(name).ok_or_else(|| {
                    Error::invalid(
                        op,
                        "dtype",
                        format!("dtype '{}' is not a dtype", name.escape_debug()),
                    )
                })?,
                Some(_) => return Err(Error::invalid(op, "dtype", "dtype must be a dtype's name")),
            };
            Ok(vec![Slot::sequence(Sequence {
                dtype: Some(dtype),
                items: Vec::new(),
            })])
        }
        "SequenceConstruct" => {
            let mut items = Vec::with_capacity(slots.len());
            let mut dtype = None;
            for i in 0..slots.len() {
                let slot = tensor(i, "inputs")?;
                let d = slot.dtype_shape().0;
                same_dtype(op, &mut dtype, d, &node.inputs[i])?;
                items.push(slot.share(&ctx)?);
            }
            if items.is_empty() {
                return Err(Error::invalid(
                    op,
                    "inputs",
                    "SequenceConstruct needs at least one tensor",
                ));
            }
            Ok(vec![Slot::sequence(Sequence { dtype, items })])
        }
        "SequenceInsert" => {
            let seq = sequence(0, "input_sequence")?;
            let value = tensor(1, "tensor")?;
            let mut dtype = seq.dtype;
            same_dtype(op, &mut dtype, value.dtype_shape().0, &node.inputs[1])?;
            let n = seq.items.len();
            let at = position(op, node, &slots, 2, n, true)?.unwrap_or(n);
            let mut items = share_all(seq, &ctx)?;
            items.insert(at, value.share(&ctx)?);
            Ok(vec![Slot::sequence(Sequence { dtype, items })])
        }
        "SequenceAt" => {
            let seq = sequence(0, "input_sequence")?;
            input(1, "position")?;
            let at =
                position(op, node, &slots, 1, seq.items.len(), false)?.expect("position is given");
            Ok(vec![seq.items[at].share(&ctx)?])
        }
        "SequenceErase" => {
            let seq = sequence(0, "input_sequence")?;
            let n = seq.items.len();
            if n == 0 {
                return Err(Error::invalid(
                    op,
                    "input_sequence",
                    format!(
                        "input_sequence ('{}') is empty: there is nothing to erase",
                        node.inputs[0].escape_debug()
                    ),
                ));
            }
            let at = position(op, node, &slots, 1, n, false)?.unwrap_or(n - 1);
            let mut items = share_all(seq, &ctx)?;
            items.remove(at);
            Ok(vec![Slot::sequence(Sequence {
                dtype: seq.dtype,
                items,
            })])
        }
        "SequenceLength" => {
            let n = sequence(0, "input_sequence")?.items.len() as i64;
            scalar(HostTensor::from_vec(Vec::new(), &[n])?)
        }
        "SplitToSequence" => split_to_sequence(rec, node, tensor(0, "input")?, &slots),
        "ConcatFromSequence" => concat_from_sequence(rec, node, sequence(0, "input_sequence")?),
        "SequenceMap" => sequence_map(rec, scope, node, &slots, plans),
        "Optional" => match slots.first().copied().flatten() {
            Some(slot) if slot.absent => Err(Error::invalid(
                op,
                "input",
                format!(
                    "input ('{}') is an empty optional; Optional wraps a tensor or a sequence",
                    node.inputs[0].escape_debug()
                ),
            )),
            Some(slot) => Ok(vec![slot.share(&ctx)?]),
            None => {
                if let Some(Attr::String(ty)) = node.attrs.get("type") {
                    if !(ty.starts_with("tensor(") || ty.starts_with("seq(tensor(")) {
                        return Err(Error::invalid(
                            op,
                            "type",
                            format!(
                                "type is {}; optionals of tensors and of sequences of tensors are supported",
                                ty.escape_debug()
                            ),
                        ));
                    }
                }
                Ok(vec![Slot::absent()])
            }
        },
        "OptionalHasElement" => {
            let has = slots.first().copied().flatten().is_some_and(|s| !s.absent);
            scalar(HostTensor::from_vec(Vec::new(), &[has])?)
        }
        "OptionalGetElement" => {
            let slot = input(0, "input")?;
            if slot.absent {
                return Err(Error::invalid(
                    op,
                    "input",
                    format!(
                        "input ('{}') is an empty optional: it has no element to get",
                        node.inputs[0].escape_debug()
                    ),
                ));
            }
            Ok(vec![slot.share(&ctx)?])
        }
        // An Identity of a sequence or of an empty optional.
        _ => Ok(vec![input(0, "input")?.share(&ctx)?]),
    }
}

/// Another slot of each of the sequence's tensors.
fn share_all(seq: &Sequence, ctx: &crate::Context) -> Result<Vec<Slot>> {
    seq.items.iter().map(|s| s.share(ctx)).collect()
}

/// Checks that a tensor of `dtype` (input `name`) may join a sequence of `held` (setting it
/// where not known yet).
fn same_dtype(op: &'static str, held: &mut Option<DType>, dtype: DType, name: &str) -> Result<()> {
    match *held {
        Some(h) if h != dtype => Err(Error::invalid(
            op,
            "tensor",
            format!(
                "'{}' is {dtype}, but the sequence holds {h} tensors; a sequence's tensors share one dtype",
                name.escape_debug()
            ),
        )),
        _ => {
            *held = Some(dtype);
            Ok(())
        }
    }
}

/// Position input `i` (an i32 or i64 scalar known on the host) as an index into a sequence of
/// `n` tensors: in `-n..n`, or `-n..=n` where it may be one past the end (`insert`). `None`
/// when left out.
fn position(
    op: &'static str,
    node: &Node,
    slots: &[Option<&Slot>],
    i: usize,
    n: usize,
    insert: bool,
) -> Result<Option<usize>> {
    let Some(slot) = slots.get(i).copied().flatten() else {
        return Ok(None);
    };
    let name = node.inputs[i].escape_debug().to_string();
    let value = match (&slot.host, slot.non_tensor()) {
        (_, Some(what)) => {
            return Err(Error::invalid(
                op,
                "position",
                format!("position ('{name}') is {what}, not a tensor"),
            ))
        }
        (Some(h), None) => h,
        (None, None) => {
            return Err(Error::invalid(
                op,
                "position",
                format!(
                    "position ('{name}') is computed on the GPU; it must be known when the graph is planned (a constant, a graph input, or computed from them or from shapes), since the sequence's length is part of the plan"
                ),
            ))
        }
    };
    if !matches!(value.dtype, DType::I32 | DType::I64)
        || value.numel() != 1
        || value.shape.len() > 1
    {
        return Err(Error::invalid(
            op,
            "position",
            format!(
                "position ('{name}') must be one i32 or i64 value, not {} {:?}",
                value.dtype, value.shape
            ),
        ));
    }
    let p = scalar_int(value)?;
    let len = n as i64;
    let last = if insert { len } else { len - 1 };
    if p < -len || p > last {
        return Err(Error::invalid(
            op,
            "position",
            format!(
                "position {p} ('{name}') is out of range for a sequence of {n} tensors (from {} to {last})",
                -len
            ),
        ));
    }
    Ok(Some(if p < 0 { p + len } else { p } as usize))
}

/// The one value of an i32 or i64 tensor (checked by the caller).
fn scalar_int(value: &HostTensor) -> Result<i64> {
    Ok(match value.dtype {
        DType::I32 => i64::from(value.to_vec::<i32>()?[0]),
        _ => value.to_vec::<i64>()?[0],
    })
}

/// An integer attribute, `default` when absent.
fn int_attr(op: &'static str, node: &Node, name: &str, default: Option<i64>) -> Result<i64> {
    match (node.attrs.get(name), default) {
        (Some(Attr::Int(v)), _) => Ok(*v),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(Error::invalid(
            op,
            name,
            format!("{op} needs the attribute '{name}'"),
        )),
        (Some(_), _) => Err(Error::invalid(
            op,
            name,
            format!("{name} must be an integer"),
        )),
    }
}

/// `axis` normalized against `rank` (negative from the end).
fn axis_in(op: &'static str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(Error::invalid(
            op,
            "axis",
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// SplitToSequence: `input` split along `axis` into parts of the sizes `split` gives (a
/// scalar: parts of that size, the last one smaller where it does not divide; a list: the
/// sizes), or into parts of one element, without the axis unless `keepdims` is 1.
fn split_to_sequence(
    rec: &mut Recorder,
    node: &Node,
    input: &Slot,
    slots: &[Option<&Slot>],
) -> Result<Vec<Slot>> {
    const OP: &str = "SplitToSequence";
    let (dtype, shape) = input.dtype_shape();
    let axis = axis_in(OP, int_attr(OP, node, "axis", Some(0))?, shape.len())?;
    let keepdims = int_attr(OP, node, "keepdims", Some(1))? != 0;
    let dim = shape[axis];
    let split = match slots.get(1).copied().flatten() {
        None => None,
        Some(slot) => {
            let Some(h) = slot.host.as_deref().filter(|_| slot.non_tensor().is_none()) else {
                return Err(Error::invalid(
                    OP,
                    "split",
                    format!(
                        "split ('{}') must be a tensor known when the graph is planned (a constant, a graph input, or computed from them or from shapes), since it gives the sequence's length",
                        node.inputs[1].escape_debug()
                    ),
                ));
            };
            if h.shape.len() > 1 {
                return Err(Error::invalid(
                    OP,
                    "split",
                    format!(
                        "split must be a scalar or a list, not of shape {:?}",
                        h.shape
                    ),
                ));
            }
            let sizes = match h.dtype {
                DType::I32 => h.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
                DType::I64 => h.to_vec::<i64>()?,
                other => {
                    return Err(Error::invalid(
                        OP,
                        "split",
                        format!("split must be i32 or i64, not {other}"),
                    ))
                }
            };
            Some((h.shape.is_empty(), sizes))
        }
    };
    let (sizes, squeeze) = match split {
        None => (vec![1; dim], !keepdims),
        Some((true, v)) => {
            let chunk = v[0];
            if chunk <= 0 {
                return Err(Error::invalid(
                    OP,
                    "split",
                    format!("split {chunk} must be positive"),
                ));
            }
            let chunk = chunk as usize;
            let mut sizes = vec![chunk; dim / chunk];
            if dim % chunk != 0 {
                sizes.push(dim % chunk);
            }
            (sizes, false)
        }
        Some((false, v)) => {
            if v.iter().any(|&s| s < 0) || v.iter().sum::<i64>() != dim as i64 {
                return Err(Error::invalid(
                    OP,
                    "split",
                    format!(
                        "split {v:?} must be sizes of at least 0 that add up to axis {axis}'s length {dim}"
                    ),
                ));
            }
            (v.iter().map(|&s| s as usize).collect(), false)
        }
    };
    let items = if sizes.is_empty() {
        Vec::new()
    } else {
        let t = input.tensor(rec.context())?;
        let outs = sizes.iter().map(|_| Out::NEW).collect();
        let parts = rec.split_to(&t, axis as i64, &sizes, outs)?;
        let mut items = Vec::with_capacity(parts.len());
        for part in parts {
            let part = if squeeze {
                let mut s = part.shape().to_vec();
                s.remove(axis);
                part.reshaped(&s)?
            } else {
                part
            };
            items.push(Slot::gpu(part));
        }
        items
    };
    Ok(vec![Slot::sequence(Sequence {
        dtype: Some(dtype),
        items,
    })])
}

/// ConcatFromSequence: the sequence's tensors joined along `axis`, or stacked along a new
/// axis at `axis` where `new_axis` is 1.
fn concat_from_sequence(rec: &mut Recorder, node: &Node, seq: &Sequence) -> Result<Vec<Slot>> {
    const OP: &str = "ConcatFromSequence";
    let axis = int_attr(OP, node, "axis", None)?;
    let new_axis = int_attr(OP, node, "new_axis", Some(0))? != 0;
    let Some(first) = seq.items.first() else {
        return Err(Error::invalid(
            OP,
            "input_sequence",
            format!(
                "input_sequence ('{}') is empty: there is nothing to join",
                node.inputs[0].escape_debug()
            ),
        ));
    };
    let rank = first.dtype_shape().1.len();
    let mut tensors = Vec::with_capacity(seq.items.len());
    let axis = if new_axis {
        let k = axis_in(OP, axis, rank + 1)?;
        for item in &seq.items {
            let t = item.tensor_on(rec)?;
            let mut s = t.shape().to_vec();
            if s.len() != rank {
                return Err(Error::invalid(
                    OP,
                    "input_sequence",
                    format!(
                        "the sequence's tensors have shapes {:?} and {s:?}; stacking needs one shape",
                        first.dtype_shape().1
                    ),
                ));
            }
            s.insert(k, 1);
            tensors.push(t.reshaped(&s)?);
        }
        k
    } else {
        let k = axis_in(OP, axis, rank)?;
        for item in &seq.items {
            tensors.push(item.tensor_on(rec)?);
        }
        k
    };
    let joined: Tensor = rec.concat_to(&tensors, axis as i64, Out::NEW)?;
    Ok(vec![Slot::gpu(joined)])
}

/// SequenceMap: its body recorded once per position of its sequence inputs, reading their
/// tensors at that position and its tensor inputs whole; each output a sequence of what the
/// body gives.
fn sequence_map(
    rec: &mut Recorder,
    scope: &Scope<'_>,
    node: &Node,
    slots: &[Option<&Slot>],
    plans: &HashSet<String>,
) -> Result<Vec<Slot>> {
    const OP: &str = "SequenceMap";
    let body: &Graph = match node.attrs.get("body") {
        Some(Attr::Graph(g)) => g,
        _ => {
            return Err(Error::invalid(
                OP,
                "body",
                "SequenceMap needs the attribute 'body' (a graph)",
            ))
        }
    };
    if body.inputs.len() != slots.len() || body.outputs.len() != node.outputs.len() {
        return Err(Error::invalid(
            OP,
            "body",
            format!(
                "the body takes {} inputs and gives {} outputs, but the node has {} inputs and {} outputs",
                body.inputs.len(),
                body.outputs.len(),
                slots.len(),
                node.outputs.len()
            ),
        ));
    }
    let mut n = None;
    for (i, slot) in slots.iter().enumerate() {
        let Some(slot) = slot else {
            return Err(Error::invalid(
                OP,
                "inputs",
                format!("input {i} is left out; SequenceMap reads all its inputs"),
            ));
        };
        if slot.absent {
            return Err(Error::invalid(
                OP,
                "inputs",
                format!(
                    "input {i} ('{}') is an empty optional",
                    node.inputs[i].escape_debug()
                ),
            ));
        }
        match (&slot.seq, n) {
            (None, _) if i == 0 => {
                return Err(Error::invalid(
                    OP,
                    "input_sequence",
                    format!(
                        "input_sequence ('{}') is a tensor, not a sequence",
                        node.inputs[0].escape_debug()
                    ),
                ))
            }
            (Some(s), Some(len)) if s.items.len() != len => {
                return Err(Error::invalid(
                    OP,
                    "additional_inputs",
                    format!(
                        "sequence input {i} ('{}') holds {} tensors but input_sequence holds {len}; they must agree",
                        node.inputs[i].escape_debug(),
                        s.items.len()
                    ),
                ))
            }
            (Some(s), None) => n = Some(s.items.len()),
            _ => {}
        }
    }
    let n = n.unwrap_or(0);
    let max = rec.context().max_commands();
    if n as u64 > max {
        return Err(Error::LimitExceeded {
            op: OP,
            what: "the body's applications".into(),
            limit: "limit on commands per run (ContextOptions::max_commands)",
            needed: n as u64,
            max,
        });
    }
    let ctx = rec.context().clone();
    let order = body.schedule(&|n: &str| scope.get(n).is_some())?;
    let planned: Vec<&str> = match node.outputs.iter().any(|o| plans.contains(o)) {
        true => body.outputs.iter().map(|o| o.name.as_str()).collect(),
        false => Vec::new(),
    };
    let mut outputs: Vec<Sequence> = body
        .outputs
        .iter()
        .map(|o| Sequence {
            dtype: o.dtype,
            items: Vec::with_capacity(n),
        })
        .collect();
    for t in 0..n {
        let mut inner = Scope {
            slots: constant_slots(rec, body).into_iter().collect(),
            parent: Some(scope),
        };
        for (decl, slot) in body.inputs.iter().zip(slots.iter().flatten()) {
            let value = match &slot.seq {
                Some(s) => s.items[t].share(&ctx)?,
                None => slot.share(&ctx)?,
            };
            inner.slots.insert(decl.name.clone(), value);
        }
        record_graph_planned(rec, body, &order, &mut inner, &HashMap::new(), &planned)?;
        keep_uploaded_constants(rec, body, &inner);
        let values =
            super::control::take_outputs(rec, &mut inner, body, "SequenceMap body output")?;
        for (q, (value, out)) in values.into_iter().zip(&mut outputs).enumerate() {
            if let Some(what) = value.non_tensor() {
                return Err(Error::invalid(
                    OP,
                    "body",
                    format!(
                        "body output '{}' is {what}; a SequenceMap body gives tensors",
                        body.outputs[q].name.escape_debug()
                    ),
                ));
            }
            same_dtype(
                OP,
                &mut out.dtype,
                value.dtype_shape().0,
                &body.outputs[q].name,
            )?;
            out.items.push(value);
        }
        // This application's inputs are read no more.
        let inputs: HashSet<&str> = body.inputs.iter().map(|i| i.name.as_str()).collect();
        for (name, slot) in inner.slots.drain() {
            if let (true, Some(t)) = (inputs.contains(name.as_str()), slot.gpu.into_inner()) {
                rec.release(t);
            }
        }
        rec.end_of_iteration()?;
    }
    Ok(outputs.into_iter().map(Slot::sequence).collect())
}

// The registry's entries for [`OPS`]: the executor records them itself ([`record`]).
planned_op!(SEQUENCE_EMPTY, "SequenceEmpty", 0..=0, 1..=1, &["dtype"]);
planned_op!(
    SEQUENCE_CONSTRUCT,
    "SequenceConstruct",
    1..=usize::MAX,
    1..=1,
    &[]
);
planned_op!(SEQUENCE_INSERT, "SequenceInsert", 2..=3, 1..=1, &[]);
planned_op!(SEQUENCE_AT, "SequenceAt", 2..=2, 1..=1, &[]);
planned_op!(SEQUENCE_ERASE, "SequenceErase", 1..=2, 1..=1, &[]);
planned_op!(SEQUENCE_LENGTH, "SequenceLength", 1..=1, 1..=1, &[]);
planned_op!(
    SPLIT_TO_SEQUENCE,
    "SplitToSequence",
    1..=2,
    1..=1,
    &["axis", "keepdims"]
);
planned_op!(
    CONCAT_FROM_SEQUENCE,
    "ConcatFromSequence",
    1..=1,
    1..=1,
    &["axis", "new_axis"]
);
planned_op!(
    SEQUENCE_MAP,
    "SequenceMap",
    1..=usize::MAX,
    1..=usize::MAX,
    &["body"]
);
planned_op!(OPTIONAL, "Optional", 0..=1, 1..=1, &["type"]);
planned_op!(
    OPTIONAL_HAS_ELEMENT,
    "OptionalHasElement",
    0..=1,
    1..=1,
    &[]
);
planned_op!(
    OPTIONAL_GET_ELEMENT,
    "OptionalGetElement",
    1..=1,
    1..=1,
    &[]
);

/// The registry's entries for [`OPS`], in that order.
pub(crate) static DEFS: [&OpDef; 12] = [
    &SEQUENCE_EMPTY,
    &SEQUENCE_CONSTRUCT,
    &SEQUENCE_INSERT,
    &SEQUENCE_AT,
    &SEQUENCE_ERASE,
    &SEQUENCE_LENGTH,
    &SPLIT_TO_SEQUENCE,
    &CONCAT_FROM_SEQUENCE,
    &SEQUENCE_MAP,
    &OPTIONAL,
    &OPTIONAL_HAS_ELEMENT,
    &OPTIONAL_GET_ELEMENT,
];
