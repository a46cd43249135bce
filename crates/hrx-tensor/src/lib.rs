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
//!   and extents first and returns an [`Error`](hrx_core::Error) naming the
//!   operation and the shapes; nothing is queued when it fails.

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
