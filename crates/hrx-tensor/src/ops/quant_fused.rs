//! Work fused into a decode-sized quantised product, so that a decode
//! step spends no dispatch on it: the RMS norm of the product's input and
//! the residual add of its output.
//!
//! A decode step is bound by its count of dependent dispatches (each
//! costs a few microseconds however little it does), and a transformer
//! block's norms and residual adds sit between its products. The RMS
//! norm folds into the product that reads it: with `r = 1 / sqrt(mean_k
//! x_k^2 + eps)`, `sum_k w_jk (x_k g_k r) = r sum_k w_jk (x_k g_k)`, and
//! every subgroup already reads the whole row of x, so it sums the
//! squares in the same loop and scales its dot at the end; no pass over
//! x before the product, no extra load. The residual is one load per
//! output, issued before the product's loop.
//!
//! Only the matrix-vector kernel (up to `QUANT_GATED_MAX_ROWS` rows of x)
//! fuses; the tiled kernel's callers record the norm and the add as their
//! own operators.

use super::operand::{Operand, check_inputs, disjoint, operand, quad_offset};
use crate::{DType, DeviceTensor};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::{BufferView, Runtime};

/// RMS normalisation of each row of a product's input as the product
/// reads it: `x[i, k] * weight[k] / sqrt(mean_k x[i, k]^2 + eps)`.
#[derive(Clone, Copy, Debug)]
pub struct RowNorm<'a> {
    /// f32 `[cols]`, contiguous.
    pub weight: &'a DeviceTensor,
    /// Added to the mean square before its inverse square root.
    pub eps: f32,
}

/// What a decode-sized quantised product does besides the product
/// ([`Ops::record_quant_matmul_fused`](super::Ops::record_quant_matmul_fused)).
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantFusion<'a> {
    /// Normalise each row of x first (the product of the normalised rows;
    /// x itself is not changed).
    pub norm: Option<RowNorm<'a>>,
    /// Add this f32 `[m, n]` (contiguous, not overlapping the output) to
    /// the product, after the gate of a gated product.
    pub residual: Option<&'a DeviceTensor>,
}

impl QuantFusion<'_> {
    /// Whether there is anything to fuse.
    pub fn is_empty(&self) -> bool {
        self.norm.is_none() && self.residual.is_none()
    }
}

/// The fused operands bound: their launch scalars (after the product's)
/// and views (after x, the words and out), and whether the norm weight
/// may be read in quads.
pub(crate) struct FusedOperands {
    pub(crate) scalars: Vec<ScalarValue>,
    pub(crate) views: Vec<BufferView>,
    pub(crate) norm_quads: bool,
}

/// Check `fusion` against a product of `m` rows of `cols` into `n`
/// outputs written to `out`, and bind its operands.
pub(crate) fn bind(
    runtime: &Runtime,
    target: &Target,
    operation: &str,
    fusion: &QuantFusion,
    (m, cols, n): (usize, usize, usize),
    out: &Operand,
) -> Result<FusedOperands> {
    let mut bound = FusedOperands {
        scalars: Vec::new(),
        views: Vec::new(),
        norm_quads: true,
    };
    let contiguous_f32 = |t: &DeviceTensor, what: &str, shape: &[usize]| {
        let d = t.desc();
        if d.dtype() != DType::F32 || d.shape() != shape || !d.is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: the {what} must be a contiguous f32 {shape:?}, got {d}"
            )));
        }
        Ok(())
    };
    let mut operands = Vec::new();
    if let Some(norm) = fusion.norm {
        check_inputs(runtime, operation, &[norm.weight])?;
        contiguous_f32(norm.weight, "norm weight", &[cols])?;
        if !norm.eps.is_finite() || norm.eps < 0.0 {
            return Err(Error::Message(format!(
                "{operation}: the norm's eps {} is not a finite non-negative number",
                norm.eps
            )));
        }
        let weight = operand(norm.weight, target, operation)?;
        bound.norm_quads = quad_offset(&weight).is_some();
        bound.scalars.push(ScalarValue::F32(norm.eps));
        bound.scalars.extend(weight.scalars());
        operands.push(("the norm weight", weight));
    }
    if let Some(residual) = fusion.residual {
        check_inputs(runtime, operation, &[residual])?;
        contiguous_f32(residual, "residual", &[m, n])?;
        let residual = operand(residual, target, operation)?;
        bound.scalars.extend(residual.scalars());
        operands.push(("the residual", residual));
    }
    for (what, operand) in operands {
        disjoint(operation, ("the output", out), (what, &operand))?;
        bound.views.push(operand.view);
    }
    Ok(bound)
}
