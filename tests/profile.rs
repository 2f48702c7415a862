//! `Context::start_profile` and `take_profile`: every dispatch of the runs between them timed
//! on the GPU and named by its kernel.

mod common;

use common::{own_ctx, random_tensor};
use wgpu_ops::{Context, DType, Graph, HostTensor, Node, Session};

fn node(op: &str, inputs: &[&str], output: &str) -> Node {
    Node::new(op, output)
        .inputs(inputs.iter().copied())
        .outputs([output])
}

/// A MatMul, a reduction of its product and a Softmax of it, over `a` [64, 1000] and
/// `w` [1000, 16].
fn session(ctx: &Context) -> (Session, Vec<(String, HostTensor)>) {
    let g = Graph::new()
        .input("a", DType::F32, &[Some(64), Some(1000)])
        .input("w", DType::F32, &[Some(1000), Some(16)])
        .constant("axes", HostTensor::from_vec(vec![1], &[1i64]).unwrap())
        .node(node("Relu", &["a"], "r"))
        .node(node("MatMul", &["r", "w"], "p"))
        .node(node("ReduceSum", &["p", "axes"], "s"))
        .node(node("Softmax", &["p"], "sm"))
        .output("s")
        .output("sm");
    let inputs = vec![
        ("a".to_string(), random_tensor(1, DType::F32, &[64, 1000])),
        ("w".to_string(), random_tensor(2, DType::F32, &[1000, 16])),
    ];
    (Session::new(ctx, g).unwrap(), inputs)
}

// Three runs in one profile (the later ones replayed, each command buffer resolving its own
// stamps at an offset the first did not start from): as many timed dispatches as the context
// counted, each longer than nothing, the MatMul and the reduction among the kernels named.
#[test]
fn a_profile_times_and_names_every_dispatch() {
    let ctx = own_ctx();
    if !ctx
        .features()
        .contains(wgpu_ops::gpu::Features::TIMESTAMP_QUERY)
    {
        let e = ctx.start_profile(16).unwrap_err().to_string();
        assert!(e.contains("TIMESTAMP_QUERY"), "{e}");
        return;
    }
    let (session, inputs) = session(&ctx);
    session.run_blocking(inputs.clone()).unwrap();
    let before = ctx.stats().dispatches;
    ctx.start_profile(2048).unwrap();
    for _ in 0..3 {
        session.run_blocking(inputs.clone()).unwrap();
    }
    let profile = ctx.take_profile_blocking().unwrap();
    let dispatches = ctx.stats().dispatches - before;
    assert!(dispatches >= 3 * 2, "{dispatches} dispatches");
    assert_eq!(profile.dispatches.len() as u64, dispatches);
    assert_eq!(profile.untimed, 0);
    for d in &profile.dispatches {
        assert!(d.ns > 0.0 && d.ns < 1e10, "{d:?}");
    }
    let kernels: Vec<String> = profile.by_kernel().into_iter().map(|k| k.0).collect();
    for file in ["matmul.wgsl", "reduce.wgsl"] {
        assert!(kernels.iter().any(|k| k.contains(file)), "{kernels:?}");
    }
    let counted: usize = profile.by_kernel().iter().map(|k| k.1).sum();
    assert_eq!(counted as u64, dispatches);
    let table = profile.table(60);
    assert!(table.contains("matmul.wgsl"), "{table}");
    assert_eq!(table.lines().count(), kernels.len() + 2, "{table}");
    // The profile ended: later runs are not timed, and there is none to take.
    session.run_blocking(inputs).unwrap();
    let e = ctx.take_profile_blocking().unwrap_err().to_string();
    assert!(e.contains("no profile was started"), "{e}");
}

// A profile full after one dispatch times that one and counts the rest; capacities outside
// 1 to 2 048 are refused in one line naming the capacity.
#[test]
fn a_full_profile_counts_what_it_did_not_time() {
    let ctx = own_ctx();
    if !ctx
        .features()
        .contains(wgpu_ops::gpu::Features::TIMESTAMP_QUERY)
    {
        return a_profile_times_and_names_every_dispatch();
    }
    for capacity in [0, 2049] {
        let e = ctx.start_profile(capacity).unwrap_err().to_string();
        assert!(
            e.starts_with("profile: ") && e.contains(&format!("capacity {capacity} ")),
            "{e}"
        );
    }
    let (session, inputs) = session(&ctx);
    let before = ctx.stats().dispatches;
    ctx.start_profile(1).unwrap();
    session.run_blocking(inputs).unwrap();
    let profile = ctx.take_profile_blocking().unwrap();
    let dispatches = ctx.stats().dispatches - before;
    assert_eq!(profile.dispatches.len(), 1);
    assert_eq!(profile.untimed, dispatches - 1);
    assert!(profile.dispatches[0].ns > 0.0);
}
