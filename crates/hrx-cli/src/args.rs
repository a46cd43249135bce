//! The command line of `hrx`, declared with clap: the doc comments below
//! are the help text.

use crate::demo::DemoArgs;
use crate::serve::ServeArgs;
use clap::{Args, Parser, Subcommand, ValueEnum};
use hrx::loom::ConfigValue;
use std::path::PathBuf;

/// hrx: GPU compute and inference on Vulkan.
#[derive(Debug, Parser)]
#[command(name = "hrx", version)]
#[command(
    after_help = "`hrx <COMMAND> --help` describes a command and its options.\n\
Exit codes: 0 success, 1 runtime or compile error, 2 usage error."
)]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve a model to concurrent clients through a pool of slots, checking
    /// every output.
    Demo(DemoArgs),
    /// Embed sentences with a sentence-encoder model (JSON Lines out).
    Embed(EmbedArgs),
    /// Serve a sentence-encoder model over HTTP: OpenAI-compatible
    /// embeddings, health, readiness and Prometheus metrics.
    Serve(ServeArgs),
    /// Generate text with a llama-family GGUF model (JSON Lines in and
    /// out), batching every prompt continuously.
    Generate(GenerateArgs),
    /// Compile a loom kernel to SPIR-V.
    Compile(CompileArgs),
    /// List the Vulkan devices and their limits.
    Devices,
    /// Run the benchmark suites of the hrx checkout holding the current
    /// directory.
    Bench(BenchArgs),
}

/// Which target profile to compile for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetChoice {
    /// The lavapipe software rasterizer's profile.
    Lavapipe,
    /// The NVIDIA Hopper (H100/H200) profile.
    Hopper,
    /// The live device the runtime opens (HRX_DEVICE selects it).
    Device,
}

/// The element type of a text-generation model's key/value caches or
/// activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum FloatChoice {
    /// f32: the reference's values.
    #[default]
    F32,
    /// f16: half the memory and half the bytes read (devices with 16-bit
    /// storage and f16 arithmetic).
    F16,
}

impl FloatChoice {
    /// The choice's name, as the flag spells it.
    pub fn name(self) -> &'static str {
        match self {
            FloatChoice::F32 => "f32",
            FloatChoice::F16 => "f16",
        }
    }
}

impl From<FloatChoice> for hrx::models::llama::ActivationFormat {
    fn from(choice: FloatChoice) -> Self {
        match choice {
            FloatChoice::F32 => hrx::models::llama::ActivationFormat::F32,
            FloatChoice::F16 => hrx::models::llama::ActivationFormat::F16,
        }
    }
}

impl From<FloatChoice> for hrx::models::llama::CacheFormat {
    fn from(choice: FloatChoice) -> Self {
        match choice {
            FloatChoice::F32 => hrx::models::llama::CacheFormat::F32,
            FloatChoice::F16 => hrx::models::llama::CacheFormat::F16,
        }
    }
}

/// `hrx compile FILE --kernel @name ...`
#[derive(Debug, Args)]
#[command(after_help = "Exit codes: 0 compiled, 1 compile or I/O error \
(`FILE:LINE:COL: error[CODE]: message` on stderr), 2 usage error.")]
pub struct CompileArgs {
    /// The loom source file.
    pub file: PathBuf,
    /// The kernel to compile, such as `@scale`.
    #[arg(short, long, value_name = "@NAME")]
    pub kernel: String,
    /// A compile-time configuration value, `key=value` (repeatable). The
    /// value's spelling picks its type: an integer for index keys, `Nu32`,
    /// `Ni32` (or a negative integer), a float (`1.5`, `2f32`), `true` or
    /// `false`.
    #[arg(short, long = "config", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub config: Vec<(String, ConfigValue)>,
    /// The target profile to compile for.
    #[arg(short, long, value_enum, default_value_t = TargetChoice::Lavapipe)]
    pub target: TargetChoice,
    /// Where to write the SPIR-V (required unless --report).
    #[arg(
        short,
        long,
        value_name = "OUT.spv",
        required_unless_present = "report"
    )]
    pub output: Option<PathBuf>,
    /// Print the artifact's report: workgroup size, bindings, push
    /// constants.
    #[arg(long)]
    pub report: bool,
}

/// `hrx embed --model DIR ...`
#[derive(Clone, Debug, PartialEq, Args)]
pub struct EmbedArgs {
    /// The model directory: config.json, tokenizer.json and
    /// model.safetensors of a BERT-style sentence encoder.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// The sentences: UTF-8 text, one sentence per line [default: stdin].
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Where to write the embeddings, as JSON Lines: one JSON object per
    /// input sentence, in input order [default: stdout].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Sentences per batch on the device.
    #[arg(long, value_name = "B", default_value_t = 16, value_parser = positive)]
    pub batch: usize,
    /// Slots of the prepared pool (batches in flight at once).
    #[arg(long, value_name = "S", default_value_t = 2, value_parser = positive)]
    pub slots: usize,
    /// A device index or a name fragment, as `hrx devices` lists them
    /// [default: HRX_DEVICE, then the first GPU, then a CPU device such as
    /// lavapipe].
    #[arg(long, value_name = "SEL", value_parser = nonempty)]
    pub device: Option<String>,
    /// Run the encoder in f16 (weights and activations; f32 accumulation)
    /// instead of f32.
    #[arg(long)]
    pub f16: bool,
}

/// `hrx generate --model FILE.gguf ...`
#[derive(Clone, Debug, PartialEq, Args)]
pub struct GenerateArgs {
    /// The model: a llama-family GGUF file (F32, F16, Q8_0, Q4_0, Q4_1,
    /// Q5_0, Q5_1, Q4_K, Q5_K or Q6_K tensors).
    #[arg(long, value_name = "FILE.gguf")]
    pub model: PathBuf,
    /// The prompts, JSON Lines: `{"prompt": "..."}` or `{"messages":
    /// [{"role": ..., "content": ...}]}` per line [default: stdin].
    #[arg(long, short, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Where to write the generations, JSON Lines in input order
    /// [default: stdout].
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The most new tokens per prompt.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = at_most::<65536>)]
    pub max_new: usize,
    /// Sequences generating at once (key/value cache slots).
    #[arg(long, value_name = "S", default_value_t = 4, value_parser = at_most::<4096>)]
    pub slots: usize,
    /// Positions each sequence's cache holds: prompt plus new tokens.
    #[arg(long, value_name = "C", default_value_t = 1024, value_parser = at_most::<1048576>)]
    pub context: usize,
    /// Token rows of a prompt step.
    #[arg(long, value_name = "R", default_value_t = 64, value_parser = at_most::<16384>)]
    pub prefill_rows: usize,
    /// The key/value caches' element type.
    #[arg(long, value_enum, default_value_t = FloatChoice::F32)]
    pub kv_cache: FloatChoice,
    /// The element type of the activations between a step's kernels.
    #[arg(long, value_enum, default_value_t = FloatChoice::F32)]
    pub activations: FloatChoice,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    pub temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub top_k: usize,
    /// Sample among the most likely tokens holding this much probability.
    #[arg(long, value_name = "P", default_value_t = 1.0)]
    pub top_p: f32,
    /// The seed of the sampling (the same seed gives the same text).
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub seed: u64,
    /// Keep generating after the end-of-sequence token, up to --max-new.
    #[arg(long)]
    pub ignore_eos: bool,
    /// A device index or a name fragment, as `hrx devices` lists them.
    #[arg(long, value_name = "SEL", value_parser = nonempty)]
    pub device: Option<String>,
}

/// `hrx bench [SUITE] [--quick]`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The suite to run: all, runtime, loom, tensor, inference, models,
    /// serve or wgpu [default: all].
    #[arg(value_name = "SUITE")]
    pub suite: Option<String>,
    /// Fewer iterations per benchmark.
    #[arg(long)]
    pub quick: bool,
}

impl BenchArgs {
    /// The arguments for `cargo xtask bench`, which checks the suite name.
    pub fn xtask_args(&self) -> Vec<String> {
        let mut args: Vec<String> = self.suite.iter().cloned().collect();
        if self.quick {
            args.push("--quick".into());
        }
        args
    }
}

/// A count of at least 1 (zero clients, slots, requests or batch rows would
/// make an empty run).
pub fn positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a positive integer")),
    }
}

/// A positive integer no larger than `MAX`: counts that size work or
/// memory get a ceiling at parse time, so an absurd value is a usage error
/// before anything runs rather than minutes of work or an abort.
pub fn at_most<const MAX: usize>(text: &str) -> Result<usize, String> {
    match positive(text)? {
        n if n > MAX => Err(format!("must be at most {MAX}")),
        n => Ok(n),
    }
}

/// A value that is not blank.
pub fn nonempty(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("needs a non-empty value".into())
    } else {
        Ok(text.to_string())
    }
}

/// `key=value`; the value's spelling picks its type.
fn parse_config(text: &str) -> Result<(String, ConfigValue), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not key=value"))?;
    let key = key.trim().trim_start_matches('@').to_string();
    let v = value.trim();
    let bad = || format!("{key}: cannot read `{v}`");
    let parsed = if v == "true" || v == "false" {
        ConfigValue::Bool(v == "true")
    } else if let Some(n) = v.strip_suffix("u32") {
        ConfigValue::U32(n.parse().map_err(|_| bad())?)
    } else if let Some(n) = v.strip_suffix("i32") {
        ConfigValue::I32(n.parse().map_err(|_| bad())?)
    } else if let Some(n) = v.strip_suffix("f32") {
        ConfigValue::F32(n.parse().map_err(|_| bad())?)
    } else if let Ok(n) = v.parse::<u64>() {
        ConfigValue::Index(n)
    } else if v.starts_with('-') && v.parse::<i32>().is_ok() {
        ConfigValue::I32(v.parse().map_err(|_| bad())?)
    } else {
        ConfigValue::F32(v.parse().map_err(|_| bad())?)
    };
    Ok((key, parsed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("hrx").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn the_declarations_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn compile_line_parses() {
        let c = parse(&[
            "compile", "k.loom", "--kernel", "@k", "--config", "a.b=64", "-c", "x=1.5", "-o",
            "o.spv", "--target", "hopper",
        ])
        .unwrap();
        let Command::Compile(c) = c else { panic!() };
        assert_eq!(c.kernel, "@k");
        assert_eq!(c.target, TargetChoice::Hopper);
        assert_eq!(c.config[0], ("a.b".into(), ConfigValue::Index(64)));
        assert_eq!(c.config[1], ("x".into(), ConfigValue::F32(1.5)));
    }

    #[test]
    fn bench_passes_its_arguments_through() {
        match parse(&["bench", "runtime", "--quick"]).unwrap() {
            Command::Bench(args) => assert_eq!(args.xtask_args(), ["runtime", "--quick"]),
            other => panic!("{other:?}"),
        }
        match parse(&["bench"]).unwrap() {
            Command::Bench(args) => assert!(args.xtask_args().is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn embed_defaults_and_every_flag() {
        let Command::Embed(e) = parse(&["embed", "--model", "m"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            e,
            EmbedArgs {
                model: "m".into(),
                input: None,
                output: None,
                batch: 16,
                slots: 2,
                device: None,
                f16: false,
            }
        );
        let Command::Embed(e) = parse(&[
            "embed",
            "--model",
            "m",
            "--input",
            "in.txt",
            "--output",
            "out.jsonl",
            "--batch",
            "4",
            "--slots",
            "3",
            "--device",
            "1",
            "--f16",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!((e.batch, e.slots, e.f16), (4, 3, true));
        assert_eq!(e.input, Some("in.txt".into()));
        assert_eq!(e.output, Some("out.jsonl".into()));
        assert_eq!(e.device.as_deref(), Some("1"));
    }

    #[test]
    fn generate_cache_choice() {
        let Command::Generate(g) = parse(&["generate", "--model", "m.gguf"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (g.kv_cache, g.slots, g.context),
            (FloatChoice::F32, 4, 1024)
        );
        let Command::Generate(g) =
            parse(&["generate", "--model", "m.gguf", "--kv-cache", "f16"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(g.kv_cache, FloatChoice::F16);
        assert_eq!(g.activations, FloatChoice::F32);
        assert!(parse(&["generate", "--model", "m.gguf", "--kv-cache", "bf16"]).is_err());
        let Command::Generate(g) =
            parse(&["generate", "--model", "m.gguf", "--activations", "f16"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (g.kv_cache, g.activations),
            (FloatChoice::F32, FloatChoice::F16)
        );
        assert!(parse(&["generate", "--model", "m.gguf", "--activations", "f8"]).is_err());
    }

    #[test]
    fn config_spellings_pick_types() {
        assert_eq!(parse_config("k=7u32").unwrap().1, ConfigValue::U32(7));
        assert_eq!(parse_config("k=-3").unwrap().1, ConfigValue::I32(-3));
        assert_eq!(parse_config("k=true").unwrap().1, ConfigValue::Bool(true));
        assert!(parse_config("k").is_err());
        assert!(parse_config("k=zz").is_err());
    }

    #[test]
    fn missing_pieces_are_usage_errors() {
        for bad in [
            &[][..],
            &["compile", "f"],
            &["compile", "f", "--kernel", "@k"],
            &["compile", "f", "--kernel"],
            &["frobnicate"],
            &["devices", "extra"],
            &["embed"],
            &["embed", "--model", "m", "--batch", "0"],
            &["embed", "--model", "m", "--device", " "],
        ] {
            let error = parse(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}: {error}");
        }
    }
}
