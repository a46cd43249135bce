//! Elementwise operators against f64 references: broadcasting, strided
//! and unaligned inputs, size-1 and empty axes, partial workgroups.
//! Tolerances (random cases, here and in f16.rs): per element, the
//! worst-case error of the kernel's formula in the dtype's arithmetic
//! (common/bounds.rs): add, sub and mul within 1 ULP (2^-23 |r| in f32),
//! div 2.5 ULP, max, min, neg, abs and relu exact, exp 3 + 2|x|
//! ULP, log 3 ULP or 2^-21 absolute near 1, pow through exp(y log|x|),
//! sigmoid, silu and both GELUs through their formulas (cancellation in
//! `1 + tanh` counted absolutely). Measured on lavapipe over every f16
//! input in range and millions of f32 inputs per op: errors reach at most
//! 0.7 of these bounds (f32 exp near 0.05: 2.1 of its 3.1 ULP).
//! Each random case runs every operator (on its own operands, layouts
//! and values); the fixed cases below keep their own tolerances.

use crate::common::{cases::*, *};
use hrx_tensor::{
    DType, TensorDesc,
    ops::{BinaryOp, UnaryOp},
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn binary_ops_broadcast(shape in shape_strategy(), seed in any::<u64>()) {
        for (k, op) in BINARY.into_iter().enumerate() {
            check_binary(op, &shape, seed.wrapping_add(k as u64), DType::F32);
        }
    }

    #[test]
    fn unary_ops(shape in shape_strategy(), seed in any::<u64>()) {
        for (k, op) in UNARY.into_iter().enumerate() {
            check_unary(op, &shape, seed.wrapping_add(k as u64), DType::F32);
        }
    }
}

#[test]
fn every_op_compiles_and_runs_on_a_partial_workgroup() {
    check_every_op(DType::F32);
}

#[test]
fn four_unmergeable_axes_reach_the_outermost_index() {
    check_four_axes(DType::F32);
}

#[test]
fn more_than_four_unmergeable_axes_are_refused() {
    // Contiguous operands broadcast along alternating axes: no two of the
    // five axes merge.
    let a = input(
        DType::F32,
        &[2, 1, 2, 1, 2],
        &[1.5; 8],
        Placement::Contiguous,
    );
    let b = input(
        DType::F32,
        &[1, 3, 1, 3, 1],
        &[2.5; 9],
        Placement::Contiguous,
    );
    let out = TensorDesc::new(DType::F32, vec![2, 3, 2, 3, 2]).unwrap();
    assert_refused(
        out,
        "sub of f32[2, 1, 2, 1, 2] and f32[1, 3, 1, 3, 1]",
        |g, out| ops().record_binary(g, BinaryOp::Sub, &a, &b, out),
    );
    let e = ops().binary(BinaryOp::Sub, &a, &b).unwrap_err();
    assert!(e.to_string().contains("more than 4 axes remain"), "{e}");
    // Slices gapped along five axes (the messages carry the strides).
    let mut rng = Gen::new(4);
    let five = (&[2, 3, 2, 3, 2][..], Layout::Gapped);
    let plain = (&[2, 3, 2, 3, 2][..], Layout::Placed(Placement::Contiguous));
    for op in BINARY {
        assert_eq!(check_binary_case(op, DType::F32, five, plain, &mut rng), 5);
        assert_eq!(check_binary_case(op, DType::F32, plain, five, &mut rng), 5);
    }
    for op in UNARY {
        assert_eq!(
            check_unary_case(op, DType::F32, five.0, five.1, &mut rng),
            5
        );
    }
    // Empty tensors need no kernel, however many axes they have.
    let empty = (&[2, 3, 0, 3, 2][..], Layout::Gapped);
    check_binary_case(BinaryOp::Add, DType::F32, empty, empty, &mut rng);
    check_unary_case(UnaryOp::Exp, DType::F32, empty.0, empty.1, &mut rng);
}

#[test]
fn pow_handles_signs_and_zero_exponents() {
    check_pow_signs(DType::F32);
}

#[test]
fn mismatches_are_errors_and_record_nothing() {
    let f = input(DType::F32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let g3 = input(DType::F32, &[4], &[1.0; 4], Placement::Contiguous);
    let h = input(DType::F16, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let i = input(DType::I32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let out = ops()
        .output(TensorDesc::new(DType::F32, vec![2, 3]).unwrap())
        .unwrap();
    let mut graph = ops().runtime().graph();
    let e = ops()
        .record_binary(&mut graph, BinaryOp::Add, &f, &g3, &out)
        .unwrap_err();
    assert!(e.to_string().contains("add of f32[2, 3] and f32[4]"), "{e}");
    assert!(e.to_string().contains("do not broadcast"), "{e}");
    let e = ops()
        .record_binary(&mut graph, BinaryOp::Mul, &f, &h, &out)
        .unwrap_err();
    assert!(e.to_string().contains("dtypes differ"), "{e}");
    let e = ops()
        .record_unary(
            &mut graph,
            UnaryOp::Exp,
            &i,
            &ops().output(i.desc().clone()).unwrap(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("dtype i32"), "{e}");
    let wrong = ops()
        .output(TensorDesc::new(DType::F32, vec![3, 2]).unwrap())
        .unwrap();
    let e = ops()
        .record_unary(&mut graph, UnaryOp::Exp, &f, &wrong)
        .unwrap_err();
    assert!(e.to_string().contains("output f32[3, 2]"), "{e}");
    let other = hrx_tensor::Ops::new(&hrx_runtime::Runtime::from_env().unwrap());
    let e = other.unary(UnaryOp::Neg, &f).unwrap_err();
    assert!(e.to_string().contains("another runtime domain"), "{e}");
    assert!(ops().binary(BinaryOp::Add, &f, &g3).is_err());
    assert!(graph.is_empty());
}

#[test]
fn contiguous_runs_at_every_alignment_and_tail() {
    // Slices of one long vector starting 0..5 elements in, lengths with
    // every remainder mod 4: the 4-wide kernel takes the aligned runs, the
    // strided kernel the tails and the unaligned starts.
    let mut rng = Gen::new(7);
    let v = values(&mut rng, 1040, -4.0, 4.0);
    let w = values(&mut rng, 1040, -4.0, 4.0);
    let a = input(DType::F32, &[1040], &v, Placement::Contiguous);
    let b = input(DType::F32, &[1040], &w, Placement::Contiguous);
    for start in 0..5 {
        for len in [1usize, 4, 7, 1025, 1030] {
            let (sa, sb) = (
                a.slice(0, start..start + len).unwrap(),
                b.slice(0, 4 - start % 4..4 - start % 4 + len).unwrap(),
            );
            let desc = TensorDesc::new(DType::F32, vec![len]).unwrap();
            let got = run(&[&sa, &sb], desc.clone(), |g, out| {
                ops().record_binary(g, BinaryOp::Sub, &sa, &sb, out)
            })
            .unwrap();
            let want: Vec<f64> = (0..len)
                .map(|i| v[start + i] - w[4 - start % 4 + i])
                .collect();
            assert_close(&got, &want, 1e-6, 1e-5, &format!("sub {start} {len}"));
            let got = run(&[&sa], desc, |g, out| {
                ops().record_unary(g, UnaryOp::Gelu, &sa, out)
            })
            .unwrap();
            let want: Vec<f64> = (0..len)
                .map(|i| unary_ref(UnaryOp::Gelu, v[start + i]))
                .collect();
            assert_close(&got, &want, 2e-6, 2e-5, &format!("gelu {start} {len}"));
        }
    }
}

#[test]
fn gelu_matches_erf_across_the_range_and_pairs_of_quads() {
    // Three whole chunks of the 4-wide kernel (512 quads a workgroup), a
    // last chunk where invocations take two quads, one or none, and a tail
    // of three elements for the strided kernel.
    let n = 3 * 2048 + 4 * 300 + 3;
    let mut v: Vec<f64> = (0..n)
        .map(|i| -12.0 + 24.0 * i as f64 / (n - 1) as f64)
        .collect();
    let specials = [
        (f64::INFINITY, f64::INFINITY),
        (f64::NEG_INFINITY, 0.0),
        (f64::NAN, f64::NAN),
        (0.0, 0.0),
        (-1e30, 0.0),
        (3e38, 3e38),
        (1e-30, 5e-31),
    ];
    for (k, &(x, _)) in specials.iter().enumerate() {
        v[k * 997] = x;
    }
    let a = input(DType::F32, &[n], &v, Placement::Contiguous);
    let got = ops().unary(UnaryOp::Gelu, &a).unwrap().to_values().unwrap();
    let mut want: Vec<f64> = v
        .iter()
        .map(|&x| unary_ref(UnaryOp::Gelu, (x as f32) as f64))
        .collect();
    for (k, &(_, w)) in specials.iter().enumerate() {
        want[k * 997] = w;
    }
    assert_close(&got, &want, 1e-6, 1e-6, "gelu");
    let w: Vec<f64> = (0..n).map(|i| (i % 97) as f64 - 48.0).collect();
    let b = input(DType::F32, &[n], &w, Placement::Contiguous);
    let c = input(DType::F32, &[n], &v[..], Placement::Contiguous);
    let sum = ops()
        .binary(BinaryOp::Add, &b, &c)
        .unwrap()
        .to_values()
        .unwrap();
    let want: Vec<f64> = w
        .iter()
        .zip(&v)
        .map(|(&p, &q)| ((p as f32) + (q as f32)) as f64)
        .collect();
    assert_close(&sum, &want, 0.0, 0.0, "add");
}
