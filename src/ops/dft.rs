//! ONNX DFT (opsets 17 and 20) and STFT (17). Along the transformed axis each output bin is a
//! linear function of the input samples, so for short transforms the host plans the DFT's
//! matrix (plain data, `dft_plan`: cosines and sines of exactly reduced angles, the inverse's
//! 1/N, the one-sided real inverse's doubled bins, a window) and the GPU multiplies the
//! signals, laid out as rows of real parts then imaginary parts, by it with the tuned MatMul
//! kernels. That costs N^2 per signal and a matrix of 4 N^2 values, so transforms whose matrix
//! would exceed [`DIRECT_ENTRIES`] (past about 512 points) are factored into short ones instead
//! (`fft.rs`: N log N, up to 2^24 points).

use crate::{DType, Error, Out, Recorder, Result, Tensor};

fn invalid(op: &'static str, input: &str, message: String) -> Error {
    Error::invalid(op, input, message)
}

/// One transform along an axis: input samples `n` (with `c_in` parts, 1 real or 2 complex),
/// output bins `m` with `c_out` parts, and the matrix `[c_in * n, c_out * m]` (row-major, f64)
/// taking the input's real parts then imaginary parts to the output's.
#[derive(Clone, Debug, PartialEq)]
pub struct DftPlan {
    /// Input samples.
    pub n: usize,
    /// Parts per input sample: 1 real, 2 complex.
    pub c_in: usize,
    /// Output bins.
    pub m: usize,
    /// Parts per output bin.
    pub c_out: usize,
    /// The transform's matrix `[c_in * n, c_out * m]`, row-major.
    pub matrix: Vec<f64>,
}

/// The most entries of a matrix for which a transform is one product with it (4 MiB of f32: a
/// 512-point complex transform); longer ones are factored (`fft.rs`).
pub const DIRECT_ENTRIES: u64 = 1 << 20;

/// What `transform_axis` computes along its axis (see [`dft_plan`]).
pub(crate) struct Spec<'a> {
    pub length: Option<i64>,
    pub inverse: bool,
    pub onesided: bool,
    pub window: Option<&'a [f64]>,
}

/// `(cos, sin)` of `2 pi k / length`, with `k` reduced modulo `length` first (exact for the
/// integer products of sample and bin indices).
pub(crate) fn twiddle(k: u128, length: usize) -> (f64, f64) {
    let angle = 2.0 * std::f64::consts::PI * (k % length as u128) as f64 / length as f64;
    (angle.cos(), angle.sin())
}

/// The points and output bins of a DFT of `n` samples (see [`dft_plan`]), after checking
/// `dft_length`.
pub fn dft_shape(
    op: &'static str,
    n: usize,
    length: Option<i64>,
    inverse: bool,
    onesided: bool,
) -> Result<(usize, usize)> {
    let default = if inverse && onesided {
        2 * n.saturating_sub(1)
    } else {
        n
    };
    let length = match length {
        None => default,
        Some(l) if l >= 1 => l as usize,
        Some(l) => {
            return Err(invalid(
                op,
                "dft_length",
                format!("dft_length must be at least 1, not {l}"),
            ))
        }
    };
    if length == 0 {
        // No samples: a full transform of no points is empty (as onnxruntime gives it); a
        // one-sided one is not defined.
        if !onesided {
            return Ok((0, 0));
        }
        let what = if inverse {
            format!("a one-sided inverse of {n} bins has no default length (give dft_length)")
        } else {
            "a one-sided transform of 0 samples has no bins (give dft_length)".to_string()
        };
        return Err(invalid(op, "input", what));
    }
    let m = if inverse && onesided {
        length
    } else if onesided {
        length / 2 + 1
    } else {
        length
    };
    Ok((length, m))
}

/// Plans a DFT of `n` samples of `c_in` parts (1 or 2) as ONNX DFT defines it: `length`
/// (dft_length; by default `n`, or `2 (n - 1)` for a one-sided inverse) points, samples beyond
/// it dropped and missing ones zero; `inverse` (with 1/length); `onesided`: the forward
/// transform's first `length / 2 + 1` bins, or the inverse of a one-sided spectrum (real
/// output, numpy's `irfft`). `window`: each sample's weight (STFT), `n` of them.
pub fn dft_plan(
    op: &'static str,
    n: usize,
    c_in: usize,
    length: Option<i64>,
    inverse: bool,
    onesided: bool,
    window: Option<&[f64]>,
) -> Result<DftPlan> {
    let (length, m) = dft_shape(op, n, length, inverse, onesided)?;
    let used = n.min(length);
    if inverse && onesided {
        // numpy's irfft: bins 0..=length/2 of a Hermitian spectrum, the others their mirror
        // images (counted twice), the imaginary parts of bins 0 and length/2 (even length)
        // without effect; a real output.
        let half = length / 2;
        let mut matrix = vec![0.0; c_in * n * m];
        for k in 0..n.min(half + 1) {
            let twice = if k == 0 || (length % 2 == 0 && k == half) {
                1.0
            } else {
                2.0
            };
            for t in 0..m {
                let (cos, sin) = twiddle(k as u128 * t as u128, length);
                let scale = twice / length as f64;
                matrix[k * m + t] = cos * scale;
                if c_in == 2 {
                    matrix[(n + k) * m + t] = -sin * scale;
                }
            }
        }
        return Ok(DftPlan {
            n,
            c_in,
            m,
            c_out: 1,
            matrix,
        });
    }
    let (sign, scale) = match inverse {
        true => (1.0, 1.0 / length as f64),
        false => (-1.0, 1.0),
    };
    let width = 2 * m;
    let mut matrix = vec![0.0; c_in * n * width];
    for j in 0..used {
        let weight = scale * window.map_or(1.0, |w| w[j]);
        for k in 0..m {
            let (cos, sin) = twiddle(j as u128 * k as u128, length);
            let (cos, sin) = (cos * weight, sign * sin * weight);
            // (re + i im)(cos + i sin): re cos - im sin, re sin + im cos.
            matrix[j * width + k] = cos;
            matrix[j * width + m + k] = sin;
            if c_in == 2 {
                matrix[(n + j) * width + k] = -sin;
                matrix[(n + j) * width + m + k] = cos;
            }
        }
    }
    Ok(DftPlan {
        n,
        c_in,
        m,
        c_out: 2,
        matrix,
    })
}

/// The transformed axis of an input of rank `r`: `axis` in `[-r, -2]` or `[0, r - 2]` (the
/// last axis holds the parts).
pub fn dft_axis(op: &'static str, rank: usize, axis: i64) -> Result<usize> {
    let r = rank as i64;
    if rank < 2 || axis < -r || axis > r - 2 || axis == -1 {
        return Err(invalid(
            op,
            "axis",
            format!("axis {axis} is not a signal axis of a rank-{rank} input (its last axis holds the real and imaginary parts)"),
        ));
    }
    Ok((if axis < 0 { axis + r } else { axis }) as usize)
}

/// The parts of an input's elements (its last axis): 1 real, 2 real and imaginary.
pub fn dft_parts(op: &'static str, shape: &[usize]) -> Result<usize> {
    match shape.last() {
        Some(&p) if p == 1 || p == 2 => Ok(p),
        p => Err(invalid(
            op,
            "input",
            format!(
                "the last axis holds 1 (real) or 2 (real, imaginary) parts, not {}",
                p.map_or("none".to_string(), |p| p.to_string())
            ),
        )),
    }
}

/// STFT's frame length and number of frames for `signal` `[batch, length, 1 or 2]`, after
/// checking the framing.
pub fn stft_frames(
    signal: &[usize],
    frame_step: i64,
    window: Option<usize>,
    frame_length: Option<i64>,
) -> Result<(usize, usize)> {
    const OP: &str = "STFT";
    if signal.len() != 3 || !(1..=2).contains(&signal[2]) {
        return Err(invalid(
            OP,
            "signal",
            format!("signal must be [batch, length, 1 or 2], not {signal:?}"),
        ));
    }
    let frame = match (frame_length, window) {
        (Some(l), Some(w)) if l < 1 || l as usize != w => {
            return Err(invalid(
                OP,
                "frame_length",
                format!("frame_length {l} must be the window's length {w}"),
            ))
        }
        (Some(l), _) if l >= 1 => l as usize,
        (None, Some(w)) if w >= 1 => w,
        _ => {
            return Err(invalid(
                OP,
                "frame_length",
                "STFT needs a frame_length of at least 1, or a window".to_string(),
            ))
        }
    };
    if frame_step < 1 {
        return Err(invalid(
            OP,
            "frame_step",
            format!("frame_step must be at least 1, not {frame_step}"),
        ));
    }
    let len = signal[1];
    if frame > len {
        return Err(invalid(
            OP,
            "signal",
            format!("a frame of {frame} samples is longer than the signal ({len})"),
        ));
    }
    Ok((frame, 1 + (len - frame) / frame_step as usize))
}

fn float(op: &'static str, input: &str, dtype: DType) -> Result<DType> {
    match dtype {
        DType::F64 => Ok(DType::F64),
        DType::F32 | DType::F16 | DType::BF16 => Ok(DType::F32),
        d => Err(invalid(
            op,
            input,
            format!("{input} is {d}; it takes f32, f16, bf16 or f64"),
        )),
    }
}

impl Recorder {
    /// Records ONNX DFT of `input` (`[..., signal..., 1 or 2]`, real or complex) along
    /// `axis` (see [`dft_plan`]): computed in f32 (f64 for f64) and rounded once.
    pub fn dft_to(
        &mut self,
        input: &Tensor,
        length: Option<i64>,
        axis: i64,
        inverse: bool,
        onesided: bool,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "DFT";
        self.check_inputs(OP, &[("input", input)])?;
        super::check_rank(OP, input.shape())?;
        let a = dft_axis(OP, input.rank(), axis)?;
        dft_parts(OP, input.shape())?;
        let spec = Spec {
            length,
            inverse,
            onesided,
            window: None,
        };
        self.transform_axis(OP, input, a, &spec, out)
    }

    /// Records ONNX STFT of `signal` (`[batch, length, 1 or 2]`): frames of `frame_length`
    /// (or the window's length) every `frame_step` samples, each weighted by `window` (known
    /// while planning) and transformed; `[batch, frames, bins, 2]`.
    pub fn stft_to(
        &mut self,
        signal: &Tensor,
        frame_step: i64,
        window: Option<&[f64]>,
        frame_length: Option<i64>,
        onesided: bool,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "STFT";
        self.check_inputs(OP, &[("signal", signal)])?;
        let s = signal.shape();
        let (frame, frames) = stft_frames(s, frame_step, window.map(<[f64]>::len), frame_length)?;
        let (batch, len, parts) = (s[0], s[1], s[2]);
        let spec = Spec {
            length: Some(frame as i64),
            inverse: false,
            onesided,
            window,
        };
        // Checked before the frames are gathered.
        let (points, _) = dft_shape(OP, frame, spec.length, false, onesided)?;
        crate::ops::fft::check_points(OP, points)?;
        // The frames, overlapping reads of the signal: [batch, frames, frame, parts].
        let p = parts as i64;
        let framed = self.strided_view(
            OP,
            signal,
            0,
            &[
                (batch, len as i64 * p),
                (frames, frame_step * p),
                (frame, p),
                (parts, 1),
            ],
        )?;
        let y = self.transform_axis(OP, &framed, 2, &spec, out)?;
        self.release(framed);
        Ok(y)
    }

    /// `x`'s axis `a` (not the last, which holds the parts) transformed as `spec` says: one
    /// product with the transform's matrix while it holds at most [`DIRECT_ENTRIES`], else
    /// the factored transform (`fft.rs`).
    fn transform_axis(
        &mut self,
        op: &'static str,
        x: &Tensor,
        a: usize,
        spec: &Spec,
        out: Out,
    ) -> Result<Tensor> {
        let dtype = x.dtype();
        let wide = float(op, "input", dtype)?;
        let r = x.rank();
        let (n, c_in) = (x.shape()[a], x.shape()[r - 1]);
        let (length, m) = dft_shape(op, n, spec.length, spec.inverse, spec.onesided)?;
        let c_out = if spec.inverse && spec.onesided { 1 } else { 2 };
        let direct = (c_in as u64 * n as u64).saturating_mul(2 * m as u64) <= DIRECT_ENTRIES;
        if !direct {
            crate::ops::fft::check_points(op, length)?;
        }
        let mut shape = x.shape().to_vec();
        shape[a] = m;
        shape[r - 1] = c_out;
        if shape.contains(&0) {
            return out.tensor(self, dtype, &shape);
        }
        // The axis moved next to the parts, the parts before the samples: rows of
        // [real parts, imaginary parts].
        let mut perm: Vec<i64> = (0..r as i64 - 1).filter(|&k| k != a as i64).collect();
        perm.push(r as i64 - 1);
        perm.push(a as i64);
        let rows: usize = shape.iter().take(r - 1).product::<usize>() / m;
        let planar = self.transpose(x, Some(&perm))?;
        let planar =
            self.reshape_to(&planar, &[rows as i64, (c_in * n) as i64], false, Out::NEW)?;
        let planar = match dtype == wide {
            true => planar,
            false => {
                let w = self.cast(&planar, wide)?;
                self.release(planar);
                w
            }
        };
        let product = if direct {
            // The window's bits are part of the key: it is folded into the matrix.
            let window = spec.window.unwrap_or(&[]);
            let params: Vec<u64> = [n, c_in, length, window.len()]
                .iter()
                .map(|&v| v as u64)
                .chain([u64::from(spec.inverse), u64::from(spec.onesided)])
                .chain(window.iter().map(|v| v.to_bits()))
                .collect();
            let matrix = self
                .cached_values("DFT axis matrix", wide, &params, || {
                    let plan = dft_plan(
                        op,
                        n,
                        c_in,
                        Some(length as i64),
                        spec.inverse,
                        spec.onesided,
                        spec.window,
                    )?;
                    Ok(vec![(vec![c_in * n, c_out * m], plan.matrix)])
                })?
                .remove(0);
            let product = self.matmul(&planar, &matrix)?;
            self.release(matrix);
            product
        } else {
            self.fft_axis_rows(op, &planar, rows, n, c_in, length, spec)?
        };
        self.release(planar);
        let product = match dtype == wide {
            true => product,
            false => {
                let p = self.cast(&product, dtype)?;
                self.release(product);
                p
            }
        };
        // [rows, parts, bins] back to the input's order of axes, the bins at the axis.
        let mut moved: Vec<i64> = perm
            .iter()
            .take(r - 2)
            .map(|&k| x.shape()[k as usize] as i64)
            .collect();
        moved.push(c_out as i64);
        moved.push(m as i64);
        let product = self.reshape_to(&product, &moved, false, Out::NEW)?;
        let mut back = vec![0i64; r];
        for (i, &p) in perm.iter().enumerate() {
            back[p as usize] = i as i64;
        }
        let y = self.transpose_to(&product, Some(&back), out)?;
        self.release(product);
        Ok(y)
    }
}
