//! hrx's benchmark suites and GPU probes, one workspace crate apart from
//! the product.
//!
//! Design choices and contracts:
//! - one binary per suite (`bench_runtime`, `bench_loom`, `bench_tensor`,
//!   `bench_inference`, `bench_models`, `bench_serve`) and per GPU probe
//!   (`load_ceiling`, `coop_peak_gpu`, `kernel_stats`, `matmul_coop_gpu`);
//!   `cargo xtask bench <suite>` runs a suite, `cargo xtask gpu-bench` packs
//!   them all for a machine with a GPU and no Rust toolchain;
//! - every suite writes one JSON list of [`report::Record`]s (the schema of
//!   `docs/benchmarks.md`) through serde, to `HRX_BENCH_OUT` or
//!   `target/bench/<suite>.json`, and prints a markdown table; the summary
//!   (`cargo xtask bench-summary`) reads those files;
//! - the baselines are measured in the same process on the same device:
//!   [`raw`] and [`raw_kernel`] are a hand-written `ash` harness doing what
//!   a careful Vulkan program would, and nothing more; PyTorch and wgpu
//!   peers live beside this crate (`bench/pytorch`, `bench/wgpu-peer`) and
//!   reach the suites through their JSON files;
//! - the product crates expose what only the benchmarks need behind
//!   features (`hrx-runtime/inspect`, `hrx-tensor/kernel-sources`), which
//!   this crate turns on.

#![warn(missing_docs)]

pub mod best_run;
pub mod raw;
pub mod raw_kernel;
pub mod report;
pub mod seeded;
