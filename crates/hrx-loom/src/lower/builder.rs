//! A function builder over naga's arenas that keeps `Emit` ranges right.
//!
//! naga requires every non-constant expression to be covered by exactly one
//! `Statement::Emit` before its first use, while constant-like expressions
//! (literals, globals, locals, arguments) and statement results (atomic and
//! subgroup results) must never be. The builder tracks one open range and
//! closes it whenever one of the latter is added or a statement is pushed,
//! so callers just add expressions and statements in program order.

use naga::proc::Emitter;
use naga::{Arena, Block, Expression, Handle, LocalVariable, Span, Statement, Type, UniqueArena};

/// Builds one function body: expressions, locals and nested blocks.
pub(crate) struct FnBuilder {
    pub(crate) expressions: Arena<Expression>,
    pub(crate) locals: Arena<LocalVariable>,
    /// Open blocks; the last is where statements go.
    blocks: Vec<Block>,
    emitter: Emitter,
    /// Span attached to what is added next (the loom op being lowered).
    pub(crate) span: Span,
}

impl FnBuilder {
    pub(crate) fn new() -> Self {
        FnBuilder {
            expressions: Arena::new(),
            locals: Arena::new(),
            blocks: vec![Block::new()],
            emitter: Emitter::default(),
            span: Span::UNDEFINED,
        }
    }

    /// Add an expression, emitting it when naga requires that.
    pub(crate) fn expr(&mut self, e: Expression) -> Handle<Expression> {
        let unemitted = e.needs_pre_emit()
            || matches!(
                e,
                Expression::AtomicResult { .. } | Expression::SubgroupOperationResult { .. }
            );
        if unemitted {
            self.flush();
        } else if !self.emitter.is_running() {
            self.emitter.start(&self.expressions);
        }
        self.expressions.append(e, self.span)
    }

    /// Close the open emit range, if any, into the current block.
    fn flush(&mut self) {
        if self.emitter.is_running() {
            let emitted = self.emitter.finish(&self.expressions);
            self.current().extend(emitted);
        }
    }

    fn current(&mut self) -> &mut Block {
        // `blocks` is never empty: `new` pushes one and `close` refuses to
        // pop the last.
        let last = self.blocks.len() - 1;
        &mut self.blocks[last]
    }

    /// Push a statement after every expression added so far.
    pub(crate) fn stmt(&mut self, s: Statement) {
        self.flush();
        let span = self.span;
        self.current().push(s, span);
    }

    /// Start a nested block (an `If` arm or a loop body).
    pub(crate) fn open(&mut self) {
        self.flush();
        self.blocks.push(Block::new());
    }

    /// Finish the innermost nested block and return it.
    pub(crate) fn close(&mut self) -> Block {
        self.flush();
        if self.blocks.len() > 1 {
            self.blocks.pop().unwrap_or_default()
        } else {
            Block::new()
        }
    }

    /// A function-local variable of type `ty`, uninitialised.
    pub(crate) fn local(&mut self, name: &str, ty: Handle<Type>) -> Handle<LocalVariable> {
        self.locals.append(
            LocalVariable {
                name: Some(name.to_string()),
                ty,
                init: None,
            },
            self.span,
        )
    }

    /// Load the current value of a local.
    pub(crate) fn load_local(&mut self, var: Handle<LocalVariable>) -> Handle<Expression> {
        let pointer = self.expr(Expression::LocalVariable(var));
        self.expr(Expression::Load { pointer })
    }

    /// Store `value` into a local.
    pub(crate) fn store_local(&mut self, var: Handle<LocalVariable>, value: Handle<Expression>) {
        let pointer = self.expr(Expression::LocalVariable(var));
        self.stmt(Statement::Store { pointer, value });
    }

    /// Finish the function: the body block, expressions and locals.
    pub(crate) fn finish(mut self) -> (Block, Arena<Expression>, Arena<LocalVariable>) {
        self.flush();
        let body = self.blocks.swap_remove(0);
        (body, self.expressions, self.locals)
    }
}

/// Intern a type.
pub(crate) fn ty(types: &mut UniqueArena<Type>, inner: naga::TypeInner) -> Handle<Type> {
    types.insert(Type { name: None, inner }, Span::UNDEFINED)
}
