//! Reading a Hugging Face tokenizer.json: the parts this tokenizer supports,
//! each checked, and an error naming the field for anything else.
//!
//! `truncation` and `padding` are not taken from the file: the caller gives
//! the maximum length per call, and batching pads.

use std::collections::HashMap;

use hrx_core::{Error, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Parts;
use super::normalize::BertNormalizer;

/// The top level, with each part kept as JSON until its `type` is checked.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    added_tokens: Vec<Value>,
    #[serde(default)]
    normalizer: Value,
    #[serde(default)]
    pre_tokenizer: Value,
    #[serde(default)]
    post_processor: Value,
    #[serde(default)]
    padding: Value,
    model: Value,
}

#[derive(Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    #[serde(default)]
    single_word: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
    #[serde(default)]
    normalized: bool,
}

#[derive(Deserialize)]
struct Normalizer {
    clean_text: bool,
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
    lowercase: bool,
}

#[derive(Deserialize)]
struct Model {
    vocab: HashMap<String, u32>,
    unk_token: String,
    #[serde(default = "default_prefix")]
    continuing_subword_prefix: String,
    #[serde(default = "default_max_chars")]
    max_input_chars_per_word: usize,
}

fn default_prefix() -> String {
    "##".into()
}

fn default_max_chars() -> usize {
    100
}

/// `TemplateProcessing`'s single-sequence template and its special tokens.
#[derive(Deserialize)]
struct Template {
    single: Vec<TemplatePiece>,
    #[serde(default)]
    special_tokens: HashMap<String, TemplateSpecial>,
}

#[derive(Deserialize)]
enum TemplatePiece {
    SpecialToken { id: String },
    Sequence { id: String },
}

#[derive(Deserialize)]
struct TemplateSpecial {
    ids: Vec<u32>,
}

/// `BertProcessing`: `[CLS] $A [SEP]` with the two tokens given.
#[derive(Deserialize)]
struct BertProcessing {
    cls: (String, u32),
    sep: (String, u32),
}

#[derive(Deserialize)]
struct Padding {
    pad_id: u32,
}

/// The parts of a tokenizer.json's text.
pub(crate) fn parse(text: &str) -> Result<Parts> {
    let file: File = serde_json::from_str(text)
        .map_err(|e| Error::msg(format!("tokenizer.json: not a tokenizer file: {e}")))?;
    expect_type(&file.pre_tokenizer, "pre_tokenizer", &["BertPreTokenizer"])?;
    let normalizer = normalizer(&file.normalizer)?;
    let model = model(&file.model)?;
    let (prefix_ids, suffix_ids) = post_processor(&file.post_processor)?;
    let added = file
        .added_tokens
        .iter()
        .enumerate()
        .map(|(i, token)| added_token(i, token))
        .collect::<Result<_>>()?;
    let pad_id = match &file.padding {
        Value::Null => None,
        padding => Some(field::<Padding>(padding, "padding")?.pad_id),
    };
    Ok(Parts {
        source: "tokenizer.json",
        normalizer,
        vocab: model.vocab,
        unk_token: model.unk_token,
        continuing_prefix: model.continuing_subword_prefix,
        max_chars: model.max_input_chars_per_word,
        added,
        prefix_ids,
        suffix_ids,
        pad_id,
    })
}

fn normalizer(value: &Value) -> Result<BertNormalizer> {
    expect_type(value, "normalizer", &["BertNormalizer"])?;
    let n: Normalizer = field(value, "normalizer")?;
    Ok(BertNormalizer {
        clean_text: n.clean_text,
        handle_chinese_chars: n.handle_chinese_chars,
        // Hugging Face: no explicit choice means "strip when lowercasing".
        strip_accents: n.strip_accents.unwrap_or(n.lowercase),
        lowercase: n.lowercase,
    })
}

fn model(value: &Value) -> Result<Model> {
    expect_type(value, "model", &["WordPiece"])?;
    field(value, "model")
}

/// The ids before and after the sequence, from `post_processor`.
fn post_processor(value: &Value) -> Result<(Vec<u32>, Vec<u32>)> {
    let kind = expect_type(
        value,
        "post_processor",
        &["TemplateProcessing", "BertProcessing"],
    )?;
    if kind == "BertProcessing" {
        let bert: BertProcessing = field(value, "post_processor")?;
        return Ok((vec![bert.cls.1], vec![bert.sep.1]));
    }
    let template: Template = field(value, "post_processor")?;
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut sequences = 0;
    for piece in &template.single {
        match piece {
            TemplatePiece::Sequence { id } if id == "A" => sequences += 1,
            TemplatePiece::Sequence { id } => {
                return Err(Error::msg(format!(
                    "tokenizer.json: post_processor.single: sequence {id:?} in a \
                     single-sequence template (only \"A\" is supported)"
                )));
            }
            TemplatePiece::SpecialToken { id } => {
                let special = template.special_tokens.get(id).ok_or_else(|| {
                    Error::msg(format!(
                        "tokenizer.json: post_processor.single uses {id:?}, which is \
                         not in post_processor.special_tokens"
                    ))
                })?;
                let side = if sequences == 0 {
                    &mut before
                } else {
                    &mut after
                };
                side.extend_from_slice(&special.ids);
            }
        }
    }
    if sequences != 1 {
        return Err(Error::msg(format!(
            "tokenizer.json: post_processor.single has {sequences} sequences $A (expected one)"
        )));
    }
    Ok((before, after))
}

/// One entry of `added_tokens`, if it is one this tokenizer can match: on
/// the raw text, as a whole string, without stripping around it.
fn added_token(index: usize, value: &Value) -> Result<(String, u32)> {
    let name = format!("added_tokens[{index}]");
    let token: AddedToken = field(value, &name)?;
    let unsupported = [
        ("normalized", token.normalized),
        ("single_word", token.single_word),
        ("lstrip", token.lstrip),
        ("rstrip", token.rstrip),
    ];
    if let Some((flag, _)) = unsupported.iter().find(|(_, set)| *set) {
        return Err(Error::msg(format!(
            "tokenizer.json: {name} ({:?}): {flag}: true is not supported",
            token.content
        )));
    }
    if token.content.is_empty() {
        return Err(Error::msg(format!("tokenizer.json: {name}: empty content")));
    }
    Ok((token.content, token.id))
}

/// The `type` of a part, which must be one of `supported`.
fn expect_type<'v>(value: &'v Value, name: &str, supported: &[&str]) -> Result<&'v str> {
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        Some(kind) if supported.contains(&kind) => Ok(kind),
        _ => {
            let found = match (value, kind) {
                (Value::Null, _) => "null".to_string(),
                (_, Some(kind)) => format!("type {kind:?}"),
                (_, None) => "no type".to_string(),
            };
            Err(Error::msg(format!(
                "tokenizer.json: {name}: found {found}, supported: {}",
                supported.join(", ")
            )))
        }
    }
}

/// Deserializes one part, naming it in the error.
fn field<T: DeserializeOwned>(value: &Value, name: &str) -> Result<T> {
    T::deserialize(value).map_err(|e| Error::msg(format!("tokenizer.json: {name}: {e}")))
}
