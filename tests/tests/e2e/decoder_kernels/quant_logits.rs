//! The one-dispatch output head (`record_quant_logits`): the picked rows
//! of x, RMS-normalised, projected by a quantised matrix, against an f64
//! reference; each pick's index against the first maximum of the logits
//! it returned (exact); ties across workgroups, NaN and -inf logits; a
//! replay of the prepared graph; and the refusals.

use super::quant::{FORMATS, Gen, check_product, f32s, i32s, matrix, ops, refused, x_tensor};
use hrx_tensor::ops::{QUANT_LOGITS_MAX_PICKS, QuantFormat, QuantMatrix, RowNorm};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const EPS: f64 = 1e-5;

/// An F32 "quantised" matrix holding `values` (`[rows, cols]`).
fn f32_matrix(values: &[f32], rows: usize, cols: usize) -> QuantMatrix {
    let words: Vec<f64> = values.iter().map(|v| f64::from(v.to_bits())).collect();
    let words =
        DeviceTensor::from_values(ops().runtime(), DType::U32, vec![words.len()], &words).unwrap();
    QuantMatrix::new(QuantFormat::F32, rows, cols, words).unwrap()
}

/// The head's logits and indices, from `replays` submissions of one
/// prepared graph (each must give the same).
fn head(
    x: &DeviceTensor,
    picks: &DeviceTensor,
    gain: &DeviceTensor,
    w: &QuantMatrix,
    replays: usize,
) -> Result<(Vec<f64>, Vec<i64>)> {
    let ops = ops();
    let p = picks.desc().shape()[0];
    let mut logits = ops.output(TensorDesc::new(DType::F32, vec![p, w.rows()])?)?;
    let mut next = ops.output(TensorDesc::new(DType::I32, vec![p])?)?;
    let mut graph = ops.runtime().graph();
    let norm = RowNorm {
        weight: gain,
        eps: EPS as f32,
    };
    ops.record_quant_logits(&mut graph, x, picks, norm, w, &logits, &next)?;
    let graph = graph.prepare()?;
    let inputs = [x, picks, gain, w.words()].map(|t| t.completion().clone());
    let mut seen: Option<(Vec<f64>, Vec<i64>)> = None;
    for _ in 0..replays {
        let done = graph.submit_after(&inputs)?;
        logits.set_producer(done.clone());
        next.set_producer(done);
        let run = (
            logits.to_values()?,
            next.to_values()?.iter().map(|&v| v as i64).collect(),
        );
        if let Some(first) = &seen {
            assert_eq!(first, &run, "a replay gave other results");
        }
        seen = Some(run);
    }
    Ok(seen.expect("at least one replay"))
}

/// The first index of the largest value (NaN never wins), 0 if none
/// beats -inf.
fn first_max(row: &[f64]) -> i64 {
    let mut best = (f64::NEG_INFINITY, 0);
    for (j, &v) in row.iter().enumerate() {
        if v > best.0 {
            best = (v, j as i64);
        }
    }
    best.1
}

/// Every format, a vocabulary that is not a whole number of workgroups, a
/// partial span, x aligned and not; picks in any order, repeated and
/// outside x (a row of zeros).
#[test]
fn head_matches_reference_and_indexes_its_own_maximum() -> Result<()> {
    let mut rng = Gen::new(21);
    let shapes = [(1000, 576), (4133, 64), (300, 37), (129, 16)];
    for (format, (rows, cols)) in FORMATS.into_iter().rev().zip(shapes) {
        let (w, wv) = matrix(format, rows, cols, &mut rng);
        let gain: Vec<f64> = (0..cols)
            .map(|_| f64::from(rng.uniform(0.5, 1.5) as f32))
            .collect();
        let gain_t = f32s(&gain, vec![cols]);
        let m = 5;
        let mut x: Vec<f64> = (0..m * cols)
            .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        for (r, row) in x.chunks_mut(cols).enumerate() {
            row.iter_mut().for_each(|v| *v *= f64::from(1 << r));
        }
        let picks_sets: [&[i32]; 4] = [&[3], &[0, 4], &[4, 1, 7], &[2, -1, 2, 0]];
        for (i, picks) in picks_sets.into_iter().enumerate() {
            let what = format!("{format:?} {rows}x{cols} picks {picks:?}");
            let xt = x_tensor(&x, m, cols, i % 2 == 1);
            let (logits, next) = head(&xt, &i32s(picks), &gain_t, &w, 2)?;
            for (r, &pick) in picks.iter().enumerate() {
                let got = &logits[r * rows..(r + 1) * rows];
                assert_eq!(next[r], first_max(got), "{what}: index of pick {r}");
                if !(0..m as i32).contains(&pick) {
                    assert!(got.iter().all(|&v| v == 0.0), "{what}: pick {pick}");
                    continue;
                }
                let p = pick as usize;
                let row = &x[p * cols..(p + 1) * cols];
                let mean = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
                let scale = 1.0 / (mean + EPS).sqrt();
                let y: Vec<f64> = row.iter().zip(&gain).map(|(v, g)| v * g * scale).collect();
                check_product(&what, got, (&y, &wv), (1, rows, cols), 1);
            }
        }
    }
    Ok(())
}

/// Equal largest logits in different workgroups give the first column;
/// NaN logits never win; a row of -inf (and NaN) logits gives 0.
#[test]
fn head_argmax_keeps_the_contract() -> Result<()> {
    let (rows, cols) = (700, 16);
    let x = f32s(&[1.0; 16], vec![1, cols]);
    let gain = f32s(&[1.0; 16], vec![cols]);
    let picks = i32s(&[0]);
    // x normalises to ones: each logit is its row's sum.
    let mut values = vec![0.0f32; rows * cols];
    for (j, row) in values.chunks_mut(cols).enumerate() {
        row[0] = (j % 7) as f32 * 0.125;
    }
    values[cols * 3] = f32::NAN;
    for j in [130, 650] {
        values[cols * j] = 5.0;
    }
    let (_, next) = head(&x, &picks, &gain, &f32_matrix(&values, rows, cols), 1)?;
    assert_eq!(next, [130]);

    let mut values = vec![f32::NEG_INFINITY; rows * cols];
    values[cols * 77] = f32::NAN;
    let (logits, next) = head(&x, &picks, &gain, &f32_matrix(&values, rows, cols), 1)?;
    assert!(logits[0] == f64::NEG_INFINITY && logits[77].is_nan());
    assert_eq!(next, [0]);
    Ok(())
}

/// The head over `x`, `picks` and `gain` into `logits` must fail naming
/// `want` and record nothing.
fn refuses(
    want: &str,
    (x, picks, gain): (&DeviceTensor, &DeviceTensor, &DeviceTensor),
    w: &QuantMatrix,
    (logits, next): (&DeviceTensor, &DeviceTensor),
) {
    let norm = RowNorm {
        weight: gain,
        eps: 1e-5,
    };
    refused(want, |g| {
        ops().record_quant_logits(g, x, picks, norm, w, logits, next)
    });
}

#[test]
fn head_refuses_bad_operands() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(5);
    let (w, _) = matrix(QuantFormat::Q8_0, 100, 64, &mut rng);
    let x = f32s(&[0.5; 128], vec![2, 64]);
    let gain = f32s(&[1.0; 64], vec![64]);
    let out = |shape: Vec<usize>, dtype| ops.output(TensorDesc::new(dtype, shape)?);
    let (logits, next) = (out(vec![1, 100], DType::F32)?, out(vec![1], DType::I32)?);
    let outputs = (&logits, &next);
    let one = i32s(&[0]);
    let many = i32s(&[0; QUANT_LOGITS_MAX_PICKS + 1]);
    refuses("from 1 to", (&x, &many, &gain), &w, outputs);
    let none = i32s(&[]);
    refuses("from 1 to", (&x, &none, &gain), &w, outputs);
    let short = f32s(&[0.5; 64], vec![2, 32]);
    refuses("x must be f32", (&short, &one, &gain), &w, outputs);
    let floats = f32s(&[0.0], vec![1]);
    refuses("picks must be", (&x, &floats, &gain), &w, outputs);
    refuses("norm weight", (&x, &one, &floats), &w, outputs);
    let wide = out(vec![1, 99], DType::F32)?;
    refuses("output", (&x, &one, &gain), &w, (&wide, &next));
    let ids = out(vec![2], DType::I32)?;
    refuses("output", (&x, &one, &gain), &w, (&logits, &ids));
    // Logits written over x.
    let big = out(vec![1, 100], DType::F32)?;
    let inside = big.view(0, TensorDesc::new(DType::F32, vec![1, 64])?)?;
    refuses(
        "must not overlap",
        (&inside, &one, &gain),
        &w,
        (&big, &next),
    );
    Ok(())
}
