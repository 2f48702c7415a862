//! numpy indexing expressions (`[16:-16, ::-1, 0]`, `...`, `None`) turned into StridedSlice-1
//! inputs and masks, so that the demo's parameters read the way users write them.

use wgpu_ops::StridedSlice;

/// Parses `expr` (with or without the surrounding brackets) into a StridedSlice.
pub fn strided_slice(expr: &str) -> Result<StridedSlice, String> {
    let body = expr.trim();
    let body = body
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .unwrap_or(body);
    let mut items: Vec<&str> = body.split(',').map(str::trim).collect();
    // Python allows one trailing comma (`x[1,]`).
    if items.len() > 1 && items.last() == Some(&"") {
        items.pop();
    }
    let n = items.len();
    let mut begin = vec![0i64; n];
    let mut end = vec![0i64; n];
    let mut stride = vec![1i64; n];
    let mut begin_mask = vec![0i64; n];
    let mut end_mask = vec![0i64; n];
    let mut new_axis = vec![0i64; n];
    let mut shrink = vec![0i64; n];
    let mut ellipsis = vec![0i64; n];
    let int = |s: &str, what: &str| -> Result<i64, String> {
        s.parse::<i64>()
            .map_err(|_| format!("'{s}' is not an integer ({what} of '{expr}')"))
    };
    for (i, item) in items.iter().enumerate() {
        match *item {
            "" if n == 1 => return Err("an empty index; write ':' to keep every element".into()),
            "" => return Err(format!("item {i} of '{expr}' is empty")),
            "..." => ellipsis[i] = 1,
            "None" | "np.newaxis" | "newaxis" => new_axis[i] = 1,
            s if s.contains(':') => {
                let parts: Vec<&str> = s.split(':').map(str::trim).collect();
                if parts.len() > 3 {
                    return Err(format!("'{s}' has more than two ':'"));
                }
                match parts[0] {
                    "" => begin_mask[i] = 1,
                    b => begin[i] = int(b, "start")?,
                }
                match parts[1] {
                    "" => end_mask[i] = 1,
                    e => end[i] = int(e, "stop")?,
                }
                if let Some(st) = parts.get(2).filter(|st| !st.is_empty()) {
                    stride[i] = int(st, "step")?;
                }
            }
            s => {
                begin[i] = int(s, "index")?;
                end[i] = begin[i] + 1;
                shrink[i] = 1;
            }
        }
    }
    Ok(StridedSlice::new(begin, end)
        .stride(stride)
        .begin_mask(begin_mask)
        .end_mask(end_mask)
        .new_axis_mask(new_axis)
        .shrink_axis_mask(shrink)
        .ellipsis_mask(ellipsis))
}

/// A comma-separated list of integers; empty text is an empty list.
pub fn int_list(text: &str, what: &str) -> Result<Vec<i64>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<i64>()
                .map_err(|_| format!("{what}: '{s}' is not an integer"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgpu_ops::{reference, HostTensor};

    fn apply(expr: &str, shape: &[usize]) -> HostTensor {
        let n: usize = shape.iter().product();
        let values: Vec<i32> = (0..n as i32).collect();
        let x = HostTensor::from_vec(shape.to_vec(), &values).unwrap();
        reference::strided_slice(&x, &strided_slice(expr).unwrap()).unwrap()
    }

    #[test]
    fn expressions_mean_what_numpy_means() {
        // x = np.arange(24).reshape(2, 3, 4)
        let y = apply("[1:, ::-1, 0]", &[2, 3, 4]);
        assert_eq!(y.shape, [1, 3]);
        assert_eq!(y.to_vec::<i32>().unwrap(), [20, 16, 12]);
        let y = apply("..., None, ::2", &[2, 3, 4]);
        assert_eq!(y.shape, [2, 3, 1, 2]);
        assert_eq!(y.to_vec::<i32>().unwrap()[..4], [0, 2, 4, 6]);
        let y = apply("[-1,]", &[2, 3, 4]);
        assert_eq!(y.shape, [3, 4]);
        assert_eq!(y.to_vec::<i32>().unwrap()[0], 12);
        let y = apply("[:, 1:-1:1]", &[2, 3, 4]);
        assert_eq!(y.shape, [2, 1, 4]);
    }

    #[test]
    fn malformed_expressions_are_errors() {
        for bad in ["[]", "[1:2:3:4]", "[a]", "[1,,2]", "[::x]"] {
            assert!(strided_slice(bad).is_err(), "{bad}");
        }
        assert_eq!(int_list(" 1, -2 ,3", "start").unwrap(), [1, -2, 3]);
        assert!(int_list("1, z", "start").unwrap_err().contains("'z'"));
    }
}
