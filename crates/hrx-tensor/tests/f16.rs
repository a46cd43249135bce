//! f16 elementwise operators (computed in f16) against f64 references.
//! Tolerances: per element, the worst-case error of the kernel's formula
//! in f16 arithmetic (unit roundoff 2^-11, common/bounds.rs), e.g. exp
//! within 3 + 2|x| ULP: exp(5.7) may be 1.2 off 297.5 (a fixed 4e-3
//! relative tolerance failed there by chance), while any misplaced or
//! unwritten element still fails.

mod common;

use common::cases::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn f16_binary_ops_broadcast(shape in shape_strategy(), seed in any::<u64>()) {
        check_binary(&shape, seed, true);
    }

    #[test]
    fn f16_unary_ops(shape in shape_strategy(), seed in any::<u64>()) {
        check_unary(&shape, seed, true);
    }
}
