//! The pad kernel's paths, bit for bit against the CPU reference: 16 bytes of output moved
//! whole from one run of a row (at every byte alignment of 1- and 2-byte inputs) or filled
//! from a constant row, quads that straddle a row's edges or two rows, 16-byte stores and
//! word-by-word stores (outputs whose words do not come in whole quads), reflect and wrap
//! folding over several periods on either side, crops, and ranks up to 7.

mod common;
use common::*;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::reference::graph::run_graph;
use wgpu_ops::{DType, HostTensor, Session};

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Pads for `shape` that `mode` accepts: crops of up to 2 (leaving at least one element),
/// and pads up to three times the axis' length (reflect only where 2 or more elements stay).
fn random_pads(rng: &mut Lcg, shape: &[usize], mode: &str) -> Vec<i64> {
    let rank = shape.len();
    let mut pads = vec![0i64; 2 * rank];
    for (k, &dim) in shape.iter().enumerate() {
        let mut left = dim as i64;
        for side in [k, k + rank] {
            if rng.below(4) == 0 && left > 1 {
                let crop = 1 + rng.below(2.min(left as u64 - 1)) as i64;
                pads[side] = -crop;
                left -= crop;
            }
        }
        if mode == "reflect" && left < 2 {
            continue;
        }
        for side in [k, k + rank] {
            if pads[side] == 0 && rng.below(3) > 0 {
                let most = if rng.below(4) == 0 {
                    3 * left as u64
                } else {
                    5
                };
                pads[side] = rng.below(most + 1) as i64;
            }
        }
    }
    pads
}

/// A Pad of `x` by `pads` in `mode`; constant mode pads with a constant of random bits.
fn pad_graph(dtype: DType, shape: &[usize], pads: &[i64], mode: &str) -> Graph {
    let node = Node::new("Pad", "p")
        .inputs(["x", "pads", "value"])
        .outputs(["y"])
        .attr("mode", Attr::String(mode.into()));
    Graph::new()
        .input(
            "x",
            dtype,
            &shape.iter().map(|&d| Some(d)).collect::<Vec<_>>(),
        )
        .constant(
            "pads",
            HostTensor::from_vec(vec![pads.len()], pads).unwrap(),
        )
        .constant("value", random_tensor(pads.len() as u64, dtype, &[]))
        .node(node)
        .output("y")
}

/// `g`'s output on the GPU and on the CPU reference.
fn both(g: &Graph, inputs: &[(String, HostTensor)], what: &str) -> (HostTensor, HostTensor) {
    let got = Session::new(ctx(), g.clone())
        .and_then(|s| s.run_blocking(inputs.to_vec()))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .remove(0)
        .1;
    let want = run_graph(g, inputs, &Default::default()).unwrap().remove(0);
    (got, want)
}

#[test]
fn pads_of_random_shapes_match_the_reference_in_every_mode() {
    let mut rng = Lcg(0x9AD);
    let mut quads = [0usize; 2];
    for dtype in [DType::U8, DType::I16, DType::F32, DType::I64] {
        for mode in ["constant", "reflect", "edge", "wrap"] {
            for case in 0..40 {
                // Rows long enough for quads inside them, and a few of ranks 5 to 7.
                let rank = if case % 10 == 9 {
                    5 + rng.below(3) as usize
                } else {
                    1 + rng.below(4) as usize
                };
                let mut shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(4) as usize).collect();
                shape[rank - 1] = 1 + rng.below(70) as usize;
                let pads = random_pads(&mut rng, &shape, mode);
                let x = random_tensor(case, dtype, &shape);
                let g = pad_graph(dtype, &shape, &pads, mode);
                let inputs = vec![("x".to_string(), x)];
                let what = format!("Pad {mode} {dtype} {shape:?} by {pads:?}");
                let (got, want) = both(&g, &inputs, &what);
                assert_eq!(got.shape, want.shape, "{what}");
                assert!(got.data == want.data, "{what}: differs from the reference");
                quads[usize::from(got.data.len().div_ceil(4).is_multiple_of(4))] += 1;
            }
        }
    }
    // Both kinds of store ran (whole quads of output words, and words one by one).
    assert!(quads[0] > 20 && quads[1] > 20, "{quads:?}");
}

/// Rows of 1-byte elements padded by 0 to 4 before and after: each row's runs start at every
/// byte offset of a word, so quads are read across word boundaries (the fifth word) and
/// rows end inside quads.
#[test]
fn byte_rows_are_read_at_every_alignment() {
    for mode in ["constant", "reflect", "edge", "wrap"] {
        for before in 0..5i64 {
            for after in 0..5i64 {
                for cols in [29usize, 64, 67] {
                    let shape = [3usize, cols];
                    let pads = [0, before, 0, after];
                    let x = random_tensor(before as u64 * 7 + after as u64, DType::U8, &shape);
                    let g = pad_graph(DType::U8, &shape, &pads, mode);
                    let inputs = vec![("x".to_string(), x)];
                    let (got, want) = both(&g, &inputs, mode);
                    assert!(got == want, "Pad {mode} u8 {shape:?} by {pads:?}");
                }
            }
        }
    }
}

/// Outputs of more than 2^16 words whose last quad is partial: their whole quads go by 16-byte
/// stores and their last 1 to 3 words by a dispatch of their own, which must meet exactly.
#[test]
fn large_outputs_ending_inside_a_quad_match_the_reference() {
    let mut tails = std::collections::BTreeSet::new();
    // A context of its own, whose dispatches no other test adds to.
    let own = wgpu_ops::Context::new_blocking(Default::default()).unwrap();
    for (dtype, shape, pads) in [
        (DType::U8, vec![260usize, 1021], vec![1i64, 1, 0, 1]),
        (DType::U8, vec![266, 1021], vec![1, 1, 0, 1]),
        (DType::U8, vec![270, 1021], vec![1, 1, 0, 1]),
        (DType::I16, vec![130, 1021], vec![1, 1, 0, 1]),
        (DType::I16, vec![133, 1021], vec![1, 1, 0, 1]),
        (DType::F32, vec![67, 1021], vec![0, 1, 0, 1]),
        (DType::F32, vec![65, 1023], vec![1, 1, 1, 1]),
        (DType::I64, vec![32, 1021], vec![1, 1, 0, 1]),
    ] {
        let elems: usize = (0..2)
            .map(|k| (shape[k] as i64 + pads[k] + pads[k + 2]) as usize)
            .product();
        let words = (elems * dtype.size()).div_ceil(4);
        assert!(words >= 1 << 16, "{dtype} {shape:?}: {words} words");
        tails.insert(words % 4);
        for mode in ["constant", "reflect", "edge", "wrap"] {
            let x = random_tensor(words as u64, dtype, &shape);
            let g = pad_graph(dtype, &shape, &pads, mode);
            let inputs = vec![("x".to_string(), x)];
            let what = format!("Pad {mode} {dtype} {shape:?} by {pads:?}");
            let before = own.stats().dispatches;
            let got = Session::new(&own, g.clone())
                .and_then(|s| s.run_blocking(inputs.clone()))
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .remove(0)
                .1;
            assert_eq!(
                own.stats().dispatches - before,
                2,
                "{what}: quads, then the tail"
            );
            let want = run_graph(&g, &inputs, &Default::default())
                .unwrap()
                .remove(0);
            assert!(got == want, "{what}: differs from the reference");
        }
    }
    // Tails of 1, 2 and 3 words.
    assert_eq!(tails.into_iter().collect::<Vec<_>>(), [1, 2, 3]);
}

/// In constant mode a crop may run past the data into the other side's padding (output
/// element j is input element j - b, as onnxruntime reads it): what is left is constants.
/// Other modes have nothing to repeat there and refuse, as does a total below nothing.
#[test]
fn constant_pads_may_crop_past_the_data() {
    let x = HostTensor::from_vec(vec![2], &[1.0f32, 2.0]).unwrap();
    let empty = HostTensor::from_vec(vec![1, 0], &[] as &[f32]).unwrap();
    // (input, pads, expected output's shape); every value is the constant.
    let cases: [(&HostTensor, &[i64], &[usize]); 7] = [
        (&x, &[3, -3], &[2]),
        (&x, &[-3, 3], &[2]),
        (&x, &[2, -3], &[1]),
        (&x, &[-3, 2], &[1]),
        (&x, &[-4, 2], &[0]),
        (&empty, &[0, 3, 0, -1], &[1, 2]),
        (&empty, &[0, -1, 0, 2], &[1, 1]),
    ];
    for (x, pads, shape) in cases {
        let g = pad_graph(DType::F32, &x.shape, pads, "constant");
        let inputs = vec![("x".to_string(), x.clone())];
        let what = format!("Pad constant {:?} by {pads:?}", x.shape);
        let (got, want) = both(&g, &inputs, &what);
        let value = random_tensor(pads.len() as u64, DType::F32, &[]);
        let n: usize = shape.iter().product();
        assert_eq!(got.shape, shape, "{what}");
        assert_eq!(got.data, value.data.repeat(n), "{what}");
        assert_eq!(want.shape, shape, "{what}");
        assert_eq!(want.data, got.data, "{what}: differs from the reference");
    }
    for (mode, pads) in [
        ("constant", &[-2i64, -1][..]),
        ("edge", &[3, -3]),
        ("wrap", &[-3, 1]),
    ] {
        let g = pad_graph(DType::F32, &[2], pads, mode);
        let err = Session::new(ctx(), g.clone())
            .and_then(|s| s.run_blocking(vec![("x".to_string(), x.clone())]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("crop axis 0 by more than its 2 elements"),
            "{mode} {pads:?}: {err}"
        );
        assert!(run_graph(&g, &[("x".to_string(), x.clone())], &Default::default()).is_err());
    }
}
