//! loom kernels compiled for the live device's `Target` and run through the
//! runtime: hrx-loom's corpus and its vec4-layout kernels, each checked
//! against a CPU reference.
//!
//! The compiler and the runtime stand side by side (both depend only on
//! hrx-core), so running the compiler's kernels on a device is tested here,
//! in a crate that uses both, as a user's code would: an artifact's
//! `contract()` and `spirv()` build a `GpuKernel`, its `dispatch_args()`
//! feed a graph dispatch. The kernel sources stay beside the compiler's own
//! tests in `crates/hrx-loom/tests`, where its compile-only tests read
//! them too.

/// hrx-loom's corpus of kernels, relative to this crate.
const CORPUS_DIR: &str = "../crates/hrx-loom/tests/corpus";

/// The text of a file under hrx-loom's test directory.
macro_rules! loom_test_file {
    ($path:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/hrx-loom/tests/",
            $path
        ))
    };
}

/// The text of one corpus kernel (the file name under `corpus/`).
macro_rules! corpus {
    ($file:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/hrx-loom/tests/corpus/",
            $file
        ))
    };
}

mod corpus;
mod run;
mod vec4;
