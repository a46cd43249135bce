//! Queue submission: ordering on the device, failure carried forward.

use crate::{
    completion::Completion, device::Gpu, memory::Allocation, timeline::InFlight, vk_error,
};
use ash::vk;
use hrx_core::{Error, Result};
use std::{
    any::Any,
    sync::{Arc, OnceLock, atomic::Ordering},
};

/// One buffer a submission touches, for host-mapping conflict tracking.
pub(crate) struct BufferUse {
    pub(crate) allocation: Arc<Allocation>,
    pub(crate) writes: bool,
}

/// Whether a native failure has disabled an executable graph.
#[derive(Default)]
pub(crate) struct Health(OnceLock<Error>);

impl Health {
    pub(crate) fn check(&self) -> Result<()> {
        match self.0.get() {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    pub(crate) fn fail(&self, error: Error) {
        let _ = self.0.set(error);
    }
}

/// What to submit and what it depends on.
pub(crate) struct Submission<'a> {
    pub(crate) command_buffer: vk::CommandBuffer,
    /// Dependencies: ordered before this work; their failure is carried.
    pub(crate) after: &'a [Completion],
    /// The same graph's previous submission: ordered before, failure not carried.
    pub(crate) previous: Option<&'a Completion>,
    pub(crate) uses: &'a [BufferUse],
    pub(crate) keep_alive: &'a Arc<dyn Any + Send + Sync>,
    pub(crate) health: &'a Arc<Health>,
    /// Whether an armed injected fault may hit this submission. The
    /// runtime's own internal work (zero-filling new memory) says no, so a
    /// fault always lands on the user's next graph submission.
    pub(crate) injectable: bool,
}

/// Whether `dependency` is checked again when the work after it resolves:
/// still pending, or failed since `submit` first looked at it (one pending
/// at that look may fail before the second, and its error must not fall
/// between the two). A pending one costs an atomic load, as before.
fn carried(dependency: &Completion) -> bool {
    dependency.pending_value().is_some() || matches!(dependency.result(), Some(Err(_)))
}

/// The uses of one submission announced to the memory they touch
/// ([`Allocation::announce_device_use`]) until it is dropped, on every
/// path out of `submit`: all announced, one fence, then every use checked
/// against host mappings.
struct AnnouncedUses<'a> {
    uses: &'a [BufferUse],
}

impl<'a> AnnouncedUses<'a> {
    fn announce(uses: &'a [BufferUse]) -> Result<Self> {
        for used in uses {
            used.allocation.announce_device_use(used.writes);
        }
        let announced = AnnouncedUses { uses };
        std::sync::atomic::fence(Ordering::SeqCst);
        for used in uses {
            used.allocation.check_device_use(used.writes)?;
        }
        Ok(announced)
    }
}

impl Drop for AnnouncedUses<'_> {
    fn drop(&mut self) {
        for used in self.uses {
            used.allocation.end_device_use(used.writes);
        }
    }
}

impl Gpu {
    /// Queue `work` after its dependencies, without waiting on the host.
    ///
    /// A dependency that already failed or was cancelled makes the result a
    /// completion carrying that error, and nothing is queued. A native
    /// submission failure disables the graph (`health`) and is reported
    /// through the returned completion. Only usage errors (another domain,
    /// a lost device) are returned as `Err`.
    pub(crate) fn submit(&self, work: Submission<'_>) -> Result<Completion> {
        let timeline = &self.timeline;
        if let Some(why) = timeline.lost() {
            return Err(Error::DeviceLost(why.to_string()));
        }
        work.health.check()?;
        let mut wait_value = work
            .previous
            .and_then(Completion::pending_value)
            .unwrap_or(0);
        for dependency in work.after {
            if let Some(domain) = dependency.domain()
                && domain != self.domain
            {
                return Err(Error::Message(
                    "dependency belongs to another runtime domain".into(),
                ));
            }
            match dependency.pending_value() {
                Some(value) => wait_value = wait_value.max(value),
                None => {
                    if let Some(Err(error)) = dependency.result() {
                        return Ok(Completion::failed(error));
                    }
                }
            }
        }
        // Fresh device-local memory is zeroed by a fill queued at
        // allocation: wait for it on the device.
        for used in work.uses {
            wait_value = wait_value.max(used.allocation.zeroed_at());
        }
        // A conflicting host mapping makes the work `Busy`; new mappings
        // wait until the use is noted (or the work abandoned).
        let _announced = AnnouncedUses::announce(work.uses)?;
        let state = self.timeline.new_state();
        for dependency in work.after {
            if carried(dependency) {
                state.add_dependency(dependency.clone());
            }
        }
        if work.injectable
            && self.fault_injection
            && self.fail_next_submission.swap(false, Ordering::AcqRel)
        {
            let error = Error::Vulkan {
                operation: "vkQueueSubmit2",
                result: "ERROR_UNKNOWN (injected fault)".into(),
            }
            .shared();
            work.health.fail(error.clone());
            state.resolve_with(Err(error));
            return Ok(Completion::from_state(state));
        }
        let inject_failure = work.injectable
            && self.fault_injection
            && self.fail_next_execution.swap(false, Ordering::AcqRel);

        let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let value = timeline.submitted.load(Ordering::Acquire) + 1;
        state.set_value(value);
        let waits = [vk::SemaphoreSubmitInfo::default()
            .semaphore(timeline.semaphore())
            .value(wait_value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let signals = [vk::SemaphoreSubmitInfo::default()
            .semaphore(timeline.semaphore())
            .value(value)
            .stage_mask(vk::PipelineStageFlags2::ALL_COMMANDS)];
        let commands = [vk::CommandBufferSubmitInfo::default().command_buffer(work.command_buffer)];
        let needs_wait = wait_value > timeline.completed();
        let info = vk::SubmitInfo2::default()
            .wait_semaphore_infos(if needs_wait { &waits } else { &[] })
            .command_buffer_infos(&commands)
            .signal_semaphore_infos(&signals);
        // SAFETY: the queue is externally synchronised by its lock; the
        // command buffer is recorded, executable, and kept alive with
        // everything it references until the device passes `value`
        // (`keep_alive` in the in-flight list); timeline values are
        // strictly increasing because they are chosen under the queue lock.
        let result = unsafe { self.raw().queue_submit2(*queue, &[info], vk::Fence::null()) };
        match result {
            Ok(()) => {
                timeline.submitted.store(value, Ordering::Release);
                for used in work.uses {
                    used.allocation.note_use(value, used.writes);
                }
                timeline.push(InFlight {
                    value,
                    state: state.clone(),
                    _keep_alive: work.keep_alive.clone(),
                    health: work.health.clone(),
                    inject_failure,
                });
                drop(queue);
                Ok(Completion::from_state(state))
            }
            Err(vk::Result::ERROR_DEVICE_LOST) => {
                drop(queue);
                timeline.lose("vkQueueSubmit2 reported device loss");
                Err(Error::DeviceLost(
                    "vkQueueSubmit2 reported device loss".into(),
                ))
            }
            Err(result) => {
                drop(queue);
                let error = vk_error("vkQueueSubmit2")(result).shared();
                work.health.fail(error.clone());
                state.resolve_with(Err(error));
                Ok(Completion::from_state(state))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::carried;
    use crate::completion::{Completion, State};
    use hrx_core::Error;
    use std::sync::{Arc, Weak};

    #[test]
    fn pending_and_failed_dependencies_are_carried_finished_ones_not() {
        let pending = Arc::new(State::pending(1, Weak::new()));
        let dependency = Completion::from_state(pending.clone());
        assert!(carried(&dependency));
        // Failed after a first look saw it pending: still carried.
        pending.resolve_with(Err(Error::Cancelled));
        assert!(carried(&dependency));
        let succeeded = Arc::new(State::pending(1, Weak::new()));
        succeeded.resolve_with(Ok(()));
        assert!(!carried(&Completion::from_state(succeeded)));
        assert!(!carried(&Completion::ready()));
        assert!(carried(&Completion::failed(Error::Cancelled)));
    }
}
