//! The toy models: MLP and transformer against their f64 CPU
//! references, weights shared by every slot, safetensors reading and
//! writing, and configuration errors.

use crate::toy_common::context;
use hrx_core::Error;
use hrx_models::{
    compare,
    toy::{Mlp, MlpConfig, Transformer, TransformerConfig},
};

/// Deterministic inputs in about [-1, 1], never all zero.
fn inputs(seed: u32, n: usize) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            ((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 2001) as f32 / 1000.0
                - 1.0
        })
        .collect()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn message(error: Error) -> String {
    error.to_string()
}

/// f32 matmuls of length <= 128 with f64 references: 1e-4 absolute plus
/// 1e-4 relative covers the accumulation order.
const MLP_TOL: (f32, f32) = (1e-4, 1e-4);
/// Two blocks of norms, softmax and GELU: 1e-3 absolute and relative.
const TRANSFORMER_TOL: (f32, f32) = (1e-3, 1e-3);

#[test]
fn mlp_serves_batches_that_match_the_reference() {
    let context = context();
    let config = MlpConfig::small();
    let weights = config.seeded_weights(7);
    let mlp = Mlp::new(&context, config, &weights).unwrap();
    assert_eq!(mlp.config(), config);
    assert_eq!(mlp.weights().bytes(), weights.parameter_count() * 4);
    let model = mlp.prepare(2).unwrap();
    for request in 0..6 {
        let x = inputs(request, config.batch * config.input);
        let expected = config.reference(&weights, &x).unwrap();
        let out = model
            .submit_host(&[&f32_bytes(&x)])
            .unwrap()
            .download()
            .unwrap();
        let y = f32_values(&out.wait().unwrap()[0]);
        let (atol, rtol) = MLP_TOL;
        assert_eq!(
            compare(&y, &expected, atol, rtol),
            Ok(()),
            "request {request}"
        );
        assert!(
            expected.iter().any(|v| v.abs() > 0.1),
            "a nontrivial result"
        );
    }
    let x = inputs(99, config.batch * config.input);
    let naive = mlp.run_naive(&x).unwrap();
    let (atol, rtol) = MLP_TOL;
    assert_eq!(
        compare(&naive, &config.reference(&weights, &x).unwrap(), atol, rtol),
        Ok(())
    );
    assert!(mlp.run_naive(&x[1..]).is_err());
}

fn tiny_transformer(batch: usize) -> TransformerConfig {
    TransformerConfig {
        vocab: 48,
        d_model: 32,
        heads: 4,
        d_ff: 64,
        blocks: 2,
        seq: 8,
        batch,
    }
}

fn tokens(config: &TransformerConfig, seed: u32) -> Vec<i32> {
    (0..config.batch * config.seq)
        .map(|i| ((i as u32 * 7 + seed * 13) % config.vocab as u32) as i32)
        .collect()
}

#[test]
fn transformer_matches_the_reference_for_one_and_several_sequences() {
    let context = context();
    for config in [tiny_transformer(3), tiny_transformer(1)] {
        let weights = config.seeded_weights(3);
        assert_eq!(weights.parameter_count(), config.parameter_count());
        let model = Transformer::new(&context, config, &weights).unwrap();
        let prepared = model.prepare(2).unwrap();
        for request in 0..3 {
            let t = tokens(&config, request);
            let expected = config.reference(&weights, &t).unwrap();
            let bytes: Vec<u8> = t.iter().flat_map(|t| t.to_le_bytes()).collect();
            let out = prepared.submit_host(&[&bytes]).unwrap().download().unwrap();
            let logits = f32_values(&out.wait().unwrap()[0]);
            assert_eq!(logits.len(), config.batch * config.seq * config.vocab);
            let (atol, rtol) = TRANSFORMER_TOL;
            assert_eq!(
                compare(&logits, &expected, atol, rtol),
                Ok(()),
                "{config:?}"
            );
        }
        let t = tokens(&config, 5);
        let naive = model.run_naive(&t).unwrap();
        let (atol, rtol) = TRANSFORMER_TOL;
        assert_eq!(
            compare(&naive, &config.reference(&weights, &t).unwrap(), atol, rtol),
            Ok(())
        );
        let mut bad = t.clone();
        bad[1] = config.vocab as i32;
        assert!(message(model.run_naive(&bad).unwrap_err()).contains("outside the vocabulary"));
        bad[1] = -1;
        assert!(model.run_naive(&bad).is_err());
        assert!(model.run_naive(&t[1..]).is_err());
    }
}

#[test]
fn the_small_transformer_matches_the_reference() {
    let context = context();
    let config = TransformerConfig::small();
    let weights = config.seeded_weights(11);
    let model = Transformer::new(&context, config, &weights).unwrap();
    let t = tokens(&config, 2);
    let (atol, rtol) = TRANSFORMER_TOL;
    let logits = model.run_naive(&t).unwrap();
    assert_eq!(
        compare(
            &logits,
            &config.reference(&weights, &t).unwrap(),
            atol,
            rtol
        ),
        Ok(())
    );
}

/// Live device bytes once frees of finished work have settled.
fn settled_live_bytes(context: &hrx_inference::ModelContext) -> usize {
    let mut last = context.runtime().memory_stats().live_bytes;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = context.runtime().memory_stats().live_bytes;
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn weights_are_held_once_whatever_the_slot_count() {
    let context = context();
    let config = MlpConfig::small();
    let weights = config.seeded_weights(1);
    let mlp = Mlp::new(&context, config, &weights).unwrap();
    // Compile the kernels and create the operator library's own buffers.
    mlp.run_naive(&inputs(1, config.batch * config.input))
        .unwrap();
    let base = settled_live_bytes(&context);
    let one = mlp.prepare(1).unwrap();
    let with_one = settled_live_bytes(&context) - base;
    drop(one);
    let base = settled_live_bytes(&context);
    let three = mlp.prepare(3).unwrap();
    let with_three = settled_live_bytes(&context) - base;
    let c = config;
    let io_and_scratch = 4 * c.batch * (c.input + 2 * c.hidden + c.output);
    assert_eq!(with_one, io_and_scratch, "one slot: IO and scratch only");
    assert_eq!(
        with_three,
        3 * io_and_scratch,
        "three slots: no weight copies"
    );
    assert!(mlp.weights().bytes() > io_and_scratch);
    drop(three);
}

#[test]
fn models_on_one_context_share_its_compiled_kernels() {
    let context = context();
    let config = MlpConfig::small();
    let first = Mlp::new(&context, config, &config.seeded_weights(1)).unwrap();
    let second = Mlp::new(&context, config, &config.seeded_weights(2)).unwrap();
    first.prepare(1).unwrap();
    let compiled = context.ops().compiled_kernels();
    assert!(compiled > 0);
    // The same operators for the second model: no kernel compiles again.
    second.prepare(1).unwrap();
    assert_eq!(context.ops().compiled_kernels(), compiled);
}
