//! A fuzzer of the `wgpu-ops` command, run by CI with fixed seeds and a bounded budget.
//!
//! Classes of runs: random valid graphs, mutations of them (JSON values replaced, removed,
//! duplicated), broken `.npy` inputs, random command lines, resource bombs (deeply nested
//! or long Scans, huge shapes and ranks), mutated ONNX models, and map ops on JSON map files. The contract every run must keep (docs/graph-format.md):
//! - exit 0 with every output written and equal to the CPU reference interpreter's;
//! - or exit 1 with exactly one `error: ` line on stderr and no file left in the output folder
//!   (for valid graphs, only when the reference refuses the graph too, or a device limit is
//!   named);
//! - or, for command lines clap refuses, exit 2;
//! - never a panic message, an abort, a signal, or a run past its time limit.
//!
//! `tests/fuzz-regressions/*.json` holds every input that once broke the contract; they run
//! first, every time. Runs take `--max-memory 4 GiB`, so the outcomes do not depend on the
//! machine's memory. `WGPU_OPS_FUZZ_RUNS` (default 60 per class) and `WGPU_OPS_FUZZ_SEED`
//! change the budget and the seed for longer runs by hand.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Rng;
use serde_json::{json, Value};
use wgpu_ops::{npy, DType, HostTensor};

/// Cases drawn from the shared splitmix64 generator.
trait Draw {
    fn range(&mut self, lo: i64, hi: i64) -> i64;
    fn chance(&mut self, percent: u64) -> bool;
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T;
}

impl Draw for Rng {
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// What a run of the command gave.
struct Outcome {
    code: Option<i32>,
    stderr: String,
    timed_out: bool,
}

const TIME_LIMIT: Duration = Duration::from_secs(60);

/// GPU memory a fuzzed run may take (`--max-memory`): 4 GiB.
const FUZZ_MAX_MEMORY: u64 = 4 << 30;

fn run_command(args: &[String]) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
        .args(args)
        .env_remove("WGPU_ADAPTER_NAME")
        .env_remove("WGPU_BACKEND")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the wgpu-ops binary runs");
    let started = Instant::now();
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break (Some(status), false);
        }
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            break (child.wait().ok(), true);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Outcome {
        code: status.and_then(|s| s.code()),
        stderr: reader.join().unwrap_or_default(),
        timed_out,
    }
}

/// One case: a graph file (or raw text), input files (or raw bytes), extra arguments.
struct Case {
    graph: String,
    inputs: Vec<(String, Vec<u8>)>,
    /// Replaces the standard command line when set (the command-line class).
    args: Option<Vec<String>>,
    /// Check outputs against the CPU reference when the run succeeds.
    check_values: bool,
    /// A valid graph: an `error:` is accepted only if the reference refuses it too or a
    /// device limit is named.
    valid: bool,
    /// An ONNX model's bytes, run instead of the graph file when set.
    model: Option<Vec<u8>>,
}

impl Case {
    /// A graph run with the standard command line, its outputs checked against the reference.
    fn graph(graph: String, inputs: Vec<(String, Vec<u8>)>, valid: bool) -> Case {
        Case {
            graph,
            inputs,
            args: None,
            check_values: true,
            valid,
            model: None,
        }
    }
}

#[derive(Default)]
struct Tally {
    runs: u32,
    ok_checked: u32,
    ok_unchecked: u32,
    refused: u32,
    usage: u32,
}

fn hosts_equal(a: &HostTensor, b: &HostTensor) -> bool {
    a.dtype == b.dtype && a.shape == b.shape && a.data == b.data
}

/// `got` equals `want` bit for bit, or, for f32 outputs where `tolerant`, within the ONNX
/// node tests' tolerance (rtol 1e-3, atol 1e-7; NaN where NaN): the ONNX model's Softmax
/// takes the device's `exp`, which may differ from the reference's by an ulp (seed 2026 drew
/// inputs where it does).
fn outputs_match(got: &HostTensor, want: &HostTensor, tolerant: bool) -> bool {
    if hosts_equal(got, want) {
        return true;
    }
    if !tolerant || got.dtype != DType::F32 || got.shape != want.shape {
        return false;
    }
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    g.iter().zip(&w).all(|(&g, &w)| {
        (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-7 + 1e-3 * w.abs()
    })
}

/// Runs `case` in `dir` and checks the contract; returns a description of the breach.
fn check(case: &Case, dir: &Path, tally: &mut Tally) -> Result<(), String> {
    tally.runs += 1;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let graph_path = match &case.model {
        Some(bytes) => {
            let p = dir.join("model.onnx");
            std::fs::write(&p, bytes).unwrap();
            p
        }
        None => {
            let p = dir.join("graph.json");
            std::fs::write(&p, &case.graph).unwrap();
            p
        }
    };
    let out = dir.join("out");
    let mut args = vec!["run".to_string(), graph_path.display().to_string()];
    for (name, bytes) in &case.inputs {
        let p = dir.join(format!(
            "in-{}.npy",
            case.inputs.iter().position(|(n, _)| n == name).unwrap()
        ));
        std::fs::write(&p, bytes).unwrap();
        args.push("--input".into());
        args.push(format!("{name}={}", p.display()));
    }
    args.push("--out".into());
    args.push(out.display().to_string());
    // The same memory limit on every machine: without it a resource bomb that the
    // default limit of a CPU adapter refuses runs on a large GPU (a 26 GB SpaceToBatch output
    // took past the time limit on an H100 host with 128 GB), so outcomes and run times
    // would depend on the machine.
    args.push("--max-memory".into());
    args.push(FUZZ_MAX_MEMORY.to_string());
    let args = case.args.clone().unwrap_or(args);
    let o = run_command(&args);
    if o.timed_out {
        return Err(format!("ran past {TIME_LIMIT:?}"));
    }
    if o.stderr.contains("panicked") || o.stderr.contains("internal error") {
        return Err(format!("a panic: {}", o.stderr));
    }
    let files: Vec<PathBuf> = std::fs::read_dir(&out)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    match o.code {
        Some(0) => {
            if !o.stderr.is_empty() {
                return Err(format!("exit 0 with stderr: {}", o.stderr));
            }
            if !case.check_values {
                tally.ok_unchecked += 1;
                return Ok(());
            }
            let graph = match &case.model {
                Some(bytes) => wgpu_ops::onnx::Model::from_bytes(bytes).map(|m| m.graph),
                None => wgpu_ops::graph::json::load(&graph_path),
            }
            .map_err(|e| format!("the command ran a graph the library cannot load: {e}"))?;
            let inputs: Vec<(String, HostTensor)> = case
                .inputs
                .iter()
                .map(|(n, b)| {
                    let mut t = npy::from_bytes(n, b).map_err(|e| e.to_string())?;
                    let declared = graph
                        .inputs
                        .iter()
                        .find(|i| &i.name == n)
                        .and_then(|i| i.dtype);
                    if declared == Some(DType::BF16) && t.dtype == DType::U16 {
                        t.dtype = DType::BF16;
                    }
                    Ok((n.clone(), t))
                })
                .collect::<Result<_, String>>()
                .map_err(|e| format!("the command read inputs the library refuses: {e}"))?;
            let want = wgpu_ops::reference::graph::run_graph(&graph, &inputs, &Default::default())
                .map_err(|e| format!("exit 0 but the reference refuses the graph: {e}"))?;
            if files.len() != graph.outputs.len() {
                return Err(format!(
                    "{} files for {} outputs",
                    files.len(),
                    graph.outputs.len()
                ));
            }
            for (o, w) in graph.outputs.iter().zip(&want) {
                let mut got = npy::read(&out.join(format!("{}.npy", o.name)))
                    .map_err(|e| format!("output {}: {e}", o.name))?;
                if w.dtype == DType::BF16 && got.dtype == DType::U16 {
                    got.dtype = DType::BF16;
                }
                if !outputs_match(&got, w, case.model.is_some()) {
                    return Err(format!(
                        "output '{}' differs from the reference: {:?} {:?} vs {:?} {:?}",
                        o.name, got.dtype, got.shape, w.dtype, w.shape
                    ));
                }
            }
            tally.ok_checked += 1;
            Ok(())
        }
        Some(1) => {
            let lines: Vec<&str> = o.stderr.lines().collect();
            if lines.len() != 1 || !lines[0].starts_with("error: ") {
                return Err(format!("exit 1 without one error line: {:?}", o.stderr));
            }
            if !files.is_empty() {
                return Err(format!("exit 1 left files behind: {files:?}"));
            }
            if case.valid {
                // Device limits are the only refusals of graphs the reference runs.
                let limit = [
                    "the device's",
                    "ranks up to",
                    "max_commands",
                    "out of memory",
                ]
                .iter()
                .any(|s| lines[0].contains(s));
                let refused = wgpu_ops::graph::json::load(&graph_path)
                    .map_err(|e| e.to_string())
                    .and_then(|g| {
                        let inputs: Vec<(String, HostTensor)> = case
                            .inputs
                            .iter()
                            .map(|(n, b)| {
                                Ok((n.clone(), npy::from_bytes(n, b).map_err(|e| e.to_string())?))
                            })
                            .collect::<Result<_, String>>()?;
                        wgpu_ops::reference::graph::run_graph(&g, &inputs, &Default::default())
                            .map_err(|e| e.to_string())
                    })
                    .is_err();
                if !limit && !refused {
                    return Err(format!(
                        "a valid graph the reference runs was refused: {}",
                        lines[0]
                    ));
                }
            }
            tally.refused += 1;
            if std::env::var_os("WGPU_OPS_FUZZ_VERBOSE").is_some() {
                println!("  exit 1: {}", lines[0]);
            }
            Ok(())
        }
        Some(2) if case.args.is_some() => {
            tally.usage += 1;
            Ok(())
        }
        other => Err(format!("exit {other:?}: {}", o.stderr)),
    }
}

fn npy_bytes(t: &HostTensor) -> Vec<u8> {
    npy::to_bytes(t)
}

const DTYPES: [&str; 13] = [
    "f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool",
];

fn random_shape(rng: &mut Rng, max_rank: u64) -> Vec<usize> {
    (0..rng.range(1, max_rank as i64))
        .map(|_| rng.range(0, 5) as usize)
        .collect()
}

fn input_tensor(rng: &mut Rng, dtype: DType, shape: &[usize]) -> HostTensor {
    let mut t = common::random_tensor(rng.next(), dtype, shape);
    if dtype == DType::Bool {
        t.data.iter_mut().for_each(|b| *b &= 1);
    }
    t
}

fn ints(values: &[i64]) -> Value {
    json!({"dtype": "i64", "shape": [values.len()], "data": values})
}

/// A random valid-looking graph over one input: a chain of data-movement ops (and integer
/// element-wise ops, and small Scans), with constants for the index inputs.
fn valid_graph(rng: &mut Rng) -> (Value, Vec<(String, Vec<u8>)>) {
    let dtype_name = *rng.pick(&DTYPES);
    let dtype = DType::from_name(dtype_name).unwrap();
    let shape = random_shape(rng, 4);
    let x = input_tensor(rng, dtype, &shape);
    let mut constants = Vec::new();
    let mut nodes = Vec::new();
    let mut cur = "x".to_string();
    let mut cur_rank = shape.len();
    for k in 0..rng.range(1, 4) {
        let out = format!("v{k}");
        let c = |name: &str| format!("c{k}_{name}");
        let node = match rng.below(7) {
            0 => {
                let m = rng.range(0, cur_rank as i64 + 1) as usize;
                let vals = |rng: &mut Rng| (0..m).map(|_| rng.range(-6, 6)).collect::<Vec<_>>();
                let (b, e) = (vals(rng), vals(rng));
                let s: Vec<i64> = (0..m).map(|_| *rng.pick(&[1, 2, -1, -2, 3])).collect();
                for (n, v) in [("b", b), ("e", e), ("s", s)] {
                    let mut cv = ints(&v);
                    cv["name"] = json!(c(n));
                    constants.push(cv);
                }
                let mask =
                    |rng: &mut Rng, p| (0..m).map(|_| i64::from(rng.chance(p))).collect::<Vec<_>>();
                let attrs = json!({"begin_mask": mask(rng, 30), "end_mask": mask(rng, 30)});
                json!({"op": "StridedSlice", "name": format!("n{k}"), "inputs": [cur, c("b"), c("e"), c("s")], "outputs": [out], "attrs": attrs})
            }
            1 => {
                let axis = rng.range(-(cur_rank as i64), cur_rank as i64 - 1);
                for (n, v) in [
                    ("b", rng.range(-4, 4)),
                    ("e", rng.range(-4, 8)),
                    ("s", *rng.pick(&[1, -1, 2])),
                ] {
                    let mut cv = ints(&[v]);
                    cv["name"] = json!(c(n));
                    constants.push(cv);
                }
                let mut cv = ints(&[axis]);
                cv["name"] = json!(c("a"));
                constants.push(cv);
                json!({"op": "Slice", "name": format!("n{k}"), "inputs": [cur, c("b"), c("e"), c("s"), c("a")], "outputs": [out]})
            }
            2 => {
                let mut perm: Vec<i64> = (0..cur_rank as i64).collect();
                for i in (1..perm.len()).rev() {
                    perm.swap(i, rng.below(i as u64 + 1) as usize);
                }
                json!({"op": "Transpose", "name": format!("n{k}"), "inputs": [cur], "outputs": [out], "attrs": {"perm": perm}})
            }
            3 => {
                let mut cv = ints(&[-1]);
                cv["name"] = json!(c("shape"));
                constants.push(cv);
                cur_rank = 1;
                json!({"op": "Reshape", "name": format!("n{k}"), "inputs": [cur, c("shape")], "outputs": [out]})
            }
            4 => {
                json!({"op": "Concat", "name": format!("n{k}"), "inputs": [cur.clone(), cur], "outputs": [out], "attrs": {"axis": rng.range(0, cur_rank as i64 - 1)}})
            }
            5 if cur_rank >= 2 => {
                let b = rng.range(1, 2);
                let block: Vec<i64> = (0..cur_rank).map(|i| if i == 0 { 1 } else { b }).collect();
                let pads: Vec<i64> = (0..cur_rank)
                    .map(|i| if i == 0 { 0 } else { rng.range(0, 1) })
                    .collect();
                for (n, v) in [("block", block), ("pb", pads.clone()), ("pe", pads)] {
                    let mut cv = ints(&v);
                    cv["name"] = json!(c(n));
                    constants.push(cv);
                }
                json!({"op": "SpaceToBatch", "name": format!("n{k}"), "inputs": [cur, c("block"), c("pb"), c("pe")], "outputs": [out]})
            }
            _ => {
                let op = if ["i32", "u32"].contains(&dtype_name) {
                    *rng.pick(&["Add", "Sub", "Mul", "Max", "Min"])
                } else {
                    "Identity"
                };
                if op == "Identity" {
                    json!({"op": "Identity", "name": format!("n{k}"), "inputs": [cur], "outputs": [out]})
                } else {
                    json!({"op": op, "name": format!("n{k}"), "inputs": [cur.clone(), cur], "outputs": [out]})
                }
            }
        };
        nodes.push(node);
        cur = out;
    }
    // Sometimes a small Scan over the result's first axis, carrying nothing but the elements.
    if rng.chance(25) && cur_rank >= 1 {
        let body = json!({
            "inputs": [{"name": "e"}],
            "nodes": [{"op": "Identity", "name": "id", "inputs": ["e"], "outputs": ["f"]}],
            "outputs": ["f"]
        });
        nodes.push(
            json!({"op": "Scan", "name": "scan", "inputs": [cur], "outputs": ["scanned"],
            "attrs": {"body": body, "num_scan_inputs": 1}}),
        );
        cur = "scanned".into();
    }
    let graph = json!({
        "inputs": [{"name": "x", "dtype": dtype_name, "shape": shape}],
        "constants": constants,
        "nodes": nodes,
        "outputs": [cur],
    });
    (graph, vec![("x".to_string(), npy_bytes(&x))])
}

/// Every JSON position (as paths of keys and indices) in `v`.
fn positions(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(path.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(json!(k));
                positions(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(json!(i));
                positions(x, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    path.iter().fold(v, |v, k| match k {
        Value::String(s) => &mut v[s.as_str()],
        Value::Number(n) => &mut v[n.as_u64().unwrap() as usize],
        _ => unreachable!(),
    })
}

fn mutate(rng: &mut Rng, graph: &mut Value) {
    for _ in 0..rng.range(1, 2) {
        let mut all = Vec::new();
        positions(graph, &mut Vec::new(), &mut all);
        // Mostly a number changed (index values, masks, shapes, data, attributes): the graph
        // still loads and reaches the ops' validation and the GPU; else anything, anywhere.
        let numbers: Vec<&Vec<Value>> = all
            .iter()
            .filter(|p| at(&mut graph.clone(), p).is_number())
            .filter(|p| p.contains(&json!("data")) || p.contains(&json!("attrs")))
            .collect();
        if !numbers.is_empty() && rng.chance(85) {
            let path = (*rng.pick(&numbers)).clone();
            let v = match rng.below(10) {
                0 => json!(i64::MAX),
                1 => json!(i64::MIN),
                2 => json!(i32::MAX),
                3 => json!(1u64 << 40),
                _ => json!(rng.range(-9, 9)),
            };
            *at(graph, &path) = v;
            continue;
        }
        let path = rng.pick(&all).clone();
        let replacement = match rng.below(14) {
            0 => json!(null),
            1 => json!(0),
            2 => json!(-1),
            3 => json!(i64::MAX),
            4 => json!(1e300),
            5 => json!(""),
            6 => json!("x\ny"),
            7 => json!([]),
            8 => json!({}),
            9 => json!([1_000_000_000_000i64]),
            10 => {
                json!(*rng
                    .pick(&["Scan", "Slice", "Reshape", "Concat", "f16", "bool", "x", "v0", "out"]))
            }
            11 => json!([0, 1, 1]),
            12 => {
                // Duplicate an array element or remove a key.
                if let (Some(last), Some(parent_path)) =
                    (path.last(), path.split_last().map(|p| p.1))
                {
                    let parent = at(graph, parent_path);
                    match (parent, last) {
                        (Value::Array(a), Value::Number(i)) => {
                            let i = i.as_u64().unwrap() as usize;
                            let item = a[i].clone();
                            a.insert(i, item);
                        }
                        (Value::Object(m), Value::String(k)) => {
                            m.remove(k);
                        }
                        _ => {}
                    }
                }
                continue;
            }
            _ => json!(rng.range(-20, 20)),
        };
        *at(graph, &path) = replacement;
    }
}

fn broken_npy(rng: &mut Rng, good: &[u8]) -> Vec<u8> {
    let mut b = good.to_vec();
    match rng.below(6) {
        0 => b.truncate(rng.below(b.len() as u64 + 1) as usize),
        1 => {
            for _ in 0..rng.range(1, 4) {
                let i = rng.below(b.len().min(80) as u64) as usize;
                b[i] = rng.next() as u8;
            }
        }
        2 => b = (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
        3 => b.extend((0..rng.range(1, 9)).map(|_| rng.next() as u8)),
        4 => {
            let text = String::from_utf8_lossy(&b).replace("'shape': (", "'shape': (99999999999, ");
            b = text.into_bytes();
        }
        _ => {
            let text = String::from_utf8_lossy(&b).replacen("'descr': '", "'descr': '>", 1);
            b = text.into_bytes();
        }
    }
    b
}

/// Scans nested `depth` deep, each over `len` elements of a [len; depth] x [2] input, with a
/// running-sum state (i32): `len^depth` body runs.
fn nested_scans(depth: usize, len: usize) -> (Value, Vec<(String, Vec<u8>)>) {
    fn body(depth: usize) -> Value {
        let row: Vec<Value> = (0..depth).map(|_| Value::Null).chain([json!(2)]).collect();
        let inner = if depth == 0 {
            json!({"op": "Add", "name": "add", "inputs": ["s", "r"], "outputs": ["n"]})
        } else {
            json!({"op": "Scan", "name": format!("scan{depth}"), "inputs": ["s", "r"], "outputs": ["n"],
                   "attrs": {"body": body(depth - 1), "num_scan_inputs": 1}})
        };
        json!({"inputs": [{"name": "s", "dtype": "i32", "shape": [2]}, {"name": "r", "dtype": "i32", "shape": row}],
               "nodes": [inner], "outputs": ["n"]})
    }
    let mut shape = vec![len; depth];
    shape.push(2);
    let n: usize = shape.iter().product();
    let x = HostTensor::from_vec(
        shape.clone(),
        &(0..n as i32).map(|i| i % 3).collect::<Vec<_>>(),
    )
    .unwrap();
    let graph = json!({
        "inputs": [{"name": "x", "dtype": "i32", "shape": shape}],
        "constants": [{"name": "zero", "dtype": "i32", "shape": [2], "data": [0, 0]}],
        "nodes": [{"op": "Scan", "name": "outer", "inputs": ["zero", "x"], "outputs": ["total"],
                   "attrs": {"body": body(depth - 1), "num_scan_inputs": 1}}],
        "outputs": ["total"]
    });
    (graph, vec![("x".into(), npy_bytes(&x))])
}

fn runs_per_class() -> u32 {
    std::env::var("WGPU_OPS_FUZZ_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

fn seed() -> u64 {
    std::env::var("WGPU_OPS_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20261123)
}

/// Runs the cases of one class, collecting breaches instead of stopping at the first.
fn run_class(name: &str, cases: impl Iterator<Item = Case>, report: &mut Vec<String>) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let mut tally = Tally::default();
    for (i, case) in cases.enumerate() {
        if let Err(breach) = check(&case, &dir.path().join(format!("{i}")), &mut tally) {
            report.push(format!(
                "{name} #{i}: {breach}\n  graph: {}",
                case.graph.chars().take(600).collect::<String>()
            ));
        }
    }
    println!(
        "{name}: {} runs: {} exit 0 checked against the reference, {} exit 0 unchecked, {} exit 1 with one error line, {} usage errors (exit 2)",
        tally.runs, tally.ok_checked, tally.ok_unchecked, tally.refused, tally.usage
    );
    tally
}

#[test]
fn the_command_keeps_its_contract_under_fuzzing() {
    let n = runs_per_class();
    let mut rng = Rng(seed());
    let mut report = Vec::new();

    // Inputs that once broke the contract.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz-regressions");
    let mut regressions: BTreeMap<String, Case> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let inputs = v["inputs"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(name, t)| {
                        let dtype = DType::from_name(t["dtype"].as_str().unwrap()).unwrap();
                        let shape: Vec<usize> = serde_json::from_value(t["shape"].clone()).unwrap();
                        let data: Vec<i64> = serde_json::from_value(t["data"].clone()).unwrap();
                        let bytes: Vec<u8> = data
                            .iter()
                            .flat_map(|&d| d.to_le_bytes()[..dtype.size()].to_vec())
                            .collect();
                        (
                            name.clone(),
                            npy_bytes(&HostTensor::from_bytes(dtype, shape, bytes).unwrap()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        regressions.insert(
            path.file_name().unwrap().to_string_lossy().into_owned(),
            Case {
                graph: v["graph"].to_string(),
                inputs,
                args: None,
                check_values: v["check_values"].as_bool().unwrap_or(true),
                valid: false,
                model: None,
            },
        );
    }
    assert!(regressions.len() >= 5, "the regression cases are missing");
    let t = run_class("regressions", regressions.into_values(), &mut report);
    assert!(t.runs >= 5);

    let valid: Vec<Case> = (0..n)
        .map(|_| {
            let (g, inputs) = valid_graph(&mut rng);
            Case::graph(g.to_string(), inputs, true)
        })
        .collect();
    let t = run_class("valid graphs", valid.into_iter(), &mut report);
    // Most valid graphs must run (the rest are index values the ops refuse).
    assert!(
        t.ok_checked * 2 >= t.runs,
        "only {} of {} valid graphs ran",
        t.ok_checked,
        t.runs
    );

    let mutated: Vec<Case> = (0..n)
        .map(|_| {
            let (mut g, inputs) = valid_graph(&mut rng);
            mutate(&mut rng, &mut g);
            Case::graph(g.to_string(), inputs, false)
        })
        .collect();
    run_class("mutated graphs", mutated.into_iter(), &mut report);

    let garbage: Vec<Case> = (0..n / 4)
        .map(|_| {
            let (g, _) = valid_graph(&mut rng);
            let mut text = g.to_string().into_bytes();
            let cut = rng.below(text.len() as u64) as usize;
            if rng.chance(50) {
                text.truncate(cut);
            } else {
                text[cut] = rng.next() as u8;
            }
            Case::graph(String::from_utf8_lossy(&text).into_owned(), vec![], false)
        })
        .collect();
    run_class("garbage JSON", garbage.into_iter(), &mut report);

    let npys: Vec<Case> = (0..n)
        .map(|_| {
            let (g, inputs) = valid_graph(&mut rng);
            let inputs = inputs
                .into_iter()
                .map(|(name, b)| (name, broken_npy(&mut rng, &b)))
                .collect();
            Case::graph(g.to_string(), inputs, false)
        })
        .collect();
    run_class("broken .npy inputs", npys.into_iter(), &mut report);

    let words = [
        "run",
        "adapters",
        "--input",
        "--out",
        "--backend",
        "vulkan",
        "metal",
        "--adapter",
        "x=",
        "=y",
        "x=/nonexistent.npy",
        "--bogus",
        "-",
        "",
        "g.json",
    ];
    let lines: Vec<Case> = (0..n / 2)
        .map(|_| {
            let args = (0..rng.range(0, 6))
                .map(|_| rng.pick(&words).to_string())
                .collect();
            Case {
                graph: "{}".into(),
                inputs: vec![],
                args: Some(args),
                check_values: false,
                valid: false,
                model: None,
            }
        })
        .collect();
    run_class("command lines", lines.into_iter(), &mut report);

    // Resource bombs: each must finish (or be refused) within the time limit.
    let mut bombs: Vec<Case> = Vec::new();
    // 25 levels is about what the JSON parser's nesting limit allows; 40 is refused by it.
    for (depth, len) in [(25, 1), (40, 1), (3, 30), (6, 4)] {
        let (g, inputs) = nested_scans(depth, len);
        bombs.push(Case {
            graph: g.to_string(),
            inputs,
            args: None,
            check_values: depth * len < 100,
            valid: true,
            model: None,
        });
    }
    let (g, inputs) = nested_scans(8, 10);
    bombs.push(Case {
        graph: g.to_string(),
        inputs,
        args: None,
        check_values: false,
        valid: false,
        model: None,
    });
    for rank in [17usize, 5000] {
        let shape = vec![1i64; rank];
        bombs.push(Case {
            graph: json!({"inputs": [{"name": "x", "dtype": "u8", "shape": [1]}],
                          "constants": [{"name": "s", "dtype": "i64", "shape": [rank], "data": shape}],
                          "nodes": [{"op": "Reshape", "name": "r", "inputs": ["x", "s"], "outputs": ["y"]},
                                    {"op": "Concat", "name": "c", "inputs": ["y", "y"], "outputs": ["z"], "attrs": {"axis": 0}}],
                          "outputs": ["z"]}).to_string(),
            inputs: vec![("x".into(), npy_bytes(&HostTensor::from_vec(vec![1], &[7u8]).unwrap()))],
            args: None,
            check_values: false,
            valid: false,
            model: None,
        });
    }
    bombs.push(Case {
        graph: json!({"constants": [{"name": "c", "dtype": "u8", "shape": [1_000_000_000_000i64, 1_000_000_000_000i64], "data": [1]}], "outputs": ["c"]}).to_string(),
        inputs: vec![],
        args: None,
        check_values: false,
        valid: false,
        model: None,
    });
    // String results far beyond the memory limit, made on the host: Expand, Tile, a
    // broadcast StringConcat, and StringSplit padding 10 000 short strings to the pieces of one
    // string of a million delimiters.
    let constant = |name: &str, values: Vec<String>| json!({"op": "StringConstant", "name": name, "outputs": [name], "attrs": {"value": values}});
    let sizes = |name: &str, v: Vec<i64>| json!({"name": name, "dtype": "i64", "shape": [v.len()], "data": v});
    let string_bombs = [
        (
            vec![sizes("n", vec![100_000, 100_000, 2])],
            vec![json!({"op": "Expand", "name": "e", "inputs": ["w", "n"], "outputs": ["y"]})],
        ),
        (
            vec![sizes("n", vec![4_000_000_000])],
            vec![json!({"op": "Tile", "name": "t", "inputs": ["w", "n"], "outputs": ["y"]})],
        ),
        (
            vec![sizes("n", vec![200_000, 1]), sizes("k", vec![200_000])],
            vec![
                json!({"op": "Expand", "name": "a", "inputs": ["w", "n"], "outputs": ["a"]}),
                json!({"op": "Expand", "name": "b", "inputs": ["w", "k"], "outputs": ["b"]}),
                json!({"op": "StringConcat", "name": "c", "inputs": ["a", "b"], "outputs": ["y"]}),
            ],
        ),
        (
            vec![sizes("n", vec![10_000])],
            vec![
                constant("long", vec![",".repeat(1_000_000)]),
                json!({"op": "Expand", "name": "s", "inputs": ["w", "n"], "outputs": ["short"]}),
                json!({"op": "Concat", "name": "j", "inputs": ["long", "short"], "outputs": ["j"], "attrs": {"axis": 0}}),
                json!({"op": "StringSplit", "name": "p", "inputs": ["j"], "outputs": ["y"], "attrs": {"delimiter": ","}}),
            ],
        ),
    ];
    for (constants, nodes) in string_bombs {
        let mut nodes = nodes;
        nodes.push(constant("w", vec!["ab".into()]));
        bombs.push(Case {
            graph: json!({"constants": constants, "nodes": nodes, "outputs": ["y"]}).to_string(),
            inputs: vec![],
            args: None,
            check_values: false,
            valid: false,
            model: None,
        });
    }
    run_class("resource bombs", bombs.into_iter(), &mut report);

    // Graphs of the random ops (every one, Dropout in training mode), mutated: the contract
    // only, since the reference draws no random numbers.
    let random_base = random_graph();
    let x = npy_bytes(&input_tensor(&mut rng, DType::F32, &[2, 3]));
    let random: Vec<Case> = std::iter::once(random_base.clone())
        .chain((0..n).map(|_| {
            let mut g = random_base.clone();
            mutate(&mut rng, &mut g);
            g
        }))
        .map(|g| Case {
            graph: g.to_string(),
            inputs: vec![("x".into(), x.clone())],
            args: None,
            check_values: false,
            valid: false,
            model: None,
        })
        .collect();
    let t = run_class(
        "mutated graphs of random ops",
        random.into_iter(),
        &mut report,
    );
    assert!(
        t.ok_unchecked >= 1,
        "the unmutated random graph did not run"
    );

    // ONNX models: a small valid model, then its protobuf bytes flipped, cut, grown and
    // spliced (the loader must refuse or run each, never panic).
    let base = onnx_model(false);
    let x = npy_bytes(&input_tensor(&mut rng, DType::F32, &[2, 3]));
    let onnx: Vec<Case> = std::iter::once(base.clone())
        .chain((0..n).map(|_| mutate_bytes(&mut rng, &base)))
        .map(|bytes| Case {
            graph: String::new(),
            inputs: vec![("x".into(), x.clone())],
            args: None,
            check_values: true,
            valid: false,
            model: Some(bytes),
        })
        .collect();
    let t = run_class("mutated ONNX models", onnx.into_iter(), &mut report);
    assert!(t.ok_checked >= 1, "the unmutated ONNX model did not run");
    // The same with string tensors (a string initializer, labels gathered at a GPU ArgMax, the
    // string ops): the contract only, as the reference computes no strings.
    let base = onnx_model(true);
    let strings: Vec<Case> = std::iter::once(base.clone())
        .chain((0..n).map(|_| mutate_bytes(&mut rng, &base)))
        .map(|bytes| Case {
            graph: String::new(),
            inputs: vec![("x".into(), x.clone())],
            args: None,
            check_values: false,
            valid: false,
            model: Some(bytes),
        })
        .collect();
    let t = run_class(
        "mutated ONNX models of strings",
        strings.into_iter(),
        &mut report,
    );
    assert!(
        t.ok_unchecked >= 1,
        "the unmutated ONNX model of strings did not run"
    );

    // Maps: graphs of DictVectorizer and CastMap (attributes drawn) on JSON map files, whole
    // or with bytes flipped and cut; the contract only, as the reference computes no maps.
    let maps: Vec<Case> = (0..n)
        .map(|k| {
            let (graph, text) = map_case(&mut rng);
            let mut bytes = text.into_bytes();
            if k > 0 && rng.chance(50) {
                let cut = rng.below(bytes.len() as u64) as usize;
                match rng.chance(50) {
                    true => bytes.truncate(cut),
                    false => bytes[cut] = rng.next() as u8,
                }
            }
            Case {
                graph: graph.to_string(),
                inputs: vec![("x".into(), bytes)],
                args: None,
                check_values: false,
                valid: false,
                model: None,
            }
        })
        .collect();
    let t = run_class("map inputs", maps.into_iter(), &mut report);
    assert!(t.ok_unchecked >= 1, "no map graph ran");

    assert!(
        report.is_empty(),
        "{} breaches of the contract:\n{}",
        report.len(),
        report.join("\n")
    );
}

/// A graph of one DictVectorizer or CastMap on a map input `x` of drawn types, attributes
/// drawn from valid and invalid values, and a JSON map file for it.
fn map_case(rng: &mut Rng) -> (Value, String) {
    let int_keys = rng.chance(50);
    let values = *rng.pick(&["f32", "f64", "i64", "string"]);
    let keys: Vec<i64> = (0..rng.range(0, 6)).map(|_| rng.range(-3, 12)).collect();
    let key = |k: i64| match int_keys {
        true => k.to_string(),
        false => format!("k{k}"),
    };
    let value = |rng: &mut Rng| match values {
        "string" => json!(*rng.pick(&["1.5", " 7 ", "x", "", "-2e3", "nan"])),
        "i64" => json!(rng.range(-9, 9)),
        _ => json!(*rng.pick(&[1.5, -0.25, 3e38, 0.0])),
    };
    let mut map = serde_json::Map::new();
    for k in &keys {
        map.insert(key(*k), value(rng));
    }
    let node = if rng.chance(50) {
        let vocabulary: Vec<i64> = (0..rng.range(0, 5)).map(|_| rng.range(-2, 12)).collect();
        let attrs = match (int_keys, rng.chance(90)) {
            (true, true) | (false, false) => json!({"int64_vocabulary": vocabulary}),
            _ => {
                json!({"string_vocabulary": vocabulary.iter().map(|&k| format!("k{k}")).collect::<Vec<_>>()})
            }
        };
        json!({"op": "ai.onnx.ml.DictVectorizer", "name": "dv", "inputs": ["x"], "outputs": ["y"], "attrs": attrs})
    } else {
        let attrs = json!({
            "cast_to": *rng.pick(&["TO_FLOAT", "TO_INT64", "TO_STRING", "TO_BOOL"]),
            "map_form": *rng.pick(&["DENSE", "SPARSE", "SPARSE", "COO"]),
            "max_map": *rng.pick(&[1i64, 4, 13, 0, -1, 1 << 40]),
        });
        json!({"op": "ai.onnx.ml.CastMap", "name": "cm", "inputs": ["x"], "outputs": ["y"], "attrs": attrs})
    };
    let graph = json!({
        "inputs": [{"name": "x", "kind": "map", "keys": if int_keys { "i64" } else { "string" }, "values": values}],
        "nodes": [node],
        "outputs": ["y"]
    });
    (graph, Value::Object(map).to_string())
}

/// A small ONNX model: Mul by an initializer, Add, ReduceSum (axes attribute), Softmax, a
/// Gather by constant indices and a Cast, with two outputs; with `strings`, also a string
/// initializer gathered at an ArgMax of the input, StringConcat, StringSplit, Equal,
/// RegexFullMatch and a Cast of the input to strings, with their outputs.
fn onnx_model(strings: bool) -> Vec<u8> {
    use prost::Message;
    use wgpu_ops::onnx::proto::{
        attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension,
        tensor_shape_proto::Dimension, type_proto, AttributeProto, GraphProto, ModelProto,
        NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };
    let value = |name: &str, elem: DataType, dims: &[i64]| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let node = |op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>| NodeProto {
        op_type: Some(op.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    };
    let ints = |name: &str, v: Vec<i64>| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v,
        ..Default::default()
    };
    let int = |name: &str, v: i64| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    };
    let mut graph = GraphProto {
        node: vec![
            node("Mul", &["x", "w"], &["m"], vec![]),
            node("Add", &["m", "x"], &["a"], vec![]),
            node(
                "ReduceSum",
                &["a"],
                &["r"],
                vec![ints("axes", vec![1]), int("keepdims", 0)],
            ),
            node("Softmax", &["r"], &["y"], vec![int("axis", 0)]),
            node("Gather", &["x", "idx"], &["g"], vec![int("axis", 1)]),
            node(
                "Cast",
                &["g"],
                &["z"],
                vec![int("to", DataType::Int64 as i64)],
            ),
        ],
        initializer: vec![
            TensorProto {
                name: Some("w".into()),
                dims: vec![3],
                data_type: Some(DataType::Float as i32),
                float_data: vec![0.5, -1.0, 2.0],
                ..Default::default()
            },
            TensorProto {
                name: Some("idx".into()),
                dims: vec![2],
                data_type: Some(DataType::Int64 as i32),
                int64_data: vec![2, -3],
                ..Default::default()
            },
        ],
        input: vec![value("x", DataType::Float, &[2, 3])],
        output: vec![
            value("y", DataType::Float, &[2]),
            value("z", DataType::Int64, &[2, 2]),
        ],
        ..Default::default()
    };
    if strings {
        graph.initializer.push(TensorProto {
            name: Some("labels".into()),
            dims: vec![3],
            data_type: Some(DataType::String as i32),
            string_data: vec![b"cat".to_vec(), "dög".into(), Vec::new()],
            ..Default::default()
        });
        let text = |name: &str, v: &str| AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::String as i32),
            s: Some(v.as_bytes().to_vec()),
            ..Default::default()
        };
        graph.node.extend([
            node(
                "ArgMax",
                &["x"],
                &["best"],
                vec![int("axis", 1), int("keepdims", 0)],
            ),
            node("Gather", &["labels", "best"], &["names"], vec![]),
            node("StringConcat", &["names", "names"], &["twice"], vec![]),
            node(
                "StringSplit",
                &["twice"],
                &["parts", "counts"],
                vec![text("delimiter", "g")],
            ),
            node("Equal", &["names", "twice"], &["same"], vec![]),
            node(
                "RegexFullMatch",
                &["twice"],
                &["matched"],
                vec![text("pattern", "d.*")],
            ),
            node(
                "Cast",
                &["x"],
                &["xs"],
                vec![int("to", DataType::String as i64)],
            ),
        ]);
        graph.output.extend([
            value("parts", DataType::String, &[2, 3]),
            value("counts", DataType::Int64, &[2]),
            value("same", DataType::Bool, &[2]),
            value("matched", DataType::Bool, &[2]),
            value("xs", DataType::String, &[2, 3]),
        ]);
    }
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            // The string ops are opset 20's.
            version: Some(if strings { 20 } else { 13 }),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `bytes` with a few bytes flipped, a cut, random bytes inserted, or a stretch duplicated.
fn mutate_bytes(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for _ in 0..rng.range(1, 3) {
        let at = rng.below(b.len().max(1) as u64) as usize;
        match rng.range(0, 3) {
            0 => b[at] ^= 1 << rng.range(0, 7),
            1 => b[at] = rng.next() as u8,
            2 => b.truncate(at.max(1)),
            _ => {
                let len = rng.range(1, 24) as usize;
                let end = (at + len).min(b.len());
                let piece = b[at..end].to_vec();
                b.splice(at..at, piece);
            }
        }
    }
    b
}

/// A graph of every random op on an f32 input `x` [2, 3]: RandomUniform, RandomNormal (f16),
/// their Like forms, Bernoulli of a Sigmoid, Multinomial of `x`, and Dropout in training mode.
fn random_graph() -> Value {
    json!({
        "inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}],
        "constants": [
            {"name": "ratio", "dtype": "f32", "shape": [], "data": [0.5]},
            {"name": "training", "dtype": "bool", "shape": [], "data": [true]}
        ],
        "nodes": [
            {"op": "RandomUniform", "name": "u", "outputs": ["u"],
             "attrs": {"shape": [4, 5], "low": -1.0, "high": 2.0, "seed": 3.0}},
            {"op": "RandomNormal", "name": "z", "outputs": ["z"],
             "attrs": {"shape": [3], "mean": 1.0, "scale": 2.0, "dtype": "f16"}},
            {"op": "RandomUniformLike", "name": "ul", "inputs": ["x"], "outputs": ["ul"],
             "attrs": {"seed": 1.0}},
            {"op": "RandomNormalLike", "name": "zl", "inputs": ["x"], "outputs": ["zl"]},
            {"op": "Sigmoid", "name": "p", "inputs": ["x"], "outputs": ["p"]},
            {"op": "Bernoulli", "name": "b", "inputs": ["p"], "outputs": ["b"],
             "attrs": {"dtype": "i32", "seed": 2.0}},
            {"op": "Multinomial", "name": "m", "inputs": ["x"], "outputs": ["m"],
             "attrs": {"sample_size": 4, "dtype": "i64"}},
            {"op": "Dropout", "name": "d", "inputs": ["x", "ratio", "training"],
             "outputs": ["d", "mask"], "attrs": {"seed": 5.0}}
        ],
        "outputs": ["u", "z", "ul", "zl", "b", "m", "d", "mask"]
    })
}
