//! A domain's device closes once nothing of the domain is left, even after
//! submissions nobody waited for (the watcher releases them).

use hrx_runtime::{MemoryPlacement, Runtime, open_device_count};
use std::time::{Duration, Instant};

#[test]
fn devices_close_when_their_domain_is_gone() {
    assert_eq!(open_device_count(), 0);
    {
        let runtime = Runtime::new().unwrap();
        let a = runtime
            .allocate(1 << 20, MemoryPlacement::GpuLocal)
            .unwrap();
        let b = runtime
            .allocate(1 << 20, MemoryPlacement::HostVisible)
            .unwrap();
        let mut graph = runtime.graph();
        graph.fill(a.view(), 1).unwrap();
        graph.copy(b.view(), a.view()).unwrap();
        let graph = graph.prepare().unwrap();
        graph.submit().unwrap().wait().unwrap();
        // Left running, unobserved: only the in-flight list holds it.
        drop(graph.submit().unwrap());
        assert_eq!(open_device_count(), 1);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_device_count() != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(open_device_count(), 0, "the device leaked");
}
