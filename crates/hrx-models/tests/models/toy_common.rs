//! Shared helpers for the toy-model tests.

#![allow(dead_code)]

use hrx_inference::ModelContext;
use hrx_runtime::RuntimeOptions;

/// A context on the default device (lavapipe in CI).
pub fn context() -> ModelContext {
    ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context")
}
