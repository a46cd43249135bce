//! Sentence embeddings as a service: tokenize, route each sentence to the
//! smallest length bucket that holds it, batch concurrent sentences into
//! one slot submission, and answer each caller in its own order.
//!
//! Design choices and contracts:
//!
//! - **Fixed shapes, few of them.** A length bucket ([`buckets::plan`])
//!   pads sentences to `seq` tokens; within it, batch tiers (1, 2, 4, ..
//!   up to the bucket's batch) are each a
//!   [`PreparedModel`](hrx_inference::PreparedModel) of `slots` slots,
//!   so a lone sentence runs a batch-1 graph and a full batch one graph.
//!   Weights are uploaded once and shared by every slot of every pool;
//!   a pool is prepared by its first batch unless
//!   [`EmbedderOptions::prepare_all`] asks for all at load.
//! - **Batching above the pool.** One task per bucket takes sentences
//!   from a bounded queue. It waits until fewer than `slots` of the
//!   bucket's batches are on the device, then gathers what is queued
//!   (waiting at most the batch window for more, up to the bucket's
//!   batch), runs it on a slot of the smallest tier that holds it, and
//!   splits the readback in a task of its own. While the slots are busy,
//!   sentences queue and all join the next batch, so batches grow with
//!   the load (a batch gathered before its slot was free would have
//!   left out everything that arrived while it waited). While another
//!   of the bucket's batches runs, a batch goes only once full or once
//!   that one is done: a partial batch beside a running one would split
//!   the load into small batches. An idle device takes a batch at once.
//! - **Results do not depend on batching.** Padding changes nothing (see
//!   [`bert`](crate::bert)); the same sentence gives the same embedding
//!   (to within float rounding of the kernels chosen for a shape)
//!   whatever it is batched with, and callers get results in their input
//!   order.
//! - **Backpressure.** A full queue makes [`SentenceEmbedder::try_embed`]
//!   answer [`Error::Busy`]; [`SentenceEmbedder::embed`] and
//!   [`SentenceEmbedder::embed_async`] wait for room instead. A caller that
//!   goes away before its batch is submitted costs no device work.
//! - **Sync and async.** The batching tasks run on a runtime of their own
//!   (one thread), so the blocking API works outside tokio and the async
//!   API inside any executor. Dropping the last clone of the embedder
//!   closes the queues and waits for the thread to drain them and release
//!   its pools (briefly blocking the dropping thread).

mod batcher;
pub mod buckets;
pub mod replicas;

pub use buckets::Bucket;
pub use replicas::{ReplicaStatus, Replicas};

use crate::{
    bert::{BertConfig, BertEncoder, Precision},
    tokenizer::WordPieceTokenizer,
};
use batcher::{BucketWorker, Job, Tier};
use hrx_core::{Error, Result};
use hrx_inference::ModelContext;
use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

/// How a [`SentenceEmbedder`] batches and how much it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedderOptions {
    /// Matrix precision of the encoder.
    pub precision: Precision,
    /// Sentences per slot submission (cut per bucket to the device's
    /// binding limit).
    pub max_batch: usize,
    /// Slots per length bucket.
    pub slots: usize,
    /// How long a batch waits for more sentences after its first.
    pub batch_window: Duration,
    /// Sentences each bucket's queue holds before callers wait (or
    /// [`SentenceEmbedder::try_embed`] answers `Busy`).
    pub queue: usize,
    /// Prepare every pool (graphs built, kernels compiled) while loading;
    /// otherwise each pool is prepared by its first batch.
    pub prepare_all: bool,
}

impl Default for EmbedderOptions {
    /// f32, batches of up to 32, 2 slots per pool, no batch window (a
    /// batch takes what queued while the slots were busy), queues of 4096
    /// sentences, pools prepared on first use.
    fn default() -> Self {
        EmbedderOptions {
            precision: Precision::F32,
            max_batch: 32,
            slots: 2,
            batch_window: Duration::ZERO,
            queue: 4096,
            prepare_all: false,
        }
    }
}

/// One sentence's result: its token ids (after truncation, with `[CLS]`
/// and `[SEP]`) and its embedding.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    /// The token ids the encoder saw.
    pub tokens: Vec<u32>,
    /// The sentence vector (unit length when the model normalises).
    pub vector: Vec<f32>,
}

/// Counters of an embedder's work since it was loaded.
#[derive(Debug, Default)]
pub struct Stats {
    queued: AtomicUsize,
    running: AtomicUsize,
    sentences: AtomicUsize,
    batches: AtomicUsize,
    tokens: AtomicUsize,
}

/// A snapshot of [`Stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Sentences waiting in the queues.
    pub queued: usize,
    /// Slot submissions on the device whose results have not landed yet:
    /// the slots in use (slot occupancy).
    pub running: usize,
    /// Sentences submitted to the device.
    pub sentences: usize,
    /// Slot submissions.
    pub batches: usize,
    /// Tokens submitted (padding excluded).
    pub tokens: usize,
}

impl Stats {
    fn record_batch(&self, sentences: usize, tokens: usize) {
        self.sentences.fetch_add(sentences, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            queued: self.queued.load(Ordering::Relaxed),
            running: self.running.load(Ordering::Relaxed),
            sentences: self.sentences.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
        }
    }
}

/// A sentence-embedding model served through bucketed slot pools with
/// dynamic batching. Cheap to clone; clones share the model and queues.
#[derive(Clone)]
pub struct SentenceEmbedder {
    inner: Arc<Inner>,
}

struct Inner {
    tokenizer: WordPieceTokenizer,
    encoder: Arc<BertEncoder>,
    buckets: Vec<Bucket>,
    queues: Vec<mpsc::Sender<Job>>,
    stats: Arc<Stats>,
    /// The batching thread, joined when the last clone goes.
    batcher: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Inner {
    /// Close the queues and wait for the batching thread to drain them and
    /// release its pools, so that no device work or teardown outlives the
    /// embedder (a process that exits right after dropping it must not
    /// race the thread's teardown of the device).
    fn drop(&mut self) {
        self.queues.clear();
        if let Some(thread) = self.batcher.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for SentenceEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEmbedder")
            .field("encoder", &self.inner.encoder)
            .field("buckets", &self.inner.buckets)
            .finish_non_exhaustive()
    }
}

impl SentenceEmbedder {
    /// Load the sentence-transformers folder `dir` (config, tokenizer,
    /// weights), upload the weights and prepare every bucket's slots.
    pub fn load(
        context: &ModelContext,
        dir: &Path,
        options: &EmbedderOptions,
    ) -> Result<SentenceEmbedder> {
        let tokenizer = WordPieceTokenizer::from_dir(dir)?;
        let encoder = BertEncoder::load(context, dir, options.precision)?;
        SentenceEmbedder::new(tokenizer, encoder, options)
    }

    /// Serve `encoder` with `tokenizer`'s ids.
    pub fn new(
        tokenizer: WordPieceTokenizer,
        encoder: BertEncoder,
        options: &EmbedderOptions,
    ) -> Result<SentenceEmbedder> {
        if tokenizer.vocab_size() > encoder.config().vocab_size {
            return Err(Error::msg(format!(
                "the tokenizer has {} tokens, the model's embedding table {}",
                tokenizer.vocab_size(),
                encoder.config().vocab_size
            )));
        }
        if options.slots == 0 || options.queue == 0 {
            return Err(Error::msg(
                "an embedder needs at least one slot and room for one queued sentence",
            ));
        }
        let target = encoder.context().runtime().gpu()?.target().clone();
        let buckets = buckets::plan(
            encoder.config(),
            options.max_batch,
            target.max_storage_buffer_range,
            u64::from(target.max_workgroup_count[0]),
        )?;
        let encoder = Arc::new(encoder);
        let stats = Arc::new(Stats::default());
        let mut workers = Vec::new();
        let mut queues = Vec::new();
        for &bucket in &buckets {
            let (sender, receiver) = mpsc::channel(options.queue);
            queues.push(sender);
            let tiers = batcher::tier_sizes(bucket.batch)
                .into_iter()
                .map(|batch| Tier {
                    batch,
                    model: Default::default(),
                })
                .collect();
            let worker = BucketWorker {
                bucket,
                tiers,
                slots: options.slots,
                in_flight: Arc::new(Semaphore::new(options.slots)),
                finished: Notify::new(),
                encoder: Arc::clone(&encoder),
                window: options.batch_window,
                stats: Arc::clone(&stats),
            };
            if options.prepare_all {
                worker.prepare_all()?;
            }
            workers.push((Arc::new(worker), receiver));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| Error::msg(format!("cannot start the batching runtime: {e}")))?;
        let batcher = std::thread::Builder::new()
            .name("hrx-embed-batcher".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let tasks: Vec<_> = workers
                        .into_iter()
                        .map(|(worker, receiver)| tokio::spawn(BucketWorker::run(worker, receiver)))
                        .collect();
                    for task in tasks {
                        let _ = task.await;
                    }
                });
            })
            .map_err(|e| Error::msg(format!("cannot start the batching thread: {e}")))?;
        Ok(SentenceEmbedder {
            inner: Arc::new(Inner {
                tokenizer,
                encoder,
                buckets,
                queues,
                stats,
                batcher: Some(batcher),
            }),
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &BertConfig {
        self.inner.encoder.config()
    }

    /// The encoder (for direct slot pools, benchmarks and the naive path).
    pub fn encoder(&self) -> &BertEncoder {
        &self.inner.encoder
    }

    /// The length buckets and their batches.
    pub fn buckets(&self) -> &[Bucket] {
        &self.inner.buckets
    }

    /// The embedding width.
    pub fn dimensions(&self) -> usize {
        self.config().hidden
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPieceTokenizer {
        &self.inner.tokenizer
    }

    /// Counters of the work done so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// Token ids of `text` with `[CLS]` and `[SEP]`, truncated to the
    /// model's `max_seq_length`.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .tokenizer
            .encode(text, self.config().max_seq_length)
    }

    /// Embed `texts`, waiting on this thread; results in input order. Do
    /// not call it from async code: use [`embed_async`](Self::embed_async).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        let ids = self.tokenize_all(texts)?;
        let mut pending = Vec::with_capacity(ids.len());
        for tokens in ids {
            let (job, reply) = self.job(&tokens)?;
            let queue = self.queue_for(&tokens)?;
            // Counted while it waits for room too; uncounted if it never
            // gets in.
            self.inner.stats.queued.fetch_add(1, Ordering::Relaxed);
            if queue.blocking_send(job).is_err() {
                self.inner.stats.queued.fetch_sub(1, Ordering::Relaxed);
                return Err(closed());
            }
            pending.push((tokens, reply));
        }
        pending
            .into_iter()
            .map(|(tokens, reply)| {
                let vector = reply.blocking_recv().map_err(|_| closed())??;
                Ok(Embedding { tokens, vector })
            })
            .collect()
    }

    /// Embed `texts` asynchronously; results in input order.
    pub async fn embed_async(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        let ids = self.tokenize_all(texts)?;
        self.embed_ids_async(ids).await
    }

    /// Embed already tokenized sentences (each with `[CLS]` and `[SEP]`,
    /// at most `max_seq_length` ids, every id inside the vocabulary).
    pub async fn embed_ids_async(&self, ids: Vec<Vec<u32>>) -> Result<Vec<Embedding>> {
        let mut pending = Vec::with_capacity(ids.len());
        for tokens in ids {
            let (job, reply) = self.job(&tokens)?;
            let permit = self
                .queue_for(&tokens)?
                .reserve()
                .await
                .map_err(|_| closed())?;
            self.send(permit, job);
            pending.push((tokens, reply));
        }
        answers(pending).await
    }

    /// Like [`embed_ids_async`](Self::embed_ids_async), but a full queue
    /// answers [`Error::Busy`] at once instead of waiting for room (the
    /// sentences queued before it stay queued; their results are dropped).
    pub async fn try_embed(&self, ids: Vec<Vec<u32>>) -> Result<Vec<Embedding>> {
        let mut pending = Vec::with_capacity(ids.len());
        for tokens in ids {
            let (job, reply) = self.job(&tokens)?;
            let permit = self
                .queue_for(&tokens)?
                .try_reserve()
                .map_err(|e| match e {
                    mpsc::error::TrySendError::Full(()) => {
                        Error::Busy("the embedding queue is full".into())
                    }
                    mpsc::error::TrySendError::Closed(()) => closed(),
                })?;
            self.send(permit, job);
            pending.push((tokens, reply));
        }
        answers(pending).await
    }

    /// The naive path, for comparison: build and prepare a one-slot pool
    /// of the sentence's bucket for this call alone, run it and wait.
    pub fn embed_naive(&self, text: &str) -> Result<Embedding> {
        let tokens = self.tokenize(text)?;
        let bucket = self.bucket_for(&tokens)?;
        let model = self.inner.encoder.prepare(1, bucket.seq, 1)?;
        let encoder = &self.inner.encoder;
        let inference = model.try_acquire()?.submit_host_with(|input, staging| {
            encoder.write_input(&[&tokens], bucket.seq, input, staging)
        })?;
        let bytes = inference.download()?.wait()?.remove(0);
        let vector = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Embedding { tokens, vector })
    }

    /// Count `job` as queued and send it through the room `permit` holds:
    /// no await in between, so a caller that goes away leaves no count.
    fn send(&self, permit: mpsc::Permit<'_, Job>, job: Job) {
        self.inner.stats.queued.fetch_add(1, Ordering::Relaxed);
        permit.send(job);
    }

    fn tokenize_all(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        texts.iter().map(|t| self.tokenize(t)).collect()
    }

    fn bucket_for(&self, tokens: &[u32]) -> Result<Bucket> {
        buckets::pick(&self.inner.buckets, tokens.len())
            .map(|i| self.inner.buckets[i])
            .ok_or_else(|| too_long(tokens.len(), self.config().max_seq_length))
    }

    fn queue_for(&self, tokens: &[u32]) -> Result<&mpsc::Sender<Job>> {
        let index = buckets::pick(&self.inner.buckets, tokens.len())
            .ok_or_else(|| too_long(tokens.len(), self.config().max_seq_length))?;
        Ok(&self.inner.queues[index])
    }

    /// A job for `tokens` (checked) and the receiver of its result.
    fn job(&self, tokens: &[u32]) -> Result<(Job, Reply)> {
        if tokens.is_empty() {
            return Err(Error::msg("a sentence needs at least one token"));
        }
        self.inner.encoder.check_ids(tokens)?;
        let (reply, receiver) = oneshot::channel();
        Ok((
            Job {
                ids: tokens.to_vec(),
                reply,
            },
            receiver,
        ))
    }
}

/// Where a queued sentence's embedding arrives.
type Reply = oneshot::Receiver<Result<Vec<f32>>>;

/// The embeddings of `pending` sentences, in order, as they are answered.
async fn answers(pending: Vec<(Vec<u32>, Reply)>) -> Result<Vec<Embedding>> {
    let mut out = Vec::with_capacity(pending.len());
    for (tokens, reply) in pending {
        let vector = reply.await.map_err(|_| closed())??;
        out.push(Embedding { tokens, vector });
    }
    Ok(out)
}

fn too_long(tokens: usize, limit: usize) -> Error {
    Error::msg(format!(
        "a sentence of {tokens} tokens exceeds the model's {limit}"
    ))
}

fn closed() -> Error {
    Error::msg("the embedder's batching thread has stopped")
}
