//! TreeWalk on the CPU: each row walks each tree from its root, comparing in f64 the values
//! converted to the comparison's type (`comparison_dtype`; f64 holds every float type
//! exactly), until a leaf or `depth` steps.

use super::RefError;
use crate::graph::{Attr, Node};
use crate::ops::tree_walk::{check_tables, comparison_dtype, rule, tree_walk_shape};
use crate::{DType, HostTensor};

type R<T> = std::result::Result<T, RefError>;

/// Runs `node` when it is a TreeWalk (`None` otherwise).
pub(crate) fn run(node: &Node, args: &[Option<HostTensor>]) -> R<Option<HostTensor>> {
    if node.op != "TreeWalk" {
        return Ok(None);
    }
    let arg = |k: usize, name: &str| {
        args.get(k)
            .and_then(Option::as_ref)
            .ok_or_else(|| RefError(format!("TreeWalk: input {name} missing")))
    };
    let (x, nodes, thresholds, roots) = (
        arg(0, "X")?,
        arg(1, "nodes")?,
        arg(2, "thresholds")?,
        arg(3, "roots")?,
    );
    let depth = match node.attrs.get("depth") {
        Some(Attr::Int(d)) => *d,
        _ => 0,
    };
    let e = |e: crate::Error| RefError(e.to_string());
    let shape = tree_walk_shape(
        (x.dtype, &x.shape),
        (nodes.dtype, &nodes.shape),
        (thresholds.dtype, &thresholds.shape),
        (roots.dtype, &roots.shape),
        depth,
    )
    .map_err(e)?;
    let table = nodes.to_vec::<i32>()?;
    let starts = roots.to_vec::<i32>()?;
    let features = x.shape[1];
    check_tables(&table, &starts, features).map_err(e)?;
    let compared = comparison_dtype(x.dtype, thresholds.dtype);
    let in_f64 = |t: &HostTensor| -> R<Vec<f64>> {
        let t = super::cast_host(t, compared).map_err(e)?;
        Ok(super::cast_host(&t, DType::F64)
            .map_err(e)?
            .to_vec::<f64>()?)
    };
    let (values, limits) = (in_f64(x)?, in_f64(thresholds)?);
    let mut leaves = Vec::with_capacity(shape[0] * shape[1]);
    for row in values.chunks(features.max(1)).take(shape[0]) {
        for &root in &starts {
            let mut at = root;
            for _ in 0..depth {
                let n = &table[at as usize * 4..][..4];
                if n[3] & rule::LEAF != 0 {
                    break;
                }
                let (v, t) = (row[n[0] as usize], limits[at as usize]);
                let go = (n[3] & rule::LESS != 0 && v < t)
                    || (n[3] & rule::EQUAL != 0 && v == t)
                    || (n[3] & rule::GREATER != 0 && v > t)
                    || (n[3] & rule::NAN != 0 && v.is_nan());
                at = if go { n[1] } else { n[2] };
            }
            leaves.push(at);
        }
    }
    Ok(Some(HostTensor::from_vec(shape, &leaves)?))
}
