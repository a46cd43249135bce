//! `POST /v1/embeddings`: check the request, tokenize its texts, embed on
//! the least-loaded replica, answer in input order.

use super::{
    errors::ApiError,
    request::{self, Inputs},
    response,
    state::Shared,
};
use axum::{
    Json,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use hrx::models::embed::Replicas;

/// Texts longer than this (in bytes, all together) are tokenized on a
/// blocking thread rather than on the server's.
const INLINE_TOKENIZE_BYTES: usize = 16 << 10;

pub async fn embeddings(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let _in_flight = state.metrics.in_flight();
    if state.is_draining() {
        return Err(ApiError::draining());
    }
    check_content_type(&headers)?;
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::for_status(rejection.status(), "POST", "/v1/embeddings")
        }
        _ => ApiError::invalid(
            format!("cannot read the request body: {}", rejection.body_text()),
            None,
        ),
    })?;
    let request = request::parse(&body, &state.limits)?;
    drop(body);
    let replicas = state.embedding_model(&request.model)?;
    if replicas.healthy() == 0 {
        return Err(ApiError::unavailable());
    }
    let ids = match request.inputs {
        Inputs::Ids(ids) => ids,
        Inputs::Texts(texts) => tokenize(replicas, texts).await?,
    };
    let inputs = ids.len();
    let embeddings = replicas.try_embed(ids).await.map_err(|e| {
        if e.is_busy() {
            ApiError::busy()
        } else {
            ApiError::internal(format!("embedding failed: {e}"))
        }
    })?;
    let tokens = embeddings.iter().map(|e| e.tokens.len()).sum();
    state.metrics.record_embeddings(inputs, tokens);
    Ok(Json(response::list(&request.model, embeddings, request.encoding)).into_response())
}

/// JSON only: `application/json` (any parameters) or a `+json` type.
pub(super) fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::unsupported_media_type("no Content-Type"));
    };
    let text = value.to_str().unwrap_or("");
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(&format!("`{text}`")))
    }
}

/// Token ids of each text, truncated to the model's limit.
async fn tokenize(replicas: &Replicas, texts: Vec<String>) -> Result<Vec<Vec<u32>>, ApiError> {
    let inline = texts.iter().map(String::len).sum::<usize>() <= INLINE_TOKENIZE_BYTES;
    let replicas = replicas.clone();
    let run = move || {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                replicas.tokenize(t).map_err(|e| {
                    ApiError::invalid(format!("input {i} cannot be tokenized: {e}"), Some("input"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    if inline {
        run()
    } else {
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?
    }
}
