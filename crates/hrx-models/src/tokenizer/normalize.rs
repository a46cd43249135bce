//! The BERT normalizer (tokenizer.json's `BertNormalizer`), streamed char by
//! char so that encoding can stop as soon as enough tokens are produced.
//!
//! The steps and their order are Hugging Face's: clean the text, pad CJK
//! ideographs with spaces, strip accents (NFD, then drop nonspacing marks),
//! lowercase. So are the character classes ([`tables`]), which are
//! Unicode 8.0's, not today's: a char assigned since is kept as a letter.

use std::ops::ControlFlow;

use unicode_normalization::UnicodeNormalization;

use super::tables;

/// The settings of a `BertNormalizer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BertNormalizer {
    /// Drop control characters and map every whitespace char to `' '`.
    pub clean_text: bool,
    /// Put spaces around CJK ideographs, so that each is a word of its own.
    pub handle_chinese_chars: bool,
    /// NFD-decompose and drop nonspacing marks. tokenizer.json's `null`
    /// means "same as `lowercase`"; the loader resolves it.
    pub strip_accents: bool,
    /// Lowercase every char (Rust's `char::to_lowercase`, as Hugging Face).
    pub lowercase: bool,
}

impl BertNormalizer {
    /// Feeds the normalized form of `text` to `emit`, one char at a time,
    /// and stops as soon as `emit` breaks.
    pub fn normalize(
        &self,
        text: impl Iterator<Item = char>,
        mut emit: impl FnMut(char) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let mut spaced = text
            .filter_map(|c| self.clean(c))
            .flat_map(|c| self.space_chinese(c));
        let lower = |c: char| self.lower(c, &mut emit);
        if self.strip_accents {
            spaced
                .nfd()
                .filter(|&c| !is_nonspacing_mark(c))
                .try_for_each(lower)
        } else {
            spaced.try_for_each(lower)
        }
    }

    /// `clean_text`: control chars are dropped, whitespace becomes `' '`.
    fn clean(&self, c: char) -> Option<char> {
        if !self.clean_text {
            Some(c)
        } else if is_dropped(c) {
            None
        } else if c.is_whitespace() {
            Some(' ')
        } else {
            Some(c)
        }
    }

    /// `handle_chinese_chars`: `c` alone, or `' ', c, ' '` for an ideograph.
    fn space_chinese(&self, c: char) -> impl Iterator<Item = char> + use<> {
        let pad = (self.handle_chinese_chars && is_chinese(c)).then_some(' ');
        pad.into_iter().chain(Some(c)).chain(pad)
    }

    fn lower(&self, c: char, emit: &mut impl FnMut(char) -> ControlFlow<()>) -> ControlFlow<()> {
        if !self.lowercase {
            emit(c)
        } else if c.is_ascii() {
            emit(c.to_ascii_lowercase())
        } else {
            // One char may lowercase to several (`İ` becomes `i` + U+0307).
            c.to_lowercase().try_for_each(emit)
        }
    }
}

/// A char that `clean_text` drops: U+0000, U+FFFD, and control, format and
/// private-use chars (categories Cc, Cf, Co) other than `\t`, `\n`, `\r`.
fn is_dropped(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r')
    } else {
        tables::contains(tables::DROPPED_BY_CLEAN, c)
    }
}

/// A CJK ideograph, by the code-point ranges Hugging Face uses (which are
/// not all of Unicode's: kana and hangul are ordinary letters, and
/// U+2B820..U+2B91F is left out).
fn is_chinese(c: char) -> bool {
    matches!(
        u32::from(c),
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// General category Mn: the accents that `strip_accents` removes after NFD.
fn is_nonspacing_mark(c: char) -> bool {
    !c.is_ascii() && tables::contains(tables::NONSPACING_MARKS, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: BertNormalizer = BertNormalizer {
        clean_text: true,
        handle_chinese_chars: true,
        strip_accents: true,
        lowercase: true,
    };

    fn normalized(normalizer: BertNormalizer, text: &str) -> String {
        let mut out = String::new();
        let _ = normalizer.normalize(text.chars(), |c| {
            out.push(c);
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn cleans_controls_and_whitespace() {
        assert_eq!(normalized(BERT, "a\0b\u{7}c\u{FFFD}d"), "abcd");
        assert_eq!(
            normalized(BERT, "a\tb\nc\rd\u{A0}e\u{3000}f"),
            "a b c d e f"
        );
        // Zero-width space and BOM are format chars (Cf): dropped, not spaces.
        assert_eq!(normalized(BERT, "a\u{200B}b\u{FEFF}c\u{AD}d"), "abcd");
        // Vertical tab and NEL are whitespace to Rust but control chars first.
        assert_eq!(normalized(BERT, "a\u{B}b\u{85}c"), "abc");
    }

    #[test]
    fn pads_ideographs_but_not_kana_or_hangul() {
        assert_eq!(normalized(BERT, "中文"), " 中  文 ");
        // NFD spells hangul syllables as jamo, as Hugging Face does.
        assert_eq!(normalized(BERT, "かな한"), "かな\u{1112}\u{1161}\u{11AB}");
    }

    #[test]
    fn strips_accents_before_lowercasing() {
        assert_eq!(normalized(BERT, "Café Ñandú Åsa"), "cafe nandu asa");
        // Stripping first turns `İ` into `I`, which lowercases to plain `i`.
        assert_eq!(normalized(BERT, "İstanbul"), "istanbul");
        assert_eq!(normalized(BERT, "ß"), "ß");
    }

    #[test]
    fn keeps_accents_when_asked() {
        let cased = BertNormalizer {
            strip_accents: false,
            lowercase: false,
            ..BERT
        };
        assert_eq!(normalized(cased, "Café İ"), "Café İ");
        let lower_only = BertNormalizer {
            strip_accents: false,
            ..BERT
        };
        assert_eq!(normalized(lower_only, "İ"), "i\u{307}");
    }

    #[test]
    fn stops_when_told() {
        let mut seen = 0;
        let flow = BERT.normalize("abcdef".chars(), |_| {
            seen += 1;
            if seen == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!((flow, seen), (ControlFlow::Break(()), 3));
    }
}
