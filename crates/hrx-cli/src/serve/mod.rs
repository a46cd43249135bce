//! `hrx serve`: an OpenAI-compatible server for embeddings and text
//! generation on tokio and axum.
//!
//! One concept per file: [`flags`] (the command line), [`devices`] (one
//! replica per device), [`state`] (what handlers share), [`routes`] (the
//! router and its layers), [`embeddings`] with [`request`] and
//! [`response`] (the embeddings endpoint), [`completions`] with
//! [`completion_request`] and [`completion_response`] (completions and
//! chat completions, streamed as server-sent events or whole), [`errors`] and
//! [`error_bodies`] (OpenAI's error object on every error), [`auth`]
//! (the API key), [`probes`] (health, readiness, models, metrics),
//! [`metrics`], [`histogram`], [`batch_sizes`] and [`exposition`] (what
//! is counted and how it is written), [`busy_poll`] (a thread kept awake
//! while requests come often), [`shutdown`] (draining on SIGTERM and
//! ctrl-c).

mod auth;
mod batch_sizes;
mod busy_poll;
mod completion_request;
mod completion_response;
mod completions;
mod devices;
mod embeddings;
mod error_bodies;
mod errors;
mod exposition;
mod flags;
mod histogram;
mod metrics;
mod offload;
mod probes;
mod request;
mod response;
mod routes;
mod shutdown;
mod state;

pub use flags::ServeArgs;

use axum::serve::ListenerExt;
use hrx::{
    Error, Result,
    models::{
        embed::Replicas,
        llama::{Generator, GeneratorOptions},
    },
};
use state::AppState;
use std::{path::Path, sync::Arc};

/// The served models: embeddings (name, replicas) and text generation
/// (name, generator).
type Models = (Option<(String, Replicas)>, Option<(String, Arc<Generator>)>);

/// Load the models on the selected devices, then serve until SIGTERM or
/// ctrl-c and every accepted request is answered.
pub fn run(args: &ServeArgs) -> Result<()> {
    let contexts = devices::contexts(args)?;
    let kinds = contexts
        .iter()
        .map(|c| Ok(c.runtime().gpu()?.target().kind))
        .collect::<Result<Vec<_>>>()?;
    let poll = busy_poll::window(args.busy_poll_us, &kinds);
    let embeddings = match &args.model {
        Some(dir) => {
            let name = model_name(dir)?;
            eprintln!("hrx serve: loading {name}: preparing every pool");
            Some((name, devices::load(args, &contexts, dir)?))
        }
        None => None,
    };
    let generation = match &args.llm {
        Some(file) => {
            let name = llm_name(file)?;
            eprintln!("hrx serve: loading {name}: uploading weights, recording the steps");
            let options = GeneratorOptions {
                sequences: args.llm_slots,
                context: args.llm_context,
                prefill_rows: args.llm_prefill_rows,
                queue: args.queue,
                cache: args.llm_kv_cache.into(),
                activations: args.llm_activations.into(),
                ..GeneratorOptions::default()
            };
            let generator = Generator::open(&contexts[0], file, options)
                .map_err(|e| Error::msg(format!("cannot load {}: {e}", file.display())))?;
            Some((name, Arc::new(generator)))
        }
        None => None,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = busy_poll::runtime_threads(args.http_threads, poll) {
        builder.worker_threads(threads);
    }
    let runtime = builder
        .enable_all()
        .thread_name("hrx-serve")
        .build()
        .map_err(|e| Error::msg(format!("cannot start the server's runtime: {e}")))?;
    runtime.block_on(serve(args, (embeddings, generation), poll))
    // The runtime drops here with its tasks and their handles of the
    // replicas; dropping the last one waits for the embedders to release
    // their device work.
}

async fn serve(
    args: &ServeArgs,
    (embeddings, generation): Models,
    poll: std::time::Duration,
) -> Result<()> {
    let state = Arc::new(AppState::new(
        embeddings,
        generation,
        args.max_inputs,
        args.api_key.clone(),
        busy_poll::Activity::new(poll),
    ));
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .map_err(|e| Error::msg(format!("cannot listen on {}:{}: {e}", args.host, args.port)))?;
    let address = listener
        .local_addr()
        .map_err(|e| Error::msg(format!("cannot read the listening address: {e}")))?;
    let signals = shutdown::Signals::register()?;
    let sampler = tokio::spawn(batch_sizes::sample(Arc::clone(&state)));
    let poller = {
        let state = Arc::clone(&state);
        tokio::spawn(async move { state.activity.keep_awake().await })
    };
    outln!("listening on http://{address}");
    // Small writes go out at once: with Nagle's algorithm a streamed
    // event that follows another unacknowledged one would wait for the
    // client's delayed acknowledgement.
    let listener = listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            eprintln!("hrx serve: could not set TCP_NODELAY on a connection: {e}");
        }
    });
    axum::serve(listener, routes::router(Arc::clone(&state), args))
        .with_graceful_shutdown(signals.drained(Arc::clone(&state)))
        .await
        .map_err(|e| Error::msg(format!("the server failed: {e}")))?;
    sampler.abort();
    poller.abort();
    eprintln!("hrx serve: every accepted request answered; stopped");
    Ok(())
}

/// The model's name: its folder's name.
fn model_name(dir: &Path) -> Result<String> {
    let dir = dir.canonicalize().map_err(|e| {
        Error::msg(format!(
            "cannot open the model directory {}: {e}",
            dir.display()
        ))
    })?;
    dir.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| Error::msg(format!("{} has no usable folder name", dir.display())))
}

/// The text-generation model's name: its file name without `.gguf`.
fn llm_name(file: &Path) -> Result<String> {
    if !file.is_file() {
        return Err(Error::msg(format!(
            "--llm {} is not a GGUF file",
            file.display()
        )));
    }
    file.file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_suffix(".gguf").unwrap_or(n).to_string())
        .ok_or_else(|| Error::msg(format!("{} has no usable file name", file.display())))
}
