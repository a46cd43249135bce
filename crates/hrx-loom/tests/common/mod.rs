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

/// A `spirv-val` that knows `SPV_KHR_cooperative_matrix` (SPIRV-Tools
/// 2023.4 or newer): `HRX_SPIRV_VAL` if set, else the one on PATH.
pub fn modern_spirv_val() -> Option<String> {
    let exe = std::env::var("HRX_SPIRV_VAL").unwrap_or_else(|_| "spirv-val".into());
    let out = Command::new(&exe).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().find_map(|w| w.strip_prefix("v"))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (year, minor) = (parts.next()?, parts.next().unwrap_or(0));
    ((year, minor) >= (2023, 4)).then_some(exe)
}

/// Validate with a modern spirv-val for Vulkan 1.3; skipped (with a note)
/// when none is installed, unless `HRX_REQUIRE_SPIRV_VAL` is set: Debian
/// 12's SPIRV-Tools 2023.1 predates the extension and rejects every
/// cooperative-matrix opcode.
pub fn spirv_val_coop(label: &str, words: &[u32]) {
    let Some(exe) = modern_spirv_val() else {
        assert!(
            std::env::var_os("HRX_REQUIRE_SPIRV_VAL").is_none(),
            "HRX_REQUIRE_SPIRV_VAL is set but no spirv-val >= 2023.4 was found"
        );
        eprintln!("note: no spirv-val >= 2023.4 (set HRX_SPIRV_VAL); skipping {label}");
        return;
    };
    let path = temp_path("coop").with_extension("spv");
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new(&exe)
        .args(["--target-env", "vulkan1.3"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{exe} rejected {label}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Workgroup variables of `spirv` whose type is an array of `vec4<f16>`:
/// whether loom picked the 8-byte layout for a kernel's tiles (a silent
/// fall-back to halves is still correct, only slower, so no result test
/// can see it).
pub fn workgroup_vec4_f16_arrays(spirv: &[u32]) -> usize {
    const OP_TYPE_FLOAT: u32 = 22;
    const OP_TYPE_VECTOR: u32 = 23;
    const OP_TYPE_ARRAY: u32 = 28;
    const OP_TYPE_POINTER: u32 = 32;
    const OP_VARIABLE: u32 = 59;
    const WORKGROUP: u32 = 4;
    let mut insts = Vec::new();
    let mut at = 5; // past the header
    while at < spirv.len() {
        let count = (spirv[at] >> 16) as usize;
        if count == 0 || at + count > spirv.len() {
            break;
        }
        insts.push((spirv[at] & 0xffff, &spirv[at + 1..at + count]));
        at += count;
    }
    let ids = |op: u32, keep: &dyn Fn(&[u32]) -> bool| -> Vec<u32> {
        insts
            .iter()
            .filter(|(o, w)| *o == op && keep(w))
            .map(|(_, w)| w[0])
            .collect()
    };
    let halves = ids(OP_TYPE_FLOAT, &|w| w.get(1) == Some(&16));
    let vec4 = ids(OP_TYPE_VECTOR, &|w| {
        w.len() >= 3 && halves.contains(&w[1]) && w[2] == 4
    });
    let arrays = ids(OP_TYPE_ARRAY, &|w| w.len() >= 2 && vec4.contains(&w[1]));
    let pointers = ids(OP_TYPE_POINTER, &|w| {
        w.len() >= 3 && w[1] == WORKGROUP && arrays.contains(&w[2])
    });
    // OpVariable: result type, result id, storage class.
    insts
        .iter()
        .filter(|(o, w)| *o == OP_VARIABLE && w.len() >= 3 && pointers.contains(&w[0]))
        .count()
}
