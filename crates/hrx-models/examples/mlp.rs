//! Serve the small 3-layer MLP through a pool of slots and check every
//! answer against the f64 CPU reference. Exits non-zero on a mismatch.
//!
//! `cargo run -p hrx-models --example mlp`

use hrx_inference::ModelContext;
use hrx_models::{
    compare,
    toy::{Mlp, MlpConfig},
};
use hrx_runtime::RuntimeOptions;
use std::time::Instant;

fn main() -> hrx_core::Result<()> {
    let context = ModelContext::new(RuntimeOptions::from_env()?)?;
    let config = MlpConfig::small();
    let weights = config.seeded_weights(42);
    let mlp = Mlp::new(&context, config, &weights)?;
    let model = mlp.prepare(4)?;
    println!(
        "mlp {config:?}: {} parameters, {} weight bytes shared by {} slots",
        weights.parameter_count(),
        mlp.weights().bytes(),
        model.capacity()
    );
    let requests = 32u32;
    let mut output = vec![0u8; config.batch * config.output * 4];
    let mut failures = 0;
    let start = Instant::now();
    for request in 0..requests {
        let x: Vec<f32> = (0..config.batch * config.input)
            .map(|i| ((i as u32 * 31 + request * 17) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let readback = model
            .acquire_blocking()?
            .submit_host(&[&bytes])?
            .download()?;
        readback.read_into(&mut [output.as_mut_slice()])?;
        let y: Vec<f32> = output
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Err(index) = compare(&y, &config.reference(&weights, &x)?, 1e-4, 1e-4) {
            eprintln!("request {request}: mismatch at output {index}");
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
