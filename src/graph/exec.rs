//! Running a graph: all kernels of a run are recorded into one submission, and only the graph's
//! outputs are read back.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

use super::registry::{self, OpDef};
use super::{Attr, Graph, Node};
use crate::{download_all, Context, Error, HostTensor, Result, Tensor};

/// A value during a run: known on the host (inputs, constants), on the GPU, or both.
#[derive(Default)]
struct Slot {
    host: Option<HostTensor>,
    gpu: OnceCell<Tensor>,
}

/// A node's view of its inputs and attributes, handed to the op's graph entry.
pub(crate) struct NodeArgs<'a> {
    ctx: &'a Context,
    pub node: &'a Node,
    def: &'a OpDef,
    slots: Vec<Option<&'a Slot>>,
}

impl NodeArgs<'_> {
    fn slot(&self, i: usize) -> Option<&Slot> {
        self.slots.get(i).copied().flatten()
    }

    /// Input `i` (called `role` in the op's spec) as a GPU tensor, uploaded if needed.
    pub fn tensor(&self, i: usize, role: &str) -> Result<Tensor> {
        let slot = self.slot(i).ok_or_else(|| {
            Error::Graph(format!(
                "node '{}': {} needs input {i} ({role})",
                self.node.name, self.def.name
            ))
        })?;
        if let Some(t) = slot.gpu.get() {
            return Ok(t.clone());
        }
        let host = slot
            .host
            .as_ref()
            .expect("a slot holds a host or a GPU value");
        let t = Tensor::from_host(self.ctx, host)?;
        Ok(slot.gpu.get_or_init(|| t).clone())
    }

    /// Optional index input `i` as `i64` values; it must be known on the host (a constant or a
    /// graph input), since the op's plan depends on it.
    pub fn indices(&self, i: usize, role: &str) -> Result<Option<Vec<i64>>> {
        let Some(slot) = self.slot(i) else {
            return Ok(None);
        };
        match &slot.host {
            Some(h) => h.to_indices(self.def_name(), role).map(Some),
            None => Err(Error::Graph(format!(
                "node '{}': {} input '{role}' ('{}') is computed on the GPU, but its values are needed on the host to plan the op; give it as a constant or a graph input",
                self.node.name, self.def.name, self.node.inputs[i]
            ))),
        }
    }

    /// Required index input `i`.
    pub fn required_indices(&self, i: usize, role: &str) -> Result<Vec<i64>> {
        self.indices(i, role)?.ok_or_else(|| {
            Error::Graph(format!(
                "node '{}': {} needs input {i} ({role})",
                self.node.name, self.def.name
            ))
        })
    }

    /// Integer-list attribute, `None` when absent.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.node.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(other) => Err(Error::Graph(format!(
                "node '{}': attribute '{name}' must be a list of integers, not {other:?}",
                self.node.name
            ))),
        }
    }

    fn def_name(&self) -> &'static str {
        self.def.name
    }
}

/// A validated, scheduled graph bound to a context, ready to run many times.
#[derive(Debug)]
pub struct Session {
    ctx: Context,
    graph: Graph,
    order: Vec<usize>,
}

impl Session {
    pub fn new(ctx: &Context, graph: Graph) -> Result<Session> {
        let order = graph.schedule(&HashSet::new())?;
        Ok(Session {
            ctx: ctx.clone(),
            graph,
            order,
        })
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the graph on `inputs` (by name) and returns its outputs in declaration order.
    pub async fn run(
        &self,
        inputs: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>> {
        let mut slots: HashMap<&str, Slot> = HashMap::new();
        let mut given: HashMap<String, HostTensor> = HashMap::new();
        for (name, value) in inputs {
            let Some(decl) = self.graph.inputs.iter().find(|i| i.name == name) else {
                let known: Vec<&str> = self.graph.inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(Error::Graph(format!(
                    "'{name}' is not a graph input (inputs: {known:?})"
                )));
            };
            decl.check("input", value.dtype, &value.shape)?;
            if given.insert(name.clone(), value).is_some() {
                return Err(Error::Graph(format!("input '{name}' is given twice")));
            }
        }
        for decl in &self.graph.inputs {
            let value = given
                .remove(&decl.name)
                .ok_or_else(|| Error::Graph(format!("input '{}' is not given", decl.name)))?;
            slots.insert(
                &decl.name,
                Slot {
                    host: Some(value),
                    gpu: OnceCell::new(),
                },
            );
        }
        for (name, value) in &self.graph.constants {
            slots.insert(
                name,
                Slot {
                    host: Some(value.clone()),
                    gpu: OnceCell::new(),
                },
            );
        }

        let mut rec = self.ctx.recorder();
        for &k in &self.order {
            let node = &self.graph.nodes[k];
            let def = registry::lookup(&node.op).expect("checked by schedule");
            let outputs = {
                let args = NodeArgs {
                    ctx: &self.ctx,
                    node,
                    def,
                    slots: node
                        .inputs
                        .iter()
                        .map(|i| {
                            if i.is_empty() {
                                None
                            } else {
                                slots.get(i.as_str())
                            }
                        })
                        .collect(),
                };
                (def.run)(&mut rec, &args).map_err(|e| Error::Node {
                    node: node.name.clone(),
                    source: Box::new(e),
                })?
            };
            for (name, t) in node.outputs.iter().zip(outputs) {
                let slot = Slot::default();
                let _ = slot.gpu.set(t);
                slots.insert(name, slot);
            }
        }
        rec.finish().await?;

        let on_gpu: Vec<&Tensor> = self
            .graph
            .outputs
            .iter()
            .filter_map(|o| {
                let slot = &slots[o.name.as_str()];
                slot.host
                    .is_none()
                    .then(|| slot.gpu.get().expect("node outputs are on the GPU"))
            })
            .collect();
        let mut downloaded = download_all(&self.ctx, &on_gpu).await?.into_iter();
        let mut results = Vec::with_capacity(self.graph.outputs.len());
        for o in &self.graph.outputs {
            let slot = &slots[o.name.as_str()];
            let value = match &slot.host {
                Some(h) => h.clone(),
                None => downloaded.next().expect("one download per GPU output"),
            };
            o.check("output", value.dtype, &value.shape)?;
            results.push((o.name.clone(), value));
        }
        Ok(results)
    }

    /// Blocking [`Session::run`] for native callers.
    #[cfg(feature = "native")]
    pub fn run_blocking(
        &self,
        inputs: Vec<(String, HostTensor)>,
    ) -> Result<Vec<(String, HostTensor)>> {
        pollster::block_on(self.run(inputs))
    }
}
