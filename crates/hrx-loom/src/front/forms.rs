//! The parsing of each op's syntax family ([`FormKind`]) after its name
//! and tag.

use super::ast::{self, Form, FormKind, Ident, IterArg};
use super::lexer::TokenKind;
use super::parser::{PResult, Parser};

impl Parser<'_> {
    fn types_after_colon(&mut self) -> PResult<Vec<ast::TypeExpr>> {
        let mut types = Vec::new();
        if self.eat(TokenKind::Colon) {
            loop {
                types.push(self.parse_type()?);
                if !self.eat(TokenKind::Comma) {
                    break;
                }
            }
        }
        Ok(types)
    }

    fn arrow_type(&mut self) -> PResult<Option<ast::TypeExpr>> {
        if self.eat(TokenKind::Arrow) {
            Ok(Some(self.parse_type()?))
        } else {
            Ok(None)
        }
    }

    /// `-> (t, ...)` result lists of scf ops.
    fn result_list(&mut self) -> PResult<Vec<ast::TypeExpr>> {
        let mut types = Vec::new();
        if self.eat(TokenKind::Arrow) {
            self.expect(TokenKind::LParen, "`(`")?;
            if !self.eat(TokenKind::RParen) {
                loop {
                    types.push(self.parse_type()?);
                    if !self.eat(TokenKind::Comma) {
                        break;
                    }
                }
                self.expect(TokenKind::RParen, "`,` or `)`")?;
            }
        }
        Ok(types)
    }

    pub(super) fn form(&mut self, kind: FormKind) -> PResult<Form> {
        Ok(match kind {
            FormKind::Constant => {
                let value = self.literal()?;
                self.expect(TokenKind::Colon, "`:`")?;
                let ty = self.parse_type()?;
                Form::Constant { value, ty }
            }
            FormKind::Operands => {
                let operands = self.values()?;
                let types = self.types_after_colon()?;
                let to = self.arrow_type()?;
                Form::Operands {
                    operands,
                    types,
                    to,
                }
            }
            FormKind::Compare => {
                let predicate = self.ident(TokenKind::Word, "a predicate")?;
                self.expect(TokenKind::Comma, "`,`")?;
                let operands = self.values()?;
                self.expect(TokenKind::Colon, "`:`")?;
                let ty = self.parse_type()?;
                Form::Compare {
                    predicate,
                    operands,
                    ty,
                }
            }
            FormKind::Access => {
                let first = self.value()?;
                let (value, base) = if self.at(TokenKind::LBracket) {
                    (None, first)
                } else {
                    self.expect(TokenKind::Comma, "`,` or `[`")?;
                    (Some(first), self.value()?)
                };
                self.expect(TokenKind::LBracket, "`[`")?;
                let indices = self.values()?;
                self.expect(TokenKind::RBracket, "`,` or `]`")?;
                let types = self.types_after_colon()?;
                let to = self.arrow_type()?;
                Form::Access {
                    value,
                    base,
                    indices,
                    types,
                    to,
                }
            }
            FormKind::Alloca => {
                self.expect_word("align")?;
                self.expect(TokenKind::LParen, "`(`")?;
                let align = self.literal()?;
                self.expect(TokenKind::RParen, "`)`")?;
                let bytes = self.value()?;
                self.expect(TokenKind::Colon, "`:`")?;
                let ty = self.parse_type()?;
                Form::Alloca { align, bytes, ty }
            }
            FormKind::Barrier => {
                let mut attrs = Vec::new();
                while self.at(TokenKind::Word) && self.peek_at(1).kind == TokenKind::LParen {
                    let name = self.ident(TokenKind::Word, "an attribute")?;
                    self.bump();
                    let arg = self.ident(TokenKind::Word, "a word")?;
                    self.expect(TokenKind::RParen, "`)`")?;
                    attrs.push((name, arg));
                }
                Form::Barrier { attrs }
            }
            FormKind::ConfigValue => {
                let key = self.ident(TokenKind::Symbol, "a config `@key`")?;
                self.expect(TokenKind::Colon, "`:`")?;
                let ty = self.parse_type()?;
                Form::ConfigValue { key, ty }
            }
            FormKind::LaunchConfig => {
                self.expect_word("workgroups")?;
                let workgroups = self.paren_values()?;
                self.expect_word("workgroup_size")?;
                let workgroup_size = self.paren_values()?;
                self.expect(TokenKind::Colon, "`:`")?;
                let ty = self.parse_type()?;
                Form::LaunchConfig {
                    workgroups,
                    workgroup_size,
                    ty,
                }
            }
            FormKind::Bare => Form::Bare,
            FormKind::If => {
                let cond = self.value()?;
                let results = self.result_list()?;
                let then = self.region()?;
                let otherwise = if self.at_word("else") {
                    self.bump();
                    Some(self.region()?)
                } else {
                    None
                };
                Form::If {
                    cond,
                    results,
                    then,
                    otherwise,
                }
            }
            FormKind::For => self.for_form()?,
        })
    }

    fn paren_values(&mut self) -> PResult<Vec<Ident>> {
        self.expect(TokenKind::LParen, "`(`")?;
        let values = self.values()?;
        self.expect(TokenKind::RParen, "`,` or `)`")?;
        Ok(values)
    }

    fn for_form(&mut self) -> PResult<Form> {
        let iv = self.value()?;
        self.expect(TokenKind::Equals, "`=`")?;
        self.expect(TokenKind::LBracket, "`[`")?;
        let lower = self.value()?;
        self.expect_word("to")?;
        let upper = self.value()?;
        self.expect_word("step")?;
        let step = self.value()?;
        self.expect(TokenKind::RBracket, "`]`")?;
        let mut iter_args = Vec::new();
        if self.eat(TokenKind::LParen) && !self.eat(TokenKind::RParen) {
            loop {
                let name = self.value()?;
                self.expect(TokenKind::Equals, "`=`")?;
                let init = self.value()?;
                self.expect(TokenKind::Colon, "`:`")?;
                let ty = self.parse_type()?;
                iter_args.push(IterArg { name, init, ty });
                if !self.eat(TokenKind::Comma) {
                    break;
                }
            }
            self.expect(TokenKind::RParen, "`,` or `)`")?;
        }
        let results = self.result_list()?;
        let body = self.region()?;
        Ok(Form::For {
            iv,
            lower,
            upper,
            step,
            iter_args,
            results,
            body,
        })
    }
}
