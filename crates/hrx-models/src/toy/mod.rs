//! The toy models: a 3-layer MLP and a small GPT-style transformer, built
//! from tensor operators over seeded (or loaded) [`Weights`](crate::Weights),
//! each with a CPU reference accumulated in f64. They exercise the serving
//! path end to end (tests, examples, benchmarks and `hrx demo --model toy`)
//! without any model file.

mod layers;
mod mlp;
mod reference;
mod transformer;

pub use mlp::{Mlp, MlpConfig};
pub use transformer::{Transformer, TransformerConfig};
