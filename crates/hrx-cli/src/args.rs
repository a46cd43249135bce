//! Command-line parsing for `hrx` (small enough not to need a framework).

use crate::demo::{DEMO_HELP, DEMO_USAGE, DemoArgs, parse_demo};
use hrx_loom::specialize::ConfigValue;
use std::path::PathBuf;

/// The command lines, printed after usage errors.
pub fn usage() -> String {
    format!("usage:\n{DEMO_USAGE}\n{COMMANDS}")
}

/// `hrx help`: the command lines and what the flags mean.
pub fn help() -> String {
    format!("{}\n\n{DEMO_HELP}\n\n{CONFIG_HELP}", usage())
}

const COMMANDS: &str = "  hrx compile FILE --kernel @name [--config key=value]... \
[--target lavapipe|hopper|device] -o OUT.spv [--report]
  hrx devices
  hrx bench [all|runtime|loom|tensor|inference|wgpu] [--quick]
  hrx help";

const CONFIG_HELP: &str = "\
compile config values: integers (index keys), `Nu32`, `Ni32`, floats (`1.5`, `2f32`),
`true`/`false`.";

/// Which target profile to compile for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetChoice {
    /// `Target::lavapipe()`
    Lavapipe,
    /// `Target::hopper()`
    Hopper,
    /// The live device, through the runtime.
    Device,
}

/// `hrx compile ...`
#[derive(Debug)]
pub struct CompileArgs {
    pub file: PathBuf,
    pub kernel: String,
    pub config: Vec<(String, ConfigValue)>,
    pub target: TargetChoice,
    pub output: Option<PathBuf>,
    pub report: bool,
}

/// A parsed command line.
#[derive(Debug)]
pub enum Command {
    Demo(DemoArgs),
    Compile(CompileArgs),
    Devices,
    /// `hrx bench [suite|all] [--quick]`: the benchmark suites of the
    /// checkout this binary was built from.
    Bench(Vec<String>),
    Help,
}

/// Parse the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err("no command given".into());
    };
    match cmd.as_str() {
        "demo" if rest.iter().any(|a| a == "--help" || a == "-h") => Ok(Command::Help),
        "demo" => parse_demo(rest).map(Command::Demo),
        "compile" => parse_compile(rest).map(Command::Compile),
        "devices" if rest.is_empty() => Ok(Command::Devices),
        "devices" => Err("`hrx devices` takes no arguments".into()),
        // xtask checks the suite names and flags and prints its own usage.
        "bench" => Ok(Command::Bench(rest.to_vec())),
        "help" | "--help" | "-h" => Ok(Command::Help),
        other => Err(format!("unknown command `{other}`")),
    }
}

fn parse_compile(args: &[String]) -> Result<CompileArgs, String> {
    let mut file = None;
    let mut kernel = None;
    let mut config = Vec::new();
    let mut target = TargetChoice::Lavapipe;
    let mut output = None;
    let mut report = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--kernel" | "-k" => kernel = Some(value("--kernel")?),
            "--config" | "-c" => config.push(parse_config(&value("--config")?)?),
            "--target" | "-t" => {
                target = match value("--target")?.as_str() {
                    "lavapipe" => TargetChoice::Lavapipe,
                    "hopper" => TargetChoice::Hopper,
                    "device" => TargetChoice::Device,
                    other => return Err(format!("unknown target `{other}`")),
                }
            }
            "-o" | "--output" => output = Some(PathBuf::from(value("-o")?)),
            "--report" => report = true,
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(format!("unknown option `{flag}`"));
            }
            path if file.is_none() => file = Some(PathBuf::from(path)),
            extra => return Err(format!("unexpected argument `{extra}`")),
        }
    }
    let file = file.ok_or("compile needs a FILE")?;
    let kernel = kernel.ok_or("compile needs --kernel @name")?;
    if output.is_none() && !report {
        return Err("compile needs -o OUT.spv (or --report)".into());
    }
    Ok(CompileArgs {
        file,
        kernel,
        config,
        target,
        output,
        report,
    })
}

/// `key=value`; the value's spelling picks its type.
fn parse_config(text: &str) -> Result<(String, ConfigValue), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("--config `{text}` is not key=value"))?;
    let key = key.trim().trim_start_matches('@').to_string();
    let v = value.trim();
    let bad = || format!("--config {key}: cannot read `{v}`");
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

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn compile_line_parses() {
        let c = parse(&s(&[
            "compile", "k.loom", "--kernel", "@k", "--config", "a.b=64", "-c", "x=1.5", "-o",
            "o.spv", "--target", "hopper",
        ]))
        .unwrap();
        let Command::Compile(c) = c else { panic!() };
        assert_eq!(c.kernel, "@k");
        assert_eq!(c.target, TargetChoice::Hopper);
        assert_eq!(c.config[0], ("a.b".into(), ConfigValue::Index(64)));
        assert_eq!(c.config[1], ("x".into(), ConfigValue::F32(1.5)));
    }

    #[test]
    fn bench_passes_its_arguments_through() {
        match parse(&s(&["bench", "runtime", "--quick"])).unwrap() {
            Command::Bench(args) => assert_eq!(args, ["runtime", "--quick"]),
            other => panic!("{other:?}"),
        }
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
        assert!(parse(&s(&["compile", "f"])).is_err());
        assert!(parse(&s(&["compile", "f", "--kernel", "@k"])).is_err());
        assert!(parse(&s(&["frobnicate"])).is_err());
        assert!(parse(&s(&["compile", "f", "--kernel"])).is_err());
    }
}
