//! The GGML formats beyond Q8_0 and Q4_1 (Q4_0, Q5_0, Q5_1, Q4_K, Q5_K,
//! Q6_K): the host reference written here from GGML's definitions equals
//! the `gguf` package's dequantisation (`quants.json`, made by
//! `make_quants.py` in hrx-models' `tests/reference/quants/`) bit for bit;
//! packed and gathered on the device, the same bytes give the same values;
//! and every kernel that reads quantised weights (matrix-vector, tiled
//! whole and split, gated, the output head) matches the f64 reference on
//! random blocks.

use super::quant::{
    Gen, check_product, f16_bytes, f32s, i32s, matrix, ops, unpack, upload_words, x_tensor,
};
use base64::Engine as _;
use half::f16;
use hrx_tensor::ops::{QuantFormat, QuantMatrix, QuantTiling, RowNorm, Tuning};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const FORMATS: [QuantFormat; 6] = [
    QuantFormat::Q4_0,
    QuantFormat::Q5_0,
    QuantFormat::Q5_1,
    QuantFormat::Q4_K,
    QuantFormat::Q5_K,
    QuantFormat::Q6_K,
];

/// The K-quants: rows of whole super-blocks of 256.
const K_FORMATS: [QuantFormat; 3] = [QuantFormat::Q4_K, QuantFormat::Q5_K, QuantFormat::Q6_K];

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// A random block: f16 scales of either sign and sane magnitude, every
/// other byte random.
pub(super) fn random_block(format: QuantFormat, rng: &mut Gen) -> Vec<u8> {
    let mut out = Vec::new();
    let mut scale = |out: &mut Vec<u8>, size: f64| out.extend(f16_bytes(rng.uniform(-size, size)));
    match format {
        QuantFormat::Q4_0 => scale(&mut out, 0.1),
        QuantFormat::Q5_0 => scale(&mut out, 0.05),
        QuantFormat::Q5_1 => {
            scale(&mut out, 0.05);
            scale(&mut out, 0.8);
        }
        QuantFormat::Q4_K => {
            scale(&mut out, 0.01);
            scale(&mut out, 0.02);
        }
        QuantFormat::Q5_K => {
            scale(&mut out, 0.005);
            scale(&mut out, 0.02);
        }
        QuantFormat::Q6_K => {}
        other => panic!("{other:?} is not written here"),
    }
    let rest = match format {
        QuantFormat::Q4_0 => 16,
        QuantFormat::Q5_0 | QuantFormat::Q5_1 => 20,
        QuantFormat::Q4_K => 140,
        QuantFormat::Q5_K => 172,
        _ => 208,
    };
    out.extend((0..rest).map(|_| rng.byte()));
    if format == QuantFormat::Q6_K {
        out.extend(f16_bytes(rng.uniform(-0.002, 0.002)));
    }
    out
}

/// The fifth bit of value `i` of a block with the 32 bits `qh`.
fn fifth(qh: &[u8], i: usize) -> u8 {
    (qh[i / 8] >> (i % 8)) & 1
}

/// GGML's dequantisation of whole blocks, in f32 as it computes: Q4_0
/// `(q - 8) * d`, Q5_0 `(q - 16) * d`, Q5_1 `q * d + m`, Q4_K and Q5_K
/// `(d * sc) * q - (dmin * m)`, Q6_K `(d * sc) * (q - 32)`.
pub(super) fn dequantise(format: QuantFormat, bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::new();
    // Value `i` of a block of 32 nibbles: low nibbles, then high ones.
    let nibble = |qs: &[u8], i: usize| if i < 16 { qs[i] & 15 } else { qs[i - 16] >> 4 };
    match format {
        QuantFormat::Q4_0 => {
            for b in bytes.chunks_exact(18) {
                let d = half_at(b, 0);
                out.extend((0..32).map(|i| d * f32::from(nibble(&b[2..], i) as i8 - 8)));
            }
        }
        QuantFormat::Q5_0 | QuantFormat::Q5_1 => {
            let (size, with_min) = if format == QuantFormat::Q5_0 {
                (22, false)
            } else {
                (24, true)
            };
            for b in bytes.chunks_exact(size) {
                let d = half_at(b, 0);
                let head = if with_min { 4 } else { 2 };
                let (qh, qs) = (&b[head..head + 4], &b[head + 4..]);
                for i in 0..32 {
                    let q = nibble(qs, i) | (fifth(qh, i) << 4);
                    out.push(if with_min {
                        d * f32::from(q) + half_at(b, 2)
                    } else {
                        d * f32::from(q as i8 - 16)
                    });
                }
            }
        }
        QuantFormat::Q4_K | QuantFormat::Q5_K => {
            let (size, qs_at) = if format == QuantFormat::Q4_K {
                (144, 16)
            } else {
                (176, 48)
            };
            for b in bytes.chunks_exact(size) {
                let (d, dmin, scales, qs) = (half_at(b, 0), half_at(b, 2), &b[4..16], &b[qs_at..]);
                let qh = &b[16..48];
                for j in 0..8 {
                    // Sub-blocks 0..4: low 6 bits of bytes j and j + 4;
                    // 4..8: nibbles of byte j + 4, top bits from j - 4 and j.
                    let (sc, m) = if j < 4 {
                        (scales[j] & 63, scales[j + 4] & 63)
                    } else {
                        (
                            (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4),
                            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
                        )
                    };
                    let (scale, min) = (d * f32::from(sc), dmin * f32::from(m));
                    let chunk = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                    for (l, &q) in chunk.iter().enumerate() {
                        let mut q = (q >> (4 * (j % 2))) & 15;
                        if format == QuantFormat::Q5_K {
                            q |= ((qh[l] >> j) & 1) << 4;
                        }
                        out.push(scale * f32::from(q) - min);
                    }
                }
            }
        }
        QuantFormat::Q6_K => {
            for b in bytes.chunks_exact(210) {
                let (ql, qh, scales, d) = (&b[..128], &b[128..192], &b[192..208], half_at(b, 208));
                let mut values = [0f32; 256];
                for half in 0..2 {
                    let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
                    for l in 0..32 {
                        let q = [
                            (ql[l] & 15) | ((qh[l] & 3) << 4),
                            (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4),
                            (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                            (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                        ];
                        for (quarter, q) in q.into_iter().enumerate() {
                            let i = 128 * half + 32 * quarter + l;
                            let scale = d * f32::from(scales[i / 16] as i8);
                            values[i] = scale * f32::from(q as i8 - 32);
                        }
                    }
                }
                out.extend(values);
            }
        }
        other => panic!("{other:?} is not a K-quant"),
    }
    out
}

/// Value `j` of a packed row, read by the device layout's rules (the
/// `quant` module's `format` documentation).
pub(super) fn unpacked(format: QuantFormat, row: &[u32], j: usize) -> f64 {
    let byte = |words: &[u32], i: usize| (words[i / 4] >> (8 * (i % 4))) as u8;
    let half = |w: u32, hi: bool| f16::from_bits((if hi { w >> 16 } else { w }) as u16).to_f32();
    // Value `i` of 32 nibbles in 4 words: low nibbles, then high ones.
    let nibble = |words: &[u32], i: usize| {
        let b = byte(words, i % 16);
        if i < 16 { b & 15 } else { b >> 4 }
    };
    let fifth = |bits: u32, i: usize| ((bits >> i) & 1) as u8;
    let value = match format {
        QuantFormat::Q4_0 => {
            let block = &row[j / 32 * 5..];
            assert_eq!(block[0] >> 16, 0, "Q4_0 scale word's upper half");
            half(block[0], false) * f32::from(nibble(&block[1..5], j % 32) as i8 - 8)
        }
        QuantFormat::Q5_0 | QuantFormat::Q5_1 => {
            let block = &row[j / 32 * 6..];
            let q = nibble(&block[2..6], j % 32) | (fifth(block[1], j % 32) << 4);
            if format == QuantFormat::Q5_0 {
                assert_eq!(block[0] >> 16, 0, "Q5_0 scale word's upper half");
                half(block[0], false) * f32::from(q as i8 - 16)
            } else {
                half(block[0], false) * f32::from(q) + half(block[0], true)
            }
        }
        QuantFormat::Q4_K | QuantFormat::Q5_K => {
            let words = if format == QuantFormat::Q4_K { 6 } else { 7 };
            let block = &row[j / 32 * words..];
            let (scale, min) = (f32::from_bits(block[0]), f32::from_bits(block[1]));
            let mut q = nibble(&block[words - 4..words], j % 32);
            if format == QuantFormat::Q5_K {
                q |= fifth(block[2], j % 32) << 4;
            }
            scale * f32::from(q) - min
        }
        QuantFormat::Q6_K => {
            let block = &row[j / 16 * 5..];
            f32::from_bits(block[0]) * f32::from(byte(&block[1..5], j % 16) as i8)
        }
        other => panic!("{other:?} is not written here"),
    };
    f64::from(value)
}

/// One of the `gguf` package's matrices.
struct Reference {
    format: QuantFormat,
    rows: usize,
    cols: usize,
    bytes: Vec<u8>,
    values: Vec<f32>,
}

/// The `gguf` package's matrices, one per format.
fn reference() -> Vec<Reference> {
    let text = include_str!("../../../../crates/hrx-models/tests/reference/quants/quants.json");
    let json: serde_json::Value = serde_json::from_str(text).expect("quants.json");
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a base64 string"))
            .expect("base64")
    };
    FORMATS
        .into_iter()
        .map(|format| {
            let m = &json[format!("{format:?}")];
            let size = |k: &str| m[k].as_u64().expect("a size") as usize;
            let values = b64(&m["values"])
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            Reference {
                format,
                rows: size("rows"),
                cols: size("cols"),
                bytes: b64(&m["bytes"]),
                values,
            }
        })
        .collect()
}

#[test]
fn the_gguf_packages_values_come_back_from_host_pack_and_device() {
    for Reference {
        format,
        rows,
        cols,
        bytes,
        values: want,
    } in reference()
    {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&dequantise(format, &bytes)),
            bits(&want),
            "{format:?} host"
        );
        let words = format.pack(rows, cols, &bytes).unwrap();
        assert_eq!(words.len(), rows * format.row_words(cols).unwrap());
        let want64: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        assert_eq!(
            unpack(format, rows, cols, &words),
            want64,
            "{format:?} packed"
        );
        // Every row gathered on the device, and a stranger as zeros.
        let w = QuantMatrix::new(format, rows, cols, upload_words(&words)).unwrap();
        let ids: Vec<i32> = (0..rows as i32).rev().chain([rows as i32]).collect();
        let got = ops()
            .quant_gather(&w, &i32s(&ids))
            .unwrap()
            .to_values()
            .unwrap();
        for (r, &id) in ids.iter().enumerate() {
            let got = &got[r * cols..(r + 1) * cols];
            match usize::try_from(id).ok().filter(|&i| i < rows) {
                Some(i) => assert_eq!(got, &want64[i * cols..(i + 1) * cols], "{format:?} row {i}"),
                None => assert!(got.iter().all(|&v| v == 0.0), "{format:?} stranger"),
            }
        }
    }
}

#[test]
fn rows_not_whole_blocks_and_wrong_lengths_are_refused() {
    let mut rng = Gen::new(31);
    for format in FORMATS {
        let len = format.block_len();
        let block = random_block(format, &mut rng);
        let partial = if len == 256 {
            [32, 255, 257, 576]
        } else {
            [16, 31, 33, 48]
        };
        for cols in partial {
            let error = format.pack(1, cols, &block).unwrap_err();
            let want = format!("multiple of {len}");
            assert!(error.to_string().contains(&want), "{format:?}: {error}");
            assert!(format.row_words(cols).is_err());
        }
        assert!(format.pack(1, len, &block[1..]).is_err());
        assert!(format.pack(2, len, &block).is_err());
        assert!(format.pack(usize::MAX, len, &block).is_err());
    }
}

#[test]
fn every_kernel_matches_the_reference_on_every_format() -> Result<()> {
    let mut rng = Gen::new(32);
    for format in FORMATS {
        // The matrix-vector kernel (m <= 16) and the tiled one, x aligned
        // and not; rows of 96 where the blocks are of 32.
        let mut shapes = vec![(7, 256), (192, 512), (40, 1536)];
        if !K_FORMATS.contains(&format) {
            shapes.push((17, 96));
        }
        for (rows, cols) in shapes {
            let (w, wv) = matrix(format, rows, cols, &mut rng);
            for (i, m) in [1, 3, 17, 70].into_iter().enumerate() {
                let x: Vec<f64> = (0..m * cols)
                    .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
                    .collect();
                let got = ops()
                    .quant_matmul(&x_tensor(&x, m, cols, i % 2 == 1), &w)?
                    .to_values()?;
                let what = format!("{format:?} {rows}x{cols} m={m}");
                check_product(&what, &got, (&x, &wv), (m, rows, cols), 1);
            }
        }
        // The tiled kernel split along k, as a GPU splits a short product.
        let split = ops().with_tuning(Tuning {
            quant_tiling: Some(QuantTiling::new(32, 3).unwrap()),
            ..Tuning::default()
        });
        let (rows, cols, m) = (96, 768, 40);
        let (w, wv) = matrix(format, rows, cols, &mut rng);
        let x: Vec<f64> = (0..m * cols)
            .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let got = split
            .quant_matmul(&x_tensor(&x, m, cols, false), &w)?
            .to_values()?;
        check_product(
            &format!("{format:?} split"),
            &got,
            (&x, &wv),
            (m, rows, cols),
            1,
        );
        // The gated kernel: silu(x . gate) * (x . up) over a stacked matrix.
        let (n, cols) = (24, 512);
        let (stacked, sv) = matrix(format, 2 * n, cols, &mut rng);
        let x: Vec<f64> = (0..2 * cols)
            .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let got = ops()
            .quant_swiglu(&x_tensor(&x, 2, cols, false), &stacked)?
            .to_values()?;
        for r in 0..2 {
            for j in 0..n {
                let dot = |w: usize| -> f64 {
                    let wr = &sv[w * cols..(w + 1) * cols];
                    x[r * cols..(r + 1) * cols]
                        .iter()
                        .zip(wr)
                        .map(|(a, b)| a * b)
                        .sum()
                };
                let (g, u) = (dot(j), dot(n + j));
                let want = g / (1.0 + (-g).exp()) * u;
                let have = got[r * n + j];
                assert!(
                    (have - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{format:?} gated [{r}, {j}]: {have} vs {want}"
                );
            }
        }
        // The output head: picked rows normalised, projected, argmax.
        let (rows, cols) = (300, 512);
        let (w, wv) = matrix(format, rows, cols, &mut rng);
        let x: Vec<f64> = (0..2 * cols)
            .map(|_| f64::from(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let gain = f32s(&vec![1.0; cols], vec![cols]);
        let (xt, picks) = (x_tensor(&x, 2, cols, false), i32s(&[1]));
        let logits = ops().output(TensorDesc::new(DType::F32, vec![1, rows])?)?;
        let next = ops().output(TensorDesc::new(DType::I32, vec![1])?)?;
        let mut graph = ops().runtime().graph();
        let norm = RowNorm {
            weight: &gain,
            eps: 1e-5,
        };
        ops().record_quant_logits(&mut graph, &xt, &picks, norm, &w, &logits, &next)?;
        let inputs = [&xt, &picks, &gain, w.words()].map(|t| t.completion().clone());
        let done = graph.prepare()?.submit_after(&inputs)?;
        let (mut logits, mut next) = (logits, next);
        logits.set_producer(done.clone());
        next.set_producer(done);
        let row = &x[cols..];
        let scale = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / cols as f64 + 1e-5).sqrt();
        let y: Vec<f64> = row.iter().map(|v| v * scale).collect();
        let got = logits.to_values()?;
        check_product(
            &format!("{format:?} head"),
            &got,
            (&y, &wv),
            (1, rows, cols),
            1,
        );
        let best =
            got.iter().enumerate().fold(
                (f64::NEG_INFINITY, 0),
                |b, (j, &v)| if v > b.0 { (v, j) } else { b },
            );
        assert_eq!(next.to_values()?, [best.1 as f64], "{format:?} head argmax");
    }
    Ok(())
}

/// A matrix is what its words say it is: the wrong word count for its
/// shape is refused.
#[test]
fn a_matrix_needs_its_word_count() {
    let words =
        DeviceTensor::from_values(ops().runtime(), DType::U32, vec![10], &[0.0; 10]).unwrap();
    for format in FORMATS {
        let error = QuantMatrix::new(format, 1, 256, words.clone()).unwrap_err();
        assert!(
            error.to_string().contains("u32 tensor of"),
            "{format:?}: {error}"
        );
    }
}
