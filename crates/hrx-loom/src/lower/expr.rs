//! Arithmetic: `index.*` and `scalar.*` ops, constants and conversions.
//!
//! Signedness lives in loom's ops, not its types (`scalar.divsi` may apply
//! to a `u32`), while naga picks signed or unsigned instructions from the
//! operand type; so operands are bitcast to the op's signedness and the
//! result back to the value's type.

use super::{E_CONSTANT_OPERAND, Lowerer, R, Val, types};
use crate::front::span::Span;
use crate::ir::{
    ConvertOp, FloatPredicate, IndexBinary, IntPredicate, Literal, Op, OpKind, ScalarBinary,
    ScalarUnary, Type, ValueId,
};
use naga::{BinaryOperator as B, Expression, Handle, MathFunction as M, ScalarKind};

type H = Handle<Expression>;

impl Lowerer<'_> {
    /// A `u32` literal.
    pub(crate) fn lit_u32(&mut self, v: u32) -> H {
        self.fb.expr(Expression::Literal(naga::Literal::U32(v)))
    }

    pub(crate) fn binary(&mut self, op: B, left: H, right: H) -> H {
        self.fb.expr(Expression::Binary { op, left, right })
    }

    pub(crate) fn math(&mut self, fun: M, args: &[H]) -> H {
        self.fb.expr(Expression::Math {
            fun,
            arg: args[0],
            arg1: args.get(1).copied(),
            arg2: args.get(2).copied(),
            arg3: None,
        })
    }

    /// Reinterpret bits as `kind` (same width).
    pub(crate) fn bitcast(&mut self, expr: H, kind: ScalarKind) -> H {
        self.fb.expr(Expression::As {
            expr,
            kind,
            convert: None,
        })
    }

    /// Bitcast `e` (of scalar kind `from`) to `to` when they differ.
    fn as_kind(&mut self, e: H, from: ScalarKind, to: ScalarKind) -> H {
        if from == to { e } else { self.bitcast(e, to) }
    }

    /// Lower every op that is not control flow.
    pub(super) fn op(&mut self, op: &Op) -> R<()> {
        let span = op.span;
        let value = match &op.kind {
            OpKind::IndexConstant(c) => self.lit_u32(*c),
            OpKind::ScalarConstant(lit) => {
                let r = self.result(&op.results, span)?;
                let t = self.ty_of(r, span)?;
                self.constant(*lit, &t, span)?
            }
            OpKind::IndexBinary(b @ (IndexBinary::Div | IndexBinary::Rem), _, y)
                if self.known_value(*y) == Some(0) =>
            {
                let name = if *b == IndexBinary::Div { "div" } else { "rem" };
                let msg = format!("index.{name} by a constant zero");
                return Err(self.fail(span, E_CONSTANT_OPERAND, msg));
            }
            OpKind::IndexBinary(b, x, y) => {
                let (x, y) = (self.val(*x, span)?, self.val(*y, span)?);
                match b {
                    IndexBinary::Add => self.binary(B::Add, x, y),
                    IndexBinary::Sub => self.binary(B::Subtract, x, y),
                    IndexBinary::Mul => self.binary(B::Multiply, x, y),
                    IndexBinary::Div => self.binary(B::Divide, x, y),
                    IndexBinary::Rem => self.binary(B::Modulo, x, y),
                    IndexBinary::Min => self.math(M::Min, &[x, y]),
                    IndexBinary::Max => self.math(M::Max, &[x, y]),
                }
            }
            OpKind::IndexMadd(a, b, c) => {
                let (a, b, c) = (
                    self.val(*a, span)?,
                    self.val(*b, span)?,
                    self.val(*c, span)?,
                );
                let p = self.binary(B::Multiply, a, b);
                self.binary(B::Add, p, c)
            }
            OpKind::IndexCmp(p, x, y) | OpKind::CmpI(p, x, y) => {
                let kind = self.kind_of(*x, span)?;
                let (x, y) = (self.val(*x, span)?, self.val(*y, span)?);
                self.int_compare(*p, kind, x, y)
            }
            OpKind::IndexCast { value, to } => {
                let from = self.kind_of(*value, span)?;
                let e = self.val(*value, span)?;
                let to = types::value_scalar(to).map_or(from, |s| s.kind);
                self.as_kind(e, from, to)
            }
            OpKind::ScalarBinary(b, _, y) if let Some(why) = self.bad_constant_operand(*b, *y) => {
                return Err(self.fail(span, E_CONSTANT_OPERAND, why));
            }
            OpKind::ScalarBinary(b, x, y) => {
                let kind = self.kind_of(*x, span)?;
                let (x, y) = (self.val(*x, span)?, self.val(*y, span)?);
                self.scalar_binary(*b, kind, x, y)
            }
            OpKind::ScalarFma(a, b, c) => {
                let (a, b, c) = (
                    self.val(*a, span)?,
                    self.val(*b, span)?,
                    self.val(*c, span)?,
                );
                self.math(M::Fma, &[a, b, c])
            }
            OpKind::ScalarUnary(u, x) => {
                let x = self.val(*x, span)?;
                match u {
                    ScalarUnary::NegF => self.fb.expr(Expression::Unary {
                        op: naga::UnaryOperator::Negate,
                        expr: x,
                    }),
                    ScalarUnary::AbsF => self.math(M::Abs, &[x]),
                    ScalarUnary::ExpF => self.math(M::Exp, &[x]),
                    ScalarUnary::LogF => self.math(M::Log, &[x]),
                    ScalarUnary::SqrtF => self.math(M::Sqrt, &[x]),
                    ScalarUnary::RsqrtF => self.math(M::InverseSqrt, &[x]),
                    ScalarUnary::TanhF => self.math(M::Tanh, &[x]),
                }
            }
            OpKind::CmpF(p, x, y) => {
                let (x, y) = (self.val(*x, span)?, self.val(*y, span)?);
                let op = match p {
                    FloatPredicate::Oeq => B::Equal,
                    // naga writes float `!=` as OpFOrdNotEqual: ordered.
                    FloatPredicate::One => B::NotEqual,
                    FloatPredicate::Olt => B::Less,
                    FloatPredicate::Ole => B::LessEqual,
                    FloatPredicate::Ogt => B::Greater,
                    FloatPredicate::Oge => B::GreaterEqual,
                };
                self.binary(op, x, y)
            }
            OpKind::Select(c, a, b) => {
                let rt = self.ty_of(*a, span)?;
                let (mut condition, accept, reject) = (
                    self.val(*c, span)?,
                    self.val(*a, span)?,
                    self.val(*b, span)?,
                );
                // SPIR-V 1.3 OpSelect needs a vector condition for vectors.
                if let Type::Vector { len, .. } = rt
                    && let Some(size) = types::vector_size(len)
                {
                    condition = self.fb.expr(Expression::Splat {
                        size,
                        value: condition,
                    });
                }
                self.fb.expr(Expression::Select {
                    condition,
                    accept,
                    reject,
                })
            }
            OpKind::Convert { op: c, value, to } => {
                let from = self.kind_of(*value, span)?;
                let e = self.val(*value, span)?;
                self.convert(*c, from, e, to, span)?
            }
            OpKind::VectorSplat(s) => {
                let r = self.result(&op.results, span)?;
                let Some(size) = (match self.ty_of(r, span)? {
                    Type::Vector { len, .. } => types::vector_size(len),
                    _ => None,
                }) else {
                    return Err(self.bug(span, "vector.splat to a non-vector type"));
                };
                let value = self.val(*s, span)?;
                self.fb.expr(Expression::Splat { size, value })
            }
            OpKind::VectorExtract(v, lane)
                if let (Some(at), Type::Vector { len, .. }) =
                    (self.known_value(*lane), self.ty_of(*v, span)?)
                    && at >= u32::from(len) =>
            {
                let msg = format!("vector.extract of lane {at} from a vector of {len}");
                return Err(self.fail(span, E_CONSTANT_OPERAND, msg));
            }
            OpKind::VectorExtract(v, lane) => {
                let (base, index) = (self.val(*v, span)?, self.val(*lane, span)?);
                self.fb.expr(Expression::Access { base, index })
            }
            OpKind::UnpackF16(w) => {
                let w = self.val(*w, span)?;
                self.math(M::Unpack2x16float, &[w])
            }
            OpKind::ConfigValue(key) => {
                return Err(self.bug(span, format!("config.value @{key} was not specialised")));
            }
            _ => return self.other_op(op),
        };
        let r = self.result(&op.results, span)?;
        self.set(r, Val::Expr(value));
        Ok(())
    }

    /// The naga scalar kind of a value (lane kind for vectors).
    pub(crate) fn kind_of(&mut self, id: crate::ir::ValueId, span: Span) -> R<ScalarKind> {
        let t = self.ty_of(id, span)?;
        match types::value_scalar(&t) {
            Some(s) => Ok(s.kind),
            None => Err(self.bug(span, format!("%{id:?} is not a number"))),
        }
    }

    fn int_compare(&mut self, p: IntPredicate, kind: ScalarKind, x: H, y: H) -> H {
        use IntPredicate as P;
        let (op, want) = match p {
            P::Eq => (B::Equal, kind),
            P::Ne => (B::NotEqual, kind),
            P::Ult => (B::Less, ScalarKind::Uint),
            P::Ule => (B::LessEqual, ScalarKind::Uint),
            P::Ugt => (B::Greater, ScalarKind::Uint),
            P::Uge => (B::GreaterEqual, ScalarKind::Uint),
            P::Slt => (B::Less, ScalarKind::Sint),
            P::Sle => (B::LessEqual, ScalarKind::Sint),
            P::Sgt => (B::Greater, ScalarKind::Sint),
            P::Sge => (B::GreaterEqual, ScalarKind::Sint),
        };
        let want = if kind == ScalarKind::Bool { kind } else { want };
        let (x, y) = (self.as_kind(x, kind, want), self.as_kind(y, kind, want));
        self.binary(op, x, y)
    }

    /// Why the right operand `y` of `b`, known at compile time, is out of
    /// the op's domain (naga would reject the module without a position).
    fn bad_constant_operand(&self, b: ScalarBinary, y: ValueId) -> Option<String> {
        use ScalarBinary as S;
        let value = self.known_value(y)?;
        match b {
            S::DivSI | S::DivUI | S::RemSI | S::RemUI if value == 0 => {
                Some("integer division or remainder by a constant zero".to_string())
            }
            // Every loom integer is 32 bits wide.
            S::ShlI | S::ShrSI | S::ShrUI if value >= 32 => Some(format!(
                "shift by a constant {} (at least the 32-bit width)",
                value as i32
            )),
            _ => None,
        }
    }

    fn scalar_binary(&mut self, b: ScalarBinary, kind: ScalarKind, x: H, y: H) -> H {
        use ScalarBinary as S;
        use ScalarKind::{Sint, Uint};
        // (operator, signedness the operands need); `None` = as they are.
        let (op, need) = match b {
            S::AddF | S::AddI => (B::Add, None),
            S::SubF | S::SubI => (B::Subtract, None),
            S::MulF | S::MulI => (B::Multiply, None),
            S::DivF => (B::Divide, None),
            S::MaxNumF => return self.math(M::Max, &[x, y]),
            S::MinNumF => return self.math(M::Min, &[x, y]),
            S::DivSI => (B::Divide, Some(Sint)),
            S::DivUI => (B::Divide, Some(Uint)),
            S::RemSI => (B::Modulo, Some(Sint)),
            S::RemUI => (B::Modulo, Some(Uint)),
            S::AndI if kind == ScalarKind::Bool => (B::LogicalAnd, None),
            S::OrI if kind == ScalarKind::Bool => (B::LogicalOr, None),
            S::XorI if kind == ScalarKind::Bool => (B::NotEqual, None),
            S::AndI => (B::And, None),
            S::OrI => (B::InclusiveOr, None),
            S::XorI => (B::ExclusiveOr, None),
            S::ShlI => (B::ShiftLeft, None),
            S::ShrSI => (B::ShiftRight, Some(Sint)),
            S::ShrUI => (B::ShiftRight, Some(Uint)),
        };
        let shift = matches!(b, S::ShlI | S::ShrSI | S::ShrUI);
        let want = need.unwrap_or(kind);
        let left = self.as_kind(x, kind, want);
        // naga shifts by an unsigned amount; other ops need equal kinds.
        let right = if shift {
            self.as_kind(y, kind, Uint)
        } else {
            self.as_kind(y, kind, want)
        };
        let e = self.binary(op, left, right);
        self.as_kind(e, want, kind)
    }

    fn convert(&mut self, c: ConvertOp, from: ScalarKind, e: H, to: &Type, span: Span) -> R<H> {
        let Some(target) = types::value_scalar(to) else {
            return Err(self.bug(span, "conversion to a non-numeric type"));
        };
        let numeric = |this: &mut Self, e: H, kind: ScalarKind, width: u8| {
            this.fb.expr(Expression::As {
                expr: e,
                kind,
                convert: Some(width),
            })
        };
        Ok(match c {
            ConvertOp::Bitcast => self.bitcast(e, target.kind),
            ConvertOp::ExtF | ConvertOp::TruncF => {
                numeric(self, e, ScalarKind::Float, target.width)
            }
            ConvertOp::SIToFP | ConvertOp::UIToFP => {
                let want = if c == ConvertOp::SIToFP {
                    ScalarKind::Sint
                } else {
                    ScalarKind::Uint
                };
                let e = self.as_kind(e, from, want);
                numeric(self, e, ScalarKind::Float, target.width)
            }
            ConvertOp::FPToSI | ConvertOp::FPToUI => {
                // naga saturates out-of-range values (and maps NaN to 0).
                let want = if c == ConvertOp::FPToSI {
                    ScalarKind::Sint
                } else {
                    ScalarKind::Uint
                };
                let v = numeric(self, e, want, 4);
                self.as_kind(v, want, target.kind)
            }
        })
    }

    /// A literal of loom type `t` (splatted for vectors). Non-finite floats,
    /// which naga literals cannot hold, are built from their bits; f16
    /// constants are converted from f32 (exact for every f16 value).
    pub(crate) fn constant(&mut self, lit: Literal, t: &Type, span: Span) -> R<H> {
        let Some(s) = types::value_scalar(t) else {
            return Err(self.bug(span, "constant of a non-numeric type"));
        };
        let scalar = match (lit, s.kind) {
            (Literal::Bool(b), ScalarKind::Bool) => {
                self.fb.expr(Expression::Literal(naga::Literal::Bool(b)))
            }
            (Literal::Int(i), ScalarKind::Sint) => self
                .fb
                .expr(Expression::Literal(naga::Literal::I32(i as i32))),
            (Literal::Int(i), ScalarKind::Uint) => self.lit_u32(i as u32),
            (Literal::Bool(b), ScalarKind::Uint) => self.lit_u32(u32::from(b)),
            (Literal::Int(_) | Literal::Float(_), ScalarKind::Float) => {
                let f = match lit {
                    Literal::Int(i) => i as f32,
                    Literal::Float(f) => f as f32,
                    Literal::Bool(_) => 0.0,
                };
                let e = if f.is_finite() {
                    self.fb.expr(Expression::Literal(naga::Literal::F32(f)))
                } else {
                    let bits = self.lit_u32(f.to_bits());
                    self.bitcast(bits, ScalarKind::Float)
                };
                if s.width == 2 {
                    self.fb.expr(Expression::As {
                        expr: e,
                        kind: ScalarKind::Float,
                        convert: Some(2),
                    })
                } else {
                    e
                }
            }
            _ => return Err(self.bug(span, format!("literal {lit:?} does not fit {t:?}"))),
        };
        Ok(match t {
            Type::Vector { len, .. } => match types::vector_size(*len) {
                Some(size) => self.fb.expr(Expression::Splat {
                    size,
                    value: scalar,
                }),
                None => scalar,
            },
            _ => scalar,
        })
    }
}
