//! Recording a prepared graph into one reusable command buffer.

use super::{
    hazard::{Barrier, Hazard},
    op::{Op, OpPlan},
};
use crate::{
    GpuKernel, builtin,
    device::{CommandBuffer, Gpu},
    vk_error,
};
use ash::vk;
use hrx_core::Result;
use std::sync::Arc;

/// The memory barrier that serves `barrier`'s edges, with stages and access
/// types taken from the operations at either end.
fn memory_barrier(barrier: &Barrier, plans: &[OpPlan]) -> vk::MemoryBarrier2<'static> {
    let mut b = vk::MemoryBarrier2::default();
    for edge in barrier.edges() {
        let (from, to) = (&plans[edge.from], &plans[edge.to]);
        b.src_stage_mask |= from.stages;
        b.dst_stage_mask |= to.stages;
        match edge.hazard {
            Hazard::ReadAfterWrite => {
                b.src_access_mask |= from.writes;
                b.dst_access_mask |= to.reads;
            }
            Hazard::WriteAfterWrite => {
                b.src_access_mask |= from.writes;
                b.dst_access_mask |= to.writes;
            }
            // An execution dependency is enough before overwriting.
            Hazard::WriteAfterRead => {}
        }
    }
    b
}

/// Makes device writes to host-visible memory visible to host reads.
fn host_barrier(plans: &[OpPlan]) -> Option<vk::MemoryBarrier2<'static>> {
    let mut b = vk::MemoryBarrier2::default()
        .dst_stage_mask(vk::PipelineStageFlags2::HOST)
        .dst_access_mask(vk::AccessFlags2::HOST_READ);
    for plan in plans.iter().filter(|p| p.writes_host_visible) {
        b.src_stage_mask |= plan.stages;
        b.src_access_mask |= plan.writes;
    }
    (!b.src_stage_mask.is_empty()).then_some(b)
}

/// Records `ops` with the barriers `prepare` placed. The command buffer may
/// be pending several times at once (`SIMULTANEOUS_USE`): each submission
/// waits for the graph's previous one on the device anyway.
pub(crate) fn record(
    gpu: &Arc<Gpu>,
    ops: &[Op],
    plans: &[OpPlan],
    barriers: &[Barrier],
    copy_kernel: Option<&GpuKernel>,
) -> Result<CommandBuffer> {
    let commands = gpu.command_buffer()?;
    let cb = commands.raw();
    let device = gpu.raw();
    let begin =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
    // SAFETY: a fresh command buffer, recorded by this thread only.
    unsafe { device.begin_command_buffer(cb, &begin) }.map_err(vk_error("vkBeginCommandBuffer"))?;
    let mut next_barrier = barriers.iter().peekable();
    for (index, (op, plan)) in ops.iter().zip(plans).enumerate() {
        if let Some(barrier) = next_barrier.next_if(|b| b.before() == index) {
            let memory = [memory_barrier(barrier, plans)];
            let dependency = vk::DependencyInfo::default().memory_barriers(&memory);
            // SAFETY: recording state; synchronization2 is enabled (1.3);
            // the masks name only compute and transfer stages, which the
            // compute queue supports.
            unsafe { device.cmd_pipeline_barrier2(cb, &dependency) };
        }
        record_op(gpu, cb, op, plan, copy_kernel);
    }
    if let Some(host) = host_barrier(plans) {
        let memory = [host];
        let dependency = vk::DependencyInfo::default().memory_barriers(&memory);
        // SAFETY: as above; HOST is a valid destination stage on any queue.
        unsafe { device.cmd_pipeline_barrier2(cb, &dependency) };
    }
    // SAFETY: the command buffer is in the recording state.
    unsafe { device.end_command_buffer(cb) }.map_err(vk_error("vkEndCommandBuffer"))?;
    Ok(commands)
}

fn record_op(
    gpu: &Gpu,
    cb: vk::CommandBuffer,
    op: &Op,
    plan: &OpPlan,
    copy_kernel: Option<&GpuKernel>,
) {
    let device = gpu.raw();
    match op {
        Op::Copy { dst, src } => {
            // `prepare` supplies the kernel whenever a plan uses it.
            let bulk = copy_kernel.map_or(0, |_| plan.compute_copy_bytes);
            if let Some(kernel) = copy_kernel.filter(|_| bulk > 0) {
                // SAFETY: recording state; the pipeline belongs to this device.
                unsafe {
                    device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, kernel.pipeline())
                };
                for chunk in builtin::chunks(gpu.target(), bulk) {
                    let infos = [
                        buffer_info(src.raw_buffer(), src.offset() + chunk.offset, chunk.bytes),
                        buffer_info(dst.raw_buffer(), dst.offset() + chunk.offset, chunk.bytes),
                    ];
                    push_descriptors(gpu, cb, kernel, &infos);
                    // SAFETY: pipeline and descriptors are bound; the grid is
                    // within the device's workgroup-count limit.
                    unsafe { device.cmd_dispatch(cb, chunk.groups, 1, 1) };
                }
            }
            let tail = dst.len().saturating_sub(bulk);
            if tail > 0 {
                let region = [vk::BufferCopy {
                    src_offset: (src.offset() + bulk) as u64,
                    dst_offset: (dst.offset() + bulk) as u64,
                    size: tail as u64,
                }];
                // SAFETY: both ranges lie inside their buffers (views are
                // checked slices) and do not overlap (checked at record time).
                unsafe { device.cmd_copy_buffer(cb, src.raw_buffer(), dst.raw_buffer(), &region) };
            }
        }
        Op::Fill { view, value } => {
            if !view.is_empty() {
                // SAFETY: offset and size are multiples of 4 inside the
                // buffer (checked at record time).
                unsafe {
                    device.cmd_fill_buffer(
                        cb,
                        view.raw_buffer(),
                        view.offset() as u64,
                        view.len() as u64,
                        *value,
                    )
                };
            }
        }
        Op::Dispatch {
            kernel,
            views,
            constants,
            workgroups,
        } => {
            // SAFETY: recording state; the pipeline belongs to this device.
            unsafe {
                device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, kernel.pipeline())
            };
            let infos: Vec<_> = views
                .iter()
                .map(|v| buffer_info(v.raw_buffer(), v.offset(), v.len()))
                .collect();
            push_descriptors(gpu, cb, kernel, &infos);
            if !constants.is_empty() {
                // SAFETY: the layout has one compute range of exactly
                // `constants.len()` bytes at offset 0 (checked at record time).
                unsafe {
                    device.cmd_push_constants(
                        cb,
                        kernel.layout(),
                        vk::ShaderStageFlags::COMPUTE,
                        0,
                        constants,
                    )
                };
            }
            let [x, y, z] = *workgroups;
            // SAFETY: pipeline, descriptors and constants are set; the grid
            // is non-zero and within the device limits (checked).
            unsafe { device.cmd_dispatch(cb, x, y, z) };
        }
    }
}

fn buffer_info(buffer: vk::Buffer, offset: usize, len: usize) -> vk::DescriptorBufferInfo {
    vk::DescriptorBufferInfo {
        buffer,
        offset: offset as u64,
        range: len as u64,
    }
}

fn push_descriptors(
    gpu: &Gpu,
    cb: vk::CommandBuffer,
    kernel: &GpuKernel,
    infos: &[vk::DescriptorBufferInfo],
) {
    if infos.is_empty() {
        return;
    }
    let writes: Vec<_> = infos
        .iter()
        .enumerate()
        .map(|(binding, info)| {
            vk::WriteDescriptorSet::default()
                .dst_binding(binding as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(std::slice::from_ref(info))
        })
        .collect();
    // SAFETY: recording state; one storage-buffer write per binding of the
    // kernel's push-descriptor set layout, each range non-empty, aligned and
    // within the device's storage range (checked at record time).
    unsafe {
        gpu.push_descriptor().cmd_push_descriptor_set(
            cb,
            vk::PipelineBindPoint::COMPUTE,
            kernel.layout(),
            0,
            &writes,
        )
    };
}
