//! The GPU test tier and benchmarks: build here, run on the H200.

use crate::cargo;
use std::{path::Path, process::Command};

/// Where release binaries for the GPU machine are gathered (git-ignored).
const STAGE: &str = ".gpu-bin";

/// Build the runtime's test binaries in release, gather them under
/// `.gpu-bin/`, and print the one `device` call that runs them on the H200.
pub(crate) fn gpu_test(root: &Path) -> Result<(), String> {
    let binaries = test_binaries(root, &["-p", "hrx-runtime"])?;
    let stage = root.join(STAGE);
    std::fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    for binary in &binaries {
        let name = Path::new(binary)
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("odd binary name")?
            .to_string();
        std::fs::copy(binary, stage.join(&name)).map_err(|e| format!("copy {binary}: {e}"))?;
        names.push(name);
    }
    let runs: Vec<String> = names
        .iter()
        .map(|n| format!("./{STAGE}/{n} --test-threads=4 2>&1 | tee -a $OUT/gpu-test.log | grep -E '^test result|FAILED|panicked'"))
        .collect();
    println!("Built {} test binaries into {STAGE}/. Run them on the H200 with one device call:\n", names.len());
    println!("  carry: [\".gl\", \"{STAGE}\"]");
    println!(
        "  command: source .gl/enter.sh; export HRX_VALIDATION=0; set -o pipefail; {}",
        runs.join("; ")
    );
    println!("\n(.gl comes from ../shared/gpu/prepare; the H200 has no validation layers, so they run without.)");
    Ok(())
}

/// Build and run a benchmark suite here.
pub(crate) fn bench(root: &Path, suite: Option<&str>) -> Result<(), String> {
    match suite.unwrap_or("runtime") {
        "runtime" => cargo(
            root,
            &["run", "--release", "-p", "hrx-runtime", "--example", "bench_runtime"],
            &[],
        ),
        other => Err(format!("unknown benchmark suite `{other}` (known: runtime)")),
    }
}

/// Release test binaries of the given packages, as cargo reports them.
fn test_binaries(root: &Path, packages: &[&str]) -> Result<Vec<String>, String> {
    let cargo_bin = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo_bin)
        .args(["test", "--release", "--no-run", "--message-format=json"])
        .args(packages)
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building test binaries failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let key = "\"executable\":\"";
    Ok(text
        .lines()
        .filter(|line| line.contains("\"test\":true"))
        .filter_map(|line| {
            let start = line.find(key)? + key.len();
            let end = start + line[start..].find('"')?;
            Some(line[start..end].to_string())
        })
        .collect())
}
