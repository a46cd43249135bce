//! The split-k cooperative-matrix decode kernel (8 < m <= 64 f16 rows on
//! tensor cores) cannot run on lavapipe: every variant (16-byte and
//! element loads, each row-fragment count, with and without an epilogue)
//! is compiled for `Target::hopper()` and its SPIR-V validated here; the
//! `matmul_coop_gpu` example runs it on the H200. Its reduction kernel is
//! plain loom and runs on lavapipe in the crate's unit tests.

use hrx_core::Target;
use hrx_loom::{Compiler, Specialization};
use hrx_tensor::ops::{UnaryOp, coop_splitk_source};

/// A `spirv-val` knowing `SPV_KHR_cooperative_matrix` (2023.4 or newer):
/// `HRX_SPIRV_VAL`, else the one on PATH.
fn modern_spirv_val() -> Option<String> {
    let exe = std::env::var("HRX_SPIRV_VAL").unwrap_or_else(|_| "spirv-val".into());
    let out = std::process::Command::new(&exe)
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    ((parts.next()?, parts.next().unwrap_or(0)) >= (2023, 4)).then_some(exe)
}

fn validate(name: &str, spirv: &[u32]) {
    let Some(exe) = modern_spirv_val() else {
        assert!(
            std::env::var_os("HRX_REQUIRE_SPIRV_VAL").is_none(),
            "HRX_REQUIRE_SPIRV_VAL is set but no spirv-val >= 2023.4 was found"
        );
        eprintln!("note: no spirv-val >= 2023.4 (set HRX_SPIRV_VAL); skipping validation");
        return;
    };
    let path = std::env::temp_dir().join(format!("hrx-splitk-{}-{name}.spv", std::process::id()));
    let bytes: Vec<u8> = spirv.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new(&exe)
        .args(["--target-env", "vulkan1.3"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn splitk_kernels_compile_for_hopper_and_validate() {
    let compiler = Compiler::for_target(None, &Target::hopper()).unwrap();
    for m in [9, 16, 24, 32, 48, 64] {
        for quad in [true, false] {
            let act = (m == 24).then_some(UnaryOp::Gelu);
            let (main, reduce) = coop_splitk_source(&Target::hopper(), m, quad, act).unwrap();
            for (src, symbol) in [(main, "@matmul_splitk"), (reduce, "@matmul_splitk_reduce")] {
                let artifact = compiler
                    .module(&src)
                    .and_then(|module| module.compile_uncached(&Specialization::new(symbol)))
                    .unwrap_or_else(|e| panic!("m={m} quad={quad} {symbol}: {e}"));
                validate(&format!("{m}-{quad}-{}", &symbol[1..]), artifact.spirv());
            }
        }
    }
}

#[test]
fn splitk_only_where_the_target_has_the_shape() {
    assert!(coop_splitk_source(&Target::lavapipe(), 16, true, None).is_none());
    assert!(coop_splitk_source(&Target::hopper(), 65, true, None).is_none());
}
