//! The serving benchmark: `hrx serve` over HTTP against the same requests
//! through the library in this process, and against PyTorch
//! sentence-transformers serving them in its own process on the same GPU.
//!
//! - **HTTP**: `hrx serve --model DIR --slots S --max-batch B`, started
//!   here on a free port; clients send OpenAI embeddings requests of one
//!   sentence each (`encoding_format` base64, as the official client does,
//!   or float with `--encoding float`) and parse and check every answer.
//! - **library**: a `SentenceEmbedder` of the same folder, slots and batch
//!   size, called with `embed_async` by the same number of tokio clients.
//! - **PyTorch** (when its results are given): `bench/pytorch/serve.py`,
//!   a request queue with a batching worker in front of
//!   sentence-transformers, driven the same way (same sentences, same
//!   client counts, same batch limit).
//!
//! For each client count (1, 4, 16, 64, 256 by default; 1, 4, 16 with
//! `--small`) a closed loop
//! measures throughput and p50/p99/p999 latency of both sides, alternating
//! which goes first. The best throughput of a side is its saturation; an
//! open loop at half the HTTP saturation (arrivals at a fixed rate,
//! latency from the scheduled arrival) measures latency under load on
//! both sides. The HTTP overhead is the throughput lost and the p50 added
//! against the library at the same client count. Two figures split it:
//! the mean time a request spends inside the server (from its own
//! metrics), and the round trip alone (`GET /health` from one client).
//! Before measuring, the first sentences' embeddings over HTTP are
//! checked against the library's.
//!
//! Flags: `--model DIR` (default `target/models/all-MiniLM-L6-v2`);
//! `--seeded` (or a folder without `model.safetensors`): serve a copy of
//! the folder with seeded weights of its shapes (speed does not depend on
//! the values); `--hrx PATH` (default: `hrx` beside this binary);
//! `--slots S` (default 2); `--max-batch B` (default 64, 16 on a CPU
//! device); `--busy-poll-us US` and `--http-threads N` (the server's
//! flags; its defaults otherwise); `--clients LIST`; `--encoding base64|float`;
//! `--torch PATH` (or `HRX_BENCH_TORCH`): the PyTorch script's results;
//! `--small` (the default on a CPU device such as lavapipe) / `--full`:
//! a 1 s warm-up and 5 s windows, or 0.5 s and 2 s; `HRX_BENCH_MS` sets
//! the window. Writes `target/bench/serve.json` (or `HRX_BENCH_OUT`) and
//! prints a side-by-side table.

mod load;
mod server;
mod sides;
mod table;

use hrx_bench::{report, seeded};
use hrx_inference::ModelContext;
use hrx_models::{
    bert::Precision,
    embed::{EmbedderOptions, SentenceEmbedder},
};
use hrx_runtime::{DeviceKind, RuntimeOptions};
use load::{Measured, Window};
use server::{Server, Shape};
use sides::{Encoding, Http, Library, ServerTime};
use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

/// The sentences every side serves, one request each, in turn.
const SENTENCES: &str = include_str!("../../../pytorch/sentences.txt");

/// Sentences whose HTTP embedding is checked against the library's.
const CHECKED: usize = 8;

/// What to measure.
struct Settings {
    model: PathBuf,
    seeded: bool,
    hrx: PathBuf,
    shape: Shape,
    clients: Vec<usize>,
    encoding: Encoding,
    torch: Option<PathBuf>,
    window: Window,
}

fn settings(cpu: bool) -> Result<Settings, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| {
                args.get(i + 1)
                    .cloned()
                    .ok_or_else(|| format!("{flag} needs a value"))
            })
            .transpose()
    };
    let number = |flag: &str, default: usize| -> Result<usize, String> {
        value(flag)?.map_or(Ok(default), |v| {
            v.parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag} {v}: expected a positive whole number"))
        })
    };
    let small = args.iter().any(|a| a == "--small") || (cpu && !args.iter().any(|a| a == "--full"));
    let measure = report::env_usize("HRX_BENCH_MS")?.unwrap_or(if small { 5000 } else { 2000 });
    let hrx = match value("--hrx")? {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this binary: {e}"))?
            .with_file_name("hrx"),
    };
    // A CPU device answers a few requests a second: 64 and 256 clients
    // would queue for longer than any window there.
    let clients = value("--clients")?
        .unwrap_or_else(|| if small { "1,4,16" } else { "1,4,16,64,256" }.into())
        .split(',')
        .map(|c| {
            c.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("--clients: `{c}` is not a positive whole number"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Settings {
        model: PathBuf::from(
            value("--model")?.unwrap_or_else(|| "target/models/all-MiniLM-L6-v2".into()),
        ),
        seeded: args.iter().any(|a| a == "--seeded"),
        hrx,
        shape: Shape {
            slots: number("--slots", 2)?,
            max_batch: number("--max-batch", if cpu { 16 } else { 64 })?,
            busy_poll_us: value("--busy-poll-us")?
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("--busy-poll-us {v}: expected a whole number"))
                })
                .transpose()?,
            http_threads: value("--http-threads")?
                .map(|v| {
                    v.parse::<usize>()
                        .map_err(|_| format!("--http-threads {v}: expected a whole number"))
                })
                .transpose()?,
        },
        clients,
        encoding: Encoding::parse(value("--encoding")?.as_deref().unwrap_or("base64"))?,
        torch: value("--torch")?
            .or_else(|| std::env::var("HRX_BENCH_TORCH").ok())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        window: Window {
            warmup: Duration::from_millis(if small { 1000 } else { 500 }),
            measure: Duration::from_millis(measure as u64),
        },
    })
}

/// One client count's closed-loop figures, HTTP and library.
pub struct Row {
    pub clients: usize,
    pub http: Measured,
    pub library: Measured,
    /// Mean time an HTTP request spent inside the server (its metrics).
    pub inside_ms: Option<f64>,
}

/// Everything measured on the hrx side.
pub struct Results {
    pub rows: Vec<Row>,
    /// The open-loop rate, half the HTTP saturation.
    pub rate: f64,
    pub http_open: Measured,
    pub library_open: Measured,
    /// `GET /health` from one client: the round trip under every request.
    pub floor: Measured,
}

impl Results {
    /// The best closed-loop throughput of each side: (HTTP, library).
    pub fn saturation(&self) -> (f64, f64) {
        let best = |f: fn(&Row) -> f64| self.rows.iter().map(f).fold(0.0, f64::max);
        (best(|r| r.http.throughput), best(|r| r.library.throughput))
    }
}

async fn measure(
    s: &Settings,
    http: &Arc<Http>,
    (health, metrics): (String, String),
    library: &Arc<Library>,
) -> Result<Results, String> {
    for index in 0..CHECKED {
        let (over_http, direct) = (http.embed(index).await?, library.embed(index).await?);
        let similarity = sides::cosine(&over_http, &direct);
        if similarity < 0.9999 {
            return Err(format!(
                "sentence {index}: HTTP and library embeddings differ (cosine {similarity})"
            ));
        }
    }
    eprintln!("bench_serve: 1 client, GET /health (the HTTP round trip alone)");
    let floor = load::closed_loop(&sides::health_call(http.client(), health), 1, s.window).await?;
    eprintln!("bench_serve:   health  {}", floor.line());
    let (http_call, library_call) = (http.call(), library.call());
    let mut rows = Vec::new();
    for (i, &clients) in s.clients.iter().enumerate() {
        eprintln!("bench_serve: {clients} clients, closed loop");
        let before = ServerTime::read(&http.client(), &metrics).await?;
        let (over_http, library) = if i % 2 == 0 {
            let h = load::closed_loop(&http_call, clients, s.window).await?;
            (
                h,
                load::closed_loop(&library_call, clients, s.window).await?,
            )
        } else {
            let l = load::closed_loop(&library_call, clients, s.window).await?;
            (load::closed_loop(&http_call, clients, s.window).await?, l)
        };
        let inside_ms = ServerTime::read(&http.client(), &metrics)
            .await?
            .mean_ms_since(before);
        eprintln!("bench_serve:   HTTP    {}", over_http.line());
        eprintln!("bench_serve:   library {}", library.line());
        rows.push(Row {
            clients,
            http: over_http,
            library,
            inside_ms,
        });
    }
    let mut results = Results {
        rows,
        rate: 0.0,
        http_open: Measured::default(),
        library_open: Measured::default(),
        floor,
    };
    results.rate = results.saturation().0 / 2.0;
    eprintln!(
        "bench_serve: open loop at {:.1} requests/s (half the HTTP saturation)",
        results.rate
    );
    results.http_open = load::open_loop(&http_call, results.rate, s.window).await?;
    eprintln!("bench_serve:   HTTP    {}", results.http_open.line());
    results.library_open = load::open_loop(&library_call, results.rate, s.window).await?;
    eprintln!("bench_serve:   library {}", results.library_open.line());
    Ok(results)
}

/// The folder to serve: the model's, or a seeded copy under `scratch`.
fn model_folder(s: &Settings, scratch: &Path) -> Result<PathBuf, String> {
    if s.seeded || !s.model.join("model.safetensors").is_file() {
        eprintln!(
            "bench_serve: seeded weights of the shapes in {}",
            s.model.display()
        );
        seeded::model_folder(&s.model, scratch)
    } else {
        Ok(s.model.clone())
    }
}

/// The served model's name, as `GET /v1/models` gives it.
async fn model_name(server: &Server) -> Result<String, String> {
    let url = server.url("/v1/models");
    let models: serde_json::Value = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    models["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("GET {url}: no model in {models}"))
}

fn run() -> Result<(), String> {
    let context = ModelContext::new(RuntimeOptions::default()).map_err(|e| e.to_string())?;
    let target = context
        .runtime()
        .gpu()
        .map_err(|e| e.to_string())?
        .target()
        .clone();
    let s = settings(target.kind == DeviceKind::Cpu)?;
    let device = target.name.clone();
    let torch = s.torch.as_deref().map(report::read_torch).transpose()?;
    let scratch = std::env::temp_dir().join(format!("hrx-bench-serve-{}", std::process::id()));
    let folder = model_folder(&s, &scratch)?;
    let sentences: Arc<Vec<String>> = Arc::new(SENTENCES.lines().map(str::to_owned).collect());
    eprintln!(
        "bench_serve: {device}, {} slots, batches of up to {}, {} sentences, clients {:?}",
        s.shape.slots,
        s.shape.max_batch,
        sentences.len(),
        s.clients
    );
    let server = Server::start(&s.hrx, &folder, s.shape)?;
    let embedder = SentenceEmbedder::load(
        &context,
        &folder,
        &EmbedderOptions {
            precision: Precision::F32,
            max_batch: s.shape.max_batch,
            slots: s.shape.slots,
            batch_window: Duration::ZERO,
            queue: 4096,
            prepare_all: true,
        },
    )
    .map_err(|e| e.to_string())?;
    let dimensions = embedder.dimensions();
    let library = Arc::new(Library {
        embedder,
        sentences: Arc::clone(&sentences),
    });
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    let measured = tokio.block_on(async {
        let name = model_name(&server).await?;
        let http = Arc::new(Http::new(
            server.url("/v1/embeddings"),
            name,
            s.encoding,
            dimensions,
            Arc::clone(&sentences),
        )?);
        measure(
            &s,
            &http,
            (server.url("/health"), server.url("/metrics")),
            &library,
        )
        .await
    });
    drop(tokio);
    let stopped = server.stop();
    // The embedder's drop joins its batching thread: outside tokio.
    drop(library);
    let _ = std::fs::remove_dir_all(&scratch);
    let results = measured?;
    // The figures stand whatever the shutdown did; say so if it was not
    // clean (no `kill` program there, say).
    if let Err(e) = stopped {
        eprintln!("bench_serve: warning: {e}");
    }

    let records = table::records(&results, torch.as_ref(), &s, &device);
    println!("{}", table::markdown(&results, torch.as_ref(), &s, &device));
    let path = report::output_path("serve.json");
    report::write(&path, &report::to_json(&records))?;
    eprintln!("bench_serve: wrote {}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_serve: {e}");
            ExitCode::FAILURE
        }
    }
}
