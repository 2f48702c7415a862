//! PairwiseCoupling on the host: class probabilities from the probabilities of each pair of
//! classes, as a one-against-one SVM with probability estimates (scikit-learn's
//! `SVC(probability=True)`, ONNX-ML's SVMClassifier with `prob_a` and `prob_b`) combines
//! them: Wu, Lin and Weng's second method, solved by libsvm's fixed-point iteration, in f32 as
//! onnxruntime runs it. The graph op runs it here on values known while planning (and on
//! pairs read back past `ops::coupling::GPU_MAX_CLASSES`); the GPU runs the same iteration
//! in the same order (`shaders/pairwise_coupling.wgsl`).

use crate::{DType, Error, HostTensor, Result};

const OP: &str = "PairwiseCoupling";
const MAX_CLASSES: usize = 1000;

/// The number of classes K of `pairs` = K (K - 1) / 2 pairs, K >= 2.
pub fn classes_of_pairs(pairs: usize) -> Option<usize> {
    (2usize..)
        .take_while(|k| k * (k - 1) / 2 <= pairs)
        .find(|k| k * (k - 1) / 2 == pairs)
}

/// The number of classes K of PairwiseCoupling's input after checking it (shared with the
/// GPU op): f32 `[rows, K (K - 1) / 2]`, 2 <= K <= 1000.
pub fn coupling_classes(dtype: DType, shape: &[usize]) -> Result<usize> {
    if dtype != DType::F32 || shape.len() != 2 {
        return Err(Error::invalid(
            OP,
            "pairs",
            format!("pairs is {dtype} {shape:?}; PairwiseCoupling takes f32 [rows, pairs]"),
        ));
    }
    let pairs = shape[1];
    let k = classes_of_pairs(pairs).ok_or_else(|| {
        Error::invalid(
            OP,
            "pairs",
            format!("pairs has {pairs} columns, not K (K - 1) / 2 for a number of classes K >= 2"),
        )
    })?;
    // A row's iteration takes up to max(100, K) sweeps of K^2 steps: past this many classes
    // (half a million pairs, far beyond any one-against-one model) a row's work would grow
    // faster than its input does.
    if k > MAX_CLASSES {
        return Err(Error::invalid(
            OP,
            "pairs",
            format!("pairs has {pairs} columns, for {k} classes; PairwiseCoupling takes at most {MAX_CLASSES}"),
        ));
    }
    Ok(k)
}

/// The most sweeps of the iteration for `classes` classes (libsvm's).
pub fn max_sweeps(classes: usize) -> usize {
    classes.max(100)
}

/// `r`: `[N, P]` f32, the probability that class i beats class j for each pair i < j, in the
/// order (0, 1), (0, 2), ..., (1, 2), ...; gives `[N, K]` f32 class probabilities.
pub fn pairwise_coupling(r: &HostTensor) -> Result<HostTensor> {
    let k = coupling_classes(r.dtype, &r.shape)?;
    let (rows, pairs) = (r.shape[0], r.shape[1]);
    let values: Vec<f32> = r.to_vec()?;
    let mut out = vec![0f32; rows * k];
    let mut matrix = vec![0f32; k * k];
    for (row, probabilities) in values.chunks_exact(pairs).zip(out.chunks_exact_mut(k)) {
        let pair_indices = (0..k).flat_map(|i| (i + 1..k).map(move |j| (i, j)));
        for ((i, j), &r_ij) in pair_indices.zip(row) {
            matrix[i * k + j] = r_ij;
            matrix[j * k + i] = 1.0 - r_ij;
        }
        couple(&matrix, k, probabilities);
    }
    HostTensor::from_vec(vec![rows, k], &out)
}

/// libsvm's `multiclass_probability`: minimizes `p^T Q p` over the simplex, where
/// `Q[t][t] = sum_{j != t} r[j][t]^2` and `Q[t][j] = -r[j][t] r[t][j]`, by updating one class
/// at a time until every `(Q p)[t]` is within `0.005 / k` of `p^T Q p` (at most max(100, k)
/// sweeps). Operations in libsvm's order, in f32.
fn couple(r: &[f32], k: usize, p: &mut [f32]) {
    let mut q = vec![0f32; k * k];
    let mut qp = vec![0f32; k];
    for t in 0..k {
        p[t] = 1.0 / k as f32;
        for j in 0..t {
            q[t * k + t] += r[j * k + t] * r[j * k + t];
            q[t * k + j] = q[j * k + t];
        }
        for j in t + 1..k {
            q[t * k + t] += r[j * k + t] * r[j * k + t];
            q[t * k + j] = -r[j * k + t] * r[t * k + j];
        }
    }
    let eps = 0.005 / k as f32;
    for _ in 0..max_sweeps(k) {
        // The stopping test, with Qp and pQp recomputed for accuracy.
        let mut pqp = 0f32;
        for t in 0..k {
            qp[t] = 0.0;
            for j in 0..k {
                qp[t] += q[t * k + j] * p[j];
            }
            pqp += p[t] * qp[t];
        }
        let max_error = qp.iter().fold(0f32, |m, &v| m.max((v - pqp).abs()));
        if max_error < eps {
            break;
        }
        for t in 0..k {
            let diff = (-qp[t] + pqp) / q[t * k + t];
            p[t] += diff;
            pqp = (pqp + diff * (diff * q[t * k + t] + 2.0 * qp[t])) / (1.0 + diff) / (1.0 + diff);
            for j in 0..k {
                qp[j] = (qp[j] + diff * q[t * k + j]) / (1.0 + diff);
                p[j] /= 1.0 + diff;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_counts_give_class_counts() {
        assert_eq!(classes_of_pairs(1), Some(2));
        assert_eq!(classes_of_pairs(3), Some(3));
        assert_eq!(classes_of_pairs(10), Some(5));
        assert_eq!(classes_of_pairs(0), None);
        assert_eq!(classes_of_pairs(4), None);
        assert_eq!(classes_of_pairs(1 << 40), None);
    }

    #[test]
    fn two_classes_take_the_pairs_probability() {
        // With two classes the minimum of p^T Q p on the simplex is (r01, r10) itself.
        let r = HostTensor::from_vec(vec![2, 1], &[0.8f32, 0.25]).unwrap();
        let p: Vec<f32> = pairwise_coupling(&r).unwrap().to_vec().unwrap();
        for (got, want) in p.iter().zip([0.8, 0.2, 0.25, 0.75]) {
            assert!((got - want).abs() < 1e-3, "{p:?}");
        }
    }

    #[test]
    fn consistent_pairs_give_their_classes_back() {
        // Pairs made from class probabilities pi: r_ij = pi_i / (pi_i + pi_j).
        let pi = [0.5f32, 0.3, 0.2];
        let r: Vec<f32> = [(0, 1), (0, 2), (1, 2)]
            .iter()
            .map(|&(i, j)| pi[i] / (pi[i] + pi[j]))
            .collect();
        let p: Vec<f32> = pairwise_coupling(&HostTensor::from_vec(vec![1, 3], &r).unwrap())
            .unwrap()
            .to_vec()
            .unwrap();
        for (got, want) in p.iter().zip(pi) {
            assert!((got - want).abs() < 2e-3, "{p:?}");
        }
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn other_inputs_are_refused() {
        let r = HostTensor::from_vec(vec![1, 2], &[0.5f32, 0.5]).unwrap();
        let e = pairwise_coupling(&r).unwrap_err().to_string();
        assert!(e.contains("not K (K - 1) / 2"), "{e}");
        let r = HostTensor::from_vec(vec![3], &[0.5f32, 0.5, 0.5]).unwrap();
        assert!(pairwise_coupling(&r).is_err());
        let pairs = 1001 * 1000 / 2;
        let r = HostTensor::from_vec(vec![1, pairs], &vec![0.5f32; pairs]).unwrap();
        let e = pairwise_coupling(&r).unwrap_err().to_string();
        assert!(
            e.contains("for 1001 classes; PairwiseCoupling takes at most 1000"),
            "{e}"
        );
    }
}
