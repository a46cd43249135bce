//! K-quant weights (Q4_K, Q6_K): the host reference written here from
//! GGML's definitions equals the `gguf` package's dequantisation
//! (`kquant.json`, made by `make_kquant.py` in hrx-models'
//! `tests/reference/kquant/`) bit for bit; packed and gathered on the device, the same bytes give the same
//! values; and every kernel that reads quantised weights (matrix-vector,
//! tiled whole and split, gated, the output head) matches the f64
//! reference on random super-blocks.

use super::quant::{
    Gen, check_product, f16_bytes, f32s, i32s, matrix, ops, unpack, upload_words, x_tensor,
};
use base64::Engine as _;
use half::f16;
use hrx_tensor::ops::{QuantFormat, QuantMatrix, QuantTiling, RowNorm, Tuning};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

const K_FORMATS: [QuantFormat; 2] = [QuantFormat::Q4_K, QuantFormat::Q6_K];

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// A random super-block: f16 scales of either sign and sane magnitude,
/// every other byte random.
pub(super) fn random_block(format: QuantFormat, rng: &mut Gen) -> Vec<u8> {
    let mut out = Vec::new();
    match format {
        QuantFormat::Q4_K => {
            out.extend(f16_bytes(rng.uniform(-0.01, 0.01)));
            out.extend(f16_bytes(rng.uniform(-0.02, 0.02)));
            out.extend((0..12 + 128).map(|_| rng.byte()));
        }
        QuantFormat::Q6_K => {
            out.extend((0..128 + 64 + 16).map(|_| rng.byte()));
            out.extend(f16_bytes(rng.uniform(-0.002, 0.002)));
        }
        other => panic!("{other:?} is not a K-quant"),
    }
    out
}

/// GGML's dequantisation of whole super-blocks, in f32 as it computes:
/// Q4_K `(d * sc) * q - (dmin * m)`, Q6_K `(d * sc) * q`.
pub(super) fn dequantise(format: QuantFormat, bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::new();
    match format {
        QuantFormat::Q4_K => {
            for b in bytes.chunks_exact(144) {
                let (d, dmin, scales, qs) = (half_at(b, 0), half_at(b, 2), &b[4..16], &b[16..]);
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
                    for &q in chunk {
                        let nibble = (q >> (4 * (j % 2))) & 15;
                        out.push(scale * f32::from(nibble) - min);
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
/// `quant` module's documentation).
pub(super) fn unpacked(format: QuantFormat, row: &[u32], j: usize) -> f64 {
    let byte = |words: &[u32], i: usize| (words[i / 4] >> (8 * (i % 4))) as u8;
    let value = match format {
        QuantFormat::Q4_K => {
            let block = &row[j / 32 * 6..];
            let (scale, min) = (f32::from_bits(block[0]), f32::from_bits(block[1]));
            let b = byte(&block[2..6], j % 16);
            let nibble = if j % 32 < 16 { b & 15 } else { b >> 4 };
            scale * f32::from(nibble) - min
        }
        QuantFormat::Q6_K => {
            let block = &row[j / 16 * 5..];
            f32::from_bits(block[0]) * f32::from(byte(&block[1..5], j % 16) as i8)
        }
        other => panic!("{other:?} is not a K-quant"),
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

/// The `gguf` package's matrices, one per K-quant format.
fn reference() -> Vec<Reference> {
    let text = include_str!("../../../../crates/hrx-models/tests/reference/kquant/kquant.json");
    let json: serde_json::Value = serde_json::from_str(text).expect("kquant.json");
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a base64 string"))
            .expect("base64")
    };
    K_FORMATS
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
fn rows_not_whole_super_blocks_and_wrong_lengths_are_refused() {
    let mut rng = Gen::new(31);
    for format in K_FORMATS {
        let block = random_block(format, &mut rng);
        for cols in [32, 255, 257, 576] {
            let error = format.pack(1, cols, &block).unwrap_err();
            assert!(
                error.to_string().contains("multiple of 256"),
                "{format:?}: {error}"
            );
            assert!(format.row_words(cols).is_err());
        }
        assert!(format.pack(1, 256, &block[1..]).is_err());
        assert!(format.pack(2, 256, &block).is_err());
        assert!(format.pack(usize::MAX, 256, &block).is_err());
    }
}

#[test]
fn every_kernel_matches_the_reference_on_k_quant_weights() -> Result<()> {
    let mut rng = Gen::new(32);
    for format in K_FORMATS {
        // The matrix-vector kernel (m <= 16) and the tiled one, x aligned
        // and not.
        for (rows, cols) in [(7, 256), (192, 512), (40, 1536)] {
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

/// A K-quant matrix is what its words say it is: the wrong word count
/// for its shape is refused.
#[test]
fn a_k_quant_matrix_needs_its_word_count() {
    let words =
        DeviceTensor::from_values(ops().runtime(), DType::U32, vec![10], &[0.0; 10]).unwrap();
    for format in K_FORMATS {
        let error = QuantMatrix::new(format, 1, 256, words.clone()).unwrap_err();
        assert!(
            error.to_string().contains("u32 tensor of"),
            "{format:?}: {error}"
        );
    }
}
