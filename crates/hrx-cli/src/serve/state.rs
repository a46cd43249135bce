//! What every handler shares: the replicas, the model's name, the limits,
//! the API key, the counters and the draining flag.

use super::{metrics::Metrics, request::Limits};
use hrx::models::embed::Replicas;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// The state behind every route.
pub type Shared = Arc<AppState>;

#[derive(Debug)]
pub struct AppState {
    pub replicas: Replicas,
    /// The served model's name (its folder's name).
    pub model: String,
    /// When the model was loaded, in seconds since the Unix epoch.
    pub created: u64,
    pub limits: Limits,
    /// Required as `Authorization: Bearer KEY` on /v1 routes when set.
    pub api_key: Option<String>,
    pub metrics: Metrics,
    draining: AtomicBool,
}

impl AppState {
    pub fn new(
        replicas: Replicas,
        model: String,
        max_inputs: usize,
        api_key: Option<String>,
    ) -> Self {
        let config = replicas.config();
        let limits = Limits {
            max_inputs,
            max_tokens: config.max_seq_length,
            vocab_size: config.vocab_size,
            dimensions: config.hidden,
        };
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        AppState {
            metrics: Metrics::new(replicas.len()),
            replicas,
            model,
            created,
            limits,
            api_key,
            draining: AtomicBool::new(false),
        }
    }

    /// Whether shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Begin shutdown: refuse new work, answer what was accepted.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Ready for traffic: the model is loaded and its pools prepared (the
    /// server listens only after that), a device is healthy, and the
    /// server is not draining.
    pub fn is_ready(&self) -> bool {
        !self.is_draining() && self.replicas.healthy() > 0
    }
}
