//! ONNX MatMul (numpy `matmul`): 1-D operands gain and lose a unit axis, batch dims broadcast.

use super::broadcast_shape;
use crate::kernels::operands::elementwise_type;
use crate::kernels::program::{intern, Program};
use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "MatMul";

/// Shapes of a MatMul: the operands as `[..., m, k]` and `[..., k, n]`, the kernel's full
/// output `[batch..., m, n]`, and the op's output (unit axes of 1-D operands removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatMulPlan {
    pub lhs: Vec<usize>,
    pub rhs: Vec<usize>,
    pub full_output: Vec<usize>,
    pub output: Vec<usize>,
}

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
        if matches!(a.dtype(), DType::F16 | DType::BF16) {
            // Products accumulate in f32 and round once to the 16-bit type.
            let (wa, wb) = (self.cast(a, DType::F32)?, self.cast(b, DType::F32)?);
            let wide = self.matmul(&wa, &wb)?;
            let result = self.cast_to(&wide, a.dtype(), out);
            for t in [wa, wb, wide] {
                self.release(t);
            }
            return result;
        }
        super::elementwise::require_feature(self.context(), OP, "A", a.dtype())?;
        let out = out.tensor(self, a.dtype(), &p.output)?;
        self.matmul_into(
            OP,
            &a.reshaped(&p.lhs)?,
            &b.reshaped(&p.rhs)?,
            &out.reshaped(&p.full_output)?,
        )?;
        Ok(out)
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
        self.check_inputs(OP, &[("A", a), ("B", b)])?;
        let p = plan((a.dtype(), a.shape()), (b.dtype(), b.shape()))?;
        if epilogue.operands().first() != Some(&a.dtype()) {
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
            && !matches!(a.dtype(), DType::F16 | DType::BF16)
            && leaves.len() + 1 == epilogue.operands().len()
            && leaves
                .iter()
                .zip(&epilogue.operands()[1..])
                .all(|(t, &d)| t.dtype() == d)
            && self.context().features().contains(epilogue.features());
        if !direct || epilogue.steps().is_empty() {
            // The product, then the program (which checks the leaves).
            let product = self.matmul(a, b)?;
            if epilogue.steps().is_empty() && leaves.is_empty() {
                return self.identity_to(&product, out);
            }
            let mut inputs = vec![&product];
            inputs.extend_from_slice(leaves);
            let result = self.program_to(epilogue, &inputs, out);
            self.release(product);
            return result;
        }
        for (k, t) in leaves.iter().enumerate() {
            let name = format!("epilogue input {}", k + 1);
            self.check_inputs(OP, &[(name.as_str(), t)])?;
        }
        super::elementwise::require_feature(self.context(), OP, "A", a.dtype())?;
        let out = out.tensor(self, epilogue.out(), &p.output)?;
        self.matmul_epilogue_into(
            OP,
            &a.reshaped(&p.lhs)?,
            &b.reshaped(&p.rhs)?,
            &out.reshaped(&p.full_output)?,
            Some((intern(epilogue.clone()), leaves)),
        )?;
        Ok(out)
    }
}
