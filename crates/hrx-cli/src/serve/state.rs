//! What every handler shares: the embedding replicas and the text
//! generator (either may be absent), the models' names, the limits, the
//! API key, the counters and the draining flag.

use super::{busy_poll::Activity, errors::ApiError, metrics::Metrics, request::Limits};
use hrx::models::{embed::Replicas, llama::Generator};
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// The state behind every route.
pub type Shared = Arc<AppState>;

#[derive(Debug)]
pub struct AppState {
    /// The embedding model: its name (its folder's name) and replicas.
    pub embeddings: Option<(String, Replicas)>,
    /// The text-generation model: its name (the file's name without
    /// `.gguf`) and generator.
    pub generation: Option<(String, Arc<Generator>)>,
    /// When the model was loaded, in seconds since the Unix epoch.
    pub created: u64,
    pub limits: Limits,
    /// Required as `Authorization: Bearer KEY` on /v1 routes when set.
    pub api_key: Option<String>,
    pub metrics: Metrics,
    /// When requests last began or ended, for the busy poller.
    pub activity: Activity,
    draining: AtomicBool,
}

impl AppState {
    pub fn new(
        embeddings: Option<(String, Replicas)>,
        generation: Option<(String, Arc<Generator>)>,
        max_inputs: usize,
        api_key: Option<String>,
        activity: Activity,
    ) -> Self {
        let limits = embeddings.as_ref().map_or(
            Limits {
                max_inputs,
                max_tokens: 0,
                vocab_size: 0,
                dimensions: 0,
            },
            |(_, replicas)| {
                let config = replicas.config();
                Limits {
                    max_inputs,
                    max_tokens: config.max_seq_length,
                    vocab_size: config.vocab_size,
                    dimensions: config.hidden,
                }
            },
        );
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        AppState {
            metrics: Metrics::new(embeddings.as_ref().map_or(0, |(_, r)| r.len())),
            embeddings,
            generation,
            created,
            limits,
            api_key,
            activity,
            draining: AtomicBool::new(false),
        }
    }

    /// The time now, in seconds since the Unix epoch (answers' `created`).
    pub fn created_now(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(self.created, |d| d.as_secs())
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
        !self.is_draining()
            && self
                .embeddings
                .as_ref()
                .is_none_or(|(_, r)| r.healthy() > 0)
    }

    /// The embedding replicas, if the request names the embedding model.
    pub fn embedding_model(&self, model: &str) -> Result<&Replicas, ApiError> {
        match &self.embeddings {
            Some((name, replicas)) if name == model => Ok(replicas),
            _ => Err(ApiError::model_not_found(model)),
        }
    }

    /// The generator, if the request names the text-generation model.
    pub fn generation_model(&self, model: &str) -> Result<&Arc<Generator>, ApiError> {
        match &self.generation {
            Some((name, generator)) if name == model => Ok(generator),
            _ => Err(ApiError::model_not_found(model)),
        }
    }

    /// The names of the served models.
    pub fn model_names(&self) -> impl Iterator<Item = &str> {
        self.embeddings
            .iter()
            .map(|(name, _)| name.as_str())
            .chain(self.generation.iter().map(|(name, _)| name.as_str()))
    }
}
