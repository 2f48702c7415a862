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

/// Rounds an f64 result to the precision the kernel computes in: f32 (whose +, -, * and /
/// of f32 values, computed in f64 and rounded once, are f32's own), or f64 (`wide`).
#[derive(Clone, Copy)]
struct Precision {
    wide: bool,
}

impl Precision {
    fn round(self, v: f64) -> f64 {
        match self.wide {
            true => v,
            false => f64::from(v as f32),
        }
    }
}

/// Reflects `x` by the nearer border until it lies in `[lo, hi]`, each step rounded to `t`.
fn reflect(x: f64, lo: f64, hi: f64, t: Precision) -> f64 {
    let span = t.round(hi - lo);
    if span <= 0.0 {
        return lo;
    }
    let (dx, from, to) = if x < lo {
        (t.round(lo - x), lo, hi)
    } else if x > hi {
        (t.round(x - hi), hi, lo)
    } else {
        return x;
    };
    let n = t.round(dx / span).floor();
    let r = t.round(dx - t.round(n * span));
    // An even number of reflections ends on the side it started from.
    if n % 2.0 == 0.0 {
        t.round(from + (to - from).signum() * r)
    } else {
        t.round(to - (to - from).signum() * r)
    }
}

/// How far outside the input a tap's index is followed (beyond, it is held there).
const FAR: f64 = 1e9;

/// Coordinates beyond this many pixels (2^62) are replaced by the axis's low bound.
const FAR_COORDINATE: f64 = 4_611_686_018_427_387_904.0;

fn cubic_weights(f: f64) -> [f64; 4] {
    let a = -0.75;
    let outer = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let inner = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [outer(f + 1.0), inner(f), inner(1.0 - f), outer(2.0 - f)]
}

/// Coordinate `g` on an axis of extent `d`, in the input's pixels (rounded to the nearest,
/// halves to even, in nearest mode), and the axis's bounds, computed in `t`.
fn denormalize(g: f64, d: usize, mode: u32, align: bool, t: Precision) -> (f64, f64, f64) {
    let size = d as f64;
    let (x, lo, hi) = if align {
        let half = t.round(t.round(g + 1.0) / 2.0);
        (t.round(half * t.round(size - 1.0)), 0.0, size - 1.0)
    } else {
        let scaled = t.round(t.round(g + 1.0) * t.round(size));
        (
            t.round(t.round(scaled - 1.0) / 2.0),
            -0.5,
            t.round(size - 0.5),
        )
    };
    // NaN, infinite or beyond 2^62 pixels: read where -1 does, as onnxruntime replaces it.
    let x = if x.is_nan() || x.abs() > FAR_COORDINATE {
        lo
    } else {
        x
    };
    let x = if mode == 0 { x.round_ties_even() } else { x };
    (x, lo, hi)
}

/// The taps along one axis of extent `d` at coordinate `x`: each an index (padded: `None`
/// outside the input with zeros padding) and a weight, computed in `t` as onnxruntime
/// computes them.
fn axis_taps(
    (x, lo, hi): (f64, f64, f64),
    d: usize,
    mode: u32,
    padding: u32,
    t: Precision,
) -> Vec<(Option<usize>, f64)> {
    let last = d as i64 - 1;
    // Positions far outside held where index arithmetic cannot overflow, as the GPU holds
    // them; reflection reflects the position itself, rounded to `t`, however far.
    let place = |base: f64, offset: i64| -> Option<usize> {
        let j = base.clamp(-FAR, FAR) as i64 + offset;
        let j = match padding {
            0 if j < 0 || j > last => return None,
            2 if j < 0 || j > last => {
                let at = t.round(base + offset as f64);
                reflect(at, lo, hi, t).clamp(-1.0, d as f64) as i64
            }
            _ => j,
        };
        Some(j.clamp(0, last.max(0)) as usize)
    };
    if mode == 0 {
        return vec![(place(x, 0), 1.0)];
    }
    let base = x.floor();
    if mode == 1 {
        let (w0, w1) = (t.round(t.round(base + 1.0) - x), t.round(x - base));
        vec![(place(base, 0), w0), (place(base, 1), w1)]
    } else {
        let f = t.round(t.round(x - t.round(base - 1.0)) - 1.0).abs();
        let w = cubic_weights(f);
        (0..4).map(|k| (place(base, k as i64 - 1), w[k])).collect()
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
    let precision = Precision {
        wide: x.dtype == DType::F64,
    };
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
                    denormalize(g, dims[a], mode, attrs.align_corners, precision)
                })
                .collect();
            let per_axis: Vec<Vec<(Option<usize>, f64)>> = (0..k)
                .map(|a| axis_taps(xs[a], dims[a], mode, padding, precision))
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
                        // A tap outside reads 0.
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
