//! A GGUF file with chosen tensors re-encoded as F32, F16, Q4_0, Q5_0,
//! Q5_1, Q4_K, Q5_K or Q6_K from their decoded values, the rest as they
//! were: the same model in other tensor types, and in mixed ones.
//!
//! The block encoders are plain and deterministic (each block's scale
//! from its range, a super-block's from its largest sub-block scale,
//! values rounded to nearest), not llama.cpp's search for the best
//! scales: what the tests need is valid blocks whose decoded values an
//! independent reference reads from the same bytes.

use half::f16;
use hrx_models::gguf::{GgufFile, TensorInfo, TensorType};

/// The bytes of `info`'s values as `to` (F32 or F16) stores them.
fn encoded(file: &GgufFile, info: &TensorInfo, to: TensorType) -> Vec<u8> {
    let values = file.dequantize(info).expect("a decodable tensor");
    if to == TensorType::F32 {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else if to == TensorType::F16 {
        values
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect()
    } else if to == TensorType::Q4_0 {
        values.chunks_exact(32).flat_map(q4_0_block).collect()
    } else if to == TensorType::Q5_0 || to == TensorType::Q5_1 {
        let with_min = to == TensorType::Q5_1;
        values
            .chunks_exact(32)
            .flat_map(|b| q5_block(b, with_min))
            .collect()
    } else if to == TensorType::Q4_K || to == TensorType::Q5_K {
        let fifth = to == TensorType::Q5_K;
        values
            .chunks_exact(256)
            .flat_map(|b| k_block(b, fifth))
            .collect()
    } else if to == TensorType::Q6_K {
        values.chunks_exact(256).flat_map(q6_k_block).collect()
    } else {
        panic!("re-encoding as {} is not written", to.name())
    }
}

/// `v` as f16 and back: the value a super-block scale decodes to.
fn through_f16(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// `v / scale` rounded to the nearest integer in `lo..=hi` (0 for a zero
/// scale).
fn quantised(v: f32, scale: f32, (lo, hi): (i32, i32)) -> i32 {
    if scale == 0.0 {
        return 0;
    }
    ((v / scale).round() as i32).clamp(lo, hi)
}

/// The largest magnitude of `values`.
fn amax(values: &[f32]) -> f32 {
    values.iter().fold(0f32, |a, &v| a.max(v.abs()))
}

/// 32 nibbles as 16 bytes: value `i < 16` in the low nibble of byte `i`,
/// value `i + 16` in its high nibble.
fn nibbles(q: &[u8]) -> impl Iterator<Item = u8> + '_ {
    (0..16).map(|i| (q[i] & 15) | ((q[i + 16] & 15) << 4))
}

/// 32 values as one Q4_0 block: `d * (q - 8)`.
fn q4_0_block(values: &[f32]) -> Vec<u8> {
    let d = through_f16(amax(values) / 7.0);
    let q: Vec<u8> = values
        .iter()
        .map(|&v| (quantised(v, d, (-8, 7)) + 8) as u8)
        .collect();
    let mut out = f16::from_f32(d).to_le_bytes().to_vec();
    out.extend(nibbles(&q));
    out
}

/// 32 values as one Q5_0 block (`d * (q - 16)`) or Q5_1 block
/// (`d * q + m`): the scale (and minimum), 32 fifth bits, the nibbles.
fn q5_block(values: &[f32], with_min: bool) -> Vec<u8> {
    let (d, m, q): (f32, f32, Vec<u8>) = if with_min {
        let lo = values.iter().fold(f32::INFINITY, |a, &v| a.min(v));
        let hi = values.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        let (d, m) = (through_f16((hi - lo) / 31.0), through_f16(lo));
        let q = values
            .iter()
            .map(|&v| quantised(v - m, d, (0, 31)) as u8)
            .collect();
        (d, m, q)
    } else {
        let d = through_f16(amax(values) / 15.0);
        let q = values
            .iter()
            .map(|&v| (quantised(v, d, (-16, 15)) + 16) as u8)
            .collect();
        (d, 0.0, q)
    };
    let mut out = f16::from_f32(d).to_le_bytes().to_vec();
    if with_min {
        out.extend(f16::from_f32(m).to_le_bytes());
    }
    let fifth = q
        .iter()
        .enumerate()
        .fold(0u32, |bits, (i, &q)| bits | (u32::from(q >> 4) << i));
    out.extend(fifth.to_le_bytes());
    out.extend(nibbles(&q));
    out
}

/// 256 values as one Q4_K super-block (`fifth`: Q5_K): sub-block `j` of
/// 32 holds `(d * sc[j]) * q - dmin * m[j]`, with 6-bit `sc`, `m` and
/// 4-bit (5-bit) `q`.
fn k_block(values: &[f32], fifth: bool) -> Vec<u8> {
    let top = if fifth { 31 } else { 15 };
    // Each sub-block's scale and minimum, from its range (0 included).
    let ranges: Vec<(f32, f32)> = values
        .chunks_exact(32)
        .map(|sub| {
            let lo = sub.iter().fold(0f32, |a, &v| a.min(v));
            let hi = sub.iter().fold(0f32, |a, &v| a.max(v));
            ((hi - lo) / top as f32, -lo)
        })
        .collect();
    let largest = |f: fn(&(f32, f32)) -> f32| ranges.iter().map(f).fold(0f32, f32::max);
    let d = through_f16(largest(|r| r.0) / 63.0);
    let dmin = through_f16(largest(|r| r.1) / 63.0);
    let six = |v: f32, unit: f32| quantised(v, unit, (0, 63)) as u8;
    let sc: Vec<u8> = ranges.iter().map(|r| six(r.0, d)).collect();
    let m: Vec<u8> = ranges.iter().map(|r| six(r.1, dmin)).collect();
    let mut scales = [0u8; 12];
    for j in 0..4 {
        scales[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        scales[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        scales[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    let q: Vec<u8> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (scale, min) = (d * f32::from(sc[i / 32]), dmin * f32::from(m[i / 32]));
            quantised(v + min, scale, (0, top)) as u8
        })
        .collect();
    let mut out = Vec::with_capacity(176);
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(dmin).to_le_bytes());
    out.extend(scales);
    if fifth {
        // Bit `j` of byte `l`: the fifth bit of value `l` of sub-block `j`.
        out.extend((0..32).map(|l| (0..8).fold(0u8, |b, j| b | ((q[32 * j + l] >> 4) << j))));
    }
    for chunk in q.chunks_exact(64) {
        out.extend((0..32).map(|l| (chunk[l] & 15) | ((chunk[l + 32] & 15) << 4)));
    }
    out
}

/// 256 values as one Q6_K super-block: sub-block `j` of 16 holds
/// `(d * sc[j]) * (q - 32)`, with signed 8-bit `sc` and 6-bit `q`.
fn q6_k_block(values: &[f32]) -> Vec<u8> {
    let amax = |sub: &[f32]| sub.iter().fold(0f32, |a, &v| a.max(v.abs()));
    let unit: Vec<f32> = values.chunks_exact(16).map(|s| amax(s) / 31.0).collect();
    let d = through_f16(unit.iter().fold(0f32, |a, &u| a.max(u)) / 127.0);
    let sc: Vec<i8> = unit
        .iter()
        .map(|&u| quantised(u, d, (-128, 127)) as i8)
        .collect();
    let q: Vec<u8> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| (quantised(v, d * f32::from(sc[i / 16]), (-32, 31)) + 32) as u8)
        .collect();
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (i, &value) in q.iter().enumerate() {
        // Each half of 128 values: 64 bytes of low nibbles (a quarter of
        // 32 values each in the low or high nibbles of 32 bytes) and 32
        // bytes of high bit pairs.
        let (half, quarter, l) = (i / 128, i % 128 / 32, i % 32);
        ql[64 * half + 32 * (quarter % 2) + l] |= (value & 15) << (4 * (quarter / 2));
        qh[32 * half + l] |= (value >> 4) << (2 * quarter);
    }
    let mut out = Vec::with_capacity(210);
    out.extend(ql);
    out.extend(qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend(f16::from_f32(d).to_le_bytes());
    out
}

/// Where `info`'s record (its name, then the dims, the type and the
/// offset) starts its type field in `header`: after the last occurrence
/// of its length-prefixed name (the tensor infos follow the metadata).
fn type_field(header: &[u8], info: &TensorInfo) -> usize {
    let name = info.name().as_bytes();
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(name);
    let at = header
        .windows(key.len())
        .rposition(|w| w == key)
        .unwrap_or_else(|| panic!("no record of {}", info.name()));
    // The dimension count (u32), then one u64 per dimension.
    at + key.len() + 4 + 8 * info.dims().len()
}

/// `file` with each tensor named in `types` re-encoded as its type, and
/// the change in bytes of the re-encoded tensors.
pub fn reencoded(file: &GgufFile, types: &[(String, TensorType)]) -> (GgufFile, i64) {
    let mut out = file.bytes()[..file.data_offset() as usize].to_vec();
    let header_len = out.len();
    let alignment = file.alignment() as usize;
    let mut data: Vec<u8> = Vec::new();
    let mut grown = 0i64;
    for info in file.tensors() {
        let target = types.iter().find(|(n, _)| n == info.name()).map(|t| t.1);
        let bytes = match target {
            Some(to) => encoded(file, info, to),
            None => file.tensor_data(info).to_vec(),
        };
        grown += bytes.len() as i64 - info.byte_len() as i64;
        data.resize(data.len().next_multiple_of(alignment), 0);
        let at = type_field(&out[..header_len], info);
        let kind = target.unwrap_or(info.tensor_type()).id();
        out[at..at + 4].copy_from_slice(&kind.to_le_bytes());
        out[at + 4..at + 12].copy_from_slice(&(data.len() as u64).to_le_bytes());
        data.extend(bytes);
    }
    out.extend(data);
    (GgufFile::from_bytes(out).expect("a valid file"), grown)
}
