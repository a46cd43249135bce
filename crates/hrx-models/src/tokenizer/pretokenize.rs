//! The BERT pre-tokenizer (tokenizer.json's `BertPreTokenizer`): whitespace
//! separates words and every punctuation char is a word of its own.

use super::tables;

/// What a normalized char means to the pre-tokenizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CharKind {
    /// Ends the current word and is dropped.
    Space,
    /// Ends the current word and is a word by itself.
    Punctuation,
    /// Part of the current word.
    Word,
}

/// Classifies `c` the way `BertPreTokenizer` splits on it.
pub(crate) fn char_kind(c: char) -> CharKind {
    if c.is_whitespace() {
        CharKind::Space
    } else if is_punctuation(c) {
        CharKind::Punctuation
    } else {
        CharKind::Word
    }
}

/// All ASCII non-alphanumeric printable chars (so `$`, `+`, `^`, `|` count,
/// though Unicode calls them symbols) and Unicode's categories P*, as of
/// Unicode 8.0 like Hugging Face.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_punctuation()
    } else {
        tables::contains(tables::PUNCTUATION, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies() {
        for c in [' ', '\t', '\n', '\u{A0}', '\u{2028}'] {
            assert_eq!(char_kind(c), CharKind::Space, "{c:?}");
        }
        for c in ['!', '$', '+', '^', '`', '~', '¿', '—', '«', '。', '、', '_'] {
            assert_eq!(char_kind(c), CharKind::Punctuation, "{c:?}");
        }
        for c in ['a', '7', 'é', '€', '中', '😀', '\u{301}'] {
            assert_eq!(char_kind(c), CharKind::Word, "{c:?}");
        }
    }
}
