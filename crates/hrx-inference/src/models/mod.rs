//! Model building: host weights (with safetensors), weights shared by every
//! slot of a pool, per-slot graph building from tensor operators, and two
//! ready models (a 3-layer MLP and a small GPT-style transformer) with CPU
//! references.
//!
//! Design choices and contracts:
//!
//! - **Weights once, scratch per slot.** [`SharedWeights`] uploads every
//!   tensor once and is only read afterwards, so all slots of a
//!   [`PreparedModel`](crate::PreparedModel) bind the same storage; a
//!   [`SlotBuilder`] allocates each slot's private inputs, outputs and
//!   intermediates and records the operators into the slot's one graph.
//!   A whole forward pass is one prepared graph per slot, so
//!   `submit_host` then `read_into` stays allocation-free.
//! - **Host weights are plain f32.** [`Weights`] maps names to row-major
//!   f32 tensors; safetensors files with F32, F16 or BF16 tensors convert
//!   to it, and it writes F32 safetensors back. Malformed files are errors.
//! - **References in f64.** Every model has a CPU reference that
//!   accumulates in f64; [`compare`] is the closeness test used by tests,
//!   examples and the demo.

mod layers;
mod mlp;
mod reference;
mod safetensors;
mod transformer;
mod weights;

pub use crate::{SharedWeights, SlotBuilder};
pub use mlp::{Mlp, MlpConfig};
pub use transformer::{Transformer, TransformerConfig};
pub use weights::Weights;

/// Elementwise closeness: `|a - b| <= atol + rtol * |b|` for every pair.
/// On failure, the index of the worst offender (the largest excess over
/// the bound; a NaN counts as infinitely far), or the shorter length when
/// the lengths differ.
pub fn compare(
    actual: &[f32],
    expected: &[f32],
    atol: f32,
    rtol: f32,
) -> std::result::Result<(), usize> {
    if actual.len() != expected.len() {
        return Err(actual.len().min(expected.len()));
    }
    let mut worst: Option<(usize, f32)> = None;
    for (index, (&a, &b)) in actual.iter().zip(expected).enumerate() {
        let excess = (a - b).abs() - (atol + rtol * b.abs());
        let excess = if excess.is_nan() {
            f32::INFINITY
        } else {
            excess
        };
        if excess > 0.0 && worst.is_none_or(|(_, w)| excess > w) {
            worst = Some((index, excess));
        }
    }
    worst.map_or(Ok(()), |(index, _)| Err(index))
}
