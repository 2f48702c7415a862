//! Tensors larger than the device's `max_buffer_size`, held in several GPU buffers: on an
//! artificial limit of 256 or 1024 bytes (with and without a small binding limit as well) a
//! few KiB cross many buffers, so every op meets elements, rows, windows and copies that
//! straddle buffer ends. Results are compared bit for bit with the CPU reference.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{
    reference, BatchToSpace, Context, ContextOptions, DType, Error, HostTensor, Out, RandomStream,
    Session, Slice, SpaceToBatch, StridedSlice, Tensor,
};

/// Buffers of 256 bytes bound whole; buffers of 1024 bytes bound in windows of 256; buffers
/// of 512 bytes with an odd binding limit (windows never line up with buffer ends).
fn contexts() -> Vec<Context> {
    contexts_with(None)
}

/// [`contexts`] with the kernels for CPU adapters or for GPUs as told (`None`: the adapter's).
fn contexts_with(cpu_kernels: Option<bool>) -> Vec<Context> {
    contexts_from(ContextOptions {
        cpu_kernels,
        ..Default::default()
    })
}

/// [`contexts`] with the other options from `base`.
fn contexts_from(base: ContextOptions) -> Vec<Context> {
    [(256, None), (1024, Some(256)), (512, Some(300))]
        .into_iter()
        .map(|(buffer, binding)| {
            Context::new_blocking(ContextOptions {
                max_buffer_size: Some(buffer),
                max_binding_size: binding,
                webgpu_limits: ADAPTER_LIMITS,
                ..base.clone()
            })
            .unwrap()
        })
        .collect()
}

#[test]
fn uploads_downloads_and_copies_cross_buffers() {
    for ctx in contexts() {
        let max = ctx.max_buffer_size();
        for dtype in DType::ALL {
            for n in [0, 1, 3, 257, 1000] {
                let h = random_tensor(n as u64, dtype, &[n]);
                let before = ctx.stats().buffers_created;
                let x = Tensor::from_host(&ctx, &h).unwrap();
                assert_eq!(
                    ctx.stats().buffers_created - before,
                    x.buffers().len() as u64
                );
                let bytes = (n * dtype.size()).div_ceil(4).max(1) * 4;
                assert_eq!(
                    x.buffers().len(),
                    bytes.div_ceil(max as usize),
                    "{dtype} {n}"
                );
                assert_eq!(x.to_host_blocking().unwrap(), h, "{dtype} {n}");
                let mut out = vec![0x5Au8; h.data.len()];
                x.read_into_blocking(&mut out).unwrap();
                assert_eq!(out, h.data, "{dtype} {n} read into memory");
                // Straight from the caller's bytes.
                let y = Tensor::from_bytes(&ctx, dtype, &[n], &h.data).unwrap();
                assert_eq!(y.to_host_blocking().unwrap(), h, "{dtype} {n} from bytes");
                let e = Tensor::from_bytes(&ctx, dtype, &[n + 1], &h.data).unwrap_err();
                assert!(e.to_string().contains("needs"), "{e}");
            }
        }
    }
}

/// Copies whose source and destination cross buffer ends at different places, as buffer
/// copies (CPU adapters) and through the copy kernel (GPUs: `vec4` where both ends and the
/// size are on 16 bytes, else words), in windows when the binding limit is small.
#[test]
fn copies_cross_buffers() {
    for cpu_kernels in [true, false] {
        for ctx in contexts_with(Some(cpu_kernels)) {
            let h = random_tensor(5, DType::U8, &[3000]);
            let x = Tensor::from_host(&ctx, &h).unwrap();
            for (from, to, size) in [(100, 700, 2000), (0, 0, 3000), (16, 48, 2944), (4, 8, 4)] {
                let y = Tensor::from_host(
                    &ctx,
                    &HostTensor::from_vec(vec![3000], &[7u8; 3000]).unwrap(),
                )
                .unwrap();
                let before = ctx.stats().dispatches;
                ctx.run(|rec| rec.copy_bytes(&x, from, &y, to, size))
                    .unwrap();
                let mut want = vec![7u8; 3000];
                let (from, to, size) = (from as usize, to as usize, size as usize);
                want[to..to + size].copy_from_slice(&h.data[from..from + size]);
                assert_eq!(
                    y.to_host_blocking().unwrap().data,
                    want,
                    "cpu kernels {cpu_kernels} {from} -> {to}, {size} bytes"
                );
                let dispatched = ctx.stats().dispatches > before;
                assert_eq!(dispatched, !cpu_kernels, "{from} -> {to}, {size} bytes");
            }
            // Ranges outside the tensor stay errors.
            let y = Tensor::from_host(&ctx, &h).unwrap();
            assert!(matches!(
                ctx.run(|rec| rec.copy_bytes(&x, 1004, &y, 0, 2000)),
                Err(Error::InvalidInput { .. })
            ));
        }
    }
}

/// With the GPU kernels a copy of 16 MiB or more that starts on 16-byte quads at both ends
/// but ends inside one moves its whole quads as `vec4` and the rest (1 to 3 words) in a second
/// dispatch; one that starts inside a quad, or is smaller, stays one dispatch of words.
#[test]
fn large_copies_ending_inside_a_quad_move_their_quads_as_vectors() {
    let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: Some(false),
        ..Default::default()
    })
    .unwrap();
    let n = (16 << 20) + 200;
    let h = random_tensor(9, DType::U8, &[n]);
    let x = Tensor::from_host(&ctx, &h).unwrap();
    // (from, to, size, dispatches, of them `vec4`)
    for (from, to, size, dispatches, quads) in [
        (0, 0, (16 << 20) + 4, 2, 1),
        (32, 16, (16 << 20) + 12, 2, 1),
        (16, 48, 16 << 20, 1, 1),
        (4, 20, (16 << 20) + 4, 1, 0),
        (0, 0, (16 << 20) - 12, 1, 0),
    ] {
        let y = Tensor::from_host(&ctx, &HostTensor::from_vec(vec![n], &vec![7u8; n]).unwrap())
            .unwrap();
        let before = ctx.stats();
        ctx.run(|rec| rec.copy_bytes(&x, from, &y, to, size))
            .unwrap();
        let after = ctx.stats();
        let mut want = vec![7u8; n];
        let (f, t, s) = (from as usize, to as usize, size as usize);
        want[t..t + s].copy_from_slice(&h.data[f..f + s]);
        let what = format!("{from} -> {to}, {size} bytes");
        assert!(y.to_host_blocking().unwrap().data == want, "{what}");
        let counts = (
            after.dispatches - before.dispatches,
            after.quad_dispatches - before.quad_dispatches,
        );
        assert_eq!(counts, (dispatches, quads), "{what}");
    }
}

#[test]
fn slices_of_every_dtype_cross_buffers() {
    let ops = [
        // Reversed inner axis, a strided mix, a strided outer axis, a shrink.
        StridedSlice::new([0, 0, 0], [9, 10, 13])
            .stride([1, 1, -1])
            .begin_mask([0, 0, 1])
            .end_mask([0, 0, 1]),
        StridedSlice::new([8, 1, 0], [0, 9, 13])
            .stride([-1, 2, 2])
            .end_mask([1]),
        StridedSlice::new([1, 0], [8, 10])
            .stride([3, -1])
            .begin_mask([0, 1])
            .end_mask([0, 1]),
        StridedSlice::new([0, 0, 5], [9, 10, 6]).shrink_axis_mask([0, 0, 1]),
        // Contiguous rows (a buffer copy from a word-aligned start, or a gather).
        StridedSlice::new([2], [7]),
        StridedSlice::new([0, 3], [9, 4]),
        // New axis, ellipsis and shrink together.
        StridedSlice::new([0, 0, 1, 0], [0, 0, 9, 0])
            .stride([1, 1, 2, 1])
            .new_axis_mask([1])
            .ellipsis_mask([0, 1])
            .end_mask([0, 0, 0, 1])
            .shrink_axis_mask([0, 0, 0, 0]),
    ];
    for ctx in contexts() {
        for dtype in DType::ALL {
            let h = random_tensor(7, dtype, &[9, 10, 13]);
            let x = Tensor::from_host(&ctx, &h).unwrap();
            assert!(x.buffers().len() > 1);
            for op in &ops {
                let want = reference::strided_slice(&h, op).unwrap();
                let got = ctx.run(|rec| rec.strided_slice(&x, op)).unwrap();
                assert_eq!(got.to_host_blocking().unwrap(), want, "{dtype} {op:?}");
            }
            let op = Slice::new([12, 1], [-14, 9], [-3, 2]).axes([2, 0]);
            let got = ctx.run(|rec| rec.slice(&x, &op)).unwrap();
            assert_eq!(
                got.to_host_blocking().unwrap(),
                reference::slice(&h, &op).unwrap(),
                "{dtype} {op:?}"
            );
            // A transpose: every output row reads across all of the input's buffers.
            let t = ctx.run(|rec| rec.transpose(&x, Some(&[2, 0, 1]))).unwrap();
            let (a, b) = (h.data.clone(), t.to_host_blocking().unwrap());
            assert_eq!(b.shape, [13, 9, 10]);
            let w = dtype.size();
            for (o, chunk) in b.data.chunks(w).enumerate() {
                let (k, i, j) = (o / 90, (o / 10) % 9, o % 10);
                let src = (i * 130 + j * 13 + k) * w;
                assert_eq!(chunk, &a[src..src + w], "{dtype} transpose at {o}");
            }
        }
    }
}

#[test]
fn batch_and_space_cross_buffers() {
    for ctx in contexts() {
        // u8 RGBA (whole words per pixel), f32, f64 and i16 pairs, NHWC with 2x2 blocks and
        // padding (the padding is cleared across buffers).
        for (dtype, channels) in [
            (DType::U8, 4),
            (DType::F32, 3),
            (DType::F64, 1),
            (DType::I16, 2),
        ] {
            let data = random_tensor(7, dtype, &[2, 13, 11, channels]);
            let s2b = SpaceToBatch::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 1, 0]);
            let b2s = BatchToSpace::new([1, 2, 2, 1], [0, 1, 0, 0], [0, 0, 1, 0]);
            let x = Tensor::from_host(&ctx, &data).unwrap();
            let mut rec = ctx.recorder();
            let spaced = rec.space_to_batch(&x, &s2b).unwrap();
            let back = rec.batch_to_space(&spaced, &b2s).unwrap();
            pollster::block_on(rec.finish()).unwrap();
            assert!(spaced.buffers().len() > 1);
            assert_eq!(
                spaced.to_host_blocking().unwrap(),
                reference::space_to_batch(&data, &s2b).unwrap(),
                "{dtype}"
            );
            assert_eq!(back.to_host_blocking().unwrap(), data, "{dtype}");
        }
        // u8 RGB: 3-byte pixels are not whole words; the error names the buffer limit.
        let data = random_tensor(7, DType::U8, &[1, 32, 32, 3]);
        let x = Tensor::from_host(&ctx, &data).unwrap();
        match ctx
            .run(|rec| rec.space_to_batch(&x, &SpaceToBatch::new([1, 2, 2, 1], [0; 4], [0; 4])))
        {
            Err(Error::LimitExceeded { op, limit, max, .. }) => {
                assert_eq!((op, limit), ("SpaceToBatch", "max_buffer_size"));
                assert_eq!(max, ctx.max_buffer_size());
            }
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
    }
}

/// Runs `graph` on `ctx` and on the CPU reference; both results.
/// A context of the adapter's buffers whose bindings hold at most `binding` bytes.
fn binding_context(binding: u64) -> Context {
    Context::new_blocking(ContextOptions {
        max_binding_size: Some(binding),
        cpu_kernels: cpu_kernels_from_env(),
        webgpu_limits: ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap()
}

fn both(
    ctx: &Context,
    graph: &Graph,
    inputs: &[(&str, HostTensor)],
) -> (Vec<HostTensor>, Vec<HostTensor>) {
    let named: Vec<(String, HostTensor)> = inputs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let got = Session::new(ctx, graph.clone())
        .unwrap()
        .run_blocking(named.clone())
        .unwrap()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    (got, run_graph(graph, &named, &Default::default()).unwrap())
}

fn i32s(shape: &[usize], seed: u64) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i32> = bytes(seed, n).iter().map(|&b| b as i32 - 128).collect();
    HostTensor::from_vec(shape.to_vec(), &v).unwrap()
}

#[test]
fn compute_ops_cross_buffers() {
    // Broadcast Add, MatMul of few and many rows (rows of A, rows of the output and batched
    // B matrices cross buffer ends), Concat along an inner axis, Relu: i32, so the sums are
    // exact.
    let g = Graph::new()
        .input("a", DType::I32, &[Some(3), Some(20), Some(17)])
        .input("b", DType::I32, &[Some(17), Some(3)])
        .input("bb", DType::I32, &[Some(3), Some(17), Some(3)])
        .input("c", DType::I32, &[Some(20), Some(1)])
        .input("r", DType::I32, &[Some(2), Some(17)])
        .node(Node::new("MatMul", "mm").inputs(["a", "b"]).outputs(["p"]))
        .node(Node::new("Add", "add").inputs(["p", "c"]).outputs(["q"]))
        .node(Node::new("Relu", "relu").inputs(["q"]).outputs(["y"]))
        .node(
            Node::new("Concat", "cat")
                .inputs(["a", "a"])
                .outputs(["z"])
                .attr("axis", Attr::Int(2)),
        )
        .node(Node::new("MatMul", "few").inputs(["r", "b"]).outputs(["s"]))
        .node(
            Node::new("MatMul", "batched")
                .inputs(["a", "bb"])
                .outputs(["t"]),
        )
        .output("y")
        .output("z")
        .output("s")
        .output("t");
    let inputs = [
        ("a", i32s(&[3, 20, 17], 1)),
        ("b", i32s(&[17, 3], 2)),
        ("bb", i32s(&[3, 17, 3], 7)),
        ("c", i32s(&[20, 1], 3)),
        ("r", i32s(&[2, 17], 4)),
    ];
    for ctx in contexts() {
        let (got, want) = both(&ctx, &g, &inputs);
        assert_eq!(got, want, "max_buffer_size {}", ctx.max_buffer_size());
    }
}

#[test]
fn scan_over_a_sequence_in_several_buffers() {
    // A running sum over 100 rows of 13 i32 (52-byte rows, so rows straddle buffer ends):
    // rows are copied in, states ping-pong, every step's output is copied out.
    let body = Graph::new()
        .input("sum", DType::I32, &[Some(13)])
        .input("x", DType::I32, &[Some(13)])
        .node(
            Node::new("Add", "add")
                .inputs(["sum", "x"])
                .outputs(["next"]),
        )
        .node(Node::new("Neg", "neg").inputs(["next"]).outputs(["y"]))
        .output("next")
        .output("y");
    let g = Graph::new()
        .input("s", DType::I32, &[Some(13)])
        .input("xs", DType::I32, &[Some(100), Some(13)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s", "xs"])
                .outputs(["last", "ys"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("last")
        .output("ys");
    let inputs = [("s", i32s(&[13], 5)), ("xs", i32s(&[100, 13], 6))];
    for ctx in contexts() {
        let (got, want) = both(&ctx, &g, &inputs);
        assert_eq!(got, want, "max_buffer_size {}", ctx.max_buffer_size());
    }
}

#[test]
fn matrices_beyond_one_buffer_are_multiplied_in_slices_of_their_rows() {
    // B of 17 x 6 i32 is 408 bytes: no buffer of 256 bytes (nor window of 256 or 300 bytes)
    // holds it, so the products are summed over slices of B's rows and A's columns. Plain,
    // batched (each B too large), broadcast, a 1-D A, i64, and Gemm reading B transposed with
    // alpha, beta and C; i32 and i64 so the sums are exact and compare bit for bit.
    let g = Graph::new()
        .input("a", DType::I32, &[Some(4), Some(17)])
        .input("b", DType::I32, &[Some(17), Some(6)])
        .input("ab", DType::I32, &[Some(2), Some(4), Some(17)])
        .input("bb", DType::I32, &[Some(2), Some(17), Some(6)])
        .input("v", DType::I32, &[Some(17)])
        .input("bt", DType::I32, &[Some(6), Some(17)])
        .input("c", DType::I32, &[Some(6)])
        .input("a64", DType::I64, &[Some(3), Some(40)])
        .input("b64", DType::I64, &[Some(40), Some(5)])
        .node(
            Node::new("MatMul", "plain")
                .inputs(["a", "b"])
                .outputs(["p"]),
        )
        .node(
            Node::new("MatMul", "batched")
                .inputs(["ab", "bb"])
                .outputs(["q"]),
        )
        .node(
            Node::new("MatMul", "broadcast")
                .inputs(["ab", "b"])
                .outputs(["r"]),
        )
        .node(
            Node::new("MatMul", "vector")
                .inputs(["v", "b"])
                .outputs(["s"]),
        )
        .node(
            Node::new("MatMul", "wide")
                .inputs(["a64", "b64"])
                .outputs(["t"]),
        )
        .node(
            Node::new("Gemm", "gemm")
                .inputs(["a", "bt", "c"])
                .outputs(["u"])
                .attr("transB", Attr::Int(1))
                .attr("alpha", Attr::Float(3.0))
                .attr("beta", Attr::Float(-2.0)),
        )
        .output("p")
        .output("q")
        .output("r")
        .output("s")
        .output("t")
        .output("u");
    let i64s = |shape: &[usize], seed: u64| -> HostTensor {
        let n: usize = shape.iter().product();
        let v: Vec<i64> = bytes(seed, n)
            .iter()
            .map(|&b| (b as i64 - 128) << 24)
            .collect();
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    };
    let inputs = [
        ("a", i32s(&[4, 17], 1)),
        ("b", i32s(&[17, 6], 2)),
        ("ab", i32s(&[2, 4, 17], 3)),
        ("bb", i32s(&[2, 17, 6], 4)),
        ("v", i32s(&[17], 5)),
        ("bt", i32s(&[6, 17], 6)),
        ("c", i32s(&[6], 7)),
        ("a64", i64s(&[3, 40], 8)),
        ("b64", i64s(&[40, 5], 9)),
    ];
    for ctx in contexts() {
        let (got, want) = both(&ctx, &g, &inputs);
        assert_eq!(got, want, "max_buffer_size {}", ctx.max_buffer_size());
    }
}

#[test]
fn a_row_of_b_beyond_one_buffer_is_a_clear_error() {
    // One row of B (70 i32, 280 bytes) is more than a buffer of 256 bytes holds: no slice of
    // rows fits.
    let ctx = &contexts()[0];
    let a = Tensor::from_host(ctx, &i32s(&[4, 3], 1)).unwrap();
    let b = Tensor::from_host(ctx, &i32s(&[3, 70], 2)).unwrap();
    match ctx.run(|rec| rec.matmul(&a, &b)) {
        Err(e @ Error::LimitExceeded { .. }) => {
            let Error::LimitExceeded { op, limit, .. } = &e else {
                unreachable!()
            };
            assert_eq!((*op, *limit), ("MatMul", "max_buffer_size"), "{e}");
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[test]
fn buffer_limits_below_one_buffer_are_rejected() {
    match Context::new_blocking(ContextOptions {
        max_buffer_size: Some(100),
        ..Default::default()
    }) {
        Err(Error::InvalidInput { op, input, .. }) => {
            assert_eq!((op, input.as_str()), ("Context", "max_buffer_size"));
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    let ctx = Context::new_blocking(ContextOptions {
        max_buffer_size: Some(1000),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(ctx.max_buffer_size(), 768);
}

#[test]
fn large_transfers_stream_through_reused_staging_buffers() {
    // Uploads from 1 MiB and all downloads go through the context's staging buffers of 4 MiB,
    // four to a submission: sizes around those bounds, tensors in one buffer and in several
    // (of 3 MiB + 512 bytes, which staging chunks do not line up with), and several tensors
    // read together, all bit for bit. Two rounds, so the second reuses staging buffers.
    for max in [None, Some((3 << 20) + 512)] {
        let ctx = Context::new_blocking(ContextOptions {
            max_buffer_size: max,
            ..Default::default()
        })
        .unwrap();
        let sizes = [
            (1 << 20) - 1,
            1 << 20,
            (4 << 20) + 2,
            (17 << 20) + 3,
            33 << 20,
        ];
        let hosts: Vec<HostTensor> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| HostTensor {
                dtype: DType::U8,
                shape: vec![n],
                data: bytes(i as u64 + 1, n),
            })
            .collect();
        let tensors: Vec<Tensor> = hosts
            .iter()
            .map(|h| Tensor::from_host(&ctx, h).unwrap())
            .collect();
        for (t, h) in tensors.iter().zip(&hosts) {
            assert!(
                t.to_host_blocking().unwrap() == *h,
                "{max:?}: {:?}",
                h.shape
            );
            // Into the caller's memory, which held other bytes.
            let mut out = vec![0xA5u8; h.data.len()];
            t.read_into_blocking(&mut out).unwrap();
            assert!(out == h.data, "{max:?}: {:?} read into memory", h.shape);
        }
        let mut short = vec![0u8; sizes[2] - 1];
        let e = tensors[2].read_into_blocking(&mut short).unwrap_err();
        assert!(
            matches!(e, Error::InvalidInput { op: "download", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("bytes given for the"), "{e}");
        let refs: Vec<&Tensor> = tensors.iter().collect();
        let before = ctx.stats();
        let all = pollster::block_on(wgpu_ops::download_all(&ctx, &refs)).unwrap();
        let after = ctx.stats();
        assert!(all == hosts, "{max:?}: read together");
        // 56 MiB and 12 bytes in whole words: 15 staging buffers' worth, 4 rounds.
        assert_eq!(after.submissions - before.submissions, 4, "{max:?}");
        // At most a wait per round (none for a round the GPU had finished already).
        let waits = after.host_waits - before.host_waits;
        assert!((1..=4).contains(&waits), "{max:?}: {waits} waits");
    }
}

/// Pad whose data and output are larger than one binding (per dtype, a few hundred bytes, and
/// 44 more so that windows fall elsewhere): the output cut into runs of whole words whose
/// inputs fit a window, a dispatch each. Every mode, 1-, 2-, 4- and 8-byte elements, pads of
/// inner axes only, of the first axis, of every axis, with crops: bit for bit against the
/// reference.
#[test]
fn pads_beyond_a_binding_run_in_windows_of_their_output() {
    let shape = [7usize, 5, 4, 5];
    let cases: [[i64; 8]; 6] = [
        [0, 0, 1, 2, 0, 0, 2, 2],
        [0, 1, 0, -1, 0, 0, 1, 0],
        [0, 0, 0, 2, 0, 0, 1, 0],
        [1, 0, 0, 0, 0, 0, 0, 1],
        [2, 1, 1, 2, 1, 0, 2, 1],
        [-1, 0, 1, 0, 0, 0, -2, 2],
    ];
    for dtype in [DType::U8, DType::F16, DType::I32, DType::I64] {
        let elem = dtype.size() as u64;
        for binding in [160 * elem + 160, 160 * elem + 204] {
            let ctx = binding_context(binding);
            let x = random_tensor(5, dtype, &shape);
            assert!(x.data.len() as u64 > binding);
            for pads in cases {
                for mode in ["constant", "reflect", "edge", "wrap"] {
                    let g = pad_graph(dtype, &shape, &pads, mode);
                    let (got, want) = both(&ctx, &g, &[("x", x.clone())]);
                    assert!(
                        got == want,
                        "Pad {mode} {dtype} by {pads:?}, binding {binding}"
                    );
                }
            }
        }
    }
}

/// A one-node reduction graph: `op` over `axes` of an input `x` of `shape` (ArgMax and ArgMin
/// take the first axis; `ArgMaxLast` is ArgMax with `select_last_index`; GlobalAveragePool
/// no axes).
fn reduction_graph(op: &str, dtype: DType, shape: &[usize], axes: &[i64]) -> Graph {
    let onnx_op = op.trim_end_matches("Last");
    let mut node = Node::new(onnx_op, "r").inputs(["x"]).outputs(["y"]);
    if onnx_op.starts_with("Arg") {
        node = node.attr("axis", Attr::Int(axes[0]));
        if op.ends_with("Last") {
            node = node.attr("select_last_index", Attr::Int(1));
        }
    } else if !axes.is_empty() {
        node = node.attr("axes", Attr::Ints(axes.to_vec()));
    }
    Graph::new()
        .input(
            "x",
            dtype,
            &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
        )
        .node(node)
        .output("y")
}

/// Asserts that `ctx` refuses a sum over the first axis of i32 `shape`, naming the binding
/// limit.
fn assert_column_sum_refused(ctx: &Context, shape: &[usize]) {
    let g = reduction_graph("ReduceSum", DType::I32, shape, &[0]);
    let e = Session::new(ctx, g)
        .unwrap()
        .run_blocking(vec![("x".to_string(), i32s(shape, 12))])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ReduceSum") && e.contains("max_storage_buffer_binding_size"),
        "{e}"
    );
}

/// Reductions whose input is larger than one binding (256 or 300 bytes here): cut along the
/// kept axes into runs of outputs whose rows fit a window, a dispatch each. Rows of 7 and of
/// 45 elements, 1-, 4- and 8-byte inputs, sums, maxima, ArgMax (i64 outputs), and
/// GlobalAveragePool's reduction of each image: bit for bit against the reference (small
/// integers, so f32 sums are exact). A sum over the outer axis, where each output's row spans
/// the input, runs in chunks (see the next test); a whole sum of 1000 elements, whose chunks'
/// states are more than such a binding holds, is refused, naming the binding limit.
#[test]
fn reductions_beyond_a_binding_run_in_windows_of_rows() {
    for binding in [256u64, 300] {
        let ctx = binding_context(binding);
        let cases: [(&str, DType, &[usize], &[i64]); 7] = [
            ("ReduceSum", DType::I32, &[30, 7], &[1]),
            ("ReduceMax", DType::U8, &[50, 7], &[1]),
            ("ReduceSum", DType::I64, &[30, 7], &[1]),
            ("ReduceSum", DType::F32, &[6, 5, 9], &[1, 2]),
            ("ReduceMin", DType::I32, &[6, 5, 9], &[2]),
            ("ArgMax", DType::I32, &[30, 7], &[1]),
            ("GlobalAveragePool", DType::F32, &[2, 6, 5, 7], &[]),
        ];
        for (op, dtype, shape, axes) in cases {
            let x = reference::cast_host(&i32s(shape, 11), dtype).unwrap();
            assert!(x.data.len() as u64 > binding);
            let g = reduction_graph(op, dtype, shape, axes);
            let (got, want) = both(&ctx, &g, &[("x", x)]);
            assert_eq!(
                got, want,
                "{op} {dtype} {shape:?} over {axes:?}, binding {binding}"
            );
        }
        let g = reduction_graph("ReduceSum", DType::I32, &[40, 9], &[0]);
        let (got, want) = both(&ctx, &g, &[("x", i32s(&[40, 9], 12))]);
        assert_eq!(got, want, "column sums, binding {binding}");
        assert_column_sum_refused(&ctx, &[1000]);
    }
}

/// A reduction of element-wise values computed where it reads them (a prologue: a product of
/// broadcast operands, each within one binding) whose output does not fit one binding: the
/// values are computed first and reduced in windows (it was refused as "the output bound at
/// once"). Sums, maxima and L2 norms over the last axis and over two, f32 and i32: bit for bit
/// the reference (small integers, whose f32 sums are exact), in bindings of 256 and 300
/// bytes, and bit for bit the same as the prologue bound whole on the default context.
#[test]
fn reductions_of_fused_values_beyond_a_binding_are_computed_first() {
    let whole = Context::new_blocking(Default::default()).unwrap();
    for binding in [256u64, 300] {
        let ctx = binding_context(binding);
        let cases: [(&str, DType, &[i64]); 5] = [
            ("ReduceSum", DType::F32, &[2]),
            ("ReduceMax", DType::I32, &[2]),
            ("ReduceL2", DType::F32, &[2]),
            ("ReduceSum", DType::I32, &[0, 2]),
            ("ReduceMin", DType::F32, &[1, 2]),
        ];
        for (op, dtype, axes) in cases {
            let (m, k) = (12, 20);
            let node = Node::new(op, "r")
                .inputs(["p"])
                .outputs(["y"])
                .attr("axes", Attr::Ints(axes.to_vec()));
            let g = Graph::new()
                .input("a", dtype, &[Some(m), Some(1), Some(1)])
                .input("b", dtype, &[Some(1), Some(k), Some(3)])
                .node(Node::new("Mul", "mul").inputs(["a", "b"]).outputs(["p"]))
                .node(node)
                .output("y");
            let a = reference::cast_host(&i32s(&[m, 1, 1], 21), dtype).unwrap();
            let b = reference::cast_host(&i32s(&[1, k, 3], 22), dtype).unwrap();
            let inputs = [("a", a), ("b", b)];
            let (got, want) = both(&ctx, &g, &inputs);
            let what = format!("{op} {dtype} over {axes:?}, binding {binding}");
            let out_bytes = got[0].data.len() as u64;
            assert!(
                out_bytes > binding || axes.len() > 1,
                "{what}: {out_bytes} bytes"
            );
            let (fused, _) = both(&whole, &g, &inputs);
            assert_eq!(got, fused, "{what}: against the prologue bound whole");
            if op == "ReduceL2" {
                let (g, w) = (
                    got[0].to_vec::<f32>().unwrap(),
                    want[0].to_vec::<f32>().unwrap(),
                );
                for (x, y) in g.iter().zip(&w) {
                    assert!(
                        (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                        "{what}: {x} vs {y}"
                    );
                }
            } else {
                assert_eq!(got, want, "{what}");
            }
        }
    }
}

#[test]
fn reductions_of_rows_beyond_a_window_run_in_chunks() {
    // A 4 KiB binding holds about a thousand 4-byte elements: every row below but the first
    // is longer, so it is cut into chunks folded into states, then merged (whole sums, column sums, sums
    // over axes that are not adjacent, ArgMax along the long axis with many ties).
    let ctx = Context::new_blocking(ContextOptions {
        max_binding_size: Some(4096),
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    let cases: [(&str, DType, &[usize], &[i64]); 15] = [
        // Rows that fit: windows of 25 rows of 40, 16 threads a row (two workgroups each).
        ("ReduceSum", DType::I32, &[100, 40], &[1]),
        ("ReduceSum", DType::F32, &[3000], &[]),
        // 40 chunks: merged by a workgroup (fewer by a thread per row).
        ("ReduceSum", DType::F32, &[40000], &[]),
        ("ArgMax", DType::I32, &[1, 40000], &[1]),
        ("ReduceMean", DType::F32, &[2, 1500, 3], &[]),
        ("ReduceSum", DType::I32, &[300, 7], &[0]),
        ("ReduceMax", DType::U8, &[5000, 3], &[0]),
        ("ReduceMin", DType::I64, &[900, 2], &[0]),
        ("ReduceSum", DType::F16, &[2500], &[]),
        ("ReduceSum", DType::F32, &[40, 5, 30], &[0, 2]),
        ("ReduceSum", DType::I32, &[3, 2, 40, 2, 30], &[0, 2, 4]),
        ("ReduceL1", DType::F64, &[700, 2], &[0]),
        ("ArgMax", DType::I32, &[1500, 3], &[0]),
        ("ArgMin", DType::I32, &[7, 1300], &[1]),
        ("ArgMaxLast", DType::I32, &[1500, 3], &[0]),
    ];
    for (op, dtype, shape, axes) in cases {
        // Few distinct values, so that ArgMax and ArgMin meet ties across chunks.
        let mut ints = i32s(shape, 13);
        if op.starts_with("Arg") {
            let v: Vec<i32> = ints
                .to_vec::<i32>()
                .unwrap()
                .iter()
                .map(|v| v % 5)
                .collect();
            ints = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
        }
        let x = reference::cast_host(&ints, dtype).unwrap();
        assert!(x.data.len() > 4096);
        let g = reduction_graph(op, dtype, shape, axes);
        let (got, want) = both(&ctx, &g, &[("x", x)]);
        assert_eq!(got, want, "{op} {dtype} {shape:?} over {axes:?}");
    }
    // A tensor in buffers of 8 KiB: chunks tile them.
    let split = Context::new_blocking(ContextOptions {
        max_binding_size: Some(4096),
        max_buffer_size: Some(8192),
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    })
    .unwrap();
    for (op, shape, axes) in [
        ("ReduceSum", &[6000][..], &[][..]),
        ("ReduceMax", &[3000, 2], &[0]),
    ] {
        let g = reduction_graph(op, DType::I32, shape, axes);
        let (got, want) = both(&split, &g, &[("x", i32s(shape, 14))]);
        assert_eq!(got, want, "{op} {shape:?} in 8 KiB buffers");
    }
    // Rows of two elements a window apart: a state per element and row, more than a binding
    // holds, and an output beyond one: rows in groups, each group's output in a window.
    for shape in [[2, 1100], [3, 2500]] {
        let g = reduction_graph("ReduceSum", DType::I32, &shape, &[0]);
        let (got, want) = both(&ctx, &g, &[("x", i32s(&shape, 15))]);
        assert_eq!(got, want, "column sums of {shape:?}");
    }
    // 246 chunks: one row's states are more than a binding holds.
    assert_column_sum_refused(&ctx, &[250_000]);
}

/// Reductions whose rows lie across the ends of their input's buffers (rows of 7 to 40
/// elements in buffers of 256, 1024 and 512 bytes, which no row count tiles) read a copy laid
/// out in buffers of whole slices of rows (they were refused as "an input bound at once"):
/// sums, maxima over two axes, ArgMax, and Softmax and LogSoftmax (Multinomial's first
/// step), bit for bit the reference (small integers) or, for the floats, the same context's
/// kernels on the input in one buffer.
#[test]
fn reductions_of_rows_across_buffer_ends_read_a_relaid_copy() {
    let whole = Context::new_blocking(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        webgpu_limits: ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap();
    let cases: [(&str, DType, &[usize], &[i64]); 5] = [
        ("ReduceSum", DType::I32, &[7, 40], &[1]),
        ("ReduceMax", DType::F32, &[10, 5, 6], &[1, 2]),
        ("ReduceSum", DType::I64, &[9, 30], &[1]),
        ("ArgMax", DType::I32, &[40, 7], &[1]),
        ("ReduceMin", DType::F64, &[6, 2, 15], &[2]),
    ];
    let softmax = |op: &str, shape: &[usize]| {
        Graph::new()
            .input(
                "x",
                DType::F32,
                &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
            )
            .node(
                Node::new(op, "s")
                    .inputs(["x"])
                    .outputs(["y"])
                    .attr("axis", Attr::Int(-1)),
            )
            .output("y")
    };
    for ctx in contexts_from(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    }) {
        let buffers = ctx.max_buffer_size();
        for (op, dtype, shape, axes) in cases {
            let x = reference::cast_host(&i32s(shape, 16), dtype).unwrap();
            let row = shape[axes[0] as usize..].iter().product::<usize>() * dtype.size();
            assert!(x.data.len() as u64 > buffers && buffers % row as u64 != 0);
            let g = reduction_graph(op, dtype, shape, axes);
            let (got, want) = both(&ctx, &g, &[("x", x)]);
            assert_eq!(got, want, "{op} {dtype} {shape:?}, buffers of {buffers}");
        }
        for op in ["Softmax", "LogSoftmax"] {
            let shape = [7, 40];
            let v: Vec<f32> = (0..280)
                .map(|k| ((k * 37) % 29) as f32 / 8.0 - 1.5)
                .collect();
            let x = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
            let run = |c: &Context| {
                Session::new(c, softmax(op, &shape))
                    .unwrap()
                    .run_blocking(vec![("x".to_string(), x.clone())])
                    .unwrap()
            };
            assert_eq!(run(&ctx), run(&whole), "{op}, buffers of {buffers}");
        }
    }
}

/// Small values of `dtype` for reduction `op` over `shape`: sums, products (of signs) and f16
/// stay exact.
fn exact_reduction_input(op: &str, dtype: DType, shape: &[usize], seed: u64) -> HostTensor {
    let v: Vec<i32> = i32s(shape, seed)
        .to_vec::<i32>()
        .unwrap()
        .iter()
        .map(|&k| {
            if op == "ReduceProd" {
                k.signum()
            } else {
                k % 8
            }
        })
        .collect();
    let x = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
    reference::cast_host(&x, dtype).unwrap()
}

/// Rows longer than a buffer (or whose copy in whole rows would be) lie across buffer ends
/// whatever the layout: they are reduced in chunks from a copy whose rows start on whole
/// chunks, in buffers of whole chunks (they were refused as "an input bound at once", naming
/// a binding limit far above the input). Every reduction kind, narrow and 64-bit types, odd
/// row lengths, ArgMax/ArgMin first and last, and a reduction over all axes; bit for bit.
#[test]
fn reductions_of_rows_longer_than_a_buffer_read_a_copy_in_whole_chunks() {
    let cases: [(&str, DType, &[usize], &[i64]); 11] = [
        ("ReduceSum", DType::I32, &[3, 300], &[1]),
        ("ReduceMax", DType::F32, &[2, 5, 71], &[1, 2]),
        ("ReduceSum", DType::I64, &[2, 171], &[1]),
        ("ArgMax", DType::I32, &[3, 301], &[1]),
        ("ArgMinLast", DType::F32, &[2, 263], &[1]),
        ("ReduceMin", DType::F64, &[2, 3, 55], &[1, 2]),
        ("ReduceMax", DType::U8, &[2, 1501], &[1]),
        ("ReduceMin", DType::F16, &[3, 613], &[1]),
        ("ReduceProd", DType::I8, &[2, 1029], &[1]),
        ("ReduceSumSquare", DType::I32, &[3, 110], &[]),
        ("ReduceL1", DType::F64, &[1, 2, 70], &[0, 1, 2]),
    ];
    for ctx in contexts_from(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    }) {
        let buffers = ctx.max_buffer_size();
        for (op, dtype, shape, axes) in cases {
            let x = exact_reduction_input(op, dtype, shape, 19);
            let reduced: usize = match axes {
                [] => shape.iter().product(),
                _ => axes.iter().map(|&a| shape[a as usize]).product(),
            };
            assert!((reduced * dtype.size()) as u64 > buffers);
            let g = reduction_graph(op, dtype, shape, axes);
            let (got, want) = both(&ctx, &g, &[("x", x)]);
            assert_eq!(got, want, "{op} {dtype} {shape:?}, buffers of {buffers}");
        }
    }
}

/// Reductions over axes that are not the innermost (sums over the first axis of a tall matrix,
/// over the middle axis of three, over the outer and inner axes keeping the middle one), of
/// inputs in several buffers whose chunks step across buffer ends (no row length tiles the
/// buffers, and a row's reach is more than a buffer, so no copy in whole rows helps): reduced
/// from a copy in which the chunk axis is padded to whole chunks, laid out in buffers of
/// whole chunks (they were refused as "an input bound at once" or "an input whose rows lie
/// across the ends of its buffers"). Sums, products, extremes, L1, sums of squares and means,
/// ArgMax and ArgMin (last index) over columns, 1- to 8-byte types, bit for bit against the
/// reference (small integers: sums, products and means over 64 stay exact) on three limited
/// contexts.
#[test]
fn reductions_over_outer_axes_across_buffer_ends_read_a_copy_in_whole_chunks() {
    let cases: [(&str, DType, &[usize], &[i64]); 14] = [
        ("ReduceSum", DType::I32, &[70, 7], &[0]),
        ("ReduceMax", DType::F32, &[4, 60, 7], &[1]),
        ("ArgMax", DType::I32, &[90, 5], &[0]),
        ("ArgMinLast", DType::F32, &[90, 3], &[0]),
        ("ReduceSum", DType::I64, &[50, 3], &[0]),
        ("ReduceMin", DType::U8, &[700, 3], &[0]),
        ("ReduceProd", DType::I8, &[300, 5], &[0]),
        ("ReduceMax", DType::F16, &[200, 3], &[0]),
        ("ReduceL1", DType::F64, &[45, 3], &[0]),
        ("ReduceSum", DType::I32, &[48, 3, 2], &[0, 2]),
        ("ReduceSum", DType::I32, &[3, 40, 5], &[1]),
        ("ReduceSumSquare", DType::F32, &[4, 30, 3], &[0, 1]),
        ("ReduceMean", DType::F32, &[2, 64, 5], &[1]),
        ("ReduceSum", DType::F64, &[2, 33, 3], &[1]),
    ];
    for ctx in contexts_from(ContextOptions {
        cpu_kernels: cpu_kernels_from_env(),
        ..Default::default()
    }) {
        let buffers = ctx.max_buffer_size();
        for (op, dtype, shape, axes) in cases {
            let x = exact_reduction_input(op, dtype, shape, 23);
            assert!(x.data.len() as u64 > buffers);
            let g = reduction_graph(op, dtype, shape, axes);
            let (got, want) = both(&ctx, &g, &[("x", x)]);
            assert_eq!(got, want, "{op} {dtype} {shape:?}, buffers of {buffers}");
        }
    }
}

/// MaxRoiPool whose X or output exceeds a binding or a buffer runs in passes over windows of
/// whole images of X and whole ROIs of the output, each pass binding its ROIs' part of the
/// window table (it was refused as "bound at once"): 8 images of [3, 2, 4], 12 ROIs over them
/// in mixed order (outside, malformed, whole-image), f32, f16, bf16 and f64 with random bits
/// (NaN among them), bins of [2, 3] and [1, 3] (9 outputs a ROI: 2-byte ROIs that begin in
/// the middle of a word), bit for bit against the reference on every context of
/// [`contexts`] and bindings of 256 and 300 bytes. An image no window holds is one error.
#[test]
fn max_roi_pools_cross_buffers_and_bindings() {
    let rois: [[f32; 5]; 12] = [
        [7.0, 0.0, 0.0, 3.0, 2.0],
        [0.0, 1.0, 1.0, 2.0, 2.0],
        [3.0, -2.0, 1.0, 5.0, 9.0],
        [5.0, 3.0, 2.0, 3.0, 2.0],
        [1.0, 2.0, 0.0, 0.0, 1.0],
        [6.0, 0.0, 0.0, 0.0, 0.0],
        [2.0, 6.0, 6.0, 9.0, 9.0],
        [4.0, 1.0, 0.0, 3.0, 1.0],
        [0.0, 0.0, 2.0, 3.0, 2.0],
        [7.0, 2.0, 1.0, 3.0, 2.0],
        [3.0, 0.0, 0.0, 1.0, 1.0],
        [5.0, 1.0, 1.0, 2.0, 2.0],
    ];
    let flat: Vec<f32> = rois.iter().flatten().copied().collect();
    let node = |pooled: [i64; 2]| {
        Node::new("MaxRoiPool", "pool")
            .inputs(["x", "rois"])
            .attr("pooled_shape", Attr::Ints(pooled.to_vec()))
    };
    let mut contexts = contexts();
    contexts.extend([binding_context(256), binding_context(300)]);
    for ctx in &contexts {
        let limit = ctx.max_buffer_size().min(ctx.binding_limit());
        for (k, d) in [DType::F32, DType::F16, DType::BF16, DType::F64]
            .into_iter()
            .enumerate()
        {
            let x = random_tensor(40 + k as u64, d, &[8, 3, 2, 4]);
            assert!(
                x.data.len() as u64 > limit,
                "{d}: X past a binding or buffer"
            );
            let r = reference::cast_host(&HostTensor::from_vec(vec![12, 5], &flat).unwrap(), d)
                .unwrap();
            for pooled in [[2, 3], [1, 3]] {
                let (got, want) = both_on(
                    ctx,
                    node(pooled),
                    vec![("x", x.clone()), ("rois", r.clone())],
                )
                .unwrap_or_else(|e| panic!("{d} {pooled:?}, limit {limit}: {e}"));
                assert_eq!(got, want, "{d} {pooled:?}, limit {limit}");
            }
        }
    }
    let x = random_tensor(50, DType::F32, &[2, 3, 9, 11]);
    let r = HostTensor::from_vec(vec![1, 5], &[1.0f32, 0.0, 0.0, 4.0, 4.0]).unwrap();
    let e = both_on(
        &binding_context(256),
        node([2, 2]),
        vec![("x", x), ("rois", r)],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("MaxRoiPool") && e.contains("one image of X (1188 bytes)") && !e.contains('\n'),
        "{e}"
    );
}

#[test]
fn long_dfts_beyond_a_binding_and_a_buffer() {
    // A factored DFT's transposes, gathers, products and twiddles on tensors of 16 KiB with
    // 4 KiB bindings, and in 8 KiB buffers; against the interpreter's direct f64 sums, in f64
    // (bound 1e-13 of the peak, as tests/onnx_ops.rs holds them).
    for (buffer, binding) in [(None, Some(4096)), (Some(8192), Some(4096))] {
        let ctx = Context::new_blocking(ContextOptions {
            max_buffer_size: buffer,
            max_binding_size: binding,
            cpu_kernels: cpu_kernels_from_env(),
            ..Default::default()
        })
        .unwrap();
        // 1024 = 32 x 32 (twiddles folded), 1031 a prime (a chirp through 4096 points).
        for (n, inverse) in [(1024usize, 0i64), (1031, 1)] {
            let shape = [1usize, n, 2];
            let values: Vec<f64> = (0..2 * n)
                .map(|i| ((i * 7919 % 1013) as f64 / 1013.0 - 0.5) * (1.0 + (i % 3) as f64))
                .collect();
            let x = HostTensor::from_vec(shape.to_vec(), &values).unwrap();
            let g = Graph::new()
                .input("x", DType::F64, &shape.map(Some))
                .node(
                    Node::new("DFT", "d")
                        .inputs(["x"])
                        .outputs(["y"])
                        .attr("inverse", Attr::Int(inverse)),
                )
                .output("y");
            let (got, want) = both(&ctx, &g, &[("x", x)]);
            let (got, want) = (
                got[0].to_vec::<f64>().unwrap(),
                want[0].to_vec::<f64>().unwrap(),
            );
            let peak = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!(peak.is_finite() && peak > 0.1, "peak {peak}");
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0, f64::max);
            assert!(
                worst <= 1e-13 * peak && got.iter().all(|v| v.is_finite()),
                "DFT of {n}, buffer {buffer:?}, binding {binding:?}: off by {worst:e} (peak {peak:e})"
            );
        }
    }
}

/// Outputs beyond one buffer or one binding whose pieces are 2^16 elements or more and end
/// inside a 16-byte quad: each piece takes its whole quads and then its rest by a dispatch of
/// its own (element-wise programs; Pad, whose data rows may not straddle buffers, beyond a
/// binding only), with windows that start and end anywhere in a buffer. Bit for bit with the
/// reference.
#[test]
fn large_pieces_ending_inside_a_quad_cross_buffers() {
    for (buffer, binding) in [(Some(1u64 << 20), None), (None, Some((1 << 20) + 100))] {
        let ctx = Context::new_blocking(ContextOptions {
            max_buffer_size: buffer,
            max_binding_size: binding,
            cpu_kernels: cpu_kernels_from_env(),
            ..Default::default()
        })
        .unwrap();
        // Integers: random float bits hold NaNs, whose payloads a sum may carry either way.
        for dtype in [DType::U8, DType::I16, DType::I32, DType::I64] {
            // About 3.3 MiB: pieces of a buffer or a window each, the last one shorter.
            let n = (3_300_001 / dtype.size()) | 1;
            let shape = [n / 1021, 1021];
            let x = random_tensor(7, dtype, &shape);
            let y = random_tensor(8, dtype, &shape[1..]);
            let g = Graph::new()
                .input("x", dtype, &shape.map(Some))
                .input("y", dtype, &[Some(shape[1])])
                .node(Node::new("Add", "a").inputs(["x", "y"]).outputs(["t"]))
                .node(Node::new("Mul", "m").inputs(["t", "y"]).outputs(["z"]))
                .output("z");
            let before = ctx.stats().dispatches;
            let (got, want) = both(&ctx, &g, &[("x", x.clone()), ("y", y)]);
            let dispatches = ctx.stats().dispatches - before;
            assert!(
                got == want,
                "Add, Mul {dtype} {shape:?}, {buffer:?} {binding:?}"
            );
            if buffer.is_some() {
                // Pieces in buffers of 2^20 bytes, each of whole rows of 1021 (none of them a
                // multiple of 16 here) or cut at a buffer's end: two dispatches each.
                let bytes = (shape[0] * shape[1] * dtype.size()) as u64;
                assert!(
                    dispatches >= 2 * bytes.div_ceil(1 << 20),
                    "{dtype}: {dispatches} dispatches"
                );
            }
            // Rows of 1021 + 1 straddle the buffers' ends: the words whose inputs lie on both
            // sides of one read a copy of those inputs (in buffers of 2^20 bytes).
            for (mode, pads) in [("reflect", [0i64, 1, 1, 0]), ("edge", [0, 2, 0, 1])] {
                let g = pad_graph(dtype, &shape, &pads, mode);
                let (got, want) = both(&ctx, &g, &[("x", x.clone())]);
                assert!(
                    got == want,
                    "Pad {mode} {dtype} {shape:?}, {buffer:?} {binding:?}"
                );
            }
        }
    }
}

/// A graph of one ONNX Pad of `x` (`dtype`, `shape`) by constant `pads` in `mode`.
fn pad_graph(dtype: DType, shape: &[usize], pads: &[i64], mode: &str) -> Graph {
    let dims: Vec<Option<usize>> = shape.iter().map(|&d| Some(d)).collect();
    Graph::new()
        .input("x", dtype, &dims)
        .constant(
            "pads",
            HostTensor::from_vec(vec![pads.len()], pads).unwrap(),
        )
        .node(
            Node::new("Pad", "p")
                .inputs(["x", "pads"])
                .outputs(["y"])
                .attr("mode", Attr::String(mode.into())),
        )
        .output("y")
}

/// Indices in `[-dim, dim)` of `shape`, scrambled, as i64 or i32.
fn picks(shape: &[usize], dim: usize, seed: u64, wide: bool) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = bytes(seed, 2 * n)
        .chunks(2)
        .map(|b| (u16::from_le_bytes([b[0], b[1]]) as i64) % (2 * dim as i64) - dim as i64)
        .collect();
    if wide {
        HostTensor::from_vec(shape.to_vec(), &v).unwrap()
    } else {
        let narrow: Vec<i32> = v.iter().map(|&i| i as i32).collect();
        HostTensor::from_vec(shape.to_vec(), &narrow).unwrap()
    }
}

/// Gather, GatherElements, GatherND and ArrayFeatureExtractor whose data, indices and outputs
/// cross buffers and bindings run in passes over windows of each (they were refused as "bound
/// at once"): elements of 1, 2, 4 and 8 bytes, rows of whole 16-byte quads (an embedding
/// table's layout) and rows of single elements, several outer slices, i32 and i64 indices,
/// negative ones; bit for bit with the CPU reference, on every context of [`contexts`] and
/// with the kernels for GPUs.
#[test]
fn gathers_cross_buffers_and_bindings() {
    type Case<'a> = (&'a str, DType, &'a [usize], i64, &'a [usize]);
    let cases: [Case; 11] = [
        // Rows of 20 bytes: an element per invocation.
        ("Gather", DType::U8, &[30, 20], 0, &[50]),
        // Rows of 32 bytes: a quad per invocation.
        ("Gather", DType::F32, &[60, 8], 0, &[45]),
        ("Gather", DType::F16, &[3, 40, 5], 1, &[7, 9]),
        ("Gather", DType::F64, &[4, 50, 2], 1, &[30]),
        ("Gather", DType::I64, &[200], 0, &[300]),
        ("Gather", DType::Bool, &[5, 301], -1, &[2, 3]),
        ("GatherElements", DType::U8, &[7, 90], 1, &[7, 200]),
        ("GatherElements", DType::F16, &[40, 9], 0, &[70, 9]),
        ("GatherElements", DType::F32, &[3, 50, 4], 1, &[3, 41, 4]),
        ("GatherElements", DType::I64, &[150, 2], 0, &[120, 1]),
        ("GatherND", DType::F32, &[30, 20], 0, &[60, 1]),
    ];
    let mut contexts = contexts();
    contexts.extend(contexts_with(Some(false)));
    for (seed, (op, dtype, shape, axis, at)) in cases.into_iter().enumerate() {
        let rank = shape.len() as i64;
        let dim = shape[((axis + rank) % rank) as usize];
        let x = random_tensor(seed as u64, dtype, shape);
        // Larger than the bindings of 256 and 300 bytes.
        assert!(x.data.len() > 300, "{op} {shape:?}");
        for wide in [false, true] {
            let indices = picks(at, dim, 100 + seed as u64, wide || op == "GatherND");
            let mut node = Node::new(op, "g").inputs(["x", "i"]).outputs(["y"]);
            if op != "GatherND" {
                node = node.attr("axis", Attr::Int(axis));
            }
            let g = Graph::new()
                .input(
                    "x",
                    dtype,
                    &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                )
                .input(
                    "i",
                    indices.dtype,
                    &at.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
                )
                .node(node)
                .output("y");
            let inputs = [("x", x.clone()), ("i", indices)];
            for ctx in &contexts {
                let (got, want) = both(ctx, &g, &inputs);
                let what = format!(
                    "{op} {dtype} {shape:?} axis {axis} by {at:?} (wide {wide}), buffers of {}",
                    ctx.max_buffer_size()
                );
                assert_eq!(got, want, "{what}");
            }
        }
    }
    // ONNX-ML's ArrayFeatureExtractor gathers along the last axis.
    let x = random_tensor(9, DType::F32, &[4, 150]);
    let g = Graph::new()
        .input("x", DType::F32, &[Some(4), Some(150)])
        .input("i", DType::I64, &[Some(80)])
        .node(
            Node::new("ai.onnx.ml.ArrayFeatureExtractor", "g")
                .inputs(["x", "i"])
                .outputs(["y"]),
        )
        .output("y");
    let columns: Vec<i64> = (0..80).map(|i| (i * 37 + 11) % 150).collect();
    let inputs = [
        ("x", x),
        ("i", HostTensor::from_vec(vec![80], &columns).unwrap()),
    ];
    for ctx in &contexts {
        let (got, want) = both(ctx, &g, &inputs);
        assert_eq!(
            got,
            want,
            "ArrayFeatureExtractor, buffers of {}",
            ctx.max_buffer_size()
        );
    }
}

/// A scatter case: the op, the dtype, the data's shape, the indices' shape and values, the
/// index dtype, attributes.
type ScatterCase<'a> = (
    &'a str,
    DType,
    &'a [usize],
    &'a [usize],
    Vec<i64>,
    DType,
    Vec<(&'a str, Attr)>,
);

/// `n` indices in `[-dim, dim)`, repeating.
fn indices_along(n: usize, dim: usize, seed: u64) -> Vec<i64> {
    bytes(seed, n)
        .iter()
        .map(|&b| i64::from(b) % (2 * dim as i64) - dim as i64)
        .collect()
}

/// Runs each case (random data and updates) on every context of [`contexts`] and with the
/// kernels for GPUs, bit for bit with the CPU reference; `sizes` checks the bytes of the data,
/// the indices and the updates (that the case exceeds the bindings it is about).
fn check_scatters(cases: Vec<ScatterCase>, sizes: impl Fn(usize, usize, usize) -> bool) {
    let mut contexts = contexts();
    contexts.extend(contexts_with(Some(false)));
    for (seed, (op, dtype, shape, at, picks, index_dtype, attrs)) in cases.into_iter().enumerate() {
        let x = random_tensor(seed as u64, dtype, shape);
        let indices = match index_dtype {
            DType::I64 => HostTensor::from_vec(at.to_vec(), &picks).unwrap(),
            _ => {
                let picks: Vec<i32> = picks.iter().map(|&i| i as i32).collect();
                HostTensor::from_vec(at.to_vec(), &picks).unwrap()
            }
        };
        let updates_shape: Vec<usize> = if op == "ScatterND" {
            at[..at.len() - 1]
                .iter()
                .chain(&shape[at[at.len() - 1]..])
                .copied()
                .collect()
        } else if at.len() == 4 && at.iter().product::<usize>() == picks.len() {
            // TensorScatter's expansion: indices repeat over axes 1 and 3.
            vec![at[0], shape[1], at[2], shape[3]]
        } else {
            at.to_vec()
        };
        let updates = random_tensor(50 + seed as u64, dtype, &updates_shape);
        assert!(
            sizes(x.data.len(), indices.data.len(), updates.data.len()),
            "{op} {shape:?} by {at:?}"
        );
        let mut node = Node::new(op, "s").inputs(["x", "i", "u"]).outputs(["y"]);
        for (k, v) in &attrs {
            node = node.attr(*k, v.clone());
        }
        let dims = |s: &[usize]| s.iter().map(|&d| Some(d)).collect::<Vec<_>>();
        let g = Graph::new()
            .input("x", dtype, &dims(shape))
            .input("i", index_dtype, &dims(at))
            .input("u", dtype, &dims(&updates_shape))
            .node(node)
            .output("y");
        let inputs = [("x", x), ("i", indices), ("u", updates)];
        for ctx in &contexts {
            let (got, want) = both(ctx, &g, &inputs);
            assert_eq!(
                got,
                want,
                "{op} {dtype} {shape:?} by {at:?} {index_dtype}, buffers of {}",
                ctx.max_buffer_size()
            );
        }
    }
}

/// ScatterElements and ScatterND whose data (so output) crosses buffers and bindings scatter in
/// passes over windows of the output, each writing the updates that land in it (the output
/// was refused as "bound at once"): the walks in order (repeated indices, the last write or
/// the reduction in order), distinct targets by elements and by rows of whole quads (a KV
/// cache's update, as TensorScatter's expansion makes it), and ScatterND's claimed slices by
/// elements and by quads; elements of 1, 2, 4 and 8 bytes; bit for bit with the CPU reference
/// on every context of [`contexts`] and with the kernels for GPUs.
#[test]
fn scatters_cross_buffers_and_bindings() {
    let axis = |a: i64| ("axis", Attr::Int(a));
    let reduction = |r: &str| ("reduction", Attr::String(r.into()));
    // Distinct positions 3, 4 and 30, 31 of a cache of 40, per batch item.
    let cache_rows: Vec<i64> = vec![3, 4, 30, 31];
    let cases: Vec<ScatterCase> = vec![
        (
            "ScatterElements",
            DType::U8,
            &[30, 20],
            &[3, 20],
            indices_along(60, 30, 1),
            DType::I32,
            vec![axis(0)],
        ),
        (
            "ScatterElements",
            DType::F32,
            &[40, 8],
            &[20, 3],
            indices_along(60, 8, 2),
            DType::I32,
            vec![axis(1), reduction("add")],
        ),
        (
            "ScatterElements",
            DType::I64,
            &[60, 5],
            &[6, 5],
            indices_along(30, 60, 3),
            DType::I32,
            vec![axis(0), reduction("max")],
        ),
        (
            "ScatterElements",
            DType::F16,
            &[2, 3, 40, 8],
            &[2, 1, 2, 1],
            cache_rows.clone(),
            DType::I32,
            vec![axis(2), ("unique_indices", Attr::Int(1))],
        ),
        (
            "ScatterElements",
            DType::U8,
            &[2, 3, 40, 7],
            &[2, 1, 2, 1],
            cache_rows,
            DType::I32,
            vec![axis(2), ("unique_indices", Attr::Int(1))],
        ),
        (
            "ScatterND",
            DType::F32,
            &[50, 6],
            &[10, 1],
            indices_along(10, 50, 4),
            DType::I32,
            vec![],
        ),
        (
            "ScatterND",
            DType::U8,
            &[40, 16],
            &[12, 1],
            indices_along(12, 40, 5),
            DType::I32,
            vec![],
        ),
        (
            "ScatterND",
            DType::F16,
            &[300],
            &[40, 1],
            indices_along(40, 300, 6),
            DType::I32,
            vec![],
        ),
        (
            "ScatterND",
            DType::I64,
            &[30, 4],
            &[8, 1],
            indices_along(8, 30, 7),
            DType::I32,
            vec![reduction("mul")],
        ),
    ];
    // Data past the bindings of 256 and 300 bytes; indices and updates in one buffer of 256
    // bytes.
    check_scatters(cases, |data, indices, updates| {
        data > 300 && indices <= 256 && updates <= 256
    });
}

/// Scatters whose indices and updates exceed one binding (or buffer) read them in boxes of the
/// walk that fit a window of each (they were refused as "bound at once"): walks in order with
/// repeated indices split along the scattered axis and across columns (the last write and the
/// reductions in order), distinct targets by elements and by quads, ScatterND's claims by
/// elements and by quads with repeated tuples, slices longer than a window cut within a tuple,
/// i32 and i64 indices, negative ones; bit for bit with the CPU reference on every context of
/// [`contexts`] and with the kernels for GPUs.
#[test]
fn scatters_read_updates_and_indices_in_windows() {
    let axis = |a: i64| ("axis", Attr::Int(a));
    let reduction = |r: &str| ("reduction", Attr::String(r.into()));
    // Distinct rows of a cache of 40: 0..20 shuffled, per batch item.
    let rows: Vec<i64> = (0..40).map(|k| (k * 7 % 20) as i64).collect();
    let cases: Vec<ScatterCase> = vec![
        // One column of 300 steps with repeats: the walk is cut along the scattered axis.
        (
            "ScatterElements",
            DType::F32,
            &[300],
            &[300],
            indices_along(300, 300, 11),
            DType::I32,
            vec![axis(0)],
        ),
        (
            "ScatterElements",
            DType::F32,
            &[200],
            &[260],
            indices_along(260, 200, 12),
            DType::I64,
            vec![axis(0), reduction("add")],
        ),
        (
            "ScatterElements",
            DType::U8,
            &[30, 20],
            &[30, 20],
            indices_along(600, 30, 13),
            DType::I32,
            vec![axis(0)],
        ),
        (
            "ScatterElements",
            DType::F32,
            &[40, 8],
            &[40, 8],
            indices_along(320, 8, 14),
            DType::I64,
            vec![axis(1), reduction("mul")],
        ),
        (
            "ScatterElements",
            DType::I64,
            &[60, 5],
            &[60, 5],
            indices_along(300, 60, 15),
            DType::I32,
            vec![axis(0), reduction("max")],
        ),
        (
            "ScatterElements",
            DType::F16,
            &[2, 3, 40, 8],
            &[2, 1, 20, 1],
            rows.clone(),
            DType::I64,
            vec![axis(2), ("unique_indices", Attr::Int(1))],
        ),
        (
            "ScatterElements",
            DType::U8,
            &[2, 3, 40, 7],
            &[2, 1, 20, 1],
            rows,
            DType::I32,
            vec![axis(2), ("unique_indices", Attr::Int(1))],
        ),
        (
            "ScatterND",
            DType::F32,
            &[50, 6],
            &[80, 1],
            indices_along(80, 50, 16),
            DType::I32,
            vec![],
        ),
        (
            "ScatterND",
            DType::U8,
            &[40, 16],
            &[40, 1],
            indices_along(40, 40, 17),
            DType::I64,
            vec![],
        ),
        (
            "ScatterND",
            DType::F16,
            &[300],
            &[200, 1],
            indices_along(200, 300, 18),
            DType::I32,
            vec![],
        ),
        (
            "ScatterND",
            DType::I64,
            &[30, 4],
            &[40, 1],
            indices_along(40, 30, 19),
            DType::I32,
            vec![reduction("mul")],
        ),
        (
            "ScatterND",
            DType::F32,
            &[4, 100],
            &[3, 1],
            vec![2, -1, 2],
            DType::I32,
            vec![],
        ),
        (
            "ScatterND",
            DType::F32,
            &[4, 100],
            &[3, 1],
            vec![1, -3, 0],
            DType::I64,
            vec![reduction("add")],
        ),
        (
            "ScatterND",
            DType::U8,
            &[10, 10, 3],
            &[60, 2],
            indices_along(120, 10, 20),
            DType::I64,
            vec![],
        ),
    ];
    // Updates or indices past the bindings of 256 and 300 bytes.
    check_scatters(cases, |_, indices, updates| indices > 300 || updates > 300);
}

/// Random draws whose output (and Bernoulli's probabilities) exceed a binding or a buffer run
/// in passes over windows of whole 16-byte blocks (they were refused as "bound at once"):
/// uniform and normal draws in f32 and f64, Bernoulli and Multinomial, each bit for bit the
/// numbers the same stream draws with everything bound whole (a block's values depend only on
/// its number), on every context of [`contexts`] and with the kernels for GPUs. Multinomial's
/// running sums past a binding (they were refused as "bound at once") are read in windows of
/// whole rows: rows of 160, 104 and 120 bytes, which lie across buffer ends, blocks of
/// samples that straddle rows (3 f64 samples a row, 2 a block) and blocks of 4 rows (one
/// sample a row) that a window of 2 rows reaches only in part.
#[test]
fn random_draws_cross_buffers_and_bindings() {
    let logits = |rows: usize, classes: usize, dtype: DType| {
        let v: Vec<f64> = (0..rows * classes)
            .map(|k| ((k * 7919) % 23) as f64 / 4.0 - 2.0)
            .collect();
        let t = HostTensor::from_vec(vec![rows, classes], &v).unwrap();
        reference::cast_host(&t, dtype).unwrap()
    };
    let draw = |ctx: &Context| -> Vec<HostTensor> {
        let stream = RandomStream::new(ctx, 7).unwrap();
        let probs: Vec<f32> = (0..301).map(|k| (k % 11) as f32 / 10.0).collect();
        let probs = HostTensor::from_vec(vec![301], &probs).unwrap();
        let small = [0.0f32, 1.0, 2.0, 2.0, 0.0, -1.0];
        let small = HostTensor::from_vec(vec![2, 3], &small).unwrap();
        let up = |t: &HostTensor| Tensor::from_host(ctx, t).unwrap();
        let p = up(&probs);
        let small = up(&small);
        let wide = up(&logits(7, 40, DType::F32));
        let f64s = up(&logits(5, 13, DType::F64));
        let single = up(&logits(9, 30, DType::F32));
        let drawn = ctx
            .run(|rec| {
                Ok(vec![
                    rec.random_uniform_to(&stream, DType::F32, &[301], -1.0, 3.0, Out::NEW)?,
                    rec.random_normal_to(&stream, DType::F32, &[5, 70], 0.5, 2.0, Out::NEW)?,
                    rec.random_uniform_to(&stream, DType::F64, &[150], 0.0, 1.0, Out::NEW)?,
                    rec.random_normal_to(&stream, DType::F64, &[77], 0.0, 1.0, Out::NEW)?,
                    rec.bernoulli_to(&stream, &p, DType::F32, Out::NEW)?,
                    rec.multinomial_to(&stream, &small, 150, DType::I64, Out::NEW)?,
                    rec.multinomial_to(&stream, &wide, 20, DType::I32, Out::NEW)?,
                    rec.multinomial_to(&stream, &f64s, 3, DType::I64, Out::NEW)?,
                    rec.multinomial_to(&stream, &single, 1, DType::I32, Out::NEW)?,
                ])
            })
            .unwrap();
        drawn
            .iter()
            .map(|t| t.to_host_blocking().unwrap())
            .collect()
    };
    let want = draw(ctx());
    // The classes drawn are spread over the rows' classes (not one class or zeros).
    for w in &want[6..] {
        let classes: std::collections::BTreeSet<i64> = reference::cast_host(w, DType::I64)
            .unwrap()
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .collect();
        assert!(
            classes.len() > 1 && classes.iter().all(|&c| (0..40).contains(&c)),
            "{classes:?}"
        );
    }
    let mut contexts = contexts();
    contexts.extend(contexts_with(Some(false)));
    for c in &contexts {
        let got = draw(c);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                w.data.len() > 300 || matches!(k, 3 | 6..),
                "draw {k} past the bindings"
            );
            assert_eq!(g, w, "draw {k}, buffers of {}", c.max_buffer_size());
        }
    }
}

/// CumSum and TopK whose tensors cross buffers and bindings run in windows of whole slices
/// before their axis (they were refused as "bound at once"), and CumSum's slices larger than
/// a window or crossing a buffer end in stretches along the axis: f32 and i64, exclusive and
/// reversed sums, the largest and the smallest; bit for bit with the CPU reference on every
/// context of [`contexts`] and with the kernels for GPUs (TopK's slices across buffer ends
/// in copies laid out in whole slices, CumSum's rows across them in copies laid out in whole
/// rows). A TopK slice larger than a window, and a CumSum row, are refused in one line
/// naming the limit.
#[test]
fn cumsums_and_topks_cross_buffers_and_bindings() {
    // The op, the dtype, the shape, CumSum's axis or TopK's K (along axis -1), attributes.
    type Case<'a> = (&'a str, DType, &'a [usize], i64, Vec<(&'a str, Attr)>);
    let cases: Vec<Case> = vec![
        ("CumSum", DType::F32, &[40, 16], 1, vec![]),
        (
            "CumSum",
            DType::I64,
            &[20, 4, 2],
            1,
            vec![("exclusive", Attr::Int(1)), ("reverse", Attr::Int(1))],
        ),
        ("TopK", DType::F32, &[40, 16], 4, vec![]),
        (
            "TopK",
            DType::I64,
            &[30, 8],
            4,
            vec![("largest", Attr::Int(0))],
        ),
        // Slices of 40 bytes: windows start before their first slice. They cross buffer ends
        // in buffers of 256 and 512 bytes: TopK's (and its 12- and 24-byte outputs) run in
        // copies laid out in whole slices, CumSum's in stretches.
        (
            "CumSum",
            DType::F32,
            &[20, 10],
            1,
            vec![("exclusive", Attr::Int(1))],
        ),
        ("TopK", DType::F32, &[20, 10], 3, vec![]),
        // Slices of 128 bytes keeping 1: split (where told), a slice's lists fit the
        // bindings of 256 and 300 bytes (16 chunks of one or two positions' best and their
        // merges), so split lines run in windows too.
        ("TopK", DType::F32, &[40, 32], 1, vec![]),
        // Slices of 208 bytes: their windows start before them (in one buffer of 1 KiB).
        ("TopK", DType::F32, &[4, 52], 1, vec![]),
        (
            "TopK",
            DType::I64,
            &[30, 16],
            1,
            vec![("largest", Attr::Int(0))],
        ),
        // Lines of 300 elements (1200 and 2400 bytes) and rows of 2 along them: stretches,
        // their sums carried from one to the next.
        ("CumSum", DType::F32, &[300], 0, vec![]),
        (
            "CumSum",
            DType::F32,
            &[300],
            0,
            vec![("exclusive", Attr::Int(1)), ("reverse", Attr::Int(1))],
        ),
        (
            "CumSum",
            DType::I64,
            &[2, 150, 2],
            1,
            vec![("reverse", Attr::Int(1))],
        ),
        (
            "CumSum",
            DType::I64,
            &[3, 100],
            1,
            vec![("exclusive", Attr::Int(1))],
        ),
        // Rows of 28 and 24 bytes along the axis, which no buffer here holds a whole number
        // of: the sums run over copies laid out in whole rows.
        ("CumSum", DType::F32, &[60, 7], 0, vec![]),
        (
            "CumSum",
            DType::I64,
            &[3, 30, 3],
            1,
            vec![("exclusive", Attr::Int(1)), ("reverse", Attr::Int(1))],
        ),
    ];
    // And the lines split: CumSum's as scans (in chunks with the CPU kernels, in blocks with
    // the GPU ones), the stretches' sums carried from one scan to the next (the sums of these
    // sixteenths are exact in any order); TopK's in chunks merged, where their lists fit a
    // binding.
    let mut contexts = contexts();
    contexts.extend(contexts_with(Some(false)));
    for cpu_kernels in [Some(true), Some(false)] {
        contexts.extend(contexts_from(ContextOptions {
            cpu_kernels,
            split_lines: Some(true),
            ..Default::default()
        }));
    }
    let dims = |s: &[usize]| s.iter().map(|&d| Some(d)).collect::<Vec<_>>();
    for (seed, (op, dtype, shape, value, attrs)) in cases.into_iter().enumerate() {
        let x = if dtype == DType::F32 {
            let v: Vec<f32> = bytes(seed as u64, shape.iter().product())
                .iter()
                .map(|&b| f32::from(b) / 16.0 - 8.0)
                .collect();
            HostTensor::from_vec(shape.to_vec(), &v).unwrap()
        } else {
            random_tensor(seed as u64, dtype, shape)
        };
        assert!(x.data.len() > 300, "{op} {shape:?}");
        let (second, value, outputs) = match op {
            "CumSum" => ("axis", HostTensor::from_vec(vec![], &[value]).unwrap(), 1),
            _ => ("k", HostTensor::from_vec(vec![1], &[value]).unwrap(), 2),
        };
        let names: Vec<String> = (0..outputs).map(|i| format!("y{i}")).collect();
        let mut node = Node::new(op, "n")
            .inputs(["x", second])
            .outputs(names.iter().cloned());
        for (k, v) in &attrs {
            node = node.attr(*k, v.clone());
        }
        let mut g = Graph::new()
            .input("x", dtype, &dims(shape))
            .input(second, DType::I64, &dims(&value.shape))
            .node(node);
        for n in &names {
            g = g.output(n);
        }
        let inputs = [("x", x), (second, value)];
        for ctx in &contexts {
            let (got, want) = both(ctx, &g, &inputs);
            assert_eq!(
                got,
                want,
                "{op} {dtype} {shape:?}, buffers of {}",
                ctx.max_buffer_size()
            );
        }
    }
    // TopK over a line of 300 f32 (1200 bytes) does not fit a window of 256 bytes, nor does
    // CumSum over rows of 70 f32 (280 bytes).
    let ctx = &contexts[1];
    for (op, shape, axis, what) in [
        ("TopK", [300, 1], -2, "one slice before the axis"),
        ("CumSum", [4, 70], 0, "one row along the axis"),
    ] {
        let second = if op == "TopK" { "k" } else { "axis" };
        let value = match op {
            "TopK" => HostTensor::from_vec(vec![1], &[3i64]).unwrap(),
            _ => HostTensor::from_vec(vec![], &[0i64]).unwrap(),
        };
        let mut node = Node::new(op, "n").inputs(["x", second]).outputs(["y"]);
        if op == "TopK" {
            node = node.outputs(["y", "at"]).attr("axis", Attr::Int(axis));
        }
        let g = Graph::new()
            .input("x", DType::F32, &dims(&shape))
            .constant(second, value)
            .node(node)
            .output("y");
        let x =
            HostTensor::from_vec(shape.to_vec(), &vec![1.0f32; shape.iter().product()]).unwrap();
        let e = Session::new(ctx, g)
            .unwrap()
            .run_blocking(vec![("x".to_string(), x)])
            .unwrap_err();
        let line = e.to_string();
        assert!(line.contains(op) && line.contains(what), "{line}");
        assert!(
            line.contains("max_storage_buffer_binding_size") && !line.contains('\n'),
            "{line}"
        );
    }
}

/// TreeWalk's rows and leaves crossing buffers and bindings run in windows of whole rows, a
/// dispatch each (they were refused as "bound at once"); tables one binding holds stay bound
/// whole. Rows of 16 and 32 bytes (f32 and f64, native and emulated) in windows that start
/// before them, values that meet every threshold's equality and NaNs sent by the rule's NaN
/// bit: bit for bit with the CPU reference on every context of [`contexts`], with the GPU
/// kernels and without f64. Rows and leaves lying across buffer ends (12 and 24 bytes a row, 3
/// trees) are walked in copies laid out in whole rows; rows no buffer holds whole (100 bytes
/// in buffers of 256) are refused in one line naming them. Tables beyond a binding (a forest
/// of 22 trees) are walked in groups of trees whose nodes fit one window (they were refused),
/// bit for bit the reference; a tree whose nodes lie across a buffer end of the tables, or
/// are more than a window holds, is refused in one line naming it.
#[test]
fn tree_walks_cross_buffers_and_bindings() {
    const LESS: i32 = 1;
    const EQUAL: i32 = 2;
    const GREATER: i32 = 4;
    const NAN: i32 = 8;
    const LEAF: i32 = 16;
    // Four trees (the last a leaf alone): feature, true child, false child, rule.
    let nodes: Vec<i32> = [
        [0, 1, 2, LESS],
        [0, 0, 0, LEAF],
        [2, 3, 4, GREATER | NAN],
        [0, 0, 0, LEAF],
        [0, 0, 0, LEAF],
        [1, 6, 7, LESS | EQUAL],
        [0, 0, 0, LEAF],
        [3, 8, 9, LESS | NAN],
        [0, 0, 0, LEAF],
        [0, 0, 0, LEAF],
        [1, 11, 12, EQUAL],
        [0, 0, 0, LEAF],
        [0, 0, 0, LEAF],
    ]
    .concat();
    let thresholds = [
        0.5, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.0, 0.0,
    ];
    let walk =
        |dtype: DType, rows: usize, features: usize, tables: (&[i32], &[f64]), roots: &[i32]| {
            let host = |shape: Vec<usize>, v: &[f64]| {
                match dtype {
                    DType::F32 => HostTensor::from_vec(
                        shape,
                        &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                    ),
                    _ => HostTensor::from_vec(shape, v),
                }
                .unwrap()
            };
            // -2 to 2 in halves, every seventh a NaN.
            let values: Vec<f64> = bytes(rows as u64, rows * features)
                .iter()
                .enumerate()
                .map(|(i, &b)| match i % 7 {
                    6 => f64::NAN,
                    _ => f64::from(b % 9) / 2.0 - 2.0,
                })
                .collect();
            let g = Graph::new()
                .input("x", dtype, &[Some(rows), Some(features)])
                .constant(
                    "nodes",
                    HostTensor::from_vec(vec![tables.0.len() / 4, 4], tables.0).unwrap(),
                )
                .constant("thresholds", host(vec![tables.1.len()], tables.1))
                .constant(
                    "roots",
                    HostTensor::from_vec(vec![roots.len()], roots).unwrap(),
                )
                .node(
                    Node::new("TreeWalk", "walk")
                        .inputs(["x", "nodes", "thresholds", "roots"])
                        .outputs(["leaves"])
                        .attr("depth", Attr::Int(3)),
                )
                .output("leaves");
            (g, host(vec![rows, features], &values))
        };
    let mut contexts = contexts();
    contexts.extend(contexts_with(Some(false)));
    contexts.extend(contexts_from(ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    }));
    for (dtype, rows) in [(DType::F32, 41usize), (DType::F64, 41), (DType::F32, 100)] {
        let (g, x) = walk(dtype, rows, 4, (&nodes, &thresholds), &[0, 5, 10, 12]);
        let leaves = rows * 4 * 4;
        for ctx in &contexts {
            let bound = ctx.binding_limit().min(ctx.max_buffer_size());
            assert!(x.data.len().min(leaves) as u64 > bound, "{dtype} {rows}");
            let (got, want) = both(ctx, &g, &[("x", x.clone())]);
            assert_eq!(
                got,
                want,
                "{dtype} {rows}, buffers of {}",
                ctx.max_buffer_size()
            );
        }
        let (_, want) = both(&contexts[0], &g, &[("x", x.clone())]);
        let reached: std::collections::BTreeSet<i32> =
            want[0].to_vec::<i32>().unwrap().into_iter().collect();
        assert_eq!(reached.len(), 8, "every leaf reached: {reached:?}");
    }
    let refused = |g: Graph, x: HostTensor| {
        Session::new(&contexts[0], g)
            .and_then(|s| s.run_blocking(vec![("x".to_string(), x)]))
            .unwrap_err()
            .to_string()
    };
    // Rows of 12 and 24 bytes lie across the ends of buffers of 256, 512 and 1024 (node 7
    // reading feature 2), and so do three trees' leaves: walked in copies laid out in whole
    // rows (they were refused).
    let mut three = nodes.clone();
    three[7 * 4] = 2;
    for (dtype, roots) in [(DType::F32, &[0, 5, 10][..]), (DType::F64, &[0, 5, 10, 12])] {
        let (g, x) = walk(dtype, 41, 3, (&three, &thresholds), roots);
        for ctx in &contexts {
            let (got, want) = both(ctx, &g, &[("x", x.clone())]);
            assert_eq!(
                got,
                want,
                "{dtype}, 3 features, buffers of {}",
                ctx.max_buffer_size()
            );
        }
    }
    // Rows of 100 bytes: no buffer of 256 bytes ends on both a whole row and a whole quad.
    let (g, x) = walk(DType::F32, 41, 25, (&three, &thresholds), &[0, 5, 10, 12]);
    let e = refused(g, x);
    assert!(
        e.contains("TreeWalk") && e.contains("(100 bytes each) lie across") && !e.contains('\n'),
        "{e}"
    );
    // A forest of 128 nodes (2 KiB, thresholds 512 bytes in f32, 1 KiB in f64) beyond
    // bindings of 256 and 300 bytes and buffers of 1 KiB and 256 bytes: 22 trees of 1, 3 and
    // 7 nodes (every fourth with its root after its children, the others breadth first),
    // walked in groups of trees whose nodes fit one window; in buffers of 256 bytes (16 nodes)
    // some groups lie across a buffer end (the third tree, nodes 14 to 16) and read a copy.
    let mut forest = Vec::new();
    let mut roots = Vec::new();
    let sizes = [
        7, 7, 3, 1, 7, 7, 7, 3, 7, 7, 1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 1,
    ];
    let rules = [LESS, GREATER | NAN, LESS | EQUAL, EQUAL, LESS | NAN];
    for (t, &size) in sizes.iter().enumerate() {
        let base = forest.len() as i32 / 4;
        // Breadth-first position p at index `at(p)`: reversed for every fourth tree.
        let at = |p: i32| {
            if t % 4 == 3 {
                base + size - 1 - p
            } else {
                base + p
            }
        };
        let mut block = vec![[0, 0, 0, LEAF]; size as usize];
        for p in 0..size / 2 {
            let node = [
                (p + t as i32) % 4,
                at(2 * p + 1),
                at(2 * p + 2),
                rules[(p as usize + t) % 5],
            ];
            block[(at(p) - base) as usize] = node;
        }
        forest.extend(block.concat());
        roots.push(at(0));
    }
    assert_eq!(forest.len(), 128 * 4);
    let cuts: Vec<f64> = (0..128).map(|k| f64::from(k % 5) / 2.0 - 1.0).collect();
    let mut limited = crate::contexts();
    let grouped = [
        binding_context(256),
        binding_context(300),
        limited.swap_remove(1),
        limited.swap_remove(0),
    ];
    for dtype in [DType::F32, DType::F64] {
        let (g, x) = walk(dtype, 41, 4, (&forest, &cuts), &roots);
        for ctx in &grouped {
            let bound = ctx.binding_limit().min(ctx.max_buffer_size());
            assert!(2048 > bound, "the node table beyond a binding or a buffer");
            let (got, want) = both(ctx, &g, &[("x", x.clone())]);
            assert_eq!(
                got,
                want,
                "{dtype} forest, bindings of {}",
                ctx.binding_limit()
            );
        }
    }
    // A tree of 15 nodes (240 bytes) is beyond a window of 256 bytes.
    // A tree of 15 nodes, then five leaves alone (320 bytes in all).
    let fifteen: Vec<i32> = (0..20)
        .flat_map(|p| match p {
            0..7 => [p % 4, 2 * p + 1, 2 * p + 2, LESS],
            _ => [0, 0, 0, LEAF],
        })
        .collect();
    let (g, x) = walk(DType::F32, 2, 4, (&fifteen, &cuts[..20]), &[0, 15, 16, 17]);
    let e = Session::new(&grouped[0], g)
        .and_then(|s| s.run_blocking(vec![("x".to_string(), x)]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("TreeWalk")
            && e.contains("tree 0's 15 nodes, bound at once")
            && !e.contains('\n'),
        "{e}"
    );
}

/// [`contexts`] and those contexts without f64 (emulated), and the default contexts with and
/// without f64, which bind these tests' tensors whole.
fn contexts_and_whole() -> (Vec<Context>, [Context; 2]) {
    let without_f64 = ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    };
    let mut contexts = contexts();
    contexts.extend(contexts_from(without_f64.clone()));
    let whole = [
        Context::new_blocking(Default::default()).unwrap(),
        Context::new_blocking(without_f64).unwrap(),
    ];
    (contexts, whole)
}

/// Det's matrices and determinants crossing buffers and bindings run in windows of whole
/// matrices (they were refused as "bound at once"): [100, 2, 2], [100, 4, 4] and [20, 4, 4]
/// in f32 and f64 (native and emulated), and [30, 3, 3] and [20, 3, 3], whose matrices lie
/// across buffer ends (reduced in a copy of whole matrices), on every context of
/// [`contexts`]: bit for bit the
/// determinants of the same kernel bound whole on the default context (the same arithmetic),
/// and within 1e-4 of the CPU reference. And [8, 40, 40] f32 in bindings of 16 KiB: two
/// matrices to a window, their columns in two dispatches (the second reads the determinants
/// so far from its window).
#[test]
fn determinants_cross_buffers_and_bindings() {
    let (contexts, whole) = contexts_and_whole();
    let wide = Context::new_blocking(ContextOptions {
        max_buffer_size: Some(1 << 16),
        max_binding_size: Some(16384),
        webgpu_limits: ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap();
    for (dtype, shape) in [
        (DType::F32, [100usize, 2, 2]),
        (DType::F32, [100, 4, 4]),
        (DType::F64, [20, 4, 4]),
        (DType::F64, [100, 2, 2]),
        // Matrices of 36 and 72 bytes lie across buffer ends: reduced in copies laid out in
        // whole matrices.
        (DType::F32, [30, 3, 3]),
        (DType::F64, [20, 3, 3]),
        (DType::F32, [8, 40, 40]),
    ] {
        let n: usize = shape.iter().product();
        let values: Vec<f64> = bytes(n as u64, n)
            .iter()
            .map(|&b| f64::from(b) / 64.0 - 2.0)
            .collect();
        let x = match dtype {
            DType::F32 => HostTensor::from_vec(
                shape.to_vec(),
                &values.iter().map(|&v| v as f32).collect::<Vec<_>>(),
            ),
            _ => HostTensor::from_vec(shape.to_vec(), &values),
        }
        .unwrap();
        let g = Graph::new()
            .input(
                "x",
                dtype,
                &[Some(shape[0]), Some(shape[1]), Some(shape[2])],
            )
            .node(Node::new("Det", "det").inputs(["x"]).outputs(["y"]))
            .output("y");
        let on: Vec<&Context> = match shape[1] {
            40 => vec![&wide],
            _ => contexts.iter().collect(),
        };
        for ctx in on {
            assert!(x.data.len() as u64 > ctx.binding_limit().min(ctx.max_buffer_size()));
            let before = ctx.stats().dispatches;
            let (got, want) = both(ctx, &g, &[("x", x.clone())]);
            if shape[1] == 40 {
                // Four windows of two matrices, two dispatches each (and the copy's).
                assert!(ctx.stats().dispatches - before >= 8);
            }
            let emulated = !ctx.features().contains(wgpu::Features::SHADER_F64);
            let (bound_whole, _) = both(&whole[usize::from(emulated)], &g, &[("x", x.clone())]);
            let what = format!("{dtype} {shape:?}, buffers of {}", ctx.max_buffer_size());
            assert_eq!(got, bound_whole, "{what}");
            let (got, want) = (as_f64(&got[0]), as_f64(&want[0]));
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{what}: {g} {w}");
            }
        }
    }
}

/// GridSample's taps (a row and a weight per output position and tap) crossing buffers and
/// bindings are computed in windows of whole positions, a dispatch each (they were refused as
/// "bound at once"): X [2, 4, 5, 6] sampled at [2, 7, 9] positions (grid coordinates
/// from -1.3 to 1.3: inside, on and past the borders), every mode and padding, f32 and f64
/// (native and emulated): nearest and linear bit for bit the same kernels bound whole on the
/// default context, and all within 1e-5 of the CPU reference (nearest: exactly). And X [1, 2,
/// 3, 4, 5] at [4, 5, 6] positions, nearest and linear, whose coordinates (12 and 24 bytes a
/// position) lie across buffer ends: read from a copy laid out in whole positions.
#[test]
fn grid_sample_taps_cross_buffers_and_bindings() {
    let (contexts, whole) = contexts_and_whole();
    // 2-D, and 3-D, whose positions' 12 and 24 bytes of coordinates lie across buffer ends.
    for (xs, gs) in [
        (&[2usize, 4, 5, 6][..], &[2usize, 7, 9, 2][..]),
        (&[1, 2, 3, 4, 5], &[1, 4, 5, 6, 3]),
    ] {
        let x_values: Vec<f64> = bytes(5, xs.iter().product())
            .iter()
            .map(|&b| f64::from(b) / 16.0 - 8.0)
            .collect();
        let g_values: Vec<f64> = bytes(6, gs.iter().product())
            .iter()
            .map(|&b| f64::from(b % 27) / 10.0 - 1.3)
            .collect();
        for dtype in [DType::F32, DType::F64] {
            let host = |shape: &[usize], v: &[f64]| {
                match dtype {
                    DType::F32 => HostTensor::from_vec(
                        shape.to_vec(),
                        &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                    ),
                    _ => HostTensor::from_vec(shape.to_vec(), v),
                }
                .unwrap()
            };
            let (x, grid) = (host(xs, &x_values), host(gs, &g_values));
            let dims = |s: &[usize]| s.iter().map(|&d| Some(d)).collect::<Vec<_>>();
            for (mode, padding, align) in ["nearest", "linear", "cubic"]
                .into_iter()
                .flat_map(|m| ["zeros", "border", "reflection"].map(|p| (m, p)))
                .flat_map(|(m, p)| [(m, p, 0), (m, p, 1)])
            {
                // Cubic sampling of 3-D inputs: 64 taps a position, slices beyond these buffers.
                if mode == "cubic" && xs.len() == 5 {
                    continue;
                }
                let g = Graph::new()
                    .input("x", dtype, &dims(xs))
                    .input("grid", dtype, &dims(gs))
                    .node(
                        Node::new("GridSample", "g")
                            .inputs(["x", "grid"])
                            .outputs(["y"])
                            .attr("mode", Attr::String(mode.into()))
                            .attr("padding_mode", Attr::String(padding.into()))
                            .attr("align_corners", Attr::Int(align)),
                    )
                    .output("y");
                let inputs = [("x", x.clone()), ("grid", grid.clone())];
                for ctx in &contexts {
                    // f64 cubic products come in slices of 512 bytes (16 taps x 4 channels): not
                    // in buffers of 256.
                    if dtype == DType::F64 && mode == "cubic" && ctx.max_buffer_size() < 512 {
                        continue;
                    }
                    assert!(
                        grid.data.len() as u64 > ctx.binding_limit().min(ctx.max_buffer_size())
                    );
                    let (got, want) = both(ctx, &g, &inputs);
                    let emulated = !ctx.features().contains(wgpu::Features::SHADER_F64);
                    let (bound_whole, _) = both(&whole[usize::from(emulated)], &g, &inputs);
                    let what = format!(
                        "{dtype} {mode} {padding} {align}, buffers of {}",
                        ctx.max_buffer_size()
                    );
                    // Cubic sums 16 taps a position: where their products lie across windows the
                    // reduction adds them in another order (measured: within 2e-6 of the sums
                    // bound whole).
                    if mode != "cubic" {
                        assert_eq!(got, bound_whole, "{what}");
                    }
                    let (got, want) = (as_f64(&got[0]), as_f64(&want[0]));
                    let tolerance = if mode == "nearest" { 0.0 } else { 1e-5 };
                    for (g, w) in got.iter().zip(&want) {
                        let close = (g - w).abs() <= tolerance * w.abs().max(1.0);
                        assert!(close || (g.is_nan() && w.is_nan()), "{what}: {g} {w}");
                    }
                }
            }
        }
    }
}

#[test]
fn group_normalizations_of_each_float_type_in_windows_on_one_context() {
    // Beyond one binding, GroupNormalization computes its f32 and f64 means from a program
    // of no steps (X as it is); both on one context once ran the f64 one with the f32 kernel,
    // which shared its name.
    let shape = [2usize, 6, 2, 4];
    let n: usize = shape.iter().product();
    for ctx in contexts() {
        for dtype in [DType::F32, DType::F64] {
            let g = Graph::new()
                .input("x", dtype, &shape.map(Some))
                .input("scale", dtype, &[Some(6)])
                .input("bias", dtype, &[Some(6)])
                .node(
                    Node::new("GroupNormalization", "gn")
                        .inputs(["x", "scale", "bias"])
                        .outputs(["y"])
                        .attr("num_groups", Attr::Int(2))
                        .attr("epsilon", Attr::Float(1e-4)),
                )
                .output("y");
            let floats = |seed: u64, len: usize, dims: &[usize]| {
                let v: Vec<f64> = bytes(seed, len)
                    .iter()
                    .map(|&b| (f64::from(b) - 128.0) / 32.0)
                    .collect();
                let t = HostTensor::from_vec(dims.to_vec(), &v).unwrap();
                reference::cast_host(&t, dtype).unwrap()
            };
            let inputs = [
                ("x", floats(1, n, &shape)),
                ("scale", floats(2, 6, &[6])),
                ("bias", floats(3, 6, &[6])),
            ];
            let (got, want) = both(&ctx, &g, &inputs);
            // onnxruntime's tolerance for float tests (rtol 1e-3 on f32), tighter on f64.
            let tol = if dtype == DType::F64 { 1e-9 } else { 1e-3 };
            assert_close(
                &got[0],
                &want[0],
                tol,
                tol,
                &format!("{dtype} GroupNormalization"),
            );
        }
    }
}

#[test]
fn later_runs_of_a_session_reuse_its_relaid_and_staged_copies() {
    // Softmax rows across buffer ends read a copy laid out in whole rows; MatMul and Pad
    // stage pieces that cross a window in copies of their own. A session's later runs take
    // those from its pool, as they do its values, instead of creating buffers on every run.
    let g = Graph::new()
        .input("x", DType::F32, &[Some(7), Some(40)])
        .input("a", DType::I32, &[Some(3), Some(20), Some(17)])
        .input("b", DType::I32, &[Some(17), Some(30)])
        .node(
            Node::new("Softmax", "sm")
                .inputs(["x"])
                .outputs(["s"])
                .attr("axis", Attr::Int(1)),
        )
        .node(Node::new("MatMul", "mm").inputs(["a", "b"]).outputs(["p"]))
        .constant(
            "pads",
            HostTensor::from_vec(vec![4], &[1i64, 3, 2, 5]).unwrap(),
        )
        .node(
            Node::new("Pad", "pad")
                .inputs(["x", "pads"])
                .outputs(["q"])
                .attr("mode", Attr::String("reflect".into())),
        )
        .input("c", DType::U8, &[Some(9), Some(61)])
        .constant(
            "pads8",
            HostTensor::from_vec(vec![4], &[0i64, 3, 0, 2]).unwrap(),
        )
        .node(
            Node::new("Pad", "pad8")
                .inputs(["c", "pads8"])
                .outputs(["r"])
                .attr("mode", Attr::String("reflect".into())),
        )
        .output("s")
        .output("p")
        .output("q")
        .output("r");
    let v: Vec<f32> = bytes(5, 280)
        .iter()
        .map(|&b| (f32::from(b) - 128.0) / 16.0)
        .collect();
    let inputs: Vec<(String, HostTensor)> = vec![
        ("x".into(), HostTensor::from_vec(vec![7, 40], &v).unwrap()),
        ("a".into(), i32s(&[3, 20, 17], 1)),
        ("b".into(), i32s(&[17, 30], 2)),
        ("c".into(), random_tensor(3, DType::U8, &[9, 61])),
    ];
    let want = run_graph(&g, &inputs, &Default::default()).unwrap();
    for ctx in contexts() {
        let session = Session::new(&ctx, g.clone()).unwrap();
        let mut first = None;
        for run in 0..4 {
            let before = ctx.stats().buffers_created;
            let got = session.run_blocking(inputs.clone()).unwrap();
            let created = ctx.stats().buffers_created - before;
            // Softmax within onnxruntime's f32 tolerance; the rest bit for bit.
            assert_close(&got[0].1, &want[0], 1e-5, 1e-6, "Softmax");
            for (k, (name, t)) in got.iter().enumerate().skip(1) {
                assert_eq!(t.data, want[k].data, "{name}, run {run}");
            }
            let got: Vec<Vec<u8>> = got.into_iter().map(|(_, t)| t.data).collect();
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(&got, f, "run {run}"),
            }
            if run == 3 {
                assert_eq!(created, 0, "buffers created by the fourth run");
            }
        }
    }
}
