//! The inference-pool benchmark: the 3-layer MLP served by a
//! `PreparedModel` pool, against two baselines measured in the same run on
//! the same device.
//!
//! - **hrx pool**: for every slot count and client count, `clients` threads
//!   each loop `acquire_blocking -> submit_host -> download -> read_into`
//!   (the allocation-free warm path) for a fixed time.
//! - **naive**: `Mlp::run_naive` per request from the same number of client
//!   threads: allocate IO and scratch, record, prepare, submit, read back.
//! - **raw ash**: the very same kernels (SPIR-V, push constants, grids and
//!   initial bytes, taken from hrx through `Graph::operations`) recorded
//!   once by hand into one command buffer with a host-visible staging upload
//!   and readback, submitted per request with a timeline wait; one client.
//!   With one client, hrx and raw alternate in rounds so drift lands on both.
//!
//! Every configuration is validated against `MlpConfig::reference` after it
//! is measured. Writes `target/bench/inference.json` (or `HRX_BENCH_OUT`) in
//! the schema of `docs/benchmarks.md` and prints a table.
//!
//! `--small`: `MlpConfig::small()` and a reduced grid, the default on a CPU
//! device such as lavapipe; `--full`: `MlpConfig::bench()` and the whole
//! grid, the default elsewhere. `HRX_BENCH_MS`: measured milliseconds per
//! configuration (default 800, 300 small); a fifth of it again is warm-up.
//! `HRX_DEVICE` picks the device, as for the runtime.

mod load;
mod plan;
use hrx_bench::raw;
use hrx_bench::raw_kernel;
mod raw_side;
use hrx_bench::report;

use hrx_inference::{ModelContext, PreparedModel};
use hrx_models::{
    Weights, compare,
    toy::{Mlp, MlpConfig},
};
use hrx_runtime::{DeviceKind, RuntimeOptions};
use load::{Measured, Window};
use report::{Better, Entry, env_usize, percentile};
use std::{process::ExitCode, time::Duration};

/// What to measure.
struct Settings {
    config: MlpConfig,
    slots: Vec<usize>,
    clients: Vec<usize>,
    window: Window,
}

/// Rounds in which hrx and raw ash alternate at one client.
const RAW_ROUNDS: u32 = 4;
/// Distinct request inputs, cycled through by every client.
const INPUTS: usize = 4;
const MICROS: f64 = 1e6;

impl Settings {
    fn new(cpu: bool) -> Result<Settings, String> {
        let flag = |name: &str| std::env::args().skip(1).any(|a| a == name);
        let small = flag("--small") || (cpu && !flag("--full"));
        let ms = env_usize("HRX_BENCH_MS")?.unwrap_or(if small { 300 } else { 800 });
        let measure = Duration::from_millis(ms.max(10) as u64);
        Ok(Settings {
            config: if small {
                MlpConfig::small()
            } else {
                MlpConfig::bench()
            },
            slots: vec![1, 2, 4, 8],
            clients: if small {
                vec![1, 4, 16, 64]
            } else {
                vec![1, 2, 4, 8, 16, 32, 64]
            },
            window: Window {
                warmup: measure / 5,
                measure,
            },
        })
    }
}

fn text(error: hrx_core::Error) -> String {
    format!("hrx: {error}")
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

/// Request inputs (as bytes) and their CPU reference outputs.
struct Requests {
    inputs: Vec<Vec<u8>>,
    expected: Vec<Vec<f32>>,
    output_bytes: usize,
}

impl Requests {
    fn new(config: &MlpConfig, weights: &Weights) -> Result<Requests, String> {
        let mut inputs = Vec::new();
        let mut expected = Vec::new();
        for k in 0..INPUTS {
            let x: Vec<f32> = (0..config.batch * config.input)
                .map(|i| ((i * 37 + k * 101) % 199) as f32 / 99.0 - 1.0)
                .collect();
            expected.push(config.reference(weights, &x).map_err(text)?);
            inputs.push(f32_bytes(&x));
        }
        Ok(Requests {
            inputs,
            expected,
            output_bytes: config.batch * config.output * 4,
        })
    }

    fn input(&self, n: usize) -> &[u8] {
        &self.inputs[n % INPUTS]
    }

    /// Check the answer to input `k`.
    fn check(&self, what: &str, k: usize, output: &[f32]) -> Result<(), String> {
        compare(output, &self.expected[k], 1e-3, 1e-3).map_err(|i| {
            format!(
                "{what}: input {k}, output {i} is {:?}, the reference {}",
                output.get(i),
                self.expected[k][i.min(self.expected[k].len() - 1)]
            )
        })
    }
}

/// One pool request on the warm path.
fn pool_request(model: &PreparedModel, input: &[u8], out: &mut [u8]) -> Result<(), String> {
    let readback = model
        .acquire_blocking()
        .and_then(|slot| slot.submit_host(&[input]))
        .and_then(|inference| inference.download())
        .map_err(text)?;
    readback.read_into(&mut [out]).map_err(text)
}

fn validate_pool(model: &PreparedModel, requests: &Requests, what: &str) -> Result<(), String> {
    let mut out = vec![0u8; requests.output_bytes];
    for k in 0..INPUTS {
        pool_request(model, requests.input(k), &mut out)?;
        requests.check(what, k, &f32_values(&out))?;
    }
    Ok(())
}

fn measure_pool(
    model: &PreparedModel,
    requests: &Requests,
    clients: usize,
    window: Window,
) -> Result<Measured, String> {
    load::run(clients, window, |client| {
        let mut out = vec![0u8; requests.output_bytes];
        move |n| pool_request(model, requests.input(n + client), &mut out)
    })
}

fn measure_naive(
    mlp: &Mlp,
    requests: &Requests,
    clients: usize,
    window: Window,
) -> Result<Measured, String> {
    let inputs: Vec<Vec<f32>> = requests.inputs.iter().map(|b| f32_values(b)).collect();
    load::run(clients, window, |client| {
        let inputs = &inputs;
        move |n| {
            mlp.run_naive(&inputs[(n + client) % INPUTS])
                .map(drop)
                .map_err(text)
        }
    })
}

/// hrx (one client) and raw ash alternating in rounds.
fn measure_one_client(
    model: &PreparedModel,
    raw: &mut raw_side::RawSide,
    requests: &Requests,
    window: Window,
) -> Result<[Measured; 2], String> {
    let round = Window {
        warmup: window.warmup / RAW_ROUNDS,
        measure: window.measure / RAW_ROUNDS,
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut out = vec![0u8; requests.output_bytes];
    for r in 0..RAW_ROUNDS {
        for side in if r % 2 == 0 { [0, 1] } else { [1, 0] } {
            if side == 0 {
                ours.push(load::client(round, |n| {
                    pool_request(model, requests.input(n), &mut out)
                })?);
            } else {
                theirs.push(load::client(round, |n| {
                    raw.run(requests.input(n), &mut out)
                })?);
            }
        }
    }
    Ok([load::combine_rounds(ours), load::combine_rounds(theirs)])
}

fn validate_raw(raw: &mut raw_side::RawSide, requests: &Requests) -> Result<(), String> {
    let mut out = vec![0u8; requests.output_bytes];
    for k in 0..INPUTS {
        raw.run(requests.input(k), &mut out)?;
        requests.check("raw ash", k, &f32_values(&out))?;
    }
    Ok(())
}

/// p50 and p99 in microseconds.
fn latency(measured: &mut Measured) -> (f64, f64) {
    (
        percentile(&mut measured.latencies, 50.0) * MICROS,
        percentile(&mut measured.latencies, 99.0) * MICROS,
    )
}

/// One row of results.
struct Row {
    slots: usize,
    clients: usize,
    hrx: Measured,
    raw: Option<Measured>,
}

fn run() -> Result<(), String> {
    let context = RuntimeOptions::from_env()
        .and_then(ModelContext::new)
        .map_err(text)?;
    let gpu = context.runtime().gpu().map_err(text)?;
    let (device, index) = (gpu.target().name.clone(), gpu.index());
    let settings = Settings::new(gpu.target().kind == DeviceKind::Cpu)?;
    let config = settings.config;
    let model_name = format!(
        "MLP {}-{}-{}-{} x{}",
        config.input, config.hidden, config.hidden, config.output, config.batch
    );
    eprintln!(
        "bench_inference: {device}, {model_name}, {} ms per configuration",
        settings.window.measure.as_millis()
    );
    let weights = config.seeded_weights(7);
    let requests = Requests::new(&config, &weights)?;
    let mlp = Mlp::new(&context, config, &weights).map_err(text)?;

    let plan = plan::extract(&context, &mlp)?;
    let mut baseline = raw_side::RawSide::new(raw::RawGpu::open(index, &device)?, &plan)?;
    validate_raw(&mut baseline, &requests)?;
    for k in 0..INPUTS {
        let y = mlp
            .run_naive(&f32_values(requests.input(k)))
            .map_err(text)?;
        requests.check("naive", k, &y)?;
    }

    let mut naive = Vec::new();
    for &clients in &settings.clients {
        eprintln!("bench_inference: naive, {clients} clients");
        naive.push(measure_naive(&mlp, &requests, clients, settings.window)?);
    }
    let mut rows = Vec::new();
    for &slots in &settings.slots {
        let model = mlp.prepare(slots).map_err(text)?;
        for &clients in &settings.clients {
            eprintln!("bench_inference: {slots} slots, {clients} clients");
            let (hrx, raw) = if clients == 1 {
                let [hrx, theirs] =
                    measure_one_client(&model, &mut baseline, &requests, settings.window)?;
                (hrx, Some(theirs))
            } else {
                (
                    measure_pool(&model, &requests, clients, settings.window)?,
                    None,
                )
            };
            let what = format!("hrx pool, {slots} slots, {clients} clients");
            validate_pool(&model, &requests, &what)?;
            validate_raw(&mut baseline, &requests)?;
            rows.push(Row {
                slots,
                clients,
                hrx,
                raw,
            });
        }
        if !model.is_idle() {
            return Err(format!("the {slots}-slot pool is not idle after its runs"));
        }
    }

    let (entries, table) = results(&settings, &model_name, &mut rows, &mut naive);
    println!("Device: {device}, {model_name}\n\n{table}");
    let path = report::output_path("inference.json");
    report::write(&path, &report::json(&entries, &device))?;
    eprintln!("bench_inference: wrote {}", path.display());
    Ok(())
}

/// The JSON entries and the markdown table.
fn results(
    settings: &Settings,
    model_name: &str,
    rows: &mut [Row],
    naive: &mut [Measured],
) -> (Vec<Entry>, String) {
    use std::fmt::Write as _;
    let naive_name = |clients: usize| {
        let threads = if clients == 1 { "thread" } else { "threads" };
        format!(
            "naive: Mlp::run_naive per request (allocate IO and scratch, record, prepare, \
             submit, read back), {clients} client {threads}"
        )
    };
    let raw_name = "raw ash: the same SPIR-V, push constants, grids and bytes recorded once into \
                    one command buffer (staging upload, dispatches with barriers, staging \
                    readback), vkQueueSubmit2 and a timeline wait per request, 1 client";
    let mut entries = Vec::new();
    let mut table = String::from(
        "| slots | clients | req/s | p50 us | p99 us | naive req/s | naive p50 us | \
         req/s / naive | raw req/s | raw p50 us | p50 / raw |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows.iter_mut() {
        let c = settings
            .clients
            .iter()
            .position(|&c| c == row.clients)
            .unwrap_or(0);
        let base = &mut naive[c];
        let (p50, p99) = latency(&mut row.hrx);
        let (n50, n99) = latency(base);
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let label = format!(
            "{model_name}, {}, {}",
            plural(row.slots, "slot"),
            plural(row.clients, "client")
        );
        // (short name, throughput, p50, p99, full name) of each baseline.
        let mut baselines = vec![("naive", base.throughput, n50, n99, naive_name(row.clients))];
        let mut raw_cells = "- | - | -".to_string();
        if let Some(raw) = &mut row.raw {
            let (r50, r99) = latency(raw);
            raw_cells = format!("{:.0} | {r50:.1} | {:.3}", raw.throughput, p50 / r50);
            baselines.push(("raw ash", raw.throughput, r50, r99, raw_name.into()));
        }
        for (short, throughput, b50, b99, baseline_name) in baselines {
            let figures = [
                (
                    "requests/s",
                    "req/s",
                    row.hrx.throughput,
                    throughput,
                    Better::Higher,
                ),
                ("p50 latency", "us", p50, b50, Better::Lower),
                ("p99 latency", "us", p99, b99, Better::Lower),
            ];
            for (what, unit, hrx, baseline, better) in figures {
                entries.push(Entry {
                    name: format!("{label}: {what} vs {short}"),
                    unit,
                    hrx,
                    baseline,
                    baseline_name: baseline_name.clone(),
                    better,
                });
            }
        }
        let _ = writeln!(
            table,
            "| {} | {} | {:.0} | {p50:.1} | {p99:.1} | {:.0} | {n50:.1} | {:.2} | {raw_cells} |",
            row.slots,
            row.clients,
            row.hrx.throughput,
            base.throughput,
            row.hrx.throughput / base.throughput,
        );
    }
    table.push_str(
        "\nhrx: acquire_blocking -> submit_host -> download -> read_into per request, one \
         thread per client.\nBaselines (same process, same device): naive Mlp::run_naive at the \
         same client count; raw ash with one client, alternating rounds with hrx.\n",
    );
    (entries, table)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_inference: {error}");
            ExitCode::FAILURE
        }
    }
}
