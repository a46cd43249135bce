//! hrx-tensor: tensor descriptors, device tensors, and the operator library.
//!
//! Design choices and contracts:
//!
//! - **Descriptors are values.** A [`TensorDesc`] is a dtype, a shape, element
//!   strides and a [`Layout`] label. Constructors check everything once
//!   (rank agreement, no self-overlap, every size computation
//!   overflow-checked) so the accessors are infallible. The empty shape is a
//!   scalar; a zero dimension makes an empty tensor of 0 bytes; `bytes()`
//!   covers stride gaps. The layout label (rows, NCHW, NHWC) is checked
//!   against the rank and never changes addressing.
//! - **Device tensors are handles.** A [`DeviceTensor`] is a runtime domain,
//!   a descriptor, storage (absent exactly when the tensor is empty, so empty
//!   tensors need no device), the [`Completion`](hrx_runtime::Completion)
//!   of the work that writes it, and an optional keep-alive [`Lease`].
//!   Views, reshapes and slices never copy; they keep the storage they were
//!   cut from, so a kernel can bind an aligned range and index from an
//!   element offset even when the view starts at an unaligned byte.
//! - **Errors before work.** Every operation checks domains, dtypes, shapes
//!   and extents first and returns an [`Error`] naming the operation and the
//!   shapes; nothing is recorded or queued when it fails.
//! - **Operators are loom.** [`Ops`] is the operator library of one runtime
//!   domain: a loom [`Compiler`](hrx_loom::Compiler) for the device's
//!   target, built at first use, and a cache of pipelines, each built from
//!   the artifact's SPIR-V and its [`KernelContract`](hrx_core::KernelContract)
//!   (`Artifact::contract`, the one bridge from compiler to runtime; one
//!   library per domain, which `hrx_inference::ModelContext` shares among
//!   its models). Kernels are
//!   built in Rust with [`hrx_loom::build`] (element type, tile sizes
//!   that must be static view extents and unroll counts are arguments of
//!   the building functions; operations and activations are shared
//!   fragments), or hand-written `kernels/*.loom` files compiled as they
//!   are; never text assembled by code. Grid sizes go through
//!   `Specialization` config values. Tile and workgroup sizes come from
//!   the `Target` (workgroup invocation and count limits), not constants.
//!   Tuning runs (and tests) force tensor-core and quantised-matmul shapes,
//!   and the f32 quad matmul kernel on or off, with [`Ops::with_tuning`].
//! - **Record or run.** Each operator has a `record_*` form writing a
//!   caller's output tensor inside a caller's [`Graph`](hrx_runtime::Graph)
//!   (submit it after the inputs' producers), and an eager form that
//!   allocates the output, submits after the inputs' producers and returns
//!   it with its producer.
//! - **Strides, not copies.** Kernels address operands by element strides
//!   and offsets inside an aligned binding, so transposed, broadcast and
//!   sliced inputs are read in place; axes are merged on the host first
//!   (at most four remain for elementwise kernels, one batch axis for
//!   matmul), and reductions pack inputs whose axes do not merge.

#![warn(missing_docs)]

mod desc;
mod dtype;
mod host;
mod layout;
pub mod ops;
mod tensor;

pub use desc::{TensorDesc, contiguous_strides};
pub use dtype::DType;
pub use host::{decode, encode};
pub use hrx_core::{Error, Result};
pub use layout::Layout;
pub use ops::Ops;
pub use tensor::{DeviceTensor, Lease};
