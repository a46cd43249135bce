//! Fresh memory reads as zero in every placement, and allocating never
//! waits behind queued work. Device-local memory without a mapping (a
//! discrete GPU) is zeroed by a device fill that `allocate` queues and does
//! not wait for; the first submission using the memory waits for it on the
//! device. On lavapipe all memory is mapped, so these run the host path
//! there; on the H200 they cover the device fill.

use crate::common::{read, runtime, write};
use hrx_runtime::{Buffer, MemoryPlacement, Runtime};
use hrx_test_support::gate::Gate;

/// The words of `buffer`, copied through host-visible memory first
/// poisoned with `0xDEADBEEF`.
fn read_through_copy(runtime: &Runtime, buffer: &Buffer) -> Vec<u32> {
    let out = runtime
        .allocate(buffer.len(), MemoryPlacement::HostVisible)
        .unwrap();
    write(&out.view(), &vec![0xDEAD_BEEF; buffer.len() / 4]);
    let mut graph = runtime.graph();
    graph.copy(out.view(), buffer.view()).unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    read(&out.view())
}

#[test]
fn reused_device_memory_reads_as_zero() {
    let runtime = runtime();
    for round in 0..4u32 {
        // Dirty memory on the device, free it, allocate again: the
        // allocator may hand the same bytes back.
        let dirty = runtime
            .allocate(1 << 16, MemoryPlacement::GpuLocal)
            .unwrap();
        let mut graph = runtime.graph();
        graph.fill(dirty.view(), 0xABAB_ABAB ^ round).unwrap();
        graph.prepare().unwrap().submit().unwrap().wait().unwrap();
        drop(dirty);
        let fresh = runtime
            .allocate(1 << 16, MemoryPlacement::GpuLocal)
            .unwrap();
        let words = read_through_copy(&runtime, &fresh);
        assert!(words.iter().all(|&w| w == 0), "round {round}");
    }
}

#[test]
fn allocating_does_not_wait_for_queued_work() {
    let runtime = runtime();
    let gate = Gate::new(&runtime);
    let busy = gate.submit().unwrap();
    let fresh = runtime
        .allocate(1 << 20, MemoryPlacement::GpuLocal)
        .unwrap();
    assert!(
        !busy.is_complete(),
        "allocate waited for work queued before it"
    );
    // Used after the gate: still zero, the fill ordered before the copy.
    gate.open();
    let words = read_through_copy(&runtime, &fresh);
    assert!(words.iter().all(|&w| w == 0));
    busy.wait().unwrap();
}

#[test]
fn dropping_fresh_memory_while_its_fill_is_queued_is_safe() {
    // Behind a busy queue the zero-fill of device-local memory waits; the
    // buffer, dropped at once, must outlive its fill (with validation on,
    // destroying a buffer a pending fill uses is an error, and on a
    // discrete GPU it is a use after free).
    let runtime = runtime();
    let gate = Gate::new(&runtime);
    let before = runtime.memory_stats().live_bytes;
    let busy = gate.submit().unwrap();
    for round in 0..64usize {
        let fresh = runtime
            .allocate((1 << 16) + 256 * round, MemoryPlacement::GpuLocal)
            .unwrap();
        drop(fresh);
    }
    gate.open();
    busy.wait().unwrap();
    // Once the fills have run, the memory they kept alive is released.
    let kept = runtime
        .allocate(1 << 12, MemoryPlacement::GpuLocal)
        .unwrap();
    let mut graph = runtime.graph();
    graph.fill(kept.view(), 1).unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    drop(kept);
    // The fills' keep-alives are released as the runtime retires their
    // submissions, which may lag the waits above by a poll.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while runtime.memory_stats().live_bytes != before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(runtime.memory_stats().live_bytes, before);
}
