//! Text generation with llama-architecture models from GGUF files.
//!
//! Design choices and contracts:
//!
//! - **Weights stay as the file has them.** Matrices are uploaded in
//!   their own format (F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
//!   Q5_K or Q6_K), packed once into the kernels' word layout (the
//!   K-quants' sub-block scales unpacked to f32); every matrix product
//!   dequantises as it reads.
//!   Norm weights are f32. Every constant comes from the metadata
//!   ([`LlamaConfig`]), so other llama-family files work too.
//! - **One graph, data for positions.** A step is a prepared graph over a
//!   fixed number of token rows; each row's token, cache slot and
//!   position are data written before the replay. Decode graphs come in
//!   tiers of 1, 2, 4, ... rows up to one row per cache slot, plus one of
//!   [`GeneratorOptions::prefill_rows`] rows for prompts; a step runs on
//!   the smallest that holds its rows, so one sequence does not pay for
//!   sixty-four. Nothing is recorded after loading.
//! - **Sequences keep their slot.** A generation holds one slot of the
//!   key/value cache (`[slots, kv_heads, context, head_dim]` per layer)
//!   from its first prompt row to its last token; the slot then returns to
//!   the free list. The cache holds [`GeneratorOptions::context`]
//!   positions per slot, and a request whose prompt plus new tokens would
//!   not fit is refused up front.
//! - **Continuous batching.** One thread runs steps back to back: every
//!   decoding sequence contributes one row, prompts fill the remaining
//!   rows (split across steps when long), new requests take free slots
//!   between steps and finished ones leave, so nobody waits for a batch
//!   to drain. A step is submitted after the previous one, so cache writes
//!   are ordered on the device.
//! - **A few bytes back per token.** The graph ends with an argmax, so a
//!   greedy step reads back 4 bytes per sequence. A step with sampled
//!   sequences then runs the device's top-k of their logits with the
//!   softmax denominator, and each draws on the host from its 64
//!   candidates ([`Sampling`]: seeded, so the same seed gives the same
//!   tokens); only a draw that reaches past them reads its whole row.
//! - **Streams, not callbacks.** [`Generator::generate`] returns a
//!   [`TokenStream`] of [`GenerationEvent`]s (async, blocking, or a
//!   `futures` stream). Dropping it cancels the generation; its slot is
//!   free after the current step. Requests beyond the cache slots wait in
//!   a bounded queue; past it, `generate` answers `Error::Busy`.
//!
//! The activations between kernels are f32 or f16 ([`ActivationFormat`]),
//! the caches f32 or f16 ([`CacheFormat`]); the residual stream and the
//! logits are f32.

mod sampling;
mod scheduler;
mod step;
mod stream;
mod weights;

pub use sampling::{MAX_TEMPERATURE, Sampling};
pub use stream::{FinishReason, GenerateRequest, Generation, GenerationEvent, TokenStream};

use crate::gguf::{GgufFile, LlamaConfig};
use crate::tokenizer::{BpeTokenizer, ChatMessage, ChatTemplate};
use hrx_core::{DeviceKind, Error, Result};
use hrx_inference::ModelContext;
use scheduler::{Command, Counters, Job, Steps};
use std::{
    path::Path,
    sync::{Arc, Mutex, atomic::Ordering, mpsc},
    thread::JoinHandle,
    time::Duration,
};
use step::{KvCache, StepGraph};
use weights::LlamaWeights;

/// How a [`Generator`] is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneratorOptions {
    /// Sequences generating at once: cache slots, and the rows of a
    /// decode step.
    pub sequences: usize,
    /// Positions each slot's cache holds (prompt plus new tokens); at most
    /// the model's context length.
    pub context: usize,
    /// Rows of the prompt step; prompts longer than this take several
    /// steps. At most `sequences` means no separate prompt step.
    pub prefill_rows: usize,
    /// Requests that may wait for a slot before `generate` answers
    /// `Error::Busy`.
    pub queue: usize,
    /// Sampled sequences draw from the device's top-k of their logits
    /// (with the softmax denominator), reading back a few hundred bytes;
    /// the whole row is read only for a draw that reaches past the
    /// candidates. `false` reads every sampled row back and draws on the
    /// host. Both draw the same tokens for a seed, but for the rounding of
    /// the device's denominator where the draw depends on it. Greedy
    /// sequences always take the device's argmax.
    pub sample_on_device: bool,
    /// The key/value caches' element type.
    pub cache: CacheFormat,
    /// The element type of the activations between the step's kernels.
    pub activations: ActivationFormat,
    /// How long the step loop polls a step's completion before sleeping
    /// in the driver, on a GPU. A sleeping thread wakes tens of
    /// microseconds after the step ends, and each decode step waits on
    /// the one before it, so the default polls through a whole step
    /// (5 ms, longer than a decode step of 64 sequences at 1,000
    /// positions) for one host core kept busy while generating. On a CPU
    /// device the host's cores run the steps, so the loop polls only as
    /// long as [`Completion::wait`](hrx_runtime::Completion::wait) does.
    pub spin_wait: Duration,
}

impl Default for GeneratorOptions {
    fn default() -> Self {
        GeneratorOptions {
            sequences: 4,
            context: 2048,
            prefill_rows: 64,
            queue: 256,
            sample_on_device: true,
            cache: CacheFormat::F32,
            activations: ActivationFormat::F32,
            spin_wait: Duration::from_millis(5),
        }
    }
}

/// How long the step loop polls a step on a device of `kind` (`None`:
/// `Completion::wait`'s short poll): a CPU device's steps run on the
/// host's cores, which polling would take from them.
fn step_spin(kind: DeviceKind, spin_wait: Duration) -> Option<Duration> {
    (kind != DeviceKind::Cpu).then_some(spin_wait)
}

/// How the key/value caches hold their values.
///
/// Activations, products and the softmax are f32 either way; f16 rounds
/// each key and value to nearest as it is stored, halving the caches'
/// memory (twice the slots or context in the same bytes) and the bytes
/// every attention step reads. Greedy tokens can then part from the f32
/// caches' where two candidates are nearly tied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheFormat {
    /// f32: the reference's values.
    #[default]
    F32,
    /// f16, on devices with 16-bit storage and f16 arithmetic (loading
    /// answers `Unsupported` elsewhere).
    F16,
}

impl CacheFormat {
    /// The caches' tensor element type.
    pub fn dtype(self) -> hrx_tensor::DType {
        match self {
            CacheFormat::F32 => hrx_tensor::DType::F32,
            CacheFormat::F16 => hrx_tensor::DType::F16,
        }
    }
}

/// How a step holds the activations between its kernels.
///
/// With f16, every row one kernel writes for the next is stored rounded
/// to nearest f16 and widened as it is read: the normalised rows (where a
/// norm has a dispatch of its own), the queries, keys and values, the
/// attention's output, the gate and up projections and the SwiGLU gate,
/// which halves their bytes. Arithmetic stays f32 (products accumulate in
/// f32, norms, rotary turns and the softmax compute in f32), and the
/// residual stream, the caches (unless [`CacheFormat::F16`]) and the
/// logits are f32. A decode step's products that normalise their input as
/// they read it take the f32 residual. Greedy tokens can then part from
/// f32's where two candidates are nearly tied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ActivationFormat {
    /// f32: the reference's values.
    #[default]
    F32,
    /// f16, on devices with 16-bit storage and f16 arithmetic, for models
    /// whose width is a multiple of 4 (loading answers `Unsupported`
    /// elsewhere).
    F16,
}

impl ActivationFormat {
    /// The activations' tensor element type.
    pub fn dtype(self) -> hrx_tensor::DType {
        match self {
            ActivationFormat::F32 => hrx_tensor::DType::F32,
            ActivationFormat::F16 => hrx_tensor::DType::F16,
        }
    }
}

/// The most sequences or prompt rows a generator accepts.
const MAX_ROWS: usize = 1 << 14;

/// Device usage and progress counters of a generator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GeneratorStats {
    /// Requests waiting for a cache slot.
    pub waiting: usize,
    /// Sequences holding a cache slot.
    pub active: usize,
    /// Steps run.
    pub steps: u64,
    /// Prompt tokens admitted.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Device bytes of the weights, the caches and the step graphs'
    /// activations.
    pub device_bytes: usize,
}

/// A llama model loaded on one device, generating for many callers at
/// once. Cheap to share behind an `Arc`; dropping it cancels what is left
/// and stops its thread.
pub struct Generator {
    config: LlamaConfig,
    tokenizer: Arc<BpeTokenizer>,
    chat: Option<ChatTemplate>,
    options: GeneratorOptions,
    commands: Mutex<mpsc::Sender<Command>>,
    counters: Arc<Counters>,
    device_bytes: usize,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("config", &self.config)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Generator {
    /// Opens the GGUF file at `path` and loads it on `context`.
    pub fn open(context: &ModelContext, path: &Path, options: GeneratorOptions) -> Result<Self> {
        let file = GgufFile::open(path)?;
        Self::load(context, &file, options)
    }

    /// Loads `file`: reads the constants, the tokenizer and the chat
    /// template, uploads the weights, allocates the caches, records the
    /// step graphs (compiling their kernels) and starts the thread.
    pub fn load(
        context: &ModelContext,
        file: &GgufFile,
        options: GeneratorOptions,
    ) -> Result<Self> {
        let config = LlamaConfig::from_gguf(file)?;
        check_options(&options, &config)?;
        let tokenizer = BpeTokenizer::from_gguf(file.metadata())?;
        if tokenizer.vocab_size() != config.vocab_size {
            return Err(Error::Message(format!(
                "the tokenizer has {} tokens, the model {}",
                tokenizer.vocab_size(),
                config.vocab_size
            )));
        }
        let chat = match file.metadata().get("tokenizer.chat_template") {
            Some(_) => Some(ChatTemplate::from_gguf(file.metadata())?),
            None => None,
        };
        let weights = LlamaWeights::upload(context, file, &config)?;
        let cache = KvCache::new(context, &config, &options)?;
        let graphs = scheduler::tiers(options.sequences, options.prefill_rows)
            .into_iter()
            .map(|rows| {
                let outputs = rows.min(options.sequences);
                StepGraph::new(
                    context,
                    (&config, &weights, &cache),
                    rows,
                    outputs,
                    &options,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let activations: usize = graphs.iter().map(|g| g.activation_bytes).sum();
        let device_bytes = weights.bytes + cache.bytes() + activations;
        let kind = context.runtime().gpu()?.target().kind;
        let steps = Steps {
            graphs,
            slots: options.sequences,
            eos: tokenizer.eos_id(),
            spin: step_spin(kind, options.spin_wait),
        };
        let tokenizer = Arc::new(tokenizer);
        let counters = Arc::new(Counters::default());
        let (sender, receiver) = mpsc::channel();
        let thread = {
            let (tokenizer, counters) = (Arc::clone(&tokenizer), Arc::clone(&counters));
            // The thread owns the graphs, the caches and the weights they
            // bind; they are released when it ends.
            let keep = (weights, cache);
            std::thread::Builder::new()
                .name("hrx-generate".into())
                .spawn(move || {
                    scheduler::run(steps, tokenizer, receiver, counters);
                    drop(keep);
                })
                .map_err(|e| Error::Message(format!("starting the generation thread: {e}")))?
        };
        Ok(Generator {
            config,
            tokenizer,
            chat,
            options,
            commands: Mutex::new(sender),
            counters,
            device_bytes,
            thread: Some(thread),
        })
    }

    /// The model's constants.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// How the generator is sized.
    pub fn options(&self) -> &GeneratorOptions {
        &self.options
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &BpeTokenizer {
        &self.tokenizer
    }

    /// The model's chat template, where the file has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }

    /// The ids of a text prompt (BOS where the file asks for it; special
    /// tokens written in the text are single tokens).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text)
    }

    /// The ids of a chat, rendered with the model's template and ending
    /// with the assistant's turn; `Unsupported` without a template.
    pub fn encode_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let template = self
            .chat
            .as_ref()
            .ok_or_else(|| Error::Unsupported("the model file has no chat template".into()))?;
        Ok(self.tokenizer.encode(&template.render(messages, true)))
    }

    /// Progress and device usage.
    pub fn stats(&self) -> GeneratorStats {
        let c = &self.counters;
        GeneratorStats {
            waiting: c.waiting.load(Ordering::Relaxed),
            active: c.active.load(Ordering::Relaxed),
            steps: c.steps.load(Ordering::Relaxed),
            prompt_tokens: c.prompt_tokens.load(Ordering::Relaxed),
            generated_tokens: c.generated_tokens.load(Ordering::Relaxed),
            device_bytes: self.device_bytes,
        }
    }

    /// Starts a generation. Checked first: a non-empty prompt of ids in
    /// the vocabulary, prompt plus `max_new_tokens` within the context,
    /// valid sampling settings and non-empty stop strings; then `Busy`
    /// when the queue is full.
    pub fn generate(&self, request: GenerateRequest) -> Result<TokenStream> {
        self.check(&request)?;
        let previous = self.counters.waiting.fetch_add(1, Ordering::Relaxed);
        if previous >= self.options.queue {
            self.counters.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Busy(format!(
                "{previous} generation requests are already waiting"
            )));
        }
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        let sent = self
            .commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Command::Generate(Job { request, events }));
        if sent.is_err() {
            self.counters.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Message("the generation thread has stopped".into()));
        }
        Ok(TokenStream { events: receiver })
    }

    fn check(&self, request: &GenerateRequest) -> Result<()> {
        if request.prompt.is_empty() {
            return Err(Error::Message("the prompt has no tokens".into()));
        }
        if let Some(bad) = request
            .prompt
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            return Err(Error::Message(format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                self.config.vocab_size
            )));
        }
        let total = request.prompt.len().saturating_add(request.max_new_tokens);
        if total > self.options.context {
            return Err(Error::Message(format!(
                "a prompt of {} tokens plus {} new tokens exceeds the context of {} tokens",
                request.prompt.len(),
                request.max_new_tokens,
                self.options.context
            )));
        }
        if request.stop.iter().any(String::is_empty) {
            return Err(Error::Message("a stop string is empty".into()));
        }
        request.sampling.check()
    }
}

/// The step graph of `rows` token rows for `file`'s model, recorded but
/// not prepared, with its inputs written: row `r` is token 0 of cache
/// slot `r` at `position` when `rows` fits the slots (decode), else
/// positions `0..rows` of slot 0 (a prompt). For profiling: each operation
/// of [`Graph::operations`](hrx_runtime::Graph) can be timed alone (with
/// the runtime's `inspect` feature). The weights and caches stay alive as
/// long as the graph.
pub fn record_step(
    context: &ModelContext,
    file: &GgufFile,
    options: GeneratorOptions,
    rows: usize,
    position: usize,
) -> Result<hrx_runtime::Graph> {
    let config = LlamaConfig::from_gguf(file)?;
    check_options(&options, &config)?;
    let weights = LlamaWeights::upload(context, file, &config)?;
    let cache = KvCache::new(context, &config, &options)?;
    let outputs = rows.min(options.sequences);
    let model = (&config, &weights, &cache);
    let activations = options.activations.dtype();
    let (graph, step) = StepGraph::record(context, model, (rows, outputs), activations)?;
    let rows: Vec<step::Row> = (0..rows)
        .map(|r| match rows <= options.sequences {
            true => step::Row {
                token: 0,
                slot: r,
                position: position.min(options.context - 1),
            },
            false => step::Row {
                token: 0,
                slot: 0,
                position: r.min(options.context - 1),
            },
        })
        .collect();
    let picks: Vec<usize> = (0..outputs).collect();
    step.write_inputs(&rows, &picks)?;
    Ok(graph)
}

fn check_options(options: &GeneratorOptions, config: &LlamaConfig) -> Result<()> {
    let within = |value: usize, limit: usize, what: &str| {
        if (1..=limit).contains(&value) {
            Ok(())
        } else {
            Err(Error::Message(format!(
                "{what} {value} is not from 1 to {limit}"
            )))
        }
    };
    within(options.sequences, MAX_ROWS, "sequences")?;
    within(options.prefill_rows, MAX_ROWS, "prefill rows")?;
    within(options.context, config.context_length, "context")?;
    Ok(())
}

impl Drop for Generator {
    fn drop(&mut self) {
        let commands = self.commands.lock().unwrap_or_else(|e| e.into_inner());
        let _ = commands.send(Command::Shutdown);
        drop(commands);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step loop polls through a step on a GPU and leaves a CPU
    /// device's cores to its steps.
    #[test]
    fn the_step_loop_polls_on_a_gpu_only() {
        let spin = GeneratorOptions::default().spin_wait;
        assert_eq!(spin, Duration::from_millis(5));
        for kind in [
            DeviceKind::Discrete,
            DeviceKind::Integrated,
            DeviceKind::Virtual,
        ] {
            assert_eq!(step_spin(kind, spin), Some(spin), "{kind:?}");
        }
        assert_eq!(step_spin(DeviceKind::Cpu, spin), None);
    }
}
