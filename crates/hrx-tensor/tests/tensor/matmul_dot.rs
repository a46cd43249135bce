//! The decode kernel for a B contiguous along k (given transposed, as
//! linear layers store weights) against an f64 reference: f16 inputs, k a
//! multiple of 8 (16-byte loads of A and B rows), any n (partial column
//! groups), m up to the decode threshold (several row tiles where it
//! exceeds 8), batches with broadcasting, bias and activation. Tolerance
//! (per element, `common::matmul::matmul_bound`): products of f16 values
//! are exact in f32, only the sums round, so the output is within
//! `(k + 2) u (sum |a b| + |bias|)` of the exact sum in any order
//! (u = 2^-24, 2^-23 where a cooperative-matrix kernel takes the rows),
//! through the activation's slope, plus the activation's own error. The
//! bias is rounded to f32 first, so the reference sees what the kernel
//! reads.

use crate::common::{
    matmul::{Operands, accumulation_roundoff, check_matmul, f16_round, operand_shape, stored},
    *,
};
use hrx_core::Target;
use hrx_tensor::{
    DType,
    ops::{MatmulOptions, UnaryOp, dot_matmul_source},
};
use hrx_test_support::spirv_val;
use proptest::prelude::*;

const DOT: &str = "decode (rows of a transposed B)";

/// The rows the dot kernel takes on this device: 2 where cooperative
/// matrices exist (the split-k kernel beats it from 4 rows on the H200),
/// else the decode threshold.
fn max_rows() -> usize {
    let coop = ops()
        .runtime()
        .gpu()
        .unwrap()
        .target()
        .supports_cooperative_matrix();
    if coop { 2 } else { 64 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn dot_matmul_matches_reference(
        m in prop_oneof![4 => 1usize..=8, 1 => 9usize..=40],
        n in prop_oneof![1usize..=3, 4usize..=80, Just(129usize)],
        q in prop_oneof![3 => 1usize..=16, 1 => 17usize..=64],
        batch in prop_oneof![Just(vec![]), Just(vec![1]), Just(vec![3])],
        seed in any::<u64>(),
    ) {
        let k = 8 * q;
        let mut rng = Gen::new(seed);
        let options = MatmulOptions {
            transpose_a: false,
            transpose_b: true,
            activation: [None, Some(UnaryOp::Relu), Some(UnaryOp::Gelu), Some(UnaryOp::Silu)][rng.below(4)],
        };
        let Operands { b_batch, nb, nbb, va, vb, vbias, with_bias } =
            Operands::random(&mut rng, &batch, (m, k, n), f16_round);
        let a = input(DType::F16, &operand_shape(&batch, m, k, false), &stored(&va, nb, m, k, false), Placement::Contiguous);
        let b = input(DType::F16, &operand_shape(&b_batch, k, n, true), &stored(&vb, nbb, k, n, true), Placement::Contiguous);
        let bias = input(DType::F32, &[n], &vbias, Placement::Contiguous);
        let bias = with_bias.then_some(&bias);
        let kernel = ops().matmul_kernel(&a, &b, options).unwrap();
        if m <= max_rows() {
            prop_assert_eq!(kernel, DOT);
        }
        check_matmul(
            (&a, &b, bias.map(|t| (t, &vbias[..]))),
            (&va, &vb),
            (nb, !b_batch.is_empty()),
            (m, k, n),
            options,
            accumulation_roundoff(kernel),
            &format!("dot matmul {m}x{k}x{n} batch {batch:?}/{b_batch:?} {options:?} bias {with_bias} on {kernel}"),
        );
    }
}

/// Rows of A or B that are not whole aligned quads go to another kernel
/// (and stay right: see matmul_decode.rs); f32 never takes this one.
#[test]
fn dot_kernel_needs_aligned_f16_rows() {
    let pick = |dtype: DType, k: usize, placement: Placement| {
        let a = input(dtype, &[2, k], &vec![0.5; 2 * k], Placement::Contiguous);
        let b = input(dtype, &[24, k], &vec![0.25; 24 * k], placement);
        let options = MatmulOptions {
            transpose_b: true,
            ..MatmulOptions::default()
        };
        ops().matmul_kernel(&a, &b, options).unwrap()
    };
    assert_eq!(pick(DType::F16, 64, Placement::Contiguous), DOT);
    assert_ne!(pick(DType::F16, 60, Placement::Contiguous), DOT);
    assert_ne!(pick(DType::F16, 64, Placement::Padded), DOT);
    assert_ne!(pick(DType::F32, 64, Placement::Contiguous), DOT);
}

/// The H200's shape (subgroups of 32) compiles for every row tile.
#[test]
fn dot_kernel_compiles_for_hopper() {
    let compiler = hrx_loom::Compiler::for_target(None, &Target::hopper()).unwrap();
    for m in [1, 3, 4, 8] {
        let src = dot_matmul_source(&Target::hopper(), m, Some(UnaryOp::Gelu));
        let artifact = compiler
            .module(&src)
            .and_then(|module| {
                module.compile_uncached(&hrx_loom::Specialization::new("@matmul_dot"))
            })
            .unwrap_or_else(|e| panic!("m={m}: {e}"));
        spirv_val::validate(&format!("dot-{m}"), artifact.spirv());
    }
}
