//! Rules for buffers and views: `buffer.view`, `buffer.alloca`, loads,
//! stores and atomics. The annotated view type must equal the view
//! operand's type exactly (dynamic dimensions name the same values).

use super::builder::Builder;
use super::ops::Built;
use super::words;
use crate::diag::codes;
use crate::front::ast::{self, Form, Ident, TypeExpr};
use crate::ir::{Literal, OpKind, Scalar, Type, ValueId, ViewType};

impl Builder<'_> {
    pub(super) fn memory_op(&mut self, op: &ast::Op) -> Option<Built> {
        match &op.form {
            Form::Alloca { align, bytes, ty } => {
                let tag = op.tag.as_ref()?;
                if tag.text != "workgroup" {
                    return self.unknown_word(tag, "memory space", "workgroup");
                }
                let align = match align.value {
                    Literal::Int(v) if (1..=4096).contains(&v) && (v as u64).is_power_of_two() => {
                        v as u32
                    }
                    _ => {
                        let msg = format!(
                            "alignment `{}` must be a power of two up to 4096",
                            align.text
                        );
                        self.error(align.span, codes::LITERAL_TYPE, msg);
                        return None;
                    }
                };
                let ty = self.resolve_type(ty)?;
                if ty != Type::Buffer {
                    self.unsupported(op, &ty, "buffer");
                    return None;
                }
                let id = self.use_typed(bytes, &Type::Offset)?;
                if !self.is_static.get(id.index()).copied().unwrap_or(false) {
                    self.error(
                        bytes.span,
                        codes::DYNAMIC_ALLOCA,
                        format!(
                            "workgroup allocation size %{} must be a compile-time constant (computed from constants and config values only)",
                            bytes.text
                        ),
                    );
                    return None;
                }
                Built::new(
                    OpKind::Alloca { align, bytes: id },
                    vec![Some(Type::Buffer)],
                )
            }
            Form::Access {
                value,
                base,
                indices,
                types,
                to,
            } => self.access(op, value.as_ref(), base, indices, types, to.as_ref()),
            _ => None,
        }
    }

    fn shape_error<T>(&mut self, op: &ast::Op, spelling: &str) -> Option<T> {
        let msg = format!(
            "`{}` is written `{} {spelling}`",
            op.name.text, op.name.text
        );
        self.error(op.span, codes::TYPE_MISMATCH, msg);
        None
    }

    /// Resolve the view operand against its annotated type and the indices.
    fn view_operand(
        &mut self,
        base: &Ident,
        declared: &TypeExpr,
        indices: &[Ident],
    ) -> Option<(ValueId, ViewType, Vec<ValueId>)> {
        let declared_ty = self.resolve_type(declared)?;
        let Type::View(view) = declared_ty.clone() else {
            let msg = format!("expected a view type, found {}", self.show(&declared_ty));
            self.error(declared.span, codes::TYPE_MISMATCH, msg);
            return None;
        };
        let id = self.use_typed(base, &declared_ty);
        if indices.len() != view.dims.len() {
            self.error(
                base.span,
                codes::OPERAND_COUNT,
                format!(
                    "%{} has {} dimension(s), {} index(es) given",
                    base.text,
                    view.dims.len(),
                    indices.len()
                ),
            );
            return None;
        }
        let idx: Vec<Option<ValueId>> = indices
            .iter()
            .map(|i| self.use_typed(i, &Type::Index))
            .collect();
        Some((id?, view, idx.into_iter().collect::<Option<Vec<_>>>()?))
    }

    fn access(
        &mut self,
        op: &ast::Op,
        value: Option<&Ident>,
        base: &Ident,
        indices: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Built> {
        let name = op.name.text.as_str();
        let wants_value = matches!(name, "view.store" | "vector.store" | "view.atomic.rmw");
        if wants_value != value.is_some() {
            let msg = if wants_value {
                format!("`{name}` takes a value operand before the view")
            } else {
                format!("`{name}` takes no value operand before `%{}`", base.text)
            };
            self.error(op.name.span, codes::OPERAND_COUNT, msg);
            return None;
        }
        match name {
            "buffer.view" => {
                let ([from], Some(to)) = (types, to) else {
                    return self.shape_error(op, "%buffer[%byte_offset] : buffer -> view<...>");
                };
                let from = self.resolve_type(from);
                let view = self.resolve_type(to);
                let buf = self.use_typed(base, &Type::Buffer);
                if indices.len() != 1 {
                    self.error(
                        base.span,
                        codes::OPERAND_COUNT,
                        "`buffer.view` takes one byte offset in brackets",
                    );
                    return None;
                }
                let offset = self.use_typed(&indices[0], &Type::Offset);
                let (from, view) = (from?, view?);
                if from != Type::Buffer {
                    self.unsupported(op, &from, "buffer");
                    return None;
                }
                let Type::View(vt) = view.clone() else {
                    self.unsupported(op, &view, "a view type after `->`");
                    return None;
                };
                Built::new(
                    OpKind::BufferView {
                        buffer: buf?,
                        byte_offset: offset?,
                        view: vt,
                    },
                    vec![Some(view)],
                )
            }
            "view.load" | "vector.load" => {
                let ([vt], Some(to)) = (types, to) else {
                    return self.shape_error(op, "%view[%i, ...] : view<...> -> type");
                };
                let result = self.resolve_type(to);
                let (v, view, idx) = self.view_operand(base, vt, indices)?;
                let result = result?;
                let vector = name == "vector.load";
                self.check_element(op, &result, view.elem, vector)?;
                let kind = if vector {
                    OpKind::VectorLoad {
                        view: v,
                        indices: idx,
                    }
                } else {
                    OpKind::ViewLoad {
                        view: v,
                        indices: idx,
                    }
                };
                Built::new(kind, vec![Some(result)])
            }
            "view.store" | "vector.store" => {
                let ([value_ty, vt], None) = (types, to) else {
                    return self.shape_error(op, "%value, %view[%i, ...] : type, view<...>");
                };
                let value_ty = self.resolve_type(value_ty);
                let value = value?;
                let x = self.use_value(value);
                let (v, view, idx) = self.view_operand(base, vt, indices)?;
                let value_ty = value_ty?;
                self.check_type(value, x, &value_ty);
                let vector = name == "vector.store";
                self.check_element(op, &value_ty, view.elem, vector)?;
                let x = x?;
                let kind = if vector {
                    OpKind::VectorStore {
                        value: x,
                        view: v,
                        indices: idx,
                    }
                } else {
                    OpKind::ViewStore {
                        value: x,
                        view: v,
                        indices: idx,
                    }
                };
                Built::new(kind, Vec::new())
            }
            _ => self.atomic(op, value?, base, indices, types, to),
        }
    }

    /// `ty` must be the view's element (or a vector of it).
    fn check_element(&mut self, op: &ast::Op, ty: &Type, elem: Scalar, vector: bool) -> Option<()> {
        let ok = match ty {
            Type::Vector { elem: e, .. } => vector && *e == elem,
            other => !vector && other.scalar() == Some(elem),
        };
        if !ok {
            let want = if vector {
                format!("a vector of {}", self.show(&elem.to_type()))
            } else {
                self.show(&elem.to_type())
            };
            let msg = format!(
                "type mismatch: `{}` on a view of {} moves {want}, not {}",
                op.name.text,
                self.show(&elem.to_type()),
                self.show(ty)
            );
            self.error(op.span, codes::TYPE_MISMATCH, msg);
            return None;
        }
        Some(())
    }

    fn atomic(
        &mut self,
        op: &ast::Op,
        value: &Ident,
        base: &Ident,
        indices: &[Ident],
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Built> {
        let tag = op.tag.as_ref()?;
        let Some((aop, signed)) = words::atomic_op(&tag.text) else {
            return self.unknown_word(tag, "atomic operation", words::ATOMIC_OPS);
        };
        let ([value_ty, vt], Some(result)) = (types, to) else {
            return self.shape_error(op, "<op> %value, %view[%i] : elem, view<...> -> elem");
        };
        let value_ty = self.resolve_type(value_ty);
        let result = self.resolve_type(result);
        let x = self.use_value(value);
        let (v, view, idx) = self.view_operand(base, vt, indices)?;
        let (value_ty, result) = (value_ty?, result?);
        let elem = view.elem;
        let sign_ok = match signed {
            Some(true) => elem == Scalar::I32,
            Some(false) => elem == Scalar::U32,
            None => true,
        };
        if !matches!(elem, Scalar::I32 | Scalar::U32) || !sign_ok {
            let msg = format!(
                "atomic `{}` does not work on a view of {}",
                tag.text,
                self.show(&elem.to_type())
            );
            self.error(tag.span, codes::UNSUPPORTED_TYPE, msg);
            return None;
        }
        self.check_element(op, &value_ty, elem, false)?;
        self.check_element(op, &result, elem, false)?;
        self.check_type(value, x, &value_ty);
        Built::new(
            OpKind::AtomicRmw {
                op: aop,
                value: x?,
                view: v,
                indices: idx,
            },
            vec![Some(result)],
        )
    }
}
