//! all-MiniLM-L6-v2 end to end on the default device (lavapipe in CI),
//! against the float64 reference in `reference/minilm/` (made by
//! `make_reference.py`, independent of hrx): token ids identical, and per
//! sentence cosine >= 0.99999, max |difference| <= 1e-4, unit norm.
//!
//! The model folder is fetched by `cargo xtask models` into
//! `target/models/all-MiniLM-L6-v2` (`HRX_MINILM_DIR` names another).

use hrx_core::Error;
use hrx_inference::ModelContext;
use hrx_models::bert::{AttentionPath, BertEncoder, Precision};
use hrx_models::embed::{EmbedderOptions, Embedding, SentenceEmbedder};
use hrx_models::tokenizer::WordPieceTokenizer;
use hrx_runtime::RuntimeOptions;
use hrx_test_support::{
    compare::{cosine, max_difference},
    models::minilm_dir,
};
use serde::Deserialize;
use std::{
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

#[derive(Deserialize)]
struct Reference {
    sentences: Vec<Sentence>,
    pair: Pair,
}

#[derive(Deserialize)]
struct Sentence {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Pair {
    a: usize,
    b: usize,
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        serde_json::from_str(include_str!("../reference/minilm/reference.json"))
            .expect("reference.json")
    })
}

fn texts() -> Vec<&'static str> {
    reference()
        .sentences
        .iter()
        .map(|s| s.text.as_str())
        .collect()
}

/// The reference sentences of at most `tokens` tokens (lavapipe runs a
/// 256-token batch in seconds, so the repeated runs use short ones).
fn short_texts(tokens: usize) -> Vec<&'static str> {
    let sentences = &reference().sentences;
    sentences
        .iter()
        .filter(|s| s.ids.len() <= tokens)
        .map(|s| s.text.as_str())
        .collect()
}

fn load(options: &EmbedderOptions) -> SentenceEmbedder {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context");
    SentenceEmbedder::load(&context, &minilm_dir(), options).expect("load")
}

/// The embedder most tests share: f32, batches of 16.
fn shared() -> &'static SentenceEmbedder {
    static EMBEDDER: OnceLock<SentenceEmbedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        load(&EmbedderOptions {
            max_batch: 16,
            ..EmbedderOptions::default()
        })
    })
}

/// Every result against the reference, with `min_cosine` and `max_diff`.
fn check(results: &[Embedding], min_cosine: f64, max_diff: f32) {
    let reference = reference();
    assert_eq!(results.len(), reference.sentences.len());
    for (i, (got, want)) in results.iter().zip(&reference.sentences).enumerate() {
        assert_eq!(
            got.tokens, want.ids,
            "token ids of sentence {i} {:?}",
            want.text
        );
        let cos = cosine(&got.vector, &want.embedding);
        let diff = max_difference(&got.vector, &want.embedding);
        let norm = got
            .vector
            .iter()
            .map(|&x| f64::from(x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(
            cos >= min_cosine && diff <= max_diff && (norm - 1.0).abs() <= 1e-5,
            "sentence {i} ({} tokens) {:?}: cosine {cos}, max difference {diff}, norm {norm}",
            want.ids.len(),
            want.text
        );
    }
}

#[test]
fn embeddings_match_the_float64_reference() {
    let results = shared().embed(&texts()).expect("embed");
    check(&results, 0.99999, 1e-4);
    let pair = &reference().pair;
    let cos = cosine(&results[pair.a].vector, &results[pair.b].vector);
    assert!((cos - 0.7553).abs() <= 5e-4, "published pair: cosine {cos}");
}

/// The attention as separate operators (the path for heads the one-dispatch
/// kernel does not take) against the same reference and the fused path.
#[test]
fn attention_by_head_matches_the_reference_and_the_fused_kernel() {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context");
    let encoder = BertEncoder::load(&context, &minilm_dir(), Precision::F32)
        .expect("encoder")
        .with_attention(AttentionPath::ByHead);
    let tokenizer = WordPieceTokenizer::from_dir(&minilm_dir()).expect("tokenizer");
    let options = EmbedderOptions {
        max_batch: 16,
        ..EmbedderOptions::default()
    };
    let by_head = SentenceEmbedder::new(tokenizer, encoder, &options).expect("embedder");
    let results = by_head.embed(&texts()).expect("embed");
    check(&results, 0.99999, 1e-4);
    let fused = shared().embed(&texts()).expect("embed");
    for (i, (a, b)) in results.iter().zip(&fused).enumerate() {
        let diff = max_difference(&a.vector, &b.vector);
        assert!(diff <= 1e-5, "sentence {i}: the two paths differ by {diff}");
    }
}

/// A slot whose length is not a multiple of 4, against the float64
/// reference: there the one-pass biased softmax refuses the score rows, so
/// attention by head runs its unfused form (the bias add, the softmax),
/// and the one-dispatch kernel takes keys in groups of 4 with a partial
/// last group. Both paths, on the reference's sentences of at most 7
/// tokens in a slot of 7.
#[test]
fn slots_of_odd_length_take_both_attention_paths() {
    const SEQ: usize = 7;
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context");
    let wanted: Vec<_> = reference()
        .sentences
        .iter()
        .filter(|s| s.ids.len() <= SEQ)
        .collect();
    assert!(wanted.len() >= 3, "the reference has short sentences");
    let rows: Vec<&[u32]> = wanted.iter().map(|s| s.ids.as_slice()).collect();
    for path in [AttentionPath::ByHead, AttentionPath::Fused] {
        let encoder = BertEncoder::load(&context, &minilm_dir(), Precision::F32)
            .expect("encoder")
            .with_attention(path);
        let model = encoder.prepare(rows.len(), SEQ, 1).expect("prepare");
        let bytes = model
            .acquire_blocking()
            .expect("slot")
            .submit_host_with(|input, staging| encoder.write_input(&rows, SEQ, input, staging))
            .expect("submit")
            .download()
            .expect("download")
            .wait()
            .expect("embeddings")
            .remove(0);
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let hidden = encoder.config().hidden;
        for (i, (got, want)) in values.chunks_exact(hidden).zip(&wanted).enumerate() {
            let cos = cosine(got, &want.embedding);
            let diff = max_difference(got, &want.embedding);
            assert!(
                cos >= 0.99999 && diff <= 1e-4,
                "{path:?}, sentence {i} ({:?}): cosine {cos}, max difference {diff}",
                want.text
            );
        }
    }
}

#[test]
fn batch_size_does_not_change_results() {
    let one = load(&EmbedderOptions {
        max_batch: 1,
        slots: 1,
        ..EmbedderOptions::default()
    });
    let texts = short_texts(32);
    let single = one.embed(&texts).expect("batch 1");
    let batched = shared().embed(&texts).expect("batch 16");
    for (i, (a, b)) in single.iter().zip(&batched).enumerate() {
        assert_eq!(a.tokens, b.tokens);
        let diff = max_difference(&a.vector, &b.vector);
        assert!(
            diff <= 1e-5,
            "sentence {i}: batch 1 and 16 differ by {diff}"
        );
    }
}

#[test]
fn concurrent_clients_match_one_at_a_time() {
    let embedder = shared();
    let alone: Vec<Embedding> = short_texts(16)
        .iter()
        .map(|t| embedder.embed(&[t]).expect("alone").remove(0))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio");
    let alone = Arc::new(alone);
    runtime.block_on(async {
        let clients: Vec<_> = (0..4)
            .map(|client| {
                let embedder = embedder.clone();
                let alone = Arc::clone(&alone);
                tokio::spawn(async move {
                    // Each client asks in its own order, in requests of 1 to 3.
                    let mut order: Vec<usize> = (0..alone.len()).collect();
                    order.rotate_left(client * 5 % alone.len());
                    for chunk in order.chunks(1 + client % 3) {
                        let request: Vec<&str> =
                            chunk.iter().map(|&i| short_texts(16)[i]).collect();
                        let results = embedder.embed_async(&request).await.expect("embed");
                        for (&i, got) in chunk.iter().zip(&results) {
                            assert_eq!(got.tokens, alone[i].tokens);
                            let diff = max_difference(&got.vector, &alone[i].vector);
                            assert!(
                                diff <= 1e-5,
                                "client {client}, sentence {i}: differs by {diff}"
                            );
                        }
                    }
                })
            })
            .collect();
        for client in clients {
            client.await.expect("client");
        }
    });
    assert!(embedder.stats().batches > 0);
}

/// While a batch runs, sentences arriving one by one wait for a full
/// batch (or that batch's end) instead of going beside it: one sentence,
/// then 8 of the same bucket one every 5 ms while it runs, take two
/// batches (sent beside the running batch, the first of the 8 would go
/// alone). Asserted where the first batch outlasted the arrivals, as it
/// does on lavapipe by far.
#[test]
fn sentences_arriving_while_a_batch_runs_fill_the_next_batch() {
    let embedder = load(&EmbedderOptions {
        max_batch: 8,
        slots: 2,
        ..EmbedderOptions::default()
    });
    // About 100 tokens: the 128-token bucket.
    let long = "the quick brown fox jumps over the lazy dog ".repeat(11);
    let text: &'static str = Box::leak(long.into_boxed_str());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio");
    // Prepare the pools of one and of eight sentences first, so that the
    // first batch goes at once.
    embedder.embed(&[text; 8]).expect("warm-up of 8");
    embedder.embed(&[text]).expect("warm-up of 1");
    let before = embedder.stats();
    let (results, first_done, last_sent) = runtime.block_on(async {
        let first = {
            let embedder = embedder.clone();
            tokio::spawn(async move {
                let result = embedder.embed_async(&[text]).await;
                (result, Instant::now())
            })
        };
        let mut singles = Vec::new();
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let embedder = embedder.clone();
            singles.push(tokio::spawn(
                async move { embedder.embed_async(&[text]).await },
            ));
        }
        let last_sent = Instant::now();
        let (result, first_done) = first.await.expect("task");
        let mut results = result.expect("embed");
        for single in singles {
            results.extend(single.await.expect("task").expect("embed"));
        }
        (results, first_done, last_sent)
    });
    let after = embedder.stats();
    assert_eq!(after.sentences - before.sentences, 9);
    for got in &results[1..] {
        assert!(max_difference(&got.vector, &results[0].vector) <= 1e-5);
    }
    let batches = after.batches - before.batches;
    if first_done > last_sent {
        assert_eq!(batches, 2, "9 sentences took {batches} batches");
    } else {
        eprintln!("the first batch ended before the last arrival: {batches} batches, not checked");
    }
}

#[test]
fn f16_matches_the_reference_where_the_device_has_f16() {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context");
    let target = context.runtime().gpu().expect("device").target().clone();
    let options = EmbedderOptions {
        precision: Precision::F16,
        max_batch: 16,
        batch_window: Duration::from_millis(1),
        ..EmbedderOptions::default()
    };
    match SentenceEmbedder::load(&context, &minilm_dir(), &options) {
        Ok(embedder) => {
            let results = embedder.embed(&texts()).expect("embed f16");
            check(&results, 0.9999, 5e-3);
        }
        Err(Error::Unsupported(why)) => {
            assert!(!(target.shader_f16 && target.storage_16bit), "{why}");
        }
        Err(e) => panic!("f16 load: {e}"),
    }
}

#[test]
fn oversized_and_bad_inputs_are_errors() {
    let embedder = shared();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    runtime.block_on(async {
        let too_long = vec![101; 257];
        let e = embedder.embed_ids_async(vec![too_long]).await.unwrap_err();
        assert!(
            e.to_string().contains("257 tokens exceeds the model's 256"),
            "{e}"
        );
        let outside = vec![101, 40_000, 102];
        let e = embedder.embed_ids_async(vec![outside]).await.unwrap_err();
        assert!(
            e.to_string().contains("token id 40000 at position 1"),
            "{e}"
        );
        let e = embedder.embed_ids_async(vec![vec![]]).await.unwrap_err();
        assert!(e.to_string().contains("at least one token"), "{e}");
    });
    // The embedder keeps serving afterwards.
    assert_eq!(
        embedder.embed(&["still here"]).expect("embed")[0]
            .vector
            .len(),
        384
    );
}
