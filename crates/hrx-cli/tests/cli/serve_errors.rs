//! `hrx serve`'s error paths: every mistake gets its status and OpenAI's
//! error object (`{"error": {"message", "type", "param", "code"}}`), and
//! the server keeps serving afterwards.

use crate::serve::{Answer, MODEL, Server, answer, assert_close, client, metric, short_sentences};
use serde_json::json;
use std::time::{Duration, Instant};

const KEY: &str = "sk-errors";

/// `POST /v1/embeddings` of raw `body` with the key and `content_type`.
async fn post(server: &Server, body: impl Into<Vec<u8>>, content_type: Option<&str>) -> Answer {
    let mut request = client()
        .post(server.url("/v1/embeddings"))
        .bearer_auth(KEY)
        .body(body.into());
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    answer(request).await
}

const JSON: Option<&str> = Some("application/json");

/// What is sent (name, body, content type) and what must come back
/// (status, error type, words of the message).
type Case = (
    &'static str,
    Vec<u8>,
    Option<&'static str>,
    u16,
    &'static str,
    &'static str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mistake_gets_its_status_and_an_openai_error() {
    let server = Server::start(&[
        "--api-key",
        KEY,
        "--max-inputs",
        "4",
        "--max-body-bytes",
        "4096",
        "--max-batch",
        "4",
    ]);
    let sentence = short_sentences(12)[0];
    let input = |input: serde_json::Value| json!({"model": MODEL, "input": input}).to_string();
    let invalid = "invalid_request_error";
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            br#"{"model": "all-MiniLM"#.to_vec(),
            JSON,
            400,
            invalid,
            "not valid JSON",
        ),
        (
            "not an object",
            b"[1, 2]".to_vec(),
            JSON,
            400,
            invalid,
            "JSON object",
        ),
        (
            "no model",
            br#"{"input": "hi"}"#.to_vec(),
            JSON,
            400,
            invalid,
            "model",
        ),
        (
            "model of the wrong type",
            br#"{"model": 3, "input": "hi"}"#.to_vec(),
            JSON,
            400,
            invalid,
            "'model'",
        ),
        (
            "no input",
            json!({"model": MODEL}).to_string().into(),
            JSON,
            400,
            invalid,
            "required",
        ),
        (
            "input of the wrong type",
            input(json!(7)).into(),
            JSON,
            400,
            invalid,
            "must be a string",
        ),
        (
            "mixed input",
            input(json!(["a", 1])).into(),
            JSON,
            400,
            invalid,
            "must be a string",
        ),
        (
            "fractional token id",
            input(json!([101, 1.5, 102])).into(),
            JSON,
            400,
            invalid,
            "not a token id",
        ),
        (
            "negative token id",
            input(json!([101, -1, 102])).into(),
            JSON,
            400,
            invalid,
            "not a token id",
        ),
        (
            "empty string",
            input(json!("")).into(),
            JSON,
            400,
            invalid,
            "empty string",
        ),
        (
            "empty array",
            input(json!([])).into(),
            JSON,
            400,
            invalid,
            "empty array",
        ),
        (
            "empty token array",
            input(json!([[]])).into(),
            JSON,
            400,
            invalid,
            "is empty",
        ),
        (
            "too many inputs",
            input(json!(["a", "b", "c", "d", "e"])).into(),
            JSON,
            400,
            invalid,
            "at most 4",
        ),
        (
            "token outside the vocabulary",
            input(json!([101, 30522, 102])).into(),
            JSON,
            400,
            invalid,
            "outside the vocabulary",
        ),
        (
            "too long token array",
            input(json!(vec![101; 257])).into(),
            JSON,
            400,
            invalid,
            "at most 256",
        ),
        (
            "other dimensions",
            json!({"model": MODEL, "input": "hi", "dimensions": 64})
                .to_string()
                .into(),
            JSON,
            400,
            invalid,
            "384 dimensions",
        ),
        (
            "unknown encoding",
            json!({"model": MODEL, "input": "hi", "encoding_format": "int8"})
                .to_string()
                .into(),
            JSON,
            400,
            invalid,
            "encoding_format",
        ),
        (
            "invalid UTF-8",
            [
                &br#"{"model": "all-MiniLM-L6-v2", "input": "caf"#[..],
                b"\xe9\xff",
                b"\"}",
            ]
            .concat(),
            JSON,
            400,
            invalid,
            "not valid UTF-8",
        ),
        (
            "unknown model",
            br#"{"model": "gpt-4", "input": "hi"}"#.to_vec(),
            JSON,
            404,
            invalid,
            "gpt-4",
        ),
        (
            "body over the limit",
            input(json!(vec!["word ".repeat(300); 4])).into(),
            JSON,
            413,
            invalid,
            "larger than",
        ),
        (
            "text content type",
            input(json!("hi")).into(),
            Some("text/plain"),
            415,
            invalid,
            "application/json",
        ),
        (
            "no content type",
            input(json!("hi")).into(),
            None,
            415,
            invalid,
            "application/json",
        ),
    ];
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for (name, body, content_type, status, kind, says) in &cases {
        let answer = post(&server, body.clone(), *content_type).await;
        let message = answer.assert_error(*status, kind);
        assert!(
            message.contains(says),
            "{name}: {message:?} does not say {says:?}"
        );
        *statuses.entry(*status).or_default() += 1;
    }
    let unknown = post(&server, r#"{"model": "gpt-4", "input": "hi"}"#, JSON).await;
    assert_eq!(unknown.body["error"]["code"], "model_not_found");
    *statuses.entry(404).or_default() += 1;

    // The API key.
    let c = client();
    let body = input(json!("hi"));
    let missing = answer(
        c.post(server.url("/v1/embeddings"))
            .header("content-type", "application/json")
            .body(body.clone()),
    )
    .await;
    assert!(
        missing
            .assert_error(401, "invalid_request_error")
            .contains("API key")
    );
    let wrong = answer(
        c.post(server.url("/v1/embeddings"))
            .bearer_auth("sk-wrong")
            .header("content-type", "application/json")
            .body(body),
    )
    .await;
    wrong.assert_error(401, "invalid_request_error");
    assert_eq!(wrong.body["error"]["code"], "invalid_api_key");
    assert_eq!(answer(c.get(server.url("/v1/models"))).await.status, 401);
    for open in ["/health", "/ready"] {
        assert_eq!(answer(c.get(server.url(open))).await.status, 200, "{open}");
    }

    // Routes and methods.
    let route = answer(c.get(server.url("/v1/nothing"))).await;
    assert!(
        route
            .assert_error(404, "invalid_request_error")
            .contains("GET /v1/nothing")
    );
    let method = answer(c.get(server.url("/v1/embeddings")).bearer_auth(KEY)).await;
    method.assert_error(405, "invalid_request_error");
    let model = answer(c.get(server.url("/v1/models/gpt-4")).bearer_auth(KEY)).await;
    assert_eq!(model.body["error"]["code"], "model_not_found");

    // Still serving, and every answer counted by status.
    let ok = post(&server, input(json!([sentence.text])), JSON).await;
    assert_close(&ok.embeddings()[0], sentence);
    let metrics = server.metrics().await;
    for (status, count) in statuses {
        let counted = metric(
            &metrics,
            "hrx_http_requests_total",
            &[("route", "/v1/embeddings"), ("status", &status.to_string())],
        );
        assert_eq!(counted as usize, count, "status {status}\n{metrics}");
    }
    assert_eq!(
        metric(
            &metrics,
            "hrx_http_requests_total",
            &[("route", "/v1/embeddings"), ("status", "401")]
        ),
        2.0
    );
    assert_eq!(
        metric(&metrics, "hrx_embedding_requests_in_flight", &[]),
        0.0
    );
    assert_eq!(metric(&metrics, "hrx_replica_failures_total", &[]), 0.0);
}

/// A request over `--timeout-ms` gets 504; its place is freed and the
/// server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_times_out_with_504_and_the_server_keeps_serving() {
    // The timeout sits between the two requests' times on lavapipe with
    // room on both sides whatever the machine's load. With validation on,
    // one short sentence took 0.13 s on a quiet 2-core machine and 0.34 s
    // on a busy one. The slow request is 32 sentences of about 120 tokens:
    // 16 batches of two, one after another on one slot, 67 s on the quiet
    // machine. (Two such sentences alone took from under 3 s to 11.5 s,
    // too close to the timeout.) A timeout near the short one's time
    // would let timed-out requests queue faster than the device drains
    // them, and the server would never answer in time again.
    let _alone = crate::serve::HEAVY.lock().await;
    let server = Server::start(&["--timeout-ms", "3000", "--max-batch", "2", "--slots", "1"]);
    let c = client();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(13);
    let slow = answer(
        c.post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": vec![long; 32]})),
    )
    .await;
    assert_eq!(slow.body["error"]["code"], "timeout");
    slow.assert_error(504, "server_error");
    let sentence = short_sentences(12)[0];
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let quick = answer(
            c.post(server.url("/v1/embeddings"))
                .json(&json!({"model": MODEL, "input": sentence.text})),
        )
        .await;
        if quick.status == 200 {
            assert_close(&quick.embeddings()[0], sentence);
            break;
        }
        // Queued behind the timed-out batch, which the device finishes.
        assert_eq!(quick.status, 504, "{:?}", quick.body);
        assert!(
            Instant::now() < deadline,
            "never served again:\n{}",
            server.stderr()
        );
    }
    let metrics = server.metrics().await;
    assert_eq!(
        metric(&metrics, "hrx_embedding_requests_in_flight", &[]),
        0.0
    );
    assert!(metric(&metrics, "hrx_http_requests_total", &[("status", "504")]) >= 1.0);
}
