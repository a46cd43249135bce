//! Compute kernels: SPIR-V plus the contract (hrx-core's kernel vocabulary,
//! re-exported here) a dispatch is checked against.

mod reflect;
mod statistics;

pub use hrx_core::{Access, BindingContract, DispatchArgs, KernelContract};
pub use statistics::{KernelRepresentation, KernelStatistic, StatisticValue};

use crate::{Runtime, device::Gpu, vk_error};
use ash::vk;
use hrx_core::{Error, Result};
use std::{
    ffi::CString,
    sync::{Arc, Weak},
};

use reflect::SPIRV_MAGIC;

/// A compute pipeline built once from SPIR-V, checked against its contract
/// at every dispatch. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct GpuKernel {
    inner: Arc<KernelInner>,
    allow_aliasing: bool,
}

impl std::fmt::Debug for GpuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuKernel")
            .field("contract", &self.inner.contract)
            .field("allow_aliasing", &self.allow_aliasing)
            .finish_non_exhaustive()
    }
}

impl GpuKernel {
    /// Build the shader module, descriptor set layout (push descriptors),
    /// pipeline layout and compute pipeline (through the device's pipeline
    /// cache) for `spirv`, after checking the contract against the device.
    pub fn new(runtime: &Runtime, spirv: &[u32], contract: KernelContract) -> Result<GpuKernel> {
        Self::from_gpu(runtime.gpu_arc()?.clone(), spirv, contract)
    }

    pub(crate) fn from_gpu(
        gpu: Arc<Gpu>,
        spirv: &[u32],
        contract: KernelContract,
    ) -> Result<GpuKernel> {
        Ok(GpuKernel {
            inner: Arc::new(KernelInner::build(gpu, spirv, contract)?),
            allow_aliasing: false,
        })
    }

    /// Allow dispatches whose writable bindings overlap other bindings.
    ///
    /// # Safety
    ///
    /// The caller promises that the kernel is correct when its bindings
    /// alias: every invocation that writes a byte is the only one that reads
    /// or writes that byte through any binding in the dispatch, or the
    /// kernel orders such accesses itself (for example an in-place
    /// elementwise update that reads and writes the same element from the
    /// same invocation). The runtime still derives hazards between
    /// dispatches from the declared accesses; it cannot see races inside one.
    pub unsafe fn allow_aliasing(mut self) -> Self {
        self.allow_aliasing = true;
        self
    }

    /// Whether [`allow_aliasing`](Self::allow_aliasing) was opted into.
    pub fn aliasing_allowed(&self) -> bool {
        self.allow_aliasing
    }

    /// The contract every dispatch is checked against.
    pub fn contract(&self) -> &KernelContract {
        &self.inner.contract
    }

    /// The SPIR-V words the pipeline was built from, for tools that rebuild
    /// the same pipeline elsewhere (a raw-Vulkan benchmark baseline).
    pub fn spirv(&self) -> &[u32] {
        &self.inner.spirv
    }

    /// Fail unless the kernel was built in `runtime`'s domain.
    pub fn validate_runtime(&self, runtime: &Runtime) -> Result<()> {
        if runtime.id() == self.inner.gpu.domain {
            Ok(())
        } else {
            Err(Error::Message(format!(
                "kernel `{}` belongs to another runtime domain",
                self.inner.contract.entry_point
            )))
        }
    }

    pub(crate) fn domain(&self) -> u64 {
        self.inner.gpu.domain
    }

    pub(crate) fn downgrade(&self) -> WeakKernel {
        WeakKernel(Arc::downgrade(&self.inner))
    }

    pub(crate) fn pipeline(&self) -> vk::Pipeline {
        self.inner.pipeline
    }

    pub(crate) fn layout(&self) -> vk::PipelineLayout {
        self.inner.layout
    }
}

/// A kernel reference that does not keep the kernel alive (for caches).
pub(crate) struct WeakKernel(Weak<KernelInner>);

impl WeakKernel {
    pub(crate) fn upgrade(&self) -> Option<GpuKernel> {
        self.0.upgrade().map(|inner| GpuKernel {
            inner,
            allow_aliasing: false,
        })
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// The Vulkan objects of one kernel; destroyed when the last clone (and the
/// last prepared graph using it) is gone.
struct KernelInner {
    gpu: Arc<Gpu>,
    contract: KernelContract,
    spirv: Box<[u32]>,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

impl KernelInner {
    fn build(gpu: Arc<Gpu>, spirv: &[u32], contract: KernelContract) -> Result<Self> {
        let name = &contract.entry_point;
        if spirv.first() != Some(&SPIRV_MAGIC) {
            return Err(Error::Message(format!(
                "kernel `{name}`: the code is not SPIR-V (empty or without the magic number)"
            )));
        }
        contract.check(gpu.target())?;
        // The driver trusts the module: its structure and interface are
        // checked here, so that safe code cannot hand it a malformed one.
        reflect::check(spirv, &contract)?;
        let entry = CString::new(name.as_str())
            .map_err(|_| Error::Message(format!("kernel `{name}`: NUL in the entry point")))?;
        let device = gpu.raw().clone();
        // Filled in step by step; dropping it destroys what was created.
        let mut inner = KernelInner {
            gpu,
            contract: contract.clone(),
            spirv: spirv.into(),
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
        };
        let info = vk::ShaderModuleCreateInfo::default().code(spirv);
        // SAFETY: valid device; `spirv` is a word slice whose instructions
        // all lie inside it, with the entry point and an interface the
        // layout below covers (`reflect::check`), alive for the call.
        inner.module = unsafe { device.create_shader_module(&info, None) }
            .map_err(vk_error("vkCreateShaderModule"))?;
        let bindings: Vec<_> = (0..contract.bindings.len() as u32)
            .map(|binding| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let info = vk::DescriptorSetLayoutCreateInfo::default()
            .flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR)
            .bindings(&bindings);
        // SAFETY: valid device; at most 32 bindings (checked), which every
        // device's maxPushDescriptors allows; push descriptors are enabled.
        inner.set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }
            .map_err(vk_error("vkCreateDescriptorSetLayout"))?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(contract.push_constant_bytes)];
        let ranges = if contract.push_constant_bytes > 0 {
            &ranges[..]
        } else {
            &[]
        };
        let set_layouts = [inner.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&set_layouts)
            .push_constant_ranges(ranges);
        // SAFETY: valid device and set layout; the push-constant size was
        // checked against the device limit and is a multiple of 4.
        inner.layout = unsafe { device.create_pipeline_layout(&info, None) }
            .map_err(vk_error("vkCreatePipelineLayout"))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(inner.module)
            .name(&entry);
        let flags = if inner.gpu.executable_properties.is_some() {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = [vk::ComputePipelineCreateInfo::default()
            .flags(flags)
            .stage(stage)
            .layout(inner.layout)];
        // SAFETY: valid device, pipeline cache, module and layout; the entry
        // name outlives the call.
        let pipelines =
            unsafe { device.create_compute_pipelines(inner.gpu.pipeline_cache(), &info, None) }
                .map_err(|(_, e)| vk_error("vkCreateComputePipelines")(e))?;
        inner.pipeline = pipelines.first().copied().unwrap_or_default();
        Ok(inner)
    }
}

impl Drop for KernelInner {
    fn drop(&mut self) {
        let device = self.gpu.raw();
        // SAFETY: the objects were created from this device; the last
        // reference is gone, and prepared graphs hold a reference until the
        // device finished their work, so none is in use. Null handles are
        // ignored by the destroy calls.
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
            device.destroy_shader_module(self.module, None);
        }
    }
}
