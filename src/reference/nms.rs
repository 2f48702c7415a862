//! NonMaxSuppression (ONNX-11) on the host: per batch item and class, boxes above the score
//! threshold taken in order of score (the lower index first among equal scores), each kept
//! unless its IoU with one kept before exceeds the threshold, at most
//! `max_output_boxes_per_class` per class; as the ONNX reference and onnxruntime do. Its
//! output's length is the count kept, so the executor computes it while planning, on values
//! known there or read back.

use crate::{DType, Error, HostTensor, Result};

const OP: &str = "NonMaxSuppression";

/// The arithmetic of one float type (f32 for f32, f16 and bf16 boxes, as onnxruntime's
/// float kernel; f64 for f64).
trait Coord:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const ZERO: Self;
    const TWO: Self;
}
impl Coord for f32 {
    const ZERO: f32 = 0.0;
    const TWO: f32 = 2.0;
}
impl Coord for f64 {
    const ZERO: f64 = 0.0;
    const TWO: f64 = 2.0;
}

fn min_max<T: Coord>(a: T, b: T) -> (T, T) {
    if a >= b {
        (b, a)
    } else {
        (a, b)
    }
}

fn max<T: Coord>(a: T, b: T) -> T {
    if a >= b {
        a
    } else {
        b
    }
}

fn min<T: Coord>(a: T, b: T) -> T {
    if a <= b {
        a
    } else {
        b
    }
}

/// A box's extent along x and y: corners `[y1, x1, y2, x2]` (either way round) or
/// `[x_center, y_center, width, height]`.
fn extent<T: Coord>(b: &[T], center: bool) -> ((T, T), (T, T)) {
    if center {
        let (w, h) = (b[2] / T::TWO, b[3] / T::TWO);
        ((b[0] - w, b[0] + w), (b[1] - h, b[1] + h))
    } else {
        (min_max(b[1], b[3]), min_max(b[0], b[2]))
    }
}

/// Whether the IoU of boxes `a` and `b` exceeds `threshold`.
fn suppresses<T: Coord>(a: &[T], b: &[T], center: bool, threshold: T) -> bool {
    let ((ax0, ax1), (ay0, ay1)) = extent(a, center);
    let ((bx0, bx1), (by0, by1)) = extent(b, center);
    let (ix0, ix1) = (max(ax0, bx0), min(ax1, bx1));
    if ix1 <= ix0 {
        return false;
    }
    let (iy0, iy1) = (max(ay0, by0), min(ay1, by1));
    if iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= T::ZERO {
        return false;
    }
    let area_a = (ax1 - ax0) * (ay1 - ay0);
    let area_b = (bx1 - bx0) * (by1 - by0);
    let union = area_a + area_b - inter;
    if area_a <= T::ZERO || area_b <= T::ZERO || union <= T::ZERO {
        return false;
    }
    inter / union > threshold
}

fn select<T: Coord>(
    boxes: &[T],
    scores: &[T],
    dims: (usize, usize, usize),
    max_per_class: usize,
    iou: T,
    score: Option<T>,
    center: bool,
) -> Vec<i64> {
    let (batches, classes, n) = dims;
    let mut out = Vec::new();
    for b in 0..batches {
        let batch_boxes = &boxes[b * n * 4..(b + 1) * n * 4];
        for c in 0..classes {
            let s = &scores[(b * classes + c) * n..][..n];
            let mut order: Vec<usize> =
                (0..n).filter(|&i| score.is_none_or(|t| s[i] > t)).collect();
            // Highest score first; the lower index first among equal ones.
            order.sort_by(|&i, &j| {
                s[j].partial_cmp(&s[i])
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(i.cmp(&j))
            });
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= max_per_class {
                    break;
                }
                let bi = &batch_boxes[i * 4..][..4];
                if kept
                    .iter()
                    .all(|&k| !suppresses(bi, &batch_boxes[k * 4..][..4], center, iou))
                {
                    kept.push(i);
                    out.extend([b as i64, c as i64, i as i64]);
                }
            }
        }
    }
    out
}

/// One value of an optional scalar input (`None` when left out or empty).
fn scalar(t: Option<&HostTensor>, what: &str) -> Result<Option<f64>> {
    let Some(t) = t.filter(|t| t.numel() > 0) else {
        return Ok(None);
    };
    if t.numel() != 1 {
        return Err(Error::invalid(
            OP,
            what,
            format!("{what} must hold one value, not {:?}", t.shape),
        ));
    }
    let v = crate::reference::cast_host(t, DType::F64)?.to_vec::<f64>()?[0];
    Ok(Some(v))
}

/// NonMaxSuppression of `boxes` `[B, N, 4]` and `scores` `[B, C, N]` (one float type), with
/// `max_output_boxes_per_class` (integer, 0 when left out), `iou_threshold` (0) and
/// `score_threshold` (none); `[selected, 3]` i64 (batch, class, box).
pub fn non_max_suppression(
    boxes: &HostTensor,
    scores: &HostTensor,
    limits: [Option<&HostTensor>; 3],
    center_point_box: i64,
) -> Result<HostTensor> {
    let bad = |input: &str, msg: String| Error::invalid(OP, input, msg);
    let floats = [DType::F32, DType::F64, DType::F16, DType::BF16];
    if !floats.contains(&boxes.dtype) || scores.dtype != boxes.dtype {
        return Err(bad(
            "boxes",
            format!(
                "boxes and scores are {} and {}; NonMaxSuppression takes one float type for both",
                boxes.dtype, scores.dtype
            ),
        ));
    }
    if boxes.shape.len() != 3 || boxes.shape[2] != 4 {
        return Err(bad(
            "boxes",
            format!(
                "boxes has shape {:?}; it must be [batches, boxes, 4]",
                boxes.shape
            ),
        ));
    }
    let (batches, n) = (boxes.shape[0], boxes.shape[1]);
    if scores.shape.len() != 3 || scores.shape[0] != batches || scores.shape[2] != n {
        return Err(bad(
            "scores",
            format!(
                "scores has shape {:?}; it must be [{batches}, classes, {n}]: the batches and boxes of boxes",
                scores.shape
            ),
        ));
    }
    if !matches!(center_point_box, 0 | 1) {
        return Err(bad(
            "center_point_box",
            format!("center_point_box is {center_point_box}, not 0 or 1"),
        ));
    }
    let [max_out, iou, score] = limits;
    if let Some(m) = max_out.filter(|m| !matches!(m.dtype, DType::I64 | DType::I32)) {
        return Err(bad(
            "max_output_boxes_per_class",
            format!(
                "max_output_boxes_per_class is {}; it must be an integer",
                m.dtype
            ),
        ));
    }
    let max_per_class = scalar(max_out, "max_output_boxes_per_class")?
        .unwrap_or(0.0)
        .max(0.0) as usize;
    let iou = scalar(iou, "iou_threshold")?.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&iou) {
        return Err(bad(
            "iou_threshold",
            format!("iou_threshold is {iou}; it must be in [0, 1]"),
        ));
    }
    let score = scalar(score, "score_threshold")?;
    let dims = (batches, scores.shape[1], n);
    let center = center_point_box == 1;
    let out = if boxes.dtype == DType::F64 {
        let (b, s) = (boxes.to_vec::<f64>()?, scores.to_vec::<f64>()?);
        select(&b, &s, dims, max_per_class, iou, score, center)
    } else {
        let wide = |t: &HostTensor| crate::reference::cast_host(t, DType::F32)?.to_vec::<f32>();
        let (b, s) = (wide(boxes)?, wide(scores)?);
        select(
            &b,
            &s,
            dims,
            max_per_class,
            iou as f32,
            score.map(|v| v as f32),
            center,
        )
    };
    HostTensor::from_vec(vec![out.len() / 3, 3], &out)
}
