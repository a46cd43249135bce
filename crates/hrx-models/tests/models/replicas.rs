//! Replicas of all-MiniLM-L6-v2 behind one pool, on the default device
//! (lavapipe in CI): two runtime domains on one device make two replicas.
//! A replica whose device is lost leaves the pool and its requests are
//! retried on the healthy one, with the healthy one's results.
//!
//! The model folder is fetched by `cargo xtask models` into
//! `target/models/all-MiniLM-L6-v2` (`HRX_MINILM_DIR` names another).

use hrx_inference::ModelContext;
use hrx_models::embed::{EmbedderOptions, Replicas};
use hrx_runtime::{Fault, RuntimeOptions};
use hrx_test_support::{compare::max_difference, models::minilm_dir};
use std::time::Duration;

/// Small pools: batches of up to 4, one slot, prepared on first use.
fn options() -> EmbedderOptions {
    EmbedderOptions {
        max_batch: 4,
        slots: 1,
        ..EmbedderOptions::default()
    }
}

/// Replica 0 healthy, replica 1 able to take injected faults.
fn pool() -> Replicas {
    let contexts = [
        ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context"),
        ModelContext::new(RuntimeOptions::from_env().unwrap().with_fault_injection())
            .expect("context"),
    ];
    Replicas::load(&contexts, &minilm_dir(), &options()).expect("load")
}

fn ids(replicas: &Replicas, texts: &[&str]) -> Vec<Vec<u32>> {
    texts
        .iter()
        .map(|t| replicas.tokenize(t).expect("tokenize"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_replica_leaves_the_pool_and_its_requests_succeed_elsewhere() {
    let replicas = pool();
    assert_eq!((replicas.len(), replicas.healthy()), (2, 2));
    let texts = ["A man is playing a guitar.", "The weather is lovely today."];
    let expected = replicas
        .embedder(0)
        .embed_async(&texts)
        .await
        .expect("replica 0");

    // Idle and healthy, sequential requests alternate between replicas.
    for _ in 0..2 {
        replicas
            .try_embed(ids(&replicas, &texts))
            .await
            .expect("healthy pool");
    }
    let status = replicas.status();
    assert_eq!(
        (status[0].requests, status[1].requests),
        (1, 1),
        "{status:?}"
    );

    replicas
        .embedder(1)
        .encoder()
        .context()
        .runtime()
        .inject_fault(Fault::LoseDevice)
        .expect("inject");
    for round in 0..4 {
        let got = replicas
            .try_embed(ids(&replicas, &texts))
            .await
            .expect("retried on replica 0");
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!(g.tokens, e.tokens);
            let d = max_difference(&g.vector, &e.vector);
            assert!(d <= 1e-6, "round {round}: differs from replica 0 by {d}");
        }
    }
    let status = replicas.status();
    assert_eq!(replicas.healthy(), 1);
    assert!(status[0].healthy && !status[1].healthy, "{status:?}");
    assert_eq!(
        status[1].failures, 1,
        "one failure, then no more traffic: {status:?}"
    );
    assert_eq!(status[1].requests, 2, "{status:?}");
    assert!(
        status[1]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("device lost")),
        "{status:?}"
    );
    assert_eq!(status[0].requests, 5, "{status:?}");
    assert!(status.iter().all(|s| s.in_flight == 0), "{status:?}");
    assert!(status[0].memory.live_bytes > 0);

    // With no healthy replica left, requests fail (not Busy).
    replicas.mark_unhealthy(0, &hrx_core::Error::msg("taken out by the test"));
    let error = replicas
        .try_embed(ids(&replicas, &texts))
        .await
        .unwrap_err();
    assert!(!error.is_busy(), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_blames_no_replica_and_dropped_requests_free_their_load() {
    let replicas = pool();
    let vocab = replicas.config().vocab_size as u32;
    for bad in [
        vec![vec![101, vocab, 102]],
        vec![vec![]],
        vec![vec![101; replicas.config().max_seq_length + 1]],
    ] {
        assert!(replicas.try_embed(bad).await.is_err());
    }
    assert_eq!(replicas.healthy(), 2);

    // Requests dropped while queued or running leave no load behind.
    for _ in 0..8 {
        let request = replicas.try_embed(ids(&replicas, &["A dropped request."]));
        assert!(
            tokio::time::timeout(Duration::from_millis(2), request)
                .await
                .is_err()
        );
    }
    assert!(replicas.status().iter().all(|s| s.in_flight == 0));
    let done = replicas
        .try_embed(ids(&replicas, &["Still serving."]))
        .await
        .expect("serving");
    assert_eq!(done.len(), 1);
    assert_eq!(replicas.healthy(), 2);
}
