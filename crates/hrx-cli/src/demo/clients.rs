//! Concurrent tokio clients serving requests through the prepared pool.

use super::{check, requests::Request};
use hrx::{Error, Result, inference::PreparedModel, models::toy::TransformerConfig};
use indicatif::ProgressBar;
use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};
use std::time::{Duration, Instant};

/// What serving measured.
pub struct Served {
    /// Per request, as a client sees it: acquire, submit, readback.
    pub latencies: Vec<Duration>,
    /// From the first client's start to the last client's end.
    pub wall: Duration,
    /// Largest absolute difference from the CPU reference.
    pub max_error: f32,
}

/// Serve every request from `clients` concurrent tokio tasks on a
/// multi-thread runtime, after one untimed warm-up request per slot.
pub fn serve(
    model: &PreparedModel,
    config: TransformerConfig,
    requests: Arc<Vec<Request>>,
    clients: usize,
    progress: &ProgressBar,
) -> Result<Served> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .build()
        .map_err(|e| Error::msg(format!("cannot start the tokio runtime: {e}")))?;
    runtime.block_on(async {
        warm_up(model, config, &requests[0]).await?;
        let next = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = Client {
                    model: model.clone(),
                    config,
                    requests: requests.clone(),
                    next: next.clone(),
                    stop: stop.clone(),
                    progress: progress.clone(),
                };
                tokio::spawn(client.run())
            })
            .collect();
        let mut latencies = Vec::with_capacity(requests.len());
        let mut max_error = 0.0f32;
        let mut failure: Option<(usize, Error)> = None;
        for task in tasks {
            match task.await {
                Ok(Ok(done)) => {
                    for (latency, error) in done {
                        latencies.push(latency);
                        max_error = max_error.max(error);
                    }
                }
                // The lowest failing request is reported; later ones are
                // often consequences of it.
                Ok(Err((index, error))) => {
                    if failure.as_ref().is_none_or(|(first, _)| index < *first) {
                        failure = Some((index, error));
                    }
                }
                Err(join) => {
                    failure
                        .get_or_insert((usize::MAX, Error::msg(format!("a client died: {join}"))));
                }
            }
        }
        let wall = start.elapsed();
        match failure {
            Some((_, error)) => Err(error),
            None => Ok(Served {
                latencies,
                wall,
                max_error,
            }),
        }
    })
}

/// Reserve every slot at once and run request 0 through each, so that the
/// timed run starts with every slot's host staging created.
async fn warm_up(
    model: &PreparedModel,
    config: TransformerConfig,
    request: &Request,
) -> Result<()> {
    let mut slots = Vec::with_capacity(model.capacity());
    for _ in 0..model.capacity() {
        slots.push(model.acquire().await?);
    }
    let mut readbacks = Vec::with_capacity(slots.len());
    for slot in slots {
        readbacks.push(slot.submit_host(&[&request.bytes])?.download()?);
    }
    for readback in readbacks {
        let outputs = readback
            .await
            .map_err(|e| Error::msg(format!("warm-up request: {e}")))?;
        check::check(&config, 0, &output_floats(&outputs)?, &request.expected)
            .map_err(|e| Error::msg(format!("warm-up {e}")))?;
    }
    Ok(())
}

fn output_floats(outputs: &[Vec<u8>]) -> Result<Vec<f32>> {
    match outputs {
        [logits] => Ok(check::floats(logits)),
        _ => Err(Error::msg(format!(
            "the model returned {} outputs, 1 expected",
            outputs.len()
        ))),
    }
}

/// One client: takes the next request until none are left or a client
/// failed.
struct Client {
    model: PreparedModel,
    config: TransformerConfig,
    requests: Arc<Vec<Request>>,
    next: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    progress: ProgressBar,
}

impl Client {
    async fn run(self) -> std::result::Result<Vec<(Duration, f32)>, (usize, Error)> {
        let mut done = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(request) = self.requests.get(index) else {
                break;
            };
            match self.one(index, request).await {
                Ok(result) => done.push(result),
                Err(error) => {
                    self.stop.store(true, Ordering::Relaxed);
                    return Err((index, error));
                }
            }
            self.progress.inc(1);
        }
        Ok(done)
    }

    async fn one(&self, index: usize, request: &Request) -> Result<(Duration, f32)> {
        let start = Instant::now();
        // The pool serves waiting requests first come, first served.
        let outputs = async {
            let slot = self.model.acquire().await?;
            slot.submit_host(&[&request.bytes])?.download()?.await
        }
        .await
        .map_err(|e| Error::msg(format!("request {index}: {e}")))?;
        let latency = start.elapsed();
        let error = check::check(
            &self.config,
            index,
            &output_floats(&outputs)?,
            &request.expected,
        )?;
        Ok((latency, error))
    }
}
