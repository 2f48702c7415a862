//! Det on the CPU: Gaussian elimination with partial pivoting in f64, rounded once to X's
//! dtype (the oracle of the GPU kernel, which eliminates in X's float type or f32).

use super::RefError;
use crate::graph::Node;
use crate::ops::det::det_shape;
use crate::{DType, HostTensor};

type R<T> = std::result::Result<T, RefError>;

/// The determinant of the `n` x `n` matrix `a` (row-major), destroyed.
pub fn determinant(a: &mut [f64], n: usize) -> f64 {
    let mut d = 1.0;
    for k in 0..n {
        let mut p = k;
        for r in k + 1..n {
            if a[r * n + k].abs() > a[p * n + k].abs() {
                p = r;
            }
        }
        if p != k {
            for c in k..n {
                a.swap(k * n + c, p * n + c);
            }
            d = -d;
        }
        let pivot = a[k * n + k];
        d *= pivot;
        if pivot == 0.0 {
            break;
        }
        for r in k + 1..n {
            let f = a[r * n + k] / pivot;
            for c in k + 1..n {
                a[r * n + c] -= f * a[k * n + c];
            }
        }
    }
    d
}

/// Runs `node` when it is a Det (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    if node.op != "Det" {
        return Ok(None);
    }
    let x = args
        .first()
        .and_then(Option::as_ref)
        .ok_or_else(|| RefError("Det: input X missing".into()))?;
    let e = |e: crate::Error| RefError(e.to_string());
    let shape = det_shape(x.dtype, &x.shape).map_err(e)?;
    let n = x.shape[x.shape.len() - 1];
    let values = super::cast_host(x, DType::F64)
        .map_err(e)?
        .to_vec::<f64>()?;
    let count: usize = shape.iter().product();
    let dets: Vec<f64> = if n == 0 {
        vec![1.0; count]
    } else {
        values
            .chunks(n * n)
            .map(|m| determinant(&mut m.to_vec(), n))
            .collect()
    };
    let out = HostTensor::from_vec(shape, &dets)?;
    Ok(Some(super::cast_host(&out, x.dtype).map_err(e)?))
}
