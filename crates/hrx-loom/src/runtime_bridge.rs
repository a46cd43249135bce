//! The bridge to the runtime (cargo feature `runtime`): an [`Artifact`]
//! becomes a [`hrx_runtime::GpuKernel`] whose contract is derived from the
//! artifact's bindings, push-constant block and workgroup size.
//!
//! Typical use, with the artifact compiled for the runtime's own target:
//!
//! ```no_run
//! use hrx_loom::{Compiler, ScalarValue, Specialization};
//! use hrx_runtime::{MemoryPlacement, Runtime};
//! let runtime = Runtime::new()?;
//! let target = runtime.gpu()?.target().clone();
//! let source = "..."; // the loom module
//! let artifact = Compiler::for_target(None, &target)?
//!     .module(source)?
//!     .compile(&Specialization::new("@scale"))?;
//! let kernel = artifact.gpu_kernel(&runtime)?;
//! let data = runtime.allocate(4 * 1000, MemoryPlacement::GpuLocal)?;
//! let (constants, grid) = artifact
//!     .dispatch_args(&[ScalarValue::Index(1000), ScalarValue::F32(2.0)], &[1000])?;
//! let mut graph = runtime.graph();
//! graph.dispatch(&kernel, &[data.view()], &constants, grid)?;
//! graph.prepare()?.submit()?.wait()?;
//! # Ok::<(), hrx_core::Error>(())
//! ```

use crate::artifact::{Access, Artifact, ScalarValue};
use hrx_core::{Error, Result};
use hrx_runtime::{BindingContract, GpuKernel, KernelContract, Runtime};

impl Artifact {
    /// The runtime contract of this kernel: one storage binding per buffer
    /// argument (read-only ones as [`hrx_runtime::Access::Read`], written
    /// ones as [`hrx_runtime::Access::ReadWrite`]), each needing at least its
    /// static extent (or one declared element when the extent is dynamic)
    /// and an offset aligned to its declared element; the push-constant
    /// block size and the workgroup size.
    pub fn contract(&self) -> KernelContract {
        KernelContract {
            entry_point: self.entry_point.clone(),
            bindings: self
                .bindings
                .iter()
                .map(|b| BindingContract {
                    min_bytes: b
                        .min_bytes
                        .unwrap_or(u64::from(b.element_bytes))
                        .try_into()
                        .unwrap_or(usize::MAX),
                    alignment: b.alignment.max(1) as usize,
                    access: match b.access {
                        Access::Read => hrx_runtime::Access::Read,
                        Access::ReadWrite => hrx_runtime::Access::ReadWrite,
                    },
                })
                .collect(),
            push_constant_bytes: self.push_constant_bytes,
            workgroup_size: self.workgroup_size,
        }
    }

    /// Build the compute pipeline for this artifact on `runtime`'s device.
    /// The artifact should have been compiled for that device's
    /// [`Target`](hrx_core::Target); the contract is checked against it.
    pub fn gpu_kernel(&self, runtime: &Runtime) -> Result<GpuKernel> {
        GpuKernel::new(runtime, &self.spirv, self.contract())
    }

    /// The push-constant bytes and workgroup grid of one dispatch: the
    /// scalar launch arguments (in declaration order) packed as
    /// [`Artifact::push_constants_from`] does, and the launch region
    /// evaluated on `workload`. An empty grid (some axis 0, for an empty
    /// workload) is an error, since there is nothing to dispatch.
    pub fn dispatch_args(
        &self,
        scalars: &[ScalarValue],
        workload: &[u64],
    ) -> Result<(Vec<u8>, [u32; 3])> {
        let constants = self.push_constants_from(scalars)?;
        let grid = self.launch(workload)?;
        if grid.contains(&0) {
            return Err(Error::msg(format!(
                "kernel `{}`: workload {workload:?} gives the empty grid {grid:?}",
                self.kernel
            )));
        }
        Ok((constants, grid))
    }
}
