//! The host launch program: checked u64 arithmetic to a u32 grid.

use hrx_loom::launch::{LaunchBinary, LaunchCmp, LaunchInst, LaunchProgram};

/// groups = (n + 255) / 256, then (groups, 1, 1).
fn ceil_div_program() -> LaunchProgram {
    use LaunchInst::*;
    LaunchProgram {
        arg_count: 1,
        insts: vec![
            Arg(0),
            Const(255),
            Const(256),
            Const(1),
            Binary(LaunchBinary::Add, 0, 1),
            Binary(LaunchBinary::Div, 4, 2),
        ],
        workgroups: [5, 3, 3],
    }
}

#[test]
fn evaluates_ceil_division() {
    let p = ceil_div_program();
    assert_eq!(p.evaluate(&[0]).unwrap(), [0, 1, 1]);
    assert_eq!(p.evaluate(&[1]).unwrap(), [1, 1, 1]);
    assert_eq!(p.evaluate(&[256]).unwrap(), [1, 1, 1]);
    assert_eq!(p.evaluate(&[257]).unwrap(), [2, 1, 1]);
}

#[test]
fn wrong_arity_is_an_error() {
    let p = ceil_div_program();
    assert!(p.evaluate(&[]).is_err());
    assert!(p.evaluate(&[1, 2]).is_err());
}

#[test]
fn overflow_and_division_by_zero_are_errors() {
    let p = ceil_div_program();
    let e = p.evaluate(&[u64::MAX]).unwrap_err().to_string();
    assert!(e.contains("overflow"), "{e}");
    use LaunchInst::*;
    let div0 = LaunchProgram {
        arg_count: 1,
        insts: vec![Const(8), Arg(0), Binary(LaunchBinary::Rem, 0, 1)],
        workgroups: [2, 2, 2],
    };
    assert!(
        div0.evaluate(&[0])
            .unwrap_err()
            .to_string()
            .contains("zero")
    );
    assert_eq!(div0.evaluate(&[3]).unwrap(), [2, 2, 2]);
}

#[test]
fn counts_past_u32_are_errors() {
    let p = ceil_div_program();
    // (2^40 + 255) / 256 = 2^32: one past u32::MAX.
    let e = p.evaluate(&[1 << 40]).unwrap_err().to_string();
    assert!(e.contains("exceeds u32"), "{e}");
    assert_eq!(p.evaluate(&[(1 << 40) - 256]).unwrap()[0], u32::MAX);
}

#[test]
fn madd_cmp_select_and_narrowing() {
    use LaunchInst::*;
    let p = LaunchProgram {
        arg_count: 2,
        insts: vec![
            Arg(0),
            Arg(1),
            Madd(0, 1, 0),            // r2 = a*b + a
            Cmp(LaunchCmp::Lt, 0, 1), // r3 = a < b
            Select(3, 2, 1),          // r4 = a < b ? r2 : b
            Narrow32(4),              // r5
            Binary(LaunchBinary::Min, 0, 1),
            Binary(LaunchBinary::Max, 0, 1),
        ],
        workgroups: [5, 6, 7],
    };
    assert_eq!(p.evaluate(&[2, 3]).unwrap(), [8, 2, 3]);
    assert_eq!(p.evaluate(&[5, 3]).unwrap(), [3, 3, 5]);
    let e = p.evaluate(&[1 << 20, 1 << 20]).unwrap();
    assert_eq!(e, [1 << 20, 1 << 20, 1 << 20]);
    assert!(p.evaluate(&[1 << 20, (1 << 20) + 1]).is_err());
}

#[test]
fn subtraction_below_zero_is_an_error() {
    use LaunchInst::*;
    let p = LaunchProgram {
        arg_count: 1,
        insts: vec![Arg(0), Const(1), Binary(LaunchBinary::Sub, 0, 1)],
        workgroups: [2, 1, 1],
    };
    assert_eq!(p.evaluate(&[5]).unwrap(), [4, 1, 1]);
    assert!(p.evaluate(&[0]).is_err());
}

#[test]
fn malformed_programs_are_rejected_not_panicking() {
    use LaunchInst::*;
    let forward = LaunchProgram {
        arg_count: 0,
        insts: vec![Binary(LaunchBinary::Add, 0, 1), Const(1)],
        workgroups: [1, 1, 1],
    };
    assert!(forward.evaluate(&[]).is_err());
    let bad_arg = LaunchProgram {
        arg_count: 0,
        insts: vec![Arg(3)],
        workgroups: [0, 0, 0],
    };
    assert!(bad_arg.evaluate(&[]).is_err());
    let bad_out = LaunchProgram {
        arg_count: 0,
        insts: vec![Const(1)],
        workgroups: [0, 0, 9],
    };
    assert!(bad_out.evaluate(&[]).is_err());
}

#[test]
fn fold_finds_constants_only() {
    let p = ceil_div_program();
    let f = p.fold().unwrap();
    assert_eq!(f[0], None);
    assert_eq!(f[2], Some(256));
    assert_eq!(f[5], None);
}
