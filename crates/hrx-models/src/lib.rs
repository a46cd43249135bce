//! hrx-models: real models on the hrx runtime: model files, tokenizers,
//! BERT-style sentence encoders, batching, and the toy models.
//!
//! Design choices and contracts: (filled in as the modules land)

#![warn(missing_docs)]

pub mod bert;
pub mod embed;
pub mod tokenizer;
pub mod toy;
