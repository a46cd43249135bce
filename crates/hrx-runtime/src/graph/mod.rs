//! Graphs: copies, fills and dispatches recorded once, checked at record
//! time, ordered by derived hazards, and prepared into a command buffer.

mod executable;
mod hazard;
#[cfg(feature = "inspect")]
mod inspect;
mod op;
mod record;

pub use executable::ExecutableGraph;
pub use hazard::{Barrier, Edge, Hazard};
#[cfg(feature = "inspect")]
pub use inspect::Operation;

use crate::{BufferView, GpuKernel, MemoryPlacement, Runtime};
use hrx_core::{Error, Result};
use op::Op;

/// A recording of device work: `copy`, `fill` and `dispatch` operations in
/// order, with no barrier API.
///
/// Every operation declares the bytes it reads and writes (a kernel's
/// contract says which bindings are read, written or both). [`prepare`]
/// derives read-after-write, write-after-read and write-after-write edges at
/// byte-range granularity and inserts a barrier only where an edge needs
/// one, so independent operations run concurrently. All checks happen when
/// an operation is recorded; an error names the operation and leaves the
/// graph as it was.
///
/// [`prepare`]: Graph::prepare
pub struct Graph {
    runtime: Runtime,
    ops: Vec<Op>,
    /// Storage handed out by [`scratch`](Graph::scratch), smallest first.
    scratch: Vec<BufferView>,
    /// Storage handed out by [`zeroed_scratch`](Graph::zeroed_scratch),
    /// smallest first.
    zeroed: Vec<BufferView>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("operations", &self.ops.len())
            .finish_non_exhaustive()
    }
}

fn fail<T>(operation: &str, why: impl std::fmt::Display) -> Result<T> {
    Err(Error::Message(format!("{operation}: {why}")))
}

/// A view of `bytes` at the start of the smallest storage in `pool` (kept
/// smallest first) that holds it, allocating (zero-filled) only when none
/// does.
fn take_shared(
    runtime: &Runtime,
    pool: &mut Vec<BufferView>,
    operation: &str,
    bytes: usize,
) -> Result<BufferView> {
    if bytes == 0 {
        return fail(operation, "a request of 0 bytes has no storage");
    }
    let storage = match pool.iter().find(|s| s.len() >= bytes) {
        Some(storage) => storage.clone(),
        None => {
            let storage = runtime.allocate(bytes, MemoryPlacement::GpuLocal)?.view();
            let at = pool.partition_point(|s| s.len() < bytes);
            pool.insert(at, storage.clone());
            storage
        }
    };
    storage.slice(0..bytes)
}

impl Graph {
    pub(crate) fn new(runtime: Runtime) -> Graph {
        Graph {
            runtime,
            ops: Vec::new(),
            scratch: Vec::new(),
            zeroed: Vec::new(),
        }
    }

    /// The number of operations recorded so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The operations recorded so far, in order, read-only: for tools that
    /// replay the same work elsewhere (a raw-Vulkan benchmark baseline) or
    /// print it. Behind the `inspect` feature: no product code needs it.
    #[cfg(feature = "inspect")]
    pub fn operations(&self) -> impl ExactSizeIterator<Item = Operation<'_>> {
        self.ops.iter().map(Operation::from)
    }

    fn check_owned(&self, operation: &str, what: &str, view: &BufferView) -> Result<()> {
        if self.runtime.owns(view) {
            Ok(())
        } else {
            fail(
                operation,
                format!("the {what} view belongs to another runtime domain"),
            )
        }
    }

    /// Device-local storage of `bytes` for intermediate results that live
    /// only between operations of this graph (a split-k matmul's partial
    /// sums, say), shared by every scratch request of the graph.
    ///
    /// The view starts at its storage's first byte. A request reuses the
    /// smallest storage already handed out that holds it, and allocates new
    /// storage (zero-filled, like any allocation) only when none does, so a
    /// graph of many such operations holds as much scratch as its largest
    /// request, not their sum. Operations that use the same scratch are
    /// ordered by the usual hazards: each waits for the one before it that
    /// touched those bytes. Contents are unspecified on entry; an operation
    /// must write what it reads. Each submission of the prepared graph
    /// uses the same storage, as it does the graph's other buffers.
    ///
    /// ```
    /// # fn main() -> hrx_core::Result<()> {
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let mut graph = runtime.graph();
    /// let first = graph.scratch(4096)?;
    /// let second = graph.scratch(1024)?;
    /// assert_eq!((first.len(), second.len()), (4096, 1024));
    /// assert!(first.overlaps(&second));
    /// # Ok(())
    /// # }
    /// ```
    pub fn scratch(&mut self, bytes: usize) -> Result<BufferView> {
        take_shared(&self.runtime, &mut self.scratch, "scratch", bytes)
    }

    /// Device-local storage of `bytes` that is all zero when each
    /// operation using it starts, for state one operation keeps between
    /// its workgroups (a split-k matmul's per-slab counters, say), shared
    /// by every such request of the graph like [`scratch`](Graph::scratch)
    /// is (a separate pool).
    ///
    /// The storage is zero when allocated (before the graph's first
    /// submission); keeping it zero is the users' contract: every
    /// operation must leave each byte it used at zero when it completes
    /// (a counter the last workgroup resets). The runtime cannot check
    /// this; an operation that breaks it breaks the next user of the
    /// storage, in this submission and the following ones.
    ///
    /// ```
    /// # fn main() -> hrx_core::Result<()> {
    /// let runtime = hrx_runtime::Runtime::new()?;
    /// let mut graph = runtime.graph();
    /// let counters = graph.zeroed_scratch(256)?;
    /// let scratch = graph.scratch(256)?;
    /// assert!(!counters.overlaps(&scratch));
    /// assert!(counters.overlaps(&graph.zeroed_scratch(64)?));
    /// # Ok(())
    /// # }
    /// ```
    pub fn zeroed_scratch(&mut self, bytes: usize) -> Result<BufferView> {
        take_shared(&self.runtime, &mut self.zeroed, "zeroed scratch", bytes)
    }

    /// Copy `src` into `dst`. Both views must have equal lengths, belong to
    /// this graph's runtime and not overlap. Large device-local copies run
    /// through a built-in compute kernel, which streams faster than the copy
    /// engine on GPUs.
    pub fn copy(&mut self, dst: BufferView, src: BufferView) -> Result<()> {
        self.check_owned("copy", "destination", &dst)?;
        self.check_owned("copy", "source", &src)?;
        if dst.len() != src.len() {
            return fail(
                "copy",
                format!("destination has {} bytes, source {}", dst.len(), src.len()),
            );
        }
        if dst.overlaps(&src) {
            return fail(
                "copy",
                format!("destination {dst:?} overlaps source {src:?}"),
            );
        }
        self.ops.push(Op::Copy { dst, src });
        Ok(())
    }

    /// Fill `view` with the 32-bit word `value` repeated. The view's offset
    /// and length must be multiples of 4.
    pub fn fill(&mut self, view: BufferView, value: u32) -> Result<()> {
        self.check_owned("fill", "target", &view)?;
        if !view.offset().is_multiple_of(4) || !view.len().is_multiple_of(4) {
            return fail(
                "fill",
                format!(
                    "offset {} and length {} must be multiples of 4",
                    view.offset(),
                    view.len()
                ),
            );
        }
        self.ops.push(Op::Fill { view, value });
        Ok(())
    }

    /// Dispatch `kernel` over `workgroups` with `views` bound in binding
    /// order and `constants` as its push-constant block.
    ///
    /// Checked against the kernel's contract and the device limits: binding
    /// count, each view's length (at least `min_bytes`, non-empty, at most
    /// the device's storage range) and offset alignment (the contract's and
    /// the device's), the constants' size, a non-zero grid within the
    /// device's workgroup-count limits, the domain of the kernel and every
    /// view, and writable aliasing unless the kernel opted into it.
    pub fn dispatch(
        &mut self,
        kernel: &GpuKernel,
        views: &[BufferView],
        constants: &[u8],
        workgroups: [u32; 3],
    ) -> Result<()> {
        let contract = kernel.contract();
        let operation = format!("dispatch of `{}`", contract.entry_point);
        let operation = operation.as_str();
        if kernel.domain() != self.runtime.id() {
            return fail(operation, "the kernel belongs to another runtime domain");
        }
        let target = self.runtime.gpu()?.target();
        if views.len() != contract.bindings.len() {
            return fail(
                operation,
                format!(
                    "{} views given, the kernel has {} bindings",
                    views.len(),
                    contract.bindings.len()
                ),
            );
        }
        for (i, (view, binding)) in views.iter().zip(&contract.bindings).enumerate() {
            self.check_owned(operation, &format!("binding {i}"), view)?;
            let offset_alignment = target.storage_buffer_offset_alignment.max(1);
            let why = if view.is_empty() {
                Some("the view is empty".to_string())
            } else if view.len() < binding.min_bytes {
                Some(format!(
                    "{} bytes, the kernel needs at least {}",
                    view.len(),
                    binding.min_bytes
                ))
            } else if view.len() as u64 > target.max_storage_buffer_range {
                Some(format!(
                    "{} bytes exceed the device's storage range {}",
                    view.len(),
                    target.max_storage_buffer_range
                ))
            } else if !view.offset().is_multiple_of(binding.alignment.max(1)) {
                Some(format!(
                    "offset {} is not a multiple of {}",
                    view.offset(),
                    binding.alignment
                ))
            } else if !(view.offset() as u64).is_multiple_of(offset_alignment) {
                Some(format!(
                    "offset {} is not a multiple of the device's storage offset alignment {offset_alignment}",
                    view.offset()
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return fail(operation, format!("binding {i}: {why}"));
            }
        }
        if !kernel.aliasing_allowed() {
            for (i, (a, ca)) in views.iter().zip(&contract.bindings).enumerate() {
                for (j, (b, cb)) in views.iter().zip(&contract.bindings).enumerate().skip(i + 1) {
                    if (ca.access.writes() || cb.access.writes()) && a.overlaps(b) {
                        return fail(
                            operation,
                            format!(
                                "bindings {i} and {j} overlap and one is writable; \
                                 use `GpuKernel::allow_aliasing` if the kernel tolerates it"
                            ),
                        );
                    }
                }
            }
        }
        if constants.len() != contract.push_constant_bytes as usize {
            return fail(
                operation,
                format!(
                    "{} bytes of constants given, the kernel takes {}",
                    constants.len(),
                    contract.push_constant_bytes
                ),
            );
        }
        if workgroups.contains(&0)
            || workgroups
                .iter()
                .zip(target.max_workgroup_count)
                .any(|(&n, max)| n > max)
        {
            return fail(
                operation,
                format!(
                    "workgroups {workgroups:?} must be non-zero and within {:?}",
                    target.max_workgroup_count
                ),
            );
        }
        self.ops.push(Op::Dispatch {
            kernel: kernel.clone(),
            views: views.to_vec(),
            constants: constants.to_vec(),
            workgroups,
        });
        Ok(())
    }

    /// Fail unless this graph was created by `runtime`'s domain.
    pub fn validate_runtime(&self, runtime: &Runtime) -> Result<()> {
        if self.runtime.same_domain(runtime) {
            Ok(())
        } else {
            fail("graph", "it belongs to another runtime domain")
        }
    }

    /// Derive hazards, place barriers, and record the command buffer once.
    /// An empty graph prepares without touching the device.
    pub fn prepare(self) -> Result<ExecutableGraph> {
        ExecutableGraph::prepare(self.runtime, self.ops)
    }
}
