//! hrx-runtime: Vulkan compute through `ash` and `gpu-allocator`.
//!
//! Design choices and contracts:
//!
//! - **Domains.** A [`Runtime`] is one scheduling and allocation domain on
//!   one device; clones share it. Creating one touches no hardware: the
//!   device opens on first need. Views, kernels, graphs and completions are
//!   checked against their domain before any work is queued; a foreign
//!   object is an [`Error::Message`].
//! - **Memory.** [`Runtime::allocate`] returns zero-initialised storage
//!   sub-allocated by gpu-allocator, charged against an optional budget.
//!   [`BufferView`]s keep their allocation alive, and every submission keeps
//!   what it uses alive until the device has finished with it.
//! - **Graphs, no barrier API.** A [`Graph`] records copies, fills and
//!   dispatches; each declares what it reads and writes (a kernel's
//!   [`KernelContract`] says so per binding). `prepare` derives the
//!   read-after-write, write-after-read and write-after-write edges at
//!   byte-range granularity, inserts a barrier only where an edge exists,
//!   and records the command buffer once. Replays allocate nothing.
//!   Intermediate results can live in the graph's shared scratch
//!   ([`Graph::scratch`]), ordered by those same hazards; state a kernel
//!   keeps between its workgroups in [`Graph::zeroed_scratch`], which is
//!   zero on allocation and which every user must leave zero (the caller's
//!   contract, not checked).
//! - **Completions.** Every submission signals the next value of the
//!   domain's timeline semaphore. A [`Completion`] observes one submission:
//!   it can be waited on (spin, then block), polled, cancelled, or awaited
//!   as a future (woken by a watcher thread, never by busy polling).
//!   Ordering after dependencies happens on the device; submitting never
//!   waits on the host. Failure propagates to dependent work; failure takes
//!   precedence over cancellation; a lost device fails everything pending
//!   with [`Error::DeviceLost`].
//! - **Lifetime.** Runtime clones, buffers, graphs and copy batches hold
//!   their domain; dropping the last of them waits for the domain's queued
//!   work and releases it on the dropping thread, and the device is
//!   destroyed by whoever drops its last handle (views and kernels keep the
//!   device, not the domain), before that drop returns: never by the
//!   watcher thread, whose driver calls could otherwise race process exit.
//! - **Kernel statistics, opt-in.** With
//!   [`RuntimeOptions::with_pipeline_statistics`] every pipeline is built
//!   with `CAPTURE_STATISTICS` and [`GpuKernel::statistics`] reports what
//!   the driver made of it (registers, spills, ...); without it, or on a
//!   device lacking `VK_KHR_pipeline_executable_properties`, the call is an
//!   [`Error::Unsupported`].
//! - **Workgroup-scope matrices, opt-in.** With
//!   [`RuntimeOptions::with_workgroup_matrices`] a device advertising
//!   `VK_NV_cooperative_matrix2` is created with its workgroup-scope,
//!   flexible-dimension (and tensor-addressing) features and
//!   [`Target::workgroup_matrices`](hrx_core::Target) says what it offers;
//!   otherwise that is `None`. For kernels brought as SPIR-V.
//! - **The caller's job.** Do not submit work that touches memory while the
//!   host holds a write mapping of it; declare accesses truthfully in kernel
//!   contracts (a kernel that writes a binding declared read-only races).
//! - **Validation.** With `HRX_VALIDATION=1` the Khronos validation layers
//!   (with synchronization validation) are enabled and any message aborts
//!   the process, so a test run fails on the first one.

mod builtin;
mod completion;
mod copy_batch;
mod device;
mod fault;
mod graph;
mod instance;
mod kernel;
mod memory;
mod options;
mod runtime;
mod submit;
mod timeline;
mod view;
mod workgroup_matrix;

pub use completion::Completion;
pub use copy_batch::CopyBatch;
pub use device::{Gpu, open_device_count};
pub use fault::Fault;
#[cfg(feature = "inspect")]
pub use graph::Operation;
pub use graph::{Barrier, Edge, ExecutableGraph, Graph, Hazard};
pub use hrx_core::{DeviceKind, Error, Result, Target};
pub use instance::{available_devices, validation_message_count};
pub use kernel::{
    Access, BindingContract, GpuKernel, KernelContract, KernelRepresentation, KernelStatistic,
    StatisticValue,
};
pub use memory::{Buffer, MappedRead, MappedWrite, MemoryPlacement, MemoryStats};
pub use options::{DeviceSelector, RuntimeOptions};
pub use runtime::Runtime;
pub use view::BufferView;

/// Map a Vulkan result code to [`Error::Vulkan`] naming the failed call.
pub(crate) fn vk_error(operation: &'static str) -> impl Fn(ash::vk::Result) -> Error {
    move |result| Error::Vulkan {
        operation,
        result: format!("{result:?}"),
    }
}
