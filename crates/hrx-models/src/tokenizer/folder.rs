//! Reading a model folder: its tokenizer.json, or else a BERT `vocab.txt`
//! with the settings `transformers`' `BertTokenizer` defaults to, as
//! overridden by `tokenizer_config.json`.

use std::collections::HashMap;
use std::path::Path;

use hrx_core::{Error, Result};
use serde_json::Value;

use super::Parts;
use super::normalize::BertNormalizer;

/// The parts described by the files in `dir`.
pub(crate) fn parse_dir(dir: &Path) -> Result<Parts> {
    let json = dir.join("tokenizer.json");
    if json.is_file() {
        return super::json::parse(&read(&json)?);
    }
    let vocab_path = dir.join("vocab.txt");
    if !vocab_path.is_file() {
        return Err(Error::msg(format!(
            "{}: neither tokenizer.json nor vocab.txt is there",
            dir.display()
        )));
    }
    let config_path = dir.join("tokenizer_config.json");
    let config = if config_path.is_file() {
        serde_json::from_str(&read(&config_path)?)
            .map_err(|e| Error::msg(format!("{}: {e}", config_path.display())))?
    } else {
        Value::Null
    };
    from_vocab_txt(&read(&vocab_path)?, &config)
}

/// The parts for a vocab.txt (one token per line, the line number is the
/// id) and a tokenizer_config.json (`Null` if there is none).
pub(crate) fn from_vocab_txt(vocab_txt: &str, config: &Value) -> Result<Parts> {
    let mut vocab = HashMap::new();
    for (line, token) in vocab_txt.lines().enumerate() {
        // Hugging Face's WordPiece::read_file trims trailing whitespace.
        let token = token.trim_end();
        let id = u32::try_from(line)
            .map_err(|_| Error::msg("vocab.txt: more than 2^32 tokens".to_string()))?;
        if let Some(first) = vocab.insert(token.to_string(), id) {
            return Err(Error::msg(format!(
                "vocab.txt: line {} repeats {token:?} from line {}",
                line + 1,
                first + 1
            )));
        }
    }
    let lowercase = flag(config, "do_lower_case")?.unwrap_or(true);
    let normalizer = BertNormalizer {
        clean_text: true,
        handle_chinese_chars: flag(config, "tokenize_chinese_chars")?.unwrap_or(true),
        strip_accents: flag(config, "strip_accents")?.unwrap_or(lowercase),
        lowercase,
    };
    let unk_token = special(config, "unk_token", "[UNK]")?;
    let [cls, sep, pad, mask] = [
        ("cls_token", "[CLS]"),
        ("sep_token", "[SEP]"),
        ("pad_token", "[PAD]"),
        ("mask_token", "[MASK]"),
    ]
    .map(|(key, default)| special(config, key, default));
    let (cls, sep, pad, mask) = (cls?, sep?, pad?, mask?);
    let id_of = |token: &str| {
        vocab
            .get(token)
            .copied()
            .ok_or_else(|| Error::msg(format!("vocab.txt: special token {token:?} is missing")))
    };
    let (cls_id, sep_id, pad_id) = (id_of(&cls)?, id_of(&sep)?, id_of(&pad)?);
    // As `transformers` converts a BertTokenizer: the special tokens that
    // exist are matched in the raw text.
    let added = [&pad, &unk_token, &cls, &sep, &mask]
        .into_iter()
        .filter_map(|token| Some((token.clone(), *vocab.get(token.as_str())?)))
        .collect();
    Ok(Parts {
        source: "vocab.txt",
        normalizer,
        vocab,
        unk_token,
        continuing_prefix: "##".into(),
        max_chars: 100,
        added,
        prefix_ids: vec![cls_id],
        suffix_ids: vec![sep_id],
        pad_id: Some(pad_id),
    })
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::msg(format!("{}: {e}", path.display())))
}

/// An optional boolean of tokenizer_config.json (`null` counts as absent).
fn flag(config: &Value, key: &str) -> Result<Option<bool>> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(other) => Err(Error::msg(format!(
            "tokenizer_config.json: {key}: expected true, false or null, found {other}"
        ))),
    }
}

/// A special token's text from tokenizer_config.json: a string, or an
/// object with a `content` string (newer files), or `default`.
fn special(config: &Value, key: &str, default: &str) -> Result<String> {
    let value = match config.get(key) {
        None | Some(Value::Null) => return Ok(default.to_string()),
        Some(Value::Object(object)) => object.get("content"),
        value => value,
    };
    match value.and_then(Value::as_str) {
        Some(token) if !token.is_empty() => Ok(token.to_string()),
        _ => Err(Error::msg(format!(
            "tokenizer_config.json: {key}: expected a non-empty string or {{\"content\": string}}"
        ))),
    }
}
