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

/// Build a diagnostic for `span` of `source`.
pub fn diagnostic(source: &str, span: Span, code: &'static str, message: String) -> Diagnostic {
    let start = clamp_to_char(source, span.start);
    let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = source[start..]
        .find('\n')
        .map_or(source.len(), |i| start + i);
    let line_no = source[..start].matches('\n').count() + 1;
    let column = source[line_start..start].chars().count() + 1;
    let text = source[line_start..line_end].trim_end_matches('\r');
    let end = clamp_to_char(source, span.end.min(line_end)).max(start);
    let width = source[start..end].chars().count().max(1);
    let pad: String = source[line_start..start]
        .chars()
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    Diagnostic {
        code,
        message,
        line: u32::try_from(line_no).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
        excerpt: format!("{text}\n{pad}{}", "^".repeat(width)),
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
        let mut out: Vec<Diagnostic> = self
            .items
            .into_iter()
            .map(|(span, code, message)| diagnostic(source, span, code, message))
            .collect();
        if self.overflowed {
            let end = Span::new(source.len(), source.len());
            out.push(diagnostic(
                source,
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
}
