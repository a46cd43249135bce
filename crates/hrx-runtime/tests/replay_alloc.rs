// Its own test binary: it counts every heap allocation in the process.
//! Replaying a prepared graph allocates nothing on the heap: a counting
//! global allocator watches every Rust allocation in the process (the
//! watcher thread's included) while a warm graph is submitted and waited.

use hrx_runtime::{MemoryPlacement, Runtime};
use hrx_test_support::counting::{Counting, allocations_during};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

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
    let allocations = allocations_during(|| {
        for _ in 0..500 {
            let done = graph
                .submit_after(std::slice::from_ref(&dependency))
                .unwrap();
            done.wait().unwrap();
            assert!(done.is_complete());
        }
    });
    assert_eq!(allocations, 0, "heap allocations during replay");
    assert_eq!(b.map_read().unwrap()[..4], 3u32.to_le_bytes());
}
