//! Busy polling while requests come often (`--busy-poll-us`).
//!
//! A lone request pays for every thread it wakes: the server's worker
//! sleeping in `epoll_wait` when the request arrives, and again while its
//! batch runs on the device. On a virtual machine each such wake-up costs
//! tens of microseconds, a large part of a sub-millisecond request. For a
//! window after each request begins or ends, one task keeps a worker of the
//! server's runtime awake instead: every time it yields, the runtime polls
//! the sockets without blocking and runs what became ready on this worker.
//! After the window passes without a request, the task sleeps until the
//! next one, so an idle server costs nothing; a busy one spends at most one
//! core on polling.
//!
//! The library's own calls (`embed_async`) do not poll; a server on a CPU
//! device polls only when asked, since the device's kernels need those
//! cores.

use hrx::execution::DeviceKind;
use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};
use tokio::sync::Notify;

/// What a server on a GPU polls for after each request, by default.
pub const GPU_WINDOW: Duration = Duration::from_millis(2);

/// The window to poll for: the one asked for, else [`GPU_WINDOW`] where
/// every device is a GPU and none otherwise.
pub fn window(asked: Option<u64>, kinds: &[DeviceKind]) -> Duration {
    match asked {
        Some(us) => Duration::from_micros(us),
        None if !kinds.is_empty() && kinds.iter().all(|&k| k != DeviceKind::Cpu) => GPU_WINDOW,
        None => Duration::ZERO,
    }
}

/// The server runtime's threads: the number asked for; else one where the
/// server busy-polls (the poller and the connections then share a thread,
/// so a lone request wakes no other: one client over HTTP lost 8.8-9.8%
/// of the library's throughput on one thread against 12.0-12.2% on one a
/// core, on an H100); else `None`, one a CPU core. Work that takes long
/// (large bodies, texts and answers) goes to blocking threads either way.
pub fn runtime_threads(asked: Option<usize>, window: Duration) -> Option<usize> {
    match asked {
        Some(threads) => Some(threads),
        None if !window.is_zero() => Some(1),
        None => None,
    }
}

/// When a request last began or ended, and a wake-up for the poller.
#[derive(Debug)]
pub struct Activity {
    window: Duration,
    origin: Instant,
    /// One more than the microseconds from `origin` to the last request's
    /// start or end; 0 before the first.
    last_us: AtomicU64,
    woken: Notify,
}

impl Activity {
    /// Activity polled for `window` after each touch (none when zero).
    pub fn new(window: Duration) -> Self {
        Activity {
            window,
            origin: Instant::now(),
            last_us: AtomicU64::new(0),
            woken: Notify::new(),
        }
    }

    /// A request began or ended: poll for the window from now.
    pub fn touch(&self) {
        if self.window.is_zero() {
            return;
        }
        let now = self.origin.elapsed().as_micros() as u64 + 1;
        self.last_us.fetch_max(now, Ordering::Relaxed);
        self.woken.notify_one();
    }

    /// Whether the window since the last touch is still open.
    fn recent(&self) -> bool {
        let last = self.last_us.load(Ordering::Relaxed);
        let now = self.origin.elapsed().as_micros() as u64 + 1;
        last > 0 && Duration::from_micros(now.saturating_sub(last)) < self.window
    }

    /// Poll while requests are recent, sleep otherwise; runs until the
    /// task is dropped. Returns at once where the window is zero.
    pub async fn keep_awake(&self) {
        if self.window.is_zero() {
            return;
        }
        loop {
            // Created before the check, so a touch between the two wakes it.
            let woken = self.woken.notified();
            if !self.recent() {
                woken.await;
                continue;
            }
            while self.recent() {
                tokio::task::yield_now().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn gpus_poll_by_default_cpus_when_asked() {
        let (gpu, cpu) = (DeviceKind::Discrete, DeviceKind::Cpu);
        assert_eq!(window(None, &[gpu, gpu]), GPU_WINDOW);
        assert_eq!(window(None, &[gpu, cpu]), Duration::ZERO);
        assert_eq!(window(None, &[]), Duration::ZERO);
        assert_eq!(window(Some(0), &[gpu]), Duration::ZERO);
        assert_eq!(window(Some(300), &[cpu]), Duration::from_micros(300));
    }

    #[test]
    fn a_polling_server_runs_one_thread_unless_asked() {
        let window = Duration::from_micros(2000);
        assert_eq!(runtime_threads(None, window), Some(1));
        assert_eq!(runtime_threads(None, Duration::ZERO), None);
        assert_eq!(runtime_threads(Some(4), window), Some(4));
        assert_eq!(runtime_threads(Some(2), Duration::ZERO), Some(2));
    }

    /// The poller spins for the window after a touch, then sleeps until
    /// the next one: its polls stop growing once the window has passed.
    #[test]
    fn polls_for_the_window_then_sleeps() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let activity = Arc::new(Activity::new(Duration::from_millis(20)));
            let polls = Arc::new(AtomicU64::new(0));
            let counted = {
                let (activity, polls) = (Arc::clone(&activity), Arc::clone(&polls));
                tokio::spawn(async move {
                    let spin = activity.keep_awake();
                    tokio::pin!(spin);
                    std::future::poll_fn(|cx| {
                        polls.fetch_add(1, Ordering::Relaxed);
                        spin.as_mut().poll(cx)
                    })
                    .await
                })
            };
            tokio::time::sleep(Duration::from_millis(5)).await;
            let idle = polls.load(Ordering::Relaxed);
            assert!(idle <= 2, "polled {idle} times before any request");
            activity.touch();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let spinning = polls.load(Ordering::Relaxed);
            assert!(spinning > idle + 10, "{spinning} polls inside the window");
            tokio::time::sleep(Duration::from_millis(40)).await;
            let after = polls.load(Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(polls.load(Ordering::Relaxed), after, "still polling");
            counted.abort();
        });
    }
}
