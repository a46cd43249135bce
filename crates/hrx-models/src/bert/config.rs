//! The encoder's configuration, read from a sentence-transformers folder:
//! `config.json` (the BERT sizes), `sentence_bert_config.json` (the
//! sequence limit), `1_Pooling/config.json` (the pooling) and
//! `modules.json` (whether a `Normalize` module follows).

use hrx_core::{Error, Result};
use serde::Deserialize;
use std::path::Path;

/// How token states become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the sentence's tokens (padding excluded).
    Mean,
    /// The state of the first token (`[CLS]`).
    Cls,
}

/// The feed-forward activation named by `hidden_act`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `gelu`: with the error function.
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
}

/// Everything the encoder needs to know about a model folder. Every value
/// comes from the folder's files; nothing is specific to one model.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Token ids are `0..vocab_size`.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads; `hidden` is a multiple of it.
    pub heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate: usize,
    /// Rows of the position-embedding table.
    pub max_position: usize,
    /// Layer-norm epsilon.
    pub layer_norm_eps: f32,
    /// The feed-forward activation.
    pub activation: Activation,
    /// Tokens per sentence, `[CLS]` and `[SEP]` included, after
    /// truncation: sentence-transformers' `max_seq_length`, capped at
    /// `max_position`.
    pub max_seq_length: usize,
    /// Token-to-sentence pooling.
    pub pooling: Pooling,
    /// Whether embeddings are scaled to unit length.
    pub normalize: bool,
}

#[derive(Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: Option<f64>,
    hidden_act: Option<String>,
    position_embedding_type: Option<String>,
}

#[derive(Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    path: String,
}

/// Read and parse `dir/name` as JSON; `None` when the file is absent.
fn read_json<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Result<Option<T>> {
    let path = dir.join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::msg(format!("cannot read {}: {e}", path.display()))),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::msg(format!("{}: {e}", path.display())))
}

impl BertConfig {
    /// Read the configuration of the sentence-transformers folder `dir`.
    /// `config.json` is required; without `sentence_bert_config.json` the
    /// sequence limit is `max_position_embeddings`; without a pooling
    /// config or `modules.json`, mean pooling and normalisation.
    pub fn from_dir(dir: &Path) -> Result<BertConfig> {
        let hf: HfConfig = read_json(dir, "config.json")?.ok_or_else(|| {
            Error::msg(format!(
                "{} has no config.json: not a model folder",
                dir.display()
            ))
        })?;
        let modules: Vec<Module> = read_json(dir, "modules.json")?.unwrap_or_default();
        let pooling_dir = modules
            .iter()
            .find(|m| m.kind.ends_with(".Pooling"))
            .map_or("1_Pooling", |m| m.path.as_str());
        let pooling: Option<PoolingConfig> = read_json(dir, &format!("{pooling_dir}/config.json"))?;
        let sentence: Option<SentenceConfig> = read_json(dir, "sentence_bert_config.json")?;
        let normalize =
            modules.is_empty() || modules.iter().any(|m| m.kind.ends_with(".Normalize"));
        let config = BertConfig::from_parts(hf, sentence, pooling, normalize)
            .map_err(|why| Error::msg(format!("model folder {}: {why}", dir.display())))?;
        Ok(config)
    }

    fn from_parts(
        hf: HfConfig,
        sentence: Option<SentenceConfig>,
        pooling: Option<PoolingConfig>,
        normalize: bool,
    ) -> std::result::Result<BertConfig, String> {
        if let Some(kind) = hf.model_type.as_deref()
            && !matches!(kind, "bert")
        {
            return Err(format!("model_type {kind:?} is not a BERT encoder"));
        }
        if let Some(kind) = hf.position_embedding_type.as_deref()
            && kind != "absolute"
        {
            return Err(format!(
                "position_embedding_type {kind:?} is not supported (absolute)"
            ));
        }
        let activation = match hf.hidden_act.as_deref().unwrap_or("gelu") {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            other => return Err(format!("hidden_act {other:?} is not supported (gelu)")),
        };
        let pooling = match pooling {
            None => Pooling::Mean,
            Some(p) if p.pooling_mode_max_tokens || p.pooling_mode_mean_sqrt_len_tokens => {
                return Err("max and mean-sqrt-len pooling are not supported".into());
            }
            Some(p) if p.pooling_mode_cls_token && !p.pooling_mode_mean_tokens => Pooling::Cls,
            Some(p) if p.pooling_mode_mean_tokens && !p.pooling_mode_cls_token => Pooling::Mean,
            Some(_) => {
                return Err("the pooling config must pick exactly one of cls and mean".into());
            }
        };
        let max_seq_length = sentence
            .and_then(|s| s.max_seq_length)
            .unwrap_or(hf.max_position_embeddings)
            .min(hf.max_position_embeddings);
        let config = BertConfig {
            vocab_size: hf.vocab_size,
            hidden: hf.hidden_size,
            layers: hf.num_hidden_layers,
            heads: hf.num_attention_heads,
            intermediate: hf.intermediate_size,
            max_position: hf.max_position_embeddings,
            layer_norm_eps: hf.layer_norm_eps.unwrap_or(1e-12) as f32,
            activation,
            max_seq_length,
            pooling,
            normalize,
        };
        config.validate()?;
        Ok(config)
    }

    /// Sizes are nonzero, `hidden` divides into heads, ids fit i32, a
    /// sequence holds `[CLS]` and `[SEP]`, and no tensor's size overflows.
    fn validate(&self) -> std::result::Result<(), String> {
        let sizes = [
            self.vocab_size,
            self.hidden,
            self.layers,
            self.heads,
            self.intermediate,
            self.max_position,
        ];
        if sizes.contains(&0) {
            return Err(format!("sizes must be nonzero: {self:?}"));
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden, self.heads
            ));
        }
        if i32::try_from(self.vocab_size).is_err() {
            return Err(format!("vocab_size {} does not fit i32", self.vocab_size));
        }
        if self.max_seq_length < 2 {
            return Err(format!(
                "max_seq_length {} cannot hold [CLS] and [SEP]",
                self.max_seq_length
            ));
        }
        let widest = self
            .vocab_size
            .max(self.max_position)
            .max(self.intermediate);
        if widest
            .checked_mul(self.hidden)
            .and_then(|n| n.checked_mul(4 * self.layers.max(1)))
            .is_none()
        {
            return Err("tensor sizes overflow".into());
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps >= 0.0) {
            return Err(format!(
                "layer_norm_eps {} is not a finite non-negative number",
                self.layer_norm_eps
            ));
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hf(json: &str) -> HfConfig {
        serde_json::from_str(json).unwrap()
    }

    const MINI: &str = r#"{"model_type":"bert","vocab_size":30522,"hidden_size":384,
        "num_hidden_layers":6,"num_attention_heads":12,"intermediate_size":1536,
        "max_position_embeddings":512,"layer_norm_eps":1e-12,"hidden_act":"gelu"}"#;

    #[test]
    fn reads_sizes_and_caps_the_sequence() {
        let c = BertConfig::from_parts(
            hf(MINI),
            Some(SentenceConfig {
                max_seq_length: Some(1000),
            }),
            None,
            true,
        )
        .unwrap();
        assert_eq!((c.hidden, c.heads, c.head_dim()), (384, 12, 32));
        assert_eq!(c.max_seq_length, 512);
        assert_eq!(c.pooling, Pooling::Mean);
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        let bad_heads = MINI.replace("\"num_attention_heads\":12", "\"num_attention_heads\":7");
        let e = BertConfig::from_parts(hf(&bad_heads), None, None, true).unwrap_err();
        assert!(e.contains("multiple of num_attention_heads 7"), "{e}");
        let relu = MINI.replace("\"gelu\"", "\"relu\"");
        let e = BertConfig::from_parts(hf(&relu), None, None, true).unwrap_err();
        assert!(e.contains("hidden_act \"relu\""), "{e}");
        let max = PoolingConfig {
            pooling_mode_cls_token: false,
            pooling_mode_mean_tokens: false,
            pooling_mode_max_tokens: true,
            pooling_mode_mean_sqrt_len_tokens: false,
        };
        let e = BertConfig::from_parts(hf(MINI), None, Some(max), true).unwrap_err();
        assert!(e.contains("max"), "{e}");
    }
}
