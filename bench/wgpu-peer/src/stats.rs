//! Sample statistics, defined as in hrx's runtime benchmark.

pub use crate::common::{median, percentile};
use std::time::Instant;

/// Seconds per call of `op`, `count` timed calls after `count / 10` (at
/// least 2) untimed ones.
pub fn sample(
    count: usize,
    mut op: impl FnMut() -> Result<(), String>,
) -> Result<Vec<f64>, String> {
    for _ in 0..(count / 10).max(2) {
        op()?;
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        op()?;
        out.push(start.elapsed().as_secs_f64());
    }
    Ok(out)
}
