//! Byte-level BPE (GPT-2's scheme) built from a GGUF file's tokenizer
//! metadata, giving the ids of llama.cpp and of Hugging Face `tokenizers`
//! for the same vocabulary and merges.
//!
//! Design choices and contracts:
//!
//! - **Everything from the metadata.** `tokenizer.ggml.model` must be
//!   `gpt2`; `tokenizer.ggml.tokens`, `merges`, `token_type`, the
//!   bos/eos/padding ids and `add_bos_token` / `add_eos_token` are read
//!   from the file and checked (ids inside the vocabulary, every merge
//!   made of tokens); the split is the
//!   one `tokenizer.ggml.pre` names ([`PreTokenizer`]). Anything else is
//!   an error naming the key, never silently different ids.
//! - **Control tokens are single tokens.** Tokens of type control or
//!   user-defined (`<|im_start|>`, `<|endoftext|>`, ...) written in the
//!   text are found first, longest first, and become their ids, as both
//!   reference tokenizers do; [`BpeTokenizer::encode_plain`] instead
//!   treats all text as text (for content that must not inject them).
//! - **Bytes in, bytes out.** Text is split, each piece's UTF-8 bytes
//!   become byte-level symbols, and the ranked merges join them
//!   (`merges.rs`, O(n log n) per piece). A byte whose byte-level char
//!   is not in the vocabulary (SmolLM2 lacks 21, such as 0x04 and 0xFF,
//!   which valid UTF-8 never holds) is dropped before merging, as
//!   Hugging Face's BPE without an unknown token drops it. Decoding maps each token back
//!   to its bytes and the whole to text with invalid UTF-8 replaced by
//!   U+FFFD; [`StreamDecoder`] does the same one token at a time for
//!   streaming, holding back the bytes of a char that spans tokens.
//! - **Character classes as the reference has them.** The split's
//!   `\p{L}`, `\p{N}` and `\s` are tables generated from `tokenizers`
//!   (`classes.rs`), so its Unicode version, not Rust's, decides.

mod byte_level;
mod classes;
mod merges;
mod split;
mod stream;

use std::collections::HashMap;

use hrx_core::{Error, Result};

use crate::gguf::Metadata;

use super::added::AddedTokens;
use byte_level::ByteLevel;
use merges::Merges;
pub use split::PreTokenizer;
pub use stream::StreamDecoder;

/// What a token is, from GGUF's `tokenizer.ggml.token_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// 0: not stated.
    Undefined,
    /// 1: an ordinary vocabulary entry.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token such as `<|im_start|>`: matched whole in text,
    /// decoded as its text.
    Control,
    /// 4: a user-defined token: matched whole in text like a control token.
    UserDefined,
    /// 5: unused.
    Unused,
    /// 6: a single raw byte.
    Byte,
}

impl TokenType {
    fn from_gguf(value: i32) -> Option<Self> {
        Some(match value {
            0 => Self::Undefined,
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return None,
        })
    }

    /// Whether the token is matched whole in text and decodes as its text.
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::UserDefined)
    }
}

/// A byte-level BPE tokenizer: text to ids and back.
pub struct BpeTokenizer {
    pre: PreTokenizer,
    merges: Merges,
    /// The id of each byte's byte-level char, where the vocabulary has it.
    byte_ids: [Option<u32>; 256],
    specials: AddedTokens,
    /// Token text by id, as the file has it.
    tokens: Vec<Box<str>>,
    types: Vec<TokenType>,
    /// The bytes each token decodes to.
    bytes: Vec<Box<[u8]>>,
    vocab: HashMap<Box<str>, u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
}

/// A summary: the vocabulary and merges are too many to print.
impl std::fmt::Debug for BpeTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpeTokenizer")
            .field("pre", &self.pre)
            .field("vocab_size", &self.tokens.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .finish_non_exhaustive()
    }
}

fn fail(key: &str, why: impl std::fmt::Display) -> Error {
    Error::msg(format!("GGUF tokenizer: {key}: {why}"))
}

impl BpeTokenizer {
    /// From GGUF metadata (see the module's contract for the keys).
    pub fn from_gguf(meta: &Metadata) -> Result<Self> {
        let model = meta.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(Error::Unsupported(format!(
                "GGUF tokenizer: tokenizer.ggml.model is {model:?}; byte-level BPE (\"gpt2\") is read"
            )));
        }
        let pre_name = meta.string("tokenizer.ggml.pre")?;
        let pre = PreTokenizer::from_gguf_name(pre_name).ok_or_else(|| {
            Error::Unsupported(format!(
                "GGUF tokenizer: tokenizer.ggml.pre is {pre_name:?}; \"smollm\" and \"gpt-2\" are read"
            ))
        })?;
        let tokens: Vec<Box<str>> = meta
            .strings("tokenizer.ggml.tokens")?
            .iter()
            .map(|t| t.as_str().into())
            .collect();
        let count = tokens.len();
        if count == 0 || u32::try_from(count).is_err() {
            return Err(fail("tokenizer.ggml.tokens", format!("{count} tokens")));
        }
        let types = token_types(meta, count)?;
        // A repeated text maps to its last id, as in llama.cpp.
        let vocab: HashMap<Box<str>, u32> = tokens
            .iter()
            .enumerate()
            .map(|(id, text)| (text.clone(), id as u32))
            .collect();
        let merges = Merges::new(
            meta.strings("tokenizer.ggml.merges")?
                .iter()
                .map(String::as_str),
            |text| vocab.get(text).copied(),
        )
        .map_err(|why| fail("tokenizer.ggml.merges", why))?;

        let alphabet = ByteLevel::new();
        let mut byte_ids = [None; 256];
        for (byte, id) in byte_ids.iter_mut().enumerate() {
            let c = alphabet.char_of(byte as u8);
            *id = vocab.get(c.to_string().as_str()).copied();
        }
        let bytes = tokens
            .iter()
            .zip(&types)
            .map(|(text, ty)| token_bytes(&alphabet, text, *ty))
            .collect();
        let specials = AddedTokens::new(
            tokens
                .iter()
                .zip(&types)
                .enumerate()
                .filter(|(_, (text, ty))| ty.is_special() && !text.is_empty())
                .map(|(id, (text, _))| (text.clone(), id as u32)),
        );
        let id = |key: &str| -> Result<Option<u32>> {
            if meta.get(key).is_none() {
                return Ok(None);
            }
            let id = meta.u32(key)?;
            if id as usize >= count {
                return Err(fail(key, format!("id {id} is outside the {count} tokens")));
            }
            Ok(Some(id))
        };
        let flag = |key: &str| -> Result<bool> { Ok(meta.get(key).is_some() && meta.bool(key)?) };
        let (bos, eos, pad) = (
            id("tokenizer.ggml.bos_token_id")?,
            id("tokenizer.ggml.eos_token_id")?,
            id("tokenizer.ggml.padding_token_id")?,
        );
        let add_bos = flag("tokenizer.ggml.add_bos_token")?;
        let add_eos = flag("tokenizer.ggml.add_eos_token")?;
        if add_bos && bos.is_none() {
            return Err(fail(
                "tokenizer.ggml.add_bos_token",
                "true, but there is no bos_token_id",
            ));
        }
        if add_eos && eos.is_none() {
            return Err(fail(
                "tokenizer.ggml.add_eos_token",
                "true, but there is no eos_token_id",
            ));
        }
        Ok(Self {
            pre,
            merges,
            byte_ids,
            specials,
            tokens,
            types,
            bytes,
            vocab,
            bos,
            eos,
            pad,
            add_bos,
            add_eos,
        })
    }

    /// The ids of a prompt: BOS first (and EOS last) where the file says
    /// to add them, and special tokens written in `text` as single ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if self.add_bos {
            ids.extend(self.bos);
        }
        let mut scanner = self.specials.scan(text);
        loop {
            let run: String = scanner.text().collect();
            self.encode_text(&run, &mut ids);
            match scanner.token() {
                Some(id) => ids.push(id),
                None => break,
            }
        }
        if self.add_eos {
            ids.extend(self.eos);
        }
        ids
    }

    /// The ids of `text` as plain text: no BOS or EOS, and special
    /// tokens' text encoded like any other text.
    pub fn encode_plain(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_text(text, &mut ids);
        ids
    }

    fn encode_text(&self, text: &str, ids: &mut Vec<u32>) {
        let mut symbols = Vec::new();
        self.pre.split(text, |piece| {
            symbols.clear();
            symbols.extend(piece.bytes().filter_map(|b| self.byte_ids[usize::from(b)]));
            self.merges.apply(&mut symbols);
            ids.extend_from_slice(&symbols);
        });
    }

    /// The text of `ids`: their bytes joined, invalid UTF-8 replaced by
    /// U+FFFD. An id outside the vocabulary is an error.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let token = self.token_bytes(id).ok_or_else(|| {
                Error::msg(format!(
                    "token id {id} is outside the vocabulary of {} tokens",
                    self.tokens.len()
                ))
            })?;
            bytes.extend_from_slice(token);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes token `id` decodes to (a UTF-8 char may span tokens).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(|b| &**b)
    }

    /// The text of token `id` as the file has it (byte-level chars).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(|t| &**t)
    }

    /// The id of the token whose file text is `text`.
    pub fn id_of(&self, text: &str) -> Option<u32> {
        self.vocab.get(text).copied()
    }

    /// The type of token `id`.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// The number of tokens (every id is below it).
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The beginning-of-sequence id, if the file names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence id, if the file names one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The padding id, if the file names one.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// Whether [`encode`](Self::encode) starts with BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }
}

/// `tokenizer.ggml.token_type`, one per token; all normal when absent.
fn token_types(meta: &Metadata, count: usize) -> Result<Vec<TokenType>> {
    const KEY: &str = "tokenizer.ggml.token_type";
    if meta.get(KEY).is_none() {
        return Ok(vec![TokenType::Normal; count]);
    }
    let raw = meta.i32s(KEY)?;
    if raw.len() != count {
        return Err(fail(KEY, format!("{} types for {count} tokens", raw.len())));
    }
    raw.iter()
        .enumerate()
        .map(|(id, &t)| {
            TokenType::from_gguf(t).ok_or_else(|| fail(KEY, format!("token {id} has type {t}")))
        })
        .collect()
}

/// What token `text` decodes to: special tokens their text; others their
/// byte-level chars as bytes (a char outside the alphabet as its UTF-8).
fn token_bytes(alphabet: &ByteLevel, text: &str, ty: TokenType) -> Box<[u8]> {
    if ty.is_special() {
        return text.as_bytes().into();
    }
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match alphabet.byte_of(c) {
            Some(byte) => out.push(byte),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{Array, Value};

    /// Metadata of a tiny vocabulary: the 256 byte chars, then merged
    /// tokens, then two control tokens.
    fn metadata(edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> Metadata {
        let alphabet = ByteLevel::new();
        let mut tokens: Vec<String> = (0..=255u8).map(|b| alphabet.char_of(b).into()).collect();
        let merged = ["he", "ll", "hell", "hello", "Ġw", "Ġwo"];
        tokens.extend(merged.iter().map(|t| t.to_string()));
        tokens.extend(["<s>".into(), "<|end|>".into()]);
        let mut types = vec![1; tokens.len()];
        let n = types.len();
        types[n - 2..].fill(3);
        let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"];
        let mut entries = vec![
            ("tokenizer.ggml.model", Value::String("gpt2".into())),
            ("tokenizer.ggml.pre", Value::String("smollm".into())),
            ("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))),
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
            (
                "tokenizer.ggml.merges",
                Value::Array(Array::String(merges.map(String::from).into())),
            ),
            ("tokenizer.ggml.bos_token_id", Value::U32(262)),
            ("tokenizer.ggml.eos_token_id", Value::U32(263)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ];
        edit(&mut entries);
        let mut meta = Metadata::default();
        for (key, value) in entries {
            meta.insert(key.into(), value).unwrap();
        }
        meta
    }

    /// The tiny tokenizer of these tests.
    pub(super) fn tiny() -> BpeTokenizer {
        BpeTokenizer::from_gguf(&metadata(|_| {})).unwrap()
    }

    fn set(entries: &mut [(&'static str, Value)], key: &str, value: Value) {
        entries.iter_mut().find(|(k, _)| *k == key).unwrap().1 = value;
    }

    #[test]
    fn encodes_merges_specials_and_bos() {
        let tokenizer = BpeTokenizer::from_gguf(&metadata(|_| {})).unwrap();
        let b = |c: u8| u32::from(c);
        // BOS, "hello", " wo", "r", "l", "d", the control token, "1", "2".
        assert_eq!(
            tokenizer.encode("hello world<|end|>12"),
            [
                262,
                259,
                261,
                b(b'r'),
                b(b'l'),
                b(b'd'),
                263,
                b(b'1'),
                b(b'2')
            ]
        );
        assert_eq!(tokenizer.encode_plain("hel"), [256, b(b'l')]);
        assert_eq!(tokenizer.decode(&[262, 259, 261]).unwrap(), "<s>hello wo");
        assert_eq!(tokenizer.decode(&[0xE2, b(b'x')]).unwrap(), "\u{FFFD}x");
        assert!(tokenizer.decode(&[264]).is_err());
    }

    #[test]
    fn bad_metadata_is_an_error_naming_the_key() {
        let cases: [(&str, Value, &str); 6] = [
            (
                "tokenizer.ggml.model",
                Value::String("llama".into()),
                "tokenizer.ggml.model",
            ),
            (
                "tokenizer.ggml.pre",
                Value::String("qwen2".into()),
                "tokenizer.ggml.pre",
            ),
            (
                "tokenizer.ggml.bos_token_id",
                Value::U32(264),
                "bos_token_id",
            ),
            (
                "tokenizer.ggml.merges",
                Value::Array(Array::String(vec!["h x".into()])),
                "merge 0",
            ),
            (
                "tokenizer.ggml.token_type",
                Value::Array(Array::I32(vec![1; 3])),
                "3 types",
            ),
            (
                "tokenizer.ggml.add_bos_token",
                Value::U8(1),
                "add_bos_token",
            ),
        ];
        for (key, value, expect) in cases {
            let meta = metadata(|e| set(e, key, value));
            let error = BpeTokenizer::from_gguf(&meta).unwrap_err().to_string();
            assert!(error.contains(expect), "{key}: {error}");
        }
        let meta = metadata(|e| e.retain(|(k, _)| *k != "tokenizer.ggml.merges"));
        let error = BpeTokenizer::from_gguf(&meta).unwrap_err().to_string();
        assert!(error.contains("tokenizer.ggml.merges"), "{error}");
    }
}
