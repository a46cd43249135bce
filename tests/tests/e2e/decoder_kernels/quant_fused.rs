//! The decode-sized quantised products with fused work: each row of x
//! RMS-normalised as it is read, a residual added to the output, and both
//! with the gated (SwiGLU) product, against f64 references; the key/value
//! cache store against the product followed by `rope_kv_store`, bit for
//! bit; and the fusions' refusals.

use super::quant::{
    FORMATS, Gen, check_product, f32s, i32s, matrix, ops, random, refused, x_tensor,
};
use hrx_runtime::Graph;
use hrx_tensor::ops::{
    KvStore, QUANT_GATED_MAX_ROWS, QuantFormat, QuantFusion, QuantMatrix, Rotary, RowNorm,
};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const EPS: f64 = 1e-5;

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
        let gain_t = f32s(&gain, vec![cols]);
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
            let fusion = QuantFusion {
                norm,
                ..QuantFusion::default()
            };
            let got = run(&xt, &w, &fusion, false, rows)?;
            let xn = normalised(&x, &gain, m, cols);
            check_product(
                &format!("{what} norm"),
                &got,
                (&xn, &wv),
                (m, rows, cols),
                1,
            );

            let residual = random(&mut rng, m * rows, -4.0, 4.0);
            let residual_t = f32s(&residual, vec![m, rows]);
            let fusion = QuantFusion {
                residual: Some(&residual_t),
                ..QuantFusion::default()
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
        let gain_t = f32s(&gain, vec![cols]);
        for m in [1, 5] {
            let x = random(&mut rng, m * cols, -3.0, 3.0);
            let residual = random(&mut rng, m * half, -1.0, 1.0);
            let residual_t = f32s(&residual, vec![m, half]);
            let fusion = QuantFusion {
                norm: Some(RowNorm {
                    weight: &gain_t,
                    eps: EPS as f32,
                }),
                residual: Some(&residual_t),
                kv_store: None,
            };
            let got = run(&f32s(&x, vec![m, cols]), &w, &fusion, true, half)?;
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
    let x = f32s(&[0.5; 2 * 32], vec![2, 32]);
    let gain = f32s(&[1.0; 32], vec![32]);
    let short_gain = f32s(&[1.0; 31], vec![31]);
    let residual = f32s(&[1.0; 16], vec![2, 8]);
    let out = ops.output(TensorDesc::new(DType::F32, vec![2, 8])?)?;
    let norm = |weight, eps| QuantFusion {
        norm: Some(RowNorm { weight, eps }),
        ..QuantFusion::default()
    };
    let plus = |residual| QuantFusion {
        residual: Some(residual),
        ..QuantFusion::default()
    };
    let record = |want: &str, fusion: QuantFusion, out: &DeviceTensor, x: &DeviceTensor| {
        refused(want, |g: &mut Graph| {
            ops.record_quant_matmul_fused(g, x, &w, &fusion, out)
        })
    };
    record("norm weight", norm(&short_gain, 1e-5), &out, &x);
    record("eps", norm(&gain, -1.0), &out, &x);
    record("eps", norm(&gain, f32::NAN), &out, &x);
    let wrong = f32s(&[1.0; 8], vec![1, 8]);
    record("residual", plus(&wrong), &out, &x);
    record("must not overlap", plus(&residual), &residual, &x);
    let many = f32s(&vec![0.5; 17 * 32], vec![17, 32]);
    let out17 = ops.output(TensorDesc::new(DType::F32, vec![17, 8])?)?;
    record("17 rows", norm(&gain, 1e-5), &out17, &many);
    Ok(())
}

/// Caches of `[slots, kv_heads, capacity, head_dim]` filled with a marker,
/// so that entries the store must leave alone are checked too.
fn caches(shape: &[usize]) -> [DeviceTensor; 2] {
    let n = shape.iter().product();
    [7.0, -7.0].map(|v| f32s(&vec![v; n], shape.to_vec()))
}

fn bits(t: &DeviceTensor) -> Vec<u32> {
    t.to_values()
        .unwrap()
        .iter()
        .map(|&v| (v as f32).to_bits())
        .collect()
}

/// The stacked query-key-value product storing its keys (turned) and
/// values into the caches equals, bit for bit, the same product followed
/// by `rope_kv_store` of its key and value columns: the output, and both
/// whole caches (inactive rows, a slot past the caches and a position
/// past their capacity store nothing). Partial rotation included.
#[test]
fn fused_cache_store_equals_product_then_rope_kv_store() -> Result<()> {
    let mut rng = Gen::new(14);
    let ops = ops();
    let (heads, kvh, hd, cols) = (4, 2, 8, 64);
    let (qw, n) = (heads * hd, (heads + 2 * kvh) * hd);
    let shape = [3, kvh, 6, hd];
    for (format, rope_dims, m) in [
        (QuantFormat::Q4_1, 8, 1),
        (QuantFormat::Q8_0, 6, 5),
        (QuantFormat::F16, 8, 3),
    ] {
        let (w, _) = matrix(format, n, cols, &mut rng);
        let x = f32s(&random(&mut rng, m * cols, -1.0, 1.0), vec![m, cols]);
        let gain = f32s(&random(&mut rng, cols, 0.5, 1.5), vec![cols]);
        // Rows: active ones, an inactive one (-1), a slot past the
        // caches and a position past their capacity.
        let (slot, pos) = ([2, -1, 0, 3, 1], [5, 0, 2, 1, 6]);
        let (sequence, position) = (i32s(&slot[..m]), i32s(&pos[..m]));
        let rotary = Rotary {
            dims: rope_dims,
            base: 10_000.0,
        };
        let norm = Some(RowNorm {
            weight: &gain,
            eps: EPS as f32,
        });
        let inputs = [&x, &gain, w.words(), &sequence, &position];
        let after: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();

        let [k_cache, v_cache] = caches(&shape);
        let mut fused_out = ops.output(TensorDesc::new(DType::F32, vec![m, n])?)?;
        let mut g = ops.runtime().graph();
        let store = KvStore {
            query_width: qw,
            sequence: &sequence,
            position: &position,
            rotary,
            k_cache: &k_cache,
            v_cache: &v_cache,
        };
        let fusion = QuantFusion {
            norm,
            kv_store: Some(store),
            ..QuantFusion::default()
        };
        ops.record_quant_matmul_fused(&mut g, &x, &w, &fusion, &fused_out)?;
        let mut after_fused = after.clone();
        after_fused.extend([&k_cache, &v_cache].map(|t| t.completion().clone()));
        let done = g.prepare()?.submit_after(&after_fused)?;
        fused_out.set_producer(done.clone());
        let (mut kf, mut vf) = (k_cache.clone(), v_cache.clone());
        kf.set_producer(done.clone());
        vf.set_producer(done);

        let [k_ref, v_ref] = caches(&shape);
        let mut out = ops.output(TensorDesc::new(DType::F32, vec![m, n])?)?;
        let mut g = ops.runtime().graph();
        let plain = QuantFusion {
            norm,
            ..QuantFusion::default()
        };
        ops.record_quant_matmul_fused(&mut g, &x, &w, &plain, &out)?;
        let view = |start: usize, heads: usize| {
            let desc = TensorDesc::strided(DType::F32, vec![m, heads, hd], vec![n, hd, 1])?;
            out.view(start * 4, desc)
        };
        let (k, v) = (view(qw, kvh)?, view(qw + kvh * hd, kvh)?);
        ops.record_rope_kv_store(
            &mut g,
            &k,
            &v,
            &sequence,
            &position,
            rope_dims,
            rotary.base,
            &k_ref,
            &v_ref,
        )?;
        let mut after_ref = after;
        after_ref.extend([&k_ref, &v_ref].map(|t| t.completion().clone()));
        let done = g.prepare()?.submit_after(&after_ref)?;
        out.set_producer(done.clone());
        let (mut kr, mut vr) = (k_ref.clone(), v_ref.clone());
        kr.set_producer(done.clone());
        vr.set_producer(done);

        let what = format!("{format:?} rope {rope_dims} m={m}");
        assert_eq!(bits(&fused_out), bits(&out), "{what}: output");
        assert_eq!(bits(&kf), bits(&kr), "{what}: keys");
        assert_eq!(bits(&vf), bits(&vr), "{what}: values");
        let stored = bits(&kf).iter().filter(|&&b| b != 7f32.to_bits()).count();
        let active = slot[..m]
            .iter()
            .zip(&pos[..m])
            .filter(|&(&s, &p)| (0..3).contains(&s) && (0..6).contains(&p))
            .count();
        assert_eq!(stored, active * kvh * hd, "{what}: keys stored");
    }
    Ok(())
}

/// A cache store with a gate or a residual, or caches that do not match
/// the output's columns, is refused before anything is recorded.
#[test]
fn cache_store_mismatches_are_refused() -> Result<()> {
    let mut rng = Gen::new(15);
    let ops = ops();
    let (kvh, hd) = (1, 8);
    let (w, _) = matrix(QuantFormat::Q8_0, 32, 32, &mut rng);
    let x = f32s(&[0.5; 32], vec![1, 32]);
    let (sequence, position) = (i32s(&[0]), i32s(&[0]));
    let [k_cache, v_cache] = caches(&[2, kvh, 4, hd]);
    let store = |query_width, k_cache| KvStore {
        query_width,
        sequence: &sequence,
        position: &position,
        rotary: Rotary {
            dims: hd,
            base: 1e4,
        },
        k_cache,
        v_cache: &v_cache,
    };
    let out = ops.output(TensorDesc::new(DType::F32, vec![1, 32])?)?;
    let half = ops.output(TensorDesc::new(DType::F32, vec![1, 16])?)?;
    let residual = f32s(&[0.0; 32], vec![1, 32]);
    let try_record = |want: &str, fusion: QuantFusion, gated: bool, out: &DeviceTensor| {
        refused(want, |g: &mut Graph| match gated {
            true => ops.record_quant_swiglu_fused(g, &x, &w, &fusion, out),
            false => ops.record_quant_matmul_fused(g, &x, &w, &fusion, out),
        })
    };
    let with = |query_width, k_cache| QuantFusion {
        kv_store: Some(store(query_width, k_cache)),
        ..QuantFusion::default()
    };
    try_record("neither a gate", with(16, &k_cache), true, &half);
    let both = QuantFusion {
        residual: Some(&residual),
        ..with(16, &k_cache)
    };
    try_record("neither a gate", both, false, &out);
    try_record("output columns", with(8, &k_cache), false, &out);
    try_record("output columns", with(15, &k_cache), false, &out);
    let [other, _] = caches(&[2, kvh, 5, hd]);
    try_record("v_cache", with(16, &other), false, &out);
    try_record("must not overlap", with(16, &v_cache), false, &out);
    Ok(())
}
