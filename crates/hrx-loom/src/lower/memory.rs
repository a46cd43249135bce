//! Views, workgroup allocations, loads, stores and atomics.
//!
//! A view is a base element index into its buffer's array plus the extents
//! of its inner dimensions. Element `(i0, .., in)` of a view is array
//! element `base + ((i0 * d1 + i1) * d2 + ..) + in` (row-major), with
//! `base = byte_offset / element_bytes` (byte offsets must be multiples of
//! the element size). All arithmetic is `u32` and wraps, as on the device.

use super::plan::Layout;
use super::{E_VIEW_OFFSET, E_WORKGROUP_MEMORY, Global, Lowerer, R, Val, types};
use crate::front::span::Span;
use crate::ir::{AtomicOp, BufferRef, Dim, Op, OpKind, Scalar, Type, ValueId, ViewType};
use naga::{BinaryOperator as B, Expression, Handle, ScalarKind, Statement};

/// Bytes every workgroup allocation is rounded up to (see `alloca`).
const WORKGROUP_GRANULE: u32 = 16;

type H = Handle<Expression>;

/// A lowered view value.
#[derive(Clone)]
pub(crate) struct ViewVal {
    /// Key of the buffer in `Lowerer::globals`.
    buffer: (bool, usize),
    /// Base element index (in view elements).
    base: H,
    /// Whether `base` is the constant 0 (skips an add per access).
    base_zero: bool,
    /// Extents of dimensions 1.. (dimension 0 does not affect indexing).
    inner_dims: Vec<H>,
    elem: Scalar,
}

impl Lowerer<'_> {
    /// Memory, subgroup and coordinate ops.
    pub(super) fn other_op(&mut self, op: &Op) -> R<()> {
        let span = op.span;
        match &op.kind {
            OpKind::BufferView {
                buffer,
                byte_offset,
                view,
            } => self.buffer_view(op, *buffer, *byte_offset, view),
            OpKind::Alloca { bytes, .. } => self.alloca(op, *bytes),
            OpKind::ViewLoad { view, indices } => {
                let (pointer, g, elem) = self.element(*view, indices, span)?;
                let raw = self.fb.expr(Expression::Load { pointer });
                let v = self.loaded_value(raw, g.layout, elem);
                let r = self.result(&op.results, span)?;
                self.set(r, Val::Expr(v));
                Ok(())
            }
            OpKind::ViewStore {
                value,
                view,
                indices,
            } => {
                let (pointer, g, elem) = self.element(*view, indices, span)?;
                let v = self.val(*value, span)?;
                let v = self.stored_value(v, g.layout, elem);
                self.fb.stmt(Statement::Store { pointer, value: v });
                Ok(())
            }
            OpKind::VectorLoad { view, indices } => self.vector_load(op, *view, indices),
            OpKind::VectorStore {
                value,
                view,
                indices,
            } => self.vector_store(*value, *view, indices, span),
            OpKind::AtomicRmw {
                op: a,
                value,
                view,
                indices,
            } => self.atomic(op, *a, *value, *view, indices),
            OpKind::CoopLoad { .. }
            | OpKind::CoopStore { .. }
            | OpKind::CoopMma(..)
            | OpKind::CoopZero => self.coop_op(op),
            _ => self.kernel_op(op),
        }
    }

    fn buffer_view(&mut self, op: &Op, buffer: ValueId, off: ValueId, vt: &ViewType) -> R<()> {
        let span = op.span;
        let r = self.result(&op.results, span)?;
        let Some(bref) = self.kernel.buffer_of.get(buffer.index()).copied().flatten() else {
            return Err(self.bug(span, "buffer.view of an unknown buffer"));
        };
        let key = match bref {
            BufferRef::Arg(n) => (false, n),
            BufferRef::Alloca(v) => (true, v.index()),
        };
        let elem_bytes = vt.elem.bytes();
        let known = self.known.get(off.index()).copied().flatten();
        let (base, base_zero) = match known {
            Some(b) if b % elem_bytes != 0 => {
                let msg = format!(
                    "view byte offset {b} is not a multiple of the element size ({elem_bytes} bytes)"
                );
                return Err(self.fail(span, E_VIEW_OFFSET, &msg));
            }
            Some(b) => (self.lit_u32(b / elem_bytes), b / elem_bytes == 0),
            None => {
                let o = self.val(off, span)?;
                let eb = self.lit_u32(elem_bytes);
                (self.binary(B::Divide, o, eb), false)
            }
        };
        let mut inner_dims = Vec::new();
        for d in vt.dims.iter().skip(1) {
            inner_dims.push(match d {
                Dim::Static(n) => match u32::try_from(*n) {
                    Ok(n) => self.lit_u32(n),
                    Err(_) => {
                        let msg = format!("view extent {n} does not fit 32 bits");
                        return Err(self.fail(span, E_VIEW_OFFSET, &msg));
                    }
                },
                Dim::Dynamic(v) => self.val(*v, span)?,
            });
        }
        self.set(
            r,
            Val::View(ViewVal {
                buffer: key,
                base,
                base_zero,
                inner_dims,
                elem: vt.elem,
            }),
        );
        Ok(())
    }

    /// `buffer.alloca<workgroup>`: a fixed-size workgroup array, declared
    /// with the element type its views use.
    fn alloca(&mut self, op: &Op, bytes: ValueId) -> R<()> {
        let span = op.span;
        let r = self.result(&op.results, span)?;
        let Some(size) = self.known.get(bytes.index()).copied().flatten() else {
            let msg = "workgroup allocation size is not a compile-time constant";
            return Err(self.fail(span, E_WORKGROUP_MEMORY, msg));
        };
        let Some(plan) = self.plan.get(BufferRef::Alloca(r)).cloned() else {
            return Ok(()); // never viewed: nothing to declare
        };
        // SPIR-V cannot state a workgroup variable's alignment, and drivers
        // pack the variables one after another: whole 16-byte granules keep
        // every allocation 16-byte aligned whatever precedes it (cooperative
        // loads need that; on the H200 a 4-byte flag declared before a tile
        // shifted the tile's fragments by 4 bytes).
        let limit = self.target.workgroup_memory_bytes;
        let Some(size) = size
            .checked_next_multiple_of(WORKGROUP_GRANULE)
            .filter(|size| *size <= limit)
        else {
            let msg = format!(
                "workgroup allocation of {size} bytes exceeds target `{}`'s {limit} bytes of workgroup memory",
                self.target.name
            );
            return Err(self.fail(span, E_WORKGROUP_MEMORY, &msg));
        };
        let count = size / plan.layout.element_bytes();
        let Some(count) = std::num::NonZeroU32::new(count) else {
            let msg = format!("workgroup allocation of {size} bytes holds no element");
            return Err(self.fail(span, E_WORKGROUP_MEMORY, msg));
        };
        self.workgroup_bytes += u64::from(size);
        if self.workgroup_bytes > u64::from(self.target.workgroup_memory_bytes) {
            let msg = format!(
                "workgroup allocations total {} bytes; target `{}` has {}",
                self.workgroup_bytes, self.target.name, self.target.workgroup_memory_bytes
            );
            return Err(self.fail(span, E_WORKGROUP_MEMORY, msg));
        }
        let name = self
            .kernel
            .value_names
            .get(r.index())
            .cloned()
            .unwrap_or_default();
        let g = types::workgroup_global(&mut self.module, &name, plan.layout, plan.atomic, count);
        // Globals are valid everywhere: no emit needed wherever this sits.
        let expr = self.fb.expr(Expression::GlobalVariable(g));
        let global = Global {
            expr,
            layout: plan.layout,
            atomic: plan.atomic,
        };
        self.globals.insert((true, r.index()), global);
        Ok(())
    }

    fn view(&mut self, id: ValueId, span: Span) -> R<(ViewVal, Global)> {
        let Some(Val::View(v)) = self.values.get(id.index()).cloned() else {
            return Err(self.bug(span, "view used before definition"));
        };
        match self.globals.get(&v.buffer).copied() {
            Some(g) => Ok((v, g)),
            None => Err(self.bug(span, "view of an undeclared buffer")),
        }
    }

    /// Row-major linear element index of `indices` in view `v`.
    fn linear(&mut self, v: &ViewVal, indices: &[ValueId], span: Span) -> R<H> {
        let Some((first, rest)) = indices.split_first() else {
            return Err(self.bug(span, "view access without indices"));
        };
        if rest.len() != v.inner_dims.len() {
            return Err(self.bug(span, "index count differs from view rank"));
        }
        let mut acc = self.val(*first, span)?;
        for (i, &d) in rest.iter().zip(&v.inner_dims) {
            let i = self.val(*i, span)?;
            let scaled = self.binary(B::Multiply, acc, d);
            acc = self.binary(B::Add, scaled, i);
        }
        Ok(if v.base_zero {
            acc
        } else {
            self.binary(B::Add, v.base, acc)
        })
    }

    /// Pointer to array element `index` of the global.
    fn at(&mut self, g: Global, index: H) -> H {
        self.fb.expr(Expression::Access {
            base: g.expr,
            index,
        })
    }

    /// Pointer to one view element (scalar layouts only).
    fn element(
        &mut self,
        view: ValueId,
        indices: &[ValueId],
        span: Span,
    ) -> R<(H, Global, Scalar)> {
        let (v, g) = self.view(view, span)?;
        if let Layout::Vec4(_) = g.layout {
            return Err(self.bug(span, "scalar access to a vec4-declared buffer"));
        }
        let index = self.linear(&v, indices, span)?;
        Ok((self.at(g, index), g, v.elem))
    }

    /// Pointer to the view element at `indices` (for a cooperative load or
    /// store) and the view's row length, the stride between matrix rows.
    pub(super) fn coop_pointer(
        &mut self,
        view: ValueId,
        indices: &[ValueId],
        span: Span,
    ) -> R<(H, H)> {
        let (v, g) = self.view(view, span)?;
        if matches!(g.layout, Layout::Words) || g.atomic {
            return Err(self.bug(span, "cooperative access to a buffer of words or atomics"));
        }
        let Some(&stride) = v.inner_dims.last() else {
            return Err(self.bug(span, "cooperative access through a 1-D view"));
        };
        let index = self.linear(&v, indices, span)?;
        if let Layout::Vec4(_) = g.layout {
            // The plan proved the index and the row length multiples of
            // 4; the stride counts the array's elements, 4-vectors.
            let two = self.lit_u32(2);
            let q = self.binary(B::ShiftRight, index, two);
            let stride = self.binary(B::ShiftRight, stride, two);
            return Ok((self.at(g, q), stride));
        }
        Ok((self.at(g, index), stride))
    }

    /// A value read from storage, as the view's element type.
    fn loaded_value(&mut self, raw: H, layout: Layout, elem: Scalar) -> H {
        match layout {
            Layout::Words if elem != Scalar::U32 => self.bitcast(raw, types::scalar(elem).kind),
            _ => raw,
        }
    }

    /// A value to write to storage, from the view's element type.
    fn stored_value(&mut self, v: H, layout: Layout, elem: Scalar) -> H {
        match layout {
            Layout::Words if elem != Scalar::U32 => self.bitcast(v, ScalarKind::Uint),
            _ => v,
        }
    }

    fn vector_len(&mut self, t: &Type, span: Span) -> R<(u8, naga::VectorSize)> {
        match t {
            Type::Vector { len, .. } => match types::vector_size(*len) {
                Some(size) => Ok((*len, size)),
                None => Err(self.bug(span, "bad vector length")),
            },
            _ => Err(self.bug(span, "vector access with a non-vector type")),
        }
    }

    fn vector_load(&mut self, op: &Op, view: ValueId, indices: &[ValueId]) -> R<()> {
        let span = op.span;
        let r = self.result(&op.results, span)?;
        let t = self.ty_of(r, span)?;
        let (len, _) = self.vector_len(&t, span)?;
        let (v, g) = self.view(view, span)?;
        let index = self.linear(&v, indices, span)?;
        let value = if let Layout::Vec4(_) = g.layout {
            // The plan proved `index` is a multiple of 4.
            let two = self.lit_u32(2);
            let q = self.binary(B::ShiftRight, index, two);
            let pointer = self.at(g, q);
            self.fb.expr(Expression::Load { pointer })
        } else {
            let mut lanes = Vec::with_capacity(len as usize);
            for lane in 0..u32::from(len) {
                let i = if lane == 0 {
                    index
                } else {
                    let k = self.lit_u32(lane);
                    self.binary(B::Add, index, k)
                };
                let pointer = self.at(g, i);
                let raw = self.fb.expr(Expression::Load { pointer });
                lanes.push(self.loaded_value(raw, g.layout, v.elem));
            }
            let ty = self.value_type(&t, span)?;
            self.fb.expr(Expression::Compose {
                ty,
                components: lanes,
            })
        };
        self.set(r, Val::Expr(value));
        Ok(())
    }

    fn vector_store(
        &mut self,
        value: ValueId,
        view: ValueId,
        idx: &[ValueId],
        span: Span,
    ) -> R<()> {
        let t = self.ty_of(value, span)?;
        let (len, _) = self.vector_len(&t, span)?;
        let vec = self.val(value, span)?;
        let (v, g) = self.view(view, span)?;
        let index = self.linear(&v, idx, span)?;
        if let Layout::Vec4(_) = g.layout {
            let two = self.lit_u32(2);
            let q = self.binary(B::ShiftRight, index, two);
            let pointer = self.at(g, q);
            self.fb.stmt(Statement::Store {
                pointer,
                value: vec,
            });
            return Ok(());
        }
        for lane in 0..u32::from(len) {
            let i = if lane == 0 {
                index
            } else {
                let k = self.lit_u32(lane);
                self.binary(B::Add, index, k)
            };
            let x = self.fb.expr(Expression::AccessIndex {
                base: vec,
                index: lane,
            });
            let x = self.stored_value(x, g.layout, v.elem);
            let pointer = self.at(g, i);
            self.fb.stmt(Statement::Store { pointer, value: x });
        }
        Ok(())
    }

    /// The interned naga type of a loom value type.
    pub(crate) fn value_type(&mut self, t: &Type, span: Span) -> R<Handle<naga::Type>> {
        match types::value_inner(t) {
            Some(inner) => Ok(super::builder::ty(&mut self.module.types, inner)),
            None => Err(self.bug(span, "buffer or view used as a value")),
        }
    }

    fn atomic(
        &mut self,
        op: &Op,
        a: AtomicOp,
        value: ValueId,
        view: ValueId,
        idx: &[ValueId],
    ) -> R<()> {
        let span = op.span;
        let r = self.result(&op.results, span)?;
        let (pointer, g, elem) = self.element(view, idx, span)?;
        if !g.atomic {
            return Err(self.bug(span, "atomic on a buffer not declared atomic"));
        }
        let operand = self.val(value, span)?;
        let fun = match a {
            AtomicOp::Add => naga::AtomicFunction::Add,
            AtomicOp::Sub => naga::AtomicFunction::Subtract,
            AtomicOp::Max => naga::AtomicFunction::Max,
            AtomicOp::Min => naga::AtomicFunction::Min,
            AtomicOp::And => naga::AtomicFunction::And,
            AtomicOp::Or => naga::AtomicFunction::InclusiveOr,
            AtomicOp::Xor => naga::AtomicFunction::ExclusiveOr,
            AtomicOp::Exchange => naga::AtomicFunction::Exchange { compare: None },
        };
        let ty = self.value_type(&elem.to_type(), span)?;
        let result = self.fb.expr(Expression::AtomicResult {
            ty,
            comparison: false,
        });
        self.fb.stmt(Statement::Atomic {
            pointer,
            fun,
            value: operand,
            result: Some(result),
        });
        self.set(r, Val::Expr(result));
        Ok(())
    }
}
