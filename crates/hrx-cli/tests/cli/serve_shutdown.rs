//! Graceful shutdown of `hrx serve`: on SIGTERM (or ctrl-c) it stops
//! accepting, answers every accepted request, and exits 0; requests that
//! arrive on open connections while it drains get 503 (`/ready` too).

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

/// A server that keeps its one runtime thread (`--http-threads 1`)
/// polling between requests (`--busy-poll-us`, off by default on a CPU
/// device) runs that one thread, answers one request after another
/// correctly, and its poller does not keep it from shutting down while it
/// is still polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_polling_server_answers_and_exits_0() {
    let mut server = Server::start(&["--busy-poll-us", "200000", "--http-threads", "1"]);
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

/// Threads of process `pid` named as the server names its runtime's.
fn runtime_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "hrx-serve")
        .count()
}
