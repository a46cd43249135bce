//! `cargo xtask gpu-bench`: the whole benchmark suite as one pack of
//! stripped release binaries for the GPU machine (which has no cargo and no
//! network), and the command that runs it there.

use super::{PACKAGE, PEER, SUITES, binary};
use crate::cargo;
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

/// Where the pack is staged, under the git-ignored `.gpu-bin/`.
const STAGE: &str = ".gpu-bin/bench";
/// The compressed pack, what is copied to the GPU machine.
const PACK: &str = ".gpu-pack/bench.tar.xz";
/// Seconds each program may run there, unless `LONGER` says otherwise.
const TIMEOUT: u32 = 90;
/// Programs that start servers and load models twice get longer: (stem,
/// seconds).
const LONGER: [(&str, u32); 2] = [("serve", 180), ("pytorch/serve", 180)];
/// PyTorch baselines a suite reads: (suite, script stem); the script's
/// output reaches the suite's benchmark through `HRX_BENCH_TORCH`.
const TORCH_FOR: [(&str, &str); 4] = [
    ("tensor", "tensor_ops"),
    ("models", "minilm"),
    ("serve", "serve"),
    ("llm", "llm"),
];
/// Arguments a PyTorch script takes there: (script stem, arguments); the
/// serving baseline serves the staged model folder with the serving
/// suite's batch limit.
const TORCH_ARGS: [(&str, &str); 1] = [("serve", " --model minilm --max-batch 64")];
/// Arguments a suite takes there: the sentence-embedding suites read the
/// staged model folder with seeded weights, the serving suite starts the
/// staged `hrx`.
const SUITE_ARGS: [(&str, &str); 3] = [
    ("models", " --model minilm --seeded"),
    ("llm", " --shapes smollm2.shapes"),
    (
        "serve",
        " --model minilm --seeded --hrx ./hrx --max-batch 64",
    ),
];
/// The model folder's small files (configuration, tokenizer) that the
/// sentence-embedding suites and scripts read there; its weights are
/// seeded there (speed does not depend on their values, and the file would
/// not fit).
const MODEL_FILES: [&str; 9] = [
    "config.json",
    "config_sentence_transformers.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
];

/// SmolLM2's header and length into `stage/smollm2.shapes`, written by
/// the text-generation suite's own GGUF reader.
fn stage_llm_shapes(root: &Path, stage: &Path, target: &Path) -> Result<(), String> {
    let gguf =
        crate::models::ensure(root, crate::models::SMOLLM2)?.join(crate::models::SMOLLM2_FILE);
    let status = Command::new(target.join("release").join(binary("llm")))
        .arg("--write-shapes")
        .arg(&gguf)
        .arg(stage.join("smollm2.shapes"))
        .status()
        .map_err(|e| format!("writing SmolLM2's shapes: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("writing SmolLM2's shapes failed: {status}"))
    }
}

/// Copy `binary` into the stage as `name`, stripped (debug info would blow
/// the pack's size limit).
fn stage_binary(stage: &Path, binary: &Path, name: &str) -> Result<(), String> {
    let staged = stage.join(name);
    std::fs::copy(binary, &staged).map_err(|e| format!("copy {}: {e}", binary.display()))?;
    let stripped = Command::new("strip").arg(&staged).status();
    if !stripped.is_ok_and(|s| s.success()) {
        eprintln!("xtask: could not strip {name}; the pack may be large");
    }
    Ok(())
}

/// The MiniLM folder's small files into `stage/minilm`.
fn stage_model_files(root: &Path, stage: &Path) -> Result<(), String> {
    let source = crate::models::ensure(root, crate::models::MINILM)?;
    for file in MODEL_FILES {
        let target = stage.join("minilm").join(file);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::copy(source.join(file), &target).map_err(|e| format!("copy {file}: {e}"))?;
    }
    Ok(())
}

/// One line of `run.sh`: run `command` (which writes `$out/<stem>.json`),
/// log to `$out/<stem>.log`, note a failure in `$out/notes.txt`.
fn script_line(script: &mut String, stem: &str, command: &str) {
    let timeout = LONGER
        .iter()
        .find(|(s, _)| *s == stem)
        .map_or(TIMEOUT, |(_, seconds)| *seconds);
    let _ = writeln!(
        script,
        "echo \"== {stem}\"; timeout {timeout} {command} > \"$out/{stem}.log\" 2>&1 || \
         {{ status=1; echo \"{stem}: FAILED, see {stem}.log\" | tee -a \"$out/notes.txt\"; \
         tail -5 \"$out/{stem}.log\"; }}"
    );
}

/// Build every benchmark there is in release, stage and pack them with the
/// summary writer (this very binary) and a script, and print the call.
pub(crate) fn gpu_bench(root: &Path) -> Result<(), String> {
    let stage = root.join(STAGE);
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let mut script = String::from(
        "#!/usr/bin/env bash\n# Generated by `cargo xtask gpu-bench`: every benchmark, then \
         summary.md, into $OUT.\ncd \"$(dirname \"$0\")\"\nout=\"${OUT:-$PWD/out}\"\n\
         mkdir -p \"$out\"\nstatus=0\n",
    );
    let mut packed = Vec::new();

    // The model folder the sentence-embedding suites and scripts read.
    stage_model_files(root, &stage)?;

    // PyTorch baselines first: `python3 <script> --out PATH` writes what
    // the suite named in TORCH_FOR reads (see docs/benchmarks.md). Their
    // JSON goes under $out/pytorch/, apart from the summary's files; their
    // data files (`sentences.txt`) go beside them.
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(root.join("bench/pytorch"))
        .map(|list| {
            list.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "py" || x == "txt"))
                .collect()
        })
        .unwrap_or_default();
    scripts.sort();
    let mut torch_stems = Vec::new();
    if !scripts.is_empty() {
        std::fs::create_dir_all(stage.join("pytorch")).map_err(|e| e.to_string())?;
        script.push_str("mkdir -p \"$out/pytorch\"\n");
    }
    for file in scripts {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("odd script name")?
            .to_string();
        std::fs::copy(&file, stage.join("pytorch").join(&name))
            .map_err(|e| format!("copy {name}: {e}"))?;
        packed.push(format!("pytorch/{name}"));
        let Some(stem) = name.strip_suffix(".py").map(str::to_owned) else {
            continue;
        };
        let args = TORCH_ARGS
            .iter()
            .find(|(s, _)| *s == stem)
            .map_or("", |(_, args)| *args);
        script_line(
            &mut script,
            &format!("pytorch/{stem}"),
            &format!("python3 pytorch/{name}{args} --out \"$out/pytorch/{stem}.json\""),
        );
        torch_stems.push(stem);
    }

    // Every suite in one build of the benchmark crate.
    let names: Vec<String> = SUITES.iter().map(|suite| binary(suite)).collect();
    let mut build = vec!["build", "--release", "-p", PACKAGE];
    for name in &names {
        build.extend(["--bin", name]);
    }
    // The serving suite starts `hrx serve`.
    build.extend(["-p", "hrx-cli", "--bin", "hrx"]);
    cargo(root, &build, &[])?;
    stage_binary(&stage, &target.join("release/hrx"), "hrx")?;
    packed.push("hrx".into());
    stage_llm_shapes(root, &stage, &target)?;
    packed.push("smollm2.shapes".into());
    for (suite, name) in SUITES.into_iter().zip(names) {
        stage_binary(&stage, &target.join("release").join(&name), &name)?;
        // Only a file the script did write: without one the suite reports
        // no baseline instead of failing.
        let torch = TORCH_FOR
            .iter()
            .find(|(s, stem)| *s == suite && torch_stems.iter().any(|t| t == stem))
            .map(|(_, stem)| {
                let file = format!("$out/pytorch/{stem}.json");
                let _ = writeln!(script, "torch=\"\"; [ -f \"{file}\" ] && torch=\"{file}\"");
                "HRX_BENCH_TORCH=\"$torch\" ".to_string()
            })
            .unwrap_or_default();
        let args = SUITE_ARGS
            .iter()
            .find(|(s, _)| *s == suite)
            .map_or("", |(_, args)| *args);
        script_line(
            &mut script,
            suite,
            &format!("env {torch}HRX_BENCH_OUT=\"$out/{suite}.json\" ./{name}{args}"),
        );
        packed.push(name);
    }

    let manifest = root
        .join(PEER)
        .join("Cargo.toml")
        .to_string_lossy()
        .into_owned();
    match cargo(
        root,
        &["build", "--release", "--manifest-path", &manifest],
        &[],
    ) {
        Ok(()) => {
            let binary = root.join(PEER).join("target/release/wgpu-peer");
            stage_binary(&stage, &binary, "wgpu-peer")?;
            script_line(&mut script, "wgpu", "./wgpu-peer --out \"$out/wgpu.json\"");
            packed.push("wgpu-peer".into());
        }
        Err(e) => eprintln!("xtask: the wgpu peer is left out: {e}"),
    }

    // This binary writes the summary there.
    let me = std::env::current_exe().map_err(|e| format!("cannot find xtask itself: {e}"))?;
    stage_binary(&stage, &me, "xtask")?;
    script.push_str(
        "./xtask bench-summary \"$out\" > \"$out/summary.log\" 2>&1 || status=1\n\
         cat \"$out/summary.md\"\nexit $status\n",
    );
    std::fs::write(stage.join("run.sh"), script).map_err(|e| e.to_string())?;

    let size = crate::gpu::pack(root, STAGE, PACK)?;
    println!(
        "Packed {} into {PACK} ({:.1} MiB). On a machine with a GPU, a Vulkan loader and the\n\
         GPU's driver (no Rust toolchain needed), from a copy of this folder:\n",
        packed.join(", "),
        size as f64 / (1 << 20) as f64
    );
    println!("  tar xJf {PACK} && HRX_VALIDATION=0 bash {STAGE}/run.sh");
    println!(
        "\nIt writes <suite>.json, <suite>.log and summary.md to $OUT (else ./out) and prints the \
         summary last."
    );
    Ok(())
}
