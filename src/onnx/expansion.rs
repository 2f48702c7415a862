//! A builder of the nodes that replace an ONNX node defined by other ops (its expansion).

use super::recurrent::Expansion;
use crate::graph::{Attr, Graph, Node, ValueInfo};
use crate::{Error, HostTensor, Result};

/// Builds the nodes of one op defined by others; `None` for every other op.
pub(super) type Expander = fn(&Node) -> Result<Option<Expansion>>;

/// The error for `node`: its name (escaped) and op, then `msg`.
pub(super) fn node_error(node: &Node, msg: impl std::fmt::Display) -> Error {
    Error::Model(format!(
        "node '{}': {} {msg}",
        node.name.escape_debug(),
        node.op
    ))
}

/// The node's integer attribute `name`, `None` when absent; an error when not an integer.
pub(super) fn int_attr(node: &Node, name: &str) -> Result<Option<i64>> {
    match node.attrs.get(name) {
        None => Ok(None),
        Some(Attr::Int(v)) => Ok(Some(*v)),
        Some(_) => Err(node_error(node, format!("{name} must be an integer"))),
    }
}

/// The node, named `name` (an error then names the node being expanded), that checks
/// `node`'s inputs against the rules of `op` while planning (`CheckInputs`): with the node's
/// attributes those rules read and the counts `given`. It goes before the expansion's nodes,
/// which would otherwise refuse a broken rule with an inner node's message, or compute
/// something else where they accept the shapes.
pub(super) fn check_inputs(node: &Node, name: &str, op: &str, given: &[(&str, Attr)]) -> Node {
    let mut check = Node::new("CheckInputs", name)
        .inputs(node.inputs.iter().map(String::as_str))
        .outputs([format!("{name}/inputs_checked")])
        .attr("op", Attr::String(op.into()));
    for key in crate::graph::input_rules::ATTRS {
        if let Some(v) = node.attrs.get(*key).filter(|_| *key != "op") {
            check = check.attr(*key, v.clone());
        }
    }
    for (key, v) in given {
        check = check.attr(*key, v.clone());
    }
    check
}

/// Names, nodes and constants of one expansion.
pub(super) struct Builder {
    prefix: String,
    nodes: Vec<Node>,
    constants: Vec<(String, HostTensor)>,
}

impl Builder {
    /// A builder for the nodes replacing `node`, whose names start with the node's name (or,
    /// for a node without one, its op and its first output).
    pub(super) fn new(node: &Node, first_output: &str) -> Builder {
        let prefix = if node.name.is_empty() {
            format!("{}:{first_output}", node.op)
        } else {
            node.name.clone()
        };
        Builder {
            prefix,
            nodes: Vec::new(),
            constants: Vec::new(),
        }
    }

    /// Puts first (before every node built) the node that checks `node`'s inputs against
    /// the rules of `op` (see [`check_inputs`]).
    pub(super) fn check_inputs(&mut self, node: &Node, op: &str, given: &[(&str, Attr)]) {
        let check = check_inputs(node, &self.prefix, op, given);
        self.nodes.insert(0, check);
    }

    /// Adds, where it stands among the nodes built, the node that checks `inputs` (values of
    /// this expansion standing for `node`'s, in its order) against the rules of `op`: for
    /// rules on inputs that are not tensors until an inner node makes them so (strings mapped
    /// to ids).
    pub(super) fn check_inputs_of(&mut self, node: &Node, op: &str, inputs: &[&str]) {
        let mut standing = node.clone();
        standing.inputs = inputs.iter().map(|s| s.to_string()).collect();
        let check = check_inputs(&standing, &self.prefix, op, &[]);
        self.nodes.push(check);
    }

    /// The nodes and constants built.
    pub(super) fn finish(self) -> Expansion {
        (self.nodes, self.constants)
    }

    /// A builder for a subgraph of this expansion (an If's branch, a Scan's body): its names
    /// start with this one's and `part`, so they never meet the enclosing graph's.
    pub(super) fn child(&self, part: &str) -> Builder {
        Builder {
            prefix: self.name(part),
            nodes: Vec::new(),
            constants: Vec::new(),
        }
    }

    /// The nodes built, as a subgraph reading `inputs` and giving `outputs` (by name: their
    /// types and shapes are what the enclosing graph gives and the nodes make). Its constants
    /// go to `parent`'s graph, which the subgraph reads them from: a branch planned on every
    /// run then makes no slots for them.
    pub(super) fn into_branch(
        self,
        parent: &mut Builder,
        inputs: &[&str],
        outputs: &[&str],
    ) -> Graph {
        parent.constants.extend(self.constants);
        let mut graph = Graph::new();
        graph.inputs = inputs.iter().map(|n| ValueInfo::named(*n)).collect();
        graph.nodes = self.nodes;
        graph.outputs = outputs.iter().map(|n| ValueInfo::named(*n)).collect();
        graph
    }

    pub(super) fn name(&self, s: &str) -> String {
        format!("{}/{s}", self.prefix)
    }

    /// Adds `op` on `inputs` with `attrs`, writing this expansion's value `out`; returns its
    /// name.
    pub(super) fn op(
        &mut self,
        op: &str,
        out: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
    ) -> String {
        let out = self.name(out);
        self.op_to(op, &out, inputs, attrs)
    }

    /// [`Self::op`] writing the value named `out` as it is (one of the node's outputs).
    pub(super) fn op_to(
        &mut self,
        op: &str,
        out: &str,
        inputs: &[&str],
        attrs: &[(&str, Attr)],
    ) -> String {
        let out = out.to_string();
        let mut node = Node::new(op, out.as_str())
            .inputs(inputs.iter().copied())
            .outputs([out.as_str()]);
        for (k, v) in attrs {
            node = node.attr(*k, v.clone());
        }
        // Expansions spell shapes out from the values' dims: a 0 there is an empty axis,
        // not "copy the input's dim" (which an input of another rank may not even have).
        if op == "Reshape" && !node.attrs.contains_key("allowzero") {
            node = node.attr("allowzero", Attr::Int(1));
        }
        self.nodes.push(node);
        out
    }

    /// Adds the check that each of `values` (i32 or i64) lies in `bounds[0]..=bounds[1]` or
    /// is one of `allowed` (i64), for a rule on `op`'s input `input` whose values may be
    /// computed on the GPU, where no kernel of their readers checks them (`CheckValues`):
    /// the run fails on the first value that breaks it with `message` (`{i}`: the value's
    /// position, `{v}`: the value, `{b0}`, `{b1}`, ...: the elements of `bounds`, which must be
    /// known while planning, as shapes are). Values known while planning are checked there,
    /// at no cost on the GPU. Its node comes before the nodes added after it, so its report
    /// comes before any of theirs.
    pub(super) fn check_values(
        &mut self,
        (op, input): (&str, &str),
        message: &str,
        values: &str,
        bounds: &str,
        allowed: Option<&str>,
    ) {
        let attrs = [
            ("op", Attr::String(op.into())),
            ("input", Attr::String(input.into())),
            ("message", Attr::String(message.into())),
        ];
        let mut inputs = vec![values, bounds];
        inputs.extend(allowed);
        // Named as the op's node, as its CheckInputs is: an error names the op's node.
        let mut node = Node::new("CheckValues", self.prefix.as_str())
            .inputs(inputs)
            .outputs([self.name(&format!("{input}_checked"))]);
        for (k, v) in attrs {
            node = node.attr(k, v);
        }
        self.nodes.push(node);
    }

    /// The bounds of [`Builder::check_values`] for positions in `0..n` (`n`: one i64 known
    /// while planning, a dim): `[0, n - 1, n]`, so that a message names `n` as `{b2}`.
    pub(super) fn positions_below(&mut self, name: &str, n: &str) -> Result<String> {
        let zero = self.i64s(&format!("{name}_first"), &[0])?;
        let one = self.i64s(&format!("{name}_one"), &[1])?;
        let last = self.op("Sub", &format!("{name}_last"), &[n, &one], &[]);
        Ok(self.op(
            "Concat",
            name,
            &[&zero, &last, n],
            &[("axis", Attr::Int(0))],
        ))
    }

    pub(super) fn i64s(&mut self, name: &str, v: &[i64]) -> Result<String> {
        let name = self.name(name);
        self.constants
            .push((name.clone(), HostTensor::from_vec(vec![v.len()], v)?));
        Ok(name)
    }

    /// A constant of this expansion.
    pub(super) fn constant(&mut self, name: &str, value: HostTensor) -> String {
        let name = self.name(name);
        self.constants.push((name.clone(), value));
        name
    }

    pub(super) fn f32_scalar(&mut self, name: &str, v: f32) -> Result<String> {
        let name = self.name(name);
        self.constants
            .push((name.clone(), HostTensor::from_vec(vec![], &[v])?));
        Ok(name)
    }

    /// The shape `[-1, 1, ..., 1]` with one entry per axis of `x` less `fewer`: a vector
    /// reshaped to it lines up with `x`'s first axis (with `fewer` 1, with the second axis of
    /// a tensor of `x`'s rank, as a per-channel kernel vector does with the output's
    /// channels). Made while planning, from `x`'s shape.
    pub(super) fn leading_axis_shape(&mut self, what: &str, x: &str, fewer: i64) -> Result<String> {
        let shape = self.op("Shape", &format!("{what}_of"), &[x], &[]);
        let rank = self.op("Shape", &format!("{what}_rank"), &[&shape], &[]);
        let drop = self.i64s(&format!("{what}_drop"), &[1 + fewer])?;
        let rest = self.op("Sub", &format!("{what}_rest"), &[&rank, &drop], &[]);
        let one = HostTensor::from_vec(vec![1], &[1i64])?;
        let ones = self.op(
            "ConstantOfShape",
            &format!("{what}_ones"),
            &[&rest],
            &[("value", Attr::Tensor(one))],
        );
        let minus = self.i64s(&format!("{what}_minus_one"), &[-1])?;
        Ok(self.op("Concat", what, &[&minus, &ones], &[("axis", Attr::Int(0))]))
    }

    /// `Shape` of `x` from axis `start` to `end`.
    pub(super) fn dims(&mut self, out: &str, x: &str, start: i64, end: Option<i64>) -> String {
        let mut attrs = vec![("start", Attr::Int(start))];
        if let Some(end) = end {
            attrs.push(("end", Attr::Int(end)));
        }
        self.op("Shape", out, &[x], &attrs)
    }

    /// The product of `x`'s dims `start..end` (1 for none), as a 1-element i64 tensor: a
    /// reshape's size spelled out where -1 would be undetermined (another dim 0).
    pub(super) fn dims_product(
        &mut self,
        out: &str,
        x: &str,
        start: i64,
        end: Option<i64>,
    ) -> String {
        let dims = self.dims(&format!("{out}_dims"), x, start, end);
        self.op("ReduceProd", out, &[&dims], &[])
    }

    /// A 3-D `[batch, sequence, heads * head size]` value `x` as 4-D `[batch, heads, sequence,
    /// head size]`. A transpose that moves nothing (a view) comes first: an error at run time
    /// when `x` is not 3-D, where the reshape would read it wrong (the expansions tell 3-D
    /// inputs by attributes, not ranks).
    pub(super) fn split_heads(&mut self, x: &str, heads: i64, what: &str) -> Result<String> {
        let checked = self.op(
            "Transpose",
            &format!("{what}_is_3d"),
            &[x],
            &[("perm", Attr::Ints(vec![0, 1, 2]))],
        );
        // [batch, sequence, heads, hidden / heads], spelled out: -1 would be undetermined for
        // an empty batch or sequence.
        let lead = self.dims(&format!("{what}_lead"), &checked, 0, Some(2));
        let hidden = self.dims(&format!("{what}_hidden"), &checked, 2, Some(3));
        let heads_t = self.i64s(&format!("{what}_head_count"), &[heads])?;
        let size = self.op(
            "Div",
            &format!("{what}_head_size"),
            &[&hidden, &heads_t],
            &[],
        );
        let shape = self.op(
            "Concat",
            &format!("{what}_split"),
            &[&lead, &heads_t, &size],
            &[("axis", Attr::Int(0))],
        );
        let r = self.op(
            "Reshape",
            &format!("{what}_by_head"),
            &[&checked, &shape],
            &[],
        );
        Ok(self.op(
            "Transpose",
            &format!("{what}4"),
            &[&r],
            &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        ))
    }

    /// The inverse of [`Self::split_heads`], written to the node's output `out`.
    pub(super) fn merge_heads(&mut self, x4: &str, out: &str) -> Result<()> {
        let t = self.op(
            "Transpose",
            "merge_t",
            &[x4],
            &[("perm", Attr::Ints(vec![0, 2, 1, 3]))],
        );
        let lead = self.dims("merge_lead", &t, 0, Some(2));
        let hidden = self.dims_product("merge_hidden", &t, 2, None);
        let merge = self.op(
            "Concat",
            "merge",
            &[&lead, &hidden],
            &[("axis", Attr::Int(0))],
        );
        self.op_to("Reshape", out, &[&t, &merge], &[]);
        Ok(())
    }
}
