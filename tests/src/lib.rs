//! Shared pieces of hrx's end-to-end tests, written against the `hrx`
//! facade only, as a user's crate would be.
//!
//! Design choices and contracts:
//!
//! - The model under test is small but real: two elementwise layers,
//!   `y = max(x * w1 + b1, 0) * w2 + b2`, recorded from the tensor operator
//!   library into one graph per slot. Weights are uploaded once and shared
//!   by every slot; the hidden activation is per-slot scratch.
//! - Every device result is compared with a CPU reference computed in
//!   `f64`, with inputs that are never all zeros.

#![warn(missing_docs)]

use hrx::{
    Result,
    inference::{InferenceGraph, ModelContext, PreparedModel},
    tensor::{DType, DeviceTensor, TensorDesc, ops::BinaryOp},
};

/// Width of the model's vectors.
pub const WIDTH: usize = 256;

/// Little-endian bytes of `values`.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Values of little-endian f32 `bytes`.
pub fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Deterministic, varied values in about [-1, 1].
pub fn values(seed: u32, n: usize) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503))
                >> 8;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// The model's weights `[w1, b1, w2, b2]`.
pub fn weights() -> [Vec<f32>; 4] {
    [
        values(1, WIDTH),
        values(2, WIDTH),
        values(3, WIDTH),
        values(4, WIDTH),
    ]
}

/// The CPU reference in f64.
pub fn reference(x: &[f32]) -> Vec<f64> {
    let [w1, b1, w2, b2] = weights();
    (0..x.len())
        .map(|i| {
            let h = (f64::from(x[i]) * f64::from(w1[i]) + f64::from(b1[i])).max(0.0);
            h * f64::from(w2[i]) + f64::from(b2[i])
        })
        .collect()
}

/// Whether device output matches the reference to f32 rounding.
pub fn close(device: &[f32], reference: &[f64]) -> bool {
    device.len() == reference.len()
        && device
            .iter()
            .zip(reference)
            .all(|(&d, &r)| (f64::from(d) - r).abs() <= 1e-5 * (1.0 + r.abs()))
}

/// The `[WIDTH]` f32 descriptor.
pub fn desc() -> Result<TensorDesc> {
    TensorDesc::new(DType::F32, vec![WIDTH])
}

/// Prepare the model with `capacity` slots.
pub fn model(context: &ModelContext, capacity: usize) -> Result<PreparedModel> {
    let ops = context.ops();
    let shared: Vec<DeviceTensor> = weights()
        .iter()
        .map(|w| context.upload(desc()?, &f32_bytes(w)))
        .collect::<Result<_>>()?;
    // A zero scalar, broadcast against the hidden activation.
    let zero = context.allocate(TensorDesc::new(DType::F32, vec![])?)?;
    PreparedModel::prepare(context, capacity, |context| {
        let x = context.allocate(desc()?)?;
        let scratch = (0..4)
            .map(|_| context.allocate(desc()?))
            .collect::<Result<Vec<_>>>()?;
        let y = context.allocate(desc()?)?;
        let mut graph = context.runtime().graph();
        let [a, b, c, d] = [&scratch[0], &scratch[1], &scratch[2], &scratch[3]];
        ops.record_binary(&mut graph, BinaryOp::Mul, &x, &shared[0], a)?;
        ops.record_binary(&mut graph, BinaryOp::Add, a, &shared[1], b)?;
        ops.record_binary(&mut graph, BinaryOp::Max, b, &zero, c)?;
        ops.record_binary(&mut graph, BinaryOp::Mul, c, &shared[2], d)?;
        ops.record_binary(&mut graph, BinaryOp::Add, d, &shared[3], &y)?;
        Ok(InferenceGraph {
            inputs: vec![x],
            outputs: vec![y],
            graph: graph.prepare()?,
        })
    })
}

/// The Rust examples of the user documentation, compiled and run as doc
/// tests so that the docs cannot drift from the API.
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/inference.md")]
    pub struct Inference;
    #[doc = include_str!("../../docs/loom.md")]
    pub struct Loom;
    #[doc = include_str!("../../docs/models.md")]
    pub struct Models;
    #[doc = include_str!("../../docs/serving.md")]
    pub struct Serving;
    #[doc = include_str!("../../docs/tensor.md")]
    pub struct Tensor;
}
