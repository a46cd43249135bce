//! The front end: loom text to a syntax tree with spans, and back.
//!
//! [`parse`] never panics and never recurses deeper than
//! [`parser::MAX_DEPTH`] regions; every syntax error comes back as a
//! diagnostic with line, column and caret excerpt, several at once when the
//! parser can resume at a later op.

pub mod ast;
mod forms;
pub mod lexer;
pub mod parser;
pub mod printer;
pub mod span;
mod terms;

pub use parser::parse;
pub use printer::print;
pub use span::Span;
