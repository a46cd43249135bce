//! What the driver reports about the tensor-core matmul kernels compiled
//! for this device (register count, code size, ... under the driver's own
//! names), through `GpuKernel::statistics`: the cooperative-matrix kernel
//! of an 8192^3 matmul (B row-major and transposed) and the split-k
//! decode kernels of m = 4..64. `HRX_COOP_TILES` / `HRX_SPLITK` pick other
//! shapes, as for the benchmark.
//!
//! `cargo run --release -p hrx-tensor --example kernel_stats`
//!
//! Devices without cooperative matrices (lavapipe) have none of these
//! kernels; devices without `VK_KHR_pipeline_executable_properties` say so.

use hrx_loom::{Compiler, Specialization};
use hrx_runtime::{Runtime, RuntimeOptions};
use hrx_tensor::ops::{
    SplitKOperands, coop_matmul_source, coop_splitk_source, kernel_from_artifact,
};

fn main() -> hrx_core::Result<()> {
    let runtime = Runtime::with_options(RuntimeOptions::default().with_pipeline_statistics())?;
    let target = runtime.gpu()?.target().clone();
    println!("device: {}", target.name);
    let mut kernels = vec![];
    for transposed_b in [false, true] {
        if let Some(src) = coop_matmul_source(&target, 8192, transposed_b, None) {
            let name = format!("matmul_coop 8192^3 transposed_b={transposed_b}");
            kernels.push((name, src, "@matmul_coop"));
        }
    }
    for m in [4, 8, 16, 32, 64] {
        if let Some(src) = coop_splitk_source(&target, m, SplitKOperands::Wide, None) {
            kernels.push((format!("matmul_splitk m={m}"), src, "@matmul_splitk"));
        }
    }
    if kernels.is_empty() {
        println!("no cooperative-matrix kernels on this device");
        return Ok(());
    }
    let compiler = Compiler::for_target(None, &target)?;
    for (name, src, symbol) in kernels {
        let artifact = compiler
            .module(&src)
            .and_then(|module| module.compile_uncached(&Specialization::new(symbol)))?;
        let kernel = kernel_from_artifact(&runtime, &artifact)?;
        match kernel.statistics() {
            Ok(stats) => {
                let line: Vec<String> = stats
                    .iter()
                    .map(|s| format!("{}={}", s.name, s.value))
                    .collect();
                println!("{name}: {}", line.join(", "));
            }
            Err(e) => println!("{name}: {e}"),
        }
    }
    Ok(())
}
