//! `record_encoder_attention` against an f64 reference: MiniLM's shape (12
//! heads of 32 over 128 tokens), heads of 4, 64 and 128, sequences
//! shorter than a workgroup and spanning several key blocks, a padding
//! mask (about a fifth of the keys at -10000) with one sequence fully
//! masked, a scale, f32 and f16 outputs; and its refusals, which record
//! nothing.
//!
//! Tolerance per output value, for a query over n keys (u = 2^-24): each
//! score's f32 error is at most (head + 4)u of the sum of |scale q k|
//! terms plus the rounding of adding the bias (|score| u: in a fully
//! masked sequence, about 6e-4 at -10000), which moves a probability by
//! about twice that, relative; the
//! online softmax's exponentials, rescalings and sums add (16 + 2R + n)u
//! relative, R the largest |score - max| of a key with any weight. The
//! output moves by that relative error times the probability-weighted sum
//! of |v|, plus its own roundings; f16 outputs add 2^-11 relative and
//! 2^-25 absolute. A wrong head, key row, value column, sequence or mask
//! exceeds it by orders of magnitude.
//!
//! f16 projections (their values f16-exact here) on a device with tensor
//! cores run the products there, the probabilities rounded to f16. The
//! tensor-core tolerance adds 2^-10 of the sum of |scale q k| terms to
//! each score's error (the products' accumulation) and 2^-11 of the
//! probability-weighted sum of |v| twice to each output; elsewhere f16
//! projections are widened to f32 and run as f32 ones.

use crate::common::matmul::{f16_round, f32_round};
use crate::common::*;
use hrx_core::Error;
use hrx_runtime::Operation;
use hrx_tensor::ops::{EncoderBlock, Tuning};
use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc};

const U: f64 = 1.0 / (1u64 << 24) as f64;
const MASKED: f64 = -10_000.0;

fn has_f16() -> bool {
    let target = ops().runtime().gpu().unwrap().target().clone();
    target.shader_f16 && target.storage_16bit
}

struct Case {
    batch: usize,
    seq: usize,
    heads: usize,
    head: usize,
    scale: f64,
}

impl Case {
    fn width(&self) -> usize {
        self.heads * self.head
    }

    /// qkv values in [-1, 1] (exact in `input`) and the key bias: about a
    /// fifth of the keys masked, sequence 1 (when there is one) all
    /// masked, the others in [-2, 2].
    fn inputs(&self, input: DType, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let mut g = Gen::new(seed);
        let exact = |v: f64| match input {
            DType::F16 => f16_round(v),
            _ => f32_round(v),
        };
        let qkv = (0..self.batch * self.seq * 3 * self.width())
            .map(|_| exact(g.uniform(-1.0, 1.0)))
            .collect();
        let bias = (0..self.batch * self.seq)
            .map(|i| {
                if i / self.seq == 1 || g.below(5) == 0 {
                    MASKED
                } else {
                    f64::from(g.uniform(-2.0, 2.0) as f32)
                }
            })
            .collect();
        (qkv, bias)
    }

    /// (outputs, tolerances), `[batch, seq, width]`; `tensor_cores`: the
    /// tolerance of f16 operands (see the module documentation).
    fn reference(
        &self,
        qkv: &[f64],
        bias: &[f64],
        out: DType,
        tensor_cores: bool,
    ) -> (Vec<f64>, Vec<f64>) {
        let half_u = if tensor_cores { 1.0 / 2048.0 } else { 0.0 };
        let (s, w, dh) = (self.seq, self.width(), self.head);
        let scale = f64::from(self.scale as f32);
        let at =
            |b: usize, i: usize, part: usize, h: usize| (b * s + i) * 3 * w + part * w + h * dh;
        let (mut want, mut tol) = (vec![0.0; self.batch * s * w], vec![0.0; self.batch * s * w]);
        for b in 0..self.batch {
            for h in 0..self.heads {
                for i in 0..s {
                    let q = &qkv[at(b, i, 0, h)..][..dh];
                    let scores: Vec<(f64, f64)> = (0..s)
                        .map(|j| {
                            let k = &qkv[at(b, j, 1, h)..][..dh];
                            let dot: f64 = q.iter().zip(k).map(|(x, y)| x * y).sum();
                            let mag: f64 = q.iter().zip(k).map(|(x, y)| (x * y).abs()).sum();
                            let bj = f64::from(bias[b * s + j] as f32);
                            let x = scale * dot + bj;
                            let rounding = (dh as f64 + 4.0) * U + 2.0 * half_u;
                            (x, rounding * scale.abs() * mag + x.abs() * U)
                        })
                        .collect();
                    let max = scores.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|p| (p.0 - max).exp()).collect();
                    let sum: f64 = weights.iter().sum();
                    let (mut range, mut score_err) = (0.0f64, 0.0f64);
                    for ((x, e), wgt) in scores.iter().zip(&weights) {
                        if *wgt / sum > 1e-30 {
                            range = range.max(max - x);
                            score_err = score_err.max(*e);
                        }
                    }
                    let relative = 4.0 * score_err + (16.0 + 2.0 * range + s as f64) * U;
                    for c in 0..dh {
                        let (mut o, mut mass) = (0.0, 0.0);
                        for (j, wgt) in weights.iter().enumerate() {
                            let v = qkv[at(b, j, 2, h) + c];
                            o += wgt / sum * v;
                            mass += wgt / sum * v.abs();
                        }
                        let mut t = (2.0 * relative + 2.0 * half_u) * mass + 4.0 * U * o.abs();
                        if out == DType::F16 {
                            t += o.abs() / 2048.0 + 1.0 / (1u64 << 25) as f64;
                        }
                        let idx = (b * s + i) * w + h * dh + c;
                        want[idx] = o;
                        tol[idx] = t;
                    }
                }
            }
        }
        (want, tol)
    }

    fn check(&self, out_dtype: DType, seed: u64) {
        self.check_with(DType::F32, out_dtype, seed);
    }

    /// `input` projections to `out_dtype` contexts; f16 projections with
    /// the tensor-core tolerance.
    fn check_with(&self, input: DType, out_dtype: DType, seed: u64) {
        self.check_on(&ops(), input, out_dtype, seed);
    }

    /// [`Case::check_with`] on `ops`; the entry point and the workgroup
    /// size of the kernel that ran.
    fn check_on(&self, ops: &Ops, input: DType, out_dtype: DType, seed: u64) -> (String, u32) {
        let rt = ops.runtime().clone();
        let tensor_cores = input == DType::F16;
        let (qkv_v, bias_v) = self.inputs(input, seed);
        let (b, s, w) = (self.batch, self.seq, self.width());
        let qkv = DeviceTensor::from_values(&rt, input, vec![b, s, 3 * w], &qkv_v).unwrap();
        let bias = DeviceTensor::from_values(&rt, DType::F32, vec![b, s], &bias_v).unwrap();
        let mut out = ops
            .output(TensorDesc::new(out_dtype, vec![b, s, w]).unwrap())
            .unwrap();
        let mut graph = rt.graph();
        ops.record_encoder_attention(&mut graph, &qkv, &bias, self.heads, self.scale as f32, &out)
            .unwrap();
        let ran = match graph.operations().next() {
            Some(Operation::Dispatch { kernel, .. }) => {
                let contract = kernel.contract();
                (contract.entry_point.clone(), contract.workgroup_size[0])
            }
            other => panic!("expected one dispatch, recorded {other:?}"),
        };
        let deps = [&qkv, &bias, &out].map(|t| t.completion().clone());
        out.set_producer(graph.prepare().unwrap().submit_after(&deps).unwrap());
        let got = out.to_values().unwrap();
        let (want, tol) = self.reference(&qkv_v, &bias_v, out_dtype, tensor_cores);
        for (i, ((g, x), t)) in got.iter().zip(&want).zip(&tol).enumerate() {
            assert!(
                (g - x).abs() <= *t,
                "{input} [{b}, {s}, {} x {}] -> {out_dtype}: value {i} (sequence {}, token {}, \
                 column {}) is {g}, expected {x} +- {t}",
                self.heads,
                self.head,
                i / (s * w),
                i / w % s,
                i % w
            );
        }
        ran
    }
}

#[test]
fn minilm_shaped_attention_with_a_padding_mask() {
    let case = Case {
        batch: 2,
        seq: 128,
        heads: 12,
        head: 32,
        scale: 1.0,
    };
    case.check(DType::F32, 1);
}

/// `(batch, seq, heads, head, scale)` cases checked in turn, the i-th with
/// seed `first_seed + i`.
fn check_cases(
    cases: &[(usize, usize, usize, usize, f64)],
    input: DType,
    out: DType,
    first_seed: u64,
) {
    check_cases_on(&ops(), cases, input, out, first_seed);
}

/// [`check_cases`] on `ops`; the entry point and workgroup size of the
/// kernel each case ran.
fn check_cases_on(
    ops: &Ops,
    cases: &[(usize, usize, usize, usize, f64)],
    input: DType,
    out: DType,
    first_seed: u64,
) -> Vec<(String, u32)> {
    cases
        .iter()
        .enumerate()
        .map(|(i, &(batch, seq, heads, head, scale))| {
            let case = Case {
                batch,
                seq,
                heads,
                head,
                scale,
            };
            case.check_on(ops, input, out, first_seed + i as u64)
        })
        .collect()
}

/// The tiled kernel (a block's scores in workgroup memory), forced on:
/// heads of 4, 32 and 64, sequences of 5 to 96 tokens (96 is the longest
/// a CPU device's 32 KiB of workgroup memory holds for heads of 32), a
/// partial block of queries, keys padded past the sequence, f16 outputs
/// and projections.
#[test]
fn the_tiled_kernel_matches_the_reference() {
    let tiled = ops().with_tuning(Tuning {
        encoder_tiles: Some(true),
        ..ops().tuning()
    });
    let cases = [
        (3, 5, 2, 4, 0.5),
        (2, 37, 3, 32, 0.25),
        (2, 64, 2, 32, 1.0),
        (1, 20, 1, 64, 0.125),
        (2, 96, 1, 32, 0.5),
    ];
    let mut runs = vec![(DType::F32, DType::F32)];
    if has_f16() {
        runs.extend([(DType::F32, DType::F16), (DType::F16, DType::F32)]);
    }
    for (r, &(input, out)) in runs.iter().enumerate() {
        let first_seed = 70 + (r * cases.len()) as u64;
        let ran = check_cases_on(&tiled, &cases, input, out, first_seed);
        for ((entry, _), case) in ran.iter().zip(&cases) {
            assert_eq!(
                entry, "encoder_attention_tiled",
                "{case:?} {input} -> {out} ran another kernel"
            );
        }
    }
}

/// The online-softmax kernel with blocks a tuning forces (one and two
/// queries a work item, blocks shorter than the sequence, so keys are
/// staged several times, and longer), each fitting a CPU device's 32 KiB
/// of workgroup memory with heads of 64.
#[test]
fn forced_blocks_match_the_reference() {
    let cases = [
        (2, 37, 3, 32, 0.25),
        (1, 70, 2, 64, 0.125),
        (3, 5, 2, 4, 0.5),
    ];
    let blocks = [(16, 1, 1), (32, 2, 1), (32, 1, 1), (48, 2, 1)];
    check_forced_blocks(&blocks, &cases, 90);
}

/// Split heads: two or four neighbouring lanes share a work item's
/// queries, each holding part of their values and summing the dot
/// products by subgroup shuffles; sequences that end inside a block and
/// blocks that stage the keys several times.
#[test]
fn split_heads_match_the_reference() {
    let cases = [(2, 37, 3, 32, 0.25), (1, 70, 2, 64, 0.125)];
    let blocks = [(32, 2, 2), (32, 4, 2), (32, 4, 4), (64, 2, 2)];
    check_forced_blocks(&blocks, &cases, 130);
}

/// Each `(keys, per_item, split)` block forced on the online-softmax
/// kernel over `cases`, against the reference; where the block fits a
/// CPU device's 32 KiB of workgroup memory (else the built-in block runs)
/// it launches its `keys / per_item * split` work items.
fn check_forced_blocks(
    blocks: &[(usize, usize, usize)],
    cases: &[(usize, usize, usize, usize, f64)],
    first_seed: u64,
) {
    for (i, &(keys, per_item, split)) in blocks.iter().enumerate() {
        let block = EncoderBlock::new(keys, per_item, split).unwrap();
        let tuned = ops().with_tuning(Tuning {
            encoder_block: Some(block),
            encoder_tiles: Some(false),
            ..ops().tuning()
        });
        let seed = first_seed + (i * cases.len()) as u64;
        for ((entry, wg), case) in check_cases_on(&tuned, cases, DType::F32, DType::F32, seed)
            .iter()
            .zip(cases)
        {
            assert_eq!(entry, "encoder_attention", "{case:?}");
            if keys * (2 * case.3 + 1) * 4 <= 32 << 10 {
                assert_eq!(
                    *wg as usize,
                    keys / per_item * split,
                    "{case:?} with {block:?}"
                );
            }
        }
    }
}

#[test]
fn heads_of_4_64_and_128_over_short_and_long_sequences() {
    let cases = [
        (3, 5, 2, 4, 0.5),
        (1, 37, 1, 64, 0.125),
        (2, 70, 2, 64, 0.125),
        (1, 20, 1, 128, 0.0884),
    ];
    check_cases(&cases, DType::F32, DType::F32, 10);
}

/// f16 projections in the shapes the tensor-core kernel takes (heads a
/// multiple of 16, sequences a multiple of 16 whose scores fit workgroup
/// memory: MiniLM's, every bucket, heads of 16 and 64), to f16 and f32
/// contexts, with its tolerance; where the device has no tensor cores the
/// f32 kernel runs them, well within it.
#[test]
fn f16_projections_in_tensor_core_shapes() {
    if !has_f16() {
        eprintln!("skipped: the device lacks f16 arithmetic or 16-bit storage");
        return;
    }
    let cases = [
        (2, 128, 12, 32, 1.0),
        (3, 16, 2, 32, 0.5),
        (2, 32, 2, 32, 0.25),
        (2, 64, 3, 16, 0.25),
        (2, 64, 2, 64, 0.125),
        (2, 256, 2, 32, 0.5),
        (1, 48, 2, 32, 0.5),
    ];
    check_cases(&cases, DType::F16, DType::F16, 30);
    check_cases(&cases[..2], DType::F16, DType::F32, 40);
}

/// f16 projections the tensor-core kernel does not take (heads of 8, a
/// sequence of 40), widened to f32 by the other kernel.
#[test]
fn f16_projections_elsewhere() {
    if !has_f16() {
        eprintln!("skipped: the device lacks f16 arithmetic or 16-bit storage");
        return;
    }
    let cases = [(2, 40, 3, 32, 0.25), (2, 16, 2, 8, 0.5)];
    check_cases(&cases, DType::F16, DType::F16, 50);
    check_cases(&cases, DType::F16, DType::F32, 60);
}

#[test]
fn f16_contexts() {
    if !has_f16() {
        eprintln!("skipped: the device lacks f16 arithmetic or 16-bit storage");
        return;
    }
    let case = Case {
        batch: 3,
        seq: 40,
        heads: 3,
        head: 32,
        scale: 0.25,
    };
    case.check(DType::F16, 20);
}

#[test]
fn refusals_record_nothing() {
    let rt = ops().runtime().clone();
    let zeros = |dtype, shape: &[usize]| {
        let n = shape.iter().product();
        DeviceTensor::from_values(&rt, dtype, shape.to_vec(), &vec![0.0; n]).unwrap()
    };
    let qkv = zeros(DType::F32, &[2, 4, 24]);
    let bias = zeros(DType::F32, &[2, 4]);
    let out = zeros(DType::F32, &[2, 4, 8]);
    let odd_heads = zeros(DType::F32, &[2, 4, 18]);
    let odd_out = zeros(DType::F32, &[2, 4, 6]);
    let big = zeros(DType::F32, &[1, 2, 3 * 256]);
    let big_bias = zeros(DType::F32, &[1, 2]);
    let big_out = zeros(DType::F32, &[1, 2, 256]);
    let strided = hrx_tensor::Ops::permuted(&zeros(DType::F32, &[4, 2, 24]), &[1, 0, 2]).unwrap();
    let ints = zeros(DType::I32, &[2, 4, 8]);
    let int_qkv = zeros(DType::I32, &[2, 4, 24]);
    let inside = qkv
        .reshape(vec![24, 8])
        .and_then(|t| t.slice(0, 0..8))
        .and_then(|t| t.reshape(vec![2, 4, 8]))
        .unwrap();
    let cases: Vec<(
        &str,
        &DeviceTensor,
        &DeviceTensor,
        usize,
        f32,
        &DeviceTensor,
        bool,
    )> = vec![
        (
            "heads of 3 values",
            &odd_heads,
            &bias,
            2,
            1.0,
            &odd_out,
            true,
        ),
        ("a head of 256", &big, &big_bias, 1, 1.0, &big_out, true),
        ("strided qkv", &strided, &bias, 2, 1.0, &out, true),
        ("an i32 output", &qkv, &bias, 2, 1.0, &ints, true),
        ("i32 projections", &int_qkv, &bias, 2, 1.0, &out, true),
        ("a bias of the wrong shape", &qkv, &out, 2, 1.0, &out, false),
        (
            "heads that do not divide the width",
            &qkv,
            &bias,
            3,
            1.0,
            &out,
            false,
        ),
        ("no heads", &qkv, &bias, 0, 1.0, &out, false),
        ("a NaN scale", &qkv, &bias, 2, f32::NAN, &out, false),
        (
            "an output of the wrong shape",
            &qkv,
            &bias,
            2,
            1.0,
            &bias,
            false,
        ),
        ("an output inside qkv", &qkv, &bias, 2, 1.0, &inside, false),
    ];
    for (what, q, b, heads, scale, o, unsupported) in cases {
        let mut graph = rt.graph();
        let e = ops()
            .record_encoder_attention(&mut graph, q, b, heads, scale, o)
            .expect_err(what);
        assert!(
            e.to_string().contains("encoder attention of"),
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
