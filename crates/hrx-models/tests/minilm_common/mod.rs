//! Shared by the tests that load all-MiniLM-L6-v2: where its folder is.

use std::path::PathBuf;

/// `target/models/all-MiniLM-L6-v2` (fetched by `cargo xtask models`), or
/// the folder `HRX_MINILM_DIR` names (where the tests run away from the
/// checkout).
pub fn model_dir() -> PathBuf {
    let dir = std::env::var_os("HRX_MINILM_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/models/all-MiniLM-L6-v2"),
        PathBuf::from,
    );
    assert!(
        dir.join("model.safetensors").exists(),
        "model files missing in {}: run `cargo xtask models`",
        dir.display()
    );
    dir
}
