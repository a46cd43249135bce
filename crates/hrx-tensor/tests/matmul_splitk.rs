//! The split-k cooperative-matrix decode kernel (8 < m <= 64 f16 rows on
//! tensor cores) cannot run on lavapipe: every variant (16-byte and
//! element loads, each row-fragment count, with and without an epilogue)
//! is compiled for `Target::hopper()` and its SPIR-V validated here; the
//! `matmul_coop_gpu` example runs it on the H200. Its reduction kernel is
//! plain loom and runs on lavapipe in the crate's unit tests.

mod common;

use common::matmul::validate_modern;
use hrx_core::Target;
use hrx_loom::{Compiler, Specialization};
use hrx_tensor::ops::{SplitKOperands, UnaryOp, coop_splitk_source};

#[test]
fn splitk_kernels_compile_for_hopper_and_validate() {
    let compiler = Compiler::for_target(None, &Target::hopper()).unwrap();
    for m in [9, 16, 24, 32, 48, 64] {
        for operands in [
            SplitKOperands::Wide,
            SplitKOperands::TransposedB,
            SplitKOperands::Elements,
        ] {
            let act = (m == 24).then_some(UnaryOp::Gelu);
            let (main, reduce) = coop_splitk_source(&Target::hopper(), m, operands, act).unwrap();
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
            for (src, symbol) in [(main, "@matmul_splitk"), (reduce, "@matmul_splitk_reduce")] {
                let artifact = compiler
                    .module(&src)
                    .and_then(|module| module.compile_uncached(&Specialization::new(symbol)))
                    .unwrap_or_else(|e| panic!("m={m} {operands:?} {symbol}: {e}"));
                validate_modern(
                    &format!("splitk-{m}-{operands:?}-{}", &symbol[1..]),
                    &artifact.spirv_bytes(),
                );
            }
        }
    }
}

#[test]
fn splitk_only_where_the_target_has_the_shape() {
    assert!(coop_splitk_source(&Target::lavapipe(), 16, SplitKOperands::Wide, None).is_none());
    assert!(coop_splitk_source(&Target::hopper(), 65, SplitKOperands::Wide, None).is_none());
}
