//! The runtime domain: one device, one allocator, one timeline.

use crate::{
    BufferView, Graph, RuntimeOptions,
    device::Gpu,
    memory::{Allocation, Buffer, MemoryPlacement, MemoryStats},
};
use hrx_core::Result;
use std::sync::{
    Arc, Mutex, OnceLock,
    atomic::{AtomicU64, Ordering},
};

static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(1);

/// A scheduling and allocation domain on one Vulkan device. Cheap to clone:
/// clones share the domain. Creating one touches no hardware; the device
/// opens on first need ([`gpu`](Self::gpu), [`allocate`](Self::allocate),
/// kernel creation).
///
/// Everything that crosses an API (views, kernels, graphs, completions) is
/// checked against its domain before any work is queued.
///
/// Buffers, graphs and copy batches hold the domain too. Dropping its last
/// handle blocks until the work queued on the device has finished, then
/// releases that work's resources on the dropping thread (and destroys the
/// device there unless views or kernels still hold it).
///
/// ```no_run
/// use hrx_runtime::{MemoryPlacement, Runtime};
/// let runtime = Runtime::new()?;
/// let buffer = runtime.allocate(1024, MemoryPlacement::HostVisible)?;
/// assert!(buffer.map_read()?.iter().all(|&b| b == 0));
/// # Ok::<(), hrx_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Runtime {
    domain: Arc<Domain>,
}

struct Domain {
    id: u64,
    options: RuntimeOptions,
    gpu: OnceLock<Arc<Gpu>>,
    opening: Mutex<()>,
}

impl Drop for Domain {
    /// The last runtime handle of the domain is going (buffers, graphs and
    /// copy batches hold one too): wait for the domain's work and release
    /// what it kept alive on this thread, so that the device is destroyed
    /// here or by whoever drops the last view or kernel, never by the
    /// watcher thread, whose driver calls could race process exit.
    fn drop(&mut self) {
        if let Some(gpu) = self.gpu.get() {
            gpu.close();
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("domain", &self.domain.id)
            .field("gpu", &self.domain.gpu.get())
            .finish()
    }
}

impl Runtime {
    /// A domain with default options (the device chosen by type, no
    /// validation). Reads no environment variable.
    pub fn new() -> Result<Self> {
        Self::with_options(RuntimeOptions::default())
    }

    /// A domain with the options the environment gives
    /// ([`RuntimeOptions::from_env`]: `HRX_DEVICE`, `HRX_VALIDATION`); an
    /// invalid value is an error. For binaries, examples and tests.
    pub fn from_env() -> Result<Self> {
        Self::with_options(RuntimeOptions::from_env()?)
    }

    /// A domain with explicit options. No hardware is touched.
    pub fn with_options(options: RuntimeOptions) -> Result<Self> {
        Ok(Runtime {
            domain: Arc::new(Domain {
                id: NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed),
                options,
                gpu: OnceLock::new(),
                opening: Mutex::new(()),
            }),
        })
    }

    /// The device, opened on first call. A failure to open is returned and
    /// the next call tries again.
    pub fn gpu(&self) -> Result<&Gpu> {
        self.gpu_arc().map(|gpu| &**gpu)
    }

    pub(crate) fn gpu_arc(&self) -> Result<&Arc<Gpu>> {
        if let Some(gpu) = self.domain.gpu.get() {
            return Ok(gpu);
        }
        let _opening = self
            .domain
            .opening
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(gpu) = self.domain.gpu.get() {
            return Ok(gpu);
        }
        let gpu = Gpu::open(self.domain.id, &self.domain.options)?;
        Ok(self.domain.gpu.get_or_init(|| gpu))
    }

    /// Whether the device has been opened.
    pub fn is_open(&self) -> bool {
        self.domain.gpu.get().is_some()
    }

    pub(crate) fn id(&self) -> u64 {
        self.domain.id
    }

    /// True only for clones of the same domain.
    pub fn same_domain(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.domain, &other.domain)
    }

    /// True only for storage this domain allocated.
    pub fn owns(&self, view: &BufferView) -> bool {
        view.domain() == self.domain.id
    }

    /// Allocate `bytes` of zero-initialised storage. The domain's memory
    /// budget is charged first; exceeding it is an error, never a crash.
    pub fn allocate(&self, bytes: usize, placement: MemoryPlacement) -> Result<Buffer> {
        let gpu = self.gpu_arc()?;
        Ok(Buffer {
            allocation: Allocation::new(gpu, bytes, placement)?,
            _runtime: self.clone(),
        })
    }

    /// A new, empty graph of this domain.
    pub fn graph(&self) -> Graph {
        Graph::new(self.clone())
    }

    /// A [`CopyBatch`](crate::CopyBatch) refilling `destinations` (views
    /// of this domain, pairwise disjoint) from sources chosen per
    /// submission. Touches no hardware until the first submission.
    pub fn copy_batch(&self, destinations: Vec<BufferView>) -> Result<crate::CopyBatch> {
        crate::CopyBatch::new(self.clone(), destinations)
    }

    /// Allocation statistics (all zero before the device opens).
    pub fn memory_stats(&self) -> MemoryStats {
        self.domain
            .gpu
            .get()
            .map(|gpu| gpu.memory.stats())
            .unwrap_or_default()
    }

    /// Arm a deterministic fault (see [`Fault`](crate::Fault); cargo feature `testing`).
    /// Refused unless the domain was created with fault injection enabled.
    #[cfg(feature = "testing")]
    pub fn inject_fault(&self, fault: crate::Fault) -> Result<()> {
        if !self.domain.options.fault_injection {
            return Err(hrx_core::Error::Message(
                "fault injection is disabled; enable it with RuntimeOptions::with_fault_injection"
                    .into(),
            ));
        }
        let gpu = self.gpu_arc()?;
        match fault {
            crate::Fault::FailNextSubmission => {
                gpu.fail_next_submission.store(true, Ordering::Release)
            }
            crate::Fault::FailNextExecution => {
                gpu.fail_next_execution.store(true, Ordering::Release)
            }
            crate::Fault::LoseDevice => gpu.timeline.lose("injected device loss"),
        }
        Ok(())
    }
}
