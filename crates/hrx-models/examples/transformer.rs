//! Serve a small GPT-style transformer through a pool of slots and check
//! the logits against the f64 CPU reference. Exits non-zero on a
//! mismatch.
//!
//! `cargo run -p hrx-models --example transformer`

use hrx_inference::ModelContext;
use hrx_models::{
    compare,
    toy::{Transformer, TransformerConfig},
};
use hrx_runtime::RuntimeOptions;
use std::time::Instant;

fn main() -> hrx_core::Result<()> {
    let context = ModelContext::new(RuntimeOptions::from_env()?)?;
    let config = TransformerConfig {
        batch: 2,
        ..TransformerConfig::small()
    };
    let weights = config.seeded_weights(42);
    let start = Instant::now();
    let transformer = Transformer::new(&context, config, &weights)?;
    let model = transformer.prepare(2)?;
    println!(
        "transformer {config:?}\n{} parameters, {:.1} KiB of device weights shared by {} slots \
         (prepared in {:.0} ms)",
        config.parameter_count(),
        transformer.weights().bytes() as f64 / 1024.0,
        model.capacity(),
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut failures = 0;
    let start = Instant::now();
    let requests = 8u32;
    for request in 0..requests {
        let tokens: Vec<i32> = (0..config.batch * config.seq)
            .map(|i| ((i as u32 * 37 + request * 11) % config.vocab as u32) as i32)
            .collect();
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let out = model
            .acquire_blocking()?
            .submit_host(&[&bytes])?
            .download()?
            .wait()?;
        let logits: Vec<f32> = out[0]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let expected = config.reference(&weights, &tokens)?;
        if let Err(index) = compare(&logits, &expected, 1e-3, 1e-3) {
            eprintln!(
                "request {request}: logit {index} is {} (expected {})",
                logits[index.min(logits.len() - 1)],
                expected[index.min(expected.len() - 1)]
            );
            failures += 1;
        }
    }
    println!(
        "{requests} requests in {:.1} ms, {failures} mismatches",
        start.elapsed().as_secs_f64() * 1e3
    );
    if failures > 0 {
        std::process::exit(1);
    }
    Ok(())
}
