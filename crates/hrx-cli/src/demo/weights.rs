//! The demo's weights: seeded, or loaded from safetensors and checked
//! against the config before any device work.

use hrx::{
    Error, Result,
    models::{Weights, toy::TransformerConfig},
};
use std::path::Path;

/// Every tensor the transformer reads, with its shape (the naming contract
/// of `hrx::models::toy::Transformer`).
pub fn expected_shapes(config: &TransformerConfig) -> Vec<(String, Vec<usize>)> {
    let (d, ff, vocab) = (config.d_model, config.d_ff, config.vocab);
    let mut shapes = vec![
        ("embed".to_string(), vec![vocab, d]),
        ("pos".to_string(), vec![config.seq, d]),
    ];
    for b in 0..config.blocks {
        let p = format!("blocks.{b}");
        for norm in ["ln1", "ln2"] {
            shapes.push((format!("{p}.{norm}.weight"), vec![d]));
            shapes.push((format!("{p}.{norm}.bias"), vec![d]));
        }
        for proj in ["q", "k", "v", "o"] {
            shapes.push((format!("{p}.attn.{proj}.weight"), vec![d, d]));
            shapes.push((format!("{p}.attn.{proj}.bias"), vec![d]));
        }
        shapes.push((format!("{p}.mlp.up.weight"), vec![d, ff]));
        shapes.push((format!("{p}.mlp.up.bias"), vec![ff]));
        shapes.push((format!("{p}.mlp.down.weight"), vec![ff, d]));
        shapes.push((format!("{p}.mlp.down.bias"), vec![d]));
    }
    shapes.push(("ln_f.weight".to_string(), vec![d]));
    shapes.push(("ln_f.bias".to_string(), vec![d]));
    shapes.push(("head.weight".to_string(), vec![d, vocab]));
    shapes.push(("head.bias".to_string(), vec![vocab]));
    shapes
}

/// Read and parse a safetensors file, then check that it fits `config`.
pub fn load(path: &Path, config: &TransformerConfig) -> Result<Weights> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::msg(format!("cannot read weights {}: {e}", path.display())))?;
    let weights = Weights::from_safetensors(&bytes).map_err(|e| {
        Error::msg(format!(
            "weights {} are not a valid safetensors file: {e}",
            path.display()
        ))
    })?;
    check_fit(&weights, config).map_err(|e| {
        let e = e.to_string();
        let hint = if e.contains("\"pos\"") {
            " (--seq must match the file's `pos` rows)"
        } else {
            ""
        };
        Error::msg(format!(
            "weights {} do not fit the model (vocab {}, d_model {}, d_ff {}, blocks {}, \
             seq {}): {e}{hint}",
            path.display(),
            config.vocab,
            config.d_model,
            config.d_ff,
            config.blocks,
            config.seq
        ))
    })?;
    Ok(weights)
}

/// Write `weights` as an F32 safetensors file.
pub fn save(path: &Path, weights: &Weights) -> Result<()> {
    std::fs::write(path, weights.to_safetensors())
        .map_err(|e| Error::msg(format!("cannot write weights {}: {e}", path.display())))
}

/// Every expected tensor present with its shape, and nothing else: an extra
/// tensor usually means a file made for another config (more blocks).
fn check_fit(weights: &Weights, config: &TransformerConfig) -> Result<()> {
    let expected = expected_shapes(config);
    for (name, shape) in &expected {
        weights.get(name, shape)?;
    }
    if let Some(extra) = weights
        .names()
        .find(|name| !expected.iter().any(|(e, _)| e == name))
    {
        return Err(Error::msg(format!(
            "tensor `{extra}` is not part of this model"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_shapes_match_the_seeded_weights() {
        let config = TransformerConfig::small();
        let seeded = config.seeded_weights(1);
        let expected = expected_shapes(&config);
        assert_eq!(seeded.names().count(), expected.len());
        check_fit(&seeded, &config).unwrap();
        let count: usize = expected
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        assert_eq!(count, config.parameter_count());
    }

    #[test]
    fn other_configs_do_not_fit() {
        let config = TransformerConfig::small();
        let longer = TransformerConfig {
            seq: config.seq * 2,
            ..config
        };
        let err = check_fit(&longer.seeded_weights(1), &config).unwrap_err();
        assert!(err.to_string().contains("pos"), "{err}");
        let deeper = TransformerConfig {
            blocks: config.blocks + 1,
            ..config
        };
        let err = check_fit(&deeper.seeded_weights(1), &config).unwrap_err();
        assert!(err.to_string().contains("blocks.2."), "{err}");
    }
}
