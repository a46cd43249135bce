//! `hrx bench`: the benchmark suites are binaries of the `hrx-bench` crate
//! plus a separate wgpu workspace, built from source, so the command runs
//! `cargo xtask bench` in the checkout this binary was built from.

use hrx::Error;
use std::{path::PathBuf, process::Command};

/// The checkout this binary was built from, if it is still there.
fn checkout() -> Option<PathBuf> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.parent()?.parent()?.to_path_buf();
    root.join("xtask")
        .join("Cargo.toml")
        .is_file()
        .then_some(root)
}

/// Run `cargo xtask bench ARGS` in the checkout (the alias may be missing,
/// so through `cargo run -p xtask`); writes target/bench/*.json and
/// summary.md there.
pub fn run(args: &[String]) -> Result<(), Error> {
    let Some(root) = checkout() else {
        return Err(Error::msg(
            "hrx bench runs the benchmark suites of a source checkout: clone the \
             repository and run `cargo xtask bench` (or `hrx bench`) there",
        ));
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["run", "--quiet", "--package", "xtask", "--", "bench"])
        .args(args)
        .current_dir(&root)
        .status()
        .map_err(|e| Error::msg(format!("hrx bench needs cargo: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::msg(format!(
            "the benchmarks failed ({status}); see {}",
            root.join("target/bench/summary.md").display()
        )))
    }
}
