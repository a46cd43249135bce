//! The load generator: closed loop (a fixed number of clients, each
//! sending its next request when the last is answered) and open loop
//! (requests arriving at a fixed rate whatever the answers do), over any
//! asynchronous call.
//!
//! Both run a warm-up, then a measured window, then wait for what is still
//! in flight (so the next run starts on an idle server). A closed-loop
//! figure counts the requests answered inside the window, which stretches
//! (up to ten times) until every client has had two answers in it, so that
//! a slow device under many clients still gives figures; an open-loop
//! latency runs from a request's scheduled arrival, not from when it was
//! sent, so a stalled sender cannot hide queueing (coordinated omission).

use hrx_bench::report::percentile;
use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

/// One request: the index of its sentence; resolves when it is answered
/// and checked.
pub type Call =
    Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// How long to warm up and to measure.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Requests answered per second inside the window.
    pub throughput: f64,
    /// Latency percentiles of those requests, in milliseconds.
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    /// Requests answered inside the window.
    pub answered: usize,
}

impl Measured {
    /// One line for the progress log.
    pub fn line(&self) -> String {
        format!(
            "{:.1} req/s, p50 {:.3} ms, p99 {:.3} ms, p999 {:.3} ms ({} answered)",
            self.throughput, self.p50, self.p99, self.p999, self.answered
        )
    }
}

/// (start, end) of each answered request.
type Spans = Vec<(Instant, Instant)>;

fn summarise(spans: &[(Instant, Instant)], from: Instant, to: Instant) -> Measured {
    let mut latencies: Vec<f64> = spans
        .iter()
        .filter(|(_, end)| *end >= from && *end <= to)
        .map(|(start, end)| end.duration_since(*start).as_secs_f64() * 1e3)
        .collect();
    let seconds = to.duration_since(from).as_secs_f64();
    Measured {
        throughput: latencies.len() as f64 / seconds,
        p50: percentile(&mut latencies, 50.0),
        p99: percentile(&mut latencies, 99.0),
        p999: percentile(&mut latencies, 99.9),
        answered: latencies.len(),
    }
}

/// `clients` clients, each sending the next sentence (round robin over
/// the shared counter) as soon as its last request is answered.
pub async fn closed_loop(call: &Call, clients: usize, window: Window) -> Result<Measured, String> {
    let start = Instant::now();
    let from = start + window.warmup;
    let (soft_end, hard_end) = (from + window.measure, from + window.measure * 10);
    let wanted = 2 * clients;
    let next = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    // When the window closed: the first moment past its length with enough
    // answers in it, or its hard end.
    let end = Arc::new(OnceLock::<Instant>::new());
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (call, next) = (Arc::clone(call), Arc::clone(&next));
        let (answered, end) = (Arc::clone(&answered), Arc::clone(&end));
        tasks.push(tokio::spawn(async move {
            let mut spans = Spans::new();
            loop {
                let begin = Instant::now();
                let enough = answered.load(Ordering::Relaxed) >= wanted;
                if (begin >= soft_end && enough) || begin >= hard_end {
                    end.get_or_init(|| begin);
                }
                if end.get().is_some() {
                    return Ok::<_, String>(spans);
                }
                call(next.fetch_add(1, Ordering::Relaxed)).await?;
                let finished = Instant::now();
                if finished >= from && end.get().is_none() {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                spans.push((begin, finished));
            }
        }));
    }
    let mut spans = Spans::new();
    for task in tasks {
        spans.extend(task.await.map_err(|e| format!("a client failed: {e}"))??);
    }
    let end = end.get().copied().unwrap_or(hard_end);
    Ok(summarise(&spans, from, end))
}

/// Requests arriving every `1 / rate` seconds, each sent at its arrival
/// whatever is still in flight.
pub async fn open_loop(call: &Call, rate: f64, window: Window) -> Result<Measured, String> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("an open loop needs a positive rate, not {rate}"));
    }
    let start = Instant::now();
    let from = start + window.warmup;
    let to = from + window.measure;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut tasks = Vec::new();
    for index in 0.. {
        let arrival = start + interval.mul_f64(index as f64);
        if arrival >= to {
            break;
        }
        tokio::time::sleep_until(arrival.into()).await;
        let call = Arc::clone(call);
        tasks.push(tokio::spawn(async move {
            call(index).await.map(|()| (arrival, Instant::now()))
        }));
    }
    let mut spans = Spans::new();
    for task in tasks {
        spans.push(task.await.map_err(|e| format!("a request failed: {e}"))??);
    }
    Ok(summarise(&spans, from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that takes `ms` milliseconds and serves `lanes` at a time.
    fn server(ms: u64, lanes: usize) -> Call {
        let lanes = Arc::new(tokio::sync::Semaphore::new(lanes));
        Arc::new(move |_| {
            let lanes = Arc::clone(&lanes);
            Box::pin(async move {
                let _lane = lanes.acquire().await.map_err(|e| e.to_string())?;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(())
            })
        })
    }

    fn window() -> Window {
        Window {
            warmup: Duration::from_millis(100),
            measure: Duration::from_millis(600),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closed_loop_saturates_at_the_servers_rate() {
        // 4 lanes of 10 ms: 400 requests/s at most, whatever the clients.
        let one = closed_loop(&server(10, 4), 1, window()).await.unwrap();
        let many = closed_loop(&server(10, 4), 16, window()).await.unwrap();
        assert!((60.0..=105.0).contains(&one.throughput), "{one:?}");
        assert!((300.0..=420.0).contains(&many.throughput), "{many:?}");
        // 16 clients on 4 lanes: each waits for 3 others, about 40 ms.
        assert!(many.p50 >= 30.0 && one.p50 < 20.0, "{one:?} {many:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_server_stretches_the_window_until_every_client_answered_twice() {
        // 8 clients on 4 lanes of 300 ms: about 13 answers a second, none
        // inside a 200 ms window; it stretches until 16 are in.
        let window = Window {
            warmup: Duration::ZERO,
            measure: Duration::from_millis(200),
        };
        let slow = closed_loop(&server(300, 4), 8, window).await.unwrap();
        assert!(slow.answered >= 16, "{slow:?}");
        assert!((9.0..=14.0).contains(&slow.throughput), "{slow:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_loop_counts_queueing_from_the_arrival() {
        // 50 requests/s on 1 lane of 10 ms: no queue, latency about 10 ms.
        let light = open_loop(&server(10, 1), 50.0, window()).await.unwrap();
        assert!((40.0..=60.0).contains(&light.throughput), "{light:?}");
        assert!(light.p50 < 25.0, "{light:?}");
        // 200 requests/s on one lane of 10 ms: twice its rate, so the queue
        // and the latency grow through the window.
        let heavy = open_loop(&server(10, 1), 200.0, window()).await.unwrap();
        assert!(heavy.p99 > 100.0, "{heavy:?}");
        assert!(open_loop(&server(1, 1), 0.0, window()).await.is_err());
    }

    #[tokio::test]
    async fn a_failed_request_fails_the_run() {
        let failing: Call = Arc::new(|i| {
            Box::pin(async move {
                if i == 3 {
                    Err("bad answer".into())
                } else {
                    Ok(())
                }
            })
        });
        let error = closed_loop(&failing, 2, window()).await.unwrap_err();
        assert!(error.contains("bad answer"), "{error}");
    }
}
