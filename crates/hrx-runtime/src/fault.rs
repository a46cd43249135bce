//! Deterministic fault injection, so tests can prove every failure rule.

/// A failure to inject with [`Runtime::inject_fault`](crate::Runtime::inject_fault).
///
/// Only runtimes built with
/// [`RuntimeOptions::with_fault_injection`](crate::RuntimeOptions::with_fault_injection)
/// accept faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The next submission fails as if `vkQueueSubmit2` had returned an
    /// error: nothing is queued, its completion fails, its graph is disabled.
    FailNextSubmission,
    /// The next submission runs, but its completion reports a native
    /// execution failure once the device finishes it, and its graph is
    /// disabled: the path of a fault found after work was queued.
    FailNextExecution,
    /// The device is treated as lost: every pending completion fails with
    /// `DeviceLost` and later submissions are refused.
    LoseDevice,
}
