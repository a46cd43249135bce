//! hrx-inference's integration tests on a real device (lavapipe in CI,
//! with validation layers under `HRX_VALIDATION=1`), in one test binary.
//!
//! Beside it, `warm_alloc` and `warm_alloc_device` are binaries of their
//! own: each counts every heap allocation in its process.

mod common;
mod context;
mod faults;
mod pool;
mod pool_fairness;
mod pool_model;
mod stress;
