//! The raw harness's compute pipelines: one shader module, one descriptor
//! set layout of storage buffers, an optional push-constant block,
//! descriptor sets from a small pool.

use crate::raw::{RawBuffer, RawGpu, RawResult, Shared, vk_err};
use ash::vk;
use std::{ffi::CStr, sync::Arc};

/// A compute pipeline over storage-buffer bindings 0..n of set 0 and a
/// push-constant block at offset 0, with a descriptor pool for a few bound
/// sets.
pub struct RawKernel {
    shared: Arc<Shared>,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    /// The pipeline layout (set 0 and the push-constant block).
    pub layout: vk::PipelineLayout,
    /// The compute pipeline.
    pub pipeline: vk::Pipeline,
    pool: vk::DescriptorPool,
}

impl RawKernel {
    /// Build the pipeline of `entry` in `spirv` with `bindings` storage
    /// buffers and `push_constant_bytes` of constants (0 for none), with room
    /// for `sets` descriptor sets.
    pub fn new(
        gpu: &RawGpu,
        spirv: &[u32],
        entry: &CStr,
        bindings: u32,
        push_constant_bytes: u32,
        sets: u32,
    ) -> RawResult<RawKernel> {
        let device = gpu.device();
        let mut kernel = RawKernel {
            shared: gpu.shared.clone(),
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pool: vk::DescriptorPool::null(),
        };
        // SAFETY (whole block): valid device; every create info points at
        // locals alive for its call; objects made so far are destroyed by
        // `Drop` if a later step fails (null handles are ignored).
        unsafe {
            let info = vk::ShaderModuleCreateInfo::default().code(spirv);
            kernel.module = device
                .create_shader_module(&info, None)
                .map_err(vk_err("vkCreateShaderModule"))?;
            let slots: Vec<_> = (0..bindings)
                .map(|b| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(b)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&slots);
            kernel.set_layout = device
                .create_descriptor_set_layout(&info, None)
                .map_err(vk_err("vkCreateDescriptorSetLayout"))?;
            let set_layouts = [kernel.set_layout];
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .offset(0)
                .size(push_constant_bytes)];
            let ranges = if push_constant_bytes > 0 {
                &ranges[..]
            } else {
                &[]
            };
            let info = vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&set_layouts)
                .push_constant_ranges(ranges);
            kernel.layout = device
                .create_pipeline_layout(&info, None)
                .map_err(vk_err("vkCreatePipelineLayout"))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(kernel.module)
                .name(entry);
            let info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(kernel.layout);
            kernel.pipeline = device
                .create_compute_pipelines(vk::PipelineCache::null(), &[info], None)
                .map_err(|(_, e)| vk_err("vkCreateComputePipelines")(e))?[0];
            let sizes = [vk::DescriptorPoolSize {
                ty: vk::DescriptorType::STORAGE_BUFFER,
                descriptor_count: sets.max(1) * bindings.max(1),
            }];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(sets.max(1))
                .pool_sizes(&sizes);
            kernel.pool = device
                .create_descriptor_pool(&info, None)
                .map_err(vk_err("vkCreateDescriptorPool"))?;
        }
        Ok(kernel)
    }

    /// A descriptor set binding `buffers` (whole) at bindings 0.. in order.
    pub fn bind(&self, buffers: &[&RawBuffer]) -> RawResult<vk::DescriptorSet> {
        let whole: Vec<_> = buffers.iter().map(|&b| (b, 0, b.bytes)).collect();
        self.bind_ranges(&whole)
    }

    /// A descriptor set binding `(buffer, offset, bytes)` ranges at bindings
    /// 0.. in order.
    pub fn bind_ranges(
        &self,
        ranges: &[(&RawBuffer, usize, usize)],
    ) -> RawResult<vk::DescriptorSet> {
        let device = &self.shared.device;
        let layouts = [self.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(self.pool)
            .set_layouts(&layouts);
        // SAFETY: the pool and layout belong to this device; the pool is
        // used by this thread only.
        let set = unsafe { device.allocate_descriptor_sets(&info) }
            .map_err(vk_err("vkAllocateDescriptorSets"))?[0];
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = ranges
            .iter()
            .map(|&(b, offset, bytes)| {
                [vk::DescriptorBufferInfo {
                    buffer: b.buffer,
                    offset: offset as u64,
                    range: bytes as u64,
                }]
            })
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set is fresh and unused by any command buffer; the
        // buffers are live storage buffers of this device and the ranges lie
        // inside them (the callers derive them from checked views).
        unsafe { device.update_descriptor_sets(&writes, &[]) };
        Ok(set)
    }
}

impl Drop for RawKernel {
    fn drop(&mut self) {
        let device = &self.shared.device;
        // SAFETY: no pending work uses the kernel (the benchmark waited);
        // destroying null handles is a no-op.
        unsafe {
            device.destroy_descriptor_pool(self.pool, None);
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
            device.destroy_shader_module(self.module, None);
        }
    }
}
