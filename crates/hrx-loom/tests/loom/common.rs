//! Helpers shared by the compiler's integration tests.
#![allow(dead_code)]

use hrx_core::Target;
use hrx_loom::{Artifact, Compiler, Specialization};
use std::path::PathBuf;
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
    hrx_test_support::spirv_val::validate(symbol, artifact.spirv());
    artifact
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
