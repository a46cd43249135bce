//! `cargo xtask ci`: the whole gate, as CI runs it.

use crate::{cargo, examples, models, setup, spirv_val};
use std::path::Path;

/// fmt, clippy, tests with validation, examples with validation, rustdoc:
/// in that order, stopping at the first failure.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    setup::ensure_vulkan()?;
    // The model tests read MiniLM and SmolLM2 from their fixed cache
    // folders; fetching them first also fails fast, before minutes of
    // clippy, when they cannot be had.
    models::ensure(root, models::MINILM)?;
    models::ensure(root, models::SMOLLM2)?;
    cargo(root, &["fmt", "--all", "--check"], &[])?;
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--features",
            "hrx-cli/testing",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Any validation message aborts the test process (see hrx-runtime).
    // `hrx-cli/testing` builds the binary's test hooks, which the replica
    // failover test drives; the shipped binary has none.
    // Cooperative-matrix SPIR-V needs a newer spirv-val than Debian ships;
    // with HRX_REQUIRE_SPIRV_VAL set, those tests fail rather than skip.
    let spirv_val = spirv_val::modern(root)?;
    let spirv_val = spirv_val.to_string_lossy();
    cargo(
        root,
        &["test", "--workspace", "--features", "hrx-cli/testing"],
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

/// MiniLM's expected outputs, which `hrx demo` checks its embeddings against.
const MINILM_REFERENCE: &str = "crates/hrx-models/tests/reference/minilm/reference.json";

/// The main job on the default device: `hrx demo` in release on MiniLM from
/// the model cache, with `args` passed through (`cargo xtask demo
/// --requests 64`). Flags that name a model of their own go through alone.
pub(crate) fn demo(root: &Path, args: &[String]) -> Result<(), String> {
    let mut command: Vec<String> = ["run", "--release", "-p", "hrx-cli", "--", "demo"]
        .map(String::from)
        .into();
    if !names_model(args) {
        let folder = models::ensure(root, models::MINILM)?;
        command.extend([
            "--model".into(),
            folder.to_string_lossy().into_owned(),
            "--reference".into(),
            root.join(MINILM_REFERENCE).to_string_lossy().into_owned(),
        ]);
    }
    command.extend(args.iter().cloned());
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    cargo(root, &command, &[])
}

/// Whether the user's `hrx demo` flags choose the model themselves.
fn names_model(args: &[String]) -> bool {
    args.iter()
        .any(|arg| arg == "--model" || arg.starts_with("--model="))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_model_flag_in_either_form_is_the_users_choice() {
        let names = |args: &[&str]| {
            super::names_model(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
        };
        assert!(names(&["--requests", "4", "--model", "m"]));
        assert!(names(&["--model=m"]));
        assert!(!names(&["--requests", "4", "--models-dir"]));
    }
}
