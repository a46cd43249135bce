//! The pre-tokenizer split: text to the pieces that BPE merges within.
//!
//! GPT-2's split is the regular expression
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! (first alternative that matches at a position wins, each greedy). It
//! is written out here as a scanner, without a regex engine: at each
//! position the alternatives are tried in that order, which is linear in
//! the text. The `smollm` flavour first isolates every number char
//! (`\p{N}`) as a piece of its own (Hugging Face's `Digits` with
//! `individual_digits`), then splits the runs between them.

use super::classes;

/// Which pre-tokenizer splits the text (GGUF's `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `gpt-2`: GPT-2's split.
    Gpt2,
    /// `smollm`: each number char alone, then GPT-2's split.
    SmolLm,
}

impl PreTokenizer {
    /// The pre-tokenizer GGUF names `name`, if it is one of these.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "gpt-2" => Some(Self::Gpt2),
            "smollm" => Some(Self::SmolLm),
            _ => None,
        }
    }

    /// Calls `piece` with each piece of `text`, in order; the pieces
    /// concatenate to `text`.
    pub fn split<'t>(self, text: &'t str, mut piece: impl FnMut(&'t str)) {
        match self {
            Self::Gpt2 => gpt2_split(text, &mut piece),
            Self::SmolLm => {
                let mut run_start = 0;
                for (at, c) in text.char_indices() {
                    if is_number(c) {
                        gpt2_split(&text[run_start..at], &mut piece);
                        let end = at + c.len_utf8();
                        piece(&text[at..end]);
                        run_start = end;
                    }
                }
                gpt2_split(&text[run_start..], &mut piece);
            }
        }
    }
}

fn in_table(table: &[(u32, u32)], c: char) -> bool {
    let c = u32::from(c);
    table
        .binary_search_by(|&(low, high)| {
            if high < c {
                std::cmp::Ordering::Less
            } else if low > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else {
        in_table(classes::LETTERS, c)
    }
}

fn is_number(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        in_table(classes::NUMBERS, c)
    }
}

fn is_space(c: char) -> bool {
    if c.is_ascii() {
        matches!(c, ' ' | '\t'..='\r')
    } else {
        in_table(classes::WHITESPACE, c)
    }
}

fn is_other(c: char) -> bool {
    !is_space(c) && !is_letter(c) && !is_number(c)
}

/// The contractions GPT-2 splits off, in the regex's order.
const CONTRACTIONS: [&str; 7] = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];

/// GPT-2's split of `text`.
fn gpt2_split<'t>(text: &'t str, piece: &mut impl FnMut(&'t str)) {
    let mut at = 0;
    while at < text.len() {
        let len = match_at(&text[at..]);
        piece(&text[at..at + len]);
        at += len;
    }
}

/// The byte length of the regex's match at the start of `rest` (never 0).
fn match_at(rest: &str) -> usize {
    if let Some(c) = CONTRACTIONS.iter().find(|c| rest.starts_with(**c)) {
        return c.len();
    }
    let mut chars = rest.chars();
    let first = chars.next().expect("match_at is called on non-empty text");
    // ` ?X+` for the three classes: an optional ASCII space, then a run.
    let (skip, head) = match (first, chars.next()) {
        (' ', Some(second)) if !is_space(second) => (1, second),
        _ => (0, first),
    };
    if !is_space(head) {
        let class: fn(char) -> bool = if is_letter(head) {
            is_letter
        } else if is_number(head) {
            is_number
        } else {
            is_other
        };
        return skip + run_len(&rest[skip..], class);
    }
    // `\s+(?!\S)`: a whitespace run, less its last char when text follows
    // (that char then starts the next piece); else `\s+`: the whole run.
    let run = run_len(rest, is_space);
    let last = rest[..run].chars().next_back().map_or(0, char::len_utf8);
    if rest.len() > run && run > last {
        run - last
    } else {
        run
    }
}

/// The byte length of the run of chars of `class` at the start of `text`.
fn run_len(text: &str, class: fn(char) -> bool) -> usize {
    text.char_indices()
        .find(|&(_, c)| !class(c))
        .map_or(text.len(), |(at, _)| at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(pre: PreTokenizer, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        pre.split(text, |p| out.push(p));
        assert_eq!(out.concat(), text);
        out
    }

    #[test]
    fn gpt2_alternatives() {
        let gpt2 = |t| pieces(PreTokenizer::Gpt2, t);
        assert_eq!(gpt2("Hello world"), ["Hello", " world"]);
        assert_eq!(
            gpt2("I'm we'll DON'T"),
            ["I", "'m", " we", "'ll", " DON", "'", "T"]
        );
        assert_eq!(gpt2("   leading"), ["  ", " leading"]);
        assert_eq!(gpt2("a  \n  b"), ["a", "  \n ", " b"]);
        assert_eq!(gpt2("\n\nfoo"), ["\n", "\n", "foo"]);
        assert_eq!(gpt2("end  "), ["end", "  "]);
        assert_eq!(gpt2("x 123 $45!?"), ["x", " 123", " $", "45", "!?"]);
        assert_eq!(gpt2("\"'s"), ["\"'", "s"]);
        assert_eq!(gpt2("naïve 日本語"), ["naïve", " 日本語"]);
        assert_eq!(gpt2(" "), [" "]);
        assert!(gpt2("").is_empty());
    }

    #[test]
    fn smollm_isolates_each_number_char() {
        let smollm = |t| pieces(PreTokenizer::SmolLm, t);
        assert_eq!(
            smollm("paid 12,345"),
            ["paid", " ", "1", "2", ",", "3", "4", "5"]
        );
        assert_eq!(smollm("x²½"), ["x", "²", "½"]);
        assert_eq!(smollm("a1b"), ["a", "1", "b"]);
    }
}
