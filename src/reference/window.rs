//! Conv, ConvTranspose and the pools on the CPU, in f64, from their definitions: each output
//! element a sum (or maximum) over the input elements of its window, and ConvTranspose each
//! input element's product with the kernel added to the output at its position times the
//! stride. Shares only the window geometry (`window_plan`) with the GPU path, which gathers
//! windows into a tensor and multiplies them.

use crate::graph::{Attr, Node};
use crate::ops::window::{
    average_counts, transpose_plan, unflatten, window_plan, window_source, TransposeAttrs,
    WindowAttrs, WindowPlan,
};
use crate::{DType, HostTensor};

use super::numeric::cast;
use super::RefError;

type R<T> = std::result::Result<T, RefError>;

/// Multiply-adds (or window elements) beyond which the interpreter declines a node: sessions
/// fold small constant inputs through it, and a few attributes can ask for any amount of work
/// from them (the GPU path then runs the node, with its own limits).
const WORK_LIMIT: usize = 1 << 28;

fn ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    match node.attrs.get(name) {
        Some(Attr::Ints(v)) => Some(v.clone()),
        Some(Attr::Int(v)) => Some(vec![*v]),
        _ => None,
    }
}

fn int(node: &Node, name: &str, default: i64) -> i64 {
    match node.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

fn err(e: crate::Error) -> RefError {
    RefError(e.to_string())
}

/// A tensor's values as f64 and its shape.
fn values(t: &HostTensor) -> R<(Vec<f64>, Vec<usize>)> {
    let wide = cast(t, DType::F64)?;
    Ok((wide.to_vec::<f64>().map_err(err)?, t.shape.clone()))
}

fn tensor(dtype: DType, shape: Vec<usize>, v: &[f64]) -> R<HostTensor> {
    cast(&HostTensor::from_vec(shape, v).map_err(err)?, dtype)
}

/// C-order flat index of `coords` in `shape`.
fn flat(coords: &[usize], shape: &[usize]) -> usize {
    coords
        .iter()
        .zip(shape)
        .fold(0, |acc, (&c, &n)| acc * n + c)
}

/// Runs window op `node` when it is one (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<Vec<HostTensor>>> {
    let op = node.op.as_str();
    if !matches!(
        op,
        "Conv"
            | "ConvTranspose"
            | "MaxPool"
            | "AveragePool"
            | "LpPool"
            | "GlobalAveragePool"
            | "GlobalMaxPool"
            | "GlobalLpPool"
    ) {
        return Ok(None);
    }
    let input = |i: usize| -> R<&HostTensor> {
        args.get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| RefError(format!("{}: input {i} missing", node.name)))
    };
    let x = input(0)?;
    if x.shape.len() < 3 {
        return Err(format!("{op}: X needs [N, C, spatial...]").into());
    }
    if op == "Conv" || op == "ConvTranspose" {
        let w = input(1)?;
        if w.shape.len() < 2 {
            return Err(format!("{op}: W needs [channels, channels, kernel...]").into());
        }
    }
    let (kernel_shape, strides, dilations, pads) = (
        ints(node, "kernel_shape"),
        ints(node, "strides"),
        ints(node, "dilations"),
        ints(node, "pads"),
    );
    let auto_pad = match node.attrs.get("auto_pad") {
        Some(Attr::String(s)) => s.clone(),
        _ => "NOTSET".to_string(),
    };
    let attrs = WindowAttrs {
        kernel_shape: kernel_shape.as_deref(),
        strides: strides.as_deref(),
        dilations: dilations.as_deref(),
        pads: pads.as_deref(),
        auto_pad: &auto_pad,
        ceil_mode: int(node, "ceil_mode", 0) != 0,
    };
    let ints_too = op == "MaxPool" || op == "GlobalMaxPool";
    let float = matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    let i32_conv = op == "Conv" && x.dtype == DType::I32;
    if !(float || i32_conv || (ints_too && matches!(x.dtype, DType::I8 | DType::U8))) {
        return Err(format!("{op}: X is {}", x.dtype).into());
    }
    if !matches!(int(node, "storage_order", 0), 0 | 1) || int(node, "p", 2) < 1 {
        return Err(format!("{op}: storage_order is 0 or 1, p at least 1").into());
    }
    let (xv, xs) = values(x)?;
    let spatial = xs[2..].to_vec();
    let (n, c) = (xs[0], xs[1]);
    let image: usize = spatial.iter().product();
    let out = match op {
        "Conv" | "ConvTranspose" => {
            let (wv, ws) = values(input(1)?)?;
            let bias = match args.get(2).and_then(Option::as_ref) {
                Some(b) => Some(values(b)?.0),
                None => None,
            };
            let group = usize::try_from(int(node, "group", 1))
                .ok()
                .filter(|&g| g >= 1 && c % g == 0)
                .ok_or_else(|| RefError(format!("{op}: group must divide the channels")))?;
            if ws.len() != xs.len() {
                return Err(format!("{op}: W's rank differs from X's").into());
            }
            if kernel_shape
                .as_ref()
                .is_some_and(|k| !k.iter().map(|&v| v as usize).eq(ws[2..].iter().copied()))
            {
                return Err(format!("{op}: kernel_shape differs from W's").into());
            }
            let m = if op == "Conv" { ws[0] } else { ws[1] * group };
            let channels_agree = if op == "Conv" {
                ws[1] * group == c && m % group == 0
            } else {
                ws[0] == c
            };
            if !channels_agree || bias.as_ref().is_some_and(|b| b.len() != m) {
                return Err(format!("{op}: the channels of X, W and B disagree").into());
            }
            let kernel: usize = ws[2..].iter().product();
            if [n, m, image.max(1), kernel, c / group]
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                .is_none_or(|work| work > WORK_LIMIT)
            {
                return Err(format!("{op}: too much work for the interpreter").into());
            }
            if op == "Conv" {
                let plan = window_plan("Conv", &spatial, &ws[2..], &attrs).map_err(err)?;
                vec![conv(
                    x.dtype,
                    &xv,
                    &xs,
                    &wv,
                    &ws,
                    bias.as_deref(),
                    group,
                    &plan,
                )?]
            } else {
                let (op_pad, op_shape) = (ints(node, "output_padding"), ints(node, "output_shape"));
                let t = TransposeAttrs {
                    window: attrs,
                    output_padding: op_pad.as_deref(),
                    output_shape: op_shape.as_deref(),
                };
                let plan = transpose_plan(&spatial, &ws[2..], &t).map_err(err)?;
                let outputs = plan.output.iter().product::<usize>();
                if n.checked_mul(m)
                    .and_then(|v| v.checked_mul(outputs))
                    .is_none_or(|v| v > WORK_LIMIT)
                {
                    return Err("ConvTranspose: too much work for the interpreter".into());
                }
                let (cg, mg) = (c / group, ws[1]);
                let m = mg * group;
                let outputs: usize = plan.output.iter().product();
                let kernel: usize = ws[2..].iter().product();
                let mut y = vec![0.0; n * m * outputs];
                for nn in 0..n {
                    for cc in 0..c {
                        let g = cc / cg;
                        for i in 0..image {
                            let ic = unflatten(i, &spatial);
                            let v = xv[(nn * c + cc) * image + i];
                            for mi in 0..mg {
                                for t in 0..kernel {
                                    let tc = unflatten(t, &ws[2..]);
                                    let pos: Option<Vec<usize>> = (0..spatial.len())
                                        .map(|j| {
                                            let p = (ic[j] * plan.strides[j]
                                                + tc[j] * plan.dilations[j])
                                                as i64
                                                - plan.pads_begin[j];
                                            usize::try_from(p).ok().filter(|&p| p < plan.output[j])
                                        })
                                        .collect();
                                    if let Some(pos) = pos {
                                        let mo = g * mg + mi;
                                        y[(nn * m + mo) * outputs + flat(&pos, &plan.output)] +=
                                            v * wv[(cc * mg + mi) * kernel + t];
                                    }
                                }
                            }
                        }
                    }
                }
                if let Some(b) = &bias {
                    for (k, v) in y.iter_mut().enumerate() {
                        *v += b[(k / outputs) % m];
                    }
                }
                let mut shape = vec![n, m];
                shape.extend(&plan.output);
                vec![tensor(x.dtype, shape, &y)?]
            }
        }
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => {
            let p = int(node, "p", 2) as f64;
            let y: Vec<f64> = xv
                .chunks(image.max(1))
                .map(|w| match op {
                    "GlobalAveragePool" => w.iter().sum::<f64>() / w.len() as f64,
                    "GlobalMaxPool" => w.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    _ => w.iter().map(|v| v.abs().powf(p)).sum::<f64>().powf(1.0 / p),
                })
                .collect();
            let mut shape = vec![n, c];
            shape.extend(std::iter::repeat_n(1, spatial.len()));
            vec![tensor(x.dtype, shape, &y)?]
        }
        _ => {
            let kernel: Vec<usize> = kernel_shape
                .as_ref()
                .ok_or_else(|| RefError(format!("{op}: kernel_shape needed")))?
                .iter()
                .map(|&k| k.max(0) as usize)
                .collect();
            let plan = window_plan("pool", &spatial, &kernel, &attrs).map_err(err)?;
            let window: usize = plan.kernel.iter().product();
            if [n, c, plan.output.iter().product(), window]
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                .is_none_or(|work| work > WORK_LIMIT)
            {
                return Err(format!("{op}: too much work for the interpreter").into());
            }
            pool(node, x.dtype, &xv, &xs, &plan)?
        }
    };
    Ok(Some(out))
}

/// The input elements of window `o` (flat output index) as (flat spatial index, or `None` in
/// the padding).
fn window(plan: &WindowPlan, spatial: &[usize], o: usize) -> Vec<Option<usize>> {
    let oc = unflatten(o, &plan.output);
    let window: usize = plan.kernel.iter().product();
    (0..window)
        .map(|t| {
            let tc = unflatten(t, &plan.kernel);
            let src: Option<Vec<usize>> = (0..spatial.len())
                .map(|j| window_source(plan, spatial, j, oc[j], tc[j]))
                .collect();
            src.map(|s| flat(&s, spatial))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn conv(
    dtype: DType,
    xv: &[f64],
    xs: &[usize],
    wv: &[f64],
    ws: &[usize],
    bias: Option<&[f64]>,
    group: usize,
    plan: &WindowPlan,
) -> R<HostTensor> {
    let spatial = &xs[2..];
    let (n, c, m) = (xs[0], xs[1], ws[0]);
    if group == 0 || c % group != 0 || ws[1] * group != c || m % group != 0 {
        return Err("Conv: channels and group disagree".into());
    }
    let (cg, mg) = (c / group, m / group);
    let image: usize = spatial.iter().product();
    let outputs: usize = plan.output.iter().product();
    let kernel: usize = plan.kernel.iter().product();
    let windows: Vec<Vec<Option<usize>>> = (0..outputs).map(|o| window(plan, spatial, o)).collect();
    let mut y = Vec::with_capacity(n * m * outputs);
    for nn in 0..n {
        for mm in 0..m {
            let g = mm / mg;
            for win in &windows {
                let taps = (0..cg).flat_map(|ci| {
                    let cc = g * cg + ci;
                    win.iter().enumerate().filter_map(move |(t, src)| {
                        src.map(|s| {
                            (
                                xv[(nn * c + cc) * image + s],
                                wv[(mm * cg + ci) * kernel + t],
                            )
                        })
                    })
                });
                if dtype == DType::I32 {
                    // Exact products, sums wrapping at 32 bits (as i32 arithmetic does).
                    let mut acc = bias.map_or(0i32, |b| b[mm] as i32);
                    for (a, w) in taps {
                        acc = acc.wrapping_add((a as i32).wrapping_mul(w as i32));
                    }
                    y.push(f64::from(acc));
                } else {
                    let mut acc = bias.map_or(0.0, |b| b[mm]);
                    for (a, w) in taps {
                        acc += a * w;
                    }
                    y.push(acc);
                }
            }
        }
    }
    let mut shape = vec![n, m];
    shape.extend(&plan.output);
    tensor(dtype, shape, &y)
}

/// MaxPool (with its indices), AveragePool and LpPool.
fn pool(
    node: &Node,
    dtype: DType,
    xv: &[f64],
    xs: &[usize],
    plan: &WindowPlan,
) -> R<Vec<HostTensor>> {
    let spatial = &xs[2..];
    let image: usize = spatial.iter().product();
    let outputs: usize = plan.output.iter().product();
    let windows: Vec<Vec<Option<usize>>> = (0..outputs).map(|o| window(plan, spatial, o)).collect();
    let op = node.op.as_str();
    let counts = average_counts(plan, spatial, int(node, "count_include_pad", 0) != 0);
    let p = int(node, "p", 2) as f64;
    let column_major = int(node, "storage_order", 0) == 1;
    let (mut y, mut indices) = (Vec::new(), Vec::new());
    for img in 0..xs[0] * xs[1] {
        let at = |s: usize| xv[img * image + s];
        for (o, win) in windows.iter().enumerate() {
            let inside = win.iter().flatten().copied();
            match op {
                "MaxPool" => {
                    // The first largest; NaN wins (as in ReduceMax).
                    let mut best: Option<usize> = None;
                    for s in inside {
                        let larger = best
                            .is_none_or(|b| !at(b).is_nan() && (at(s).is_nan() || at(s) > at(b)));
                        if larger {
                            best = Some(s);
                        }
                    }
                    let b = best.ok_or("MaxPool: a window holds no input element")?;
                    y.push(at(b));
                    let index = if column_major {
                        let cs = unflatten(b, spatial);
                        (0..spatial.len())
                            .rev()
                            .fold(0, |acc, j| acc * spatial[j] + cs[j])
                    } else {
                        b
                    };
                    indices.push((img * image + index) as i64);
                }
                "AveragePool" => y.push(inside.map(at).sum::<f64>() / counts[o] as f64),
                _ => y.push(
                    inside
                        .map(|s| at(s).abs().powf(p))
                        .sum::<f64>()
                        .powf(1.0 / p),
                ),
            }
        }
    }
    let mut shape = xs[..2].to_vec();
    shape.extend(&plan.output);
    let mut out = vec![tensor(dtype, shape.clone(), &y)?];
    if op == "MaxPool" && node.outputs.len() > 1 {
        out.push(HostTensor::from_vec(shape, &indices).map_err(err)?);
    }
    Ok(out)
}
