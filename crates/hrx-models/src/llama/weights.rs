//! A llama model's weights on the device: matrices in their own quantised
//! format (packed once into the kernels' word layout), norms as f32.

use crate::gguf::{GgufFile, LlamaConfig, TensorInfo, TensorType};
use hrx_core::{Error, Result};
use hrx_inference::ModelContext;
use hrx_tensor::{
    DType, DeviceTensor, TensorDesc,
    ops::{QuantFormat, QuantMatrix},
};

/// One transformer block's weights.
pub(crate) struct Block {
    pub attn_norm: DeviceTensor,
    pub q: QuantMatrix,
    pub k: QuantMatrix,
    pub v: QuantMatrix,
    pub output: QuantMatrix,
    pub ffn_norm: DeviceTensor,
    pub gate: QuantMatrix,
    pub up: QuantMatrix,
    pub down: QuantMatrix,
}

/// Every weight the forward pass reads, resident on one device.
pub(crate) struct LlamaWeights {
    pub embedding: QuantMatrix,
    pub blocks: Vec<Block>,
    pub output_norm: DeviceTensor,
    /// The output projection: the embedding itself when tied.
    pub output: QuantMatrix,
    /// Device bytes of all of the above.
    pub bytes: usize,
}

/// The device format of a GGUF tensor type, or `Unsupported` naming it.
fn format_of(info: &TensorInfo) -> Result<QuantFormat> {
    match info.tensor_type() {
        TensorType::F32 => Ok(QuantFormat::F32),
        TensorType::F16 => Ok(QuantFormat::F16),
        TensorType::Q8_0 => Ok(QuantFormat::Q8_0),
        TensorType::Q4_1 => Ok(QuantFormat::Q4_1),
        other => Err(Error::Unsupported(format!(
            "tensor {}: type {} has no device kernels (F32, F16, Q8_0 and Q4_1 do)",
            info.name(),
            other.name()
        ))),
    }
}

struct Uploader<'a> {
    context: &'a ModelContext,
    file: &'a GgufFile,
    bytes: usize,
    pending: Vec<DeviceTensor>,
}

impl Uploader<'_> {
    /// The matrix `name` as stored, packed for the device.
    fn matrix(&mut self, name: &str) -> Result<QuantMatrix> {
        let info = self.file.tensor(name)?;
        let format = format_of(info)?;
        let (cols, rows) = (info.row_len() as usize, info.rows() as usize);
        let words = format
            .pack(rows, cols, self.file.tensor_data(info))
            .map_err(|e| Error::Message(format!("tensor {name}: {e}")))?;
        let desc = TensorDesc::new(DType::U32, vec![words.len()])?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let tensor = self
            .context
            .upload(desc, &bytes)
            .map_err(|e| Error::Message(format!("uploading tensor {name}: {e}")))?;
        self.bytes += words.len() * 4;
        self.pending.push(tensor.clone());
        QuantMatrix::new(format, rows, cols, tensor)
    }

    /// The vector `name` as f32.
    fn vector(&mut self, name: &str) -> Result<DeviceTensor> {
        let info = self.file.tensor(name)?;
        let values = self.file.dequantize(info)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let tensor = self
            .context
            .upload(TensorDesc::new(DType::F32, vec![values.len()])?, &bytes)?;
        self.bytes += bytes.len();
        self.pending.push(tensor.clone());
        Ok(tensor)
    }
}

impl LlamaWeights {
    /// Uploads every tensor of `config` from `file` (which
    /// [`LlamaConfig::check_tensors`] has accepted) and waits until they
    /// are resident.
    pub fn upload(context: &ModelContext, file: &GgufFile, config: &LlamaConfig) -> Result<Self> {
        config.check_tensors(file)?;
        let mut up = Uploader {
            context,
            file,
            bytes: 0,
            pending: Vec::new(),
        };
        let embedding = up.matrix("token_embd.weight")?;
        let mut blocks = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let name = |n: &str| format!("blk.{i}.{n}.weight");
            blocks.push(Block {
                attn_norm: up.vector(&name("attn_norm"))?,
                q: up.matrix(&name("attn_q"))?,
                k: up.matrix(&name("attn_k"))?,
                v: up.matrix(&name("attn_v"))?,
                output: up.matrix(&name("attn_output"))?,
                ffn_norm: up.vector(&name("ffn_norm"))?,
                gate: up.matrix(&name("ffn_gate"))?,
                up: up.matrix(&name("ffn_up"))?,
                down: up.matrix(&name("ffn_down"))?,
            });
        }
        let output_norm = up.vector("output_norm.weight")?;
        let output = if config.tied_embedding {
            embedding.clone()
        } else {
            up.matrix("output.weight")?
        };
        for tensor in &up.pending {
            tensor.completion().wait()?;
        }
        Ok(LlamaWeights {
            embedding,
            blocks,
            output_norm,
            output,
            bytes: up.bytes,
        })
    }
}
