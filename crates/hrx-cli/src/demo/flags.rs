//! The flags of `hrx demo`, declared with clap: the doc comments below are
//! the help text.

use crate::args::{at_most, nonempty, positive};
use clap::Args;
use std::path::{Path, PathBuf};

/// Clients of the toy demo unless `--clients` says otherwise.
pub const TOY_CLIENTS: usize = 8;
/// Clients of a model directory's demo unless `--clients` says otherwise.
pub const MODEL_CLIENTS: usize = 16;

/// Most concurrent clients `--clients` accepts (each is a tokio task).
pub const MAX_CLIENTS: usize = 4096;
/// Most slots `--slots` accepts (each holds its own activations).
pub const MAX_SLOTS: usize = 1024;
/// Most requests `--requests` (or sentences `--sentences`) accepts: each
/// keeps its CPU reference in memory until the check.
pub const MAX_REQUESTS: usize = 1_000_000;

/// What `hrx demo` serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DemoModel {
    /// `toy`: the small seeded transformer, no files needed.
    Toy,
    /// A sentence-encoder model directory (config.json, tokenizer.json,
    /// model.safetensors).
    Dir(PathBuf),
}

impl DemoModel {
    /// `toy`, else a directory (write `./toy` for a directory named toy).
    fn parse(text: &str) -> Result<DemoModel, String> {
        match text {
            "toy" => Ok(DemoModel::Toy),
            "" => Err("needs `toy` or a model directory".into()),
            dir => Ok(DemoModel::Dir(PathBuf::from(dir))),
        }
    }
}

/// `hrx demo --model <toy|DIR> ...`
#[derive(Clone, Debug, PartialEq, Args)]
#[command(after_help = "\
With --model toy: serves N requests of a small transformer (seeded, or loaded with
--weights) through the pool, checks every output against its CPU reference, then
runs the naive path (allocate, record, prepare and submit per request) for
min(N, 32) requests and compares the two.
With --model DIR: embeds N sentences with the sentence encoder in DIR (config.json,
tokenizer.json, model.safetensors) from M concurrent clients through the embedder's
pools, then a sample one at a time through the naive path (a pool prepared per
sentence), and compares the two. Every embedding is checked: against --reference
(token ids identical, cosine >= 0.99999, max abs diff <= 1e-4) when given, else
against the naive path; and the published pair cosine of all-MiniLM-L6-v2.

Exit codes: 0 every output matched, 1 a mismatch or a runtime error, 2 usage error.")]
pub struct DemoArgs {
    /// `toy` for the built-in small transformer, or a sentence-encoder model
    /// directory (write `./toy` for a directory named toy).
    #[arg(long, value_name = "toy|DIR", value_parser = DemoModel::parse)]
    pub model: DemoModel,
    /// Concurrent tokio clients [default: 8 with toy, 16 with a model
    /// directory].
    #[arg(long = "clients", value_name = "M", value_parser = at_most::<MAX_CLIENTS>)]
    pub clients: Option<usize>,
    /// Slots of the prepared pool.
    #[arg(long, value_name = "S", default_value_t = 4, value_parser = at_most::<MAX_SLOTS>)]
    pub slots: usize,
    /// A device index or a name fragment, as `hrx devices` lists them
    /// [default: HRX_DEVICE, then the first GPU, then a CPU device such as
    /// lavapipe].
    #[arg(long, value_name = "SEL", value_parser = nonempty)]
    pub device: Option<String>,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,

    /// Requests served through the pool.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 256,
        value_parser = at_most::<MAX_REQUESTS>,
        help_heading = "With --model toy"
    )]
    pub requests: usize,
    /// Sequences per request [default: 1].
    #[arg(long, value_name = "B", value_parser = positive, help_heading = "With --model toy")]
    pub batch: Option<usize>,
    /// Tokens per sequence [default: 16].
    #[arg(long, value_name = "T", value_parser = positive, help_heading = "With --model toy")]
    pub seq: Option<usize>,
    /// Load the weights from a safetensors file instead of seeding them
    /// (names and shapes must fit the config).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "save_weights",
        help_heading = "With --model toy"
    )]
    pub weights: Option<PathBuf>,
    /// Write the weights the flags select as safetensors (F32) and exit
    /// without running.
    #[arg(long, value_name = "FILE", help_heading = "With --model toy")]
    pub save_weights: Option<PathBuf>,
    /// Seed of the weights and of the request tokens.
    #[arg(long, default_value_t = 0, help_heading = "With --model toy")]
    pub seed: u64,

    /// A reference.json of expected embeddings to check the outputs
    /// against.
    #[arg(long, value_name = "FILE", help_heading = "With --model DIR")]
    pub reference: Option<PathBuf>,
    /// Sentences to embed [default: 96: every sentence of the reference,
    /// or of the built-in set, once, then short ones again].
    #[arg(long, value_name = "N", value_parser = at_most::<MAX_REQUESTS>, help_heading = "With --model DIR")]
    pub sentences: Option<usize>,
}

impl DemoArgs {
    /// The model directory, unless the model is the toy.
    pub fn model_dir(&self) -> Option<&Path> {
        match &self.model {
            DemoModel::Toy => None,
            DemoModel::Dir(dir) => Some(dir),
        }
    }

    /// `--clients`, else the model's default ([`TOY_CLIENTS`] or
    /// [`MODEL_CLIENTS`]).
    pub fn clients(&self) -> usize {
        self.clients.unwrap_or(match self.model {
            DemoModel::Toy => TOY_CLIENTS,
            DemoModel::Dir(_) => MODEL_CLIENTS,
        })
    }
}

impl Default for DemoArgs {
    /// The toy demo with every default, as `hrx demo --model toy` parses.
    fn default() -> Self {
        DemoArgs {
            model: DemoModel::Toy,
            clients: None,
            slots: 4,
            device: None,
            quiet: false,
            requests: 256,
            batch: None,
            seq: None,
            weights: None,
            save_weights: None,
            seed: 0,
            reference: None,
            sentences: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Demo {
        #[command(flatten)]
        args: DemoArgs,
    }

    fn parse_demo(args: &[&str]) -> Result<DemoArgs, clap::Error> {
        Demo::try_parse_from(std::iter::once("demo").chain(args.iter().copied())).map(|d| d.args)
    }

    #[test]
    fn defaults_and_every_flag() {
        let toy = parse_demo(&["--model", "toy"]).unwrap();
        assert_eq!(toy, DemoArgs::default());
        assert_eq!((toy.clients(), toy.model_dir()), (TOY_CLIENTS, None));
        let d = parse_demo(&[
            "--model",
            "toy",
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
        ])
        .unwrap();
        assert_eq!((d.clients(), d.slots, d.requests), (3, 2, 9));
        assert_eq!(
            (d.batch, d.seq, d.seed, d.quiet),
            (Some(2), Some(8), 7, true)
        );
        assert_eq!(d.device.as_deref(), Some("llvm"));
        assert_eq!(d.weights, Some(PathBuf::from("w.st")));
    }

    #[test]
    fn a_model_directory_and_its_flags() {
        let d = parse_demo(&[
            "--model",
            "models/minilm",
            "--reference",
            "r.json",
            "--sentences",
            "5",
        ])
        .unwrap();
        assert_eq!(d.model_dir(), Some(Path::new("models/minilm")));
        assert_eq!(d.clients(), MODEL_CLIENTS);
        assert_eq!(d.reference, Some(PathBuf::from("r.json")));
        assert_eq!(d.sentences, Some(5));
        let local = parse_demo(&["--model", "./toy"]).unwrap();
        assert_eq!(local.model_dir(), Some(Path::new("./toy")));
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for bad in [
            &[][..],
            &["--model", ""],
            &["--model", "toy", "--clients"],
            &["--model", "toy", "--clients", "0"],
            &["--model", "toy", "--slots", "-1"],
            &["--model", "toy", "--requests", "many"],
            &["--model", "toy", "--seed", "-3"],
            &["--model", "toy", "--device", ""],
            &["--model", "toy", "--frobnicate"],
            &["--model", "toy", "extra"],
            &["--model", "toy", "--weights", "a", "--save-weights", "b"],
            &["--model", "m", "--sentences", "0"],
        ] {
            let error = parse_demo(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}: {error}");
        }
    }
}
