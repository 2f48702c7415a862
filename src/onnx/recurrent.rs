//! ONNX's recurrent layers (RNN, GRU, LSTM) loaded as Scans: per direction, the layer's
//! weights cut and transposed once outside the loop, a body computing one step from the ONNX
//! equations, and the outputs laid out as the op defines them. The Scan then runs the steps on
//! the GPU with its states resident (and its element-wise chains fused), as any Scan does.

use crate::graph::{Attr, Graph, Node, ValueInfo};
use crate::{Error, HostTensor, Result};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    /// Gates per step: their blocks in W, R and each half of B.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }
    /// Activation functions per direction, and their defaults.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// Activation functions a layer may name (all of ONNX's list), with the defaults of the
/// parameters each takes: `alpha`, then `beta`. The defaults are onnxruntime's, which are the
/// ops' own but for ThresholdedRelu (0, where the op's is 1) and ScaledTanh and Affine (0 and
/// 0; no ops of their own).
const ACTIVATIONS: [(&str, Option<f32>, Option<f32>); 11] = [
    ("Tanh", None, None),
    ("Sigmoid", None, None),
    ("Relu", None, None),
    ("LeakyRelu", Some(0.01), None),
    ("ThresholdedRelu", Some(0.0), None),
    ("HardSigmoid", Some(0.2), Some(0.5)),
    ("Elu", Some(1.0), None),
    ("Softsign", None, None),
    ("Softplus", None, None),
    ("ScaledTanh", Some(0.0), Some(0.0)),
    ("Affine", Some(0.0), Some(0.0)),
];

/// One of a layer's activation functions with its parameters.
#[derive(Clone, Copy)]
struct Activation {
    op: &'static str,
    alpha: Option<f32>,
    beta: Option<f32>,
}

/// Appends the nodes computing activation `f` of `input` as `out`: the op itself with its
/// parameters as attributes (none where they are the op's defaults, so that the node fuses as
/// the plain op), or for ScaledTanh and Affine, which are no ops, `alpha * Tanh(beta * x)` and
/// `alpha * x + beta` over the scalars named beside it.
fn activate(
    steps: &mut Vec<Node>,
    f: &(Activation, Option<(String, String)>),
    input: &str,
    out: &str,
) {
    let (a, scalars) = f;
    match (a.op, scalars) {
        ("ScaledTanh", Some((alpha, beta))) => {
            let (scaled, tanh) = (format!("{out}_scaled"), format!("{out}_tanh"));
            steps.push(
                Node::new("Mul", scaled.clone())
                    .inputs([input, beta])
                    .outputs([scaled.clone()]),
            );
            steps.push(
                Node::new("Tanh", tanh.clone())
                    .inputs([scaled])
                    .outputs([tanh.clone()]),
            );
            steps.push(
                Node::new("Mul", out)
                    .inputs([tanh.as_str(), alpha])
                    .outputs([out]),
            );
        }
        ("Affine", Some((alpha, beta))) => {
            let scaled = format!("{out}_scaled");
            steps.push(
                Node::new("Mul", scaled.clone())
                    .inputs([input, alpha])
                    .outputs([scaled.clone()]),
            );
            steps.push(
                Node::new("Add", out)
                    .inputs([scaled.as_str(), beta])
                    .outputs([out]),
            );
        }
        (op, _) => {
            let mut node = Node::new(op, out).inputs([input]).outputs([out]);
            let defaults = crate::ops::activation::float_attributes(op);
            for (name, value) in [("alpha", a.alpha), ("beta", a.beta)] {
                let Some(value) = value else { continue };
                let default = defaults.iter().find(|(n, _)| *n == name).map(|(_, d)| *d);
                if default != Some(f64::from(value)) {
                    node = node.attr(name, Attr::Float(f64::from(value)));
                }
            }
            steps.push(node);
        }
    }
}

/// The nodes that replace a layer, and the constants they read.
pub(super) type Expansion = (Vec<Node>, Vec<(String, HostTensor)>);

/// Builds the nodes that compute a recurrent layer `node` (RNN, GRU or LSTM of opset 14 on,
/// or earlier ones, which differ only in attributes this reads the same way), with the
/// constants they read. `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    let cell = match node.op.as_str() {
        "RNN" => Cell::Rnn,
        "GRU" => Cell::Gru,
        "LSTM" => Cell::Lstm,
        _ => return Ok(None),
    };
    let op = node.op.clone();
    let bad =
        |msg: String| Error::Model(format!("node '{}': {op} {msg}", node.name.escape_debug()));
    let int = |name: &str, default: i64| match node.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    };
    // Bounded so that the gates' sizes (up to 8 hidden) stay far inside i64.
    let hidden = match node.attrs.get("hidden_size") {
        Some(Attr::Int(h)) if (1..=1 << 32).contains(h) => *h as usize,
        _ => return Err(bad("needs the attribute hidden_size, from 1 to 2^32".into())),
    };
    let directions: Vec<bool> = match node.attrs.get("direction") {
        None => vec![false],
        Some(Attr::String(d)) => match d.as_str() {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            other => {
                return Err(bad(format!(
                    "direction '{}' is not forward, reverse or bidirectional",
                    other.escape_debug()
                )))
            }
        },
        Some(_) => return Err(bad("direction must be a string".into())),
    };
    let layout = int("layout", 0);
    if !matches!(layout, 0 | 1) {
        return Err(bad(format!("layout {layout} is not 0 or 1")));
    }
    // LSTM's coupled input and forget gates: f = 1 - i (as onnxruntime computes it).
    let input_forget = cell == Cell::Lstm && int("input_forget", 0) != 0;
    let per_direction = cell.default_activations().len();
    let names: Vec<String> = match node.attrs.get("activations") {
        None => directions
            .iter()
            .flat_map(|_| cell.default_activations().iter().map(|a| a.to_string()))
            .collect(),
        Some(Attr::Strings(list)) if list.len() == per_direction * directions.len() => list.clone(),
        Some(_) => {
            return Err(bad(format!(
                "activations must name {} functions per direction",
                per_direction
            )))
        }
    };
    let floats = |name: &str| match node.attrs.get(name) {
        None => Ok(Vec::new()),
        Some(Attr::Floats(v)) => Ok(v.iter().map(|&x| x as f32).collect()),
        Some(Attr::Float(v)) => Ok(vec![*v as f32]),
        Some(_) => Err(bad(format!("{name} must be a list of floats"))),
    };
    // As onnxruntime reads them: the functions in order (every direction's) each take the next
    // alpha if they have one, and the next beta if they have one; the rest take their
    // defaults, and values left over are ignored.
    let (alphas, betas) = (floats("activation_alpha")?, floats("activation_beta")?);
    let (mut alphas, mut betas) = (alphas.into_iter(), betas.into_iter());
    let activations: Vec<Activation> = names
        .iter()
        .map(|a| {
            let &(op, alpha, beta) = ACTIVATIONS
                .iter()
                .find(|(known, _, _)| known.eq_ignore_ascii_case(a))
                .ok_or_else(|| {
                    let known: Vec<&str> = ACTIVATIONS.iter().map(|(n, _, _)| *n).collect();
                    bad(format!(
                        "activation '{}' is not supported (one of {known:?} is)",
                        a.escape_debug()
                    ))
                })?;
            Ok(Activation {
                op,
                alpha: alpha.map(|d| alphas.next().unwrap_or(d)),
                beta: beta.map(|d| betas.next().unwrap_or(d)),
            })
        })
        .collect::<Result<_>>()?;
    let clip = match node.attrs.get("clip") {
        None => None,
        Some(Attr::Float(c)) if *c > 0.0 => Some(*c),
        Some(_) => return Err(bad("clip must be a positive number".into())),
    };
    let linear_before_reset = int("linear_before_reset", 0) != 0;
    let input = |k: usize| node.inputs.get(k).filter(|name| !name.is_empty()).cloned();
    let (Some(x), Some(w), Some(r)) = (input(0), input(1), input(2)) else {
        return Err(bad("needs X, W and R".into()));
    };
    let (bias, lengths, initial_h, initial_c, peepholes) =
        (input(3), input(4), input(5), input(6), input(7));

    let p = |s: &str| format!("{}/{s}", node.name);
    let mut nodes: Vec<Node> = Vec::new();
    let mut constants: Vec<(String, HostTensor)> = Vec::new();
    let i64s = |v: &[i64]| HostTensor::from_vec(vec![v.len()], v);
    let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]);
    constants.push((p("axis0"), i64s(&[0])?));
    constants.push((p("axis1"), i64s(&[1])?));
    constants.push((p("one_f32"), HostTensor::from_vec(vec![], &[1f32])?));
    let g = cell.gates();
    nodes.push(super::expansion::check_inputs(
        node,
        &node.name,
        &op,
        &[
            ("directions", Attr::Int(directions.len() as i64)),
            ("gates", Attr::Int(g as i64)),
        ],
    ));
    constants.push((p("gate_sizes"), i64s(&vec![hidden as i64; g])?));
    // Time-major X and initial states.
    let xs = if layout == 1 {
        nodes.push(
            Node::new("Transpose", p("x_time_major"))
                .inputs([x.as_str()])
                .outputs([p("x_time_major")])
                .attr("perm", Attr::Ints(vec![1, 0, 2])),
        );
        p("x_time_major")
    } else {
        x.clone()
    };
    let state_major = |nodes: &mut Vec<Node>, name: Option<String>, what: &str| {
        name.map(|s| {
            if layout == 1 {
                nodes.push(
                    Node::new("Transpose", p(what))
                        .inputs([s.as_str()])
                        .outputs([p(what)])
                        .attr("perm", Attr::Ints(vec![1, 0, 2])),
                );
                p(what)
            } else {
                s
            }
        })
    };
    let initial_h = state_major(&mut nodes, initial_h, "initial_h");
    let initial_c = state_major(&mut nodes, initial_c, "initial_c");
    // 1 in X's dtype, and zero states [batch, hidden] where none are given.
    nodes.push(
        Node::new("CastLike", p("one"))
            .inputs([p("one_f32"), xs.clone()])
            .outputs([p("one")]),
    );
    nodes.push(
        Node::new("Shape", p("x_shape"))
            .inputs([xs.as_str()])
            .outputs([p("x_shape")]),
    );
    constants.push((p("batch_at"), i64s(&[1])?));
    constants.push((p("hidden"), i64s(&[hidden as i64])?));
    nodes.push(
        Node::new("Gather", p("batch"))
            .inputs([p("x_shape"), p("batch_at")])
            .outputs([p("batch")]),
    );
    nodes.push(
        Node::new("Concat", p("state_shape"))
            .inputs([p("batch"), p("hidden")])
            .outputs([p("state_shape")])
            .attr("axis", Attr::Int(0)),
    );
    nodes.push(
        Node::new("ConstantOfShape", p("zeros_f32"))
            .inputs([p("state_shape")])
            .outputs([p("zeros_f32")]),
    );
    nodes.push(
        Node::new("CastLike", p("zeros"))
            .inputs([p("zeros_f32"), xs.clone()])
            .outputs([p("zeros")]),
    );
    // With sequence_lens, step t of batch item b counts when t < L_b (a longer length counts
    // as the whole sequence): the step indices are a second scan input, so that a reversed
    // layer, which visits t from the end, keeps its initial state through the steps past L_b
    // and then runs L_b - 1 down to 0, as onnxruntime does.
    if let Some(lengths) = &lengths {
        constants.push((p("zero_i64"), scalar(0)?));
        constants.push((p("one_i64"), scalar(1)?));
        constants.push((p("steps_at"), scalar(0)?));
        nodes.push(
            Node::new("Gather", p("steps_len"))
                .inputs([p("x_shape"), p("steps_at")])
                .outputs([p("steps_len")]),
        );
        nodes.push(
            Node::new("Range", p("steps"))
                .inputs([p("zero_i64"), p("steps_len"), p("one_i64")])
                .outputs([p("steps")]),
        );
        nodes.push(
            Node::new("Cast", p("lengths"))
                .inputs([lengths.as_str()])
                .outputs([p("lengths")])
                .attr("to", Attr::String("i64".into())),
        );
    }
    if let Some(c) = clip {
        constants.push((p("clip_f32"), HostTensor::from_vec(vec![], &[c as f32])?));
        constants.push((
            p("neg_clip_f32"),
            HostTensor::from_vec(vec![], &[-c as f32])?,
        ));
        for b in ["clip", "neg_clip"] {
            nodes.push(
                Node::new("CastLike", p(b))
                    .inputs([p(&format!("{b}_f32")), xs.clone()])
                    .outputs([p(b)]),
            );
        }
    }

    // ScaledTanh's and Affine's parameters as scalars of X's dtype, which the body's Mul and
    // Add read.
    let mut parameters: Vec<Option<(String, String)>> = Vec::new();
    for (k, a) in activations.iter().enumerate() {
        if !matches!(a.op, "ScaledTanh" | "Affine") {
            parameters.push(None);
            continue;
        }
        let mut names = Vec::new();
        for (what, value) in [("alpha", a.alpha), ("beta", a.beta)] {
            let name = p(&format!("activation{k}_{what}"));
            let value = value.unwrap_or(0.0);
            constants.push((
                format!("{name}_f32"),
                HostTensor::from_vec(vec![], &[value])?,
            ));
            nodes.push(
                Node::new("CastLike", name.clone())
                    .inputs([format!("{name}_f32"), xs.clone()])
                    .outputs([name.clone()]),
            );
            names.push(name);
        }
        parameters.push(Some((names[0].clone(), names[1].clone())));
    }
    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &reverse) in directions.iter().enumerate() {
        let q = |s: &str| p(&format!("d{d}/{s}"));
        constants.push((q("index"), scalar(d as i64)?));
        // This direction's weights, one block per gate, transposed: x [batch, in] times
        // W_k' [in, hidden]. One product per gate, rather than one for all gates split after,
        // lets each gate's product compute its gate (and the state update it feeds) in its
        // epilogue: no Split of the gates in the loop.
        for (m, name) in [(&w, "w"), (&r, "r")] {
            nodes.push(
                Node::new("Gather", q(&format!("{name}_d")))
                    .inputs([m.clone(), q("index")])
                    .outputs([q(&format!("{name}_d"))]),
            );
            let blocks: Vec<String> = (0..g).map(|k| q(&format!("{name}{k}"))).collect();
            nodes.push(
                Node::new("Split", q(&format!("{name}_blocks")))
                    .inputs([q(&format!("{name}_d")), p("gate_sizes")])
                    .outputs(blocks.iter().cloned())
                    .attr("axis", Attr::Int(0)),
            );
            for block in blocks {
                nodes.push(
                    Node::new("Transpose", format!("{block}_t"))
                        .inputs([block.as_str()])
                        .outputs([format!("{block}_t")])
                        .attr("perm", Attr::Ints(vec![1, 0])),
                );
            }
        }
        // Each gate's biases Wb_k + Rb_k, added once outside the loop, except GRU's Rbh with
        // linear_before_reset, which the reset gate scales (kept apart as `rb_kept`).
        let mut rb_kept = None;
        let gate_bias: Vec<Option<String>> = match &bias {
            Some(b) => {
                nodes.push(
                    Node::new("Gather", q("b_d"))
                        .inputs([b.clone(), q("index")])
                        .outputs([q("b_d")]),
                );
                constants.push((q("bias_sizes"), i64s(&vec![hidden as i64; 2 * g])?));
                let parts: Vec<String> = (0..2 * g).map(|k| q(&format!("b{k}"))).collect();
                nodes.push(
                    Node::new("Split", q("b_split"))
                        .inputs([q("b_d"), q("bias_sizes")])
                        .outputs(parts.iter().cloned())
                        .attr("axis", Attr::Int(0)),
                );
                (0..g)
                    .map(|k| {
                        if cell == Cell::Gru && k == 2 && linear_before_reset {
                            rb_kept = Some(parts[g + k].clone());
                            return Some(parts[k].clone());
                        }
                        let sum = q(&format!("bias{k}"));
                        nodes.push(
                            Node::new("Add", sum.clone())
                                .inputs([parts[k].as_str(), &parts[g + k]])
                                .outputs([sum.clone()]),
                        );
                        Some(sum)
                    })
                    .collect()
            }
            None => vec![None; g],
        };
        let state = |nodes: &mut Vec<Node>, given: &Option<String>, what: &str| match given {
            Some(s) => {
                nodes.push(
                    Node::new("Gather", q(what))
                        .inputs([s.clone(), q("index")])
                        .outputs([q(what)]),
                );
                q(what)
            }
            None => p("zeros"),
        };
        let h0 = state(&mut nodes, &initial_h, "h0");
        let c0 = (cell == Cell::Lstm).then(|| state(&mut nodes, &initial_c, "c0"));
        let f: Vec<(Activation, Option<(String, String)>)> = (d * per_direction
            ..(d + 1) * per_direction)
            .map(|k| (activations[k], parameters[k].clone()))
            .collect();

        // The step: H (and C for LSTM) and x_t in; the new states, and H as the scan output.
        let mut steps: Vec<Node> = Vec::new();
        let binary = |steps: &mut Vec<Node>, op: &str, a: &str, b: &str, out: &str| {
            steps.push(Node::new(op, out).inputs([a, b]).outputs([out]));
        };
        // Activation `f` of `input` (clipped first with clip) as `out`.
        let clip_then = |steps: &mut Vec<Node>,
                         f: &(Activation, Option<(String, String)>),
                         input: &str,
                         out: &str| {
            let mut input = input.to_string();
            if clip.is_some() {
                let clipped = format!("{out}_clipped");
                steps.push(
                    Node::new("Clip", clipped.clone())
                        .inputs([input.as_str(), &p("neg_clip"), &p("clip")])
                        .outputs([clipped.clone()]),
                );
                input = clipped;
            }
            activate(steps, f, &input, out);
        };
        // Gate k's input term x_t W_k' (+ its biases): it reads no state, so the Scan computes
        // it for all steps at once before the loop (see graph/hoist.rs).
        let x_term = |steps: &mut Vec<Node>, k: usize| {
            let xw = format!("xw{k}");
            binary(
                steps,
                "MatMul",
                "x",
                &format!("{}_t", q(&format!("w{k}"))),
                &xw,
            );
            match &gate_bias[k] {
                Some(b) => {
                    binary(steps, "Add", &xw, b, &format!("{xw}b"));
                    format!("{xw}b")
                }
                None => xw,
            }
        };
        // Gate k's pre-activation: `h_in` R_k' plus the input term.
        let gate_sum = |steps: &mut Vec<Node>, k: usize, h_in: &str, out: &str| {
            let xk = x_term(steps, k);
            let hr = format!("hr{k}");
            binary(
                steps,
                "MatMul",
                h_in,
                &format!("{}_t", q(&format!("r{k}"))),
                &hr,
            );
            binary(steps, "Add", &hr, &xk, out);
        };
        let outputs: Vec<&str> = match cell {
            Cell::Rnn => {
                gate_sum(&mut steps, 0, "h", "s");
                clip_then(&mut steps, &f[0], "s", "h_next");
                vec!["h_next"]
            }
            Cell::Gru => {
                // Gates z, r, h. The new state is H + (1 - z) (.) (candidate - H), the op's
                // (1 - z) (.) candidate + z (.) H with each value read once, so that it is the
                // epilogue of the candidate's product; 1 - z is the epilogue of z's.
                gate_sum(&mut steps, 0, "h", "sz");
                clip_then(&mut steps, &f[0], "sz", "z");
                binary(&mut steps, "Sub", &p("one"), "z", "keep");
                gate_sum(&mut steps, 1, "h", "sr");
                clip_then(&mut steps, &f[0], "sr", "r");
                if let Some(rbh) = &rb_kept {
                    // r (.) (H Rh' + Rbh) + x Wh' + Wbh.
                    let xh = x_term(&mut steps, 2);
                    binary(&mut steps, "MatMul", "h", &q("r2_t"), "hr2");
                    binary(&mut steps, "Add", "hr2", rbh, "hr2b");
                    binary(&mut steps, "Mul", "r", "hr2b", "rhh");
                    binary(&mut steps, "Add", "rhh", &xh, "sh");
                } else if linear_before_reset {
                    // No biases: r (.) (H Rh') + x Wh'.
                    let xh = x_term(&mut steps, 2);
                    binary(&mut steps, "MatMul", "h", &q("r2_t"), "hr2");
                    binary(&mut steps, "Mul", "r", "hr2", "rhh");
                    binary(&mut steps, "Add", "rhh", &xh, "sh");
                } else {
                    // (r (.) H) Rh' + x Wh' + Wbh + Rbh: H reset first (the product's
                    // prologue).
                    binary(&mut steps, "Mul", "r", "h", "rh");
                    gate_sum(&mut steps, 2, "rh", "sh");
                }
                clip_then(&mut steps, &f[1], "sh", "candidate");
                binary(&mut steps, "Sub", "candidate", "h", "change");
                binary(&mut steps, "Mul", "keep", "change", "kept_change");
                binary(&mut steps, "Add", "h", "kept_change", "h_next");
                vec!["h_next"]
            }
            Cell::Lstm => {
                // Gates i, o, f, c. The cell state's update is the epilogue of the candidate's
                // product, H's of the output gate's.
                let (mut pi, mut pf, mut po) = (None, None, None);
                if let Some(peep) = &peepholes {
                    nodes.push(
                        Node::new("Gather", q("p_d"))
                            .inputs([peep.clone(), q("index")])
                            .outputs([q("p_d")]),
                    );
                    constants.push((q("p_sizes"), i64s(&[hidden as i64; 3])?));
                    nodes.push(
                        Node::new("Split", q("p_split"))
                            .inputs([q("p_d"), q("p_sizes")])
                            .outputs([q("pi"), q("po"), q("pf")])
                            .attr("axis", Attr::Int(0)),
                    );
                    (pi, po, pf) = (Some(q("pi")), Some(q("po")), Some(q("pf")));
                }
                let peephole = |steps: &mut Vec<Node>, s: &str, p: &Option<String>, c: &str| {
                    let Some(p) = p else {
                        return s.to_string();
                    };
                    binary(steps, "Mul", p, c, &format!("{s}_pc"));
                    binary(steps, "Add", s, &format!("{s}_pc"), &format!("{s}_p"));
                    format!("{s}_p")
                };
                gate_sum(&mut steps, 0, "h", "si");
                let si = peephole(&mut steps, "si", &pi, "c");
                clip_then(&mut steps, &f[0], &si, "i");
                if input_forget {
                    binary(&mut steps, "Sub", &p("one"), "i", "f");
                } else {
                    gate_sum(&mut steps, 2, "h", "sf");
                    let sf = peephole(&mut steps, "sf", &pf, "c");
                    clip_then(&mut steps, &f[0], &sf, "f");
                }
                gate_sum(&mut steps, 3, "h", "sc");
                clip_then(&mut steps, &f[1], "sc", "candidate");
                binary(&mut steps, "Mul", "f", "c", "kept");
                binary(&mut steps, "Mul", "i", "candidate", "added");
                binary(&mut steps, "Add", "kept", "added", "c_next");
                gate_sum(&mut steps, 1, "h", "so");
                let so = peephole(&mut steps, "so", &po, "c_next");
                clip_then(&mut steps, &f[0], &so, "o");
                // The output activation takes the cell state unclipped, as onnxruntime does.
                activate(&mut steps, &f[2], "c_next", "c_act");
                binary(&mut steps, "Mul", "o", "c_act", "h_next");
                vec!["h_next", "c_next"]
            }
        };
        let outputs: Vec<String> = if lengths.is_some() {
            // Past its length, an item keeps its states and outputs zeros.
            steps.push(
                Node::new("Less", "counts")
                    .inputs(["t", &p("lengths")])
                    .outputs(["counts"]),
            );
            steps.push(
                Node::new("Unsqueeze", "counts_rows")
                    .inputs(["counts", &p("axis1")])
                    .outputs(["counts_rows"]),
            );
            steps.push(
                Node::new("Where", "y")
                    .inputs(["counts_rows", "h_next", &p("zeros")])
                    .outputs(["y"]),
            );
            outputs
                .iter()
                .zip(["h", "c"])
                .map(|(next, old)| {
                    let kept = format!("{next}_kept");
                    steps.push(
                        Node::new("Where", kept.clone())
                            .inputs(["counts_rows", next, old])
                            .outputs([kept.clone()]),
                    );
                    kept
                })
                .collect()
        } else {
            steps.push(Node::new("Identity", "y").inputs(["h_next"]).outputs(["y"]));
            outputs.iter().map(|o| o.to_string()).collect()
        };
        // Inputs of X's dtype, whichever it is: declared without one.
        let mut body = Graph::new();
        let names: &[&str] = if cell == Cell::Lstm {
            &["h", "c", "x"]
        } else {
            &["h", "x"]
        };
        for name in names {
            body.inputs.push(ValueInfo {
                name: name.to_string(),
                dtype: None,
                shape: Some(vec![None, None]),
                kind: Default::default(),
            });
        }
        if lengths.is_some() {
            body.inputs.push(ValueInfo {
                name: "t".into(),
                dtype: Some(crate::DType::I64),
                shape: Some(vec![]),
                kind: Default::default(),
            });
        }
        for s in steps {
            body = body.node(s);
        }
        for o in outputs.iter().map(String::as_str).chain(["y"]) {
            body = body.output(o);
        }
        let states: Vec<String> = [Some(h0), c0].into_iter().flatten().collect();
        let finals: Vec<String> = ["h_n", "c_n"][..states.len()]
            .iter()
            .map(|s| q(s))
            .collect();
        let scanned: Vec<String> = [Some(xs.clone()), lengths.as_ref().map(|_| p("steps"))]
            .into_iter()
            .flatten()
            .collect();
        let mut scan = Node::new("Scan", q("scan"))
            .inputs(states.iter().cloned().chain(scanned.iter().cloned()))
            .outputs(finals.iter().cloned().chain([q("y")]))
            .attr("body", Attr::Graph(Box::new(body)))
            .attr("num_scan_inputs", Attr::Int(scanned.len() as i64));
        if reverse {
            scan = scan
                .attr("scan_input_directions", Attr::Ints(vec![1; scanned.len()]))
                .attr("scan_output_directions", Attr::Ints(vec![1]));
        }
        nodes.push(scan);
        ys.push(q("y"));
        hs.push(finals[0].clone());
        if cell == Cell::Lstm {
            cs.push(finals[1].clone());
        }
    }
    // Y [seq, directions, batch, hidden] (layout 1: [batch, seq, directions, hidden]);
    // Y_h and Y_c [directions, batch, hidden] (layout 1: [batch, directions, hidden]).
    let gather_out =
        |nodes: &mut Vec<Node>, parts: &[String], axis: i64, out: &str, perm: &[i64]| {
            let axes = if axis == 0 { p("axis0") } else { p("axis1") };
            let expanded: Vec<String> = parts
                .iter()
                .map(|part| {
                    let e = format!("{part}_expanded");
                    nodes.push(
                        Node::new("Unsqueeze", e.clone())
                            .inputs([part.clone(), axes.clone()])
                            .outputs([e.clone()]),
                    );
                    e
                })
                .collect();
            let joined = if layout == 1 {
                format!("{out}/joined")
            } else {
                out.to_string()
            };
            nodes.push(
                Node::new("Concat", format!("{out}/concat"))
                    .inputs(expanded)
                    .outputs([joined.clone()])
                    .attr("axis", Attr::Int(axis)),
            );
            if layout == 1 {
                nodes.push(
                    Node::new("Transpose", format!("{out}/layout"))
                        .inputs([joined])
                        .outputs([out])
                        .attr("perm", Attr::Ints(perm.to_vec())),
                );
            }
        };
    let named = |k: usize| node.outputs.get(k).filter(|o| !o.is_empty()).cloned();
    if let Some(y) = named(0) {
        gather_out(&mut nodes, &ys, 1, &y, &[2, 0, 1, 3]);
    }
    if let Some(yh) = named(1) {
        gather_out(&mut nodes, &hs, 0, &yh, &[1, 0, 2]);
    }
    if let Some(yc) = named(2) {
        if cell != Cell::Lstm {
            return Err(bad("has no third output".into()));
        }
        gather_out(&mut nodes, &cs, 0, &yc, &[1, 0, 2]);
    }
    Ok(Some((nodes, constants)))
}
