//! The flags of `hrx demo`.

use std::path::PathBuf;

/// The usage line of `hrx demo`.
pub const DEMO_USAGE: &str =
    "  hrx demo [--clients M] [--slots S] [--requests N] [--batch B] [--seq T]
           [--device INDEX|NAME] [--weights FILE | --seed SEED]
           [--save-weights FILE] [--quiet]";

/// What `hrx demo` does and what its flags mean, for `hrx help`.
pub const DEMO_HELP: &str = "\
demo: serves N requests (default 256) of a small transformer from M concurrent
tokio clients (default 8) through a pool of S slots (default 4), checks every
output against a CPU reference, then runs the naive path (allocate, record,
prepare, submit per request) for min(N, 32) requests and compares the two.
  --batch B, --seq T    sequences per request (default 1) and tokens per
                        sequence (default 16)
  --device SEL          a device index or a name fragment, as `hrx devices`
                        lists them (default: HRX_DEVICE, then the first GPU,
                        then a CPU device such as lavapipe)
  --weights FILE        load the model from a safetensors file instead of
                        seeding it (names and shapes must fit the config)
  --seed SEED           seed of the weights and of the request tokens (default 0)
  --save-weights FILE   write the weights the flags select as safetensors
                        (F32) and exit without running
  --quiet               no progress bar";

/// `hrx demo ...`
#[derive(Clone, Debug, PartialEq)]
pub struct DemoArgs {
    /// Concurrent tokio clients.
    pub clients: usize,
    /// Slots of the prepared pool.
    pub slots: usize,
    /// Requests served through the pool.
    pub requests: usize,
    /// Sequences per request; `None` keeps the model config's default.
    pub batch: Option<usize>,
    /// Tokens per sequence; `None` keeps the model config's default.
    pub seq: Option<usize>,
    /// Device index or name fragment.
    pub device: Option<String>,
    /// Safetensors file to load the weights from.
    pub weights: Option<PathBuf>,
    /// Where to write the selected weights (then exit).
    pub save_weights: Option<PathBuf>,
    /// Seed of the weights and the request tokens.
    pub seed: u64,
    /// No progress bar.
    pub quiet: bool,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            clients: 8,
            slots: 4,
            requests: 256,
            batch: None,
            seq: None,
            device: None,
            weights: None,
            save_weights: None,
            seed: 0,
            quiet: false,
        }
    }
}

/// Parse the arguments after `demo`.
pub fn parse_demo(args: &[String]) -> Result<DemoArgs, String> {
    let mut demo = DemoArgs::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--clients" => demo.clients = count("--clients", &value("--clients")?)?,
            "--slots" => demo.slots = count("--slots", &value("--slots")?)?,
            "--requests" => demo.requests = count("--requests", &value("--requests")?)?,
            "--batch" => demo.batch = Some(count("--batch", &value("--batch")?)?),
            "--seq" => demo.seq = Some(count("--seq", &value("--seq")?)?),
            "--device" => demo.device = Some(nonempty("--device", value("--device")?)?),
            "--weights" => {
                demo.weights = Some(PathBuf::from(nonempty("--weights", value("--weights")?)?))
            }
            "--save-weights" => {
                demo.save_weights = Some(PathBuf::from(nonempty(
                    "--save-weights",
                    value("--save-weights")?,
                )?))
            }
            "--seed" => {
                let v = value("--seed")?;
                demo.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: `{v}` is not a non-negative integer"))?;
            }
            "--quiet" | "-q" => demo.quiet = true,
            other if other.starts_with('-') => return Err(format!("unknown option `{other}`")),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if demo.weights.is_some() && demo.save_weights.is_some() {
        return Err("--weights and --save-weights exclude each other".into());
    }
    Ok(demo)
}

/// A positive count; zero clients, slots or requests would make an empty demo.
fn count(name: &str, text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err(format!("{name} must be at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{name}: `{text}` is not a positive integer")),
    }
}

fn nonempty(name: &str, text: String) -> Result<String, String> {
    if text.trim().is_empty() {
        Err(format!("{name} needs a non-empty value"))
    } else {
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn defaults_and_every_flag() {
        assert_eq!(parse_demo(&[]).unwrap(), DemoArgs::default());
        let d = parse_demo(&s(&[
            "--clients",
            "3",
            "--slots",
            "2",
            "--requests",
            "9",
            "--batch",
            "2",
            "--seq",
            "8",
            "--device",
            "llvm",
            "--weights",
            "w.st",
            "--seed",
            "7",
            "-q",
        ]))
        .unwrap();
        assert_eq!((d.clients, d.slots, d.requests), (3, 2, 9));
        assert_eq!(
            (d.batch, d.seq, d.seed, d.quiet),
            (Some(2), Some(8), 7, true)
        );
        assert_eq!(d.device.as_deref(), Some("llvm"));
        assert_eq!(d.weights, Some(PathBuf::from("w.st")));
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for bad in [
            &["--clients"][..],
            &["--clients", "0"],
            &["--slots", "-1"],
            &["--requests", "many"],
            &["--seed", "-3"],
            &["--device", ""],
            &["--frobnicate"],
            &["extra"],
            &["--weights", "a", "--save-weights", "b"],
        ] {
            assert!(parse_demo(&s(bad)).is_err(), "{bad:?}");
        }
    }
}
