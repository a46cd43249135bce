//! The operators a decoder-only language model runs, on the live device
//! (lavapipe in CI, validation on), each against an f64 reference: one test
//! binary for the attention side (RoPE, the key/value cache store, cached
//! attention, SwiGLU) and the quantised weights (packing, fused
//! dequantising matmul with its fused norm and residual, row gather).

mod activations_f16;
mod attention;
mod attention_projected;
mod cache_f16;
mod ggml_formats;
mod quant;
mod quant_fused;
mod quant_logits;
