//! What the driver reports about the matmul kernels compiled for this
//! device (register count, code size, ... under the driver's own names),
//! through `GpuKernel::statistics`: the cooperative-matrix kernel of an
//! 8192^3 matmul (B row-major and transposed), the split-k decode kernels
//! of m = 4..64, in their built-in shapes, and the f32 quad kernel with
//! k steps of 16 and 8 over 128 and 64 columns a workgroup (B row-major
//! and transposed), and the tensor-core encoder attention over MiniLM's
//! heads of 32 at 64 and 128 tokens.
//!
//! `cargo run --release -p hrx-bench --bin kernel_stats [--ir DIR]`
//!
//! With `--ir DIR`, also writes each code representation the driver
//! exposes (`GpuKernel::internal_representations`) to
//! `DIR/<kernel>.<n>.txt` (or `.bin`).
//!
//! Devices without cooperative matrices (lavapipe) have none of these
//! kernels; devices without `VK_KHR_pipeline_executable_properties` say so.

use hrx_loom::{Compiler, Specialization};
use hrx_runtime::{GpuKernel, Runtime, RuntimeOptions};
use hrx_tensor::ops::{
    SplitKOperands, coop_matmul_source, coop_splitk_source, encoder_attention_coop_source,
    quads_matmul_source,
};

fn main() -> hrx_core::Result<()> {
    let runtime = Runtime::with_options(RuntimeOptions::from_env()?.with_pipeline_statistics())?;
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
    for (depth, bn) in [(16, 128), (8, 128), (16, 64), (8, 64)] {
        for transposed_b in [false, true] {
            if let Some(src) = quads_matmul_source(&target, transposed_b, (Some(depth), bn)) {
                let name =
                    format!("matmul f32 quads bk={depth} bn={bn} transposed_b={transposed_b}");
                kernels.push((name, src, "@matmul"));
            }
        }
    }
    for seq in [64, 128] {
        if let Some(src) = encoder_attention_coop_source(&target, 32, seq) {
            let name = format!("encoder_attention_coop heads of 32 over {seq}");
            kernels.push((name, src, "@encoder_attention_coop"));
        }
    }
    if kernels.is_empty() {
        println!("no matmul kernels of these kinds on this device");
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    let ir_dir = args
        .iter()
        .position(|a| a == "--ir")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let compiler = Compiler::for_target(None, &target)?;
    for (name, src, symbol) in kernels {
        let artifact = compiler
            .module(&src)
            .and_then(|module| module.compile_uncached(&Specialization::new(symbol)))?;
        let kernel = GpuKernel::new(&runtime, artifact.spirv(), artifact.contract())?;
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
        let Some(dir) = &ir_dir else { continue };
        std::fs::create_dir_all(dir).map_err(|e| hrx_core::Error::Message(e.to_string()))?;
        for (n, rep) in kernel.internal_representations()?.into_iter().enumerate() {
            let file = format!(
                "{}.{n}.{}",
                name.replace([' ', '^', '='], "_"),
                if rep.is_text { "txt" } else { "bin" }
            );
            println!(
                "  {}: {} bytes ({}) -> {file}",
                rep.name,
                rep.data.len(),
                rep.description
            );
            std::fs::write(dir.join(file), &rep.data)
                .map_err(|e| hrx_core::Error::Message(e.to_string()))?;
        }
    }
    Ok(())
}
