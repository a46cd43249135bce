//! Names, scopes and SSA dominance.
//!
//! A function (the launch region with its workload arguments, or the body
//! with its launch arguments) is a stack of scopes, one per open region. A
//! value is visible from its definition to the end of the region that
//! defines it, including nested regions; that is exactly the set of uses it
//! dominates. A name may not be redefined while visible (no shadowing); a
//! sibling region may reuse a name once the first region has closed.

use crate::ir::ValueId;

/// Scopes of one function: a flat list of visible values with one mark per
/// open region. Names live in the builder's value table (`names`), so
/// binding a name allocates nothing and lookups compare strings directly
/// (functions are small; a reverse scan beats hashing).
#[derive(Debug)]
pub(super) struct Scopes {
    /// Visible values, outermost first.
    visible: Vec<ValueId>,
    /// Where each open scope starts in `visible` (innermost last).
    marks: Vec<usize>,
    /// Values whose region has closed (for a better message than
    /// "undefined").
    closed: Vec<ValueId>,
}

impl Default for Scopes {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a name does not resolve.
pub(super) enum Unresolved {
    /// Never defined (so far) in this function.
    Undefined,
    /// Defined in a region that has ended.
    OutOfRegion,
}

fn name_of(names: &[String], id: ValueId) -> &str {
    names.get(id.index()).map_or("", String::as_str)
}

impl Scopes {
    /// Open the function's outermost scope.
    pub(super) fn new() -> Self {
        Scopes {
            visible: Vec::with_capacity(32),
            marks: vec![0],
            closed: Vec::new(),
        }
    }

    pub(super) fn push(&mut self) {
        self.marks.push(self.visible.len());
    }

    /// Close the innermost scope (never the outermost).
    pub(super) fn pop(&mut self) {
        if self.marks.len() > 1
            && let Some(mark) = self.marks.pop()
        {
            self.closed.extend(self.visible.drain(mark..));
        }
    }

    /// The visible value named `name`; `names` is the value table.
    pub(super) fn lookup(&self, name: &str, names: &[String]) -> Result<ValueId, Unresolved> {
        if let Some(id) = self
            .visible
            .iter()
            .rev()
            .find(|id| name_of(names, **id) == name)
        {
            return Ok(*id);
        }
        if self.closed.iter().any(|id| name_of(names, *id) == name) {
            Err(Unresolved::OutOfRegion)
        } else {
            Err(Unresolved::Undefined)
        }
    }

    /// Bind value `id` (named `names[id]`) in the innermost scope; `Err`
    /// with the visible value if the name is taken.
    pub(super) fn define(&mut self, id: ValueId, names: &[String]) -> Result<(), ValueId> {
        if let Ok(existing) = self.lookup(name_of(names, id), names) {
            return Err(existing);
        }
        self.visible.push(id);
        Ok(())
    }
}
