//! `hrx`: the demo (a model served through a slot pool), sentence
//! embeddings, an embeddings server, compile loom kernels to SPIR-V,
//! inspect devices, and run the benchmarks.
//!
//! Exit codes: 0 success, 1 compile or runtime error (diagnostics on
//! stderr as `FILE:LINE:COL: error[CODE]: message` plus a caret excerpt),
//! 2 usage error.

mod args;
mod bench;
mod demo;
mod embed;
mod serve;

use args::{Cli, Command, CompileArgs, TargetChoice};
use clap::Parser;
use hrx::{
    Error, Target,
    execution::Runtime,
    loom::{Compiler, Specialization},
};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Usage errors exit 2 and `--help` exits 0, both from clap.
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(d) => report("hrx demo", demo::run(&d)),
        Command::Embed(e) => report("hrx embed", embed::run(&e)),
        Command::Serve(s) => report("hrx serve", serve::run(&s)),
        Command::Compile(c) => report(&c.file.display().to_string(), compile(&c)),
        Command::Devices => report("hrx", devices()),
        Command::Bench(b) => report("hrx bench", bench::run(&b.xtask_args())),
    }
}

/// Print an error the way editors and humans read it; exit 1 on failure.
fn report(file: &str, result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Compile { diagnostics, .. }) if !diagnostics.is_empty() => {
            for d in &diagnostics {
                eprintln!(
                    "{file}:{}:{}: error[{}]: {}",
                    d.line, d.column, d.code, d.message
                );
                if !d.excerpt.is_empty() {
                    eprintln!("{}", d.excerpt);
                }
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("hrx: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn target(choice: TargetChoice) -> Result<Target, Error> {
    match choice {
        TargetChoice::Lavapipe => Ok(Target::lavapipe()),
        TargetChoice::Hopper => Ok(Target::hopper()),
        // The device `HRX_DEVICE` (or the type preference) selects.
        TargetChoice::Device => Ok(Runtime::from_env()?.gpu()?.target().clone()),
    }
}

fn compile(c: &CompileArgs) -> Result<(), Error> {
    let source = std::fs::read_to_string(&c.file)
        .map_err(|e| Error::msg(format!("cannot read {}: {e}", c.file.display())))?;
    let compiler = Compiler::for_target(None, &target(c.target)?)?;
    let module = compiler.module(&source)?;
    let mut spec = Specialization::new(c.kernel.as_str());
    for (k, v) in &c.config {
        spec.set_config(k.as_str(), *v);
    }
    let artifact = module.compile(&spec)?;
    if let Some(out) = &c.output {
        std::fs::write(out, artifact.spirv_bytes())
            .map_err(|e| Error::msg(format!("cannot write {}: {e}", out.display())))?;
    }
    if c.report {
        print!("{}", hrx::loom::artifact::report(&artifact));
    }
    Ok(())
}

fn devices() -> Result<(), Error> {
    for (index, t) in &hrx::execution::available_devices()? {
        let (major, minor, patch) = t.api_version;
        println!(
            "{index}: {} ({:?}, vendor {:#06x}, Vulkan {major}.{minor}.{patch})",
            t.name, t.kind, t.vendor_id
        );
        println!(
            "   subgroup size {}..{}, ops {:?}",
            t.subgroup_size_min, t.subgroup_size_max, t.subgroup_ops
        );
        println!(
            "   workgroup: max size {:?}, max invocations {}, memory {} B; max groups {:?}",
            t.max_workgroup_size,
            t.max_workgroup_invocations,
            t.workgroup_memory_bytes,
            t.max_workgroup_count
        );
        println!(
            "   push constants {} B, storage range {} B (offset alignment {}), f16 {}, 16-bit storage {}, int64 {}, timeline semaphores {}",
            t.push_constant_bytes,
            t.max_storage_buffer_range,
            t.storage_buffer_offset_alignment,
            t.shader_f16,
            t.storage_16bit,
            t.shader_int64,
            t.timeline_semaphores
        );
        if !t.cooperative_matrix.is_empty() {
            println!("   cooperative matrix: {:?}", t.cooperative_matrix);
        }
    }
    Ok(())
}
