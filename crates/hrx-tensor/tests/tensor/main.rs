//! hrx-tensor's integration tests in one test binary: descriptors, and the
//! operator library on a real device (lavapipe in CI, with validation
//! layers under `HRX_VALIDATION=1`), each operator against an f64
//! reference within its error bound. Kernels for targets lavapipe cannot
//! run (cooperative matrices) go through `spirv-val` instead.

mod add_norm;
mod biased_softmax;
mod cast;
mod common;
mod desc_props;
mod elementwise;
mod embedding_norm;
mod encoder_attention;
mod errors;
mod f16;
mod gather;
mod matmul;
mod matmul_decode;
mod matmul_dot;
mod matmul_f16;
mod matmul_quads;
mod matmul_splitk;
mod movement;
mod pad;
mod reduce;
mod rows;
mod tensors;
mod top_k;
