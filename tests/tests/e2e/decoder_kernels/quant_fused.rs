//! The decode-sized quantised products with fused work: each row of x
//! RMS-normalised as it is read, a residual added to the output, and both
//! with the gated (SwiGLU) product, against f64 references; and the
//! fusions' refusals.

use super::quant::{FORMATS, Gen, check_product, matrix, ops, refused, x_tensor};
use hrx_runtime::Graph;
use hrx_tensor::ops::{QUANT_GATED_MAX_ROWS, QuantFormat, QuantFusion, QuantMatrix, RowNorm};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const EPS: f64 = 1e-5;

fn values(v: &[f64], shape: Vec<usize>) -> DeviceTensor {
    DeviceTensor::from_values(ops().runtime(), DType::F32, shape, v).unwrap()
}

fn random(rng: &mut Gen, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| f64::from(rng.uniform(lo, hi) as f32))
        .collect()
}

/// Runs the fused product (`gated`: the SwiGLU form) into a fresh `[m, n]`.
fn run(
    x: &DeviceTensor,
    w: &QuantMatrix,
    fusion: &QuantFusion,
    gated: bool,
    n: usize,
) -> Result<Vec<f64>> {
    let ops = ops();
    let m = x.desc().shape()[0];
    let mut out = ops.output(TensorDesc::new(DType::F32, vec![m, n])?)?;
    let mut graph = ops.runtime().graph();
    match gated {
        true => ops.record_quant_swiglu_fused(&mut graph, x, w, fusion, &out)?,
        false => ops.record_quant_matmul_fused(&mut graph, x, w, fusion, &out)?,
    }
    let mut inputs = vec![x.completion().clone(), w.words().completion().clone()];
    inputs.extend(fusion.norm.map(|n| n.weight.completion().clone()));
    inputs.extend(fusion.residual.map(|r| r.completion().clone()));
    out.set_producer(graph.prepare()?.submit_after(&inputs)?);
    out.to_values()
}

/// Each row of `x` (`[m, cols]`) times `gain`, over its root mean square.
fn normalised(x: &[f64], gain: &[f64], m: usize, cols: usize) -> Vec<f64> {
    (0..m)
        .flat_map(|r| {
            let row = &x[r * cols..(r + 1) * cols];
            let mean = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
            let scale = 1.0 / (mean + EPS).sqrt();
            row.iter()
                .zip(gain)
                .map(move |(v, g)| v * g * scale)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The normalised product, and with a residual, for every format, row
/// tile and a partial span, x aligned and not; each row of x at its own
/// scale, so a norm taken over the wrong row or columns shows.
#[test]
fn fused_norm_and_residual_match_reference() -> Result<()> {
    let mut rng = Gen::new(11);
    for (format, rows, cols) in [
        (QuantFormat::Q4_1, 192, 576),
        (QuantFormat::Q8_0, 40, 64),
        (QuantFormat::F16, 9, 37),
        (QuantFormat::F32, 33, 16),
    ] {
        let (w, wv) = matrix(format, rows, cols, &mut rng);
        let gain = random(&mut rng, cols, 0.5, 1.5);
        let gain_t = values(&gain, vec![cols]);
        for (i, m) in [1, 3, 8, QUANT_GATED_MAX_ROWS].into_iter().enumerate() {
            let mut x = random(&mut rng, m * cols, -1.0, 1.0);
            for (r, row) in x.chunks_mut(cols).enumerate() {
                row.iter_mut().for_each(|v| *v *= f64::from(1 << (r % 5)));
            }
            let xt = x_tensor(&x, m, cols, i % 2 == 1);
            let what = format!("{format:?} {rows}x{cols} m={m}");
            let norm = Some(RowNorm {
                weight: &gain_t,
                eps: EPS as f32,
            });
            let got = run(
                &xt,
                &w,
                &QuantFusion {
                    norm,
                    residual: None,
                },
                false,
                rows,
            )?;
            let xn = normalised(&x, &gain, m, cols);
            check_product(
                &format!("{what} norm"),
                &got,
                (&xn, &wv),
                (m, rows, cols),
                1,
            );

            let residual = random(&mut rng, m * rows, -4.0, 4.0);
            let residual_t = values(&residual, vec![m, rows]);
            let fusion = QuantFusion {
                norm: None,
                residual: Some(&residual_t),
            };
            let got = run(&xt, &w, &fusion, false, rows)?;
            let product: Vec<f64> = got.iter().zip(&residual).map(|(g, r)| g - r).collect();
            check_product(
                &format!("{what} residual"),
                &product,
                (&x, &wv),
                (m, rows, cols),
                1,
            );
        }
    }
    Ok(())
}

/// The gated product with both fusions: `residual + silu(r x.gate) *
/// (r x.up)`, `r` the row's norm scale.
#[test]
fn fused_gate_normalises_before_silu() -> Result<()> {
    let mut rng = Gen::new(12);
    for format in FORMATS {
        let (half, cols) = (24, 64);
        let (w, wv) = matrix(format, 2 * half, cols, &mut rng);
        let gain = random(&mut rng, cols, 0.5, 1.5);
        let gain_t = values(&gain, vec![cols]);
        for m in [1, 5] {
            let x = random(&mut rng, m * cols, -3.0, 3.0);
            let residual = random(&mut rng, m * half, -1.0, 1.0);
            let residual_t = values(&residual, vec![m, half]);
            let fusion = QuantFusion {
                norm: Some(RowNorm {
                    weight: &gain_t,
                    eps: EPS as f32,
                }),
                residual: Some(&residual_t),
            };
            let got = run(&values(&x, vec![m, cols]), &w, &fusion, true, half)?;
            let xn = normalised(&x, &gain, m, cols);
            for r in 0..m {
                let xr = &xn[r * cols..(r + 1) * cols];
                let dot = |j: usize| -> (f64, f64) {
                    let wr = &wv[j * cols..(j + 1) * cols];
                    let v = xr.iter().zip(wr).map(|(a, b)| a * b).sum();
                    (v, xr.iter().zip(wr).map(|(a, b)| (a * b).abs()).sum())
                };
                for j in 0..half {
                    let ((g, gm), (u, um)) = (dot(j), dot(half + j));
                    let silu = g / (1.0 + (-g).exp());
                    let want = residual[r * half + j] + silu * u;
                    let bound = 1.1e-4 * gm * u.abs() + 1e-4 * um * silu.abs() + 1e-5;
                    let g = got[r * half + j];
                    assert!(
                        (g - want).abs() <= bound,
                        "{format:?} m={m}: out[{r}, {j}] = {g}, want {want}"
                    );
                }
            }
        }
    }
    Ok(())
}

/// A fused product's operands are checked before anything is recorded.
#[test]
fn fusion_mismatches_are_refused() -> Result<()> {
    let mut rng = Gen::new(13);
    let ops = ops();
    let (w, _) = matrix(QuantFormat::Q8_0, 8, 32, &mut rng);
    let x = values(&[0.5; 2 * 32], vec![2, 32]);
    let gain = values(&[1.0; 32], vec![32]);
    let short_gain = values(&[1.0; 31], vec![31]);
    let residual = values(&[1.0; 16], vec![2, 8]);
    let out = ops.output(TensorDesc::new(DType::F32, vec![2, 8])?)?;
    let norm = |weight, eps| QuantFusion {
        norm: Some(RowNorm { weight, eps }),
        residual: None,
    };
    let plus = |residual| QuantFusion {
        norm: None,
        residual: Some(residual),
    };
    let record = |want: &str, fusion: QuantFusion, out: &DeviceTensor, x: &DeviceTensor| {
        refused(want, |g: &mut Graph| {
            ops.record_quant_matmul_fused(g, x, &w, &fusion, out)
        })
    };
    record("norm weight", norm(&short_gain, 1e-5), &out, &x);
    record("eps", norm(&gain, -1.0), &out, &x);
    record("eps", norm(&gain, f32::NAN), &out, &x);
    let wrong = values(&[1.0; 8], vec![1, 8]);
    record("residual", plus(&wrong), &out, &x);
    record("must not overlap", plus(&residual), &residual, &x);
    let many = values(&vec![0.5; 17 * 32], vec![17, 32]);
    let out17 = ops.output(TensorDesc::new(DType::F32, vec![17, 8])?)?;
    record("17 rows", norm(&gain, 1e-5), &out17, &many);
    Ok(())
}
