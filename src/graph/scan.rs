//! ONNX Scan-16, driven from the host with GPU-resident state.
//!
//! The body is planned once per Scan call: it is recorded ("captured") twice, once per parity
//! of the iteration index, against fixed buffers: the states ping-pong between two buffers
//! (parity p reads states from `P[p]` and its state-producing kernels write straight into
//! `P[1 - p]`, no copies), scan-input elements land in fixed buffers, and every buffer is
//! allocated before the first iteration. The loop then replays the captured commands once per
//! iteration into the same command buffer, so no host round-trip happens between iterations.
//! Scan-input elements are read at their offset along the scan axis (a buffer copy, or a
//! strided gather for other axes and sub-word element sizes); scan-output elements are copied
//! to their row of an accumulator, which one gather after the loop turns into the output layout
//! when the output axis is not 0 (for axis 0 and whole-word elements the accumulator is the
//! output). Spec-decisions.md 13: a sequence length of 0 gives the initial states back and
//! empty scan outputs shaped from the body's declared outputs.

use std::collections::{HashMap, HashSet};

use super::exec::{record_graph, NodeArgs, Scope, Slot};
use super::registry::OpDef;
use super::Graph;
use crate::host::c_strides;
use crate::kernels::gather::{GatherDim, GatherPlan};
use crate::recorder::Step;
use crate::storage::padded_size;
use crate::{Error, Recorder, Result, Tensor};

const OP: &str = "Scan";

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

/// Normalized axes (`[-r, r - 1]`) and 0/1 directions of one attribute pair.
fn axes_and_directions(
    args: &NodeArgs,
    (axes_name, dirs_name): (&str, &str),
    ranks: &[usize],
) -> Result<(Vec<usize>, Vec<bool>)> {
    let n = ranks.len();
    let axes = args.ints(axes_name)?.unwrap_or_else(|| vec![0; n]);
    let dirs = args.ints(dirs_name)?.unwrap_or_else(|| vec![0; n]);
    for (name, len) in [(axes_name, axes.len()), (dirs_name, dirs.len())] {
        if len != n {
            return Err(invalid(
                name,
                format!("{name} has {len} values but there are {n} of them to describe"),
            ));
        }
    }
    let axes = axes
        .iter()
        .zip(ranks)
        .enumerate()
        .map(|(i, (&a, &r))| {
            let r = r as i64;
            if (-r..r).contains(&a) {
                Ok((if a < 0 { a + r } else { a }) as usize)
            } else {
                Err(invalid(
                    axes_name,
                    format!(
                        "{axes_name}[{i}] is {a}, outside [{}, {}] for rank {r}",
                        -r,
                        r - 1
                    ),
                ))
            }
        })
        .collect::<Result<_>>()?;
    let dirs = dirs
        .iter()
        .enumerate()
        .map(|(i, &d)| match d {
            0 => Ok(false),
            1 => Ok(true),
            d => Err(invalid(
                dirs_name,
                format!("{dirs_name}[{i}] is {d}; directions are 0 or 1"),
            )),
        })
        .collect::<Result<_>>()?;
    Ok((axes, dirs))
}

/// The gather reading element `t` of `x` along `axis` (elements of `x` without that axis).
fn element_plan(shape: &[usize], axis: usize, t: usize) -> GatherPlan {
    let strides = c_strides(shape);
    let dims: Vec<GatherDim> = (0..shape.len())
        .filter(|&k| k != axis)
        .map(|k| GatherDim {
            len: shape[k] as u64,
            step: strides[k] as i64,
        })
        .collect();
    GatherPlan::from_dims(t as u64 * strides[axis], &dims)
}

fn run(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let body: &Graph = args.graph("body")?;
    let m = args.int("num_scan_inputs")?.ok_or_else(|| {
        invalid(
            "num_scan_inputs",
            "the attribute 'num_scan_inputs' is required".into(),
        )
    })?;
    let given = args.len();
    if m < 1 || m as usize > given {
        return Err(invalid(
            "num_scan_inputs",
            format!("num_scan_inputs is {m} but {given} inputs are given; it must be 1 to {given}"),
        ));
    }
    let m = m as usize;
    let n = given - m;
    if body.inputs.len() != n + m {
        return Err(invalid(
            "body",
            format!(
                "the body has {} inputs but the Scan has {n} states and {m} scan inputs",
                body.inputs.len()
            ),
        ));
    }
    if body.outputs.len() < n {
        return Err(invalid(
            "body",
            format!(
                "the body has {} outputs but the Scan has {n} states",
                body.outputs.len()
            ),
        ));
    }
    let k = body.outputs.len() - n;
    if args.node.outputs.len() != n + k {
        return Err(invalid(
            "body",
            format!(
                "the node names {} outputs but the body gives {n} states and {k} scan outputs",
                args.node.outputs.len()
            ),
        ));
    }
    let inputs: Vec<Tensor> = (0..given)
        .map(|i| args.tensor(i, "initial_state_and_scan_inputs"))
        .collect::<Result<_>>()?;
    let (states, scans) = inputs.split_at(n);
    if let Some((j, _)) = scans.iter().enumerate().find(|(_, s)| s.rank() == 0) {
        return Err(invalid(
            "scan_inputs",
            format!("scan input {j} has rank 0; scan inputs need a sequence axis"),
        ));
    }
    let (in_axes, in_rev) = axes_and_directions(
        args,
        ("scan_input_axes", "scan_input_directions"),
        &scans.iter().map(Tensor::rank).collect::<Vec<_>>(),
    )?;
    let lengths: Vec<usize> = scans
        .iter()
        .zip(&in_axes)
        .map(|(s, &a)| s.shape()[a])
        .collect();
    if let Some(j) = lengths.iter().position(|&l| l != lengths[0]) {
        return Err(invalid(
            "scan_inputs",
            format!("scan input {j} has {} elements along its scan axis but scan input 0 has {}; all must be equal", lengths[j], lengths[0]),
        ));
    }
    let seq = lengths[0];
    let elem_shapes: Vec<Vec<usize>> = scans
        .iter()
        .zip(&in_axes)
        .map(|(s, &a)| {
            s.shape()
                .iter()
                .enumerate()
                .filter(|&(d, _)| d != a)
                .map(|(_, &x)| x)
                .collect()
        })
        .collect();
    // Body inputs: declared dtype/shape, when given, must match what the Scan feeds.
    for (i, decl) in body.inputs.iter().enumerate() {
        let (dtype, shape) = if i < n {
            (states[i].dtype(), states[i].shape())
        } else {
            (scans[i - n].dtype(), &elem_shapes[i - n][..])
        };
        decl.check("body input", dtype, shape)?;
    }
    let order = body.schedule(&args.scope().names())?;

    if seq == 0 {
        return empty_sequence(rec, args, body, states, n, k);
    }

    // Buffers that live through the whole loop.
    let ctx = rec.context().clone();
    let ping_pong: [Vec<Tensor>; 2] = [0, 1]
        .map(|_| {
            states
                .iter()
                .map(|s| Tensor::uninit(&ctx, s.dtype(), s.shape()))
                .collect::<Result<Vec<_>>>()
        })
        .into_iter()
        .collect::<Result<Vec<_>>>()?
        .try_into()
        .expect("two parities");
    for (s, p) in states.iter().zip(&ping_pong[0]) {
        rec.copy(s.storage(), 0, p.storage(), 0, padded_size(s.byte_len()))?;
    }
    let elements: Vec<Tensor> = scans
        .iter()
        .zip(&elem_shapes)
        .map(|(s, shape)| Tensor::uninit(&ctx, s.dtype(), shape))
        .collect::<Result<_>>()?;

    // Plan the body once per parity.
    let mut instances: Vec<(Vec<Step>, Vec<Tensor>)> = Vec::with_capacity(2);
    for p in 0..2 {
        let (reads, writes) = (&ping_pong[p], &ping_pong[1 - p]);
        let mut scope = Scope {
            slots: HashMap::new(),
            parent: Some(args.scope()),
        };
        for (i, decl) in body.inputs.iter().enumerate() {
            let t = if i < n {
                reads[i].clone()
            } else {
                elements[i - n].clone()
            };
            scope.slots.insert(decl.name.clone(), Slot::gpu(t));
        }
        for (name, value) in &body.constants {
            scope.slots.insert(name.clone(), Slot::host(value.clone()));
        }
        // State outputs produced by a body node are written straight into the other buffer.
        let produced: HashSet<&str> = body
            .nodes
            .iter()
            .flat_map(|nd| nd.outputs.iter().map(String::as_str))
            .collect();
        let mut placements = HashMap::new();
        for (i, o) in body.outputs[..n].iter().enumerate() {
            if produced.contains(o.name.as_str()) && !placements.contains_key(&o.name) {
                placements.insert(o.name.clone(), writes[i].clone());
            }
        }
        let (scan_outputs, steps) = rec.capture(|rec| {
            record_graph(rec, body, &order, &mut scope, &placements)?;
            for (i, o) in body.outputs[..n].iter().enumerate() {
                let v = scope.get(&o.name).expect("scheduled").tensor(&ctx)?;
                if v.dtype() != states[i].dtype() || v.shape() != states[i].shape() {
                    return Err(invalid(
                        "body",
                        format!(
                            "body output '{}' (state {i}) is {} {:?} but the state is {} {:?}; states must keep their shape across iterations",
                            o.name, v.dtype(), v.shape(), states[i].dtype(), states[i].shape()
                        ),
                    ));
                }
                o.check("body output", v.dtype(), v.shape())?;
                // Not produced in place (a passthrough, a constant, an outer value, a repeat).
                if !std::sync::Arc::ptr_eq(v.storage(), writes[i].storage()) {
                    rec.copy(v.storage(), 0, writes[i].storage(), 0, padded_size(v.byte_len()))?;
                }
            }
            body.outputs[n..]
                .iter()
                .map(|o| {
                    let v = scope.get(&o.name).expect("scheduled").tensor(&ctx)?;
                    o.check("body output", v.dtype(), v.shape())?;
                    Ok(v)
                })
                .collect::<Result<Vec<_>>>()
        })?;
        instances.push((steps, scan_outputs));
    }
    for (a, b) in instances[0].1.iter().zip(&instances[1].1) {
        if a.dtype() != b.dtype() || a.shape() != b.shape() {
            return Err(invalid(
                "body",
                format!(
                    "a scan output element changes from {} {:?} to {} {:?}",
                    a.dtype(),
                    a.shape(),
                    b.dtype(),
                    b.shape()
                ),
            ));
        }
    }
    let out_elems: Vec<(crate::DType, Vec<usize>)> = instances[0]
        .1
        .iter()
        .map(|t| (t.dtype(), t.shape().to_vec()))
        .collect();
    let (out_axes, out_rev) = axes_and_directions(
        args,
        ("scan_output_axes", "scan_output_directions"),
        &out_elems
            .iter()
            .map(|(_, s)| s.len() + 1)
            .collect::<Vec<_>>(),
    )?;
    // Accumulators: one row per iteration, rows a whole number of words apart.
    let rows: Vec<u64> = out_elems
        .iter()
        .map(|(d, s)| padded_size((s.iter().product::<usize>() * d.size()) as u64))
        .collect();
    let accumulators: Vec<Tensor> = out_elems
        .iter()
        .zip(&rows)
        .map(|((d, _), &row)| {
            let elems = row as usize / d.size();
            Tensor::uninit(&ctx, *d, &[seq, elems])
        })
        .collect::<Result<_>>()?;

    // The loop: no host wait anywhere in it.
    let elem_bytes: Vec<u64> = scans
        .iter()
        .zip(&elem_shapes)
        .map(|(s, e)| (e.iter().product::<usize>() * s.dtype().size()) as u64)
        .collect();
    for t in 0..seq {
        for j in 0..m {
            let tt = if in_rev[j] { seq - 1 - t } else { t };
            if in_axes[j] == 0 && elem_bytes[j].is_multiple_of(4) {
                rec.copy(
                    scans[j].storage(),
                    tt as u64 * elem_bytes[j],
                    elements[j].storage(),
                    0,
                    elem_bytes[j],
                )?;
            } else {
                rec.gather_into(
                    OP,
                    &scans[j],
                    &element_plan(scans[j].shape(), in_axes[j], tt),
                    &elements[j],
                )?;
            }
        }
        let (steps, outs) = &instances[t % 2];
        rec.replay(steps)?;
        for (q, out) in outs.iter().enumerate() {
            let tt = if out_rev[q] { seq - 1 - t } else { t };
            rec.copy(
                out.storage(),
                0,
                accumulators[q].storage(),
                tt as u64 * rows[q],
                rows[q],
            )?;
        }
    }

    let mut results = Vec::with_capacity(n + k);
    for (i, s) in ping_pong[seq % 2].iter().enumerate() {
        results.push(args.out(i).view(rec, s.clone())?);
    }
    for (q, acc) in accumulators.into_iter().enumerate() {
        let (dtype, shape) = &out_elems[q];
        let axis = out_axes[q];
        let mut out_shape = shape.clone();
        out_shape.insert(axis, seq);
        let numel: usize = shape.iter().product();
        let row_elems = (rows[q] as usize / dtype.size()) as i64;
        if axis == 0 && row_elems as usize == numel {
            results.push(args.out(n + q).view(rec, acc.reshaped(&out_shape)?)?);
            continue;
        }
        // Output coordinates: the element's axes with the sequence axis inserted at `axis`.
        let strides = c_strides(shape);
        let mut dims: Vec<GatherDim> = shape
            .iter()
            .zip(&strides)
            .map(|(&d, &s)| GatherDim {
                len: d as u64,
                step: s as i64,
            })
            .collect();
        dims.insert(
            axis,
            GatherDim {
                len: seq as u64,
                step: row_elems,
            },
        );
        let out = args.out(n + q).tensor(rec, *dtype, &out_shape)?;
        rec.gather_into(OP, &acc, &GatherPlan::from_dims(0, &dims), &out)?;
        results.push(out);
    }
    Ok(results)
}

/// Decision 13: no iteration; states come back as given, scan outputs are empty along their
/// scan axis with element shapes from the body's declared outputs.
fn empty_sequence(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    states: &[Tensor],
    n: usize,
    k: usize,
) -> Result<Vec<Tensor>> {
    let mut results = Vec::with_capacity(n + k);
    for (i, s) in states.iter().enumerate() {
        results.push(args.out(i).view(rec, s.clone())?);
    }
    let declared: Vec<(crate::DType, Vec<usize>)> = body.outputs[n..]
        .iter()
        .map(|o| match (o.dtype, &o.shape) {
            (Some(d), Some(s)) if s.iter().all(Option::is_some) => Ok((d, s.iter().map(|d| d.unwrap()).collect())),
            _ => Err(invalid(
                "body",
                format!("the sequence is empty, so scan output '{}' takes its element dtype and shape from the body's declaration, which does not give them", o.name),
            )),
        })
        .collect::<Result<_>>()?;
    let (axes, _) = axes_and_directions(
        args,
        ("scan_output_axes", "scan_output_directions"),
        &declared
            .iter()
            .map(|(_, s)| s.len() + 1)
            .collect::<Vec<_>>(),
    )?;
    for (q, (dtype, mut shape)) in declared.into_iter().enumerate() {
        shape.insert(axes[q], 0);
        results.push(args.out(n + q).tensor(rec, dtype, &shape)?);
    }
    Ok(results)
}

pub(crate) static GRAPH_OP: OpDef = OpDef {
    name: OP,
    inputs: 1..=usize::MAX,
    outputs: 1..=usize::MAX,
    attrs: &[
        "body",
        "num_scan_inputs",
        "scan_input_axes",
        "scan_input_directions",
        "scan_output_axes",
        "scan_output_directions",
    ],
    run,
};
