//! From a compiled loom [`Artifact`] to a runtime [`GpuKernel`].

use hrx_core::Result;
use hrx_loom::Artifact;
use hrx_runtime::{Access, BindingContract, GpuKernel, KernelContract, Runtime};

/// The runtime contract an artifact promises: one storage binding per
/// buffer argument (read-only or read-write as the compiler inferred, at
/// least one element or the static extent, the artifact's alignment), its
/// push-constant block and workgroup size.
pub fn contract_of(artifact: &Artifact) -> KernelContract {
    KernelContract {
        entry_point: artifact.entry_point().to_string(),
        bindings: artifact
            .bindings()
            .iter()
            .map(|b| BindingContract {
                min_bytes: b
                    .min_bytes
                    .map_or(b.element_bytes as usize, |n| {
                        usize::try_from(n).unwrap_or(usize::MAX)
                    })
                    .max(1),
                alignment: (b.alignment.max(1) as usize).next_power_of_two(),
                access: match b.access {
                    hrx_loom::Access::Read => Access::Read,
                    hrx_loom::Access::ReadWrite => Access::ReadWrite,
                },
            })
            .collect(),
        push_constant_bytes: artifact.push_constant_bytes(),
        workgroup_size: artifact.workgroup_size(),
    }
}

/// Build the pipeline for `artifact` in `runtime`'s domain.
pub fn kernel_from_artifact(runtime: &Runtime, artifact: &Artifact) -> Result<GpuKernel> {
    GpuKernel::new(runtime, artifact.spirv(), contract_of(artifact))
}
