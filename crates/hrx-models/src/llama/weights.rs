//! A llama model's weights on the device: matrices in their own quantised
//! format (packed once into the kernels' word layout), norms as f32.
//! Projections of the same input that share a format are stacked into one
//! matrix (query, key and value; gate and up), so each is one matmul.

use crate::gguf::{GgufFile, LlamaConfig, TensorInfo, TensorType};
use hrx_core::{Error, Result};
use hrx_inference::ModelContext;
use hrx_tensor::{
    DType, DeviceTensor, TensorDesc,
    ops::{QuantFormat, QuantMatrix},
};

/// Projections that read the same input: one matrix of their rows stacked
/// (one matmul, its output read through column views) when they share a
/// format, else one matrix each.
pub(crate) enum Stacked {
    One(QuantMatrix),
    Each(Vec<QuantMatrix>),
}

/// One transformer block's weights.
pub(crate) struct Block {
    pub attn_norm: DeviceTensor,
    /// Query, key and value.
    pub qkv: Stacked,
    pub output: QuantMatrix,
    pub ffn_norm: DeviceTensor,
    /// Gate and up.
    pub gate_up: Stacked,
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
        TensorType::Q4_0 => Ok(QuantFormat::Q4_0),
        TensorType::Q4_1 => Ok(QuantFormat::Q4_1),
        TensorType::Q5_0 => Ok(QuantFormat::Q5_0),
        TensorType::Q5_1 => Ok(QuantFormat::Q5_1),
        TensorType::Q4_K => Ok(QuantFormat::Q4_K),
        TensorType::Q5_K => Ok(QuantFormat::Q5_K),
        TensorType::Q6_K => Ok(QuantFormat::Q6_K),
        other => Err(Error::Unsupported(format!(
            "tensor {}: type {} has no device kernels (F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K do)",
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
        self.stacked(&[name]).map(|s| match s {
            Stacked::One(m) => m,
            Stacked::Each(mut m) => m.remove(0),
        })
    }

    /// The matrices `names` (of equal row length) stacked into one when
    /// they share a format, else each alone.
    fn stacked(&mut self, names: &[&str]) -> Result<Stacked> {
        let infos = names
            .iter()
            .map(|&n| self.file.tensor(n))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let formats = infos
            .iter()
            .map(|&i| format_of(i))
            .collect::<Result<Vec<_>>>()?;
        if formats.windows(2).any(|w| w[0] != w[1]) {
            return names
                .iter()
                .map(|n| self.matrix(n))
                .collect::<Result<_>>()
                .map(Stacked::Each);
        }
        let format = formats[0];
        let cols = infos[0].row_len() as usize;
        let mut words = Vec::new();
        let mut rows = 0;
        for (info, name) in infos.iter().zip(names) {
            let n = info.rows() as usize;
            words.extend(
                format
                    .pack(n, cols, self.file.tensor_data(info))
                    .map_err(|e| Error::Message(format!("tensor {name}: {e}")))?,
            );
            rows += n;
        }
        let name = names.join(" + ");
        let desc = TensorDesc::new(DType::U32, vec![words.len()])?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let tensor = self
            .context
            .upload(desc, &bytes)
            .map_err(|e| Error::Message(format!("uploading tensor {name}: {e}")))?;
        self.bytes += words.len() * 4;
        self.pending.push(tensor.clone());
        QuantMatrix::new(format, rows, cols, tensor).map(Stacked::One)
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
                qkv: up.stacked(&[&name("attn_q"), &name("attn_k"), &name("attn_v")])?,
                output: up.matrix(&name("attn_output"))?,
                ffn_norm: up.vector(&name("ffn_norm"))?,
                gate_up: up.stacked(&[&name("ffn_gate"), &name("ffn_up")])?,
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
