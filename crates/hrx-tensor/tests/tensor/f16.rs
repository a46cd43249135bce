//! f16 elementwise operators against f64 references. Tolerances: per
//! element, the worst-case error of the kernel's formula in f16 arithmetic
//! (unit roundoff 2^-11, common/bounds.rs), e.g. exp within 3 + 2|x| ULP:
//! exp(5.7) may be 1.2 off 297.5 (a fixed 4e-3 relative tolerance failed
//! there by chance), while any misplaced or unwritten element still fails.
//! Pow is computed in f32 and rounded once: the f32 bound plus 2^-11
//! relative (common/cases.rs, `binary_tolerance`). Each random case runs
//! every operator, so none goes untested in a run.

use crate::common::cases::*;
use hrx_tensor::DType;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn f16_binary_ops_broadcast(shape in shape_strategy(), seed in any::<u64>()) {
        for (k, op) in BINARY.into_iter().enumerate() {
            check_binary(op, &shape, seed.wrapping_add(k as u64), DType::F16);
        }
    }

    #[test]
    fn f16_unary_ops(shape in shape_strategy(), seed in any::<u64>()) {
        for (k, op) in UNARY.into_iter().enumerate() {
            check_unary(op, &shape, seed.wrapping_add(k as u64), DType::F16);
        }
    }
}

#[test]
fn every_f16_op_runs_on_a_partial_workgroup() {
    check_every_op(DType::F16);
}

#[test]
fn f16_four_unmergeable_axes_reach_the_outermost_index() {
    check_four_axes(DType::F16);
}

#[test]
fn f16_pow_handles_signs_and_zero_exponents() {
    check_pow_signs(DType::F16);
}
