//! Batch sizes from the embedders' counters: every few milliseconds, the
//! slot submissions and sentences each replica added since the last look
//! become batch-size observations (exact when one batch was added, their
//! mean otherwise).

use super::state::Shared;
use std::time::Duration;

/// How often the counters are read.
pub const PERIOD: Duration = Duration::from_millis(5);

/// Sample until the task is dropped.
pub async fn sample(state: Shared) {
    let Some((_, replicas)) = &state.embeddings else {
        return;
    };
    let mut last: Vec<_> = (0..replicas.len())
        .map(|i| replicas.embedder(i).stats())
        .collect();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        for (i, last) in last.iter_mut().enumerate() {
            let now = replicas.embedder(i).stats();
            let batches = now.batches.saturating_sub(last.batches);
            let sentences = now.sentences.saturating_sub(last.sentences);
            state.metrics.record_batches(i, sentences, batches);
            *last = now;
        }
    }
}
