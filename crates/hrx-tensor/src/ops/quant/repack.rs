//! GGML's blocks into the device layout (`format`'s documentation): whole
//! words, each block's scales where the span readers look for them, the
//! K-quants' sub-block scales and minimums computed once in f32 exactly
//! as GGML's dequantisation computes them.

use super::QuantFormat;
use half::f16;

/// Little-endian words of `bytes` (a multiple of 4 long).
pub(super) fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The f16 at `b[at..at + 2]`: its bits, and its value.
fn half_bits(b: &[u8], at: usize) -> u32 {
    u32::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// A row of f16 values, two a word (an odd last one in a low half).
pub(super) fn pack_f16_row(row: &[u8], out: &mut Vec<u32>) {
    out.extend(row.chunks(4).map(|p| {
        let hi = if p.len() == 4 { half_bits(p, 2) } else { 0 };
        half_bits(p, 0) | hi << 16
    }));
}

/// Q8_0 (`d`, 32 bytes): the scale alone in a word, then the bytes.
pub(super) fn pack_q8_0(block: &[u8], out: &mut Vec<u32>) {
    out.push(half_bits(block, 0));
    out.extend(words(&block[2..34]));
}

/// Q4_0 (`d`, 16 bytes of nibbles): the scale alone in a word, then the
/// nibbles.
pub(super) fn pack_q4_0(block: &[u8], out: &mut Vec<u32>) {
    out.push(half_bits(block, 0));
    out.extend(words(&block[2..18]));
}

/// Q5_0 (`d`, 4 bytes of fifth bits, 16 bytes of nibbles): the scale
/// alone in a word, then the rest as it is.
pub(super) fn pack_q5_0(block: &[u8], out: &mut Vec<u32>) {
    out.push(half_bits(block, 0));
    out.extend(words(&block[2..22]));
}

/// Sub-block `j`'s f32 scale and minimum words, as GGML computes them.
fn scale_min_words(block: &[u8], j: usize, out: &mut Vec<u32>) {
    let (d, dmin) = (half_at(block, 0), half_at(block, 2));
    let (sc, m) = QuantFormat::k_scale_min(&block[4..16], j);
    out.push((d * f32::from(sc)).to_bits());
    out.push((dmin * f32::from(m)).to_bits());
}

/// Sub-block `j`'s 32 nibbles from a K-quant's 128 bytes `qs` (each 32
/// bytes hold sub-block `2g` in their low nibbles and `2g + 1` in their
/// high ones), as 16 bytes in Q4_0's order.
fn nibble_words(qs: &[u8], j: usize, out: &mut Vec<u32>) {
    let (bytes, shift) = (&qs[32 * (j / 2)..32 * (j / 2) + 32], 4 * (j % 2));
    let nibble = |i: usize| (bytes[i] >> shift) & 15;
    let packed: Vec<u8> = (0..16).map(|i| nibble(i) | (nibble(i + 16) << 4)).collect();
    out.extend(words(&packed));
}

/// One Q4_K super-block (`d`, `dmin`: f16; 12 bytes of scales; 128 bytes
/// of nibbles) as 8 sub-blocks of 6 words.
pub(super) fn pack_q4_k(block: &[u8], out: &mut Vec<u32>) {
    for j in 0..8 {
        scale_min_words(block, j, out);
        nibble_words(&block[16..144], j, out);
    }
}

/// One Q5_K super-block (Q4_K's head, 32 bytes of fifth bits — bit `j`
/// of byte `l` for value `l` of sub-block `j` — then 128 bytes of
/// nibbles) as 8 sub-blocks of 7 words.
pub(super) fn pack_q5_k(block: &[u8], out: &mut Vec<u32>) {
    let qh = &block[16..48];
    for j in 0..8 {
        scale_min_words(block, j, out);
        let fifth = (0..32).fold(0u32, |w, l| w | ((u32::from(qh[l]) >> j & 1) << l));
        out.push(fifth);
        nibble_words(&block[48..176], j, out);
    }
}

/// The 6-bit value `i` (0..256) of a Q6_K super-block, less 32: its low
/// four bits in the 128 bytes `ql`, its high two in the 64 bytes `qh`,
/// each half of 128 values taking 64 and 32 of them.
fn q6_k_value(ql: &[u8], qh: &[u8], i: usize) -> i8 {
    let (half, r) = (i / 128, i % 128);
    let (quarter, l) = (r / 32, r % 32);
    let low_byte = ql[64 * half + l + 32 * (quarter % 2)];
    let low = (low_byte >> (4 * (quarter / 2))) & 15;
    let high = (qh[32 * half + l] >> (2 * quarter)) & 3;
    ((low | (high << 4)) as i8) - 32
}

/// One Q6_K super-block (128 bytes `ql`, 64 bytes `qh`, 16 signed scales,
/// f16 `d`) as 16 sub-blocks of 5 words.
pub(super) fn pack_q6_k(block: &[u8], out: &mut Vec<u32>) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = half_at(block, 208);
    for (j, &scale) in scales.iter().enumerate() {
        out.push((d * f32::from(scale as i8)).to_bits());
        let values: Vec<u8> = (16 * j..16 * j + 16)
            .map(|i| q6_k_value(ql, qh, i) as u8)
            .collect();
        out.extend(words(&values));
    }
}
