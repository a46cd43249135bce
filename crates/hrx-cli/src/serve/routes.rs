//! The routes and the layers around them.
//!
//! Outermost first: metrics (every answer counted), OpenAI error bodies
//! (for answers the router and layers make), then per route: the API key
//! on /v1 routes, and on the POST routes the body limit (413) and the
//! request timeout (504; for a streamed answer, until its headers).

use super::{
    ServeArgs, auth, completions, embeddings, error_bodies, metrics, probes, state::Shared,
};
use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::StatusCode,
    middleware::{from_fn, from_fn_with_state},
    routing::{get, post},
};
use tower::ServiceBuilder;
use tower_http::{limit::RequestBodyLimitLayer, timeout::TimeoutLayer};

pub fn router(state: Shared, args: &ServeArgs) -> Router {
    let limits = || {
        ServiceBuilder::new()
            .layer(RequestBodyLimitLayer::new(args.max_body_bytes))
            .layer(DefaultBodyLimit::max(args.max_body_bytes))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::GATEWAY_TIMEOUT,
                args.timeout(),
            ))
    };
    let v1 = Router::new()
        .route(
            "/v1/embeddings",
            post(embeddings::embeddings).layer(limits()),
        )
        .route(
            "/v1/completions",
            post(completions::completions).layer(limits()),
        )
        .route(
            "/v1/chat/completions",
            post(completions::chat_completions).layer(limits()),
        )
        .route("/v1/models", get(probes::models))
        .route("/v1/models/{model}", get(probes::model))
        .route_layer(from_fn_with_state(state.clone(), auth::require_key));
    Router::new()
        .merge(v1)
        .route("/health", get(probes::health))
        .route("/ready", get(probes::ready))
        .route("/metrics", get(probes::metrics))
        .fallback(error_bodies::not_found)
        .layer(from_fn(error_bodies::openai_errors))
        .layer(from_fn_with_state(state.clone(), metrics::record))
        .with_state(state)
}
