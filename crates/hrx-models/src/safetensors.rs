//! Reading and writing [`Weights`] as safetensors (a little-endian header
//! length, a JSON header of dtype, shape and byte range per tensor, then
//! the packed data).

use crate::Weights;
use hrx_core::{Error, Result};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

fn malformed(why: impl std::fmt::Display) -> Error {
    Error::Message(format!("malformed safetensors file: {why}"))
}

/// Little-endian element bytes to f32, for the dtypes we convert.
fn decode(name: &str, dtype: Dtype, data: &[u8]) -> Result<Vec<f32>> {
    let pairs = || {
        data.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    };
    Ok(match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => pairs().map(|b| half::f16::from_bits(b).to_f32()).collect(),
        Dtype::BF16 => pairs().map(|b| half::bf16::from_bits(b).to_f32()).collect(),
        other => {
            return Err(Error::Unsupported(format!(
                "safetensors tensor {name:?} has dtype {other:?} (F32, F16 and BF16 are read)"
            )));
        }
    })
}

impl Weights {
    /// Parse a safetensors file, converting F32, F16 and BF16 tensors to
    /// f32. A short or inconsistent header, bad JSON, data ranges that are
    /// out of bounds, overlapping or leave gaps, an unknown dtype and a
    /// repeated name are errors (`Error::Unsupported` for a known dtype that
    /// is not converted, such as I64). `__metadata__` is ignored.
    pub fn from_safetensors(bytes: &[u8]) -> Result<Weights> {
        let file = SafeTensors::deserialize(bytes).map_err(malformed)?;
        let mut weights = Weights::new();
        for (name, view) in file.iter() {
            let values = decode(name, view.dtype(), view.data())?;
            weights.insert(name, view.shape().to_vec(), values)?;
        }
        Ok(weights)
    }

    /// Serialize every tensor as F32 safetensors (readable by
    /// [`from_safetensors`](Self::from_safetensors) and by other tools).
    pub fn to_safetensors(&self) -> Vec<u8> {
        let data: Vec<(&str, &[usize], Vec<u8>)> = self
            .iter()
            .map(|(name, shape, values)| {
                let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                (name, shape, bytes)
            })
            .collect();
        let views = data.iter().map(|(name, shape, bytes)| {
            let view = TensorView::new(Dtype::F32, shape.to_vec(), bytes)
                .expect("insert keeps every value count equal to its shape's");
            (*name, view)
        });
        safetensors::serialize(views, None)
            .expect("serializing in-memory f32 tensors with consistent shapes cannot fail")
    }
}
