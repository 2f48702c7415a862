//! InstanceNormalization, GroupNormalization and LRN on the CPU, in f64, from their
//! definitions: each group's mean and (population) variance over its channels and an image's
//! spatial axes; LRN's sum of squares over the neighbouring channels.

use crate::graph::{Attr, Node};
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

fn err(e: crate::Error) -> RefError {
    RefError(e.to_string())
}

fn number(node: &Node, name: &str, default: f64) -> f64 {
    match node.attrs.get(name) {
        Some(Attr::Float(v)) => *v,
        Some(Attr::Int(v)) => *v as f64,
        _ => default,
    }
}

fn values(t: &HostTensor) -> R<Vec<f64>> {
    cast(t, DType::F64)?.to_vec::<f64>().map_err(err)
}

/// Runs `node` when it is one of these ops (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    let op = node.op.as_str();
    if !matches!(op, "InstanceNormalization" | "GroupNormalization" | "LRN") {
        return Ok(None);
    }
    let input = |i: usize| -> R<&HostTensor> {
        args.get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| RefError(format!("{op}: input {i} missing")))
    };
    let x = input(0)?;
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) || x.shape.len() < 2 {
        return Err(format!("{op}: X must be a float tensor [N, C, ...]").into());
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let spatial: usize = x.shape[2..].iter().product();
    let xv = values(x)?;
    let mut y = vec![0.0; xv.len()];
    if op == "LRN" {
        let size = match node.attrs.get("size") {
            Some(Attr::Int(s)) if *s >= 1 => *s as usize,
            _ => return Err("LRN: size must be at least 1".into()),
        };
        let (alpha, beta, bias) = (
            number(node, "alpha", 1e-4),
            number(node, "beta", 0.75),
            number(node, "bias", 1.0),
        );
        let (before, after) = ((size - 1) / 2, size / 2);
        for nn in 0..n {
            for cc in 0..c {
                for s in 0..spatial {
                    let lo = cc.saturating_sub(before);
                    let hi = (cc + after).min(c - 1);
                    let sum: f64 = (lo..=hi)
                        .map(|k| xv[(nn * c + k) * spatial + s].powi(2))
                        .sum();
                    let at = (nn * c + cc) * spatial + s;
                    y[at] = xv[at] / (bias + alpha / size as f64 * sum).powf(beta);
                }
            }
        }
    } else {
        let groups = if op == "GroupNormalization" {
            match node.attrs.get("num_groups") {
                Some(Attr::Int(g)) if *g >= 1 && c % (*g as usize) == 0 => *g as usize,
                _ => return Err("GroupNormalization: num_groups must divide the channels".into()),
            }
        } else {
            c
        };
        let (scale, bias) = (values(input(1)?)?, values(input(2)?)?);
        let per_group = scale.len() == groups && groups != c;
        if !(scale.len() == c || per_group) || bias.len() != scale.len() {
            return Err(format!("{op}: scale and B need one value per channel").into());
        }
        let eps = number(node, "epsilon", 1e-5);
        let per = c / groups;
        let len = per * spatial;
        for nn in 0..n {
            for g in 0..groups {
                let start = (nn * c + g * per) * spatial;
                let group = &xv[start..start + len];
                let mean = group.iter().sum::<f64>() / len as f64;
                let var = group.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / len as f64;
                for (k, v) in group.iter().enumerate() {
                    let ch = if per_group {
                        g
                    } else {
                        g * per + k / spatial.max(1)
                    };
                    y[start + k] = (v - mean) / (var + eps).sqrt() * scale[ch] + bias[ch];
                }
            }
        }
    }
    Ok(Some(cast(
        &HostTensor::from_vec(x.shape.clone(), &y).map_err(err)?,
        x.dtype,
    )?))
}
