//! Sample statistics, defined as in hrx's runtime benchmark.

use std::time::Instant;

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [f64]) -> f64 {
    percentile(samples, 50.0)
}

/// The nearest-rank percentile `p` of `samples` (sorted in place).
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

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
