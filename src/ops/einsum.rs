//! ONNX Einsum: the equation parsed into labels (letters, and one label per axis an ellipsis
//! stands for, broadcast numpy-style across operands), then computed with the other ops:
//! repeated labels of an operand as its diagonal (a strided gather), labels no other operand
//! or the output has summed out, each further operand contracted with the product so far as
//! one batched MatMul (shared labels still needed are its batch, the others its inner axis),
//! and the result transposed to the output's order. `einsum_plan` is plain data, shared with
//! the CPU interpreter.

use crate::kernels::gather::{GatherDim, GatherPlan};
use crate::{Error, Out, Recorder, Result, Tensor};

const OP: &str = "Einsum";

/// A label: a letter (0 to 51), or the k-th axis an ellipsis stands for (64 + k, counted
/// from the left of the widest ellipsis).
pub type Label = u32;

/// The parsed equation for operands of given ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EinsumPlan {
    /// Each operand's label per axis.
    pub operands: Vec<Vec<Label>>,
    /// The output's labels.
    pub output: Vec<Label>,
    /// Each label's length (broadcast over the operands that have it).
    pub sizes: std::collections::BTreeMap<Label, usize>,
}

fn letter(c: char) -> Option<Label> {
    match c {
        'a'..='z' => Some(c as u32 - 'a' as u32),
        'A'..='Z' => Some(26 + c as u32 - 'A' as u32),
        _ => None,
    }
}

fn invalid(message: String) -> Error {
    Error::invalid(OP, "equation", message)
}

/// A term's letters, with `None` where its ellipsis is.
fn parse_term(term: &str, equation: &str) -> Result<Vec<Option<Label>>> {
    let mut labels = Vec::new();
    let mut rest = term;
    let mut ellipsis = false;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("...") {
            if ellipsis {
                return Err(invalid(format!(
                    "equation '{}' has two ellipses in one term",
                    equation.escape_debug()
                )));
            }
            ellipsis = true;
            labels.push(None);
            rest = &rest[3..];
            continue;
        }
        let l = letter(c).ok_or_else(|| {
            invalid(format!(
                "equation '{}' holds '{}'; terms are letters and at most one '...'",
                equation.escape_debug(),
                c.escape_debug()
            ))
        })?;
        labels.push(Some(l));
        rest = &rest[c.len_utf8()..];
    }
    Ok(labels)
}

/// Parses `equation` for operands of `shapes`.
pub fn einsum_plan(equation: &str, shapes: &[&[usize]]) -> Result<EinsumPlan> {
    let compact: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match compact.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (compact.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != shapes.len() {
        return Err(invalid(format!(
            "equation '{}' has {} operand terms but the node has {} inputs",
            equation.escape_debug(),
            terms.len(),
            shapes.len()
        )));
    }
    let parsed: Vec<Vec<Option<Label>>> = terms
        .iter()
        .map(|t| parse_term(t, equation))
        .collect::<Result<_>>()?;
    // How many axes each ellipsis stands for; the widest sets the ellipsis labels.
    let mut widths = Vec::with_capacity(shapes.len());
    for (i, (p, shape)) in parsed.iter().zip(shapes).enumerate() {
        let letters = p.iter().filter(|l| l.is_some()).count();
        let has = p.len() != letters;
        let fits = if has {
            shape.len() >= letters
        } else {
            shape.len() == letters
        };
        if !fits {
            return Err(Error::invalid(
                OP,
                "Inputs",
                format!(
                    "input {i} has rank {} but its term '{}' has {letters} letters{}",
                    shape.len(),
                    terms[i].escape_debug(),
                    if has { " and an ellipsis" } else { "" }
                ),
            ));
        }
        widths.push(shape.len() - letters);
    }
    let widest = widths.iter().copied().max().unwrap_or(0);
    let expand = |p: &[Option<Label>], width: usize| -> Vec<Label> {
        let mut out = Vec::new();
        for l in p {
            match l {
                Some(l) => out.push(*l),
                None => out.extend((widest - width..widest).map(|k| 64 + k as u32)),
            }
        }
        out
    };
    let operands: Vec<Vec<Label>> = parsed
        .iter()
        .zip(&widths)
        .map(|(p, &w)| expand(p, w))
        .collect();
    let mut sizes = std::collections::BTreeMap::new();
    for (i, (labels, shape)) in operands.iter().zip(shapes).enumerate() {
        for (&l, &n) in labels.iter().zip(shape.iter()) {
            let e = sizes.entry(l).or_insert(n);
            if *e != n {
                if l >= 64 && (*e == 1 || n == 1) {
                    *e = (*e).max(n);
                } else {
                    return Err(Error::invalid(
                        OP,
                        "Inputs",
                        format!(
                            "input {i} gives a label length {n} where another operand gives {}",
                            *e
                        ),
                    ));
                }
            }
        }
    }
    let output: Vec<Label> = match rhs {
        Some(r) => {
            let p = parse_term(r, equation)?;
            let out = expand(&p, widest);
            let mut seen = std::collections::BTreeSet::new();
            for &l in &out {
                if !sizes.contains_key(&l) || !seen.insert(l) {
                    return Err(invalid(format!(
                        "the output of equation '{}' names a letter twice or one no input has",
                        equation.escape_debug()
                    )));
                }
            }
            out
        }
        None => {
            // The ellipsis' axes, then the letters used once, in ASCII order.
            let mut counts = std::collections::BTreeMap::new();
            for l in operands.iter().flatten().filter(|&&l| l < 64) {
                *counts.entry(*l).or_insert(0) += 1;
            }
            let mut once: Vec<Label> = counts
                .into_iter()
                .filter(|&(_, n)| n == 1)
                .map(|(l, _)| l)
                .collect();
            // ASCII order: upper case (26..52) before lower case (0..26).
            once.sort_by_key(|&l| if l >= 26 { l - 26 } else { l + 26 });
            (0..widest as u32).map(|k| 64 + k).chain(once).collect()
        }
    };
    Ok(EinsumPlan {
        operands,
        output,
        sizes,
    })
}

impl Recorder {
    /// Records ONNX Einsum of `inputs` (one dtype, numeric) by `equation`.
    pub fn einsum_to(&mut self, equation: &str, inputs: &[Tensor], out: Out) -> Result<Tensor> {
        let named: Vec<(&str, &Tensor)> = inputs.iter().map(|t| ("Inputs", t)).collect();
        self.check_inputs(OP, &named)?;
        let Some(first) = inputs.first() else {
            return Err(Error::invalid(
                OP,
                "Inputs",
                "Einsum needs at least one input",
            ));
        };
        let dtype = first.dtype();
        if dtype == crate::DType::Bool {
            return Err(Error::invalid(
                OP,
                "Inputs",
                "Einsum takes numeric types, not bool",
            ));
        }
        if let Some((i, t)) = inputs.iter().enumerate().find(|(_, t)| t.dtype() != dtype) {
            return Err(Error::invalid(
                OP,
                "Inputs",
                format!("input {i} is {} but input 0 is {dtype}", t.dtype()),
            ));
        }
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
        let plan = einsum_plan(equation, &shapes)?;
        let out_shape: Vec<usize> = plan.output.iter().map(|l| plan.sizes[l]).collect();
        // Each operand: its diagonal, then the labels only it has summed out.
        let mut terms: Vec<(Tensor, Vec<Label>)> = Vec::new();
        for (i, (t, labels)) in inputs.iter().zip(&plan.operands).enumerate() {
            let (t, labels) = self.einsum_diagonal(t, labels)?;
            let elsewhere = |l: &Label| {
                plan.output.contains(l)
                    || plan
                        .operands
                        .iter()
                        .enumerate()
                        .any(|(j, o)| j != i && o.contains(l))
            };
            let (t, labels) = self.einsum_sum(t, &labels, |l| !elsewhere(l), inputs)?;
            terms.push((t, labels));
        }
        let mut terms = terms.into_iter();
        let (mut acc, mut acc_labels) = terms.next().expect("one input at least");
        for (k, (b, b_labels)) in terms.enumerate() {
            let later: Vec<Label> = plan.operands[k + 2..]
                .iter()
                .flatten()
                .chain(&plan.output)
                .copied()
                .collect();
            let (next, labels) =
                self.einsum_contract(&plan, (&acc, &acc_labels), (&b, &b_labels), &later)?;
            for t in [acc, b] {
                if !inputs.iter().any(|i| i.shares_buffer(&t)) && !t.shares_buffer(&next) {
                    self.release(t);
                }
            }
            acc = next;
            acc_labels = labels;
        }
        // Labels the output lacks summed out, then the output's order.
        let (acc, acc_labels) =
            self.einsum_sum(acc, &acc_labels, |l| !plan.output.contains(l), inputs)?;
        let perm: Vec<i64> = plan
            .output
            .iter()
            .map(|l| acc_labels.iter().position(|m| m == l).expect("kept") as i64)
            .collect();
        let y = if acc_labels.len() < plan.output.len() {
            // A broadcast ellipsis axis of length 1 everywhere: absent from nothing, so the
            // ranks match; kept for safety.
            return Err(Error::invalid(OP, "equation", "output labels missing"));
        } else if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
            acc.reshaped(&out_shape)?
        } else {
            let y = self.transpose_to(&acc, Some(&perm), Out::NEW)?;
            if !inputs.iter().any(|i| i.shares_buffer(&acc)) && !acc.shares_buffer(&y) {
                self.release(acc);
            }
            y
        };
        out.view(self, y.reshaped(&out_shape)?)
    }

    /// `t`'s diagonal over repeated labels (one axis per label, in first-seen order).
    fn einsum_diagonal(&mut self, t: &Tensor, labels: &[Label]) -> Result<(Tensor, Vec<Label>)> {
        let mut unique: Vec<Label> = Vec::new();
        for &l in labels {
            if !unique.contains(&l) {
                unique.push(l);
            }
        }
        if unique.len() == labels.len() {
            return Ok((t.clone(), unique));
        }
        let shape = t.shape();
        let mut strides = vec![1i64; shape.len()];
        for k in (0..shape.len().saturating_sub(1)).rev() {
            strides[k] = strides[k + 1] * shape[k + 1] as i64;
        }
        let dims: Vec<GatherDim> = unique
            .iter()
            .map(|&l| {
                let axes: Vec<usize> = (0..labels.len()).filter(|&k| labels[k] == l).collect();
                GatherDim {
                    len: shape[axes[0]] as u64,
                    step: axes.iter().map(|&k| strides[k]).sum(),
                }
            })
            .collect();
        let out_shape: Vec<usize> = dims.iter().map(|d| d.len as usize).collect();
        let out = self.alloc(t.dtype(), &out_shape)?;
        self.gather_into(OP, t, &GatherPlan::from_dims(0, &dims), &out)?;
        Ok((out, unique))
    }

    /// `t` with the labels `drop` picks summed out.
    fn einsum_sum(
        &mut self,
        t: Tensor,
        labels: &[Label],
        drop: impl Fn(&Label) -> bool,
        inputs: &[Tensor],
    ) -> Result<(Tensor, Vec<Label>)> {
        let axes: Vec<i64> = (0..labels.len())
            .filter(|&k| drop(&labels[k]))
            .map(|k| k as i64)
            .collect();
        if axes.is_empty() {
            return Ok((t, labels.to_vec()));
        }
        let kept: Vec<Label> = labels.iter().copied().filter(|l| !drop(l)).collect();
        let y = self.reduce_to("ReduceSum", &t, Some(&axes), false, false, Out::NEW)?;
        if !inputs.iter().any(|i| i.shares_buffer(&t)) {
            self.release(t);
        }
        Ok((y, kept))
    }

    /// `a` times `b` over their shared labels: those in `later` are the batch, the others
    /// summed. Returns labels batch, a's own, b's own.
    fn einsum_contract(
        &mut self,
        plan: &EinsumPlan,
        (a, la): (&Tensor, &[Label]),
        (b, lb): (&Tensor, &[Label]),
        later: &[Label],
    ) -> Result<(Tensor, Vec<Label>)> {
        let shared: Vec<Label> = la.iter().copied().filter(|l| lb.contains(l)).collect();
        let batch: Vec<Label> = shared
            .iter()
            .copied()
            .filter(|l| later.contains(l))
            .collect();
        let inner: Vec<Label> = shared
            .iter()
            .copied()
            .filter(|l| !later.contains(l))
            .collect();
        let a_own: Vec<Label> = la.iter().copied().filter(|l| !lb.contains(l)).collect();
        let b_own: Vec<Label> = lb.iter().copied().filter(|l| !la.contains(l)).collect();
        let len = |ls: &[Label]| -> usize { ls.iter().map(|l| plan.sizes[l]).product() };
        // Operands in the MatMul's layout, with length-1 (broadcast) axes expanded.
        let arrange = |rec: &mut Recorder, t: &Tensor, labels: &[Label], order: &[Label]| {
            let perm: Vec<i64> = order
                .iter()
                .map(|l| labels.iter().position(|m| m == l).expect("label") as i64)
                .collect();
            let moved = rec.transpose_to(t, Some(&perm), Out::NEW)?;
            let full: Vec<i64> = order.iter().map(|l| plan.sizes[l] as i64).collect();
            if moved
                .shape()
                .iter()
                .zip(&full)
                .all(|(&m, &f)| m as i64 == f)
            {
                return Ok(moved);
            }
            let e = rec.expand_to(&moved, &full, Out::NEW)?;
            if !moved.shares_buffer(t) {
                rec.release(moved);
            }
            Ok::<Tensor, Error>(e)
        };
        let a_order: Vec<Label> = batch.iter().chain(&a_own).chain(&inner).copied().collect();
        let b_order: Vec<Label> = batch.iter().chain(&inner).chain(&b_own).copied().collect();
        let am = arrange(self, a, la, &a_order)?;
        let bm = arrange(self, b, lb, &b_order)?;
        let (nb, m, k, n) = (len(&batch), len(&a_own), len(&inner), len(&b_own));
        let y = self.matmul_to(
            &am.reshaped(&[nb, m, k])?,
            &bm.reshaped(&[nb, k, n])?,
            Out::NEW,
        )?;
        for (t, src) in [(am, a), (bm, b)] {
            if !t.shares_buffer(src) {
                self.release(t);
            }
        }
        let labels: Vec<Label> = batch.iter().chain(&a_own).chain(&b_own).copied().collect();
        let shape: Vec<usize> = labels.iter().map(|l| plan.sizes[l]).collect();
        Ok((y.reshaped(&shape)?, labels))
    }
}
