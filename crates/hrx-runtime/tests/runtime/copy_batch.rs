//! Copy batches: fixed destinations refilled from per-submission sources.

use crate::common::*;
use hrx_runtime::{Completion, MemoryPlacement, Runtime};

fn words(runtime: &Runtime, values: &[u32]) -> hrx_runtime::Buffer {
    let buffer = runtime
        .allocate(values.len() * 4, MemoryPlacement::HostVisible)
        .unwrap();
    buffer.map_write().unwrap().copy_from_slice(
        &values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    buffer
}

fn read(buffer: &hrx_runtime::Buffer) -> Vec<u32> {
    buffer
        .map_read()
        .unwrap()
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

#[test]
fn each_submission_copies_its_own_sources() {
    let runtime = runtime();
    let a = runtime.allocate(64, MemoryPlacement::HostVisible).unwrap();
    let b = runtime.allocate(32, MemoryPlacement::HostVisible).unwrap();
    let batch = runtime.copy_batch(vec![a.view(), b.view()]).unwrap();
    for round in 0..5u32 {
        let first = words(&runtime, &[round * 100 + 1; 16]);
        let second = words(&runtime, &[round * 100 + 2; 8]);
        batch
            .submit_after(&[first.view(), second.view()], &[])
            .unwrap()
            .wait()
            .unwrap();
        // The sources may go away once submitted; the batch keeps them.
        drop((first, second));
        assert_eq!(read(&a), vec![round * 100 + 1; 16]);
        assert_eq!(read(&b), vec![round * 100 + 2; 8]);
    }
}

#[test]
fn copies_run_after_their_dependencies() {
    let runtime = runtime();
    let source = runtime
        .allocate(1 << 20, MemoryPlacement::GpuLocal)
        .unwrap();
    let destination = runtime
        .allocate(1 << 20, MemoryPlacement::HostVisible)
        .unwrap();
    let batch = runtime.copy_batch(vec![destination.view()]).unwrap();
    let mut fill = runtime.graph();
    fill.fill(source.view(), 0xabcd_0123).unwrap();
    let filled = fill.prepare().unwrap().submit().unwrap();
    batch
        .submit_after(&[source.view()], &[filled])
        .unwrap()
        .wait()
        .unwrap();
    assert!(read(&destination).iter().all(|&w| w == 0xabcd_0123));
}

#[test]
fn a_failed_dependency_fails_the_copy_without_running_it() {
    let runtime = runtime();
    let destination = words(&runtime, &[5; 4]);
    let source = words(&runtime, &[9; 4]);
    let batch = runtime.copy_batch(vec![destination.view()]).unwrap();
    let failed = Completion::failed(hrx_runtime::Error::Message("producer failed".into()));
    let copied = batch.submit_after(&[source.view()], &[failed]).unwrap();
    assert!(copied.wait().is_err());
    assert_eq!(read(&destination), vec![5; 4], "nothing was copied");
    // The batch stays usable.
    batch
        .submit_after(&[source.view()], &[])
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(read(&destination), vec![9; 4]);
}

#[test]
fn bad_sources_are_rejected_before_anything_is_queued() {
    let runtime = runtime();
    let a = runtime.allocate(64, MemoryPlacement::HostVisible).unwrap();
    let big = runtime.allocate(128, MemoryPlacement::HostVisible).unwrap();
    let batch = runtime.copy_batch(vec![a.view()]).unwrap();
    let message = |r: hrx_runtime::Result<Completion>| r.unwrap_err().to_string();
    assert!(message(batch.submit_after(&[], &[])).contains("expects 1 sources, got 0"));
    assert!(message(batch.submit_after(&[big.view()], &[])).contains("128 bytes"));
    assert!(message(batch.submit_after(&[a.view()], &[])).contains("overlaps"));
    let other = hrx_runtime::Runtime::from_env().unwrap();
    let foreign = other.allocate(64, MemoryPlacement::HostVisible).unwrap();
    assert!(message(batch.submit_after(&[foreign.view()], &[])).contains("another runtime domain"));
    // Destinations must be disjoint and of this domain.
    let halves = (
        a.view().slice(0..48).unwrap(),
        a.view().slice(32..64).unwrap(),
    );
    assert!(runtime.copy_batch(vec![halves.0, halves.1]).is_err());
    assert!(runtime.copy_batch(vec![foreign.view()]).is_err());
}
