//! Host conversions: encode values into a dtype's bytes, upload them, and
//! read tensors back as `f64` in logical (row-major) order. For tests,
//! tools and small inputs; serving code uploads through its own staging.

use crate::{DType, DeviceTensor, TensorDesc};
use half::{bf16, f16};
use hrx_core::{Error, Result};
use hrx_runtime::{MemoryPlacement, Runtime};

/// Encode `values` as little-endian elements of `dtype`. Floats round to
/// nearest; integers convert as Rust's `as` does (saturating, NaN to 0).
pub fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.bytes());
    for &v in values {
        match dtype {
            DType::U8 => out.push(v as u8),
            DType::I8 => out.extend((v as i8).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::U32 => out.extend((v as u32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::F16 => out.extend(f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend(bf16::from_f64(v).to_le_bytes()),
            DType::F32 => out.extend((v as f32).to_le_bytes()),
        }
    }
    out
}

/// Decode the element at byte `at` of `bytes` (which must hold it).
fn decode_one(dtype: DType, bytes: &[u8], at: usize) -> f64 {
    let b = &bytes[at..at + dtype.bytes()];
    match dtype {
        DType::U8 => f64::from(b[0]),
        DType::I8 => f64::from(b[0] as i8),
        DType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::U32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64,
        DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    }
}

/// Decode the elements of `desc` from its storage bytes, in row-major
/// order of the logical indices (strides and gaps applied).
pub fn decode(desc: &TensorDesc, bytes: &[u8]) -> Result<Vec<f64>> {
    if bytes.len() < desc.bytes() {
        return Err(Error::Message(format!(
            "decode of tensor {desc}: {} bytes given, it spans {}",
            bytes.len(),
            desc.bytes()
        )));
    }
    let mut out = Vec::with_capacity(desc.elements());
    if desc.is_empty() {
        return Ok(out);
    }
    let mut index = vec![0usize; desc.rank()];
    loop {
        let offset: usize = index.iter().zip(desc.strides()).map(|(i, s)| i * s).sum();
        out.push(decode_one(
            desc.dtype(),
            bytes,
            offset * desc.dtype().bytes(),
        ));
        // Advance the multi-index, last axis fastest.
        let mut axis = desc.rank();
        loop {
            if axis == 0 {
                return Ok(out);
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < desc.shape()[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
}

impl DeviceTensor {
    /// Upload `bytes` (exactly `desc.bytes()` of them) into new device-local
    /// storage through a host-visible staging buffer. Returns at once; the
    /// tensor's producer is the copy.
    pub fn upload(runtime: &Runtime, desc: TensorDesc, bytes: &[u8]) -> Result<DeviceTensor> {
        if bytes.len() != desc.bytes() {
            return Err(Error::Message(format!(
                "upload of tensor {desc}: {} bytes given, it spans {}",
                bytes.len(),
                desc.bytes()
            )));
        }
        let mut tensor = DeviceTensor::allocate(runtime, desc, MemoryPlacement::GpuLocal)?;
        if let Some(destination) = tensor.binding() {
            let staging = runtime.allocate(bytes.len(), MemoryPlacement::HostVisible)?;
            staging.map_write()?.copy_from_slice(bytes);
            let mut graph = runtime.graph();
            graph.copy(destination, staging.view())?;
            tensor.set_producer(graph.prepare()?.submit()?);
        }
        Ok(tensor)
    }

    /// Upload `values` converted to `dtype`, as a contiguous tensor of `shape`.
    pub fn from_values(
        runtime: &Runtime,
        dtype: DType,
        shape: Vec<usize>,
        values: &[f64],
    ) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(dtype, shape)?;
        if values.len() != desc.elements() {
            return Err(Error::Message(format!(
                "upload of tensor {desc}: {} values given, it has {} elements",
                values.len(),
                desc.elements()
            )));
        }
        DeviceTensor::upload(runtime, desc, &encode(dtype, values))
    }

    /// Wait for the producer and copy the storage bytes (gaps included) to
    /// the host. Fails with the producer's failure.
    pub fn download(&self) -> Result<Vec<u8>> {
        let Some(source) = self.binding() else {
            self.completion().wait()?;
            return Ok(Vec::new());
        };
        let staging = self
            .runtime()
            .allocate(source.len(), MemoryPlacement::HostVisible)?;
        let mut graph = self.runtime().graph();
        graph.copy(staging.view(), source)?;
        graph
            .prepare()?
            .submit_after(std::slice::from_ref(self.completion()))?
            .wait()?;
        Ok(staging.map_read()?.to_vec())
    }

    /// Wait and read the elements as `f64`, in logical row-major order.
    pub fn to_values(&self) -> Result<Vec<f64>> {
        decode(self.desc(), &self.download()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_with_strides() {
        let values = [1.5, -2.0, 3.25, 4.0, 5.0, -6.5];
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64] {
            let desc = TensorDesc::new(dtype, vec![2, 3]).unwrap();
            let back = decode(&desc, &encode(dtype, &values)).unwrap();
            let expect: Vec<f64> = if dtype.is_float() {
                values.to_vec()
            } else {
                values.iter().map(|v| v.trunc()).collect()
            };
            assert_eq!(back, expect, "{dtype}");
        }
        let transposed = TensorDesc::strided(DType::F32, vec![3, 2], vec![1, 3]).unwrap();
        let back = decode(&transposed, &encode(DType::F32, &values)).unwrap();
        assert_eq!(back, [1.5, 4.0, -2.0, 5.0, 3.25, -6.5]);
        assert!(decode(&transposed, &[0; 8]).is_err());
    }
}
