//! How a [`Runtime`](crate::Runtime) chooses and configures its device.

/// Which physical device a runtime opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The device at this position in Vulkan's enumeration order.
    Index(usize),
    /// The first device whose name contains this text (case-insensitive).
    Name(String),
}

/// Options of a runtime domain. Building them touches no hardware.
///
/// Device selection order: [`RuntimeOptions::device`], then the `HRX_DEVICE`
/// environment variable (an index or a name fragment), then the first
/// discrete GPU, integrated GPU, virtual GPU and CPU device, in that order.
///
/// ```
/// use hrx_runtime::RuntimeOptions;
/// let options = RuntimeOptions::default()
///     .with_device_name("llvmpipe")
///     .with_memory_budget(64 << 20);
/// assert_eq!(options.memory_budget, Some(64 << 20));
/// ```
#[derive(Clone, Debug, Default)]
pub struct RuntimeOptions {
    /// Explicit device choice; `None` falls back to `HRX_DEVICE`, then to type preference.
    pub device: Option<DeviceSelector>,
    /// Enable the Khronos validation layers (with synchronization validation).
    /// `None` follows the `HRX_VALIDATION` environment variable.
    pub validation: Option<bool>,
    /// Upper bound on live bytes allocated through this domain; an allocation
    /// that would exceed it is refused with an error.
    pub memory_budget: Option<usize>,
    /// Allow [`Runtime::inject_fault`](crate::Runtime::inject_fault), the
    /// deterministic failure switch for tests. Off by default so that a
    /// serving process cannot fail its own work by accident.
    pub fault_injection: bool,
    /// Copy large device-local ranges with the built-in compute kernel
    /// rather than `vkCmdCopyBuffer`. `None` chooses by device: on for GPUs
    /// (an H200 copies ~5x faster through shaders than its copy engine),
    /// off for CPU devices (lavapipe copies ~6x faster with `memcpy`).
    pub compute_copy: Option<bool>,
    /// Ask the driver to keep statistics of each kernel's compiled code
    /// (register count, code size, ... as the driver names them), read
    /// with [`GpuKernel::statistics`](crate::GpuKernel::statistics), where
    /// the device has `VK_KHR_pipeline_executable_properties`. Off by
    /// default: a driver may bypass its pipeline cache for such pipelines
    /// and build them more slowly.
    pub pipeline_statistics: bool,
    /// Discover and enable workgroup-scope cooperative matrices
    /// (`VK_NV_cooperative_matrix2`: workgroup scope, flexible dimensions,
    /// tensor addressing) where the device has them, for kernels brought as
    /// SPIR-V; [`Target::workgroup_matrices`](hrx_core::Target) says what was
    /// found. Off by default: hrx's own kernels do not use them (on the H200
    /// they measured slower than its subgroup-scope kernels; see
    /// docs/tensor.md), and the extension's structures are declared by hand
    /// (ash 0.38 predates them), so a device is only created with them on
    /// request.
    pub workgroup_matrices: bool,
}

impl RuntimeOptions {
    /// Select the device at `index` in enumeration order.
    pub fn with_device_index(mut self, index: usize) -> Self {
        self.device = Some(DeviceSelector::Index(index));
        self
    }

    /// Select the first device whose name contains `name`.
    pub fn with_device_name(mut self, name: impl Into<String>) -> Self {
        self.device = Some(DeviceSelector::Name(name.into()));
        self
    }

    /// Force validation on or off, regardless of `HRX_VALIDATION`.
    pub fn with_validation(mut self, enabled: bool) -> Self {
        self.validation = Some(enabled);
        self
    }

    /// Refuse allocations beyond `bytes` live bytes.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }

    /// Permit deterministic fault injection (for tests).
    pub fn with_fault_injection(mut self) -> Self {
        self.fault_injection = true;
        self
    }

    /// Force the compute copy path on or off (see [`Self::compute_copy`]).
    pub fn with_compute_copy(mut self, enabled: bool) -> Self {
        self.compute_copy = Some(enabled);
        self
    }

    /// Enable workgroup-scope cooperative matrices where the device has
    /// them (see [`Self::workgroup_matrices`]).
    pub fn with_workgroup_matrices(mut self) -> Self {
        self.workgroup_matrices = true;
        self
    }

    /// Keep compiled-code statistics (see [`Self::pipeline_statistics`]).
    pub fn with_pipeline_statistics(mut self) -> Self {
        self.pipeline_statistics = true;
        self
    }

    pub(crate) fn validation_enabled(&self) -> bool {
        self.validation.unwrap_or_else(|| {
            std::env::var("HRX_VALIDATION").is_ok_and(|v| !v.is_empty() && v != "0")
        })
    }

    pub(crate) fn selector(&self) -> Option<DeviceSelector> {
        self.device.clone().or_else(|| {
            let text = std::env::var("HRX_DEVICE").ok()?;
            let text = text.trim();
            if text.is_empty() {
                None
            } else if let Ok(index) = text.parse() {
                Some(DeviceSelector::Index(index))
            } else {
                Some(DeviceSelector::Name(text.to_string()))
            }
        })
    }
}
