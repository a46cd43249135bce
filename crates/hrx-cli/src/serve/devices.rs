//! `--device`: one replica per selector (an index, a name fragment, or
//! `all`), each in a runtime domain of its own.

use super::ServeArgs;
use hrx::{
    Error, Result,
    execution::RuntimeOptions,
    inference::ModelContext,
    models::{
        bert::Precision,
        embed::{EmbedderOptions, Replicas},
    },
};
use std::path::Path;

/// The runtime options of each replica, in order: `base` (the
/// environment's) with each selector's device.
fn runtime_options(base: &RuntimeOptions, selectors: &[String]) -> Result<Vec<RuntimeOptions>> {
    if selectors.is_empty() {
        return Ok(vec![base.clone()]);
    }
    if selectors.iter().any(|s| s == "all") {
        if selectors.len() > 1 {
            return Err(Error::msg("--device all names every device; give it alone"));
        }
        let devices = hrx::execution::available_devices()?;
        if devices.is_empty() {
            return Err(Error::msg("no Vulkan device found"));
        }
        return Ok(devices
            .into_iter()
            .map(|(index, _)| base.clone().with_device_index(index))
            .collect());
    }
    Ok(selectors
        .iter()
        .map(|s| match s.trim().parse::<usize>() {
            Ok(index) => base.clone().with_device_index(index),
            Err(_) => base.clone().with_device_name(s.trim()),
        })
        .collect())
}

/// One model context per selected device, in order.
pub fn contexts(args: &ServeArgs) -> Result<Vec<ModelContext>> {
    #[allow(unused_mut)] // changed only by the `testing` feature's hook
    let mut options = runtime_options(&RuntimeOptions::from_env()?, &args.devices)?;
    #[cfg(feature = "testing")]
    if let Some(faulty) = args.test_lose_device {
        let count = options.len();
        let replica = options.get_mut(faulty).ok_or_else(|| {
            Error::msg(format!(
                "--test-lose-device {faulty}: there are {count} replicas"
            ))
        })?;
        *replica = replica.clone().with_fault_injection();
    }
    options.into_iter().map(ModelContext::new).collect()
}

/// Load the embedding model in `dir` once per context, every pool
/// prepared.
pub fn load(args: &ServeArgs, contexts: &[ModelContext], dir: &Path) -> Result<Replicas> {
    let embedder = EmbedderOptions {
        precision: if args.f16 {
            Precision::F16
        } else {
            Precision::F32
        },
        max_batch: args.max_batch,
        slots: args.slots,
        batch_window: args.batch_window(),
        queue: args.queue,
        prepare_all: true,
    };
    let replicas = Replicas::load(contexts, dir, &embedder)?;
    #[cfg(feature = "testing")]
    if let Some(faulty) = args.test_lose_device {
        replicas
            .embedder(faulty)
            .encoder()
            .context()
            .runtime()
            .inject_fault(hrx::execution::Fault::LoseDevice)?;
        eprintln!("hrx serve: --test-lose-device: replica {faulty}'s device is lost");
    }
    Ok(replicas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx::execution::DeviceSelector;

    #[test]
    fn selectors_become_options() {
        let base = RuntimeOptions::default().with_memory_budget(1 << 20);
        let options = runtime_options(&base, &[]).unwrap();
        assert_eq!(options[0].device, None);
        assert_eq!(options[0].memory_budget, Some(1 << 20));
        let options = runtime_options(&base, &["0".into(), "0".into(), "llvm".into()]).unwrap();
        assert_eq!(options[2].memory_budget, Some(1 << 20), "the base is kept");
        assert_eq!(options[1].device, Some(DeviceSelector::Index(0)));
        assert_eq!(options[2].device, Some(DeviceSelector::Name("llvm".into())));
        assert!(runtime_options(&base, &["all".into(), "0".into()]).is_err());
    }
}
