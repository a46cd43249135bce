//! `POST /v1/completions` and `POST /v1/chat/completions`: check the
//! request, tokenize the prompt (or render the chat), start a generation
//! on the continuously batching generator, and answer it whole or as
//! server-sent events. A client that disconnects drops the answer and,
//! with it, the generation: its sequence leaves the batch at the next
//! step.

use super::{
    completion_request::{self, CompletionRequest, Endpoint, Prompt},
    completion_response::{self, Chunks, Header},
    embeddings::check_content_type,
    errors::ApiError,
    offload,
    state::Shared,
};
use axum::{
    Json,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response, Sse, sse::KeepAlive},
};
use hrx::{
    Error,
    models::llama::{GenerateRequest, Generator},
};
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// New tokens of a completion that names no `max_tokens` (OpenAI's
/// default for completions; a chat may use the rest of the context).
const DEFAULT_COMPLETION_TOKENS: usize = 16;

/// Numbers the answers' ids and the seeds of requests without one.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub async fn completions(
    state: State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    answer(state, headers, body, Endpoint::Completions).await
}

pub async fn chat_completions(
    state: State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    answer(state, headers, body, Endpoint::Chat).await
}

async fn answer(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let path = match endpoint {
        Endpoint::Completions => "/v1/completions",
        Endpoint::Chat => "/v1/chat/completions",
    };
    if state.is_draining() {
        return Err(ApiError::draining());
    }
    check_content_type(&headers)?;
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::for_status(rejection.status(), "POST", path),
        _ => ApiError::invalid(
            format!("cannot read the request body: {}", rejection.body_text()),
            None,
        ),
    })?;
    let number = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let request = completion_request::parse(&body, endpoint, seed(number))?;
    drop(body);
    let generator = Arc::clone(state.generation_model(&request.model)?);
    let prompt = tokenize(&generator, request.prompt.clone()).await?;
    let generation = generation_request(&generator, &request, prompt)?;
    let tokens = generator.generate(generation).map_err(|e| match e {
        Error::Busy(_) => ApiError::busy(),
        e => ApiError::invalid(e.to_string(), None),
    })?;
    let header = Header {
        endpoint,
        id: match endpoint {
            Endpoint::Completions => format!("cmpl-{number}"),
            Endpoint::Chat => format!("chatcmpl-{number}"),
        },
        created: state.created_now(),
        model: request.model.clone(),
    };
    if request.stream {
        let chunks = Chunks::new(header, tokens, request.include_usage);
        Ok(Sse::new(chunks)
            .keep_alive(KeepAlive::default())
            .into_response())
    } else {
        let generation = tokens
            .collect()
            .await
            .map_err(|e| ApiError::internal(format!("generation failed: {e}")))?;
        Ok(Json(completion_response::whole(&header, &generation)).into_response())
    }
}

/// A seed for a request without one: different for every request.
fn seed(number: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The prompt's token ids.
async fn tokenize(generator: &Arc<Generator>, prompt: Prompt) -> Result<Vec<u32>, ApiError> {
    let bytes = match &prompt {
        Prompt::Text(text) => text.len(),
        Prompt::Chat(messages) => messages.iter().map(|m| m.content.len()).sum(),
        Prompt::Ids(_) => 0,
    };
    let generator = Arc::clone(generator);
    let run = move || match prompt {
        Prompt::Text(text) => Ok(generator.encode(&text)),
        Prompt::Ids(ids) => Ok(ids),
        Prompt::Chat(messages) => generator
            .encode_chat(&messages)
            .map_err(|e| ApiError::invalid(e.to_string(), Some("messages"))),
    };
    offload::run(bytes <= offload::INLINE_TEXT_BYTES, "tokenizing", run).await?
}

/// The generation `request` asks for, checked against the context.
fn generation_request(
    generator: &Generator,
    request: &CompletionRequest,
    prompt: Vec<u32>,
) -> Result<GenerateRequest, ApiError> {
    let context = generator.options().context;
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            "the prompt has no tokens",
            Some("prompt"),
        ));
    }
    let room = context.saturating_sub(prompt.len());
    let max_new = match (request.max_tokens, &request.prompt) {
        (Some(n), _) => n,
        (None, Prompt::Chat(_)) => room,
        (None, _) => DEFAULT_COMPLETION_TOKENS.min(room),
    };
    if max_new == 0 || prompt.len() + max_new > context {
        return Err(ApiError::context_length(
            context,
            prompt.len(),
            max_new.max(1),
        ));
    }
    Ok(GenerateRequest {
        prompt,
        max_new_tokens: max_new,
        sampling: request.sampling,
        stop: request.stop.clone(),
        stop_at_eos: true,
    })
}
