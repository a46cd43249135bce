//! BERT-style sentence encoders (all-MiniLM-L6-v2, BGE-small and their
//! kin): configuration from a sentence-transformers folder, weights from
//! its safetensors checkpoint, and the forward pass as one prepared graph
//! per slot.
//!
//! A slot runs a fixed shape, `batch` sentences of `seq` tokens; shorter
//! sentences are padded, and the padding changes nothing: its keys get an
//! attention bias of [`MASKED`] and it has no pooling weight. The pooled
//! vector is L2-normalised on the device when the folder's `modules.json`
//! has a `Normalize` module.

mod config;
mod graph;
mod load;

pub use config::{Activation, BertConfig, Pooling};
pub use graph::MASKED;

use hrx_core::{Error, Result};
use hrx_inference::{ModelContext, PreparedModel, SharedWeights, SlotBuilder};
use hrx_tensor::Ops;
use std::path::Path;

/// The element type of the encoder's matrix weights and matmul inputs.
/// Norms, softmax, accumulation and the output are f32 in both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Everything in f32.
    #[default]
    F32,
    /// f16 matrices and matmul inputs (the device needs f16 arithmetic and
    /// 16-bit storage).
    F16,
}

/// How the encoder's graphs record self-attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionPath {
    /// The built-in choice, today `Fused`: fewer dispatches, and the
    /// faster batches in f32 and f16. On an H200 (2026-12-03, batches of
    /// 1024 x 128, each path in two alternating runs): f16 30,068-30,074
    /// against 29,079-29,106 sentences/s by head (tensor-core `q k^T` and
    /// `p v`); f32 (2026-12-02) 9,236 against 8,606. By head is a little
    /// faster for one f16 sentence (0.82-0.84 against 0.87 ms), whose
    /// small per-head dispatches overlap.
    #[default]
    Auto,
    /// One dispatch a layer (`Ops::record_encoder_attention`) where the
    /// heads allow it (a multiple of 4 values, at most 128; 16-byte
    /// aligned tensors), else `ByHead`.
    Fused,
    /// Separate operators: q, k and v packed by head, the batched
    /// `q k^T`, the masked softmax, `p v` and a copy back by position.
    /// Any head size; kept for heads the fused kernel does not take, and
    /// as the fused kernel's reference.
    ByHead,
}

/// A BERT encoder with its weights on the device, shared by every slot
/// built from it.
pub struct BertEncoder {
    context: ModelContext,
    config: BertConfig,
    precision: Precision,
    attention: AttentionPath,
    weights: SharedWeights,
    ops: Ops,
}

impl std::fmt::Debug for BertEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEncoder")
            .field("config", &self.config)
            .field("precision", &self.precision)
            .field("attention", &self.attention)
            .field("weight_bytes", &self.weights.bytes())
            .finish_non_exhaustive()
    }
}

impl BertEncoder {
    /// Read `dir`'s configuration and `model.safetensors`, and upload the
    /// weights once.
    pub fn load(context: &ModelContext, dir: &Path, precision: Precision) -> Result<BertEncoder> {
        let config = BertConfig::from_dir(dir)?;
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path)
            .map_err(|e| Error::msg(format!("cannot read {}: {e}", path.display())))?;
        BertEncoder::from_safetensors(context, config, &bytes, precision)
    }

    /// An encoder of `config` with the weights of a safetensors checkpoint
    /// (Hugging Face names, F32, F16 or BF16; tensors the encoder does not
    /// use are skipped). A missing tensor, a wrong shape or dtype is an
    /// error naming the tensor.
    pub fn from_safetensors(
        context: &ModelContext,
        config: BertConfig,
        checkpoint: &[u8],
        precision: Precision,
    ) -> Result<BertEncoder> {
        if precision == Precision::F16 {
            let target = context.runtime().gpu()?.target().clone();
            if !(target.shader_f16 && target.storage_16bit) {
                return Err(Error::Unsupported(format!(
                    "f16 encoder: {} lacks f16 arithmetic or 16-bit storage",
                    target.name
                )));
            }
        }
        let device = load::device_weights(&config, checkpoint, precision)?;
        let weights = SharedWeights::upload(
            context,
            device
                .iter()
                .map(|w| (w.name.as_str(), w.desc.clone(), w.bytes.as_slice())),
        )?;
        Ok(BertEncoder {
            context: context.clone(),
            config,
            precision,
            attention: AttentionPath::default(),
            weights,
            ops: context.ops().clone(),
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The matmul precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Device bytes of the weights, held once for every slot.
    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes()
    }

    /// The context the weights live in.
    pub fn context(&self) -> &ModelContext {
        &self.context
    }

    /// This encoder recording its attention as `path` in the slots built
    /// from now on.
    pub fn with_attention(mut self, path: AttentionPath) -> BertEncoder {
        self.attention = path;
        self
    }

    /// How the slots record attention.
    pub fn attention(&self) -> AttentionPath {
        self.attention
    }

    /// Record the forward pass for `batch` sentences of `seq` tokens into
    /// `slot` (inputs `ids`, `bias`, `pool`; output `embeddings`: see the
    /// module docs).
    pub fn build_slot(&self, slot: &mut SlotBuilder<'_>, batch: usize, seq: usize) -> Result<()> {
        if batch == 0 || seq < 2 || seq > self.config.max_position {
            return Err(Error::msg(format!(
                "encoder slot of {batch} sentences x {seq} tokens: needs batch >= 1 and 2 <= seq <= {}",
                self.config.max_position
            )));
        }
        graph::record(self, slot, batch, seq)
    }

    /// A pool of `capacity` slots for `batch` sentences of `seq` tokens.
    pub fn prepare(&self, batch: usize, seq: usize, capacity: usize) -> Result<PreparedModel> {
        PreparedModel::prepare(&self.context, capacity, |context| {
            let mut slot = SlotBuilder::new(context, &self.ops);
            self.build_slot(&mut slot, batch, seq)?;
            slot.finish()
        })
    }

    /// Write the slot inputs for `sentences` (token ids, at most `seq`
    /// each) into one input's staging: `input` 0 ids, 1 attention bias,
    /// 2 pooling weights. Rows past the sentences are padding with no
    /// pooling weight. `staging` must be the input's whole staging.
    pub fn write_input(
        &self,
        sentences: &[&[u32]],
        seq: usize,
        input: usize,
        staging: &mut [u8],
    ) -> Result<()> {
        let rows = staging.len() / (4 * seq.max(1));
        if sentences.len() > rows || staging.len() != rows * seq * 4 {
            return Err(Error::msg(format!(
                "encoder input {input}: {} sentences do not fit {} bytes of [_, {seq}] rows",
                sentences.len(),
                staging.len()
            )));
        }
        let pooling = self.config.pooling;
        for (row, out) in staging.chunks_exact_mut(seq * 4).enumerate() {
            let ids: &[u32] = sentences.get(row).copied().unwrap_or(&[]);
            if ids.len() > seq {
                return Err(Error::msg(format!(
                    "sentence of {} tokens does not fit a slot of {seq}",
                    ids.len()
                )));
            }
            for (position, word) in out.chunks_exact_mut(4).enumerate() {
                let value: [u8; 4] = match input {
                    0 => (ids.get(position).copied().unwrap_or(0) as i32).to_le_bytes(),
                    1 if position < ids.len() => 0f32.to_le_bytes(),
                    1 => MASKED.to_le_bytes(),
                    2 => graph::pool_weight(pooling, ids.len(), position).to_le_bytes(),
                    _ => {
                        return Err(Error::msg(format!(
                            "the encoder has 3 inputs, not {}",
                            input + 1
                        )));
                    }
                };
                word.copy_from_slice(&value);
            }
        }
        Ok(())
    }

    /// Check `ids` against the vocabulary (the gather reads no row for an
    /// id outside it).
    pub fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids
            .iter()
            .position(|&id| id as usize >= self.config.vocab_size)
        {
            Some(i) => Err(Error::msg(format!(
                "token id {} at position {i} is outside the vocabulary 0..{}",
                ids[i], self.config.vocab_size
            ))),
            None => Ok(()),
        }
    }
}
