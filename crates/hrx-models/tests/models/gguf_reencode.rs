//! A GGUF file with chosen tensors re-encoded as F32 or F16 from their
//! decoded values, the rest as they were: the same model in other tensor
//! types, and in mixed ones.

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
    } else {
        panic!("re-encoding as {} is not written", to.name())
    }
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
