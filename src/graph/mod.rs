//! Graphs: the representation shared by the JSON loader (`docs/graph-format.md`) and the Rust
//! builder API (named values, constants, inputs, nodes and outputs), the executor, the binding
//! of ops to nodes, and Scan. The top layer: uses ops, nothing uses it but the front ends.

use std::collections::{BTreeMap, HashSet};

use crate::{DType, Error, HostTensor, Result};

pub(crate) use crate::{FastMap, FastSet};

pub(crate) mod control;
pub(crate) mod exec;
pub(crate) mod fuse;
pub(crate) mod hoist;
pub(crate) mod input_rules;
pub mod json;
pub(crate) mod lower;
pub(crate) mod random;
pub(crate) mod recurrence;
pub(crate) mod registry;
pub(crate) mod scan;
pub(crate) mod sequence;
pub(crate) mod strings;

pub use exec::Session;
pub use random::is_random;
pub use registry::{is_op, op_names};

/// What a graph input or output holds: a tensor (the default), an ONNX sequence of tensors,
/// an ONNX optional (of a tensor or of a sequence), which may hold nothing, a tensor of
/// strings, a sequence of maps or one map (these three held on the host only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueKind {
    /// A tensor of numbers or bools.
    #[default]
    Tensor,
    /// A sequence of tensors (ONNX `seq(tensor)`).
    Sequence,
    /// An optional tensor: a tensor or nothing.
    OptionalTensor,
    /// An optional sequence: a sequence of tensors or nothing.
    OptionalSequence,
    /// A tensor of strings (ONNX `tensor(string)`).
    Strings,
    /// A sequence of maps from strings or integers to floats (ONNX-ML's ZipMap output).
    Maps,
    /// One map of these types (DictVectorizer's and CastMap's input).
    Map(crate::MapType),
}

impl ValueKind {
    /// The kind as messages name it (`a tensor`, `a sequence`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Tensor => "a tensor",
            ValueKind::Sequence => "a sequence",
            ValueKind::OptionalTensor => "an optional tensor",
            ValueKind::OptionalSequence => "an optional sequence",
            ValueKind::Strings => "a string tensor",
            ValueKind::Maps => "a sequence of maps",
            ValueKind::Map(_) => "a map",
        }
    }
}

/// A graph input or output, with what it must be (checked at run time where given).
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    /// The value's name in the graph.
    pub name: String,
    /// For a sequence (or an optional), of its tensors.
    pub dtype: Option<DType>,
    /// `None`: any shape; a `None` dimension: any size. For a sequence, of each of its tensors.
    pub shape: Option<Vec<Option<usize>>>,
    /// Whether it is a tensor, a sequence, an optional, strings or maps.
    pub kind: ValueKind,
}

/// A value handed to or from [`Session::run_values`]: a tensor, a sequence of tensors (ONNX
/// `seq(tensor)`), an optional that holds nothing (an optional that holds a value is that
/// value), a tensor of strings (ONNX `tensor(string)`), a sequence of maps (ONNX
/// `seq(map(K, float))`), or one map (ONNX-ML `map(K, V)`).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A tensor of numbers or bools.
    Tensor(HostTensor),
    /// A sequence of tensors, in order.
    Sequence(Vec<HostTensor>),
    /// An optional that holds nothing.
    None,
    /// A tensor of strings.
    Strings(crate::StringTensor),
    /// A sequence of maps.
    Maps(crate::MapSequence),
    /// One map.
    Map(crate::Map),
}

impl Value {
    /// What the value is, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "a tensor",
            Value::Sequence(_) => "a sequence",
            Value::None => "an empty optional",
            Value::Strings(_) => "a string tensor",
            Value::Maps(_) => "a sequence of maps",
            Value::Map(_) => "a map",
        }
    }
}

impl ValueInfo {
    /// A tensor input or output of this name, of any dtype and shape.
    pub fn named(name: impl Into<String>) -> ValueInfo {
        ValueInfo {
            name: name.into(),
            dtype: None,
            shape: None,
            kind: ValueKind::Tensor,
        }
    }

    /// Checks a value against this declaration; `what` says where it came from.
    pub(crate) fn check(&self, what: &str, dtype: DType, shape: &[usize]) -> Result<()> {
        if let Some(d) = self.dtype {
            if d != dtype {
                return Err(Error::Graph(format!(
                    "{what} '{}' is declared {d} but is {dtype}",
                    self.name
                )));
            }
        }
        if let Some(s) = &self.shape {
            let fits = s.len() == shape.len()
                && s.iter()
                    .zip(shape)
                    .all(|(want, &got)| want.is_none_or(|w| w == got));
            if !fits {
                let shown: Vec<String> = s
                    .iter()
                    .map(|d| d.map_or("null".to_string(), |d| d.to_string()))
                    .collect();
                return Err(Error::Graph(format!(
                    "{what} '{}' is declared with shape [{}] but has shape {shape:?}",
                    self.name,
                    shown.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// A node attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// An integer (ONNX `INT`).
    Int(i64),
    /// A list of integers (ONNX `INTS`).
    Ints(Vec<i64>),
    /// A float (ONNX `FLOAT`, widened).
    Float(f64),
    /// A list of floats (ONNX `FLOATS`).
    Floats(Vec<f64>),
    /// A string (ONNX `STRING`).
    String(String),
    /// A list of strings (ONNX `STRINGS`).
    Strings(Vec<String>),
    /// A tensor (ONNX Constant's and ConstantOfShape's `value`).
    Tensor(HostTensor),
    /// A subgraph: a Scan's or Loop's body, an If's branch (ONNX `GRAPH`).
    Graph(Box<Graph>),
}

/// Cast's (and CastLike's) `saturate` (an int, 1 by default), `round_mode` (`up`, the
/// default, `down` or `nearest`) and `quantize` (an int, 0 by default) as a
/// [`crate::CastMode`].
pub(crate) fn cast_mode(node: &Node) -> Result<crate::CastMode> {
    let mut mode = crate::CastMode::default();
    match node.attrs.get("saturate") {
        None => {}
        Some(Attr::Int(v)) => mode.saturate = *v != 0,
        Some(_) => {
            return Err(Error::invalid(
                "Cast",
                "saturate",
                "saturate must be an integer (0 or 1)",
            ))
        }
    }
    match node.attrs.get("quantize") {
        None => {}
        Some(Attr::Int(v)) => mode.quantize = *v != 0,
        Some(_) => {
            return Err(Error::invalid(
                "Cast",
                "quantize",
                "quantize must be an integer (0 or 1)",
            ))
        }
    }
    match node.attrs.get("round_mode") {
        None => {}
        Some(Attr::String(s)) => {
            mode.round = crate::Round::from_name(s).ok_or_else(|| {
                Error::invalid(
                    "Cast",
                    "round_mode",
                    format!(
                        "round_mode is '{}', not up, down or nearest",
                        s.escape_debug()
                    ),
                )
            })?
        }
        Some(_) => {
            return Err(Error::invalid(
                "Cast",
                "round_mode",
                "round_mode must be a string (up, down or nearest)",
            ))
        }
    }
    Ok(mode)
}

/// One op application.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The op's name (`Add`, `Scan`, `ai.onnx.ml.TreeEnsemble`, ...).
    pub op: String,
    /// The node's name, which errors name.
    pub name: String,
    /// Value names; `""` marks an optional input left out.
    pub inputs: Vec<String>,
    /// The names of the values it defines, in the op's output order.
    pub outputs: Vec<String>,
    /// Its attributes by name.
    pub attrs: BTreeMap<String, Attr>,
}

impl Node {
    /// A node applying `op`, named `name`, with no inputs, outputs or attributes yet.
    pub fn new(op: impl Into<String>, name: impl Into<String>) -> Node {
        Node {
            op: op.into(),
            name: name.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: BTreeMap::new(),
        }
    }
    /// Sets the names of the values it reads.
    pub fn inputs<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Node {
        self.inputs = names.into_iter().map(Into::into).collect();
        self
    }
    /// Sets the names of the values it defines.
    pub fn outputs<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Node {
        self.outputs = names.into_iter().map(Into::into).collect();
        self
    }
    /// Sets attribute `name`.
    pub fn attr(mut self, name: impl Into<String>, value: Attr) -> Node {
        self.attrs.insert(name.into(), value);
        self
    }

    /// Every value the node reads: its inputs, then the outer-scope values its subgraphs read.
    pub(crate) fn reads(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inputs
            .iter()
            .filter(|i| !i.is_empty())
            .cloned()
            .collect();
        for a in self.attrs.values() {
            if let Attr::Graph(g) = a {
                names.extend(g.free_names());
            }
        }
        names
    }

    /// The positions of the inputs of which the node reads only the shape or dtype.
    pub(crate) fn shape_only_inputs(&self) -> &'static [usize] {
        match self.op.as_str() {
            "Shape" | "Size" | "EyeLike" | "RandomNormalLike" | "RandomUniformLike" => &[0],
            "CastLike" => &[1],
            _ => &[],
        }
    }

    /// The values whose elements the node reads: [`Node::reads`] less the inputs of which it
    /// reads only the shape or dtype (Shape's, Size's and EyeLike's data, CastLike's target,
    /// the input of the random `*Like` ops).
    pub(crate) fn value_reads(&self) -> Vec<String> {
        let shape_only = self.shape_only_inputs();
        if shape_only.is_empty() {
            return self.reads();
        }
        self.inputs
            .iter()
            .enumerate()
            .filter(|(k, i)| !i.is_empty() && !shape_only.contains(k))
            .map(|(_, i)| i.clone())
            .collect()
    }
}

/// A graph: inputs, constants, nodes (in any order) and outputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// The values a run is given, in order.
    pub inputs: Vec<ValueInfo>,
    /// Shared, so cloning a graph (a Scan body) or running it does not copy their data.
    pub constants: Vec<(String, std::sync::Arc<HostTensor>)>,
    /// The ops, in any order (the graph is sorted when it is planned).
    pub nodes: Vec<Node>,
    /// The values a run gives back, in order.
    pub outputs: Vec<ValueInfo>,
    /// Named (symbolic) dimensions of the inputs, as ONNX models declare them (`dim_param`):
    /// name -> the (input, axis) pairs it sizes. A run's inputs must agree on each.
    pub symbolic_dims: std::collections::BTreeMap<String, Vec<(String, usize)>>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }
    /// Adds an input; `shape` entries of `None` are fixed only at run time.
    pub fn input(
        mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[Option<usize>],
    ) -> Graph {
        self.inputs.push(ValueInfo {
            name: name.into(),
            dtype: Some(dtype),
            shape: Some(shape.to_vec()),
            kind: ValueKind::Tensor,
        });
        self
    }
    /// Adds a constant value named `name` (an ONNX initializer).
    pub fn constant(
        mut self,
        name: impl Into<String>,
        value: impl Into<std::sync::Arc<HostTensor>>,
    ) -> Graph {
        self.constants.push((name.into(), value.into()));
        self
    }
    /// Adds a node.
    pub fn node(mut self, node: Node) -> Graph {
        self.nodes.push(node);
        self
    }
    /// Adds an output: the value named `name`.
    pub fn output(mut self, name: impl Into<String>) -> Graph {
        self.outputs.push(ValueInfo::named(name));
        self
    }

    /// Names the graph reads but does not define (values of enclosing graphs).
    pub(crate) fn free_names(&self) -> Vec<String> {
        let defined: HashSet<&str> = self
            .inputs
            .iter()
            .map(|i| i.name.as_str())
            .chain(self.constants.iter().map(|(n, _)| n.as_str()))
            .chain(
                self.nodes
                    .iter()
                    .flat_map(|n| n.outputs.iter().map(String::as_str)),
            )
            .collect();
        let mut free: Vec<String> = Vec::new();
        let reads = self
            .nodes
            .iter()
            .flat_map(|n| n.reads())
            .chain(self.outputs.iter().map(|o| o.name.clone()));
        for name in reads {
            if !defined.contains(name.as_str()) && !free.contains(&name) {
                free.push(name);
            }
        }
        free
    }

    /// Fails when a name is listed twice among the outputs (a top-level graph's outputs become
    /// files and results by name; a Scan body may repeat one).
    pub fn check_outputs_distinct(&self) -> Result<()> {
        let mut seen = HashSet::new();
        match self.outputs.iter().find(|o| !seen.insert(o.name.as_str())) {
            Some(o) => Err(Error::Graph(format!(
                "output '{}' is listed twice among the graph's outputs",
                o.name
            ))),
            None => Ok(()),
        }
    }

    /// Validates names, ops and input counts, and orders the nodes by their data edges.
    /// `outer` tells whether a name is visible from enclosing graphs.
    pub(crate) fn schedule(&self, outer: &dyn Fn(&str) -> bool) -> Result<Vec<usize>> {
        let mut producer: FastMap<&str, Option<usize>> = FastMap::default();
        fn define<'a>(
            producer: &mut FastMap<&'a str, Option<usize>>,
            name: &'a str,
            node: Option<usize>,
        ) -> Result<()> {
            if name.is_empty() {
                return Err(Error::Graph("a value has an empty name".into()));
            }
            if producer.insert(name, node).is_some() {
                return Err(Error::Graph(format!("'{name}' is produced more than once")));
            }
            Ok(())
        }
        for i in &self.inputs {
            define(&mut producer, &i.name, None)?;
        }
        for (name, _) in &self.constants {
            define(&mut producer, name, None)?;
        }
        for (k, node) in self.nodes.iter().enumerate() {
            let def = registry::lookup(&node.op).ok_or_else(|| {
                Error::Graph(format!(
                    "node '{}': unknown op '{}' (known ops: {})",
                    node.name,
                    node.op,
                    registry::op_names().join(", ")
                ))
            })?;
            def.check_arity(node)?;
            for o in &node.outputs {
                define(&mut producer, o, Some(k))?;
            }
        }
        // Kahn's algorithm over data edges, keeping file order among ready nodes.
        let mut waiting: Vec<usize> = vec![0; self.nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (k, node) in self.nodes.iter().enumerate() {
            for input in node.reads() {
                match producer.get(input.as_str()) {
                    Some(Some(p)) => {
                        waiting[k] += 1;
                        users[*p].push(k);
                    }
                    Some(None) => {}
                    None if outer(&input) => {}
                    None => {
                        return Err(Error::Graph(format!(
                        "node '{}': input '{input}' is not a graph input, constant or node output",
                        node.name
                    )))
                    }
                }
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..self.nodes.len()).filter(|&k| waiting[k] == 0).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(k) = ready.pop_first() {
            order.push(k);
            for &u in &users[k] {
                waiting[u] -= 1;
                if waiting[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() < self.nodes.len() {
            let stuck: Vec<&str> = (0..self.nodes.len())
                .filter(|&k| waiting[k] > 0)
                .map(|k| self.nodes[k].name.as_str())
                .collect();
            return Err(Error::Graph(format!(
                "the nodes {stuck:?} form a cycle (or depend on one)"
            )));
        }
        for o in &self.outputs {
            if !producer.contains_key(o.name.as_str()) && !outer(&o.name) {
                return Err(Error::Graph(format!(
                    "output '{}' is not a graph input, constant or node output",
                    o.name
                )));
            }
        }
        Ok(order)
    }
}
