//! The two paths the demo times: concurrent tokio clients through the
//! embedder's pools ([`pool`]), and the naive path one sentence at a time
//! ([`naive`]).

use super::super::clients::Served;
use hrx::{
    Error, Result,
    models::embed::{Embedding, SentenceEmbedder},
};
use indicatif::ProgressBar;
use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};
use std::time::{Duration, Instant};

/// A timed run and its embeddings, one per request in request order.
pub struct Run {
    /// Latencies and wall time.
    pub served: Served,
    /// The embedding of each request.
    pub results: Vec<Embedding>,
}

/// Send `texts[order[k]]` as request `k` from `clients` concurrent tokio
/// tasks, each taking the next request when its last one is answered, one
/// sentence per [`SentenceEmbedder::embed_async`] call. The embedder
/// batches what the clients have in flight together.
pub fn pool(
    embedder: &SentenceEmbedder,
    texts: &Arc<Vec<String>>,
    order: &Arc<Vec<usize>>,
    clients: usize,
    progress: &ProgressBar,
) -> Result<Run> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(4)))
        .build()
        .map_err(|e| Error::msg(format!("cannot start the tokio runtime: {e}")))?;
    runtime.block_on(async {
        let next = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = Client {
                    embedder: embedder.clone(),
                    texts: Arc::clone(texts),
                    order: Arc::clone(order),
                    next: Arc::clone(&next),
                    stop: Arc::clone(&stop),
                    progress: progress.clone(),
                };
                tokio::spawn(client.run())
            })
            .collect();
        let mut done: Vec<Option<(Duration, Embedding)>> = vec![None; order.len()];
        let mut failure: Option<(usize, Error)> = None;
        for task in tasks {
            match task.await {
                Ok(Ok(answers)) => {
                    for (request, latency, embedding) in answers {
                        done[request] = Some((latency, embedding));
                    }
                }
                // The lowest failing request is reported; later ones are
                // often consequences of it.
                Ok(Err((request, error))) => {
                    if failure.as_ref().is_none_or(|(first, _)| request < *first) {
                        failure = Some((request, error));
                    }
                }
                Err(join) => {
                    failure
                        .get_or_insert((usize::MAX, Error::msg(format!("a client died: {join}"))));
                }
            }
        }
        let wall = start.elapsed();
        if let Some((_, error)) = failure {
            return Err(error);
        }
        let mut latencies = Vec::with_capacity(order.len());
        let mut results = Vec::with_capacity(order.len());
        for (request, answer) in done.into_iter().enumerate() {
            let (latency, embedding) = answer
                .ok_or_else(|| Error::msg(format!("request {request} was never answered")))?;
            latencies.push(latency);
            results.push(embedding);
        }
        Ok(Run {
            served: Served {
                latencies,
                wall,
                max_error: 0.0,
            },
            results,
        })
    })
}

/// One client: sends the next request until none are left or a client
/// failed.
struct Client {
    embedder: SentenceEmbedder,
    texts: Arc<Vec<String>>,
    order: Arc<Vec<usize>>,
    next: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    progress: ProgressBar,
}

type Answer = (usize, Duration, Embedding);

impl Client {
    async fn run(self) -> std::result::Result<Vec<Answer>, (usize, Error)> {
        let mut answers = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            let request = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&sentence) = self.order.get(request) else {
                break;
            };
            let text = self.texts[sentence].as_str();
            let start = Instant::now();
            match self.embedder.embed_async(&[text]).await {
                Ok(mut embeddings) if embeddings.len() == 1 => {
                    answers.push((request, start.elapsed(), embeddings.remove(0)));
                }
                Ok(embeddings) => {
                    self.stop.store(true, Ordering::Relaxed);
                    let e = Error::msg(format!(
                        "request {request}: {} embeddings for one sentence",
                        embeddings.len()
                    ));
                    return Err((request, e));
                }
                Err(e) => {
                    self.stop.store(true, Ordering::Relaxed);
                    let e = Error::msg(format!(
                        "request {request} (sentence {sentence} {text:?}): {e}"
                    ));
                    return Err((request, e));
                }
            }
            self.progress.inc(1);
        }
        Ok(answers)
    }
}

/// Embed `texts[order[p]]` for each position `p` of `sample`, one at a
/// time through [`SentenceEmbedder::embed_naive`] (a one-slot pool
/// prepared for each sentence), after one untimed call.
pub fn naive(
    embedder: &SentenceEmbedder,
    texts: &[String],
    order: &[usize],
    sample: &[usize],
    progress: &ProgressBar,
) -> Result<Run> {
    let call = |position: usize| -> Result<(Duration, Embedding)> {
        let sentence = order[position];
        let text = texts[sentence].as_str();
        let start = Instant::now();
        let embedding = embedder
            .embed_naive(text)
            .map_err(|e| Error::msg(format!("naive path, sentence {sentence} {text:?}: {e}")))?;
        Ok((start.elapsed(), embedding))
    };
    if let Some(&first) = sample.first() {
        call(first)?;
    }
    let mut latencies = Vec::with_capacity(sample.len());
    let mut results = Vec::with_capacity(sample.len());
    let start = Instant::now();
    for &position in sample {
        let (latency, embedding) = call(position)?;
        latencies.push(latency);
        results.push(embedding);
        progress.inc(1);
    }
    Ok(Run {
        served: Served {
            latencies,
            wall: start.elapsed(),
            max_error: 0.0,
        },
        results,
    })
}
