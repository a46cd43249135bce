//! Prepared graphs: one recorded command buffer, replayed without
//! allocating, ordered on the device.

use super::{
    Graph,
    hazard::{self, Barrier},
    op::{Op, OpPlan},
    record,
};
use crate::{
    Completion, GpuKernel, Runtime, builtin,
    device::{CommandBuffer, Gpu},
    memory::Allocation,
    submit::{BufferUse, Health, Submission},
    vk_error,
};
use ash::vk;
use hrx_core::{Error, Result};
use std::{
    any::Any,
    sync::{Arc, Mutex},
};

/// A graph recorded into a command buffer once, ready to be submitted any
/// number of times. `Send + Sync`: share it between threads.
///
/// Submissions of one graph run in submission order, each after the
/// previous one finished on the device. Submitting never waits on the host
/// and allocates nothing.
pub struct ExecutableGraph {
    runtime: Runtime,
    /// The recorded operations, shared with the in-flight keep-alive.
    ops: Arc<[Op]>,
    barriers: Vec<Barrier>,
    health: Arc<Health>,
    state: Mutex<State>,
}

struct State {
    /// Recorded work; `None` for an empty graph until it first needs the
    /// device (to order after pending dependencies).
    ready: Option<Arc<Ready>>,
    /// The graph's latest submission.
    last: Completion,
}

/// Everything a submission needs, built once.
struct Ready {
    gpu: Arc<Gpu>,
    command_buffer: vk::CommandBuffer,
    uses: Vec<BufferUse>,
    keep_alive: Arc<dyn Any + Send + Sync>,
}

/// Kept alive by every in-flight submission: the command buffer and all it
/// references (views, kernels).
struct Prepared {
    _commands: CommandBuffer,
    _ops: Arc<[Op]>,
    _copy_kernel: Option<GpuKernel>,
}

impl std::fmt::Debug for ExecutableGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutableGraph")
            .field("barriers", &self.barriers.len())
            .finish_non_exhaustive()
    }
}

/// One entry per allocation the operations touch; `writes` if any does.
fn buffer_uses(ops: &[Op]) -> Vec<BufferUse> {
    let mut uses: Vec<BufferUse> = Vec::new();
    for op in ops {
        for (i, view) in op.views().enumerate() {
            let allocation: &Arc<Allocation> = view.allocation();
            let writes = op.writes(i);
            match uses
                .iter_mut()
                .find(|u| u.allocation.id() == allocation.id())
            {
                Some(used) => used.writes |= writes,
                None => uses.push(BufferUse {
                    allocation: allocation.clone(),
                    writes,
                }),
            }
        }
    }
    uses
}

/// An empty command buffer, for an empty graph that must still order its
/// completion after pending dependencies.
fn empty_ready(gpu: &Arc<Gpu>) -> Result<Arc<Ready>> {
    let commands = gpu.command_buffer()?;
    let begin =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
    // SAFETY: a fresh command buffer recorded by this thread only.
    unsafe {
        gpu.raw()
            .begin_command_buffer(commands.raw(), &begin)
            .map_err(vk_error("vkBeginCommandBuffer"))?;
        gpu.raw()
            .end_command_buffer(commands.raw())
            .map_err(vk_error("vkEndCommandBuffer"))?;
    }
    Ok(Arc::new(Ready {
        gpu: gpu.clone(),
        command_buffer: commands.raw(),
        uses: Vec::new(),
        keep_alive: Arc::new(commands),
    }))
}

impl ExecutableGraph {
    pub(super) fn prepare(runtime: Runtime, ops: Vec<Op>) -> Result<ExecutableGraph> {
        let ops: Arc<[Op]> = ops.into();
        let mut graph = ExecutableGraph {
            runtime,
            ops: ops.clone(),
            barriers: Vec::new(),
            health: Arc::new(Health::default()),
            state: Mutex::new(State {
                ready: None,
                last: Completion::ready(),
            }),
        };
        if ops.is_empty() {
            return Ok(graph);
        }
        let gpu = graph.runtime.gpu_arc()?.clone();
        let plans: Vec<OpPlan> = ops.iter().map(|op| op.plan(&gpu)).collect();
        graph.barriers = hazard::plan(&plans);
        let copy_kernel = if plans.iter().any(|p| p.compute_copy_bytes > 0) {
            Some(builtin::copy_kernel(&gpu)?)
        } else {
            None
        };
        let commands = record::record(&gpu, &ops, &plans, &graph.barriers, copy_kernel.as_ref())?;
        let ready = Ready {
            gpu,
            command_buffer: commands.raw(),
            uses: buffer_uses(&ops),
            keep_alive: Arc::new(Prepared {
                _commands: commands,
                _ops: ops,
                _copy_kernel: copy_kernel,
            }),
        };
        graph
            .state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .ready = Some(Arc::new(ready));
        Ok(graph)
    }

    /// A new executable graph running `prologue`'s operations and then
    /// this graph's, recorded as one command buffer: one submission where
    /// there would be two, with hazards derived across both so that a
    /// barrier sits only where the prologue meets this graph's accesses.
    /// Serving folds a request's input upload into the model's graph this
    /// way. This graph is unchanged; the two do not order against each
    /// other.
    ///
    /// ```no_run
    /// # fn main() -> hrx_core::Result<()> {
    /// # use hrx_runtime::{MemoryPlacement, Runtime};
    /// let runtime = Runtime::new()?;
    /// let (staging, input) = (
    ///     runtime.allocate(64, MemoryPlacement::HostVisible)?,
    ///     runtime.allocate(64, MemoryPlacement::GpuLocal)?,
    /// );
    /// let mut model = runtime.graph();
    /// model.fill(input.view(), 1)?; // stands in for the model's dispatches
    /// let model = model.prepare()?;
    /// let mut upload = runtime.graph();
    /// upload.copy(input.view(), staging.view())?;
    /// let upload_then_model = model.with_prologue(upload)?;
    /// upload_then_model.submit()?.wait()?;
    /// # Ok(()) }
    /// ```
    pub fn with_prologue(&self, prologue: Graph) -> Result<ExecutableGraph> {
        prologue.validate_runtime(&self.runtime)?;
        let mut ops = prologue.ops;
        ops.extend(self.ops.iter().cloned());
        ExecutableGraph::prepare(self.runtime.clone(), ops)
    }

    /// Queue the graph after its own previous submission.
    pub fn submit(&self) -> Result<Completion> {
        self.submit_after(&[])
    }

    /// Queue the graph after `dependencies` (and its own previous
    /// submission), ordered on the device, never waiting on the host. If a
    /// dependency failed or was cancelled, the returned completion carries
    /// that error and the graph does not run. Completions of another domain
    /// are rejected before anything is queued.
    pub fn submit_after(&self, dependencies: &[Completion]) -> Result<Completion> {
        for dependency in dependencies {
            dependency.validate_runtime(&self.runtime)?;
        }
        self.health.check()?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ready = match &state.ready {
            Some(ready) => ready.clone(),
            None => {
                if dependencies.iter().all(|d| d.pending_value().is_none()) {
                    // Nothing to run and nothing to wait for.
                    return Ok(match dependencies.iter().find_map(|d| d.result()?.err()) {
                        Some(error) => Completion::failed(error),
                        None => Completion::ready(),
                    });
                }
                let ready = empty_ready(self.runtime.gpu_arc()?)?;
                state.ready = Some(ready.clone());
                ready
            }
        };
        let completion = ready.gpu.submit(Submission {
            command_buffer: ready.command_buffer,
            after: dependencies,
            previous: Some(&state.last),
            uses: &ready.uses,
            keep_alive: &ready.keep_alive,
            health: &self.health,
            injectable: true,
        })?;
        state.last = completion.clone();
        Ok(completion)
    }

    /// `Ok` unless a native failure of one of this graph's submissions has
    /// disabled it; then the failure.
    pub fn usable(&self) -> Result<()> {
        self.health.check()
    }

    /// Fail unless this graph was prepared in `runtime`'s domain.
    pub fn validate_runtime(&self, runtime: &Runtime) -> Result<()> {
        if self.runtime.same_domain(runtime) {
            Ok(())
        } else {
            Err(Error::Message(
                "executable graph belongs to another runtime domain".into(),
            ))
        }
    }

    /// The barriers `prepare` inserted, in recording order, each with the
    /// dependencies it serves. Independent operations have none between them.
    pub fn barriers(&self) -> &[Barrier] {
        &self.barriers
    }
}
