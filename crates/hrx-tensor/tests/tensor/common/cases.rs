//! Elementwise cases shared by the f32 and f16 test binaries: f64
//! references, random and fixed cases checked element by element against
//! the error bounds of `bounds` (computed in the case's dtype, except f16
//! pow: see `binary_tolerance`), and the refusal of cases the kernels
//! cannot address.

use super::{bounds::*, *};
use hrx_runtime::Graph;
use hrx_tensor::{
    DType, DeviceTensor, Error, TensorDesc,
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

/// Shapes of rank 0 to 5 (4 or 5 half the time, so the kernels' four
/// axes get used) with empty, size-1 and small axes, and at most one long
/// axis (60..90, for partial workgroups): a second would make ranks 4 and
/// 5 too big for lavapipe.
pub fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    let extent =
        prop_oneof![1 => Just(0usize), 3 => Just(1usize), 6 => 2usize..6, 1 => 60usize..90];
    prop_oneof![0usize..4, 4usize..6]
        .prop_flat_map(move |rank| prop::collection::vec(extent.clone(), rank))
        .prop_map(|mut shape| {
            let mut long = false;
            for d in shape.iter_mut().filter(|d| **d >= 60) {
                if long {
                    *d = 3;
                }
                long = true;
            }
            shape
        })
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

/// Axes the elementwise and cast kernels address.
pub const MAX_AXES: usize = 4;

/// How an input sits in memory: one of the shared placements, or gapped.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    Placed(Placement),
    /// A slice one element in along every axis of a tensor longer on every
    /// axis (two longer on the last, so bf16 data never ends half-way
    /// through a word): no two axes merge, so four axes of extent above 1
    /// reach the kernels' outermost index and five exceed them.
    Gapped,
}

pub const LAYOUTS: [Layout; 4] = [
    Layout::Placed(Placement::Contiguous),
    Layout::Placed(Placement::Padded),
    Layout::Placed(Placement::Transposed),
    Layout::Gapped,
];

/// Upload `values` (row-major for `shape`) as a tensor laid out as asked.
pub fn laid_out(dtype: DType, shape: &[usize], values: &[f64], layout: Layout) -> DeviceTensor {
    let Layout::Placed(placement) = layout else {
        return gapped(dtype, shape, values);
    };
    input(dtype, shape, values, placement)
}

fn gapped(dtype: DType, shape: &[usize], values: &[f64]) -> DeviceTensor {
    let rank = shape.len();
    let wide: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(axis, &d)| d + if axis + 1 == rank { 2 } else { 1 })
        .collect();
    let mut data = vec![7.5; wide.iter().product()];
    for (i, &v) in values.iter().enumerate() {
        let at = unravel(i, shape)
            .iter()
            .zip(&wide)
            .fold(0, |acc, (k, w)| acc * w + k + 1);
        data[at] = v;
    }
    let mut t = DeviceTensor::from_values(ops().runtime(), dtype, wide, &data).unwrap();
    for (axis, &d) in shape.iter().enumerate() {
        t = t.slice(axis, 1..1 + d).unwrap();
    }
    t
}

/// `t`'s strides broadcast to `shape` (0 along broadcast axes).
pub fn strides_in(t: &DeviceTensor, shape: &[usize]) -> Vec<usize> {
    let (own, strides) = (t.desc().shape(), t.desc().strides());
    let pad = shape.len() - own.len();
    (0..shape.len())
        .map(|axis| match axis.checked_sub(pad) {
            Some(k) if own[k] != 1 => strides[k],
            _ => 0,
        })
        .collect()
}

/// The axes left of `shape` once merged as the operators document: axes
/// of extent 1 drop out, and an axis joins the one outside it when every
/// operand (`strides`, broadcast to `shape`) steps from one into the other
/// without a gap.
pub fn merged_axes(shape: &[usize], strides: &[Vec<usize>]) -> usize {
    let mut count = 0;
    let mut inner: Option<Vec<usize>> = None;
    for (axis, &d) in shape.iter().enumerate().filter(|(_, d)| **d != 1) {
        let here: Vec<usize> = strides.iter().map(|s| s[axis]).collect();
        let joins = inner
            .as_ref()
            .is_some_and(|outer| outer.iter().zip(&here).all(|(o, h)| *o == h * d));
        if !joins {
            count += 1;
        }
        inner = Some(here);
    }
    count
}

/// Assert that `record` refuses, as unsupported, an operation left with
/// more than four axes, naming it (`operation`), and queues nothing.
pub fn assert_refused(
    out: TensorDesc,
    operation: &str,
    record: impl FnOnce(&mut Graph, &DeviceTensor) -> hrx_tensor::Result<()>,
) {
    let out = ops().output(out).unwrap();
    let mut graph = ops().runtime().graph();
    let e = record(&mut graph, &out).expect_err(operation);
    assert_eq!(
        e.to_string(),
        format!("unsupported: {operation}: more than {MAX_AXES} axes remain after merging")
    );
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert!(graph.is_empty(), "{operation}: recorded work");
}

/// An operator's name in error messages (`GeluTanh` is `gelu_tanh`).
fn snake(op: impl std::fmt::Debug) -> String {
    let mut name = String::new();
    for (i, c) in format!("{op:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_lowercase());
    }
    name
}

/// `v` as `dtype` holds it.
fn rounded(dtype: DType, v: Vec<f64>) -> Vec<f64> {
    hrx_tensor::decode(
        &TensorDesc::new(dtype, vec![v.len()]).unwrap(),
        &hrx_tensor::encode(dtype, &v),
    )
    .unwrap()
}

/// Bound on the error of binary `op` on `dtype` inputs `x`, `y`. f16 pow
/// runs in f32 and rounds to f16 once: the f32 bound plus half an f16 ULP
/// (2^-11 relative) and f16's flush slack; every other op runs in its
/// dtype (common/bounds.rs).
pub fn binary_tolerance(op: BinaryOp, x: f64, y: f64, dtype: DType) -> f64 {
    if dtype == DType::F16 && op == BinaryOp::Pow {
        let r = binary_ref(op, x, y);
        binary_bound(op, x, y, &Precision::of(DType::F32))
            + Precision::of(DType::F16).u * r.abs()
            + 4.0 * 2f64.powi(-14)
    } else {
        binary_bound(op, x, y, &Precision::of(dtype))
    }
}

/// Check binary `op` on `dtype` operands of the given shapes and layouts,
/// with random non-zero values (pow: positive bases), into a poisoned
/// output: against the f64 reference, or, when more than four axes remain
/// after merging, the refusal. Returns the axes left.
pub fn check_binary_case(
    op: BinaryOp,
    dtype: DType,
    (sa, la): (&[usize], Layout),
    (sb, lb): (&[usize], Layout),
    rng: &mut Gen,
) -> usize {
    let out_shape = hrx_tensor::ops::broadcast_shapes(sa, sb).unwrap();
    let (lo, hi) = if op == BinaryOp::Pow {
        (0.2, 3.0)
    } else {
        (-4.0, 4.0)
    };
    let va = rounded(dtype, values(rng, sa.iter().product(), lo, hi));
    let vb = rounded(dtype, values(rng, sb.iter().product(), lo, hi));
    let a = laid_out(dtype, sa, &va, la);
    let b = laid_out(dtype, sb, &vb, lb);
    let out_desc = TensorDesc::new(dtype, out_shape.clone()).unwrap();
    let record = |g: &mut Graph, out: &DeviceTensor| ops().record_binary(g, op, &a, &b, out);
    let n: usize = out_shape.iter().product();
    let axes = merged_axes(
        &out_shape,
        &[strides_in(&a, &out_shape), strides_in(&b, &out_shape)],
    );
    if axes > MAX_AXES && n > 0 {
        let operation = format!("{} of {} and {}", snake(op), a.desc(), b.desc());
        assert_refused(out_desc, &operation, record);
        return axes;
    }
    let got = run(&[&a, &b], out_desc, record).unwrap();
    let pairs: Vec<(f64, f64)> = (0..n)
        .map(|i| {
            let index = unravel(i, &out_shape);
            (
                va[ravel_broadcast(&index, sa)],
                vb[ravel_broadcast(&index, sb)],
            )
        })
        .collect();
    let want: Vec<f64> = pairs.iter().map(|&(x, y)| binary_ref(op, x, y)).collect();
    let tol: Vec<f64> = pairs
        .iter()
        .map(|&(x, y)| binary_tolerance(op, x, y, dtype))
        .collect();
    assert_within(
        &got,
        &want,
        &tol,
        &format!("{op:?} {dtype} {sa:?}({la:?}) {sb:?}({lb:?})"),
    );
    axes
}

/// Check unary `op` on a `dtype` input of `shape` laid out as asked, with
/// random non-zero values in the op's range, into a poisoned output, as
/// `check_binary_case` does. Returns the axes left.
pub fn check_unary_case(
    op: UnaryOp,
    dtype: DType,
    shape: &[usize],
    layout: Layout,
    rng: &mut Gen,
) -> usize {
    let (lo, hi) = unary_range(op);
    let v = rounded(dtype, values(rng, shape.iter().product(), lo, hi));
    let a = laid_out(dtype, shape, &v, layout);
    let out_desc = TensorDesc::new(dtype, shape.to_vec()).unwrap();
    let record = |g: &mut Graph, out: &DeviceTensor| ops().record_unary(g, op, &a, out);
    let axes = merged_axes(shape, &[a.desc().strides().to_vec()]);
    if axes > MAX_AXES && !v.is_empty() {
        let operation = format!("{} of {}", snake(op), a.desc());
        assert_refused(out_desc, &operation, record);
        return axes;
    }
    let got = run(&[&a], out_desc, record).unwrap();
    let want: Vec<f64> = v.iter().map(|&x| unary_ref(op, x)).collect();
    let precision = Precision::of(dtype);
    let tol: Vec<f64> = v.iter().map(|&x| unary_bound(op, x, &precision)).collect();
    assert_within(
        &got,
        &want,
        &tol,
        &format!("{op:?} {dtype} {shape:?} ({layout:?})"),
    );
    axes
}

/// Binary `op` on operands broadcast from `shape` in random layouts.
pub fn check_binary(op: BinaryOp, shape: &[usize], seed: u64, dtype: DType) {
    let mut rng = Gen::new(seed);
    let sa = broadcast_operand(&mut rng, shape);
    let sb = broadcast_operand(&mut rng, shape);
    let la = LAYOUTS[rng.below(LAYOUTS.len())];
    let lb = LAYOUTS[rng.below(LAYOUTS.len())];
    check_binary_case(op, dtype, (&sa, la), (&sb, lb), &mut rng);
}

/// Unary `op` on `shape` in a random layout.
pub fn check_unary(op: UnaryOp, shape: &[usize], seed: u64, dtype: DType) {
    let mut rng = Gen::new(seed);
    let layout = LAYOUTS[rng.below(LAYOUTS.len())];
    check_unary_case(op, dtype, shape, layout, &mut rng);
}

/// Every operator on two different inputs of 301 elements (a full
/// workgroup of 256 and a partial one; aligned f32 runs take 75 quads of
/// the 4-wide kernel and a tail of one), contiguous and padded.
pub fn check_every_op(dtype: DType) {
    let mut rng = Gen::new(1);
    let contiguous = Layout::Placed(Placement::Contiguous);
    for layout in [contiguous, Layout::Placed(Placement::Padded)] {
        for op in BINARY {
            check_binary_case(op, dtype, (&[301], layout), (&[301], contiguous), &mut rng);
        }
        for op in UNARY {
            check_unary_case(op, dtype, &[301], layout, &mut rng);
        }
    }
}

/// Four axes that do not merge, so the kernels' outermost index runs past
/// 0: gapped inputs, and broadcasting alternating between the operands.
pub fn check_four_axes(dtype: DType) {
    let mut rng = Gen::new(2);
    let contiguous = Layout::Placed(Placement::Contiguous);
    for op in BINARY {
        let gapped = (&[3, 1, 2, 4, 5][..], Layout::Gapped);
        let row = (&[3, 1, 1, 4, 1][..], contiguous);
        assert_eq!(check_binary_case(op, dtype, gapped, row, &mut rng), 4);
        let (a, b) = (&[3, 1, 4, 1][..], &[1, 2, 1, 5][..]);
        let axes = check_binary_case(op, dtype, (a, contiguous), (b, contiguous), &mut rng);
        assert_eq!(axes, 4);
    }
    for op in UNARY {
        let axes = check_unary_case(op, dtype, &[3, 2, 1, 4, 5], Layout::Gapped, &mut rng);
        assert_eq!(axes, 4);
    }
}

/// Pow's special cases: a negative base with odd and even integer
/// exponents and with a fractional one (NaN), a zero exponent, a negative
/// one. Eager, so the output starts zeroed: no expected value is 0, and
/// the NaN must come from the kernel, not from poison.
pub fn check_pow_signs(dtype: DType) {
    let x = [-2.0, -2.0, -2.0, 3.0, 0.5, -3.0];
    let y = [3.0, 2.0, 0.5, 0.0, -1.0, 1.0];
    let contiguous = Placement::Contiguous;
    let (a, b) = (
        input(dtype, &[6], &x, contiguous),
        input(dtype, &[6], &y, contiguous),
    );
    let got = ops()
        .binary(BinaryOp::Pow, &a, &b)
        .unwrap()
        .to_values()
        .unwrap();
    let want = [-8.0, 4.0, f64::NAN, 1.0, 2.0, -3.0];
    let tol: Vec<f64> = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| binary_tolerance(BinaryOp::Pow, x, y, dtype))
        .collect();
    assert_within(&got, &want, &tol, &format!("pow {dtype}"));
}
