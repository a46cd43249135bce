//! Closed-loop load: `clients` threads, each issuing one request after the
//! other for a fixed time, recording the latency of every request that
//! starts after the warm-up.

use std::{
    sync::Barrier,
    time::{Duration, Instant},
};

/// How long to run, and how long of it is warm-up.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Seconds per request, every client together.
    pub latencies: Vec<f64>,
    /// Requests per second over the measured window.
    pub throughput: f64,
}

/// One client's loop on the current thread: requests back to back until
/// the window closes. Returns the measured latencies and the time from the
/// end of the warm-up to the last measured completion.
pub fn client(
    window: Window,
    mut request: impl FnMut(usize) -> Result<(), String>,
) -> Result<(Vec<f64>, Duration), String> {
    let begin = Instant::now();
    let measure_from = begin + window.warmup;
    let end = measure_from + window.measure;
    let mut latencies = Vec::new();
    let mut last_done = measure_from;
    for n in 0.. {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        request(n)?;
        let done = Instant::now();
        if t0 >= measure_from {
            latencies.push((done - t0).as_secs_f64());
            last_done = done;
        }
    }
    Ok((latencies, last_done - measure_from))
}

/// Combine rounds of one client run one after another: throughput is
/// every request over the sum of the rounds' spans.
pub fn combine_rounds(rounds: Vec<(Vec<f64>, Duration)>) -> Measured {
    let span = rounds.iter().map(|(_, span)| span.as_secs_f64()).sum();
    measured(rounds, span)
}

/// Combine the results of clients that ran at the same time: throughput
/// is every request over the longest client's span.
pub fn combine(per_client: Vec<(Vec<f64>, Duration)>) -> Measured {
    let span = per_client
        .iter()
        .map(|(_, span)| span.as_secs_f64())
        .fold(0.0, f64::max);
    measured(per_client, span)
}

fn measured(parts: Vec<(Vec<f64>, Duration)>, span: f64) -> Measured {
    let latencies: Vec<f64> = parts.into_iter().flat_map(|(l, _)| l).collect();
    let throughput = if span > 0.0 {
        latencies.len() as f64 / span
    } else {
        0.0
    };
    Measured {
        latencies,
        throughput,
    }
}

/// Run `clients` threads for `window`, released together. `make` builds
/// each client's request function once (its buffers); that function serves
/// request `n` of the client and checks only for errors (results are
/// validated separately).
pub fn run<F, R>(clients: usize, window: Window, make: F) -> Result<Measured, String>
where
    F: Fn(usize) -> R + Sync,
    R: FnMut(usize) -> Result<(), String>,
{
    let start = Barrier::new(clients);
    let per_client = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|index| {
                let (make, start) = (&make, &start);
                scope.spawn(move || {
                    let request = make(index);
                    start.wait();
                    client(window, request)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "a client thread panicked".to_string())?
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok(combine(per_client))
}
