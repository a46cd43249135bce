//! Helpers shared by the matmul tests: random operands (either batch
//! broadcast), transposed storage, f16 rounding of reference inputs and
//! error bounds.

use super::bounds::{Precision, U32, assert_within, unary_bound};
use hrx_tensor::{
    DType, DeviceTensor, Ops, TensorDesc,
    ops::{MatmulOptions, UnaryOp},
};

/// Random operand values of a batched matmul test, each rounded to what
/// the kernel reads (`round` for A and B, f32 for the bias). B has one
/// entry per batch entry half of the time (else it is broadcast), and the
/// bias is used half of the time.
pub struct Operands {
    pub b_batch: Vec<usize>,
    /// Entries of A's batch and of B's.
    pub nb: usize,
    pub nbb: usize,
    pub va: Vec<f64>,
    pub vb: Vec<f64>,
    pub vbias: Vec<f64>,
    pub with_bias: bool,
}

impl Operands {
    pub fn random(
        rng: &mut super::Gen,
        batch: &[usize],
        (m, k, n): (usize, usize, usize),
        round: impl Fn(f64) -> f64,
    ) -> Operands {
        let b_batch: Vec<usize> = if rng.below(2) == 0 {
            vec![]
        } else {
            batch.to_vec()
        };
        let nb: usize = batch.iter().product();
        let nbb: usize = b_batch.iter().product();
        let mut drawn = |count: usize, round: &dyn Fn(f64) -> f64| -> Vec<f64> {
            super::values(rng, count, -1.0, 1.0)
                .into_iter()
                .map(round)
                .collect()
        };
        let va = drawn(nb * m * k, &round);
        let vb = drawn(nbb * k * n, &round);
        let vbias = drawn(n, &f32_round);
        Operands {
            b_batch,
            nb,
            nbb,
            va,
            vb,
            vbias,
            with_bias: rng.below(2) == 0,
        }
    }
}

/// Random operand values of a batched matmul test where either batch may
/// be broadcast (batch stride 0 in the kernel): a third of the time A's
/// batch is dropped or all ones, a third of the time B's, else both are
/// `batch`. Values are rounded as in [`Operands`]; the bias is used half
/// of the time.
pub struct BatchedOperands {
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    /// Entries of the output's batch, of A's and of B's.
    pub nb: usize,
    pub nab: usize,
    pub nbb: usize,
    pub va: Vec<f64>,
    pub vb: Vec<f64>,
    pub vbias: Vec<f64>,
    pub with_bias: bool,
}

impl BatchedOperands {
    pub fn random(
        rng: &mut super::Gen,
        batch: &[usize],
        (m, k, n): (usize, usize, usize),
        round: impl Fn(f64) -> f64,
    ) -> BatchedOperands {
        // Missing axes and extent-1 axes both broadcast; draw both.
        let broadcast = |rng: &mut super::Gen| {
            if rng.below(2) == 0 {
                vec![]
            } else {
                vec![1; batch.len()]
            }
        };
        let (a_batch, b_batch) = match rng.below(3) {
            0 => (broadcast(rng), batch.to_vec()),
            1 => (batch.to_vec(), broadcast(rng)),
            _ => (batch.to_vec(), batch.to_vec()),
        };
        let nb: usize = batch.iter().product();
        let nab: usize = a_batch.iter().product();
        let nbb: usize = b_batch.iter().product();
        let mut drawn = |count: usize, round: &dyn Fn(f64) -> f64| -> Vec<f64> {
            super::values(rng, count, -1.0, 1.0)
                .into_iter()
                .map(round)
                .collect()
        };
        let va = drawn(nab * m * k, &round);
        let vb = drawn(nbb * k * n, &round);
        let vbias = drawn(n, &f32_round);
        BatchedOperands {
            a_batch,
            b_batch,
            nb,
            nab,
            nbb,
            va,
            vb,
            vbias,
            with_bias: rng.below(2) == 0,
        }
    }

    /// Whether A and B have one matrix per output batch entry (else the
    /// one matrix is broadcast).
    pub fn batched(&self) -> (bool, bool) {
        (self.nab == self.nb, self.nbb == self.nb)
    }
}

/// The shape of a `[batch.., rows, cols]` operand, `[batch.., cols, rows]`
/// when stored transposed.
pub fn operand_shape(batch: &[usize], rows: usize, cols: usize, transpose: bool) -> Vec<usize> {
    let mut shape = batch.to_vec();
    shape.extend(if transpose {
        [cols, rows]
    } else {
        [rows, cols]
    });
    shape
}

/// Values of a `[.., rows, cols]` tensor stored transposed when asked.
pub fn stored(values: &[f64], batch: usize, rows: usize, cols: usize, transpose: bool) -> Vec<f64> {
    if !transpose {
        return values.to_vec();
    }
    let mut out = vec![0.0; values.len()];
    for b in 0..batch {
        for i in 0..rows {
            for j in 0..cols {
                out[b * rows * cols + j * rows + i] = values[b * rows * cols + i * cols + j];
            }
        }
    }
    out
}

/// `v` as the nearest f16 would hold it, so references see what the
/// kernel reads.
pub fn f16_round(v: f64) -> f64 {
    half::f16::from_f64(v).to_f64()
}

/// `v` as the nearest f32 would hold it.
pub fn f32_round(v: f64) -> f64 {
    (v as f32) as f64
}

/// The unit roundoff of a matmul kernel's f32 accumulation: 2^-24, or
/// 2^-23 on cooperative-matrix kernels (the H200's), whose tensor cores
/// may truncate instead of rounding to nearest.
pub fn accumulation_roundoff(kernel: &str) -> f64 {
    if kernel.starts_with("cooperative matrix") {
        2.0 * U32
    } else {
        U32
    }
}

/// Bound on `|kernel - reference|` for one output `act(s)`, `s` the exact
/// sum of `k` products plus a bias and `abs_sum` the sum of the terms'
/// magnitudes, accumulated in f32 with unit roundoff `u`. In any order
/// (tiles, split k, subgroup trees) each term passes through at most k
/// additions and one product rounding (none for f16 inputs, whose
/// products are exact), so `s` is off by at most `(k + 2) u abs_sum`. The
/// activation moves that error by at most its slope (relu 1, silu 1.1,
/// gelu 1.13) and adds its own f32 error (common/bounds.rs). A missed or
/// doubled product of typical size (|a b| ~ 0.25 for values in [-1, 1])
/// moves `s` by more than the bound for any k the tests draw.
pub fn matmul_bound(u: f64, k: usize, abs_sum: f64, s: f64, activation: Option<UnaryOp>) -> f64 {
    let ds = (k as f64 + 2.0) * u * abs_sum;
    match activation {
        None => ds,
        Some(op) => {
            let slope = match op {
                UnaryOp::Gelu => 1.13,
                UnaryOp::Silu => 1.1,
                _ => 1.0,
            };
            slope * ds + unary_bound(op, s, &Precision::of(DType::F32))
        }
    }
}

/// The f64 reference of `act(A @ B + bias)` for `batch` row-major `m x k`
/// A and `k x n` B (one B for every entry unless `b_batched`), and each
/// element's error bound ([`matmul_bound`] with unit roundoff `u`).
pub fn reference(
    operands: (&[f64], &[f64], Option<&[f64]>),
    (batch, b_batched): (usize, bool),
    dims: (usize, usize, usize),
    activation: Option<UnaryOp>,
    u: f64,
) -> (Vec<f64>, Vec<f64>) {
    reference_batched(operands, (batch, true, b_batched), dims, activation, u)
}

/// [`reference`] where A too may be one matrix broadcast over the batch
/// (unless `a_batched`).
pub fn reference_batched(
    (a, b, bias): (&[f64], &[f64], Option<&[f64]>),
    (batch, a_batched, b_batched): (usize, bool, bool),
    (m, k, n): (usize, usize, usize),
    activation: Option<UnaryOp>,
    u: f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut want, mut tol) = (Vec::new(), Vec::new());
    for bi in 0..batch {
        let ba = if a_batched { bi } else { 0 };
        let bb = if b_batched { bi } else { 0 };
        for i in 0..m {
            for j in 0..n {
                let terms = (0..k).map(|q| a[ba * m * k + i * k + q] * b[bb * k * n + q * n + j]);
                let bias_term = bias.map_or(0.0, |v| v[j]);
                let s: f64 = terms.clone().sum::<f64>() + bias_term;
                let abs_sum: f64 = terms.map(f64::abs).sum::<f64>() + bias_term.abs();
                want.push(activation.map_or(s, |op| super::cases::unary_ref(op, s)));
                tol.push(matmul_bound(u, k, abs_sum, s, activation));
            }
        }
    }
    (want, tol)
}

/// Record `act(a @ b + bias)` into a poisoned f32 output through
/// `Ops::record_matmul`, run it, and check every element against
/// [`reference`] of the values the operands hold (`va`, `vb` and the bias's,
/// row-major `m x k` and `k x n` per batch entry) within its bound for unit
/// roundoff `u`.
pub fn check_matmul(
    operands: (
        &DeviceTensor,
        &DeviceTensor,
        Option<(&DeviceTensor, &[f64])>,
    ),
    values: (&[f64], &[f64]),
    (batch, b_batched): (usize, bool),
    dims: (usize, usize, usize),
    options: MatmulOptions,
    u: f64,
    what: &str,
) {
    let batches = (batch, true, b_batched);
    check_matmul_batched(operands, values, batches, dims, options, u, what);
}

/// [`check_matmul`] where A too may be broadcast over the batch (see
/// [`reference_batched`]).
pub fn check_matmul_batched(
    (a, b, bias): (
        &DeviceTensor,
        &DeviceTensor,
        Option<(&DeviceTensor, &[f64])>,
    ),
    (va, vb): (&[f64], &[f64]),
    batches: (usize, bool, bool),
    dims: (usize, usize, usize),
    options: MatmulOptions,
    u: f64,
    what: &str,
) {
    let shape = Ops::matmul_shape(a.desc(), b.desc(), options).unwrap();
    let bias_tensor = bias.map(|(t, _)| t);
    let mut inputs = vec![a, b];
    inputs.extend(bias_tensor);
    let got = super::run(
        &inputs,
        TensorDesc::new(DType::F32, shape).unwrap(),
        |g, out| super::ops().record_matmul(g, a, b, bias_tensor, options, out),
    )
    .unwrap();
    let (want, tol) = reference_batched(
        (va, vb, bias.map(|(_, v)| v)),
        batches,
        dims,
        options.activation,
        u,
    );
    assert_within(&got, &want, &tol, what);
}
