//! The CPU reference against an independent statement of numpy's slicing rules: numpy itself.
//! Thousands of random StridedSlice-1 and Slice-8 index expressions (built from random masks by
//! the reference) are evaluated by `tests/numpy_slicing.py` and by the reference, and must agree
//! on shapes, values and refusals. Needs `python3` with numpy (`.ci/run` installs it); without
//! it the test fails rather than skips.

mod common;
use common::Rng;

use std::io::Write;
use std::process::{Command, Stdio};

use ndarray::{ArrayD, IxDyn};
use serde_json::{json, Value};
use wgpu_ops::reference::{apply_index, slice_items, strided_slice_items, IndexItem};
use wgpu_ops::{Slice, StridedSlice};

/// Index values, steps and masks drawn from the shared generator.
trait Draw {
    fn index(&mut self) -> i64;
    fn step(&mut self) -> i64;
    fn mask(&mut self, max_len: u64, one_in: u64) -> Vec<i64>;
}

impl Draw for Rng {
    fn index(&mut self) -> i64 {
        match self.below(10) {
            0 => i64::MAX,
            1 => i64::MIN,
            2 => self.below(200) as i64 - 100,
            _ => self.below(15) as i64 - 7,
        }
    }
    fn step(&mut self) -> i64 {
        match self.below(40) {
            0 => i64::MAX,
            1 => i64::MIN + 1,
            _ => [1, 2, 3, -1, -2, -3][self.below(6) as usize],
        }
    }
    fn mask(&mut self, max_len: u64, one_in: u64) -> Vec<i64> {
        (0..self.below(max_len + 1))
            .map(|_| (self.below(one_in) == 0) as i64)
            .collect()
    }
}

/// Decision 0 (docs/spec-decisions.md): "A reverse slice whose begin is still negative after
/// adding the dimension starts at 0. Python would give an empty range"
/// Writing that clamp into the expression turns our rule into numpy's.
fn numpy_item(item: &IndexItem, dim: Option<usize>) -> Value {
    match item {
        IndexItem::Range { begin, end, stride } => {
            let begin = match (begin, dim) {
                (Some(b), Some(d)) if *stride < 0 && b.saturating_add(d as i64) < 0 => Some(0),
                _ => *begin,
            };
            json!({"t": "range", "b": begin, "e": end, "s": stride})
        }
        IndexItem::Index(i) => json!({"t": "index", "i": i}),
        IndexItem::NewAxis => json!({"t": "newaxis"}),
        IndexItem::Ellipsis => json!({"t": "ellipsis"}),
    }
}

/// The input dimension each item applies to (None for new axes, the ellipsis, or too many).
fn item_dims(shape: &[usize], items: &[IndexItem]) -> Vec<Option<usize>> {
    let consuming = items
        .iter()
        .filter(|i| matches!(i, IndexItem::Range { .. } | IndexItem::Index(_)))
        .count();
    let mut axis = 0usize;
    items
        .iter()
        .map(|i| match i {
            IndexItem::Ellipsis => {
                axis += shape.len().saturating_sub(consuming);
                None
            }
            IndexItem::NewAxis => None,
            _ => {
                axis += 1;
                shape.get(axis - 1).copied()
            }
        })
        .collect()
}

#[test]
fn reference_agrees_with_numpy() {
    let mut rng = Rng(2026);
    let mut cases = Vec::new();
    let mut refused_ellipses = 0;
    for k in 0..4000 {
        let rank = rng.below(7) as usize + (k % 2);
        let shape: Vec<usize> = (0..rank).map(|_| rng.below(6) as usize).collect();
        let items = if k % 2 == 0 {
            let m = rng.below(rank as u64 + 3) as usize;
            let op = StridedSlice {
                begin: (0..m).map(|_| rng.index()).collect(),
                end: (0..m).map(|_| rng.index()).collect(),
                stride: Some((0..m).map(|_| rng.step()).collect()),
                begin_mask: rng.mask(m as u64 + 2, 3),
                end_mask: rng.mask(m as u64 + 2, 3),
                new_axis_mask: rng.mask(m as u64 + 2, 5),
                shrink_axis_mask: rng.mask(m as u64 + 2, 4),
                ellipsis_mask: rng.mask(m as u64 + 2, 7),
            };
            // Decision 7: two ellipsis bits are refused wherever they are (numpy would see
            // only those before the end of begin).
            if op.ellipsis_mask.iter().filter(|&&b| b == 1).count() > 1 {
                assert!(strided_slice_items(&op).is_err(), "{op:?}");
                refused_ellipses += 1;
                continue;
            }
            strided_slice_items(&op).unwrap()
        } else {
            let n = rng.below(rank as u64 + 1) as usize;
            let mut axes: Vec<i64> = (0..rank as i64).collect();
            for i in (1..axes.len()).rev() {
                axes.swap(i, rng.below(i as u64 + 1) as usize);
            }
            axes.truncate(n);
            let op = Slice {
                start: (0..n).map(|_| rng.index()).collect(),
                stop: (0..n).map(|_| rng.index()).collect(),
                step: (0..n).map(|_| rng.step()).collect(),
                axes: Some(axes),
            };
            slice_items(&op, rank).unwrap()
        };
        cases.push((shape, items));
    }
    let request: Vec<Value> = cases
        .iter()
        .map(|(shape, items)| {
            let dims = item_dims(shape, items);
            json!({"shape": shape, "items": items.iter().zip(dims).map(|(i, d)| numpy_item(i, d)).collect::<Vec<_>>()})
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/numpy_slicing.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is needed for this test");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(request).to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "numpy_slicing.py failed (is numpy installed?)"
    );
    let answers: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answers.len(), cases.len());
    let (mut agreed_values, mut agreed_errors) = (0, 0);
    for ((shape, items), answer) in cases.iter().zip(&answers) {
        let n: usize = shape.iter().product();
        let a = ArrayD::from_shape_vec(IxDyn(shape), (0..n as i64).collect()).unwrap();
        let ours = apply_index(&a, items);
        match (ours, answer.get("error")) {
            (Ok(y), None) => {
                let want_shape: Vec<usize> =
                    serde_json::from_value(answer["shape"].clone()).unwrap();
                let want: Vec<i64> = serde_json::from_value(answer["values"].clone()).unwrap();
                assert_eq!(y.shape(), want_shape.as_slice(), "{shape:?} {items:?}");
                assert_eq!(
                    y.iter().copied().collect::<Vec<_>>(),
                    want,
                    "{shape:?} {items:?}"
                );
                agreed_values += 1;
            }
            (Err(_), Some(_)) => agreed_errors += 1,
            (ours, numpy) => panic!("{shape:?} {items:?}: reference {ours:?}, numpy {numpy:?}"),
        }
    }
    // Both outcomes must be well represented, or the test checks little.
    assert!(
        agreed_values > 2500 && agreed_errors > 100 && refused_ellipses > 50,
        "{agreed_values} {agreed_errors} {refused_ellipses}"
    );
}
