//! `--api-key`: /v1 routes require `Authorization: Bearer KEY`.

use super::{errors::ApiError, state::Shared};
use axum::{
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};

/// Middleware: pass requests that carry the key (or every request when
/// the server has none), answer 401 otherwise.
pub async fn require_key(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let Some(key) = &state.api_key else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match given {
        None => ApiError::unauthorized(
            "You didn't provide an API key. Send it as `Authorization: Bearer KEY`.",
        )
        .into_response(),
        Some(given) if !same(given.as_bytes(), key.as_bytes()) => {
            ApiError::unauthorized("Incorrect API key provided.").into_response()
        }
        Some(_) => next.run(request).await,
    }
}

/// The token of a `Bearer` authorization (the scheme in any case).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Equality that takes as long whichever byte differs.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("abc"), None);
        assert!(same(b"key", b"key") && !same(b"key", b"kez") && !same(b"key", b"keys"));
    }
}
