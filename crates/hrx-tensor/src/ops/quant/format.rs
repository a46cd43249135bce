//! The weight formats and their device layouts.
//!
//! A row is stored in u32 words, per [`QuantFormat`] (value `j` of a block
//! "in order" is byte `j % 4` of its word `j / 4`, little-endian):
//!
//! - `F32`: one word per value, its bits;
//! - `F16`: two values per word, the lower column in the low half; an odd
//!   `cols` pads the row's last upper half with zero;
//! - `Q8_0`: 9 words per block of 32: word 0 the f16 scale `d` (low half,
//!   upper half zero), words 1..=8 the 32 signed bytes `q` in order;
//!   value = `d * q`;
//! - `Q4_0`: 5 words per block of 32: word 0 `d` as Q8_0's, words 1..=4
//!   the 16 bytes of nibbles (value `j < 16` the low nibble of byte `j`,
//!   value `j + 16` its high nibble); value = `d * (nibble - 8)`;
//! - `Q4_1`: GGML's 20-byte block as 5 words: word 0 = f16 `d` (low
//!   half) and f16 `m` (high half), words 1..=4 the nibbles as Q4_0's;
//!   value = `d * nibble + m` (one rounding);
//! - `Q5_0`: 6 words per block of 32: word 0 `d` as Q8_0's, word 1 the
//!   fifth bits (bit `j` of value `j`), words 2..=5 the low nibbles as
//!   Q4_0's; value = `d * (q - 16)`;
//! - `Q5_1`: GGML's 24-byte block as 6 words: word 0 `d` and `m` as
//!   Q4_1's, then Q5_0's; value = `d * q + m`;
//! - `Q4_K`: each sub-block of 32 values of a 144-byte super-block as 6
//!   words: word 0 the f32 scale `d * sc`, word 1 the f32 minimum
//!   `dmin * m` (the sub-block's 6-bit scale and minimum times the
//!   super-block's f16 pair, as GGML computes them), words 2..=5 nibbles
//!   as Q4_0's; value = `scale * nibble - min`. 1.33 times the file's
//!   size;
//! - `Q5_K`: each sub-block of 32 values of a 176-byte super-block as 7
//!   words: Q4_K's scale and minimum, then Q5_0's fifth bits and
//!   nibbles; value = `scale * q - min`. 1.27 times the file's size;
//! - `Q6_K`: each sub-block of 16 values of a 210-byte super-block as 5
//!   words: word 0 the f32 scale `d * sc`, words 1..=4 the 16 values
//!   `q - 32` as signed bytes in order; value = `scale * q`. 1.52 times
//!   the file's size.
//!
//! Every value comes out as GGML's dequantisation computes it, bit for
//! bit, but Q4_1's (one rounding where GGML rounds twice). The K-quants'
//! sub-blocks are unpacked on the host once, when the matrix is packed,
//! so every kernel reads them as it reads the 32-value formats.

use super::repack;
use hrx_core::{Error, Result};

/// How a weight matrix is stored on the device.
// The variants keep GGML's names, which users know the files by.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// f32 values, one per word.
    F32,
    /// f16 values, two per word.
    F16,
    /// GGML Q8_0: blocks of 32 signed bytes and an f16 scale.
    Q8_0,
    /// GGML Q4_0: blocks of 32 nibbles, offset by 8, and an f16 scale.
    Q4_0,
    /// GGML Q4_1: blocks of 32 nibbles, an f16 scale and an f16 minimum.
    Q4_1,
    /// GGML Q5_0: blocks of 32 5-bit values, offset by 16, and an f16
    /// scale.
    Q5_0,
    /// GGML Q5_1: blocks of 32 5-bit values, an f16 scale and an f16
    /// minimum.
    Q5_1,
    /// GGML Q4_K: super-blocks of 256 nibbles in 8 sub-blocks of 32, each
    /// with a 6-bit scale and minimum of the super-block's f16 pair.
    Q4_K,
    /// GGML Q5_K: Q4_K with a fifth bit per value.
    Q5_K,
    /// GGML Q6_K: super-blocks of 256 6-bit values in 16 sub-blocks of
    /// 16, each with a signed 8-bit scale of the super-block's f16 scale.
    Q6_K,
}

impl QuantFormat {
    /// The 6-bit scale and minimum of sub-block `j` of a Q4_K or Q5_K
    /// super-block's 12 packed bytes: sub-blocks 0..4 in the low 6 bits of
    /// bytes `j` and `j + 4`; 4..8 in the nibbles of byte `j + 4` with their
    /// top two bits in the high bits of bytes `j - 4` and `j` (GGML's
    /// layout; the host dequantisation and the device repacking share it).
    ///
    /// # Panics
    /// Where `scales` holds fewer than 12 bytes or `j >= 8`.
    pub fn k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
        if j < 4 {
            (scales[j] & 63, scales[j + 4] & 63)
        } else {
            let packed = scales[j + 4];
            let scale = (packed & 15) | ((scales[j - 4] >> 6) << 4);
            let min = (packed >> 4) | ((scales[j] >> 6) << 4);
            (scale, min)
        }
    }

    /// Every format, in the order of the enum.
    pub const ALL: [QuantFormat; 10] = [
        QuantFormat::F32,
        QuantFormat::F16,
        QuantFormat::Q8_0,
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q4_K,
        QuantFormat::Q5_K,
        QuantFormat::Q6_K,
    ];

    /// Values per GGML block (1 for F32/F16, 32 for Q8_0 and Q4_0 to
    /// Q5_1, 256 for the K-quants): a row's length must be a multiple.
    pub fn block_len(self) -> usize {
        match self {
            QuantFormat::F32 | QuantFormat::F16 => 1,
            QuantFormat::Q8_0
            | QuantFormat::Q4_0
            | QuantFormat::Q4_1
            | QuantFormat::Q5_0
            | QuantFormat::Q5_1 => 32,
            QuantFormat::Q4_K | QuantFormat::Q5_K | QuantFormat::Q6_K => 256,
        }
    }

    /// Bytes of one GGML block.
    fn block_bytes(self) -> usize {
        match self {
            QuantFormat::F32 => 4,
            QuantFormat::F16 => 2,
            QuantFormat::Q8_0 => 34,
            QuantFormat::Q4_0 => 18,
            QuantFormat::Q4_1 => 20,
            QuantFormat::Q5_0 => 22,
            QuantFormat::Q5_1 => 24,
            QuantFormat::Q4_K => 144,
            QuantFormat::Q5_K => 176,
            QuantFormat::Q6_K => 210,
        }
    }

    pub(super) fn fail(self, rows: usize, cols: usize, why: &str) -> Error {
        Error::Message(format!("{self:?} matrix of {rows} x {cols}: {why}"))
    }

    /// Blocks in one row, checked.
    fn row_blocks(self, rows: usize, cols: usize) -> Result<usize> {
        if !cols.is_multiple_of(self.block_len()) {
            return Err(self.fail(
                rows,
                cols,
                &format!("cols must be a multiple of {}", self.block_len()),
            ));
        }
        Ok(cols / self.block_len())
    }

    /// u32 words of one packed row (the device row stride).
    pub fn row_words(self, cols: usize) -> Result<usize> {
        let blocks = self.row_blocks(0, cols)?;
        let times = |n: usize, words: usize| {
            n.checked_mul(words)
                .ok_or_else(|| self.fail(0, cols, "too many words"))
        };
        match self {
            QuantFormat::F32 => Ok(cols),
            QuantFormat::F16 => Ok(cols.div_ceil(2)),
            QuantFormat::Q8_0 => times(blocks, 9),
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => times(blocks, 5),
            QuantFormat::Q5_0 | QuantFormat::Q5_1 => times(blocks, 6),
            // Sub-blocks of 32 values in 6 or 7 words, of 16 values in 5.
            QuantFormat::Q4_K => times(cols / 32, 6),
            QuantFormat::Q5_K => times(cols / 32, 7),
            QuantFormat::Q6_K => times(cols / 16, 5),
        }
    }

    /// Repack a row-major matrix of `rows` rows of `cols` values, given in
    /// GGML's byte layout (GGUF tensor data), into the device layout the
    /// module documentation describes. Errors (never panics) when `cols`
    /// is not a multiple of [`block_len`](Self::block_len), the byte
    /// length is not exactly `rows * cols / block_len * block_bytes`, or a
    /// count overflows.
    pub fn pack(self, rows: usize, cols: usize, ggml: &[u8]) -> Result<Vec<u32>> {
        let blocks = self.row_blocks(rows, cols)?;
        let row_words = self.row_words(cols)?;
        let overflow = || self.fail(rows, cols, "the size overflows");
        let row_bytes = blocks
            .checked_mul(self.block_bytes())
            .ok_or_else(overflow)?;
        let bytes = rows.checked_mul(row_bytes).ok_or_else(overflow)?;
        let words = rows.checked_mul(row_words).ok_or_else(overflow)?;
        if ggml.len() != bytes {
            return Err(self.fail(
                rows,
                cols,
                &format!("{} bytes given, {bytes} expected", ggml.len()),
            ));
        }
        let mut out = Vec::with_capacity(words);
        if row_bytes == 0 {
            return Ok(out);
        }
        let block = self.block_bytes();
        let each = |out: &mut Vec<u32>, pack: fn(&[u8], &mut Vec<u32>)| {
            ggml.chunks_exact(block).for_each(|b| pack(b, out));
        };
        match self {
            QuantFormat::F32 | QuantFormat::Q4_1 | QuantFormat::Q5_1 => {
                out.extend(repack::words(ggml))
            }
            QuantFormat::F16 => {
                for row in ggml.chunks_exact(row_bytes) {
                    repack::pack_f16_row(row, &mut out);
                }
            }
            QuantFormat::Q8_0 => each(&mut out, repack::pack_q8_0),
            QuantFormat::Q4_0 => each(&mut out, repack::pack_q4_0),
            QuantFormat::Q5_0 => each(&mut out, repack::pack_q5_0),
            QuantFormat::Q4_K => each(&mut out, repack::pack_q4_k),
            QuantFormat::Q5_K => each(&mut out, repack::pack_q5_k),
            QuantFormat::Q6_K => each(&mut out, repack::pack_q6_k),
        }
        Ok(out)
    }
}
