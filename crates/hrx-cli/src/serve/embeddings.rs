//! `POST /v1/embeddings`: check the request, tokenize its texts, embed on
//! the least-loaded replica, answer in input order (large bodies, texts
//! and answers handled off the server's threads: [`offload`]).

use super::{
    errors::ApiError,
    offload,
    request::{self, Inputs},
    response,
    state::Shared,
};
use axum::{
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use hrx::models::embed::Replicas;

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
    let limits = state.limits;
    let inline = body.len() <= offload::INLINE_BODY_BYTES;
    let request = offload::run(inline, "reading the request", move || {
        request::parse(&body, &limits)
    })
    .await??;
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
    let (model, encoding) = (request.model, request.encoding);
    let inline = inputs <= offload::INLINE_ANSWER_EMBEDDINGS;
    let encode = move || serde_json::to_vec(&response::list(&model, embeddings, encoding));
    let body = offload::run(inline, "writing the answer", encode)
        .await?
        .map_err(|e| ApiError::internal(format!("writing the answer failed: {e}")))?;
    let json = HeaderValue::from_static("application/json");
    Ok(([(header::CONTENT_TYPE, json)], body).into_response())
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
    let inline = texts.iter().map(String::len).sum::<usize>() <= offload::INLINE_TEXT_BYTES;
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
    offload::run(inline, "tokenizing", run).await?
}
