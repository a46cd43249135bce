//! Op dispatch: launch-region policy, tags, result naming, and the shared
//! shape checks (operand counts, type annotations) the op rules use.

use super::builder::Builder;
use crate::diag::codes;
use crate::front::ast::{self, Form, Ident, TypeExpr};
use crate::ir::{self, OpKind, Type, ValueId};

/// What an op rule produces: the IR op and its result types.
pub(super) struct Built {
    pub(super) kind: OpKind,
    pub(super) results: Vec<Option<Type>>,
}

impl Built {
    pub(super) fn new(kind: OpKind, results: Vec<Option<Type>>) -> Option<Built> {
        Some(Built { kind, results })
    }
}

/// Ops that take a `<tag>`.
const TAGGED: &[&str] = &[
    "kernel.workitem.dispatch.id",
    "kernel.workgroup.id",
    "kernel.workitem.id",
    "kernel.workgroup.size",
    "kernel.workgroup.count",
    "kernel.subgroup.reduce",
    "kernel.subgroup.shuffle",
    "view.atomic.rmw",
    "buffer.alloca",
    "coop.load",
    "coop.store",
];

impl Builder<'_> {
    /// Build one op that is not a terminator (yield, return, launch config).
    pub(super) fn op(&mut self, op: &ast::Op) -> Option<ir::Op> {
        let name = op.name.text.as_str();
        if self.in_launch && !(name.starts_with("index.") || name == "config.value") {
            self.error(
                op.name.span,
                codes::NOT_IN_LAUNCH,
                format!(
                    "`{name}` is not allowed in the launch region (only index arithmetic, workload arguments and config values)"
                ),
            );
            self.define_failed(op);
            return None;
        }
        // `kernel.barrier` alone means `kernel.barrier<workgroup>`.
        let tagged = TAGGED.contains(&name);
        let tag_optional = name == "kernel.barrier";
        match (&op.tag, tagged) {
            (Some(tag), false) if !tag_optional => {
                self.error(
                    tag.span,
                    codes::UNKNOWN_WORD,
                    format!("`{name}` takes no `<...>`"),
                );
            }
            (None, true) => {
                self.error(
                    op.name.span,
                    codes::UNKNOWN_WORD,
                    format!("`{name}` needs a `<...>` tag"),
                );
                self.define_failed(op);
                return None;
            }
            _ => {}
        }
        let built = match &op.form {
            Form::Constant { value, ty } => self.constant(op, value, ty),
            Form::Compare {
                predicate,
                operands,
                ty,
            } => self.compare(op, predicate, operands, ty),
            Form::Operands {
                operands,
                types,
                to,
            } if name.starts_with("coop.") => {
                self.coop_operand_op(op, operands, types, to.as_ref())
            }
            Form::Operands {
                operands,
                types,
                to,
            } => self.operand_op(op, operands, types, to.as_ref()),
            Form::Access {
                value,
                base,
                indices,
                types,
                to,
            } if name.starts_with("coop.") => {
                self.coop_access(op, value.as_ref(), base, indices, types, to.as_ref())
            }
            Form::Access { .. } | Form::Alloca { .. } => self.memory_op(op),
            Form::Barrier { attrs } => self.barrier(op, attrs),
            Form::ConfigValue { key, ty } => self.config_value(key, ty),
            Form::If { .. } | Form::For { .. } => self.control_op(op),
            Form::LaunchConfig { .. } | Form::Bare => {
                self.error(
                    op.name.span,
                    codes::MISPLACED_OP,
                    format!("`{name}` is misplaced here"),
                );
                None
            }
        };
        let Some(built) = built else {
            self.define_failed(op);
            return None;
        };
        let results = self.define_results(op, built.results);
        let is_static = self.is_static_kind(&built.kind);
        for r in &results {
            if let Some(s) = self.is_static.get_mut(r.index()) {
                *s = is_static;
            }
        }
        Some(ir::Op {
            results,
            kind: built.kind,
            span: op.span,
        })
    }

    /// Whether results of `kind` are compile-time constants given config
    /// values.
    fn is_static_kind(&self, kind: &OpKind) -> bool {
        let s = |id: &ValueId| self.is_static.get(id.index()).copied().unwrap_or(false);
        match kind {
            OpKind::IndexConstant(_) | OpKind::ScalarConstant(_) | OpKind::ConfigValue(_) => true,
            OpKind::IndexBinary(_, a, b) | OpKind::IndexCmp(_, a, b) => s(a) && s(b),
            OpKind::IndexMadd(a, b, c) => s(a) && s(b) && s(c),
            OpKind::IndexCast { value, .. } => s(value),
            _ => false,
        }
    }

    /// Bind result names to fresh values. Omitted names (no `%x =`) give
    /// anonymous values, so the IR always has every result.
    fn define_results(&mut self, op: &ast::Op, types: Vec<Option<Type>>) -> Vec<ValueId> {
        let named = op.results.len();
        if named != 0 && named != types.len() {
            self.error(
                op.name.span,
                codes::RESULT_COUNT,
                format!(
                    "`{}` produces {} result(s), {named} name(s) given",
                    op.name.text,
                    types.len()
                ),
            );
            self.define_failed(op);
            return Vec::new();
        }
        types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| self.define(op.results.get(i), ty, op.span))
            .collect()
    }

    /// Bind the names of a failed op with unknown types (no cascade).
    pub(super) fn define_failed(&mut self, op: &ast::Op) {
        for name in &op.results {
            if self.scopes.lookup(&name.text).is_err() {
                self.define(Some(name), None, op.span);
            }
        }
    }

    /// Exactly `n` operands, resolved (unresolved ones are `None`).
    pub(super) fn operands(
        &mut self,
        op: &ast::Op,
        list: &[Ident],
        n: usize,
    ) -> Option<Vec<Option<ValueId>>> {
        if list.len() != n {
            self.error(
                op.name.span,
                codes::OPERAND_COUNT,
                format!(
                    "`{}` takes {n} operand(s), {} given",
                    op.name.text,
                    list.len()
                ),
            );
            return None;
        }
        Some(list.iter().map(|v| self.use_value(v)).collect())
    }

    /// The one type after `:` (and no `->`).
    pub(super) fn one_type(
        &mut self,
        op: &ast::Op,
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<Type> {
        match (types, to) {
            ([t], None) => self.resolve_type(t),
            _ => {
                self.error(
                    op.span,
                    codes::TYPE_MISMATCH,
                    format!("`{}` is written `... : type`", op.name.text),
                );
                None
            }
        }
    }

    /// `: from -> to`.
    pub(super) fn cast_types(
        &mut self,
        op: &ast::Op,
        types: &[TypeExpr],
        to: Option<&TypeExpr>,
    ) -> Option<(Type, Type)> {
        match (types, to) {
            ([from], Some(to)) => {
                let from = self.resolve_type(from);
                let to = self.resolve_type(to);
                Some((from?, to?))
            }
            _ => {
                self.error(
                    op.span,
                    codes::TYPE_MISMATCH,
                    format!("`{}` is written `... : from -> to`", op.name.text),
                );
                None
            }
        }
    }

    /// Report that `op` does not work on `ty`.
    pub(super) fn unsupported(&mut self, op: &ast::Op, ty: &Type, expected: &str) {
        let msg = format!(
            "`{}` does not accept {}; expected {expected}",
            op.name.text,
            self.show(ty)
        );
        self.error(op.name.span, codes::UNSUPPORTED_TYPE, msg);
    }

    /// Check every resolved operand has type `want`.
    pub(super) fn all_typed(&mut self, list: &[Ident], ids: &[Option<ValueId>], want: &Type) {
        for (name, id) in list.iter().zip(ids) {
            self.check_type(name, *id, want);
        }
    }

    fn config_value(&mut self, key: &Ident, ty: &TypeExpr) -> Option<Built> {
        let ty = self.resolve_type(ty)?;
        let Some(decl) = self.configs.get(&key.text).cloned() else {
            self.error(
                key.span,
                codes::UNKNOWN_CONFIG,
                format!(
                    "unknown config key `@{}` (declare it with `config.decl @{} = ... : type`)",
                    key.text, key.text
                ),
            );
            return None;
        };
        if decl != ty {
            let msg = format!(
                "config key `@{}` is declared {}, used as {}",
                key.text,
                self.show(&decl),
                self.show(&ty)
            );
            self.error(key.span, codes::CONFIG_TYPE, msg);
        }
        Built::new(OpKind::ConfigValue(key.text.clone()), vec![Some(decl)])
    }
}
