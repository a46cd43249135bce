//! Elementwise cases shared by the f32 and f16 test binaries: f64
//! references and one random case per call, checked element by element
//! against the error bounds of `bounds` (computed in the case's dtype).

use super::{bounds::*, *};
use hrx_tensor::{
    DType, TensorDesc,
    ops::{BinaryOp, UnaryOp},
};
use proptest::prelude::*;

pub const BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::Pow,
];

pub fn binary_ref(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
        BinaryOp::Pow => x.powf(y),
    }
}

pub const UNARY: [UnaryOp; 12] = UnaryOp::ALL;

pub fn erf(x: f64) -> f64 {
    // Series / continued fraction free: integrate with Simpson (f64 is ample).
    let n = 2000;
    let h = x / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(x);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
}

pub fn unary_ref(op: UnaryOp, x: f64) -> f64 {
    let sigmoid = 1.0 / (1.0 + (-x).exp());
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid,
        UnaryOp::Relu => x.max(0.0),
        UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        UnaryOp::GeluTanh => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::Silu => x * sigmoid,
    }
}

/// Value ranges where the reference is defined and well conditioned.
pub fn unary_range(op: UnaryOp) -> (f64, f64) {
    match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.1, 8.0),
        UnaryOp::Exp => (-6.0, 6.0),
        _ => (-4.0, 4.0),
    }
}

pub fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![1 => Just(0usize), 3 => Just(1usize), 6 => 2usize..7, 1 => 60usize..90],
        0..4,
    )
}

/// A shape that broadcasts to `out`: some axes set to 1, some leading
/// axes dropped.
pub fn broadcast_operand(rng: &mut Gen, out: &[usize]) -> Vec<usize> {
    let drop = rng
        .below(out.len() + 1)
        .min(if rng.below(2) == 0 { 0 } else { out.len() });
    out[drop..]
        .iter()
        .map(|&d| if rng.below(3) == 0 { 1 } else { d })
        .collect()
}

/// One random binary case (f16 when asked and the op has an f16 form).
pub fn check_binary(shape: &[usize], seed: u64, f16: bool) {
    let shape = shape.to_vec();
    {
        let mut rng = Gen::new(seed);
        let op = BINARY[rng.below(BINARY.len())];
        let dtype = if f16 && op != BinaryOp::Pow {
            DType::F16
        } else {
            DType::F32
        };
        let (sa, sb) = (
            broadcast_operand(&mut rng, &shape),
            broadcast_operand(&mut rng, &shape),
        );
        let out_shape = hrx_tensor::ops::broadcast_shapes(&sa, &sb).unwrap();
        let (lo, hi) = if op == BinaryOp::Pow {
            (0.2, 3.0)
        } else {
            (-4.0, 4.0)
        };
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let round = |v: Vec<f64>| {
            hrx_tensor::decode(
                &TensorDesc::new(dtype, vec![v.len()]).unwrap(),
                &hrx_tensor::encode(dtype, &v),
            )
            .unwrap()
        };
        let (va, vb) = (
            round(values(&mut rng, na, lo, hi)),
            round(values(&mut rng, nb, lo, hi)),
        );
        let pa = PLACEMENTS[rng.below(3)];
        let pb = PLACEMENTS[rng.below(3)];
        let a = input(dtype, &sa, &va, pa);
        let b = input(dtype, &sb, &vb, pb);
        let out_desc = TensorDesc::new(dtype, out_shape.clone()).unwrap();
        let got = run(&[&a, &b], out_desc, |g, out| {
            ops().record_binary(g, op, &a, &b, out)
        })
        .unwrap();
        let n: usize = out_shape.iter().product();
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let index = unravel(i, &out_shape);
                binary_ref(
                    op,
                    va[ravel_broadcast(&index, &sa)],
                    vb[ravel_broadcast(&index, &sb)],
                )
            })
            .collect();
        let precision = Precision::of(dtype);
        let tol: Vec<f64> = (0..n)
            .map(|i| {
                let index = unravel(i, &out_shape);
                binary_bound(
                    op,
                    va[ravel_broadcast(&index, &sa)],
                    vb[ravel_broadcast(&index, &sb)],
                    &precision,
                )
            })
            .collect();
        assert_within(
            &got,
            &want,
            &tol,
            &format!("{op:?} {dtype} {sa:?}({pa:?}) {sb:?}({pb:?})"),
        );
    }
}

/// One random unary case.
pub fn check_unary(shape: &[usize], seed: u64, f16: bool) {
    let shape = shape.to_vec();
    {
        let mut rng = Gen::new(seed);
        let op = UNARY[rng.below(UNARY.len())];
        let dtype = if f16 { DType::F16 } else { DType::F32 };
        let (lo, hi) = unary_range(op);
        let n: usize = shape.iter().product();
        let v = hrx_tensor::decode(
            &TensorDesc::new(dtype, vec![n]).unwrap(),
            &hrx_tensor::encode(dtype, &values(&mut rng, n, lo, hi)),
        )
        .unwrap();
        let placement = PLACEMENTS[rng.below(3)];
        let a = input(dtype, &shape, &v, placement);
        let got = run(
            &[&a],
            TensorDesc::new(dtype, shape.clone()).unwrap(),
            |g, out| ops().record_unary(g, op, &a, out),
        )
        .unwrap();
        let want: Vec<f64> = v.iter().map(|&x| unary_ref(op, x)).collect();
        let precision = Precision::of(dtype);
        let tol: Vec<f64> = v.iter().map(|&x| unary_bound(op, x, &precision)).collect();
        assert_within(
            &got,
            &want,
            &tol,
            &format!("{op:?} {dtype} {shape:?} ({placement:?})"),
        );
    }
}
