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
    collections::VecDeque,
    future::Future,
    pin::Pin,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    task::{Context, Poll, Waker},
    time::Instant,
};

/// What the builder made for one slot, plus its lazily created staging.
pub(crate) struct Slot {
    pub(crate) inputs: Vec<DeviceTensor>,
    pub(crate) outputs: Vec<DeviceTensor>,
    pub(crate) graph: ExecutableGraph,
    upload: Mutex<Option<Arc<Transfer>>>,
    download: Mutex<Option<Arc<Transfer>>>,
    copy_in: Mutex<Option<Arc<CopyIn>>>,
    /// The input upload and the slot's graph recorded as one command
    /// buffer (`None` inside when nothing needs copying), created with the
    /// upload staging: one submission per `submit_host` instead of two.
    upload_then_run: Mutex<Option<Arc<Option<ExecutableGraph>>>>,
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
            upload_then_run: Mutex::new(None),
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

    /// The upload and the slot's graph as one prepared graph, created on
    /// first use; `None` inside when the inputs need no copies.
    pub(crate) fn upload_then_run(
        &self,
        context: &ModelContext,
    ) -> Result<Arc<Option<ExecutableGraph>>> {
        cached_init(&self.upload_then_run, || {
            let upload = self.upload(context)?;
            Ok(Arc::new(match upload.copy_graph(context.runtime())? {
                Some(copies) => Some(self.graph.with_prologue(copies)?),
                None => None,
            }))
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
        let combined = self
            .upload_then_run
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(Some(graph)) = combined.as_deref() {
            graph.usable()?;
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

/// A request waiting for a slot, served first come, first served.
struct Waiter {
    ticket: u64,
    /// `None` for a blocking waiter (woken through the condition variable).
    waker: Option<Waker>,
}

struct PoolState {
    slots: Vec<SlotState>,
    /// Waiting requests in arrival order; only the front one may take a
    /// slot, so a slot freed under contention goes to the oldest waiter.
    waiters: VecDeque<Waiter>,
    next_ticket: u64,
}

impl PoolState {
    /// Queue a new waiter at the back; its ticket.
    fn enqueue(&mut self, waker: Option<Waker>) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.waiters.push_back(Waiter { ticket, waker });
        ticket
    }

    /// Whether `ticket` may try for a slot now: it is at the front, or
    /// (`None`) it has not queued and nobody is waiting.
    fn may_take(&self, ticket: Option<u64>) -> bool {
        match (ticket, self.waiters.front()) {
            (_, None) => true,
            (Some(ticket), Some(front)) => front.ticket == ticket,
            (None, Some(_)) => false,
        }
    }

    /// Remove `ticket` from the queue; the new front waiter's waker when
    /// the front changed.
    fn dequeue(&mut self, ticket: u64) -> Option<Waker> {
        let position = self.waiters.iter().position(|w| w.ticket == ticket)?;
        self.waiters.remove(position);
        if position == 0 {
            self.front_waker()
        } else {
            None
        }
    }

    fn front_waker(&self) -> Option<Waker> {
        self.waiters.front().and_then(|w| w.waker.clone())
    }
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
                waiters: VecDeque::new(),
                next_ticket: 0,
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
    /// free but unusable, the native failure instead. A request that does
    /// not wait never takes a slot ahead of waiting ones: while any request
    /// waits, the answer is `Busy`.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Result<SlotLease> {
        let mut state = self.lock();
        if !state.may_take(None) {
            return Err(Error::Busy(
                "inference slots are promised to waiting requests".into(),
            ));
        }
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

    /// Reserve a slot, waiting on the host for capacity, after every
    /// request that started waiting earlier.
    pub(crate) fn acquire_blocking(self: &Arc<Self>) -> Result<SlotLease> {
        self.acquire_until(None)
    }

    /// [`acquire_blocking`](Self::acquire_blocking) that gives up at
    /// `deadline` with [`Error::Busy`], leaving the queue.
    pub(crate) fn acquire_until(self: &Arc<Self>, deadline: Option<Instant>) -> Result<SlotLease> {
        let mut ticket = None;
        loop {
            let mut state = self.lock();
            let left = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => {
                        let busy = Err(Error::Busy("no slot became free in time".into()));
                        return self.leave_queue(state, ticket, busy);
                    }
                },
                None => None,
            };
            if state.may_take(ticket) {
                match self.acquire_locked(&mut state) {
                    Err(Error::Busy(_)) => {}
                    other => return self.leave_queue(state, ticket, other),
                }
            }
            let ticket = *ticket.get_or_insert_with(|| state.enqueue(None));
            let draining = state
                .may_take(Some(ticket))
                .then(|| {
                    state
                        .slots
                        .iter()
                        .filter(|slot| slot.holders == 0)
                        .find_map(SlotState::pending)
                })
                .flatten();
            if let Some(completion) = draining {
                drop(state);
                // Its outcome does not matter: the storage is checked again.
                let _ = match left {
                    Some(left) => completion.wait_timeout(left).map(|_| ()),
                    None => completion.wait(),
                };
            } else if state.may_take(Some(ticket))
                && state.slots.iter().any(|slot| slot.holders == 0)
            {
                // An unheld slot was still draining when `acquire_locked`
                // looked and has finished since (the watcher resolves
                // completions concurrently): look again rather than sleep on
                // a notification that will never come.
                continue;
            } else if let Some(left) = left {
                let waited = self.changed.wait_timeout(state, left);
                drop(waited.unwrap_or_else(|e| e.into_inner()));
            } else {
                drop(self.changed.wait(state).unwrap_or_else(|e| e.into_inner()));
            }
        }
    }

    /// Poll for a slot in arrival order; never waits on the device.
    /// `ticket` is the caller's place in the queue, taken on its first
    /// unsuccessful poll; [`Pool::abandon`] gives it up.
    pub(crate) fn poll_acquire(
        self: &Arc<Self>,
        ticket: &mut Option<u64>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<SlotLease>> {
        let mut state = self.lock();
        if state.may_take(*ticket) {
            match self.acquire_locked(&mut state) {
                Err(Error::Busy(_)) => {}
                other => return Poll::Ready(self.leave_queue(state, ticket.take(), other)),
            }
        }
        let mine = match *ticket {
            Some(mine) => mine,
            None => *ticket.insert(state.enqueue(None)),
        };
        if let Some(waiter) = state.waiters.iter_mut().find(|w| w.ticket == mine) {
            match &waiter.waker {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => waiter.waker = Some(cx.waker().clone()),
            }
        }
        if !state.may_take(Some(mine)) {
            // Woken when this request reaches the front.
            return Poll::Pending;
        }
        // The front request watches draining slots through their
        // completions; released slots wake it through `release`.
        let mut ready = false;
        for slot in state.slots.iter_mut().filter(|slot| slot.holders == 0) {
            for completion in slot.completion.iter_mut().chain(&mut slot.users) {
                ready |= Pin::new(completion).poll(cx).is_ready();
            }
        }
        if ready {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// Give up a queued request's place (its future was dropped).
    pub(crate) fn abandon(&self, ticket: u64) {
        let next = self.lock().dequeue(ticket);
        self.changed.notify_all();
        if let Some(waker) = next {
            waker.wake();
        }
    }

    /// Leave the queue after an attempt that ended waiting (a slot, or an
    /// error every waiter will see); the next waiter may try at once, as
    /// more than one slot may be free.
    fn leave_queue(
        &self,
        mut state: MutexGuard<'_, PoolState>,
        ticket: Option<u64>,
        result: Result<SlotLease>,
    ) -> Result<SlotLease> {
        let next = match ticket {
            Some(ticket) => state.dequeue(ticket),
            None => None,
        };
        drop(state);
        if ticket.is_some() {
            self.changed.notify_all();
        }
        if let Some(waker) = next {
            waker.wake();
        }
        result
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
        let front = {
            let mut state = self.lock();
            let slot = &mut state.slots[index];
            slot.holders = slot.holders.saturating_sub(1);
            if slot.holders > 0 {
                return;
            }
            state.front_waker()
        };
        self.changed.notify_all();
        if let Some(waker) = front {
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
