//! What the driver reports about a kernel's compiled code, through
//! `VK_KHR_pipeline_executable_properties`: register count, code size and
//! the like, under the driver's own names, and the intermediate or machine
//! code the driver chooses to show.

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

/// One representation of a kernel's compiled code the driver exposes (an
/// intermediate language or disassembly, as the driver chooses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRepresentation {
    /// The driver's short name for it.
    pub name: String,
    /// The driver's description of it.
    pub description: String,
    /// Whether `data` is text (a UTF-8 string without its terminator).
    pub is_text: bool,
    pub data: Vec<u8>,
}

impl GpuKernel {
    /// The loader, and the info naming this kernel's one executable, or
    /// the error of a runtime that did not ask for statistics.
    fn executable(
        &self,
    ) -> Result<(
        &ash::khr::pipeline_executable_properties::Device,
        vk::PipelineExecutableInfoKHR<'static>,
    )> {
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
        Ok((loader, info))
    }

    /// The representations of this kernel's compiled code the driver
    /// exposes, possibly none. Errors as [`statistics`](Self::statistics).
    pub fn internal_representations(&self) -> Result<Vec<KernelRepresentation>> {
        let (loader, info) = self.executable()?;
        // SAFETY: as in `statistics`; pipelines of such a runtime are also
        // built with CAPTURE_INTERNAL_REPRESENTATIONS. This first call only
        // reads the count and each representation's size (no data pointer).
        let sized = unsafe { loader.get_pipeline_executable_internal_representations(&info) }
            .map_err(vk_error(
                "vkGetPipelineExecutableInternalRepresentationsKHR",
            ))?;
        let mut buffers: Vec<Vec<u8>> = sized.iter().map(|r| vec![0; r.data_size]).collect();
        let mut raw: Vec<vk::PipelineExecutableInternalRepresentationKHR> = buffers
            .iter_mut()
            .map(|b| vk::PipelineExecutableInternalRepresentationKHR {
                data_size: b.len(),
                p_data: b.as_mut_ptr().cast(),
                ..Default::default()
            })
            .collect();
        let mut count = raw.len() as u32;
        // SAFETY: `raw` holds `count` structures whose data pointers refer
        // to `buffers` of the sizes the driver reported; both outlive the
        // call, and the driver writes at most `data_size` bytes to each.
        unsafe {
            (loader
                .fp()
                .get_pipeline_executable_internal_representations_khr)(
                loader.device(),
                &info,
                &mut count,
                raw.as_mut_ptr(),
            )
        }
        .result()
        .map_err(vk_error(
            "vkGetPipelineExecutableInternalRepresentationsKHR",
        ))?;
        Ok(raw
            .iter()
            .zip(buffers)
            .take(count as usize)
            .map(|(r, mut data)| {
                let is_text = r.is_text == vk::TRUE;
                data.truncate(r.data_size);
                if is_text && data.last() == Some(&0) {
                    data.pop();
                }
                KernelRepresentation {
                    name: c_text(r.name_as_c_str()),
                    description: c_text(r.description_as_c_str()),
                    is_text,
                    data,
                }
            })
            .collect())
    }

    /// The driver's statistics of this kernel's compiled code (for a
    /// compute pipeline, its one executable).
    ///
    /// Errors with [`Error::Unsupported`] unless the runtime was opened
    /// with [`RuntimeOptions::with_pipeline_statistics`] on a device that
    /// has `VK_KHR_pipeline_executable_properties`.
    ///
    /// [`RuntimeOptions::with_pipeline_statistics`]: crate::RuntimeOptions::with_pipeline_statistics
    pub fn statistics(&self) -> Result<Vec<KernelStatistic>> {
        let (loader, info) = self.executable()?;
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

/// A driver-written name or description (empty if unterminated).
fn c_text(c: std::result::Result<&std::ffi::CStr, std::ffi::FromBytesUntilNulError>) -> String {
    c.map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn statistic(raw: &vk::PipelineExecutableStatisticKHR) -> KernelStatistic {
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
        name: c_text(raw.name_as_c_str()),
        description: c_text(raw.description_as_c_str()),
        value,
    }
}
