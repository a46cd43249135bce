//! Matmul against an f64 reference: batches with broadcasting, transposes,
//! strided operands, bias and activation epilogues, partial tiles, empty
//! and size-1 extents. Tolerance (f32, per element): the worst-case
//! rounding of k products and their sum with the bias in any order,
//! `(k + 2) 2^-24 (sum |a b| + |bias|)`, through the activation's slope,
//! plus the activation's own error (`common::matmul::matmul_bound`).
//! Inputs are rounded to f32 first, so the reference sees what the kernel
//! reads.

use crate::common::{
    bounds::U32,
    matmul::{Operands, check_matmul, f32_round, operand_shape, stored},
    *,
};
use hrx_tensor::{
    DType, Ops,
    ops::{MatmulOptions, UnaryOp},
};
use proptest::prelude::*;

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 2 => Just(1usize), 6 => 2usize..40]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn matmul_matches_reference(
        // Above 64 rows the tiled kernel runs on lavapipe (the decode kernel
        // below; matmul_decode.rs covers it in depth).
        m in prop_oneof![3 => dim(), 2 => 65usize..100], n in dim(), k in dim(),
        batch in prop_oneof![Just(vec![]), Just(vec![1]), Just(vec![3]), Just(vec![2, 2])],
        seed in any::<u64>(),
    ) {
        let mut rng = Gen::new(seed);
        let options = MatmulOptions {
            transpose_a: rng.below(2) == 0,
            transpose_b: rng.below(2) == 0,
            activation: [None, Some(UnaryOp::Relu), Some(UnaryOp::Gelu), Some(UnaryOp::Silu)][rng.below(4)],
        };
        let Operands { b_batch, nb, nbb, va, vb, vbias, with_bias } =
            Operands::random(&mut rng, &batch, (m, k, n), f32_round);
        let sa = operand_shape(&batch, m, k, options.transpose_a);
        let sb = operand_shape(&b_batch, k, n, options.transpose_b);
        let placement = [Placement::Contiguous, Placement::Padded][rng.below(2)];
        let a = input(DType::F32, &sa, &stored(&va, nb, m, k, options.transpose_a), placement);
        let b = input(DType::F32, &sb, &stored(&vb, nbb, k, n, options.transpose_b), Placement::Contiguous);
        let bias = input(DType::F32, &[n], &vbias, Placement::Contiguous);
        let bias = with_bias.then_some(&bias);
        let shape = Ops::matmul_shape(a.desc(), b.desc(), options).unwrap();
        let mut expect_shape = batch.clone();
        expect_shape.extend([m, n]);
        prop_assert_eq!(&shape, &expect_shape);
        check_matmul(
            (&a, &b, bias.map(|t| (t, &vbias[..]))),
            (&va, &vb),
            (nb, !b_batch.is_empty()),
            (m, k, n),
            options,
            U32,
            &format!("matmul {m}x{k}x{n} batch {batch:?}/{b_batch:?} {options:?} bias {with_bias} {placement:?}"),
        );
    }
}

#[test]
fn matmul_errors_name_shapes() {
    let a = input(DType::F32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let b = input(DType::F32, &[4, 2], &[1.0; 8], Placement::Contiguous);
    let e = ops()
        .matmul(&a, &b, None, MatmulOptions::default())
        .unwrap_err();
    assert!(
        e.to_string().contains("matmul of f32[2, 3] and f32[4, 2]"),
        "{e}"
    );
    assert!(e.to_string().contains("inner extents 3 and 4"), "{e}");
    let ok = ops().matmul(
        &a,
        &b,
        None,
        MatmulOptions {
            transpose_a: true,
            transpose_b: true,
            activation: None,
        },
    );
    assert_eq!(ok.unwrap().desc().shape(), [3, 4]);
    let v = input(DType::F32, &[3], &[1.0; 3], Placement::Contiguous);
    assert!(
        ops()
            .matmul(&v, &b, None, MatmulOptions::default())
            .is_err()
    );
    let bias = input(DType::F32, &[5], &[1.0; 5], Placement::Contiguous);
    let bt = input(DType::F32, &[3, 2], &[1.0; 6], Placement::Contiguous);
    let e = ops()
        .matmul(&a, &bt, Some(&bias), MatmulOptions::default())
        .unwrap_err();
    assert!(
        e.to_string().contains("bias f32[5] must have shape [2]"),
        "{e}"
    );
    let h = input(DType::I32, &[3, 2], &[1.0; 6], Placement::Contiguous);
    assert!(
        ops()
            .matmul(&a, &h, None, MatmulOptions::default())
            .is_err()
    );
}
