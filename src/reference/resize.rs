//! Resize on the CPU: the plan's taps applied one axis at a time, in f64 (nearest mode copies
//! element bytes, exact for every dtype).

use crate::graph::{Attr, Node};
use crate::ops::resize::{resize_plan, ResizeAttrs};
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

fn err(e: crate::Error) -> RefError {
    RefError(e.to_string())
}

fn string<'a>(node: &'a Node, name: &str, default: &'a str) -> &'a str {
    match node.attrs.get(name) {
        Some(Attr::String(s)) => s,
        _ => default,
    }
}

fn number(node: &Node, name: &str, default: f64) -> f64 {
    match node.attrs.get(name) {
        Some(Attr::Float(v)) => *v,
        Some(Attr::Int(v)) => *v as f64,
        _ => default,
    }
}

/// Runs `node` when it is a Resize (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    if node.op != "Resize" {
        return Ok(None);
    }
    let x = args
        .first()
        .and_then(Option::as_ref)
        .ok_or("Resize: input X missing")?;
    let floats = |i: usize| -> R<Option<Vec<f64>>> {
        match args.get(i).and_then(Option::as_ref) {
            Some(t) if t.numel() > 0 => {
                Ok(Some(cast(t, DType::F64)?.to_vec::<f64>().map_err(err)?))
            }
            _ => Ok(None),
        }
    };
    let (roi, scales) = (floats(1)?, floats(2)?);
    let sizes: Option<Vec<i64>> = floats(3)?.map(|v| v.iter().map(|&s| s as i64).collect());
    let axes = match node.attrs.get("axes") {
        Some(Attr::Ints(v)) => Some(v.clone()),
        _ => None,
    };
    let attrs = ResizeAttrs {
        mode: string(node, "mode", "nearest"),
        coordinate_transformation_mode: string(
            node,
            "coordinate_transformation_mode",
            "half_pixel",
        ),
        nearest_mode: string(node, "nearest_mode", "round_prefer_floor"),
        cubic_coeff_a: number(node, "cubic_coeff_a", -0.75),
        exclude_outside: number(node, "exclude_outside", 0.0) != 0.0,
        extrapolation_value: number(node, "extrapolation_value", 0.0),
        antialias: number(node, "antialias", 0.0) != 0.0,
        keep_aspect_ratio_policy: string(node, "keep_aspect_ratio_policy", "stretch"),
        axes: axes.as_deref(),
        upscale_only: number(node, "upscale_only", 0.0) != 0.0,
    };
    let plan = resize_plan(
        &x.shape,
        roi.as_deref(),
        scales.as_deref(),
        sizes.as_deref(),
        &attrs,
    )
    .map_err(err)?;
    // Each axis's result (the output and the steps before it) and its taps stay small
    // enough for the host; an empty output needs no taps.
    let too_large = || RefError("Resize: too large for the interpreter".into());
    let total = crate::host::checked_numel(&plan.shape).ok_or_else(too_large)?;
    if total > 1 << 26 {
        return Err(too_large());
    }
    if total == 0 {
        return Ok(Some(HostTensor {
            dtype: x.dtype,
            shape: plan.shape,
            data: Vec::new(),
        }));
    }
    let nearest = attrs.mode == "nearest";
    let float = matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    if !nearest && !float {
        return Err("Resize: linear and cubic take float types".into());
    }
    let size = x.dtype.size();
    let mut shape = x.shape.clone();
    let mut bytes = x.data.clone();
    let mut wide: Vec<f64> = if nearest {
        Vec::new()
    } else {
        cast(x, DType::F64)?.to_vec::<f64>().map_err(err)?
    };
    for axis in &plan.axes {
        let step = crate::host::checked_numel(&shape)
            .and_then(|n| n.checked_div(shape[axis.axis]))
            .and_then(|n| n.checked_mul(axis.output));
        let table = (axis.output as u64).saturating_mul(axis.taps_per_output(&attrs));
        if step.is_none_or(|n| n > 1 << 26) || table > 1 << 26 {
            return Err(too_large());
        }
        let taps = axis.taps(&attrs);
        let a = taps.axis;
        let outer: usize = shape[..a].iter().product();
        let inner: usize = shape[a + 1..].iter().product();
        let len = shape[a];
        let o = taps.output;
        if nearest {
            let mut next = Vec::with_capacity(outer * o * inner * size);
            for p in 0..outer {
                for k in 0..o {
                    let i = taps.index[k] as usize;
                    let at = (p * len + i) * inner * size;
                    next.extend_from_slice(&bytes[at..at + inner * size]);
                }
            }
            bytes = next;
        } else {
            let mut next = vec![0.0; outer * o * inner];
            for p in 0..outer {
                for k in 0..o {
                    for q in 0..inner {
                        let mut acc = 0.0;
                        for t in 0..taps.taps {
                            let i = taps.index[k * taps.taps + t] as usize;
                            acc += taps.coeff[k * taps.taps + t] * wide[(p * len + i) * inner + q];
                        }
                        next[(p * o + k) * inner + q] = acc;
                    }
                }
            }
            wide = next;
        }
        if let Some(mask) = &taps.extrapolated {
            let value = attrs.extrapolation_value;
            if nearest {
                let v = cast(
                    &HostTensor::from_vec(vec![], &[value]).map_err(err)?,
                    x.dtype,
                )?;
                for p in 0..outer {
                    for (k, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
                        for q in 0..inner {
                            let at = ((p * o + k) * inner + q) * size;
                            bytes[at..at + size].copy_from_slice(&v.data);
                        }
                    }
                }
            } else {
                for p in 0..outer {
                    for (k, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
                        for q in 0..inner {
                            wide[(p * o + k) * inner + q] = value;
                        }
                    }
                }
            }
        }
        shape[a] = o;
    }
    if nearest {
        return Ok(Some(HostTensor {
            dtype: x.dtype,
            shape,
            data: bytes,
        }));
    }
    Ok(Some(cast(
        &HostTensor::from_vec(shape, &wide).map_err(err)?,
        x.dtype,
    )?))
}
