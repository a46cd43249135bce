//! SmolLM2-135M-Instruct generating on the device (f32, lavapipe in CI)
//! against `reference/smollm2/reference.json`, a float64 forward pass of
//! the same GGUF file made by `make_reference.py` with the `gguf` package,
//! independent of hrx.
//!
//! Greedy ids must equal the reference's; a difference is allowed only at
//! a step where the reference's top-2 logit margin is below
//! [`NEAR_TIE`] (from there on, f32 and f64 may follow different
//! continuations). The same prompts through four slots at once, joining
//! at different steps, must agree the same way.

use crate::gguf_reencode;
use hrx_inference::ModelContext;
use hrx_models::gguf::{GgufFile, LlamaConfig, TensorType};
use hrx_models::llama::{
    ActivationFormat, CacheFormat, FinishReason, GenerateRequest, GenerationEvent, Generator,
    GeneratorOptions, Sampling,
};
use hrx_runtime::RuntimeOptions;
use hrx_tensor::ops::{QUANT_GATED_MAX_ROWS, QuantFormat};
use hrx_test_support::models::smollm2_gguf;
use serde::Deserialize;

/// Margins below this are near-ties: f32 may pick either token.
const NEAR_TIE: f64 = 0.02;

/// Near-ties for f16 caches.
const F16_NEAR_TIE: f64 = 0.02;

#[derive(Deserialize)]
struct Reference {
    gguf_sha256: String,
    new_tokens: usize,
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    name: String,
    text: String,
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
    margins: Vec<f64>,
}

fn reference() -> Reference {
    reference_named("reference.json").expect("reference.json")
}

/// A reference file of `reference/smollm2/`, if it is there.
fn reference_named(name: &str) -> Option<Reference> {
    let path = format!(
        "{}/tests/reference/smollm2/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).unwrap())
}

fn generator(options: GeneratorOptions) -> Generator {
    let path = smollm2_gguf();
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    Generator::load(&context, &file, options).unwrap()
}

fn options() -> GeneratorOptions {
    GeneratorOptions {
        sequences: 4,
        context: 128,
        prefill_rows: 32,
        queue: 16,
        ..GeneratorOptions::default()
    }
}

/// Checks `ids` against `expected`: equal up to the first difference,
/// which must fall on a near-tie of the reference.
fn agrees(name: &str, what: &str, ids: &[u32], expected: &[u32], margins: &[f64]) {
    assert_eq!(ids.len(), expected.len(), "{name} ({what}): {ids:?}");
    if let Some(step) = ids.iter().zip(expected).position(|(a, b)| a != b) {
        assert!(
            margins[step] < NEAR_TIE,
            "{name} ({what}): step {step} chose {} where the reference chose {} with a margin \
             of {} (ids {ids:?}, reference {expected:?})",
            ids[step],
            expected[step],
            margins[step]
        );
    }
}

/// Waits (a bounded time) until no sequence holds a slot: the generation
/// thread updates its counters after it sends a sequence's last event.
fn assert_idle(generator: &Generator) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while generator.stats().active != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "sequences still hold slots: {:?}",
            generator.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn request(prompt: &Prompt, new_tokens: usize) -> GenerateRequest {
    GenerateRequest {
        stop_at_eos: false,
        ..GenerateRequest::greedy(prompt.prompt_ids.clone(), new_tokens)
    }
}

/// Tokens drawn from the device's top-k candidates equal those drawn from
/// each whole row of logits on the host, seed for seed: with a top-k
/// inside the candidates (decided on their values alone) and with a
/// nucleus (which may read the row past them). Two sequences run at once,
/// so a step holds two sampled picks.
#[test]
fn device_candidates_draw_what_the_whole_row_draws() {
    let on_device = generator(options());
    let on_host = generator(GeneratorOptions {
        sample_on_device: false,
        ..options()
    });
    let prompt = on_device.encode("Once upon a time");
    let settings = [
        Sampling {
            temperature: 0.8,
            top_k: 40,
            top_p: 1.0,
            seed: 1,
        },
        Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.9,
            seed: 2,
        },
    ];
    for sampling in settings {
        let run = |generator: &Generator| -> Vec<Vec<u32>> {
            let streams: Vec<_> = (0..2)
                .map(|i| {
                    let request = GenerateRequest {
                        sampling: Sampling {
                            seed: sampling.seed + i,
                            ..sampling
                        },
                        stop_at_eos: false,
                        ..GenerateRequest::greedy(prompt.clone(), 6)
                    };
                    generator.generate(request).unwrap()
                })
                .collect();
            streams
                .into_iter()
                .map(|stream| stream.collect_blocking().unwrap().ids)
                .collect()
        };
        assert_eq!(run(&on_device), run(&on_host), "{sampling:?}");
    }
}

#[test]
fn greedy_generation_matches_the_reference_alone_and_batched() {
    let reference = reference();
    let generator = generator(options());
    let n = reference.new_tokens;
    let mut alone = Vec::new();
    for prompt in &reference.prompts {
        assert_eq!(
            generator.encode(&prompt.text),
            prompt.prompt_ids,
            "{}",
            prompt.name
        );
        let generation = generator
            .generate(request(prompt, n))
            .unwrap()
            .collect_blocking()
            .unwrap();
        assert_eq!(generation.reason, FinishReason::Length);
        assert_eq!(generation.prompt_tokens, prompt.prompt_ids.len());
        agrees(
            &prompt.name,
            "alone",
            &generation.ids,
            &prompt.ids,
            &prompt.margins,
        );
        alone.push(generation.ids);
    }
    // All at once: four run, the rest join as slots free up, each at a
    // different step.
    let streams: Vec<_> = reference
        .prompts
        .iter()
        .map(|p| generator.generate(request(p, n)).unwrap())
        .collect();
    for ((stream, prompt), alone) in streams.into_iter().zip(&reference.prompts).zip(&alone) {
        let ids = stream.collect_blocking().unwrap().ids;
        agrees(&prompt.name, "batched", &ids, &prompt.ids, &prompt.margins);
        agrees(
            &prompt.name,
            "batched vs alone",
            &ids,
            alone,
            &prompt.margins,
        );
    }
    assert_idle(&generator);
    assert!(generator.stats().generated_tokens >= (2 * n * reference.prompts.len()) as u64);
}

/// Runs every reference prompt through `generator`'s four slots at once
/// and checks each against the reference up to a near-tie of `near_tie`
/// (`what` names the configuration).
fn agrees_margin_aware(generator: &Generator, reference: &Reference, what: &str, near_tie: f64) {
    let n = reference.new_tokens;
    let streams: Vec<_> = reference
        .prompts
        .iter()
        .map(|p| generator.generate(request(p, n)).unwrap())
        .collect();
    let mut differing = 0;
    for (stream, prompt) in streams.into_iter().zip(&reference.prompts) {
        let ids = stream.collect_blocking().unwrap().ids;
        assert_eq!(ids.len(), prompt.ids.len(), "{}: {ids:?}", prompt.name);
        if let Some(step) = ids.iter().zip(&prompt.ids).position(|(a, b)| a != b) {
            differing += 1;
            eprintln!(
                "{}: {what} part from the reference at step {step} (margin {})",
                prompt.name, prompt.margins[step]
            );
            assert!(
                prompt.margins[step] < near_tie,
                "{} ({what}): step {step} chose {} where the reference chose {} with a margin \
                 of {}",
                prompt.name,
                ids[step],
                prompt.ids[step],
                prompt.margins[step]
            );
        }
    }
    eprintln!(
        "{what}: {differing} of {} prompts part from the reference",
        reference.prompts.len()
    );
    assert_idle(generator);
}

/// With f16 key/value caches the caches take half the bytes, and the
/// prompts, all at once through four slots, agree with the reference up
/// to a near-tie of [`F16_NEAR_TIE`]: each cached key and value is
/// rounded to f16 (relative error up to 2^-11), which moves the logits by
/// more than f32 arithmetic does.
#[test]
fn f16_caches_halve_the_caches_and_agree_margin_aware() {
    let reference = reference();
    let f32_bytes = generator(options()).stats().device_bytes;
    let f16_options = GeneratorOptions {
        cache: CacheFormat::F16,
        ..options()
    };
    let generator = generator(f16_options);
    let c = generator.config();
    let f16_cache =
        c.layers * 2 * f16_options.sequences * c.kv_heads * f16_options.context * c.head_dim * 2;
    assert_eq!(f32_bytes - generator.stats().device_bytes, f16_cache);
    agrees_margin_aware(&generator, &reference, "f16 caches", F16_NEAR_TIE);
}

/// With f16 activations the rows between the step's kernels (the
/// normalised rows, the queries, keys and values, the attention's output,
/// the gate and up projections, the SwiGLU gate and the picked rows) take
/// half their bytes in every step graph, and the prompts, all at once
/// through four slots, agree with the reference up to a near-tie of
/// [`F16_NEAR_TIE`].
#[test]
fn f16_activations_halve_the_activations_and_agree_margin_aware() {
    let reference = reference();
    let f32_bytes = generator(options()).stats().device_bytes;
    let f16_options = GeneratorOptions {
        activations: ActivationFormat::F16,
        ..options()
    };
    let generator = generator(f16_options);
    let c = generator.config();
    // The step graphs: 1, 2 and 4 decode rows and the 32-row prompt step,
    // each picking up to the 4 sequences. Each row holds its normalised
    // row, its stacked query-key-value output, the attention's output and
    // the gate; the gate-and-up output only above the decode sizes, where
    // the gate is a dispatch of its own.
    let halved: usize = [1, 2, 4, 32]
        .into_iter()
        .map(|rows: usize| {
            let picked = rows.min(f16_options.sequences);
            let qkv = c.width + 2 * c.kv_heads * c.head_dim;
            let gate_up = if rows > QUANT_GATED_MAX_ROWS {
                2 * c.ffn_width
            } else {
                0
            };
            let row = c.width + qkv + c.heads * c.head_dim + gate_up + c.ffn_width;
            (rows * row + picked * c.width) * 2
        })
        .sum();
    assert_eq!(f32_bytes - generator.stats().device_bytes, halved);
    agrees_margin_aware(&generator, &reference, "f16 activations", F16_NEAR_TIE);
}

/// Other tensor types and mixed formats: the same model with its first
/// block's matrices re-encoded (the query F32 and the key and value F16,
/// so the three are separate products; the gate F32 beside the Q4_1 up;
/// the output projection F32, the down projection F16) and its second
/// block's all F16 (stacked F16 products). The device holds the new
/// types (the weights' bytes grow by the files'), and the prompts, all at
/// once through four slots, agree with the reference up to a near-tie of
/// [`F16_NEAR_TIE`]: F32 holds the Q4_1 values exactly, F16 rounds them
/// (relative error up to 2^-11).
#[test]
fn other_tensor_types_and_mixed_formats_agree_margin_aware() {
    let reference = reference();
    let original = GgufFile::open(&smollm2_gguf()).unwrap();
    let (f32t, f16t) = (TensorType::F32, TensorType::F16);
    let first = [
        ("attn_q", f32t),
        ("attn_k", f16t),
        ("attn_v", f16t),
        ("attn_output", f32t),
        ("ffn_gate", f32t),
        ("ffn_down", f16t),
    ];
    let second = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];
    let types: Vec<(String, TensorType)> = first
        .iter()
        .map(|&(name, t)| (format!("blk.0.{name}.weight"), t))
        .chain(
            second
                .iter()
                .map(|name| (format!("blk.1.{name}.weight"), f16t)),
        )
        .collect();
    for (name, _) in &types {
        // Q4_1 takes the same bytes on the device as in the file.
        let was = original.tensor(name).unwrap().tensor_type();
        assert_eq!(was, TensorType::Q4_1, "{name}");
    }
    let (file, grown) = gguf_reencode::reencoded(&original, &types);
    let context = || ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let before = Generator::load(&context(), &original, options()).unwrap();
    let generator = Generator::load(&context(), &file, options()).unwrap();
    // The device bytes grow by the weights' and by the first block's
    // separate projections' outputs, in each step graph (1, 2, 4 and 32
    // rows; the stacked outputs serve the other blocks).
    let c = generator.config();
    let separate = c.width + 2 * c.kv_heads * c.head_dim + 2 * c.ffn_width;
    let outputs = ((1 + 2 + 4 + 32) * separate * 4) as i64;
    let bytes = |g: &Generator| g.stats().device_bytes as i64;
    assert_eq!(bytes(&generator) - bytes(&before), grown + outputs);
    drop(before);
    agrees_margin_aware(&generator, &reference, "other types", F16_NEAR_TIE);
}

#[test]
fn requests_are_checked_streamed_stopped_sampled_and_cancelled() {
    let generator = generator(GeneratorOptions {
        queue: 2,
        ..options()
    });
    let counting = generator.encode("1, 2, 3, 4, 5, 6,");
    // Refused before anything runs.
    let refused = |request: GenerateRequest| generator.generate(request).unwrap_err().to_string();
    assert!(refused(GenerateRequest::greedy(vec![], 4)).contains("no tokens"));
    assert!(refused(GenerateRequest::greedy(vec![49_152], 4)).contains("vocabulary"));
    assert!(refused(GenerateRequest::greedy(counting.clone(), 1000)).contains("context"));
    let hot = GenerateRequest {
        sampling: Sampling {
            temperature: 5.0,
            ..Sampling::greedy()
        },
        ..GenerateRequest::greedy(counting.clone(), 4)
    };
    assert!(refused(hot).contains("temperature"));
    let empty_stop = GenerateRequest {
        stop: vec![String::new()],
        ..GenerateRequest::greedy(counting.clone(), 4)
    };
    assert!(refused(empty_stop).contains("stop string"));

    // Streaming: token events, then one Finished whose counts add up.
    let mut stream = generator
        .generate(GenerateRequest::greedy(counting.clone(), 6))
        .unwrap();
    let (mut tokens, mut text) = (0, String::new());
    loop {
        match stream.blocking_next().unwrap().unwrap() {
            GenerationEvent::Token { text: piece, .. } => {
                tokens += 1;
                text.push_str(&piece);
            }
            GenerationEvent::Finished {
                reason,
                prompt_tokens,
                completion_tokens,
                text: rest,
            } => {
                text.push_str(&rest);
                assert_eq!(reason, FinishReason::Length);
                assert_eq!((prompt_tokens, completion_tokens), (counting.len(), tokens));
                break;
            }
        }
    }
    assert_eq!(tokens, 6);
    assert!(text.starts_with(" 7, 8"), "{text:?}");
    assert!(stream.blocking_next().is_none());

    // A stop string ends the text where it begins.
    let stopped = generator
        .generate(GenerateRequest {
            stop: vec![", 9".into()],
            ..GenerateRequest::greedy(counting.clone(), 12)
        })
        .unwrap()
        .collect_blocking()
        .unwrap();
    assert_eq!(stopped.reason, FinishReason::Stop);
    assert_eq!(stopped.text, " 7, 8");

    // Sampling: the same seed gives the same tokens.
    let sampled = |seed| {
        let request = GenerateRequest {
            sampling: Sampling {
                temperature: 1.0,
                top_k: 50,
                top_p: 0.95,
                seed,
            },
            ..GenerateRequest::greedy(generator.encode("Once upon a time"), 8)
        };
        generator
            .generate(request)
            .unwrap()
            .collect_blocking()
            .unwrap()
            .ids
    };
    let first = sampled(11);
    assert_eq!(first, sampled(11));
    assert!((0..4).any(|seed| sampled(seed) != first));

    // Cancelling: a dropped stream frees its slot; later requests run.
    for _ in 0..6 {
        let mut stream = generator
            .generate(GenerateRequest::greedy(counting.clone(), 100))
            .unwrap();
        assert!(matches!(
            stream.blocking_next(),
            Some(Ok(GenerationEvent::Token { .. }))
        ));
    }
    let after = generator
        .generate(GenerateRequest::greedy(counting.clone(), 2))
        .unwrap()
        .collect_blocking()
        .unwrap();
    assert_eq!(after.ids.len(), 2);
    assert_idle(&generator);

    // A full queue answers Busy: four sequences run, two wait.
    // (Admission is asynchronous: a request counts as waiting until the
    // generation thread gives it a slot, so these retry while Busy.)
    let held: Vec<_> = (0..6)
        .map(|_| {
            loop {
                match generator.generate(GenerateRequest::greedy(counting.clone(), 50)) {
                    Ok(stream) => break stream,
                    Err(hrx_core::Error::Busy(_)) => {
                        std::thread::sleep(std::time::Duration::from_millis(5))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .collect();
    let busy = (0..50).find_map(|_| {
        generator
            .generate(GenerateRequest::greedy(counting.clone(), 50))
            .err()
    });
    assert!(matches!(busy, Some(hrx_core::Error::Busy(_))), "{busy:?}");
    drop(held);
}

/// The re-encoding of `block_formats_agree_margin_aware`: per block, the
/// attention's matrices (576 columns: whole blocks of 32) and the
/// feed-forward down projection (1,536 columns: whole super-blocks),
/// cycling through the formats a Q4_K_M or Q5_K_M file mixes; the gate
/// and up projections stay Q4_1.
fn block_formats(b: usize) -> [(&'static str, TensorType); 5] {
    let (attention, output, down) = match b % 3 {
        0 => (TensorType::Q5_0, TensorType::Q5_0, TensorType::Q4_K),
        1 => (TensorType::Q5_1, TensorType::Q4_0, TensorType::Q5_K),
        _ => (TensorType::Q4_1, TensorType::Q4_1, TensorType::Q6_K),
    };
    [
        ("attn_q", attention),
        ("attn_k", attention),
        ("attn_v", attention),
        ("attn_output", output),
        ("ffn_down", down),
    ]
}

/// The device format of a re-encoded tensor type.
fn device_format(t: TensorType) -> QuantFormat {
    QuantFormat::ALL
        .into_iter()
        .find(|f| format!("{f:?}") == t.name())
        .unwrap_or_else(|| panic!("{} has no device format", t.name()))
}

/// SmolLM2 re-encoded in the block formats of [`block_formats`] against
/// `reference_quants.json`: the float64 reference of the re-encoded file
/// itself (re-encoding moves the weights, so the Q4_1 file's reference
/// does not hold). The device bytes change by exactly the re-encoded
/// matrices' words.
#[test]
fn block_formats_agree_margin_aware() {
    use sha2::{Digest, Sha256};
    let original = GgufFile::open(&smollm2_gguf()).unwrap();
    let blocks = LlamaConfig::from_gguf(&original).unwrap().layers;
    let types: Vec<(String, TensorType)> = (0..blocks)
        .flat_map(|b| {
            block_formats(b)
                .into_iter()
                .map(move |(name, to)| (format!("blk.{b}.{name}.weight"), to))
        })
        .filter(|(_, to)| *to != TensorType::Q4_1)
        .collect();
    let (file, _) = gguf_reencode::reencoded(&original, &types);
    let sha: String = Sha256::digest(file.bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let reference = reference_named("reference_quants.json");
    let Some(reference) = reference.filter(|r| r.gguf_sha256 == sha) else {
        let path = smollm2_gguf().with_file_name("SmolLM2-135M-Instruct.quants.gguf");
        std::fs::write(&path, file.bytes()).unwrap();
        panic!(
            "the re-encoded file ({sha}) is not the one reference_quants.json was made from; it \
             is written to {}: remake the reference from it (reference/smollm2/README.md)",
            path.display()
        );
    };
    let context = || ModelContext::new(RuntimeOptions::from_env().unwrap()).unwrap();
    let before = Generator::load(&context(), &original, options()).unwrap();
    let generator = Generator::load(&context(), &file, options()).unwrap();
    let grown: i64 = types
        .iter()
        .map(|(name, to)| {
            let info = original.tensor(name).unwrap();
            let (rows, cols) = (info.shape()[0], info.shape()[1]);
            let words = |f: QuantFormat| (rows * f.row_words(cols).unwrap() * 4) as i64;
            words(device_format(*to)) - words(QuantFormat::Q4_1)
        })
        .sum();
    let bytes = |g: &Generator| g.stats().device_bytes as i64;
    assert_eq!(bytes(&generator) - bytes(&before), grown);
    drop(before);
    agrees_margin_aware(&generator, &reference, "block formats", NEAR_TIE);
}
