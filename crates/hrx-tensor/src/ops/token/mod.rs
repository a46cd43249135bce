//! The per-token operators of a decoder layer, each token row carrying its
//! position (and cache slot) as device data: rotary position embedding
//! alone or fused with the key/value cache store ([`rope`]), and the
//! SwiGLU gate of the feed-forward block ([`swiglu`]); their kernels are
//! in [`kernels`].

pub(super) mod kernels;
pub(super) mod rope;
pub(super) mod swiglu;
