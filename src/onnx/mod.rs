//! ONNX models: `.onnx` protobuf files into [`Graph`]s (docs/onnx.md). Initializers (raw,
//! typed and external data), typed inputs and outputs (symbolic dimensions are fixed at run
//! time), attributes of every kind, subgraphs, opset imports and model-local functions (inlined
//! at load). Ops whose meaning changed between opsets are brought to one form here; ops we do
//! not have are listed, all of them with counts, before any GPU work.

use std::collections::{BTreeMap, HashMap, HashSet};

use prost::Message;

use crate::graph::{is_op, Attr, Graph, Node, ValueInfo, ValueKind};
use crate::{
    Context, DType, Error, HostTensor, Map, MapKeys, MapSequence, MapType, MapValues, Result,
    Session, StringTensor,
};

mod attention;
mod defined;
mod expansion;
mod losses;
mod lp_normalization;
mod ml;
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto;
mod quantize;
mod recurrent;
mod rotary_embedding;
mod text;
mod training;
/// The ops the ONNX loader builds from others (they are no graph ops of their own).
pub const EXPANDED_OPS: [&str; 24] = [
    "Upsample",
    "RNN",
    "GRU",
    "LSTM",
    "Attention",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "LpNormalization",
    "RotaryEmbedding",
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "MeanVarianceNormalization",
    "MaxUnpool",
    "TfIdfVectorizer",
    "Adagrad",
    "Momentum",
    "Adam",
    "TensorScatter",
    "FlexAttention",
    "ConvInteger",
    "QLinearConv",
    "RoiAlign",
    "DeformConv",
];

/// The ONNX-ML (`ai.onnx.ml`) ops the loader builds from others or from the graph's string
/// ops (`src/onnx/ml.rs`), by name.
pub const ML_OPS: [&str; 15] = [
    "Binarizer",
    "Scaler",
    "Normalizer",
    "Imputer",
    "LinearRegressor",
    "LinearClassifier",
    "TreeEnsembleRegressor",
    "TreeEnsembleClassifier",
    "TreeEnsemble",
    "SVMRegressor",
    "SVMClassifier",
    "OneHotEncoder",
    "LabelEncoder",
    "CategoryMapper",
    "ZipMap",
];

use proto::{attribute_proto::AttributeType, tensor_proto::DataType};

/// A loaded model: its main graph and what the file says about itself.
#[derive(Clone, Debug)]
pub struct Model {
    /// The main graph, in this crate's form.
    pub graph: Graph,
    /// The file's IR version.
    pub ir_version: i64,
    /// Opset imports, by domain (`""` is the default ONNX domain).
    pub opsets: BTreeMap<String, i64>,
    /// The producer's name (`pytorch`, `skl2onnx`, ...), empty if not given.
    pub producer: String,
}

/// Nested functions and subgraphs deeper than this are refused (hostile files).
const MAX_DEPTH: usize = 64;

impl Model {
    /// Decodes a model from its bytes. External data is refused (there is no folder to read it
    /// from): use [`Model::load`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Model> {
        Model::decode(bytes, None)
    }

    /// Reads a model file; external-data files are read from the model's folder.
    #[cfg(feature = "native")]
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Model> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::File {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let dir = path.parent().unwrap_or(std::path::Path::new("."));
        Model::decode(&bytes, Some(dir))
    }

    fn decode(bytes: &[u8], dir: Option<&std::path::Path>) -> Result<Model> {
        let model = proto::ModelProto::decode(bytes)
            .map_err(|e| Error::Model(format!("not an ONNX model: {e}")))?;
        let mut opsets = BTreeMap::new();
        for o in &model.opset_import {
            let domain = match o.domain() {
                "ai.onnx" => "",
                d => d,
            };
            opsets.insert(domain.to_string(), o.version());
        }
        if model.opset_import.is_empty() {
            // IR version 2 files name no opset; they mean opset 1.
            opsets.insert(String::new(), 1);
        }
        let functions: HashMap<(String, String), &proto::FunctionProto> = model
            .functions
            .iter()
            .map(|f| ((f.domain().to_string(), f.name().to_string()), f))
            .collect();
        let graph_proto = model
            .graph
            .as_ref()
            .ok_or_else(|| Error::Model("the model has no graph".into()))?;
        let mut loader = Loader {
            opsets: &opsets,
            functions,
            dir,
            inlined: 0,
        };
        let graph = loader.graph(graph_proto, 0)?;
        Ok(Model {
            graph,
            ir_version: model.ir_version(),
            opsets,
            producer: model.producer_name().to_string(),
        })
    }

    /// The ops of the model (subgraphs included) this crate does not run, with their counts.
    pub fn unsupported_ops(&self) -> Vec<(String, usize)> {
        let mut counts = self.op_counts();
        counts.retain(|(op, _)| !is_op(op));
        counts
    }

    /// Every op of the model with its count (subgraphs included).
    pub fn op_counts(&self) -> Vec<(String, usize)> {
        fn walk(g: &Graph, counts: &mut BTreeMap<String, usize>) {
            for n in &g.nodes {
                *counts.entry(n.op.clone()).or_default() += 1;
                for a in n.attrs.values() {
                    if let Attr::Graph(sub) = a {
                        walk(sub, counts);
                    }
                }
            }
        }
        let mut counts = BTreeMap::new();
        walk(&self.graph, &mut counts);
        counts.into_iter().collect()
    }

    /// A session running the model on `ctx`; fails, naming every op not supported (with its
    /// count), before any GPU work.
    pub fn session(self, ctx: &Context) -> Result<Session> {
        self.session_check()?;
        Session::new(ctx, self.graph)
    }

    /// The error [`Model::session`] gives for a model with ops not supported: all of them,
    /// with their counts, in one line.
    pub fn session_check(&self) -> Result<()> {
        let missing = self.unsupported_ops();
        if missing.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = missing
            .iter()
            .map(|(op, n)| format!("{op} ({n})"))
            .collect();
        Err(Error::Model(format!(
            "unsupported ops: {} (see `wgpu-ops info` for the model's ops)",
            list.join(", ")
        )))
    }
}

struct Loader<'a> {
    opsets: &'a BTreeMap<String, i64>,
    functions: HashMap<(String, String), &'a proto::FunctionProto>,
    dir: Option<&'a std::path::Path>,
    /// Function calls inlined so far (their values get unique prefixes).
    inlined: usize,
}

impl Loader<'_> {
    fn graph(&mut self, g: &proto::GraphProto, depth: usize) -> Result<Graph> {
        if depth > MAX_DEPTH {
            return Err(Error::Model(format!(
                "subgraphs are nested more than {MAX_DEPTH} deep"
            )));
        }
        let mut out = Graph::new();
        let initialized: HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
        for t in &g.initializer {
            // Strings are not constants of the GPU's: a node makes them while planning.
            if let Some(s) = self.string_tensor(t, "initializer")? {
                out.nodes.push(string_constant(t.name(), s));
                continue;
            }
            out.constants
                .push((t.name().to_string(), self.tensor(t, "initializer")?.into()));
        }
        if !g.sparse_initializer.is_empty() {
            return Err(Error::Model(format!(
                "graph '{}': sparse initializers are not supported",
                g.name()
            )));
        }
        // Inputs with an initializer of the same name are constants (IR < 4 lists them both).
        for i in g.input.iter().filter(|i| !initialized.contains(i.name())) {
            out.inputs.push(value_info(i)?);
            // Symbolic dimensions (`dim_param`): inputs sharing one must agree at run time.
            if let Some(proto::type_proto::Value::TensorType(t)) =
                i.r#type.as_ref().and_then(|t| t.value.as_ref())
            {
                use proto::tensor_shape_proto::dimension::Value;
                for (axis, d) in t.shape.iter().flat_map(|s| s.dim.iter()).enumerate() {
                    if let Some(Value::DimParam(p)) = &d.value {
                        if !p.is_empty() {
                            out.symbolic_dims
                                .entry(p.clone())
                                .or_default()
                                .push((i.name().to_string(), axis));
                        }
                    }
                }
            }
        }
        for o in &g.output {
            let mut info = value_info(o)?;
            if depth == 0 {
                // onnxruntime does not hold a model's outputs to their declared shapes (it warns
                // and runs: skl2onnx's PLSRegression declares [N, 4] and gives [N, 1]), so only
                // their dtypes are checked. Bodies keep theirs: an empty Scan takes its scan
                // outputs' shapes from them.
                info.shape = None;
            }
            out.outputs.push(info);
        }
        for (k, n) in g.node.iter().enumerate() {
            self.node(n, k, depth, &mut out)?;
        }
        Ok(out)
    }

    /// Adds node `n` (the `k`-th of its graph) to `out`: as a node, as constants (Constant) or
    /// as the nodes of an inlined function.
    fn node(
        &mut self,
        n: &proto::NodeProto,
        k: usize,
        depth: usize,
        out: &mut Graph,
    ) -> Result<()> {
        let domain = match n.domain() {
            "ai.onnx" => "",
            d => d,
        };
        let name = if n.name().is_empty() {
            format!("{}_{k}", n.op_type())
        } else {
            n.name().to_string()
        };
        if let Some(f) = self
            .functions
            .get(&(domain.to_string(), n.op_type().to_string()))
            .copied()
        {
            return self.inline(f, n, &name, depth, out);
        }
        let mut attrs = BTreeMap::new();
        for a in &n.attribute {
            attrs.insert(a.name().to_string(), self.attr(a, &name, depth)?);
        }
        if domain.is_empty() && n.op_type() == "Constant" {
            if let Some(s) = self.constant_strings(n)? {
                let output = n.output.first().map_or("", String::as_str);
                out.nodes.push(Node {
                    name,
                    ..string_constant(output, s)
                });
                return Ok(());
            }
        }
        let op = if domain.is_empty() {
            n.op_type().to_string()
        } else {
            format!("{domain}.{}", n.op_type())
        };
        let opset = self.opsets.get(domain).copied().unwrap_or(1);
        let mut node = Node {
            op,
            name,
            inputs: n.input.clone(),
            outputs: n.output.clone(),
            attrs,
        };
        // Types the expansions need that the node leaves to its inputs, where the loader knows
        // them (initializers, graph inputs): QuantizeLinear's output type is its zero point's
        // (it decides how the expansion rounds), FlexAttention's softmax precision is f64 for
        // f64 inputs (else f32).
        let known = |k: usize| {
            let name = node.inputs.get(k).filter(|n| !n.is_empty())?;
            out.constants
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.dtype)
                .or_else(|| out.inputs.iter().find(|i| &i.name == name)?.dtype)
        };
        let given = |name: &str| node.attrs.contains_key(name);
        let implied = match node.op.as_str() {
            "QuantizeLinear" if !given("output_dtype") => {
                known(2).and_then(onnx_code).map(|c| ("output_dtype", c))
            }
            "ai.onnx.preview.FlexAttention" if !given("softmax_precision") => {
                (known(0) == Some(DType::F64)).then_some(("softmax_precision", DataType::Double))
            }
            _ => None,
        };
        if let Some((attr, code)) = implied {
            node.attrs
                .insert(attr.into(), Attr::Int(i64::from(code as i32)));
        }
        let keep = if domain.is_empty() {
            let (keep, constants, before) = normalize(&mut node, opset)?;
            out.constants
                .extend(constants.into_iter().map(|(n, v)| (n, v.into())));
            out.nodes.extend(before);
            keep
        } else if let Some((nodes, constants)) = match ml::expand(&node)? {
            None => match training::expand(&node)? {
                None => attention::flex_attention(&node)?,
                some => some,
            },
            some => some,
        } {
            out.constants
                .extend(constants.into_iter().map(|(n, v)| (n, v.into())));
            out.nodes.extend(nodes);
            false
        } else {
            true
        };
        if keep {
            out.nodes.push(node);
        }
        Ok(())
    }

    /// Inlines a call of model-local function `f`: its nodes with their values renamed under a
    /// unique prefix, formal inputs and outputs bound to the call's, attribute references
    /// resolved from the call (or the function's defaults).
    fn inline(
        &mut self,
        f: &proto::FunctionProto,
        call: &proto::NodeProto,
        name: &str,
        depth: usize,
        out: &mut Graph,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Error::Model(format!(
                "function '{}': calls are nested more than {MAX_DEPTH} deep",
                f.name()
            )));
        }
        self.inlined += 1;
        let prefix = format!("{name}/{}#{}/", f.name(), self.inlined);
        let mut rename: HashMap<String, String> = HashMap::new();
        for (i, formal) in f.input.iter().enumerate() {
            rename.insert(
                formal.clone(),
                call.input.get(i).cloned().unwrap_or_default(),
            );
        }
        for (i, formal) in f.output.iter().enumerate() {
            rename.insert(
                formal.clone(),
                call.output.get(i).cloned().unwrap_or_default(),
            );
        }
        let given: HashMap<&str, &proto::AttributeProto> =
            call.attribute.iter().map(|a| (a.name(), a)).collect();
        let defaults: HashMap<&str, &proto::AttributeProto> =
            f.attribute_proto.iter().map(|a| (a.name(), a)).collect();
        let mut body = Graph::new();
        for (k, n) in f.node.iter().enumerate() {
            let mut n = n.clone();
            let mut attrs = Vec::with_capacity(n.attribute.len());
            for a in &n.attribute {
                if a.ref_attr_name().is_empty() {
                    attrs.push(a.clone());
                    continue;
                }
                let from = given
                    .get(a.ref_attr_name())
                    .or_else(|| defaults.get(a.ref_attr_name()));
                if let Some(v) = from {
                    let mut v = (*v).clone();
                    v.name = Some(a.name().to_string());
                    attrs.push(v);
                }
            }
            n.attribute = attrs;
            if n.name().is_empty() {
                n.name = Some(format!("{}_{k}", n.op_type()));
            }
            n.name = Some(format!("{prefix}{}", n.name()));
            self.node(&n, k, depth + 1, &mut body)?;
        }
        let local = |v: &str, rename: &HashMap<String, String>| match rename.get(v) {
            Some(r) => r.clone(),
            None if v.is_empty() => String::new(),
            None => format!("{prefix}{v}"),
        };
        for (c, value) in body.constants {
            out.constants.push((local(&c, &rename), value));
        }
        for mut node in body.nodes {
            for v in node.inputs.iter_mut().chain(node.outputs.iter_mut()) {
                *v = local(v, &rename);
            }
            for a in node.attrs.values_mut() {
                if let Attr::Graph(g) = a {
                    rename_scoped(g, &prefix, &|v: &str| local(v, &rename));
                }
            }
            out.nodes.push(node);
        }
        Ok(())
    }

    fn attr(&mut self, a: &proto::AttributeProto, node: &str, depth: usize) -> Result<Attr> {
        let bad =
            |what: &str| Error::Model(format!("node '{node}': attribute '{}' {what}", a.name()));
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| bad("is not UTF-8 text"));
        let kind = match a.r#type {
            Some(_) => a.r#type(),
            // Files older than IR 3 leave the type out: take the field that is set.
            None if a.g.is_some() => AttributeType::Graph,
            None if a.t.is_some() => AttributeType::Tensor,
            None if a.s.is_some() => AttributeType::String,
            None if a.i.is_some() => AttributeType::Int,
            None if a.f.is_some() => AttributeType::Float,
            None if !a.ints.is_empty() => AttributeType::Ints,
            None if !a.floats.is_empty() => AttributeType::Floats,
            None if !a.strings.is_empty() => AttributeType::Strings,
            None => AttributeType::Ints,
        };
        Ok(match kind {
            AttributeType::Int => Attr::Int(a.i()),
            AttributeType::Ints => Attr::Ints(a.ints.clone()),
            AttributeType::Float => Attr::Float(f64::from(a.f())),
            AttributeType::Floats => Attr::Floats(a.floats.iter().map(|&v| f64::from(v)).collect()),
            AttributeType::String => Attr::String(text(a.s())?),
            AttributeType::Strings => {
                Attr::Strings(a.strings.iter().map(|s| text(s)).collect::<Result<_>>()?)
            }
            AttributeType::Tensor => {
                let t = a.t.as_ref().ok_or_else(|| bad("has no tensor"))?;
                match self.string_tensor(t, "attribute")? {
                    // Its values (a Constant keeps its shape, see `Loader::node`).
                    Some(s) => Attr::Strings(s.values),
                    None => Attr::Tensor(self.tensor(t, "attribute")?),
                }
            }
            AttributeType::Graph => Attr::Graph(Box::new(
                self.graph(a.g.as_ref().ok_or_else(|| bad("has no graph"))?, depth + 1)?,
            )),
            // Optional's `type`: what the optional would hold, written as text.
            AttributeType::TypeProto => Attr::String(
                a.tp.as_ref()
                    .and_then(|t| t.value.as_ref())
                    .map(type_text)
                    .ok_or_else(|| bad("has no type"))?,
            ),
            other => {
                return Err(bad(&format!(
                    "is of kind {other:?}, which is not supported"
                )))
            }
        })
    }

    /// The value of a Constant node that holds strings (`value` of strings, `value_strings`).
    fn constant_strings(&self, n: &proto::NodeProto) -> Result<Option<StringTensor>> {
        for a in &n.attribute {
            match a.name() {
                "value" => {
                    if let Some(t) = &a.t {
                        return self.string_tensor(t, "Constant value");
                    }
                }
                "value_strings" => {
                    let values = a
                        .strings
                        .iter()
                        .map(|b| {
                            String::from_utf8(b.clone()).map_err(|_| {
                                Error::Model(format!(
                                    "Constant '{}': value_strings holds bytes that are not UTF-8 text",
                                    n.name().escape_debug()
                                ))
                            })
                        })
                        .collect::<Result<Vec<String>>>()?;
                    return Ok(Some(StringTensor::new(vec![values.len()], values)?));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// A tensor of strings (`None` where `t` is not one): its `string_data`, as UTF-8 text.
    fn string_tensor(&self, t: &proto::TensorProto, what: &str) -> Result<Option<StringTensor>> {
        if t.data_type() != DataType::String as i32 {
            return Ok(None);
        }
        let bad =
            |msg: String| Error::Model(format!("{what} '{}': {msg}", t.name().escape_debug()));
        let shape: Vec<usize> = t
            .dims
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| bad(format!("dimension {d} is negative"))))
            .collect::<Result<_>>()?;
        let values = t
            .string_data
            .iter()
            .enumerate()
            .map(|(i, b)| {
                String::from_utf8(b.clone())
                    .map_err(|_| bad(format!("string {i} is not UTF-8 text")))
            })
            .collect::<Result<Vec<String>>>()?;
        StringTensor::new(shape, values)
            .map(Some)
            .map_err(|e| bad(e.to_string()))
    }

    /// A tensor's values from its raw bytes, its typed field, or its external-data file.
    fn tensor(&self, t: &proto::TensorProto, what: &str) -> Result<HostTensor> {
        let name = t.name();
        let bad = |msg: String| Error::Model(format!("{what} '{name}': {msg}"));
        let code = DataType::try_from(t.data_type()).unwrap_or(DataType::Undefined);
        let dtype = dtype_of(code).ok_or_else(|| {
            bad(format!(
                "element type {} is not supported",
                type_name_i32(t.data_type())
            ))
        })?;
        let shape: Vec<usize> = t
            .dims
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| bad(format!("dimension {d} is negative"))))
            .collect::<Result<_>>()?;
        let numel = crate::host::checked_numel(&shape)
            .ok_or_else(|| bad(format!("shape {shape:?} has too many elements")))?;
        // The 6-, 4- and 2-bit types are packed in the file's raw bytes, one per byte here.
        let bytes = crate::minifloat::packed_len(dtype, numel)
            .ok_or_else(|| bad(format!("shape {shape:?} has too many bytes")))?;
        let data = if t.data_location() == proto::tensor_proto::DataLocation::External {
            self.external(t, bytes).map_err(bad)?
        } else if t.raw_data.is_some() {
            let raw = t.raw_data();
            if raw.len() != bytes {
                return Err(bad(format!(
                    "raw_data holds {} bytes but {shape:?} {dtype} needs {bytes}",
                    raw.len()
                )));
            }
            raw.to_vec()
        } else if dtype.packed_bits() == Some(6) {
            // The 6-bit floats' typed values are one code each, in the low bits (packing
            // keeps those).
            crate::minifloat::pack(dtype, &typed_bytes(t, dtype, numel).map_err(bad)?)
        } else {
            // The 4- and 2-bit types' typed values are their packed bytes.
            let values = if dtype.packed_bits().is_some() {
                bytes
            } else {
                numel
            };
            typed_bytes(t, dtype, values).map_err(bad)?
        };
        let data = match dtype.packed_bits() {
            Some(_) => crate::minifloat::unpack(dtype, &data, numel),
            None => data,
        };
        HostTensor::from_bytes(dtype, shape, data)
    }

    /// External data: `location` relative to the model's folder (no absolute paths, no `..`),
    /// `offset` and `length` in bytes.
    fn external(
        &self,
        t: &proto::TensorProto,
        bytes: usize,
    ) -> std::result::Result<Vec<u8>, String> {
        let entry = |key: &str| {
            t.external_data
                .iter()
                .find(|e| e.key() == key)
                .map(|e| e.value().to_string())
        };
        let location = entry("location").ok_or("external data without a location")?;
        let number = |key: &str| -> std::result::Result<Option<u64>, String> {
            entry(key)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("external data {key} '{v}' is not a number"))
                })
                .transpose()
        };
        let offset = number("offset")?.unwrap_or(0);
        let length = number("length")?;
        if length.is_some_and(|l| l != bytes as u64) {
            return Err(format!(
                "external data length {} is not the {bytes} bytes the tensor needs",
                length.unwrap_or(0)
            ));
        }
        let dir = self
            .dir
            .ok_or("external data needs the model's folder: load the model from its file")?;
        let relative = std::path::Path::new(&location);
        let safe = relative.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
        if !safe {
            return Err(format!(
                "external data location '{location}' leaves the model's folder"
            ));
        }
        read_range(&dir.join(relative), offset, bytes)
    }
}

#[cfg(feature = "native")]
fn read_range(
    path: &std::path::Path,
    offset: u64,
    bytes: usize,
) -> std::result::Result<Vec<u8>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let shown = path.display();
    let mut file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let len = file.metadata().map_err(|e| format!("{shown}: {e}"))?.len();
    if offset.checked_add(bytes as u64).is_none_or(|end| end > len) {
        return Err(format!(
            "{shown} has {len} bytes; the tensor needs {bytes} from offset {offset}"
        ));
    }
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("{shown}: {e}"))?;
    let mut data = vec![0u8; bytes];
    file.read_exact(&mut data)
        .map_err(|e| format!("{shown}: {e}"))?;
    Ok(data)
}

#[cfg(not(feature = "native"))]
fn read_range(_: &std::path::Path, _: u64, _: usize) -> std::result::Result<Vec<u8>, String> {
    Err("external data files are read only by native builds".into())
}

/// Renames the names `g` reads from enclosing graphs (its free names), in it and in its own
/// subgraphs; names `g` defines are left alone.
fn rename_free(g: &mut Graph, map: &dyn Fn(&str) -> String) {
    let free: HashSet<String> = g.free_names().into_iter().collect();
    let apply = |v: &mut String| {
        if free.contains(v.as_str()) {
            *v = map(v);
        }
    };
    for n in &mut g.nodes {
        n.inputs.iter_mut().for_each(apply);
        for a in n.attrs.values_mut() {
            if let Attr::Graph(sub) = a {
                rename_free(sub, &|v: &str| {
                    if free.contains(v) {
                        map(v)
                    } else {
                        v.to_string()
                    }
                });
            }
        }
    }
    g.outputs.iter_mut().for_each(|o| apply(&mut o.name));
}

/// Renames every name in `g`, a subgraph of a node of an inlined function: the names it defines
/// (inputs, constants, node outputs) get the call's `prefix`, and the names it reads from
/// enclosing graphs go through `outer`, recursively. Renaming only the free names is not
/// enough: ONNX lets a subgraph define a name its enclosing graphs also have, and a free name
/// renamed to the caller's value could then meet the subgraph's own (skl2onnx's KNNImputer
/// passes the model's input `X` into a function whose If branch defines `X`, which made a
/// cycle).
fn rename_scoped(g: &mut Graph, prefix: &str, outer: &dyn Fn(&str) -> String) {
    let defined: HashSet<String> = g
        .inputs
        .iter()
        .map(|i| i.name.clone())
        .chain(g.constants.iter().map(|(n, _)| n.clone()))
        .chain(g.nodes.iter().flat_map(|n| n.outputs.iter().cloned()))
        .filter(|n| !n.is_empty())
        .collect();
    let name = |v: &str| -> String {
        if v.is_empty() {
            String::new()
        } else if defined.contains(v) {
            format!("{prefix}{v}")
        } else {
            outer(v)
        }
    };
    for i in &mut g.inputs {
        i.name = name(&i.name);
    }
    for (c, _) in &mut g.constants {
        *c = name(c);
    }
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().chain(n.outputs.iter_mut()) {
            *v = name(v);
        }
        for a in n.attrs.values_mut() {
            if let Attr::Graph(sub) = a {
                rename_scoped(sub, prefix, &name);
            }
        }
    }
    for o in &mut g.outputs {
        o.name = name(&o.name);
    }
    for uses in g.symbolic_dims.values_mut() {
        for (input, _) in uses.iter_mut() {
            *input = name(input);
        }
    }
}

/// Scan-8 (inputs `sequence_lens?, states..., scan inputs...`, all with a leading batch axis) as
/// Scan-9: an outer Scan over the batch axis whose body runs the original Scan on one batch
/// item (its sequence along axis 0) and returns the final states and the scan outputs, which the
/// outer Scan stacks along the batch axis: exactly Scan-8's outputs, for any body.
///
/// With `sequence_lens` (batch item `b` runs `L_b` of the `T` steps), as onnxruntime computes
/// it: every item runs all `T` steps with a mask, step `t` counting when `t < L_b` (a masked
/// step keeps the states and writes zeros as its scan outputs; a reversed input runs its first
/// `L_b` elements backwards). The lengths are checked on the host first
/// (`ScanSequenceLens`, which returns the node to insert before the Scan).
fn scan8(node: &mut Node) -> Result<Option<Node>> {
    let bad = |msg: &str| Error::Model(format!("node '{}': Scan-8 {msg}", node.name));
    let Some(Attr::Graph(body)) = node.attrs.get("body") else {
        return Err(bad("needs the attribute 'body' (a graph)"));
    };
    let m = match node.attrs.get("num_scan_inputs") {
        Some(Attr::Int(m)) => {
            usize::try_from(*m).map_err(|_| bad("num_scan_inputs is negative"))?
        }
        _ => return Err(bad("needs the attribute 'num_scan_inputs'")),
    };
    let Some((sequence_lens, inputs)) = node.inputs.split_first() else {
        return Err(bad("has no inputs"));
    };
    let mut inputs = inputs.to_vec();
    let sequence_lens = sequence_lens.clone();
    if m > inputs.len() || body.outputs.len() < inputs.len() - m {
        return Err(bad(
            "has fewer inputs or body outputs than num_scan_inputs implies",
        ));
    }
    let mut body = body.clone();
    let states = inputs.len() - m;
    let base = node.outputs.first().cloned().unwrap_or_default();
    let directions = match node.attrs.get("directions") {
        Some(Attr::Ints(d)) => d.clone(),
        _ => vec![0; m],
    };
    let masked = !sequence_lens.is_empty();
    let mut check = None;
    if masked {
        if m == 0 {
            return Err(bad("with sequence_lens needs a scan input"));
        }
        if directions.len() != m || directions.iter().any(|d| !matches!(d, 0 | 1)) {
            return Err(bad(&format!(
                "directions must hold one 0 (forward) or 1 (reverse) per scan input ({m}), not {directions:?}"
            )));
        }
        let checked = format!("{base}/sequence_lens");
        check = Some(
            Node::new("ScanSequenceLens", format!("{}/sequence_lens", node.name))
                .inputs([sequence_lens, inputs[states].clone()])
                .outputs([checked.clone()]),
        );
        inputs.push(checked);
    }
    let item: Vec<String> = (0..inputs.len())
        .map(|i| format!("{base}/batch_item_{i}"))
        .collect();
    let results: Vec<String> = (0..node.outputs.len())
        .map(|j| format!("{base}/batch_result_{j}"))
        .collect();
    let mut outer_body = Graph::new();
    let mut inner_inputs = item.clone();
    let mut inner_scan_inputs = m;
    if masked {
        let p = format!("{base}/scan8");
        let length = inner_inputs.pop().expect("the length input");
        let scalar = |v: i64| HostTensor::from_vec(vec![], &[v]);
        let name = |s: &str| format!("{p}/{s}");
        outer_body = outer_body
            .constant(name("zero"), scalar(0)?)
            .constant(name("one"), scalar(1)?)
            .node(
                Node::new("Shape", name("shape"))
                    .inputs([item[states].clone()])
                    .outputs([name("shape")]),
            )
            .node(
                Node::new("Gather", name("steps_len"))
                    .inputs([name("shape"), name("zero")])
                    .outputs([name("steps_len")]),
            )
            .node(
                Node::new("Range", name("steps"))
                    .inputs([name("zero"), name("steps_len"), name("one")])
                    .outputs([name("steps")]),
            )
            .node(
                Node::new("Less", name("valid"))
                    .inputs([name("steps"), length.clone()])
                    .outputs([name("valid")]),
            );
        // A reversed input runs its first L steps backwards: step t reads x[L - 1 - t] (and
        // a masked step any in-range row, here x[t]), so it becomes a forward input gathered
        // in that order.
        if directions.iter().any(|&d| d != 0) {
            outer_body = outer_body
                .node(
                    Node::new("Sub", name("last"))
                        .inputs([length.clone(), name("one")])
                        .outputs([name("last")]),
                )
                .node(
                    Node::new("Sub", name("back"))
                        .inputs([name("last"), name("steps")])
                        .outputs([name("back")]),
                )
                .node(
                    Node::new("Where", name("order"))
                        .inputs([name("valid"), name("back"), name("steps")])
                        .outputs([name("order")]),
                );
        }
        for (j, _) in directions.iter().enumerate().filter(|(_, &d)| d != 0) {
            let input = &mut inner_inputs[states + j];
            let reordered = name(&format!("reversed_{j}"));
            outer_body = outer_body.node(
                Node::new("Gather", reordered.clone())
                    .inputs([input.clone(), name("order")])
                    .outputs([reordered.clone()]),
            );
            *input = reordered;
        }
        inner_inputs.push(name("valid"));
        inner_scan_inputs += 1;
        mask_body(&mut body, states, &format!("{base}/scan8_step_valid"));
    }
    let mut inner = Node::new("Scan", format!("{}/per_batch_item", node.name))
        .inputs(inner_inputs)
        .outputs(results.clone())
        .attr("body", Attr::Graph(body))
        .attr("num_scan_inputs", Attr::Int(inner_scan_inputs as i64));
    if !masked {
        if let Some(d) = node.attrs.get("directions") {
            inner = inner.attr("scan_input_directions", d.clone());
        }
    }
    outer_body = outer_body.node(inner);
    outer_body.inputs = item.into_iter().map(ValueInfo::named).collect();
    outer_body.outputs = results.into_iter().map(ValueInfo::named).collect();
    let count = inputs.len() as i64;
    node.inputs = inputs;
    node.attrs = BTreeMap::from([
        ("body".to_string(), Attr::Graph(Box::new(outer_body))),
        ("num_scan_inputs".to_string(), Attr::Int(count)),
    ]);
    Ok(check)
}

/// A Scan body given one more scan input, the bool `valid` (named `valid`): where it is false,
/// each state output is its state input unchanged and each scan output zeros of its type.
fn mask_body(body: &mut Graph, states: usize, valid: &str) {
    let mut nodes = Vec::new();
    for (k, out) in body.outputs.iter_mut().enumerate() {
        let y = out.name.clone();
        let kept = format!("{y}/{valid}/kept");
        if k < states {
            let previous = body.inputs[k].name.clone();
            nodes.push(
                Node::new("Where", kept.clone())
                    .inputs([valid.to_string(), y, previous])
                    .outputs([kept.clone()]),
            );
        } else {
            let zero = format!("{y}/{valid}/zero");
            nodes.push(
                Node::new("CastLike", zero.clone())
                    .inputs([valid.to_string(), y.clone()])
                    .outputs([zero.clone()]),
            );
            nodes.push(
                Node::new("Where", kept.clone())
                    .inputs([valid.to_string(), y, zero])
                    .outputs([kept.clone()]),
            );
        }
        out.name = kept;
    }
    body.nodes.extend(nodes);
    body.inputs.push(ValueInfo {
        name: valid.to_string(),
        dtype: Some(DType::Bool),
        shape: Some(Vec::new()),
        kind: Default::default(),
    });
}

/// Brings an ONNX node to the form the registry runs, given its opset: Constant becomes a
/// constant, Slice OnnxSlice (Slice-1's attributes constant inputs), Cast's `to` a dtype name,
/// Scan-8 its own op. Returns whether the node stays, constants to add to its graph, and a
/// node to insert before it.
fn normalize(node: &mut Node, opset: i64) -> Result<Normalized> {
    let bad = |msg: String| Error::Model(format!("node '{}': {msg}", node.name));
    if node.op == "Slice" {
        // The graph format's Slice is OpenVINO's (another input order); ONNX's is OnnxSlice.
        node.op = "OnnxSlice".into();
        if opset < 10 {
            // Slice-1: starts, ends and axes are attributes; they become constant inputs.
            let mut constants = Vec::new();
            node.inputs.truncate(1);
            for key in ["starts", "ends", "axes"] {
                match node.attrs.remove(key) {
                    Some(Attr::Ints(v)) => {
                        let output = node.outputs.first().cloned().unwrap_or_default();
                        let name = format!("{output}/{key}");
                        constants.push((name.clone(), HostTensor::from_vec(vec![v.len()], &v)?));
                        node.inputs.push(name);
                    }
                    None if key == "axes" => {}
                    _ => {
                        return Err(bad(format!(
                            "Slice-1 needs the attribute '{key}' (integers)"
                        )))
                    }
                }
            }
            return Ok((true, constants, Vec::new()));
        }
    }
    // Ops defined by other ops: each expander answers None for ops not its own.
    let expanders: [expansion::Expander; 8] = [
        defined::expand,
        text::expand,
        recurrent::expand,
        attention::expand,
        losses::expand,
        lp_normalization::expand,
        rotary_embedding::expand,
        quantize::expand,
    ];
    for expand in expanders {
        if let Some((nodes, constants)) = expand(node)? {
            return Ok((false, constants, nodes));
        }
    }
    if node.op == "Upsample" || (node.op == "Resize" && opset < 11) {
        // Upsample-7 (scales an attribute), Upsample-9 and Resize-10 (X, scales): Resize-19
        // with asymmetric coordinates, nearest positions rounded as onnxruntime rounds them
        // for these opsets (down when enlarging, up when shrinking).
        let mode = match node.attrs.get("mode") {
            Some(Attr::String(m)) if m == "bilinear" || m == "linear" => "linear",
            Some(Attr::String(m)) if m != "nearest" => {
                return Err(bad(format!(
                    "{} mode '{}' is not supported",
                    node.op,
                    m.escape_debug()
                )))
            }
            _ => "nearest",
        };
        let mut constants = Vec::new();
        let scales = match node.attrs.remove("scales") {
            Some(Attr::Floats(v)) => {
                let output = node.outputs.first().cloned().unwrap_or_default();
                let name = format!("{output}/scales");
                let v: Vec<f32> = v.iter().map(|&s| s as f32).collect();
                constants.push((name.clone(), HostTensor::from_vec(vec![v.len()], &v)?));
                name
            }
            _ => node
                .inputs
                .get(1)
                .cloned()
                .ok_or_else(|| bad(format!("{} needs scales", node.op)))?,
        };
        let x = node.inputs.first().cloned().unwrap_or_default();
        let upsample = node.op == "Upsample";
        node.op = "Resize".into();
        node.inputs = vec![x, String::new(), scales];
        node.attrs.clear();
        node.attrs.insert("mode".into(), Attr::String(mode.into()));
        node.attrs.insert(
            "coordinate_transformation_mode".into(),
            Attr::String("asymmetric".into()),
        );
        node.attrs
            .insert("nearest_mode".into(), Attr::String("simple".into()));
        if upsample {
            node.attrs.insert("upscale_only".into(), Attr::Int(1));
        }
        return Ok((true, constants, Vec::new()));
    }
    match node.op.as_str() {
        "Hardmax" if opset < 13 => {
            // Hardmax-1/-11 pick over all dims from `axis` (default 1), as a 2-D matrix.
            node.attrs.entry("axis".into()).or_insert(Attr::Int(1));
            node.attrs.insert("coerce_2d".into(), Attr::Int(1));
        }
        "EyeLike" | "HannWindow" | "HammingWindow" | "BlackmanWindow" | "MelWeightMatrix"
        | "RandomUniform" | "RandomNormal" | "RandomUniformLike" | "RandomNormalLike"
        | "Bernoulli" | "Multinomial" => {
            // Their type attribute is an ONNX type code; graphs name the dtype.
            let key = if node.op == "EyeLike" || crate::graph::is_random(&node.op) {
                "dtype"
            } else {
                "output_datatype"
            };
            if let Some(Attr::Int(code)) = node.attrs.get(key) {
                let code = i32::try_from(*code).unwrap_or(-1);
                let dtype = dtype_of(DataType::try_from(code).unwrap_or(DataType::Undefined))
                    .ok_or_else(|| {
                        bad(format!(
                            "{} to {} is not supported",
                            node.op,
                            type_name_i32(code)
                        ))
                    })?;
                node.attrs
                    .insert(key.into(), Attr::String(dtype.name().into()));
            }
        }
        "Softmax" | "LogSoftmax" if opset < 13 => {
            // Softmax-1/-11 normalize over all dims from `axis` (default 1), as a 2-D matrix.
            node.attrs.entry("axis".into()).or_insert(Attr::Int(1));
            node.attrs.insert("coerce_2d".into(), Attr::Int(1));
        }
        "Constant" => {
            let [output] = node.outputs.as_slice() else {
                return Err(bad("Constant has one output".into()));
            };
            let value = match node.attrs.iter().next() {
                Some((_, Attr::Tensor(t))) if node.attrs.len() == 1 => t.clone(),
                Some((k, Attr::Float(v))) if k == "value_float" => {
                    HostTensor::from_vec(vec![], &[*v as f32])?
                }
                Some((k, Attr::Floats(v))) if k == "value_floats" => {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    HostTensor::from_vec(vec![v.len()], &v)?
                }
                Some((k, Attr::Int(v))) if k == "value_int" => HostTensor::from_vec(vec![], &[*v])?,
                Some((k, Attr::Ints(v))) if k == "value_ints" => {
                    HostTensor::from_vec(vec![v.len()], v)?
                }
                _ => {
                    let kinds: Vec<&String> = node.attrs.keys().collect();
                    return Err(bad(format!(
                        "Constant with attributes {kinds:?} is not supported (value, value_float(s), value_int(s) are)"
                    )));
                }
            };
            return Ok((false, vec![(output.clone(), value)], Vec::new()));
        }
        "SequenceEmpty" => {
            if let Some(Attr::Int(code)) = node.attrs.get("dtype") {
                let code = i32::try_from(*code).unwrap_or(-1);
                let dtype = dtype_of(DataType::try_from(code).unwrap_or(DataType::Undefined))
                    .ok_or_else(|| {
                        bad(format!(
                            "SequenceEmpty of {} is not supported",
                            type_name_i32(code)
                        ))
                    })?;
                node.attrs
                    .insert("dtype".into(), Attr::String(dtype.name().into()));
            }
        }
        "Cast" | "BitCast" => {
            if let Some(Attr::Int(to)) = node.attrs.get("to") {
                let to = i32::try_from(*to).unwrap_or(-1);
                if node.op == "Cast" && to == DataType::String as i32 {
                    node.attrs
                        .insert("to".into(), Attr::String("string".into()));
                    return Ok((true, Vec::new(), Vec::new()));
                }
                let dtype = dtype_of(DataType::try_from(to).unwrap_or(DataType::Undefined))
                    .ok_or_else(|| {
                        bad(format!(
                            "{} to {} is not supported",
                            node.op,
                            type_name_i32(to)
                        ))
                    })?;
                node.attrs
                    .insert("to".into(), Attr::String(dtype.name().into()));
            }
            if node.op == "Cast" && opset < 6 {
                node.attrs.remove("to");
                return Err(bad(
                    "Cast before opset 6 (a string 'to') is not supported".into()
                ));
            }
        }
        "DFT" if opset < 20 => {
            // DFT-17's axis is an attribute (default 1); DFT-20's an input.
            let axis = match node.attrs.remove("axis") {
                None => 1,
                Some(Attr::Int(a)) => a,
                Some(_) => return Err(bad("DFT's axis must be an integer".into())),
            };
            let output = node.outputs.first().cloned().unwrap_or_default();
            let name = format!("{output}/axis");
            node.inputs.resize(2, String::new());
            node.inputs.push(name.clone());
            return Ok((
                true,
                vec![(name, HostTensor::from_vec(vec![], &[axis])?)],
                Vec::new(),
            ));
        }
        "Scan" if opset < 9 => {
            let before = scan8(node)?;
            return Ok((true, Vec::new(), before.into_iter().collect()));
        }
        _ => {}
    }
    Ok((true, Vec::new(), Vec::new()))
}

/// What [`normalize`] makes of a node: whether it stays, constants to add to its graph, and
/// a node to insert before it.
/// Whether the node stays, the constants it became, and the nodes that go before it (or
/// replace it).
type Normalized = (bool, Vec<(String, HostTensor)>, Vec<Node>);

/// The graph node that makes string tensor `value` as `output`.
fn string_constant(output: &str, value: StringTensor) -> Node {
    let shape: Vec<i64> = value.shape.iter().map(|&d| d as i64).collect();
    Node::new("StringConstant", format!("{output}/strings"))
        .outputs([output])
        .attr("value", Attr::Strings(value.values))
        .attr("shape", Attr::Ints(shape))
}

fn value_info(v: &proto::ValueInfoProto) -> Result<ValueInfo> {
    let bad = |msg: String| Error::Model(format!("value '{}': {msg}", v.name()));
    let mut info = ValueInfo::named(v.name());
    let Some(ty) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(info);
    };
    let (kind, t) = value_kind(ty).map_err(|what| {
        bad(format!(
            "{what} is not supported (tensors, sequences of tensors, optionals of them, maps and ZipMap's sequences of maps are)"
        ))
    })?;
    info.kind = kind;
    let Some(t) = t else {
        return Ok(info);
    };
    if t.elem_type() == DataType::String as i32 {
        if kind != ValueKind::Tensor {
            return Err(bad(format!(
                "{} of strings is not supported (tensors of strings are)",
                kind.name()
            )));
        }
        info.kind = ValueKind::Strings;
    } else if t.elem_type.is_some() {
        let code = DataType::try_from(t.elem_type()).unwrap_or(DataType::Undefined);
        info.dtype = Some(dtype_of(code).ok_or_else(|| {
            bad(format!(
                "element type {} is not supported",
                type_name_i32(t.elem_type())
            ))
        })?);
    }
    if let Some(shape) = &t.shape {
        use proto::tensor_shape_proto::dimension::Value;
        info.shape = Some(
            shape
                .dim
                .iter()
                .map(|d| match d.value {
                    Some(Value::DimValue(n)) => usize::try_from(n).ok(),
                    _ => None,
                })
                .collect(),
        );
    }
    Ok(info)
}

/// An ONNX type as text with our dtype names: `tensor(f32)`, `seq(tensor(i64))`,
/// `optional(seq(tensor(f32)))` (`?` where the element type is not given or not ours).
fn type_text(ty: &proto::type_proto::Value) -> String {
    use proto::type_proto::Value as T;
    let inner = |e: &Option<Box<proto::TypeProto>>| {
        e.as_deref()
            .and_then(|e| e.value.as_ref())
            .map_or("?".to_string(), type_text)
    };
    match ty {
        T::TensorType(t) => {
            let code = DataType::try_from(t.elem_type()).unwrap_or(DataType::Undefined);
            format!("tensor({})", dtype_of(code).map_or("?", |d| d.name()))
        }
        T::SequenceType(s) => format!("seq({})", inner(&s.elem_type)),
        T::OptionalType(o) => format!("optional({})", inner(&o.elem_type)),
        T::MapType(_) => match value_kind(ty) {
            Ok((ValueKind::Map(t), _)) => t.name(),
            _ => "map(?)".into(),
        },
        _ => "?".into(),
    }
}

/// What an ONNX type is to a graph, and its tensor type (of the sequence's or optional's
/// elements) where given; `Err` names the kind of value that is not supported.
fn value_kind(
    ty: &proto::type_proto::Value,
) -> std::result::Result<(ValueKind, Option<&proto::type_proto::Tensor>), &'static str> {
    use proto::type_proto::Value as T;
    fn inner(e: &Option<Box<proto::TypeProto>>) -> Option<&proto::type_proto::Value> {
        e.as_deref().and_then(|e| e.value.as_ref())
    }
    match ty {
        T::TensorType(t) => Ok((ValueKind::Tensor, Some(t))),
        T::SequenceType(s) => match inner(&s.elem_type) {
            None => Ok((ValueKind::Sequence, None)),
            Some(T::TensorType(t)) => Ok((ValueKind::Sequence, Some(t))),
            // ZipMap's: from strings or integers to floats.
            Some(T::MapType(m))
                if matches!(
                    DataType::try_from(m.key_type()),
                    Ok(DataType::String | DataType::Int64)
                ) && matches!(
                    m.value_type.as_deref().and_then(|v| v.value.as_ref()),
                    Some(T::TensorType(t)) if t.elem_type() == DataType::Float as i32
                ) =>
            {
                Ok((ValueKind::Maps, None))
            }
            Some(T::MapType(_)) => {
                Err("a sequence of maps other than from strings or integers to floats")
            }
            Some(_) => Err("a sequence of values other than tensors"),
        },
        T::OptionalType(o) => match inner(&o.elem_type) {
            None => Ok((ValueKind::OptionalTensor, None)),
            Some(T::TensorType(t)) => Ok((ValueKind::OptionalTensor, Some(t))),
            Some(elem @ T::SequenceType(_)) => match value_kind(elem)? {
                (ValueKind::Sequence, t) => Ok((ValueKind::OptionalSequence, t)),
                _ => Err("an optional of values other than tensors and sequences"),
            },
            Some(_) => Err("an optional of values other than tensors and sequences"),
        },
        T::MapType(m) => {
            let int_keys = match DataType::try_from(m.key_type()) {
                Ok(DataType::Int64) => true,
                Ok(DataType::String) => false,
                _ => return Err("a map with keys other than i64 or strings"),
            };
            let values = match m.value_type.as_deref().and_then(|v| v.value.as_ref()) {
                Some(T::TensorType(t)) => match DataType::try_from(t.elem_type()) {
                    Ok(DataType::String) => None,
                    Ok(DataType::Float) => Some(DType::F32),
                    Ok(DataType::Double) => Some(DType::F64),
                    Ok(DataType::Int64) => Some(DType::I64),
                    _ => return Err("a map with values other than f32, f64, i64 or strings"),
                },
                _ => return Err("a map with values other than tensors"),
            };
            Ok((ValueKind::Map(MapType { int_keys, values }), None))
        }
        T::SparseTensorType(_) => Err("a sparse tensor"),
        _ => Err("a value of this type"),
    }
}

/// Our dtype for an ONNX element type.
pub fn dtype_of(t: DataType) -> Option<DType> {
    Some(match t {
        DataType::Float => DType::F32,
        DataType::Uint8 => DType::U8,
        DataType::Int8 => DType::I8,
        DataType::Uint16 => DType::U16,
        DataType::Int16 => DType::I16,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::Bool => DType::Bool,
        DataType::Float16 => DType::F16,
        DataType::Double => DType::F64,
        DataType::Uint32 => DType::U32,
        DataType::Uint64 => DType::U64,
        DataType::Bfloat16 => DType::BF16,
        DataType::Float8e4m3fn => DType::F8E4M3FN,
        DataType::Float8e4m3fnuz => DType::F8E4M3FNUZ,
        DataType::Float8e5m2 => DType::F8E5M2,
        DataType::Float8e5m2fnuz => DType::F8E5M2FNUZ,
        DataType::Float8e8m0 => DType::F8E8M0,
        DataType::Float4e2m1 => DType::F4E2M1,
        DataType::Float6e2m3 => DType::F6E2M3,
        DataType::Float6e3m2 => DType::F6E3M2,
        DataType::Int4 => DType::I4,
        DataType::Uint4 => DType::U4,
        DataType::Int2 => DType::I2,
        DataType::Uint2 => DType::U2,
        _ => return None,
    })
}

/// The ONNX element type of our dtype (the inverse of [`dtype_of`]).
pub fn onnx_code(d: DType) -> Option<DataType> {
    [
        DataType::Float,
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint16,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Bool,
        DataType::Float16,
        DataType::Double,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Bfloat16,
        DataType::Float8e4m3fn,
        DataType::Float8e4m3fnuz,
        DataType::Float8e5m2,
        DataType::Float8e5m2fnuz,
        DataType::Float8e8m0,
        DataType::Float4e2m1,
        DataType::Float6e2m3,
        DataType::Float6e3m2,
        DataType::Int4,
        DataType::Uint4,
        DataType::Int2,
        DataType::Uint2,
    ]
    .into_iter()
    .find(|&t| dtype_of(t) == Some(d))
}

fn type_name(t: DataType) -> String {
    t.as_str_name().to_string()
}

fn type_name_i32(t: i32) -> String {
    DataType::try_from(t).map_or(format!("code {t}"), type_name)
}

/// Values of the typed fields as little-endian bytes (ONNX keeps 8- and 16-bit values, and
/// f16/bf16 bits, in `int32_data`; u32 and u64 in `uint64_data`).
fn typed_bytes(
    t: &proto::TensorProto,
    dtype: DType,
    numel: usize,
) -> std::result::Result<Vec<u8>, String> {
    fn take<T: Copy>(values: &[T], numel: usize, field: &str) -> std::result::Result<(), String> {
        if values.len() == numel {
            Ok(())
        } else {
            Err(format!(
                "{field} holds {} values but the shape needs {numel}",
                values.len()
            ))
        }
    }
    let mut out = Vec::with_capacity(numel * dtype.size());
    match dtype {
        DType::F32 => {
            take(&t.float_data, numel, "float_data")?;
            t.float_data
                .iter()
                .for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::F64 => {
            take(&t.double_data, numel, "double_data")?;
            t.double_data
                .iter()
                .for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::I64 => {
            take(&t.int64_data, numel, "int64_data")?;
            t.int64_data
                .iter()
                .for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::U32 => {
            take(&t.uint64_data, numel, "uint64_data")?;
            t.uint64_data
                .iter()
                .for_each(|&v| out.extend((v as u32).to_le_bytes()));
        }
        DType::U64 => {
            take(&t.uint64_data, numel, "uint64_data")?;
            t.uint64_data
                .iter()
                .for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::I32 => {
            take(&t.int32_data, numel, "int32_data")?;
            t.int32_data
                .iter()
                .for_each(|v| out.extend(v.to_le_bytes()));
        }
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
            take(&t.int32_data, numel, "int32_data")?;
            t.int32_data
                .iter()
                .for_each(|&v| out.extend((v as u16).to_le_bytes()));
        }
        // One byte per value (the 4- and 2-bit types' packed bytes, the 6-bit codes).
        _ => {
            take(&t.int32_data, numel, "int32_data")?;
            out.extend(t.int32_data.iter().map(|&v| v as u8));
        }
    }
    Ok(out)
}

/// Reads a serialized value of the `kind` a graph declares: a `TensorProto`, a `SequenceProto`
/// of tensors, or an `OptionalProto` (the `.pb` files of ONNX test data).
pub fn value_from_bytes(bytes: &[u8], kind: ValueKind) -> Result<crate::graph::Value> {
    use crate::graph::Value;
    let loader = Loader {
        opsets: &BTreeMap::new(),
        functions: HashMap::new(),
        dir: None,
        inlined: 0,
    };
    let sequence = |s: &proto::SequenceProto| -> Result<Value> {
        if !(s.sparse_tensor_values.is_empty()
            && s.sequence_values.is_empty()
            && s.map_values.is_empty()
            && s.optional_values.is_empty())
        {
            return Err(Error::Model(
                "a sequence of values other than tensors is not supported".into(),
            ));
        }
        let items = s
            .tensor_values
            .iter()
            .map(|t| loader.tensor(t, "sequence element"))
            .collect::<Result<_>>()?;
        Ok(Value::Sequence(items))
    };
    match kind {
        ValueKind::Map(t) => {
            let m = proto::MapProto::decode(bytes)
                .map_err(|e| Error::Model(format!("not a MapProto: {e}")))?;
            map_from_proto(&loader, &m, t).map(Value::Map)
        }
        ValueKind::Maps => {
            let s = proto::SequenceProto::decode(bytes)
                .map_err(|e| Error::Model(format!("not a SequenceProto: {e}")))?;
            maps_from_proto(&loader, &s).map(Value::Maps)
        }
        ValueKind::Tensor | ValueKind::Strings => {
            let t = proto::TensorProto::decode(bytes)
                .map_err(|e| Error::Model(format!("not a TensorProto: {e}")))?;
            match loader.string_tensor(&t, "tensor")? {
                Some(s) => Ok(Value::Strings(s)),
                None => loader.tensor(&t, "tensor").map(Value::Tensor),
            }
        }
        ValueKind::Sequence => sequence(
            &proto::SequenceProto::decode(bytes)
                .map_err(|e| Error::Model(format!("not a SequenceProto: {e}")))?,
        ),
        ValueKind::OptionalTensor | ValueKind::OptionalSequence => {
            let o = proto::OptionalProto::decode(bytes)
                .map_err(|e| Error::Model(format!("not an OptionalProto: {e}")))?;
            match (&o.tensor_value, &o.sequence_value) {
                (Some(t), _) => Ok(Value::Tensor(loader.tensor(t, "optional")?)),
                (None, Some(s)) => sequence(s),
                (None, None)
                    if o.map_value.is_some()
                        || o.optional_value.is_some()
                        || o.sparse_tensor_value.is_some() =>
                {
                    Err(Error::Model(
                        "an optional of values other than tensors and sequences is not supported"
                            .into(),
                    ))
                }
                (None, None) => Ok(Value::None),
            }
        }
    }
}

/// A `MapProto` (its values a sequence of one-element tensors) as a [`Map`] of type `ty`.
fn map_from_proto(loader: &Loader<'_>, m: &proto::MapProto, ty: MapType) -> Result<Map> {
    let bad = |msg: String| Error::Model(format!("a {}: {msg}", ty.name()));
    let int_keys = m.key_type() != DataType::String as i32;
    if int_keys != ty.int_keys {
        return Err(bad("its keys are of another type".into()));
    }
    let keys = match int_keys {
        true => MapKeys::Ints(m.keys.clone()),
        false => MapKeys::Strings(
            m.string_keys
                .iter()
                .map(|k| String::from_utf8(k.clone()).map_err(|_| bad("a key is not UTF-8".into())))
                .collect::<Result<_>>()?,
        ),
    };
    let items = m.values.as_ref().map_or(&[][..], |v| &v.tensor_values[..]);
    let one = |n: usize| match n {
        1 => Ok(()),
        n => Err(bad(format!("a value holds {n} elements, not one"))),
    };
    let values = match ty.values {
        None => {
            let mut v = Vec::with_capacity(items.len());
            for t in items {
                let s = loader
                    .string_tensor(t, "map value")?
                    .ok_or_else(|| bad("a value is not a string".into()))?;
                one(s.values.len())?;
                v.extend(s.values);
            }
            MapValues::Strings(v)
        }
        Some(dtype) => {
            let mut data = Vec::with_capacity(items.len() * dtype.size());
            for t in items {
                let t = loader.tensor(t, "map value")?;
                if t.dtype != dtype {
                    return Err(bad(format!("a value is {}", t.dtype)));
                }
                one(t.numel())?;
                data.extend(t.data);
            }
            MapValues::Numbers(HostTensor::from_bytes(dtype, vec![items.len()], data)?)
        }
    };
    Map::new(keys, values)
}

/// A `SequenceProto` of maps that share their keys (ZipMap's output) as a [`MapSequence`].
fn maps_from_proto(loader: &Loader<'_>, s: &proto::SequenceProto) -> Result<MapSequence> {
    let bad = |msg: &str| Error::Model(format!("a sequence of maps: {msg}"));
    let mut keys: Option<MapKeys> = None;
    let mut values: Vec<f32> = Vec::new();
    for m in &s.map_values {
        let these = if m.key_type() == DataType::String as i32 {
            MapKeys::Strings(
                m.string_keys
                    .iter()
                    .map(|k| String::from_utf8(k.clone()).map_err(|_| bad("a key is not UTF-8")))
                    .collect::<Result<_>>()?,
            )
        } else {
            MapKeys::Ints(m.keys.clone())
        };
        match &keys {
            Some(k) if *k != these => return Err(bad("its maps do not share their keys")),
            Some(_) => {}
            None => keys = Some(these),
        }
        let row = m.values.as_ref().map_or(&[][..], |v| &v.tensor_values[..]);
        for t in row {
            let t = crate::reference::cast_host(&loader.tensor(t, "map value")?, DType::F32)?;
            values.extend(t.to_vec::<f32>()?);
        }
    }
    let keys = keys.unwrap_or(MapKeys::Ints(Vec::new()));
    let (n, c) = (s.map_values.len(), keys.len());
    if values.len() != n * c {
        return Err(bad("a map holds other than one value per key"));
    }
    MapSequence::new(keys, HostTensor::from_vec(vec![n, c], &values)?)
}

/// Reads a serialized `TensorProto` (the `.pb` files of the ONNX node tests).
pub fn tensor_from_bytes(bytes: &[u8]) -> Result<HostTensor> {
    let t = proto::TensorProto::decode(bytes)
        .map_err(|e| Error::Model(format!("not a TensorProto: {e}")))?;
    let loader = Loader {
        opsets: &BTreeMap::new(),
        functions: HashMap::new(),
        dir: None,
        inlined: 0,
    };
    loader.tensor(&t, "tensor")
}
