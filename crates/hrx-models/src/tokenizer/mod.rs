//! Tokenizers in pure Rust: BERT WordPiece ([`WordPieceTokenizer`]),
//! giving the same ids as Hugging Face's `tokenizers` for BERT-style
//! tokenizer.json files; byte-level BPE from a GGUF file's metadata
//! ([`BpeTokenizer`], its contract in its own docs); and chat templates
//! ([`ChatTemplate`], ChatML recognised and rendered without a Jinja
//! engine).
//!
//! WordPiece's design choices and contracts:
//!
//! - **Hugging Face's semantics, step by step.** Added tokens (`[CLS]`,
//!   `[MASK]`, ...) are found in the raw text first; the text between them
//!   goes through `BertNormalizer` (`normalize.rs`), `BertPreTokenizer`
//!   (`pretokenize.rs`) and `WordPiece` (`wordpiece.rs`); the
//!   post-processor's template wraps the ids (`[CLS] $A [SEP]`). Parts of a
//!   tokenizer.json that this does not implement are errors naming the
//!   field, never a silent difference in ids.
//! - **Hugging Face's Unicode, not today's.** Which chars are control,
//!   accent or punctuation follows the Unicode 8.0 tables `tokenizers`
//!   uses (`tables.rs`, generated from it), so chars assigned or
//!   reclassified since are treated as it treats them. The one known
//!   difference left: 21 chars of scripts added in Unicode 13 to 16 that
//!   today's NFD decomposes and `tokenizers`' does not; BERT vocabularies
//!   have no pieces for them, so their words are `[UNK]` either way.
//! - **Truncation is the caller's.** The maximum length (special tokens
//!   included) is an argument of [`WordPieceTokenizer::encode`], because
//!   sentence-transformers uses its own `max_seq_length`, not the file's
//!   `truncation`. Nothing is padded: batching pads, with
//!   [`WordPieceTokenizer::pad_id`].
//! - **Streaming, so long inputs are cheap.** Each stage hands chars to the
//!   next, and encoding stops once `max_len` tokens are certain; the rest of
//!   a 10 MB input is never normalized. A word is buffered only up to the
//!   model's `max_input_chars_per_word`, beyond which it is `[UNK]` anyway.
//!
//! ```text
//! let tokenizer = WordPieceTokenizer::from_dir(Path::new("all-MiniLM-L6-v2"))?;
//! let ids = tokenizer.encode("Hello, world!", 256)?;
//! // [101, 7592, 1010, 2088, 999, 102]: [CLS] hello , world ! [SEP]
//! ```

mod added;
mod bpe;
mod chat;
mod encoder;
mod folder;
mod json;
mod normalize;
mod pretokenize;
mod tables;
mod wordpiece;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

use hrx_core::{Error, Result};

pub use bpe::{BpeTokenizer, PreTokenizer, StreamDecoder, TokenType};
pub use chat::{ChatMessage, ChatTemplate};

use added::AddedTokens;
use encoder::Encoder;
use normalize::BertNormalizer;
use wordpiece::WordPiece;

/// A BERT WordPiece tokenizer: text to token ids.
#[derive(Debug)]
pub struct WordPieceTokenizer {
    normalizer: BertNormalizer,
    model: WordPiece,
    added: AddedTokens,
    /// The template's special tokens before and after the text.
    prefix_ids: Vec<u32>,
    suffix_ids: Vec<u32>,
    pad_id: u32,
    /// Token text by id.
    tokens: Vec<Box<str>>,
}

/// A tokenizer as read from its files, before its ids are checked.
pub(crate) struct Parts {
    /// The file the parts come from, for error messages.
    source: &'static str,
    normalizer: BertNormalizer,
    vocab: HashMap<String, u32>,
    unk_token: String,
    continuing_prefix: String,
    max_chars: usize,
    /// Tokens matched in the raw text: (content, id).
    added: Vec<(String, u32)>,
    prefix_ids: Vec<u32>,
    suffix_ids: Vec<u32>,
    /// The padding id, when the file names one; else `[PAD]`'s.
    pad_id: Option<u32>,
}

impl WordPieceTokenizer {
    /// From the text of a tokenizer.json. Its model must be `WordPiece`,
    /// normalizer `BertNormalizer`, pre-tokenizer `BertPreTokenizer` and
    /// post-processor `TemplateProcessing` or `BertProcessing`; anything
    /// else, or a malformed file, is an error naming the field.
    pub fn from_json(text: &str) -> Result<Self> {
        Self::from_parts(json::parse(text)?)
    }

    /// From a model folder: its tokenizer.json, or, without one, its
    /// vocab.txt with BERT's defaults (lowercasing as tokenizer_config.json's
    /// `do_lower_case` says, when present).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        Self::from_parts(folder::parse_dir(dir)?)
    }

    /// The ids of `text` between the template's special tokens (`[CLS]` ..
    /// `[SEP]`), truncated to `max_len` ids in all; `max_len` must leave
    /// room for the special tokens.
    pub fn encode(&self, text: &str, max_len: usize) -> Result<Vec<u32>> {
        let specials = self.prefix_ids.len() + self.suffix_ids.len();
        if max_len < specials {
            return Err(Error::msg(format!(
                "tokenizer: max_len {max_len} leaves no room for the {specials} special tokens"
            )));
        }
        let limit = max_len - self.suffix_ids.len();
        let mut ids = Vec::with_capacity(max_len.min(text.len() + specials));
        ids.extend_from_slice(&self.prefix_ids);
        let mut encoder = Encoder::new(&self.model, ids, limit);
        if limit > self.prefix_ids.len() {
            // A break only means that the budget is spent.
            let _ = self.encode_into(text, &mut encoder);
        }
        let mut ids = encoder.finish();
        ids.extend_from_slice(&self.suffix_ids);
        Ok(ids)
    }

    /// Feeds the text and added tokens of `text` to `encoder` until the end
    /// or a full budget.
    fn encode_into(&self, text: &str, encoder: &mut Encoder<'_>) -> ControlFlow<()> {
        let mut scanner = self.added.scan(text);
        loop {
            // Each run of text is normalized alone, as Hugging Face does, and
            // an added token ends the word before it.
            let run = scanner.text();
            self.normalizer.normalize(run, |c| encoder.push_char(c))?;
            encoder.end_word()?;
            let Some(id) = scanner.token() else {
                return ControlFlow::Continue(());
            };
            encoder.push_id(id)?;
        }
    }

    /// The number of ids (every id is below it).
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id that pads a sequence (`[PAD]`).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The text of token `id`, if there is such a token.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(usize::try_from(id).ok()?).map(|t| &**t)
    }

    /// Checks that the ids are 0..n, each with one token, and that the
    /// special tokens exist.
    fn from_parts(parts: Parts) -> Result<Self> {
        let source = parts.source;
        let fail = |what: String| Error::msg(format!("{source}: {what}"));
        let tokens = token_table(&parts.vocab, &parts.added).map_err(fail)?;
        let unk = *parts.vocab.get(&parts.unk_token).ok_or_else(|| {
            fail(format!(
                "the unknown token {:?} is not in the vocabulary",
                parts.unk_token
            ))
        })?;
        let pad_id = match parts.pad_id {
            Some(id) => id,
            None => *parts
                .vocab
                .get("[PAD]")
                .ok_or_else(|| fail("no padding id, and no [PAD] token".into()))?,
        };
        let template = parts.prefix_ids.iter().chain(&parts.suffix_ids);
        if let Some(id) = template
            .chain([&pad_id])
            .find(|&&id| id as usize >= tokens.len())
        {
            return Err(fail(format!(
                "special token id {id} is outside the vocabulary of {} tokens",
                tokens.len()
            )));
        }
        let vocab = parts.vocab.into_iter().map(|(t, id)| (t.into(), id));
        Ok(Self {
            normalizer: parts.normalizer,
            model: WordPiece::new(
                vocab.collect(),
                &parts.continuing_prefix,
                unk,
                parts.max_chars,
            ),
            added: AddedTokens::new(parts.added.into_iter().map(|(t, id)| (t.into(), id))),
            prefix_ids: parts.prefix_ids,
            suffix_ids: parts.suffix_ids,
            pad_id,
            tokens,
        })
    }
}

/// Token text by id, for the vocabulary and the added tokens together. The
/// ids must be exactly 0..n, each naming one text (an added token may repeat
/// a vocabulary entry).
fn token_table(
    vocab: &HashMap<String, u32>,
    added: &[(String, u32)],
) -> std::result::Result<Vec<Box<str>>, String> {
    let entries = vocab.iter().map(|(t, &id)| (t.as_str(), id));
    let entries = entries.chain(added.iter().map(|(t, id)| (t.as_str(), *id)));
    let mut table: Vec<Option<&str>> = vec![None; vocab.len() + added.len()];
    for (text, id) in entries {
        let slot = table
            .get_mut(id as usize)
            .ok_or_else(|| format!("id {id} ({text:?}) leaves gaps in the ids"))?;
        match slot {
            Some(other) if *other != text => {
                return Err(format!("id {id} is given to both {other:?} and {text:?}"));
            }
            _ => *slot = Some(text),
        }
    }
    // Added tokens that repeat vocabulary entries leave the tail unused.
    while table.last() == Some(&None) {
        table.pop();
    }
    table
        .iter()
        .enumerate()
        .map(|(id, text)| text.map(Box::from).ok_or(format!("no token has id {id}")))
        .collect()
}

#[cfg(test)]
mod tests;
