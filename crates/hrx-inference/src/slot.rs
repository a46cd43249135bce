//! A reserved slot: staging inputs and submitting the slot's graph.

use crate::{inference::Inference, pool::SlotLease};
use hrx_core::{Error, Result};
use hrx_runtime::Completion;
use hrx_tensor::DeviceTensor;

/// An exclusively reserved inference slot. Submitting consumes it; dropping
/// it without submitting releases the slot at once.
pub struct ModelSlot {
    lease: SlotLease,
}

impl std::fmt::Debug for ModelSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSlot")
            .field("index", &self.lease.index())
            .finish()
    }
}

impl ModelSlot {
    pub(crate) fn new(lease: SlotLease) -> Self {
        ModelSlot { lease }
    }

    /// Stage host input bytes into this slot and queue the inference. Each
    /// input must have exactly its tensor's byte count.
    pub fn submit_host(self, inputs: &[&[u8]]) -> Result<Inference> {
        let expected = &self.lease.slot().inputs;
        if inputs.len() != expected.len()
            || inputs
                .iter()
                .zip(expected)
                .any(|(bytes, tensor)| bytes.len() != tensor.desc().bytes())
        {
            return Err(Error::Message(
                "host model input byte count mismatch".into(),
            ));
        }
        self.submit_host_with(|index, destination| {
            destination.copy_from_slice(inputs[index]);
            Ok(())
        })
    }

    /// Publish inputs directly into this slot's host staging, then queue
    /// the inference.
    ///
    /// `write` runs once per input, in order, before any device work is
    /// submitted, and receives the input's whole staging (empty for an
    /// empty input). If it fails, the slot is released without executing
    /// and the error is returned. Bytes it leaves unwritten keep their
    /// previous contents: initialise every byte the graph can read. This
    /// serves packed variable-length inputs without a temporary host
    /// buffer of the full capacity.
    pub fn submit_host_with(
        self,
        mut write: impl FnMut(usize, &mut [u8]) -> Result<()>,
    ) -> Result<Inference> {
        let context = &self.lease.pool().context;
        let upload = self.lease.slot().upload(context)?;
        let combined = self.lease.slot().upload_then_run(context)?;
        for (index, host) in upload.buffers.iter().enumerate() {
            match host {
                Some(host) => write(index, &mut host.map_write()?)?,
                None => write(index, &mut [])?,
            }
        }
        match combined.as_ref() {
            // The upload and the model in one submission.
            Some(graph) => {
                let completion = graph.submit_after(&[])?;
                self.lease.record(&completion);
                Ok(Inference::new(self.lease, completion))
            }
            // Every input is host-visible or empty: nothing to copy.
            None => self.execute(&[]),
        }
    }

    /// Copy device inputs into this slot's fixed addresses and queue the
    /// inference. The copies run after the inputs' producers on the device;
    /// a producer's failure becomes the inference's failure, with no host
    /// wait. Inputs may be outputs of other inferences still running.
    /// Once warm (the slot's copy batch built on first use), a submission
    /// allocates nothing.
    pub fn submit(self, inputs: &[DeviceTensor]) -> Result<Inference> {
        let pool = self.lease.pool();
        let slot = self.lease.slot();
        if inputs.len() != slot.inputs.len() {
            return Err(Error::Message(format!(
                "model input count mismatch: expected {}, got {}",
                slot.inputs.len(),
                inputs.len()
            )));
        }
        for (input, expected) in inputs.iter().zip(&slot.inputs) {
            pool.context.validate(input)?;
            if input.desc() != expected.desc() {
                return Err(Error::Message("model input descriptor mismatch".into()));
            }
        }
        let copy_in = slot.copy_in(&pool.context)?;
        let mut scratch = copy_in.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (sources, producers) = &mut *scratch;
        sources.clear();
        producers.clear();
        for input in inputs {
            producers.push(input.completion().clone());
            sources.extend(input.binding());
        }
        let copied = if sources.is_empty() {
            None
        } else {
            Some(copy_in.batch.submit_after(sources, producers)?)
        };
        let result = match &copied {
            None => self.execute(producers),
            Some(copied) => {
                self.lease.record(copied);
                for input in inputs {
                    crate::pool::keep_slot_until(input, copied);
                }
                self.execute(std::slice::from_ref(copied))
            }
        };
        sources.clear();
        producers.clear();
        result
    }

    /// Queue the slot's graph after `dependencies`.
    fn execute(self, dependencies: &[Completion]) -> Result<Inference> {
        let completion = self.lease.slot().graph.submit_after(dependencies)?;
        self.lease.record(&completion);
        Ok(Inference::new(self.lease, completion))
    }
}
