//! SPIR-V through `spirv-val --target-env vulkan1.3`.
//!
//! Two validators: any `spirv-val` on `PATH` for ordinary kernels
//! ([`validate`]), and one that knows `SPV_KHR_cooperative_matrix`
//! (SPIRV-Tools 2023.4 or newer; Debian 12's 2023.1 rejects every
//! cooperative-matrix opcode) for kernels that use it ([`validate_modern`]):
//! `HRX_SPIRV_VAL` if set, else the one on `PATH`. A missing validator
//! skips the check with a note, unless validation is [`required`].

use std::{
    process::{Command, Output},
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

/// SPIR-V as words, or as the bytes of a `.spv` file.
pub trait Spirv {
    /// The module's little-endian bytes.
    fn to_bytes(&self) -> Vec<u8>;
}

impl Spirv for [u32] {
    fn to_bytes(&self) -> Vec<u8> {
        self.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

impl Spirv for [u8] {
    fn to_bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
}

/// Whether a missing validator fails the test rather than skipping the
/// check: `HRX_REQUIRE_SPIRV_VAL` is set (`cargo xtask ci` sets it) or
/// `CI=true`.
pub fn required() -> bool {
    std::env::var_os("HRX_REQUIRE_SPIRV_VAL").is_some()
        || std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The validator a caller without cooperative matrices may prefer:
/// `HRX_SPIRV_VAL` if set, else `spirv-val` (on `PATH`).
pub fn preferred() -> String {
    std::env::var("HRX_SPIRV_VAL").unwrap_or_else(|_| "spirv-val".into())
}

/// A `spirv-val` that knows `SPV_KHR_cooperative_matrix` (SPIRV-Tools
/// 2023.4 or newer): [`preferred`], if its version says so. Asked once a
/// process (tests ask in parallel), the process tried again where it did
/// not start.
pub fn modern() -> Option<String> {
    static MODERN: OnceLock<Option<String>> = OnceLock::new();
    MODERN
        .get_or_init(|| {
            let exe = preferred();
            let out = spawn_retrying(|| Command::new(&exe).arg("--version").output()).ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let version = text.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
            let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            ((parts.next()?, parts.next().unwrap_or(0)) >= (2023, 4)).then_some(exe)
        })
        .clone()
}

/// How often a validator that does not start is tried before it counts
/// as missing.
const TRIES: usize = 3;

/// `spawn`, tried again (after a short pause) where the process did not
/// start: a test binary starts many processes from many threads at once.
fn spawn_retrying(spawn: impl Fn() -> std::io::Result<Output>) -> std::io::Result<Output> {
    let mut result = spawn();
    for _ in 1..TRIES {
        if result.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        result = spawn();
    }
    result
}

/// Validate with the `spirv-val` on `PATH` (any version); panics with its
/// report when it rejects the module. Skipped with a note when there is
/// none, unless [`required`].
pub fn validate(label: &str, spirv: &(impl Spirv + ?Sized)) {
    if let Err(report) = validate_with("spirv-val", label, spirv) {
        panic!("{report}");
    }
}

/// Validate with [`modern`]; panics with its report when it rejects the
/// module. Without one the check is skipped with a note, unless
/// `HRX_REQUIRE_SPIRV_VAL` is set (CI), where a missing validator must
/// fail rather than pass silently.
pub fn validate_modern(label: &str, spirv: &(impl Spirv + ?Sized)) {
    let Some(exe) = modern() else {
        assert!(
            std::env::var_os("HRX_REQUIRE_SPIRV_VAL").is_none(),
            "HRX_REQUIRE_SPIRV_VAL is set but no spirv-val >= 2023.4 was found"
        );
        eprintln!("note: no spirv-val >= 2023.4 (set HRX_SPIRV_VAL); skipping {label}");
        return;
    };
    if let Err(report) = validate_with(&exe, label, spirv) {
        panic!("{report}");
    }
}

/// Run `exe` on the module: `Err` with its report when it rejects it.
/// When `exe` does not run, the check is skipped with a note (`Ok`),
/// unless [`required`], which panics.
pub fn validate_with(exe: &str, label: &str, spirv: &(impl Spirv + ?Sized)) -> Result<(), String> {
    match run(exe, &spirv.to_bytes()) {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "{exe} rejected {label}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => {
            assert!(
                !required(),
                "{exe} does not run ({e}), and validation is required \
                 (HRX_REQUIRE_SPIRV_VAL or CI=true)"
            );
            eprintln!("note: {exe} does not run ({e}); skipping validation of {label}");
            Ok(())
        }
    }
}

/// `exe --target-env vulkan1.3` on `bytes`, from a temporary file whose
/// name is unique in the process (tests validate in parallel).
fn run(exe: &str, bytes: &[u8]) -> std::io::Result<Output> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("hrx-spirv-val-{}-{n}.spv", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let out = spawn_retrying(|| {
        Command::new(exe)
            .args(["--target-env", "vulkan1.3"])
            .arg(&path)
            .output()
    });
    let _ = std::fs::remove_file(&path);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{cell::Cell, io, os::unix::process::ExitStatusExt, process::ExitStatus};

    fn done() -> io::Result<Output> {
        Ok(Output {
            status: ExitStatus::from_raw(0),
            stdout: Vec::new(),
            stderr: Vec::new(),
        })
    }

    /// A process that fails to start is tried again up to [`TRIES`] times,
    /// and one that starts is not started again.
    #[test]
    fn a_process_that_did_not_start_is_tried_again() {
        let calls = Cell::new(0);
        let flaky = || {
            calls.set(calls.get() + 1);
            match calls.get() {
                1 => Err(io::Error::other("did not start")),
                _ => done(),
            }
        };
        assert!(spawn_retrying(flaky).is_ok());
        assert_eq!(calls.get(), 2);
        calls.set(0);
        let broken = || {
            calls.set(calls.get() + 1);
            Err(io::Error::other("missing"))
        };
        assert!(spawn_retrying(broken).is_err());
        assert_eq!(calls.get(), TRIES);
    }
}
