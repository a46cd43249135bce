//! The sentence-embedding benchmark: a BERT encoder of
//! all-MiniLM-L6-v2's shapes on hrx against a baseline measured on the
//! same machine: PyTorch (transformers, same shapes, read from the JSON of
//! `bench/pytorch/minilm.py` through `--torch PATH` or
//! `HRX_BENCH_TORCH`), or without it the naive path (a fresh one-slot
//! pool prepared per sentence).
//!
//! Figures, each for f32 and (where the device has f16) f16:
//! - **latency**: one sentence of 128 tokens through a one-sentence pool,
//!   submitted and read back alone: p50 over many runs;
//! - **throughput**: batches of `B` x 128 tokens through a two-slot pool,
//!   two in flight: sentences/s (`B` = 1024 on a GPU, 16 on a CPU);
//! - **through the embedder**: 64 concurrent clients each asking for
//!   `2B/64` sentences at a time through `SentenceEmbedder` (dynamic
//!   batching up to `B`, two batches' worth outstanding as in the direct
//!   path): sentences/s, against the direct batch.
//!
//! `--model DIR`: a sentence-transformers folder; its weights are used when
//! it has `model.safetensors` (and with `--seeded` or without them, seeded
//! weights of the shapes in its `config.json`: speed does not depend on
//! the values). Writes `target/bench/models.json` (or `HRX_BENCH_OUT`) and
//! prints a table. `HRX_BENCH_MS`: measured milliseconds per figure.
//!
//! `--profile BATCH SEQ [f16]` instead prints the device time of each
//! kernel of the encoder's graph for that shape. `--attention fused |
//! by-head` forces that attention path (`AttentionPath`; the built-in
//! choice otherwise), for comparing them. `--f32-quads off | on[:BK[:BN]]`
//! forces the f32 matmuls onto the quad kernel (with k steps of BK, 16 or
//! 8, and BN columns a workgroup, 128 or 64) or off it
//! (`Tuning::with_f32_quads`), `--coop-tiles BM,BN,BK,SGM,SGN` forces the
//! tensor-core matmuls of more than 64 rows onto that tiling where it fits
//! (`Tuning::coop_tiles`), `--encoder-tiles on | off` forces the encoder
//! attention's tiled kernel on or off (`Tuning::with_encoder_tiles`),
//! `--encoder-block KEYS,PER_ITEM[,SPLIT]` forces the online-softmax kernel's
//! block (`Tuning::encoder_block`), and
//! `--precision f32 | f16` measures one precision only.

mod profile;

use hrx_bench::{report, seeded};
use hrx_core::{Error, Result};
use hrx_inference::{ModelContext, PreparedModel};
use hrx_models::{
    bert::{AttentionPath, BertConfig, BertEncoder, Precision},
    embed::{EmbedderOptions, SentenceEmbedder},
    tokenizer::WordPieceTokenizer,
};
use hrx_runtime::{DeviceKind, RuntimeOptions};
use hrx_tensor::ops::Tuning;
use report::{Better, Entry, env_usize, percentile};
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

const SEQ: usize = 128;
const CLIENTS: usize = 64;

struct Settings {
    model: PathBuf,
    seeded: bool,
    torch: Option<PathBuf>,
    batch: usize,
    measure: Duration,
    attention: AttentionPath,
    f32_quads: Option<String>,
    encoder_tiles: Option<String>,
    encoder_block: Option<String>,
    coop_tiles: Option<String>,
    precision: Option<Precision>,
}

fn settings(cpu: bool) -> std::result::Result<Settings, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let ms = env_usize("HRX_BENCH_MS")?.unwrap_or(if cpu { 3000 } else { 1500 });
    Ok(Settings {
        model: PathBuf::from(
            value("--model").unwrap_or_else(|| "target/models/all-MiniLM-L6-v2".into()),
        ),
        seeded: args.iter().any(|a| a == "--seeded"),
        torch: value("--torch")
            .or_else(|| std::env::var("HRX_BENCH_TORCH").ok())
            .map(PathBuf::from),
        batch: if cpu { 16 } else { 1024 },
        attention: match value("--attention").as_deref() {
            None => AttentionPath::Auto,
            Some("fused") => AttentionPath::Fused,
            Some("by-head") => AttentionPath::ByHead,
            Some(other) => return Err(format!("--attention {other}: fused or by-head")),
        },
        measure: Duration::from_millis(ms as u64),
        f32_quads: value("--f32-quads"),
        encoder_tiles: value("--encoder-tiles"),
        encoder_block: value("--encoder-block"),
        coop_tiles: value("--coop-tiles"),
        precision: match value("--precision").as_deref() {
            None => None,
            Some("f32") => Some(Precision::F32),
            Some("f16") => Some(Precision::F16),
            Some(other) => return Err(format!("--precision {other}: f32 or f16")),
        },
    })
}

fn encoder(context: &ModelContext, s: &Settings, precision: Precision) -> Result<BertEncoder> {
    let config = BertConfig::from_dir(&s.model)?;
    let file = s.model.join("model.safetensors");
    let encoder = if s.seeded || !file.exists() {
        BertEncoder::from_safetensors(
            context,
            config.clone(),
            &seeded::checkpoint(&config),
            precision,
        )
    } else {
        BertEncoder::load(context, &s.model, precision)
    };
    Ok(encoder?.with_attention(s.attention))
}

/// Token ids of `batch` sentences of exactly `SEQ` tokens.
fn sentences(batch: usize, vocab: usize) -> Vec<Vec<u32>> {
    (0..batch)
        .map(|b| {
            let mut ids: Vec<u32> = (0..SEQ)
                .map(|i| (1000 + (b * 131 + i * 17) % (vocab - 1000)) as u32)
                .collect();
            ids[0] = 101;
            ids[SEQ - 1] = 102;
            ids
        })
        .collect()
}

fn run(model: &PreparedModel, encoder: &BertEncoder, ids: &[Vec<u32>]) -> Result<()> {
    let rows: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let inference = model
        .acquire_blocking()?
        .submit_host_with(|input, staging| encoder.write_input(&rows, SEQ, input, staging))?;
    inference.download()?.wait().map(drop)
}

/// p50 latency (ms) of one sentence through a one-sentence pool.
fn latency(encoder: &BertEncoder, measure: Duration) -> Result<f64> {
    let model = encoder.prepare(1, SEQ, 2)?;
    let ids = sentences(1, encoder.config().vocab_size);
    for _ in 0..3 {
        run(&model, encoder, &ids)?;
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < measure || samples.len() < 5 {
        let t = Instant::now();
        run(&model, encoder, &ids)?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(percentile(&mut samples, 50.0))
}

/// Sentences/s of back-to-back batches, two in flight.
fn throughput(encoder: &BertEncoder, batch: usize, measure: Duration) -> Result<f64> {
    let model = encoder.prepare(batch, SEQ, 2)?;
    let ids = sentences(batch, encoder.config().vocab_size);
    let rows: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    run(&model, encoder, &ids)?;
    let start = Instant::now();
    let mut done = 0usize;
    let mut in_flight = std::collections::VecDeque::new();
    while start.elapsed() < measure || done < 4 {
        if in_flight.len() == 2 {
            let readback: hrx_inference::InferenceReadback = in_flight.pop_front().expect("two");
            readback.wait()?;
            done += batch;
        }
        let inference = model
            .acquire_blocking()?
            .submit_host_with(|input, staging| encoder.write_input(&rows, SEQ, input, staging))?;
        in_flight.push_back(inference.download()?);
    }
    for readback in in_flight {
        readback.wait()?;
        done += batch;
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

/// Sentences each client asks for at a time: together two full batches,
/// so the embedder can keep two in flight as the direct path does.
fn per_client(batch: usize) -> usize {
    (2 * batch / CLIENTS).max(1)
}

/// Sentences/s through the embedder from `CLIENTS` concurrent clients.
fn through_embedder(context: &ModelContext, s: &Settings, precision: Precision) -> Result<f64> {
    let encoder = encoder(context, s, precision)?;
    let tokenizer = WordPieceTokenizer::from_dir(&s.model)?;
    let options = EmbedderOptions {
        precision,
        max_batch: s.batch,
        slots: 2,
        prepare_all: false,
        ..EmbedderOptions::default()
    };
    let embedder = SentenceEmbedder::new(tokenizer, encoder, &options)?;
    let per_client = per_client(s.batch);
    let ids = Arc::new(sentences(per_client, embedder.config().vocab_size));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .map_err(|e| Error::msg(e.to_string()))?;
    // Warm every tier the load can use.
    runtime.block_on(async {
        for n in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
            .into_iter()
            .take_while(|&n| n <= s.batch)
        {
            let warm: Vec<Vec<u32>> = sentences(n, embedder.config().vocab_size);
            embedder.embed_ids_async(warm).await?;
        }
        Ok::<_, Error>(())
    })?;
    let measure = s.measure;
    let start = Instant::now();
    let done = runtime.block_on(async {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let embedder = embedder.clone();
                let ids = Arc::clone(&ids);
                tokio::spawn(async move {
                    let mut done = 0usize;
                    while start.elapsed() < measure {
                        done += embedder.embed_ids_async(ids.to_vec()).await?.len();
                    }
                    Ok::<_, Error>(done)
                })
            })
            .collect();
        let mut total = 0;
        for client in clients {
            total += client.await.map_err(|e| Error::msg(e.to_string()))??;
        }
        Ok::<_, Error>(total)
    })?;
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

/// The naive path: prepare a one-sentence pool for each sentence.
fn naive_latency(encoder: &BertEncoder) -> Result<f64> {
    let ids = sentences(1, encoder.config().vocab_size);
    let mut samples = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let model = encoder.prepare(1, SEQ, 1)?;
        run(&model, encoder, &ids)?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(percentile(&mut samples, 50.0))
}

fn torch_results(path: &Path) -> std::result::Result<(String, BTreeMap<String, f64>), String> {
    let torch = report::read_torch(path)?;
    let name = format!("PyTorch {} (transformers, eager)", torch.version);
    Ok((name, torch.results))
}

fn main() -> std::result::Result<(), String> {
    let context = RuntimeOptions::from_env()
        .and_then(ModelContext::new)
        .map_err(|e| e.to_string())?;
    let target = context
        .runtime()
        .gpu()
        .map_err(|e| e.to_string())?
        .target()
        .clone();
    let s = settings(target.kind == DeviceKind::Cpu)?;
    let tuning = Tuning::parse(s.coop_tiles.as_deref(), None).map_err(|e| e.to_string())?;
    let tuning = match &s.f32_quads {
        Some(text) => tuning.with_f32_quads(text).map_err(|e| e.to_string())?,
        None => tuning,
    };
    let tuning = match &s.encoder_tiles {
        Some(text) => tuning.with_encoder_tiles(text).map_err(|e| e.to_string())?,
        None => tuning,
    };
    let tuning = Tuning {
        encoder_block: s
            .encoder_block
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e: hrx_core::Error| e.to_string())?,
        ..tuning
    };
    let context = context.with_tuning(tuning);
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--profile") {
        let number = |i: usize| {
            args.get(at + i)
                .and_then(|a| a.parse().ok())
                .ok_or("--profile BATCH SEQ [f16]")
        };
        let precision = match args.get(at + 3).map(String::as_str) {
            Some("f16") => Precision::F16,
            _ => Precision::F32,
        };
        let enc = encoder(&context, &s, precision).map_err(|e| e.to_string())?;
        return profile::run(&context, &enc, number(1)?, number(2)?);
    }
    let torch = s.torch.as_deref().map(torch_results).transpose()?;
    let mut precisions = vec![Precision::F32];
    if target.shader_f16 && target.storage_16bit && target.kind != DeviceKind::Cpu {
        precisions.push(Precision::F16);
    }
    if let Some(only) = s.precision {
        precisions.retain(|&p| p == only);
    }
    let mut entries = Vec::new();
    let mut extra = Vec::new();
    let e = |e: Error| e.to_string();
    for precision in precisions {
        let name = match precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        };
        let enc = encoder(&context, &s, precision).map_err(e)?;
        let latency = latency(&enc, s.measure).map_err(e)?;
        let direct = throughput(&enc, s.batch, s.measure).map_err(e)?;
        drop(enc);
        let pooled = through_embedder(&context, &s, precision).map_err(e)?;
        let base = |key: &str| {
            torch
                .as_ref()
                .and_then(|(n, r)| Some((n.clone(), *r.get(key)?)))
        };
        match base(&format!("latency_{name}_1x128_ms")) {
            Some((baseline_name, baseline)) => entries.push(Entry {
                name: format!("{name} one sentence of {SEQ} tokens, p50"),
                unit: "ms",
                hrx: latency,
                baseline,
                baseline_name,
                better: Better::Lower,
            }),
            None if precision == Precision::F32 => {
                let enc = encoder(&context, &s, precision).map_err(e)?;
                entries.push(Entry {
                    name: format!("{name} one sentence of {SEQ} tokens, p50"),
                    unit: "ms",
                    hrx: latency,
                    baseline: naive_latency(&enc).map_err(e)?,
                    baseline_name: "hrx naive path (a pool prepared per sentence)".into(),
                    better: Better::Lower,
                });
            }
            None => extra.push(format!(
                "| {name} one sentence of {SEQ} tokens, p50 | ms | {latency:.3} | - | - | lower |"
            )),
        }
        let key = format!("throughput_{name}_{}x{SEQ}", s.batch);
        match base(&key) {
            Some((baseline_name, baseline)) => entries.push(Entry {
                name: format!("{name} batch {}x{SEQ}", s.batch),
                unit: "sentences/s",
                hrx: direct,
                baseline,
                baseline_name,
                better: Better::Higher,
            }),
            None => extra.push(format!(
                "| {name} batch {}x{SEQ} | sentences/s | {direct:.1} | - | - | higher |",
                s.batch
            )),
        }
        entries.push(Entry {
            name: format!(
                "{name} {CLIENTS} clients x {} sentences through the embedder",
                per_client(s.batch)
            ),
            unit: "sentences/s",
            hrx: pooled,
            baseline: direct,
            baseline_name: format!("hrx direct batch of {} (same run)", s.batch),
            better: Better::Higher,
        });
    }
    let device = format!("{} ({:?})", target.name, target.kind);
    println!(
        "{}",
        report::table_with(&entries, &extra, &device, "baseline")
    );
    let path = report::output_path("models.json");
    report::write(&path, &report::json(&entries, &device))?;
    println!("wrote {}", path.display());
    Ok(())
}
