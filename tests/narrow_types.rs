//! The storage-only types (8-, 6- and 4-bit floats, 4- and 2-bit integers): every code cast to
//! the wide types on the GPU against the host's table of values; f32 values at and around
//! every rounding boundary cast to each small float in every Cast mode on the GPU against the
//! host's conversion (a nearest-value search, not the kernel's bit arithmetic); a cast there
//! and back fused into one program; data movement bit for bit; the refusal of any other op;
//! ONNX's packing of the 6-, 4- and 2-bit types.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::minifloat::{decode, encode};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{CastMode, DType, HostTensor, Round, Session};

const FLOATS: [DType; 8] = [
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::F8E8M0,
    DType::F4E2M1,
    DType::F6E2M3,
    DType::F6E3M2,
];

fn every_code(d: DType) -> HostTensor {
    let n = d.packed_bits().map_or(256, |b| 1 << b);
    HostTensor::from_bytes(d, vec![n], (0..n).map(|c| c as u8).collect()).unwrap()
}

fn cast_node(to: DType, mode: Option<CastMode>) -> Node {
    let mut n = Node::new("Cast", "c").attr("to", Attr::String(to.name().into()));
    if let Some(m) = mode {
        n = n.attr("saturate", Attr::Int(i64::from(m.saturate))).attr(
            "round_mode",
            Attr::String(
                match m.round {
                    Round::Up => "up",
                    Round::Down => "down",
                    Round::Nearest => "nearest",
                }
                .into(),
            ),
        );
    }
    n
}

/// One graph of `nodes` from `x` to `y` on the GPU.
fn run(nodes: Vec<Node>, x: &HostTensor) -> HostTensor {
    let shape: Vec<Option<usize>> = x.shape.iter().map(|&d| Some(d)).collect();
    let mut g = Graph::new().input("x", x.dtype, &shape);
    for n in nodes {
        g = g.node(n);
    }
    let g = g.output("y");
    Session::new(ctx(), g)
        .unwrap()
        .run_blocking(vec![("x".into(), x.clone())])
        .unwrap()
        .remove(0)
        .1
}

/// Graph `g` on input `x` on the GPU and on the CPU reference: its first output from each.
fn gpu_and_reference(g: &Graph, x: &HostTensor) -> (HostTensor, HostTensor) {
    let inputs = vec![("x".to_string(), x.clone())];
    let got = Session::new(ctx(), g.clone())
        .unwrap()
        .run_blocking(inputs.clone())
        .unwrap()
        .remove(0)
        .1;
    let want = run_graph(g, &inputs, &Default::default())
        .unwrap()
        .remove(0);
    (got, want)
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
        || (a.is_nan() && b.is_nan() && a.is_sign_negative() == b.is_sign_negative())
}

#[test]
fn every_code_widens_to_its_value() {
    for d in FLOATS {
        let x = every_code(d);
        let y = run(
            vec![cast_node(DType::F32, None).inputs(["x"]).outputs(["y"])],
            &x,
        );
        for (c, v) in f32s(&y).into_iter().enumerate() {
            let want = decode(d, c as u8);
            assert!(
                same(v, want),
                "{d} code {c:#04x}: GPU {v:e}, table {want:e}"
            );
        }
        // And to f64 and f16 (through the word kernel's f32), against the reference.
        for to in [DType::F64, DType::F16, DType::I32] {
            let node = cast_node(to, None).inputs(["x"]).outputs(["y"]);
            let got = run(vec![node.clone()], &x);
            let g = Graph::new()
                .input("x", d, &[Some(x.shape[0])])
                .node(node)
                .output("y");
            let want = run_graph(&g, &[("x".into(), x.clone())], &Default::default()).unwrap();
            assert_eq!(nan_canonical(&got), nan_canonical(&want[0]), "{d} -> {to}");
        }
    }
    for d in [DType::I4, DType::U4, DType::I2, DType::U2] {
        let y = run(
            vec![cast_node(DType::I32, None).inputs(["x"]).outputs(["y"])],
            &every_code(d),
        );
        let got = y.to_vec::<i32>().unwrap();
        let want: Vec<i32> = (0..got.len())
            .map(|c| wgpu_ops::minifloat::int_value(d, c as u8))
            .collect();
        assert_eq!(got, want, "{d}");
    }
}

/// f32 values at, just beside and halfway between consecutive values of `d` (both signs),
/// past its range, zeros, infinities, NaN and f32 subnormals.
fn boundaries(d: DType) -> Vec<f32> {
    let mut out = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    out.extend([
        1e-45,
        -1e-45,
        1e-40,
        5.877e-39,
        1e30,
        -1e30,
        f32::MAX,
        3.0e38,
    ]);
    let codes = d.packed_bits().map_or(256, |b| 1 << b);
    let values: Vec<f32> = (0..codes)
        .map(|c| decode(d, c as u8))
        .filter(|v| v.is_finite())
        .collect();
    for &v in &values {
        for w in [
            v,
            f32::from_bits(v.to_bits() + 1),
            f32::from_bits(v.to_bits().saturating_sub(1)),
        ] {
            out.extend([w, -w]);
        }
    }
    let mut sorted: Vec<f32> = values.iter().map(|v| v.abs()).collect();
    sorted.sort_by(f32::total_cmp);
    sorted.dedup();
    for p in sorted.windows(2) {
        let mid = (p[0] + p[1]) / 2.0;
        for w in [
            mid,
            f32::from_bits(mid.to_bits() + 1),
            f32::from_bits(mid.to_bits() - 1),
        ] {
            out.extend([w, -w]);
        }
    }
    // Past the largest value: its half step, and twice it.
    let (last, before) = (sorted[sorted.len() - 1], sorted[sorted.len() - 2]);
    for w in [
        last + (last - before) / 2.0,
        last * 2.0,
        last + (last - before),
    ] {
        out.extend([
            w,
            f32::from_bits(w.to_bits() + 1),
            f32::from_bits(w.to_bits() - 1),
        ]);
    }
    let mut rng = Rng(d.size() as u64 * 31 + codes as u64);
    out.extend((0..2000).map(|_| f32::from_bits(rng.next() as u32)));
    out
}

#[test]
fn f32_rounds_to_every_small_float_in_every_mode() {
    let modes = [
        (true, Round::Up),
        (false, Round::Up),
        (true, Round::Down),
        (false, Round::Down),
        (true, Round::Nearest),
        (false, Round::Nearest),
    ];
    for d in FLOATS {
        let values = boundaries(d);
        let x = HostTensor::from_vec(vec![values.len()], &values).unwrap();
        for (saturate, round) in modes {
            if d != DType::F8E8M0 && round != Round::Up {
                continue;
            }
            let mode = CastMode {
                saturate,
                round,
                ..Default::default()
            };
            let y = run(
                vec![cast_node(d, Some(mode)).inputs(["x"]).outputs(["y"])],
                &x,
            );
            for (k, (&v, &c)) in values.iter().zip(&y.data).enumerate() {
                let want = encode(d, v, mode);
                assert_eq!(
                    c,
                    want,
                    "{d} {mode:?}: value {k} {v:e} ({:#010x}) gave {c:#04x}, host {want:#04x}",
                    v.to_bits()
                );
            }
        }
    }
}

/// A cast to a small float and back in one fused program gives what the two casts give
/// apart: the intermediate is rounded as a store would round it.
#[test]
fn fused_round_trip_rounds_in_between() {
    for d in FLOATS.into_iter().chain([DType::I4, DType::U2]) {
        let values = boundaries(DType::F8E5M2);
        let x = HostTensor::from_vec(vec![values.len()], &values).unwrap();
        let nodes = vec![
            cast_node(d, None).inputs(["x"]).outputs(["q"]),
            cast_node(DType::F32, None).inputs(["q"]).outputs(["y"]),
        ];
        let got = run(nodes, &x);
        let q = run(vec![cast_node(d, None).inputs(["x"]).outputs(["y"])], &x);
        let apart = run(
            vec![cast_node(DType::F32, None).inputs(["x"]).outputs(["y"])],
            &q,
        );
        let (g, a) = (f32s(&got), f32s(&apart));
        for k in 0..g.len() {
            assert!(
                same(g[k], a[k]),
                "{d}: {:e} fused {:e}, apart {:e}",
                values[k],
                g[k],
                a[k]
            );
        }
    }
}

#[test]
fn data_movement_moves_the_codes() {
    for d in DType::STORAGE_ONLY {
        let x = random_tensor(5, d, &[3, 5, 7]);
        let nodes = [
            Node::new("Transpose", "t")
                .inputs(["x"])
                .outputs(["t"])
                .attr("perm", Attr::Ints(vec![2, 0, 1])),
            Node::new("Reshape", "r")
                .inputs(["t", "shape"])
                .outputs(["y"]),
        ];
        let shape = HostTensor::from_vec(vec![2], &[7i64, 15]).unwrap();
        let g = Graph::new()
            .input("x", d, &[Some(3), Some(5), Some(7)])
            .constant("shape", shape)
            .node(nodes[0].clone())
            .node(nodes[1].clone())
            .output("y");
        let (got, want) = gpu_and_reference(&g, &x);
        assert_eq!(got, want, "{d}");
        assert_eq!(got.dtype, d);
    }
}

#[test]
fn other_ops_refuse_them_in_one_line() {
    for d in DType::STORAGE_ONLY {
        let x = random_tensor(1, d, &[4]);
        let g = Graph::new()
            .input("x", d, &[Some(4)])
            .node(Node::new("Add", "add").inputs(["x", "x"]).outputs(["y"]))
            .output("y");
        let e = Session::new(ctx(), g)
            .and_then(|s| s.run_blocking(vec![("x".into(), x)]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Add")
                && e.contains(&format!("is {d}, which only casts and data movement take")),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
    // A host tensor of a 4-bit type with bits above its four is refused.
    let e = HostTensor::from_bytes(DType::I4, vec![2], vec![0x7, 0x18]).unwrap_err();
    assert!(e.to_string().contains("element 1"), "{e}");
}

/// QuantizeLinear's cast rounds half to even and clamps, where Cast truncates and (for the
/// 4- and 2-bit types) wraps.
#[test]
fn quantizing_cast_rounds_and_clamps() {
    let values = [
        2.5f32,
        3.5,
        -2.5,
        7.6,
        8.0,
        100.0,
        -9.0,
        -1.5,
        f32::NAN,
        1e9,
    ];
    let x = HostTensor::from_vec(vec![values.len()], &values).unwrap();
    for (d, want) in [
        (DType::I4, [2, 4, -2, 7, 7, 7, -8, -2, 0, 7]),
        (DType::U4, [2, 4, 0, 8, 8, 15, 0, 0, 0, 15]),
        (DType::I2, [1, 1, -2, 1, 1, 1, -2, -2, 0, 1]),
        (DType::I8, [2, 4, -2, 8, 8, 100, -9, -2, 0, 127]),
    ] {
        let node = Node::new("Cast", "q")
            .attr("to", Attr::String(d.name().into()))
            .attr("quantize", Attr::Int(1))
            .inputs(["x"])
            .outputs(["y"]);
        let back = cast_node(DType::I32, None).inputs(["x"]).outputs(["y"]);
        let got = run(vec![node], &x);
        let got = run(vec![back], &got).to_vec::<i32>().unwrap();
        assert_eq!(got, want, "{d}");
    }
    // Plain Cast: truncated, wrapped into four bits.
    let got = run(
        vec![
            cast_node(DType::I4, None).inputs(["x"]).outputs(["q"]),
            cast_node(DType::I32, None).inputs(["q"]).outputs(["y"]),
        ],
        &x,
    );
    assert_eq!(
        got.to_vec::<i32>().unwrap(),
        [2, 3, -2, 7, -8, 4, 7, -1, 0, 0]
    );
}

#[test]
fn onnx_packing_round_trips() {
    use wgpu_ops::minifloat::{pack, packed_len, unpack};
    for d in [
        DType::I4,
        DType::U4,
        DType::F4E2M1,
        DType::I2,
        DType::U2,
        DType::F6E2M3,
        DType::F6E3M2,
    ] {
        for n in [0usize, 1, 2, 3, 4, 5, 8, 17] {
            let x = random_tensor(n as u64, d, &[n]);
            let packed = pack(d, &x.data);
            assert_eq!(Some(packed.len()), packed_len(d, n), "{d} {n}");
            assert_eq!(unpack(d, &packed, n), x.data, "{d} {n}");
        }
    }
}

/// A cast through a small float feeding a reduction: the chain is the reduction's prologue
/// (one kernel), rounded in between as the casts apart round it.
#[test]
fn cast_chain_as_a_reduction_prologue() {
    for d in FLOATS {
        let values = boundaries(DType::F8E4M3FN)
            .into_iter()
            .filter(|v| v.is_finite() && v.abs() < 1e4)
            .take(512)
            .collect::<Vec<_>>();
        let x = HostTensor::from_vec(vec![values.len()], &values).unwrap();
        let axes = HostTensor::from_vec(vec![1], &[0i64]).unwrap();
        let g = Graph::new()
            .input("x", DType::F32, &[Some(values.len())])
            .constant("axes", axes)
            .node(cast_node(d, None).inputs(["x"]).outputs(["q"]))
            .node(cast_node(DType::F32, None).inputs(["q"]).outputs(["w"]))
            .node(
                Node::new("ReduceMax", "m")
                    .inputs(["w", "axes"])
                    .outputs(["y"])
                    .attr("keepdims", Attr::Int(0)),
            )
            .output("y");
        let (got, want) = gpu_and_reference(&g, &x);
        assert_eq!(nan_canonical(&got), nan_canonical(&want), "{d}");
    }
}
