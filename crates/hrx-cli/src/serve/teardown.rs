//! Leaving cleanly. Each embedder releases its pools (graphs, buffers,
//! kernels) on its own batching thread once its last handle is dropped,
//! and nothing joins that thread; if the process exited meanwhile, the
//! driver (or the Vulkan validation layer) would be torn down under it.
//! So the server waits for those threads to end before it returns.

use std::time::{Duration, Instant};

/// The embedders' batching threads as Linux names them (`hrx-embed-batcher`
/// cut to 15 bytes).
const BATCHER: &str = "hrx-embed-batch";

/// Wait (at most `limit`) until no batching thread is left.
pub fn wait_for_batchers(limit: Duration) {
    let deadline = Instant::now() + limit;
    while batchers() > 0 {
        if Instant::now() >= deadline {
            eprintln!(
                "hrx serve: the batching threads are still releasing device memory; exiting anyway"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How many batching threads this process has (0 where /proc is absent).
fn batchers() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == BATCHER)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_the_batching_threads_end() {
        let thread = std::thread::Builder::new()
            .name("hrx-embed-batcher".into())
            .spawn(|| std::thread::sleep(Duration::from_millis(100)))
            .unwrap();
        assert_eq!(batchers(), 1);
        let start = Instant::now();
        wait_for_batchers(Duration::from_secs(10));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(batchers(), 0);
        thread.join().unwrap();
    }
}
