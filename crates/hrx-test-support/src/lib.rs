//! What hrx's integration tests share across crates, in one place instead
//! of copies and `#[path]` includes. A dev-dependency only, never
//! published.
//!
//! Design choices and contracts:
//!
//! - **Dependency-light, by layer.** Without features it depends on
//!   nothing, so the loom compiler's tests, which never link the runtime,
//!   can use it. The `wgsl` feature adds naga (WGSL test kernels); `gate`
//!   adds the runtime, for the crates whose tests run device work.
//! - [`counting`]: a counting global allocator for the tests that prove a
//!   warm path allocates nothing. The library holds the type and the
//!   counters; each test binary declares the `#[global_allocator]` itself.
//!   Its process-wide count needs a test binary of its own; its per-thread
//!   count does not.
//! - [`spirv_val`]: SPIR-V through `spirv-val`, the cooperative-matrix
//!   capable one where needed (`HRX_SPIRV_VAL`), skipped with a note where
//!   none is installed unless CI requires it (`HRX_REQUIRE_SPIRV_VAL`).
//! - [`models`]: where the model cache is (`cargo xtask models` fills
//!   `target/models`; `HRX_MINILM_DIR` and `HRX_SMOLLM2_GGUF` point
//!   elsewhere), and [`compare`]: embeddings against their references.
//! - `gate` (feature `gate`): device work that stays pending until the test
//!   opens it, so tests observe pending states without depending on how
//!   fast the device is.

pub mod compare;
pub mod counting;
#[cfg(feature = "gate")]
pub mod gate;
pub mod models;
pub mod spirv_val;
#[cfg(feature = "wgsl")]
pub mod wgsl;
