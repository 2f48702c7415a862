//! ONNX Scan-16, driven from the host with GPU-resident state: a [`ScanPlan`] (plain data,
//! tested without a GPU) says what every iteration reads and where every output lands; the
//! recording below captures the body and replays it.
//!
//! The body is planned once per Scan call: it is recorded ("captured") twice, once per parity
//! of the iteration index, against fixed buffers: the states ping-pong between two buffers
//! (parity p reads states from `P[p]` and its state-producing kernels write straight into
//! `P[1 - p]`, no copies; a state a scatter updates in place has one buffer, see
//! [`updated_in_place`]), scan-input elements land in fixed buffers, and every buffer is
//! allocated before the first iteration. The loop then replays the captured commands once per
//! iteration into the same command buffer, so no host round-trip happens between iterations.
//! Scan-input elements are read at their offset along the scan axis and scan-output elements
//! written to their row of an accumulator, which one gather after the loop turns into the
//! output layout when the output axis is not 0 or rows are padded (for axis 0 and unpadded
//! whole-word elements the accumulator is the output). Where the device can, the body binds
//! them in place (see [`place_elements`]); otherwise each iteration copies them (a buffer
//! copy, a dispatch at a GPU counter's position, or a strided gather for other axes and
//! sub-word element sizes). Decision 13 of `docs/spec-decisions.md`: a sequence length of 0 gives the initial states back and
//! empty scan outputs shaped from the body's declared outputs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::exec::{
    constant_slots, keep_uploaded_constants, record_graph, NodeArgs, Owned, Scope, Slot,
};
use super::registry::{self, OpDef};
use super::{Graph, ValueInfo};
use crate::host::c_strides;
use crate::kernels::block_remap::{CopyDim, CopyPiece};
use crate::kernels::gather::{GatherDim, GatherPlan};
use crate::kernels::scan_step::{grouped_copies_limit, IterationCopy};
use crate::recorder::{step_buffers, uses, writes, LoopFn, Slide, Step};
use crate::storage::{alloc_size, padded_size, Storage};
use crate::{DType, Error, Recorder, Result, Tensor};

const OP: &str = "Scan";

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

/// A Scan node's attributes, as given (absent lists are `None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ScanAttrs {
    pub num_scan_inputs: Option<i64>,
    pub scan_input_axes: Option<Vec<i64>>,
    pub scan_input_directions: Option<Vec<i64>>,
    pub scan_output_axes: Option<Vec<i64>>,
    pub scan_output_directions: Option<Vec<i64>>,
}

impl ScanAttrs {
    fn from_node(args: &NodeArgs) -> Result<ScanAttrs> {
        Ok(ScanAttrs {
            num_scan_inputs: args.int("num_scan_inputs")?,
            scan_input_axes: args.ints("scan_input_axes")?,
            scan_input_directions: args.ints("scan_input_directions")?,
            scan_output_axes: args.ints("scan_output_axes")?,
            scan_output_directions: args.ints("scan_output_directions")?,
        })
    }
}

/// How iteration `t` reads one scan input's element.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ElementRead {
    /// A buffer copy of `bytes` bytes from byte `offset` (axis 0, whole words).
    Copy { offset: u64, bytes: u64 },
    /// A strided gather (other axes, or elements that are not whole words).
    Gather(GatherPlan),
}

/// Where one scan output's elements go: one row of an accumulator per iteration (rows a whole
/// number of words apart), turned into the output's layout after the loop.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OutputPlan {
    pub dtype: DType,
    /// The body's element shape, and the output's shape (the sequence axis inserted).
    pub element_shape: Vec<usize>,
    pub output_shape: Vec<usize>,
    pub reverse: bool,
    /// The output's sequence axis.
    pub axis: usize,
    /// Bytes of one element in whole words (what each iteration writes), and elements per
    /// accumulator row (the element, or more where rows are padded to the device's
    /// alignment, see [`OutputPlan::with_row_bytes`]).
    pub row_bytes: u64,
    pub row_elems: usize,
    /// `None`: the accumulator is the output (axis 0, rows without padding); else the gather
    /// from the accumulator into the output's layout.
    pub layout: Option<GatherPlan>,
}

impl OutputPlan {
    fn new(dtype: DType, shape: &[usize], axis: usize, reverse: bool, seq: usize) -> OutputPlan {
        let numel: usize = shape.iter().product();
        // Empty elements have empty rows (a padding word would not hold a whole element of 8
        // bytes, and there is nothing to copy).
        let row_bytes = match numel {
            0 => 0,
            n => padded_size((n * dtype.size()) as u64),
        };
        let mut output_shape = shape.to_vec();
        output_shape.insert(axis, seq);
        OutputPlan {
            dtype,
            element_shape: shape.to_vec(),
            output_shape,
            reverse,
            axis,
            row_bytes,
            row_elems: 0,
            layout: None,
        }
        .with_row_bytes(row_bytes)
    }

    /// The plan with accumulator rows `bytes` apart (at least `row_bytes`, whole elements).
    pub fn with_row_bytes(self, bytes: u64) -> OutputPlan {
        let row_elems = bytes as usize / self.dtype.size();
        let numel: usize = self.element_shape.iter().product();
        let layout = (self.axis != 0 || row_elems != numel).then(|| {
            // Output coordinates: the element's axes with the sequence axis inserted.
            let strides = c_strides(&self.element_shape);
            let mut dims: Vec<GatherDim> = self
                .element_shape
                .iter()
                .zip(&strides)
                .map(|(&d, &s)| GatherDim {
                    len: d as u64,
                    step: s as i64,
                })
                .collect();
            dims.insert(
                self.axis,
                GatherDim {
                    len: self.output_shape[self.axis] as u64,
                    step: row_elems as i64,
                },
            );
            GatherPlan::from_dims(0, &dims)
        });
        OutputPlan {
            row_elems,
            layout,
            ..self
        }
    }

    /// Bytes from one accumulator row to the next.
    pub fn row_stride(&self) -> u64 {
        (self.row_elems * self.dtype.size()) as u64
    }
}

/// Everything about a Scan call that follows from its attributes, its body and the dtypes and
/// shapes of its inputs: counts, axes, directions, the sequence length, the element each
/// iteration reads. No GPU and no tensor values are needed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScanPlan {
    /// States, scan inputs and scan outputs.
    pub n: usize,
    pub m: usize,
    pub k: usize,
    pub seq: usize,
    pub input_shapes: Vec<Vec<usize>>,
    pub input_dtypes: Vec<DType>,
    pub in_axes: Vec<usize>,
    pub in_reverse: Vec<bool>,
    /// The element shape of each scan input (its shape without the scan axis).
    pub element_shapes: Vec<Vec<usize>>,
    attrs: ScanAttrs,
}

/// Normalized axes (`[-r, r - 1]`) and 0/1 directions of one attribute pair.
fn axes_and_directions(
    (axes_name, axes): (&str, Option<&[i64]>),
    (dirs_name, dirs): (&str, Option<&[i64]>),
    ranks: &[usize],
) -> Result<(Vec<usize>, Vec<bool>)> {
    let n = ranks.len();
    let zeros = vec![0; n];
    let axes = axes.unwrap_or(&zeros);
    let dirs = dirs.unwrap_or(&zeros);
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

impl ScanPlan {
    /// Validates a Scan of `body` over inputs of these dtypes and shapes (states first) with
    /// `node_outputs` outputs named.
    pub fn new(
        attrs: &ScanAttrs,
        body: &Graph,
        inputs: &[(DType, Vec<usize>)],
        node_outputs: usize,
    ) -> Result<ScanPlan> {
        let m = attrs.num_scan_inputs.ok_or_else(|| {
            invalid(
                "num_scan_inputs",
                "the attribute 'num_scan_inputs' is required".into(),
            )
        })?;
        let given = inputs.len();
        if m < 1 || m as usize > given {
            return Err(invalid(
                "num_scan_inputs",
                format!(
                    "num_scan_inputs is {m} but {given} inputs are given; it must be 1 to {given}"
                ),
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
        if node_outputs != n + k {
            return Err(invalid(
                "body",
                format!(
                    "the node names {node_outputs} outputs but the body gives {n} states and {k} scan outputs"
                ),
            ));
        }
        let scans = &inputs[n..];
        if let Some((j, _)) = scans.iter().enumerate().find(|(_, s)| s.1.is_empty()) {
            return Err(invalid(
                "scan_inputs",
                format!("scan input {j} has rank 0; scan inputs need a sequence axis"),
            ));
        }
        let (in_axes, in_reverse) = axes_and_directions(
            ("scan_input_axes", attrs.scan_input_axes.as_deref()),
            (
                "scan_input_directions",
                attrs.scan_input_directions.as_deref(),
            ),
            &scans.iter().map(|s| s.1.len()).collect::<Vec<_>>(),
        )?;
        let lengths: Vec<usize> = scans.iter().zip(&in_axes).map(|(s, &a)| s.1[a]).collect();
        if let Some(j) = lengths.iter().position(|&l| l != lengths[0]) {
            return Err(invalid(
                "scan_inputs",
                format!("scan input {j} has {} elements along its scan axis but scan input 0 has {}; all must be equal", lengths[j], lengths[0]),
            ));
        }
        let element_shapes: Vec<Vec<usize>> = scans
            .iter()
            .zip(&in_axes)
            .map(|(s, &a)| {
                s.1.iter()
                    .enumerate()
                    .filter(|&(d, _)| d != a)
                    .map(|(_, &x)| x)
                    .collect()
            })
            .collect();
        // Body inputs: declared dtype/shape, when given, must match what the Scan feeds.
        for (i, decl) in body.inputs.iter().enumerate() {
            let (dtype, shape) = if i < n {
                (inputs[i].0, &inputs[i].1[..])
            } else {
                (inputs[i].0, &element_shapes[i - n][..])
            };
            decl.check("body input", dtype, shape)?;
        }
        Ok(ScanPlan {
            n,
            m,
            k,
            seq: lengths[0],
            input_shapes: inputs.iter().map(|i| i.1.clone()).collect(),
            input_dtypes: inputs.iter().map(|i| i.0).collect(),
            in_axes,
            in_reverse,
            element_shapes,
            attrs: attrs.clone(),
        })
    }

    /// Bytes of one element of scan input `j`.
    pub fn element_bytes(&self, j: usize) -> u64 {
        let numel: usize = self.element_shapes[j].iter().product();
        (numel * self.input_dtypes[self.n + j].size()) as u64
    }

    /// The position along the sequence that iteration `t` reads or writes (`reverse`: from
    /// the end).
    pub fn position(&self, t: usize, reverse: bool) -> usize {
        if reverse {
            self.seq - 1 - t
        } else {
            t
        }
    }

    /// How iteration `t` reads the element of scan input `j`.
    pub fn read(&self, j: usize, t: usize) -> ElementRead {
        let tt = self.position(t, self.in_reverse[j]);
        let bytes = self.element_bytes(j);
        if self.in_axes[j] == 0 && bytes.is_multiple_of(4) {
            ElementRead::Copy {
                offset: tt as u64 * bytes,
                bytes,
            }
        } else {
            ElementRead::Gather(element_plan(
                &self.input_shapes[self.n + j],
                self.in_axes[j],
                tt,
            ))
        }
    }

    /// The layout of every scan output, given the dtype and shape of its elements (what the
    /// body produces, or with an empty sequence what it declares).
    pub fn outputs(&self, elements: &[(DType, Vec<usize>)]) -> Result<Vec<OutputPlan>> {
        let (axes, reverse) = axes_and_directions(
            ("scan_output_axes", self.attrs.scan_output_axes.as_deref()),
            (
                "scan_output_directions",
                self.attrs.scan_output_directions.as_deref(),
            ),
            &elements
                .iter()
                .map(|(_, s)| s.len() + 1)
                .collect::<Vec<_>>(),
        )?;
        Ok(elements
            .iter()
            .zip(axes.into_iter().zip(reverse))
            .map(|((dtype, shape), (axis, reverse))| {
                OutputPlan::new(*dtype, shape, axis, reverse, self.seq)
            })
            .collect())
    }
}

fn run(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let body: &Graph = args.graph("body")?;
    let attrs = ScanAttrs::from_node(args)?;
    let inputs: Vec<Tensor> = (0..args.len())
        .map(|i| args.tensor(i, "initial_state_and_scan_inputs"))
        .collect::<Result<_>>()?;
    let described: Vec<(DType, Vec<usize>)> = inputs
        .iter()
        .map(|t| (t.dtype(), t.shape().to_vec()))
        .collect();
    let plan = ScanPlan::new(&attrs, body, &described, args.node.outputs.len())?;
    let order = body.schedule(&|n: &str| args.scope().get(n).is_some())?;
    let (states, scans) = inputs.split_at(plan.n);
    if plan.seq == 0 {
        return empty_sequence(rec, args, body, &plan, states);
    }
    if let Some(outputs) =
        super::recurrence::linear_attention(rec, args, body, &attrs, &plan, &inputs)?
    {
        return Ok(outputs);
    }
    // Nodes that read no state run once, before the loop, on the whole scan inputs.
    if let Some(h) = super::hoist::hoist(rec, args, body, &attrs, &plan, &order, states, scans)? {
        let described: Vec<(DType, Vec<usize>)> = states
            .iter()
            .chain(&h.scans)
            .map(|t| (t.dtype(), t.shape().to_vec()))
            .collect();
        let plan = ScanPlan::new(&h.attrs, &h.body, &described, args.node.outputs.len())?;
        let order = h.body.schedule(&|n: &str| args.scope().get(n).is_some())?;
        let given = h.scans.len() - h.moved;
        let results = match record_loop(
            rec, args, &h.body, &order, &plan, states, &h.scans, h.before,
        ) {
            Ok(results) => results,
            Err(e) => {
                // Computed for this loop only (a Loop that then runs unrolled would otherwise
                // make them anew on every run of a session).
                for t in h.scans.into_iter().skip(given) {
                    rec.release(t);
                }
                return Err(e);
            }
        };
        // The moved values are the loop's own (computed for it before it), free once it is
        // encoded, as its other buffers are; not while captured for an enclosing body. One
        // that is a result (a moved value read as a scan output as it is) is held by it, and
        // the pool keeps only buffers nothing else holds.
        if !rec.capturing() {
            for t in h.scans.into_iter().skip(given) {
                rec.release(t);
            }
        }
        return Ok(results);
    }
    record_loop(rec, args, body, &order, &plan, states, scans, Vec::new())
}

/// The body's captured commands for one parity of the iteration index, and its scan-output
/// elements.
struct Instance {
    steps: Vec<Step>,
    scan_outputs: Vec<Tensor>,
    /// States kept in one buffer (`updated`) that the body did not update where they lie
    /// after all: their values are copied into it at the iteration's end.
    missed: Vec<usize>,
}

/// Records the body once per parity against fixed buffers: states ping-pong between `reads`
/// and `writes`, scan-input elements are read from `elements`. A state `updated` in place
/// (see [`updated_in_place`]) has one buffer, both its read and its write, that the body's
/// scatter may write into (the loop owns it).
#[allow(clippy::too_many_arguments)]
fn capture_body(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    order: &[usize],
    states: &[Tensor],
    (reads, writes): (&[Tensor], &[Tensor]),
    updated: &[bool],
    elements: &[Tensor],
) -> Result<Instance> {
    let ctx = rec.context().clone();
    let n = states.len();
    let mut scope = Scope {
        slots: Default::default(),
        parent: Some(args.scope()),
    };
    for (i, decl) in body.inputs.iter().enumerate() {
        let slot = if i < n {
            // The handles the loop holds, counted before the slot's own (those that read
            // nothing more are counted where the scatter is recorded).
            let held = Arc::strong_count(reads[i].storage()) - rec.idle_handles(reads[i].storage());
            let mut slot = Slot::gpu(reads[i].clone());
            if updated[i] {
                slot.owned_input = Some(Owned::LoopState(held));
            }
            slot
        } else {
            Slot::gpu(elements[i - n].clone())
        };
        scope.slots.insert(decl.name.clone(), slot);
    }
    scope.slots.extend(constant_slots(rec, body));
    // State outputs produced by a body node are written straight into the other buffer.
    let produced: HashSet<&str> = body
        .nodes
        .iter()
        .flat_map(|nd| nd.outputs.iter().map(String::as_str))
        .collect();
    let mut placements = HashMap::new();
    for (i, o) in body.outputs[..n].iter().enumerate() {
        let unchanged = std::sync::Arc::ptr_eq(reads[i].storage(), writes[i].storage());
        if produced.contains(o.name.as_str()) && !placements.contains_key(&o.name) && !unchanged {
            placements.insert(o.name.clone(), writes[i].clone());
        }
    }
    let mut missed = Vec::new();
    let (scan_outputs, steps) = rec.capture(|rec| {
        record_graph(rec, body, order, &mut scope, &placements)?;
        // Constants this capture uploaded serve the next captures and runs.
        keep_uploaded_constants(rec, body, &scope);
        for (i, o) in body.outputs[..n].iter().enumerate() {
            let v = body_tensor(&scope, o, &ctx)?;
            if v.dtype() != states[i].dtype() || v.shape() != states[i].shape() {
                return Err(invalid(
                    "body",
                    format!(
                        "body output '{}' (state {i}) is {} {:?} but the state is {} {:?}; {}",
                        o.name,
                        v.dtype(),
                        v.shape(),
                        states[i].dtype(),
                        states[i].shape(),
                        crate::recorder::STATES_KEEP_SHAPE
                    ),
                ));
            }
            o.check("body output", v.dtype(), v.shape())?;
            // Not produced in place (a passthrough, a constant, an outer value, a repeat).
            if !std::sync::Arc::ptr_eq(v.storage(), writes[i].storage()) {
                if updated[i] {
                    missed.push(i);
                }
                rec.copy(
                    v.storage(),
                    0,
                    writes[i].storage(),
                    0,
                    padded_size(v.byte_len()),
                )?;
            }
        }
        body.outputs[n..]
            .iter()
            .map(|o| {
                let v = body_tensor(&scope, o, &ctx)?;
                o.check("body output", v.dtype(), v.shape())?;
                Ok(v)
            })
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(Instance {
        steps,
        scan_outputs,
        missed,
    })
}

/// Whether the body may update state `i` where it lies: its output `i` is the first output of
/// an op that may write over its data ([`registry::writes_over`], the scatters), its data is
/// body input `i`, which that node reads last (in `order`) and once and which is no body
/// output, and no other output is that value (a scan output of the whole state copies it
/// each step anyway, into its row; see [`StateRows`]). The loop then keeps the state in one buffer
/// instead of two (a KV cache updated at one position per step is not copied whole each
/// step); `capture_body` reports where the executor declined after all (a view of the old
/// state still held).
fn updated_in_place(body: &Graph, order: &[usize], i: usize) -> bool {
    let (Some(input), Some(output)) = (body.inputs.get(i), body.outputs.get(i)) else {
        return false;
    };
    let name = input.name.as_str();
    let Some(writer) = body
        .nodes
        .iter()
        .position(|nd| nd.outputs.first() == Some(&output.name))
    else {
        return false;
    };
    let node = &body.nodes[writer];
    let data = registry::writes_over(&node.op).and_then(|k| node.inputs.get(k));
    let last_reader = order
        .iter()
        .rev()
        .find(|&&k| body.nodes[k].reads().iter().any(|r| r == name));
    data.is_some_and(|d| d == name)
        && last_reader == Some(&writer)
        && node.reads().iter().filter(|r| *r == name).count() == 1
        && !body.outputs.iter().any(|o| o.name == name)
        && body
            .outputs
            .iter()
            .filter(|o| o.name == output.name)
            .count()
            == 1
}

/// Body output `o` as a tensor; a string tensor, a sequence or an empty optional is refused
/// (a Scan carries and stacks tensors).
fn body_tensor(scope: &Scope<'_>, o: &ValueInfo, ctx: &crate::Context) -> Result<Tensor> {
    let slot = scope.get(&o.name).expect("scheduled");
    if let Some(what) = slot.non_tensor() {
        return Err(invalid(
            "body",
            format!(
                "body output '{}' is {what}; a Scan carries and stacks tensors",
                o.name.escape_debug()
            ),
        ));
    }
    slot.tensor(ctx)
}

/// Whether body output `i` (a state) is body input `i` itself, directly or through Identity
/// nodes.
pub(crate) fn passes_through(body: &Graph, i: usize) -> bool {
    passes_through_from(body, i, i)
}

/// Whether body output `output` is body input `input` itself, directly or through Identity
/// nodes.
pub(crate) fn passes_through_from(body: &Graph, input: usize, output: usize) -> bool {
    let (Some(input), Some(output)) = (body.inputs.get(input), body.outputs.get(output)) else {
        return false;
    };
    let mut name = output.name.as_str();
    // Each hop goes one node back; a graph is acyclic, so this ends.
    for _ in 0..=body.nodes.len() {
        if name == input.name {
            return true;
        }
        match body
            .nodes
            .iter()
            .find(|nd| nd.outputs.iter().any(|o| o == name))
        {
            Some(nd) if nd.op == "Identity" && nd.inputs.len() == 1 => name = &nd.inputs[0],
            _ => return false,
        }
    }
    false
}

/// The loop: buffers allocated once, the body captured per parity, then every iteration
/// replayed with no host round-trip (submitted in chunks, see `Recorder::end_of_iteration`).
#[allow(clippy::too_many_arguments)]
fn record_loop(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    order: &[usize],
    plan: &ScanPlan,
    states: &[Tensor],
    scans: &[Tensor],
    hoisted: Vec<Step>,
) -> Result<Vec<Tensor>> {
    let (n, seq) = (plan.n, plan.seq);
    let ctx = rec.context().clone();
    // A state the body passes on unchanged is read where it is, by every iteration: no
    // buffers of its own, no copy per iteration (skl2onnx's pairwise distances carry one
    // operand through their Scan this way).
    // The loop's buffers come from earlier runs of a session where they fit (see
    // `Recorder::alloc_unused`) and go back to the recorder's pool after the loop.
    // A state the body updates in place (a scatter into it) keeps one buffer for both
    // parities.
    let mut updated: Vec<bool> = (0..n)
        .map(|i| ctx.scan_in_place() && updated_in_place(body, order, i))
        .collect();
    let elements: Vec<Tensor> = scans
        .iter()
        .zip(&plan.element_shapes)
        .map(|(s, shape)| rec.alloc_unused(s.dtype(), shape))
        .collect::<Result<_>>()?;
    // Parity p reads the states from ping_pong[p] and writes them to the other buffer. One
    // iteration needs parity 0 only (Scans of length 1 nested deeply would otherwise capture
    // their bodies 2^depth times).
    let parities = if seq > 1 { 2 } else { 1 };
    let (ping_pong, mut instances) = loop {
        let mut first = Vec::with_capacity(n);
        let mut second = Vec::with_capacity(n);
        for (i, s) in states.iter().enumerate() {
            // An initial state nothing reads after the loop is where the first iteration reads
            // it, and where the loop keeps the state (one of its buffers).
            let given = match passes_through(body, i) {
                true => None,
                false => args.dead_state(rec, i),
            };
            let (a, b) = match (passes_through(body, i), updated[i], given) {
                (true, _, _) => (s.clone(), s.clone()),
                (false, true, Some(t)) => (t.clone(), t),
                (false, true, None) => {
                    let t = rec.alloc_unused(s.dtype(), s.shape())?;
                    (t.clone(), t)
                }
                (false, false, Some(t)) => (t, rec.alloc_unused(s.dtype(), s.shape())?),
                (false, false, None) => (
                    rec.alloc_unused(s.dtype(), s.shape())?,
                    rec.alloc_unused(s.dtype(), s.shape())?,
                ),
            };
            first.push(a);
            second.push(b);
        }
        let ping_pong = [first, second];
        let captured: Result<Vec<Instance>> = [(0, 1), (1, 0)]
            .into_iter()
            .take(parities)
            .map(|(r, w)| {
                capture_body(
                    rec,
                    args,
                    body,
                    order,
                    states,
                    (&ping_pong[r], &ping_pong[w]),
                    &updated,
                    &elements,
                )
            })
            .collect();
        // A Loop whose carried value changes shape fails here, and runs unrolled: the
        // buffers taken for it are pooled, or a session's every run would create them anew.
        let instances = match captured {
            Ok(instances) => instances,
            Err(e) => {
                release_trial(rec, states, ping_pong, Vec::new());
                for t in elements {
                    rec.release(t);
                }
                return Err(e);
            }
        };
        // Where the executor declined to update a state in place, its value would be copied
        // into the one buffer at the iteration's end, after the body's scan outputs may have
        // read the old state there: captured again with two buffers for it.
        let missed: Vec<usize> = instances.iter().flat_map(|i| i.missed.clone()).collect();
        if missed.is_empty() {
            break (ping_pong, instances);
        }
        release_trial(rec, states, ping_pong, instances);
        for i in missed {
            updated[i] = false;
        }
    };
    for (a, b) in instances[0]
        .scan_outputs
        .iter()
        .zip(&instances[parities - 1].scan_outputs)
    {
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
    let mut outputs = plan.outputs(
        &instances[0]
            .scan_outputs
            .iter()
            .map(|t| (t.dtype(), t.shape().to_vec()))
            .collect::<Vec<_>>(),
    )?;
    // A scan output that is a scan input's element as it is (the body passes it on, or it
    // was computed before the loop, see `hoist.rs`) is that input laid out once after the
    // loop: nothing per iteration, no accumulator.
    let passed: Vec<Option<usize>> = (0..outputs.len())
        .map(|q| {
            (0..scans.len()).find(|&j| {
                instances
                    .iter()
                    .all(|i| Arc::ptr_eq(i.scan_outputs[q].storage(), elements[j].storage()))
            })
        })
        .collect();
    // A scan output of one step that is the buffer its state ends in (an RNN's Y, which is
    // its H): that state's value, no row written, no accumulator.
    let last_state: Vec<Option<Tensor>> = (0..outputs.len())
        .map(|q| {
            let value = &instances[0].scan_outputs[q];
            let is_state = (0..plan.n).any(|i| {
                !Arc::ptr_eq(ping_pong[0][i].storage(), ping_pong[1][i].storage())
                    && Arc::ptr_eq(value.storage(), ping_pong[1][i].storage())
            });
            (seq == 1 && passed[q].is_none() && is_state).then(|| value.clone())
        })
        .collect();
    // Laid out whole after the loop: no write per iteration.
    let whole: Vec<bool> = (0..outputs.len())
        .map(|q| passed[q].is_some() || last_state[q].is_some())
        .collect();
    // Accumulators: one row per iteration. Buffers no command has used, not the recorder's
    // pool: the body's values that died during its capture are in the pool, yet its captured
    // commands write them on every iteration (an accumulator on one of them was overwritten
    // by the body: the expanded LinearAttention node tests on emulated i64). The same holds
    // for anything allocated between the capture and the loop.
    let mut accumulators: Vec<Tensor> = outputs
        .iter()
        .zip(&whole)
        .map(|(o, &whole)| match whole {
            true => rec.alloc_unused(o.dtype, &[0]),
            false => rec.alloc_unused(o.dtype, &[seq, o.row_elems]),
        })
        .collect::<Result<_>>()?;

    let InPlace {
        reads: read_in_place,
        writes: written_in_place,
        rows,
        fill,
        held,
    } = place_elements(
        rec,
        plan,
        &mut instances,
        (&mut outputs, &mut accumulators),
        scans,
        &elements,
        &ping_pong,
        &whole,
    )?;
    let all_in_place = read_in_place.iter().all(|&r| r) && written_in_place.iter().all(|&w| w);
    // The initial states' copies run with the loop, after its work limit is checked (a state
    // held in rows starts in the first slot of its first half).
    let ((), mut before) = rec.capture(|rec| {
        for (i, (s, p)) in states.iter().zip(&ping_pong[0]).enumerate() {
            let to = match rows.iter().find(|r| r.state == i) {
                Some(r) => &r.halves[0],
                None => p,
            };
            // Read where it is (passed on unchanged, or kept where it was given).
            if Arc::ptr_eq(s.storage(), to.storage()) {
                continue;
            }
            rec.copy(s.storage(), 0, to.storage(), 0, padded_size(s.byte_len()))?;
        }
        Ok(())
    })?;
    // Hoisted nodes may compute scan inputs, which the fill then lays out.
    before.extend(hoisted);
    before.extend(fill);

    // The loop, run now or (inside an enclosing Scan's body) each time that body is replayed.
    // Its commands: the element reads, the body, the copies into the accumulators.
    let per_iteration = instances
        .iter()
        .map(|i| i.steps.iter().map(Step::commands).sum::<u64>())
        .max()
        .unwrap_or(0)
        + (plan.m + outputs.len() + 1) as u64;
    let before_commands: u64 = before.iter().map(Step::commands).sum();
    // Plus the counter's clear and the first elements' reads of a loop whose copies are
    // grouped (see `grouped_iterations`).
    let commands = per_iteration
        .saturating_mul(seq as u64)
        .saturating_add(before_commands)
        .saturating_add(plan.m as u64 + 1);
    // Every buffer the loop's commands may use: an enclosing Scan may read its own elements in
    // place where they are none of these.
    let mut loop_buffers = step_buffers(&before);
    for instance in &instances {
        loop_buffers.extend(step_buffers(&instance.steps));
    }
    loop_buffers.extend(
        states
            .iter()
            .chain(scans)
            .chain(&elements)
            .chain(&accumulators)
            .chain(ping_pong.iter().flatten())
            .chain(&held)
            .chain(rows.iter().flat_map(|r| &r.halves))
            .flat_map(|t| t.buffers().to_vec()),
    );
    let in_pass = if all_in_place {
        None
    } else {
        in_pass_iterations(
            rec,
            plan,
            &instances,
            &outputs,
            scans,
            &elements,
            &accumulators,
            (&read_in_place, &written_in_place),
        )?
    };
    // Handles the loop's buffers outlive the loop by (see the end).
    let mut loop_owned = elements.clone();
    // And the body's own values its scan outputs are (each replay writes them).
    loop_owned.extend(
        instances
            .iter()
            .flat_map(|i| i.scan_outputs.iter().cloned()),
    );
    let iterations = match in_pass {
        Some((iteration, counter)) => {
            loop_owned.push(counter);
            // The captured bodies hold the ping-pong buffers and the elements: dropped here,
            // as the other path's closure drops them after the loop, so that the buffers are
            // released whole at the end (else a session's later runs make them anew).
            drop((instances, elements));
            iteration
        }
        None => copied_iterations(
            plan,
            instances,
            &outputs,
            scans,
            elements,
            &accumulators,
            (read_in_place, written_in_place),
        ),
    };
    // Handles to the padded rows, to pool them once the loop is encoded (see the end).
    let held_rows = held.clone();
    let run: LoopFn = if before.is_empty() {
        iterations
    } else {
        Arc::new(move |rec: &mut Recorder| {
            // The padded rows live (and count against the memory limit) as long as the loop.
            let _ = &held;
            rec.replay(&before)?;
            iterations(rec)
        })
    };
    // Captured for an enclosing body, the loop's buffers serve each of its replays: the loop
    // holds them, and they are pooled once the enclosing loop is encoded and drops it (see the
    // end).
    let held_by_loop: Vec<Tensor> = match rec.capturing() {
        true => ping_pong
            .iter()
            .flatten()
            .chain(&loop_owned)
            .chain(&held_rows)
            .chain(&accumulators)
            .chain(rows.iter().flat_map(|r| &r.halves))
            .cloned()
            .collect(),
        false => Vec::new(),
    };
    let run: LoopFn = match held_by_loop.is_empty() {
        true => run,
        false => {
            let held = held_by_loop.clone();
            Arc::new(move |rec: &mut Recorder| {
                let _ = &held;
                run(rec)
            })
        }
    };
    rec.run_loop(OP, run, commands, loop_buffers)?;

    let mut results = Vec::with_capacity(n + plan.k);
    for (i, s) in ping_pong[seq % 2].iter().enumerate() {
        let out = args.out(i);
        results.push(match rows.iter().find(|r| r.state == i) {
            // The last iteration wrote slot seq / 2 of half seq % 2.
            Some(r) => {
                let out = out.tensor(rec, s.dtype(), s.shape())?;
                let at = (seq / 2) as u64 * r.stride;
                rec.copy(
                    r.halves[seq % 2].storage(),
                    at,
                    out.storage(),
                    0,
                    r.row_bytes,
                )?;
                out
            }
            None => out.view(rec, s.clone())?,
        });
    }
    for r in &rows {
        r.interleave(rec, seq as u64, &accumulators[r.output])?;
    }
    for (q, (acc, o)) in accumulators.into_iter().zip(&outputs).enumerate() {
        let out = args.out(n + q);
        if let Some(j) = passed[q] {
            results.push(input_as_output(rec, plan, j, &scans[j], o, out)?);
            // Its accumulator was laid out empty, for nothing.
            rec.release(acc);
            continue;
        }
        if let Some(value) = &last_state[q] {
            results.push(out.view(rec, value.reshaped(&o.output_shape)?)?);
            rec.release(acc);
            continue;
        }
        results.push(match &o.layout {
            None => out.view(rec, acc.reshaped(&o.output_shape)?)?,
            Some(g) => {
                let out = out.tensor(rec, o.dtype, &o.output_shape)?;
                rec.gather_into(OP, &acc, g, &out)?;
                loop_owned.push(acc);
                out
            }
        });
    }
    // The loop is encoded (not captured for an enclosing body, whose replays would use these
    // buffers again): its own buffers are free for what is recorded after it. Each is kept
    // only if nothing else holds it (not the state that is a result, nor a passed state).
    for t in held_by_loop {
        rec.release(t);
    }
    if !rec.capturing() {
        let halves = rows.into_iter().flat_map(|r| r.halves);
        for t in ping_pong
            .into_iter()
            .flatten()
            .chain(loop_owned)
            .chain(halves)
            .chain(held_rows)
        {
            rec.release(t);
        }
    }
    Ok(results)
}

/// Pools the buffers of a capture of the loop thrown away: its states' buffers (not the given
/// states', which a state passed on unchanged or one kept where it was given is in) and its
/// scan outputs' values, once the captured commands that bind them are dropped.
fn release_trial(
    rec: &mut Recorder,
    states: &[Tensor],
    ping_pong: [Vec<Tensor>; 2],
    instances: Vec<Instance>,
) {
    let scan_outputs: Vec<Tensor> = instances.into_iter().flat_map(|i| i.scan_outputs).collect();
    let [first, second] = ping_pong;
    for (i, (a, b)) in first.into_iter().zip(second).enumerate() {
        let given = |t: &Tensor| Arc::ptr_eq(t.storage(), states[i].storage());
        let one_buffer = Arc::ptr_eq(a.storage(), b.storage());
        if !given(&a) {
            rec.release(a);
        }
        if !one_buffer && !given(&b) {
            rec.release(b);
        }
    }
    for t in scan_outputs {
        rec.release(t);
    }
}

/// Scan output `o` when every iteration outputs its element of scan input `j` (`scan`) as
/// it is: the input itself where the axes and directions agree, else one gather of it.
fn input_as_output(
    rec: &mut Recorder,
    plan: &ScanPlan,
    j: usize,
    scan: &Tensor,
    o: &OutputPlan,
    out: crate::Out,
) -> Result<Tensor> {
    let (in_axis, reverse) = (plan.in_axes[j], plan.in_reverse[j] != o.reverse);
    if in_axis == o.axis && !reverse {
        return out.view(rec, scan.reshaped(&o.output_shape)?);
    }
    // Output coordinates: the element's axes with the sequence axis at the output's axis,
    // each stepping through the input by its stride there.
    let strides = c_strides(scan.shape());
    let mut dims: Vec<GatherDim> = (0..scan.rank())
        .filter(|&k| k != in_axis)
        .map(|k| GatherDim {
            len: scan.shape()[k] as u64,
            step: strides[k] as i64,
        })
        .collect();
    let step = strides[in_axis] as i64;
    dims.insert(
        o.axis,
        GatherDim {
            len: plan.seq as u64,
            step: if reverse { -step } else { step },
        },
    );
    let base = if reverse {
        plan.seq.saturating_sub(1) as u64 * strides[in_axis]
    } else {
        0
    };
    let out = out.tensor(rec, o.dtype, &o.output_shape)?;
    rec.gather_into(OP, scan, &GatherPlan::from_dims(base, &dims), &out)?;
    Ok(out)
}

/// Which elements a loop reads and writes in place (see [`place_elements`]).
struct InPlace {
    /// Per scan input, per scan output: bound in place (no copy per iteration).
    reads: Vec<bool>,
    writes: Vec<bool>,
    rows: Vec<StateRows>,
    /// Before the loop: the copies that lay scan inputs out as padded rows, and those rows.
    fill: Vec<Step>,
    held: Vec<Tensor>,
}

/// The most memory that rows padded to the device's alignment may take beyond what the rows
/// themselves take, when padding more than doubles them: 64 MiB, for example a million
/// iterations of 64-byte elements on a device aligning to 128 bytes. Beyond it the elements
/// are copied each iteration.
const PADDING_BUDGET: u64 = 64 << 20;

/// Bytes from one row to the next when `seq` elements of `bytes` (whole words) are laid out
/// so that each starts at a multiple of `align` (the device's storage offset alignment), or
/// `None` where that memory is beyond [`PADDING_BUDGET`].
fn aligned_stride(align: u32, bytes: u64, seq: usize) -> Option<u64> {
    // A slot holds the whole buffer of a row's bytes (whole quads for large rows).
    let stride = alloc_size(bytes).checked_next_multiple_of(u64::from(align).max(4))?;
    let (padded, plain) = (stride.checked_mul(seq as u64)?, bytes * seq as u64);
    (bytes > 0 && (padded <= 2 * plain || padded - plain <= PADDING_BUDGET)).then_some(stride)
}

/// How a scan input is laid out as padded rows before the loop.
#[derive(Clone)]
struct RowFill {
    /// The copy's element size in bytes.
    elem: u64,
    piece: CopyPiece,
    /// The copy reads the input with its scan axis moved first (one transposing gather before
    /// it), not the input itself.
    moved_first: Option<Vec<i64>>,
}

/// The copy that lays scan input `j` out as rows `stride` bytes apart, one per position along
/// its scan axis: whole words per row along axis 0, 4- and 8-byte elements along any axis, or
/// for 1- and 2-byte elements along another axis whose rows are whole words, whole words from
/// the input with its scan axis moved first (a gather packs those bytes; the strided copy
/// writes 4- and 8-byte elements only).
fn padded_rows(plan: &ScanPlan, j: usize, stride: u64) -> Option<RowFill> {
    let shape = &plan.input_shapes[plan.n + j];
    let (axis, bytes, seq) = (plan.in_axes[j], plan.element_bytes(j), plan.seq as u64);
    let size = plan.input_dtypes[plan.n + j].size() as u64;
    let moved_first =
        (axis != 0 && size < 4 && shape.len() <= crate::kernels::MAX_RANK).then(|| {
            let others = (0..shape.len() as i64).filter(|&k| k != axis as i64);
            std::iter::once(axis as i64).chain(others).collect()
        });
    if bytes.is_multiple_of(4) && (axis == 0 || moved_first.is_some()) {
        let words = bytes / 4;
        let dims = vec![
            CopyDim {
                len: seq,
                src: words,
                dst: stride / 4,
            },
            CopyDim {
                len: words,
                src: 1,
                dst: 1,
            },
        ];
        return Some(RowFill {
            elem: 4,
            piece: CopyPiece {
                src_base: 0,
                dst_base: 0,
                dims,
            },
            moved_first,
        });
    }
    if !matches!(size, 4 | 8) || shape.len() > crate::kernels::MAX_RANK {
        return None;
    }
    let strides = c_strides(shape);
    let mut within = c_strides(&plan.element_shapes[j]).into_iter();
    let mut dims = vec![CopyDim {
        len: seq,
        src: strides[axis],
        dst: stride / size,
    }];
    for (k, (&len, &src)) in shape.iter().zip(&strides).enumerate() {
        if k != axis {
            dims.push(CopyDim {
                len: len as u64,
                src,
                dst: within.next()?,
            });
        }
    }
    Some(RowFill {
        elem: size,
        piece: CopyPiece {
            src_base: 0,
            dst_base: 0,
            dims,
        },
        moved_first: None,
    })
}

/// A state that is also a scan output (an RNN cell's `h`), kept as the output's rows instead
/// of in its two ping-pong buffers: iteration `t` reads `h[t-1]` and writes `h[t]`, and one
/// dispatch may not bind one buffer for both, so the rows alternate between two buffers by
/// parity. `halves[0]` holds the initial state then `h[1], h[3], ...`, `halves[1]` holds
/// `h[0], h[2], ...`; iteration `t` reads slot `t / 2` of `halves[t % 2]` and writes slot
/// `(t + 1) / 2` of the other. After the loop two strided copies interleave them into the
/// output (and a gather reverses them for a reversed output), with no copy per iteration.
/// Slots are `stride` bytes apart: the state's bytes, or those padded to the device's storage
/// offset alignment.
struct StateRows {
    state: usize,
    output: usize,
    /// The output runs backwards (its row `seq - 1 - t` is `h[t]`).
    reverse: bool,
    /// The state's bytes (a whole number of words), a row of the output.
    row_bytes: u64,
    stride: u64,
    halves: [Tensor; 2],
}

impl StateRows {
    /// Fills `acc` (the output's rows by position): row `t` from its half, even rows from
    /// `halves[1]` slot `t / 2`, odd rows from `halves[0]` slot `(t + 1) / 2`; for a reversed
    /// output into a tensor of its own first, then gathered in reverse (once, after the loop).
    fn interleave(&self, rec: &mut Recorder, seq: u64, acc: &Tensor) -> Result<()> {
        let forward = if self.reverse {
            rec.alloc(acc.dtype(), acc.shape())?
        } else {
            acc.clone()
        };
        let (slot, words) = (self.stride / 4, self.row_bytes / 4);
        for (half, first, rows) in [(1, 0, seq.div_ceil(2)), (0, 1, seq / 2)] {
            let piece = CopyPiece {
                src_base: first * slot,
                dst_base: first * words,
                dims: vec![
                    CopyDim {
                        len: rows,
                        src: slot,
                        dst: 2 * words,
                    },
                    CopyDim {
                        len: words,
                        src: 1,
                        dst: 1,
                    },
                ],
            };
            let src = self.halves[half].storage();
            rec.copy_piece(OP, 4, src, forward.storage(), &piece)?;
        }
        if self.reverse {
            let row = (acc.numel() as u64) / seq.max(1);
            let plan = GatherPlan::from_dims(
                (seq - 1) * row,
                &[
                    GatherDim {
                        len: seq,
                        step: -(row as i64),
                    },
                    GatherDim { len: row, step: 1 },
                ],
            );
            rec.gather_into(OP, &forward, &plan, acc)?;
            rec.release(forward);
        }
        Ok(())
    }
}

/// Chooses the scan inputs read and the scan outputs written in place, and rebinds the
/// instances' steps for them (see `recorder/slide.rs`): a scan input whose element the device
/// can bind at every iteration's offset in the input itself (along axis 0, at its alignment),
/// or else in a copy of the input laid out as rows at that alignment, made once per run of
/// the loop; a scan output whose element the body writes into a buffer of its own, bound
/// likewise in its accumulator (whose rows are then padded where needed, and `outputs` says
/// so); and a state that is also a scan output, held as rows (see [`StateRows`]). The others
/// keep their copies. Outputs laid out `whole` after the loop (passed on from an input, or a
/// one-step Scan's last state; see `record_loop`) need no write and elements nothing in the
/// body uses no read.
#[allow(clippy::too_many_arguments)]
fn place_elements(
    rec: &mut Recorder,
    plan: &ScanPlan,
    instances: &mut [Instance],
    (outputs, accumulators): (&mut [OutputPlan], &mut [Tensor]),
    scans: &[Tensor],
    elements: &[Tensor],
    ping_pong: &[Vec<Tensor>; 2],
    whole: &[bool],
) -> Result<InPlace> {
    // Outputs laid out whole need no write per iteration, and an element nothing in the body
    // uses (only passed on, or not read at all) no read.
    let whole_writes: Vec<bool> = whole.to_vec();
    // Elements that a scan output (not passed on) is: copied from their buffer, which must
    // then hold them.
    let output: Vec<bool> = elements
        .iter()
        .map(|e| {
            instances.iter().any(|i| {
                i.scan_outputs.iter().zip(whole).any(|(o, &whole)| {
                    !whole && o.buffers().iter().any(|b| e.buffers().contains(b))
                })
            })
        })
        .collect();
    let unused: Vec<bool> = elements
        .iter()
        .zip(&output)
        .map(|(e, &output)| {
            let buffers = e.buffers();
            !output
                && !instances
                    .iter()
                    .any(|i| buffers.iter().any(|b| uses(&i.steps, b)))
        })
        .collect();
    let mut placed = InPlace {
        reads: unused.clone(),
        writes: whole_writes.clone(),
        rows: Vec::new(),
        fill: Vec::new(),
        held: Vec::new(),
    };
    let Ok(seq) = u32::try_from(plan.seq) else {
        return Ok(placed);
    };
    if !rec.context().scan_in_place() {
        return Ok(placed);
    }
    let ctx = rec.context().clone();
    let align = ctx.limits().min_storage_buffer_offset_alignment;
    let single = |t: &Tensor| t.storage().single().cloned();
    // Buffers the loop was given or holds its states and elements in: a scan output there is
    // not a value of the body's own.
    let others: Vec<wgpu::Buffer> = scans
        .iter()
        .chain(elements)
        .chain(ping_pong.iter().flatten())
        .flat_map(|t| t.buffers().to_vec())
        .collect();
    // Padded rows of inputs, with the copy that fills them (an allocation that fails, past the
    // memory limit say, leaves the element to its copies).
    let mut padded_inputs: Vec<Option<(Tensor, RowFill)>> = vec![None; scans.len()];
    let mut input_slides: Vec<Option<Slide>> = Vec::with_capacity(scans.len());
    for j in 0..scans.len() {
        let (bytes, reverse) = (plan.element_bytes(j), plan.in_reverse[j]);
        // An element nothing uses needs no slide (nor padded rows).
        let slide = single(&elements[j])
            .filter(|_| !unused[j] && !output[j])
            .and_then(|from| {
                let direct = single(&scans[j])
                    .map(|to| Slide::along(from.clone(), to, bytes, seq, reverse))
                    .filter(|s| plan.in_axes[j] == 0 && s.fits(&ctx));
                if direct.is_some() {
                    return direct;
                }
                let stride = aligned_stride(align, bytes, plan.seq)?;
                let fill = padded_rows(plan, j, stride)?;
                let rows = rec
                    .alloc_unused(DType::U32, &[plan.seq * (stride / 4) as usize])
                    .ok()?;
                let slide = Slide::along(from, single(&rows)?, stride, seq, reverse);
                slide.fits(&ctx).then(|| {
                    padded_inputs[j] = Some((rows, fill));
                    slide
                })
            });
        input_slides.push(slide);
    }
    // The buffer instance `p` writes output `q` into, where it is a value of the body's own
    // (not an input, an element or a state, and no other output).
    let own_value = |p: usize, q: usize| -> Option<wgpu::Buffer> {
        let (instance, own) = (&instances[p], &instances[p].scan_outputs);
        let from = single(&own[q])?;
        let repeated = own
            .iter()
            .enumerate()
            .any(|(r, o)| r != q && o.buffers().contains(&from));
        let body_value = !own[q].storage().uploaded()
            && !others.contains(&from)
            && writes(&instance.steps, &from);
        (body_value && !repeated).then_some(from)
    };
    let slide_into = |from: wgpu::Buffer, acc: &Tensor, stride: u64, q: usize| {
        let s = Slide::along(from, single(acc)?, stride, seq, outputs[q].reverse);
        s.fits(&ctx).then_some(s)
    };
    // Outputs whose rows the device cannot bind where they lie, with accumulators whose rows
    // are at its alignment.
    let mut padded_outputs: Vec<Option<(Tensor, u64)>> = vec![None; outputs.len()];
    for (q, o) in outputs.iter().enumerate() {
        let own: Option<Vec<wgpu::Buffer>> =
            (0..instances.len()).map(|p| own_value(p, q)).collect();
        let Some(own) = own else { continue };
        if own
            .into_iter()
            .all(|from| slide_into(from, &accumulators[q], o.row_stride(), q).is_some())
        {
            continue;
        }
        let Some(stride) = aligned_stride(align, o.row_bytes, plan.seq) else {
            continue;
        };
        let shape = [plan.seq, stride as usize / o.dtype.size()];
        if let Ok(rows) = rec.alloc_unused(o.dtype, &shape) {
            padded_outputs[q] = Some((rows, stride));
        }
    }
    let output_slides: Vec<Vec<Option<Slide>>> = (0..instances.len())
        .map(|p| {
            (0..outputs.len())
                .map(|q| {
                    let from = own_value(p, q)?;
                    match &padded_outputs[q] {
                        Some((rows, stride)) => slide_into(from, rows, *stride, q),
                        None => slide_into(from, &accumulators[q], outputs[q].row_stride(), q),
                    }
                })
                .collect()
        })
        .collect();
    // States that are scan outputs: in every instance, output q is the buffer that
    // instance writes state i into, and no other output is either state buffer. Not for one
    // step: its rows would cost the initial state's copy into them and the last state's out of
    // them, where its one row's copy is all it needs (a token-by-token run's Scan).
    let mut row_candidates: Vec<StateRows> = Vec::new();
    for (q, o) in outputs.iter().enumerate().filter(|_| plan.seq > 1) {
        let state = (0..plan.n).find(|&i| {
            // A state read where it is has no rows to keep.
            !Arc::ptr_eq(ping_pong[0][i].storage(), ping_pong[1][i].storage())
                && instances.iter().enumerate().all(|(p, instance)| {
                    Arc::ptr_eq(
                        instance.scan_outputs[q].storage(),
                        ping_pong[1 - p][i].storage(),
                    )
                })
                && !row_candidates.iter().any(|r| r.state == i)
        });
        let Some(i) = state else { continue };
        let aliased = instances.iter().any(|instance| {
            instance.scan_outputs.iter().enumerate().any(|(r, t)| {
                r != q
                    && (Arc::ptr_eq(t.storage(), ping_pong[0][i].storage())
                        || Arc::ptr_eq(t.storage(), ping_pong[1][i].storage()))
            })
        });
        let row_bytes = o.row_bytes;
        if aliased
            || alloc_size(row_bytes) != ping_pong[0][i].storage().size()
            || !row_bytes.is_multiple_of(4)
            || row_bytes > ctx.scan_state_rows_max_bytes()
        {
            continue;
        }
        // Slots at the alignment, padded where the state's bytes are not a multiple of it.
        let slots = plan.seq / 2 + 1;
        let stride =
            if row_bytes.is_multiple_of(u64::from(align)) && alloc_size(row_bytes) == row_bytes {
                row_bytes
            } else {
                match aligned_stride(align, row_bytes, slots) {
                    Some(stride) => stride,
                    None => continue,
                }
            };
        let shape = [slots * (stride / 4) as usize];
        let halves = [
            rec.alloc_unused(DType::U32, &shape)?,
            rec.alloc_unused(DType::U32, &shape)?,
        ];
        row_candidates.push(StateRows {
            state: i,
            output: q,
            reverse: o.reverse,
            row_bytes,
            stride,
            halves,
        });
    }
    // The two slides of rows `r` in the instance of parity `p`: reads of slot t / 2 of
    // halves[p], writes of slot (t + 1) / 2 of halves[1 - p].
    let row_slides = |r: &StateRows, p: usize| -> Option<[Slide; 2]> {
        let slide = |k: usize, add: u32| -> Option<Slide> {
            let s = Slide {
                add,
                shift: 1,
                ..Slide::along(
                    single(&ping_pong[k][r.state])?,
                    single(&r.halves[k])?,
                    r.stride,
                    seq,
                    false,
                )
            };
            s.fits(&ctx).then_some(s)
        };
        Some([slide(p, 0)?, slide(1 - p, 1)?])
    };
    let mut rows: Vec<bool> = row_candidates
        .iter()
        .map(|r| (0..instances.len()).all(|p| row_slides(r, p).is_some()))
        .collect();
    for (j, s) in input_slides.iter().enumerate() {
        placed.reads[j] = unused[j] || s.is_some();
    }
    for (q, w) in placed.writes.iter_mut().enumerate() {
        *w = whole_writes[q] || output_slides.iter().all(|o| o[q].is_some());
    }
    // A slide that one instance cannot make is dropped for all, until all take the rest.
    enum Owner {
        Read(usize),
        Write(usize),
        Rows(usize),
    }
    'retry: loop {
        let mut rebound = Vec::with_capacity(instances.len());
        for (p, (instance, own)) in instances.iter().zip(&output_slides).enumerate() {
            let mut slides = Vec::new();
            let mut owners = Vec::new();
            for (j, s) in input_slides.iter().enumerate() {
                if let (true, Some(s)) = (placed.reads[j], s) {
                    slides.push(s.clone());
                    owners.push(Owner::Read(j));
                }
            }
            for (q, s) in own.iter().enumerate() {
                if let (true, Some(s)) = (placed.writes[q], s) {
                    slides.push(s.clone());
                    owners.push(Owner::Write(q));
                }
            }
            for (k, r) in row_candidates.iter().enumerate() {
                if let (true, Some(pair)) = (rows[k], row_slides(r, p)) {
                    slides.extend(pair);
                    owners.extend([Owner::Rows(k), Owner::Rows(k)]);
                }
            }
            match rec.slide(OP, &instance.steps, &slides)? {
                Ok(steps) => rebound.push(steps),
                Err(k) => {
                    match owners[k] {
                        Owner::Read(j) => placed.reads[j] = false,
                        Owner::Write(q) => placed.writes[q] = false,
                        Owner::Rows(r) => rows[r] = false,
                    }
                    continue 'retry;
                }
            }
        }
        for (instance, steps) in instances.iter_mut().zip(rebound) {
            instance.steps = steps;
        }
        for (q, padded) in padded_outputs.into_iter().enumerate() {
            let Some((rows, stride)) = padded else {
                continue;
            };
            // No command has used the accumulator replaced, nor rows left unused.
            if !placed.writes[q] {
                rec.release(rows);
            } else {
                let unused = std::mem::replace(&mut accumulators[q], rows);
                rec.release(unused);
                outputs[q] = outputs[q].clone().with_row_bytes(stride);
            }
        }
        let mut moved = Vec::new();
        let ((), fill) = rec.capture(|rec| {
            for (j, padded) in padded_inputs.iter().enumerate() {
                let (true, Some((rows, fill))) = (placed.reads[j], padded) else {
                    continue;
                };
                let source = match &fill.moved_first {
                    Some(perm) => {
                        // A buffer no command has used (not one the recorder's pool may hand
                        // out again): the copy runs before the loop, wherever the fill is placed.
                        let (shape, _) =
                            crate::ops::layout::transpose_plan(scans[j].shape(), Some(perm))?;
                        let t = rec.alloc_unused(scans[j].dtype(), &shape)?;
                        rec.transpose_to(&scans[j], Some(perm), crate::Out::into(OP, &t))?;
                        moved.push(t.clone());
                        t
                    }
                    None => scans[j].clone(),
                };
                rec.copy_piece(OP, fill.elem, source.storage(), rows.storage(), &fill.piece)?;
            }
            Ok(())
        })?;
        placed.fill = fill;
        let mut held = Vec::new();
        for (padded, &read) in padded_inputs.into_iter().zip(&placed.reads) {
            match (padded, read) {
                (Some((rows, _)), true) => held.push(rows),
                // Laid out for an element read otherwise after all: no command used them.
                (Some((rows, _)), false) => rec.release(rows),
                (None, _) => {}
            }
        }
        held.extend(moved);
        placed.held = held;
        for (r, taken) in row_candidates.into_iter().zip(rows) {
            if taken {
                placed.writes[r.output] = true;
                placed.rows.push(r);
            } else {
                for t in r.halves {
                    rec.release(t);
                }
            }
        }
        return Ok(placed);
    }
}

/// The loop when every element read is a whole-word row along axis 0 and every buffer can be
/// bound whole: each parity's iteration (element reads at the counter's position, the body,
/// output rows at the counter's position, the counter advanced) is captured once as
/// dispatches, so an iteration is one stretch of a compute pass with no buffer copy. `None`
/// when the loop must copy instead. Reads and writes made in place (`in_place`, see
/// [`slide_elements`]) move nothing here.
#[allow(clippy::too_many_arguments)]
fn in_pass_iterations(
    rec: &mut Recorder,
    plan: &ScanPlan,
    instances: &[Instance],
    outputs: &[OutputPlan],
    scans: &[Tensor],
    elements: &[Tensor],
    accumulators: &[Tensor],
    in_place: (&[bool], &[bool]),
) -> Result<Option<(LoopFn, Tensor)>> {
    // On CPU adapters a buffer copy is a memcpy and a dispatch costs tens of microseconds:
    // lavapipe ran 200 000 iterations of a small body at 73 us each with copies, 195 us with
    // these dispatches (`examples/long_scan`), so they keep the copies.
    if rec.context().cpu_kernels() {
        return Ok(None);
    }
    let seq = plan.seq as u32;
    // Two slots, read by iterations of even and odd index (see kernels/scan_step.rs).
    let counter = rec.alloc_unused(DType::U32, &[2])?;
    let mut reads = Vec::with_capacity(scans.len());
    let none = IterationCopy {
        words: 0,
        src_base: 0,
        src_step: 0,
        dst_base: 0,
        dst_step: 0,
        seq,
        reverse: false,
        slot: 0,
        advance: false,
    };
    for j in 0..scans.len() {
        if in_place.0[j] {
            reads.push(none);
            continue;
        }
        let bytes = plan.element_bytes(j);
        if plan.in_axes[j] != 0 || !bytes.is_multiple_of(4) || bytes / 4 > u64::from(u32::MAX) {
            return Ok(None);
        }
        let copy = IterationCopy {
            words: (bytes / 4) as u32,
            src_base: 0,
            src_step: (bytes / 4) as u32,
            dst_base: 0,
            dst_step: 0,
            seq,
            reverse: plan.in_reverse[j],
            slot: 0,
            advance: false,
        };
        if !copy.fits(rec, &scans[j], &elements[j], &counter) {
            return Ok(None);
        }
        reads.push(copy);
    }
    let mut writes = Vec::with_capacity(outputs.len());
    for (q, o) in outputs.iter().enumerate() {
        if in_place.1[q] {
            writes.push(none);
            continue;
        }
        let copy = IterationCopy {
            words: (o.row_bytes / 4) as u32,
            src_base: 0,
            src_step: 0,
            dst_base: 0,
            dst_step: (o.row_stride() / 4) as u32,
            seq,
            reverse: o.reverse,
            slot: 0,
            advance: false,
        };
        for instance in instances {
            if !copy.fits(rec, &instance.scan_outputs[q], &accumulators[q], &counter) {
                return Ok(None);
            }
        }
        writes.push(copy);
    }
    if let Some(grouped) = grouped_iterations(
        rec,
        plan,
        instances,
        scans,
        elements,
        accumulators,
        &counter,
        &reads,
        &writes,
    )? {
        return Ok(Some((grouped, counter)));
    }
    // The iteration's last copy that moves anything also advances the counter; with none, a
    // dispatch of its own does.
    let carrier = reads
        .iter()
        .chain(&writes)
        .enumerate()
        .filter(|(_, c)| c.words > 0)
        .map(|(i, _)| i)
        .last();
    let mut iterations = Vec::with_capacity(instances.len());
    for (parity, instance) in instances.iter().enumerate() {
        let slot = parity as u32;
        let at = |copy: &IterationCopy, index: usize| IterationCopy {
            slot,
            advance: carrier == Some(index),
            ..*copy
        };
        let ((), steps) = rec.capture(|rec| {
            for (j, copy) in reads.iter().enumerate() {
                rec.copy_at_iteration(OP, &scans[j], &elements[j], &counter, at(copy, j))?;
            }
            rec.replay(&instance.steps)?;
            for (q, copy) in writes.iter().enumerate() {
                let out = &instance.scan_outputs[q];
                let copy = at(copy, reads.len() + q);
                rec.copy_at_iteration(OP, out, &accumulators[q], &counter, copy)?;
            }
            if carrier.is_none() {
                rec.next_iteration(OP, &counter, slot)?;
            }
            Ok(())
        })?;
        iterations.push(steps);
    }
    let held = counter.clone();
    Ok(Some((
        Arc::new(move |rec: &mut Recorder| {
            // The counter starts at 0 on every run of the loop (an enclosing loop runs it again).
            rec.clear(counter.storage(), 0, 4)?;
            for t in 0..seq {
                rec.replay_at(&iterations[t as usize % 2], t)?;
                rec.end_of_iteration()?;
            }
            Ok(())
        }) as LoopFn,
        held,
    )))
}

/// The in-pass loop with an iteration's copies grouped: after the body of iteration `t`, one
/// dispatch (or one per [`grouped_copies_limit`] copies) writes its output rows and reads the
/// elements of iteration `t + 1`, and advances the counter; the elements of iteration 0 are
/// read before the loop. An RNN step is then its body and one dispatch. `None` where a buffer
/// written by one copy would be bound again in the dispatch (an output that is an element it
/// read): the write would race with the read.
#[allow(clippy::too_many_arguments)]
fn grouped_iterations(
    rec: &mut Recorder,
    plan: &ScanPlan,
    instances: &[Instance],
    scans: &[Tensor],
    elements: &[Tensor],
    accumulators: &[Tensor],
    counter: &Tensor,
    reads: &[IterationCopy],
    writes: &[IterationCopy],
) -> Result<Option<LoopFn>> {
    let limit = grouped_copies_limit(rec.context()) as usize;
    if limit == 0 {
        return Ok(None);
    }
    let seq = plan.seq as u32;
    // (source, destination, copy, reads ahead) of the copies that move anything.
    type Group<'a> = Vec<(&'a Tensor, &'a Tensor, IterationCopy, bool)>;
    let read_copies = |ahead: bool| -> Group<'_> {
        reads
            .iter()
            .enumerate()
            .filter(|(_, c)| c.words > 0)
            .map(|(j, c)| (&scans[j], &elements[j], *c, ahead))
            .collect()
    };
    let mut per_parity: Vec<Group<'_>> = Vec::with_capacity(instances.len());
    for instance in instances {
        let mut copies: Group<'_> = writes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.words > 0)
            .map(|(q, c)| (&instance.scan_outputs[q], &accumulators[q], *c, false))
            .collect();
        copies.extend(read_copies(true));
        // Each written buffer (and the counter) once; sources may repeat (two reads of one
        // tensor), they are only read.
        let written: Vec<*const Storage> = std::iter::once(counter)
            .chain(copies.iter().map(|(_, dst, _, _)| *dst))
            .map(|t| Arc::as_ptr(t.storage()))
            .collect();
        let mut distinct = written.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let read_and_written = copies
            .iter()
            .any(|(src, _, _, _)| written.contains(&Arc::as_ptr(src.storage())));
        if distinct.len() != written.len() || read_and_written {
            return Ok(None);
        }
        per_parity.push(copies);
    }
    let ((), first_reads) = rec.capture(|rec| {
        for group in read_copies(false).chunks(limit) {
            rec.copies_at_iteration(OP, group, counter, 0, false)?;
        }
        Ok(())
    })?;
    let mut iterations = Vec::with_capacity(instances.len());
    for (parity, (instance, copies)) in instances.iter().zip(&per_parity).enumerate() {
        let slot = parity as u32;
        let ((), steps) = rec.capture(|rec| {
            rec.replay(&instance.steps)?;
            let groups: Vec<_> = copies.chunks(limit).collect();
            for (g, group) in groups.iter().enumerate() {
                rec.copies_at_iteration(OP, group, counter, slot, g + 1 == groups.len())?;
            }
            if groups.is_empty() {
                rec.next_iteration(OP, counter, slot)?;
            }
            Ok(())
        })?;
        iterations.push(steps);
    }
    let counter = counter.clone();
    Ok(Some(Arc::new(move |rec: &mut Recorder| {
        // The counter starts at 0 on every run of the loop (an enclosing loop runs it again).
        rec.clear(counter.storage(), 0, 4)?;
        rec.replay(&first_reads)?;
        for t in 0..seq {
            rec.replay_at(&iterations[t as usize % 2], t)?;
            rec.end_of_iteration()?;
        }
        Ok(())
    })))
}

/// The loop with buffer copies (or gathers) for element reads and output rows, except those
/// made in place (`in_place`; with all of them, an iteration is its body alone).
fn copied_iterations(
    plan: &ScanPlan,
    instances: Vec<Instance>,
    outputs: &[OutputPlan],
    scans: &[Tensor],
    elements: Vec<Tensor>,
    accumulators: &[Tensor],
    in_place: (Vec<bool>, Vec<bool>),
) -> LoopFn {
    let seq = plan.seq;
    let (scans, accumulators) = (scans.to_vec(), accumulators.to_vec());
    let (plan, outputs) = (plan.clone(), outputs.to_vec());
    Arc::new(move |rec: &mut Recorder| {
        for t in 0..seq {
            for (j, scan) in scans.iter().enumerate() {
                if in_place.0[j] {
                    continue;
                }
                match plan.read(j, t) {
                    ElementRead::Copy { offset, bytes } => {
                        rec.copy(scan.storage(), offset, elements[j].storage(), 0, bytes)?
                    }
                    ElementRead::Gather(g) => rec.gather_into(OP, scan, &g, &elements[j])?,
                }
            }
            let instance = &instances[t % 2];
            rec.replay_at(&instance.steps, t as u32)?;
            for (q, out) in instance.scan_outputs.iter().enumerate() {
                if in_place.1[q] {
                    continue;
                }
                let o = &outputs[q];
                let at = plan.position(t, o.reverse) as u64 * o.row_stride();
                rec.copy(out.storage(), 0, accumulators[q].storage(), at, o.row_bytes)?;
            }
            rec.end_of_iteration()?;
        }
        Ok(())
    })
}

/// Decision 13: no iteration; states come back as given, scan outputs are empty along their
/// scan axis with element shapes from the body's declared outputs.
fn empty_sequence(
    rec: &mut Recorder,
    args: &NodeArgs,
    body: &Graph,
    plan: &ScanPlan,
    states: &[Tensor],
) -> Result<Vec<Tensor>> {
    let n = plan.n;
    let mut results = Vec::with_capacity(n + plan.k);
    for (i, s) in states.iter().enumerate() {
        results.push(args.out(i).view(rec, s.clone())?);
    }
    let declared: Vec<(DType, Vec<usize>)> = body.outputs[n..]
        .iter()
        .map(|o| match (o.dtype, &o.shape) {
            (Some(d), Some(s)) if s.iter().all(Option::is_some) => {
                Ok((d, s.iter().map(|d| d.unwrap_or(0)).collect()))
            }
            _ => Err(invalid(
                "body",
                format!("the sequence is empty, so scan output '{}' takes its element dtype and shape from the body's declaration, which does not give them", o.name),
            )),
        })
        .collect::<Result<_>>()?;
    for (q, o) in plan.outputs(&declared)?.into_iter().enumerate() {
        results.push(args.out(n + q).tensor(rec, o.dtype, &o.output_shape)?);
    }
    Ok(results)
}

pub(crate) static GRAPH_OP: OpDef = OpDef {
    name: OP,
    inputs: 1..=usize::MAX,
    outputs: 1..=usize::MAX,
    host: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of `n` states and `m` scan inputs giving back its states and `k` scan outputs.
    fn body(n: usize, m: usize, k: usize) -> Graph {
        Graph {
            inputs: (0..n + m)
                .map(|i| ValueInfo::named(format!("in{i}")))
                .collect(),
            constants: Vec::new(),
            nodes: Vec::new(),
            outputs: (0..n + k)
                .map(|i| ValueInfo::named(format!("in{}", i.min(n + m - 1))))
                .collect(),
            ..Default::default()
        }
    }

    fn attrs(m: i64) -> ScanAttrs {
        ScanAttrs {
            num_scan_inputs: Some(m),
            ..ScanAttrs::default()
        }
    }

    #[test]
    fn reads_follow_axes_and_directions() {
        let inputs = [
            (DType::F32, vec![3]),
            (DType::F32, vec![4, 3]),
            (DType::U8, vec![2, 4]),
        ];
        let a = ScanAttrs {
            scan_input_axes: Some(vec![0, -1]),
            scan_input_directions: Some(vec![1, 0]),
            ..attrs(2)
        };
        let plan = ScanPlan::new(&a, &body(1, 2, 1), &inputs, 2).unwrap();
        assert_eq!((plan.n, plan.m, plan.k, plan.seq), (1, 2, 1, 4));
        assert_eq!(plan.element_shapes, [vec![3], vec![2]]);
        // Input 0 runs backwards along axis 0: iteration 0 reads row 3, by a buffer copy.
        assert_eq!(
            plan.read(0, 0),
            ElementRead::Copy {
                offset: 36,
                bytes: 12
            }
        );
        assert_eq!(
            plan.read(0, 3),
            ElementRead::Copy {
                offset: 0,
                bytes: 12
            }
        );
        // Input 1 (u8 [2, 4]) is read along its last axis: a gather of column t.
        let ElementRead::Gather(g) = plan.read(1, 2) else {
            panic!("a column is a gather")
        };
        assert_eq!(
            (0..g.count).map(|i| g.source_index(i)).collect::<Vec<_>>(),
            [2, 6]
        );
    }

    #[test]
    fn outputs_insert_the_sequence_axis() {
        let inputs = [(DType::F32, vec![2]), (DType::F32, vec![5, 2])];
        let a = ScanAttrs {
            scan_output_axes: Some(vec![1]),
            scan_output_directions: Some(vec![1]),
            ..attrs(1)
        };
        let plan = ScanPlan::new(&a, &body(1, 1, 1), &inputs, 2).unwrap();
        let out = plan.outputs(&[(DType::F32, vec![2, 3])]).unwrap();
        assert_eq!(out[0].output_shape, [2, 5, 3]);
        assert!(out[0].reverse);
        // Rows of 6 elements; output [i, t, j] reads accumulator row t, element 3i + j.
        let g = out[0].layout.as_ref().unwrap();
        let read: Vec<u64> = (0..g.count).map(|i| g.source_index(i)).collect();
        assert_eq!(&read[..6], [0, 1, 2, 6, 7, 8]);
        // Axis 0 with whole-word rows: the accumulator is the output.
        let plan = ScanPlan::new(&attrs(1), &body(1, 1, 1), &inputs, 2).unwrap();
        let out = plan.outputs(&[(DType::F32, vec![2])]).unwrap();
        assert_eq!((out[0].layout.is_none(), out[0].row_bytes), (true, 8));
        // Empty elements: empty rows, the accumulator is the (empty) output.
        let out = plan.outputs(&[(DType::F64, vec![2, 0])]).unwrap();
        assert_eq!((out[0].row_bytes, out[0].row_elems), (0, 0));
        assert_eq!(out[0].output_shape, [5, 2, 0]);
        // u8 rows of 3 bytes are padded to a word: a gather drops the padding.
        let out = plan.outputs(&[(DType::U8, vec![3])]).unwrap();
        assert_eq!((out[0].row_elems, out[0].layout.is_some()), (4, true));
    }

    #[test]
    fn states_pass_through_directly_or_by_identity_chains_only() {
        use crate::graph::Node;
        let node = |op: &str, from: &str, to: &str| Node::new(op, to).inputs([from]).outputs([to]);
        let with = |nodes: Vec<Node>, outputs: [&str; 2]| Graph {
            nodes,
            outputs: outputs.iter().map(|o| ValueInfo::named(*o)).collect(),
            ..body(2, 0, 0)
        };
        // Directly, and through two Identity nodes.
        assert!(passes_through(&body(2, 0, 0), 0));
        let chain = with(
            vec![node("Identity", "in0", "a"), node("Identity", "a", "b")],
            ["b", "in0"],
        );
        assert!(passes_through(&chain, 0) && !passes_through(&chain, 1));
        // Another state's value, or a computed one, is not.
        let swapped = with(vec![node("Identity", "in1", "a")], ["a", "in1"]);
        assert!(!passes_through(&swapped, 0) && passes_through(&swapped, 1));
        let negated = with(vec![node("Neg", "in0", "a")], ["a", "in1"]);
        assert!(!passes_through(&negated, 0));
    }

    #[test]
    fn rows_are_padded_within_the_memory_budget() {
        // 12-byte rows at 32 and 256 bytes: 2.7x and 21x the rows, within 64 MiB of padding.
        assert_eq!(aligned_stride(32, 12, 1000), Some(32));
        assert_eq!(aligned_stride(256, 12, 1000), Some(256));
        // Aligned rows cost nothing; a doubling at most is always taken.
        assert_eq!(aligned_stride(256, 512, 1 << 30), Some(512));
        assert_eq!(aligned_stride(256, 160, 1 << 30), Some(256));
        // A million 4-byte rows at 256 bytes would add 252 MB: copied instead. At 32 bytes
        // they add 28 MB.
        assert_eq!(aligned_stride(256, 4, 1_000_000), None);
        assert_eq!(aligned_stride(32, 4, 1_000_000), Some(32));
        // Empty elements and a stride beyond u64 are not padded.
        assert_eq!(aligned_stride(32, 0, 10), None);
        assert_eq!(aligned_stride(256, u64::MAX - 3, 1), None);
    }

    #[test]
    fn bad_calls_are_errors_naming_the_rule() {
        let inputs = [(DType::F32, vec![2]), (DType::F32, vec![5, 2])];
        let err = |a: &ScanAttrs, b: &Graph, outs| {
            ScanPlan::new(a, b, &inputs, outs).unwrap_err().to_string()
        };
        assert!(
            err(&ScanAttrs::default(), &body(1, 1, 1), 2).contains("'num_scan_inputs' is required")
        );
        assert!(err(&attrs(3), &body(1, 1, 1), 2).contains("num_scan_inputs is 3 but 2 inputs"));
        assert!(err(&attrs(1), &body(2, 1, 1), 2).contains("the body has 3 inputs"));
        assert!(err(&attrs(1), &body(1, 1, 1), 3).contains("the node names 3 outputs"));
        let a = ScanAttrs {
            scan_input_axes: Some(vec![2]),
            ..attrs(1)
        };
        assert!(err(&a, &body(1, 1, 1), 2).contains("scan_input_axes[0] is 2, outside [-2, 1]"));
        let a = ScanAttrs {
            scan_input_directions: Some(vec![2]),
            ..attrs(1)
        };
        assert!(err(&a, &body(1, 1, 1), 2).contains("directions are 0 or 1"));
        let uneven = [(DType::F32, vec![5, 2]), (DType::F32, vec![4])];
        let e = ScanPlan::new(&attrs(2), &body(0, 2, 1), &uneven, 1).unwrap_err();
        assert!(e.to_string().contains("scan input 1 has 4 elements"), "{e}");
    }
}
