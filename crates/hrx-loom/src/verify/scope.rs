//! Names, scopes and SSA dominance.
//!
//! A function (the launch region with its workload arguments, or the body
//! with its launch arguments) is a stack of scopes, one per open region. A
//! value is visible from its definition to the end of the region that
//! defines it, including nested regions; that is exactly the set of uses it
//! dominates. A name may not be redefined while visible (no shadowing); a
//! sibling region may reuse a name once the first region has closed.

use crate::front::ast::Ident;
use crate::front::span::Span;
use crate::ir::ValueId;
use std::collections::HashMap;

/// Scopes of one function.
#[derive(Debug, Default)]
pub(super) struct Scopes {
    stack: Vec<HashMap<String, ValueId>>,
    /// Names whose region has closed (for a better message than
    /// "undefined").
    closed: HashMap<String, Span>,
}

/// Why a name does not resolve.
pub(super) enum Unresolved {
    /// Never defined (so far) in this function.
    Undefined,
    /// Defined in a region that has ended.
    OutOfRegion,
}

impl Scopes {
    /// Open the function's outermost scope.
    pub(super) fn new() -> Self {
        Scopes {
            stack: vec![HashMap::new()],
            closed: HashMap::new(),
        }
    }

    pub(super) fn push(&mut self) {
        self.stack.push(HashMap::new());
    }

    /// Close the innermost scope; `span_of` gives definition spans.
    pub(super) fn pop(&mut self, span_of: impl Fn(ValueId) -> Span) {
        if self.stack.len() > 1
            && let Some(scope) = self.stack.pop()
        {
            for (name, id) in scope {
                self.closed.insert(name, span_of(id));
            }
        }
    }

    /// The visible value named `name`.
    pub(super) fn lookup(&self, name: &str) -> Result<ValueId, Unresolved> {
        for scope in self.stack.iter().rev() {
            if let Some(id) = scope.get(name) {
                return Ok(*id);
            }
        }
        match self.closed.get(name) {
            Some(_) => Err(Unresolved::OutOfRegion),
            None => Err(Unresolved::Undefined),
        }
    }

    /// Bind `name` in the innermost scope; `Err` with the visible value if
    /// the name is taken.
    pub(super) fn define(&mut self, name: &Ident, id: ValueId) -> Result<(), ValueId> {
        if let Ok(existing) = self.lookup(&name.text) {
            return Err(existing);
        }
        if let Some(scope) = self.stack.last_mut() {
            scope.insert(name.text.clone(), id);
        }
        Ok(())
    }
}
