//! Where the model tests find their models: the cache `cargo xtask models`
//! fills (`target/models` of the checkout), or the copies the environment
//! names where the tests run away from the checkout.

use std::path::PathBuf;

/// The checkout's root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The checkout's `target` folder (the model cache and the tests' Python
/// environments live there, whatever `CARGO_TARGET_DIR` says).
pub fn target_dir() -> PathBuf {
    workspace().join("target")
}

/// all-MiniLM-L6-v2's folder: `target/models/all-MiniLM-L6-v2`, or the
/// folder `HRX_MINILM_DIR` names. Panics, naming the fix, when its files
/// are missing.
pub fn minilm_dir() -> PathBuf {
    let dir = std::env::var_os("HRX_MINILM_DIR").map_or_else(
        || target_dir().join("models/all-MiniLM-L6-v2"),
        PathBuf::from,
    );
    assert!(
        dir.join("model.safetensors").is_file() && dir.join("tokenizer.json").is_file(),
        "model files missing in {}: run `cargo xtask models`",
        dir.display()
    );
    dir
}

/// SmolLM2-135M-Instruct's GGUF file (Q4_1): in
/// `target/models/SmolLM2-135M-Instruct/`, or the file `HRX_SMOLLM2_GGUF`
/// names. Panics, naming the fix, when it is missing.
pub fn smollm2_gguf() -> PathBuf {
    let path = std::env::var_os("HRX_SMOLLM2_GGUF").map_or_else(
        || target_dir().join("models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask models`",
        path.display()
    );
    path
}
