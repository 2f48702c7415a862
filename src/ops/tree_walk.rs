//! TreeWalk: decision trees walked to their leaves for every row, all levels in one dispatch
//! (the ONNX-ML tree ensembles load as it, then gather their leaves' weights).

use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "TreeWalk";

/// The most steps a walk takes.
pub const MAX_DEPTH: u32 = 4096;

/// Rule bits of a node: which outcomes of comparing x with the threshold t go to the true
/// child; a leaf stops the walk.
pub mod rule {
    /// x below t goes to the true child.
    pub const LESS: i32 = 1;
    /// x equal to t goes to the true child.
    pub const EQUAL: i32 = 2;
    /// x above t goes to the true child.
    pub const GREATER: i32 = 4;
    /// x NaN goes to the true child.
    pub const NAN: i32 = 8;
    /// The node is a leaf.
    pub const LEAF: i32 = 16;
}

/// The checks of TreeWalk's operands (shared with the interpreter): `x` `[N, F]` of a float
/// type or i32 or i64, `nodes` `[G, 4]` i32, `thresholds` `[G]` of a float type, `roots` `[T]`
/// i32, depth at most [`MAX_DEPTH`]. Returns the output's shape `[N, T]`.
pub fn tree_walk_shape(
    x: (DType, &[usize]),
    nodes: (DType, &[usize]),
    thresholds: (DType, &[usize]),
    roots: (DType, &[usize]),
    depth: i64,
) -> Result<Vec<usize>> {
    let bad = |input: &str, msg: String| Error::invalid(OP, input, msg);
    if !matches!(
        x.0,
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::I32 | DType::I64
    ) {
        return Err(bad(
            "X",
            format!(
                "X is {}; TreeWalk takes f32, f16, bf16, f64, i32 or i64 rows",
                x.0
            ),
        ));
    }
    if x.1.len() != 2 {
        return Err(bad(
            "X",
            format!("X has shape {:?}; TreeWalk takes [rows, features]", x.1),
        ));
    }
    if nodes.0 != DType::I32 || nodes.1.len() != 2 || nodes.1[1] != 4 {
        return Err(bad(
            "nodes",
            format!(
                "nodes is {} {:?}; TreeWalk takes i32 [nodes, 4] (feature, true child, false child, rule)",
                nodes.0, nodes.1
            ),
        ));
    }
    let float = |d: DType| matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    if !float(thresholds.0) || thresholds.1 != [nodes.1[0]] {
        return Err(bad(
            "thresholds",
            format!(
                "thresholds is {} {:?}; TreeWalk takes one per node ({}) of a float type",
                thresholds.0, thresholds.1, nodes.1[0]
            ),
        ));
    }
    if roots.0 != DType::I32 || roots.1.len() != 1 {
        return Err(bad(
            "roots",
            format!(
                "roots is {} {:?}; TreeWalk takes i32 [trees]",
                roots.0, roots.1
            ),
        ));
    }
    if !(0..=i64::from(MAX_DEPTH)).contains(&depth) {
        return Err(bad(
            "depth",
            format!("depth {depth} is not 0 to {MAX_DEPTH}"),
        ));
    }
    Ok(vec![x.1[0], roots.1[0]])
}

/// The type X and the thresholds are compared in: float rows' own (the thresholds rounded to
/// it), and for integer rows the thresholds' (f32 for f16 and bf16, which widen to it
/// exactly), each feature converted to it, as onnxruntime compares integer features.
pub fn comparison_dtype(x: DType, thresholds: DType) -> DType {
    match (x, thresholds) {
        (DType::I32 | DType::I64, DType::F64) => DType::F64,
        (DType::I32 | DType::I64, _) => DType::F32,
        (x, _) => x,
    }
}

/// Checks tables known on the host: every root and child a node, every feature one of X's.
pub fn check_tables(nodes: &[i32], roots: &[i32], features: usize) -> Result<()> {
    let g = nodes.len() / 4;
    let in_nodes = |v: i32| v >= 0 && (v as usize) < g;
    if let Some(r) = roots.iter().find(|&&r| !in_nodes(r)) {
        return Err(Error::invalid(
            OP,
            "roots",
            format!("root {r} is not one of the {g} nodes"),
        ));
    }
    for (k, n) in nodes.chunks_exact(4).enumerate() {
        if n[3] & rule::LEAF != 0 {
            continue;
        }
        if n[0] < 0 || n[0] as usize >= features {
            return Err(Error::invalid(
                OP,
                "nodes",
                format!("node {k} reads feature {}, not one of X's {features}", n[0]),
            ));
        }
        if let Some(c) = [n[1], n[2]].into_iter().find(|&c| !in_nodes(c)) {
            return Err(Error::invalid(
                OP,
                "nodes",
                format!("node {k} branches to {c}, not one of the {g} nodes"),
            ));
        }
    }
    Ok(())
}

impl Recorder {
    /// Records TreeWalk into `out`: each tree's leaf for each row, `[N, T]` i32. `known`: the
    /// node and root tables when the host has them, checked (the kernel only stops at an
    /// index outside them).
    #[allow(clippy::too_many_arguments)]
    pub fn tree_walk_to(
        &mut self,
        x: &Tensor,
        nodes: &Tensor,
        thresholds: &Tensor,
        roots: &Tensor,
        depth: i64,
        known: Option<(&[i32], &[i32])>,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(
            OP,
            &[
                ("X", x),
                ("nodes", nodes),
                ("thresholds", thresholds),
                ("roots", roots),
            ],
        )?;
        let shape = tree_walk_shape(
            (x.dtype(), x.shape()),
            (nodes.dtype(), nodes.shape()),
            (thresholds.dtype(), thresholds.shape()),
            (roots.dtype(), roots.shape()),
            depth,
        )?;
        if let Some((nodes, roots)) = known {
            check_tables(nodes, roots, x.shape()[1])?;
        }
        let leaves = out.tensor(self, DType::I32, &shape)?;
        if leaves.numel() == 0 {
            return Ok(leaves);
        }
        let compared = comparison_dtype(x.dtype(), thresholds.dtype());
        // f16 and bf16 then widen to f32 exactly: the comparisons are the same.
        let wide = match compared {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        };
        // The casts made here are this op's to hand back (the inputs are not).
        let given = [x, thresholds];
        let ours = |t: &Tensor| !given.iter().any(|g| g.shares_buffer(t));
        let mut operands = [x.clone(), thresholds.clone()];
        for t in &mut operands {
            for d in [compared, wide] {
                if t.dtype() != d {
                    let cast = self.cast(t, d)?;
                    let before = std::mem::replace(t, cast);
                    if ours(&before) {
                        self.release(before);
                    }
                }
            }
        }
        let [wx, wt] = &operands;
        self.tree_walk_into(OP, [wx, nodes, wt, roots], depth as u32, known, &leaves)?;
        for t in operands.into_iter().filter(|t| ours(t)) {
            self.release(t);
        }
        Ok(leaves)
    }
}
