//! Graceful shutdown: SIGTERM or ctrl-c (SIGINT) starts draining.
//! `/ready` then answers 503, new embedding requests 503, the listener
//! closes, and the server exits once every accepted request is answered.

use super::state::Shared;
use hrx::{Error, Result};

/// The shutdown signals, registered before the server reports that it
/// listens (so that an early SIGTERM drains instead of killing).
pub struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Register the handlers (inside the tokio runtime).
    pub fn register() -> Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let register =
                |kind| signal(kind).map_err(|e| Error::msg(format!("cannot handle signals: {e}")));
            Ok(Signals {
                terminate: register(SignalKind::terminate())?,
                interrupt: register(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Wait for a signal, then mark `state` draining.
    pub async fn drained(mut self, state: Shared) {
        self.wait().await;
        state.start_draining();
        eprintln!("hrx serve: shutting down: answering the accepted requests");
    }

    #[cfg(unix)]
    async fn wait(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }

    #[cfg(not(unix))]
    async fn wait(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
