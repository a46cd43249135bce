//! Collects normalized chars into words (the pre-tokenizer's split) and
//! words into WordPiece ids, until the token budget is spent.

use std::ops::ControlFlow;

use super::pretokenize::{CharKind, char_kind};
use super::wordpiece::WordPiece;

/// The ids of one encoding in progress.
pub(crate) struct Encoder<'m> {
    model: &'m WordPiece,
    ids: Vec<u32>,
    /// Once `ids` holds this many, later words cannot change what is kept.
    limit: usize,
    /// The current word, kept only up to the model's `max_chars` chars: a
    /// longer word is one unknown token whatever it spells, so a huge
    /// unbroken input needs no huge buffer.
    word: String,
    /// The current word's length in chars, including those not kept.
    chars: usize,
}

impl<'m> Encoder<'m> {
    /// Starts from `ids` (the template's leading special tokens) and keeps
    /// at most `limit` ids in all.
    pub fn new(model: &'m WordPiece, ids: Vec<u32>, limit: usize) -> Self {
        Self {
            model,
            ids,
            limit,
            word: String::new(),
            chars: 0,
        }
    }

    /// Takes the next normalized char; breaks once the budget is spent.
    pub fn push_char(&mut self, c: char) -> ControlFlow<()> {
        match char_kind(c) {
            CharKind::Space => self.end_word(),
            CharKind::Punctuation => {
                self.end_word()?;
                self.extend_word(c);
                self.end_word()
            }
            CharKind::Word => {
                self.extend_word(c);
                ControlFlow::Continue(())
            }
        }
    }

    /// Takes an added token's id; breaks once the budget is spent.
    pub fn push_id(&mut self, id: u32) -> ControlFlow<()> {
        self.ids.push(id);
        self.check_budget()
    }

    /// Tokenizes the word in progress (text segments end words: an added
    /// token between two letters separates them).
    pub fn end_word(&mut self) -> ControlFlow<()> {
        if self.chars > 0 {
            self.model.tokenize(&self.word, self.chars, &mut self.ids);
            self.word.clear();
            self.chars = 0;
        }
        self.check_budget()
    }

    /// The ids, cut to the limit (the last word may have overshot it).
    pub fn finish(mut self) -> Vec<u32> {
        self.ids.truncate(self.limit);
        self.ids
    }

    fn extend_word(&mut self, c: char) {
        self.chars += 1;
        if self.chars <= self.model.max_chars() {
            self.word.push(c);
        }
    }

    fn check_budget(&self) -> ControlFlow<()> {
        if self.ids.len() >= self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> WordPiece {
        let vocab = ["[UNK]", "a", "b", "!", "##b"]
            .iter()
            .enumerate()
            .map(|(id, token)| ((*token).into(), id as u32))
            .collect();
        WordPiece::new(vocab, "##", 0, 3)
    }

    fn encode(text: &str, limit: usize) -> Vec<u32> {
        let model = model();
        let mut encoder = Encoder::new(&model, vec![9], limit);
        if text
            .chars()
            .try_for_each(|c| encoder.push_char(c))
            .is_continue()
        {
            let _ = encoder.end_word();
        }
        encoder.finish()
    }

    #[test]
    fn splits_words_and_punctuation() {
        assert_eq!(encode("a  b!ab", 99), [9, 1, 2, 3, 1, 4]);
        assert_eq!(encode("abbb a", 99), [9, 0, 1], "4 chars is over the limit");
    }

    #[test]
    fn stops_at_the_limit() {
        assert_eq!(encode("a b a b a b", 3), [9, 1, 2]);
        assert_eq!(encode("ab ab", 2), [9, 1], "a word's pieces are cut too");
    }
}
