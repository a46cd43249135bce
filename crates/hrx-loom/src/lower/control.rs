//! Structured control flow: `scf.if`, `scf.for` and `scf.yield`.
//!
//! naga expressions are scoped to the block that emits them, so every value
//! that crosses a region boundary (if results, loop-carried values, the
//! induction variable) lives in a function local: regions store into it,
//! and the code after (or the next iteration) loads from it.

use super::{Lowerer, R, Val, builder::ty, types::value_inner};
use crate::front::span::Span;
use crate::ir::{Block, Op, OpKind, ValueId};
use naga::{BinaryOperator, Expression, Handle, LocalVariable, Statement};

impl Lowerer<'_> {
    /// A local of the loom type of `id`.
    fn local_for(&mut self, id: ValueId, span: Span) -> R<Handle<LocalVariable>> {
        let t = self.ty_of(id, span)?;
        let Some(inner) = value_inner(&t) else {
            return Err(self.bug(span, "a buffer or view crosses a region boundary"));
        };
        let h = ty(&mut self.module.types, inner);
        let name = self
            .kernel
            .value_names
            .get(id.index())
            .cloned()
            .unwrap_or_default();
        Ok(self.fb.local(&name, h))
    }

    /// `scf.yield`: store each value into the region's locals.
    pub(super) fn yield_to(
        &mut self,
        values: &[ValueId],
        yields: Option<&[Handle<LocalVariable>]>,
        span: Span,
    ) -> R<()> {
        let targets = yields.unwrap_or(&[]);
        if targets.len() != values.len() {
            return Err(self.bug(span, "scf.yield arity differs from its region's results"));
        }
        for (&v, &local) in values.iter().zip(targets) {
            let e = self.val(v, span)?;
            self.fb.store_local(local, e);
        }
        Ok(())
    }

    /// `scf.if` with optional results.
    pub(super) fn lower_if(
        &mut self,
        op: &Op,
        cond: ValueId,
        then: &Block,
        otherwise: Option<&Block>,
    ) -> R<()> {
        let condition = self.val(cond, op.span)?;
        let locals = op
            .results
            .iter()
            .map(|&r| self.local_for(r, op.span))
            .collect::<R<Vec<_>>>()?;
        self.fb.open();
        self.block(then, Some(&locals))?;
        let accept = self.fb.close();
        self.fb.open();
        if let Some(b) = otherwise {
            self.block(b, Some(&locals))?;
        }
        let reject = self.fb.close();
        self.fb.stmt(Statement::If {
            condition,
            accept,
            reject,
        });
        for (&r, &local) in op.results.iter().zip(&locals) {
            let e = self.fb.load_local(local);
            self.set(r, Val::Expr(e));
        }
        Ok(())
    }

    /// `scf.for %iv = [lb to ub step st](%acc = %init)`:
    ///
    /// ```text
    /// iv = lb; acc = init
    /// loop { if !(iv < ub) { break }  body; acc = yielded }
    /// continuing { iv = iv + st }
    /// results = acc
    /// ```
    pub(super) fn lower_for(&mut self, op: &Op) -> R<()> {
        let OpKind::For {
            iv,
            lower,
            upper,
            step,
            iter_args,
            body,
        } = &op.kind
        else {
            return Err(self.bug(op.span, "lower_for on a non-loop op"));
        };
        let span = op.span;
        let (lb, ub, st) = (
            self.val(*lower, span)?,
            self.val(*upper, span)?,
            self.val(*step, span)?,
        );
        let iv_local = self.local_for(*iv, span)?;
        self.fb.store_local(iv_local, lb);
        let mut carried = Vec::with_capacity(iter_args.len());
        for &(arg, init) in iter_args {
            let local = self.local_for(arg, span)?;
            let e = self.val(init, span)?;
            self.fb.store_local(local, e);
            carried.push(local);
        }

        self.fb.open();
        let i = self.fb.load_local(iv_local);
        let done = self.fb.expr(Expression::Binary {
            op: BinaryOperator::GreaterEqual,
            left: i,
            right: ub,
        });
        self.fb.open();
        self.fb.stmt(Statement::Break);
        let accept = self.fb.close();
        self.fb.stmt(Statement::If {
            condition: done,
            accept,
            reject: naga::Block::new(),
        });
        self.set(*iv, Val::Expr(i));
        for (&(arg, _), &local) in iter_args.iter().zip(&carried) {
            let e = self.fb.load_local(local);
            self.set(arg, Val::Expr(e));
        }
        self.block(body, Some(&carried))?;
        let loop_body = self.fb.close();

        self.fb.open();
        let i = self.fb.load_local(iv_local);
        let next = self.fb.expr(Expression::Binary {
            op: BinaryOperator::Add,
            left: i,
            right: st,
        });
        self.fb.store_local(iv_local, next);
        let continuing = self.fb.close();

        self.fb.stmt(Statement::Loop {
            body: loop_body,
            continuing,
            break_if: None,
        });
        for (&r, &local) in op.results.iter().zip(&carried) {
            let e = self.fb.load_local(local);
            self.set(r, Val::Expr(e));
        }
        Ok(())
    }
}
