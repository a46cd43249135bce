//! The server under test: `hrx serve` started as its own process on a free
//! port, ready once it prints `listening on http://ADDR` (after every pool
//! is prepared), stopped with SIGTERM (it drains and exits) or killed if it
//! does not exit in time.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

/// How long loading and preparing every pool may take.
const START_TIMEOUT: Duration = Duration::from_secs(600);

/// A running `hrx serve`.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
}

/// The flags that shape the serving, shared with the library side.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub slots: usize,
    pub max_batch: usize,
    /// The server's `--busy-poll-us` (its own default where `None`).
    pub busy_poll_us: Option<u64>,
    /// The server's `--http-threads` (its own default where `None`).
    pub http_threads: Option<usize>,
}

impl Server {
    /// Start `hrx serve --model MODEL --port 0 --slots S --max-batch B`
    /// (and `--busy-poll-us US`, `--http-threads N` where given) and wait until it listens.
    pub fn start(hrx: &Path, model: &Path, shape: Shape) -> Result<Server, String> {
        let mut command = Command::new(hrx);
        command.arg("serve");
        if let Some(us) = shape.busy_poll_us {
            command.args(["--busy-poll-us", &us.to_string()]);
        }
        if let Some(threads) = shape.http_threads {
            command.args(["--http-threads", &threads.to_string()]);
        }
        let mut child = command
            .arg("--model")
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--slots", &shape.slots.to_string()])
            .args(["--max-batch", &shape.max_batch.to_string()])
            // A slow device under 256 clients must not turn into timeouts:
            // the benchmark measures latency, it does not bound it.
            .args(["--timeout-ms", "3600000"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", hrx.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut stderr = child.stderr.take().ok_or("no stderr")?;
        // The server's stderr goes to ours, so that its log stays visible.
        thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            eprint!("{text}");
        });
        let (sender, receiver) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(base) = line.strip_prefix("listening on ") {
                    let _ = sender.send(base.trim().to_string());
                }
            }
        });
        match receiver.recv_timeout(START_TIMEOUT) {
            Ok(base) => Ok(Server { child, base }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().map_err(|e| e.to_string())?;
                Err(format!("hrx serve did not start listening ({status})"))
            }
        }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGTERM, then wait for a clean exit (kill after 30 s).
    pub fn stop(mut self) -> Result<(), String> {
        let signalled = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if signalled {
            for _ in 0..300 {
                if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                    return if status.success() {
                        Ok(())
                    } else {
                        Err(format!("hrx serve exited with {status}"))
                    };
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err("hrx serve did not stop on SIGTERM; killed".into())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Only when `stop` was not reached (an error on the way).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
