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
                _ => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }
        })
        .collect();
    crate::reference::cast_host(&HostTensor::from_vec(vec![n], &values)?, dtype)
}
