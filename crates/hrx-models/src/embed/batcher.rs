//! Dynamic batching: one task per length bucket takes sentences from a
//! bounded queue, waits for one of the bucket's `slots` places on the
//! device, gathers what is queued (waiting at most the batch window for
//! more, and while another of its batches runs, until the batch is full
//! or that one is done), picks the smallest batch tier that holds them,
//! submits them as one inference and answers each sentence from the
//! readback while the next batch gathers.

use super::{Bucket, Stats};
use crate::bert::BertEncoder;
use hrx_core::{Error, Result};
use hrx_inference::PreparedModel;
use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};
use tokio::{
    sync::{Notify, OnceCell, OwnedSemaphorePermit, Semaphore, mpsc, oneshot},
    time::Instant,
};

/// One sentence waiting for its embedding.
pub(crate) struct Job {
    pub ids: Vec<u32>,
    pub reply: oneshot::Sender<Result<Vec<f32>>>,
}

/// A pool for `batch` sentences of the bucket's length, prepared on first
/// use (or by [`BucketWorker::prepare_all`]).
pub(crate) struct Tier {
    pub batch: usize,
    pub model: OnceCell<PreparedModel>,
}

/// What a bucket's task needs.
pub(crate) struct BucketWorker {
    pub bucket: Bucket,
    /// Ascending batch sizes, the last equal to the bucket's batch.
    pub tiers: Vec<Tier>,
    pub slots: usize,
    /// The bucket's batches on the device: `slots` permits, one held from
    /// before a batch is gathered until its readback is answered.
    pub in_flight: Arc<Semaphore>,
    /// Told when one of the bucket's batches has been answered.
    pub finished: Notify,
    pub encoder: Arc<BertEncoder>,
    pub window: Duration,
    pub stats: Arc<Stats>,
}

/// Batch tiers for a bucket of `batch`: powers of two below it, then it.
pub(crate) fn tier_sizes(batch: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n < batch)
        .collect();
    sizes.push(batch);
    sizes
}

impl BucketWorker {
    /// The pool of `tier`, preparing it on first use off the batching
    /// thread.
    async fn model(&self, tier: &Tier) -> Result<PreparedModel> {
        tier.model
            .get_or_try_init(|| async {
                let encoder = Arc::clone(&self.encoder);
                let (batch, seq, slots) = (tier.batch, self.bucket.seq, self.slots);
                tokio::task::spawn_blocking(move || encoder.prepare(batch, seq, slots))
                    .await
                    .map_err(|e| Error::msg(format!("preparing an encoder pool failed: {e}")))?
            })
            .await
            .cloned()
    }

    /// Prepare every tier's pool now (building graphs and compiling
    /// kernels), on the calling thread.
    pub fn prepare_all(&self) -> Result<()> {
        for tier in &self.tiers {
            if tier.model.get().is_none() {
                let model = self
                    .encoder
                    .prepare(tier.batch, self.bucket.seq, self.slots)?;
                let _ = tier.model.set(model);
            }
        }
        Ok(())
    }

    /// Serve `queue` until every sender is gone and the queue is drained.
    pub async fn run(self: Arc<Self>, mut queue: mpsc::Receiver<Job>) {
        while let Some(first) = queue.recv().await {
            // Gathering only once a place is free lets the batch take
            // everything that queued while the device was busy.
            let Ok(place) = Arc::clone(&self.in_flight).acquire_owned().await else {
                return answer_all(vec![first], &Error::msg("the embedder is closing"));
            };
            let mut jobs = self.gather(first, &mut queue).await;
            self.fill_while_busy(&mut jobs, &mut queue).await;
            self.stats.queued.fetch_sub(jobs.len(), Ordering::Relaxed);
            jobs.retain(|job| !job.reply.is_closed());
            if !jobs.is_empty() {
                self.submit(jobs, place).await;
            }
        }
    }

    /// While another of the bucket's batches is on the device, keep taking
    /// sentences until the batch is full or the device has none of the
    /// bucket's batches left: a partial batch started beside a running
    /// one would split the load into small batches (each answered batch's
    /// callers come back a moment later, and the first of them would go
    /// alone), and a small batch uses the device poorly. A lone batch is
    /// never held back.
    async fn fill_while_busy(&self, jobs: &mut Vec<Job>, queue: &mut mpsc::Receiver<Job>) {
        // This batch holds one place; the others free are not running.
        let busy = || self.in_flight.available_permits() + 1 < self.slots;
        while jobs.len() < self.bucket.batch && busy() {
            tokio::select! {
                job = queue.recv() => match job {
                    Some(job) => jobs.push(job),
                    None => break,
                },
                () = self.finished.notified() => {}
            }
        }
    }

    /// `first` and whatever else is queued, up to the bucket's batch,
    /// waiting at most the window after `first` for more.
    async fn gather(&self, first: Job, queue: &mut mpsc::Receiver<Job>) -> Vec<Job> {
        let deadline = Instant::now() + self.window;
        let mut jobs = vec![first];
        while jobs.len() < self.bucket.batch {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) if self.window.is_zero() => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, queue.recv()).await {
                        Ok(Some(job)) => jobs.push(job),
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }
        jobs
    }

    /// Run `jobs` as one inference of the smallest tier that holds them;
    /// a task answers them when the readback lands, then gives `place`
    /// back.
    async fn submit(self: &Arc<Self>, jobs: Vec<Job>, place: OwnedSemaphorePermit) {
        let Some(tier) = self.tiers.iter().find(|t| t.batch >= jobs.len()) else {
            let e = Error::msg(format!(
                "{} sentences exceed the bucket's batch",
                jobs.len()
            ));
            return answer_all(jobs, &e);
        };
        let slot = match self.model(tier).await {
            Ok(model) => model.acquire().await,
            Err(e) => Err(e),
        };
        let sentences: Vec<&[u32]> = jobs.iter().map(|j| j.ids.as_slice()).collect();
        let seq = self.bucket.seq;
        let readback = slot
            .and_then(|slot| {
                slot.submit_host_with(|input, staging| {
                    self.encoder.write_input(&sentences, seq, input, staging)
                })
            })
            .and_then(|inference| inference.download());
        match readback {
            Ok(readback) => {
                let tokens = sentences.iter().map(|s| s.len()).sum();
                self.stats.record_batch(jobs.len(), tokens);
                self.stats.running.fetch_add(1, Ordering::Relaxed);
                let width = self.encoder.config().hidden;
                let stats = self.stats.clone();
                let worker = Arc::clone(self);
                tokio::spawn(async move {
                    let outputs = readback.await;
                    stats.running.fetch_sub(1, Ordering::Relaxed);
                    answer(jobs, width, outputs);
                    drop(place);
                    worker.finished.notify_one();
                });
            }
            Err(e) => answer_all(jobs, &e),
        }
    }
}

/// Split a batch's embeddings (rows of `width` f32) back to its sentences.
fn answer(jobs: Vec<Job>, width: usize, outputs: Result<Vec<Vec<u8>>>) {
    let bytes = match outputs {
        Ok(mut outputs) if outputs.len() == 1 => outputs.remove(0),
        Ok(outputs) => {
            let e = Error::msg(format!("the encoder gave {} outputs, not 1", outputs.len()));
            return answer_all(jobs, &e);
        }
        Err(e) => return answer_all(jobs, &e),
    };
    for (job, row) in jobs.into_iter().zip(bytes.chunks_exact(width * 4)) {
        let vector = row
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        // The caller may have gone away meanwhile; nothing to do then.
        let _ = job.reply.send(Ok(vector));
    }
}

fn answer_all(jobs: Vec<Job>, error: &Error) {
    for job in jobs {
        let _ = job.reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::tier_sizes;

    #[test]
    fn tiers_double_up_to_the_batch() {
        assert_eq!(tier_sizes(1), [1]);
        assert_eq!(tier_sizes(16), [1, 2, 4, 8, 16]);
        assert_eq!(tier_sizes(42), [1, 2, 4, 8, 16, 32, 42]);
    }
}
