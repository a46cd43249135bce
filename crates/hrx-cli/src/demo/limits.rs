//! What the toy demo refuses before any work: a `--batch` and `--seq`
//! whose activations do not fit one of the device's storage buffers, and a
//! request count whose CPU references would take minutes. (The counts
//! themselves are capped when the flags are parsed.)

use hrx::{Error, Result, Target, models::toy::TransformerConfig};

/// Multiply-adds the CPU references of one demo run may cost: about ten
/// seconds of one core. The default run (256 requests of 16 tokens) needs
/// about 0.6 billion.
pub const CPU_REFERENCE_BUDGET: u128 = 20_000_000_000;

/// Refuse `config` with `requests` requests on `target`, naming the flag
/// to change.
pub fn check(config: &TransformerConfig, target: &Target, requests: usize) -> Result<()> {
    let c = config;
    let rows = (c.batch as u128) * (c.seq as u128);
    let elements = [
        rows * 3 * c.d_model as u128,
        rows * c.d_ff.max(c.vocab) as u128,
        (c.batch as u128) * (c.heads as u128) * (c.seq as u128) * (c.seq as u128),
    ];
    let largest = elements.into_iter().max().unwrap_or(0) * 4;
    if largest > u128::from(target.max_storage_buffer_range) {
        return Err(Error::msg(format!(
            "--batch {} --seq {} need a {} MiB activation buffer; {} binds at most {} MiB \
             per buffer: lower --batch or --seq",
            c.batch,
            c.seq,
            largest >> 20,
            target.name,
            target.max_storage_buffer_range >> 20
        )));
    }
    // Per token, each parameter is one multiply-add; attention adds
    // seq x d_model per token and block for the scores and the mix.
    let per_request = rows * (c.parameter_count() as u128)
        + rows * (c.seq as u128) * (c.d_model as u128) * 2 * (c.blocks as u128);
    let total = per_request * requests as u128;
    if total > CPU_REFERENCE_BUDGET {
        return Err(Error::msg(format!(
            "the CPU references of {requests} requests of batch {} x seq {} need about {:.1e} \
             multiply-adds, over the demo's budget of {:.0e}: lower --requests, --batch or --seq",
            c.batch, c.seq, total as f64, CPU_REFERENCE_BUDGET as f64
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_demo_fits_and_absurd_sizes_do_not() {
        let target = Target::lavapipe();
        let small = TransformerConfig::small();
        check(&small, &target, 256).unwrap();
        let wide = TransformerConfig {
            batch: 100_000,
            ..small
        };
        let e = check(&wide, &target, 1).unwrap_err().to_string();
        assert!(e.contains("--batch"), "{e}");
        let long = TransformerConfig {
            seq: 100_000,
            ..small
        };
        let e = check(&long, &target, 1).unwrap_err().to_string();
        assert!(e.contains("--seq"), "{e}");
        let e = check(&small, &target, 1_000_000).unwrap_err().to_string();
        assert!(e.contains("--requests"), "{e}");
    }
}
