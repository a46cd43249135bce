//! The flags of `hrx serve`, declared with clap: the doc comments below
//! are the help text.

use crate::args::{FloatChoice, at_most, nonempty, positive};
use clap::Args;
use std::{path::PathBuf, time::Duration};

/// `hrx serve --model DIR ...`
#[derive(Clone, Debug, PartialEq, Eq, Args)]
#[command(after_help = "\
Endpoints: POST /v1/embeddings (with --model), POST /v1/completions and
POST /v1/chat/completions (with --llm; `stream: true` answers server-sent
events), all OpenAI-compatible; GET /v1/models, GET /health (liveness),
GET /ready (readiness), GET /metrics (Prometheus text format).
Prints `listening on http://ADDR` on stdout once every pool is prepared.
SIGTERM or ctrl-c: stop accepting, answer the accepted requests, exit 0.

Exit codes: 0 shut down cleanly, 1 a load, bind or runtime error, 2 usage error.")]
pub struct ServeArgs {
    /// The model directory: config.json, tokenizer.json and
    /// model.safetensors of a BERT-style sentence encoder. The folder's name
    /// is the model's name in requests.
    #[arg(long, value_name = "DIR", required_unless_present = "llm")]
    pub model: Option<PathBuf>,
    /// A text-generation model: a llama-family GGUF file, served on
    /// /v1/completions and /v1/chat/completions under its file name
    /// without `.gguf`. It runs on the first selected device.
    #[arg(long, value_name = "FILE.gguf")]
    pub llm: Option<PathBuf>,
    /// Sequences the text-generation model runs at once (continuous
    /// batching; each holds a key/value cache slot).
    #[arg(long, value_name = "S", default_value_t = 8, value_parser = at_most::<4096>)]
    pub llm_slots: usize,
    /// Positions each sequence's cache holds (prompt plus new tokens).
    #[arg(long, value_name = "C", default_value_t = 2048, value_parser = at_most::<1048576>)]
    pub llm_context: usize,
    /// Token rows of the text-generation model's prompt step.
    #[arg(long, value_name = "R", default_value_t = 128, value_parser = at_most::<16384>)]
    pub llm_prefill_rows: usize,
    /// The text-generation model's key/value cache element type.
    #[arg(long, value_enum, default_value_t = FloatChoice::F32)]
    pub llm_kv_cache: FloatChoice,
    /// The element type of the activations between the text-generation
    /// model's kernels.
    #[arg(long, value_enum, default_value_t = FloatChoice::F32)]
    pub llm_activations: FloatChoice,
    /// The address to listen on.
    #[arg(long, value_name = "H", default_value = "127.0.0.1", value_parser = nonempty)]
    pub host: String,
    /// The port to listen on (0 picks a free port).
    #[arg(long, value_name = "P", default_value_t = 8080)]
    pub port: u16,
    /// Slots per length bucket of each device (batches in flight at once).
    #[arg(long, value_name = "S", default_value_t = 2, value_parser = positive)]
    pub slots: usize,
    /// Sentences per slot submission (cut per length bucket to what the
    /// device can bind).
    #[arg(long, value_name = "B", default_value_t = 16, value_parser = positive)]
    pub max_batch: usize,
    /// How long a batch waits for more sentences after its first, in
    /// microseconds (0: a batch takes what queued while the slots were busy;
    /// beside a running batch of its bucket, a batch also waits to be
    /// full or for that batch's end).
    #[arg(long, value_name = "W", default_value_t = 0)]
    pub batch_window_us: u64,
    /// A device index or a name fragment, as `hrx devices` lists them, or
    /// `all`; repeat it for one replica per device (the same device twice
    /// makes two replicas on it) [default: HRX_DEVICE, then the first GPU,
    /// then a CPU device such as lavapipe].
    #[arg(long = "device", value_name = "SEL", value_parser = nonempty)]
    pub devices: Vec<String>,
    /// Require `Authorization: Bearer KEY` on /v1 routes (/health, /ready
    /// and /metrics stay open).
    #[arg(long, value_name = "KEY", value_parser = nonempty)]
    pub api_key: Option<String>,
    /// Run the encoder in f16 (weights and activations; f32 accumulation)
    /// instead of f32.
    #[arg(long)]
    pub f16: bool,
    /// Sentences each length bucket of each device queues before requests
    /// are refused with 429.
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = positive)]
    pub queue: usize,
    /// Inputs one request may carry.
    #[arg(long, value_name = "N", default_value_t = 2048, value_parser = positive)]
    pub max_inputs: usize,
    /// Largest request body, in bytes (larger ones get 413).
    #[arg(long, value_name = "N", default_value_t = 4 << 20, value_parser = positive)]
    pub max_body_bytes: usize,
    /// Threads of the server's runtime (HTTP, JSON, tokenizing; large
    /// bodies, texts and answers go to blocking threads) [default: 1 where
    /// the server busy-polls, else one per CPU core].
    #[arg(long, value_name = "N", value_parser = at_most::<1024>)]
    pub http_threads: Option<usize>,
    /// After each request begins or ends, keep one server thread polling
    /// the sockets and the answers for this many microseconds instead of
    /// sleeping (one core busy while requests come often; 0: never)
    /// [default: 2000 where every device is a GPU, else 0].
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub busy_poll_us: Option<u64>,
    /// How long a request may take, in milliseconds, before it is answered
    /// 504 and its sentences are dropped.
    #[arg(long, value_name = "T", default_value_t = 60_000, value_parser = positive_u64)]
    pub timeout_ms: u64,
    /// For tests only (cargo feature `testing`): open replica N's runtime
    /// with fault injection and lose its device once it is loaded, so that
    /// its first request fails over to another replica.
    #[cfg(feature = "testing")]
    #[arg(long, value_name = "N", hide = true)]
    pub test_lose_device: Option<usize>,
}

impl ServeArgs {
    /// The batch window.
    pub fn batch_window(&self) -> Duration {
        Duration::from_micros(self.batch_window_us)
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

fn positive_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a positive integer")),
    }
}

#[cfg(test)]
mod tests {
    use crate::args::{Cli, Command, FloatChoice};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("hrx").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn defaults_and_repeated_devices() {
        let Command::Serve(s) = parse(&["serve", "--model", "m"]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (s.host.as_str(), s.port, s.slots, s.max_batch),
            ("127.0.0.1", 8080, 2, 16)
        );
        assert_eq!((s.queue, s.max_inputs, s.timeout_ms), (4096, 2048, 60_000));
        assert!(s.devices.is_empty() && s.api_key.is_none() && !s.f16);
        assert!(s.llm.is_none() && s.model.is_some());
        assert_eq!((s.http_threads, s.busy_poll_us), (None, None));
        let Command::Serve(s) = parse(&["serve", "--llm", "m.gguf"]).unwrap() else {
            panic!()
        };
        assert!(s.model.is_none());
        assert_eq!(
            (s.llm_slots, s.llm_context, s.llm_prefill_rows),
            (8, 2048, 128)
        );
        assert_eq!(s.llm_kv_cache, FloatChoice::F32);
        assert_eq!(s.llm_activations, FloatChoice::F32);
        let Command::Serve(s) = parse(&[
            "serve",
            "--model",
            "m",
            "--device",
            "0",
            "--device",
            "lavapipe",
            "--port",
            "0",
            "--api-key",
            "k",
            "--batch-window-us",
            "500",
            "--http-threads",
            "2",
            "--busy-poll-us",
            "0",
        ])
        .unwrap() else {
            panic!()
        };
        assert_eq!(s.devices, ["0", "lavapipe"]);
        assert_eq!((s.port, s.api_key.as_deref()), (0, Some("k")));
        assert_eq!(s.batch_window().as_micros(), 500);
        assert_eq!((s.http_threads, s.busy_poll_us), (Some(2), Some(0)));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for bad in [
            &["serve"][..],
            &["serve", "--model", "m", "--slots", "0"],
            &["serve", "--model", "m", "--port", "70000"],
            &["serve", "--model", "m", "--timeout-ms", "0"],
            &["serve", "--model", "m", "--device", ""],
            &["serve", "--model", "m", "--api-key", " "],
            &["serve", "--llm", "m.gguf", "--llm-slots", "0"],
            &["serve", "--model", "m", "--http-threads", "0"],
            &["serve", "--model", "m", "--busy-poll-us", "2000000"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }
}
