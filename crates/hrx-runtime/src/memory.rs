//! Device memory: allocations, placement, host mappings and statistics.

use crate::{BufferView, device::Gpu, submit::Health, vk_error};
use ash::vk;
use gpu_allocator::{
    MemoryLocation,
    vulkan::{AllocationCreateDesc, AllocationScheme},
};
use hrx_core::{Error, Result};
use std::{
    ops::{Deref, DerefMut},
    ptr::NonNull,
    sync::{
        Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryPlacement {
    /// Device-local memory: fastest for kernels. It may still be mappable
    /// (a CPU device, or resizable BAR); [`Buffer::is_host_visible`] says.
    GpuLocal,
    /// Host-visible, coherent memory (cached where the device offers it):
    /// staging, readback, and IO that the host touches every request.
    HostVisible,
}

/// Allocation statistics of one runtime domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes currently allocated (as requested, before alignment).
    pub live_bytes: usize,
    /// Highest `live_bytes` seen.
    pub peak_bytes: usize,
    /// Allocations currently alive.
    pub live_allocations: usize,
    /// Allocations ever made.
    pub total_allocations: usize,
}

pub(crate) struct MemoryCounters {
    budget: Option<usize>,
    live: AtomicUsize,
    peak: AtomicUsize,
    count: AtomicUsize,
    total: AtomicUsize,
}

impl MemoryCounters {
    pub(crate) fn new(budget: Option<usize>) -> Self {
        MemoryCounters {
            budget,
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
        }
    }

    /// Charge `bytes` against the budget before allocating.
    fn charge(&self, bytes: usize) -> Result<()> {
        let before = self.live.fetch_add(bytes, Ordering::AcqRel);
        let after = before.saturating_add(bytes);
        if let Some(budget) = self.budget
            && after > budget
        {
            self.live.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Error::Message(format!(
                "memory budget exceeded: {bytes} bytes requested, {before} of {budget} in use"
            )));
        }
        self.peak.fetch_max(after, Ordering::AcqRel);
        self.count.fetch_add(1, Ordering::AcqRel);
        self.total.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn release(&self, bytes: usize) {
        self.live.fetch_sub(bytes, Ordering::AcqRel);
        self.count.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        MemoryStats {
            live_bytes: self.live.load(Ordering::Acquire),
            peak_bytes: self.peak.load(Ordering::Acquire),
            live_allocations: self.count.load(Ordering::Acquire),
            total_allocations: self.total.load(Ordering::Acquire),
        }
    }
}

static NEXT_ALLOCATION: AtomicU64 = AtomicU64::new(1);

/// How long a host mapping may wait for the device or another mapping.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Not at all: [`Error::Busy`] instead.
    No,
    /// Until the deadline (forever when `None`), then [`Error::Busy`].
    Until(Option<Instant>),
}

impl Wait {
    /// Wait at most `timeout` (forever if the deadline overflows).
    pub(crate) fn at_most(timeout: std::time::Duration) -> Wait {
        Wait::Until(Instant::now().checked_add(timeout))
    }

    /// Whether waiting is over: never waiting, or past the deadline.
    fn expired(self) -> bool {
        match self {
            Wait::No => true,
            Wait::Until(deadline) => deadline.is_some_and(|d| Instant::now() >= d),
        }
    }
}

/// One VkBuffer bound to a sub-allocation of device memory.
pub(crate) struct Allocation {
    id: u64,
    pub(crate) gpu: Arc<Gpu>,
    raw: vk::Buffer,
    memory: Mutex<Option<gpu_allocator::vulkan::Allocation>>,
    len: usize,
    mapped: Option<NonNull<u8>>,
    device_local: bool,
    /// Timeline values of the last submission writing / touching this memory.
    last_write: AtomicU64,
    last_use: AtomicU64,
    /// Timeline value of the device fill that zeroes this memory (0 when
    /// it was zeroed through the mapping): every submission using it waits
    /// for that value on the device.
    zeroed_at: AtomicU64,
    /// Writing and reading submissions between `announce_device_use` and
    /// `end_device_use`.
    queueing_writes: std::sync::atomic::AtomicU32,
    queueing_reads: std::sync::atomic::AtomicU32,
    /// Host mappings: many readers or one writer at a time.
    host: RwLock<()>,
}

// SAFETY: `mapped` points into memory owned by this allocation for its whole
// life; all host access to it goes through `host`, which hands out shared
// slices to readers and an exclusive slice to one writer.
unsafe impl Send for Allocation {}
// SAFETY: as above.
unsafe impl Sync for Allocation {}

impl Allocation {
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        bytes: usize,
        placement: MemoryPlacement,
    ) -> Result<Arc<Self>> {
        if bytes == 0 {
            return Err(Error::Message("cannot allocate zero bytes".into()));
        }
        // Asking the driver for more than it can ever give is undefined
        // (maxBufferSize) or a vague out-of-memory: say which limit it is.
        let wanted = bytes as u64;
        if wanted > gpu.max_buffer_bytes {
            return Err(Error::Message(format!(
                "cannot allocate {bytes} bytes: the device's largest buffer is {} bytes \
                 (maxBufferSize)",
                gpu.max_buffer_bytes
            )));
        }
        if wanted > gpu.largest_heap_bytes {
            return Err(Error::Message(format!(
                "cannot allocate {bytes} bytes: the device's largest memory heap holds {} bytes",
                gpu.largest_heap_bytes
            )));
        }
        gpu.memory.charge(bytes)?;
        match Self::create(gpu, bytes, placement) {
            Ok(allocation) => Ok(allocation),
            Err(error) => {
                gpu.memory.release(bytes);
                Err(error)
            }
        }
    }

    fn create(gpu: &Arc<Gpu>, bytes: usize, placement: MemoryPlacement) -> Result<Arc<Self>> {
        let device = gpu.raw();
        let info = vk::BufferCreateInfo::default()
            .size(bytes as u64)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid device and create info (size > 0).
        let raw =
            unsafe { device.create_buffer(&info, None) }.map_err(vk_error("vkCreateBuffer"))?;
        // SAFETY: `raw` was just created from this device.
        let requirements = unsafe { device.get_buffer_memory_requirements(raw) };
        let location = match placement {
            MemoryPlacement::GpuLocal => MemoryLocation::GpuOnly,
            MemoryPlacement::HostVisible => MemoryLocation::GpuToCpu,
        };
        let memory = gpu
            .allocator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allocate(&AllocationCreateDesc {
                name: "hrx",
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            });
        let memory = match memory {
            Ok(memory) => memory,
            Err(error) => {
                // SAFETY: the buffer is unused and unbound.
                unsafe { device.destroy_buffer(raw, None) };
                return Err(Error::Vulkan {
                    operation: "allocate device memory",
                    result: error.to_string(),
                });
            }
        };
        // SAFETY: memory and offset come from an allocation that satisfies
        // this buffer's requirements.
        if let Err(result) =
            unsafe { device.bind_buffer_memory(raw, memory.memory(), memory.offset()) }
        {
            let _ = gpu
                .allocator
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .free(memory);
            // SAFETY: the buffer is unused.
            unsafe { device.destroy_buffer(raw, None) };
            return Err(vk_error("vkBindBufferMemory")(result));
        }
        let mapped = memory.mapped_ptr().map(|p| p.cast::<u8>());
        let device_local = memory
            .memory_properties()
            .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL);
        let allocation = Arc::new(Allocation {
            id: NEXT_ALLOCATION.fetch_add(1, Ordering::Relaxed),
            gpu: gpu.clone(),
            raw,
            memory: Mutex::new(Some(memory)),
            len: bytes,
            mapped,
            device_local,
            last_write: AtomicU64::new(0),
            last_use: AtomicU64::new(0),
            zeroed_at: AtomicU64::new(0),
            queueing_writes: std::sync::atomic::AtomicU32::new(0),
            queueing_reads: std::sync::atomic::AtomicU32::new(0),
            host: RwLock::new(()),
        });
        allocation.zero()?;
        Ok(allocation)
    }

    /// Zero-fill: through the mapping when there is one, else a device fill
    /// queued now and not waited for. The host cannot touch such memory,
    /// and every submission that uses it waits for the fill on the device
    /// (see `zeroed_at`), so allocating never waits behind queued work.
    fn zero(self: &Arc<Self>) -> Result<()> {
        if let Some(pointer) = self.mapped {
            // SAFETY: the mapping covers `len` bytes and nobody else can
            // reach this fresh allocation yet.
            unsafe { std::ptr::write_bytes(pointer.as_ptr(), 0, self.len) };
            return Ok(());
        }
        let gpu = &self.gpu;
        let commands = gpu.command_buffer()?;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a fresh command buffer recorded by this thread only; the
        // fill covers the whole buffer (WHOLE_SIZE).
        unsafe {
            gpu.raw()
                .begin_command_buffer(commands.raw(), &begin)
                .map_err(vk_error("vkBeginCommandBuffer"))?;
            gpu.raw()
                .cmd_fill_buffer(commands.raw(), self.raw, 0, vk::WHOLE_SIZE, 0);
            gpu.raw()
                .end_command_buffer(commands.raw())
                .map_err(vk_error("vkEndCommandBuffer"))?;
        }
        let raw = commands.raw();
        // The fill keeps the allocation alive as well as its command
        // buffer: a buffer dropped at once must not be destroyed while the
        // fill is pending (`Drop` relies on this).
        let keep: Arc<dyn std::any::Any + Send + Sync> = Arc::new((commands, Arc::clone(self)));
        let uses = [crate::submit::BufferUse {
            allocation: self.clone(),
            writes: true,
        }];
        let fill = gpu.submit(crate::submit::Submission {
            command_buffer: raw,
            after: &[],
            previous: None,
            uses: &uses,
            keep_alive: &keep,
            health: &Arc::new(Health::default()),
            injectable: false,
        })?;
        // A fill that could not even be queued fails the allocation.
        match fill.pending_value() {
            Some(value) => self.zeroed_at.store(value, Ordering::Release),
            None => fill.result().unwrap_or(Ok(()))?,
        }
        Ok(())
    }

    /// The timeline value a submission using this memory must wait for
    /// (its zero-fill), or 0.
    pub(crate) fn zeroed_at(&self) -> u64 {
        self.zeroed_at.load(Ordering::Acquire)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn raw(&self) -> vk::Buffer {
        self.raw
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn domain(&self) -> u64 {
        self.gpu.domain
    }

    pub(crate) fn is_host_visible(&self) -> bool {
        self.mapped.is_some()
    }

    /// Whether the memory is device-local (it may be host-visible as well,
    /// on a CPU device or with resizable BAR).
    pub(crate) fn is_device_local(&self) -> bool {
        self.device_local
    }

    /// Announce a submission that uses this memory, before it is queued;
    /// [`check_device_use`](Self::check_device_use) then refuses it if a
    /// host mapping conflicts.
    /// Work that writes it is [`Error::Busy`] while any host mapping of it
    /// is alive (the mapped slice would change under it); work that reads
    /// it is `Busy` while a host write mapping is alive (it would read a
    /// half-written slice). A mapping asked for until
    /// [`end_device_use`](Self::end_device_use) waits for the submission to
    /// be noted and then for the device (`settle`). A host-written flag
    /// that running work polls goes through
    /// [`BufferView::signal`](crate::BufferView::signal) instead of a
    /// mapping. Lock-free and allocation-free, as submission must be.
    pub(crate) fn announce_device_use(&self, writes: bool) {
        if self.mapped.is_some() {
            self.queueing(writes).fetch_add(1, Ordering::SeqCst);
        }
    }

    /// After [`announce_device_use`](Self::announce_device_use) and a
    /// `SeqCst` fence: whether a host mapping conflicts with the announced
    /// use ([`Error::Busy`] then). A mapper takes its lock first, then looks
    /// for announcements: with both fences, at least one sees the other.
    pub(crate) fn check_device_use(&self, writes: bool) -> Result<()> {
        use std::sync::TryLockError;
        if self.mapped.is_none() {
            return Ok(());
        }
        let free = if writes {
            !matches!(self.host.try_write(), Err(TryLockError::WouldBlock))
        } else {
            !matches!(self.host.try_read(), Err(TryLockError::WouldBlock))
        };
        if free {
            return Ok(());
        }
        Err(Error::Busy(if writes {
            "work that writes a buffer the host has mapped; drop the mapping before submitting"
                .into()
        } else {
            "work that reads a buffer the host has mapped for writing; drop the mapping before \
             submitting"
                .into()
        }))
    }

    fn queueing(&self, writes: bool) -> &std::sync::atomic::AtomicU32 {
        if writes {
            &self.queueing_writes
        } else {
            &self.queueing_reads
        }
    }

    /// The submission announced by `announce_device_use` is noted (or
    /// abandoned).
    pub(crate) fn end_device_use(&self, writes: bool) {
        if self.mapped.is_some() {
            self.queueing(writes).fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Store `value` at byte `offset` as one atomic 32-bit write, without a
    /// mapping and without waiting for the device: work on the device may
    /// be reading the word (a flag that releases a spinning kernel). Host
    /// mappings of the memory are excluded for the store.
    pub(crate) fn signal(&self, offset: usize, value: u32) -> Result<()> {
        let pointer = self.pointer()?;
        if !offset.is_multiple_of(4) || offset.checked_add(4).is_none_or(|end| end > self.len) {
            return Err(Error::Message(format!(
                "signal at byte {offset}: needs a 4-byte aligned word inside the {} bytes",
                self.len
            )));
        }
        let _exclusive = self.host.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the word lies inside the mapping and is 4-byte aligned
        // (checked above, and mappings are at least 4-byte aligned); no host
        // reference to the memory exists while the write lock is held, and
        // the device's concurrent reads of host-coherent memory are not
        // Rust accesses. The store is atomic, so a reader sees the old or
        // the new word.
        let word =
            unsafe { std::sync::atomic::AtomicU32::from_ptr(pointer.as_ptr().add(offset).cast()) };
        word.store(value, Ordering::SeqCst);
        Ok(())
    }

    /// With the host lock held: wait until no conflicting submission is
    /// being queued (writing ones for a host reader, any for a host
    /// writer; a few microseconds at most), or refuse with `Busy`.
    fn wait_for_queueing(&self, host_writes: bool, wait: Wait) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        let busy = || {
            self.queueing_writes.load(Ordering::SeqCst) > 0
                || (host_writes && self.queueing_reads.load(Ordering::SeqCst) > 0)
        };
        while busy() {
            if wait.expired() {
                return Err(Error::Busy(
                    "a submission writing this memory is being queued".into(),
                ));
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Record that submission `value` reads (and maybe writes) this memory.
    pub(crate) fn note_use(&self, value: u64, writes: bool) {
        self.last_use.fetch_max(value, Ordering::AcqRel);
        if writes {
            self.last_write.fetch_max(value, Ordering::AcqRel);
        }
    }

    /// Wait (as `wait` allows, else refuse with `Busy`) until the device no
    /// longer conflicts with host access of the given kind.
    fn settle(&self, host_writes: bool, wait: Wait) -> Result<()> {
        let value = if host_writes {
            self.last_use.load(Ordering::Acquire)
        } else {
            self.last_write.load(Ordering::Acquire)
        };
        let timeline = &self.gpu.timeline;
        if timeline.completed() >= value {
            return Ok(());
        }
        timeline.poll();
        if timeline.completed() >= value {
            return Ok(());
        }
        if let Some(why) = timeline.lost() {
            return Err(Error::DeviceLost(why.to_string()));
        }
        let busy = || Error::Busy("the device is still using this memory".into());
        let Wait::Until(deadline) = wait else {
            return Err(busy());
        };
        if !timeline.wait_for(value, deadline) {
            return Err(busy());
        }
        match timeline.lost() {
            Some(why) if timeline.completed() < value => Err(Error::DeviceLost(why.to_string())),
            _ => Ok(()),
        }
    }

    fn pointer(&self) -> Result<NonNull<u8>> {
        self.mapped.ok_or_else(|| {
            Error::Message("buffer memory is not host-visible; allocate it HostVisible".into())
        })
    }

    pub(crate) fn map_read(&self, offset: usize, len: usize, wait: Wait) -> Result<MappedRead<'_>> {
        let pointer = self.pointer()?;
        // The guard first: a writing submission queued after it fails with
        // `Busy`, so the device cannot start writing between `settle` and
        // the read.
        let guard = match wait {
            Wait::Until(None) => self.host.read().unwrap_or_else(|e| e.into_inner()),
            _ => lock_within(
                wait,
                || self.host.try_read(),
                "the buffer is mapped for writing",
            )?,
        };
        self.wait_for_queueing(false, wait)?;
        self.settle(false, wait)?;
        // SAFETY: [offset, offset + len) lies inside the mapping (views are
        // checked on creation); the read guard excludes host writers, and
        // device writes have finished (settle).
        let bytes = unsafe { std::slice::from_raw_parts(pointer.as_ptr().add(offset), len) };
        Ok(MappedRead {
            _guard: guard,
            bytes,
        })
    }

    pub(crate) fn map_write(
        &self,
        offset: usize,
        len: usize,
        wait: Wait,
    ) -> Result<MappedWrite<'_>> {
        let pointer = self.pointer()?;
        // The guard first, as in `map_read`.
        let guard = match wait {
            Wait::Until(None) => self.host.write().unwrap_or_else(|e| e.into_inner()),
            _ => lock_within(
                wait,
                || self.host.try_write(),
                "the buffer is already mapped",
            )?,
        };
        self.wait_for_queueing(true, wait)?;
        self.settle(true, wait)?;
        // SAFETY: the range lies inside the mapping; the write guard makes
        // this the only host access, and device use has finished (settle).
        let bytes = unsafe { std::slice::from_raw_parts_mut(pointer.as_ptr().add(offset), len) };
        Ok(MappedWrite {
            _guard: guard,
            bytes,
        })
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let memory = self
            .memory
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // SAFETY: an allocation is dropped only when no view of it is alive,
        // every in-flight submission keeps the views it uses alive, and its
        // own zero-fill keeps the allocation itself alive, so the device no
        // longer touches this buffer.
        unsafe { self.gpu.raw().destroy_buffer(self.raw, None) };
        if let Some(memory) = memory {
            let _ = self
                .gpu
                .allocator
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .free(memory);
        }
        self.gpu.memory.release(self.len);
    }
}

/// Take a host lock with `try_lock`, retrying until `wait` runs out, then
/// `Busy` with `why`. (std's locks have no timed form.)
fn lock_within<G>(
    wait: Wait,
    mut try_lock: impl FnMut() -> std::sync::TryLockResult<G>,
    why: &str,
) -> Result<G> {
    loop {
        match try_lock() {
            Ok(guard) => return Ok(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => return Ok(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if wait.expired() => {
                return Err(Error::Busy(why.into()));
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}

/// Host read access to mapped memory; device writes to it have finished.
pub struct MappedRead<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    bytes: &'a [u8],
}

impl Deref for MappedRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// Exclusive host write access to mapped memory; the device is not using it.
pub struct MappedWrite<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
    bytes: &'a mut [u8],
}

impl Deref for MappedWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl DerefMut for MappedWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

/// An allocation of device memory, zero-initialised. Cheap to clone; the
/// memory is freed when the last clone and the last view of it are dropped
/// and no submitted work uses it.
///
/// Mapping (`map_read`, `map_write`) waits for pending device work that
/// conflicts with the access; the `try_` forms return [`Error::Busy`]
/// instead. Submitting work that uses memory while it is mapped for writing
/// is the caller's error: finish host writes before submitting.
#[derive(Clone)]
pub struct Buffer {
    pub(crate) allocation: Arc<Allocation>,
    /// A buffer counts as a handle of its domain: dropping the domain's
    /// last handle waits for its work (see `Domain`'s drop). Only buffers,
    /// never views, hold it, because views are kept by in-flight work.
    pub(crate) _runtime: crate::Runtime,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer(#{}, {} bytes)",
            self.allocation.id, self.allocation.len
        )
    }
}

impl Buffer {
    /// A view of the whole buffer.
    pub fn view(&self) -> BufferView {
        BufferView::whole(self.allocation.clone())
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.allocation.len
    }

    /// Always false: zero-byte buffers cannot be allocated.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether the host can map this memory.
    pub fn is_host_visible(&self) -> bool {
        self.allocation.is_host_visible()
    }

    /// Read the contents, waiting for device writes to finish.
    pub fn map_read(&self) -> Result<MappedRead<'_>> {
        self.allocation.map_read(0, self.len(), Wait::Until(None))
    }

    /// Write the contents, waiting until the device no longer uses them.
    pub fn map_write(&self) -> Result<MappedWrite<'_>> {
        self.allocation.map_write(0, self.len(), Wait::Until(None))
    }

    /// Like [`map_read`](Self::map_read), or [`Error::Busy`] instead of waiting.
    pub fn try_map_read(&self) -> Result<MappedRead<'_>> {
        self.allocation.map_read(0, self.len(), Wait::No)
    }

    /// Like [`map_write`](Self::map_write), or [`Error::Busy`] instead of waiting.
    pub fn try_map_write(&self) -> Result<MappedWrite<'_>> {
        self.allocation.map_write(0, self.len(), Wait::No)
    }
}
