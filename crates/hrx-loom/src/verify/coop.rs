//! Rules for cooperative matrices: `coopmat<..>` types and the `coop.*`
//! ops. Shapes and element types are checked here against each other;
//! whether the target offers the combination is checked when lowering for
//! a target (E0604), since verification is target-independent.

use super::builder::Builder;
use super::ops::Built;
use crate::diag::codes;
use crate::front::ast::{self, Ident, TypeExpr};
use crate::front::span::Span;
use crate::ir::{CoopMatType, CoopRole, OpKind, Scalar, Type, ViewType};

/// The role words of `coopmat<.., role>`.
const ROLES: &str = "a b c";
/// The layout tags of `coop.load` / `coop.store`.
const LAYOUTS: &str = "row_major col_major";

impl Builder<'_> {
    /// Resolve `coopmat<rows x cols x elem, role>`.
    pub(super) fn resolve_coopmat(
        &mut self,
        span: Span,
        rows: u64,
        cols: u64,
        elem: &TypeExpr,
        role: &Ident,
    ) -> Option<Type> {
        let elem = self.resolve_scalar(elem, "cooperative matrix elements");
        let role = match role.text.as_str() {
            "a" => CoopRole::A,
            "b" => CoopRole::B,
            "c" => CoopRole::C,
            _ => return self.unknown_word(role, "cooperative matrix role", ROLES),
        };
        let elem = elem?;
        let mut ok = true;
        for (what, n) in [("rows", rows), ("columns", cols)] {
            if n != 8 && n != 16 {
                self.error(
                    span,
                    codes::UNSUPPORTED_TYPE,
                    format!("cooperative matrix {what} must be 8 or 16, not {n}"),
                );
                ok = false;
            }
        }
        if !elem.is_float() {
            let msg = format!(
                "cooperative matrix elements must be f16 or f32, not {}",
                self.show(&elem.to_type())
            );
            self.error(span, codes::UNSUPPORTED_TYPE, msg);
            ok = false;
        }
        ok.then_some(Type::CoopMat(CoopMatType {
            rows: rows as u32,
            cols: cols as u32,
            elem,
            role,
        }))
    }

    /// `coop.mma` and `coop.zero` (the operand form).
    pub(super) fn coop_operand_op(
        &mut self,
        op: &ast::Op,
        operands: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Built> {
        if op.name.text == "coop.zero" {
            self.operands(op, operands, 0)?;
            let ty = self.one_type(op, types, to)?;
            if !matches!(ty, Type::CoopMat(_)) {
                self.unsupported(op, &ty, "a coopmat type");
                return None;
            }
            return Built::new(OpKind::CoopZero, vec![Some(ty)]);
        }
        let ([ta, tb, tc], None) = (types, to) else {
            self.error(
                op.span,
                codes::TYPE_MISMATCH,
                "`coop.mma` is written `coop.mma %a, %b, %c : coopmat<..., a>, coopmat<..., b>, coopmat<..., c>`",
            );
            return None;
        };
        let ids = self.operands(op, operands, 3)?;
        let want = [(ta, CoopRole::A), (tb, CoopRole::B), (tc, CoopRole::C)];
        let mut mats = Vec::with_capacity(3);
        for ((t, role), (name, id)) in want.into_iter().zip(operands.iter().zip(&ids)) {
            let ty = self.resolve_type(t)?;
            let Type::CoopMat(m) = ty else {
                self.unsupported(op, &ty, "a coopmat type");
                return None;
            };
            if m.role != role {
                let msg = format!(
                    "operand %{} of `coop.mma` must have role {}, found {}",
                    name.text,
                    role_word(role),
                    self.show(&ty)
                );
                self.error(t.span, codes::TYPE_MISMATCH, msg);
                return None;
            }
            self.check_type(name, *id, &ty);
            mats.push(m);
        }
        let (a, b, c) = (mats[0], mats[1], mats[2]);
        let problem = if a.elem != b.elem {
            Some("A and B must have one element type".to_string())
        } else if a.rows != c.rows || b.cols != c.cols || a.cols != b.rows {
            Some(format!(
                "shapes do not chain: A is {}x{}, B {}x{}, C {}x{} (need A m x k, B k x n, C m x n)",
                a.rows, a.cols, b.rows, b.cols, c.rows, c.cols
            ))
        } else if a.elem == Scalar::F32 && c.elem == Scalar::F16 {
            Some("an f16 accumulator cannot take f32 factors".to_string())
        } else {
            None
        };
        if let Some(why) = problem {
            self.error(op.span, codes::TYPE_MISMATCH, format!("`coop.mma`: {why}"));
            return None;
        }
        let v: Option<Vec<_>> = ids.into_iter().collect();
        let v = v?;
        Built::new(
            OpKind::CoopMma(v[0], v[1], v[2]),
            vec![Some(Type::CoopMat(c))],
        )
    }

    /// `coop.load` and `coop.store` (the access form).
    pub(super) fn coop_access(
        &mut self,
        op: &ast::Op,
        value: Option<&Ident>,
        base: &Ident,
        indices: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Built> {
        let tag = op.tag.as_ref()?;
        let col_major = match tag.text.as_str() {
            "row_major" => false,
            "col_major" => true,
            _ => return self.unknown_word(tag, "matrix layout", LAYOUTS),
        };
        let store = op.name.text == "coop.store";
        let (mat_ty, view_ty) = match (store, value, types, to) {
            (false, None, [vt], Some(m)) => (m, vt),
            (true, Some(_), [m, vt], None) => (m, vt),
            _ => {
                let spelling = if store {
                    "<layout> %m, %view[%row, %col] : coopmat<...>, view<RxCxT>"
                } else {
                    "<layout> %view[%row, %col] : view<RxCxT> -> coopmat<...>"
                };
                self.error(
                    op.span,
                    codes::TYPE_MISMATCH,
                    format!(
                        "`{}` is written `{} {spelling}`",
                        op.name.text, op.name.text
                    ),
                );
                return None;
            }
        };
        let mat = self.resolve_type(mat_ty);
        let x = value.map(|v| self.use_value(v));
        let view = self.resolve_type(view_ty)?;
        let mat = mat?;
        let Type::CoopMat(m) = mat else {
            self.unsupported(op, &mat, "a coopmat type");
            return None;
        };
        let Type::View(ViewType { dims, elem }) = &view else {
            let msg = format!("expected a view type, found {}", self.show(&view));
            self.error(view_ty.span, codes::TYPE_MISMATCH, msg);
            return None;
        };
        if dims.len() != 2 {
            let msg = format!(
                "`{}` needs a 2-D view (its row length is the matrix stride), found {}",
                op.name.text,
                self.show(&view)
            );
            self.error(view_ty.span, codes::UNSUPPORTED_TYPE, msg);
            return None;
        }
        if *elem != m.elem {
            let msg = format!(
                "type mismatch: `{}` moves {} through a view of {}",
                op.name.text,
                self.show(&mat),
                self.show(&elem.to_type())
            );
            self.error(op.span, codes::TYPE_MISMATCH, msg);
            return None;
        }
        let v = self.use_typed(base, &view);
        if indices.len() != 2 {
            self.error(
                base.span,
                codes::OPERAND_COUNT,
                format!(
                    "%{} has 2 dimensions, {} index(es) given",
                    base.text,
                    indices.len()
                ),
            );
            return None;
        }
        let idx: Option<Vec<_>> = indices
            .iter()
            .map(|i| self.use_typed(i, &Type::Index))
            .collect();
        let (v, indices) = (v?, idx?);
        if let (Some(name), Some(x)) = (value, x) {
            self.check_type(name, x, &mat);
            let value = x?;
            return Built::new(
                OpKind::CoopStore {
                    value,
                    view: v,
                    indices,
                    col_major,
                },
                Vec::new(),
            );
        }
        Built::new(
            OpKind::CoopLoad {
                view: v,
                indices,
                col_major,
            },
            vec![Some(mat)],
        )
    }
}

/// The spelling of a role.
pub(super) fn role_word(role: CoopRole) -> &'static str {
    match role {
        CoopRole::A => "a",
        CoopRole::B => "b",
        CoopRole::C => "c",
    }
}
