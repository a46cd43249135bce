//! The loom compiler (work in progress; see `../IR_CONTRACT.md`).

pub mod diag;
pub mod front;
pub mod ir;
pub mod verify;

// Back half of the pipeline (L2): specialize, lower, emit, artifacts.
pub mod artifact;
mod cache;
pub mod emit;
pub mod launch;
pub mod lower;
pub mod specialize;
