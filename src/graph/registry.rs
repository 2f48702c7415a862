//! The ops a graph can name. Each op file registers itself with one [`OpDef`] entry.

use super::exec::NodeArgs;
use super::Node;
use crate::{Error, Recorder, Result, Tensor};

pub(crate) struct OpDef {
    pub name: &'static str,
    /// Input counts accepted (optional trailing inputs make a range).
    pub inputs: std::ops::RangeInclusive<usize>,
    pub outputs: std::ops::RangeInclusive<usize>,
    pub attrs: &'static [&'static str],
    pub run: fn(&mut Recorder, &NodeArgs) -> Result<Vec<Tensor>>,
}

static OPS: &[&OpDef] = &[
    &crate::ops::strided_slice::GRAPH_OP,
    &crate::ops::slice::GRAPH_OP,
    &crate::ops::batch_to_space::GRAPH_OP,
    &crate::ops::space_to_batch::GRAPH_OP,
    &crate::ops::matmul::GRAPH_OP,
    &crate::ops::layout::IDENTITY_OP,
    &crate::ops::layout::RESHAPE_OP,
    &crate::ops::layout::TRANSPOSE_OP,
    &crate::ops::layout::CONCAT_OP,
    &crate::ops::elementwise::CAST_OP,
    &crate::ops::scan::GRAPH_OP,
];

fn all() -> impl Iterator<Item = &'static OpDef> {
    OPS.iter()
        .copied()
        .chain(crate::ops::elementwise::GRAPH_OPS.iter())
}

pub(crate) fn lookup(name: &str) -> Option<&'static OpDef> {
    all().find(|d| d.name == name)
}

/// Names of the ops graphs may use.
pub fn op_names() -> Vec<&'static str> {
    all().map(|d| d.name).collect()
}

impl OpDef {
    pub(crate) fn check_arity(&self, node: &Node) -> Result<()> {
        let n = node.inputs.len();
        if !self.inputs.contains(&n) {
            let (lo, hi) = (self.inputs.start(), self.inputs.end());
            let want = if lo == hi {
                format!("{lo}")
            } else {
                format!("{lo} to {hi}")
            };
            return Err(Error::Graph(format!(
                "node '{}': {} takes {want} inputs but {n} are given",
                node.name, self.name
            )));
        }
        if !self.outputs.contains(&node.outputs.len()) {
            return Err(Error::Graph(format!(
                "node '{}': {} has {} output(s) but {} are named",
                node.name,
                self.name,
                self.outputs.start(),
                node.outputs.len()
            )));
        }
        if let Some(a) = node
            .attrs
            .keys()
            .find(|a| !self.attrs.contains(&a.as_str()))
        {
            return Err(Error::Graph(format!(
                "node '{}': {} has no attribute '{a}' (it has: {})",
                node.name,
                self.name,
                if self.attrs.is_empty() {
                    "none".to_string()
                } else {
                    self.attrs.join(", ")
                }
            )));
        }
        Ok(())
    }
}
