//! ONNX MatMul (numpy `matmul`): 1-D operands gain and lose a unit axis, batch dims broadcast.

use super::broadcast_shape;
use crate::kernels::matmul::{binds_whole, packed16, Prologue};
use crate::kernels::operands::elementwise_type;
use crate::kernels::program::{intern, Program, Values};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "MatMul";

/// The most times the kernel may read each element of an operand that a prologue computes
/// (A's elements are read once per column of the product, B's once per row): each read
/// evaluates the program again. LinearAttention's decayed state times the key reads it once.
pub const MAX_PROLOGUE_READS: usize = 4;

/// Shapes of a MatMul: the operands as `[..., m, k]` and `[..., k, n]`, the kernel's full
/// output `[batch..., m, n]`, and the op's output (unit axes of 1-D operands removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatMulPlan {
    /// A as `[..., m, k]`.
    pub lhs: Vec<usize>,
    /// B as `[..., k, n]`.
    pub rhs: Vec<usize>,
    /// The kernel's output `[batch..., m, n]`.
    pub full_output: Vec<usize>,
    /// The op's output.
    pub output: Vec<usize>,
}

/// Checks MatMul's operands (one dtype; numpy's rules for 1-D operands and broadcast batch
/// axes) and plans the product.
pub fn plan(a: (DType, &[usize]), b: (DType, &[usize])) -> Result<MatMulPlan> {
    if a.0 != b.0 {
        return Err(Error::invalid(
            OP,
            "B",
            format!("A is {} but B is {}; they must match", a.0, b.0),
        ));
    }
    if elementwise_type(a.0).is_none() && !matches!(a.0, DType::F16 | DType::BF16) {
        return Err(Error::invalid(
            OP,
            "A",
            format!(
                "A is {}; MatMul computes f32, f16, bf16, f64, i32, i64, u32, u64",
                a.0
            ),
        ));
    }
    for (name, s) in [("A", a.1), ("B", b.1)] {
        if s.is_empty() {
            return Err(Error::invalid(
                OP,
                name,
                format!("{name} has rank 0; MatMul needs rank 1 or more"),
            ));
        }
    }
    let lhs: Vec<usize> = if a.1.len() == 1 {
        vec![1, a.1[0]]
    } else {
        a.1.to_vec()
    };
    let rhs: Vec<usize> = if b.1.len() == 1 {
        vec![b.1[0], 1]
    } else {
        b.1.to_vec()
    };
    let (k1, k2) = (lhs[lhs.len() - 1], rhs[rhs.len() - 2]);
    if k1 != k2 {
        return Err(Error::invalid(
            OP,
            "B",
            format!("A {:?} has {k1} columns but B {:?} has {k2} rows", a.1, b.1),
        ));
    }
    let batch = broadcast_shape(OP, &lhs[..lhs.len() - 2], &rhs[..rhs.len() - 2])?;
    let (m, n) = (lhs[lhs.len() - 2], rhs[rhs.len() - 1]);
    let mut full_output = batch.clone();
    full_output.extend([m, n]);
    super::check_rank(OP, &full_output)?;
    let mut output = batch;
    if a.1.len() > 1 {
        output.push(m);
    }
    if b.1.len() > 1 {
        output.push(n);
    }
    Ok(MatMulPlan {
        lhs,
        rhs,
        full_output,
        output,
    })
}

impl Recorder {
    /// Records `a @ b`.
    pub fn matmul(&mut self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.matmul_to(a, b, Out::NEW)
    }

    /// Records `a @ b` into `out`: the op's one recording path.
    pub fn matmul_to(&mut self, a: &Tensor, b: &Tensor, out: Out) -> Result<Tensor> {
        self.check_inputs(OP, &[("A", a), ("B", b)])?;
        let p = plan((a.dtype(), a.shape()), (b.dtype(), b.shape()))?;
        let narrow = packed16(a.dtype());
        let out = out.tensor(self, a.dtype(), &p.output)?;
        if narrow && !binds_whole(self.context(), &[a, b, &out]) {
            // Products accumulate in f32 and round once to the 16-bit type, as the kernel's
            // do; operands beyond one binding go through f32 copies.
            let (wa, wb) = (self.cast(a, DType::F32)?, self.cast(b, DType::F32)?);
            let wide = self.matmul(&wa, &wb)?;
            let result = self.cast_to(&wide, a.dtype(), Out::into(OP, &out));
            for t in [wa, wb, wide] {
                self.release(t);
            }
            return result;
        }
        self.matmul_into(
            OP,
            &a.reshaped(&p.lhs)?,
            &b.reshaped(&p.rhs)?,
            &out.reshaped(&p.full_output)?,
        )?;
        Ok(out)
    }

    /// Records `a' @ b'` into `out`, where `a'` is `a` with its last two axes swapped when
    /// `transpose_a` (likewise `b'`): Gemm's `transA`/`transB`, or a graph's Transpose feeding
    /// a MatMul, read in place with no transposed copy where every tensor binds whole.
    pub fn matmul_transposed_to(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        transpose_a: bool,
        transpose_b: bool,
        out: Out,
    ) -> Result<Tensor> {
        self.matmul_general(a, b, [transpose_a, transpose_b], None, None, out)
    }

    /// Records `epilogue(a @ b, leaves...)` into `out`: the product is operand 0 of the
    /// element-wise program, `leaves` its other operands (broadcast numpy-style to the
    /// product's shape, which they must not enlarge). Where the kernel can apply the program
    /// to each sum before storing it, this is one dispatch with no product tensor (a Scan
    /// body's `MatMul -> Add -> Tanh`); otherwise the product is recorded, then the program.
    pub fn matmul_program_to(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        epilogue: &Program,
        leaves: &[&Tensor],
        out: Out,
    ) -> Result<Tensor> {
        self.matmul_general(a, b, [false; 2], Some((epilogue, leaves)), None, out)
    }

    /// [`Recorder::matmul_program_to`] with operands read transposed (their last two axes
    /// swapped) where `transposed` says so: a Scan body's `Transpose -> MatMul -> Add`.
    pub fn matmul_fused_to(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        transposed: [bool; 2],
        epilogue: &Program,
        leaves: &[&Tensor],
        out: Out,
    ) -> Result<Tensor> {
        self.matmul_general(a, b, transposed, Some((epilogue, leaves)), None, out)
    }

    /// [`Recorder::matmul_fused_to`] (with the epilogue optional) on operands that may be
    /// element-wise programs not yet recorded ([`Values::Program`]: the program's result
    /// over its inputs broadcast to `shape`, the operand as stored, before any transpose).
    /// One is computed where the kernel reads each element, never stored and with no dispatch
    /// of its own, where its inputs and the epilogue's fit the kernel's 5 spare bindings,
    /// every tensor binds whole, and each of its elements is read at
    /// most [`MAX_PROLOGUE_READS`] times; other programs are recorded first. LinearAttention's
    /// decayed state times the key is one dispatch this way.
    pub fn matmul_values_to(
        &mut self,
        values: [Values<'_>; 2],
        transposed: [bool; 2],
        epilogue: Option<(&Program, &[&Tensor])>,
        out: Out,
    ) -> Result<Tensor> {
        let ctx = self.context().clone();
        let read_shape = |v: &Values<'_>, yes: bool| {
            let mut s = v.shape().to_vec();
            let r = s.len();
            if yes && r >= 2 {
                s.swap(r - 2, r - 1);
            }
            s
        };
        let (sa, sb) = (
            read_shape(&values[0], transposed[0]),
            read_shape(&values[1], transposed[1]),
        );
        let p = plan((values[0].dtype(), &sa), (values[1].dtype(), &sb))?;
        let r = p.full_output.len();
        // Reads of each element: A's once per column, B's once per row.
        let reads = [p.full_output[r - 1], p.full_output[r - 2]];
        let tensors: Vec<&Tensor> = values
            .iter()
            .filter_map(|v| match v {
                Values::Tensor(t) => Some(*t),
                Values::Program { .. } => None,
            })
            .chain(
                epilogue
                    .iter()
                    .flat_map(|(_, leaves)| leaves.iter().copied()),
            )
            .collect();
        let epilogue_leaves = epilogue.map_or(0, |(_, l)| l.len());
        let mut prologue = None;
        let mut operands = Vec::with_capacity(2);
        let mut recorded = Vec::new();
        for (j, v) in values.iter().enumerate() {
            match *v {
                Values::Tensor(t) => operands.push(t.clone()),
                Values::Program {
                    program,
                    leaves,
                    shape,
                } => {
                    let candidate = Prologue {
                        operand: j,
                        program: intern(program.clone()),
                        leaves,
                    };
                    let computed = prologue.is_none()
                        && shape.len() >= 2
                        && reads[j] <= MAX_PROLOGUE_READS
                        && candidate.fits(&ctx, program.out(), shape, epilogue_leaves)
                        && binds_whole(&ctx, &tensors);
                    if computed {
                        prologue = Some(candidate);
                        operands.push(candidate.stand_in(shape));
                    } else {
                        let t = self.program_to(program, leaves, Out::NEW)?;
                        recorded.push(t.clone());
                        operands.push(t);
                    }
                }
            }
        }
        let result = self.matmul_general(
            &operands[0],
            &operands[1],
            transposed,
            epilogue,
            prologue,
            out,
        );
        // The operands' handles go first, so that the recorded values' buffers are the only
        // handles left and return to the pool.
        drop(operands);
        for t in recorded {
            self.release(t);
        }
        result
    }

    /// MatMul with operands read transposed or not and an epilogue or none: the one path of
    /// [`Recorder::matmul_transposed_to`] and [`Recorder::matmul_program_to`].
    /// With a `prologue`, its operand is the prologue's stand-in (see
    /// [`Recorder::matmul_values_to`]).
    pub(crate) fn matmul_general(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        transposed: [bool; 2],
        epilogue: Option<(&Program, &[&Tensor])>,
        prologue: Option<Prologue<'_>>,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(OP, &[("A", a), ("B", b)])?;
        let swapped = |t: &Tensor, name: &str, yes: bool| -> Result<Vec<usize>> {
            let mut s = t.shape().to_vec();
            if yes {
                let r = s.len();
                if r < 2 {
                    return Err(Error::invalid(
                        OP,
                        name,
                        format!("{name} has rank {r}; a transposed operand needs rank 2 or more"),
                    ));
                }
                s.swap(r - 2, r - 1);
            }
            Ok(s)
        };
        let (sa, sb) = (
            swapped(a, "A", transposed[0])?,
            swapped(b, "B", transposed[1])?,
        );
        let p = plan((a.dtype(), &sa), (b.dtype(), &sb))?;
        let Some((program, leaves)) = epilogue else {
            if transposed == [false; 2] && prologue.is_none() {
                return self.matmul_to(a, b, out);
            }
            return self.matmul_in_place_or_copied(a, b, transposed, &p, None, prologue, out);
        };
        if program.operands().first() != Some(&a.dtype()) {
            return Err(Error::invalid(
                OP,
                "epilogue",
                format!(
                    "the epilogue's operand 0 must be the product's dtype {}",
                    a.dtype()
                ),
            ));
        }
        let mut shape = p.output.clone();
        for t in leaves {
            shape = broadcast_shape(OP, &shape, t.shape())?;
        }
        let direct = shape == p.output
            && p.output == p.full_output
            && leaves.len() + 1 == program.operands().len()
            && leaves
                .iter()
                .zip(&program.operands()[1..])
                .all(|(t, &d)| t.dtype() == d)
            && self.context().features().contains(program.features());
        if !direct || program.steps().is_empty() {
            // The product, then the program (which checks the leaves).
            let product = self.matmul_general(a, b, transposed, None, prologue, Out::NEW)?;
            if program.steps().is_empty() && leaves.is_empty() {
                return self.identity_to(&product, out);
            }
            let mut inputs = vec![&product];
            inputs.extend_from_slice(leaves);
            let result = self.program_to(program, &inputs, out);
            self.release(product);
            return result;
        }
        for (k, t) in leaves.iter().enumerate() {
            let name = format!("epilogue input {}", k + 1);
            self.check_inputs(OP, &[(name.as_str(), t)])?;
        }
        self.matmul_in_place_or_copied(a, b, transposed, &p, Some((program, leaves)), prologue, out)
    }

    /// The kernel on `a` and `b` (planned as `p`), operands transposed in place where every
    /// tensor binds whole, else transposed into copies first (and f16 and bf16 through f32). A
    /// `prologue`'s operand is recorded first where the tensors do not bind whole.
    #[allow(clippy::too_many_arguments)]
    fn matmul_in_place_or_copied(
        &mut self,
        a: &Tensor,
        b: &Tensor,
        transposed: [bool; 2],
        p: &MatMulPlan,
        epilogue: Option<(&Program, &[&Tensor])>,
        prologue: Option<Prologue<'_>>,
        out: Out,
    ) -> Result<Tensor> {
        let dtype = epilogue.map_or(a.dtype(), |(program, _)| program.out());
        let narrow = packed16(a.dtype());
        let out = out.tensor(self, dtype, &p.output)?;
        let mut tensors = vec![a, b, &out];
        if let Some((_, leaves)) = epilogue {
            tensors.extend_from_slice(leaves);
        }
        let in_place = binds_whole(self.context(), &tensors);
        if let Some(pro) = prologue.filter(|_| !in_place) {
            // Only a stand-in: the operand's values are recorded for the paths below.
            let stand_in = [a, b][pro.operand];
            let values = self
                .program_to(pro.program, pro.leaves, Out::NEW)?
                .reshaped(stand_in.shape())?;
            let (a, b) = if pro.operand == 0 {
                (&values, b)
            } else {
                (a, &values)
            };
            let result = self.matmul_in_place_or_copied(
                a,
                b,
                transposed,
                p,
                epilogue,
                None,
                Out::into(OP, &out),
            );
            self.release(values);
            return result;
        }
        if !in_place {
            // Copies of the transposed operands; the plain kernel (or f32) then.
            let swap = |t: &Tensor| -> Vec<i64> {
                let r = t.rank() as i64;
                let mut perm: Vec<i64> = (0..r).collect();
                perm.swap(r as usize - 2, r as usize - 1);
                perm
            };
            let mut temps = Vec::new();
            let ta = if transposed[0] {
                temps.push(self.transpose(a, Some(&swap(a)))?);
                temps.last().cloned().expect("just pushed")
            } else {
                a.clone()
            };
            let tb = if transposed[1] {
                temps.push(self.transpose(b, Some(&swap(b)))?);
                temps.last().cloned().expect("just pushed")
            } else {
                b.clone()
            };
            let result = match epilogue {
                None => self.matmul_to(&ta, &tb, Out::into("MatMul output", &out)),
                Some((program, leaves)) if !narrow => {
                    let t = out.reshaped(&p.full_output)?;
                    self.matmul_epilogue_into(
                        OP,
                        &ta.reshaped(&p.lhs)?,
                        &tb.reshaped(&p.rhs)?,
                        &t,
                        Some((intern(program.clone()), leaves)),
                        [false; 2],
                        None,
                    )
                    .map(|_| out.clone())
                }
                Some((program, leaves)) => {
                    let product = self.matmul(&ta, &tb)?;
                    let mut inputs = vec![&product];
                    inputs.extend_from_slice(leaves);
                    let r = self.program_to(program, &inputs, Out::into("MatMul output", &out));
                    self.release(product);
                    r
                }
            };
            for t in temps {
                self.release(t);
            }
            return result;
        }
        // Rank 2 or more where transposed; a 1-D operand (never transposed) gains its axis.
        let stored = |t: &Tensor, yes: bool, planned: &[usize]| -> Result<Tensor> {
            if yes {
                Ok(t.clone())
            } else {
                t.reshaped(planned)
            }
        };
        self.matmul_epilogue_into(
            OP,
            &stored(a, transposed[0], &p.lhs)?,
            &stored(b, transposed[1], &p.rhs)?,
            &out.reshaped(&p.full_output)?,
            epilogue.map(|(program, leaves)| (intern(program.clone()), leaves)),
            transposed,
            prologue,
        )?;
        Ok(out)
    }
}
