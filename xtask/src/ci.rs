//! `cargo xtask ci`: the whole gate, as CI runs it.

use crate::{cargo, examples, setup, spirv_val};
use std::path::Path;

/// fmt, clippy, tests with validation, examples with validation, rustdoc:
/// in that order, stopping at the first failure.
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
    // Cooperative-matrix SPIR-V needs a newer spirv-val than Debian ships;
    // with HRX_REQUIRE_SPIRV_VAL set, those tests fail rather than skip.
    let spirv_val = spirv_val::modern(root)?;
    let spirv_val = spirv_val.to_string_lossy();
    cargo(
        root,
        &["test", "--workspace"],
        &[
            ("HRX_VALIDATION", "1"),
            ("HRX_SPIRV_VAL", &spirv_val),
            ("HRX_REQUIRE_SPIRV_VAL", "1"),
        ],
    )?;
    // Every example, with validation on too: they are documentation.
    examples::run_all(root)?;
    cargo(
        root,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    println!("xtask: ci passed");
    Ok(())
}

/// The main job on the default device: `hrx demo` in release, with `args`
/// passed through (`cargo xtask demo --requests 64`).
pub(crate) fn demo(root: &Path, args: &[String]) -> Result<(), String> {
    let mut command = vec!["run", "--release", "-p", "hrx-cli", "--", "demo"];
    command.extend(args.iter().map(String::as_str));
    cargo(root, &command, &[])
}
