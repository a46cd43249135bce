// Its own test binary: it counts the process's open devices, which any other test would change.
//! A domain's device closes once nothing of the domain is left, even after
//! submissions nobody waited for: dropping the last runtime handle waits
//! for them and destroys the device on the dropping thread, before the drop
//! returns, never on the watcher thread (whose driver calls could race the
//! process's exit).

use hrx_runtime::{
    Buffer, BufferView, Completion, ExecutableGraph, MemoryPlacement, Runtime, open_device_count,
};
use hrx_test_support::gate::Gate;
use std::sync::{Mutex, MutexGuard};

/// The tests count the process's open devices: one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    // Calibrate the gate first: it opens (and closes) a device of its own.
    hrx_test_support::gate::calibrated_rounds();
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Watcher threads alive in this process (Linux names them in /proc),
/// once the count has settled at `expected` (within a second), else the
/// count then. /proc lags the threads on both ends: a new thread names
/// itself after it starts, and a joined one leaves the task list a moment
/// after its join returns. A watcher left running never settles at 0.
fn watcher_threads(expected: usize) -> usize {
    let count = || {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("hrx-watcher"))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let now = count();
        if now == expected || std::time::Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn devices_close_when_their_domain_is_gone() {
    let _serial = serial();
    assert_eq!(open_device_count(), 0);
    {
        let runtime = Runtime::from_env().unwrap();
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
    assert_eq!(open_device_count(), 0, "the device outlived its handles");
}

/// A domain with a chain of work queued behind a gate: the gate holds the
/// device until opened, and `rest` submissions follow it in order.
struct Busy {
    runtime: Runtime,
    buffers: Vec<Buffer>,
    graphs: Vec<ExecutableGraph>,
    /// Holds the domain like a graph. After the other handles, so that
    /// dropping a `Busy` opens the gate only as the domain's last handle
    /// goes, leaving the chain draining for that drop to wait for.
    gate: Gate,
    /// The chain's last completion; it does not keep the device open.
    last: Completion,
}

fn busy(rest: usize) -> Busy {
    let runtime = Runtime::from_env().unwrap();
    let a = runtime
        .allocate(1 << 16, MemoryPlacement::GpuLocal)
        .unwrap();
    let b = runtime
        .allocate(1 << 16, MemoryPlacement::HostVisible)
        .unwrap();
    let gate = Gate::new(&runtime);
    let mut work = runtime.graph();
    work.fill(a.view(), 7).unwrap();
    work.copy(b.view(), a.view()).unwrap();
    let work = work.prepare().unwrap();
    let mut last = gate.submit().unwrap();
    for _ in 0..rest {
        last = work.submit_after(&[last]).unwrap();
    }
    assert!(!last.is_complete(), "the gate finished at once");
    Busy {
        runtime,
        buffers: vec![a, b],
        graphs: vec![work],
        gate,
        last,
    }
}

#[test]
fn dropping_the_last_handle_waits_for_work_and_destroys_the_device() {
    let _serial = serial();
    assert_eq!(open_device_count(), 0);
    let Busy {
        runtime,
        buffers,
        graphs,
        gate,
        last,
    } = busy(3);
    assert_eq!(watcher_threads(1), 1);
    drop(runtime);
    drop(graphs);
    assert_eq!(open_device_count(), 1, "buffers still hold the domain");
    assert!(!last.is_complete(), "the gate finished before the drop");
    // Opened and dropped (its graph is a handle too), the gate leaves its
    // chain draining: the last handle's drop waits for it and destroys the
    // device.
    drop(gate);
    drop(buffers);
    assert_eq!(
        open_device_count(),
        0,
        "the device outlived its last handle"
    );
    assert_eq!(watcher_threads(0), 0, "the watcher thread was not joined");
    assert!(matches!(last.result(), Some(Ok(()))));
    assert!(last.wait().is_ok());
}

#[test]
fn a_view_kept_past_its_domain_closes_the_device_when_dropped() {
    let _serial = serial();
    assert_eq!(open_device_count(), 0);
    let busy = busy(2);
    let view: BufferView = busy.buffers[1].view();
    let last = busy.last.clone();
    drop(busy);
    // The domain is gone: its work finished and the watcher stopped, but
    // the view still holds the memory and so the device.
    assert!(matches!(last.result(), Some(Ok(()))));
    assert_eq!(watcher_threads(0), 0, "the watcher thread was not joined");
    assert_eq!(open_device_count(), 1);
    let words = view.map_read().unwrap();
    assert!(words.chunks_exact(4).all(|w| w == 7u32.to_le_bytes()));
    drop(words);
    drop(view);
    assert_eq!(open_device_count(), 0, "the device outlived its last view");
}

#[test]
fn dropping_domains_with_work_in_flight_never_leaves_a_device_open() {
    let _serial = serial();
    assert_eq!(open_device_count(), 0);
    for round in 0..20 {
        let Busy {
            runtime,
            buffers,
            graphs,
            gate,
            last,
        } = busy(1 + round % 4);
        // The chain drains while the handles go.
        gate.open();
        // Vary which handle goes last: each must wait for the work.
        match round % 3 {
            0 => {
                drop(buffers);
                drop((gate, graphs));
                drop(runtime);
            }
            1 => {
                drop(runtime);
                drop(buffers);
                drop((gate, graphs));
            }
            _ => {
                drop((gate, graphs));
                drop(runtime);
                drop(buffers);
            }
        }
        assert_eq!(open_device_count(), 0, "round {round}: device left open");
        assert_eq!(watcher_threads(0), 0, "round {round}: watcher left running");
        assert!(matches!(last.result(), Some(Ok(()))), "round {round}");
    }
}
