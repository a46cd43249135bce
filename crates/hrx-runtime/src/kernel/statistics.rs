//! What the driver reports about a kernel's compiled code, through
//! `VK_KHR_pipeline_executable_properties`: register count, code size and
//! the like, under the driver's own names.

use super::GpuKernel;
use crate::vk_error;
use ash::vk;
use hrx_core::{Error, Result};

/// One statistic of a kernel's compiled code, as the driver names it.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelStatistic {
    /// The driver's short name (NVIDIA: "Register Count", ...).
    pub name: String,
    /// The driver's description of it.
    pub description: String,
    pub value: StatisticValue,
}

/// A statistic's value, in the type the driver reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StatisticValue {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl std::fmt::Display for StatisticValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatisticValue::Bool(v) => write!(f, "{v}"),
            StatisticValue::Int(v) => write!(f, "{v}"),
            StatisticValue::Uint(v) => write!(f, "{v}"),
            StatisticValue::Float(v) => write!(f, "{v}"),
        }
    }
}

impl GpuKernel {
    /// The driver's statistics of this kernel's compiled code (for a
    /// compute pipeline, its one executable).
    ///
    /// Errors with [`Error::Unsupported`] unless the runtime was opened
    /// with [`RuntimeOptions::with_pipeline_statistics`] on a device that
    /// has `VK_KHR_pipeline_executable_properties`.
    ///
    /// [`RuntimeOptions::with_pipeline_statistics`]: crate::RuntimeOptions::with_pipeline_statistics
    pub fn statistics(&self) -> Result<Vec<KernelStatistic>> {
        let gpu = &self.inner.gpu;
        let loader = gpu.executable_properties.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "kernel statistics of `{}`: {} was not opened with pipeline statistics, \
                 or lacks VK_KHR_pipeline_executable_properties",
                self.inner.contract.entry_point,
                gpu.target().name
            ))
        })?;
        let info = vk::PipelineExecutableInfoKHR::default()
            .pipeline(self.inner.pipeline)
            .executable_index(0);
        // SAFETY: the pipeline belongs to this device, was created with
        // CAPTURE_STATISTICS (the loader exists only when the device was
        // opened with the feature, and every pipeline then captures), and
        // stays alive while `self` holds it. Index 0 exists: a compute
        // pipeline has one executable.
        let raw = unsafe { loader.get_pipeline_executable_statistics(&info) }
            .map_err(vk_error("vkGetPipelineExecutableStatisticsKHR"))?;
        Ok(raw.iter().map(statistic).collect())
    }
}

fn statistic(raw: &vk::PipelineExecutableStatisticKHR) -> KernelStatistic {
    let text = |c: Result<&std::ffi::CStr, std::ffi::FromBytesUntilNulError>| {
        c.map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // SAFETY: `format` says which member of the union the driver wrote.
    let value = unsafe {
        match raw.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                StatisticValue::Bool(raw.value.b32 == vk::TRUE)
            }
            vk::PipelineExecutableStatisticFormatKHR::INT64 => StatisticValue::Int(raw.value.i64),
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => StatisticValue::Uint(raw.value.u64),
            _ => StatisticValue::Float(raw.value.f64),
        }
    };
    KernelStatistic {
        name: text(raw.name_as_c_str()),
        description: text(raw.description_as_c_str()),
        value,
    }
}
