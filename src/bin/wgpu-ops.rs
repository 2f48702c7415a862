//! The `wgpu-ops` command: runs graph files (see `docs/graph-format.md`) and ONNX models (see
//! `docs/onnx.md`) on the GPU.
//!
//! Contract: success exits 0; any error prints one `error: ...` line on stderr and exits 1
//! (usage errors exit 2); no output file is left behind by a failed run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use wgpu_ops::error::escape;
use wgpu_ops::graph::Value;
use wgpu_ops::{graph, npy, onnx, Context, ContextOptions, Error, Map, Session};

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
    /// Run GRAPH.json or MODEL.onnx and write every output as DIR/<name>.npy (a sequence as the
    /// folder DIR/<name>/ of 0.npy, 1.npy, ...)
    Run {
        #[arg(value_name = "GRAPH.json|MODEL.onnx")]
        graph: PathBuf,
        /// A graph input from a .npy file (a sequence from a folder of 0.npy, 1.npy, ...; a map
        /// from a .json object)
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
        /// Time every dispatch on the GPU and print the time by kernel once the outputs are
        /// written (needs the adapter's timestamp queries)
        #[arg(long)]
        profile: bool,
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
    profile: bool,
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
        let decl = graph.inputs.iter().find(|i| &i.name == name);
        // Types numpy lacks travel as the bits of one it has (see `npy::as_declared`).
        let declared = decl.and_then(|i| i.dtype);
        let value = if let Some(graph::ValueKind::Map(ty)) = decl.map(|i| i.kind) {
            let text = std::fs::read_to_string(file).map_err(|e| Error::File {
                path: file.display().to_string(),
                message: e.to_string(),
            })?;
            let map = Map::from_json(&text, ty).map_err(|e| Error::File {
                path: file.display().to_string(),
                message: match e {
                    Error::InvalidInput { message, .. } => {
                        format!("input '{}' ({}): {message}", escape(name), ty.name())
                    }
                    other => other.to_string(),
                },
            })?;
            Value::Map(map)
        } else if file.is_dir() {
            let items = sequence_files(file)?
                .iter()
                .map(|f| npy::as_declared(npy::read(f)?, declared))
                .collect::<Result<_, Error>>()?;
            Value::Sequence(items)
        } else {
            match npy::read_value(file)? {
                Value::Tensor(t) => Value::Tensor(npy::as_declared(t, declared)?),
                strings => strings,
            }
        };
        values.push((name.clone(), value));
    }
    let ctx = Context::new_blocking(options)?;
    let session = Session::new(&ctx, graph)?;
    if profile {
        ctx.start_profile(2048)?;
    }
    let outputs = session.run_values_blocking(values)?;
    write_outputs(out, &outputs)?;
    if profile {
        let profile = ctx.take_profile_blocking()?;
        println!("{}", profile.table(120));
    }
    Ok(())
}

/// The files of a sequence given as a folder: `0.npy`, `1.npy`, ... and nothing else.
fn sequence_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let file_err = |e: std::io::Error| Error::File {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let mut count = 0;
    for entry in std::fs::read_dir(dir).map_err(file_err)? {
        let name = entry.map_err(file_err)?.file_name();
        let name = name.to_string_lossy();
        let index = name
            .strip_suffix(".npy")
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| name == format!("{i}.npy"));
        if index.is_none() {
            return Err(Error::File {
                path: dir.display().to_string(),
                message: format!(
                    "a sequence's folder holds its tensors as 0.npy, 1.npy, ... and nothing else, but it holds '{}'",
                    wgpu_ops::error::escape(&name)
                ),
            });
        }
        count += 1;
    }
    let files: Vec<PathBuf> = (0..count).map(|i| dir.join(format!("{i}.npy"))).collect();
    if let Some(gap) = files.iter().find(|f| !f.exists()) {
        return Err(Error::File {
            path: dir.display().to_string(),
            message: format!(
                "a sequence's tensors are numbered from 0 without gaps, but {} is missing",
                gap.display()
            ),
        });
    }
    Ok(files)
}

/// Output files being written: temporary names, renamed to their final names only when all
/// are written. Dropped before `commit` (an error, or a panic unwinding), it removes every
/// file it made.
struct PartialOutputs {
    files: Vec<(PathBuf, PathBuf)>,
    committed: bool,
}

/// Removes a file, or a folder with what it holds.
fn remove_path(p: &Path) {
    if p.is_dir() {
        let _ = std::fs::remove_dir_all(p);
    } else {
        let _ = std::fs::remove_file(p);
    }
}

impl Drop for PartialOutputs {
    fn drop(&mut self) {
        if !self.committed {
            for (tmp, fin) in &self.files {
                remove_path(tmp);
                remove_path(fin);
            }
        }
    }
}

/// Writes each output as DIR/<name>.npy; a sequence as the folder DIR/<name>/ of 0.npy,
/// 1.npy, ...; an empty optional as no file (removing DIR/<name>.npy of an earlier run).
fn write_outputs(dir: &Path, outputs: &[(String, Value)]) -> Result<(), Error> {
    let file_err = |p: &Path, e: std::io::Error| Error::File {
        path: p.display().to_string(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e))?;
    let mut partial = PartialOutputs {
        files: Vec::new(),
        committed: false,
    };
    let mut cleared = Vec::new();
    for (name, value) in outputs {
        match value {
            Value::Tensor(t) => {
                let tmp = dir.join(format!(".{name}.npy.partial"));
                partial
                    .files
                    .push((tmp.clone(), dir.join(format!("{name}.npy"))));
                npy::write(&tmp, t)?;
            }
            Value::Sequence(items) => {
                let tmp = dir.join(format!(".{name}.partial"));
                partial.files.push((tmp.clone(), dir.join(name)));
                remove_path(&tmp);
                std::fs::create_dir(&tmp).map_err(|e| file_err(&tmp, e))?;
                for (i, t) in items.iter().enumerate() {
                    npy::write(&tmp.join(format!("{i}.npy")), t)?;
                }
            }
            Value::Strings(t) => {
                let tmp = dir.join(format!(".{name}.npy.partial"));
                partial
                    .files
                    .push((tmp.clone(), dir.join(format!("{name}.npy"))));
                npy::write_strings(&tmp, t)?;
            }
            Value::Maps(m) => write_json(dir, name, &m.to_json(), &mut partial)?,
            Value::Map(m) => write_json(dir, name, &m.to_json(), &mut partial)?,
            // Nothing, and no file of an earlier run left to be taken for it.
            Value::None => cleared.push(dir.join(format!("{name}.npy"))),
        }
        // Lets the tests check that a panic while writing leaves no file behind.
        if std::env::var_os("WGPU_OPS_TEST_PANIC_WHILE_WRITING").is_some() {
            panic!("panic requested while writing outputs (test)");
        }
    }
    for (tmp, fin) in &partial.files {
        // A folder replaces an earlier run's folder of the same name.
        if tmp.is_dir() && fin.is_dir() {
            let _ = std::fs::remove_dir_all(fin);
        }
        std::fs::rename(tmp, fin).map_err(|e| file_err(fin, e))?;
    }
    for p in cleared.iter().filter(|p| p.is_file()) {
        std::fs::remove_file(p).map_err(|e| file_err(p, e))?;
    }
    partial.committed = true;
    Ok(())
}

/// Writes `text` as the output DIR/<name>.json (under a temporary name until committed).
fn write_json(
    dir: &Path,
    name: &str,
    text: &str,
    partial: &mut PartialOutputs,
) -> Result<(), Error> {
    let tmp = dir.join(format!(".{name}.json.partial"));
    partial
        .files
        .push((tmp.clone(), dir.join(format!("{name}.json"))));
    std::fs::write(&tmp, text).map_err(|e| Error::File {
        path: tmp.display().to_string(),
        message: e.to_string(),
    })
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
        if let graph::ValueKind::Map(t) = v.kind {
            return format!("{} {}", wgpu_ops::error::escape(&v.name), t.name());
        }
        let (kind, dtype) = match v.kind {
            graph::ValueKind::Strings => ("", "string".to_string()),
            graph::ValueKind::Maps => ("sequence of maps to ", "f32".to_string()),
            _ => ("", dtype),
        };
        let kind = match v.kind {
            graph::ValueKind::Tensor
            | graph::ValueKind::Strings
            | graph::ValueKind::Maps
            | graph::ValueKind::Map(_) => kind,
            graph::ValueKind::Sequence => "sequence of ",
            graph::ValueKind::OptionalTensor => "optional ",
            graph::ValueKind::OptionalSequence => "optional sequence of ",
        };
        format!("{} {kind}{dtype} {shape}", wgpu_ops::error::escape(&v.name))
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
            profile,
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
            profile,
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
