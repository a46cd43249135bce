//! The runtime benchmark: hrx-runtime against raw ash code written here, in
//! one process, on the same device, with the same SPIR-V kernel.
//!
//! Measurements (each side alternates going first over several rounds):
//! 1. submit + observe completion of a prepared one-dispatch graph
//!    (median and p99 of single round trips);
//! 2. back-to-back submissions of that graph (each ordered after the
//!    previous one), waiting for the last (median per submission);
//! 3. a 64-dispatch dependent chain with a barrier between dispatches,
//!    prepared once, replayed back to back (median per dispatch);
//! 4. a device-to-device copy between device-local buffers: hrx `Graph::copy`
//!    (its compute copy kernel) against `vkCmdCopyBuffer`, in GB/s counting
//!    bytes read plus bytes written (2x the bytes copied), the way the H200
//!    figures of DESIGN.md (0.85 and ~4.3 TB/s) are counted.
//!
//! Writes `target/bench/runtime.json` (or `HRX_BENCH_OUT`) and prints a
//! markdown table. Environment:
//! - `HRX_DEVICE`: device, as for the runtime; the raw side opens the same one;
//! - `HRX_BENCH_ITERS`: round trips per side (default 2000; `--quick`: 200);
//!   the other workloads scale with it;
//! - `HRX_BENCH_COPY_BYTES`: bytes per copy (default 1 GiB, 256 MiB on a
//!   CPU device); `HRX_BENCH_COPY_ITERS`: copies per side (default 10).

mod baseline;
mod contender;
mod hrx;
mod kernel;
use hrx_bench::raw;
use hrx_bench::raw_kernel;
use hrx_bench::report;

use contender::{CHAIN_LEN, Contender, Sampling, sample};
use hrx_core::DeviceKind;
use hrx_runtime::Runtime;
use report::{Better, Entry, env_usize, median, percentile};
use std::process::ExitCode;

/// How much work to do.
struct Config {
    iters: usize,
    copy_bytes: usize,
    copy_iters: usize,
}

/// Submissions per back-to-back sample; chain replays per chain sample.
const BURST: usize = 50;
const CHAIN_BURST: usize = 4;
const ROUNDS: usize = 8;

impl Config {
    fn new(cpu: bool) -> Result<Config, String> {
        let quick = std::env::args().skip(1).any(|a| a == "--quick");
        let iters = env_usize("HRX_BENCH_ITERS")?.unwrap_or(if quick { 200 } else { 2000 });
        let default_copy = if cpu { 256 << 20 } else { 1 << 30 };
        let copy_bytes = env_usize("HRX_BENCH_COPY_BYTES")?.unwrap_or(default_copy);
        let copy_iters = env_usize("HRX_BENCH_COPY_ITERS")?.unwrap_or(if quick { 3 } else { 10 });
        if copy_bytes < 1 << 20 || !copy_bytes.is_multiple_of(16) {
            return Err("HRX_BENCH_COPY_BYTES must be a multiple of 16, at least 1 MiB".into());
        }
        Ok(Config {
            iters: iters.max(10),
            copy_bytes,
            copy_iters: copy_iters.max(1),
        })
    }
}

const MICROS: f64 = 1e6;

fn run() -> Result<(), String> {
    let runtime = Runtime::from_env().map_err(|e| format!("hrx: {e}"))?;
    let gpu = runtime.gpu().map_err(|e| format!("hrx: {e}"))?;
    let target = gpu.target().clone();
    let config = Config::new(target.kind == DeviceKind::Cpu)?;
    let device = target.name.clone();
    eprintln!(
        "bench_runtime: {device} (index {}), {} iterations",
        gpu.index(),
        config.iters
    );

    let spirv = kernel::spirv(kernel::ADD_ONE)?;
    let mut ours = hrx::HrxSide::new(&runtime, &spirv)?;
    let mut theirs = baseline::RawSide::new(raw::RawGpu::open(gpu.index(), &device)?, &spirv)?;
    let mut entries = Vec::new();
    let raw_wait = format!(
        "raw ash: vkQueueSubmit2 of a pre-recorded command buffer signalling a timeline value, \
         spin {} us on vkGetSemaphoreCounterValue, then vkWaitSemaphores",
        raw::SPIN.as_micros()
    );

    eprintln!("bench_runtime: 1/4 round trips");
    let sampling = Sampling {
        samples: config.iters,
        rounds: ROUNDS,
    };
    let [mut h, mut r] = sample([&mut ours, &mut theirs], sampling, |s| s.round_trip())?;
    for (label, p) in [("median", 50.0), ("p99", 99.0)] {
        entries.push(Entry {
            name: format!("submit + wait, 1-dispatch graph ({label})"),
            unit: "us",
            hrx: percentile(&mut h, p) * MICROS,
            baseline: percentile(&mut r, p) * MICROS,
            baseline_name: raw_wait.clone(),
            better: Better::Lower,
        });
    }

    eprintln!("bench_runtime: 2/4 back-to-back submissions");
    let sampling = Sampling {
        samples: (config.iters / 20).max(4),
        rounds: ROUNDS,
    };
    let [mut h, mut r] = sample([&mut ours, &mut theirs], sampling, |s| s.burst(BURST))?;
    entries.push(Entry {
        name: format!("back-to-back submissions ({BURST} per wait), per submission"),
        unit: "us",
        hrx: median(&mut h) / BURST as f64 * MICROS,
        baseline: median(&mut r) / BURST as f64 * MICROS,
        baseline_name: format!(
            "raw ash: {BURST} vkQueueSubmit2 of one SIMULTANEOUS_USE command buffer, each waiting \
             on the previous timeline value unless seen complete, then one wait as above"
        ),
        better: Better::Lower,
    });

    eprintln!("bench_runtime: 3/4 dependent chain");
    let sampling = Sampling {
        samples: (config.iters / 20).max(4),
        rounds: ROUNDS,
    };
    let [mut h, mut r] = sample([&mut ours, &mut theirs], sampling, |s| s.chain(CHAIN_BURST))?;
    let per_dispatch = (CHAIN_BURST * CHAIN_LEN) as f64;
    entries.push(Entry {
        name: format!("{CHAIN_LEN}-dispatch dependent chain, per dispatch"),
        unit: "us",
        hrx: median(&mut h) / per_dispatch * MICROS,
        baseline: median(&mut r) / per_dispatch * MICROS,
        baseline_name: format!(
            "raw ash: one command buffer of {CHAIN_LEN} dispatches with a compute->compute \
             memory barrier between each, {CHAIN_BURST} replays per wait"
        ),
        better: Better::Lower,
    });

    eprintln!(
        "bench_runtime: 4/4 device copy of {} MiB",
        config.copy_bytes >> 20
    );
    let copy = copy_entry(&mut ours, &mut theirs, &config)?;
    entries.push(copy);

    ours.verify_and_release()?;
    theirs.verify_and_release()?;

    let table = report::table(&entries, &device, "raw ash");
    println!("{table}");
    let path = report::output_path("runtime.json");
    report::write(&path, &report::json(&entries, &device))?;
    eprintln!("bench_runtime: wrote {}", path.display());
    Ok(())
}

/// Measurement 4: prepare, time, and express as GB/s (read + write bytes).
fn copy_entry(
    ours: &mut hrx::HrxSide,
    theirs: &mut baseline::RawSide,
    config: &Config,
) -> Result<Entry, String> {
    ours.prepare_copy(config.copy_bytes)?;
    theirs.prepare_copy(config.copy_bytes)?;
    let sampling = Sampling {
        samples: config.copy_iters,
        rounds: 2,
    };
    let [mut h, mut r] = sample([ours, theirs], sampling, |s| s.copy())?;
    let traffic = 2.0 * config.copy_bytes as f64 / 1e9;
    let mib = config.copy_bytes >> 20;
    Ok(Entry {
        name: format!("device copy {mib} MiB (GB/s = (read + written bytes) / median time)"),
        unit: "GB/s",
        hrx: traffic / median(&mut h),
        baseline: traffic / median(&mut r),
        baseline_name: "raw ash: vkCmdCopyBuffer of the whole buffer, submit + wait as above"
            .into(),
        better: Better::Higher,
    })
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_runtime: {error}");
            ExitCode::FAILURE
        }
    }
}
