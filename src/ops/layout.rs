//! ONNX layout ops: Identity, Reshape (views, no copy), Transpose and Concat (strided gathers).

use crate::graph::registry::OpDef;
use crate::host::c_strides;
use crate::kernels::gather::{GatherDim, GatherPlan};
use crate::{Error, Recorder, Result, Tensor};

/// ONNX Reshape's output shape: 0 copies the input dim (unless `allowzero`), -1 is inferred.
pub fn reshape_shape(input: &[usize], shape: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    const OP: &str = "Reshape";
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            -1 => {
                return Err(Error::invalid(
                    OP,
                    "shape",
                    format!("shape[{i}] is a second -1; at most one dimension is inferred"),
                ))
            }
            0 if !allowzero => match input.get(i) {
                Some(&d) => out.push(d),
                None => {
                    return Err(Error::invalid(
                        OP,
                        "shape",
                        format!("shape[{i}] is 0 (copy) but data has rank {}", input.len()),
                    ))
                }
            },
            d if d >= 0 => out.push(d as usize),
            d => {
                return Err(Error::invalid(
                    OP,
                    "shape",
                    format!("shape[{i}] is {d}; dimensions must be -1 or more"),
                ))
            }
        }
    }
    let n: usize = input.iter().product();
    let known: usize = out.iter().product();
    if let Some(i) = infer {
        if known == 0 || !n.is_multiple_of(known) {
            return Err(Error::invalid(
                OP,
                "shape",
                format!("shape {shape:?} cannot hold the {n} elements of {input:?}"),
            ));
        }
        out[i] = n / known;
    } else if known != n {
        return Err(Error::invalid(
            OP,
            "shape",
            format!("shape {shape:?} holds {known} elements but data {input:?} has {n}"),
        ));
    }
    Ok(out)
}

/// ONNX Transpose's gather: output axis `k` walks input axis `perm[k]`.
pub fn transpose_plan(input: &[usize], perm: Option<&[i64]>) -> Result<(Vec<usize>, GatherPlan)> {
    const OP: &str = "Transpose";
    let r = input.len();
    let perm: Vec<usize> = match perm {
        None => (0..r).rev().collect(),
        Some(p) => {
            let mut seen = vec![false; r];
            if p.len() != r {
                return Err(Error::invalid(
                    OP,
                    "perm",
                    format!("perm has {} values but data has rank {r}", p.len()),
                ));
            }
            p.iter()
                .enumerate()
                .map(|(i, &a)| {
                    let ok = (0..r as i64).contains(&a)
                        && !std::mem::replace(&mut seen[a as usize], true);
                    if ok {
                        Ok(a as usize)
                    } else {
                        Err(Error::invalid(
                            OP,
                            "perm",
                            format!("perm {p:?} is not a permutation of 0..{r} (perm[{i}] = {a})"),
                        ))
                    }
                })
                .collect::<Result<_>>()?
        }
    };
    let strides = c_strides(input);
    let shape: Vec<usize> = perm.iter().map(|&a| input[a]).collect();
    let dims: Vec<GatherDim> = perm
        .iter()
        .map(|&a| GatherDim {
            len: input[a] as u64,
            step: strides[a] as i64,
        })
        .collect();
    Ok((shape, GatherPlan::from_dims(0, &dims)))
}

impl Recorder {
    /// Records ONNX Transpose (`perm` `None`: reverse the axes).
    pub fn transpose(&mut self, data: &Tensor, perm: Option<&[i64]>) -> Result<Tensor> {
        super::check_rank("Transpose", data.shape())?;
        let (shape, plan) = transpose_plan(data.shape(), perm)?;
        self.gather("Transpose", data, &plan, &shape)
    }

    /// Records ONNX Concat of `inputs` along `axis` (4- and 8-byte dtypes).
    pub fn concat(&mut self, inputs: &[Tensor], axis: i64) -> Result<Tensor> {
        let shape = concat_shape(inputs, axis)?;
        let out = self.alloc(inputs[0].dtype(), &shape)?;
        self.concat_into(inputs, axis, &out)?;
        Ok(out)
    }

    fn concat_into(&mut self, inputs: &[Tensor], axis: i64, out: &Tensor) -> Result<()> {
        let axis = if axis < 0 {
            axis + out.rank() as i64
        } else {
            axis
        } as usize;
        let out_strides = c_strides(out.shape());
        let mut offset = 0usize;
        for t in inputs {
            let in_strides = c_strides(t.shape());
            let dims: Vec<GatherDim> = t
                .shape()
                .iter()
                .zip(&in_strides)
                .map(|(&d, &s)| GatherDim {
                    len: d as u64,
                    step: s as i64,
                })
                .collect();
            // No merging: each gather axis must line up with an output axis.
            let plan = GatherPlan {
                count: t.numel() as u64,
                base: 0,
                dims,
            };
            if plan.count > 0 {
                self.gather_strided_into(
                    "Concat",
                    t,
                    &plan,
                    out,
                    offset as u64 * out_strides[axis],
                    &out_strides,
                )?;
            }
            offset += t.shape()[axis];
        }
        Ok(())
    }
}

fn concat_shape(inputs: &[Tensor], axis: i64) -> Result<Vec<usize>> {
    const OP: &str = "Concat";
    let first = inputs
        .first()
        .ok_or_else(|| Error::invalid(OP, "inputs", "Concat needs at least one input"))?;
    let r = first.rank() as i64;
    if !(-r..r).contains(&axis) {
        return Err(Error::invalid(
            OP,
            "axis",
            format!(
                "axis is {axis}, outside [{}, {}] for inputs of rank {r}",
                -r,
                r - 1
            ),
        ));
    }
    let a = if axis < 0 { axis + r } else { axis } as usize;
    let mut shape = first.shape().to_vec();
    for (i, t) in inputs.iter().enumerate().skip(1) {
        if t.dtype() != first.dtype() {
            return Err(Error::invalid(
                OP,
                "inputs",
                format!(
                    "input {i} is {} but input 0 is {}",
                    t.dtype(),
                    first.dtype()
                ),
            ));
        }
        let same = t.rank() == first.rank()
            && t.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(k, (x, y))| k == a || x == y);
        if !same {
            return Err(Error::invalid(
                OP,
                "inputs",
                format!("input {i} has shape {:?} but input 0 has {:?}; they may differ only on axis {a}", t.shape(), first.shape()),
            ));
        }
        shape[a] += t.shape()[a];
    }
    super::check_rank(OP, &shape)?;
    Ok(shape)
}

pub(crate) static IDENTITY_OP: OpDef = OpDef {
    name: "Identity",
    inputs: 1..=1,
    outputs: 1..=1,
    attrs: &[],
    run: |rec, args| Ok(vec![args.output_view(rec, 0, args.tensor(0, "input")?)?]),
};

pub(crate) static RESHAPE_OP: OpDef = OpDef {
    name: "Reshape",
    inputs: 2..=2,
    outputs: 1..=1,
    attrs: &["allowzero"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        let shape = args.required_indices(1, "shape")?;
        let out = reshape_shape(
            data.shape(),
            &shape,
            args.int("allowzero")?.unwrap_or(0) != 0,
        )?;
        Ok(vec![args.output_view(rec, 0, data.reshaped(&out)?)?])
    },
};

pub(crate) static TRANSPOSE_OP: OpDef = OpDef {
    name: "Transpose",
    inputs: 1..=1,
    outputs: 1..=1,
    attrs: &["perm"],
    run: |rec, args| {
        let data = args.tensor(0, "data")?;
        super::check_rank("Transpose", data.shape())?;
        let perm = args.ints("perm")?;
        let (shape, plan) = transpose_plan(data.shape(), perm.as_deref())?;
        let out = args.output(rec, 0, data.dtype(), &shape)?;
        rec.gather_into("Transpose", &data, &plan, &out)?;
        Ok(vec![out])
    },
};

pub(crate) static CONCAT_OP: OpDef = OpDef {
    name: "Concat",
    inputs: 1..=usize::MAX,
    outputs: 1..=1,
    attrs: &["axis"],
    run: |rec, args| {
        let inputs: Vec<Tensor> = (0..args.len())
            .map(|i| args.tensor(i, "inputs"))
            .collect::<Result<_>>()?;
        let axis = args
            .int("axis")?
            .ok_or_else(|| Error::invalid("Concat", "axis", "the attribute 'axis' is required"))?;
        let shape = concat_shape(&inputs, axis)?;
        let out = args.output(rec, 0, inputs[0].dtype(), &shape)?;
        rec.concat_into(&inputs, axis, &out)?;
        Ok(vec![out])
    },
};
