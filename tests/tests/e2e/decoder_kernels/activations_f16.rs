//! f16 activations: the operators of a decoder step that read or write
//! f16 (the quantised products, plain and fused; the norms; SwiGLU; the
//! keys' rotation and cache store; the rotary attention, plain and
//! projected) against the same operators in f32. An f16 input gives the f32 operator's values on the same (rounded)
//! inputs, and an f16 output the f32 output rounded to nearest even, bit
//! for bit; what cannot write f16 is refused before anything is recorded.

use super::quant::{Gen, f32s, i32s, matrix, ops, random, refused};
use half::f16;
use hrx_runtime::Graph;
use hrx_tensor::ops::{AttentionOutput, QuantFormat, QuantFusion, QuantMatrix, Rotary, RowNorm};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

/// An f16 tensor of `v` (each rounded to nearest) in `shape`.
fn halves(v: &[f64], shape: Vec<usize>) -> DeviceTensor {
    DeviceTensor::from_values(ops().runtime(), DType::F16, shape, v).unwrap()
}

/// Each value rounded to the nearest f16, widened back.
fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| f16::from_f64(x).to_f64()).collect()
}

/// The f32 bits of each value.
fn f32_bits(v: &[f64]) -> Vec<u32> {
    v.iter().map(|&x| (x as f32).to_bits()).collect()
}

/// The f16 bits of each value: an f16 as it is, an f32 rounded to
/// nearest even.
fn f16_bits(v: &[f64]) -> Vec<u16> {
    v.iter()
        .map(|&x| f16::from_f32(x as f32).to_bits())
        .collect()
}

/// Runs `record` into fresh outputs of `outs` (dtype and shape each) after
/// `inputs`, and reads them back.
fn run(
    inputs: &[&DeviceTensor],
    outs: &[(DType, Vec<usize>)],
    record: impl FnOnce(&mut Graph, &[DeviceTensor]) -> Result<()>,
) -> Result<Vec<Vec<f64>>> {
    let ops = ops();
    let mut tensors = outs
        .iter()
        .map(|(dtype, shape)| ops.output(TensorDesc::new(*dtype, shape.clone())?))
        .collect::<Result<Vec<_>>>()?;
    let mut graph = ops.runtime().graph();
    record(&mut graph, &tensors)?;
    let deps: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
    let done = graph.prepare()?.submit_after(&deps)?;
    tensors
        .iter_mut()
        .map(|t| {
            t.set_producer(done.clone());
            t.to_values()
        })
        .collect()
}

/// The product of `x` by `w` with `fusion` (`gated`: the SwiGLU form)
/// into a fresh `[m, n]` of `out`.
fn product(
    x: &DeviceTensor,
    w: &QuantMatrix,
    (fusion, gated): (&QuantFusion, bool),
    out: DType,
) -> Result<Vec<f64>> {
    let ops = ops();
    let m = x.desc().shape()[0];
    let n = if gated { w.rows() / 2 } else { w.rows() };
    let mut inputs = vec![x, w.words()];
    inputs.extend(fusion.norm.map(|n| n.weight));
    inputs.extend(fusion.residual);
    let outs = run(&inputs, &[(out, vec![m, n])], |g, o| match gated {
        true => ops.record_quant_swiglu_fused(g, x, w, fusion, &o[0]),
        false => ops.record_quant_matmul_fused(g, x, w, fusion, &o[0]),
    })?;
    Ok(outs.into_iter().next().expect("one output"))
}

/// `v` (`[m, cols]`) as f16 starting one element into its storage, so its
/// rows are read element by element.
fn offset_halves(v: &[f64], m: usize, cols: usize) -> DeviceTensor {
    let mut padded = vec![7.0];
    padded.extend(v);
    let all = halves(&padded, vec![padded.len()]);
    let desc = TensorDesc::new(DType::F16, vec![m, cols]).unwrap();
    all.view(2, desc).unwrap()
}

#[test]
fn quant_products_read_and_write_f16() -> Result<()> {
    let mut rng = Gen::new(61);
    let plain = (&QuantFusion::default(), false);
    for format in [QuantFormat::Q4_1, QuantFormat::Q8_0, QuantFormat::F16] {
        let (rows, cols) = (96, 576);
        let (w, _) = matrix(format, rows, cols, &mut rng);
        // Decode sizes (the matrix-vector kernel) and prompt sizes (the
        // tiled kernel, split along k for few tiles).
        for (i, m) in [1, 3, 17, 70].into_iter().enumerate() {
            let what = format!("{format:?} [{rows}, {cols}] m={m}");
            let x = rounded(&random(&mut rng, m * cols, -2.0, 2.0));
            let x32 = f32s(&x, vec![m, cols]);
            let x16 = match i % 2 {
                0 => halves(&x, vec![m, cols]),
                _ => offset_halves(&x, m, cols),
            };
            let want = product(&x32, &w, plain, DType::F32)?;
            assert!(want.iter().any(|&v| v != 0.0), "{what}: all zeros");
            let got = product(&x16, &w, plain, DType::F32)?;
            assert_eq!(f32_bits(&got), f32_bits(&want), "{what}: f16 x");
            for x in [&x32, &x16] {
                let got = product(x, &w, plain, DType::F16)?;
                let what = format!("{what}: {} x, f16 out", x.desc().dtype());
                assert_eq!(f16_bits(&got), f16_bits(&want), "{what}");
            }
        }
    }
    Ok(())
}

#[test]
fn fused_products_read_and_write_f16() -> Result<()> {
    let mut rng = Gen::new(62);
    let (cols, n, m) = (576, 64, 3);
    let gain = f32s(&random(&mut rng, cols, 0.5, 1.5), vec![cols]);
    let residual = f32s(&random(&mut rng, m * n, -4.0, 4.0), vec![m, n]);
    let norm = Some(RowNorm {
        weight: &gain,
        eps: 1e-5,
    });
    let fusions = [
        QuantFusion {
            norm,
            ..QuantFusion::default()
        },
        QuantFusion {
            residual: Some(&residual),
            ..QuantFusion::default()
        },
        QuantFusion {
            norm,
            residual: Some(&residual),
            kv_store: None,
        },
    ];
    let (plain, stacked) = (
        matrix(QuantFormat::Q4_1, n, cols, &mut rng).0,
        matrix(QuantFormat::Q4_1, 2 * n, cols, &mut rng).0,
    );
    let x = rounded(&random(&mut rng, m * cols, -3.0, 3.0));
    let (x32, x16) = (f32s(&x, vec![m, cols]), halves(&x, vec![m, cols]));
    for (f, fusion) in fusions.iter().enumerate() {
        for (w, gated) in [(&plain, false), (&stacked, true)] {
            let what = format!("fusion {f}, gated {gated}");
            let want = product(&x32, w, (fusion, gated), DType::F32)?;
            let got = product(&x16, w, (fusion, gated), DType::F32)?;
            assert_eq!(f32_bits(&got), f32_bits(&want), "{what}: f16 x");
            let got = product(&x32, w, (fusion, gated), DType::F16)?;
            assert_eq!(f16_bits(&got), f16_bits(&want), "{what}: f16 out");
        }
    }
    Ok(())
}

#[test]
fn norms_write_f16() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(63);
    let (rows, cols) = (5, 576);
    let shape = vec![rows, cols];
    let a = f32s(&random(&mut rng, rows * cols, -3.0, 3.0), shape.clone());
    let b = f32s(&random(&mut rng, rows * cols, -3.0, 3.0), shape.clone());
    let w = f32s(&random(&mut rng, cols, 0.5, 1.5), vec![cols]);
    let eps = 1e-5;
    for layer in [false, true] {
        let what = if layer { "layer_norm" } else { "rms_norm" };
        let norm = |dtype: DType| -> Result<Vec<f64>> {
            let outs = run(&[&a, &w], &[(dtype, shape.clone())], |g, o| match layer {
                true => ops.record_layer_norm(g, &a, Some(&w), None, eps, &o[0]),
                false => ops.record_rms_norm(g, &a, Some(&w), None, eps, &o[0]),
            })?;
            Ok(outs.into_iter().next().expect("one output"))
        };
        let want = norm(DType::F32)?;
        assert_eq!(f16_bits(&norm(DType::F16)?), f16_bits(&want), "{what}");
    }
    let add = |dtype: DType| {
        let outs = [(DType::F32, shape.clone()), (dtype, shape.clone())];
        run(&[&a, &b, &w], &outs, |g, o| {
            ops.record_add_rms_norm(g, &a, &b, &w, eps, Some(&o[0]), &o[1])
        })
    };
    let (want, got) = (add(DType::F32)?, add(DType::F16)?);
    assert_eq!(f32_bits(&got[0]), f32_bits(&want[0]), "add_rms_norm: sum");
    assert_eq!(f16_bits(&got[1]), f16_bits(&want[1]), "add_rms_norm: out");
    // Rows that are not whole quads have no f16 form.
    let odd = f32s(&random(&mut rng, 2 * 6, -1.0, 1.0), vec![2, 6]);
    let out = ops.output(TensorDesc::new(DType::F16, vec![2, 6])?)?;
    refused("an f16 output needs rows a multiple of 4", |g| {
        ops.record_rms_norm(g, &odd, None, None, eps, &out)
    });
    Ok(())
}

#[test]
fn swiglu_reads_and_writes_f16() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(64);
    let (rows, width) = (6, 96);
    // Gate and up as the halves of one stacked projection's rows.
    let stacked = rounded(&random(&mut rng, rows * 2 * width, -6.0, 6.0));
    let halves_of = |t: &DeviceTensor, dtype: DType| -> Result<[DeviceTensor; 2]> {
        let bytes = dtype.bytes();
        let desc = TensorDesc::strided(dtype, vec![rows, width], vec![2 * width, 1])?;
        Ok([t.view(0, desc.clone())?, t.view(width * bytes, desc)?])
    };
    let s32 = f32s(&stacked, vec![rows, 2 * width]);
    let s16 = halves(&stacked, vec![rows, 2 * width]);
    let gate = |inputs: &[DeviceTensor; 2], out: DType| -> Result<Vec<f64>> {
        let [g, u] = inputs;
        let outs = run(&[g, u], &[(out, vec![rows, width])], |graph, o| {
            ops.record_swiglu(graph, g, u, &o[0])
        })?;
        Ok(outs.into_iter().next().expect("one output"))
    };
    let (in32, in16) = (halves_of(&s32, DType::F32)?, halves_of(&s16, DType::F16)?);
    let want = gate(&in32, DType::F32)?;
    assert_eq!(
        f32_bits(&gate(&in16, DType::F32)?),
        f32_bits(&want),
        "f16 in"
    );
    for (inputs, name) in [(&in32, "f32"), (&in16, "f16")] {
        let got = gate(inputs, DType::F16)?;
        assert_eq!(f16_bits(&got), f16_bits(&want), "{name} in, f16 out");
    }
    let out = ops.output(TensorDesc::new(DType::F32, vec![rows, width])?)?;
    refused("one shape and one dtype", |g| {
        ops.record_swiglu(g, &in32[0], &in16[1], &out)
    });
    let ints = ops.output(TensorDesc::new(DType::I32, vec![rows, width])?)?;
    refused("must be f32 or f16", |g| {
        ops.record_swiglu(g, &in32[0], &in32[1], &ints)
    });
    Ok(())
}

#[test]
fn rope_kv_store_reads_f16() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(66);
    let (kvh, hd, slots, cap) = (3, 64, 2, 8);
    let table: [(i32, i32); 4] = [(0, 7), (1, 3), (-1, 2), (1, 4)];
    let rows = table.len();
    // Keys and values as column views of one stacked projection.
    let width = 2 * kvh * hd + 32;
    let stacked = rounded(&random(&mut rng, rows * width, -2.0, 2.0));
    let sequence = i32s(&table.map(|r| r.0));
    let position = i32s(&table.map(|r| r.1));
    let old = random(&mut rng, slots * kvh * cap * hd, -1.0, 1.0);
    let store = |input: DType, cache: DType| -> Result<Vec<Vec<f64>>> {
        let all = DeviceTensor::from_values(ops.runtime(), input, vec![rows, width], &stacked)?;
        let desc = TensorDesc::strided(input, vec![rows, kvh, hd], vec![width, hd, 1])?;
        let k = all.view(32 * input.bytes(), desc.clone())?;
        let v = all.view((32 + kvh * hd) * input.bytes(), desc)?;
        let shape = vec![slots, kvh, cap, hd];
        let caches = [0, 1]
            .map(|_| DeviceTensor::from_values(ops.runtime(), cache, shape.clone(), &old).unwrap());
        let mut g = ops.runtime().graph();
        let [kc, vc] = &caches;
        ops.record_rope_kv_store(&mut g, &k, &v, &sequence, &position, hd, 1e5, kc, vc)?;
        let deps = [&all, &sequence, &position, kc, vc].map(|t| t.completion().clone());
        let done = g.prepare()?.submit_after(&deps)?;
        caches
            .into_iter()
            .map(|mut c| {
                c.set_producer(done.clone());
                c.to_values()
            })
            .collect()
    };
    for cache in [DType::F32, DType::F16] {
        let (want, got) = (store(DType::F32, cache)?, store(DType::F16, cache)?);
        for (i, name) in ["keys", "values"].into_iter().enumerate() {
            let what = format!("{cache} caches: {name}");
            assert_eq!(f32_bits(&got[i]), f32_bits(&want[i]), "{what}");
        }
    }
    let zeros = vec![0.0; rows * kvh * hd];
    let (k32, v16) = (
        f32s(&zeros, vec![rows, kvh, hd]),
        halves(&zeros, vec![rows, kvh, hd]),
    );
    let caches = [0, 1].map(|_| f32s(&old, vec![slots, kvh, cap, hd]));
    refused("and its dtype", |g| {
        let [kc, vc] = &caches;
        ops.record_rope_kv_store(g, &k32, &v16, &sequence, &position, hd, 1e5, kc, vc)
    });
    Ok(())
}

#[test]
fn rotary_attention_reads_and_writes_f16() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(65);
    let (heads, kv_heads, hd, slots, cap) = (9, 3, 64, 2, 24);
    let rotary = Rotary {
        dims: hd,
        base: 1e5,
    };
    // Decode rows of both slots (one inactive) and a short prompt.
    let table: [(i32, i32); 6] = [(0, 7), (1, 23), (-1, 2), (1, 0), (1, 1), (1, 2)];
    let rows = table.len();
    let cache_shape = vec![slots, kv_heads, cap, hd];
    let csize = slots * kv_heads * cap * hd;
    let [k, v] = [0, 1].map(|_| f32s(&random(&mut rng, csize, -1.0, 1.0), cache_shape.clone()));
    let q = f32s(
        &random(&mut rng, rows * heads * hd, -2.0, 2.0),
        vec![rows, heads, hd],
    );
    let sequence = i32s(&table.map(|r| r.0));
    let position = i32s(&table.map(|r| r.1));
    let shape = vec![rows, heads, hd];
    let cache = [&k, &v, &sequence, &position];
    let inputs = [&q, &k, &v, &sequence, &position];
    let attention = |dtype: DType| -> Result<Vec<f64>> {
        let outs = run(&inputs, &[(dtype, shape.clone())], |g, o| {
            let [k, v, s, p] = cache;
            ops.record_rotary_attention(g, &q, rotary, k, v, s, p, 0.125, &o[0])
        })?;
        Ok(outs.into_iter().next().expect("one output"))
    };
    let want = attention(DType::F32)?;
    assert_eq!(
        f16_bits(&attention(DType::F16)?),
        f16_bits(&want),
        "attention"
    );
    // f16 queries: the f32 attention of the same (rounded) queries.
    let q_values = rounded(&q.to_values()?);
    let (q32, q16) = (
        f32s(&q_values, shape.clone()),
        halves(&q_values, shape.clone()),
    );
    let attend = |q: &DeviceTensor| -> Result<Vec<f64>> {
        let inputs = [q, &k, &v, &sequence, &position];
        let outs = run(&inputs, &[(DType::F32, shape.clone())], |g, o| {
            let [k, v, s, p] = cache;
            ops.record_rotary_attention(g, q, rotary, k, v, s, p, 0.125, &o[0])
        })?;
        Ok(outs.into_iter().next().expect("one output"))
    };
    assert_eq!(f32_bits(&attend(&q16)?), f32_bits(&attend(&q32)?), "f16 q");
    // The projected form: the attended rows rounded, the projection (from
    // the unrounded rows) unchanged.
    let width = 96;
    let (w, _) = matrix(QuantFormat::Q4_1, width, heads * hd, &mut rng);
    let residual = f32s(
        &random(&mut rng, rows * width, -4.0, 4.0),
        vec![rows, width],
    );
    let projected = |dtype: DType| -> Result<Vec<Vec<f64>>> {
        let outs = [(dtype, shape.clone()), (DType::F32, vec![rows, width])];
        let deps = [&q, &k, &v, &sequence, &position, w.words(), &residual];
        run(&deps, &outs, |g, o| {
            let projection = AttentionOutput {
                weight: &w,
                residual: &residual,
                out: &o[1],
            };
            ops.record_rotary_attention_projected(g, &q, rotary, cache, 0.125, &o[0], projection)
        })
    };
    let (want, got) = (projected(DType::F32)?, projected(DType::F16)?);
    assert_eq!(f16_bits(&got[0]), f16_bits(&want[0]), "projected: attended");
    assert_eq!(
        f32_bits(&got[1]),
        f32_bits(&want[1]),
        "projected: projection"
    );
    Ok(())
}
