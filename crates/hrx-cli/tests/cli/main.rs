//! hrx-cli's tests in one test binary: the `hrx` binary end to end
//! (`compile`, `demo`, `embed`, `generate`, `serve`), each test running it
//! as a child process. The MiniLM and SmolLM2 tests read the model cache
//! that `cargo xtask models` fills (`target/models`).

mod cli;
mod demo;
mod demo_minilm;
mod embed;
mod serve;
mod serve_backpressure;
mod serve_errors;
mod serve_generate;
mod serve_openai;
// The binary's test hooks (`--test-lose-device`): `--features testing`.
#[cfg(feature = "testing")]
mod serve_replicas;
mod serve_shutdown;
mod serve_soak;
