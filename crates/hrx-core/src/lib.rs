//! The foundation every hrx layer stands on.
//!
//! Design choices and contracts:
//!
//! - **One error type.** [`Error`] serves the runtime, the loom compiler, the
//!   tensor library and the inference pool alike, so `?` crosses layers
//!   without conversions. It is `#[non_exhaustive]`: match the variants you
//!   act on (typically [`Error::Busy`] for backpressure and
//!   [`Error::DeviceLost`]) and treat the rest as failures to report.
//! - **Errors are values that can be shared.** A failure of device work is
//!   observed by every clone of its completion, so the shared cause travels
//!   as `Arc<Error>` inside [`Error::Execution`].
//! - **Device facts are data.** [`Target`] describes what a compiler may
//!   assume about a device. It is read off the live device by the runtime,
//!   or taken from an offline profile ([`Target::lavapipe`],
//!   [`Target::hopper`]) so that kernels compile with no driver installed.
//! - **Kernel contracts are data too.** [`KernelContract`] (bindings with
//!   their [`Access`], push constants, workgroup size) and [`DispatchArgs`]
//!   are the vocabulary the loom compiler produces and the runtime
//!   consumes; they live here so neither of those crates depends on the
//!   other.
//! - [`cached_init`] memoises the first *successful* initialisation of a lazily
//!   built value; a failure is returned and the next call tries again.

mod contract;
mod error;
mod lazy;
mod target;

pub use contract::{Access, BindingContract, DispatchArgs, KernelContract};
pub use error::{Diagnostic, Error, Result};
pub use lazy::cached_init;
pub use target::{CooperativeMatrixShape, DeviceKind, ScalarKind, SubgroupOps, Target};
