//! hrx-models' integration tests in one test binary: host-side readers
//! (safetensors, GGUF, tokenizers) and the models on a real device
//! (lavapipe in CI, with validation layers under `HRX_VALIDATION=1`).
//!
//! `minilm`, `replicas`, `tokenizer`, `smollm2` and `smollm2_generate`
//! read the model cache that `cargo xtask models` fills (`target/models`;
//! `HRX_MINILM_DIR` and `HRX_SMOLLM2_GGUF` name other copies).
//!
//! Beside it, binaries of their own: `embedder_drop` (counts the process's
//! open devices) and `toy_warm` (counts every heap allocation in the
//! process).

mod gguf;
mod gguf_common;
mod gguf_llama;
mod gguf_reencode;
mod minilm;
mod replicas;
mod smollm2;
mod smollm2_generate;
mod tokenizer;
mod toy_common;
mod toy_models;
mod toy_weights;
