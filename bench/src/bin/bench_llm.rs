//! The text-generation benchmark: SmolLM2-135M-Instruct (Q4_1 GGUF) on
//! hrx's generator against PyTorch on the same machine (a llama of the
//! same shapes, f16 weights, static KV cache, CUDA graphs for decode;
//! `bench/pytorch/llm.py`, read through `--torch PATH` or
//! `HRX_BENCH_TORCH`), with the goals of the text-generation work beside.
//!
//! Figures:
//! - **decode, batch 1**: one sequence generating 256 tokens after a
//!   16-token prompt: tokens/s between its first and last token;
//! - **decode, batch 64**: 64 sequences at once, tokens/s over the steps
//!   where all 64 decode;
//! - **prefill, 512 tokens**: time to the first token of a 512-token
//!   prompt alone, p50;
//! - **time to first token under load**: a 128-token prompt joining 63
//!   decoding sequences, p50;
//! - **decode, sampled** (batch 1 and 64): temperature 0.8, top-k 40,
//!   top-p 0.95, drawing from the device's top-k candidates, against the
//!   same generator reading each sampled row of logits back.
//!
//! `--model FILE.gguf` runs a real file. `--shapes HEADER` runs seeded
//! weights of a file's shapes and types: HEADER is the file's first bytes
//! up to its tensor data followed by the whole file's length as 8
//! little-endian bytes (`--write-shapes FILE.gguf OUT` writes it, and
//! `cargo xtask gpu-bench` packs it), so a machine
//! without the model measures the same work (speed does not depend on
//! the values). Writes `target/bench/llm.json` (or `HRX_BENCH_OUT`).
//!
//! `--quant-tiling TILE,SPLITS` forces that tile (32 or 64) and those k
//! splits (1: none) on every tiled quantised matmul, for comparing with
//! the built-in choice. `--attention-workgroup N` forces workgroups of
//! `N` work items (a power of two, 32 to 1024) on the cached attention
//! (`Tuning::with_attention_workgroup`).
//!
//! `--kv-cache f16` runs the generator with f16 key/value caches, and
//! `--activations f16` with f16 activations (f32 otherwise).
//! `--stage-projection on|off` stages the projected attention's weights
//! in workgroup memory or not (`Tuning::stage_projection`), and
//! `--attention-splits N` splits each group of heads' projection over
//! `N` workgroups (`Tuning::attention_splits`). `--spin-us N` sets
//! how long the step loop polls a step's completion
//! (`GeneratorOptions::spin_wait`), and `--new N` the tokens each decode
//! figure's sequences generate.
//!
//! `--profile ROWS POSITION` instead prints the device time of each
//! kernel of the step graph for that many rows, by kernel and grid, and
//! the whole step submitted and waited for (with `Completion::wait`, then
//! polling through the step).

use hrx_bench::report::{self, Better, Entry, percentile};
use hrx_core::{Error, Result};
use hrx_inference::ModelContext;
use hrx_models::gguf::{GgufFile, TensorType};
use hrx_models::llama::{
    ActivationFormat, CacheFormat, GenerateRequest, GenerationEvent, Generator, GeneratorOptions,
    Sampling, record_step,
};
use hrx_runtime::{DeviceKind, Operation, RuntimeOptions};
use hrx_tensor::ops::Tuning;
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// Sequences of the batched figures (and cache slots).
const BATCH: usize = 64;

struct Settings {
    model: Option<PathBuf>,
    shapes: Option<PathBuf>,
    torch: Option<PathBuf>,
    quick: bool,
    profile: Option<(usize, usize)>,
    quant_tiling: Option<String>,
    attention_workgroup: Option<String>,
    write_shapes: Option<(PathBuf, PathBuf)>,
    cache: CacheFormat,
    activations: ActivationFormat,
    /// `--spin-us N`: the generator's `spin_wait`.
    spin: Option<String>,
    /// `--new N`: tokens a sequence of the decode figures.
    new: Option<String>,
    /// `--stage-projection on|off`: `Tuning::stage_projection`.
    stage_projection: Option<String>,
    /// `--attention-splits N`: `Tuning::attention_splits`.
    attention_splits: Option<String>,
}

fn settings() -> Settings {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(PathBuf::from)
    };
    let text = |flag: &str| value(flag).map(|v| v.to_string_lossy().into_owned());
    Settings {
        model: value("--model"),
        shapes: value("--shapes"),
        torch: value("--torch").or_else(|| std::env::var_os("HRX_BENCH_TORCH").map(PathBuf::from)),
        quick: args.iter().any(|a| a == "--quick"),
        quant_tiling: value("--quant-tiling").map(|v| v.to_string_lossy().into_owned()),
        attention_workgroup: value("--attention-workgroup")
            .map(|v| v.to_string_lossy().into_owned()),
        write_shapes: args
            .iter()
            .position(|a| a == "--write-shapes")
            .and_then(|i| {
                Some((
                    PathBuf::from(args.get(i + 1)?),
                    PathBuf::from(args.get(i + 2)?),
                ))
            }),
        profile: args.iter().position(|a| a == "--profile").and_then(|i| {
            let number = |k: usize| args.get(i + k)?.parse::<usize>().ok();
            Some((number(1)?, number(2)?))
        }),
        cache: match value("--kv-cache").as_deref().and_then(Path::to_str) {
            Some("f16") => CacheFormat::F16,
            _ => CacheFormat::F32,
        },
        activations: match value("--activations").as_deref().and_then(Path::to_str) {
            Some("f16") => ActivationFormat::F16,
            _ => ActivationFormat::F32,
        },
        spin: text("--spin-us"),
        new: text("--new"),
        stage_projection: text("--stage-projection"),
        attention_splits: text("--attention-splits"),
    }
}

/// A deterministic stream of numbers (SplitMix64).
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// The GGUF at `header`'s shapes with seeded values: valid blocks with
/// small scales, norms near 1.
fn seeded_file(header: &Path) -> Result<GgufFile> {
    let bytes =
        std::fs::read(header).map_err(|e| Error::msg(format!("{}: {e}", header.display())))?;
    let (head, length) = bytes
        .split_at_checked(bytes.len().saturating_sub(8))
        .ok_or_else(|| Error::msg("the shapes file is too short"))?;
    let length = u64::from_le_bytes(length.try_into().expect("8 bytes")) as usize;
    let mut data = head.to_vec();
    data.resize(length, 0);
    // Zeros are valid blocks: parse once for the tensors' places.
    let file = GgufFile::from_bytes(data)?;
    let mut data = file.bytes().to_vec();
    let mut rng = Seeded(7);
    let half = |v: f32| half::f16::from_f32(v).to_le_bytes();
    for info in file.tensors() {
        let start = (file.data_offset() + info.data_offset()) as usize;
        let region = &mut data[start..start + info.byte_len() as usize];
        match info.tensor_type() {
            TensorType::F32 => {
                for value in region.chunks_exact_mut(4) {
                    value.copy_from_slice(&(0.9 + 0.2 * rng.unit()).to_le_bytes());
                }
            }
            TensorType::Q4_1 => {
                for block in region.chunks_exact_mut(20) {
                    block[0..2].copy_from_slice(&half(0.004 + 0.004 * rng.unit()));
                    block[2..4].copy_from_slice(&half(-0.03 * rng.unit()));
                    for b in &mut block[4..] {
                        *b = rng.next() as u8;
                    }
                }
            }
            TensorType::Q8_0 => {
                for block in region.chunks_exact_mut(34) {
                    block[0..2].copy_from_slice(&half(0.0005 + 0.0005 * rng.unit()));
                    for b in &mut block[2..] {
                        *b = rng.next() as u8;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(GgufFile::from_bytes(data)?)
}

/// A prompt of `n` tokens (ordinary ids, no special tokens).
fn prompt(n: usize, salt: usize) -> Vec<u32> {
    (0..n)
        .map(|i| (1000 + (i * 37 + salt * 101) % 40_000) as u32)
        .collect()
}

fn request(prompt: Vec<u32>, new: usize) -> GenerateRequest {
    GenerateRequest {
        stop_at_eos: false,
        ..GenerateRequest::greedy(prompt, new)
    }
}

/// The sampled figures' settings: top-k 40 lies within the device's 64
/// candidates, so a draw never reads a whole row back, whatever the
/// weights' values.
const SAMPLED: Sampling = Sampling {
    temperature: 0.8,
    top_k: 40,
    top_p: 0.95,
    seed: 7,
};

fn sampled(prompt: Vec<u32>, new: usize) -> GenerateRequest {
    GenerateRequest {
        sampling: SAMPLED,
        ..request(prompt, new)
    }
}

/// The times at which each token of a generation arrived.
fn token_times(generator: &Generator, request: GenerateRequest) -> Result<Vec<Instant>> {
    let mut stream = generator.generate(request)?;
    let mut times = Vec::new();
    while let Some(event) = stream.blocking_next() {
        match event? {
            GenerationEvent::Token { .. } => times.push(Instant::now()),
            GenerationEvent::Finished { .. } => break,
        }
    }
    Ok(times)
}

fn rate(times: &[Instant]) -> f64 {
    let span = times[times.len() - 1] - times[0];
    (times.len() - 1) as f64 / span.as_secs_f64()
}

/// Tokens/s of one sequence, after half a second of decoding: a GPU
/// that was idle runs its first steps at low clocks (a run's first
/// figure read 500-800 tokens/s after eight tokens of warm-up, against
/// about 1,090 in the run after it, on an H100).
fn decode_alone(generator: &Generator, new: usize, make: Make) -> Result<f64> {
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(500) {
        token_times(generator, make(prompt(16, 0), 64))?;
    }
    Ok(rate(&token_times(generator, make(prompt(16, 1), new))?))
}

/// How a figure's requests are made: [`request`] or [`sampled`].
type Make = fn(Vec<u32>, usize) -> GenerateRequest;

/// A decode figure: tokens/s of a generator for `new` tokens a sequence.
type Figure = fn(&Generator, usize, Make) -> Result<f64>;

/// Aggregate tokens/s while `BATCH` sequences decode together.
fn decode_batched(generator: &Generator, new: usize, make: Make) -> Result<f64> {
    let times: Vec<Vec<Instant>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..BATCH)
            .map(|i| scope.spawn(move || token_times(generator, make(prompt(16, i), new))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a benchmark thread"))
            .collect::<Result<_>>()
    })?;
    // The window where every sequence was decoding.
    let start = times.iter().map(|t| t[0]).max().expect("sequences");
    let end = times
        .iter()
        .map(|t| t[t.len() - 1])
        .min()
        .expect("sequences");
    let inside = times
        .iter()
        .flatten()
        .filter(|&&t| t > start && t <= end)
        .count();
    Ok(inside as f64 / (end - start).as_secs_f64())
}

/// Milliseconds to the first token of a `tokens`-token prompt, p50.
fn first_token_ms(generator: &Generator, tokens: usize, runs: usize) -> Result<f64> {
    let mut samples = Vec::new();
    for run in 0..runs + 1 {
        let start = Instant::now();
        token_times(generator, request(prompt(tokens, run), 1))?;
        if run > 0 {
            samples.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(percentile(&mut samples, 50.0))
}

/// Milliseconds to the first token of a 128-token prompt while
/// `BATCH - 1` sequences decode, p50.
fn first_token_under_load(generator: &Generator, runs: usize) -> Result<f64> {
    std::thread::scope(|scope| {
        let background: Vec<_> = (0..BATCH - 1)
            .map(|i| {
                scope.spawn(move || {
                    token_times(
                        generator,
                        request(prompt(16, i), 10_000.min(generator.options().context - 16)),
                    )
                })
            })
            .collect();
        while generator.stats().active < BATCH - 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = first_token_ms(generator, 128, runs);
        drop(background);
        result
    })
}

/// `--profile ROWS POSITION`: the device time of each dispatch of the
/// step graph for `ROWS` rows (each at `POSITION`), each recorded alone and
/// repeated in one submission, summed per kernel.
fn profile(
    context: &ModelContext,
    file: &GgufFile,
    (rows, position): (usize, usize),
    (cache, activations): (CacheFormat, ActivationFormat),
) -> Result<()> {
    const REPS: u32 = 20;
    let options = GeneratorOptions {
        sequences: rows.min(BATCH),
        context: 1024,
        prefill_rows: rows,
        queue: 1,
        cache,
        activations,
        ..GeneratorOptions::default()
    };
    let graph = record_step(context, file, options, rows, position)?;
    let mut by_kernel: std::collections::BTreeMap<String, (f64, usize)> = Default::default();
    let mut dispatches = 0;
    for op in graph.operations() {
        let Operation::Dispatch {
            kernel,
            views,
            constants,
            workgroups,
        } = op
        else {
            continue;
        };
        dispatches += 1;
        let mut timed = context.runtime().graph();
        for _ in 0..REPS {
            timed.dispatch(kernel, views, constants, workgroups)?;
        }
        let timed = timed.prepare()?;
        timed.submit()?.wait()?;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            timed.submit()?.wait()?;
            best = best.min(start.elapsed().as_secs_f64() * 1e6 / f64::from(REPS));
        }
        let name = format!("{} {:?}", kernel.contract().entry_point, workgroups);
        let entry = by_kernel.entry(name).or_default();
        entry.0 += best;
        entry.1 += 1;
    }
    let total: f64 = by_kernel.values().map(|(us, _)| us).sum();
    println!("{rows} rows at position {position}: {total:.0} us over {dispatches} dispatches");
    // The whole step as the generator replays it: submit and wait.
    let whole = graph.prepare()?;
    whole.submit()?.wait()?;
    let mut samples: Vec<f64> = (0..50)
        .map(|_| {
            let start = Instant::now();
            whole.submit()?.wait()?;
            Ok(start.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_>>()?;
    println!(
        "the whole step, submitted and waited for: {:.0} us p50",
        percentile(&mut samples, 50.0)
    );
    let spin = GeneratorOptions::default().spin_wait;
    let mut samples: Vec<f64> = (0..50)
        .map(|_| {
            let start = Instant::now();
            whole.submit()?.wait_spinning(spin)?;
            Ok(start.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_>>()?;
    println!(
        "the whole step, submitted and polled for: {:.0} us p50",
        percentile(&mut samples, 50.0)
    );
    // Steps queued back to back: the device's time a step with no host
    // between steps.
    const QUEUED: u32 = 10;
    let mut samples: Vec<f64> = (0..10)
        .map(|_| {
            let start = Instant::now();
            let mut last = whole.submit()?;
            for _ in 1..QUEUED {
                last = whole.submit()?;
            }
            last.wait_spinning(spin)?;
            Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(QUEUED))
        })
        .collect::<Result<_>>()?;
    println!(
        "{QUEUED} steps queued back to back: {:.0} us a step p50",
        percentile(&mut samples, 50.0)
    );
    let mut sorted: Vec<_> = by_kernel.into_iter().collect();
    sorted.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!("| kernel | dispatches | us | us each | share |\n|---|---:|---:|---:|---:|");
    for (name, (us, n)) in sorted {
        println!(
            "| {name} | {n} | {us:.1} | {:.2} | {:.1}% |",
            us / n as f64,
            100.0 * us / total
        );
    }
    Ok(())
}

/// `--write-shapes FILE.gguf OUT`: FILE's bytes up to its tensor data,
/// then its length as 8 little-endian bytes (what `--shapes` reads).
fn write_shapes(file: &Path, out: &Path) -> std::result::Result<(), String> {
    let gguf = GgufFile::open(file).map_err(|e| e.to_string())?;
    let mut bytes = gguf.bytes()[..gguf.data_offset() as usize].to_vec();
    bytes.extend_from_slice(&(gguf.bytes().len() as u64).to_le_bytes());
    std::fs::write(out, bytes).map_err(|e| format!("{}: {e}", out.display()))
}

/// A flag's whole number, or an error naming the flag.
fn count(flag: &str, text: &str) -> std::result::Result<usize, String> {
    text.parse()
        .map_err(|_| format!("{flag} `{text}`: expected a whole number"))
}

fn main() -> std::result::Result<(), String> {
    let s = settings();
    if let Some((file, out)) = &s.write_shapes {
        return write_shapes(file, out);
    }
    let e = |e: Error| e.to_string();
    let mut tuning = Tuning {
        quant_tiling: s
            .quant_tiling
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(e)?,
        ..Tuning::default()
    };
    if let Some(text) = &s.attention_workgroup {
        tuning = tuning.with_attention_workgroup(text).map_err(e)?;
    }
    if let Some(text) = &s.stage_projection {
        tuning = tuning.with_stage_projection(text).map_err(e)?;
    }
    if let Some(text) = &s.attention_splits {
        tuning = tuning.with_attention_splits(text).map_err(e)?;
    }
    let context = ModelContext::new(RuntimeOptions::from_env().map_err(e)?)
        .map_err(e)?
        .with_tuning(tuning);
    let target = context.runtime().gpu().map_err(e)?.target().clone();
    let cpu = target.kind == DeviceKind::Cpu;
    let file = match (&s.shapes, &s.model) {
        (Some(shapes), _) => seeded_file(shapes).map_err(e)?,
        (None, model) => {
            let path = model.clone().unwrap_or_else(|| {
                PathBuf::from("target/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
            });
            GgufFile::open(&path).map_err(|e| e.to_string())?
        }
    };
    if let Some((rows, position)) = s.profile {
        let formats = (s.cache, s.activations);
        return profile(&context, &file, (rows, position), formats).map_err(e);
    }
    let quick = s.quick || cpu;
    let options = GeneratorOptions {
        sequences: if quick { 4 } else { BATCH },
        context: 1024,
        prefill_rows: if quick { 64 } else { 512 },
        queue: 4 * BATCH,
        cache: s.cache,
        activations: s.activations,
        spin_wait: match &s.spin {
            Some(us) => Duration::from_micros(count("--spin-us", us)? as u64),
            None => GeneratorOptions::default().spin_wait,
        },
        ..GeneratorOptions::default()
    };
    let loaded = Instant::now();
    let generator = Generator::load(&context, &file, options).map_err(e)?;
    eprintln!(
        "bench_llm: loaded in {:.1} s",
        loaded.elapsed().as_secs_f64()
    );
    let new = match &s.new {
        Some(n) => count("--new", n)?.max(2),
        None if quick => 16,
        None => 256,
    };
    let torch = match &s.torch {
        Some(path) => Some(report::read_torch(path)?),
        None => None,
    };
    let baseline = |key: &str| torch.as_ref().and_then(|t| t.results.get(key).copied());
    let baseline_name = torch.as_ref().map_or("none".to_string(), |t| {
        format!("PyTorch {} ({}), f16, CUDA graphs", t.version, t.library)
    });
    let mut entries = Vec::new();
    let mut add = |name: &str, unit: &'static str, hrx: f64, key: &str, better| {
        eprintln!("bench_llm: {name}: {hrx:.2} {unit}");
        entries.push(Entry {
            name: name.into(),
            unit,
            hrx,
            baseline: baseline(key).unwrap_or(f64::NAN),
            baseline_name: baseline_name.clone(),
            better,
        });
    };
    add(
        "decode, batch 1",
        "tokens/s",
        decode_alone(&generator, new, request).map_err(e)?,
        "decode_1",
        Better::Higher,
    );
    if !quick {
        add(
            "decode, batch 64",
            "tokens/s",
            decode_batched(&generator, new, request).map_err(e)?,
            "decode_64",
            Better::Higher,
        );
        add(
            "prefill, 512 tokens",
            "ms",
            first_token_ms(&generator, 512, 5).map_err(e)?,
            "prefill_512",
            Better::Lower,
        );
        add(
            "first token, 128-token prompt, 63 decoding",
            "ms",
            first_token_under_load(&generator, 5).map_err(e)?,
            "ttft_load",
            Better::Lower,
        );
    } else {
        add(
            "prefill, 64 tokens",
            "ms",
            first_token_ms(&generator, 64, 2).map_err(e)?,
            "prefill_64",
            Better::Lower,
        );
    }
    if !quick {
        // Sampled decoding: the device's top-k candidates against a
        // generator that reads each sampled row of logits back.
        let host = Generator::load(
            &context,
            &file,
            GeneratorOptions {
                sample_on_device: false,
                ..options
            },
        )
        .map_err(e)?;
        let figures: [(&str, Figure); 2] = [
            ("decode, batch 1, sampled", decode_alone),
            ("decode, batch 64, sampled", decode_batched),
        ];
        for (name, figure) in figures {
            let on_device = figure(&generator, new, sampled).map_err(e)?;
            let on_host = figure(&host, new, sampled).map_err(e)?;
            eprintln!("bench_llm: {name}: {on_device:.2} tokens/s, host draws {on_host:.2}");
            entries.push(Entry {
                name: name.into(),
                unit: "tokens/s",
                hrx: on_device,
                baseline: on_host,
                baseline_name: "hrx drawing from each whole row of logits on the host".into(),
                better: Better::Higher,
            });
        }
    }
    let device = target.name.clone();
    let mut records = report::records(&entries, &device);
    let goals = [
        ("decode, batch 1", "goal: at least 1,000 tokens/s"),
        ("decode, batch 64", "goal: at least 16,400 tokens/s"),
        ("prefill, 512 tokens", "goal: at most 10 ms"),
    ];
    for record in &mut records {
        record.note = goals
            .iter()
            .find(|(name, _)| *name == record.name)
            .map(|(_, goal)| goal.to_string());
    }
    report::write(&report::output_path("llm.json"), &report::to_json(&records))?;
    println!("{}", report::table(&entries, &device, &baseline_name));
    drop(generator);
    Ok(())
}
