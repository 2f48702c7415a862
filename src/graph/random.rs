//! The random ops as graph nodes: each node draws from its own [`RandomStream`], made on the
//! node's first execution (keyed by its `seed` attribute, else by fresh entropy) and kept by
//! the recorder, and by a session across runs, so that every execution draws anew. Random
//! nodes are never folded on the host nor moved out of a Scan's loop (the interpreter does
//! not compute them, and the hoisting pass moves only deterministic ops).

use super::exec::NodeArgs;
use super::registry::OpDef;
use super::{Attr, Node};
use crate::ops::random::seed_key;
use crate::{DType, Error, RandomStream, Recorder, Result, Tensor};

/// The stream of `node` in this recording, made on its first use.
pub(crate) fn node_stream(
    rec: &mut Recorder,
    op: &'static str,
    node: &Node,
    seed: Option<f64>,
) -> Result<RandomStream> {
    let id = format!("{}\u{0}{}", node.op, node.outputs.first().map_or("", |o| o));
    if let Some(s) = rec.streams.get(&id) {
        return Ok(s.clone());
    }
    let ctx = rec.context().clone();
    let stream = match seed {
        Some(seed) => RandomStream::new(&ctx, seed_key(op, seed)?)?,
        None => RandomStream::unseeded(&ctx)?,
    };
    rec.streams.insert(id, stream.clone());
    Ok(stream)
}

/// The `dtype` attribute (a dtype name; the ONNX loader converts type codes), else `default`.
fn dtype_attr(op: &'static str, node: &Node, default: DType) -> Result<DType> {
    match node.attrs.get("dtype") {
        None => Ok(default),
        Some(Attr::String(name)) => DType::from_name(name).ok_or_else(|| {
            Error::invalid(
                op,
                "dtype",
                format!("dtype '{}' is not one of ours", name.escape_debug()),
            )
        }),
        Some(_) => Err(Error::invalid(op, "dtype", "dtype must be a dtype name")),
    }
}

/// A float attribute as f32, `default` when absent.
fn float_attr(args: &NodeArgs, name: &str, default: f32) -> Result<f32> {
    Ok(args.float(name)?.map_or(default, |v| v as f32))
}

/// The output shape of RandomUniform and RandomNormal: the `shape` attribute, required.
fn shape_attr(op: &'static str, args: &NodeArgs) -> Result<Vec<usize>> {
    let dims = args
        .ints("shape")?
        .ok_or_else(|| Error::invalid(op, "shape", "attribute shape is required"))?;
    dims.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                Error::invalid(
                    op,
                    "shape",
                    format!("shape is {dims:?}; its dimensions must not be negative"),
                )
            })
        })
        .collect()
}

/// RandomUniform, RandomNormal and their Like forms.
fn draw(rec: &mut Recorder, args: &NodeArgs, op: &'static str) -> Result<Vec<Tensor>> {
    let like = op.ends_with("Like");
    let (dtype, shape) = if like {
        let input = args.dtype_of(0, "input")?;
        (
            dtype_attr(op, args.node, input)?,
            args.shape_of(0, "input")?,
        )
    } else {
        (
            dtype_attr(op, args.node, DType::F32)?,
            shape_attr(op, args)?,
        )
    };
    let stream = node_stream(rec, op, args.node, args.float("seed")?)?;
    let out = args.out(0);
    Ok(vec![if op.starts_with("RandomUniform") {
        let (low, high) = (
            float_attr(args, "low", 0.0)?,
            float_attr(args, "high", 1.0)?,
        );
        rec.random_uniform_to(&stream, dtype, &shape, low, high, out)
    } else {
        let (mean, scale) = (
            float_attr(args, "mean", 0.0)?,
            float_attr(args, "scale", 1.0)?,
        );
        rec.random_normal_to(&stream, dtype, &shape, mean, scale, out)
    }
    .map_err(|e| rename(e, op))?])
}

/// An error of the shared recording function named for the `Like` or normal op that called it.
fn rename(e: Error, op: &'static str) -> Error {
    match e {
        Error::InvalidInput { input, message, .. } => Error::InvalidInput { op, input, message },
        Error::LimitExceeded {
            what,
            limit,
            needed,
            max,
            ..
        } => Error::LimitExceeded {
            op,
            what,
            limit,
            needed,
            max,
        },
        other => other,
    }
}

static RANDOM_UNIFORM: OpDef = OpDef {
    name: "RandomUniform",
    inputs: 0..=0,
    outputs: 1..=1,
    host: None,
    attrs: &["dtype", "high", "low", "seed", "shape"],
    run: |rec, args| draw(rec, args, "RandomUniform"),
};

static RANDOM_NORMAL: OpDef = OpDef {
    name: "RandomNormal",
    inputs: 0..=0,
    outputs: 1..=1,
    host: None,
    attrs: &["dtype", "mean", "scale", "seed", "shape"],
    run: |rec, args| draw(rec, args, "RandomNormal"),
};

static RANDOM_UNIFORM_LIKE: OpDef = OpDef {
    name: "RandomUniformLike",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["dtype", "high", "low", "seed"],
    run: |rec, args| draw(rec, args, "RandomUniformLike"),
};

static RANDOM_NORMAL_LIKE: OpDef = OpDef {
    name: "RandomNormalLike",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["dtype", "mean", "scale", "seed"],
    run: |rec, args| draw(rec, args, "RandomNormalLike"),
};

static BERNOULLI: OpDef = OpDef {
    name: "Bernoulli",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["dtype", "seed"],
    run: |rec, args| {
        let p = args.tensor(0, "input")?;
        let dtype = dtype_attr("Bernoulli", args.node, p.dtype())?;
        let stream = node_stream(rec, "Bernoulli", args.node, args.float("seed")?)?;
        Ok(vec![rec.bernoulli_to(&stream, &p, dtype, args.out(0))?])
    },
};

static MULTINOMIAL: OpDef = OpDef {
    name: "Multinomial",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["dtype", "sample_size", "seed"],
    run: |rec, args| {
        const OP: &str = "Multinomial";
        let logits = args.tensor(0, "input")?;
        let dtype = dtype_attr(OP, args.node, DType::I32)?;
        let samples = args.int("sample_size")?.unwrap_or(1);
        let samples = usize::try_from(samples).map_err(|_| {
            Error::invalid(
                OP,
                "sample_size",
                format!("sample_size is {samples}; it must not be negative"),
            )
        })?;
        let stream = node_stream(rec, OP, args.node, args.float("seed")?)?;
        Ok(vec![rec.multinomial_to(
            &stream,
            &logits,
            samples,
            dtype,
            args.out(0),
        )?])
    },
};

pub(crate) static DEFS: &[&OpDef] = &[
    &RANDOM_UNIFORM,
    &RANDOM_NORMAL,
    &RANDOM_UNIFORM_LIKE,
    &RANDOM_NORMAL_LIKE,
    &BERNOULLI,
    &MULTINOMIAL,
];

/// Whether graphs' nodes of op `name` draw random numbers.
pub fn is_random(name: &str) -> bool {
    DEFS.iter().any(|d| d.name == name)
}
