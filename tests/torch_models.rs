//! 29 models exported from PyTorch by its two ONNX exporters (the dynamo one, PyTorch's
//! default, and the TorchScript one): a GPT-style decoder block with written-out causal
//! attention, attention through `scaled_dot_product_attention` with RMSNorm, nn's
//! Transformer encoder and decoder layers, two-layer bidirectional LSTM, GRU and RNN (the
//! dynamo exporter unrolls the RNN into 300 nodes), transposed convolution with up-sampling,
//! pixel shuffle and group and instance norms, gathers, top-k, sorts and scatters, 1-D
//! convolutions, a MobileNetV3 and a vision transformer, all at small widths with random
//! weights; and torch's control flow as the dynamo exporter writes it: `scan` as an ONNX Scan
//! (run on 37 steps where it was exported with 10), `torch.cond` as an If (both branches
//! taken), `while_loop` as a Loop; outputs whose shapes depend on values (NonZero, a boolean
//! mask's GatherND, Unique), an f16 model, and the gated delta rule of linear attention under
//! `scan`, written with matrix products and with sums (both run as LinearAttention's kernel). Fourteen were exported with dynamic axes and
//! run on other sizes than the export's, so their graphs compute shapes. The files, inputs
//! and onnxruntime 1.32's outputs are in `tests/data/torch` (written by
//! `scripts/torch_fixtures.py`, torch 2.15; the test needs no torch). Floats compare with rtol
//! 1e-3, as ONNX's backend tests compare whole models, and atol 1e-5 where those use 1e-7:
//! near-cancelling sums (values about 6e-6 in `up_down`) come out 2e-7 apart when added in
//! another order. f16 outputs: see below. Integer outputs (indices) compare exactly.

mod common;
use std::path::{Path, PathBuf};

use common::*;
use wgpu_ops::onnx::Model;
use wgpu_ops::{DType, HostTensor};

#[derive(serde::Deserialize)]
struct File {
    name: String,
    file: String,
}

#[derive(serde::Deserialize)]
struct Entry {
    name: String,
    inputs: Vec<File>,
    outputs: Vec<File>,
    ops: Vec<String>,
    symbolic: bool,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch")
}

fn manifest() -> Vec<Entry> {
    serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap()
}

fn read(file: &str) -> HostTensor {
    wgpu_ops::npy::read(&dir().join(file)).unwrap()
}

/// The entry's outputs on `ctx`, and the nodes the run computed on the host from its inputs
/// ([`wgpu_ops::Stats::host_computed_nodes`]).
fn run(ctx: &wgpu_ops::Context, entry: &Entry) -> (Vec<(String, HostTensor)>, u64) {
    let model = Model::load(dir().join(format!("{}.onnx", entry.name)))
        .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    let session = model
        .session(ctx)
        .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    let before = ctx.stats().host_computed_nodes;
    let out = session
        .run_blocking(inputs_of(entry))
        .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    (out, ctx.stats().host_computed_nodes - before)
}

#[test]
fn pytorch_exports_match_onnxruntime() {
    let manifest = manifest();
    let mut worst = (0.0f64, String::new());
    let ctx = own_ctx();
    for entry in &manifest {
        let (got, on_host) = run(&ctx, entry);
        // Computed on the host from the inputs: only what plans an op, the If's condition
        // (ReduceSum, Greater) and what NonZero and Unique read (Greater, Round); the rest
        // of every graph runs on the GPU.
        let planning = match entry.name.as_str() {
            "cond.dynamo" | "cond_else.dynamo" => 2,
            "data_dependent.dynamo" | "data_dependent.torchscript" => 3,
            _ => 0,
        };
        assert_eq!(
            on_host, planning,
            "{}: nodes computed on the host",
            entry.name
        );
        assert_eq!(got.len(), entry.outputs.len(), "{}", entry.name);
        for ((name, got), want) in got.iter().zip(&entry.outputs) {
            assert_eq!(name, &want.name, "{}", entry.name);
            let want = read(&want.file);
            let what = format!("{} output {name}", entry.name);
            let f16 = want.dtype == DType::F16;
            if f16 || matches!(want.dtype, DType::F32 | DType::F64) {
                // f16: two units in the last place, and one unit at 1 (the outputs' scale)
                // absolute: the f16 model's LayerNorm rounds its result to f16 where
                // onnxruntime may land one unit away, and Gelu carries that unit's share
                // (about 1e-4 near -2.4, where its values are near 0).
                let (rtol, atol) = if f16 {
                    (2.0 * 2f64.powi(-10), 2f64.powi(-10))
                } else {
                    (1e-3, 1e-5)
                };
                assert_close(got, &want, rtol, atol, &what);
                let (g, w) = (
                    wgpu_ops::reference::cast_host(got, DType::F64).unwrap(),
                    wgpu_ops::reference::cast_host(&want, DType::F64).unwrap(),
                );
                let (g, w) = (g.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap());
                for (g, w) in g.iter().zip(w) {
                    let excess = (g - w).abs() / (atol + rtol * w.abs());
                    if excess > worst.0 {
                        worst = (excess, what.clone());
                    }
                }
            } else {
                assert_eq!(got, &want, "{what}");
            }
        }
    }
    eprintln!(
        "largest error as a share of the tolerance: {:.3} ({})",
        worst.0, worst.1
    );
}

#[test]
fn the_fixtures_cover_both_exporters_and_computed_shapes() {
    // The manifest is what the test above runs: a regenerated one that lost its dynamic axes,
    // an exporter or a family of ops would weaken it silently.
    let manifest = manifest();
    let count = |f: &dyn Fn(&Entry) -> bool| manifest.iter().filter(|e| f(e)).count();
    assert!(count(&|e| e.name.ends_with(".dynamo")) >= 10);
    assert!(count(&|e| e.name.ends_with(".torchscript")) >= 8);
    assert!(count(&|e| e.symbolic && e.ops.iter().any(|o| o == "Shape")) >= 8);
    for op in [
        "LSTM",
        "GRU",
        "RNN",
        "LayerNormalization",
        "Softmax",
        "ConvTranspose",
        "Resize",
        "DepthToSpace",
        "InstanceNormalization",
        "TopK",
        "ScatterElements",
        "GatherElements",
        "CumSum",
        "HardSwish",
        "Gelu",
        "Scan",
        "If",
        "Loop",
        "NonZero",
        "Unique",
        "GatherND",
    ] {
        assert!(
            manifest.iter().any(|e| e.ops.iter().any(|o| o == op)),
            "no fixture uses {op}"
        );
    }
}

#[test]
fn torch_scan_cells_run_two_dispatches_per_step() {
    // torch.scan of a tanh cell over nn.Linear layers: the exporter writes each Linear as a
    // Gemm with transB = 1. As MatMuls by the weights transposed once, the input's projection
    // moves out of the loop (one product over all steps) and the state's product heads the
    // Add and Tanh: 2 dispatches per step (the scan output's Mul is the other), where the
    // Gemms gave 4.
    let ctx = own_ctx();
    let model = Model::load(dir().join("scan_cell.dynamo.onnx")).unwrap();
    let session = model.session(&ctx).unwrap();
    let steps = 300;
    let values: Vec<f32> = (0..steps * 32)
        .map(|i| (i % 17) as f32 * 0.1 - 0.8)
        .collect();
    let x = HostTensor::from_vec(vec![steps, 4, 8], &values).unwrap();
    session
        .run_blocking(vec![("input_0".into(), x.clone())])
        .unwrap();
    let before = ctx.stats().dispatches;
    let got = session.run_blocking(vec![("input_0".into(), x)]).unwrap();
    let per_step = (ctx.stats().dispatches - before) as f64 / steps as f64;
    assert!(per_step <= 2.05, "{per_step} dispatches per step");
    assert_eq!(got[1].1.shape, [steps, 4, 16]);
}

#[test]
fn torch_gated_delta_rules_run_as_the_recurrence_kernel() {
    // The gated delta rule under torch.scan, written with matrix products (the key's row times
    // the state, per-head decay and beta unsqueezed in the body, no scale) and with broadcast
    // products and sums, is recognized as LinearAttention's recurrence: its kernel runs the
    // steps, and both match onnxruntime.
    for name in ["gated_delta_matmul.dynamo", "gated_delta_sums.dynamo"] {
        let ctx = own_ctx();
        let entry = manifest().into_iter().find(|e| e.name == name).unwrap();
        let session = Model::load(dir().join(format!("{name}.onnx")))
            .unwrap()
            .session(&ctx)
            .unwrap();
        let got = session.run_blocking(inputs_of(&entry)).unwrap();
        assert_eq!(ctx.stats().scans_as_recurrences, 1, "{name}");
        for ((_, got), want) in got.iter().zip(&entry.outputs) {
            assert_close(got, &read(&want.file), 1e-3, 1e-5, name);
        }
    }
}

#[test]
fn a_torch_body_that_sums_over_another_axis_iterates() {
    // The sums form with its two sums over the last axis instead of the key axis (the axes
    // constant changed; the head sizes are equal, so the body still runs): not the recurrence.
    // It iterates, and matches the CPU interpreter.
    let name = "gated_delta_sums.dynamo";
    let entry = manifest().into_iter().find(|e| e.name == name).unwrap();
    let mut model = Model::load(dir().join(format!("{name}.onnx"))).unwrap();
    let axes = model
        .graph
        .constants
        .iter_mut()
        .find(|(_, t)| t.dtype == DType::I64 && t.to_vec::<i64>().unwrap() == [-2])
        .expect("the sums' axes");
    axes.1 = std::sync::Arc::new(HostTensor::from_vec(vec![1], &[-1i64]).unwrap());
    let graph = model.graph.clone();
    let ctx = own_ctx();
    let got = model
        .session(&ctx)
        .unwrap()
        .run_blocking(inputs_of(&entry))
        .unwrap();
    assert_eq!(ctx.stats().scans_as_recurrences, 0);
    let want =
        wgpu_ops::reference::graph::run_graph(&graph, &inputs_of(&entry), &Default::default())
            .unwrap();
    for ((_, got), want) in got.iter().zip(&want) {
        assert_close(got, want, 1e-4, 1e-5, "the changed body");
    }
}

fn inputs_of(entry: &Entry) -> Vec<(String, HostTensor)> {
    entry
        .inputs
        .iter()
        .map(|i| (i.name.clone(), read(&i.file)))
        .collect()
}
