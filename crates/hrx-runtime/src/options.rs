//! How a [`Runtime`](crate::Runtime) chooses and configures its device.
//!
//! Settings are values in code. The library never reads the environment by
//! itself: a binary, example, bench or test that wants the `HRX_DEVICE` and
//! `HRX_VALIDATION` variables calls [`RuntimeOptions::from_env`] once, which
//! parses both and refuses a value it does not understand.

use hrx_core::{Error, Result};

/// The variable [`RuntimeOptions::from_env`] reads the device choice from.
const DEVICE_VAR: &str = "HRX_DEVICE";
/// The variable [`RuntimeOptions::from_env`] reads the validation mode from.
const VALIDATION_VAR: &str = "HRX_VALIDATION";
/// The variable [`RuntimeOptions::from_env`] reads robust buffer access from.
const ROBUST_VAR: &str = "HRX_ROBUST_ACCESS";

/// Which physical device a runtime opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The device at this position in Vulkan's enumeration order.
    Index(usize),
    /// The first device whose name contains this text (case-insensitive).
    Name(String),
}

/// Whether the Khronos validation layers (with synchronization validation)
/// run, and what a message they report does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Validation {
    /// No layers (the default): nothing is checked, nothing costs.
    #[default]
    Off,
    /// Layers on; every message is printed to stderr and counted, and the
    /// process goes on.
    Report,
    /// Layers on; the first message is printed and aborts the process, so
    /// a test run fails on it. (Unwinding out of the driver's callback is
    /// not allowed, so abort is the only way to fail from there.)
    Abort,
}

impl Validation {
    /// Whether the layers are enabled.
    pub fn enabled(self) -> bool {
        self != Validation::Off
    }

    /// Parse an `HRX_VALIDATION` value: `0` (off), `1` (on; any message
    /// aborts) or `report` (on; messages are printed and counted).
    pub fn parse(text: &str) -> Result<Validation> {
        match text.trim() {
            "0" => Ok(Validation::Off),
            "1" => Ok(Validation::Abort),
            "report" => Ok(Validation::Report),
            other => Err(Error::Message(format!(
                "{VALIDATION_VAR}={other:?}: expected 0 (off), 1 (on, any message aborts) \
                 or report (on, messages printed)"
            ))),
        }
    }
}

impl DeviceSelector {
    /// Parse an `HRX_DEVICE` value: a number is an index in Vulkan's
    /// enumeration order, anything else a name fragment.
    pub fn parse(text: &str) -> Result<DeviceSelector> {
        let text = text.trim();
        if text.is_empty() {
            return Err(Error::Message(format!(
                "{DEVICE_VAR}: an empty device choice (give an index or a name fragment)"
            )));
        }
        Ok(match text.parse() {
            Ok(index) => DeviceSelector::Index(index),
            Err(_) => DeviceSelector::Name(text.to_string()),
        })
    }
}

/// Options of a runtime domain. Building them touches no hardware.
///
/// Device selection order: [`RuntimeOptions::device`], then the first
/// discrete GPU, integrated GPU, virtual GPU and CPU device, in that order.
/// [`RuntimeOptions::from_env`] fills `device` and `validation` from the
/// environment for programs that want that.
///
/// ```
/// use hrx_runtime::RuntimeOptions;
/// let options = RuntimeOptions::default()
///     .with_device_name("llvmpipe")
///     .with_memory_budget(64 << 20);
/// assert_eq!(options.memory_budget, Some(64 << 20));
/// ```
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Explicit device choice; `None` chooses by device type.
    pub device: Option<DeviceSelector>,
    /// The Khronos validation layers, and what their messages do.
    pub validation: Validation,
    /// Upper bound on live bytes allocated through this domain; an allocation
    /// that would exceed it is refused with an error.
    pub memory_budget: Option<usize>,
    /// Allow `Runtime::inject_fault` (cargo feature `testing`), the
    /// deterministic failure switch for tests. Off by default so that a
    /// serving process cannot fail its own work by accident.
    #[cfg(feature = "testing")]
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
    /// Robust buffer access where the device has it: a kernel's loads past
    /// the end of a binding return zero and its stores there are dropped,
    /// instead of touching other memory (`robustBufferAccess`, and
    /// `robustBufferAccess2` where the device has `VK_EXT_robustness2`).
    /// On by default: on the H200 it cost nothing measurable
    /// (docs/runtime.md), and it contains kernels from outside hrx that are
    /// not trusted to stay in bounds. A device without the feature opens
    /// without it; [`Gpu::robust_buffer_access`](crate::Gpu) says which.
    pub robust_buffer_access: bool,
    /// How long closing the runtime (dropping its last handle) waits for
    /// submitted work. Past it the device is taken as hung: pending work
    /// fails with [`Error::DeviceLost`], and the device and the memory that
    /// work uses are leaked rather than destroyed under it, so a hung
    /// device cannot hang the process. `None` waits forever. Default: 60 s.
    pub close_timeout: Option<std::time::Duration>,
}

/// [`RuntimeOptions::close_timeout`] unless set otherwise.
pub const DEFAULT_CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            device: None,
            validation: Validation::default(),
            memory_budget: None,
            #[cfg(feature = "testing")]
            fault_injection: false,
            compute_copy: None,
            pipeline_statistics: false,
            robust_buffer_access: true,
            close_timeout: Some(DEFAULT_CLOSE_TIMEOUT),
        }
    }
}

impl RuntimeOptions {
    /// Default options with `device` and `validation` taken from the
    /// environment: `HRX_DEVICE` (an index in Vulkan's enumeration order or
    /// a name fragment), `HRX_VALIDATION` (`0`, `1` or `report`; see
    /// [`Validation::parse`]) and `HRX_ROBUST_ACCESS` (`0` or `1`). An unset or empty variable leaves the
    /// default; any other value that does not parse is an error, never
    /// ignored. For binaries, examples, benches and tests: the library
    /// itself never calls it.
    pub fn from_env() -> Result<RuntimeOptions> {
        let var = |name: &str| match std::env::var(name) {
            Ok(text) if text.trim().is_empty() => Ok(None),
            Ok(text) => Ok(Some(text)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::Message(format!(
                "{name}: the value is not valid Unicode"
            ))),
        };
        let mut options = RuntimeOptions::default();
        if let Some(text) = var(DEVICE_VAR)? {
            options.device = Some(DeviceSelector::parse(&text)?);
        }
        if let Some(text) = var(VALIDATION_VAR)? {
            options.validation = Validation::parse(&text)?;
        }
        if let Some(text) = var(ROBUST_VAR)? {
            options.robust_buffer_access = match text.trim() {
                "0" => false,
                "1" => true,
                other => {
                    return Err(Error::Message(format!(
                        "{ROBUST_VAR}: `{other}` is not 0 or 1"
                    )));
                }
            };
        }
        Ok(options)
    }

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

    /// Run the validation layers in `mode` (see [`Validation`]).
    pub fn with_validation(mut self, mode: Validation) -> Self {
        self.validation = mode;
        self
    }

    /// Wait at most `timeout` for submitted work when closing (see
    /// [`close_timeout`](Self::close_timeout)).
    pub fn with_close_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Turn robust buffer access on or off (see
    /// [`robust_buffer_access`](Self::robust_buffer_access)).
    pub fn with_robust_buffer_access(mut self, on: bool) -> Self {
        self.robust_buffer_access = on;
        self
    }

    /// Refuse allocations beyond `bytes` live bytes.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = Some(bytes);
        self
    }

    /// Permit deterministic fault injection (cargo feature `testing`).
    #[cfg(feature = "testing")]
    pub fn with_fault_injection(mut self) -> Self {
        self.fault_injection = true;
        self
    }

    /// Force the compute copy path on or off (see [`Self::compute_copy`]).
    pub fn with_compute_copy(mut self, enabled: bool) -> Self {
        self.compute_copy = Some(enabled);
        self
    }

    /// Keep compiled-code statistics (see [`Self::pipeline_statistics`]).
    pub fn with_pipeline_statistics(mut self) -> Self {
        self.pipeline_statistics = true;
        self
    }

    /// Whether faults may be injected (never without the `testing` feature).
    pub(crate) fn fault_injection_enabled(&self) -> bool {
        #[cfg(feature = "testing")]
        return self.fault_injection;
        #[cfg(not(feature = "testing"))]
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_values_parse_or_fail() {
        assert_eq!(Validation::parse("0").unwrap(), Validation::Off);
        assert_eq!(Validation::parse("1").unwrap(), Validation::Abort);
        assert_eq!(Validation::parse(" report ").unwrap(), Validation::Report);
        for bad in ["yes", "2", "true", "on"] {
            let err = Validation::parse(bad).unwrap_err().to_string();
            assert!(err.contains("HRX_VALIDATION"), "{bad}: {err}");
        }
        assert!(!Validation::Off.enabled() && Validation::Report.enabled());
    }

    #[test]
    fn defaults_are_robust_access_and_a_bounded_close() {
        let options = RuntimeOptions::default();
        assert!(options.robust_buffer_access);
        assert_eq!(options.close_timeout, Some(DEFAULT_CLOSE_TIMEOUT));
        assert_eq!(DEFAULT_CLOSE_TIMEOUT, std::time::Duration::from_secs(60));
        assert!(
            !options
                .with_robust_buffer_access(false)
                .robust_buffer_access
        );
    }

    #[test]
    fn device_values_are_indices_or_names() {
        assert_eq!(
            DeviceSelector::parse("1").unwrap(),
            DeviceSelector::Index(1)
        );
        assert_eq!(
            DeviceSelector::parse(" llvmpipe ").unwrap(),
            DeviceSelector::Name("llvmpipe".into())
        );
        assert!(DeviceSelector::parse("  ").is_err());
    }
}
