//! A pre-pass that decides how each buffer is declared in the module.
//!
//! The rule (documented in the loom reference):
//! - A buffer viewed with one element type is an array of that type.
//! - If it is accessed through 4-lane `vector.load`/`vector.store` of a
//!   32- or 16-bit type, and every access (vector or cooperative matrix)
//!   is at an element index provably a multiple of 4, through views whose
//!   rows (the last dimension, for views of 2 or more) are provably a
//!   multiple of 4 long, at a byte offset provably a multiple of the
//!   vector's size, it is declared as an array of 4-vectors: each vector
//!   access is one 16-byte (8-byte for f16) load or store, and cooperative
//!   matrices are loaded from it with the stride counted in 4-vectors.
//! - A buffer viewed with several 32-bit element types is an array of `u32`
//!   words, and every access bitcasts.
//! - A buffer with atomic accesses is an array of `atomic<T>` and must be
//!   viewed with exactly one element type; every plain load and store of it
//!   becomes an atomic load or store.
//! - Mixing f16 with 32-bit element types on one buffer is rejected.

use crate::diag::Diagnostics;
use crate::ir::{BufferRef, Dim, Kernel, Op, OpKind, Scalar, Type, ValueId};
use std::collections::HashMap;

/// Diagnostic code: a buffer viewed with element types that cannot share
/// one declaration.
pub const E_MIXED_ELEMENTS: &str = "E0603";

/// How a buffer's array is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `array<T>` (or `array<atomic<T>>` when `atomic`).
    Scalar(Scalar),
    /// `array<vec4<T>>`: every access is an aligned 4-lane vector.
    Vec4(Scalar),
    /// `array<u32>`, accessed with bitcasts.
    Words,
}

impl Layout {
    /// Bytes of one declared array element.
    pub(crate) fn element_bytes(self) -> u32 {
        match self {
            Layout::Scalar(s) => s.bytes(),
            Layout::Vec4(s) => 4 * s.bytes(),
            Layout::Words => 4,
        }
    }
}

/// The decision for one buffer.
#[derive(Clone, Debug)]
pub(crate) struct BufferPlan {
    pub(crate) layout: Layout,
    pub(crate) atomic: bool,
    /// Static extent in bytes, when every view of it is static.
    pub(crate) min_bytes: Option<u64>,
}

/// Facts collected for one buffer while scanning.
#[derive(Default)]
struct Facts {
    elems: Vec<(Scalar, crate::front::span::Span)>,
    atomic: bool,
    /// Whether every access so far qualifies for the vec4 layout.
    vec4_ok: bool,
    /// Whether some access is a 4-lane vector (the reason to pick vec4).
    vectored: bool,
    extent: Option<Option<u64>>,
    /// The first cooperative matrix access (refuses word and atomic layouts).
    coop: Option<crate::front::span::Span>,
}

/// Every buffer's plan, and the known power-of-two factor of index values.
pub(crate) struct Plan {
    buffers: HashMap<(bool, usize), BufferPlan>,
}

fn key(r: BufferRef) -> (bool, usize) {
    match r {
        BufferRef::Arg(n) => (false, n),
        BufferRef::Alloca(v) => (true, v.index()),
    }
}

impl Plan {
    /// The plan for `r`; `None` when the buffer is never viewed.
    pub(crate) fn get(&self, r: BufferRef) -> Option<&BufferPlan> {
        self.buffers.get(&key(r))
    }

    /// Scan `kernel`; `known` gives compile-time constants of values.
    pub(crate) fn build(
        kernel: &Kernel,
        known: &dyn Fn(ValueId) -> Option<u32>,
        diags: &mut Diagnostics,
    ) -> Plan {
        let n = kernel.value_types.len();
        // Known trailing zero bits of index values (32 for zero). Wrapping
        // u32 arithmetic keeps divisibility by powers of two, so this holds
        // for the device's values too.
        let mut tz = vec![0u32; n];
        let mut facts: HashMap<(bool, usize), Facts> = HashMap::new();
        let buffer_of = |v: ValueId| kernel.buffer_of.get(v.index()).copied().flatten();
        let view_of = |v: ValueId| match kernel.ty(v) {
            Some(Type::View(vt)) => Some(vt),
            _ => None,
        };
        let mut stack: Vec<std::slice::Iter<'_, Op>> = vec![kernel.body.ops.iter()];
        while let Some(top) = stack.last_mut() {
            let Some(op) = top.next() else {
                stack.pop();
                continue;
            };
            let tzof = |tz: &[u32], v: &ValueId| tz.get(v.index()).copied().unwrap_or(0);
            let result = op.results.first().map(|r| r.index()).filter(|&r| r < n);
            match &op.kind {
                OpKind::If {
                    then, otherwise, ..
                } => {
                    if let Some(b) = otherwise {
                        stack.push(b.ops.iter());
                    }
                    stack.push(then.ops.iter());
                }
                OpKind::For { body, .. } => stack.push(body.ops.iter()),
                OpKind::IndexConstant(c) => {
                    if let Some(r) = result {
                        tz[r] = c.trailing_zeros();
                    }
                }
                OpKind::IndexBinary(op2, a, b) => {
                    use crate::ir::IndexBinary as B;
                    let (x, y) = (tzof(&tz, a), tzof(&tz, b));
                    let t = match op2 {
                        B::Add | B::Sub | B::Min | B::Max => x.min(y),
                        B::Mul => (x + y).min(32),
                        B::Div | B::Rem => 0,
                    };
                    if let Some(r) = result {
                        tz[r] = t;
                    }
                }
                OpKind::IndexMadd(a, b, c) => {
                    let t = (tzof(&tz, a) + tzof(&tz, b)).min(32).min(tzof(&tz, c));
                    if let Some(r) = result {
                        tz[r] = t;
                    }
                }
                OpKind::IndexCast { value, .. } => {
                    if let Some(r) = result {
                        tz[r] = tzof(&tz, value);
                    }
                }
                OpKind::BufferView {
                    buffer,
                    byte_offset,
                    view,
                } => {
                    let Some(b) = buffer_of(*buffer) else {
                        continue;
                    };
                    let f = facts.entry(key(b)).or_insert_with(|| Facts {
                        vec4_ok: true,
                        ..Facts::default()
                    });
                    f.elems.push((view.elem, op.span));
                    // Rows of a multiple of 4 elements keep an element
                    // index's alignment in the linear index.
                    let rows_aligned = match view.dims.as_slice() {
                        [_] => true,
                        [.., Dim::Static(n)] => n.trailing_zeros() >= 2,
                        [.., Dim::Dynamic(v)] => tzof(&tz, v) >= 2,
                        [] => false,
                    };
                    let vector_bytes = 4 * view.elem.bytes();
                    let aligned = rows_aligned
                        && matches!(view.elem.bytes(), 2 | 4)
                        && tzof(&tz, byte_offset) >= vector_bytes.trailing_zeros();
                    f.vec4_ok &= aligned;
                    let extent = static_extent(view, known(*byte_offset));
                    f.extent = Some(match f.extent {
                        None => extent,
                        Some(prev) => prev.zip(extent).map(|(a, b)| a.max(b)),
                    });
                }
                OpKind::ViewLoad { view, .. } | OpKind::ViewStore { view, .. } => {
                    if let Some(f) = buffer_of(*view).and_then(|b| facts.get_mut(&key(b))) {
                        f.vec4_ok = false;
                    }
                }
                OpKind::CoopLoad { view, indices, .. }
                | OpKind::CoopStore { view, indices, .. } => {
                    let idx_ok = indices.last().is_some_and(|i| tzof(&tz, i) >= 2);
                    if let Some(f) = buffer_of(*view).and_then(|b| facts.get_mut(&key(b))) {
                        f.vec4_ok &= idx_ok;
                        f.coop.get_or_insert(op.span);
                    }
                }
                OpKind::AtomicRmw { view, .. } => {
                    if let Some(f) = buffer_of(*view).and_then(|b| facts.get_mut(&key(b))) {
                        f.vec4_ok = false;
                        f.atomic = true;
                    }
                }
                OpKind::VectorLoad { view, indices }
                | OpKind::VectorStore { view, indices, .. } => {
                    let lanes = match &op.kind {
                        OpKind::VectorLoad { .. } => result.and_then(|r| kernel.value_types.get(r)),
                        OpKind::VectorStore { value, .. } => kernel.ty(*value),
                        _ => None,
                    };
                    let four = matches!(lanes, Some(Type::Vector { len: 4, .. }));
                    let idx_ok = indices.last().is_some_and(|i| tzof(&tz, i) >= 2);
                    let rank_ok = view_of(*view).is_some_and(|v| v.dims.len() == indices.len());
                    if let Some(f) = buffer_of(*view).and_then(|b| facts.get_mut(&key(b))) {
                        f.vec4_ok &= four && idx_ok && rank_ok;
                        f.vectored = true;
                    }
                }
                _ => {}
            }
        }
        let mut buffers = HashMap::new();
        for (k, f) in facts {
            let Some(&(first, _)) = f.elems.first() else {
                continue;
            };
            let mixed = f.elems.iter().find(|(e, _)| *e != first);
            let layout = match mixed {
                None if f.vec4_ok && f.vectored && !f.atomic => Layout::Vec4(first),
                None => Layout::Scalar(first),
                Some(&(other, span)) => {
                    let all_words = f.elems.iter().all(|(e, _)| e.bytes() == 4);
                    if !all_words || f.atomic {
                        diags.error(
                            span,
                            E_MIXED_ELEMENTS,
                            format!(
                                "buffer viewed as both {first:?} and {other:?}: one buffer may mix \
                                 only 32-bit element types, and not with atomics"
                            ),
                        );
                    }
                    Layout::Words
                }
            };
            if let Some(span) = f.coop
                && (f.atomic || layout == Layout::Words)
            {
                diags.error(
                    span,
                    E_MIXED_ELEMENTS,
                    "a buffer used by cooperative matrix loads or stores must be viewed with one \
                     element type and no atomics",
                );
            }
            buffers.insert(
                k,
                BufferPlan {
                    layout,
                    atomic: f.atomic,
                    min_bytes: f.extent.flatten(),
                },
            );
        }
        Plan { buffers }
    }
}

/// `offset + product(dims) * elem` when everything is static.
fn static_extent(view: &crate::ir::ViewType, offset: Option<u32>) -> Option<u64> {
    let mut elems: u64 = 1;
    for d in &view.dims {
        match d {
            Dim::Static(n) => elems = elems.checked_mul(*n)?,
            Dim::Dynamic(_) => return None,
        }
    }
    elems
        .checked_mul(u64::from(view.elem.bytes()))?
        .checked_add(u64::from(offset?))
}
