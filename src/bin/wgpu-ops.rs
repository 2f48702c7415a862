//! The `wgpu-ops` command: runs graph files (see `docs/graph-format.md`) and ONNX models (see
//! `docs/onnx.md`) on the GPU.
//!
//! Contract: success exits 0; any error prints one `error: ...` line on stderr and exits 1
//! (usage errors exit 2); no output file is left behind by a failed run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use wgpu_ops::{graph, npy, onnx, Context, ContextOptions, Error, HostTensor, Session};

#[derive(Parser)]
#[command(
    name = "wgpu-ops",
    version,
    about = "Run tensor-op graphs on the GPU through WebGPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    Vulkan,
    Gl,
    Metal,
    Dx12,
}

#[derive(Subcommand)]
enum Command {
    /// Run GRAPH.json or MODEL.onnx and write every output as DIR/<name>.npy
    Run {
        #[arg(value_name = "GRAPH.json|MODEL.onnx")]
        graph: PathBuf,
        /// A graph input from a .npy file
        #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
        inputs: Vec<(String, PathBuf)>,
        /// Folder for the outputs (created if missing)
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[arg(long, value_enum)]
        backend: Option<Backend>,
        /// Use the first adapter whose name contains this (case-insensitive)
        #[arg(long, value_name = "SUBSTRING")]
        adapter: Option<String>,
        /// Refuse the run (before any work) if its tensors would take more GPU memory than
        /// this many bytes (default: half the host's memory on CPU adapters, none on GPUs)
        #[arg(long, value_name = "BYTES")]
        max_memory: Option<u64>,
    },
    /// Describe MODEL.onnx: opsets, inputs, outputs, ops and which of them are not supported
    Info {
        #[arg(value_name = "MODEL.onnx")]
        model: PathBuf,
    },
    /// List the adapters wgpu can see, one per line
    Adapters {
        #[arg(long, value_enum)]
        backend: Option<Backend>,
    },
}

fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE.npy, got '{s}'")),
    }
}

fn backends(b: Option<Backend>) -> Option<wgpu::Backends> {
    b.map(|b| match b {
        Backend::Vulkan => wgpu::Backends::VULKAN,
        Backend::Gl => wgpu::Backends::GL,
        Backend::Metal => wgpu::Backends::METAL,
        Backend::Dx12 => wgpu::Backends::DX12,
    })
}

/// Output names become file names: refuse anything that would land outside DIR.
fn check_output_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(Error::Graph(format!(
            "output '{name}' cannot be used as a file name"
        )));
    }
    Ok(())
}

fn run(
    graph_path: &Path,
    inputs: &[(String, PathBuf)],
    out: &Path,
    options: ContextOptions,
) -> Result<(), Error> {
    let onnx_model = graph_path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    let graph = if onnx_model {
        let model = onnx::Model::load(graph_path)?;
        model.session_check()?;
        model.graph
    } else {
        graph::json::load(graph_path)?
    };
    graph.check_outputs_distinct()?;
    for o in &graph.outputs {
        check_output_name(&o.name)?;
    }
    let mut values = Vec::with_capacity(inputs.len());
    for (name, file) in inputs {
        // Types numpy lacks travel as the bits of one it has (see `npy::as_declared`).
        let declared = graph
            .inputs
            .iter()
            .find(|i| &i.name == name)
            .and_then(|i| i.dtype);
        let t = npy::as_declared(npy::read(file)?, declared)?;
        values.push((name.clone(), t));
    }
    let ctx = Context::new_blocking(options)?;
    let session = Session::new(&ctx, graph)?;
    let outputs = session.run_blocking(values)?;
    write_outputs(out, &outputs)
}

/// Output files being written: temporary names, renamed to their final names only when all
/// are written. Dropped before `commit` (an error, or a panic unwinding), it removes every
/// file it made.
struct PartialOutputs {
    files: Vec<(PathBuf, PathBuf)>,
    committed: bool,
}

impl Drop for PartialOutputs {
    fn drop(&mut self) {
        if !self.committed {
            for (tmp, fin) in &self.files {
                let _ = std::fs::remove_file(tmp);
                let _ = std::fs::remove_file(fin);
            }
        }
    }
}

fn write_outputs(dir: &Path, outputs: &[(String, HostTensor)]) -> Result<(), Error> {
    let file_err = |p: &Path, e: std::io::Error| Error::File {
        path: p.display().to_string(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
    let mut partial = PartialOutputs {
        files: Vec::new(),
        committed: false,
    };
    for (name, t) in outputs {
        let tmp = dir.join(format!(".{name}.npy.partial"));
        partial
            .files
            .push((tmp.clone(), dir.join(format!("{name}.npy"))));
        npy::write(&tmp, t)?;
        // Lets the tests check that a panic while writing leaves no file behind.
        if std::env::var_os("WGPU_OPS_TEST_PANIC_WHILE_WRITING").is_some() {
            panic!("panic requested while writing outputs (test)");
        }
    }
    for (tmp, fin) in &partial.files {
        std::fs::rename(tmp, fin).map_err(|e| file_err(fin, e))?;
    }
    partial.committed = true;
    Ok(())
}

/// `wgpu-ops info`: what a model holds and what of it runs here.
fn info(path: &Path) -> Result<(), Error> {
    let model = onnx::Model::load(path)?;
    let mut text = String::new();
    let opsets: Vec<String> = model
        .opsets
        .iter()
        .map(|(d, v)| format!("{}:{v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    text += &format!(
        "model: {} (IR {}, opsets {}, producer '{}')\n",
        path.display(),
        model.ir_version,
        opsets.join(" "),
        wgpu_ops::error::escape(&model.producer)
    );
    let describe = |v: &graph::ValueInfo| {
        let dtype = v.dtype.map_or("?".to_string(), |d| d.name().to_string());
        let shape = v.shape.as_ref().map_or("?".to_string(), |s| {
            let dims: Vec<String> = s
                .iter()
                .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
                .collect();
            format!("[{}]", dims.join(", "))
        });
        format!("{} {dtype} {shape}", wgpu_ops::error::escape(&v.name))
    };
    for i in &model.graph.inputs {
        text += &format!("input: {}\n", describe(i));
    }
    for o in &model.graph.outputs {
        text += &format!("output: {}\n", describe(o));
    }
    text += &format!("constants: {}\n", model.graph.constants.len());
    for (op, n) in model.op_counts() {
        let mark = if graph::is_op(&op) {
            ""
        } else {
            "  (not supported)"
        };
        text += &format!("op: {} x{n}{mark}\n", wgpu_ops::error::escape(&op));
    }
    let missing = model.unsupported_ops();
    text += &if missing.is_empty() {
        "supported: yes\n".to_string()
    } else {
        format!("supported: no, {} op type(s) missing\n", missing.len())
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Error::File {
            path: "stdout".into(),
            message: e.to_string(),
        })
}

fn main() -> ExitCode {
    // Mesa's Vulkan loader prints a line of its own when XDG_RUNTIME_DIR is unset; give it a
    // private folder so that stderr holds only this program's messages.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join("wgpu-ops-runtime");
        if std::fs::create_dir_all(&dir).is_ok() {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
            }
            std::env::set_var("XDG_RUNTIME_DIR", dir);
        }
    }
    let main_thread = std::thread::current().id();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        // Printing may fail too (stderr closed or full): the exit code still says it.
        let _ = writeln!(
            std::io::stderr(),
            "error: internal error: {}",
            wgpu_ops::error::escape(&msg)
        );
        // On the main thread the panic unwinds to `main`, removing partial outputs on its way;
        // elsewhere nothing would report it, so the process ends here.
        if std::thread::current().id() != main_thread {
            std::process::exit(1);
        }
    }));
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("off")).init();

    let cli = Cli::parse();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match cli.command {
        Command::Run {
            graph,
            inputs,
            out,
            backend,
            adapter,
            max_memory,
        } => run(
            &graph,
            &inputs,
            &out,
            ContextOptions {
                backends: backends(backend),
                adapter_name: adapter,
                max_memory,
                ..Default::default()
            },
        ),
        Command::Info { model } => info(&model),
        Command::Adapters { backend } => {
            let options = ContextOptions {
                backends: backends(backend),
                ..Default::default()
            };
            let mut stdout = std::io::stdout().lock();
            pollster::block_on(wgpu_ops::list_adapters(&options))
                .iter()
                .try_for_each(|info| {
                    writeln!(
                        stdout,
                        "{} ({:?}, {:?}, {})",
                        info.name, info.backend, info.device_type, info.driver_info
                    )
                })
                .and_then(|()| stdout.flush())
                .map_err(|e| Error::File {
                    path: "stdout".into(),
                    message: e.to_string(),
                })
        }
    }));
    match result {
        // The panic hook has printed the error line.
        Err(_) => ExitCode::from(1),
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            // The error displays as one line; if stderr cannot take it, the exit code remains.
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(1)
        }
    }
}
