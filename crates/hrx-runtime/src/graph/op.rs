//! Recorded operations and what each one touches, in hazard and Vulkan terms.

use super::hazard::Use;
use crate::{BufferView, Gpu, GpuKernel, builtin};
use ash::vk;

/// One recorded operation; holds its views and kernel alive.
#[derive(Clone)]
pub(crate) enum Op {
    /// `dst <- src`, equal lengths, no overlap.
    Copy { dst: BufferView, src: BufferView },
    /// `view <- value` repeated, 4-byte aligned.
    Fill { view: BufferView, value: u32 },
    /// A checked kernel dispatch.
    Dispatch {
        kernel: GpuKernel,
        views: Vec<BufferView>,
        constants: Vec<u8>,
        workgroups: [u32; 3],
    },
}

/// How an operation will be recorded, and what it touches.
pub(crate) struct OpPlan {
    /// Declared accesses, for hazard derivation.
    pub uses: Vec<Use>,
    /// Pipeline stages the operation's commands run in.
    pub stages: vk::PipelineStageFlags2,
    /// Access types of its reads.
    pub reads: vk::AccessFlags2,
    /// Access types of its writes.
    pub writes: vk::AccessFlags2,
    /// For a copy: leading bytes moved by the built-in compute kernel.
    pub compute_copy_bytes: usize,
    /// Whether it writes memory the host may map afterwards.
    pub writes_host_visible: bool,
}

impl AsRef<[Use]> for OpPlan {
    fn as_ref(&self) -> &[Use] {
        &self.uses
    }
}

fn use_of(view: &BufferView, reads: bool, writes: bool) -> Use {
    let start = view.offset() as u64;
    Use {
        allocation: view.allocation().id(),
        range: start..start + view.len() as u64,
        reads,
        writes,
    }
}

const COMPUTE: vk::PipelineStageFlags2 = vk::PipelineStageFlags2::COMPUTE_SHADER;
const SHADER_READ: vk::AccessFlags2 = vk::AccessFlags2::SHADER_STORAGE_READ;
const SHADER_WRITE: vk::AccessFlags2 = vk::AccessFlags2::SHADER_STORAGE_WRITE;

impl Op {
    /// Every view the operation binds or copies.
    pub fn views(&self) -> impl Iterator<Item = &BufferView> {
        let (pair, many): ([Option<&BufferView>; 2], &[BufferView]) = match self {
            Op::Copy { dst, src } => ([Some(dst), Some(src)], &[]),
            Op::Fill { view, .. } => ([Some(view), None], &[]),
            Op::Dispatch { views, .. } => ([None, None], views),
        };
        pair.into_iter().flatten().chain(many)
    }

    /// Whether the operation writes `view` (by position in [`views`]).
    pub fn writes(&self, index: usize) -> bool {
        match self {
            Op::Copy { .. } => index == 0,
            Op::Fill { .. } => true,
            Op::Dispatch { kernel, .. } => kernel.contract().bindings[index].access.writes(),
        }
    }

    /// Decide how to record the operation on `target`.
    pub fn plan(&self, gpu: &Gpu) -> OpPlan {
        let writes_host_visible = self
            .views()
            .enumerate()
            .any(|(i, view)| self.writes(i) && view.is_host_visible() && !view.is_empty());
        let mut plan = OpPlan {
            uses: Vec::new(),
            stages: vk::PipelineStageFlags2::empty(),
            reads: vk::AccessFlags2::empty(),
            writes: vk::AccessFlags2::empty(),
            compute_copy_bytes: 0,
            writes_host_visible,
        };
        match self {
            Op::Copy { dst, src } => {
                plan.uses = vec![use_of(dst, false, true), use_of(src, true, false)];
                plan.compute_copy_bytes = if gpu.compute_copy {
                    builtin::compute_copy_bytes(gpu.target(), dst, src)
                } else {
                    0
                };
                if plan.compute_copy_bytes > 0 {
                    plan.stages |= COMPUTE;
                    plan.reads |= SHADER_READ;
                    plan.writes |= SHADER_WRITE;
                }
                if plan.compute_copy_bytes < dst.len() {
                    plan.stages |= vk::PipelineStageFlags2::COPY;
                    plan.reads |= vk::AccessFlags2::TRANSFER_READ;
                    plan.writes |= vk::AccessFlags2::TRANSFER_WRITE;
                }
            }
            Op::Fill { view, .. } => {
                plan.uses = vec![use_of(view, false, true)];
                // The spec files vkCmdFillBuffer under clear commands; the
                // synchronization validation of the 1.3.239 layers tracks it
                // in the copy stage. Name both so either reading is covered.
                plan.stages = vk::PipelineStageFlags2::CLEAR | vk::PipelineStageFlags2::COPY;
                plan.writes = vk::AccessFlags2::TRANSFER_WRITE;
            }
            Op::Dispatch { kernel, views, .. } => {
                plan.stages = COMPUTE;
                for (view, binding) in views.iter().zip(&kernel.contract().bindings) {
                    let (reads, writes) = (binding.access.reads(), binding.access.writes());
                    plan.uses.push(use_of(view, reads, writes));
                    if reads {
                        plan.reads |= SHADER_READ;
                    }
                    if writes {
                        plan.writes |= SHADER_WRITE;
                    }
                }
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryPlacement, Runtime};

    #[test]
    fn large_device_local_copies_plan_the_compute_kernel() {
        let rt = Runtime::with_options(
            crate::RuntimeOptions::from_env()
                .unwrap()
                .with_compute_copy(true),
        )
        .unwrap();
        let gpu = rt.gpu().unwrap();
        let target = gpu.target().clone();
        let a = rt
            .allocate((2 << 20) + 4, MemoryPlacement::GpuLocal)
            .unwrap();
        let b = rt
            .allocate((2 << 20) + 4, MemoryPlacement::GpuLocal)
            .unwrap();
        let host = rt
            .allocate((2 << 20) + 4, MemoryPlacement::HostVisible)
            .unwrap();
        let copy = |dst: BufferView, src: BufferView| Op::Copy { dst, src }.plan(gpu);
        let plan = copy(a.view(), b.view());
        assert_eq!(plan.compute_copy_bytes, 2 << 20);
        assert!(
            plan.stages
                .contains(COMPUTE | vk::PipelineStageFlags2::COPY)
        );
        let host_copy = copy(a.view(), host.view()).compute_copy_bytes;
        let unified = matches!(
            target.kind,
            hrx_core::DeviceKind::Cpu | hrx_core::DeviceKind::Integrated
        );
        assert_eq!(host_copy, if unified { 2 << 20 } else { 0 });
        let small = |v: &crate::Buffer| v.view().slice(0..4096).unwrap();
        assert_eq!(copy(small(&a), small(&b)).compute_copy_bytes, 0);
        let skewed = b.view().slice(4..(2 << 20) + 4).unwrap();
        assert_eq!(
            copy(a.view().slice(0..2 << 20).unwrap(), skewed).compute_copy_bytes,
            0
        );
        assert_eq!(
            copy(
                a.view().slice(0..2 << 20).unwrap(),
                b.view().slice(0..2 << 20).unwrap()
            )
            .stages,
            COMPUTE
        );
    }
}
