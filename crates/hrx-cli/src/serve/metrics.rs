//! What the server counts: requests by route and status, their latency,
//! embedding requests in flight, inputs and tokens served, and each
//! replica's batch sizes. [`exposition`](super::exposition) writes them
//! out with the replicas' own counters.

use super::histogram::{BATCH_BOUNDS, Histogram, LATENCY_BOUNDS};
use super::state::Shared;
use axum::{
    extract::{MatchedPath, Request, State},
    middleware::Next,
    response::Response,
};
use std::{
    collections::BTreeMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

/// The server's own counters.
#[derive(Debug)]
pub struct Metrics {
    http: Mutex<Http>,
    in_flight: AtomicUsize,
    inputs: AtomicU64,
    tokens: AtomicU64,
    batch_sizes: Mutex<Vec<Histogram>>,
}

#[derive(Debug, Default)]
pub struct Http {
    /// Answers by (route, status code).
    pub requests: BTreeMap<(String, u16), u64>,
    /// Latency by route.
    pub latency: BTreeMap<String, Histogram>,
}

/// A snapshot of the scalar counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub in_flight: usize,
    pub inputs: u64,
    pub tokens: u64,
}

impl Metrics {
    /// Counters for a pool of `replicas`.
    pub fn new(replicas: usize) -> Self {
        Metrics {
            http: Mutex::new(Http::default()),
            in_flight: AtomicUsize::new(0),
            inputs: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            batch_sizes: Mutex::new(vec![Histogram::new(BATCH_BOUNDS); replicas]),
        }
    }

    /// One answer on `route` with `status` after `seconds`.
    pub fn record_request(&self, route: &str, status: u16, seconds: f64) {
        let mut http = self.http.lock().unwrap_or_else(|e| e.into_inner());
        *http
            .requests
            .entry((route.to_string(), status))
            .or_default() += 1;
        http.latency
            .entry(route.to_string())
            .or_insert_with(|| Histogram::new(LATENCY_BOUNDS))
            .observe(seconds);
    }

    /// An embedding request that succeeded with `inputs` inputs of
    /// `tokens` tokens in all.
    pub fn record_embeddings(&self, inputs: usize, tokens: usize) {
        self.inputs.fetch_add(inputs as u64, Ordering::Relaxed);
        self.tokens.fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// Count an embedding request in flight until the guard drops (when
    /// the request is answered, times out or its client goes away).
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    /// `batches` slot submissions of `sentences` sentences in all on
    /// `replica`, spread as evenly as the counts allow.
    pub fn record_batches(&self, replica: usize, sentences: usize, batches: usize) {
        if batches == 0 {
            return;
        }
        let (mean, extra) = (sentences / batches, sentences % batches);
        let mut sizes = self.batch_sizes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = sizes.get_mut(replica) {
            h.observe_many(mean as f64, (batches - extra) as u64);
            if extra > 0 {
                h.observe_many((mean + 1) as f64, extra as u64);
            }
        }
    }

    pub fn counters(&self) -> Counters {
        Counters {
            in_flight: self.in_flight.load(Ordering::Relaxed),
            inputs: self.inputs.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
        }
    }

    /// Run `f` on the HTTP counters.
    pub fn with_http<T>(&self, f: impl FnOnce(&Http) -> T) -> T {
        f(&self.http.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Each replica's batch-size histogram.
    pub fn batch_sizes(&self) -> Vec<Histogram> {
        self.batch_sizes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// See [`Metrics::in_flight`].
pub struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Middleware: count every answer by route (the matched route's pattern,
/// or `unmatched`) and status, with its latency.
pub async fn record(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let start = Instant::now();
    state.activity.touch();
    let response = next.run(request).await;
    state.activity.touch();
    state.metrics.record_request(
        &route,
        response.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_spread_evenly_and_guards_release() {
        let m = Metrics::new(1);
        m.record_batches(0, 7, 2);
        m.record_batches(0, 1, 1);
        m.record_batches(3, 1, 1);
        let mut out = String::new();
        m.batch_sizes()[0].write(&mut out, "b", "");
        assert!(
            out.contains("b_bucket{le=\"4\"} 3\n") && out.contains("b_sum 8\n"),
            "{out}"
        );
        {
            let _a = m.in_flight();
            let _b = m.in_flight();
            assert_eq!(m.counters().in_flight, 2);
        }
        assert_eq!(m.counters().in_flight, 0);
    }
}
