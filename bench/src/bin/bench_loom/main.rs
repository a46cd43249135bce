//! The loom benchmark, against naga's own WGSL path in the same run.
//!
//! 1. Compile time per corpus kernel, loom text to SPIR-V (parse, verify,
//!    specialize, lower, naga validation, SPIR-V emit; no cache) against
//!    naga's WGSL front end compiling an equivalent WGSL kernel (parse,
//!    the same validation and writer options). Median of `HRX_BENCH_ITERS`
//!    (default 200) runs each, the two sides alternating.
//! 2. SAXPY `vector<4xf32>` bandwidth: the loom kernel against the same
//!    kernel written in WGSL through naga, both dispatched by hrx-runtime on
//!    the same device from device-local buffers, in GB/s counting 12 bytes
//!    per element (read x, read y, write y). `n` is 2^28 on a GPU and 2^24
//!    on a CPU device (`HRX_BENCH_N` overrides; a multiple of 1024).
//!
//! Writes `target/bench/loom.json` (or `HRX_BENCH_OUT`) and prints a
//! markdown table. Reads nothing from disk: the corpus is compiled in.

use hrx_bench::report;
mod wgsl;

use hrx_core::{DeviceKind, Target};
use hrx_loom::{ScalarValue, Specialization, emit};
use hrx_runtime::{GpuKernel, MemoryPlacement, Runtime};
use report::{Better, Entry, env_usize, median};
use std::{process::ExitCode, time::Instant};

/// The corpus, compiled in: (file stem, kernel symbol, source).
const CORPUS: [(&str, &str, &str); 17] = [
    (
        "fill",
        "fill",
        include_str!("../../../../crates/hrx-loom/tests/corpus/fill.loom"),
    ),
    (
        "scale",
        "scale",
        include_str!("../../../../crates/hrx-loom/tests/corpus/scale.loom"),
    ),
    (
        "saxpy4",
        "saxpy4",
        include_str!("../../../../crates/hrx-loom/tests/corpus/saxpy4.loom"),
    ),
    (
        "f16_to_f32",
        "f16_to_f32",
        include_str!("../../../../crates/hrx-loom/tests/corpus/f16_to_f32.loom"),
    ),
    (
        "clamp2d",
        "clamp2d",
        include_str!("../../../../crates/hrx-loom/tests/corpus/clamp2d.loom"),
    ),
    (
        "row_sum",
        "row_sum",
        include_str!("../../../../crates/hrx-loom/tests/corpus/row_sum.loom"),
    ),
    (
        "wg_sum",
        "wg_sum",
        include_str!("../../../../crates/hrx-loom/tests/corpus/wg_sum.loom"),
    ),
    (
        "subgroup",
        "subgroup_ops",
        include_str!("../../../../crates/hrx-loom/tests/corpus/subgroup.loom"),
    ),
    (
        "prefix_sum",
        "prefix_sum",
        include_str!("../../../../crates/hrx-loom/tests/corpus/prefix_sum.loom"),
    ),
    (
        "transpose",
        "transpose",
        include_str!("../../../../crates/hrx-loom/tests/corpus/transpose.loom"),
    ),
    (
        "matmul",
        "matmul",
        include_str!("../../../../crates/hrx-loom/tests/corpus/matmul.loom"),
    ),
    (
        "softmax",
        "softmax",
        include_str!("../../../../crates/hrx-loom/tests/corpus/softmax.loom"),
    ),
    (
        "layernorm",
        "layernorm",
        include_str!("../../../../crates/hrx-loom/tests/corpus/layernorm.loom"),
    ),
    (
        "histogram",
        "histogram",
        include_str!("../../../../crates/hrx-loom/tests/corpus/histogram.loom"),
    ),
    (
        "config",
        "configured",
        include_str!("../../../../crates/hrx-loom/tests/corpus/config.loom"),
    ),
    (
        "int_ops",
        "int_ops",
        include_str!("../../../../crates/hrx-loom/tests/corpus/int_ops.loom"),
    ),
    (
        "float_math",
        "float_math",
        include_str!("../../../../crates/hrx-loom/tests/corpus/float_math.loom"),
    ),
];

const WGSL_NAME: &str =
    "naga WGSL front end + validation + SPIR-V writer, same options, equivalent kernel";

/// Seconds `f` takes.
fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<f64, String> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed().as_secs_f64())
}

/// The whole loom pipeline for one kernel, no cache.
fn loom_compile(source: &str, symbol: &str, target: &Target) -> Result<Vec<u32>, String> {
    let e = |e: hrx_core::Error| format!("@{symbol}: {e}");
    let ast = hrx_loom::front::parse(source).map_err(e)?;
    let ir = hrx_loom::verify::verify(&ast, source).map_err(e)?;
    let spec = Specialization::new(symbol);
    let s = hrx_loom::specialize::specialize(&ir, &spec, target, source).map_err(e)?;
    let lowered = hrx_loom::lower::lower(&s.kernel, s.workgroup_size, target, source).map_err(e)?;
    emit::emit(&lowered.module, target, &lowered.entry_point).map_err(e)
}

/// naga's WGSL path with the validator and writer options loom uses.
fn wgsl_compile(source: &str, target: &Target) -> Result<Vec<u32>, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        emit::capabilities(target),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(source))?;
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    naga::back::spv::write_vec(&module, &info, &emit::spirv_options(), Some(&pipeline))
        .map_err(|e| e.to_string())
}

/// `HRX_BENCH_STAGES=1`: median microseconds of each loom stage (and the
/// WGSL path) per corpus kernel, printed as a table; no GPU part.
fn stage_times(target: &Target, iters: usize) -> Result<(), String> {
    let e = |e: hrx_core::Error| e.to_string();
    println!(
        "| kernel | parse | verify | specialize | lower | validate | write | loom | wgsl | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut sums = [0.0f64; 8];
    for (stem, symbol, source) in CORPUS {
        let wgsl = wgsl::EQUIVALENTS
            .iter()
            .find(|(name, _)| *name == stem)
            .map(|(_, w)| *w);
        let mut t: [Vec<f64>; 8] = Default::default();
        for it in 0..iters + 10 {
            let mut lap = Instant::now();
            let mut mark = |k: usize, t: &mut [Vec<f64>; 8]| {
                let now = Instant::now();
                if it >= 10 {
                    t[k].push((now - lap).as_secs_f64());
                }
                lap = now;
            };
            let start = Instant::now();
            let ast = hrx_loom::front::parse(source).map_err(e)?;
            mark(0, &mut t);
            let ir = hrx_loom::verify::verify(&ast, source).map_err(e)?;
            mark(1, &mut t);
            let spec = Specialization::new(symbol);
            let s = hrx_loom::specialize::specialize(&ir, &spec, target, source).map_err(e)?;
            mark(2, &mut t);
            let lowered =
                hrx_loom::lower::lower(&s.kernel, s.workgroup_size, target, source).map_err(e)?;
            mark(3, &mut t);
            let info = emit::validate(&lowered.module, target).map_err(e)?;
            mark(4, &mut t);
            let words =
                emit::write_spirv(&lowered.module, &info, &lowered.entry_point).map_err(e)?;
            mark(5, &mut t);
            std::hint::black_box(words);
            if it >= 10 {
                t[6].push(start.elapsed().as_secs_f64());
            }
            if let Some(w) = wgsl {
                let start = Instant::now();
                std::hint::black_box(wgsl_compile(w, target)?);
                if it >= 10 {
                    t[7].push(start.elapsed().as_secs_f64());
                }
            }
        }
        let m: Vec<f64> = t.iter_mut().map(|v| median(v) * 1e6).collect();
        for (k, v) in m.iter().enumerate() {
            if v.is_finite() {
                sums[k] += v;
            }
        }
        println!(
            "| {stem} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            m[6],
            m[7],
            m[6] / m[7]
        );
    }
    println!(
        "| total | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | |",
        sums[0], sums[1], sums[2], sums[3], sums[4], sums[5], sums[6], sums[7]
    );
    Ok(())
}

/// Compile times of corpus kernels without a WGSL equivalent: (name, us).
type LoomOnly = Vec<(String, f64)>;

/// Median compile times (microseconds) per corpus kernel: paired entries
/// and the loom-only rest.
fn compile_times(target: &Target, iters: usize) -> Result<(Vec<Entry>, LoomOnly), String> {
    let mut entries = Vec::new();
    let mut loom_only = Vec::new();
    for (stem, symbol, source) in CORPUS {
        let wgsl = wgsl::EQUIVALENTS
            .iter()
            .find(|(name, _)| *name == stem)
            .map(|(_, w)| *w);
        // Warm up both paths (and check they compile).
        for _ in 0..10 {
            std::hint::black_box(loom_compile(source, symbol, target)?);
            if let Some(w) = wgsl {
                std::hint::black_box(wgsl_compile(w, target)?);
            }
        }
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..iters {
            ours.push(timed(|| {
                std::hint::black_box(loom_compile(source, symbol, target)?);
                Ok(())
            })?);
            if let Some(w) = wgsl {
                theirs.push(timed(|| {
                    std::hint::black_box(wgsl_compile(w, target)?);
                    Ok(())
                })?);
            }
        }
        let ours = median(&mut ours) * 1e6;
        if wgsl.is_some() {
            entries.push(Entry {
                name: format!("compile {stem}: loom text -> SPIR-V"),
                unit: "us",
                hrx: ours,
                baseline: median(&mut theirs) * 1e6,
                baseline_name: WGSL_NAME.into(),
                better: Better::Lower,
            });
        } else {
            loom_only.push((stem.to_string(), ours));
        }
    }
    Ok((entries, loom_only))
}

/// GB/s of the SAXPY kernel built from `spirv` (loom's contract, with
/// `entry` as entry point), `reps` dependent dispatches per submission.
struct Saxpy {
    n: usize,
    reps: usize,
    rounds: usize,
}

impl Saxpy {
    fn run(&self, runtime: &Runtime, target: &Target) -> Result<Entry, String> {
        let e = |e: hrx_core::Error| e.to_string();
        let (_, symbol, source) = CORPUS[2];
        let artifact = hrx_loom::Compiler::for_target(None, target)
            .and_then(|c| c.module(source)?.compile(&Specialization::new(symbol)))
            .map_err(e)?;
        let ours = GpuKernel::new(runtime, artifact.spirv(), artifact.contract()).map_err(e)?;
        let mut contract = artifact.contract();
        contract.entry_point = "main".into();
        let theirs =
            GpuKernel::new(runtime, &wgsl_compile(wgsl::SAXPY4, target)?, contract).map_err(e)?;
        let bytes = 4 * self.n;
        let x = runtime
            .allocate(bytes, MemoryPlacement::GpuLocal)
            .map_err(e)?;
        let y = runtime
            .allocate(bytes, MemoryPlacement::GpuLocal)
            .map_err(e)?;
        let hrx_core::DispatchArgs {
            push_constants: constants,
            workgroups: grid,
        } = artifact
            .dispatch_args(
                &[ScalarValue::Index(self.n as u64), ScalarValue::F32(1e-3)],
                &[self.n as u64],
            )
            .map_err(e)?;
        let mut init = runtime.graph();
        init.fill(x.view(), 1.0f32.to_bits()).map_err(e)?;
        init.fill(y.view(), 2.0f32.to_bits()).map_err(e)?;
        init.prepare().and_then(|g| g.submit()?.wait()).map_err(e)?;
        let prepared = |kernel: &GpuKernel| {
            let mut graph = runtime.graph();
            for _ in 0..self.reps {
                graph.dispatch(kernel, &[x.view(), y.view()], &constants, grid)?;
            }
            graph.prepare()
        };
        let (ours, theirs) = (prepared(&ours).map_err(e)?, prepared(&theirs).map_err(e)?);
        let run = |g: &hrx_runtime::ExecutableGraph| {
            timed(|| g.submit().and_then(|c| c.wait()).map_err(e))
        };
        run(&ours)?;
        run(&theirs)?;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..self.rounds {
            // Alternate which side goes first.
            if round % 2 == 0 {
                a.push(run(&ours)?);
                b.push(run(&theirs)?);
            } else {
                b.push(run(&theirs)?);
                a.push(run(&ours)?);
            }
        }
        let traffic = 12.0 * self.n as f64 * self.reps as f64 / 1e9;
        Ok(Entry {
            name: format!(
                "SAXPY vector<4xf32>, n = {}, {} dependent dispatches per submission",
                self.n, self.reps
            ),
            unit: "GB/s",
            hrx: traffic / median(&mut a),
            baseline: traffic / median(&mut b),
            baseline_name: "the same kernel in WGSL through naga (same writer options), \
                            dispatched by hrx-runtime on the same buffers"
                .into(),
            better: Better::Higher,
        })
    }
}

fn run() -> Result<(), String> {
    let runtime = Runtime::from_env().map_err(|e| format!("hrx: {e}"))?;
    let target = runtime
        .gpu()
        .map_err(|e| format!("hrx: {e}"))?
        .target()
        .clone();
    let cpu = target.kind == DeviceKind::Cpu;
    let iters = env_usize("HRX_BENCH_ITERS")?.unwrap_or(200).max(5);
    if env_usize("HRX_BENCH_STAGES")?.is_some_and(|v| v != 0) {
        return stage_times(&target, iters);
    }
    let n = env_usize("HRX_BENCH_N")?.unwrap_or(if cpu { 1 << 24 } else { 1 << 28 });
    if n == 0 || !n.is_multiple_of(1024) {
        return Err("HRX_BENCH_N must be a positive multiple of 1024".into());
    }
    let device = target.name.clone();
    eprintln!("bench_loom: {device}, {iters} compiles per kernel, SAXPY n = {n}");

    let (mut entries, loom_only) = compile_times(&target, iters)?;
    let saxpy = Saxpy {
        n,
        reps: if cpu { 4 } else { 20 },
        rounds: if cpu { 10 } else { 15 },
    };
    entries.push(saxpy.run(&runtime, &target)?);

    let path = report::output_path("loom.json");
    report::write(&path, &report::json(&entries, &device))?;
    let loom_only: Vec<String> = loom_only
        .iter()
        .map(|(name, us)| {
            format!("| compile {name} (no WGSL equivalent) | us | {us:.2} | - | - | lower |")
        })
        .collect();
    println!(
        "{}",
        report::table_with(&entries, &loom_only, &device, "WGSL (naga)")
    );
    eprintln!("bench_loom: wrote {}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench_loom: {error}");
            ExitCode::FAILURE
        }
    }
}
