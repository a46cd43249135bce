//! Host-side decoding of F32, F16, Q8_0 and Q4_1 data to f32: the
//! reference that device kernels with fused dequantisation are tested
//! against, and the path for loading weights as plain f32.
//!
//! The arithmetic is GGML's, in f32 and in the same order (`d * q + m`
//! for Q4_1, `d * q` for Q8_0, with `d` and `m` widened from f16), so the
//! results are bit-identical to GGML's and the `gguf` package's.

use half::f16;

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
        other => return Err(other.name()),
    }
    Ok(())
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
        let q6k = TensorType::from_id(14).unwrap();
        let mut out = vec![0f32; 256];
        let error = dequantize_into(q6k, &[0; 210], &mut out).unwrap_err();
        assert_eq!(error, "Q6_K");
    }
}
