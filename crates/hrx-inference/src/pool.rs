//! The slot pool: per-slot resources, reservation state, and leases.
//!
//! A slot is *free* when nothing holds a lease on it and every device
//! submission that touches its storage has drained. Leases are counted, not
//! allocated: the lease that travels from a `ModelSlot` to its `Inference`
//! and `InferenceReadback` is moved, and output tensors share one extra
//! lease created only when the caller asks for them.

use crate::{
    ModelContext,
    transfer::{Direction, Transfer},
};
use hrx_core::{Error, Result, cached_init};
use hrx_runtime::{BufferView, Completion, CopyBatch, ExecutableGraph};
use hrx_tensor::DeviceTensor;
use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    task::{Context, Poll, Waker},
};

/// What the builder made for one slot, plus its lazily created staging.
pub(crate) struct Slot {
    pub(crate) inputs: Vec<DeviceTensor>,
    pub(crate) outputs: Vec<DeviceTensor>,
    pub(crate) graph: ExecutableGraph,
    upload: Mutex<Option<Arc<Transfer>>>,
    download: Mutex<Option<Arc<Transfer>>>,
    copy_in: Mutex<Option<Arc<CopyIn>>>,
}

/// Device-to-device input feeding for [`ModelSlot::submit`]: a copy batch
/// into the slot's non-empty inputs and reusable argument lists, so a warm
/// submission allocates nothing.
///
/// [`ModelSlot::submit`]: crate::ModelSlot::submit
pub(crate) struct CopyIn {
    /// Copies into the non-empty inputs, in input order.
    pub(crate) batch: CopyBatch,
    /// Per-request sources and producers; capacity reserved once. Only the
    /// slot's exclusive holder locks it.
    pub(crate) scratch: Mutex<(Vec<BufferView>, Vec<Completion>)>,
}

impl Slot {
    pub(crate) fn new(
        inputs: Vec<DeviceTensor>,
        outputs: Vec<DeviceTensor>,
        graph: ExecutableGraph,
    ) -> Self {
        Slot {
            inputs,
            outputs,
            graph,
            upload: Mutex::new(None),
            download: Mutex::new(None),
            copy_in: Mutex::new(None),
        }
    }

    /// Every IO tensor of the slot.
    pub(crate) fn io(&self) -> impl Iterator<Item = &DeviceTensor> {
        self.inputs.iter().chain(&self.outputs)
    }

    /// Host staging for the inputs, created on first use.
    pub(crate) fn upload(&self, context: &ModelContext) -> Result<Arc<Transfer>> {
        cached_init(&self.upload, || {
            Transfer::prepare(context, &self.inputs, Direction::Upload).map(Arc::new)
        })
    }

    /// Host staging for the outputs, created on first use.
    pub(crate) fn download(&self, context: &ModelContext) -> Result<Arc<Transfer>> {
        cached_init(&self.download, || {
            Transfer::prepare(context, &self.outputs, Direction::Download).map(Arc::new)
        })
    }

    /// The copy batch feeding device inputs, created on first use.
    pub(crate) fn copy_in(&self, context: &ModelContext) -> Result<Arc<CopyIn>> {
        cached_init(&self.copy_in, || {
            let destinations: Vec<BufferView> = self
                .inputs
                .iter()
                .filter_map(DeviceTensor::binding)
                .collect();
            let count = self.inputs.len();
            Ok(Arc::new(CopyIn {
                batch: context.runtime().copy_batch(destinations)?,
                scratch: Mutex::new((Vec::with_capacity(count), Vec::with_capacity(count))),
            }))
        })
    }

    /// `Ok` unless a native failure disabled the slot's graph or transfers.
    fn usable(&self) -> Result<()> {
        self.graph.usable()?;
        for transfer in [&self.upload, &self.download] {
            if let Some(transfer) = &*transfer.lock().unwrap_or_else(|e| e.into_inner()) {
                transfer.usable()?;
            }
        }
        if let Some(copy_in) = &*self.copy_in.lock().unwrap_or_else(|e| e.into_inner()) {
            copy_in.batch.usable()?;
        }
        Ok(())
    }
}

/// Reservation state of one slot.
#[derive(Default)]
struct SlotState {
    /// Live leases: the request handle and the shared output lease.
    holders: usize,
    /// The slot's latest submission (upload, graph or download).
    completion: Option<Completion>,
    /// Pending submissions of others that read or write the slot's storage
    /// through retained outputs.
    users: Vec<Completion>,
}

impl SlotState {
    fn drained(&self) -> bool {
        self.completion.as_ref().is_none_or(Completion::is_complete)
            && self.users.iter().all(Completion::is_complete)
    }

    fn is_free(&self) -> bool {
        self.holders == 0 && self.drained()
    }

    /// A submission that must finish before the slot is reused.
    fn pending(&self) -> Option<Completion> {
        self.completion
            .iter()
            .chain(&self.users)
            .find(|completion| !completion.is_complete())
            .cloned()
    }
}

struct PoolState {
    slots: Vec<SlotState>,
    wakers: Vec<Waker>,
}

/// Every slot of a prepared model and their reservation state.
pub(crate) struct Pool {
    pub(crate) context: ModelContext,
    pub(crate) slots: Vec<Slot>,
    state: Mutex<PoolState>,
    changed: Condvar,
}

impl Pool {
    pub(crate) fn new(context: ModelContext, slots: Vec<Slot>) -> Arc<Self> {
        let states = slots.iter().map(|_| SlotState::default()).collect();
        Arc::new(Pool {
            context,
            slots,
            state: Mutex::new(PoolState {
                slots: states,
                wakers: Vec::new(),
            }),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether every slot is unleased and drained.
    pub(crate) fn is_idle(&self) -> bool {
        self.lock().slots.iter().all(SlotState::is_free)
    }

    /// Reserve a free, usable slot or answer `Busy`; once every slot is
    /// free but unusable, the native failure instead.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Result<SlotLease> {
        let mut state = self.lock();
        self.acquire_locked(&mut state)
    }

    fn acquire_locked(self: &Arc<Self>, state: &mut PoolState) -> Result<SlotLease> {
        let mut failure = None;
        for (index, slot) in state.slots.iter_mut().enumerate() {
            if !slot.is_free() {
                continue;
            }
            // Cancellation and failed inputs leave storage untouched; a
            // native failure disables the slot, so try its healthy peers.
            if let Err(error) = self.slots[index].usable() {
                failure = Some(error);
                continue;
            }
            slot.completion = None;
            slot.users.clear();
            slot.holders = 1;
            return Ok(SlotLease {
                pool: self.clone(),
                index,
            });
        }
        match failure {
            Some(error) if state.slots.iter().all(SlotState::is_free) => Err(error),
            _ => Err(Error::Busy(
                "all inference slots are retained or running".into(),
            )),
        }
    }

    /// Reserve a slot, waiting on the host for capacity.
    pub(crate) fn acquire_blocking(self: &Arc<Self>) -> Result<SlotLease> {
        loop {
            let mut state = self.lock();
            match self.acquire_locked(&mut state) {
                Err(Error::Busy(_)) => {}
                other => return other,
            }
            let draining = state
                .slots
                .iter()
                .filter(|slot| slot.holders == 0)
                .find_map(SlotState::pending);
            if let Some(completion) = draining {
                drop(state);
                // Its outcome does not matter: the storage is checked again.
                let _ = completion.wait();
            } else if state.slots.iter().any(|slot| slot.holders == 0) {
                // An unheld slot was still draining when `acquire_locked`
                // looked and has finished since (the watcher resolves
                // completions concurrently): look again rather than sleep on
                // a notification that will never come.
                continue;
            } else {
                drop(self.changed.wait(state).unwrap_or_else(|e| e.into_inner()));
            }
        }
    }

    /// Poll for a slot; never waits on the device.
    pub(crate) fn poll_acquire(self: &Arc<Self>, cx: &mut Context<'_>) -> Poll<Result<SlotLease>> {
        let mut state = self.lock();
        match self.acquire_locked(&mut state) {
            Err(Error::Busy(_)) => {}
            other => return Poll::Ready(other),
        }
        // Draining slots wake us through their completions, released ones
        // through the waker list.
        let mut ready = false;
        for slot in state.slots.iter_mut().filter(|slot| slot.holders == 0) {
            for completion in slot.completion.iter_mut().chain(&mut slot.users) {
                ready |= Pin::new(completion).poll(cx).is_ready();
            }
        }
        if ready {
            cx.waker().wake_by_ref();
        }
        if !state.wakers.iter().any(|old| old.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Record the slot's latest own submission.
    fn record(&self, index: usize, completion: &Completion) {
        self.lock().slots[index].completion = Some(completion.clone());
    }

    /// Keep the slot reserved until `completion`, a submission of someone
    /// else that uses the slot's storage, has drained.
    fn add_user(&self, index: usize, completion: &Completion) {
        if completion.is_complete() {
            return;
        }
        let mut state = self.lock();
        let users = &mut state.slots[index].users;
        users.retain(|user| !user.is_complete());
        users.push(completion.clone());
    }

    fn release(&self, index: usize) {
        let wakers = {
            let mut state = self.lock();
            let slot = &mut state.slots[index];
            slot.holders = slot.holders.saturating_sub(1);
            if slot.holders > 0 {
                return;
            }
            std::mem::take(&mut state.wakers)
        };
        self.changed.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }
}

/// One hold on a reserved slot. The slot returns to the pool when the last
/// hold is dropped and its work has drained.
pub(crate) struct SlotLease {
    pool: Arc<Pool>,
    index: usize,
}

impl SlotLease {
    pub(crate) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn slot(&self) -> &Slot {
        &self.pool.slots[self.index]
    }

    /// Another hold on the same slot.
    pub(crate) fn share(&self) -> SlotLease {
        self.pool.lock().slots[self.index].holders += 1;
        SlotLease {
            pool: self.pool.clone(),
            index: self.index,
        }
    }

    /// Record a submission of this slot (upload, graph, download).
    pub(crate) fn record(&self, completion: &Completion) {
        self.pool.record(self.index, completion);
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        self.pool.release(self.index);
    }
}

/// If `tensor` is a retained slot output, keep its slot from being reused
/// until `completion` (work that uses the tensor's storage) has drained.
pub(crate) fn keep_slot_until(tensor: &DeviceTensor, completion: &Completion) {
    if let Some(lease) = tensor
        .lease()
        .and_then(|lease| lease.as_ref().downcast_ref::<SlotLease>())
    {
        lease.pool.add_user(lease.index, completion);
    }
}
