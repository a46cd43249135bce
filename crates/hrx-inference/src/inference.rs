//! Submitted inferences and their readbacks.

use crate::pool::SlotLease;
use hrx_core::{Error, Result};
use hrx_runtime::Completion;
use hrx_tensor::DeviceTensor;
use std::{
    any::Any,
    future::Future,
    pin::Pin,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
};

use crate::transfer::Transfer;

/// A submitted inference: its completion and the slot's outputs.
///
/// Dropping it does not cancel the work. Output tensors handed out by
/// [`outputs`](Self::outputs), [`wait`](Self::wait) or awaiting keep the
/// slot reserved until the last of them is dropped.
pub struct Inference {
    completion: Completion,
    lease: SlotLease,
    outputs: OnceLock<Vec<DeviceTensor>>,
}

impl std::fmt::Debug for Inference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inference")
            .field("slot", &self.lease.index())
            .field("completion", &self.completion)
            .finish_non_exhaustive()
    }
}

impl Inference {
    pub(crate) fn new(lease: SlotLease, completion: Completion) -> Self {
        Inference {
            completion,
            lease,
            outputs: OnceLock::new(),
        }
    }

    /// The slot's output tensors, produced by this inference and holding
    /// one shared lease on the slot.
    fn publish(&self) -> Vec<DeviceTensor> {
        let lease: Arc<dyn Any + Send + Sync> = Arc::new(self.lease.share());
        self.lease
            .slot()
            .outputs
            .iter()
            .map(|template| {
                let mut output = template.clone();
                output.set_producer(self.completion.clone());
                output.set_lease(Some(lease.clone()));
                output
            })
            .collect()
    }

    fn take_outputs(&mut self) -> Vec<DeviceTensor> {
        self.outputs.take().unwrap_or_else(|| self.publish())
    }

    /// Queue every output into the slot's reusable host staging (created on
    /// the slot's first readback), after this inference, with no host wait.
    pub fn download(self) -> Result<InferenceReadback> {
        let pool = self.lease.pool();
        let transfer = self.lease.slot().download(&pool.context)?;
        let completion = match transfer.submit_after(std::slice::from_ref(&self.completion))? {
            Some(copied) => {
                self.lease.record(&copied);
                copied
            }
            None => self.completion,
        };
        Ok(InferenceReadback {
            completion,
            lease: self.lease,
            transfer,
        })
    }

    /// The output tensors, usable as inputs of dependent submissions before
    /// this inference completes. They keep the slot reserved while alive.
    pub fn outputs(&self) -> &[DeviceTensor] {
        self.outputs.get_or_init(|| self.publish())
    }

    /// The inference's completion. Cancelling it drains submitted work
    /// safely and does not disable the slot.
    pub fn completion(&self) -> &Completion {
        &self.completion
    }

    /// Wait for successful execution and return the owned output tensors.
    pub fn wait(mut self) -> Result<Vec<DeviceTensor>> {
        self.completion.wait()?;
        Ok(self.take_outputs())
    }
}

impl Future for Inference {
    type Output = Result<Vec<DeviceTensor>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.completion).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Ready(Ok(())) => Poll::Ready(Ok(self.take_outputs())),
        }
    }
}

/// Readback of an inference's outputs into its slot's reusable host
/// staging. It keeps the slot reserved until dropped or consumed.
pub struct InferenceReadback {
    completion: Completion,
    lease: SlotLease,
    transfer: Arc<Transfer>,
}

impl std::fmt::Debug for InferenceReadback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferenceReadback")
            .field("slot", &self.lease.index())
            .field("completion", &self.completion)
            .finish_non_exhaustive()
    }
}

impl InferenceReadback {
    /// Completion of the final device-to-host copy.
    pub fn completion(&self) -> &Completion {
        &self.completion
    }

    /// Wait, then copy the outputs into owned byte vectors.
    pub fn wait(self) -> Result<Vec<Vec<u8>>> {
        self.completion.wait()?;
        self.bytes()
    }

    /// Wait, then copy the outputs into caller-owned buffers without
    /// allocating. `outputs` must hold one buffer per output, each of
    /// exactly the output's byte count; this is checked before waiting.
    pub fn read_into(self, outputs: &mut [&mut [u8]]) -> Result<()> {
        let expected = &self.lease.slot().outputs;
        if outputs.len() != expected.len()
            || outputs
                .iter()
                .zip(expected)
                .any(|(bytes, tensor)| bytes.len() != tensor.desc().bytes())
        {
            return Err(Error::Message("model output byte count mismatch".into()));
        }
        self.completion.wait()?;
        for (out, host) in outputs.iter_mut().zip(&self.transfer.buffers) {
            if let Some(host) = host {
                out.copy_from_slice(&host.map_read()?);
            }
        }
        Ok(())
    }

    fn bytes(&self) -> Result<Vec<Vec<u8>>> {
        self.transfer
            .buffers
            .iter()
            .map(|host| match host {
                Some(host) => Ok(host.map_read()?.to_vec()),
                None => Ok(Vec::new()),
            })
            .collect()
    }
}

impl Future for InferenceReadback {
    type Output = Result<Vec<Vec<u8>>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.completion).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Ready(Ok(())) => Poll::Ready(self.bytes()),
        }
    }
}
