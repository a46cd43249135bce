//! The two ways the same requests are served: over HTTP to `hrx serve`
//! (OpenAI embeddings requests, one sentence each, every answer parsed and
//! checked the way a client would), and through the library in this
//! process (`SentenceEmbedder::embed_async`, the same sentences).

use super::load::Call;
use base64::Engine as _;
use hrx_models::embed::SentenceEmbedder;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::{sync::Arc, time::Duration};

/// How the server writes embeddings in its answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Little-endian f32 bytes in base64 (what the official OpenAI client
    /// asks for by default).
    Base64,
    /// A JSON array of numbers.
    Float,
}

impl Encoding {
    pub fn parse(text: &str) -> Result<Encoding, String> {
        match text {
            "base64" => Ok(Encoding::Base64),
            "float" => Ok(Encoding::Float),
            other => Err(format!("--encoding {other}: expected base64 or float")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Base64 => "base64",
            Encoding::Float => "float",
        }
    }
}

/// A request of one sentence.
#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: [&'a str; 1],
    encoding_format: &'static str,
}

/// The answer, read straight into the form the request asked for (an
/// untagged enum would buffer every vector before choosing).
#[derive(Deserialize)]
struct Answer<V> {
    data: Vec<Item<V>>,
}

#[derive(Deserialize)]
struct Item<V> {
    index: usize,
    embedding: V,
}

/// The one item of an answer: its index and its embedding.
fn only<V: DeserializeOwned>(bytes: &[u8]) -> Result<(usize, V), String> {
    let answer: Answer<V> =
        serde_json::from_slice(bytes).map_err(|e| format!("unreadable answer: {e}"))?;
    let [item] = <[Item<V>; 1]>::try_from(answer.data)
        .map_err(|data| format!("{} embeddings for one input", data.len()))?;
    Ok((item.index, item.embedding))
}

/// What the HTTP side needs to build and check a request.
pub struct Http {
    client: reqwest::Client,
    /// Parsed once: every request posts to it.
    url: reqwest::Url,
    model: String,
    encoding: Encoding,
    dimensions: usize,
    sentences: Arc<Vec<String>>,
}

impl Http {
    pub fn new(
        url: String,
        model: String,
        encoding: Encoding,
        dimensions: usize,
        sentences: Arc<Vec<String>>,
    ) -> Result<Http, String> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let url = reqwest::Url::parse(&url).map_err(|e| format!("{url}: {e}"))?;
        Ok(Http {
            client,
            url,
            model,
            encoding,
            dimensions,
            sentences,
        })
    }

    /// Embed sentence `index` (modulo the set) over HTTP.
    pub async fn embed(&self, index: usize) -> Result<Vec<f32>, String> {
        let text = &self.sentences[index % self.sentences.len()];
        let body = Request {
            model: &self.model,
            input: [text],
            encoding_format: self.encoding.as_str(),
        };
        let response = self
            .client
            .post(self.url.clone())
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("POST {}: {e}", self.url))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            ));
        }
        let (index, vector) = match self.encoding {
            Encoding::Float => only::<Vec<f32>>(&bytes)?,
            Encoding::Base64 => {
                let (index, text) = only::<String>(&bytes)?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| format!("bad base64: {e}"))?;
                let vector = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                (index, vector)
            }
        };
        if index != 0 || vector.len() != self.dimensions {
            return Err(format!(
                "an answer of index {} with {} values, expected index 0 with {}",
                index,
                vector.len(),
                self.dimensions
            ));
        }
        Ok(vector)
    }

    /// The client this side sends with.
    pub fn client(&self) -> reqwest::Client {
        self.client.clone()
    }

    /// The load generator's view: one checked request.
    pub fn call(self: &Arc<Self>) -> Call {
        let http = Arc::clone(self);
        Arc::new(move |index| {
            let http = Arc::clone(&http);
            Box::pin(async move { http.embed(index).await.map(drop) })
        })
    }
}

/// The floor under every HTTP request: `GET /health` on the same server
/// with the same client (no body, no model), answered 200.
pub fn health_call(client: reqwest::Client, url: String) -> Call {
    Arc::new(move |_| {
        let (client, url) = (client.clone(), url.clone());
        Box::pin(async move {
            let response = client
                .get(&url)
                .send()
                .await
                .map_err(|e| format!("GET {url}: {e}"))?;
            let status = response.status();
            response
                .bytes()
                .await
                .map_err(|e| format!("GET {url}: {e}"))?;
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("GET {url}: {status}"))
            }
        })
    })
}

/// The server's own count of its embeddings answers and the seconds it
/// spent on them (from `GET /metrics`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerTime {
    answers: f64,
    seconds: f64,
}

impl ServerTime {
    /// Read the server's counters.
    pub async fn read(client: &reqwest::Client, url: &str) -> Result<ServerTime, String> {
        let text = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?
            .text()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let value = |name: &str| {
            let prefix = format!("{name}{{route=\"/v1/embeddings\"}} ");
            text.lines()
                .find_map(|line| line.strip_prefix(prefix.as_str()))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(ServerTime {
            answers: value("hrx_http_request_duration_seconds_count"),
            seconds: value("hrx_http_request_duration_seconds_sum"),
        })
    }

    /// The mean milliseconds inside the server of the answers since
    /// `earlier`: the time the client saw, less the round trip and the
    /// client's own work.
    pub fn mean_ms_since(&self, earlier: ServerTime) -> Option<f64> {
        let answers = self.answers - earlier.answers;
        (answers > 0.0).then(|| 1e3 * (self.seconds - earlier.seconds) / answers)
    }
}

/// The library side: the same sentences through `embed_async`.
pub struct Library {
    pub embedder: SentenceEmbedder,
    pub sentences: Arc<Vec<String>>,
}

impl Library {
    /// Embed sentence `index` (modulo the set) in this process.
    pub async fn embed(&self, index: usize) -> Result<Vec<f32>, String> {
        let text = self.sentences[index % self.sentences.len()].as_str();
        let mut answers = self
            .embedder
            .embed_async(&[text])
            .await
            .map_err(|e| format!("embed_async: {e}"))?;
        let vector = answers.pop().map(|e| e.vector).unwrap_or_default();
        if vector.len() != self.embedder.dimensions() {
            return Err(format!("an embedding of {} values", vector.len()));
        }
        Ok(vector)
    }

    /// The load generator's view: one checked request.
    pub fn call(self: &Arc<Self>) -> Call {
        let library = Arc::clone(self);
        Arc::new(move |index| {
            let library = Arc::clone(&library);
            Box::pin(async move { library.embed(index).await.map(drop) })
        })
    }
}

/// The cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}
