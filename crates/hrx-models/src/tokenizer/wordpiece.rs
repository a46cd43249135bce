//! The WordPiece model: greedy longest-match-first over a vocabulary, the
//! pieces after the first spelled with a continuation prefix (`##`).

use std::collections::HashMap;

/// A WordPiece vocabulary and its settings.
#[derive(Debug)]
pub(crate) struct WordPiece {
    /// Every token, as spelled; a word's first piece is looked up here.
    vocab: HashMap<Box<str>, u32>,
    /// The tokens that start with the continuation prefix, keyed without it,
    /// so that later pieces are looked up on a slice of the word instead of
    /// a freshly formatted `"##" + piece` string.
    continuations: HashMap<Box<str>, u32>,
    unk: u32,
    max_chars: usize,
}

impl WordPiece {
    /// `unk` is the id a word gets when it cannot be spelled with the
    /// vocabulary, or has more than `max_chars` chars.
    pub fn new(vocab: HashMap<Box<str>, u32>, prefix: &str, unk: u32, max_chars: usize) -> Self {
        let continuations = vocab
            .iter()
            .filter_map(|(token, &id)| Some((token.strip_prefix(prefix)?.into(), id)))
            .collect();
        Self {
            vocab,
            continuations,
            unk,
            max_chars,
        }
    }

    /// The longest word, in chars, that is split into pieces rather than
    /// replaced by the unknown token.
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// Appends the pieces of `word` (which has `chars` chars) to `ids`; if
    /// any part of the word has no piece, the whole word is one unknown
    /// token.
    pub fn tokenize(&self, word: &str, chars: usize, ids: &mut Vec<u32>) {
        if chars > self.max_chars {
            ids.push(self.unk);
            return;
        }
        let first = ids.len();
        let mut start = 0;
        while start < word.len() {
            match self.longest_piece(word, start) {
                Some((end, id)) => {
                    ids.push(id);
                    start = end;
                }
                None => {
                    ids.truncate(first);
                    ids.push(self.unk);
                    return;
                }
            }
        }
    }

    /// The longest vocabulary piece of `word` that starts at byte `start`:
    /// its end and id.
    fn longest_piece(&self, word: &str, start: usize) -> Option<(usize, u32)> {
        let table = if start == 0 {
            &self.vocab
        } else {
            &self.continuations
        };
        let mut end = word.len();
        while end > start {
            let piece = word.get(start..end)?;
            if let Some(&id) = table.get(piece) {
                return Some((end, id));
            }
            // Shorten by one char, not one byte.
            end = start + piece.char_indices().next_back()?.0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> WordPiece {
        let vocab = ["[UNK]", "un", "##aff", "##able", "aff", "a", "##b"]
            .iter()
            .enumerate()
            .map(|(id, token)| ((*token).into(), id as u32))
            .collect();
        WordPiece::new(vocab, "##", 0, 8)
    }

    fn pieces(word: &str) -> Vec<u32> {
        let mut ids = vec![99];
        model().tokenize(word, word.chars().count(), &mut ids);
        ids
    }

    #[test]
    fn greedy_longest_match_first() {
        assert_eq!(pieces("unaffable"), [99, 0], "9 chars is over the limit");
        assert_eq!(pieces("unaff"), [99, 1, 2]);
        assert_eq!(pieces("affable"), [99, 4, 3]);
        assert_eq!(pieces("ab"), [99, 5, 6]);
    }

    #[test]
    fn one_unknown_piece_makes_the_whole_word_unknown() {
        assert_eq!(pieces("unx"), [99, 0]);
        assert_eq!(pieces("éa"), [99, 0]);
        assert_eq!(pieces("aé"), [99, 0]);
    }
}
