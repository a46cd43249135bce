//! OpenAI's error object, `{"error": {"message", "type", "param",
//! "code"}}`, with the HTTP status that goes with it.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

/// Seconds a client should wait before retrying a 429.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Fields<'a>,
}

#[derive(Serialize)]
struct Fields<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 400: the request is malformed; `param` names the field at fault.
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            param,
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 401: the API key is missing or wrong.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
            .with_code("invalid_api_key")
    }

    /// 404: no such model here.
    pub fn model_not_found(model: &str) -> Self {
        ApiError {
            param: Some("model"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("The model `{model}` does not exist."),
            )
            .with_code("model_not_found")
        }
    }

    /// 415: the body is not declared as JSON.
    pub fn unsupported_media_type(found: &str) -> Self {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!("send the body as JSON with `Content-Type: application/json` (found {found})"),
        )
        .with_code("unsupported_media_type")
    }

    /// 429: every queue is full; retry later.
    pub fn busy() -> Self {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "requests",
            format!("the request queue is full; retry after {RETRY_AFTER_SECONDS} s"),
        )
        .with_code("rate_limit_exceeded")
    }

    /// 400: the prompt plus the tokens asked for exceed the context.
    pub fn context_length(context: usize, prompt: usize, completion: usize) -> Self {
        ApiError {
            param: Some("messages"),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!(
                    "This model's maximum context length is {context} tokens. However, you \
                     requested {} tokens ({prompt} in the prompt, {completion} in the \
                     completion).",
                    prompt + completion
                ),
            )
            .with_code("context_length_exceeded")
        }
    }

    /// The JSON error object, for a body or a streamed event.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }

    /// 503: the server is shutting down.
    pub fn draining() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the server is shutting down; send the request to another replica",
        )
        .with_code("shutting_down")
    }

    /// 503: no device can serve.
    pub fn unavailable() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "no device of this server is healthy",
        )
        .with_code("unavailable")
    }

    /// 500: the server failed.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error for a bare `status` that a layer or the router produced
    /// (no route, wrong method, body too large, timeout), for `method`
    /// and `path`.
    pub fn for_status(status: StatusCode, method: &str, path: &str) -> Self {
        match status {
            StatusCode::NOT_FOUND => ApiError::new(
                status,
                "invalid_request_error",
                format!("Invalid URL ({method} {path})"),
            )
            .with_code("unknown_url"),
            StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
                status,
                "invalid_request_error",
                format!("{method} is not allowed on {path}"),
            )
            .with_code("method_not_allowed"),
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                status,
                "invalid_request_error",
                "the request body is larger than this server accepts (--max-body-bytes)",
            )
            .with_code("request_too_large"),
            StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                "the request took longer than this server allows (--timeout-ms)",
            )
            .with_code("timeout"),
            s if s.is_client_error() => ApiError::new(
                s,
                "invalid_request_error",
                s.canonical_reason().unwrap_or("invalid request"),
            ),
            s => ApiError::new(
                s,
                "server_error",
                s.canonical_reason().unwrap_or("server error"),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Fields {
                message: &self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_statuses_become_openai_errors() {
        let e = ApiError::for_status(StatusCode::NOT_FOUND, "GET", "/v2/x");
        assert_eq!(
            (e.kind, e.code),
            ("invalid_request_error", Some("unknown_url"))
        );
        assert!(e.message.contains("GET /v2/x"));
        assert_eq!(
            ApiError::for_status(StatusCode::REQUEST_TIMEOUT, "POST", "/").status,
            504
        );
        assert_eq!(
            ApiError::for_status(StatusCode::BAD_GATEWAY, "POST", "/").kind,
            "server_error"
        );
    }

    #[test]
    fn busy_says_when_to_retry() {
        let response = ApiError::busy().into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
