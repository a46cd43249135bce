//! A soak of `hrx serve`: thousands of short requests from many clients,
//! a share of them cancelled at random by their clients. Every answer is
//! right (cosine >= 0.99999 against the float64 reference of its
//! sentence), no request fails, nothing is left in flight or queued at
//! the end, the server is still ready, and its resident memory stays flat
//! (at 100% of the requests within 20% of what it was at 25%).
//!
//! On lavapipe a sentence costs ~100-150 ms of CPU, batched or not, so
//! the default load (2,000 requests of 1-2 sentences from 32 clients)
//! cancels 75% of them, mostly while they wait (which costs no device
//! work), to stay under 2 minutes.
//! The load is overridable for longer runs on real devices:
//! `HRX_SOAK_REQUESTS`, `HRX_SOAK_CLIENTS`, `HRX_SOAK_CANCEL_PERCENT`.

use crate::serve::{
    MODEL, Sentence, Server, answer, assert_close, client, metric, short_sentences,
};
use serde_json::json;
use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (64-bit LCG), so runs repeat.
fn mix(i: usize) -> usize {
    let x = (i as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (x >> 33) as usize
}

/// One request of the soak: its sentences, and whether (and after how
/// long) its client gives up.
fn plan(
    i: usize,
    sentences: &[&'static Sentence],
    cancel_percent: usize,
) -> (Vec<&'static Sentence>, Option<Duration>) {
    let r = mix(i);
    let count = if r.is_multiple_of(5) { 2 } else { 1 };
    let picked = (0..count)
        .map(|k| sentences[(r / 5 + k * 7) % sentences.len()])
        .collect();
    let cancel = (r >> 8) % 100 < cancel_percent;
    (
        picked,
        cancel.then(|| Duration::from_millis(1 + (r >> 16) as u64 % 40)),
    )
}

#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    cancelled: AtomicUsize,
    done: AtomicUsize,
    errors: Mutex<Vec<String>>,
    rss_at_quarter: Mutex<Option<u64>>,
}

/// Send request `i`; count how it ended.
async fn one(
    i: usize,
    requests: usize,
    http: &reqwest::Client,
    server: &Server,
    tally: &Tally,
    cancel_percent: usize,
) {
    let (picked, patience) = plan(i, &short_sentences(12), cancel_percent);
    let texts: Vec<&str> = picked.iter().map(|s| s.text.as_str()).collect();
    let mut request = http
        .post(server.url("/v1/embeddings"))
        .json(&json!({"model": MODEL, "input": texts}));
    if let Some(patience) = patience {
        request = request.timeout(patience);
    }
    match request.send().await {
        Ok(response) if response.status() == 200 => {
            let body: serde_json::Value = response.json().await.expect("json");
            let data = body["data"].as_array().expect("data");
            assert_eq!(data.len(), picked.len());
            for (item, sentence) in data.iter().zip(&picked) {
                let v: Vec<f32> = item["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect();
                assert_close(&v, sentence);
            }
            tally.ok.fetch_add(1, Ordering::Relaxed);
        }
        Ok(response) => {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            tally
                .errors
                .lock()
                .unwrap()
                .push(format!("{status}: {text}"));
        }
        Err(e) if patience.is_some() && e.is_timeout() => {
            tally.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => tally.errors.lock().unwrap().push(e.to_string()),
    }
    if tally.done.fetch_add(1, Ordering::Relaxed) + 1 == requests / 4 {
        *tally.rss_at_quarter.lock().unwrap() = Some(server.rss_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_requests_right_answers_no_leaks_flat_memory() {
    let _alone = crate::serve::HEAVY.lock().await;
    let requests = setting("HRX_SOAK_REQUESTS", 2000);
    let clients = setting("HRX_SOAK_CLIENTS", 32);
    let cancel_percent = setting("HRX_SOAK_CANCEL_PERCENT", 75).min(100);
    let server = Arc::new(Server::start(&["--max-batch", "16", "--slots", "1"]));
    let next = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Tally::default());
    let http = client();
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (server, next, tally, http) = (
                Arc::clone(&server),
                Arc::clone(&next),
                Arc::clone(&tally),
                http.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        break;
                    }
                    one(i, requests, &http, &server, &tally, cancel_percent).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("client task");
    }
    let elapsed = start.elapsed();
    let rss_full = server.rss_bytes();
    let rss_quarter = tally.rss_at_quarter.lock().unwrap().expect("RSS at 25%");

    let metrics = server
        .metrics_until(Duration::from_secs(60), |m| {
            metric(m, "hrx_embedding_requests_in_flight", &[]) == 0.0
                && metric(m, "hrx_replica_in_flight_sentences", &[]) == 0.0
                && metric(m, "hrx_queue_depth", &[]) == 0.0
                // No slot left occupied: none leaked by a cancellation.
                && metric(m, "hrx_slots_busy", &[]) == 0.0
        })
        .await;
    let ok = tally.ok.load(Ordering::Relaxed);
    let cancelled = tally.cancelled.load(Ordering::Relaxed);
    let errors = tally.errors.lock().unwrap().clone();
    let batches = metric(&metrics, "hrx_batches_total", &[]);
    let submitted = metric(&metrics, "hrx_batched_sentences_total", &[]);
    let mib = |bytes: u64| bytes as f64 / (1u64 << 20) as f64;
    eprintln!(
        "soak: {requests} requests from {clients} clients in {elapsed:.1?}: {ok} answered, {cancelled} cancelled, \
         {} errors; {submitted} sentences in {batches} batches (mean {:.1}); RSS {:.0} MiB at 25%, {:.0} MiB at 100%",
        errors.len(),
        submitted / batches.max(1.0),
        mib(rss_quarter),
        mib(rss_full),
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(ok + cancelled, requests);
    assert!(ok >= requests / 10, "only {ok} answered");
    assert!(
        cancelled >= requests * cancel_percent / 200,
        "only {cancelled} cancelled"
    );
    assert!(
        rss_full as f64 <= rss_quarter as f64 * 1.2,
        "RSS grew from {rss_quarter} to {rss_full} bytes"
    );
    let answered = metric(
        &metrics,
        "hrx_http_requests_total",
        &[("route", "/v1/embeddings"), ("status", "200")],
    );
    assert!(answered as usize >= ok);
    assert_eq!(answer(client().get(server.url("/ready"))).await.status, 200);
}
