//! Copy batches: fixed destinations refilled from sources chosen per
//! submission, for feeding device tensors into fixed-address inputs without
//! preparing a graph each time.

use crate::{
    BufferView, Completion, Runtime,
    device::{CommandBuffer, Gpu},
    submit::{BufferUse, Health, Submission},
    vk_error,
};
use ash::vk;
use hrx_core::{Error, Result};
use std::{
    any::Any,
    sync::{Arc, Mutex},
};

/// A set of fixed destination views, each refilled by a device copy from a
/// source view chosen at submission.
///
/// Unlike an [`ExecutableGraph`](crate::ExecutableGraph), whose commands
/// name fixed buffers, a batch re-records one command buffer it owns on
/// every [`submit_after`](Self::submit_after). Everything that recording
/// needs is allocated when the batch is built, so a submission makes no
/// heap allocation. The command buffer can only be re-recorded once the
/// batch's previous submission has finished: a submission that finds it
/// still running waits for it on the host. Callers that reuse a batch only
/// after observing its previous completion (an inference slot does) never
/// wait.
///
/// Copies use `vkCmdCopyBuffer`; ordering against the work that produced
/// the sources and the work that reads the destinations comes from the
/// domain's timeline semaphore, as for graphs.
///
/// ```no_run
/// # fn main() -> hrx_core::Result<()> {
/// use hrx_runtime::{MemoryPlacement, Runtime};
/// let runtime = Runtime::new()?;
/// let input = runtime.allocate(256, MemoryPlacement::GpuLocal)?;
/// let batch = runtime.copy_batch(vec![input.view()])?;
/// let source = runtime.allocate(256, MemoryPlacement::GpuLocal)?;
/// batch.submit_after(&[source.view()], &[])?.wait()?;
/// # Ok(()) }
/// ```
pub struct CopyBatch {
    runtime: Runtime,
    destinations: Vec<BufferView>,
    health: Arc<Health>,
    state: Mutex<Option<State>>,
}

/// Built at the first submission, when the device is needed.
struct State {
    gpu: Arc<Gpu>,
    /// The command buffer and the sources it currently reads; every
    /// in-flight submission keeps them alive.
    recorded: Arc<Recorded>,
    /// The same object, type-erased once for the in-flight list.
    keep_alive: Arc<dyn Any + Send + Sync>,
    /// Buffers touched by the current recording (capacity reserved).
    uses: Vec<BufferUse>,
    last: Completion,
}

struct Recorded {
    commands: CommandBuffer,
    /// Sources of the latest recording, replaced only after it finished.
    sources: Mutex<Vec<Option<BufferView>>>,
}

impl std::fmt::Debug for CopyBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyBatch")
            .field("destinations", &self.destinations.len())
            .finish_non_exhaustive()
    }
}

impl CopyBatch {
    pub(crate) fn new(runtime: Runtime, destinations: Vec<BufferView>) -> Result<CopyBatch> {
        for (index, destination) in destinations.iter().enumerate() {
            if !runtime.owns(destination) {
                return Err(Error::Message(format!(
                    "copy batch destination {index} belongs to another runtime domain"
                )));
            }
            if destinations[..index]
                .iter()
                .any(|earlier| earlier.overlaps(destination))
            {
                return Err(Error::Message(format!(
                    "copy batch destination {index} overlaps an earlier destination"
                )));
            }
        }
        Ok(CopyBatch {
            runtime,
            destinations,
            health: Arc::new(Health::default()),
            state: Mutex::new(None),
        })
    }

    /// The fixed destinations, in order.
    pub fn destinations(&self) -> &[BufferView] {
        &self.destinations
    }

    /// Copy `sources[i]` into destination `i` for every `i`, after
    /// `dependencies` and the batch's previous submission, ordered on the
    /// device. An empty destination takes an empty source and copies
    /// nothing.
    ///
    /// Errors, before anything is queued: a source count or length that
    /// does not match its destination, a source of another domain, a source
    /// overlapping any destination. A dependency's failure is carried by
    /// the returned completion, as for graphs.
    pub fn submit_after(
        &self,
        sources: &[BufferView],
        dependencies: &[Completion],
    ) -> Result<Completion> {
        self.check_sources(sources)?;
        for dependency in dependencies {
            dependency.validate_runtime(&self.runtime)?;
        }
        self.health.check()?;
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = match &mut *guard {
            Some(state) => state,
            empty => empty.insert(self.build_state()?),
        };
        // Re-recording a command buffer the device may still execute is
        // undefined; only a misused batch ever waits here.
        if !state.last.is_complete() {
            let _ = state.last.wait();
        }
        self.record(state, sources)?;
        let completion = state.gpu.submit(Submission {
            command_buffer: state.recorded.commands.raw(),
            after: dependencies,
            previous: Some(&state.last),
            uses: &state.uses,
            keep_alive: &state.keep_alive,
            health: &self.health,
            injectable: true,
        })?;
        state.last = completion.clone();
        Ok(completion)
    }

    /// `Ok` unless a native failure of a submission has disabled the batch.
    pub fn usable(&self) -> Result<()> {
        self.health.check()
    }

    fn check_sources(&self, sources: &[BufferView]) -> Result<()> {
        if sources.len() != self.destinations.len() {
            return Err(Error::Message(format!(
                "copy batch expects {} sources, got {}",
                self.destinations.len(),
                sources.len()
            )));
        }
        for (index, (source, destination)) in sources.iter().zip(&self.destinations).enumerate() {
            if source.len() != destination.len() {
                return Err(Error::Message(format!(
                    "copy batch source {index} has {} bytes, its destination {}",
                    source.len(),
                    destination.len()
                )));
            }
            if source.is_empty() {
                continue;
            }
            if !self.runtime.owns(source) {
                return Err(Error::Message(format!(
                    "copy batch source {index} belongs to another runtime domain"
                )));
            }
            if self.destinations.iter().any(|d| d.overlaps(source)) {
                return Err(Error::Message(format!(
                    "copy batch source {index} overlaps a destination"
                )));
            }
        }
        Ok(())
    }

    fn build_state(&self) -> Result<State> {
        let gpu = self.runtime.gpu_arc()?.clone();
        let count = self.destinations.len();
        let recorded = Arc::new(Recorded {
            commands: gpu.command_buffer()?,
            sources: Mutex::new(vec![None; count]),
        });
        Ok(State {
            gpu,
            keep_alive: recorded.clone(),
            recorded,
            uses: Vec::with_capacity(2 * count),
            last: Completion::ready(),
        })
    }

    /// Re-record the command buffer to copy from `sources`.
    fn record(&self, state: &mut State, sources: &[BufferView]) -> Result<()> {
        let recorded = &state.recorded;
        let device = state.gpu.raw();
        let cb = recorded.commands.raw();
        recorded.commands.reset()?;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the previous submission finished (checked by the caller
        // under the state lock), so the command buffer is not pending; the
        // lock makes this thread its only recorder.
        unsafe { device.begin_command_buffer(cb, &begin) }
            .map_err(vk_error("vkBeginCommandBuffer"))?;
        let mut kept = recorded.sources.lock().unwrap_or_else(|e| e.into_inner());
        state.uses.clear();
        for ((source, destination), slot) in
            sources.iter().zip(&self.destinations).zip(kept.iter_mut())
        {
            if source.is_empty() {
                *slot = None;
                continue;
            }
            let region = [vk::BufferCopy {
                src_offset: source.offset() as u64,
                dst_offset: destination.offset() as u64,
                size: source.len() as u64,
            }];
            // SAFETY: both views are live, of this device, in range and
            // disjoint (checked); the command buffer is recording.
            unsafe {
                device.cmd_copy_buffer(cb, source.raw_buffer(), destination.raw_buffer(), &region)
            };
            note_use(&mut state.uses, source, false);
            note_use(&mut state.uses, destination, true);
            *slot = Some(source.clone());
        }
        // SAFETY: recording state, begun above.
        unsafe { device.end_command_buffer(cb) }.map_err(vk_error("vkEndCommandBuffer"))
    }
}

/// Add `view`'s allocation to `uses` (pushes stay within the reserved
/// capacity: at most one entry per source and destination).
fn note_use(uses: &mut Vec<BufferUse>, view: &BufferView, writes: bool) {
    let allocation = view.allocation();
    match uses
        .iter_mut()
        .find(|used| used.allocation.id() == allocation.id())
    {
        Some(used) => used.writes |= writes,
        None => uses.push(BufferUse {
            allocation: allocation.clone(),
            writes,
        }),
    }
}
