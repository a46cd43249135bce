//! Graceful shutdown of `hrx serve`: on SIGTERM (or ctrl-c) it stops
//! accepting, answers every accepted request, and exits 0; requests that
//! arrive on open connections while it drains get 503 (`/ready` too).
//! Also the server's threads: a busy-polling server's one runtime thread,
//! and large requests handled off it.

use crate::serve::{MODEL, Server, answer, assert_close, client, metric, short_sentences};
use serde_json::json;
use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};
use tokio::task::JoinSet;

/// A connection that has sent the first `head` bytes of a request.
fn started(server: &Server, head: &str) -> TcpStream {
    let mut socket =
        TcpStream::connect(server.base.trim_start_matches("http://")).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    socket.write_all(head.as_bytes()).expect("write");
    socket
}

/// Send the rest of the request and read the whole answer.
fn finish(mut socket: TcpStream, rest: &str) -> String {
    socket.write_all(rest.as_bytes()).expect("write");
    let mut answer = String::new();
    socket.read_to_string(&mut answer).expect("read");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_the_requests_in_flight_then_exits_0() {
    let mut server = Server::start(&["--slots", "1", "--max-batch", "2"]);
    let sentences = short_sentences(32);
    let requests_in_flight = 8;
    let mut requests = JoinSet::new();
    for i in 0..requests_in_flight {
        let pair = [
            sentences[i % sentences.len()],
            sentences[(i + 7) % sentences.len()],
        ];
        let request = client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": [pair[0].text, pair[1].text]}));
        requests.spawn(async move { (pair, answer(request).await) });
    }
    // Every request accepted (most queued behind the one slot), then TERM.
    server
        .metrics_until(Duration::from_secs(30), |m| {
            metric(m, "hrx_embedding_requests_in_flight", &[]) == requests_in_flight as f64
        })
        .await;
    // Two requests whose heads are still arriving when the drain starts.
    let ready = started(&server, "GET /ready HTTP/1.1\r\nHost: hrx\r\n");
    let body = json!({"model": MODEL, "input": "late"}).to_string();
    let late = started(
        &server,
        &format!(
            "POST /v1/embeddings HTTP/1.1\r\nHost: hrx\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = finish(ready, "\r\n");
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("\"draining\""),
        "{ready}"
    );
    let late = finish(late, &format!("\r\n{body}"));
    assert!(
        late.starts_with("HTTP/1.1 503") && late.contains("shutting_down"),
        "{late}"
    );
    let mut answered = 0;
    while let Some(done) = requests.join_next().await {
        let (pair, answer) = done.expect("request task");
        for (v, s) in answer.embeddings().iter().zip(pair) {
            assert_close(v, s);
        }
        answered += 1;
    }
    assert_eq!(answered, requests_in_flight);
    let status = server.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert!(
        server.stderr().contains("shutting down"),
        "{}",
        server.stderr()
    );
    // The listener is gone.
    assert!(client().get(server.url("/health")).send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_on_an_idle_server_exits_0() {
    let mut server = Server::start(&["--max-batch", "1", "--slots", "1"]);
    assert_eq!(answer(client().get(server.url("/ready"))).await.status, 200);
    server.signal("INT");
    let status = server.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
}

/// A server that polls between requests (`--busy-poll-us`, off by
/// default on a CPU device) runs one runtime thread unless told otherwise
/// (the poller and the connections share it), answers one request after
/// another correctly, and its poller does not keep it from shutting down
/// while it is still polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_polling_server_answers_and_exits_0() {
    let mut server = Server::start(&["--busy-poll-us", "200000"]);
    for sentence in short_sentences(32).into_iter().take(3) {
        let request = client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": sentence.text}));
        let answer = answer(request).await;
        assert_close(&answer.embeddings()[0], sentence);
    }
    // Counted once its worker has served connections, and waited for: a
    // thread takes its name when it first runs.
    let named = std::time::Instant::now() + Duration::from_secs(10);
    while runtime_threads(server.pid()) == 0 && std::time::Instant::now() < named {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(runtime_threads(server.pid()), 1, "{}", server.stderr());
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
}

/// A large request on a one-thread server (it busy-polls): a body over
/// 64 KiB (parsed on a blocking thread), texts over 16 KiB in all
/// (tokenized there) and 41 embeddings (encoded there, as JSON numbers)
/// come back whole and in order, the short sentences' equal to the
/// reference, with blocking threads started beside the runtime's one; a
/// small request is answered after it as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_thread_server_answers_a_large_request() {
    let server = Server::start(&["--busy-poll-us", "200000"]);
    let short = short_sentences(16);
    let picked: Vec<_> = short.iter().cycle().take(40).collect();
    let long = "lorem ipsum ".repeat(6_000);
    let mut texts: Vec<&str> = picked.iter().map(|s| s.text.as_str()).collect();
    texts.push(&long);
    let body = json!({"model": MODEL, "input": texts, "encoding_format": "float"});
    assert!(body.to_string().len() > 64 << 10);
    let request = client().post(server.url("/v1/embeddings")).json(&body);
    let vectors = answer(request).await.embeddings();
    assert_eq!(vectors.len(), 41, "{}", server.stderr());
    for (v, sentence) in vectors.iter().zip(&picked) {
        assert_close(v, sentence);
    }
    let norm: f32 = vectors[40].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "the long text's norm {norm}");
    // The work went to blocking threads, which the runtime names as it
    // names its one worker (a server that took it inline runs only that).
    assert!(
        runtime_threads(server.pid()) >= 2,
        "no blocking thread took the large request's work"
    );
    let request = client()
        .post(server.url("/v1/embeddings"))
        .json(&json!({"model": MODEL, "input": short[0].text}));
    assert_close(&answer(request).await.embeddings()[0], short[0]);
}

/// Threads of process `pid` named as the server names its runtime's.
fn runtime_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "hrx-serve")
        .count()
}
