//! Helpers shared by the matmul test binaries: transposed storage, f16
//! rounding of reference inputs, and `spirv-val` runs on kernels compiled
//! for targets lavapipe cannot execute.

use std::process::{Command, Output};

/// Values of a `[.., rows, cols]` tensor stored transposed when asked.
pub fn stored(values: &[f64], batch: usize, rows: usize, cols: usize, transpose: bool) -> Vec<f64> {
    if !transpose {
        return values.to_vec();
    }
    let mut out = vec![0.0; values.len()];
    for b in 0..batch {
        for i in 0..rows {
            for j in 0..cols {
                out[b * rows * cols + j * rows + i] = values[b * rows * cols + i * cols + j];
            }
        }
    }
    out
}

/// `v` as the nearest f16 would hold it, so references see what the
/// kernel reads.
pub fn f16_round(v: f64) -> f64 {
    half::f16::from_f64(v).to_f64()
}

/// A `spirv-val` knowing `SPV_KHR_cooperative_matrix` (2023.4 or newer):
/// `HRX_SPIRV_VAL`, else the one on PATH.
pub fn modern_spirv_val() -> Option<String> {
    let exe = std::env::var("HRX_SPIRV_VAL").unwrap_or_else(|_| "spirv-val".into());
    let out = Command::new(&exe).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    ((parts.next()?, parts.next().unwrap_or(0)) >= (2023, 4)).then_some(exe)
}

/// Validate cooperative-matrix SPIR-V with [`modern_spirv_val`]. Without
/// one the check is skipped, unless `HRX_REQUIRE_SPIRV_VAL` is set (CI),
/// where a missing validator must fail rather than pass silently.
pub fn validate_modern(label: &str, spirv: &[u8]) {
    let Some(exe) = modern_spirv_val() else {
        assert!(
            std::env::var_os("HRX_REQUIRE_SPIRV_VAL").is_none(),
            "HRX_REQUIRE_SPIRV_VAL is set but no spirv-val >= 2023.4 was found"
        );
        eprintln!("note: no spirv-val >= 2023.4 (set HRX_SPIRV_VAL); skipping validation");
        return;
    };
    assert_valid(label, spirv_val(&exe, label, spirv).unwrap());
}

/// Validate with the `spirv-val` on PATH when it is installed (CI installs
/// it); any version will do for kernels without cooperative matrices.
pub fn validate_if_installed(label: &str, spirv: &[u8]) {
    match spirv_val("spirv-val", label, spirv) {
        Ok(out) => assert_valid(label, out),
        Err(_) => eprintln!("note: no spirv-val; skipping validation"),
    }
}

/// Runs `exe` on `spirv` for Vulkan 1.3; the file name carries the
/// process id and `label` so parallel tests never share one.
fn spirv_val(exe: &str, label: &str, spirv: &[u8]) -> std::io::Result<Output> {
    let path = std::env::temp_dir().join(format!("hrx-matmul-{}-{label}.spv", std::process::id()));
    std::fs::write(&path, spirv).unwrap();
    let out = Command::new(exe)
        .args(["--target-env", "vulkan1.3"])
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    out
}

fn assert_valid(label: &str, out: Output) {
    assert!(
        out.status.success(),
        "{label}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
