//! GridSample on the CPU: each output position denormalizes its grid coordinates (in f32, f64
//! for f64 inputs, as the GPU does), takes its taps, pads each tap's index (onnxruntime's rule,
//! see `ops::grid_sample`), and sums the taps' values times their weights in f64; nearest
//! mode copies element bytes, exact for every dtype.

use crate::graph::{Attr, Node};
use crate::ops::grid_sample::{grid_sample_plan, GridSampleAttrs};
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

/// Reflects `x` by the nearer border until it lies in `[lo, hi]`.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    let (dx, from, to) = if x < lo {
        (lo - x, lo, hi)
    } else if x > hi {
        (x - hi, hi, lo)
    } else {
        return x;
    };
    let n = (dx / span).floor();
    let r = dx - n * span;
    // An even number of reflections ends on the side it started from.
    if n % 2.0 == 0.0 {
        from + (to - from).signum() * r
    } else {
        to - (to - from).signum() * r
    }
}

/// How far outside the input a tap's index is followed (beyond, it is held there).
const FAR: f64 = 1e9;

fn cubic_weights(f: f64) -> [f64; 4] {
    let a = -0.75;
    let outer = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let inner = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [outer(f + 1.0), inner(f), inner(1.0 - f), outer(2.0 - f)]
}

/// Coordinate `g` on an axis of extent `d`, in the input's pixels (rounded to the nearest,
/// halves to even, in nearest mode), and the axis's bounds, computed in f32 (`wide`: f64).
fn denormalize(g: f64, d: usize, mode: u32, align: bool, wide: bool) -> (f64, f64, f64) {
    let size = d as f64;
    let (x, lo, hi) = if align {
        ((g + 1.0) / 2.0 * (size - 1.0), 0.0, size - 1.0)
    } else {
        (((g + 1.0) * size - 1.0) / 2.0, -0.5, size - 0.5)
    };
    // The same operations in f32 round after each step, as the GPU computes them.
    let x = match wide {
        true => x,
        false => {
            let (g, size) = (g as f32, size as f32);
            f64::from(match align {
                true => (g + 1.0) / 2.0 * (size - 1.0),
                false => ((g + 1.0) * size - 1.0) / 2.0,
            })
        }
    };
    let x = if mode == 0 { x.round_ties_even() } else { x };
    (x, lo, hi)
}

/// The taps along one axis of extent `d` at coordinate `x`: each an index (padded: `None`
/// outside the input with zeros padding) and a weight.
fn axis_taps(
    (x, lo, hi): (f64, f64, f64),
    d: usize,
    mode: u32,
    padding: u32,
) -> Vec<(Option<usize>, f64)> {
    let last = d as i64 - 1;
    let place = |j: i64| -> Option<usize> {
        let j = match padding {
            0 if j < 0 || j > last => return None,
            1 => j.clamp(0, last),
            2 if j < 0 || j > last => reflect(j as f64, lo, hi) as i64,
            _ => j,
        };
        Some(j.clamp(0, last.max(0)) as usize)
    };
    // Positions far outside (infinite coordinates) held where index arithmetic cannot
    // overflow, as the GPU holds them.
    let index = |v: f64| v.clamp(-FAR, FAR) as i64;
    if mode == 0 {
        return vec![(place(index(x)), 1.0)];
    }
    let base = x.floor();
    let f = x - base;
    let base = index(base);
    if mode == 1 {
        vec![(place(base), 1.0 - f), (place(base + 1), f)]
    } else {
        let w = cubic_weights(f);
        (0..4).map(|t| (place(base - 1 + t as i64), w[t])).collect()
    }
}

/// Runs `node` when it is a GridSample (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    if node.op != "GridSample" {
        return Ok(None);
    }
    let x = args
        .first()
        .and_then(Option::as_ref)
        .ok_or("GridSample: input X missing")?;
    let grid = args
        .get(1)
        .and_then(Option::as_ref)
        .ok_or("GridSample: input grid missing")?;
    let string = |name: &str, default: &'static str| match node.attrs.get(name) {
        Some(Attr::String(s)) => s.clone(),
        _ => default.to_string(),
    };
    let (mode, padding_mode) = (string("mode", "linear"), string("padding_mode", "zeros"));
    let attrs = GridSampleAttrs {
        mode: &mode,
        padding_mode: &padding_mode,
        align_corners: matches!(node.attrs.get("align_corners"), Some(Attr::Int(v)) if *v != 0),
    };
    let (shape, mode, padding) =
        grid_sample_plan((x.dtype, &x.shape), (grid.dtype, &grid.shape), &attrs)?;
    let (n, c) = (x.shape[0], x.shape[1]);
    let dims = &x.shape[2..];
    let spatial: usize = dims.iter().product();
    let positions: usize = shape[2..].iter().product();
    let k = dims.len();
    let wide = x.dtype == DType::F64;
    let coords = cast(grid, DType::F64)?.to_vec::<f64>()?;
    let size = x.dtype.size();
    let values = match mode {
        0 => None,
        _ => Some(cast(x, DType::F64)?.to_vec::<f64>()?),
    };
    let mut bytes = vec![0u8; n * c * positions * size];
    let mut sums = vec![0f64; n * c * positions];
    for b in 0..n {
        for o in 0..positions {
            let at = (b * positions + o) * k;
            // Axis a reads coordinate k - 1 - a (the grid holds x, the last axis, first).
            let xs: Vec<(f64, f64, f64)> = (0..k)
                .map(|a| {
                    let g = coords[at + k - 1 - a];
                    denormalize(g, dims[a], mode, attrs.align_corners, wide)
                })
                .collect();
            let per_axis: Vec<Vec<(Option<usize>, f64)>> = (0..k)
                .map(|a| axis_taps(xs[a], dims[a], mode, padding))
                .collect();
            // Every combination of one tap per axis.
            let mut combos: Vec<(Option<usize>, f64)> = vec![(Some(0), 1.0)];
            for (a, taps) in per_axis.iter().enumerate() {
                let stride: usize = dims[a + 1..].iter().product();
                combos = combos
                    .iter()
                    .flat_map(|&(i, w)| {
                        taps.iter()
                            .map(move |&(j, v)| (i.zip(j).map(|(i, j)| i + j * stride), w * v))
                    })
                    .collect();
            }
            for ch in 0..c {
                let out = (b * c + ch) * positions + o;
                let plane = (b * c + ch) * spatial;
                match &values {
                    None => {
                        if let Some(i) = combos[0].0 {
                            let from = (plane + i) * size;
                            bytes[out * size..(out + 1) * size]
                                .copy_from_slice(&x.data[from..from + size]);
                        }
                    }
                    Some(v) => {
                        // A tap outside reads 0, which a NaN weight (an infinite
                        // coordinate) still turns into NaN, as onnxruntime computes it.
                        sums[out] = combos
                            .iter()
                            .map(|&(i, w)| i.map_or(0.0, |i| v[plane + i]) * w)
                            .sum();
                    }
                }
            }
        }
    }
    let y = match values {
        None => HostTensor::from_bytes(x.dtype, shape, bytes)?,
        Some(_) => cast(&HostTensor::from_vec(shape, &sums)?, x.dtype)?,
    };
    Ok(Some(y))
}
