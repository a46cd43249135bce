//! Several replicas behind one `hrx serve`: `--device 0 --device 0` makes
//! two runtime domains on lavapipe's one device. Requests spread over
//! healthy replicas; a replica whose device is lost (the hidden
//! `--test-lose-device` flag) leaves the pool, its request is retried on
//! the other, and the server stays ready; with no healthy replica left,
//! `/ready` and embeddings answer 503.

use crate::serve::{MODEL, Server, answer, assert_close, client, metric, short_sentences};
use serde_json::json;
use tokio::task::JoinSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_device_share_the_load() {
    let server = Server::start(&[
        "--device",
        "0",
        "--device",
        "0",
        "--max-batch",
        "4",
        "--slots",
        "1",
    ]);
    let sentences = short_sentences(14);
    let mut requests = JoinSet::new();
    for i in 0..12 {
        let sentence = sentences[i % sentences.len()];
        let request = client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": [sentence.text]}));
        requests.spawn(async move { (sentence, answer(request).await) });
    }
    while let Some(done) = requests.join_next().await {
        let (sentence, answer) = done.expect("request task");
        assert_close(&answer.embeddings()[0], sentence);
    }
    let metrics = server.metrics().await;
    for replica in ["0", "1"] {
        let requests = metric(
            &metrics,
            "hrx_replica_requests_total",
            &[("replica", replica)],
        );
        let sentences = metric(
            &metrics,
            "hrx_replica_sentences_total",
            &[("replica", replica)],
        );
        assert!(
            requests >= 1.0 && sentences >= 1.0,
            "replica {replica} idle:\n{metrics}"
        );
        assert_eq!(
            metric(&metrics, "hrx_replica_healthy", &[("replica", replica)]),
            1.0
        );
        assert!(metric(&metrics, "hrx_device_memory_bytes", &[("replica", replica)]) > 0.0);
    }
    assert_eq!(metric(&metrics, "hrx_replica_sentences_total", &[]), 12.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_replica_fails_over_and_the_server_stays_ready() {
    let server = Server::start(&[
        "--device",
        "0",
        "--device",
        "0",
        "--test-lose-device",
        "1",
        "--max-batch",
        "4",
        "--slots",
        "1",
    ]);
    let sentences = short_sentences(14);
    for i in 0..6 {
        let pair = [sentences[i], sentences[i + 1]];
        let answer = answer(
            client()
                .post(server.url("/v1/embeddings"))
                .json(&json!({"model": MODEL, "input": [pair[0].text, pair[1].text]})),
        )
        .await;
        for (v, s) in answer.embeddings().iter().zip(pair) {
            assert_close(v, s);
        }
    }
    let metrics = server.metrics().await;
    let replica = |name: &str, index: &str| metric(&metrics, name, &[("replica", index)]);
    assert_eq!(replica("hrx_replica_healthy", "1"), 0.0, "{metrics}");
    assert_eq!(replica("hrx_replica_failures_total", "1"), 1.0, "{metrics}");
    assert_eq!(replica("hrx_replica_healthy", "0"), 1.0);
    assert_eq!(replica("hrx_replica_sentences_total", "0"), 12.0);
    assert_eq!(metric(&metrics, "hrx_replicas_healthy", &[]), 1.0);
    assert_eq!(
        metric(
            &metrics,
            "hrx_http_requests_total",
            &[("status", "200"), ("route", "/v1/embeddings")]
        ),
        6.0
    );
    let ready = answer(client().get(server.url("/ready"))).await;
    assert_eq!(
        (ready.status, ready.body["healthy"].as_u64()),
        (200, Some(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_healthy_device_ready_and_embeddings_answer_503() {
    let server = Server::start(&[
        "--test-lose-device",
        "0",
        "--max-batch",
        "1",
        "--slots",
        "1",
    ]);
    let sentence = short_sentences(14)[0];
    let request = || {
        client()
            .post(server.url("/v1/embeddings"))
            .json(&json!({"model": MODEL, "input": sentence.text}))
    };
    let failed = answer(request()).await;
    assert!(
        failed
            .assert_error(500, "server_error")
            .contains("device lost"),
        "{:?}",
        failed.body
    );
    let ready = answer(client().get(server.url("/ready"))).await;
    assert_eq!(
        (ready.status, ready.body["status"].as_str()),
        (503, Some("unhealthy"))
    );
    let refused = answer(request()).await;
    refused.assert_error(503, "server_error");
    assert_eq!(refused.body["error"]["code"], "unavailable");
    assert_eq!(
        answer(client().get(server.url("/health"))).await.status,
        200
    );
}
