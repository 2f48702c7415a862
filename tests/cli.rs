//! The `wgpu-ops` command end to end, per docs/graph-format.md: graphs run on .npy files;
//! every error exits 1 with one `error:` line on stderr and leaves no output file.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::json;
use wgpu_ops::{npy, reference, DType, HostTensor, Slice, StridedSlice};

fn wgpu_ops(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
        .args(args)
        // Unset, the program must still keep stderr to its own line (Mesa would add one).
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WGPU_ADAPTER_NAME")
        .env_remove("WGPU_BACKEND")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write_json(dir: &Path, name: &str, v: &serde_json::Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p.display().to_string()
}

fn save(dir: &Path, name: &str, t: &HostTensor) -> String {
    let p = dir.join(name);
    npy::write(&p, t).unwrap();
    p.display().to_string()
}

#[test]
fn runs_a_graph_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = common::random_tensor(1, DType::F32, &[4, 5, 6]);
    let b = common::random_tensor(2, DType::BF16, &[7, 3]);
    let mut b_as_u16 = b.clone();
    b_as_u16.dtype = DType::U16;
    npy::write(
        &d.join("stop.npy"),
        &HostTensor::from_vec(vec![2], &[i32::MIN, 1]).unwrap(),
    )
    .unwrap();
    let graph = json!({
        "inputs": [{"name": "x", "dtype": "f32", "shape": [null, 5, 6]},
                   {"name": "b", "dtype": "bf16", "shape": [7, 3]}],
        "constants": [
            {"name": "begin", "dtype": "i64", "shape": [3], "data": [-1, 0, 1]},
            {"name": "end", "dtype": "i64", "shape": [3], "data": [0, 0, 9]},
            {"name": "stride", "dtype": "i32", "shape": [3], "data": [-1, 1, 2]},
            {"name": "start", "dtype": "u8", "shape": [2], "data": [5, 2]},
            {"name": "stop", "npy": "stop.npy"},
            {"name": "step", "dtype": "i16", "shape": [2], "data": [-2, -1]},
            {"name": "axes", "dtype": "i64", "shape": [2], "data": [0, -1]}
        ],
        "nodes": [
            {"op": "Slice", "name": "second", "inputs": ["y", "start", "stop", "step", "axes"], "outputs": ["z"]},
            {"op": "StridedSlice", "name": "first", "inputs": ["x", "begin", "end", "stride"], "outputs": ["y"],
             "attrs": {"begin_mask": [0, 1], "end_mask": [1, 1, 0], "new_axis_mask": [], "shrink_axis_mask": [0], "ellipsis_mask": [0, 0, 0]}},
            {"op": "Slice", "name": "bs", "inputs": ["b", "start", "stop", "step", ""], "outputs": ["b2"]}
        ],
        "outputs": ["z", {"name": "b2", "dtype": "bf16", "shape": [3, 1]}, "y"]
    });
    let g = write_json(d, "graph.json", &graph);
    let xs = save(d, "x.npy", &x);
    let bs = save(d, "b.npy", &b_as_u16);
    let out = d.join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &g,
        "--input",
        &format!("x={xs}"),
        "--input",
        &format!("b={bs}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));

    let ss = StridedSlice::new([-1, 0, 1], [0, 0, 9])
        .stride([-1, 1, 2])
        .begin_mask([0, 1])
        .end_mask([1, 1, 0]);
    let y = reference::strided_slice(&x, &ss).unwrap();
    let z = reference::slice(
        &y,
        &Slice::new([5u8, 2], [i32::MIN, 1], [-2i16, -1]).axes([0, -1]),
    )
    .unwrap();
    let mut b2 = reference::slice(&b, &Slice::new([5u8, 2], [i32::MIN, 1], [-2i16, -1])).unwrap();
    assert_eq!(npy::read(&out.join("y.npy")).unwrap(), y);
    assert_eq!(npy::read(&out.join("z.npy")).unwrap(), z);
    b2.dtype = DType::U16; // bf16 comes back as <u2 raw bits
    assert_eq!(npy::read(&out.join("b2.npy")).unwrap(), b2);
    let mut names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b2.npy", "y.npy", "z.npy"]);
}

// `--profile` prints the run's GPU time by kernel after writing the outputs: a header, a line
// per kernel (here the MatMul and the reduction among them) and the total; without it, `run`
// prints nothing.
#[test]
fn profile_prints_the_time_by_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let graph = json!({
        "inputs": [{"name": "a", "dtype": "f32", "shape": [8, 300]},
                   {"name": "w", "dtype": "f32", "shape": [300, 5]}],
        "constants": [{"name": "axes", "dtype": "i64", "shape": [1], "data": [1]}],
        "nodes": [
            {"op": "MatMul", "name": "mm", "inputs": ["a", "w"], "outputs": ["p"]},
            {"op": "ReduceSum", "name": "sum", "inputs": ["p", "axes"], "outputs": ["s"]}
        ],
        "outputs": ["s"]
    });
    let g = write_json(d, "graph.json", &graph);
    let a = save(d, "a.npy", &common::random_tensor(1, DType::F32, &[8, 300]));
    let w = save(d, "w.npy", &common::random_tensor(2, DType::F32, &[300, 5]));
    let out = d.join("out");
    let args = |profile: bool| {
        let mut v = vec![
            "run".to_string(),
            g.clone(),
            "--input".into(),
            format!("a={a}"),
            "--input".into(),
            format!("w={w}"),
            "--out".into(),
            out.display().to_string(),
        ];
        if profile {
            v.push("--profile".into());
        }
        v
    };
    let run = |profile: bool| {
        let v = args(profile);
        wgpu_ops(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    assert_eq!(run(false), (0, String::new(), String::new()));
    let (code, stdout, stderr) = run(true);
    if code == 1 && stderr.contains("TIMESTAMP_QUERY") {
        // An adapter without timestamp queries: refused in one line.
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        return;
    }
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].ends_with("us  share dispatches  kernel"),
        "{stdout}"
    );
    assert!(lines.last().unwrap().contains(" in all"), "{stdout}");
    for file in ["matmul.wgsl", "reduce.wgsl"] {
        assert!(lines.iter().any(|l| l.contains(file)), "{stdout}");
    }
    assert!(out.join("s.npy").exists());
}

#[test]
fn lists_adapters() {
    let (code, out, err) = wgpu_ops(&["adapters"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(!out.trim().is_empty(), "no adapter listed");
}

fn simple_graph(node: serde_json::Value) -> serde_json::Value {
    json!({
        "inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}],
        "constants": [
            {"name": "b", "dtype": "i64", "shape": [2], "data": [0, 0]},
            {"name": "e", "dtype": "i64", "shape": [2], "data": [1, 3]},
            {"name": "zero", "dtype": "i64", "shape": [2], "data": [1, 0]}
        ],
        "nodes": [node],
        "outputs": ["y"]
    })
}

fn ss_node(inputs: &[&str]) -> serde_json::Value {
    json!({"op": "StridedSlice", "name": "n", "inputs": inputs, "outputs": ["y"]})
}

#[test]
fn every_error_exits_1_with_one_line_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = save(d, "x.npy", &common::random_tensor(3, DType::F32, &[2, 3]));
    let x_i32 = save(d, "xi.npy", &common::random_tensor(3, DType::I32, &[2, 3]));
    let x_big = save(d, "xb.npy", &common::random_tensor(3, DType::F32, &[2, 4]));
    std::fs::write(d.join("junk.npy"), b"junk").unwrap();
    let junk = d.join("junk.npy").display().to_string();
    let good = simple_graph(ss_node(&["x", "b", "e"]));

    let cases: Vec<(&str, serde_json::Value, Vec<String>, &str)> = vec![
        (
            "unknown op",
            simple_graph(
                json!({"op": "Frobnicate", "name": "n", "inputs": ["x"], "outputs": ["y"]}),
            ),
            vec![format!("x={x}")],
            "unknown op 'Frobnicate'",
        ),
        (
            "op rule",
            simple_graph(ss_node(&["x", "b", "e", "zero"])),
            vec![format!("x={x}")],
            "node 'n': StridedSlice: stride[1] is 0; strides must be non-zero",
        ),
        (
            "unknown name",
            simple_graph(ss_node(&["x", "b", "nope"])),
            vec![format!("x={x}")],
            "input 'nope' is not",
        ),
        (
            "input count",
            simple_graph(ss_node(&["x", "b"])),
            vec![format!("x={x}")],
            "StridedSlice takes 3 to 4 inputs but 2 are given",
        ),
        (
            "unknown attr",
            simple_graph(
                json!({"op": "StridedSlice", "name": "n", "inputs": ["x", "b", "e"], "outputs": ["y"], "attrs": {"begin_maks": [1]}}),
            ),
            vec![format!("x={x}")],
            "no attribute 'begin_maks'",
        ),
        (
            "produced twice",
            json!({"inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}], "constants": [{"name": "x", "dtype": "i64", "shape": [1], "data": [0]}], "nodes": [], "outputs": ["x"]}),
            vec![format!("x={x}")],
            "'x' is produced more than once",
        ),
        (
            "cycle",
            json!({"inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}], "constants": [{"name": "b", "dtype": "i64", "shape": [1], "data": [0]}],
            "nodes": [{"op": "Slice", "name": "p", "inputs": ["q_out", "b", "b", "b"], "outputs": ["p_out"]},
                      {"op": "Slice", "name": "q", "inputs": ["p_out", "b", "b", "b"], "outputs": ["q_out"]}], "outputs": ["p_out"]}),
            vec![format!("x={x}")],
            "cycle",
        ),
        (
            "index computed out of range",
            json!({"inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}],
            "constants": [{"name": "seven", "dtype": "i64", "shape": [], "data": [7]}],
            "nodes": [{"op": "ArgMax", "name": "best", "inputs": ["x"], "outputs": ["m"], "attrs": {"axis": 1, "keepdims": 0}},
                      {"op": "Add", "name": "past", "inputs": ["m", "seven"], "outputs": ["at"]},
                      {"op": "Gather", "name": "pick", "inputs": ["x", "at"], "outputs": ["y"], "attrs": {"axis": 1}}],
            "outputs": ["y"]}),
            vec![format!("x={x}")],
            "read on the GPU) is out of range for axis 1 of size 3",
        ),
        (
            "input dtype",
            good.clone(),
            vec![format!("x={x_i32}")],
            "input 'x' is declared f32 but is i32",
        ),
        (
            "input shape",
            good.clone(),
            vec![format!("x={x_big}")],
            "input 'x' is declared with shape [2, 3] but has shape [2, 4]",
        ),
        (
            "missing input",
            good.clone(),
            vec![],
            "input 'x' is not given",
        ),
        (
            "unknown input",
            good.clone(),
            vec![format!("x={x}"), format!("w={x}")],
            "'w' is not a graph input",
        ),
        (
            "bad npy",
            good.clone(),
            vec![format!("x={junk}")],
            "not a valid .npy file",
        ),
        (
            "missing npy",
            good.clone(),
            vec![format!("x={}/none.npy", d.display())],
            "none.npy",
        ),
        (
            "output check",
            json!({"inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}], "constants": [{"name": "b", "dtype": "i64", "shape": [2], "data": [0, 0]}, {"name": "e", "dtype": "i64", "shape": [2], "data": [1, 3]}],
            "nodes": [ss_node(&["x", "b", "e"])], "outputs": [{"name": "y", "dtype": "f32", "shape": [2, 3]}]}),
            vec![format!("x={x}")],
            "output 'y' is declared with shape [2, 3] but has shape [1, 3]",
        ),
        (
            "output name",
            json!({"inputs": [{"name": "../x", "dtype": "f32", "shape": [2, 3]}], "outputs": ["../x"]}),
            vec![format!("../x={x}")],
            "cannot be used as a file name",
        ),
        (
            "bad dtype",
            json!({"inputs": [{"name": "x", "dtype": "float", "shape": [2, 3]}], "outputs": ["x"]}),
            vec![format!("x={x}")],
            "unknown dtype 'float'",
        ),
        (
            "bad constant",
            json!({"constants": [{"name": "c", "dtype": "u8", "shape": [2], "data": [1, 300]}], "outputs": ["c"]}),
            vec![],
            "data[1] = 300 is not a valid u8",
        ),
        (
            "invalid json",
            json!("not a graph"),
            vec![],
            "the graph must be a JSON object",
        ),
        (
            // Names are escaped: a newline in a node name does not split the error line.
            "newline in a name",
            simple_graph(ss_node(&["x", "b", "e", "zero"]))
                .as_object()
                .map(|g| {
                    let mut g = g.clone();
                    g["nodes"][0]["name"] = json!("two\nlines");
                    serde_json::Value::Object(g)
                })
                .unwrap(),
            vec![format!("x={x}")],
            "node 'two\\nlines': StridedSlice: stride[1] is 0",
        ),
        (
            // Refused before any work: the second file would overwrite the first.
            "output listed twice",
            {
                let mut g = good.clone();
                g["outputs"] = json!(["y", "y"]);
                g
            },
            vec![format!("x={x}")],
            "output 'y' is listed twice",
        ),
    ];
    for (what, graph, inputs, expected) in cases {
        let g = write_json(d, "g.json", &graph);
        let out = d.join(format!("out-{}", what.replace(' ', "-")));
        let mut args = vec!["run".to_string(), g];
        for i in &inputs {
            args.extend(["--input".to_string(), i.clone()]);
        }
        args.extend(["--out".to_string(), out.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = wgpu_ops(&args);
        assert_eq!(code, 1, "{what}: {stderr}");
        assert_eq!(stdout, "", "{what}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: {stderr}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(expected),
            "{what}: {stderr}"
        );
        assert!(
            !out.exists() || std::fs::read_dir(&out).unwrap().next().is_none(),
            "{what}: output left behind"
        );
    }

    // No adapter matches.
    let g = write_json(d, "g.json", &good);
    let out = d.join("out-adapter");
    let (code, _, stderr) = wgpu_ops(&[
        "run",
        &g,
        "--input",
        &format!("x={x}"),
        "--out",
        out.to_str().unwrap(),
        "--adapter",
        "no-such-gpu",
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("error: adapter: no adapter name contains 'no-such-gpu'")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!out.exists());
    // A missing graph file.
    let (code, _, stderr) =
        wgpu_ops(&["run", "/nonexistent/g.json", "--out", out.to_str().unwrap()]);
    assert_eq!((code, stderr.lines().count()), (1, 1), "{stderr}");
}

#[test]
fn closed_or_full_output_streams_end_with_an_exit_code_not_an_abort() {
    use std::process::Stdio;
    // A failing run whose stderr is /dev/full: printing the error fails, the exit code is 1.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    if let Ok(full) = full {
        let status = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
            .args(["run", "/nonexistent/g.json", "--out", "/nonexistent/out"])
            .stderr(Stdio::from(full))
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "{status:?}");
    }
    // `adapters` with stdout closed (the reader went away) or full: an error line, exit 1.
    let out = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
        .arg("adapters")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            drop(child.stdout.take());
            child.wait_with_output()
        })
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: stdout: "), "{stderr}");
    assert!(!stderr.contains("internal error"), "{stderr}");
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
            .arg("adapters")
            .stdout(Stdio::from(full))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("error: stdout: "), "{stderr}");
    }
}

#[test]
fn a_panic_while_writing_leaves_no_file_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out");
    let x = save(d, "x.npy", &common::random_tensor(4, DType::F32, &[2, 3]));
    let g = write_json(d, "g.json", &simple_graph(ss_node(&["x", "b", "e"])));
    let status = Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
        .args([
            "run",
            &g,
            "--input",
            &format!("x={x}"),
            "--out",
            out.to_str().unwrap(),
        ])
        .env("WGPU_OPS_TEST_PANIC_WHILE_WRITING", "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&status.stderr);
    assert_eq!(status.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("error: internal error: panic requested"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "a file was left behind"
    );
}

#[test]
fn outputs_of_very_high_rank_are_written() {
    // A Reshape to rank 22 000 and a StridedSlice adding 100 000 new axes: the .npy headers are
    // longer than version 1.0 can hold, so they are written as version 2.0.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = save(
        d,
        "x.npy",
        &HostTensor::from_vec(vec![2], &[1.5f32, -2.0]).unwrap(),
    );
    let mut shape = vec![1i64; 22_000];
    shape[0] = 2;
    let graph = json!({
        "inputs": [{"name": "x", "dtype": "f32", "shape": [2]}],
        "constants": [
            {"name": "shape", "dtype": "i64", "shape": [22_000], "data": shape},
            {"name": "z", "dtype": "i64", "shape": [100_001], "data": vec![0; 100_001]}
        ],
        "nodes": [
            {"op": "Reshape", "name": "r", "inputs": ["x", "shape"], "outputs": ["y"]},
            {"op": "StridedSlice", "name": "s", "inputs": ["x", "z", "z"], "outputs": ["w"],
             "attrs": {"new_axis_mask": vec![1; 100_000], "end_mask": vec![1; 100_001]}}
        ],
        "outputs": ["y", "w"]
    });
    let g = write_json(d, "g.json", &graph);
    let out = d.join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &g,
        "--input",
        &format!("x={x}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let y = npy::read(&out.join("y.npy")).unwrap();
    assert_eq!((y.shape.len(), y.shape[0]), (22_000, 2));
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.5, -2.0]);
    let w = npy::read(&out.join("w.npy")).unwrap();
    assert_eq!((w.shape.len(), w.shape[100_000]), (100_001, 2));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2);
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(wgpu_ops(&["run"]).0, 2);
    assert_eq!(
        wgpu_ops(&["run", "g.json", "--input", "x", "--out", "o"]).0,
        2
    );
    assert_eq!(wgpu_ops(&["frobnicate"]).0, 2);
    assert_eq!(
        wgpu_ops(&["run", "g.json", "--out", "o", "--backend", "opengl"]).0,
        2
    );
}

#[test]
fn runs_space_to_batch_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = common::random_tensor(4, DType::I16, &[2, 5, 4, 3]);
    let graph = json!({
        "inputs": [{"name": "x", "dtype": "i16", "shape": [2, 5, 4, 3]}],
        "constants": [
            {"name": "block", "dtype": "i32", "shape": [4], "data": [1, 2, 2, 1]},
            {"name": "pb", "dtype": "u8", "shape": [4], "data": [0, 1, 0, 0]},
            {"name": "pe", "dtype": "i64", "shape": [4], "data": [0, 0, 2, 0]}
        ],
        "nodes": [
            {"op": "SpaceToBatch", "name": "s2b", "inputs": ["x", "block", "pb", "pe"], "outputs": ["spaced"]},
            {"op": "BatchToSpace", "name": "b2s", "inputs": ["spaced", "block", "pb", "pe"], "outputs": ["back"]}
        ],
        "outputs": [{"name": "spaced", "shape": [8, 3, 3, 3]}, "back"]
    });
    let g = write_json(d, "graph.json", &graph);
    let xs = save(d, "x.npy", &x);
    let out = d.join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &g,
        "--input",
        &format!("x={xs}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let s2b = wgpu_ops::SpaceToBatch::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 2, 0]);
    assert_eq!(
        npy::read(&out.join("spaced.npy")).unwrap(),
        reference::space_to_batch(&x, &s2b).unwrap()
    );
    assert_eq!(npy::read(&out.join("back.npy")).unwrap(), x);
}

#[test]
fn runs_the_cumulative_sum_scan_graph_file() {
    // examples/graphs/cumsum.json: a Scan whose body adds each row to the running state.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows: Vec<f32> = (0..24).map(|v| v as f32 * 0.5 - 3.0).collect();
    let xs = save(
        d,
        "x.npy",
        &HostTensor::from_vec(vec![6, 4], &rows).unwrap(),
    );
    let g = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/graphs/cumsum.json");
    let out = d.join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        g,
        "--input",
        &format!("x={xs}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let running = npy::read(&out.join("running.npy")).unwrap();
    assert_eq!(running.shape, [6, 4]);
    let mut want = vec![0f32; 24];
    for r in 0..6 {
        for c in 0..4 {
            want[r * 4 + c] = rows[r * 4 + c] + if r > 0 { want[(r - 1) * 4 + c] } else { 0.0 };
        }
    }
    assert_eq!(running.to_vec::<f32>().unwrap(), want);
    assert_eq!(
        npy::read(&out.join("total.npy"))
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        want[20..]
    );
}

/// The cumulative sum Scan file and an input of 256 rows of 4 f32 (4 KiB) written in `d`:
/// the graph, the `--input` argument and the output folder.
fn cumsum_case(d: &Path) -> (&'static str, String, std::path::PathBuf) {
    let rows: Vec<f32> = (0..1024).map(|v| v as f32).collect();
    let xs = save(
        d,
        "x.npy",
        &HostTensor::from_vec(vec![256, 4], &rows).unwrap(),
    );
    let g = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/graphs/cumsum.json");
    (g, format!("x={xs}"), d.join("out"))
}

#[test]
fn max_memory_refuses_a_run_before_any_work() {
    // The same Scan file with 4 KiB of rows: refused under a 1 KiB limit (one error line
    // naming the limit, no output file), run under a 1 MiB one.
    let dir = tempfile::tempdir().unwrap();
    let (g, input, out) = cumsum_case(dir.path());
    let run = |limit: &str| {
        wgpu_ops(&[
            "run",
            g,
            "--input",
            &input,
            "--out",
            out.to_str().unwrap(),
            "--max-memory",
            limit,
        ])
    };
    let (code, _, err) = run("1024");
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("max_memory"),
        "{err}"
    );
    assert!(std::fs::read_dir(&out).map_or(true, |mut e| e.next().is_none()));
    let (code, _, err) = run("1048576");
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(npy::read(&out.join("running.npy")).unwrap().shape, [256, 4]);
}

/// `WGPU_OPS_WEBGPU_LIMITS`: `1` runs on WebGPU's default limits, a value that is neither 1
/// nor 0 is one error line that names the variable and shows the value escaped.
#[test]
fn webgpu_limits_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (g, input, out) = cumsum_case(dir.path());
    let run = |value: &str| {
        Command::new(env!("CARGO_BIN_EXE_wgpu-ops"))
            .args(["run", g, "--input", &input, "--out", out.to_str().unwrap()])
            .env("WGPU_OPS_WEBGPU_LIMITS", value)
            .output()
            .unwrap()
    };
    let bad = run("yes\nplease");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ")
            && err.contains("WGPU_OPS_WEBGPU_LIMITS 'yes\\nplease' is neither 1 nor 0"),
        "{err}"
    );
    let good = run("1");
    let err = String::from_utf8_lossy(&good.stderr);
    assert_eq!(good.status.code(), Some(0), "{err}");
    let running = npy::read(&out.join("running.npy")).unwrap();
    assert_eq!(running.shape, [256, 4]);
    assert_eq!(
        running.to_vec::<f32>().unwrap()[1020..],
        [130560.0, 130816.0, 131072.0, 131328.0]
    );
}

/// `run` and `info` on an ONNX model: Shape -> Concat -> Reshape (planned on the host) on the
/// input, then Mul; `info` marks the op that is not supported and `run` refuses it.
#[test]
fn runs_and_describes_an_onnx_model() {
    use prost::Message;
    use wgpu_ops::onnx::proto::{
        tensor_proto::DataType, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
        TensorProto, TypeProto, ValueInfoProto,
    };
    let node = |op: &str, inputs: &[&str], out: &str| NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        ..Default::default()
    };
    let float = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: None,
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = |extra: Option<NodeProto>| {
        let mut nodes = vec![
            node("Shape", &["x"], "dims"),
            node("Concat", &["one", "dims"], "flat_shape"),
            node("Reshape", &["x", "flat_shape"], "x1"),
            node("Mul", &["x1", "x1"], "y"),
        ];
        nodes.extend(extra);
        let mut concat_axis = wgpu_ops::onnx::proto::AttributeProto {
            name: Some("axis".into()),
            i: Some(0),
            ..Default::default()
        };
        concat_axis.r#type = Some(2); // INT
        nodes[1].attribute.push(concat_axis);
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(GraphProto {
                node: nodes,
                initializer: vec![TensorProto {
                    name: Some("one".into()),
                    dims: vec![1],
                    data_type: Some(DataType::Int64 as i32),
                    int64_data: vec![1],
                    ..Default::default()
                }],
                input: vec![float("x")],
                output: vec![float("y")],
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("square.onnx");
    std::fs::write(&path, model(None)).unwrap();
    let x = HostTensor::from_vec(vec![2, 3], &[1f32, 2., 3., 4., 5., 6.]).unwrap();
    let xf = save(dir.path(), "x.npy", &x);
    let out = dir.path().join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        path.to_str().unwrap(),
        "--input",
        &format!("x={xf}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let y: HostTensor = wgpu_ops::npy::read(&out.join("y.npy")).unwrap();
    assert_eq!(y.shape, [1, 2, 3]);
    assert_eq!(y.to_vec::<f32>().unwrap(), [1., 4., 9., 16., 25., 36.]);

    let (code, info, _) = wgpu_ops(&["info", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        info.contains("input: x f32 ?") && info.contains("op: Reshape x1\n"),
        "{info}"
    );
    assert!(info.ends_with("supported: yes\n"), "{info}");

    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, model(Some(node("Sprocket", &["y"], "z")))).unwrap();
    let (code, info, _) = wgpu_ops(&["info", bad.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(info.contains("op: Sprocket x1  (not supported)"), "{info}");
    let out2 = dir.path().join("out2");
    let (code, _, err) = wgpu_ops(&[
        "run",
        bad.to_str().unwrap(),
        "--input",
        &format!("x={xf}"),
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "error: model: unsupported ops: Sprocket (1) (see `wgpu-ops info` for the model's ops)\n"
    );
    assert!(!out2.exists());
}

/// The storage-only types through the command: an f8e4m3fn input as `|u1` codes, an i4
/// constant written as numbers (out-of-range ones refused), an f8e5m2 output written back as
/// codes.
#[test]
fn storage_only_types_travel_as_codes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let codes: Vec<u8> = (0..=255).collect();
    let xs = save(
        d,
        "x.npy",
        &HostTensor::from_vec(vec![256], &codes).unwrap(),
    );
    let graph = |k: i64| {
        json!({
            "inputs": [{"name": "x", "dtype": "f8e4m3fn", "shape": [256]}],
            "constants": [{"name": "k", "dtype": "i4", "shape": [2], "data": [-8, k]}],
            "nodes": [
                {"op": "Cast", "name": "wide", "inputs": ["x"], "outputs": ["f"], "attrs": {"to": "f32"}},
                {"op": "Cast", "name": "narrow", "inputs": ["f"], "outputs": ["y"], "attrs": {"to": "f8e5m2"}},
                {"op": "Cast", "name": "kw", "inputs": ["k"], "outputs": ["kf"], "attrs": {"to": "f32"}}
            ],
            "outputs": ["y", "kf"]
        })
    };
    let out = d.join("out");
    let g = write_json(d, "graph.json", &graph(7));
    let (code, _, err) = wgpu_ops(&[
        "run",
        &g,
        "--input",
        &format!("x={xs}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let y = npy::read(&out.join("y.npy")).unwrap();
    assert_eq!(y.dtype, DType::U8);
    let mode = wgpu_ops::CastMode::default();
    for (c, &got) in y.data.iter().enumerate() {
        let v = wgpu_ops::minifloat::decode(DType::F8E4M3FN, c as u8);
        let want = wgpu_ops::minifloat::encode(DType::F8E5M2, v, mode);
        assert_eq!(got, want, "code {c:#04x} ({v})");
    }
    let kf = npy::read(&out.join("kf.npy")).unwrap();
    assert_eq!(kf.to_vec::<f32>().unwrap(), [-8.0, 7.0]);

    let g = write_json(d, "bad.json", &graph(8));
    let bad_out = d.join("bad_out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &g,
        "--input",
        &format!("x={xs}"),
        "--out",
        bad_out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("data[1] = 8 is not a valid i4"), "{err}");
    assert!(!bad_out.exists());
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Sequences through the command: an input given as a folder of 0.npy, 1.npy, ...; a sequence
/// output written as such a folder (replacing an earlier run's); an empty optional output
/// written as no file; a folder holding anything else refused in one line.
#[test]
fn sequences_travel_as_folders_of_numbered_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let parts = d.join("parts");
    std::fs::create_dir(&parts).unwrap();
    let a = HostTensor::from_vec(vec![1, 2], &[1i32, 2]).unwrap();
    let b = HostTensor::from_vec(vec![2, 2], &[3i32, 4, 5, 6]).unwrap();
    save(&parts, "0.npy", &a);
    save(&parts, "1.npy", &b);
    let graph = write_json(
        d,
        "graph.json",
        &json!({
            "inputs": [{"name": "parts", "kind": "sequence", "dtype": "i32"}],
            "nodes": [
                {"op": "ConcatFromSequence", "name": "join", "inputs": ["parts"], "outputs": ["joined"], "attrs": {"axis": 0}},
                {"op": "SplitToSequence", "name": "rows", "inputs": ["joined"], "outputs": ["rows"], "attrs": {"keepdims": 0}},
                {"op": "Optional", "name": "none", "outputs": ["nothing"], "attrs": {"type": "tensor(f32)"}}
            ],
            "outputs": ["joined", {"name": "rows", "kind": "sequence"}, {"name": "nothing", "kind": "optional"}]
        }),
    );
    let out = d.join("out");
    std::fs::create_dir(&out).unwrap();
    // Left by an earlier run: a stale file for the empty optional and a longer sequence.
    save(&out, "nothing.npy", &a);
    std::fs::create_dir(out.join("rows")).unwrap();
    save(&out.join("rows"), "7.npy", &a);
    let run = |out: &Path| {
        wgpu_ops(&[
            "run",
            &graph,
            "--input",
            &format!("parts={}", parts.display()),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let (code, _, err) = run(&out);
    assert_eq!((code, err.as_str()), (0, ""));
    let joined = npy::read(&out.join("joined.npy")).unwrap();
    assert_eq!(joined.to_vec::<i32>().unwrap(), [1, 2, 3, 4, 5, 6]);
    let mut rows: Vec<String> = std::fs::read_dir(out.join("rows"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    rows.sort();
    assert_eq!(rows, ["0.npy", "1.npy", "2.npy"]);
    let row = npy::read(&out.join("rows").join("2.npy")).unwrap();
    assert_eq!(
        (row.shape.clone(), row.to_vec::<i32>().unwrap()),
        (vec![2], vec![5, 6])
    );
    assert!(!out.join("nothing.npy").exists());

    // A folder with a file that is not a numbered tensor.
    save(&parts, "extra.npy", &a);
    let bad_out = d.join("bad_out");
    let (code, _, err) = run(&bad_out);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("0.npy, 1.npy, ... and nothing else") && err.contains("extra.npy"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!bad_out.exists());
}

/// Strings through the command: numpy's string files (`<U`) in and out, a string input
/// declared with `"kind": "strings"`, string constants as a `StringConstant` node with a
/// list of strings as its value, and a string output of an ONNX-style op next to a numeric one.
#[test]
fn strings_travel_as_numpy_string_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let words = wgpu_ops::StringTensor::new(
        vec![3],
        ["a b", "ça va bien", ""].map(String::from).to_vec(),
    )
    .unwrap();
    let input = d.join("words.npy");
    std::fs::write(&input, npy::strings_to_bytes(&words)).unwrap();
    let graph = write_json(
        d,
        "graph.json",
        &json!({
            "inputs": [{"name": "words", "kind": "strings", "shape": [null]}],
            "nodes": [
                {"op": "StringSplit", "name": "split", "inputs": ["words"], "outputs": ["pieces", "counts"]},
                {"op": "StringConstant", "name": "mark", "outputs": ["mark"], "attrs": {"value": ["<"], "shape": [1, 1]}},
                {"op": "StringConcat", "name": "marked", "inputs": ["words", "mark"], "outputs": ["marked"]}
            ],
            "outputs": ["pieces", "counts", {"name": "marked", "kind": "strings"}]
        }),
    );
    let out = d.join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &graph,
        "--input",
        &format!("words={}", input.display()),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let read = |name: &str| {
        npy::strings_from_bytes(name, &std::fs::read(out.join(name)).unwrap()).unwrap()
    };
    let pieces = read("pieces.npy");
    assert_eq!(pieces.shape, [3, 3]);
    assert_eq!(
        pieces.values,
        ["a", "b", "", "ça", "va", "bien", "", "", ""]
    );
    let counts = npy::read(&out.join("counts.npy")).unwrap();
    assert_eq!(counts.to_vec::<i64>().unwrap(), [2, 3, 0]);
    let marked = read("marked.npy");
    assert_eq!(marked.shape, [1, 3]);
    assert_eq!(
        marked.values,
        ["a b<", "ça va bien<", "<"].map(String::from)
    );

    // Numbers given for the string input: one line naming it, no output.
    let numbers = save(
        d,
        "numbers.npy",
        &HostTensor::from_vec(vec![1], &[1i32]).unwrap(),
    );
    let bad_out = d.join("bad_out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &graph,
        "--input",
        &format!("words={numbers}"),
        "--out",
        bad_out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("'words'") && err.contains("string tensor"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!bad_out.exists());
}

/// A sequence of maps (ZipMap's) is written as a JSON list of objects, keys in decimal for
/// integer labels.
#[test]
fn maps_are_written_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = save(
        d,
        "x.npy",
        &HostTensor::from_vec(vec![2, 2], &[0.25f32, 0.75, 1.0, 0.0]).unwrap(),
    );
    let graph = write_json(
        d,
        "graph.json",
        &json!({
            "inputs": [{"name": "x", "dtype": "f32", "shape": [null, 2]}],
            "nodes": [
                {"op": "ZipMap", "name": "zip", "inputs": ["x"], "outputs": ["maps"], "attrs": {"classlabels_int64s": [10, -3]}}
            ],
            "outputs": [{"name": "maps", "kind": "maps"}]
        }),
    );
    let out = d.join("out");
    let (code, _, err) = wgpu_ops(&[
        "run",
        &graph,
        "--input",
        &format!("x={x}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""));
    let text = std::fs::read_to_string(out.join("maps.json")).unwrap();
    assert_eq!(
        text,
        "[{\"10\": 0.25, \"-3\": 0.75}, {\"10\": 1.0, \"-3\": 0.0}]\n"
    );
}

/// One map travels as a JSON object: an input declared a map is read from one, a map output
/// is written as one (keys ascending), and a file that breaks a rule is refused in one line
/// naming the file, the input and the key, with no output left.
#[test]
fn maps_travel_as_json_objects() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let map = d.join("x.json");
    std::fs::write(&map, r#"{"b": 2.5, "a": -1, "zz": "NaN"}"#).unwrap();
    let graph = write_json(
        d,
        "graph.json",
        &json!({
            "inputs": [{"name": "x", "kind": "map", "keys": "string", "values": "f32"}],
            "nodes": [
                {"op": "ai.onnx.ml.DictVectorizer", "name": "dv", "inputs": ["x"], "outputs": ["y"],
                 "attrs": {"string_vocabulary": ["zz", "a", "c", "b"]}}
            ],
            "outputs": ["y", {"name": "x", "kind": "map", "keys": "string", "values": "f32"}]
        }),
    );
    let out = d.join("out");
    let run = |input: &Path, out: &Path| {
        wgpu_ops(&[
            "run",
            &graph,
            "--input",
            &format!("x={}", input.display()),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let (code, _, err) = run(&map, &out);
    assert_eq!((code, err.as_str()), (0, ""));
    let y = npy::read(&out.join("y.npy")).unwrap();
    assert_eq!(y.shape, [1, 4]);
    let y = y.to_vec::<f32>().unwrap();
    assert!(y[0].is_nan());
    assert_eq!(y[1..], [-1.0, 0.0, 2.5]);
    assert_eq!(
        std::fs::read_to_string(out.join("x.json")).unwrap(),
        "{\"a\": -1.0, \"b\": 2.5, \"zz\": \"NaN\"}\n"
    );
    for (text, says) in [
        (r#"{"a": 1, "a": 2}"#, "key 'a' appears twice"),
        (r#"{"a": "x"}"#, "the value of key 'a' is \"x\""),
        (r#"{"a": 1e39}"#, "f32 numbers"),
        (r#"[1]"#, "a map is a JSON object"),
    ] {
        std::fs::write(&map, text).unwrap();
        let bad_out = d.join("bad_out");
        let (code, _, err) = run(&map, &bad_out);
        assert_eq!(code, 1, "{text}: {err}");
        assert!(
            err.starts_with("error: ")
                && err.contains("x.json")
                && err.contains("input 'x' (map(string, f32))")
                && err.contains(says),
            "{text}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!bad_out.exists());
    }
}

#[test]
fn seeded_random_nodes_draw_the_documented_numbers_in_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let graph = write_json(
        d,
        "graph.json",
        &json!({
            "inputs": [],
            "nodes": [
                {"op": "RandomUniform", "name": "u", "outputs": ["u"],
                 "attrs": {"shape": [3, 5], "seed": 9.0, "low": 0.0, "high": 1.0}},
                {"op": "RandomNormal", "name": "z", "outputs": ["z"],
                 "attrs": {"shape": [7], "seed": 9.0, "dtype": "f64"}}
            ],
            "outputs": ["u", "z"]
        }),
    );
    for run in 0..2 {
        let out = d.join(format!("out{run}"));
        let (code, _, err) = wgpu_ops(&["run", &graph, "--out", out.to_str().unwrap()]);
        assert_eq!((code, err.as_str()), (0, ""));
        let u = npy::read(&out.join("u.npy")).unwrap();
        assert_eq!(u.shape, [3, 5]);
        // Each command is a new session: the seeded first draw, bit for bit.
        assert_eq!(
            u.to_vec::<f32>().unwrap(),
            reference::random::units_f32(9, 0, 15)
        );
        let z = npy::read(&out.join("z.npy"))
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        for (g, w) in z.iter().zip(reference::random::normals_f64(9, 0, 7)) {
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{g} vs {w}");
        }
    }
}
