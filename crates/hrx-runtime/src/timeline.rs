//! The domain's timeline semaphore: what is in flight, what has finished,
//! and the watcher thread that wakes futures.
//!
//! Every submission of a domain goes to one queue and signals the next value
//! of one timeline semaphore. A semaphore signal covers all work earlier in
//! submission order, so "value N reached" means every submission up to N has
//! finished. Completions are therefore resolved strictly in value order, by
//! whichever thread first observes the counter (a waiter, a poller, or the
//! watcher), and their dependencies are always resolved before them.

use crate::{completion::State, submit::Health, vk_error};
use ash::vk;
use hrx_core::{Error, Result};
use smallvec::SmallVec;
use std::{
    any::Any,
    collections::VecDeque,
    sync::{
        Arc, Condvar, Mutex, OnceLock, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::Waker,
    thread::{JoinHandle, ThreadId},
    time::{Duration, Instant},
};

/// How long `wait` spins on the counter before blocking in the driver.
pub(crate) const SPIN: Duration = Duration::from_micros(20);
/// Longest single blocking wait, so that loss and shutdown are noticed.
const SLICE: Duration = Duration::from_millis(50);
/// How many finished completion states are kept for reuse. The pool is
/// filled when the timeline is created, so that replay is allocation-free
/// from the first submission while at most this many are unfinished (a
/// pool grown only by earlier work would be as deep as the device's lag
/// happened to be, which on a fast GPU is a handful).
const RECYCLE_LIMIT: usize = 256;
/// In-flight submissions the queue holds before it must grow (allocate).
const IN_FLIGHT_CAPACITY: usize = 1024;

pub(crate) struct Timeline {
    pub(crate) domain: u64,
    device: ash::Device,
    semaphore: vk::Semaphore,
    /// False once the device is destroyed; Vulkan calls happen under `read`.
    alive: RwLock<bool>,
    completed: AtomicU64,
    /// Last value handed to the queue; written only under the queue lock.
    pub(crate) submitted: AtomicU64,
    lost: OnceLock<String>,
    schedule: Mutex<Schedule>,
    watcher_wake: Condvar,
    /// Whether a host thread is inside `vkWaitSemaphores` on the timeline.
    /// Only one is at a time; the others wait on `retired`, which it
    /// notifies after every completion it observes (see `wait_step`).
    in_driver_wait: Mutex<bool>,
    retired: Condvar,
    shutdown: AtomicBool,
    watcher: Mutex<Option<JoinHandle<()>>>,
    watcher_id: OnceLock<ThreadId>,
}

struct Schedule {
    in_flight: VecDeque<InFlight>,
    recycle: VecDeque<Arc<State>>,
    wakers: Vec<(u64, Waker)>,
}

pub(crate) struct InFlight {
    pub(crate) value: u64,
    pub(crate) state: Arc<State>,
    /// Everything the submission touches, released once the device is done.
    pub(crate) _keep_alive: Arc<dyn Any + Send + Sync>,
    pub(crate) health: Arc<Health>,
    /// Fault injection: report this execution as failed natively.
    pub(crate) inject_failure: bool,
}

impl Timeline {
    pub(crate) fn new(domain: u64, device: ash::Device) -> Result<Arc<Self>> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: valid device; timeline semaphores are enabled at creation.
        let semaphore = unsafe { device.create_semaphore(&info, None) }
            .map_err(vk_error("vkCreateSemaphore"))?;
        let timeline = Arc::new(Timeline {
            domain,
            device,
            semaphore,
            alive: RwLock::new(true),
            completed: AtomicU64::new(0),
            submitted: AtomicU64::new(0),
            lost: OnceLock::new(),
            schedule: Mutex::new(Schedule {
                in_flight: VecDeque::with_capacity(IN_FLIGHT_CAPACITY),
                recycle: VecDeque::with_capacity(RECYCLE_LIMIT),
                wakers: Vec::with_capacity(64),
            }),
            watcher_wake: Condvar::new(),
            in_driver_wait: Mutex::new(false),
            retired: Condvar::new(),
            shutdown: AtomicBool::new(false),
            watcher: Mutex::new(None),
            watcher_id: OnceLock::new(),
        });
        {
            let mut schedule = timeline.lock();
            for _ in 0..RECYCLE_LIMIT {
                let state = State::pending(domain, Arc::downgrade(&timeline));
                schedule.recycle.push_back(Arc::new(state));
            }
        }
        let watched = timeline.clone();
        let handle = std::thread::Builder::new()
            .name(format!("hrx-watcher-{domain}"))
            .spawn(move || watched.watch())
            .map_err(|e| Error::Message(format!("cannot start the completion watcher: {e}")))?;
        let _ = timeline.watcher_id.set(handle.thread().id());
        *timeline.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(timeline)
    }

    pub(crate) fn semaphore(&self) -> vk::Semaphore {
        self.semaphore
    }

    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    pub(crate) fn lost(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    /// A completion state for a new submission, reusing a finished one that
    /// nobody observes any more, so that replays allocate nothing.
    ///
    /// States still observed (a caller keeping a finished completion, such
    /// as a weight tensor's upload producer) rotate to the back of the
    /// queue; checking a bounded number of candidates keeps this O(1) while
    /// leaving room for a few dozen long-held completions before a
    /// submission has to allocate.
    pub(crate) fn new_state(self: &Arc<Self>) -> Arc<State> {
        const CANDIDATES: usize = 32;
        let mut schedule = self.lock();
        for _ in 0..schedule.recycle.len().min(CANDIDATES) {
            let Some(candidate) = schedule.recycle.pop_front() else {
                break;
            };
            if Arc::strong_count(&candidate) == 1 {
                candidate.reset();
                return candidate;
            }
            schedule.recycle.push_back(candidate);
        }
        drop(schedule);
        Arc::new(State::pending(self.domain, Arc::downgrade(self)))
    }

    pub(crate) fn push(&self, entry: InFlight) {
        self.lock().in_flight.push_back(entry);
        self.watcher_wake.notify_one();
    }

    /// Register a waker for `value`; the watcher wakes it once reached.
    pub(crate) fn register(&self, value: u64, waker: &Waker) {
        let mut schedule = self.lock();
        match schedule
            .wakers
            .iter_mut()
            .find(|(v, w)| *v == value && w.will_wake(waker))
        {
            Some(_) => {}
            None => schedule.wakers.push((value, waker.clone())),
        }
        drop(schedule);
        self.watcher_wake.notify_one();
    }

    /// Read the counter and resolve everything it covers.
    pub(crate) fn poll(&self) {
        let alive = self.alive.read().unwrap_or_else(|e| e.into_inner());
        if !*alive {
            return;
        }
        // SAFETY: the semaphore is alive (checked under the lock above).
        let counter = unsafe { self.device.get_semaphore_counter_value(self.semaphore) };
        drop(alive);
        match counter {
            Ok(value) => self.retire_to(value),
            Err(vk::Result::ERROR_DEVICE_LOST) => {
                self.lose("vkGetSemaphoreCounterValue reported device loss")
            }
            Err(_) => {}
        }
    }

    /// Block until `value` is reached, the device is lost, or `deadline`.
    /// Returns whether the value was reached (or the device lost).
    pub(crate) fn wait_for(&self, value: u64, deadline: Option<Instant>) -> bool {
        self.wait_spinning(value, deadline, SPIN)
    }

    /// [`wait_for`](Self::wait_for), polling the counter for up to `spin`
    /// (and not past `deadline`) before blocking in the driver.
    pub(crate) fn wait_spinning(
        &self,
        value: u64,
        deadline: Option<Instant>,
        spin: Duration,
    ) -> bool {
        let spin_until = Instant::now() + spin;
        let spin_until = deadline.map_or(spin_until, |d| d.min(spin_until));
        loop {
            self.poll();
            if self.completed() >= value || self.lost.get().is_some() {
                return true;
            }
            if Instant::now() >= spin_until {
                break;
            }
            std::hint::spin_loop();
        }
        loop {
            let now = Instant::now();
            let slice = match deadline {
                Some(deadline) if deadline <= now => return false,
                Some(deadline) => (deadline - now).min(SLICE),
                None => SLICE,
            };
            self.wait_step(slice);
            if self.completed() >= value || self.lost.get().is_some() {
                return true;
            }
        }
    }

    /// Wait, at most `slice`, for the next completion on the timeline.
    ///
    /// One host thread at a time (the watcher or a waiting caller) blocks
    /// in `vkWaitSemaphores`, always for the next value, so that it wakes
    /// at every completion; it retires what finished and wakes the other
    /// waiters, which sleep on a condition variable meanwhile. Several
    /// threads blocking in the driver on one semaphore at once showed
    /// multi-millisecond stalls on an NVIDIA driver, and waiting for the
    /// next value (not one's own) keeps an early waiter from sleeping
    /// behind a later one.
    fn wait_step(&self, slice: Duration) {
        let mut in_driver = self
            .in_driver_wait
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *in_driver {
            let seen = self.completed();
            let woken = self
                .retired
                .wait_timeout_while(in_driver, slice, |busy| *busy && self.completed() == seen);
            drop(woken);
            return;
        }
        *in_driver = true;
        drop(in_driver);
        self.block(self.completed() + 1, slice);
        *self
            .in_driver_wait
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = false;
        self.retired.notify_all();
    }

    fn block(&self, value: u64, slice: Duration) {
        let alive = self.alive.read().unwrap_or_else(|e| e.into_inner());
        if !*alive {
            return;
        }
        let semaphores = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let nanos = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the semaphore is alive (checked under the lock above).
        let result = unsafe { self.device.wait_semaphores(&info, nanos) };
        drop(alive);
        match result {
            Ok(()) => self.retire_to(value.max(self.completed())),
            Err(vk::Result::ERROR_DEVICE_LOST) => {
                self.lose("vkWaitSemaphores reported device loss")
            }
            Err(_) => self.poll(),
        }
    }

    /// Resolve, in value order, every in-flight submission up to `counter`;
    /// release what they kept alive and wake their futures.
    pub(crate) fn retire_to(&self, counter: u64) {
        self.completed.fetch_max(counter, Ordering::AcqRel);
        loop {
            let mut finished: SmallVec<[InFlight; 8]> = SmallVec::new();
            let mut wake: SmallVec<[Waker; 8]> = SmallVec::new();
            {
                let mut schedule = self.lock();
                while finished.len() < finished.inline_size() {
                    match schedule.in_flight.front() {
                        Some(entry) if entry.value <= counter => {}
                        _ => break,
                    }
                    let Some(entry) = schedule.in_flight.pop_front() else {
                        break;
                    };
                    entry.state.resolve(entry.inject_failure, &entry.health);
                    if schedule.recycle.len() < RECYCLE_LIMIT {
                        schedule.recycle.push_back(entry.state.clone());
                    }
                    finished.push(entry);
                }
                let mut index = 0;
                while index < schedule.wakers.len() && wake.len() < wake.inline_size() {
                    if schedule.wakers[index].0 <= counter {
                        wake.push(schedule.wakers.swap_remove(index).1);
                    } else {
                        index += 1;
                    }
                }
            }
            let more = finished.len() == finished.inline_size() || wake.len() == wake.inline_size();
            // Dropped outside the lock: releasing the last reference to the
            // device may run its destructor, which takes this lock.
            drop(finished);
            wake.into_iter().for_each(Waker::wake);
            if !more {
                break;
            }
        }
    }

    /// Fail every pending completion with `DeviceLost`; later submissions are
    /// refused. Work already on the device keeps its resources until it drains.
    pub(crate) fn lose(&self, why: &str) {
        let _ = self.lost.set(why.to_string());
        let wakers = {
            let mut schedule = self.lock();
            for entry in &schedule.in_flight {
                entry
                    .state
                    .resolve_with(Err(Error::DeviceLost(why.to_string())));
            }
            std::mem::take(&mut schedule.wakers)
        };
        wakers.into_iter().for_each(|(_, waker)| waker.wake());
    }

    fn watch(&self) {
        loop {
            {
                let mut schedule = self.lock();
                loop {
                    if self.shutdown.load(Ordering::Acquire) {
                        return;
                    }
                    if schedule.in_flight.is_empty() && !schedule.wakers.is_empty() {
                        // Nothing left to wait for: let the futures re-poll.
                        let wakers = std::mem::take(&mut schedule.wakers);
                        drop(schedule);
                        wakers.into_iter().for_each(|(_, waker)| waker.wake());
                        schedule = self.lock();
                        continue;
                    }
                    if !schedule.in_flight.is_empty() {
                        break;
                    }
                    schedule = self
                        .watcher_wake
                        .wait_timeout(schedule, SLICE)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            self.wait_step(SLICE);
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if self.lost.get().is_some() {
                // A lost device answers waits at once; keep draining what
                // an injected loss left running, but without spinning.
                let schedule = self.lock();
                let _ = self.watcher_wake.wait_timeout(schedule, SLICE);
            }
        }
    }

    /// Stop the watcher (joining it unless called from it).
    pub(crate) fn shut_down(&self) {
        self.poll();
        self.shutdown.store(true, Ordering::Release);
        self.watcher_wake.notify_all();
        let handle = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle
            && Some(&std::thread::current().id()) != self.watcher_id.get()
        {
            let _ = handle.join();
        }
    }

    /// Stop the watcher, then retire on the calling thread everything in
    /// flight, releasing what it kept alive here. The device must be idle
    /// (or lost): whatever the counter does not cover then never ran, so
    /// it fails with [`Error::DeviceLost`] and is released as well. Every
    /// registered waker is woken, as nothing will resolve later.
    pub(crate) fn close(&self) {
        self.retire_all(false);
    }

    /// [`close`](Self::close) for a device that did not finish in time:
    /// everything in flight fails with [`Error::DeviceLost`], and what it
    /// kept alive (command buffers, memory) is leaked rather than freed,
    /// because the device may still be running it.
    pub(crate) fn abandon(&self) {
        self.retire_all(true);
    }

    fn retire_all(&self, leak: bool) {
        self.shut_down();
        self.poll();
        let (left, wakers) = {
            let mut schedule = self.lock();
            (
                std::mem::take(&mut schedule.in_flight),
                std::mem::take(&mut schedule.wakers),
            )
        };
        for entry in &left {
            entry.state.resolve_with(Err(Error::DeviceLost(
                "the device was closed before the work finished".into(),
            )));
        }
        if leak {
            // The states are resolved; the keep-alives stay allocated.
            for entry in left {
                std::mem::forget(entry._keep_alive);
            }
        } else {
            drop(left);
        }
        wakers.into_iter().for_each(|(_, waker)| waker.wake());
    }

    /// Destroy the semaphore; called by the device's destructor once idle.
    ///
    /// # Safety
    /// The device must be idle and about to be destroyed.
    pub(crate) unsafe fn destroy_semaphore(&self) {
        let mut alive = self.alive.write().unwrap_or_else(|e| e.into_inner());
        if *alive {
            *alive = false;
            // SAFETY: the caller guarantees the device is idle; no other
            // thread uses the semaphore (all calls happen under `alive`).
            unsafe { self.device.destroy_semaphore(self.semaphore, None) };
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }
}
