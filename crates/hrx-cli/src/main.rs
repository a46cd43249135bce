//! `hrx`: the demo (a model served through a slot pool), sentence
//! embeddings, text generation, an embeddings server, compile loom kernels to SPIR-V,
//! inspect devices, and run the benchmarks.
//!
//! Exit codes: 0 success, 1 compile or runtime error (diagnostics on
//! stderr as `FILE:LINE:COL: error[CODE]: message` plus a caret excerpt),
//! 2 usage error.

/// `println!` that returns an error from the enclosing function instead of
/// panicking when stdout is closed (`hrx compile --report | head -c1`).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))?
    };
}

mod args;
mod bench;
mod demo;
mod embed;
mod generate;
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
        Command::Generate(g) => report("hrx generate", generate::run(&g)),
        Command::Compile(c) => report(&c.file.display().to_string(), compile(&c)),
        Command::Devices => report("hrx", devices()),
        Command::Bench(b) => report("hrx bench", bench::run(&b.xtask_args())),
    }
}

/// One line to stdout; a closed or failing stdout is an error, not a panic.
fn write_stdout(line: std::fmt::Arguments<'_>) -> Result<(), Error> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::msg(format!("cannot write to stdout: {e}")))
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

/// Read a loom file of at most `limit` bytes: a larger file (or an endless
/// one such as `/dev/zero`) is refused after reading one byte past the
/// limit, never read into memory whole.
fn read_source(path: &std::path::Path, limit: usize) -> Result<String, Error> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| Error::msg(format!("cannot read {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() > limit {
        return Err(Error::msg(format!(
            "{} is larger than the {limit}-byte limit for loom sources",
            path.display()
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::msg(format!(
            "{} is not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

fn compile(c: &CompileArgs) -> Result<(), Error> {
    let compiler = Compiler::for_target(None, &target(c.target)?)?;
    let source = read_source(&c.file, compiler.max_source_bytes())?;
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
        let report = hrx::loom::artifact::report(&artifact);
        outln!("{}", report.trim_end_matches('\n'));
    }
    Ok(())
}

fn devices() -> Result<(), Error> {
    for (index, t) in &hrx::execution::available_devices()? {
        let (major, minor, patch) = t.api_version;
        outln!(
            "{index}: {} ({:?}, vendor {:#06x}, Vulkan {major}.{minor}.{patch})",
            t.name,
            t.kind,
            t.vendor_id
        );
        outln!(
            "   subgroup size {}..{}, ops {:?}",
            t.subgroup_size_min,
            t.subgroup_size_max,
            t.subgroup_ops
        );
        outln!(
            "   workgroup: max size {:?}, max invocations {}, memory {} B; max groups {:?}",
            t.max_workgroup_size,
            t.max_workgroup_invocations,
            t.workgroup_memory_bytes,
            t.max_workgroup_count
        );
        outln!(
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
            outln!("   cooperative matrix: {:?}", t.cooperative_matrix);
        }
    }
    Ok(())
}
