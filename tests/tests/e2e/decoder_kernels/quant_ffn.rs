//! The one-dispatch feed-forward block (`record_quant_ffn`) against an
//! f64 reference (norm, gate-and-up, SwiGLU, down, residual): every
//! format pairing, 1 to 4 rows, a gate width that is not a whole number of
//! workgroups, x aligned and not, the residual being x itself; a replay
//! of the prepared graph; and the refusals.

use super::quant::{FORMATS, Gen, f32s, matrix, ops, random, refused, x_tensor};
use hrx_tensor::ops::{FeedForward, QUANT_FFN_MAX_ROWS, QuantFormat, QuantMatrix, RowNorm};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const EPS: f64 = 1e-5;

/// The block's output from `replays` submissions of one prepared graph
/// (each must give the same bits).
fn run(
    x: &DeviceTensor,
    block: FeedForward,
    residual: &DeviceTensor,
    replays: usize,
) -> Result<Vec<f64>> {
    let ops = ops();
    let mut out = ops.output(x.desc().clone())?;
    let mut graph = ops.runtime().graph();
    ops.record_quant_ffn(&mut graph, x, block, residual, &out)?;
    let graph = graph.prepare()?;
    let inputs = [
        x,
        residual,
        block.norm.weight,
        block.gate_up.words(),
        block.down.words(),
    ]
    .map(|t| t.completion().clone());
    let mut seen: Option<Vec<f64>> = None;
    for _ in 0..replays {
        out.set_producer(graph.submit_after(&inputs)?);
        let values = out.to_values()?;
        if let Some(first) = &seen {
            assert_eq!(first, &values, "a replay gave other results");
        }
        seen = Some(values);
    }
    Ok(seen.expect("at least one replay"))
}

/// `a[i] . b[j]` and the sum of the terms' magnitudes.
fn dot(a: &[f64], b: &[f64]) -> (f64, f64) {
    a.iter()
        .zip(b)
        .fold((0.0, 0.0), |(s, m), (x, y)| (s + x * y, m + (x * y).abs()))
}

#[test]
fn block_matches_reference() -> Result<()> {
    let mut rng = Gen::new(31);
    // (gate-and-up format, down format, width, gate width)
    let cases = [
        (QuantFormat::Q4_1, QuantFormat::Q4_1, 576, 1536),
        (QuantFormat::Q8_0, QuantFormat::Q4_1, 64, 96),
        (QuantFormat::F16, QuantFormat::F32, 40, 40),
        (QuantFormat::F32, QuantFormat::F16, 16, 72),
    ];
    assert!(
        FORMATS
            .iter()
            .all(|f| cases.iter().any(|c| c.0 == *f || c.1 == *f))
    );
    for (i, (gu_format, down_format, width, f)) in cases.into_iter().enumerate() {
        let (gate_up, gu) = matrix(gu_format, 2 * f, width, &mut rng);
        let (down, dw) = matrix(down_format, width, f, &mut rng);
        let gain = random(&mut rng, width, 0.5, 1.5);
        let gain_t = f32s(&gain, vec![width]);
        let block = FeedForward {
            norm: RowNorm {
                weight: &gain_t,
                eps: EPS as f32,
            },
            gate_up: &gate_up,
            down: &down,
        };
        for m in 1..=QUANT_FFN_MAX_ROWS {
            let what = format!("{gu_format:?}/{down_format:?} {width}x{f} m={m}");
            let mut x = random(&mut rng, m * width, -1.0, 1.0);
            for (r, row) in x.chunks_mut(width).enumerate() {
                row.iter_mut().for_each(|v| *v *= f64::from(1 << r));
            }
            let xt = x_tensor(&x, m, width, (i + m) % 2 == 1);
            // The residual is x itself for odd m.
            let (residual, residual_t) = match m % 2 {
                1 => (x.clone(), xt.clone()),
                _ => {
                    let r = random(&mut rng, m * width, -4.0, 4.0);
                    let t = f32s(&r, vec![m, width]);
                    (r, t)
                }
            };
            let got = run(&xt, block, &residual_t, 2)?;
            for r in 0..m {
                let row = &x[r * width..(r + 1) * width];
                let mean = row.iter().map(|v| v * v).sum::<f64>() / width as f64;
                let scale = 1.0 / (mean + EPS).sqrt();
                let y: Vec<f64> = row.iter().zip(&gain).map(|(v, g)| v * g * scale).collect();
                // Each gate value with a bound on its error: the products'
                // rounding (1e-5 of the magnitudes) carried through SwiGLU
                // by its slope (at most 1.1 times the other factor).
                let (act, act_err): (Vec<f64>, Vec<f64>) = (0..f)
                    .map(|j| {
                        let (g, gm) = dot(&y, &gu[j * width..(j + 1) * width]);
                        let (u, um) = dot(&y, &gu[(f + j) * width..(f + j + 1) * width]);
                        let silu = g / (1.0 + (-g).exp());
                        let err = 1e-5 * (gm * 1.1 * u.abs() + um * silu.abs()) + 1e-30;
                        (silu * u, err)
                    })
                    .unzip();
                for o in 0..width {
                    let drow = &dw[o * f..(o + 1) * f];
                    let (d, dm) = dot(&act, drow);
                    let carried: f64 = act_err.iter().zip(drow).map(|(e, w)| e * w.abs()).sum();
                    let want = residual[r * width + o] + d;
                    let bound = 1e-5 * (dm + residual[r * width + o].abs()) + carried + 1e-30;
                    let g = got[r * width + o];
                    assert!(
                        (g - want).abs() <= bound,
                        "{what}: out[{r}, {o}] = {g}, want {want} (bound {bound})"
                    );
                }
            }
        }
    }
    Ok(())
}

/// The block over `x` into `out` must fail naming `want` and record
/// nothing.
fn refuses(
    want: &str,
    x: &DeviceTensor,
    block: FeedForward,
    residual: &DeviceTensor,
    out: &DeviceTensor,
) {
    refused(want, |g| ops().record_quant_ffn(g, x, block, residual, out));
}

#[test]
fn block_refuses_bad_operands() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(7);
    let (gate_up, _) = matrix(QuantFormat::Q8_0, 128, 64, &mut rng);
    let (down, _) = matrix(QuantFormat::Q8_0, 64, 64, &mut rng);
    let (narrow, _) = matrix(QuantFormat::Q8_0, 64, 32, &mut rng);
    let gain = f32s(&[1.0; 64], vec![64]);
    let block = FeedForward {
        norm: RowNorm {
            weight: &gain,
            eps: 1e-5,
        },
        gate_up: &gate_up,
        down: &down,
    };
    let out = |m: usize| ops.output(TensorDesc::new(DType::F32, vec![m, 64]).unwrap());
    let x = f32s(&[0.5; 128], vec![2, 64]);
    let y = out(2)?;
    let wrong: &QuantMatrix = &narrow;
    refuses(
        "down matrix [width, f]",
        &x,
        FeedForward {
            down: wrong,
            ..block
        },
        &x,
        &y,
    );
    let many = f32s(
        &vec![0.5; 64 * (QUANT_FFN_MAX_ROWS + 1)],
        vec![QUANT_FFN_MAX_ROWS + 1, 64],
    );
    refuses("1 to", &many, block, &many, &out(QUANT_FFN_MAX_ROWS + 1)?);
    let short = f32s(&[0.5; 64], vec![2, 32]);
    refuses("x must be f32", &short, block, &x, &y);
    let one = f32s(&[1.0; 32], vec![32]);
    let bad_norm = FeedForward {
        norm: RowNorm {
            weight: &one,
            eps: 1e-5,
        },
        ..block
    };
    refuses("norm weight", &x, bad_norm, &x, &y);
    refuses(
        "the residual",
        &x,
        block,
        &f32s(&[0.0; 64], vec![1, 64]),
        &y,
    );
    refuses("output", &x, block, &x, &out(1)?);
    // The output over x.
    refuses("must not overlap", &x, block, &y, &x);
    Ok(())
}
