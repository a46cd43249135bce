//! Host-side decoding of F32, F16 and the GGML block formats Q8_0, Q4_0,
//! Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K to f32: the
//! reference that device kernels with fused dequantisation are tested
//! against, and the path for loading weights as plain f32.
//!
//! The arithmetic is GGML's, in f32 and in the same order (`d * q + m`
//! for Q4_1 and Q5_1, `(q - 8) * d` for Q4_0 and Q5_0 (16), `d * q` for
//! Q8_0, with `d` and `m` widened from f16; for the K-quants each
//! sub-block's `d * sc` (and `dmin * m`) first), so the
//! results are bit-identical to GGML's and the `gguf` package's.

use half::f16;
use hrx_tensor::ops::QuantFormat;

use super::tensor::TensorType;

/// Decodes `bytes`, whole blocks of type `ty`, into `out`, which must hold
/// exactly the values they encode. Returns `Err(type name)` for a type
/// that is not decoded here.
pub(crate) fn dequantize_into(
    ty: TensorType,
    bytes: &[u8],
    out: &mut [f32],
) -> Result<(), &'static str> {
    let block_len = ty.block_len() as usize;
    let block_bytes = ty.block_bytes() as usize;
    debug_assert_eq!(bytes.len() % block_bytes, 0);
    debug_assert_eq!(bytes.len() / block_bytes * block_len, out.len());
    let blocks = bytes
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(block_len));
    match ty {
        TensorType::F32 => {
            for (b, o) in blocks {
                o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        TensorType::F16 => {
            for (b, o) in blocks {
                o[0] = half_at(b, 0);
            }
        }
        TensorType::Q8_0 => {
            for (b, o) in blocks {
                let d = half_at(b, 0);
                for (value, &q) in o.iter_mut().zip(&b[2..34]) {
                    *value = d * f32::from(q as i8);
                }
            }
        }
        TensorType::Q4_1 => {
            for (b, o) in blocks {
                let (d, m) = (half_at(b, 0), half_at(b, 2));
                let (low, high) = o.split_at_mut(16);
                for ((lo, hi), &q) in low.iter_mut().zip(high).zip(&b[4..20]) {
                    *lo = d * f32::from(q & 0x0F) + m;
                    *hi = d * f32::from(q >> 4) + m;
                }
            }
        }
        TensorType::Q4_0 => {
            for (b, o) in blocks {
                let d = half_at(b, 0);
                for (i, value) in o.iter_mut().enumerate() {
                    *value = f32::from(nibble(&b[2..18], i) as i8 - 8) * d;
                }
            }
        }
        TensorType::Q5_0 | TensorType::Q5_1 => {
            // Q5_1 has its minimum after the scale.
            let head = if ty == TensorType::Q5_0 { 2 } else { 4 };
            for (b, o) in blocks {
                let d = half_at(b, 0);
                let (qh, qs) = (&b[head..head + 4], &b[head + 4..]);
                for (i, value) in o.iter_mut().enumerate() {
                    let q = nibble(qs, i) | ((qh[i / 8] >> (i % 8)) & 1) << 4;
                    *value = if head == 2 {
                        f32::from(q as i8 - 16) * d
                    } else {
                        f32::from(q) * d + half_at(b, 2)
                    };
                }
            }
        }
        TensorType::Q4_K | TensorType::Q5_K => {
            // Q5_K has 32 bytes of fifth bits before the nibbles.
            let fifth = ty == TensorType::Q5_K;
            let qs_at = if fifth { 48 } else { 16 };
            for (b, o) in blocks {
                let (d, dmin) = (half_at(b, 0), half_at(b, 2));
                let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[qs_at..qs_at + 128]);
                for (j, sub) in o.chunks_exact_mut(32).enumerate() {
                    let (sc, m) = QuantFormat::k_scale_min(scales, j);
                    let (scale, min) = (d * f32::from(sc), dmin * f32::from(m));
                    let bytes = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                    for (l, (value, &q)) in sub.iter_mut().zip(bytes).enumerate() {
                        let mut q = (q >> (4 * (j % 2))) & 15;
                        if fifth {
                            q |= ((qh[l] >> j) & 1) << 4;
                        }
                        *value = scale * f32::from(q) - min;
                    }
                }
            }
        }
        TensorType::Q6_K => {
            for (b, o) in blocks {
                let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
                let d = half_at(b, 208);
                for (i, value) in o.iter_mut().enumerate() {
                    // Each half of 128 values takes 64 bytes of low bits
                    // and 32 of high bits, a quarter of 32 values at a
                    // time.
                    let (half, quarter, l) = (i / 128, i % 128 / 32, i % 32);
                    let low = ql[64 * half + 32 * (quarter % 2) + l] >> (4 * (quarter / 2));
                    let high = qh[32 * half + l] >> (2 * quarter);
                    let q = ((low & 15) | ((high & 3) << 4)) as i8 - 32;
                    *value = d * f32::from(scales[i / 16] as i8) * f32::from(q);
                }
            }
        }
        other => return Err(other.name()),
    }
    Ok(())
}

/// Value `i` of a block of 32 nibbles in 16 bytes: the low nibbles, then
/// the high ones.
fn nibble(qs: &[u8], i: usize) -> u8 {
    if i < 16 { qs[i] & 15 } else { qs[i - 16] >> 4 }
}

/// The little-endian f16 at `b[at..at + 2]`, widened.
fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_puts_low_nibbles_first() {
        let mut block = vec![0u8; 20];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        block[4] = 0x21; // value 0 is 1, value 16 is 2
        block[19] = 0xF0; // value 15 is 0, value 31 is 15
        let mut out = [0f32; 32];
        dequantize_into(TensorType::Q4_1, &block, &mut out).unwrap();
        assert_eq!((out[0], out[16]), (-0.5, 0.0));
        assert_eq!((out[15], out[31]), (-1.0, 6.5));
        assert_eq!(out[1], -1.0);
    }

    #[test]
    fn q8_0_is_signed() {
        let mut block = vec![0u8; 34];
        block[0..2].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
        block[2] = 0x80; // -128
        block[33] = 0x7F;
        let mut out = [0f32; 32];
        dequantize_into(TensorType::Q8_0, &block, &mut out).unwrap();
        assert_eq!((out[0], out[1], out[31]), (-32.0, 0.0, 31.75));
    }

    #[test]
    fn other_types_are_named() {
        let q3k = TensorType::from_id(11).unwrap();
        let mut out = vec![0f32; 256];
        let error = dequantize_into(q3k, &[0; 110], &mut out).unwrap_err();
        assert_eq!(error, "Q3_K");
    }
}
