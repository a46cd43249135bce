//! The split-k cooperative-matrix decode kernel (8 < m <= 64 f16 rows on
//! tensor cores) cannot run on lavapipe: every variant (16-byte and
//! element loads, each row-fragment count, with and without an epilogue)
//! is compiled for `Target::hopper()` and its SPIR-V validated here; the
//! `matmul_coop_gpu` example and the GPU tier run it on the H200. The last
//! workgroup of each column slab sums the splits in the same dispatch.

use hrx_core::Target;
use hrx_loom::{Compiler, Specialization};
use hrx_tensor::ops::{SplitKOperands, UnaryOp, coop_splitk_source};
use hrx_test_support::spirv_val;

#[test]
fn splitk_kernels_compile_for_hopper_and_validate() {
    let compiler = Compiler::for_target(None, &Target::hopper()).unwrap();
    for m in [9, 16, 24, 32, 48, 64] {
        for operands in [
            SplitKOperands::Wide,
            SplitKOperands::TransposedB,
            SplitKOperands::Elements,
        ] {
            let act = match m {
                24 => Some(UnaryOp::Gelu),
                48 => Some(UnaryOp::Silu),
                _ => None,
            };
            let main = coop_splitk_source(&Target::hopper(), m, operands, act).unwrap();
            // A transposed B is staged n-major and read column-major, not
            // element by element.
            assert_eq!(
                main.contains("coop.load<col_major>"),
                operands == SplitKOperands::TransposedB,
                "m={m} {operands:?}"
            );
            assert_eq!(
                main.contains("view.load %bv"),
                operands == SplitKOperands::Elements,
                "m={m} {operands:?}"
            );
            // One dispatch: the slab's last workgroup finishes it, behind
            // storage barriers and a counter.
            assert_eq!(main.matches("kernel.barrier<storage>").count(), 2);
            assert!(main.contains("view.atomic.rmw<addi> %ou, %cntv"));
            let artifact = compiler
                .module(&main)
                .and_then(|module| module.compile_uncached(&Specialization::new("@matmul_splitk")))
                .unwrap_or_else(|e| panic!("m={m} {operands:?}: {e}"));
            spirv_val::validate_modern(&format!("splitk-{m}-{operands:?}"), artifact.spirv());
        }
    }
}

#[test]
fn splitk_only_where_the_target_has_the_shape() {
    assert!(coop_splitk_source(&Target::lavapipe(), 16, SplitKOperands::Wide, None).is_none());
    assert!(coop_splitk_source(&Target::hopper(), 65, SplitKOperands::Wide, None).is_none());
}
