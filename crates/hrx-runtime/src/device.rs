//! One opened Vulkan device: queue, allocator, pools, and its timeline.

use crate::{
    instance::{DEVICE_LIFECYCLE, Instance, PhysicalDevice},
    memory::MemoryCounters,
    options::RuntimeOptions,
    timeline::Timeline,
    vk_error,
};
use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use hrx_core::{Error, Result, Target};
use std::{
    mem::ManuallyDrop,
    sync::{Arc, Mutex, atomic::AtomicBool},
};

/// The device a [`Runtime`](crate::Runtime) domain opened on first need.
///
/// Obtained with [`Runtime::gpu`](crate::Runtime::gpu); lives as long as
/// anything of the domain (buffers, kernels, graphs) is alive.
pub struct Gpu {
    pub(crate) domain: u64,
    index: usize,
    target: Target,
    pub(crate) device: ash::Device,
    pub(crate) queue: Mutex<vk::Queue>,
    pub(crate) allocator: Mutex<ManuallyDrop<Allocator>>,
    queue_family: u32,
    pipeline_cache: vk::PipelineCache,
    push_descriptor: ash::khr::push_descriptor::Device,
    /// Where statistics were asked for and the device keeps them.
    pub(crate) executable_properties: Option<ash::khr::pipeline_executable_properties::Device>,
    pub(crate) timeline: Arc<Timeline>,
    pub(crate) memory: MemoryCounters,
    /// The largest buffer the device creates (`maxBufferSize`).
    pub(crate) max_buffer_bytes: u64,
    /// The size of the device's largest memory heap.
    pub(crate) largest_heap_bytes: u64,
    /// Opened with robust buffer access.
    robust_buffer_access: bool,
    /// How long closing waits for submitted work (`None`: forever).
    close_timeout: Option<std::time::Duration>,
    /// Closing gave up on the device: it is leaked, never destroyed.
    abandoned: AtomicBool,
    pub(crate) fault_injection: bool,
    /// Whether large device-local copies use the compute copy kernel.
    pub(crate) compute_copy: bool,
    pub(crate) fail_next_submission: AtomicBool,
    pub(crate) fail_next_execution: AtomicBool,
    // Dropped last: the instance outlives the device created from it.
    _instance: Arc<Instance>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("index", &self.index)
            .field("name", &self.target.name)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    pub(crate) fn open(domain: u64, options: &RuntimeOptions) -> Result<Arc<Gpu>> {
        let instance = Instance::shared(options)?;
        let _lifecycle = DEVICE_LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
        let physical = instance.select(options.device.clone())?;
        if !physical.push_descriptor {
            return Err(Error::Unsupported(format!(
                "{} lacks VK_KHR_push_descriptor",
                physical.target.name
            )));
        }
        let queue_family = compute_queue_family(&instance, &physical)?;
        let statistics = options.pipeline_statistics && physical.pipeline_statistics;
        let robust = options.robust_buffer_access && physical.robust_buffer_access;
        let device = create_device(&instance, &physical, queue_family, statistics, robust)?;
        // From here on, `partial` destroys what exists if a later step fails.
        let partial = PartialDevice(&device);
        // SAFETY: the family was requested with one queue at creation.
        let queue = unsafe { device.get_device_queue(queue_family, 0) };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: device.clone(),
            physical_device: physical.raw,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        })
        .map_err(|e| Error::Message(format!("gpu-allocator: {e}")))?;
        // SAFETY: valid device; an empty cache.
        let pipeline_cache =
            unsafe { device.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None) }
                .map_err(vk_error("vkCreatePipelineCache"))?;
        let timeline = match Timeline::new(domain, device.clone()) {
            Ok(timeline) => timeline,
            Err(e) => {
                // SAFETY: the cache was just created and is unused.
                unsafe { device.destroy_pipeline_cache(pipeline_cache, None) };
                return Err(e);
            }
        };
        std::mem::forget(partial);
        let push_descriptor = ash::khr::push_descriptor::Device::new(&instance.raw, &device);
        let executable_properties = statistics
            .then(|| ash::khr::pipeline_executable_properties::Device::new(&instance.raw, &device));
        let compute_copy = options
            .compute_copy
            .unwrap_or(physical.target.kind != hrx_core::DeviceKind::Cpu);
        OPEN_DEVICES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Arc::new(Gpu {
            domain,
            index: physical.index,
            target: physical.target,
            device,
            queue: Mutex::new(queue),
            allocator: Mutex::new(ManuallyDrop::new(allocator)),
            queue_family,
            pipeline_cache,
            push_descriptor,
            executable_properties,
            timeline,
            memory: MemoryCounters::new(options.memory_budget),
            max_buffer_bytes: physical.max_buffer_bytes,
            largest_heap_bytes: physical.largest_heap_bytes,
            robust_buffer_access: robust,
            close_timeout: options.close_timeout,
            abandoned: AtomicBool::new(false),
            fault_injection: options.fault_injection_enabled(),
            compute_copy,
            fail_next_submission: AtomicBool::new(false),
            fail_next_execution: AtomicBool::new(false),
            _instance: instance,
        }))
    }

    /// Whether the device was opened with robust buffer access (asked for
    /// by [`RuntimeOptions::robust_buffer_access`](crate::RuntimeOptions),
    /// and supported by the device).
    pub fn robust_buffer_access(&self) -> bool {
        self.robust_buffer_access
    }

    /// The facts of this device, as a compiler needs them.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The device's position in Vulkan's enumeration order.
    pub fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn raw(&self) -> &ash::Device {
        &self.device
    }

    pub(crate) fn pipeline_cache(&self) -> vk::PipelineCache {
        self.pipeline_cache
    }

    pub(crate) fn push_descriptor(&self) -> &ash::khr::push_descriptor::Device {
        &self.push_descriptor
    }

    /// A primary command buffer with a pool of its own, freed on drop.
    ///
    /// Vulkan requires a pool to be externally synchronised while any of its
    /// buffers is recorded, allocated or freed. One pool per command buffer
    /// (they are made at prepare time, a cold path) means recording never
    /// contends with the watcher thread releasing finished work.
    pub(crate) fn command_buffer(self: &Arc<Self>) -> Result<CommandBuffer> {
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(self.queue_family);
        // SAFETY: valid device and create info.
        let pool = unsafe { self.device.create_command_pool(&info, None) }
            .map_err(vk_error("vkCreateCommandPool"))?;
        let allocate = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool was just created and is used by this thread only.
        match unsafe { self.device.allocate_command_buffers(&allocate) } {
            Ok(raw) => Ok(CommandBuffer {
                gpu: self.clone(),
                pool,
                raw: raw[0],
            }),
            Err(result) => {
                // SAFETY: the pool is empty and unused.
                unsafe { self.device.destroy_command_pool(pool, None) };
                Err(vk_error("vkAllocateCommandBuffers")(result))
            }
        }
    }
}

/// Devices open in this process (a leak detector for tests).
static OPEN_DEVICES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many runtime devices are open in this process right now (cargo
/// feature `testing`). A device
/// is destroyed when the last runtime clone, buffer, view, kernel and graph
/// of its domain is gone, on the thread that drops it, before that drop
/// returns (in-flight work is waited for when the last runtime handle goes).
#[cfg(feature = "testing")]
pub fn open_device_count() -> usize {
    OPEN_DEVICES.load(std::sync::atomic::Ordering::SeqCst)
}

impl Gpu {
    /// Wait for everything queued on the device, stop the watcher thread
    /// and release what the finished work kept alive, all on the calling
    /// thread. Called when the domain's last runtime handle goes (see
    /// `Domain`'s drop), so that the work's last references to the device
    /// are dropped here and never on the watcher, which the process would
    /// not wait for at exit. Nothing can be queued afterwards: submitting
    /// needs a runtime handle.
    pub(crate) fn close(&self) {
        if self.abandoned.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        // Bounded: a hung device must not hang the process that drops it.
        let last = self
            .timeline
            .submitted
            .load(std::sync::atomic::Ordering::Acquire);
        let deadline = self
            .close_timeout
            .and_then(|timeout| std::time::Instant::now().checked_add(timeout));
        if !self.timeline.wait_for(last, deadline) {
            self.abandoned
                .store(true, std::sync::atomic::Ordering::Release);
            self.timeline.lose(&format!(
                "the device did not finish its work within {:?} of the runtime closing \
                 (RuntimeOptions::close_timeout); it was abandoned, not destroyed",
                self.close_timeout.unwrap_or_default()
            ));
            self.timeline.abandon();
            return;
        }
        {
            let _queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the queue is not used concurrently (we hold its lock).
            // A lost device returns at once, which is all we need: its work
            // will not touch memory any more.
            unsafe {
                let _ = self.device.device_wait_idle();
            }
        }
        self.timeline.close();
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Normally closed already by the domain; a no-op on an idle device
        // then. Drained again so no memory is freed under the device's feet.
        self.close();
        if self.abandoned.load(std::sync::atomic::Ordering::Acquire) {
            // It may still be running work: destroying it (or the memory
            // its work uses) is undefined. Leaked, and still counted open.
            return;
        }
        let _lifecycle = DEVICE_LIFECYCLE.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the device is idle, the watcher no longer touches it, and
        // every object below was created from this device and is unused.
        unsafe {
            self.device
                .destroy_pipeline_cache(self.pipeline_cache, None);
            let allocator = self.allocator.get_mut().unwrap_or_else(|e| e.into_inner());
            ManuallyDrop::drop(allocator);
            self.timeline.destroy_semaphore();
            self.device.destroy_device(None);
        }
        // Counted as open until it is destroyed: a caller that sees zero
        // may end the process, which must not race the driver calls above.
        OPEN_DEVICES.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A primary command buffer and the pool it alone comes from.
pub(crate) struct CommandBuffer {
    gpu: Arc<Gpu>,
    pool: vk::CommandPool,
    raw: vk::CommandBuffer,
}

impl CommandBuffer {
    pub(crate) fn raw(&self) -> vk::CommandBuffer {
        self.raw
    }

    /// Return the command buffer to the initial state for re-recording.
    /// The caller guarantees no submission of it is pending.
    pub(crate) fn reset(&self) -> Result<()> {
        // SAFETY: the pool holds only this command buffer, which the caller
        // guarantees is not pending; the pool is used by one thread at a
        // time (its owner's lock).
        unsafe {
            self.gpu
                .device
                .reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
        }
        .map_err(vk_error("vkResetCommandPool"))
    }
}

impl Drop for CommandBuffer {
    fn drop(&mut self) {
        // SAFETY: a command buffer is dropped only when no submission that
        // uses it is pending (it lives in a graph kept alive by every
        // in-flight submission); destroying its pool frees it.
        unsafe { self.gpu.device.destroy_command_pool(self.pool, None) };
    }
}

/// Destroys a freshly created device if opening fails half way.
struct PartialDevice<'a>(&'a ash::Device);

impl Drop for PartialDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: reached only on an error path before any object of the
        // device escaped; the objects created so far were destroyed already.
        unsafe { self.0.destroy_device(None) };
    }
}

fn compute_queue_family(instance: &Instance, physical: &PhysicalDevice) -> Result<u32> {
    // SAFETY: query on an enumerated physical device.
    let families = unsafe {
        instance
            .raw
            .get_physical_device_queue_family_properties(physical.raw)
    };
    let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
    // Prefer a compute-only family: it does not share a queue with graphics work.
    let dedicated = families
        .iter()
        .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS));
    dedicated
        .or_else(|| families.iter().position(compute))
        .map(|i| i as u32)
        .ok_or_else(|| Error::Unsupported(format!("{} has no compute queue", physical.target.name)))
}

fn create_device(
    instance: &Instance,
    physical: &PhysicalDevice,
    family: u32,
    statistics: bool,
    robust: bool,
) -> Result<ash::Device> {
    let target = &physical.target;
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    let mut extensions = vec![ash::khr::push_descriptor::NAME.as_ptr()];
    if physical.memory_budget_ext {
        extensions.push(ash::ext::memory_budget::NAME.as_ptr());
    }
    let mut cooperative =
        vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default()
        .synchronization2(true)
        .subgroup_size_control(true)
        .compute_full_subgroups(false);
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
        .timeline_semaphore(true)
        .shader_float16(target.shader_f16)
        .vulkan_memory_model(true)
        // Required with the memory model in Vulkan 1.3; naga's storage
        // atomics use device scope.
        .vulkan_memory_model_device_scope(true);
    // naga declares UniformAndStorageBuffer16BitAccess for any 16-bit
    // storage access, so enable both where the device has them.
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default()
        .storage_buffer16_bit_access(target.storage_16bit)
        .uniform_and_storage_buffer16_bit_access(physical.uniform_16bit);
    let base = vk::PhysicalDeviceFeatures::default()
        .shader_int64(target.shader_int64)
        .robust_buffer_access(robust);
    let mut features = vk::PhysicalDeviceFeatures2::default()
        .features(base)
        .push_next(&mut v11)
        .push_next(&mut v12)
        .push_next(&mut v13);
    if target.supports_cooperative_matrix() {
        extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        features = features.push_next(&mut cooperative);
    }
    let mut executable = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    if statistics {
        extensions.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        features = features.push_next(&mut executable);
    }
    let mut robustness2 =
        vk::PhysicalDeviceRobustness2FeaturesEXT::default().robust_buffer_access2(true);
    if robust && physical.robust_buffer_access2 {
        extensions.push(ash::ext::robustness2::NAME.as_ptr());
        features = features.push_next(&mut robustness2);
    }
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&extensions)
        .push_next(&mut features);
    // SAFETY: all pointers refer to locals alive for the call; the features
    // requested were read off this device (vulkan_memory_model is required
    // by Vulkan 1.3).
    unsafe { instance.raw.create_device(physical.raw, &info, None) }
        .map_err(vk_error("vkCreateDevice"))
}
