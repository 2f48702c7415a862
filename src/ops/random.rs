//! The random ops (RandomUniform, RandomNormal, their `Like` forms, Bernoulli, Multinomial,
//! and Dropout in training mode), drawn on the GPU from a [`RandomStream`]: a Philox4x32-10
//! key and a draw index kept in a GPU buffer, so that every execution of a node (every
//! iteration of a Scan body, every run of a session) draws new numbers with no host work.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::kernels::random::{Draw, RandomMode};
use crate::{Context, DType, Error, HostTensor, Out, Recorder, Result, Tensor};

/// A stream of random numbers: a 64-bit key and the index of its next draw, on the GPU.
/// Each op recorded with it takes one draw (all of its values from that draw's counter range)
/// and moves the stream to the next, on the GPU, when the commands run. Clones share the
/// stream.
#[derive(Clone, Debug)]
pub struct RandomStream {
    key: u64,
    state: Tensor,
}

/// Makes the keys of unseeded streams distinct within a process even where the platform
/// gives no entropy (see [`RandomStream::unseeded`]).
static UNSEEDED: AtomicU64 = AtomicU64::new(0);

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl RandomStream {
    /// The stream keyed by `seed`, at its first draw: the same seed draws the same numbers.
    pub fn new(ctx: &Context, seed: u64) -> Result<RandomStream> {
        let state = Tensor::from_host(ctx, &HostTensor::from_vec(vec![2], &[0u32, 0])?)?;
        Ok(RandomStream { key: seed, state })
    }

    /// A stream with a key of its own: from the process's hash seed (the OS's entropy on
    /// native targets) mixed with a counter, so no two unseeded streams of a process share a
    /// key.
    pub fn unseeded(ctx: &Context) -> Result<RandomStream> {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(UNSEEDED.fetch_add(1, Ordering::Relaxed));
        RandomStream::new(ctx, splitmix64(h.finish()))
    }

    /// The stream's Philox key.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The buffer holding the next draw's index (two u32 words, low first).
    pub fn state(&self) -> &Tensor {
        &self.state
    }
}

/// The key of ONNX's `seed` attribute (a float): its integer part as a 64-bit two's
/// complement number; a seed that is not finite is refused.
pub fn seed_key(op: &'static str, seed: f64) -> Result<u64> {
    if !seed.is_finite() {
        return Err(Error::invalid(
            op,
            "seed",
            format!("seed is {seed}; it must be a finite number"),
        ));
    }
    Ok(seed as i64 as u64)
}

/// The dtypes the random values are made in: f32 and f64, and the 16-bit floats through f32.
fn float_output(op: &'static str, dtype: DType) -> Result<DType> {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Ok(DType::F32),
        DType::F64 => Ok(DType::F64),
        other => Err(Error::invalid(
            op,
            "dtype",
            format!("dtype is {other}; {op} makes f32, f16, bf16 or f64"),
        )),
    }
}

impl Recorder {
    /// Draws into a tensor of `wide` (f32 or f64) and casts it to `dtype` into `out`.
    #[allow(clippy::too_many_arguments)]
    fn draw_as(
        &mut self,
        op: &'static str,
        stream: &RandomStream,
        draw: &Draw<'_>,
        wide: DType,
        dtype: DType,
        shape: &[usize],
        out: Out,
    ) -> Result<Tensor> {
        if wide == dtype {
            let t = out.tensor(self, dtype, shape)?;
            self.random_into(op, stream.key, &stream.state, draw, &t)?;
            return Ok(t);
        }
        let t = self.alloc(wide, shape)?;
        self.random_into(op, stream.key, &stream.state, draw, &t)?;
        let cast = self.cast_to(&t, dtype, out)?;
        self.release(t);
        Ok(cast)
    }

    /// Records RandomUniform: values uniform in `[low, high)` of `dtype` (f32, f64, f16 or
    /// bf16; the 16-bit floats are f32 values rounded, so they may equal `high`).
    pub fn random_uniform_to(
        &mut self,
        stream: &RandomStream,
        dtype: DType,
        shape: &[usize],
        low: f32,
        high: f32,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "RandomUniform";
        let wide = float_output(OP, dtype)?;
        if !(low.is_finite() && high.is_finite() && low <= high) {
            return Err(Error::invalid(
                OP,
                "high",
                format!("low is {low} and high {high}; they must be finite with low <= high"),
            ));
        }
        let draw = Draw {
            mode: RandomMode::Uniform,
            a: low,
            b: high,
            src: None,
            classes: 0,
            samples: 0,
        };
        self.draw_as(OP, stream, &draw, wide, dtype, shape, out)
    }

    /// Records RandomNormal: values of the normal distribution with `mean` and `scale` (its
    /// standard deviation), in `dtype` (f32, f64, f16 or bf16).
    pub fn random_normal_to(
        &mut self,
        stream: &RandomStream,
        dtype: DType,
        shape: &[usize],
        mean: f32,
        scale: f32,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "RandomNormal";
        let wide = float_output(OP, dtype)?;
        if !(mean.is_finite() && scale.is_finite()) {
            return Err(Error::invalid(
                OP,
                "scale",
                format!("mean is {mean} and scale {scale}; they must be finite"),
            ));
        }
        let draw = Draw {
            mode: RandomMode::Normal,
            a: mean,
            b: scale,
            src: None,
            classes: 0,
            samples: 0,
        };
        self.draw_as(OP, stream, &draw, wide, dtype, shape, out)
    }

    /// Records Bernoulli: 1 with the probability in `p` at each element, else 0, as `dtype`
    /// (any type Cast makes from f32). A probability at or below 0 gives 0, at or above 1 gives
    /// 1; NaN gives 0.
    pub fn bernoulli_to(
        &mut self,
        stream: &RandomStream,
        p: &Tensor,
        dtype: DType,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Bernoulli";
        self.check_inputs(OP, &[("input", p)])?;
        let wide = match p.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => DType::F32,
            DType::F64 => DType::F64,
            other => {
                return Err(Error::invalid(
                    OP,
                    "input",
                    format!(
                        "input is {other}; Bernoulli takes f32, f16, bf16 or f64 probabilities"
                    ),
                ))
            }
        };
        let probabilities = if p.dtype() == wide {
            p.clone()
        } else {
            self.cast(p, wide)?
        };
        let draw = Draw {
            mode: RandomMode::Bernoulli,
            a: 0.0,
            b: 0.0,
            src: Some(&probabilities),
            classes: 0,
            samples: 0,
        };
        let shape = p.shape().to_vec();
        let result = self.draw_as(OP, stream, &draw, wide, dtype, &shape, out);
        if p.dtype() != wide {
            self.release(probabilities);
        }
        result
    }

    /// Records Multinomial: `samples` classes drawn for each row of `logits` (`[batch,
    /// classes]`, unnormalized log-probabilities) as `dtype` (i32 or i64). Each sample is the
    /// first class whose running sum of probabilities (a softmax of the row, summed in the
    /// row's float type) exceeds a uniform value times the row's total; a row holding NaN
    /// gives its last class.
    pub fn multinomial_to(
        &mut self,
        stream: &RandomStream,
        logits: &Tensor,
        samples: usize,
        dtype: DType,
        out: Out,
    ) -> Result<Tensor> {
        const OP: &str = "Multinomial";
        self.check_inputs(OP, &[("input", logits)])?;
        if !matches!(dtype, DType::I32 | DType::I64) {
            return Err(Error::invalid(
                OP,
                "dtype",
                format!("dtype is {dtype}; Multinomial makes i32 or i64 classes"),
            ));
        }
        let wide = match logits.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => DType::F32,
            DType::F64 => DType::F64,
            other => {
                return Err(Error::invalid(
                    OP,
                    "input",
                    format!("input is {other}; Multinomial takes f32, f16, bf16 or f64 logits"),
                ))
            }
        };
        let &[batch, classes] = logits.shape() else {
            return Err(Error::invalid(
                OP,
                "input",
                format!(
                    "input has shape {:?}; Multinomial takes [batch_size, class_size]",
                    logits.shape()
                ),
            ));
        };
        // Class indices are made in the float type: f32 holds them exactly up to 2^24.
        let most: u64 = if wide == DType::F32 { 1 << 24 } else { 1 << 53 };
        if classes == 0 || classes as u64 > most {
            return Err(Error::invalid(
                OP,
                "input",
                format!("input has {classes} classes; Multinomial takes 1 to {most}"),
            ));
        }
        let shape = [batch, samples];
        if batch * samples == 0 {
            let t = out.tensor(self, dtype, &shape)?;
            // The stream still moves on: one draw per execution.
            let draw = Draw {
                mode: RandomMode::Uniform,
                a: 0.0,
                b: 1.0,
                src: None,
                classes: 0,
                samples: 0,
            };
            let empty = self.alloc(wide, &[0])?;
            self.random_into(OP, stream.key, &stream.state, &draw, &empty)?;
            self.release(empty);
            return Ok(t);
        }
        let widened = if logits.dtype() == wide {
            logits.clone()
        } else {
            self.cast(logits, wide)?
        };
        let probabilities = self.softmax_to("Softmax", &widened, 1, false, Out::NEW)?;
        if logits.dtype() != wide {
            self.release(widened);
        }
        let sums = self.cumsum_to(&probabilities, 1, false, false, Out::NEW)?;
        self.release(probabilities);
        let draw = Draw {
            mode: RandomMode::Multinomial,
            a: 0.0,
            b: 0.0,
            src: Some(&sums),
            classes,
            samples,
        };
        let result = self.draw_as(OP, stream, &draw, wide, dtype, &shape, out);
        self.release(sums);
        result
    }

    /// Records Dropout in training mode: each element of `x` kept with probability
    /// `1 - ratio` and scaled by `1 / (1 - ratio)`, else 0; returns the output and, with
    /// `mask_out`, the mask (true where kept). `ratio` must be in `[0, 1)`.
    pub fn dropout_training_to(
        &mut self,
        stream: &RandomStream,
        x: &Tensor,
        ratio: f64,
        out: Out,
        mask_out: Option<Out>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        const OP: &str = "Dropout";
        self.check_inputs(OP, &[("data", x)])?;
        if !(0.0..1.0).contains(&ratio) {
            return Err(Error::invalid(
                OP,
                "ratio",
                format!("ratio is {ratio}; in training mode it must be in [0, 1)"),
            ));
        }
        if !matches!(
            x.dtype(),
            DType::F32 | DType::F64 | DType::F16 | DType::BF16
        ) {
            return Err(Error::invalid(
                OP,
                "data",
                format!("data is {}; Dropout takes floats", x.dtype()),
            ));
        }
        let units = self.random_uniform_to(stream, DType::F32, x.shape(), 0.0, 1.0, Out::NEW)?;
        let keep = self.upload(&HostTensor::from_vec(vec![], &[(1.0 - ratio) as f32])?)?;
        let mask = self.map_to("Less", &[&units, &keep], mask_out.unwrap_or(Out::NEW))?;
        self.release(units);
        let scale = crate::reference::cast_host(
            &HostTensor::from_vec(vec![], &[1.0 / (1.0 - ratio)])?,
            x.dtype(),
        )?;
        let scale = self.upload(&scale)?;
        let zero =
            crate::reference::cast_host(&HostTensor::from_vec(vec![], &[0.0f64])?, x.dtype())?;
        let zero = self.upload(&zero)?;
        let scaled = self.map_to("Mul", &[x, &scale], Out::NEW)?;
        let output = self.map_to("Where", &[&mask, &scaled, &zero], out)?;
        self.release(scaled);
        if mask_out.is_some() {
            return Ok((output, Some(mask)));
        }
        self.release(mask);
        Ok((output, None))
    }
}
