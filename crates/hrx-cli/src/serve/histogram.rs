//! A Prometheus histogram: fixed upper bounds, counts, sum.

use std::fmt::Write;

/// Request latencies, in seconds.
pub const LATENCY_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Sentences per slot submission.
pub const BATCH_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Observations counted per bucket (the last one past every bound).
#[derive(Clone, Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// Count `value` `times` times.
    pub fn observe_many(&mut self, value: f64, times: u64) {
        let bucket = self
            .bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(self.bounds.len());
        self.counts[bucket] += times;
        self.sum += value * times as f64;
    }

    pub fn observe(&mut self, value: f64) {
        self.observe_many(value, 1);
    }

    /// The `_bucket`, `_sum` and `_count` lines of `name` with `labels`
    /// (`key="value",...`, or empty).
    pub fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.counts[self.bounds.len()];
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_buckets() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        h.observe(0.5);
        h.observe_many(2.0, 2);
        h.observe(7.0);
        let mut out = String::new();
        h.write(&mut out, "x", "a=\"b\"");
        assert_eq!(
            out,
            "x_bucket{a=\"b\",le=\"1\"} 1\nx_bucket{a=\"b\",le=\"2\"} 3\nx_bucket{a=\"b\",le=\"+Inf\"} 4\n\
             x_sum{a=\"b\"} 11.5\nx_count{a=\"b\"} 4\n"
        );
        let mut out = String::new();
        Histogram::new(&[1.0]).write(&mut out, "y", "");
        assert!(
            out.starts_with("y_bucket{le=\"1\"} 0\n") && out.ends_with("y_count 0\n"),
            "{out}"
        );
    }
}
