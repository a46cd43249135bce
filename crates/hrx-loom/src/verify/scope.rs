//! Names, scopes and SSA dominance.
//!
//! A function (the launch region with its workload arguments, or the body
//! with its launch arguments) is a stack of scopes, one per open region. A
//! value is visible from its definition to the end of the region that
//! defines it, including nested regions; that is exactly the set of uses it
//! dominates. A name may not be redefined while visible (no shadowing); a
//! sibling region may reuse a name once the first region has closed.

use crate::ir::ValueId;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a: names are short and not chosen to collide against a server
/// (loom sources are the user's own), so a cheap hash beats SipHash, which
/// would cost small kernels more than the linear scan it replaces.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;
type FastSet<K> = HashSet<K, BuildHasherDefault<Fnv>>;

/// Scopes of one function: the visible values in definition order with one
/// mark per open region, and an index from name to visible value. Because
/// no name may be redefined while visible, each name maps to at most one
/// value, so lookup and definition cost one hash probe whatever the size of
/// the function (a scan of the visible values made long kernels quadratic).
#[derive(Debug)]
pub(super) struct Scopes {
    /// Visible values, outermost first.
    visible: Vec<ValueId>,
    /// The visible value of each name.
    by_name: FastMap<String, ValueId>,
    /// Where each open scope starts in `visible` (innermost last).
    marks: Vec<usize>,
    /// Names of values whose region has closed (for a better message than
    /// "undefined").
    closed: FastSet<String>,
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
            by_name: FastMap::default(),
            marks: vec![0],
            closed: FastSet::default(),
        }
    }

    pub(super) fn push(&mut self) {
        self.marks.push(self.visible.len());
    }

    /// Close the innermost scope (never the outermost); `names` is the
    /// value table.
    pub(super) fn pop(&mut self, names: &[String]) {
        if self.marks.len() > 1
            && let Some(mark) = self.marks.pop()
        {
            for id in self.visible.drain(mark..) {
                let name = name_of(names, id);
                self.by_name.remove(name);
                self.closed.insert(name.to_string());
            }
        }
    }

    /// The visible value named `name`.
    pub(super) fn lookup(&self, name: &str) -> Result<ValueId, Unresolved> {
        if let Some(id) = self.by_name.get(name) {
            return Ok(*id);
        }
        if self.closed.contains(name) {
            Err(Unresolved::OutOfRegion)
        } else {
            Err(Unresolved::Undefined)
        }
    }

    /// Bind value `id` (named `names[id]`) in the innermost scope; `Err`
    /// with the visible value if the name is taken.
    pub(super) fn define(&mut self, id: ValueId, names: &[String]) -> Result<(), ValueId> {
        let name = name_of(names, id);
        if let Some(existing) = self.by_name.get(name) {
            return Err(*existing);
        }
        self.by_name.insert(name.to_string(), id);
        self.visible.push(id);
        Ok(())
    }
}
