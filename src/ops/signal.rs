//! ONNX HannWindow, HammingWindow and BlackmanWindow (opset 17): constants of a length given
//! at plan time, made on the host in f64 and cast to the requested type.

use crate::{DType, Error, HostTensor, Result};

/// The window `op` of `size` elements: periodic (the period is `size`, as for a DFT) or
/// symmetric (the period is `size - 1`), cast to `dtype`.
pub fn signal_window(
    op: &'static str,
    size: i64,
    periodic: bool,
    dtype: DType,
) -> Result<HostTensor> {
    if !(0..=1 << 26).contains(&size) {
        return Err(Error::invalid(
            op,
            "size",
            format!("size is {size}; it must be in 0..=2^26"),
        ));
    }
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    if !(float || dtype.is_integer()) {
        return Err(Error::invalid(
            op,
            "output_datatype",
            format!("output_datatype {dtype} is not numeric"),
        ));
    }
    let n = size as usize;
    let period = if periodic { n } else { n.saturating_sub(1) } as f64;
    let tau = std::f64::consts::TAU;
    let values: Vec<f64> = (0..n)
        .map(|k| {
            // A symmetric window of one element divides 0 by 0: NaN, as the op's function
            // body and onnxruntime give.
            let x = tau * k as f64 / period;
            match op {
                "HannWindow" => 0.5 - 0.5 * x.cos(),
                "HammingWindow" => 25.0 / 46.0 - 21.0 / 46.0 * x.cos(),
                // 0.42 last: the terms sum to exactly 1 at the peak (0.42 - 0.5 + 0.08 in
                // the other order is 1 - 2^-53, which an integer output truncates to 0).
                _ => (0.08 * (2.0 * x).cos() - 0.5 * x.cos()) + 0.42,
            }
        })
        .collect();
    crate::reference::cast_host(&HostTensor::from_vec(vec![n], &values)?, dtype)
}

/// ONNX MelWeightMatrix-17: `[dft_length / 2 + 1, num_mel_bins]` weights taking the bins of
/// a one-sided spectrum to triangular mel bands between the two edges, as the ONNX reference
/// computes them (band edges on the mel scale, rounded down to spectrum bins; in f64). Weights
/// of band edges beyond the spectrum are left out. Cast to `dtype`.
pub fn mel_weight_matrix(
    num_mel_bins: i64,
    dft_length: i64,
    sample_rate: i64,
    lower_edge_hertz: f64,
    upper_edge_hertz: f64,
    dtype: DType,
) -> Result<HostTensor> {
    const OP: &str = "MelWeightMatrix";
    let bad = |input: &str, message: String| Err(Error::invalid(OP, input, message));
    if num_mel_bins < 1 || dft_length < 1 {
        return bad(
            "num_mel_bins",
            format!(
                "num_mel_bins ({num_mel_bins}) and dft_length ({dft_length}) must be at least 1"
            ),
        );
    }
    if sample_rate < 1 {
        return bad(
            "sample_rate",
            format!("sample_rate must be at least 1, not {sample_rate}"),
        );
    }
    if !(lower_edge_hertz >= 0.0
        && upper_edge_hertz > lower_edge_hertz
        && upper_edge_hertz.is_finite())
    {
        return bad(
            "upper_edge_hertz",
            format!("the edges must satisfy 0 <= lower ({lower_edge_hertz}) < upper ({upper_edge_hertz})"),
        );
    }
    let bins = (dft_length / 2 + 1) as usize;
    let mels = num_mel_bins as usize;
    if (bins as u64).saturating_mul(mels as u64) > 1 << 26 {
        return bad(
            "num_mel_bins",
            format!("{bins} x {mels} weights; at most 2^26"),
        );
    }
    let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / std::f64::consts::LN_10;
    let (low, high) = (mel(lower_edge_hertz), mel(upper_edge_hertz));
    let step = (high - low) / (mels + 2) as f64;
    let edges: Vec<i64> = (0..mels + 2)
        .map(|k| {
            let hz = 700.0 * ((k as f64 * step + low) / 2595.0 * std::f64::consts::LN_10).exp_m1();
            ((dft_length + 1) as f64 * hz / sample_rate as f64).floor() as i64
        })
        .collect();
    let mut weights = vec![0.0; bins * mels];
    let mut set = |j: i64, i: usize, w: f64| {
        if (0..bins as i64).contains(&j) {
            weights[j as usize * mels + i] = w;
        }
    };
    for i in 0..mels {
        let (left, centre, right) = (edges[i], edges[i + 1], edges[i + 2]);
        if centre == left {
            set(centre, i, 1.0);
        } else {
            for j in left..=centre {
                set(j, i, (j - left) as f64 / (centre - left) as f64);
            }
        }
        if right > centre {
            for j in centre..right {
                set(j, i, (right - j) as f64 / (right - centre) as f64);
            }
        }
    }
    crate::reference::cast_host(&HostTensor::from_vec(vec![bins, mels], &weights)?, dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blackman_peak_is_one_in_integers() {
        // onnxruntime and the ONNX reference: periodic size 2 is [0, 1], symmetric odd sizes
        // peak at exactly 1 in the middle.
        let int = |size, periodic| {
            signal_window("BlackmanWindow", size, periodic, DType::I32)
                .unwrap()
                .to_vec::<i32>()
                .unwrap()
        };
        assert_eq!(int(2, true), [0, 1]);
        assert_eq!(int(3, false), [0, 1, 0]);
        for size in 2..64 {
            let w = int(size, size % 2 == 0);
            assert_eq!(
                w.iter().filter(|&&v| v == 1).count(),
                1,
                "size {size}: {w:?}"
            );
            assert_eq!(w[size as usize / 2], 1, "size {size}");
        }
    }
}
