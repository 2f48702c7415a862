//! DFT, STFT and AffineGrid on the CPU, from their definitions (independent of the GPU's
//! matrices): each DFT bin a sum of complex exponentials in f64 (the one-sided inverse through
//! the spectrum's Hermitian completion, as numpy's `irfft` defines it), the affine grid a
//! product per position.

use crate::graph::{Attr, Node};
use crate::ops::dft::{dft_axis, dft_parts, stft_frames};
use crate::ops::grid_sample::{affine_base_grid, affine_grid_shape};
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

fn int(node: &Node, name: &str, default: i64) -> i64 {
    match node.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

fn scalar(t: Option<&HostTensor>) -> R<Option<i64>> {
    match t {
        None => Ok(None),
        Some(t) if t.numel() == 1 => Ok(Some(
            HostTensor {
                shape: vec![1],
                ..t.clone()
            }
            .to_indices("reference", "scalar")?[0],
        )),
        Some(t) => Err(format!("expected a scalar, got shape {:?}", t.shape).into()),
    }
}

/// Transforms longer than this go through the host's FFT (`ops::fft::host_fft`, f64) rather
/// than a direct sum per bin, so folding a long DFT of constants takes N log N.
const DIRECT_LENGTH: usize = 4096;

/// A one-sided spectrum's Hermitian completion to `length` bins: bins 0..=length/2 given
/// (missing ones zero), the rest their conjugate mirror images; bins 0 and length/2 (even
/// length) real.
fn hermitian(x: &[(f64, f64)], length: usize) -> Vec<(f64, f64)> {
    let sample = |j: usize| x.get(j).copied().unwrap_or((0.0, 0.0));
    let mut full = vec![(0.0, 0.0); length];
    for (k, bin) in full.iter_mut().enumerate().take(length / 2 + 1) {
        *bin = sample(k);
    }
    for k in 1..length.div_ceil(2) {
        let (re, im) = full[k];
        full[length - k] = (re, -im);
    }
    full[0].1 = 0.0;
    if length.is_multiple_of(2) {
        full[length / 2].1 = 0.0;
    }
    full
}

/// One transform of `x` (complex samples): `length` points, forward or inverse, one-sided
/// or not; complex bins (a real one-sided inverse gives real values as imaginary 0).
fn transform(x: &[(f64, f64)], length: usize, inverse: bool, onesided: bool) -> Vec<(f64, f64)> {
    let bins = if onesided && !inverse {
        length / 2 + 1
    } else {
        length
    };
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / length as f64 } else { 1.0 };
    if length > DIRECT_LENGTH {
        let signal = match inverse && onesided {
            true => hermitian(x, length),
            false => (0..length)
                .map(|j| x.get(j).copied().unwrap_or((0.0, 0.0)))
                .collect(),
        };
        let y = crate::ops::fft::host_fft(&signal, sign);
        return y
            .into_iter()
            .take(bins)
            .map(|(re, im)| match inverse && onesided {
                true => (re * scale, 0.0),
                false => (re * scale, im * scale),
            })
            .collect();
    }
    let angle = |a: usize, b: usize| {
        2.0 * std::f64::consts::PI * ((a as u128 * b as u128) % length as u128) as f64
            / length as f64
    };
    if inverse && onesided {
        let full = hermitian(x, length);
        return (0..length)
            .map(|t| {
                let re: f64 = full
                    .iter()
                    .enumerate()
                    .map(|(k, &(a, b))| {
                        let th = angle(k, t);
                        a * th.cos() - b * th.sin()
                    })
                    .sum();
                (re * scale, 0.0)
            })
            .collect();
    }
    (0..bins)
        .map(|k| {
            let (mut re, mut im) = (0.0, 0.0);
            for (j, &(a, b)) in x.iter().enumerate().take(length) {
                let th = angle(j, k);
                let (c, s) = (th.cos(), sign * th.sin());
                re += a * c - b * s;
                im += a * s + b * c;
            }
            (re * scale, im * scale)
        })
        .collect()
}

/// `x` (`[..., parts]`) transformed along axis `a`; the output's last axis holds `parts_out`.
fn transform_axis(
    x: &HostTensor,
    a: usize,
    length: usize,
    inverse: bool,
    onesided: bool,
    window: Option<&[f64]>,
) -> R<HostTensor> {
    let values = cast(x, DType::F64)?.to_vec::<f64>()?;
    let shape = &x.shape;
    let r = shape.len();
    let parts = shape[r - 1];
    let n = shape[a];
    let outer: usize = shape[..a].iter().product();
    let inner: usize = shape[a + 1..r - 1].iter().product();
    let bins = if inverse && onesided {
        length
    } else if onesided {
        length / 2 + 1
    } else {
        length
    };
    let parts_out = if inverse && onesided { 1 } else { 2 };
    // The GPU's bound on a transform, so the interpreter never builds what it refuses.
    crate::ops::fft::check_points("DFT", length)?;
    let mut out = vec![0.0; outer * bins * inner * parts_out];
    for o in 0..outer {
        for i in 0..inner {
            let signal: Vec<(f64, f64)> = (0..n)
                .map(|j| {
                    let at = ((o * n + j) * inner + i) * parts;
                    let w = window.map_or(1.0, |w| w[j]);
                    let im = if parts == 2 { values[at + 1] } else { 0.0 };
                    (values[at] * w, im * w)
                })
                .collect();
            for (k, (re, im)) in transform(&signal, length, inverse, onesided)
                .into_iter()
                .enumerate()
            {
                let at = ((o * bins + k) * inner + i) * parts_out;
                out[at] = re;
                if parts_out == 2 {
                    out[at + 1] = im;
                }
            }
        }
    }
    let mut out_shape = shape.clone();
    out_shape[a] = bins;
    out_shape[r - 1] = parts_out;
    cast(&HostTensor::from_vec(out_shape, &out)?, x.dtype)
}

/// Runs `node` when it is a DFT, STFT or AffineGrid (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    let arg = |i: usize| args.get(i).and_then(Option::as_ref);
    let first = || arg(0).ok_or_else(|| RefError(format!("{}: input 0 missing", node.op)));
    match node.op.as_str() {
        "DFT" => {
            let x = first()?;
            dft_parts("DFT", &x.shape)?;
            let a = dft_axis("DFT", x.shape.len(), scalar(arg(2))?.unwrap_or(-2))?;
            let (inverse, onesided) = (int(node, "inverse", 0) != 0, int(node, "onesided", 0) != 0);
            let length = match scalar(arg(1))? {
                Some(l) if l >= 1 => l as usize,
                Some(l) => return Err(format!("DFT: dft_length {l}").into()),
                None if inverse && onesided => 2 * x.shape[a].saturating_sub(1),
                None => x.shape[a],
            };
            if length == 0 && onesided {
                return Err("DFT: a one-sided transform of no length".into());
            }
            Ok(Some(transform_axis(x, a, length, inverse, onesided, None)?))
        }
        "STFT" => {
            let x = first()?;
            let step = scalar(arg(1))?.ok_or("STFT: frame_step missing")?;
            let window = match arg(2) {
                Some(w) => Some(cast(w, DType::F64)?.to_vec::<f64>()?),
                None => None,
            };
            let (frame, frames) = stft_frames(
                &x.shape,
                step,
                window.as_ref().map(Vec::len),
                scalar(arg(3))?,
            )?;
            let step = step as usize;
            let (batch, len, parts) = (x.shape[0], x.shape[1], x.shape[2]);
            let size = x.dtype.size();
            let mut bytes = Vec::with_capacity(batch * frames * frame * parts * size);
            for b in 0..batch {
                for f in 0..frames {
                    let from = ((b * len + f * step) * parts) * size;
                    bytes.extend_from_slice(&x.data[from..from + frame * parts * size]);
                }
            }
            let framed = HostTensor::from_bytes(x.dtype, vec![batch, frames, frame, parts], bytes)?;
            let onesided = int(node, "onesided", 1) != 0;
            Ok(Some(transform_axis(
                &framed,
                2,
                frame,
                false,
                onesided,
                window.as_deref(),
            )?))
        }
        "AffineGrid" => {
            let theta = first()?;
            let size = arg(1)
                .ok_or("AffineGrid: size missing")?
                .to_indices("AffineGrid", "size")?;
            let shape = affine_grid_shape((theta.dtype, &theta.shape), &size)?;
            let dims: Vec<usize> = size[2..].iter().map(|&d| d as usize).collect();
            let k = dims.len();
            let base = affine_base_grid(&dims, int(node, "align_corners", 0) != 0);
            let t = cast(theta, DType::F64)?.to_vec::<f64>()?;
            let positions: usize = dims.iter().product();
            let mut out = Vec::with_capacity(shape.iter().product());
            for b in 0..shape[0] {
                for p in 0..positions {
                    for c in 0..k {
                        let row = &t[(b * k + c) * (k + 1)..(b * k + c + 1) * (k + 1)];
                        let point = &base[p * (k + 1)..(p + 1) * (k + 1)];
                        out.push(row.iter().zip(point).map(|(x, y)| x * y).sum::<f64>());
                    }
                }
            }
            Ok(Some(cast(
                &HostTensor::from_vec(shape, &out)?,
                theta.dtype,
            )?))
        }
        _ => Ok(None),
    }
}
