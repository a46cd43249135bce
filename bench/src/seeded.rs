//! Seeded weights of a BERT configuration's shapes, for benchmarks (speed
//! does not depend on the values), as a checkpoint in memory or as a model
//! folder beside the real one's small files (for a server that loads a
//! folder, where the real weights are absent).

use hrx_models::bert::BertConfig;
use std::path::{Path, PathBuf};

/// Deterministic weights of every tensor the encoder reads, with Hugging
/// Face names, as an F32 safetensors checkpoint.
pub fn checkpoint(c: &BertConfig) -> Vec<u8> {
    let d = c.hidden;
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![c.vocab_size, d],
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![c.max_position, d],
        ),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, d]),
    ];
    let norm = |shapes: &mut Vec<(String, Vec<usize>)>, name: String| {
        shapes.push((format!("{name}.weight"), vec![d]));
        shapes.push((format!("{name}.bias"), vec![d]));
    };
    norm(&mut shapes, "embeddings.LayerNorm".into());
    for l in 0..c.layers {
        let p = format!("encoder.layer.{l}");
        for (name, out, inp) in [
            ("attention.self.query", d, d),
            ("attention.self.key", d, d),
            ("attention.self.value", d, d),
            ("attention.output.dense", d, d),
            ("intermediate.dense", c.intermediate, d),
            ("output.dense", d, c.intermediate),
        ] {
            shapes.push((format!("{p}.{name}.weight"), vec![out, inp]));
            shapes.push((format!("{p}.{name}.bias"), vec![out]));
        }
        norm(&mut shapes, format!("{p}.attention.output.LayerNorm"));
        norm(&mut shapes, format!("{p}.output.LayerNorm"));
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let scale = 1.0 / (*shape.last().unwrap_or(&1) as f32).sqrt();
            let bytes = (0..n)
                .flat_map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    (unit * scale).to_le_bytes()
                })
                .collect();
            (name, shape, bytes)
        })
        .collect();
    let views = data.iter().map(|(name, shape, bytes)| {
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .expect("consistent shapes");
        (name.as_str(), view)
    });
    safetensors::serialize(views, None).expect("serialize")
}

/// A copy of the model folder `source` under `parent` (same folder name,
/// so the model keeps its name) with every file but `model.safetensors`
/// copied, subfolders included, and seeded weights of its `config.json`'s
/// shapes written as `model.safetensors`. Returns the copy's path.
pub fn model_folder(source: &Path, parent: &Path) -> Result<PathBuf, String> {
    let name = source
        .canonicalize()
        .map_err(|e| format!("{}: {e}", source.display()))?
        .file_name()
        .map(PathBuf::from)
        .ok_or_else(|| format!("{}: no folder name", source.display()))?;
    let target = parent.join(name);
    copy_small_files(source, &target)?;
    let config = BertConfig::from_dir(source).map_err(|e| format!("{}: {e}", source.display()))?;
    let weights = target.join("model.safetensors");
    std::fs::write(&weights, checkpoint(&config))
        .map_err(|e| format!("{}: {e}", weights.display()))?;
    Ok(target)
}

/// Copy `from` into `to` recursively, leaving out the weights.
fn copy_small_files(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let listing = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in listing {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_small_files(&path, &target)?;
        } else if entry.file_name() != "model.safetensors" {
            std::fs::copy(&path, &target).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}
