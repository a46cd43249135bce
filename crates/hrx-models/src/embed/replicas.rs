//! Several sentence embedders of one model behind one pool: one replica
//! per device (or per runtime domain), each with its own copy of the
//! weights, its own slots and its own batching queues.
//!
//! Design choices and contracts:
//!
//! - **Least loaded first.** A request goes to the healthy replica with
//!   the fewest sentences dispatched and not yet answered (queued or on
//!   the device); ties rotate, so an idle pool spreads sequential
//!   requests over every replica.
//! - **Backpressure passes on.** A replica whose queue is full
//!   ([`Error::Busy`]) hands the request to the next one; only when every
//!   healthy replica is full does the pool answer `Busy`.
//! - **A failing replica leaves the pool.** Any other error from a
//!   replica (device lost, failed execution, a stopped batching thread)
//!   marks it unhealthy for the life of the pool, and the request is
//!   retried once on another healthy replica. Inputs are checked before
//!   any replica sees them, so a bad request never blames a device.
//! - **Cancellation is free.** Dropping the future of
//!   [`Replicas::try_embed`] releases its place in the load count at once
//!   and its sentences cost no device work unless their batch was already
//!   submitted.

use super::{EmbedderOptions, Embedding, SentenceEmbedder, StatsSnapshot};
use crate::bert::BertConfig;
use hrx_core::{Error, Result};
use hrx_inference::ModelContext;
use hrx_runtime::MemoryStats;
use std::{
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

/// A pool of replicas of one sentence-embedding model. Cheap to clone;
/// clones share the replicas.
#[derive(Clone)]
pub struct Replicas {
    inner: Arc<Inner>,
}

struct Inner {
    replicas: Vec<Replica>,
    /// Where ties in load start, advanced by every request.
    next: AtomicUsize,
}

struct Replica {
    embedder: SentenceEmbedder,
    device: String,
    healthy: AtomicBool,
    in_flight: AtomicUsize,
    requests: AtomicUsize,
    sentences: AtomicUsize,
    failures: AtomicUsize,
    last_error: Mutex<Option<String>>,
}

/// What one replica has done and holds, for metrics and readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// The replica's position in the pool.
    pub index: usize,
    /// The device's name.
    pub device: String,
    /// False once the replica has failed.
    pub healthy: bool,
    /// Sentences dispatched to it and not answered yet.
    pub in_flight: usize,
    /// Requests it was given (retries and hand-overs included).
    pub requests: usize,
    /// Sentences it answered.
    pub sentences: usize,
    /// Requests it failed.
    pub failures: usize,
    /// The error that made it unhealthy.
    pub last_error: Option<String>,
    /// Its embedder's counters.
    pub stats: StatsSnapshot,
    /// Its runtime's allocations.
    pub memory: MemoryStats,
}

impl std::fmt::Debug for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas")
            .field("replicas", &self.inner.replicas.len())
            .field("healthy", &self.healthy())
            .finish()
    }
}

impl Replicas {
    /// Load the model folder `dir` once per context (each its own runtime
    /// domain, on the same device or not), one replica each, in order;
    /// the replicas load in parallel, one thread each.
    pub fn load(
        contexts: &[ModelContext],
        dir: &Path,
        options: &EmbedderOptions,
    ) -> Result<Replicas> {
        let embedders = std::thread::scope(|scope| {
            let loads: Vec<_> = contexts
                .iter()
                .map(|context| scope.spawn(move || SentenceEmbedder::load(context, dir, options)))
                .collect();
            loads
                .into_iter()
                .map(|load| {
                    load.join()
                        .unwrap_or_else(|_| Err(Error::msg("loading a replica panicked")))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        Replicas::new(embedders)
    }

    /// A pool of `embedders`, which must serve the same model.
    pub fn new(embedders: Vec<SentenceEmbedder>) -> Result<Replicas> {
        let Some(first) = embedders.first() else {
            return Err(Error::msg("a pool of replicas needs at least one embedder"));
        };
        if let Some(other) = embedders.iter().find(|e| e.config() != first.config()) {
            return Err(Error::msg(format!(
                "the replicas serve different models: {:?} and {:?}",
                first.config(),
                other.config()
            )));
        }
        let replicas = embedders
            .into_iter()
            .map(|embedder| {
                let device = embedder
                    .encoder()
                    .context()
                    .runtime()
                    .gpu()?
                    .target()
                    .name
                    .clone();
                Ok(Replica {
                    embedder,
                    device,
                    healthy: AtomicBool::new(true),
                    in_flight: AtomicUsize::new(0),
                    requests: AtomicUsize::new(0),
                    sentences: AtomicUsize::new(0),
                    failures: AtomicUsize::new(0),
                    last_error: Mutex::new(None),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Replicas {
            inner: Arc::new(Inner {
                replicas,
                next: AtomicUsize::new(0),
            }),
        })
    }

    /// How many replicas the pool has (healthy or not).
    pub fn len(&self) -> usize {
        self.inner.replicas.len()
    }

    /// Never true: a pool has at least one replica.
    pub fn is_empty(&self) -> bool {
        self.inner.replicas.is_empty()
    }

    /// The embedder of replica `index` (for its runtime, stats, tests).
    pub fn embedder(&self, index: usize) -> &SentenceEmbedder {
        &self.inner.replicas[index].embedder
    }

    /// The model's configuration (every replica's).
    pub fn config(&self) -> &BertConfig {
        self.embedder(0).config()
    }

    /// The embedding width.
    pub fn dimensions(&self) -> usize {
        self.embedder(0).dimensions()
    }

    /// Token ids of `text` with `[CLS]` and `[SEP]`, truncated to the
    /// model's `max_seq_length` (see [`SentenceEmbedder::tokenize`]).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.embedder(0).tokenize(text)
    }

    /// How many replicas are healthy.
    pub fn healthy(&self) -> usize {
        self.inner
            .replicas
            .iter()
            .filter(|r| r.healthy.load(Ordering::Acquire))
            .count()
    }

    /// Every replica's status, in pool order.
    pub fn status(&self) -> Vec<ReplicaStatus> {
        self.inner
            .replicas
            .iter()
            .enumerate()
            .map(|(index, r)| ReplicaStatus {
                index,
                device: r.device.clone(),
                healthy: r.healthy.load(Ordering::Acquire),
                in_flight: r.in_flight.load(Ordering::Relaxed),
                requests: r.requests.load(Ordering::Relaxed),
                sentences: r.sentences.load(Ordering::Relaxed),
                failures: r.failures.load(Ordering::Relaxed),
                last_error: r
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
                stats: r.embedder.stats(),
                memory: r.embedder.encoder().context().runtime().memory_stats(),
            })
            .collect()
    }

    /// Check tokenized sentences as every replica would: each has at least
    /// one id, at most `max_seq_length`, all inside the vocabulary.
    pub fn check(&self, ids: &[Vec<u32>]) -> Result<()> {
        let limit = self.config().max_seq_length;
        for (i, tokens) in ids.iter().enumerate() {
            if tokens.is_empty() {
                return Err(Error::msg(format!("sentence {i} has no tokens")));
            }
            if tokens.len() > limit {
                return Err(Error::msg(format!(
                    "sentence {i} has {} tokens; the model takes at most {limit}",
                    tokens.len()
                )));
            }
            self.embedder(0)
                .encoder()
                .check_ids(tokens)
                .map_err(|e| Error::msg(format!("sentence {i}: {e}")))?;
        }
        Ok(())
    }

    /// Embed tokenized sentences on the least-loaded healthy replica
    /// (see the module's contracts); results in input order. Answers
    /// [`Error::Busy`] when every healthy replica's queue is full.
    pub async fn try_embed(&self, ids: Vec<Vec<u32>>) -> Result<Vec<Embedding>> {
        self.check(&ids)?;
        let mut failure: Option<Error> = None;
        let mut busy: Option<Error> = None;
        for index in self.order() {
            let replica = &self.inner.replicas[index];
            if !replica.healthy.load(Ordering::Acquire) {
                continue;
            }
            let _load = InFlight::new(&replica.in_flight, ids.len());
            replica.requests.fetch_add(1, Ordering::Relaxed);
            match replica.embedder.try_embed(ids.clone()).await {
                Ok(embeddings) => {
                    replica.sentences.fetch_add(ids.len(), Ordering::Relaxed);
                    return Ok(embeddings);
                }
                Err(e) if e.is_busy() => busy = Some(e),
                Err(e) => {
                    replica.failures.fetch_add(1, Ordering::Relaxed);
                    self.mark_unhealthy(index, &e);
                    if failure.is_some() {
                        return Err(e);
                    }
                    failure = Some(e);
                }
            }
        }
        Err(busy
            .or(failure)
            .unwrap_or_else(|| Error::msg("no replica of the model is healthy")))
    }

    /// Take replica `index` out of the pool because of `error`.
    pub fn mark_unhealthy(&self, index: usize, error: &Error) {
        let replica = &self.inner.replicas[index];
        let mut last = replica.last_error.lock().unwrap_or_else(|e| e.into_inner());
        if replica.healthy.swap(false, Ordering::AcqRel) || last.is_none() {
            *last = Some(error.to_string());
        }
    }

    /// Healthy replicas, least loaded first; ties start at a rotating
    /// position.
    fn order(&self) -> Vec<usize> {
        let count = self.inner.replicas.len();
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed) % count;
        let mut order: Vec<(usize, usize)> = self
            .inner
            .replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.healthy.load(Ordering::Acquire))
            .map(|(i, r)| (r.in_flight.load(Ordering::Relaxed), i))
            .collect();
        order.sort_by_key(|&(load, i)| (load, (i + count - start) % count));
        order.into_iter().map(|(_, i)| i).collect()
    }
}

/// Sentences counted in a replica's load while a request is with it,
/// released when the request ends or its future is dropped.
struct InFlight<'a> {
    counter: &'a AtomicUsize,
    count: usize,
}

impl<'a> InFlight<'a> {
    fn new(counter: &'a AtomicUsize, count: usize) -> Self {
        counter.fetch_add(count, Ordering::Relaxed);
        InFlight { counter, count }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.count, Ordering::Relaxed);
    }
}
