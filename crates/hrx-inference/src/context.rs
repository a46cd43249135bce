//! The model context: one runtime domain, its operator library, and tensor
//! allocation and transfers within that domain.

use crate::{pool::keep_slot_until, readback::TensorReadback};
use hrx_core::{Error, Result};
use hrx_runtime::{BufferView, Completion, MemoryPlacement, Runtime, RuntimeOptions};
use hrx_tensor::{DeviceTensor, Ops, TensorDesc};

/// Explicitly shared allocation, compilation and scheduling domain for
/// models. Cheap to clone; clones share the runtime and the operator
/// library, so every model loaded on one context (and its clones) shares
/// one kernel cache: each kernel compiles once per domain, not once per
/// model.
///
/// ```
/// use hrx_inference::ModelContext;
/// use hrx_runtime::RuntimeOptions;
/// use hrx_tensor::{DType, TensorDesc};
/// // No device is opened: empty tensors need none.
/// let context = ModelContext::new(RuntimeOptions::default())?;
/// let empty = context.upload(TensorDesc::new(DType::F32, vec![0, 4])?, &[])?;
/// assert!(empty.binding().is_none());
/// assert!(!context.runtime().is_open());
/// # Ok::<(), hrx_core::Error>(())
/// ```
#[derive(Clone)]
pub struct ModelContext {
    runtime: Runtime,
    ops: Ops,
}

impl std::fmt::Debug for ModelContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelContext")
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

fn invalid(why: &str) -> Error {
    Error::Message(why.into())
}

impl ModelContext {
    /// Construct a context; hardware and compiler initialisation stay lazy.
    pub fn new(options: RuntimeOptions) -> Result<Self> {
        let runtime = Runtime::with_options(options)?;
        Ok(ModelContext {
            ops: Ops::new(&runtime),
            runtime,
        })
    }

    /// The context with `tuning`'s shapes forced on its matmul kernels
    /// (tuning runs and benchmarks; see [`hrx_tensor::ops::Tuning`]).
    pub fn with_tuning(self, tuning: hrx_tensor::ops::Tuning) -> Self {
        ModelContext {
            ops: self.ops.with_tuning(tuning),
            ..self
        }
    }

    /// The runtime shared by every model and tensor of this context.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The operator library of this context's domain, shared by every
    /// model loaded on it: kernels compile for the device's actual target at
    /// first use (opening the device) and are kept for every later user.
    /// Clone it to keep it (clones share the cache).
    pub fn ops(&self) -> &Ops {
        &self.ops
    }

    /// Allocate zero-initialised device-local storage for `desc`. Empty
    /// tensors allocate nothing and need no device.
    pub fn allocate(&self, desc: TensorDesc) -> Result<DeviceTensor> {
        self.allocate_with(desc, MemoryPlacement::GpuLocal)
    }

    /// Allocate a tensor with an explicit placement. Host-visible IO can be
    /// submitted and read back directly, without staging copies.
    pub fn allocate_with(
        &self,
        desc: TensorDesc,
        placement: MemoryPlacement,
    ) -> Result<DeviceTensor> {
        let view = if desc.is_empty() {
            None
        } else {
            Some(self.runtime.allocate(desc.bytes(), placement)?.view())
        };
        DeviceTensor::from_parts(self.runtime.clone(), desc, view, Completion::ready())
    }

    /// Wrap existing storage of this context without copying. `producer`
    /// is the work that initialises the storage; it must belong to this
    /// runtime or have completed already. The view must cover `desc` and be
    /// aligned to its element size.
    pub fn tensor(
        &self,
        desc: TensorDesc,
        view: BufferView,
        producer: Completion,
    ) -> Result<DeviceTensor> {
        producer.validate_runtime(&self.runtime)?;
        if !self.runtime.owns(&view)
            || view.len() < desc.bytes()
            || !view.offset().is_multiple_of(desc.dtype().bytes())
        {
            return Err(invalid(
                "tensor storage has the wrong context, extent, or alignment",
            ));
        }
        let view = if desc.is_empty() {
            None
        } else {
            Some(view.slice(0..desc.bytes())?)
        };
        DeviceTensor::from_parts(self.runtime.clone(), desc, view, producer)
    }

    /// Copy `bytes` into owned staging and queue the upload. The caller may
    /// release or change its source as soon as this returns.
    pub fn upload(&self, desc: TensorDesc, bytes: &[u8]) -> Result<DeviceTensor> {
        if bytes.len() != desc.bytes() {
            return Err(invalid("upload byte count does not match tensor"));
        }
        let mut tensor = self.allocate(desc)?;
        if let Some(destination) = tensor.binding() {
            let staging = self
                .runtime
                .allocate(bytes.len(), MemoryPlacement::HostVisible)?;
            staging.map_write()?.copy_from_slice(bytes);
            let mut graph = self.runtime.graph();
            graph.copy(destination, staging.view())?;
            tensor.set_producer(graph.prepare()?.submit()?);
        }
        Ok(tensor)
    }

    /// Copy a contiguous tensor into a byte-aligned subrange of another.
    ///
    /// Both tensors must be contiguous and of one dtype, and the range must
    /// fit the destination. The copy runs on the device after both
    /// producers; the destination's producer becomes the copy, so a failure
    /// of an earlier write (of either tensor) is carried forward. The
    /// storage of both stays alive (and any slot they lease stays reserved)
    /// until the copy drains, even if the source is dropped.
    pub fn copy_into(
        &self,
        destination: &mut DeviceTensor,
        byte_offset: usize,
        source: &DeviceTensor,
    ) -> Result<()> {
        self.validate(destination)?;
        self.validate(source)?;
        let (to, from) = (destination.desc(), source.desc());
        let end = byte_offset
            .checked_add(from.bytes())
            .filter(|&end| end <= to.bytes())
            .ok_or_else(|| invalid("tensor copy exceeds destination"))?;
        if to.dtype() != from.dtype()
            || !to.is_contiguous()
            || !from.is_contiguous()
            || !byte_offset.is_multiple_of(from.dtype().bytes())
        {
            return Err(invalid("invalid tensor copy dtype, strides or alignment"));
        }
        let Some(from) = source.binding() else {
            // Nothing to move, but the source's producer still decides
            // whether the caller may observe success.
            return source.completion().wait();
        };
        let to = destination
            .binding()
            .ok_or_else(|| invalid("tensor copy exceeds destination"))?
            .slice(byte_offset..end)?;
        let mut graph = self.runtime.graph();
        graph.copy(to, from)?;
        let dependencies = [
            destination.completion().clone(),
            source.completion().clone(),
        ];
        let copied = graph.prepare()?.submit_after(&dependencies)?;
        keep_slot_until(destination, &copied);
        keep_slot_until(source, &copied);
        destination.set_producer(copied);
        Ok(())
    }

    /// Concatenate contiguous tensors along their first axis on the device.
    ///
    /// Inputs must share dtype, layout and trailing dimensions. Empty
    /// inputs are allowed and still order the result after their
    /// producers; scalars and an empty input list are rejected.
    pub fn concatenate(&self, inputs: &[DeviceTensor]) -> Result<DeviceTensor> {
        let first = inputs
            .first()
            .ok_or_else(|| invalid("concatenate needs inputs"))?;
        let prototype = first.desc();
        if prototype.shape().is_empty() || !prototype.is_contiguous() {
            return Err(invalid(
                "concatenate requires contiguous non-scalar tensors",
            ));
        }
        let mut shape = prototype.shape().to_vec();
        shape[0] = 0;
        for input in inputs {
            self.validate(input)?;
            let desc = input.desc();
            if desc.dtype() != prototype.dtype()
                || desc.layout() != prototype.layout()
                || desc.shape().len() != prototype.shape().len()
                || desc.shape()[1..] != prototype.shape()[1..]
                || !desc.is_contiguous()
            {
                return Err(invalid("incompatible concatenate input"));
            }
            shape[0] = shape[0]
                .checked_add(desc.shape()[0])
                .ok_or_else(|| invalid("concatenate dimension overflow"))?;
        }
        let desc = TensorDesc::new(prototype.dtype(), shape)?.with_layout(prototype.layout())?;
        let mut output = self.allocate(desc)?;
        // Zero-byte inputs may still carry pending or failed producers: keep
        // every dependency rather than treating them as no-ops.
        let dependencies: Vec<Completion> = inputs.iter().map(|t| t.completion().clone()).collect();
        let Some(destination) = output.binding() else {
            // No device work: the empty result is observable only once
            // every producer has succeeded.
            for dependency in &dependencies {
                dependency.wait()?;
            }
            return Ok(output);
        };
        let mut graph = self.runtime.graph();
        let mut offset = 0usize;
        for source in inputs.iter().filter_map(DeviceTensor::binding) {
            let end = offset + source.len();
            graph.copy(destination.slice(offset..end)?, source)?;
            offset = end;
        }
        let copied = graph.prepare()?.submit_after(&dependencies)?;
        for input in inputs {
            keep_slot_until(input, &copied);
        }
        output.set_producer(copied);
        Ok(output)
    }

    /// Queue a readback of `tensor` after its producer, without a host
    /// wait. The result owns its staging; dropping it never invalidates
    /// queued work.
    pub fn download(&self, tensor: &DeviceTensor) -> Result<TensorReadback> {
        self.validate(tensor)?;
        let Some(source) = tensor.binding() else {
            return Ok(TensorReadback::new(None, tensor.completion().clone()));
        };
        let staging = self
            .runtime
            .allocate(source.len(), MemoryPlacement::HostVisible)?;
        let mut graph = self.runtime.graph();
        graph.copy(staging.view(), source)?;
        let completion = graph
            .prepare()?
            .submit_after(std::slice::from_ref(tensor.completion()))?;
        keep_slot_until(tensor, &completion);
        Ok(TensorReadback::new(Some(staging), completion))
    }

    /// Reject a tensor of another allocation domain before any work is
    /// queued.
    pub fn validate(&self, tensor: &DeviceTensor) -> Result<()> {
        if self.runtime.same_domain(tensor.runtime()) {
            Ok(())
        } else {
            Err(invalid("tensor belongs to another model context"))
        }
    }
}
