//! The ONNX backend node tests as our suite: every node test (exported by
//! `scripts/onnx_node_tests.py` from the `onnx` pip package) whose ops we support runs on the
//! GPU and is compared with the test's own outputs and tolerances as the `onnx` package's
//! runner compares them (numpy's `assert_allclose`: `|got - want| <= atol + rtol * |want|`, NaN
//! equal to NaN, bf16 outputs at an rtol of at least 2^-6; integers and bools bit for bit).
//! A test that passes runs again with i64 and u64 emulated on 32-bit words (a context without
//! `SHADER_INT64`, as in browsers), which must pass as well.
//!
//! A test of supported ops that fails must be listed, with its reason, in
//! `tests/onnx-node-expected-failures.txt`; a listed test that passes fails the run too, so the
//! list stays true. `WGPU_OPS_ONNX_NODE_BLESS=1` rewrites the list from this run.
//!
//! The same runner runs the differential test of the element-wise ops against onnxruntime
//! (`scripts/ort_differential.py`, same layout; its list is
//! `tests/ort-differential-expected-failures.txt`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use wgpu_ops::graph::{Value, ValueKind};
use wgpu_ops::onnx::{tensor_from_bytes, value_from_bytes, Model};
use wgpu_ops::{DType, HostTensor};

/// One suite: where its files are exported, by which script, and its expected failures.
struct Suite {
    title: &'static str,
    env: &'static str,
    default_dir: &'static str,
    script: &'static str,
    install: &'static str,
    expected: &'static str,
}

const NODE_TESTS: Suite = Suite {
    title: "ONNX node tests",
    env: "WGPU_OPS_ONNX_NODE_TESTS",
    default_dir: "target/onnx-node-tests",
    script: "scripts/onnx_node_tests.py",
    install: "onnx",
    expected: "tests/onnx-node-expected-failures.txt",
};

const DIFFERENTIAL: Suite = Suite {
    title: "element-wise ops against onnxruntime",
    env: "WGPU_OPS_ORT_DIFFERENTIAL",
    default_dir: "target/ort-differential",
    script: "scripts/ort_differential.py",
    install: "onnx onnxruntime",
    expected: "tests/ort-differential-expected-failures.txt",
};

fn tests_dir(suite: &Suite) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os(suite.env)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(suite.default_dir));
    if !dir.join("manifest.json").exists() {
        let status = std::process::Command::new("python3")
            .arg(root.join(suite.script))
            .arg(&dir)
            .status()
            .expect("python3 runs the export script");
        assert!(
            status.success(),
            "exporting the {} failed: `python3 -m pip install {}` (scripts/test.sh does)",
            suite.title,
            suite.install
        );
    }
    dir
}

/// A suite's `manifest.json`: each test's tolerances, data sets and ops, by name.
fn read_manifest(dir: &Path) -> BTreeMap<String, Entry> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap())
        .expect("manifest.json")
}

#[derive(serde::Deserialize)]
struct Entry {
    rtol: f64,
    atol: f64,
    data_sets: usize,
    ops: Vec<String>,
}

/// The values of a float tensor as f64; None for other dtypes.
fn floats(t: &HostTensor) -> Option<Vec<f64>> {
    matches!(t.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16).then(|| common::as_f64(t))
}

/// The least relative tolerance of bf16 outputs: the `onnx` package's own backend test runner
/// compares bf16 outputs with `rtol = max(rtol, 2^-6)` (two units in the last place; the
/// default 1e-3 is below bf16's half unit, 2^-9 to 2^-8, so any other rounding order would fail).
const BF16_MIN_RTOL: f64 = 1.0 / 64.0;

/// Why `got` is not `want`, if it is not.
fn compare(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> Option<String> {
    if got.dtype != want.dtype || got.shape != want.shape {
        return Some(format!(
            "got {} {:?}, want {} {:?}",
            got.dtype, got.shape, want.dtype, want.shape
        ));
    }
    let rtol = if want.dtype == DType::BF16 {
        rtol.max(BF16_MIN_RTOL)
    } else {
        rtol
    };
    match (floats(got), floats(want)) {
        (Some(g), Some(w)) => {
            for (i, (&g, &w)) in g.iter().zip(&w).enumerate() {
                let same =
                    (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs();
                if !same {
                    return Some(format!("element {i}: got {g}, want {w}"));
                }
            }
            None
        }
        _ => {
            let size = got.dtype.size();
            let first = got
                .data
                .chunks(size)
                .zip(want.data.chunks(size))
                .position(|(g, w)| g != w)?;
            Some(format!("element {first} differs in its bits"))
        }
    }
}

fn read_tensor(path: &Path) -> Result<HostTensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    tensor_from_bytes(&bytes).map_err(|e| e.to_string())
}

fn read_value(path: &Path, kind: ValueKind) -> Result<Value, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    value_from_bytes(&bytes, kind).map_err(|e| e.to_string())
}

/// Why `got` is not `want` (tensors compared as [`compare`] does, sequences tensor by tensor).
fn compare_values(got: &Value, want: &Value, rtol: f64, atol: f64) -> Option<String> {
    match (got, want) {
        (Value::Tensor(g), Value::Tensor(w)) => compare(g, w, rtol, atol),
        (Value::Sequence(g), Value::Sequence(w)) if g.len() == w.len() => {
            g.iter().zip(w).enumerate().find_map(|(i, (g, w))| {
                compare(g, w, rtol, atol).map(|why| format!("tensor {i} of the sequence: {why}"))
            })
        }
        (Value::None, Value::None) => None,
        // Maps are unordered: the same keys, and each key's values as tensors.
        (Value::Maps(g), Value::Maps(w)) => {
            let (g, w) = (by_key(g), by_key(w));
            if g.0 != w.0 {
                return Some(format!("keys {:?}, want {:?}", g.0, w.0));
            }
            compare(&g.1, &w.1, rtol, atol)
        }
        // Strings compare exactly.
        (Value::Strings(g), Value::Strings(w)) if g.shape != w.shape => {
            Some(format!("shape {:?}, want {:?}", g.shape, w.shape))
        }
        (Value::Strings(g), Value::Strings(w)) => g
            .values
            .iter()
            .zip(&w.values)
            .enumerate()
            .find_map(|(i, (g, w))| (g != w).then(|| format!("string {i}: got {g:?}, want {w:?}"))),
        _ => Some(format!("got {}, want {}", describe(got), describe(want))),
    }
}

/// A sequence of maps with its keys sorted (as text) and its values' columns in that order.
fn by_key(m: &wgpu_ops::MapSequence) -> (Vec<String>, HostTensor) {
    let keys: Vec<String> = match &m.keys {
        wgpu_ops::MapKeys::Strings(k) => k.clone(),
        wgpu_ops::MapKeys::Ints(k) => k.iter().map(|k| format!("{k:020}")).collect(),
    };
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    let values = m.values.to_vec::<f32>().unwrap();
    let c = keys.len().max(1);
    let sorted: Vec<f32> = values
        .chunks(c)
        .flat_map(|row| order.iter().map(move |&j| row[j]))
        .collect();
    (
        order.iter().map(|&j| keys[j].clone()).collect(),
        HostTensor::from_vec(m.values.shape.clone(), &sorted).unwrap(),
    )
}

fn describe(v: &Value) -> String {
    match v {
        Value::Sequence(items) => format!("a sequence of {} tensors", items.len()),
        other => other.kind_name().to_string(),
    }
}

#[derive(Debug)]
enum Outcome {
    Pass,
    /// A test of a random op whose outputs obey the op's law (see [`random_law`]).
    Lawful,
    Fail(String),
    /// An op of the test is not supported.
    Unsupported,
    /// The test needs a type there is no dtype for (float8, 4-bit, strings, sequences, ...).
    Skipped(String),
}

/// The reason a test is skipped, when its failure is a type we have no dtype for.
fn missing_type(error: &str) -> Option<String> {
    let types = [
        "element type",
        "is not supported (tensors, sequences",
        "not a tensor",
    ];
    types
        .iter()
        .any(|t| error.contains(t))
        .then(|| error.to_string())
}

/// The test on the default context and, where it passes there, again on one that emulates
/// i64 and u64 on 32-bit words (as browsers need): the emulation must pass too (a test that
/// computes on f64, which needs the native 64-bit types, may instead fail naming them).
/// Whether a test's outputs are random draws: its model has a random op (the expanded
/// Bernoulli draws with RandomUniformLike), or a Dropout given `training_mode` true with a
/// ratio above 0. Their expected values come from numpy's generator, which no runtime
/// reproduces (onnxruntime's runner skips these tests), so they are held to the op's law
/// instead: [`random_law`].
fn draws_at_random(model: &wgpu_ops::graph::Graph, given: &[(String, Value)]) -> bool {
    let truthy = |name: &str| {
        given.iter().any(|(n, v)| {
            n == name && matches!(v, Value::Tensor(t) if t.data.iter().any(|&b| b != 0))
        })
    };
    model.nodes.iter().any(|n| {
        wgpu_ops::graph::is_random(&n.op)
            || n.op == "Dropout"
                && n.inputs.get(2).is_some_and(|t| truthy(t))
                && n.inputs.get(1).is_none_or(|r| r.is_empty() || truthy(r))
    })
}

/// The law of a random test's outputs (`got`; `want` gives their dtypes and shapes):
/// Bernoulli's are 0 or 1, 0 where the probability is at most 0 and 1 where it is at least
/// 1; training Dropout's output is, at each element, 0 or the input times `1 / (1 - ratio)`,
/// and its mask (a second output) is true exactly where the element was kept.
fn random_law(
    ops: &[String],
    given: &[(String, Value)],
    got: &[(String, Value)],
    wants: &[Value],
) -> Option<String> {
    let tensor = |v: &Value| match v {
        Value::Tensor(t) => Some(t.clone()),
        _ => None,
    };
    for (i, ((_, g), w)) in got.iter().zip(wants).enumerate() {
        let (Some(g), Some(w)) = (tensor(g), tensor(w)) else {
            return Some(format!("output {i} is not a tensor"));
        };
        if (g.dtype, &g.shape) != (w.dtype, &w.shape) {
            return Some(format!(
                "output {i} is {} {:?}, want {} {:?}",
                g.dtype, g.shape, w.dtype, w.shape
            ));
        }
    }
    let values = |t: &HostTensor| {
        wgpu_ops::reference::cast_host(t, DType::F64)
            .ok()
            .and_then(|c| c.to_vec::<f64>().ok())
    };
    let input = given.first().and_then(|(_, v)| tensor(v))?;
    let x = values(&input)?;
    let y = values(&tensor(&got[0].1)?)?;
    let has = |op: &str| ops.iter().any(|o| o == op);
    // Bernoulli, or its expansion: RandomUniformLike, Greater, Cast.
    if has("Bernoulli") || has("RandomUniformLike") && has("Greater") && has("Cast") {
        for (k, (&p, &v)) in x.iter().zip(&y).enumerate() {
            let ok = (v == 0.0 || v == 1.0) && !(p <= 0.0 && v != 0.0) && !(p >= 1.0 && v != 1.0);
            if !ok {
                return Some(format!("element {k}: {v} drawn at probability {p}"));
            }
        }
        return None;
    }
    if has("Dropout") {
        let ratio = given
            .get(1)
            .and_then(|(_, v)| tensor(v))
            .and_then(|t| values(&t))
            .map_or(0.5, |r| r[0]);
        let scale = 1.0 / (1.0 - ratio);
        let mask = got.get(1).and_then(|(_, v)| tensor(v)).map(|m| m.data);
        for (k, (&a, &v)) in x.iter().zip(&y).enumerate() {
            let scaled = a * scale;
            let kept =
                (v - scaled).abs() <= 1e-6 * scaled.abs().max(1.0) || v.is_nan() && scaled.is_nan();
            if !(kept || v == 0.0) {
                return Some(format!("element {k}: {v} from {a} at ratio {ratio}"));
            }
            // Where the scaled input is 0, kept and dropped look alike.
            if let Some(m) = mask.as_ref().filter(|_| scaled != 0.0) {
                if (m[k] != 0) != kept {
                    return Some(format!("mask {k} is {} where the output is {v}", m[k]));
                }
            }
        }
        return None;
    }
    Some(format!("no law for the random ops of {ops:?}"))
}

/// The contexts a suite runs its tests on (native 64-bit types, and emulated), its own: no other
/// test's work shows in their counts of buffers created.
struct SuiteContexts {
    native: wgpu_ops::Context,
    emulating_64_bit: wgpu_ops::Context,
}

impl SuiteContexts {
    fn new() -> SuiteContexts {
        let options = |native_64_bit| wgpu_ops::ContextOptions {
            native_64_bit,
            cpu_kernels: common::cpu_kernels_from_env(),
            ..Default::default()
        };
        SuiteContexts {
            native: wgpu_ops::Context::new_blocking(options(None)).expect("an adapter"),
            emulating_64_bit: wgpu_ops::Context::new_blocking(options(Some(false)))
                .expect("an adapter"),
        }
    }
}

fn run_test(contexts: &SuiteContexts, dir: &Path, entry: &Entry) -> Outcome {
    match run_test_on(&contexts.native, dir, entry) {
        first @ (Outcome::Pass | Outcome::Lawful) => {
            match run_test_on(&contexts.emulating_64_bit, dir, entry) {
                Outcome::Fail(why)
                    if !(why.contains("SHADER_F64")
                        || has_f64(dir) && why.contains("SHADER_INT64")) =>
                {
                    Outcome::Fail(format!("with i64 emulated: {why}"))
                }
                _ => first,
            }
        }
        other => other,
    }
}

/// Whether the test's model has f64 inputs, outputs or constants.
fn has_f64(dir: &Path) -> bool {
    Model::load(dir.join("model.onnx")).is_ok_and(|m| {
        let g = &m.graph;
        g.inputs
            .iter()
            .chain(&g.outputs)
            .any(|v| v.dtype == Some(DType::F64))
            || g.constants.iter().any(|(_, t)| t.dtype == DType::F64)
    })
}

/// Ops whose tests also run on the CPU interpreter.
const INTERPRETED: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "GlobalLpPool",
    "Resize",
    "Upsample",
    "Einsum",
    "InstanceNormalization",
    "GroupNormalization",
    "LRN",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "GatherND",
    "ReverseSequence",
    "Compress",
    "CenterCropPad",
    "If",
    "Loop",
    "GridSample",
    "AffineGrid",
    "DFT",
    "STFT",
    "Col2Im",
    "MelWeightMatrix",
    "MeanVarianceNormalization",
    "MaxUnpool",
    "TfIdfVectorizer",
];

/// How many times [`run_test_on`] runs each data set on one session.
const PASSES: u64 = 4;

/// Runs the test in `dir` on `ctx` (which runs nothing else meanwhile, so that its count of
/// buffers created is this test's); a data set's fourth run must create no buffer.
fn run_test_on(ctx: &wgpu_ops::Context, dir: &Path, entry: &Entry) -> Outcome {
    let model = match Model::load(dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => {
            // A test of ops we do not have, whose loading failed first (e.g. its types).
            if entry.ops.iter().any(|op| {
                !wgpu_ops::graph::is_op(op)
                    && !wgpu_ops::onnx::EXPANDED_OPS.contains(&op.as_str())
                    && !wgpu_ops::onnx::ML_OPS.contains(&op.as_str())
                    && op != "Constant"
            }) {
                return Outcome::Unsupported;
            }
            let e = e.to_string();
            return match missing_type(&e) {
                Some(why) => Outcome::Skipped(why),
                None => Outcome::Fail(format!("load: {e}")),
            };
        }
    };
    let missing = model.unsupported_ops();
    if !missing.is_empty() {
        return Outcome::Unsupported;
    }
    let inputs: Vec<(String, ValueKind)> = model
        .graph
        .inputs
        .iter()
        .map(|i| (i.name.clone(), i.kind))
        .collect();
    let output_kinds: Vec<ValueKind> = model.graph.outputs.iter().map(|o| o.kind).collect();
    let model_graph = model.graph.clone();
    let session = match model.session(ctx) {
        Ok(s) => s,
        Err(e) => return Outcome::Fail(format!("plan: {e}")),
    };
    let mut lawful = false;
    // Every data set four times on the session: later passes run on the buffers the ones
    // before left (see `Session`), which must not change a result; what the session keeps
    // between runs, settled by the third pass, must not grow in the fourth; and the fourth
    // creates no buffer.
    let sets = entry.data_sets;
    let mut kept_after_third = Vec::with_capacity(sets);
    for (pass, k) in (0..PASSES).flat_map(|pass| (0..sets).map(move |k| (pass, k))) {
        let set = dir.join(format!("data_{k}"));
        let mut given = Vec::new();
        for (i, (name, kind)) in inputs.iter().enumerate() {
            let path = set.join(format!("input_{i}.pb"));
            if !path.exists() {
                return Outcome::Skipped(format!("input {i} is not a tensor (a map)"));
            }
            match read_value(&path, *kind) {
                Ok(v) => given.push((name.clone(), v)),
                Err(e) => return Outcome::Fail(format!("input {i}: {e}")),
            }
        }
        let tensors: Option<Vec<(String, HostTensor)>> = given
            .iter()
            .map(|(n, v)| match v {
                Value::Tensor(t) => Some((n.clone(), t.clone())),
                _ => None,
            })
            .collect();
        // The window ops' CPU interpreter (which sessions fold constants through) is held to
        // the same expected values (it computes on tensors only).
        let interpreted = entry.ops.iter().all(|op| {
            INTERPRETED.contains(&op.as_str()) || wgpu_ops::onnx::ML_OPS.contains(&op.as_str())
        });
        // The interpreter computes on numbers only: graphs that make strings are left out.
        let makes_strings = model_graph.nodes.iter().any(|n| {
            matches!(
                n.op.as_str(),
                "StringConstant" | "LabelEncoder" | "CategoryMapper"
            )
        });
        if let (true, Some(given), true) = (
            interpreted && !makes_strings,
            &tensors,
            output_kinds.iter().all(|k| *k == ValueKind::Tensor),
        ) {
            let reference =
                wgpu_ops::reference::graph::run_graph(&model_graph, given, &Default::default());
            let reference = match reference {
                Ok(r) => r,
                Err(e) => return Outcome::Fail(format!("interpreter: {}", e.0)),
            };
            for (i, got) in reference.iter().enumerate() {
                let want = match read_tensor(&set.join(format!("output_{i}.pb"))) {
                    Ok(t) => t,
                    Err(e) => return Outcome::Fail(format!("output {i}: {e}")),
                };
                if let Some(why) = compare(got, &want, entry.rtol, entry.atol) {
                    return Outcome::Fail(format!("interpreter, output {i}: {why}"));
                }
            }
        }
        let random = draws_at_random(&model_graph, &given);
        let created = ctx.stats().buffers_created;
        let outputs = match session.run_values_blocking(given.clone()) {
            Ok(o) => o,
            Err(e) => return Outcome::Fail(e.to_string()),
        };
        let kept = session.spare_bytes();
        // By the fourth run every buffer comes from the runs before.
        let created = ctx.stats().buffers_created - created;
        if pass == 3 && created > 0 {
            return Outcome::Fail(format!(
                "the fourth run of data set {k} created {created} buffers"
            ));
        }
        match pass {
            2 => kept_after_third.push(kept),
            3 if kept != kept_after_third[k] => {
                return Outcome::Fail(format!(
                    "the session keeps {} bytes after the third run of data set {k} and {kept} after the fourth",
                    kept_after_third[k]
                ))
            }
            _ => {}
        }
        if random {
            let mut wants = Vec::new();
            for (i, kind) in output_kinds.iter().enumerate() {
                match read_value(&set.join(format!("output_{i}.pb")), *kind) {
                    Ok(w) => wants.push(w),
                    Err(e) => return Outcome::Fail(format!("output {i}: {e}")),
                }
            }
            if let Some(why) = random_law(&entry.ops, &given, &outputs, &wants) {
                return Outcome::Fail(format!("random draws break the law: {why}"));
            }
            lawful = true;
            continue;
        }
        for (i, (name, got)) in outputs.iter().enumerate() {
            let want = match read_value(&set.join(format!("output_{i}.pb")), output_kinds[i]) {
                Ok(t) => t,
                Err(e) => return Outcome::Fail(format!("output {i}: {e}")),
            };
            if let Some(why) = compare_values(got, &want, entry.rtol, entry.atol) {
                return Outcome::Fail(format!("output '{name}': {why}"));
            }
        }
    }
    if lawful {
        return Outcome::Lawful;
    }
    match replayed_as_planned(ctx, &session, dir, &inputs, &output_kinds) {
        Some(why) => Outcome::Fail(why),
        None => Outcome::Pass,
    }
}

/// Tests whose run with tensors on the GPU was replayed (see [`replayed_as_planned`]).
static REPLAYED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Data set 0 run twice more with its tensors on the GPU (`run_tensors`, tensors only): the
/// second run encodes the first one's commands again where it can, and must then give the
/// first one's outputs bit for bit. The reason where it does not; `None` where it does, was
/// not replayed, or the model does not run so.
fn replayed_as_planned(
    ctx: &wgpu_ops::Context,
    session: &wgpu_ops::Session,
    dir: &Path,
    inputs: &[(String, ValueKind)],
    output_kinds: &[ValueKind],
) -> Option<String> {
    if output_kinds.iter().any(|k| *k != ValueKind::Tensor) {
        return None;
    }
    let mut given = Vec::new();
    for (i, (name, kind)) in inputs.iter().enumerate() {
        if *kind != ValueKind::Tensor {
            return None;
        }
        let host = read_tensor(&dir.join("data_0").join(format!("input_{i}.pb"))).ok()?;
        given.push((name.clone(), host));
    }
    let on_gpu = || -> Option<Vec<(String, wgpu_ops::Tensor)>> {
        given
            .iter()
            .map(|(n, h)| Some((n.clone(), wgpu_ops::Tensor::from_host(ctx, h).ok()?)))
            .collect()
    };
    let download = |out: Vec<(String, wgpu_ops::Tensor)>| -> Result<Vec<HostTensor>, String> {
        out.iter()
            .map(|(_, t)| t.to_host_blocking().map_err(|e| e.to_string()))
            .collect()
    };
    // String tensors and such are not GPU tensors: those models do not run so. The log of
    // the host runs before is dropped, so that this run is planned.
    session.set_replay(false);
    session.set_replay(true);
    let planned = download(session.run_tensors_blocking(on_gpu()?).ok()?).ok()?;
    let before = session.replayed_runs();
    let again = match session.run_tensors_blocking(on_gpu()?) {
        Ok(out) => download(out),
        Err(e) => Err(e.to_string()),
    };
    let again = match again {
        Ok(again) => again,
        Err(e) => return Some(format!("replayed run: {e}")),
    };
    if session.replayed_runs() == before {
        return None;
    }
    REPLAYED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let differs = planned.iter().zip(&again).position(|(a, b)| a != b);
    differs.map(|i| format!("output {i} of a replayed run differs from the planned run's"))
}

fn one_line(s: &str) -> String {
    let s = s.replace(['\n', '\t'], " ");
    if s.chars().count() > 160 {
        s.chars().take(157).collect::<String>() + "..."
    } else {
        s
    }
}

#[test]
fn onnx_node_tests() {
    run_suite(&NODE_TESTS);
}

/// The node tests of LinearAttention's expansion (a Scan over the time steps: rules, grouped
/// and multi-query heads, per-head decay, scalar beta, f16, past state) run as the op's
/// recurrence, one kernel for all steps, and pass; with the recognition off they run as Scans
/// and pass too.
#[test]
fn linear_attention_expansions_run_as_the_recurrence() {
    let dir = tests_dir(&NODE_TESTS);
    let manifest = read_manifest(&dir);
    let expansions: Vec<(&String, &Entry)> = manifest
        .iter()
        .filter(|(name, _)| {
            name.starts_with("test_linear_attention_") && name.ends_with("_expanded")
        })
        .collect();
    assert!(expansions.len() >= 14, "{} expansions", expansions.len());
    for recognize in [true, false] {
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: common::cpu_kernels_from_env(),
            scan_recurrences: Some(recognize),
            ..Default::default()
        })
        .unwrap();
        for (name, entry) in &expansions {
            let before = ctx.stats();
            let outcome = run_test_on(&ctx, &dir.join(name), entry);
            assert!(
                matches!(outcome, Outcome::Pass),
                "{name}, recognized {recognize}: {outcome:?}"
            );
            // Each planned run: the data sets' runs and the two of `replayed_as_planned`,
            // but those that replayed a log (and so planned nothing).
            let after = ctx.stats();
            let replayed = after.replayed_runs - before.replayed_runs;
            let runs = if recognize {
                PASSES * entry.data_sets as u64 + 2 - replayed
            } else {
                0
            };
            let recognized = after.scans_as_recurrences - before.scans_as_recurrences;
            assert_eq!(recognized, runs, "{name}");
        }
    }
}

/// Attention whose scores exceed the 128 MiB computed at once (the `long_attention_*` cases
/// of the differential suite) runs its queries a band at a time: as onnxruntime computes it,
/// within a memory limit of 256 MiB, where all the scores with their bias and softmax take
/// 400 MiB (5800 causal queries and keys) and 500 MiB (two heads of 4101 queries with a
/// boolean mask; measured on lavapipe with the bands turned off).
#[test]
fn long_attention_runs_in_bands_within_a_memory_limit() {
    let dir = tests_dir(&DIFFERENTIAL);
    let manifest = read_manifest(&dir);
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: common::cpu_kernels_from_env(),
        max_memory: Some(256 << 20),
        ..Default::default()
    })
    .unwrap();
    for name in LONG_ATTENTION {
        let entry = manifest
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not in the differential suite"));
        // One run: each takes seconds on lavapipe with the GPU kernels.
        let case = dir.join(name);
        let model = Model::load(case.join("model.onnx")).unwrap();
        let inputs: Vec<String> = model.graph.inputs.iter().map(|i| i.name.clone()).collect();
        let session = model.session(&ctx).unwrap();
        let given: Vec<(String, Value)> = inputs
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let path = case.join(format!("data_0/input_{i}.pb"));
                (n, Value::Tensor(read_tensor(&path).unwrap()))
            })
            .collect();
        let got = session
            .run_values_blocking(given)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = Value::Tensor(read_tensor(&case.join("data_0/output_0.pb")).unwrap());
        let why = compare_values(&got[0].1, &want, entry.rtol, entry.atol);
        assert!(why.is_none(), "{name}: {why:?}");
    }
}

/// The differential cases of Attention over long sequences: [`long_attention_runs_in_bands_within_a_memory_limit`]
/// runs them once (the suite's runner would run each six times, minutes on lavapipe).
const LONG_ATTENTION: [&str; 2] = ["long_attention_causal", "long_attention_gqa_mask_softcap"];

/// Every element-wise op on every dtype onnxruntime has a kernel for, on edge and random
/// values, against onnxruntime's outputs (`scripts/ort_differential.py`).
#[test]
fn elementwise_ops_match_onnxruntime() {
    run_suite(&DIFFERENTIAL);
}

fn run_suite(suite: &Suite) {
    let dir = tests_dir(suite);
    let expected_file = suite.expected;
    let manifest = read_manifest(&dir);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let expected_text = std::fs::read_to_string(root.join(expected_file)).unwrap_or_default();
    let expected: HashMap<&str, &str> = expected_text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once(' ').map_or((l, ""), |(n, r)| (n, r.trim())))
        .collect();
    let only = std::env::var("WGPU_OPS_ONNX_NODE_ONLY").ok();
    let contexts = SuiteContexts::new();

    // Per op (of the test's nodes): passed, failed as listed, skipped, not supported.
    let mut per_op: BTreeMap<String, [usize; 4]> = BTreeMap::new();
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let mut skipped: BTreeMap<String, String> = BTreeMap::new();
    let mut problems = Vec::new();
    let (mut passed, mut unsupported, mut lawful) = (0, 0, 0);
    for (name, entry) in &manifest {
        if only.as_deref().is_some_and(|o| !name.contains(o))
            || LONG_ATTENTION.contains(&name.as_str())
        {
            continue;
        }
        let outcome = run_test(&contexts, &dir.join(name), entry);
        let column = match &outcome {
            Outcome::Pass | Outcome::Lawful => 0,
            Outcome::Fail(_) => 1,
            Outcome::Skipped(_) => 2,
            Outcome::Unsupported => 3,
        };
        for op in &entry.ops {
            per_op.entry(op.clone()).or_default()[column] += 1;
        }
        match outcome {
            Outcome::Pass | Outcome::Lawful => {
                passed += 1;
                if matches!(outcome, Outcome::Lawful) {
                    lawful += 1;
                }
                if expected.contains_key(name.as_str()) {
                    problems.push(format!("{name} now passes: remove it from {expected_file}"));
                }
            }
            Outcome::Fail(why) => {
                let why = one_line(&why);
                if !expected.contains_key(name.as_str()) {
                    problems.push(format!("{name} fails: {why}"));
                }
                failures.insert(name.clone(), why);
            }
            Outcome::Skipped(why) => {
                skipped.insert(name.clone(), one_line(&why));
            }
            Outcome::Unsupported => unsupported += 1,
        }
    }

    println!(
        "{} of supported ops, per op: passed / failing (listed) / skipped",
        suite.title
    );
    for (op, [p, f, s, _]) in &per_op {
        if p + f + s > 0 {
            println!("  {op:<20} {p:>4} {f:>4} {s:>4}");
        }
    }
    let not_supported: Vec<String> = per_op
        .iter()
        .filter(|(_, [p, f, s, u])| p + f + s == 0 && *u > 0)
        .map(|(op, [.., u])| format!("{op} {u}"))
        .collect();
    println!("ops not supported (tests): {}", not_supported.join(", "));
    println!("skipped (types there is no dtype for):");
    for (name, why) in &skipped {
        println!("  {name}: {why}");
    }
    println!(
        "{} tests: {passed} passed{}, {} failing (listed with reasons in {expected_file}), {} skipped, {unsupported} with ops not supported",
        passed + failures.len() + skipped.len() + unsupported,
        match lawful {
            0 => String::new(),
            n => format!(" ({n} of random ops by their laws)"),
        },
        failures.len(),
        skipped.len()
    );
    println!(
        "runs with the tensors on the GPU replayed and checked against the planned run (all suites so far): {}",
        REPLAYED.load(std::sync::atomic::Ordering::Relaxed)
    );
    if std::env::var_os("WGPU_OPS_ONNX_NODE_BLESS").is_some() && only.is_none() {
        let mut text = format!(
            "# {} of supported ops that fail today, with the reason (see tests/onnx_node.rs).\n",
            suite.title
        );
        for (name, why) in &failures {
            text += &format!("{name} {why}\n");
        }
        std::fs::write(root.join(expected_file), text).unwrap();
        return;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
