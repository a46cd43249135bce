//! Backpressure and cancellation in `hrx serve`: a full queue answers 429
//! with `Retry-After: 1`, and clients that go away mid-request free their
//! places (no request, sentence or queue entry left behind, per the
//! metrics), while the server keeps serving correct results.

use crate::serve::{MODEL, Server, answer, assert_close, client, metric, short_sentences};
use serde_json::json;
use std::{io::Write, net::TcpStream, time::Duration};
use tokio::task::JoinSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_with_retry_after() {
    let server = Server::start(&["--queue", "1", "--slots", "1", "--max-batch", "1"]);
    let sentences = short_sentences(14);
    let mut requests = JoinSet::new();
    for i in 0..24 {
        let sentence = sentences[i % sentences.len()];
        let request = client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": sentence.text}));
        requests.spawn(async move { (sentence, answer(request).await) });
    }
    let (mut served, mut refused) = (0, 0);
    while let Some(done) = requests.join_next().await {
        let (sentence, answer) = done.expect("request task");
        match answer.status {
            200 => {
                assert_close(&answer.embeddings()[0], sentence);
                served += 1;
            }
            _ => {
                let message = answer.assert_error(429, "requests");
                assert!(message.contains("queue is full"), "{message}");
                assert_eq!(answer.body["error"]["code"], "rate_limit_exceeded");
                assert_eq!(answer.retry_after.as_deref(), Some("1"));
                refused += 1;
            }
        }
    }
    eprintln!("24 concurrent requests into a queue of 1: {served} served, {refused} refused");
    assert!(
        served >= 1 && refused >= 1,
        "{served} served, {refused} refused"
    );

    // Serving again once the queue drains; nothing left in flight.
    let sentence = sentences[0];
    let again = answer(
        client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": sentence.text})),
    )
    .await;
    assert_close(&again.embeddings()[0], sentence);
    let metrics = server
        .metrics_until(Duration::from_secs(30), |m| {
            metric(m, "hrx_embedding_requests_in_flight", &[]) == 0.0
                && metric(m, "hrx_replica_in_flight_sentences", &[]) == 0.0
                && metric(m, "hrx_queue_depth", &[]) == 0.0
        })
        .await;
    let counted = metric(
        &metrics,
        "hrx_http_requests_total",
        &[("route", "/v1/embeddings"), ("status", "429")],
    );
    assert_eq!(counted as usize, refused);
    assert_eq!(answer(client().get(server.url("/ready"))).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_disconnect_free_their_places() {
    let server = Server::start(&["--slots", "1", "--max-batch", "2"]);
    let sentences = short_sentences(14);
    let rounds = 2;
    let per_round = 40;
    let mut cancelled = 0;
    for round in 0..rounds {
        let mut requests = JoinSet::new();
        for i in 0..per_round {
            let sentence = sentences[i % sentences.len()];
            // Give up after 5 to 400 ms: while queued, on the device, or
            // not at all.
            let patience = Duration::from_millis(5 + ((i * 37 + round * 11) % 40 * 10) as u64);
            let request = client()
                .post(server.url("/v1/embeddings"))
                .timeout(patience)
                .json(&json!({"model": MODEL, "input": [sentence.text, sentences[0].text]}));
            requests.spawn(async move { (sentence, request.send().await) });
        }
        while let Some(done) = requests.join_next().await {
            let (sentence, result) = done.expect("request task");
            match result {
                Ok(response) => {
                    assert_eq!(response.status(), 200);
                    let body: serde_json::Value = response.json().await.expect("json");
                    let v: Vec<f32> = body["data"][0]["embedding"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap() as f32)
                        .collect();
                    assert_close(&v, sentence);
                }
                Err(e) => {
                    assert!(e.is_timeout(), "{e}");
                    cancelled += 1;
                }
            }
        }
    }
    // Raw sockets that send a whole request and hang up at once.
    let address = server.base.trim_start_matches("http://").to_string();
    let body = json!({"model": MODEL, "input": [sentences[1].text]}).to_string();
    for _ in 0..20 {
        let mut socket = TcpStream::connect(&address).expect("connect");
        write!(
            socket,
            "POST /v1/embeddings HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("write");
        drop(socket);
    }
    let sent = rounds * per_round * 2 + 20;
    eprintln!(
        "{cancelled} of {} requests cancelled by their clients, 20 hung up at once",
        rounds * per_round
    );
    assert!(
        cancelled >= per_round,
        "too few cancellations ({cancelled}) to prove anything"
    );

    let metrics = server
        .metrics_until(Duration::from_secs(60), |m| {
            metric(m, "hrx_embedding_requests_in_flight", &[]) == 0.0
                && metric(m, "hrx_replica_in_flight_sentences", &[]) == 0.0
                && metric(m, "hrx_queue_depth", &[]) == 0.0
        })
        .await;
    let submitted = metric(&metrics, "hrx_batched_sentences_total", &[]) as usize;
    eprintln!("{submitted} of {sent} sentences reached the device");
    assert!(
        submitted < sent,
        "cancelled sentences still ran: {submitted} of {sent}"
    );

    // Every slot is free: a full batch runs at once.
    let sentence = sentences[2];
    let again = answer(
        client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": [sentence.text, sentence.text]})),
    )
    .await;
    for v in again.embeddings() {
        assert_close(&v, sentence);
    }
    assert_eq!(answer(client().get(server.url("/ready"))).await.status, 200);
}
