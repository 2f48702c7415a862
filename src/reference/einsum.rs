//! Einsum on the CPU from its definition: for every assignment of values to the labels, the
//! product of the operands' elements added to the output element the output's labels pick
//! (floats in f64, integers in wrapping i64 arithmetic, then cast back).

use std::collections::BTreeMap;

use crate::graph::{Attr, Node};
use crate::ops::einsum::einsum_plan;
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

fn err(e: crate::Error) -> RefError {
    RefError(e.to_string())
}

/// Runs `node` when it is an Einsum (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    if node.op != "Einsum" {
        return Ok(None);
    }
    let Some(Attr::String(equation)) = node.attrs.get("equation") else {
        return Err("Einsum needs 'equation'".into());
    };
    let inputs: Vec<&HostTensor> = args
        .iter()
        .map(|a| {
            a.as_ref()
                .ok_or_else(|| RefError::from("Einsum: an input is missing"))
        })
        .collect::<R<_>>()?;
    let dtype = inputs.first().ok_or("Einsum needs an input")?.dtype;
    if dtype == DType::Bool || inputs.iter().any(|t| t.dtype != dtype) {
        return Err("Einsum: inputs of one numeric dtype".into());
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let plan = einsum_plan(equation, &shapes).map_err(err)?;
    let labels: Vec<u32> = plan.sizes.keys().copied().collect();
    let lens: Vec<usize> = labels.iter().map(|l| plan.sizes[l]).collect();
    let total = lens
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .filter(|&n| n <= 1 << 26)
        .ok_or("Einsum: too much work for the interpreter")?;
    let position: BTreeMap<u32, usize> = labels.iter().enumerate().map(|(i, &l)| (l, i)).collect();
    // Per operand, per label slot: the element step (0 on a broadcast axis of length 1).
    let steps: Vec<Vec<(usize, usize)>> = plan
        .operands
        .iter()
        .zip(&shapes)
        .map(|(ls, shape)| {
            let mut stride = 1;
            let mut s: Vec<(usize, usize)> = Vec::new();
            for (k, l) in ls.iter().enumerate().rev() {
                let step = if shape[k] == 1 { 0 } else { stride };
                s.push((position[l], step));
                stride *= shape[k];
            }
            s
        })
        .collect();
    let out_shape: Vec<usize> = plan.output.iter().map(|l| plan.sizes[l]).collect();
    let mut out_steps = Vec::new();
    let mut stride = 1;
    for l in plan.output.iter().rev() {
        out_steps.push((position[l], stride));
        stride *= plan.sizes[l];
    }
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    let wide = if float { DType::F64 } else { DType::I64 };
    let values: Vec<HostTensor> = inputs.iter().map(|t| cast(t, wide)).collect::<R<_>>()?;
    let count: usize = out_shape.iter().product();
    let mut coords = vec![0usize; labels.len()];
    let at = |steps: &[(usize, usize)], coords: &[usize]| -> usize {
        steps.iter().map(|&(p, s)| coords[p] * s).sum()
    };
    let result = if float {
        let v: Vec<Vec<f64>> = values
            .iter()
            .map(|t| t.to_vec::<f64>().map_err(err))
            .collect::<R<_>>()?;
        let mut y = vec![0.0f64; count];
        for _ in 0..total {
            let p: f64 = v
                .iter()
                .zip(&steps)
                .map(|(v, s)| v[at(s, &coords)])
                .product();
            y[at(&out_steps, &coords)] += p;
            next(&mut coords, &lens);
        }
        HostTensor::from_vec(out_shape, &y).map_err(err)?
    } else {
        let v: Vec<Vec<i64>> = values
            .iter()
            .map(|t| t.to_vec::<i64>().map_err(err))
            .collect::<R<_>>()?;
        let mut y = vec![0i64; count];
        for _ in 0..total {
            let p = v
                .iter()
                .zip(&steps)
                .fold(1i64, |acc, (v, s)| acc.wrapping_mul(v[at(s, &coords)]));
            let o = at(&out_steps, &coords);
            y[o] = y[o].wrapping_add(p);
            next(&mut coords, &lens);
        }
        HostTensor::from_vec(out_shape, &y).map_err(err)?
    };
    Ok(Some(cast(&result, dtype)?))
}

/// The next assignment of label values (the last label fastest).
fn next(coords: &mut [usize], lens: &[usize]) {
    for k in (0..coords.len()).rev() {
        coords[k] += 1;
        if coords[k] < lens[k] {
            return;
        }
        coords[k] = 0;
    }
}
