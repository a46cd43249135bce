//! hrx's end-to-end tests in one test binary: the model served through the
//! `hrx` facade as a user's crate would (`models`, `serving`,
//! `transfers`), the decoder operators and hrx-loom's kernels on the live
//! device (lavapipe in CI, with validation layers under
//! `HRX_VALIDATION=1`), and random programs through the whole loom
//! pipeline against an interpreter.

mod decoder_kernels;
mod loom_kernels;
mod loom_pipeline;
mod models;
mod serving;
mod transfers;
