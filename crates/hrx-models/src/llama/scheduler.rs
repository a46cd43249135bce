//! Continuous batching: one thread owns the step graphs and the caches and
//! runs steps back to back. Each step carries one row for every sequence
//! that is decoding and fills the rest of its rows with the prompts of
//! sequences still in prefill; new sequences take a free cache slot
//! between steps and finished or cancelled ones give theirs back, so no
//! sequence waits for a batch to drain.

use super::{
    FinishReason, GenerateRequest, GenerationEvent,
    sampling::Sampler,
    step::{Row, StepGraph},
};
use crate::tokenizer::{BpeTokenizer, StreamDecoder};
use hrx_core::{Error, Result};
use hrx_runtime::Completion;
use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
        mpsc::{Receiver, TryRecvError},
    },
    time::Duration,
};
use tokio::sync::mpsc::UnboundedSender;

/// What the generator sends its thread.
pub(crate) enum Command {
    Generate(Job),
    /// Cancel everything and end the thread.
    Shutdown,
}

/// A request with the channel its events go to.
pub(crate) struct Job {
    pub request: GenerateRequest,
    pub events: UnboundedSender<Result<GenerationEvent>>,
}

/// Counters the generator shares with its users (metrics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Requests accepted and not yet given a cache slot.
    pub waiting: AtomicUsize,
    /// Sequences holding a cache slot.
    pub active: AtomicUsize,
    pub steps: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
}

/// The step graphs, by ascending rows: decode tiers of 1, 2, 4, ... rows
/// up to one row per cache slot, then the prefill rows; a step runs on the
/// smallest that holds its rows.
pub(crate) struct Steps {
    pub graphs: Vec<StepGraph>,
    pub slots: usize,
    pub eos: Option<u32>,
    /// How long a step's completion is polled before sleeping (`None`:
    /// the runtime's default wait).
    pub spin: Option<Duration>,
}

impl Steps {
    fn max_rows(&self) -> usize {
        self.graphs.last().map_or(0, |g| g.rows)
    }

    fn for_rows(&self, rows: usize) -> &StepGraph {
        self.graphs
            .iter()
            .find(|g| g.rows >= rows)
            .unwrap_or_else(|| self.graphs.last().expect("at least one step graph"))
    }
}

/// Row counts of the step graphs for `slots` cache slots and
/// `prefill_rows` prompt rows: powers of two below `slots`, `slots`, then
/// `prefill_rows` when larger.
pub(crate) fn tiers(slots: usize, prefill_rows: usize) -> Vec<usize> {
    let mut rows: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n < slots)
        .collect();
    rows.push(slots);
    if prefill_rows > slots {
        rows.push(prefill_rows);
    }
    rows
}

/// One sequence holding a cache slot.
struct Sequence<'t> {
    slot: usize,
    tokens: Vec<u32>,
    prompt_len: usize,
    /// Tokens whose keys and values are in the cache.
    cached: usize,
    max_new: usize,
    sampler: Sampler,
    stop: Vec<String>,
    stop_at_eos: bool,
    eos: Option<u32>,
    decoder: StreamDecoder<'t>,
    /// Generated text, and how much of it has been sent.
    text: String,
    sent: usize,
    events: UnboundedSender<Result<GenerationEvent>>,
}

impl Sequence<'_> {
    fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    fn finish(&mut self, reason: FinishReason, end: usize) {
        let text = self.text[self.sent..end].to_owned();
        self.sent = end;
        let _ = self.events.send(Ok(GenerationEvent::Finished {
            reason,
            prompt_tokens: self.prompt_len,
            completion_tokens: self.generated(),
            text,
        }));
    }

    /// Takes the new token `id`; whether the sequence is finished.
    fn accept(&mut self, id: u32) -> bool {
        if self.stop_at_eos && Some(id) == self.eos {
            // Bytes of an unfinished char go out as U+FFFD, as at the end
            // of any generation.
            let rest = self.decoder.finish();
            self.text.push_str(&rest);
            let end = self.text.len();
            self.finish(FinishReason::Stop, end);
            return true;
        }
        self.tokens.push(id);
        match self.decoder.push(id) {
            Ok(piece) => self.text.push_str(&piece),
            Err(e) => {
                let _ = self.events.send(Err(e));
                return true;
            }
        }
        if self.generated() >= self.max_new {
            self.text.push_str(&self.decoder.finish());
        }
        // A stop string ends the text where it begins.
        if let Some(at) = self.stop_at().map(|at| at.max(self.sent)) {
            let _ = self.events.send(Ok(GenerationEvent::Token {
                id,
                text: String::new(),
            }));
            self.finish(FinishReason::Stop, at);
            return true;
        }
        let release = if self.generated() >= self.max_new {
            self.text.len()
        } else {
            self.text.len() - self.held_back()
        };
        let piece = self.text[self.sent..release.max(self.sent)].to_owned();
        self.sent = self.sent.max(release);
        let _ = self
            .events
            .send(Ok(GenerationEvent::Token { id, text: piece }));
        if self.generated() >= self.max_new {
            let end = self.text.len();
            self.finish(FinishReason::Length, end);
            return true;
        }
        false
    }

    /// Where the first stop string begins in the generated text.
    fn stop_at(&self) -> Option<usize> {
        let longest = self.stop.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.sent.saturating_sub(longest);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.stop
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|i| from + i))
            .min()
    }

    /// Bytes at the end of the text that may begin a stop string.
    fn held_back(&self) -> usize {
        let text = &self.text[self.sent..];
        self.stop
            .iter()
            .flat_map(|s| {
                (1..s.len().min(text.len() + 1))
                    .rev()
                    .filter(|&n| s.is_char_boundary(n) && text.ends_with(&s[..n]))
                    .take(1)
            })
            .max()
            .unwrap_or(0)
    }
}

/// One step's rows: decode rows first (one per decoding sequence), then
/// prompt rows up to the budget.
struct Plan {
    rows: Vec<Row>,
    /// (row, sequence): the rows whose next token is wanted.
    picks: Vec<(usize, usize)>,
    /// Rows each sequence contributes.
    taken: Vec<usize>,
}

fn plan(active: &[Sequence<'_>], budget: usize) -> Plan {
    let mut rows: Vec<Row> = Vec::with_capacity(budget);
    let mut picks = Vec::new();
    let mut taken = vec![0usize; active.len()];
    for decoding in [true, false] {
        for (index, seq) in active.iter().enumerate() {
            let remaining = seq.tokens.len() - seq.cached;
            if (remaining == 1) != decoding || rows.len() >= budget {
                continue;
            }
            let n = remaining.min(budget - rows.len());
            rows.extend((seq.cached..seq.cached + n).map(|position| Row {
                token: seq.tokens[position],
                slot: seq.slot,
                position,
            }));
            taken[index] = n;
            if n == remaining {
                picks.push((rows.len() - 1, index));
            }
        }
    }
    Plan { rows, picks, taken }
}

/// The scheduler thread's body: runs until `Shutdown` or until every
/// generator handle is gone, then cancels what is left.
pub(crate) fn run(
    steps: Steps,
    tokenizer: Arc<BpeTokenizer>,
    commands: Receiver<Command>,
    counters: Arc<Counters>,
) {
    let tokenizer: &BpeTokenizer = &tokenizer;
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut active: Vec<Sequence<'_>> = Vec::new();
    let mut free: Vec<usize> = (0..steps.slots).rev().collect();
    let mut last: Option<Completion> = None;
    let mut open = true;
    while open || !active.is_empty() || !waiting.is_empty() {
        // Intake: wait only when there is nothing to run.
        if open && active.is_empty() && waiting.is_empty() {
            match commands.recv() {
                Ok(Command::Generate(job)) => waiting.push_back(job),
                Ok(Command::Shutdown) | Err(_) => open = false,
            }
        }
        while open {
            match commands.try_recv() {
                Ok(Command::Generate(job)) => waiting.push_back(job),
                Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => open = false,
                Err(TryRecvError::Empty) => break,
            }
        }
        if !open {
            for job in waiting.drain(..) {
                let _ = job.events.send(Err(Error::Cancelled));
                counters.waiting.fetch_sub(1, Ordering::Relaxed);
            }
            for seq in active.drain(..) {
                let _ = seq.events.send(Err(Error::Cancelled));
            }
            counters.active.store(0, Ordering::Relaxed);
            break;
        }
        // Cancelled sequences (their stream dropped) leave now.
        active.retain(|seq| {
            let keep = !seq.events.is_closed();
            if !keep {
                free.push(seq.slot);
            }
            keep
        });
        // Admission: a free cache slot for each waiting request.
        while let Some(&slot) = free.last() {
            let Some(job) = waiting.pop_front() else {
                break;
            };
            counters.waiting.fetch_sub(1, Ordering::Relaxed);
            if job.events.is_closed() {
                continue;
            }
            free.pop();
            let request = job.request;
            counters
                .prompt_tokens
                .fetch_add(request.prompt.len() as u64, Ordering::Relaxed);
            active.push(Sequence {
                slot,
                prompt_len: request.prompt.len(),
                tokens: request.prompt,
                cached: 0,
                max_new: request.max_new_tokens,
                sampler: Sampler::new(request.sampling),
                stop: request.stop,
                stop_at_eos: request.stop_at_eos,
                eos: steps.eos,
                decoder: StreamDecoder::new(tokenizer),
                text: String::new(),
                sent: 0,
                events: job.events,
            });
        }
        // Sequences asked for no new token finish before any step.
        active.retain_mut(|seq| {
            if seq.max_new == 0 {
                seq.finish(FinishReason::Length, 0);
                free.push(seq.slot);
                false
            } else {
                true
            }
        });
        counters.active.store(active.len(), Ordering::Relaxed);
        if active.is_empty() {
            continue;
        }
        let Plan { rows, picks, taken } = plan(&active, steps.max_rows());
        let graph = steps.for_rows(rows.len());
        let pick_rows: Vec<usize> = picks.iter().map(|&(row, _)| row).collect();
        let after: Vec<Completion> = last.iter().cloned().collect();
        // Sampled picks' candidates: the top-k, run after the step (greedy
        // steps neither run it nor build its inputs).
        let sampled = picks
            .iter()
            .any(|&(_, index)| !active[index].sampler.is_greedy());
        let outcome = graph
            .submit(&rows, &pick_rows, &after)
            .and_then(|done| {
                let candidates = if sampled {
                    let temperatures: Vec<f32> = picks
                        .iter()
                        .map(|&(_, index)| active[index].sampler.temperature())
                        .collect();
                    graph.submit_candidates(&temperatures, &done)?
                } else {
                    None
                };
                let done = candidates.unwrap_or(done);
                match steps.spin {
                    Some(spin) => done.wait_spinning(spin)?,
                    None => done.wait()?,
                }
                Ok(done)
            })
            .and_then(|done| Ok((graph.read_next(picks.len())?, done)));
        counters.steps.fetch_add(1, Ordering::Relaxed);
        let (next, done) = match outcome {
            Ok(result) => result,
            Err(error) => {
                // A failed step fails every sequence in it; the caches of
                // their slots are rewritten by whoever takes them next.
                for seq in active.drain(..) {
                    let _ = seq.events.send(Err(error.clone()));
                    free.push(seq.slot);
                }
                counters.active.store(0, Ordering::Relaxed);
                last = None;
                continue;
            }
        };
        last = Some(done.clone());
        for (index, n) in taken.iter().enumerate() {
            active[index].cached += n;
        }
        let mut finished = vec![false; active.len()];
        for (pick, &(_, index)) in picks.iter().enumerate() {
            let seq = &mut active[index];
            let full_row = || graph.read_logits(pick, &done);
            // A step with a sampled pick ran the candidates' graph where
            // the step graph has one; without, the draw reads the row.
            let id = if seq.sampler.is_greedy() {
                Ok(next[pick])
            } else {
                graph
                    .read_candidates(pick)
                    .and_then(|candidates| match candidates {
                        Some(c) => seq.sampler.sample_candidates(&c, full_row),
                        None => full_row().map(|logits| seq.sampler.sample(&logits)),
                    })
            };
            match id {
                Ok(id) => {
                    counters.generated_tokens.fetch_add(1, Ordering::Relaxed);
                    finished[index] = seq.accept(id);
                }
                Err(error) => {
                    let _ = seq.events.send(Err(error));
                    finished[index] = true;
                }
            }
        }
        let mut index = 0;
        active.retain(|seq| {
            let done = finished[index];
            index += 1;
            if done {
                free.push(seq.slot);
            }
            !done
        });
        counters.active.store(active.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tiers_double_up_to_the_slots_then_take_the_prompt_rows() {
        assert_eq!(super::tiers(1, 1), [1]);
        assert_eq!(super::tiers(4, 32), [1, 2, 4, 32]);
        assert_eq!(super::tiers(6, 4), [1, 2, 4, 6]);
        assert_eq!(super::tiers(64, 512), [1, 2, 4, 8, 16, 32, 64, 512]);
    }
}
