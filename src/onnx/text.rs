//! ONNX `TfIdfVectorizer` on integer tokens (string tokens mapped to integer ids first), loaded
//! as the ops that compute it: for each n-gram
//! length and skip distance, the rows' n-grams (n strided slices side by side) compared with
//! every n-gram of that length in the pool, the matches counted per row, and the counts of
//! each pool n-gram added into its output column by one MatMul with a one-hot table.

use super::expansion::{int_attr, node_error, Builder};
use super::recurrent::Expansion;
use crate::graph::{Attr, Node};
use crate::{HostTensor, Result};

/// The nodes that compute a `TfIdfVectorizer` node; `None` for other ops.
pub(super) fn expand(node: &Node) -> Result<Option<Expansion>> {
    if node.op != "TfIdfVectorizer" {
        return Ok(None);
    }
    let bad = |msg: String| node_error(node, msg);
    let ints = |name: &str| match node.attrs.get(name) {
        None => Ok(Vec::new()),
        Some(Attr::Ints(v)) => Ok(v.clone()),
        Some(_) => Err(bad(format!("{name} must be integers"))),
    };
    let (Some(x), Some(y)) = (node.inputs.first(), node.outputs.first()) else {
        return Err(bad("needs an input and an output".into()));
    };
    // A pool of strings: each distinct string gets an integer id, and the input's strings are
    // mapped to their ids (-1 outside the pool) by a LabelEncoder of strings.
    let mut vocabulary: Vec<String> = Vec::new();
    let string_pool = match node.attrs.get("pool_strings") {
        Some(Attr::Strings(words)) if !words.is_empty() => {
            let mut ids: std::collections::HashMap<&str, i64> = Default::default();
            let mut pool = Vec::with_capacity(words.len());
            for w in words {
                let next = ids.len() as i64;
                let id = *ids.entry(w.as_str()).or_insert(next);
                if id == next {
                    vocabulary.push(w.clone());
                }
                pool.push(id);
            }
            Some(pool)
        }
        _ => None,
    };
    let min_n = int_attr(node, "min_gram_length")?.unwrap_or(1);
    let max_n = int_attr(node, "max_gram_length")?.unwrap_or(1);
    let max_skip = int_attr(node, "max_skip_count")?.unwrap_or(0);
    let mode = match node.attrs.get("mode") {
        Some(Attr::String(m)) => m.clone(),
        _ => "TF".to_string(),
    };
    if !matches!(mode.as_str(), "TF" | "IDF" | "TFIDF") {
        return Err(bad(format!(
            "mode '{}' is not TF, IDF or TFIDF",
            mode.escape_debug()
        )));
    }
    let pool = match string_pool {
        Some(pool) => pool,
        None => ints("pool_int64s")?,
    };
    let starts = ints("ngram_counts")?;
    let indexes = ints("ngram_indexes")?;
    let weights: Vec<f32> = match node.attrs.get("weights") {
        None => Vec::new(),
        Some(Attr::Floats(w)) => w.iter().map(|&v| v as f32).collect(),
        Some(_) => return Err(bad("weights must be floats".into())),
    };
    if !(1..=max_n).contains(&min_n) || max_skip < 0 || max_n > 64 || max_skip > 64 {
        return Err(bad(format!(
            "needs 1 <= min_gram_length ({min_n}) <= max_gram_length ({max_n}) <= 64 and 0 <= max_skip_count ({max_skip}) <= 64"
        )));
    }
    // The pool's n-grams by length: n-grams of length n start at ngram_counts[n - 1].
    let mut grams: Vec<(usize, Vec<i64>, usize)> = Vec::new(); // (length, values, column)
    let mut k = 0usize;
    for (g, &start) in starts.iter().enumerate() {
        let n = g + 1;
        let end = starts.get(g + 1).copied().unwrap_or(pool.len() as i64);
        if start < 0
            || end < start
            || end as usize > pool.len()
            || !((end - start) as usize).is_multiple_of(n)
        {
            return Err(bad(format!(
                "ngram_counts {starts:?} do not cut the pool of {} values into n-grams",
                pool.len()
            )));
        }
        for gram in pool[start as usize..end as usize].chunks(n) {
            let column = indexes.get(k).copied().ok_or_else(|| {
                bad(format!(
                    "has fewer ngram_indexes ({}) than n-grams",
                    indexes.len()
                ))
            })?;
            let column = usize::try_from(column)
                .map_err(|_| bad(format!("ngram_indexes holds {column}")))?;
            grams.push((n, gram.to_vec(), column));
            k += 1;
        }
    }
    if let Some(&i) = indexes.iter().find(|&&i| !(0..1 << 24).contains(&i)) {
        return Err(bad(format!(
            "ngram_indexes holds {i}; output columns are 0 to 2^24 - 1"
        )));
    }
    let columns = indexes.iter().copied().max().map_or(0, |m| m + 1) as usize;
    if columns == 0 {
        return Err(bad("has no n-grams (ngram_indexes is empty)".into()));
    }
    if !weights.is_empty() && weights.len() != indexes.len() {
        return Err(bad(format!(
            "has {} weights for {} ngram_indexes; they must be as many",
            weights.len(),
            indexes.len()
        )));
    }
    // Weight k belongs to the pool's n-gram k (as the spec says and onnxruntime does), which
    // counts into column ngram_indexes[k]; the ONNX reference takes weight k for column k.
    let mut column_weights = vec![0f32; columns];
    for (&w, &column) in weights.iter().zip(&indexes) {
        column_weights[column as usize] = w;
    }
    let mut b = Builder::new(node, y);
    let x = if vocabulary.is_empty() {
        x.clone()
    } else {
        let ids: Vec<i64> = (0..vocabulary.len() as i64).collect();
        let out = b.name("token_ids");
        b.op_to(
            "LabelEncoder",
            &out,
            &[x],
            &[
                ("keys_strings", Attr::Strings(vocabulary)),
                ("values_int64s", Attr::Ints(ids)),
                ("default_int64", Attr::Int(-1)),
            ],
        )
    };
    let x = x.as_str();
    // X as ids (strings mapped), so that its rule holds for string tokens too.
    b.check_inputs_of(node, "TfIdfVectorizer", &[x]);
    // Rows of tokens: [C] is one row.
    let width = b.dims("row_width", x, -1, None);
    // The leading dims' product, not -1: rows of no feature leave -1 undetermined.
    let lead = b.dims_product("rows_lead", x, 0, Some(-1));
    let rows_shape = b.op(
        "Concat",
        "rows_shape",
        &[&lead, &width],
        &[("axis", Attr::Int(0))],
    );
    let rows = b.op("Reshape", "rows", &[x, &rows_shape], &[]);
    let axis1 = b.i64s("axis1", &[1])?;
    let axis2 = b.i64s("axis2", &[2])?;
    let axis3 = b.i64s("axis3", &[3])?;
    let drop = [("keepdims", Attr::Int(0))];
    let mut total: Option<String> = None;
    for n in min_n as usize..=max_n as usize {
        let of_n: Vec<&(usize, Vec<i64>, usize)> = grams.iter().filter(|g| g.0 == n).collect();
        if of_n.is_empty() {
            continue;
        }
        let p = of_n.len();
        let flat: Vec<i64> = of_n.iter().flat_map(|g| g.1.iter().copied()).collect();
        let pool_n = b.constant(
            &format!("pool_{n}"),
            HostTensor::from_vec(vec![p, n], &flat)?,
        );
        let pool_n = b.op("CastLike", &format!("pool_{n}_t"), &[&pool_n, &rows], &[]);
        let mut onehot = vec![0f32; p * columns];
        for (i, g) in of_n.iter().enumerate() {
            onehot[i * columns + g.2] += 1.0;
        }
        let onehot = b.constant(
            &format!("columns_{n}"),
            HostTensor::from_vec(vec![p, columns], &onehot)?,
        );
        // Unigrams are counted once; longer n-grams once per skip distance.
        let distances = if n == 1 { 1 } else { max_skip + 1 };
        for d in 1..=distances {
            let name = |s: &str| format!("n{n}_d{d}_{s}");
            let parts: Vec<String> = (0..n as i64)
                .map(|k| {
                    let start = b.i64s(&name(&format!("start{k}")), &[k * d])?;
                    let back = (n as i64 - 1 - k) * d;
                    let end = b.i64s(
                        &name(&format!("end{k}")),
                        &[if back == 0 { i64::MAX } else { -back }],
                    )?;
                    let slice = b.op(
                        "OnnxSlice",
                        &name(&format!("tokens{k}")),
                        &[&rows, &start, &end, &axis1],
                        &[],
                    );
                    Ok(b.op(
                        "Unsqueeze",
                        &name(&format!("wide{k}")),
                        &[&slice, &axis2],
                        &[],
                    ))
                })
                .collect::<Result<_>>()?;
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let gram = b.op("Concat", &name("grams"), &refs, &[("axis", Attr::Int(2))]);
            let gram = b.op("Unsqueeze", &name("grams_wide"), &[&gram, &axis2], &[]);
            let eq = b.op("Equal", &name("equal"), &[&gram, &pool_n], &[]);
            let all = b.op("ReduceMin", &name("match"), &[&eq, &axis3], &drop);
            let all = b.op(
                "Cast",
                &name("match_f"),
                &[&all],
                &[("to", Attr::String("f32".into()))],
            );
            let counts = b.op("ReduceSum", &name("counts"), &[&all, &axis1], &drop);
            let into = b.op("MatMul", &name("columns"), &[&counts, &onehot], &[]);
            total = Some(match total {
                None => into,
                Some(t) => b.op("Add", &name("total"), &[&t, &into], &[]),
            });
        }
    }
    let Some(total) = total else {
        return Err(bad(format!(
            "has no n-grams of lengths {min_n} to {max_n} in its pool"
        )));
    };
    let out = match (mode.as_str(), weights.is_empty()) {
        ("TF", _) | ("TFIDF", true) => total,
        ("TFIDF", false) => {
            let w = b.constant(
                "weights",
                HostTensor::from_vec(vec![columns], &column_weights)?,
            );
            b.op("Mul", "weighted", &[&total, &w], &[])
        }
        _ => {
            let zero = b.f32_scalar("zero", 0.0)?;
            let seen = b.op("Greater", "seen", &[&total, &zero], &[]);
            let w = if weights.is_empty() {
                b.f32_scalar("one", 1.0)?
            } else {
                b.constant(
                    "weights",
                    HostTensor::from_vec(vec![columns], &column_weights)?,
                )
            };
            b.op("Where", "idf", &[&seen, &w, &zero], &[])
        }
    };
    // [C] in, [columns] out; [N, C] in, [N, columns] out.
    let leading = b.dims("leading", x, 0, Some(-1));
    let cols = b.i64s("column_count", &[columns as i64])?;
    let shape = b.op(
        "Concat",
        "out_shape",
        &[&leading, &cols],
        &[("axis", Attr::Int(0))],
    );
    b.op_to("Reshape", y, &[&out, &shape], &[]);
    Ok(Some(b.finish()))
}
