//! The constants of a llama-architecture model, read from a GGUF file's
//! `<architecture>.*` keys and checked for consistency, and the check that
//! the file has every tensor of that architecture with the right dims.

use super::error::{GgufError, GgufErrorKind};
use super::value::bad_value;
use super::{GgufFile, TensorInfo};

/// Architectures read as llama: the same tensors and arithmetic.
const LLAMA_FAMILY: &[&str] = &["llama"];

/// The most transformer blocks accepted.
const MAX_LAYERS: u64 = 1 << 12;
/// The widest hidden or feed-forward width accepted.
const MAX_WIDTH: u64 = 1 << 20;
/// The most query or key/value heads accepted.
const MAX_HEADS: u64 = 1 << 12;
/// The longest context accepted.
const MAX_CONTEXT: u64 = 1 << 24;
/// The largest vocabulary accepted.
const MAX_VOCAB: u64 = 1 << 24;

/// RoPE base when the file does not say (llama.cpp's default).
const DEFAULT_ROPE_BASE: f64 = 10_000.0;

/// A llama model's constants.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// `general.architecture`, the prefix of the other keys.
    pub architecture: String,
    /// Transformer blocks (`block_count`).
    pub layers: usize,
    /// Hidden width (`embedding_length`).
    pub width: usize,
    /// Feed-forward inner width (`feed_forward_length`).
    pub ffn_width: usize,
    /// Query heads (`attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`attention.head_count_kv`; `heads` when absent);
    /// query head `h` reads key/value head `h / (heads / kv_heads)`.
    pub kv_heads: usize,
    /// Values per head (`width / heads`).
    pub head_dim: usize,
    /// Leading values of each head that RoPE rotates
    /// (`rope.dimension_count`; `head_dim` when absent).
    pub rope_dims: usize,
    /// RoPE base frequency (`rope.freq_base`; 10000 when absent). RoPE
    /// rotates adjacent pairs `(x[2i], x[2i+1])` by `pos * base^(-2i/rope_dims)`:
    /// GGUF files store Q and K rows permuted for that form.
    pub rope_base: f64,
    /// RMS norm epsilon (`attention.layer_norm_rms_epsilon`).
    pub rms_eps: f64,
    /// Longest sequence trained (`context_length`).
    pub context_length: usize,
    /// Vocabulary size: `vocab_size` when present, else the length of
    /// `tokenizer.ggml.tokens`; the embedding must have as many rows.
    pub vocab_size: usize,
    /// Whether the output projection is the token embedding (no
    /// `output.weight` tensor).
    pub tied_embedding: bool,
}

impl LlamaConfig {
    /// Reads the constants of `file` and checks them: a llama-family
    /// architecture; every count from 1 to a limit far above any llama
    /// (4096 layers and heads, widths of 2^20, context and vocabulary of
    /// 2^24), so that a hostile count cannot blow up what is sized by it;
    /// heads dividing the width and key/value heads dividing the heads;
    /// an even head size; finite positive epsilon and base. Does not look
    /// at the tensors ([`check_tensors`](Self::check_tensors) does).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, GgufError> {
        let meta = file.metadata();
        let architecture = meta.string("general.architecture")?.to_owned();
        if !LLAMA_FAMILY.contains(&architecture.as_str()) {
            return Err(bad_value(
                "general.architecture",
                format!("{architecture:?} is not a llama-family architecture ({LLAMA_FAMILY:?})"),
            ));
        }
        let key = |name: &str| format!("{architecture}.{name}");
        // Limits far above any llama, so that a hostile count cannot make
        // later loops or allocations (per layer, per context position) huge.
        let count = |name: &str, limit: u64| -> Result<usize, GgufError> {
            let k = key(name);
            let value = meta.u64(&k)?;
            if (1..=limit).contains(&value) {
                // limit is at most 2^24, so this fits any usize.
                Ok(value as usize)
            } else {
                Err(bad_value(
                    &k,
                    format!("{value} is not a count from 1 to {limit}"),
                ))
            }
        };
        let optional_count = |name: &str, limit: u64, default: usize| {
            if meta.get(&key(name)).is_some() {
                count(name, limit)
            } else {
                Ok(default)
            }
        };
        let positive = |name: &str, default: Option<f64>| -> Result<f64, GgufError> {
            let k = key(name);
            let value = match default {
                Some(d) if meta.get(&k).is_none() => d,
                _ => meta.f64(&k)?,
            };
            if value.is_finite() && value > 0.0 {
                Ok(value)
            } else {
                Err(bad_value(
                    &k,
                    format!("{value} is not a finite positive number"),
                ))
            }
        };

        let layers = count("block_count", MAX_LAYERS)?;
        let width = count("embedding_length", MAX_WIDTH)?;
        let ffn_width = count("feed_forward_length", MAX_WIDTH)?;
        let heads = count("attention.head_count", MAX_HEADS)?;
        let kv_heads = optional_count("attention.head_count_kv", MAX_HEADS, heads)?;
        if width % heads != 0 {
            return Err(bad_value(
                &key("attention.head_count"),
                format!("{heads} heads do not divide the width {width}"),
            ));
        }
        let head_dim = width / heads;
        if head_dim % 2 != 0 {
            return Err(bad_value(
                &key("attention.head_count"),
                format!("heads of {head_dim} values are odd; RoPE rotates pairs"),
            ));
        }
        if heads % kv_heads != 0 {
            return Err(bad_value(
                &key("attention.head_count_kv"),
                format!("{kv_heads} key/value heads do not divide the {heads} query heads"),
            ));
        }
        let rope_dims = optional_count("rope.dimension_count", MAX_WIDTH, head_dim)?;
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(bad_value(
                &key("rope.dimension_count"),
                format!("{rope_dims} is not an even count up to the head size {head_dim}"),
            ));
        }
        let vocab_size = if meta.get(&key("vocab_size")).is_some() {
            count("vocab_size", MAX_VOCAB)?
        } else {
            // At most the metadata's array limit, 2^24.
            meta.strings("tokenizer.ggml.tokens")?.len()
        };
        Ok(Self {
            layers,
            width,
            ffn_width,
            heads,
            kv_heads,
            head_dim,
            rope_dims,
            rope_base: positive("rope.freq_base", Some(DEFAULT_ROPE_BASE))?,
            rms_eps: positive("attention.layer_norm_rms_epsilon", None)?,
            context_length: count("context_length", MAX_CONTEXT)?,
            vocab_size,
            tied_embedding: !file.has_tensor("output.weight"),
            architecture,
        })
    }

    /// Every tensor the model reads, with its dims in GGML order (row
    /// length first): the embedding, per block the two norms and seven
    /// matrices, the output norm and, unless tied, the output matrix.
    pub fn tensor_dims(&self) -> Vec<(String, Vec<u64>)> {
        let [w, f, v] = [self.width, self.ffn_width, self.vocab_size].map(|n| n as u64);
        let kv = (self.kv_heads * self.head_dim) as u64;
        let mut all = vec![("token_embd.weight".to_owned(), vec![w, v])];
        for i in 0..self.layers {
            let blk = |name: &str, dims: Vec<u64>| (format!("blk.{i}.{name}.weight"), dims);
            all.extend([
                blk("attn_norm", vec![w]),
                blk("attn_q", vec![w, w]),
                blk("attn_k", vec![w, kv]),
                blk("attn_v", vec![w, kv]),
                blk("attn_output", vec![w, w]),
                blk("ffn_norm", vec![w]),
                blk("ffn_gate", vec![w, f]),
                blk("ffn_up", vec![w, f]),
                blk("ffn_down", vec![f, w]),
            ]);
        }
        all.push(("output_norm.weight".to_owned(), vec![w]));
        if !self.tied_embedding {
            all.push(("output.weight".to_owned(), vec![w, v]));
        }
        all
    }

    /// Checks that `file` has every tensor of [`tensor_dims`](Self::tensor_dims)
    /// with those dims and a type hrx decodes; the first missing or
    /// mismatched tensor is the error.
    pub fn check_tensors(&self, file: &GgufFile) -> Result<(), GgufError> {
        for (name, dims) in self.tensor_dims() {
            let tensor: &TensorInfo = file.tensor(&name)?;
            if tensor.dims() != dims.as_slice() {
                return Err(GgufError::whole(GgufErrorKind::BadDimensions {
                    tensor: name,
                    why: format!("dims {:?}, the model needs {dims:?}", tensor.dims()),
                }));
            }
            if !tensor.tensor_type().is_readable() {
                return Err(GgufError::whole(GgufErrorKind::UnsupportedTensorType {
                    tensor: name,
                    type_name: tensor.tensor_type().name(),
                }));
            }
        }
        Ok(())
    }
}
