//! The tensor operator benchmark: hrx's operators against PyTorch on the
//! same shapes, run side by side on the same machine.
//!
//! Each case (add and GELU of 2^28 f32, softmax and layer norm of
//! 8192x8192 f32, matmul 8192^3 in f32 and f16, decode matmuls m in
//! {1, 2, 4, 8, 16, 32, 64} with k = n = 4096 in f16) records its operator into a
//! prepared graph, `reps` times back to back (so submission costs vanish),
//! and times whole replays from submission to observed completion; the
//! figure is the median over samples, in GB/s of bytes read plus written
//! once, or TFLOP/s of 2 m n k. `bench/pytorch/tensor_ops.py` times the same
//! cases with CUDA events and writes JSON this program reads; the ratio
//! hrx / PyTorch goes to `target/bench/tensor.json` in the runtime
//! benchmark's schema.
//!
//! Arguments and environment:
//! - `--small` (or `HRX_BENCH_SMALL=1`, the default on a CPU device): small
//!   shapes, for lavapipe;
//! - `--torch PATH` (or `HRX_BENCH_TORCH`): the PyTorch results; without
//!   it, `tensor_ops.json` beside the output file if there (the script's
//!   default), else the baseline is `null`;
//! - `--only SUBSTRING[,SUBSTRING..]`: run the cases whose key contains one;
//! - `HRX_BENCH_SAMPLES` (default 7, 3 when small), `HRX_BENCH_TARGET_MS`
//!   (time per sample, default 50), `HRX_BENCH_OUT` (output path),
//!   `HRX_DEVICE` (device, as for the runtime);
//! - `HRX_COOP_TILES=bm,bn,bk,sgm,sgn` and
//!   `HRX_SPLITK=groups,bk,splits,prefetch`: shapes forced on the
//!   tensor-core matmul kernels for tuning runs (`hrx_tensor::ops::Tuning`);
//!   `HRX_F32_QUADS=off|on[:BK[:BN]]` forces the f32 matmuls onto the
//!   quad kernel (k steps of 16 or 8, 128 or 64 columns a workgroup) or
//!   off it; a malformed or invalid value is an error.

mod cases;
use hrx_bench::report as common;
mod report;

use cases::{Case, Kind, Prepared};
use common::{env_f64, median};
use hrx_core::DeviceKind;
use hrx_runtime::Runtime;
use hrx_tensor::{DType, Ops, TensorDesc, ops::Tuning};
use report::Entry;
use std::{path::PathBuf, process::ExitCode, time::Instant};

struct Config {
    small: bool,
    torch: Option<PathBuf>,
    only: Option<String>,
    samples: usize,
    target_s: f64,
    tuning: Tuning,
}

impl Config {
    fn new(cpu: bool) -> Result<Config, String> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1).cloned())
        };
        let small = cpu
            || args.iter().any(|a| a == "--small")
            || std::env::var("HRX_BENCH_SMALL").is_ok_and(|v| v == "1");
        let torch = value("--torch")
            .or_else(|| std::env::var("HRX_BENCH_TORCH").ok())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let samples = env_f64("HRX_BENCH_SAMPLES")?.unwrap_or(if small { 3.0 } else { 7.0 });
        let target_ms = env_f64("HRX_BENCH_TARGET_MS")?.unwrap_or(50.0);
        let var = |name: &str| std::env::var(name).ok();
        let tuning = Tuning::parse(
            var("HRX_COOP_TILES").as_deref(),
            var("HRX_SPLITK").as_deref(),
        )
        .map_err(|e| e.to_string())?;
        let tuning = match var("HRX_F32_QUADS") {
            Some(text) => tuning.with_f32_quads(&text).map_err(|e| e.to_string())?,
            None => tuning,
        };
        Ok(Config {
            small,
            torch,
            only: value("--only"),
            samples: (samples as usize).max(1),
            target_s: target_ms.max(1.0) / 1e3,
            tuning,
        })
    }
}

fn text(error: hrx_tensor::Error) -> String {
    format!("hrx: {error}")
}

/// Time one case: probe one operation, pick `reps` so a sample takes about
/// the target time, then time `samples` replays of a graph of `reps`
/// operations. Returns seconds per operation (median).
fn time_case(ops: &Ops, prepared: &Prepared, config: &Config) -> Result<(f64, usize), String> {
    let runtime = ops.runtime();
    let graph_of = |reps: usize| -> Result<_, String> {
        let mut graph = runtime.graph();
        for _ in 0..reps {
            prepared.record(ops, &mut graph).map_err(text)?;
        }
        graph.prepare().map_err(text)
    };
    let one = graph_of(1)?;
    // The first run compiles nothing (kernels compiled at record time) but
    // may fault pages in; the second is the probe.
    one.submit().map_err(text)?.wait().map_err(text)?;
    let start = Instant::now();
    one.submit().map_err(text)?.wait().map_err(text)?;
    let probe = start.elapsed().as_secs_f64();
    let reps = ((config.target_s / probe.max(1e-7)).round() as usize).clamp(1, 200);
    let graph = graph_of(reps)?;
    graph.submit().map_err(text)?.wait().map_err(text)?;
    let mut times = Vec::with_capacity(config.samples);
    for _ in 0..config.samples {
        let start = Instant::now();
        graph.submit().map_err(text)?.wait().map_err(text)?;
        times.push(start.elapsed().as_secs_f64() / reps as f64);
    }
    Ok((median(&mut times), reps))
}

/// The value every output element should have for the constant inputs of
/// `cases::Prepared` (first eight elements), or `None` when not checked.
fn expected(kind: Kind, column: usize) -> Option<f64> {
    let x = 1.0625f64;
    match kind {
        Kind::Add { .. } => Some(2.0 * x),
        Kind::Gelu { .. } => None,
        Kind::Softmax { cols, .. } => Some(1.0 / cols as f64),
        // Constant rows: zero variance, so the output is the bias.
        Kind::LayerNorm { .. } => Some(x),
        Kind::Matmul {
            dtype: DType::F32,
            k,
            ..
        } => Some(k as f64 * x * x),
        Kind::Matmul { k, .. } => {
            Some(0.75 * k as f64 * if column.is_multiple_of(2) { 0.5 } else { 1.0 })
        }
    }
}

fn check(prepared: &Prepared, kind: Kind) -> Result<(), String> {
    let out = prepared.out();
    let head = out
        .view(
            0,
            TensorDesc::new(out.desc().dtype(), vec![8]).map_err(text)?,
        )
        .map_err(text)?;
    let got = head.to_values().map_err(text)?;
    for (i, g) in got.iter().enumerate() {
        if let Some(want) = expected(kind, i) {
            if (g - want).abs() > 1e-3 * want.abs().max(1e-6) {
                return Err(format!("output element {i} is {g}, expected {want}"));
            }
        } else if !g.is_finite() {
            return Err(format!("output element {i} is {g}"));
        }
    }
    Ok(())
}

fn run_case(ops: &Ops, case: &Case, config: &Config) -> Result<(f64, String), String> {
    let prepared = match Prepared::new(ops, case.kind) {
        Ok(p) => p,
        Err(hrx_tensor::Error::Unsupported(why)) => return Err(format!("unsupported: {why}")),
        Err(e) => return Err(text(e)),
    };
    let (seconds, reps) = time_case(ops, &prepared, config)?;
    check(&prepared, case.kind)?;
    let out = prepared.out().desc().dtype();
    let note = match case.kind {
        Kind::Matmul { .. } => format!("{reps} per graph, output {out}"),
        _ => format!("{reps} per graph"),
    };
    Ok((case.kind.work() / seconds, note))
}

fn run() -> Result<(), String> {
    let runtime = Runtime::from_env().map_err(|e| format!("hrx: {e}"))?;
    let gpu = runtime.gpu().map_err(|e| format!("hrx: {e}"))?;
    let target = gpu.target().clone();
    let config = Config::new(target.kind == DeviceKind::Cpu)?;
    let device = target.name.clone();
    let path = common::output_path("tensor.json");
    // Without --torch, the script's default output beside ours.
    let beside = path.with_file_name("tensor_ops.json");
    let torch_path = config
        .torch
        .clone()
        .or_else(|| beside.is_file().then_some(beside));
    let torch = torch_path.as_deref().map(common::read_torch).transpose()?;
    let baseline_name = match &torch {
        Some(t) => format!(
            "PyTorch {} on {} (CUDA events, median)",
            t.version, t.device
        ),
        None => "none (no PyTorch results given)".into(),
    };
    eprintln!(
        "bench_tensor: {device}, {} shapes, {} samples",
        if config.small { "small" } else { "full" },
        config.samples
    );
    let ops = Ops::new(&runtime).with_tuning(config.tuning);
    let mut entries = Vec::new();
    for case in cases::cases(config.small) {
        if config
            .only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|part| case.key.contains(part)))
        {
            continue;
        }
        eprintln!("bench_tensor: {}", case.name);
        let (hrx, note) = match run_case(&ops, &case, &config) {
            Ok((value, note)) => (Some(value), note),
            Err(why) => {
                eprintln!("bench_tensor: {}: {why}", case.key);
                (None, why)
            }
        };
        let baseline = torch
            .as_ref()
            .and_then(|t| t.results.get(&case.key).copied());
        entries.push(Entry {
            key: case.key.clone(),
            name: case.name.clone(),
            unit: case.kind.unit(),
            hrx,
            baseline,
            goal: case.goal,
            note,
        });
    }
    println!("{}", report::table(&entries, &device, &baseline_name));
    common::write(&path, &report::json(&entries, &device, &baseline_name))?;
    eprintln!("bench_tensor: wrote {}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_tensor: {error}");
            ExitCode::FAILURE
        }
    }
}
