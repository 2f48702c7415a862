//! The demo's operations on one RGBA image, shared by the native program and the browser page:
//! each op runs on the GPU, is timed, and is checked against the crate's CPU reference.

use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::{
    reference, BatchToSpace, Context, DType, HostTensor, Recorder, Session, Slice, SpaceToBatch,
    Tensor,
};

use crate::expr;

/// 8-bit RGBA pixels, row by row.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub rgba: Vec<u8>,
}

/// What the visitor (or the command line) can change.
#[derive(Clone, Debug)]
pub struct Settings {
    /// A numpy expression for StridedSlice, e.g. `[16:-16, ::-1]`.
    pub strided_slice: String,
    /// Slice-8's inputs as comma-separated integers (`axes` may be empty).
    pub slice_start: String,
    pub slice_stop: String,
    pub slice_step: String,
    pub slice_axes: String,
    /// Block size along height and width for SpaceToBatch and back.
    pub block: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            strided_slice: "[24:-24, ::-1]".into(),
            slice_start: "0, 0".into(),
            slice_stop: "2147483647, 2147483647".into(),
            slice_step: "3, 3".into(),
            slice_axes: "0, 1".into(),
            block: 2,
        }
    }
}

/// One op's result.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Short name, also the file name of the native demo's picture.
    pub name: &'static str,
    pub op: &'static str,
    pub params: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Recording, GPU work and reading the result back, in milliseconds.
    pub millis: f64,
    /// `Ok(what was compared)` or `Err(why not)`.
    pub check: Result<String, String>,
    /// The result drawn as an image, when it has the shape of one.
    pub picture: Option<Image>,
}

impl Outcome {
    fn failed(name: &'static str, op: &'static str, params: String, why: String) -> Outcome {
        Outcome {
            name,
            op,
            params,
            shape: vec![],
            dtype: DType::U8,
            millis: 0.0,
            check: Err(why),
            picture: None,
        }
    }
}

/// Runs every op on `image`. `clock` gives milliseconds (`performance.now()` in a browser).
pub async fn run(
    ctx: &Context,
    image: &Image,
    settings: &Settings,
    clock: &dyn Fn() -> f64,
) -> Vec<Outcome> {
    let host = HostTensor::from_bytes(
        DType::U8,
        vec![image.height, image.width, 4],
        image.rgba.clone(),
    )
    .expect("width * height * 4 bytes");
    let input = match Tensor::from_host(ctx, &host) {
        Ok(t) => t,
        Err(e) => {
            return vec![Outcome::failed(
                "upload",
                "upload",
                String::new(),
                e.to_string(),
            )]
        }
    };
    let mut out = vec![
        strided_slice(ctx, &host, &input, settings, clock).await,
        slice(ctx, &host, &input, settings, clock).await,
    ];
    out.extend(blocks(ctx, &host, &input, settings.block, clock).await);
    for dtype in [DType::I32, DType::F16, DType::I64, DType::F64] {
        out.push(scan(ctx, image, clock, dtype).await);
    }
    out
}

fn host_and_time((_, host, ms): (Tensor, HostTensor, f64)) -> (HostTensor, f64) {
    (host, ms)
}

/// Records `f`, submits, reads the result back; returns it and the time taken.
async fn timed(
    ctx: &Context,
    clock: &dyn Fn() -> f64,
    f: impl FnOnce(&mut Recorder) -> wgpu_ops::Result<Tensor>,
) -> wgpu_ops::Result<(Tensor, HostTensor, f64)> {
    let start = clock();
    let mut rec = ctx.recorder();
    let t = f(&mut rec)?;
    rec.finish().await?;
    let host = t.to_host().await?;
    Ok((t, host, clock() - start))
}

fn compare(got: &HostTensor, want: &HostTensor) -> Result<String, String> {
    if got.shape != want.shape {
        return Err(format!(
            "shape {:?}, the CPU reference has {:?}",
            got.shape, want.shape
        ));
    }
    match got.data.iter().zip(&want.data).position(|(a, b)| a != b) {
        Some(i) => Err(format!(
            "byte {i} differs from the CPU reference ({} vs {})",
            got.data[i], want.data[i]
        )),
        None => Ok(format!(
            "bit-identical to the CPU reference ({} bytes)",
            got.data.len()
        )),
    }
}

fn outcome(
    name: &'static str,
    op: &'static str,
    params: String,
    run: wgpu_ops::Result<(HostTensor, f64)>,
    want: Result<HostTensor, String>,
) -> Outcome {
    match run {
        Err(e) => Outcome::failed(name, op, params, e.to_string()),
        Ok((got, millis)) => Outcome {
            name,
            op,
            params,
            check: want
                .map_err(|e| e.to_string())
                .and_then(|w| compare(&got, &w)),
            picture: picture(&got),
            shape: got.shape,
            dtype: got.dtype,
            millis,
        },
    }
}

async fn strided_slice(
    ctx: &Context,
    host: &HostTensor,
    input: &Tensor,
    s: &Settings,
    clock: &dyn Fn() -> f64,
) -> Outcome {
    let (name, op_name) = ("strided_slice", "StridedSlice");
    let params = format!("x{}", s.strided_slice.trim());
    let op = match expr::strided_slice(&s.strided_slice) {
        Ok(op) => op,
        Err(e) => return Outcome::failed(name, op_name, params, e),
    };
    let run = timed(ctx, clock, |rec| rec.strided_slice(input, &op))
        .await
        .map(host_and_time);
    outcome(
        name,
        op_name,
        params,
        run,
        reference::strided_slice(host, &op).map_err(|e| e.to_string()),
    )
}

async fn slice(
    ctx: &Context,
    host: &HostTensor,
    input: &Tensor,
    s: &Settings,
    clock: &dyn Fn() -> f64,
) -> Outcome {
    let (name, op_name) = ("slice", "Slice");
    let params = format!(
        "start=[{}] stop=[{}] step=[{}] axes=[{}]",
        s.slice_start, s.slice_stop, s.slice_step, s.slice_axes
    );
    let lists = (|| {
        Ok::<_, String>((
            expr::int_list(&s.slice_start, "start")?,
            expr::int_list(&s.slice_stop, "stop")?,
            expr::int_list(&s.slice_step, "step")?,
            expr::int_list(&s.slice_axes, "axes")?,
        ))
    })();
    let (start, stop, step, axes) = match lists {
        Ok(l) => l,
        Err(e) => return Outcome::failed(name, op_name, params, e),
    };
    let mut op = Slice::new(start, stop, step);
    if !axes.is_empty() {
        op = op.axes(axes);
    }
    let run = timed(ctx, clock, |rec| rec.slice(input, &op))
        .await
        .map(host_and_time);
    outcome(
        name,
        op_name,
        params,
        run,
        reference::slice(host, &op).map_err(|e| e.to_string()),
    )
}

/// SpaceToBatch of the image as a batch of one `[1, H, W, 4]` with `block x block` blocks
/// (padding the bottom and right edges to a multiple), then BatchToSpace back with the same
/// amounts as crops: the round trip must give the image again.
async fn blocks(
    ctx: &Context,
    host: &HostTensor,
    input: &Tensor,
    block: usize,
    clock: &dyn Fn() -> f64,
) -> Vec<Outcome> {
    let (h, w) = (host.shape[0], host.shape[1]);
    let b = block as i64;
    // A block of 0 is SpaceToBatch's error to report; it must not divide by zero here.
    let pad = |n: usize| {
        let b = b.max(1);
        (b - (n as i64) % b) % b
    };
    let (pad_h, pad_w) = (pad(h), pad(w));
    let s2b = SpaceToBatch::new([1, b, b, 1], [0, 0, 0, 0], [0, pad_h, pad_w, 0]);
    let b2s = BatchToSpace::new([1, b, b, 1], [0, 0, 0, 0], [0, pad_h, pad_w, 0]);
    let s2b_params = format!("block_shape=[1, {b}, {b}, 1] pads_end=[0, {pad_h}, {pad_w}, 0]");
    let b2s_params = format!("block_shape=[1, {b}, {b}, 1] crops_end=[0, {pad_h}, {pad_w}, 0]");
    let failed = |e: wgpu_ops::Error| {
        vec![Outcome::failed(
            "space_to_batch",
            "SpaceToBatch",
            s2b_params.clone(),
            e.to_string(),
        )]
    };
    let batch1 = match input.reshaped(&[1, h, w, 4]) {
        Ok(t) => t,
        Err(e) => return failed(e),
    };
    let mut host1 = host.clone();
    host1.shape = vec![1, h, w, 4];

    let (batches_gpu, batches, s2b_ms) =
        match timed(ctx, clock, |rec| rec.space_to_batch(&batch1, &s2b)).await {
            Ok(r) => r,
            Err(e) => return failed(e),
        };
    let b2s_run = timed(ctx, clock, |rec| rec.batch_to_space(&batches_gpu, &b2s)).await;
    let want_batches = reference::space_to_batch(&host1, &s2b).map_err(|e| e.to_string());
    let s2b_check = want_batches.clone().and_then(|w| compare(&batches, &w));
    // The reference of the way back starts from the reference batches, and must also be the
    // original image (the round trip is exact).
    let b2s_want = want_batches
        .and_then(|wb| reference::batch_to_space(&wb, &b2s).map_err(|e| e.to_string()))
        .and_then(|w| {
            if w.data == host.data {
                Ok(w)
            } else {
                Err("the reference round trip does not give the image back".into())
            }
        });
    vec![
        Outcome {
            name: "space_to_batch",
            op: "SpaceToBatch",
            params: s2b_params,
            picture: mosaic(&batches, block),
            shape: batches.shape,
            dtype: batches.dtype,
            millis: s2b_ms,
            check: s2b_check,
        },
        {
            let mut back = outcome(
                "batch_to_space",
                "BatchToSpace",
                b2s_params,
                b2s_run.map(host_and_time),
                b2s_want,
            );
            back.check = back
                .check
                .map(|m| format!("{m}, which is the original image: the round trip is exact"));
            back
        },
    ]
}

/// A Scan over the image rows whose state is the running sum of the rows (in `dtype`); its scan
/// output, row `i` = sum of rows `0..=i`, is drawn as the running mean. In i64 and f64 each
/// row's colours first go through a 3 x 3 colour matrix (the identity), so the browser runs a
/// MatMul as well as element-wise ops on the 32-bit emulation of those types.
pub fn running_sum_graph(width: usize, dtype: DType) -> Graph {
    let mut body = Graph::new()
        .input("sum", dtype, &[Some(width), Some(3)])
        .input("row", dtype, &[Some(width), Some(3)]);
    let mut added = "row";
    if matches!(dtype, DType::I64 | DType::F64) {
        let identity: Vec<i64> = (0..9).map(|k| i64::from(k % 4 == 0)).collect();
        let identity = HostTensor::from_vec(vec![3, 3], &identity).expect("a 3 x 3 matrix");
        body = body
            .constant(
                "mix",
                reference::cast_host(&identity, dtype).expect("i64 casts to f64"),
            )
            .node(
                Node::new("MatMul", "mix_colours")
                    .inputs(["row", "mix"])
                    .outputs(["mixed"]),
            );
        added = "mixed";
    }
    let body = body
        .node(
            Node::new("Add", "add")
                .inputs(["sum", added])
                .outputs(["next"]),
        )
        .node(
            Node::new("Identity", "emit")
                .inputs(["next"])
                .outputs(["emitted"]),
        )
        .output("next")
        .output("emitted");
    Graph::new()
        .input("zeros", dtype, &[Some(width), Some(3)])
        .input("rows", dtype, &[None, Some(width), Some(3)])
        .node(
            Node::new("Scan", "running_sum")
                .inputs(["zeros", "rows"])
                .outputs(["total", "sums"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("total")
        .output("sums")
}

/// The running-sum Scan over the image rows in `dtype`: i32 (exact), f16 (colours / 255;
/// every sum rounded to nearest-even by the word kernel, no `shader-f16` needed), i64 (in
/// browsers, which have no 64-bit shader integers, multiplied and added as u32 pairs with
/// carries) or f64 (colours / 255; in browsers, which have no f64 shaders, each product and
/// sum rounded from the bits on u32 pairs as the CPU rounds it). The reference computes
/// alike, so each matches it bit for bit.
async fn scan(ctx: &Context, image: &Image, clock: &dyn Fn() -> f64, dtype: DType) -> Outcome {
    let (name, op_name) = match dtype {
        DType::F16 => ("scan_f16", "Scan f16"),
        DType::I64 => ("scan_i64", "Scan i64"),
        DType::F64 => ("scan_f64", "Scan f64"),
        _ => ("scan", "Scan"),
    };
    let (h, w) = (image.height, image.width);
    let ops = if matches!(dtype, DType::I64 | DType::F64) {
        "MatMul, Add, Identity"
    } else {
        "Add, Identity"
    };
    let params = format!("running sum over {h} rows of [{w}, 3] {dtype} (body: {ops})");
    let rgb = image.rgba.chunks_exact(4).flat_map(|p| p[..3].to_vec());
    let (zeros, rows) = match dtype {
        DType::F16 => (
            HostTensor::from_vec(vec![w, 3], &vec![half::f16::ZERO; w * 3]),
            HostTensor::from_vec(
                vec![h, w, 3],
                &rgb.map(|v| half::f16::from_f32(f32::from(v) / 255.0))
                    .collect::<Vec<_>>(),
            ),
        ),
        DType::I64 => (
            HostTensor::from_vec(vec![w, 3], &vec![0i64; w * 3]),
            HostTensor::from_vec(vec![h, w, 3], &rgb.map(i64::from).collect::<Vec<_>>()),
        ),
        DType::F64 => (
            HostTensor::from_vec(vec![w, 3], &vec![0f64; w * 3]),
            HostTensor::from_vec(
                vec![h, w, 3],
                &rgb.map(|v| f64::from(v) / 255.0).collect::<Vec<_>>(),
            ),
        ),
        _ => (
            HostTensor::from_vec(vec![w, 3], &vec![0i32; w * 3]),
            HostTensor::from_vec(vec![h, w, 3], &rgb.map(i32::from).collect::<Vec<_>>()),
        ),
    };
    let inputs = vec![
        ("zeros".to_string(), zeros.expect("shape")),
        ("rows".to_string(), rows.expect("shape")),
    ];
    let graph = running_sum_graph(w, dtype);
    let start = clock();
    let run = async {
        let session = Session::new(ctx, graph.clone())?;
        session.run(inputs.clone()).await
    }
    .await;
    let millis = clock() - start;
    let got = match run {
        Ok(mut outs) => outs.pop().expect("two outputs").1,
        Err(e) => return Outcome::failed(name, op_name, params, e.to_string()),
    };
    let want = reference::graph::run_graph(&graph, &inputs, &Default::default())
        .map(|mut o| o.pop().expect("two outputs"));
    let picture = match dtype {
        DType::F16 | DType::F64 => running_mean_of_fractions(&got),
        DType::I64 => got.to_vec::<i64>().ok().and_then(|v| {
            let v: Vec<i32> = v.iter().map(|&x| x as i32).collect();
            running_mean(&HostTensor::from_vec(got.shape.clone(), &v).ok()?)
        }),
        _ => running_mean(&got),
    };
    Outcome {
        name,
        op: op_name,
        params,
        check: want
            .map_err(|e| e.to_string())
            .and_then(|w| compare(&got, &w)),
        picture,
        shape: got.shape,
        dtype: got.dtype,
        millis,
    }
}

/// Row `i` of f16 or f64 running sums of colours / 255, divided by `i + 1`, as colours.
fn running_mean_of_fractions(t: &HostTensor) -> Option<Image> {
    let [h, w, 3] = t.shape[..] else {
        return None;
    };
    // f16 widens to f64 exactly.
    let sums = reference::cast_host(t, DType::F64)
        .ok()?
        .to_vec::<f64>()
        .ok()?;
    let rgba = sums
        .chunks_exact(3)
        .enumerate()
        .flat_map(|(p, c)| {
            let n = (p / w + 1) as f64;
            let v = |x: f64| (x / n * 255.0).clamp(0.0, 255.0) as u8;
            [v(c[0]), v(c[1]), v(c[2]), 255]
        })
        .collect();
    Some(Image {
        width: w,
        height: h,
        rgba,
    })
}

/// Draws a `[H, W]`, `[H, W, 1..=4]` u8 tensor as RGBA (gray for one channel, opaque without
/// alpha); other shapes are not pictures.
pub fn picture(t: &HostTensor) -> Option<Image> {
    if t.dtype != DType::U8 {
        return None;
    }
    let shape: Vec<usize> = match t.shape.as_slice() {
        [1, rest @ ..] if rest.len() >= 2 => rest.to_vec(),
        s => s.to_vec(),
    };
    let (h, w, c) = match shape.as_slice() {
        [h, w] => (*h, *w, 1),
        [h, w, c] if (1..=4).contains(c) => (*h, *w, *c),
        _ => return None,
    };
    if h == 0 || w == 0 {
        return None;
    }
    let rgba = t
        .data
        .chunks_exact(c)
        .flat_map(|p| match c {
            1 | 2 => [p[0], p[0], p[0], if c == 2 { p[1] } else { 255 }],
            3 => [p[0], p[1], p[2], 255],
            _ => [p[0], p[1], p[2], p[3]],
        })
        .collect();
    Some(Image {
        width: w,
        height: h,
        rgba,
    })
}

/// The `block * block` images of a SpaceToBatch result `[block², h, w, 4]` in a grid, batch
/// `by * block + bx` at row `by`, column `bx`, with a 2-pixel gap.
fn mosaic(t: &HostTensor, block: usize) -> Option<Image> {
    let [n, h, w, 4] = t.shape[..] else {
        return None;
    };
    if n != block * block || h == 0 || w == 0 {
        return None;
    }
    let gap = 2;
    let (width, height) = (block * w + (block - 1) * gap, block * h + (block - 1) * gap);
    let mut rgba = vec![0u8; width * height * 4];
    for b in 0..n {
        let (x0, y0) = ((b % block) * (w + gap), (b / block) * (h + gap));
        for y in 0..h {
            let src = &t.data[((b * h + y) * w) * 4..((b * h + y + 1) * w) * 4];
            let dst = ((y0 + y) * width + x0) * 4;
            rgba[dst..dst + w * 4].copy_from_slice(src);
        }
    }
    Some(Image {
        width,
        height,
        rgba,
    })
}

/// Row `i` of the running sums divided by `i + 1`: the mean of rows `0..=i`.
fn running_mean(t: &HostTensor) -> Option<Image> {
    let [h, w, 3] = t.shape[..] else {
        return None;
    };
    let sums = t.to_vec::<i32>().ok()?;
    let rgba = sums
        .chunks_exact(3)
        .enumerate()
        .flat_map(|(p, c)| {
            let n = (p / w + 1) as i32;
            [(c[0] / n) as u8, (c[1] / n) as u8, (c[2] / n) as u8, 255]
        })
        .collect();
    Some(Image {
        width: w,
        height: h,
        rgba,
    })
}
