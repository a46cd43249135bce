//! Diagnostics: error codes, and turning byte spans into
//! [`hrx_core::Diagnostic`]s with line, column and a caret excerpt.
//!
//! Every stage reports through a [`Diagnostics`] sink so that several
//! independent errors are returned together, in source order, as one
//! [`hrx_core::Error::Compile`].

use crate::front::span::Span;
use hrx_core::{Diagnostic, Error};

/// Stable error codes. E01xx lexing and parsing, E02xx names, scopes and
/// SSA, E03xx types and operand counts, E04xx access and uniformity, E05xx
/// launch, config and specialization, E06xx lowering and emission.
pub mod codes {
    /// A character that starts no token.
    pub const UNEXPECTED_CHAR: &str = "E0101";
    /// A malformed or out-of-range numeric literal.
    pub const BAD_LITERAL: &str = "E0102";
    /// The parser expected something else here.
    pub const UNEXPECTED_TOKEN: &str = "E0103";
    /// An op name that loom does not define.
    pub const UNKNOWN_OP: &str = "E0104";
    /// Regions nested deeper than the compiler allows.
    pub const TOO_DEEP: &str = "E0105";
    /// Too many errors; the rest are not reported.
    pub const TOO_MANY_ERRORS: &str = "E0106";
    /// A source larger than the compiler's input limit.
    pub const SOURCE_TOO_LARGE: &str = "E0107";
    /// A value name with no definition.
    pub const UNDEFINED_VALUE: &str = "E0201";
    /// A value name defined twice in the same scope.
    pub const DUPLICATE_VALUE: &str = "E0202";
    /// A value used outside the region that defines it.
    pub const OUT_OF_REGION: &str = "E0203";
    /// Two kernels or two config declarations with the same symbol.
    pub const DUPLICATE_SYMBOL: &str = "E0204";
    /// An op in a place it cannot be (yield outside a region, return not
    /// last, ops after a terminator).
    pub const MISPLACED_OP: &str = "E0205";
    /// An operand's type differs from what the op requires.
    pub const TYPE_MISMATCH: &str = "E0301";
    /// An op given the wrong number of operands.
    pub const OPERAND_COUNT: &str = "E0302";
    /// A type name that loom does not define.
    pub const UNKNOWN_TYPE: &str = "E0303";
    /// An op used at a type it does not support.
    pub const UNSUPPORTED_TYPE: &str = "E0304";
    /// An op given the wrong number of result names.
    pub const RESULT_COUNT: &str = "E0305";
    /// A literal that does not fit its type.
    pub const LITERAL_TYPE: &str = "E0306";
    /// An unknown predicate, tag or attribute word.
    pub const UNKNOWN_WORD: &str = "E0307";
    /// A barrier outside workgroup-uniform control flow.
    pub const DIVERGENT_BARRIER: &str = "E0401";
    /// A subgroup collective outside subgroup-uniform control flow.
    pub const DIVERGENT_COLLECTIVE: &str = "E0402";
    /// A broadcast lane that is not subgroup-uniform.
    pub const DIVERGENT_LANE: &str = "E0403";
    /// A write through a view of a read-only buffer.
    pub const READONLY_WRITE: &str = "E0404";
    /// An op the launch region may not hold.
    pub const NOT_IN_LAUNCH: &str = "E0501";
    /// A workgroup size that depends on workload values.
    pub const DYNAMIC_WORKGROUP_SIZE: &str = "E0502";
    /// A config.value naming an undeclared key.
    pub const UNKNOWN_CONFIG: &str = "E0503";
    /// A kernel without `kernel.launch.config`.
    pub const MISSING_LAUNCH_CONFIG: &str = "E0504";
    /// A second `kernel.launch.config`.
    pub const DUPLICATE_LAUNCH_CONFIG: &str = "E0505";
    /// A workgroup allocation whose size is not a compile-time constant.
    pub const DYNAMIC_ALLOCA: &str = "E0506";
    /// A config declaration or value of the wrong type.
    pub const CONFIG_TYPE: &str = "E0507";
}

/// At most this many diagnostics are kept; a flood of errors from garbage
/// input helps nobody and costs time.
pub const MAX_DIAGNOSTICS: usize = 64;

/// Longest excerpt line shown, in characters: a diagnostic on a very long
/// line shows a window around the span, so a flood of errors on one
/// megabyte-long line stays small.
pub const MAX_EXCERPT_CHARS: usize = 120;

/// Characters of context kept before the span in a shortened excerpt.
const CONTEXT_BEFORE: usize = 40;

/// Where the lines of a source start. A line ends at `\n`, `\r\n` or a lone
/// `\r`, so files with any of the three conventions number their lines as
/// an editor does.
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    /// Index the lines of `source` (one pass).
    pub fn new(source: &str) -> Self {
        let bytes = source.as_bytes();
        let mut starts = vec![0];
        for (i, b) in bytes.iter().enumerate() {
            let ends_line = *b == b'\n' || (*b == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
            if ends_line {
                starts.push(i + 1);
            }
        }
        LineIndex { starts }
    }

    /// The 0-based line holding byte `at`, and the byte where it starts.
    fn line_of(&self, at: usize) -> (usize, usize) {
        let line = self.starts.partition_point(|s| *s <= at).saturating_sub(1);
        (line, self.starts.get(line).copied().unwrap_or(0))
    }

    /// The byte where the text of the line starting at `line_start` ends
    /// (before its line break).
    fn line_end(source: &str, line_start: usize) -> usize {
        source[line_start..]
            .find(['\n', '\r'])
            .map_or(source.len(), |i| line_start + i)
    }
}

/// Build a diagnostic for `span` of `source`.
pub fn diagnostic(source: &str, span: Span, code: &'static str, message: String) -> Diagnostic {
    diagnostic_in(source, &LineIndex::new(source), span, code, message)
}

/// [`diagnostic`] with the source's lines already indexed.
pub fn diagnostic_in(
    source: &str,
    lines: &LineIndex,
    span: Span,
    code: &'static str,
    message: String,
) -> Diagnostic {
    let start = clamp_to_char(source, span.start);
    let (line, line_start) = lines.line_of(start);
    let line_end = LineIndex::line_end(source, line_start).max(start);
    let column = source[line_start..start].chars().count() + 1;
    let end = clamp_to_char(source, span.end.min(line_end)).max(start);
    // A window of the line around the span, at most MAX_EXCERPT_CHARS wide.
    let mut from = line_start;
    let mut prefix = "";
    if column > CONTEXT_BEFORE + 1 && line_end - line_start > MAX_EXCERPT_CHARS {
        from = source[..start]
            .char_indices()
            .rev()
            .nth(CONTEXT_BEFORE - 1)
            .map_or(line_start, |(i, _)| i.max(line_start));
        prefix = "...";
    }
    let budget = MAX_EXCERPT_CHARS.saturating_sub(prefix.len());
    let shown_end = source[from..line_end]
        .char_indices()
        .nth(budget)
        .map_or(line_end, |(i, _)| from + i);
    let suffix = if shown_end < line_end { "..." } else { "" };
    let text = &source[from..shown_end];
    let caret_end = end.min(shown_end).max(start);
    let width = source[start..caret_end].chars().count().max(1);
    let pad: String = prefix
        .chars()
        .map(|_| ' ')
        .chain(
            source[from..start]
                .chars()
                .map(|c| if c == '\t' { '\t' } else { ' ' }),
        )
        .collect();
    Diagnostic {
        code,
        message,
        line: u32::try_from(line + 1).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
        excerpt: format!("{prefix}{text}{suffix}\n{pad}{}", "^".repeat(width)),
    }
}

/// The largest char boundary not after `at` (and not past the end).
fn clamp_to_char(source: &str, at: usize) -> usize {
    let mut at = at.min(source.len());
    while !source.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Collects diagnostics of one compilation.
#[derive(Debug, Default)]
pub struct Diagnostics {
    items: Vec<(Span, &'static str, String)>,
    overflowed: bool,
}

impl Diagnostics {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record an error (dropped past [`MAX_DIAGNOSTICS`]).
    pub fn error(&mut self, span: Span, code: &'static str, message: impl Into<String>) {
        if self.items.len() < MAX_DIAGNOSTICS {
            self.items.push((span, code, message.into()));
        } else {
            self.overflowed = true;
        }
    }

    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether the sink is full, so callers may stop early.
    pub fn is_full(&self) -> bool {
        self.items.len() >= MAX_DIAGNOSTICS
    }

    /// How many errors were recorded.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// `Ok(value)` when nothing was reported, else every error, sorted by
    /// position, as one [`Error::Compile`].
    pub fn finish<T>(self, source: &str, value: T) -> Result<T, Error> {
        if self.items.is_empty() {
            return Ok(value);
        }
        Err(self.into_error(source))
    }

    /// Every error as one [`Error::Compile`] (sorted by position).
    pub fn into_error(mut self, source: &str) -> Error {
        self.items.sort_by_key(|(span, _, _)| span.start);
        let lines = LineIndex::new(source);
        let mut out: Vec<Diagnostic> = self
            .items
            .into_iter()
            .map(|(span, code, message)| diagnostic_in(source, &lines, span, code, message))
            .collect();
        if self.overflowed {
            let end = Span::new(source.len(), source.len());
            out.push(diagnostic_in(
                source,
                &lines,
                end,
                codes::TOO_MANY_ERRORS,
                format!("too many errors; only the first {MAX_DIAGNOSTICS} are shown"),
            ));
        }
        Error::compile(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_and_caret() {
        let src = "first\n  séc ond\n";
        let at = src.find("ond").unwrap();
        let d = diagnostic(src, Span::new(at, at + 3), "E0000", "m".into());
        assert_eq!((d.line, d.column), (2, 7));
        assert_eq!(d.excerpt, "  séc ond\n      ^^^");
    }

    #[test]
    fn spans_past_the_end_or_inside_a_char_do_not_panic() {
        let src = "é";
        let d = diagnostic(src, Span::new(1, 99), "E0000", "m".into());
        assert_eq!((d.line, d.column), (1, 1));
        let d = diagnostic("", Span::new(5, 5), "E0000", "m".into());
        assert_eq!(d.line, 1);
    }

    #[test]
    fn every_line_ending_counts() {
        for src in ["a\nb\nbad", "a\r\nb\r\nbad", "a\rb\rbad"] {
            let at = src.find("bad").unwrap();
            let d = diagnostic(src, Span::new(at, at + 3), "E0000", "m".into());
            assert_eq!((d.line, d.column), (3, 1), "{src:?}");
            assert_eq!(d.excerpt, "bad\n^^^", "{src:?}");
        }
    }

    #[test]
    fn a_long_line_shows_a_window_around_the_span() {
        let src = format!("{}BAD{}\n", "x".repeat(1_000_000), "y".repeat(1_000_000));
        let at = 1_000_000;
        let d = diagnostic(&src, Span::new(at, at + 3), "E0000", "m".into());
        assert_eq!((d.line, d.column), (1, 1_000_001));
        let (text, caret) = d.excerpt.split_once('\n').unwrap();
        assert!(text.chars().count() <= MAX_EXCERPT_CHARS + 3, "{text}");
        assert!(text.starts_with("...") && text.ends_with("..."), "{text}");
        let caret_at = caret.find('^').unwrap();
        assert_eq!(&text[caret_at..caret_at + 3], "BAD");
        assert_eq!(caret.trim_start(), "^^^");
    }
}
