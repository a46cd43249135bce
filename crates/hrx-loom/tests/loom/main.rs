//! hrx-loom's integration tests in one test binary: the front end and
//! verifier, lowering, specialization and the cache, and SPIR-V that
//! `spirv-val` accepts. No device: running the kernels is the workspace
//! `tests` crate's job (`tests/tests/e2e/loom_kernels`). The kernel sources
//! stay beside this folder (`corpus/`, `coop/`, `front/`, `vec4/`), where
//! that crate and `hrx compile`'s tests read them too.

mod build;
mod common;
mod coop;
mod corpus;
mod front_props;
mod launch_program;
mod lowering;
mod specialize_cache;
mod vec4_layout;
mod verify_errors;
mod verify_ir;
