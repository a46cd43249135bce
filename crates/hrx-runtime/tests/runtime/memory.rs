//! Allocation, views, mapping and domain identity on a real device.

use hrx_runtime::{Error, MemoryPlacement, Runtime, RuntimeOptions};
use proptest::prelude::*;

fn runtime() -> Runtime {
    Runtime::from_env().expect("runtime")
}

#[test]
fn creating_a_runtime_touches_no_hardware() {
    let runtime = Runtime::with_options(
        RuntimeOptions::from_env()
            .unwrap()
            .with_device_name("no such device"),
    )
    .unwrap();
    assert!(!runtime.is_open());
    assert_eq!(runtime.memory_stats().total_allocations, 0);
    // The bad selector only matters once the device is needed.
    let error = runtime.gpu().unwrap_err();
    assert!(
        error.to_string().contains("no Vulkan device matches"),
        "{error}"
    );
}

#[test]
fn allocations_are_zero_initialised_in_both_placements() {
    let runtime = runtime();
    for placement in [MemoryPlacement::HostVisible, MemoryPlacement::GpuLocal] {
        // Dirty memory, free it, allocate again: the allocator may hand the
        // same bytes back, and they must read as zero.
        let dirty = runtime.allocate(4096, placement).unwrap();
        if dirty.is_host_visible() {
            dirty.map_write().unwrap().fill(0xAB);
        }
        drop(dirty);
        let fresh = runtime.allocate(4096, placement).unwrap();
        if fresh.is_host_visible() {
            assert!(fresh.map_read().unwrap().iter().all(|&b| b == 0));
        }
    }
}

#[test]
fn zero_byte_allocations_are_refused() {
    let error = runtime()
        .allocate(0, MemoryPlacement::GpuLocal)
        .unwrap_err();
    assert!(error.to_string().contains("zero bytes"));
}

#[test]
fn the_memory_budget_refuses_without_crashing_and_statistics_follow() {
    let runtime = Runtime::with_options(
        RuntimeOptions::from_env()
            .unwrap()
            .with_memory_budget(10_000),
    )
    .unwrap();
    let a = runtime
        .allocate(6_000, MemoryPlacement::HostVisible)
        .unwrap();
    let error = runtime
        .allocate(6_000, MemoryPlacement::HostVisible)
        .unwrap_err();
    assert!(
        error.to_string().contains("memory budget exceeded"),
        "{error}"
    );
    let stats = runtime.memory_stats();
    assert_eq!((stats.live_bytes, stats.live_allocations), (6_000, 1));
    drop(a);
    let b = runtime
        .allocate(9_000, MemoryPlacement::HostVisible)
        .unwrap();
    let stats = runtime.memory_stats();
    assert_eq!(stats.live_bytes, 9_000);
    assert_eq!(stats.peak_bytes, 9_000);
    assert_eq!(stats.total_allocations, 2);
    drop(b);
    assert_eq!(runtime.memory_stats().live_bytes, 0);
}

#[test]
fn views_are_checked_and_compare_by_allocation() {
    let runtime = runtime();
    let buffer = runtime.allocate(256, MemoryPlacement::HostVisible).unwrap();
    let view = buffer.view();
    let a = view.slice(16..64).unwrap();
    assert_eq!((a.offset(), a.len()), (16, 48));
    let b = a.slice(8..16).unwrap();
    assert_eq!(b.offset(), 24, "offsets count from the allocation's start");
    assert!(a.overlaps(&b) && b.overlaps(&a));
    assert!(
        !a.overlaps(&view.slice(64..128).unwrap()),
        "adjacent ranges do not overlap"
    );
    assert!(view.slice(200..300).is_err());
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = view.slice(10..5);
    assert!(reversed.is_err());
    assert!(a.same_region(&view.slice(16..64).unwrap()));
    let other = runtime.allocate(256, MemoryPlacement::HostVisible).unwrap();
    assert!(
        !view.overlaps(&other.view()),
        "different allocations never overlap"
    );
}

#[test]
fn mapped_views_write_and_read_their_own_range() {
    let runtime = runtime();
    let buffer = runtime.allocate(64, MemoryPlacement::HostVisible).unwrap();
    buffer
        .view()
        .slice(8..12)
        .unwrap()
        .map_write()
        .unwrap()
        .copy_from_slice(&[1, 2, 3, 4]);
    let all = buffer.map_read().unwrap();
    assert_eq!(&all[6..14], &[0, 0, 1, 2, 3, 4, 0, 0]);
}

#[test]
fn host_mappings_exclude_each_other() {
    let runtime = runtime();
    let buffer = runtime.allocate(64, MemoryPlacement::HostVisible).unwrap();
    let reading = buffer.map_read().unwrap();
    assert!(matches!(buffer.try_map_write(), Err(Error::Busy(_))));
    assert!(buffer.try_map_read().is_ok(), "readers share");
    drop(reading);
    let writing = buffer.try_map_write().unwrap();
    assert!(matches!(buffer.try_map_read(), Err(Error::Busy(_))));
    drop(writing);
}

#[test]
fn domains_own_only_their_storage() {
    let a = runtime();
    let b = runtime();
    let clone = a.clone();
    assert!(a.same_domain(&clone) && !a.same_domain(&b));
    let view = a.allocate(16, MemoryPlacement::HostVisible).unwrap().view();
    assert!(a.owns(&view) && clone.owns(&view));
    assert!(!b.owns(&view));
}

#[test]
fn the_live_device_reports_its_facts() {
    let runtime = runtime();
    let target = runtime.gpu().unwrap().target();
    assert!(target.timeline_semaphores);
    assert!(target.api_version >= (1, 3, 0));
    assert!(target.subgroup_size_min >= 1 && target.subgroup_size_min <= target.subgroup_size_max);
    assert!(target.push_constant_bytes >= 128);
    assert!(!hrx_runtime::available_devices().unwrap().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn slicing_matches_a_range_model(
        len in 1usize..512,
        first in (0usize..600, 0usize..600),
        second in (0usize..600, 0usize..600),
    ) {
        let runtime = shared_runtime();
        let view = runtime.allocate(len, MemoryPlacement::HostVisible).unwrap().view();
        let slice = |(s, e): (usize, usize)| (view.slice(s..e).ok(), s <= e && e <= len);
        let (a, a_ok) = slice(first);
        let (b, b_ok) = slice(second);
        prop_assert_eq!(a.is_some(), a_ok);
        prop_assert_eq!(b.is_some(), b_ok);
        if let (Some(a), Some(b)) = (a, b) {
            let model = first.0 < second.1 && second.0 < first.1;
            prop_assert_eq!(a.overlaps(&b), model);
            prop_assert_eq!(a.offset(), first.0);
        }
    }
}

fn shared_runtime() -> &'static Runtime {
    static RUNTIME: std::sync::OnceLock<Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(runtime)
}

#[test]
fn work_that_conflicts_with_a_host_mapping_is_busy() {
    let runtime = runtime();
    let host = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    let other = runtime
        .allocate(4096, MemoryPlacement::HostVisible)
        .unwrap();
    // The device would write memory the host holds mapped: refused.
    let mut writes_host = runtime.graph();
    writes_host.fill(host.view(), 7).unwrap();
    let writes_host = writes_host.prepare().unwrap();
    for held_for_writing in [false, true] {
        let result = if held_for_writing {
            let _mapping = host.map_write().unwrap();
            writes_host.submit().map(|_| ())
        } else {
            let _mapping = host.map_read().unwrap();
            writes_host.submit().map(|_| ())
        };
        assert!(matches!(result, Err(Error::Busy(_))), "{result:?}");
    }
    // Work that only reads the mapped memory runs beside host readers,
    // and is refused while the host writes it.
    let mut reads_host = runtime.graph();
    reads_host.copy(other.view(), host.view()).unwrap();
    let reads_host = reads_host.prepare().unwrap();
    {
        let _reader = host.map_read().unwrap();
        reads_host.submit().unwrap().wait().unwrap();
    }
    {
        let _writer = host.map_write().unwrap();
        assert!(matches!(reads_host.submit(), Err(Error::Busy(_))));
    }
    // A signal is a word stored without a mapping, allowed beside work
    // that reads it.
    host.view().signal(3).unwrap();
    assert_eq!(host.map_read().unwrap()[..4], 3u32.to_le_bytes());
    assert!(host.view().slice(2..6).unwrap().signal(1).is_err());
    // Once the mappings are gone, everything runs, and a mapping taken
    // after a submission waits for it.
    writes_host.submit().unwrap();
    assert!(
        host.map_read()
            .unwrap()
            .chunks(4)
            .all(|w| w == 7u32.to_le_bytes())
    );
}

#[test]
fn allocations_past_the_devices_limits_are_clear_errors() {
    let runtime = runtime();
    for bytes in [usize::MAX, 1 << 62, 1 << 50] {
        for placement in [MemoryPlacement::HostVisible, MemoryPlacement::GpuLocal] {
            let error = runtime.allocate(bytes, placement).unwrap_err().to_string();
            assert!(
                error.contains("maxBufferSize") || error.contains("largest memory heap"),
                "{bytes}: {error}"
            );
        }
    }
    // Nothing was charged or leaked by the refusals.
    assert_eq!(runtime.memory_stats().live_bytes, 0);
}
