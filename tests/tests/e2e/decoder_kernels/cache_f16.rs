//! Key/value caches of f16: every cache operator (the stores, the fused
//! query-key-value product's store, cached, rotary and projected
//! attention) over f16 caches against the same operator over f32 caches.
//! The stores give the f32 store's values rounded to nearest even, bit for
//! bit (ties, subnormals, the top of the range, entries left alone); the
//! attentions over f16 caches agree with those over f32 caches holding the
//! same (rounded) values, and with an f64 reference; a mixed pair or a
//! cache of another dtype is refused.

use super::quant::{Gen, f32s, i32s, matrix, ops, random};
use half::f16;
use hrx_runtime::Graph;
use hrx_tensor::ops::{AttentionOutput, KvStore, QuantFormat, QuantFusion, Rotary, RowNorm};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

/// A token row: its slot and position.
type Row = (i32, i32);

/// A tensor of `dtype` holding `v` (rounded to nearest).
fn tensor(dtype: DType, v: &[f64], shape: &[usize]) -> DeviceTensor {
    DeviceTensor::from_values(ops().runtime(), dtype, shape.to_vec(), v).unwrap()
}

/// Each value (an f32) rounded to the nearest f16, widened back.
fn rounded(v: &[f64]) -> Vec<f64> {
    v.iter()
        .map(|&x| f16::from_f32(x as f32).to_f64())
        .collect()
}

/// `n` values in [-1, 1) that f16 holds exactly.
fn random_halves(rng: &mut Gen, n: usize) -> Vec<f64> {
    rounded(&random(rng, n, -1.0, 1.0))
}

fn rot(dims: usize, base: f32) -> Rotary {
    Rotary { dims, base }
}

/// The f16 bits of each value: an f16 as it is, an f32 rounded to nearest
/// even.
fn halves(v: &[f64]) -> Vec<u16> {
    v.iter()
        .map(|&x| f16::from_f32(x as f32).to_bits())
        .collect()
}

/// f32 values where rounding to f16 shows: ties (to even, down and up),
/// just past a tie, subnormal ties, the subnormal-normal boundary, a
/// subnormal, the top of the range, a negative zero; and their f16 bits.
fn specials() -> ([f64; 9], [u16; 9]) {
    let p = |e: i32| 2f64.powi(e);
    let values = [
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        -(1.0 + p(-11) + p(-20)),
        p(-25),
        3.0 * p(-25),
        p(-14) - p(-25),
        f64::from(1e-5f32),
        65519.0,
        -0.0,
    ];
    let bits = [
        0x3c00, 0x3c02, 0xbc01, 0x0000, 0x0002, 0x0400, 0x00a8, 0x7bff, 0x8000,
    ];
    (values, bits)
}

/// The first (up to) four values of each `hd` row replaced by specials.
fn sprinkle(v: &mut [f64], hd: usize) {
    let (sp, _) = specials();
    for (i, row) in v.chunks_mut(hd).enumerate() {
        for (d, x) in row.iter_mut().take(4).enumerate() {
            *x = sp[(3 * i + d) % sp.len()];
        }
    }
}

/// `v` (`[n, h, d]`) as a view into rows of `2d` (junk after each row).
fn strided(v: &[f64], [n, h, d]: [usize; 3], rng: &mut Gen) -> DeviceTensor {
    let all: Vec<f64> = v
        .chunks(d)
        .flat_map(|row| {
            let junk = random(rng, d, -9.0, 9.0);
            row.iter().copied().chain(junk).collect::<Vec<_>>()
        })
        .collect();
    f32s(&all, vec![n, h, 2 * d]).slice(2, 0..d).unwrap()
}

fn active(&(s, p): &Row, [slots, _, cap, _]: [usize; 4]) -> bool {
    (0..slots as i32).contains(&s) && (0..cap as i32).contains(&p)
}

/// Cache `c` (`[slots, kvh, cap, hd]`) with the rows' `new` (`[n, kvh,
/// hd]`) at their slots and positions.
fn stored(c: &[f64], new: &[f64], rows: &[Row], shape: [usize; 4]) -> Vec<f64> {
    let [_, kvh, cap, hd] = shape;
    let mut c = c.to_vec();
    for (r, row) in rows
        .iter()
        .enumerate()
        .filter(|(_, row)| active(row, shape))
    {
        for h in 0..kvh {
            let at = ((row.0 as usize * kvh + h) * cap + row.1 as usize) * hd;
            c[at..at + hd].copy_from_slice(&new[(r * kvh + h) * hd..][..hd]);
        }
    }
    c
}

fn slots_positions(rows: &[Row]) -> (DeviceTensor, DeviceTensor) {
    let (s, p): (Vec<i32>, Vec<i32>) = rows.iter().copied().unzip();
    (i32s(&s), i32s(&p))
}

fn run(graph: Graph, inputs: &[&DeviceTensor]) -> Result<()> {
    let deps: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
    graph.prepare()?.submit_after(&deps)?.wait()
}

fn same_bits(what: &str, got: &[u16], want: &[u16]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    let show = |b: u16| format!("{b:#06x} ({})", f16::from_bits(b));
    if let Some(&i) = bad.first() {
        let (g, w, of) = (show(got[i]), show(want[i]), got.len());
        panic!(
            "{what}: {} of {of} differ, first [{i}]: got {g}, want {w}",
            bad.len()
        );
    }
}

/// An f16 cache against the f32 cache of the same store rounded, and the
/// entries the rows leave alone against their old bits.
fn check_cache(what: &str, c16: &DeviceTensor, c32: &DeviceTensor, old: &[f64], rows: &[Row]) {
    let got = halves(&c16.to_values().unwrap());
    same_bits(what, &got, &halves(&c32.to_values().unwrap()));
    let shape: [usize; 4] = c16.desc().shape().try_into().unwrap();
    let mark = vec![f64::NAN; rows.len() * shape[1] * shape[3]];
    let kept = stored(old, &mark, rows, shape);
    for (i, (g, k)) in got.iter().zip(&kept).enumerate() {
        if !k.is_nan() {
            let k = f16::from_f64(*k).to_bits();
            assert_eq!(*g, k, "{what}: untouched entry {i} changed");
        }
    }
}

fn check(what: &str, got: &[f64], want: &[f64], bound: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let worst = (0..got.len())
        .map(|i| (got[i] - want[i]).abs() / bound(i))
        .fold(0.0, f64::max);
    eprintln!("{what}: worst difference {worst:.3} of the bound");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let b = bound(i);
        assert!(
            (g - w).abs() <= b,
            "{what}: [{i}]: got {g}, want {w} (bound {b})"
        );
    }
}

#[test]
fn kv_store_into_f16_cache_rounds_to_nearest_even() -> Result<()> {
    let (sp, bits) = specials();
    assert_eq!(halves(&sp), bits, "the test's own rounding");
    let rows: [Row; 7] = [(2, 9), (0, 0), (-1, 3), (1, 4), (3, 1), (0, 10), (1, -2)];
    for (case, hd) in [64usize, 5, 6].into_iter().enumerate() {
        let mut rng = Gen::new(101 + case as u64);
        let (shape, n) = ([3, 3, 10, hd], rows.len());
        let old = random_halves(&mut rng, shape.iter().product());
        let mut new = random(&mut rng, n * 3 * hd, -2.0, 2.0);
        sprinkle(&mut new, hd);
        let nt = strided(&new, [n, 3, hd], &mut rng);
        let (st, pt) = slots_positions(&rows);
        let mut c32 = f32s(&old, shape.to_vec());
        let mut c16 = tensor(DType::F16, &old, &shape);
        ops().kv_store(&nt, &st, &pt, &mut c32)?;
        ops().kv_store(&nt, &st, &pt, &mut c16)?;
        let want = stored(&old, &new, &rows, shape);
        assert!(c32.to_values()? == want, "kv_store hd={hd}: the f32 cache");
        let what = format!("kv_store hd={hd}");
        same_bits(&what, &halves(&c16.to_values()?), &halves(&want));
        check_cache(&what, &c16, &c32, &old, &rows);
    }
    Ok(())
}

/// Decode rows of several slots (inactive ones among them), partial
/// rotation, a prefill, keys and values as views of one buffer, a small
/// head; values with the specials.
#[test]
fn rope_kv_store_into_f16_caches_rounds_the_f32_store() -> Result<()> {
    let ops = ops();
    let decode = [
        (2, 9),
        (0, 0),
        (-1, 3),
        (1, 4),
        (3, 1),
        (0, 32),
        (1, -2),
        (2, 31),
    ];
    let prefill: Vec<Row> = (0..20).map(|p| (1, p + 7)).collect();
    let cases: [(&[Row], _, _, _, _); 5] = [
        (&decode, 64, 64, 1e4, false),
        (&decode, 64, 32, 1e5, false),
        (&prefill, 64, 64, 1e4, false),
        (&decode, 64, 64, 1e4, true),
        (&decode, 6, 4, 1e4, false),
    ];
    for (case, (rows, hd, rope_dims, base, shared)) in cases.into_iter().enumerate() {
        let mut rng = Gen::new(111 + case as u64);
        let (n, kvh) = (rows.len(), 3);
        let shape = [3, kvh, 32, hd];
        let old = [0, 1].map(|_| random_halves(&mut rng, shape.iter().product()));
        let k = random(&mut rng, n * kvh * hd, -2.0, 2.0);
        let mut v = random(&mut rng, n * kvh * hd, -2.0, 2.0);
        sprinkle(&mut v, hd);
        let (kt, vt) = if shared {
            let both: Vec<f64> = k
                .chunks(hd)
                .zip(v.chunks(hd))
                .flat_map(|(a, b)| a.iter().chain(b).copied())
                .collect();
            let t = f32s(&both, vec![n, kvh, 2 * hd]);
            (t.slice(2, 0..hd)?, t.slice(2, hd..2 * hd)?)
        } else {
            let kt = strided(&k, [n, kvh, hd], &mut rng);
            (kt, strided(&v, [n, kvh, hd], &mut rng))
        };
        let (st, pt) = slots_positions(rows);
        let c32 = old.each_ref().map(|o| f32s(o, shape.to_vec()));
        let c16 = old.each_ref().map(|o| tensor(DType::F16, o, &shape));
        let mut graph = ops.runtime().graph();
        for [kc, vc] in [&c32, &c16] {
            ops.record_rope_kv_store(&mut graph, &kt, &vt, &st, &pt, rope_dims, base, kc, vc)?;
        }
        let [(k32, v32), (k16, v16)] = [(&c32[0], &c32[1]), (&c16[0], &c16[1])];
        run(graph, &[&kt, &vt, &st, &pt, k32, v32, k16, v16])?;
        for (i, name) in ["k_cache", "v_cache"].into_iter().enumerate() {
            let what = format!("rope_kv_store case {case} {name}");
            check_cache(&what, &c16[i], &c32[i], &old[i], rows);
        }
    }
    Ok(())
}

/// The stacked query-key-value product storing into f16 caches: the
/// output as with f32 caches, the caches those of the f32 run rounded.
/// With an f16 output (f16 activations) the output is the f32 output
/// rounded and the caches are those of the f32 output's run.
#[test]
fn fused_cache_store_into_f16_caches_rounds_the_f32_store() -> Result<()> {
    let mut rng = Gen::new(121);
    let ops = ops();
    let (heads, kvh, hd, cols) = (4, 2, 8, 64);
    let (qw, n) = (heads * hd, (heads + 2 * kvh) * hd);
    let shape = [3, kvh, 6, hd];
    let rows: [Row; 5] = [(2, 5), (-1, 0), (0, 2), (3, 1), (1, 6)];
    for (format, rope_dims, m) in [
        (QuantFormat::Q4_1, 8, 1),
        (QuantFormat::Q8_0, 6, 5),
        (QuantFormat::F16, 8, 3),
    ] {
        let (w, _) = matrix(format, n, cols, &mut rng);
        let x = f32s(&random(&mut rng, m * cols, -2.0, 2.0), vec![m, cols]);
        let gain = f32s(&random(&mut rng, cols, 0.5, 1.5), vec![cols]);
        let old = [0, 1].map(|_| random_halves(&mut rng, shape.iter().product()));
        let (sequence, position) = slots_positions(&rows[..m]);
        let fused = |dtype: DType, out: DType| -> Result<(Vec<f64>, [DeviceTensor; 2])> {
            let caches = old.each_ref().map(|o| tensor(dtype, o, &shape));
            let out = ops.output(TensorDesc::new(out, vec![m, n])?)?;
            let store = KvStore {
                query_width: qw,
                sequence: &sequence,
                position: &position,
                rotary: rot(rope_dims, 1e4),
                k_cache: &caches[0],
                v_cache: &caches[1],
            };
            let fusion = QuantFusion {
                norm: Some(RowNorm {
                    weight: &gain,
                    eps: 1e-5,
                }),
                kv_store: Some(store),
                ..QuantFusion::default()
            };
            let mut g = ops.runtime().graph();
            ops.record_quant_matmul_fused(&mut g, &x, &w, &fusion, &out)?;
            let [k, v] = &caches;
            run(g, &[&x, &gain, w.words(), &sequence, &position, k, v])?;
            Ok((out.to_values()?, caches))
        };
        let (out32, c32) = fused(DType::F32, DType::F32)?;
        let (out16, c16) = fused(DType::F16, DType::F32)?;
        let what = format!("{format:?} rope {rope_dims} m={m}");
        let bits = |v: &[f64]| v.iter().map(|&x| (x as f32).to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out16), bits(&out32), "{what}: output");
        for (i, name) in ["keys", "values"].into_iter().enumerate() {
            let what = format!("{what}: {name}");
            check_cache(&what, &c16[i], &c32[i], &old[i], &rows[..m]);
        }
        let (half_out, c32_again) = fused(DType::F32, DType::F16)?;
        assert_eq!(halves(&half_out), halves(&out32), "{what}: f16 output");
        for (again, first) in c32_again.iter().zip(&c32) {
            let f32_bits = |t: &DeviceTensor| bits(&t.to_values().unwrap());
            assert_eq!(
                f32_bits(again),
                f32_bits(first),
                "{what}: caches, f16 output"
            );
        }
    }
    Ok(())
}

/// Cached attention's f64 reference for row `(s, p)` over caches laid
/// out `[slots, kvh, cap, hd]` (the row active).
fn reference(
    q: &[f64],
    [k, v]: [&[f64]; 2],
    (s, p): Row,
    shape: [usize; 4],
    scale: f64,
) -> Vec<f64> {
    let [_, kvh, cap, hd] = shape;
    let heads = q.len() / hd;
    let mut out = vec![0.0; heads * hd];
    for h in 0..heads {
        let base = (s as usize * kvh + h / (heads / kvh)) * cap;
        let qh = &q[h * hd..][..hd];
        let dot = |t: usize| -> f64 {
            qh.iter()
                .zip(&k[(base + t) * hd..])
                .map(|(a, b)| a * b)
                .sum()
        };
        let scores: Vec<f64> = (0..=p as usize).map(|t| scale * dot(t)).collect();
        let most = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|x| (x - most).exp()).collect();
        let total: f64 = e.iter().sum();
        for (t, et) in e.iter().enumerate() {
            for d in 0..hd {
                out[h * hd + d] += et / total * v[(base + t) * hd + d];
            }
        }
    }
    out
}

/// One graph storing the rows' new keys and values then attending (plain
/// or rotary), over f16 caches and over f32 caches given the same
/// (rounded) values: the outputs agree within 1e-5 of their magnitude,
/// inactive rows give zeros, and the plain attention is within the f64
/// reference's bound. `poison`: caches of 1e3 where nothing is stored.
fn attention_case(
    seed: u64,
    [heads, kvh, hd]: [usize; 3],
    (slots, cap): (usize, usize),
    rows: &[Row],
    scale: f64,
    (rotary, poison): (Option<Rotary>, bool),
) -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(seed);
    let (shape, n) = ([slots, kvh, cap, hd], rows.len());
    let csize = shape.iter().product();
    let old = [0, 1].map(|_| match poison {
        true => vec![1e3; csize],
        false => random_halves(&mut rng, csize),
    });
    let new = [0, 1].map(|_| random(&mut rng, n * kvh * hd, -1.0, 1.0));
    let q = random(&mut rng, n * heads * hd, -1.0, 1.0);
    let qt = strided(&q, [n, heads, hd], &mut rng);
    let (st, pt) = slots_positions(rows);
    let mut outs = Vec::new();
    for dtype in [DType::F16, DType::F32] {
        let caches = old.each_ref().map(|o| tensor(dtype, o, &shape));
        let news = new.each_ref().map(|v| match dtype {
            DType::F16 => f32s(v, vec![n, kvh, hd]),
            _ => f32s(&rounded(v), vec![n, kvh, hd]),
        });
        let poisoned = vec![f64::from(f32::MAX); n * heads * hd];
        let out = f32s(&poisoned, vec![n, heads, hd]);
        let mut g = ops.runtime().graph();
        for (v, c) in news.iter().zip(&caches) {
            ops.record_kv_store(&mut g, v, &st, &pt, c)?;
        }
        let ([kc, vc], s) = (&caches, scale as f32);
        match rotary {
            Some(r) => ops.record_rotary_attention(&mut g, &qt, r, kc, vc, &st, &pt, s, &out)?,
            None => ops.record_cached_attention(&mut g, &qt, kc, vc, &st, &pt, s, &out)?,
        }
        run(g, &[&qt, kc, vc, &news[0], &news[1], &st, &pt, &out])?;
        outs.push(out.to_values()?);
    }
    let (got, mirror) = (&outs[0], &outs[1]);
    let what = format!("{n} rows, heads {heads}/{kvh}, hd {hd}, {rotary:?}");
    let bound = |i: usize| 1e-5 * (1.0 + mirror[i].abs());
    check(
        &format!("{what}: f16 against f32 caches"),
        got,
        mirror,
        bound,
    );
    let width = heads * hd;
    for (r, row) in rows.iter().enumerate() {
        let out = &got[r * width..][..width];
        match active(row, shape) {
            true => assert!(out.iter().any(|&x| x != 0.0), "{what}: row {r} zeros"),
            false => assert!(out.iter().all(|&x| x == 0.0), "{what}: row {r} not zeros"),
        }
    }
    if rotary.is_none() {
        let [k, v] = [0, 1].map(|i| stored(&old[i], &rounded(&new[i]), rows, shape));
        let want: Vec<f64> = (0..n)
            .flat_map(|r| match active(&rows[r], shape) {
                true => reference(&q[r * width..][..width], [&k, &v], rows[r], shape, scale),
                false => vec![0.0; width],
            })
            .collect();
        check(&format!("{what}: f64 reference"), got, &want, |i| {
            2e-5 * (1.0 + want[i].abs())
        });
    }
    Ok(())
}

#[test]
fn attention_over_f16_caches_matches_f32_caches() -> Result<()> {
    let decode = [(2, 37), (0, 0), (3, 12), (-1, 5), (1, 40), (1, 31), (2, 1)];
    for (seed, rotary) in [(131, None), (132, Some(rot(64, 1e4)))] {
        attention_case(seed, [9, 3, 64], (4, 40), &decode, 0.125, (rotary, false))?;
    }
    let small = [(1, 69), (0, 3), (5, 2)];
    for (seed, rotary) in [(133, None), (134, Some(rot(4, 1e4)))] {
        attention_case(seed, [4, 2, 6], (2, 70), &small, 0.5, (rotary, false))?;
    }
    let two = [(1, 19), (0, 7)];
    attention_case(135, [2, 2, 256], (2, 20), &two, 0.06, (None, false))?;
    // A prefill: 41 rows of slot 1, their keys and values stored in the
    // graph that attends them (the rest of the caches poison).
    let prefill: Vec<Row> = (0..41).map(|p| (1, p)).collect();
    for (seed, rotary) in [(136, None), (137, Some(rot(32, 1e5)))] {
        attention_case(seed, [9, 3, 64], (3, 48), &prefill, 0.125, (rotary, true))?;
    }
    Ok(())
}

/// Rotary attention with the output projection over f16 caches against
/// f32 caches of the same values: the attended rows within 1e-5 of their
/// magnitude, the projection within the f64 reference's bound over them
/// and near the f32 caches' projection.
#[test]
fn projected_attention_over_f16_caches_matches_f32_caches() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(141);
    let (heads, kvh, hd) = (9, 3, 64);
    let (shape, cols) = ([3, kvh, 40, hd], heads * hd);
    let rotary = rot(hd, 1e5);
    let decode = [(2, 9), (0, 0), (-1, 3), (1, 39), (2, -4)];
    let prefill: Vec<Row> = (0..17).map(|p| (1, p + 3)).collect();
    let cases: [(&[Row], QuantFormat, usize); 3] = [
        (&[(2, 9)], QuantFormat::Q4_1, cols),
        (&decode, QuantFormat::F16, 200),
        (&prefill, QuantFormat::Q8_0, 96),
    ];
    for (rows, format, width) in cases {
        let what = format!("{} rows, {format:?} [{width}, {cols}]", rows.len());
        let n = rows.len();
        let values = [0, 1].map(|_| random_halves(&mut rng, shape.iter().product()));
        let q = f32s(&random(&mut rng, n * cols, -2.0, 2.0), vec![n, heads, hd]);
        let (w, wv) = matrix(format, width, cols, &mut rng);
        let residual = random(&mut rng, n * width, -4.0, 4.0);
        let rt = f32s(&residual, vec![n, width]);
        let (st, pt) = slots_positions(rows);
        let mut results = Vec::new();
        for dtype in [DType::F16, DType::F32] {
            let [kc, vc] = values.each_ref().map(|v| tensor(dtype, v, &shape));
            let out = ops.output(TensorDesc::new(DType::F32, vec![n, heads, hd])?)?;
            let h = ops.output(TensorDesc::new(DType::F32, vec![n, width])?)?;
            let projection = AttentionOutput {
                weight: &w,
                residual: &rt,
                out: &h,
            };
            let mut g = ops.runtime().graph();
            let inputs = [&kc, &vc, &st, &pt];
            let p = projection;
            ops.record_rotary_attention_projected(&mut g, &q, rotary, inputs, 0.125, &out, p)?;
            run(g, &[&q, &kc, &vc, &st, &pt, w.words(), &rt])?;
            results.push([out.to_values()?, h.to_values()?]);
        }
        let ([a16, h16], [a32, h32]) = (&results[0], &results[1]);
        let bound = |i: usize| 1e-5 * (1.0 + a32[i].abs());
        check(&format!("{what}: attended"), a16, a32, bound);
        assert!(a16.iter().any(|&x| x != 0.0), "{what}: nothing attended");
        for r in 0..n {
            let a = &a16[r * cols..(r + 1) * cols];
            for o in 0..width {
                let wr = &wv[o * cols..(o + 1) * cols];
                let dot: f64 = a.iter().zip(wr).map(|(x, y)| x * y).sum();
                let mag: f64 = a.iter().zip(wr).map(|(x, y)| (x * y).abs()).sum();
                let sum_w: f64 = wr.iter().map(|y| y.abs()).sum();
                let (res, at) = (residual[r * width + o], r * width + o);
                let (got, want) = (h16[at], res + dot);
                let bound = 1e-4 * (mag + res.abs()) + 1e-30;
                let at_ro = format!("{what}: h[{r}, {o}] = {got}");
                assert!((got - want).abs() <= bound, "{at_ro}, want {want}");
                let near = 1e-5 * (sum_w + 2.0 * mag + res.abs());
                let f32_run = h32[at];
                assert!(
                    (got - f32_run).abs() <= near,
                    "{at_ro}, {f32_run} with f32 caches"
                );
            }
        }
    }
    Ok(())
}

/// Record into a fresh graph: it must fail naming one of `names` (the
/// caches) and record nothing.
fn refused(what: &str, names: &[&str], record: impl FnOnce(&mut Graph) -> Result<()>) {
    let mut graph = ops().runtime().graph();
    let e = record(&mut graph).expect_err(what).to_string();
    let named = names.iter().any(|n| e.contains(n));
    assert!(named, "{what}: {e:?} names no cache");
    assert!(graph.is_empty(), "{what}: recorded {}", graph.len());
}

/// A mixed pair (f16 keys, f32 values, and the reverse) or caches of
/// another dtype are refused by every cache operator.
#[test]
fn mixed_and_other_cache_dtypes_are_refused() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(151);
    let t = |dtype, shape: &[usize]| ops.output(TensorDesc::new(dtype, shape.to_vec()).unwrap());
    use DType::{BF16, F16, F32, I32};
    let pair = ["k_cache", "v_cache"];
    let (seq, pos) = slots_positions(&[(0, 3), (1, 5)]);
    let (k, v, q, out) = (
        t(F32, &[2, 3, 64])?,
        t(F32, &[2, 3, 64])?,
        t(F32, &[2, 9, 64])?,
        t(F32, &[2, 9, 64])?,
    );
    let rotary = rot(64, 1e4);
    let (w, _) = matrix(QuantFormat::Q8_0, 64, 9 * 64, &mut rng);
    let (residual, h) = (t(F32, &[2, 64])?, t(F32, &[2, 64])?);
    let projection = AttentionOutput {
        weight: &w,
        residual: &residual,
        out: &h,
    };
    // The fused product: 16 query columns, then keys and values of 8.
    let (qkv, _) = matrix(QuantFormat::Q8_0, 32, 32, &mut rng);
    let (x, qkv_out) = (t(F32, &[2, 32])?, t(F32, &[2, 32])?);
    for dtype in [I32, BF16] {
        let what = format!("kv_store into {dtype:?}");
        let c = t(dtype, &[2, 3, 16, 64])?;
        refused(&what, &["cache"], |g| {
            ops.record_kv_store(g, &k, &seq, &pos, &c)
        });
    }
    for (kd, vd) in [
        (F16, F32),
        (F32, F16),
        (I32, I32),
        (BF16, BF16),
        (F16, I32),
        (F32, BF16),
    ] {
        let what = |op: &str| format!("{op} over {kd:?} keys, {vd:?} values");
        let (kc, vc) = (t(kd, &[2, 3, 16, 64])?, t(vd, &[2, 3, 16, 64])?);
        refused(&what("rope_kv_store"), &pair, |g| {
            ops.record_rope_kv_store(g, &k, &v, &seq, &pos, 64, 1e4, &kc, &vc)
        });
        refused(&what("cached_attention"), &pair, |g| {
            ops.record_cached_attention(g, &q, &kc, &vc, &seq, &pos, 0.1, &out)
        });
        refused(&what("rotary_attention"), &pair, |g| {
            ops.record_rotary_attention(g, &q, rotary, &kc, &vc, &seq, &pos, 0.1, &out)
        });
        refused(&what("projected attention"), &pair, |g| {
            let inputs = [&kc, &vc, &seq, &pos];
            ops.record_rotary_attention_projected(g, &q, rotary, inputs, 0.1, &out, projection)
        });
        assert!(ops.cached_attention(&q, &kc, &vc, &seq, &pos, 0.1).is_err());
        let (kc, vc) = (t(kd, &[2, 1, 4, 8])?, t(vd, &[2, 1, 4, 8])?);
        let store = KvStore {
            query_width: 16,
            sequence: &seq,
            position: &pos,
            rotary: rot(8, 1e4),
            k_cache: &kc,
            v_cache: &vc,
        };
        let fusion = QuantFusion {
            kv_store: Some(store),
            ..QuantFusion::default()
        };
        refused(&what("fused cache store"), &pair, |g| {
            ops.record_quant_matmul_fused(g, &x, &qkv, &fusion, &qkv_out)
        });
    }
    Ok(())
}
