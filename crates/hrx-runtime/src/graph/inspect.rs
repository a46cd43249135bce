//! Read-only inspection of a graph's recorded operations, for tools that
//! replay the same work by other means (the inference benchmark's raw-Vulkan
//! baseline) or print it. Nothing here changes what a graph records.

use super::op::Op;
use crate::{BufferView, GpuKernel};

/// One recorded operation, as [`Graph::operations`](super::Graph::operations)
/// shows it: exactly the arguments that were checked and will be recorded.
#[derive(Clone, Copy, Debug)]
pub enum Operation<'a> {
    /// [`Graph::copy`](super::Graph::copy): `dst <- src`.
    Copy {
        /// The destination view.
        dst: &'a BufferView,
        /// The source view, of the same length.
        src: &'a BufferView,
    },
    /// [`Graph::fill`](super::Graph::fill): `view <- value` repeated.
    Fill {
        /// The filled view.
        view: &'a BufferView,
        /// The 32-bit word written.
        value: u32,
    },
    /// [`Graph::dispatch`](super::Graph::dispatch).
    Dispatch {
        /// The kernel (its SPIR-V through [`GpuKernel::spirv`], its contract
        /// through [`GpuKernel::contract`]).
        kernel: &'a GpuKernel,
        /// The views bound at bindings 0.. of set 0, in order.
        views: &'a [BufferView],
        /// The push-constant block, at offset 0.
        constants: &'a [u8],
        /// The workgroup counts.
        workgroups: [u32; 3],
    },
}

impl<'a> From<&'a Op> for Operation<'a> {
    fn from(op: &'a Op) -> Self {
        match op {
            Op::Copy { dst, src } => Operation::Copy { dst, src },
            Op::Fill { view, value } => Operation::Fill {
                view,
                value: *value,
            },
            Op::Dispatch {
                kernel,
                views,
                constants,
                workgroups,
            } => Operation::Dispatch {
                kernel,
                views,
                constants,
                workgroups: *workgroups,
            },
        }
    }
}
