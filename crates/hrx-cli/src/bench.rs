//! `hrx bench`: the benchmark suites are binaries of the `hrx-bench` crate
//! (with a separate wgpu workspace), built from source, so the command runs
//! `cargo xtask bench` in the hrx checkout that holds the current
//! directory. It never runs code from a path recorded when the binary was
//! built: an installed `hrx` run outside a checkout says how to get one
//! instead.

use hrx::Error;
use std::{path::PathBuf, process::Command};

/// The hrx checkout holding the current directory: the nearest ancestor
/// with the workspace's `xtask` and `crates/hrx-cli`.
fn checkout() -> Option<PathBuf> {
    let here = std::env::current_dir().ok()?;
    here.ancestors()
        .find(|dir| {
            dir.join("xtask/Cargo.toml").is_file()
                && dir.join("crates/hrx-cli/Cargo.toml").is_file()
        })
        .map(PathBuf::from)
}

/// Run `cargo xtask bench ARGS` in the checkout (the alias may be missing,
/// so through `cargo run -p xtask`); writes target/bench/*.json and
/// summary.md there.
pub fn run(args: &[String]) -> Result<(), Error> {
    let Some(root) = checkout() else {
        return Err(Error::msg(
            "hrx bench runs the benchmark suites of an hrx source checkout, and the \
             current directory is not inside one: clone the repository and run \
             `cargo xtask bench` (or `hrx bench`) there",
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
