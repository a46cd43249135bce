//! Fuzz the whole loom pipeline: any bytes that parse and verify are
//! specialised with their defaults, lowered and emitted for both a CPU
//! (lavapipe) and a GPU (Hopper) target. Every kernel must give an artifact
//! or diagnostics, never a panic, a stack overflow or a hang.
#![no_main]

use hrx_core::Target;
use hrx_loom::{Compiler, Specialization};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let source = String::from_utf8_lossy(data);
    for target in [Target::lavapipe(), Target::hopper()] {
        let Ok(compiler) = Compiler::for_target(None, &target) else {
            return;
        };
        let Ok(module) = compiler.module(&source) else {
            return;
        };
        for kernel in module.kernels() {
            let _ = module.compile_uncached(&Specialization::new(kernel));
        }
    }
});
