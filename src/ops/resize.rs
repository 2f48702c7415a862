//! ONNX Resize (opsets 10 to 19; Upsample loads as it): one axis at a time, each output
//! element along the axis a weighted sum of a few input elements ("taps") whose positions
//! and weights depend only on the shapes and attributes. The host computes them (plain data,
//! `resize_plan`, shared with the CPU interpreter); the GPU gathers the taps of every output
//! position in one pass, multiplies them by their weights and sums them. Nearest mode is the
//! gather alone, exact for every dtype.

use crate::{DType, Error, HostTensor, Out, Recorder, Result, Tensor};

const OP: &str = "Resize";

/// Resize's attributes (ONNX names; defaults as in Resize-19).
#[derive(Clone, Copy, Debug)]
pub struct ResizeAttrs<'a> {
    /// `nearest`, `linear` or `cubic`.
    pub mode: &'a str,
    /// `half_pixel`, `half_pixel_symmetric`, `pytorch_half_pixel`, `align_corners`,
    /// `asymmetric` or `tf_crop_and_resize`.
    pub coordinate_transformation_mode: &'a str,
    /// `round_prefer_floor`, `round_prefer_ceil`, `floor`, `ceil`, or `simple` (Resize-10 and
    /// Upsample: floor when enlarging, ceil when shrinking).
    pub nearest_mode: &'a str,
    /// The cubic kernel's `a` (-0.75; -0.5 is TensorFlow's).
    pub cubic_coeff_a: f64,
    /// Taps outside the input get weight 0 and the rest are renormalized.
    pub exclude_outside: bool,
    /// The value of output positions outside the input under `tf_crop_and_resize`.
    pub extrapolation_value: f64,
    /// Linear and cubic downsampling widen their kernel by the scale (an antialiasing
    /// filter).
    pub antialias: bool,
    /// `stretch`, `not_larger` or `not_smaller` (with `sizes`).
    pub keep_aspect_ratio_policy: &'a str,
    /// The axes that `scales` or `sizes` give (from the end when negative); `None`: all.
    pub axes: Option<&'a [i64]>,
    /// Scales below 1 are refused, as Upsample's are (the ONNX loader sets it for Upsample).
    pub upscale_only: bool,
}

impl Default for ResizeAttrs<'_> {
    fn default() -> Self {
        ResizeAttrs {
            mode: "nearest",
            coordinate_transformation_mode: "half_pixel",
            nearest_mode: "round_prefer_floor",
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            extrapolation_value: 0.0,
            antialias: false,
            keep_aspect_ratio_policy: "stretch",
            axes: None,
            upscale_only: false,
        }
    }
}

/// One resized axis: output position `o` is `sum_t coeff[o * taps + t] * input[index[o *
/// taps + t]]` along `axis` (or `extrapolation_value` where `extrapolated[o]`).
#[derive(Clone, Debug, PartialEq)]
pub struct AxisTaps {
    /// The axis resized.
    pub axis: usize,
    /// Its length in the output.
    pub output: usize,
    /// Input elements summed per output position.
    pub taps: usize,
    /// Each tap's input position, `[output * taps]`.
    pub index: Vec<i64>,
    /// Each tap's weight, `[output * taps]`.
    pub coeff: Vec<f64>,
    /// Output positions that take the extrapolation value (`tf_crop_and_resize`).
    pub extrapolated: Option<Vec<bool>>,
}

/// Resize's plan: the output shape and the resized axes in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ResizePlan {
    /// The output's shape.
    pub shape: Vec<usize>,
    /// The axes resized, in the order they are computed.
    pub axes: Vec<AxisResize>,
}

/// One axis of a Resize before its taps are computed: they take a few numbers per output
/// position, so they are built only once the output is known to fit (see
/// [`AxisResize::taps`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AxisResize {
    /// The axis resized.
    pub axis: usize,
    /// Its length in the input.
    pub input: usize,
    /// Its length in the output.
    pub output: usize,
    /// The scale (output over input, or as `scales` gives it).
    pub scale: f64,
    /// `tf_crop_and_resize`'s region of the axis, as fractions of the input.
    pub roi: Option<(f64, f64)>,
}

impl AxisResize {
    /// The axis's taps: every output position's input positions and weights.
    pub fn taps(&self, attrs: &ResizeAttrs) -> AxisTaps {
        axis_taps(
            self.axis,
            self.input,
            self.output,
            self.scale,
            self.roi,
            attrs,
        )
    }

    /// Input elements summed per output position (the taps' table has `output` rows of
    /// this many), as [`AxisResize::taps`] computes them.
    pub fn taps_per_output(&self, attrs: &ResizeAttrs) -> u64 {
        let widened = |radius| (2 - 2 * antialias_start(radius, self.scale)) as u64;
        match (attrs.mode, attrs.antialias) {
            ("nearest", _) => 1,
            ("linear", false) => 2,
            ("linear", true) => widened(1.0),
            (_, false) => 4,
            (_, true) => widened(2.0),
        }
    }
}

/// The first tap, relative to the one below the source coordinate, of an antialiasing
/// kernel of `radius` (1 linear, 2 cubic) widened by a downscale's `scale`.
fn antialias_start(radius: f64, scale: f64) -> i64 {
    (-radius / scale.min(1.0)).floor() as i64 + 1
}

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

/// Plans Resize of an input of `shape` to `scales` or `sizes` (one per axis of `axes`, or
/// per axis), as the ONNX reference computes it in f64: each output position's source
/// coordinate by the coordinate transformation, the taps nearest to it (edges repeated) and
/// their weights by the mode.
pub fn resize_plan(
    shape: &[usize],
    roi: Option<&[f64]>,
    scales: Option<&[f64]>,
    sizes: Option<&[i64]>,
    attrs: &ResizeAttrs,
) -> Result<ResizePlan> {
    let r = shape.len();
    let axes = super::distinct_axes(OP, r, attrs.axes)?;
    let n = axes.len();
    let mode = attrs.mode;
    if !matches!(mode, "nearest" | "linear" | "cubic") {
        return Err(invalid(
            "mode",
            format!(
                "mode is '{}'; it is nearest, linear or cubic",
                mode.escape_debug()
            ),
        ));
    }
    let ctm = attrs.coordinate_transformation_mode;
    if !matches!(
        ctm,
        "half_pixel"
            | "half_pixel_symmetric"
            | "pytorch_half_pixel"
            | "align_corners"
            | "asymmetric"
            | "tf_crop_and_resize"
    ) {
        return Err(invalid(
            "coordinate_transformation_mode",
            format!(
                "coordinate_transformation_mode is '{}'; it is half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric or tf_crop_and_resize",
                ctm.escape_debug()
            ),
        ));
    }
    if mode == "nearest"
        && !matches!(
            attrs.nearest_mode,
            "round_prefer_floor" | "round_prefer_ceil" | "floor" | "ceil" | "simple"
        )
    {
        return Err(invalid(
            "nearest_mode",
            format!(
                "nearest_mode is '{}'; it is round_prefer_floor, round_prefer_ceil, floor or ceil",
                attrs.nearest_mode.escape_debug()
            ),
        ));
    }
    let roi = match roi {
        Some(v) if !v.is_empty() && ctm == "tf_crop_and_resize" => {
            if v.len() != 2 * n {
                return Err(invalid(
                    "roi",
                    format!(
                        "roi has {} values; it needs 2 per resized axis ({})",
                        v.len(),
                        2 * n
                    ),
                ));
            }
            Some(v)
        }
        _ if ctm == "tf_crop_and_resize" => {
            return Err(invalid(
                "roi",
                "coordinate_transformation_mode tf_crop_and_resize needs roi".into(),
            ))
        }
        _ => None,
    };
    let scales = scales.filter(|s| !s.is_empty());
    let sizes = sizes.filter(|s| !s.is_empty());
    let mut factor = vec![1.0f64; r];
    let mut out: Vec<usize> = shape.to_vec();
    match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != n {
                return Err(invalid(
                    "scales",
                    format!("scales has {} values for {n} resized axes", s.len()),
                ));
            }
            for (i, &a) in axes.iter().enumerate() {
                if !(s[i] > 0.0 && s[i].is_finite()) {
                    return Err(invalid(
                        "scales",
                        format!("scales {s:?} holds {}; each must be positive", s[i]),
                    ));
                }
                if attrs.upscale_only && s[i] < 1.0 {
                    return Err(invalid(
                        "scales",
                        format!("scales {s:?} holds {}; Upsample's are at least 1", s[i]),
                    ));
                }
                factor[a] = s[i];
                // In f32, as onnxruntime computes it (scales are f32 in models): 0.7 of 10 is
                // 7 there, where the f64 product of the f32 scale is 6.9999999.
                let len = (s[i] as f32 * shape[a] as f32).floor() as f64;
                if len > i64::MAX as f64 {
                    return Err(invalid(
                        "scales",
                        format!("scales {s:?} make axis {a} too long"),
                    ));
                }
                out[a] = len as usize;
            }
            // An axis past 2^31 - 1 is refused unless the output is empty anyway (as
            // onnxruntime gives it: scales of 1e-10 and 1e10 on two axes of 4).
            if !out.contains(&0) {
                if let Some(&a) = axes.iter().find(|&&a| out[a] > i32::MAX as usize) {
                    return Err(invalid(
                        "scales",
                        format!("scales {s:?} make axis {a} too long"),
                    ));
                }
            }
        }
        (None, Some(z)) => {
            if z.len() != n {
                return Err(invalid(
                    "sizes",
                    format!("sizes has {} values for {n} resized axes", z.len()),
                ));
            }
            for (i, &a) in axes.iter().enumerate() {
                if !(0..=i32::MAX as i64).contains(&z[i]) {
                    return Err(invalid("sizes", format!("sizes {z:?} holds {}", z[i])));
                }
                if shape[a] == 0 {
                    return Err(invalid("X", format!("axis {a} of X is empty")));
                }
                out[a] = z[i] as usize;
                factor[a] = z[i] as f64 / shape[a] as f64;
            }
            let pick = match attrs.keep_aspect_ratio_policy {
                "stretch" => None,
                "not_larger" => Some(true),
                "not_smaller" => Some(false),
                other => {
                    return Err(invalid(
                        "keep_aspect_ratio_policy",
                        format!(
                            "keep_aspect_ratio_policy is '{}'; it is stretch, not_larger or not_smaller",
                            other.escape_debug()
                        ),
                    ))
                }
            };
            if let Some(smallest) = pick {
                let chosen = axes
                    .iter()
                    .map(|&a| factor[a])
                    .reduce(|x, y| if smallest { x.min(y) } else { x.max(y) })
                    .unwrap_or(1.0);
                for &a in &axes {
                    factor[a] = chosen;
                    out[a] = (chosen * shape[a] as f64 + 0.5).floor() as usize;
                }
            }
        }
        _ => {
            return Err(invalid(
                "scales",
                "exactly one of scales and sizes must be given (and not empty)".into(),
            ))
        }
    }
    let mut plan = ResizePlan {
        shape: out.clone(),
        axes: Vec::new(),
    };
    for (i, &a) in axes.iter().enumerate() {
        let axis_roi = roi.map(|v| (v[i], v[n + i]));
        let identity = (factor[a] - 1.0).abs() <= 1e-9
            && out[a] == shape[a]
            && axis_roi.is_none_or(|(lo, hi)| lo.abs() <= 1e-9 && (hi - 1.0).abs() <= 1e-9);
        if identity {
            continue;
        }
        if shape[a] == 0 && out[a] > 0 {
            return Err(invalid("X", format!("axis {a} of X is empty")));
        }
        plan.axes.push(AxisResize {
            axis: a,
            input: shape[a],
            output: out[a],
            scale: factor[a],
            roi: axis_roi,
        });
    }
    Ok(plan)
}

/// The taps of one axis (see `resize_plan`).
fn axis_taps(
    axis: usize,
    input: usize,
    output: usize,
    scale: f64,
    roi: Option<(f64, f64)>,
    attrs: &ResizeAttrs,
) -> AxisTaps {
    let width = scale * input as f64;
    let a = attrs.cubic_coeff_a;
    let mut taps = AxisTaps {
        axis,
        output,
        taps: 0,
        index: Vec::new(),
        coeff: Vec::new(),
        extrapolated: None,
    };
    let mut extrapolated = Vec::with_capacity(output);
    for o in 0..output {
        let y = o as f64;
        let (x, outside) = match attrs.coordinate_transformation_mode {
            "align_corners" if width == 1.0 => (0.0, false),
            "align_corners" => (y * (input as f64 - 1.0) / (width - 1.0), false),
            "asymmetric" => (y / scale, false),
            "tf_crop_and_resize" => {
                let (lo, hi) = roi.unwrap_or((0.0, 1.0));
                let x = if width == 1.0 {
                    (hi - lo) * (input as f64 - 1.0) / 2.0
                } else {
                    y * (hi - lo) * (input as f64 - 1.0) / (width - 1.0)
                } + lo * (input as f64 - 1.0);
                (x, x < 0.0 || x > input as f64 - 1.0)
            }
            "pytorch_half_pixel" if width == 1.0 => (-0.5, false),
            "half_pixel_symmetric" => {
                let adjustment = output as f64 / width;
                let center = input as f64 / 2.0;
                (center * (1.0 - adjustment) + (y + 0.5) / scale - 0.5, false)
            }
            _ => ((y + 0.5) / scale - 0.5, false),
        };
        extrapolated.push(outside);
        let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
        let mut coeff: Vec<f64> = match attrs.mode {
            "nearest" => {
                let up = if ratio == 1.0 {
                    true
                } else {
                    match attrs.nearest_mode {
                        "round_prefer_ceil" => ratio >= 0.5,
                        "floor" => false,
                        "ceil" => true,
                        "simple" => scale < 1.0,
                        _ => ratio > 0.5,
                    }
                };
                vec![f64::from(!up), f64::from(up)]
            }
            "linear" if attrs.antialias => {
                let s = scale.min(1.0);
                let start = antialias_start(1.0, scale);
                let footprint = 2 - 2 * start;
                (start..start + footprint)
                    .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                    .collect()
            }
            "linear" => vec![1.0 - ratio, ratio],
            _ if attrs.antialias => {
                let s = scale.min(1.0);
                let start = antialias_start(2.0, scale);
                (start..2 - start)
                    .map(|i| cubic(a, (s * (i as f64 - ratio)).abs()))
                    .collect()
            }
            _ => {
                let (r1, q) = (ratio + 1.0, 1.0 - ratio);
                let q1 = q + 1.0;
                vec![
                    ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a,
                    ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0,
                    ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                    ((a * q1 - 5.0 * a) * q1 + 8.0 * a) * q1 - 4.0 * a,
                ]
            }
        };
        if attrs.antialias && attrs.mode != "nearest" {
            let sum: f64 = coeff.iter().sum();
            coeff.iter_mut().for_each(|c| *c /= sum);
        }
        // The n taps nearest to x (ties to the lower), edges repeated.
        let n = coeff.len();
        let pad = n.div_ceil(2) as f64;
        let xp = x + pad;
        let p = xp.floor();
        let frac = xp - p;
        let half = (n / 2) as i64;
        let offset = if n.is_multiple_of(2) {
            if frac == 0.0 {
                -half
            } else {
                -half + 1
            }
        } else {
            let base = -(((n - 1) / 2) as i64);
            if frac <= 0.5 {
                base
            } else {
                base + 1
            }
        };
        let start = p as i64 + offset - pad as i64;
        let index: Vec<i64> = (0..n as i64).map(|t| start + t).collect();
        if attrs.exclude_outside {
            for (c, &i) in coeff.iter_mut().zip(&index) {
                if i < 0 || i >= input as i64 {
                    *c = 0.0;
                }
            }
            let sum: f64 = coeff.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            coeff.iter_mut().for_each(|c| *c /= sum);
        }
        let clamp = |i: i64| i.clamp(0, input as i64 - 1);
        if attrs.mode == "nearest" {
            // The one tap of weight 1.
            let t = usize::from(coeff[1] == 1.0);
            taps.index.push(clamp(index[t]));
            taps.coeff.push(1.0);
            taps.taps = 1;
        } else {
            taps.taps = n;
            taps.index.extend(index.iter().map(|&i| clamp(i)));
            taps.coeff.extend(coeff);
        }
    }
    if extrapolated.iter().any(|&e| e) {
        taps.extrapolated = Some(extrapolated);
    }
    taps
}

/// Keys' cubic convolution kernel with parameter `a` at distance `x` (0 from 2 on).
fn cubic(a: f64, x: f64) -> f64 {
    let (x2, x3) = (x * x, x * x * x);
    if x <= 1.0 {
        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
    } else if x < 2.0 {
        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}

impl Recorder {
    /// Records ONNX Resize of `x` to `scales` or `sizes` (see [`resize_plan`]). Nearest mode
    /// takes every dtype and is a gather per resized axis; linear and cubic take the float
    /// types and compute in f32 (f64 for f64), rounded once per axis.
    pub fn resize_to(
        &mut self,
        x: &Tensor,
        roi: Option<&[f64]>,
        scales: Option<&[f64]>,
        sizes: Option<&[i64]>,
        attrs: &ResizeAttrs,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(OP, &[("X", x)])?;
        super::check_rank(OP, x.shape())?;
        let plan = resize_plan(x.shape(), roi, scales, sizes, attrs)?;
        let dtype = x.dtype();
        let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
        if attrs.mode != "nearest" && !float {
            return Err(invalid(
                "X",
                format!(
                    "X is {dtype}; {} mode takes f32, f16, bf16 or f64",
                    attrs.mode
                ),
            ));
        }
        if plan.shape.contains(&0) {
            return out.tensor(self, dtype, &plan.shape);
        }
        self.check_resize_memory(&plan, dtype, attrs)?;
        let mut current = x.clone();
        for axis in &plan.axes {
            let taps = axis.taps(attrs);
            let next = self.resize_axis(&current, &taps, attrs.extrapolation_value)?;
            if !current.shares_buffer(x) {
                self.release(current);
            }
            current = next;
        }
        out.view(self, current)
    }

    /// Refuses a Resize whose output, with the largest of its axes' taps' tables (an index
    /// and a weight per tap, built on the host before their upload), would not fit under the
    /// memory limit, before any of them is built: scales of 1e9 asked for tables of 2^31
    /// rows.
    fn check_resize_memory(
        &mut self,
        plan: &ResizePlan,
        dtype: DType,
        attrs: &ResizeAttrs,
    ) -> Result<()> {
        let output = plan
            .shape
            .iter()
            .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d as u64));
        let weight = if attrs.mode == "nearest" { 0 } else { 8 };
        let tables = plan.axes.iter().try_fold(0u64, |most, axis| {
            let entries = (axis.output as u64).checked_mul(axis.taps_per_output(attrs))?;
            Some(
                most.max(
                    entries
                        .checked_mul(8 + weight)?
                        .checked_add(axis.output as u64)?,
                ),
            )
        });
        let needed = output
            .zip(tables)
            .and_then(|(o, t)| o.checked_add(t))
            .unwrap_or(u64::MAX);
        let what = format!(
            "the output {:?} of {dtype} with its taps' tables",
            plan.shape
        );
        self.context()
            .reserve_memory(OP, needed)
            .map(drop)
            .map_err(|e| match e {
                Error::LimitExceeded {
                    limit, needed, max, ..
                } => Error::LimitExceeded {
                    op: OP,
                    what,
                    limit,
                    needed,
                    max,
                },
                other => other,
            })
    }

    /// One axis of a Resize.
    fn resize_axis(&mut self, x: &Tensor, taps: &AxisTaps, extrapolation: f64) -> Result<Tensor> {
        let (a, n, o) = (taps.axis, taps.taps, taps.output);
        let dtype = x.dtype();
        let index_shape: &[usize] = if n == 1 { &[o] } else { &[o, n] };
        let index = self.upload(&HostTensor::from_vec(index_shape.to_vec(), &taps.index)?)?;
        let gathered = self.gather_to(x, &index, a as i64, Out::NEW)?;
        self.release(index);
        let mut y = if n == 1 {
            gathered
        } else {
            // Weights as [o, n, 1, ...] against [..., o, n, ...], in f32 (f64 for f64).
            let wide = if dtype == DType::F64 {
                DType::F64
            } else {
                DType::F32
            };
            let mut w_shape = vec![o, n];
            w_shape.extend(std::iter::repeat_n(1, x.rank() - a - 1));
            let weights = self.host_values(wide, &w_shape, &taps.coeff)?;
            let g = if dtype == wide {
                gathered
            } else {
                let g = self.cast(&gathered, wide)?;
                self.release(gathered);
                g
            };
            let products = self.elementwise("Mul", &g, Some(&weights))?;
            self.release(g);
            self.release(weights);
            let sum = self.reduce_to(
                "ReduceSum",
                &products,
                Some(&[a as i64 + 1]),
                false,
                false,
                Out::NEW,
            )?;
            self.release(products);
            if dtype == wide {
                sum
            } else {
                let y = self.cast(&sum, dtype)?;
                self.release(sum);
                y
            }
        };
        if let Some(mask) = &taps.extrapolated {
            let mut m_shape = vec![o];
            m_shape.extend(std::iter::repeat_n(1, x.rank() - a - 1));
            let mask = self.upload(&HostTensor::from_vec(m_shape, mask)?)?;
            let value = self.host_values(dtype, &[], &[extrapolation])?;
            let kept = self.map_to("Where", &[&mask, &value, &y], Out::NEW)?;
            for t in [mask, value, y] {
                self.release(t);
            }
            y = kept;
        }
        Ok(y)
    }
}
