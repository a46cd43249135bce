//! `hrx demo`: the main job. A model served through a bounded pool of slots
//! by concurrent tokio clients, every output checked against a reference.
//! With `--model toy`, a small transformer checked against its CPU
//! reference, then the same requests through the naive path; with a model
//! directory, a sentence encoder ([`minilm`]).

mod check;
mod clients;
mod flags;
mod limits;
pub mod minilm;
mod naive;
mod progress;
mod report;
mod requests;
mod weights;

pub use flags::DemoArgs;

use hrx::{
    Error, Result,
    execution::{DeviceKind, RuntimeOptions},
    inference::ModelContext,
    models::toy::{Transformer, TransformerConfig},
};
use std::{sync::Arc, time::Instant};

/// The naive path reallocates and re-prepares per request, so a smaller
/// sample of it is enough for a stable comparison.
const NAIVE_REQUESTS: usize = 32;

/// Run the demo `--model` selects and print its report on stdout.
pub fn run(args: &DemoArgs) -> Result<()> {
    match args.model_dir() {
        None => run_toy(args),
        Some(_) => minilm::run(args),
    }
}

/// The toy demo: the small transformer, seeded or loaded.
fn run_toy(args: &DemoArgs) -> Result<()> {
    let clients = args.clients();
    let config = config(args)?;
    let weights = match &args.weights {
        Some(path) => weights::load(path, &config)?,
        None => config.seeded_weights(args.seed),
    };
    if let Some(path) = &args.save_weights {
        weights::save(path, &weights)?;
        outln!(
            "wrote {} tensors ({} parameters, seed {}) to {}",
            weights.names().count(),
            group_digits(weights.parameter_count()),
            args.seed,
            path.display()
        );
        return Ok(());
    }

    let context = ModelContext::new(device_options(args.device.as_deref())?)?;
    let target = match (context.runtime().gpu(), &args.device) {
        (Ok(gpu), _) => gpu.target().clone(),
        (Err(e), Some(device)) => return Err(Error::msg(format!("--device `{device}`: {e}"))),
        (Err(e), None) => return Err(e),
    };
    limits::check(&config, &target, args.requests)?;
    outln!("device:  {} ({:?})", target.name, target.kind);
    outln!(
        "model:   transformer, vocab {}, d_model {}, heads {}, d_ff {}, blocks {}, \
         seq {}, batch {}",
        config.vocab,
        config.d_model,
        config.heads,
        config.d_ff,
        config.blocks,
        config.seq,
        config.batch
    );

    let started = Instant::now();
    let requests = Arc::new(requests::make(&config, &weights, args.seed, args.requests)?);
    let referenced = started.elapsed();

    let started = Instant::now();
    let transformer = Transformer::new(&context, config, &weights)?;
    let model = transformer.prepare(args.slots)?;
    let prepared = started.elapsed();
    outln!(
        "         {} parameters, {:.2} MiB of weights on the device, shared by {} slots",
        group_digits(config.parameter_count()),
        transformer.weights().bytes() as f64 / (1u64 << 20) as f64,
        args.slots
    );
    outln!(
        "setup:   CPU references {}, upload + compile + prepare {}",
        report::millis(referenced),
        report::millis(prepared)
    );

    let bar = progress::bar(args.requests, "pool", args.quiet);
    let pool = clients::serve(&model, config, requests.clone(), clients, &bar);
    bar.finish_and_clear();
    let pool = pool?;
    drop(model);

    let sample = &requests[..args.requests.min(NAIVE_REQUESTS)];
    let bar = progress::bar(sample.len(), "naive", args.quiet);
    let naive = naive::run(&transformer, sample, &bar);
    bar.finish_and_clear();
    let naive = naive?;

    outln!(
        "{}",
        report::results(
            &pool,
            clients,
            args.slots,
            &naive,
            target.kind == DeviceKind::Cpu
        )
    );
    Ok(())
}

/// The small transformer with the batch and sequence flags applied.
fn config(args: &DemoArgs) -> Result<TransformerConfig> {
    let small = TransformerConfig::small();
    let config = TransformerConfig {
        batch: args.batch.unwrap_or(small.batch),
        seq: args.seq.unwrap_or(small.seq),
        ..small
    };
    config.validate()?;
    Ok(config)
}

/// The runtime options from the environment (`HRX_DEVICE`,
/// `HRX_VALIDATION`), with `--device` (an index, else a name fragment, as
/// `HRX_DEVICE` reads) taking precedence over `HRX_DEVICE`.
pub(crate) fn device_options(device: Option<&str>) -> Result<RuntimeOptions> {
    let options = RuntimeOptions::from_env()?;
    Ok(match device.map(str::trim) {
        None => options,
        Some(text) => match text.parse::<usize>() {
            Ok(index) => options.with_device_index(index),
            Err(_) => options.with_device_name(text),
        },
    })
}

/// 1234567 -> "1,234,567"
fn group_digits(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_group_by_thousands() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1234567), "1,234,567");
    }

    #[test]
    fn flags_shape_the_config() {
        let args = DemoArgs {
            batch: Some(3),
            seq: Some(5),
            ..DemoArgs::default()
        };
        let c = config(&args).unwrap();
        assert_eq!((c.batch, c.seq), (3, 5));
        assert_eq!(c.d_model, TransformerConfig::small().d_model);
    }
}
