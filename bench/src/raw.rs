//! The raw-ash baseline shared by the benchmarks: a minimal harness with
//! its own instance, device, queue, timeline semaphore, buffers, pipelines
//! and command buffers. It does what a careful hand-written Vulkan program
//! would do, and nothing more.

use ash::vk;
use std::{ptr::NonNull, sync::Arc, time::Instant};

/// Errors of the raw harness, as text naming the failed call.
pub type RawResult<T> = Result<T, String>;

pub(crate) fn vk_err(call: &'static str) -> impl Fn(vk::Result) -> String {
    move |result| format!("{call}: {result:?}")
}

/// How long a wait spins on the counter before blocking; the same as the
/// runtime's `Completion::wait`, so both sides observe completion alike.
pub const SPIN: std::time::Duration = std::time::Duration::from_micros(20);

/// A (stage, access) pair, one side of a barrier.
pub type Access = (vk::PipelineStageFlags2, vk::AccessFlags2);

/// A global memory barrier from `src` to `dst`.
pub fn barrier(device: &ash::Device, cb: vk::CommandBuffer, src: Access, dst: Access) {
    let memory = [vk::MemoryBarrier2::default()
        .src_stage_mask(src.0)
        .src_access_mask(src.1)
        .dst_stage_mask(dst.0)
        .dst_access_mask(dst.1)];
    let dependency = vk::DependencyInfo::default().memory_barriers(&memory);
    // SAFETY: `cb` is recording; synchronization2 is enabled on every raw
    // device; the callers pass compute, copy, host or all-commands stages,
    // all valid on a compute queue.
    unsafe { device.cmd_pipeline_barrier2(cb, &dependency) };
}

/// Instance and device; destroyed when the last object made from them goes.
pub(crate) struct Shared {
    _entry: ash::Entry,
    instance: ash::Instance,
    pub(crate) device: ash::Device,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: every object made from the device holds an `Arc<Shared>`,
        // so all of them were destroyed already; the device is idle because
        // `RawGpu::drop` waited for it.
        unsafe {
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// One device with one compute queue and one timeline semaphore.
pub struct RawGpu {
    pub(crate) shared: Arc<Shared>,
    queue: vk::Queue,
    pool: vk::CommandPool,
    semaphore: vk::Semaphore,
    memory: vk::PhysicalDeviceMemoryProperties,
    /// The last value submitted to signal.
    submitted: u64,
    /// The highest value seen complete.
    completed: u64,
}

/// The physical device at `index`, checked against `name`; or else the
/// first one named `name`.
fn pick(instance: &ash::Instance, index: usize, name: &str) -> RawResult<vk::PhysicalDevice> {
    // SAFETY: plain enumeration on a live instance.
    let devices = unsafe { instance.enumerate_physical_devices() }
        .map_err(vk_err("vkEnumeratePhysicalDevices"))?;
    let name_of = |pd: vk::PhysicalDevice| {
        // SAFETY: `pd` was enumerated from this instance.
        let props = unsafe { instance.get_physical_device_properties(pd) };
        props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let by_index = devices
        .get(index)
        .copied()
        .filter(|&pd| name_of(pd) == name);
    by_index
        .or_else(|| devices.iter().copied().find(|&pd| name_of(pd) == name))
        .ok_or_else(|| format!("raw harness: no Vulkan device named {name:?}"))
}

/// The runtime's policy: a compute-only family if there is one.
fn compute_family(instance: &ash::Instance, pd: vk::PhysicalDevice) -> RawResult<u32> {
    // SAFETY: `pd` was enumerated from this instance.
    let families = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
    families
        .iter()
        .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
        .or_else(|| families.iter().position(compute))
        .map(|i| i as u32)
        .ok_or_else(|| "raw harness: no compute queue".to_string())
}

impl RawGpu {
    /// Open the device the runtime chose (`index` in enumeration order,
    /// named `name`), with timeline semaphores and synchronization2.
    pub fn open(index: usize, name: &str) -> RawResult<RawGpu> {
        // SAFETY: loading the system Vulkan loader, as every Vulkan program does.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("Vulkan loader: {e}"))?;
        let app = vk::ApplicationInfo::default()
            .application_name(c"hrx-bench-raw")
            .api_version(vk::API_VERSION_1_3);
        // With HRX_VALIDATION set (a check of this harness, never for
        // timing), the layers report to stdout.
        let validate = std::env::var("HRX_VALIDATION").is_ok_and(|v| !v.is_empty() && v != "0");
        let layers = if validate {
            vec![c"VK_LAYER_KHRONOS_validation".as_ptr()]
        } else {
            vec![]
        };
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers);
        if validate {
            info = info.push_next(&mut features);
        }
        // SAFETY: the create info points at locals alive for the call.
        let instance =
            unsafe { entry.create_instance(&info, None) }.map_err(vk_err("vkCreateInstance"))?;
        let opened = Self::open_device(&instance, index, name);
        let (pd, family, device) = match opened {
            Ok(found) => found,
            Err(e) => {
                // SAFETY: nothing was created from the instance.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
        };
        // SAFETY: `pd` belongs to this instance.
        let memory = unsafe { instance.get_physical_device_memory_properties(pd) };
        let shared = Arc::new(Shared {
            _entry: entry,
            instance,
            device,
        });
        let device = &shared.device;
        // SAFETY: the family was created with one queue.
        let queue = unsafe { device.get_device_queue(family, 0) };
        let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(family);
        // SAFETY: valid device and create info.
        let pool = unsafe { device.create_command_pool(&pool_info, None) }
            .map_err(vk_err("vkCreateCommandPool"))?;
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: timeline semaphores are enabled on this device.
        let semaphore = unsafe { device.create_semaphore(&info, None) }.map_err(|e| {
            // SAFETY: the pool was just created and is unused.
            unsafe { device.destroy_command_pool(pool, None) };
            vk_err("vkCreateSemaphore")(e)
        })?;
        Ok(RawGpu {
            shared,
            queue,
            pool,
            semaphore,
            memory,
            submitted: 0,
            completed: 0,
        })
    }

    fn open_device(
        instance: &ash::Instance,
        index: usize,
        name: &str,
    ) -> RawResult<(vk::PhysicalDevice, u32, ash::Device)> {
        let pd = pick(instance, index, name)?;
        let family = compute_family(instance, pd)?;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        // What the device offers, so that kernels compiled for the runtime's
        // device (16-bit storage, f16, int64, the memory model, cooperative
        // matrices) also build here: enable the same set where supported.
        let mut has11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut has12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut has13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut has_coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        // SAFETY: `pd` belongs to this instance.
        let extensions = unsafe { instance.enumerate_device_extension_properties(pd) }
            .map_err(vk_err("vkEnumerateDeviceExtensionProperties"))?;
        let coop_ext = extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(ash::khr::cooperative_matrix::NAME));
        let mut query = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut has11)
            .push_next(&mut has12)
            .push_next(&mut has13);
        if coop_ext {
            query = query.push_next(&mut has_coop);
        }
        // SAFETY: the chain points at locals alive for the call.
        unsafe { instance.get_physical_device_features2(pd, &mut query) };
        let base =
            vk::PhysicalDeviceFeatures::default().shader_int64(query.features.shader_int64 != 0);
        let on = |flag: vk::Bool32| flag != 0;
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(on(has11.storage_buffer16_bit_access))
            .uniform_and_storage_buffer16_bit_access(on(
                has11.uniform_and_storage_buffer16_bit_access
            ));
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .shader_float16(on(has12.shader_float16))
            .vulkan_memory_model(on(has12.vulkan_memory_model))
            .vulkan_memory_model_device_scope(on(has12.vulkan_memory_model_device_scope));
        let mut v13 = vk::PhysicalDeviceVulkan13Features::default()
            .synchronization2(true)
            .subgroup_size_control(on(has13.subgroup_size_control));
        let mut coop =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        let mut names = Vec::new();
        let mut features = vk::PhysicalDeviceFeatures2::default()
            .features(base)
            .push_next(&mut v11)
            .push_next(&mut v12)
            .push_next(&mut v13);
        if coop_ext && on(has_coop.cooperative_matrix) {
            names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
            features = features.push_next(&mut coop);
        }
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&names)
            .push_next(&mut features);
        // SAFETY: pointers refer to locals alive for the call; every feature
        // enabled was read off this device (timeline semaphores and
        // synchronization2 are core in Vulkan 1.3, which the runtime
        // requires of its device).
        let device =
            unsafe { instance.create_device(pd, &info, None) }.map_err(vk_err("vkCreateDevice"))?;
        Ok((pd, family, device))
    }

    pub(crate) fn device(&self) -> &ash::Device {
        &self.shared.device
    }

    /// A device buffer of `bytes` (storage, copy source and destination);
    /// `host` asks for host-visible coherent memory instead of device-local.
    pub fn buffer(&self, bytes: usize, host: bool) -> RawResult<RawBuffer> {
        let device = self.device();
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let info = vk::BufferCreateInfo::default()
            .size(bytes as u64)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid device and create info.
        let buffer =
            unsafe { device.create_buffer(&info, None) }.map_err(vk_err("vkCreateBuffer"))?;
        let mut raw = RawBuffer {
            shared: self.shared.clone(),
            buffer,
            memory: vk::DeviceMemory::null(),
            bytes,
            mapped: None,
        };
        // SAFETY: the buffer was just created from this device.
        let needs = unsafe { device.get_buffer_memory_requirements(buffer) };
        let wanted = if host {
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT
        } else {
            vk::MemoryPropertyFlags::DEVICE_LOCAL
        };
        let types = &self.memory.memory_types[..self.memory.memory_type_count as usize];
        let fits = |i: usize, t: &vk::MemoryType| {
            needs.memory_type_bits & (1 << i) != 0 && t.property_flags.contains(wanted)
        };
        // Device-local: prefer memory the host cannot see (real VRAM on a GPU).
        let host_visible = vk::MemoryPropertyFlags::HOST_VISIBLE;
        let type_index = types
            .iter()
            .enumerate()
            .position(|(i, t)| fits(i, t) && (host || !t.property_flags.contains(host_visible)))
            .or_else(|| types.iter().enumerate().position(|(i, t)| fits(i, t)))
            .ok_or_else(|| format!("raw harness: no memory type for a {bytes}-byte buffer"))?;
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(type_index as u32);
        // SAFETY: valid device and allocate info.
        raw.memory =
            unsafe { device.allocate_memory(&alloc, None) }.map_err(vk_err("vkAllocateMemory"))?;
        // SAFETY: fresh buffer and memory of the required size and type.
        unsafe { device.bind_buffer_memory(buffer, raw.memory, 0) }
            .map_err(vk_err("vkBindBufferMemory"))?;
        if host {
            // Mapped once for the buffer's life, as a careful program would.
            // SAFETY: host-visible memory, not mapped yet, whole range.
            let ptr = unsafe {
                device.map_memory(raw.memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            }
            .map_err(vk_err("vkMapMemory"))?;
            raw.mapped = NonNull::new(ptr.cast::<u8>());
        }
        Ok(raw)
    }

    /// A primary command buffer recorded by `record`, usable while pending
    /// (`SIMULTANEOUS_USE`), freed with the pool when the harness goes.
    pub fn record(
        &self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> RawResult<vk::CommandBuffer> {
        let device = self.device();
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is used by this thread only.
        let cb = unsafe { device.allocate_command_buffers(&info) }
            .map_err(vk_err("vkAllocateCommandBuffers"))?[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
        // SAFETY: a fresh command buffer recorded by this thread only.
        unsafe { device.begin_command_buffer(cb, &begin) }
            .map_err(vk_err("vkBeginCommandBuffer"))?;
        record(device, cb);
        // SAFETY: the command buffer is in the recording state.
        unsafe { device.end_command_buffer(cb) }.map_err(vk_err("vkEndCommandBuffer"))?;
        Ok(cb)
    }

    /// Queue `cb` signalling the next timeline value. When `ordered`, it
    /// waits on the device for the previous submission, unless that is
    /// already known to be complete (what the runtime does for a graph's
    /// own submissions). Returns the value to wait for.
    pub fn submit(&mut self, cb: vk::CommandBuffer, ordered: bool) -> RawResult<u64> {
        let value = self.submitted + 1;
        let waits = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.semaphore)
            .value(self.submitted)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let signals = [vk::SemaphoreSubmitInfo::default()
            .semaphore(self.semaphore)
            .value(value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let cbs = [vk::CommandBufferSubmitInfo::default().command_buffer(cb)];
        let needs_wait = ordered && self.submitted > self.completed;
        let info = vk::SubmitInfo2::default()
            .wait_semaphore_infos(if needs_wait { &waits } else { &[] })
            .command_buffer_infos(&cbs)
            .signal_semaphore_infos(&signals);
        // SAFETY: the queue is used by this thread only; `cb` is executable
        // and SIMULTANEOUS_USE; the signalled value strictly increases.
        unsafe {
            self.device()
                .queue_submit2(self.queue, &[info], vk::Fence::null())
        }
        .map_err(vk_err("vkQueueSubmit2"))?;
        self.submitted = value;
        Ok(value)
    }

    /// Observe completion of `value`: spin on the counter for [`SPIN`], then
    /// block in `vkWaitSemaphores`.
    pub fn wait(&mut self, value: u64) -> RawResult<()> {
        let device = self.device();
        let spin_until = Instant::now() + SPIN;
        loop {
            // SAFETY: a timeline semaphore of this device.
            let now = unsafe { device.get_semaphore_counter_value(self.semaphore) }
                .map_err(vk_err("vkGetSemaphoreCounterValue"))?;
            if now >= value {
                self.completed = self.completed.max(now);
                return Ok(());
            }
            if Instant::now() >= spin_until {
                break;
            }
            std::hint::spin_loop();
        }
        let semaphores = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: the semaphore belongs to this device; `value` was submitted.
        unsafe { device.wait_semaphores(&info, u64::MAX) }.map_err(vk_err("vkWaitSemaphores"))?;
        self.completed = self.completed.max(value);
        Ok(())
    }

    /// Submit `cb` and wait for it.
    pub fn run(&mut self, cb: vk::CommandBuffer) -> RawResult<()> {
        let value = self.submit(cb, true)?;
        self.wait(value)
    }
}

impl Drop for RawGpu {
    fn drop(&mut self) {
        // SAFETY: after the device is idle nothing uses the pool (and the
        // command buffers allocated from it) or the semaphore.
        unsafe {
            let _ = self.device().device_wait_idle();
            self.device().destroy_semaphore(self.semaphore, None);
            self.device().destroy_command_pool(self.pool, None);
        }
    }
}

/// A buffer with its own dedicated memory; host-visible ones stay mapped.
pub struct RawBuffer {
    shared: Arc<Shared>,
    /// The Vulkan buffer.
    pub buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// Its size.
    pub bytes: usize,
    mapped: Option<NonNull<u8>>,
}

impl RawBuffer {
    /// The mapping of a host-visible buffer.
    fn mapping(&self) -> RawResult<NonNull<u8>> {
        self.mapped
            .ok_or_else(|| "raw harness: the buffer is not host-visible".to_string())
    }

    /// The first `words` 32-bit words of a host-visible buffer.
    pub fn read_words(&self, words: usize) -> RawResult<Vec<u32>> {
        let mut bytes = vec![0u8; (words * 4).min(self.bytes)];
        self.read_bytes(0, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect())
    }

    /// Copy `data` into a host-visible buffer at `offset`. No submitted
    /// work may be using the buffer.
    pub fn write_bytes(&self, offset: usize, data: &[u8]) -> RawResult<()> {
        let ptr = self.mapping()?;
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.bytes)
        {
            return Err("raw harness: write past the end of a buffer".into());
        }
        // SAFETY: a coherent mapping of `bytes` bytes alive as long as
        // `self`; the range is inside it; no device work uses it (the
        // caller waited) and the harness is single-threaded.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Copy bytes of a host-visible buffer from `offset` into `out`, after
    /// the device work that writes it has been waited for.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) -> RawResult<()> {
        let ptr = self.mapping()?;
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.bytes)
        {
            return Err("raw harness: read past the end of a buffer".into());
        }
        // SAFETY: as in `write_bytes`; the device writes were made visible
        // to the host by the submission the caller waited for.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // SAFETY: the benchmark waits for every submission before dropping
        // a buffer, so no pending work uses it.
        unsafe {
            self.shared.device.destroy_buffer(self.buffer, None);
            if self.memory != vk::DeviceMemory::null() {
                self.shared.device.free_memory(self.memory, None);
            }
        }
    }
}
