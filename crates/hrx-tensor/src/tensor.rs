//! Device tensors: a descriptor, storage in one runtime domain, and the
//! completion of the work that produces the contents.

use crate::TensorDesc;
use hrx_core::{Error, Result};
use hrx_runtime::{BufferView, Completion, MemoryPlacement, Runtime};
use std::{any::Any, fmt, sync::Arc};

/// A keep-alive token carried by a tensor (for example the inference slot
/// lease that keeps a retained output's slot reserved).
pub type Lease = Arc<dyn Any + Send + Sync>;

/// A tensor in device memory.
///
/// It holds its runtime domain, its [`TensorDesc`], storage (none exactly
/// when the tensor is empty), the [`Completion`] of the work that writes the
/// contents (its *producer*), and an optional [`Lease`]. Clones share the
/// storage. Views made by [`view`](Self::view), [`reshape`](Self::reshape)
/// and [`slice`](Self::slice) share it too, and keep the storage they were
/// cut from, so kernels can bind an aligned range around an unaligned view.
#[derive(Clone)]
pub struct DeviceTensor {
    runtime: Runtime,
    desc: TensorDesc,
    /// The storage the tensor was made from (none when empty).
    view: Option<BufferView>,
    /// Byte offset of element 0 within `view`.
    offset: usize,
    producer: Completion,
    lease: Option<Lease>,
}

impl fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("desc", &self.desc)
            .field("binding", &self.binding())
            .field("leased", &self.lease.is_some())
            .finish_non_exhaustive()
    }
}

impl DeviceTensor {
    /// Wrap storage of `runtime` as a tensor of `desc` whose contents
    /// `producer` writes. The view must be present exactly when the tensor is
    /// non-empty, belong to `runtime`, cover `desc.bytes()` from its start,
    /// and start at a multiple of the dtype's size; the producer must belong
    /// to `runtime` (or be [`Completion::ready`]).
    pub fn from_parts(
        runtime: Runtime,
        desc: TensorDesc,
        view: Option<BufferView>,
        producer: Completion,
    ) -> Result<Self> {
        let fail = |why: String| Err(Error::Message(format!("tensor {desc}: {why}")));
        producer
            .validate_runtime(&runtime)
            .map_err(|e| Error::Message(format!("tensor {desc}: {e}")))?;
        match &view {
            None if !desc.is_empty() => return fail("a non-empty tensor needs storage".into()),
            Some(_) if desc.is_empty() => {
                return fail("an empty tensor must not have storage".into());
            }
            Some(view) if !runtime.owns(view) => {
                return fail("the storage belongs to another runtime domain".into());
            }
            Some(view) if view.len() < desc.bytes() => {
                return fail(format!(
                    "the storage has {} bytes, the tensor spans {}",
                    view.len(),
                    desc.bytes()
                ));
            }
            Some(view) if !view.offset().is_multiple_of(desc.dtype().bytes()) => {
                return fail(format!(
                    "storage offset {} is not a multiple of the {}-byte element",
                    view.offset(),
                    desc.dtype().bytes()
                ));
            }
            _ => {}
        }
        Ok(DeviceTensor {
            runtime,
            desc,
            view,
            offset: 0,
            producer,
            lease: None,
        })
    }

    /// Allocate zero-initialised storage for `desc` (nothing when empty).
    /// The storage is rounded up to whole 4-byte words: kernels bind and
    /// fill storage as words, so an odd-length f16/bf16 (or u8) tensor must
    /// own its last word. [`binding`](Self::binding) still spans exactly
    /// `desc.bytes()`. The producer is [`Completion::ready`].
    pub fn allocate(
        runtime: &Runtime,
        desc: TensorDesc,
        placement: MemoryPlacement,
    ) -> Result<Self> {
        let view = if desc.is_empty() {
            None
        } else {
            let words = desc.bytes().checked_next_multiple_of(4).ok_or_else(|| {
                Error::Message(format!(
                    "tensor {desc}: its size overflows when rounded to words"
                ))
            })?;
            Some(runtime.allocate(words, placement)?.view())
        };
        Self::from_parts(runtime.clone(), desc, view, Completion::ready())
    }

    /// The runtime domain the storage belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The descriptor.
    pub fn desc(&self) -> &TensorDesc {
        &self.desc
    }

    /// The bytes the tensor spans (`desc().bytes()` of them, gaps
    /// included), or `None` when it is empty.
    pub fn binding(&self) -> Option<BufferView> {
        let view = self.view.as_ref()?;
        // In range by construction: checked when the tensor was made.
        view.slice(self.offset..self.offset + self.desc.bytes())
            .ok()
    }

    /// The storage the tensor was cut from and the byte offset of element 0
    /// in it. Kernels bind this (aligned) range and index from the offset.
    pub fn storage(&self) -> Option<(&BufferView, usize)> {
        self.view.as_ref().map(|v| (v, self.offset))
    }

    /// The completion of the work that writes the contents.
    pub fn completion(&self) -> &Completion {
        &self.producer
    }

    /// Replace the producer (after recording more work that writes it).
    pub fn set_producer(&mut self, producer: Completion) {
        self.producer = producer;
    }

    /// The keep-alive token, if any.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Set or clear the keep-alive token.
    pub fn set_lease(&mut self, lease: Option<Lease>) {
        self.lease = lease;
    }

    /// A tensor of `desc` over this tensor's storage starting `byte_offset`
    /// bytes after its element 0, with no copy. The new extent must lie
    /// within this tensor's bytes and the offset must be a multiple of the
    /// new dtype's size. An empty tensor can only be viewed as an empty one.
    pub fn view(&self, byte_offset: usize, desc: TensorDesc) -> Result<DeviceTensor> {
        let fail = |why: String| {
            Err(Error::Message(format!(
                "view of tensor {} at byte {byte_offset} as {desc}: {why}",
                self.desc
            )))
        };
        let end = byte_offset.checked_add(desc.bytes());
        if end.is_none_or(|end| end > self.desc.bytes()) {
            return fail(format!(
                "it reaches past the {} bytes of the tensor",
                self.desc.bytes()
            ));
        }
        if desc.is_empty() {
            return Ok(self.derived(desc, None, 0));
        }
        let Some(view) = &self.view else {
            return fail("the tensor is empty".into());
        };
        let offset = self.offset + byte_offset;
        if !(view.offset() + offset).is_multiple_of(desc.dtype().bytes()) {
            return fail(format!(
                "the offset is not a multiple of the {}-byte element",
                desc.dtype().bytes()
            ));
        }
        Ok(self.derived(desc, Some(view.clone()), offset))
    }

    /// The same contiguous elements under a new shape, with no copy.
    pub fn reshape(&self, shape: Vec<usize>) -> Result<DeviceTensor> {
        let desc = TensorDesc::new(self.desc.dtype(), shape.clone())?;
        if !self.desc.is_contiguous() || desc.elements() != self.desc.elements() {
            return Err(Error::Message(format!(
                "reshape of tensor {} to {shape:?}: {}",
                self.desc,
                if self.desc.is_contiguous() {
                    "the element counts differ"
                } else {
                    "the tensor is not contiguous"
                }
            )));
        }
        let view = self.view.clone().filter(|_| !desc.is_empty());
        Ok(self.derived(desc, view, self.offset))
    }

    /// The elements `range` of axis `axis`, with no copy. The result keeps
    /// the strides (it is strided unless the slice is along the first
    /// non-trivial axis) and the layout label.
    pub fn slice(&self, axis: usize, range: std::ops::Range<usize>) -> Result<DeviceTensor> {
        let shape = self.desc.shape();
        let Some(&dim) = shape.get(axis) else {
            return Err(Error::Message(format!(
                "slice of tensor {} along axis {axis}: the tensor has rank {}",
                self.desc,
                shape.len()
            )));
        };
        if range.start > range.end || range.end > dim {
            return Err(Error::Message(format!(
                "slice of tensor {} along axis {axis}: range {range:?} is outside 0..{dim}",
                self.desc
            )));
        }
        let mut new_shape = shape.to_vec();
        new_shape[axis] = range.len();
        let desc = TensorDesc::strided(self.desc.dtype(), new_shape, self.desc.strides().to_vec())?
            .with_layout(self.desc.layout())?;
        if desc.is_empty() {
            return Ok(self.derived(desc, None, 0));
        }
        let skip = range.start * self.desc.strides()[axis] * self.desc.dtype().bytes();
        Ok(self.derived(desc, self.view.clone(), self.offset + skip))
    }

    fn derived(&self, desc: TensorDesc, view: Option<BufferView>, offset: usize) -> DeviceTensor {
        DeviceTensor {
            runtime: self.runtime.clone(),
            desc,
            offset: if view.is_some() { offset } else { 0 },
            view,
            producer: self.producer.clone(),
            lease: self.lease.clone(),
        }
    }

    /// Fail unless the tensor belongs to `runtime`'s domain; `operation`
    /// names the caller in the message.
    pub fn check_runtime(&self, runtime: &Runtime, operation: &str) -> Result<()> {
        if self.runtime.same_domain(runtime) {
            Ok(())
        } else {
            Err(Error::Message(format!(
                "{operation}: tensor {} belongs to another runtime domain",
                self.desc
            )))
        }
    }
}
