//! The Vulkan instance, the validation judge, and device discovery.

use crate::{
    options::{DeviceSelector, RuntimeOptions, Validation},
    vk_error,
};
use ash::{ext::debug_utils, vk};
use hrx_core::{
    CooperativeMatrixShape, DeviceKind, Error, Result, ScalarKind, SubgroupOps, Target,
};
use std::{
    ffi::{CStr, c_void},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";
const INSTALL_HINT: &str = "install a Vulkan driver and loader, for example \
     `apt-get install mesa-vulkan-drivers libvulkan1 vulkan-validationlayers`";

static VALIDATION_MESSAGES: AtomicUsize = AtomicUsize::new(0);

/// Number of validation messages reported in this process so far (cargo
/// feature `testing`).
///
/// Under [`Validation::Abort`] the process aborts at the first message, so
/// tests fail; this counter serves runs under [`Validation::Report`].
#[cfg(feature = "testing")]
pub fn validation_message_count() -> usize {
    VALIDATION_MESSAGES.load(Ordering::SeqCst)
}

/// A Vulkan instance with, optionally, the validation layers and a messenger.
pub(crate) struct Instance {
    pub(crate) entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    messenger: Option<(debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

/// A physical device and the facts read off it.
pub(crate) struct PhysicalDevice {
    pub(crate) raw: vk::PhysicalDevice,
    pub(crate) index: usize,
    pub(crate) target: Target,
    pub(crate) push_descriptor: bool,
    pub(crate) memory_budget_ext: bool,
    pub(crate) uniform_16bit: bool,
    /// `VK_KHR_pipeline_executable_properties` with `pipelineExecutableInfo`.
    pub(crate) pipeline_statistics: bool,
    /// `maxBufferSize` (Vulkan 1.3): the largest `VkBuffer` the device creates.
    pub(crate) max_buffer_bytes: u64,
    /// The size of the device's largest memory heap.
    pub(crate) largest_heap_bytes: u64,
    /// Core `robustBufferAccess`.
    pub(crate) robust_buffer_access: bool,
    /// `VK_EXT_robustness2` with `robustBufferAccess2`.
    pub(crate) robust_buffer_access2: bool,
}

/// The process-wide instances, one per validation mode. An
/// instance is created once and kept for the life of the process: creating
/// and destroying instances while other threads open devices has hung the
/// NVIDIA driver in our GPU test tier, and an instance costs milliseconds.
static SHARED: Mutex<[Option<Arc<Instance>>; 3]> = Mutex::new([None, None, None]);

/// Serialises device creation and destruction across domains (see `SHARED`).
pub(crate) static DEVICE_LIFECYCLE: Mutex<()> = Mutex::new(());

impl Instance {
    /// The shared instance for these options, created on first need.
    pub(crate) fn shared(options: &RuntimeOptions) -> Result<Arc<Self>> {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut shared[match options.validation {
            Validation::Off => 0,
            Validation::Report => 1,
            Validation::Abort => 2,
        }];
        if let Some(instance) = slot {
            return Ok(instance.clone());
        }
        let instance = Arc::new(Instance::new(options)?);
        *slot = Some(instance.clone());
        Ok(instance)
    }

    fn new(options: &RuntimeOptions) -> Result<Self> {
        // SAFETY: loading the system Vulkan loader runs its initialisation
        // code; we rely on it being a conforming loader, as every Vulkan
        // program must.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| Error::Unsupported(format!("no Vulkan loader ({e}); {INSTALL_HINT}")))?;
        let validation = options.validation.enabled();
        let mut layers = Vec::new();
        let mut extensions = Vec::new();
        if validation {
            // SAFETY: plain enumeration call on a loaded entry.
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(vk_error("vkEnumerateInstanceLayerProperties"))?;
            let present = available
                .iter()
                .any(|layer| layer.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
            if !present {
                return Err(Error::Unsupported(format!(
                    "validation requested but {VALIDATION_LAYER:?} is not installed; \
                     apt-get install vulkan-validationlayers"
                )));
            }
            layers.push(VALIDATION_LAYER.as_ptr());
            extensions.push(debug_utils::NAME.as_ptr());
        }
        let app = vk::ApplicationInfo::default()
            .application_name(c"hrx")
            .engine_name(c"hrx")
            .api_version(vk::API_VERSION_1_3);
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if validation {
            info = info.push_next(&mut features);
        }
        // SAFETY: every pointer in `info` refers to locals alive for the call.
        let raw = unsafe { entry.create_instance(&info, None) }.map_err(|result| {
            if result == vk::Result::ERROR_INCOMPATIBLE_DRIVER {
                Error::Unsupported(format!("no Vulkan 1.3 driver found; {INSTALL_HINT}"))
            } else {
                vk_error("vkCreateInstance")(result)
            }
        })?;
        let messenger = if validation {
            let loader = debug_utils::Instance::new(&entry, &raw);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                        | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(match options.validation {
                    Validation::Abort => on_validation_message_abort,
                    _ => on_validation_message,
                }));
            // SAFETY: the instance was created with the debug utils extension.
            match unsafe { loader.create_debug_utils_messenger(&info, None) } {
                Ok(handle) => Some((loader, handle)),
                Err(result) => {
                    // SAFETY: nothing else uses the instance yet.
                    unsafe { raw.destroy_instance(None) };
                    return Err(vk_error("vkCreateDebugUtilsMessengerEXT")(result));
                }
            }
        } else {
            None
        };
        Ok(Instance {
            entry,
            raw,
            messenger,
        })
    }

    /// Every physical device that can run hrx (Vulkan 1.3, timeline semaphores).
    pub(crate) fn devices(&self) -> Result<Vec<PhysicalDevice>> {
        // SAFETY: enumeration on a live instance.
        let raw = unsafe { self.raw.enumerate_physical_devices() }
            .map_err(vk_error("vkEnumeratePhysicalDevices"))?;
        Ok(raw
            .into_iter()
            .enumerate()
            .map(|(index, device)| self.describe(index, device))
            .filter(|device| {
                device.target.api_version >= (1, 3, 0) && device.target.timeline_semaphores
            })
            .collect())
    }

    /// Choose a device by selector, else by type preference.
    pub(crate) fn select(&self, selector: Option<DeviceSelector>) -> Result<PhysicalDevice> {
        let mut devices = self.devices()?;
        if devices.is_empty() {
            return Err(Error::Unsupported(format!(
                "no Vulkan 1.3 device with timeline semaphores; {INSTALL_HINT}"
            )));
        }
        let position = match &selector {
            Some(DeviceSelector::Index(index)) => devices.iter().position(|d| d.index == *index),
            Some(DeviceSelector::Name(name)) => {
                let name = name.to_lowercase();
                devices
                    .iter()
                    .position(|d| d.target.name.to_lowercase().contains(&name))
            }
            None => {
                let rank = |kind: DeviceKind| match kind {
                    DeviceKind::Discrete => 0,
                    DeviceKind::Integrated => 1,
                    DeviceKind::Virtual => 2,
                    DeviceKind::Cpu => 3,
                    DeviceKind::Other => 4,
                };
                (0..devices.len()).min_by_key(|&i| (rank(devices[i].target.kind), i))
            }
        };
        match position {
            Some(position) => Ok(devices.swap_remove(position)),
            None => Err(Error::Message(format!(
                "no Vulkan device matches {selector:?}; available: {}",
                devices
                    .iter()
                    .map(|d| format!("{}: {}", d.index, d.target.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    fn describe(&self, index: usize, device: vk::PhysicalDevice) -> PhysicalDevice {
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
        let mut properties = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut subgroup)
            .push_next(&mut size_control)
            .push_next(&mut maintenance4);
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut executable = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let mut features = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut v12)
            .push_next(&mut v11)
            .push_next(&mut executable);
        // SAFETY: queries on a device handle enumerated from this instance,
        // with correctly chained output structures that outlive the calls.
        let (extensions, memory) = unsafe {
            self.raw
                .get_physical_device_properties2(device, &mut properties);
            let memory = self.raw.get_physical_device_memory_properties(device);
            self.raw
                .get_physical_device_features2(device, &mut features);
            let extensions = self
                .raw
                .enumerate_device_extension_properties(device)
                .unwrap_or_default();
            (extensions, memory)
        };
        let largest_heap_bytes = memory
            .memory_heaps_as_slice()
            .iter()
            .map(|heap| heap.size)
            .max()
            .unwrap_or(0);
        let shader_int64 = features.features.shader_int64 == vk::TRUE;
        let robust_buffer_access = features.features.robust_buffer_access == vk::TRUE;
        let uniform_16bit = v11.uniform_and_storage_buffer16_bit_access == vk::TRUE;
        let has = |name: &CStr| {
            extensions
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(name))
        };
        let robust_buffer_access2 = has(ash::ext::robustness2::NAME) && {
            let mut robustness2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
            let mut query = vk::PhysicalDeviceFeatures2::default().push_next(&mut robustness2);
            // SAFETY: the device has the extension whose structure is
            // chained; both structures outlive the call.
            unsafe { self.raw.get_physical_device_features2(device, &mut query) };
            robustness2.robust_buffer_access2 == vk::TRUE
        };
        let p = properties.properties;
        let ops = subgroup.supported_operations;
        let kind = match p.device_type {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceKind::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceKind::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceKind::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceKind::Cpu,
            _ => DeviceKind::Other,
        };
        let cooperative_matrix = if has(ash::khr::cooperative_matrix::NAME) {
            self.cooperative_matrix_shapes(device)
        } else {
            Vec::new()
        };
        let limits = p.limits;
        let target = Target {
            name: p
                .device_name_as_c_str()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            kind,
            vendor_id: p.vendor_id,
            api_version: (
                vk::api_version_major(p.api_version),
                vk::api_version_minor(p.api_version),
                vk::api_version_patch(p.api_version),
            ),
            subgroup_size_min: size_control.min_subgroup_size.max(1),
            subgroup_size_max: size_control.max_subgroup_size.max(subgroup.subgroup_size),
            subgroup_ops: SubgroupOps {
                basic: ops.contains(vk::SubgroupFeatureFlags::BASIC),
                vote: ops.contains(vk::SubgroupFeatureFlags::VOTE),
                arithmetic: ops.contains(vk::SubgroupFeatureFlags::ARITHMETIC),
                ballot: ops.contains(vk::SubgroupFeatureFlags::BALLOT),
                shuffle: ops.contains(vk::SubgroupFeatureFlags::SHUFFLE),
                shuffle_relative: ops.contains(vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE),
            },
            max_workgroup_size: limits.max_compute_work_group_size,
            max_workgroup_invocations: limits.max_compute_work_group_invocations,
            max_workgroup_count: limits.max_compute_work_group_count,
            workgroup_memory_bytes: limits.max_compute_shared_memory_size,
            push_constant_bytes: limits.max_push_constants_size,
            max_storage_buffer_range: u64::from(limits.max_storage_buffer_range),
            storage_buffer_offset_alignment: limits.min_storage_buffer_offset_alignment,
            shader_f16: v12.shader_float16 == vk::TRUE,
            storage_16bit: v11.storage_buffer16_bit_access == vk::TRUE,
            shader_int64,
            timeline_semaphores: v12.timeline_semaphore == vk::TRUE,
            cooperative_matrix,
        };
        PhysicalDevice {
            raw: device,
            index,
            target,
            push_descriptor: has(ash::khr::push_descriptor::NAME),
            memory_budget_ext: has(ash::ext::memory_budget::NAME),
            uniform_16bit,
            pipeline_statistics: has(ash::khr::pipeline_executable_properties::NAME)
                && executable.pipeline_executable_info == vk::TRUE,
            // A driver reporting 0 (none should) leaves the check to it.
            max_buffer_bytes: match maintenance4.max_buffer_size {
                0 => u64::MAX,
                size => size,
            },
            largest_heap_bytes,
            robust_buffer_access,
            robust_buffer_access2,
        }
    }

    fn cooperative_matrix_shapes(&self, device: vk::PhysicalDevice) -> Vec<CooperativeMatrixShape> {
        let loader = ash::khr::cooperative_matrix::Instance::new(&self.entry, &self.raw);
        // SAFETY: the device advertises VK_KHR_cooperative_matrix.
        let properties =
            unsafe { loader.get_physical_device_cooperative_matrix_properties(device) }
                .unwrap_or_default();
        let mut shapes: Vec<CooperativeMatrixShape> = properties
            .iter()
            .filter(|p| {
                p.scope == vk::ScopeKHR::SUBGROUP
                    && p.a_type == p.b_type
                    && p.c_type == p.result_type
            })
            .filter_map(|p| {
                Some(CooperativeMatrixShape {
                    m: p.m_size,
                    n: p.n_size,
                    k: p.k_size,
                    input: component_kind(p.a_type)?,
                    accumulator: component_kind(p.c_type)?,
                })
            })
            .collect();
        shapes.dedup();
        shapes
    }
}

/// The scalar kind of a cooperative-matrix component type hrx knows.
pub(crate) fn component_kind(t: vk::ComponentTypeKHR) -> Option<ScalarKind> {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => Some(ScalarKind::F16),
        vk::ComponentTypeKHR::FLOAT32 => Some(ScalarKind::F32),
        vk::ComponentTypeKHR::SINT8 => Some(ScalarKind::I8),
        vk::ComponentTypeKHR::SINT32 => Some(ScalarKind::I32),
        // VK_COMPONENT_TYPE_BFLOAT16_KHR, newer than ash 0.38's headers.
        t if t.as_raw() == 1_000_141_000 => Some(ScalarKind::Bf16),
        _ => None,
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the device created from this instance is destroyed before
        // the instance (field order in `Gpu`), and nothing else uses it.
        unsafe {
            if let Some((loader, messenger)) = self.messenger.take() {
                loader.destroy_debug_utils_messenger(messenger, None);
            }
            self.raw.destroy_instance(None);
        }
    }
}

/// Every usable Vulkan device on this machine with its position in Vulkan's
/// enumeration order (the index `HRX_DEVICE` and
/// [`RuntimeOptions::with_device_index`] take) and its facts.
pub fn available_devices() -> Result<Vec<(usize, Target)>> {
    let instance = Instance::shared(&RuntimeOptions::default())?;
    Ok(instance
        .devices()?
        .into_iter()
        .map(|d| (d.index, d.target))
        .collect())
}

/// The messenger of a [`Validation::Report`] instance: print and count.
unsafe extern "system" fn on_validation_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes a valid callback structure for the duration
    // of the call; its message is a NUL-terminated string or null.
    let message = unsafe {
        data.as_ref()
            .and_then(|d| d.message_as_c_str())
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    VALIDATION_MESSAGES.fetch_add(1, Ordering::SeqCst);
    eprintln!("hrx: Vulkan validation {severity:?}: {message}");
    vk::FALSE
}

/// The messenger of a [`Validation::Abort`] instance: print, then abort.
/// The judge has spoken: a validation message fails the whole run, and
/// unwinding out of a foreign callback is not allowed.
unsafe extern "system" fn on_validation_message_abort(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the arguments are the layer's, passed on unchanged for the
    // duration of this call.
    unsafe { on_validation_message(severity, types, data, user) };
    eprintln!("hrx: aborting on validation message (validation mode Abort, HRX_VALIDATION=1)");
    std::process::abort();
}
