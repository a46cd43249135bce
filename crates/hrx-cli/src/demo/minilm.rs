//! `hrx demo --model DIR`: a sentence encoder served through its pools of
//! slots by concurrent tokio clients, every embedding checked.
//!
//! The run: load the [`SentenceEmbedder`], compile the kernels of every
//! shape the run can use, send N sentences from M clients through
//! `embed_async` (the embedder batches what is in flight), then a small
//! sample one at a time through the naive path (`embed_naive`, a pool
//! prepared per sentence). Every embedding, of both paths, is checked:
//! against the reference file when one is given (token ids identical,
//! cosine and largest difference within tolerance), else against the naive
//! path's embedding of the same sentence; and the published pair's cosine.
//! Any mismatch prints the sentence and the numbers and exits 1.

mod clients;
mod corpus;
mod verify;

use super::{DemoArgs, device_options, progress, report};
use corpus::{Corpus, Expected, PAIR_TOLERANCE, PUBLISHED_MODEL};
use hrx::{
    Error, Result,
    execution::DeviceKind,
    inference::ModelContext,
    models::{
        bert::{BertConfig, Pooling},
        embed::{EmbedderOptions, Embedding, SentenceEmbedder, buckets},
    },
};
use std::{path::Path, sync::Arc, time::Instant};
use verify::Summary;

/// Sentences sent through the pool unless `--sentences` says otherwise:
/// with the reference, each of its 40 sentences once and short ones for
/// the rest, which keeps a CPU device's run well under a minute.
pub const DEFAULT_SENTENCES: usize = 96;

/// Sentences the naive path embeds for its timing.
const NAIVE_SENTENCES: usize = 8;

/// Largest batch of one submission; the clients (one sentence in flight
/// each) cap it further.
const MAX_BATCH: usize = 32;

/// Failures printed in full; the rest are counted.
const SHOWN_FAILURES: usize = 10;

/// Run the sentence-encoder demo for the model directory in `args`.
pub fn run(args: &DemoArgs) -> Result<()> {
    let dir = args
        .model_dir()
        .ok_or_else(|| Error::msg("the sentence-encoder demo needs a model directory"))?;
    if !dir.is_dir() {
        return Err(Error::msg(format!(
            "the model folder {} does not exist (it needs config.json, tokenizer.json and \
             model.safetensors)",
            dir.display()
        )));
    }
    let name = model_name(dir);
    let corpus = match &args.reference {
        Some(path) => Corpus::from_reference(path)?,
        None => Corpus::built_in(name == PUBLISHED_MODEL),
    };
    let clients = args.clients();
    let context = ModelContext::new(device_options(args.device.as_deref())?)?;
    let target = match (context.runtime().gpu(), &args.device) {
        (Ok(gpu), _) => gpu.target().clone(),
        (Err(e), Some(device)) => return Err(Error::msg(format!("--device `{device}`: {e}"))),
        (Err(e), None) => return Err(e),
    };
    outln!("device:  {} ({:?})", target.name, target.kind);

    let started = Instant::now();
    let options = EmbedderOptions {
        max_batch: MAX_BATCH.min(clients),
        slots: args.slots,
        ..EmbedderOptions::default()
    };
    let embedder = SentenceEmbedder::load(&context, dir, &options)
        .map_err(|e| Error::msg(format!("cannot load the model in {}: {e}", dir.display())))?;
    let loaded = started.elapsed();
    serve_and_check(args, &embedder, &corpus, &name, target.kind, loaded)
}

/// Everything after loading: print the model, serve, time the naive path,
/// check and report.
fn serve_and_check(
    args: &DemoArgs,
    embedder: &SentenceEmbedder,
    corpus: &Corpus,
    name: &str,
    device: DeviceKind,
    loaded: std::time::Duration,
) -> Result<()> {
    let clients = args.clients();
    let config = embedder.config().clone();
    outln!("model:   {name}: {}", describe(&config));
    outln!(
        "         {:.1} MiB of weights ({:?}) on the device, shared by every slot",
        embedder.encoder().weight_bytes() as f64 / (1u64 << 20) as f64,
        embedder.encoder().precision()
    );
    outln!(
        "buckets: {} (tokens x batch), {} slots each, batch tiers 1, 2, 4, .. prepared on first use",
        embedder
            .buckets()
            .iter()
            .map(|b| format!("{}x{}", b.seq, b.batch))
            .collect::<Vec<_>>()
            .join(", "),
        args.slots
    );

    // The order of the requests, and a sample of it for the naive path.
    let texts: Arc<Vec<String>> =
        Arc::new(corpus.sentences.iter().map(|s| s.text.clone()).collect());
    let lengths = texts
        .iter()
        .map(|t| embedder.tokenize(t).map(|ids| ids.len()))
        .collect::<Result<Vec<usize>>>()?;
    let first: Vec<usize> = corpus.pair.iter().flat_map(|p| [p.a, p.b]).collect();
    let count = args.sentences.unwrap_or(DEFAULT_SENTENCES);
    let order = Arc::new(corpus::schedule(&lengths, &first, count));
    let sample = corpus::sample(&order, &lengths, NAIVE_SENTENCES);
    let used: Vec<usize> = {
        let mut distinct = order.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        distinct
    };
    let (shortest, longest) = used.iter().fold((usize::MAX, 0), |(lo, hi), &i| {
        (lo.min(lengths[i]), hi.max(lengths[i]))
    });
    outln!(
        "input:   {} sentences ({} distinct, {shortest} to {longest} tokens) from {}",
        order.len(),
        used.len(),
        corpus.source
    );

    // Compile before timing, as the naive path's untimed first call does.
    let started = Instant::now();
    let shapes = warm_up(embedder, &lengths, &used)?;
    outln!(
        "setup:   load (tokenizer, weights, upload) {}, kernels of {shapes} shapes \
         (batch x tokens) compiled {}",
        report::millis(loaded),
        report::millis(started.elapsed())
    );

    let before = embedder.stats();
    let bar = progress::bar_of(order.len(), "pool", "sentences", args.quiet);
    let pool = clients::pool(embedder, &texts, &order, clients, &bar);
    bar.finish_and_clear();
    let pool = pool?;
    let after = embedder.stats();
    let batches = after.batches - before.batches;

    let bar = progress::bar_of(sample.len(), "naive", "sentences", args.quiet);
    let naive = clients::naive(embedder, &texts, &order, &sample, &bar);
    bar.finish_and_clear();
    let naive = naive?;

    // Without a reference, the naive path's embedding of each sentence is
    // the expectation (untimed).
    let expected: Vec<Expected> = match corpus
        .sentences
        .iter()
        .map(|s| s.expected.clone())
        .collect::<Option<Vec<Expected>>>()
    {
        Some(reference) => reference,
        None => naive_expectations(embedder, &texts, &used)?,
    };
    let against = if args.reference.is_some() {
        "the reference"
    } else {
        "the naive path"
    };

    let (p, n) = (
        report::Stats::of(&pool.served),
        report::Stats::of(&naive.served),
    );
    let mean_tokens = |requests: &mut dyn Iterator<Item = usize>| -> f64 {
        let (sum, count) = requests.fold((0, 0), |(s, c), r| (s + lengths[order[r]], c + 1));
        sum as f64 / count.max(1) as f64
    };
    let (pool_tokens, naive_tokens) = (
        mean_tokens(&mut (0..order.len())),
        mean_tokens(&mut sample.iter().copied()),
    );
    let ratio = |pool: f64, naive: f64| {
        if naive > 0.0 {
            pool / naive
        } else {
            f64::INFINITY
        }
    };
    outln!(
        "pool:    {} sentences (mean {pool_tokens:.1} tokens) from {clients} tokio clients \
         (embed_async, one sentence each), {} slots per pool: {}",
        order.len(),
        args.slots,
        p.line_of("sentences")
    );
    outln!(
        "         {batches} batches, {:.1} sentences per batch",
        (after.sentences - before.sentences) as f64 / batches.max(1) as f64
    );
    outln!(
        "naive:   {} sentences (mean {naive_tokens:.1} tokens) one at a time (embed_naive: \
         prepare a one-slot pool, submit, read back): {}",
        sample.len(),
        n.line_of("sentences")
    );
    outln!(
        "ratio:   the pool serves {:.1}x the naive path's sentences/s ({:.1}x its tokens/s)",
        ratio(p.per_second, n.per_second),
        ratio(p.per_second * pool_tokens, n.per_second * naive_tokens)
    );

    let mut summary = Summary::default();
    let every: Vec<usize> = (0..order.len()).collect();
    for (path, run, requests) in [("pool", &pool, &every), ("naive", &naive, &sample)] {
        for (got, &request) in run.results.iter().zip(requests) {
            let sentence = order[request];
            summary.record(
                || {
                    format!(
                        "sentence {sentence} {:?} ({path} request {request}, {} tokens)",
                        texts[sentence], lengths[sentence]
                    )
                },
                verify::check(got, &expected[sentence], config.normalize),
            );
        }
    }
    let pair = corpus
        .pair
        .map(|pair| check_pair(pair, &texts, &order, &pool.results));
    report_checks(&summary, against, pair.as_ref())?;
    if device == DeviceKind::Cpu {
        outln!(
            "note:    on a CPU device the arithmetic fills most of each sentence's time and \
             concurrent batches share the same cores, so the pool gains little over the naive \
             path there; what it saves (preparation per sentence, one submission per \
             sentence) shows on a GPU"
        );
    }

    let pair_failed = pair.as_ref().is_some_and(|p| p.failure.is_some());
    if summary.failures.is_empty() && !pair_failed {
        return Ok(());
    }
    let mut reasons = Vec::new();
    if !summary.failures.is_empty() {
        reasons.push(format!(
            "{} of {} embeddings do not match {against} (first: {})",
            summary.failures.len(),
            summary.checked,
            summary.failures[0]
        ));
    }
    if let Some(why) = pair.and_then(|p| p.failure) {
        reasons.push(why);
    }
    Err(Error::msg(reasons.join("; ")))
}

/// The folder's name, as the model's.
fn model_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .as_deref()
        .unwrap_or(dir)
        .file_name()
        .map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}

/// `BERT encoder, 6 layers, hidden 384, ...`
fn describe(c: &BertConfig) -> String {
    let pooling = match c.pooling {
        Pooling::Mean => "mean",
        Pooling::Cls => "[CLS]",
    };
    format!(
        "BERT encoder, {} layers, hidden {}, {} heads, feed-forward {}, vocabulary {}, up to {} \
         tokens, {pooling} pooling{}",
        c.layers,
        c.hidden,
        c.heads,
        c.intermediate,
        c.vocab_size,
        c.max_seq_length,
        if c.normalize { ", normalised" } else { "" }
    )
}

/// Compile the kernels of every shape the run can use: each batch tier
/// (1, 2, 4, .. up to the bucket's batch, as the embedder forms them) of
/// each bucket a used sentence falls in, by preparing a one-slot pool of
/// it on the encoder (whose pipelines the embedder's pools share). Nothing
/// runs on the device. The number of shapes.
fn warm_up(embedder: &SentenceEmbedder, lengths: &[usize], used: &[usize]) -> Result<usize> {
    let buckets = embedder.buckets();
    let mut wanted = vec![false; buckets.len()];
    for &i in used {
        if let Some(b) = buckets::pick(buckets, lengths[i]) {
            wanted[b] = true;
        }
    }
    let mut shapes = 0;
    for (bucket, _) in buckets.iter().zip(&wanted).filter(|(_, w)| **w) {
        let tiers = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
            .take_while(|&n| n < bucket.batch)
            .chain([bucket.batch]);
        for batch in tiers {
            embedder
                .encoder()
                .prepare(batch, bucket.seq, 1)
                .map_err(|e| {
                    Error::msg(format!(
                        "warm-up, {batch} sentences of {} tokens: {e}",
                        bucket.seq
                    ))
                })?;
            shapes += 1;
        }
    }
    Ok(shapes)
}

/// The naive path's embedding of every used sentence (others stay empty
/// and are never compared).
fn naive_expectations(
    embedder: &SentenceEmbedder,
    texts: &[String],
    used: &[usize],
) -> Result<Vec<Expected>> {
    let mut expected = vec![
        Expected {
            ids: Vec::new(),
            embedding: Vec::new(),
        };
        texts.len()
    ];
    for &i in used {
        let Embedding { tokens, vector } = embedder
            .embed_naive(&texts[i])
            .map_err(|e| Error::msg(format!("naive path, sentence {i} {:?}: {e}", texts[i])))?;
        expected[i] = Expected {
            ids: tokens,
            embedding: vector,
        };
    }
    Ok(expected)
}

/// The pair's cosine over every request of either sentence.
struct PairCheck {
    pair: corpus::Pair,
    texts: (String, String),
    /// The cosine farthest from the expected value.
    worst: f64,
    /// Request pairs compared.
    compared: usize,
    failure: Option<String>,
}

fn check_pair(
    pair: corpus::Pair,
    texts: &[String],
    order: &[usize],
    results: &[Embedding],
) -> PairCheck {
    let of = |sentence: usize| -> Vec<&Embedding> {
        order
            .iter()
            .zip(results)
            .filter(|(s, _)| **s == sentence)
            .map(|(_, e)| e)
            .collect()
    };
    let (a, b) = (of(pair.a), of(pair.b));
    let mut worst = pair.cosine;
    let mut compared = 0;
    for x in &a {
        for y in &b {
            let c = verify::cosine(&x.vector, &y.vector);
            if (c - pair.cosine).abs() > (worst - pair.cosine).abs() || compared == 0 {
                worst = c;
            }
            compared += 1;
        }
    }
    let failure = if compared == 0 {
        None
    } else if (worst - pair.cosine).abs() > PAIR_TOLERANCE {
        Some(format!(
            "the pair cosine({:?}, {:?}) is {worst:.5}, {} {} +/- {PAIR_TOLERANCE:.0e}",
            texts[pair.a], texts[pair.b], pair.source, pair.cosine
        ))
    } else {
        None
    };
    PairCheck {
        pair,
        texts: (texts[pair.a].clone(), texts[pair.b].clone()),
        worst,
        compared,
        failure,
    }
}

/// The check lines of the report, every failure included (up to
/// [`SHOWN_FAILURES`]).
fn report_checks(summary: &Summary, against: &str, pair: Option<&PairCheck>) -> Result<()> {
    if summary.failures.is_empty() {
        outln!(
            "check:   all {} embeddings match {against}: token ids identical, min cosine {:.7}, \
             max abs diff {:.2e} (need cosine >= {}, diff <= {:.0e})",
            summary.checked,
            summary.min_cosine,
            summary.max_diff,
            verify::MIN_COSINE,
            verify::MAX_DIFF
        );
    } else {
        outln!(
            "check:   FAILED: {} of {} embeddings do not match {against}:",
            summary.failures.len(),
            summary.checked
        );
        for failure in summary.failures.iter().take(SHOWN_FAILURES) {
            outln!("         {failure}");
        }
        if summary.failures.len() > SHOWN_FAILURES {
            outln!(
                "         and {} more",
                summary.failures.len() - SHOWN_FAILURES
            );
        }
    }
    match pair {
        Some(p) if p.compared > 0 => outln!(
            "pair:    cosine({:?}, {:?}) = {:.5} ({} {} +/- {PAIR_TOLERANCE:.0e}){}",
            p.texts.0,
            p.texts.1,
            p.worst,
            p.pair.source,
            p.pair.cosine,
            if p.failure.is_some() { ": FAILED" } else { "" }
        ),
        Some(_) => outln!("pair:    not checked (the run sent only one of the pair)"),
        None => {}
    }
    Ok(())
}
