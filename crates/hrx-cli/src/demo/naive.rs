//! The naive path: every request allocates, records, prepares, submits and
//! reads back on its own, one at a time, as code without a pool would.

use super::{check, clients::Served, requests::Request};
use hrx::{Error, Result, models::toy::Transformer};
use indicatif::ProgressBar;
use std::time::{Duration, Instant};

/// Run `requests` through [`Transformer::run_naive`] after one untimed
/// warm-up call, checking each output.
pub fn run(
    transformer: &Transformer,
    requests: &[Request],
    progress: &ProgressBar,
) -> Result<Served> {
    let config = transformer.config();
    let call = |index: usize, request: &Request| -> Result<(Duration, f32)> {
        let begin = Instant::now();
        let actual = transformer
            .run_naive(&request.tokens)
            .map_err(|e| Error::msg(format!("naive request {index}: {e}")))?;
        let latency = begin.elapsed();
        let error = check::check(&config, index, &actual, &request.expected)
            .map_err(|e| Error::msg(format!("naive path: {e}")))?;
        Ok((latency, error))
    };
    call(0, &requests[0])?;
    let mut latencies = Vec::with_capacity(requests.len());
    let mut max_error = 0.0f32;
    let start = Instant::now();
    for (index, request) in requests.iter().enumerate() {
        let (latency, error) = call(index, request)?;
        latencies.push(latency);
        max_error = max_error.max(error);
        progress.inc(1);
    }
    Ok(Served {
        latencies,
        wall: start.elapsed(),
        max_error,
    })
}
