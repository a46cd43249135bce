//! Long work off the server's threads: parsing a large body, tokenizing
//! long texts and encoding many embeddings run on tokio's blocking
//! threads, so that the runtime's threads (one, where the server
//! busy-polls) keep answering the other connections meanwhile. Small work
//! stays inline, where a thread hop would cost more than the work.

use super::errors::ApiError;

/// Request bodies up to this many bytes are parsed inline.
pub const INLINE_BODY_BYTES: usize = 64 << 10;
/// Texts up to this many bytes in all are tokenized inline.
pub const INLINE_TEXT_BYTES: usize = 16 << 10;
/// Answers of up to this many embeddings are encoded inline (a 384-wide
/// vector takes a few microseconds as base64, tens as JSON numbers).
pub const INLINE_ANSWER_EMBEDDINGS: usize = 32;

/// `work`, here where `inline`, else on a blocking thread; `what` names it
/// in the error if that thread fails.
pub async fn run<T: Send + 'static>(
    inline: bool,
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    if inline {
        return Ok(work());
    }
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("{what} failed: {e}")))
}
