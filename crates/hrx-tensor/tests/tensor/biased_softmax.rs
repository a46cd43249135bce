//! `record_biased_softmax` against an f64 reference: attention-shaped
//! scores with a per-key bias (padding masked at -10000, a sequence fully
//! masked), rows shorter and longer than a subgroup, more rows than one
//! launch's workgroups (the grid-stride loop), f32 and f16 outputs; and
//! its refusals, which record nothing.
//!
//! Tolerance per element, for a row of n keys with `d = x - max` (x the
//! f32 sum of score and bias, as the kernel forms it; u = 2^-24): the
//! element's exponential within (3 + 2|d|)u (Vulkan's exp bound), the
//! row's sum within (3 + n)u (each summand's error is at most 3u of the
//! largest term's scale, as (3 + 2|d|) e^d <= 3 for d <= 0), the online
//! rescaling, the reciprocal and the product a few u more: twice
//! (12 + 2|d| + n)u relative, plus f16's rounding (2^-11 relative, 2^-25
//! absolute) for an f16 output. A masked key's probability must be 0.
//! A wrong bias row, a bias not added, a dropped quad or an unwritten
//! (poisoned) output exceed it by orders of magnitude.

use crate::common::*;
use hrx_core::Error;
use hrx_tensor::{DType, DeviceTensor, TensorDesc};

const U: f64 = 1.0 / (1u64 << 24) as f64;
const MASKED: f64 = -10_000.0;

fn has_f16() -> bool {
    let target = ops().runtime().gpu().unwrap().target().clone();
    target.shader_f16 && target.storage_16bit
}

/// Scores in [-8, 8] and a bias in [-3, 3] with about a fifth of the keys
/// masked; batch element 1 (when there is one) has every key masked.
fn inputs(shape: &[usize], seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut g = Gen::new(seed);
    let (lead, cols) = (shape[0], shape[shape.len() - 1]);
    let scores = (0..shape.iter().product::<usize>())
        .map(|_| f64::from(g.uniform(-8.0, 8.0) as f32))
        .collect();
    let bias = (0..lead * cols)
        .map(|i| {
            if i / cols == 1 || g.below(5) == 0 {
                MASKED
            } else {
                f64::from(g.uniform(-3.0, 3.0) as f32)
            }
        })
        .collect();
    (scores, bias)
}

/// (probabilities, tolerances) in f64 of the f32 sums.
fn reference(shape: &[usize], scores: &[f64], bias: &[f64], out: DType) -> (Vec<f64>, Vec<f64>) {
    let cols = shape[shape.len() - 1];
    let per_bias = scores.len() / cols / shape[0];
    let (mut want, mut tol) = (Vec::new(), Vec::new());
    for (r, row) in scores.chunks(cols).enumerate() {
        let b = &bias[(r / per_bias) * cols..][..cols];
        let x: Vec<f64> = row
            .iter()
            .zip(b)
            .map(|(s, b)| f64::from(*s as f32 + *b as f32))
            .collect();
        let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
        for v in &x {
            let d = v - max;
            let p = d.exp() / sum;
            let mut t = p * 2.0 * (12.0 + 2.0 * d.abs() + cols as f64) * U;
            if out == DType::F16 {
                t += p / 2048.0 + 1.0 / (1u64 << 25) as f64;
            }
            want.push(p);
            tol.push(t);
        }
    }
    (want, tol)
}

fn check(shape: &[usize], out_dtype: DType, seed: u64) {
    let rt = ops().runtime().clone();
    let (lead, cols) = (shape[0], shape[shape.len() - 1]);
    let (scores, bias) = inputs(shape, seed);
    let a = DeviceTensor::from_values(&rt, DType::F32, shape.to_vec(), &scores).unwrap();
    let b = DeviceTensor::from_values(&rt, DType::F32, vec![lead, cols], &bias).unwrap();
    let mut out = ops()
        .output(TensorDesc::new(out_dtype, shape.to_vec()).unwrap())
        .unwrap();
    let mut graph = rt.graph();
    ops()
        .record_biased_softmax(&mut graph, &a, &b, &out)
        .unwrap();
    let deps = [&a, &b, &out].map(|t| t.completion().clone());
    out.set_producer(graph.prepare().unwrap().submit_after(&deps).unwrap());
    let got = out.to_values().unwrap();
    let (want, tol) = reference(shape, &scores, &bias, out_dtype);
    for (i, ((g, w), t)) in got.iter().zip(&want).zip(&tol).enumerate() {
        assert!(
            (g - w).abs() <= *t,
            "{shape:?} -> {out_dtype}: element {i} (row {}, key {}) is {g}, expected {w} +- {t}",
            i / cols,
            i % cols
        );
    }
}

#[test]
fn attention_scores_with_a_key_mask() {
    check(&[3, 4, 6, 128], DType::F32, 1);
    check(&[2, 12, 16, 16], DType::F32, 2);
}

#[test]
fn rows_shorter_and_longer_than_a_subgroup() {
    for (i, shape) in [vec![1, 4], vec![3, 8], vec![2, 5, 36], vec![2, 3, 1, 1028]]
        .iter()
        .enumerate()
    {
        check(shape, DType::F32, 10 + i as u64);
    }
}

#[test]
fn more_rows_than_one_launch_has_workgroups() {
    // 70,000 rows: more than the 65,535 workgroups a launch takes on any
    // device, so rows are reached by the grid-stride loop.
    check(&[2, 35_000, 4], DType::F32, 20);
}

#[test]
fn f16_probabilities() {
    if !has_f16() {
        eprintln!("skipped: the device lacks f16 arithmetic or 16-bit storage");
        return;
    }
    check(&[3, 4, 6, 128], DType::F16, 30);
    check(&[2, 5, 36], DType::F16, 31);
}

#[test]
fn refusals_record_nothing() {
    let rt = ops().runtime().clone();
    let zeros = |dtype, shape: &[usize]| {
        let n = shape.iter().product();
        DeviceTensor::from_values(&rt, dtype, shape.to_vec(), &vec![0.0; n]).unwrap()
    };
    let scores = zeros(DType::F32, &[2, 3, 8]);
    let bias = zeros(DType::F32, &[2, 8]);
    let out = zeros(DType::F32, &[2, 3, 8]);
    let transposed = hrx_tensor::Ops::permuted(&scores, &[0, 2, 1]).unwrap();
    let odd = zeros(DType::F32, &[2, 3, 6]);
    let odd_bias = zeros(DType::F32, &[2, 6]);
    let odd_out = zeros(DType::F32, &[2, 3, 6]);
    let out_t = zeros(DType::F32, &[2, 8, 3]);
    let bias_t = zeros(DType::F32, &[2, 3]);
    let ints = zeros(DType::I32, &[2, 3, 8]);
    let cases: Vec<(&str, &DeviceTensor, &DeviceTensor, &DeviceTensor, bool)> = vec![
        (
            "a strided scores tensor",
            &transposed,
            &bias_t,
            &out_t,
            true,
        ),
        ("rows not a multiple of 4", &odd, &odd_bias, &odd_out, true),
        ("a bias of the wrong shape", &scores, &bias_t, &out, false),
        ("an i32 output", &scores, &bias, &ints, true),
        (
            "an output that is the scores",
            &scores,
            &bias,
            &scores,
            false,
        ),
        ("i32 scores", &ints, &bias, &out, true),
    ];
    for (what, a, b, o, unsupported) in cases {
        let mut graph = rt.graph();
        let e = ops()
            .record_biased_softmax(&mut graph, a, b, o)
            .expect_err(what);
        assert!(
            e.to_string().contains("biased softmax of"),
            "{what}: the error names the operation: {e}"
        );
        assert_eq!(
            matches!(e, Error::Unsupported(_)),
            unsupported,
            "{what}: {e:?}"
        );
        assert!(graph.is_empty(), "{what}: recorded work");
    }
}
