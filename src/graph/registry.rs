//! The ops a graph can name, and how a node's inputs and attributes become a call of the op's
//! one recording function (the same function the Rust API calls), writing into the node's
//! output (`NodeArgs::out`).

use super::exec::{NodeArgs, Slot};
use super::{Attr, Node};
use crate::kernels::pad::PadMode;
use crate::kernels::scatter::ScatterReduction;
use crate::{
    BatchToSpace, DType, Error, HostTensor, Recorder, Result, Slice, SpaceToBatch, StridedSlice,
    Tensor,
};

pub(crate) struct OpDef {
    pub name: &'static str,
    /// Input counts accepted (optional trailing inputs make a range).
    pub inputs: std::ops::RangeInclusive<usize>,
    pub outputs: std::ops::RangeInclusive<usize>,
    /// Computes the node on the host when it can (`None`: record `run` on the GPU); ops that
    /// need only their inputs' shapes, or make constants, have one.
    pub host: Option<HostFn>,
    pub attrs: &'static [&'static str],
    pub run: fn(&mut Recorder, &NodeArgs) -> Result<Vec<Tensor>>,
}

/// A registry entry for an op the executor records itself while planning (the sequence and
/// string ops): its input and output counts and attributes; its `run` is never called.
macro_rules! planned_op {
    ($name:ident, $op:literal, $inputs:expr, $outputs:expr, $attrs:expr) => {
        pub(crate) static $name: OpDef = OpDef {
            name: $op,
            inputs: $inputs,
            outputs: $outputs,
            host: None,
            attrs: $attrs,
            run: |_, args| {
                Err(Error::Graph(format!(
                    "internal: {} node '{}' was not recorded while planning",
                    $op,
                    args.node.name.escape_debug()
                )))
            },
        };
    };
}
pub(crate) use planned_op;

pub(crate) type HostFn = fn(&Node, &[Option<&Slot>]) -> Result<Option<Vec<HostTensor>>>;

static OPS: &[&OpDef] = &[
    &STRIDED_SLICE,
    &SLICE,
    &ONNX_SLICE,
    &BATCH_TO_SPACE,
    &SPACE_TO_BATCH,
    &MATMUL,
    &IDENTITY,
    &RESHAPE,
    &TRANSPOSE,
    &CONCAT,
    &CAST,
    &CAST_LIKE,
    &BITCAST,
    &SHAPE,
    &SIZE,
    &CONSTANT_OF_SHAPE,
    &SQUEEZE,
    &UNSQUEEZE,
    &FLATTEN,
    &EXPAND,
    &super::scan::GRAPH_OP,
    &super::control::GRAPH_OP,
    &super::control::LOOP_OP,
];

fn all() -> impl Iterator<Item = &'static OpDef> {
    OPS.iter()
        .copied()
        .chain(ELEMENTWISE.iter())
        .chain(MAPS.iter())
        .chain(REDUCTIONS.iter())
        .chain(ACTIVATION_OPS.iter())
        .chain([
            &MOD,
            &BIT_SHIFT,
            &NON_ZERO,
            &TILE,
            &GATHER_ELEMENTS,
            &DROPOUT,
            &PAD,
            &SCATTER_ELEMENTS,
            &SCATTER,
            &SCATTER_ND,
            &ONE_HOT,
            &HARDMAX,
            &EYE_LIKE,
            &IS_INF,
            &LAYER_NORMALIZATION,
            &RMS_NORMALIZATION,
            &BATCH_NORMALIZATION,
            &CAUSAL_CONV_WITH_STATE,
            &TRILU,
            &CLIP,
            &ARG_MAX,
            &ARG_MIN,
            &SOFTMAX,
            &LOG_SOFTMAX,
            &GATHER,
            &ARRAY_FEATURE_EXTRACTOR,
            &FEATURE_VECTORIZER,
            &MAX_ROI_POOL,
            &LINEAR_ATTENTION,
            &GEMM,
            &SPLIT,
            &DEPTH_TO_SPACE,
            &SPACE_TO_DEPTH,
            &RANGE,
            &SCAN_SEQUENCE_LENS,
            &CHECK_INPUTS,
            &CHECK_VALUES,
            &CUMSUM,
            &CUMPROD,
            &TOPK,
            &CONV,
            &CONV_TRANSPOSE,
            &MAX_POOL,
            &AVERAGE_POOL,
            &LP_POOL,
            &GLOBAL_AVERAGE_POOL,
            &GLOBAL_MAX_POOL,
            &GLOBAL_LP_POOL,
            &RESIZE,
            &EINSUM,
            &INSTANCE_NORMALIZATION,
            &GROUP_NORMALIZATION,
            &LRN,
            &HANN_WINDOW,
            &HAMMING_WINDOW,
            &BLACKMAN_WINDOW,
            &GATHER_ND,
            &REVERSE_SEQUENCE,
            &COMPRESS,
            &CENTER_CROP_PAD,
            &GRID_SAMPLE,
            &AFFINE_GRID,
            &DFT,
            &STFT,
            &COL2IM,
            &MEL_WEIGHT_MATRIX,
            &TREE_WALK,
            &DET,
            &NON_MAX_SUPPRESSION,
            &UNIQUE,
            &PAIRWISE_COUPLING,
            &IMAGE_DECODER,
        ])
        .chain(super::sequence::DEFS.iter().copied())
        .chain(super::strings::DEFS.iter().copied())
        .chain(super::random::DEFS.iter().copied())
}

/// The op named `name` (the first of that name in [`all`]). By a table built once: graphs are
/// scheduled and recorded again on every run, and a walk of the list cost 2% of a small run's
/// host time.
pub(crate) fn lookup(name: &str) -> Option<&'static OpDef> {
    static BY_NAME: std::sync::OnceLock<super::FastMap<&'static str, &'static OpDef>> =
        std::sync::OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            let mut by_name = super::FastMap::default();
            for d in all() {
                by_name.entry(d.name).or_insert(d);
            }
            by_name
        })
        .get(name)
        .copied()
}

/// The input of op `name` that its first output may be written over, when nothing reads it
/// afterwards (see `exec::writable_input`): the op then leaves out its copy of that input.
pub(crate) fn writes_over(name: &str) -> Option<usize> {
    match name {
        // A scatter's output is its data with updates written in: a KV cache's update writes
        // only the new positions.
        "ScatterElements" | "Scatter" | "ScatterND" => Some(0),
        _ => None,
    }
}

/// The inputs of `node` that are a loop's initial states (a Scan's, a Loop's carried values):
/// where nothing reads one afterwards the loop may keep that state in its buffer (see
/// `exec::dead_owned_input`) instead of copying it into one of its own.
pub(crate) fn loop_states(node: &Node) -> std::ops::Range<usize> {
    match node.op.as_str() {
        "Scan" => {
            let scans = match node.attrs.get("num_scan_inputs") {
                Some(Attr::Int(k)) => usize::try_from(*k).unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            0..node.inputs.len().saturating_sub(scans)
        }
        "Loop" => 2..node.inputs.len().max(2),
        _ => 0..0,
    }
}

/// The inputs of op `name` whose values plan it (bounds, shapes, axes, counts): they must be
/// known on the host, so the values they are computed from are computed there too (see
/// `exec::fold`).
pub(crate) fn host_inputs(name: &str) -> &'static [usize] {
    match name {
        "Range" => &[0, 1, 2],
        "If" => &[0],
        "Loop" => &[0, 1],
        "DFT" => &[1, 2],
        "STFT" => &[1, 2, 3],
        "AffineGrid" => &[1],
        "Col2Im" => &[1, 2],
        "StridedSlice" | "BatchToSpace" | "SpaceToBatch" => &[1, 2, 3],
        "Slice" | "OnnxSlice" => &[1, 2, 3, 4],
        "ConstantOfShape" | "HannWindow" | "HammingWindow" | "BlackmanWindow" => &[0],
        "Dropout" => &[1, 2],
        "Pad" => &[1, 2, 3],
        "Resize" => &[1, 2, 3],
        "ReverseSequence" | "Compress" | "CenterCropPad" => &[1],
        "OneHot" => &[1],
        "NonZero" | "Unique" | "ImageDecoder" => &[0],
        "NonMaxSuppression" => &[0, 1, 2, 3, 4],
        "MaxRoiPool" => &[1],
        "SequenceInsert" => &[2],
        "SequenceAt" | "SequenceErase" | "SplitToSequence" => &[1],
        "Reshape" | "Expand" | "Tile" | "Squeeze" | "Unsqueeze" | "Trilu" | "Split" | "TopK"
        | "CumSum" | "CumProd" => &[1],
        op if op.starts_with("Reduce") => &[1],
        _ => &[],
    }
}

/// True when graphs may use op `name`.
pub fn is_op(name: &str) -> bool {
    lookup(name).is_some()
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
    host: None,
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
    host: None,
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

/// ONNX's Slice (opset 10 on; the loader brings Slice-1's attributes to inputs): the same
/// clamping as Slice-8 above, with inputs `data, starts, ends, axes?, steps?`.
static ONNX_SLICE: OpDef = OpDef {
    name: "OnnxSlice",
    inputs: 3..=5,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let start = args.required_indices(1, "starts")?;
        let step = args
            .indices(4, "steps")?
            .unwrap_or_else(|| vec![1; start.len()]);
        let op = Slice {
            start,
            stop: args.required_indices(2, "ends")?,
            step,
            axes: args.indices(3, "axes")?,
        };
        Ok(vec![op.record(rec, &data, args.out(0))?])
    },
};

static BATCH_TO_SPACE: OpDef = OpDef {
    name: "BatchToSpace",
    inputs: 4..=4,
    outputs: 1..=1,
    host: None,
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
    host: None,
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
    host: None,
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
    host: None,
    attrs: &[],
    run: |rec, args| {
        Ok(vec![
            rec.identity_to(&args.tensor(0, "input")?, args.out(0))?
        ])
    },
};

/// Whether a Dropout node drops anything, and its ratio: training mode comes from the
/// `training_mode` input (opset 12 on, default false) or `is_test: 0` (opset 1 and 6); the
/// ratio from the `ratio` input or attribute (0.5 when absent).
pub(crate) fn dropout_mode(
    node: &Node,
    ratio: Option<&HostTensor>,
    training: Option<&HostTensor>,
) -> Result<(bool, f64)> {
    let scalar = |t: &HostTensor, role: &'static str, to: DType| -> Result<HostTensor> {
        if t.numel() != 1 {
            return Err(Error::invalid(
                "Dropout",
                role,
                format!("{role} has {} values; it must be a scalar", t.numel()),
            ));
        }
        crate::reference::cast_host(t, to)
    };
    let training = match training {
        Some(t) => scalar(t, "training_mode", DType::Bool)?.data[0] != 0,
        None => matches!(node.attrs.get("is_test"), Some(Attr::Int(0))),
    };
    let ratio = match (ratio, node.attrs.get("ratio")) {
        (Some(t), _) => scalar(t, "ratio", DType::F64)?.to_vec::<f64>()?[0],
        (None, Some(Attr::Float(r))) => *r,
        _ => 0.5,
    };
    // The spec's range, in inference too (where the ratio is not used), as onnxruntime
    // checks it.
    if !(0.0..1.0).contains(&ratio) {
        return Err(Error::invalid(
            "Dropout",
            "ratio",
            format!("ratio is {ratio}; it must be in [0, 1)"),
        ));
    }
    Ok((training, ratio))
}

static DROPOUT: OpDef = OpDef {
    name: "Dropout",
    inputs: 1..=3,
    outputs: 1..=2,
    host: None,
    attrs: &["seed", "ratio", "is_test"],
    // Inference (or a ratio of 0): the output is the input and the mask all true. Training
    // mode drops elements at random (see `Recorder::dropout_training_to`).
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        for (i, role) in [(1, "ratio"), (2, "training_mode")] {
            if args.dtype_of(i, role).is_ok() && args.host_value(i).is_none() {
                return Err(Error::invalid(
                    "Dropout",
                    role,
                    format!(
                        "{role} is computed on the GPU; it must be known when the graph is planned"
                    ),
                ));
            }
        }
        let (training, ratio) = dropout_mode(args.node, args.host_value(1), args.host_value(2))?;
        if training && ratio != 0.0 {
            let stream =
                super::random::node_stream(rec, "Dropout", args.node, args.float("seed")?)?;
            let mask_out = (args.node.outputs.len() > 1).then(|| args.out(1));
            let (output, mask) =
                rec.dropout_training_to(&stream, &data, ratio, args.out(0), mask_out)?;
            return Ok(std::iter::once(output).chain(mask).collect());
        }
        let mut outputs = vec![rec.identity_to(&data, args.out(0))?];
        if args.node.outputs.len() > 1 {
            let yes = rec.upload(&HostTensor::from_bytes(DType::Bool, vec![], vec![1])?)?;
            let shape: Vec<i64> = data.shape().iter().map(|&d| d as i64).collect();
            outputs.push(rec.expand_to(&yes, &shape, args.out(1))?);
        }
        Ok(outputs)
    },
};

/// Pad's constant: the `constant_value` input (opset 11 on; an empty one is absent), else
/// Pad-2's `value` attribute in the data's dtype, else none (zero).
pub(crate) fn pad_value(
    node: &Node,
    given: Option<&HostTensor>,
    dtype: DType,
) -> Result<Option<HostTensor>> {
    match (given, node.attrs.get("value")) {
        (Some(v), _) if v.numel() == 0 => Ok(None),
        (Some(v), _) => Ok(Some(v.clone())),
        (None, Some(Attr::Float(f))) => Ok(Some(crate::reference::cast_host(
            &HostTensor::from_vec(vec![], &[*f])?,
            dtype,
        )?)),
        _ => Ok(None),
    }
}

static PAD: OpDef = OpDef {
    name: "Pad",
    inputs: 1..=4,
    outputs: 1..=1,
    host: None,
    attrs: &["mode", "pads", "value"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let mode = args.string("mode")?.unwrap_or("constant");
        let mode = PadMode::parse(mode).ok_or_else(|| {
            Error::invalid(
                "Pad",
                "mode",
                format!(
                    "mode '{}' is not one of constant, reflect, edge, wrap",
                    mode.escape_debug()
                ),
            )
        })?;
        // Pad-2 gives the pads as an attribute.
        let pads = match args.indices(1, "pads")? {
            Some(p) => p,
            None => args
                .ints("pads")?
                .ok_or_else(|| Error::invalid("Pad", "pads", "pads is missing"))?,
        };
        if args.dtype_of(2, "constant_value").is_ok() && args.host_value(2).is_none() {
            return Err(Error::invalid(
                "Pad",
                "constant_value",
                "constant_value is computed on the GPU; it must be known when the graph is planned",
            ));
        }
        let value = pad_value(args.node, args.host_value(2), data.dtype())?;
        let axes = args.indices(3, "axes")?;
        Ok(vec![rec.pad_to(
            &data,
            &pads,
            mode,
            value.as_ref(),
            axes.as_deref(),
            args.out(0),
        )?])
    },
};

static TILE: OpDef = OpDef {
    name: "Tile",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "input")?;
        let repeats = args.required_indices(1, "repeats")?;
        Ok(vec![rec.tile_to(&data, &repeats, args.out(0))?])
    },
};

static RESHAPE: OpDef = OpDef {
    name: "Reshape",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
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
    host: None,
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
    host: None,
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
    host: None,
    // `saturate` and `round_mode` matter only for the 8-bit floats.
    attrs: &["to", "saturate", "round_mode", "quantize"],
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
        let mode = super::cast_mode(args.node)?;
        Ok(vec![rec.cast_mode_to(&a, to, mode, args.out(0))?])
    },
};

static CAST_LIKE: OpDef = OpDef {
    name: "CastLike",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["saturate", "quantize"],
    run: |rec, args| {
        let a = args.tensor(0, "input")?;
        let to = args.dtype_of(1, "target_type")?;
        let mode = super::cast_mode(args.node)?;
        Ok(vec![rec.cast_mode_to(&a, to, mode, args.out(0))?])
    },
};

static BITCAST: OpDef = OpDef {
    name: "BitCast",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["to"],
    run: |rec, args| {
        let a = args.tensor(0, "input")?;
        let to = match args.node.attrs.get("to") {
            Some(super::Attr::String(name)) => DType::from_name(name),
            _ => None,
        }
        .ok_or_else(|| Error::invalid("BitCast", "to", "needs a dtype"))?;
        Ok(vec![args.out(0).view(rec, a.bitcast(to)?)?])
    },
};

/// Refuses a node computing on a storage-only type (see [`crate::dtype::STORAGE_ONLY_OPS`]).
pub(crate) fn check_storage_only(
    def: &OpDef,
    node: &Node,
    dtypes: impl Iterator<Item = Option<DType>>,
) -> Result<()> {
    if crate::dtype::STORAGE_ONLY_OPS.contains(&def.name) {
        return Ok(());
    }
    // Scatters that replace elements move them (TensorScatter, a KV cache update, is one).
    let replacing = match node.attrs.get("reduction") {
        None => true,
        Some(super::Attr::String(s)) => s == "none",
        Some(_) => false,
    };
    if replacing && matches!(def.name, "ScatterElements" | "ScatterND" | "Scatter") {
        return Ok(());
    }
    for (k, dtype) in dtypes.enumerate() {
        if let Some(d) = dtype.filter(|d| d.is_storage_only()) {
            let value = node.inputs.get(k).map_or("", String::as_str);
            return Err(Error::invalid(
                def.name,
                value,
                format!(
                    "input {k} ('{value}') is {d}, which only casts and data movement take: cast it to a type {} computes on first",
                    def.name
                ),
            ));
        }
    }
    Ok(())
}

/// The one value of an op that is always computed on the host.
fn host_only(node: &Node) -> Error {
    Error::Graph(format!(
        "node '{}': {} is computed on the host",
        node.name, node.op
    ))
}

static SHAPE: OpDef = OpDef {
    name: "Shape",
    inputs: 1..=1,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let (_, dims) = slot_of(node, slots, 0, "data")?.dtype_shape();
        let attr = |name: &str| match node.attrs.get(name) {
            None => Ok(None),
            Some(super::Attr::Int(v)) => Ok(Some(*v)),
            Some(_) => Err(Error::invalid(
                "Shape",
                name,
                format!("attribute '{name}' must be an integer"),
            )),
        };
        // Shape-15: start and end clamp to [0, rank] after adding the rank to negatives.
        let r = dims.len() as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let start = clamp(attr("start")?.unwrap_or(0));
        let end = clamp(attr("end")?.unwrap_or(r)).max(start);
        let v: Vec<i64> = dims[start..end].iter().map(|&d| d as i64).collect();
        Ok(Some(vec![HostTensor::from_vec(vec![v.len()], &v)?]))
    }),
    attrs: &["start", "end"],
    run: |_, args| Err(host_only(args.node)),
};

static SIZE: OpDef = OpDef {
    name: "Size",
    inputs: 1..=1,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let (_, dims) = slot_of(node, slots, 0, "data")?.dtype_shape();
        let n: usize = dims.iter().product();
        Ok(Some(vec![HostTensor::from_vec(vec![], &[n as i64])?]))
    }),
    attrs: &[],
    run: |_, args| Err(host_only(args.node)),
};

fn slot_of<'a>(node: &Node, slots: &[Option<&'a Slot>], i: usize, role: &str) -> Result<&'a Slot> {
    slots
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| super::exec::missing_input(node, i, role))
}

/// ConstantOfShape's value: a one-element tensor attribute (ONNX), a number (graph files), or
/// f32 zero.
fn fill_value(node: &Node) -> Result<HostTensor> {
    const OP: &str = "ConstantOfShape";
    match node.attrs.get("value") {
        None => HostTensor::from_vec(vec![1], &[0f32]),
        Some(super::Attr::Tensor(t)) if t.numel() == 1 => Ok(t.clone()),
        Some(super::Attr::Float(v)) => HostTensor::from_vec(vec![1], &[*v as f32]),
        Some(super::Attr::Int(v)) => HostTensor::from_vec(vec![1], &[*v]),
        Some(_) => Err(Error::invalid(
            OP,
            "value",
            "value must be a one-element tensor or a number",
        )),
    }
}

static CONSTANT_OF_SHAPE: OpDef = OpDef {
    name: "ConstantOfShape",
    inputs: 1..=1,
    outputs: 1..=1,
    // Small results are constants made on the host; larger ones are filled on the GPU.
    host: Some(|node, slots| {
        let shape = slot_of(node, slots, 0, "input")?;
        let Some(dims) = &shape.host else {
            return Ok(None);
        };
        let dims = dims.to_indices("ConstantOfShape", "input")?;
        let value = fill_value(node)?;
        let n = dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        match n {
            Some(n) if n <= 1 << 14 => Ok(Some(vec![HostTensor {
                dtype: value.dtype,
                shape: dims.iter().map(|&d| d as usize).collect(),
                data: value.data.repeat(n),
            }])),
            _ => Ok(None),
        }
    }),
    attrs: &["value"],
    run: |rec, args| {
        let shape = args.required_indices(0, "input")?;
        let value = rec.upload(&fill_value(args.node)?)?;
        Ok(vec![rec.expand_to(&value, &shape, args.out(0))?])
    },
};

/// Squeeze's and Unsqueeze's axes: the input (opset 13 on) or the attribute (before).
fn axes(args: &NodeArgs) -> Result<Option<Vec<i64>>> {
    match args.indices(1, "axes")? {
        Some(v) => Ok(Some(v)),
        None => args.ints("axes"),
    }
}

static SQUEEZE: OpDef = OpDef {
    name: "Squeeze",
    inputs: 1..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axes"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let axes = axes(args)?;
        Ok(vec![rec.squeeze_to(&data, axes.as_deref(), args.out(0))?])
    },
};

static UNSQUEEZE: OpDef = OpDef {
    name: "Unsqueeze",
    inputs: 1..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axes"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        // onnxruntime takes a scalar for Unsqueeze's axes (not Squeeze's), and ONNX's
        // function bodies (AffineGrid's) give one.
        let scalar = args.host_value(1).filter(|h| h.shape.is_empty());
        let axes = match scalar {
            Some(h) => Some(
                crate::HostTensor {
                    shape: vec![1],
                    ..h.clone()
                }
                .to_indices("Unsqueeze", "axes")?,
            ),
            None => axes(args)?,
        };
        let axes = axes.ok_or_else(|| {
            Error::invalid(
                "Unsqueeze",
                "axes",
                "axes (an input, or an attribute before opset 13) is required",
            )
        })?;
        Ok(vec![rec.unsqueeze_to(&data, &axes, args.out(0))?])
    },
};

static FLATTEN: OpDef = OpDef {
    name: "Flatten",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["axis"],
    run: |rec, args| {
        let data = args.tensor(0, "input")?;
        let axis = args.int("axis")?.unwrap_or(1);
        Ok(vec![rec.flatten_to(&data, axis, args.out(0))?])
    },
};

static EXPAND: OpDef = OpDef {
    name: "Expand",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "input")?;
        let shape = args.required_indices(1, "shape")?;
        Ok(vec![rec.expand_to(&data, &shape, args.out(0))?])
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

fn run_map(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let inputs: Vec<Tensor> = (0..args.len())
        .map(|i| args.tensor(i, ["A", "B", "C"][i.min(2)]))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    Ok(vec![rec.map_to(&args.node.op, &refs, args.out(0))?])
}

macro_rules! map_nodes {
    ($($name:literal $inputs:expr;)*) => {
        /// Graph entries of the element-wise ops only the word kernel computes (comparisons,
        /// logic, Where, rounding, Sign, Erf, the trigonometric and hyperbolic functions).
        static MAPS: [OpDef; 31] = [$(OpDef {
            name: $name,
            inputs: $inputs..=$inputs,
            outputs: 1..=1,
            host: None,
            attrs: &[],
            run: run_map,
        }),*];
    };
}
map_nodes!(
    "Equal" 2; "Less" 2; "LessOrEqual" 2; "Greater" 2; "GreaterOrEqual" 2; "And" 2; "Or" 2;
    "Xor" 2; "Not" 1; "Where" 3; "Sign" 1; "Floor" 1; "Ceil" 1; "Round" 1; "Erf" 1;
    "IsNaN" 1; "Sin" 1; "Cos" 1; "Tan" 1; "Asin" 1; "Acos" 1; "Atan" 1; "Sinh" 1; "Cosh" 1;
    "Asinh" 1; "Acosh" 1; "Atanh" 1; "BitwiseAnd" 2; "BitwiseOr" 2; "BitwiseXor" 2;
    "BitwiseNot" 1;
);

/// LayerNormalization-17: Y and, where named, Mean and InvStdDev.
static LAYER_NORMALIZATION: OpDef = OpDef {
    name: "LayerNormalization",
    inputs: 2..=3,
    outputs: 1..=3,
    host: None,
    attrs: &["axis", "epsilon", "stash_type"],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let scale = args.tensor(1, "Scale")?;
        let bias = match args.node.inputs.get(2) {
            Some(name) if !name.is_empty() => Some(args.tensor(2, "B")?),
            _ => None,
        };
        let wanted = |k: usize| {
            args.node
                .outputs
                .get(k)
                .is_some_and(|o| !o.is_empty())
                .then(|| args.out(k))
        };
        let results = rec.layer_normalization_to(
            &x,
            &scale,
            bias.as_ref(),
            args.int("axis")?.unwrap_or(-1),
            args.float("epsilon")?.unwrap_or(1e-5),
            args.int("stash_type")?.unwrap_or(1),
            [wanted(0), wanted(1), wanted(2)],
        )?;
        // Outputs not named stand empty: nothing reads them.
        Ok(results
            .into_iter()
            .take(args.node.outputs.len())
            .map(|t| t.unwrap_or_else(|| x.clone()))
            .collect())
    },
};

static BATCH_NORMALIZATION: OpDef = OpDef {
    name: "BatchNormalization",
    inputs: 5..=5,
    outputs: 1..=3,
    host: None,
    attrs: &["epsilon", "momentum", "training_mode", "spatial", "is_test"],
    run: |rec, args| {
        const OP: &str = "BatchNormalization";
        let training = args.int("training_mode")?.unwrap_or(0) != 0;
        if !training && args.node.outputs.iter().skip(1).any(|o| !o.is_empty()) {
            return Err(Error::invalid(
                OP,
                "running_mean",
                "running_mean and running_var are outputs of training mode only",
            ));
        }
        // Before opset 9, `spatial` 0 took per-element statistics.
        if args.int("spatial")?.is_some_and(|s| s == 0) {
            return Err(Error::invalid(OP, "spatial", "spatial 0 is not supported"));
        }
        let x = args.tensor(0, "X")?;
        let rest = [
            args.tensor(1, "scale")?,
            args.tensor(2, "B")?,
            args.tensor(3, "input_mean")?,
            args.tensor(4, "input_var")?,
        ];
        let given = [&rest[0], &rest[1], &rest[2], &rest[3]];
        let epsilon = args.float("epsilon")?.unwrap_or(1e-5);
        if !training {
            return Ok(vec![rec.batch_normalization_to(
                &x,
                given,
                epsilon,
                args.out(0),
            )?]);
        }
        let results = rec.batch_normalization_training_to(
            &x,
            given,
            epsilon,
            args.float("momentum")?.unwrap_or(0.9),
            [args.out(0), args.out(1), args.out(2)],
        )?;
        Ok(results.into_iter().take(args.node.outputs.len()).collect())
    },
};

static RMS_NORMALIZATION: OpDef = OpDef {
    name: "RMSNormalization",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "epsilon", "stash_type"],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let scale = args.tensor(1, "Scale")?;
        Ok(vec![rec.rms_normalization_to(
            &x,
            &scale,
            args.int("axis")?.unwrap_or(-1),
            args.float("epsilon")?.unwrap_or(1e-5),
            args.int("stash_type")?.unwrap_or(1),
            args.out(0),
        )?])
    },
};

/// CausalConvWithState-27: output and present_state; bias and past_state optional (empty
/// names allowed).
static CAUSAL_CONV_WITH_STATE: OpDef = OpDef {
    name: "CausalConvWithState",
    inputs: 2..=4,
    outputs: 1..=2,
    host: None,
    attrs: &["activation"],
    run: |rec, args| {
        let given = |k: usize| args.node.inputs.get(k).is_some_and(|n| !n.is_empty());
        let input = args.tensor(0, "input")?;
        let weight = args.tensor(1, "weight")?;
        let bias = given(2).then(|| args.tensor(2, "bias")).transpose()?;
        let past = given(3).then(|| args.tensor(3, "past_state")).transpose()?;
        let state_out = if args.node.outputs.len() > 1 {
            args.out(1)
        } else {
            crate::Out::NEW
        };
        let [y, state] = rec.causal_conv_with_state_to(
            &input,
            &weight,
            bias.as_ref(),
            past.as_ref(),
            args.string("activation")?.unwrap_or("none"),
            [args.out(0), state_out],
        )?;
        let mut outputs = vec![y];
        if args.node.outputs.len() > 1 {
            outputs.push(state);
        }
        Ok(outputs)
    },
};

/// Trilu-14: `k` (optional, one integer known while planning) and `upper` (1).
static TRILU: OpDef = OpDef {
    name: "Trilu",
    inputs: 1..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["upper"],
    run: |rec, args| {
        let input = args.tensor(0, "input")?;
        let k = match args.node.inputs.get(1).filter(|n| !n.is_empty()) {
            Some(_) => match args.host_value(1) {
                Some(t) if t.dtype == DType::I64 && t.numel() == 1 => t.to_vec::<i64>()?[0],
                Some(t) => {
                    return Err(Error::invalid(
                        "Trilu",
                        "k",
                        format!("k is {} {:?}; it must be one i64", t.dtype, t.shape),
                    ))
                }
                None => {
                    return Err(Error::invalid(
                        "Trilu",
                        "k",
                        "k must be known while planning (a constant or computed from shapes)",
                    ))
                }
            },
            None => 0,
        };
        let upper = args.int("upper")?.unwrap_or(1) != 0;
        Ok(vec![rec.trilu_to(&input, k, upper, args.out(0))?])
    },
};

fn run_activation(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let op = args.node.op.as_str();
    let names: &[&str] = match op {
        "PRelu" => &["X", "slope"],
        "SwiGLU" => &["A", "B"],
        _ => &["X"],
    };
    let inputs: Vec<Tensor> = names
        .iter()
        .enumerate()
        .map(|(i, n)| args.tensor(i, n))
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let mut attrs = Vec::new();
    for &(name, _) in crate::ops::activation::float_attributes(op) {
        if let Some(v) = args.float(name)? {
            attrs.push((name, v));
        }
    }
    let approximate = args.string("approximate")?.unwrap_or("none");
    Ok(vec![rec.activation_to(
        op,
        &refs,
        &attrs,
        approximate,
        args.out(0),
    )?])
}

macro_rules! activation_nodes {
    ($($name:literal $inputs:literal [$($attr:literal),*];)*) => {
        /// Graph entries of the activations (see [`crate::ops::activation`]).
        static ACTIVATION_OPS: [OpDef; 15] = [$(OpDef {
            name: $name,
            inputs: $inputs..=$inputs,
            outputs: 1..=1,
            host: None,
            attrs: &[$($attr),*],
            run: run_activation,
        }),*];
    };
}
activation_nodes!(
    "Elu" 1 ["alpha"]; "Selu" 1 ["alpha", "gamma"]; "Celu" 1 ["alpha"];
    "LeakyRelu" 1 ["alpha"]; "ThresholdedRelu" 1 ["alpha"]; "HardSigmoid" 1 ["alpha", "beta"];
    "HardSwish" 1 []; "Softplus" 1 []; "Softsign" 1 []; "Swish" 1 ["alpha"]; "Mish" 1 [];
    "Gelu" 1 ["approximate"]; "Shrink" 1 ["bias", "lambd"]; "PRelu" 2 []; "SwiGLU" 2 ["alpha"];
);

/// IsInf: the signs it detects pick the word kernel's op.
static IS_INF: OpDef = OpDef {
    name: "IsInf",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["detect_negative", "detect_positive"],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let op = crate::ops::elementwise::is_inf_op(
            args.int("detect_positive")?.unwrap_or(1) != 0,
            args.int("detect_negative")?.unwrap_or(1) != 0,
        );
        Ok(vec![rec.map_to(op, &[&x], args.out(0))?])
    },
};

static MOD: OpDef = OpDef {
    name: "Mod",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["fmod"],
    run: |rec, args| {
        let (a, b) = (args.tensor(0, "A")?, args.tensor(1, "B")?);
        let fmod = args.int("fmod")?.unwrap_or(0) != 0;
        let op = if fmod { "FMod" } else { "Mod" };
        Ok(vec![rec.map_to(op, &[&a, &b], args.out(0))?])
    },
};

/// BitShift: its `direction` (LEFT or RIGHT) names the word kernel's op.
static BIT_SHIFT: OpDef = OpDef {
    name: "BitShift",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["direction"],
    run: |rec, args| {
        let (x, y) = (args.tensor(0, "X")?, args.tensor(1, "Y")?);
        let op = bit_shift_op(args.string("direction")?)
            .ok_or_else(|| Error::invalid("BitShift", "direction", "must be LEFT or RIGHT"))?;
        Ok(vec![rec.map_to(op, &[&x, &y], args.out(0))?])
    },
};

/// The word kernel's op for BitShift's `direction`, if it is one.
pub(crate) fn bit_shift_op(direction: Option<&str>) -> Option<&'static str> {
    match direction {
        Some("LEFT") => Some("BitShiftLeft"),
        Some("RIGHT") => Some("BitShiftRight"),
        _ => None,
    }
}

/// Clip: absent bounds do not bound (the dtype's infinities or extremes stand for them);
/// Clip-6's float attributes are bounds too.
static CLIP: OpDef = OpDef {
    name: "Clip",
    inputs: 1..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["min", "max"],
    run: |rec, args| {
        let x = args.tensor(0, "input")?;
        let mut bounds = Vec::new();
        for (k, (name, none)) in [("min", f64::NEG_INFINITY), ("max", f64::INFINITY)]
            .into_iter()
            .enumerate()
        {
            if args.len() > k + 1 && args.dtype_of(k + 1, name).is_ok() {
                bounds.push(args.tensor(k + 1, name)?);
                continue;
            }
            let v = match args.node.attrs.get(name) {
                Some(Attr::Float(v)) => *v,
                _ => none,
            };
            let v = HostTensor::from_vec(Vec::new(), &[v])?;
            let v = crate::reference::cast_host(&v, x.dtype())?;
            bounds.push(rec.upload(&v)?);
        }
        Ok(vec![rec.map_to(
            "Clip",
            &[&x, &bounds[0], &bounds[1]],
            args.out(0),
        )?])
    },
};

fn run_reduce(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    // Axes are an input from opset 18 (13 for ReduceSum), an attribute before.
    let axes = match args.indices(1, "axes")? {
        Some(a) => Some(a),
        None => args.ints("axes")?,
    };
    let keepdims = args.int("keepdims")?.unwrap_or(1) != 0;
    let noop = args.int("noop_with_empty_axes")?.unwrap_or(0) != 0;
    if let Some(p) = args.pending(0) {
        let leaves: Vec<&Tensor> = p.leaves.iter().map(|(_, t)| t).collect();
        return Ok(vec![rec.reduce_program_to(
            &args.node.op,
            &p.program,
            &leaves,
            &p.shape,
            axes.as_deref(),
            keepdims,
            noop,
            args.out(0),
        )?]);
    }
    let data = args.tensor(0, "data")?;
    Ok(vec![rec.reduce_to(
        &args.node.op,
        &data,
        axes.as_deref(),
        keepdims,
        noop,
        args.out(0),
    )?])
}

macro_rules! reduce_nodes {
    ($($name:literal)*) => {
        /// Graph entries of the reductions.
        static REDUCTIONS: [OpDef; 10] = [$(OpDef {
            name: $name,
            inputs: 1..=2,
            outputs: 1..=1,
            host: None,
            attrs: &["axes", "keepdims", "noop_with_empty_axes"],
            run: run_reduce,
        }),*];
    };
}
reduce_nodes!(
    "ReduceSum" "ReduceSumSquare" "ReduceMean" "ReduceMax" "ReduceMin" "ReduceProd" "ReduceL1"
    "ReduceL2" "ReduceLogSum" "ReduceLogSumExp"
);

fn run_arg(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let data = args.tensor(0, "data")?;
    Ok(vec![rec.arg_reduce_to(
        &args.node.op,
        &data,
        args.int("axis")?.unwrap_or(0),
        args.int("keepdims")?.unwrap_or(1) != 0,
        args.int("select_last_index")?.unwrap_or(0) != 0,
        args.out(0),
    )?])
}

/// A float attribute (ONNX floats; integers accepted), `default` when absent.
fn float_attr(node: &Node, name: &str, default: f64) -> Result<f64> {
    match node.attrs.get(name) {
        None => Ok(default),
        Some(Attr::Float(v)) => Ok(*v),
        Some(Attr::Int(v)) => Ok(*v as f64),
        Some(other) => Err(Error::Graph(format!(
            "node '{}': attribute '{name}' must be a number, not {other:?}",
            node.name
        ))),
    }
}

static GEMM: OpDef = OpDef {
    name: "Gemm",
    inputs: 2..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["alpha", "beta", "transA", "transB"],
    run: |rec, args| {
        let (a, b) = (args.tensor(0, "A")?, args.tensor(1, "B")?);
        let c = match args.host_value(2).is_some() || args.dtype_of(2, "C").is_ok() {
            true => Some(args.tensor(2, "C")?),
            false => None,
        };
        Ok(vec![rec.gemm_to(
            &a,
            &b,
            c.as_ref(),
            float_attr(args.node, "alpha", 1.0)?,
            float_attr(args.node, "beta", 1.0)?,
            args.int("transA")?.unwrap_or(0) != 0,
            args.int("transB")?.unwrap_or(0) != 0,
            args.out(0),
        )?])
    },
};

/// The window attributes of Conv, ConvTranspose and the pools, owned.
struct WindowArgs {
    kernel_shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    auto_pad: String,
    ceil_mode: bool,
}

impl WindowArgs {
    fn read(args: &NodeArgs) -> Result<WindowArgs> {
        Ok(WindowArgs {
            kernel_shape: args.ints("kernel_shape")?,
            strides: args.ints("strides")?,
            dilations: args.ints("dilations")?,
            pads: args.ints("pads")?,
            auto_pad: args.string("auto_pad")?.unwrap_or("NOTSET").to_string(),
            ceil_mode: args.int("ceil_mode")?.unwrap_or(0) != 0,
        })
    }

    fn attrs(&self) -> crate::ops::window::WindowAttrs<'_> {
        crate::ops::window::WindowAttrs {
            kernel_shape: self.kernel_shape.as_deref(),
            strides: self.strides.as_deref(),
            dilations: self.dilations.as_deref(),
            pads: self.pads.as_deref(),
            auto_pad: &self.auto_pad,
            ceil_mode: self.ceil_mode,
        }
    }
}

/// Optional input `i` when the node gives it.
fn optional_tensor(args: &NodeArgs, i: usize, role: &str) -> Result<Option<Tensor>> {
    match args.host_value(i).is_some() || args.dtype_of(i, role).is_ok() {
        true => Ok(Some(args.tensor(i, role)?)),
        false => Ok(None),
    }
}

/// Conv's attributes: its geometry (the integer convolutions pass them on).
pub(crate) const CONV_ATTRS: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

static CONV: OpDef = OpDef {
    name: "Conv",
    inputs: 2..=3,
    outputs: 1..=1,
    host: None,
    attrs: CONV_ATTRS,
    run: |rec, args| {
        let (x, w) = (args.tensor(0, "X")?, args.tensor(1, "W")?);
        let b = optional_tensor(args, 2, "B")?;
        let window = WindowArgs::read(args)?;
        Ok(vec![rec.conv_to(
            &x,
            &w,
            b.as_ref(),
            &window.attrs(),
            args.int("group")?.unwrap_or(1),
            args.out(0),
        )?])
    },
};

static CONV_TRANSPOSE: OpDef = OpDef {
    name: "ConvTranspose",
    inputs: 2..=3,
    outputs: 1..=1,
    host: None,
    attrs: &[
        "auto_pad",
        "dilations",
        "group",
        "kernel_shape",
        "output_padding",
        "output_shape",
        "pads",
        "strides",
    ],
    run: |rec, args| {
        let (x, w) = (args.tensor(0, "X")?, args.tensor(1, "W")?);
        let b = optional_tensor(args, 2, "B")?;
        let window = WindowArgs::read(args)?;
        let output_padding = args.ints("output_padding")?;
        let output_shape = args.ints("output_shape")?;
        let attrs = crate::ops::window::TransposeAttrs {
            window: window.attrs(),
            output_padding: output_padding.as_deref(),
            output_shape: output_shape.as_deref(),
        };
        Ok(vec![rec.conv_transpose_to(
            &x,
            &w,
            b.as_ref(),
            &attrs,
            args.int("group")?.unwrap_or(1),
            args.out(0),
        )?])
    },
};

static MAX_POOL: OpDef = OpDef {
    name: "MaxPool",
    inputs: 1..=1,
    outputs: 1..=2,
    host: None,
    attrs: &[
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "pads",
        "storage_order",
        "strides",
    ],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let window = WindowArgs::read(args)?;
        let want_indices = args.node.outputs.get(1).is_some_and(|o| !o.is_empty());
        let (y, indices) = rec.max_pool_to(
            &x,
            &window.attrs(),
            args.int("storage_order")?.unwrap_or(0),
            (args.out(0), want_indices.then(|| args.out(1))),
        )?;
        Ok([y].into_iter().chain(indices).collect())
    },
};

static AVERAGE_POOL: OpDef = OpDef {
    name: "AveragePool",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &[
        "auto_pad",
        "ceil_mode",
        "count_include_pad",
        "dilations",
        "kernel_shape",
        "pads",
        "strides",
    ],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let window = WindowArgs::read(args)?;
        Ok(vec![rec.average_pool_to(
            &x,
            &window.attrs(),
            args.int("count_include_pad")?.unwrap_or(0) != 0,
            args.out(0),
        )?])
    },
};

static LP_POOL: OpDef = OpDef {
    name: "LpPool",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &[
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "p",
        "pads",
        "strides",
    ],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let window = WindowArgs::read(args)?;
        Ok(vec![rec.lp_pool_to(
            &x,
            &window.attrs(),
            args.int("p")?.unwrap_or(2),
            args.out(0),
        )?])
    },
};

fn run_global_pool(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let x = args.tensor(0, "X")?;
    let p = args.int("p")?.unwrap_or(2);
    Ok(vec![rec.global_pool_to(
        &args.node.op,
        &x,
        p,
        args.out(0),
    )?])
}

static GLOBAL_AVERAGE_POOL: OpDef = OpDef {
    name: "GlobalAveragePool",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: run_global_pool,
};

static GLOBAL_MAX_POOL: OpDef = OpDef {
    name: "GlobalMaxPool",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: run_global_pool,
};

static GLOBAL_LP_POOL: OpDef = OpDef {
    name: "GlobalLpPool",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["p"],
    run: run_global_pool,
};

/// Input `i` as f64 values when given (an empty tensor counts as absent); it must be known on
/// the host.
fn host_floats(args: &NodeArgs, i: usize, role: &str) -> Result<Option<Vec<f64>>> {
    if args.node.inputs.get(i).is_none_or(|n| n.is_empty()) {
        return Ok(None);
    }
    let Some(h) = args.host_value(i) else {
        return Err(Error::Graph(format!(
            "node '{}': {} input '{role}' ('{}') is computed on the GPU, but its values are needed on the host to plan the op; give it as a constant or a graph input",
            args.node.name, args.node.op, args.node.inputs[i]
        )));
    };
    let wide = crate::reference::cast_host(h, DType::F64)?;
    Ok(Some(wide.to_vec::<f64>()?).filter(|v| !v.is_empty()))
}

/// Optional input `i`, one integer known while planning (a frame length, an axis).
fn host_int(op: &'static str, args: &NodeArgs, i: usize, role: &str) -> Result<Option<i64>> {
    if args.node.inputs.get(i).is_none_or(|n| n.is_empty()) {
        return Ok(None);
    }
    let Some(h) = args.host_value(i) else {
        return Err(Error::Graph(format!(
            "node '{}': {} input '{role}' ('{}') is computed on the GPU, but its value is needed on the host to plan the op; give it as a constant or a graph input",
            args.node.name, args.node.op, args.node.inputs[i]
        )));
    };
    if h.numel() != 1 {
        return Err(Error::Graph(format!(
            "node '{}': {} input '{role}' must hold one integer, not shape {:?}",
            args.node.name, args.node.op, h.shape
        )));
    }
    let one = HostTensor {
        shape: vec![1],
        ..h.clone()
    };
    Ok(Some(one.to_indices(op, role)?[0]))
}

static DFT: OpDef = OpDef {
    name: "DFT",
    inputs: 1..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["inverse", "onesided"],
    run: |rec, args| {
        let length = host_int("DFT", args, 1, "dft_length")?;
        let axis = host_int("DFT", args, 2, "axis")?.unwrap_or(-2);
        Ok(vec![rec.dft_to(
            &args.tensor(0, "input")?,
            length,
            axis,
            args.int("inverse")?.unwrap_or(0) != 0,
            args.int("onesided")?.unwrap_or(0) != 0,
            args.out(0),
        )?])
    },
};

static STFT: OpDef = OpDef {
    name: "STFT",
    inputs: 2..=4,
    outputs: 1..=1,
    host: None,
    attrs: &["onesided"],
    run: |rec, args| {
        let step = host_int("STFT", args, 1, "frame_step")?
            .ok_or_else(|| Error::invalid("STFT", "frame_step", "STFT needs frame_step"))?;
        let window = host_floats(args, 2, "window")?;
        let length = host_int("STFT", args, 3, "frame_length")?;
        Ok(vec![rec.stft_to(
            &args.tensor(0, "signal")?,
            step,
            window.as_deref(),
            length,
            args.int("onesided")?.unwrap_or(1) != 0,
            args.out(0),
        )?])
    },
};

static AFFINE_GRID: OpDef = OpDef {
    name: "AffineGrid",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["align_corners"],
    run: |rec, args| {
        let size = args.required_indices(1, "size")?;
        Ok(vec![rec.affine_grid_to(
            &args.tensor(0, "theta")?,
            &size,
            args.int("align_corners")?.unwrap_or(0) != 0,
            args.out(0),
        )?])
    },
};

static COL2IM: OpDef = OpDef {
    name: "Col2Im",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["dilations", "pads", "strides"],
    run: |rec, args| {
        let image = args.required_indices(1, "image_shape")?;
        let block = args.required_indices(2, "block_shape")?;
        let (strides, dilations, pads) = (
            args.ints("strides")?,
            args.ints("dilations")?,
            args.ints("pads")?,
        );
        Ok(vec![rec.col2im_to(
            &args.tensor(0, "input")?,
            &image,
            &block,
            strides.as_deref(),
            dilations.as_deref(),
            pads.as_deref(),
            args.out(0),
        )?])
    },
};

/// Decision trees walked to their leaves (the ONNX-ML tree ensembles load as it).
static TREE_WALK: OpDef = OpDef {
    name: "TreeWalk",
    inputs: 4..=4,
    outputs: 1..=1,
    host: None,
    attrs: &["depth"],
    run: |rec, args| {
        let known = |k: usize| {
            args.host_value(k)
                .filter(|t| t.dtype == DType::I32)
                .and_then(|t| t.to_vec::<i32>().ok())
        };
        let (nodes, roots) = (known(1), known(3));
        Ok(vec![rec.tree_walk_to(
            &args.tensor(0, "X")?,
            &args.tensor(1, "nodes")?,
            &args.tensor(2, "thresholds")?,
            &args.tensor(3, "roots")?,
            args.int("depth")?.unwrap_or(0),
            nodes.as_deref().zip(roots.as_deref()),
            args.out(0),
        )?])
    },
};

static DET: OpDef = OpDef {
    name: "Det",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: |rec, args| Ok(vec![rec.det_to(&args.tensor(0, "X")?, args.out(0))?]),
};

static GRID_SAMPLE: OpDef = OpDef {
    name: "GridSample",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["align_corners", "mode", "padding_mode"],
    run: |rec, args| {
        let attrs = crate::ops::grid_sample::GridSampleAttrs {
            mode: args.string("mode")?.unwrap_or("linear"),
            padding_mode: args.string("padding_mode")?.unwrap_or("zeros"),
            align_corners: args.int("align_corners")?.unwrap_or(0) != 0,
        };
        Ok(vec![rec.grid_sample_to(
            &args.tensor(0, "X")?,
            &args.tensor(1, "grid")?,
            &attrs,
            args.out(0),
        )?])
    },
};

static RESIZE: OpDef = OpDef {
    name: "Resize",
    inputs: 1..=4,
    outputs: 1..=1,
    host: None,
    attrs: &[
        "antialias",
        "axes",
        "coordinate_transformation_mode",
        "cubic_coeff_a",
        "exclude_outside",
        "extrapolation_value",
        "keep_aspect_ratio_policy",
        "mode",
        "nearest_mode",
        "upscale_only",
    ],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let roi = host_floats(args, 1, "roi")?;
        let scales = host_floats(args, 2, "scales")?;
        let sizes = args.indices(3, "sizes")?.filter(|v| !v.is_empty());
        let axes = args.ints("axes")?;
        let attrs = crate::ops::resize::ResizeAttrs {
            mode: args.string("mode")?.unwrap_or("nearest"),
            coordinate_transformation_mode: args
                .string("coordinate_transformation_mode")?
                .unwrap_or("half_pixel"),
            nearest_mode: args.string("nearest_mode")?.unwrap_or("round_prefer_floor"),
            cubic_coeff_a: args.float("cubic_coeff_a")?.unwrap_or(-0.75),
            exclude_outside: args.int("exclude_outside")?.unwrap_or(0) != 0,
            extrapolation_value: args.float("extrapolation_value")?.unwrap_or(0.0),
            antialias: args.int("antialias")?.unwrap_or(0) != 0,
            keep_aspect_ratio_policy: args
                .string("keep_aspect_ratio_policy")?
                .unwrap_or("stretch"),
            axes: axes.as_deref(),
            upscale_only: args.int("upscale_only")?.unwrap_or(0) != 0,
        };
        Ok(vec![rec.resize_to(
            &x,
            roi.as_deref(),
            scales.as_deref(),
            sizes.as_deref(),
            &attrs,
            args.out(0),
        )?])
    },
};

static INSTANCE_NORMALIZATION: OpDef = OpDef {
    name: "InstanceNormalization",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["epsilon"],
    run: |rec, args| {
        let (x, scale, b) = (
            args.tensor(0, "input")?,
            args.tensor(1, "scale")?,
            args.tensor(2, "B")?,
        );
        Ok(vec![rec.channel_normalization_to(
            "InstanceNormalization",
            &x,
            &scale,
            &b,
            None,
            args.float("epsilon")?.unwrap_or(1e-5),
            1,
            args.out(0),
        )?])
    },
};

static GROUP_NORMALIZATION: OpDef = OpDef {
    name: "GroupNormalization",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["epsilon", "num_groups", "stash_type"],
    run: |rec, args| {
        let (x, scale, b) = (
            args.tensor(0, "X")?,
            args.tensor(1, "scale")?,
            args.tensor(2, "bias")?,
        );
        let groups = args.int("num_groups")?.ok_or_else(|| {
            Error::invalid(
                "GroupNormalization",
                "num_groups",
                "the attribute 'num_groups' is required",
            )
        })?;
        Ok(vec![rec.channel_normalization_to(
            "GroupNormalization",
            &x,
            &scale,
            &b,
            Some(groups),
            args.float("epsilon")?.unwrap_or(1e-5),
            args.int("stash_type")?.unwrap_or(1),
            args.out(0),
        )?])
    },
};

static LRN: OpDef = OpDef {
    name: "LRN",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["alpha", "beta", "bias", "size"],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let size = args
            .int("size")?
            .ok_or_else(|| Error::invalid("LRN", "size", "the attribute 'size' is required"))?;
        Ok(vec![rec.lrn_to(
            &x,
            size,
            args.float("alpha")?.unwrap_or(1e-4),
            args.float("beta")?.unwrap_or(0.75),
            args.float("bias")?.unwrap_or(1.0),
            args.out(0),
        )?])
    },
};

/// The dtype a constant-making op's `output_datatype` names (f32 when absent).
fn output_datatype(op: &'static str, node: &Node) -> Result<DType> {
    match node.attrs.get("output_datatype") {
        None => Ok(DType::F32),
        Some(Attr::String(name)) => DType::from_name(name).ok_or_else(|| {
            Error::invalid(
                op,
                "output_datatype",
                format!(
                    "output_datatype '{}' is not one of ours",
                    name.escape_debug()
                ),
            )
        }),
        Some(_) => Err(Error::invalid(
            op,
            "output_datatype",
            "output_datatype must be a dtype name",
        )),
    }
}

/// A signal window of node `node` whose size is `size`.
pub(crate) fn signal_window_of(node: &Node, size: &HostTensor) -> Result<HostTensor> {
    let op = match node.op.as_str() {
        "HannWindow" => "HannWindow",
        "HammingWindow" => "HammingWindow",
        _ => "BlackmanWindow",
    };
    // A scalar (the spec's form) or one value.
    let flat = HostTensor {
        shape: vec![size.numel()],
        ..HostTensor::clone(size)
    };
    let size = match flat.to_indices(op, "size")?.as_slice() {
        [n] => *n,
        other => {
            return Err(Error::invalid(
                op,
                "size",
                format!("size holds {} values; it is one integer", other.len()),
            ))
        }
    };
    let dtype = output_datatype(op, node)?;
    let periodic = !matches!(node.attrs.get("periodic"), Some(Attr::Int(0)));
    crate::ops::signal::signal_window(op, size, periodic, dtype)
}

fn signal_window_op(name: &'static str) -> OpDef {
    OpDef {
        name,
        inputs: 1..=1,
        outputs: 1..=1,
        // The size is known while planning: the window is a constant made there.
        host: Some(|node, slots| match &slot_of(node, slots, 0, "size")?.host {
            Some(size) => Ok(Some(vec![signal_window_of(node, size)?])),
            None => Ok(None),
        }),
        attrs: &["output_datatype", "periodic"],
        run: |rec, args| {
            let size = args.required_indices(0, "size")?;
            let host = HostTensor::from_vec(vec![size.len()], &size)?;
            let t = rec.upload(&signal_window_of(args.node, &host)?)?;
            Ok(vec![rec.identity_to(&t, args.out(0))?])
        },
    }
}

/// MelWeightMatrix of node `node` from its five scalar inputs.
pub(crate) fn mel_weight_matrix_of(node: &Node, inputs: &[&HostTensor]) -> Result<HostTensor> {
    const OP: &str = "MelWeightMatrix";
    let value = |i: usize, role: &str| -> Result<f64> {
        let t = inputs[i];
        if t.numel() != 1 {
            return Err(Error::invalid(
                OP,
                role,
                format!("{role} holds {} values; it is one number", t.numel()),
            ));
        }
        Ok(crate::reference::cast_host(t, DType::F64)?.to_vec::<f64>()?[0])
    };
    let whole = |i: usize, role: &str| -> Result<i64> {
        if !inputs[i].dtype.is_integer() {
            return Err(Error::invalid(
                OP,
                role,
                format!("{role} is {}; it is an integer", inputs[i].dtype),
            ));
        }
        Ok(value(i, role)? as i64)
    };
    let dtype = output_datatype(OP, node)?;
    crate::ops::signal::mel_weight_matrix(
        whole(0, "num_mel_bins")?,
        whole(1, "dft_length")?,
        whole(2, "sample_rate")?,
        value(3, "lower_edge_hertz")?,
        value(4, "upper_edge_hertz")?,
        dtype,
    )
}

static MEL_WEIGHT_MATRIX: OpDef = OpDef {
    name: "MelWeightMatrix",
    inputs: 5..=5,
    outputs: 1..=1,
    // Its inputs are known while planning: the matrix is a constant made there.
    host: Some(|node, slots| {
        let mut values = Vec::with_capacity(5);
        for (i, role) in [
            "num_mel_bins",
            "dft_length",
            "sample_rate",
            "lower_edge_hertz",
            "upper_edge_hertz",
        ]
        .into_iter()
        .enumerate()
        {
            match &slot_of(node, slots, i, role)?.host {
                Some(v) => values.push(&**v),
                None => return Ok(None),
            }
        }
        Ok(Some(vec![mel_weight_matrix_of(node, &values)?]))
    }),
    attrs: &["output_datatype"],
    run: |_, args| {
        Err(Error::invalid(
            "MelWeightMatrix",
            "num_mel_bins",
            format!(
                "node '{}': MelWeightMatrix's inputs are computed on the GPU; they must be known when the graph is planned",
                args.node.name.escape_debug()
            ),
        ))
    },
};

static HANN_WINDOW: std::sync::LazyLock<OpDef> =
    std::sync::LazyLock::new(|| signal_window_op("HannWindow"));
static HAMMING_WINDOW: std::sync::LazyLock<OpDef> =
    std::sync::LazyLock::new(|| signal_window_op("HammingWindow"));
static BLACKMAN_WINDOW: std::sync::LazyLock<OpDef> =
    std::sync::LazyLock::new(|| signal_window_op("BlackmanWindow"));

static GATHER_ND: OpDef = OpDef {
    name: "GatherND",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["batch_dims"],
    run: |rec, args| {
        let (data, indices) = (args.tensor(0, "data")?, args.tensor(1, "indices")?);
        let batch_dims = args.int("batch_dims")?.unwrap_or(0);
        // Indices known on the host are range-checked (one read on the GPU out of range
        // gives zeros).
        if let Some(host) = args.host_value(1) {
            crate::ops::gather_nd::gather_nd_shape(data.shape(), &host.shape, batch_dims)?;
            crate::ops::gather_nd::check_gather_nd_indices(
                data.shape(),
                host,
                batch_dims as usize,
            )?;
        }
        let out = args.out(0);
        let y = checking_gpu_indices(rec, args, (1, "indices"), |rec| {
            rec.gather_nd_to(&data, &indices, batch_dims, out)
        })?;
        Ok(vec![y])
    },
};

static REVERSE_SEQUENCE: OpDef = OpDef {
    name: "ReverseSequence",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["batch_axis", "time_axis"],
    run: |rec, args| {
        let input = args.tensor(0, "input")?;
        let lengths = args.required_indices(1, "sequence_lens")?;
        Ok(vec![rec.reverse_sequence_to(
            &input,
            &lengths,
            args.int("time_axis")?.unwrap_or(0),
            args.int("batch_axis")?.unwrap_or(1),
            args.out(0),
        )?])
    },
};

/// Compress's condition: bool values known on the host (the output's length depends on them).
fn condition_values(args: &NodeArgs) -> Result<Vec<bool>> {
    let name = args.node.inputs.get(1).cloned().unwrap_or_default();
    let Some(h) = args.host_value(1) else {
        return Err(Error::Graph(format!(
            "node '{}': Compress input 'condition' ('{name}') is computed on the GPU, but its values are needed on the host to plan the op; give it as a constant or a graph input",
            args.node.name
        )));
    };
    if h.dtype != DType::Bool || h.shape.len() != 1 {
        return Err(Error::invalid(
            "Compress",
            "condition",
            format!(
                "condition is {} {:?}; it must be 1-D bool",
                h.dtype, h.shape
            ),
        ));
    }
    h.to_vec::<bool>()
}

/// NonZero's output: the coordinates of X's non-zero elements (NaN counts), `[rank, count]`
/// i64, in C order, as the ONNX reference gives them.
pub(crate) fn non_zero_of(x: &HostTensor) -> Result<HostTensor> {
    let set = crate::reference::cast_host(x, DType::Bool)?.to_vec::<bool>()?;
    let strides = crate::host::c_strides(&x.shape);
    let flat: Vec<usize> = (0..set.len()).filter(|&i| set[i]).collect();
    let mut out = Vec::with_capacity(flat.len() * x.shape.len());
    for (axis, &stride) in strides.iter().enumerate() {
        let len = x.shape[axis] as u64;
        out.extend(flat.iter().map(|&i| ((i as u64 / stride) % len) as i64));
    }
    HostTensor::from_vec(vec![x.shape.len(), flat.len()], &out)
}

/// NonMaxSuppression's output length is the count of boxes it keeps: computed on the host
/// while planning (`reference::nms`), from values known there or read back.
static NON_MAX_SUPPRESSION: OpDef = OpDef {
    name: "NonMaxSuppression",
    inputs: 2..=5,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let known = |i: usize| slots.get(i).copied().flatten().map(|s| s.host.as_deref());
        let (Some(Some(boxes)), Some(Some(scores))) = (known(0), known(1)) else {
            return Ok(None);
        };
        let mut limits = [None; 3];
        for (k, limit) in limits.iter_mut().enumerate() {
            match known(2 + k) {
                None => {}
                Some(Some(v)) => *limit = Some(v),
                Some(None) => return Ok(None),
            }
        }
        let center = match node.attrs.get("center_point_box") {
            None => 0,
            Some(super::Attr::Int(v)) => *v,
            Some(_) => {
                return Err(Error::invalid(
                    "NonMaxSuppression",
                    "center_point_box",
                    "center_point_box must be an integer",
                ))
            }
        };
        Ok(Some(vec![crate::reference::nms::non_max_suppression(
            boxes, scores, limits, center,
        )?]))
    }),
    attrs: &["center_point_box"],
    run: |_, args| {
        Err(Error::Graph(format!(
            "node '{}': NonMaxSuppression's inputs are computed on the GPU, but the count of boxes it keeps is the output's shape, which is needed on the host to plan the graph, and this run cannot read them back (a Scan body, or read-backs off as in the browser)",
            args.node.name.escape_debug()
        )))
    },
};

/// Unique's attributes: `axis` (none: the elements flattened) and `sorted` (1).
fn unique_attrs(node: &Node) -> Result<(Option<i64>, bool)> {
    let int = |name: &str| match node.attrs.get(name) {
        None => Ok(None),
        Some(super::Attr::Int(v)) => Ok(Some(*v)),
        Some(_) => Err(Error::invalid(
            "Unique",
            name,
            format!("{name} must be an integer"),
        )),
    };
    Ok((int("axis")?, int("sorted")?.unwrap_or(1) != 0))
}

/// Unique's outputs' length is the number of distinct values: computed on the host while
/// planning (`reference::unique`), from values known there or read back.
static UNIQUE: OpDef = OpDef {
    name: "Unique",
    inputs: 1..=1,
    outputs: 1..=4,
    host: Some(|node, slots| {
        let Some(x) = &slot_of(node, slots, 0, "X")?.host else {
            return Ok(None);
        };
        let (axis, sorted) = unique_attrs(node)?;
        let outs = crate::reference::unique::unique(x, axis, sorted)?;
        Ok(Some(outs.into_iter().take(node.outputs.len()).collect()))
    }),
    attrs: &["axis", "sorted"],
    run: |_, args| {
        Err(Error::Graph(format!(
            "node '{}': Unique input 'X' ('{}') is computed on the GPU, but its count of distinct values is the outputs' shape, which is needed on the host to plan the graph, and this run cannot read it back (a Scan body, or read-backs off as in the browser)",
            args.node.name.escape_debug(),
            args.node.inputs.first().map_or("", String::as_str).escape_debug()
        )))
    },
};

/// PairwiseCoupling: class probabilities from pairwise ones (`reference::coupling`, an
/// iteration with a stopping test): on the host when the pairs are known there, else on the
/// GPU (every sweep, up to `ops::coupling::GPU_MAX_CLASSES` classes), else read back.
static PAIRWISE_COUPLING: OpDef = OpDef {
    name: "PairwiseCoupling",
    inputs: 1..=1,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let Some(pairs) = &slot_of(node, slots, 0, "pairs")?.host else {
            return Ok(None);
        };
        Ok(Some(vec![crate::reference::coupling::pairwise_coupling(
            pairs,
        )?]))
    }),
    attrs: &[],
    run: |rec, args| {
        let pairs = args.tensor(0, "pairs")?;
        let max = crate::ops::coupling::GPU_MAX_CLASSES;
        let on_host = crate::reference::coupling::coupling_classes(pairs.dtype(), pairs.shape())
            .is_ok_and(|k| k > max);
        #[cfg(feature = "native")]
        if on_host && rec.can_read_back() {
            let values = rec.read_back("PairwiseCoupling", &[&pairs])?;
            let host = crate::reference::coupling::pairwise_coupling(&values[0])?;
            let probabilities = rec.upload(&host)?;
            return Ok(vec![args.out(0).view(rec, probabilities)?]);
        }
        if on_host {
            return Err(Error::Graph(format!(
                "node '{}': PairwiseCoupling input 'pairs' ('{}') has more than {max} classes, which are coupled on the host, and this run cannot read it back (a Scan body, or read-backs off as in the browser)",
                args.node.name.escape_debug(),
                args.node.inputs.first().map_or("", String::as_str).escape_debug(),
            )));
        }
        Ok(vec![rec.pairwise_coupling_to(&pairs, args.out(0))?])
    },
};

/// NonZero's output shape is its input's count of non-zero elements: the input must be known
/// while planning (a constant, a graph input, or computed from them on the host).
static NON_ZERO: OpDef = OpDef {
    name: "NonZero",
    inputs: 1..=1,
    outputs: 1..=1,
    host: Some(|node, slots| match &slot_of(node, slots, 0, "X")?.host {
        Some(x) => Ok(Some(vec![non_zero_of(x)?])),
        None => Ok(None),
    }),
    attrs: &[],
    run: |_, args| {
        Err(Error::Graph(format!(
            "node '{}': NonZero input 'X' ('{}') is computed on the GPU, but its count of non-zero elements is the output's shape, which is needed on the host to plan the graph, and this run cannot read it back (a Scan body, or read-backs off as in the browser); give it as a constant or a graph input",
            args.node.name.escape_debug(),
            args.node.inputs.first().map_or("", String::as_str).escape_debug()
        )))
    },
};

/// ImageDecoder: the image's size is the output's shape, so it is decoded on the host while
/// planning (an input computed on the GPU is read back where the run can).
static IMAGE_DECODER: OpDef = OpDef {
    name: "ImageDecoder",
    inputs: 1..=1,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let format = match node.attrs.get("pixel_format") {
            None => "RGB",
            Some(super::Attr::String(s)) => s.as_str(),
            Some(_) => {
                return Err(Error::invalid(
                    "ImageDecoder",
                    "pixel_format",
                    "pixel_format must be a string",
                ))
            }
        };
        match &slot_of(node, slots, 0, "encoded_stream")?.host {
            Some(bytes) => Ok(Some(vec![decode(bytes, format)?])),
            None => Ok(None),
        }
    }),
    attrs: &["pixel_format"],
    run: |_, args| {
        Err(Error::Graph(format!(
            "node '{}': ImageDecoder input 'encoded_stream' ('{}') is computed on the GPU, but the image's size is the output's shape, which is needed on the host to plan the graph, and this run cannot read it back (a Scan body, or read-backs off as in the browser); give it as a constant or a graph input",
            args.node.name.escape_debug(),
            args.node.inputs.first().map_or("", String::as_str).escape_debug()
        )))
    },
};

fn decode(bytes: &HostTensor, format: &str) -> Result<HostTensor> {
    crate::ops::image_decoder::decode_image(bytes, format)
}

static COMPRESS: OpDef = OpDef {
    name: "Compress",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axis"],
    run: |rec, args| {
        let input = args.tensor(0, "input")?;
        let condition = condition_values(args)?;
        Ok(vec![rec.compress_to(
            &input,
            &condition,
            args.int("axis")?,
            args.out(0),
        )?])
    },
};

static CENTER_CROP_PAD: OpDef = OpDef {
    name: "CenterCropPad",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axes"],
    run: |rec, args| {
        let input = args.tensor(0, "input_data")?;
        let shape = args.required_indices(1, "shape")?;
        let axes = args.ints("axes")?;
        Ok(vec![rec.center_crop_pad_to(
            &input,
            &shape,
            axes.as_deref(),
            args.out(0),
        )?])
    },
};

static EINSUM: OpDef = OpDef {
    name: "Einsum",
    inputs: 1..=usize::MAX,
    outputs: 1..=1,
    host: None,
    attrs: &["equation"],
    run: |rec, args| {
        let equation = args
            .string("equation")?
            .ok_or_else(|| {
                Error::invalid("Einsum", "equation", "the attribute 'equation' is required")
            })?
            .to_string();
        let inputs: Vec<Tensor> = (0..args.len())
            .map(|i| args.tensor(i, "Inputs"))
            .collect::<Result<_>>()?;
        Ok(vec![rec.einsum_to(&equation, &inputs, args.out(0))?])
    },
};

/// Split: sizes from the `split` input (opset 13 on) or attribute, else equal parts of
/// ceil(length / outputs) with a smaller last one (opset 18's `num_outputs`).
static SPLIT: OpDef = OpDef {
    name: "Split",
    inputs: 1..=2,
    outputs: 1..=usize::MAX,
    host: None,
    attrs: &["axis", "split", "num_outputs"],
    run: |rec, args| {
        let input = args.tensor(0, "input")?;
        let axis = args.int("axis")?.unwrap_or(0);
        let parts = args.node.outputs.len();
        let given = match args.indices(1, "split")? {
            Some(v) => Some(v),
            None => args.ints("split")?,
        };
        let sizes: Vec<usize> = match given {
            Some(v) => v
                .iter()
                .map(|&n| {
                    usize::try_from(n).map_err(|_| {
                        Error::invalid("Split", "split", format!("split has a negative size {n}"))
                    })
                })
                .collect::<Result<_>>()?,
            None => {
                let rank = input.rank() as i64;
                let k = if axis < 0 { axis + rank } else { axis };
                let dim = *input
                    .shape()
                    .get(usize::try_from(k).unwrap_or(usize::MAX))
                    .ok_or_else(|| {
                        Error::invalid(
                            "Split",
                            "axis",
                            format!("axis {axis} is out of range for rank {rank}"),
                        )
                    })?;
                let chunk = dim.div_ceil(parts.max(1));
                (0..parts)
                    .map(|i| dim.saturating_sub(i * chunk).min(chunk))
                    .collect()
            }
        };
        let outs = (0..parts).map(|k| args.out(k)).collect();
        rec.split_to(&input, axis, &sizes, outs)
    },
};

fn run_depth_space(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let input = args.tensor(0, "input")?;
    let op = if args.node.op == "DepthToSpace" {
        "DepthToSpace"
    } else {
        "SpaceToDepth"
    };
    let blocksize = args
        .int("blocksize")?
        .ok_or_else(|| Error::invalid(op, "blocksize", "the attribute 'blocksize' is required"))?;
    let mode = args.string("mode")?.unwrap_or("DCR").to_string();
    Ok(vec![rec.depth_space_to(
        op,
        &input,
        blocksize,
        &mode,
        args.out(0),
    )?])
}

static DEPTH_TO_SPACE: OpDef = OpDef {
    name: "DepthToSpace",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["blocksize", "mode"],
    run: run_depth_space,
};

static SPACE_TO_DEPTH: OpDef = OpDef {
    name: "SpaceToDepth",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["blocksize", "mode"],
    run: run_depth_space,
};

/// Range: its length depends on its values, so it is computed on the host from inputs known
/// there (constants, graph inputs, or values computed from them).
static RANGE: OpDef = OpDef {
    name: "Range",
    inputs: 3..=3,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let mut known = Vec::new();
        for (i, role) in ["start", "limit", "delta"].into_iter().enumerate() {
            match &slot_of(node, slots, i, role)?.host {
                Some(h) => known.push(Some(HostTensor::clone(h))),
                None => return Ok(None),
            }
        }
        crate::reference::graph::eval_node(node, &known)
            .map(Some)
            .map_err(|e| {
                // The interpreter's messages name the op; ours add it.
                let message = e.0.strip_prefix("Range: ").unwrap_or(&e.0);
                Error::invalid("Range", "start", message)
            })
    }),
    attrs: &[],
    run: |_, args| {
        Err(Error::Graph(format!(
            "node '{}': Range's length depends on its values, which must be known on the host (constants, graph inputs or values computed from them), not computed on the GPU",
            args.node.name
        )))
    },
};

/// ScanSequenceLens(sequence_lens, x): the lengths a Scan-8 with `sequence_lens` runs its
/// batch items for (the ONNX loader inserts it before such a Scan), checked on the host
/// against the sequence axis (axis 1) of its first scan input `x`: each in `1..=` that length,
/// as onnxruntime requires. The lengths must be known on the host (a constant or a graph
/// input).
static SCAN_SEQUENCE_LENS: OpDef = OpDef {
    name: "ScanSequenceLens",
    inputs: 2..=2,
    outputs: 1..=1,
    host: Some(|node, slots| {
        const OP: &str = "Scan";
        let lens = slot_of(node, slots, 0, "sequence_lens")?;
        let Some(host) = &lens.host else {
            return Ok(None);
        };
        let (_, x_shape) = slot_of(node, slots, 1, "scan input")?.dtype_shape();
        let values = host.to_indices(OP, "sequence_lens")?;
        let (batch, len) = (x_shape.first().copied(), x_shape.get(1).copied());
        if host.shape.len() != 1 || Some(values.len()) != batch {
            return Err(Error::invalid(
                OP,
                "sequence_lens",
                format!(
                    "sequence_lens has shape {:?}; it must be [{}], one length per batch item",
                    host.shape,
                    batch.unwrap_or(0)
                ),
            ));
        }
        let len = len.unwrap_or(0);
        if let Some((b, l)) = values
            .iter()
            .enumerate()
            .find(|(_, &l)| l < 1 || l as u64 > len as u64)
        {
            return Err(Error::invalid(
                OP,
                "sequence_lens",
                format!(
                    "sequence_lens[{b}] is {l}; each length must be in 1..={len}, the sequence axis of the scan inputs"
                ),
            ));
        }
        Ok(Some(vec![HostTensor::from_vec(
            vec![values.len()],
            &values,
        )?]))
    }),
    attrs: &[],
    run: |_, args| {
        Err(Error::Graph(format!(
            "node '{}': Scan's sequence_lens is computed on the GPU, but it must be known on the host (a constant or a graph input) to be checked",
            args.node.name
        )))
    },
};

/// CheckInputs(the inputs of an op defined by others) -> true: refuses inputs that break the
/// rules of the op its attribute `op` names (see [`super::input_rules`]), from their shapes
/// (and their values where known on the host), while planning.
static CHECK_INPUTS: OpDef = OpDef {
    name: "CheckInputs",
    inputs: 1..=4096,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let shapes: Vec<Option<(DType, Vec<usize>)>> = slots
            .iter()
            .map(|s| {
                s.filter(|s| s.non_tensor().is_none())
                    .map(Slot::dtype_shape)
            })
            .collect();
        let inputs: Vec<Option<super::input_rules::Input>> = slots
            .iter()
            .zip(&shapes)
            .map(|(s, known)| {
                known
                    .as_ref()
                    .map(|(dtype, shape)| super::input_rules::Input {
                        dtype: *dtype,
                        shape,
                        value: s.and_then(|s| s.host.as_deref()),
                    })
            })
            .collect();
        super::input_rules::check(node, &inputs)?;
        Ok(Some(vec![HostTensor::from_bytes(
            DType::Bool,
            vec![],
            vec![1],
        )?]))
    }),
    attrs: super::input_rules::ATTRS,
    run: |_, args| {
        Err(Error::Graph(format!(
            "internal: CheckInputs node '{}' was not checked on the host",
            args.node.name.escape_debug()
        )))
    },
};

/// CheckValues(values (numbers, read as i64: floats truncated), bounds (i64, known while
/// planning: low, high, then any the message names), allowed (optional, i64)) -> true: a
/// rule on values read on the GPU that no kernel of their readers checks (`ValueCheck`, from the attributes `op`, `input`
/// and `message`): each value in low..=high or one of allowed. The run fails on the first
/// value that breaks it; checked while planning where the values are known there, so that
/// a check of a graph input costs no dispatch.
static CHECK_VALUES: OpDef = OpDef {
    name: "CheckValues",
    inputs: 2..=3,
    outputs: 1..=1,
    host: Some(|node, slots| {
        let host = |k: usize| {
            slots
                .get(k)
                .copied()
                .flatten()
                .and_then(|s| s.host.as_deref())
        };
        let Some(values) = host(0) else {
            return Ok(None);
        };
        let allowed = match slots.get(2).copied().flatten() {
            Some(slot) => match slot.host.as_deref() {
                Some(a) => Some(a),
                None => return Ok(None),
            },
            None => None,
        };
        let check = super::input_rules::ValueCheck::of(node, host(1))?;
        check.check(values, allowed)?;
        Ok(Some(vec![HostTensor::from_bytes(
            DType::Bool,
            vec![],
            vec![1],
        )?]))
    }),
    attrs: &["op", "input", "message"],
    run: |rec, args| {
        let check = super::input_rules::ValueCheck::of(args.node, args.host_value(1))?;
        let mut values = args.tensor(0, "values")?;
        if !matches!(values.dtype(), DType::I32 | DType::I64) {
            // Checked as i64, as on the host (floats truncated).
            values = rec.cast(&values, DType::I64)?;
        }
        let allowed = match args.node.inputs.get(2).is_some_and(|n| !n.is_empty()) {
            true => Some(args.tensor(2, "allowed")?),
            false => None,
        };
        let rule = crate::kernels::ValueRule {
            op: check.op,
            input: &check.input,
            message: &check.message,
            low: check.low,
            high: check.high,
            allowed: allowed.as_ref(),
        };
        Ok(vec![rec.check_values(&rule, &values)?])
    },
};

/// TopK: K must be known on the host (the outputs' shape depends on it); sorted output
/// always (`sorted` = 0 leaves the order open, so sorted is a valid order).
static TOPK: OpDef = OpDef {
    name: "TopK",
    inputs: 2..=2,
    outputs: 2..=2,
    host: None,
    attrs: &["axis", "largest", "sorted"],
    run: |rec, args| {
        let x = args.tensor(0, "X")?;
        let k = match args.host_value(1) {
            Some(t) if matches!(t.dtype, DType::I32 | DType::I64) && t.numel() == 1 => {
                crate::reference::cast_host(t, DType::I64)?.to_vec::<i64>()?[0]
            }
            _ => {
                let v = args.required_indices(1, "K")?;
                *v.first()
                    .ok_or_else(|| Error::invalid("TopK", "K", "K must hold one value"))?
            }
        };
        let [v, i] = rec.topk_to(
            &x,
            k,
            args.int("axis")?.unwrap_or(-1),
            args.int("largest")?.unwrap_or(1) != 0,
            [args.out(0), args.out(1)],
        )?;
        Ok(vec![v, i])
    },
};

static CUMSUM: OpDef = OpDef {
    name: "CumSum",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["exclusive", "reverse"],
    run: |rec, args| cumulative(rec, args, false),
};

static CUMPROD: OpDef = OpDef {
    name: "CumProd",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["exclusive", "reverse"],
    run: |rec, args| cumulative(rec, args, true),
};

/// CumSum, or with `product` CumProd.
fn cumulative(rec: &mut Recorder, args: &NodeArgs, product: bool) -> Result<Vec<Tensor>> {
    let op = if product { "CumProd" } else { "CumSum" };
    let x = args.tensor(0, "x")?;
    // A scalar (or one-element) tensor, whose value the plan needs.
    let axis = match args.host_value(1) {
        Some(t) if matches!(t.dtype, DType::I32 | DType::I64) && t.numel() == 1 => {
            crate::reference::cast_host(t, DType::I64)?.to_vec::<i64>()?
        }
        Some(_) => {
            return Err(Error::invalid(
                op,
                "axis",
                "axis must be one i32 or i64 value",
            ))
        }
        None => args.required_indices(1, "axis")?,
    };
    let [axis] = axis.as_slice() else {
        return Err(Error::invalid(op, "axis", "axis must hold one value"));
    };
    let (exclusive, reverse) = (
        args.int("exclusive")?.unwrap_or(0) != 0,
        args.int("reverse")?.unwrap_or(0) != 0,
    );
    Ok(vec![match product {
        true => rec.cumprod_to(&x, *axis, exclusive, reverse, args.out(0))?,
        false => rec.cumsum_to(&x, *axis, exclusive, reverse, args.out(0))?,
    }])
}

static LINEAR_ATTENTION: OpDef = OpDef {
    name: "LinearAttention",
    inputs: 3..=6,
    outputs: 1..=2,
    host: None,
    attrs: &[
        "chunk_size",
        "kv_num_heads",
        "q_num_heads",
        "scale",
        "update_rule",
    ],
    run: |rec, args| {
        let required = |name: &str| -> Result<i64> {
            args.int(name)?.ok_or_else(|| {
                Error::invalid(
                    "LinearAttention",
                    name,
                    format!("attribute {name} is required"),
                )
            })
        };
        let attrs = crate::ops::linear_attention::LinearAttention {
            q_num_heads: required("q_num_heads")?,
            kv_num_heads: required("kv_num_heads")?,
            scale: match args.node.attrs.get("scale") {
                Some(Attr::Float(v)) => *v as f32,
                _ => 0.0,
            },
            update_rule: args
                .string("update_rule")?
                .unwrap_or("gated_delta")
                .to_string(),
        };
        // chunk_size is a tuning hint of chunked algorithms; the recurrence runs step by step.
        let optional = |k: usize, name: &str| -> Result<Option<Tensor>> {
            if args.len() > k && args.dtype_of(k, name).is_ok() {
                args.tensor(k, name).map(Some)
            } else {
                Ok(None)
            }
        };
        let (query, key, value) = (
            args.tensor(0, "query")?,
            args.tensor(1, "key")?,
            args.tensor(2, "value")?,
        );
        let (past_state, decay, beta) = (
            optional(3, "past_state")?,
            optional(4, "decay")?,
            optional(5, "beta")?,
        );
        let state = crate::ops::linear_attention::LinearAttentionState {
            past_state: past_state.as_ref(),
            decay: decay.as_ref(),
            beta: beta.as_ref(),
            state_dtype: None,
        };
        let state_out = if args.node.outputs.len() > 1 {
            args.out(1)
        } else {
            crate::Out::NEW
        };
        let [y, s] = rec.linear_attention_to(
            &attrs,
            [&query, &key, &value],
            state,
            [args.out(0), state_out],
        )?;
        let mut outputs = vec![y];
        if args.node.outputs.len() > 1 {
            outputs.push(s);
        }
        Ok(outputs)
    },
};

/// Checks the indices of input `k` where they are known on the host (the GPU cannot fail a
/// run): each within `-dim..dim` for axis `axis` (as given) of `data`.
fn check_known_indices(
    args: &NodeArgs,
    k: usize,
    data: &Tensor,
    axis: i64,
    op: &'static str,
    input: &'static str,
) -> Result<()> {
    let known = args
        .host_value(k)
        .filter(|t| matches!(t.dtype, DType::I32 | DType::I64))
        .map(|t| crate::reference::cast_host(t, DType::I64))
        .transpose()?
        .map(|t| t.to_vec::<i64>())
        .transpose()?;
    let Some(known) = known else { return Ok(()) };
    let rank = data.rank() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    if (0..rank).contains(&a) {
        let dim = data.shape()[a as usize] as i64;
        if let Some(bad) = known.iter().find(|&&i| i < -dim || i >= dim) {
            return Err(Error::invalid(
                op,
                input,
                format!("index {bad} is out of range for axis {axis} of size {dim}"),
            ));
        }
    }
    Ok(())
}

/// Records `f` with its index kernels reporting an index of input `k` (called `input`) out of
/// range after the run where the indices are on the GPU (those known on the host are checked while
/// the graph is planned; see `crate::recorder::IndexFaults`).
fn checking_gpu_indices<T>(
    rec: &mut Recorder,
    args: &NodeArgs,
    (k, input): (usize, &'static str),
    f: impl FnOnce(&mut Recorder) -> Result<T>,
) -> Result<T> {
    match args.host_value(k) {
        Some(_) => f(rec),
        None => rec.checking_indices(input, f),
    }
}

static GATHER: OpDef = OpDef {
    name: "Gather",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axis"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let axis = args.int("axis")?.unwrap_or(0);
        check_known_indices(args, 1, &data, axis, "Gather", "indices")?;
        let indices = args.tensor(1, "indices")?;
        let out = args.out(0);
        let y = checking_gpu_indices(rec, args, (1, "indices"), |rec| {
            rec.gather_to(&data, &indices, axis, out)
        })?;
        Ok(vec![y])
    },
};

static GATHER_ELEMENTS: OpDef = OpDef {
    name: "GatherElements",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["axis"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let axis = args.int("axis")?.unwrap_or(0);
        check_known_indices(args, 1, &data, axis, "GatherElements", "indices")?;
        let indices = args.tensor(1, "indices")?;
        let out = args.out(0);
        let y = checking_gpu_indices(rec, args, (1, "indices"), |rec| {
            rec.gather_elements_to(&data, &indices, axis, out)
        })?;
        Ok(vec![y])
    },
};

/// A scatter's `reduction` attribute ("none" when absent).
fn scatter_reduction(args: &NodeArgs, op: &'static str) -> Result<ScatterReduction> {
    let name = args.string("reduction")?.unwrap_or("none");
    ScatterReduction::parse(name).ok_or_else(|| {
        Error::invalid(
            op,
            "reduction",
            format!(
                "reduction '{}' is not one of none, add, mul, max, min",
                name.escape_debug()
            ),
        )
    })
}

fn scatter_elements(rec: &mut Recorder, args: &NodeArgs, op: &'static str) -> Result<Vec<Tensor>> {
    let data = args.tensor(0, "data")?;
    let axis = args.int("axis")?.unwrap_or(0);
    check_known_indices(args, 1, &data, axis, op, "indices")?;
    let indices = args.tensor(1, "indices")?;
    let updates = args.tensor(2, "updates")?;
    let reduction = scatter_reduction(args, op)?;
    let out = args.out(0);
    // Our extension (TensorScatter's expansion sets it): no two updates land on one element,
    // so they may run in any order, and the indices may repeat along axes of the updates.
    let distinct = match args.int("unique_indices")?.unwrap_or(0) {
        0 => false,
        1 if reduction == ScatterReduction::None => true,
        1 => {
            return Err(Error::invalid(
                op,
                "unique_indices",
                format!(
                    "unique_indices is 1 with reduction '{}'; it needs reduction none",
                    reduction.name()
                ),
            ))
        }
        v => {
            return Err(Error::invalid(
                op,
                "unique_indices",
                format!("unique_indices is {v}; it must be 0 or 1"),
            ))
        }
    };
    let y = checking_gpu_indices(rec, args, (1, "indices"), |rec| match distinct {
        true => rec.scatter_distinct_to(&data, &indices, &updates, axis, out),
        false => rec.scatter_elements_to(&data, &indices, &updates, axis, reduction, out),
    })?;
    Ok(vec![y])
}

static SCATTER_ELEMENTS: OpDef = OpDef {
    name: "ScatterElements",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "reduction", "unique_indices"],
    run: |rec, args| scatter_elements(rec, args, "ScatterElements"),
};

/// ONNX Scatter (opsets 9 and 10): ScatterElements without a reduction.
static SCATTER: OpDef = OpDef {
    name: "Scatter",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["axis"],
    run: |rec, args| scatter_elements(rec, args, "Scatter"),
};

static SCATTER_ND: OpDef = OpDef {
    name: "ScatterND",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["reduction"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        // Tuples known on the host are range-checked, axis by axis.
        if let Some(known) = args.host_value(1) {
            if let (Some(&k), Ok(values)) = (
                known.shape.last(),
                crate::reference::cast_host(known, DType::I64).and_then(|t| t.to_vec::<i64>()),
            ) {
                for tuple in values.chunks(k.max(1)).filter(|_| k > 0) {
                    for (j, &i) in tuple.iter().enumerate() {
                        let dim = data.shape().get(j).map_or(0, |&d| d as i64);
                        if j < data.rank() && (i < -dim || i >= dim) {
                            return Err(Error::invalid(
                                "ScatterND",
                                "indices",
                                format!("index {i} is out of range for axis {j} of size {dim}"),
                            ));
                        }
                    }
                }
            }
        }
        let indices = args.tensor(1, "indices")?;
        let updates = args.tensor(2, "updates")?;
        let reduction = scatter_reduction(args, "ScatterND")?;
        let out = args.out(0);
        let y = checking_gpu_indices(rec, args, (1, "indices"), |rec| {
            rec.scatter_nd_to(&data, &indices, &updates, reduction, out)
        })?;
        Ok(vec![y])
    },
};

static ONE_HOT: OpDef = OpDef {
    name: "OneHot",
    inputs: 3..=3,
    outputs: 1..=1,
    host: None,
    attrs: &["axis"],
    run: |rec, args| {
        const OP: &str = "OneHot";
        let indices = args.tensor(0, "indices")?;
        let depth = args.host_value(1).ok_or_else(|| {
            Error::invalid(OP, "depth", "depth must be known when the graph is planned")
        })?;
        if depth.numel() != 1 {
            return Err(Error::invalid(
                OP,
                "depth",
                format!("depth has {} values; it must be one", depth.numel()),
            ));
        }
        // A float depth is truncated, as the reference implementation does.
        let depth = crate::reference::cast_host(depth, DType::I64)?.to_vec::<i64>()?[0];
        let values = args.tensor(2, "values")?;
        if values.numel() != 2 {
            return Err(Error::invalid(
                OP,
                "values",
                format!(
                    "values has {} elements; it must be [off, on]",
                    values.numel()
                ),
            ));
        }
        let flat = values.reshaped(&[2])?;
        let mut pick = |i: i64| -> Result<Tensor> {
            let at = rec.upload(&HostTensor::from_vec(vec![], &[i])?)?;
            rec.gather_to(&flat, &at, 0, crate::Out::NEW)
        };
        let (off, on) = (pick(0)?, pick(1)?);
        let axis = args.int("axis")?.unwrap_or(-1);
        let y = rec.one_hot_to(&indices, depth, &off, &on, axis, args.out(0))?;
        rec.release(off);
        rec.release(on);
        Ok(vec![y])
    },
};

static HARDMAX: OpDef = OpDef {
    name: "Hardmax",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "coerce_2d"],
    run: |rec, args| {
        let x = args.tensor(0, "input")?;
        let axis = args.int("axis")?.unwrap_or(-1);
        let coerce_2d = args.int("coerce_2d")?.unwrap_or(0) != 0;
        Ok(vec![rec.hardmax_to(&x, axis, coerce_2d, args.out(0))?])
    },
};

/// EyeLike's output: ones on the diagonal `k` of a 2-D `shape` (above it for positive `k`),
/// zeros elsewhere, in `dtype`.
pub(crate) fn eye_like(shape: &[usize], dtype: DType, k: i64) -> Result<HostTensor> {
    const OP: &str = "EyeLike";
    let &[rows, cols] = shape else {
        return Err(Error::invalid(
            OP,
            "input",
            format!("input has shape {shape:?}; EyeLike takes 2-D tensors"),
        ));
    };
    let n = rows
        .checked_mul(cols)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| Error::invalid(OP, "input", "the output's size overflows"))?;
    let mut data = Vec::new();
    data.try_reserve_exact(n).map_err(|_| {
        Error::invalid(
            OP,
            "input",
            format!("{n} bytes cannot be allocated on the host"),
        )
    })?;
    data.resize(n, 0);
    let one = crate::reference::cast_host(&HostTensor::from_vec(vec![], &[1i64])?, dtype)?.data;
    for i in 0..rows {
        let j = i as i64 + k;
        if (0..cols as i64).contains(&j) {
            let at = (i * cols + j as usize) * dtype.size();
            data[at..at + one.len()].copy_from_slice(&one);
        }
    }
    HostTensor::from_bytes(dtype, shape.to_vec(), data)
}

/// EyeLike's dtype: the `dtype` attribute (a dtype name; the ONNX loader converts type codes)
/// or the input's.
fn eye_like_dtype(node: &Node, input: DType) -> Result<DType> {
    match node.attrs.get("dtype") {
        None => Ok(input),
        Some(Attr::String(name)) => DType::from_name(name).ok_or_else(|| {
            Error::invalid(
                "EyeLike",
                "dtype",
                format!("dtype '{}' is not one of ours", name.escape_debug()),
            )
        }),
        Some(_) => Err(Error::invalid(
            "EyeLike",
            "dtype",
            "dtype must be a dtype name",
        )),
    }
}

static EYE_LIKE: OpDef = OpDef {
    name: "EyeLike",
    inputs: 1..=1,
    outputs: 1..=1,
    // Only the input's shape is read: small results are constants made on the host.
    host: Some(|node, slots| {
        let (dtype, shape) = slot_of(node, slots, 0, "input")?.dtype_shape();
        if shape.iter().product::<usize>() > 1 << 14 {
            return Ok(None);
        }
        let k = match node.attrs.get("k") {
            Some(Attr::Int(k)) => *k,
            _ => 0,
        };
        Ok(Some(vec![eye_like(
            &shape,
            eye_like_dtype(node, dtype)?,
            k,
        )?]))
    }),
    attrs: &["dtype", "k"],
    run: |rec, args| {
        let (dtype, shape) = (
            args.dtype_of(0, "input")?,
            args.tensor(0, "input")?.shape().to_vec(),
        );
        let eye = eye_like(
            &shape,
            eye_like_dtype(args.node, dtype)?,
            args.int("k")?.unwrap_or(0),
        )?;
        let t = rec.upload(&eye)?;
        Ok(vec![rec.identity_to(&t, args.out(0))?])
    },
};

/// ONNX-ML's ArrayFeatureExtractor (scikit-learn's nearest-neighbour models).
static ARRAY_FEATURE_EXTRACTOR: OpDef = OpDef {
    name: "ai.onnx.ml.ArrayFeatureExtractor",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &[],
    run: |rec, args| {
        let data = args.tensor(0, "X")?;
        check_known_indices(args, 1, &data, -1, "ArrayFeatureExtractor", "Y")?;
        let indices = args.tensor(1, "Y")?;
        let out = args.out(0);
        let y = checking_gpu_indices(rec, args, (1, "Y"), |rec| {
            rec.array_feature_extractor_to(&data, &indices, out)
        })?;
        Ok(vec![y])
    },
};

static FEATURE_VECTORIZER: OpDef = OpDef {
    name: "ai.onnx.ml.FeatureVectorizer",
    inputs: 1..=usize::MAX,
    outputs: 1..=1,
    host: None,
    attrs: &["inputdimensions"],
    run: |rec, args| {
        let inputs: Vec<Tensor> = (0..args.len())
            .map(|i| args.tensor(i, "X"))
            .collect::<Result<_>>()?;
        let dims = args.ints("inputdimensions")?.ok_or_else(|| {
            Error::invalid(
                "FeatureVectorizer",
                "inputdimensions",
                "the attribute 'inputdimensions' (one width per input) is required",
            )
        })?;
        Ok(vec![rec.feature_vectorizer_to(
            &inputs,
            &dims,
            args.out(0),
        )?])
    },
};

static MAX_ROI_POOL: OpDef = OpDef {
    name: "MaxRoiPool",
    inputs: 2..=2,
    outputs: 1..=1,
    host: None,
    attrs: &["pooled_shape", "spatial_scale"],
    run: |rec, args| {
        const OP: &str = "MaxRoiPool";
        let x = args.tensor(0, "X")?;
        args.dtype_of(1, "rois")?;
        let rois = args.host_value(1).ok_or_else(|| {
            Error::invalid(
                OP,
                "rois",
                "rois is computed on the GPU where it cannot be read back (a Scan body, or read-backs off); it must be known when the graph is planned",
            )
        })?;
        let pooled = args.ints("pooled_shape")?.ok_or_else(|| {
            Error::invalid(
                OP,
                "pooled_shape",
                "the attribute 'pooled_shape' (bins along the height and the width) is required",
            )
        })?;
        let scale = args.float("spatial_scale")?.unwrap_or(1.0);
        Ok(vec![rec.max_roi_pool_to(
            &x,
            rois,
            &pooled,
            scale,
            args.out(0),
        )?])
    },
};

fn run_softmax(rec: &mut Recorder, args: &NodeArgs) -> Result<Vec<Tensor>> {
    let input = args.tensor(0, "input")?;
    Ok(vec![rec.softmax_to(
        &args.node.op,
        &input,
        args.int("axis")?.unwrap_or(-1),
        args.int("coerce_2d")?.unwrap_or(0) != 0,
        args.out(0),
    )?])
}

/// Softmax and LogSoftmax; `coerce_2d` = 1 gives Softmax-1/-11's semantics (the ONNX loader
/// sets it for models of opset below 13).
static SOFTMAX: OpDef = OpDef {
    name: "Softmax",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "coerce_2d"],
    run: run_softmax,
};

static LOG_SOFTMAX: OpDef = OpDef {
    name: "LogSoftmax",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "coerce_2d"],
    run: run_softmax,
};

static ARG_MAX: OpDef = OpDef {
    name: "ArgMax",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "keepdims", "select_last_index"],
    run: run_arg,
};

static ARG_MIN: OpDef = OpDef {
    name: "ArgMin",
    inputs: 1..=1,
    outputs: 1..=1,
    host: None,
    attrs: &["axis", "keepdims", "select_last_index"],
    run: run_arg,
};

macro_rules! elementwise_nodes {
    ($($name:literal $inputs:expr, $run:ident;)*) => {
        /// Graph entries of the element-wise ops: those of [`crate::kernels::elementwise::OPS`]
        /// (Max and Min variadic, as in ONNX), and the variadic Sum and Mean.
        static ELEMENTWISE: [OpDef; 18] = [$(OpDef {
            name: $name,
            inputs: $inputs,
            outputs: 1..=1,
            host: None,
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
    "Log" 1..=1, run_elementwise; "Sqrt" 1..=1, run_elementwise;
    "Reciprocal" 1..=1, run_elementwise; "Tanh" 1..=1, run_elementwise;
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
