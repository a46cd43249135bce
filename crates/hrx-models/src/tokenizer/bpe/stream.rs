//! Incremental decoding for streaming generation: tokens arrive one at a
//! time and a char may span several of them, so bytes are held back until
//! they complete a char.

use super::BpeTokenizer;
use hrx_core::{Error, Result};

/// Turns a stream of token ids into text pieces that are whole UTF-8.
///
/// Each [`push`](Self::push) returns the text that the ids so far
/// complete; bytes of an unfinished char wait for the next id. A byte
/// sequence that can never become a char is replaced by U+FFFD as soon as
/// that is certain, and [`finish`](Self::finish) replaces what is left, so
/// the concatenated pieces equal [`BpeTokenizer::decode`] of all the ids.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tokenizer: &'t BpeTokenizer,
    pending: Vec<u8>,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder with nothing pending.
    pub fn new(tokenizer: &'t BpeTokenizer) -> Self {
        Self {
            tokenizer,
            pending: Vec::new(),
        }
    }

    /// The text completed by `id` (possibly empty). An id outside the
    /// vocabulary is an error and changes nothing.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let bytes = self.tokenizer.token_bytes(id).ok_or_else(|| {
            Error::msg(format!(
                "token id {id} is outside the vocabulary of {} tokens",
                self.tokenizer.vocab_size()
            ))
        })?;
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return Ok(out);
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The bytes before valid_up_to are whole chars.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // An invalid sequence: replace it and go on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                        // An unfinished char at the end: wait for more.
                        None => {
                            self.pending.drain(..valid);
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }

    /// What is still pending, as text (an unfinished char becomes U+FFFD);
    /// the decoder is empty afterwards.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_to_the_whole_decode() {
        let tokenizer = super::super::tests::tiny();
        let b = |c: u8| u32::from(c);
        // "é" (C3 A9) split over two byte tokens, then a bad byte, then an
        // unfinished 3-byte char at the end.
        let ids = [b(b'a'), 0xC3, 0xA9, 0xFF, b(b'z'), 0xE2, 0x82];
        let mut stream = StreamDecoder::new(&tokenizer);
        let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
        assert_eq!(pieces, ["a", "", "é", "\u{FFFD}", "z", "", ""]);
        let tail = stream.finish();
        assert_eq!(tail, "\u{FFFD}");
        assert_eq!(pieces.concat() + &tail, tokenizer.decode(&ids).unwrap());
        assert!(stream.push(999).is_err());
    }
}
