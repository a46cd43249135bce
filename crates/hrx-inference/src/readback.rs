//! Owned asynchronous readback of one tensor.

use hrx_core::Result;
use hrx_runtime::{Buffer, Completion};
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

/// Owned asynchronous readback of a tensor, made by
/// [`ModelContext::download`](crate::ModelContext::download). It owns its
/// host staging; dropping it never invalidates queued work.
#[derive(Debug)]
pub struct TensorReadback {
    buffer: Option<Buffer>,
    completion: Completion,
}

impl TensorReadback {
    pub(crate) fn new(buffer: Option<Buffer>, completion: Completion) -> Self {
        TensorReadback { buffer, completion }
    }

    /// The readback's completion, for polling, awaiting or cancelling.
    pub fn completion(&self) -> &Completion {
        &self.completion
    }

    /// Wait, then return the tensor's storage bytes (stride gaps included).
    /// A failure of the tensor's producer is returned instead.
    pub fn wait(self) -> Result<Vec<u8>> {
        self.completion.wait()?;
        self.bytes()
    }

    fn bytes(&self) -> Result<Vec<u8>> {
        match &self.buffer {
            Some(buffer) => Ok(buffer.map_read()?.to_vec()),
            None => Ok(Vec::new()),
        }
    }
}

impl Future for TensorReadback {
    type Output = Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.completion).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Ready(Ok(())) => Poll::Ready(self.bytes()),
        }
    }
}
