//! The per-kernel builder: value table, name resolution, type resolution
//! and the small checking helpers every op rule uses.
//!
//! Error recovery: a value whose definition failed gets type `None`; checks
//! that involve it are skipped, so one mistake yields one diagnostic rather
//! than a cascade. The IR is only returned when no diagnostic was raised.

use super::scope::{Scopes, Unresolved};
use crate::diag::{Diagnostics, codes};
use crate::front::ast::{DimExpr, Ident, TypeExpr, TypeKind};
use crate::front::span::Span;
use crate::ir::{Dim, Scalar, Type, ValueId, ViewType};
use std::collections::HashMap;

pub(super) struct Builder<'a> {
    pub(super) diags: &'a mut Diagnostics,
    /// Declared config keys and their types.
    pub(super) configs: &'a HashMap<String, Type>,
    pub(super) scopes: Scopes,
    /// `None` where the definition failed.
    pub(super) types: Vec<Option<Type>>,
    pub(super) names: Vec<String>,
    pub(super) def_spans: Vec<Span>,
    /// Per value: computable at compile time from constants and config
    /// values (workgroup sizes and alloca sizes must be).
    pub(super) is_static: Vec<bool>,
    /// Region nesting, bounded by [`super::MAX_DEPTH`].
    pub(super) depth: usize,
    /// Building the launch region (only index arithmetic allowed).
    pub(super) in_launch: bool,
    /// Whether `kernel.launch.config` was seen (even if it failed).
    pub(super) launch_seen: bool,
    /// The launch config, once built.
    pub(super) launch_config: Option<crate::ir::LaunchConfig>,
    /// Workload argument names, for a hint when the body uses one.
    pub(super) workload_names: Vec<String>,
}

impl<'a> Builder<'a> {
    pub(super) fn new(diags: &'a mut Diagnostics, configs: &'a HashMap<String, Type>) -> Self {
        Builder {
            diags,
            configs,
            scopes: Scopes::new(),
            types: Vec::with_capacity(64),
            names: Vec::with_capacity(64),
            def_spans: Vec::with_capacity(64),
            is_static: Vec::with_capacity(64),
            depth: 0,
            in_launch: false,
            launch_seen: false,
            launch_config: None,
            workload_names: Vec::new(),
        }
    }

    pub(super) fn error(&mut self, span: Span, code: &'static str, msg: impl Into<String>) {
        self.diags.error(span, code, msg);
    }

    /// A fresh value; `name` binds it (an anonymous value when `None`).
    pub(super) fn define(&mut self, name: Option<&Ident>, ty: Option<Type>, span: Span) -> ValueId {
        let id = ValueId(u32::try_from(self.types.len()).unwrap_or(u32::MAX));
        self.types.push(ty);
        self.names
            .push(name.map_or_else(String::new, |n| n.text.clone()));
        self.def_spans.push(name.map_or(span, |n| n.span));
        self.is_static.push(false);
        if let Some(name) = name
            && self.scopes.define(id, &self.names).is_err()
        {
            self.error(
                name.span,
                codes::DUPLICATE_VALUE,
                format!("%{} is already defined", name.text),
            );
        }
        id
    }

    pub(super) fn push_scope(&mut self) {
        self.scopes.push();
    }

    pub(super) fn pop_scope(&mut self) {
        self.scopes.pop(&self.names);
    }

    /// Resolve a use of `%name`.
    pub(super) fn use_value(&mut self, name: &Ident) -> Option<ValueId> {
        match self.scopes.lookup(&name.text) {
            Ok(id) => Some(id),
            Err(Unresolved::OutOfRegion) => {
                self.error(
                    name.span,
                    codes::OUT_OF_REGION,
                    format!(
                        "%{} is used outside the region that defines it (yield it to use it after the region)",
                        name.text
                    ),
                );
                None
            }
            Err(Unresolved::Undefined) => {
                let hint = if !self.in_launch && self.workload_names.contains(&name.text) {
                    " (workload arguments are visible only in the launch region)"
                } else {
                    ""
                };
                self.error(
                    name.span,
                    codes::UNDEFINED_VALUE,
                    format!("undefined value %{}{hint}", name.text),
                );
                None
            }
        }
    }

    /// The type of a resolved value (`None` if its definition failed).
    pub(super) fn ty(&self, id: Option<ValueId>) -> Option<&Type> {
        id.and_then(|id| self.types.get(id.index()))
            .and_then(Option::as_ref)
    }

    /// Resolve uses and check each has type `want`.
    pub(super) fn use_typed(&mut self, name: &Ident, want: &Type) -> Option<ValueId> {
        let id = self.use_value(name)?;
        self.check_type(name, Some(id), want);
        Some(id)
    }

    /// Report a mismatch between a value's type and `want`.
    pub(super) fn check_type(&mut self, at: &Ident, id: Option<ValueId>, want: &Type) -> bool {
        match self.ty(id) {
            Some(have) if have != want => {
                let msg = format!(
                    "type mismatch: %{} has type {}, expected {}",
                    at.text,
                    self.show(have),
                    self.show(want)
                );
                self.error(at.span, codes::TYPE_MISMATCH, msg);
                false
            }
            _ => true,
        }
    }

    /// A type as loom spells it (dynamic dims by value name).
    pub(super) fn show(&self, t: &Type) -> String {
        match t {
            Type::Index => "index".into(),
            Type::Offset => "offset".into(),
            Type::I1 => "i1".into(),
            Type::I32 => "i32".into(),
            Type::U32 => "u32".into(),
            Type::F32 => "f32".into(),
            Type::F16 => "f16".into(),
            Type::Buffer => "buffer".into(),
            Type::Vector { len, elem } => format!("vector<{len}x{}>", self.show(&elem.to_type())),
            Type::CoopMat(m) => format!(
                "coopmat<{}x{}x{}, {}>",
                m.rows,
                m.cols,
                self.show(&m.elem.to_type()),
                super::coop::role_word(m.role)
            ),
            Type::View(v) => {
                let mut s = String::from("view<");
                for d in &v.dims {
                    match d {
                        Dim::Static(n) => s.push_str(&format!("{n}x")),
                        Dim::Dynamic(id) => {
                            let name = self.names.get(id.index()).map_or("?", |n| n);
                            s.push_str(&format!("[%{name}]x"));
                        }
                    }
                }
                s.push_str(&self.show(&v.elem.to_type()));
                s.push('>');
                s
            }
        }
    }

    /// Resolve a written type (dynamic view dims must be visible `index`
    /// values).
    pub(super) fn resolve_type(&mut self, t: &TypeExpr) -> Option<Type> {
        match &t.kind {
            TypeKind::Named(name) => match name.as_str() {
                "index" => Some(Type::Index),
                "offset" => Some(Type::Offset),
                "i1" => Some(Type::I1),
                "i32" => Some(Type::I32),
                "u32" => Some(Type::U32),
                "f32" => Some(Type::F32),
                "f16" => Some(Type::F16),
                "buffer" => Some(Type::Buffer),
                other => {
                    self.error(
                        t.span,
                        codes::UNKNOWN_TYPE,
                        format!("unknown type `{other}`"),
                    );
                    None
                }
            },
            TypeKind::Vector { len, elem } => {
                let elem = self.resolve_scalar(elem, "vector lanes")?;
                match u8::try_from(*len) {
                    Ok(len @ 2..=4) => Some(Type::Vector { len, elem }),
                    _ => {
                        self.error(
                            t.span,
                            codes::UNSUPPORTED_TYPE,
                            format!("vector length must be 2, 3 or 4, not {len}"),
                        );
                        None
                    }
                }
            }
            TypeKind::CoopMat {
                rows,
                cols,
                elem,
                role,
            } => self.resolve_coopmat(t.span, *rows, *cols, elem, role),
            TypeKind::View { dims, elem } => {
                let elem = self.resolve_scalar(elem, "view elements");
                let mut out = Vec::with_capacity(dims.len());
                let mut ok = true;
                for d in dims {
                    match d {
                        DimExpr::Static(n, span) => {
                            if *n == 0 || *n > u64::from(u32::MAX) {
                                self.error(
                                    *span,
                                    codes::UNSUPPORTED_TYPE,
                                    format!("view dimension must be in 1..=4294967295, not {n}"),
                                );
                                ok = false;
                            }
                            out.push(Dim::Static(*n));
                        }
                        DimExpr::Dynamic(name) => match self.use_typed(name, &Type::Index) {
                            Some(id) => out.push(Dim::Dynamic(id)),
                            None => ok = false,
                        },
                    }
                }
                let elem = elem?;
                ok.then_some(Type::View(ViewType { dims: out, elem }))
            }
        }
    }

    pub(super) fn resolve_scalar(&mut self, t: &TypeExpr, what: &str) -> Option<Scalar> {
        let ty = self.resolve_type(t)?;
        let s = ty.scalar();
        if s.is_none() {
            self.error(
                t.span,
                codes::UNSUPPORTED_TYPE,
                format!(
                    "{what} must be i32, u32, f32 or f16, not {}",
                    self.show(&ty)
                ),
            );
        }
        s
    }
}
