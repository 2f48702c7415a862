//! Gemm nodes rewritten as MatMul (and Add) where that is the same computation, before a graph
//! runs: a MatMul can head a fused element-wise program and a Scan body's MatMul of a scan
//! input by a constant moves out of the loop (see `fuse.rs` and `hoist.rs`), where a Gemm does
//! neither. PyTorch writes `nn.Linear` on 2-D inputs as Gemm with `transB = 1`, so a tanh cell
//! under `torch.scan` ran 4 dispatches per step as Gemms and runs 2 as MatMuls.
//!
//! Only Gemms whose rewrite cannot change a result or an error are taken: `alpha` and `beta` 1
//! (absent or 1.0: `x * 1` is `x`, so the sums are the same bits), `transA` 0, A certain to be
//! 2-D and of B's dtype before the graph runs (a Gemm refuses other ranks and dtypes, a
//! MatMul would refuse or batch them differently): a declared input, or the output of a
//! Flatten, a Gemm, an activation, a Cast or a Reshape to a constant shape of a value of known
//! dtype (CNN classifiers, MLPs; `learn`), B a
//! constant of rank 2 of A's dtype (with `transB` it is transposed here, once, into a new
//! constant), and C absent or a constant of that dtype of shape `[]`, `[1]`, `[N]`, `[1, 1]` or
//! `[1, N]` (a broadcast Add then gives what Gemm's unidirectional broadcast gives).

use std::collections::HashMap;
use std::sync::Arc;

use super::{Attr, Graph, Node, ValueKind};
use crate::{DType, HostTensor};

/// The names a graph defines: its constants (`Some`), and its inputs and node outputs
/// (`None`: not constants, and they hide an enclosing graph's constant of the same name).
type Scope = HashMap<String, Option<Arc<HostTensor>>>;

fn scope_of(graph: &Graph) -> Scope {
    let mut scope: Scope = graph
        .constants
        .iter()
        .map(|(n, t)| (n.clone(), Some(t.clone())))
        .collect();
    let defined = graph
        .inputs
        .iter()
        .map(|i| &i.name)
        .chain(graph.nodes.iter().flat_map(|nd| &nd.outputs));
    for name in defined {
        scope.insert(name.clone(), None);
    }
    scope
}

/// `graph` with its Gemms (and those of its subgraphs) rewritten where allowed (see the
/// module's text).
pub(crate) fn gemms_as_matmuls(mut graph: Graph) -> Graph {
    lower(&mut graph, &[]);
    graph
}

/// Rewrites the Gemms of `graph`; `outer` holds the names of the enclosing graphs, innermost
/// first.
fn lower(graph: &mut Graph, outer: &[&Scope]) {
    let own = scope_of(graph);
    let mut scopes: Vec<&Scope> = vec![&own];
    scopes.extend_from_slice(outer);
    for node in &mut graph.nodes {
        for attr in node.attrs.values_mut() {
            if let Attr::Graph(body) = attr {
                lower(body, &scopes);
            }
        }
    }
    let find = |name: &str| -> Option<Arc<HostTensor>> {
        scopes
            .iter()
            .find_map(|s| s.get(name))
            .and_then(|c| c.clone())
    };
    let mut taken: std::collections::HashSet<String> = own.keys().cloned().collect();
    let mut fresh = |base: String| {
        let mut name = base.clone();
        let mut k = 1;
        while taken.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        taken.insert(name.clone());
        name
    };
    // B's transposed copies, by B's name (Gemms sharing a weight share its copy).
    let mut transposed: HashMap<String, String> = HashMap::new();
    let mut known = declared(graph);
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    for node in std::mem::take(&mut graph.nodes) {
        learn(&mut known, &node, &find);
        let Some(plan) = plan(&known, &node, &find) else {
            nodes.push(node);
            continue;
        };
        let b = if plan.trans_b {
            match transposed.get(&node.inputs[1]) {
                Some(name) => name.clone(),
                None => {
                    let name = fresh(format!("{}__transposed", node.inputs[1]));
                    graph
                        .constants
                        .push((name.clone(), Arc::new(transpose(&plan.b))));
                    transposed.insert(node.inputs[1].clone(), name.clone());
                    name
                }
            }
        } else {
            node.inputs[1].clone()
        };
        let y = node.outputs[0].clone();
        match node.inputs.get(2).filter(|c| !c.is_empty()) {
            None => nodes.push(
                Node::new("MatMul", node.name.clone())
                    .inputs([node.inputs[0].clone(), b])
                    .outputs([y]),
            ),
            Some(c) => {
                let product = fresh(format!("{y}__product"));
                nodes.push(
                    Node::new("MatMul", node.name.clone())
                        .inputs([node.inputs[0].clone(), b])
                        .outputs([product.clone()]),
                );
                nodes.push(
                    Node::new("Add", format!("{} (its C)", node.name))
                        .inputs([product, c.clone()])
                        .outputs([y]),
                );
            }
        }
    }
    graph.nodes = nodes;
}

/// What is certain about a tensor of a graph before it runs: its dtype, and its rank where
/// that is certain too.
#[derive(Clone, Copy)]
struct Fact {
    rank: Option<usize>,
    dtype: DType,
}

type Known = HashMap<String, Fact>;

/// The graph's declared tensor inputs of known dtype, and its constants.
fn declared(graph: &Graph) -> Known {
    let inputs = graph.inputs.iter().filter_map(|i| {
        let rank = i.shape.as_ref().map(Vec::len);
        (i.kind == ValueKind::Tensor).then_some((
            i.name.clone(),
            Fact {
                rank,
                dtype: i.dtype?,
            },
        ))
    });
    let constants = graph.constants.iter().map(|(n, t)| {
        let fact = Fact {
            rank: Some(t.shape.len()),
            dtype: t.dtype,
        };
        (n.clone(), fact)
    });
    inputs.chain(constants).collect()
}

/// Ops of one input whose output has the input's shape (and dtype) whenever they succeed: the
/// activations in front of and between the layers of exported networks.
const SAME_SHAPE: &[&str] = &[
    "Abs",
    "Celu",
    "Dropout",
    "Elu",
    "Erf",
    "Exp",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "Mish",
    "Neg",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Swish",
    "Tanh",
    "ThresholdedRelu",
];

/// Ops whose first output has the dtype of their first input whenever they succeed (besides
/// those above): the layers of CNNs and MLPs, shape ops and reductions.
const SAME_TYPE: &[&str] = &[
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Clip",
    "Concat",
    "Conv",
    "ConvTranspose",
    "Div",
    "Expand",
    "Flatten",
    "Gather",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "InstanceNormalization",
    "LayerNormalization",
    "LpNormalization",
    "LRN",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mul",
    "Pad",
    "Pow",
    "PRelu",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Reshape",
    "Resize",
    "Slice",
    "Split",
    "Squeeze",
    "Sub",
    "Sum",
    "Tile",
    "Transpose",
    "Unsqueeze",
];

/// Ops (besides those of one input above) whose first output has the rank of their first
/// input whenever they succeed: normalizations, windows, and shape ops that keep the axes.
const SAME_RANK: &[&str] = &[
    "AveragePool",
    "BatchNormalization",
    "Clip",
    "Concat",
    "Conv",
    "ConvTranspose",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "InstanceNormalization",
    "LayerNormalization",
    "LpNormalization",
    "LRN",
    "MaxPool",
    "Pad",
    "Resize",
    "Slice",
    "Split",
    "Tile",
    "Transpose",
];

/// Adds what `node` makes certain about its first output, from the node alone and what is
/// certain about its first input: its dtype (kept by the ops above, Cast's `to`), and its
/// rank where that follows (a Flatten and a Gemm are 2-D, the activations and the ops of
/// `SAME_RANK` keep their input's, a Gather's is its data's and indices' less one, a Reshape
/// to a constant shape has that shape's length).
fn learn(known: &mut Known, node: &Node, find: &dyn Fn(&str) -> Option<Arc<HostTensor>>) {
    let (Some(x), Some(y)) = (node.inputs.first(), node.outputs.first()) else {
        return;
    };
    let Some(&Fact { rank, dtype }) = known.get(x) else {
        return;
    };
    let op = node.op.as_str();
    let dtype = match op {
        "Cast" => match node.attrs.get("to") {
            Some(Attr::String(to)) => DType::from_name(to),
            _ => None,
        },
        _ if SAME_SHAPE.contains(&op) || SAME_TYPE.contains(&op) => Some(dtype),
        _ => None,
    };
    let rank = match op {
        "Flatten" | "Gemm" => Some(2),
        "Cast" => rank,
        _ if SAME_SHAPE.contains(&op) || SAME_RANK.contains(&op) => rank,
        // Data's axes with the gathered one replaced by the indices' (a scalar index drops it).
        "Gather" => node
            .inputs
            .get(1)
            .and_then(|i| known.get(i))
            .and_then(|i| (rank? + i.rank?).checked_sub(1)),
        "Reshape" => node
            .inputs
            .get(1)
            .and_then(|s| find(s))
            .filter(|s| s.shape.len() == 1)
            .map(|s| s.shape[0]),
        _ => None,
    };
    if let Some(dtype) = dtype {
        known.insert(y.clone(), Fact { rank, dtype });
    }
}

/// What a Gemm that may be rewritten needs: its B and whether it is transposed.
struct Plan {
    b: Arc<HostTensor>,
    trans_b: bool,
}

fn plan(
    known: &Known,
    node: &Node,
    find: &dyn Fn(&str) -> Option<Arc<HostTensor>>,
) -> Option<Plan> {
    if node.op != "Gemm" || !(2..=3).contains(&node.inputs.len()) || node.outputs.len() != 1 {
        return None;
    }
    let int = |name: &str| match node.attrs.get(name) {
        None => Some(0),
        Some(Attr::Int(v)) => Some(*v),
        Some(_) => None,
    };
    let one = |name: &str| match node.attrs.get(name) {
        None => true,
        Some(Attr::Float(v)) => *v == 1.0,
        Some(_) => false,
    };
    let allowed = ["alpha", "beta", "transA", "transB"];
    if node.attrs.keys().any(|k| !allowed.contains(&k.as_str()))
        || !one("alpha")
        || !one("beta")
        || int("transA")? != 0
    {
        return None;
    }
    let trans_b = match int("transB")? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let a = known.get(&node.inputs[0])?;
    let a_dtype = a.dtype;
    if a.rank != Some(2) || node.inputs[1].is_empty() {
        return None;
    }
    let b = find(&node.inputs[1])?;
    if b.shape.len() != 2 || b.dtype != a_dtype {
        return None;
    }
    let n = b.shape[usize::from(!trans_b)];
    if let Some(c) = node.inputs.get(2).filter(|c| !c.is_empty()) {
        let c = find(c)?;
        let fits = match c.shape.as_slice() {
            [] => true,
            [len] | [1, len] => *len == 1 || *len == n,
            _ => false,
        };
        if !fits || c.dtype != a_dtype {
            return None;
        }
    }
    Some(Plan { b, trans_b })
}

/// A 2-D host tensor with its axes swapped.
fn transpose(t: &HostTensor) -> HostTensor {
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let e = t.dtype.size();
    let mut data = vec![0u8; t.data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let from = (r * cols + c) * e;
            let to = (c * rows + r) * e;
            data[to..to + e].copy_from_slice(&t.data[from..from + e]);
        }
    }
    HostTensor {
        dtype: t.dtype,
        shape: vec![cols, rows],
        data,
    }
}
