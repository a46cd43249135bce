//! Timing shared by the ceiling probes.

use hrx_runtime::Graph;
use std::time::Instant;

/// Seconds of the fastest of five runs of `graph`, prepared once and run
/// once first (compiles, first-touch) untimed.
pub fn best_run_seconds(graph: Graph) -> hrx_core::Result<f64> {
    let prepared = graph.prepare()?;
    prepared.submit()?.wait()?;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        prepared.submit()?.wait()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(best)
}
