//! Replaying a prepared graph allocates nothing on the heap: a counting
//! global allocator watches every Rust allocation in the process (the
//! watcher thread's included) while a warm graph is submitted and waited.

use hrx_runtime::{MemoryPlacement, Runtime};
use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn replaying_a_prepared_graph_allocates_nothing() {
    let runtime = Runtime::from_env().unwrap();
    let a = runtime
        .allocate(1 << 16, MemoryPlacement::GpuLocal)
        .unwrap();
    let b = runtime
        .allocate(1 << 16, MemoryPlacement::HostVisible)
        .unwrap();
    let mut graph = runtime.graph();
    graph.fill(a.view(), 3).unwrap();
    graph.copy(b.view(), a.view()).unwrap();
    let graph = graph.prepare().unwrap();
    let dependency = graph.submit().unwrap();
    dependency.wait().unwrap();
    // Warm up: the completion pool and the in-flight queue reach steady state.
    for _ in 0..64 {
        graph.submit().unwrap().wait().unwrap();
    }
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..500 {
        let done = graph
            .submit_after(std::slice::from_ref(&dependency))
            .unwrap();
        done.wait().unwrap();
        assert!(done.is_complete());
    }
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(
        ALLOCATIONS.load(Ordering::SeqCst),
        0,
        "heap allocations during replay"
    );
    assert_eq!(b.map_read().unwrap()[..4], 3u32.to_le_bytes());
}
