//! hrx-models: real models on the hrx runtime: model files (safetensors,
//! GGUF), tokenizers, chat templates, BERT-style sentence encoders,
//! batching, llama-family text generation, and the toy models.
//!
//! Design choices and contracts:
//!
//! - **A model is a folder its users already have.** A sentence model is
//!   a sentence-transformers folder (`config.json`, `model.safetensors`
//!   with Hugging Face names, `tokenizer.json`, `sentence_bert_config.json`,
//!   `1_Pooling/config.json`, `modules.json`); every shape and constant is
//!   read from it ([`bert::BertConfig::from_dir`]), nothing is specific
//!   to one model. Tensors the model does not use are skipped; a missing
//!   tensor, a wrong shape or dtype is an error naming the tensor.
//! - **Tokenizers match the reference.** [`tokenizer`] is BERT WordPiece
//!   as Hugging Face's `tokenizers` runs it, ids identical on every
//!   input tested, truncated to the model's `max_seq_length` (from
//!   `sentence_bert_config.json`, not `tokenizer.json`'s own limit).
//! - **GGUF files are checked before they are trusted.** [`gguf`] reads
//!   llama.cpp's single-file format (metadata, tensor infos, quantised
//!   data) with every count, length, dim and offset checked against the
//!   file before anything is allocated; a tensor's data is a slice of the
//!   file in its own quantised blocks, for upload as it is, and F32, F16,
//!   and the GGML block formats from Q4_0 to Q6_K decode to f32 on the
//!   host as the reference for device
//!   kernels. [`gguf::LlamaConfig`] takes every constant from the
//!   metadata, so any llama-family file of those types works.
//! - **The tokenizer and chat template come from the file too.**
//!   [`tokenizer::BpeTokenizer`] is byte-level BPE built from the GGUF
//!   metadata, ids identical to Hugging Face `tokenizers` built from the
//!   same vocabulary; [`tokenizer::ChatTemplate`] recognises ChatML
//!   templates and renders them exactly, without a Jinja engine.
//! - **Fixed shapes, padding that changes nothing.** [`bert`] records
//!   the encoder for one shape (`batch` sentences of `seq` tokens) into
//!   each slot's graph; padding keys get an attention bias that zeroes
//!   their weight and padding rows have no pooling weight. Matrices are
//!   f32, or f16 where the device has it ([`bert::Precision`]); norms,
//!   softmax and accumulation stay f32.
//! - **Text generation keeps sequences in slots.** [`llama`] runs a
//!   llama-family GGUF file with its matrices quantised on the device,
//!   one prepared step graph per row count with each row's token, cache
//!   slot and position as data, a key/value cache slot per sequence, and
//!   continuous batching on one thread (new sequences join between steps,
//!   finished ones leave); results stream as [`llama::TokenStream`]s.
//! - **Batching above the pool.** [`embed`] routes each sentence to a
//!   length bucket, gathers concurrent sentences into one submission of
//!   the smallest batch tier that holds them, and answers each caller in
//!   its input order; [`embed::Replicas`] spreads requests over several
//!   devices, each with its own weights and slots.
//! - **Host weights are plain f32.** [`Weights`] maps unique names to
//!   row-major f32 tensors whose value count always matches the shape.
//!   Safetensors files with F32, F16 or BF16 tensors convert to it
//!   ([`Weights::from_safetensors`]), and it writes F32 safetensors back
//!   ([`Weights::to_safetensors`]). Malformed files (bad header, data
//!   ranges out of bounds, overlapping or leaving gaps, repeated names)
//!   are errors, and a known dtype that is not converted is
//!   `Error::Unsupported`. A model checks the presence and shape of every
//!   tensor it reads before it uploads anything.
//! - **Weights once, scratch per slot.** A model uploads its weights once
//!   as [`SharedWeights`](hrx_inference::SharedWeights), read-only and
//!   bound by every slot of its pool; each slot's inputs, outputs and
//!   activations come from a [`SlotBuilder`](hrx_inference::SlotBuilder)
//!   that records the whole forward pass into the slot's one prepared
//!   graph, so the warm path (`submit_host`, then `read_into`) allocates
//!   nothing.
//! - **Toys with references.** [`toy`] ships a 3-layer MLP and a small
//!   GPT-style transformer with deterministic seeded weights (the same seed
//!   gives the same weights on every platform, and no value is zero, so a
//!   dropped term always shows) and CPU references that accumulate in f64.
//!   [`compare`] is the closeness test used by tests, examples, benchmarks
//!   and the demo.

#![warn(missing_docs)]

pub mod bert;
pub mod embed;
pub mod gguf;
pub mod llama;
mod safetensors;
pub mod tokenizer;
pub mod toy;
mod weights;

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
