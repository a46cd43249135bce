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
//!   it can be waited on (spin, then block; `wait_spinning` sets how long
//!   it spins, for loops of short dependent submissions), polled,
//!   cancelled, or awaited as a future (woken by a watcher thread, never
//!   by busy polling).
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
//! - **Kernels are SPIR-V plus a contract.** [`GpuKernel::new`] takes a
//!   module and a [`KernelContract`] (bindings with their [`Access`], push
//!   constants, workgroup size), checks the contract against the device and
//!   every dispatch against the contract. The contract vocabulary lives in
//!   hrx-core and is re-exported here: the loom compiler, which stands
//!   beside this crate and never links it, states each artifact's contract
//!   and [`DispatchArgs`] in the same terms.
//! - **Kernel statistics, opt-in.** With
//!   [`RuntimeOptions::with_pipeline_statistics`] every pipeline is built
//!   with `CAPTURE_STATISTICS` and [`GpuKernel::statistics`] reports what
//!   the driver made of it (registers, spills, ...); without it, or on a
//!   device lacking `VK_KHR_pipeline_executable_properties`, the call is an
//!   [`Error::Unsupported`].
//! - **Mappings and submissions exclude each other.** Submitting work that
//!   writes memory the host holds mapped, or reads memory the host holds
//!   mapped for writing, is [`Error::Busy`]; a mapping taken after a
//!   submission waits for it (or, `try_`, is `Busy`; the `_timeout` forms
//!   wait at most that long). A flag that running work polls is written
//!   with [`BufferView::signal`], an atomic store that takes no mapping.
//! - **The caller's job.** Declare accesses truthfully in kernel contracts:
//!   a kernel that writes a binding declared read-only escapes the checks
//!   above and races.
//! - **Settings are code.** [`RuntimeOptions`] says which device opens and
//!   how; the library reads no environment variable. Binaries, examples
//!   and tests that want `HRX_DEVICE` and `HRX_VALIDATION` call
//!   [`RuntimeOptions::from_env`] (or [`Runtime::from_env`]), which refuses
//!   values it does not understand.
//! - **Validation.** [`Validation::Abort`] (`HRX_VALIDATION=1`) enables the
//!   Khronos validation layers (with synchronization validation) and any
//!   message aborts the process, so a test run fails on the first one;
//!   [`Validation::Report`] prints and counts messages instead.
//! - **Test hooks behind a feature.** The cargo feature `testing` adds
//!   deterministic fault injection (`Runtime::inject_fault`, `Fault`) and
//!   the process-wide counters `open_device_count` and
//!   `validation_message_count`; tests enable it through their
//!   dev-dependencies, and a product build never carries it.

mod builtin;
mod completion;
mod copy_batch;
mod device;
#[cfg(feature = "testing")]
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

pub use completion::Completion;
pub use copy_batch::CopyBatch;
pub use device::Gpu;
#[cfg(feature = "testing")]
pub use device::open_device_count;
#[cfg(feature = "testing")]
pub use fault::Fault;
#[cfg(feature = "inspect")]
pub use graph::Operation;
pub use graph::{Barrier, Edge, ExecutableGraph, Graph, Hazard};
pub use hrx_core::{DeviceKind, Error, Result, Target};
pub use instance::available_devices;
#[cfg(feature = "testing")]
pub use instance::validation_message_count;
pub use kernel::{
    Access, BindingContract, DispatchArgs, GpuKernel, KernelContract, KernelRepresentation,
    KernelStatistic, StatisticValue,
};
pub use memory::{Buffer, MappedRead, MappedWrite, MemoryPlacement, MemoryStats};
pub use options::{DeviceSelector, RuntimeOptions, Validation};
pub use runtime::Runtime;
pub use view::BufferView;

/// Map a Vulkan result code to [`Error::Vulkan`] naming the failed call.
pub(crate) fn vk_error(operation: &'static str) -> impl Fn(ash::vk::Result) -> Error {
    move |result| Error::Vulkan {
        operation,
        result: format!("{result:?}"),
    }
}
