//! Buffer access inference and the read-only rule.
//!
//! Every buffer or view value traces to one buffer (a launch argument or a
//! `buffer.alloca`), because views cannot pass through `scf` results or
//! `scalar.select`. Loads read that buffer, stores write it, atomics do
//! both. **The read-only rule:** a buffer argument declared
//! `%b: buffer {readonly}` may not be written: a store or atomic through
//! any view derived from it is error E0404. Undeclared buffers get the
//! access their uses imply (read-only when nothing writes them).

use crate::diag::{Diagnostics, codes};
use crate::ir::{BufferAccess, BufferRef, Kernel, OpKind, Type, ValueId};

pub(super) fn infer(kernel: &mut Kernel, diags: &mut Diagnostics) {
    let mut buffer_of = vec![None; kernel.value_types.len()];
    for (i, a) in kernel.args.iter().enumerate() {
        if a.ty == Type::Buffer
            && let Some(slot) = buffer_of.get_mut(a.id.index())
        {
            *slot = Some(BufferRef::Arg(i));
        }
    }
    let mut access = vec![BufferAccess::default(); kernel.args.len()];
    let name = |id: ValueId| {
        kernel
            .value_names
            .get(id.index())
            .map_or("?", String::as_str)
    };
    kernel.body.for_each_op(|op| {
        let (view, read, written) = match &op.kind {
            OpKind::Alloca { .. } => {
                if let Some(r) = op.results.first() {
                    buffer_of[r.index()] = Some(BufferRef::Alloca(*r));
                }
                return;
            }
            OpKind::BufferView { buffer, .. } => {
                if let Some(r) = op.results.first() {
                    buffer_of[r.index()] = buffer_of.get(buffer.index()).copied().flatten();
                }
                return;
            }
            OpKind::ViewLoad { view, .. }
            | OpKind::VectorLoad { view, .. }
            | OpKind::CoopLoad { view, .. } => (*view, true, false),
            OpKind::ViewStore { view, .. }
            | OpKind::VectorStore { view, .. }
            | OpKind::CoopStore { view, .. } => (*view, false, true),
            OpKind::AtomicRmw { view, .. } => (*view, true, true),
            _ => return,
        };
        let Some(BufferRef::Arg(i)) = buffer_of.get(view.index()).copied().flatten() else {
            return;
        };
        let Some(arg) = kernel.args.get(i) else {
            return;
        };
        if written && arg.readonly {
            diags.error(
                op.span,
                codes::READONLY_WRITE,
                format!(
                    "write through %{}, a view of read-only buffer %{} (declared `{{readonly}}`)",
                    name(view),
                    arg.name
                ),
            );
        }
        if let Some(a) = access.get_mut(i) {
            a.read |= read;
            a.written |= written;
        }
    });
    kernel.buffer_of = buffer_of;
    kernel.buffer_access = access;
}
