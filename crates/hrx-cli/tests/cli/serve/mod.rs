//! What the `serve_*` tests share: the real `hrx serve` binary started on
//! port 0 (with `HRX_VALIDATION=1`), an HTTP client, the MiniLM float64
//! reference, metrics scraping, cosine similarity and the `openai` Python
//! package.
//!
//! The model folder is fetched by `cargo xtask models` into
//! `target/models/all-MiniLM-L6-v2` (`HRX_MINILM_DIR` names another).
#![allow(dead_code)]

pub use hrx_test_support::{
    compare::cosine,
    models::{minilm_dir, smollm2_gguf, target_dir, workspace},
};
use serde::Deserialize;
use std::{
    io::{BufRead, BufReader, Read},
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex, OnceLock, mpsc},
    time::{Duration, Instant},
};

/// Held for their whole run by the tests that keep lavapipe busy for long
/// (the soak, text generation) and by the one whose check is a deadline
/// (`--timeout-ms`): one test binary runs them in parallel, and paired on
/// a small CPU they starve each other past the server's timeouts. Other
/// tests still run beside them.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The served model's name.
pub const MODEL: &str = "all-MiniLM-L6-v2";

/// How long a server may take to load and prepare its pools.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// The text-generation model's name in requests.
pub const LLM: &str = "SmolLM2-135M-Instruct.Q4_1";

/// The pinned version of the `openai` Python package.
pub const OPENAI: &str = "3.57.0";

/// The python of a virtual environment under `target/openai-venv` with
/// `openai==OPENAI` installed, created on first use (once per process:
/// tests that need it run in parallel).
pub fn python() -> PathBuf {
    static PYTHON: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut ready_python = PYTHON.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(python) = &*ready_python {
        return python.clone();
    }
    let venv = target_dir().join("openai-venv");
    let python = venv.join("bin/python");
    let check = format!("import openai, sys; sys.exit(openai.__version__ != '{OPENAI}')");
    let ready = || {
        Command::new(&python)
            .args(["-c", &check])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready() {
        let status = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()
            .expect("python3");
        assert!(
            status.success(),
            "python3 -m venv {} failed",
            venv.display()
        );
        let status = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", &format!("openai=={OPENAI}")])
            .status()
            .expect("pip");
        assert!(status.success(), "pip install openai=={OPENAI} failed");
        assert!(
            ready(),
            "openai {OPENAI} is not importable after installing it"
        );
    }
    *ready_python = Some(python.clone());
    python
}

#[derive(Deserialize)]
pub struct Reference {
    pub sentences: Vec<Sentence>,
}

#[derive(Deserialize)]
pub struct Sentence {
    pub text: String,
    pub ids: Vec<u32>,
    pub embedding: Vec<f32>,
}

/// The float64 reference embeddings of `hrx-models` (independent of hrx).
pub fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let path = workspace().join("crates/hrx-models/tests/reference/minilm/reference.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("reference.json"))
            .expect("parse")
    })
}

/// The reference sentences of at most `tokens` tokens (lavapipe is
/// slow), the empty one left out (the API refuses empty strings).
pub fn short_sentences(tokens: usize) -> Vec<&'static Sentence> {
    reference()
        .sentences
        .iter()
        .filter(|s| s.ids.len() <= tokens && !s.text.is_empty())
        .collect()
}

/// Assert `got` matches the reference embedding of `sentence`.
pub fn assert_close(got: &[f32], sentence: &Sentence) {
    let c = cosine(got, &sentence.embedding);
    assert!(c >= 0.99999, "cosine {c} for {:?}", sentence.text);
}

/// A running `hrx serve`; killed when dropped if it is still running.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Start `hrx serve --model DIR --port 0 EXTRA...` and wait until it
    /// listens.
    pub fn start(extra: &[&str]) -> Server {
        Self::launch("--model", minilm_dir(), extra)
    }

    /// Start `hrx serve --llm GGUF --port 0 EXTRA...` (SmolLM2) and wait
    /// until it listens.
    pub fn start_llm(extra: &[&str]) -> Server {
        Self::launch("--llm", smollm2_gguf(), extra)
    }

    fn launch(flag: &str, model: PathBuf, extra: &[&str]) -> Server {
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hrx"))
            .arg("serve")
            .arg(flag)
            .arg(model)
            .args(["--port", "0"])
            .args(extra)
            .env("HRX_VALIDATION", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hrx serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = err.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        let (sender, receiver) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(address) = line.strip_prefix("listening on ") {
                    let _ = sender.send(address.trim().to_string());
                }
            }
        });
        let mut server = Server {
            child,
            base: String::new(),
            stderr,
        };
        match receiver.recv_timeout(START_TIMEOUT) {
            Ok(base) => server.base = base,
            Err(_) => panic!("hrx serve {extra:?} did not start:\n{}", server.stderr()),
        }
        eprintln!(
            "hrx serve {extra:?} listening on {} after {:?}",
            server.base,
            started.elapsed()
        );
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The server's resident memory, from /proc.
    pub fn rss_bytes(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc");
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .expect("VmRSS");
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    }

    /// Send `signal` (a name for `kill`, such as `TERM`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Wait (at most `limit`) for the server to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "hrx serve did not exit:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        let response = client()
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics");
        assert_eq!(response.status(), 200);
        response.text().await.expect("metrics text")
    }

    /// Poll the metrics until `done` holds for them (at most `limit`).
    pub async fn metrics_until(&self, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.metrics().await;
            if done(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "metrics never settled:\n{text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sum of every series of `name` whose labels include `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            series_name == name
                && labels
                    .iter()
                    .all(|(k, v)| series_labels.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, value)| value.parse::<f64>().expect("metric value"))
        .sum()
}

/// A plain-HTTP client that no proxy setting can redirect.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(600))
        .build()
        .expect("client")
}

/// An answer: status, `Retry-After` (if any) and the JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: serde_json::Value,
}

impl Answer {
    /// The embeddings of a 200 answer, in order.
    pub fn embeddings(&self) -> Vec<Vec<f32>> {
        assert_eq!(self.status, 200, "{:?}", self.body);
        self.body["data"]
            .as_array()
            .expect("data")
            .iter()
            .enumerate()
            .map(|(i, item)| {
                assert_eq!(item["index"], i);
                assert_eq!(item["object"], "embedding");
                item["embedding"]
                    .as_array()
                    .expect("floats")
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    }

    /// Assert an OpenAI error object with `status` and `kind`, and return
    /// its message.
    pub fn assert_error(&self, status: u16, kind: &str) -> String {
        assert_eq!(self.status, status, "{:?}", self.body);
        let error = &self.body["error"];
        assert_eq!(error["type"], kind, "{:?}", self.body);
        assert!(
            error.get("param").is_some() && error.get("code").is_some(),
            "{:?}",
            self.body
        );
        error["message"].as_str().expect("message").to_string()
    }
}

/// Send `request` and read its answer.
pub async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("send");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = response.bytes().await.expect("body");
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{status}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    Answer {
        status,
        retry_after,
        body,
    }
}

/// `POST /v1/embeddings` with a JSON body.
pub async fn embed(client: &reqwest::Client, server: &Server, body: serde_json::Value) -> Answer {
    answer(client.post(server.url("/v1/embeddings")).json(&body)).await
}

/// `POST /v1/embeddings` of `texts` for the served model.
pub async fn embed_texts(client: &reqwest::Client, server: &Server, texts: &[&str]) -> Answer {
    embed(
        client,
        server,
        serde_json::json!({"model": MODEL, "input": texts}),
    )
    .await
}
