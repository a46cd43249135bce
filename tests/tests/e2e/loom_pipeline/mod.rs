//! A property test through the whole loom pipeline: random valid programs
//! (the `program` module) are parsed, verified, lowered and emitted for two
//! targets (lavapipe and Hopper), every SPIR-V module goes through
//! `spirv-val`, and a sample runs on the live device (lavapipe in CI, with
//! validation layers when `HRX_VALIDATION` is set) with its output compared
//! to an interpreter of the verified IR (the `interp` module).
//!
//! Cost and knobs: by default 64 programs, about 16 of them run on the
//! device, from a fixed seed so CI is reproducible. For a long run set
//! `HRX_LOOM_PIPELINE_CASES` (programs), `HRX_LOOM_PIPELINE_DEVICE_CASES`
//! (how many of them, on average, also run) and `HRX_LOOM_PIPELINE_SEED`.
//! A failure is shrunk by proptest and reported with the minimal program's
//! source and its `Program` value, ready to paste as a regression test.
//!
//! `spirv-val` is `HRX_SPIRV_VAL` or the one on `PATH`; when neither runs,
//! validation is skipped with a note unless it is required
//! (`HRX_REQUIRE_SPIRV_VAL` is set, or `CI=true`).

mod interp;
mod program;

use hrx_core::Target;
use hrx_loom::{Artifact, Compiler, ScalarValue, Specialization};
use hrx_runtime::{Buffer, MemoryPlacement, Runtime};
use hrx_test_support::spirv_val;
use interp::{ArgValue, Word};
use program::{Data, Instr, Program};
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use std::sync::atomic::{AtomicU64, Ordering};

/// The word the output is filled with before a run: a quiet NaN as f32, an
/// odd pattern as an integer, so an unwritten word never passes.
const POISON: u32 = 0x7fc0_dead;
/// Words past the output that the kernel must leave poisoned.
const GUARD: usize = 16;

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
        Err(_) => default,
    }
}

/// The live device and a compiler for its target, opened once per thread.
struct Device {
    runtime: Runtime,
    compiler: Compiler,
}

fn device() -> &'static Device {
    thread_local! {
        static DEVICE: &'static Device = Box::leak(Box::new({
            let runtime = Runtime::from_env().expect("runtime");
            let target = runtime.gpu().expect("device").target().clone();
            let compiler = Compiler::for_target(None, &target).expect("compiler");
            Device { runtime, compiler }
        }));
    }
    DEVICE.with(|d| *d)
}

/// A host-visible buffer holding `words`, then `GUARD` poisoned words.
fn buffer(runtime: &Runtime, words: &[u32]) -> Result<Buffer, String> {
    let buffer = runtime
        .allocate(4 * (words.len() + GUARD), MemoryPlacement::HostVisible)
        .map_err(|e| e.to_string())?;
    let mut mapped = buffer.map_write().map_err(|e| e.to_string())?;
    let all = words.iter().copied().chain(std::iter::repeat(POISON));
    for (chunk, w) in mapped.chunks_exact_mut(4).zip(all) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    drop(mapped);
    Ok(buffer)
}

/// Dispatch `artifact` once over `buffers` with `scalars` and the grid its
/// launch region gives for `workload`, and wait. The one place this test
/// crosses from a compiled artifact to the runtime.
fn dispatch(
    runtime: &Runtime,
    artifact: &Artifact,
    buffers: &[&Buffer],
    scalars: &[ScalarValue],
    workload: &[u64],
) -> Result<(), String> {
    let kernel = hrx_runtime::GpuKernel::new(runtime, artifact.spirv(), artifact.contract())
        .map_err(|e| e.to_string())?;
    let args = artifact
        .dispatch_args(scalars, workload)
        .map_err(|e| e.to_string())?;
    let (constants, grid) = (args.push_constants, args.workgroups);
    let views: Vec<_> = buffers.iter().map(|b| b.view()).collect();
    let mut graph = runtime.graph();
    graph
        .dispatch(&kernel, &views, &constants, grid)
        .map_err(|e| e.to_string())?;
    let done = graph.prepare().map_err(|e| e.to_string())?;
    done.submit()
        .map_err(|e| e.to_string())?
        .wait()
        .map_err(|e| e.to_string())
}

/// Every word of a buffer.
fn words(buffer: &Buffer) -> Result<Vec<u32>, String> {
    let mapped = buffer.map_read().map_err(|e| e.to_string())?;
    Ok(mapped
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}

/// The first `n` words of `buffer`, after checking the guard words past
/// them are still poisoned.
fn output_words(buffer: &Buffer, n: usize) -> Result<Vec<u32>, String> {
    let all = words(buffer)?;
    if let Some(i) = (n..all.len()).find(|&i| all[i] != POISON) {
        return Err(format!("word {i}, past the output, was written"));
    }
    Ok(all[..n].to_vec())
}

/// Run the program on the device; the words of `%out` and `%vout` (guards
/// checked).
fn run_on_device(
    program: &Program,
    data: &Data,
    outputs: usize,
) -> Result<(Vec<u32>, Vec<u32>), String> {
    let device = device();
    let artifact = device
        .compiler
        .module(&program.source())
        .and_then(|m| m.compile(&Specialization::new("@prop")))
        .map_err(|e| format!("compiling for the device: {e}"))?;
    let input = buffer(&device.runtime, &data.words)?;
    let output = buffer(&device.runtime, &vec![POISON; outputs])?;
    let vector_input = buffer(&device.runtime, &data.vector_words)?;
    let vector_output = buffer(&device.runtime, &vec![POISON; data.vector_words.len()])?;
    let scalars = [
        ScalarValue::Index(u64::from(program.n)),
        ScalarValue::I32(data.si),
        ScalarValue::U32(data.su),
        ScalarValue::F32(data.sf),
    ];
    dispatch(
        &device.runtime,
        &artifact,
        &[&input, &output, &vector_input, &vector_output],
        &scalars,
        &[u64::from(program.n)],
    )?;
    Ok((
        output_words(&output, outputs)?,
        output_words(&vector_output, data.vector_words.len())?,
    ))
}

/// How many device runs and compared words (exact, within a bound,
/// unpredictable) the random cases saw: a check that the interpreter
/// predicts most of what it is asked.
static TALLY: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Whether the device's `got` is what the interpreter predicted.
fn matches(want: Word, got: u32) -> bool {
    match want {
        Word::Exact(bits) => bits == got,
        Word::Approx { value, err } => {
            let got = f32::from_bits(got);
            got.is_finite() && (f64::from(got) - f64::from(value)).abs() <= err
        }
        Word::Unknown => true,
    }
}

/// The whole pipeline for one program: both targets and spirv-val, the
/// interpreter, and (for device cases) the device's output against it.
fn check(program: &Program) -> Result<(), String> {
    let source = program.source();
    let spec = Specialization::new("@prop");
    let mut ir = None;
    for (label, target) in [
        ("lavapipe", Target::lavapipe()),
        ("hopper", Target::hopper()),
    ] {
        let compiler = Compiler::for_target(None, &target).map_err(|e| e.to_string())?;
        let module = compiler
            .module(&source)
            .map_err(|e| format!("the verifier rejected a generated program: {e}"))?;
        let artifact = module
            .compile_uncached(&spec)
            .map_err(|e| format!("compiling for {label}: {e}"))?;
        spirv_val::validate_with(&spirv_val::preferred(), label, artifact.spirv())?;
        // `%vin` and `%vout` see only aligned 4-lane accesses: 4-vectors.
        let vector_elements: Vec<u32> = artifact.bindings()[2..]
            .iter()
            .map(|b| b.element_bytes)
            .collect();
        if vector_elements != [16, 16] {
            return Err(format!(
                "{label}: %vin and %vout declared with {vector_elements:?}-byte elements"
            ));
        }
        ir.get_or_insert_with(|| module.ir().clone());
    }
    let module = ir.expect("two targets compiled");
    let kernel = module.kernel("prop").ok_or("no kernel @prop")?;
    let data = program.data();
    let outputs = program.n as usize * program.width();
    let memory = interp::run(
        kernel,
        &[program.n],
        &[
            ArgValue::Index(program.n),
            ArgValue::I32(data.si),
            ArgValue::U32(data.su),
            ArgValue::F32(data.sf),
            ArgValue::Buffer(data.words.clone()),
            ArgValue::Buffer(vec![POISON; outputs]),
            ArgValue::Buffer(data.vector_words.clone()),
            ArgValue::Buffer(vec![POISON; data.vector_words.len()]),
        ],
    )
    .map_err(|e| format!("interpreter: {e}"))?;
    let want = memory[5].as_ref().ok_or("no output buffer")?;
    let want_vector = memory[7].as_ref().ok_or("no vector output buffer")?;
    if !program.on_device {
        return Ok(());
    }
    let (got, got_vector) = run_on_device(program, &data, outputs)?;
    TALLY[0].fetch_add(1, Ordering::Relaxed);
    for w in want.iter().chain(want_vector) {
        let kind = match w {
            Word::Exact(_) => 1,
            Word::Approx { .. } => 2,
            Word::Unknown => 3,
        };
        TALLY[kind].fetch_add(1, Ordering::Relaxed);
    }
    let width = program.width();
    let mismatches = |name: &str, width: usize, want: &[Word], got: &[u32]| -> Vec<String> {
        want.iter()
            .zip(got)
            .enumerate()
            .filter(|(_, (w, g))| !matches(**w, **g))
            .map(|(i, (w, g))| {
                format!(
                    "{name} item {} slot {}: device {g:#010x} ({:e}), interpreter {w:?}",
                    i / width,
                    i % width,
                    f32::from_bits(*g)
                )
            })
            .collect()
    };
    let mut wrong = mismatches("%out", width, want, &got);
    wrong.extend(mismatches("%vout", 4, want_vector, &got_vector));
    wrong.truncate(8);
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "device and interpreter disagree (inputs {:?}, si {}, su {}, sf {:e}):\n{}",
            &data.words[..data.words.len().min(24)],
            data.si,
            data.su,
            data.sf,
            wrong.join("\n")
        ))
    }
}

#[test]
fn random_programs_compile_validate_and_run_as_interpreted() {
    let cases = env_number("HRX_LOOM_PIPELINE_CASES", 64).max(1);
    let on_device = env_number("HRX_LOOM_PIPELINE_DEVICE_CASES", 16);
    let seed = env_number("HRX_LOOM_PIPELINE_SEED", 0x1008_a11e);
    let config = Config {
        cases: u32::try_from(cases).unwrap_or(u32::MAX),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let share = on_device as f64 / cases as f64;
    let started = std::time::Instant::now();
    let mut runner = TestRunner::new(config);
    let result = runner.run(&program::program(share), |p| {
        check(&p).map_err(TestCaseError::fail)
    });
    let tally: Vec<u64> = TALLY.iter().map(|t| t.load(Ordering::Relaxed)).collect();
    eprintln!(
        "{cases} programs (seed {seed}) in {:.1} s; {} device runs (shrinking included), \
         output words compared exactly {}, within a bound {}, not predictable {}",
        started.elapsed().as_secs_f64(),
        tally[0],
        tally[1],
        tally[2],
        tally[3]
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, p)) => panic!(
            "minimal failing program (seed {seed}):\n{reason}\n--- source\n{}--- value\n{p:#?}",
            p.source()
        ),
        Err(e) => panic!("{e}"),
    }
}

/// A hand-written program covering every instruction kind, so that the
/// generator and interpreter are exercised even if the random cases drift.
#[test]
fn a_fixed_program_with_every_construct_matches() {
    let op = |code, args| Instr::Op { code, args };
    let program = Program {
        workgroup_size: 3,
        inputs: vec![program::Ty::I32, program::Ty::F32, program::Ty::U32],
        body: vec![
            op(13, [3, 4, 0]),
            Instr::Gather { row: 1, slot: 2 },
            Instr::If {
                cond: 0,
                then: vec![op(37, [1, 2, 0])],
                otherwise: vec![op(29, [2, 1, 0])],
                results: vec![(4, 9, 1), (2, 3, 5)],
            },
            Instr::For {
                lower: 1,
                trips: 3,
                step: 2,
                carried: vec![(2, 1, 7), (4, 0, 3)],
                body: vec![
                    op(55, [1, 0, 0]),
                    op(41, [2, 3, 0]),
                    Instr::Store {
                        cond: 0x8001,
                        ty: 4,
                        value: 0,
                    },
                ],
            },
            Instr::Store {
                cond: 0,
                ty: 2,
                value: 1,
            },
        ],
        outputs: vec![(0, 2), (1, 0), (2, 5), (3, 1), (4, 3)],
        n: 10,
        data_seed: 7,
        on_device: true,
        vector_output: 1,
    };
    if let Err(e) = check(&program) {
        panic!("{e}\n--- source\n{}", program.source());
    }
}

/// The generator reaches every op spelling and construct it knows, so a
/// change to it cannot silently narrow what the property test covers.
#[test]
fn the_generator_emits_every_construct() {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(1),
        ..Config::default()
    });
    let strategy = program::program(0.0);
    let mut text = String::new();
    for _ in 0..400 {
        let tree = strategy.new_tree(&mut runner).expect("a program");
        text.push_str(&tree.current().source());
    }
    let missing: Vec<&&str> = program::SPELLINGS
        .iter()
        .filter(|s| !text.contains(**s))
        .collect();
    assert!(missing.is_empty(), "never generated: {missing:?}");
}
