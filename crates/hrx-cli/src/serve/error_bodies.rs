//! Every error answer carries OpenAI's error object: the answers that the
//! router and the layers make without one (no route, wrong method, body
//! too large, timeout) get one here.

use super::errors::ApiError;
use axum::{
    extract::Request,
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};

/// Middleware: replace the body of an error answer that is not JSON.
pub async fn openai_errors(request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let mut replaced = ApiError::for_status(status, &method, &path).into_response();
        // Keep what the router said about the route (`Allow` on a 405).
        if let Some(allow) = response.headers().get(header::ALLOW) {
            replaced.headers_mut().insert(header::ALLOW, allow.clone());
        }
        return replaced;
    }
    response
}

/// The fallback of unknown routes.
pub async fn not_found() -> axum::http::StatusCode {
    axum::http::StatusCode::NOT_FOUND
}
