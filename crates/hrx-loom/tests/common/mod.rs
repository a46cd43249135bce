//! Helpers shared by the compiler's integration tests.
#![allow(dead_code)]

use hrx_core::Target;
use hrx_loom::{Artifact, Compiler, Specialization};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The corpus directory.
pub fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Every corpus file as (name, source).
pub fn corpus() -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "loom"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// A unique temporary path.
pub fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("hrx-loom-{tag}-{}-{n}", std::process::id()))
}

/// Run `spirv-val --target-env vulkan1.3` on the artifact's words. Skips
/// (with a note) when spirv-val is missing, unless `CI=true`.
pub fn spirv_val(label: &str, words: &[u32]) {
    let path = temp_path("val").with_extension("spv");
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new("spirv-val")
        .args(["--target-env", "vulkan1.3"])
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    match out {
        Ok(o) => assert!(
            o.status.success(),
            "spirv-val rejected {label}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true");
            assert!(!ci, "spirv-val not found on PATH (CI=true): {e}");
            eprintln!("note: spirv-val not found, skipping validation of {label}");
        }
    }
}

/// Compile `symbol` of `source` for `target` with default config, and
/// validate the SPIR-V.
pub fn compile_checked(source: &str, symbol: &str, target: &Target) -> Artifact {
    let compiler = Compiler::for_target(None, target).unwrap();
    let module = compiler
        .module(source)
        .unwrap_or_else(|e| panic!("{symbol}: {e}"));
    let artifact = module
        .compile(&Specialization::new(symbol))
        .unwrap_or_else(|e| panic!("{symbol}: {e}"));
    spirv_val(symbol, artifact.spirv());
    artifact
}
