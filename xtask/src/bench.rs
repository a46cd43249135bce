//! `cargo xtask bench`: every benchmark suite of the layers, the wgpu peer,
//! then `target/bench/summary.md`; `cargo xtask gpu-bench` packs the same
//! for the GPU machine.

mod pack;
mod summary;

pub(crate) use pack::gpu_bench;

use crate::cargo;
use std::path::{Path, PathBuf};

/// The benchmark crate: suite `s` is its binary `bench_<s>` and writes
/// `<s>.json`.
pub(crate) const PACKAGE: &str = "hrx-bench";

/// The suites, in the layers' order (also the summary's).
pub(crate) const SUITES: [&str; 7] = [
    "runtime",
    "loom",
    "tensor",
    "inference",
    "models",
    "serve",
    "llm",
];

/// The wgpu peer's own workspace, relative to the root.
pub(crate) const PEER: &str = "bench/wgpu-peer";

const USAGE: &str =
    "cargo xtask bench [all|runtime|loom|tensor|inference|models|serve|wgpu] [--quick]";

/// The binary of a suite.
pub(crate) fn binary(suite: &str) -> String {
    format!("bench_{suite}")
}

/// Run the chosen suites (all by default) here, in release, then write the
/// summary. A missing example or an unbuildable peer is a note; a suite
/// that fails is an error, reported after the summary is written.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut chosen = None;
    let mut quick = false;
    for arg in args {
        match arg.as_str() {
            "--quick" => quick = true,
            name if chosen.is_none() => chosen = Some(name.to_string()),
            other => return Err(format!("unexpected `{other}`; usage: {USAGE}")),
        }
    }
    let chosen = chosen.unwrap_or_else(|| "all".into());
    let known = SUITES.contains(&chosen.as_str()) || chosen == "wgpu" || chosen == "all";
    if !known {
        return Err(format!(
            "unknown benchmark suite `{chosen}`; usage: {USAGE}"
        ));
    }
    let wanted = |suite: &str| chosen == "all" || chosen == suite;
    let out_dir = root.join("target").join("bench");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    // `--quick` as the runtime benchmark reads it, for every suite.
    let mut env: Vec<(&str, &str)> = Vec::new();
    if quick {
        for (key, value) in [("HRX_BENCH_ITERS", "200"), ("HRX_BENCH_COPY_ITERS", "3")] {
            if std::env::var_os(key).is_none() {
                env.push((key, value));
            }
        }
    }

    let mut notes = Vec::new();
    let mut failures = Vec::new();
    for suite in SUITES.iter().filter(|s| wanted(s)) {
        let json = out_dir.join(format!("{suite}.json"));
        // A failed run must not leave an older file to be summarized.
        let _ = std::fs::remove_file(&json);
        let json_text = json.to_string_lossy().into_owned();
        let mut vars = env.clone();
        vars.push(("HRX_BENCH_OUT", &json_text));
        let name = binary(suite);
        let mut args = vec!["run", "--release", "-p", PACKAGE, "--bin", &name];
        // The sentence-embedding suites run the real model here; the
        // serving suite drives the `hrx` binary built beside it.
        let (model, hrx, gguf);
        if *suite == "llm" {
            gguf = crate::models::ensure(root, crate::models::SMOLLM2)?
                .join(crate::models::SMOLLM2_FILE)
                .to_string_lossy()
                .into_owned();
            args.extend(["--", "--model", &gguf]);
        }
        if *suite == "models" || *suite == "serve" {
            model = crate::models::ensure(root, crate::models::MINILM)?
                .to_string_lossy()
                .into_owned();
            args.extend(["--", "--model", &model]);
        }
        if *suite == "serve" {
            if let Err(e) = cargo(root, &["build", "--release", "-p", "hrx-cli"], &[]) {
                notes.push(format!("serve: FAILED (building hrx: {e})"));
                failures.push(*suite);
                continue;
            }
            hrx = release_dir(root).join("hrx").to_string_lossy().into_owned();
            args.extend(["--hrx", &hrx]);
        }
        if let Err(e) = cargo(root, &args, &vars) {
            notes.push(format!("{suite}: FAILED ({e})"));
            failures.push(*suite);
        }
    }
    if wanted("wgpu") {
        run_peer(root, &out_dir, quick, &mut notes);
    }
    if wanted("tensor") && root.join("bench/pytorch").is_dir() {
        notes.push(
            "the PyTorch baselines (bench/pytorch/*.py) run in the GPU pack \
             (`cargo xtask gpu-bench`); here a suite reads one only through HRX_BENCH_TORCH"
                .into(),
        );
    }

    let summary = write_summary(&out_dir, &notes)?;
    println!("xtask: wrote {}", summary.display());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("benchmark suites failed: {}", failures.join(", ")))
    }
}

/// Where cargo puts release binaries: `CARGO_TARGET_DIR` or `target`,
/// then `release`.
pub(crate) fn release_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("release")
}

/// The wgpu peer, when its workspace builds (it is not part of CI, so a
/// failure here is a note rather than an error).
fn run_peer(root: &Path, out_dir: &Path, quick: bool, notes: &mut Vec<String>) {
    let manifest = root.join(PEER).join("Cargo.toml");
    if !manifest.is_file() {
        notes.push(format!("wgpu: skipped, {PEER}/Cargo.toml does not exist"));
        return;
    }
    let json = out_dir.join("wgpu.json");
    let _ = std::fs::remove_file(&json);
    let manifest = manifest.to_string_lossy().into_owned();
    let json = json.to_string_lossy().into_owned();
    let mut args = vec![
        "run",
        "--release",
        "--manifest-path",
        &manifest,
        "--",
        "--out",
        &json,
    ];
    if quick {
        args.push("--quick");
    }
    if let Err(e) = cargo(root, &args, &[]) {
        notes.push(format!(
            "wgpu: not measured ({e}); the peer builds wgpu from crates.io, first build takes minutes"
        ));
    }
}

/// Read every `*.json` in `dir` and write `dir/summary.md`; returns its path.
pub(crate) fn write_summary(dir: &Path, notes: &[String]) -> Result<PathBuf, String> {
    let listing = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = listing
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    // The layers in their order, then peers and anything else by name.
    let rank = |p: &PathBuf| {
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let at = SUITES.iter().position(|s| *s == stem);
        (at.unwrap_or(SUITES.len()), stem.to_string())
    };
    files.sort_by_key(rank);
    let mut notes = notes.to_vec();
    let mut suites = Vec::new();
    for file in files {
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_string();
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        match summary::parse(&text) {
            Ok(entries) => suites.push(summary::Suite { name, entries }),
            Err(e) => notes.push(format!("{}: unreadable ({e})", file.display())),
        }
    }
    let text = summary::render(&suites, &notes);
    let path = dir.join("summary.md");
    std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    print!("{text}");
    Ok(path)
}

/// `cargo xtask bench-summary [dir]`: the summary alone, from the JSON files
/// already in `dir` (default `target/bench`) and the lines of its
/// `notes.txt`, if any; the GPU pack's script runs this there.
pub(crate) fn summary_only(root: &Path, dir: Option<&str>) -> Result<(), String> {
    let dir = dir.map_or_else(|| root.join("target").join("bench"), PathBuf::from);
    let notes: Vec<String> = std::fs::read_to_string(dir.join("notes.txt"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    write_summary(&dir, &notes).map(|path| println!("xtask: wrote {}", path.display()))
}
