//! The read-only routes: liveness, readiness, the model list, metrics.

use super::{errors::ApiError, exposition, state::Shared};
use axum::{
    Json,
    extract::{Path, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

/// `GET /health`: the process answers.
pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /ready`: 200 while the server takes traffic, 503 while it drains
/// or has no healthy device.
pub async fn ready(State(state): State<Shared>) -> Response {
    let (replicas, healthy) = state
        .embeddings
        .as_ref()
        .map_or((0, 0), |(_, r)| (r.len(), r.healthy()));
    let body = |status: &str| json!({"status": status, "replicas": replicas, "healthy": healthy});
    if state.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, Json(body("draining"))).into_response()
    } else if !state.is_ready() {
        (StatusCode::SERVICE_UNAVAILABLE, Json(body("unhealthy"))).into_response()
    } else {
        Json(body("ready")).into_response()
    }
}

fn model_object(state: &Shared, name: &str) -> Value {
    json!({"id": name, "object": "model", "created": state.created, "owned_by": "hrx"})
}

/// `GET /v1/models`: the served models, in OpenAI's list format.
pub async fn models(State(state): State<Shared>) -> Json<Value> {
    let data: Vec<Value> = state
        .model_names()
        .map(|n| model_object(&state, n))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{model}`.
pub async fn model(
    State(state): State<Shared>,
    Path(model): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if state.model_names().any(|n| n == model) {
        Ok(Json(model_object(&state, &model)))
    } else {
        Err(ApiError::model_not_found(&model))
    }
}

/// `GET /metrics`: the Prometheus text format.
pub async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
        exposition::render(&state),
    )
        .into_response()
}
