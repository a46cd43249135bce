//! Prepared models: a bounded pool of slots built once, and acquisition.

use crate::{
    ModelContext, ModelSlot,
    inference::Inference,
    pool::{Pool, Slot},
};
use hrx_core::{Error, Result};
use hrx_runtime::ExecutableGraph;
use hrx_tensor::DeviceTensor;
use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

/// One slot as the model author builds it: the graph and the tensors it
/// reads and writes at fixed addresses.
///
/// Bindings may be slices of shared scratch or alias each other for
/// in-place execution; the pool adds no input or output buffers of its own.
/// Everything writable must be private to the slot; immutable weights may
/// be shared by every slot.
#[derive(Debug)]
pub struct InferenceGraph {
    /// Fixed-address inputs, populated before each execution.
    pub inputs: Vec<DeviceTensor>,
    /// Fixed-address outputs, leased to the caller after submission.
    pub outputs: Vec<DeviceTensor>,
    /// The graph that reads `inputs` and writes `outputs`.
    pub graph: ExecutableGraph,
}

/// A prepared model: shared immutable resources and, for each of a bounded
/// number of slots, private fixed-address inputs, outputs, scratch and a
/// prepared graph. Cheap to clone; clones share the slots.
///
/// Requests reserve a slot ([`try_acquire`](Self::try_acquire),
/// [`acquire_blocking`](Self::acquire_blocking), [`acquire`](Self::acquire))
/// and submit through it. The pool never grows: when every slot is
/// reserved or still running, `try_acquire` answers
/// [`Error::Busy`](hrx_core::Error::Busy).
#[derive(Clone)]
pub struct PreparedModel {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for PreparedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedModel")
            .field("capacity", &self.capacity())
            .field("idle", &self.is_idle())
            .finish()
    }
}

/// Check a freshly built slot against the context and the slots before it.
fn check_slot(context: &ModelContext, previous: &[Slot], built: &InferenceGraph) -> Result<()> {
    built.graph.validate_runtime(context.runtime())?;
    for tensor in built.inputs.iter().chain(&built.outputs) {
        context.validate(tensor)?;
        tensor.completion().wait()?;
        if let Some(view) = tensor.binding()
            && previous
                .iter()
                .flat_map(Slot::io)
                .filter_map(DeviceTensor::binding)
                .any(|old| view.overlaps(&old))
        {
            return Err(Error::Message("inference slots share writable IO".into()));
        }
    }
    if let Some(first) = previous.first() {
        let same = |a: &[DeviceTensor], b: &[DeviceTensor]| {
            a.iter()
                .map(DeviceTensor::desc)
                .eq(b.iter().map(DeviceTensor::desc))
        };
        if !same(&built.inputs, &first.inputs) || !same(&built.outputs, &first.outputs) {
            return Err(Error::Message("inference slot descriptors differ".into()));
        }
    }
    Ok(())
}

impl PreparedModel {
    /// Build each of `capacity` slots once with `build`, including its
    /// actual input and output bindings.
    ///
    /// The builder may share immutable weights between slots but must
    /// allocate independent writable IO for each: overlapping IO, differing
    /// descriptors, a foreign tensor or graph, a failed initialisation and a
    /// zero capacity are errors. Host staging is created on first use.
    pub fn prepare(
        context: &ModelContext,
        capacity: usize,
        mut build: impl FnMut(&ModelContext) -> Result<InferenceGraph>,
    ) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::Message("inference capacity must be nonzero".into()));
        }
        let mut slots: Vec<Slot> = Vec::new();
        for _ in 0..capacity {
            let built = build(context)?;
            check_slot(context, &slots, &built)?;
            slots.push(Slot::new(built.inputs, built.outputs, built.graph));
        }
        Ok(PreparedModel {
            pool: Pool::new(context.clone(), slots),
        })
    }

    /// The number of resident inference slots.
    pub fn capacity(&self) -> usize {
        self.pool.slots.len()
    }

    /// Whether every slot is unreserved and drained: safe to evict.
    pub fn is_idle(&self) -> bool {
        self.pool.is_idle()
    }

    /// Reserve a free slot without waiting. Retained outputs keep their
    /// slot, so they apply backpressure: `Busy` when no slot is free. Once
    /// every slot has been disabled by a native failure, that failure.
    pub fn try_acquire(&self) -> Result<ModelSlot> {
        self.pool.try_acquire().map(ModelSlot::new)
    }

    /// Wait on the host for a free slot, without growing any queue or
    /// duplicating weights.
    pub fn acquire_blocking(&self) -> Result<ModelSlot> {
        self.pool.acquire_blocking().map(ModelSlot::new)
    }

    /// [`acquire_blocking`](Self::acquire_blocking), giving up after
    /// `timeout` with [`Error::Busy`](hrx_core::Error::Busy) (and leaving
    /// the queue): a hung device or a leaked slot surfaces as an error.
    pub fn acquire_blocking_timeout(&self, timeout: std::time::Duration) -> Result<ModelSlot> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        self.pool.acquire_until(deadline).map(ModelSlot::new)
    }

    /// Wait asynchronously for a free slot; polling never waits on the
    /// device.
    pub fn acquire(&self) -> AcquireSlot<'_> {
        AcquireSlot {
            model: self,
            ticket: None,
        }
    }

    /// Reserve a slot and submit device inputs at once, or answer `Busy`.
    pub fn submit(&self, inputs: &[DeviceTensor]) -> Result<Inference> {
        self.try_acquire()?.submit(inputs)
    }

    /// Reserve a slot and submit host bytes through its reusable staging,
    /// with no allocation or graph preparation once warm; or answer `Busy`.
    pub fn submit_host(&self, inputs: &[&[u8]]) -> Result<Inference> {
        self.try_acquire()?.submit_host(inputs)
    }
}

/// Future of [`PreparedModel::acquire`]: an exclusively reserved slot.
/// Waiting requests are served in the order they started waiting;
/// dropping the future gives up its place.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct AcquireSlot<'a> {
    model: &'a PreparedModel,
    /// Place in the pool's queue, once a poll found no slot.
    ticket: Option<u64>,
}

impl Future for AcquireSlot<'_> {
    type Output = Result<ModelSlot>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.model
            .pool
            .poll_acquire(&mut this.ticket, cx)
            .map(|reserved| reserved.map(ModelSlot::new))
    }
}

impl Drop for AcquireSlot<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.model.pool.abandon(ticket);
        }
    }
}
