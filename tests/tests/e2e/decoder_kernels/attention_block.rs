//! The attention half of a decoder block in one dispatch
//! (`record_attention_block`) against an f64 reference: the norm, the
//! query-key-value product, RoPE, the cache store (only the rows' own
//! entries change), attention over the earlier positions and the row's
//! own, and the output projection with the residual; decode rows of
//! several slots with inactive ones and a row at position 0; x aligned
//! and not; replays; and the refusals.

use super::quant::{Gen, f32s, i32s, matrix, ops, random, refused, x_tensor};
use hrx_runtime::Graph;
use hrx_tensor::ops::{AttentionInput, AttentionOutput, QuantFormat, QuantMatrix, Rotary, RowNorm};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HD: usize = 64;
const SLOTS: usize = 3;
const CAP: usize = 40;
const EPS: f64 = 1e-5;
const BASE: f64 = 1e5;
/// Scores of a few units: the products' rows are sums of hundreds of
/// terms near 1.
const SCALE: f32 = 1e-3;
const STACKED: usize = (HEADS + 2 * KV_HEADS) * HD;

/// A token row: its slot and position.
type Row = (i32, i32);

const ROTARY: Rotary = Rotary {
    dims: HD,
    base: BASE as f32,
};

/// One case's inputs, on the device and as values.
struct Case {
    rows: Vec<(i32, i32)>,
    width: usize,
    x: Vec<f64>,
    gain: Vec<f64>,
    wqkv: Vec<f64>,
    wo: Vec<f64>,
    residual: Vec<f64>,
    caches: [Vec<f64>; 2],
}

/// The f64 results: the normalised product's rows (`[rows, STACKED]`) and
/// the attended rows.
struct Reference {
    qkv: Vec<f64>,
    /// Per row and product column: the sum of the terms' magnitudes.
    magnitude: Vec<f64>,
    attended: Vec<f64>,
}

/// Turn the pairs of `v` (one head) by RoPE at `pos`.
fn turn(v: &mut [f64], pos: i32) {
    for i in 0..HD / 2 {
        let angle = f64::from(pos) * BASE.powf(-2.0 * i as f64 / HD as f64);
        let (x0, x1) = (v[2 * i], v[2 * i + 1]);
        v[2 * i] = x0 * angle.cos() - x1 * angle.sin();
        v[2 * i + 1] = x0 * angle.sin() + x1 * angle.cos();
    }
}

fn active(&(slot, pos): &(i32, i32)) -> bool {
    (0..SLOTS as i32).contains(&slot) && (0..CAP as i32).contains(&pos)
}

/// The cache element `[slot, kv head, pos, d]`.
fn cache_at(slot: usize, g: usize, pos: usize, d: usize) -> usize {
    ((slot * KV_HEADS + g) * CAP + pos) * HD + d
}

impl Case {
    fn reference(&self) -> Reference {
        let (n, w) = (self.rows.len(), self.width);
        let mut qkv = vec![0.0; n * STACKED];
        let mut magnitude = vec![0.0; n * STACKED];
        let mut attended = vec![0.0; n * HEADS * HD];
        for (r, row) in self.rows.iter().enumerate() {
            let x = &self.x[r * w..(r + 1) * w];
            let mean = x.iter().map(|v| v * v).sum::<f64>() / w as f64;
            let factor = 1.0 / (mean + EPS).sqrt();
            let xn: Vec<f64> = x
                .iter()
                .zip(&self.gain)
                .map(|(v, g)| v * g * factor)
                .collect();
            for j in 0..STACKED {
                let wr = &self.wqkv[j * w..(j + 1) * w];
                qkv[r * STACKED + j] = xn.iter().zip(wr).map(|(a, b)| a * b).sum();
                magnitude[r * STACKED + j] = xn.iter().zip(wr).map(|(a, b)| (a * b).abs()).sum();
            }
            if !active(row) {
                continue;
            }
            let (slot, pos) = (row.0 as usize, row.1 as usize);
            let out = &qkv[r * STACKED..(r + 1) * STACKED];
            for h in 0..HEADS {
                let g = h / (HEADS / KV_HEADS);
                let mut q = out[h * HD..(h + 1) * HD].to_vec();
                turn(&mut q, row.1);
                let mut key = out[(HEADS + g) * HD..(HEADS + g + 1) * HD].to_vec();
                turn(&mut key, row.1);
                let value = &out[(HEADS + KV_HEADS + g) * HD..(HEADS + KV_HEADS + g + 1) * HD];
                let dot =
                    |k: &[f64]| f64::from(SCALE) * q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>();
                let mut scores: Vec<f64> = (0..pos)
                    .map(|p| {
                        let at = cache_at(slot, g, p, 0);
                        dot(&self.caches[0][at..at + HD])
                    })
                    .collect();
                scores.push(dot(&key));
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = weights.iter().sum();
                for d in 0..HD {
                    let mut acc = weights[pos] * value[d];
                    for (p, wp) in weights[..pos].iter().enumerate() {
                        acc += wp * self.caches[1][cache_at(slot, g, p, d)];
                    }
                    attended[(r * HEADS + h) * HD + d] = acc / total;
                }
            }
        }
        Reference {
            qkv,
            magnitude,
            attended,
        }
    }
}

/// The block's results: the attended rows, the projection, the caches.
struct Run {
    attended: Vec<f64>,
    h: Vec<f64>,
    caches: [Vec<f64>; 2],
}

/// Run the block twice from one prepared graph (the replays must agree:
/// a row reads only positions before its own, so its store changes
/// nothing it reads).
fn run(case: &Case, format: QuantFormat, offset: bool, seed: u64) -> Result<Run> {
    let ops = ops();
    let (n, w) = (case.rows.len(), case.width);
    let x = x_tensor(&case.x, n, w, offset);
    let gain = f32s(&case.gain, vec![w]);
    let wqkv = case_matrix(format, STACKED, w, seed);
    let wo = case_matrix(QuantFormat::F16, w, HEADS * HD, seed + 1);
    let residual = f32s(&case.residual, vec![n, w]);
    let shape = vec![SLOTS, KV_HEADS, CAP, HD];
    let mut caches = case.caches.clone().map(|c| f32s(&c, shape.clone()));
    let seq: Vec<i32> = case.rows.iter().map(|r| r.0).collect();
    let pos: Vec<i32> = case.rows.iter().map(|r| r.1).collect();
    let (sequence, position) = (i32s(&seq), i32s(&pos));
    let mut out = ops.output(TensorDesc::new(DType::F32, vec![n, HEADS, HD])?)?;
    let mut h = ops.output(TensorDesc::new(DType::F32, vec![n, w])?)?;
    let input = AttentionInput {
        x: &x,
        norm: RowNorm {
            weight: &gain,
            eps: EPS as f32,
        },
        weight: &wqkv,
    };
    let projection = AttentionOutput {
        weight: &wo,
        residual: &residual,
        out: &h,
    };
    let mut graph = ops.runtime().graph();
    let [k, v] = &caches;
    let operands = [k, v, &sequence, &position];
    ops.record_attention_block(&mut graph, input, ROTARY, operands, SCALE, &out, projection)?;
    let graph = graph.prepare()?;
    let deps: Vec<_> = [
        &x,
        &gain,
        wqkv.words(),
        wo.words(),
        &residual,
        k,
        v,
        &sequence,
        &position,
    ]
    .iter()
    .map(|t| t.completion().clone())
    .collect();
    let mut seen: Option<Run> = None;
    for _ in 0..2 {
        let done = graph.submit_after(&deps)?;
        for t in [&mut out, &mut h] {
            t.set_producer(done.clone());
        }
        for c in caches.iter_mut() {
            c.set_producer(done.clone());
        }
        let now = Run {
            attended: out.to_values()?,
            h: h.to_values()?,
            caches: [caches[0].to_values()?, caches[1].to_values()?],
        };
        if let Some(first) = &seen {
            assert_eq!(first.attended, now.attended, "a replay attended otherwise");
            assert_eq!(first.h, now.h, "a replay projected otherwise");
            assert_eq!(first.caches, now.caches, "a replay stored otherwise");
        }
        seen = Some(now);
    }
    Ok(seen.expect("two replays"))
}

/// A case's matrix from its seed (so the reference and the run see the
/// same values), on the device and as values.
fn case_matrix(format: QuantFormat, rows: usize, cols: usize, seed: u64) -> QuantMatrix {
    matrix(format, rows, cols, &mut Gen::new(seed)).0
}

fn case_values(format: QuantFormat, rows: usize, cols: usize, seed: u64) -> Vec<f64> {
    matrix(format, rows, cols, &mut Gen::new(seed)).1
}

fn new_case(rows: &[(i32, i32)], width: usize, format: QuantFormat, seed: u64) -> Case {
    let mut rng = Gen::new(seed + 100);
    let n = rows.len();
    let size = SLOTS * KV_HEADS * CAP * HD;
    Case {
        rows: rows.to_vec(),
        width,
        x: random(&mut rng, n * width, -2.0, 2.0),
        gain: random(&mut rng, width, 0.5, 1.5),
        wqkv: case_values(format, STACKED, width, seed),
        wo: case_values(QuantFormat::F16, width, HEADS * HD, seed + 1),
        residual: random(&mut rng, n * width, -4.0, 4.0),
        caches: [0, 1].map(|_| random(&mut rng, size, -3.0, 3.0)),
    }
}

#[test]
fn attention_block_matches_reference() -> Result<()> {
    let decode = [(0, 0), (-1, 3), (1, 39), (2, -4), (2, 17)];
    let cases: [(&[Row], usize, QuantFormat, bool); 3] = [
        (&[(2, 9)], 576, QuantFormat::Q4_1, false),
        (&decode, 96, QuantFormat::Q8_0, true),
        (&decode, 64, QuantFormat::F16, false),
    ];
    for (i, (rows, width, format, offset)) in cases.into_iter().enumerate() {
        let what = format!(
            "{} rows of {width}, {format:?}, offset {offset}",
            rows.len()
        );
        let seed = 7 + 10 * i as u64;
        let case = new_case(rows, width, format, seed);
        let want = case.reference();
        let got = run(&case, format, offset, seed)?;
        // The caches: the active rows' own entries (the key turned), every
        // other element untouched.
        let mut expected = case.caches.clone();
        let mut bound = [vec![0.0; expected[0].len()], vec![0.0; expected[0].len()]];
        for (r, row) in case.rows.iter().enumerate() {
            if !active(row) {
                continue;
            }
            let (slot, pos) = (row.0 as usize, row.1 as usize);
            for g in 0..KV_HEADS {
                let at = r * STACKED + (HEADS + g) * HD;
                let mut key = want.qkv[at..at + HD].to_vec();
                turn(&mut key, row.1);
                let vat = r * STACKED + (HEADS + KV_HEADS + g) * HD;
                for (d, &turned) in key.iter().enumerate() {
                    let c = cache_at(slot, g, pos, d);
                    expected[0][c] = turned;
                    expected[1][c] = want.qkv[vat + d];
                    let pair = at + d / 2 * 2;
                    let mag = want.magnitude[pair] + want.magnitude[pair + 1];
                    bound[0][c] = 5e-5 * mag + 1e-6;
                    bound[1][c] = 5e-5 * want.magnitude[vat + d] + 1e-6;
                }
            }
        }
        for (which, ((g, e), b)) in got.caches.iter().zip(&expected).zip(&bound).enumerate() {
            for (j, ((&g, &e), &b)) in g.iter().zip(e).zip(b).enumerate() {
                assert!(
                    (g - e).abs() <= b,
                    "{what}: cache {which}[{j}] = {g}, want {e}"
                );
            }
        }
        // The attended rows: zeros for inactive rows.
        let vmax = want
            .qkv
            .iter()
            .chain(&case.caches[1])
            .fold(0.0f64, |m, v| m.max(v.abs()));
        for (j, (&g, &e)) in got.attended.iter().zip(&want.attended).enumerate() {
            assert!(
                (g - e).abs() <= 1e-3 * vmax,
                "{what}: attended[{j}] = {g}, want {e}"
            );
        }
        for (r, row) in case.rows.iter().enumerate() {
            let slice = &got.attended[r * HEADS * HD..(r + 1) * HEADS * HD];
            assert_eq!(
                slice.iter().all(|&v| v == 0.0),
                !active(row),
                "{what}: row {r}"
            );
        }
        // The projection of the attended rows, plus the residual.
        let columns = HEADS * HD;
        for r in 0..case.rows.len() {
            let a = &got.attended[r * columns..(r + 1) * columns];
            for o in 0..width {
                let wr = &case.wo[o * columns..(o + 1) * columns];
                let dot: f64 = a.iter().zip(wr).map(|(x, y)| x * y).sum();
                let mag: f64 = a.iter().zip(wr).map(|(x, y)| (x * y).abs()).sum();
                let res = case.residual[r * width + o];
                let (got_h, want_h) = (got.h[r * width + o], res + dot);
                assert!(
                    (got_h - want_h).abs() <= 1e-4 * (mag + res.abs()) + 1e-30,
                    "{what}: h[{r}, {o}] = {got_h}, want {want_h}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn attention_block_refuses_bad_operands() -> Result<()> {
    let ops = ops();
    let (n, w) = (2, 64);
    let mut rng = Gen::new(5);
    let x = f32s(&random(&mut rng, n * w, -1.0, 1.0), vec![n, w]);
    let gain = f32s(&[1.0; 64], vec![w]);
    let wqkv = case_matrix(QuantFormat::F16, STACKED, w, 1);
    let short = case_matrix(QuantFormat::F16, STACKED - HD, w, 2);
    let wo = case_matrix(QuantFormat::F16, w, HEADS * HD, 3);
    let residual = f32s(&[0.0; 128], vec![n, w]);
    let h = ops.output(TensorDesc::new(DType::F32, vec![n, w])?)?;
    let out = ops.output(TensorDesc::new(DType::F32, vec![n, HEADS, HD])?)?;
    let size = SLOTS * KV_HEADS * CAP * HD;
    let shape = vec![SLOTS, KV_HEADS, CAP, HD];
    let k = f32s(&vec![0.0; size], shape.clone());
    let v = f32s(&vec![0.0; size], shape);
    let (sequence, position) = (i32s(&[0, 1]), i32s(&[3, 4]));
    let good = AttentionInput {
        x: &x,
        norm: RowNorm {
            weight: &gain,
            eps: EPS as f32,
        },
        weight: &wqkv,
    };
    let projection = AttentionOutput {
        weight: &wo,
        residual: &residual,
        out: &h,
    };
    let attempt = |want: &str, input: AttentionInput, caches: [&DeviceTensor; 2]| {
        refused(want, |g: &mut Graph| {
            let [k, v] = caches;
            let operands = [k, v, &sequence, &position];
            ops.record_attention_block(g, input, ROTARY, operands, SCALE, &out, projection)
        });
    };
    attempt(
        "query-key-value weight",
        AttentionInput {
            weight: &short,
            ..good
        },
        [&k, &v],
    );
    let wide = f32s(&[0.0; 130], vec![2, 65]);
    attempt("x must be", AttentionInput { x: &wide, ..good }, [&k, &v]);
    let bad_eps = AttentionInput {
        norm: RowNorm {
            weight: &gain,
            eps: -1.0,
        },
        ..good
    };
    attempt("eps", bad_eps, [&k, &v]);
    let bad_gain = AttentionInput {
        norm: RowNorm {
            weight: &residual,
            eps: 1e-5,
        },
        ..good
    };
    attempt("norm weight", bad_gain, [&k, &v]);
    attempt("must not overlap", good, [&k, &k]);
    // x inside the key cache.
    let inside = k
        .reshape(vec![size])?
        .slice(0, 0..n * w)?
        .reshape(vec![n, w])?;
    attempt(
        "must not overlap",
        AttentionInput { x: &inside, ..good },
        [&k, &v],
    );
    Ok(())
}
