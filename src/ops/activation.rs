//! ONNX activation functions that are defined by function bodies of element-wise ops (Elu,
//! Selu, Celu, LeakyRelu, ThresholdedRelu, HardSigmoid, HardSwish, Softplus, Softsign, Swish,
//! Mish, Gelu, Shrink, PRelu, SwiGLU), each recorded as one element-wise program whose
//! attributes are scalar inputs. f16 and bf16 are computed in f32 and rounded once, as the
//! ONNX reference implementation computes these ops. Softplus (and Mish through it) takes the
//! form that neither overflows nor cancels: `max(x, 0) + log1p(exp(-|x|))`.

use crate::kernels::program::{Arg, Program};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

/// The activations, by ONNX name.
pub const ACTIVATIONS: [&str; 15] = [
    "Elu",
    "Selu",
    "Celu",
    "LeakyRelu",
    "ThresholdedRelu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Softsign",
    "Swish",
    "Mish",
    "Gelu",
    "Shrink",
    "PRelu",
    "SwiGLU",
];

/// The float attributes each activation takes, with their defaults.
pub fn float_attributes(op: &str) -> &'static [(&'static str, f64)] {
    match op {
        "Elu" | "Celu" | "ThresholdedRelu" | "Swish" | "SwiGLU" => &[("alpha", 1.0)],
        "Selu" => &[
            ("alpha", 1.673_263_192_176_818_8),
            ("gamma", 1.050_701_022_148_132_3),
        ],
        "LeakyRelu" => &[("alpha", 0.01)],
        "HardSigmoid" => &[("alpha", 0.2), ("beta", 0.5)],
        "Shrink" => &[("bias", 0.0), ("lambd", 0.5)],
        _ => &[],
    }
}

/// A program under construction: operand 0 is X (and operand 1 B or the slope for the
/// two-input ones); constants become scalar operands after them.
struct Builder {
    p: Program,
    dtype: DType,
    constants: Vec<f64>,
}

impl Builder {
    fn constant(&mut self, value: f64) -> Arg {
        if let Some(k) = self
            .constants
            .iter()
            .position(|c| c.to_bits() == value.to_bits())
        {
            return Arg::Operand((self.p.operands().len() - self.constants.len() + k) as u8);
        }
        // A constant of the shader where it can be one (finite floats), else an operand.
        if let Some(literal) = Arg::literal(self.dtype, value) {
            return literal;
        }
        self.constants.push(value);
        self.p.add_operand(self.dtype)
    }

    fn step(&mut self, op: &'static str, args: Vec<Arg>) -> Result<Arg> {
        let out = match op {
            "Less" | "Greater" | "LessOrEqual" => DType::Bool,
            _ => self.dtype,
        };
        self.p
            .push(op, args, out)
            .ok_or_else(|| Error::Graph(format!("internal: no {op} on {}", self.dtype)))
    }

    /// log(1 + exp(x)) without overflow or cancellation: max(x, 0) + log1p(exp(-|x|)).
    fn softplus(&mut self, x: Arg) -> Result<Arg> {
        let positive = self.step("Relu", vec![x])?;
        let magnitude = self.step("Abs", vec![x])?;
        let negated = self.step("Neg", vec![magnitude])?;
        let e = self.step("Exp", vec![negated])?;
        let l = self.step("Log1p", vec![e])?;
        self.step("Add", vec![positive, l])
    }
}

impl Recorder {
    /// Records activation `op` (one of [`ACTIVATIONS`]) of `inputs` (X; X and slope for PRelu,
    /// broadcast to X; A and B of one shape for SwiGLU) with float attributes `attrs` (absent
    /// ones take their defaults, see [`float_attributes`]) and, for Gelu, `approximate`
    /// (`none` or `tanh`). f32, f16, bf16 and f64.
    pub fn activation_to(
        &mut self,
        op: &str,
        inputs: &[&Tensor],
        attrs: &[(&str, f64)],
        approximate: &str,
        out: Out,
    ) -> Result<Tensor> {
        let Some(&op) = ACTIVATIONS.iter().find(|&&a| a == op) else {
            return Err(Error::Graph(format!("unknown activation '{op}'")));
        };
        let names: &[&str] = match op {
            "PRelu" => &["X", "slope"],
            "SwiGLU" => &["A", "B"],
            _ => &["X"],
        };
        if inputs.len() != names.len() {
            return Err(Error::Graph(format!(
                "{op} takes {} inputs, not {}",
                names.len(),
                inputs.len()
            )));
        }
        let named: Vec<(&str, &Tensor)> =
            names.iter().copied().zip(inputs.iter().copied()).collect();
        self.check_inputs(op, &named)?;
        let x = inputs[0];
        let dtype = x.dtype();
        if !takes(op, dtype) {
            let integers = if matches!(op, "Shrink" | "PRelu") {
                ", f64 or an integer type"
            } else {
                " or f64"
            };
            return Err(Error::invalid(
                op,
                names[0],
                format!(
                    "{} is {dtype}; {op} takes f32, f16, bf16{integers}",
                    names[0]
                ),
            ));
        }
        if let Some(second) = inputs.get(1) {
            if second.dtype() != dtype {
                return Err(Error::invalid(
                    op,
                    names[1],
                    format!(
                        "{} is {} but {} is {dtype}",
                        names[1],
                        second.dtype(),
                        names[0]
                    ),
                ));
            }
            // PRelu broadcasts both ways, as onnxruntime and the reference do (the spec has
            // the slope broadcast to X; a slope of more axes widens the output).
            let fits = if op == "SwiGLU" {
                second.shape() == x.shape()
            } else {
                super::broadcast_shape(op, x.shape(), second.shape()).is_ok()
            };
            if !fits {
                return Err(Error::invalid(
                    op,
                    names[1],
                    format!(
                        "{} {:?} does not fit {} {:?} ({})",
                        names[1],
                        second.shape(),
                        names[0],
                        x.shape(),
                        if op == "SwiGLU" {
                            "the shapes must be equal"
                        } else {
                            "they must broadcast together"
                        }
                    ),
                ));
            }
        }
        // Integer activations compute in i64 (emulated without SHADER_INT64), f64 ones on the
        // emulation without SHADER_F64.
        let features = self.context().features();
        let emulate64 = !features.contains(wgpu::Features::SHADER_INT64)
            || crate::kernels::words::emulates_64_bit(features, &[dtype], dtype);
        let (program, constants) =
            match activation_program(op, dtype, inputs.len(), attrs, approximate, emulate64) {
                Ok(built) => built,
                Err(e) => {
                    // An f64 activation beyond the emulation: the feature it needs.
                    super::elementwise::require_feature(self.context(), op, names[0], dtype)?;
                    return Err(e);
                }
            };
        let c = compute_dtype(op, dtype);
        let constants: Vec<Tensor> = constants
            .iter()
            .map(|&v| self.host_values(c, &[], &[v]))
            .collect::<Result<_>>()?;
        let mut leaves: Vec<&Tensor> = inputs.to_vec();
        leaves.extend(constants.iter());
        self.program_to(&program, &leaves, out)
    }
}

/// Whether activation `op` takes values of `dtype`: every one takes the floats; Shrink (all
/// numeric types in ONNX) and PRelu (its integer types in ONNX, all of them here) also take
/// the integers.
pub(crate) fn takes(op: &str, dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
        || matches!(op, "Shrink" | "PRelu") && dtype.is_integer()
}

/// The type activation `op` computes in on `dtype`: f16 and bf16 in f32, rounded once, as the
/// reference computes an op; integer Shrink in f32, as onnxruntime computes it; integer PRelu
/// in its own type (a wrapping product).
fn compute_dtype(op: &str, dtype: DType) -> DType {
    match dtype {
        DType::F64 => DType::F64,
        d if op == "PRelu" && d.is_integer() => d,
        _ => DType::F32,
    }
}

/// The program of activation `op` (one of [`ACTIVATIONS`]) on `inputs` operands of `dtype`
/// (f32, f16, bf16 or f64; checked by the caller), with float attributes `attrs` and Gelu's
/// `approximate`: its constants are literals of the program, but for any that is not finite,
/// which are returned to be bound as scalar operands after the inputs.
pub(crate) fn activation_program(
    op: &str,
    dtype: DType,
    inputs: usize,
    attrs: &[(&str, f64)],
    approximate: &str,
    emulate64: bool,
) -> Result<(Program, Vec<f64>)> {
    let Some(&op) = ACTIVATIONS.iter().find(|&&a| a == op) else {
        return Err(Error::Graph(format!("unknown activation '{op}'")));
    };
    let attr = |name: &str| -> f64 {
        attrs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .or_else(|| {
                float_attributes(op)
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|&(_, v)| v)
            })
            .unwrap_or(0.0)
    };
    let c = compute_dtype(op, dtype);
    let mut b = Builder {
        p: Program::new(
            vec![dtype; inputs],
            emulate64 && (dtype.is_integer() || dtype == DType::F64),
        ),
        dtype: c,
        constants: Vec::new(),
    };
    let x_arg = super::widened(&mut b.p, Arg::Operand(0), dtype, c)?;
    let second = if inputs > 1 {
        super::widened(&mut b.p, Arg::Operand(1), dtype, c)?
    } else {
        x_arg
    };
    match op {
        "Elu" | "LeakyRelu" | "PRelu" => {
            let zero = b.constant(0.0);
            let negative = b.step("Less", vec![x_arg, zero])?;
            let below = match op {
                "Elu" => {
                    let (alpha, one) = (b.constant(attr("alpha")), b.constant(1.0));
                    let e = b.step("Exp", vec![x_arg])?;
                    let em1 = b.step("Sub", vec![e, one])?;
                    b.step("Mul", vec![alpha, em1])?
                }
                "LeakyRelu" => {
                    let alpha = b.constant(attr("alpha"));
                    b.step("Mul", vec![alpha, x_arg])?
                }
                _ => b.step("Mul", vec![second, x_arg])?,
            };
            b.step("Where", vec![negative, below, x_arg])?;
        }
        "Selu" => {
            let zero = b.constant(0.0);
            let (alpha, gamma) = (b.constant(attr("alpha")), b.constant(attr("gamma")));
            let positive = b.step("Greater", vec![x_arg, zero])?;
            let above = b.step("Mul", vec![gamma, x_arg])?;
            let e = b.step("Exp", vec![x_arg])?;
            let ae = b.step("Mul", vec![alpha, e])?;
            let d = b.step("Sub", vec![ae, alpha])?;
            let below = b.step("Mul", vec![gamma, d])?;
            b.step("Where", vec![positive, above, below])?;
        }
        "Celu" => {
            let zero = b.constant(0.0);
            let (alpha, one) = (b.constant(attr("alpha")), b.constant(1.0));
            let scaled = b.step("Div", vec![x_arg, alpha])?;
            let e = b.step("Exp", vec![scaled])?;
            let em1 = b.step("Sub", vec![e, one])?;
            let m = b.step("Mul", vec![alpha, em1])?;
            let low = b.step("Min", vec![zero, m])?;
            let high = b.step("Max", vec![zero, x_arg])?;
            b.step("Add", vec![high, low])?;
        }
        "ThresholdedRelu" => {
            let (alpha, zero) = (b.constant(attr("alpha")), b.constant(0.0));
            let above = b.step("Greater", vec![x_arg, alpha])?;
            b.step("Where", vec![above, x_arg, zero])?;
        }
        "HardSigmoid" | "HardSwish" => {
            let (alpha, beta) = if op == "HardSigmoid" {
                (attr("alpha"), attr("beta"))
            } else {
                (1.0 / 6.0, 0.5)
            };
            let (alpha, beta) = (b.constant(alpha), b.constant(beta));
            let (zero, one) = (b.constant(0.0), b.constant(1.0));
            let ax = b.step("Mul", vec![alpha, x_arg])?;
            let s = b.step("Add", vec![ax, beta])?;
            let capped = b.step("Min", vec![one, s])?;
            let h = b.step("Max", vec![zero, capped])?;
            if op == "HardSwish" {
                b.step("Mul", vec![x_arg, h])?;
            }
        }
        "Softplus" => {
            b.softplus(x_arg)?;
        }
        "Softsign" => {
            let one = b.constant(1.0);
            let a = b.step("Abs", vec![x_arg])?;
            let d = b.step("Add", vec![one, a])?;
            b.step("Div", vec![x_arg, d])?;
        }
        "Swish" | "SwiGLU" => {
            let alpha = b.constant(attr("alpha"));
            let ax = b.step("Mul", vec![alpha, x_arg])?;
            let s = b.step("Sigmoid", vec![ax])?;
            let swish = b.step("Mul", vec![x_arg, s])?;
            if op == "SwiGLU" {
                b.step("Mul", vec![swish, second])?;
            }
        }
        "Mish" => {
            let sp = b.softplus(x_arg)?;
            let t = b.step("Tanh", vec![sp])?;
            b.step("Mul", vec![x_arg, t])?;
        }
        "Gelu" => {
            let (half, one) = (b.constant(0.5), b.constant(1.0));
            let inner = match approximate {
                "none" => {
                    let r = b.constant(std::f64::consts::FRAC_1_SQRT_2);
                    let s = b.step("Mul", vec![x_arg, r])?;
                    b.step("Erf", vec![s])?
                }
                "tanh" => {
                    let k = b.constant((2.0 / std::f64::consts::PI).sqrt());
                    let c = b.constant(0.044715);
                    let x2 = b.step("Mul", vec![x_arg, x_arg])?;
                    let x3 = b.step("Mul", vec![x2, x_arg])?;
                    let cx3 = b.step("Mul", vec![c, x3])?;
                    let s = b.step("Add", vec![x_arg, cx3])?;
                    let ks = b.step("Mul", vec![k, s])?;
                    b.step("Tanh", vec![ks])?
                }
                other => {
                    return Err(Error::invalid(
                        op,
                        "approximate",
                        format!(
                            "approximate is '{}'; it is 'none' or 'tanh'",
                            other.escape_debug()
                        ),
                    ))
                }
            };
            let one_plus = b.step("Add", vec![one, inner])?;
            let hx = b.step("Mul", vec![half, x_arg])?;
            b.step("Mul", vec![hx, one_plus])?;
        }
        "Shrink" => {
            let (bias, lambd) = (attr("bias"), attr("lambd"));
            let (bias, lambd, neg_lambd, zero) = (
                b.constant(bias),
                b.constant(lambd),
                b.constant(-lambd),
                b.constant(0.0),
            );
            let below = b.step("Less", vec![x_arg, neg_lambd])?;
            let above = b.step("Greater", vec![x_arg, lambd])?;
            let up = b.step("Add", vec![x_arg, bias])?;
            let down = b.step("Sub", vec![x_arg, bias])?;
            let outer = b.step("Where", vec![above, down, zero])?;
            b.step("Where", vec![below, up, outer])?;
        }
        _ => unreachable!("listed in ACTIVATIONS"),
    }
    if c != dtype {
        let mut last = Arg::Step((b.p.steps().len() - 1) as u8);
        if dtype.is_integer() {
            // Integer Shrink: the f32 result truncated toward zero, then wrapped to the
            // type, as onnxruntime's conversion gives it (x = 1, bias = 3 is 254 in u8).
            let wide = if dtype.size() <= 2 {
                DType::I32
            } else {
                DType::I64
            };
            last =
                b.p.push("Cast", vec![last], wide)
                    .ok_or_else(|| Error::Graph(format!("internal: no Cast to {wide}")))?;
        }
        b.p.push("Cast", vec![last], dtype)
            .ok_or_else(|| Error::Graph(format!("internal: no Cast to {dtype}")))?;
    }
    Ok((b.p, b.constants))
}
