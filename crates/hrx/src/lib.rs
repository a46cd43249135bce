//! hrx: GPU compute and inference on Vulkan.
//!
//! This crate is a thin facade: it re-exports the hrx layers so that a user
//! depends on one crate and one version. It adds no code of its own.
//!
//! Design choices and contracts:
//!
//! - **One module per layer**, each depending only on the layers below it:
//!   [`execution`] (the Vulkan runtime: buffers, graphs, completions,
//!   kernels from SPIR-V) and [`loom`] (the kernel compiler, which never
//!   links Vulkan) side by side, meeting only in hrx-core's kernel
//!   vocabulary ([`execution::KernelContract`], [`execution::DispatchArgs`]);
//!   then [`tensor`] (descriptors, device tensors, the operator
//!   library), [`inference`] (model contexts and bounded pools of
//!   inference slots) and [`models`] (host weights and safetensors,
//!   tokenizers, sentence encoders, and the toy models).
//! - **Root re-exports** for what every layer shares: [`Runtime`],
//!   [`Completion`], [`Error`], [`Result`], [`Target`] and [`cached_init`].
//!   Paths written against the inner crates work with `hrx` in their place,
//!   for example `hrx::execution::BufferView` or `hrx::loom::Compiler`.
//! - **One error type** ([`Error`]) crosses every layer, so `?` works
//!   everywhere; match [`Error::Busy`] for backpressure.
//! - **Lazy hardware.** Creating a [`Runtime`] or an
//!   [`inference::ModelContext`] touches no device; the device opens on
//!   first need.
//!
//! # Example
//!
//! Serve a tiny model, `y = x + bias`, through a pool of two slots. The
//! bias is uploaded once and shared by both slots; each slot owns its input
//! and output at fixed addresses and one prepared graph.
//!
//! ```
//! use hrx::{
//!     Result,
//!     execution::RuntimeOptions,
//!     inference::{InferenceGraph, ModelContext, PreparedModel},
//!     tensor::{DType, Ops, TensorDesc, ops::BinaryOp},
//! };
//!
//! fn f32_bytes(values: &[f32]) -> Vec<u8> {
//!     values.iter().flat_map(|v| v.to_le_bytes()).collect()
//! }
//!
//! # fn main() -> Result<()> {
//! let context = ModelContext::new(RuntimeOptions::default())?;
//! let ops = context.ops();
//! let desc = TensorDesc::new(DType::F32, vec![4])?;
//! let bias = context.upload(desc.clone(), &f32_bytes(&[0.5; 4]))?;
//!
//! let model = PreparedModel::prepare(&context, 2, |context| {
//!     let x = context.allocate(desc.clone())?;
//!     let y = context.allocate(desc.clone())?;
//!     let mut graph = context.runtime().graph();
//!     ops.record_binary(&mut graph, BinaryOp::Add, &x, &bias, &y)?;
//!     Ok(InferenceGraph { inputs: vec![x], outputs: vec![y], graph: graph.prepare()? })
//! })?;
//!
//! // Submit host bytes, read the result into a caller-owned buffer.
//! let input = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
//! let mut output = vec![0u8; 16];
//! model.submit_host(&[&input])?.download()?.read_into(&mut [&mut output])?;
//! assert_eq!(output, f32_bytes(&[1.5, 2.5, 3.5, 4.5]));
//!
//! // With every slot reserved the pool answers `Busy` instead of queueing.
//! let (a, b) = (model.try_acquire()?, model.try_acquire()?);
//! assert!(model.try_acquire().unwrap_err().is_busy());
//! drop((a, b));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub use hrx_core::{Error, Result, Target, cached_init};
pub use hrx_runtime::{Completion, Runtime};

/// The Vulkan runtime: domains, memory, graphs, completions and kernels
/// (the `hrx-runtime` crate).
pub mod execution {
    pub use hrx_runtime::*;
}

/// The loom kernel compiler: loom text to SPIR-V for a [`Target`]
/// (the `hrx-loom` crate).
pub mod loom {
    pub use hrx_loom::*;
}

/// Tensors: dtypes, descriptors, device tensors and the operator library
/// (the `hrx-tensor` crate).
pub mod tensor {
    pub use hrx_tensor::*;
}

/// Inference: model contexts, tensor transfers and bounded pools of
/// inference slots (the `hrx-inference` crate).
pub mod inference {
    pub use hrx_inference::*;
}

/// Models: host weights and safetensors files, tokenizers, BERT-style
/// sentence encoders, batching, and the toy MLP and transformer with their
/// CPU references (the `hrx-models` crate).
pub mod models {
    pub use hrx_models::*;
}
