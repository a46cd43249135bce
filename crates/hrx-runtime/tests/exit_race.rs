// Its own test binary: it re-runs itself as child processes that exit with work in flight.
//! A process may end right after its last runtime handle is dropped, while
//! the device still has work: the device must be destroyed before that drop
//! returns, or process exit tears the driver down under its destruction.
//!
//! The parent test re-runs this binary as child processes that each drop a
//! runtime with work in flight and exit at once; every child must exit
//! cleanly.

use hrx_runtime::{MemoryPlacement, Runtime};
use std::process::Command;

const CHILD: &str = "HRX_EXIT_RACE_CHILD";

/// Queue `fills` device fills of `bytes` each, drop everything, return.
fn drop_while_in_flight(bytes: usize, fills: usize) {
    let runtime = Runtime::from_env().unwrap();
    let buffer = runtime.allocate(bytes, MemoryPlacement::GpuLocal).unwrap();
    let mut graph = runtime.graph();
    for value in 0..fills {
        graph.fill(buffer.view(), value as u32).unwrap();
    }
    let graph = graph.prepare().unwrap();
    drop(graph.submit().unwrap());
}

#[test]
fn exit_right_after_dropping_in_flight_work() {
    if let Ok(spec) = std::env::var(CHILD) {
        let (bytes, fills) = spec.split_once(',').unwrap();
        drop_while_in_flight(bytes.parse().unwrap(), fills.parse().unwrap());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut failures = Vec::new();
    // Work of several lengths, so that some children finish it about when
    // the process ends (the window where a late destruction crashed).
    for run in 0..24usize {
        let bytes = (1 + run % 8) << 20;
        let fills = 1 + run % 3;
        let child = Command::new(&exe)
            .args([
                "--exact",
                "exit_right_after_dropping_in_flight_work",
                "--quiet",
            ])
            .env(CHILD, format!("{bytes},{fills}"))
            .output()
            .unwrap();
        if !child.status.success() {
            let stderr = String::from_utf8_lossy(&child.stderr).into_owned();
            failures.push((bytes, fills, child.status, stderr));
        }
    }
    assert!(failures.is_empty(), "children crashed: {failures:?}");
}
