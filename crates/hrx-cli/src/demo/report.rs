//! Latency statistics and the printed report.

use super::{check, clients::Served};
use std::time::Duration;

/// p50, p99 and throughput of one path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median latency.
    pub p50: Duration,
    /// 99th-percentile latency.
    pub p99: Duration,
    /// Requests completed per second of wall time.
    pub per_second: f64,
}

impl Stats {
    /// Nearest-rank percentiles of the latencies; throughput over `wall`.
    pub fn of(served: &Served) -> Stats {
        let mut sorted = served.latencies.clone();
        sorted.sort_unstable();
        let rank = |p: f64| -> Duration {
            if sorted.is_empty() {
                return Duration::ZERO;
            }
            let r = (p * sorted.len() as f64).ceil() as usize;
            sorted[r.clamp(1, sorted.len()) - 1]
        };
        let seconds = served.wall.as_secs_f64();
        Stats {
            p50: rank(0.50),
            p99: rank(0.99),
            per_second: if seconds > 0.0 {
                served.latencies.len() as f64 / seconds
            } else {
                0.0
            },
        }
    }

    /// `p50 …, p99 …, … requests/s`
    pub fn line(&self) -> String {
        self.line_of("requests")
    }

    /// `p50 …, p99 …, … UNIT/s`
    pub fn line_of(&self, unit: &str) -> String {
        format!(
            "p50 {}, p99 {}, {:.1} {unit}/s",
            millis(self.p50),
            millis(self.p99),
            self.per_second
        )
    }
}

/// Both paths side by side, with how well they matched the reference. On a
/// CPU device a note explains why the ratio is modest there.
pub fn results(
    pool: &Served,
    clients: usize,
    slots: usize,
    naive: &Served,
    cpu_device: bool,
) -> String {
    let (p, n) = (Stats::of(pool), Stats::of(naive));
    let ratio = if n.per_second > 0.0 {
        p.per_second / n.per_second
    } else {
        f64::INFINITY
    };
    let outputs = pool.latencies.len() + naive.latencies.len();
    let max_error = pool.max_error.max(naive.max_error);
    let note = if cpu_device {
        "\nnote:    on a CPU device the arithmetic itself fills most of each request and \
         concurrent slots share the same cores, so the pool's gain (no allocation, recording \
         or preparation per request) is smaller than on a GPU"
    } else {
        ""
    };
    format!(
        "pool:    {} requests from {clients} tokio clients through {slots} slots: {}\n\
         naive:   {} requests one at a time (allocate, record, prepare, submit, read back): {}\n\
         ratio:   the pool serves {ratio:.1}x the naive path's requests/s\n\
         check:   all {outputs} outputs match the CPU reference (f64): max abs error {max_error:.2e} \
         (tolerance {} + {} x |reference|){note}",
        pool.latencies.len(),
        p.line(),
        naive.latencies.len(),
        n.line(),
        check::ATOL,
        check::RTOL,
    )
}

/// A duration in milliseconds with three significant-ish digits.
pub fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let served = Served {
            latencies: (1..=100).rev().map(Duration::from_millis).collect(),
            wall: Duration::from_secs(2),
            max_error: 0.0,
        };
        let s = Stats::of(&served);
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.per_second, 50.0);
        let one = Served {
            latencies: vec![Duration::from_millis(7)],
            wall: Duration::ZERO,
            max_error: 0.0,
        };
        assert_eq!(Stats::of(&one).p99, Duration::from_millis(7));
        assert_eq!(Stats::of(&one).per_second, 0.0);
        assert_eq!(millis(Duration::from_micros(1500)), "1.50 ms");
        assert_eq!(
            Stats::of(&served).line_of("sentences"),
            "p50 50.0 ms, p99 99.0 ms, 50.0 sentences/s"
        );
    }
}
