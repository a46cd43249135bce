//! The attention-side operators of a decoder engine (RoPE, key/value cache
//! store, cached causal attention, SwiGLU) against f64 references on
//! seeded random data: strided inputs, inactive rows (slots and positions
//! out of range), grouped-query heads, decode-like rows from several
//! slots, a prefill whose cache is written in the same graph the
//! attention reads it (ordering by declared accesses), the fused RoPE and
//! cache store and the rotary attention bit for bit against the operators
//! they replace, and the errors of bad operands.

use hrx_runtime::{Edge, Graph, Hazard, Operation, Runtime, RuntimeOptions};
use hrx_tensor::ops::{Rotary, Tuning};
use hrx_tensor::{DType, DeviceTensor, Ops, Result, TensorDesc};

/// The operator library on a runtime opened as the environment says
/// (validation layers where the CI sets them).
fn ops() -> Ops {
    let runtime = Runtime::with_options(RuntimeOptions::from_env().expect("options"));
    Ops::new(&runtime.expect("runtime"))
}

/// A small deterministic generator (xorshift64*).
struct Gen(u64);

impl Gen {
    fn new(seed: u64) -> Self {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi), rounded to f32 (so the reference sees exactly
    /// what the device holds).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let v = lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64);
        f64::from(v as f32)
    }
    fn values(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

fn f32s(ops: &Ops, shape: &[usize], values: &[f64]) -> DeviceTensor {
    DeviceTensor::from_values(ops.runtime(), DType::F32, shape.to_vec(), values).unwrap()
}

fn i32s(ops: &Ops, values: &[i32]) -> DeviceTensor {
    let v: Vec<f64> = values.iter().map(|&x| f64::from(x)).collect();
    DeviceTensor::from_values(ops.runtime(), DType::I32, vec![v.len()], &v).unwrap()
}

/// `values` of shape `shape` uploaded as the middle of a wider tensor
/// (one extra slice before and after on `axis`), so the view is strided
/// and starts inside its storage. Returns the view.
fn strided(ops: &Ops, shape: &[usize], axis: usize, values: &[f64], rng: &mut Gen) -> DeviceTensor {
    let mut wide = shape.to_vec();
    wide[axis] += 2;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut all = Vec::new();
    for o in 0..outer {
        all.extend(rng.values(inner, -9.0, 9.0));
        let start = o * shape[axis] * inner;
        all.extend(&values[start..start + shape[axis] * inner]);
        all.extend(rng.values(inner, -9.0, 9.0));
    }
    f32s(ops, &wide, &all)
        .slice(axis, 1..shape[axis] + 1)
        .unwrap()
}

/// Run `graph` after the producers of `inputs` and wait.
fn run(graph: Graph, inputs: &[&DeviceTensor]) -> Result<()> {
    let deps: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
    graph.prepare()?.submit_after(&deps)?.wait()
}

/// f32 unit roundoff.
const U: f64 = f32::EPSILON as f64 / 2.0;

/// RoPE reference: `(out, bound)` per element.
fn rope_ref(
    x: &[f64],
    shape: [usize; 3],
    pos: &[i32],
    rope_dims: usize,
    base: f64,
) -> (Vec<f64>, Vec<f64>) {
    let [rows, heads, hd] = shape;
    let mut out = x.to_vec();
    let mut bound = vec![0.0; x.len()];
    for (r, &p) in pos.iter().enumerate().take(rows) {
        if p < 0 {
            continue;
        }
        for h in 0..heads {
            let row = (r * heads + h) * hd;
            for i in 0..rope_dims / 2 {
                let expo = 2.0 * i as f64 / rope_dims as f64;
                let angle = f64::from(p) * base.powf(-expo);
                let (x0, x1) = (x[row + 2 * i], x[row + 2 * i + 1]);
                out[row + 2 * i] = x0 * angle.cos() - x1 * angle.sin();
                out[row + 2 * i + 1] = x0 * angle.sin() + x1 * angle.cos();
                // The angle in f32: the exponent's rounding, exp (3 + 2|t|
                // ULP), the products; then the reduction and series.
                let t = expo * base.ln();
                let angle_err = angle * (3.5 + 3.0 * t) * 2.0 * U + 1e-6;
                let b = (x0.abs() + x1.abs()) * (angle_err + 16.0 * U) + 1e-7;
                bound[row + 2 * i] = b;
                bound[row + 2 * i + 1] = b;
            }
        }
    }
    (out, bound)
}

fn check(what: &str, got: &[f64], want: &[f64], bound: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= bound(i),
            "{what}: element {i}: got {g}, want {w} (bound {})",
            bound(i)
        );
    }
}

#[test]
fn rope_matches_reference() -> Result<()> {
    let ops = ops();
    let cases: [([usize; 3], usize, f64, bool); 4] = [
        ([5, 3, 8], 8, 1e4, false),
        ([6, 2, 64], 32, 1e5, true),
        ([3, 9, 64], 64, 1e4, true),
        ([2, 1, 6], 4, 100.0, false),
    ];
    for (case, (shape, rope_dims, base, stride)) in cases.into_iter().enumerate() {
        let mut rng = Gen::new(11 + case as u64);
        let n = shape.iter().product();
        let x = rng.values(n, -2.0, 2.0);
        let pos: Vec<i32> = [4000, -1, 0, 1, 4095, 17, 2047, -5]
            .into_iter()
            .cycle()
            .skip(case)
            .take(shape[0])
            .collect();
        let xt = if stride {
            strided(&ops, &shape, 1, &x, &mut rng)
        } else {
            f32s(&ops, &shape, &x)
        };
        let pt = i32s(&ops, &pos);
        let got = ops.rope(&xt, &pt, rope_dims, base as f32)?.to_values()?;
        let (want, bound) = rope_ref(&x, shape, &pos, rope_dims, f64::from(base as f32));
        check(&format!("rope case {case}"), &got, &want, |i| bound[i]);
    }
    Ok(())
}

#[test]
fn kv_store_writes_active_rows_only() -> Result<()> {
    let ops = ops();
    for (case, hd) in [64usize, 5].into_iter().enumerate() {
        let mut rng = Gen::new(21 + case as u64);
        let (slots, kvh, cap) = (3, 3, 10);
        let csize = slots * kvh * cap * hd;
        let old = rng.values(csize, -1.0, 1.0);
        // Active: (2, 9), (0, 0), (1, 4); inactive: slot -1, slot 3 (=
        // slots), position 10 (= capacity), position -2.
        let seq = [2, 0, -1, 1, 3, 0, 1];
        let pos = [9, 0, 3, 4, 1, 10, -2];
        let rows = seq.len();
        let new = rng.values(rows * kvh * hd, -1.0, 1.0);
        let nt = strided(&ops, &[rows, kvh, hd], 1, &new, &mut rng);
        let mut cache = f32s(&ops, &[slots, kvh, cap, hd], &old);
        ops.kv_store(&nt, &i32s(&ops, &seq), &i32s(&ops, &pos), &mut cache)?;
        let mut want = old.clone();
        for r in 0..rows {
            let (s, p) = (seq[r], pos[r]);
            if !(0..slots as i32).contains(&s) || !(0..cap as i32).contains(&p) {
                continue;
            }
            for h in 0..kvh {
                let at = ((s as usize * kvh + h) * cap + p as usize) * hd;
                want[at..at + hd].copy_from_slice(&new[(r * kvh + h) * hd..][..hd]);
            }
        }
        let got = cache.to_values()?;
        check(&format!("kv_store hd={hd}"), &got, &want, |_| 0.0);
    }
    Ok(())
}

/// Cached attention reference for row `(seq, pos)` and head `h` over
/// `cache[s][g][p][d]` laid out `[slots, kvh, cap, hd]`.
struct Attention<'a> {
    k: &'a [f64],
    v: &'a [f64],
    kvh: usize,
    cap: usize,
    hd: usize,
    heads: usize,
    slots: usize,
}

impl Attention<'_> {
    fn row(&self, q: &[f64], seq: i32, pos: i32, scale: f64) -> Vec<f64> {
        let hd = self.hd;
        let mut out = vec![0.0; self.heads * hd];
        if !(0..self.slots as i32).contains(&seq) || !(0..self.cap as i32).contains(&pos) {
            return out;
        }
        let group = self.heads / self.kvh;
        for h in 0..self.heads {
            let g = h / group;
            let base = (seq as usize * self.kvh + g) * self.cap;
            let qh = &q[h * hd..][..hd];
            let scores: Vec<f64> = (0..=pos as usize)
                .map(|p| {
                    let kr = &self.k[(base + p) * hd..][..hd];
                    scale * qh.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>()
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = w.iter().sum();
            for (p, wp) in w.iter().enumerate() {
                let vr = &self.v[(base + p) * hd..][..hd];
                for d in 0..hd {
                    out[h * hd + d] += wp / total * vr[d];
                }
            }
        }
        out
    }
}

/// A decode-like step in one graph: each row's new K/V stored at its slot
/// and position, then attention over the caches (rows from different
/// slots at different positions, inactive ones among them), into an
/// output filled with poison first. The attention's workgroup size.
fn decode_case(
    ops: &Ops,
    seed: u64,
    [heads, kvh, hd]: [usize; 3],
    (slots, cap): (usize, usize),
    rows: &[(i32, i32)],
    scale: f64,
) -> Result<u32> {
    let mut rng = Gen::new(seed);
    let csize = slots * kvh * cap * hd;
    let mut kc = rng.values(csize, -1.0, 1.0);
    let mut vc = rng.values(csize, -1.0, 1.0);
    let n = rows.len();
    let q = rng.values(n * heads * hd, -1.0, 1.0);
    let kn = rng.values(n * kvh * hd, -1.0, 1.0);
    let vn = rng.values(n * kvh * hd, -1.0, 1.0);
    let seq: Vec<i32> = rows.iter().map(|r| r.0).collect();
    let pos: Vec<i32> = rows.iter().map(|r| r.1).collect();
    let (kt, vt) = (
        f32s(ops, &[slots, kvh, cap, hd], &kc),
        f32s(ops, &[slots, kvh, cap, hd], &vc),
    );
    let qt = strided(ops, &[n, heads, hd], 1, &q, &mut rng);
    let (knt, vnt) = (f32s(ops, &[n, kvh, hd], &kn), f32s(ops, &[n, kvh, hd], &vn));
    let (st, pt) = (i32s(ops, &seq), i32s(ops, &pos));
    let poison = vec![f64::from(f32::MAX); n * heads * hd];
    let out = f32s(ops, &[n, heads, hd], &poison);
    let mut graph = ops.runtime().graph();
    ops.record_kv_store(&mut graph, &knt, &st, &pt, &kt)?;
    ops.record_kv_store(&mut graph, &vnt, &st, &pt, &vt)?;
    ops.record_cached_attention(&mut graph, &qt, &kt, &vt, &st, &pt, scale as f32, &out)?;
    let workgroup = match graph.operations().last() {
        Some(Operation::Dispatch { kernel, .. }) => kernel.contract().workgroup_size[0],
        other => panic!("expected the attention's dispatch last, recorded {other:?}"),
    };
    run(graph, &[&kt, &vt, &qt, &knt, &vnt, &st, &pt, &out])?;
    for (r, &(s, p)) in rows.iter().enumerate() {
        if (0..slots as i32).contains(&s) && (0..cap as i32).contains(&p) {
            for h in 0..kvh {
                let at = ((s as usize * kvh + h) * cap + p as usize) * hd;
                kc[at..at + hd].copy_from_slice(&kn[(r * kvh + h) * hd..][..hd]);
                vc[at..at + hd].copy_from_slice(&vn[(r * kvh + h) * hd..][..hd]);
            }
        }
    }
    let reference = Attention {
        k: &kc,
        v: &vc,
        kvh,
        cap,
        hd,
        heads,
        slots,
    };
    let want: Vec<f64> = rows
        .iter()
        .enumerate()
        .flat_map(|(r, &(s, p))| reference.row(&q[r * heads * hd..][..heads * hd], s, p, scale))
        .collect();
    let got = out.to_values()?;
    check(
        &format!("decode heads={heads}/{kvh} hd={hd}"),
        &got,
        &want,
        |i| 2e-5 * (1.0 + want[i].abs()),
    );
    Ok(workgroup)
}

#[test]
fn cached_attention_decode_matches_reference() -> Result<()> {
    let ops = ops();
    let rows = [(2, 37), (0, 0), (3, 12), (-1, 5), (1, 40), (1, 31), (2, 1)];
    decode_case(&ops, 31, [9, 3, 64], (4, 40), &rows, 0.125)?;
    // Peaked scores: the running maximum grows across chunks.
    decode_case(&ops, 32, [9, 3, 64], (4, 40), &rows, 3.0)?;
    // Head sizes without vector loads, smaller than a subgroup, and not
    // a multiple of one.
    decode_case(
        &ops,
        33,
        [4, 2, 6],
        (2, 70),
        &[(1, 69), (0, 3), (5, 2)],
        0.5,
    )?;
    decode_case(&ops, 35, [2, 2, 256], (2, 20), &[(1, 19), (0, 7)], 0.06)?;
    Ok(())
}

/// Workgroups of a forced size (`Tuning::attention_workgroup`, here larger
/// than the built-in one of a CPU device, so more subgroups merge their
/// states) give the same rows.
#[test]
fn cached_attention_with_a_forced_workgroup_matches_reference() -> Result<()> {
    let ops = ops();
    let rows = [(2, 37), (0, 0), (3, 12), (-1, 5), (1, 69), (1, 31), (2, 1)];
    for (i, size) in [32, 64, 256].into_iter().enumerate() {
        let tuned = ops.clone().with_tuning(Tuning {
            attention_workgroup: Some(size),
            ..ops.tuning()
        });
        let ran = decode_case(&tuned, 36 + i as u64, [9, 3, 64], (4, 70), &rows, 0.125)?;
        assert_eq!(ran, size as u32, "the forced workgroup of {size}");
    }
    Ok(())
}

/// A prefill: the rows of one sequence at positions 0..n, their K/V stored
/// and attended in the same graph, equals full causal attention over the
/// new K/V (the cache starts as poison beyond what the graph writes).
#[test]
fn cached_attention_prefill_is_causal() -> Result<()> {
    let ops = ops();
    let (heads, kvh, hd, slots, cap, n, slot) = (9, 3, 64, 3, 48, 41, 1);
    let mut rng = Gen::new(41);
    let csize = slots * kvh * cap * hd;
    let poison = vec![1e3; csize];
    let (kt, vt) = (
        f32s(&ops, &[slots, kvh, cap, hd], &poison),
        f32s(&ops, &[slots, kvh, cap, hd], &poison),
    );
    let q = rng.values(n * heads * hd, -1.0, 1.0);
    let kn = rng.values(n * kvh * hd, -1.0, 1.0);
    let vn = rng.values(n * kvh * hd, -1.0, 1.0);
    let (qt, knt, vnt) = (
        f32s(&ops, &[n, heads, hd], &q),
        f32s(&ops, &[n, kvh, hd], &kn),
        f32s(&ops, &[n, kvh, hd], &vn),
    );
    let st = i32s(&ops, &vec![slot; n]);
    let pt = i32s(&ops, &(0..n as i32).collect::<Vec<_>>());
    let out = ops.output(TensorDesc::new(DType::F32, vec![n, heads, hd])?)?;
    let scale = 1.0 / (hd as f64).sqrt();
    let mut graph = ops.runtime().graph();
    ops.record_kv_store(&mut graph, &knt, &st, &pt, &kt)?;
    ops.record_kv_store(&mut graph, &vnt, &st, &pt, &vt)?;
    ops.record_cached_attention(&mut graph, &qt, &kt, &vt, &st, &pt, scale as f32, &out)?;
    assert_eq!(graph.len(), 3);
    let prepared = graph.prepare()?;
    // The attention (operation 2) waits for both stores: the caches are
    // declared written by the stores and read by the attention.
    let edges: Vec<Edge> = prepared
        .barriers()
        .iter()
        .flat_map(|b| b.edges().to_vec())
        .collect();
    for from in [0, 1] {
        let edge = Edge {
            from,
            to: 2,
            hazard: Hazard::ReadAfterWrite,
        };
        assert!(edges.contains(&edge), "{edge:?} missing from {edges:?}");
    }
    let deps: Vec<_> = [&kt, &vt, &qt, &knt, &vnt, &st, &pt]
        .iter()
        .map(|t| t.completion().clone())
        .collect();
    prepared.submit_after(&deps)?.wait()?;
    // Full causal attention over the new rows, as a one-slot cache.
    let reference = Attention {
        k: &kn,
        v: &vn,
        kvh,
        cap: n,
        hd,
        heads,
        slots: 1,
    };
    let regroup = |x: &[f64]| -> Vec<f64> {
        // [n, kvh, hd] -> [kvh, n, hd], the cache layout of one slot.
        let mut y = vec![0.0; x.len()];
        for p in 0..n {
            for g in 0..kvh {
                y[(g * n + p) * hd..][..hd].copy_from_slice(&x[(p * kvh + g) * hd..][..hd]);
            }
        }
        y
    };
    let (kr, vr) = (regroup(&kn), regroup(&vn));
    let reference = Attention {
        k: &kr,
        v: &vr,
        ..reference
    };
    let want: Vec<f64> = (0..n)
        .flat_map(|p| reference.row(&q[p * heads * hd..][..heads * hd], 0, p as i32, scale))
        .collect();
    let got = out.to_values()?;
    check("prefill", &got, &want, |i| 2e-5 * (1.0 + want[i].abs()));
    Ok(())
}

#[test]
fn swiglu_matches_reference() -> Result<()> {
    let ops = ops();
    for (case, (rows, width)) in [(3usize, 10usize), (1, 1), (7, 300)]
        .into_iter()
        .enumerate()
    {
        let mut rng = Gen::new(51 + case as u64);
        let gate = rng.values(rows * width, -12.0, 12.0);
        let up = rng.values(rows * width, -3.0, 3.0);
        // gate and up as the halves of one fused projection.
        let fused: Vec<f64> = (0..rows)
            .flat_map(|r| {
                gate[r * width..][..width]
                    .iter()
                    .chain(&up[r * width..][..width])
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect();
        let ft = f32s(&ops, &[rows, 2 * width], &fused);
        let (gt, ut) = (ft.slice(1, 0..width)?, ft.slice(1, width..2 * width)?);
        let got = ops.swiglu(&gt, &ut)?.to_values()?;
        let want: Vec<f64> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        check(&format!("swiglu {rows}x{width}"), &got, &want, |i| {
            let g = gate[i];
            let sig = 1.0 / (1.0 + (-g).exp());
            let exp_err = (3.0 + 2.0 * g.abs()) * 2.0 * U;
            want[i].abs() * ((1.0 - sig) * exp_err + 10.0 * U) + 1e-30
        });
    }
    Ok(())
}

/// The fused RoPE and cache store against rope then two kv_stores in one
/// graph: the same bits in both caches (rows of other slots and positions
/// untouched), and the keys within the f64 reference's bound, on
/// grouped-query shapes with strided keys and values: decode-like rows of
/// several slots (inactive ones among them: slot -1, slot = slots,
/// position = capacity, a negative position), a prefill of 20 rows of one
/// slot, and keys and values as views of one buffer.
#[test]
fn rope_kv_store_equals_rope_then_kv_store() -> Result<()> {
    let ops = ops();
    let (slots, kvh, cap, hd) = (3, 3, 32, 64);
    let decode = vec![
        (2, 9),
        (0, 0),
        (-1, 3),
        (1, 4),
        (3, 1),
        (0, 32),
        (1, -2),
        (2, 31),
    ];
    let prefill: Vec<(i32, i32)> = (0..20).map(|p| (1, p + 7)).collect();
    // The last flag takes k and v as two views of one buffer, as a fused
    // projection's output gives them.
    let cases = [
        (decode.clone(), 64, 1e4, false),
        (decode.clone(), 32, 1e5, false),
        (prefill, 64, 1e4, false),
        (decode, 64, 1e4, true),
    ];
    for (case, (rows, rope_dims, base, shared)) in cases.into_iter().enumerate() {
        let mut rng = Gen::new(70 + case as u64);
        let n = rows.len();
        let shape = [n, kvh, hd];
        let csize = slots * kvh * cap * hd;
        let (old_k, old_v) = (rng.values(csize, -1.0, 1.0), rng.values(csize, -1.0, 1.0));
        let (k, v) = (
            rng.values(n * kvh * hd, -2.0, 2.0),
            rng.values(n * kvh * hd, -2.0, 2.0),
        );
        let (kt, vt) = if shared {
            let both: Vec<f64> = k
                .chunks(hd)
                .zip(v.chunks(hd))
                .flat_map(|(a, b)| a.iter().chain(b).copied())
                .collect();
            let t = f32s(&ops, &[n, kvh, 2 * hd], &both);
            (t.slice(2, 0..hd)?, t.slice(2, hd..2 * hd)?)
        } else {
            (
                strided(&ops, &shape, 1, &k, &mut rng),
                strided(&ops, &shape, 2, &v, &mut rng),
            )
        };
        let seq: Vec<i32> = rows.iter().map(|r| r.0).collect();
        let pos: Vec<i32> = rows.iter().map(|r| r.1).collect();
        let (st, pt) = (i32s(&ops, &seq), i32s(&ops, &pos));
        let cache = |values: &[f64]| f32s(&ops, &[slots, kvh, cap, hd], values);
        let (kc_sep, vc_sep) = (cache(&old_k), cache(&old_v));
        let (kc_fused, vc_fused) = (cache(&old_k), cache(&old_v));
        let rotated = ops.output(TensorDesc::new(DType::F32, shape.to_vec())?)?;
        let b = base as f32;

        let mut graph = ops.runtime().graph();
        ops.record_rope(&mut graph, &kt, &pt, rope_dims, b, &rotated)?;
        ops.record_kv_store(&mut graph, &rotated, &st, &pt, &kc_sep)?;
        ops.record_kv_store(&mut graph, &vt, &st, &pt, &vc_sep)?;
        run(graph, &[&kt, &vt, &st, &pt, &kc_sep, &vc_sep, &rotated])?;
        let mut graph = ops.runtime().graph();
        ops.record_rope_kv_store(
            &mut graph, &kt, &vt, &st, &pt, rope_dims, b, &kc_fused, &vc_fused,
        )?;
        run(graph, &[&kt, &vt, &st, &pt, &kc_fused, &vc_fused])?;

        let bits = |t: &DeviceTensor| -> Result<Vec<u32>> {
            Ok(t.to_values()?
                .iter()
                .map(|&x| (x as f32).to_bits())
                .collect())
        };
        let what = format!("rope_kv_store case {case}");
        assert_eq!(bits(&kc_fused)?, bits(&kc_sep)?, "{what}: k_cache bits");
        assert_eq!(bits(&vc_fused)?, bits(&vc_sep)?, "{what}: v_cache bits");

        let (rk, bound) = rope_ref(&k, shape, &pos, rope_dims, f64::from(b));
        let (mut want_k, mut want_v) = (old_k.clone(), old_v.clone());
        let mut want_bound = vec![0.0; csize];
        for (r, &(s, p)) in rows.iter().enumerate() {
            if !(0..slots as i32).contains(&s) || !(0..cap as i32).contains(&p) {
                continue;
            }
            for h in 0..kvh {
                let at = ((s as usize * kvh + h) * cap + p as usize) * hd;
                let from = (r * kvh + h) * hd;
                want_k[at..at + hd].copy_from_slice(&rk[from..from + hd]);
                want_bound[at..at + hd].copy_from_slice(&bound[from..from + hd]);
                want_v[at..at + hd].copy_from_slice(&v[from..from + hd]);
            }
        }
        check(&format!("{what} k"), &kc_fused.to_values()?, &want_k, |i| {
            want_bound[i]
        });
        check(
            &format!("{what} v"),
            &vc_fused.to_values()?,
            &want_v,
            |_| 0.0,
        );
    }
    Ok(())
}

/// Attention that turns q as it reads it equals `rope` then attention, bit
/// for bit: decode rows of several slots (inactive and negative positions
/// among them), a prefill, a strided q, partial rotation.
#[test]
fn rotary_attention_equals_rope_then_attention() -> Result<()> {
    let ops = ops();
    let (heads, kvh, hd, slots, cap) = (9, 3, 64, 3, 40);
    let decode = vec![(2, 9), (0, 0), (-1, 3), (1, 39), (2, -4), (0, 40)];
    let prefill: Vec<(i32, i32)> = (0..17).map(|p| (1, p + 3)).collect();
    for (case, (rows, rope_dims, base)) in [
        (decode.clone(), 64, 1e5),
        (prefill, 64, 1e4),
        (decode, 32, 1e4),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = Gen::new(90 + case as u64);
        let n = rows.len();
        let csize = slots * kvh * cap * hd;
        let kt = f32s(&ops, &[slots, kvh, cap, hd], &rng.values(csize, -1.0, 1.0));
        let vt = f32s(&ops, &[slots, kvh, cap, hd], &rng.values(csize, -1.0, 1.0));
        let q = rng.values(n * heads * hd, -2.0, 2.0);
        let qt = strided(&ops, &[n, heads, hd], 1, &q, &mut rng);
        let seq: Vec<i32> = rows.iter().map(|r| r.0).collect();
        let pos: Vec<i32> = rows.iter().map(|r| r.1).collect();
        let (st, pt) = (i32s(&ops, &seq), i32s(&ops, &pos));
        let shape = TensorDesc::new(DType::F32, vec![n, heads, hd])?;
        let (turned, separate, fused) = (
            ops.output(shape.clone())?,
            ops.output(shape.clone())?,
            ops.output(shape)?,
        );
        let scale = 0.125;
        let mut graph = ops.runtime().graph();
        ops.record_rope(&mut graph, &qt, &pt, rope_dims, base, &turned)?;
        ops.record_cached_attention(&mut graph, &turned, &kt, &vt, &st, &pt, scale, &separate)?;
        run(graph, &[&qt, &kt, &vt, &st, &pt, &turned, &separate])?;
        let rotary = Rotary {
            dims: rope_dims,
            base,
        };
        let mut graph = ops.runtime().graph();
        ops.record_rotary_attention(&mut graph, &qt, rotary, &kt, &vt, &st, &pt, scale, &fused)?;
        run(graph, &[&qt, &kt, &vt, &st, &pt, &fused])?;
        let bits = |t: &DeviceTensor| -> Result<Vec<u32>> {
            Ok(t.to_values()?
                .iter()
                .map(|&x| (x as f32).to_bits())
                .collect())
        };
        assert_eq!(
            bits(&fused)?,
            bits(&separate)?,
            "rotary attention case {case}"
        );
        // Some row attended (the comparison is not of zeros alone).
        assert!(separate.to_values()?.iter().any(|&x| x != 0.0));
    }
    // Its checks: those of the attention and of rope's parameters.
    let f = |shape: &[usize]| ops.output(TensorDesc::new(DType::F32, shape.to_vec()).unwrap());
    let i = |n: usize| ops.output(TensorDesc::new(DType::I32, vec![n]).unwrap());
    let (q, kc, vc, seq, pos, out) = (
        f(&[2, 9, 64])?,
        f(&[2, 3, 16, 64])?,
        f(&[2, 3, 16, 64])?,
        i(2)?,
        i(2)?,
        f(&[2, 9, 64])?,
    );
    for (dims, base, words) in [
        (63, 1e4, "rope_dims"),
        (66, 1e4, "rope_dims"),
        (64, f32::NAN, "base"),
        (64, -1.0, "base"),
    ] {
        let mut graph = ops.runtime().graph();
        let rotary = Rotary { dims, base };
        let e = ops
            .record_rotary_attention(&mut graph, &q, rotary, &kc, &vc, &seq, &pos, 0.1, &out)
            .expect_err(words)
            .to_string();
        assert!(e.contains(words) && e.contains("rotary_attention"), "{e:?}");
    }
    Ok(())
}

/// The fused operator's checks: those of rope and kv_store, the shapes of
/// v and the value cache, and caches that overlap.
#[test]
fn rope_kv_store_refuses_bad_operands() -> Result<()> {
    let ops = ops();
    let f = |shape: &[usize]| ops.output(TensorDesc::new(DType::F32, shape.to_vec()).unwrap());
    let i = |n: usize| ops.output(TensorDesc::new(DType::I32, vec![n]).unwrap());
    let (k, v, seq, pos) = (f(&[4, 3, 64])?, f(&[4, 3, 64])?, i(4)?, i(4)?);
    let (kc, vc) = (f(&[2, 3, 16, 64])?, f(&[2, 3, 16, 64])?);
    type Case<'a> = (
        &'a DeviceTensor,
        &'a DeviceTensor,
        &'a DeviceTensor,
        usize,
        f32,
    );
    let fail = |(k, v, s, rope_dims, base): Case,
                k_cache: &DeviceTensor,
                v_cache: &DeviceTensor,
                words: &str| {
        let mut graph = ops.runtime().graph();
        let e = ops
            .record_rope_kv_store(&mut graph, k, v, s, &pos, rope_dims, base, k_cache, v_cache)
            .expect_err(words)
            .to_string();
        assert!(e.contains(words), "{e:?} lacks {words:?}");
        assert!(e.contains("rope_kv_store"), "{e:?} lacks the operator");
    };
    let ok: Case = (&k, &v, &seq, 64, 1e4);
    fail((&k, &v, &seq, 63, 1e4), &kc, &vc, "rope_dims");
    fail((&k, &v, &seq, 66, 1e4), &kc, &vc, "rope_dims");
    fail((&k, &v, &seq, 64, f32::NAN), &kc, &vc, "base");
    fail(
        (&k, &f(&[4, 3, 32])?, &seq, 64, 1e4),
        &kc,
        &vc,
        "shape of k",
    );
    fail((&k, &v, &f(&[4])?, 64, 1e4), &kc, &vc, "sequence");
    fail((&k, &v, &i(5)?, 64, 1e4), &kc, &vc, "sequence");
    fail((&f(&[4, 192])?, &v, &seq, 64, 1e4), &kc, &vc, "rank 3");
    fail(ok, &f(&[2, 4, 16, 64])?, &vc, "k_cache");
    fail(ok, &kc, &f(&[2, 3, 8, 64])?, "shape of k_cache");
    let wide = f(&[2, 3, 16, 128])?;
    fail(ok, &kc, &wide.slice(3, 0..64)?, "contiguous");
    fail(ok, &kc, &kc, "overlap");
    fail(
        ok,
        &k.reshape(vec![1, 3, 4, 64])?,
        &f(&[1, 3, 4, 64])?,
        "overlap",
    );
    fail(
        ok,
        &f(&[1, 3, 4, 64])?,
        &v.reshape(vec![1, 3, 4, 64])?,
        "overlap",
    );
    Ok(())
}

#[test]
fn bad_operands_are_refused() -> Result<()> {
    let ops = ops();
    let f = |shape: &[usize]| ops.output(TensorDesc::new(DType::F32, shape.to_vec()).unwrap());
    let i = |n: usize| ops.output(TensorDesc::new(DType::I32, vec![n]).unwrap());
    let x = f(&[4, 9, 64])?;
    let pos = i(4)?;
    let fail = |r: Result<DeviceTensor>, words: &str| {
        let e = r.expect_err(words).to_string();
        assert!(e.contains(words), "{e:?} lacks {words:?}");
    };
    fail(ops.rope(&x, &f(&[4])?, 64, 1e4), "rope");
    fail(ops.rope(&x, &i(3)?, 64, 1e4), "position");
    fail(ops.rope(&x, &pos, 63, 1e4), "rope_dims");
    fail(ops.rope(&x, &pos, 66, 1e4), "rope_dims");
    fail(ops.rope(&x, &pos, 64, 0.0), "base");
    fail(ops.rope(&f(&[4, 576])?, &pos, 64, 1e4), "rank 3");
    let mut graph = ops.runtime().graph();
    let err = ops
        .record_rope(&mut graph, &x, &pos, 64, 1e4, &x)
        .expect_err("alias");
    assert!(err.to_string().contains("overlap"), "{err}");

    let k = f(&[2, 3, 16, 64])?;
    let mut cache = f(&[2, 3, 16, 64])?;
    let new = f(&[4, 3, 64])?;
    assert!(
        ops.kv_store(&new, &pos, &pos, &mut f(&[2, 4, 16, 64])?)
            .is_err()
    );
    assert!(ops.kv_store(&new, &f(&[4])?, &pos, &mut cache).is_err());
    assert!(
        ops.kv_store(&f(&[4, 3, 32])?, &pos, &pos, &mut cache)
            .is_err()
    );

    fail(
        ops.cached_attention(&x, &k, &k, &f(&[4])?, &pos, 0.1),
        "sequence",
    );
    fail(
        ops.cached_attention(&x, &k, &k, &pos, &i(5)?, 0.1),
        "position",
    );
    fail(ops.cached_attention(&x, &x, &x, &pos, &pos, 0.1), "rank 4");
    fail(
        ops.cached_attention(&f(&[4, 8, 64])?, &k, &k, &pos, &pos, 0.1),
        "multiple",
    );
    fail(
        ops.cached_attention(&f(&[4, 6, 64])?, &k, &f(&[2, 3, 15, 64])?, &pos, &pos, 0.1),
        "v_cache",
    );
    let big = f(&[1, 3, 1, 512])?;
    fail(
        ops.cached_attention(&f(&[1, 3, 512])?, &big, &big, &i(1)?, &i(1)?, 0.1),
        "head_dim",
    );
    fail(
        ops.cached_attention(&f(&[4, 6, 64])?, &k, &k, &pos, &pos, f32::NAN),
        "scale",
    );
    fail(ops.swiglu(&f(&[3, 4])?, &f(&[3, 5])?), "swiglu");
    fail(ops.swiglu(&f(&[3, 4, 1])?, &f(&[3, 4, 1])?), "rank 2");
    // Empty operands record nothing and succeed.
    let empty = f(&[0, 6, 64])?;
    let none = i(0)?;
    assert_eq!(
        ops.cached_attention(&empty, &k, &k, &none, &none, 0.1)?
            .desc()
            .shape(),
        [0, 6, 64]
    );
    Ok(())
}
