//! Quantised weights: packing GGML bytes into the device layout, the
//! quantised matmul for every format and every kernel it picks by m, and
//! the quantised row gather, against CPU references that dequantise the
//! GGML bytes directly (written here from the format definitions). Every
//! matmul result is compared with an f64 reference within a bound
//! relative to the row's magnitude; gathers are compared exactly.

use super::ggml_formats;
use half::f16;
use hrx_runtime::{Graph, Runtime, RuntimeOptions};
use hrx_tensor::ops::{QUANT_GATED_MAX_ROWS, QuantFormat, QuantMatrix, QuantTiling, Tuning};
use hrx_tensor::{DType, DeviceTensor, Ops, Result, TensorDesc};

pub(super) const FORMATS: [QuantFormat; 4] = [
    QuantFormat::F32,
    QuantFormat::F16,
    QuantFormat::Q8_0,
    QuantFormat::Q4_1,
];

/// The library of the calling test's thread (no device outlives its test).
pub(super) fn ops() -> Ops {
    thread_local! {
        static OPS: Ops = Ops::new(
            &Runtime::with_options(RuntimeOptions::from_env().expect("options")).expect("runtime"),
        );
    }
    OPS.with(Ops::clone)
}

/// A small deterministic generator (xorshift64*).
pub(super) struct Gen(u64);

impl Gen {
    pub(super) fn new(seed: u64) -> Self {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(super) fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
    pub(super) fn byte(&mut self) -> u8 {
        (self.next() >> 32) as u8
    }
}

/// An f32 tensor of `v` in `shape`.
pub(super) fn f32s(v: &[f64], shape: Vec<usize>) -> DeviceTensor {
    DeviceTensor::from_values(ops().runtime(), DType::F32, shape, v).unwrap()
}

/// An i32 `[n]` tensor of `v`.
pub(super) fn i32s(v: &[i32]) -> DeviceTensor {
    let v: Vec<f64> = v.iter().map(|&i| f64::from(i)).collect();
    DeviceTensor::from_values(ops().runtime(), DType::I32, vec![v.len()], &v).unwrap()
}

/// `n` values uniform in `[lo, hi)`, rounded to f32 (what the device
/// holds).
pub(super) fn random(rng: &mut Gen, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| f64::from(rng.uniform(lo, hi) as f32))
        .collect()
}

/// f16 bytes of `v`, rounded to nearest.
pub(super) fn f16_bytes(v: f64) -> [u8; 2] {
    f16::from_f64(v).to_le_bytes()
}

fn f16_at(b: &[u8]) -> f64 {
    f16::from_le_bytes([b[0], b[1]]).to_f64()
}

/// Random GGML bytes of a `rows` x `cols` matrix: f16 scales of either
/// sign and a spread of magnitudes, random quants.
pub(super) fn ggml_bytes(format: QuantFormat, rows: usize, cols: usize, rng: &mut Gen) -> Vec<u8> {
    let n = rows * cols;
    let mut out = Vec::new();
    match format {
        QuantFormat::F32 => {
            for _ in 0..n {
                out.extend((rng.uniform(-1.0, 1.0) as f32).to_le_bytes());
            }
        }
        QuantFormat::F16 => {
            for _ in 0..n {
                out.extend(f16_bytes(rng.uniform(-1.0, 1.0)));
            }
        }
        QuantFormat::Q8_0 => {
            for _ in 0..n / 32 {
                out.extend(f16_bytes(rng.uniform(-0.02, 0.02)));
                out.extend((0..32).map(|_| rng.byte()));
            }
        }
        QuantFormat::Q4_1 => {
            for _ in 0..n / 32 {
                out.extend(f16_bytes(rng.uniform(-0.1, 0.1)));
                out.extend(f16_bytes(rng.uniform(-0.8, 0.8)));
                out.extend((0..16).map(|_| rng.byte()));
            }
        }
        _ => {
            for _ in 0..n / format.block_len() {
                out.extend(ggml_formats::random_block(format, rng));
            }
        }
    }
    out
}

/// The values of GGML bytes, row-major, each rounded to f32 as the
/// kernels produce it (Q4_1's `d * q + m` rounded once).
fn dequantise(format: QuantFormat, bytes: &[u8]) -> Vec<f64> {
    let mut out = Vec::new();
    match format {
        QuantFormat::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        QuantFormat::F16 => out.extend(bytes.chunks_exact(2).map(f16_at)),
        QuantFormat::Q8_0 => {
            for block in bytes.chunks_exact(34) {
                let d = f16_at(block);
                out.extend(block[2..].iter().map(|&q| d * f64::from(q as i8)));
            }
        }
        QuantFormat::Q4_1 => {
            for block in bytes.chunks_exact(20) {
                let (d, m) = (f16_at(block), f16_at(&block[2..]));
                let q = &block[4..];
                let value = |nib: u8| f64::from((d * f64::from(nib) + m) as f32);
                out.extend(q.iter().map(|&b| value(b & 15)));
                out.extend(q.iter().map(|&b| value(b >> 4)));
            }
        }
        _ => {
            let values = ggml_formats::dequantise(format, bytes);
            out.extend(values.into_iter().map(f64::from));
        }
    }
    out
}

/// The values of packed words, read back by the device layout's rules.
pub(super) fn unpack(format: QuantFormat, rows: usize, cols: usize, words: &[u32]) -> Vec<f64> {
    let rw = format.row_words(cols).unwrap();
    let half = |w: u32, hi: bool| f16::from_bits((if hi { w >> 16 } else { w }) as u16).to_f64();
    let mut out = Vec::new();
    for r in 0..rows {
        let row = &words[r * rw..(r + 1) * rw];
        for j in 0..cols {
            out.push(match format {
                QuantFormat::F32 => f64::from(f32::from_bits(row[j])),
                QuantFormat::F16 => half(row[j / 2], j % 2 == 1),
                QuantFormat::Q8_0 => {
                    let block = &row[j / 32 * 9..];
                    let q = (block[1 + j % 32 / 4] >> (8 * (j % 4))) as u8 as i8;
                    assert_eq!(block[0] >> 16, 0, "Q8_0 scale word's upper half");
                    half(block[0], false) * f64::from(q)
                }
                QuantFormat::Q4_1 => {
                    let block = &row[j / 32 * 5..];
                    let i = j % 16;
                    let byte = (block[1 + i / 4] >> (8 * (i % 4))) as u8;
                    let nib = if j % 32 < 16 { byte & 15 } else { byte >> 4 };
                    let v = half(block[0], false) * f64::from(nib) + half(block[0], true);
                    f64::from(v as f32)
                }
                _ => ggml_formats::unpacked(format, row, j),
            });
        }
    }
    out
}

pub(super) fn upload_words(words: &[u32]) -> DeviceTensor {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let desc = TensorDesc::new(DType::U32, vec![words.len()]).unwrap();
    DeviceTensor::upload(ops().runtime(), desc, &bytes).unwrap()
}

/// A random matrix: its packed device form and its values.
pub(super) fn matrix(
    format: QuantFormat,
    rows: usize,
    cols: usize,
    rng: &mut Gen,
) -> (QuantMatrix, Vec<f64>) {
    let bytes = ggml_bytes(format, rows, cols, rng);
    let words = format.pack(rows, cols, &bytes).unwrap();
    let w = QuantMatrix::new(format, rows, cols, upload_words(&words)).unwrap();
    (w, dequantise(format, &bytes))
}

#[test]
fn packing_keeps_every_value_and_refuses_bad_lengths() {
    let mut rng = Gen::new(1);
    for format in FORMATS {
        for (rows, cols) in [(3, 64), (1, 32), (0, 32), (5, 96)] {
            let bytes = ggml_bytes(format, rows, cols, &mut rng);
            let words = format.pack(rows, cols, &bytes).unwrap();
            assert_eq!(words.len(), rows * format.row_words(cols).unwrap());
            let want = dequantise(format, &bytes);
            assert_eq!(unpack(format, rows, cols, &words), want, "{format:?}");
            if rows > 0 {
                assert!(format.pack(rows, cols, &bytes[1..]).is_err());
                let mut long = bytes.clone();
                long.push(0);
                assert!(format.pack(rows, cols, &long).is_err());
            }
        }
        assert!(format.pack(usize::MAX, 64, &[]).is_err(), "{format:?}");
    }
    // Odd columns: only the unblocked formats take them.
    for (format, ok) in FORMATS.iter().zip([true, true, false, false]) {
        let bytes = ggml_bytes(*format, 3, 7 * format.block_len(), &mut rng);
        assert!(format.pack(3, 7, &bytes).is_ok() == ok, "{format:?}");
        assert_eq!(format.row_words(7).is_ok(), ok, "{format:?}");
    }
    let bytes = ggml_bytes(QuantFormat::F16, 3, 7, &mut rng);
    let words = QuantFormat::F16.pack(3, 7, &bytes).unwrap();
    assert_eq!(
        unpack(QuantFormat::F16, 3, 7, &words),
        dequantise(QuantFormat::F16, &bytes)
    );
    assert!(words.iter().skip(3).step_by(4).all(|w| w >> 16 == 0));
}

/// x as a `[m, cols]` f32 tensor: contiguous, or (`offset`) starting one
/// element into its storage, so rows start off 16-byte boundaries.
pub(super) fn x_tensor(x: &[f64], m: usize, cols: usize, offset: bool) -> DeviceTensor {
    let rt = ops().runtime().clone();
    if !offset {
        return DeviceTensor::from_values(&rt, DType::F32, vec![m, cols], x).unwrap();
    }
    let mut padded = vec![9.0];
    padded.extend(x);
    let all = DeviceTensor::from_values(&rt, DType::F32, vec![padded.len()], &padded).unwrap();
    all.view(4, TensorDesc::new(DType::F32, vec![m, cols]).unwrap())
        .unwrap()
}

fn check_matmul(format: QuantFormat, rows: usize, cols: usize, ms: &[usize], rng: &mut Gen) {
    let (w, wv) = matrix(format, rows, cols, rng);
    for (i, &m) in ms.iter().enumerate() {
        let x: Vec<f64> = (0..m * cols)
            .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let xt = x_tensor(&x, m, cols, i % 2 == 1);
        let got = ops().quant_matmul(&xt, &w).unwrap().to_values().unwrap();
        // Large products check a fifth of each row of out (a different
        // fifth per row, and the last column), which keeps the f64
        // reference cheap.
        let every = if m * rows * cols > 4_000_000 { 5 } else { 1 };
        let what = format!("{format:?} {rows}x{cols} m={m}");
        check_product(&what, &got, (&x, &wv), (m, rows, cols), every);
    }
}

/// `got` (`[m, rows]`) against the f64 product of `x` (`[m, cols]`) and
/// the weights `wv` (`[rows, cols]`), within 1e-4 of each dot's
/// magnitude; with `every` over 1, a different `every`-th of each row of
/// `got` and its last column.
pub(super) fn check_product(
    what: &str,
    got: &[f64],
    (x, wv): (&[f64], &[f64]),
    (m, rows, cols): (usize, usize, usize),
    every: usize,
) {
    assert_eq!(got.len(), m * rows, "{what}");
    for r in 0..m {
        let xr = &x[r * cols..(r + 1) * cols];
        for j in (0..rows).filter(|j| j % every == r % every || *j == rows - 1) {
            let wr = &wv[j * cols..(j + 1) * cols];
            let want: f64 = xr.iter().zip(wr).map(|(a, b)| a * b).sum();
            let mag: f64 = xr.iter().zip(wr).map(|(a, b)| (a * b).abs()).sum();
            let g = got[r * rows + j];
            assert!(
                (g - want).abs() <= 1e-4 * mag + 1e-30,
                "{what}: out[{r}, {j}] = {g}, want {want} {:?}",
                &got[..rows.min(20)]
            );
        }
    }
}

#[test]
fn quant_matmul_matches_reference_for_every_format_and_m() {
    let mut rng = Gen::new(2);
    for format in FORMATS {
        check_matmul(format, 7, 64, &[1, 3, 8, 17, 64, 130], &mut rng);
        check_matmul(format, 192, 576, &[1, 3, 8, 17, 64, 130], &mut rng);
    }
    for format in [QuantFormat::Q8_0, QuantFormat::Q4_1] {
        check_matmul(format, 576, 576, &[1, 8], &mut rng);
        check_matmul(format, 1536, 576, &[3, 130], &mut rng);
        check_matmul(format, 576, 1536, &[1, 17], &mut rng);
    }
    // Rows that end in a partial span of 8.
    for format in [QuantFormat::F32, QuantFormat::F16] {
        check_matmul(format, 5, 37, &[1, 2, 20, 70], &mut rng);
        check_matmul(format, 9, 3, &[1, 66], &mut rng);
    }
}

/// The tiled kernel's narrow and wide tiles, whole and split along k
/// (forced here; a GPU picks them by itself) against the f64 reference,
/// and against themselves: two split products in one graph share the
/// scratch and its counters, and replaying the graph gives the same bits
/// (the counters are back at zero after every run, and the splits are
/// summed in a fixed order).
#[test]
fn tiled_matmul_tiles_and_splits_match_reference_and_replay() -> Result<()> {
    let mut rng = Gen::new(7);
    let cases = [
        (QuantFormat::Q4_1, 192, 576, 64, (32, 4)),
        (QuantFormat::Q4_1, 130, 576, 70, (64, 3)),
        (QuantFormat::Q8_0, 40, 256, 33, (32, 3)),
        (QuantFormat::Q8_0, 70, 96, 130, (64, 1)),
        (QuantFormat::F16, 5, 37, 70, (32, 2)),
        (QuantFormat::F16, 67, 37, 20, (64, 2)),
        (QuantFormat::F32, 70, 96, 17 + QUANT_GATED_MAX_ROWS, (32, 3)),
        (QuantFormat::Q4_1, 33, 64, 40, (64, 9)),
    ];
    for (format, rows, cols, m, (tile, splits)) in cases {
        let what = format!("{format:?} {rows}x{cols} m={m} tile={tile} splits={splits}");
        let forced = |tile, splits| {
            ops().with_tuning(Tuning {
                quant_tiling: Some(QuantTiling::new(tile, splits).unwrap()),
                ..Tuning::default()
            })
        };
        let (split, whole) = (forced(tile, splits), forced(32, 1));
        let (w, wv) = matrix(format, rows, cols, &mut rng);
        let (w2, wv2) = matrix(format, rows, cols, &mut rng);
        let x: Vec<f64> = (0..m * cols)
            .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let xt = x_tensor(&x, m, cols, m % 2 == 1);
        let out_desc = TensorDesc::new(DType::F32, vec![m, rows])?;
        let (out, out2) = (split.output(out_desc.clone())?, split.output(out_desc)?);
        let mut graph = split.runtime().graph();
        split.record_quant_matmul(&mut graph, &xt, &w, &out)?;
        split.record_quant_matmul(&mut graph, &xt, &w2, &out2)?;
        let graph = graph.prepare()?;
        let mut runs = Vec::new();
        for _ in 0..3 {
            graph.submit_after(&[xt.completion().clone()])?.wait()?;
            runs.push((out.to_values()?, out2.to_values()?));
        }
        assert!(runs.iter().all(|r| *r == runs[0]), "{what}: replays differ");
        for (got, wv) in [(&runs[0].0, &wv), (&runs[0].1, &wv2)] {
            check_product(&what, got, (&x, wv), (m, rows, cols), 1);
        }
        // The narrow unsplit kernel sums in another order: close.
        let unsplit = whole.quant_matmul(&xt, &w)?.to_values()?;
        for (a, b) in unsplit.iter().zip(&runs[0].0) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + a.abs()),
                "{what}: {a} vs {b}"
            );
        }
    }
    Ok(())
}

/// The gated matrix-vector kernel against an f64 reference of `silu(x .
/// gate) * (x . up)`, and bit for bit against the matmul and SwiGLU
/// operators it replaces; more rows than it takes, or an odd stacked
/// matrix, are refused.
#[test]
fn quant_swiglu_equals_matmul_then_swiglu() -> Result<()> {
    let mut rng = Gen::new(6);
    let ops = ops();
    for (format, half, cols) in [
        (QuantFormat::Q4_1, 96, 576),
        (QuantFormat::Q8_0, 7, 64),
        (QuantFormat::F16, 5, 37),
        (QuantFormat::F32, 33, 16),
    ] {
        let (w, wv) = matrix(format, 2 * half, cols, &mut rng);
        for (i, m) in [1, 3, 8, QUANT_GATED_MAX_ROWS].into_iter().enumerate() {
            let x: Vec<f64> = (0..m * cols)
                .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
                .collect();
            let xt = x_tensor(&x, m, cols, i % 2 == 1);
            let got = ops.quant_swiglu(&xt, &w)?;
            assert_eq!(got.desc().shape(), &[m, half]);
            let both = ops.quant_matmul(&xt, &w)?;
            let (gate, up) = (both.slice(1, 0..half)?, both.slice(1, half..2 * half)?);
            let separate = ops.swiglu(&gate, &up)?;
            let bits = |t: &DeviceTensor| -> Result<Vec<u32>> {
                Ok(t.to_values()?
                    .iter()
                    .map(|&v| (v as f32).to_bits())
                    .collect())
            };
            let what = format!("{format:?} {half}x{cols} m={m}");
            assert_eq!(bits(&got)?, bits(&separate)?, "{what}: bits");
            let got = got.to_values()?;
            for r in 0..m {
                let xr = &x[r * cols..(r + 1) * cols];
                let dot = |j: usize| -> (f64, f64) {
                    let wr = &wv[j * cols..(j + 1) * cols];
                    let v = xr.iter().zip(wr).map(|(a, b)| a * b).sum();
                    let mag = xr.iter().zip(wr).map(|(a, b)| (a * b).abs()).sum();
                    (v, mag)
                };
                for j in 0..half {
                    let ((g, gm), (u, um)) = (dot(j), dot(half + j));
                    let silu = g / (1.0 + (-g).exp());
                    let want = silu * u;
                    // Each dot within 1e-4 of its magnitude; silu's slope
                    // is at most 1.1.
                    let bound = 1.1e-4 * gm * u.abs() + 1e-4 * um * silu.abs() + 1e-6;
                    let g = got[r * half + j];
                    assert!(
                        (g - want).abs() <= bound,
                        "{what}: out[{r}, {j}] = {g}, want {want}"
                    );
                }
            }
        }
    }
    let (w, _) = matrix(QuantFormat::Q8_0, 8, 32, &mut rng);
    let x = x_tensor(&vec![0.5; 17 * 32], 17, 32, false);
    let e = ops.quant_swiglu(&x, &w).expect_err("17 rows").to_string();
    assert!(e.contains("quant_swiglu") && e.contains("17 rows"), "{e:?}");
    let (odd, _) = matrix(QuantFormat::Q8_0, 7, 32, &mut rng);
    let x = x_tensor(&vec![0.5; 32], 1, 32, false);
    let e = ops.quant_swiglu(&x, &odd).expect_err("odd").to_string();
    assert!(e.contains("even number of rows"), "{e:?}");
    Ok(())
}

/// A graph recorded into an output slice of a larger tensor, with x a row
/// range of a larger tensor.
#[test]
fn recorded_matmul_reads_a_row_range() -> Result<()> {
    let mut rng = Gen::new(3);
    let (rows, cols) = (40, 64);
    let (w, wv) = matrix(QuantFormat::Q4_1, rows, cols, &mut rng);
    let x: Vec<f64> = (0..6 * cols).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let all = DeviceTensor::from_values(ops().runtime(), DType::F32, vec![6, cols], &x)?;
    let xs = all.slice(0, 2..5)?;
    let mut out = ops().output(TensorDesc::new(DType::F32, vec![3, rows])?)?;
    let mut graph = ops().runtime().graph();
    ops().record_quant_matmul(&mut graph, &xs, &w, &out)?;
    out.set_producer(graph.prepare()?.submit_after(&[all.completion().clone()])?);
    let got = out.to_values()?;
    for r in 0..3 {
        for j in 0..rows {
            let xr = &x[(r + 2) * cols..(r + 3) * cols];
            let want: f64 = xr.iter().zip(&wv[j * cols..]).map(|(a, b)| a * b).sum();
            assert!((got[r * rows + j] - want).abs() < 1e-4, "[{r}, {j}]");
        }
    }
    Ok(())
}

#[test]
fn quant_gather_dequantises_rows_and_zeroes_strangers() {
    let mut rng = Gen::new(4);
    for (format, rows, cols) in [
        (QuantFormat::Q4_1, 9, 576),
        (QuantFormat::Q8_0, 9, 64),
        (QuantFormat::F16, 6, 37),
        (QuantFormat::F32, 6, 13),
    ] {
        let (w, wv) = matrix(format, rows, cols, &mut rng);
        let wv = &wv;
        let ids: Vec<i32> = vec![3, 0, -1, rows as i32, rows as i32 - 1, 3, i32::MIN];
        let idv: Vec<f64> = ids.iter().map(|&i| f64::from(i)).collect();
        let it =
            DeviceTensor::from_values(ops().runtime(), DType::I32, vec![ids.len()], &idv).unwrap();
        let got = ops().quant_gather(&w, &it).unwrap().to_values().unwrap();
        let want: Vec<f64> = ids
            .iter()
            .flat_map(|&i| {
                (0..cols).map(move |j| match usize::try_from(i) {
                    Ok(i) if i < rows => wv[i * cols + j],
                    _ => 0.0,
                })
            })
            .collect();
        assert_eq!(got, want, "{format:?}");
    }
}

/// Record into a fresh graph; it must fail naming `want` and record
/// nothing.
pub(super) fn refused(want: &str, record: impl FnOnce(&mut Graph) -> Result<()>) {
    let mut graph = ops().runtime().graph();
    match record(&mut graph) {
        Ok(()) => panic!("{want}: recorded without an error"),
        Err(e) => assert!(e.to_string().contains(want), "{want}: failed with {e}"),
    }
    assert!(graph.is_empty(), "{want}: left {} operations", graph.len());
}

#[test]
fn mismatches_are_errors_and_record_nothing() -> Result<()> {
    let rt = ops().runtime().clone();
    let mut rng = Gen::new(5);
    let (w, _) = matrix(QuantFormat::Q8_0, 4, 64, &mut rng);
    let t = |dtype, shape: &[usize]| ops().output(TensorDesc::new(dtype, shape.to_vec()).unwrap());
    let (x, out) = (t(DType::F32, &[2, 64])?, t(DType::F32, &[2, 4])?);
    let x_int = t(DType::I32, &[2, 64])?;
    let x_cols = t(DType::F32, &[2, 32])?;
    let out_bad = t(DType::F32, &[2, 5])?;
    let out_int = t(DType::I32, &[2, 4])?;
    let want = "quant_matmul of";
    refused(want, |g| ops().record_quant_matmul(g, &x_int, &w, &out));
    refused(want, |g| ops().record_quant_matmul(g, &x_cols, &w, &out));
    refused(want, |g| ops().record_quant_matmul(g, &x, &w, &out_bad));
    refused("must be a contiguous f32[2, 4]", |g| {
        ops().record_quant_matmul(g, &x, &w, &out_int)
    });
    assert!(ops().quant_matmul(&x_int, &w).is_err());

    let ids = DeviceTensor::from_values(&rt, DType::I32, vec![2], &[0.0, 1.0])?;
    let ids_f = t(DType::F32, &[2])?;
    let ids_2d = t(DType::I32, &[1, 2])?;
    let g_out = t(DType::F32, &[2, 64])?;
    let g_bad = t(DType::F16, &[2, 64])?;
    let want = "quant_gather of";
    refused(want, |g| ops().record_quant_gather(g, &w, &ids_f, &g_out));
    refused(want, |g| ops().record_quant_gather(g, &w, &ids_2d, &g_out));
    refused(want, |g| ops().record_quant_gather(g, &w, &ids, &g_bad));
    assert!(ops().quant_gather(&w, &ids_f).is_err());

    // Tensors of another runtime domain.
    let other = Ops::new(&Runtime::with_options(RuntimeOptions::from_env()?)?);
    let theirs = other.output(TensorDesc::new(DType::F32, vec![2, 64])?)?;
    refused("quant_matmul of", |g| {
        ops().record_quant_matmul(g, &theirs, &w, &out)
    });
    let their_words = other.output(TensorDesc::new(DType::U32, vec![4 * 18])?)?;
    let wt = QuantMatrix::new(QuantFormat::Q8_0, 4, 64, their_words)?;
    refused("quant_gather of", |g| {
        ops().record_quant_gather(g, &wt, &ids, &g_out)
    });

    // Word tensors that do not fit the matrix.
    let words = t(DType::U32, &[4 * 18])?;
    assert!(QuantMatrix::new(QuantFormat::Q8_0, 4, 64, words.clone()).is_ok());
    assert!(QuantMatrix::new(QuantFormat::Q8_0, 5, 64, words.clone()).is_err());
    assert!(QuantMatrix::new(QuantFormat::Q4_1, 4, 64, words.clone()).is_err());
    assert!(QuantMatrix::new(QuantFormat::Q8_0, 4, 48, words).is_err());
    assert!(QuantMatrix::new(QuantFormat::Q8_0, 4, 64, t(DType::I32, &[72])?).is_err());
    Ok(())
}
