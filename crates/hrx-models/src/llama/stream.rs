//! What a generation request is and what comes back: its settings, the
//! stream of token events, and the collected result.

use super::Sampling;
use hrx_core::{Error, Result};
use std::{
    pin::Pin,
    task::{Context, Poll},
};
use tokio::sync::mpsc;

/// One generation: a prompt's token ids and how to continue it.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    /// The prompt, already tokenised (see
    /// [`Generator::encode`](super::Generator::encode)); not empty.
    pub prompt: Vec<u32>,
    /// The most new tokens; the prompt plus these must fit the context.
    pub max_new_tokens: usize,
    /// Greedy, or sampled with a seed.
    pub sampling: Sampling,
    /// Text that ends the generation when it appears; it is not part of
    /// the text returned.
    pub stop: Vec<String>,
    /// Whether the end-of-sequence token ends the generation (it is then
    /// not part of the result). Off, generation runs to `max_new_tokens`.
    pub stop_at_eos: bool,
}

impl GenerateRequest {
    /// Greedy generation of at most `max_new_tokens` after `prompt`,
    /// stopping at the end-of-sequence token.
    pub fn greedy(prompt: Vec<u32>, max_new_tokens: usize) -> Self {
        GenerateRequest {
            prompt,
            max_new_tokens,
            sampling: Sampling::greedy(),
            stop: Vec::new(),
            stop_at_eos: true,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The end-of-sequence token or a stop string.
    Stop,
    /// `max_new_tokens` were generated.
    Length,
}

impl FinishReason {
    /// The OpenAI API's name: `"stop"` or `"length"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One event of a generation's stream.
#[derive(Clone, Debug, PartialEq)]
pub enum GenerationEvent {
    /// A new token and the text it completes (possibly empty: a char may
    /// span tokens, and text that may begin a stop string is held back).
    Token {
        /// The token id.
        id: u32,
        /// Text released by this token.
        text: String,
    },
    /// The generation ended; no event follows.
    Finished {
        /// Why it ended.
        reason: FinishReason,
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Tokens generated (those in `Token` events).
        completion_tokens: usize,
        /// Text released at the end (held back until then).
        text: String,
    },
}

/// The stream of one generation's events, in order; the last is
/// [`GenerationEvent::Finished`] or an error. Dropping it cancels the
/// generation: its sequence leaves the batch at the next step.
#[derive(Debug)]
pub struct TokenStream {
    pub(crate) events: mpsc::UnboundedReceiver<Result<GenerationEvent>>,
}

/// A finished generation, collected.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated ids (without a stopping end-of-sequence token).
    pub ids: Vec<u32>,
    /// Their text, up to any stop string.
    pub text: String,
    /// Why it ended.
    pub reason: FinishReason,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
}

impl TokenStream {
    /// The next event, or `None` after the last.
    pub async fn next(&mut self) -> Option<Result<GenerationEvent>> {
        self.events.recv().await
    }

    /// [`next`](Self::next), waiting on this thread (not inside an async
    /// runtime).
    pub fn blocking_next(&mut self) -> Option<Result<GenerationEvent>> {
        self.events.blocking_recv()
    }

    /// Collects the whole generation, waiting on this thread.
    pub fn collect_blocking(mut self) -> Result<Generation> {
        let mut ids = Vec::new();
        let mut text = String::new();
        while let Some(event) = self.blocking_next() {
            if let Some(done) = collect_event(event?, &mut ids, &mut text) {
                return Ok(done);
            }
        }
        Err(ended())
    }

    /// Collects the whole generation.
    pub async fn collect(mut self) -> Result<Generation> {
        let mut ids = Vec::new();
        let mut text = String::new();
        while let Some(event) = self.next().await {
            if let Some(done) = collect_event(event?, &mut ids, &mut text) {
                return Ok(done);
            }
        }
        Err(ended())
    }
}

fn ended() -> Error {
    Error::Message("the generator stopped before the generation finished".into())
}

fn collect_event(
    event: GenerationEvent,
    ids: &mut Vec<u32>,
    text: &mut String,
) -> Option<Generation> {
    match event {
        GenerationEvent::Token { id, text: piece } => {
            ids.push(id);
            text.push_str(&piece);
            None
        }
        GenerationEvent::Finished {
            reason,
            prompt_tokens,
            text: rest,
            ..
        } => {
            text.push_str(&rest);
            Some(Generation {
                ids: std::mem::take(ids),
                text: std::mem::take(text),
                reason,
                prompt_tokens,
            })
        }
    }
}

impl futures_core::Stream for TokenStream {
    type Item = Result<GenerationEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}
