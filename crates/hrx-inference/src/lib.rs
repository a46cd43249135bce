//! hrx-inference: a shared model context, owned tensor transfers, and
//! bounded pools of inference slots with fixed-address IO.
//!
//! Design choices and contracts:
//!
//! - **One explicit domain.** A [`ModelContext`] is a cheap clone of one
//!   runtime domain plus its operator library ([`ModelContext::ops`]),
//!   shared by every model loaded on the context, so each kernel compiles
//!   once per domain.
//!   Creating one touches no hardware; empty tensors never need a device.
//!   Every tensor crossing the API is checked against the context before
//!   anything is queued ([`ModelContext::validate`]).
//! - **Transfers own their staging.** [`ModelContext::upload`] copies the
//!   caller's bytes into owned staging before it returns;
//!   [`ModelContext::download`] queues the readback after the tensor's
//!   producer and never waits on the host. Device-side ordering
//!   ([`copy_into`](ModelContext::copy_into),
//!   [`concatenate`](ModelContext::concatenate)) carries producer failures
//!   forward instead of hiding them, even through zero-byte tensors.
//! - **Bounded slots.** A [`PreparedModel`] holds `capacity` slots, each
//!   built once by the caller's builder ([`InferenceGraph`]): private input
//!   and output tensors at fixed addresses and one prepared graph. Slots
//!   never share writable IO and all slots have equal descriptors. A slot is
//!   reserved by a [`ModelSlot`], then by its [`Inference`], its
//!   [`InferenceReadback`] and any output tensor the caller retains; it
//!   returns to the pool only when all of those are gone *and* its device
//!   work has drained. When no slot is free, [`PreparedModel::try_acquire`]
//!   answers [`Error::Busy`](hrx_core::Error::Busy): backpressure, not
//!   queue growth.
//! - **Failure isolation.** A native failure disables only the slot whose
//!   graph (or transfer) failed; healthy slots keep serving, and the error
//!   surfaces from `acquire` only once every slot is unusable. Failed
//!   inputs and cancellation do not poison a slot.
//! - **Warm path without allocation.** Host staging for a slot is created
//!   on its first host submission or readback and reused after that. Output
//!   tensors are materialised only when the caller asks for them
//!   ([`Inference::outputs`], [`Inference::wait`]), so `submit_host` then
//!   [`InferenceReadback::read_into`] performs no heap allocation once warm.
//! - **Slots from operators.** A [`SlotBuilder`] allocates one slot's
//!   private inputs, outputs and scratch and records tensor operators into
//!   the slot's graph; [`SharedWeights`] uploads a model's weights once,
//!   read-only, so every slot of a pool binds the same storage. Models
//!   built this way (and their host weights) live in hrx-models.

#![warn(missing_docs)]

mod builder;
mod context;
mod inference;
mod model;
mod pool;
mod readback;
mod slot;
mod transfer;

pub use builder::{SharedWeights, SlotBuilder};
pub use context::ModelContext;
pub use inference::{Inference, InferenceReadback};
pub use model::{AcquireSlot, InferenceGraph, PreparedModel};
pub use readback::TensorReadback;
pub use slot::ModelSlot;
