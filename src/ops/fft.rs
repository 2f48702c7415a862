//! Long DFTs in O(n log n): a transform of `n` points too long for one product with its
//! matrix (`dft.rs`) is factored. Where `n = n1 * n2`, the Cooley-Tukey step: `n2` transforms
//! of `n1` points, a twiddle per element, `n1` transforms of `n2` points, each a batch of rows
//! for the MatMul kernels, with the transposes between them. Where `n` has no factor
//! (a prime), Bluestein's chirp: the transform is a circular convolution of a power-of-two
//! length, itself factored. Signals are planar rows (`[rows, parts * n]`: real parts, then
//! imaginary parts where they are complex), in f32 (f64 for f64); every constant (matrices,
//! twiddles, the chirp's spectrum) is computed on the host in f64 from exactly reduced angles.

use super::dft::{dft_plan, twiddle, Spec};
use crate::kernels::gather::{GatherDim, GatherPlan};
use crate::kernels::pad::PadMode;
use crate::kernels::program::{Arg::Operand, Program};
use crate::{Error, Out, Recorder, Result, Tensor};

/// The pieces of a factored transform of at most this many points are one product with their
/// matrix (`[2n, 2n]`). Larger leaves cost 4 multiply-adds per point for each of their points:
/// on lavapipe, 4 signals of the prime 10007 (Bluestein through 128 x 256) took 850 ms with
/// leaves of up to 512 points and 250 ms with 64 (8 x 16, 16 x 16), the other long cases the
/// same within noise.
pub const DIRECT_POINTS: usize = 64;

/// Primes up to this are one product with their matrix too: a chirp costs two transforms of
/// at least twice their points.
const DIRECT_PRIME: usize = 512;

/// The most entries of the matrices of a split's first step with its twiddles folded in
/// (`4 n n1`: 16 MiB of f32); beyond it the twiddles are a pass of their own.
const FOLDED_ENTRIES: usize = 1 << 22;

/// The most points of one transform (2^24: 128 MiB of f32 per complex signal). The host
/// plans the twiddles of the outermost split in f64, about 40 bytes per point while they are
/// made (640 MiB here), so far longer transforms are refused rather than planned.
pub const MAX_POINTS: usize = 1 << 24;

/// How a transform of `n` points is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// One product with the `[2n, 2n]` matrix.
    Direct,
    /// `n = n1 * n2`: `n2` transforms of `n1` points, then `n1` of `n2` points.
    Split {
        /// Points of the first transforms.
        n1: usize,
        /// Points of the second.
        n2: usize,
    },
    /// Bluestein: a circular convolution of `m` points (a power of two, at least `2n - 1`).
    Chirp {
        /// The convolution's length.
        m: usize,
    },
}

/// The route of an `n`-point transform: direct up to [`DIRECT_POINTS`], else split at the
/// largest factor up to `sqrt(n)` (balanced pieces: fewest multiply-adds), else (a prime)
/// direct up to `DIRECT_PRIME`, else a chirp.
pub fn route(n: usize) -> Route {
    if n <= DIRECT_POINTS {
        return Route::Direct;
    }
    match (2..=n.isqrt()).rev().find(|d| n.is_multiple_of(*d)) {
        Some(n1) => Route::Split { n1, n2: n / n1 },
        None if n <= DIRECT_PRIME => Route::Direct,
        None => Route::Chirp {
            m: (2 * n - 1).next_power_of_two(),
        },
    }
}

/// `exp(sign * i * pi * j^2 / n)` for `j` in `0..n` (the chirp), angles reduced exactly.
fn chirp(n: usize, sign: f64) -> Vec<(f64, f64)> {
    (0..n as u128)
        .map(|j| {
            let (c, s) = twiddle(j * j, 2 * n);
            (c, sign * s)
        })
        .collect()
}

/// The chirp's conjugate laid out for a circular convolution of `m` points: `conj(c_d)` at
/// `d` and at `m - d` (the sum's negative offsets).
fn chirp_kernel(c: &[(f64, f64)], m: usize) -> Vec<(f64, f64)> {
    let mut b = vec![(0.0, 0.0); m];
    for (d, &(re, im)) in c.iter().enumerate() {
        b[d] = (re, -im);
        if d > 0 {
            b[m - d] = (re, -im);
        }
    }
    b
}

/// The DFT of `x` (`sign` -1 forward, +1 inverse, unscaled) in f64 on the host: radix 2 for
/// powers of two, Bluestein's chirp through them for other lengths. For the chirp's constant
/// spectrum, and the CPU interpreter's long transforms.
pub fn host_fft(x: &[(f64, f64)], sign: f64) -> Vec<(f64, f64)> {
    let n = x.len();
    if n <= 1 {
        return x.to_vec();
    }
    if n.is_power_of_two() {
        return radix2(x, sign);
    }
    let m = (2 * n - 1).next_power_of_two();
    let c = chirp(n, sign);
    let mut a = vec![(0.0, 0.0); m];
    for j in 0..n {
        a[j] = mul(x[j], c[j]);
    }
    let (fa, fb) = (radix2(&a, -1.0), radix2(&chirp_kernel(&c, m), -1.0));
    let product: Vec<(f64, f64)> = fa.iter().zip(&fb).map(|(p, q)| mul(*p, *q)).collect();
    let conv = radix2(&product, 1.0);
    (0..n)
        .map(|k| {
            let (re, im) = mul(conv[k], c[k]);
            (re / m as f64, im / m as f64)
        })
        .collect()
}

fn mul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// Iterative radix-2 FFT of a power-of-two length, unscaled.
fn radix2(x: &[(f64, f64)], sign: f64) -> Vec<(f64, f64)> {
    let n = x.len();
    let bits = n.trailing_zeros();
    let mut v: Vec<(f64, f64)> = (0..n)
        .map(|i| {
            x[if bits == 0 {
                0
            } else {
                i.reverse_bits() >> (usize::BITS - bits)
            }]
        })
        .collect();
    let roots: Vec<(f64, f64)> = (0..n / 2)
        .map(|k| {
            let (c, s) = twiddle(k as u128, n);
            (c, sign * s)
        })
        .collect();
    let mut half = 1;
    while half < n {
        let stride = n / (2 * half);
        for start in (0..n).step_by(2 * half) {
            for k in 0..half {
                let t = mul(v[start + half + k], roots[k * stride]);
                let u = v[start + k];
                v[start + k] = (u.0 + t.0, u.1 + t.1);
                v[start + half + k] = (u.0 - t.0, u.1 - t.1);
            }
        }
        half *= 2;
    }
    v
}

impl Recorder {
    /// The DFT of each row of `x` (`[rows, parts * n]` planar: real parts, then imaginary
    /// parts when `parts` is 2; f32 or f64) along its `n` points, forward or (`inverse`) the
    /// inverse with its `1 / n`; a new `[rows, 2 * n]` tensor. Real rows (`parts` 1) go
    /// through the first products as they are, with no imaginary zeros to move and multiply.
    pub(crate) fn fft_rows(
        &mut self,
        op: &'static str,
        x: &Tensor,
        parts: usize,
        n: usize,
        inverse: bool,
    ) -> Result<Tensor> {
        let dtype = x.dtype();
        let rows = x.numel() / (parts * n);
        let sign = if inverse { 1.0 } else { -1.0 };
        match route(n) {
            Route::Direct => {
                let params = [n as u64, parts as u64, u64::from(inverse)];
                let matrix = self
                    .cached_values("DFT matrix", dtype, &params, || {
                        let plan = dft_plan(op, n, parts, Some(n as i64), inverse, false, None)?;
                        Ok(vec![(vec![parts * n, 2 * n], plan.matrix)])
                    })?
                    .remove(0);
                let y = self.matmul(x, &matrix)?;
                self.release(matrix);
                Ok(y)
            }
            Route::Split { n1, n2 } => {
                // Sample j = j1 * n2 + j2, bin k = k1 + n1 * k2: first over j1 for each j2,
                // each result k1 turned by the twiddle exp(sign 2 pi i j2 k1 / n).
                let x = x.reshaped(&[rows, parts, n1, n2])?;
                let twiddles = || -> Vec<(f64, f64)> {
                    (0..n2 as u128)
                        .flat_map(|j2| {
                            (0..n1 as u128).map(move |k1| {
                                let (c, s) = twiddle(j2 * k1, n);
                                (c, sign * s)
                            })
                        })
                        .collect()
                };
                let params = [n as u64, n1 as u64, parts as u64, u64::from(inverse)];
                let t = if route(n1) == Route::Direct && 4 * n * n1 <= FOLDED_ENTRIES {
                    // The twiddles folded into one matrix per j2: a batched product, no
                    // separate pass. Batches of j2 outermost: [n2, rows, parts, n1].
                    let t = self.transpose(&x, Some(&[3, 0, 1, 2]))?;
                    let w = 2 * n1;
                    let matrices = self
                        .cached_values("DFT folded twiddles", dtype, &params, || {
                            let plan =
                                dft_plan(op, n1, parts, Some(n1 as i64), inverse, false, None)?;
                            let mut folded = Vec::with_capacity(n2 * parts * n1 * w);
                            for turns in twiddles().chunks(n1) {
                                for row in plan.matrix.chunks(w) {
                                    let (re, im) = row.split_at(n1);
                                    folded.extend(
                                        re.iter()
                                            .zip(im)
                                            .zip(turns)
                                            .map(|((a, b), t)| a * t.0 - b * t.1),
                                    );
                                    folded.extend(
                                        re.iter()
                                            .zip(im)
                                            .zip(turns)
                                            .map(|((a, b), t)| a * t.1 + b * t.0),
                                    );
                                }
                            }
                            Ok(vec![(vec![n2, parts * n1, w], folded)])
                        })?
                        .remove(0);
                    let y = self.matmul(&t.reshaped(&[n2, rows, parts * n1])?, &matrices)?;
                    self.release(t);
                    self.release(matrices);
                    let t =
                        self.transpose(&y.reshaped(&[n2, rows, 2, n1])?, Some(&[1, 3, 2, 0]))?;
                    self.release(y);
                    t
                } else {
                    let t = self.transpose(&x, Some(&[0, 3, 1, 2]))?;
                    let flat = t.reshaped(&[rows * n2, parts * n1])?;
                    let y = self.fft_rows(op, &flat, parts, n1, inverse)?;
                    self.release(t);
                    let z = self.complex_scale(
                        op,
                        &y.reshaped(&[rows, n2, 2, n1])?,
                        ("DFT twiddles", &params),
                        twiddles,
                    )?;
                    self.release(y);
                    let t = self.transpose(&z, Some(&[0, 3, 2, 1]))?;
                    self.release(z);
                    t
                };
                let w = self.fft_rows(op, &t.reshaped(&[rows * n1, 2 * n2])?, 2, n2, inverse)?;
                self.release(t);
                let out = self.transpose(&w.reshaped(&[rows, n1, 2, n2])?, Some(&[0, 2, 3, 1]))?;
                self.release(w);
                Ok(out.reshaped(&[rows, 2 * n])?)
            }
            Route::Chirp { .. } if parts == 1 => {
                // The chirp turns real samples complex: give them their imaginary zeros.
                let complex = self.pad_to(
                    &x.reshaped(&[rows, 1, n])?,
                    &[0, 0, 0, 0, 1, 0],
                    PadMode::Constant,
                    None,
                    None,
                    Out::NEW,
                )?;
                let y = self.fft_rows(op, &complex.reshaped(&[rows, 2 * n])?, 2, n, inverse)?;
                self.release(complex);
                Ok(y)
            }
            Route::Chirp { m } => {
                // X_k = c_k sum_j (x_j c_j) conj(c_(k-j)), c_j = exp(sign i pi j^2 / n): the
                // sum is a circular convolution of m points, through two m-point transforms.
                let params = [n as u64, m as u64, u64::from(inverse)];
                let chirp_key = ("DFT chirp", &params[..]);
                let c = || chirp(n, sign);
                let a = self.complex_scale(op, &x.reshaped(&[rows, 1, 2, n])?, chirp_key, c)?;
                let padded = self.pad_to(
                    &a.reshaped(&[rows, 2, n])?,
                    &[0, 0, 0, 0, 0, (m - n) as i64],
                    PadMode::Constant,
                    None,
                    None,
                    Out::NEW,
                )?;
                self.release(a);
                let fa = self.fft_rows(op, &padded.reshaped(&[rows, 2 * m])?, 2, m, false)?;
                self.release(padded);
                // The inverse's 1 / n folded into the kernel's spectrum.
                let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
                let kernel = || -> Vec<(f64, f64)> {
                    host_fft(&chirp_kernel(&c(), m), -1.0)
                        .into_iter()
                        .map(|(re, im)| (re * scale, im * scale))
                        .collect()
                };
                let product = self.complex_scale(
                    op,
                    &fa.reshaped(&[rows, 1, 2, m])?,
                    ("DFT chirp kernel", &params),
                    kernel,
                )?;
                self.release(fa);
                let conv = self.fft_rows(op, &product.reshaped(&[rows, 2 * m])?, 2, m, true)?;
                self.release(product);
                let first = self.strided_view(
                    op,
                    &conv,
                    0,
                    &[(rows, 2 * m as i64), (2, m as i64), (n, 1)],
                )?;
                self.release(conv);
                let out =
                    self.complex_scale(op, &first.reshaped(&[rows, 1, 2, n])?, chirp_key, c)?;
                self.release(first);
                Ok(out.reshaped(&[rows, 2 * n])?)
            }
        }
    }

    /// ONNX DFT of `planar` (`[rows, c_in * n]`: each row's real parts, then its imaginary
    /// parts when `c_in` is 2) as `spec` says, with `length` points: `[rows, c_out * m]`, the
    /// bins' real parts then imaginary parts, or the real samples of a one-sided inverse.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fft_axis_rows(
        &mut self,
        op: &'static str,
        planar: &Tensor,
        rows: usize,
        n: usize,
        c_in: usize,
        length: usize,
        spec: &Spec,
    ) -> Result<Tensor> {
        let dtype = planar.dtype();
        let mut temps: Vec<Tensor> = Vec::new();
        let mut x = planar.reshaped(&[rows, c_in, n])?;
        if let Some(window) = spec.window {
            let w = self.host_values(dtype, &[n], window)?;
            x = self.map_to("Mul", &[&x, &w], Out::NEW)?;
            self.release(w);
            temps.push(x.clone());
        }
        // `x` cut or padded with zeros to `points` points of every part (a negative end pad
        // crops).
        let mut fit = |rec: &mut Recorder, x: &Tensor, points: usize| {
            if points == n {
                return Ok::<Tensor, Error>(x.clone());
            }
            let fitted = rec.pad_to(
                x,
                &[0, 0, 0, 0, 0, points as i64 - n as i64],
                PadMode::Constant,
                None,
                None,
                Out::NEW,
            )?;
            temps.push(fitted.clone());
            Ok(fitted)
        };
        let y = if spec.inverse && spec.onesided {
            // numpy's irfft: bins 0..=length/2 given (missing ones zero), the others the
            // conjugates of their mirror images; the real part of the inverse. The imaginary
            // parts of bins 0 and length/2 only reach the imaginary part.
            let half = length / 2;
            let s = fit(self, &x, half + 1)?;
            let count = length - 1 - half;
            let full = match count {
                0 => s,
                _ => {
                    let h = (half + 1) as i64;
                    let mirror = self.strided_view(
                        op,
                        &s,
                        count as u64,
                        &[(rows, c_in as i64 * h), (c_in, h), (count, -1)],
                    )?;
                    let conj = match c_in {
                        2 => {
                            let flip = self.host_values(dtype, &[2, 1], &[1.0, -1.0])?;
                            let conj = self.map_to("Mul", &[&mirror, &flip], Out::NEW)?;
                            self.release(mirror);
                            self.release(flip);
                            conj
                        }
                        _ => mirror,
                    };
                    let full = self.concat(&[s, conj.clone()], 2)?;
                    self.release(conj);
                    temps.push(full.clone());
                    full
                }
            };
            let full = full.reshaped(&[rows, c_in * length])?;
            let z = self.fft_rows(op, &full, c_in, length, true)?;
            let real = self.strided_view(op, &z, 0, &[(rows, 2 * length as i64), (length, 1)])?;
            self.release(z);
            real
        } else {
            let s = fit(self, &x, length)?;
            let s = s.reshaped(&[rows, c_in * length])?;
            let z = self.fft_rows(op, &s, c_in, length, spec.inverse)?;
            match spec.onesided {
                true => {
                    let bins = length / 2 + 1;
                    let l = length as i64;
                    let first =
                        self.strided_view(op, &z, 0, &[(rows, 2 * l), (2, l), (bins, 1)])?;
                    self.release(z);
                    first.reshaped(&[rows, 2 * bins])?
                }
                false => z,
            }
        };
        for t in temps {
            self.release(t);
        }
        Ok(y)
    }

    /// `x` (`[rows, p, 2, l]`: rows of `p` planar complex vectors of `l`) times the complex
    /// constants `w` gives (`p * l` of them, the same for every row), element by element;
    /// `key` (a name and the numbers that decide them) keeps them on the device for later
    /// recordings (see `cached_values`).
    pub(crate) fn complex_scale(
        &mut self,
        op: &'static str,
        x: &Tensor,
        key: (&'static str, &[u64]),
        w: impl FnOnce() -> Vec<(f64, f64)>,
    ) -> Result<Tensor> {
        let s = x.shape().to_vec();
        let (rows, p, l) = (s[0], s[1], s[3]);
        // (a + ib)(c + id) = (a c - b d) + i (b c + a d): x times c, plus x with its parts
        // swapped times d and times [-1; 1], in one fused kernel.
        let dtype = x.dtype();
        let params: Vec<u64> = key.1.iter().copied().chain([p as u64, l as u64]).collect();
        let mut constants = self.cached_values(key.0, dtype, &params, || {
            let w = w();
            debug_assert_eq!(w.len(), p * l);
            Ok(vec![
                (vec![p, 1, l], w.iter().map(|v| v.0).collect()),
                (vec![p, 1, l], w.iter().map(|v| v.1).collect()),
            ])
        })?;
        let sin = constants.pop().unwrap();
        let cos = constants.pop().unwrap();
        let signs = self
            .cached_values("complex product signs", dtype, &[], || {
                Ok(vec![(vec![2, 1], vec![-1.0, 1.0])])
            })?
            .remove(0);
        let (pl, l_) = (2 * l as i64, l as i64);
        let swapped = self.strided_view(op, x, l as u64, &[(rows * p, pl), (2, -l_), (l, 1)])?;
        let swapped = swapped.reshaped(&s)?;
        let mut program = Program::new(vec![dtype; 5], false);
        let a = program.push("Mul", vec![Operand(0), Operand(2)], dtype);
        let b = program
            .push("Mul", vec![Operand(1), Operand(3)], dtype)
            .and_then(|b| program.push("Mul", vec![b, Operand(4)], dtype));
        a.zip(b)
            .and_then(|(a, b)| program.push("Add", vec![a, b], dtype))
            .ok_or_else(|| Error::Graph(format!("internal: no complex product on {dtype}")))?;
        let y = self.program_to(&program, &[x, &swapped, &cos, &sin, &signs], Out::NEW)?;
        for t in [swapped, cos, sin, signs] {
            self.release(t);
        }
        Ok(y)
    }

    /// A new tensor of `dims` (`(len, step)` in elements, outermost first) read from `x`
    /// starting at element `base`.
    pub(crate) fn strided_view(
        &mut self,
        op: &'static str,
        x: &Tensor,
        base: u64,
        dims: &[(usize, i64)],
    ) -> Result<Tensor> {
        let shape: Vec<usize> = dims.iter().map(|d| d.0).collect();
        let plan = GatherPlan::from_dims(
            base,
            &dims
                .iter()
                .map(|&(len, step)| GatherDim {
                    len: len as u64,
                    step,
                })
                .collect::<Vec<_>>(),
        );
        let out = self.alloc(x.dtype(), &shape)?;
        self.gather_into(op, x, &plan, &out)?;
        Ok(out)
    }
}

/// Refuses transforms of more than [`MAX_POINTS`].
pub fn check_points(op: &'static str, points: usize) -> Result<()> {
    if points > MAX_POINTS {
        return Err(Error::LimitExceeded {
            op,
            what: "the transform's points".into(),
            limit: "2^24 points per transform",
            needed: points as u64,
            max: MAX_POINTS as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(x: &[(f64, f64)], sign: f64) -> Vec<(f64, f64)> {
        let n = x.len();
        (0..n)
            .map(|k| {
                x.iter().enumerate().fold((0.0, 0.0), |acc, (j, &v)| {
                    let (c, s) = twiddle((j * k) as u128, n);
                    let t = mul(v, (c, sign * s));
                    (acc.0 + t.0, acc.1 + t.1)
                })
            })
            .collect()
    }

    #[test]
    fn host_fft_is_the_direct_sum_for_every_length() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for n in [1, 2, 3, 5, 8, 12, 17, 64, 97, 100, 256, 331] {
            let x: Vec<(f64, f64)> = (0..n).map(|_| (next(), next())).collect();
            for sign in [-1.0, 1.0] {
                let (got, want) = (host_fft(&x, sign), direct(&x, sign));
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    let err = (g.0 - w.0).abs().max((g.1 - w.1).abs());
                    assert!(
                        err < 1e-12 * n as f64,
                        "n {n} sign {sign} bin {k}: {g:?} {w:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn routes_split_at_balanced_factors_and_chirp_primes() {
        assert_eq!(route(64), Route::Direct);
        assert_eq!(route(512), Route::Split { n1: 16, n2: 32 });
        assert_eq!(route(1024), Route::Split { n1: 32, n2: 32 });
        assert_eq!(route(1000), Route::Split { n1: 25, n2: 40 });
        assert_eq!(route(2 * 1031), Route::Split { n1: 2, n2: 1031 });
        assert_eq!(route(1031), Route::Chirp { m: 4096 });
        assert_eq!(route(509), Route::Direct);
        assert_eq!(route(521), Route::Chirp { m: 2048 });
        assert_eq!(route(1 << 20), Route::Split { n1: 1024, n2: 1024 });
    }
}
