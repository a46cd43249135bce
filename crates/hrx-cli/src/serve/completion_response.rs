//! The answers of the completion endpoints in OpenAI's shapes: a whole
//! `text_completion` / `chat.completion`, or the chunks of a stream
//! (`data: {...}` server-sent events, then `data: [DONE]`).

use super::{completion_request::Endpoint, errors::ApiError};
use axum::response::sse::Event;
use futures_core::Stream;
use hrx::models::llama::{FinishReason, Generation, GenerationEvent, TokenStream};
use serde_json::{Value, json};
use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

/// What every answer of one request repeats.
#[derive(Clone, Debug)]
pub struct Header {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Header {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
        }
    }

    fn with_choices(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// The whole answer of a finished generation.
pub fn whole(header: &Header, generation: &Generation) -> Value {
    let reason = generation.reason.as_str();
    let choice = match header.endpoint {
        Endpoint::Completions => json!({
            "index": 0,
            "text": generation.text,
            "logprobs": null,
            "finish_reason": reason,
        }),
        Endpoint::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": generation.text},
            "logprobs": null,
            "finish_reason": reason,
        }),
    };
    let mut body = header.with_choices(false, json!([choice]));
    body["usage"] = usage(generation.prompt_tokens, generation.ids.len());
    body
}

/// One streamed piece of text, or the final reason.
fn chunk(header: &Header, text: Option<&str>, reason: Option<FinishReason>) -> Value {
    let reason = reason.map(FinishReason::as_str);
    let choice = match header.endpoint {
        Endpoint::Completions => json!({
            "index": 0,
            "text": text.unwrap_or(""),
            "logprobs": null,
            "finish_reason": reason,
        }),
        Endpoint::Chat => {
            let delta = match text {
                Some(text) => json!({"content": text}),
                None => json!({}),
            };
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": reason})
        }
    };
    header.with_choices(true, json!([choice]))
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

/// Server-sent events of one generation. Dropping it (the client went
/// away) drops the token stream, which cancels the generation.
pub struct Chunks {
    header: Header,
    tokens: TokenStream,
    include_usage: bool,
    /// Events ready to send before polling for more.
    ready: std::collections::VecDeque<Event>,
    done: bool,
}

impl Chunks {
    pub fn new(header: Header, tokens: TokenStream, include_usage: bool) -> Self {
        let mut ready = std::collections::VecDeque::new();
        if header.endpoint == Endpoint::Chat {
            // The first chat chunk names the role.
            let mut first = header.with_choices(
                true,
                json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                        "logprobs": null, "finish_reason": null}]),
            );
            if include_usage {
                first["usage"] = Value::Null;
            }
            ready.push_back(data(&first));
        }
        Chunks {
            header,
            tokens,
            include_usage,
            ready,
            done: false,
        }
    }

    /// The events that `event` becomes.
    fn take(&mut self, event: hrx::Result<GenerationEvent>) {
        match event {
            Ok(GenerationEvent::Token { text, .. }) => {
                if !text.is_empty() {
                    let value = chunk(&self.header, Some(&text), None);
                    self.ready.push_back(data(&value));
                }
            }
            Ok(GenerationEvent::Finished {
                reason,
                prompt_tokens,
                completion_tokens,
                text,
            }) => {
                if !text.is_empty() {
                    let value = chunk(&self.header, Some(&text), None);
                    self.ready.push_back(data(&value));
                }
                let value = chunk(&self.header, None, Some(reason));
                self.ready.push_back(data(&value));
                if self.include_usage {
                    let mut last = self.header.with_choices(true, json!([]));
                    last["usage"] = usage(prompt_tokens, completion_tokens);
                    self.ready.push_back(data(&last));
                }
                self.finish();
            }
            Err(e) => {
                let error = ApiError::internal(format!("generation failed: {e}"));
                self.ready.push_back(data(&error.body()));
                self.finish();
            }
        }
    }

    fn finish(&mut self) {
        self.ready.push_back(Event::default().data("[DONE]"));
        self.done = true;
    }
}

impl Stream for Chunks {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut self.tokens).poll_next(cx) {
                Poll::Ready(Some(event)) => self.take(event),
                Poll::Ready(None) => {
                    let error = ApiError::internal("the generation ended without finishing");
                    self.ready.push_back(data(&error.body()));
                    self.finish();
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
