//! `cargo xtask ci`: the whole gate, as CI runs it.

use crate::{cargo, setup};
use std::path::Path;

/// fmt, clippy, tests with validation, rustdoc: in that order, stopping at
/// the first failure.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    setup::ensure_vulkan()?;
    cargo(root, &["fmt", "--all", "--check"], &[])?;
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Any validation message aborts the test process (see hrx-runtime).
    cargo(root, &["test", "--workspace"], &[("HRX_VALIDATION", "1")])?;
    cargo(
        root,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    println!("xtask: ci passed");
    Ok(())
}

/// The main job on the default device.
pub(crate) fn demo(root: &Path) -> Result<(), String> {
    cargo(
        root,
        &[
            "run",
            "--release",
            "-p",
            "hrx-runtime",
            "--example",
            "hello",
        ],
        &[],
    )
}
