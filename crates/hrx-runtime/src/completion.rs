//! Completions: cloneable observers of one submission.

use crate::{
    Runtime,
    submit::Health,
    timeline::{SPIN, Timeline},
};
use hrx_core::{Error, Result};
use smallvec::SmallVec;
use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

/// An observer of one submission of device work.
///
/// States: pending, succeeded, failed ([`Error::Execution`] with the shared
/// cause, or [`Error::DeviceLost`]) and cancelled ([`Error::Cancelled`]).
/// Failure takes precedence over cancellation; work submitted after a
/// failed or cancelled dependency reports that dependency's error. Clones
/// observe the same submission; dropping an observer never cancels work.
///
/// `Completion` is also a [`Future`]: polling never blocks, and a watcher
/// thread that waits on the device's timeline semaphore wakes the task.
///
/// ```
/// use hrx_runtime::Completion;
/// let done = Completion::ready();
/// assert!(done.is_complete());
/// assert!(done.wait().is_ok());
/// ```
#[derive(Clone, Default)]
pub struct Completion {
    state: Option<Arc<State>>,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.result() {
            None => f.write_str("Completion(pending)"),
            Some(Ok(())) => f.write_str("Completion(succeeded)"),
            Some(Err(e)) => write!(f, "Completion({e})"),
        }
    }
}

pub(crate) struct State {
    pub(crate) domain: u64,
    timeline: Weak<Timeline>,
    /// Timeline value the submission signals; 0 before it is queued.
    value: AtomicU64,
    cancelled: AtomicBool,
    resolved: AtomicBool,
    status: Mutex<Status>,
}

enum Status {
    Pending {
        dependencies: SmallVec<[Completion; 2]>,
    },
    Done(Result<()>),
}

impl State {
    pub(crate) fn pending(domain: u64, timeline: Weak<Timeline>) -> Self {
        State {
            domain,
            timeline,
            value: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            resolved: AtomicBool::new(false),
            status: Mutex::new(Status::Pending {
                dependencies: SmallVec::new(),
            }),
        }
    }

    fn done(result: Result<()>) -> Self {
        let state = State::pending(0, Weak::new());
        state.resolve_with(result);
        state
    }

    /// Make a recycled state pending again (called only when unobserved).
    pub(crate) fn reset(&self) {
        self.value.store(0, Ordering::Relaxed);
        self.cancelled.store(false, Ordering::Relaxed);
        self.resolved.store(false, Ordering::Release);
        let mut status = self.lock();
        match &mut *status {
            Status::Pending { dependencies } => dependencies.clear(),
            Status::Done(_) => {
                *status = Status::Pending {
                    dependencies: SmallVec::new(),
                }
            }
        }
    }

    pub(crate) fn set_value(&self, value: u64) {
        self.value.store(value, Ordering::Release);
    }

    pub(crate) fn add_dependency(&self, dependency: Completion) {
        if let Status::Pending { dependencies } = &mut *self.lock() {
            dependencies.push(dependency);
        }
    }

    /// Resolve once the device finished: a native failure first, then the
    /// first failed dependency, then cancellation, else success.
    pub(crate) fn resolve(&self, native_failure: bool, health: &Health) {
        let mut status = self.lock();
        let Status::Pending { dependencies } = &mut *status else {
            return;
        };
        let result = if native_failure {
            let error = Error::Vulkan {
                operation: "device execution",
                result: "ERROR_UNKNOWN (injected fault)".into(),
            }
            .shared();
            health.fail(error.clone());
            Err(error)
        } else if let Some(error) = dependencies.iter().find_map(|d| d.result()?.err()) {
            Err(error)
        } else if self.cancelled.load(Ordering::Acquire) {
            Err(Error::Cancelled)
        } else {
            Ok(())
        };
        *status = Status::Done(result);
        self.resolved.store(true, Ordering::Release);
    }

    /// Resolve now with a given outcome (immediate failures, device loss).
    pub(crate) fn resolve_with(&self, result: Result<()>) {
        let mut status = self.lock();
        if matches!(*status, Status::Pending { .. }) {
            *status = Status::Done(result);
            self.resolved.store(true, Ordering::Release);
        }
    }

    fn result(&self) -> Option<Result<()>> {
        if !self.resolved.load(Ordering::Acquire) {
            return None;
        }
        match &*self.lock() {
            Status::Done(result) => Some(result.clone()),
            Status::Pending { .. } => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Completion {
    /// A completion that has already succeeded, belonging to no domain: the
    /// producer of data that needed no device work.
    pub fn ready() -> Self {
        Completion { state: None }
    }

    /// A completion that has already failed with `error`.
    pub fn failed(error: Error) -> Self {
        Completion {
            state: Some(Arc::new(State::done(Err(error)))),
        }
    }

    pub(crate) fn from_state(state: Arc<State>) -> Self {
        Completion { state: Some(state) }
    }

    /// The timeline value to wait for, or `None` when already resolved.
    pub(crate) fn pending_value(&self) -> Option<u64> {
        let state = self.state.as_ref()?;
        if state.resolved.load(Ordering::Acquire) {
            return None;
        }
        Some(state.value.load(Ordering::Acquire))
    }

    pub(crate) fn domain(&self) -> Option<u64> {
        self.state.as_ref().map(|s| s.domain).filter(|&d| d != 0)
    }

    /// The outcome, or `None` while the work is pending (or, once cancelled,
    /// still draining on the device). Never blocks.
    pub fn result(&self) -> Option<Result<()>> {
        let Some(state) = &self.state else {
            return Some(Ok(()));
        };
        state.result().or_else(|| {
            state.timeline.upgrade()?.poll();
            state.result()
        })
    }

    /// Whether the work has finished on the device (successfully or not).
    pub fn is_complete(&self) -> bool {
        self.state.is_none() || self.result().is_some()
    }

    /// Block until the work finishes: spin briefly, then sleep in the driver.
    pub fn wait(&self) -> Result<()> {
        self.wait_until(None, SPIN).unwrap_or(Ok(()))
    }

    /// Like [`wait`](Self::wait), polling the device's counter for up to
    /// `spin` before sleeping in the driver.
    ///
    /// A sleeping thread wakes some tens of microseconds after the work
    /// finishes, which a loop of short dependent submissions (a decoder's
    /// steps) pays on every one; polling answers within a microsecond or
    /// two, for one host core kept busy meanwhile. `wait` polls for 20 us.
    ///
    /// ```no_run
    /// # fn demo(done: hrx_runtime::Completion) -> hrx_core::Result<()> {
    /// done.wait_spinning(std::time::Duration::from_millis(2))?;
    /// # Ok(()) }
    /// ```
    pub fn wait_spinning(&self, spin: Duration) -> Result<()> {
        self.wait_until(None, spin).unwrap_or(Ok(()))
    }

    /// Like [`wait`](Self::wait) with a limit: `Ok(false)` if the work is
    /// still pending after `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        match self.wait_until(Some(Instant::now() + timeout), SPIN) {
            Some(result) => result.map(|()| true),
            None => Ok(false),
        }
    }

    fn wait_until(&self, deadline: Option<Instant>, spin: Duration) -> Option<Result<()>> {
        let Some(state) = &self.state else {
            return Some(Ok(()));
        };
        loop {
            if let Some(result) = state.result() {
                return Some(result);
            }
            let Some(timeline) = state.timeline.upgrade() else {
                // The device is gone; its destructor drained and resolved
                // everything, so an unresolved state means it never ran.
                return Some(
                    state.result().unwrap_or_else(|| {
                        Err(Error::DeviceLost("the device was destroyed".into()))
                    }),
                );
            };
            if let Some(why) = timeline.lost() {
                state.resolve_with(Err(Error::DeviceLost(why.to_string())));
                continue;
            }
            let value = state.value.load(Ordering::Acquire);
            if !timeline.wait_spinning(value, deadline, spin) {
                return state.result();
            }
        }
    }

    /// Cancel: the completion (and everything submitted after it) reports
    /// [`Error::Cancelled`] unless it fails. Work already on the device is
    /// drained before anything it uses is released, so the completion stays
    /// pending until then. No effect once the work has finished.
    pub fn cancel(&self) {
        if let Some(state) = &self.state {
            state.cancelled.store(true, Ordering::Release);
        }
    }

    /// Reject a completion of another domain. A ready completion belongs to
    /// every domain.
    pub fn validate_runtime(&self, runtime: &Runtime) -> Result<()> {
        match self.domain() {
            Some(domain) if domain != runtime.id() => Err(Error::Message(
                "completion belongs to another runtime domain".into(),
            )),
            _ => Ok(()),
        }
    }
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(state) = &self.state else {
            return Poll::Ready(Ok(()));
        };
        if let Some(result) = state.result() {
            return Poll::Ready(result);
        }
        let Some(timeline) = state.timeline.upgrade() else {
            return Poll::Ready(
                state
                    .result()
                    .unwrap_or_else(|| Err(Error::DeviceLost("the device was destroyed".into()))),
            );
        };
        timeline.poll();
        if let Some(result) = state.result() {
            return Poll::Ready(result);
        }
        timeline.register(state.value.load(Ordering::Acquire), cx.waker());
        // Re-check: the watcher may have resolved it before we registered.
        match state.result() {
            Some(result) => Poll::Ready(result),
            None => Poll::Pending,
        }
    }
}
