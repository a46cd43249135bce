//! Rules for constants, comparisons, index and scalar arithmetic,
//! conversions, coordinates and subgroup operations. No implicit casts:
//! every operand must have exactly the annotated type.

use super::builder::Builder;
use super::ops::Built;
use super::words;
use crate::diag::codes;
use crate::front::ast::{self, Ident, LiteralTok, TypeExpr};
use crate::ir::{ConvertOp, Literal, OpKind, Scalar, Type, ValueId};

/// Check a literal against its type; ints and bools normalised.
pub(super) fn check_literal(lit: Literal, ty: &Type) -> Result<Literal, String> {
    let int_in = |lo: i64, hi: i64| match lit {
        Literal::Int(v) if (lo..=hi).contains(&v) => Ok(Literal::Int(v)),
        Literal::Int(v) => Err(format!("{v} does not fit in the type")),
        _ => Err("an integer literal is required".to_string()),
    };
    let float_max = |max: f64| match lit {
        Literal::Float(f) if f.is_nan() || f.is_infinite() || f.abs() <= max => {
            Ok(Literal::Float(f))
        }
        Literal::Float(f) => Err(format!("{f} is out of range for the type")),
        Literal::Int(v) if (v as f64).abs() <= max => Ok(Literal::Float(v as f64)),
        Literal::Int(v) => Err(format!("{v} is out of range for the type")),
        Literal::Bool(_) => Err("a number is required".to_string()),
    };
    match ty {
        Type::I1 => match lit {
            Literal::Bool(b) => Ok(Literal::Bool(b)),
            Literal::Int(v @ (0 | 1)) => Ok(Literal::Bool(v == 1)),
            _ => Err("an i1 literal is `true` or `false`".to_string()),
        },
        Type::I32 => int_in(i64::from(i32::MIN), i64::from(i32::MAX)),
        Type::U32 | Type::Index | Type::Offset => int_in(0, i64::from(u32::MAX)),
        Type::F32 => float_max(f64::from(f32::MAX)),
        Type::F16 => float_max(65504.0),
        _ => Err("no literal has this type".to_string()),
    }
}

fn all_some(ids: Vec<Option<ValueId>>) -> Option<Vec<ValueId>> {
    ids.into_iter().collect()
}

/// (lanes, element) of a scalar or vector type.
fn shape(t: &Type) -> Option<(u8, Scalar)> {
    match t {
        Type::Vector { len, elem } => Some((*len, *elem)),
        other => other.scalar().map(|s| (1, s)),
    }
}

fn convert_ok(op: ConvertOp, from: &Type, to: &Type) -> bool {
    let (Some((fl, fe)), Some((tl, te))) = (shape(from), shape(to)) else {
        return false;
    };
    let bits32 = |s: Scalar| matches!(s, Scalar::I32 | Scalar::U32 | Scalar::F32);
    fl == tl
        && match op {
            ConvertOp::ExtF => fe == Scalar::F16 && te == Scalar::F32,
            ConvertOp::TruncF => fe == Scalar::F32 && te == Scalar::F16,
            ConvertOp::SIToFP => fe == Scalar::I32 && te.is_float(),
            ConvertOp::UIToFP => fe == Scalar::U32 && te.is_float(),
            ConvertOp::FPToSI => fe.is_float() && te == Scalar::I32,
            ConvertOp::FPToUI => fe.is_float() && te == Scalar::U32,
            ConvertOp::Bitcast => bits32(fe) && bits32(te),
        }
}

impl Builder<'_> {
    pub(super) fn constant(
        &mut self,
        op: &ast::Op,
        value: &LiteralTok,
        ty: &TypeExpr,
    ) -> Option<Built> {
        let ty = self.resolve_type(ty)?;
        let is_index = op.name.text == "index.constant";
        if is_index && !matches!(ty, Type::Index | Type::Offset) {
            self.unsupported(op, &ty, "index or offset");
            return None;
        }
        if !is_index && !matches!(ty, Type::I1 | Type::I32 | Type::U32 | Type::F32 | Type::F16) {
            self.unsupported(op, &ty, "i1, i32, u32, f32 or f16");
            return None;
        }
        match check_literal(value.value, &ty) {
            Ok(Literal::Int(v)) if is_index => {
                Built::new(OpKind::IndexConstant(v as u32), vec![Some(ty)])
            }
            Ok(lit) => Built::new(OpKind::ScalarConstant(lit), vec![Some(ty)]),
            Err(why) => {
                let msg = format!(
                    "literal `{}` is not a valid {}: {why}",
                    value.text,
                    self.show(&ty)
                );
                self.error(value.span, codes::LITERAL_TYPE, msg);
                None
            }
        }
    }

    pub(super) fn compare(
        &mut self,
        op: &ast::Op,
        pred: &Ident,
        operands: &[Ident],
        ty: &TypeExpr,
    ) -> Option<Built> {
        let ty = self.resolve_type(ty)?;
        let ids = self.operands(op, operands, 2)?;
        self.all_typed(operands, &ids, &ty);
        let name = op.name.text.as_str();
        let (ok, expected) = match name {
            "index.cmp" => (matches!(ty, Type::Index | Type::Offset), "index or offset"),
            "scalar.cmpi" => (matches!(ty, Type::I32 | Type::U32), "i32 or u32"),
            _ => (matches!(ty, Type::F32 | Type::F16), "f32 or f16"),
        };
        if !ok {
            self.unsupported(op, &ty, expected);
            return None;
        }
        let kind = if name == "scalar.cmpf" {
            let Some(p) = words::float_predicate(&pred.text) else {
                return self.unknown_word(pred, "float predicate", words::FLOAT_PREDICATES);
            };
            let ids = all_some(ids)?;
            OpKind::CmpF(p, ids[0], ids[1])
        } else {
            let Some(p) = words::int_predicate(&pred.text) else {
                return self.unknown_word(pred, "integer predicate", words::INT_PREDICATES);
            };
            let ids = all_some(ids)?;
            if name == "index.cmp" {
                OpKind::IndexCmp(p, ids[0], ids[1])
            } else {
                OpKind::CmpI(p, ids[0], ids[1])
            }
        };
        Built::new(kind, vec![Some(Type::I1)])
    }

    pub(super) fn unknown_word<T>(&mut self, word: &Ident, what: &str, known: &str) -> Option<T> {
        self.error(
            word.span,
            codes::UNKNOWN_WORD,
            format!("unknown {what} `{}` (one of: {known})", word.text),
        );
        None
    }

    /// `%a, %b : T`: n operands all of type T, where T passes `accept`.
    fn uniform_op(
        &mut self,
        op: &ast::Op,
        operands: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
        n: usize,
        accept: (fn(&Type) -> bool, &str),
    ) -> Option<(Type, Vec<ValueId>)> {
        let ty = self.one_type(op, types, to)?;
        if !accept.0(&ty) {
            self.unsupported(op, &ty, accept.1);
            return None;
        }
        let ids = self.operands(op, operands, n)?;
        self.all_typed(operands, &ids, &ty);
        Some((ty, all_some(ids)?))
    }

    pub(super) fn operand_op(
        &mut self,
        op: &ast::Op,
        operands: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Built> {
        let name = op.name.text.as_str();
        let index_like: (fn(&Type) -> bool, &str) = (
            |t| matches!(t, Type::Index | Type::Offset),
            "index or offset",
        );
        let float: (fn(&Type) -> bool, &str) = (
            |t| t.element().is_some_and(Scalar::is_float),
            "f32, f16 or a vector of them",
        );
        if let Some(b) = words::index_binary(name) {
            let (ty, v) = self.uniform_op(op, operands, types, to, 2, index_like)?;
            return Built::new(OpKind::IndexBinary(b, v[0], v[1]), vec![Some(ty)]);
        }
        if let Some(b) = words::scalar_binary(name) {
            let bitwise = matches!(name, "scalar.andi" | "scalar.ori" | "scalar.xori");
            let accept: (fn(&Type) -> bool, &str) = if name.ends_with('f') {
                float
            } else if bitwise {
                (
                    |t| *t == Type::I1 || matches!(t.element(), Some(Scalar::I32 | Scalar::U32)),
                    "i1, i32, u32 or a vector of i32 or u32",
                )
            } else {
                (
                    |t| matches!(t.element(), Some(Scalar::I32 | Scalar::U32)),
                    "i32, u32 or a vector of them",
                )
            };
            let (ty, v) = self.uniform_op(op, operands, types, to, 2, accept)?;
            return Built::new(OpKind::ScalarBinary(b, v[0], v[1]), vec![Some(ty)]);
        }
        if let Some(u) = words::scalar_unary(name) {
            let (ty, v) = self.uniform_op(op, operands, types, to, 1, float)?;
            return Built::new(OpKind::ScalarUnary(u, v[0]), vec![Some(ty)]);
        }
        if let Some(c) = words::convert_op(name) {
            let (from, to_ty) = self.cast_types(op, types, to)?;
            let ids = self.operands(op, operands, 1)?;
            self.all_typed(operands, &ids, &from);
            if !convert_ok(c, &from, &to_ty) {
                let msg = format!(
                    "`{name}` cannot convert {} to {}",
                    self.show(&from),
                    self.show(&to_ty)
                );
                self.error(op.name.span, codes::UNSUPPORTED_TYPE, msg);
                return None;
            }
            let v = all_some(ids)?;
            return Built::new(
                OpKind::Convert {
                    op: c,
                    value: v[0],
                    to: to_ty.clone(),
                },
                vec![Some(to_ty)],
            );
        }
        match name {
            "index.madd" => {
                let (ty, v) = self.uniform_op(op, operands, types, to, 3, index_like)?;
                Built::new(OpKind::IndexMadd(v[0], v[1], v[2]), vec![Some(ty)])
            }
            "index.cast" => {
                let (from, to_ty) = self.cast_types(op, types, to)?;
                let ok = |t: &Type| matches!(t, Type::Index | Type::Offset | Type::I32 | Type::U32);
                if !ok(&from) || !ok(&to_ty) {
                    let bad = if ok(&from) { to_ty } else { from };
                    self.unsupported(op, &bad, "index, offset, i32 or u32");
                    return None;
                }
                let ids = self.operands(op, operands, 1)?;
                self.all_typed(operands, &ids, &from);
                let v = all_some(ids)?;
                Built::new(
                    OpKind::IndexCast {
                        value: v[0],
                        to: to_ty.clone(),
                    },
                    vec![Some(to_ty)],
                )
            }
            "scalar.fmaf" => {
                let (ty, v) = self.uniform_op(op, operands, types, to, 3, float)?;
                Built::new(OpKind::ScalarFma(v[0], v[1], v[2]), vec![Some(ty)])
            }
            "scalar.select" => {
                let ty = self.one_type(op, types, to)?;
                // SPIR-V's OpSelect takes no cooperative matrices.
                if !ty.is_plain_data() || matches!(ty, Type::CoopMat(_)) {
                    self.unsupported(op, &ty, "a scalar or vector type");
                    return None;
                }
                let ids = self.operands(op, operands, 3)?;
                self.check_type(&operands[0], ids[0], &Type::I1);
                self.all_typed(&operands[1..], &ids[1..], &ty);
                let v = all_some(ids)?;
                Built::new(OpKind::Select(v[0], v[1], v[2]), vec![Some(ty)])
            }
            "vector.splat" => {
                let (from, to_ty) = self.cast_types(op, types, to)?;
                let ids = self.operands(op, operands, 1)?;
                self.all_typed(operands, &ids, &from);
                match (&to_ty, from.scalar()) {
                    (Type::Vector { elem, .. }, Some(s)) if *elem == s => {}
                    _ => {
                        let msg = format!(
                            "`vector.splat` cannot make {} from {}",
                            self.show(&to_ty),
                            self.show(&from)
                        );
                        self.error(op.name.span, codes::UNSUPPORTED_TYPE, msg);
                        return None;
                    }
                }
                let v = all_some(ids)?;
                Built::new(OpKind::VectorSplat(v[0]), vec![Some(to_ty)])
            }
            "vector.extract" => {
                let (from, to_ty) = self.cast_types(op, types, to)?;
                let ids = self.operands(op, operands, 2)?;
                self.check_type(&operands[0], ids[0], &from);
                self.check_type(&operands[1], ids[1], &Type::Index);
                match (&from, to_ty.scalar()) {
                    (Type::Vector { elem, .. }, Some(s)) if *elem == s => {}
                    _ => {
                        let msg = format!(
                            "`vector.extract` cannot take {} out of {}",
                            self.show(&to_ty),
                            self.show(&from)
                        );
                        self.error(op.name.span, codes::UNSUPPORTED_TYPE, msg);
                        return None;
                    }
                }
                let v = all_some(ids)?;
                Built::new(OpKind::VectorExtract(v[0], v[1]), vec![Some(to_ty)])
            }
            "vector.unpackf16" => {
                let (from, to_ty) = self.cast_types(op, types, to)?;
                let ids = self.operands(op, operands, 1)?;
                self.all_typed(operands, &ids, &from);
                let pair = Type::Vector {
                    len: 2,
                    elem: Scalar::F32,
                };
                if from != Type::U32 || to_ty != pair {
                    let msg = format!(
                        "`vector.unpackf16` converts u32 to vector<2xf32>, not {} to {}",
                        self.show(&from),
                        self.show(&to_ty)
                    );
                    self.error(op.name.span, codes::UNSUPPORTED_TYPE, msg);
                    return None;
                }
                let v = all_some(ids)?;
                Built::new(OpKind::UnpackF16(v[0]), vec![Some(to_ty)])
            }
            "scf.yield" => {
                self.error(
                    op.name.span,
                    codes::MISPLACED_OP,
                    "`scf.yield` must be the last op of an scf.if or scf.for region",
                );
                None
            }
            _ => self.kernel_op(op, operands, types, to),
        }
    }
}
