//! The lexer: source text to tokens with spans and line numbers.
//!
//! It never fails outright: a character that starts no token is reported
//! (E0101) and skipped, so the parser always sees a well-formed token stream
//! ending in [`TokenKind::Eof`].

use super::span::Span;
use crate::diag::{Diagnostics, codes};

/// What a token is; its text is `source[span]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// `%name`
    Value,
    /// `@name`
    Symbol,
    /// A bare word: op names, keywords, type names, predicates.
    Word,
    /// A numeric literal (digits, optional fraction and exponent, or hex).
    Number,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `=`
    Equals,
    /// `->`
    Arrow,
    /// `-` (only before a number or `inf`)
    Minus,
    /// End of input.
    Eof,
}

/// One token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    /// Its kind.
    pub kind: TokenKind,
    /// Where it is, sigil included.
    pub span: Span,
    /// 1-based line it starts on (for recovery at op boundaries).
    pub line: u32,
}

/// Characters allowed in `%value` and `@symbol` names.
pub fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'$'
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.'
}

/// Split `source` into tokens; problems go to `diags`.
pub fn lex(source: &str, diags: &mut Diagnostics) -> Vec<Token> {
    let bytes = source.as_bytes();
    // About one token per three bytes of typical source: one allocation.
    let mut tokens = Vec::with_capacity(source.len() / 3 + 1);
    let mut i = 0usize;
    let mut line: u32 = 1;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        let kind = match c {
            // A line ends at `\n`, `\r\n` or a lone `\r` (old Mac files);
            // the `\r` of `\r\n` is plain whitespace.
            b'\n' | b'\r' if c == b'\n' || bytes.get(i + 1) != Some(&b'\n') => {
                line = line.saturating_add(1);
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
                continue;
            }
            b'%' | b'@' => {
                i += 1;
                let name_start = i;
                while i < bytes.len() && is_name_char(bytes[i]) {
                    i += 1;
                }
                if i == name_start {
                    diags.error(
                        Span::new(start, i),
                        codes::UNEXPECTED_CHAR,
                        format!("`{}` must be followed by a name", c as char),
                    );
                    continue;
                }
                if c == b'%' {
                    TokenKind::Value
                } else {
                    TokenKind::Symbol
                }
            }
            b'0'..=b'9' => {
                i = number_end(bytes, i);
                TokenKind::Number
            }
            c if is_word_start(c) => {
                while i < bytes.len() && is_word_char(bytes[i]) {
                    i += 1;
                }
                TokenKind::Word
            }
            b'-' if bytes.get(i + 1) == Some(&b'>') => {
                i += 2;
                TokenKind::Arrow
            }
            _ => {
                let punct = match c {
                    b'(' => Some(TokenKind::LParen),
                    b')' => Some(TokenKind::RParen),
                    b'{' => Some(TokenKind::LBrace),
                    b'}' => Some(TokenKind::RBrace),
                    b'[' => Some(TokenKind::LBracket),
                    b']' => Some(TokenKind::RBracket),
                    b'<' => Some(TokenKind::Lt),
                    b'>' => Some(TokenKind::Gt),
                    b',' => Some(TokenKind::Comma),
                    b':' => Some(TokenKind::Colon),
                    b'=' => Some(TokenKind::Equals),
                    b'-' => Some(TokenKind::Minus),
                    _ => None,
                };
                match punct {
                    Some(k) => {
                        i += 1;
                        k
                    }
                    None => {
                        // Skip the whole (possibly multi-byte) character.
                        let len = source[i..].chars().next().map_or(1, char::len_utf8);
                        i += len;
                        let ch = &source[start..i];
                        diags.error(
                            Span::new(start, i),
                            codes::UNEXPECTED_CHAR,
                            format!("unexpected character `{}`", ch.escape_debug()),
                        );
                        continue;
                    }
                }
            }
        };
        tokens.push(Token {
            kind,
            span: Span::new(start, i),
            line,
        });
    }
    tokens.push(Token {
        kind: TokenKind::Eof,
        span: Span::new(bytes.len(), bytes.len()),
        line,
    });
    tokens
}

/// End of a number starting at `i`: `0x` hex digits, or digits with an
/// optional fraction and exponent. Letters after it start a new token, so
/// `4xf32` lexes as `4` and `xf32`.
fn number_end(bytes: &[u8], mut i: usize) -> usize {
    let digits = |mut j: usize| {
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    if bytes.get(i) == Some(&b'0')
        && matches!(bytes.get(i + 1), Some(b'x' | b'X'))
        && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    {
        i += 2;
        while i < bytes.len() && bytes[i].is_ascii_hexdigit() {
            i += 1;
        }
        return i;
    }
    i = digits(i);
    if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i = digits(i + 1);
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(i + 1), Some(b'+' | b'-')));
        if bytes.get(i + 1 + sign).is_some_and(u8::is_ascii_digit) {
            i = digits(i + 1 + sign);
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<TokenKind> {
        let mut d = Diagnostics::new();
        lex(src, &mut d).into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn splits_types_and_numbers() {
        use TokenKind::*;
        assert_eq!(
            kinds("vector<4xf32> -1.5e-3 0x1F // c\n%a.b @k.w"),
            vec![
                Word, Lt, Number, Word, Gt, Minus, Number, Number, Value, Symbol, Eof
            ]
        );
    }

    #[test]
    fn bad_characters_are_reported_and_skipped() {
        let mut d = Diagnostics::new();
        let toks = lex("% é #", &mut d);
        assert_eq!(toks.len(), 1);
        assert_eq!(d.len(), 3);
    }
}
