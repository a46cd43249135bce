//! The recursive-descent parser: tokens to [`ast::Module`].
//!
//! Recursion happens only through nested regions and is bounded by
//! [`MAX_DEPTH`]; deeper input stops the parse with one E0105 diagnostic.
//! An error inside an op is reported and parsing resumes at the next op
//! (the first token on a later line, outside any region the bad op opened),
//! so independent errors are reported together.

use super::ast::{self, Ident, Op, Region};
use super::lexer::{Token, TokenKind, lex};
use super::span::Span;
use crate::diag::{Diagnostics, codes};
use hrx_core::Result;

/// Deepest region nesting the parser accepts (kernel regions count as 1).
pub const MAX_DEPTH: usize = 64;

/// The error is already in the diagnostics; unwind to a recovery point.
#[derive(Debug)]
pub(super) struct Stop;

pub(super) type PResult<T> = std::result::Result<T, Stop>;

pub(super) struct Parser<'s> {
    pub(super) src: &'s str,
    pub(super) toks: Vec<Token>,
    pub(super) pos: usize,
    pub(super) diags: Diagnostics,
    depth: usize,
    /// Set when parsing cannot go on (too deep, too many errors).
    fatal: bool,
}

/// Parse loom source into a syntax tree, or every syntax error found.
pub fn parse(source: &str) -> Result<ast::Module> {
    let mut diags = Diagnostics::new();
    let toks = lex(source, &mut diags);
    let mut p = Parser {
        src: source,
        toks,
        pos: 0,
        diags,
        depth: 0,
        fatal: false,
    };
    let module = p.module();
    p.diags.finish(source, module)
}

impl<'s> Parser<'s> {
    pub(super) fn peek(&self) -> Token {
        self.peek_at(0)
    }

    pub(super) fn peek_at(&self, ahead: usize) -> Token {
        let last = self.toks.len().saturating_sub(1);
        let i = self.pos.saturating_add(ahead).min(last);
        self.toks.get(i).copied().unwrap_or(Token {
            kind: TokenKind::Eof,
            span: Span::new(self.src.len(), self.src.len()),
            line: 1,
        })
    }

    pub(super) fn bump(&mut self) -> Token {
        let t = self.peek();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    pub(super) fn text(&self, t: Token) -> &'s str {
        self.src.get(t.span.start..t.span.end).unwrap_or("")
    }

    pub(super) fn at(&self, kind: TokenKind) -> bool {
        self.peek().kind == kind
    }

    pub(super) fn at_word(&self, word: &str) -> bool {
        self.at(TokenKind::Word) && self.text(self.peek()) == word
    }

    pub(super) fn eat(&mut self, kind: TokenKind) -> bool {
        let hit = self.at(kind);
        if hit {
            self.bump();
        }
        hit
    }

    /// End of the last consumed token.
    pub(super) fn prev_end(&self) -> usize {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map_or(0, |t| t.span.end)
    }

    pub(super) fn error(&mut self, span: Span, code: &'static str, msg: String) -> Stop {
        self.diags.error(span, code, msg);
        if self.diags.is_full() {
            self.fatal = true;
        }
        Stop
    }

    pub(super) fn unexpected(&mut self, what: &str) -> Stop {
        let t = self.peek();
        let found = match t.kind {
            TokenKind::Eof => "end of input".to_string(),
            _ => format!("`{}`", self.text(t)),
        };
        self.error(
            t.span,
            codes::UNEXPECTED_TOKEN,
            format!("expected {what}, found {found}"),
        )
    }

    pub(super) fn expect(&mut self, kind: TokenKind, what: &str) -> PResult<Token> {
        if self.at(kind) {
            Ok(self.bump())
        } else {
            Err(self.unexpected(what))
        }
    }

    pub(super) fn expect_word(&mut self, word: &str) -> PResult<Token> {
        if self.at_word(word) {
            Ok(self.bump())
        } else {
            Err(self.unexpected(&format!("`{word}`")))
        }
    }

    /// A `%value`, `@symbol` or bare word, sigil stripped.
    pub(super) fn ident(&mut self, kind: TokenKind, what: &str) -> PResult<Ident> {
        let t = self.expect(kind, what)?;
        let text = self.text(t);
        let text = match kind {
            TokenKind::Value | TokenKind::Symbol => text.get(1..).unwrap_or(""),
            _ => text,
        };
        Ok(Ident {
            text: text.to_string(),
            span: t.span,
        })
    }

    pub(super) fn value(&mut self) -> PResult<Ident> {
        self.ident(TokenKind::Value, "a `%value`")
    }

    /// Zero or more comma-separated values; stops before `%x =` (the start
    /// of the next op) so an operand-less op never swallows it.
    pub(super) fn values(&mut self) -> PResult<Vec<Ident>> {
        let mut out = Vec::new();
        let starts_op = |p: &Self| p.peek_at(1).kind == TokenKind::Equals;
        if !self.at(TokenKind::Value) || starts_op(self) {
            return Ok(out);
        }
        loop {
            out.push(self.value()?);
            if self.at(TokenKind::Comma) && self.peek_at(1).kind == TokenKind::Value {
                self.bump();
            } else {
                return Ok(out);
            }
        }
    }

    fn module(&mut self) -> ast::Module {
        let mut items = Vec::new();
        while !self.fatal && !self.at(TokenKind::Eof) {
            let before = self.pos;
            let item = if self.at_word("kernel.def") {
                self.kernel().map(ast::Item::Kernel)
            } else if self.at_word("config.decl") {
                self.config_decl().map(ast::Item::Config)
            } else {
                Err(self.unexpected("`kernel.def` or `config.decl`"))
            };
            match item {
                Ok(item) => items.push(item),
                Err(Stop) => self.recover_item(before),
            }
        }
        ast::Module { items }
    }

    /// Skip to the next `kernel.def` / `config.decl` outside braces.
    fn recover_item(&mut self, before: usize) {
        if self.pos == before {
            self.bump();
        }
        let mut depth = 0usize;
        while !self.at(TokenKind::Eof) {
            match self.peek().kind {
                TokenKind::LBrace => depth += 1,
                TokenKind::RBrace => depth = depth.saturating_sub(1),
                _ if depth == 0 && (self.at_word("kernel.def") || self.at_word("config.decl")) => {
                    return;
                }
                _ => {}
            }
            self.bump();
        }
    }

    fn config_decl(&mut self) -> PResult<ast::ConfigDecl> {
        let start = self.expect_word("config.decl")?.span;
        let key = self.ident(TokenKind::Symbol, "a `@key`")?;
        self.expect(TokenKind::Equals, "`=`")?;
        let default = self.literal()?;
        self.expect(TokenKind::Colon, "`:`")?;
        let ty = self.parse_type()?;
        let span = Span::new(start.start, self.prev_end());
        Ok(ast::ConfigDecl {
            key,
            default,
            ty,
            span,
        })
    }

    fn kernel(&mut self) -> PResult<ast::KernelDef> {
        let start = self.expect_word("kernel.def")?.span;
        let name = self.ident(TokenKind::Symbol, "a kernel `@name`")?;
        let span = start.to(name.span);
        let workload = self.args()?;
        let launch = self.region()?;
        self.expect_word("launch")?;
        let args = self.args()?;
        let body = self.region()?;
        Ok(ast::KernelDef {
            name,
            workload,
            launch_ops: launch.ops,
            args,
            body: body.ops,
            span,
        })
    }

    fn args(&mut self) -> PResult<Vec<ast::ArgDecl>> {
        self.expect(TokenKind::LParen, "`(`")?;
        let mut out = Vec::new();
        if self.eat(TokenKind::RParen) {
            return Ok(out);
        }
        loop {
            let name = self.value()?;
            self.expect(TokenKind::Colon, "`:`")?;
            let ty = self.parse_type()?;
            let mut attrs = Vec::new();
            if self.eat(TokenKind::LBrace) {
                loop {
                    attrs.push(self.ident(TokenKind::Word, "an attribute word")?);
                    if !self.eat(TokenKind::Comma) {
                        break;
                    }
                }
                self.expect(TokenKind::RBrace, "`}`")?;
            }
            out.push(ast::ArgDecl { name, ty, attrs });
            if !self.eat(TokenKind::Comma) {
                self.expect(TokenKind::RParen, "`,` or `)`")?;
                return Ok(out);
            }
        }
    }

    /// `{ ops }`, with the nesting limit.
    pub(super) fn region(&mut self) -> PResult<Region> {
        let open = self.expect(TokenKind::LBrace, "`{`")?;
        if self.depth >= MAX_DEPTH {
            self.fatal = true;
            return Err(self.error(
                open.span,
                codes::TOO_DEEP,
                format!("regions nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let ops = self.ops();
        self.depth -= 1;
        let ops = ops?;
        Ok(Region {
            ops,
            span: Span::new(open.span.start, self.prev_end()),
        })
    }

    /// Ops up to and including the closing `}`.
    fn ops(&mut self) -> PResult<Vec<Op>> {
        let mut ops = Vec::with_capacity(8);
        loop {
            if self.fatal {
                return Err(Stop);
            }
            match self.peek().kind {
                TokenKind::RBrace => {
                    self.bump();
                    return Ok(ops);
                }
                TokenKind::Eof => return Err(self.unexpected("`}`")),
                _ => {}
            }
            let before = self.pos;
            match self.op() {
                Ok(op) => ops.push(op),
                Err(Stop) if self.fatal => return Err(Stop),
                Err(Stop) => self.recover_op(before),
            }
        }
    }

    /// Skip the rest of a bad op: tokens on its last line and inside any
    /// braces it opened, stopping before a `}` that closes our region.
    fn recover_op(&mut self, before: usize) {
        if self.pos == before {
            self.bump();
        }
        let mut line = self
            .pos
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map_or(0, |t| t.line);
        let mut depth = 0usize;
        loop {
            let t = self.peek();
            match t.kind {
                TokenKind::Eof => return,
                TokenKind::RBrace if depth == 0 => return,
                TokenKind::RBrace => {
                    depth -= 1;
                    line = t.line;
                }
                TokenKind::LBrace => depth += 1,
                _ if depth == 0 && t.line != line => return,
                _ => {}
            }
            self.bump();
        }
    }

    fn op(&mut self) -> PResult<Op> {
        let start = self.peek().span.start;
        let mut results = Vec::new();
        if self.at(TokenKind::Value) {
            loop {
                results.push(self.value()?);
                if !self.eat(TokenKind::Comma) {
                    break;
                }
            }
            self.expect(TokenKind::Equals, "`=`")?;
        }
        let name = self.ident(TokenKind::Word, "an op name")?;
        let tag = if self.eat(TokenKind::Lt) {
            let tag = self.ident(TokenKind::Word, "a word")?;
            self.expect(TokenKind::Gt, "`>`")?;
            Some(tag)
        } else {
            None
        };
        let Some(kind) = ast::form_of(&name.text) else {
            return Err(self.error(
                name.span,
                codes::UNKNOWN_OP,
                format!("unknown op `{}`", name.text),
            ));
        };
        let form = self.form(kind)?;
        Ok(Op {
            results,
            name,
            tag,
            form,
            span: Span::new(start, self.prev_end()),
        })
    }
}
