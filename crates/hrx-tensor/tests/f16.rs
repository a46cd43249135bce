//! f16 elementwise operators (computed in f16) against f64 references.
//! Tolerances: atol 2e-3 + rtol 4e-3 (binary), 4e-3 + 4e-3 (unary).

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
