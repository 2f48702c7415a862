//! The ops a graph can name, and how a node's inputs and attributes become a call of the op's
//! one recording function (the same function the Rust API calls), writing into the node's
//! output (`NodeArgs::out`).

use super::exec::NodeArgs;
use super::Node;
use crate::{
    BatchToSpace, DType, Error, Recorder, Result, Slice, SpaceToBatch, StridedSlice, Tensor,
};

pub(crate) struct OpDef {
    pub name: &'static str,
    /// Input counts accepted (optional trailing inputs make a range).
    pub inputs: std::ops::RangeInclusive<usize>,
    pub outputs: std::ops::RangeInclusive<usize>,
    pub attrs: &'static [&'static str],
    pub run: fn(&mut Recorder, &NodeArgs) -> Result<Vec<Tensor>>,
}

static OPS: &[&OpDef] = &[
    &STRIDED_SLICE,
    &SLICE,
    &BATCH_TO_SPACE,
    &SPACE_TO_BATCH,
    &MATMUL,
    &IDENTITY,
    &RESHAPE,
    &TRANSPOSE,
    &CONCAT,
    &CAST,
    &super::scan::GRAPH_OP,
];

fn all() -> impl Iterator<Item = &'static OpDef> {
    OPS.iter().copied().chain(ELEMENTWISE.iter())
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

static STRIDED_SLICE: OpDef = OpDef {
    name: "StridedSlice",
    inputs: 3..=4,
    outputs: 1..=1,
    attrs: &[
        "begin_mask",
        "end_mask",
        "new_axis_mask",
        "shrink_axis_mask",
        "ellipsis_mask",
    ],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let op = StridedSlice {
            begin: args.required_indices(1, "begin")?,
            end: args.required_indices(2, "end")?,
            stride: args.indices(3, "stride")?,
            begin_mask: args.ints("begin_mask")?.unwrap_or_default(),
            end_mask: args.ints("end_mask")?.unwrap_or_default(),
            new_axis_mask: args.ints("new_axis_mask")?.unwrap_or_default(),
            shrink_axis_mask: args.ints("shrink_axis_mask")?.unwrap_or_default(),
            ellipsis_mask: args.ints("ellipsis_mask")?.unwrap_or_default(),
        };
        Ok(vec![op.record(rec, &data, args.out(0))?])
    },
};

static SLICE: OpDef = OpDef {
    name: "Slice",
    inputs: 4..=5,
    outputs: 1..=1,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let op = Slice {
            start: args.required_indices(1, "start")?,
            stop: args.required_indices(2, "stop")?,
            step: args.required_indices(3, "step")?,
            axes: args.indices(4, "axes")?,
        };
        Ok(vec![op.record(rec, &data, args.out(0))?])
    },
};

static BATCH_TO_SPACE: OpDef = OpDef {
    name: "BatchToSpace",
    inputs: 4..=4,
    outputs: 1..=1,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let op = BatchToSpace {
            block_shape: args.required_indices(1, "block_shape")?,
            crops_begin: args.required_indices(2, "crops_begin")?,
            crops_end: args.required_indices(3, "crops_end")?,
        };
        Ok(vec![op.record(rec, &data, args.out(0))?])
    },
};

static SPACE_TO_BATCH: OpDef = OpDef {
    name: "SpaceToBatch",
    inputs: 4..=4,
    outputs: 1..=1,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let op = SpaceToBatch {
            block_shape: args.required_indices(1, "block_shape")?,
            pads_begin: args.required_indices(2, "pads_begin")?,
            pads_end: args.required_indices(3, "pads_end")?,
        };
        Ok(vec![op.record(rec, &data, args.out(0))?])
    },
};

static MATMUL: OpDef = OpDef {
    name: "MatMul",
    inputs: 2..=2,
    outputs: 1..=1,
    attrs: &[],
    run: |rec, args| {
        let (a, b) = (args.tensor(0, "A")?, args.tensor(1, "B")?);
        Ok(vec![rec.matmul_to(&a, &b, args.out(0))?])
    },
};

static IDENTITY: OpDef = OpDef {
    name: "Identity",
    inputs: 1..=1,
    outputs: 1..=1,
    attrs: &[],
    run: |rec, args| {
        Ok(vec![
            rec.identity_to(&args.tensor(0, "input")?, args.out(0))?
        ])
    },
};

static RESHAPE: OpDef = OpDef {
    name: "Reshape",
    inputs: 2..=2,
    outputs: 1..=1,
    attrs: &["allowzero"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let shape = args.required_indices(1, "shape")?;
        let allowzero = args.int("allowzero")?.unwrap_or(0) != 0;
        Ok(vec![rec.reshape_to(
            &data,
            &shape,
            allowzero,
            args.out(0),
        )?])
    },
};

static TRANSPOSE: OpDef = OpDef {
    name: "Transpose",
    inputs: 1..=1,
    outputs: 1..=1,
    attrs: &["perm"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let perm = args.ints("perm")?;
        Ok(vec![rec.transpose_to(
            &data,
            perm.as_deref(),
            args.out(0),
        )?])
    },
};

static CONCAT: OpDef = OpDef {
    name: "Concat",
    inputs: 1..=usize::MAX,
    outputs: 1..=1,
    attrs: &["axis"],
    run: |rec, args| {
        let inputs: Vec<Tensor> = (0..args.len())
            .map(|i| args.tensor(i, "inputs"))
            .collect::<Result<_>>()?;
        let axis = args
            .int("axis")?
            .ok_or_else(|| Error::invalid("Concat", "axis", "the attribute 'axis' is required"))?;
        Ok(vec![rec.concat_to(&inputs, axis, args.out(0))?])
    },
};

static CAST: OpDef = OpDef {
    name: "Cast",
    inputs: 1..=1,
    outputs: 1..=1,
    attrs: &["to"],
    run: |rec, args| {
        let a = args.tensor(0, "input")?;
        let to = args.string("to")?.ok_or_else(|| {
            Error::invalid(
                "Cast",
                "to",
                "the attribute 'to' (a dtype name) is required",
            )
        })?;
        let to = DType::from_name(to).ok_or_else(|| {
            Error::invalid("Cast", "to", format!("to is '{}', not a dtype name", to))
        })?;
        Ok(vec![rec.cast_to(&a, to, args.out(0))?])
    },
};

fn run_elementwise(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let a = args.tensor(0, "A")?;
    let b = if args.len() > 1 {
        Some(args.tensor(1, "B")?)
    } else {
        None
    };
    Ok(vec![rec.elementwise_to(
        &args.node.op,
        &a,
        b.as_ref(),
        args.out(0),
    )?])
}

fn run_variadic(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let inputs: Vec<Tensor> = (0..args.len())
        .map(|i| args.tensor(i, "data_0"))
        .collect::<Result<_>>()?;
    Ok(vec![rec.variadic_to(
        &args.node.op,
        &inputs,
        args.out(0),
    )?])
}

macro_rules! elementwise_nodes {
    ($($name:literal $inputs:expr, $run:ident;)*) => {
        /// Graph entries of the element-wise ops: those of [`crate::kernels::elementwise::OPS`]
        /// (Max and Min variadic, as in ONNX), and the variadic Sum and Mean.
        static ELEMENTWISE: [OpDef; 17] = [$(OpDef {
            name: $name,
            inputs: $inputs,
            outputs: 1..=1,
            attrs: &[],
            run: $run,
        }),*];
    };
}
elementwise_nodes!(
    "Add" 2..=2, run_elementwise; "Sub" 2..=2, run_elementwise; "Mul" 2..=2, run_elementwise;
    "Div" 2..=2, run_elementwise; "Max" 1..=usize::MAX, run_variadic;
    "Min" 1..=usize::MAX, run_variadic; "Pow" 2..=2, run_elementwise;
    "Neg" 1..=1, run_elementwise; "Abs" 1..=1, run_elementwise; "Exp" 1..=1, run_elementwise;
    "Log" 1..=1, run_elementwise; "Sqrt" 1..=1, run_elementwise; "Tanh" 1..=1, run_elementwise;
    "Sigmoid" 1..=1, run_elementwise; "Relu" 1..=1, run_elementwise;
    "Sum" 1..=usize::MAX, run_variadic; "Mean" 1..=usize::MAX, run_variadic;
);

#[cfg(test)]
mod tests {
    #[test]
    fn the_graph_table_follows_the_op_table() {
        for (def, op) in super::ELEMENTWISE
            .iter()
            .zip(&crate::kernels::elementwise::OPS)
        {
            assert_eq!(def.name, op.name);
            let variadic = ["Max", "Min"].contains(&op.name);
            assert_eq!(
                *def.inputs.start(),
                if op.binary && !variadic { 2 } else { 1 }
            );
        }
    }
}
