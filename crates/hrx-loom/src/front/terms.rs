//! Parsing of the leaves of the grammar: types and literals.
//!
//! `vector<4xf32>` and `view<[%n]x16xf32>` are read character by character
//! from the `<` to the matching `>` (the token stream splits `4xf32` awkwardly),
//! then the token cursor resumes after the `>`. Every number goes through
//! checked conversions.

use super::ast::{DimExpr, Ident, LiteralTok, TypeExpr, TypeKind};
use super::lexer::{TokenKind, is_name_char};
use super::parser::{PResult, Parser};
use super::span::Span;
use crate::diag::codes;
use crate::ir::Literal;

impl Parser<'_> {
    /// A type: a name, `vector<..>`, `view<..>` or `coopmat<..>`.
    pub(super) fn parse_type(&mut self) -> PResult<TypeExpr> {
        let t = self.expect(TokenKind::Word, "a type")?;
        let name = self.text(t);
        let lt = self.peek();
        if !matches!(name, "vector" | "view" | "coopmat")
            || lt.kind != TokenKind::Lt
            || lt.span.start != t.span.end
        {
            return Ok(TypeExpr {
                kind: TypeKind::Named(name.to_string()),
                span: t.span,
            });
        }
        let mut scan = Scan {
            src: self.src.as_bytes(),
            at: lt.span.end,
        };
        let parsed = match name {
            "vector" => scan.vector(),
            "coopmat" => scan.coopmat(),
            _ => scan.view(),
        };
        match parsed {
            Ok(kind) => {
                let end = scan.at;
                while self.peek().kind != TokenKind::Eof && self.peek().span.start < end {
                    self.bump();
                }
                Ok(TypeExpr {
                    kind,
                    span: Span::new(t.span.start, end),
                })
            }
            Err((span, code, msg)) => {
                // Resume after the type's tokens on this line, if any.
                while !matches!(self.peek().kind, TokenKind::Eof | TokenKind::Gt)
                    && self.peek().line == t.line
                {
                    self.bump();
                }
                self.eat(TokenKind::Gt);
                Err(self.error(span, code, msg))
            }
        }
    }

    /// A literal: `-`? number, `true`, `false`, `inf`, `nan`.
    pub(super) fn literal(&mut self) -> PResult<LiteralTok> {
        let minus = self.at(TokenKind::Minus).then(|| self.bump().span);
        let t = self.peek();
        let text = self.text(t);
        let negative = minus.is_some();
        let span = minus.map_or(t.span, |m| m.to(t.span));
        let value = match (t.kind, text) {
            (TokenKind::Number, _) => match number_value(text, negative) {
                Ok(v) => v,
                Err(msg) => {
                    self.bump();
                    return Err(self.error(span, codes::BAD_LITERAL, msg));
                }
            },
            (TokenKind::Word, "true") if !negative => Literal::Bool(true),
            (TokenKind::Word, "false") if !negative => Literal::Bool(false),
            (TokenKind::Word, "inf") => Literal::Float(if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }),
            (TokenKind::Word, "nan") if !negative => Literal::Float(f64::NAN),
            _ => return Err(self.unexpected("a literal")),
        };
        self.bump();
        Ok(LiteralTok {
            text: format!("{}{text}", if negative { "-" } else { "" }),
            value,
            span,
        })
    }
}

/// The value of a number token (already lexed: hex, or decimal with an
/// optional fraction and exponent).
fn number_value(text: &str, negative: bool) -> Result<Literal, String> {
    let hex = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"));
    let is_float = hex.is_none() && text.contains(['.', 'e', 'E']);
    if is_float {
        let v: f64 = text
            .parse()
            .map_err(|_| format!("malformed float literal `{text}`"))?;
        if !v.is_finite() {
            return Err(format!("float literal `{text}` is out of range"));
        }
        return Ok(Literal::Float(if negative { -v } else { v }));
    }
    let magnitude = match hex {
        Some(digits) => u64::from_str_radix(digits, 16),
        None => text.parse::<u64>(),
    }
    .map_err(|_| format!("integer literal `{text}` is out of range"))?;
    let signed = if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    signed
        .map(Literal::Int)
        .ok_or_else(|| format!("integer literal `{text}` is out of range"))
}

type ScanError = (Span, &'static str, String);

/// A character cursor over the inside of `<..>`.
struct Scan<'a> {
    src: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn fail<T>(&self, msg: &str) -> Result<T, ScanError> {
        let end = (self.at + 1).min(self.src.len());
        Err((
            Span::new(self.at, end),
            codes::UNEXPECTED_TOKEN,
            msg.to_string(),
        ))
    }

    fn expect(&mut self, c: u8, msg: &str) -> Result<(), ScanError> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            self.fail(msg)
        }
    }

    fn number(&mut self) -> Result<(u64, Span), ScanError> {
        self.skip_ws();
        let start = self.at;
        let mut value: Option<u64> = Some(0);
        while let Some(c @ b'0'..=b'9') = self.peek() {
            value = value
                .and_then(|v| v.checked_mul(10))
                .and_then(|v| v.checked_add(u64::from(c - b'0')));
            self.at += 1;
        }
        let span = Span::new(start, self.at);
        match value {
            _ if self.at == start => self.fail("expected a number"),
            Some(v) => Ok((v, span)),
            None => Err((span, codes::BAD_LITERAL, "dimension is out of range".into())),
        }
    }

    fn elem(&mut self) -> Result<TypeExpr, ScanError> {
        self.skip_ws();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.at += 1;
        }
        if self.at == start {
            return self.fail("expected an element type");
        }
        let name = String::from_utf8_lossy(&self.src[start..self.at]).into_owned();
        Ok(TypeExpr {
            kind: TypeKind::Named(name),
            span: Span::new(start, self.at),
        })
    }

    fn vector(&mut self) -> Result<TypeKind, ScanError> {
        let (len, _) = self.number()?;
        self.expect(b'x', "expected `x` after the vector length")?;
        let elem = Box::new(self.elem()?);
        self.expect(b'>', "expected `>` to close the vector type")?;
        Ok(TypeKind::Vector { len, elem })
    }

    /// `rows x cols x elem, role>`.
    fn coopmat(&mut self) -> Result<TypeKind, ScanError> {
        let (rows, _) = self.number()?;
        self.expect(b'x', "expected `x` after the row count")?;
        let (cols, _) = self.number()?;
        self.expect(b'x', "expected `x` after the column count")?;
        let elem = Box::new(self.elem()?);
        self.expect(b',', "expected `,` and a role (a, b or c)")?;
        let role = self.elem()?;
        self.expect(b'>', "expected `>` to close the coopmat type")?;
        let TypeKind::Named(text) = role.kind else {
            return self.fail("expected a role");
        };
        Ok(TypeKind::CoopMat {
            rows,
            cols,
            elem,
            role: Ident {
                text,
                span: role.span,
            },
        })
    }

    fn view(&mut self) -> Result<TypeKind, ScanError> {
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'[') => {
                    self.at += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'%') {
                        let start = self.at;
                        self.at += 1;
                        while self.peek().is_some_and(is_name_char) {
                            self.at += 1;
                        }
                        if self.at == start + 1 {
                            return self.fail("expected a name after `%`");
                        }
                        let text = String::from_utf8_lossy(&self.src[start + 1..self.at]);
                        dims.push(DimExpr::Dynamic(Ident {
                            text: text.into_owned(),
                            span: Span::new(start, self.at),
                        }));
                    } else {
                        let (v, span) = self.number()?;
                        dims.push(DimExpr::Static(v, span));
                    }
                    self.expect(b']', "expected `]`")?;
                }
                Some(b'0'..=b'9') => {
                    let (v, span) = self.number()?;
                    dims.push(DimExpr::Static(v, span));
                }
                _ if dims.is_empty() => return self.fail("a view needs at least one dimension"),
                _ => {
                    let elem = Box::new(self.elem()?);
                    self.expect(b'>', "expected `>` to close the view type")?;
                    return Ok(TypeKind::View { dims, elem });
                }
            }
            self.expect(b'x', "expected `x` after a dimension")?;
        }
    }
}
