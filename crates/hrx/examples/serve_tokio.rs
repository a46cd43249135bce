//! Serving with tokio: many async clients share one bounded pool of slots.
//!
//! The model is a tiny dense layer, `y = relu(x W + b)` with x `[2, 8]`,
//! W `[8, 4]` and b `[4]`, built by hand with the facade: the weights are
//! uploaded once and shared, and each of the 4 slots owns its input and
//! output at fixed addresses and one prepared graph. 32 clients send 8
//! requests each; a client awaits `acquire()` when every slot is taken, so
//! the pool applies backpressure instead of queueing. Every output is
//! compared with a CPU reference. All values are small multiples of 1/32,
//! so the f32 results are exact and compared exactly.
//! Run with `cargo run -p hrx --example serve_tokio`.

use hrx::{
    Error, Result,
    execution::RuntimeOptions,
    inference::{InferenceGraph, ModelContext, PreparedModel},
    tensor::{
        DType, TensorDesc,
        ops::{MatmulOptions, UnaryOp},
    },
};
use std::time::{Duration, Instant};

const BATCH: usize = 2;
const IN: usize = 8;
const OUT: usize = 4;
const SLOTS: usize = 4;
const CLIENTS: usize = 32;
const REQUESTS_PER_CLIENT: usize = 8;

fn weight(i: usize, j: usize) -> f32 {
    ((i * 5 + j * 3) % 11) as f32 / 4.0 - 1.25
}

fn bias(j: usize) -> f32 {
    j as f32 / 2.0 - 1.0
}

/// The input of one request: distinct per client and request.
fn input(client: usize, request: usize) -> Vec<f32> {
    (0..BATCH * IN)
        .map(|e| ((client * 31 + request * 7 + e) % 17) as f32 / 8.0 - 1.0)
        .collect()
}

fn reference(x: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0f32; BATCH * OUT];
    for r in 0..BATCH {
        for j in 0..OUT {
            let dot: f32 = (0..IN).map(|i| x[r * IN + i] * weight(i, j)).sum();
            y[r * OUT + j] = (dot + bias(j)).max(0.0);
        }
    }
    y
}

fn to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// Prepare the pool: shared weights, per-slot IO and graph.
fn dense_layer(context: &ModelContext) -> Result<PreparedModel> {
    let ops = context.ops();
    let w: Vec<f32> = (0..IN * OUT).map(|e| weight(e / OUT, e % OUT)).collect();
    let b: Vec<f32> = (0..OUT).map(bias).collect();
    let w = context.upload(TensorDesc::new(DType::F32, vec![IN, OUT])?, &to_bytes(&w))?;
    let b = context.upload(TensorDesc::new(DType::F32, vec![OUT])?, &to_bytes(&b))?;
    let relu = MatmulOptions {
        activation: Some(UnaryOp::Relu),
        ..MatmulOptions::default()
    };
    PreparedModel::prepare(context, SLOTS, |context| {
        let x = context.allocate(TensorDesc::new(DType::F32, vec![BATCH, IN])?)?;
        let y = context.allocate(TensorDesc::new(DType::F32, vec![BATCH, OUT])?)?;
        let mut graph = context.runtime().graph();
        ops.record_matmul(&mut graph, &x, &w, Some(&b), relu, &y)?;
        Ok(InferenceGraph {
            inputs: vec![x],
            outputs: vec![y],
            graph: graph.prepare()?,
        })
    })
}

/// One client: acquire a slot (waiting asynchronously while the pool is
/// full), submit host bytes, await the readback, check it.
async fn client(model: PreparedModel, client: usize) -> Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(REQUESTS_PER_CLIENT);
    for request in 0..REQUESTS_PER_CLIENT {
        let x = input(client, request);
        let start = Instant::now();
        let slot = model.acquire().await?;
        let readback = slot.submit_host(&[&to_bytes(&x)])?.download()?;
        // Awaiting never blocks a worker thread on the device; consuming
        // the readback releases the slot.
        let outputs = readback.await?;
        latencies.push(start.elapsed());
        let (got, expected) = (from_bytes(&outputs[0]), reference(&x));
        if got != expected {
            return Err(Error::msg(format!(
                "client {client} request {request}: got {got:?}, expected {expected:?}"
            )));
        }
    }
    Ok(latencies)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<()> {
    let context = ModelContext::new(RuntimeOptions::from_env()?)?;
    println!("device: {}", context.runtime().gpu()?.target().name);
    let model = dense_layer(&context)?;

    // Backpressure: with every slot reserved, the pool answers Busy.
    let held: Vec<_> = (0..SLOTS)
        .map(|_| model.try_acquire())
        .collect::<Result<_>>()?;
    match model.try_acquire() {
        Err(error) if error.is_busy() => println!("{SLOTS} slots held: try_acquire -> Busy"),
        other => return Err(Error::msg(format!("expected Busy, got {other:?}"))),
    }
    drop(held);

    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client(model.clone(), c)))
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        let client_latencies = task
            .await
            .map_err(|e| Error::msg(format!("client task failed: {e}")))??;
        latencies.extend(client_latencies);
    }
    let elapsed = start.elapsed();

    latencies.sort();
    let percentile = |p: usize| latencies[(latencies.len() - 1) * p / 100];
    println!(
        "{} requests from {CLIENTS} clients over {SLOTS} slots in {:.1} ms: \
         {:.0} requests/s, latency p50 {:.2} ms, p99 {:.2} ms, all outputs exact",
        latencies.len(),
        elapsed.as_secs_f64() * 1e3,
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(50).as_secs_f64() * 1e3,
        percentile(99).as_secs_f64() * 1e3,
    );
    if !model.is_idle() {
        return Err(Error::msg(
            "a slot is still reserved after every client finished",
        ));
    }
    println!("ok");
    Ok(())
}
