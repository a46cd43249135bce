//! A counting global allocator for the warm-path tests: it forwards to the
//! system allocator and counts allocations two ways.
//!
//! - [`allocations_during`]: every allocation in the process (the
//!   runtime's watcher thread included) while the work runs. The count is
//!   process-wide, so a test using it needs a test binary of its own.
//! - [`thread_allocations`]: the allocations the calling thread made so
//!   far, undisturbed by other tests in the same process.
//!
//! A library cannot choose a binary's allocator: the test binary declares
//! it, `#[global_allocator] static ALLOCATOR: Counting = Counting;`.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

/// The counting allocator; see the module documentation.
pub struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD: Cell<usize> = const { Cell::new(0) };
}

impl Counting {
    fn count() {
        // A const thread-local without a destructor: it never allocates,
        // and `try_with` only fails while the thread is being torn down.
        let _ = THREAD.try_with(|c| c.set(c.get() + 1));
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts, with
// atomics and a const thread-local that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Run `work` with counting on; the number of heap allocations it (and
/// every other thread meanwhile) made. Only meaningful where [`Counting`]
/// is the global allocator and no other test shares the process.
pub fn allocations_during(work: impl FnOnce()) -> usize {
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    work();
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCATIONS.load(Ordering::SeqCst)
}

/// Heap allocations the calling thread has made so far (zero unless
/// [`Counting`] is the global allocator).
pub fn thread_allocations() -> usize {
    THREAD.with(Cell::get)
}
