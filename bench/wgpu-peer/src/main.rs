//! hrx's benchmark peer: the work of hrx's benchmarks done through wgpu, the
//! library a Rust user would pick instead, on the same machine in the same
//! run. Bench-only: its own workspace, which CI does not build.
//!
//! Measurements (definitions and names as in hrx's suites):
//! 1. round trip of a one-dispatch compute pass (median, p99) — runtime;
//! 2. SAXPY `vec4<f32>` bandwidth — loom;
//! 3. device-to-device copy (1 GiB on a GPU) — runtime;
//! 4. the `MlpConfig::bench()` forward pass at one client, p50/p99
//!    (`MlpConfig::small()` when small, as hrx's inference bench does) —
//!    inference.
//!
//! Usage: `wgpu-peer [--small] [--quick] [--out PATH] [--iters N] [--saxpy-n N]
//! [--copy-bytes N] [--copy-iters N] [--mlp-requests N]`. `--small` takes the
//! sizes hrx's benchmarks use on a CPU device (SAXPY n = 2^24, 256 MiB copy,
//! the small MLP),
//! which is also the default on a CPU adapter such as lavapipe. The
//! `HRX_BENCH_*` variables of hrx's benchmarks set the same sizes here;
//! `HRX_DEVICE` (a name fragment) picks the adapter; `HRX_BENCH_MLP_REQUESTS`
//! sets the MLP requests (default 1000, 200 with `--quick`). Writes
//! `target/bench/wgpu.json` under the current directory unless `--out` or
//! `HRX_BENCH_OUT` says otherwise; see `report.rs` for the schema.

// The suites' report writer (hrx-bench's `report` module), so that the
// peer writes the same records; the peer uses only part of it.
#[allow(dead_code)]
#[path = "../../src/report.rs"]
mod common;
mod copy;
mod gpu;
mod mlp;
mod report;
mod round_trip;
mod saxpy;
mod stats;

use std::{path::PathBuf, process::ExitCode};

/// The wgpu release this peer is built against (keep in step with Cargo.toml).
pub const WGPU_VERSION: &str = "30.0.2";

/// How much work to do.
struct Config {
    small: bool,
    quick: bool,
    out: Option<PathBuf>,
    iters: Option<usize>,
    saxpy_n: Option<usize>,
    copy_bytes: Option<usize>,
    copy_iters: Option<usize>,
    mlp_requests: Option<usize>,
}

fn env_usize(name: &str) -> Result<Option<usize>, String> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => parse(name, &text).map(Some),
        _ => Ok(None),
    }
}

fn parse(what: &str, text: &str) -> Result<usize, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{what} {text:?} is not a whole number"))
}

impl Config {
    fn from_args() -> Result<Config, String> {
        let mut config = Config {
            small: false,
            quick: false,
            out: std::env::var_os("HRX_BENCH_OUT")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            iters: env_usize("HRX_BENCH_ITERS")?,
            saxpy_n: env_usize("HRX_BENCH_N")?,
            copy_bytes: env_usize("HRX_BENCH_COPY_BYTES")?,
            copy_iters: env_usize("HRX_BENCH_COPY_ITERS")?,
            mlp_requests: env_usize("HRX_BENCH_MLP_REQUESTS")?,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--small" => config.small = true,
                "--quick" => config.quick = true,
                "--out" => config.out = Some(PathBuf::from(value()?)),
                "--iters" => config.iters = Some(parse(&flag, &value()?)?),
                "--saxpy-n" => config.saxpy_n = Some(parse(&flag, &value()?)?),
                "--copy-bytes" => config.copy_bytes = Some(parse(&flag, &value()?)?),
                "--copy-iters" => config.copy_iters = Some(parse(&flag, &value()?)?),
                "--mlp-requests" => config.mlp_requests = Some(parse(&flag, &value()?)?),
                "--help" | "-h" => {
                    return Err(
                        "usage: wgpu-peer [--small] [--quick] [--out PATH] [--iters N] \
                         [--saxpy-n N] [--copy-bytes N] [--copy-iters N] [--mlp-requests N]"
                            .into(),
                    );
                }
                other => return Err(format!("unknown argument `{other}` (try --help)")),
            }
        }
        Ok(config)
    }
}

fn run() -> Result<(), String> {
    let config = Config::from_args()?;
    let gpu = gpu::Gpu::open()?;
    let small = config.small || gpu.is_cpu();
    let device = gpu.info.name.clone();
    let iters = config
        .iters
        .unwrap_or(if config.quick { 200 } else { 2000 })
        .max(10);
    let saxpy = saxpy::Saxpy {
        n: config
            .saxpy_n
            .unwrap_or(if small { 1 << 24 } else { 1 << 28 }),
        reps: if small { 4 } else { 20 },
        rounds: if small { 10 } else { 15 },
    };
    if saxpy.n == 0 || !saxpy.n.is_multiple_of(1024) {
        return Err("the SAXPY n must be a positive multiple of 1024".into());
    }
    let copy_bytes = config
        .copy_bytes
        .unwrap_or(if small { 256 << 20 } else { 1 << 30 });
    if copy_bytes < 1 << 20 || !copy_bytes.is_multiple_of(16) {
        return Err("the copy size must be a multiple of 16, at least 1 MiB".into());
    }
    let copy_iters = config
        .copy_iters
        .unwrap_or(if config.quick { 3 } else { 10 })
        .max(1);
    let requests = config
        .mlp_requests
        .unwrap_or(if small {
            20
        } else if config.quick {
            200
        } else {
            1000
        })
        .max(4);
    eprintln!(
        "wgpu-peer: wgpu {WGPU_VERSION}, {device} ({:?})",
        gpu.info.backend
    );

    let mut entries = Vec::new();
    eprintln!("wgpu-peer: 1/4 round trips ({iters})");
    entries.extend(round_trip::run(&gpu, iters)?);
    eprintln!("wgpu-peer: 2/4 SAXPY, n = {}", saxpy.n);
    entries.push(saxpy.run(&gpu)?);
    eprintln!("wgpu-peer: 3/4 device copy of {} MiB", copy_bytes >> 20);
    entries.push(copy::run(&gpu, copy_bytes as u64, copy_iters)?);
    eprintln!("wgpu-peer: 4/4 MLP forward, {requests} requests");
    let shape = if small {
        mlp::Shape::SMALL
    } else {
        mlp::Shape::BENCH
    };
    entries.extend(mlp::run(&gpu, shape, requests)?);

    println!("{}", report::table(&entries, &device));
    let path = config
        .out
        .unwrap_or_else(|| PathBuf::from("target/bench/wgpu.json"));
    report::write(&path, &report::json(&entries, &device))?;
    eprintln!("wgpu-peer: wrote {}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("wgpu-peer: {error}");
            ExitCode::FAILURE
        }
    }
}
