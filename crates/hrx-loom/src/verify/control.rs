//! Blocks, terminators and structured control flow (`scf.if`, `scf.for`,
//! `scf.yield`, `kernel.return`, `kernel.launch.config`).

use super::MAX_DEPTH;
use super::builder::Builder;
use super::ops::Built;
use crate::diag::codes;
use crate::front::ast::{self, Form};
use crate::front::span::Span;
use crate::ir::{self, Block, OpKind, Type, ValueId};

/// What a block is, which decides its terminator.
#[derive(Clone, Copy)]
pub(super) enum Role<'t> {
    /// The launch region: holds the one `kernel.launch.config`.
    Launch,
    /// The kernel body: ends with `kernel.return`.
    Body,
    /// An scf region: ends with `scf.yield` of these types.
    Region(&'t [Option<Type>]),
}

impl Builder<'_> {
    /// Build a block's ops. `end` is where a missing terminator is reported.
    pub(super) fn block(&mut self, ops: &[ast::Op], role: Role<'_>, end: Span) -> Block {
        let mut out = Vec::with_capacity(ops.len());
        let mut terminated = false;
        for (i, op) in ops.iter().enumerate() {
            if self.diags.is_full() {
                break;
            }
            let last = i + 1 == ops.len();
            match (op.name.text.as_str(), role) {
                ("scf.yield", Role::Region(expected)) if last => {
                    if let Some(y) = self.yield_op(op, expected) {
                        out.push(y);
                    }
                    terminated = true;
                }
                ("kernel.return", Role::Body) if last => {
                    if !op.results.is_empty() || op.tag.is_some() {
                        self.error(
                            op.span,
                            codes::OPERAND_COUNT,
                            "`kernel.return` takes nothing",
                        );
                    }
                    out.push(ir::Op {
                        results: Vec::new(),
                        kind: OpKind::Return,
                        span: op.span,
                    });
                    terminated = true;
                }
                ("kernel.return", _) => self.error(
                    op.name.span,
                    codes::MISPLACED_OP,
                    "`kernel.return` must be the last op of the kernel body",
                ),
                ("kernel.launch.config", Role::Launch) => self.launch_config(op),
                ("kernel.launch.config", _) => self.error(
                    op.name.span,
                    codes::MISPLACED_OP,
                    "`kernel.launch.config` belongs at the top of the launch region",
                ),
                _ => {
                    if let Some(o) = self.op(op) {
                        out.push(o);
                    }
                }
            }
        }
        match role {
            Role::Region(expected) if !terminated => {
                if !expected.is_empty() {
                    self.error(
                        end,
                        codes::MISPLACED_OP,
                        format!(
                            "this region must end with `scf.yield` of {} value(s)",
                            expected.len()
                        ),
                    );
                }
                out.push(ir::Op {
                    results: Vec::new(),
                    kind: OpKind::Yield(Vec::new()),
                    span: end,
                });
            }
            Role::Body if !terminated => {
                self.error(
                    end,
                    codes::MISPLACED_OP,
                    "the kernel body must end with `kernel.return`",
                );
            }
            _ => {}
        }
        Block { ops: out }
    }

    fn yield_op(&mut self, op: &ast::Op, expected: &[Option<Type>]) -> Option<ir::Op> {
        let Form::Operands {
            operands,
            types,
            to,
        } = &op.form
        else {
            return None;
        };
        if !op.results.is_empty() || to.is_some() {
            self.error(
                op.span,
                codes::TYPE_MISMATCH,
                "`scf.yield` is written `scf.yield %a, ... : type, ...`",
            );
            return None;
        }
        if operands.len() != expected.len() {
            self.error(
                op.name.span,
                codes::OPERAND_COUNT,
                format!(
                    "`scf.yield` gives {} value(s), the region produces {}",
                    operands.len(),
                    expected.len()
                ),
            );
            return None;
        }
        if types.len() != operands.len() {
            self.error(
                op.span,
                codes::TYPE_MISMATCH,
                "`scf.yield` needs one type per value after `:`",
            );
            return None;
        }
        let mut ids = Vec::with_capacity(operands.len());
        for ((name, t), want) in operands.iter().zip(types).zip(expected) {
            let id = self.use_value(name);
            if let Some(ty) = self.resolve_type(t)
                && self.check_type(name, id, &ty)
                && let Some(want) = want
                && *want != ty
            {
                let msg = format!(
                    "type mismatch: `scf.yield` gives {}, the region produces {}",
                    self.show(&ty),
                    self.show(want)
                );
                self.error(t.span, codes::TYPE_MISMATCH, msg);
            }
            ids.push(id);
        }
        let ids: Option<Vec<ValueId>> = ids.into_iter().collect();
        Some(ir::Op {
            results: Vec::new(),
            kind: OpKind::Yield(ids?),
            span: op.span,
        })
    }

    /// Result types of an scf op; buffers and views may not leave regions.
    fn result_types(&mut self, types: &[ast::TypeExpr]) -> Vec<Option<Type>> {
        types
            .iter()
            .map(|t| {
                let ty = self.resolve_type(t)?;
                if !ty.is_plain_data() {
                    let msg = format!("{} values cannot leave a region", self.show(&ty));
                    self.error(t.span, codes::UNSUPPORTED_TYPE, msg);
                    return None;
                }
                Some(ty)
            })
            .collect()
    }

    fn enter(&mut self, region: &ast::Region) -> bool {
        if self.depth >= MAX_DEPTH {
            self.error(
                region.span,
                codes::TOO_DEEP,
                format!("regions nested deeper than {MAX_DEPTH} levels"),
            );
            return false;
        }
        self.depth += 1;
        self.push_scope();
        true
    }

    fn leave(&mut self) {
        self.pop_scope();
        self.depth = self.depth.saturating_sub(1);
    }

    fn region_end(region: &ast::Region) -> Span {
        Span::new(region.span.end.saturating_sub(1), region.span.end)
    }

    pub(super) fn control_op(&mut self, op: &ast::Op) -> Option<Built> {
        match &op.form {
            Form::If {
                cond,
                results,
                then,
                otherwise,
            } => {
                let c = self.use_typed(cond, &Type::I1);
                let types = self.result_types(results);
                if !results.is_empty() && otherwise.is_none() {
                    self.error(
                        op.name.span,
                        codes::MISPLACED_OP,
                        "`scf.if` with results needs an `else` region",
                    );
                }
                if !self.enter(then) {
                    return None;
                }
                let then_block =
                    self.block(&then.ops, Role::Region(&types), Self::region_end(then));
                self.leave();
                let mut else_block = None;
                if let Some(e) = otherwise {
                    if !self.enter(e) {
                        return None;
                    }
                    else_block =
                        Some(self.block(&e.ops, Role::Region(&types), Self::region_end(e)));
                    self.leave();
                }
                Built::new(
                    OpKind::If {
                        cond: c?,
                        then: then_block,
                        otherwise: else_block,
                    },
                    types,
                )
            }
            Form::For {
                iv,
                lower,
                upper,
                step,
                iter_args,
                results,
                body,
            } => {
                let bounds = [lower, upper, step].map(|b| self.use_typed(b, &Type::Index));
                let mut inits = Vec::with_capacity(iter_args.len());
                let mut arg_types = Vec::with_capacity(iter_args.len());
                for a in iter_args {
                    let ty = self
                        .result_types(std::slice::from_ref(&a.ty))
                        .pop()
                        .flatten();
                    let init = self.use_value(&a.init);
                    if let Some(t) = &ty {
                        self.check_type(&a.init, init, t);
                    }
                    inits.push(init);
                    arg_types.push(ty);
                }
                let declared = self.result_types(results);
                if declared.len() != arg_types.len() {
                    self.error(
                        op.name.span,
                        codes::RESULT_COUNT,
                        format!(
                            "`scf.for` carries {} value(s) but declares {} result(s)",
                            arg_types.len(),
                            declared.len()
                        ),
                    );
                } else {
                    for ((d, a), t) in declared.iter().zip(&arg_types).zip(results) {
                        if let (Some(d), Some(a)) = (d, a)
                            && d != a
                        {
                            let msg = format!(
                                "type mismatch: result {} does not match the carried {}",
                                self.show(d),
                                self.show(a)
                            );
                            self.error(t.span, codes::TYPE_MISMATCH, msg);
                        }
                    }
                }
                if !self.enter(body) {
                    return None;
                }
                let iv_id = self.define(Some(iv), Some(Type::Index), iv.span);
                let args: Vec<ValueId> = iter_args
                    .iter()
                    .zip(&arg_types)
                    .map(|(a, t)| self.define(Some(&a.name), t.clone(), a.name.span))
                    .collect();
                let body_block =
                    self.block(&body.ops, Role::Region(&arg_types), Self::region_end(body));
                self.leave();
                let [lower, upper, step] = bounds;
                let inits: Option<Vec<ValueId>> = inits.into_iter().collect();
                let iter = args.into_iter().zip(inits?).collect();
                Built::new(
                    OpKind::For {
                        iv: iv_id,
                        lower: lower?,
                        upper: upper?,
                        step: step?,
                        iter_args: iter,
                        body: body_block,
                    },
                    arg_types,
                )
            }
            _ => None,
        }
    }
}
